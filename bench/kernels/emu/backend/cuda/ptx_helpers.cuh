// Emulated stand-in for src/backend/cuda/ptx_helpers.cuh (same names and semantics), used by the
// host SIMT emulator (emu_prelude.h). Fragment layouts follow the PTX ISA text for
// ldmatrix.m8n8.x4(.trans).b16 and mma.m16n8k16.row.col, written independently of the kernels.
// Covers what the attention kernels use (prmt, used by the MoE GEMM only, is emulated in
// bench/kernels/moe_emu_shim.h).
#pragma once

#include <cstdint>
#include <cstring>
#include <utility>

namespace qs::cuda::ptx {

inline uint8_t* dynamic_smem() { return emu::g_smem.data(); }

inline uint32_t smem_u32(const void* p) {
    const auto* b = static_cast<const uint8_t*>(p);
    if (b < emu::g_smem.data() || b > emu::g_smem.data() + emu::g_smem.size()) {
        std::fprintf(stderr, "emu: smem_u32 of a pointer outside dynamic shared memory\n");
        std::abort();
    }
    return uint32_t(b - emu::g_smem.data());
}

inline void cp_async16(uint32_t dst, const void* src, int src_bytes) {
    if (dst % 16 != 0 || (reinterpret_cast<uintptr_t>(src) % 16 != 0 && src_bytes > 0)) {
        std::fprintf(stderr, "emu: misaligned cp.async (dst %u)\n", dst);
        std::abort();
    }
    uint8_t* d = emu::smem_ptr(dst, 16);
    if (emu::g_mode == 1) {  // lands at once
        std::memset(d, 0, 16);
        if (src_bytes > 0) std::memcpy(d, src, size_t(src_bytes));
        return;
    }
    emu::g_fibers[size_t(emu::g_cur)].open_group.push_back({dst, src, src_bytes});
}
inline void cp_async_commit() {
    emu::Fiber& f = emu::g_fibers[size_t(emu::g_cur)];
    f.groups.push_back(std::move(f.open_group));
    f.open_group.clear();
}
template <int N>
inline void cp_async_wait() {
    emu::Fiber& f = emu::g_fibers[size_t(emu::g_cur)];
    while (f.groups.size() > size_t(N)) {
        for (const emu::CpCopy& c : f.groups.front()) {
            uint8_t* d = emu::smem_ptr(c.dst, 16);
            std::memset(d, 0, 16);
            if (c.bytes > 0) std::memcpy(d, c.src, size_t(c.bytes));
        }
        f.groups.erase(f.groups.begin());
    }
}

inline void ldsm_x4(uint32_t addr, uint32_t (&r)[4]) {
    emu::WarpSlots& s = emu::g_slots[size_t(emu::warp())];
    const int l = emu::lane();
    s.u[l][0] = addr;
    emu::sync_warp();
    for (int i = 0; i < 4; ++i) {
        const uint32_t row = s.u[8 * i + l / 4][0];
        std::memcpy(&r[i], emu::smem_ptr(row + 4 * (l % 4), 4), 4);
    }
    emu::sync_warp();
}
inline void ldsm_x4_t(uint32_t addr, uint32_t (&r)[4]) {
    emu::WarpSlots& s = emu::g_slots[size_t(emu::warp())];
    const int l = emu::lane();
    s.u[l][0] = addr;
    emu::sync_warp();
    for (int i = 0; i < 4; ++i) {
        // Transposed: element (row l/4, col 2(l%4)+e) of the transpose = stored (row 2(l%4)+e, col l/4).
        uint16_t lo, hi;
        std::memcpy(&lo, emu::smem_ptr(s.u[8 * i + 2 * (l % 4)][0] + 2 * (l / 4), 2), 2);
        std::memcpy(&hi, emu::smem_ptr(s.u[8 * i + 2 * (l % 4) + 1][0] + 2 * (l / 4), 2), 2);
        r[i] = uint32_t(lo) | (uint32_t(hi) << 16);
    }
    emu::sync_warp();
}

template <bool kBf16>
inline float emu_b16(uint32_t reg, int half) {
    const uint16_t h = uint16_t(half ? reg >> 16 : reg & 0xffffu);
    if (kBf16) {
        uint32_t u = uint32_t(h) << 16;
        float f;
        std::memcpy(&f, &u, 4);
        return f;
    }
    __half_raw raw;
    raw.x = h;
    return __half2float(__half(raw));
}

template <bool kBf16>
inline void emu_mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    emu::WarpSlots& s = emu::g_slots[size_t(emu::warp())];
    const int l = emu::lane();
    for (int i = 0; i < 4; ++i) s.u[l][i] = a[i];
    s.u[l][4] = b0;
    s.u[l][5] = b1;
    for (int i = 0; i < 4; ++i) std::memcpy(&s.u[l][6 + i], &c[i], 4);
    emu::sync_warp();
    auto A = [&](int row, int k) {
        return emu_b16<kBf16>(s.u[(row % 8) * 4 + (k % 8) / 2][(row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0)], k % 2);
    };
    auto B = [&](int k, int n) { return emu_b16<kBf16>(s.u[n * 4 + (k % 8) / 2][k >= 8 ? 5 : 4], k % 2); };
    const int g = l / 4, t = l % 4;
    float d[4];
    for (int i = 0; i < 4; ++i) {
        const int row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i % 2);
        double acc = 0.0;
        for (int k = 0; k < 16; ++k) acc += double(A(row, k)) * double(B(k, col));
        float cin;
        std::memcpy(&cin, &s.u[(row % 8) * 4 + col / 2][6 + (row >= 8 ? 2 : 0) + col % 2], 4);
        d[i] = float(double(cin) + acc);
    }
    emu::sync_warp();
    for (int i = 0; i < 4; ++i) c[i] = d[i];
}
inline void mma_16816_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    emu_mma<true>(c, a, b0, b1);
}
inline void mma_16816_bf16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                           uint32_t b1) {
    const uint32_t a[4] = {a0, a1, a2, a3};
    emu_mma<true>(c, a, b0, b1);
}
inline void mma_16816_f16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    emu_mma<false>(c, a, b0, b1);
}

// prmt.b32 with two sources (selector bit 3 unused by the kernels: plain byte picks).
inline uint32_t prmt2(uint32_t a, uint32_t b, uint32_t sel) {
    const uint64_t src = uint64_t(a) | (uint64_t(b) << 32);
    uint32_t d = 0;
    for (int n = 0; n < 4; ++n) d |= uint32_t((src >> (8 * ((sel >> (4 * n)) & 7u))) & 0xffu) << (8 * n);
    return d;
}

// movmatrix.m8n8.trans.b16: lane l gets (row l/4, cols 2(l%4)+e) of the transpose, i.e. stored
// (row 2(l%4)+e, col l/4): element l/4 % 2 of lane 4(2(l%4)+e) + (l/4)/2.
inline uint32_t movmatrix_t(uint32_t x) {
    emu::WarpSlots& s = emu::g_slots[size_t(emu::warp())];
    const int l = emu::lane();
    s.u[l][0] = x;
    emu::sync_warp();
    uint32_t r = 0;
    for (int e = 0; e < 2; ++e) {
        const int row = 2 * (l % 4) + e, col = l / 4;
        const uint32_t src = s.u[row * 4 + col / 2][0];
        r |= ((col % 2 ? src >> 16 : src) & 0xffffu) << (16 * e);
    }
    emu::sync_warp();
    return r;
}

template <typename... KP, typename... AP>
void launch_kernel(void (*kernel)(KP...), dim3 grid, dim3 block, size_t smem, cudaStream_t, AP&&... args) {
    emu::run_grid(grid, block, smem, [&] { kernel(args...); });
}

}  // namespace qs::cuda::ptx
