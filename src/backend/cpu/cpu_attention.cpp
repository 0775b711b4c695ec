// CPU gated full attention (spec §2.3): q/k zero-centred norm per head, partial NeoX RoPE on the
// first rotary_dim dims (pairs (d, d + rotary_dim/2)), K/V stored into the paged cache, causal
// GQA softmax attention in fp32 over the cache, output × sigmoid(gate). With M-RoPE (images) the
// rotation reads each frequency's angle from the t, h or w position stream (interleaved sections,
// as transformers' Qwen3_5MoeTextRotaryEmbedding); the cache slots and the causal mask still
// follow the 1-D positions.
#include <array>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "core/check.h"

namespace qs {

namespace {

// Which position stream (0 t, 1 h, 2 w) rotates frequency i (AttentionDims::mrope_section).
int mrope_stream(int64_t i, const std::array<int64_t, 3>& section) {
    if (i % 3 == 1 && i < 3 * section[1]) return 1;
    if (i % 3 == 2 && i < 3 * section[2]) return 2;
    return 0;
}

// Rotates the first rotary_dim dims of one head vector in place. pos[k] is the row's position in
// stream k (all equal for text); frequency i takes its angle from stream mrope_stream(i).
void apply_rope(float* x, int64_t rotary_dim, const int32_t pos[3], const AttentionDims& d) {
    const int64_t half = rotary_dim / 2;
    const double theta = d.rope_theta;
    for (int64_t i = 0; i < half; ++i) {
        // inv_freq as the reference computes it: theta^(-2i/rotary_dim) in fp32, angle in fp32.
        const float inv_freq = float(1.0 / std::pow(theta, double(2 * i) / double(rotary_dim)));
        const float angle = float(pos[mrope_stream(i, d.mrope_section)]) * inv_freq;
        const float c = std::cos(angle), s = std::sin(angle);
        const float x1 = x[i], x2 = x[i + half];
        x[i] = x1 * c - x2 * s;
        x[i + half] = x2 * c + x1 * s;
    }
}

}  // namespace

void CpuOps::gated_attention(const float* qg, float* k, const float* v, const ParamVector& q_norm,
                             const ParamVector& k_norm, const AttentionDims& d, const ForwardBatch& batch,
                             const int32_t* positions, ModelCache& cache, int64_t kv_layer, float* out) {
    const int64_t Hq = d.num_heads, Hkv = d.num_kv_heads, D = d.head_dim;
    const CacheGeometry& g = cache.geometry();
    QS_CHECK(g.head_dim == D && g.num_kv_heads == Hkv && Hq % Hkv == 0);
    const int64_t bs = g.block_size, group = Hq / Hkv;
    float* kc = cache.k(kv_layer);
    float* vc = cache.v(kv_layer);
    // Rotary positions: the 1-D positions in all three streams unless the batch has M-RoPE rows.
    const int64_t T = batch.num_tokens();
    const std::vector<int32_t> mrope = batch.has_mrope() ? batch.rope_positions() : std::vector<int32_t>();
    auto rope_pos = [&](int64_t row, int32_t out[3]) {
        for (int64_t k = 0; k < 3; ++k) out[k] = mrope.empty() ? positions[row] : mrope[size_t(k * T + row)];
    };

    // Normalise + rotate k, then store k and v at each row's position.
    for (const SeqSpan& s : batch.seqs) {
        for (int32_t i = 0; i < s.num_tokens; ++i) {
            const int64_t row = s.row_begin + i;
            const int32_t pos = positions[row];
            QS_CHECK(size_t(pos / bs) < s.block_table.size());
            const int64_t page = s.block_table[size_t(pos / bs)];
            QS_CHECK(page >= 0 && page < g.num_blocks);
            const int64_t slot = page * bs + pos % bs;
            int32_t rp[3];
            rope_pos(row, rp);
            for (int64_t h = 0; h < Hkv; ++h) {
                float* kh = k + (row * Hkv + h) * D;
                cpu::rms_norm_zc_row(kh, k_norm.data(), D, d.eps);
                apply_rope(kh, d.rotary_dim, rp, d);
                const float* vh = v + (row * Hkv + h) * D;
                float* kdst = kc + (slot * Hkv + h) * D;
                float* vdst = vc + (slot * Hkv + h) * D;
                for (int64_t j = 0; j < D; ++j) {
                    kdst[j] = cpu::round_for_kv(kh[j], g.kv_dtype);
                    vdst[j] = cpu::round_for_kv(vh[j], g.kv_dtype);
                }
            }
        }
    }

    const float scale = 1.0f / std::sqrt(float(D));
    for (const SeqSpan& s : batch.seqs) {
        const int64_t work = int64_t(s.num_tokens) * Hq * D * 2 * (s.start_pos + s.num_tokens);
#pragma omp parallel for collapse(2) schedule(dynamic) if (work >= cpu::kParallelWork)
        for (int32_t i = 0; i < s.num_tokens; ++i) {
            for (int64_t h = 0; h < Hq; ++h) {
                const int64_t row = s.row_begin + i;
                const int32_t pos = positions[row];
                const int64_t kvh = h / group;
                std::vector<float> q(static_cast<size_t>(D));
                const float* src = qg + (row * Hq + h) * 2 * D;  // query, then gate
                const float* gate = src + D;
                for (int64_t j = 0; j < D; ++j) q[size_t(j)] = src[j];
                cpu::rms_norm_zc_row(q.data(), q_norm.data(), D, d.eps);
                int32_t rp[3];
                rope_pos(row, rp);
                apply_rope(q.data(), d.rotary_dim, rp, d);

                std::vector<float> scores(size_t(pos) + 1);
                float max_score = -INFINITY;
                for (int32_t p = 0; p <= pos; ++p) {
                    const int64_t slot = int64_t(s.block_table[size_t(p / bs)]) * bs + p % bs;
                    const float sc = cpu::dot(q.data(), kc + (slot * Hkv + kvh) * D, D) * scale;
                    scores[size_t(p)] = sc;
                    max_score = std::max(max_score, sc);
                }
                float denom = 0.0f;
                for (float& sc : scores) denom += (sc = std::exp(sc - max_score));
                float* o = out + (row * Hq + h) * D;
                for (int64_t j = 0; j < D; ++j) o[j] = 0.0f;
                for (int32_t p = 0; p <= pos; ++p) {
                    const int64_t slot = int64_t(s.block_table[size_t(p / bs)]) * bs + p % bs;
                    const float* vv = vc + (slot * Hkv + kvh) * D;
                    const float wgt = scores[size_t(p)] / denom;
                    for (int64_t j = 0; j < D; ++j) o[j] += wgt * vv[j];
                }
                for (int64_t j = 0; j < D; ++j) o[j] *= cpu::sigmoid(gate[j]);
            }
        }
    }
}

}  // namespace qs
