// Runs the tensor-core router (src/backend/cuda/router_gemm.cu, its own source
// and launcher) in the host SIMT emulator (emu_prelude.h) against a float64
// reference: the cp.async ring (K tails past H, rows past T and past the padded
// W rows zero-filled), the in-register hi/lo split of x, the A/B fragment
// indexing, the column split over blocks along y, the epilogue's logits / gate
// routing, every tile variant, with and without the lo weights. Small shapes
// (the emulator runs one fiber per thread). PASS: max |y − ref| / max |ref| <
// 2e-5 and no output left NaN. Says nothing about speed. Build and run (repo
// root; g++ only): sh bench/kernels/emu/run_emu.sh router
#include <cstdio>
#include <random>

#include "backend/cuda/router_gemm.h"
#include "core/dtype.h"

int main() {
    struct Shape {
        int64_t E, H, T;
    };
    // E = 5: one padded row tile; E = 40: 48 rows (3 tiles: column blocks along
    // y, a partial one); H = 72: a K tail of 8; T = 17, 130: partial token tiles
    // of every variant.
    const Shape shapes[] = {{5, 72, 3}, {40, 64, 17}, {40, 96, 130}, {256, 32, 20}, {8, 32, 150}};  // the last: the a_h32 transformers fixture's router
    std::mt19937 rng(11);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    int fails = 0;
    for (const Shape& s : shapes) {
        for (bool dense : {true, false}) {
            std::vector<float> w(size_t((s.E + 1) * s.H)), x(size_t(s.T * s.H));
            for (float& v : w) v = dense ? nd(rng) * 0.05f : qs::round_to_bf16(nd(rng) * 0.05f);
            for (float& v : x) v = nd(rng);
            std::vector<uint16_t> hi, lo;
            const bool any_lo =
                qs::cuda::router_split_weights(w, s.E + 1, qs::cuda::router_padded_rows(s.E), s.H, hi, lo);
            if (any_lo != dense) {
                std::printf("FAIL: router_split_weights says lo %d for %s weights\n", int(any_lo),
                            dense ? "dense" : "bf16");
                ++fails;
            }
            for (int v = 0; v < 8; ++v) {
                const int variant = v % 4;
                emu::g_mode = v / 4;  // lockstep with late cp.async, then greedy warps with early copies
                std::vector<float> logits(size_t(s.T * s.E) + 16, std::nanf("")), gate(size_t(s.T) + 16, std::nanf(""));
                qs::cuda::launch_router_logits(x.data(), s.T, s.H, hi.data(), any_lo ? lo.data() : nullptr, s.E,
                                               logits.data(), gate.data(), nullptr, variant);
                double e1 = 0, r1 = 0;
                bool finite = true, guard = true;
                for (int64_t t = 0; t < s.T; ++t)
                    for (int64_t e = 0; e <= s.E; ++e) {
                        double r = 0;
                        for (int64_t k = 0; k < s.H; ++k)
                            r += double(x[size_t(t * s.H + k)]) * double(w[size_t(e * s.H + k)]);
                        const double y = e < s.E ? logits[size_t(t * s.E + e)] : gate[size_t(t)];
                        finite = finite && std::isfinite(y);
                        e1 = std::max(e1, std::fabs(y - r));
                        r1 = std::max(r1, std::fabs(r));
                    }
                for (size_t i = size_t(s.T * s.E); i < logits.size(); ++i) guard = guard && std::isnan(logits[i]);
                for (size_t i = size_t(s.T); i < gate.size(); ++i) guard = guard && std::isnan(gate[i]);
                const double err = e1 / std::max(r1, 1e-30);
                const bool ok = finite && guard && err < 2e-5;
                fails += !ok;
                std::printf("E=%3lld H=%3lld T=%3lld %-5s variant %d mode %d: err %.2e%s%s %s\n", (long long)s.E,
                            (long long)s.H, (long long)s.T, dense ? "dense" : "bf16", variant, emu::g_mode, err,
                            finite ? "" : " NaN", guard ? "" : " wrote past the end", ok ? "PASS" : "FAIL");
            }
        }
    }
    std::printf("%s\n", fails ? "FAILURES" : "ALL PASS");
    return fails ? 1 : 0;
}
