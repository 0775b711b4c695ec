// INT4 MoE lab (issue 18 item 4): the tensor-core INT4 W4A16 grouped GEMMs (moe_decode_gemm_int4.cu,
// MoeParams::int4_grouped = 1) beside today's paths on the same inputs, real shapes (E = 256, top-8,
// H = 2048, I = I_shared = 512, INT4 group 128):
//   bf16       the BF16 experts (small-T path at T <= 8, else the mma.sync grouped GEMMs v1)
//   fp8        the FP8 block experts, same paths
//   int4-today INT4 experts as served today: the INT4 small-T path at T <= 8, the BF16 copy above
//   fp8-dec2   the FP8 experts on the serving defaults' decode GEMMs (decode_version 2, PDL)
//   int4-mma   INT4 experts on moe_decode_gemm_int4.cu (at T <= 8 with MoeParams::small_t = 0)
//   int4-pdl   the same with the down GEMM on programmatic dependent launch (MoeParams::decode_pdl,
//              the serving default): y must equal int4-mma's bitwise (else the row FAILs)
// Per T in 1, 8, 64, 512: the CPU-reference check of every path (float64 moe_ref.h on the same
// weights: the INT4 codes × power-of-two scales are exact bf16 values, so the bf16 reference is
// the INT4 one; fp8 against its dequantised values; PASS: nerr < 1e-2, worst token < 3e-2), then
// the median of 25 eager calls, each on the next of 4 device copies of the weights (L2 holds
// nothing useful between calls), as µs, the weight bytes the routed experts and the shared one
// touch (INT4: 0.5 B per weight + a bf16 scale per 128) per second and their share of 4.25 TB/s.
// --scratch (INT4 experts without BF16 copies, CudaOptions::moe_int4_scratch; moe_int4_dequant.h):
// prompt-chunk sizes T = 1,024, 2,048, 4,096, 16,384 (the CUTLASS prefill path), paths
//   fp8           FP8 experts (the speed to match)
//   int4-copies   INT4 experts as served today above 1,024 rows: the BF16 copies
//   int4-scratch  no copies: the layer's experts dequantised into one BF16 scratch, then the same
//                 GEMMs (must equal int4-copies bitwise: the `same` column)
//   int4-mixed    no copies, MoeParams::int4_prefill_version 2 (moe_int4_mixed.h): transposed
//                 scales into the scratch, then CUTLASS's mixed-input grouped GEMMs on the experts'
//                 4-bit codes in place (`same`: its normalised difference from int4-scratch's y, which
//                 has the same bf16 weights; PASS needs < 5e-3 besides the reference check);
//                 int4-mixed-256 / int4-mix-256c2 the same on 128 × 256 tiles (MoeParams::int4_mixed_tile 1, 2)
//   int4-mma      the INT4 grouped GEMMs at any T (int4_grouped_max_t lifted): the alternative
// each checked against the float64 reference on 64 evenly spaced tokens, and `dequant` rows:
// the dequantisation alone (every expert, both kernel versions) and the mixed path's preparation
// alone, their µs and write+read GB/s.
// --nvfp4 (CudaOptions::nvfp4_kernels): NVFP4 experts (moe_int4_ref.h make_nvfp4_experts: E2M1
// codes, E4M3 power-of-two block scales per 16, a global per matrix; exact bf16 values, so the bf16
// reference is the NVFP4 one), paths
//   bf16         the BF16 copies of the NVFP4 weights (how NVFP4 is served with the option off)
//   fp8          FP8 experts (the speed to beat)
//   nvfp4-small  the packed NVFP4 arrays on the small-T path (moe_small_int4.cu, Code4::kNvfp4) at
//                T <= 8, the BF16 copies above; weight bytes 0.5 B per weight + a bf16 scale per 16
//   nvfp4-mma / nvfp4-pdl  the 4-bit grouped GEMMs (moe_decode_gemm_int4.cu, Code4::kNvfp4), as
//                int4-mma / int4-pdl above; T = 1, 2, 4, 8, 64, 512, the fp8 paths beside
// Build: a bench target (bench/CMakeLists.txt globs kernels/*_lab.cu); run:
// build/bench/moe_int4_lab [seed] [--scratch | --nvfp4]
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
#include "backend/cuda/moe_int4_dequant.h"
#include "backend/cuda/moe_int4_mixed.h"
#include "backend/cuda/moe_kernels.h"
#include "moe_int4_ref.h"
#include "moe_ref.h"

using namespace qs::cuda;
using namespace moe_ref;

namespace {

constexpr double kCopyTBs = 4.25;  // measured device-to-device copy ceiling on the H200 (TB/s)
constexpr int kCopies = 4, kReps = 25;
bool g_nvfp4 = false;  // --nvfp4: the INT4 arrays hold NVFP4 experts

enum class Path { kBf16, kFp8, kFp8Dec2, kInt4Today, kInt4Mma, kInt4Pdl };
const char* path_name(Path p) {
    switch (p) {
        case Path::kBf16: return "bf16";
        case Path::kFp8: return "fp8";
        case Path::kFp8Dec2: return "fp8-dec2";
        case Path::kInt4Today: return g_nvfp4 ? "nvfp4-small" : "int4-today";
        case Path::kInt4Mma: return g_nvfp4 ? "nvfp4-mma" : "int4-mma";
        case Path::kInt4Pdl: return g_nvfp4 ? "nvfp4-pdl" : "int4-pdl";
    }
    return "?";
}
bool is_int4_mma(Path p) { return p == Path::kInt4Mma || p == Path::kInt4Pdl; }
bool is_fp8(Path p) { return p == Path::kFp8 || p == Path::kFp8Dec2; }

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
        std::vector<const void*> sc[3];
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
        if (!q->global.empty()) {  // NVFP4 (make_nvfp4_experts)
            L.table.nvfp4 = true;
            L.table.nvfp4_global = upload(q->global, L.allocs);
        }
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
    if (is_fp8(p)) return n + 3.0 * ((Ie + 127) / 128) * ((s.H + 127) / 128) * 4;
    if (is_int4_mma(p)) return g_nvfp4 ? n / 2 + n / 16 : n / 2 + n / 128 * 2;  // codes + scales (E4M3 bytes / bf16)
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
    if (is_int4_mma(path)) {
        p.int4_grouped = 1;
        p.small_t = 0;  // T <= 8 too
        p.decode_pdl = path == Path::kInt4Pdl ? 1 : 0;
    }
    if (path == Path::kFp8Dec2) {
        p.decode_version = 2;
        p.decode_pdl = 1;
    }
    return p;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// The float64 reference's error of y on the rows `rows` (one reference per row in ref).
struct Check {
    double nerr = 0, worst = 0;
    size_t bad = 0;
    bool pass() const { return bad == 0 && nerr < 1e-2 && worst < 3e-2; }
    // FP8 experts on the prefill path (every T of --scratch) also round x and h to e4m3 per 128-column
    // group (gemm.h: ~2.5e-2 normalised error for Gaussian activations), so their bound is wider.
    bool pass_fp8_prefill() const { return bad == 0 && nerr < 6e-2 && worst < 1e-1; }
};
Check check_rows(const std::vector<float>& y, const std::vector<int>& rows, const std::vector<std::vector<double>>& ref,
                 int H) {
    Check c;
    double num = 0, den = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
        double tn = 0, td = 0;
        for (int j = 0; j < H; ++j) {
            const float v = y[size_t(rows[i]) * H + j];
            c.bad += !std::isfinite(v);
            tn += (double(v) - ref[i][j]) * (double(v) - ref[i][j]);
            td += ref[i][j] * ref[i][j];
        }
        num += tn, den += td;
        c.worst = std::max(c.worst, std::sqrt(tn / std::max(td, 1e-300)));
    }
    c.nerr = std::sqrt(num / std::max(den, 1e-300));
    return c;
}

// ||a − b|| / ||b|| over all elements (infinite where a has a non-finite value).
double normalised_diff(const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size()) return INFINITY;
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        if (!std::isfinite(a[i])) return INFINITY;
        const double d = double(a[i]) - double(b[i]);
        num += d * d, den += double(b[i]) * double(b[i]);
    }
    return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// --scratch: see the header.
int run_scratch(const Shape& s, const HostExperts& h, const Int4Experts& q, std::vector<DevLayer>& bf16_int4,
                std::vector<DevLayer>& fp8, Rng& rng, cudaStream_t st, cudaEvent_t e0, cudaEvent_t e1) {
    // One scratch, every weight copy's table pointing into it (as every layer's does on the device).
    void* scratch;
    const size_t scratch_bytes = moe_int4_scratch_bytes(s.E, s.H, s.I, s.Is);
    QS_CUDA_CHECK(cudaMalloc(&scratch, scratch_bytes));
    std::vector<const void*> sg, su, sd;
    moe_int4_scratch_pointers(scratch, s.E, s.H, s.I, s.Is, sg, su, sd);
    std::vector<void*> allocs;
    const void* const* tg = upload(sg, allocs);
    const void* const* tu = upload(su, allocs);
    const void* const* td = upload(sd, allocs);
    int fails = 0;
    std::printf("\n   T   path          time_us   vs fp8   nerr(64 rows)  worst     same   check\n");
    for (const int T : {1024, 2048, 4096, 16384}) {
        const Inputs in = make_inputs(s, T, Routing::kNormal, rng);
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
        std::vector<int> rows;
        for (int i = 0; i < 64; ++i) rows.push_back(int(int64_t(i) * (T - 1) / 63));
        std::vector<std::vector<double>> ref_b(rows.size()), ref_f(rows.size());
        parallel_for(int64_t(rows.size()), [&](int64_t i) {
            const int t = rows[size_t(i)];
            moe_ref_token(h, false, true, &in.x[size_t(t) * s.H], &in.logits[size_t(t) * s.E], in.sg[t], ref_b[size_t(i)]);
            moe_ref_token(h, true, true, &in.x[size_t(t) * s.H], &in.logits[size_t(t) * s.E], in.sg[t], ref_f[size_t(i)]);
        });
        enum { kFp8, kCopies, kScratch, kMixed, kMixed256, kMixed256C2, kMma };
        const char* names[] = {"fp8", "int4-copies", "int4-scratch", "int4-mixed", "int4-mixed-256", "int4-mix-256c2",
                               "int4-mma"};
        std::vector<float> y_copies, y_scratch;
        double fp8_us = 0;
        for (int path = kFp8; path <= kMma; ++path) {
            auto make = [&](int c) {
                MoeExpertTable t = (path == kFp8 ? fp8 : bf16_int4)[size_t(c)].table;
                const bool mixed = path == kMixed || path == kMixed256 || path == kMixed256C2;
                if (path == kScratch || mixed)
                    t.gate = tg, t.up = tu, t.down = td, t.bf16_in_scratch = true, t.int4_scratch = scratch,
                    t.int4_scratch_bytes = scratch_bytes;
                MoeParams p = params(t, Path::kBf16, x, logits, sgl, T, s.k, ws, y);
                p.prefill_version = 2;  // the serving default
                if (mixed) p.int4_prefill_version = 2, p.int4_mixed_tile = path - kMixed;
                if (path == kMma) p.int4_grouped = 1, p.int4_grouped_max_t = 1 << 30;
                return p;
            };
            QS_CUDA_CHECK(cudaMemsetAsync(scratch, 0xff, scratch_bytes, st));  // NaN: a skipped expert would show
            QS_CUDA_CHECK(cudaMemsetAsync(y, 0xff, size_t(T) * s.H * 4, st));
            launch_moe(make(0), st);
            std::vector<float> yh(size_t(T) * s.H);
            QS_CUDA_CHECK(cudaMemcpyAsync(yh.data(), y, yh.size() * 4, cudaMemcpyDeviceToHost, st));
            QS_CUDA_CHECK(cudaStreamSynchronize(st));
            const Check c = check_rows(yh, rows, path == kFp8 ? ref_f : ref_b, s.H);
            bool same = true;
            double vs_scratch = 0;
            if (path == kCopies) y_copies = yh;
            if (path == kScratch) same = yh == y_copies, y_scratch = yh;
            if (path >= kMixed && path <= kMixed256C2) {
                const bool taken = moe_takes_int4_mixed(make(0));
                vs_scratch = taken ? normalised_diff(yh, y_scratch) : 1.0;
                same = vs_scratch < 5e-3;
            }
            const bool pass = (path == kFp8 ? c.pass_fp8_prefill() : c.pass()) && same;
            fails += !pass;
            for (int r = 0; r < kCopies; ++r) launch_moe(make(r), st);
            std::vector<double> us;
            for (int r = 0; r < kReps; ++r) {
                const MoeParams p = make(r % kCopies);
                QS_CUDA_CHECK(cudaEventRecord(e0, st));
                launch_moe(p, st);
                QS_CUDA_CHECK(cudaEventRecord(e1, st));
                QS_CUDA_CHECK(cudaEventSynchronize(e1));
                float ms;
                QS_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
                us.push_back(double(ms) * 1e3);
            }
            const double t_us = median(us);
            if (path == kFp8) fp8_us = t_us;
            char same_col[32] = "-";
            if (path == kScratch) std::snprintf(same_col, sizeof same_col, "%s", same ? "yes" : "NO");
            if (path >= kMixed && path <= kMixed256C2) std::snprintf(same_col, sizeof same_col, "%.1e", vs_scratch);
            std::printf("%5d   %-12s %9.1f   %5.2fx   %.3e      %.3e  %-7s  %s%s\n", T, names[path], t_us, t_us / fp8_us,
                        c.nerr, c.worst, same_col, pass ? "PASS" : "FAIL", c.bad ? " (non-finite)" : "");
        }
        QS_CUDA_CHECK(cudaFree(ws));
        QS_CUDA_CHECK(cudaFree(x));
        QS_CUDA_CHECK(cudaFree(logits));
        QS_CUDA_CHECK(cudaFree(sgl));
        QS_CUDA_CHECK(cudaFree(y));
    }
    // The dequantisation alone, every expert (expert_off null), rotating over the weight copies; each
    // kernel version (launch_moe_int4_dequant), version 2's scratch compared with version 1's bitwise.
    const size_t n16 = scratch_bytes / 2;
    std::vector<uint16_t> by_version[2] = {std::vector<uint16_t>(n16), std::vector<uint16_t>(n16)};
    for (int version : {1, 2}) {
        std::vector<double> us;
        for (int r = 0; r < kReps + kCopies; ++r) {
            MoeExpertTable t = bf16_int4[size_t(r % kCopies)].table;
            t.gate = tg, t.up = tu, t.down = td, t.bf16_in_scratch = true, t.int4_scratch_bytes = scratch_bytes;
            QS_CUDA_CHECK(cudaEventRecord(e0, st));
            launch_moe_int4_dequant(t, nullptr, st, version);
            QS_CUDA_CHECK(cudaEventRecord(e1, st));
            QS_CUDA_CHECK(cudaEventSynchronize(e1));
            float ms;
            QS_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
            if (r >= kCopies) us.push_back(double(ms) * 1e3);
        }
        QS_CUDA_CHECK(cudaMemcpy(by_version[version - 1].data(), scratch, scratch_bytes, cudaMemcpyDeviceToHost));
        const double d_us = median(us);
        const double moved = double(scratch_bytes) * (1.0 + 0.25 + 1.0 / 128);  // bf16 out, codes, scales in
        const bool same = version == 1 || by_version[0] == by_version[1];
        if (!same) ++fails;
        std::printf("      dequant v%d   %9.1f   (%.0f MB written, %.0f GB/s moved, %.1f %% of %.2f TB/s)%s\n", version, d_us,
                    double(scratch_bytes) / 1e6, moved / (d_us * 1e-6) / 1e9,
                    100.0 * moved / (d_us * 1e-6) / (kCopyTBs * 1e12), kCopyTBs,
                    version == 1 ? "" : same ? " bitwise v1's: PASS" : " differs from v1's: FAIL");
    }
    {  // the mixed path's preparation alone (every expert)
        std::vector<double> us;
        MoeExpertTable t0 = bf16_int4[0].table;
        t0.bf16_in_scratch = true, t0.int4_scratch = scratch, t0.int4_scratch_bytes = scratch_bytes;
        const size_t mixed_bytes = int4_mixed_operands(t0).bytes();
        for (int r = 0; r < kReps + kCopies; ++r) {
            MoeExpertTable t = bf16_int4[size_t(r % kCopies)].table;
            t.gate = tg, t.up = tu, t.down = td, t.bf16_in_scratch = true, t.int4_scratch = scratch,
                    t.int4_scratch_bytes = scratch_bytes;
            QS_CUDA_CHECK(cudaEventRecord(e0, st));
            launch_moe_int4_mixed_prep(t, nullptr, st);
            QS_CUDA_CHECK(cudaEventRecord(e1, st));
            QS_CUDA_CHECK(cudaEventSynchronize(e1));
            float ms;
            QS_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
            if (r >= kCopies) us.push_back(double(ms) * 1e3);
        }
        const double p_us = median(us);
        const double moved = 2.0 * double(mixed_bytes);  // read and written
        std::printf("      mixed prep  %9.1f   (%.0f MB written, %.0f GB/s moved, %.1f %% of %.2f TB/s)\n", p_us,
                    double(mixed_bytes) / 1e6, moved / (p_us * 1e-6) / 1e9,
                    100.0 * moved / (p_us * 1e-6) / (kCopyTBs * 1e12), kCopyTBs);
    }
    (void)q;
    for (void* p : allocs) QS_CUDA_CHECK(cudaFree(p));
    QS_CUDA_CHECK(cudaFree(scratch));
    return fails;
}

}  // namespace

int main(int argc, char** argv) {
    const uint64_t seed = argc > 1 && argv[1][0] != '-' ? std::strtoull(argv[1], nullptr, 10) : 1;
    bool scratch_mode = false;
    for (int i = 1; i < argc; ++i) scratch_mode = scratch_mode || std::string(argv[i]) == "--scratch";
    for (int i = 1; i < argc; ++i) g_nvfp4 = g_nvfp4 || std::string(argv[i]) == "--nvfp4";
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    init_e4m3_lut();
    const Shape s{"real", 256, 8, 2048, 512, 512};
    Rng rng(seed);
    std::printf("moe_int4_lab seed=%llu: E=%d k=%d H=%d I=%d I_shared=%d, %s; %d weight copies, median of %d\n",
                (unsigned long long)seed, s.E, s.k, s.H, s.I, s.Is, g_nvfp4 ? "NVFP4 group 16" : "INT4 group 128", kCopies,
                kReps);
    HostExperts h = make_host_experts(s, seed + 3);             // fp8 copies quantised from these bf16 weights
    // h's bf16 weights become the INT4 (or NVFP4) values
    const Int4Experts q = g_nvfp4 ? make_nvfp4_experts(h, rng) : make_int4_experts(h, 128, rng);
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
    if (scratch_mode) {
        fails = run_scratch(s, h, q, bf16_int4, fp8, rng, st, e0, e1);
        for (DevLayer& L : bf16_int4) free_layer(L);
        for (DevLayer& L : fp8) free_layer(L);
        std::printf("\n%s (%d failing)\n", fails ? "FAIL" : "PASS", fails);
        return fails ? 1 : 0;
    }
    std::printf("\n   T   path        experts  weightMB   time_us    wGB/s  %%4.25TB/s   nerr      worst     check\n");
    const std::vector<int> sizes = g_nvfp4 ? std::vector<int>{1, 2, 4, 8, 64, 512} : std::vector<int>{1, 8, 64, 512};
    const std::vector<Path> paths{Path::kBf16, Path::kFp8, Path::kFp8Dec2, Path::kInt4Today, Path::kInt4Mma, Path::kInt4Pdl};
    for (const int T : sizes) {
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
        std::vector<float> y_mma;  // int4-mma's y: int4-pdl must give its bits
        for (const Path path : paths) {
            const bool fp8_path = is_fp8(path);
            auto table = [&](int c) {
                MoeExpertTable t = (fp8_path ? fp8 : bf16_int4)[size_t(c)].table;
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
                const std::vector<double>& r = fp8_path ? ref_f[t] : ref_b[t];
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
            const bool pdl_row = path == Path::kInt4Pdl;
            if (path == Path::kInt4Mma) y_mma = yh;
            const bool same_ok = !pdl_row || yh == y_mma;
            const char* same = !pdl_row ? "" : same_ok ? "  = int4-mma bitwise" : "  DIFFERS from int4-mma";
            const bool pass = bad == 0 && nerr < 1e-2 && worst < 3e-2 && same_ok;
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
            std::printf("%5d   %-10s  %5d  %9.1f  %9.1f  %8.0f  %7.1f %%   %.3e  %.3e  %s%s%s\n", T, path_name(path), touched,
                        bytes / 1e6, t_us, gbs, 100.0 * gbs / (kCopyTBs * 1e3), nerr, worst, pass ? "PASS" : "FAIL",
                        bad ? " (non-finite)" : "", same);
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
