// fp32 linear lab: the launches Gemm::linears makes for fp32 weights of one input — the GDN b/a pair
// (2 × [32, 2,048]) and the router with its shared-expert gate ([256, 2,048] + [1, 2,048]) — three
// ways: cuBLAS's fp32 GEMM per weight ("cublas": LinearPolicy::kNoSmallRows), the small-rows kernel
// at T <= 8 ("small"), and the tiled kernel (f32_linear_tiles.cu) in each tile variant and its
// automatic choice ("tiles-vN", "tiles-auto").
// Correctness: every tiled output must equal, bit for bit, the small-rows kernel's on its row (run on
// the rows in groups of 8: rows 0-1,023 and the last 64), and be within 1e-5 of a float64 dot product
// relative to Σ|w·x| (sampled rows); cuBLAS's error is printed beside it.
// Timing: µs per call in a CUDA graph of 24 calls (lab_timing.h), inputs resident in L2 or not as a
// step leaves them (x is rewritten by nothing here); GB/s on x's T·in·4 + the weights' bytes, and
// fp32 TFLOP/s on 2·T·in·features. Run: f32_linear_lab [--no-timing]
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_memory.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/small_linear_kernels.h"
#include "lab_timing.h"

using namespace qs;
using namespace qs::cuda;

namespace {

struct Shape {
    const char* name;
    std::vector<int64_t> outs;
    int64_t in;
};

struct Weights {
    std::vector<std::vector<float>> host;
    std::vector<DeviceBuffer> dev;
    std::vector<DeviceLinear> lin;
};

Weights make_weights(const Shape& s, std::mt19937& rng) {
    std::normal_distribution<float> nd(0.0f, 0.02f);
    Weights w;
    for (int64_t out : s.outs) {
        std::vector<float> h(size_t(out * s.in));
        for (float& v : h) v = nd(rng);
        DeviceBuffer d(h.size() * 4);
        QS_CUDA_CHECK(cudaMemcpy(d.get(), h.data(), h.size() * 4, cudaMemcpyHostToDevice));
        w.host.push_back(std::move(h));
        w.dev.push_back(std::move(d));
    }
    for (size_t p = 0; p < s.outs.size(); ++p)
        w.lin.push_back(DeviceLinear{DeviceLinear::Dtype::kF32, w.dev[p].get(), nullptr, nullptr, s.outs[p], s.in});
    return w;
}

std::vector<SmallLinearF32Part> parts_of(const Weights& w, const std::vector<float*>& ys) {
    std::vector<SmallLinearF32Part> parts;
    for (size_t p = 0; p < w.lin.size(); ++p)
        parts.push_back({static_cast<const float*>(w.lin[p].w), w.lin[p].out, ys[p]});
    return parts;
}

std::vector<float> download(const float* d, size_t n) {
    std::vector<float> h(n);
    QS_CUDA_CHECK(cudaMemcpy(h.data(), d, n * 4, cudaMemcpyDeviceToHost));
    return h;
}

}  // namespace

int main(int argc, char** argv) {
    const bool timing = !(argc > 1 && std::strcmp(argv[1], "--no-timing") == 0);
    int sms = 0;
    QS_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    cudaStream_t st;
    QS_CUDA_CHECK(cudaStreamCreate(&st));
    Gemm gemm;
    DeviceArena arena(size_t(64) << 20);
    const Shape shapes[] = {{"gdn-b/a", {32, 32}, 2048}, {"router+gate", {256, 1}, 2048}};
    const std::vector<int64_t> Ts = {1, 8, 9, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};
    std::mt19937 rng(7);
    bool all_ok = true;
    std::printf("== correctness (bits against the small-rows kernel; error vs float64 / sum |w x|)\n");
    std::printf("%-12s %6s %-11s %-10s %-10s %s\n", "shape", "T", "path", "rows same", "rel err", "");
    struct Row {
        std::string shape, path;
        int64_t T;
        double us, gbs, tflops;
    };
    std::vector<Row> rows;
    for (const Shape& s : shapes) {
        const Weights w = make_weights(s, rng);
        int64_t features = 0;
        for (int64_t o : s.outs) features += o;
        const int64_t Tmax = Ts.back();
        std::vector<float> xh(size_t(Tmax * s.in));
        std::normal_distribution<float> nd(0.0f, 1.0f);
        for (float& v : xh) v = nd(rng);
        DeviceBuffer x(xh.size() * 4);
        QS_CUDA_CHECK(cudaMemcpy(x.get(), xh.data(), xh.size() * 4, cudaMemcpyHostToDevice));
        const float* xd = static_cast<const float*>(x.get());
        std::vector<DeviceBuffer> yb, rb;
        std::vector<float*> ys, rs;
        for (int64_t o : s.outs) {
            yb.emplace_back(size_t(Tmax * o) * 4);
            rb.emplace_back(size_t(Tmax * o) * 4);
            ys.push_back(static_cast<float*>(yb.back().get()));
            rs.push_back(static_cast<float*>(rb.back().get()));
        }
        for (int64_t T : Ts) {
            // Reference bits: the small-rows kernel on rows 0-1,023 and the last 64, 8 at a time.
            std::vector<int64_t> checked;
            for (int64_t t = 0; t < std::min<int64_t>(T, 1024); ++t) checked.push_back(t);
            for (int64_t t = std::max<int64_t>(1024, T - 64); t < T; ++t) checked.push_back(t);
            for (size_t i = 0; i < checked.size();) {
                size_t j = i;
                while (j < checked.size() && checked[j] == checked[i] + int64_t(j - i) && j - i < 8) ++j;
                const int64_t t0 = checked[i], n = int64_t(j - i);
                std::vector<float*> r;
                for (size_t p = 0; p < s.outs.size(); ++p) r.push_back(rs[p] + t0 * s.outs[p]);
                launch_small_linear_f32(parts_of(w, r), s.in, xd + t0 * s.in, n, st);
                i = j;
            }
            QS_CUDA_CHECK(cudaStreamSynchronize(st));
            std::vector<std::vector<float>> ref;
            for (size_t p = 0; p < s.outs.size(); ++p) ref.push_back(download(rs[p], size_t(T * s.outs[p])));
            auto check = [&](const std::string& path, bool demand_bits) {
                QS_CUDA_CHECK(cudaStreamSynchronize(st));
                int64_t same_rows = 0;
                double worst = 0.0;
                for (size_t p = 0; p < s.outs.size(); ++p) {
                    const std::vector<float> y = download(ys[p], size_t(T * s.outs[p]));
                    for (int64_t t : checked) {
                        const int64_t o = s.outs[p];
                        same_rows += std::memcmp(&y[size_t(t * o)], &ref[p][size_t(t * o)], size_t(o) * 4) == 0;
                        if (t % 97 != 0 && t != T - 1) continue;
                        for (int64_t f = 0; f < o; ++f) {
                            double d = 0.0, mag = 0.0;
                            for (int64_t k = 0; k < s.in; ++k) {
                                const double prod = double(w.host[p][size_t(f * s.in + k)]) * xh[size_t(t * s.in + k)];
                                d += prod;
                                mag += std::fabs(prod);
                            }
                            worst = std::max(worst, std::fabs(y[size_t(t * o + f)] - d) / (mag + 1e-30));
                        }
                    }
                }
                const int64_t want = int64_t(checked.size() * s.outs.size());
                const bool ok = worst < 1e-5 && (!demand_bits || same_rows == want);
                all_ok = all_ok && ok;
                std::printf("%-12s %6lld %-11s %4lld/%-5lld %-10.2e %s\n", s.name, (long long)T, path.c_str(),
                            (long long)same_rows, (long long)want, worst, ok ? "PASS" : "FAIL");
            };
            auto cublas = [&] {
                arena.reset();
                gemm.set_policy(LinearPolicy::kNoSmallRows);
                for (size_t p = 0; p < s.outs.size(); ++p) gemm.linear(w.lin[p], xd, T, ys[p], arena, st);
                gemm.set_policy(LinearPolicy::kAuto);
            };
            std::vector<std::pair<std::string, std::function<void()>>> paths;
            paths.push_back({"cublas", cublas});
            if (T <= kSmallLinearF32MaxRows)
                paths.push_back({"small", [&, T] { launch_small_linear_f32(parts_of(w, ys), s.in, xd, T, st); }});
            for (int v = -1; v < kF32LinearTileVariants; ++v)
                paths.push_back({v < 0 ? std::string("tiles-auto") : "tiles-v" + std::to_string(v),
                                 [&, T, v] { launch_f32_linear_tiles(parts_of(w, ys), s.in, xd, T, st, v, sms); }});
            for (auto& [name, run] : paths) {
                for (size_t p = 0; p < s.outs.size(); ++p)
                    QS_CUDA_CHECK(cudaMemsetAsync(ys[p], 0xff, size_t(T * s.outs[p]) * 4, st));  // NaN
                run();
                check(name, name != "cublas");
                if (!timing) continue;
                const double us = lab::graph_us_per_call(st, [&](int) { run(); });
                const double bytes = double(T * s.in + features * s.in) * 4;
                rows.push_back({s.name, name, T, us, bytes / us * 1e-3, 2.0 * T * s.in * features / us * 1e-6});
            }
        }
    }
    if (timing) {
        std::printf("\n== timing (µs per call in a CUDA graph; %d SMs; auto picks variant by T and features)\n", sms);
        std::printf("%-12s %6s %-11s %9s %8s %8s\n", "shape", "T", "path", "us", "GB/s", "TFLOP/s");
        for (const Row& r : rows)
            std::printf("%-12s %6lld %-11s %9.2f %8.0f %8.2f\n", r.shape.c_str(), (long long)r.T, r.path.c_str(), r.us,
                        r.gbs, r.tflops);
    }
    std::printf("\n%s\n", all_ok ? "ALL PASS" : "SOME FAILED");
    QS_CUDA_CHECK(cudaStreamDestroy(st));
    return all_ok ? 0 : 1;
}
