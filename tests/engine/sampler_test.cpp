// The sampler and the MTP acceptance rule against expectations derived in the test itself (by
// hand, or by brute force over a small vocabulary in double precision): greedy, temperature,
// top-k, top-p (boundaries and ties), min-p, the three penalties, seeded reproducibility,
// empirical frequencies, raw logprobs, parameter validation, and verify_draft (greedy: accept iff
// argmax; sampling: the emitted distribution equals the target's). Single-threaded.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "engine/sampler.h"
#include "engine/spec_decode.h"

using namespace qs;

namespace {

constexpr float kNegInf = -INFINITY;

// softmax(logits / T) in double.
std::vector<double> softmax(const std::vector<float>& logits, double T = 1.0) {
    double mx = -INFINITY;
    for (float l : logits) mx = std::max(mx, double(l) / T);
    std::vector<double> p(logits.size());
    double sum = 0.0;
    for (size_t i = 0; i < logits.size(); ++i) sum += (p[i] = std::exp(double(logits[i]) / T - mx));
    for (double& x : p) x /= sum;
    return p;
}

// p restricted to `keep` and renormalised.
std::vector<double> restrict_to(const std::vector<double>& p, const std::set<int>& keep) {
    std::vector<double> q(p.size(), 0.0);
    double sum = 0.0;
    for (int i : keep) sum += p[size_t(i)];
    for (int i : keep) q[size_t(i)] = p[size_t(i)] / sum;
    return q;
}

std::set<int> nonzero(const std::vector<float>& p) {
    std::set<int> s;
    for (size_t i = 0; i < p.size(); ++i)
        if (p[i] > 0.0f) s.insert(int(i));
    return s;
}

void expect_near_dist(const std::vector<float>& got, const std::vector<double>& want, double tol) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "token " << i;
}

std::vector<float> random_logits(std::mt19937& rng, int vocab, float scale = 3.0f) {
    std::normal_distribution<float> nd(0.0f, scale);
    std::vector<float> l(static_cast<size_t>(vocab));
    for (float& x : l) x = nd(rng);
    return l;
}

SamplingParams sampling(double temperature) {
    SamplingParams p;
    p.temperature = temperature;
    return p;
}

// Empirical frequencies of `draws` tokens.
std::vector<double> frequencies(const std::vector<int32_t>& draws, size_t vocab) {
    std::vector<double> f(vocab, 0.0);
    for (int32_t t : draws) f[size_t(t)] += 1.0;
    for (double& x : f) x /= double(draws.size());
    return f;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
    double m = 0.0;
    for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
    return m;
}

}  // namespace

TEST(Sampler, TemperatureZeroIsArgmax) {
    std::mt19937 rng(1);
    SamplingParams p = sampling(0.0);
    for (int trial = 0; trial < 50; ++trial) {
        std::vector<float> l = random_logits(rng, 997);
        int best = 0;
        for (int i = 1; i < 997; ++i)
            if (l[size_t(i)] > l[size_t(best)]) best = i;
        SamplerState s(p, {}, 0);
        EXPECT_EQ(pick_token(l.data(), 997, p, s), best);
        EXPECT_EQ(sample_token(l.data(), 997, p, s).token, best);
    }
}

TEST(Sampler, DistributionIsSoftmaxOverTemperature) {
    std::mt19937 rng(2);
    const std::vector<float> l = random_logits(rng, 40);
    for (double T : {0.25, 0.7, 1.0, 2.0, 5.0})
        expect_near_dist(sampling_distribution(l.data(), 40, sampling(T)), softmax(l, T), 1e-6);
    // Hand-derived: logits {ln 3, 0} at T = 1 give {3/4, 1/4}; at T = 0.5 (squared) {9/10, 1/10}.
    const std::vector<float> two = {float(std::log(3.0)), 0.0f};
    expect_near_dist(sampling_distribution(two.data(), 2, sampling(1.0)), {0.75, 0.25}, 1e-6);
    expect_near_dist(sampling_distribution(two.data(), 2, sampling(0.5)), {0.9, 0.1}, 1e-6);
}

TEST(Sampler, TopKKeepsExactlyTheKLargest) {
    std::mt19937 rng(3);
    for (int k : {1, 2, 7, 49, 50, 80}) {
        const std::vector<float> l = random_logits(rng, 50);
        SamplingParams p = sampling(0.8);
        p.top_k = k;
        std::vector<int> order(50);
        std::iota(order.begin(), order.end(), 0);
        std::sort(order.begin(), order.end(), [&](int a, int b) { return l[size_t(a)] > l[size_t(b)]; });
        const std::set<int> want(order.begin(), order.begin() + std::min(k, 50));
        const std::vector<float> got = sampling_distribution(l.data(), 50, p);
        EXPECT_EQ(nonzero(got), want) << "k=" << k;
        expect_near_dist(got, restrict_to(softmax(l, 0.8), want), 1e-6);
    }
}

TEST(Sampler, TopKTiesKeepLowerIds) {
    const std::vector<float> l = {1.0f, 2.0f, 2.0f, 2.0f, 0.0f};
    SamplingParams p = sampling(1.0);
    p.top_k = 2;
    EXPECT_EQ(nonzero(sampling_distribution(l.data(), 5, p)), (std::set<int>{1, 2}));
}

TEST(Sampler, TopPKeepsSmallestPrefixReachingP) {
    std::mt19937 rng(4);
    int checked = 0;
    for (int trial = 0; trial < 200; ++trial) {
        const std::vector<float> l = random_logits(rng, 30, 1.5f);
        const double top_p = std::uniform_real_distribution<double>(0.05, 0.99)(rng);
        const std::vector<double> probs = softmax(l);
        std::vector<int> order(30);
        std::iota(order.begin(), order.end(), 0);
        std::sort(order.begin(), order.end(), [&](int a, int b) { return probs[size_t(a)] > probs[size_t(b)]; });
        // Brute force: the shortest prefix whose mass reaches top_p; skip cases within rounding
        // distance of a boundary.
        std::set<int> want;
        double cum = 0.0;
        bool near_boundary = false;
        for (int t : order) {
            want.insert(t);
            cum += probs[size_t(t)];
            if (std::abs(cum - top_p) < 1e-5) near_boundary = true;
            if (cum >= top_p) break;
        }
        if (near_boundary) continue;
        SamplingParams p = sampling(1.0);
        p.top_p = top_p;
        const std::vector<float> got = sampling_distribution(l.data(), 30, p);
        EXPECT_EQ(nonzero(got), want) << "top_p=" << top_p;
        expect_near_dist(got, restrict_to(probs, want), 1e-6);
        ++checked;
    }
    EXPECT_GT(checked, 150);
}

TEST(Sampler, TopPExactHitAndTies) {
    // Four equal tokens (0.25 each, exact in binary) and four impossible ones.
    const std::vector<float> l = {0, kNegInf, 0, kNegInf, 0, kNegInf, 0, kNegInf};
    SamplingParams p = sampling(1.0);
    // Mass exactly 0.5 after two tokens: those two (ties broken by lower id), not a third.
    p.top_p = 0.5;
    std::vector<float> got = sampling_distribution(l.data(), 8, p);
    EXPECT_EQ(nonzero(got), (std::set<int>{0, 2}));
    expect_near_dist(got, {0.5, 0, 0.5, 0, 0, 0, 0, 0}, 1e-7);
    // Just above the boundary needs a third token.
    p.top_p = 0.5000001;
    EXPECT_EQ(nonzero(sampling_distribution(l.data(), 8, p)), (std::set<int>{0, 2, 4}));
    // Exactly 0.25: one token; tiny p still keeps one.
    p.top_p = 0.25;
    EXPECT_EQ(nonzero(sampling_distribution(l.data(), 8, p)), (std::set<int>{0}));
    p.top_p = 1e-9;
    EXPECT_EQ(nonzero(sampling_distribution(l.data(), 8, p)), (std::set<int>{0}));
    // top_p 1 keeps every possible token.
    p.top_p = 1.0;
    EXPECT_EQ(nonzero(sampling_distribution(l.data(), 8, p)), (std::set<int>{0, 2, 4, 6}));
}

TEST(Sampler, MinPDropsTokensBelowFractionOfMax) {
    // Probabilities proportional to 8 : 4 : 2 : 1 (logits are their logs).
    const std::vector<float> l = {float(std::log(8.0)), float(std::log(4.0)), float(std::log(2.0)), 0.0f};
    const std::vector<double> probs = softmax(l);  // 8/15, 4/15, 2/15, 1/15
    struct Case {
        double min_p;
        std::set<int> keep;
    };
    // Threshold = min_p * 8/15: tokens with weight below 8 * min_p go.
    for (const Case& c : {Case{0.0, {0, 1, 2, 3}}, Case{0.1, {0, 1, 2, 3}}, Case{0.2, {0, 1, 2}}, Case{0.3, {0, 1}},
                          Case{0.6, {0}}, Case{1.0, {0}}}) {
        SamplingParams p = sampling(1.0);
        p.min_p = c.min_p;
        const std::vector<float> got = sampling_distribution(l.data(), 4, p);
        EXPECT_EQ(nonzero(got), c.keep) << "min_p=" << c.min_p;
        expect_near_dist(got, restrict_to(probs, c.keep), 1e-6);
    }
}

TEST(Sampler, RepetitionPenaltyOncePerSeenToken) {
    SamplingParams p = sampling(1.0);
    p.repetition_penalty = 2.0;
    // Token 1 twice in the prompt, token 3 in prompt and output, token 4 twice in the output.
    SamplerState s(p, {1, 1, 3}, 0);
    s.record_output(3);
    s.record_output(4);
    s.record_output(4);
    std::vector<float> l = {1.0f, 2.0f, -1.0f, -1.0f, 0.5f, 3.0f};
    apply_penalties(l.data(), 6, p, s);
    const std::vector<float> want = {1.0f, 1.0f, -1.0f, -2.0f, 0.25f, 3.0f};
    for (size_t i = 0; i < want.size(); ++i) EXPECT_FLOAT_EQ(l[i], want[i]) << "token " << i;
}

TEST(Sampler, PresenceAndFrequencyPenaltiesAsOpenAI) {
    // OpenAI: logit[j] -= count[j] * frequency_penalty + (count[j] > 0) * presence_penalty, over
    // the generated tokens only (the prompt does not count).
    SamplingParams p = sampling(1.0);
    p.presence_penalty = 0.5;
    p.frequency_penalty = 0.25;
    SamplerState s(p, {0, 2}, 0);
    for (int32_t t : {1, 1, 1, 2}) s.record_output(t);
    std::vector<float> l = {1.0f, 1.0f, 1.0f, 1.0f};
    apply_penalties(l.data(), 4, p, s);
    EXPECT_FLOAT_EQ(l[0], 1.0f);
    EXPECT_FLOAT_EQ(l[1], 1.0f - 3 * 0.25f - 0.5f);
    EXPECT_FLOAT_EQ(l[2], 1.0f - 0.25f - 0.5f);
    EXPECT_FLOAT_EQ(l[3], 1.0f);
    // Negative values encourage repetition.
    p.presence_penalty = -1.0;
    p.frequency_penalty = -0.5;
    std::vector<float> m = {0.0f, 0.0f, 0.0f, 0.0f};
    apply_penalties(m.data(), 4, p, s);
    EXPECT_FLOAT_EQ(m[1], 3 * 0.5f + 1.0f);
}

TEST(Sampler, PenaltiesChangeTheGreedyPick) {
    SamplingParams p = sampling(0.0);
    p.frequency_penalty = 1.0;
    SamplerState s(p, {}, 0);
    const std::vector<float> l = {0.0f, 2.5f, 2.0f};
    EXPECT_EQ(pick_token(l.data(), 3, p, s), 1);
    s.record_output(1);
    EXPECT_EQ(pick_token(l.data(), 3, p, s), 2);  // 2.5 - 1 < 2.0
}

TEST(Sampler, SeededStatesAreReproducibleAndIndexedStreamsDiffer) {
    SamplingParams p = sampling(1.0);
    p.seed = 1234;
    std::mt19937 rng(5);
    const std::vector<float> l = random_logits(rng, 64, 1.0f);
    auto draws = [&](int32_t index) {
        SamplerState s(p, {7, 8}, index);
        std::vector<int32_t> out;
        for (int i = 0; i < 200; ++i) out.push_back(sample_token(l.data(), 64, p, s).token);
        return out;
    };
    EXPECT_EQ(draws(0), draws(0));
    EXPECT_EQ(draws(3), draws(3));
    EXPECT_NE(draws(0), draws(1));
    EXPECT_NE(draws(1), draws(2));
    SamplerState a(p, {}, 0), b(p, {}, 0), c(p, {}, 1);
    int same_ac = 0;
    for (int i = 0; i < 100; ++i) {
        const double ua = a.next_uniform(), ub = b.next_uniform(), uc = c.next_uniform();
        EXPECT_EQ(ua, ub);
        EXPECT_GE(ua, 0.0);
        EXPECT_LT(ua, 1.0);
        same_ac += ua == uc;
    }
    EXPECT_EQ(same_ac, 0);
    // A different seed gives a different stream.
    SamplingParams q = p;
    q.seed = 1235;
    SamplerState d(q, {}, 0), e(p, {}, 0);
    EXPECT_NE(d.next_uniform(), e.next_uniform());
}

TEST(Sampler, EmpiricalFrequenciesMatchTheDistribution) {
    const std::vector<float> l = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f, -3.0f, 1.5f};
    struct Case {
        double temperature, top_p;
        int64_t top_k;
        double min_p;
    };
    for (const Case& c : {Case{1.0, 1.0, 0, 0.0}, Case{0.7, 1.0, 0, 0.0}, Case{1.3, 0.8, 0, 0.0},
                          Case{1.0, 1.0, 4, 0.0}, Case{1.0, 1.0, 0, 0.2}}) {
        SamplingParams p = sampling(c.temperature);
        p.top_p = c.top_p;
        p.top_k = c.top_k;
        p.min_p = c.min_p;
        p.seed = 99;
        // Expected: brute force in double over the 7 tokens.
        std::vector<double> want = softmax(l, c.temperature);
        std::vector<int> order(7);
        std::iota(order.begin(), order.end(), 0);
        std::sort(order.begin(), order.end(), [&](int a, int b) { return want[size_t(a)] > want[size_t(b)]; });
        std::set<int> keep;
        double cum = 0.0;
        for (int i = 0; i < 7; ++i) {
            if (c.top_k > 0 && i >= c.top_k) break;
            keep.insert(order[size_t(i)]);
            cum += want[size_t(order[size_t(i)])];
            if (cum >= c.top_p) break;
        }
        const double mx = want[size_t(order[0])];
        for (int t = 0; t < 7; ++t)
            if (want[size_t(t)] < c.min_p * mx) keep.erase(t);
        want = restrict_to(want, keep);

        SamplerState s(p, {}, 0);
        std::vector<int32_t> draws;
        for (int i = 0; i < 200000; ++i) draws.push_back(sample_token(l.data(), 7, p, s).token);
        const std::vector<double> got = frequencies(draws, 7);
        EXPECT_LT(max_abs_diff(got, want), 0.01) << "T=" << c.temperature << " top_p=" << c.top_p;
        for (int t = 0; t < 7; ++t)
            if (!keep.count(t)) {
                EXPECT_EQ(got[size_t(t)], 0.0) << "token " << t << " must never be drawn";
            }
    }
}

TEST(Sampler, DrawFromSkipsZerosAndCoversUnitInterval) {
    const std::vector<float> probs = {0.0f, 0.25f, 0.0f, 0.75f, 0.0f};
    EXPECT_EQ(draw_from(probs, 0.0), 1);
    EXPECT_EQ(draw_from(probs, 0.2499), 1);
    EXPECT_EQ(draw_from(probs, 0.25), 3);
    EXPECT_EQ(draw_from(probs, 0.999999), 3);
}

TEST(Sampler, RawLogprobsAreLogSoftmaxAndTopKSorted) {
    std::mt19937 rng(6);
    const std::vector<float> l = random_logits(rng, 300, 4.0f);
    const std::vector<double> probs = softmax(l);
    for (int32_t token : {0, 17, 299}) {
        float lp = 0.0f;
        std::vector<TokenLogprob> top;
        raw_logprobs(l.data(), 300, token, 5, &lp, &top);
        EXPECT_NEAR(lp, std::log(probs[size_t(token)]), 1e-4);
        ASSERT_EQ(top.size(), 5u);
        std::vector<int> order(300);
        std::iota(order.begin(), order.end(), 0);
        std::sort(order.begin(), order.end(), [&](int a, int b) { return l[size_t(a)] > l[size_t(b)]; });
        for (size_t i = 0; i < 5; ++i) {
            EXPECT_EQ(top[i].token_id, order[i]);
            EXPECT_NEAR(top[i].logprob, std::log(probs[size_t(order[i])]), 1e-4);
            if (i) {
                EXPECT_GE(top[i - 1].logprob, top[i].logprob);
            }
        }
    }
    // Logprobs come from the raw logits: sampling knobs do not change them.
    SamplingParams p = sampling(0.3);
    p.top_k = 2;
    p.logprobs = 3;
    p.seed = 1;
    SamplerState s(p, {}, 0);
    const SampleResult r = sample_token(l.data(), 300, p, s);
    EXPECT_NEAR(r.logprob, std::log(probs[size_t(r.token)]), 1e-4);
    ASSERT_EQ(r.top.size(), 3u);
    EXPECT_EQ(r.top[0].token_id, std::max_element(l.begin(), l.end()) - l.begin());
    // k = 0: the sampled token's logprob only.
    p.logprobs = 0;
    EXPECT_TRUE(sample_token(l.data(), 300, p, s).top.empty());
}

TEST(Sampler, ValidateNamesTheBadParameter) {
    auto message_of = [](auto mutate) {
        SamplingParams p;
        mutate(p);
        const Status st = p.validate();
        return st.is_ok() ? std::string("ok") : st.message();
    };
    EXPECT_EQ(message_of([](SamplingParams&) {}), "ok");
    EXPECT_NE(message_of([](SamplingParams& p) { p.top_p = 0.0; }).find("top_p"), std::string::npos);
    EXPECT_NE(message_of([](SamplingParams& p) { p.max_tokens = -1; }).find("max_tokens"), std::string::npos);
    EXPECT_EQ(message_of([](SamplingParams& p) { p.n = 0; }).rfind("n ", 0), 0u);
    EXPECT_NE(message_of([](SamplingParams& p) { p.logprobs = 21; }).find("logprobs"), std::string::npos);
    EXPECT_NE(message_of([](SamplingParams& p) { p.temperature = std::nan(""); }).find("temperature"),
              std::string::npos);
    EXPECT_NE(message_of([](SamplingParams& p) { p.top_k = -1; }).find("top_k"), std::string::npos);
    EXPECT_NE(message_of([](SamplingParams& p) { p.min_p = 1.5; }).find("min_p"), std::string::npos);
    EXPECT_NE(message_of([](SamplingParams& p) { p.repetition_penalty = 0.0; }).find("repetition_penalty"),
              std::string::npos);
    EXPECT_NE(message_of([](SamplingParams& p) { p.presence_penalty = 2.5; }).find("presence_penalty"),
              std::string::npos);
    EXPECT_NE(message_of([](SamplingParams& p) { p.stop = {""}; }).find("stop"), std::string::npos);
    EXPECT_EQ(message_of([](SamplingParams& p) { p.logprobs = 20; }), "ok");
}

TEST(VerifyDraft, GreedyAcceptsIffDraftIsArgmax) {
    std::mt19937 rng(7);
    SamplingParams p = sampling(0.0);
    for (int trial = 0; trial < 20; ++trial) {
        const std::vector<float> l = random_logits(rng, 100);
        int best = 0;
        for (int i = 1; i < 100; ++i)
            if (l[size_t(i)] > l[size_t(best)]) best = i;
        SamplerState s(p, {}, 0);
        for (int32_t draft : {best, (best + 1) % 100, (best + 37) % 100}) {
            const DraftVerdict v = verify_draft(l.data(), 100, p, s, draft);
            EXPECT_EQ(v.accepted, draft == best);
            EXPECT_EQ(v.token, best);
        }
    }
}

TEST(VerifyDraft, SamplingEmitsTheTargetDistribution) {
    // Rejection sampling with a point-mass draft: whatever the draft, the emitted token (the
    // draft when accepted, else the recovered token) is distributed as the target, and the draft
    // is accepted with probability p_target(draft).
    const std::vector<float> l = {0.5f, 2.0f, -1.0f, 1.0f, 0.0f};
    struct Case {
        double temperature, top_p;
    };
    for (const Case& c : {Case{1.0, 1.0}, Case{0.6, 1.0}, Case{1.0, 0.9}}) {
        SamplingParams p = sampling(c.temperature);
        p.top_p = c.top_p;
        p.seed = 5;
        std::vector<double> target = softmax(l, c.temperature);
        if (c.top_p < 1.0) {  // at T = 1 the masses sort as tokens 1 3 0 4 2 (.563 .207 .126 .076 .028)
            std::set<int> keep;
            std::vector<int> order = {1, 3, 0, 4, 2};
            double cum = 0.0;
            for (int t : order) {
                keep.insert(t);
                cum += target[size_t(t)];
                if (cum >= c.top_p) break;
            }
            target = restrict_to(target, keep);
        }
        for (int32_t draft : {1, 0, 2}) {
            SamplerState s(p, {}, 0);
            std::vector<int32_t> emitted;
            int accepted = 0;
            const int trials = 200000;
            for (int i = 0; i < trials; ++i) {
                const DraftVerdict v = verify_draft(l.data(), 5, p, s, draft);
                if (v.accepted) {
                    EXPECT_EQ(v.token, draft);
                    ++accepted;
                } else {
                    ASSERT_NE(v.token, draft) << "the recovered token excludes the draft";
                }
                emitted.push_back(v.token);
            }
            EXPECT_LT(max_abs_diff(frequencies(emitted, 5), target), 0.01)
                << "T=" << c.temperature << " top_p=" << c.top_p << " draft=" << draft;
            EXPECT_NEAR(double(accepted) / trials, target[size_t(draft)], 0.01) << "draft=" << draft;
        }
    }
}
