// Host emulation of the small part of the CUDA runtime and device language that the qwenserve
// kernels and labs use, so that a kernel's own source runs (slowly) on a machine without a GPU.
// Threads are user-level fibers (ucontext), one block at a time; __syncthreads, warp shuffles and
// mma.sync m16n8k8 tf32 and m16n8k16 bf16 are emulated collectively (the mma with the PTX ISA fragment layout).
// Used by bench/kernels/emu/run_emu.sh; never part of a real build.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <vector>
#include <ucontext.h>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __restrict__
#define __align__(n) __attribute__((aligned(n)))

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct float2 { float x, y; };
struct float4 { float x, y, z, w; };
struct uint2 { uint32_t x, y; };
struct uint4 { uint32_t x, y, z, w; };
inline float2 make_float2(float x, float y) { return float2{x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline float __uint_as_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline uint32_t __float_as_uint(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
template <typename T> inline T __ldcs(const T* p) { return *p; }
template <typename T> inline void __stcs(T* p, T v) { *p = v; }
template <typename T> inline T __ldg(const T* p) { return *p; }

typedef int cudaError_t;
enum { cudaSuccess = 0 };
typedef void* cudaStream_t;
typedef int* cudaEvent_t;
enum cudaMemcpyKind { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize };
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount };
inline cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr, int) { *v = 1; return cudaSuccess; }
struct cudaDeviceProp { char name[256]; int multiProcessorCount; int l2CacheSize; };
inline const char* cudaGetErrorName(cudaError_t) { return "cudaErrorEmu"; }
inline const char* cudaGetErrorString(cudaError_t) { return "emulation error"; }
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
inline cudaError_t cudaGetDevice(int* d) { *d = 0; return cudaSuccess; }
template <typename F> inline cudaError_t cudaFuncSetAttribute(F, cudaFuncAttribute, int) { return cudaSuccess; }
// No occupancy in the emulation: -1 ("unknown"; gdn_lab --decode prints it as such).
template <typename F> inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, F, int, size_t) { *n = -1; return cudaSuccess; }
template <typename T> inline cudaError_t cudaMalloc(T** p, size_t n) { *p = reinterpret_cast<T*>(std::aligned_alloc(256, (n + 255) / 256 * 256)); return cudaSuccess; }
inline cudaError_t cudaFree(void* p) { std::free(p); return cudaSuccess; }
inline cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind) { std::memcpy(d, s, n); return cudaSuccess; }
inline cudaError_t cudaMemset(void* d, int v, size_t n) { std::memset(d, v, n); return cudaSuccess; }
// Kernels run to completion at launch, in issue order, so events and streams order nothing; a
// created one is still non-null (launchers check that what they were given exists).
inline int g_emu_handle = 0;
inline cudaError_t cudaEventCreate(cudaEvent_t* e) { *e = &g_emu_handle; return cudaSuccess; }
enum { cudaEventDisableTiming = 2, cudaStreamNonBlocking = 1 };
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) { *e = &g_emu_handle; return cudaSuccess; }
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) { *s = &g_emu_handle; return cudaSuccess; }
inline cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned = 0) { return cudaSuccess; }
inline cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t = nullptr) { return cudaSuccess; }
inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t, cudaEvent_t) { *ms = 1.f; return cudaSuccess; }
inline cudaError_t cudaEventDestroy(cudaEvent_t) { return cudaSuccess; }
// lab_timing.h's graph timing (graph_us_per_call) compiles against these; the emulated runs check
// results and never time, so capture records nothing and a replay does nothing.
typedef void* cudaGraph_t;
typedef void* cudaGraphExec_t;
enum cudaStreamCaptureMode { cudaStreamCaptureModeGlobal };
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaStreamBeginCapture(cudaStream_t, cudaStreamCaptureMode) { return cudaSuccess; }
inline cudaError_t cudaStreamEndCapture(cudaStream_t, cudaGraph_t* g) { *g = nullptr; return cudaSuccess; }
inline cudaError_t cudaGraphInstantiate(cudaGraphExec_t* e, cudaGraph_t, unsigned long long) { *e = nullptr; return cudaSuccess; }
inline cudaError_t cudaGraphLaunch(cudaGraphExec_t, cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaGraphExecDestroy(cudaGraphExec_t) { return cudaSuccess; }
inline cudaError_t cudaGraphDestroy(cudaGraph_t) { return cudaSuccess; }
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) {
    std::snprintf(p->name, sizeof p->name, "host emulation");
    p->multiProcessorCount = 1; p->l2CacheSize = 0; return cudaSuccess;
}

namespace emu {

// One cp.async copy (ptx_helpers.cuh stand-in, backend/cuda/ beside this file): `bytes` from src,
// the rest of `size` zero-filled, into the block's dynamic shared memory at byte offset dst.
struct CpCopy {
    uint32_t dst;
    const void* src;
    int bytes, size;
};

struct Fiber {
    ucontext_t ctx;
    std::vector<char> stack;
    unsigned tid = 0;
    int wait = 0;  // 0 runnable, 1 at __syncthreads, 2 at a warp collective, 3 finished
    std::vector<CpCopy> open_group;               // cp.async copies not yet committed
    std::vector<std::vector<CpCopy>> groups;      // committed, not yet landed (oldest first)
};

struct Block {
    std::vector<Fiber> f;
    ucontext_t sched;
    int cur = 0;
    dim3 bid, bdim, gdim;
    std::vector<float4> dyn;
    std::function<void()> body;
    uint64_t xch[32][32][8];  // per warp, per lane exchange slots
    // cp.async landing, chosen at random per block: 0 at cp.async.wait_group (the latest the
    // hardware may: a read before the wait, or before the barrier after another thread's wait, sees
    // stale data), 1 at issue (the earliest: a stage refilled before every thread has read it is
    // overwritten under the readers).
    int cp_mode = 0;
};

inline Block*& blk() { static Block* b = nullptr; return b; }
inline std::mt19937& order_rng() { static std::mt19937 r(12345); return r; }

struct Idx {
    unsigned x, y, z;
};
inline Idx thread_idx() { return Idx{blk()->f[blk()->cur].tid, 0, 0}; }
inline Idx block_idx() { return Idx{blk()->bid.x, blk()->bid.y, blk()->bid.z}; }
inline Idx block_dim() { return Idx{blk()->bdim.x, 1, 1}; }
inline Idx grid_dim() { return Idx{blk()->gdim.x, blk()->gdim.y, blk()->gdim.z}; }

inline void yield(int state) {
    Block* b = blk();
    Fiber& me = b->f[b->cur];
    me.wait = state;
    swapcontext(&me.ctx, &b->sched);
}
inline void syncthreads() { yield(1); }
inline void warp_sync() { yield(2); }

inline void trampoline() {
    Block* b = blk();
    b->body();
    b->f[b->cur].wait = 3;
    swapcontext(&b->f[b->cur].ctx, &b->sched);
}

inline void run_block(unsigned nthreads, size_t dyn_bytes, const std::function<void()>& body, dim3 bid, dim3 grid) {
    static Block B;
    blk() = &B;
    B.bid = bid;
    B.gdim = grid;
    B.bdim = dim3(nthreads);
    B.body = body;
    B.dyn.assign((dyn_bytes + 15) / 16, float4{NAN, NAN, NAN, NAN});  // poisoned shared memory
    B.cp_mode = int(order_rng()() % 2);
    if (B.f.size() != nthreads) B.f = std::vector<Fiber>(nthreads);
    for (unsigned t = 0; t < nthreads; ++t) {
        Fiber& f = B.f[t];
        f.tid = t;
        f.wait = 0;
        f.open_group.clear();
        f.groups.clear();
        if (f.stack.empty()) f.stack.resize(256 * 1024);
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = f.stack.data();
        f.ctx.uc_stack.ss_size = f.stack.size();
        f.ctx.uc_link = nullptr;
        makecontext(&f.ctx, trampoline, 0);
    }
    std::vector<unsigned> order(nthreads);
    for (unsigned t = 0; t < nthreads; ++t) order[t] = t;
    const unsigned nwarps = (nthreads + 31) / 32;
    std::vector<char> warp_on(nwarps);
    std::vector<unsigned> wperm(nwarps);
    for (unsigned w = 0; w < nwarps; ++w) wperm[w] = w;
    auto release_warp_ops = [&](unsigned w) {
        int at_warp = 0, at_block = 0, done = 0, n = 0;
        for (unsigned t = 32 * w; t < std::min(nthreads, 32 * w + 32); ++t, ++n) {
            at_warp += B.f[t].wait == 2;
            at_block += B.f[t].wait == 1;
            done += B.f[t].wait == 3;
        }
        if (at_warp > 0 && at_block + done != 0) {
            std::fprintf(stderr, "emu: divergent warp collective in warp %u (block %u,%u): %d at warp op, %d at "
                         "__syncthreads, %d exited\n", w, bid.x, bid.y, at_warp, at_block, done);
            std::abort();
        }
        if (at_warp == n)
            for (unsigned t = 32 * w; t < 32 * w + n; ++t) B.f[t].wait = 0;
        return at_warp == n;
    };
    for (;;) {
        // One phase (up to the next __syncthreads). Schedules, chosen at random per phase:
        //  - warps one after the other in a random order, each run to the barrier: a warp reading
        //    what a later warp writes in the same phase (a missing barrier) sees stale data;
        //  - interleaved: lanes in random order, a random subset of the warps per pass.
        // A warp collective is released as soon as its 32 lanes have arrived.
        if (order_rng()() % 2 == 0) {
            std::shuffle(wperm.begin(), wperm.end(), order_rng());
            for (unsigned w : wperm) {
                for (;;) {
                    std::shuffle(order.begin(), order.end(), order_rng());
                    for (unsigned t : order)
                        if (t / 32 == w && B.f[t].wait == 0) {
                            B.cur = int(t);
                            swapcontext(&B.sched, &B.f[t].ctx);
                        }
                    if (!release_warp_ops(w)) break;
                }
            }
        } else {
            std::shuffle(order.begin(), order.end(), order_rng());
            for (unsigned w = 0; w < nwarps; ++w) warp_on[w] = char(order_rng()() % 3 != 0);
            warp_on[order_rng()() % nwarps] = 1;
            for (unsigned t : order)
                if (B.f[t].wait == 0 && warp_on[t / 32]) {
                    B.cur = int(t);
                    swapcontext(&B.sched, &B.f[t].ctx);
                }
            for (unsigned w = 0; w < nwarps; ++w) release_warp_ops(w);
        }
        int runnable = 0, at_block = 0, done = 0;
        for (unsigned t = 0; t < nthreads; ++t) {
            runnable += B.f[t].wait == 0 || B.f[t].wait == 2;
            at_block += B.f[t].wait == 1;
            done += B.f[t].wait == 3;
        }
        if (runnable) continue;
        if (done == int(nthreads)) break;
        if (at_block + done == int(nthreads)) {
            if (done != 0) {
                std::fprintf(stderr, "emu: __syncthreads with %d exited threads (block %u,%u)\n", done, bid.x, bid.y);
                std::abort();
            }
            for (unsigned t = 0; t < nthreads; ++t) B.f[t].wait = 0;
            continue;
        }
        std::fprintf(stderr, "emu: deadlock\n");
        std::abort();
    }
}

template <typename... KArgs, typename... Args>
inline void launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t dyn, Args... args) {
    for (unsigned z = 0; z < grid.z; ++z)
        for (unsigned y = 0; y < grid.y; ++y)
            for (unsigned x = 0; x < grid.x; ++x)
                run_block(block.x, dyn, [&] { kernel(args...); }, dim3(x, y, z), grid);
}
template <typename... KArgs, typename... Args>
inline void launch(void (*kernel)(KArgs...), dim3 grid, unsigned block, size_t dyn, Args... args) {
    launch(kernel, grid, dim3(block), dyn, args...);
}

inline void* dyn_smem() { return blk()->dyn.data(); }

inline uint8_t* smem_at(uint32_t off, int size) {
    Block* b = blk();
    if (size_t(off) + size_t(size) > b->dyn.size() * sizeof(float4)) {
        std::fprintf(stderr, "emu: shared-memory access [%u, +%d) beyond the dynamic shared memory (%zu bytes)\n", off,
                     size, b->dyn.size() * sizeof(float4));
        std::abort();
    }
    return reinterpret_cast<uint8_t*>(b->dyn.data()) + off;
}
inline void cp_land(const CpCopy& c) {
    uint8_t* d = smem_at(c.dst, c.size);
    std::memset(d, 0, size_t(c.size));
    if (c.bytes > 0) std::memcpy(d, c.src, size_t(c.bytes));
}
inline void cp_async(uint32_t dst, const void* src, int bytes, int size) {
    if (dst % uint32_t(size) != 0 || (reinterpret_cast<uintptr_t>(src) % uintptr_t(size) != 0 && bytes > 0)) {
        std::fprintf(stderr, "emu: misaligned cp.async of %d bytes (shared offset %u)\n", size, dst);
        std::abort();
    }
    Block* b = blk();
    const CpCopy c{dst, src, bytes, size};
    if (b->cp_mode == 1) {
        cp_land(c);
        return;
    }
    b->f[b->cur].open_group.push_back(c);
}
inline void cp_commit() {
    Fiber& f = blk()->f[blk()->cur];
    f.groups.push_back(std::move(f.open_group));
    f.open_group.clear();
}
inline void cp_wait(size_t n) {
    Fiber& f = blk()->f[blk()->cur];
    while (f.groups.size() > n) {
        for (const CpCopy& c : f.groups.front()) cp_land(c);
        f.groups.erase(f.groups.begin());
    }
}

template <typename T>
inline T shfl_from(T v, int src_of_lane(int lane, int arg), int arg) {
    Block* b = blk();
    const unsigned t = b->f[b->cur].tid, w = t / 32, lane = t % 32;
    uint64_t u = 0;
    std::memcpy(&u, &v, sizeof(T));
    b->xch[w][lane][0] = u;
    warp_sync();
    const int src = src_of_lane(int(lane), arg);
    T r;
    const uint64_t got = b->xch[w][src][0];
    std::memcpy(&r, &got, sizeof(T));
    warp_sync();
    return r;
}
inline int src_xor(int lane, int m) { return lane ^ m; }
inline int src_up(int lane, int d) { return lane >= d ? lane - d : lane; }
inline int src_idx(int, int s) { return s & 31; }

inline uint32_t tf32_rna(uint32_t u) {  // cvt.rna.tf32.f32: round to nearest, ties away from zero
    if ((u & 0x7f800000u) == 0x7f800000u) return u;
    return (u + 0x1000u) & 0xffffe000u;
}

// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32, PTX ISA fragment layout
// (g = lane/4, t = lane%4): a0 (g,t) a1 (g+8,t) a2 (g,t+4) a3 (g+8,t+4); b0 (k=t,n=g) b1 (k=t+4,n=g);
// c0 (g,2t) c1 (g,2t+1) c2 (g+8,2t) c3 (g+8,2t+1). Operands are truncated to tf32 as the hardware does.
inline void mma_m16n8k8_tf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&bb)[2]) {
    Block* b = blk();
    const unsigned t = b->f[b->cur].tid, w = t / 32, lane = t % 32;
    for (int i = 0; i < 4; ++i) b->xch[w][lane][i] = a[i];
    b->xch[w][lane][4] = bb[0];
    b->xch[w][lane][5] = bb[1];
    warp_sync();
    float A[16][8], Bm[8][8];
    for (int l = 0; l < 32; ++l) {
        const int g = l / 4, tt = l % 4;
        auto f = [&](int i) { return __uint_as_float(uint32_t(b->xch[w][l][i]) & 0xffffe000u); };
        A[g][tt] = f(0); A[g + 8][tt] = f(1); A[g][tt + 4] = f(2); A[g + 8][tt + 4] = f(3);
        Bm[tt][g] = f(4); Bm[tt + 4][g] = f(5);
    }
    const int g = lane / 4, tt = lane % 4;
    const int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * tt, 2 * tt + 1, 2 * tt, 2 * tt + 1};
    for (int i = 0; i < 4; ++i) {
        float acc = d[i];
        for (int k = 0; k < 8; ++k) acc = std::fma(A[rows[i]][k], Bm[k][cols[i]], acc);
        d[i] = acc;
    }
    warp_sync();
}

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, PTX ISA fragment layout (g = lane/4,
// t = lane%4; each register holds two bf16, the lower column / k in the low half): a0 (g, 2t..2t+1)
// a1 (g+8, 2t..) a2 (g, 2t+8..) a3 (g+8, 2t+8..); b0 (k = 2t..2t+1, n = g) b1 (k = 2t+8.., n = g);
// c as for m16n8k8. Products are exact in fp32 (8-bit mantissas); the sum is fp32 fma in k order.
inline void mma_m16n8k16_16bit(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, bool f16);
inline void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    mma_m16n8k16_16bit(d, a, b0, b1, false);
}
// The same with fp16 operands (.f16.f16): products of 11-bit significands are exact in fp32 too.
inline void mma_m16n8k16_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    mma_m16n8k16_16bit(d, a, b0, b1, true);
}
inline void mma_m16n8k16_16bit(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, bool f16) {
    Block* b = blk();
    const unsigned t = b->f[b->cur].tid, w = t / 32, lane = t % 32;
    for (int i = 0; i < 4; ++i) b->xch[w][lane][i] = a[i];
    b->xch[w][lane][4] = b0;
    b->xch[w][lane][5] = b1;
    warp_sync();
    float A[16][16], Bm[16][8];
    auto h = [f16](uint64_t r, int hi) {
        const uint32_t u = (uint32_t(r) >> (16 * hi)) & 0xffffu;
        if (!f16) return __uint_as_float(u << 16);
        _Float16 x;
        const uint16_t u16 = uint16_t(u);
        std::memcpy(&x, &u16, 2);
        return static_cast<float>(x);
    };
    for (int l = 0; l < 32; ++l) {
        const int g = l / 4, tt = l % 4;
        for (int e = 0; e < 2; ++e) {
            A[g][2 * tt + e] = h(b->xch[w][l][0], e);
            A[g + 8][2 * tt + e] = h(b->xch[w][l][1], e);
            A[g][2 * tt + 8 + e] = h(b->xch[w][l][2], e);
            A[g + 8][2 * tt + 8 + e] = h(b->xch[w][l][3], e);
            Bm[2 * tt + e][g] = h(b->xch[w][l][4], e);
            Bm[2 * tt + 8 + e][g] = h(b->xch[w][l][5], e);
        }
    }
    const int g = lane / 4, tt = lane % 4;
    const int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * tt, 2 * tt + 1, 2 * tt, 2 * tt + 1};
    for (int i = 0; i < 4; ++i) {
        float acc = d[i];
        for (int k = 0; k < 16; ++k) acc = std::fma(A[rows[i]][k], Bm[k][cols[i]], acc);
        d[i] = acc;
    }
    warp_sync();
}

}  // namespace emu

#define threadIdx (::emu::thread_idx())
#define blockIdx (::emu::block_idx())
#define blockDim (::emu::block_dim())
#define gridDim (::emu::grid_dim())
inline void __syncthreads() { emu::syncthreads(); }
template <typename T> inline T __shfl_xor_sync(unsigned, T v, int m) { return emu::shfl_from(v, emu::src_xor, m); }
template <typename T> inline T __shfl_up_sync(unsigned, T v, int d) { return emu::shfl_from(v, emu::src_up, d); }
template <typename T> inline T __shfl_sync(unsigned, T v, int s) { return emu::shfl_from(v, emu::src_idx, s); }
