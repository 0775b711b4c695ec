// fp32 linears of any row count, each output the bits small_linear_f32.cu gives it (see
// small_linear_kernels.h, "fp32 weights"): a row's result depends neither on T nor on which of the
// two kernels ran it, so with it on (CudaOptions::f32_tiles_max_rows, opt-in) the GDN b/a
// projections and the router of a sequence read the same values in a one-row step and a 512-row one.
//
// small_linear_f32's sum for row t and feature o (in = 4·n4: n4 chunks of 4 floats):
//   slice s = 0..7 covers chunks [n4·s/8, n4·(s+1)/8); its leaf l = 0..31 is an fma chain from 0
//   over the slice's chunks l, l + 32, l + 64, ... (each chunk's 4 columns in order); the slice sum
//   S_s is the butterfly over the 32 leaves (pairs l, l ^ 16 first, then l ^ 8, l ^ 4, l ^ 2,
//   l ^ 1); y = ((0 + S_0) + S_1) + ... + S_7.
// Here one warp computes the leaves of an 8 × 8 sub-tile (8 rows, 8 features) at once, lane =
// leaf, so each of its loads is a 512-byte run of one row of x or W; the 64 values per lane then go
// through a transposing reduction: each of the five levels adds the butterfly's pairs, but a lane
// keeps half its values and hands the other half to its partner, so lane l ends with sub-tile
// outputs 2l and 2l + 1 (index 8·row + feature) at one shuffle per value and level instead of 64.
// Block: 8 warps = SP slice groups × (8 / SP) sub-tiles (RS rows × FS features of them). A warp
// walks its group's slices in order; with SP == 1 it folds y in registers, otherwise each S_s goes
// to shared memory and one thread an output adds them in slice order. Rows past T read row T − 1
// and features past the last read the last feature; neither is stored.
#include "backend/cuda/small_linear_kernels.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/f32_linear_args.h"
#include "backend/cuda/ptx_helpers.cuh"
#include "core/check.h"

namespace qs::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kSlices = 8;  // small_linear_f32's K slices (its warps)
constexpr int kSub = 8;     // a warp's sub-tile: kSub rows × kSub features

// One butterfly level on the first 2·HALF values of v: pairs (lane, lane ^ OFFSET) as the butterfly
// adds them, but the lane keeps HALF sums (the upper half if its OFFSET bit is set) in v[0, HALF)
// and hands the other half to its partner.
template <int HALF, int OFFSET>
__device__ __forceinline__ void reduce_level(float (&v)[kSub * kSub], int lane) {
    const bool upper = (lane & OFFSET) != 0;
#pragma unroll
    for (int i = 0; i < HALF; ++i) {
        const float send = upper ? v[i] : v[i + HALF];
        const float keep = upper ? v[i + HALF] : v[i];
        v[i] = keep + __shfl_xor_sync(0xffffffffu, send, OFFSET);
    }
}

// The butterfly's five levels on 64 values a lane, each level keeping half: after it, v[0] and v[1]
// are the tree sums of values 2·lane and 2·lane + 1 (the lane's bits pick the half at each level).
__device__ __forceinline__ void transposing_reduce(float (&v)[kSub * kSub], int lane) {
    reduce_level<32, 16>(v, lane);
    reduce_level<16, 8>(v, lane);
    reduce_level<8, 4>(v, lane);
    reduce_level<4, 2>(v, lane);
    reduce_level<2, 1>(v, lane);
}

__device__ __forceinline__ int part_of(const F32LinearArgs& a, int f) {
    int p = 0;
    while (p + 1 < a.parts && f >= a.first_row[p + 1]) ++p;
    return p;
}

template <int SP, int RS>
__global__ __launch_bounds__(kWarps * 32) void f32_linear_tiles_kernel(const __grid_constant__ F32LinearArgs a) {
    constexpr int kGroups = kWarps / SP;  // sub-tiles a block
    constexpr int FS = kGroups / RS;
    constexpr int kPerWarp = kSlices / SP;
    static_assert(kWarps % SP == 0 && kGroups % RS == 0);
    __shared__ float sums[SP > 1 ? kSlices : 1][kGroups][kSub * kSub];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int group = warp % SP, sub = warp / SP;
    const int row0 = int(blockIdx.x) * (kSub * RS) + kSub * (sub % RS);
    const int feat0 = int(blockIdx.y) * (kSub * FS) + kSub * (sub / RS);
    const int features = a.first_row[a.parts];
    const int n4 = a.in / 4;
    const float4* xr[kSub];
    const float4* wr[kSub];
#pragma unroll
    for (int r = 0; r < kSub; ++r) xr[r] = reinterpret_cast<const float4*>(a.x) + size_t(min(row0 + r, a.T - 1)) * n4;
#pragma unroll
    for (int f = 0; f < kSub; ++f) {
        const int o = min(feat0 + f, features - 1), p = part_of(a, o);
        wr[f] = reinterpret_cast<const float4*>(a.w[p]) + size_t(o - a.first_row[p]) * n4;
    }
    float y[2] = {0.0f, 0.0f};
    for (int k = 0; k < kPerWarp; ++k) {
        const int s = group * kPerWarp + k;
        const int c_begin = n4 * s / kSlices, c_end = n4 * (s + 1) / kSlices;
        float v[kSub * kSub];
#pragma unroll
        for (int i = 0; i < kSub * kSub; ++i) v[i] = 0.0f;
        for (int c = c_begin + lane; c < c_end; c += 32) {
            float4 xv[kSub], wv[kSub];
#pragma unroll
            for (int r = 0; r < kSub; ++r) xv[r] = __ldg(xr[r] + c);
#pragma unroll
            for (int f = 0; f < kSub; ++f) wv[f] = __ldg(wr[f] + c);
#pragma unroll
            for (int r = 0; r < kSub; ++r)
#pragma unroll
                for (int f = 0; f < kSub; ++f) {
                    float acc = v[kSub * r + f];
                    acc = fmaf(wv[f].x, xv[r].x, acc);
                    acc = fmaf(wv[f].y, xv[r].y, acc);
                    acc = fmaf(wv[f].z, xv[r].z, acc);
                    acc = fmaf(wv[f].w, xv[r].w, acc);
                    v[kSub * r + f] = acc;
                }
        }
        transposing_reduce(v, lane);
        if constexpr (SP == 1) {
            y[0] += v[0];
            y[1] += v[1];
        } else {
            sums[s][sub][2 * lane] = v[0];
            sums[s][sub][2 * lane + 1] = v[1];
        }
    }
    auto store = [&](int sub_tile, int i, float value) {
        const int t = int(blockIdx.x) * (kSub * RS) + kSub * (sub_tile % RS) + i / kSub;
        const int o = int(blockIdx.y) * (kSub * FS) + kSub * (sub_tile / RS) + i % kSub;
        if (t >= a.T || o >= features) return;
        const int p = part_of(a, o);
        const int out = a.first_row[p + 1] - a.first_row[p];
        a.y[p][size_t(t) * out + (o - a.first_row[p])] = value;
    };
    if constexpr (SP == 1) {
        store(sub, 2 * lane, y[0]);
        store(sub, 2 * lane + 1, y[1]);
    } else {
        __syncthreads();
        for (int idx = int(threadIdx.x); idx < kGroups * kSub * kSub; idx += kWarps * 32) {
            const int g = idx / (kSub * kSub), i = idx % (kSub * kSub);
            float sum = 0.0f;
#pragma unroll
            for (int s = 0; s < kSlices; ++s) sum += sums[s][g][i];
            store(g, i, sum);
        }
    }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

struct Variant {
    int sp, rs;
};
// Tiles (rows × features): 0: 8 × 8 (slices over the 8 warps), 1: 16 × 16, 2: 32 × 16, 3: 16 × 32
// (each warp all 8 slices).
constexpr Variant kVariants[kF32LinearTileVariants] = {{8, 1}, {2, 2}, {1, 4}, {1, 2}};

template <int V>
void launch(const F32LinearArgs& a, cudaStream_t stream) {
    constexpr int SP = kVariants[V].sp, RS = kVariants[V].rs, FS = kWarps / SP / RS;
    const int features = a.first_row[a.parts];
    const dim3 grid{unsigned((a.T + kSub * RS - 1) / (kSub * RS)), unsigned((features + kSub * FS - 1) / (kSub * FS))};
    ptx::launch_kernel(f32_linear_tiles_kernel<SP, RS>, grid, dim3(kWarps * 32), 0, stream, a);
}

}  // namespace

bool f32_linear_tiles_supports(int64_t T, int64_t in, const void* w, const float* x) {
    return T >= 1 && T <= kF32LinearTilesMaxRows && in > 0 && in % 128 == 0 && T * in < (int64_t(1) << 31) &&
           aligned16(w) && aligned16(x);
}

int f32_linear_tile_variant(int64_t T, int64_t features, int sm_count) {
    // The largest tile that still gives ~90 % of the SMs a block: fewer bytes from L2 per output
    // (f32_linear_lab, H100: the b/a pair at 512 rows, 128 blocks of 16 × 16, 10.1 µs against 15.4
    // for 512 blocks of 8 × 8).
    for (int v : {2, 1}) {
        const int64_t tile_rows = kSub * kVariants[v].rs, tile_features = kSub * (kWarps / kVariants[v].sp / kVariants[v].rs);
        const int64_t blocks = ((T + tile_rows - 1) / tile_rows) * ((features + tile_features - 1) / tile_features);
        if (blocks * 10 >= int64_t(sm_count) * 9) return v;
    }
    return 0;
}

void launch_f32_linear_tiles(std::span<const SmallLinearF32Part> parts, int64_t in, const float* x, int64_t T,
                             cudaStream_t stream, int variant, int sm_count) {
    const F32LinearArgs a =
        make_f32_linear_args(parts, in, x, T, f32_linear_tiles_supports, int64_t(1) << 24, "launch_f32_linear_tiles");
    if (variant < 0) variant = f32_linear_tile_variant(T, a.first_row[a.parts], sm_count);
    QS_CHECK_MSG(variant < kF32LinearTileVariants, "launch_f32_linear_tiles: no such tile variant");
    static_assert(kF32LinearTileVariants == 4);
    switch (variant) {
        case 0: launch<0>(a, stream); break;
        case 1: launch<1>(a, stream); break;
        case 2: launch<2>(a, stream); break;
        default: launch<3>(a, stream); break;
    }
    QS_CUDA_CHECK_LAUNCH();
}

}  // namespace qs::cuda
