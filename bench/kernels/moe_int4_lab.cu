// INT4 MoE lab (issue 18 item 4): the tensor-core INT4 W4A16 grouped GEMMs (moe_decode_gemm_int4.cu,
// MoeParams::int4_grouped = 1) beside today's paths on the same inputs, real shapes (E = 256, top-8,
// H = 2048, I = I_shared = 512, INT4 group 128):
//   bf16       the BF16 experts (small-T path at T <= 8, else the mma.sync grouped GEMMs v1)
//   fp8        the FP8 block experts, same paths
//   int4-today INT4 experts as served today: the INT4 small-T path at T <= 8, the BF16 copy above
//   int4-mma   INT4 experts on moe_decode_gemm_int4.cu (at T <= 8 with MoeParams::small_t = 0)
// Per T in 1, 8, 64, 512: the CPU-reference check of every path (float64 moe_ref.h on the same
// weights: the INT4 codes × power-of-two scales are exact bf16 values, so the bf16 reference is
// the INT4 one; fp8 against its dequantised values; PASS: nerr < 1e-2, worst token < 3e-2), then
// the median of 25 eager calls, each on the next of 4 device copies of the weights (L2 holds
// nothing useful between calls), as µs, the weight bytes the routed experts and the shared one
// touch (INT4: 0.5 B per weight + a bf16 scale per 128) per second and their share of 4.25 TB/s.
// Build: a bench target (bench/CMakeLists.txt globs kernels/*_lab.cu); run: build/bench/moe_int4_lab [seed]
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/moe_kernels.h"
#include "moe_int4_ref.h"
#include "moe_ref.h"

using namespace qs::cuda;
using namespace moe_ref;

namespace {

constexpr double kCopyTBs = 4.25;  // measured device-to-device copy ceiling on the H200 (TB/s)
constexpr int kCopies = 4, kReps = 25;

enum class Path { kBf16, kFp8, kInt4Today, kInt4Mma };
const char* path_name(Path p) {
    return p == Path::kBf16 ? "bf16" : p == Path::kFp8 ? "fp8" : p == Path::kInt4Today ? "int4-today" : "int4-mma";
}

template <class T>
T* upload(const std::vector<T>& v, std::vector<void*>& allocs) {
    void* p = nullptr;
    QS_CUDA_CHECK(cudaMalloc(&p, v.size() * sizeof(T)));
    QS_CUDA_CHECK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    allocs.push_back(p);
    return static_cast<T*>(p);
}

// One device copy of the layer: BF16 (with the INT4 arrays beside when q is set) or FP8 experts.
struct DevLayer {
    std::vector<void*> allocs;
    MoeExpertTable table{};
};
DevLayer make_layer(const HostExperts& h, bool fp8, const Int4Experts* q) {
    DevLayer L;
    const Shape& s = h.s;
    const int n = s.E + 1;
    std::vector<const void*> pg(n), pu(n), pd(n);
    std::vector<const float*> sg(n), su(n), sd(n);
    if (fp8) {
        const uint8_t* g = upload(h.qgate, L.allocs);
        const uint8_t* u = upload(h.qup, L.allocs);
        const uint8_t* d = upload(h.qdown, L.allocs);
        const float* gs = upload(h.sgate, L.allocs);
        const float* us = upload(h.sup, L.allocs);
        const float* ds = upload(h.sdown, L.allocs);
        for (int e = 0; e < n; ++e) {
            pg[e] = g + h.gu_off[e], pu[e] = u + h.gu_off[e], pd[e] = d + h.d_off[e];
            sg[e] = gs + h.gus_off[e], su[e] = us + h.gus_off[e], sd[e] = ds + h.ds_off[e];
        }
        L.table.gate_scale = upload(sg, L.allocs);
        L.table.up_scale = upload(su, L.allocs);
        L.table.down_scale = upload(sd, L.allocs);
    } else {
        const uint16_t* g = upload(h.gate, L.allocs);
        const uint16_t* u = upload(h.up, L.allocs);
        const uint16_t* d = upload(h.down, L.allocs);
        for (int e = 0; e < n; ++e) pg[e] = g + h.gu_off[e], pu[e] = u + h.gu_off[e], pd[e] = d + h.d_off[e];
    }
    L.table.format = fp8 ? DeviceWeightFormat::kFP8Block : DeviceWeightFormat::kBF16;
    L.table.gate = upload(pg, L.allocs);
    L.table.up = upload(pu, L.allocs);
    L.table.down = upload(pd, L.allocs);
    L.table.E = s.E, L.table.H = s.H, L.table.I = s.I, L.table.I_shared = s.Is;
    if (q) {
        std::vector<const uint32_t*> c[3];
        std::vector<const uint16_t*> sc[3];
        for (int e = 0; e < n; ++e)
            for (int m = 0; m < 3; ++m) {  // q.codes / q.scales hold gate, up, down of each expert in turn
                c[m].push_back(upload(q->codes[size_t(3 * e + m)], L.allocs));
                sc[m].push_back(upload(q->scales[size_t(3 * e + m)], L.allocs));
            }
        L.table.gate_q = upload(c[0], L.allocs);
        L.table.up_q = upload(c[1], L.allocs);
        L.table.down_q = upload(c[2], L.allocs);
        L.table.gate_qs = upload(sc[0], L.allocs);
        L.table.up_qs = upload(sc[1], L.allocs);
        L.table.down_qs = upload(sc[2], L.allocs);
        L.table.int4_group = q->group;
    }
    return L;
}
void free_layer(DevLayer& L) {
    for (void* p : L.allocs) QS_CUDA_CHECK(cudaFree(p));
    L.allocs.clear();
}

int touched_experts(const Inputs& in, const Shape& s) {
    std::vector<char> hit(s.E, 0);
    std::vector<int> ids;
    std::vector<float> w;
    for (int t = 0; t < in.T; ++t) {
        route_ref(&in.logits[size_t(t) * s.E], s.E, s.k, true, ids, w);
        for (const int e : ids) hit[e] = 1;
    }
    return int(std::count(hit.begin(), hit.end(), 1));
}

// Bytes of one expert's three matrices as `p` stores them (kInt4Today is never passed: see the caller).
double weight_bytes_per_expert(const Shape& s, int Ie, Path p) {
    const double n = 3.0 * Ie * s.H;
    if (p == Path::kFp8) return n + 3.0 * ((Ie + 127) / 128) * ((s.H + 127) / 128) * 4;
    if (p == Path::kInt4Mma) return n / 2 + n / 128 * 2;  // codes + bf16 scales (group 128)
    return n * 2;
}

MoeParams params(const MoeExpertTable& t, Path path, const float* x, const float* logits, const float* sg, int T,
                 int k, void* ws, float* y) {
    MoeParams p{};
    p.x = x;
    p.router_logits = logits;
    p.shared_gate_logit = sg;
    p.experts = t;
    p.T = T;
    p.top_k = k;
    p.norm_topk_prob = true;
    p.workspace = ws;
    p.y = y;
    if (path == Path::kInt4Mma) {
        p.int4_grouped = 1;
        p.small_t = 0;  // T <= 8 too
    }
    return p;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    const uint64_t seed = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1;
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    init_e4m3_lut();
    const Shape s{"real", 256, 8, 2048, 512, 512};
    Rng rng(seed);
    std::printf("moe_int4_lab seed=%llu: E=%d k=%d H=%d I=%d I_shared=%d, INT4 group 128; %d weight copies, median of %d\n",
                (unsigned long long)seed, s.E, s.k, s.H, s.I, s.Is, kCopies, kReps);
    HostExperts h = make_host_experts(s, seed + 3);             // fp8 copies quantised from these bf16 weights
    const Int4Experts q = make_int4_experts(h, 128, rng);       // h's bf16 weights become the INT4 values
    std::vector<DevLayer> bf16_int4, fp8;
    for (int c = 0; c < kCopies; ++c) {
        bf16_int4.push_back(make_layer(h, false, &q));
        fp8.push_back(make_layer(h, true, nullptr));
    }
    cudaStream_t st;
    QS_CUDA_CHECK(cudaStreamCreate(&st));
    cudaEvent_t e0, e1;
    QS_CUDA_CHECK(cudaEventCreate(&e0));
    QS_CUDA_CHECK(cudaEventCreate(&e1));
    int fails = 0;
    std::printf("\n   T   path        experts  weightMB   time_us    wGB/s  %%4.25TB/s   nerr      worst     check\n");
    for (const int T : {1, 8, 64, 512}) {
        const Inputs in = make_inputs(s, T, Routing::kGapped, rng);
        float *x, *logits, *sgl, *y;
        QS_CUDA_CHECK(cudaMalloc(&x, in.x.size() * 4));
        QS_CUDA_CHECK(cudaMalloc(&logits, in.logits.size() * 4));
        QS_CUDA_CHECK(cudaMalloc(&sgl, in.sg.size() * 4));
        QS_CUDA_CHECK(cudaMalloc(&y, size_t(T) * s.H * 4));
        QS_CUDA_CHECK(cudaMemcpy(x, in.x.data(), in.x.size() * 4, cudaMemcpyHostToDevice));
        QS_CUDA_CHECK(cudaMemcpy(logits, in.logits.data(), in.logits.size() * 4, cudaMemcpyHostToDevice));
        QS_CUDA_CHECK(cudaMemcpy(sgl, in.sg.data(), in.sg.size() * 4, cudaMemcpyHostToDevice));
        void* ws;
        QS_CUDA_CHECK(cudaMalloc(&ws, moe_workspace_bytes(T, s.H, s.I, s.Is, s.E, s.k)));
        // References: bf16 (= INT4) weights and fp8 ones, float64, threads over tokens.
        std::vector<std::vector<double>> ref_b(T), ref_f(T);
        parallel_for(T, [&](int64_t t) {
            moe_ref_token(h, false, true, &in.x[size_t(t) * s.H], &in.logits[size_t(t) * s.E], in.sg[t], ref_b[t]);
            moe_ref_token(h, true, true, &in.x[size_t(t) * s.H], &in.logits[size_t(t) * s.E], in.sg[t], ref_f[t]);
        });
        const int touched = touched_experts(in, s);
        for (const Path path : {Path::kBf16, Path::kFp8, Path::kInt4Today, Path::kInt4Mma}) {
            const bool is_fp8 = path == Path::kFp8;
            auto table = [&](int c) {
                MoeExpertTable t = (is_fp8 ? fp8 : bf16_int4)[size_t(c)].table;
                if (path == Path::kBf16) t.gate_q = t.up_q = t.down_q = nullptr, t.gate_qs = t.up_qs = t.down_qs = nullptr;
                return t;
            };
            // Check: y poisoned with NaN, one call, against the reference.
            QS_CUDA_CHECK(cudaMemsetAsync(y, 0xff, size_t(T) * s.H * 4, st));
            launch_moe(params(table(0), path, x, logits, sgl, T, s.k, ws, y), st);
            std::vector<float> yh(size_t(T) * s.H);
            QS_CUDA_CHECK(cudaMemcpyAsync(yh.data(), y, yh.size() * 4, cudaMemcpyDeviceToHost, st));
            QS_CUDA_CHECK(cudaStreamSynchronize(st));
            double num = 0, den = 0, worst = 0;
            size_t bad = 0;
            for (int t = 0; t < T; ++t) {
                const std::vector<double>& r = is_fp8 ? ref_f[t] : ref_b[t];
                double tn = 0, td = 0;
                for (int c = 0; c < s.H; ++c) {
                    const float v = yh[size_t(t) * s.H + c];
                    bad += !std::isfinite(v);
                    tn += (double(v) - r[c]) * (double(v) - r[c]);
                    td += r[c] * r[c];
                }
                num += tn, den += td;
                worst = std::max(worst, std::sqrt(tn / std::max(td, 1e-300)));
            }
            const double nerr = std::sqrt(num / std::max(den, 1e-300));
            const bool pass = bad == 0 && nerr < 1e-2 && worst < 3e-2;
            fails += !pass;
            // Timing: rotate over the weight copies.
            for (int c = 0; c < kCopies; ++c) launch_moe(params(table(c), path, x, logits, sgl, T, s.k, ws, y), st);
            std::vector<double> us;
            for (int r = 0; r < kReps; ++r) {
                const MoeParams p = params(table(r % kCopies), path, x, logits, sgl, T, s.k, ws, y);
                QS_CUDA_CHECK(cudaEventRecord(e0, st));
                launch_moe(p, st);
                QS_CUDA_CHECK(cudaEventRecord(e1, st));
                QS_CUDA_CHECK(cudaEventSynchronize(e1));
                float ms;
                QS_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
                us.push_back(double(ms) * 1e3);
            }
            const double t_us = median(us);
            // Weight bytes read: INT4 ones by the INT4 kernels (int4-mma; int4-today at T <= 8), else
            // the format's own (int4-today above 8: the BF16 copy).
            const Path bytes_as = path == Path::kInt4Today ? (T <= kMoeSmallTMax ? Path::kInt4Mma : Path::kBf16) : path;
            const double bytes = touched * weight_bytes_per_expert(s, s.I, bytes_as) + weight_bytes_per_expert(s, s.Is, bytes_as);
            const double gbs = bytes / (t_us * 1e-6) / 1e9;
            std::printf("%5d   %-10s  %5d  %9.1f  %9.1f  %8.0f  %7.1f %%   %.3e  %.3e  %s%s\n", T, path_name(path), touched,
                        bytes / 1e6, t_us, gbs, 100.0 * gbs / (kCopyTBs * 1e3), nerr, worst, pass ? "PASS" : "FAIL",
                        bad ? " (non-finite)" : "");
        }
        QS_CUDA_CHECK(cudaFree(ws));
        QS_CUDA_CHECK(cudaFree(x));
        QS_CUDA_CHECK(cudaFree(logits));
        QS_CUDA_CHECK(cudaFree(sgl));
        QS_CUDA_CHECK(cudaFree(y));
    }
    for (DevLayer& L : bf16_int4) free_layer(L);
    for (DevLayer& L : fp8) free_layer(L);
    std::printf("\n%s (%d failing)\n", fails ? "FAIL" : "PASS", fails);
    return fails ? 1 : 0;
}
