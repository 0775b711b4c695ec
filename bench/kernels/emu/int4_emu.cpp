// Runs the INT4 small-row linear kernel (src/backend/cuda/int4_linear_kernels.cu, its own source
// and launcher) in the host SIMT emulator (emu_prelude.h) against the CPU reference of
// bench/kernels/int4_ref.h: index arithmetic, nibble order, scale indexing, rows past `out`, every
// T in 1..8 and rows-per-warp 1, 2, 4. Says nothing about speed.
// Build and run (repo root; g++ only): sh bench/kernels/emu/run_emu.sh int4
#include <cstdio>

#include "backend/cuda/int4_linear_kernels.h"
#include "int4_ref.h"

using namespace int4_lab;

int main() {
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
                    std::printf("%s out %lld in %lld group %lld T %lld rpw %d: rel err %.2e\n", ok ? "ok  " : "FAIL",
                                (long long)s.out, (long long)s.in, (long long)s.group, (long long)T, rpw, err);
            }
    std::printf(fails ? "int4 emu: %d FAILED\n" : "int4 emu: all passed\n", fails);
    return fails ? 1 : 0;
}
