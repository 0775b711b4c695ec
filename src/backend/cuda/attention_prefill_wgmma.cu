// Gated attention, prefill version 2 (GatedAttentionParams::prefill_version = 2; CudaOptions::
// attention_prefill_version): the prefill rows of a batch whose longest sequence has >=
// kAttentionV2MinRows rows, head_dim 256, on FlashInfer 0.3.1's Hopper (FA3-style) ragged prefill
// kernel (wgmma + TMA, warp-specialised; include/flashinfer/attention/hopper/prefill_sm90.cuh,
// Apache-2.0, headers installed by scripts/setup_flashinfer.sh, included from there, not copied).
// Launched by launch_all (attention_kernels.cu) after the K/V store, instead of
// launch_prefill_rows; decode rows keep the split-K kernel. Stages, all on `stream`:
//  1. plan_kernel: the work list FlashInfer's BatchPrefillTileScheduler reads (one 128-row query
//     tile of one sequence per item, latest tiles of every sequence first so that the hardware's
//     block order approximates longest-first), and each sequence's offset in the K/V scratch.
//  2. q_prep_kernel: q-norm + RoPE (norm_rope_warp, the CPU's operation order) -> bf16 Q [T, Hq, D].
//  3. kv_gather_kernel: each prefill sequence's whole causal range [0, start_pos + n) of K and V,
//     gathered through the page table from the cache (bf16 copied, fp8 e4m3 widened to bf16:
//     exact) into contiguous bf16 [kv_tokens, Hkv, D]. Memory-bound, small beside the O(n^2)
//     products at the lengths this version runs at.
//  4. FlashInfer's kernel: dense varlen causal attention with GQA (16 query heads on 2 KV heads
//     read from the same K/V rows), causal mask aligned bottom-right (query i of a sequence with
//     kv_len keys sees keys <= i + kv_len - qo_len = its position): continued chunks over cached
//     pages are the last rows of their causal range. Output bf16 O [T, Hq, D].
//  5. gate_kernel: out = O ⊙ sigmoid(gate) in fp32, prefill rows only.
// Precision (differs from version 1): q, k, v and the softmax weights in bf16 for both cache
// dtypes (version 1 uses f16 with an fp8 cache), and O rounded to bf16 before the gate.
// Compiled only when CMake finds the FlashInfer + CUTLASS headers (QS_HAVE_FLASHINFER); otherwise
// attention_prefill_v2_available() is false and the launcher refuses. One instantiation of the
// FlashInfer kernel (bf16, D 256, causal): CI compile time.
#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_limits.h"
#include "backend/cuda/ptx_helpers.cuh"
#include "core/check.h"

#if defined(QS_HAVE_FLASHINFER)
#include <flashinfer/attention/hopper/default_params.cuh>
#include <flashinfer/attention/hopper/prefill_sm90.cuh>
#include <flashinfer/attention/hopper/variants.cuh>
#endif

namespace qs::cuda {

namespace {

constexpr int kV2HeadDim = 256;
constexpr int kV2TileQ = 128;  // FlashInfer's CTA_Q for head_dim 256 (getCTATileSize)

size_t align256(size_t n) { return (n + 255) & ~size_t(255); }

// Workspace carve-up (all offsets 256-byte aligned). Items: an upper bound on the query tiles,
// sum over sequences of ceil(n / 128) <= T / 128 + S.
struct V2Layout {
    int64_t items = 0;
    size_t q = 0, o = 0, k = 0, v = 0, plan = 0, total = 0;
};
V2Layout v2_layout(int64_t T, int64_t S, int64_t Hq, int64_t Hkv, int64_t D, int64_t kv_tokens) {
    V2Layout l;
    l.items = (T + kV2TileQ - 1) / kV2TileQ + S;
    size_t off = 0;
    auto take = [&](size_t bytes) {
        const size_t at = off;
        off += align256(bytes);
        return at;
    };
    l.q = take(size_t(T * Hq * D) * 2);
    l.o = take(size_t(T * Hq * D) * 2);
    l.k = take(size_t(std::max<int64_t>(kv_tokens, 1) * Hkv * D) * 2);
    l.v = take(size_t(std::max<int64_t>(kv_tokens, 1) * Hkv * D) * 2);
    // 8 int arrays of items (+1) entries, then seq_kv_begin [S + 1].
    l.plan = take(size_t(8 * (l.items + 1) + S + 1) * 4);
    l.total = off;
    return l;
}

// Plan arrays inside the workspace.
struct PlanPtrs {
    int32_t *work_indptr, *qo_tile, *qo_indptr, *kv_indptr, *qo_len, *kv_len, *batch_idx, *head_idx, *seq_kv_begin;
};
PlanPtrs plan_ptrs(void* ws, const V2Layout& l) {
    int32_t* base = reinterpret_cast<int32_t*>(static_cast<char*>(ws) + l.plan);
    const int64_t n = l.items + 1;
    PlanPtrs p;
    p.work_indptr = base;
    p.qo_tile = base + n;
    p.qo_indptr = base + 2 * n;
    p.kv_indptr = base + 3 * n;
    p.qo_len = base + 4 * n;
    p.kv_len = base + 5 * n;
    p.batch_idx = base + 6 * n;
    p.head_idx = base + 7 * n;
    p.seq_kv_begin = base + 8 * n;
    return p;
}

__device__ __forceinline__ int v2_tiles(const DeviceSeq& s) {
    return s.num_tokens > 1 ? (s.num_tokens + kV2TileQ - 1) / kV2TileQ : 0;  // one-row sequences: decode kernel
}

// 1. One block. Item order: rank r (0 = each sequence's last tile) major, sequence minor; item
// (s, r) lands at sum_s' min(tiles_s', r) + #{s' < s : tiles_s' > r}. CTA x of the FlashInfer
// grid runs item x (work_indptr[x] = min(x, items)); CTAs past the items exit at once.
__global__ void plan_kernel(DeviceBatch b, PlanPtrs p, int max_items) {
    const int S = b.num_seqs;
    if (threadIdx.x == 0) {
        int acc = 0;
        for (int s = 0; s < S; ++s) {
            p.seq_kv_begin[s] = acc;
            const DeviceSeq d = b.seqs[s];
            if (d.num_tokens > 1) acc += d.start_pos + d.num_tokens;
        }
        p.seq_kv_begin[S] = acc;
    }
    __syncthreads();
    int total = 0;
    for (int s = 0; s < S; ++s) total += v2_tiles(b.seqs[s]);
    for (int x = threadIdx.x; x <= max_items; x += blockDim.x) p.work_indptr[x] = min(x, total);
    for (int s = threadIdx.x; s < S; s += blockDim.x) {
        const DeviceSeq d = b.seqs[s];
        const int nt = v2_tiles(d);
        for (int r = 0; r < nt; ++r) {
            int at = 0;
            for (int s2 = 0; s2 < S; ++s2) {
                const int t2 = v2_tiles(b.seqs[s2]);
                at += min(t2, r) + (s2 < s && t2 > r ? 1 : 0);
            }
            p.qo_tile[at] = nt - 1 - r;
            p.qo_indptr[at] = d.row_begin;
            p.kv_indptr[at] = p.seq_kv_begin[s];
            p.qo_len[at] = d.num_tokens;
            p.kv_len[at] = d.start_pos + d.num_tokens;
            p.batch_idx[at] = s;
            p.head_idx[at] = 0;  // unused by BatchPrefillTileScheduler (head = blockIdx.y)
        }
    }
}

// 2. One warp per (row, query head) of the prefill sequences.
constexpr int kPrepWarps = 8;
__global__ void __launch_bounds__(kPrepWarps * 32) q_prep_kernel(const __grid_constant__ attn::Args a,
                                                                  __nv_bfloat16* __restrict__ q) {
    __shared__ float scratch[kPrepWarps][kV2HeadDim];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t wid = int64_t(blockIdx.x) * kPrepWarps + warp;
    if (wid >= int64_t(a.batch.num_tokens) * a.Hq) return;
    const int row = int(wid / a.Hq), head = int(wid - int64_t(row) * a.Hq);
    __nv_bfloat16* dst = q + wid * kV2HeadDim;
    if (a.batch.seqs[a.batch.row_seq[row]].num_tokens <= 1) {  // decode row: zeros (read, never used, by
#pragma unroll                                                  // the tiles' spare rows)
        for (int c = 0; c < kV2HeadDim / 32; ++c) dst[lane + 32 * c] = __float2bfloat16_rn(0.0f);
        return;
    }
    float vals[kV2HeadDim / 32];
    attn::norm_rope_warp<kV2HeadDim / 32>(a.qg + (int64_t(row) * a.Hq + head) * 2 * a.D, a.q_norm_w, a.D,
                                          a.rotary_dim, attn::rope_pos(a.batch, row), a.eps, a.inv_freq,
                                          a.rope_stream, scratch[warp], vals);
#pragma unroll
    for (int c = 0; c < kV2HeadDim / 32; ++c) dst[lane + 32 * c] = __float2bfloat16_rn(vals[c]);
}

// 3. One thread per 8 elements (16 bytes of bf16 out) of one K/V scratch row; blockDim = 256.
template <typename CT>
__global__ void kv_gather_kernel(const __grid_constant__ attn::Args a, const int32_t* __restrict__ seq_kv_begin,
                                 int64_t kv_tokens, __nv_bfloat16* __restrict__ k_out,
                                 __nv_bfloat16* __restrict__ v_out) {
    const int row_elems = a.Hkv * a.D, chunks = row_elems / 8;
    const int64_t gid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t i = gid / chunks;
    const int c = int(gid - i * chunks);
    const int S = a.batch.num_seqs;
    if (i >= kv_tokens || i >= seq_kv_begin[S]) return;
    int lo = 0, hi = S - 1;  // last s with seq_kv_begin[s] <= i (empty sequences share offsets)
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (seq_kv_begin[mid] <= i) lo = mid;
        else hi = mid - 1;
    }
    const DeviceSeq s = a.batch.seqs[lo];
    const int key = int(i - seq_kv_begin[lo]);
    const int pi = a.bs_shift >= 0 ? (key >> a.bs_shift) : key / a.block_size;
    const int page = a.batch.block_tables[s.block_table_begin + pi];
    const int64_t slot = int64_t(page) * a.block_size + (key - pi * a.block_size);
    const int64_t src = slot * row_elems + int64_t(c) * 8;
    const int64_t dst = i * row_elems + int64_t(c) * 8;
    if constexpr (std::is_same_v<CT, __nv_bfloat16>) {
        *reinterpret_cast<uint4*>(k_out + dst) =
            *reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(a.k_cache) + src);
        *reinterpret_cast<uint4*>(v_out + dst) =
            *reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(a.v_cache) + src);
    } else {
        const uint8_t* caches[2] = {static_cast<const uint8_t*>(a.k_cache), static_cast<const uint8_t*>(a.v_cache)};
        __nv_bfloat16* outs[2] = {k_out, v_out};
#pragma unroll
        for (int t = 0; t < 2; ++t) {
            const uint2 raw = *reinterpret_cast<const uint2*>(caches[t] + src);
            const uint32_t w[2] = {raw.x, raw.y};
            uint32_t h[4];
#pragma unroll
            for (int q = 0; q < 2; ++q) {
#pragma unroll
                for (int half = 0; half < 2; ++half) {
                    // e4m3 -> f16 (exact) -> f32 -> bf16 (exact: e4m3 has 3 mantissa bits).
                    const __half2_raw hr =
                        __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t((w[q] >> (16 * half)) & 0xffffu), __NV_E4M3);
                    const float2 f = __half22float2(__half2(hr));
                    const __nv_bfloat162 bb = __floats2bfloat162_rn(f.x, f.y);
                    uint32_t u;
                    memcpy(&u, &bb, 4);
                    h[2 * q + half] = u;
                }
            }
            *reinterpret_cast<uint4*>(outs[t] + dst) = make_uint4(h[0], h[1], h[2], h[3]);
        }
    }
}

// 5. One thread per 8 output elements of the prefill rows.
__global__ void gate_kernel(const __grid_constant__ attn::Args a, const __nv_bfloat16* __restrict__ o) {
    const int per_row = a.Hq * a.D / 8;
    const int64_t gid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (gid >= int64_t(a.batch.num_tokens) * per_row) return;
    const int row = int(gid / per_row);
    if (a.batch.seqs[a.batch.row_seq[row]].num_tokens <= 1) return;  // decode row: written by the decode kernel
    const int e = int(gid - int64_t(row) * per_row) * 8, head = e / a.D, d = e - head * a.D;
    const uint4 raw = *reinterpret_cast<const uint4*>(o + int64_t(row) * a.Hq * a.D + e);
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
    const float* gate = a.qg + (int64_t(row) * a.Hq + head) * 2 * a.D + a.D + d;
    const float4 g0 = *reinterpret_cast<const float4*>(gate), g1 = *reinterpret_cast<const float4*>(gate + 4);
    const float gs[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
    float r[8];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        __nv_bfloat162 bb;
        memcpy(&bb, &w[q], 4);
        const float2 f = __bfloat1622float2(bb);
        r[2 * q] = f.x * attn::sigmoidf_(gs[2 * q]);
        r[2 * q + 1] = f.y * attn::sigmoidf_(gs[2 * q + 1]);
    }
    float* dst = a.out + int64_t(row) * a.Hq * a.D + e;
    *reinterpret_cast<float4*>(dst) = make_float4(r[0], r[1], r[2], r[3]);
    *reinterpret_cast<float4*>(dst + 4) = make_float4(r[4], r[5], r[6], r[7]);
}

#if defined(QS_HAVE_FLASHINFER)
using FiParams = flashinfer::BatchPrefillRaggedParams<cute::bfloat16_t, cute::bfloat16_t, cute::bfloat16_t, int32_t>;
using FiTraits = flashinfer::AttentionKernelTraits</*USE_TMA_LOAD_KV=*/true, kV2HeadDim, kV2HeadDim,
                                                   /*CTA_Q_=*/kV2TileQ, /*CTA_KV_=*/64, /*NUM_STAGES_=*/2,
                                                   cute::bfloat16_t, cute::bfloat16_t, cute::bfloat16_t, int32_t,
                                                   flashinfer::StandardAttention>;
static_assert(FiTraits::CTA_Q == kV2TileQ);
// Q 64 KB + K and V 2 stages x 32 KB each (O aliases V) + barriers: one block per SM.
static_assert(sizeof(typename FiTraits::SharedStorage) <= 227 * 1024, "FlashInfer D 256 tile does not fit");

// FlashInfer's BatchPrefillWithRaggedKVCacheKernelTraitsDispatched (prefill_sm90.cuh) with one
// change: the grid's x is one CTA per work item (the hardware then balances the causal tiles'
// unequal costs) instead of one per multiprocessor with host-planned item lists.
void launch_flashinfer(FiParams& params, int64_t items, cudaStream_t stream) {
    constexpr bool kCausal = true, kSwa = false;
    using Mainloop = flashinfer::CollectiveMainloop<typename FiParams::AdditionalParams, FiTraits, kCausal>;
    using Epilogue = flashinfer::CollectiveEpilogue<FiTraits>;
    using Scheduler = flashinfer::BatchPrefillTileScheduler<int32_t>;
    typename Mainloop::Params mainloop_params = Mainloop::to_underlying_arguments(
        {params.q_ptr,
         flashinfer::get_gmem_layout(params.nnz_qo, params.num_qo_heads, kV2HeadDim, params.q_stride_n,
                                     params.q_stride_h),
         params.k_ptr,
         flashinfer::get_gmem_layout(params.nnz_kv, params.num_kv_heads, kV2HeadDim, params.k_stride_n,
                                     params.k_stride_h),
         params.v_ptr,
         flashinfer::get_gmem_layout(params.nnz_kv, params.num_kv_heads, kV2HeadDim, params.v_stride_n,
                                     params.v_stride_h),
         params.window_left, params.additional_params});
    typename Epilogue::Params epilogue_params = Epilogue::to_underlying_arguments({
        params.o_ptr,
        flashinfer::get_gmem_layout(params.nnz_qo, params.num_qo_heads, kV2HeadDim, params.o_stride_n,
                                    params.o_stride_h),
        params.lse_ptr,
        flashinfer::get_lse_gmem_layout(params.nnz_qo, params.num_qo_heads),
    });
    typename Scheduler::Arguments scheduler_args = {
        params.work_indptr, params.head_indices, params.qo_tile_indices, params.qo_indptr, params.kv_indptr,
        params.qo_lens,     params.kv_lens,      params.batch_indices,   cutlass::FastDivmod(params.group_size),
        params.num_qo_heads};
    typename Scheduler::Params scheduler_params = Scheduler::to_underlying_arguments(scheduler_args);
    auto* kernel = flashinfer::PrefillWithKVCacheKernel<Mainloop, Epilogue, FiTraits, kSwa, kCausal, Scheduler>;
    constexpr int smem = int(sizeof(typename FiTraits::SharedStorage));
    allow_dynamic_smem<flashinfer::PrefillWithKVCacheKernel<Mainloop, Epilogue, FiTraits, kSwa, kCausal, Scheduler>>(
        size_t(smem));
    QS_CHECK_MSG(items <= 0x7fffffff && params.num_qo_heads <= 65535, "attention v2: grid too large");
    const dim3 grid(unsigned(items), unsigned(params.num_qo_heads));
    const dim3 block(FiTraits::NUM_WARPS * 32);
    void* args[] = {&mainloop_params, &epilogue_params, &scheduler_params};
    QS_CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(kernel), grid, block, args, smem, stream));
    QS_CUDA_CHECK_LAUNCH();
}
#endif

}  // namespace

bool attention_prefill_v2_available() {
#if defined(QS_HAVE_FLASHINFER)
    return true;
#else
    return false;
#endif
}

bool attention_prefill_v2_applies(int prefill_version, int D, DeviceKvDtype kv_dtype, int max_seq_tokens) {
    return prefill_version == 2 && attention_prefill_v2_available() && D == kV2HeadDim &&
           kv_dtype != DeviceKvDtype::kF32 && max_seq_tokens >= kAttentionV2MinRows;
}

size_t attention_prefill_v2_workspace_bytes(int64_t num_tokens, int64_t num_seqs, int64_t Hq, int64_t Hkv,
                                            int64_t D, int64_t kv_tokens) {
    return v2_layout(num_tokens, num_seqs, Hq, Hkv, D, kv_tokens).total;
}

namespace attn {

template <typename CT>
void launch_prefill_wgmma(const GatedAttentionParams& p, const Args& a, cudaStream_t stream) {
    QS_CHECK_MSG(attention_prefill_v2_available(),
                 "attention prefill version 2 is not compiled in (run scripts/setup_flashinfer.sh and reconfigure)");
    QS_CHECK_MSG(p.D == kV2HeadDim, "attention prefill version 2 needs head_dim 256");
    QS_CHECK_MSG(p.prefill_workspace != nullptr, "attention prefill version 2 needs prefill_workspace");
    QS_CHECK_MSG(p.prefill_kv_tokens >= 0, "attention prefill version 2: negative prefill_kv_tokens");
    const DeviceBatch& b = p.batch;
    const V2Layout l = v2_layout(b.num_tokens, b.num_seqs, p.Hq, p.Hkv, p.D, p.prefill_kv_tokens);
    char* ws = static_cast<char*>(p.prefill_workspace);
    auto* q = reinterpret_cast<__nv_bfloat16*>(ws + l.q);
    auto* o = reinterpret_cast<__nv_bfloat16*>(ws + l.o);
    auto* k = reinterpret_cast<__nv_bfloat16*>(ws + l.k);
    auto* v = reinterpret_cast<__nv_bfloat16*>(ws + l.v);
    const PlanPtrs plan = plan_ptrs(ws, l);

    ptx::launch_kernel(plan_kernel, dim3(1), dim3(1024), 0, stream, b, plan, int(l.items));
    QS_CUDA_CHECK_LAUNCH();
    const int64_t qwarps = int64_t(b.num_tokens) * p.Hq;
    ptx::launch_kernel(q_prep_kernel, dim3(unsigned((qwarps + kPrepWarps - 1) / kPrepWarps)), dim3(kPrepWarps * 32), 0,
                       stream, a, q);
    QS_CUDA_CHECK_LAUNCH();
    if (p.prefill_kv_tokens > 0) {
        const int64_t threads = p.prefill_kv_tokens * (p.Hkv * p.D / 8);
        ptx::launch_kernel(kv_gather_kernel<CT>, dim3(unsigned((threads + 255) / 256)), dim3(256), 0, stream, a,
                           plan.seq_kv_begin, p.prefill_kv_tokens, k, v);
        QS_CUDA_CHECK_LAUNCH();
    }
#if defined(QS_HAVE_FLASHINFER)
    FiParams fp{};
    fp.q_ptr = reinterpret_cast<cute::bfloat16_t*>(q);
    fp.k_ptr = reinterpret_cast<cute::bfloat16_t*>(k);
    fp.v_ptr = reinterpret_cast<cute::bfloat16_t*>(v);
    fp.o_ptr = reinterpret_cast<cute::bfloat16_t*>(o);
    fp.lse_ptr = nullptr;
    fp.qo_tile_indices = plan.qo_tile;
    fp.qo_indptr = plan.qo_indptr;
    fp.kv_indptr = plan.kv_indptr;
    fp.qo_lens = plan.qo_len;
    fp.kv_lens = plan.kv_len;
    fp.head_indices = plan.head_idx;
    fp.work_indptr = plan.work_indptr;
    fp.batch_indices = plan.batch_idx;
    fp.additional_params.logits_soft_cap = 0.0f;
    fp.additional_params.sm_scale = 1.0f / std::sqrt(float(p.D));  // the CPU's scale
    fp.additional_params.maybe_prefix_len_ptr = nullptr;
    fp.additional_params.maybe_token_pos_in_items_ptr = nullptr;
    fp.additional_params.token_pos_in_items_len = 0;
    fp.additional_params.maybe_max_item_len_ptr = nullptr;
    fp.q_stride_n = int64_t(p.Hq) * p.D;
    fp.q_stride_h = p.D;
    fp.o_stride_n = int64_t(p.Hq) * p.D;
    fp.o_stride_h = p.D;
    fp.k_stride_n = fp.v_stride_n = int64_t(p.Hkv) * p.D;
    fp.k_stride_h = fp.v_stride_h = p.D;
    fp.nnz_qo = b.num_tokens;
    fp.nnz_kv = std::max<int64_t>(p.prefill_kv_tokens, 1);
    fp.num_qo_heads = p.Hq;
    fp.num_kv_heads = p.Hkv;
    fp.group_size = p.Hq / p.Hkv;
    fp.window_left = -1;
    fp.causal = true;
    launch_flashinfer(fp, l.items, stream);
#endif
    const int64_t gthreads = int64_t(b.num_tokens) * p.Hq * p.D / 8;
    ptx::launch_kernel(gate_kernel, dim3(unsigned((gthreads + 255) / 256)), dim3(256), 0, stream, a, o);
    QS_CUDA_CHECK_LAUNCH();
}

template void launch_prefill_wgmma<__nv_bfloat16>(const GatedAttentionParams&, const Args&, cudaStream_t);
template void launch_prefill_wgmma<__nv_fp8_e4m3>(const GatedAttentionParams&, const Args&, cudaStream_t);

}  // namespace attn
}  // namespace qs::cuda
