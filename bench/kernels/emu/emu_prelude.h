// Host SIMT emulator: runs CUDA kernel source compiled by g++ on a machine without a GPU, to
// check index arithmetic, fragment layouts, pipelines and barriers before a GPU is at hand.
// Force-included (g++ -include bench/kernels/emu/emu_prelude.h) ahead of the kernel file; with
// -Ibench/kernels/emu first on the include path, backend/cuda/ptx_helpers.cuh resolves to the
// emulated PTX wrappers beside this file.
// Model: one block at a time; each thread is a ucontext fiber; fibers switch only at barriers
// (__syncthreads, __syncwarp and inside every warp-collective: shuffles, ldmatrix, mma). Shared
// memory starts as 0xff bytes (NaN in bf16/f16/fp8 and fp32), so a read of shared memory that
// nothing wrote poisons the result. Two schedules (g_mode), run a kernel under both:
//  0 lockstep: warps advance round-robin one collective at a time; cp.async copies land at
//    cp.async.wait_group, as late as the hardware may (a missing wait reads stale data);
//  1 greedy: warps in random order, each runs until it blocks on __syncthreads; cp.async copies
//    land at issue, as early as the hardware may (a missing barrier before a stage is refilled
//    lets one warp overwrite data another warp has yet to read).
// Not modelled: timing, bank conflicts, memory-model subtleties beyond barrier ordering.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

namespace emu {

struct CpCopy {
    uint32_t dst;
    const void* src;
    int bytes;  // bytes read from src; the rest of the 16 are zero-filled
};

struct Fiber {
    ucontext_t ctx;
    bool done = false;
    bool at_block = false;  // waiting in __syncthreads for generation block_gen to end
    unsigned block_gen = 0;
    std::vector<CpCopy> open_group;
    std::vector<std::vector<CpCopy>> groups;  // committed, oldest first
};

struct Barrier {
    int count = 0;
    unsigned gen = 0;
};

struct WarpSlots {
    uint32_t u[32][12];
    float f[32];
    uint64_t g[32];  // shuffles of any type up to 8 bytes
};

inline ucontext_t g_sched;
inline std::vector<Fiber> g_fibers;
inline std::vector<std::vector<char>> g_stacks;  // one per thread slot, reused across blocks
inline int g_cur = 0;
inline dim3 g_threadIdx, g_blockIdx, g_blockDim, g_gridDim;
inline std::vector<uint8_t> g_smem;
inline std::vector<Barrier> g_warp_bar;
inline Barrier g_block_bar;
inline std::vector<WarpSlots> g_slots;
inline std::function<void()> g_entry;
inline long g_switches = 0;
inline long g_events = 0;  // barrier arrivals: progress marker for the deadlock check
inline int g_mode = 0;     // 0 lockstep + late cp.async, 1 greedy warps + early cp.async
inline uint64_t g_rng = 0x9e3779b97f4a7c15ull;

inline void yield() {
    ++g_switches;
    swapcontext(&g_fibers[size_t(g_cur)].ctx, &g_sched);
}
inline void barrier_wait(Barrier& b, int expected) {
    const unsigned gen = b.gen;
    ++g_events;
    if (++b.count == expected) {
        b.count = 0;
        ++b.gen;
        return;
    }
    while (b.gen == gen) yield();
}
inline int lane() { return int(g_threadIdx.x & 31u); }
inline int warp() { return int(g_threadIdx.x >> 5); }
inline void sync_warp() { barrier_wait(g_warp_bar[size_t(warp())], 32); }
inline void sync_block() {
    Fiber& f = g_fibers[size_t(g_cur)];
    f.at_block = true;
    f.block_gen = g_block_bar.gen;
    barrier_wait(g_block_bar, int(g_blockDim.x));
    f.at_block = false;
}

// A shuffle of a value of any trivially copyable type up to 8 bytes (float, double, ints).
template <class T>
inline T shfl_from(T v, int src) {
    static_assert(sizeof(T) <= 8, "emu: shuffles of up to 8 bytes");
    WarpSlots& s = g_slots[size_t(warp())];
    std::memcpy(&s.g[lane()], &v, sizeof(T));
    sync_warp();
    T r;
    std::memcpy(&r, &s.g[src], sizeof(T));
    sync_warp();
    return r;
}
template <class T>
inline T shfl_xor(T v, int o) {
    return shfl_from(v, lane() ^ o);
}
// __shfl_up_sync: lanes below `o` keep their own value.
template <class T>
inline T shfl_up(T v, int o) {
    return shfl_from(v, lane() >= o ? lane() - o : lane());
}

inline uint8_t* smem_ptr(uint32_t off, size_t bytes) {
    if (size_t(off) + bytes > g_smem.size()) {
        std::fprintf(stderr, "emu: shared access out of range: %u + %zu > %zu (block %u,%u,%u thread %u)\n", off, bytes,
                     g_smem.size(), g_blockIdx.x, g_blockIdx.y, g_blockIdx.z, g_threadIdx.x);
        std::abort();
    }
    return g_smem.data() + off;
}

inline void fiber_main() {
    g_entry();
    g_fibers[size_t(g_cur)].done = true;
}

// Runs kernel(args...) over the grid, block by block.
template <typename F>
void run_grid(dim3 grid, dim3 block, size_t smem, F&& body) {
    if (block.y != 1 || block.z != 1 || block.x % 32 != 0) {
        std::fprintf(stderr, "emu: only 1-D blocks of whole warps\n");
        std::abort();
    }
    const int nt = int(block.x);
    g_blockDim = block;
    g_gridDim = grid;
    g_entry = body;
    if (g_stacks.size() < size_t(nt)) g_stacks.resize(size_t(nt));
    for (auto& st : g_stacks)
        if (st.empty()) st.resize(128 * 1024);
    // Blocks in grid order under schedule 0 and in reverse under schedule 1: a block that writes
    // outside its own outputs is then overwritten by their owner under one order and wins under
    // the other, so the outputs differ (blocks run one after another here).
    const uint64_t nblocks = uint64_t(grid.x) * grid.y * grid.z;
    for (uint64_t bi = 0; bi < nblocks; ++bi) {
        const uint64_t li = g_mode == 1 ? nblocks - 1 - bi : bi;
        const unsigned bx = unsigned(li % grid.x), by = unsigned(li / grid.x % grid.y),
                       bz = unsigned(li / (uint64_t(grid.x) * grid.y));
        g_blockIdx = dim3(bx, by, bz);
        g_smem.assign(smem, 0xff);
        g_warp_bar.assign(size_t(nt / 32), Barrier{});
        g_block_bar = Barrier{};
        g_slots.assign(size_t(nt / 32), WarpSlots{});
        g_fibers.clear();
        g_fibers.resize(size_t(nt));
        for (int t = 0; t < nt; ++t) {
            Fiber& f = g_fibers[size_t(t)];
            getcontext(&f.ctx);
            f.ctx.uc_stack.ss_sp = g_stacks[size_t(t)].data();
            f.ctx.uc_stack.ss_size = g_stacks[size_t(t)].size();
            f.ctx.uc_link = &g_sched;
            makecontext(&f.ctx, fiber_main, 0);
        }
        int remaining = nt;
        auto resume = [&](int t) {
            g_cur = t;
            g_threadIdx = dim3(unsigned(t), 0, 0);
            swapcontext(&g_sched, &g_fibers[size_t(t)].ctx);
            if (g_fibers[size_t(t)].done) --remaining;
        };
        auto runnable = [&](int t) {
            const Fiber& f = g_fibers[size_t(t)];
            return !f.done && !(f.at_block && f.block_gen == g_block_bar.gen);
        };
        while (remaining > 0) {
            const long events = g_events;
            const int remaining_before = remaining;
            if (g_mode == 0) {
                for (int t = 0; t < nt; ++t)
                    if (!g_fibers[size_t(t)].done) resume(t);
            } else {
                std::vector<int> order(size_t(nt / 32));
                for (int w = 0; w < nt / 32; ++w) order[size_t(w)] = w;
                for (int w = nt / 32 - 1; w > 0; --w) {
                    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
                    std::swap(order[size_t(w)], order[size_t((g_rng >> 33) % uint64_t(w + 1))]);
                }
                for (int w : order) {
                    for (;;) {  // run this warp until it blocks on __syncthreads or ends
                        const long ev = g_events;
                        const int rem = remaining;
                        for (int t = 32 * w; t < 32 * w + 32; ++t)
                            if (runnable(t)) resume(t);
                        if (ev == g_events && rem == remaining) break;
                    }
                }
            }
            if (remaining > 0 && events == g_events && remaining == remaining_before) {
                std::fprintf(stderr, "emu: deadlock in block %u,%u,%u (%d threads waiting)\n", bx, by, bz,
                             remaining);
                std::abort();
            }
        }
    }
}

inline int occupancy(int threads, size_t smem) {
    int b = 32;
    if (smem) b = std::min<int>(b, int((227 * 1024) / smem));
    b = std::min(b, 2048 / threads);
    return b;
}

}  // namespace emu

// ---- CUDA device-side names, host versions ----------------------------------------------------
#undef __global__
#define __global__
#undef __device__
#define __device__
#undef __host__
#define __host__
#undef __forceinline__
#define __forceinline__ inline
#undef __launch_bounds__
#define __launch_bounds__(...)
#undef __grid_constant__
#define __grid_constant__
#undef __shared__
#define __shared__ static
#undef threadIdx
#define threadIdx (::emu::g_threadIdx)
#undef blockIdx
#define blockIdx (::emu::g_blockIdx)
#undef blockDim
#define blockDim (::emu::g_blockDim)
#undef gridDim
#define gridDim (::emu::g_gridDim)

#define __syncthreads() ::emu::sync_block()
#define __syncwarp(...) ::emu::sync_warp()
#define __shfl_xor_sync(mask, v, o) ::emu::shfl_xor((v), (o))
#define __shfl_up_sync(mask, v, o) ::emu::shfl_up((v), (o))
#define __ldg(p) (*(p))
#define __fmul_rn(a, b) ((a) * (b))
#define __fadd_rn(a, b) ((a) + (b))
#define __fsub_rn(a, b) ((a) - (b))
#define __fdiv_rn(a, b) ((a) / (b))
#define __fsqrt_rn(a) std::sqrt(a)
// Blocks run one after another and a block's threads cooperatively, so device-scope atomics and
// fences are plain memory operations here.
#define __threadfence() ((void)0)
#define __ldcg(p) (*(p))
template <class T>
inline T atomicAdd(T* p, T v) {
    const T old = *p;
    *p = old + v;
    return old;
}
inline unsigned atomicMax(unsigned* p, unsigned v) {
    const unsigned old = *p;
    *p = old > v ? old : v;
    return old;
}
inline unsigned atomicOr(unsigned* p, unsigned v) {
    const unsigned old = *p;
    *p = old | v;
    return old;
}
inline int __ffs(int v) { return __builtin_ffs(v); }
inline float __logf(float v) { return std::log(v); }
// The GPU's rsqrtf is an approximation (MUFU.RSQ): the emulator's values differ from the device's in
// the last bits, but every emulated kernel gets the same function, so comparisons between them hold.
inline float rsqrtf(float v) { return 1.0f / std::sqrt(v); }

using std::max;
using std::min;

// ---- CUDA runtime calls made by launchers ----------------------------------------------------
#define cudaGetDevice(p) (*(p) = 0, cudaSuccess)
#define cudaDeviceGetAttribute(p, attr, dev) (*(p) = 132, cudaSuccess)
#define cudaFuncSetAttribute(...) cudaSuccess
#define cudaOccupancyMaxActiveBlocksPerMultiprocessor(p, fn, threads, smem) \
    (*(p) = ::emu::occupancy(int(threads), size_t(smem)), cudaSuccess)
#define cudaGetLastError() cudaSuccess
#define cudaMemsetAsync(p, v, n, stream) (std::memset((p), (v), (n)), cudaSuccess)
#define cudaGetErrorName(e) "emu"
#define cudaGetErrorString(e) "emu"
