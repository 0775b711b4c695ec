// Sampling lab: CudaOps::sample (src/backend/cuda/sampling_kernels.cu, contract in
// src/backend/sampling.h) checked against its CPU specification (cpu::sample_rows) and timed at
// the real vocabulary (248,320) for 1, 64 and 512 rows in each serving mode:
//   greedy; temperature 1; T 0.7 + top_p 0.95; top_k 50; T 1 + the three penalties over a
//   2,048-token history; logprobs 5 (greedy); T 0.7 + top_p 0.95 + logprobs 5; and greedy under a
//   grammar mask (1/8 of the ids allowed, and the two EOS bans of min_tokens: the HTTP `schema`
//   mode's rows), its bitmask in the engine's page-locked memory (Ops::upload_memory) and in
//   pageable memory: the mask's cost at 512 rows is the difference to plain greedy.
// Check: the same tokens and top ids as the CPU for 1 and 8 rows of every mode, with the statistics
// and thresholds over vocabulary chunks (CudaOptions::sampling_chunked_select 1, the default) and in
// one block per row (0).
// Timing: host wall time of whole sample() calls (upload, launches, download, sync), median of
// 20 after 3 warm-ups, with the selection chunked and in one block per row,
// on logits that stay in place (L2 holds none of 512 rows: 508 MB).
// "GB/s per pass" = rows × V × 4 bytes / time: the bandwidth of one read of the logits; a mode
// that reads them k times reaches at most copy/k. Built with QS_BUILD_KERNEL_LABS=ON.
// Run: sampling_lab [--quick]   (exit code 1 on any FAIL)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/cuda_cache.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "core/timer.h"

using namespace qs;

namespace {

constexpr int64_t kVocab = 248320;
constexpr int64_t kHistory = 2048;

enum class Mask { kNone, kPinned, kPageable };

struct Mode {
    const char* name;
    float temperature, top_p;
    int top_k;
    bool penalties;
    int logprobs;
    Mask mask = Mask::kNone;
};

const Mode kModes[] = {
    {"greedy", 0.0f, 1.0f, 0, false, -1},          {"T 1", 1.0f, 1.0f, 0, false, -1},
    {"T 0.7 top_p 0.95", 0.7f, 0.95f, 0, false, -1}, {"top_k 50", 1.0f, 1.0f, 50, false, -1},
    {"T 1 + penalties", 1.0f, 1.0f, 0, true, -1},  {"greedy + logprobs 5", 0.0f, 1.0f, 0, false, 5},
    {"T 0.7 top_p 0.95 + logprobs 5", 0.7f, 0.95f, 0, false, 5},
    // Last: the timing runs adjust the logits in place (masked ids stay -inf for what follows).
    {"greedy + mask + bans (page-locked)", 0.0f, 1.0f, 0, false, -1, Mask::kPinned},
    {"greedy + mask + bans (pageable)", 0.0f, 1.0f, 0, false, -1, Mask::kPageable},
};

SamplingBatch make_batch(const Mode& m, int rows, int64_t pages_per_row, UploadMemory& pinned) {
    SamplingBatch b;
    if (m.mask == Mask::kPinned) b.bitmask = decltype(b.bitmask)(UploadAllocator<uint32_t>(pinned));
    const int64_t W = bitmask_words(kVocab);
    std::mt19937 mask_rng(5);
    for (int i = 0; i < rows; ++i) {
        SampleRow r;
        r.logits_row = i;
        r.temperature = m.temperature;
        r.top_p = m.top_p;
        r.top_k = m.top_k;
        r.seed = uint64_t(i) * 7919 + 1;
        r.draw = 17;
        r.num_top_logprobs = m.logprobs;
        if (m.penalties) {
            r.repetition_penalty = 1.1f;
            r.presence_penalty = 0.5f;
            r.frequency_penalty = 0.5f;
            r.history_len = int32_t(kHistory);
            r.num_prompt = int32_t(kHistory - 256);
            r.table_begin = int32_t(b.block_tables.size());
            for (int64_t p = 0; p < pages_per_row; ++p) b.block_tables.push_back(int32_t(int64_t(i) * pages_per_row + p));
        }
        if (m.mask != Mask::kNone) {
            r.bitmask_row = i;
            b.bitmask.resize(b.bitmask.size() + size_t(W));
            uint32_t* w = b.bitmask.data() + int64_t(i) * W;
            for (int64_t k = 0; k < W; ++k) w[k] = uint32_t(mask_rng()) & uint32_t(mask_rng()) & uint32_t(mask_rng());
            if (kVocab % 32) w[W - 1] &= (1u << (kVocab % 32)) - 1u;  // nothing past the vocabulary
            w[0] |= 1u;
            r.adjust_begin = int32_t(b.adjust.size());
            for (int32_t eos : {248044, 248046}) b.adjust.push_back({eos, -INFINITY});  // min_tokens' bans
            r.adjust_end = int32_t(b.adjust.size());
        }
        b.rows.push_back(r);
    }
    return b;
}

}  // namespace

int main(int argc, char** argv) {
    const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
    if (!cuda::cuda_device_available()) {
        std::printf("no CUDA device\n");
        return 1;
    }
    // Two samplers: the statistics and thresholds over the draw's vocabulary chunks while the rows
    // are few (CudaOptions::sampling_chunked_select 1, the default), and one block per row for them
    // (0); the draw's own chunks are the same in both.
    cuda::CudaOptions chunked, one_block;
    chunked.sampling_chunked_select = 1;
    one_block.sampling_chunked_select = 0;
    cuda::CudaOps ops(chunked), ops_one(one_block);
    cuda::CudaOps* samplers[2] = {&ops, &ops_one};
    const int max_rows = 512;
    const int64_t block_size = 16, pages_per_row = kHistory / block_size;
    CacheGeometry g;
    g.block_size = block_size;
    g.num_blocks = max_rows * pages_per_row;
    g.num_state_slots = 1;
    ModelCache cpu_cache(g);
    std::unique_ptr<ModelCache> gpu_caches[2] = {ops.make_cache(g), ops_one.make_cache(g)};
    std::mt19937 rng(1);
    std::vector<int32_t> pages(size_t(g.num_blocks * block_size));
    for (int32_t& t : pages) t = int32_t(rng() % 30000);  // common ids: repeats, as in text
    std::copy(pages.begin(), pages.end(), cpu_cache.token_pages());
    for (int v = 0; v < 2; ++v) {
        auto* st = samplers[v]->storage(gpu_caches[v].get());
        QS_CUDA_CHECK(cudaMemcpy(st->token_pages(), pages.data(), pages.size() * 4, cudaMemcpyHostToDevice));
    }
    // Logits like a model's: N(0, 2.5) with a few confident tokens per row.
    std::vector<float> logits(size_t(max_rows) * size_t(kVocab));
    std::normal_distribution<float> nd(0.0f, 2.5f);
    for (float& x : logits) x = nd(rng);
    for (int r = 0; r < max_rows; ++r)
        for (int k = 0; k < 5; ++k) logits[size_t(r) * kVocab + rng() % kVocab] += 12.0f + float(k);
    float* d_logits = ops.alloc(int64_t(logits.size()));
    ops.copy_from_host(logits.data(), int64_t(logits.size()), d_logits);

    bool ok = true;
    std::printf("Check against the CPU specification (1 and 8 rows per mode; the selection chunked, then one block "
                "per row):\n");
    for (const Mode& m : kModes) {
        for (int rows : {1, 8}) {
            const SamplingBatch b = make_batch(m, rows, pages_per_row, ops.upload_memory());
            std::vector<float> host(logits.begin(), logits.begin() + rows * kVocab);
            SampleOutput want;
            cpu::sample_rows(host.data(), kVocab, b, cpu_cache.token_pages(), block_size, want);
            for (int v = 0; v < 2; ++v) {
                SampleOutput got;
                float* d = ops.alloc(rows * kVocab);  // a fresh copy: the adjustments change the rows
                QS_CUDA_CHECK(cudaMemcpy(d, d_logits, size_t(rows * kVocab) * 4, cudaMemcpyDeviceToDevice));
                samplers[v]->sample(d, kVocab, b, *gpu_caches[v], got);
                int bad = 0;
                for (int i = 0; i < rows; ++i) {
                    bad += got.token[size_t(i)] != want.token[size_t(i)];
                    for (int j = 0; j < std::max(0, m.logprobs); ++j)
                        bad += got.top_ids[size_t(i) * kMaxTopLogprobs + size_t(j)] !=
                               want.top_ids[size_t(i) * kMaxTopLogprobs + size_t(j)];
                }
                std::printf("  %-36s %d rows, %-10s %s\n", m.name, rows, v == 0 ? "chunked" : "one block", bad ? "FAIL" : "ok");
                ok &= bad == 0;
            }
        }
    }

    std::printf("\n| mode | rows | us per call (selection chunked) | one block per row: us | GB/s per pass |\n"
                "|:-----|-----:|------------:|----------------------:|--------------:|\n");
    for (const Mode& m : kModes) {
        for (int rows : {1, 64, 512}) {
            if (quick && rows == 64) continue;
            const SamplingBatch b = make_batch(m, rows, pages_per_row, ops.upload_memory());
            double med[2] = {0.0, 0.0};
            for (int v = 0; v < 2; ++v) {
                SampleOutput out;
                std::vector<double> t;
                for (int it = 0; it < 23; ++it) {
                    // Penalties change the rows in place; the drift over 23 calls is harmless for timing.
                    Timer timer;
                    samplers[v]->sample(d_logits, kVocab, b, *gpu_caches[v], out);
                    if (it >= 3) t.push_back(timer.elapsed_s());
                }
                std::sort(t.begin(), t.end());
                med[v] = t[t.size() / 2];
            }
            std::printf("| %s | %d | %.1f | %.1f | %.0f |\n", m.name, rows, med[0] * 1e6, med[1] * 1e6,
                        double(rows) * kVocab * 4 / med[0] / 1e9);
        }
    }
    std::printf("\n%s\n", ok ? "ALL OK" : "SOME FAIL");
    return ok ? 0 : 1;
}
