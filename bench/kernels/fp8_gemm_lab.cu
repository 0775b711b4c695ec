// Dense linear lab: the paths of Gemm::linear for DeviceLinear::Dtype::kFP8Block
// (src/backend/cuda/gemm.{h,cpp}) — block-scaled cuBLASLt (activations quantised to e4m3 per row
// and 128-column group, VEC128_32F × BLK128x128_32F), the dequantise-to-bf16 fallback and, up to
// 2 rows, the small-rows kernel (small_linear_kernels.h; also timed for BF16 weights against
// cuBLASLt's bf16 GEMM, last section) — checked
// against a CPU reference and timed at the real model's FP8 dense shapes (hidden 2048):
//   q_proj / GDN in_proj_qkv 2048→8192, k_proj / v_proj 2048→512, GDN in_proj_z 2048→4096,
//   o_proj / GDN out_proj 4096→2048   (spec/model.md).
// Built with QS_BUILD_KERNEL_LABS=ON (target fp8_gemm_lab, links qs_lib).
// Run: fp8_gemm_lab [seed] [--no-timing] [--quick] [--small-v2] [--prefill] [--shared] [--norm] [--mma]
//      (exit code 1 on any FAIL; --mma: only the small-rows version 3 on tensor cores against version 2
//      at 1-4 rows, checked, timed in CUDA graphs;
//      --norm: only the norms fused into the FP8 small-rows launches at 1-4 rows (CudaOptions::
//      fused_input_norm, fused_output_norm) against the norm kernel beside the linears, bitwise
//      checked, timed in CUDA graphs, on small-rows version 2 then version 3;
//      --small-v2: only the small-rows version 2 section, 1-4 rows, checks and old-vs-new timings;
//      --prefill: only prefill sizes (T = 4,096 and 16,384: checked, then the whole call and the
//      activation quantisation alone timed, TFLOP/s against the measured fp8 GEMM peak; then the
//      shared-input groups (Gemm::linears) at 16,384 and 1,024 rows, old vs new, bitwise checked;
//      --shared: only those groups)
//
// Inputs: W = random N(0, 0.02) times a per-128×128-block factor 2^U(-4,4), quantised with the
// checkpoint quantiser (quantize_fp8_block_row); x = N(0, 1) times a per-(row, 128-group) factor
// 2^U(-3,3). The factors make every block's scale differ, so a scale-layout mistake (weights or
// activations) cannot hide. y is poisoned with NaN before every run.
// References (double accumulation, rows sampled when T is large):
//   exact:    Σ_k Wdq[o][k] · x[t][k], Wdq = fp8 · scale_inv in float (LinearWeight::row_to_f32);
//   emulated: the same with x replaced by its e4m3 quantisation exactly as the kernel does it
//             (scale = amax/448 in fp32, q = e4m3_rne_satfinite(x / scale)).
// Checks (normalised error ‖gpu − ref‖ / ‖ref‖): small-rows vs emulated < 2e-4 (the same x
// quantisation, fp32 sums); block-scaled vs emulated < 2e-3 (only fp32
// accumulation differs; a layout bug gives O(1)); block-scaled vs exact < 4e-2 (the activations'
// fp8 rounding: 3 mantissa bits, ~2.5e-2 for these inputs); dequant vs exact < 1e-2 (bf16 x and
// W: ~2e-3); the block-scaled path must have run wherever Gemm::fp8_block_scaling_expected (sm_90,
// cuBLASLt >= 12.9); a CUDA-graph capture of the call replays bit-identically. Extra shapes
// exercise the padded weight-scale copy (in/128 not a multiple of 4) and the fallback for
// shapes that are not multiples of 128.
// Timing: median of N single calls (CUDA events), the weight rotated over copies spanning
// >= 128 MB so L2 (50 MB) holds none of it; GB/s counts weight bytes (fp8 + scales) + x (fp32
// read) + y (fp32 write) for both paths, so the dequant path's extra traffic shows as lower GB/s.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <cuda_runtime.h>

#include "backend/cuda/basic_kernels.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_memory.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/small_linear_kernels.h"
#include "lab_timing.h"
#include "core/dtype.h"
#include "model/fp8_block.h"

using namespace qs;
using namespace qs::cuda;

namespace {

constexpr double kCopyTBs = 4.25;  // measured device-to-device copy ceiling (TB/s)
// Measured fp8 e4m3 GEMM peak (torch._scaled_mm 8192³, per-tensor scales; docs/PERF.md "H200
// ceilings"): issue 14 asks the dense linears at prefill sizes for >= 70 % of it.
constexpr double kFp8PeakTflops = 1405.0;

struct Shape {
    const char* name;
    int64_t out, in;
};

// Host weight: fp8 codes [out, in], scale_inv [ceil(out/128), ceil(in/128)], dequantised rows.
struct HostWeight {
    int64_t out = 0, in = 0;
    std::vector<uint8_t> q;
    std::vector<float> scale_inv;
    std::vector<float> wdq;  // [out, in]
};

HostWeight make_weight(int64_t out, int64_t in, std::mt19937& rng) {
    HostWeight h;
    h.out = out, h.in = in;
    const int64_t rb = fp8_num_blocks(out), cb = fp8_num_blocks(in);
    std::normal_distribution<float> nd(0.0f, 0.02f);
    std::uniform_real_distribution<float> ud(-4.0f, 4.0f);
    std::vector<float> factor(size_t(rb * cb));
    for (float& f : factor) f = std::exp2(ud(rng));
    std::vector<float> w(size_t(out * in));
    for (int64_t r = 0; r < out; ++r)
        for (int64_t c = 0; c < in; ++c) w[size_t(r * in + c)] = nd(rng) * factor[size_t((r / 128) * cb + c / 128)];
    h.q.resize(w.size());
    h.scale_inv.resize(size_t(rb * cb));
    for (int64_t b = 0; b < rb; ++b) {
        const int64_t r0 = b * 128, nr = std::min<int64_t>(128, out - r0);
        const bool ok = quantize_fp8_block_row(w.data() + r0 * in, nr, in, DType::kF32, h.q.data() + r0 * in,
                                               h.scale_inv.data() + b * cb);
        if (!ok) std::abort();
    }
    h.wdq.resize(w.size());
    for (int64_t r = 0; r < out; ++r)
        for (int64_t c = 0; c < in; ++c)
            h.wdq[size_t(r * in + c)] =
                fp8e4m3_to_f32(fp8e4m3{h.q[size_t(r * in + c)]}) * h.scale_inv[size_t((r / 128) * cb + c / 128)];
    return h;
}

std::vector<float> make_x(int64_t T, int64_t in, std::mt19937& rng) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::uniform_real_distribution<float> ud(-3.0f, 3.0f);
    std::vector<float> x(size_t(T * in));
    for (int64_t t = 0; t < T; ++t)
        for (int64_t g = 0; g * 128 < in; ++g) {
            const float f = std::exp2(ud(rng));
            for (int64_t c = g * 128; c < std::min<int64_t>(in, g * 128 + 128); ++c) x[size_t(t * in + c)] = nd(rng) * f;
        }
    return x;
}

// The kernel's activation quantisation (launch_quant_fp8_rows128), dequantised: q · scale.
std::vector<float> quantise_rows128(const std::vector<float>& x, int64_t T, int64_t in) {
    std::vector<float> out(x.size());
    for (int64_t t = 0; t < T; ++t)
        for (int64_t g = 0; g * 128 < in; ++g) {
            const float* v = x.data() + t * in + g * 128;
            const int n = int(std::min<int64_t>(128, in - g * 128));  // the last group may be short
            float amax = 0.0f;
            for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(v[i]));
            const float scale = amax > 0.0f ? amax / 448.0f : 1.0f;
            for (int i = 0; i < n; ++i)
                out[size_t(t * in + g * 128 + i)] = fp8e4m3_to_f32(f32_to_fp8e4m3(v[i] / scale)) * scale;
        }
    return out;
}

// ref [rows.size(), out] in double-accumulated float for the sampled rows.
std::vector<double> reference(const HostWeight& w, const std::vector<float>& x, const std::vector<int64_t>& rows) {
    std::vector<double> ref(rows.size() * size_t(w.out));
    const unsigned nt = std::max(1u, std::thread::hardware_concurrency());
    std::vector<std::thread> pool;
    for (unsigned th = 0; th < nt; ++th)
        pool.emplace_back([&, th] {
            for (int64_t o = th; o < w.out; o += nt) {
                const float* wr = w.wdq.data() + o * w.in;
                for (size_t i = 0; i < rows.size(); ++i) {
                    const float* xr = x.data() + rows[i] * w.in;
                    double acc = 0;
                    for (int64_t k = 0; k < w.in; ++k) acc += double(wr[k]) * double(xr[k]);
                    ref[i * size_t(w.out) + size_t(o)] = acc;
                }
            }
        });
    for (auto& t : pool) t.join();
    return ref;
}

double norm_err(const std::vector<float>& y, int64_t out, const std::vector<int64_t>& rows,
                const std::vector<double>& ref) {
    double num = 0, den = 0;
    for (size_t i = 0; i < rows.size(); ++i)
        for (int64_t o = 0; o < out; ++o) {
            const double g = y[size_t(rows[i] * out + o)], r = ref[i * size_t(out) + size_t(o)];
            if (!std::isfinite(g)) return INFINITY;
            num += (g - r) * (g - r);
            den += r * r;
        }
    return std::sqrt(num / std::max(den, 1e-300));
}

struct DevWeight {
    DeviceLinear lin;
    std::vector<void*> allocs;
    size_t bytes = 0;  // fp8 weight + scale bytes (what one call must read)
};

template <class T>
T* upload(const std::vector<T>& v, std::vector<void*>& allocs) {
    void* p = nullptr;
    QS_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(v.size() * sizeof(T), 1)));
    QS_CUDA_CHECK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    allocs.push_back(p);
    return static_cast<T*>(p);
}

// One call's operands: x [T, in] (make_x) on the host and the device, and y [T, out] on the
// device; freed when it goes out of scope.
struct CallBuffers {
    std::vector<float> x;
    std::vector<void*> allocs;
    float* dx = nullptr;
    float* dy = nullptr;
    CallBuffers(int64_t T, const Shape& s, std::mt19937& rng) : x(make_x(T, s.in, rng)) {
        dx = upload(x, allocs);
        QS_CUDA_CHECK(cudaMalloc(&dy, size_t(T * s.out) * 4));
        allocs.push_back(dy);
    }
    ~CallBuffers() {
        for (void* p : allocs) cudaFree(p);
    }
    CallBuffers(const CallBuffers&) = delete;
    CallBuffers& operator=(const CallBuffers&) = delete;
};

// The device form DeviceWeights::upload_linear makes (scale_blk as there).
DevWeight upload_weight(const HostWeight& h) {
    DevWeight d;
    d.lin.dtype = DeviceLinear::Dtype::kFP8Block;
    d.lin.out = h.out, d.lin.in = h.in;
    d.lin.w = upload(h.q, d.allocs);
    d.lin.scale_inv = upload(h.scale_inv, d.allocs);
    if (h.out % 128 == 0 && h.in % 128 == 0)
        d.lin.scale_blk = fp8_blk128_ld(h.in) == h.in / 128
                              ? d.lin.scale_inv
                              : upload(fp8_blk128_scales(h.scale_inv.data(), h.out, h.in), d.allocs);
    d.bytes = h.q.size() + h.scale_inv.size() * 4;
    return d;
}

void free_weight(DevWeight& d) {
    for (void* p : d.allocs) QS_CUDA_CHECK(cudaFree(p));
    d.allocs.clear();
}

struct Lab {
    Gemm gemm;
    DeviceArena arena;
    cudaStream_t stream = nullptr;
    bool expected = false;  // block scaling should work on this device
    bool all_ok = true;
    bool refused_any = false;

    std::vector<float> run(const DeviceLinear& w, const float* dx, int64_t T, float* dy, LinearPolicy policy,
                           Fp8Path* path) {
        gemm.set_policy(policy);
        QS_CUDA_CHECK(cudaMemsetAsync(dy, 0xff, size_t(T * w.out) * 4, stream));  // NaN
        gemm.linear(w, dx, T, dy, arena, stream);
        *path = gemm.last_fp8_path();
        std::vector<float> y(size_t(T * w.out));
        QS_CUDA_CHECK(cudaMemcpyAsync(y.data(), dy, y.size() * 4, cudaMemcpyDeviceToHost, stream));
        QS_CUDA_CHECK(cudaStreamSynchronize(stream));
        arena.reset();
        return y;
    }

    void check(const Shape& s, const std::vector<int64_t>& Ts, std::mt19937& rng) {
        const HostWeight hw = make_weight(s.out, s.in, rng);
        DevWeight dw = upload_weight(hw);
        for (int64_t T : Ts) check(s, hw, dw, T, rng);
        free_weight(dw);
    }

    void check(const Shape& s, const HostWeight& hw, const DevWeight& dw, int64_t T, std::mt19937& rng) {
        const CallBuffers io(T, s, rng);
        const std::vector<float>& x = io.x;
        float* dx = io.dx;
        float* dy = io.dy;
        // Rows checked: all for small T, else 64 spread over T (first and last included).
        std::vector<int64_t> rows;
        if (T <= 64) {
            for (int64_t t = 0; t < T; ++t) rows.push_back(t);
        } else {
            for (int64_t i = 0; i < 64; ++i) rows.push_back(i * (T - 1) / 63);
        }
        const std::vector<double> ref = reference(hw, x, rows);
        const std::vector<double> emu = reference(hw, quantise_rows128(x, T, s.in), rows);

        Fp8Path pb = Fp8Path::kNone, pd = Fp8Path::kNone;
        const std::vector<float> yb = run(dw.lin, dx, T, dy, LinearPolicy::kNoSmallRows, &pb);
        const std::vector<float> yd = run(dw.lin, dx, T, dy, LinearPolicy::kDequantOnly, &pd);
        const bool block_shape = s.out % 128 == 0 && s.in % 128 == 0;
        const Gemm::Fp8PlanInfo info = gemm.fp8_plan_info(s.out, s.in, T);
        bool ok = pd == Fp8Path::kDequant;
        const double ed = norm_err(yd, s.out, rows, ref);
        ok = ok && ed < 1e-2;
        std::string what;
        if (pb == Fp8Path::kBlockScaled) {
            const double ee = norm_err(yb, s.out, rows, emu), ex = norm_err(yb, s.out, rows, ref);
            ok = ok && ee < 2e-3 && ex < 4e-2;
            char buf[160];
            std::snprintf(buf, sizeof buf, "block-scaled (D %s): vs emulated %.2e, vs exact %.2e",
                          info.d_type == CUDA_R_32F ? "fp32" : "bf16", ee, ex);
            what = buf;
        } else {
            const double ex = norm_err(yb, s.out, rows, ref);
            ok = ok && ex < 1e-2;
            if (block_shape) {
                refused_any = true;
                if (expected) ok = false;
                what = "block-scaled REFUSED by cuBLASLt -> fallback";
            } else {
                what = "fallback (shape not a multiple of 128)";
            }
            char buf[80];
            std::snprintf(buf, sizeof buf, ", auto path vs exact %.2e", ex);
            what += buf;
        }
        // For one row the auto path is the small-rows kernel, which quantises x like the
        // block-scaled path: against the emulation as tight as the block-scaled GEMM.
        Fp8Path ps = Fp8Path::kNone;
        const std::vector<float> ys = run(dw.lin, dx, T, dy, LinearPolicy::kAuto, &ps);
        if (ps == Fp8Path::kSmallRows) {
            const double es = norm_err(ys, s.out, rows, emu), esx = norm_err(ys, s.out, rows, ref);
            ok = ok && es < 2e-4 && esx < 4e-2;
            char buf[96];
            std::snprintf(buf, sizeof buf, ", small-rows vs emulated %.2e, vs exact %.2e", es, esx);
            what += buf;
        } else if (T == 1 && s.in % 512 == 0) {
            ok = false;
            what += ", SMALL-ROWS KERNEL NOT TAKEN";
        }
        // A graph capture of the auto path replays bit-identically (the forward is captured).
        if (T <= 64) {
            gemm.set_policy(LinearPolicy::kAuto);
            gemm.linear(dw.lin, dx, T, dy, arena, stream);  // warm: plan and arena chunk exist
            QS_CUDA_CHECK(cudaStreamSynchronize(stream));
            arena.reset();
            cudaGraph_t graph;
            cudaGraphExec_t exec;
            QS_CUDA_CHECK(cudaMemsetAsync(dy, 0xff, size_t(T * s.out) * 4, stream));
            QS_CUDA_CHECK(cudaStreamSynchronize(stream));
            QS_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
            gemm.linear(dw.lin, dx, T, dy, arena, stream);
            QS_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
            QS_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
            QS_CUDA_CHECK(cudaGraphLaunch(exec, stream));
            std::vector<float> yg(size_t(T * s.out));
            QS_CUDA_CHECK(cudaMemcpyAsync(yg.data(), dy, yg.size() * 4, cudaMemcpyDeviceToHost, stream));
            QS_CUDA_CHECK(cudaStreamSynchronize(stream));
            arena.reset();
            const bool same = std::memcmp(yg.data(), ys.data(), yg.size() * 4) == 0;
            ok = ok && same;
            what += same ? ", graph replay identical" : ", GRAPH REPLAY DIFFERS";
            cudaGraphExecDestroy(exec);
            cudaGraphDestroy(graph);
        }
        std::printf("%-5s %-22s %5lldx%-5lld T=%-5lld dequant vs exact %.2e | %s\n", ok ? "PASS" : "FAIL", s.name,
                    (long long)s.out, (long long)s.in, (long long)T, ed, what.c_str());
        std::fflush(stdout);
        all_ok = all_ok && ok;
    }

    // Median µs of `iters` single calls, the weight rotated over copies.
    float time_path(std::vector<DevWeight>& copies, const float* dx, int64_t T, float* dy, LinearPolicy policy,
                    int iters, Fp8Path* path) {
        gemm.set_policy(policy);
        for (int i = 0; i < 3; ++i) {
            gemm.linear(copies[size_t(i) % copies.size()].lin, dx, T, dy, arena, stream);
            arena.reset();
        }
        *path = gemm.last_fp8_path();
        cudaEvent_t e0, e1;
        QS_CUDA_CHECK(cudaEventCreate(&e0));
        QS_CUDA_CHECK(cudaEventCreate(&e1));
        std::vector<float> ts;
        for (int i = 0; i < iters; ++i) {
            QS_CUDA_CHECK(cudaEventRecord(e0, stream));
            gemm.linear(copies[size_t(i) % copies.size()].lin, dx, T, dy, arena, stream);
            QS_CUDA_CHECK(cudaEventRecord(e1, stream));
            QS_CUDA_CHECK(cudaEventSynchronize(e1));
            float ms = 0;
            QS_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
            ts.push_back(ms * 1000.0f);
            arena.reset();
        }
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
        std::sort(ts.begin(), ts.end());
        return ts[ts.size() / 2];
    }

    // Enough uploaded copies of one weight (>= 128 MB together, at least 2) that a timing loop
    // rotating over them finds none of it in L2 (50 MB).
    std::vector<DevWeight> rotated_copies(const HostWeight& hw) {
        const size_t wbytes = hw.q.size() + hw.scale_inv.size() * 4;
        const size_t n = std::clamp<size_t>((size_t(128) << 20) / wbytes + 1, 2, 160);
        std::vector<DevWeight> copies;
        for (size_t i = 0; i < n; ++i) copies.push_back(upload_weight(hw));
        return copies;
    }

    void time_shape(const Shape& s, const std::vector<int64_t>& Ts, std::mt19937& rng) {
        const HostWeight hw = make_weight(s.out, s.in, rng);
        const size_t wbytes = hw.q.size() + hw.scale_inv.size() * 4;
        std::vector<DevWeight> copies = rotated_copies(hw);
        for (int64_t T : Ts) {
            const CallBuffers io(T, s, rng);
            float* dx = io.dx;
            float* dy = io.dy;
            const int iters = T >= 4096 ? 20 : 50;
            const double bytes = double(wbytes) + double(T) * double(s.in) * 4 + double(T) * double(s.out) * 4;
            const double flops = 2.0 * double(T) * double(s.out) * double(s.in);
            for (LinearPolicy policy : {LinearPolicy::kAuto, LinearPolicy::kNoSmallRows, LinearPolicy::kDequantOnly}) {
                if (policy == LinearPolicy::kAuto && !(T == 1 && s.in % 512 == 0)) continue;  // same as kNoSmallRows
                Fp8Path path = Fp8Path::kNone;
                const float us = time_path(copies, dx, T, dy, policy, iters, &path);
                const char* pname = path == Fp8Path::kSmallRows     ? "small-rows"
                                    : path == Fp8Path::kBlockScaled ? "block-scaled"
                                                                    : "dequant";
                if (policy == LinearPolicy::kNoSmallRows && path != Fp8Path::kBlockScaled) pname = "dequant(auto)";
                std::printf("%-22s %5lldx%-5lld %5lld  %-14s %9.1f %8.0f %6.1f%% %8.1f\n", s.name, (long long)s.out,
                            (long long)s.in, (long long)T, pname, us, bytes / us * 1e-3,
                            100.0 * bytes / us * 1e-6 / kCopyTBs, flops / us * 1e-6);
                std::fflush(stdout);
            }
        }
        for (DevWeight& d : copies) free_weight(d);
    }

    // Prefill sizes: the whole Gemm::linear call (activation quantisation + block-scaled GEMM +
    // the copy of the first T rows when T is padded) and the quantisation alone
    // (launch_quant_fp8_rows128, as gemm.cpp calls it), so the GEMM's own share is their difference.
    void time_prefill(const Shape& s, const std::vector<int64_t>& Ts, std::mt19937& rng) {
        const HostWeight hw = make_weight(s.out, s.in, rng);
        std::vector<DevWeight> copies = rotated_copies(hw);
        for (int64_t T : Ts) {
            const CallBuffers io(T, s, rng);
            const double flops = 2.0 * double(T) * double(s.out) * double(s.in);
            Fp8Path path = Fp8Path::kNone;
            const float us = time_path(copies, io.dx, T, io.dy, LinearPolicy::kNoSmallRows, 10, &path);
            const int64_t T_pad = Gemm::fp8_padded_rows(T);
            uint8_t* q = nullptr;
            float* scales = nullptr;
            QS_CUDA_CHECK(cudaMalloc(&q, size_t(T_pad * s.in)));
            QS_CUDA_CHECK(cudaMalloc(&scales, size_t(s.in / 128 * T_pad) * 4));
            const float qus = 1e3f * qs::lab::median_event_ms(
                [&](int) { launch_quant_fp8_rows128(io.dx, T, s.in, T_pad, q, scales, stream); }, 10, 3, stream);
            cudaFree(q);
            cudaFree(scales);
            const double gemm_us = std::max(1e-3, double(us) - double(qus));
            std::printf("%-22s %5lldx%-5lld %6lld  %-13s %9.1f %8.0f %6.1f%% %9.1f %9.1f %8.0f %6.1f%%\n", s.name,
                        (long long)s.out, (long long)s.in, (long long)T,
                        path == Fp8Path::kBlockScaled ? "block-scaled" : "NOT block", us, flops / us * 1e-6,
                        100.0 * flops / us * 1e-6 / kFp8PeakTflops, qus, gemm_us, flops / gemm_us * 1e-6,
                        100.0 * flops / gemm_us * 1e-6 / kFp8PeakTflops);
            std::fflush(stdout);
            if (path != Fp8Path::kBlockScaled && expected) all_ok = false;
        }
        for (DevWeight& d : copies) free_weight(d);
    }

    // One input, several linears (Gemm::linears; issue 14 item 4), as the model calls them:
    // attention q/k/v and GDN in_proj qkv/z/b/a (b, a: fp32 [32, 2048], the SGEMMs the device
    // keeps them in). old = one Gemm::linear per weight (x quantised per FP8 call), new =
    // Gemm::linears (x quantised once); outputs checked bitwise equal. Timed as one sequence
    // (median of 10, each weight rotated over its own >= 128 MB of copies), TFLOP/s over the
    // group's FLOPs. Two merges measured for time only (not bitwise checks): k_proj + v_proj as one
    // [1024, 2048] FP8 GEMM split by two strided copies, and in_proj_b + in_proj_a as one
    // [64, 2048] fp32 SGEMM split the same way.
    void time_shared(int64_t T, std::mt19937& rng) {
        struct Member {
            const char* name;
            int64_t out;
            bool fp8;
        };
        struct GroupSpec {
            const char* name;
            std::vector<Member> members;
            int merge_from;  // members [merge_from, merge_from + 2) are merged in the third variant
        };
        const int64_t in = 2048;
        const std::vector<GroupSpec> groups = {
            {"attn q/k/v", {{"q", 8192, true}, {"k", 512, true}, {"v", 512, true}}, 1},
            {"gdn qkv/z/b/a", {{"qkv", 8192, true}, {"z", 4096, true}, {"b", 32, false}, {"a", 32, false}}, 2}};
        auto f32_weight = [&](int64_t out) {
            DevWeight d;
            d.lin.dtype = DeviceLinear::Dtype::kF32;
            d.lin.out = out, d.lin.in = in;
            std::normal_distribution<float> nd(0.0f, 0.02f);
            std::vector<float> h(size_t(out * in));
            for (float& v : h) v = nd(rng);
            d.lin.w = upload(h, d.allocs);
            d.bytes = h.size() * 4;
            return d;
        };
        auto copies_of = [&](int64_t out, bool fp8) {
            if (fp8) return rotated_copies(make_weight(out, in, rng));
            std::vector<DevWeight> c;
            for (int i = 0; i < 2; ++i) c.push_back(f32_weight(out));  // 0.5 MB: L2-resident either way
            return c;
        };
        gemm.set_policy(LinearPolicy::kAuto);
        for (const GroupSpec& g : groups) {
            const size_t n = g.members.size();
            std::vector<std::vector<DevWeight>> copies;
            double flops = 0;
            for (const Member& m : g.members) {
                copies.push_back(copies_of(m.out, m.fp8));
                flops += 2.0 * double(T) * double(m.out) * double(in);
            }
            const Member& m0 = g.members[size_t(g.merge_from)];
            std::vector<DevWeight> merged = copies_of(2 * m0.out, m0.fp8);
            const CallBuffers io(T, Shape{g.name, 1, in}, rng);
            std::vector<float*> ys_old(n), ys_new(n);
            for (size_t i = 0; i < n; ++i) {
                QS_CUDA_CHECK(cudaMalloc(&ys_old[i], size_t(T * g.members[i].out) * 4));
                QS_CUDA_CHECK(cudaMalloc(&ys_new[i], size_t(T * g.members[i].out) * 4));
            }
            float* y_merged = nullptr;  // [T, 2 * m0.out]
            QS_CUDA_CHECK(cudaMalloc(&y_merged, size_t(T * 2 * m0.out) * 4));
            auto weights_at = [&](int it) {
                std::vector<const DeviceLinear*> ws;
                for (auto& c : copies) ws.push_back(&c[size_t(it) % c.size()].lin);
                return ws;
            };
            auto run_old = [&](int it) {
                const std::vector<const DeviceLinear*> ws = weights_at(it);
                for (size_t i = 0; i < n; ++i) gemm.linear(*ws[i], io.dx, T, ys_old[i], arena, stream);
                arena.reset();
            };
            auto run_new = [&](int it) {
                gemm.linears(io.dx, T, weights_at(it), ys_new, arena, stream);
                arena.reset();
            };
            auto run_merged = [&](int it) {
                std::vector<const DeviceLinear*> ws = weights_at(it);
                std::vector<float*> ys = ys_new;
                ws.erase(ws.begin() + g.merge_from, ws.begin() + g.merge_from + 2);
                ys.erase(ys.begin() + g.merge_from, ys.begin() + g.merge_from + 2);
                ws.insert(ws.begin() + g.merge_from, &merged[size_t(it) % merged.size()].lin);
                ys.insert(ys.begin() + g.merge_from, y_merged);
                gemm.linears(io.dx, T, ws, ys, arena, stream);
                const size_t row = size_t(m0.out) * 4;
                for (int half = 0; half < 2; ++half)
                    QS_CUDA_CHECK(cudaMemcpy2DAsync(ys_new[size_t(g.merge_from + half)], row, y_merged + half * m0.out,
                                                    2 * row, row, size_t(T), cudaMemcpyDeviceToDevice, stream));
                arena.reset();
            };
            // Bitwise: the same weights through both.
            run_old(0);
            const int64_t reuses = gemm.shared_input_reuses();
            run_new(0);
            const int64_t reused = gemm.shared_input_reuses() - reuses;
            QS_CUDA_CHECK(cudaStreamSynchronize(stream));
            bool same = true;
            for (size_t i = 0; i < n; ++i) {
                std::vector<float> a(size_t(T * g.members[i].out)), b(a.size());
                QS_CUDA_CHECK(cudaMemcpy(a.data(), ys_old[i], a.size() * 4, cudaMemcpyDeviceToHost));
                QS_CUDA_CHECK(cudaMemcpy(b.data(), ys_new[i], b.size() * 4, cudaMemcpyDeviceToHost));
                same = same && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
            }
            all_ok = all_ok && same;
            const float us_old = 1e3f * qs::lab::median_event_ms(run_old, 10, 3, stream);
            const float us_new = 1e3f * qs::lab::median_event_ms(run_new, 10, 3, stream);
            const float us_merged = 1e3f * qs::lab::median_event_ms(run_merged, 10, 3, stream);
            const char* merge_name = g.merge_from == 1 ? "new + k|v merged" : "new + b|a merged";
            const std::pair<const char*, float> rows[3] = {
                {"old (separate)", us_old}, {"new (shared x)", us_new}, {merge_name, us_merged}};
            for (int v = 0; v < 3; ++v)
                std::printf("%-14s %6lld  %-18s %9.1f %8.0f %6.1f%%  %s\n", g.name, (long long)T, rows[v].first,
                            rows[v].second, flops / rows[v].second * 1e-6,
                            100.0 * flops / rows[v].second * 1e-6 / kFp8PeakTflops,
                            v != 1 ? "" : same ? "bitwise = old" : "DIFFERS FROM OLD");
            std::printf("%-14s %6lld  saved %.1f us (%.1f%%), %lld quantisations reused\n", g.name, (long long)T,
                        us_old - us_new, 100.0 * (us_old - us_new) / us_old, (long long)reused);
            std::fflush(stdout);
            for (size_t i = 0; i < n; ++i) {
                cudaFree(ys_old[i]);
                cudaFree(ys_new[i]);
            }
            cudaFree(y_merged);
            for (auto& c : copies)
                for (DevWeight& d : c) free_weight(d);
            for (DevWeight& d : merged) free_weight(d);
        }
    }

    // The small-rows kernel's version 3 (launch_small_linear_fp8_mma: mma.sync on f16 copies of the
    // e4m3 codes) against version 2 on the model's launches of 1-4 rows (the GDN qkv + z and the
    // attention q/k/v as one launch of several weights, o_proj / out_proj alone): y of v3 against
    // the emulated reference (< 2e-4, as v2) and against v2 (< 1e-5: the same products, fp32 sums in
    // another order), each row bitwise its one-row call; then both timed as a CUDA graph of 24
    // calls (weights rotated over >= 128 MB of copies), µs per call and weight GB/s.
    void time_mma(std::mt19937& rng) {
        struct GroupSpec {
            const char* name;
            int64_t in;
            std::vector<int64_t> outs;
        };
        const GroupSpec groups[] = {{"GDN qkv+z", 2048, {8192, 4096}},
                                    {"attn q/k/v", 2048, {8192, 512, 512}},
                                    {"o/out_proj", 4096, {2048}}};
        std::printf("%-12s %2s  %-26s %9s %8s  %s\n", "launch", "T", "kernel", "us/call", "GB/s", "check");
        for (const GroupSpec& g : groups) {
            std::vector<HostWeight> hws;
            std::vector<std::vector<DevWeight>> copies;
            double wbytes = 0;
            for (int64_t out : g.outs) {
                hws.push_back(make_weight(out, g.in, rng));
                copies.push_back(rotated_copies(hws.back()));
                wbytes += double(copies.back()[0].bytes);
            }
            for (int64_t T = 1; T <= kSmallLinearFp8V2MaxRows; ++T) {
                const std::vector<float> x = make_x(T, g.in, rng);
                std::vector<void*> allocs;
                float* dx = upload(x, allocs);
                std::vector<float*> dy2, dy3;
                for (int64_t out : g.outs) {
                    dy2.push_back(upload(std::vector<float>(size_t(T * out), NAN), allocs));
                    dy3.push_back(upload(std::vector<float>(size_t(T * out), NAN), allocs));
                }
                auto parts_at = [&](int it, const std::vector<float*>& ys) {
                    std::vector<SmallLinearFp8Part> parts;
                    for (size_t i = 0; i < g.outs.size(); ++i) {
                        const DeviceLinear& l = copies[i][size_t(it) % copies[i].size()].lin;
                        parts.push_back({l.w, l.scale_inv, l.out, ys[i]});
                    }
                    return parts;
                };
                auto v2 = [&](int it) { launch_small_linear_fp8_v2(parts_at(it, dy2), g.in, dx, T, stream, 2); };
                auto v3 = [&](int it, int bps) { launch_small_linear_fp8_mma(parts_at(it, dy3), g.in, dx, T, stream, bps); };
                v2(0);
                v3(0, 0);
                QS_CUDA_CHECK(cudaStreamSynchronize(stream));
                std::vector<int64_t> rows;
                for (int64_t t = 0; t < T; ++t) rows.push_back(t);
                const std::vector<float> xq = quantise_rows128(x, T, g.in);
                double worst_emu = 0, worst_v2 = 0;
                bool rows_same = true;
                for (size_t i = 0; i < g.outs.size(); ++i) {
                    const int64_t out = g.outs[i];
                    std::vector<float> y2(size_t(T * out)), y3(y2.size());
                    QS_CUDA_CHECK(cudaMemcpy(y2.data(), dy2[i], y2.size() * 4, cudaMemcpyDeviceToHost));
                    QS_CUDA_CHECK(cudaMemcpy(y3.data(), dy3[i], y3.size() * 4, cudaMemcpyDeviceToHost));
                    const std::vector<double> emu = reference(hws[i], xq, rows);
                    std::vector<double> r2(y2.begin(), y2.end());
                    worst_emu = std::max(worst_emu, norm_err(y3, out, rows, emu));
                    worst_v2 = std::max(worst_v2, norm_err(y3, out, rows, r2));
                    for (int64_t t = 0; t < T && T > 1; ++t) {  // row t alone, bitwise
                        std::vector<float*> one(dy3.size());
                        for (size_t j = 0; j < dy3.size(); ++j)
                            one[j] = upload(std::vector<float>(size_t(g.outs[j]), NAN), allocs);
                        launch_small_linear_fp8_mma(parts_at(0, one), g.in, dx + t * g.in, 1, stream, 0);
                        // The lab's stream is non-blocking: cudaMemcpy alone does not wait for it.
                        QS_CUDA_CHECK(cudaStreamSynchronize(stream));
                        std::vector<float> y1(static_cast<size_t>(out));
                        QS_CUDA_CHECK(cudaMemcpy(y1.data(), one[i], y1.size() * 4, cudaMemcpyDeviceToHost));
                        rows_same = rows_same && std::memcmp(y1.data(), y3.data() + t * out, size_t(out) * 4) == 0;
                    }
                }
                const bool ok = worst_emu < 2e-4 && worst_v2 < 1e-5 && rows_same;
                all_ok = all_ok && ok;
                const double us2 = qs::lab::graph_us_per_call(stream, v2);
                std::printf("%-12s %2lld  %-26s %9.2f %8.0f\n", g.name, (long long)T, "v2 (fp32 FMAs, 2/SM)", us2,
                            wbytes / us2 * 1e-3);
                for (int bps : {0, 2, 3}) {
                    const double us3 = qs::lab::graph_us_per_call(stream, [&](int it) { v3(it, bps); });
                    char label[40];
                    std::snprintf(label, sizeof label, "v3 mma, %s", bps == 0 ? "a block per 16 rows" : bps == 2 ? "2/SM" : "3/SM");
                    std::printf("%-12s %2lld  %-26s %9.2f %8.0f  %s\n", g.name, (long long)T, label, us3,
                                wbytes / us3 * 1e-3,
                                bps != 0 ? ""
                                : ok     ? "PASS"
                                         : "FAIL");
                }
                std::printf("%-12s %2lld  v3 vs emulated %.2e, vs v2 %.2e, rows %s\n", g.name, (long long)T, worst_emu,
                            worst_v2, rows_same ? "bitwise = 1-row calls" : "DIFFER FROM 1-ROW CALLS");
                std::fflush(stdout);
                for (void* p : allocs) QS_CUDA_CHECK(cudaFree(p));
            }
            for (auto& c : copies)
                for (DevWeight& d : c) free_weight(d);
        }
    }

    // The layer's input norm with its projections (Gemm::norm_linears; CudaOptions::fused_input_norm),
    // then the output projection with the post-attention norm (Gemm::linear_norm; fused_output_norm),
    // at 1-4 rows: h and every output of the fused call (the norm in the FP8 small-rows launch's
    // prologue) bitwise equal to the norm kernel then the linears, then both timed as a CUDA graph
    // of 24 calls (lab_timing.h; weights rotated over >= 128 MB of copies, as a step's graph replays
    // them back to back), µs per call. Both small-rows versions (Gemm::set_fp8_small_version 2, 3):
    // within a version the fused call's bits are the unfused call's. Version 3 with its grid at a
    // block per 16 features ("v3") and capped at 2 and 3 blocks per SM ("v3/2", "v3/3": a block
    // then normalises x once for several feature groups).
    void time_norm(std::mt19937& rng) {
        for (const auto& [version, bps] : {std::pair{2, 0}, std::pair{3, 0}, std::pair{3, 2}, std::pair{3, 3}})
            time_norm_version(version, bps, rng);
        gemm.set_fp8_small_version(2);
    }
    void time_norm_version(int version, int v3_bps, std::mt19937& rng) {
        gemm.set_fp8_small_version(version, v3_bps);
        char vname[8];
        if (version == 2 || v3_bps == 0) std::snprintf(vname, sizeof vname, "v%d", version);
        else std::snprintf(vname, sizeof vname, "v%d/%d", version, v3_bps);
        const int64_t in = 2048;
        struct GroupSpec {
            const char* name;
            std::vector<std::pair<int64_t, bool>> members;  // out, fp8 (else fp32: GDN b/a)
        };
        const std::vector<GroupSpec> groups = {{"attn q/k/v", {{8192, true}, {512, true}, {512, true}}},
                                               {"gdn qkv/z/b/a", {{8192, true}, {4096, true}, {32, false}, {32, false}}}};
        std::normal_distribution<float> nd(0.0f, 1.0f);
        std::vector<float> nw(static_cast<size_t>(in));
        for (float& v : nw) v = 0.3f * nd(rng);
        std::vector<void*> allocs;
        const float* dnw = upload(nw, allocs);
        gemm.set_policy(LinearPolicy::kAuto);
        for (const GroupSpec& g : groups) {
            std::vector<std::vector<DevWeight>> copies;
            for (const auto& [out, fp8] : g.members) {
                if (fp8) {
                    copies.push_back(rotated_copies(make_weight(out, in, rng)));
                    continue;
                }
                std::vector<DevWeight> c(2);  // 0.25 MB: L2-resident either way
                std::vector<float> h(size_t(out * in));
                for (float& v : h) v = 0.02f * nd(rng);
                for (DevWeight& d : c) {
                    d.lin.dtype = DeviceLinear::Dtype::kF32;
                    d.lin.out = out, d.lin.in = in;
                    d.lin.w = upload(h, d.allocs);
                    d.bytes = h.size() * 4;
                }
                copies.push_back(std::move(c));
            }
            const size_t n = g.members.size();
            for (int64_t T = 1; T <= kSmallLinearFp8V2MaxRows; ++T) {
                gemm.set_fp8_small_rows(int(T));
                std::vector<float> x(size_t(T * in)), pending(x.size());
                for (float& v : x) v = 2.0f * nd(rng);
                for (float& v : pending) v = nd(rng);
                std::vector<void*> bufs;
                const float* dx = upload(x, bufs);
                const float* dp = upload(pending, bufs);
                float* h[2];
                std::vector<float*> ys[2];
                for (int f = 0; f < 2; ++f) {
                    QS_CUDA_CHECK(cudaMalloc(&h[f], size_t(T * in) * 4));
                    bufs.push_back(h[f]);
                    for (const auto& m : g.members) {
                        float* y = nullptr;
                        QS_CUDA_CHECK(cudaMalloc(&y, size_t(T * m.first) * 4));
                        bufs.push_back(y);
                        ys[f].push_back(y);
                    }
                }
                auto call = [&](int fused, int it) {
                    std::vector<const DeviceLinear*> ws;
                    for (auto& c : copies) ws.push_back(&c[size_t(it) % c.size()].lin);
                    const SmallLinearInputNorm norm{dp, dnw, 1e-6f, h[fused]};
                    gemm.norm_linears(dx, norm, fused == 1, T, ws, ys[fused], arena, stream);
                    arena.reset();
                };
                call(0, 0);
                call(1, 0);
                QS_CUDA_CHECK(cudaStreamSynchronize(stream));
                auto host = [&](const float* d, size_t count) {
                    std::vector<float> v(count);
                    QS_CUDA_CHECK(cudaMemcpy(v.data(), d, count * 4, cudaMemcpyDeviceToHost));
                    return v;
                };
                bool same = host(h[0], size_t(T * in)) == host(h[1], size_t(T * in));
                for (size_t i = 0; i < n; ++i) {
                    const size_t count = size_t(T * g.members[i].first);
                    const std::vector<float> a = host(ys[0][i], count), b = host(ys[1][i], count);
                    same = same && std::memcmp(a.data(), b.data(), count * 4) == 0;
                }
                all_ok = all_ok && same;
                const double us[2] = {qs::lab::graph_us_per_call(stream, [&](int it) { call(0, it); }),
                                      qs::lab::graph_us_per_call(stream, [&](int it) { call(1, it); })};
                std::printf("%-5s %-4s norm + %-14s T=%lld  norm kernel + linears %7.2f us | fused %7.2f us | saved %5.2f us "
                            "(%.1f%%)  %s\n",
                            same ? "PASS" : "FAIL", vname, g.name, (long long)T, us[0], us[1], us[0] - us[1],
                            100.0 * (us[0] - us[1]) / us[0], same ? "bitwise = unfused" : "DIFFERS FROM UNFUSED");
                std::fflush(stdout);
                for (void* b : bufs) cudaFree(b);
            }
            gemm.set_fp8_small_rows(0);
            for (auto& c : copies)
                for (DevWeight& d : c) free_weight(d);
        }
        // The output projection with the post-attention norm (Gemm::linear_norm; CudaOptions::
        // fused_output_norm): o_proj / out_proj 4096 → 2048, the norm in the launch's last block.
        {
            const int64_t out = 2048, in_o = 4096;
            std::vector<DevWeight> copies = rotated_copies(make_weight(out, in_o, rng));
            int* counter = nullptr;
            QS_CUDA_CHECK(cudaMalloc(&counter, sizeof(int)));
            QS_CUDA_CHECK(cudaMemset(counter, 0, sizeof(int)));
            std::vector<float> onw(static_cast<size_t>(out));
            for (float& v : onw) v = 0.3f * nd(rng);
            const float* donw = upload(onw, allocs);
            for (int64_t T = 1; T <= kSmallLinearFp8V2MaxRows; ++T) {
                gemm.set_fp8_small_rows(int(T));
                std::vector<float> a(size_t(T * in_o)), x(size_t(T * out)), pending(x.size());
                for (float& v : a) v = nd(rng);
                for (float& v : x) v = 2.0f * nd(rng);
                for (float& v : pending) v = nd(rng);
                std::vector<void*> bufs;
                const float* da = upload(a, bufs);
                const float* dp = upload(pending, bufs);
                float *dx[2], *dy[2], *dh[2];
                for (int f = 0; f < 2; ++f) {
                    dx[f] = upload(x, bufs);
                    QS_CUDA_CHECK(cudaMalloc(&dy[f], x.size() * 4));
                    QS_CUDA_CHECK(cudaMalloc(&dh[f], x.size() * 4));
                    bufs.push_back(dy[f]);
                    bufs.push_back(dh[f]);
                }
                auto call = [&](int fused, int it) {
                    const SmallLinearOutputNorm post{dx[fused], dp, donw, 1e-6f, dh[fused], counter};
                    gemm.linear_norm(copies[size_t(it) % copies.size()].lin, da, T, dy[fused], post, fused == 1, arena,
                                     stream);
                    arena.reset();
                };
                call(0, 0);
                call(1, 0);
                QS_CUDA_CHECK(cudaStreamSynchronize(stream));
                auto host = [&](const float* d) {
                    std::vector<float> v(x.size());
                    QS_CUDA_CHECK(cudaMemcpy(v.data(), d, v.size() * 4, cudaMemcpyDeviceToHost));
                    return v;
                };
                const bool same = host(dy[0]) == host(dy[1]) && host(dx[0]) == host(dx[1]) && host(dh[0]) == host(dh[1]);
                all_ok = all_ok && same;
                // x grows by pending + y each call: fine for timing.
                const double us[2] = {qs::lab::graph_us_per_call(stream, [&](int it) { call(0, it); }),
                                      qs::lab::graph_us_per_call(stream, [&](int it) { call(1, it); })};
                std::printf("%-5s %-4s o_proj + post norm  T=%lld  linear + norm kernel %7.2f us | fused %7.2f us | saved %5.2f us "
                            "(%.1f%%)  %s\n",
                            same ? "PASS" : "FAIL", vname, (long long)T, us[0], us[1], us[0] - us[1],
                            100.0 * (us[0] - us[1]) / us[0], same ? "bitwise = unfused" : "DIFFERS FROM UNFUSED");
                std::fflush(stdout);
                for (void* b : bufs) cudaFree(b);
            }
            gemm.set_fp8_small_rows(0);
            for (DevWeight& d : copies) free_weight(d);
            cudaFree(counter);
        }
        for (void* a : allocs) cudaFree(a);
    }

    // The small-rows kernel's version 2 (Gemm::set_fp8_small_rows; small_linear_fp8.cu) at 1-4
    // rows: against the emulated quantisation (< 2e-4: the same x codes, fp32 sums) and the exact
    // product (< 4e-2); every row bitwise equal to a one-row call on that row (rows never mix,
    // so a sequence's logits do not depend on the verify's width); a graph capture replays
    // bitwise; then timed against today's path (version 1 at T = 1, block-scaled cuBLASLt above)
    // at grid caps of 1, 2 and 4 blocks per SM.
    void small_v2(const Shape& s, bool timed, std::mt19937& rng) {
        const HostWeight hw = make_weight(s.out, s.in, rng);
        const size_t wbytes = hw.q.size() + hw.scale_inv.size() * 4;
        const size_t ncopies = timed ? std::clamp<size_t>((size_t(128) << 20) / wbytes + 1, 2, 160) : 1;
        std::vector<DevWeight> copies;
        for (size_t i = 0; i < ncopies; ++i) copies.push_back(upload_weight(hw));
        const DeviceLinear& lin = copies[0].lin;
        for (int64_t T = 1; T <= kSmallLinearFp8V2MaxRows; ++T) {
            const CallBuffers io(T, s, rng);
            std::vector<int64_t> rows;
            for (int64_t t = 0; t < T; ++t) rows.push_back(t);
            const std::vector<double> ref = reference(hw, io.x, rows);
            const std::vector<double> emu = reference(hw, quantise_rows128(io.x, T, s.in), rows);
            const int64_t v2_before = gemm.fp8_counts().small_rows_v2;
            gemm.set_fp8_small_rows(int(T));
            Fp8Path p2 = Fp8Path::kNone;
            const std::vector<float> y2 = run(lin, io.dx, T, io.dy, LinearPolicy::kAuto, &p2);
            const bool taken = gemm.fp8_counts().small_rows_v2 == v2_before + 1;
            const double ee = norm_err(y2, s.out, rows, emu), ex = norm_err(y2, s.out, rows, ref);
            // Row independence: each row alone through the same kernel, bitwise.
            bool rows_same = true;
            for (int64_t t = 0; t < T; ++t) {
                Fp8Path p1;
                const std::vector<float> y1 = run(lin, io.dx + t * s.in, 1, io.dy, LinearPolicy::kAuto, &p1);
                rows_same = rows_same && std::memcmp(y1.data(), y2.data() + t * s.out, size_t(s.out) * 4) == 0;
            }
            // Today's path on the same inputs (version 1 or block-scaled).
            gemm.set_fp8_small_rows(0);
            Fp8Path p0 = Fp8Path::kNone;
            const std::vector<float> y0 = run(lin, io.dx, T, io.dy, LinearPolicy::kAuto, &p0);
            const double e0 = norm_err(y0, s.out, rows, emu);
            // Graph capture of version 2.
            gemm.set_fp8_small_rows(int(T));
            cudaGraph_t graph;
            cudaGraphExec_t exec;
            QS_CUDA_CHECK(cudaMemsetAsync(io.dy, 0xff, size_t(T * s.out) * 4, stream));
            QS_CUDA_CHECK(cudaStreamSynchronize(stream));
            QS_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
            gemm.linear(lin, io.dx, T, io.dy, arena, stream);
            QS_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
            QS_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
            QS_CUDA_CHECK(cudaGraphLaunch(exec, stream));
            std::vector<float> yg(size_t(T * s.out));
            QS_CUDA_CHECK(cudaMemcpyAsync(yg.data(), io.dy, yg.size() * 4, cudaMemcpyDeviceToHost, stream));
            QS_CUDA_CHECK(cudaStreamSynchronize(stream));
            arena.reset();
            cudaGraphExecDestroy(exec);
            cudaGraphDestroy(graph);
            const bool graph_same = std::memcmp(yg.data(), y2.data(), yg.size() * 4) == 0;
            const bool ok = taken && p2 == Fp8Path::kSmallRows && ee < 2e-4 && ex < 4e-2 && rows_same && graph_same;
            all_ok = all_ok && ok;
            std::printf("%-5s v2 %-19s %5lldx%-5lld T=%lld vs emulated %.2e (today's %s %.2e), vs exact %.2e, rows %s, "
                        "graph %s%s\n",
                        ok ? "PASS" : "FAIL", s.name, (long long)s.out, (long long)s.in, (long long)T, ee,
                        p0 == Fp8Path::kSmallRows ? "v1" : p0 == Fp8Path::kBlockScaled ? "block-scaled" : "dequant", e0,
                        ex, rows_same ? "bitwise = 1-row calls" : "DIFFER FROM 1-ROW CALLS",
                        graph_same ? "identical" : "DIFFERS", taken ? "" : " (V2 NOT TAKEN)");
            if (timed) {
                const double bytes = double(wbytes) + double(T) * double(s.in) * 4 + double(T) * double(s.out) * 4;
                Fp8Path path;
                gemm.set_fp8_small_rows(0);
                const float us0 = time_path(copies, io.dx, T, io.dy, LinearPolicy::kAuto, 50, &path);
                std::printf("      %-22s %5lldx%-5lld T=%lld  today (%s) %6.1f us %5.0f GB/s | v2:", s.name,
                            (long long)s.out, (long long)s.in, (long long)T,
                            path == Fp8Path::kSmallRows ? "v1" : "block-scaled", us0, bytes / us0 * 1e-3);
                for (int bps : {1, 2, 4}) {
                    gemm.set_fp8_small_rows(int(T), bps);
                    const float us = time_path(copies, io.dx, T, io.dy, LinearPolicy::kAuto, 50, &path);
                    std::printf(" %d/SM %6.1f us %5.0f GB/s;", bps, us, bytes / us * 1e-3);
                }
                std::printf("\n");
            }
            gemm.set_fp8_small_rows(0);
            std::fflush(stdout);
        }
        for (DevWeight& d : copies) free_weight(d);
    }

    // BF16 weights (the FP8 weight's dequantised values rounded to bf16): the small-rows kernel
    // against the product with x rounded to bf16 as both GPU paths round it (< 1e-5), cuBLASLt's
    // bf16 GEMM against the same (< 1e-4) and both against the exact product (< 1e-2), then both
    // timed like the FP8 paths. GB/s counts the bf16 weight + x + y.
    void bf16_shape(const Shape& s, const std::vector<int64_t>& Ts, std::mt19937& rng, bool timed) {
        HostWeight hw = make_weight(s.out, s.in, rng);
        std::vector<uint16_t> wb(hw.wdq.size());
        for (size_t i = 0; i < wb.size(); ++i) {
            wb[i] = f32_to_bf16(hw.wdq[i]).bits;
            hw.wdq[i] = bf16_to_f32(bf16{wb[i]});  // the reference uses exactly the stored weights
        }
        const size_t wbytes = wb.size() * 2;
        const size_t ncopies = std::clamp<size_t>((size_t(128) << 20) / wbytes + 1, 2, 160);
        std::vector<DevWeight> copies(ncopies);
        for (DevWeight& d : copies) {
            d.lin.dtype = DeviceLinear::Dtype::kBF16;
            d.lin.out = s.out, d.lin.in = s.in;
            d.lin.w = upload(wb, d.allocs);
            d.bytes = wbytes;
        }
        for (int64_t T : Ts) {
            const CallBuffers io(T, s, rng);
            const std::vector<float>& x = io.x;
            float* dx = io.dx;
            float* dy = io.dy;
            std::vector<int64_t> rows;
            for (int64_t t = 0; t < T; ++t) rows.push_back(t);
            std::vector<float> xr(x.size());
            for (size_t i = 0; i < x.size(); ++i) xr[i] = round_to_bf16(x[i]);
            const std::vector<double> ref = reference(hw, x, rows), ref_r = reference(hw, xr, rows);
            const double before = double(gemm.small_rows_calls());
            Fp8Path unused;
            const std::vector<float> ys = run(copies[0].lin, dx, T, dy, LinearPolicy::kAuto, &unused);
            const bool small = double(gemm.small_rows_calls()) > before;
            const std::vector<float> yc = run(copies[0].lin, dx, T, dy, LinearPolicy::kNoSmallRows, &unused);
            const double es = norm_err(ys, s.out, rows, ref_r), ec = norm_err(yc, s.out, rows, ref_r);
            const double esx = norm_err(ys, s.out, rows, ref), ecx = norm_err(yc, s.out, rows, ref);
            const bool ok = small && es < 1e-5 && ec < 1e-4 && esx < 1e-2 && ecx < 1e-2;
            all_ok = all_ok && ok;
            std::printf("%-5s bf16 %-17s %5lldx%-5lld T=%-3lld vs bf16-rounded x: small-rows %.2e%s, cuBLASLt %.2e | vs "
                        "exact: %.2e, %.2e\n",
                        ok ? "PASS" : "FAIL", s.name, (long long)s.out, (long long)s.in, (long long)T, es,
                        small ? "" : " (NOT TAKEN)", ec, esx, ecx);
            if (timed) {
                const double bytes = double(wbytes) + double(T) * double(s.in) * 4 + double(T) * double(s.out) * 4;
                for (LinearPolicy policy : {LinearPolicy::kAuto, LinearPolicy::kNoSmallRows}) {
                    Fp8Path path;
                    const float us = time_path(copies, dx, T, dy, policy, 50, &path);
                    std::printf("      bf16 %-17s %5lldx%-5lld T=%-3lld %-14s %9.1f us %8.0f GB/s %6.1f%% of copy\n",
                                s.name, (long long)s.out, (long long)s.in, (long long)T,
                                policy == LinearPolicy::kAuto ? "small-rows" : "cuBLASLt bf16", us, bytes / us * 1e-3,
                                100.0 * bytes / us * 1e-6 / kCopyTBs);
                }
            }
            std::fflush(stdout);
        }
        for (DevWeight& d : copies) free_weight(d);
    }
};

}  // namespace

int main(int argc, char** argv) {
    uint64_t seed = 1;
    bool timing = true, quick = false, v2_only = false, prefill_only = false, shared_only = false, norm_only = false,
         mma_only = false;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--no-timing") timing = false;
        else if (a == "--quick") quick = true, timing = false;
        else if (a == "--small-v2") v2_only = true;
        else if (a == "--prefill") prefill_only = true;
        else if (a == "--shared") shared_only = true;
        else if (a == "--norm") norm_only = true;
        else if (a == "--mma") mma_only = true;
        else seed = std::strtoull(argv[i], nullptr, 10);
    }
    int dev = 0;
    QS_CUDA_CHECK(cudaSetDevice(dev));
    cudaDeviceProp prop{};
    QS_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    Lab lab;
    QS_CUDA_CHECK(cudaStreamCreateWithFlags(&lab.stream, cudaStreamNonBlocking));
    lab.expected = Gemm::fp8_block_scaling_expected(dev);
    std::printf("device %s (sm_%d%d), cuBLASLt %zu: block-scaled FP8 %s\n", prop.name, prop.major, prop.minor,
                cublasLtGetVersion(), lab.expected ? "expected to work (sm_90, cuBLASLt >= 12.9)" : "NOT expected here");
    std::mt19937 rng{uint32_t(seed)};

    const std::vector<Shape> real = {{"q_proj/in_proj_qkv", 8192, 2048},
                                     {"k_proj/v_proj", 512, 2048},
                                     {"in_proj_z", 4096, 2048},
                                     {"o_proj/out_proj", 2048, 4096}};
    // Shapes that exercise the edges: in/128 = 5 (padded weight-scale copy), and not multiples of
    // 128 (the tiny test models: the fallback must run and be right).
    const std::vector<Shape> extra = {{"pad-check", 256, 640}, {"tiny (fallback)", 96, 64}, {"odd (fallback)", 200, 384}};

    if (mma_only) {
        std::printf("\nsmall-rows version 3 (tensor cores) against version 2, the model's launches at 1-4 rows; a graph "
                    "of 24 calls, us per call, GB/s of weight bytes\n");
        lab.time_mma(rng);
        std::printf("\n%s\n", lab.all_ok ? "ALL PASS" : "SOME FAILED");
        QS_CUDA_CHECK(cudaStreamDestroy(lab.stream));
        return lab.all_ok ? 0 : 1;
    }
    if (norm_only) {
        std::printf("\nthe input norm with its projections, FP8, 1-4 rows (Gemm::norm_linears): the norm kernel then "
                    "the linears against the norm in the small-rows launch; a graph of 24 calls, us per call\n");
        lab.time_norm(rng);
        std::printf("\n%s\n", lab.all_ok ? "ALL PASS" : "SOME FAILED");
        QS_CUDA_CHECK(cudaStreamDestroy(lab.stream));
        return lab.all_ok ? 0 : 1;
    }
    if (prefill_only) {
        std::printf("\ncorrectness at prefill sizes (normalised error; bounds: block vs emulated 2e-3, block vs exact "
                    "4e-2, dequant vs exact 1e-2)\n");
        for (const Shape& s : real) lab.check(s, {4096, 16384}, rng);
        std::printf("\nprefill timings (median of 10 whole calls / 10 quantisations alone; weights rotated over >= "
                    "128 MB of copies; peak = the measured fp8 GEMM %.0f TFLOP/s)\n",
                    kFp8PeakTflops);
        std::printf("%-22s %11s %6s  %-13s %9s %8s %7s %9s %9s %8s %7s\n", "shape", "out x in", "T", "path", "call us",
                    "TFLOP/s", "peak", "quant us", "gemm us", "TFLOP/s", "peak");
        for (const Shape& s : real) lab.time_prefill(s, {4096, 16384}, rng);
    }
    if (prefill_only || shared_only) {
        std::printf("\nshared input (Gemm::linears): old = one linear per weight, new = x quantised once; median "
                    "of 10 whole groups, TFLOP/s over the group's FLOPs (b, a: fp32 SGEMMs)\n");
        std::printf("%-14s %6s  %-18s %9s %8s %7s\n", "group", "T", "variant", "us", "TFLOP/s", "peak");
        for (int64_t T : {16384, 1024}) lab.time_shared(T, rng);
        std::printf("\n%s\n", lab.all_ok ? "ALL PASS" : "SOME FAILED");
        QS_CUDA_CHECK(cudaStreamDestroy(lab.stream));
        return lab.all_ok ? 0 : 1;
    }
    std::printf("\nsmall-rows version 2 (FP8, 1-4 rows; bounds: vs emulated 2e-4, vs exact 4e-2)\n");
    for (const Shape& s : real) lab.small_v2(s, timing && v2_only, rng);  // timed with --small-v2 only
    if (v2_only) {
        std::printf("\n%s\n", lab.all_ok ? "ALL PASS" : "SOME FAILED");
        QS_CUDA_CHECK(cudaStreamDestroy(lab.stream));
        return lab.all_ok ? 0 : 1;
    }
    std::printf("\ncorrectness (normalised error; bounds: block vs emulated 2e-3, block vs exact 4e-2, dequant vs "
                "exact 1e-2)\n");
    const std::vector<int64_t> check_T = quick ? std::vector<int64_t>{1, 7} : std::vector<int64_t>{1, 3, 7, 8, 64, 512, 4096};
    for (const Shape& s : real) lab.check(s, check_T, rng);
    for (const Shape& s : extra) lab.check(s, {1, 5, 64}, rng);
    if (lab.refused_any)
        std::printf("\n*** cuBLASLt REFUSED the block-scaled FP8 mode (VEC128_32F x BLK128x128_32F) on this GPU for at "
                    "least one real shape: the dequant fallback ran there%s ***\n",
                    lab.expected ? " although sm_90 + cuBLASLt >= 12.9 should support it (counted as FAIL)" : "");

    if (timing) {
        std::printf("\ntimings (median of 50 calls, 20 at T=4096; weights rotated over >= 128 MB of copies; GB/s = "
                    "(fp8 W + scales + x fp32 + y fp32) / time; %% of %.2f TB/s copy)\n",
                    kCopyTBs);
        std::printf("%-22s %11s %5s  %-14s %9s %8s %7s %8s\n", "shape", "out x in", "T", "path", "us", "GB/s", "copy",
                    "TFLOP/s");
        for (const Shape& s : real) lab.time_shape(s, {1, 2, 8, 64, 512, 4096}, rng);
    }
    std::printf("\nbf16 weights, 1-2 rows: small-rows kernel vs cuBLASLt\n");
    for (const Shape& s : real) lab.bf16_shape(s, {1, 2}, rng, timing);
    const Gemm::Fp8Counts& c = lab.gemm.fp8_counts();
    std::printf("\ncalls: block-scaled %lld, dequant %lld, small-rows (fp8) %lld\n%s\n", (long long)c.block_scaled,
                (long long)c.dequant, (long long)c.small_rows, lab.all_ok ? "ALL PASS" : "SOME FAILED");
    QS_CUDA_CHECK(cudaStreamDestroy(lab.stream));
    return lab.all_ok ? 0 : 1;
}
