// Lab for the gated attention kernels (src/backend/cuda/attention_kernels.cu): correctness against
// a CPU reference with the maths of CpuOps::gated_attention (src/backend/cpu/cpu_attention.cpp:
// fp32 q/k norm + RoPE in the CPU's operation order, K/V rounded to the cache dtype, attention in
// double here), then timings at the real model's decode and prefill shapes.
// Build (repo root):
//   nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -Isrc -Xcompiler -fopenmp bench/kernels/attention_lab.cu src/backend/cuda/attention_kernels.cu -o build-gpu/attention_lab -lgomp
// Run: build-gpu/attention_lab [seed] [--no-timing | --small]     (exit code 1 on any FAIL)
//
// Tolerances. out: the kernels round q and the softmax weights p to bf16 (bf16 cache) or f16 (fp8
// cache; the fp8 values are exact in f16) before the tensor-core products, as flash attention does;
// the reference keeps them in fp32/double. A relative rounding of 2^-9 (bf16) on q moves each score
// by ~1e-3 and each weight by ~1e-3 relative; expected ‖out−ref‖/‖ref‖ ≈ 1e-3 (bf16), ≈ 3e-4 (f16):
// bounds 6e-3 (bf16) and 2e-3 (fp8). cache: written entries must equal the reference rounded to the
// dtype except for rare 1-ulp flips where the fp32 k (same op order; only the sum of squares and
// sincosf differ in the last bit) sits on a rounding boundary: ≤ 0.1 % of entries, each ≤ 1 ulp;
// every entry not written this step must keep its bytes (poison included).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "backend/cuda/attention_kernels.h"
#include "backend/cuda/cuda_check.h"
#include "core/dtype.h"  // header-only bf16 helpers (round to nearest even)

using namespace qs;
using namespace qs::cuda;

namespace {

// ---- fp8 e4m3 on the host: copies of core/dtype.cpp (not linked here) ----------------------
float fp8_to_f32(uint8_t b) {
    const uint32_t sign = b & 0x80u, exp = (b >> 3) & 0xfu, man = b & 0x7u;
    if (exp == 15 && man == 7) return std::nanf("");
    const float v = exp == 0 ? std::ldexp(float(man), -9) : std::ldexp(1.0f + float(man) / 8.0f, int(exp) - 7);
    return sign ? -v : v;
}
uint8_t f32_to_fp8(float f) {
    if (std::isnan(f)) return 0x7f;
    const uint8_t sign = std::signbit(f) ? 0x80 : 0;
    const float a = std::fabs(f);
    if (a >= 448.0f) return uint8_t(sign | 0x7e);
    if (a < std::ldexp(1.0f, -6)) return uint8_t(sign | uint8_t(std::nearbyint(a * 512.0f)));
    int e;
    std::frexp(a, &e);
    int exp = e - 1;
    float r = std::nearbyint(std::ldexp(a, 3 - exp));
    if (r >= 16.0f) { r = 8.0f; exp += 1; }
    uint8_t bits = uint8_t(((exp + 7) << 3) | (int(r) - 8));
    if (bits > 0x7e) bits = 0x7e;
    return uint8_t(sign | bits);
}
float round_kv(float x, DeviceKvDtype t) {
    return t == DeviceKvDtype::kBF16 ? round_to_bf16(x) : fp8_to_f32(f32_to_fp8(x));
}
size_t esize(DeviceKvDtype t) { return t == DeviceKvDtype::kBF16 ? 2 : 1; }
const char* dname(DeviceKvDtype t) { return t == DeviceKvDtype::kBF16 ? "bf16" : "fp8"; }

// ---- CPU reference pieces (cpu_basic.cpp rms_norm_zc_row, cpu_attention.cpp apply_rope) -----
void rms_norm_zc_row(float* x, const float* w, int64_t n, float eps) {
    float ss = 0.0f;
    for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
    const float inv = 1.0f / std::sqrt(ss / float(n) + eps);
    for (int64_t i = 0; i < n; ++i) x[i] = x[i] * inv * (1.0f + w[i]);
}
void apply_rope(float* x, int64_t rotary_dim, int32_t pos, double theta) {
    const int64_t half = rotary_dim / 2;
    for (int64_t i = 0; i < half; ++i) {
        const float inv_freq = float(1.0 / std::pow(theta, double(2 * i) / double(rotary_dim)));
        const float angle = float(pos) * inv_freq;
        const float c = std::cos(angle), s = std::sin(angle);
        const float x1 = x[i], x2 = x[i + half];
        x[i] = x1 * c - x2 * s;
        x[i + half] = x2 * c + x1 * s;
    }
}

struct Shape {
    const char* name;
    int Hq, Hkv, D, rot, bs;
    double theta;
    float eps;
};
struct SeqSpec {
    int start, n;  // tokens already cached, rows in this forward
};

// Host batch: pages handed out from a shuffled pool (non-contiguous), extra pages left unused.
struct HostBatch {
    std::vector<SeqSpec> specs;
    std::vector<int32_t> positions, row_seq, block_tables;
    std::vector<DeviceSeq> seqs;
    int T = 0, max_n = 0, num_blocks = 0;
};
HostBatch make_batch(const Shape& sh, const std::vector<SeqSpec>& specs, std::mt19937_64& rng) {
    HostBatch b;
    b.specs = specs;
    int pages = 0;
    for (const SeqSpec& s : specs) pages += (s.start + s.n + sh.bs - 1) / sh.bs;
    b.num_blocks = pages + pages / 8 + 3;
    std::vector<int32_t> pool(size_t(b.num_blocks));
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng);
    int next = 0;
    for (size_t i = 0; i < specs.size(); ++i) {
        const SeqSpec& s = specs[i];
        DeviceSeq d{};
        d.row_begin = b.T;
        d.num_tokens = s.n;
        d.start_pos = s.start;
        d.state_slot = int32_t(i);
        d.block_table_begin = int32_t(b.block_tables.size());
        d.num_blocks = (s.start + s.n + sh.bs - 1) / sh.bs;
        for (int p = 0; p < d.num_blocks; ++p) b.block_tables.push_back(pool[size_t(next++)]);
        for (int r = 0; r < s.n; ++r) {
            b.positions.push_back(s.start + r);
            b.row_seq.push_back(int32_t(i));
        }
        b.seqs.push_back(d);
        b.T += s.n;
        b.max_n = std::max(b.max_n, s.n);
    }
    return b;
}

template <typename T>
T* dev_upload(const std::vector<T>& h) {
    T* d = nullptr;
    QS_CUDA_CHECK(cudaMalloc(&d, std::max<size_t>(h.size(), 1) * sizeof(T)));
    if (!h.empty()) QS_CUDA_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}

struct DeviceBatchBufs {
    int32_t *positions = nullptr, *row_seq = nullptr, *block_tables = nullptr;
    DeviceSeq* seqs = nullptr;
    DeviceBatch view(const HostBatch& b) const {
        DeviceBatch d;
        d.positions = positions;
        d.row_seq = row_seq;
        d.seqs = seqs;
        d.block_tables = block_tables;
        d.num_tokens = b.T;
        d.num_seqs = int32_t(b.seqs.size());
        d.max_seq_tokens = b.max_n;
        return d;
    }
    void upload(const HostBatch& b) {
        positions = dev_upload(b.positions);
        row_seq = dev_upload(b.row_seq);
        block_tables = dev_upload(b.block_tables);
        seqs = dev_upload(b.seqs);
    }
    void free_all() {
        cudaFree(positions);
        cudaFree(row_seq);
        cudaFree(block_tables);
        cudaFree(seqs);
    }
};

std::vector<float> randn(size_t n, std::mt19937_64& rng, float scale = 1.0f) {
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
}
std::vector<float> randu(size_t n, std::mt19937_64& rng, float lo, float hi) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
}

// One correctness case: random inputs, cache prefilled for positions < start, poisoned elsewhere.
// use_graph: the launch is captured into a CUDA graph while the batch buffers hold a decoy batch
// (other positions and pages), then the real batch is copied in and the graph replayed.
bool run_case(const char* label, const Shape& sh, DeviceKvDtype dt, const std::vector<SeqSpec>& specs,
              std::mt19937_64& rng, bool use_graph = false) {
    const HostBatch b = make_batch(sh, specs, rng);
    const int T = b.T, Hq = sh.Hq, Hkv = sh.Hkv, D = sh.D, G = Hq / Hkv;
    const size_t slot_elems = size_t(Hkv) * D;
    const size_t cache_elems = size_t(b.num_blocks) * sh.bs * slot_elems;

    // Cache mirror (values as stored) and the raw device bytes; NaN poison where nothing is cached.
    std::vector<float> kc(cache_elems, std::nanf("")), vc(cache_elems, std::nanf(""));
    for (size_t si = 0; si < b.seqs.size(); ++si) {
        const DeviceSeq& s = b.seqs[si];
        for (int p = 0; p < s.start_pos; ++p) {
            const size_t slot = size_t(b.block_tables[size_t(s.block_table_begin + p / sh.bs)]) * sh.bs + p % sh.bs;
            std::vector<float> kr = randn(slot_elems, rng, 1.2f), vr = randn(slot_elems, rng);
            for (size_t e = 0; e < slot_elems; ++e) {
                kc[slot * slot_elems + e] = round_kv(kr[e], dt);
                vc[slot * slot_elems + e] = round_kv(vr[e], dt);
            }
        }
    }
    const size_t es = esize(dt);
    auto to_raw = [&](const std::vector<float>& vals) {
        std::vector<uint8_t> raw(vals.size() * es);
        for (size_t i = 0; i < vals.size(); ++i) {
            if (dt == DeviceKvDtype::kBF16) {
                const uint16_t bits = f32_to_bf16(vals[i]).bits;
                std::memcpy(&raw[2 * i], &bits, 2);
            } else {
                raw[i] = f32_to_fp8(vals[i]);
            }
        }
        return raw;
    };
    auto from_raw = [&](const uint8_t* r) {
        if (dt == DeviceKvDtype::kBF16) {
            uint16_t bits;
            std::memcpy(&bits, r, 2);
            return bf16_to_f32(bf16{bits});
        }
        return fp8_to_f32(*r);
    };
    const std::vector<uint8_t> k_raw0 = to_raw(kc), v_raw0 = to_raw(vc);

    // Inputs.
    const std::vector<float> qg = randn(size_t(T) * Hq * 2 * D, rng, 1.5f);
    const std::vector<float> k = randn(size_t(T) * Hkv * D, rng, 2.0f);
    const std::vector<float> v = randn(size_t(T) * Hkv * D, rng, 1.0f);
    const std::vector<float> qn = randu(size_t(D), rng, -0.5f, 1.5f);
    const std::vector<float> kn = randu(size_t(D), rng, -0.5f, 1.0f);

    // ---- GPU
    float *d_qg = dev_upload(qg), *d_k = dev_upload(k), *d_v = dev_upload(v), *d_qn = dev_upload(qn),
          *d_kn = dev_upload(kn);
    uint8_t *d_kc = dev_upload(k_raw0), *d_vc = dev_upload(v_raw0);
    float* d_out = nullptr;
    QS_CUDA_CHECK(cudaMalloc(&d_out, size_t(T) * Hq * D * sizeof(float)));
    QS_CUDA_CHECK(cudaMemset(d_out, 0xff, size_t(T) * Hq * D * sizeof(float)));  // NaN poison
    const size_t ws_bytes = attention_workspace_bytes(T, Hq, D, kAttentionMaxSplits);
    void* d_ws = nullptr;
    if (ws_bytes) {
        QS_CUDA_CHECK(cudaMalloc(&d_ws, ws_bytes));
        QS_CUDA_CHECK(cudaMemset(d_ws, 0xff, ws_bytes));
    }
    DeviceBatchBufs bufs;
    GatedAttentionParams p;
    p.qg = d_qg;
    p.k = d_k;
    p.v = d_v;
    p.q_norm_w = d_qn;
    p.k_norm_w = d_kn;
    p.k_cache = d_kc;
    p.v_cache = d_vc;
    p.kv_dtype = dt;
    p.Hq = Hq;
    p.Hkv = Hkv;
    p.D = D;
    p.rotary_dim = sh.rot;
    p.block_size = sh.bs;
    p.rope_theta = sh.theta;
    p.eps = sh.eps;
    p.workspace = d_ws;
    p.max_splits = kAttentionMaxSplits;
    p.out = d_out;
    cudaStream_t stream;
    QS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    if (use_graph) {
        // Decoy: same T / num_seqs / max_n, every sequence shifted to start at 0 (other contexts,
        // other page counts), then the real batch is copied into the same buffers.
        HostBatch decoy = b;
        for (size_t i = 0; i < decoy.seqs.size(); ++i)
            for (int r = 0; r < decoy.seqs[i].num_tokens; ++r) decoy.positions[size_t(decoy.seqs[i].row_begin + r)] = r;
        bufs.upload(decoy);
        p.batch = bufs.view(decoy);
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        QS_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
        launch_gated_attention(p, stream);
        QS_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
        QS_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
        QS_CUDA_CHECK(cudaMemcpy(bufs.positions, b.positions.data(), b.positions.size() * 4, cudaMemcpyHostToDevice));
        QS_CUDA_CHECK(cudaGraphLaunch(exec, stream));
        QS_CUDA_CHECK(cudaStreamSynchronize(stream));
        QS_CUDA_CHECK(cudaGraphExecDestroy(exec));
        QS_CUDA_CHECK(cudaGraphDestroy(graph));
    } else {
        bufs.upload(b);
        p.batch = bufs.view(b);
        launch_gated_attention(p, stream);
        QS_CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    QS_CUDA_CHECK(cudaGetLastError());
    std::vector<float> out(size_t(T) * Hq * D);
    std::vector<uint8_t> k_raw(k_raw0.size()), v_raw(v_raw0.size());
    QS_CUDA_CHECK(cudaMemcpy(out.data(), d_out, out.size() * 4, cudaMemcpyDeviceToHost));
    QS_CUDA_CHECK(cudaMemcpy(k_raw.data(), d_kc, k_raw.size(), cudaMemcpyDeviceToHost));
    QS_CUDA_CHECK(cudaMemcpy(v_raw.data(), d_vc, v_raw.size(), cudaMemcpyDeviceToHost));

    // ---- Reference: store k/v (CPU maths), then attention in double over the rounded cache.
    std::vector<char> written(size_t(b.num_blocks) * sh.bs, 0);
    for (size_t si = 0; si < b.seqs.size(); ++si) {
        const DeviceSeq& s = b.seqs[si];
        for (int i = 0; i < s.num_tokens; ++i) {
            const int row = s.row_begin + i, pos = b.positions[size_t(row)];
            const size_t slot = size_t(b.block_tables[size_t(s.block_table_begin + pos / sh.bs)]) * sh.bs + pos % sh.bs;
            written[slot] = 1;
            for (int h = 0; h < Hkv; ++h) {
                std::vector<float> kh(k.begin() + (size_t(row) * Hkv + h) * D, k.begin() + (size_t(row) * Hkv + h + 1) * D);
                rms_norm_zc_row(kh.data(), kn.data(), D, sh.eps);
                apply_rope(kh.data(), sh.rot, pos, sh.theta);
                for (int j = 0; j < D; ++j) {
                    kc[(slot * Hkv + h) * D + j] = round_kv(kh[size_t(j)], dt);
                    vc[(slot * Hkv + h) * D + j] = round_kv(v[(size_t(row) * Hkv + h) * D + j], dt);
                }
            }
        }
    }
    std::vector<double> ref(out.size());
    const double scale = 1.0 / std::sqrt(double(D));
#pragma omp parallel for schedule(dynamic, 4)
    for (int64_t rh = 0; rh < int64_t(T) * Hq; ++rh) {
        const int row = int(rh / Hq), h = int(rh % Hq), kvh = h / G;
        const DeviceSeq& s = b.seqs[size_t(b.row_seq[size_t(row)])];
        const int pos = b.positions[size_t(row)];
        const float* src = qg.data() + (size_t(row) * Hq + h) * 2 * D;
        std::vector<float> q(src, src + D);
        rms_norm_zc_row(q.data(), qn.data(), D, sh.eps);
        apply_rope(q.data(), sh.rot, pos, sh.theta);
        std::vector<double> sc(size_t(pos) + 1), o(size_t(D), 0.0);
        double mx = -INFINITY;
        for (int p2 = 0; p2 <= pos; ++p2) {
            const size_t slot = size_t(b.block_tables[size_t(s.block_table_begin + p2 / sh.bs)]) * sh.bs + p2 % sh.bs;
            const float* kk = kc.data() + (slot * Hkv + kvh) * D;
            double acc = 0.0;
            for (int j = 0; j < D; ++j) acc += double(q[size_t(j)]) * double(kk[j]);
            sc[size_t(p2)] = acc * scale;
            mx = std::max(mx, sc[size_t(p2)]);
        }
        double den = 0.0;
        for (double& x : sc) den += (x = std::exp(x - mx));
        for (int p2 = 0; p2 <= pos; ++p2) {
            const size_t slot = size_t(b.block_tables[size_t(s.block_table_begin + p2 / sh.bs)]) * sh.bs + p2 % sh.bs;
            const float* vv = vc.data() + (slot * Hkv + kvh) * D;
            const double w = sc[size_t(p2)] / den;
            for (int j = 0; j < D; ++j) o[size_t(j)] += w * double(vv[j]);
        }
        for (int j = 0; j < D; ++j) {
            const double gt = double(src[D + j]);
            ref[size_t(rh) * D + size_t(j)] = o[size_t(j)] / (1.0 + std::exp(-gt));
        }
    }

    // ---- Compare out.
    double num = 0.0, den = 0.0, maxabs = 0.0;
    size_t nans = 0;
    for (size_t i = 0; i < out.size(); ++i) {
        if (!std::isfinite(out[i])) {
            ++nans;
            continue;
        }
        const double d = double(out[i]) - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
        maxabs = std::max(maxabs, std::fabs(d));
    }
    const double err = std::sqrt(num / std::max(den, 1e-300));
    const double tol = dt == DeviceKvDtype::kBF16 ? 6e-3 : 2e-3;
    const bool out_ok = nans == 0 && err < tol;

    // ---- Compare the cache: written entries within one ulp of the rounded reference (rare
    // flips only), all other bytes unchanged.
    size_t n_written = 0, flips = 0, bad = 0, changed = 0;
    double cnum = 0.0, cden = 0.0;
    for (size_t slot = 0; slot < written.size(); ++slot) {
        for (size_t e = 0; e < slot_elems; ++e) {
            const size_t idx = slot * slot_elems + e;
            for (int kv = 0; kv < 2; ++kv) {
                const std::vector<uint8_t>& raw = kv ? v_raw : k_raw;
                const std::vector<uint8_t>& raw0 = kv ? v_raw0 : k_raw0;
                if (!written[slot]) {
                    if (std::memcmp(&raw[idx * es], &raw0[idx * es], es) != 0) ++changed;
                    continue;
                }
                ++n_written;
                const float gv = from_raw(&raw[idx * es]);
                const float rv = (kv ? vc : kc)[idx];
                if (!std::isfinite(gv)) {
                    ++bad;
                    continue;
                }
                cnum += double(gv - rv) * double(gv - rv);
                cden += double(rv) * double(rv);
                if (gv != rv) {
                    ++flips;
                    const float ulp = dt == DeviceKvDtype::kBF16 ? std::ldexp(std::fabs(rv), -7)
                                                                 : std::ldexp(std::fabs(rv), -3) + std::ldexp(1.0f, -9);
                    if (std::fabs(gv - rv) > ulp * 1.001f) ++bad;
                }
            }
        }
    }
    const double cerr = std::sqrt(cnum / std::max(cden, 1e-300));
    const bool cache_ok = bad == 0 && changed == 0 && double(flips) <= std::max(2.0, 1e-3 * double(n_written));
    const bool ok = out_ok && cache_ok;
    std::printf("%-5s %-34s %-4s T=%-5d seqs=%-4zu | out err %.2e max %.2e nan %zu (tol %.0e) | cache err %.2e "
                "flips %zu/%zu bad %zu untouched-changed %zu | %s\n",
                ok ? "PASS" : "FAIL", label, dname(dt), T, b.seqs.size(), err, maxabs, nans, tol, cerr, flips,
                n_written, bad, changed, use_graph ? "graph" : "direct");

    cudaFree(d_qg);
    cudaFree(d_k);
    cudaFree(d_v);
    cudaFree(d_qn);
    cudaFree(d_kn);
    cudaFree(d_kc);
    cudaFree(d_vc);
    cudaFree(d_out);
    if (d_ws) cudaFree(d_ws);
    bufs.free_all();
    QS_CUDA_CHECK(cudaStreamDestroy(stream));
    return ok;
}

// ---- Conversion conformance: GPU cvt (the kernels' to_cache) vs the host copies of dtype.cpp.
__global__ void convert_kernel(const float* in, uint8_t* f8, uint16_t* b16, size_t n) {
    const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    f8[i] = __nv_fp8_e4m3(in[i]).__x;
    const __nv_bfloat16 h = __float2bfloat16_rn(in[i]);
    uint16_t u;
    memcpy(&u, &h, 2);
    b16[i] = u;
}
bool conversion_check(std::mt19937_64& rng) {
    std::vector<float> xs;
    std::uniform_int_distribution<uint32_t> bits;
    for (int i = 0; i < (1 << 22); ++i) {  // arbitrary finite floats
        float f;
        const uint32_t u = bits(rng);
        std::memcpy(&f, &u, 4);
        if (std::isfinite(f)) xs.push_back(f);
    }
    std::uniform_real_distribution<float> lg(-12.0f, 9.5f);
    for (int i = 0; i < (1 << 22); ++i) xs.push_back((i & 1 ? -1.0f : 1.0f) * std::exp2(lg(rng)));  // fp8 range
    for (int c = 0; c < 0x7e; ++c) {  // fp8 midpoints (ties) and their neighbours
        const float a = fp8_to_f32(uint8_t(c)), b2 = fp8_to_f32(uint8_t(c + 1)), mid = 0.5f * (a + b2);
        for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
            xs.push_back(x);
            xs.push_back(-x);
        }
    }
    for (float x : {448.0f, 449.0f, 463.9f, 464.0f, 480.0f, 1e6f, 0.0f, -0.0f, 1e-30f}) {
        xs.push_back(x);
        xs.push_back(-x);
    }
    for (int i = 0; i < (1 << 20); ++i) {  // bf16 ties: low 16 bits exactly 0x8000
        uint32_t u = (bits(rng) & 0x7f7f0000u) | 0x8000u;
        float f;
        std::memcpy(&f, &u, 4);
        xs.push_back(f);
    }
    const size_t n = xs.size();
    float* d_in = dev_upload(xs);
    uint8_t* d_f8;
    uint16_t* d_b16;
    QS_CUDA_CHECK(cudaMalloc(&d_f8, n));
    QS_CUDA_CHECK(cudaMalloc(&d_b16, n * 2));
    convert_kernel<<<unsigned((n + 255) / 256), 256>>>(d_in, d_f8, d_b16, n);
    QS_CUDA_CHECK_LAUNCH();
    std::vector<uint8_t> f8(n);
    std::vector<uint16_t> b16(n);
    QS_CUDA_CHECK(cudaMemcpy(f8.data(), d_f8, n, cudaMemcpyDeviceToHost));
    QS_CUDA_CHECK(cudaMemcpy(b16.data(), d_b16, n * 2, cudaMemcpyDeviceToHost));
    size_t bad8 = 0, bad16 = 0;
    for (size_t i = 0; i < n; ++i) {
        if (f8[i] != f32_to_fp8(xs[i])) {
            if (bad8 < 4) std::printf("  fp8 mismatch x=%a gpu=%02x cpu=%02x\n", xs[i], f8[i], f32_to_fp8(xs[i]));
            ++bad8;
        }
        if (b16[i] != f32_to_bf16(xs[i]).bits) ++bad16;
    }
    cudaFree(d_in);
    cudaFree(d_f8);
    cudaFree(d_b16);
    const bool ok = bad8 == 0 && bad16 == 0;
    std::printf("%-5s conversions: %zu floats, fp8 mismatches %zu, bf16 mismatches %zu\n", ok ? "PASS" : "FAIL", n, bad8,
                bad16);
    return ok;
}

// ---- Timing ---------------------------------------------------------------------------------
__global__ void fill_cache_kernel(uint8_t* c, size_t bytes, uint32_t seed, int fp8) {
    // Finite random values in [-3, 3), rounded to the cache dtype.
    const size_t n = fp8 ? bytes : bytes / 2;
    for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
        uint32_t h = uint32_t(i) * 2654435761u ^ seed;
        h ^= h >> 13;
        h *= 0x5bd1e995u;
        h ^= h >> 15;
        const float x = float(h >> 8) * (6.0f / 16777216.0f) - 3.0f;
        if (fp8) {
            c[i] = __nv_fp8_e4m3(x).__x;
        } else {
            const __nv_bfloat16 b = __float2bfloat16_rn(x);
            memcpy(c + 2 * i, &b, 2);
        }
    }
}

float median(std::vector<float> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// Times launch_gated_attention (all its kernels) on a random batch, via CUDA graph replay.
float time_batch(const Shape& sh, DeviceKvDtype dt, const std::vector<SeqSpec>& specs, std::mt19937_64& rng,
                 int reps = 30) {
    const HostBatch b = make_batch(sh, specs, rng);
    const int T = b.T, Hq = sh.Hq, Hkv = sh.Hkv, D = sh.D;
    const size_t cache_bytes = size_t(b.num_blocks) * sh.bs * Hkv * D * esize(dt);
    uint8_t *d_kc, *d_vc;
    QS_CUDA_CHECK(cudaMalloc(&d_kc, cache_bytes));
    QS_CUDA_CHECK(cudaMalloc(&d_vc, cache_bytes));
    fill_cache_kernel<<<4096, 256>>>(d_kc, cache_bytes, 17u, dt == DeviceKvDtype::kFP8E4M3);
    fill_cache_kernel<<<4096, 256>>>(d_vc, cache_bytes, 91u, dt == DeviceKvDtype::kFP8E4M3);
    QS_CUDA_CHECK_LAUNCH();
    float* d_qg = dev_upload(randn(size_t(T) * Hq * 2 * D, rng));
    float* d_k = dev_upload(randn(size_t(T) * Hkv * D, rng));
    float* d_v = dev_upload(randn(size_t(T) * Hkv * D, rng));
    float* d_qn = dev_upload(randu(size_t(D), rng, -0.5f, 1.0f));
    float* d_kn = dev_upload(randu(size_t(D), rng, -0.5f, 1.0f));
    float* d_out;
    QS_CUDA_CHECK(cudaMalloc(&d_out, size_t(T) * Hq * D * 4));
    const size_t ws_bytes = attention_workspace_bytes(T, Hq, D, kAttentionMaxSplits);
    void* d_ws = nullptr;
    if (ws_bytes) QS_CUDA_CHECK(cudaMalloc(&d_ws, ws_bytes));
    DeviceBatchBufs bufs;
    bufs.upload(b);
    GatedAttentionParams p;
    p.qg = d_qg;
    p.k = d_k;
    p.v = d_v;
    p.q_norm_w = d_qn;
    p.k_norm_w = d_kn;
    p.k_cache = d_kc;
    p.v_cache = d_vc;
    p.kv_dtype = dt;
    p.Hq = Hq;
    p.Hkv = Hkv;
    p.D = D;
    p.rotary_dim = sh.rot;
    p.block_size = sh.bs;
    p.rope_theta = sh.theta;
    p.eps = sh.eps;
    p.batch = bufs.view(b);
    p.workspace = d_ws;
    p.max_splits = kAttentionMaxSplits;
    p.out = d_out;
    cudaStream_t stream;
    QS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    launch_gated_attention(p, stream);  // first launch: kernel attributes
    QS_CUDA_CHECK(cudaStreamSynchronize(stream));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    QS_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    launch_gated_attention(p, stream);
    QS_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    QS_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    cudaEvent_t e0, e1;
    QS_CUDA_CHECK(cudaEventCreate(&e0));
    QS_CUDA_CHECK(cudaEventCreate(&e1));
    for (int i = 0; i < 5; ++i) QS_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    std::vector<float> ts;
    for (int i = 0; i < reps; ++i) {
        QS_CUDA_CHECK(cudaEventRecord(e0, stream));
        QS_CUDA_CHECK(cudaGraphLaunch(exec, stream));
        QS_CUDA_CHECK(cudaEventRecord(e1, stream));
        QS_CUDA_CHECK(cudaEventSynchronize(e1));
        float ms;
        QS_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        ts.push_back(ms * 1000.0f);
    }
    QS_CUDA_CHECK(cudaGetLastError());
    // The output must be finite (no read of a page outside the tables).
    std::vector<float> out(size_t(T) * Hq * D);
    QS_CUDA_CHECK(cudaMemcpy(out.data(), d_out, out.size() * 4, cudaMemcpyDeviceToHost));
    size_t nonfinite = 0;
    for (float x : out) nonfinite += !std::isfinite(x);
    if (nonfinite) std::printf("  WARNING: %zu non-finite outputs in the timing run\n", nonfinite);
    QS_CUDA_CHECK(cudaGraphExecDestroy(exec));
    QS_CUDA_CHECK(cudaGraphDestroy(graph));
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(d_kc);
    cudaFree(d_vc);
    cudaFree(d_qg);
    cudaFree(d_k);
    cudaFree(d_v);
    cudaFree(d_qn);
    cudaFree(d_kn);
    cudaFree(d_out);
    if (d_ws) cudaFree(d_ws);
    bufs.free_all();
    QS_CUDA_CHECK(cudaStreamDestroy(stream));
    return median(ts);
}

}  // namespace

int main(int argc, char** argv) {
    uint64_t seed = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
    bool timing = true, small = false;
    for (int i = 1; i < argc; ++i) {
        if (std::string(argv[i]) == "--no-timing") timing = false;
        else if (std::string(argv[i]) == "--small") { small = true; timing = false; }
        else seed = std::strtoull(argv[i], nullptr, 10);
    }
    std::printf("attention_lab seed %llu\n", (unsigned long long)seed);
    std::mt19937_64 rng(seed);
    cudaDeviceProp prop;
    QS_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("device %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);

    const Shape tiny{"tiny", 4, 2, 64, 16, 16, 1e7, 1e-6f};
    const Shape real{"real", 16, 2, 256, 64, 16, 1e7, 1e-6f};
    const Shape gen_a{"gen D96 G4 bs12", 8, 2, 96, 32, 12, 1e4, 1e-6f};
    const Shape gen_b{"gen D32 G1 bs8 rot32", 4, 4, 32, 32, 8, 1e6, 1e-5f};
    const Shape gen_c{"gen D128 G32 rot64", 32, 1, 128, 64, 16, 1e7, 1e-6f};
    const Shape gen_d{"gen D192 G8 rot0", 16, 2, 192, 0, 32, 1e7, 1e-6f};

    bool all = conversion_check(rng);
    const std::vector<SeqSpec> mixed = {{700, 1}, {100, 37}, {0, 300}};
    auto decode_batch = [&](int n, int lo, int hi) {
        std::uniform_int_distribution<int> d(lo, hi);
        std::vector<SeqSpec> v;
        for (int i = 0; i < n; ++i) v.push_back({d(rng), 1});
        return v;
    };
    for (DeviceKvDtype dt : {DeviceKvDtype::kBF16, DeviceKvDtype::kFP8E4M3}) {
        all &= run_case("tiny mixed", tiny, dt, mixed, rng);
        all &= run_case("tiny decode 40 (splits)", tiny, dt, decode_batch(40, 0, 2000), rng, true);
        all &= run_case("tiny prefill 3 fresh (n=1,129,64)", tiny, dt, {{0, 1}, {0, 129}, {0, 64}}, rng);
        all &= run_case("real mixed", real, dt, mixed, rng);
        if (small) continue;  // --small (for compute-sanitizer): tiny cases and the real mixed batch
        all &= run_case("real mixed (graph)", real, dt, mixed, rng, true);
        all &= run_case("real decode 4 long (splits)", real, dt, decode_batch(4, 2500, 4095), rng, true);
        all &= run_case("real decode 300 (few splits)", real, dt, decode_batch(300, 0, 900), rng, true);
        all &= run_case("real decode 600 (no split)", real, dt, decode_batch(600, 0, 400), rng);
        all &= run_case("real prefill 2x512 + chunk", real, dt, {{0, 512}, {0, 512}, {1000, 200}}, rng);
        all &= run_case("real verify 64x3 (MTP-like)", real, dt, [&] {
            std::vector<SeqSpec> v;
            for (int i = 0; i < 64; ++i) v.push_back({int(rng() % 800), 3});
            return v;
        }(), rng);
        all &= run_case(gen_a.name, gen_a, dt, mixed, rng);
        all &= run_case(gen_b.name, gen_b, dt, mixed, rng);
        all &= run_case(gen_c.name, gen_c, dt, mixed, rng);
        all &= run_case(gen_d.name, gen_d, dt, {{300, 1}, {40, 70}, {0, 5}}, rng);
    }

    if (timing) {
        std::printf("\ntimings (median of 30 CUDA-graph replays; copy ceiling 4.25 TB/s; bf16 mma.sync dense ~660 "
                    "TFLOP/s at best)\n");
        for (DeviceKvDtype dt : {DeviceKvDtype::kBF16, DeviceKvDtype::kFP8E4M3}) {
            for (int B : {1, 64, 512}) {
                const int ctx = 1500;
                const float us = time_batch(real, dt, std::vector<SeqSpec>(size_t(B), SeqSpec{ctx - 1, 1}), rng);
                const double bytes = double(B) * real.Hkv * ctx * real.D * esize(dt) * 2;
                std::printf("decode %-4s B=%-3d ctx=%d: %8.1f us  K/V read %7.1f MB  %6.0f GB/s (%4.1f%% of 4.25 TB/s)\n",
                            dname(dt), B, ctx, us, bytes / 1e6, bytes / us / 1e3, bytes / us / 1e3 / 4250 * 100);
            }
            for (int n : {1024, 4096}) {
                const int S = n == 1024 ? 16 : 4;
                const float us = time_batch(real, dt, std::vector<SeqSpec>(size_t(S), SeqSpec{0, n}), rng, 20);
                const double flops = 4.0 * real.Hq * real.D * S * (double(n) * (n + 1) / 2);
                std::printf("prefill %-4s %dx%d fresh: %8.1f us  %6.1f TFLOP/s (causal FLOPs %.3g)\n", dname(dt), S, n,
                            us, flops / us / 1e6, flops);
            }
        }
    }
    std::printf("%s\n", all ? "ALL PASS" : "SOME FAILED");
    return all ? 0 : 1;
}
