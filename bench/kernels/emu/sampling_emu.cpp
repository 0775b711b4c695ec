// Runs the GPU sampler (src/backend/cuda/sampling_kernels.cu and sampling_chunked.cu, their own
// source and launcher) in the host SIMT emulator (emu_prelude.h) against the CPU specification
// (cpu::sample_rows): for batches of 1, 2, 3, 9, 50, 100 and 132 rows (auto: 61 chunks a row at
// one row, 2 at 100 + 2 siblings, 1 from 132) at the real vocabulary (248,320) and smaller ones, with every kind of row (greedy, temperature, top-k, top-p, both,
// min-p, drafts, logprobs with N = 0, 1, 5 and 20, penalties, logit_bias and bans, grammar masks,
// sibling rows on one logits row) and rows of heavily tied logits (values on a grid of 0.5: the
// top-k, top-p and top-N boundaries fall inside ties), each batch run with the vocabulary in
// sampling_chunks' chunks (auto), in 1 (one block per row), in 7 and (up to 8 rows) 512 chunks:
//  - tokens, verdicts and top ids equal the CPU's, logprobs within 2e-5, adjusted logits bitwise;
//  - every chunk count gives the one-block path's thresholds (inv_t, m, tau) and lse exactly
//    (the lse within 1 ulp: its double sum runs in another order) and the same outputs.
// Says nothing about speed. Build and run (repo root; needs build/libqs_lib.a of the CPU build):
//   sh bench/kernels/emu/run_emu.sh sampling [--quick | --smoke]   (--smoke: three cases)
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/sampling_chunked.h"
#include "backend/cuda/sampling_kernels.h"

using namespace qs;

namespace {

constexpr int64_t kBlockSize = 16;
constexpr int64_t kPages = 64;

struct Run {
    SampleOutput out;
    std::vector<float> logits;  // after the adjustments
    std::vector<cuda::RowThresholds> thresholds;
    std::vector<float> lse;
};

// One emulated launch_sampling over host memory, set up as CudaOps::sample sets it up.
Run run_gpu_sampler(const std::vector<float>& logits_in, int64_t V, const SamplingBatch& b,
                    const std::vector<int32_t>& pages, int32_t forced_chunks) {
    const int32_t R = int32_t(b.rows.size());
    Run run;
    run.logits = logits_in;
    int32_t num_logits_rows = 0;
    for (const SampleRow& r : b.rows) num_logits_rows = std::max(num_logits_rows, r.logits_row + 1);
    const cuda::SamplingNeeds needs = cuda::sampling_needs(b.rows.data(), R, V);
    const cuda::RawValueLists lists = cuda::raw_value_lists(b, num_logits_rows, needs);
    std::vector<int32_t> list_count(lists.begin.size(), 0);
    std::vector<cuda::SavedLogit> saved(lists.saved() + 1);
    const size_t rows = size_t(R), tops = rows * size_t(kMaxTopLogprobs);
    std::vector<int32_t> token(rows), accepted(rows), top_ids(tops, -1);
    std::vector<float> logprob(rows), top_lp(tops);
    run.lse.assign(size_t(R), NAN);

    cuda::SamplingLaunch p;
    p.logits = run.logits.data();
    p.V = V;
    p.rows = b.rows.data();
    p.R = R;
    p.adjust = b.adjust.data();
    p.block_tables = b.block_tables.data();
    p.bitmask = b.bitmask.empty() ? nullptr : b.bitmask.data();
    p.token_pages = pages.data();
    p.block_size = int32_t(kBlockSize);
    p.raw_list = lists.row_list.data();
    p.list_begin = lists.begin.data();
    p.list_cap = lists.cap.data();
    p.list_count = list_count.data();
    p.saved = saved.data();
    p.lse = run.lse.data();
    p.chunks = cuda::sampling_chunks(R, V, forced_chunks);
    p.chunked_select = true;  // with one chunk: the one-block kernels
    // Scratch starts as 0xff bytes: a read of anything not written poisons the result.
    std::vector<char> scratch(cuda::sampling_scratch_bytes(R, V, p.chunks, true) + 16, char(0xff));
    cuda::set_sampling_scratch(p, scratch.data() + (16 - reinterpret_cast<uintptr_t>(scratch.data()) % 16) % 16);
    p.token = token.data();
    p.accepted = accepted.data();
    p.logprob = logprob.data();
    p.top_ids = top_ids.data();
    p.top_logprobs = top_lp.data();
    cuda::launch_sampling(p, needs, nullptr);

    run.out.resize(size_t(R));
    for (int32_t i = 0; i < R; ++i) {
        run.out.token[size_t(i)] = token[size_t(i)];
        run.out.accepted[size_t(i)] = uint8_t(accepted[size_t(i)] != 0);
        run.out.logprob[size_t(i)] = logprob[size_t(i)];
    }
    run.out.top_ids = top_ids;
    run.out.top_logprobs = top_lp;
    run.thresholds.assign(p.draw_thresholds, p.draw_thresholds + R);
    return run;
}

// A batch of R rows; `kinds` picks the row kinds (all of them cycle by row index).
SamplingBatch make_batch(int R, int64_t V, std::mt19937& rng, bool single_kind, int kind0) {
    SamplingBatch b;
    for (int i = 0; i < R; ++i) {
        const int kind = single_kind ? kind0 : (i + kind0) % 12;
        SampleRow r;
        r.logits_row = i;
        r.temperature = kind == 0 ? 0.0f : 0.5f + 0.1f * float(i % 7);
        r.top_k = kind == 2 ? 40 : kind == 7 ? 3 : kind == 9 ? 50 : 0;
        r.top_p = kind == 3 || kind == 7 ? 0.9f : kind == 6 ? 0.5f : kind == 9 ? 0.95f : 1.0f;
        r.min_p = kind == 4 ? 0.05f : 0.0f;
        r.seed = 1000 + uint64_t(i) * 7 + uint64_t(kind0);
        r.draw = uint64_t(i * 3);
        r.num_top_logprobs = kind == 5 ? 20 : kind == 8 ? 1 : kind == 10 ? 0 : i % 3 == 0 ? 5 : -1;
        if (i % 5 == 1) r.draft = int32_t(rng() % uint32_t(V));
        if (kind == 11 || i % 4 == 1) {  // penalties over a history in random pages
            r.repetition_penalty = 1.3f;
            r.presence_penalty = 0.4f;
            r.frequency_penalty = 0.3f;
            r.history_len = 40 + int32_t(rng() % 160);
            r.num_prompt = r.history_len / 2;
            r.table_begin = int32_t(b.block_tables.size());
            for (int pg = 0; pg < (r.history_len + 15) / 16; ++pg) b.block_tables.push_back(int32_t(rng() % kPages));
        }
        if (i % 6 == 2) {  // logit_bias and a ban
            r.adjust_begin = int32_t(b.adjust.size());
            b.adjust.push_back({int32_t(rng() % uint32_t(V)), 4.0f});
            b.adjust.push_back({int32_t(rng() % uint32_t(V)), -INFINITY});
            if (b.adjust[b.adjust.size() - 1].token == b.adjust[b.adjust.size() - 2].token) b.adjust.pop_back();
            r.adjust_end = int32_t(b.adjust.size());
        }
        if (i % 7 == 3) {  // a grammar bitmask allowing ~1/8 of the vocabulary
            const int64_t W = bitmask_words(V);
            r.bitmask_row = int32_t(b.bitmask.size() / size_t(W));
            b.bitmask.resize(b.bitmask.size() + size_t(W), 0u);
            uint32_t* m = b.bitmask.data() + int64_t(r.bitmask_row) * W;
            for (int64_t w = 0; w < W; ++w) m[w] = uint32_t(rng()) & uint32_t(rng()) & uint32_t(rng());
            if (V % 32) m[W - 1] &= (1u << (V % 32)) - 1;
            m[0] |= 1u;
        }
        b.rows.push_back(r);
    }
    if (R >= 4) {  // two sibling rows on row 3's logits row (it does not adjust it again)
        for (int s = 0; s < 2; ++s) {
            SampleRow sib = b.rows[3];
            sib.adjusts_row = false;
            sib.seed += 77 + uint64_t(s);
            sib.num_top_logprobs = s == 0 ? 5 : -1;
            b.rows.push_back(sib);
        }
    }
    return b;
}

struct Tally {
    int cases = 0, failures = 0;
    void expect(bool ok, const std::string& what) {
        if (ok) return;
        ++failures;
        if (failures <= 40) std::printf("    FAIL: %s\n", what.c_str());
    }
};

bool same_float(float a, float b) { return a == b || (std::isnan(a) && std::isnan(b)); }

void check_case(const char* name, int R, int64_t V, bool ties, bool single_kind, int kind0, uint32_t seed, Tally& t) {
    std::mt19937 rng(seed);
    std::vector<int32_t> pages(size_t(kPages * kBlockSize));
    for (int32_t& x : pages) x = int32_t(rng() % 64) * int32_t(V / 64);
    const SamplingBatch b = make_batch(R, V, rng, single_kind, kind0);
    const size_t rows = b.rows.size();
    std::vector<float> logits(size_t(R) * size_t(V));
    std::normal_distribution<float> nd(0.0f, 2.5f);
    for (float& x : logits) x = ties ? std::round(nd(rng) * 2.0f) / 2.0f : nd(rng);
    for (int r = 0; r < R; ++r)
        for (int k = 0; k < 5; ++k) logits[size_t(r) * size_t(V) + rng() % uint64_t(V)] += ties ? 8.0f : 9.0f + float(k);

    std::vector<float> cpu_logits = logits;
    SampleOutput want;
    cpu::sample_rows(cpu_logits.data(), V, b, pages.data(), kBlockSize, want);
    const Run one = run_gpu_sampler(logits, V, b, pages, 1);
    const int32_t auto_chunks = cuda::sampling_chunks(int64_t(rows), V, 0);
    // 512 chunks (blocks of a few ids each) only for small grids: the emulator pays per block.
    std::vector<int32_t> chunk_counts = {1, 0, 7};
    if (rows * 512 <= 4096) chunk_counts.push_back(512);
    int diff_tokens = 0;
    for (int32_t forced : chunk_counts) {
        const Run got = forced == 1 ? one : run_gpu_sampler(logits, V, b, pages, forced);
        const int32_t chunks = cuda::sampling_chunks(int64_t(rows), V, forced);
        const std::string at = std::string(name) + " R " + std::to_string(R) + " V " + std::to_string(V) + " chunks " +
                               std::to_string(chunks);
        size_t adjusted = 0;
        for (size_t i = 0; i < logits.size(); ++i) adjusted += !same_float(got.logits[i], cpu_logits[i]);
        t.expect(adjusted == 0, at + ": adjusted logits differ from the CPU's in " + std::to_string(adjusted));
        for (size_t i = 0; i < rows; ++i) {
            const SampleRow& r = b.rows[i];
            const std::string ri = at + " row " + std::to_string(i);
            diff_tokens += got.out.token[i] != want.token[i];
            t.expect(got.out.token[i] == want.token[i],
                     ri + ": token " + std::to_string(got.out.token[i]) + " vs CPU " + std::to_string(want.token[i]));
            t.expect(got.out.accepted[i] == want.accepted[i], ri + ": verdict");
            if (!r.greedy()) {
                const cuda::RowThresholds& a = got.thresholds[i];
                const cuda::RowThresholds& o = one.thresholds[i];
                t.expect(a.inv_t == o.inv_t && a.m == o.m && same_float(a.tau, o.tau),
                         ri + ": thresholds differ from one block's (tau " + std::to_string(a.tau) + " vs " +
                             std::to_string(o.tau) + ", m " + std::to_string(a.m) + " vs " + std::to_string(o.m) + ")");
            }
            if (r.num_top_logprobs < 0) continue;
            t.expect(std::fabs(got.lse[i] - one.lse[i]) <= std::fabs(one.lse[i]) * 1.2e-7f,
                     ri + ": lse " + std::to_string(got.lse[i]) + " vs one block's " + std::to_string(one.lse[i]));
            t.expect(std::fabs(got.out.logprob[i] - want.logprob[i]) <= 2e-5f, ri + ": logprob");
            for (int j = 0; j < r.num_top_logprobs; ++j) {
                const size_t k = i * kMaxTopLogprobs + size_t(j);
                t.expect(got.out.top_ids[k] == want.top_ids[k], ri + ": top id " + std::to_string(j) + " " +
                                                                    std::to_string(got.out.top_ids[k]) + " vs CPU " +
                                                                    std::to_string(want.top_ids[k]));
                t.expect(std::fabs(got.out.top_logprobs[k] - want.top_logprobs[k]) <= 2e-5f, ri + ": top logprob");
            }
        }
        ++t.cases;
    }
    std::printf("  %-28s R %3d (+%zu siblings) V %6lld%s: auto %3d chunks; %d token mismatches over %zu chunkings\n", name,
                R, rows - size_t(R), (long long)V, ties ? " ties" : "", auto_chunks, diff_tokens, chunk_counts.size());
}

}  // namespace

int main(int argc, char** argv) {
    const std::string mode = argc > 1 ? argv[1] : "";
    const bool quick = mode == "--quick";
    std::setvbuf(stdout, nullptr, _IONBF, 0);
    Tally t;
    const int64_t kReal = 248320;
    std::printf("sampling_emu: the GPU sampler's kernels under the host emulator against cpu::sample_rows\n");
    const char* kind_names[] = {"greedy",       "T only",      "top-k 40",   "top-p 0.9",  "min-p",
                                "logprobs 20",  "top-p 0.5",   "top-k 3 + top-p", "logprobs 1", "top-k 50 + top-p 0.95",
                                "logprobs 0",   "penalties"};
    if (mode == "--smoke") {  // three cases, for checking that a broken kernel fails
        check_case("top-k 50 + top-p 0.95", 1, kReal, false, true, 9, 41u, t);
        check_case("logprobs 20", 1, kReal, true, true, 5, 42u, t);
        check_case("mixed", 9, kReal, false, false, 4, 6u, t);
        std::printf("%d checks of %d runs failed\n%s\n", t.failures, t.cases, t.failures ? "SOME FAIL" : "ALL OK");
        return t.failures ? 1 : 0;
    }
    // One row of each kind alone: the one-stream case, 61 chunks at the real vocabulary.
    for (int kind = 0; kind < 12; ++kind) {
        check_case(kind_names[kind], 1, kReal, false, true, kind, 11u + uint32_t(kind), t);
        if (!quick) check_case(kind_names[kind], 1, kReal, true, true, kind, 31u + uint32_t(kind), t);
    }
    // Mixed batches, and around the chunked path's boundary (auto: 2 chunks at 102 rows, 1 at 134).
    check_case("mixed", 3, kReal, false, false, 0, 5u, t);
    check_case("mixed", 9, kReal, true, false, 4, 6u, t);
    check_case("mixed", 50, 1000, false, false, 1, 7u, t);
    check_case("mixed", 50, 5000, true, false, 2, 8u, t);
    if (!quick) {
        check_case("mixed", 2, kReal, true, false, 7, 9u, t);
        check_case("mixed", 50, kReal, false, false, 3, 10u, t);
        check_case("mixed", 100, 20000, false, false, 5, 12u, t);
        check_case("mixed", 132, 20000, true, false, 6, 13u, t);
    }
    std::printf("%d checks of %d runs failed\n%s\n", t.failures, t.cases, t.failures ? "SOME FAIL" : "ALL OK");
    return t.failures ? 1 : 0;
}
