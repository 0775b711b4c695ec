// Router lab: the MoE router + shared-expert-gate logits (logits [T, E] = x · Wrᵀ, gate [T] =
// x · wgᵀ) three ways: two cuBLASLt fp32 GEMMs (Gemm::linear on F32 weights, CUBLAS_COMPUTE_32F,
// LinearPolicy::kNoSmallRows), router_gemm.h's one-pass bf16 tensor-core kernel on split operands
// (CudaOptions::moe_router_kernel 1), and at T <= 8 the fp32 small-rows kernel with both weights
// in one launch (small_linear_f32.cu, what Gemm::linears takes there; "small-f32"), against a
// float64 CPU reference. small-f32's GB/s column is on the weights' (E + 1)·H·4 bytes.
// Run: router_lab [--no-timing] [seed]
// Correctness: real (E = 256, H = 2,048) and tiny (E = 16, H = 256; E = 5, H = 72: a K tail and a
// single padded row tile) shapes, odd and even T from 1 to 16,384, dense fp32 weights (Wl ≠ 0:
// three products) and bf16-exact weights (Wl = 0: two), every tile variant; outputs poisoned with
// NaN first. Error: max |y − ref| / max |ref| over the checked rows (every row up to 4,096, every
// 4th above), router and gate apart. PASS for the new kernel below 2e-5 (the split leaves ~2⁻¹⁶
// relative per product, random in sign; a dropped lo product costs ~2⁻⁹: ~1e-3) and, for every
// tile variant, outputs bit for bit tc-128's (a row's logits must not depend on T, which picks the
// variant); cuBLAS's fp32 error is printed beside it.
// Timing: real shape, dense weights and bf16-exact ones, T = 1 … 16,384 (2,048-8,192: the crossover
// with cuBLAS that sets router_kernel_min_rows),
// median of 20 after 3 warm-ups: µs, TFLOP/s on 2·T·H·(E + 1) and GB/s on x's T·H·4 bytes.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_memory.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/router_gemm.h"
#include "core/dtype.h"

using namespace qs;
using namespace qs::cuda;

namespace {

struct Case {
    int64_t E, H;
    bool bf16_exact;  // weights representable in bf16 (Wl = 0)
};

struct DeviceRouter {
    DeviceBuffer w32, g32, hi, lo;  // fp32 router [E, H], gate [1, H]; split [Npad, H]
    bool has_lo = false;
    DeviceLinear router, gate;
};

std::vector<float> random_vec(size_t n, float sd, uint64_t seed, bool bf16_exact) {
    std::vector<float> v(n);
    const unsigned nt = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
    std::vector<std::thread> th;
    for (unsigned t = 0; t < nt; ++t)
        th.emplace_back([&, t] {
            std::mt19937_64 rng(seed * 1000003 + t);
            std::normal_distribution<float> d(0.f, sd);
            for (size_t i = t; i < n; i += nt) v[i] = bf16_exact ? round_to_bf16(d(rng)) : d(rng);
        });
    for (auto& t : th) t.join();
    return v;
}

DeviceRouter upload(const std::vector<float>& w, int64_t E, int64_t H) {  // w [E + 1, H]
    DeviceRouter d;
    d.w32 = DeviceBuffer(size_t(E * H) * 4);
    d.g32 = DeviceBuffer(size_t(H) * 4);
    QS_CUDA_CHECK(cudaMemcpy(d.w32.get(), w.data(), size_t(E * H) * 4, cudaMemcpyHostToDevice));
    QS_CUDA_CHECK(cudaMemcpy(d.g32.get(), w.data() + E * H, size_t(H) * 4, cudaMemcpyHostToDevice));
    d.router = DeviceLinear{DeviceLinear::Dtype::kF32, d.w32.get(), nullptr, nullptr, E, H};
    d.gate = DeviceLinear{DeviceLinear::Dtype::kF32, d.g32.get(), nullptr, nullptr, 1, H};
    std::vector<uint16_t> hi, lo;
    const int64_t rows = router_padded_rows(E);
    d.has_lo = router_split_weights(w, E + 1, rows, H, hi, lo);
    d.hi = DeviceBuffer(hi.size() * 2);
    d.lo = DeviceBuffer(lo.size() * 2);
    QS_CUDA_CHECK(cudaMemcpy(d.hi.get(), hi.data(), hi.size() * 2, cudaMemcpyHostToDevice));
    QS_CUDA_CHECK(cudaMemcpy(d.lo.get(), lo.data(), lo.size() * 2, cudaMemcpyHostToDevice));
    return d;
}

int64_t row_step(int64_t T) { return T <= 4096 ? 1 : 4; }

// ref [T, E + 1] in double (rows checked only).
std::vector<double> reference(const std::vector<float>& x, const std::vector<float>& w, int64_t T, int64_t E,
                              int64_t H) {
    std::vector<double> ref(size_t(T * (E + 1)), 0.0);
    const unsigned nt = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
    std::vector<std::thread> th;
    const int64_t step = row_step(T);
    for (unsigned t = 0; t < nt; ++t)
        th.emplace_back([&, t] {
            for (int64_t m = int64_t(t) * step; m < T; m += int64_t(nt) * step)
                for (int64_t e = 0; e <= E; ++e) {
                    double s = 0;
                    const float* xr = x.data() + m * H;
                    const float* wr = w.data() + e * H;
                    for (int64_t k = 0; k < H; ++k) s += double(xr[k]) * double(wr[k]);
                    ref[size_t(m * (E + 1) + e)] = s;
                }
        });
    for (auto& t : th) t.join();
    return ref;
}

struct Err {
    double router = 0, gate = 0;
    bool nan = false;
};

Err compare(const std::vector<float>& logits, const std::vector<float>& gate, const std::vector<double>& ref,
            int64_t T, int64_t E) {
    double emax = 0, rmax = 0, gmax = 0, grmax = 0;
    bool nan = false;
    for (int64_t m = 0; m < T; m += row_step(T)) {
        for (int64_t e = 0; e < E; ++e) {
            const double r = ref[size_t(m * (E + 1) + e)], y = logits[size_t(m * E + e)];
            nan = nan || !std::isfinite(y);
            emax = std::max(emax, std::fabs(y - r));
            rmax = std::max(rmax, std::fabs(r));
        }
        const double r = ref[size_t(m * (E + 1) + E)], y = gate[size_t(m)];
        nan = nan || !std::isfinite(y);
        gmax = std::max(gmax, std::fabs(y - r));
        grmax = std::max(grmax, std::fabs(r));
    }
    return {emax / std::max(rmax, 1e-30), gmax / std::max(grmax, 1e-30), nan};
}

struct Runner {
    Gemm gemm;
    DeviceArena arena;
    cudaStream_t stream = nullptr;
    Runner() { QS_CUDA_CHECK(cudaStreamCreate(&stream)); }
    ~Runner() { cudaStreamDestroy(stream); }
    // variant -1: cuBLAS; -2: the small-rows fp32 kernel (Gemm::linears, T <= 8); else
    // launch_router_logits' variant.
    void run(int variant, const DeviceRouter& d, const float* x, int64_t T, int64_t E, int64_t H, float* logits,
             float* gate) {
        if (variant == -1) {
            arena.reset();
            gemm.set_policy(LinearPolicy::kNoSmallRows);
            gemm.linear(d.router, x, T, logits, arena, stream);
            gemm.linear(d.gate, x, T, gate, arena, stream);
            gemm.set_policy(LinearPolicy::kAuto);
        } else if (variant == -2) {
            arena.reset();
            const DeviceLinear* ws[2] = {&d.router, &d.gate};
            float* ys[2] = {logits, gate};
            const int64_t before = gemm.small_rows_f32_weights();
            gemm.linears(x, T, ws, ys, arena, stream);
            if (gemm.small_rows_f32_weights() != before + 2) {
                std::fprintf(stderr, "router_lab: small-f32 not taken at T = %lld\n", (long long)T);
                std::exit(1);
            }
        } else {
            launch_router_logits(x, T, H, static_cast<const uint16_t*>(d.hi.get()),
                                 d.has_lo ? static_cast<const uint16_t*>(d.lo.get()) : nullptr, E, logits, gate,
                                 stream, variant);
        }
    }
};

const char* variant_name(int v) {
    switch (v) {
        case -2: return "small-f32";
        case -1: return "cublas-f32";
        case 0: return "tc-auto";
        case 1: return "tc-128";
        case 2: return "tc-16";
        case 4: return "tc-128-k64";
        default: return "tc-64";
    }
}

}  // namespace

int main(int argc, char** argv) {
    bool timing = true;
    uint64_t seed = 1;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--no-timing") == 0) timing = false;
        else seed = std::strtoull(argv[i], nullptr, 10);
    }
    Runner run;
    bool all_ok = true;
    std::printf("== correctness (normalised max error vs float64; PASS: tensor-core kernel < 2e-5)\n");
    std::printf("%-6s %-6s %-4s %-6s %-11s %-10s %-10s %s\n", "E", "H", "Wl", "T", "path", "router", "gate", "");
    const Case cases[] = {{256, 2048, false}, {256, 2048, true}, {16, 256, false}, {5, 72, false}};
    for (const Case& c : cases) {
        const bool real = c.E == 256;
        std::vector<int64_t> Ts = real ? std::vector<int64_t>{1, 7, 64, 129, 1000, 4096, 16383}
                                       : std::vector<int64_t>{1, 3, 17, 130, 2049};
        if (c.bf16_exact) Ts = {8, 513, 4096};
        const std::vector<float> w = random_vec(size_t((c.E + 1) * c.H), 0.02f, seed + 7, c.bf16_exact);
        DeviceRouter d = upload(w, c.E, c.H);
        for (int64_t T : Ts) {
            const std::vector<float> x = random_vec(size_t(T * c.H), 1.f, seed * 31 + uint64_t(T), false);
            const std::vector<double> ref = reference(x, w, T, c.E, c.H);
            DeviceBuffer dx(x.size() * 4), dl(size_t(T * c.E) * 4), dg(size_t(T) * 4);
            QS_CUDA_CHECK(cudaMemcpy(dx.get(), x.data(), x.size() * 4, cudaMemcpyHostToDevice));
            std::vector<float> logits1, gate1;  // tc-128's outputs: every tile variant must have its bits
            for (int v : {-2, -1, 1, 0, 2, 3, 4}) {
                if (v == -2 && (T > 8 || c.H % 128 != 0)) continue;
                QS_CUDA_CHECK(cudaMemset(dl.get(), 0xff, size_t(T * c.E) * 4));  // NaN
                QS_CUDA_CHECK(cudaMemset(dg.get(), 0xff, size_t(T) * 4));
                run.run(v, d, static_cast<const float*>(dx.get()), T, c.E, c.H, static_cast<float*>(dl.get()),
                        static_cast<float*>(dg.get()));
                QS_CUDA_CHECK(cudaStreamSynchronize(run.stream));
                std::vector<float> logits(size_t(T * c.E)), gate(static_cast<size_t>(T));
                QS_CUDA_CHECK(cudaMemcpy(logits.data(), dl.get(), logits.size() * 4, cudaMemcpyDeviceToHost));
                QS_CUDA_CHECK(cudaMemcpy(gate.data(), dg.get(), gate.size() * 4, cudaMemcpyDeviceToHost));
                const Err e = compare(logits, gate, ref, T, c.E);
                // Each row's logits must not depend on T (which picks the variant and the rows per
                // block): every accumulator takes the same mma sequence in every variant.
                if (v == 1) logits1 = logits, gate1 = gate;
                const bool same_bits = v < 0 || v == 1 ||
                                       (std::memcmp(logits.data(), logits1.data(), logits.size() * 4) == 0 &&
                                        std::memcmp(gate.data(), gate1.data(), gate.size() * 4) == 0);
                const bool ok = v == -1 || (!e.nan && e.router < 2e-5 && e.gate < 2e-5 && same_bits);
                all_ok = all_ok && ok;
                std::printf("%-6lld %-6lld %-4s %-6lld %-11s %-10.2e %-10.2e %s%s%s\n", (long long)c.E,
                            (long long)c.H, d.has_lo ? "yes" : "0", (long long)T, variant_name(v), e.router, e.gate,
                            v == -1 ? "" : ok ? "PASS" : "FAIL", e.nan ? " (NaN: unwritten output)" : "",
                            v <= 1 ? "" : same_bits ? " (bits = tc-128)" : " (bits differ from tc-128)");
            }
        }
    }
    std::printf("correctness: %s\n", all_ok ? "ALL PASS" : "FAILURES");
    if (!timing) return all_ok ? 0 : 1;

    std::printf("\n== timing, E = 256, H = 2048 (median of 20; TFLOP/s on 2*T*H*(E+1), GB/s on x)\n");
    std::printf("%-4s %-6s %-11s %9s %9s %9s\n", "Wl", "T", "path", "us", "TFLOP/s", "GB/s");
    const int64_t E = 256, H = 2048, Tmax = 16384;
    const std::vector<float> x = random_vec(size_t(Tmax * H), 1.f, seed + 99, false);
    DeviceBuffer dx(x.size() * 4), dl(size_t(Tmax * E) * 4), dg(size_t(Tmax) * 4);
    QS_CUDA_CHECK(cudaMemcpy(dx.get(), x.data(), x.size() * 4, cudaMemcpyHostToDevice));
    cudaEvent_t a, b;
    QS_CUDA_CHECK(cudaEventCreate(&a));
    QS_CUDA_CHECK(cudaEventCreate(&b));
    for (bool exact : {false, true}) {
        const std::vector<float> w = random_vec(size_t((E + 1) * H), 0.02f, seed + 5, exact);
        DeviceRouter d = upload(w, E, H);
        for (int64_t T : {1, 2, 4, 8, 64, 512, 1024, 2048, 4096, 6144, 8192, 16384}) {
            for (int v : {-2, -1, 0, 1, 2, 3, 4}) {
                if (v == -2 && T > 8) continue;
                std::vector<float> ms;
                for (int i = 0; i < 23; ++i) {
                    QS_CUDA_CHECK(cudaEventRecord(a, run.stream));
                    run.run(v, d, static_cast<const float*>(dx.get()), T, E, H, static_cast<float*>(dl.get()),
                            static_cast<float*>(dg.get()));
                    QS_CUDA_CHECK(cudaEventRecord(b, run.stream));
                    QS_CUDA_CHECK(cudaEventSynchronize(b));
                    float t = 0;
                    QS_CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
                    if (i >= 3) ms.push_back(t);
                }
                std::sort(ms.begin(), ms.end());
                const double us = ms[ms.size() / 2] * 1e3;
                const double bytes = v == -2 ? double(E + 1) * H * 4 : double(T) * H * 4;  // weights, or x
                std::printf("%-4s %-6lld %-11s %9.1f %9.1f %9.0f%s\n", d.has_lo ? "yes" : "0", (long long)T,
                            variant_name(v), us, 2.0 * double(T) * H * (E + 1) / us * 1e-6, bytes / us * 1e-3,
                            v == -2 ? " (weights)" : "");
            }
        }
    }
    std::printf("correctness: %s\n", all_ok ? "ALL PASS" : "FAILURES");
    return all_ok ? 0 : 1;
}
