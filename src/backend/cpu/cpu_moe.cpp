// CPU sparse MoE (spec §2.5): router logits, softmax in fp32 over all experts, top-k (ties to the
// lower index), renormalised weights; tokens grouped by expert so each expert's weights are read
// once; experts' outputs combined per token in top-k order; plus the shared expert scaled by
// sigmoid(x · shared_expert_gate). An expert with empty weights contributes zero (Ops::moe).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backend/cpu/cpu_ops.h"

namespace qs {

namespace {

// y [n, hidden] = down(silu(gate(x)) ⊙ up(x)) for x [n, hidden].
void expert_mlp(const float* x, int64_t n, const ExpertWeights& e, float* y) {
    const int64_t I = e.gate_proj.out_features;
    std::vector<float> g(size_t(n * I)), u(size_t(n * I));
    cpu::linear(x, n, e.gate_proj, g.data());
    cpu::linear(x, n, e.up_proj, u.data());
    for (size_t i = 0; i < g.size(); ++i) g[i] = cpu::silu(g[i]) * u[i];
    cpu::linear(g.data(), n, e.down_proj, y);
}

}  // namespace

void CpuOps::moe(const float* x, int64_t T, const MoeWeights& w, int64_t top_k, bool norm_topk_prob, float* y) {
    const int64_t E = w.router.out_features, H = w.router.in_features;
    std::vector<float> logits(size_t(T * E));
    cpu::linear(x, T, w.router, logits.data());

    // Routing: weight[t][j] for the j-th chosen expert (descending probability) of token t.
    std::vector<float> weight(size_t(T * top_k));
    std::vector<std::vector<std::pair<int64_t, int64_t>>> by_expert(static_cast<size_t>(E));  // (token, j)
    for (int64_t t = 0; t < T; ++t) {
        const float* l = logits.data() + t * E;
        const float mx = *std::max_element(l, l + E);
        std::vector<float> p(static_cast<size_t>(E));
        float sum = 0.0f;
        for (int64_t e = 0; e < E; ++e) sum += (p[size_t(e)] = std::exp(l[e] - mx));
        for (float& v : p) v /= sum;
        std::vector<int32_t> idx(static_cast<size_t>(E));
        std::iota(idx.begin(), idx.end(), 0);
        std::partial_sort(idx.begin(), idx.begin() + top_k, idx.end(), [&](int32_t i, int32_t j) {
            return p[size_t(i)] > p[size_t(j)] || (p[size_t(i)] == p[size_t(j)] && i < j);
        });
        float top_sum = 0.0f;
        for (int64_t j = 0; j < top_k; ++j) top_sum += p[size_t(idx[size_t(j)])];
        for (int64_t j = 0; j < top_k; ++j) {
            const int32_t e = idx[size_t(j)];
            weight[size_t(t * top_k + j)] = norm_topk_prob ? p[size_t(e)] / top_sum : p[size_t(e)];
            by_expert[size_t(e)].push_back({t, j});
        }
    }

    // Each expert runs once over its gathered tokens; outputs land in per-(token, j) rows.
    std::vector<float> expert_out(size_t(T * top_k * H));
    for (int64_t e = 0; e < E; ++e) {
        const auto& toks = by_expert[size_t(e)];
        // An empty expert (another rank's under expert parallel) adds zero: its rows stay 0.
        if (toks.empty() || w.experts[size_t(e)].gate_proj.out_features == 0) continue;
        const int64_t n = int64_t(toks.size());
        std::vector<float> xin(size_t(n * H)), yout(size_t(n * H));
        for (int64_t i = 0; i < n; ++i) std::copy_n(x + toks[size_t(i)].first * H, H, xin.data() + i * H);
        expert_mlp(xin.data(), n, w.experts[size_t(e)], yout.data());
        for (int64_t i = 0; i < n; ++i) {
            const auto [t, j] = toks[size_t(i)];
            std::copy_n(yout.data() + i * H, H, expert_out.data() + (t * top_k + j) * H);
        }
    }

    std::vector<float> shared(size_t(T * H)), shared_gate(static_cast<size_t>(T));
    expert_mlp(x, T, w.shared_expert, shared.data());
    cpu::linear(x, T, w.shared_expert_gate, shared_gate.data());
    for (int64_t t = 0; t < T; ++t) {
        float* yt = y + t * H;
        for (int64_t i = 0; i < H; ++i) yt[i] = 0.0f;
        for (int64_t j = 0; j < top_k; ++j) {
            const float wt = weight[size_t(t * top_k + j)];
            const float* eo = expert_out.data() + (t * top_k + j) * H;
            for (int64_t i = 0; i < H; ++i) yt[i] += wt * eo[i];
        }
        const float sg = cpu::sigmoid(shared_gate[size_t(t)]);
        for (int64_t i = 0; i < H; ++i) yt[i] += sg * shared[size_t(t * H + i)];
    }
}

}  // namespace qs
