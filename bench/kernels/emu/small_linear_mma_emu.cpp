// Runs the FP8 small-rows kernel's version 3 (src/backend/cuda/small_linear_fp8_mma.cu: mma.sync on
// f16 copies of the e4m3 codes; its own source and launcher) in the host SIMT emulator
// (emu_prelude.h; the emulated mma follows the PTX ISA's m16n8k16 fragment layouts, written
// independently of the kernel) against a double-precision reference on x quantised exactly as
// launch_quant_fp8_rows128 does it, and against version 2 (small_linear_fp8.cu) on the same input:
// T = 1..4; `in` of 512 (warps without a scale block), 1,536 (12 scale blocks: warps with one or
// two), 1,024, 2,048 and 4,096; a grid of one block per 16 features and a capped grid (blocks loop over
// groups, x quantised once per block); launches of 1-3 weights (q/k/v-like parts); row counts not a
// multiple of 16 (padded groups); an all-zero x group (scale 1). Checks: relative error against the reference < 1e-5, against version 2 < 1e-6,
// every row of a T-row call bitwise equal to a one-row call on that row, nothing written past y.
// Says nothing about speed. Build and run (repo root; g++ only):
//   sh bench/kernels/emu/run_emu.sh small_linear_mma
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cuda/small_linear_kernels.h"

namespace {

float e4m3(float v) {
    __nv_fp8_e4m3 q;
    q.__x = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
    return float(q);
}

struct Weight {
    int64_t out;
    std::vector<uint8_t> w;
    std::vector<float> s;    // [ceil(out / 128), in / 128]
    std::vector<float> dq;   // dequantised, for the reference
};

}  // namespace

int main() {
    std::mt19937 rng(11);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::uniform_real_distribution<float> ud(-4.0f, 4.0f);
    struct Case {
        std::vector<int64_t> outs;
        int64_t in;
        int bps;  // blocks per SM (0: no cap; the emulated device has 132 SMs)
    };
    // The last five: row counts not a multiple of 16 (a part's last group partly padding, which
    // must read no weight row past out and write nothing past y), alone and between parts.
    const Case cases[] = {{{1104}, 2048, 0}, {{48}, 512, 0},          {{272}, 1536, 0},
                          {{4096}, 4096, 1}, {{512, 64, 64}, 2048, 0}, {{2112, 32}, 1024, 1},
                          {{1000}, 2048, 0}, {{7}, 512, 0},           {{200, 96, 33}, 1024, 0},
                          {{17, 1, 130}, 512, 1}, {{4097}, 4096, 0}};
    int fails = 0;
    for (const Case& c : cases) {
        const int64_t cb = c.in / 128;
        std::vector<Weight> ws;
        int64_t total = 0;
        for (int64_t out : c.outs) {
            Weight wt;
            wt.out = out;
            wt.w.resize(size_t(out * c.in));
            wt.s.resize(size_t((out + 127) / 128 * cb));
            wt.dq.resize(wt.w.size());
            for (float& f : wt.s) f = std::exp2(ud(rng)) * 0.01f;
            for (int64_t o = 0; o < out; ++o)
                for (int64_t k = 0; k < c.in; ++k) {
                    const uint8_t code = __nv_cvt_float_to_fp8(nd(rng) * 100.0f, __NV_SATFINITE, __NV_E4M3);
                    wt.w[size_t(o * c.in + k)] = code;
                    __nv_fp8_e4m3 q;
                    q.__x = code;
                    wt.dq[size_t(o * c.in + k)] = float(q) * wt.s[size_t((o / 128) * cb + k / 128)];
                }
            total += out;
            ws.push_back(std::move(wt));
        }
        for (int64_t T = 1; T <= qs::cuda::kSmallLinearFp8V2MaxRows; ++T) {
            std::vector<float> x(size_t(T * c.in)), xq(x.size());
            for (int64_t t = 0; t < T; ++t)
                for (int64_t g = 0; g < cb; ++g) {
                    const float f = std::exp2(ud(rng));
                    float amax = 0.0f;
                    for (int64_t k = g * 128; k < g * 128 + 128; ++k) {
                        x[size_t(t * c.in + k)] = (t == T - 1 && g == 0) ? 0.0f : nd(rng) * f;  // one zero group
                        amax = std::max(amax, std::fabs(x[size_t(t * c.in + k)]));
                    }
                    const float scale = amax > 0.0f ? amax / 448.0f : 1.0f;
                    for (int64_t k = g * 128; k < g * 128 + 128; ++k)
                        xq[size_t(t * c.in + k)] = e4m3(x[size_t(t * c.in + k)] / scale) * scale;
                }
            // y of every part with 16 guard floats after it.
            auto run = [&](bool mma, const float* xin, int64_t rows) {
                std::vector<std::vector<float>> ys;
                std::vector<qs::cuda::SmallLinearFp8Part> parts;
                for (const Weight& wt : ws) ys.emplace_back(size_t(rows * wt.out) + 16, std::nanf(""));
                for (size_t i = 0; i < ws.size(); ++i)
                    parts.push_back({ws[i].w.data(), ws[i].s.data(), ws[i].out, ys[i].data()});
                if (mma) qs::cuda::launch_small_linear_fp8_mma(parts, c.in, xin, rows, nullptr, c.bps);
                else qs::cuda::launch_small_linear_fp8_v2(parts, c.in, xin, rows, nullptr, 1);
                return ys;
            };
            const auto y3 = run(true, x.data(), T), y2 = run(false, x.data(), T);
            double num = 0, den = 0, num2 = 0;
            bool finite = true, guard = true, rows_same = true;
            for (size_t i = 0; i < ws.size(); ++i) {
                const Weight& wt = ws[i];
                for (int64_t t = 0; t < T; ++t)
                    for (int64_t o = 0; o < wt.out; ++o) {
                        double r = 0;
                        for (int64_t k = 0; k < c.in; ++k)
                            r += double(wt.dq[size_t(o * c.in + k)]) * double(xq[size_t(t * c.in + k)]);
                        const double g = y3[i][size_t(t * wt.out + o)], g2 = y2[i][size_t(t * wt.out + o)];
                        finite = finite && std::isfinite(g);
                        num += (g - r) * (g - r);
                        num2 += (g - g2) * (g - g2);
                        den += r * r;
                    }
                for (size_t j = size_t(T * wt.out); j < y3[i].size(); ++j) guard = guard && std::isnan(y3[i][j]);
            }
            for (int64_t t = 0; t < T && T > 1; ++t) {
                const auto y1 = run(true, x.data() + t * c.in, 1);
                for (size_t i = 0; i < ws.size(); ++i)
                    rows_same = rows_same && std::memcmp(y1[i].data(), y3[i].data() + t * ws[i].out,
                                                         size_t(ws[i].out) * 4) == 0;
            }
            const double err = std::sqrt(num / den), err2 = std::sqrt(num2 / den);
            const bool ok = finite && guard && rows_same && err < 1e-5 && err2 < 1e-6;
            fails += !ok;
            std::printf("%s outs", ok ? "ok  " : "FAIL");
            for (int64_t out : c.outs) std::printf(" %lld", (long long)out);
            std::printf(" (%lld) in %lld bps %d T %lld: rel err %.2e, vs v2 %.2e%s%s%s\n", (long long)total,
                        (long long)c.in, c.bps, (long long)T, err, err2, finite ? "" : " NOT FINITE",
                        guard ? "" : " WROTE PAST y", rows_same ? ", rows = 1-row calls" : ", ROWS DIFFER");
            std::fflush(stdout);
        }
    }
    std::printf("%s\n", fails ? "SOME FAIL" : "ALL OK");
    return fails ? 1 : 0;
}
