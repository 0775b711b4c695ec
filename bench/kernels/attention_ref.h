// Host side of the attention lab, shared by bench/kernels/attention_lab.cu (runs the kernels on
// the GPU) and bench/kernels/emu/attention_emu.cpp (runs the same kernel code in a host SIMT
// emulator): random cases (batch, paged cache with poison, inputs), the reference with the maths
// of CpuOps::gated_attention (src/backend/cpu/cpu_attention.cpp; attention accumulated in double
// here), and the comparison with its tolerances.
//
// Tolerances. out: the kernels round q and the softmax weights p to bf16 (bf16 cache) or f16 (fp8
// cache; the fp8 values are exact in f16) before the tensor-core products, as flash attention does;
// the reference keeps them in fp32/double. A relative rounding of 2^-9 (bf16) on q moves each score
// by ~1e-3 and each weight by ~1e-3 relative. Measured in the emulator (same roundings as the GPU):
// ‖out−ref‖/‖ref‖ 2-3e-3 (bf16; 7e-4 once the reference rounds q too), 2-4e-4 (f16): bounds 1e-2
// (bf16) and 3e-3 (fp8). cache: written entries must equal the reference rounded to the
// dtype except for rare 1-ulp flips where the fp32 k (same op order; only the order of the sum of
// squares and the sin/cos routine differ) sits on a rounding boundary: <= 0.1 % of entries, each
// <= 1 ulp;
// every entry not written this step must keep its bytes (poison included).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cuda/attention_kernels.h"
#include "core/dtype.h"  // header-only bf16 helpers (round to nearest even)

namespace attn_lab {

using qs::cuda::DeviceBatch;
using qs::cuda::DeviceKvDtype;
using qs::cuda::DeviceSeq;

// ---- fp8 e4m3 on the host: copies of core/dtype.cpp (not linked here) ----------------------
inline float fp8_to_f32(uint8_t b) {
    const uint32_t sign = b & 0x80u, exp = (b >> 3) & 0xfu, man = b & 0x7u;
    if (exp == 15 && man == 7) return std::nanf("");
    const float v = exp == 0 ? std::ldexp(float(man), -9) : std::ldexp(1.0f + float(man) / 8.0f, int(exp) - 7);
    return sign ? -v : v;
}
inline uint8_t f32_to_fp8(float f) {
    if (std::isnan(f)) return 0x7f;
    const uint8_t sign = std::signbit(f) ? 0x80 : 0;
    const float a = std::fabs(f);
    if (a >= 448.0f) return uint8_t(sign | 0x7e);
    if (a < std::ldexp(1.0f, -6)) return uint8_t(sign | uint8_t(std::nearbyint(a * 512.0f)));
    int e;
    std::frexp(a, &e);
    int exp = e - 1;
    float r = std::nearbyint(std::ldexp(a, 3 - exp));
    if (r >= 16.0f) {
        r = 8.0f;
        exp += 1;
    }
    uint8_t bits = uint8_t(((exp + 7) << 3) | (int(r) - 8));
    if (bits > 0x7e) bits = 0x7e;
    return uint8_t(sign | bits);
}
inline float round_kv(float x, DeviceKvDtype t) {
    return t == DeviceKvDtype::kBF16 ? qs::round_to_bf16(x) : fp8_to_f32(f32_to_fp8(x));
}
inline size_t esize(DeviceKvDtype t) { return t == DeviceKvDtype::kBF16 ? 2 : 1; }
inline const char* dname(DeviceKvDtype t) { return t == DeviceKvDtype::kBF16 ? "bf16" : "fp8"; }

// ---- CPU reference pieces (cpu_basic.cpp rms_norm_zc_row, cpu_attention.cpp apply_rope) -----
inline void rms_norm_zc_row(float* x, const float* w, int64_t n, float eps) {
    float ss = 0.0f;
    for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
    const float inv = 1.0f / std::sqrt(ss / float(n) + eps);
    for (int64_t i = 0; i < n; ++i) x[i] = x[i] * inv * (1.0f + w[i]);
}
// pos[k]: the row's position in stream k (t, h, w); frequency i reads the stream the interleaved
// M-RoPE section gives it (all three equal for a 1-D batch).
inline void apply_rope(float* x, int64_t rotary_dim, const int32_t pos[3], double theta, const int section[3]) {
    const int64_t half = rotary_dim / 2;
    for (int64_t i = 0; i < half; ++i) {
        const float inv_freq = float(1.0 / std::pow(theta, double(2 * i) / double(rotary_dim)));
        const int st = (i % 3 == 1 && i < 3 * section[1]) ? 1 : (i % 3 == 2 && i < 3 * section[2]) ? 2 : 0;
        const float angle = float(pos[st]) * inv_freq;
        const float c = std::cos(angle), s = std::sin(angle);
        const float x1 = x[i], x2 = x[i + half];
        x[i] = x1 * c - x2 * s;
        x[i + half] = x2 * c + x1 * s;
    }
}

struct Shape {
    const char* name;
    int Hq, Hkv, D, rot, bs;
    double theta;
    float eps;
};
struct SeqSpec {
    int start, n;  // tokens already cached, rows in this forward
};

// Host batch: pages handed out from a shuffled pool (non-contiguous), extra pages left unused.
struct HostBatch {
    std::vector<SeqSpec> specs;
    std::vector<int32_t> positions, row_seq, block_tables;
    std::vector<DeviceSeq> seqs;
    std::vector<int32_t> rope;  // M-RoPE positions [3][T] (set_mrope); empty: 1-D
    int section[3] = {11, 11, 10};
    void rope_of(int row, int32_t out[3]) const {
        for (int k = 0; k < 3; ++k) out[k] = rope.empty() ? positions[size_t(row)] : rope[size_t(k * T + row)];
    }
    int T = 0, max_n = 0, num_blocks = 0;
};
inline HostBatch make_batch(const Shape& sh, const std::vector<SeqSpec>& specs, std::mt19937_64& rng) {
    HostBatch b;
    b.specs = specs;
    int pages = 0;
    for (const SeqSpec& s : specs) pages += (s.start + s.n + sh.bs - 1) / sh.bs;
    b.num_blocks = pages + pages / 8 + 3;
    std::vector<int32_t> pool(size_t(b.num_blocks));
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng);
    int next = 0;
    for (size_t i = 0; i < specs.size(); ++i) {
        const SeqSpec& s = specs[i];
        DeviceSeq d{};
        d.row_begin = b.T;
        d.num_tokens = s.n;
        d.start_pos = s.start;
        d.state_slot = int32_t(i);
        d.block_table_begin = int32_t(b.block_tables.size());
        d.num_blocks = (s.start + s.n + sh.bs - 1) / sh.bs;
        for (int p = 0; p < d.num_blocks; ++p) b.block_tables.push_back(pool[size_t(next++)]);
        for (int r = 0; r < s.n; ++r) {
            b.positions.push_back(s.start + r);
            b.row_seq.push_back(int32_t(i));
        }
        b.seqs.push_back(d);
        b.T += s.n;
        b.max_n = std::max(b.max_n, s.n);
    }
    return b;
}

// Gives the batch random M-RoPE streams (values near each row's position, the streams apart, as
// image rows have them) and a section that sends frequencies to all three streams.
inline void set_mrope(HostBatch& b, const int section[3], std::mt19937_64& rng) {
    std::uniform_int_distribution<int> d(-40, 40);
    b.rope.resize(size_t(3 * b.T));
    for (int k = 0; k < 3; ++k)
        for (int r = 0; r < b.T; ++r) b.rope[size_t(k * b.T + r)] = std::max(0, b.positions[size_t(r)] + d(rng));
    for (int k = 0; k < 3; ++k) b.section[k] = section[k];
}

inline std::vector<float> randn(size_t n, std::mt19937_64& rng, float scale = 1.0f) {
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
}
inline std::vector<float> randu(size_t n, std::mt19937_64& rng, float lo, float hi) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
}

// One correctness case: inputs, the cache before the step (mirror values and raw bytes; NaN
// poison wherever nothing is cached), and after reference() the expected cache and output.
struct Case {
    Shape sh;
    DeviceKvDtype dt;
    HostBatch b;
    size_t slot_elems = 0, cache_elems = 0;
    std::vector<float> kc, vc;              // cache values (mirror)
    std::vector<uint8_t> k_raw0, v_raw0;    // raw bytes before the step
    std::vector<float> qg, k, v, qn, kn;    // inputs
    std::vector<char> written;              // per slot: written by this step
    std::vector<double> ref;                // expected out [T, Hq*D]

    float from_raw(const uint8_t* r) const {
        if (dt == DeviceKvDtype::kBF16) {
            uint16_t bits;
            std::memcpy(&bits, r, 2);
            return qs::bf16_to_f32(qs::bf16{bits});
        }
        return fp8_to_f32(*r);
    }
    std::vector<uint8_t> to_raw(const std::vector<float>& vals) const {
        const size_t es = esize(dt);
        std::vector<uint8_t> raw(vals.size() * es);
        for (size_t i = 0; i < vals.size(); ++i) {
            if (dt == DeviceKvDtype::kBF16) {
                const uint16_t bits = qs::f32_to_bf16(vals[i]).bits;
                std::memcpy(&raw[2 * i], &bits, 2);
            } else {
                raw[i] = f32_to_fp8(vals[i]);
            }
        }
        return raw;
    }
};

inline Case make_case(const Shape& sh, DeviceKvDtype dt, const std::vector<SeqSpec>& specs, std::mt19937_64& rng) {
    Case c;
    c.sh = sh;
    c.dt = dt;
    c.b = make_batch(sh, specs, rng);
    const int T = c.b.T;
    c.slot_elems = size_t(sh.Hkv) * sh.D;
    c.cache_elems = size_t(c.b.num_blocks) * sh.bs * c.slot_elems;
    c.kc.assign(c.cache_elems, std::nanf(""));
    c.vc.assign(c.cache_elems, std::nanf(""));
    for (const DeviceSeq& s : c.b.seqs) {
        for (int p = 0; p < s.start_pos; ++p) {
            const size_t slot = size_t(c.b.block_tables[size_t(s.block_table_begin + p / sh.bs)]) * sh.bs + p % sh.bs;
            const std::vector<float> kr = randn(c.slot_elems, rng, 1.2f), vr = randn(c.slot_elems, rng);
            for (size_t e = 0; e < c.slot_elems; ++e) {
                c.kc[slot * c.slot_elems + e] = round_kv(kr[e], dt);
                c.vc[slot * c.slot_elems + e] = round_kv(vr[e], dt);
            }
        }
    }
    c.k_raw0 = c.to_raw(c.kc);
    c.v_raw0 = c.to_raw(c.vc);
    c.qg = randn(size_t(T) * sh.Hq * 2 * sh.D, rng, 1.5f);
    c.k = randn(size_t(T) * sh.Hkv * sh.D, rng, 2.0f);
    c.v = randn(size_t(T) * sh.Hkv * sh.D, rng, 1.0f);
    c.qn = randu(size_t(sh.D), rng, -0.5f, 1.5f);
    c.kn = randu(size_t(sh.D), rng, -0.5f, 1.0f);
    return c;
}

// The CPU maths: store k/v, then attention in double over the rounded cache.
inline void reference(Case& c) {
    const Shape& sh = c.sh;
    const HostBatch& b = c.b;
    const int T = b.T, Hq = sh.Hq, Hkv = sh.Hkv, D = sh.D, G = Hq / Hkv;
    c.written.assign(size_t(b.num_blocks) * sh.bs, 0);
    for (const DeviceSeq& s : b.seqs) {
        for (int i = 0; i < s.num_tokens; ++i) {
            const int row = s.row_begin + i, pos = b.positions[size_t(row)];
            const size_t slot = size_t(b.block_tables[size_t(s.block_table_begin + pos / sh.bs)]) * sh.bs + pos % sh.bs;
            c.written[slot] = 1;
            for (int h = 0; h < Hkv; ++h) {
                std::vector<float> kh(c.k.begin() + long((size_t(row) * Hkv + h) * D),
                                      c.k.begin() + long((size_t(row) * Hkv + h + 1) * D));
                rms_norm_zc_row(kh.data(), c.kn.data(), D, sh.eps);
                int32_t rp[3];
                b.rope_of(row, rp);
                apply_rope(kh.data(), sh.rot, rp, sh.theta, b.section);
                for (int j = 0; j < D; ++j) {
                    c.kc[(slot * Hkv + h) * D + j] = round_kv(kh[size_t(j)], c.dt);
                    c.vc[(slot * Hkv + h) * D + j] = round_kv(c.v[(size_t(row) * Hkv + h) * D + j], c.dt);
                }
            }
        }
    }
    c.ref.assign(size_t(T) * Hq * D, 0.0);
    const double scale = 1.0 / std::sqrt(double(D));
#pragma omp parallel for schedule(dynamic, 4)
    for (int64_t rh = 0; rh < int64_t(T) * Hq; ++rh) {
        const int row = int(rh / Hq), h = int(rh % Hq), kvh = h / G;
        const DeviceSeq& s = b.seqs[size_t(b.row_seq[size_t(row)])];
        const int pos = b.positions[size_t(row)];
        const float* src = c.qg.data() + (size_t(row) * Hq + h) * 2 * D;
        std::vector<float> q(src, src + D);
        rms_norm_zc_row(q.data(), c.qn.data(), D, sh.eps);
        int32_t rp[3];
        b.rope_of(row, rp);
        apply_rope(q.data(), sh.rot, rp, sh.theta, b.section);
        std::vector<double> sc(size_t(pos) + 1), o(size_t(D), 0.0);
        double mx = -INFINITY;
        for (int p = 0; p <= pos; ++p) {
            const size_t slot = size_t(b.block_tables[size_t(s.block_table_begin + p / sh.bs)]) * sh.bs + p % sh.bs;
            const float* kk = c.kc.data() + (slot * Hkv + kvh) * D;
            double acc = 0.0;
            for (int j = 0; j < D; ++j) acc += double(q[size_t(j)]) * double(kk[j]);
            sc[size_t(p)] = acc * scale;
            mx = std::max(mx, sc[size_t(p)]);
        }
        double den = 0.0;
        for (double& x : sc) den += (x = std::exp(x - mx));
        for (int p = 0; p <= pos; ++p) {
            const size_t slot = size_t(b.block_tables[size_t(s.block_table_begin + p / sh.bs)]) * sh.bs + p % sh.bs;
            const float* vv = c.vc.data() + (slot * Hkv + kvh) * D;
            const double w = sc[size_t(p)] / den;
            for (int j = 0; j < D; ++j) o[size_t(j)] += w * double(vv[j]);
        }
        for (int j = 0; j < D; ++j) c.ref[size_t(rh) * D + size_t(j)] = o[size_t(j)] / (1.0 + std::exp(-double(src[D + j])));
    }
}

// Compares the kernel's out and cache bytes with the reference; prints one PASS/FAIL line.
// tol_override > 0 replaces the dtype's output tolerance (prefill version 2: bf16 operands and O
// for both cache dtypes).
inline bool compare(const Case& c, const char* label, const char* how, const std::vector<float>& out,
                    const std::vector<uint8_t>& k_raw, const std::vector<uint8_t>& v_raw, double tol_override = 0.0) {
    double num = 0.0, den = 0.0, maxabs = 0.0;
    size_t nans = 0;
    for (size_t i = 0; i < out.size(); ++i) {
        if (!std::isfinite(out[i])) {
            ++nans;
            continue;
        }
        const double d = double(out[i]) - c.ref[i];
        num += d * d;
        den += c.ref[i] * c.ref[i];
        maxabs = std::max(maxabs, std::fabs(d));
    }
    const double err = std::sqrt(num / std::max(den, 1e-300));
    const double tol = tol_override > 0.0 ? tol_override : c.dt == DeviceKvDtype::kBF16 ? 1e-2 : 3e-3;
    const bool out_ok = nans == 0 && err < tol;

    const size_t es = esize(c.dt);
    size_t n_written = 0, flips = 0, bad = 0, changed = 0;
    double cnum = 0.0, cden = 0.0;
    for (size_t slot = 0; slot < c.written.size(); ++slot) {
        for (size_t e = 0; e < c.slot_elems; ++e) {
            const size_t idx = slot * c.slot_elems + e;
            for (int kv = 0; kv < 2; ++kv) {
                const std::vector<uint8_t>& raw = kv ? v_raw : k_raw;
                const std::vector<uint8_t>& raw0 = kv ? c.v_raw0 : c.k_raw0;
                if (!c.written[slot]) {
                    if (std::memcmp(&raw[idx * es], &raw0[idx * es], es) != 0) ++changed;
                    continue;
                }
                ++n_written;
                const float gv = c.from_raw(&raw[idx * es]);
                const float rv = (kv ? c.vc : c.kc)[idx];
                if (!std::isfinite(gv)) {
                    ++bad;
                    continue;
                }
                cnum += double(gv - rv) * double(gv - rv);
                cden += double(rv) * double(rv);
                if (gv != rv) {
                    ++flips;
                    const float ulp = c.dt == DeviceKvDtype::kBF16 ? std::ldexp(std::fabs(rv), -7)
                                                                   : std::ldexp(std::fabs(rv), -3) + std::ldexp(1.0f, -9);
                    // Near zero, RoPE's x1·c − x2·s cancels and fp32 rounding differences between
                    // the CPU and GPU sin/cos are no longer small relative to the value (seen on
                    // the H200: one such entry in 307,200): allow 1e-5 absolute there.
                    if (std::fabs(gv - rv) > std::max(ulp * 1.001f, 1e-5f)) ++bad;
                }
            }
        }
    }
    const double cerr = std::sqrt(cnum / std::max(cden, 1e-300));
    const bool cache_ok = bad == 0 && changed == 0 && double(flips) <= std::max(2.0, 1e-3 * double(n_written));
    const bool ok = out_ok && cache_ok;
    std::printf("%-5s %-34s %-4s T=%-5d seqs=%-4zu | out err %.2e max %.2e nan %zu (tol %.0e) | cache err %.2e "
                "flips %zu/%zu bad %zu untouched-changed %zu | %s\n",
                ok ? "PASS" : "FAIL", label, dname(c.dt), c.b.T, c.b.seqs.size(), err, maxabs, nans, tol, cerr, flips,
                n_written, bad, changed, how);
    std::fflush(stdout);
    return ok;
}

inline DeviceBatch batch_view(const HostBatch& b, const int32_t* positions, const int32_t* row_seq,
                              const DeviceSeq* seqs, const int32_t* block_tables,
                              const int32_t* rope_positions = nullptr) {
    DeviceBatch d;
    d.positions = positions;
    d.rope_positions = rope_positions;
    d.row_seq = row_seq;
    d.seqs = seqs;
    d.block_tables = block_tables;
    d.num_tokens = b.T;
    d.num_seqs = int32_t(b.seqs.size());
    d.max_seq_tokens = b.max_n;
    return d;
}

inline qs::cuda::GatedAttentionParams make_params(const Case& c) {
    qs::cuda::GatedAttentionParams p;
    p.kv_dtype = c.dt;
    p.Hq = c.sh.Hq;
    p.Hkv = c.sh.Hkv;
    p.D = c.sh.D;
    p.rotary_dim = c.sh.rot;
    p.block_size = c.sh.bs;
    p.rope_theta = c.sh.theta;
    for (int k = 0; k < 3; ++k) p.mrope_section[k] = c.b.section[k];
    p.eps = c.sh.eps;
    p.max_splits = qs::cuda::kAttentionMaxSplits;
    return p;
}

// The shapes and cases both drivers run.
inline const Shape kTiny{"tiny", 4, 2, 64, 16, 16, 1e7, 1e-6f};
inline const Shape kReal{"real", 16, 2, 256, 64, 16, 1e7, 1e-6f};
inline const Shape kGenA{"gen D96 G4 bs12", 8, 2, 96, 32, 12, 1e4, 1e-6f};
inline const Shape kGenB{"gen D32 G1 bs8 rot32", 4, 4, 32, 32, 8, 1e6, 1e-5f};
inline const Shape kGenC{"gen D128 G32 rot64", 32, 1, 128, 64, 16, 1e7, 1e-6f};
inline const Shape kGenD{"gen D192 G8 rot0 bs32", 16, 2, 192, 0, 32, 1e7, 1e-6f};
// Head dims that are not a multiple of 32 run on the fp32 fallback kernel (attention_fallback.cu):
// the transformers fixtures' shapes (D 16, rotary 4 or 16) and two more (D 48, and D 200 whose
// threads own two output dims each).
inline const Shape kFbA{"fallback D16 G2 rot4", 4, 2, 16, 4, 16, 1e7, 1e-6f};
inline const Shape kFbB{"fallback D16 G2 rot16 bs8", 6, 3, 16, 16, 8, 1e7, 1e-6f};
inline const Shape kFbC{"fallback D48 G4 rot24 bs12", 8, 2, 48, 24, 12, 1e6, 1e-6f};
inline const Shape kFbD{"fallback D200 G1 rot64", 2, 2, 200, 64, 16, 1e7, 1e-6f};
inline const std::vector<SeqSpec> kMixed = {{700, 1}, {100, 37}, {0, 300}};

inline std::vector<SeqSpec> decode_specs(int n, int lo, int hi, std::mt19937_64& rng) {
    std::uniform_int_distribution<int> d(lo, hi);
    std::vector<SeqSpec> v;
    for (int i = 0; i < n; ++i) v.push_back({d(rng), 1});
    return v;
}

}  // namespace attn_lab
