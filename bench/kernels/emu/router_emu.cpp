// Runs the tensor-core router (src/backend/cuda/router_gemm.cu, its own source
// and launcher) in the host SIMT emulator (emu_prelude.h) against a float64
// reference: the cp.async ring (K tails past H, rows past T and past the padded
// W rows zero-filled), the in-register three-term split of x, the A/B fragment
// indexing, the column split over blocks along y, the epilogue's logits / gate
// routing, every tile variant, with and without the lo weights. Small shapes
// (the emulator runs one fiber per thread). PASS: max |y − ref| / max |ref| <
// 2e-5 (dense W) or 1e-6 (bf16-exact W: every product exact), no output
// left NaN, and every variant and schedule of a shape with the first one's
// bits (hashes printed). Says nothing about speed. Build and run (repo root; g++ only):
//   sh bench/kernels/emu/run_emu.sh router [--sweep]
// --sweep: the shapes the model-level GPU tests run (the trained tiny model's
// E = 16, H = 256 and the transformers fixtures' routers) at every T from 1 to
// 200, both weight kinds, every variant, both schedules (minutes).
#include <cstdio>
#include <cstring>
#include <random>

#include "backend/cuda/router_gemm.h"
#include "core/dtype.h"

namespace {

struct Shape {
    int64_t E, H, T;
};

int g_cases = 0;

// One shape, one weight kind, the given variants and schedules; returns the failures.
int run_shape(const Shape& s, bool dense, std::mt19937& rng, const int* variants, int nvariants, bool verbose) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    int fails = 0;
    std::vector<float> w(size_t((s.E + 1) * s.H)), x(size_t(s.T * s.H));
    for (float& v : w) v = dense ? nd(rng) * 0.05f : qs::round_to_bf16(nd(rng) * 0.05f);
    for (float& v : x) v = nd(rng);
    std::vector<uint16_t> hi, lo;
    const bool any_lo = qs::cuda::router_split_weights(w, s.E + 1, qs::cuda::router_padded_rows(s.E), s.H, hi, lo);
    if (any_lo != dense) {
        std::printf("FAIL: router_split_weights says lo %d for %s weights\n", int(any_lo), dense ? "dense" : "bf16");
        ++fails;
    }
    std::vector<double> ref(size_t(s.T * (s.E + 1)));
    double r1 = 0;
    for (int64_t t = 0; t < s.T; ++t)
        for (int64_t e = 0; e <= s.E; ++e) {
            double r = 0;
            for (int64_t k = 0; k < s.H; ++k) r += double(x[size_t(t * s.H + k)]) * double(w[size_t(e * s.H + k)]);
            ref[size_t(t * (s.E + 1) + e)] = r;
            r1 = std::max(r1, std::fabs(r));
        }
    // Every variant and schedule must give the first one's bits: a row's logits may not depend on
    // T, which picks the variant (each accumulator takes the same mma sequence in all of them).
    bool have_first = false;
    uint64_t first_hash = 0;
    for (int vi = 0; vi < nvariants; ++vi)
        for (int mode = 0; mode < 2; ++mode) {
            const int variant = variants[vi];
            emu::g_mode = mode;  // lockstep with late cp.async, then greedy warps with early copies
            std::vector<float> logits(size_t(s.T * s.E) + 16, std::nanf("")), gate(size_t(s.T) + 16, std::nanf(""));
            qs::cuda::launch_router_logits(x.data(), s.T, s.H, hi.data(), any_lo ? lo.data() : nullptr, s.E,
                                           logits.data(), gate.data(), nullptr, variant);
            double e1 = 0;
            bool finite = true, guard = true;
            for (int64_t t = 0; t < s.T; ++t)
                for (int64_t e = 0; e <= s.E; ++e) {
                    const double y = e < s.E ? logits[size_t(t * s.E + e)] : gate[size_t(t)];
                    finite = finite && std::isfinite(y);
                    e1 = std::max(e1, std::fabs(y - ref[size_t(t * (s.E + 1) + e)]));
                }
            for (size_t i = size_t(s.T * s.E); i < logits.size(); ++i) guard = guard && std::isnan(logits[i]);
            for (size_t i = size_t(s.T); i < gate.size(); ++i) guard = guard && std::isnan(gate[i]);
            // bf16-exact W: every product exact (x split into three bf16 terms), so only the fp32
            // accumulation rounds (a two-term split of x leaves ~3e-6). Dense W: the dropped
            // W - Wh - Wl (2^-17 of W) leaves ~5e-6.
            const double err = e1 / std::max(r1, 1e-30), bound = dense ? 2e-5 : 1e-6;
            // The outputs' bits (FNV-1a over logits then gate), also printed: a kernel change meant to
            // keep every bit compares them with the previous kernel's run.
            uint64_t hash = 1469598103934665603ull;
            auto mix = [&](float v) {
                uint32_t b;
                std::memcpy(&b, &v, 4);
                for (int i = 0; i < 4; ++i) hash = (hash ^ ((b >> (8 * i)) & 0xff)) * 1099511628211ull;
            };
            for (int64_t i = 0; i < s.T * s.E; ++i) mix(logits[size_t(i)]);
            for (int64_t i = 0; i < s.T; ++i) mix(gate[size_t(i)]);
            const bool same_bits = !have_first || hash == first_hash;
            if (!have_first) have_first = true, first_hash = hash;
            const bool ok = finite && guard && err < bound && same_bits;
            fails += !ok;
            ++g_cases;
            if (verbose || !ok)
                std::printf("E=%3lld H=%3lld T=%3lld %-5s variant %d mode %d: err %.2e bits %016llx%s%s%s %s\n",
                            (long long)s.E, (long long)s.H, (long long)s.T, dense ? "dense" : "bf16", variant, mode,
                            err, (unsigned long long)hash,
                            finite ? "" : " NaN (a row or column left unwritten)", guard ? "" : " wrote past the end",
                            same_bits ? "" : " (bits differ from the first variant's)", ok ? "PASS" : "FAIL");
        }
    return fails;
}

}  // namespace

int main(int argc, char** argv) {
    const bool sweep = argc > 1 && std::strcmp(argv[1], "--sweep") == 0;
    std::mt19937 rng(11);
    int fails = 0;
    const int all_variants[] = {0, 1, 2, 3, 4};
    if (!sweep) {
        // E = 5: one padded row tile; E = 40: 48 rows (3 tiles: column blocks along
        // y, a partial one); H = 72: a K tail of 8; T = 17, 130: partial token tiles
        // of every variant. E = 8, H = 32, T = 150: the a_h32 transformers fixture's
        // router; E = 16, H = 256, T = 37 / 95: the trained tiny model's router at the
        // engine test's chunk and the fixtures' MTP length.
        const Shape shapes[] = {{5, 72, 3},   {40, 64, 17}, {40, 96, 130}, {256, 32, 20},
                                {8, 32, 150}, {16, 256, 37}, {8, 32, 95}};
        for (const Shape& s : shapes)
            for (bool dense : {true, false}) fails += run_shape(s, dense, rng, all_variants, 5, true);
        // Enough 128-token tiles for a wave (132 emulated SMs): variant 1 with all 272 rows in one
        // block (nb = 272, three W rows a thread; H = 72: two k-steps and a tail), the shape every
        // 16k-token prefill layer takes.
        const int wide_variants[] = {1, 3, 4};
        for (bool dense : {true, false}) fails += run_shape({256, 72, 16900}, dense, rng, wide_variants, 3, true);
    } else {
        // (E, H): the tiny model, fixtures a (E 8, H 32), b (16, 48), c (4, 40).
        const int64_t EH[][2] = {{16, 256}, {8, 32}, {16, 48}, {4, 40}};
        for (const auto& eh : EH)
            for (int64_t T = 1; T <= 200; ++T) {
                const int before = fails;
                for (bool dense : {true, false})
                    fails += run_shape({eh[0], eh[1], T}, dense, rng, all_variants, 5, false);
                if (T % 50 == 0 || fails != before)
                    std::printf("E=%lld H=%lld T up to %lld: %d cases so far, %d failures\n", (long long)eh[0],
                                (long long)eh[1], (long long)T, g_cases, fails);
                std::fflush(stdout);
            }
    }
    std::printf("%d cases: %s\n", g_cases, fails ? "FAILURES" : "ALL PASS");
    return fails ? 1 : 0;
}
