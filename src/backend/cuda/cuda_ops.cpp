// CudaOps (see cuda_ops.h).
#include "backend/cuda/cuda_ops.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/attention_kernels.h"
#include "backend/cuda/basic_kernels.h"
#include "backend/cuda/cuda_cache.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gdn_chunk_map.h"
#include "backend/cuda/gdn_kernels.h"
#include "backend/cuda/moe_int4_mixed.h"
#include "backend/cuda/moe_kernels.h"
#include "backend/gdn_stash_rule.h"
#include "backend/cuda/moe_reference_kernels.h"
#include "backend/cuda/router_gemm.h"
#include "backend/cuda/small_linear_kernels.h"
#include <fmt/format.h>

#include "core/check.h"
#include "core/log.h"

namespace qs::cuda {

bool cuda_device_available() {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

std::string cuda_unsupported_reason(const ModelConfig& c) {
    // Multiples of 32 run on the tensor-core kernels, other even sizes on the fp32 fallback.
    if (c.head_dim % 2 != 0 || c.head_dim < 2 || c.head_dim > 256)
        return fmt::format("head_dim {}: the CUDA attention kernels need an even head_dim in [2, 256]", c.head_dim);
    for (int64_t d : {c.linear_key_head_dim, c.linear_value_head_dim})
        if (d % 4 != 0 || d > 128)
            return fmt::format("linear head dim {}: the CUDA Gated DeltaNet kernels need a multiple of 4 up to 128", d);
    return "";
}

CudaOps::CudaOps(const CudaOptions& options)
    : options_(options), graphs_(options.profile_ops ? 0 : options.graph_max_batch) {
    profiler_.enable(options.profile_ops);
    timeline_.enable(options.step_timeline);
    QS_CUDA_CHECK(cudaSetDevice(options.device));
    cudaDeviceProp prop{};
    QS_CUDA_CHECK(cudaGetDeviceProperties(&prop, options.device));
    device_name_ = prop.name;
    QS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    QS_CUDA_CHECK(cudaEventCreateWithFlags(&argmax_done_, cudaEventDisableTiming));
    gemm_ = std::make_unique<Gemm>();
    QS_CHECK_MSG(options.moe_small_version == -1 || options.moe_small_version == 1 || options.moe_small_version == 2,
                 "CudaOptions::moe_small_version must be -1, 1 or 2");
    QS_CHECK_MSG(options.moe_small_prefetch_down == 0 || options.moe_small_prefetch_down == 1,
                 "CudaOptions::moe_small_prefetch_down must be 0 or 1");
    QS_CHECK_MSG(options.moe_small_down_version == -1 || options.moe_small_down_version == 1 ||
                     options.moe_small_down_version == 2,
                 "CudaOptions::moe_small_down_version must be -1, 1 or 2");
    QS_CHECK_MSG(options.moe_small_int4_gate_up_version == 1 || options.moe_small_int4_gate_up_version == 2,
                 "CudaOptions::moe_small_int4_gate_up_version must be 1 or 2");
    QS_CHECK_MSG(options.moe_decode_version == 1 || options.moe_decode_version == 2,
                 "CudaOptions::moe_decode_version must be 1 or 2");
    QS_CHECK_MSG(options.moe_decode_pdl == 0 || options.moe_decode_pdl == 1, "CudaOptions::moe_decode_pdl must be 0 or 1");
    QS_CHECK_MSG(options.moe_decode_eout_bf16 == 0 || options.moe_decode_eout_bf16 == 1,
                 "CudaOptions::moe_decode_eout_bf16 must be 0 or 1");
    QS_CHECK_MSG(options.moe_prefill_version == 1 || options.moe_prefill_version == 2,
                 "CudaOptions::moe_prefill_version must be 1 or 2");
    QS_CHECK_MSG(options.moe_gemm_path >= -1 && options.moe_gemm_path <= 2,
                 "CudaOptions::moe_gemm_path must be -1 (by shape), 0, 1 or 2");
    QS_CHECK_MSG(options.moe_router_kernel >= 0 && options.moe_router_kernel <= 2,
                 "CudaOptions::moe_router_kernel must be 0, 1 or 2");
    QS_CHECK_MSG(options.gdn_prefill_version >= 0 && options.gdn_prefill_version <= 6,
                 "CudaOptions::gdn_prefill_version must be 0 (auto), 1, 2, 3, 4, 5 or 6");
    QS_CHECK_MSG(options.gdn_decode_version == 1 || options.gdn_decode_version == 2,
                 "CudaOptions::gdn_decode_version must be 1 or 2");
    QS_CHECK_MSG(options.gdn_slices_version >= 1 && options.gdn_slices_version <= 3,
                 "CudaOptions::gdn_slices_version must be 1, 2 or 3");
    QS_CHECK_MSG(options.gdn_chunk_map == 0 || options.gdn_chunk_map == 1, "CudaOptions::gdn_chunk_map must be 0 or 1");
    QS_CHECK_MSG(options.gdn_side_stream == 0 || options.gdn_side_stream == 1,
                 "CudaOptions::gdn_side_stream must be 0 or 1");
    QS_CHECK_MSG(options.gdn_side_blocks >= 0 && options.gdn_side_blocks <= 65535,
                 "CudaOptions::gdn_side_blocks must be in [0, 65535] (0: the warp slices' usual grid)");
    QS_CHECK_MSG(options.gdn_decode_kernel >= -1 && options.gdn_decode_kernel <= 2,
                 "CudaOptions::gdn_decode_kernel must be -1 (by shape), 0, 1 or 2");
    QS_CHECK_MSG(options.moe_int4_grouped == 0 || options.moe_int4_grouped == 1,
                 "CudaOptions::moe_int4_grouped must be 0 or 1");
    QS_CHECK_MSG(options.moe_int4_scratch == 0 || options.moe_int4_scratch == 1,
                 "CudaOptions::moe_int4_scratch must be 0 or 1");
    QS_CHECK_MSG(options.moe_int4_prefill_version == 1 || options.moe_int4_prefill_version == 2,
                 "CudaOptions::moe_int4_prefill_version must be 1 or 2");
    QS_CHECK_MSG(options.nvfp4_kernels == 0 || options.nvfp4_kernels == 1, "CudaOptions::nvfp4_kernels must be 0 or 1");
    QS_CHECK_MSG(options.moe_int4_grouped_max_t == 0 || options.moe_int4_grouped_max_t > kMoeSmallTMax,
                 "CudaOptions::moe_int4_grouped_max_t must be 0 (by the copies) or >= 9");
    QS_CHECK_MSG(options.fp8_small_rows >= 0 && options.fp8_small_rows <= kSmallLinearFp8V2MaxRows,
                 "CudaOptions::fp8_small_rows must be in [0, 4]");
    QS_CHECK_MSG(options.fp8_small_blocks_per_sm >= 1 && options.fp8_small_blocks_per_sm <= 4,
                 "CudaOptions::fp8_small_blocks_per_sm must be in [1, 4]");
    gemm_->set_fp8_small_rows(options.fp8_small_rows, options.fp8_small_blocks_per_sm);
    QS_CHECK_MSG(options.f32_tiles_max_rows >= 0 && options.f32_tiles_max_rows <= kF32LinearTilesMaxRows,
                 "CudaOptions::f32_tiles_max_rows must be in [0, 16384]");
    gemm_->set_f32_tiles_max_rows(options.f32_tiles_max_rows);
    QS_CHECK_MSG(options.fp8_small_version == 2 || options.fp8_small_version == 3,
                 "CudaOptions::fp8_small_version must be 2 or 3");
    QS_CHECK_MSG(options.fp8_small_v3_blocks_per_sm >= 0 && options.fp8_small_v3_blocks_per_sm <= 4,
                 "CudaOptions::fp8_small_v3_blocks_per_sm must be in [0, 4]");
    gemm_->set_fp8_small_version(options.fp8_small_version, options.fp8_small_v3_blocks_per_sm);
    QS_CHECK_MSG(options.int4_linear_version >= 1 && options.int4_linear_version <= 4,
                 "CudaOptions::int4_linear_version must be 1, 2, 3 or 4");
    gemm_->set_int4_linear_version(options.int4_linear_version);
    QS_CHECK_MSG(options.shared_linear_input == 0 || options.shared_linear_input == 1,
                 "CudaOptions::shared_linear_input must be 0 or 1");
    QS_CHECK_MSG(options.fused_input_norm >= 0 && options.fused_input_norm <= kSmallLinearFp8V2MaxRows,
                 "CudaOptions::fused_input_norm must be in [0, 4]");
    QS_CHECK_MSG(options.fused_output_norm >= 0 && options.fused_output_norm <= kSmallLinearFp8V2MaxRows,
                 "CudaOptions::fused_output_norm must be in [0, 4]");
    QS_CHECK_MSG(options.fused_norm_quant == 0 || options.fused_norm_quant == 1,
                 "CudaOptions::fused_norm_quant must be 0 or 1");
    gemm_->set_norm_quant(options.fused_norm_quant == 1);
    QS_CHECK_MSG(options.attention_decode_rows >= 1 && options.attention_decode_rows <= 4,
                 "CudaOptions::attention_decode_rows must be in [1, 4]");
    QS_CHECK_MSG(options.attention_prefill_version == 1 || options.attention_prefill_version == 2,
                 "CudaOptions::attention_prefill_version must be 1 or 2");
    QS_CHECK_MSG(options.attention_prefill_version == 1 || attention_prefill_v2_available(),
                 "CudaOptions::attention_prefill_version 2: this build has no FlashInfer headers "
                 "(run scripts/setup_flashinfer.sh and reconfigure)");
    QS_CHECK_MSG(options.attention_combine_version == 1 || options.attention_combine_version == 2,
                 "CudaOptions::attention_combine_version must be 1 or 2");
    QS_CHECK_MSG(options.sampling_chunks >= 0 && options.sampling_chunks <= 512,
                 "CudaOptions::sampling_chunks must be in [0, 512]");
    QS_CHECK_MSG(options.sampling_chunked_select == 0 || options.sampling_chunked_select == 1,
                 "CudaOptions::sampling_chunked_select must be 0 or 1");
    QS_CHECK_MSG(options.attention_decode_version == 1 || options.attention_decode_version == 2,
                 "CudaOptions::attention_decode_version must be 1 or 2");
    moe_counter_ = DeviceBuffer(sizeof(int));
    QS_CUDA_CHECK(cudaMemset(moe_counter_.get(), 0, sizeof(int)));
    norm_counter_ = DeviceBuffer(sizeof(int));
    QS_CUDA_CHECK(cudaMemset(norm_counter_.get(), 0, sizeof(int)));
    if (options_.gdn_side_stream == 1) {
        QS_CUDA_CHECK(cudaStreamCreateWithFlags(&gdn_side_, cudaStreamNonBlocking));
        QS_CUDA_CHECK(cudaEventCreateWithFlags(&gdn_side_fork_, cudaEventDisableTiming));
        QS_CUDA_CHECK(cudaEventCreateWithFlags(&gdn_side_join_, cudaEventDisableTiming));
    }
}

CudaOps::~CudaOps() {
    if (stream_) cudaStreamSynchronize(stream_);
    graphs_.clear(stream_);
    if (staging_) cudaFreeHost(staging_);
    if (argmax_pinned_) cudaFreeHost(argmax_pinned_);
    if (argmax_done_) cudaEventDestroy(argmax_done_);
    if (copy_stream_) cudaStreamSynchronize(copy_stream_);
    if (bitmask_copied_) cudaEventDestroy(bitmask_copied_);
    if (copy_stream_) cudaStreamDestroy(copy_stream_);
    if (gdn_side_) cudaStreamSynchronize(gdn_side_);
    if (gdn_side_fork_) cudaEventDestroy(gdn_side_fork_);
    if (gdn_side_join_) cudaEventDestroy(gdn_side_join_);
    if (gdn_side_) cudaStreamDestroy(gdn_side_);
    gemm_.reset();
    if (stream_) cudaStreamDestroy(stream_);
}

float* CudaOps::alloc(int64_t n) {
    arena_.set_label("a model buffer");
    auto* p = static_cast<float*>(arena_.allocate(size_t(n) * sizeof(float)));
    if (options_.poison) launch_fill_nan(p, n, stream_);
    return p;
}

void CudaOps::free_all() {
    // Work already enqueued may still read arena memory; the next forward's kernels are ordered
    // after it on the same stream, so reuse is safe without a sync.
    arena_.reset();
    marks_.clear();
    commit_zero_z_ = commit_unused_out_ = nullptr;
}

size_t CudaOps::mark() {
    marks_.push_back(arena_.mark());
    return marks_.size() - 1;
}

void CudaOps::release_to(size_t mark) {
    QS_CHECK(mark < marks_.size());
    // Kernels still queued may read the released blocks; the next writers are queued after them
    // on the same stream, so reuse needs no sync.
    arena_.release_to(marks_[mark]);
    marks_.resize(mark);
}

float* CudaOps::persistent(int id, int64_t n) {
    DeviceBuffer& b = persistent_[id];
    if (b.bytes() < size_t(n) * sizeof(float)) {
        cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
        QS_CUDA_CHECK(cudaStreamIsCapturing(stream_, &capturing));
        QS_CHECK_MSG(capturing == cudaStreamCaptureStatusNone, "CudaOps: a persistent buffer grew during a graph capture");
        // Verify graphs write the GDN stash by address: they go with the old buffer. (The other
        // persistent buffers a graph reads, the MTP head's input, are in its key by address.)
        if (id >= kGdnStashId) graphs_.clear(stream_);
        sync_stream();  // queued work may still use the old buffer
        b = DeviceBuffer(size_t(n) * sizeof(float));
    }
    return b.as<float>();
}

void CudaOps::copy(const float* src, int64_t n, float* dst) {
    if (n > 0) QS_CUDA_CHECK(cudaMemcpyAsync(dst, src, size_t(n) * sizeof(float), cudaMemcpyDeviceToDevice, stream_));
}

void CudaOps::copy_to_host(const float* src, int64_t n, float* dst) {
    timeline_.count_copy();
    QS_CUDA_CHECK(cudaMemcpyAsync(dst, src, size_t(n) * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    sync_stream();
}

void CudaOps::copy_from_host(const float* src, int64_t n, float* dst) {
    timeline_.count_copy();
    QS_CUDA_CHECK(cudaMemcpyAsync(dst, src, size_t(n) * sizeof(float), cudaMemcpyHostToDevice, stream_));
    // The host buffer may be reused by the caller right after return.
    sync_stream();
}

void CudaOps::synchronize() { sync_stream(); }

void CudaOps::sync_stream() {
    timeline_.count_sync();
    QS_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

std::unique_ptr<ModelCache> CudaOps::make_cache(const CacheGeometry& g) {
    // bf16 state when the backend was made so or the geometry (the engine's plan) asks for it.
    return std::make_unique<ModelCache>(g, std::make_unique<CudaCacheStorage>(this, g, options_.ssm_bf16 || g.state_bf16, stream_));
}

void CudaOps::prepare_weights(const WeightSet& w) {
    QS_CHECK(w.config != nullptr && w.lm_head != nullptr);
    const std::string why = cuda_unsupported_reason(*w.config);
    QS_CHECK_MSG(why.empty(), why.c_str());
    Int4ScratchPlan plan;
    plan.enabled = options_.moe_int4_scratch == 1;
    plan.mixed_prefill = options_.moe_int4_prefill_version == 2 && options_.moe_int4_grouped == 1 &&
                         options_.moe_gemm_path == -1;
    plan.grouped_max_t = moe_int4_grouped_max_t(false);  // the layers the plan shrinks take the mixed-input GEMMs
    weights_.upload(w, stream_, options_.reference_precision, plan, options_.nvfp4_kernels == 1,
                    options_.moe_router_kernel != 0);
    if (weights_.int4_scratch_layers() > 0)
        log_info("cuda: 4-bit experts of {} MoE layers kept without BF16 copies; one-layer scratch {:.3f} GiB",
                 weights_.int4_scratch_layers(), double(weights_.int4_scratch_bytes()) / double(1 << 30));
    lm_head_ = w.lm_head->handle.index;
    QS_CUDA_CHECK(cudaStreamSynchronize(stream_));
    graphs_possible_ = true;  // every op of a forward's layers only enqueues work
}

std::optional<DeviceMemoryUse> CudaOps::device_memory() {
    DeviceMemoryUse m;
    m.arena_high_water = arena_.high_water();
    m.arena_reserved = arena_.reserved();
    QS_CUDA_CHECK(cudaMemGetInfo(&m.free_bytes, &m.total_bytes));
    return m;
}

int32_t* CudaOps::upload_ints(const int32_t* host, int64_t n) {
    auto* d = static_cast<int32_t*>(arena_.allocate(size_t(std::max<int64_t>(n, 1)) * sizeof(int32_t)));
    if (n > 0) {
        timeline_.count_copy();
        QS_CUDA_CHECK(cudaMemcpyAsync(d, host, size_t(n) * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
    }
    // Pageable source: cudaMemcpyAsync returns once the data is staged, so `host` may go away.
    return d;
}

CudaCacheStorage* CudaOps::storage(ModelCache* cache) const {
    CacheStorage* s = cache ? cache->external_storage() : nullptr;
    // make_cache is the only maker of storage this backend owns, and it makes CudaCacheStorage.
    return s && s->owner() == this ? static_cast<CudaCacheStorage*>(s) : nullptr;
}

CudaCacheStorage& CudaOps::checked_storage(ModelCache& cache) const {
    CudaCacheStorage* st = storage(&cache);
    QS_CHECK_MSG(st != nullptr, "CudaOps needs a cache made by its own make_cache");
    return *st;
}

CudaOps::GraphShape CudaOps::graph_shape(const ForwardBatch& batch, const Replay& replay,
                                         const CudaCacheStorage* storage) const {
    constexpr int32_t kMaxStride = 4;  // 1 + the most MTP drafts
    if (!storage || !graphs_possible_ || options_.graph_max_batch <= 0 || options_.profile_ops) return {};
    const int64_t S = int64_t(batch.seqs.size()), T = batch.num_tokens();
    if (S == 0) return {};
    if (replay.short_spans) {
        // A GDN commit (Replay::short_spans): spans of accepted drafts at rows i·q + 1 .. i·q + a
        // of the verify forward's whole-batch stash, read in place. The graph has the verify's
        // padded shape; the sequences that commit nothing are padding of 0 rows (begin_forward).
        if (!stash_.whole_batch || stash_.seqs == 0 || S > stash_.seqs || T > stash_.rows) return {};
        const int64_t q = stash_.stride;
        int64_t end = 0;
        for (const SeqSpan& s : batch.seqs) {
            if (s.defer_state || s.row_begin % q != 1 || s.row_begin < end || s.num_tokens < 1 || s.num_tokens >= q)
                return {};
            end = s.row_begin + s.num_tokens;
        }
        return GraphShape{stash_.seqs, int32_t(q)};
    }
    if (T % S != 0 || T / S > kMaxStride) return {};
    const auto q = int32_t(T / S);
    for (int64_t i = 0; i < S; ++i) {
        const SeqSpan& s = batch.seqs[size_t(i)];
        if (s.row_begin != i * q || s.num_tokens != q) return {};
    }
    bool defers = false;
    for (const SeqSpan& s : batch.seqs) defers = defers || s.defer_state;
    // A stash is sized before the capture from the GDN layers seen (none yet: run eagerly once).
    if (defers && gdn_shape_.layers == 0) return {};
    const int64_t padded = graphs_.padded_size(S);
    return padded > 0 ? GraphShape{padded, q} : GraphShape{};
}

void CudaOps::plan_stash(const ForwardBatch& batch, int64_t rows, const GraphShape& shape) {
    const bool whole_batch = shape.seqs > 0;
    stash_.this_forward = false;
    std::vector<int32_t>& list = stash_rows_scratch_;
    list.clear();
    std::map<int32_t, int64_t> first;
    bool defers = false;
    for (const SeqSpan& s : batch.seqs) defers = defers || s.defer_state;
    if (defers && !deferred_spans_need_stash(batch)) {
        // Spare slots and k = 1 only: no commit can follow (gdn_stash_rule.h), so nothing is
        // copied; the previous plan is dropped so that a commit after this forward fails.
        stash_ = StashPlan();
        return;
    }
    for (const SeqSpan& s : batch.seqs) {
        if (!s.defer_state) continue;
        QS_CHECK_MSG(s.num_tokens < GatedDeltaNetParams{}.chunk_min_tokens,
                     "a deferred GDN span must be short enough for the serial kernel");
        first[s.row_begin] = whole_batch ? int64_t(s.row_begin) : int64_t(list.size());
        for (int32_t r = 0; r < s.num_tokens; ++r) list.push_back(s.row_begin + r);
    }
    if (first.empty()) return;  // the previous plan stays for the commit that follows it
    stash_.first = std::move(first);
    stash_.whole_batch = whole_batch;
    stash_.seqs = shape.seqs;
    stash_.stride = shape.stride;
    stash_.rows = whole_batch ? rows : int64_t(list.size());
    stash_.rows_dev = whole_batch ? nullptr : upload_ints(list.data(), int64_t(list.size()));
    stash_.this_forward = true;
    // Sized now, outside any capture: a buffer that grows drops the graphs that captured it.
    for (int64_t l = 0; l < gdn_shape_.layers; ++l) {
        const int id = kGdnStashId + 3 * int(l);
        persistent(id, stash_.rows * gdn_shape_.conv_dim);
        persistent(id + 1, stash_.rows * gdn_shape_.value_heads);
        persistent(id + 2, stash_.rows * gdn_shape_.value_heads);
    }
}

int64_t CudaOps::begin_forward(const ForwardBatch& batch, const int32_t* positions, const Replay& replay) {
    arena_.set_label("the batch upload");
    timeline_.mark(replay.phase, stream_);
    phase_ = replay.phase;
    commit_zero_z_ = commit_unused_out_ = nullptr;
    const int64_t T = batch.num_tokens(), S = int64_t(batch.seqs.size());
    const CudaCacheStorage* replay_storage = storage(replay.cache);
    // A batch that runs as a graph gets dummy sequences of `stride` rows each up to the padded
    // number of sequences, in the cache's spare page and slot (cuda_cache.h).
    const GraphShape shape = graph_shape(batch, replay, replay_storage);
    const int64_t rows = std::max(T, shape.seqs * shape.stride), num_seqs = std::max(S, shape.seqs);
    int64_t num_pages = rows > T ? 1 : 0;  // the padding's one page id
    for (const SeqSpan& s : batch.seqs) num_pages += int64_t(s.block_table.size());
    constexpr int64_t kSeqInts = sizeof(DeviceSeq) / sizeof(int32_t);
    static_assert(sizeof(DeviceSeq) % sizeof(int32_t) == 0);
    // ids, positions, row_seq, rope positions [3][rows], seqs, the GDN chunk map (16-byte aligned),
    // the chunked sequences [num_seqs], the short sequences [num_seqs], pages: every offset but the
    // pages' depends on rows and num_seqs alone (fixed by a graph's shape), so a captured graph's
    // pointers stay valid for its batch shape.
    constexpr int64_t kChunkInts = sizeof(GdnChunk) / sizeof(int32_t);
    const int64_t map_at = (6 * rows + num_seqs * kSeqInts + 3) / 4 * 4;
    const int64_t chunk_seqs_at = map_at + gdn_chunk_keys(num_seqs, rows) * kChunkInts;
    const int64_t short_seqs_at = chunk_seqs_at + num_seqs;
    const int64_t pages_at = short_seqs_at + num_seqs;
    const size_t total = size_t(pages_at + num_pages);
    if (total > staging_ints_) {
        // The previous forward's copy out of staging_ finished: every forward ends in a sync.
        if (staging_) QS_CUDA_CHECK(cudaFreeHost(staging_));
        // Captured graphs hold pointers into batch_ints_, which is about to move.
        graphs_.clear(stream_);
        staging_ints_ = std::max({total, staging_ints_ * 2, size_t(1) << 20});
        QS_CUDA_CHECK(cudaMallocHost(&staging_, staging_ints_ * sizeof(int32_t)));
        batch_ints_ = DeviceBuffer(staging_ints_ * sizeof(int32_t));
    }
    int32_t* h = staging_;
    int32_t* ids = h;
    int32_t* pos = h + rows;
    int32_t* row_seq = h + 2 * rows;
    int32_t* rope = h + 3 * rows;
    auto* seqs = reinterpret_cast<DeviceSeq*>(h + 6 * rows);
    auto* chunk_map = reinterpret_cast<GdnChunk*>(h + map_at);
    int32_t* chunk_seqs = h + chunk_seqs_at;
    int32_t* short_seqs = h + short_seqs_at;
    int32_t* pages = h + pages_at;
    std::memcpy(ids, batch.token_ids.data(), size_t(T) * 4);
    std::memcpy(pos, positions, size_t(T) * 4);
    std::fill(row_seq, row_seq + T, -1);  // rows of no sequence (a commit's short spans)
    int32_t page_offset = 0, max_seq_tokens = 0;
    for (int64_t i = 0; i < S; ++i) {
        const SeqSpan& s = batch.seqs[size_t(i)];
        for (int32_t r = 0; r < s.num_tokens; ++r) row_seq[s.row_begin + r] = int32_t(i);
        seqs[i] = DeviceSeq{s.row_begin, s.num_tokens, s.start_pos, s.state_slot, page_offset,
                            int32_t(s.block_table.size()), s.defer_state ? 1 : 0,
                            s.defer_state ? s.spare_slot : -1};
        std::memcpy(pages + page_offset, s.block_table.data(), s.block_table.size() * 4);
        page_offset += int32_t(s.block_table.size());
        max_seq_tokens = std::max(max_seq_tokens, s.num_tokens);
    }
    if (shape.seqs > 0) {
        // The launches may depend on max_seq_tokens: fixed by the shape, not by the spans.
        max_seq_tokens = shape.stride;
        if (rows > T) pages[page_offset] = replay_storage->pad_block();
        if (replay.short_spans) {
            // A GDN commit: the spans sit at their verify rows (graph_shape); the other rows are
            // no sequence's, and the padding sequences have no rows (the kernels skip them).
            std::fill(ids + T, ids + rows, 0);
            std::fill(pos + T, pos + rows, 0);
            std::fill(row_seq + T, row_seq + rows, -1);
            for (int64_t i = S; i < num_seqs; ++i)
                seqs[i] = DeviceSeq{0, 0, 0, replay_storage->pad_slot(), page_offset, 1, 0, -1};
        }
        for (int64_t i = replay.short_spans ? num_seqs : S; i < num_seqs; ++i) {
            const int32_t r0 = int32_t(i) * shape.stride;
            for (int32_t r = 0; r < shape.stride; ++r) {
                ids[r0 + r] = 0;
                pos[r0 + r] = r;
                row_seq[r0 + r] = int32_t(i);
            }
            seqs[i] = DeviceSeq{r0, shape.stride, 0, replay_storage->pad_slot(), page_offset, 1, 0, -1};
        }
    }
    // Rotary positions: the 1-D positions in all three streams (padding rows included), the
    // batch's M-RoPE streams over its own rows when it has them (images, or text after them), as
    // CpuOps::gated_attention reads them. Always uploaded, so a decode step of a sequence with a
    // rope_delta replays the same graphs as a text-only one.
    for (int64_t k = 0; k < 3; ++k) std::memcpy(rope + k * rows, pos, size_t(rows) * 4);
    if (batch.has_mrope()) {
        const std::vector<int32_t> rp = batch.rope_positions();
        for (int64_t k = 0; k < 3; ++k) std::memcpy(rope + k * rows, rp.data() + k * T, size_t(T) * 4);
    }
    // The chunks gated_delta_net's chunked kernels take (its launches use the default threshold).
    const int32_t chunk_min = GatedDeltaNetParams{}.chunk_min_tokens;
    const int32_t chunk_count = fill_gdn_chunk_map(seqs, int32_t(num_seqs), rows, chunk_min, chunk_map);
    const int32_t chunk_seq_count = fill_gdn_chunked_seqs(seqs, int32_t(num_seqs), chunk_min, chunk_seqs);
    const int32_t short_seq_count = fill_gdn_short_seqs(seqs, int32_t(num_seqs), chunk_min, short_seqs);
    timeline_.count_copy();
    QS_CUDA_CHECK(cudaMemcpyAsync(batch_ints_.get(), staging_, total * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
    const int32_t* d = batch_ints_.as<int32_t>();
    batch_.token_ids = d;
    batch_.positions = d + rows;
    batch_.row_seq = d + 2 * rows;
    batch_.rope_positions = d + 3 * rows;
    batch_.seqs = reinterpret_cast<const DeviceSeq*>(d + 6 * rows);
    const bool use_map = chunk_count >= 0 && options_.gdn_chunk_map == 1;
    batch_.gdn_chunks = use_map ? reinterpret_cast<const GdnChunk*>(d + map_at) : nullptr;
    batch_.gdn_chunk_count = chunk_count;
    batch_.gdn_chunk_min = chunk_min;
    batch_.gdn_chunk_seqs = use_map ? d + chunk_seqs_at : nullptr;
    batch_.gdn_chunk_seq_count = use_map ? chunk_seq_count : 0;
    batch_.gdn_short_seqs = use_map ? d + short_seqs_at : nullptr;
    batch_.gdn_short_seq_count = use_map ? short_seq_count : 0;
    batch_.block_tables = d + pages_at;
    batch_.num_tokens = int32_t(rows);
    batch_.num_seqs = int32_t(num_seqs);
    batch_.max_seq_tokens = max_seq_tokens;
    batch_host_ = &batch;
    plan_stash(batch, rows, shape);
    replay_pending_ = shape.seqs > 0 && !options_.pad_without_graphs;
    if (replay_pending_) {
        const DeviceArena::Mark m = arena_.mark();
        graph_key_ = ForwardGraphs::Key{rows, shape.stride, replay.short_spans, stash_.this_forward, replay.variant,
                                        replay_storage->id(), m.chunk, m.used};
    }
    return rows;
}

float* CudaOps::run_layers(const std::function<float*()>& layers) {
    if (!replay_pending_) return layers();
    replay_pending_ = false;
    timeline_.count_graph_launch();
    // The layers run only when the graph is captured now: their ops are not eager then.
    in_capture_ = true;
    float* result = graphs_.run(graph_key_, stream_, arena_, layers);
    in_capture_ = false;
    return result;
}

std::vector<int64_t> CudaOps::graph_batch_sizes() const {
    // The same conditions as graph_shape's, less the batch's own.
    if (!graphs_possible_ || options_.graph_max_batch <= 0 || options_.profile_ops || options_.pad_without_graphs) return {};
    return graphs_.sizes();
}

void CudaOps::check_batch(const ForwardBatch& batch) const {
    QS_CHECK_MSG(&batch == batch_host_ && batch.num_tokens() <= batch_.num_tokens,
                 "CudaOps: begin_forward was not called for this batch");
}

void CudaOps::embed(const WeightBuffer& table, const int32_t* ids, int64_t T, float* x) {
    const auto prof = op_scope("embed");
    const DeviceTable& t = weights_.table(table);
    // The model embeds the batch's own token ids (forward and MTP): use the uploaded copy.
    const int32_t* d_ids = (batch_host_ && ids == batch_host_->token_ids.data()) ? batch_.token_ids : upload_ints(ids, T);
    launch_embed(t.data, t.dtype, d_ids, T, table.shape.at(1), x, stream_);
}

void CudaOps::rms_norm_zc(const float* x, const ParamVector& w, int64_t T, int64_t n, double eps, float* y) {
    const auto prof = op_scope("rms_norm");
    launch_rms_norm_zc(x, weights_.vec(w), T, n, float(eps), y, stream_);
}

void CudaOps::add_rms_norm_zc(float* x, const float* y, const ParamVector& w, int64_t T, int64_t n, double eps,
                              float* out) {
    const auto prof = op_scope("add_rms_norm");
    launch_add_rms_norm_zc(x, y, weights_.vec(w), T, n, float(eps), out, stream_);
}

void CudaOps::linear(const float* x, int64_t T, const LinearWeight& w, float* y) {
    const auto prof = linear_scope(w);
    gemm_->linear(weights_.linear(w), x, T, y, arena_, stream_);
}

void CudaOps::linear_leading_rows(const float* x, int64_t T, const LinearWeight& w, int64_t rows, float* y) {
    const DeviceLinear& whole = weights_.linear(w);
    QS_CHECK_MSG(leading_rows_supported(w) && rows >= 1 && rows <= whole.out,
                 "linear_leading_rows: a dense or FP8-block weight and 1 <= rows <= its output features");
    const auto prof = linear_scope(w);
    // The device copy is row-major too: its first rows, and the first block rows of its scales.
    DeviceLinear lead = whole;
    lead.out = rows;
    if (rows % 128 != 0) lead.scale_blk = nullptr;  // cuBLASLt's block layout wants whole 128-row blocks
    gemm_->linear(lead, x, T, y, arena_, stream_);
}

void CudaOps::linears(const float* x, int64_t T, std::initializer_list<LinearOut> outs) {
    if (options_.shared_linear_input == 0) return Ops::linears(x, T, outs);
    // One profile entry per group (its outputs share one quantised input), apart from "linear".
    const auto prof = op_scope("linears");
    std::vector<const DeviceLinear*> ws;
    std::vector<float*> ys;
    for (const LinearOut& o : outs) {
        ws.push_back(&weights_.linear(o.w));
        ys.push_back(o.y);
    }
    gemm_->linears(x, T, ws, ys, arena_, stream_);
}

void CudaOps::rms_norm_linears(const float* x, const float* pending, const ParamVector& w, int64_t T, int64_t n,
                               double eps, float* h, std::initializer_list<LinearOut> outs) {
    if (n > kAddRmsNormMaxCols || outs.size() == 0) return Ops::rms_norm_linears(x, pending, w, T, n, eps, h, outs);
    const SmallLinearInputNorm norm{pending, weights_.vec(w), float(eps), h};
    if (options_.shared_linear_input == 0) {
        {
            const auto prof = op_scope(pending != nullptr ? "add_rms_norm" : "rms_norm");
            launch_residual_rms_norm_zc(x, pending, nullptr, nullptr, norm.w, T, n, norm.eps, h, stream_);
        }
        return linears(h, T, outs);
    }
    std::vector<const DeviceLinear*> ws;
    std::vector<float*> ys;
    for (const LinearOut& o : outs) {
        QS_CHECK(o.w.in_features == n);
        ws.push_back(&weights_.linear(o.w));
        ys.push_back(o.y);
    }
    // The fused launch quantises x once for all the weights: it needs the shared input.
    if (T <= options_.fused_input_norm) {
        // One profile entry: the norm runs inside the group's launch (or just before it).
        const auto prof = op_scope("linears");
        if (gemm_->norm_linears(x, norm, true, T, ws, ys, arena_, stream_)) ++fused_input_norms_;
        return;
    }
    Gemm::QuantisedInput xq;  // h's e4m3 codes when the norm's launch made them (fused_norm_quant)
    {
        const auto prof = op_scope(pending != nullptr ? "add_rms_norm" : "rms_norm");
        xq = gemm_->norm_for_linears(x, norm, T, ws, arena_, stream_);
    }
    const auto prof = op_scope("linears");
    gemm_->linears(h, T, ws, ys, arena_, stream_, xq);
}

void CudaOps::linear_add2_rms_norm_zc(const float* a, int64_t T, const LinearWeight& W, float* y, float* x,
                                      const float* pending, const ParamVector& norm_w, double eps, float* h) {
    if (T > options_.fused_output_norm || W.out_features > kAddRmsNormMaxCols)
        return Ops::linear_add2_rms_norm_zc(a, T, W, y, x, pending, norm_w, eps, h);
    // One profile entry: the norm runs inside the linear's launch (or just after it).
    const auto prof = linear_scope(W);
    const SmallLinearOutputNorm post{x, pending, weights_.vec(norm_w), float(eps), h, norm_counter_.as<int>()};
    if (gemm_->linear_norm(weights_.linear(W), a, T, y, post, true, arena_, stream_)) ++fused_output_norms_;
}

void CudaOps::add2_rms_norm_zc(float* x, const float* y1, const float* y2, const ParamVector& w, int64_t T,
                               int64_t n, double eps, float* out) {
    if (n > kAddRmsNormMaxCols) return Ops::add2_rms_norm_zc(x, y1, y2, w, T, n, eps, out);
    const auto prof = op_scope("add_rms_norm");
    launch_residual_rms_norm_zc(x, y1, y2, out == x ? nullptr : x, weights_.vec(w), T, n, float(eps), out, stream_);
}

void CudaOps::argmax_rows(const float* x, int64_t R, int64_t n, int32_t* out) {
    timeline_.mark(phase_ == kMtpPhase ? "draft argmax" : "argmax", stream_);
    const auto prof = op_scope("argmax");
    auto* d = static_cast<int32_t*>(arena_.allocate(size_t(std::max<int64_t>(R, 1)) * sizeof(int32_t)));
    launch_argmax_rows(x, R, n, d, arena_.allocate(argmax_rows_workspace_bytes(R, n)), stream_);
    timeline_.count_copy();
    QS_CUDA_CHECK(cudaMemcpyAsync(out, d, size_t(R) * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
    sync_stream();
}

void CudaOps::argmax_rows_start(const float* x, int64_t R, int64_t n) {
    timeline_.mark(phase_ == kMtpPhase ? "draft argmax" : "argmax", stream_);
    const auto prof = op_scope("argmax");
    // The pinned buffer is reused: the previous ids must have landed (normally taken already).
    if (argmax_in_flight_) QS_CUDA_CHECK(cudaEventSynchronize(argmax_done_));
    if (R > argmax_pinned_rows_) {
        if (argmax_pinned_) QS_CUDA_CHECK(cudaFreeHost(argmax_pinned_));
        argmax_pinned_rows_ = std::max<int64_t>(R, 2 * argmax_pinned_rows_);
        QS_CUDA_CHECK(cudaMallocHost(&argmax_pinned_, size_t(argmax_pinned_rows_) * sizeof(int32_t)));
    }
    auto* d = static_cast<int32_t*>(arena_.allocate(size_t(std::max<int64_t>(R, 1)) * sizeof(int32_t)));
    launch_argmax_rows(x, R, n, d, arena_.allocate(argmax_rows_workspace_bytes(R, n)), stream_);
    timeline_.count_copy();
    QS_CUDA_CHECK(cudaMemcpyAsync(argmax_pinned_, d, size_t(R) * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
    QS_CUDA_CHECK(cudaEventRecord(argmax_done_, stream_));
    argmax_in_flight_ = true;
    argmax_started_rows_ = R;
}

void CudaOps::argmax_rows_wait(int32_t* out) {
    QS_CHECK_MSG(argmax_in_flight_, "CudaOps::argmax_rows_wait without argmax_rows_start");
    timeline_.count_sync();
    QS_CUDA_CHECK(cudaEventSynchronize(argmax_done_));
    std::memcpy(out, argmax_pinned_, size_t(argmax_started_rows_) * sizeof(int32_t));
    argmax_in_flight_ = false;
}

void CudaOps::add(float* x, const float* y, int64_t n) {
    const auto prof = op_scope("add");
    launch_add(x, y, n, stream_);
}

void CudaOps::fill_zero(float* x, int64_t n) {
    if (n > 0) QS_CUDA_CHECK(cudaMemsetAsync(x, 0, size_t(n) * sizeof(float), stream_));
}

void CudaOps::gather_rows(const float* src, const int32_t* rows, int64_t R, int64_t n, float* out) {
    const auto prof = op_scope("gather/concat");
    launch_gather_rows(src, upload_ints(rows, R), R, n, out, stream_);
}

void CudaOps::concat_columns(const float* a, const float* b, int64_t T, int64_t n, float* out) {
    const auto prof = op_scope("gather/concat");
    launch_concat_columns(a, b, T, n, out, stream_);
}

void CudaOps::gated_attention(const float* qg, float* k, const float* v, const ParamVector& q_norm,
                              const ParamVector& k_norm, const AttentionDims& d, const ForwardBatch& batch,
                              const int32_t* positions, ModelCache& cache, int64_t kv_layer, float* out) {
    const auto prof = op_scope("attention");
    check_batch(batch);
    CudaCacheStorage& st = checked_storage(cache);
    const CacheGeometry& g = cache.geometry();
    GatedAttentionParams p{};
    p.qg = qg;
    p.k = k;
    p.v = v;
    p.q_norm_w = weights_.vec(q_norm);
    p.k_norm_w = weights_.vec(k_norm);
    p.k_cache = st.k(kv_layer);
    p.v_cache = st.v(kv_layer);
    p.kv_dtype = st.kv_dtype();
    p.Hq = int(d.num_heads);
    p.Hkv = int(d.num_kv_heads);
    p.D = int(d.head_dim);
    p.rotary_dim = int(d.rotary_dim);
    p.block_size = int(g.block_size);
    p.rope_theta = d.rope_theta;
    for (int k = 0; k < 3; ++k) p.mrope_section[k] = int(d.mrope_section[size_t(k)]);
    p.eps = float(d.eps);
    p.batch = batch_;  // rope_positions: the M-RoPE streams uploaded by begin_forward
    p.max_splits = kAttentionMaxSplits;
    p.decode_max_rows = options_.attention_decode_rows;
    p.decode_version = options_.attention_decode_version;
    p.combine_version = options_.attention_combine_version;
    p.workspace = arena_.allocate(attention_workspace_bytes(batch_.num_tokens, d.num_heads, d.head_dim, p.max_splits));
    if (attention_prefill_v2_applies(options_.attention_prefill_version, p.D, p.kv_dtype, batch_.max_seq_tokens)) {
        int64_t kv_tokens = 0;  // the prefill sequences' whole causal ranges, gathered to bf16
        for (const SeqSpan& s : batch.seqs)
            if (s.num_tokens > 1) kv_tokens += int64_t(s.start_pos) + s.num_tokens;
        p.prefill_version = 2;
        p.prefill_kv_tokens = kv_tokens;
        p.prefill_workspace = arena_.allocate(attention_prefill_v2_workspace_bytes(
            batch_.num_tokens, batch_.num_seqs, d.num_heads, d.num_kv_heads, d.head_dim, kv_tokens));
    }
    p.out = out;
    launch_gated_attention(p, stream_);
}

void CudaOps::vision_tower(const VisionWeights& w, const float* patches, const std::vector<VisionGrid>& grids,
                           float* out, float* blocks_out) {
    vision_runner().forward(w, patches, grids, out, blocks_out);
}

VisionRunner& CudaOps::vision_runner() {
    std::lock_guard<std::mutex> lock(vision_mu_);
    if (!vision_) vision_ = std::make_unique<VisionRunner>(options_.device, options_.reference_precision);
    return *vision_;
}

size_t CudaOps::reserve_vision_tower(const VisionWeights& w, int64_t max_rows) {
    return vision_runner().reserve(w, max_rows);
}

size_t CudaOps::vision_arena_reserved() { return vision_runner().arena_reserved(); }

void CudaOps::gated_delta_net(const float* qkv, const float* z, const float* b, const float* a, const GdnWeights& w,
                              const GdnDims& d, const ForwardBatch& batch, ModelCache& cache, int64_t gdn_layer,
                              float* out) {
    const auto prof = op_scope("gated_delta_net");
    check_batch(batch);
    CudaCacheStorage& st = checked_storage(cache);
    GatedDeltaNetParams p{};
    p.qkv = qkv;
    p.z = z;
    p.b = b;
    p.a = a;
    p.conv_w = weights_.vec(w.conv1d);
    p.A_log = weights_.vec(w.A_log);
    p.dt_bias = weights_.vec(w.dt_bias);
    p.norm_w = weights_.vec(w.norm);
    p.conv_state = st.conv(gdn_layer);
    p.ssm_state = st.ssm(gdn_layer);
    p.ssm_bf16 = st.ssm_bf16();
    p.Nk = int(d.num_key_heads);
    p.Nv = int(d.num_value_heads);
    p.Dk = int(d.key_head_dim);
    p.Dv = int(d.value_head_dim);
    p.K = int(d.conv_kernel);
    p.eps = float(d.eps);
    p.batch = batch_;
    // Versions 2 and 3's bf16 fragments need head dims that are multiples of 8 (the released
    // model's are 128); other shapes (test models) keep version 1.
    p.prefill_version =
        (p.Dk % 8 == 0 && p.Dv % 8 == 0) ? gdn_prefill_version_for(options_.gdn_prefill_version, p.ssm_bf16) : 1;
    p.decode_version = options_.gdn_decode_version;
    p.slices_version = options_.gdn_slices_version;
    p.decode_kernel = options_.gdn_decode_kernel;
    // Versions 2/3's larger workspace (bf16 operands and chunk-start states, ~1 MB per sequence of
    // the batch at the real shape; twice that in 3) only when a sequence takes the chunked path;
    // decode batches keep v1's.
    const bool chunked = batch_.max_seq_tokens >= p.chunk_min_tokens;
    p.workspace = arena_.allocate(gdn_workspace_bytes(batch_.num_tokens, d.conv_dim(), p.Nk, p.Nv, p.Dk, p.Dv,
                                                      batch_.num_seqs, chunked ? p.prefill_version : 1));
    p.out = out;
    // The stash buffers are sized before a capture for the layers seen so far.
    if (gdn_layer >= gdn_shape_.layers) gdn_shape_ = GdnShape{gdn_layer + 1, d.conv_dim(), d.num_value_heads};
    QS_CHECK(gdn_shape_.conv_dim == d.conv_dim() && gdn_shape_.value_heads == d.num_value_heads);
    if (gdn_side_ != nullptr) {
        p.side_stream = gdn_side_;
        p.side_fork = gdn_side_fork_;
        p.side_join = gdn_side_join_;
        p.side_blocks = options_.gdn_side_blocks;
    }
    stash_deferred_inputs(qkv, b, a, gdn_layer);
    launch_gated_delta_net(p, stream_);
}

void CudaOps::stash_deferred_inputs(const float* qkv, const float* b, const float* a, int64_t gdn_layer) {
    // The deferred spans' rows into this layer's stash (persistent buffers: the commit comes
    // after the verdicts, when this forward's arena is gone).
    if (!stash_.this_forward) return;
    const int64_t n = stash_.rows, C = gdn_shape_.conv_dim, Nv = gdn_shape_.value_heads;
    const int id = kGdnStashId + 3 * int(gdn_layer);
    if (stash_.whole_batch) {  // one launch for the three copies where it can
        const GatherRowsPart whole[3] = {{qkv, n * C, persistent(id, n * C)},
                                         {b, n * Nv, persistent(id + 1, n * Nv)},
                                         {a, n * Nv, persistent(id + 2, n * Nv)}};
        if (copy3_supported(whole)) {
            launch_copy3(whole, stream_);
        } else {
            for (const GatherRowsPart& g : whole) copy(g.src, g.n, g.out);
        }
        return;
    }
    const GatherRowsPart parts[3] = {
        {qkv, C, persistent(id, n * C)}, {b, Nv, persistent(id + 1, n * Nv)}, {a, Nv, persistent(id + 2, n * Nv)}};
    launch_gather_rows3(parts, stash_.rows_dev, n, stream_);
}

void CudaOps::gdn_commit(const GdnWeights& w, const GdnDims& d, const ForwardBatch& commit,
                         const std::vector<int32_t>& deferred_rows, ModelCache& cache, int64_t gdn_layer) {
    QS_CHECK(deferred_rows.size() == commit.seqs.size() && gdn_layer < gdn_shape_.layers);
    check_batch(commit);
    const int64_t T = batch_.num_tokens, C = d.conv_dim(), Nv = d.num_value_heads;
    const int id = kGdnStashId + 3 * int(gdn_layer);
    // Where each commit row's inputs are in the stash: commit span i's rows are rows 1.. of the
    // deferred span (the forward wrote row 0 into the slot). A whole-batch stash holds the verify
    // forward's rows in place: a commit whose spans sit at those rows reads it directly.
    bool in_place = stash_.whole_batch && T <= stash_.rows;
    for (size_t i = 0; i < commit.seqs.size() && in_place; ++i) {
        auto it = stash_.first.find(deferred_rows[i]);
        QS_CHECK_MSG(it != stash_.first.end(), "gdn_commit: no deferred span began at that row");
        in_place = it->second + 1 == commit.seqs[i].row_begin;
    }
    if (commit_zero_z_ == nullptr) {  // the first layer of this commit forward
        commit_zero_z_ = alloc(T * d.value_dim());      // [T, Vdim] (only feeds the unused output)
        commit_unused_out_ = alloc(T * d.value_dim());  // [T, Vdim] unused
        fill_zero(commit_zero_z_, T * d.value_dim());
    }
    float* z = commit_zero_z_;
    float* out = commit_unused_out_;
    if (in_place) {
        gated_delta_net(persistent(id, 0), z, persistent(id + 1, 0), persistent(id + 2, 0), w, d, commit, cache,
                        gdn_layer, out);
        return;
    }
    // Gathered: commit row row_begin + r ← stash row first + 1 + r (rows of no span read row 0).
    // The row list is this call's data: a captured graph would replay it for other commits.
    QS_CHECK_MSG(!in_capture_, "gdn_commit: a commit captured as a graph must read the stash in place");
    std::vector<int32_t>& rows = stash_rows_scratch_;
    rows.assign(size_t(T), 0);
    for (size_t i = 0; i < commit.seqs.size(); ++i) {
        auto it = stash_.first.find(deferred_rows[i]);
        QS_CHECK_MSG(it != stash_.first.end(), "gdn_commit: no deferred span began at that row");
        for (int32_t r = 0; r < commit.seqs[i].num_tokens; ++r)
            rows[size_t(commit.seqs[i].row_begin + r)] = int32_t(it->second + 1 + r);
    }
    const int32_t* d_rows = upload_ints(rows.data(), T);
    float* qkv = alloc(T * C);  // [T, C] the kept rows' pre-conv inputs
    float* b = alloc(T * Nv);   // [T, Nv]
    float* a = alloc(T * Nv);   // [T, Nv]
    const GatherRowsPart parts[3] = {{persistent(id, 0), C, qkv}, {persistent(id + 1, 0), Nv, b}, {persistent(id + 2, 0), Nv, a}};
    launch_gather_rows3(parts, d_rows, T, stream_);
    gated_delta_net(qkv, z, b, a, w, d, commit, cache, gdn_layer, out);
}

void CudaOps::check_router(const float* x, int64_t T, const MoeWeights& w, int64_t top_k, const float* logits,
                           const float* gate) {
    const int64_t E = weights_.experts(w).E;
    float* ref = alloc(T * E);
    float* ref_gate = alloc(T);
    linear(x, T, w.router, ref);
    linear(x, T, w.shared_expert_gate, ref_gate);
    std::vector<float> got(static_cast<size_t>(T * E)), want(static_cast<size_t>(T * E));
    std::vector<float> got_gate(static_cast<size_t>(T)), want_gate(static_cast<size_t>(T));
    copy_to_host(logits, T * E, got.data());
    copy_to_host(gate, T, got_gate.data());
    copy_to_host(ref, T * E, want.data());
    copy_to_host(ref_gate, T, want_gate.data());
    std::string report;
    const int64_t bad = compare_router_call(got.data(), got_gate.data(), want.data(), want_gate.data(), T, E, top_k,
                                            kRouterCheckBound, router_check_, report);
    if (bad > 0) log_warn("router check: T = {}, {} suspicious rows: {}", T, bad, report);
    else if (!report.empty()) log_info("router check: T = {}: {}", T, report);
}

void CudaOps::moe(const float* x, int64_t T, const MoeWeights& w, int64_t top_k, bool norm_topk_prob, float* y) {
    const auto prof = op_scope("moe");
    const DeviceExperts& e = weights_.experts(w);
    MoeParams p{};
    p.x = x;
    p.experts = MoeExpertTable{e.format, e.gate, e.up, e.down, e.gate_scale, e.up_scale, e.down_scale,
                               e.E, e.H, e.I, e.I_shared};
    p.experts.gate_q = e.gate_q;
    p.experts.up_q = e.up_q;
    p.experts.down_q = e.down_q;
    p.experts.gate_qs = e.gate_qs;
    p.experts.up_qs = e.up_qs;
    p.experts.down_qs = e.down_qs;
    p.experts.int4_group = e.int4_group;
    p.experts.nvfp4 = e.nvfp4;
    p.experts.nvfp4_global = e.nvfp4_global;
    p.experts.bf16_in_scratch = e.bf16_in_scratch;
    p.experts.int4_scratch = e.int4_scratch;
    p.experts.int4_scratch_bytes = e.int4_scratch_bytes;
    p.T = int(T);
    p.top_k = int(top_k);
    p.norm_topk_prob = norm_topk_prob;
    p.y = y;
    p.gemm_path = options_.moe_gemm_path;
    p.decode_version = options_.moe_decode_version;
    p.decode_pdl = options_.moe_decode_pdl;
    p.decode_eout_bf16 = options_.moe_decode_eout_bf16;
    p.small_prefetch_down = options_.moe_small_prefetch_down;
    // Down + combine by expert slots (FP8 and BF16 experts; INT4 and NVFP4 have their own kernels).
    const bool down_slots = options_.moe_small_down_version == 2 || (options_.moe_small_down_version < 0 && T >= 2);
    p.small_down_version = down_slots ? 2 : 1;
    p.small_int4_gate_up_version = options_.moe_small_int4_gate_up_version;
    p.prefill_version = options_.moe_prefill_version;
    p.int4_grouped = options_.moe_int4_grouped;
    p.int4_prefill_version = options_.moe_int4_prefill_version;
    p.int4_grouped_max_t =
        int(moe_int4_grouped_max_t(p.int4_prefill_version != 2 || !moe_int4_mixed_supported(p.experts)));
    // Small-T version 2 reads the fp32 router and shared-expert-gate weights itself.
    const DeviceLinear& router = weights_.linear(w.router);
    const DeviceLinear& sgate = weights_.linear(w.shared_expert_gate);
    const bool small_v2 = options_.moe_small_version == 2 || (options_.moe_small_version < 0 && (T == 1 || down_slots));
    if (small_v2 && e.format != DeviceWeightFormat::kF32 &&
        router.dtype == DeviceLinear::Dtype::kF32 && sgate.dtype == DeviceLinear::Dtype::kF32 && router.out == e.E &&
        router.in == e.H && sgate.out == 1 && sgate.in == e.H) {
        p.small_version = 2;
        p.router_weight = static_cast<const float*>(router.w);
        p.shared_gate_weight = static_cast<const float*>(sgate.w);
        p.small_counter = moe_counter_.as<int>();
    }
    if (!moe_computes_router(p)) {
        float* router_logits = alloc(T * e.E);  // [T, E]
        float* shared_gate = alloc(T);           // [T]
        // From router_kernel_min_rows rows on (below, cuBLAS is faster). The kernel's cp.async reads
        // x in 16-byte chunks: a misaligned x (never an arena block) keeps the cuBLAS path.
        if (options_.moe_router_kernel != 0 &&
            (T >= router_kernel_min_rows(e.router_lo != nullptr) || options_.moe_router_kernel == 2) &&
            e.router_hi != nullptr &&
            reinterpret_cast<uintptr_t>(x) % 16 == 0) {
            launch_router_logits(x, T, e.H, e.router_hi, e.router_lo, e.E, router_logits, shared_gate, stream_);
            if (options_.moe_router_check && !in_capture_) check_router(x, T, w, top_k, router_logits, shared_gate);
        } else {  // one launch for both at T <= 8 (Gemm::linears; each output as linear() gives it)
            const DeviceLinear* ws[2] = {&router, &sgate};
            float* ys[2] = {router_logits, shared_gate};
            gemm_->linears(x, T, ws, ys, arena_, stream_);
        }
        p.router_logits = router_logits;
        p.shared_gate_logit = shared_gate;
    }
    if (e.format == DeviceWeightFormat::kF32) {
        p.workspace = arena_.allocate(moe_reference_workspace_bytes(T, e.H, e.I, e.I_shared, top_k));
        launch_moe_reference(p, stream_);
        return;
    }
    p.workspace = arena_.allocate(moe_workspace_bytes(T, e.H, e.I, e.I_shared, e.E, top_k));
    moe_small_calls_ += moe_takes_small_path(p);
    moe_small_down_slots_calls_ += moe_takes_small_down_slots(p);
    moe_small_int4_gate_up_mma_calls_ += moe_takes_small_int4_gate_up_mma(p);
    moe_int4_mixed_calls_ += moe_takes_int4_mixed(p);
    launch_moe(p, stream_);
}

}  // namespace qs::cuda
