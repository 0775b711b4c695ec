// Runs the 4-bit small-row linear kernel (src/backend/cuda/int4_linear_kernels.cu, its own source
// and launchers) in the host SIMT emulator (emu_prelude.h) against the CPU references of
// bench/kernels/int4_ref.h (INT4) and nvfp4_ref.h (NVFP4): index arithmetic, nibble order, scale
// indexing, the NVFP4 global, rows past `out`, every T in 1..8 and rows-per-warp 1, 2, 4. First
// the register unpack itself (int4_unpack.cuh), exhaustively: every code in every nibble of a word,
// fp32 (unpack8) and bf16 pairs (bf16x2_pair), both formats. Then launch_4bit_linears (CudaOptions::
// int4_linear_version 2): 2-4 weights of one input in one launch, each weight's y bit for bit its own
// launch's (weights whose rows split a warp, RPW 1, 2, 4, both formats, nothing written past a y);
// and with the post-attention norm by the last block: y, x and h bit for bit a plain launch followed
// by the norm kernel (norm_ref.h), the counter back at 0. Then version 3 on tensor cores
// (int4_linear_mma.cu, run_mma_case). Says nothing about speed.
// Build and run (repo root; g++ only): sh bench/kernels/emu/run_emu.sh int4 [--nvfp4 | --int4 | --grouped | --mma | --smoke]
#include <cstdio>
#include <cstring>
#include <span>

#include "backend/cuda/int4_linear_kernels.h"
#include "backend/cuda/int4_unpack.cuh"
#include "int4_ref.h"
#include "norm_ref.h"
#include "nvfp4_ref.h"

namespace {

using qs::cuda::w4::Code4;

float half_value(uint32_t pair, int hi) {
    const uint32_t u = hi ? (pair & 0xFFFF0000u) : (pair << 16);
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// Every code c at every position i of a word whose other nibbles are random: unpack8 and
// bf16x2_pair give the format's value, sign of zero included for NVFP4 (code 8 = −0).
int check_unpack() {
    int bad = 0;
    std::mt19937 rng(7);
    for (int rep = 0; rep < 64; ++rep)
        for (int i = 0; i < 8; ++i)
            for (uint32_t c = 0; c < 16; ++c) {
                const uint32_t w = (uint32_t(rng()) & ~(15u << (4 * i))) | (c << (4 * i));
                const int s = i % 4, hi = i / 4;
                float f[8];
                qs::cuda::w4::unpack8<Code4::kInt4>(w, f);
                const float q = float(c < 8 ? int(c) : int(c) - 16);  // two's complement (int4_layout.h)
                bad += f[i] != q || half_value(qs::cuda::w4::bf16x2_pair<Code4::kInt4>(w, s), hi) != q;
                qs::cuda::w4::unpack8<Code4::kNvfp4>(w, f);
                const float e = nvfp4_lab::e2m1_value(c);
                const float p = half_value(qs::cuda::w4::bf16x2_pair<Code4::kNvfp4>(w, s), hi);
                bad += f[i] != e || std::signbit(f[i]) != std::signbit(e) || p != e || std::signbit(p) != std::signbit(e);
                if (bad && rep == 0) std::printf("unpack: code %u at %d wrong (nvfp4 %g %g, want %g)\n", c, i, f[i], p, e);
            }
    std::printf("%s unpack8 / bf16x2_pair, INT4 and NVFP4: every code at every nibble\n", bad ? "FAIL" : "ok  ");
    return bad != 0;
}

// The NVFP4 block scale bytes as the kernels widen them, for every finite E4M3 byte (both signs;
// subnormals, zero, ±448): scale_f32 (the SIMT kernels) is the byte's value exactly, and the folded
// MMA operand (nvfp4_operand with nvfp4_scale_folded) for every code at every nibble is, times
// kNvfp4FoldedUnscale, e2m1 · scale exactly, sign of zero included; each half of a pair takes its
// own scale byte (bits 0..7 the low half's).
int check_nvfp4_fold() {
    int bad = 0;
    std::mt19937 rng(11);
    auto finite_byte = [&] {
        uint32_t b;
        do b = rng() & 0xFFu;
        while ((b & 0x7Fu) == 0x7Fu);
        return b;
    };
    for (uint32_t b = 0; b < 0x100; ++b) {
        if ((b & 0x7Fu) == 0x7Fu) continue;  // NaN: the layout refuses it
        const float scale = nvfp4_lab::e4m3_value(uint8_t(b));
        const float widened = qs::cuda::w4::scale_f32<Code4::kNvfp4>(uint8_t(b));
        if ((widened != scale || std::signbit(widened) != std::signbit(scale)) && bad < 4)
            std::printf("scale_f32: byte 0x%02x: %g, want %g\n", b, widened, scale);
        bad += widened != scale || std::signbit(widened) != std::signbit(scale);
        const uint32_t other = finite_byte();  // the other half's scale byte
        for (int i = 0; i < 8; ++i)
            for (uint32_t c = 0; c < 16; ++c) {
                const uint32_t w = (uint32_t(rng()) & ~(15u << (4 * i))) | (c << (4 * i));
                const int s = i % 4, hi = i / 4;
                const uint32_t pair_bytes = hi ? (b << 8) | other : (other << 8) | b;
                const uint32_t op = qs::cuda::w4::nvfp4_operand(w, s, qs::cuda::w4::nvfp4_scale_folded(pair_bytes));
                const float got = half_value(op, hi) * qs::cuda::w4::kNvfp4FoldedUnscale;
                const float want = nvfp4_lab::e2m1_value(c) * scale;  // exact in fp32 and in bf16
                const bool ok = got == want && std::signbit(got) == std::signbit(want);
                if (!ok && bad < 4) std::printf("nvfp4 fold: code %u at %d, scale byte 0x%02x: %g, want %g\n", c, i, b, got, want);
                bad += !ok;
            }
    }
    std::printf("%s scale_f32 and nvfp4_operand (block scale folded): every code at every nibble, every finite E4M3 byte\n",
                bad ? "FAIL" : "ok  ");
    return bad != 0;
}

int run_int4() {
    using namespace int4_lab;
    struct Shape {
        int64_t out, in, group;
    };
    // in 2048 group 128 (the model's shapes, out cut down); group 32 and 16 (tiny fixtures); out not
    // a multiple of 8·RPW; in = 32 (one chunk: most lanes idle).
    const Shape shapes[] = {{72, 2048, 128}, {37, 512, 32}, {19, 96, 16}, {8, 32, 8}};
    int fails = 0;
    uint32_t seed = 1;
    for (const Shape& s : shapes)
        for (int64_t T = 1; T <= 8; ++T)
            for (int rpw : {1, 2, 4}) {
                const Case c = make_case(s.out, s.in, s.group, T, seed++);
                const std::vector<double> ref = reference(c);
                std::vector<float> y(size_t(T * s.out), std::nanf(""));
                qs::cuda::launch_int4_linear(c.codes.data(), c.scales.data(), s.out, s.in, s.group, c.x.data(), T,
                                             y.data(), nullptr, rpw);
                const double err = rel_error(y, ref);
                const bool ok = err < 1e-5;  // fp32 sums of exact products vs double
                fails += !ok;
                if (!ok || T == 1)
                    std::printf("%s int4 out %lld in %lld group %lld T %lld rpw %d: rel err %.2e\n", ok ? "ok  " : "FAIL",
                                (long long)s.out, (long long)s.in, (long long)s.group, (long long)T, rpw, err);
            }
    return fails;
}

int run_nvfp4() {
    using namespace nvfp4_lab;
    struct Shape {
        int64_t out, in;
    };
    // in 2048 (the model's hidden; out cut down), 512 (an expert's down input), 96 (three chunks),
    // 32 (one chunk); out not a multiple of 8·RPW.
    const Shape shapes[] = {{72, 2048}, {37, 512}, {19, 96}, {8, 32}};
    int fails = 0;
    uint32_t seed = 100;
    for (const Shape& s : shapes)
        for (int64_t T = 1; T <= 8; ++T)
            for (int rpw : {1, 2, 4}) {
                const Case c = make_case(s.out, s.in, T, seed++);
                const std::vector<double> ref = reference(c);
                std::vector<float> y(size_t(T * s.out), std::nanf(""));
                qs::cuda::launch_nvfp4_linear(c.codes.data(), c.scale_bytes.data(), c.global, s.out, s.in, c.x.data(), T,
                                              y.data(), nullptr, rpw);
                const double err = int4_lab::rel_error(y, ref);
                const bool ok = err < 1e-5;  // fp32 sums of exact products, one rounding of the global, vs double
                fails += !ok;
                if (!ok || T == 1)
                    std::printf("%s nvfp4 out %lld in %lld T %lld rpw %d: rel err %.2e\n", ok ? "ok  " : "FAIL",
                                (long long)s.out, (long long)s.in, (long long)T, rpw, err);
            }
    return fails;
}

// Weights of one input launched together: each y bitwise the weight's own launch (and nothing written
// past it). outs: the weights' rows; with nvfp4 the codes of NVFP4 weights (group 16).
int run_grouped_case(bool nvfp4, const std::vector<int64_t>& outs, int64_t in, int64_t group, int64_t T, int rpw,
                     uint32_t seed) {
    std::vector<int4_lab::Case> ic;
    std::vector<nvfp4_lab::Case> nc;
    for (size_t i = 0; i < outs.size(); ++i) {
        if (nvfp4) nc.push_back(nvfp4_lab::make_case(outs[i], in, T, seed + uint32_t(i)));
        else ic.push_back(int4_lab::make_case(outs[i], in, group, T, seed + uint32_t(i)));
    }
    const std::vector<float>& x = nvfp4 ? nc[0].x : ic[0].x;  // the first weight's x for all
    std::vector<std::vector<float>> alone(outs.size()), together(outs.size());
    std::vector<qs::cuda::Int4LinearPart> parts;
    for (size_t i = 0; i < outs.size(); ++i) {
        alone[i].assign(size_t(T * outs[i]), std::nanf(""));
        together[i].assign(size_t(T * outs[i] + 16), std::nanf(""));  // 16 guard values
        const uint32_t* codes = nvfp4 ? nc[i].codes.data() : ic[i].codes.data();
        const void* scales = nvfp4 ? static_cast<const void*>(nc[i].scale_bytes.data()) : ic[i].scales.data();
        const float global = nvfp4 ? nc[i].global : 1.0f;
        if (nvfp4) qs::cuda::launch_nvfp4_linear(codes, static_cast<const uint8_t*>(scales), global, outs[i], in, x.data(), T, alone[i].data(), nullptr, rpw);
        else qs::cuda::launch_int4_linear(codes, static_cast<const uint16_t*>(scales), outs[i], in, group, x.data(), T, alone[i].data(), nullptr, rpw);
        parts.push_back({codes, scales, outs[i], together[i].data(), global});
    }
    qs::cuda::launch_4bit_linears(nvfp4, parts, in, nvfp4 ? qs::cuda::kNvfp4LinearGroup : group, x.data(), T, nullptr,
                                  nullptr, rpw);
    bool same = true, guard = true;
    for (size_t i = 0; i < outs.size(); ++i) {
        same = same && std::memcmp(alone[i].data(), together[i].data(), alone[i].size() * 4) == 0;
        for (size_t j = alone[i].size(); j < together[i].size(); ++j) guard = guard && std::isnan(together[i][j]);
    }
    std::string shape;
    for (int64_t o : outs) shape += std::to_string(o) + " ";
    const bool ok = same && guard;
    std::printf("%s %s grouped {%s} in %lld T %lld rpw %d: %s%s\n", ok ? "ok  " : "FAIL", nvfp4 ? "nvfp4" : "int4 ",
                shape.c_str(), (long long)in, (long long)T, rpw, same ? "each y = its own launch" : "Y DIFFERS",
                guard ? "" : ", WROTE PAST y");
    return ok ? 0 : 1;
}

// One weight with the post-attention norm (out = the residual's width): y, x, h against a plain
// launch and the norm kernel (x += pending, x += y, h = norm(x)).
int run_post_norm_case(bool nvfp4, int64_t out, int64_t in, int64_t T, bool with_pending, int rpw, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const int4_lab::Case ic = nvfp4 ? int4_lab::Case{} : int4_lab::make_case(out, in, 128, T, seed);
    const nvfp4_lab::Case nc = nvfp4 ? nvfp4_lab::make_case(out, in, T, seed) : nvfp4_lab::Case{};
    const uint32_t* codes = nvfp4 ? nc.codes.data() : ic.codes.data();
    const void* scales = nvfp4 ? static_cast<const void*>(nc.scale_bytes.data()) : ic.scales.data();
    const float global = nvfp4 ? nc.global : 1.0f;
    const std::vector<float>& a = nvfp4 ? nc.x : ic.x;
    std::vector<float> nw(static_cast<size_t>(out)), x(static_cast<size_t>(T * out)), pend(x.size());
    for (float& f : nw) f = 0.3f * nd(rng);
    for (float& f : x) f = 3.0f * nd(rng);
    for (float& f : pend) f = nd(rng);
    const float eps = 1e-6f;
    const float* p = with_pending ? pend.data() : nullptr;
    std::vector<float> y_ref(x.size()), x_ref(x.size()), h_ref(x.size());
    const int64_t group = nvfp4 ? qs::cuda::kNvfp4LinearGroup : 128;
    const qs::cuda::Int4LinearPart ref_part{codes, scales, out, y_ref.data(), global};
    qs::cuda::launch_4bit_linears(nvfp4, std::span(&ref_part, 1), in, group, a.data(), T, nullptr, nullptr, rpw);
    emu_norm::reference_norm(x.data(), p, y_ref.data(), x_ref.data(), nw.data(), T, out, eps, h_ref.data());
    std::vector<float> y(x.size() + 64, std::nanf("")), h(x.size() + 64, std::nanf("")), xs = x;
    int counter = 0;
    const qs::cuda::SmallLinearOutputNorm post{xs.data(), p, nw.data(), eps, h.data(), &counter};
    const qs::cuda::Int4LinearPart part{codes, scales, out, y.data(), global};
    qs::cuda::launch_4bit_linears(nvfp4, std::span(&part, 1), in, group, a.data(), T, nullptr, &post, rpw);
    bool guard = true;
    for (size_t j = x.size(); j < y.size(); ++j) guard = guard && std::isnan(y[j]) && std::isnan(h[j]);
    const bool y_same = std::memcmp(y.data(), y_ref.data(), x.size() * 4) == 0;
    const bool x_same = xs == x_ref, h_same = std::memcmp(h.data(), h_ref.data(), x.size() * 4) == 0;
    const bool ok = y_same && x_same && h_same && guard && counter == 0;
    std::printf("%s %s out %lld in %lld T %lld rpw %d%s + post norm: %s, %s, %s, counter %d%s\n", ok ? "ok  " : "FAIL",
                nvfp4 ? "nvfp4" : "int4 ", (long long)out, (long long)in, (long long)T, rpw, with_pending ? " pending" : "",
                y_same ? "y = plain launch" : "Y DIFFERS", x_same ? "x = norm kernel's" : "X DIFFERS",
                h_same ? "h = norm kernel's" : "H DIFFERS", counter, guard ? "" : " WROTE PAST y/h");
    return ok ? 0 : 1;
}

// Version 3 (int4_linear_mma.cu): INT4 weights of one input in one launch on tensor cores, against
// the double-precision reference (each weight), against version 2 (the same products: ~1e-7 apart),
// rows independent of T (token 0's outputs bitwise those of a one-row launch) and nothing written
// past a y. With `post`: one weight and the output norm, x and h bitwise the norm kernel's on v3's y.
int run_mma_case(const std::vector<int64_t>& outs, int64_t in, int64_t group, int64_t T, bool post, uint32_t seed,
                 bool nvfp4 = false) {
    std::vector<int4_lab::Case> ic;
    std::vector<nvfp4_lab::Case> nc;
    for (size_t i = 0; i < outs.size(); ++i) {
        if (nvfp4) {
            nc.push_back(nvfp4_lab::make_case(outs[i], in, T, seed + uint32_t(i)));
            nc[i].x = nc[0].x;  // one input for the launch's weights (their references too)
        } else {
            ic.push_back(int4_lab::make_case(outs[i], in, group, T, seed + uint32_t(i)));
            ic[i].x = ic[0].x;
        }
    }
    if (nvfp4) group = qs::cuda::kNvfp4LinearGroup;
    const std::vector<float>& x = nvfp4 ? nc[0].x : ic[0].x;
    std::vector<std::vector<float>> v2(outs.size()), v3(outs.size()), one(outs.size());
    std::vector<qs::cuda::Int4LinearPart> parts, parts1;
    double worst_ref = 0, worst_v2 = 0;
    for (size_t i = 0; i < outs.size(); ++i) {
        v2[i].assign(size_t(T * outs[i]), std::nanf(""));
        v3[i].assign(size_t(T * outs[i] + 16), std::nanf(""));
        one[i].assign(size_t(outs[i]), std::nanf(""));
        const uint32_t* codes = nvfp4 ? nc[i].codes.data() : ic[i].codes.data();
        const void* scales = nvfp4 ? static_cast<const void*>(nc[i].scale_bytes.data()) : ic[i].scales.data();
        const float global = nvfp4 ? nc[i].global : 1.0f;
        if (nvfp4) qs::cuda::launch_nvfp4_linear(codes, static_cast<const uint8_t*>(scales), global, outs[i], in, x.data(), T, v2[i].data(), nullptr, 0);
        else qs::cuda::launch_int4_linear(codes, static_cast<const uint16_t*>(scales), outs[i], in, group, x.data(), T, v2[i].data(), nullptr, 0);
        parts.push_back({codes, scales, outs[i], v3[i].data(), global});
        parts1.push_back({codes, scales, outs[i], one[i].data(), global});
    }
    if (!qs::cuda::int4_linear_mma_supports(nvfp4, T, in, group, parts, x.data())) {
        std::printf("FAIL %s mma: the shape is not taken\n", nvfp4 ? "nvfp4" : "int4");
        return 1;
    }
    // The post-attention norm's inputs (out = the residual's width).
    const int64_t n = outs[0];
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> nw(static_cast<size_t>(n)), xr(static_cast<size_t>(T * n)), pend(xr.size()), h(xr.size() + 64, std::nanf(""));
    for (float& f : nw) f = 0.3f * nd(rng);
    for (float& f : xr) f = 3.0f * nd(rng);
    for (float& f : pend) f = nd(rng);
    std::vector<float> xs = xr;
    int counter = 0;
    const qs::cuda::SmallLinearOutputNorm norm{xs.data(), pend.data(), nw.data(), 1e-6f, h.data(), &counter};
    qs::cuda::launch_int4_linears_mma(nvfp4, parts, in, group, x.data(), T, nullptr, post ? &norm : nullptr);
    qs::cuda::launch_int4_linears_mma(nvfp4, parts1, in, group, x.data(), 1, nullptr, nullptr);  // token 0 alone
    bool guard = true, row_indep = true;
    for (size_t i = 0; i < outs.size(); ++i) {
        const std::vector<double> ref = nvfp4 ? nvfp4_lab::reference(nc[i]) : int4_lab::reference(ic[i]);
        std::vector<float> got(v3[i].begin(), v3[i].begin() + ptrdiff_t(T * outs[i]));
        worst_ref = std::max(worst_ref, int4_lab::rel_error(got, ref));
        std::vector<double> v2d(v2[i].begin(), v2[i].end());
        worst_v2 = std::max(worst_v2, int4_lab::rel_error(got, v2d));
        for (size_t j = got.size(); j < v3[i].size(); ++j) guard = guard && std::isnan(v3[i][j]);
        row_indep = row_indep && std::memcmp(one[i].data(), got.data(), one[i].size() * 4) == 0;
    }
    bool norm_ok = true;
    if (post) {
        std::vector<float> x_ref(xr.size()), h_ref(xr.size());
        emu_norm::reference_norm(xr.data(), pend.data(), v3[0].data(), x_ref.data(), nw.data(), T, n, 1e-6f, h_ref.data());
        norm_ok = xs == x_ref && std::memcmp(h.data(), h_ref.data(), xr.size() * 4) == 0 && counter == 0;
        for (size_t j = xr.size(); j < h.size(); ++j) norm_ok = norm_ok && std::isnan(h[j]);
    }
    std::string shape;
    for (int64_t o : outs) shape += std::to_string(o) + " ";
    const bool ok = worst_ref < 1e-5 && worst_v2 < 1e-5 && guard && row_indep && norm_ok;
    std::printf("%s %s mma {%s} in %lld group %lld T %lld%s: rel err %.2e (v2 %.2e)%s%s%s\n", ok ? "ok  " : "FAIL",
                nvfp4 ? "nvfp4" : "int4 ", shape.c_str(), (long long)in, (long long)group, (long long)T, post ? " + post norm" : "", worst_ref,
                worst_v2, row_indep ? ", token 0 = one-row launch" : ", ROW DEPENDS ON T", guard ? "" : ", WROTE PAST y",
                post ? (norm_ok ? ", x/h = norm kernel's" : ", NORM DIFFERS") : "");
    return ok ? 0 : 1;
}

int run_mma(bool smoke) {
    int fails = 0;
    uint32_t seed = 900;
    if (smoke) {
        fails += run_mma_case({48, 16, 32}, 2048, 128, 2, false, seed);
        fails += run_mma_case({2048}, 4096, 128, 1, true, seed + 8);
        fails += run_mma_case({48, 16, 32}, 2048, 16, 2, false, seed + 16, true);
        return fails;
    }
    // Rows not multiples of 16 (padding rows), the model's widths cut down, in 2,048 / 4,096 / 512 /
    // 128 / 3,072 (a warp with a group past in), group 256.
    for (int64_t T : {1, 2, 3, 5, 8}) {
        fails += run_mma_case({48, 16, 32}, 2048, 128, T, false, seed += 8);
        fails += run_mma_case({37, 19, 8, 72}, 2048, 128, T, false, seed += 8);
        fails += run_mma_case({40}, 4096, 128, T, false, seed += 8);
        fails += run_mma_case({33, 16}, 512, 128, T, false, seed += 8);
        fails += run_mma_case({17}, 128, 128, T, false, seed += 8);
        fails += run_mma_case({24}, 3072, 256, T, false, seed += 8);
    }
    for (int64_t T : {1, 2, 8}) {
        fails += run_mma_case({2048}, 4096, 128, T, true, seed += 8);
        fails += run_mma_case({4096}, 2048, 128, T, true, seed += 8);
    }
    // NVFP4 (group 16, each block's scale folded into the code pairs; the matrices' globals).
    for (int64_t T : {1, 2, 5, 8}) {
        fails += run_mma_case({37, 19, 8, 72}, 2048, 16, T, false, seed += 8, true);
        fails += run_mma_case({40}, 4096, 16, T, false, seed += 8, true);
        fails += run_mma_case({17}, 128, 16, T, false, seed += 8, true);
    }
    for (int64_t T : {1, 8}) {
        fails += run_mma_case({2048}, 4096, 16, T, true, seed += 8, true);
        fails += run_mma_case({4096}, 2048, 16, T, true, seed += 8, true);
    }
    return fails;
}

// smoke: a few of the cases (ctest int4_emu_smoke in CI).
int run_grouped(bool smoke) {
    int fails = 0;
    uint32_t seed = 500;
    if (smoke) {
        fails += run_grouped_case(false, {37, 19, 8, 72}, 2048, 128, 2, 2, seed);
        fails += run_grouped_case(true, {5, 3, 9}, 32, 32, 1, 4, seed + 8);
        fails += run_post_norm_case(false, 2048, 4096, 1, true, 2, seed + 16);
        fails += run_post_norm_case(true, 4096, 2048, 2, false, 1, seed + 24);
        return fails;
    }
    // Rows that split warps at every RPW (37 + 19 + 8 + 72), the model's q/k/v-like widths cut down,
    // in 2,048 and a one-chunk row (in 32).
    for (bool nvfp4 : {false, true})
        for (int rpw : {1, 2, 4})
            for (int64_t T : {1, 2, 5, 8}) {
                fails += run_grouped_case(nvfp4, {37, 19, 8, 72}, 2048, 128, T, rpw, seed += 8);
                fails += run_grouped_case(nvfp4, {64, 32}, 512, 32, T, rpw, seed += 8);
                fails += run_grouped_case(nvfp4, {5, 3, 9}, 32, 32, T, rpw, seed += 8);
            }
    for (bool nvfp4 : {false, true})
        for (int64_t out : {2048, 4096})
            for (int64_t T : {1, 2, 3, 8})
                for (bool with_pending : {false, true})
                    fails += run_post_norm_case(nvfp4, out, out == 2048 ? 4096 : 2048, T, with_pending,
                                                T == 3 ? 1 : 2, seed += 8);
    return fails;
}

}  // namespace

int main(int argc, char** argv) {
    const bool only_nvfp4 = argc > 1 && !std::strcmp(argv[1], "--nvfp4");
    const bool only_int4 = argc > 1 && !std::strcmp(argv[1], "--int4");
    const bool smoke = argc > 1 && !std::strcmp(argv[1], "--smoke");
    const bool only_grouped = smoke || (argc > 1 && !std::strcmp(argv[1], "--grouped"));
    const bool only_mma = argc > 1 && !std::strcmp(argv[1], "--mma");
    int fails = check_unpack() + check_nvfp4_fold();
    if (!only_nvfp4 && !only_grouped && !only_mma) fails += run_int4();
    if (!only_int4 && !only_grouped && !only_mma) fails += run_nvfp4();
    if (!only_int4 && !only_nvfp4 && !only_mma) fails += run_grouped(smoke);
    fails += run_mma(smoke);
    std::printf(fails ? "int4 emu: %d FAILED\n" : "int4 emu: all passed\n", fails);
    return fails ? 1 : 0;
}
