// The GPU sampler against its CPU specification (backend/cpu/cpu_sampling.cpp) on the same
// inputs: tokens, verdicts, raw logprobs and the adjusted logits of mixed rows (grammar bitmasks
// included, from page-locked and pageable memory) at the real vocabulary; its draws against brute-force distributions (chi-square, tabulated critical
// values); and the engine on CudaOps, where MTP k = 1..3 must not change greedy or seeded
// sampled output (reference precision, so rounding differences between batch shapes stay far
// below any gap that decides a token).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/cuda_cache.h"
#include "engine/engine.h"
#include "gpu_test_util.h"

using namespace qs;

namespace {

std::vector<double> softmax(const std::vector<float>& l, double T) {
    double mx = -INFINITY;
    for (float x : l) mx = std::max(mx, double(x) / T);
    std::vector<double> p(l.size());
    double s = 0.0;
    for (size_t i = 0; i < l.size(); ++i) s += (p[i] = std::exp(double(l[i]) / T - mx));
    for (double& x : p) x /= s;
    return p;
}

// Upper 0.001 critical values of chi-square (standard tables), 1..10 degrees of freedom.
double chi_square_critical_001(int dof) {
    static const double k[] = {0, 10.828, 13.816, 16.266, 18.467, 20.515, 22.458, 24.322, 26.124, 27.877, 29.588};
    return k[std::clamp(dof, 0, 10)];
}

CacheGeometry token_geometry(int64_t num_blocks) {
    CacheGeometry g;
    g.block_size = 16;
    g.num_blocks = num_blocks;
    g.num_state_slots = 1;
    g.kv_dtype = KvCacheDtype::kBF16;
    return g;
}

}  // namespace

TEST(CudaSampling, MatchesTheCpuSpecification) {
    QS_REQUIRE_GPU();
    cuda::CudaOps ops;
    for (int64_t V : {int64_t(1000), int64_t(248320)}) {
        std::mt19937 rng{uint32_t(V)};
        const int R = 48;
        const CacheGeometry g = token_geometry(256);
        ModelCache cpu_cache(g);
        std::unique_ptr<ModelCache> gpu_cache = ops.make_cache(g);
        // Token pages: random ids (some repeated, so counts > 1 occur).
        std::vector<int32_t> pages(size_t(g.num_blocks * g.block_size));
        for (int32_t& t : pages) t = int32_t(rng() % 64) * int32_t(V / 64);
        std::copy(pages.begin(), pages.end(), cpu_cache.token_pages());
        auto* st = ops.storage(gpu_cache.get());
        ASSERT_NE(st, nullptr);
        QS_CUDA_CHECK(cudaMemcpy(st->token_pages(), pages.data(), pages.size() * 4, cudaMemcpyHostToDevice));

        std::vector<float> logits = gpu_test::random_floats(size_t(R) * size_t(V), rng, 3.0f);
        SamplingBatch b;
        // The bitmask's two upload routes: from the backend's page-locked memory (the engine's)
        // at the real vocabulary, from pageable memory at the small one.
        if (V == 248320) b.bitmask = decltype(b.bitmask)(UploadAllocator<uint32_t>(ops.upload_memory()));
        for (int i = 0; i < R; ++i) {
            SampleRow r;
            r.logits_row = i;
            const int kind = i % 8;
            r.temperature = kind == 0 ? 0.0f : 0.5f + 0.1f * float(i % 7);
            r.top_k = kind == 2 ? 40 : kind == 7 ? 3 : 0;
            r.top_p = kind == 3 || kind == 7 ? 0.9f : kind == 6 ? 0.5f : 1.0f;
            r.min_p = kind == 4 ? 0.05f : 0.0f;
            r.seed = 1000 + uint64_t(i);
            r.draw = uint64_t(i * 3);
            r.num_top_logprobs = i % 3 == 0 ? 5 : i % 3 == 1 ? 0 : -1;
            if (i % 5 == 1) r.draft = int32_t(rng() % uint32_t(V));
            if (i % 4 == 1) {  // penalties over a history of 40..200 positions in random pages
                r.repetition_penalty = 1.3f;
                r.presence_penalty = 0.4f;
                r.frequency_penalty = 0.3f;
                r.history_len = 40 + int32_t(rng() % 160);
                r.num_prompt = r.history_len / 2;
                r.table_begin = int32_t(b.block_tables.size());
                for (int p = 0; p < (r.history_len + 15) / 16; ++p) b.block_tables.push_back(int32_t(rng() % 256));
            }
            if (i % 6 == 2) {  // logit_bias and a ban
                r.adjust_begin = int32_t(b.adjust.size());
                b.adjust.push_back({int32_t(rng() % uint32_t(V)), 4.0f});
                b.adjust.push_back({int32_t(rng() % uint32_t(V)), -INFINITY});
                r.adjust_end = int32_t(b.adjust.size());
            }
            if (i % 7 == 3 || i == 9) {  // a grammar bitmask allowing ~1/8 of the vocabulary
                const int64_t W = bitmask_words(V);
                r.bitmask_row = int32_t(b.bitmask.size() / size_t(W));
                b.bitmask.resize(b.bitmask.size() + size_t(W), 0u);
                uint32_t* m = b.bitmask.data() + int64_t(r.bitmask_row) * W;
                for (int64_t w = 0; w < W; ++w) m[w] = uint32_t(rng()) & uint32_t(rng()) & uint32_t(rng());
                if (V % 32) m[W - 1] &= (1u << (V % 32)) - 1;  // nothing beyond the vocabulary
                m[0] |= 1u;  // never empty
            }
            b.rows.push_back(r);
        }
        // Two sibling rows on row 9's (penalised, masked) logits row.
        for (int s = 0; s < 2; ++s) {
            SampleRow sib = b.rows[9];
            sib.adjusts_row = false;
            sib.seed += 77 + uint64_t(s);
            b.rows.push_back(sib);
        }
        std::vector<float> cpu_logits = logits;
        SampleOutput want, got;
        cpu::sample_rows(cpu_logits.data(), V, b, cpu_cache.token_pages(), g.block_size, want);
        float* d = gpu_test::to_device(ops, logits);
        ops.sample(d, V, b, *gpu_cache, got);
        const std::vector<float> gpu_logits = gpu_test::to_host(ops, d, logits.size());
        size_t adjusted_diff = 0;
        for (size_t i = 0; i < logits.size(); ++i) adjusted_diff += gpu_logits[i] != cpu_logits[i];
        EXPECT_EQ(adjusted_diff, 0u) << "V " << V << ": adjusted logits differ from the CPU's";
        int token_diff = 0;
        for (size_t i = 0; i < b.rows.size(); ++i) {
            const SampleRow& r = b.rows[i];
            token_diff += got.token[i] != want.token[i];
            EXPECT_EQ(got.token[i], want.token[i]) << "V " << V << " row " << i;
            EXPECT_EQ(got.accepted[i], want.accepted[i]) << "V " << V << " row " << i;
            if (r.num_top_logprobs < 0) continue;
            EXPECT_NEAR(got.logprob[i], want.logprob[i], 2e-5) << "V " << V << " row " << i;
            for (int j = 0; j < r.num_top_logprobs; ++j) {
                const size_t at = i * kMaxTopLogprobs + size_t(j);
                EXPECT_EQ(got.top_ids[at], want.top_ids[at]) << "V " << V << " row " << i << " rank " << j;
                EXPECT_NEAR(got.top_logprobs[at], want.top_logprobs[at], 2e-5) << "V " << V << " row " << i;
            }
        }
        std::printf("[sampling] V %lld: %zu rows, %d tokens differ from the CPU specification\n", (long long)V,
                    b.rows.size(), token_diff);
        ops.free_all();
    }
}

// One to three rows, where the per-row passes spread over vocabulary chunks (sampling_chunked.cu:
// radix rounds whose last block per row merges the chunks' histograms, ties gathered chunk by
// chunk; CudaOptions::sampling_chunked_select 1): every chunk count must give the CPU's tokens,
// verdicts and top ids, as the one-block path (CudaOptions::sampling_chunks 1) does. Logits on a grid of 0.5 put the top-k, top-p and
// top-N boundaries inside ties (thousands of equal values), the case the chunk order decides.
TEST(CudaSampling, FewRowsOverVocabularyChunksMatchTheCpuSpecification) {
    QS_REQUIRE_GPU();
    const int64_t V = 248320;
    const CacheGeometry g = token_geometry(16);
    for (int32_t chunks : {1, 0, 7, 512}) {
        cuda::CudaOptions o;
        o.sampling_chunks = chunks;
        o.sampling_chunked_select = 1;
        cuda::CudaOps ops(o);
        std::unique_ptr<ModelCache> gpu_cache = ops.make_cache(g);
        ModelCache cpu_cache(g);
        int mismatches = 0, rows_checked = 0;
        for (int R : {1, 3}) {
            for (bool ties : {false, true}) {
                std::mt19937 rng{uint32_t(R * 10 + ties)};
                std::normal_distribution<float> nd(0.0f, 2.5f);
                std::vector<float> logits(size_t(R) * size_t(V));
                for (float& x : logits) x = ties ? std::round(nd(rng) * 2.0f) / 2.0f : nd(rng);
                for (int r = 0; r < R; ++r)
                    for (int k = 0; k < 5; ++k) logits[size_t(r) * size_t(V) + rng() % uint64_t(V)] += 9.0f + (ties ? 0 : k);
                // Every mode in turn as the batch's first row.
                for (int mode = 0; mode < 6; ++mode) {
                    SamplingBatch b;
                    for (int i = 0; i < R; ++i) {
                        const int kind = (mode + i) % 6;
                        SampleRow r;
                        r.logits_row = i;
                        r.temperature = kind == 0 ? 0.0f : 0.7f + 0.1f * float(i);
                        r.top_k = kind == 1 ? 50 : kind == 4 ? 7 : 0;
                        r.top_p = kind == 2 ? 0.95f : kind == 4 ? 0.8f : kind == 5 ? 0.5f : 1.0f;
                        r.min_p = kind == 3 ? 0.05f : 0.0f;
                        r.seed = 7 + uint64_t(mode) * 13 + uint64_t(i);
                        r.draw = uint64_t(mode);
                        r.num_top_logprobs = kind == 3 ? 20 : kind == 5 ? 0 : 5;
                        r.draft = int32_t(rng() % uint32_t(V));
                        b.rows.push_back(r);
                    }
                    std::vector<float> cpu_logits = logits;
                    SampleOutput want, got;
                    cpu::sample_rows(cpu_logits.data(), V, b, cpu_cache.token_pages(), g.block_size, want);
                    float* d = gpu_test::to_device(ops, logits);
                    ops.sample(d, V, b, *gpu_cache, got);
                    for (int i = 0; i < R; ++i) {
                        const SampleRow& r = b.rows[size_t(i)];
                        ++rows_checked;
                        mismatches += got.token[size_t(i)] != want.token[size_t(i)];
                        EXPECT_EQ(got.token[size_t(i)], want.token[size_t(i)])
                            << "chunks " << chunks << " R " << R << " ties " << ties << " row " << i;
                        EXPECT_EQ(got.accepted[size_t(i)], want.accepted[size_t(i)]);
                        EXPECT_NEAR(got.logprob[size_t(i)], want.logprob[size_t(i)], 2e-5);
                        for (int j = 0; j < r.num_top_logprobs; ++j) {
                            const size_t at = size_t(i) * kMaxTopLogprobs + size_t(j);
                            EXPECT_EQ(got.top_ids[at], want.top_ids[at])
                                << "chunks " << chunks << " R " << R << " ties " << ties << " row " << i << " rank " << j;
                            EXPECT_NEAR(got.top_logprobs[at], want.top_logprobs[at], 2e-5);
                        }
                    }
                    ops.free_all();
                }
            }
        }
        std::printf("[sampling] sampling_chunks %d: %d of %d rows' tokens differ from the CPU specification\n", chunks,
                    mismatches, rows_checked);
    }
}

// CudaOptions::sampling_chunks: 0 (the automatic choice) by default, out of [0, 512] an internal
// error naming it; sampling_chunked_select: 1 by default (since the H100 run), 0 or 1
// (threadsafe death tests, as CudaOptionsChoice's).
TEST(CudaSampling, ChunkOptionsValidated) {
    QS_REQUIRE_GPU();
    EXPECT_EQ(cuda::CudaOptions{}.sampling_chunks, 0);
    EXPECT_EQ(cuda::CudaOptions{}.sampling_chunked_select, 1);
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    for (int bad : {-1, 513}) {
        cuda::CudaOptions o;
        o.sampling_chunks = bad;
        EXPECT_DEATH(cuda::CudaOps ops(o), "sampling_chunks must be in \\[0, 512\\]");
    }
    cuda::CudaOptions o;
    o.sampling_chunked_select = 2;
    EXPECT_DEATH(cuda::CudaOps ops(o), "sampling_chunked_select must be 0 or 1");
}

TEST(CudaSampling, DrawsFollowTheDistribution) {
    QS_REQUIRE_GPU();
    cuda::CudaOps ops;
    const CacheGeometry g = token_geometry(4);
    std::unique_ptr<ModelCache> cache = ops.make_cache(g);
    const std::vector<float> l = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f, -3.0f, 1.5f, 0.7f};
    struct Case {
        float temperature, top_p;
        int top_k;
        float min_p;
    };
    const int N = 40000;
    for (const Case& c : {Case{1.0f, 1.0f, 0, 0.0f}, Case{0.7f, 0.95f, 0, 0.0f}, Case{1.3f, 0.8f, 0, 0.0f},
                          Case{1.0f, 1.0f, 4, 0.0f}, Case{1.0f, 1.0f, 0, 0.2f}}) {
        // The kept set by brute force (no ties in these logits).
        std::vector<double> p = softmax(l, c.temperature);
        std::vector<int> order(l.size());
        std::iota(order.begin(), order.end(), 0);
        std::sort(order.begin(), order.end(), [&](int a, int b) { return p[size_t(a)] > p[size_t(b)]; });
        std::set<int> keep;
        double cum = 0.0;
        for (size_t i = 0; i < order.size(); ++i) {
            if (c.top_k > 0 && int(i) >= c.top_k) break;
            keep.insert(order[i]);
            cum += p[size_t(order[i])];
            if (cum >= c.top_p) break;
        }
        for (int t = 0; t < int(l.size()); ++t)
            if (p[size_t(t)] < c.min_p * p[size_t(order[0])]) keep.erase(t);
        double kept_mass = 0.0;
        for (int t : keep) kept_mass += p[size_t(t)];
        // N rows on one logits row, each a different draw of one stream; every 4th judges a draft.
        SamplingBatch b;
        for (int i = 0; i < N; ++i) {
            SampleRow r;
            r.temperature = c.temperature;
            r.top_p = c.top_p;
            r.top_k = c.top_k;
            r.min_p = c.min_p;
            r.seed = 42;
            r.draw = uint64_t(i);
            r.adjusts_row = false;
            r.draft = i % 4 == 0 ? order[0] : -1;
            b.rows.push_back(r);
        }
        float* d = gpu_test::to_device(ops, l);
        SampleOutput out;
        ops.sample(d, int64_t(l.size()), b, *cache, out);
        std::vector<double> count(l.size(), 0.0);
        int outside = 0, judged = 0, accepted = 0;
        for (int i = 0; i < N; ++i) {
            count[size_t(out.token[size_t(i)])] += 1;
            outside += !keep.count(out.token[size_t(i)]);
            if (i % 4 == 0) {
                ++judged;
                accepted += out.accepted[size_t(i)];
                EXPECT_EQ(out.accepted[size_t(i)] != 0, out.token[size_t(i)] == order[0]);
            }
        }
        double chi = 0.0;
        for (int t : keep) {
            const double e = p[size_t(t)] / kept_mass * N;
            chi += (count[size_t(t)] - e) * (count[size_t(t)] - e) / e;
        }
        const int dof = int(keep.size()) - 1;
        EXPECT_EQ(outside, 0);
        if (dof > 0) {
            EXPECT_LT(chi, chi_square_critical_001(dof)) << "T " << c.temperature << " top_p " << c.top_p;
        }
        const double pa = p[size_t(order[0])] / kept_mass;
        EXPECT_NEAR(double(accepted) / judged, pa, 5 * std::sqrt(pa * (1 - pa) / judged) + 1e-9);
        std::printf("[sampling] T %.1f top_p %.2f top_k %d min_p %.1f: chi-square %.2f (dof %d, 0.001 critical %.2f); "
                    "acceptance %.4f (p %.4f)\n",
                    c.temperature, c.top_p, c.top_k, c.min_p, chi, dof, chi_square_critical_001(dof),
                    double(accepted) / judged, pa);
        ops.free_all();
    }
}

TEST(CudaSampling, EngineMtpDoesNotChangeGreedyOrSeededOutput) {
    QS_REQUIRE_GPU();
    auto weights = load_model_dir(gpu_test::source_path("models/qwen36-tiny"));
    ASSERT_TRUE(weights.is_ok()) << weights.status().message();
    cuda::CudaOptions o;
    o.reference_precision = true;
    cuda::CudaOps ops(o);
    ops.prepare_weights(weight_set(*weights));
    std::mt19937 rng(3);
    std::vector<GenerationRequest> reqs;
    for (int i = 0; i < 16; ++i) {
        GenerationRequest r;
        r.id = "r" + std::to_string(i);
        const int len = 4 + int(rng() % 60);
        for (int t = 0; t < len; ++t) r.prompt_ids.push_back(int32_t(rng() % 4000));
        r.params.temperature = i < 6 ? 0.0 : 0.8;
        r.params.top_p = i % 3 == 0 ? 0.9 : 1.0;
        r.params.repetition_penalty = i % 4 == 1 ? 1.2 : 1.0;
        r.params.frequency_penalty = i % 5 == 2 ? 0.4 : 0.0;
        r.params.logprobs = i % 2 ? 2 : -1;
        r.params.n = i == 9 ? 3 : 1;
        r.params.seed = uint64_t(i);
        r.params.max_tokens = 24;
        r.params.ignore_eos = true;
        reqs.push_back(r);
    }
    // (k, --mtp-spare-slots): the commit of accepted drafts, and spare-slot mode with a spare for
    // every sequence (k = 1: no commit at all) and with fewer (k = 2: swaps, commits, and both).
    const std::vector<std::pair<int, int>> variants = {{0, 0}, {1, 0}, {2, 0}, {3, 0}, {1, 16}, {2, 4}};
    std::map<std::pair<int, int>, std::map<std::string, std::vector<int32_t>>> by_k;
    for (const auto& [spec, spares] : variants) {
        EngineConfig cfg;
        cfg.num_speculative_tokens = spec;
        cfg.mtp_spare_slots = spares;
        cfg.max_num_seqs = 16;
        cfg.cache_memory_mb = 64;
        cfg.kv_cache_dtype = KvCacheDtype::kF32;
        auto engine = Engine::create(*weights, ops, cfg, nullptr);
        ASSERT_TRUE(engine.is_ok()) << engine.status().message();
        auto& got = by_k[{spec, spares}];
        for (const auto& r : reqs)
            ASSERT_TRUE((*engine)->submit(r, [&got, id = r.id](RequestOutput&& out) {
                auto& v = got[id + "/" + std::to_string(out.index)];
                v.insert(v.end(), out.token_ids.begin(), out.token_ids.end());
            }).is_ok());
        (*engine)->run_until_idle();
        EXPECT_EQ((*engine)->num_blocks_in_use(), 0);
        if (spec > 0) {
            const auto& acc = (*engine)->mtp_accepted_by_position();
            const auto& prop = (*engine)->mtp_proposed_by_position();
            const EngineStats st = (*engine)->stats();
            std::printf("[mtp k=%d spares %d] accepted %lld of %lld first drafts; %lld spare-slot swaps\n", spec, spares,
                        (long long)acc[0], (long long)prop[0], (long long)st.mtp_spare_slot_swaps);
            if (spares > 0) {
                EXPECT_GT(st.mtp_spare_slot_swaps, 0) << "k=" << spec << " spares=" << spares;
            }
        }
        EXPECT_EQ((*engine)->num_slots_in_use(), 0);
    }
    const auto& off = by_k[{0, 0}];
    ASSERT_EQ(off.size(), 18u);
    for (const auto& [spec, spares] : variants)
        for (const auto& [id, tokens] : off) {
            EXPECT_EQ(tokens.size(), 24u) << id;
            EXPECT_EQ((by_k[{spec, spares}][id]), tokens) << id << " with MTP k=" << spec << " spares=" << spares;
        }
}
