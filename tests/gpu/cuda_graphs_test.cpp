// CUDA graphs of decode steps (backend/cuda/forward_graphs.h) on the trained tiny model. Three
// backends decode the same sequences with the same tokens: graphs on; the same padding run
// eagerly; no graphs at all. A replayed graph must give bit-identical logits to the eager padded
// run (a stale pointer, a wrong arena state after replay or an upload the graph does not see
// would change them), and the padded runs must agree with the unpadded one to the GPU's
// precision (the dummy rows must not touch the real sequences' caches).
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <random>

#include "gpu_test_util.h"
#include "model/qwen36.h"

using namespace qs;

namespace {

constexpr int64_t kPagesPerSeq = 8, kBlockSize = 16;

struct Decoder {
    cuda::CudaOps ops;
    Qwen36Model model;
    std::unique_ptr<ModelCache> cache;

    Decoder(ModelWeights& w, const cuda::CudaOptions& o, int64_t num_seqs) : ops(o), model(w, ops) {
        ops.prepare_weights(weight_set(w));
        cache = ops.make_cache(CacheGeometry::for_model(w.config, num_seqs * kPagesPerSeq, kBlockSize, num_seqs,
                                                        /*with_mtp=*/false, KvCacheDtype::kBF16));
    }
};

cuda::CudaOptions options(int64_t graph_max_batch, bool pad_without_graphs) {
    cuda::CudaOptions o;
    o.poison = true;  // unwritten activations become NaN and fail the comparisons
    o.graph_max_batch = graph_max_batch;
    o.pad_without_graphs = pad_without_graphs;
    return o;
}

}  // namespace

TEST(CudaGraphs, ReplayEqualsEagerPaddingAndUnpaddedRun) {
    QS_REQUIRE_GPU();
    auto weights = load_model_dir(gpu_test::source_path("models/qwen36-tiny"));
    ASSERT_TRUE(weights.is_ok()) << weights.status().message();
    const int64_t V = weights->config.vocab_size;
    const std::vector<int> prompt_lens = {5, 17, 33, 1, 60, 9};
    const int64_t S = int64_t(prompt_lens.size());
    Decoder graphs(*weights, options(512, false), S), padded(*weights, options(512, true), S),
        plain(*weights, options(0, false), S);
    Decoder* all[] = {&graphs, &padded, &plain};

    std::vector<std::vector<int32_t>> tables(static_cast<size_t>(S));
    for (int64_t s = 0; s < S; ++s) {
        tables[size_t(s)].resize(kPagesPerSeq);
        // Interleaved pages, so a wrong page id reads another sequence's keys.
        for (int64_t p = 0; p < kPagesPerSeq; ++p) tables[size_t(s)][size_t(p)] = int32_t(p * S + s);
    }
    std::vector<int32_t> length(size_t(S), 0);
    std::vector<int32_t> next(static_cast<size_t>(S));
    std::mt19937 rng(11);

    // One forward on every backend over the sequences `active` (each feeds `tokens[s]`);
    // returns each backend's logits [active, V] and checks them against each other.
    auto step = [&](const std::vector<int>& active, const std::vector<std::vector<int32_t>>& tokens,
                    const std::string& what) {
        ForwardBatch b;
        for (int s : active) {
            SeqSpan span;
            span.row_begin = int32_t(b.token_ids.size());
            span.num_tokens = int32_t(tokens[size_t(s)].size());
            span.start_pos = length[size_t(s)];
            span.state_slot = s;
            span.block_table = tables[size_t(s)];
            b.token_ids.insert(b.token_ids.end(), tokens[size_t(s)].begin(), tokens[size_t(s)].end());
            b.logits_rows.push_back(span.row_begin + span.num_tokens - 1);
            b.seqs.push_back(span);
        }
        std::vector<std::vector<float>> logits;
        for (Decoder* d : all) logits.push_back(d->model.forward(b, *d->cache).logits);
        ASSERT_EQ(logits[0].size(), size_t(active.size()) * size_t(V)) << what;
        EXPECT_TRUE(logits[0] == logits[1]) << what << ": graph replay differs from the eager padded run";
        const double err = gpu_test::normalised_error(logits[0], logits[2]);
        EXPECT_LT(err, 1e-2) << what << ": padded run against the unpadded one";
        for (size_t i = 0; i < active.size(); ++i) {
            const int s = active[i];
            length[size_t(s)] += int32_t(tokens[size_t(s)].size());
            auto row = logits[0].begin() + int64_t(i) * V;
            next[size_t(s)] = int32_t(std::max_element(row, row + V) - row);
        }
    };

    std::vector<int> everyone(static_cast<size_t>(S));
    std::iota(everyone.begin(), everyone.end(), 0);
    std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(S));
    for (int64_t s = 0; s < S; ++s)
        for (int i = 0; i < prompt_lens[size_t(s)]; ++i) prompts[size_t(s)].push_back(int32_t(rng() % uint32_t(V)));
    step(everyone, prompts, "prefill");  // several rows per sequence: never a graph

    // Decode steps over changing sets of sequences: 6 → padded to 8 (captured, then replayed
    // with longer contexts), 3 (its own size), 5 → 8 again in another order, 1, then 6.
    const std::vector<std::vector<int>> schedule = {everyone, everyone, everyone, {0, 2, 4}, {1, 3, 5, 0, 2},
                                                    {1, 3, 5, 0, 2}, {4}, everyone};
    for (size_t i = 0; i < schedule.size(); ++i) {
        std::vector<std::vector<int32_t>> tokens(static_cast<size_t>(S));
        for (int s : schedule[i]) tokens[size_t(s)] = {next[size_t(s)]};
        step(schedule[i], tokens, "decode step " + std::to_string(i));
    }
    // Sizes 8, 3 and 1 were captured once each; the other five steps replayed.
    EXPECT_EQ(graphs.ops.graphs().captures(), 3);
    EXPECT_EQ(graphs.ops.graphs().replays(), 5);
    EXPECT_EQ(padded.ops.graphs().captures(), 0);
    EXPECT_EQ(plain.ops.graphs().captures(), 0);
}

// MTP verify steps as graphs: every sequence feeds 1 + k rows with its GDN state deferred (the
// verify writes the state after row 0), then the GDN commit runs a random number of accepted
// drafts of some of them (rows 1..a at the verify rows; the rest unused). The verify logits of
// the graph backend equal the eager padded run bit for bit, and after the commits the next
// decode step agrees too: a commit that read the wrong stash rows or slot would change them.
TEST(CudaGraphs, VerifyAndCommitReplayEqualsEagerPadding) {
    QS_REQUIRE_GPU();
    auto weights = load_model_dir(gpu_test::source_path("models/qwen36-tiny"));
    ASSERT_TRUE(weights.is_ok()) << weights.status().message();
    const int64_t V = weights->config.vocab_size;
    const int64_t S = 5;
    Decoder graphs(*weights, options(512, false), S), padded(*weights, options(512, true), S),
        plain(*weights, options(0, false), S);
    Decoder* all[] = {&graphs, &padded, &plain};
    std::vector<std::vector<int32_t>> tables(static_cast<size_t>(S));
    for (int64_t s = 0; s < S; ++s)
        for (int64_t p = 0; p < kPagesPerSeq; ++p) tables[size_t(s)].push_back(int32_t(p * S + s));
    std::vector<int32_t> length(size_t(S), 0);
    std::mt19937 rng(23);
    auto span_of = [&](int64_t s, int32_t row_begin, int32_t n) {
        SeqSpan span;
        span.row_begin = row_begin;
        span.num_tokens = n;
        span.start_pos = length[size_t(s)];
        span.state_slot = int32_t(s);
        span.block_table = tables[size_t(s)];
        return span;
    };
    // Prompts of different lengths: an eager forward.
    {
        ForwardBatch b;
        for (int64_t s = 0; s < S; ++s) {
            const int32_t n = int32_t(7 + 5 * s);
            b.seqs.push_back(span_of(s, int32_t(b.token_ids.size()), n));
            for (int32_t i = 0; i < n; ++i) b.token_ids.push_back(int32_t(rng() % uint32_t(V)));
        }
        for (Decoder* d : all) d->model.forward(b, *d->cache);
        for (int64_t s = 0; s < S; ++s) length[size_t(s)] += 7 + 5 * int32_t(s);
    }
    for (int step = 0; step < 6; ++step) {
        // 1 + k rows: 4, 3, 2, 4, 3, 2 (the stash is sized by the first; a stash that grows
        // drops every graph, which would make the counts below other than 7 and 6).
        const int32_t q = 4 - step % 3;
        ForwardBatch verify;
        for (int64_t s = 0; s < S; ++s) {
            SeqSpan span = span_of(s, int32_t(s) * q, q);
            span.defer_state = true;
            verify.seqs.push_back(span);
            for (int32_t r = 0; r < q; ++r) {
                verify.token_ids.push_back(int32_t(rng() % uint32_t(V)));
                verify.logits_rows.push_back(span.row_begin + r);
            }
        }
        std::vector<std::vector<float>> logits;
        for (Decoder* d : all) logits.push_back(d->model.forward(verify, *d->cache).logits);
        const std::string what = "verify step " + std::to_string(step) + " (q=" + std::to_string(q) + ")";
        EXPECT_TRUE(logits[0] == logits[1]) << what << ": graph replay differs from the eager padded run";
        EXPECT_LT(gpu_test::normalised_error(logits[0], logits[2]), 1e-2) << what;
        // Commit a random number of accepted drafts of each span (rows 1..a, in the verify
        // layout; the verify wrote row 0): none for some sequences (no span), at least one for
        // sequence 0 (so every step commits and its graph is captured).
        ForwardBatch commit;
        commit.token_ids.assign(verify.token_ids.size(), 0);
        std::vector<int32_t> deferred_rows;
        std::vector<int32_t> accepted(static_cast<size_t>(S));
        for (int64_t s = 0; s < S; ++s) {
            accepted[size_t(s)] = s == 0 ? int32_t(1 + rng() % uint32_t(q - 1)) : int32_t(rng() % uint32_t(q));
            if (accepted[size_t(s)] == 0) continue;
            SeqSpan span = span_of(s, int32_t(s) * q + 1, accepted[size_t(s)]);
            span.start_pos += 1;
            commit.seqs.push_back(span);
            deferred_rows.push_back(int32_t(s) * q);
        }
        for (Decoder* d : all) d->model.commit_deferred_state(commit, deferred_rows, *d->cache);
        for (int64_t s = 0; s < S; ++s) length[size_t(s)] += 1 + accepted[size_t(s)];
    }
    // A decode step reads every committed state and window.
    ForwardBatch b;
    for (int64_t s = 0; s < S; ++s) {
        b.seqs.push_back(span_of(s, int32_t(s), 1));
        b.token_ids.push_back(int32_t(rng() % uint32_t(V)));
        b.logits_rows.push_back(int32_t(s));
    }
    std::vector<std::vector<float>> logits;
    for (Decoder* d : all) logits.push_back(d->model.forward(b, *d->cache).logits);
    ASSERT_EQ(logits[0].size(), size_t(S * V));
    EXPECT_TRUE(logits[0] == logits[1]) << "decode after the commits: graph replay differs from the eager padded run";
    EXPECT_LT(gpu_test::normalised_error(logits[0], logits[2]), 1e-2) << "decode after the commits";
    // Verify shapes q = 2, 3, 4 and their commits were captured once each and replayed once,
    // and the decode step's shape once.
    EXPECT_EQ(graphs.ops.graphs().captures(), 7);
    EXPECT_EQ(graphs.ops.graphs().replays(), 6);
    EXPECT_EQ(padded.ops.graphs().captures(), 0);
}

TEST(CudaGraphs, CapturedSizes) {
    cuda::ForwardGraphs g(512);
    EXPECT_EQ(g.padded_size(1), 1);
    EXPECT_EQ(g.padded_size(5), 8);
    EXPECT_EQ(g.padded_size(17), 24);
    EXPECT_EQ(g.padded_size(257), 320);
    EXPECT_EQ(g.padded_size(512), 512);
    EXPECT_EQ(g.padded_size(513), 0);
    for (int64_t n = 16; n <= 512; ++n) EXPECT_LT(3 * (g.padded_size(n) - n), g.padded_size(n)) << n;
    EXPECT_EQ(cuda::ForwardGraphs(0).padded_size(1), 0);
    EXPECT_EQ(cuda::ForwardGraphs(100).padded_size(97), 100);
}
