// Gated full attention: the public entry (attention_kernels.h) that checks the parameters, fills
// the kernels' argument block and enqueues the kernels of the other attention_*.cu files (spec
// §2.3; CPU reference: CpuOps::gated_attention in src/backend/cpu/cpu_attention.cpp). Maths and
// precision: attention_kernels.h; layouts: attention_common.cuh.
//
// Files, in launch order on one stream:
//  attention_store.cu     1. kv_store_kernel: one warp per (row, kv head): k-norm + RoPE, stores k
//                         and v rounded to the cache dtype at (page, offset) of the row's position.
//  attention_decode.cu    2./3. sequences with exactly one row: split-K tensor-core attention
//                         (attention_mma.cuh, kDecode = true) + combine of the partials.
//  attention_decode_v2.cu 2'. instead of 2. with decode_version 2 (D % 32 == 0): the
//                         streaming split-K kernel (keys as the mma's M, a ring per warp).
//  attention_prefill.cu   4. sequences with >= 2 rows: causal flash attention on the same
//                         tensor-core kernel (kDecode = false).
//  attention_prefill_wgmma.cu  4'. instead of 4. with prefill_version 2 (long prompts, D = 256):
//                         Q prep + K/V gather to bf16, FlashInfer's Hopper wgmma kernel, gate.
//  attention_fallback.cu  2.-4. for head_dim not a multiple of 32 (the transformers test fixtures;
//                         never the real model, D = 256) and for an f32 cache (reference
//                         precision): one block per (row, query head), fp32 on CUDA cores, every
//                         row in one launch.
#include "backend/cuda/attention_kernels.h"

#include <type_traits>

#include "backend/cuda/attention_common.cuh"
#include "core/check.h"

namespace qs::cuda {
namespace {

using attn::Args;

size_t align256(size_t n) { return (n + 255) & ~size_t(255); }

template <typename CT, int DP>
void launch_all(const GatedAttentionParams& p, Args& a, cudaStream_t stream) {
    const DeviceBatch& b = p.batch;
    const int T = b.num_tokens, S = b.num_seqs;

    attn::launch_kv_store<CT>(a, stream);
    if (S == 0) return;

    // Decode rows (sequences with one row, or up to a.dec_rows); the grid is fixed by num_seqs.
    // Skipped when every sequence has max_seq_tokens > dec_rows rows (a pure prefill batch).
    const int R = a.dec_rows;
    if (b.max_seq_tokens <= R || int64_t(S) * b.max_seq_tokens != T) {
        if (p.decode_version == 2 && attn::decode_v2_applies(p.D))
            attn::launch_decode_v2<CT, DP>(p, a, stream);
        else
            attn::launch_decode<CT, DP>(p, a, stream);
    }
    // Prefill rows (sequences with more rows).
    if (b.max_seq_tokens > R) {
        if (attention_prefill_v2_applies(p.prefill_version, p.D, p.kv_dtype, b.max_seq_tokens))
            attn::launch_prefill_wgmma<CT>(p, a, stream);
        else
            attn::launch_prefill_rows<CT, DP>(p, a, stream);
    }
}

// The fp32 kernel: the fixtures' head dims that are not multiples of 32, and the f32 cache.
template <typename CT>
void launch_on_cuda_cores(const GatedAttentionParams& p, Args& a, cudaStream_t stream) {
    attn::launch_kv_store<CT>(a, stream);
    if (p.batch.num_seqs > 0) attn::launch_fallback<CT>(a, stream);
}

template <typename CT>
void dispatch_d(const GatedAttentionParams& p, Args& a, cudaStream_t stream) {
    if constexpr (std::is_same_v<CT, float>) {  // reference precision: no tensor-core kernel reads f32
        launch_on_cuda_cores<CT>(p, a, stream);
    } else if (p.D % 32 != 0) {  // not tiled by the tensor-core kernels
        launch_on_cuda_cores<CT>(p, a, stream);
    } else if (p.D <= 64) {
        launch_all<CT, 64>(p, a, stream);
    } else if (p.D <= 128) {
        launch_all<CT, 128>(p, a, stream);
    } else {
        launch_all<CT, 256>(p, a, stream);
    }
}

}  // namespace

size_t attention_workspace_bytes(int64_t num_tokens, int64_t Hq, int64_t D, int64_t max_splits) {
    const int64_t slots = attn::partial_slots(num_tokens, max_splits);
    if (slots == 0) return 0;
    return align256(size_t(slots * Hq * D) * sizeof(float)) + size_t(slots * Hq) * sizeof(float2);
}

void launch_gated_attention(const GatedAttentionParams& p, cudaStream_t stream) {
    QS_CHECK(p.Hkv > 0 && p.Hq > 0 && p.Hq % p.Hkv == 0);
    QS_CHECK_MSG(p.D % 2 == 0 && p.D >= 2 && p.D <= 256, "head_dim must be even in [2, 256]");
    QS_CHECK_MSG(p.rotary_dim >= 0 && p.rotary_dim % 2 == 0 && p.rotary_dim <= p.D, "bad rotary_dim");
    QS_CHECK(p.block_size >= 1 && p.max_splits >= 1);
    QS_CHECK_MSG(p.decode_max_rows >= 1 && p.decode_max_rows <= 4, "decode_max_rows must be in [1, 4]");
    QS_CHECK_MSG(p.prefill_version == 1 || p.prefill_version == 2, "prefill_version must be 1 or 2");
    QS_CHECK_MSG(p.decode_version == 1 || p.decode_version == 2, "decode_version must be 1 or 2");
    QS_CHECK_MSG(p.decode_v2_variant >= 0 && p.decode_v2_variant <= 2, "decode_v2_variant must be 0, 1 or 2");
    QS_CHECK(p.qg && p.k && p.v && p.q_norm_w && p.k_norm_w && p.k_cache && p.v_cache && p.out);
    const DeviceBatch& b = p.batch;
    QS_CHECK(b.num_tokens >= 0 && b.num_seqs >= 0);
    if (b.num_tokens == 0) return;
    QS_CHECK(b.positions && b.row_seq && b.seqs && b.block_tables);
    QS_CHECK_MSG(b.max_seq_tokens >= 1 && b.max_seq_tokens <= b.num_tokens,
                 "DeviceBatch counts inconsistent");

    Args a{};
    a.qg = p.qg;
    a.k = p.k;
    a.v = p.v;
    a.q_norm_w = p.q_norm_w;
    a.k_norm_w = p.k_norm_w;
    a.k_cache = p.k_cache;
    a.v_cache = p.v_cache;
    a.batch = b;
    a.out = p.out;
    const int64_t slots = p.workspace ? attn::partial_slots(b.num_tokens, p.max_splits) : 0;
    a.part_o = static_cast<float*>(p.workspace);
    a.part_ml = slots ? reinterpret_cast<float2*>(static_cast<char*>(p.workspace) +
                                                  align256(size_t(slots * p.Hq * p.D) * sizeof(float)))
                      : nullptr;
    a.Hq = p.Hq;
    a.Hkv = p.Hkv;
    a.D = p.D;
    a.G = p.Hq / p.Hkv;
    a.rotary_dim = p.rotary_dim;
    a.block_size = p.block_size;
    a.bs_shift = (p.block_size & (p.block_size - 1)) == 0 ? __builtin_ctz(unsigned(p.block_size)) : -1;
    a.splits = 1;
    // Decode-kernel rows: at most the batch's longest sequence (a plain decode batch keeps
    // today's packing of min(G, 16) heads), and 16 / dec_hg packed rows hold them all.
    // Prefill version 2's plan takes every sequence of more than one row, so with it the decode
    // kernel keeps single rows only (no row is computed twice).
    const bool prefill_v2 = attention_prefill_v2_applies(p.prefill_version, p.D, p.kv_dtype, b.max_seq_tokens);
    // Multi-row sequences take the decode kernel only in small batches: on the H200
    // (attention_lab --verify-rows) 2 rows at 1k context took 74 against 110 µs for one sequence
    // and 1.2 ms → 0.15 ms at 16k, but 194 against 130 µs for 64 sequences, where the prefill
    // kernel's blocks already fill the GPU.
    constexpr int kDecodeRowsMaxSeqs = 8;
    a.dec_rows = prefill_v2 || b.num_seqs > kDecodeRowsMaxSeqs
                     ? 1
                     : std::max(1, std::min(p.decode_max_rows, b.max_seq_tokens));
    a.dec_hg = std::max(1, std::min(a.G, attn::kDecodeMmaRows / a.dec_rows));
    QS_CHECK_MSG(p.combine_version == 1 || p.combine_version == 2, "combine_version must be 1 or 2");
    a.combine_version = p.combine_version;
    a.eps = p.eps;
    // CPU: scale = 1/sqrt(float(D)); exp(x*scale - max) == exp2(x*scale*log2(e) - max*log2(e)).
    a.scale_log2 = (1.0f / std::sqrt(float(p.D))) * 1.4426950408889634f;
    for (int i = 0; i < p.rotary_dim / 2; ++i)  // exactly the CPU's expression (cpu_attention.cpp)
        a.inv_freq[i] = float(1.0 / std::pow(p.rope_theta, double(2 * i) / double(p.rotary_dim)));
    for (int i = 0; i < p.rotary_dim / 2; ++i)  // cpu_attention.cpp mrope_stream
        a.rope_stream[i] = (i % 3 == 1 && i < 3 * p.mrope_section[1])   ? 1
                           : (i % 3 == 2 && i < 3 * p.mrope_section[2]) ? 2
                                                                        : 0;

    if (p.kv_dtype == DeviceKvDtype::kBF16) dispatch_d<__nv_bfloat16>(p, a, stream);
    else if (p.kv_dtype == DeviceKvDtype::kFP8E4M3) dispatch_d<__nv_fp8_e4m3>(p, a, stream);
    else dispatch_d<float>(p, a, stream);
}

}  // namespace qs::cuda
