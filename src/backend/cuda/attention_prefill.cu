// Gated attention, prefill rows (sequences with several rows: prompt chunks, MTP verification):
// causal flash attention on the tensor-core kernel (attention_mma.cuh, kDecode = false). Launched
// by launch_gated_attention (attention_kernels.cu) after the K/V store, on the caller's stream.
#include "backend/cuda/attention_mma.cuh"

namespace qs::cuda::attn {
namespace {

template <typename CT, int DP, int WARPS, int BK, int STAGES>
void launch_prefill(const GatedAttentionParams& p, const Args& a, cudaStream_t stream) {
    using Cfg = AttnCfg<CT, DP, WARPS, BK, STAGES>;
    prepare_attention_kernel<CT, DP, WARPS, BK, STAGES, false>();
    const int hg = std::min(a.G, Cfg::kM), nhc = (a.G + hg - 1) / hg, bq = Cfg::kM / hg;
    const int64_t tiles = (int64_t(p.batch.max_seq_tokens) + bq - 1) / bq;
    QS_CHECK_MSG(tiles <= 65535, "too many query tiles in one sequence");
    const dim3 grid(p.batch.num_seqs * p.Hkv * nhc, unsigned(tiles));
    ptx::launch_kernel(attention_kernel<CT, DP, WARPS, BK, STAGES, false>, grid, dim3(Cfg::kThreads), Cfg::kSmemBytes,
                       stream, a);
    QS_CUDA_CHECK_LAUNCH();
}

}  // namespace

// Long prompts at D = 256 use 8 warps (128 packed rows share each K/V tile: half the L2 traffic
// per FLOP of the 4-warp block).
template <typename CT, int DP>
void launch_prefill_rows(const GatedAttentionParams& p, const Args& a, cudaStream_t stream) {
    constexpr int kPreWarps = QS_ATTN_PRE_WARPS, kPreStages = QS_ATTN_PRE_STAGES;
    constexpr int kPreLongWarps = QS_ATTN_PRE_LONG_WARPS, kPreLongRows = QS_ATTN_PRE_LONG_ROWS;
    constexpr int kPreBK = DP == 256 ? QS_ATTN_PRE_BK : 64;
    if constexpr (DP == 256) {
        if (p.batch.max_seq_tokens >= kPreLongRows) {
            launch_prefill<CT, DP, kPreLongWarps, kPreBK, kPreStages>(p, a, stream);
            return;
        }
    }
    launch_prefill<CT, DP, kPreWarps, kPreBK, kPreStages>(p, a, stream);
}

template void launch_prefill_rows<__nv_bfloat16, 64>(const GatedAttentionParams&, const Args&, cudaStream_t);
template void launch_prefill_rows<__nv_bfloat16, 128>(const GatedAttentionParams&, const Args&, cudaStream_t);
template void launch_prefill_rows<__nv_bfloat16, 256>(const GatedAttentionParams&, const Args&, cudaStream_t);
template void launch_prefill_rows<__nv_fp8_e4m3, 64>(const GatedAttentionParams&, const Args&, cudaStream_t);
template void launch_prefill_rows<__nv_fp8_e4m3, 128>(const GatedAttentionParams&, const Args&, cudaStream_t);
template void launch_prefill_rows<__nv_fp8_e4m3, 256>(const GatedAttentionParams&, const Args&, cudaStream_t);

}  // namespace qs::cuda::attn
