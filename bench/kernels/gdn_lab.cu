// Lab for the Gated DeltaNet CUDA kernels (src/backend/cuda/gdn_kernels.{h,cu}).
// Build (from the repository root):
//   mkdir -p build-gpu && nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -Isrc bench/kernels/gdn_lab.cu src/backend/cuda/gdn_*.cu -o build-gpu/gdn_lab
// Run: build-gpu/gdn_lab [--quick | --quick-real | --quick-cpar | --quick-decode | --quick-slices | --quick-tc | --cpar | --decode | --tc] [seed]
//   (exit code != 0 on any FAIL)
//   --tc: prefill versions 2 (bf16 tensor cores, gdn_tc_*.cu), 3 (the same, split operands) and 4
//   (fp16 operands) against today's default on the same inputs: varlen mix, 16 × 1024, 1 × 16,384,
//   64 × 256 checked against the reference, timed (versions 2-5 also kernel by kernel), then a table;
//   version 5 (4 with early loads) must also equal version 4 bit for bit on every checked case, and
//   version 6 (5 with 64-column state-pass blocks) version 5.
//   --quick-tc [--ver N]: the small tc cases for the emulator (run_emu.sh), optionally one version's
//   (--ver 5 runs 4 too, --ver 6 runs 5, for the bit comparison).
//   --tc-speed: versions 2, 4, 5 and 6: the varlen mix checked (5 against 4's bits, 6 against 5's,
//   6 with the chunk grids' block map and the state pass's chunked-sequence list (+map,
//   DeviceBatch::gdn_chunks, gdn_chunk_seqs, gdn_short_seqs) against 6's), the three large shapes
//   and two serving steps' (16 × 1,024 beside 1,024 and 512 one-row sequences) timed (no reference),
//   the serving steps also with the token-serial kernels on a side stream (+side: the slices' usual
//   grid; +sideN: N slice blocks). --quick-tc's slices-mix case checks those paths' bits.
//   --decode: decode-only batches at the real shape (1, 64, 512 sequences, fp32 and bf16 state):
//   the one-block-per-head kernel (serial, gdn_serial.cu) against the streaming one (stream,
//   gdn_decode.cu) in versions 1 and 2 (stream-v2: decode_version 2), checked against the reference
//   (1 and 64 sequences: all three; 512: the streaming ones, on a quarter of the sequences), v2's
//   bits against v1's, timed, then two tables (µs, GB/s of the floor bytes, share of 4.25 TB/s;
//   stream v1 against v2). Sized for ~1 min on the H200.
//   --cpar: the chunk-parallel path (gdn_cp_*.cu) at the real shape: a varlen mix, 16 × 1024 and
//   1 × 16,384 against the reference, both prefill shapes timed, then a summary table (~1 min).
//   --quick: small-shape correctness cases only. Without a GPU, bench/kernels/emu/run_emu.sh runs
//   the --quick cases with the kernels' own source under a host emulation (slow, CPU only).
//
// Reference: a double-precision transcription of src/backend/cpu/cpu_gdn.cpp (conv + SiLU with the
// slot's window, l2norm with eps 1e-6 inside the sqrt, q/sqrt(Dk), β = sigmoid(b),
// g = -exp(A_log)·softplus(a + dt_bias), S ← e^g S; δ = β(v − Sᵀk̂); S += k̂δᵀ; o = Sᵀq̂; gated RMSNorm).
// Every case draws fresh random inputs, non-zero starting conv windows and states in slots that are
// not in batch order, poisons out / workspace with NaN, and checks out, every conv window and every
// state slot (slots outside the batch must be unchanged).
// Tolerances (normalised ‖out−ref‖/‖ref‖): fp32 math vs double, serial path 1e-5 (measured ~2e-7),
// chunked 3xTF32 path 2e-5 (fp32-level, ~4e-7), chunked plain-TF32 path 5e-3 (10-bit mantissa
// operands, ~4.5e-4). bf16 state storage: the reference rounds the stored state to bf16 exactly where
// the kernel does (the load is exact, the store rounds once per call), so out keeps the fp32 bound;
// the state may differ by one bf16 ulp where the fp32 value sits on a rounding boundary (2e-3).
#include <algorithm>
#include <atomic>
#include <chrono>
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
#include "backend/cuda/device_limits.h"
#include "backend/cuda/gdn_chunk_map.h"
#include "backend/cuda/gdn_kernels.h"
#include "backend/cuda/gdn_tc_phases.h"
#include "lab_timing.h"

using qs::cuda::DeviceBatch;
using qs::cuda::DeviceSeq;
using qs::cuda::GatedDeltaNetParams;

namespace {

constexpr double kCopyCeilingGBs = 4250.0;  // device-to-device copy, measured on this H200

int g_failures = 0;

struct Shape {
    const char* name;
    int Nk, Nv, Dk, Dv, K;
    float eps;
    int C() const { return 2 * Nk * Dk + Nv * Dv; }
};

const Shape kTiny{"tiny", 2, 4, 64, 64, 4, 1e-6f};
const Shape kReal{"real", 16, 32, 128, 128, 4, 1e-6f};
const Shape kOdd32{"odd32", 2, 2, 32, 32, 4, 1e-6f};
const Shape kOddMix{"odd48x80", 1, 3, 48, 80, 4, 1e-6f};
// Dv % 8 == 4 (half column groups and 8-byte bf16 accesses in the streaming kernel), conv K = 3.
const Shape kOdd36{"odd40x36", 1, 2, 40, 36, 3, 1e-6f};
// The tiny test model's GDN (tiny_model_config: CudaOpsParity.GatedDeltaNetWithStateSlots/tiny).
const Shape kTest16{"test16", 2, 4, 16, 16, 4, 1e-6f};

uint16_t f2bf(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return uint16_t(u >> 16);
}
float bf2f(uint16_t h) {
    uint32_t u = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
float bf_round(float f) { return bf2f(f2bf(f)); }

struct Problem {
    Shape sh;
    std::vector<int> lens, slots;
    std::vector<char> defer;  // per sequence: defer_state (MTP verification: state and window after row 0 only)
    std::vector<int> spare;   // per deferred sequence: spare slot for the state after its last row (-1: none)
    int num_slots = 0, T = 0;
    std::vector<float> qkv, z, b, a, conv_w, A_log, dt_bias, norm_w, conv0, ssm0;
};

Problem make_problem(const Shape& sh, std::vector<int> lens, std::vector<int> slots, int num_slots, std::mt19937_64& rng,
                     bool bf16_state, bool zero_state = false) {
    Problem P;
    P.sh = sh;
    P.lens = std::move(lens);
    P.slots = std::move(slots);
    P.defer.assign(P.lens.size(), 0);
    P.spare.assign(P.lens.size(), -1);
    P.num_slots = num_slots;
    for (int n : P.lens) P.T += n;
    const int C = sh.C(), W = sh.K - 1;
    std::normal_distribution<float> N01(0.f, 1.f);
    auto uni = [&](float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(rng); };
    auto fill = [&](std::vector<float>& v, size_t n, float sd) {
        v.resize(n);
        if (n <= (size_t(1) << 24)) {
            for (auto& x : v) x = sd * N01(rng);
            return;
        }
        // Large (the --decode states, up to 270 M values): uniform with the same deviation from a
        // xorshift stream, ~20x faster than the normal distribution.
        uint64_t st = rng() | 1u;
        const float scale = sd * std::sqrt(3.0f) / 2147483648.0f;
        for (auto& x : v) {
            st ^= st << 13; st ^= st >> 7; st ^= st << 17;
            x = scale * float(int32_t(uint32_t(st >> 32)));
        }
    };
    fill(P.qkv, size_t(P.T) * C, 1.0f);
    fill(P.z, size_t(P.T) * sh.Nv * sh.Dv, 1.0f);
    fill(P.b, size_t(P.T) * sh.Nv, 1.5f);
    fill(P.a, size_t(P.T) * sh.Nv, 1.0f);
    fill(P.conv_w, size_t(C) * sh.K, 0.5f);
    P.A_log.resize(sh.Nv);
    P.dt_bias.resize(sh.Nv);
    P.norm_w.resize(sh.Dv);
    for (auto& x : P.A_log) x = uni(-4.f, 1.f);   // A in [0.018, 2.7]: slow and fast heads
    for (auto& x : P.dt_bias) x = uni(-5.f, 0.f);
    for (auto& x : P.norm_w) x = uni(0.5f, 1.5f);
    fill(P.conv0, size_t(num_slots) * W * C, zero_state ? 0.f : 1.0f);
    fill(P.ssm0, size_t(num_slots) * sh.Nv * sh.Dk * sh.Dv, zero_state ? 0.f : 0.3f);
    if (bf16_state)
        for (auto& x : P.ssm0) x = bf_round(x);
    return P;
}

std::vector<int> row_begins(const Problem& P) {
    std::vector<int> rb(P.lens.size());
    int r = 0;
    for (size_t s = 0; s < P.lens.size(); ++s) {
        rb[s] = r;
        r += P.lens[s];
    }
    return rb;
}

// Double-precision reference; only sequences with check[s] are computed (others leave their state,
// window and rows alone: the caller compares only what was computed).
void reference(const Problem& P, const std::vector<char>& check, bool bf16_state, std::vector<double>& conv,
               std::vector<double>& ssm, std::vector<double>& out) {
    const Shape& sh = P.sh;
    const int C = sh.C(), K = sh.K, W = K - 1, Nk = sh.Nk, Nv = sh.Nv, Dk = sh.Dk, Dv = sh.Dv;
    const int ratio = Nv / Nk, Kdim = Nk * Dk;
    conv.assign(P.conv0.begin(), P.conv0.end());
    ssm.assign(P.ssm0.begin(), P.ssm0.end());
    out.assign(size_t(P.T) * Nv * Dv, 0.0);
    const std::vector<int> rb = row_begins(P);
    for (size_t s = 0; s < P.lens.size(); ++s) {
        if (!check[s]) continue;
        const int n = P.lens[s];
        double* win = conv.data() + size_t(P.slots[s]) * W * C;
        // A deferred sequence computes its rows but leaves the window and state after its first
        // row (MTP verification: the first row is always kept; gdn_commit runs the rest).
        const size_t SS = size_t(Nv) * Dk * Dv;
        std::vector<double> keep_win(P.defer[s] ? size_t(W) * C : 0), keep_ssm(P.defer[s] ? SS : 0);
        std::vector<double> c(size_t(n) * C);
        auto ext = [&](int r, int ch) -> double {
            return r < W ? win[size_t(r) * C + ch] : double(P.qkv[size_t(rb[s] + r - W) * C + ch]);
        };
        if (P.defer[s])
            for (int r = 0; r < W; ++r)
                for (int ch = 0; ch < C; ++ch) keep_win[size_t(r) * C + ch] = ext(std::min(n, 1) + r, ch);
        for (int t = 0; t < n; ++t)
            for (int ch = 0; ch < C; ++ch) {
                double acc = 0;
                for (int j = 0; j < K; ++j) acc += double(P.conv_w[size_t(ch) * K + j]) * ext(t + j, ch);
                c[size_t(t) * C + ch] = acc / (1.0 + std::exp(-acc));
            }
        std::vector<double> nw(size_t(W) * C);
        for (int r = 0; r < W; ++r)
            for (int ch = 0; ch < C; ++ch) nw[size_t(r) * C + ch] = ext(n + r, ch);
        std::copy(nw.begin(), nw.end(), win);

        // Value heads are independent (own state, own output columns): spread over host threads.
        auto head = [&](int h) {
            std::vector<double> q(Dk), k(Dk), delta(Dv), o(Dv);
            const int kh = h / ratio;
            double* S = ssm.data() + (size_t(P.slots[s]) * Nv + h) * Dk * Dv;
            const double A = std::exp(double(P.A_log[h]));
            for (int i = 0; i < n; ++i) {
                const int row = rb[s] + i;
                const double* cr = c.data() + size_t(i) * C;
                double qs = 0, ks = 0;
                for (int e = 0; e < Dk; ++e) {
                    q[e] = cr[kh * Dk + e];
                    k[e] = cr[Kdim + kh * Dk + e];
                    qs += q[e] * q[e];
                    ks += k[e] * k[e];
                }
                const double rq = 1.0 / std::sqrt(qs + 1e-6) / std::sqrt(double(Dk)), rk = 1.0 / std::sqrt(ks + 1e-6);
                for (int e = 0; e < Dk; ++e) {
                    q[e] *= rq;
                    k[e] *= rk;
                }
                const double* v = cr + 2 * Kdim + h * Dv;
                const double beta = 1.0 / (1.0 + std::exp(-double(P.b[size_t(row) * Nv + h])));
                const double x = double(P.a[size_t(row) * Nv + h]) + double(P.dt_bias[h]);
                const double sp = x > 20.0 ? x : std::log1p(std::exp(x));
                const double decay = std::exp(-A * sp);
                for (int e = 0; e < Dk * Dv; ++e) S[e] *= decay;
                for (int vv = 0; vv < Dv; ++vv) {
                    double m = 0;
                    for (int kk = 0; kk < Dk; ++kk) m += S[kk * Dv + vv] * k[kk];
                    delta[vv] = beta * (v[vv] - m);
                }
                for (int kk = 0; kk < Dk; ++kk)
                    for (int vv = 0; vv < Dv; ++vv) S[kk * Dv + vv] += k[kk] * delta[vv];
                if (i == 0 && P.defer[s])
                    for (int e = 0; e < Dk * Dv; ++e)
                        keep_ssm[size_t(h) * Dk * Dv + e] = bf16_state ? bf_round(float(S[e])) : S[e];
                for (int vv = 0; vv < Dv; ++vv) o[vv] = 0;
                for (int kk = 0; kk < Dk; ++kk)
                    for (int vv = 0; vv < Dv; ++vv) o[vv] += S[kk * Dv + vv] * q[kk];
                double ss = 0;
                for (int vv = 0; vv < Dv; ++vv) ss += o[vv] * o[vv];
                const double inv = 1.0 / std::sqrt(ss / Dv + double(sh.eps));
                const float* zr = P.z.data() + size_t(row) * Nv * Dv + size_t(h) * Dv;
                double* orow = out.data() + size_t(row) * Nv * Dv + size_t(h) * Dv;
                for (int vv = 0; vv < Dv; ++vv) {
                    const double zz = zr[vv];
                    orow[vv] = double(P.norm_w[vv]) * o[vv] * inv * (zz / (1.0 + std::exp(-zz)));
                }
            }
            if (bf16_state)
                for (int e = 0; e < Dk * Dv; ++e) S[e] = bf_round(float(S[e]));
        };
        const int nthreads = double(n) * Nv * Dk * Dv > 5e7 ? int(std::max(1u, std::thread::hardware_concurrency())) : 1;
        if (nthreads <= 1) {
            for (int h = 0; h < Nv; ++h) head(h);
        } else {
            std::vector<std::thread> pool;
            std::atomic<int> next{0};
            for (int t = 0; t < nthreads; ++t)
                pool.emplace_back([&] {
                    for (int h; (h = next.fetch_add(1)) < Nv;) head(h);
                });
            for (std::thread& t : pool) t.join();
        }
        if (P.defer[s] && n > 0) {
            if (P.spare[s] >= 0) {  // spare-slot mode: the window and state after the last row
                std::copy(win, win + size_t(W) * C, conv.begin() + size_t(P.spare[s]) * W * C);
                std::copy(ssm.begin() + P.slots[s] * SS, ssm.begin() + (P.slots[s] + 1) * SS,
                          ssm.begin() + P.spare[s] * SS);
            }
            std::copy(keep_win.begin(), keep_win.end(), win);
            std::copy(keep_ssm.begin(), keep_ssm.end(), ssm.begin() + P.slots[s] * SS);
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Device side
// ------------------------------------------------------------------------------------------------
template <typename T>
T* dalloc(size_t n) {
    T* p = nullptr;
    QS_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)));
    return p;
}
template <typename T>
void upload(T* d, const std::vector<T>& h) {
    QS_CUDA_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
}
template <typename T>
std::vector<T> download(const T* d, size_t n) {
    std::vector<T> h(n);
    QS_CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}
void poison(void* d, size_t bytes) { QS_CUDA_CHECK(cudaMemset(d, 0xff, bytes)); }  // 0xffffffff = NaN

// Which recurrence kernel takes which sequence: chunk_min <= 0 every sequence token-serial; 1 every
// sequence chunked; 64 the default split. x3: chunked products in 3xTF32 (else plain TF32).
// cpar: the chunked sequences take the chunk-parallel path (gdn_cp_*.cu), else the one-block-per-
// head kernel (gdn_chunked.cu).
// cols: the state pass's value columns per block (0 = by shape, 32, 64).
// dec: the token-serial sequences' kernel (decode_kernel): 1 the streaming one (gdn_decode.cu), 0 one
// block per (sequence, head) (gdn_serial.cu), -1 by shape (streaming for decode-only batches).
// blocks: the streaming kernel's grid (decode_blocks; 0 = 2 per SM).
// dver: the streaming kernel's version (decode_version; 2 = NOTES.md "GDN decode v2").
// sver: the warp-slice kernel's version (slices_version; 2 = block-shared ring of whole rows, 3 = 2 with
// the stores by whole rows; same bits).
// dec 2: the one-token sequences by warp slices (gdn_decode_slices.cu; bf16 state, Dk = Dv = 64 or
// 128; NOTES.md "GDN decode v5: warp slices"), the rest as -1 (plain decode, mixed) or -1 (spans).
struct Path {
    int chunk_min;
    bool x3;
    bool cpar = false;
    int cols = 0;
    int dec = -1;
    int blocks = 0;
    int ver = 1;  // prefill_version: 2 = bf16 tensor cores (gdn_tc_*.cu; cols 0, 16, 32), 3 = split operands, 4 = fp16,
                  // 5 = 4 with early loads (bit-identical to 4: expect_same_bits), 6 = 5 with the state pass
                  // at 64 columns by shape (cols 0) or forced (cols 64; bit-identical to 5)
    int dver = 1;
    int stages = 0;  // decode_stages (version 2: cp.async stages in use, 0 = all)
    int sver = 1;    // slices_version: the warp-slice kernel's version (2 = block-shared ring of whole rows, 3 = + row stores)
    bool map = false;  // DeviceBatch::gdn_chunks as CudaOps uploads it (the chunk grids' blocks read their chunk)
    // GatedDeltaNetParams::side_stream: 0 one stream; -1 the token-serial kernels on a side stream with
    // the default slice grid; n > 0 the same with n slice blocks (side_blocks).
    int side = 0;
    std::string name() const {
        if (side != 0) {
            Path p = *this;
            p.side = 0;
            return p.name() + "+side" + (side > 0 ? std::to_string(side) : std::string());
        }
        if (map) {
            Path p = *this;
            p.map = false;
            return p.name() + "+map";
        }
        const std::string b = (dver == 2 || sver == 2 ? std::string("-v2") : sver == 3 ? std::string("-v3") : std::string()) +
                              (stages ? "-s" + std::to_string(stages) : std::string()) +
                              (blocks ? "-b" + std::to_string(blocks) : std::string());
        if (dver == 2 && chunk_min <= 0 && dec < 0) return "serial-auto-v2";
        if (ver >= 2)
            return std::string(chunk_min == 1 ? "tc-all" : "tc") + (cols ? std::to_string(cols) : "") +
                   (ver == 3   ? "/v3-bf16x2"
                    : ver == 4 ? "/v4-f16"
                    : ver == 5 ? "/v5-f16e"
                    : ver == 6 ? "/v6-f16w"
                               : "/bf16");
        if (chunk_min <= 0) return dec == 2 ? "slices" + b : dec == 1 ? "stream" + b : dec == 0 ? "serial" : "serial-auto";
        std::string n = cpar ? (chunk_min == 1 ? "cpar-all" : "cpar") : (chunk_min == 1 ? "chunked-all" : "auto");
        if (cpar && cols) n += std::to_string(cols);
        if (dec >= 0) n += dec == 2 ? "+slices" + b : dec == 1 ? "+stream" + b : "+serial";
        else if (dver == 2) n += "+dec-v2";  // by shape, the streaming kernel in version 2
        return n + (x3 ? "/3xtf32" : "/tf32");
    }
};
const Path kSerial{0, true, false, 0, 0}, kStream{0, true, false, 0, 1};
const Path kStream1{0, true, false, 0, 1, 1}, kStream3{0, true, false, 0, 1, 3};  // 1 or 3 persistent blocks
const Path kAutoStream{64, true, false, 0, 1};
const Path kChunkAll{1, true}, kAuto{64, true}, kChunkAllTf32{1, false}, kAutoTf32{64, false};
const Path kCparAll{1, true, true}, kCpar{64, true, true}, kCparAllTf32{1, false, true}, kCparTf32{64, false, true};
const Path kCparAll64{1, true, true, 64}, kCpar32{64, true, true, 32}, kCpar64{64, true, true, 64};
const Path kCpar32Tf32{64, false, true, 32}, kCpar64Tf32{64, false, true, 64};
// The warp-slice kernel for one-token sequences (decode_kernel 2): by occupancy, 1 or 3 persistent
// blocks (every block serves many items: the ring of stages wraps), and beside the chunked kernel.
const Path kSlices{0, true, false, 0, 2}, kSlices1{0, true, false, 0, 2, 1}, kSlices3{0, true, false, 0, 2, 3};
const Path kAutoSlices{64, true, false, 0, 2}, kAutoSlices3{64, true, false, 0, 2, 3};
Path slices_v(Path p, int v) {
    p.sver = v;
    return p;
}
// Versions 2 (slices_version 2: a block-shared ring of whole rows) and 3 (2 with the stores by whole
// rows): the same cases, bit-identical.
const Path kSlicesV2 = slices_v(kSlices, 2), kSlices1V2 = slices_v(kSlices1, 2), kSlices3V2 = slices_v(kSlices3, 2);
const Path kAutoSlicesV2 = slices_v(kAutoSlices, 2), kAutoSlices3V2 = slices_v(kAutoSlices3, 2);
const Path kSlicesV3 = slices_v(kSlices, 3), kSlices1V3 = slices_v(kSlices1, 3), kSlices3V3 = slices_v(kSlices3, 3);
const Path kAutoSlicesV3 = slices_v(kAutoSlices, 3), kAutoSlices3V3 = slices_v(kAutoSlices3, 3);
Path decode_v2(Path p) {
    p.dver = 2;
    return p;
}
// The streaming kernel's version 2 (decode_version 2): forced, with 1 or 3 blocks, and by shape.
const Path kStreamV2 = decode_v2(kStream), kStream1V2 = decode_v2(kStream1), kStream3V2 = decode_v2(kStream3);
const Path kAutoV2 = decode_v2(kAuto), kAutoStreamV2 = decode_v2(kAutoStream);
Path with_stages(Path p, int stages) {
    p.stages = stages;
    return p;
}
// Version 2 on 2 stages (at D = 128 bf16 it has 3): separates the third stage from the rest.
const Path kStreamV2s2 = with_stages(kStreamV2, 2), kStream1V2s2 = with_stages(kStream1V2, 2);
// Prefill version 2 (bf16 operands, fp32 accumulation and state): 1e-2. Each bf16 operand carries a
// relative rounding error up to 2^-9 (~2e-3, ~1e-3 RMS); the products sum them over 64-128 terms
// with random signs and the state pass feeds its bf16-rounded state into the next chunk, so the
// expected normalised error is ~1-4e-3 (FLA's kernels against an fp32 reference: the same order);
// 1e-2 leaves room for that and is still >10x below what a wrong index or a missing barrier gives
// (0.15-1, NOTES.md v1/v2 mutants).
constexpr double kTcTol = 1e-2;
// Version 3 (every bf16 operand split into hi + lo: ~16-bit operands): the GPU tests' fp32 bound,
// 1e-4 (CudaOpsParity.GatedDeltaNetWithStateSlots); the CPU model (gdn_tc_rounding.py) predicts
// ~5e-6, a dropped lo part anywhere ~1e-4 to 1.5e-3 (NOTES.md "v5 accuracy").
constexpr double kTc3Tol = 1e-4;
// Version 4 (fp16 operands: 11-bit significands, 2^-11 relative rounding, 8x finer than bf16; the
// same rounding points as version 2): the model (gdn_tc_rounding.py, all points fp16) predicts
// 3.6e-4 / 4.1e-4 (out / state) at D = 128 and 5.1e-4 / 4.5e-4 at D = 16; the emulator measured
// 4.2e-4-6.3e-4 on its cases (NOTES.md "v4: fp16 operands"). 2e-3: ~3x the largest of those, and
// below what a rounding point left at bf16 adds (model: 1.1-1.7e-3 each, >= 1.6e-3 in total with
// the rest fp16) or one token's gate off in a quarter of the rows (v2 mutant: 1.0e-2).
constexpr double kTc4Tol = 2e-3;
double tol_for(const Path& p) {
    if (p.ver == 2 && p.chunk_min > 0) return kTcTol;
    if (p.ver == 3 && p.chunk_min > 0) return kTc3Tol;
    if (p.ver >= 4 && p.chunk_min > 0) return kTc4Tol;  // 5, 6: version 4's arithmetic
    return p.chunk_min <= 0 ? 1e-5 : p.x3 ? 2e-5 : 5e-3;
}
Path tc_path(int chunk_min, int cols, int ver = 2) {
    Path p{chunk_min, true};
    p.cols = cols;
    p.ver = ver;
    return p;
}
const Path kTc = tc_path(64, 0), kTc16 = tc_path(64, 16), kTc32 = tc_path(64, 32), kTcAll16 = tc_path(1, 16),
           kTcAll32 = tc_path(1, 32);
const Path kTc3 = tc_path(64, 0, 3), kTc3_16 = tc_path(64, 16, 3), kTc3All16 = tc_path(1, 16, 3),
           kTc3All32 = tc_path(1, 32, 3);
const Path kTc4 = tc_path(64, 0, 4), kTc4_16 = tc_path(64, 16, 4), kTc4_32 = tc_path(64, 32, 4),
           kTc4All16 = tc_path(1, 16, 4), kTc4All32 = tc_path(1, 32, 4);
const Path kTc5 = tc_path(64, 0, 5), kTc5_16 = tc_path(64, 16, 5), kTc5_32 = tc_path(64, 32, 5),
           kTc5All16 = tc_path(1, 16, 5), kTc5All32 = tc_path(1, 32, 5);
const Path kTc6 = tc_path(64, 0, 6), kTc6_64 = tc_path(64, 64, 6), kTc6All64 = tc_path(1, 64, 6);
Path with_map(Path p) {
    p.map = true;
    return p;
}
Path with_side(Path p, int side) {
    p.side = side;
    return p;
}
// The lab's side stream and its fork/join events (made on first use, kept for the process).
struct SideStream {
    cudaStream_t stream = nullptr;
    cudaEvent_t fork = nullptr, join = nullptr;
};
const SideStream& side_stream() {
    static SideStream s = [] {
        SideStream n;
        QS_CUDA_CHECK(cudaStreamCreateWithFlags(&n.stream, cudaStreamNonBlocking));
        QS_CUDA_CHECK(cudaEventCreateWithFlags(&n.fork, cudaEventDisableTiming));
        QS_CUDA_CHECK(cudaEventCreateWithFlags(&n.join, cudaEventDisableTiming));
        return n;
    }();
    return s;
}
const Path kTc6Map = with_map(kTc6), kTc6_64Map = with_map(kTc6_64), kTc6All64Map = with_map(kTc6All64);

// The summary table (--cpar): one row per timed (case, path), with that case's checked errors.
struct TableRow {
    std::string name, path;
    double us_total = 0, us_rec = 0, gbs = 0, tflops = 0, err_out = -1, err_state = -1;
    double us_prep = -1, us_state = -1, us_out = -1;  // versions 2-4: each kernel alone
};
std::vector<TableRow> g_table;
struct CaseErr {
    double out = -1, state = -1;
};
std::vector<std::pair<std::string, CaseErr>> g_errs;  // key: case name + "|" + path name
std::vector<std::pair<std::string, std::pair<uint64_t, uint64_t>>> g_hashes;  // same key: out, state bit hashes
void expect_same_bits(const std::string& name, const Path& a, const Path& b);

struct DeviceProblem {
    const Problem* P = nullptr;
    bool bf16 = false;
    float *qkv, *z, *b, *a, *conv_w, *A_log, *dt_bias, *norm_w, *conv, *out;
    void* ssm;
    void* ws;
    int32_t* row_seq;
    DeviceSeq* seqs;
    // The chunk kernels' block maps and chunked-sequence lists (Path::map), made on first use for each
    // threshold (chunk_min).
    struct ChunkMap {
        int chunk_min;
        qs::cuda::GdnChunk* chunks;
        int32_t count;
        int32_t* seqs;
        int32_t seq_count;
        int32_t* short_seqs;  // the serial kernel's list beside the warp slices (fill_gdn_short_seqs)
        int32_t short_count;
    };
    mutable std::vector<ChunkMap> chunk_maps;
    size_t ws_bytes;
    std::vector<DeviceSeq> host_seqs;

    explicit DeviceProblem(const Problem& p, bool bf16_state) : P(&p), bf16(bf16_state) {
        const Shape& sh = p.sh;
        qkv = dalloc<float>(p.qkv.size()); upload(qkv, p.qkv);
        z = dalloc<float>(p.z.size()); upload(z, p.z);
        b = dalloc<float>(p.b.size()); upload(b, p.b);
        a = dalloc<float>(p.a.size()); upload(a, p.a);
        conv_w = dalloc<float>(p.conv_w.size()); upload(conv_w, p.conv_w);
        A_log = dalloc<float>(p.A_log.size()); upload(A_log, p.A_log);
        dt_bias = dalloc<float>(p.dt_bias.size()); upload(dt_bias, p.dt_bias);
        norm_w = dalloc<float>(p.norm_w.size()); upload(norm_w, p.norm_w);
        conv = dalloc<float>(p.conv0.size());
        out = dalloc<float>(size_t(p.T) * sh.Nv * sh.Dv);
        ssm = bf16 ? static_cast<void*>(dalloc<uint16_t>(p.ssm0.size())) : static_cast<void*>(dalloc<float>(p.ssm0.size()));
        // The largest of the prefill versions' workspaces (versions 2, 3 only where Dk, Dv % 8 == 0;
        // 3's is 2's plus the lo arrays).
        ws_bytes = qs::cuda::gdn_workspace_bytes(p.T, sh.C(), sh.Nk, sh.Nv, sh.Dk);
        if (sh.Dk % 8 == 0 && sh.Dv % 8 == 0)
            ws_bytes = std::max(ws_bytes, qs::cuda::gdn_workspace_bytes(p.T, sh.C(), sh.Nk, sh.Nv, sh.Dk, sh.Dv,
                                                                        int64_t(p.lens.size()), 3));
        ws = dalloc<char>(ws_bytes);
        std::vector<int32_t> rs(p.T);
        std::vector<DeviceSeq> ds(p.lens.size());
        const std::vector<int> rb = row_begins(p);
        for (size_t s = 0; s < p.lens.size(); ++s) {
            ds[s] = DeviceSeq{rb[s], p.lens[s], 17, p.slots[s], 0, 0, p.defer[s] ? 1 : 0, p.defer[s] ? p.spare[s] : -1};
            for (int i = 0; i < p.lens[s]; ++i) rs[rb[s] + i] = int32_t(s);
        }
        row_seq = dalloc<int32_t>(rs.size()); upload(row_seq, rs);
        seqs = dalloc<DeviceSeq>(ds.size()); upload(seqs, ds);
        host_seqs = ds;
        reset_state();
    }
    ~DeviceProblem() {
        for (void* p : {(void*)qkv, (void*)z, (void*)b, (void*)a, (void*)conv_w, (void*)A_log, (void*)dt_bias,
                        (void*)norm_w, (void*)conv, (void*)out, ssm, ws, (void*)row_seq, (void*)seqs})
            QS_CUDA_CHECK(cudaFree(p));
        for (auto& m : chunk_maps) {
            QS_CUDA_CHECK(cudaFree(m.chunks));
            QS_CUDA_CHECK(cudaFree(m.seqs));
            QS_CUDA_CHECK(cudaFree(m.short_seqs));
        }
    }
    void reset_state() {
        upload(conv, P->conv0);
        if (bf16) {
            std::vector<uint16_t> h(P->ssm0.size());
            for (size_t i = 0; i < h.size(); ++i) h[i] = f2bf(P->ssm0[i]);
            upload(static_cast<uint16_t*>(ssm), h);
        } else {
            upload(static_cast<float*>(ssm), P->ssm0);
        }
    }
    std::vector<float> state() const {
        if (!bf16) return download(static_cast<const float*>(ssm), P->ssm0.size());
        const std::vector<uint16_t> h = download(static_cast<const uint16_t*>(ssm), P->ssm0.size());
        std::vector<float> f(h.size());
        for (size_t i = 0; i < h.size(); ++i) f[i] = bf2f(h[i]);
        return f;
    }
    ChunkMap chunk_map(int chunk_min) const {
        for (const auto& m : chunk_maps)
            if (m.chunk_min == chunk_min) return m;
        std::vector<qs::cuda::GdnChunk> map(size_t(qs::cuda::gdn_chunk_keys(int64_t(host_seqs.size()), P->T)));
        const int32_t n = qs::cuda::fill_gdn_chunk_map(host_seqs.data(), int32_t(host_seqs.size()), P->T, chunk_min, map.data());
        if (n < 0) {
            std::fprintf(stderr, "gdn_lab: the chunk map refused the lab's batch\n");
            std::exit(1);
        }
        std::vector<int32_t> list(host_seqs.size() + 1);
        const int32_t ns = qs::cuda::fill_gdn_chunked_seqs(host_seqs.data(), int32_t(host_seqs.size()), chunk_min, list.data());
        std::vector<int32_t> shorts(host_seqs.size() + 1);
        const int32_t nsh = qs::cuda::fill_gdn_short_seqs(host_seqs.data(), int32_t(host_seqs.size()), chunk_min, shorts.data());
        ChunkMap m{chunk_min, dalloc<qs::cuda::GdnChunk>(map.size()), n, dalloc<int32_t>(list.size()), ns,
                   dalloc<int32_t>(shorts.size()), nsh};
        upload(m.chunks, map);
        upload(m.seqs, list);
        upload(m.short_seqs, shorts);
        chunk_maps.push_back(m);
        return m;
    }
    GatedDeltaNetParams params(const Path& path) const {
        const Shape& sh = P->sh;
        GatedDeltaNetParams p;
        p.qkv = qkv; p.z = z; p.b = b; p.a = a; p.conv_w = conv_w; p.A_log = A_log; p.dt_bias = dt_bias;
        p.norm_w = norm_w; p.conv_state = conv; p.ssm_state = ssm; p.ssm_bf16 = bf16;
        p.Nk = sh.Nk; p.Nv = sh.Nv; p.Dk = sh.Dk; p.Dv = sh.Dv; p.K = sh.K; p.eps = sh.eps;
        DeviceBatch bt;
        bt.row_seq = row_seq; bt.seqs = seqs; bt.num_tokens = P->T; bt.num_seqs = int32_t(P->lens.size());
        bt.max_seq_tokens = *std::max_element(P->lens.begin(), P->lens.end());
        if (path.map) {  // as CudaOps::begin_forward writes it, for this path's threshold
            const ChunkMap m = chunk_map(path.chunk_min);
            bt.gdn_chunks = m.chunks;
            bt.gdn_chunk_count = m.count;
            bt.gdn_chunk_min = path.chunk_min;
            bt.gdn_chunk_seqs = m.seqs;
            bt.gdn_chunk_seq_count = m.seq_count;
            bt.gdn_short_seqs = m.short_seqs;
            bt.gdn_short_seq_count = m.short_count;
        }
        p.batch = bt;
        p.workspace = ws; p.out = out;
        p.chunk_min_tokens = path.chunk_min;
        p.chunk_tf32x3 = path.x3;
        p.chunk_parallel = path.cpar ? 1 : 0;
        p.chunk_value_cols = path.cols;
        p.decode_kernel = path.dec;
        p.decode_blocks = path.blocks;
        p.decode_version = path.dver;
        p.decode_stages = path.stages;
        p.slices_version = path.sver;
        p.prefill_version = path.ver;
        if (path.side != 0) {
            const SideStream& ss = side_stream();
            p.side_stream = ss.stream;
            p.side_fork = ss.fork;
            p.side_join = ss.join;
            p.side_blocks = path.side > 0 ? path.side : 0;
        }
        return p;
    }
};

struct Err {
    double rel = 0, maxabs = 0;
    size_t bad = 0;  // non-finite values
};
Err compare(const float* got, const double* ref, size_t n) {
    Err e;
    double num = 0, den = 0;
    for (size_t i = 0; i < n; ++i) {
        if (!std::isfinite(got[i])) {
            ++e.bad;
            continue;
        }
        const double d = double(got[i]) - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
        e.maxabs = std::max(e.maxabs, std::fabs(d));
    }
    e.rel = std::sqrt(num / std::max(den, 1e-300));
    return e;
}
// FNV-1a over the raw float bits: a refactor of the kernels can be checked bit for bit by
// comparing these between two runs with the same seed (the emulation is deterministic).
uint64_t bits_hash(const std::vector<float>& v) {
    uint64_t h = 1469598103934665603ull;
    for (float f : v) {
        uint32_t u = 0;
        std::memcpy(&u, &f, sizeof u);
        for (int i = 0; i < 4; ++i) h = (h ^ ((u >> (8 * i)) & 0xffu)) * 1099511628211ull;
    }
    return h;
}

void report(const std::string& what, const Err& e, double tol) {
    const bool ok = e.bad == 0 && e.rel <= tol;
    if (!ok) ++g_failures;
    std::printf("  %-58s rel %.3e  maxabs %.3e  nonfinite %zu  tol %.1e  %s\n", what.c_str(), e.rel, e.maxabs, e.bad, tol,
                ok ? "PASS" : "FAIL");
}


// Runs one call on a fresh copy of the starting state and checks out, windows and states against
// the reference for the sequences in `check` (all when empty).
struct Ref {
    std::vector<char> check;
    std::vector<double> conv, ssm, out;
};
Ref make_ref(const Problem& P, bool bf16, std::vector<char> check = {}) {
    Ref R;
    R.check = check.empty() ? std::vector<char>(P.lens.size(), 1) : check;
    reference(P, R.check, bf16, R.conv, R.ssm, R.out);
    return R;
}

void check_case(const std::string& name, const Problem& P, const Ref& R, bool bf16, const Path& path, double tol_state = -1) {
    const double tol_out = tol_for(path);
    tol_state = std::max(tol_state, tol_out);  // bf16 storage bound, or the path's own bound if larger
    const std::vector<char>& check = R.check;
    const std::vector<double>&rconv = R.conv, &rssm = R.ssm, &rout = R.out;
    DeviceProblem D(P, bf16);
    poison(D.out, size_t(P.T) * P.sh.Nv * P.sh.Dv * sizeof(float));
    poison(D.ws, D.ws_bytes);
    qs::cuda::launch_gated_delta_net(D.params(path), nullptr);
    QS_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> out = download(D.out, size_t(P.T) * P.sh.Nv * P.sh.Dv);
    const std::vector<float> conv = download(D.conv, P.conv0.size());
    const std::vector<float> ssm = D.state();
    // Restrict out to checked rows; windows / states to all slots (unchecked batch slots excluded).
    const Shape& sh = P.sh;
    const size_t OW = size_t(sh.Nv) * sh.Dv, WC = size_t(sh.K - 1) * sh.C(), SS = size_t(sh.Nv) * sh.Dk * sh.Dv;
    std::vector<float> go, gc, gs;
    std::vector<double> ro, rc, rs;
    const std::vector<int> rb = row_begins(P);
    std::vector<char> slot_skip(P.num_slots, 0);
    for (size_t s = 0; s < P.lens.size(); ++s) {
        if (!check[s]) {
            slot_skip[P.slots[s]] = 1;
            continue;
        }
        go.insert(go.end(), out.begin() + rb[s] * OW, out.begin() + (rb[s] + P.lens[s]) * OW);
        ro.insert(ro.end(), rout.begin() + rb[s] * OW, rout.begin() + (rb[s] + P.lens[s]) * OW);
    }
    for (int sl = 0; sl < P.num_slots; ++sl) {
        if (slot_skip[sl]) continue;
        gc.insert(gc.end(), conv.begin() + sl * WC, conv.begin() + (sl + 1) * WC);
        rc.insert(rc.end(), rconv.begin() + sl * WC, rconv.begin() + (sl + 1) * WC);
        gs.insert(gs.end(), ssm.begin() + sl * SS, ssm.begin() + (sl + 1) * SS);
        rs.insert(rs.end(), rssm.begin() + sl * SS, rssm.begin() + (sl + 1) * SS);
    }
    std::string lens;
    // Appended piece by piece: GCC 12 warns falsely (-Wrestrict) on "literal" + std::string&&.
    for (size_t s = 0; s < P.lens.size() && s < 6; ++s) {
        if (s) lens += ',';
        lens += std::to_string(P.lens[s]);
    }
    if (P.lens.size() > 6) {
        lens += ",.. (";
        lens += std::to_string(P.lens.size());
        lens += " seqs)";
    }
    std::printf("case %s [%s, lens %s, %s state, %s]\n", name.c_str(), sh.name, lens.c_str(), bf16 ? "bf16" : "fp32",
                path.name().c_str());
    const Err eo = compare(go.data(), ro.data(), go.size()), es = compare(gs.data(), rs.data(), gs.size());
    report("out", eo, tol_out);
    report("conv windows (all slots)", compare(gc.data(), rc.data(), gc.size()), 1e-6);
    report("ssm states (all slots)", es, tol_state);
    std::printf("  bits out#%016llx conv#%016llx ssm#%016llx\n", (unsigned long long)bits_hash(go),
                (unsigned long long)bits_hash(gc), (unsigned long long)bits_hash(gs));
    g_errs.push_back({name + "|" + path.name(), CaseErr{eo.bad ? INFINITY : eo.rel, es.bad ? INFINITY : es.rel}});
    g_hashes.push_back({name + "|" + path.name(), {bits_hash(go), bits_hash(gs)}});
}

template <typename F>
double time_ms(F&& launch, int reps = 25) {
    return qs::lab::median_event_ms(launch, reps);
}

struct Bytes {
    double state, conv_win, io, ws;  // io: qkv + z + b + a read, out written
};
Bytes count_bytes(const Problem& P, bool bf16) {
    const Shape& sh = P.sh;
    const double ns = double(P.lens.size());
    Bytes B;
    B.state = 2.0 * ns * sh.Nv * sh.Dk * sh.Dv * (bf16 ? 2 : 4);
    B.conv_win = 2.0 * ns * (sh.K - 1) * sh.C() * 4;
    B.io = double(P.T) * (sh.C() + 2.0 * sh.Nv * sh.Dv + 2.0 * sh.Nv) * 4;
    B.ws = 2.0 * P.T * sh.C() * 4;
    return B;
}

void time_case(const std::string& name, const Problem& P, bool bf16, std::vector<Path> paths) {
    DeviceProblem D(P, bf16);
    const Bytes B = count_bytes(P, bf16);
    const double floor_bytes = B.state + B.conv_win + B.io;  // one fused pass
    const double flops = double(P.T) * P.sh.Nv * P.sh.Dk * P.sh.Dv * 6.0;  // recurrent form
    std::printf("timing %s [%s, %zu seqs, %d tokens, %s state]: floor %.1f MB (state %.1f MB) = %.1f us at %.2f TB/s; "
                "recurrent-form %.2f GFLOP\n",
                name.c_str(), P.sh.name, P.lens.size(), P.T, bf16 ? "bf16" : "fp32", floor_bytes / 1e6, B.state / 1e6,
                floor_bytes / (kCopyCeilingGBs * 1e3), kCopyCeilingGBs / 1e3, flops / 1e9);
    // Rotate three copies of the per-token inputs when they are small enough to sit in L2.
    const bool rotate = (B.io + B.ws) < 200e6;
    std::vector<float*> extra;
    std::vector<GatedDeltaNetParams> ps;
    for (const Path& path : paths) {
        GatedDeltaNetParams base = D.params(path);
        std::vector<GatedDeltaNetParams> sets{base};
        if (rotate)
            for (int r = 0; r < 2; ++r) {
                GatedDeltaNetParams q = base;
                float* x = dalloc<float>(P.qkv.size()); upload(x, P.qkv); q.qkv = x; extra.push_back(x);
                float* zz = dalloc<float>(P.z.size()); upload(zz, P.z); q.z = zz; extra.push_back(zz);
                char* w = dalloc<char>(D.ws_bytes); q.workspace = w; extra.push_back(reinterpret_cast<float*>(w));
                float* o = dalloc<float>(size_t(P.T) * P.sh.Nv * P.sh.Dv); q.out = o; extra.push_back(o);
                sets.push_back(q);
            }
        const double t_all = time_ms([&](int i) { qs::cuda::launch_gated_delta_net(sets[i % sets.size()], nullptr); });
        const double t_conv = time_ms([&](int i) { qs::cuda::launch_gdn_conv(sets[i % sets.size()], nullptr); });
        const double t_rec = time_ms([&](int i) { qs::cuda::launch_gdn_recurrence(sets[i % sets.size()], nullptr); });
        QS_CUDA_CHECK(cudaDeviceSynchronize());
        const double conv_bytes = B.conv_win + double(P.T) * P.sh.C() * 4 * 2;
        const double rec_bytes = B.state + B.ws / 2 + double(P.T) * (2.0 * P.sh.Nv * P.sh.Dv + 2.0 * P.sh.Nv) * 4;
        TableRow row{name, path.name(), t_all * 1e3, t_rec * 1e3, floor_bytes / (t_all * 1e6), flops / (t_all * 1e9)};
        if (path.ver >= 2) {  // each of the three kernels alone (gdn_tc_phases.h), on a filled workspace
            double* const us[3] = {&row.us_prep, &row.us_state, &row.us_out};
            for (int ph = 0; ph < 3; ++ph)
                *us[ph] = 1e3 * time_ms([&](int i) { qs::cuda::launch_gdn_tc_phases(sets[i % sets.size()], 1 << ph, nullptr); });
            QS_CUDA_CHECK(cudaDeviceSynchronize());
            // Each kernel's DRAM-side bytes if nothing were reused from L2 (the state pass's W and k̂
            // tiles are read by every value-column block of a head: counted once per block).
            const Shape& sh = P.sh;
            const double T = P.T, ns = double(P.lens.size()), nch = ns + T / 64.0;
            const double pairs = ns * sh.Nv;  // launch_chunked_any's rule (equal lengths here)
            const bool wide = path.ver == 6 && sh.Dv > 32 && pairs * ((sh.Dv + 63) / 64) >= 132;
            const int bv = path.cols ? path.cols : pairs * ((sh.Dv + 31) / 32) <= 132 ? 16 : wide ? 64 : 32;
            const double x = path.ver == 3 ? 2.0 : 1.0;  // version 3: every 16-bit array twice
            const double b_prep = T * (sh.Nk * sh.Dk + sh.Nv * (sh.Dk + sh.Dv) + 2.0 * sh.Nv) * 4 +
                                  x * T * (2.0 * sh.Nk * sh.Dk + sh.Nv * (sh.Dk + sh.Dv)) * 2 + T * sh.Nv * 4;
            const double b_state = x * (double((sh.Dv + bv - 1) / bv) * T * sh.Nv * 2.0 * sh.Dk * 2 + 2.0 * T * sh.Nv * sh.Dv * 2 +
                                        nch * sh.Nv * sh.Dk * sh.Dv * 2) +
                                   B.state;
            const double b_out = x * (T * sh.Nv * (2.0 * sh.Dk + sh.Dv) * 2 + nch * sh.Nv * sh.Dk * sh.Dv * 2) +
                                 T * sh.Nv * (2.0 * sh.Dv + 1) * 4;
            std::printf("  %-12s prep %8.1f us (%5.0f GB/s)  state pass %8.1f us (%5.0f GB/s, %d cols)  output %8.1f us "
                        "(%5.0f GB/s)\n",
                        path.name().c_str(), row.us_prep, b_prep / (row.us_prep * 1e3), row.us_state,
                        b_state / (row.us_state * 1e3), bv, row.us_out, b_out / (row.us_out * 1e3));
        }
        for (const auto& [key, e] : g_errs)
            if (key == name + "|" + path.name()) {
                row.err_out = e.out;
                row.err_state = e.state;
            }
        g_table.push_back(row);
        std::printf("  %-12s total %9.1f us (%6.0f GB/s of floor bytes, %4.1f%% of copy)  conv %8.1f us (%6.0f GB/s)  "
                    "recurrence %9.1f us (%6.0f GB/s, %.2f TFLOP/s)\n",
                    path.name().c_str(), t_all * 1e3, floor_bytes / (t_all * 1e6), 100.0 * floor_bytes / (t_all * 1e6) / kCopyCeilingGBs,
                    t_conv * 1e3, conv_bytes / (t_conv * 1e6), t_rec * 1e3, rec_bytes / (t_rec * 1e6), flops / (t_rec * 1e9));
    }
    for (float* x : extra) QS_CUDA_CHECK(cudaFree(x));
}

// bf16 state storage against fp32 storage on the same inputs: `seqs` sequences of `n` tokens, from
// a zero state (sequence start), either as n decode calls (bf16 rounding after every token, the
// worst case) or as one prefill call (rounding once).
void bf16_drift(const Shape& sh, int seqs, int n, std::mt19937_64& rng, const Path& path) {
    // The full n-token problem supplies the inputs; each decode step uses a 1-token slice of it.
    std::vector<int> lens(seqs, n), slots(seqs);
    for (int s = 0; s < seqs; ++s) slots[s] = (s * 5 + 3) % seqs;
    const Problem P = make_problem(sh, lens, slots, seqs, rng, true, /*zero_state=*/true);
    std::printf("bf16-state drift [%s, %d seqs x %d tokens from a zero state] vs fp32 state (GPU, checked above)\n",
                sh.name, seqs, n);
    const size_t OW = size_t(sh.Nv) * sh.Dv;
    for (int mode = 0; mode < 2; ++mode) {  // 0: n decode steps, 1: one prefill call
        std::vector<float> outs[2], states[2];
        for (int bf = 0; bf < 2; ++bf) {
            if (mode == 1) {
                DeviceProblem D(P, bf == 1);
                poison(D.out, size_t(P.T) * OW * 4);
                qs::cuda::launch_gated_delta_net(D.params(path), nullptr);
                QS_CUDA_CHECK(cudaDeviceSynchronize());
                outs[bf] = download(D.out, size_t(P.T) * OW);
                states[bf] = D.state();
                continue;
            }
            // Decode: a 1-token problem per step sharing the state buffers.
            Problem step = P;
            step.lens.assign(seqs, 1);
            step.T = seqs;
            DeviceProblem D(step, bf == 1);  // holds state + windows for all steps
            outs[bf].assign(size_t(P.T) * OW, NAN);
            const int C = sh.C();
            for (int t = 0; t < n; ++t) {
                std::vector<float> qkv(size_t(seqs) * C), z(size_t(seqs) * OW), b(size_t(seqs) * sh.Nv), a(size_t(seqs) * sh.Nv);
                for (int s = 0; s < seqs; ++s) {
                    const size_t row = size_t(s) * n + t;
                    std::copy_n(P.qkv.begin() + row * C, C, qkv.begin() + size_t(s) * C);
                    std::copy_n(P.z.begin() + row * OW, OW, z.begin() + size_t(s) * OW);
                    std::copy_n(P.b.begin() + row * sh.Nv, sh.Nv, b.begin() + size_t(s) * sh.Nv);
                    std::copy_n(P.a.begin() + row * sh.Nv, sh.Nv, a.begin() + size_t(s) * sh.Nv);
                }
                upload(D.qkv, qkv); upload(D.z, z); upload(D.b, b); upload(D.a, a);
                poison(D.out, size_t(seqs) * OW * 4);
                qs::cuda::launch_gated_delta_net(D.params(path), nullptr);
                const std::vector<float> o = download(D.out, size_t(seqs) * OW);
                for (int s = 0; s < seqs; ++s)
                    std::copy_n(o.begin() + size_t(s) * OW, OW, outs[bf].begin() + (size_t(s) * n + t) * OW);
            }
            QS_CUDA_CHECK(cudaDeviceSynchronize());
            states[bf] = D.state();
        }
        std::vector<double> ro(outs[0].begin(), outs[0].end()), rs(states[0].begin(), states[0].end());
        // Error growth: first and last quarter of the tokens.
        std::vector<float> oq[2];
        std::vector<double> rq[2];
        for (int s = 0; s < seqs; ++s)
            for (int t = 0; t < n; ++t) {
                const int qtr = t < n / 4 ? 0 : t >= 3 * n / 4 ? 1 : -1;
                if (qtr < 0) continue;
                const size_t o0 = (size_t(s) * n + t) * OW;
                oq[qtr].insert(oq[qtr].end(), outs[1].begin() + o0, outs[1].begin() + o0 + OW);
                rq[qtr].insert(rq[qtr].end(), ro.begin() + o0, ro.begin() + o0 + OW);
            }
        const char* m = mode == 0 ? "decode steps" : "one prefill call";
        const Err eq0 = compare(oq[0].data(), rq[0].data(), oq[0].size());
        const Err eq1 = compare(oq[1].data(), rq[1].data(), oq[1].size());
        std::printf("  %-16s out first quarter rel %.3e, last quarter rel %.3e\n", m, eq0.rel, eq1.rel);
        report(std::string(m) + ": out, all tokens (bound 5e-2)", compare(outs[1].data(), ro.data(), ro.size()), 5e-2);
        report(std::string(m) + ": final state (bound 5e-2)", compare(states[1].data(), rs.data(), rs.size()), 5e-2);
    }
}

// --cpar: the chunk-parallel path at the real shape against the reference and the one-block-per-head
// kernel, then the issue's two prefill shapes timed, and a summary table. Sized for ~1 minute.
int run_cpar(std::mt19937_64& rng) {
    const double kStateBf16Tol = 2e-3;
    {  // varlen mix: decode rows, short and long sequences, a chunk boundary +1, non-zero states
        const Problem P = make_problem(kReal, {1, 5, 300, 2, 64, 1, 1500, 129}, {5, 0, 3, 7, 1, 6, 8, 2}, 9, rng, false);
        const Ref R = make_ref(P, false);
        for (const Path& path : {kAuto, kCpar32, kCpar64, kCparTf32}) check_case("mixed", P, R, false, path);
        const Problem Q = make_problem(kReal, {3, 130, 1, 2, 700}, {4, 1, 0, 6, 2}, 7, rng, true);
        check_case("mixed", Q, make_ref(Q, true), true, kCpar, kStateBf16Tol);
    }
    std::vector<int> pre_lens(16, 1024), pre_slots(16);
    for (int i = 0; i < 16; ++i) pre_slots[i] = (i * 7 + 3) % 16;
    std::vector<char> pre_check(16, 0);
    pre_check[0] = pre_check[11] = 1;
    const Problem P16 = make_problem(kReal, pre_lens, pre_slots, 16, rng, false);
    {
        const Ref R = make_ref(P16, false, pre_check);
        for (const Path& path : {kAuto, kCpar32, kCpar64, kCpar32Tf32, kCpar64Tf32}) check_case("prefill16x1024", P16, R, false, path);
    }
    const Problem P1 = make_problem(kReal, {16384}, {0}, 1, rng, false);
    {
        const Ref R = make_ref(P1, false);
        for (const Path& path : {kAuto, kCpar32, kCpar64, kCpar32Tf32}) check_case("prefill1x16384", P1, R, false, path);
    }
    std::printf("\n");
    time_case("prefill16x1024", P16, false, {kAuto, kCpar32, kCpar64, kCpar32Tf32, kCpar64Tf32});
    time_case("prefill1x16384", P1, false, {kAuto, kCpar32, kCpar64, kCpar32Tf32});
    std::printf("\n| case | path | total us | recurrence us | GB/s (floor bytes) | TFLOP/s (recurrent form) | out err | state err |\n"
                "| --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for (const TableRow& r : g_table)
        std::printf("| %s | %s | %.1f | %.1f | %.0f | %.2f | %.2e | %.2e |\n", r.name.c_str(), r.path.c_str(), r.us_total,
                    r.us_rec, r.gbs, r.tflops, r.err_out, r.err_state);
    std::printf("\n%s: %d failure(s) (cpar)\n", g_failures ? "FAIL" : "PASS", g_failures);
    return g_failures ? 1 : 0;
}

// --tc: prefill versions 2 (bf16 tensor cores, gdn_tc_*.cu) and 3 (split operands) against today's
// default path (kAuto: by shape, v1 chunked or chunk-parallel 3xTF32) on the same inputs at the real
// shape: a varlen mix (fp32 and bf16 state; both state-pass widths there), 16 × 1,024, 1 × 16,384
// and 64 × 256 against the reference, then timed, then a table. Bounds: kTcTol (1e-2) for version
// 2, kTc3Tol (1e-4) for 3, 2e-5 for 3xTF32. ~2 minutes on the H200 (the reference is the slow part).
int run_tc(std::mt19937_64& rng) {
    const double kStateBf16Tol = 2e-3;
    {  // varlen mix: decode rows, short and long sequences, a chunk boundary +1, non-zero states
        const Problem P = make_problem(kReal, {1, 5, 300, 2, 64, 1, 1500, 129}, {5, 0, 3, 7, 1, 6, 8, 2}, 9, rng, false);
        const Ref R = make_ref(P, false);
        for (const Path& path : {kAuto, kTc16, kTc32, kTc3_16, kTc3, kTc4_16, kTc4_32, kTc5_16, kTc5_32, kTc6_64})
            check_case("mixed", P, R, false, path);
        expect_same_bits("mixed", kTc4_16, kTc5_16);
        expect_same_bits("mixed", kTc4_32, kTc5_32);
        expect_same_bits("mixed", kTc5_32, kTc6_64);
        const Problem Q = make_problem(kReal, {3, 130, 1, 2, 700}, {4, 1, 0, 6, 2}, 7, rng, true);
        const Ref RQ = make_ref(Q, true);
        for (const Path& path : {kAuto, kTc, kTc3, kTc4, kTc5, kTc6_64})
            check_case("mixed/bf16", Q, RQ, true, path, kStateBf16Tol);
        expect_same_bits("mixed/bf16", kTc4, kTc5);
        expect_same_bits("mixed/bf16", kTc5, kTc6_64);
    }
    struct Big {
        const char* name;
        int seqs, n;
    };
    const Big bigs[] = {{"prefill16x1024", 16, 1024}, {"prefill1x16384", 1, 16384}, {"prefill64x256", 64, 256}};
    std::vector<Problem> probs;
    for (const Big& b : bigs) {
        std::vector<int> lens(size_t(b.seqs), b.n), slots(size_t(b.seqs));
        for (int i = 0; i < b.seqs; ++i) slots[size_t(i)] = (i * 7 + 3) % b.seqs;
        std::vector<char> check(size_t(b.seqs), 0);
        check[0] = 1;
        if (b.seqs > 11) check[11] = 1;
        if (b.seqs > 40) check[size_t(b.seqs - 1)] = 1;
        probs.push_back(make_problem(kReal, lens, slots, b.seqs, rng, false));
        const Ref R = make_ref(probs.back(), false, check);
        for (const Path& path : {kAuto, kTc, kTc3, kTc4, kTc5, kTc6}) check_case(b.name, probs.back(), R, false, path);
        expect_same_bits(b.name, kTc4, kTc5);
        expect_same_bits(b.name, kTc5, kTc6);
    }
    std::printf("\n");
    for (size_t i = 0; i < probs.size(); ++i)
        time_case(bigs[i].name, probs[i], false, {kAuto, kTc, kTc3, kTc4, kTc5, kTc6});
    std::printf("\n| case | path | total us (conv included) | recurrence us | prep / state pass / output us | GB/s (floor "
                "bytes) | TFLOP/s (recurrent form, total) | out err | state err |\n| --- | --- | --- | --- | --- | --- | --- | "
                "--- | --- |\n");
    for (const TableRow& r : g_table)
        std::printf("| %s | %s | %.1f | %.1f | %.1f / %.1f / %.1f | %.0f | %.2f | %.2e | %.2e |\n", r.name.c_str(),
                    r.path.c_str(), r.us_total, r.us_rec, r.us_prep, r.us_state, r.us_out, r.gbs, r.tflops, r.err_out,
                    r.err_state);
    std::printf("targets (issue 14 item 2, total with conv): 16x1024 <= 1300 us, 1x16384 <= 1600 us "
                "(FLA chunk_gated_delta_rule 1359 / 1665 us)\n");
    std::printf("\n%s: %d failure(s) (tc)\n", g_failures ? "FAIL" : "PASS", g_failures);
    return g_failures ? 1 : 0;
}

// --tc-speed: versions 2 and 4 alone, for a quick timing of a kernel change: the varlen mix checked
// against the reference (both state-pass widths), then 16 × 1,024, 1 × 16,384 and 64 × 256 timed
// (kernel by kernel too) without a reference check.
int run_tc_speed(std::mt19937_64& rng) {
    const Problem P = make_problem(kReal, {1, 5, 300, 2, 64, 1, 1500, 129}, {5, 0, 3, 7, 1, 6, 8, 2}, 9, rng, false);
    const Ref R = make_ref(P, false);
    for (const Path& path : {kTc16, kTc32, kTc4_16, kTc4_32, kTc5_16, kTc5_32, kTc6_64, kTc6_64Map})
        check_case("mixed", P, R, false, path);
    expect_same_bits("mixed", kTc4_16, kTc5_16);
    expect_same_bits("mixed", kTc4_32, kTc5_32);
    expect_same_bits("mixed", kTc5_32, kTc6_64);
    expect_same_bits("mixed", kTc6_64, kTc6_64Map);
    const int bigs[3][2] = {{16, 1024}, {1, 16384}, {64, 256}};
    for (const auto& b : bigs) {
        const size_t ns = size_t(b[0]);
        std::vector<int> lens(ns, b[1]), slots(ns, 0);
        for (int i = 0; i < b[0]; ++i) slots[size_t(i)] = (i * 7 + 3) % b[0];
        const Problem Q = make_problem(kReal, lens, slots, b[0], rng, false);
        time_case("prefill" + std::to_string(b[0]) + "x" + std::to_string(b[1]), Q, false, {kTc, kTc4, kTc5, kTc6, kTc6Map});
    }
    // Serving steps at 1,024 and 512 residents: 16 prompt chunks of 1,024 rows beside the decoding sequences.
    for (int decodes : {1024, 512}) {
        std::vector<int> lens(16, 1024);
        lens.resize(size_t(16 + decodes), 1);
        std::vector<int> slots(lens.size());
        for (size_t i = 0; i < slots.size(); ++i) slots[i] = int((i * 7 + 3) % slots.size());
        const Problem Q = make_problem(kReal, lens, slots, int(lens.size()), rng, true);  // bf16 state, as served
        const int sms = qs::cuda::sm_count();
        time_case("mixed16x1024+" + std::to_string(decodes) + "x1", Q, true,
                  {kTc6, kTc6Map, with_side(kTc6Map, -1), with_side(kTc6Map, sms), with_side(kTc6Map, sms / 2),
                   with_side(kTc6Map, sms / 4)});
    }
    std::printf("\n| case | path | total us (conv included) | recurrence us | prep / state pass / output us |\n| --- | --- | --- "
                "| --- | --- |\n");
    for (const TableRow& r : g_table)
        std::printf("| %s | %s | %.1f | %.1f | %.1f / %.1f / %.1f |\n", r.name.c_str(), r.path.c_str(), r.us_total, r.us_rec,
                    r.us_prep, r.us_state, r.us_out);
    std::printf("\n%s: %d failure(s) (tc-speed)\n", g_failures ? "FAIL" : "PASS", g_failures);
    return g_failures ? 1 : 0;
}

// Version 2 of the streaming kernel does version 1's arithmetic in the same order: its out and
// state bits must equal version 1's on the same case (a failure otherwise).
void expect_same_bits(const std::string& name, const Path& a, const Path& b) {
    const std::pair<uint64_t, uint64_t>*ha = nullptr, *hb = nullptr;
    for (const auto& [key, h] : g_hashes) {
        if (key == name + "|" + a.name()) ha = &h;
        if (key == name + "|" + b.name()) hb = &h;
    }
    const bool ok = a.name() != b.name() && ha && hb && *ha == *hb;  // two distinct runs, same bits
    if (!ok) ++g_failures;
    std::printf("  %s: %s and %s bit-identical (out and state): %s\n", name.c_str(), a.name().c_str(), b.name().c_str(),
                ok ? "PASS" : "FAIL");
}

// Decode-only batches (every sequence 1 token, or a few: MTP verification), slots out of order in a
// larger slot table with non-zero states and windows: the streaming kernel (chosen by shape, and
// forced with 1 and 3 persistent blocks: every block serves many items, the pipeline wraps around
// its stages) against the one-block-per-head kernel, fp32 and bf16 state, every generic shape;
// verification spans with defer_state; spans of 8 (the by-shape limit) and 9 tokens.
void decode_quick_cases(std::mt19937_64& rng, double tol_state_bf16) {
    for (const Shape* sh : {&kTiny, &kOdd32, &kOddMix, &kOdd36}) {
        const Problem P = make_problem(*sh, {1, 1, 1, 1, 1, 1}, {5, 0, 3, 7, 1, 6}, 9, rng, false);
        const Ref R = make_ref(P, false);
        for (const Path& path : {kAuto, kSerial, kStream1, kStream3, kStream1V2, kStream3V2, kStream1V2s2})
            check_case("decode", P, R, false, path);
        expect_same_bits("decode", kStream3, kStream3V2);
        const Problem Q = make_problem(*sh, {1, 1, 1, 1}, {2, 4, 0, 3}, 5, rng, true);
        const Ref RQ = make_ref(Q, true);
        for (const Path& path : {kAuto, kStream1, kSerial, kAutoV2, kStream1V2, kStream1V2s2})
            check_case("decode/bf16", Q, RQ, true, path, tol_state_bf16);
        expect_same_bits("decode/bf16", kStream1, kStream1V2s2);
        expect_same_bits("decode/bf16", kAuto, kAutoV2);
        expect_same_bits("decode/bf16", kStream1, kStream1V2);
    }
    for (const Shape* sh : {&kTiny, &kOdd36}) {  // verify-like: 1-3 tokens per sequence (< K-1 too)
        const Problem P = make_problem(*sh, {2, 1, 3, 1}, {3, 0, 4, 1}, 6, rng, false);
        const Ref R = make_ref(P, false);
        for (const Path& path : {kAuto, kStream3, kStream3V2}) check_case("verify", P, R, false, path);
        expect_same_bits("verify", kStream3, kStream3V2);
        const Problem Q = make_problem(*sh, {2, 1, 3, 1}, {3, 0, 4, 1}, 6, rng, true);
        const Ref RQ = make_ref(Q, true);
        for (const Path& path : {kAuto, kAutoV2}) check_case("verify/bf16", Q, RQ, true, path, tol_state_bf16);
        expect_same_bits("verify/bf16", kAuto, kAutoV2);
        // MTP verification: deferred spans write state and window after their first row only.
        for (bool bf16 : {false, true}) {
            Problem V = make_problem(*sh, {3, 1, 2, 3, 1}, {4, 0, 5, 2, 1}, 7, rng, bf16);
            V.defer = {1, 0, 1, 1, 0};
            const Ref RV = make_ref(V, bf16);
            for (const Path& path : {kAuto, kStream1, kSerial, kStream1V2})
                check_case("defer", V, RV, bf16, path, bf16 ? tol_state_bf16 : -1);
            expect_same_bits("defer", kStream1, kStream1V2);
            // Spare-slot mode: the state and window after the last row also go into a spare slot
            // (free slots 3, 6, 7, 8 of 9); one deferred span without a spare.
            Problem X = make_problem(*sh, {2, 1, 2, 4, 1}, {4, 0, 5, 2, 1}, 9, rng, bf16);
            X.defer = {1, 0, 1, 1, 0};
            X.spare = {6, -1, -1, 3, -1};
            const Ref RX = make_ref(X, bf16);
            for (const Path& path : {kAuto, kStream1, kSerial, kStream1V2})
                check_case("spare", X, RX, bf16, path, bf16 ? tol_state_bf16 : -1);
            expect_same_bits("spare", kStream1, kStream1V2);
        }
    }
    {  // spans of 8 tokens (by shape: streaming) and 9 (by shape: one block per head; forced: streaming)
        const Problem P = make_problem(kOdd36, {8, 1, 9, 2}, {1, 3, 0, 2}, 5, rng, true);
        const Ref R = make_ref(P, true);
        for (const Path& path : {kAuto, kStream, kAutoV2, kStreamV2}) check_case("spans8-9", P, R, true, path, tol_state_bf16);
        expect_same_bits("spans8-9", kStream, kStreamV2);
        const Problem Q = make_problem(kTiny, {8, 2, 8}, {2, 0, 1}, 4, rng, false);
        check_case("spans8", Q, make_ref(Q, false), false, kAuto);
    }
}

// The warp-slice kernel (decode_kernel 2; bf16 state, Dk = Dv = 64 or 128) against the reference:
// plain decode batches (slots out of order, non-zero states) by occupancy and with 1 or 3 blocks
// (the ring of stages wraps around many items); one-token MTP spans with defer_state and spare slots;
// spans of 2-3 (by shape: the other kernels) and mixed batches where it serves the one-token
// sequences beside gdn_serial.cu (2 .. 63 tokens) and the chunked kernel; the real shape.
void slices_quick_cases(std::mt19937_64& rng, double tol_state_bf16) {
    for (const Shape* sh : {&kTiny, &kReal}) {
        const bool real = sh == &kReal;
        const Problem Q = real ? make_problem(*sh, {1, 1, 1}, {2, 0, 3}, 4, rng, true)
                               : make_problem(*sh, {1, 1, 1, 1, 1, 1}, {5, 0, 3, 7, 1, 6}, 9, rng, true);
        const Ref RQ = make_ref(Q, true);
        for (const Path& path : {kSlices, kSlices1, kSlices3, kSlicesV2, kSlices1V2, kSlices3V2, kSlicesV3, kSlices1V3, kSlices3V3})
            check_case("slices/decode", Q, RQ, true, path, tol_state_bf16);
        for (const Path& path : {kSlicesV2, kSlices1V2, kSlices3V2, kSlicesV3, kSlices1V3, kSlices3V3})
            expect_same_bits("slices/decode", kSlices, path);
        if (real) continue;
        Problem V = make_problem(*sh, {1, 1, 1, 1, 1}, {4, 0, 5, 2, 1}, 9, rng, true);
        V.defer = {1, 0, 1, 1, 0};
        V.spare = {6, -1, -1, 3, -1};
        const Ref RV = make_ref(V, true);
        for (const Path& path : {kSlices, kSlices3, kSlicesV2, kSlices3V2, kSlicesV3, kSlices3V3})
            check_case("slices/spare", V, RV, true, path, tol_state_bf16);
        expect_same_bits("slices/spare", kSlices, kSlices3V2);
        expect_same_bits("slices/spare", kSlices, kSlices3V3);
        const Problem S = make_problem(*sh, {2, 1, 3, 1}, {3, 0, 4, 1}, 6, rng, true);
        check_case("slices/spans", S, make_ref(S, true), true, kSlices, tol_state_bf16);
        const Problem M = make_problem(*sh, {1, 70, 1, 3, 1, 65, 2}, {7, 0, 3, 5, 1, 6, 2}, 9, rng, true);
        const Ref RM = make_ref(M, true);
        for (const Path& path : {kAutoSlices, kAutoSlices3, kAutoSlicesV2, kAutoSlices3V2, kAutoSlicesV3, kAutoSlices3V3})
            check_case("slices/mixed", M, RM, true, path, tol_state_bf16);
        expect_same_bits("slices/mixed", kAutoSlices, kAutoSlices3V2);
        expect_same_bits("slices/mixed", kAutoSlices, kAutoSlices3V3);
    }
}

// --decode: the issue's decode shapes (real model, 1 / 64 / 512 sequences of 1 token, fp32 and
// bf16 state): the one-block-per-head kernel, the streaming kernel (version 1, today's default for
// bf16 state), its version 2 and (bf16) the warp-slice kernel against the reference (512: the streaming ones only, every 4th
// sequence checked, to stay near a minute), version 2's bits against version 1's, then timed, then
// two tables (every path; version 1 against version 2).
int run_decode(std::mt19937_64& rng) {
    const double kStateBf16Tol = 2e-3;
    for (int ver : {1, 2})
        for (bool bf16 : {true, false}) {
            int stages = 0;
            const int per_sm = qs::cuda::gdn_decode_stream_plan(128, bf16, ver, &stages);
            std::printf("streaming kernel v%d, D 128, %s state: %d cp.async stages, %d blocks per SM resident%s\n", ver,
                        bf16 ? "bf16" : "fp32", stages, per_sm,
                        per_sm < 0 ? " (unknown: emulation)" : per_sm < 2 ? " (expected 2: the grid assumes it)" : "");
        }
    for (int nseq : {512, 64, 1}) {  // the largest first: a run cut short still has it
        std::vector<int> lens(size_t(nseq), 1), slots(size_t(nseq + 3));
        for (int i = 0; i < nseq + 3; ++i) slots[size_t(i)] = i;
        std::shuffle(slots.begin(), slots.end(), rng);  // 3 slots stay outside the batch
        slots.resize(size_t(nseq));
        const bool big = nseq > 64;
        std::vector<char> check(size_t(nseq), 1);
        if (big)
            for (int s = 0; s < nseq; ++s) check[size_t(s)] = s % 4 == 0;
        for (bool bf16 : {false, true}) {
            const std::string name = "decode" + std::to_string(nseq) + (bf16 ? "/bf16" : "/fp32");
            const Problem P = make_problem(kReal, lens, slots, nseq + 3, rng, bf16);
            const Ref R = make_ref(P, bf16, check);
            const std::vector<Path> checked =
                big ? std::vector<Path>{kStream, kStreamV2} : std::vector<Path>{kSerial, kStream, kStreamV2};
            for (const Path& path : checked) check_case(name, P, R, bf16, path, bf16 ? kStateBf16Tol : -1);
            if (bf16) check_case(name, P, R, bf16, kStreamV2s2, kStateBf16Tol);  // version 2 on 2 of its 3 stages
            if (bf16) check_case(name, P, R, bf16, kSlices, kStateBf16Tol);      // warp slices (decode_kernel 2)
            if (bf16) check_case(name, P, R, bf16, kSlicesV2, kStateBf16Tol);    // its version 2 (block-shared ring)
            if (bf16) check_case(name, P, R, bf16, kSlicesV3, kStateBf16Tol);    // and 3 (+ stores by whole rows)
            if (bf16) expect_same_bits(name, kSlices, kSlicesV2);
            if (bf16) expect_same_bits(name, kSlices, kSlicesV3);
            expect_same_bits(name, kStream, kStreamV2);
            if (bf16) expect_same_bits(name, kStream, kStreamV2s2);
            time_case(name, P, bf16, bf16 ? std::vector<Path>{kSerial, kStream, kStreamV2, kStreamV2s2, kSlices, kSlicesV2, kSlicesV3}
                                          : std::vector<Path>{kSerial, kStream, kStreamV2});
        }
    }
    std::printf("\n| case | path | total us (conv + recurrence) | recurrence us | GB/s (floor bytes / total) | %% of %.2f TB/s | "
                "out err | state err |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n",
                kCopyCeilingGBs / 1e3);
    for (const TableRow& r : g_table)
        std::printf("| %s | %s | %.1f | %.1f | %.0f | %.1f | %.2e | %.2e |\n", r.name.c_str(), r.path.c_str(), r.us_total,
                    r.us_rec, r.gbs, 100.0 * r.gbs / kCopyCeilingGBs, r.err_out, r.err_state);
    // Version 1 against version 2 of the streaming kernel, same inputs (conv + recurrence).
    // (v2 on 2 stages: bf16 only; "-" for fp32, whose tile has one stage either way.)
    std::printf("\n| case | stream v1 us | stream v2 us | v2 on 2 stages us | v1 GB/s | v2 GB/s | v2 %% of %.2f TB/s | "
                "v2 / v1 time |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n",
                kCopyCeilingGBs / 1e3);
    for (const TableRow& r1 : g_table) {
        if (r1.path != kStream.name()) continue;
        const TableRow *r2 = nullptr, *r3 = nullptr;
        for (const TableRow& r : g_table) {
            if (r.name == r1.name && r.path == kStreamV2.name()) r2 = &r;
            if (r.name == r1.name && r.path == kStreamV2s2.name()) r3 = &r;
        }
        if (!r2) continue;
        const std::string s2 = r3 ? std::to_string(r3->us_total).substr(0, std::to_string(r3->us_total).find('.') + 2) : "-";
        std::printf("| %s | %.1f | %.1f | %s | %.0f | %.0f | %.1f | %.3f |\n", r1.name.c_str(), r1.us_total, r2->us_total,
                    s2.c_str(), r1.gbs, r2->gbs, 100.0 * r2->gbs / kCopyCeilingGBs, r2->us_total / r1.us_total);
    }
    std::printf("\n%s: %d failure(s) (decode)\n", g_failures ? "FAIL" : "PASS", g_failures);
    return g_failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
    // Arguments: [--quick] [seed]. --quick: the small-shape correctness cases only (no real shape,
    // no timing), as run by the host emulation (bench/kernels/emu/run_emu.sh).
    std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress visible when logged to a file
    bool quick = false, quick_real = false, quick_cpar = false, quick_decode = false, cpar = false, decode = false;
    bool quick_slices = false;
    bool tc = false, quick_tc = false, tc_speed = false;
    int only_ver = 0;  // --quick-tc --ver N: that prefill version's cases alone (the inputs stay the same)
    uint64_t seed = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--quick") == 0)
            quick = true;
        else if (std::strcmp(argv[i], "--quick-real") == 0)
            quick_real = true;
        else if (std::strcmp(argv[i], "--cpar") == 0)
            cpar = true;
        else if (std::strcmp(argv[i], "--decode") == 0)
            decode = true;
        else if (std::strcmp(argv[i], "--quick-decode") == 0)
            quick_decode = true;
        else if (std::strcmp(argv[i], "--quick-slices") == 0)
            quick_slices = true;
        else if (std::strcmp(argv[i], "--quick-cpar") == 0)
            quick_cpar = true;
        else if (std::strcmp(argv[i], "--tc") == 0)
            tc = true;
        else if (std::strcmp(argv[i], "--quick-tc") == 0)
            quick_tc = true;
        else if (std::strcmp(argv[i], "--tc-speed") == 0)
            tc_speed = true;
        else if (std::strcmp(argv[i], "--ver") == 0 && i + 1 < argc)
            only_ver = std::atoi(argv[++i]);
        else
            seed = std::strtoull(argv[i], nullptr, 10);
    }
    std::printf("gdn_lab seed %llu\n", (unsigned long long)seed);
    std::mt19937_64 rng(seed);
    cudaDeviceProp prop;
    QS_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("device %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);

    const double kStateBf16Tol = 2e-3;
    const std::vector<Path> paths{kSerial, kChunkAll, kAuto,        kChunkAllTf32, kCparAll,
                                  kCpar,   kCparAllTf32, kCparAll64, kStream};

    if (cpar) return run_cpar(rng);
    if (tc) return run_tc(rng);
    if (tc_speed) return run_tc_speed(rng);
    if (quick_tc) {  // prefill versions 2, 3 and 4 alone, small shapes (for the emulation)
        // --ver 5 runs version 4 too, --ver 6 version 5: each must equal the other bit for bit
        // (expect_same_bits). Version 6 runs with 64 columns forced (by shape these small batches take 16 / 32).
        auto on = [&](const Path& path) {
            return only_ver == 0 || path.ver == only_ver || (only_ver == 5 && path.ver == 4) ||
                   (only_ver == 6 && path.ver == 5);
        };
        const bool v5 = only_ver == 0 || only_ver == 5, v6 = only_ver == 0 || only_ver == 6;
        for (const Shape* sh : {&kTiny, &kOddMix}) {
            const Problem P = make_problem(*sh, {1, 5, 130, 2, 64, 1}, {5, 0, 3, 7, 1, 6}, 9, rng, false);
            const Ref R = make_ref(P, false);
            const std::string name = std::string("mixed/") + sh->name;
            for (const Path& path : {kTc16, kTcAll32, kTc3_16, kTc3All32, kTc4_16, kTc4All32, kTc5_16, kTc5All32, kTc6_64,
                                     kTc6All64, kTc6_64Map, kTc6All64Map})
                if (on(path)) check_case(name, P, R, false, path);
            if (v5) {
                expect_same_bits(name, kTc4_16, kTc5_16);
                expect_same_bits(name, kTc4All32, kTc5All32);
            }
            if (v6) {
                expect_same_bits(name, kTc5_16, kTc6_64);
                expect_same_bits(name, kTc5All32, kTc6All64);
                expect_same_bits(name, kTc6_64, kTc6_64Map);  // the block map: the same chunks, the same bits
                expect_same_bits(name, kTc6All64, kTc6All64Map);
            }
        }
        if (v6) {
            // Beside the warp slices (bf16 state, Dk = Dv = 64): one-row, short (serial kernel) and
            // chunked sequences; with the map the serial kernel's grid is the short-sequence list.
            const Problem S = make_problem(kTiny, {1, 5, 130, 2, 64, 1, 17}, {5, 0, 3, 7, 1, 6, 2}, 9, rng, true);
            const Ref RS = make_ref(S, true);
            const Path side = with_side(kTc6_64Map, -1), side1 = with_side(kTc6_64Map, 1);
            for (const Path& path : {kTc6_64, kTc6_64Map, side, side1}) check_case("slices-mix", S, RS, true, path, kStateBf16Tol);
            expect_same_bits("slices-mix", kTc6_64, kTc6_64Map);
            expect_same_bits("slices-mix", kTc6_64Map, side);  // concurrent kernels, disjoint outputs
            expect_same_bits("slices-mix", kTc6_64Map, side1);
        }
        const Problem P = make_problem(kOdd32, {3, 70, 1, 2}, {4, 1, 0, 2}, 5, rng, true);
        const Ref R = make_ref(P, true);
        for (const Path& path : {kTcAll16, kTc3All16, kTc4All16, kTc5All16, kTc6All64})
            if (on(path)) check_case("mixed", P, R, true, path, kStateBf16Tol);
        if (v5) expect_same_bits("mixed", kTc4All16, kTc5All16);
        if (v6) expect_same_bits("mixed", kTc5All16, kTc6All64);
        // The GPU test's tiny shape and its third batch's lengths (a 900-token prompt among a decode
        // row and chunk boundaries +-1), fp32 state: that test's bound is 1e-4 (v2 failed it).
        const Problem Q = make_problem(kTest16, {1, 900, 65, 63}, {2, 0, 3, 1}, 4, rng, false);
        const Ref RQ = make_ref(Q, false);
        for (const Path& path : {kTc, kTc3, kTc4, kTc5, kTc6_64, kTc6_64Map})
            if (on(path)) check_case("test-tiny", Q, RQ, false, path);
        if (v5) expect_same_bits("test-tiny", kTc4, kTc5);
        if (v6) expect_same_bits("test-tiny", kTc5, kTc6_64);
        if (v6) expect_same_bits("test-tiny", kTc6_64, kTc6_64Map);
        std::printf("\n%s: %d failure(s) (quick-tc)\n", g_failures ? "FAIL" : "PASS", g_failures);
        return g_failures ? 1 : 0;
    }
    if (decode) return run_decode(rng);
    if (quick_slices) {  // the warp-slice decode kernel alone (for the emulation)
        slices_quick_cases(rng, kStateBf16Tol);
        std::printf("\n%s: %d failure(s) (quick-slices)\n", g_failures ? "FAIL" : "PASS", g_failures);
        return g_failures ? 1 : 0;
    }
    if (quick_decode) {  // the token-serial kernels alone, small shapes (for the emulation)
        decode_quick_cases(rng, kStateBf16Tol);
        slices_quick_cases(rng, kStateBf16Tol);
        const Problem P = make_problem(kOdd36, {1, 5, 70, 2, 1}, {5, 0, 3, 2, 1}, 6, rng, false);
        const Ref R = make_ref(P, false);
        for (const Path& path : {kStream, kStream1, kAutoStream}) check_case("mixed", P, R, false, path);
        std::printf("\n%s: %d failure(s) (quick-decode)\n", g_failures ? "FAIL" : "PASS", g_failures);
        return g_failures ? 1 : 0;
    }
    if (quick_cpar) {  // the chunk-parallel path alone, small shapes (for the emulation)
        for (const Shape* sh : {&kTiny, &kOddMix}) {
            const Problem P = make_problem(*sh, {1, 5, 130, 2, 64, 1}, {5, 0, 3, 7, 1, 6}, 9, rng, false);
            const Ref R = make_ref(P, false);
            for (const Path& path : {kCpar, kCparAll64}) check_case("mixed", P, R, false, path);
        }
        const Problem P = make_problem(kOdd32, {3, 70, 1, 2}, {4, 1, 0, 2}, 5, rng, true);
        check_case("mixed", P, make_ref(P, true), true, kCparAllTf32, kStateBf16Tol);
        std::printf("\n%s: %d failure(s) (quick-cpar)\n", g_failures ? "FAIL" : "PASS", g_failures);
        return g_failures ? 1 : 0;
    }
    if (quick_real) {  // one small real-shape batch (for the emulation: serial and chunked, 128 × 128)
        const Problem P = make_problem(kReal, {2, 70, 1}, {3, 0, 1}, 4, rng, false);
        const Ref R = make_ref(P, false);
        check_case("mixed", P, R, false, kAuto);
        check_case("mixed", P, R, false, kCpar);
        check_case("mixed", P, R, false, kAutoStream);
        // Decode-only (the streaming kernel by shape), fp32 and bf16 state.
        const Problem Q = make_problem(kReal, {1, 1, 1}, {2, 0, 3}, 4, rng, false);
        check_case("decode", Q, make_ref(Q, false), false, kAuto);
        const Problem Qb = make_problem(kReal, {1, 1}, {1, 0}, 3, rng, true);
        check_case("decode", Qb, make_ref(Qb, true), true, kAuto, kStateBf16Tol);
        std::printf("\n%s: %d failure(s) (quick-real)\n", g_failures ? "FAIL" : "PASS", g_failures);
        return g_failures ? 1 : 0;
    }
    if (quick) {
        for (const Shape* sh : {&kTiny, &kOdd32, &kOddMix}) {
            const Problem P = make_problem(*sh, {1, 5, 130, 2, 64, 1}, {5, 0, 3, 7, 1, 6}, 9, rng, false);
            const Ref R = make_ref(P, false);
            for (const Path& path : paths) check_case("mixed", P, R, false, path);
        }
        const Problem P = make_problem(kTiny, {3, 70, 1, 2}, {4, 1, 0, 2}, 5, rng, true);
        const Ref R = make_ref(P, true);
        for (const Path& path : paths) check_case("mixed", P, R, true, path, kStateBf16Tol);
        // No sequence longer than K-1: no conv row part, the sequence part does every row.
        const Problem Q = make_problem(kTiny, {1, 3, 2, 1, 1}, {2, 4, 0, 3, 1}, 6, rng, false);
        check_case("short", Q, make_ref(Q, false), false, kAuto);
        decode_quick_cases(rng, kStateBf16Tol);
        std::printf("\n%s: %d failure(s) (quick)\n", g_failures ? "FAIL" : "PASS", g_failures);
        return g_failures ? 1 : 0;
    }

    // Correctness: mixed batches (decode rows, a short sequence n < K-1, prefill chunks), slots out of order.
    for (const Shape* sh : {&kTiny, &kOdd32, &kOddMix, &kReal}) {
        const Problem P = make_problem(*sh, {1, 5, 300, 2, 64, 1}, {5, 0, 3, 7, 1, 6}, 9, rng, false);
        const Ref R = make_ref(P, false);
        for (const Path& path : paths) check_case("mixed", P, R, false, path);
    }
    for (const Shape* sh : {&kTiny, &kReal}) {
        const Problem P = make_problem(*sh, {3, 130, 1, 2, 65}, {4, 1, 0, 6, 2}, 7, rng, true);
        const Ref R = make_ref(P, true);
        for (const Path& path : paths) check_case("mixed", P, R, true, path, kStateBf16Tol);
    }
    {  // No sequence longer than K-1 (decode-like, some with 2-3 tokens): no conv row part.
        const Problem P = make_problem(kReal, {1, 3, 2, 1, 1}, {2, 4, 0, 3, 1}, 6, rng, false);
        check_case("short", P, make_ref(P, false), false, kAuto);
    }
    // Decode batch of 512 sequences (real shape), slots shuffled.
    std::vector<int> dec_lens(512, 1), dec_slots(512);
    for (int i = 0; i < 512; ++i) dec_slots[i] = i;
    std::shuffle(dec_slots.begin(), dec_slots.end(), rng);
    {
        const Problem P = make_problem(kReal, dec_lens, dec_slots, 512, rng, false);
        const Ref R = make_ref(P, false);
        for (const Path& path : {kSerial, kAuto}) check_case("decode512", P, R, false, path);
        const Problem Q = make_problem(kReal, dec_lens, dec_slots, 512, rng, true);
        const Ref RQ = make_ref(Q, true);
        for (const Path& path : {kSerial, kAuto}) check_case("decode512", Q, RQ, true, path, kStateBf16Tol);
    }
    // Prefill 16 x 1024 (real shape): two sequences checked against the reference.
    std::vector<int> pre_lens(16, 1024), pre_slots(16);
    for (int i = 0; i < 16; ++i) pre_slots[i] = (i * 7 + 3) % 16;
    std::vector<char> pre_check(16, 0);
    pre_check[0] = pre_check[11] = 1;
    {
        const Problem P = make_problem(kReal, pre_lens, pre_slots, 16, rng, false);
        const Ref R = make_ref(P, false, pre_check);
        for (const Path& path : {kSerial, kAuto, kAutoTf32, kCpar, kCparTf32}) check_case("prefill16x1024", P, R, false, path);
    }
    bf16_drift(kReal, 8, 256, rng, kAuto);

    // Timing.
    std::printf("\n");
    {
        const Problem P = make_problem(kReal, dec_lens, dec_slots, 512, rng, false);
        time_case("decode512", P, false, {kSerial, kAuto});
        const Problem Q = make_problem(kReal, dec_lens, dec_slots, 512, rng, true);
        time_case("decode512", Q, true, {kSerial, kAuto});
    }
    {
        const Problem P = make_problem(kReal, pre_lens, pre_slots, 16, rng, false);
        time_case("prefill16x1024", P, false, {kSerial, kAuto, kAutoTf32, kCpar, kCparTf32});
        const Problem Q = make_problem(kReal, {4096}, {0}, 1, rng, false);
        time_case("prefill1x4096", Q, false, {kSerial, kAuto, kAutoTf32, kCpar, kCparTf32});
    }
    std::printf("\n%s: %d failure(s)\n", g_failures ? "FAIL" : "PASS", g_failures);
    return g_failures ? 1 : 0;
}
