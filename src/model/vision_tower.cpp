#include "model/vision_tower.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/dtype.h"

namespace qs {

namespace {

Result<std::vector<float>> read_tensor(const Checkpoint& ckpt, const std::string& name,
                                       const std::vector<int64_t>& shape) {
    const TensorInfo* t = ckpt.find(name);
    if (t == nullptr) return not_found(fmt::format("vision tower tensor {} is missing", name));
    if (t->shape != shape) {
        return corrupt_data(fmt::format("vision tower tensor {} has shape [{}], want [{}]", name,
                                        fmt::join(t->shape, ", "), fmt::join(shape, ", ")));
    }
    std::vector<float> v(size_t(t->numel()));
    for (size_t i = 0; i < v.size(); ++i) v[i] = load_as_f32(t->data, t->dtype, i);
    return v;
}

// y[rows][out] = x[rows][in] · wᵀ + b
void linear(const float* x, int64_t rows, const std::vector<float>& w, const std::vector<float>& b, int in, int out,
            float* y) {
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * in;
        for (int o = 0; o < out; ++o) {
            const float* wr = w.data() + size_t(o) * size_t(in);
            double s = 0;
            for (int i = 0; i < in; ++i) s += double(xr[i]) * wr[i];
            y[r * out + o] = float(s + b[size_t(o)]);
        }
    }
}

void layer_norm(const float* x, int64_t rows, int n, const std::vector<float>& w, const std::vector<float>& b,
                float* y) {
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * n;
        double mean = 0;
        for (int i = 0; i < n; ++i) mean += xr[i];
        mean /= n;
        double var = 0;
        for (int i = 0; i < n; ++i) var += (xr[i] - mean) * (xr[i] - mean);
        var /= n;
        const double inv = 1.0 / std::sqrt(var + 1e-6);
        for (int i = 0; i < n; ++i) y[r * n + i] = float((xr[i] - mean) * inv * w[size_t(i)] + b[size_t(i)]);
    }
}

float gelu_tanh(float x) {
    const double k = std::sqrt(2.0 / M_PI);
    return float(0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * double(x) * x * x))));
}

float gelu_erf(float x) { return float(0.5 * x * (1.0 + std::erf(double(x) / std::sqrt(2.0)))); }

}  // namespace

Result<VisionTower> VisionTower::load(const Checkpoint& ckpt, const VisionConfig& cfg, const std::string& prefix) {
    VisionTower t;
    t.cfg_ = cfg;
    const int H = cfg.hidden_size, I = cfg.intermediate_size, M2 = cfg.spatial_merge_size * cfg.spatial_merge_size;
    auto lin = [&](const std::string& name, int in, int out, Linear* l) -> Status {
        l->in = in;
        l->out = out;
        QS_ASSIGN_OR_RETURN(l->w, read_tensor(ckpt, prefix + name + ".weight", {out, in}));
        QS_ASSIGN_OR_RETURN(l->b, read_tensor(ckpt, prefix + name + ".bias", {out}));
        return Status::ok();
    };
    auto norm = [&](const std::string& name, Norm* n) -> Status {
        QS_ASSIGN_OR_RETURN(n->w, read_tensor(ckpt, prefix + name + ".weight", {H}));
        QS_ASSIGN_OR_RETURN(n->b, read_tensor(ckpt, prefix + name + ".bias", {H}));
        return Status::ok();
    };
    {
        // Conv3d weight [H, C, T, P, P]: flattened, a [H][C·T·P·P] linear map in the patch row's order.
        QS_ASSIGN_OR_RETURN(t.patch_embed_.w, read_tensor(ckpt, prefix + "patch_embed.proj.weight",
                                                          {H, cfg.in_channels, cfg.temporal_patch_size,
                                                           cfg.patch_size, cfg.patch_size}));
        QS_ASSIGN_OR_RETURN(t.patch_embed_.b, read_tensor(ckpt, prefix + "patch_embed.proj.bias", {H}));
        t.patch_embed_.in = cfg.patch_dim();
        t.patch_embed_.out = H;
    }
    QS_ASSIGN_OR_RETURN(t.pos_embed_, read_tensor(ckpt, prefix + "pos_embed.weight", {cfg.num_position_embeddings, H}));
    t.blocks_.resize(size_t(cfg.depth));
    for (int i = 0; i < cfg.depth; ++i) {
        const std::string b = fmt::format("blocks.{}.", i);
        Block& blk = t.blocks_[size_t(i)];
        QS_RETURN_IF_ERROR(norm(b + "norm1", &blk.norm1));
        QS_RETURN_IF_ERROR(norm(b + "norm2", &blk.norm2));
        QS_RETURN_IF_ERROR(lin(b + "attn.qkv", H, 3 * H, &blk.qkv));
        QS_RETURN_IF_ERROR(lin(b + "attn.proj", H, H, &blk.proj));
        QS_RETURN_IF_ERROR(lin(b + "mlp.linear_fc1", H, I, &blk.fc1));
        QS_RETURN_IF_ERROR(lin(b + "mlp.linear_fc2", I, H, &blk.fc2));
    }
    QS_RETURN_IF_ERROR(norm("merger.norm", &t.merger_norm_));
    QS_RETURN_IF_ERROR(lin("merger.linear_fc1", H * M2, H * M2, &t.merger_fc1_));
    QS_RETURN_IF_ERROR(lin("merger.linear_fc2", H * M2, cfg.out_hidden_size, &t.merger_fc2_));
    return t;
}

Result<std::vector<float>> VisionTower::forward(const std::vector<const ImagePatches*>& images,
                                                std::vector<float>* blocks_out) const {
    const int H = cfg_.hidden_size, M = cfg_.spatial_merge_size, nh = cfg_.num_heads, hd = cfg_.head_dim();
    const int side = int(std::lround(std::sqrt(double(cfg_.num_position_embeddings))));
    int64_t rows = 0;
    for (const ImagePatches* im : images) {
        if (im->patch_dim != cfg_.patch_dim()) {
            return invalid_argument(fmt::format("image patch rows have {} values, the tower takes {}", im->patch_dim,
                                                cfg_.patch_dim()));
        }
        if (im->grid_h % M != 0 || im->grid_w % M != 0) return invalid_argument("image grid not a multiple of the merge size");
        rows += im->rows();
    }
    // Patch embedding, position embeddings, and each row's (h, w) grid coordinates.
    std::vector<float> x(size_t(rows) * size_t(H));
    std::vector<int> pos_h(static_cast<size_t>(rows)), pos_w(static_cast<size_t>(rows));
    std::vector<int64_t> seg_begin;  // attention segments: one per image frame
    std::vector<float> acc(static_cast<size_t>(H));
    int64_t r0 = 0;
    for (const ImagePatches* im : images) {
        linear(im->values.data(), im->rows(), patch_embed_.w, patch_embed_.b, patch_embed_.in, H, x.data() + r0 * H);
        const int gh = im->grid_h, gw = im->grid_w;
        for (int t = 0; t < im->grid_t; ++t) {
            seg_begin.push_back(r0);
            int64_t r = r0;
            for (int bh = 0; bh < gh / M; ++bh) {
                for (int bw = 0; bw < gw / M; ++bw) {
                    for (int mh = 0; mh < M; ++mh) {
                        for (int mw = 0; mw < M; ++mw, ++r) {
                            const int h = bh * M + mh, w = bw * M + mw;
                            pos_h[size_t(r)] = h;
                            pos_w[size_t(r)] = w;
                            // Bilinear, align_corners: src = index·(side-1)/(size-1) in float.
                            const float sh = float(h) * float(side - 1) / float(std::max(gh - 1, 1));
                            const float sw = float(w) * float(side - 1) / float(std::max(gw - 1, 1));
                            const float fh = std::floor(sh), fw = std::floor(sw);
                            std::fill(acc.begin(), acc.end(), 0.0f);
                            for (int a = 0; a < 2; ++a) {
                                const int th = std::clamp(int(fh) + a, 0, side - 1);
                                const float wh = std::max(0.0f, 1.0f - std::fabs(sh - fh - float(a)));
                                for (int b = 0; b < 2; ++b) {
                                    const int tw = std::clamp(int(fw) + b, 0, side - 1);
                                    const float ww = std::max(0.0f, 1.0f - std::fabs(sw - fw - float(b)));
                                    const float wgt = wh * ww;
                                    const float* pe = pos_embed_.data() + size_t(th * side + tw) * size_t(H);
                                    for (int i = 0; i < H; ++i) acc[size_t(i)] += pe[i] * wgt;
                                }
                            }
                            float* xr = x.data() + r * H;
                            for (int i = 0; i < H; ++i) xr[i] += acc[size_t(i)];
                        }
                    }
                }
            }
            r0 = r;
        }
    }
    seg_begin.push_back(rows);

    // Axial rotary: head dims [0, hd/4) rotate by h·inv_freq, [hd/4, hd/2) by w·inv_freq, and the
    // second half repeats the first (rotate-half pairs (d, d + hd/2)).
    const int quarter = hd / 4;
    std::vector<float> inv_freq(static_cast<size_t>(quarter));
    for (int i = 0; i < quarter; ++i) {
        inv_freq[size_t(i)] = float(1.0 / std::pow(cfg_.rope_theta, double(2 * i) / double(hd / 2)));
    }
    std::vector<float> cosv(size_t(rows) * size_t(hd / 2)), sinv(size_t(rows) * size_t(hd / 2));
    for (int64_t r = 0; r < rows; ++r) {
        for (int d = 0; d < hd / 2; ++d) {
            const float p = d < quarter ? float(pos_h[size_t(r)]) : float(pos_w[size_t(r)]);
            const float ang = p * inv_freq[size_t(d % quarter)];
            cosv[size_t(r * (hd / 2) + d)] = std::cos(ang);
            sinv[size_t(r * (hd / 2) + d)] = std::sin(ang);
        }
    }
    auto rope = [&](float* v, int64_t r) {
        for (int d = 0; d < hd / 2; ++d) {
            const float c = cosv[size_t(r * (hd / 2) + d)], s = sinv[size_t(r * (hd / 2) + d)];
            const float a = v[d], b = v[d + hd / 2];
            v[d] = a * c - b * s;
            v[d + hd / 2] = b * c + a * s;
        }
    };

    std::vector<float> h(x.size()), qkv(size_t(rows) * size_t(3 * H)), att(x.size()), tmp(x.size());
    std::vector<float> mid(size_t(rows) * size_t(cfg_.intermediate_size));
    const float scale = 1.0f / std::sqrt(float(hd));
    for (const Block& blk : blocks_) {
        layer_norm(x.data(), rows, H, blk.norm1.w, blk.norm1.b, h.data());
        linear(h.data(), rows, blk.qkv.w, blk.qkv.b, H, 3 * H, qkv.data());
        for (int64_t r = 0; r < rows; ++r) {
            for (int head = 0; head < nh; ++head) {
                rope(qkv.data() + r * 3 * H + head * hd, r);      // q
                rope(qkv.data() + r * 3 * H + H + head * hd, r);  // k
            }
        }
        for (size_t s = 0; s + 1 < seg_begin.size(); ++s) {
            const int64_t b0 = seg_begin[s], b1 = seg_begin[s + 1];
            std::vector<double> p(size_t(b1 - b0));
            for (int head = 0; head < nh; ++head) {
                for (int64_t i = b0; i < b1; ++i) {
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
                        double acc = 0;
                        for (int64_t j = b0; j < b1; ++j) acc += p[size_t(j - b0)] * qkv[size_t(j * 3 * H + 2 * H + head * hd + d)];
                        o[d] = float(acc / sum);
                    }
                }
            }
        }
        linear(att.data(), rows, blk.proj.w, blk.proj.b, H, H, tmp.data());
        for (size_t i = 0; i < x.size(); ++i) x[i] += tmp[i];
        layer_norm(x.data(), rows, H, blk.norm2.w, blk.norm2.b, h.data());
        linear(h.data(), rows, blk.fc1.w, blk.fc1.b, H, cfg_.intermediate_size, mid.data());
        for (float& v : mid) v = gelu_tanh(v);
        linear(mid.data(), rows, blk.fc2.w, blk.fc2.b, cfg_.intermediate_size, H, tmp.data());
        for (size_t i = 0; i < x.size(); ++i) x[i] += tmp[i];
    }
    if (blocks_out != nullptr) *blocks_out = x;

    // Merger: LayerNorm per patch row, then each M·M consecutive rows are one merged token.
    layer_norm(x.data(), rows, H, merger_norm_.w, merger_norm_.b, h.data());
    const int64_t merged = rows / (M * M);
    const int mh = H * M * M;
    std::vector<float> m1(size_t(merged) * size_t(mh));
    linear(h.data(), merged, merger_fc1_.w, merger_fc1_.b, mh, mh, m1.data());
    for (float& v : m1) v = gelu_erf(v);
    std::vector<float> out(size_t(merged) * size_t(cfg_.out_hidden_size));
    linear(m1.data(), merged, merger_fc2_.w, merger_fc2_.b, mh, cfg_.out_hidden_size, out.data());
    return out;
}

}  // namespace qs
