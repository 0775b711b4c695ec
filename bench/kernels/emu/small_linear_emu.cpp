// Runs the FP8 small-rows kernel's version 2 (src/backend/cuda/small_linear_fp8.cu, its own source
// and launcher) in the host SIMT emulator (emu_prelude.h) against a double-precision reference on
// x quantised exactly as launch_quant_fp8_rows128 does it (amax / 448 per row and 128 columns,
// e4m3 round-to-nearest satfinite of x / scale): the shared-memory swizzle, the per-block
// quantisation, weight and activation scale indexing, the chunk / output striding of warps
// (outputs per warp > 1 at a grid cap of 1 block per SM, two chunks per row at in = 4,096),
// T = 1..4, and that every row of a T-row call equals a one-row call on that row bitwise; then
// launches of 2-4 weights of one input (part boundaries inside warps' strides, parts of 8-multiple
// and odd sizes): every part's y equals its own one-weight launch bitwise, nothing written past any
// part; then launches with the layer's input norm in the prologue (SmallLinearInputNorm, in 2,048 and
// 4,096, with and without the pending addend): h and every part's y equal, bit for bit, the norm
// kernel's arithmetic (the reference kernel below: basic_kernels.cu's add_rms_norm_zc_kernel
// mapping on row_norm.cuh) followed by a launch on that h, h is within 1e-6 of a double-precision
// norm, x and pending are unchanged and nothing is written past h or y; then the output norm by the
// last block (y bitwise a plain launch's, x and h bitwise the reference kernel's on that y). The
// norm cases run twice: version 2, then version 3 (small_linear_fp8_mma.cu, whose launches with a
// norm must equal its own plain launch on the reference h, bit for bit, and whose output norm the
// same reference kernel on its own y). Says nothing about speed.
// Build and run (repo root; g++ only): sh bench/kernels/emu/run_emu.sh small_linear
#include <cstdio>
#include <random>
#include <span>

#include "backend/cuda/ptx_helpers.cuh"  // the emulator's (bench/kernels/emu/backend)
#include "backend/cuda/row_norm.cuh"
#include "backend/cuda/small_linear_kernels.h"
#include "norm_ref.h"

namespace {

// FNV-1a of y's bytes: printed with each case, so that two versions of the kernel can be compared
// bit for bit (a rewrite that keeps the sums' order must leave every hash unchanged).
uint64_t hash_bytes(const void* p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const unsigned char*>(p)[i]) * 1099511628211ull;
    return h;
}

float e4m3(float v) {
    __nv_fp8_e4m3 q;
    q.__x = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
    return float(q);
}

}  // namespace

int main() {
    struct Shape {
        int64_t out, in;
        int bps;  // blocks per SM (the emulated device has 132 SMs)
    };
    // 1,100 outputs at 1 block/SM: 132 blocks, warps with 1 or 2 outputs (1,100 > 1,056 = 132 · 8);
    // in 4,096: two chunks per row; in 512: three of a lane's four loads past the row.
    const Shape shapes[] = {{40, 2048, 2}, {1100, 512, 1}, {300, 4096, 2}, {136, 1024, 1}};
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::uniform_real_distribution<float> ud(-4.0f, 4.0f);
    int fails = 0;
    for (const Shape& s : shapes) {
        const int64_t rb = (s.out + 127) / 128, cb = s.in / 128;
        std::vector<uint8_t> w(size_t(s.out * s.in));
        std::vector<float> wdq(w.size()), scale_inv(size_t(rb * cb));
        for (float& f : scale_inv) f = std::exp2(ud(rng)) * 0.01f;
        for (int64_t o = 0; o < s.out; ++o)
            for (int64_t k = 0; k < s.in; ++k) {
                const uint8_t code = __nv_cvt_float_to_fp8(nd(rng) * 100.0f, __NV_SATFINITE, __NV_E4M3);
                w[size_t(o * s.in + k)] = code;
                __nv_fp8_e4m3 q;
                q.__x = code;
                wdq[size_t(o * s.in + k)] = float(q) * scale_inv[size_t((o / 128) * cb + k / 128)];
            }
        for (int64_t T = 1; T <= qs::cuda::kSmallLinearFp8V2MaxRows; ++T) {
            std::vector<float> x(size_t(T * s.in)), xq(x.size());
            for (int64_t t = 0; t < T; ++t)
                for (int64_t g = 0; g < cb; ++g) {
                    const float f = std::exp2(ud(rng));
                    float amax = 0.0f;
                    for (int64_t c = g * 128; c < g * 128 + 128; ++c) {
                        x[size_t(t * s.in + c)] = nd(rng) * f;
                        amax = std::max(amax, std::fabs(x[size_t(t * s.in + c)]));
                    }
                    if (t == 1 && g == 0) {  // an all-zero group: scale 1, codes 0
                        for (int64_t c = 0; c < 128; ++c) x[size_t(t * s.in + c)] = 0.0f;
                        amax = 0.0f;
                    }
                    const float scale = amax > 0.0f ? amax / 448.0f : 1.0f;
                    for (int64_t c = g * 128; c < g * 128 + 128; ++c)
                        xq[size_t(t * s.in + c)] = e4m3(x[size_t(t * s.in + c)] / scale) * scale;
                }
            std::vector<float> y(size_t(T * s.out) + 64, std::nanf(""));
            qs::cuda::launch_small_linear_fp8_v2(w.data(), scale_inv.data(), s.out, s.in, x.data(), T, y.data(),
                                                 nullptr, s.bps);
            double num = 0, den = 0;
            bool finite = true;
            for (int64_t t = 0; t < T; ++t)
                for (int64_t o = 0; o < s.out; ++o) {
                    double r = 0;
                    for (int64_t k = 0; k < s.in; ++k)
                        r += double(wdq[size_t(o * s.in + k)]) * double(xq[size_t(t * s.in + k)]);
                    const double g = y[size_t(t * s.out + o)];
                    finite = finite && std::isfinite(g);
                    num += (g - r) * (g - r);
                    den += r * r;
                }
            bool guard = true;  // nothing written past [T, out]
            for (size_t i = size_t(T * s.out); i < y.size(); ++i) guard = guard && std::isnan(y[i]);
            bool rows_same = true;
            for (int64_t t = 0; t < T; ++t) {
                std::vector<float> y1(size_t(s.out), std::nanf(""));
                qs::cuda::launch_small_linear_fp8_v2(w.data(), scale_inv.data(), s.out, s.in, x.data() + t * s.in, 1,
                                                     y1.data(), nullptr, s.bps);
                rows_same = rows_same && std::memcmp(y1.data(), y.data() + t * s.out, size_t(s.out) * 4) == 0;
            }
            const double err = std::sqrt(num / den);
            const bool ok = finite && guard && rows_same && err < 1e-5;
            fails += !ok;
            std::printf("%s out %lld in %lld bps %d T %lld: rel err %.2e y#%016llx%s%s%s\n", ok ? "ok  " : "FAIL",
                        (long long)s.out, (long long)s.in, s.bps, (long long)T, err,
                        (unsigned long long)hash_bytes(y.data(), size_t(T * s.out) * 4), finite ? "" : " NOT FINITE",
                        guard ? "" : " WROTE PAST y", rows_same ? ", rows = 1-row calls" : ", ROWS DIFFER");
            std::fflush(stdout);
        }
    }
    // Random e4m3 weights of `in` columns with random block scales, one per entry of outs.
    struct Weight {
        std::vector<uint8_t> w;
        std::vector<float> s;
    };
    auto random_weights = [&](const std::vector<int64_t>& outs, int64_t in) {
        std::vector<Weight> ws;
        for (int64_t out : outs) {
            Weight wt;
            wt.w.resize(size_t(out * in));
            wt.s.resize(size_t((out + 127) / 128 * (in / 128)));
            for (float& f : wt.s) f = std::exp2(ud(rng)) * 0.01f;
            for (uint8_t& b : wt.w) b = __nv_cvt_float_to_fp8(nd(rng) * 100.0f, __NV_SATFINITE, __NV_E4M3);
            ws.push_back(std::move(wt));
        }
        return ws;
    };
    // Several weights of one input in one launch.
    struct Group {
        int64_t in;
        std::vector<int64_t> outs;
        int bps;
    };
    const Group groups[] = {{2048, {300, 40}, 2}, {1024, {136, 1100, 8, 77}, 1}, {4096, {260, 129, 3}, 2}};
    for (const Group& gr : groups) {
        const std::vector<Weight> ws = random_weights(gr.outs, gr.in);
        for (int64_t T = 1; T <= qs::cuda::kSmallLinearFp8V2MaxRows; T += 3) {
            std::vector<float> x(size_t(T * gr.in));
            for (float& f : x) f = nd(rng);
            std::vector<std::vector<float>> ys, ref;
            std::vector<qs::cuda::SmallLinearFp8Part> parts;
            for (size_t i = 0; i < ws.size(); ++i) {
                ys.emplace_back(size_t(T * gr.outs[i]) + 64, std::nanf(""));
                ref.emplace_back(size_t(T * gr.outs[i]), std::nanf(""));
                qs::cuda::launch_small_linear_fp8_v2(ws[i].w.data(), ws[i].s.data(), gr.outs[i], gr.in, x.data(), T,
                                                     ref.back().data(), nullptr, gr.bps);
            }
            for (size_t i = 0; i < ws.size(); ++i)
                parts.push_back({ws[i].w.data(), ws[i].s.data(), gr.outs[i], ys[i].data()});
            qs::cuda::launch_small_linear_fp8_v2(parts, gr.in, x.data(), T, nullptr, gr.bps);
            bool same = true, guard = true, finite = true;
            for (size_t i = 0; i < ws.size(); ++i) {
                same = same && std::memcmp(ys[i].data(), ref[i].data(), ref[i].size() * 4) == 0;
                for (size_t j = ref[i].size(); j < ys[i].size(); ++j) guard = guard && std::isnan(ys[i][j]);
                for (float f : ref[i]) finite = finite && std::isfinite(f);
            }
            const bool ok = same && guard && finite;
            fails += !ok;
            std::printf("%s %zu parts in %lld bps %d T %lld%s%s%s\n", ok ? "ok  " : "FAIL", ws.size(),
                        (long long)gr.in, gr.bps, (long long)T, same ? ": parts = one-weight launches" : ": PARTS DIFFER",
                        guard ? "" : " WROTE PAST y", finite ? "" : " NOT FINITE");
            std::fflush(stdout);
        }
    }
    // A plain launch of version 2 or 3 (bps 2 → version 3's uncapped grid, 1 → one block per SM).
    auto plain = [](bool mma, std::span<const qs::cuda::SmallLinearFp8Part> parts, int64_t in, const float* x,
                    int64_t T, int bps) {
        if (mma) qs::cuda::launch_small_linear_fp8_mma(parts, in, x, T, nullptr, bps == 2 ? 0 : 1);
        else qs::cuda::launch_small_linear_fp8_v2(parts, in, x, T, nullptr, bps);
    };
    // The layer's input norm in the prologue (version 3: every part a multiple of 16 rows).
    const Group norm_groups[] = {{2048, {300, 40}, 2}, {2048, {1100}, 1}, {4096, {136, 9}, 2}};
    const Group norm_groups_mma[] = {{2048, {304, 48}, 2}, {2048, {1104}, 1}, {4096, {144, 16}, 2}};
    for (bool mma : {false, true})
    for (const Group& gr : mma ? norm_groups_mma : norm_groups) {
        const std::vector<Weight> ws = random_weights(gr.outs, gr.in);
        std::vector<float> nw(size_t(gr.in));
        for (float& f : nw) f = 0.3f * nd(rng);
        const float eps = 1e-6f;
        for (int64_t T = 1; T <= qs::cuda::kSmallLinearFp8V2MaxRows; ++T)
            for (bool with_pending : {false, true}) {
                // Rows of different scales, one group of a row far larger than the rest (its amax
                // differs from its neighbours').
                std::vector<float> x(size_t(T * gr.in)), pend(x.size());
                for (int64_t t = 0; t < T; ++t)
                    for (int64_t c = 0; c < gr.in; ++c) {
                        const float f = std::exp2(float(t) - 1.0f) * (c / 128 == 3 ? 40.0f : 1.0f);
                        x[size_t(t * gr.in + c)] = nd(rng) * f;
                        pend[size_t(t * gr.in + c)] = 0.5f * nd(rng) * f;
                    }
                const std::vector<float> x0 = x, p0 = pend;
                const float* p = with_pending ? pend.data() : nullptr;
                std::vector<float> h_ref(x.size()), h(x.size() + 64, std::nanf(""));
                emu_norm::reference_norm(x.data(), p, nullptr, nullptr, nw.data(), T, gr.in, eps, h_ref.data());
                std::vector<std::vector<float>> ys, ref;
                std::vector<qs::cuda::SmallLinearFp8Part> parts, ref_parts;
                for (size_t i = 0; i < ws.size(); ++i) {
                    ys.emplace_back(size_t(T * gr.outs[i]) + 64, std::nanf(""));
                    ref.emplace_back(size_t(T * gr.outs[i]), std::nanf(""));
                }
                for (size_t i = 0; i < ws.size(); ++i) {
                    parts.push_back({ws[i].w.data(), ws[i].s.data(), gr.outs[i], ys[i].data()});
                    ref_parts.push_back({ws[i].w.data(), ws[i].s.data(), gr.outs[i], ref[i].data()});
                }
                plain(mma, ref_parts, gr.in, h_ref.data(), T, gr.bps);
                const qs::cuda::SmallLinearInputNorm norm{p, nw.data(), eps, h.data()};
                if (mma) qs::cuda::launch_small_linear_fp8_mma(parts, gr.in, x.data(), T, nullptr, gr.bps == 2 ? 0 : 1, &norm);
                else qs::cuda::launch_small_linear_fp8_v2(parts, gr.in, x.data(), T, nullptr, gr.bps, &norm);
                bool same = true, guard = true, finite = true;
                for (size_t i = 0; i < ws.size(); ++i) {
                    same = same && std::memcmp(ys[i].data(), ref[i].data(), ref[i].size() * 4) == 0;
                    for (size_t j = ref[i].size(); j < ys[i].size(); ++j) guard = guard && std::isnan(ys[i][j]);
                    for (float f : ref[i]) finite = finite && std::isfinite(f);
                }
                const bool h_same = std::memcmp(h.data(), h_ref.data(), h_ref.size() * 4) == 0;
                for (size_t j = h_ref.size(); j < h.size(); ++j) guard = guard && std::isnan(h[j]);
                const bool inputs_kept = x == x0 && pend == p0;
                double num = 0, den = 0;  // h against a double-precision norm
                for (int64_t t = 0; t < T; ++t) {
                    double ss = 0;
                    for (int64_t c = 0; c < gr.in; ++c) {
                        const double v = double(x[size_t(t * gr.in + c)]) + (p ? double(p[t * gr.in + c]) : 0.0);
                        ss += v * v;
                    }
                    const double inv = 1.0 / std::sqrt(ss / double(gr.in) + double(eps));
                    for (int64_t c = 0; c < gr.in; ++c) {
                        const double v = double(x[size_t(t * gr.in + c)]) + (p ? double(p[t * gr.in + c]) : 0.0);
                        const double r = v * inv * (1.0 + double(nw[size_t(c)]));
                        const double g = h[size_t(t * gr.in + c)];
                        num += (g - r) * (g - r);
                        den += r * r;
                    }
                }
                const double err = std::sqrt(num / den);
                const bool ok = same && h_same && guard && finite && inputs_kept && err < 1e-6;
                fails += !ok;
                std::printf("%s v%d norm + %zu parts in %lld bps %d T %lld%s: h rel err %.2e%s%s%s%s%s\n",
                            ok ? "ok  " : "FAIL", mma ? 3 : 2, ws.size(), (long long)gr.in, gr.bps, (long long)T,
                            with_pending ? " pending" : "", err,
                            h_same ? ", h = norm kernel's" : ", H DIFFERS", same ? ", y = launch on h" : ", Y DIFFERS",
                            guard ? "" : " WROTE PAST h/y", finite ? "" : " NOT FINITE",
                            inputs_kept ? "" : " INPUTS CHANGED");
                std::fflush(stdout);
            }
    }
    // The post-attention norm by the launch's last block (one weight; out = the residual's width).
    struct OutShape {
        int64_t out, in;
        int bps;
    };
    const OutShape out_shapes[] = {{2048, 4096, 2}, {2048, 4096, 1}, {4096, 2048, 2}};
    for (bool mma : {false, true})
    for (const OutShape& os : out_shapes) {
        const std::vector<Weight> one = random_weights({os.out}, os.in);
        const std::vector<uint8_t>& w = one[0].w;
        const std::vector<float>& sc = one[0].s;
        std::vector<float> nw(static_cast<size_t>(os.out));
        for (float& f : nw) f = 0.3f * nd(rng);
        const float eps = 1e-6f;
        for (int64_t T = 1; T <= qs::cuda::kSmallLinearFp8V2MaxRows; ++T)
            for (bool with_pending : {false, true}) {
                std::vector<float> a(size_t(T * os.in)), x(size_t(T * os.out)), pend(x.size());
                for (float& f : a) f = nd(rng);
                for (float& f : x) f = 3.0f * nd(rng);
                for (float& f : pend) f = nd(rng);
                const float* p = with_pending ? pend.data() : nullptr;
                std::vector<float> y_ref(x.size()), x_ref(x.size()), h_ref(x.size());
                const qs::cuda::SmallLinearFp8Part ref_part{w.data(), sc.data(), os.out, y_ref.data()};
                plain(mma, std::span(&ref_part, 1), os.in, a.data(), T, os.bps);
                emu_norm::reference_norm(x.data(), p, y_ref.data(), x_ref.data(), nw.data(), T, os.out, eps, h_ref.data());
                std::vector<float> y(x.size() + 64, std::nanf("")), h(x.size() + 64, std::nanf("")), xs = x;
                const std::vector<float> pend0 = pend, a0 = a;
                int counter = 0;
                const qs::cuda::SmallLinearOutputNorm post{xs.data(), p, nw.data(), eps, h.data(), &counter};
                const qs::cuda::SmallLinearFp8Part part{w.data(), sc.data(), os.out, y.data()};
                if (mma) qs::cuda::launch_small_linear_fp8_mma_output_norm(part, os.in, a.data(), T, post, nullptr,
                                                                          os.bps == 2 ? 0 : 1);
                else qs::cuda::launch_small_linear_fp8_v2_output_norm(part, os.in, a.data(), T, post, nullptr, os.bps);
                bool guard = true;
                for (size_t j = x.size(); j < y.size(); ++j) guard = guard && std::isnan(y[j]) && std::isnan(h[j]);
                const bool y_same = std::memcmp(y.data(), y_ref.data(), x.size() * 4) == 0;
                const bool x_same = xs == x_ref, h_same = std::memcmp(h.data(), h_ref.data(), x.size() * 4) == 0;
                const bool ok = y_same && x_same && h_same && guard && counter == 0 && pend == pend0 && a == a0;
                fails += !ok;
                std::printf("%s v%d out %lld in %lld bps %d T %lld%s + post norm: %s, %s, %s, counter %d%s\n", ok ? "ok  " : "FAIL", mma ? 3 : 2,
                            (long long)os.out, (long long)os.in, os.bps, (long long)T, with_pending ? " pending" : "",
                            y_same ? "y = plain launch" : "Y DIFFERS", x_same ? "x = norm kernel's" : "X DIFFERS",
                            h_same ? "h = norm kernel's" : "H DIFFERS", counter, guard ? "" : " WROTE PAST y/h");
                std::fflush(stdout);
            }
    }
    std::printf(fails ? "small_linear emu: %d FAILED\n" : "small_linear emu: all passed\n", fails);
    return fails ? 1 : 0;
}
