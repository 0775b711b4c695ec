// Gated DeltaNet, step 1: causal depthwise conv1d + SiLU over the qkv projections, with the
// conv window advanced in place (public launcher launch_gdn_conv, gdn_kernels.h). CPU reference:
// src/backend/cpu/cpu_gdn.cpp.
//
// Kernel 1, gdn_conv_kernel<K>: grid (ceil(C/4/256), num_row_chunks + num_seqs), 256 threads,
//   each thread owns 4 consecutive channels (16-byte loads/stores).
//   * blockIdx.y <  num_row_chunks: rows [16·y, 16·y+16); a row with in-sequence index t >= K-1
//     reads its K input rows straight from qkv (all in the same sequence) and writes silu(conv).
//   * blockIdx.y >= num_row_chunks: sequence s = y - num_row_chunks; the thread computes rows
//     t < min(n, K-1) (those that read the old window; every row when num_row_chunks == 0, the
//     decode case) and then writes the new window (= the last K-1 rows of [old window ; new
//     rows]). Only this thread reads or writes that window slice, so there is no race between
//     reading the old and writing the new window. A deferred span (MTP verification) writes the
//     window after its first row instead (rows t >= 1 are committed by gdn_commit); row 0 is
//     always in the sequence part (n_here >= 1). With a spare slot (SeqSpan::spare_slot) it also
//     writes the window after the last row into the spare slot's window.
#include "backend/cuda/gdn_common.cuh"

namespace qs::cuda {

namespace gdn {
namespace {

constexpr int kConvThreads = 256;
constexpr int kConvRowsPerChunk = 16;

// ---------------------------------------------------------------------------------------------
// Kernel 1: causal depthwise conv1d + SiLU, window advance.
// ---------------------------------------------------------------------------------------------
struct ConvArgs {
    const float* qkv;
    const float* w;
    float* window;  // [slots, K-1, C]
    float* out;     // [T, C]
    const int32_t* row_seq;
    const DeviceSeq* seqs;
    int T, C, num_row_chunks;  // num_row_chunks == 0: the sequence part computes every row
};

template <int K>
__device__ __forceinline__ float4 conv_dot(const float (&w)[4 * K], const float4 (&x)[K]) {
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int j = 0; j < K; ++j) {
        acc.x = fmaf(w[0 * K + j], x[j].x, acc.x);
        acc.y = fmaf(w[1 * K + j], x[j].y, acc.y);
        acc.z = fmaf(w[2 * K + j], x[j].z, acc.z);
        acc.w = fmaf(w[3 * K + j], x[j].w, acc.w);
    }
    return make_float4(silu_f(acc.x), silu_f(acc.y), silu_f(acc.z), silu_f(acc.w));
}

template <int K>
__global__ void __launch_bounds__(kConvThreads) gdn_conv_kernel(ConvArgs p) {
    constexpr int W = K - 1;
    constexpr int RC = kConvRowsPerChunk;
    const int c = 4 * (blockIdx.x * kConvThreads + threadIdx.x);
    if (c >= p.C) return;
    const int64_t C = p.C;
    // Weights of channels c..c+3: 4K contiguous floats (channel-major, tap-minor).
    float w[4 * K];
#pragma unroll
    for (int j = 0; j < K; ++j) {
        const float4 v = ld4(p.w + int64_t(c) * K + 4 * j);
        w[4 * j + 0] = v.x;
        w[4 * j + 1] = v.y;
        w[4 * j + 2] = v.z;
        w[4 * j + 3] = v.w;
    }

    if (int(blockIdx.y) < p.num_row_chunks) {
        // Rows with in-sequence index t >= K-1: all K input rows are in qkv (same sequence).
        const int r0 = blockIdx.y * RC;
        int t[RC];
#pragma unroll
        for (int i = 0; i < RC; ++i) t[i] = r0 + i < p.T ? p.row_seq[r0 + i] : -1;  // sequence index
#pragma unroll
        for (int i = 0; i < RC; ++i) t[i] = t[i] >= 0 ? r0 + i - p.seqs[t[i]].row_begin : -1;
#pragma unroll
        for (int i = 0; i < RC; ++i) {
            if (t[i] < W) continue;  // reads the old window: done by the sequence's thread below
            const int r = r0 + i;
            float4 x[K];
#pragma unroll
            for (int j = 0; j < K; ++j) x[j] = ld4(p.qkv + int64_t(r - W + j) * C + c);
            st4(p.out + int64_t(r) * C + c, conv_dot<K>(w, x));
        }
        return;
    }

    // Sequence part: rows t < min(n, K-1) (all rows when there is no row part), then the window.
    const DeviceSeq sq = p.seqs[blockIdx.y - p.num_row_chunks];
    const int n = sq.num_tokens;
    if (n <= 0) return;  // the window stays (a graph's padding sequences of a GDN commit)
    const int n_here = p.num_row_chunks > 0 ? min(n, W) : n;
    float* win = p.window + int64_t(sq.state_slot) * W * C + c;
    const float* in = p.qkv + int64_t(sq.row_begin) * C + c;
    float* out = p.out + int64_t(sq.row_begin) * C + c;
    float4 hist[K];  // hist[0..W-1] = extended rows t .. t+W-1 (oldest first); hist[W] = token t
#pragma unroll
    for (int j = 0; j < W; ++j) hist[j] = ld4(win + int64_t(j) * C);
    for (int tt = 0; tt < n_here; ++tt) {
        hist[W] = ld4(in + int64_t(tt) * C);
        st4(out + int64_t(tt) * C, conv_dot<K>(w, hist));
#pragma unroll
        for (int j = 0; j < W; ++j) hist[j] = hist[j + 1];
        if (tt == 0 && sq.defer_state) {  // MTP verification: the window after the kept first row
#pragma unroll
            for (int j = 0; j < W; ++j) st4(win + int64_t(j) * C, hist[j]);
        }
    }
    // New window = extended rows n .. n+W-1: hist when every row went through it, else the last
    // W input rows (then n > W).
    if (n_here < n) {
#pragma unroll
        for (int j = 0; j < W; ++j) hist[j] = ld4(in + int64_t(n - W + j) * C);
    }
    if (sq.defer_state) {  // MTP verification: rows 1.. are gdn_commit's (accepted drafts) ...
        if (sq.spare_slot < 0) return;
        win = p.window + int64_t(sq.spare_slot) * W * C + c;  // ... or, all accepted, the spare slot's
    }
#pragma unroll
    for (int j = 0; j < W; ++j) st4(win + int64_t(j) * C, hist[j]);
}

}  // namespace
}  // namespace gdn

using gdn::check_params;
using gdn::ConvArgs;
using gdn::gdn_conv_kernel;
using gdn::kConvRowsPerChunk;
using gdn::kConvThreads;

void launch_gdn_conv(const GatedDeltaNetParams& p, cudaStream_t stream) {
    check_params(p);
    const int T = p.batch.num_tokens, S = p.batch.num_seqs;
    if (T == 0 || S == 0) return;
    ConvArgs a;
    a.qkv = p.qkv; a.w = p.conv_w; a.window = p.conv_state; a.out = static_cast<float*>(p.workspace);
    a.row_seq = p.batch.row_seq; a.seqs = p.batch.seqs;
    a.T = T; a.C = 2 * p.Nk * p.Dk + p.Nv * p.Dv;
    // No row part when no sequence has more than K-1 tokens (decode): the sequence part then does
    // every row. A wrong max_seq_tokens can only cost time (the sequence part handles all rows
    // whenever the row part is absent); 0 (unknown) launches the row part.
    const int mx = p.batch.max_seq_tokens;
    const bool row_part = !(mx > 0 && mx <= p.K - 1);
    a.num_row_chunks = row_part ? (T + kConvRowsPerChunk - 1) / kConvRowsPerChunk : 0;
    const int c4 = a.C / 4;
    const dim3 grid((c4 + kConvThreads - 1) / kConvThreads, a.num_row_chunks + S);
    GDN_REQUIRE(grid.y <= 65535);
    switch (p.K) {
        case 2: gdn_conv_kernel<2><<<grid, kConvThreads, 0, stream>>>(a); break;
        case 3: gdn_conv_kernel<3><<<grid, kConvThreads, 0, stream>>>(a); break;
        default: gdn_conv_kernel<4><<<grid, kConvThreads, 0, stream>>>(a); break;
    }
    QS_CUDA_CHECK_LAUNCH();
}

}  // namespace qs::cuda
