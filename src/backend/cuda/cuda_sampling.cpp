// CudaOps::sample and store_token_ids: the SamplingBatch goes up in one copy (its grammar
// bitmasks in a second, on their own stream, straight from the engine's page-locked rows: 16 MB
// at 512 rows, which this way neither pass through a packing buffer nor wait for the forward),
// the sampling launches run on the forward's device logits, and only [rows] tokens, verdicts and
// logprobs and [rows, 20] top logprobs come back (one copy, one sync). Engine thread.
#include <algorithm>
#include <cstring>

#include "backend/cuda/cuda_cache.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/sampling_kernels.h"
#include "core/check.h"

namespace qs::cuda {

namespace {

// Appends the bytes of `v` to `buf` at a 16-byte boundary; returns their offset.
template <class T>
size_t pack(std::vector<char>& buf, const T* v, size_t n) {
    const size_t at = (buf.size() + 15) / 16 * 16;
    buf.resize(at + n * sizeof(T));
    if (n) std::memcpy(buf.data() + at, v, n * sizeof(T));
    return at;
}

// Page-locked host memory (upload_memory.h). Stateless, so it outlives every allocator that
// points to it (an engine destroyed after its backend included).
class PinnedUploadMemory final : public UploadMemory {
public:
    void* allocate(size_t bytes) override {
        void* p = nullptr;
        QS_CUDA_CHECK(cudaMallocHost(&p, bytes));
        return p;
    }
    void deallocate(void* p, size_t) noexcept override {
        // At process exit the context may be gone already; the memory goes with it.
        if (cudaFreeHost(p) != cudaSuccess) (void)cudaGetLastError();
    }
};

}  // namespace

UploadMemory& CudaOps::upload_memory() {
    static PinnedUploadMemory memory;
    return memory;
}

void CudaOps::store_token_ids(const ForwardBatch& batch, const int32_t* positions, ModelCache& cache) {
    check_batch(batch);
    const CudaCacheStorage& st = checked_storage(cache);
    launch_store_token_ids(batch_, st.token_pages(), int32_t(st.block_size()), stream_);
}

void CudaOps::sample(float* logits, int64_t V, const SamplingBatch& batch, ModelCache& cache, SampleOutput& out) {
    timeline_.mark("sample", stream_);
    const auto prof = op_scope("sample");
    const int32_t R = int32_t(batch.rows.size());
    out.resize(size_t(R));
    if (R == 0) return;
    const CudaCacheStorage* st = &checked_storage(cache);

    int32_t num_logits_rows = 0;
    for (const SampleRow& r : batch.rows) {
        QS_CHECK(r.logits_row >= 0 && r.num_top_logprobs <= kMaxTopLogprobs);
        num_logits_rows = std::max(num_logits_rows, r.logits_row + 1);
    }
    const SamplingNeeds needs = sampling_needs(batch.rows.data(), R, V);
    const bool any_logprobs = needs.logprobs;
    const RawValueLists lists = raw_value_lists(batch, num_logits_rows, needs);
    const std::vector<int32_t>& raw_list = lists.row_list;
    const std::vector<int32_t>& list_begin = lists.begin;
    const std::vector<int32_t>& list_cap = lists.cap;
    const size_t L = list_begin.size();
    const size_t saved_n = lists.saved();

    // Inputs up in one copy.
    std::vector<char>& up = sample_upload_;
    up.clear();
    const size_t o_rows = pack(up, batch.rows.data(), batch.rows.size());
    const size_t o_adjust = pack(up, batch.adjust.data(), batch.adjust.size());
    const size_t o_tables = pack(up, batch.block_tables.data(), batch.block_tables.size());
    const size_t o_raw = pack(up, raw_list.data(), raw_list.size());
    const size_t o_begin = pack(up, list_begin.data(), L);
    const size_t o_cap = pack(up, list_cap.data(), L);
    char* d_in = static_cast<char*>(arena_.allocate(up.size()));
    timeline_.count_copy();
    QS_CUDA_CHECK(cudaMemcpyAsync(d_in, up.data(), up.size(), cudaMemcpyHostToDevice, stream_));
    const uint32_t* d_bitmask = nullptr;
    if (!batch.bitmask.empty()) {
        const size_t bytes = batch.bitmask.size() * sizeof(uint32_t);
        if (!copy_stream_) {
            QS_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
            QS_CUDA_CHECK(cudaEventCreateWithFlags(&bitmask_copied_, cudaEventDisableTiming));
        }
        if (bitmask_dev_.bytes() < bytes) bitmask_dev_ = DeviceBuffer(bytes + bytes / 4);  // rarely: rows grow
        timeline_.count_copy();
        QS_CUDA_CHECK(cudaMemcpyAsync(bitmask_dev_.get(), batch.bitmask.data(), bytes, cudaMemcpyHostToDevice,
                                      copy_stream_));
        QS_CUDA_CHECK(cudaEventRecord(bitmask_copied_, copy_stream_));
        QS_CUDA_CHECK(cudaStreamWaitEvent(stream_, bitmask_copied_, 0));
        d_bitmask = bitmask_dev_.as<uint32_t>();
    }

    // Outputs (and the zeroed list counts) in one region: token, accepted, logprob [R];
    // top ids and logprobs [R, 20]; then scratch.
    const size_t top_n = size_t(R) * kMaxTopLogprobs;
    const size_t out_bytes = (3 * size_t(R) + 2 * top_n) * 4;
    const size_t scratch = (out_bytes + (L + size_t(R)) * 4 + saved_n * sizeof(SavedLogit) + 15) / 16 * 16;
    const int32_t chunks = sampling_chunks(R, V, options_.sampling_chunks);
    const bool chunked_select = options_.sampling_chunked_select != 0;
    char* d_out = static_cast<char*>(arena_.allocate(scratch + sampling_scratch_bytes(R, V, chunks, chunked_select)));
    if (L) QS_CUDA_CHECK(cudaMemsetAsync(d_out + out_bytes, 0, L * 4, stream_));

    SamplingLaunch p;
    p.logits = logits;
    p.V = V;
    p.rows = reinterpret_cast<const SampleRow*>(d_in + o_rows);
    p.R = R;
    p.adjust = reinterpret_cast<const TokenAdjust*>(d_in + o_adjust);
    p.block_tables = reinterpret_cast<const int32_t*>(d_in + o_tables);
    p.bitmask = d_bitmask;
    p.token_pages = st->token_pages();
    p.block_size = int32_t(st->block_size());
    p.raw_list = reinterpret_cast<const int32_t*>(d_in + o_raw);
    p.list_begin = reinterpret_cast<const int32_t*>(d_in + o_begin);
    p.list_cap = reinterpret_cast<const int32_t*>(d_in + o_cap);
    p.list_count = reinterpret_cast<int32_t*>(d_out + out_bytes);
    p.lse = reinterpret_cast<float*>(d_out + out_bytes + L * 4);
    p.saved = reinterpret_cast<SavedLogit*>(d_out + out_bytes + (L + size_t(R)) * 4);
    p.chunks = chunks;
    p.chunked_select = chunked_select;
    set_sampling_scratch(p, d_out + scratch);
    p.token = reinterpret_cast<int32_t*>(d_out);
    p.accepted = p.token + R;
    p.logprob = reinterpret_cast<float*>(p.accepted + R);
    p.top_ids = reinterpret_cast<int32_t*>(p.logprob + R);
    p.top_logprobs = reinterpret_cast<float*>(p.top_ids + top_n);
    launch_sampling(p, needs, stream_);

    // Back in one copy: the top logprobs only when some row asked for them.
    sample_download_.resize(out_bytes / 4);
    const size_t back = any_logprobs ? out_bytes : 3 * size_t(R) * 4;
    timeline_.count_copy();
    QS_CUDA_CHECK(cudaMemcpyAsync(sample_download_.data(), d_out, back, cudaMemcpyDeviceToHost, stream_));
    sync_stream();
    const int32_t* h = sample_download_.data();
    std::memcpy(out.token.data(), h, size_t(R) * 4);
    for (int32_t i = 0; i < R; ++i) out.accepted[size_t(i)] = uint8_t(h[R + i] != 0);
    std::memcpy(out.logprob.data(), h + 2 * R, size_t(R) * 4);
    if (any_logprobs) {
        std::memcpy(out.top_ids.data(), h + 3 * R, top_n * 4);
        std::memcpy(out.top_logprobs.data(), h + 3 * R + top_n, top_n * 4);
    }
}

}  // namespace qs::cuda
