// CPU Gated DeltaNet (spec §2.4), the recurrent form token by token (mathematically identical to
// the chunked form; it is the reference for the CUDA chunked-prefill and decode kernels):
//   conv:  c_t = silu(Σ_j W[ch, j] · x_{t-(K-1)+j}[ch]), window from the slot's conv state
//   q̂, k̂ = l2norm(q), l2norm(k) (eps inside the sum); q̂ *= 1/sqrt(Dk)
//   β = sigmoid(b), g = -exp(A_log) · softplus(a + dt_bias)
//   S ← exp(g)·S;  δ = β·(v − Sᵀk̂);  S ← S + k̂ δᵀ;  o = Sᵀ q̂      (S is [Dk, Dv] per value head)
//   y = w · rmsnorm(o) · silu(z)   per value head
// Value head h reads key head h / (Nv / Nk).
#include <cmath>
#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/gdn_stash_rule.h"
#include "core/check.h"

namespace qs {

namespace {

// Runs the causal depthwise conv + SiLU for one sequence's rows and advances its conv window.
// in [n, C] (pre-conv qkv), out [n, C]; window [K-1, C], oldest row first.
void conv_sequence(const float* in, int64_t n, const std::vector<float>& w, int64_t C, int64_t K, float* window,
                   float* out) {
    const int64_t W = K - 1;
    // Rows of the extended input: window rows then the new rows.
    auto ext = [&](int64_t r) -> const float* { return r < W ? window + r * C : in + (r - W) * C; };
#pragma omp parallel for schedule(static) if (C * n * K >= cpu::kParallelWork)
    for (int64_t ch = 0; ch < C; ++ch) {
        const float* wc = w.data() + ch * K;
        for (int64_t t = 0; t < n; ++t) {
            float acc = 0.0f;
            for (int64_t j = 0; j < K; ++j) acc += wc[j] * ext(t + j)[ch];
            out[t * C + ch] = cpu::silu(acc);
        }
    }
    // New window = the last W rows of the extended input.
    std::vector<float> next(size_t(W * C));
    for (int64_t r = 0; r < W; ++r) std::memcpy(next.data() + r * C, ext(n + r), size_t(C) * sizeof(float));
    std::memcpy(window, next.data(), next.size() * sizeof(float));
}

void l2norm(float* x, int64_t n) {
    float ss = 0.0f;
    for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
    const float inv = 1.0f / std::sqrt(ss + 1e-6f);
    for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

// One sequence's n rows (contiguous: qkv [n, C], z [n, Vdim], b and a [n, Nv]) through the conv,
// advancing `window` [K-1, C], and the recurrence, advancing `state` [Nv, Dk, Dv]; out [n, Vdim]
// gets the gated-normed outputs, or nothing when null (a commit wants only the state).
void gdn_span(const float* qkv, const float* z, const float* b, const float* a, int64_t n, const GdnWeights& w,
              const GdnDims& d, float* window, float* state, float* out) {
    const int64_t C = d.conv_dim(), K = d.conv_kernel, Nk = d.num_key_heads, Nv = d.num_value_heads;
    const int64_t Dk = d.key_head_dim, Dv = d.value_head_dim, Kdim = d.key_dim();
    const int64_t ratio = Nv / Nk;
    const float q_scale = 1.0f / std::sqrt(float(Dk));
    std::vector<float> conv_out(size_t(n * C));
    conv_sequence(qkv, n, w.conv1d, C, K, window, conv_out.data());
#pragma omp parallel for schedule(static) if (Nv * Dk * Dv * 4 * n >= cpu::kParallelWork)
    for (int64_t h = 0; h < Nv; ++h) {
        const int64_t kh = h / ratio;
        float* S = state + h * Dk * Dv;  // [Dk, Dv]
        std::vector<float> q(static_cast<size_t>(Dk)), k(static_cast<size_t>(Dk)), delta(static_cast<size_t>(Dv)),
            o(static_cast<size_t>(Dv));
        const float A = std::exp(w.A_log[size_t(h)]);
        for (int64_t i = 0; i < n; ++i) {
            const float* c = conv_out.data() + i * C;
            std::memcpy(q.data(), c + kh * Dk, size_t(Dk) * sizeof(float));
            std::memcpy(k.data(), c + Kdim + kh * Dk, size_t(Dk) * sizeof(float));
            const float* v = c + 2 * Kdim + h * Dv;
            l2norm(q.data(), Dk);
            l2norm(k.data(), Dk);
            for (float& x : q) x *= q_scale;
            const float beta = cpu::sigmoid(b[i * Nv + h]);
            const float decay = std::exp(-A * cpu::softplus(a[i * Nv + h] + w.dt_bias[size_t(h)]));

            for (int64_t j = 0; j < Dk * Dv; ++j) S[j] *= decay;
            for (int64_t vv = 0; vv < Dv; ++vv) {
                float m = 0.0f;
                for (int64_t kk = 0; kk < Dk; ++kk) m += S[kk * Dv + vv] * k[size_t(kk)];
                delta[size_t(vv)] = beta * (v[vv] - m);
            }
            for (int64_t kk = 0; kk < Dk; ++kk)
                for (int64_t vv = 0; vv < Dv; ++vv) S[kk * Dv + vv] += k[size_t(kk)] * delta[size_t(vv)];
            if (!out) continue;
            std::fill(o.begin(), o.end(), 0.0f);
            for (int64_t kk = 0; kk < Dk; ++kk)
                for (int64_t vv = 0; vv < Dv; ++vv) o[size_t(vv)] += S[kk * Dv + vv] * q[size_t(kk)];
            // Gated RMSNorm over this head's Dv outputs: plain weight, then × silu(z).
            float ss = 0.0f;
            for (int64_t vv = 0; vv < Dv; ++vv) ss += o[size_t(vv)] * o[size_t(vv)];
            const float inv = 1.0f / std::sqrt(ss / float(Dv) + float(d.eps));
            const float* zh = z + i * Nv * Dv + h * Dv;
            float* oh = out + i * Nv * Dv + h * Dv;
            for (int64_t vv = 0; vv < Dv; ++vv) oh[vv] = w.norm[size_t(vv)] * (o[size_t(vv)] * inv) * cpu::silu(zh[vv]);
        }
    }
}

void check_gdn_geometry(const CacheGeometry& g, const GdnDims& d) {
    QS_CHECK(g.conv_dim == d.conv_dim() && g.conv_window == d.conv_kernel - 1 && g.num_value_heads == d.num_value_heads &&
             g.key_head_dim == d.key_head_dim && g.value_head_dim == d.value_head_dim &&
             d.num_value_heads % d.num_key_heads == 0);
}

}  // namespace

void CpuOps::gated_delta_net(const float* qkv, const float* z, const float* b, const float* a, const GdnWeights& w,
                             const GdnDims& d, const ForwardBatch& batch, ModelCache& cache, int64_t gdn_layer,
                             float* out) {
    const int64_t C = d.conv_dim(), W = d.conv_kernel - 1, Nv = d.num_value_heads;
    const int64_t state_n = Nv * d.key_head_dim * d.value_head_dim, Vdim = d.value_dim();
    const CacheGeometry& g = cache.geometry();
    check_gdn_geometry(g, d);
    GdnStash& stash = gdn_stash_[gdn_layer];
    stash = GdnStash();
    const bool keep_stash = deferred_spans_need_stash(batch);  // no commit can follow otherwise
    for (const SeqSpan& s : batch.seqs) {
        QS_CHECK(s.state_slot >= 0 && s.state_slot < g.num_state_slots);
        float* window = cache.conv(gdn_layer) + int64_t(s.state_slot) * W * C;
        float* state = cache.ssm(gdn_layer) + int64_t(s.state_slot) * state_n;
        const int64_t r0 = s.row_begin, n = s.num_tokens;
        if (!s.defer_state) {
            gdn_span(qkv + r0 * C, z + r0 * Vdim, b + r0 * Nv, a + r0 * Nv, n, w, d, window, state, out + r0 * Vdim);
            continue;
        }
        // Deferred: the first row (always kept) into the slot, the rest on copies; keep the inputs
        // for gdn_commit (rows 1.. of the span).
        if (n > 0) gdn_span(qkv + r0 * C, z + r0 * Vdim, b + r0 * Nv, a + r0 * Nv, 1, w, d, window, state, out + r0 * Vdim);
        std::vector<float> win(window, window + W * C), st(state, state + state_n);
        const int64_t r1 = r0 + 1;
        if (n > 1)
            gdn_span(qkv + r1 * C, z + r1 * Vdim, b + r1 * Nv, a + r1 * Nv, n - 1, w, d, win.data(), st.data(),
                     out + r1 * Vdim);
        if (s.spare_slot >= 0) {  // spare-slot mode: the state after every row, for a full acceptance
            QS_CHECK_MSG(s.spare_slot < g.num_state_slots && s.spare_slot != s.state_slot,
                         "gated_delta_net: a deferred span's spare slot must be another valid slot");
            std::copy(win.begin(), win.end(), cache.conv(gdn_layer) + int64_t(s.spare_slot) * W * C);
            std::copy(st.begin(), st.end(), cache.ssm(gdn_layer) + int64_t(s.spare_slot) * state_n);
        }
        if (!keep_stash) continue;
        stash.first_row[s.row_begin] = int64_t(stash.b.size()) / Nv;
        stash.qkv.insert(stash.qkv.end(), qkv + r0 * C, qkv + (r0 + n) * C);
        stash.b.insert(stash.b.end(), b + r0 * Nv, b + (r0 + n) * Nv);
        stash.a.insert(stash.a.end(), a + r0 * Nv, a + (r0 + n) * Nv);
    }
}

void CpuOps::gdn_commit(const GdnWeights& w, const GdnDims& d, const ForwardBatch& commit,
                        const std::vector<int32_t>& deferred_rows, ModelCache& cache, int64_t gdn_layer) {
    const int64_t C = d.conv_dim(), W = d.conv_kernel - 1, Nv = d.num_value_heads;
    const int64_t state_n = Nv * d.key_head_dim * d.value_head_dim;
    check_gdn_geometry(cache.geometry(), d);
    QS_CHECK(deferred_rows.size() == commit.seqs.size());
    const GdnStash& stash = gdn_stash_[gdn_layer];
    for (size_t i = 0; i < commit.seqs.size(); ++i) {
        const SeqSpan& s = commit.seqs[i];
        auto it = stash.first_row.find(deferred_rows[i]);
        QS_CHECK_MSG(it != stash.first_row.end(), "gdn_commit: no deferred span began at that row");
        const int64_t r0 = it->second + 1, n = s.num_tokens;  // row 0 went into the slot in the forward
        QS_CHECK(int64_t(stash.b.size()) / Nv >= r0 + n);
        float* window = cache.conv(gdn_layer) + int64_t(s.state_slot) * W * C;
        float* state = cache.ssm(gdn_layer) + int64_t(s.state_slot) * state_n;
        gdn_span(stash.qkv.data() + r0 * C, nullptr, stash.b.data() + r0 * Nv, stash.a.data() + r0 * Nv, n, w, d, window,
                 state, nullptr);
    }
}

}  // namespace qs
