// The sampler's specification (backend/cpu/cpu_sampling.cpp, contract in backend/sampling.h)
// against expectations derived in the test itself (by hand, or by brute force over a small
// vocabulary in double precision): greedy, temperature, top-k, top-p (boundaries and ties),
// min-p, logit_bias and bans, the three penalties read from token pages, seeded reproducibility
// independent of the batch, empirical frequencies (chi-square against tabulated critical
// values), raw logprobs, draft verdicts (greedy: accept iff argmax; sampling: the emitted
// distribution equals the target's, acceptance probability p(draft)), parameter validation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "engine/request.h"

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

std::vector<float> random_logits(std::mt19937& rng, int vocab, float scale = 3.0f) {
    std::normal_distribution<float> nd(0.0f, scale);
    std::vector<float> l(static_cast<size_t>(vocab));
    for (float& x : l) x = nd(rng);
    return l;
}

SampleRow sampling(float temperature, uint64_t seed = 7) {
    SampleRow r;
    r.temperature = temperature;
    r.seed = seed;
    return r;
}

// One draw from a copy of `l` (the sampler adjusts its logits row in place).
SampleOutput run(std::vector<float> l, const SamplingBatch& b, const int32_t* pages = nullptr, int64_t bs = 4) {
    SampleOutput out;
    int64_t rows = 1;
    for (const SampleRow& r : b.rows) rows = std::max<int64_t>(rows, r.logits_row + 1);
    const int64_t V = int64_t(l.size()) / rows;
    cpu::sample_rows(l.data(), V, b, pages, bs, out);
    return out;
}

int32_t draw(const std::vector<float>& l, const SampleRow& r) {
    SamplingBatch b;
    b.rows = {r};
    return run(l, b).token[0];
}

// `n` draws: draw indices 0..n-1 of the row's stream.
std::vector<int32_t> draws(const std::vector<float>& l, SampleRow r, int n) {
    std::vector<int32_t> out;
    for (int i = 0; i < n; ++i) {
        r.draw = uint64_t(i);
        out.push_back(draw(l, r));
    }
    return out;
}

// Pearson's chi-square statistic of the draws against `want` over the tokens with want > 0;
// every draw outside that support is a failure of its own.
double chi_square(const std::vector<int32_t>& d, const std::vector<double>& want, int* outside, int* dof) {
    std::vector<double> count(want.size(), 0.0);
    *outside = 0;
    for (int32_t t : d) {
        if (want[size_t(t)] <= 0.0) ++*outside;
        count[size_t(t)] += 1.0;
    }
    double chi = 0.0;
    *dof = -1;
    for (size_t t = 0; t < want.size(); ++t) {
        if (want[t] <= 0.0) continue;
        const double e = want[t] * double(d.size());
        chi += (count[t] - e) * (count[t] - e) / e;
        ++*dof;
    }
    return chi;
}

// Upper 0.001 critical values of chi-square (standard tables) for 1..10 degrees of freedom.
double chi_square_critical_001(int dof) {
    static const double k[] = {0, 10.828, 13.816, 16.266, 18.467, 20.515, 22.458, 24.322, 26.124, 27.877, 29.588};
    return k[std::clamp(dof, 0, 10)];
}

void expect_distribution(const std::vector<int32_t>& d, const std::vector<double>& want, const std::string& what) {
    int outside = 0, dof = 0;
    const double chi = chi_square(d, want, &outside, &dof);
    EXPECT_EQ(outside, 0) << what << ": drew a token outside the kept set";
    if (dof > 0) {
        EXPECT_LT(chi, chi_square_critical_001(dof)) << what << " (dof " << dof << ")";
    }
}

// The kept set of the contract by brute force: tokens sorted by probability; top-k (ties at
// the boundary kept), the smallest prefix reaching top_p (ties kept), min-p against the max.
std::set<int> kept_set(const std::vector<float>& l, double T, int top_k, double top_p, double min_p) {
    const std::vector<double> p = softmax(l, T);
    std::vector<int> order(l.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return p[size_t(a)] > p[size_t(b)]; });
    std::set<int> keep(order.begin(), order.end());
    if (top_k > 0 && size_t(top_k) < order.size()) {
        const double kth = p[size_t(order[size_t(top_k - 1)])];
        for (int t : order)
            if (p[size_t(t)] < kth) keep.erase(t);
    }
    if (top_p < 1.0) {
        double total = 0.0;
        for (int t : keep) total += p[size_t(t)];
        double cum = 0.0, cut = 0.0;
        for (int t : order) {
            if (!keep.count(t)) break;
            cum += p[size_t(t)];
            if (cum >= top_p * total) {
                cut = p[size_t(t)];
                break;
            }
        }
        for (int t : order)
            if (p[size_t(t)] < cut) keep.erase(t);
    }
    const double mx = p[size_t(order[0])];
    for (int t : order)
        if (p[size_t(t)] < min_p * mx) keep.erase(t);
    return keep;
}

}  // namespace

TEST(Sampler, TemperatureZeroAndTopKOneAreArgmax) {
    std::mt19937 rng(1);
    for (int trial = 0; trial < 30; ++trial) {
        const std::vector<float> l = random_logits(rng, 997);
        const int best = int(std::max_element(l.begin(), l.end()) - l.begin());
        EXPECT_EQ(draw(l, sampling(0.0f)), best);
        SampleRow r = sampling(1.5f);
        r.top_k = 1;
        EXPECT_EQ(draw(l, r), best);
    }
    // Ties: the lowest id.
    EXPECT_EQ(draw({1.0f, 3.0f, 0.0f, 3.0f}, sampling(0.0f)), 1);
}

TEST(Sampler, FrequenciesFollowTheKeptDistribution) {
    const std::vector<float> l = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f, -3.0f, 1.5f};
    struct Case {
        float temperature, top_p;
        int top_k;
        float min_p;
    };
    for (const Case& c : {Case{1.0f, 1.0f, 0, 0.0f}, Case{0.7f, 1.0f, 0, 0.0f}, Case{1.3f, 0.8f, 0, 0.0f},
                          Case{1.0f, 1.0f, 4, 0.0f}, Case{1.0f, 1.0f, 0, 0.2f}, Case{0.9f, 0.9f, 5, 0.05f}}) {
        SampleRow r = sampling(c.temperature, 99);
        r.top_p = c.top_p;
        r.top_k = c.top_k;
        r.min_p = c.min_p;
        const std::set<int> keep = kept_set(l, c.temperature, c.top_k, c.top_p, c.min_p);
        expect_distribution(draws(l, r, 60000), restrict_to(softmax(l, c.temperature), keep),
                            "T=" + std::to_string(c.temperature) + " top_p=" + std::to_string(c.top_p) +
                                " top_k=" + std::to_string(c.top_k) + " min_p=" + std::to_string(c.min_p));
    }
}

TEST(Sampler, KeptSetsAtTheirBoundaries) {
    // Hand-derived sets; a set is what many draws reach (support), checked both ways.
    auto support = [](const std::vector<float>& l, SampleRow r) {
        std::set<int> s;
        for (int32_t t : draws(l, r, 4000)) s.insert(t);
        return s;
    };
    // Four equal tokens (0.25 each) and four impossible ones: top_p 0.5 reaches the mass after
    // two tokens, but the four are tied, and ties at the boundary are all kept.
    const std::vector<float> ties = {0, kNegInf, 0, kNegInf, 0, kNegInf, 0, kNegInf};
    SampleRow r = sampling(1.0f);
    r.top_p = 0.5f;
    EXPECT_EQ(support(ties, r), (std::set<int>{0, 2, 4, 6}));
    // Probabilities 8:4:2:1 (logits are their logs): top_p 0.5 keeps {0} (8/15 >= 0.5);
    // 0.55 needs {0, 1}; 0.85 needs {0, 1, 2} (14/15 = 0.933).
    const std::vector<float> l = {float(std::log(8.0)), float(std::log(4.0)), float(std::log(2.0)), 0.0f};
    r.top_p = 0.5f;
    EXPECT_EQ(support(l, r), (std::set<int>{0}));
    r.top_p = 0.55f;
    EXPECT_EQ(support(l, r), (std::set<int>{0, 1}));
    r.top_p = 0.85f;
    EXPECT_EQ(support(l, r), (std::set<int>{0, 1, 2}));
    // top-k: 2 keeps {0, 1}; with a tie at the boundary, both tied tokens stay.
    r = sampling(1.0f);
    r.top_k = 2;
    EXPECT_EQ(support(l, r), (std::set<int>{0, 1}));
    EXPECT_EQ(support({1.0f, 2.0f, 2.0f, 2.0f, 0.0f}, r), (std::set<int>{1, 2, 3}));
    // min-p: threshold min_p * 8/15; 0.3 keeps weights >= 2.4 -> {0, 1}; 0.2 keeps {0, 1, 2}.
    r = sampling(1.0f);
    r.min_p = 0.3f;
    EXPECT_EQ(support(l, r), (std::set<int>{0, 1}));
    r.min_p = 0.2f;
    EXPECT_EQ(support(l, r), (std::set<int>{0, 1, 2}));
    // top-k then top-p over the renormalised top-k mass: k = 3 leaves 8:4:2 (8/14 = 0.571), so
    // top_p 0.56 keeps {0}, 0.6 keeps {0, 1}.
    r = sampling(1.0f);
    r.top_k = 3;
    r.top_p = 0.56f;
    EXPECT_EQ(support(l, r), (std::set<int>{0}));
    r.top_p = 0.6f;
    EXPECT_EQ(support(l, r), (std::set<int>{0, 1}));
}

TEST(Sampler, RandomTopPSetsMatchBruteForce) {
    std::mt19937 rng(4);
    int checked = 0;
    for (int trial = 0; trial < 60; ++trial) {
        const std::vector<float> l = random_logits(rng, 12, 1.5f);
        const float top_p = std::uniform_real_distribution<float>(0.05f, 0.99f)(rng);
        // Skip cases within rounding distance of a boundary.
        const std::vector<double> p = softmax(l);
        std::vector<double> sorted = p;
        std::sort(sorted.rbegin(), sorted.rend());
        double cum = 0.0;
        bool near = false;
        for (double x : sorted) near |= std::abs((cum += x) - double(top_p)) < 1e-4;
        if (near) continue;
        SampleRow r = sampling(1.0f, uint64_t(trial));
        r.top_p = top_p;
        const std::set<int> keep = kept_set(l, 1.0, 0, top_p, 0.0);
        std::set<int> got;
        for (int32_t t : draws(l, r, 3000)) got.insert(t);
        // Every kept token with probability above 1 % shows up in 3000 draws; none outside.
        for (int t : got) EXPECT_TRUE(keep.count(t)) << "token " << t << " top_p " << top_p;
        for (int t : keep)
            if (restrict_to(p, keep)[size_t(t)] > 0.01) {
                EXPECT_TRUE(got.count(t)) << "token " << t << " top_p " << top_p;
            }
        ++checked;
    }
    EXPECT_GT(checked, 40);
}

TEST(Sampler, LogitBiasAndBansComeBeforeThePick) {
    const std::vector<float> l = {0.0f, 2.5f, 2.0f, -1.0f};
    SamplingBatch b;
    SampleRow r = sampling(0.0f);
    b.adjust = {{1, -1.0f}, {3, 5.0f}};
    r.adjust_begin = 0;
    r.adjust_end = 2;
    b.rows = {r};
    EXPECT_EQ(run(l, b).token[0], 3);  // -1 + 5 = 4 beats 2.5 - 1
    b.adjust = {{3, -INFINITY}, {2, -INFINITY}, {1, -INFINITY}};
    b.rows[0].adjust_end = 3;
    EXPECT_EQ(run(l, b).token[0], 0);
    // A banned token is never drawn.
    b.rows[0].temperature = 1.0f;
    for (int i = 0; i < 500; ++i) {
        b.rows[0].draw = uint64_t(i);
        EXPECT_EQ(run(l, b).token[0], 0);
    }
}

TEST(Sampler, GrammarBitmaskBansEveryTokenOutsideIt) {
    // V = 70 (three mask words, the last partial); allowed: {3, 31, 32, 45, 69}.
    std::mt19937 rng(11);
    const std::vector<float> l = random_logits(rng, 70);
    const std::set<int> allowed = {3, 31, 32, 45, 69};
    SamplingBatch b;
    b.bitmask.assign(size_t(bitmask_words(70)), 0u);
    for (int t : allowed) b.bitmask[size_t(t / 32)] |= 1u << (t % 32);
    SampleRow r = sampling(0.0f);
    r.bitmask_row = 0;
    r.num_top_logprobs = 3;
    b.rows = {r};
    int best = *allowed.begin();
    for (int t : allowed)
        if (l[size_t(t)] > l[size_t(best)]) best = t;
    SampleOutput out = run(l, b);
    EXPECT_EQ(out.token[0], best);
    // Raw logprobs ignore the mask: the top ids are the unmasked row's.
    const std::vector<double> probs = softmax(l);
    const int raw_best = int(std::max_element(l.begin(), l.end()) - l.begin());
    EXPECT_EQ(out.top_ids[0], raw_best);
    EXPECT_NEAR(out.logprob[0], std::log(probs[size_t(best)]), 1e-4);
    // Sampled: the distribution restricted to the mask (a bias and a penalty-free top-p too).
    b.rows[0].temperature = 1.0f;
    b.rows[0].num_top_logprobs = -1;
    std::vector<int32_t> d;
    for (int i = 0; i < 30000; ++i) {
        b.rows[0].draw = uint64_t(i);
        d.push_back(run(l, b).token[0]);
    }
    expect_distribution(d, restrict_to(softmax(l), allowed), "bitmask");
    // A bias on a masked token does not bring it back; one on an allowed token still counts.
    b.adjust = {{5, 100.0f}, {69, 100.0f}};
    b.rows[0].adjust_end = 2;
    b.rows[0].temperature = 0.0f;
    EXPECT_EQ(run(l, b).token[0], 69);
    // A second row on its own logits row with its own mask, and a sibling sharing row 0's.
    std::vector<float> two = l;
    two.insert(two.end(), l.begin(), l.end());
    b.bitmask.resize(2 * size_t(bitmask_words(70)), 0u);
    b.bitmask[size_t(bitmask_words(70)) + 1] = 1u << 7;  // only token 39
    SampleRow second = sampling(0.0f);
    second.logits_row = 1;
    second.bitmask_row = 1;
    SampleRow sibling = b.rows[0];
    sibling.adjusts_row = false;
    sibling.temperature = 1.0f;
    b.rows.push_back(second);
    b.rows.push_back(sibling);
    for (int i = 0; i < 200; ++i) {
        b.rows[2].draw = uint64_t(i);
        out = run(two, b);
        EXPECT_EQ(out.token[1], 39);
        EXPECT_TRUE(allowed.count(out.token[2])) << out.token[2];
    }
}

TEST(Sampler, PenaltiesReadTheHistoryFromTokenPages) {
    // Pages of 4 tokens; the sequence's table is pages {2, 0}: positions 0-3 in page 2, 4-7 in
    // page 0. Prompt (3 tokens) = 1 1 3; output = 3 4 4 then 0 at position 6 (history_len 7).
    std::vector<int32_t> pages(12, 5);  // 5 fills unused slots: it must not count
    const int32_t prompt_out[] = {1, 1, 3, 3, 4, 4, 0};
    const int32_t table[] = {2, 0};
    for (int pos = 0; pos < 7; ++pos) pages[size_t(table[pos / 4] * 4 + pos % 4)] = prompt_out[pos];
    SamplingBatch b;
    b.block_tables = {2, 0};
    SampleRow r = sampling(0.0f);
    r.history_len = 7;
    r.num_prompt = 3;
    r.table_begin = 0;
    r.repetition_penalty = 2.0f;
    r.presence_penalty = 0.5f;
    r.frequency_penalty = 0.25f;
    b.rows = {r};
    std::vector<float> l = {1.0f, 2.0f, -1.0f, -1.0f, 0.5f, 3.0f};
    SampleOutput out;
    cpu::sample_rows(l.data(), 6, b, pages.data(), 4, out);
    // Repetition once per distinct token of prompt or output (0, 1, 3, 4); presence once and
    // frequency per occurrence over the output (0 x1, 3 x1, 4 x2); 2 and 5 untouched.
    EXPECT_FLOAT_EQ(l[0], 0.5f - 0.5f - 0.25f);
    EXPECT_FLOAT_EQ(l[1], 1.0f);
    EXPECT_FLOAT_EQ(l[2], -1.0f);
    EXPECT_FLOAT_EQ(l[3], -2.0f - 0.5f - 0.25f);
    EXPECT_FLOAT_EQ(l[4], 0.25f - 0.5f - 0.5f);
    EXPECT_FLOAT_EQ(l[5], 3.0f);
    EXPECT_EQ(out.token[0], 5);
    // A sibling row sharing the logits row (adjusts_row false) sees the adjusted row and does
    // not adjust it again.
    std::vector<float> m = {1.0f, 2.0f, -1.0f, -1.0f, 0.5f, 1.5f};
    SampleRow sib = r;
    sib.adjusts_row = false;
    b.rows = {r, sib};
    cpu::sample_rows(m.data(), 6, b, pages.data(), 4, out);
    EXPECT_EQ(out.token[0], 5);
    EXPECT_EQ(out.token[1], 5);
    EXPECT_FLOAT_EQ(m[1], 1.0f);  // divided once, not twice
}

TEST(Sampler, SeededDrawsDependOnSeedAndDrawOnly) {
    std::mt19937 rng(5);
    const std::vector<float> l = random_logits(rng, 64, 1.0f);
    SampleRow r = sampling(1.0f, 1234);
    const std::vector<int32_t> a = draws(l, r, 200), again = draws(l, r, 200);
    EXPECT_EQ(a, again);
    r.seed = 1235;
    EXPECT_NE(a, draws(l, r, 200));
    // The same row batched with others (before it, sharing nothing) draws the same tokens.
    std::vector<float> three(l.size() * 3);
    const std::vector<float> other = random_logits(rng, 64, 1.0f);
    std::copy(other.begin(), other.end(), three.begin());
    std::copy(other.begin(), other.end(), three.begin() + 64);
    std::copy(l.begin(), l.end(), three.begin() + 128);
    r.seed = 1234;
    for (int i = 0; i < 50; ++i) {
        SamplingBatch b;
        SampleRow o = sampling(0.8f, 77);
        o.draw = uint64_t(i);
        SampleRow o2 = o;
        o2.logits_row = 1;
        o2.top_p = 0.5f;
        SampleRow me = r;
        me.logits_row = 2;
        me.draw = uint64_t(i);
        b.rows = {o, o2, me};
        EXPECT_EQ(run(three, b).token[2], a[size_t(i)]) << "draw " << i;
    }
}

TEST(Sampler, RawLogprobsAreLogSoftmaxOfTheUnadjustedRow) {
    std::mt19937 rng(6);
    const std::vector<float> l = random_logits(rng, 300, 4.0f);
    const std::vector<double> probs = softmax(l);
    std::vector<int> order(300);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return l[size_t(a)] > l[size_t(b)]; });
    SamplingBatch b;
    SampleRow r = sampling(0.3f);
    r.top_k = 2;
    r.num_top_logprobs = 5;
    // A bias that makes the sampled token improbable under the raw distribution.
    b.adjust = {{order[250], 100.0f}};
    r.adjust_end = 1;
    b.rows = {r};
    const SampleOutput out = run(l, b);
    EXPECT_EQ(out.token[0], order[250]);
    EXPECT_NEAR(out.logprob[0], std::log(probs[size_t(order[250])]), 1e-4);
    for (int i = 0; i < 5; ++i) {
        EXPECT_EQ(out.top_ids[size_t(i)], order[size_t(i)]);
        EXPECT_NEAR(out.top_logprobs[size_t(i)], std::log(probs[size_t(order[size_t(i)])]), 1e-4);
    }
    // Ties in the top N: lower id first.
    const std::vector<float> t = {0.0f, 1.0f, 2.0f, 1.0f, 2.0f};
    b.adjust.clear();
    b.rows[0].adjust_end = 0;
    b.rows[0].num_top_logprobs = 4;
    const SampleOutput o2 = run(t, b);
    EXPECT_EQ(std::vector<int32_t>(o2.top_ids.begin(), o2.top_ids.begin() + 4), (std::vector<int32_t>{2, 4, 1, 3}));
}

TEST(SamplerVerify, GreedyAcceptsIffDraftIsArgmax) {
    std::mt19937 rng(7);
    for (int trial = 0; trial < 20; ++trial) {
        const std::vector<float> l = random_logits(rng, 100);
        const int best = int(std::max_element(l.begin(), l.end()) - l.begin());
        for (int32_t draft : {best, (best + 1) % 100, (best + 37) % 100}) {
            SamplingBatch b;
            SampleRow r = sampling(0.0f);
            r.draft = draft;
            b.rows = {r};
            const SampleOutput out = run(l, b);
            EXPECT_EQ(out.accepted[0] != 0, draft == best);
            EXPECT_EQ(out.token[0], best);
        }
    }
}

TEST(SamplerVerify, SamplingEmitsTheTargetDistribution) {
    // A point-mass draft is accepted with probability p(draft); a rejected row's token never
    // equals the draft and is distributed as p without the draft, so the emitted token is
    // distributed as p.
    const std::vector<float> l = {0.5f, 2.0f, -1.0f, 1.0f, 0.0f};
    for (float top_p : {1.0f, 0.9f}) {
        const std::set<int> keep = kept_set(l, 0.8, 0, top_p, 0.0);
        const std::vector<double> target = restrict_to(softmax(l, 0.8), keep);
        for (int32_t draft : {1, 0, 2}) {
            std::vector<int32_t> emitted, after_reject;
            int accepted = 0;
            const int trials = 40000;
            for (int i = 0; i < trials; ++i) {
                SamplingBatch b;
                SampleRow r = sampling(0.8f, 5);
                r.top_p = top_p;
                r.draft = draft;
                r.draw = uint64_t(i);
                b.rows = {r};
                const SampleOutput out = run(l, b);
                if (out.accepted[0]) {
                    ASSERT_EQ(out.token[0], draft);
                    ++accepted;
                } else {
                    ASSERT_NE(out.token[0], draft);
                    after_reject.push_back(out.token[0]);
                }
                emitted.push_back(out.token[0]);
            }
            const std::string what = "top_p=" + std::to_string(top_p) + " draft=" + std::to_string(draft);
            expect_distribution(emitted, target, what);
            const double pd = target[size_t(draft)];
            EXPECT_NEAR(double(accepted) / trials, pd, 5 * std::sqrt(pd * (1 - pd) / trials) + 1e-9) << what;
            if (pd < 1.0) {
                std::set<int> rest = keep;
                rest.erase(draft);
                expect_distribution(after_reject, restrict_to(target, rest), what + " (rejected)");
            }
        }
    }
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

