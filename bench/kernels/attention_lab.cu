// Lab for the gated attention kernels (src/backend/cuda/attention_*.cu): correctness against
// a CPU reference with the maths of CpuOps::gated_attention (src/backend/cpu/cpu_attention.cpp:
// fp32 q/k norm + RoPE in the CPU's operation order, K/V rounded to the cache dtype, attention in
// double here), then timings at the real model's decode and prefill shapes.
// Build (repo root):
//   nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -Isrc -Xcompiler -fopenmp bench/kernels/attention_lab.cu src/backend/cuda/attention_*.cu -o build-gpu/attention_lab -lgomp
// Run: build-gpu/attention_lab [seed] [--no-timing | --small | --verify-rows | --v2 | --decode [--no-checks] | --combine]
//      (exit code 1 on any FAIL;
//      --verify-rows: only sequences of 2-4 rows on the split-K decode kernel, GatedAttentionParams::
//      decode_max_rows, checked and timed against today's prefill-kernel path)
//   --v2: prefill version 2 (attention_prefill_wgmma.cu, FlashInfer's Hopper wgmma kernel) only:
//   CPU-reference cases (a 4k prompt, a varlen batch with a decode row, a chunk continuing over
//   cached pages; bf16 and fp8 caches), then old (version 1) vs new µs and TFLOP/s at 1 x 16,384
//   and 16 x 1,024 fresh causal prompts with the two versions' outputs compared (‖v2 − v1‖/‖v1‖).
//   --decode: decode version 2 (attention_decode_v2.cu) only: CPU-reference cases (decode batches
//   with and without splits, 1 x 16k, verify rows 1..4, head dims 32-256; bf16 and fp8), then v1 vs
//   v2 µs, GB/s and % of 4.25 TB/s at B = 1, 64, 512, 1024 x 1,500 and 1, 8 x 16,384 keys, with
//   ‖v2 − v1‖/‖v1‖ (--no-timing: the cases only; --no-checks: the timings only).
//   --combine: the split-K combine's versions 1 and 2 (GatedAttentionParams::combine_version) on
//   decode version 2 at one-stream and verify shapes: µs each, outputs compared bit for bit.
//
// Cases, reference and tolerances: bench/kernels/attention_ref.h.
#include <algorithm>
#include <array>
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
#include "attention_ref.h"

using namespace qs;
using namespace qs::cuda;

namespace {

using namespace attn_lab;

// GatedAttentionParams::decode_v2_variant of the launches with decode_version 2 (--decode).
int g_dec2_variant = 0;
// GatedAttentionParams::combine_version of time_batch's launches (--combine; 1 the default).
int g_combine_version = 1;

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
    DeviceBatch upload(const HostBatch& b) {
        positions = dev_upload(b.positions);
        row_seq = dev_upload(b.row_seq);
        block_tables = dev_upload(b.block_tables);
        seqs = dev_upload(b.seqs);
        return batch_view(b, positions, row_seq, seqs, block_tables);
    }
    void free_all() {
        cudaFree(positions);
        cudaFree(row_seq);
        cudaFree(block_tables);
        cudaFree(seqs);
    }
};

// Sum over the sequences with >= 2 rows of start + n (GatedAttentionParams::prefill_kv_tokens).
int64_t prefill_kv_tokens(const HostBatch& b) {
    int64_t n = 0;
    for (const DeviceSeq& s : b.seqs)
        if (s.num_tokens > 1) n += int64_t(s.start_pos) + s.num_tokens;
    return n;
}

// Sets p up for prefill version `version` (2: allocates its workspace into *ws, freed by the caller).
void set_version(GatedAttentionParams& p, const HostBatch& b, int version, void** ws) {
    *ws = nullptr;
    p.prefill_version = version;
    if (version != 2) return;
    p.prefill_kv_tokens = prefill_kv_tokens(b);
    const size_t bytes = attention_prefill_v2_workspace_bytes(b.T, int64_t(b.seqs.size()), p.Hq, p.Hkv, p.D,
                                                              p.prefill_kv_tokens);
    QS_CUDA_CHECK(cudaMalloc(ws, bytes));
    QS_CUDA_CHECK(cudaMemset(*ws, 0xff, bytes));  // NaN poison: every read must follow a write
    p.prefill_workspace = *ws;
}

// One correctness case on the GPU. use_graph: the launch is captured into a CUDA graph while the
// batch buffers hold a decoy batch (other positions), then the real positions are copied in and
// the graph replayed: the host side of the launcher must not depend on context lengths.
// dec_rows: GatedAttentionParams::decode_max_rows; dec_version: its decode_version.
bool run_case(const char* label, const Shape& sh, DeviceKvDtype dt, const std::vector<SeqSpec>& specs,
              std::mt19937_64& rng, bool use_graph = false, int dec_rows = 1, int version = 1, int dec_version = 1) {
    Case c = make_case(sh, dt, specs, rng);
    const int T = c.b.T;
    float *d_qg = dev_upload(c.qg), *d_k = dev_upload(c.k), *d_v = dev_upload(c.v), *d_qn = dev_upload(c.qn),
          *d_kn = dev_upload(c.kn);
    uint8_t *d_kc = dev_upload(c.k_raw0), *d_vc = dev_upload(c.v_raw0);
    const size_t out_n = size_t(T) * sh.Hq * sh.D;
    float* d_out = nullptr;
    QS_CUDA_CHECK(cudaMalloc(&d_out, out_n * sizeof(float)));
    QS_CUDA_CHECK(cudaMemset(d_out, 0xff, out_n * sizeof(float)));  // NaN poison
    const size_t ws_bytes = attention_workspace_bytes(T, sh.Hq, sh.D, kAttentionMaxSplits);
    void* d_ws = nullptr;
    if (ws_bytes) {
        QS_CUDA_CHECK(cudaMalloc(&d_ws, ws_bytes));
        QS_CUDA_CHECK(cudaMemset(d_ws, 0xff, ws_bytes));
    }
    GatedAttentionParams p = make_params(c);
    p.decode_max_rows = dec_rows;
    p.decode_version = dec_version;
    p.decode_v2_variant = dec_version == 2 ? g_dec2_variant : 0;
    p.qg = d_qg;
    p.k = d_k;
    p.v = d_v;
    p.q_norm_w = d_qn;
    p.k_norm_w = d_kn;
    p.k_cache = d_kc;
    p.v_cache = d_vc;
    p.workspace = d_ws;
    p.out = d_out;
    void* d_ws2 = nullptr;
    set_version(p, c.b, version, &d_ws2);
    if (version == 2 && !attention_prefill_v2_applies(2, sh.D, dt, c.b.max_n)) {
        std::printf("FAIL  %s: prefill version 2 does not apply (available %d, D %d, max rows %d)\n", label,
                    int(attention_prefill_v2_available()), sh.D, c.b.max_n);
        return false;
    }
    DeviceBatchBufs bufs;
    cudaStream_t stream;
    QS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    if (use_graph) {
        HostBatch decoy = c.b;
        for (const DeviceSeq& s : decoy.seqs)
            for (int r = 0; r < s.num_tokens; ++r) decoy.positions[size_t(s.row_begin + r)] = r;
        p.batch = bufs.upload(decoy);
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        QS_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
        launch_gated_attention(p, stream);
        QS_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
        QS_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
        QS_CUDA_CHECK(cudaMemcpy(bufs.positions, c.b.positions.data(), c.b.positions.size() * 4, cudaMemcpyHostToDevice));
        QS_CUDA_CHECK(cudaGraphLaunch(exec, stream));
        QS_CUDA_CHECK(cudaStreamSynchronize(stream));
        QS_CUDA_CHECK(cudaGraphExecDestroy(exec));
        QS_CUDA_CHECK(cudaGraphDestroy(graph));
    } else {
        p.batch = bufs.upload(c.b);
        launch_gated_attention(p, stream);
        QS_CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    QS_CUDA_CHECK(cudaGetLastError());
    std::vector<float> out(out_n);
    std::vector<uint8_t> k_raw(c.k_raw0.size()), v_raw(c.v_raw0.size());
    QS_CUDA_CHECK(cudaMemcpy(out.data(), d_out, out_n * 4, cudaMemcpyDeviceToHost));
    QS_CUDA_CHECK(cudaMemcpy(k_raw.data(), d_kc, k_raw.size(), cudaMemcpyDeviceToHost));
    QS_CUDA_CHECK(cudaMemcpy(v_raw.data(), d_vc, v_raw.size(), cudaMemcpyDeviceToHost));
    reference(c);
    const char* how = version == 2       ? "v2"
                      : dec_version == 2 ? (use_graph ? "dec2 graph" : "dec2")
                      : use_graph        ? "graph"
                                         : "direct";
    const bool ok = compare(c, label, how, out, k_raw, v_raw,
                            version == 2 ? 1e-2 : 0.0);
    for (void* ptr : std::initializer_list<void*>{d_qg, d_k, d_v, d_qn, d_kn, d_kc, d_vc, d_out, d_ws, d_ws2})
        if (ptr) cudaFree(ptr);
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
// version: GatedAttentionParams::prefill_version; out_copy: the output after the last replay;
// dec_version: GatedAttentionParams::decode_version.
// Same rng state in -> same inputs (the v1/v2 comparison draws each batch from a copy).
float time_batch(const Shape& sh, DeviceKvDtype dt, const std::vector<SeqSpec>& specs, std::mt19937_64& rng,
                 int reps = 30, int dec_rows = 1, int version = 1, std::vector<float>* out_copy = nullptr,
                 int dec_version = 1) {
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
    Case shape_only;
    shape_only.sh = sh;
    shape_only.dt = dt;
    GatedAttentionParams p = make_params(shape_only);
    p.decode_max_rows = dec_rows;
    p.decode_version = dec_version;
    p.decode_v2_variant = dec_version == 2 ? g_dec2_variant : 0;
    p.combine_version = g_combine_version;
    p.qg = d_qg;
    p.k = d_k;
    p.v = d_v;
    p.q_norm_w = d_qn;
    p.k_norm_w = d_kn;
    p.k_cache = d_kc;
    p.v_cache = d_vc;
    p.batch = bufs.upload(b);
    p.workspace = d_ws;
    p.out = d_out;
    void* d_ws2 = nullptr;
    set_version(p, b, version, &d_ws2);
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
    if (out_copy) *out_copy = std::move(out);
    if (d_ws2) cudaFree(d_ws2);
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

// --v2: prefill version 2 against the CPU reference, then old vs new timings.
bool v2_mode(std::mt19937_64& rng) {
    std::printf("prefill version 2 (FlashInfer Hopper wgmma) available: %s\n",
                attention_prefill_v2_available() ? "yes" : "NO (built without scripts/setup_flashinfer.sh)");
    if (!attention_prefill_v2_available()) {
        std::printf("SOME FAILED\n");
        return false;
    }
    bool all = true;
    for (DeviceKvDtype dt : {DeviceKvDtype::kBF16, DeviceKvDtype::kFP8E4M3}) {
        all &= run_case("v2 prompt 4096", kReal, dt, {{0, 4096}}, rng, false, 1, 2);
        all &= run_case("v2 varlen 1100+1030+300+decode", kReal, dt, {{0, 1100}, {0, 1030}, {37, 1}, {0, 300}}, rng,
                        false, 1, 2);
        all &= run_case("v2 chunk 1200 over 1500 cached", kReal, dt, {{1500, 1200}}, rng, false, 1, 2);
        all &= run_case("v2 two chunks over cache + prompt", kReal, dt, {{2000, 1024}, {517, 1500}, {0, 1029}}, rng,
                        false, 1, 2);
    }
    std::printf("\nold (v1 mma.sync) vs new (v2 wgmma) prefill, fresh causal prompts, median of CUDA-graph "
                "replays (all kernels of launch_gated_attention: K/V store, and for v2 Q prep + K/V gather + gate)\n");
    std::printf("%-5s %-10s %12s %12s %10s %10s %8s %12s\n", "cache", "batch", "v1 us", "v2 us", "v1 TF/s",
                "v2 TF/s", "speedup", "|v2-v1|/|v1|");
    for (DeviceKvDtype dt : {DeviceKvDtype::kBF16, DeviceKvDtype::kFP8E4M3}) {
        for (const auto& [S, n] : {std::pair{1, 16384}, std::pair{16, 1024}}) {
            const std::vector<SeqSpec> specs(size_t(S), SeqSpec{0, n});
            std::vector<float> o1, o2;
            std::mt19937_64 r1 = rng, r2 = rng;  // same inputs for both versions
            const float us1 = time_batch(kReal, dt, specs, r1, 10, 1, 1, &o1);
            const float us2 = time_batch(kReal, dt, specs, r2, 10, 1, 2, &o2);
            rng = r1;
            double num = 0.0, den = 0.0;
            size_t nonfinite = 0;
            for (size_t i = 0; i < o1.size(); ++i) {
                if (!std::isfinite(o2[i])) ++nonfinite;
                const double d = double(o2[i]) - double(o1[i]);
                num += d * d;
                den += double(o1[i]) * double(o1[i]);
            }
            const double rel = std::sqrt(num / std::max(den, 1e-300));
            const double flops = 4.0 * kReal.Hq * kReal.D * S * (double(n) * (n + 1) / 2);
            const bool ok = nonfinite == 0 && rel < 2e-2;
            all &= ok;
            char batch[32];
            std::snprintf(batch, sizeof(batch), "%dx%d", S, n);
            std::printf("%-5s %-10s %12.1f %12.1f %10.1f %10.1f %7.2fx %12.2e %s\n", dname(dt), batch, us1, us2,
                        flops / us1 / 1e6, flops / us2 / 1e6, us1 / us2, rel, ok ? "PASS" : "FAIL");
        }
    }
    std::printf("%s\n", all ? "ALL PASS" : "SOME FAILED");
    return all;
}

// ‖b − a‖/‖a‖ (infinite when b has a non-finite value).
double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < a.size(); ++i) {
        if (!std::isfinite(b[i])) return INFINITY;
        const double d = double(b[i]) - double(a[i]);
        num += d * d;
        den += double(a[i]) * double(a[i]);
    }
    return std::sqrt(num / std::max(den, 1e-300));
}

// --decode's CPU-reference cases of version 2 (and its lab-only variants at D 256).
bool decode_checks(std::mt19937_64& rng) {
    bool all = true;
    for (DeviceKvDtype dt : {DeviceKvDtype::kBF16, DeviceKvDtype::kFP8E4M3}) {
        all &= run_case("tiny decode 40 (splits)", kTiny, dt, decode_specs(40, 0, 2000, rng), rng, true, 1, 1, 2);
        all &= run_case("tiny mixed", kTiny, dt, kMixed, rng, false, 1, 1, 2);
        all &= run_case("real mixed", kReal, dt, kMixed, rng, false, 1, 1, 2);
        all &= run_case("real decode 4 long (splits)", kReal, dt, decode_specs(4, 2500, 4095, rng), rng, true, 1, 1, 2);
        all &= run_case("real decode 300 (few splits)", kReal, dt, decode_specs(300, 0, 900, rng), rng, true, 1, 1, 2);
        all &= run_case("real decode 600 (no split)", kReal, dt, decode_specs(600, 0, 400, rng), rng, false, 1, 1, 2);
        all &= run_case("real decode 1 x 16k (splits)", kReal, dt, {{16383, 1}}, rng, false, 1, 1, 2);
        all &= run_case("real verify rows<=4 + chunk", kReal, dt, {{3000, 2}, {700, 1}, {1511, 3}, {64, 4}, {100, 9}},
                        rng, false, 4, 1, 2);
        all &= run_case("real verify 2 rows long (graph)", kReal, dt, {{8000, 2}, {2500, 2}}, rng, true, 2, 1, 2);
        all &= run_case("tiny verify rows<=4", kTiny, dt, {{700, 2}, {300, 1}, {511, 3}, {64, 4}, {0, 2}}, rng, false,
                        4, 1, 2);
        all &= run_case(kGenA.name, kGenA, dt, kMixed, rng, false, 1, 1, 2);
        all &= run_case(kGenB.name, kGenB, dt, kMixed, rng, false, 1, 1, 2);
        all &= run_case(kGenC.name, kGenC, dt, {{300, 3}, {40, 1}, {90, 2}, {700, 1}}, rng, false, 3, 1, 2);
        all &= run_case(kGenD.name, kGenD, dt, {{300, 1}, {40, 70}, {0, 5}}, rng, false, 1, 1, 2);
    }
    // The lab-only alternatives of version 2 at D 256 (decode_v2_variant 1, 2) on a few cases.
    for (int var : {1, 2}) {
        g_dec2_variant = var;
        for (DeviceKvDtype dt : {DeviceKvDtype::kBF16, DeviceKvDtype::kFP8E4M3}) {
            char label[64];
            std::snprintf(label, sizeof label, "variant %d real decode 300", var);
            all &= run_case(label, kReal, dt, decode_specs(300, 0, 900, rng), rng, true, 1, 1, 2);
            std::snprintf(label, sizeof label, "variant %d real verify rows<=4", var);
            all &= run_case(label, kReal, dt, {{3000, 2}, {700, 1}, {1511, 3}, {64, 4}}, rng, false, 4, 1, 2);
        }
    }
    g_dec2_variant = 0;
    return all;
}

// --decode: decode version 2 (attention_decode_v2.cu) against the CPU reference, then v1 vs v2
// µs and K/V bandwidth at the real model's decode shapes.
bool decode_mode(std::mt19937_64& rng, bool timing, bool checks) {
    bool all = checks ? decode_checks(rng) : true;
    if (timing) {
        std::printf("\ndecode v1 vs v2, µs per launch_gated_attention (K/V store + decode + combine; median of 20 "
                    "CUDA-graph replays); GB/s = K/V bytes read / time, %% of 4.25 TB/s; v2.1, v2.2: the lab-only "
                    "variants (bf16: 2 warps x 3 stages, 4 x 2; fp8: 4 x 5, 8 x 2; default 4 x 3)\n");
        std::printf("%-5s %-5s %-6s %9s %9s %7s %7s %6s %6s %8s %12s %9s %9s\n", "cache", "B", "ctx", "v1 us", "v2 us",
                    "v1 GB/s", "v2 GB/s", "v1 %", "v2 %", "speedup", "|v2-v1|/|v1|", "v2.1 us", "v2.2 us");
        for (DeviceKvDtype dt : {DeviceKvDtype::kBF16, DeviceKvDtype::kFP8E4M3})
            for (const auto& [B, ctx] : {std::pair{1, 1500}, std::pair{64, 1500}, std::pair{512, 1500},
                                         std::pair{1024, 1500}, std::pair{1, 16384}, std::pair{8, 16384}}) {
                const std::vector<SeqSpec> specs(size_t(B), SeqSpec{ctx - 1, 1});
                std::vector<float> o1, o2, o3, o4;
                std::mt19937_64 r1 = rng, r2 = rng, r3 = rng, r4 = rng;  // same inputs for every version
                const float us1 = time_batch(kReal, dt, specs, r1, 20, 1, 1, &o1, 1);
                const float us2 = time_batch(kReal, dt, specs, r2, 20, 1, 1, &o2, 2);
                g_dec2_variant = 1;
                const float us3 = time_batch(kReal, dt, specs, r3, 20, 1, 1, &o3, 2);
                g_dec2_variant = 2;
                const float us4 = time_batch(kReal, dt, specs, r4, 20, 1, 1, &o4, 2);
                g_dec2_variant = 0;
                rng = r1;
                const double rel = std::max({rel_diff(o1, o2), rel_diff(o1, o3), rel_diff(o1, o4)});
                const bool ok = rel < (dt == DeviceKvDtype::kBF16 ? 5e-3 : 2e-2);
                all &= ok;
                const double bytes = double(B) * kReal.Hkv * ctx * kReal.D * esize(dt) * 2;
                std::printf("%-5s %-5d %-6d %9.1f %9.1f %7.0f %7.0f %5.1f%% %5.1f%% %7.2fx %12.2e %9.1f %9.1f %s\n",
                            dname(dt), B, ctx, us1, us2, bytes / us1 / 1e3, bytes / us2 / 1e3,
                            bytes / us1 / 1e3 / 4250 * 100, bytes / us2 / 1e3 / 4250 * 100, us1 / us2, rel, us3, us4,
                            ok ? "PASS" : "FAIL");
                std::fflush(stdout);
            }
    }
    std::printf("%s\n", all ? "ALL PASS" : "SOME FAILED");
    return all;
}

// --combine: the split-K combine's versions (GatedAttentionParams::combine_version) on decode
// version 2 at one-stream and MTP-verify shapes: µs per launch_gated_attention (K/V store + decode
// + combine) with combine 1 and 2, the outputs compared bit for bit.
bool combine_mode(std::mt19937_64& rng) {
    bool all = true;
    std::printf("\nsplit-K combine v1 vs v2 on decode v2, µs per launch_gated_attention (K/V store + decode + "
                "combine; median of 30 CUDA-graph replays)\n");
    std::printf("%-5s %-3s %-4s %-6s %9s %9s %8s %s\n", "cache", "B", "rows", "ctx", "comb1 us", "comb2 us", "saved",
                "outputs");
    for (DeviceKvDtype dt : {DeviceKvDtype::kBF16, DeviceKvDtype::kFP8E4M3})
        for (const auto& [B, rows, ctx] : std::vector<std::array<int, 3>>{
                 {1, 1, 128}, {1, 1, 1500}, {1, 1, 16384}, {1, 2, 1500}, {4, 1, 1500}, {8, 4, 700}}) {
            const std::vector<SeqSpec> specs(size_t(B), SeqSpec{ctx - rows, rows});
            std::vector<float> o1, o2;
            std::mt19937_64 r1 = rng, r2 = rng;  // same inputs for both
            g_combine_version = 1;
            const float us1 = time_batch(kReal, dt, specs, r1, 30, rows, 1, &o1, 2);
            g_combine_version = 2;
            const float us2 = time_batch(kReal, dt, specs, r2, 30, rows, 1, &o2, 2);
            rng = r1;
            const bool same = o1.size() == o2.size() && std::memcmp(o1.data(), o2.data(), o1.size() * 4) == 0;
            all &= same;
            std::printf("%-5s %-3d %-4d %-6d %9.1f %9.1f %7.1f%% %s\n", dname(dt), B, rows, ctx, us1, us2,
                        (us1 - us2) / us1 * 100, same ? "bitwise PASS" : "DIFFER FAIL");
            std::fflush(stdout);
        }
    std::printf("%s\n", all ? "ALL PASS" : "SOME FAILED");
    return all;
}

}  // namespace

int main(int argc, char** argv) {
    uint64_t seed = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
    bool timing = true, checks = true, small = false, verify_rows = false, v2 = false, decode = false, combine = false;
    for (int i = 1; i < argc; ++i) {
        if (std::string(argv[i]) == "--no-timing") timing = false;
        else if (std::string(argv[i]) == "--no-checks") checks = false;
        else if (std::string(argv[i]) == "--verify-rows") verify_rows = true;
        else if (std::string(argv[i]) == "--v2") v2 = true;
        else if (std::string(argv[i]) == "--decode") decode = true;
        else if (std::string(argv[i]) == "--combine") combine = true;
        else if (std::string(argv[i]) == "--small") { small = true; timing = false; }
        else seed = std::strtoull(argv[i], nullptr, 10);
    }
    std::printf("attention_lab seed %llu\n", (unsigned long long)seed);
    std::mt19937_64 rng(seed);
    cudaDeviceProp prop;
    QS_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("device %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);

    if (v2) return v2_mode(rng) ? 0 : 1;
    if (decode) return decode_mode(rng, timing, checks) ? 0 : 1;
    if (combine) return combine_mode(rng) ? 0 : 1;
    bool all = conversion_check(rng);
    if (verify_rows) {
        // Sequences of up to 4 rows on the split-K decode kernel (decode_max_rows = 4, or 2 for the
        // MTP k = 1 shape) against the reference, then timed against today's path (prefill kernel).
        for (DeviceKvDtype dt : {DeviceKvDtype::kBF16, DeviceKvDtype::kFP8E4M3}) {
            all &= run_case("real verify rows<=4 + chunk", kReal, dt, {{3000, 2}, {700, 1}, {1511, 3}, {64, 4}, {100, 9}},
                            rng, false, 4);
            all &= run_case("real verify 2 rows long (graph)", kReal, dt, {{8000, 2}, {2500, 2}}, rng, true, 2);
            std::vector<SeqSpec> verify;
            for (int i = 0; i < 64; ++i) verify.push_back({int(rng() % 800), 3});
            all &= run_case("real verify 64x3 (graph)", kReal, dt, verify, rng, true, 4);
            all &= run_case("tiny verify rows<=4", kTiny, dt, {{700, 2}, {300, 1}, {511, 3}, {64, 4}, {0, 2}}, rng,
                            false, 4);
            all &= run_case(kGenC.name, kGenC, dt, {{300, 3}, {40, 1}, {90, 2}}, rng, false, 3);
        }
        std::printf("\nverify-row attention, µs per call (median of 30 graph replays): today (prefill kernel for 2+ "
                    "rows) | decode kernel (decode_max_rows = rows) | one row for scale\n");
        for (DeviceKvDtype dt : {DeviceKvDtype::kBF16, DeviceKvDtype::kFP8E4M3})
            for (int ctx : {1024, 16384})
                for (int B : {1, 64})
                    for (int rows : {2, 4}) {
                        if (B == 64 && ctx == 16384) continue;
                        const std::vector<SeqSpec> specs(size_t(B), SeqSpec{ctx - rows, rows});
                        const float t_today = time_batch(kReal, dt, specs, rng, 30, 1);
                        const float t_new = time_batch(kReal, dt, specs, rng, 30, rows);
                        const float t_one =
                            time_batch(kReal, dt, std::vector<SeqSpec>(size_t(B), SeqSpec{ctx - 1, 1}), rng, 30, 1);
                        std::printf("%-4s B=%-3d ctx=%-6d rows=%d: today %8.1f | decode kernel %8.1f | 1 row %8.1f\n",
                                    dname(dt), B, ctx, rows, t_today, t_new, t_one);
                        std::fflush(stdout);
                    }
        std::printf("%s\n", all ? "ALL PASS" : "SOME FAILED");
        return all ? 0 : 1;
    }
    for (DeviceKvDtype dt : {DeviceKvDtype::kBF16, DeviceKvDtype::kFP8E4M3}) {
        all &= run_case("tiny mixed", kTiny, dt, kMixed, rng);
        all &= run_case("tiny decode 40 (splits)", kTiny, dt, decode_specs(40, 0, 2000, rng), rng, true);
        all &= run_case("tiny prefill 3 fresh (n=1,129,64)", kTiny, dt, {{0, 1}, {0, 129}, {0, 64}}, rng);
        all &= run_case("real mixed", kReal, dt, kMixed, rng);
        for (const Shape* sh : {&kFbA, &kFbB, &kFbC, &kFbD})  // fp32 fallback (D % 32 != 0)
            all &= run_case(sh->name, *sh, dt, kMixed, rng);
        if (small) continue;  // --small (for compute-sanitizer): tiny cases and the real mixed batch
        all &= run_case("real mixed (graph)", kReal, dt, kMixed, rng, true);
        all &= run_case("real decode 4 long (splits)", kReal, dt, decode_specs(4, 2500, 4095, rng), rng, true);
        all &= run_case("real decode 300 (few splits)", kReal, dt, decode_specs(300, 0, 900, rng), rng, true);
        all &= run_case("real decode 600 (no split)", kReal, dt, decode_specs(600, 0, 400, rng), rng);
        all &= run_case("real prefill 2x512 + chunk", kReal, dt, {{0, 512}, {0, 512}, {1000, 200}}, rng);
        std::vector<SeqSpec> verify;
        for (int i = 0; i < 64; ++i) verify.push_back({int(rng() % 800), 3});
        all &= run_case("real verify 64x3 (MTP-like)", kReal, dt, verify, rng);
        all &= run_case(kGenA.name, kGenA, dt, kMixed, rng);
        all &= run_case(kGenB.name, kGenB, dt, kMixed, rng);
        all &= run_case(kGenC.name, kGenC, dt, kMixed, rng);
        all &= run_case(kGenD.name, kGenD, dt, {{300, 1}, {40, 70}, {0, 5}}, rng);
        all &= run_case("fallback D16 decode 40 (graph)", kFbA, dt, decode_specs(40, 0, 2000, rng), rng, true);
        all &= run_case("fallback D48 prefill 2x512 + chunk", kFbC, dt, {{0, 512}, {0, 512}, {1000, 200}}, rng);
    }

    if (timing) {
        std::printf("\ntimings (median of 30 CUDA-graph replays; copy ceiling 4.25 TB/s; bf16 mma.sync dense ~660 "
                    "TFLOP/s at best)\n");
        for (DeviceKvDtype dt : {DeviceKvDtype::kBF16, DeviceKvDtype::kFP8E4M3}) {
            for (int B : {1, 64, 512}) {
                const int ctx = 1500;
                const float us = time_batch(kReal, dt, std::vector<SeqSpec>(size_t(B), SeqSpec{ctx - 1, 1}), rng);
                const double bytes = double(B) * kReal.Hkv * ctx * kReal.D * esize(dt) * 2;
                std::printf("decode %-4s B=%-3d ctx=%d: %8.1f us  K/V read %7.1f MB  %6.0f GB/s (%4.1f%% of 4.25 TB/s)\n",
                            dname(dt), B, ctx, us, bytes / 1e6, bytes / us / 1e3, bytes / us / 1e3 / 4250 * 100);
            }
            for (int n : {1024, 4096}) {
                const int S = n == 1024 ? 16 : 4;
                const float us = time_batch(kReal, dt, std::vector<SeqSpec>(size_t(S), SeqSpec{0, n}), rng, 20);
                const double flops = 4.0 * kReal.Hq * kReal.D * S * (double(n) * (n + 1) / 2);
                std::printf("prefill %-4s %dx%d fresh: %8.1f us  %6.1f TFLOP/s (causal FLOPs %.3g)\n", dname(dt), S, n,
                            us, flops / us / 1e6, flops);
            }
        }
    }
    std::printf("%s\n", all ? "ALL PASS" : "SOME FAILED");
    return all ? 0 : 1;
}
