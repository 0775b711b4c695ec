// INT4 experts for the MoE CPU emulation (moe_emu.cpp --int4, --int4-dec) and the INT4 MoE lab
// (moe_int4_lab.cu): random 4-bit codes with power-of-two group scales written into a
// moe_ref.h HostExperts' bf16 weights (exactly) and packed in the device INT4 layout
// (src/backend/int4_layout.h) beside them, so that moe_ref's bf16 reference is the INT4 reference.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "moe_ref.h"

namespace moe_ref {

// INT4 experts : every expert matrix of `h` replaced by random 4-bit values q = u − 8 (u uniform in
// 0..15, stored as q's two's complement nibble) with a
// power-of-two scale per (row, group) in 2^[-9, -6] (so the dequantised q·scale is exact in
// bf16: `h`'s bf16 weights become exactly the INT4 weights and moe_ref's bf16 reference applies),
// packed in the device INT4 layout (backend/int4_layout.h) beside them.
struct Int4Experts {
    std::vector<std::vector<uint32_t>> codes;  // per matrix
    std::vector<std::vector<uint8_t>> scales;  // per matrix, the device layout's bytes (INT4: bf16; NVFP4: E4M3)
    std::vector<const uint32_t*> gq, uq, dq;
    std::vector<const void*> gs, us, ds;
    int group = 0;
    std::vector<float> global;  // NVFP4 (make_nvfp4_experts): [3 (E + 1)] globals; empty for INT4
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
                codes[(size_t(r) * cols + c) / 8] |= (u ^ 8u) << (4 * (c % 8));  // q = u − 8 in two's complement
                w[size_t(r) * cols + c] = f2bf(float(int(u) - 8) * sc);
            }
        }
    q.codes.push_back(std::move(codes));
    std::vector<uint8_t> bytes(scales.size() * 2);
    std::memcpy(bytes.data(), scales.data(), bytes.size());
    q.scales.push_back(std::move(bytes));
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

// NVFP4 experts: random E2M1 codes, per (row, 16-block) an E4M3 scale byte of 2^[-9, -6] (the
// subnormal bytes 0x01, 0x02, 0x04 and the normal 0x08) and per matrix a random global 2^[-3, -1]: e2m1 · scale · global has at most 2 significant bits, so `h`'s bf16 weights become
// exactly the NVFP4 weights and moe_ref's bf16 reference applies; packed in the device NVFP4 layout
// (src/backend/nvfp4_layout.h: nibbles in the INT4 order, the E4M3 scale bytes, group 16).
inline void nvfp4_matrix(uint16_t* w, int rows, int cols, float global, Rng& rng, Int4Experts& q) {
    static const float e2m1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
    std::vector<uint32_t> codes(size_t(rows) * cols / 8, 0);
    std::vector<uint8_t> scales(size_t(rows) * (cols / 16));
    static const uint8_t e4m3[4] = {0x01, 0x02, 0x04, 0x08};  // 2^−9, 2^−8, 2^−7 (subnormal), 2^−6
    for (int r = 0; r < rows; ++r)
        for (int g = 0; g < cols / 16; ++g) {
            const int k = int(rng.next() % 4);
            const float sc = std::ldexp(1.0f, -9 + k);
            scales[size_t(r) * (cols / 16) + g] = e4m3[k];
            for (int c = g * 16; c < (g + 1) * 16; ++c) {
                const uint32_t u = uint32_t(rng.next() % 16);
                codes[(size_t(r) * cols + c) / 8] |= u << (4 * (c % 8));
                w[size_t(r) * cols + c] = f2bf(e2m1[u] * sc * global);
            }
        }
    q.codes.push_back(std::move(codes));
    q.scales.push_back(std::move(scales));
    q.global.push_back(global);
}

inline Int4Experts make_nvfp4_experts(HostExperts& h, Rng& rng) {
    Int4Experts q;
    q.group = 16;
    const Shape& s = h.s;
    q.codes.reserve(size_t(3 * (s.E + 1)));
    q.scales.reserve(size_t(3 * (s.E + 1)));
    auto glob = [&] { return std::ldexp(1.0f, -1 - int(rng.next() % 3)); };
    for (int e = 0; e <= s.E; ++e) {
        const int Ie = h.Ie(e);
        nvfp4_matrix(&h.gate[h.gu_off[e]], Ie, s.H, glob(), rng, q);
        q.gq.push_back(q.codes.back().data()), q.gs.push_back(q.scales.back().data());
        nvfp4_matrix(&h.up[h.gu_off[e]], Ie, s.H, glob(), rng, q);
        q.uq.push_back(q.codes.back().data()), q.us.push_back(q.scales.back().data());
        nvfp4_matrix(&h.down[h.d_off[e]], s.H, Ie, glob(), rng, q);
        q.dq.push_back(q.codes.back().data()), q.ds.push_back(q.scales.back().data());
    }
    return q;
}

}  // namespace moe_ref
