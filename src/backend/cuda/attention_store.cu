// Gated attention, step 1: k-norm + RoPE of every row's keys and the store of k and v into the
// paged cache (bf16 or fp8 e4m3), for any head_dim <= 256. Launched first by
// launch_gated_attention (attention_kernels.cu) on the caller's stream.
#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ptx_helpers.cuh"

namespace qs::cuda::attn {
namespace {

// ---------------------------------------------------------------------------------------------
// 1. K/V: norm + RoPE + store into the paged cache.

template <typename CT>
__global__ void __launch_bounds__(kStoreWarps * 32) kv_store_kernel(const __grid_constant__ Args a) {
    __shared__ float scratch[kStoreWarps][256];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int item = blockIdx.x * kStoreWarps + warp;
    if (item >= a.batch.num_tokens * a.Hkv) return;  // warp-uniform; no block barrier below
    const int row = item / a.Hkv, h = item - row * a.Hkv;
    const int pos = a.batch.positions[row];
    const DeviceSeq s = a.batch.seqs[a.batch.row_seq[row]];
    const int page = a.batch.block_tables[s.block_table_begin + pos / a.block_size];
    const int64_t slot = int64_t(page) * a.block_size + pos % a.block_size;
    const int64_t src = (int64_t(row) * a.Hkv + h) * a.D;
    float vals[8];
    norm_rope_warp<8>(a.k + src, a.k_norm_w, a.D, a.rotary_dim, rope_pos(a.batch, row), a.eps, a.inv_freq,
                      a.rope_stream, scratch[warp], vals);
    CT* kd = static_cast<CT*>(a.k_cache) + (slot * a.Hkv + h) * a.D;
    CT* vd = static_cast<CT*>(a.v_cache) + (slot * a.Hkv + h) * a.D;
    const float* vs = a.v + src;
#pragma unroll
    for (int c = 0; c < 8; ++c) {
        const int j = lane + 32 * c;
        if (j < a.D) {
            kd[j] = to_cache<CT>(vals[c]);
            vd[j] = to_cache<CT>(vs[j]);
        }
    }
}

}  // namespace

template <typename CT>
void launch_kv_store(const Args& a, cudaStream_t stream) {
    const int T = a.batch.num_tokens;
    ptx::launch_kernel(kv_store_kernel<CT>, dim3((T * a.Hkv + kStoreWarps - 1) / kStoreWarps), dim3(kStoreWarps * 32), 0,
                       stream, a);
    QS_CUDA_CHECK_LAUNCH();
}

template void launch_kv_store<__nv_bfloat16>(const Args&, cudaStream_t);
template void launch_kv_store<__nv_fp8_e4m3>(const Args&, cudaStream_t);
template void launch_kv_store<float>(const Args&, cudaStream_t);

}  // namespace qs::cuda::attn
