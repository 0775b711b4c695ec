// CPU emulation of the CUDA features the MoE kernels use, so that moe_emu.cpp can compile
// src/backend/cuda/moe_*.cu as host C++ (QS_MOE_EMULATE) and run the real kernel source:
// one fiber (ucontext) per CUDA thread on a single OS thread, cooperative barriers for __syncthreads
// and for warp collectives
// (shuffles, mma.sync m16n8k16 with the PTX fragment layouts), cp.async as a queue of copies
// performed at cp.async.wait_group (latest completion) or at issue (earliest completion).
// Blocks run one at a time, so block-scope __shared__ arrays can be plain statics.
#pragma once

#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <ucontext.h>
#include <vector>

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#define QS_MOE_EMULATE 1
#define __launch_bounds__(...)
#undef __shared__
#define __shared__ static

// Cooperative barrier over n fibers.
struct EmuBar {
    int n = 0, arrived = 0;
    uint64_t gen = 0;
};

struct EmuWarp {
    EmuBar bar{32};
    uint32_t u[32][6];
};

struct EmuBlock {
    EmuBar bar;
    std::vector<std::unique_ptr<EmuWarp>> warps;
    std::vector<unsigned char> smem;
};

struct EmuCopy {
    uint32_t dst;
    const void* src;
    int bytes;      // bytes read (the rest of the copy zero-filled)
    int size = 16;  // the copy's size: 16 (cp_async16), 8 (cp_async8) or 4 (cp_async4)
};

struct EmuThread {
    dim3 tid, bid, bdim, gdim;
    EmuBlock* blk = nullptr;
    int lane = 0, warp = 0;
    bool done = false;
    ucontext_t ctx;
    std::vector<EmuCopy> open;
    std::vector<std::vector<EmuCopy>> groups;
};

inline EmuThread* emu_cur = nullptr;       // the fiber running now
inline ucontext_t emu_sched_ctx;           // the scheduler's context
inline bool g_emu_copy_at_issue = false;   // earliest (true) or latest (false) cp.async completion
#define emu_t (*emu_cur)

inline void emu_yield() { swapcontext(&emu_cur->ctx, &emu_sched_ctx); }
inline void emu_bar_wait(EmuBar& b) {
    const uint64_t g = b.gen;
    if (++b.arrived == b.n) {
        b.arrived = 0;
        ++b.gen;
        return;
    }
    while (b.gen == g) emu_yield();
}

#define threadIdx (emu_t.tid)
#define blockIdx (emu_t.bid)
#define blockDim (emu_t.bdim)
#define gridDim (emu_t.gdim)

inline void __syncthreads() { emu_bar_wait(emu_t.blk->bar); }
inline unsigned char* emu_dyn_smem() { return emu_t.blk->smem.data(); }

// The emulated stand-ins of src/backend/cuda/ptx_helpers.cuh (same names and semantics); the
// kernel file skips the real header when QS_MOE_EMULATE is defined.
namespace qs::cuda::ptx {

inline unsigned char* dynamic_smem() { return emu_dyn_smem(); }
inline uint32_t smem_u32(const void* p) {
    const auto* b = emu_t.blk->smem.data();
    const auto* c = static_cast<const unsigned char*>(p);
    if (c < b || c > b + emu_t.blk->smem.size()) {
        std::fprintf(stderr, "emu: smem_u32 of a non-shared pointer\n");
        std::abort();
    }
    return uint32_t(c - b);
}

inline void emu_do_copy(const EmuCopy& c) {
    auto& sm = emu_t.blk->smem;
    const unsigned n = unsigned(c.size);
    if (size_t(c.dst) + n > sm.size() || c.dst % n != 0) {
        std::fprintf(stderr, "emu: cp.async destination %u out of shared memory (%zu bytes) or misaligned\n", c.dst,
                     sm.size());
        std::abort();
    }
    if (reinterpret_cast<uintptr_t>(c.src) % n != 0) {
        std::fprintf(stderr, "emu: cp.async source misaligned\n");
        std::abort();
    }
    if (c.bytes == c.size) std::memcpy(sm.data() + c.dst, c.src, n);
    else if (c.bytes == 0) std::memset(sm.data() + c.dst, 0, n);
    else std::abort();
}

inline void cp_async16(uint32_t dst, const void* src, int src_bytes) {
    if (g_emu_copy_at_issue) emu_do_copy({dst, src, src_bytes});
    else emu_t.open.push_back({dst, src, src_bytes});
}
inline void cp_async8(uint32_t dst, const void* src) {
    if (g_emu_copy_at_issue) emu_do_copy({dst, src, 8, 8});
    else emu_t.open.push_back({dst, src, 8, 8});
}
inline void cp_async4(uint32_t dst, const void* src) {
    if (g_emu_copy_at_issue) emu_do_copy({dst, src, 4, 4});
    else emu_t.open.push_back({dst, src, 4, 4});
}
inline void cp_async_commit() {
    emu_t.groups.push_back(std::move(emu_t.open));
    emu_t.open.clear();
}
template <int N>
inline void cp_async_wait() {
    while (emu_t.groups.size() > size_t(N)) {
        for (const EmuCopy& c : emu_t.groups.front()) emu_do_copy(c);
        emu_t.groups.erase(emu_t.groups.begin());
    }
}

// Programmatic dependent launch. Grids run one after another here, so to check what a kernel reads
// before griddep_wait, the driver may set g_emu_griddep_hook (e.g. restoring buffers it poisoned
// before the launch): the first griddep_wait of the grid runs it. prefetch_l2 touches one byte
// (AddressSanitizer checks the address).
inline void (*g_emu_griddep_hook)() = nullptr;
inline void griddep_wait() {
    if (g_emu_griddep_hook) {
        void (*h)() = g_emu_griddep_hook;
        g_emu_griddep_hook = nullptr;
        h();
    }
}
inline void griddep_launch_dependents() {}
inline void prefetch_l2(const void* p) {
    const volatile unsigned char* b = static_cast<const volatile unsigned char*>(p);
    (void)*b;
}

// PTX prmt.b32, default mode, second source 0.
inline uint32_t prmt(uint32_t a, uint32_t sel) {
    uint8_t src[8] = {uint8_t(a), uint8_t(a >> 8), uint8_t(a >> 16), uint8_t(a >> 24), 0, 0, 0, 0};
    uint32_t d = 0;
    for (int n = 0; n < 4; ++n) {
        const uint32_t nib = (sel >> (4 * n)) & 0xfu;
        uint8_t b = src[nib & 7u];
        if (nib & 8u) b = (b & 0x80u) ? 0xffu : 0x00u;
        d |= uint32_t(b) << (8 * n);
    }
    return d;
}

// PTX prmt.b32 with two sources: result byte n is byte sel[4n+2:4n] of {b, a} (a's bytes 0-3).
inline uint32_t prmt2(uint32_t a, uint32_t b, uint32_t sel) {
    const uint8_t src[8] = {uint8_t(a), uint8_t(a >> 8), uint8_t(a >> 16), uint8_t(a >> 24),
                            uint8_t(b), uint8_t(b >> 8), uint8_t(b >> 16), uint8_t(b >> 24)};
    uint32_t d = 0;
    for (int n = 0; n < 4; ++n) d |= uint32_t(src[(sel >> (4 * n)) & 7u]) << (8 * n);
    return d;
}

}  // namespace qs::cuda::ptx

// Blocks run one at a time and their threads on one OS thread: fences have nothing to order.
inline void __threadfence() {}

// Shared- and global-memory atomics (all blocks run one at a time).
inline int atomicAdd(int* p, int v) {
    const int old = *p;
    *p = old + v;
    return old;
}

template <class T>
inline T emu_shfl(T v, int src) {
    static_assert(sizeof(T) == 4, "32-bit shuffles only");
    EmuWarp& w = *emu_t.blk->warps[emu_t.warp];
    std::memcpy(&w.u[emu_t.lane][0], &v, 4);
    emu_bar_wait(w.bar);
    T r;
    std::memcpy(&r, &w.u[src][0], 4);
    emu_bar_wait(w.bar);
    return r;
}
template <class T>
inline T __shfl_xor_sync(unsigned, T v, int o) { return emu_shfl(v, emu_t.lane ^ o); }
template <class T>
inline T __shfl_up_sync(unsigned, T v, int o) { return emu_shfl(v, emu_t.lane >= o ? emu_t.lane - o : emu_t.lane); }
template <class T>
inline T __shfl_sync(unsigned, T v, int src) { return emu_shfl(v, src); }
// Full-warp only (as every use in the MoE kernels): the lanes holding the same value as this one.
inline unsigned __match_any_sync(unsigned, int v) {
    EmuWarp& w = *emu_t.blk->warps[emu_t.warp];
    std::memcpy(&w.u[emu_t.lane][0], &v, 4);
    emu_bar_wait(w.bar);
    unsigned m = 0;
    for (int l = 0; l < 32; ++l) {
        int o;
        std::memcpy(&o, &w.u[l][0], 4);
        if (o == v) m |= 1u << l;
    }
    emu_bar_wait(w.bar);
    return m;
}
// A real warp barrier, so that a missing __syncwarp between lanes' shared-memory updates shows.
inline void __syncwarp(unsigned = 0xffffffffu) { emu_bar_wait(emu_t.blk->warps[emu_t.warp]->bar); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline float __fdiv_rn(float a, float b) { return a / b; }  // host IEEE division rounds to nearest
inline float __uint_as_float(unsigned x) {
    float f;
    std::memcpy(&f, &x, 4);
    return f;
}

inline float emu_bf16_half(uint32_t reg, int hi) {
    const uint32_t bits = (hi ? reg >> 16 : reg & 0xffffu) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, fragments as in the PTX ISA:
// lane = 4·g + q; A: a0 = A[g][2q..2q+1], a1 = A[g+8][2q..], a2 = A[g][2q+8..], a3 = A[g+8][2q+8..];
// B: b0 = B[2q..2q+1][g], b1 = B[2q+8..2q+9][g]; C/D: c0,c1 = C[g][2q..2q+1], c2,c3 = C[g+8][2q..].
namespace qs::cuda::ptx {

inline void mma_16816_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                           uint32_t b1) {
    EmuWarp& w = *emu_t.blk->warps[emu_t.warp];
    const int l = emu_t.lane;
    w.u[l][0] = a0;
    w.u[l][1] = a1;
    w.u[l][2] = a2;
    w.u[l][3] = a3;
    w.u[l][4] = b0;
    w.u[l][5] = b1;
    emu_bar_wait(w.bar);
    auto A = [&](int row, int k) {
        const int lane = (row % 8) * 4 + (k % 8) / 2, reg = (row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0);
        return emu_bf16_half(w.u[lane][reg], k % 2);
    };
    auto B = [&](int k, int n) {
        const int lane = n * 4 + (k % 8) / 2, reg = 4 + (k >= 8 ? 1 : 0);
        return emu_bf16_half(w.u[lane][reg], k % 2);
    };
    const int g = l / 4, q = l % 4;
    float out[4];
    for (int i = 0; i < 4; ++i) {
        const int row = g + 8 * (i / 2), col = 2 * q + (i % 2);
        double acc = d[i];
        for (int k = 0; k < 16; ++k) acc += double(A(row, k)) * double(B(k, col));
        out[i] = float(acc);
    }
    emu_bar_wait(w.bar);
    for (int i = 0; i < 4; ++i) d[i] = out[i];
}
inline void mma_16816_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    mma_16816_bf16(d, a[0], a[1], a[2], a[3], b0, b1);
}

}  // namespace qs::cuda::ptx

// Blocks in reverse order (the last block first) for the next emu_launch calls: a GPU runs them in
// any order, so code that counts finished blocks must work either way.
inline bool g_emu_reverse_blocks = false;

// Runs body() as a grid of blocks of nthr threads: one block at a time, its threads as fibers
// scheduled round-robin on this OS thread (they switch only at barriers and warp collectives).
template <class F>
void emu_launch(dim3 grid, int nthr, size_t smem_bytes, F&& body) {
    constexpr size_t kStack = 256 * 1024;
    std::vector<EmuThread> th(nthr);
    std::vector<std::unique_ptr<char[]>> stacks(nthr);
    for (auto& st : stacks) st.reset(new char[kStack]);
    static F* body_ptr;
    body_ptr = &body;
    for (unsigned byi = 0; byi < grid.y; ++byi)
        for (unsigned bxi = 0; bxi < grid.x; ++bxi) {
            const unsigned by = g_emu_reverse_blocks ? grid.y - 1 - byi : byi;
            const unsigned bx = g_emu_reverse_blocks ? grid.x - 1 - bxi : bxi;
            EmuBlock blk;
            blk.bar.n = nthr;
            for (int w = 0; w < (nthr + 31) / 32; ++w) blk.warps.push_back(std::make_unique<EmuWarp>());
            blk.smem.assign(smem_bytes, 0xA5);  // garbage: anything read before written shows up
            for (int t = 0; t < nthr; ++t) {
                EmuThread& e = th[t];
                e = EmuThread{};
                e.tid = dim3(t);
                e.bid = dim3(bx, by);
                e.bdim = dim3(nthr);
                e.gdim = grid;
                e.blk = &blk;
                e.lane = t % 32;
                e.warp = t / 32;
                getcontext(&e.ctx);
                e.ctx.uc_stack.ss_sp = stacks[t].get();
                e.ctx.uc_stack.ss_size = kStack;
                e.ctx.uc_link = &emu_sched_ctx;
                makecontext(&e.ctx, +[] {
                    (*body_ptr)();
                    emu_cur->done = true;
                }, 0);
            }
            for (bool alive = true; alive;) {
                alive = false;
                for (int t = 0; t < nthr; ++t) {
                    if (th[t].done) continue;
                    emu_cur = &th[t];
                    swapcontext(&emu_sched_ctx, &th[t].ctx);
                    alive |= !th[t].done;
                }
            }
            emu_cur = nullptr;
        }
}
