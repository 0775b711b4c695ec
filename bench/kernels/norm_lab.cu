// Residual add + zero-centred RMSNorm lab (src/backend/cuda/basic_kernels.cu): the fused
// launch_add_rms_norm_zc against the two kernels it replaces (launch_add, then launch_rms_norm_zc),
// at the real hidden size (2,048) from one row (single-stream decode) to a 16,384-token prefill step.
// Built with QS_BUILD_KERNEL_LABS=ON (target norm_lab, links qs_lib).
// Run: norm_lab [seed]   (exit code 1 on any FAIL)
//
// Checks per T: the fused sum and output bitwise equal to add then rms_norm_zc on the GPU; the
// output against a double-precision CPU reference (normalised error < 1e-6: fp32 rounding only);
// in place (out = x) the output bitwise equal again.
// Timing: median of 50 calls (CUDA events), inputs larger than L2 rotated at large T so every call
// reads from memory; GB/s counts what each path must move: fused x, y read + x, out written
// (16 bytes per element); separate add (x, y read, x written: 12) + norm (x read, out written: 8).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include <cuda_runtime.h>

#include "backend/cuda/basic_kernels.h"
#include "backend/cuda/cuda_check.h"
#include "lab_timing.h"

namespace {

using namespace qs::cuda;

constexpr double kCopyTBs = 4.25;  // measured device-to-device copy ceiling (TB/s)
constexpr int64_t kH = 2048;       // hidden size of Qwen3.6-35B-A3B
constexpr float kEps = 1e-6f;

float* upload(const std::vector<float>& v) {
    float* d = nullptr;
    QS_CUDA_CHECK(cudaMalloc(&d, v.size() * 4));
    QS_CUDA_CHECK(cudaMemcpy(d, v.data(), v.size() * 4, cudaMemcpyHostToDevice));
    return d;
}

std::vector<float> download(const float* d, size_t n) {
    std::vector<float> v(n);
    QS_CUDA_CHECK(cudaMemcpy(v.data(), d, n * 4, cudaMemcpyDeviceToHost));
    return v;
}

}  // namespace

int main(int argc, char** argv) {
    const unsigned seed = argc > 1 ? unsigned(std::strtoul(argv[1], nullptr, 10)) : 1u;
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    bool all_ok = true;
    std::vector<float> w(kH);
    for (float& v : w) v = 0.1f * nd(rng);
    float* dw = upload(w);
    std::printf("add + rms_norm_zc, H = %lld: fused (launch_add_rms_norm_zc) against add then rms_norm_zc\n\n",
                (long long)kH);
    std::printf("| T | check | fused us | GB/s | %% of copy | add + norm us | GB/s | speed-up |\n|--:|---|--:|--:|--:|--:|--:|--:|\n");
    for (int64_t T : {int64_t(1), int64_t(64), int64_t(512), int64_t(1024), int64_t(4096), int64_t(16384)}) {
        const size_t n = size_t(T * kH);
        std::vector<float> x(n), y(n);
        for (float& v : x) v = nd(rng);
        for (float& v : y) v = 0.5f * nd(rng);
        // CPU reference in double.
        std::vector<double> ref(n);
        for (int64_t t = 0; t < T; ++t) {
            double ss = 0;
            for (int64_t i = 0; i < kH; ++i) {
                const double s = double(float(x[size_t(t * kH + i)] + y[size_t(t * kH + i)]));
                ss += s * s;
            }
            const double inv = 1.0 / std::sqrt(ss / double(kH) + double(kEps));
            for (int64_t i = 0; i < kH; ++i) {
                const double s = double(float(x[size_t(t * kH + i)] + y[size_t(t * kH + i)]));
                ref[size_t(t * kH + i)] = s * inv * (1.0 + double(w[size_t(i)]));
            }
        }
        float* dx1 = upload(x);
        float* dx2 = upload(x);
        float* dx3 = upload(x);
        float* dy = upload(y);
        float* dout1 = nullptr;
        float* dout2 = nullptr;
        QS_CUDA_CHECK(cudaMalloc(&dout1, n * 4));
        QS_CUDA_CHECK(cudaMalloc(&dout2, n * 4));
        launch_add_rms_norm_zc(dx1, dy, dw, T, kH, kEps, dout1, nullptr);
        launch_add(dx2, dy, int64_t(n), nullptr);
        launch_rms_norm_zc(dx2, dw, T, kH, kEps, dout2, nullptr);
        launch_add_rms_norm_zc(dx3, dy, dw, T, kH, kEps, dx3, nullptr);  // in place
        QS_CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<float> sum1 = download(dx1, n), sum2 = download(dx2, n);
        const std::vector<float> out1 = download(dout1, n), out2 = download(dout2, n), out3 = download(dx3, n);
        double num = 0, den = 0;
        for (size_t i = 0; i < n; ++i) {
            num += (double(out1[i]) - ref[i]) * (double(out1[i]) - ref[i]);
            den += ref[i] * ref[i];
        }
        const double err = std::sqrt(num / den);
        const bool same = sum1 == sum2 && out1 == out2 && out3 == out1;
        const bool ok = same && err < 1e-6;
        all_ok = all_ok && ok;
        // Timing: copies rotated so that at least 128 MB are touched between reuses at large T.
        const size_t bytes_per = n * 4 * 3;
        const int copies = int(std::clamp<size_t>((size_t(128) << 20) / bytes_per + 1, 1, 64));
        std::vector<float*> xs, ys, outs;
        for (int c = 0; c < copies; ++c) {
            xs.push_back(upload(x));
            ys.push_back(upload(y));
            float* o = nullptr;
            QS_CUDA_CHECK(cudaMalloc(&o, n * 4));
            outs.push_back(o);
        }
        const float fused = 1e3f * qs::lab::median_event_ms(
            [&](int i) {
                const int c = i % copies;
                launch_add_rms_norm_zc(xs[size_t(c)], ys[size_t(c)], dw, T, kH, kEps, outs[size_t(c)], nullptr);
            },
            50);
        const float sep = 1e3f * qs::lab::median_event_ms(
            [&](int i) {
                const int c = i % copies;
                launch_add(xs[size_t(c)], ys[size_t(c)], int64_t(n), nullptr);
                launch_rms_norm_zc(xs[size_t(c)], dw, T, kH, kEps, outs[size_t(c)], nullptr);
            },
            50);
        const double fused_gbs = double(n) * 16 / fused * 1e-3, sep_gbs = double(n) * 20 / sep * 1e-3;
        std::printf("| %lld | %s (err %.1e%s) | %.1f | %.0f | %.1f | %.1f | %.0f | %.2fx |\n", (long long)T,
                    ok ? "PASS" : "FAIL", err, same ? ", bits = add + norm" : ", BITS DIFFER", fused, fused_gbs,
                    100.0 * fused_gbs / (kCopyTBs * 1e3), sep, sep_gbs, sep / fused);
        std::fflush(stdout);
        for (float* p : xs) cudaFree(p);
        for (float* p : ys) cudaFree(p);
        for (float* p : outs) cudaFree(p);
        for (float* p : {dx1, dx2, dx3, dy, dout1, dout2}) cudaFree(p);
    }
    cudaFree(dw);
    std::printf("\n%s\n", all_ok ? "ALL PASS" : "SOME FAILED");
    return all_ok ? 0 : 1;
}
