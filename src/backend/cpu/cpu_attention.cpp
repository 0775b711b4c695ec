// CPU gated full attention (spec §2.3): q/k zero-centred norm per head, partial NeoX RoPE on the
// first rotary_dim dims (pairs (d, d + rotary_dim/2)), K/V stored into the paged cache, causal
// GQA softmax attention in fp32 over the cache, output × sigmoid(gate).
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "core/check.h"

namespace qs {

namespace {

// Rotates the first rotary_dim dims of one head vector in place for position `pos`.
void apply_rope(float* x, int64_t rotary_dim, int32_t pos, double theta) {
    const int64_t half = rotary_dim / 2;
    for (int64_t i = 0; i < half; ++i) {
        // inv_freq as the reference computes it: theta^(-2i/rotary_dim) in fp32, angle in fp32.
        const float inv_freq = float(1.0 / std::pow(theta, double(2 * i) / double(rotary_dim)));
        const float angle = float(pos) * inv_freq;
        const float c = std::cos(angle), s = std::sin(angle);
        const float x1 = x[i], x2 = x[i + half];
        x[i] = x1 * c - x2 * s;
        x[i + half] = x2 * c + x1 * s;
    }
}

}  // namespace

void CpuOps::gated_attention(const float* qg, float* k, const float* v, const std::vector<float>& q_norm,
                             const std::vector<float>& k_norm, const AttentionDims& d, const ForwardBatch& batch,
                             const int32_t* positions, ModelCache& cache, int64_t kv_layer, float* out) {
    const int64_t Hq = d.num_heads, Hkv = d.num_kv_heads, D = d.head_dim;
    const CacheGeometry& g = cache.geometry();
    QS_CHECK(g.head_dim == D && g.num_kv_heads == Hkv && Hq % Hkv == 0);
    const int64_t bs = g.block_size, group = Hq / Hkv;
    float* kc = cache.k(kv_layer);
    float* vc = cache.v(kv_layer);

    // Normalise + rotate k, then store k and v at each row's position.
    for (const SeqSpan& s : batch.seqs) {
        for (int32_t i = 0; i < s.num_tokens; ++i) {
            const int64_t row = s.row_begin + i;
            const int32_t pos = positions[row];
            QS_CHECK(size_t(pos / bs) < s.block_table.size());
            const int64_t page = s.block_table[size_t(pos / bs)];
            QS_CHECK(page >= 0 && page < g.num_blocks);
            const int64_t slot = page * bs + pos % bs;
            for (int64_t h = 0; h < Hkv; ++h) {
                float* kh = k + (row * Hkv + h) * D;
                cpu::rms_norm_zc_row(kh, k_norm.data(), D, d.eps);
                apply_rope(kh, d.rotary_dim, pos, d.rope_theta);
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
                apply_rope(q.data(), d.rotary_dim, pos, d.rope_theta);

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
