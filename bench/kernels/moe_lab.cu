// MoE lab: correctness of launch_moe (src/backend/cuda/moe_*.cu) against a float64 CPU
// reference of CpuOps::moe (src/backend/cpu/cpu_moe.cpp), then timings at decode and prefill shapes.
// Build (from the repository root):
//   nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -Isrc bench/kernels/moe_lab.cu src/backend/cuda/moe_*.cu -o build-gpu/moe_lab
// Run: build-gpu/moe_lab [seed] [--no-timing] [--quick] [--tiny-only] [--prefill] [--small] [--decode]
// --prefill: the CUTLASS prefill path beside mma.sync (fp8 and bf16): tiny + real correctness,
// timing at T = 1024, 2048, 4096, 16384 (a short device run). Each CUTLASS run also runs with
// MoeParams::prefill_version = 2 (paths cut-v2 / cutpp-v2: multi-block sort, batched-load stages;
// y must be bitwise that of version 1), and the timing prints a "v2 - v1" line per stage.
// --small: the small-T path (moe_small.cu, T <= kMoeSmallTMax), v1 and v2 (router fused), beside the
// mma.sync path: tiny + real correctness at T = 1, 2, 4, 8 (with determinism and graph replay; v2 with
// exact router weights must equal v1 bitwise, plus one dense-router case), timing at T = 1, 2, 4, 8,
// 16 (16: mma.sync only, the path above the threshold): eager with per-stage events, then each
// call in a CUDA graph with the router linears included (what a decode step pays) (a short device run).
// --decode: the decode grouped GEMMs, version 1 (moe_gemm.cu: auto tiles, 16- and 32-row tiles) beside
// version 2 (MoeParams::decode_version = 2, moe_decode_gemm.cu): correctness tiny T = 9, 40, 512 and
// 64 skewed, real T = 40, 512 and 512 skewed (determinism, graph replay), timing at T = 64, 256, 512
// eager with stages and in a CUDA graph
// (the MoE call alone: the router linears are the same for both versions) (a short device run);
// version 2 also with its down GEMM launched with programmatic dependent launch (dec2+pdl:
// MoeParams::decode_pdl; only the graph line has it: the eager rows record events between the
// stages); it must be bitwise version 2's y; and that with the expert outputs in bf16 (d2+pdl+e16:
// MoeParams::decode_eout_bf16; held to the reference bounds).
//
// Correctness: tiny (E=16, k=4, H=256, I=128) and real (E=256, k=8, H=2048, I=512) shapes, T = 1, 7,
// 512 (+4096 real), bf16 and fp8 weights, every tile configuration; fresh random inputs, y
// poisoned with NaN before each run. fp8 weights are random bf16 weights quantised with
// per-128×128-block amax/448 scales; the reference uses the dequantised values. The reference
// does the routing exactly as the CPU code (float) and the expert maths in double from the fp32
// x, so the GPU's error is its bf16 rounding of x and of h = silu(g)·u (each ~2^-9 relative per
// element, random signs): expected normalised error ~2-4e-3; PASS below 1e-2 overall and 3e-2 for
// the worst token. Router logits are drawn with gaps between ranks (so fp32 rounding differences
// cannot flip a choice), plus exact ties on some tokens (ties go to the lower index).
// Also checked: bitwise determinism (two runs), CUDA-graph capture + replay equal to a direct run.
// Timing: real shapes, T = 1, 64, 512 (decode) and 4096, 16384 (prefill), N(0,1) router logits
// (uniform expert load), three weight copies and four input sets rotated so L2 holds nothing
// useful between runs; median of 25; weight bytes actually touched / time and TFLOP/s.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_memory.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/moe_common.cuh"
#include "backend/cuda/moe_kernels.h"
#include "backend/cuda/moe_prefill.h"
#include "backend/cuda/moe_prefill_stages.h"
#include "lab_timing.h"
#include "moe_ref.h"

using namespace qs::cuda;
using namespace moe_ref;

namespace {

constexpr double kCopyTBs = 4.25;       // measured device-to-device copy ceiling (TB/s)
constexpr double kBf16GemmTflops = 772;  // measured bf16 GEMM ceiling (TFLOP/s)

// ------------------------------------------------------------------------------------------
// Host helpers
// ------------------------------------------------------------------------------------------

// ------------------------------------------------------------------------------------------
// Model weights (host) and their device copies
// ------------------------------------------------------------------------------------------

struct DevLayer {
    std::vector<void*> allocs;
    MoeExpertTable table{};
    size_t bytes_per_routed = 0, bytes_shared = 0;  // weight (+scale) bytes of one expert
};

template <class T>
T* upload(const std::vector<T>& v, std::vector<void*>& allocs) {
    void* p = nullptr;
    QS_CUDA_CHECK(cudaMalloc(&p, v.size() * sizeof(T)));
    QS_CUDA_CHECK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    allocs.push_back(p);
    return static_cast<T*>(p);
}

DevLayer make_layer(const HostExperts& h, bool fp8) {
    DevLayer L;
    const Shape& s = h.s;
    const int n = s.E + 1;
    std::vector<const void*> pg(n), pu(n), pd(n);
    std::vector<const float*> sg(n, nullptr), su(n, nullptr), sd(n, nullptr);
    if (fp8) {
        const uint8_t* g = upload(h.qgate, L.allocs);
        const uint8_t* u = upload(h.qup, L.allocs);
        const uint8_t* d = upload(h.qdown, L.allocs);
        const float* gs = upload(h.sgate, L.allocs);
        const float* us = upload(h.sup, L.allocs);
        const float* ds = upload(h.sdown, L.allocs);
        for (int e = 0; e < n; ++e) {
            pg[e] = g + h.gu_off[e];
            pu[e] = u + h.gu_off[e];
            pd[e] = d + h.d_off[e];
            sg[e] = gs + h.gus_off[e];
            su[e] = us + h.gus_off[e];
            sd[e] = ds + h.ds_off[e];
        }
    } else {
        const uint16_t* g = upload(h.gate, L.allocs);
        const uint16_t* u = upload(h.up, L.allocs);
        const uint16_t* d = upload(h.down, L.allocs);
        for (int e = 0; e < n; ++e) {
            pg[e] = g + h.gu_off[e];
            pu[e] = u + h.gu_off[e];
            pd[e] = d + h.d_off[e];
        }
    }
    L.table.format = fp8 ? DeviceWeightFormat::kFP8Block : DeviceWeightFormat::kBF16;
    L.table.gate = upload(pg, L.allocs);
    L.table.up = upload(pu, L.allocs);
    L.table.down = upload(pd, L.allocs);
    L.table.gate_scale = fp8 ? upload(sg, L.allocs) : nullptr;
    L.table.up_scale = fp8 ? upload(su, L.allocs) : nullptr;
    L.table.down_scale = fp8 ? upload(sd, L.allocs) : nullptr;
    L.table.E = s.E;
    L.table.H = s.H;
    L.table.I = s.I;
    L.table.I_shared = s.Is;
    auto expert_bytes = [&](int Ie) {
        const size_t w = size_t(3) * Ie * s.H * (fp8 ? 1 : 2);
        const size_t sc = fp8 ? size_t(3) * ((Ie + 127) / 128) * ((s.H + 127) / 128) * 4 : 0;
        return w + sc;
    };
    L.bytes_per_routed = expert_bytes(s.I);
    L.bytes_shared = expert_bytes(s.Is);
    return L;
}

void free_layer(DevLayer& L) {
    for (void* p : L.allocs) QS_CUDA_CHECK(cudaFree(p));
    L.allocs.clear();
}

struct DevInputs {
    float *x = nullptr, *logits = nullptr, *sg = nullptr;
    float *rw = nullptr, *rsg = nullptr;  // router weights (make_router_weights), for the small-T path v2
    int T = 0;
};
DevInputs upload_inputs(const Inputs& in, const RouterWeights* rw = nullptr) {
    DevInputs d;
    d.T = in.T;
    if (rw) {
        QS_CUDA_CHECK(cudaMalloc(&d.rw, rw->w.size() * 4));
        QS_CUDA_CHECK(cudaMalloc(&d.rsg, rw->sg.size() * 4));
        QS_CUDA_CHECK(cudaMemcpy(d.rw, rw->w.data(), rw->w.size() * 4, cudaMemcpyHostToDevice));
        QS_CUDA_CHECK(cudaMemcpy(d.rsg, rw->sg.data(), rw->sg.size() * 4, cudaMemcpyHostToDevice));
    }
    QS_CUDA_CHECK(cudaMalloc(&d.x, in.x.size() * 4));
    QS_CUDA_CHECK(cudaMalloc(&d.logits, in.logits.size() * 4));
    QS_CUDA_CHECK(cudaMalloc(&d.sg, in.sg.size() * 4));
    QS_CUDA_CHECK(cudaMemcpy(d.x, in.x.data(), in.x.size() * 4, cudaMemcpyHostToDevice));
    QS_CUDA_CHECK(cudaMemcpy(d.logits, in.logits.data(), in.logits.size() * 4, cudaMemcpyHostToDevice));
    QS_CUDA_CHECK(cudaMemcpy(d.sg, in.sg.data(), in.sg.size() * 4, cudaMemcpyHostToDevice));
    return d;
}
void free_inputs(DevInputs& d) {
    QS_CUDA_CHECK(cudaFree(d.x));
    QS_CUDA_CHECK(cudaFree(d.logits));
    QS_CUDA_CHECK(cudaFree(d.sg));
    if (d.rw) QS_CUDA_CHECK(cudaFree(d.rw));
    if (d.rsg) QS_CUDA_CHECK(cudaFree(d.rsg));
}

int* g_counter = nullptr;  // MoeParams::small_counter (0 between calls)

// path: MoeParams::gemm_path (0 = mma.sync grouped GEMMs, 1 = CUTLASS wgmma/TMA prefill path), or -1:
// the small-T path (moe_small.cu; MoeParams::small_t = 1, T <= kMoeSmallTMax), -2: its version 2
// (router fused: MoeParams::small_version = 2 with the inputs' router weights), -3 / -4: -1 / -2 with
// down + combine by slots (MoeParams::small_down_version = 2), 3: the mma.sync path
// with MoeParams::decode_version = 2 (moe_decode_gemm.cu; cfg must be -1), 4 and 5: paths 1 and 2 with
// MoeParams::prefill_version = 2 (moe_prefill_stages.cu); 6: path 3 with its down GEMM launched with
// programmatic dependent launch (MoeParams::decode_pdl; --decode; the same bits as path 3); 7: path 6
// with the expert outputs in bf16 (MoeParams::decode_eout_bf16; --decode; other bits, the same bounds).
bool decode_v2_path(int path) { return path == 3 || path == 6 || path == 7; }
MoeParams params_for(const DevLayer& L, const DevInputs& in, const Shape& s, bool norm, void* ws, float* y, int cfg,
                     int path = 0) {
    MoeParams p{};
    p.x = in.x;
    p.router_logits = in.logits;
    p.shared_gate_logit = in.sg;
    p.experts = L.table;
    p.T = in.T;
    p.top_k = s.k;
    p.norm_topk_prob = norm;
    p.workspace = ws;
    p.y = y;
    p.tile_config = cfg;
    p.gemm_path = decode_v2_path(path) ? 0 : path >= 4 ? path - 3 : path;
    p.decode_version = decode_v2_path(path) ? 2 : 1;
    p.decode_pdl = path == 6 || path == 7 ? 1 : 0;
    p.decode_eout_bf16 = path == 7 ? 1 : 0;
    p.prefill_version = path == 4 || path == 5 ? 2 : 1;
    p.small_t = path < 0 ? 1 : 0;  // path -1, -2: the small-T path; every other run keeps it off
    if (path == -3 || path == -4) p.small_down_version = 2;  // moe_small_down_slots.cu
    if (path == -2 || path == -4) {
        p.small_version = 2;
        p.router_weight = in.rw;
        p.shared_gate_weight = in.rsg;
        p.router_logits = nullptr;  // computed by the path
        p.shared_gate_logit = nullptr;
        p.small_counter = g_counter;
    }
    return p;
}

struct Buffers {
    void* ws = nullptr;
    size_t ws_bytes = 0;
    float* y = nullptr;
    size_t y_elems = 0;
    void ensure(size_t wsb, size_t ye) {
        if (wsb > ws_bytes) {
            if (ws) QS_CUDA_CHECK(cudaFree(ws));
            QS_CUDA_CHECK(cudaMalloc(&ws, wsb));
            ws_bytes = wsb;
        }
        if (ye > y_elems) {
            if (y) QS_CUDA_CHECK(cudaFree(y));
            QS_CUDA_CHECK(cudaMalloc(&y, ye * 4));
            y_elems = ye;
        }
    }
};

void poison(float* y, size_t n, cudaStream_t st) {
    QS_CUDA_CHECK(cudaMemsetAsync(y, 0xff, n * 4, st));  // 0xffffffff is a NaN
}

int g_failures = 0;
bool g_prefill_mode = false;  // --prefill: the prefill path's checks and timings only (short device runs)
bool g_small_mode = false;    // --small: the small-T path's checks and timings only (short device runs)
bool g_decode_mode = false;   // --decode: the decode GEMMs v1 vs v2 checks and timings only (short device runs)

// Error bounds. mma.sync path, and the CUTLASS path with bf16 experts: bf16 rounding of x and h
// (~2^-9 each): 1e-2 overall, 3e-2 for the worst token. CUTLASS path with fp8 experts: e4m3
// rounding of x and of h (3 mantissa bits: relative error up to 2^-4, ~2.4e-2 rms, which the dot products pass on as ~2.5e-2 normalised error each, as in
// the FP8 dense linears; two independent roundings ≈ 3.5e-2): 6e-2 overall, 1.2e-1 worst token.
struct Bounds {
    double all, worst_tok;
};
constexpr Bounds kMmaBounds{1e-2, 3e-2};
constexpr Bounds kFp8ActBounds{6e-2, 1.2e-1};

// path -1: the small-T path (params_for sets MoeParams::small_t = 1; T <= kMoeSmallTMax); -2 its v2.
const char* path_name(int path) {
    return path == -4 ? "smv2+ds" : path == -3 ? "small+ds" : path == -2 ? "smallv2" : path == -1 ? "small" : path == 1 ? "cutlass" : path == 2 ? "cut-pp"
           : path == 3 ? "dec2" : path == 4 ? "cut-v2" : path == 5 ? "cutpp-v2" : path == 6 ? "dec2+pdl" : path == 7 ? "d2+pdl+e16" : "mma";
}

bool prefill_supported(const DevLayer& L, const Shape& s) {
    MoeParams p{};
    p.experts = L.table;
    p.top_k = s.k;
    return moe::prefill_path_supported(p);
}

// ‖a − b‖ / ‖b‖ over everything.
double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < a.size(); ++i) {
        const double d = double(a[i]) - double(b[i]);
        num += d * d;
        den += double(b[i]) * double(b[i]);
    }
    return std::sqrt(num / std::max(den, 1e-300));
}

// ------------------------------------------------------------------------------------------
// Correctness case
// ------------------------------------------------------------------------------------------

// --small: T <= kMoeSmallTMax also runs the small-T path v2 (router weights from
// make_router_weights: exact, which keeps the gaps and ties, or dense when dense_router).
void check_case(const HostExperts& h, const DevLayer& L, bool fp8, int T, Routing routing, bool norm, Rng& rng,
                Buffers& buf, cudaStream_t st, bool extra_checks, bool dense_router = false) {
    const Shape& s = h.s;
    Inputs in = make_inputs(s, T, routing, rng);
    const bool v2 = g_small_mode && T <= kMoeSmallTMax;
    RouterWeights rw;
    if (v2) rw = make_router_weights(s, in, dense_router, rng);
    DevInputs din = upload_inputs(in, v2 ? &rw : nullptr);
    buf.ensure(moe_workspace_bytes(T, s.H, s.I, s.Is, s.E, s.k), size_t(T) * s.H);

    // Reference on a sample of tokens (all when T <= 128).
    std::vector<int> toks;
    if (T <= 128) {
        for (int t = 0; t < T; ++t) toks.push_back(t);
    } else {
        toks = {0, T - 1};
        while (int(toks.size()) < 96) toks.push_back(int(rng.next() % uint64_t(T)));
    }
    std::vector<std::vector<double>> ref(toks.size());
    parallel_for(int64_t(toks.size()), [&](int64_t i) {
        const int t = toks[i];
        moe_ref_token(h, fp8, norm, &in.x[size_t(t) * s.H], &in.logits[size_t(t) * s.E], in.sg[t], ref[i]);
    });

    const char* rname = routing == Routing::kSkewed ? "skewed" : routing == Routing::kNormal ? "normal" : "gapped+ties";
    std::vector<float> y(size_t(T) * s.H), y_first, y_small, y_small2, y_cfg1, y_cut[2], y_dec2;
    // mma.sync: auto tile configuration, then each one; then the CUTLASS prefill path.
    std::vector<std::pair<int, int>> runs;  // {tile_config, gemm_path}
    for (int cfg = -1; cfg <= 3; ++cfg) runs.push_back({cfg, 0});
    const bool cutlass = prefill_supported(L, s);
    if (cutlass) runs.push_back({-1, 1});
    if (cutlass && fp8) runs.push_back({-1, 2});  // ping-pong schedule
    if (cutlass && g_prefill_mode) runs.push_back({-1, 4});  // prefill_version 2 (after 1: bitwise equal)
    if (cutlass && fp8 && g_prefill_mode) runs.push_back({-1, 5});
    const bool small = T <= kMoeSmallTMax;
    if (small) runs.push_back({-1, -1});  // the small-T path
    if (small && g_small_mode) runs.push_back({-1, -3});  // with down by slots: bitwise = -1
    if (small && v2) runs.push_back({-1, -2});  // its v2
    if (small && v2) runs.push_back({-1, -4});  // with down by slots: bitwise = -2
    runs.push_back({-1, 3});  // the decode GEMMs' version 2 (32-row tiles at every T)
    if (g_decode_mode) runs.push_back({-1, 6});  // down with PDL: bitwise = path 3
    if (g_decode_mode) runs.push_back({-1, 7});  // and bf16 expert outputs: the reference bounds only
    for (const auto& [cfg, path] : runs) {
        poison(buf.y, size_t(T) * s.H, st);
        const MoeParams p = params_for(L, din, s, norm, buf.ws, buf.y, cfg, path);
        launch_moe(p, st);
        QS_CUDA_CHECK(cudaStreamSynchronize(st));
        QS_CUDA_CHECK(cudaMemcpy(y.data(), buf.y, y.size() * 4, cudaMemcpyDeviceToHost));
        size_t bad = 0;
        for (float v : y) bad += !std::isfinite(v);
        double num = 0.0, den = 0.0, max_abs = 0.0, worst_tok = 0.0;
        for (size_t i = 0; i < toks.size(); ++i) {
            double tn = 0.0, td = 0.0;
            for (int c = 0; c < s.H; ++c) {
                const double d = double(y[size_t(toks[i]) * s.H + c]) - ref[i][c];
                tn += d * d;
                td += ref[i][c] * ref[i][c];
                max_abs = std::max(max_abs, std::fabs(d));
            }
            num += tn;
            den += td;
            worst_tok = std::max(worst_tok, std::sqrt(tn / std::max(td, 1e-300)));
        }
        const double nerr = std::sqrt(num / std::max(den, 1e-300));
        const bool cut = path == 1 || path == 2 || path == 4 || path == 5;
        const Bounds b = cut && fp8 ? kFp8ActBounds : kMmaBounds;
        const bool pass = bad == 0 && nerr < b.all && worst_tok < b.worst_tok && std::isfinite(nerr);
        std::string note;
        if (path >= 1 || path < 0) {
            char buf2[160];
            std::snprintf(buf2, sizeof buf2, " (vs mma.sync: %.3e)%s", rel_diff(y, y_first),
                          path != -2 ? ""
                          : std::memcmp(y.data(), y_small.data(), y.size() * 4) == 0
                              ? " (bitwise = small v1)"
                              : dense_router ? " (vs small v1: router sums differ in the last bits)" : " (DIFFERS from small v1)");
            note = buf2;
            if (path == -3 || path == -4) {  // the down kernel by slots: the same bits as its version 1
                const bool same = std::memcmp(y.data(), (path == -3 ? y_small : y_small2).data(), y.size() * 4) == 0;
                note += same ? " (down by slots: bitwise = down v1)" : " (down by slots DIFFERS from down v1: a failing check)";
                if (!same) ++g_failures;
            }
            if (path == -1) y_small = y;
            if (path == -2) y_small2 = y;
            if (path == 3) {
                note += std::memcmp(y.data(), y_cfg1.data(), y.size() * 4) == 0 ? " (bitwise = cfg 1)"
                                                                                  : " (differs from cfg 1)";
                y_dec2 = y;
            }
            if (path == 6) {  // down with PDL: the same kernels on the same data, so path 3's bits
                const bool same = std::memcmp(y.data(), y_dec2.data(), y.size() * 4) == 0;
                note += same ? " (bitwise = dec2)" : " (DIFFERS from dec2: a failing check)";
                if (!same) ++g_failures;
            }
            if (path == 1 || path == 2) y_cut[path - 1] = y;
            if (path == 4 || path == 5) {
                // Version 2 puts every row through the same arithmetic: y must be bitwise version 1's.
                const bool same = std::memcmp(y.data(), y_cut[path - 4].data(), y.size() * 4) == 0;
                note += same ? " (bitwise = v1)" : " (DIFFERS from v1: a failing check)";
                if (!same) ++g_failures;
            }
        } else if (cfg == -1) {
            y_first = y;
        } else {
            note = std::memcmp(y.data(), y_first.data(), y.size() * 4) == 0 ? " (bitwise = auto)" : " (differs from auto)";
            if (cfg == 1) y_cfg1 = y;
        }
        std::printf("  %-5s %-4s T=%-5d %-11s norm=%d %-7s cfg=%2d  nerr=%.3e  max_abs=%.3e  worst_tok=%.3e  "
                    "nonfinite=%zu [%zu tokens checked]  %s%s\n",
                    s.name, fp8 ? "fp8" : "bf16", T, rname, int(norm), path_name(path), cfg, nerr, max_abs,
                    worst_tok, bad, toks.size(), pass ? "PASS" : "FAIL", note.c_str());
        if (!pass) ++g_failures;
    }

    std::vector<int> det_paths;  // the small-T path(s) when T is small, mma.sync, CUTLASS, decode v2
    for (int path = small ? (v2 ? -2 : -1) : 0; extra_checks && path <= (cutlass ? (fp8 ? 2 : 1) : 0); ++path)
        det_paths.push_back(path);
    if (extra_checks) det_paths.push_back(3);
    if (extra_checks && g_decode_mode) det_paths.push_back(6);  // PDL inside the graph replay
    if (extra_checks && g_decode_mode) det_paths.push_back(7);
    if (extra_checks && cutlass && g_prefill_mode) det_paths.push_back(4);
    if (extra_checks && cutlass && g_prefill_mode && fp8) det_paths.push_back(5);
    for (const int path : det_paths) {
        // Determinism: a second direct run must be bitwise identical.
        const MoeParams p = params_for(L, din, s, norm, buf.ws, buf.y, -1, path);
        std::vector<float> y1(y.size()), y2(y.size()), y3(y.size());
        poison(buf.y, y.size(), st);
        launch_moe(p, st);
        QS_CUDA_CHECK(cudaStreamSynchronize(st));
        QS_CUDA_CHECK(cudaMemcpy(y1.data(), buf.y, y.size() * 4, cudaMemcpyDeviceToHost));
        poison(buf.y, y.size(), st);
        launch_moe(p, st);
        QS_CUDA_CHECK(cudaStreamSynchronize(st));
        QS_CUDA_CHECK(cudaMemcpy(y2.data(), buf.y, y.size() * 4, cudaMemcpyDeviceToHost));
        const bool det = std::memcmp(y1.data(), y2.data(), y.size() * 4) == 0;
        // Graph capture and replay (twice) must equal the direct run.
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        QS_CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
        launch_moe(p, st);
        QS_CUDA_CHECK(cudaStreamEndCapture(st, &graph));
        QS_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
        poison(buf.y, y.size(), st);
        QS_CUDA_CHECK(cudaGraphLaunch(exec, st));
        QS_CUDA_CHECK(cudaGraphLaunch(exec, st));
        QS_CUDA_CHECK(cudaStreamSynchronize(st));
        QS_CUDA_CHECK(cudaMemcpy(y3.data(), buf.y, y.size() * 4, cudaMemcpyDeviceToHost));
        const bool gr = std::memcmp(y1.data(), y3.data(), y.size() * 4) == 0;
        QS_CUDA_CHECK(cudaGraphExecDestroy(exec));
        QS_CUDA_CHECK(cudaGraphDestroy(graph));
        std::printf("  %-5s %-4s T=%-5d %-7s determinism (two runs bitwise equal): %s; graph replay == direct: %s\n",
                    s.name, fp8 ? "fp8" : "bf16", T, path_name(path), det ? "PASS" : "FAIL",
                    gr ? "PASS" : "FAIL");
        if (!det || !gr) ++g_failures;
    }
    free_inputs(din);
}

// ------------------------------------------------------------------------------------------
// Timing
// ------------------------------------------------------------------------------------------

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
}

int touched_experts(const Inputs& in, const Shape& s) {
    std::vector<char> hit(s.E, 0);
    std::vector<int> idx(s.E);
    for (int t = 0; t < in.T; ++t) {
        const float* l = &in.logits[size_t(t) * s.E];
        std::iota(idx.begin(), idx.end(), 0);
        std::partial_sort(idx.begin(), idx.begin() + s.k, idx.end(),
                          [&](int i, int j) { return l[i] > l[j] || (l[i] == l[j] && i < j); });
        for (int j = 0; j < s.k; ++j) hit[idx[j]] = 1;
    }
    return int(std::count(hit.begin(), hit.end(), 1));
}

double measure_copy_tbs(cudaStream_t st) {
    const size_t n = size_t(1) << 31;  // 2 GiB
    void *a, *b;
    QS_CUDA_CHECK(cudaMalloc(&a, n));
    QS_CUDA_CHECK(cudaMalloc(&b, n));
    QS_CUDA_CHECK(cudaMemsetAsync(a, 1, n, st));
    cudaEvent_t e0, e1;
    QS_CUDA_CHECK(cudaEventCreate(&e0));
    QS_CUDA_CHECK(cudaEventCreate(&e1));
    std::vector<double> ts;
    for (int i = 0; i < 12; ++i) {
        QS_CUDA_CHECK(cudaEventRecord(e0, st));
        QS_CUDA_CHECK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, st));
        QS_CUDA_CHECK(cudaEventRecord(e1, st));
        QS_CUDA_CHECK(cudaEventSynchronize(e1));
        float ms;
        QS_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        if (i >= 2) ts.push_back(ms);
    }
    QS_CUDA_CHECK(cudaFree(a));
    QS_CUDA_CHECK(cudaFree(b));
    return 2.0 * n / (median(ts) * 1e-3) / 1e12;
}

// The router [E, H] and shared-expert gate [1, H] linears as CudaOps::moe runs them for the paths
// that take logits (fp32 weights, cuBLASLt without TF32): the inputs' router weights (--small).
struct RouterGemm {
    Gemm gemm;
    DeviceArena arena;
    float *logits = nullptr, *sg = nullptr;  // [16, E], [16]: outputs (not read: the inputs' logits drive the call)
};
RouterGemm* g_router = nullptr;
void router_linears(const DevInputs& in, const Shape& s, cudaStream_t st) {
    RouterGemm& r = *g_router;
    const DeviceLinear wr{DeviceLinear::Dtype::kF32, in.rw, nullptr, nullptr, s.E, s.H};
    const DeviceLinear ws{DeviceLinear::Dtype::kF32, in.rsg, nullptr, nullptr, 1, s.H};
    r.arena.reset();
    r.gemm.linear(wr, in.x, in.T, r.logits, r.arena, st);
    r.gemm.linear(ws, in.x, in.T, r.sg, r.arena, st);
}

// --prefill: the non-GEMM stages of the prefill path alone, version 1 against version 2, on the
// workspace of a finished call (its routing, sorted rows, GEMM outputs): µs per launch sequence,
// median of 20 (sort: v1 one block, v2 histogram + scan + scatter; the group setup is not included).
void time_prefill_stages(const DevLayer& layer, const DevInputs& in, const Shape& s, bool fp8, Buffers& buf, cudaStream_t st) {
    const int T = in.T, E = s.E, H = s.H, k = s.k, imax = std::max(s.I, s.Is), R = T * (k + 1);
    launch_moe(params_for(layer, in, s, true, buf.ws, buf.y, -1, 4), st);  // fills the workspace
    const moe::WsLayout L = moe::ws_layout(T, H, s.I, s.Is, E, k);
    unsigned char* ws = static_cast<unsigned char*>(buf.ws);
    int* topk_id = reinterpret_cast<int*>(ws + L.topk_id);
    int* expert_off = reinterpret_cast<int*>(ws + L.expert_off);
    int* row_pos = reinterpret_cast<int*>(ws + L.row_pos);
    moe::MoePlan pl;
    pl.sort = moe::SortParams{topk_id, T, E, k, reinterpret_cast<int*>(ws + L.num_tiles), reinterpret_cast<int4*>(ws + L.work),
                              reinterpret_cast<int*>(ws + L.row_token), reinterpret_cast<int*>(ws + L.row_dest), expert_off,
                              row_pos};
    const moe::PrefillSortParams sp{topk_id, T, E, k, moe::kPrefillSortChunk, reinterpret_cast<int*>(ws + L.xb), expert_off, row_pos};
    const moe::GatherQuantParams gq{in.x, row_pos, T, H, k, ws + L.a8, reinterpret_cast<float*>(ws + L.sfa)};
    const moe::SiluQuantParams sq{reinterpret_cast<const __nv_bfloat16*>(ws + L.gu), R, T * k, s.I, s.Is, imax, ws + L.hbuf,
                                  reinterpret_cast<float*>(ws + L.sfh)};
    const moe::CombineSortedParams cp{reinterpret_cast<const __nv_bfloat16*>(ws + L.eout), row_pos,
                                      reinterpret_cast<const float*>(ws + L.topk_w), in.sg, T, H, k, buf.y};
    cudaEvent_t e0, e1;
    QS_CUDA_CHECK(cudaEventCreate(&e0));
    QS_CUDA_CHECK(cudaEventCreate(&e1));
    auto time = [&](const std::function<void()>& f) {
        for (int i = 0; i < 2; ++i) f();
        std::vector<double> v;
        for (int i = 0; i < 20; ++i) {
            QS_CUDA_CHECK(cudaEventRecord(e0, st));
            f();
            QS_CUDA_CHECK(cudaEventRecord(e1, st));
            QS_CUDA_CHECK(cudaEventSynchronize(e1));
            float ms;
            QS_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
            v.push_back(ms * 1e3);
        }
        return median(v);
    };
    const double sort1 = time([&] { moe::launch_sort<moe::CfgL128>(pl, st); });
    const double sort2 = time([&] { moe::launch_prefill_sort_v2(sp, st); });
    const double g1 = time([&] { moe::launch_prefill_gather(gq, fp8, 1, st); });
    const double g2 = time([&] { moe::launch_prefill_gather(gq, fp8, 2, st); });
    const double s1 = time([&] { moe::launch_prefill_silu(sq, fp8, 1, st); });
    const double s2 = time([&] { moe::launch_prefill_silu(sq, fp8, 2, st); });
    const double c1 = time([&] { moe::launch_prefill_combine(cp, 1, st); });
    const double c2 = time([&] { moe::launch_prefill_combine(cp, 2, st); });
    const double gb = (double(T) * H * 4 + double(R) * H * (fp8 ? 1 : 2)) / 1e9;
    const double cb = (double(R) * H * 2 + double(T) * H * 4) / 1e9;
    std::printf("        %s T=%d stages alone, v1 -> v2 (us): sort %.1f -> %.1f | gather %.1f -> %.1f (%.0f -> %.0f GB/s) | "
                "silu %.1f -> %.1f | combine %.1f -> %.1f (%.0f -> %.0f GB/s)\n",
                fp8 ? "fp8" : "bf16", T, sort1, sort2, g1, g2, gb / (g1 * 1e-6), gb / (g2 * 1e-6), s1, s2, c1, c2,
                cb / (c1 * 1e-6), cb / (c2 * 1e-6));
    QS_CUDA_CHECK(cudaEventDestroy(e0));
    QS_CUDA_CHECK(cudaEventDestroy(e1));
}

void time_shapes(const HostExperts& h, Rng& rng, Buffers& buf, cudaStream_t st, bool quick) {
    const Shape& s = h.s;
    constexpr int kLayers = 3, kSets = 4;
    const int kReps = g_prefill_mode ? 10 : 25;
    std::printf("\n== timing: %s shapes (E=%d k=%d H=%d I=%d I_shared=%d); ceilings %.2f TB/s copy, %.0f TFLOP/s bf16\n",
                s.name, s.E, s.k, s.H, s.I, s.Is, kCopyTBs, kBf16GemmTflops);
    std::printf("   fmt  T      path     cfg  experts  weightMB   time_us   wGB/s  %%copy   TFLOP/s   nerr     | route  "
                "sort  gate_up  down  combine (us)%s\n", g_small_mode ? "   [small: sort 0, down = down+combine, combine 0]" : "");
    cudaEvent_t ev[6];
    for (auto& e : ev) QS_CUDA_CHECK(cudaEventCreate(&e));
    const std::vector<int> Ts = g_prefill_mode ? std::vector<int>{1024, 2048, 4096, 16384}
                                : g_small_mode ? std::vector<int>{1, 2, 4, 8, 16}
                                : g_decode_mode ? std::vector<int>{64, 256, 512}
                                : quick        ? std::vector<int>{1, 512, 4096}
                                               : std::vector<int>{1, 64, 512, 1024, 2048, 4096, 8192, 16384};
    for (int fp8 = 1; fp8 >= 0; --fp8) {
        std::vector<DevLayer> layers;
        for (int l = 0; l < kLayers; ++l) layers.push_back(make_layer(h, fp8 != 0));
        for (int T : Ts) {
            std::vector<Inputs> hin;
            std::vector<DevInputs> din;
            double touched = 0.0;
            for (int i = 0; i < kSets; ++i) {
                hin.push_back(make_inputs(s, T, Routing::kNormal, rng));
                // --small: router weights for v2 (exact: the same logits; x's first T columns one-hot)
                RouterWeights rw;
                if (g_small_mode) rw = make_router_weights(s, hin.back(), false, rng);
                din.push_back(upload_inputs(hin.back(), g_small_mode ? &rw : nullptr));
                touched += touched_experts(hin.back(), s);
            }
            touched /= kSets;
            buf.ensure(moe_workspace_bytes(T, s.H, s.I, s.Is, s.E, s.k), size_t(T) * s.H);
            const double wbytes = touched * layers[0].bytes_per_routed + layers[0].bytes_shared;
            const double flops = 2.0 * 3.0 * s.H * (double(T) * s.k * s.I + double(T) * s.Is);
            // Error vs the float64 reference on 16 tokens of input set 0 (layer 0), per row of the table.
            std::vector<int> toks = {0, T - 1};
            while (int(toks.size()) < std::min(T, 16)) toks.push_back(int(rng.next() % uint64_t(T)));
            std::vector<std::vector<double>> ref(toks.size());
            parallel_for(int64_t(toks.size()), [&](int64_t i) {
                const int t = toks[i];
                moe_ref_token(h, fp8 != 0, true, &hin[0].x[size_t(t) * s.H], &hin[0].logits[size_t(t) * s.E], hin[0].sg[t],
                              ref[i]);
            });
            std::vector<std::pair<int, int>> runs;  // {tile_config, gemm_path}
            for (int cfg = -1; cfg <= 3; ++cfg)
                if (g_prefill_mode || g_small_mode ? cfg == -1
                    : g_decode_mode                ? cfg <= 1
                                                   : (T < 1024 || cfg == -1 || cfg == 1 || cfg == 2))
                    runs.push_back({cfg, 0});  // 16-row tiles: decode only; --prefill/--small: the mma.sync baseline
            if (!g_small_mode && !g_decode_mode && prefill_supported(layers[0], s)) runs.push_back({-1, 1});
            if (!g_small_mode && !g_decode_mode && fp8 && prefill_supported(layers[0], s)) runs.push_back({-1, 2});
            if (g_prefill_mode && prefill_supported(layers[0], s)) runs.push_back({-1, 4});  // prefill_version 2
            if (g_prefill_mode && fp8 && prefill_supported(layers[0], s)) runs.push_back({-1, 5});
            double v1_us[2][6] = {};  // paths 1, 2: total and the five stages (the "v2 - v1" line)
            if (!g_small_mode && !g_prefill_mode && T > kMoeSmallTMax) runs.push_back({-1, 3});  // decode v2
            if (g_decode_mode && T > kMoeSmallTMax) runs.push_back({-1, 6});  // its down with PDL
            if (g_decode_mode && T > kMoeSmallTMax) runs.push_back({-1, 7});  // and bf16 expert outputs
            if (T <= kMoeSmallTMax) runs.push_back({-1, -1});  // the small-T path: route, gate_up, down+combine
            if (T <= kMoeSmallTMax && g_small_mode) runs.push_back({-1, -3});  // with down by slots
            if (T <= kMoeSmallTMax && g_small_mode) runs.push_back({-1, -2});  // v2: router GEMV + route, gate_up, down
            if (T <= kMoeSmallTMax && g_small_mode) runs.push_back({-1, -4});  // v2 with down by slots
            for (const auto& [cfg, path] : runs) {
                double nerr = 0.0;
                {
                    const MoeParams p = params_for(layers[0], din[0], s, true, buf.ws, buf.y, cfg, path);
                    launch_moe(p, st);
                    QS_CUDA_CHECK(cudaStreamSynchronize(st));
                    std::vector<float> y(size_t(s.H));
                    double num = 0.0, den = 0.0;
                    for (size_t i = 0; i < toks.size(); ++i) {
                        QS_CUDA_CHECK(cudaMemcpy(y.data(), buf.y + size_t(toks[i]) * s.H, size_t(s.H) * 4,
                                                 cudaMemcpyDeviceToHost));
                        for (int c = 0; c < s.H; ++c) {
                            const double d = double(y[c]) - ref[i][c];
                            num += d * d;
                            den += ref[i][c] * ref[i][c];
                        }
                    }
                    nerr = std::sqrt(num / std::max(den, 1e-300));
                }
                auto run = [&](int i, cudaEvent_t* evs) {
                    const MoeParams p =
                        params_for(layers[i % kLayers], din[i % kSets], s, true, buf.ws, buf.y, cfg, path);
                    if (evs) launch_moe_profiled(p, st, evs);
                    else launch_moe(p, st);
                };
                for (int i = 0; i < 3; ++i) run(i, nullptr);
                std::vector<double> tot, stage[5];
                for (int i = 0; i < kReps; ++i) {
                    run(i, ev);
                    QS_CUDA_CHECK(cudaEventSynchronize(ev[5]));
                    float ms;
                    QS_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[0], ev[5]));
                    tot.push_back(ms * 1e3);
                    for (int k = 0; k < 5; ++k) {
                        QS_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[k], ev[k + 1]));
                        stage[k].push_back(ms * 1e3);
                    }
                }
                const double us = median(tot);
                const double gbs = wbytes / (us * 1e-6) / 1e9;
                std::printf("   %-4s %-6d %-7s %3d  %7.1f  %8.1f  %8.1f  %6.0f  %4.0f%%  %7.1f  %.2e", fp8 ? "fp8" : "bf16",
                            T, path_name(path), cfg, touched, wbytes / 1e6, us, gbs,
                            100.0 * gbs / (kCopyTBs * 1e3), flops / (us * 1e-6) / 1e12, nerr);
                std::printf("  | %5.1f %5.1f %8.1f %6.1f %7.1f\n", median(stage[0]), median(stage[1]), median(stage[2]),
                            median(stage[3]), median(stage[4]));
                if (path == 1 || path == 2) {
                    v1_us[path - 1][0] = us;
                    for (int k = 0; k < 5; ++k) v1_us[path - 1][k + 1] = median(stage[k]);
                }
                if (path == 4 || path == 5) {
                    const double* o = v1_us[path - 4];
                    std::printf("        %s T=%d prefill v2 - v1 (%s): total %.1f -> %.1f us (%+.1f) | route %+.1f, "
                                "sort+setup+gather %+.1f, gate_up+silu %+.1f, down %+.1f, combine %+.1f us\n",
                                fp8 ? "fp8" : "bf16", T, path == 4 ? "cooperative" : "ping-pong", o[0], us, us - o[0],
                                median(stage[0]) - o[1], median(stage[1]) - o[2], median(stage[2]) - o[3],
                                median(stage[3]) - o[4], median(stage[4]) - o[5]);
                }
                if (g_small_mode) {
                    // As a decode step runs it: calls captured in one CUDA graph (layers and input
                    // sets rotating), the router and shared-gate linears included (cuBLASLt fp32,
                    // as CudaOps::moe runs them before launch_moe; v2 computes them itself).
                    const double gus = qs::lab::graph_us_per_call(st, [&](int i) {
                        const MoeParams p = params_for(layers[i % kLayers], din[i % kSets], s, true, buf.ws, buf.y, cfg, path);
                        if (path != -2 && path != -4) router_linears(din[i % kSets], s, st);
                        launch_moe(p, st);
                    });
                    std::printf("        in a CUDA graph, router linears included: %.1f us per call (%.0f GB/s of expert weights)\n",
                                gus, wbytes / (gus * 1e-6) / 1e9);
                }
                if (g_decode_mode && cfg == -1) {
                    // The MoE call alone, calls captured in one CUDA graph (layers and inputs rotating).
                    const double gus = qs::lab::graph_us_per_call(st, [&](int i) {
                        launch_moe(params_for(layers[i % kLayers], din[i % kSets], s, true, buf.ws, buf.y, cfg, path), st);
                    });
                    std::printf("        in a CUDA graph: %.1f us per call (%.0f GB/s of expert weights, %.0f%% of copy)\n", gus,
                                wbytes / (gus * 1e-6) / 1e9, 100.0 * wbytes / (gus * 1e-6) / 1e9 / (kCopyTBs * 1e3));
                }
                if (cfg == -1 && (path == 0 || path == 3)) {  // (paths 6-8: gate_up is path 3's)
                    const double gu_bytes = wbytes * 2.0 / 3.0;
                    const double gu_us = median(stage[2]);
                    std::printf("        gate_up alone: %.1f us = %.0f GB/s of gate+up weights (%.0f%% of copy)%s\n", gu_us,
                                gu_bytes / (gu_us * 1e-6) / 1e9, 100.0 * gu_bytes / (gu_us * 1e-6) / 1e9 / (kCopyTBs * 1e3),
                                T == 512 && !fp8 ? "   [torch grouped bf16 gate_up, 256 experts x 16 tokens: 327 us]" : "");
                }
            }
            if (g_prefill_mode && prefill_supported(layers[0], s)) time_prefill_stages(layers[0], din[0], s, fp8 != 0, buf, st);
            for (auto& d : din) free_inputs(d);
        }
        for (auto& L : layers) free_layer(L);
    }
    for (auto& e : ev) QS_CUDA_CHECK(cudaEventDestroy(e));
}

}  // namespace

int main(int argc, char** argv) {
    uint64_t seed = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
    bool timing = true, quick = false, tiny_only = false;
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--no-timing")) timing = false;
        else if (!std::strcmp(argv[i], "--quick")) quick = true;
        else if (!std::strcmp(argv[i], "--tiny-only")) tiny_only = timing = false, tiny_only = true;
        else if (!std::strcmp(argv[i], "--prefill")) g_prefill_mode = true;
        else if (!std::strcmp(argv[i], "--small")) g_small_mode = true;
        else if (!std::strcmp(argv[i], "--decode")) g_decode_mode = true;
        else seed = std::strtoull(argv[i], nullptr, 10);
    }
    std::printf("moe_lab seed=%llu\n", (unsigned long long)seed);
    init_e4m3_lut();
    cudaDeviceProp prop;
    QS_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
    cudaStream_t st;
    QS_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    QS_CUDA_CHECK(cudaMalloc(&g_counter, sizeof(int)));
    QS_CUDA_CHECK(cudaMemset(g_counter, 0, sizeof(int)));
    RouterGemm router_gemm;
    QS_CUDA_CHECK(cudaMalloc(&router_gemm.logits, size_t(16) * 512 * 4));  // T <= 16 (the timing rows)
    QS_CUDA_CHECK(cudaMalloc(&router_gemm.sg, size_t(16) * 4));
    g_router = &router_gemm;
    Rng rng(seed);
    Buffers buf;

    const Shape tiny{"tiny", 16, 4, 256, 128, 128};
    const Shape tiny_is{"tinyS", 16, 4, 256, 128, 256};  // I_shared != I
    const Shape real{"real", 256, 8, 2048, 512, 512};

    auto t0 = std::chrono::steady_clock::now();
    if (g_prefill_mode) {
        // The prefill path (fp8 experts) beside the mma.sync one: tiny shapes (one 128-column tile:
        // half-empty clusters; I_shared != I), then real shapes; determinism and graph replay at 4096.
        std::printf("\n== correctness (--prefill)\n");
        for (const Shape* sp : {&tiny, &tiny_is}) {
            const HostExperts h = make_host_experts(*sp, seed + 1);
            for (int fp8 = 1; fp8 >= 0; --fp8) {
                DevLayer L = make_layer(h, fp8 != 0);
                for (int T : {7, 512}) check_case(h, L, fp8 != 0, T, Routing::kGapped, true, rng, buf, st, false);
                free_layer(L);
            }
        }
        const HostExperts hreal = make_host_experts(real, seed + 2);
        std::printf("  (real weights generated in %.1f s)\n",
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        for (int fp8 = 1; fp8 >= 0; --fp8) {
            DevLayer L = make_layer(hreal, fp8 != 0);
            check_case(hreal, L, fp8 != 0, 512, Routing::kSkewed, true, rng, buf, st, false);
            check_case(hreal, L, fp8 != 0, 4096, Routing::kGapped, true, rng, buf, st, true);
            free_layer(L);
        }
        std::printf("  correctness done in %.1f s: %s\n",
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                    g_failures ? "FAILURES" : "all PASS");
        if (timing) time_shapes(hreal, rng, buf, st, false);
        std::printf("\n%s (%d failing checks)\n", g_failures ? "FAIL" : "PASS", g_failures);
        return g_failures ? 1 : 0;
    }
    if (g_small_mode) {
        // The small-T path beside the mma.sync one: tiny shapes (I_shared != I too), then real ones,
        // every T bucket; determinism and graph replay on every case.
        std::printf("\n== correctness (--small)\n");
        for (const Shape* sp : {&tiny, &tiny_is}) {
            const HostExperts h = make_host_experts(*sp, seed + 1);
            for (int fp8 = 1; fp8 >= 0; --fp8) {
                DevLayer L = make_layer(h, fp8 != 0);
                for (int T : {1, 2, 3, 8}) check_case(h, L, fp8 != 0, T, Routing::kGapped, true, rng, buf, st, true);
                check_case(h, L, fp8 != 0, 8, Routing::kSkewed, false, rng, buf, st, true);
                free_layer(L);
            }
        }
        const HostExperts hreal = make_host_experts(real, seed + 2);
        for (int fp8 = 1; fp8 >= 0; --fp8) {
            DevLayer L = make_layer(hreal, fp8 != 0);
            for (int T : {1, 2, 4, 8}) check_case(hreal, L, fp8 != 0, T, Routing::kGapped, true, rng, buf, st, true);
            check_case(hreal, L, fp8 != 0, 8, Routing::kSkewed, true, rng, buf, st, true);
            check_case(hreal, L, fp8 != 0, 4, Routing::kNormal, true, rng, buf, st, false, /*dense_router=*/true);
            free_layer(L);
        }
        std::printf("  correctness done in %.1f s: %s\n",
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                    g_failures ? "FAILURES" : "all PASS");
        if (timing) time_shapes(hreal, rng, buf, st, false);
        std::printf("\n%s (%d failing checks)\n", g_failures ? "FAIL" : "PASS", g_failures);
        return g_failures ? 1 : 0;
    }
    if (g_decode_mode) {
        // The decode GEMMs v1 and v2 (every check_case runs both): tiny shapes (I_shared != I too),
        // then real ones at T = 7, 40, 512 (gapped with ties, skewed), determinism and graph replay.
        std::printf("\n== correctness (--decode)\n");
        for (const Shape* sp : {&tiny, &tiny_is}) {
            const HostExperts h = make_host_experts(*sp, seed + 1);
            for (int fp8 = 1; fp8 >= 0; --fp8) {
                DevLayer L = make_layer(h, fp8 != 0);
                for (int T : {9, 40, 512}) check_case(h, L, fp8 != 0, T, Routing::kGapped, true, rng, buf, st, true);
                check_case(h, L, fp8 != 0, 64, Routing::kSkewed, false, rng, buf, st, false);
                free_layer(L);
            }
        }
        const HostExperts hreal = make_host_experts(real, seed + 2);
        for (int fp8 = 1; fp8 >= 0; --fp8) {
            DevLayer L = make_layer(hreal, fp8 != 0);
            for (int T : {40, 512}) check_case(hreal, L, fp8 != 0, T, Routing::kGapped, true, rng, buf, st, true);
            check_case(hreal, L, fp8 != 0, 512, Routing::kSkewed, true, rng, buf, st, false);
            free_layer(L);
        }
        std::printf("  correctness done in %.1f s: %s\n",
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                    g_failures ? "FAILURES" : "all PASS");
        if (timing) {
            std::printf("\nmeasured device-to-device copy: %.2f TB/s (read + write)\n", measure_copy_tbs(st));
            time_shapes(hreal, rng, buf, st, false);
        }
        std::printf("\n%s (%d failing checks)\n", g_failures ? "FAIL" : "PASS", g_failures);
        return g_failures ? 1 : 0;
    }
    std::printf("\n== correctness\n");
    for (const Shape* sp : {&tiny, &tiny_is}) {
        const HostExperts h = make_host_experts(*sp, seed + 1);
        for (int fp8 = 0; fp8 <= 1; ++fp8) {
            DevLayer L = make_layer(h, fp8 != 0);
            for (int T : {1, 7, 512}) check_case(h, L, fp8 != 0, T, Routing::kGapped, true, rng, buf, st, false);
            check_case(h, L, fp8 != 0, 7, Routing::kGapped, false, rng, buf, st, false);
            free_layer(L);
        }
    }
    if (tiny_only) {
        std::printf("\n%s (%d failing checks)\n", g_failures ? "FAIL" : "PASS", g_failures);
        return g_failures ? 1 : 0;
    }
    const HostExperts hreal = make_host_experts(real, seed + 2);
    std::printf("  (real weights generated in %.1f s)\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    for (int fp8 = 0; fp8 <= 1; ++fp8) {
        DevLayer L = make_layer(hreal, fp8 != 0);
        for (int T : {1, 7, 512, 4096})
            check_case(hreal, L, fp8 != 0, T, Routing::kGapped, true, rng, buf, st, T == 512 || T == 1);
        check_case(hreal, L, fp8 != 0, 512, Routing::kSkewed, true, rng, buf, st, false);
        free_layer(L);
    }
    std::printf("  correctness done in %.1f s: %s\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                g_failures ? "FAILURES" : "all PASS");

    if (timing) {
        std::printf("\nmeasured device-to-device copy: %.2f TB/s (read + write)\n", measure_copy_tbs(st));
        time_shapes(hreal, rng, buf, st, quick);
    }
    std::printf("\n%s (%d failing checks)\n", g_failures ? "FAIL" : "PASS", g_failures);
    return g_failures ? 1 : 0;
}
