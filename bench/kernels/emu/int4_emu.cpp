// Runs the 4-bit small-row linear kernel (src/backend/cuda/int4_linear_kernels.cu, its own source
// and launchers) in the host SIMT emulator (emu_prelude.h) against the CPU references of
// bench/kernels/int4_ref.h (INT4) and nvfp4_ref.h (NVFP4): index arithmetic, nibble order, scale
// indexing, the NVFP4 global, rows past `out`, every T in 1..8 and rows-per-warp 1, 2, 4. First
// the register unpack itself (int4_unpack.cuh), exhaustively: every code in every nibble of a word,
// fp32 (unpack8) and bf16 pairs (bf16x2_pair), both formats. Says nothing about speed.
// Build and run (repo root; g++ only): sh bench/kernels/emu/run_emu.sh int4 [--nvfp4 | --int4]
#include <cstdio>
#include <cstring>

#include "backend/cuda/int4_linear_kernels.h"
#include "backend/cuda/int4_unpack.cuh"
#include "int4_ref.h"
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
                const float q = float(int(c) - 8);
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
                qs::cuda::launch_nvfp4_linear(c.codes.data(), c.scales.data(), c.global, s.out, s.in, c.x.data(), T,
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

}  // namespace

int main(int argc, char** argv) {
    const bool only_nvfp4 = argc > 1 && !std::strcmp(argv[1], "--nvfp4");
    const bool only_int4 = argc > 1 && !std::strcmp(argv[1], "--int4");
    int fails = check_unpack();
    if (!only_nvfp4) fails += run_int4();
    if (!only_int4) fails += run_nvfp4();
    std::printf(fails ? "int4 emu: %d FAILED\n" : "int4 emu: all passed\n", fails);
    return fails ? 1 : 0;
}
