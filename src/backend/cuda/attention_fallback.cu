// Gated attention for head dims the tensor-core kernels do not tile (D % 32 != 0, e.g. the
// transformers test fixtures' D = 16): simple and clearly correct, not fast; the real model
// (D = 256) never comes here. Launched by launch_gated_attention (attention_kernels.cu) after the
// K/V store (attention_store.cu, which handles any D), on the caller's stream.
//
// One block of kThreads threads per (row, query head), grid (T, Hq): decode and prefill rows alike,
// since the causal bound of a row is its own position (keys 0..pos, all in the cache once the store
// kernel has run). Per block: warp 0 computes q = rope(rmsnorm_zc(q)) in fp32 into shared memory
// (norm_rope_warp, as the tensor-core kernels do); then the keys are taken kThreads at a time,
// thread i scoring key k0 + i (fp32 dot product, scaled into the log2 domain), an online softmax
// over the chunk (block max, block sum, rescale), and thread d accumulating output dims d and
// d + kThreads over the chunk's keys. Epilogue o / l ⊙ sigmoid(gate). Unlike the tensor-core path,
// q and the softmax weights stay in fp32.
#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ptx_helpers.cuh"
#include "core/check.h"

namespace qs::cuda::attn {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxD = 256;
constexpr int kDimsPerThread = kMaxD / kThreads;

template <typename CT>
__device__ __forceinline__ float from_cache(CT x) {
    return float(x);
}
template <>
__device__ __forceinline__ float from_cache<__nv_bfloat16>(__nv_bfloat16 x) {
    return __bfloat162float(x);
}

template <typename CT>
__global__ void __launch_bounds__(kThreads) fallback_attention_kernel(const __grid_constant__ Args a) {
    __shared__ float sq[kMaxD];        // q after norm + RoPE
    __shared__ float scratch[kMaxD];   // norm_rope_warp's scratch (warp 0)
    __shared__ float sp[kThreads];     // softmax weights of the current key chunk
    __shared__ int64_t soff[kThreads];  // cache element offset of each key's (slot, kv head) row
    __shared__ float red_max[kWarps], red_sum[kWarps];
    const int row = blockIdx.x, head = blockIdx.y;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int D = a.D;
    const int pos = a.batch.positions[row];
    const DeviceSeq s = a.batch.seqs[a.batch.row_seq[row]];
    const int* bt = a.batch.block_tables + s.block_table_begin;
    const int64_t head_off = int64_t(head / a.G) * D;
    const CT* kc = static_cast<const CT*>(a.k_cache);
    const CT* vc = static_cast<const CT*>(a.v_cache);

    if (warp == 0) {
        float vals[kMaxD / 32];
        norm_rope_warp<kMaxD / 32>(a.qg + (int64_t(row) * a.Hq + head) * 2 * D, a.q_norm_w, D, a.rotary_dim,
                                   rope_pos(a.batch, row), a.eps, a.inv_freq, a.rope_stream, scratch, vals);
#pragma unroll
        for (int c = 0; c < kMaxD / 32; ++c)
            if (lane + 32 * c < D) sq[lane + 32 * c] = vals[c];
    }
    __syncthreads();

    float m_run = kNegInf, l_run = 0.0f;  // the same in every thread
    float acc[kDimsPerThread] = {};
    const int ctx = pos + 1;
    for (int k0 = 0; k0 < ctx; k0 += kThreads) {
        const int key = k0 + tid;
        float sc = kNegInf;
        if (key < ctx) {
            const int page = bt[key / a.block_size];
            const int64_t off = (int64_t(page) * a.block_size + key % a.block_size) * a.Hkv * D + head_off;
            soff[tid] = off;
            float dot = 0.0f;
            for (int d = 0; d < D; ++d) dot = fmaf(sq[d], from_cache(kc[off + d]), dot);
            sc = dot * a.scale_log2;
        }
        float mx = sc;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        if (lane == 0) red_max[warp] = mx;
        __syncthreads();
        mx = red_max[0];
#pragma unroll
        for (int w = 1; w < kWarps; ++w) mx = fmaxf(mx, red_max[w]);
        const float m_new = fmaxf(m_run, mx);  // finite: key k0 < ctx is in this chunk
        const float alpha = exp2f(m_run - m_new);  // 0 on the first chunk
        const float pw = key < ctx ? exp2f(sc - m_new) : 0.0f;
        sp[tid] = pw;
        const float ps = warp_sum(pw);
        if (lane == 0) red_sum[warp] = ps;
        __syncthreads();
        float sum = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) sum += red_sum[w];
        l_run = l_run * alpha + sum;
        m_run = m_new;
        const int nk = min(kThreads, ctx - k0);
#pragma unroll
        for (int c = 0; c < kDimsPerThread; ++c) {
            const int d = tid + kThreads * c;
            if (d >= D) continue;
            float o = acc[c] * alpha;
            for (int i = 0; i < nk; ++i) o = fmaf(sp[i], from_cache(vc[soff[i] + d]), o);
            acc[c] = o;
        }
        __syncthreads();  // sp, soff, red_* are rewritten by the next chunk
    }

    const float inv_l = l_run > 0.0f ? 1.0f / l_run : 0.0f;
    const float* gate = a.qg + (int64_t(row) * a.Hq + head) * 2 * D + D;
    float* dst = a.out + (int64_t(row) * a.Hq + head) * D;
#pragma unroll
    for (int c = 0; c < kDimsPerThread; ++c) {
        const int d = tid + kThreads * c;
        if (d < D) dst[d] = acc[c] * inv_l * sigmoidf_(gate[d]);
    }
}

}  // namespace

template <typename CT>
void launch_fallback(const Args& a, cudaStream_t stream) {
    static_assert(kMaxD <= kThreads * kDimsPerThread);
    QS_CHECK_MSG(a.D <= kMaxD && a.Hq <= 65535, "attention fallback: head_dim or head count too large");
    ptx::launch_kernel(fallback_attention_kernel<CT>, dim3(a.batch.num_tokens, a.Hq), dim3(kThreads), 0, stream, a);
    QS_CUDA_CHECK_LAUNCH();
}

template void launch_fallback<__nv_bfloat16>(const Args&, cudaStream_t);
template void launch_fallback<__nv_fp8_e4m3>(const Args&, cudaStream_t);
template void launch_fallback<float>(const Args&, cudaStream_t);

}  // namespace qs::cuda::attn
