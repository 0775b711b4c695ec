// The vision tower's reference forward on the host (spec §1.3; Ops::vision_tower's default, so
// every backend without its own has it): fp32 storage, double accumulation, written for clarity,
// not speed. Checked against transformers 5.17 in tests/model/vision_tower_test.cpp; the CUDA
// tower (backend/cuda/vision_*) is checked against it. Pure function of its inputs: any thread.
#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_ops.h"
#include "core/check.h"

namespace qs::cpu {

namespace {

// y[rows][out] = x[rows][in] · wᵀ + b
void linear_bias(const float* x, int64_t rows, const VisionLinear& l, float* y) {
    const int in = l.in, out = l.out;
#pragma omp parallel for schedule(static) if (rows * in * out >= kParallelWork)
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * in;
        for (int o = 0; o < out; ++o) {
            const float* wr = l.w.data() + size_t(o) * size_t(in);
            double s = 0;
            for (int i = 0; i < in; ++i) s += double(xr[i]) * wr[i];
            y[r * out + o] = float(s + l.b[size_t(o)]);
        }
    }
}

void layer_norm(const float* x, int64_t rows, int n, const VisionNorm& norm, double eps, float* y) {
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * n;
        double mean = 0;
        for (int i = 0; i < n; ++i) mean += xr[i];
        mean /= n;
        double var = 0;
        for (int i = 0; i < n; ++i) var += (xr[i] - mean) * (xr[i] - mean);
        var /= n;
        const double inv = 1.0 / std::sqrt(var + eps);
        for (int i = 0; i < n; ++i) y[r * n + i] = float((xr[i] - mean) * inv * norm.w[size_t(i)] + norm.b[size_t(i)]);
    }
}

}  // namespace

void vision_position_taps(const VisionGrid& g, int merge, int side, int32_t* index, float* weight) {
    int64_t r = 0;
    for (int t = 0; t < g.t; ++t) {
        for (int bh = 0; bh < g.h / merge; ++bh) {
            for (int bw = 0; bw < g.w / merge; ++bw) {
                for (int mh = 0; mh < merge; ++mh) {
                    for (int mw = 0; mw < merge; ++mw, ++r) {
                        const int h = bh * merge + mh, w = bw * merge + mw;
                        // Bilinear, align_corners: src = index·(side-1)/(size-1) in float.
                        const float sh = float(h) * float(side - 1) / float(std::max(g.h - 1, 1));
                        const float sw = float(w) * float(side - 1) / float(std::max(g.w - 1, 1));
                        const float fh = std::floor(sh), fw = std::floor(sw);
                        for (int a = 0; a < 2; ++a) {
                            const int th = std::clamp(int(fh) + a, 0, side - 1);
                            const float wh = std::max(0.0f, 1.0f - std::fabs(sh - fh - float(a)));
                            for (int b = 0; b < 2; ++b) {
                                const int tw = std::clamp(int(fw) + b, 0, side - 1);
                                const float ww = std::max(0.0f, 1.0f - std::fabs(sw - fw - float(b)));
                                index[r * 4 + a * 2 + b] = th * side + tw;
                                weight[r * 4 + a * 2 + b] = wh * ww;
                            }
                        }
                    }
                }
            }
        }
    }
}

void vision_rotary_tables(const VisionGrid& g, int merge, int head_dim, double theta, float* cos_out,
                          float* sin_out) {
    const int half = head_dim / 2, quarter = head_dim / 4;
    std::vector<float> inv_freq(static_cast<size_t>(quarter));
    for (int i = 0; i < quarter; ++i) inv_freq[size_t(i)] = float(1.0 / std::pow(theta, double(2 * i) / double(half)));
    int64_t r = 0;
    for (int t = 0; t < g.t; ++t)
        for (int bh = 0; bh < g.h / merge; ++bh)
            for (int bw = 0; bw < g.w / merge; ++bw)
                for (int mh = 0; mh < merge; ++mh)
                    for (int mw = 0; mw < merge; ++mw, ++r)
                        for (int d = 0; d < half; ++d) {
                            const float p = d < quarter ? float(bh * merge + mh) : float(bw * merge + mw);
                            const float ang = p * inv_freq[size_t(d % quarter)];
                            cos_out[r * half + d] = std::cos(ang);
                            sin_out[r * half + d] = std::sin(ang);
                        }
}

float gelu_tanh(float x) {
    const double k = std::sqrt(2.0 / M_PI);
    return float(0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * double(x) * x * x))));
}

float gelu_erf(float x) { return float(0.5 * x * (1.0 + std::erf(double(x) / std::sqrt(2.0)))); }

void vision_tower(const VisionWeights& wts, const float* patches, const std::vector<VisionGrid>& grids, float* out,
                  float* blocks_out) {
    const VisionDims& dm = wts.dims;
    const int H = dm.hidden, M = dm.merge, nh = dm.heads, hd = dm.head_dim(), side = dm.pos_side;
    int64_t rows = 0;
    for (const VisionGrid& g : grids) rows += g.rows();
    // Patch embedding, position embeddings (bilinear taps), rotary tables, attention segments.
    std::vector<float> x(size_t(rows) * size_t(H));
    linear_bias(patches, rows, wts.patch_embed, x.data());
    std::vector<int32_t> tap_index(size_t(rows) * 4);
    std::vector<float> tap_weight(size_t(rows) * 4);
    std::vector<float> cosv(size_t(rows) * size_t(hd / 2)), sinv(size_t(rows) * size_t(hd / 2));
    std::vector<int64_t> seg_begin;  // attention segments: one per image frame
    int64_t r0 = 0;
    for (const VisionGrid& g : grids) {
        vision_position_taps(g, M, side, tap_index.data() + r0 * 4, tap_weight.data() + r0 * 4);
        vision_rotary_tables(g, M, hd, dm.rope_theta, cosv.data() + r0 * (hd / 2), sinv.data() + r0 * (hd / 2));
        for (int t = 0; t < g.t; ++t) seg_begin.push_back(r0 + int64_t(t) * g.h * g.w);
        r0 += g.rows();
    }
    seg_begin.push_back(rows);
    std::vector<float> acc(static_cast<size_t>(H));
    for (int64_t r = 0; r < rows; ++r) {
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int tap = 0; tap < 4; ++tap) {
            const float* pe = wts.pos_embed.data() + size_t(tap_index[size_t(r * 4 + tap)]) * size_t(H);
            const float wgt = tap_weight[size_t(r * 4 + tap)];
            for (int i = 0; i < H; ++i) acc[size_t(i)] += pe[i] * wgt;
        }
        float* xr = x.data() + r * H;
        for (int i = 0; i < H; ++i) xr[i] += acc[size_t(i)];
    }

    // Axial rotary: head dims [0, hd/4) rotate by the row, [hd/4, hd/2) by the column, rotate-half
    // pairs (d, d + hd/2).
    auto rope = [&](float* v, int64_t r) {
        for (int d = 0; d < hd / 2; ++d) {
            const float c = cosv[size_t(r * (hd / 2) + d)], s = sinv[size_t(r * (hd / 2) + d)];
            const float a = v[d], b = v[d + hd / 2];
            v[d] = a * c - b * s;
            v[d + hd / 2] = b * c + a * s;
        }
    };

    std::vector<float> h(x.size()), qkv(size_t(rows) * size_t(3 * H)), att(x.size()), tmp(x.size());
    std::vector<float> mid(size_t(rows) * size_t(dm.intermediate));
    const float scale = 1.0f / std::sqrt(float(hd));
    for (const VisionBlockWeights& blk : wts.blocks) {
        layer_norm(x.data(), rows, H, blk.norm1, dm.ln_eps, h.data());
        linear_bias(h.data(), rows, blk.qkv, qkv.data());
        for (int64_t r = 0; r < rows; ++r) {
            for (int head = 0; head < nh; ++head) {
                rope(qkv.data() + r * 3 * H + head * hd, r);      // q
                rope(qkv.data() + r * 3 * H + H + head * hd, r);  // k
            }
        }
        for (size_t s = 0; s + 1 < seg_begin.size(); ++s) {
            const int64_t b0 = seg_begin[s], b1 = seg_begin[s + 1];
#pragma omp parallel for collapse(2) schedule(dynamic) if ((b1 - b0) * (b1 - b0) * H >= kParallelWork)
            for (int head = 0; head < nh; ++head) {
                for (int64_t i = b0; i < b1; ++i) {
                    std::vector<double> p(size_t(b1 - b0));
                    const float* q = qkv.data() + i * 3 * H + head * hd;
                    double mx = -1e300;
                    for (int64_t j = b0; j < b1; ++j) {
                        const float* k = qkv.data() + j * 3 * H + H + head * hd;
                        double dot = 0;
                        for (int d = 0; d < hd; ++d) dot += double(q[d]) * k[d];
                        p[size_t(j - b0)] = dot * scale;
                        mx = std::max(mx, p[size_t(j - b0)]);
                    }
                    double sum = 0;
                    for (auto& v : p) sum += (v = std::exp(v - mx));
                    float* o = att.data() + i * H + head * hd;
                    for (int d = 0; d < hd; ++d) {
                        double a = 0;
                        for (int64_t j = b0; j < b1; ++j) a += p[size_t(j - b0)] * qkv[size_t(j * 3 * H + 2 * H + head * hd + d)];
                        o[d] = float(a / sum);
                    }
                }
            }
        }
        linear_bias(att.data(), rows, blk.proj, tmp.data());
        for (size_t i = 0; i < x.size(); ++i) x[i] += tmp[i];
        layer_norm(x.data(), rows, H, blk.norm2, dm.ln_eps, h.data());
        linear_bias(h.data(), rows, blk.fc1, mid.data());
        for (float& v : mid) v = gelu_tanh(v);
        linear_bias(mid.data(), rows, blk.fc2, tmp.data());
        for (size_t i = 0; i < x.size(); ++i) x[i] += tmp[i];
    }
    if (blocks_out != nullptr) std::copy(x.begin(), x.end(), blocks_out);

    // Merger: LayerNorm per patch row, then each M·M consecutive rows are one merged token.
    layer_norm(x.data(), rows, H, wts.merger_norm, dm.ln_eps, h.data());
    const int64_t merged = rows / (M * M);
    std::vector<float> m1(size_t(merged) * size_t(wts.merger_fc1.out));
    linear_bias(h.data(), merged, wts.merger_fc1, m1.data());
    for (float& v : m1) v = gelu_erf(v);
    linear_bias(m1.data(), merged, wts.merger_fc2, out);
}

}  // namespace qs::cpu
