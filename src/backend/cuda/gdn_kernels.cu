// Gated DeltaNet on the GPU: the public launchers (gdn_kernels.h: maths, layouts, requirements)
// over the kernels of gdn_conv.cu (conv1d + SiLU, window advance), gdn_serial.cu and gdn_decode.cu
// (token-serial recurrence, one block per head or persistent blocks streaming the states: decode,
// short sequences) and gdn_chunked.cu, gdn_cp_*.cu (chunked WY prefill on tensor cores, 3xTF32),
// gdn_tc_*.cu (prefill_version 2: the same on bf16 tensor cores; 3: with split hi + lo operands;
// 4: fp16 operands; 5: version 4 with the prep's and output's loads issued earlier; 6: version 5 with
// the state pass at 64 value columns).
// CPU reference: src/backend/cpu/cpu_gdn.cpp (CpuOps::gated_delta_net).
#include "backend/cuda/gdn_kernels.h"

#include "backend/cuda/device_limits.h"
#include "backend/cuda/gdn_common.cuh"
#include "backend/cuda/gdn_tc_phases.h"

namespace qs::cuda {

namespace gdn {

void check_params(const GatedDeltaNetParams& p) {
    GDN_REQUIRE(p.Nk > 0 && p.Nv > 0 && p.Nv % p.Nk == 0);
    GDN_REQUIRE(p.Dk > 0 && p.Dk <= 128 && p.Dk % 4 == 0);
    GDN_REQUIRE(p.Dv > 0 && p.Dv <= 128 && p.Dv % 4 == 0);
    GDN_REQUIRE(p.K >= 2 && p.K <= 4);
    GDN_REQUIRE(p.batch.num_tokens >= 0 && p.batch.num_seqs >= 0);
    GDN_REQUIRE(p.batch.num_seqs <= 65535);
    GDN_REQUIRE(p.decode_kernel >= -1 && p.decode_kernel <= 2);
    GDN_REQUIRE(p.decode_blocks >= 0);
    GDN_REQUIRE(p.decode_version == 1 || p.decode_version == 2);
    GDN_REQUIRE(p.decode_stages >= 0 && p.decode_stages <= 4);
    GDN_REQUIRE(p.slices_version >= 1 && p.slices_version <= 3);
    GDN_REQUIRE(p.side_blocks >= 0);
    GDN_REQUIRE(p.side_stream == nullptr || (p.side_fork != nullptr && p.side_join != nullptr));
    GDN_REQUIRE(p.prefill_version >= 1 && p.prefill_version <= 6);
    if (p.prefill_version >= 2) {
        GDN_REQUIRE(p.Dk % 8 == 0 && p.Dv % 8 == 0);  // 16-byte rows of 16-bit values for cp.async
        GDN_REQUIRE(p.chunk_value_cols == 0 || p.chunk_value_cols == 16 || p.chunk_value_cols == 32 ||
                    (p.chunk_value_cols == 64 && p.prefill_version == 6));
    }
    auto aligned = [](const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; };
    GDN_REQUIRE(aligned(p.qkv) && aligned(p.z) && aligned(p.conv_w) && aligned(p.norm_w) &&
                aligned(p.conv_state) && aligned(p.ssm_state) && aligned(p.workspace) && aligned(p.out));
}

}  // namespace gdn

namespace {

using gdn::CpLayout;
using gdn::RecArgs;
using gdn::cp_layout;

RecArgs make_rec_args(const GatedDeltaNetParams& p) {
    RecArgs a;
    a.conv = static_cast<const float*>(p.workspace);
    a.z = p.z; a.b = p.b; a.a = p.a;
    a.A_log = p.A_log; a.dt_bias = p.dt_bias; a.norm_w = p.norm_w;
    a.state = p.ssm_state; a.out = p.out; a.seqs = p.batch.seqs;
    // The block map only where it lists the chunks this call's kernels take (gdn_chunk_map.h).
    const bool map = p.batch.gdn_chunks != nullptr && p.batch.gdn_chunk_count >= 0 &&
                     p.batch.gdn_chunk_min == p.chunk_min_tokens;
    a.chunks = map ? p.batch.gdn_chunks : nullptr;
    a.num_chunks = map ? p.batch.gdn_chunk_count : 0;
    a.chunk_seqs = map ? p.batch.gdn_chunk_seqs : nullptr;
    a.num_chunk_seqs = a.chunk_seqs != nullptr ? p.batch.gdn_chunk_seq_count : 0;
    a.short_seqs = nullptr;  // launch_with_slices sets it where the list is the serial kernel's set
    a.Nk = p.Nk; a.Nv = p.Nv; a.Dk = p.Dk; a.Dv = p.Dv;
    a.C = 2 * p.Nk * p.Dk + p.Nv * p.Dv;
    a.eps = p.eps;
    a.q_scale = 1.0f / std::sqrt(float(p.Dk));
    a.chunk_min_tokens = p.chunk_min_tokens;
    a.skip_single = 0;
    a.stream_stages = p.decode_stages;
    const CpLayout lay = cp_layout(p.batch.num_tokens, a.C, p.Nk, p.Nv, p.Dk);
    float* const ws = static_cast<float*>(p.workspace);
    a.conv_mut = ws;
    a.cpW = ws + lay.oW;
    a.cpP = ws + lay.oP;
    a.cpGam = ws + lay.oGam;
    a.cpRq = ws + lay.oRq;
    a.cpRk = ws + lay.oRk;
    a.tcQ = a.tcK = a.tcW = a.tcU = a.tcH = nullptr;
    a.tcQl = a.tcKl = a.tcWl = a.tcUl = a.tcHl = nullptr;
    a.tcGam = nullptr;
    if (p.prefill_version >= 2) {
        const bool x2 = p.prefill_version == 3;
        const gdn::TcLayout t = gdn::tc_layout(p.batch.num_tokens, a.C, p.Nk, p.Nv, p.Dk, p.Dv, p.batch.num_seqs, x2);
        auto bf = [&](int64_t o) { return reinterpret_cast<uint16_t*>(ws + o); };
        a.tcQ = bf(t.oQ);
        a.tcK = bf(t.oK);
        a.tcW = bf(t.oW);
        a.tcU = bf(t.oU);
        a.tcGam = ws + t.oGam;
        a.tcH = bf(t.oH);
        if (x2) {
            a.tcQl = bf(t.oQl);
            a.tcKl = bf(t.oKl);
            a.tcWl = bf(t.oWl);
            a.tcUl = bf(t.oUl);
            a.tcHl = bf(t.oHl);
        }
    }
    a.row_seq = p.batch.row_seq;
    a.T = p.batch.num_tokens;
    a.num_seqs = p.batch.num_seqs;
    return a;
}

}  // namespace

using gdn::check_params;
using gdn::launch_chunked;
using gdn::launch_serial;
using gdn::launch_slices;
using gdn::launch_stream;

size_t gdn_workspace_bytes(int64_t num_tokens, int64_t conv_dim, int Nk, int Nv, int Dk) {
    return size_t(gdn::cp_layout(num_tokens, conv_dim, Nk, Nv, Dk).total) * sizeof(float);
}

size_t gdn_workspace_bytes(int64_t num_tokens, int64_t conv_dim, int Nk, int Nv, int Dk, int Dv, int64_t num_seqs,
                           int prefill_version) {
    if (prefill_version < 2) return gdn_workspace_bytes(num_tokens, conv_dim, Nk, Nv, Dk);
    return size_t(gdn::tc_layout(num_tokens, conv_dim, Nk, Nv, Dk, Dv, num_seqs, prefill_version == 3).total) *
           sizeof(float);
}

namespace {

// The chunked sequences: chunk-parallel path (prep, state pass + norm) or one block per head.
// By shape (chunk_parallel < 0, chunk_value_cols 0), from the H200 measurements (NOTES.md, GDN v2):
// per 64-token chunk the one-block-per-head kernel takes ~49 µs per (sequence, head) pair, the
// state pass ~20 µs per block at 32 columns (4 blocks per head) and ~25 µs at 64 (2 blocks), so
// the chunk-parallel path wins only while the one-block-per-head grid leaves SMs idle: with P
// (long sequences × Nv) pairs, when P·ceil(Dv/64) <= SMs; 32 columns while P·ceil(Dv/32) <= SMs.
// tc_phases (versions 2-4): which of the three kernels run (bits prep, state pass, output; 7 =
// all; gdn_tc_phases.h times them one by one).
template <int D>
void launch_chunked_any(const GatedDeltaNetParams& p, const RecArgs& a, cudaStream_t stream, int tc_phases = 7) {
    const int64_t T = p.batch.num_tokens, mx = p.batch.max_seq_tokens;
    const int64_t pairs = (mx > 0 ? (T + mx - 1) / mx : T) * p.Nv;
    const bool by_shape = p.chunk_parallel < 0 || p.chunk_value_cols == 0;
    // 16-bit tensor cores (gdn_tc_*.cu); 2 bf16, 3 bf16 hi + lo, 4 fp16, 5 fp16 with early loads, 6 = 5
    // with 64-column state blocks. State-pass columns by shape: 16 while the blocks at 32 columns fit
    // in one wave (one long prompt); version 6: 64 once its blocks at 64 columns are at least one per
    // SM and Dv > 32 (each then pulls W and k̂ from L2 for twice the columns; NOTES.md "GDN state pass
    // toward its byte floor"), else 32.
    if (p.prefill_version >= 2) {
        const gdn::TcOperands ops = gdn::tc_operands(p.prefill_version);
        int cols = p.chunk_value_cols;
        if (cols == 0) {
            const int64_t sms = sm_count();
            const bool wide = p.prefill_version == 6 && p.Dv > 32 && pairs * ((p.Dv + 63) / 64) >= sms;
            cols = pairs * ((p.Dv + 31) / 32) <= sms ? 16 : wide ? 64 : 32;
        }
        if (tc_phases & 1) gdn::launch_tc_prep<D>(a, ops, stream);
        if (tc_phases & 2) gdn::launch_tc_state<D>(a, p.ssm_bf16, ops, cols, stream);
        if (tc_phases & 4) gdn::launch_tc_out<D>(a, ops, stream);
        return;
    }
    const int64_t sms = by_shape ? sm_count() : 0;
    const bool cp = p.chunk_parallel > 0 || (p.chunk_parallel < 0 && pairs * ((p.Dv + 63) / 64) <= sms);
    if (cp) {
        GDN_REQUIRE(p.batch.row_seq != nullptr);
        int cols = p.chunk_value_cols;
        if (cols == 0) cols = pairs * ((p.Dv + 31) / 32) <= sms ? 32 : 64;
        GDN_REQUIRE(cols == 32 || cols == 64);
        gdn::launch_cp_prep<D>(a, p.chunk_tf32x3, stream);
        gdn::launch_cp_state<D>(a, p.ssm_bf16, p.chunk_tf32x3, cols, stream);
    } else {
        launch_chunked<D>(a, p.ssm_bf16, p.chunk_tf32x3, int(gdn::chunked_seq_blocks(a)), stream);
    }
}

}  // namespace

namespace {

// The one-token sequences by the warp slices, then — unless max_seq_tokens says there are none — the
// 2 .. chunk_min_tokens − 1-token ones by gdn_serial.cu. In a chunked call with the batch's lists
// (a.chunk_seqs set: made for this chunk_min), the serial kernel's sequences are exactly
// DeviceBatch::gdn_short_seqs: a grid row each, and no launch when there are none (a serving step's
// prompts beside one-row decodes).
template <int D>
void launch_token_serial(const GatedDeltaNetParams& p, const RecArgs& a, bool chunked, int slice_blocks,
                         cudaStream_t stream) {
    launch_slices<D>(a, p.slices_version, slice_blocks, int(sm_count()), stream);
    if (p.batch.max_seq_tokens == 1) return;
    if (chunked && a.chunk_seqs != nullptr && p.batch.gdn_short_seqs != nullptr) {
        if (p.batch.gdn_short_seq_count == 0) return;
        RecArgs listed = a;
        listed.short_seqs = p.batch.gdn_short_seqs;
        launch_serial<D>(listed, p.ssm_bf16, p.batch.gdn_short_seq_count, stream);
        return;
    }
    launch_serial<D>(a, p.ssm_bf16, p.batch.num_seqs, stream);
}

// A batch whose one-token sequences go to the warp-slice kernel (a.skip_single set): the chunked
// sequences and the token-serial ones. With a side stream (GatedDeltaNetParams::side_stream) in a
// chunked call, the token-serial kernels are issued on it first, so that their blocks are resident
// before the chunk kernels' blocks fill what is left.
template <int D>
void launch_with_slices(const GatedDeltaNetParams& p, const RecArgs& a, bool chunked, cudaStream_t stream) {
    if (!chunked || p.side_stream == nullptr) {
        if (chunked) launch_chunked_any<D>(p, a, stream);
        launch_token_serial<D>(p, a, chunked, p.decode_blocks, stream);
        return;
    }
    QS_CUDA_CHECK(cudaEventRecord(p.side_fork, stream));
    QS_CUDA_CHECK(cudaStreamWaitEvent(p.side_stream, p.side_fork, 0));
    launch_token_serial<D>(p, a, chunked, p.side_blocks > 0 ? p.side_blocks : p.decode_blocks, p.side_stream);
    QS_CUDA_CHECK(cudaEventRecord(p.side_join, p.side_stream));
    launch_chunked_any<D>(p, a, stream);
    QS_CUDA_CHECK(cudaStreamWaitEvent(stream, p.side_join, 0));
}

}  // namespace

void launch_gdn_recurrence(const GatedDeltaNetParams& p, cudaStream_t stream) {
    check_params(p);
    const int T = p.batch.num_tokens, S = p.batch.num_seqs;
    if (T == 0 || S == 0) return;
    RecArgs a = make_rec_args(p);
    // The chunked kernel runs only when some sequence may reach chunk_min_tokens; otherwise the
    // serial kernel is told to take every sequence (the two launches always agree on the split).
    const bool chunked = p.chunk_min_tokens > 0 && p.batch.max_seq_tokens >= p.chunk_min_tokens;
    if (!chunked) a.chunk_min_tokens = 0;
    // The token-serial sequences: streamed through shared memory by persistent blocks (decode-only
    // batches by default) or one block per (sequence, value head).
    const int mx = p.batch.max_seq_tokens;
    const int D = (p.Dk > p.Dv ? p.Dk : p.Dv);
    // decode_kernel 2 (and -1 while kGdnDecodeSlicesByShape): the one-token sequences by warp slices (gdn_decode_slices.cu) where the shape
    // allows it and the batch may hold them beside nothing else token-serial (plain decode) or beside
    // chunked sequences (mixed steps) or unknown lengths (max_seq_tokens 0); then gdn_serial.cu takes
    // the sequences of 2 .. chunk_min_tokens − 1 tokens, if the batch may have any. Elsewhere (MTP
    // verification and commit spans) decode_kernel 2 means the by-shape choice below.
    const bool slices = (p.decode_kernel == 2 || (p.decode_kernel < 0 && kGdnDecodeSlicesByShape)) &&
                        gdn::slices_supported(p.Dk, p.Dv, p.ssm_bf16) && (mx == 1 || mx == 0 || chunked);
    if (slices) {
        a.skip_single = 1;
        if (D == 64) launch_with_slices<64>(p, a, chunked, stream);
        else launch_with_slices<128>(p, a, chunked, stream);
        return;
    }
    const bool by_shape = kGdnDecodeStreamByShape && p.ssm_bf16 && mx >= 1 && mx <= kGdnDecodeStreamMaxTokens;
    const bool stream_k = p.decode_kernel == 1 || (p.decode_kernel != 0 && by_shape);
    int blocks = p.decode_blocks;
    if (stream_k && blocks == 0) {
        const int64_t items = int64_t(S) * p.Nv, cap = 2 * int64_t(sm_count());
        blocks = int(items < cap ? items : cap);
    }
    if (D <= 32) {
        if (chunked) launch_chunked_any<32>(p, a, stream);
        if (stream_k) launch_stream<32>(a, p.ssm_bf16, p.decode_version, blocks, stream);
        else launch_serial<32>(a, p.ssm_bf16, S, stream);
    } else if (D <= 64) {
        if (chunked) launch_chunked_any<64>(p, a, stream);
        if (stream_k) launch_stream<64>(a, p.ssm_bf16, p.decode_version, blocks, stream);
        else launch_serial<64>(a, p.ssm_bf16, S, stream);
    } else {
        if (chunked) launch_chunked_any<128>(p, a, stream);
        if (stream_k) launch_stream<128>(a, p.ssm_bf16, p.decode_version, blocks, stream);
        else launch_serial<128>(a, p.ssm_bf16, S, stream);
    }
}

void launch_gated_delta_net(const GatedDeltaNetParams& p, cudaStream_t stream) {
    launch_gdn_conv(p, stream);
    launch_gdn_recurrence(p, stream);
}

void launch_gdn_tc_phases(const GatedDeltaNetParams& p, int phases, cudaStream_t stream) {
    check_params(p);
    GDN_REQUIRE(p.prefill_version >= 2 && p.chunk_min_tokens > 0);
    if (p.batch.num_tokens == 0 || p.batch.num_seqs == 0) return;
    const RecArgs a = make_rec_args(p);
    const int D = (p.Dk > p.Dv ? p.Dk : p.Dv);
    if (D <= 32) launch_chunked_any<32>(p, a, stream, phases);
    else if (D <= 64) launch_chunked_any<64>(p, a, stream, phases);
    else launch_chunked_any<128>(p, a, stream, phases);
}

}  // namespace qs::cuda
