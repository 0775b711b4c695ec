// INT4 W4A16 small-row linear lab (src/backend/cuda/int4_linear_kernels.{h,cu}): checks the kernel
// against the CPU reference of int4_ref.h (dequantise + matmul in double, x rounded to bf16) for
// T = 1..8 and rows-per-warp 1, 2, 4, then times it at the real model's dense shapes (hidden 2048;
// q_proj / in_proj_qkv 2048→8192, k/v 2048→512, in_proj_z 2048→4096, o_proj / out_proj 4096→2048,
// and one routed-expert-sized 2048→512) beside the FP8 and BF16 small-rows kernels
// (small_linear_kernels.h) on the same shapes, and the same kernel on NVFP4 weights
// (launch_nvfp4_linear, CudaOptions::nvfp4_kernels: group 16, E4M3 block scale bytes, an fp32 global;
// checked against nvfp4_ref.h) — issue 18's "NVFP4 at INT4's bytes" at decode.
// Built with QS_BUILD_KERNEL_LABS=ON (target int4_gemv_lab, links qs_lib).
// Run: int4_gemv_lab [--no-timing]        (exit code 1 on any FAIL)
// Check: ‖gpu − ref‖/‖ref‖ < 1e-5 (the same bf16 x, exact weights: fp32 vs double sums).
// Timing: median of 50 single calls (CUDA events), the weight rotated over copies spanning
// >= 256 MB so L2 (50 MB) holds none of it; GB/s counts weight bytes (codes + scales; fp8 + scales;
// bf16) — what a memory-bound decode linear is limited by (H200: ~4.8 TB/s peak, ~4 TB/s reached
// by streaming kernels).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_memory.h"
#include "backend/cuda/int4_linear_kernels.h"
#include "backend/cuda/small_linear_kernels.h"
#include "int4_ref.h"
#include "nvfp4_ref.h"

using namespace qs::cuda;
using namespace int4_lab;

namespace {

int g_fail = 0;

void check(int64_t out, int64_t in, int64_t group) {
    for (int64_t T = 1; T <= 8; ++T)
        for (int rpw : {1, 2, 4}) {
            const Case c = make_case(out, in, group, T, uint32_t(out * 31 + in + T * 7 + rpw));
            const std::vector<double> ref = reference(c);
            DeviceBuffer dc(c.codes.size() * 4), ds(c.scales.size() * 2), dx(c.x.size() * 4), dy(ref.size() * 4);
            QS_CUDA_CHECK(cudaMemcpy(dc.get(), c.codes.data(), c.codes.size() * 4, cudaMemcpyHostToDevice));
            QS_CUDA_CHECK(cudaMemcpy(ds.get(), c.scales.data(), c.scales.size() * 2, cudaMemcpyHostToDevice));
            QS_CUDA_CHECK(cudaMemcpy(dx.get(), c.x.data(), c.x.size() * 4, cudaMemcpyHostToDevice));
            QS_CUDA_CHECK(cudaMemset(dy.get(), 0xff, ref.size() * 4));  // NaN
            launch_int4_linear(static_cast<const uint32_t*>(dc.get()), static_cast<const uint16_t*>(ds.get()), out, in,
                               group, static_cast<const float*>(dx.get()), T, static_cast<float*>(dy.get()), nullptr, rpw);
            std::vector<float> y(ref.size());
            QS_CUDA_CHECK(cudaMemcpy(y.data(), dy.get(), y.size() * 4, cudaMemcpyDeviceToHost));
            const double err = rel_error(y, ref);
            const bool ok = err < 1e-5;
            g_fail += !ok;
            if (!ok || T == 1 || T == 8)
                std::printf("  %s %5lld x %5lld g%-3lld T=%lld rpw=%d  rel err %.2e\n", ok ? "ok  " : "FAIL",
                            (long long)out, (long long)in, (long long)group, (long long)T, rpw, err);
        }
}

void check_nvfp4(int64_t out, int64_t in) {
    for (int64_t T = 1; T <= 8; ++T)
        for (int rpw : {1, 2, 4}) {
            const nvfp4_lab::Case c = nvfp4_lab::make_case(out, in, T, uint32_t(out * 29 + in + T * 5 + rpw));
            const std::vector<double> ref = nvfp4_lab::reference(c);
            DeviceBuffer dc(c.codes.size() * 4), ds(c.scale_bytes.size()), dx(c.x.size() * 4), dy(ref.size() * 4);
            QS_CUDA_CHECK(cudaMemcpy(dc.get(), c.codes.data(), c.codes.size() * 4, cudaMemcpyHostToDevice));
            QS_CUDA_CHECK(cudaMemcpy(ds.get(), c.scale_bytes.data(), c.scale_bytes.size(), cudaMemcpyHostToDevice));
            QS_CUDA_CHECK(cudaMemcpy(dx.get(), c.x.data(), c.x.size() * 4, cudaMemcpyHostToDevice));
            QS_CUDA_CHECK(cudaMemset(dy.get(), 0xff, ref.size() * 4));  // NaN
            launch_nvfp4_linear(static_cast<const uint32_t*>(dc.get()), static_cast<const uint8_t*>(ds.get()), c.global,
                                out, in, static_cast<const float*>(dx.get()), T, static_cast<float*>(dy.get()), nullptr,
                                rpw);
            std::vector<float> y(ref.size());
            QS_CUDA_CHECK(cudaMemcpy(y.data(), dy.get(), y.size() * 4, cudaMemcpyDeviceToHost));
            const double err = rel_error(y, ref);
            const bool ok = err < 1e-5;  // + one fp32 rounding of the global
            g_fail += !ok;
            if (!ok || T == 1 || T == 8)
                std::printf("  %s nvfp4 %5lld x %5lld T=%lld rpw=%d  rel err %.2e\n", ok ? "ok  " : "FAIL",
                            (long long)out, (long long)in, (long long)T, rpw, err);
        }
}

template <class F>
double median_us(F&& launch, int copies) {
    cudaEvent_t a, b;
    QS_CUDA_CHECK(cudaEventCreate(&a));
    QS_CUDA_CHECK(cudaEventCreate(&b));
    for (int i = 0; i < 5; ++i) launch(i % copies);
    std::vector<float> ms;
    for (int i = 0; i < 50; ++i) {
        QS_CUDA_CHECK(cudaEventRecord(a));
        launch(i % copies);
        QS_CUDA_CHECK(cudaEventRecord(b));
        QS_CUDA_CHECK(cudaEventSynchronize(b));
        float t = 0;
        QS_CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
        ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    QS_CUDA_CHECK(cudaEventDestroy(a));
    QS_CUDA_CHECK(cudaEventDestroy(b));
    return 1000.0 * ms[ms.size() / 2];
}

void time_shape(const char* name, int64_t out, int64_t in) {
    const int64_t group = 128;
    const size_t int4_bytes = size_t(out * in / 2 + out * (in / group) * 2), fp8_bytes = size_t(out * in),
                 nvfp4_bytes = size_t(out * in / 2 + out * (in / 16)),
                 bf16_bytes = size_t(out * in * 2);
    const int copies = int(std::max<size_t>(2, (size_t(256) << 20) / int4_bytes));
    // NVFP4: codes [out, in/2] bytes then E4M3 scale bytes [out, in/16] (zeros: finite), global 1.
    DeviceBuffer w4f(nvfp4_bytes * copies);
    QS_CUDA_CHECK(cudaMemset(w4f.get(), 0, nvfp4_bytes * copies));
    // Contents do not matter for timing: one buffer of `copies` weights per format (zeros: finite).
    DeviceBuffer w4(int4_bytes * copies), w8(fp8_bytes * copies), s8(size_t((out / 128) * (in / 128) * 4) * copies + 16),
        wb(std::min<size_t>(bf16_bytes * copies, size_t(2) << 30)), dx(size_t(8 * in * 4)), dy(size_t(8 * out * 4));
    QS_CUDA_CHECK(cudaMemset(w4.get(), 0, int4_bytes * copies));
    QS_CUDA_CHECK(cudaMemset(w8.get(), 0, fp8_bytes * copies));
    QS_CUDA_CHECK(cudaMemset(s8.get(), 0, size_t((out / 128) * (in / 128) * 4) * copies + 16));
    QS_CUDA_CHECK(cudaMemset(dx.get(), 0, size_t(8 * in * 4)));
    const int bf16_copies = int(std::min<size_t>(copies, wb.bytes() / bf16_bytes));
    auto* x = static_cast<const float*>(dx.get());
    auto* y = static_cast<float*>(dy.get());
    for (int64_t T : {1, 2, 4, 8}) {
        std::printf("  %-12s %5lld x %5lld T=%lld:", name, (long long)out, (long long)in, (long long)T);
        for (int rpw : {1, 2, 4}) {
            const double us = median_us(
                [&](int i) {
                    const auto* base = static_cast<const unsigned char*>(w4.get()) + size_t(i) * int4_bytes;
                    launch_int4_linear(reinterpret_cast<const uint32_t*>(base),
                                       reinterpret_cast<const uint16_t*>(base + out * in / 2), out, in, group, x, T, y,
                                       nullptr, rpw);
                },
                copies);
            std::printf("  int4 rpw%d %6.2f us %5.0f GB/s", rpw, us, double(int4_bytes) / us / 1e3);
        }
        for (int rpw : {1, 2, 4}) {
            const double us = median_us(
                [&](int i) {
                    const auto* base = static_cast<const unsigned char*>(w4f.get()) + size_t(i) * nvfp4_bytes;
                    launch_nvfp4_linear(reinterpret_cast<const uint32_t*>(base),
                                        reinterpret_cast<const uint8_t*>(base + out * in / 2), 1.0f, out, in, x, T, y,
                                        nullptr, rpw);
                },
                copies);
            std::printf("  | nvfp4 rpw%d %6.2f us %5.0f GB/s", rpw, us, double(nvfp4_bytes) / us / 1e3);
        }
        if (small_linear_supports(true, T, in, w8.get(), x)) {
            const double us = median_us(
                [&](int i) {
                    launch_small_linear(static_cast<const unsigned char*>(w8.get()) + size_t(i) * fp8_bytes, true,
                                        static_cast<const float*>(s8.get()) + size_t(i) * (out / 128) * (in / 128), out,
                                        in, x, T, y, nullptr);
                },
                copies);
            std::printf("  | fp8 %6.2f us %5.0f GB/s", us, double(fp8_bytes) / us / 1e3);
        }
        if (small_linear_supports(false, T, in, wb.get(), x)) {
            const double us = median_us(
                [&](int i) {
                    launch_small_linear(static_cast<const unsigned char*>(wb.get()) + size_t(i) * bf16_bytes, false,
                                        nullptr, out, in, x, T, y, nullptr);
                },
                bf16_copies);
            std::printf("  | bf16 %6.2f us %5.0f GB/s", us, double(bf16_bytes) / us / 1e3);
        }
        std::printf("\n");
    }
}

}  // namespace

int main(int argc, char** argv) {
    const bool timing = !(argc > 1 && !std::strcmp(argv[1], "--no-timing"));
    std::printf("int4_gemv_lab: correctness\n");
    check(72, 2048, 128);
    check(8192, 2048, 128);
    check(2048, 4096, 128);
    check(37, 512, 32);
    check(19, 96, 16);
    check_nvfp4(72, 2048);
    check_nvfp4(8192, 2048);
    check_nvfp4(2048, 4096);
    check_nvfp4(37, 512);
    check_nvfp4(19, 96);
    if (timing) {
        std::printf("int4_gemv_lab: timing (median of 50, weights rotated past L2)\n");
        time_shape("qkv/q_proj", 8192, 2048);
        time_shape("in_proj_z", 4096, 2048);
        time_shape("k/v_proj", 512, 2048);
        time_shape("out/o_proj", 2048, 4096);
        time_shape("expert", 512, 2048);
    }
    std::printf("%s (%d failing)\n", g_fail ? "FAIL" : "PASS", g_fail);
    return g_fail ? 1 : 0;
}
