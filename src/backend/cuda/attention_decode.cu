// Gated attention, decode rows (sequences with one row, or up to Args::dec_rows rows): the split-K
// tensor-core kernel (attention_mma.cuh, kDecode = true) and the combine pass over its partials. Launched by
// launch_gated_attention (attention_kernels.cu) after the K/V store, on the caller's stream.
#include "backend/cuda/attention_mma.cuh"

namespace qs::cuda::attn {
namespace {

// ---------------------------------------------------------------------------------------------
// 3. Combine the split-K partials of decode rows: grid (num_seqs, Hq, Args::dec_rows) x 128
// threads, block z = row z of the sequence. The rows run in parallel: one after another in one
// block, a 2-row MTP verify step's combine took 14.5 µs against 8 at one row (H200 trace). Each
// row's sums are the same either way.

// Run by warp 0 of a combine block: the splits' weights 2^(m_split − m_max) into wgt[splits] and
// 1 / Σ weight · l into *inv_total (both versions: the same sums).
__device__ __forceinline__ void combine_weights(const Args& a, int64_t slot0, int head, float* wgt, float* inv_total) {
    float mx = kNegInf;
    for (int sp = threadIdx.x; sp < a.splits; sp += 32) mx = fmaxf(mx, a.part_ml[(slot0 + sp) * a.Hq + head].x);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float tot = 0.0f;
    for (int sp = threadIdx.x; sp < a.splits; sp += 32) {
        const float2 ml = a.part_ml[(slot0 + sp) * a.Hq + head];
        const float w = ml.x == kNegInf ? 0.0f : exp2f(ml.x - mx);
        wgt[sp] = w;
        tot += w * ml.y;
    }
    tot = warp_sum(tot);
    if (threadIdx.x == 0) *inv_total = tot > 0.0f ? 1.0f / tot : 0.0f;
}

// A combine block's (sequence blockIdx.x, row blockIdx.z): the batch row and its first partial slot;
// false when the sequence has no such row on the decode kernel.
__device__ __forceinline__ bool combine_row(const Args& a, int* row, int64_t* slot0) {
    const int seq_idx = blockIdx.x, r = blockIdx.z;
    const DeviceSeq s = a.batch.seqs[seq_idx];
    if (s.num_tokens < 1 || s.num_tokens > a.dec_rows || r >= s.num_tokens) return false;
    *row = s.row_begin + r;
    *slot0 = int64_t(a.dec_rows > 1 ? *row : seq_idx) * a.splits;
    return true;
}

__global__ void __launch_bounds__(128) combine_kernel(const __grid_constant__ Args a) {
    __shared__ float wgt[kMaxSplitsHard];
    __shared__ float inv_total;
    const int head = blockIdx.y;
    int row;
    int64_t slot0;
    if (!combine_row(a, &row, &slot0)) return;  // block-uniform
    if (threadIdx.x < 32) combine_weights(a, slot0, head, wgt, &inv_total);
    __syncthreads();
    const float* gate = a.qg + (int64_t(row) * a.Hq + head) * 2 * a.D + a.D;
    float* dst = a.out + (int64_t(row) * a.Hq + head) * a.D;
    for (int d = threadIdx.x; d < a.D; d += blockDim.x) {
        float acc = 0.0f;
        // The load before the test: the splits' loads can then be in flight together (a split
        // with no keys leaves its O slot unwritten, so its value is read but never used).
#pragma unroll 8
        for (int sp = 0; sp < a.splits; ++sp) {
            const float w = wgt[sp];
            const float o = a.part_o[((slot0 + sp) * a.Hq + head) * a.D + d];
            acc = w != 0.0f ? fmaf(w, o, acc) : acc;  // the fma nvcc made of acc += w * o
        }
        dst[d] = acc * inv_total * sigmoidf_(gate[d]);
    }
}

// Version 2: the same sums in the same order, with the loads hoisted. A one-stream decode step's
// combine (32 splits, D 256) took ~8 µs at 128 threads: each thread's two head dims read the 32
// partials 8 at a time, 8 dependent round trips to L2 after the one for its split weights. Here the
// partials of the first kCombineBatch splits (and the output gate) are requested before the
// weights are computed, so at up to 16 splits the block waits on memory twice (the sequence record,
// then everything); each further 16 splits add one round trip.
constexpr int kCombineThreads = 128;
constexpr int kCombineDims = 2;    // head dims per thread: D <= 256
constexpr int kCombineBatch = 16;  // splits loaded together

__global__ void __launch_bounds__(kCombineThreads) combine_v2_kernel(const __grid_constant__ Args a) {
    __shared__ float wgt[kMaxSplitsHard];
    __shared__ float inv_total;
    const int head = blockIdx.y;
    int row;
    int64_t slot0;
    if (!combine_row(a, &row, &slot0)) return;  // block-uniform
    const int splits = a.splits;
    auto part = [&](int sp, int d) { return a.part_o[((slot0 + sp) * a.Hq + head) * a.D + d]; };
    float o[kCombineDims][kCombineBatch], gate[kCombineDims];
    auto load_batch = [&](int sp0) {
#pragma unroll
        for (int j = 0; j < kCombineDims; ++j) {
            const int d = threadIdx.x + j * kCombineThreads;
#pragma unroll
            for (int i = 0; i < kCombineBatch; ++i)  // a split with no keys: read, weight 0, never added
                o[j][i] = d < a.D && sp0 + i < splits ? part(sp0 + i, d) : 0.0f;
        }
    };
    load_batch(0);
#pragma unroll
    for (int j = 0; j < kCombineDims; ++j) {
        const int d = threadIdx.x + j * kCombineThreads;
        gate[j] = d < a.D ? a.qg[(int64_t(row) * a.Hq + head) * 2 * a.D + a.D + d] : 0.0f;
    }
    if (threadIdx.x < 32) combine_weights(a, slot0, head, wgt, &inv_total);  // while the partials load
    __syncthreads();
    float acc[kCombineDims] = {};
    for (int sp0 = 0; sp0 < splits; sp0 += kCombineBatch) {
        if (sp0 > 0) load_batch(sp0);
#pragma unroll
        for (int i = 0; i < kCombineBatch; ++i) {
            if (sp0 + i >= splits) break;
            const float w = wgt[sp0 + i];
#pragma unroll
            for (int j = 0; j < kCombineDims; ++j) acc[j] = w != 0.0f ? fmaf(w, o[j][i], acc[j]) : acc[j];
        }
    }
    float* dst = a.out + (int64_t(row) * a.Hq + head) * a.D;
#pragma unroll
    for (int j = 0; j < kCombineDims; ++j) {
        const int d = threadIdx.x + j * kCombineThreads;
        if (d < a.D) dst[d] = acc[j] * inv_total * sigmoidf_(gate[j]);
    }
}

}  // namespace

void launch_decode_combine(const Args& a, cudaStream_t stream) {
    const dim3 grid(a.batch.num_seqs, a.Hq, a.dec_rows);
    if (a.combine_version == 2) {
        static_assert(kCombineDims * kCombineThreads >= 256, "head_dim <= 256");
        ptx::launch_kernel(combine_v2_kernel, grid, dim3(kCombineThreads), 0, stream, a);
    } else {
        ptx::launch_kernel(combine_kernel, grid, dim3(128), 0, stream, a);
    }
    QS_CUDA_CHECK_LAUNCH();
}

int decode_split_count(const GatedAttentionParams& p, const Args& a, int64_t base_blocks, int blocks_per_sm) {
    const int64_t slots = p.workspace ? partial_slots(p.batch.num_tokens, p.max_splits) : 0;
    // Partial slots per (sequence, split), or per (row, split) when sequences may have several rows.
    const int64_t units = a.dec_rows > 1 ? int64_t(p.batch.num_tokens) : int64_t(p.batch.num_seqs);
    if (slots < 2 * units) return 1;
    const int64_t target = int64_t(sm_count()) * blocks_per_sm * 2;  // two waves of resident blocks
    const int64_t want = (target + base_blocks - 1) / base_blocks;
    return int(std::clamp<int64_t>(
        want, 1, std::min<int64_t>({int64_t(p.max_splits), slots / units, int64_t(kMaxSplitsHard)})));
}

// The grid is fixed by num_seqs; the split count by num_seqs and the workspace, never by context.
template <typename CT, int DP>
void launch_decode(const GatedAttentionParams& p, Args& a, cudaStream_t stream) {
    constexpr int kDecBK = QS_ATTN_DEC_BK, kDecStages = QS_ATTN_DEC_STAGES;
    const int S = p.batch.num_seqs;
    using Cfg = AttnCfg<CT, DP, 1, kDecBK, kDecStages>;
    const int per_sm = prepare_attention_kernel<CT, DP, 1, kDecBK, kDecStages, true>();
    static_assert(Cfg::kM == kDecodeMmaRows, "decode rows are packed into one warp's 16 mma rows");
    const int hg = a.dec_hg, nhc = (a.G + hg - 1) / hg;
    const int64_t base = int64_t(S) * p.Hkv * nhc;
    const int splits = decode_split_count(p, a, base, per_sm);
    a.splits = splits;
    const dim3 grid(splits, S, p.Hkv * nhc);
    ptx::launch_kernel(attention_kernel<CT, DP, 1, kDecBK, kDecStages, true>, grid, dim3(Cfg::kThreads),
                       Cfg::kSmemBytes, stream, a);
    QS_CUDA_CHECK_LAUNCH();
    if (splits > 1) launch_decode_combine(a, stream);
}

template void launch_decode<__nv_bfloat16, 64>(const GatedAttentionParams&, Args&, cudaStream_t);
template void launch_decode<__nv_bfloat16, 128>(const GatedAttentionParams&, Args&, cudaStream_t);
template void launch_decode<__nv_bfloat16, 256>(const GatedAttentionParams&, Args&, cudaStream_t);
template void launch_decode<__nv_fp8_e4m3, 64>(const GatedAttentionParams&, Args&, cudaStream_t);
template void launch_decode<__nv_fp8_e4m3, 128>(const GatedAttentionParams&, Args&, cudaStream_t);
template void launch_decode<__nv_fp8_e4m3, 256>(const GatedAttentionParams&, Args&, cudaStream_t);

}  // namespace qs::cuda::attn
