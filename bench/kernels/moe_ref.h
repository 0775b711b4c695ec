// Host-side pieces shared by the MoE lab (moe_lab.cu) and the CPU emulation test (moe_emu.cpp):
// random inputs, bf16/e4m3 helpers, random expert weights with their fp8 quantisation (128×128
// blocks, scale_inv = amax/448) and the reference of CpuOps::moe (src/backend/cpu/cpu_moe.cpp):
// routing in float exactly as the CPU code, expert maths in double from the fp32 x and the
// (dequantised) weights.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <numeric>
#include <thread>
#include <vector>

#include <cuda_fp16.h>
#include <cuda_fp8.h>

namespace moe_ref {

struct Rng {
    uint64_t s;
    explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) {}
    uint64_t next() {
        uint64_t z = (s += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    double uniform() { return double(next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
    float sym(float a) { return float((2.0 * uniform() - 1.0) * a); }
    double normal() {
        const double u1 = std::max(uniform(), 1e-300), u2 = uniform();
        return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
    }
};

inline void parallel_for(int64_t n, const std::function<void(int64_t)>& fn) {
    const int nt = std::max(1u, std::min(32u, std::thread::hardware_concurrency()));
    std::vector<std::thread> th;
    std::atomic<int64_t> next{0};
    for (int i = 0; i < nt; ++i)
        th.emplace_back([&] {
            for (int64_t j; (j = next.fetch_add(1)) < n;) fn(j);
        });
    for (auto& t : th) t.join();
}

inline uint16_t f2bf(float f) {  // round to nearest even
    uint32_t u;
    std::memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return uint16_t(u >> 16);
}
inline float bf2f(uint16_t b) {
    const uint32_t u = uint32_t(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

inline float g_e4m3_lut[256];
inline void init_e4m3_lut() {
    for (int i = 0; i < 256; ++i) {
        const __half_raw h = __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(i), __NV_E4M3);
        g_e4m3_lut[i] = __half2float(__half(h));
    }
}

struct Shape {
    const char* name;
    int E, k, H, I, Is;
};

struct HostExperts {
    Shape s;
    std::vector<int64_t> gu_off, d_off, gus_off, ds_off;  // element offsets per expert
    std::vector<uint16_t> gate, up, down;                  // bf16
    std::vector<uint8_t> qgate, qup, qdown;                // e4m3
    std::vector<float> sgate, sup, sdown;                  // fp8 scale_inv
    int Ie(int e) const { return e == s.E ? s.Is : s.I; }
};

// Quantises one [rows, cols] bf16 matrix to e4m3 with 128×128 block scales (amax / 448).
inline void quantise(const uint16_t* w, int rows, int cols, uint8_t* q, float* scale) {
    const int rb = (rows + 127) / 128, cb = (cols + 127) / 128;
    for (int bi = 0; bi < rb; ++bi)
        for (int bj = 0; bj < cb; ++bj) {
            float amax = 0.0f;
            for (int r = bi * 128; r < std::min(rows, bi * 128 + 128); ++r)
                for (int c = bj * 128; c < std::min(cols, bj * 128 + 128); ++c)
                    amax = std::max(amax, std::fabs(bf2f(w[int64_t(r) * cols + c])));
            const float s = amax > 0.0f ? amax / 448.0f : 1.0f;
            scale[bi * cb + bj] = s;
            for (int r = bi * 128; r < std::min(rows, bi * 128 + 128); ++r)
                for (int c = bj * 128; c < std::min(cols, bj * 128 + 128); ++c)
                    q[int64_t(r) * cols + c] =
                        __nv_cvt_float_to_fp8(bf2f(w[int64_t(r) * cols + c]) / s, __NV_SATFINITE, __NV_E4M3);
        }
}

inline HostExperts make_host_experts(const Shape& s, uint64_t seed) {
    HostExperts h;
    h.s = s;
    const int n = s.E + 1;
    int64_t gu = 0, d = 0, gus = 0, ds = 0;
    for (int e = 0; e < n; ++e) {
        const int Ie = e == s.E ? s.Is : s.I;
        h.gu_off.push_back(gu);
        h.d_off.push_back(d);
        h.gus_off.push_back(gus);
        h.ds_off.push_back(ds);
        gu += int64_t(Ie) * s.H;
        d += int64_t(s.H) * Ie;
        gus += int64_t((Ie + 127) / 128) * ((s.H + 127) / 128);
        ds += int64_t((s.H + 127) / 128) * ((Ie + 127) / 128);
    }
    h.gu_off.push_back(gu);
    h.d_off.push_back(d);
    h.gus_off.push_back(gus);
    h.ds_off.push_back(ds);
    h.gate.resize(gu);
    h.up.resize(gu);
    h.down.resize(d);
    h.qgate.resize(gu);
    h.qup.resize(gu);
    h.qdown.resize(d);
    h.sgate.resize(gus);
    h.sup.resize(gus);
    h.sdown.resize(ds);
    parallel_for(n, [&](int64_t e) {
        Rng r(seed * 1000003 + uint64_t(e));
        const int Ie = h.Ie(int(e));
        // Magnitudes vary per expert, per matrix and per 128×128 block (0.5..2×), so every fp8 block
        // scale differs and a wrong scale index shows up as a large error.
        const double kg = std::sqrt(3.0 / s.H), kd = std::sqrt(3.0 / Ie);
        auto fill = [&](uint16_t* w, int rows, int cols, double base, int salt) {
            const double m = base * (0.5 + 1.5 * r.uniform());
            for (int i = 0; i < rows; ++i)
                for (int c = 0; c < cols; ++c) {
                    const double f = 0.5 + 0.5 * double((i / 128 * 3 + c / 128 * 5 + salt) % 4);
                    w[int64_t(i) * cols + c] = f2bf(r.sym(float(m * f)));
                }
        };
        fill(&h.gate[h.gu_off[e]], Ie, s.H, kg, int(e));
        fill(&h.up[h.gu_off[e]], Ie, s.H, kg, int(e) + 1);
        fill(&h.down[h.d_off[e]], s.H, Ie, kd, int(e) + 2);
        quantise(&h.gate[h.gu_off[e]], Ie, s.H, &h.qgate[h.gu_off[e]], &h.sgate[h.gus_off[e]]);
        quantise(&h.up[h.gu_off[e]], Ie, s.H, &h.qup[h.gu_off[e]], &h.sup[h.gus_off[e]]);
        quantise(&h.down[h.d_off[e]], s.H, Ie, &h.qdown[h.d_off[e]], &h.sdown[h.ds_off[e]]);
    });
    return h;
}

// ------------------------------------------------------------------------------------------
// Reference (CpuOps::moe): routing in float exactly as the CPU code, expert maths in double.
// ------------------------------------------------------------------------------------------

inline void route_ref(const float* l, int E, int k, bool norm, std::vector<int>& ids, std::vector<float>& w) {
    const float mx = *std::max_element(l, l + E);
    std::vector<float> p(E);
    float sum = 0.0f;
    for (int e = 0; e < E; ++e) sum += (p[e] = std::exp(l[e] - mx));
    for (float& v : p) v /= sum;
    std::vector<int> idx(E);
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                      [&](int i, int j) { return p[i] > p[j] || (p[i] == p[j] && i < j); });
    float top = 0.0f;
    for (int j = 0; j < k; ++j) top += p[idx[j]];
    ids.assign(idx.begin(), idx.begin() + k);
    w.resize(k);
    for (int j = 0; j < k; ++j) w[j] = norm ? p[idx[j]] / top : p[idx[j]];
}

inline void expert_ref(const HostExperts& h, bool fp8, int e, const float* x, std::vector<double>& out) {
    const Shape& s = h.s;
    const int Ie = h.Ie(e), H = s.H;
    const int hb = (H + 127) / 128, ib = (Ie + 127) / 128;
    std::vector<double> a(Ie);
    for (int i = 0; i < Ie; ++i) {
        double g = 0.0, u = 0.0;
        const int64_t row = h.gu_off[e] + int64_t(i) * H;
        for (int c = 0; c < H; ++c) {
            double wg, wu;
            if (fp8) {
                const int64_t si = h.gus_off[e] + (i / 128) * hb + c / 128;
                wg = double(g_e4m3_lut[h.qgate[row + c]]) * h.sgate[si];
                wu = double(g_e4m3_lut[h.qup[row + c]]) * h.sup[si];
            } else {
                wg = bf2f(h.gate[row + c]);
                wu = bf2f(h.up[row + c]);
            }
            g += double(x[c]) * wg;
            u += double(x[c]) * wu;
        }
        a[i] = g / (1.0 + std::exp(-g)) * u;
    }
    out.assign(H, 0.0);
    for (int o = 0; o < H; ++o) {
        double acc = 0.0;
        const int64_t row = h.d_off[e] + int64_t(o) * Ie;
        for (int i = 0; i < Ie; ++i) {
            const double wd = fp8 ? double(g_e4m3_lut[h.qdown[row + i]]) * h.sdown[h.ds_off[e] + (o / 128) * ib + i / 128]
                                  : double(bf2f(h.down[row + i]));
            acc += a[i] * wd;
        }
        out[o] = acc;
    }
}

inline void moe_ref_token(const HostExperts& h, bool fp8, bool norm, const float* x, const float* logits, float sg_logit,
                   std::vector<double>& y) {
    const Shape& s = h.s;
    std::vector<int> ids;
    std::vector<float> w;
    route_ref(logits, s.E, s.k, norm, ids, w);
    y.assign(s.H, 0.0);
    std::vector<double> o;
    for (int j = 0; j < s.k; ++j) {
        expert_ref(h, fp8, ids[j], x, o);
        for (int c = 0; c < s.H; ++c) y[c] += double(w[j]) * o[c];
    }
    expert_ref(h, fp8, s.E, x, o);
    const double sg = 1.0 / (1.0 + std::exp(-double(sg_logit)));
    for (int c = 0; c < s.H; ++c) y[c] += sg * o[c];
}

// ------------------------------------------------------------------------------------------
// Inputs
// ------------------------------------------------------------------------------------------

enum class Routing { kGapped, kSkewed, kNormal };

struct Inputs {
    int T = 0;
    std::vector<float> x, logits, sg;
};

inline Inputs make_inputs(const Shape& s, int T, Routing routing, Rng& r) {
    Inputs in;
    in.T = T;
    in.x.resize(size_t(T) * s.H);
    in.logits.resize(size_t(T) * s.E);
    in.sg.resize(T);
    for (auto& v : in.x) v = float(r.normal());
    for (auto& v : in.sg) v = float(r.normal() * 2.0);
    std::vector<int> perm(s.E);
    for (int t = 0; t < T; ++t) {
        float* l = &in.logits[size_t(t) * s.E];
        if (routing == Routing::kNormal) {
            for (int e = 0; e < s.E; ++e) l[e] = float(r.normal());
            continue;
        }
        // Distinct ranks 3·rank/E plus noise below one rank step: neighbouring probabilities differ by
        // >= exp(2/E) - 1 relative, far above fp32 rounding.
        std::iota(perm.begin(), perm.end(), 0);
        for (int e = s.E - 1; e > 0; --e) std::swap(perm[e], perm[r.next() % uint64_t(e + 1)]);
        if (routing == Routing::kSkewed && r.uniform() < 0.75) {
            // 3/4 of the tokens rank experts 0..11 above all others (hot experts, many tiles each).
            std::vector<std::pair<int, int>> pr(s.E);
            for (int e = 0; e < s.E; ++e) pr[e] = {perm[e] + (e < 12 ? s.E : 0), e};
            std::sort(pr.begin(), pr.end());
            for (int i = 0; i < s.E; ++i) perm[pr[i].second] = i;
        }
        for (int e = 0; e < s.E; ++e) l[e] = 3.0f * (float(perm[e]) + 0.45f * float(r.uniform())) / float(s.E);
        // One token in 4 gets an exact tie between its k-th and (k+1)-th choices (or 1st and 2nd).
        if (r.next() % 4 == 0) {
            const int want_a = s.E - (r.next() % 2 ? s.k : 1), want_b = want_a - 1;  // ranks
            int ea = 0, eb = 0;
            for (int e = 0; e < s.E; ++e) {
                if (perm[e] == want_a) ea = e;
                if (perm[e] == want_b) eb = e;
            }
            l[eb] = l[ea];
        }
    }
    return in;
}

// Router weights for the small-T path's v2 (MoeParams::router_weight / shared_gate_weight, fp32
// [E, H] and [H]), which computes the logits itself.
//  exact (dense = false): x[t, c] for c < T becomes 1 if c == t else 0, and router column t holds
//    token t's logits (the shared gate's entry t its sg): every other product is an exact zero, so
//    any fp32 summation order gives exactly in.logits and in.sg (gaps and exact ties stay). Needs
//    T <= H.
//  dense: N(0, 1/H) weights everywhere; in.logits and in.sg are replaced by the float64 products
//    rounded to float (the GPU's fp32 sums differ in the last bits: a near-tie could flip a choice,
//    ~1e-4 per token at E = 256).
struct RouterWeights {
    std::vector<float> w, sg;  // [E, H], [H]
};
inline RouterWeights make_router_weights(const Shape& s, Inputs& in, bool dense, Rng& r) {
    RouterWeights rw;
    rw.w.assign(size_t(s.E) * s.H, 0.0f);
    rw.sg.assign(size_t(s.H), 0.0f);
    const int T = in.T;
    if (!dense) {
        for (int t = 0; t < T; ++t) {
            for (int c = 0; c < T; ++c) in.x[size_t(t) * s.H + c] = c == t ? 1.0f : 0.0f;
            for (int e = 0; e < s.E; ++e) rw.w[size_t(e) * s.H + t] = in.logits[size_t(t) * s.E + e];
            rw.sg[size_t(t)] = in.sg[size_t(t)];
        }
        return rw;
    }
    const double sd = 1.0 / std::sqrt(double(s.H));
    for (auto& v : rw.w) v = float(r.normal() * sd);
    for (auto& v : rw.sg) v = float(r.normal() * sd);
    for (int t = 0; t < T; ++t) {
        const float* x = &in.x[size_t(t) * s.H];
        for (int e = 0; e <= s.E; ++e) {
            const float* w = e < s.E ? &rw.w[size_t(e) * s.H] : rw.sg.data();
            double acc = 0.0;
            for (int c = 0; c < s.H; ++c) acc += double(w[c]) * double(x[c]);
            (e < s.E ? in.logits[size_t(t) * s.E + e] : in.sg[size_t(t)]) = float(acc);
        }
    }
    return rw;
}

}  // namespace moe_ref
