// INT4 experts for the MoE CPU emulation (moe_emu.cpp --int4, --int4-dec) and the INT4 MoE lab
// (moe_int4_lab.cu): random 4-bit codes with power-of-two group scales written into a
// moe_ref.h HostExperts' bf16 weights (exactly) and packed in the device INT4 layout
// (src/backend/int4_layout.h) beside them, so that moe_ref's bf16 reference is the INT4 reference.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "moe_ref.h"

namespace moe_ref {

// INT4 experts : every expert matrix of `h` replaced by random 4-bit codes u with a
// power-of-two scale per (row, group) in 2^[-9, -6] (so the dequantised (u − 8)·scale is exact in
// bf16: `h`'s bf16 weights become exactly the INT4 weights and moe_ref's bf16 reference applies),
// packed in the device INT4 layout (backend/int4_layout.h) beside them.
struct Int4Experts {
    std::vector<std::vector<uint32_t>> codes;  // per matrix
    std::vector<std::vector<uint16_t>> scales;
    std::vector<const uint32_t*> gq, uq, dq;
    std::vector<const uint16_t*> gs, us, ds;
    int group = 0;
};

inline void int4_matrix(uint16_t* w, int rows, int cols, int group, Rng& rng, Int4Experts& q) {
    std::vector<uint32_t> codes(size_t(rows) * cols / 8, 0);
    std::vector<uint16_t> scales(size_t(rows) * (cols / group));
    for (int r = 0; r < rows; ++r)
        for (int g = 0; g < cols / group; ++g) {
            const float sc = std::ldexp(1.0f, -9 + int(rng.next() % 4));
            scales[size_t(r) * (cols / group) + g] = f2bf(sc);
            for (int c = g * group; c < (g + 1) * group; ++c) {
                const uint32_t u = uint32_t(rng.next() % 16);
                codes[(size_t(r) * cols + c) / 8] |= u << (4 * (c % 8));
                w[size_t(r) * cols + c] = f2bf(float(int(u) - 8) * sc);
            }
        }
    q.codes.push_back(std::move(codes));
    q.scales.push_back(std::move(scales));
}

inline Int4Experts make_int4_experts(HostExperts& h, int group, Rng& rng) {
    Int4Experts q;
    q.group = group;
    const Shape& s = h.s;
    q.codes.reserve(size_t(3 * (s.E + 1)));
    q.scales.reserve(size_t(3 * (s.E + 1)));
    for (int e = 0; e <= s.E; ++e) {
        const int Ie = h.Ie(e);
        int4_matrix(&h.gate[h.gu_off[e]], Ie, s.H, group, rng, q);
        q.gq.push_back(q.codes.back().data()), q.gs.push_back(q.scales.back().data());
        int4_matrix(&h.up[h.gu_off[e]], Ie, s.H, group, rng, q);
        q.uq.push_back(q.codes.back().data()), q.us.push_back(q.scales.back().data());
        int4_matrix(&h.down[h.d_off[e]], s.H, Ie, group, rng, q);
        q.dq.push_back(q.codes.back().data()), q.ds.push_back(q.scales.back().data());
    }
    return q;
}

}  // namespace moe_ref
