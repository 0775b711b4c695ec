// Runs the fp32 linear kernels (src/backend/cuda/small_linear_f32.cu and f32_linear_tiles.cu, their
// own source and launchers) in the host SIMT emulator (emu_prelude.h): for launches of 1-4 weights
// of one input (the GDN b/a pair, the router with its shared-expert gate, odd part sizes whose
// boundaries fall inside 8-feature sub-tiles), `in` of 128-4,096 (slices shorter than a warp's 32
// chunks included) and T across tile edges, every tile variant's every output must equal, bit for
// bit, the small-rows kernel's on that row (run on the rows in groups of up to 8), and be within
// 1e-5 · Σ|w·x| of a float64 dot product; nothing may be written past a part's y. Both emulator
// schedules. Says nothing about speed.
// Build and run (repo root; g++ only): sh bench/kernels/emu/run_emu.sh f32_linear [--quick|--smoke]
// (--smoke: three cases, the ctest f32_linear_emu_smoke)
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "backend/cuda/small_linear_kernels.h"

namespace {

uint64_t hash_bytes(const void* p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const unsigned char*>(p)[i]) * 1099511628211ull;
    return h;
}

struct Case {
    int in;
    std::vector<int> outs;
    int T;
};

constexpr float kPoison = -12345.0f;
constexpr int kGuard = 64;  // floats after each y that must stay poisoned

bool run_case(const Case& c, std::mt19937& rng) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const int T = c.T, in = c.in, P = int(c.outs.size());
    std::vector<float> x(size_t(T) * in);
    for (float& v : x) v = nd(rng);
    std::vector<std::vector<float>> w(static_cast<size_t>(P));
    for (int p = 0; p < P; ++p) {
        w[size_t(p)].resize(size_t(c.outs[size_t(p)]) * in);
        for (float& v : w[size_t(p)]) v = 0.05f * nd(rng);
    }
    // The small-rows kernel on groups of up to 8 rows: the reference bits.
    std::vector<std::vector<float>> ref(static_cast<size_t>(P));
    for (int p = 0; p < P; ++p) ref[size_t(p)].assign(size_t(T) * c.outs[size_t(p)], kPoison);
    for (int t0 = 0; t0 < T; t0 += int(qs::cuda::kSmallLinearF32MaxRows)) {
        const int n = std::min<int>(T - t0, int(qs::cuda::kSmallLinearF32MaxRows));
        std::vector<qs::cuda::SmallLinearF32Part> parts;
        for (int p = 0; p < P; ++p)
            parts.push_back({w[size_t(p)].data(), c.outs[size_t(p)], ref[size_t(p)].data() + size_t(t0) * c.outs[size_t(p)]});
        qs::cuda::launch_small_linear_f32(parts, in, x.data() + size_t(t0) * in, n, nullptr);
    }
    bool ok = true;
    // float64 bound check of the reference itself (it is what the tiles must reproduce).
    double worst = 0.0;
    for (int p = 0; p < P; ++p)
        for (int t = 0; t < T; ++t)
            for (int o = 0; o < c.outs[size_t(p)]; ++o) {
                double d = 0.0, mag = 0.0;
                for (int k = 0; k < in; ++k) {
                    const double prod = double(w[size_t(p)][size_t(o) * in + k]) * x[size_t(t) * in + k];
                    d += prod;
                    mag += std::fabs(prod);
                }
                const double err = std::fabs(ref[size_t(p)][size_t(t) * c.outs[size_t(p)] + o] - d) / (mag + 1e-30);
                worst = std::max(worst, err);
            }
    if (!(worst < 1e-5)) ok = false;
    std::printf("in %4d parts", in);
    for (int o : c.outs) std::printf(" %d", o);
    std::printf(" T %3d: small-rows rel err %.2e", T, worst);
    for (int variant = 0; variant < qs::cuda::kF32LinearTileVariants; ++variant) {
        std::vector<std::vector<float>> y(static_cast<size_t>(P));
        std::vector<qs::cuda::SmallLinearF32Part> parts;
        for (int p = 0; p < P; ++p) {
            y[size_t(p)].assign(size_t(T) * c.outs[size_t(p)] + kGuard, kPoison);
            parts.push_back({w[size_t(p)].data(), c.outs[size_t(p)], y[size_t(p)].data()});
        }
        qs::cuda::launch_f32_linear_tiles(parts, in, x.data(), T, nullptr, variant);
        int64_t differ = 0, guard = 0;
        uint64_t h = 0;
        for (int p = 0; p < P; ++p) {
            const size_t n = size_t(T) * c.outs[size_t(p)];
            for (size_t i = 0; i < n; ++i)
                differ += std::memcmp(&y[size_t(p)][i], &ref[size_t(p)][i], 4) != 0;
            for (size_t i = n; i < n + kGuard; ++i) guard += y[size_t(p)][i] != kPoison;
            h ^= hash_bytes(y[size_t(p)].data(), n * 4) + uint64_t(p);
        }
        std::printf(" | v%d %s", variant, differ == 0 && guard == 0 ? "same bits" : "DIFFER");
        if (differ || guard) std::printf(" (%lld differ, %lld past y)", (long long)differ, (long long)guard);
        if (variant == 0) std::printf(" %016llx", (unsigned long long)h);
        ok = ok && differ == 0 && guard == 0;
    }
    std::printf(" %s\n", ok ? "PASS" : "FAIL");
    return ok;
}

}  // namespace

int main(int argc, char** argv) {
    const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
    const bool smoke = argc > 1 && std::strcmp(argv[1], "--smoke") == 0;  // CI (tests/CMakeLists.txt)
    std::vector<Case> cases = {
        {2048, {32, 32}, 9},          // GDN b, a
        {2048, {32, 32}, 67},
        {2048, {256, 1}, 20},         // router + shared-expert gate
        {256, {5, 13, 1, 7}, 37},     // part boundaries inside sub-tiles; slices of 8 chunks
        {384, {11}, 1},               // slices of 12 chunks: lanes without a chunk
        {128, {3, 9}, 17},            // 4 chunks a slice
        {4096, {19}, 12},             // 4 chunks a lane
        {1024, {64, 1, 40}, 130},     // more row tiles than variants' heights
    };
    if (quick) cases.resize(4);
    if (smoke) cases = {{2048, {32, 32}, 9}, {256, {5, 13, 1, 7}, 37}, {128, {3, 9}, 17}};
    int fails = 0;
    for (int mode = 0; mode < 2; ++mode) {
        emu::g_mode = mode;
        std::printf("schedule %s\n", mode == 0 ? "lockstep" : "greedy");
        std::mt19937 rng(1234);
        for (const Case& c : cases) fails += !run_case(c, rng);
    }
    std::printf("%s: %d failing case(s)\n", fails == 0 ? "ALL PASS" : "FAIL", fails);
    return fails == 0 ? 0 : 1;
}
