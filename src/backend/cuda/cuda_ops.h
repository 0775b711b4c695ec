// CudaOps: the CUDA backend (Hopper, sm_90a). Mirrors backend/cpu op for op: activations are
// fp32 device buffers from an arena; weights are uploaded once (DeviceWeights); the batch's ids,
// positions and block tables are uploaded once per forward (begin_forward → DeviceBatch); the
// caches live in CudaCacheStorage. Dense linears go through cuBLASLt (gemm.h), attention, GDN
// and MoE through their kernel files. Everything is enqueued on one stream; copy_to_host is the
// only synchronisation in a forward. Decode batches run their layers as CUDA graphs
// (forward_graphs.h), padded with dummy rows that use the cache's spare page and slot. Used from
// the engine thread.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "backend/cuda/device_batch.h"
#include "backend/cuda/device_memory.h"
#include "backend/cuda/device_weights.h"
#include "backend/cuda/forward_graphs.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/op_profile.h"
#include "backend/cuda/step_timeline.h"
#include "backend/cuda/vision_tower.h"
#include "backend/ops.h"
#include "backend/router_check.h"

namespace qs::cuda {

class CudaCacheStorage;

bool attention_prefill_v2_available();  // attention_kernels.h: this build has FlashInfer's headers

struct CudaOptions {
    int device = 0;
    bool ssm_bf16 = false;  // GDN recurrent state stored in bf16 (math stays fp32)
    bool poison = false;    // fill every alloc() with NaN (tests: catches unwritten outputs)
    // fp32 everywhere (tests, diagnosis): weights uploaded as F32 (fp32 GEMMs without TF32, the
    // fp32 MoE kernels), so the GPU reproduces the CPU specification to float rounding. Use with
    // an f32 K/V cache. Slow; never for serving.
    bool reference_precision = false;
    // Decode batches (one row per sequence) of up to this many sequences run their layers as a
    // CUDA graph, padded to the next captured size (forward_graphs.h); 0 disables graphs.
    int64_t graph_max_batch = 512;
    // Tests: pad decode batches exactly as for a graph but run the layers eagerly (the replayed
    // graph must give bit-identical results to this).
    bool pad_without_graphs = false;
    // GPU time per op (op_profile.h; CUDA graphs are off while it is on). For the bench's profile.
    bool profile_ops = false;
    // GPU time per step phase (step_timeline.h; an event per forward, lm_head, sampling and draft
    // argmax; graphs stay on). For the bench's MTP step table.
    bool step_timeline = false;
    // Tests, diagnosis: MoeParams::gemm_path for every MoE call (-1: by shape, the default;
    // 0: the mma.sync grouped GEMMs at every size; 1: the CUTLASS prefill path at every size;
    // 2: the same with the ping-pong schedule for fp8).
    // Any fixed path computes each token's rows independently of the batch around it.
    int moe_gemm_path = -1;
    // MoeParams::small_version for MoE calls that take the small-T path (T <= kMoeSmallTMax;
    // bench/kernels/NOTES.md "Small-T v2"): 2 computes the router and shared-expert-gate logits
    // inside the MoE kernels (no cuBLAS calls before them) and overlaps its launches with
    // programmatic dependent launch; 1 the earlier path (router linears, then three launches);
    // -1 (default): 2 at T = 1, and at T = 2..8 where the down + combine runs by expert slots
    // (moe_small_down_version), 1 otherwise (H200 in a CUDA graph, router included, FP8: T = 1 33.0
    // against 41.6 µs; with version 1's down kernel version 2 is 5-30 % slower at T = 2..8, with the
    // down kernel by slots it is the faster one: T = 2 38.5 against 43.5 µs, T = 8 99.7 against 107.9).
    int moe_small_version = -1;
    // MoeParams::small_prefetch_down for small-T MoE calls (FP8 and BF16 experts): 1 = gate_up's
    // blocks prefetch the down matrices of their experts into L2 (down can start only once gate_up's
    // blocks retire, so its first loads would come from DRAM); 0 = none. The same bits either way
    // (moe_emu --prefetch-down; CudaOpsParity.MoeSmallPrefetchDown). Default 0 until an H200 run
    // times it.
    int moe_small_prefetch_down = 0;
    // MoeParams::small_down_version for small-T MoE calls: 2 = down + combine by expert slots
    // (moe_small_down_slots.cu for FP8 and BF16 experts: one wave of H / 8 blocks at any T, each lane's
    // down rows streamed through a cp.async ring, bench/kernels/NOTES.md "Small-T down by slots"; for
    // INT4 / NVFP4 experts moe_small_int4.cu's down_slots_kernel, a batch of 9 slots' pieces in
    // registers, since session 39), 1 = a
    // block per token; -1 = 2 from T = 2 on, 1 at T = 1. The same bits either way (moe_emu
    // --down-slots; CudaOpsParity.MoeSmallDownSlots). Default 2 (H200, `moe_lab 1 --small`, FP8 in a
    // CUDA graph with small-T version 2: T = 1 28.5 → 26.8 µs, T = 2 50.6 → 38.5, T = 8 137.2 → 99.7).
    int moe_small_down_version = 2;
    // MoeParams::small_int4_gate_up_version for small-T MoE calls on INT4 experts: 1 (default) the fp32
    // unpack-and-FMA gate_up (moe_small_int4.cu), 2 on tensor cores where the shapes fit it
    // (moe_small_int4_gate_up_mma.cu: the same products, fp32 sums in another order; NVFP4 experts
    // with their block scales folded into the codes; INT4 groups not a multiple of 128 keep 1). Not the
    // default: on an H100 (session 40, gpu_run.sh int4_lin, one run each) the one-stream INT4 k = 0
    // step took 3.025 ms with it against 2.966 without (docs/PERF.md "Session 40"); its GPU tests
    // (CudaInt4.MoeSmallGateUpOnTensorCores, CudaNvfp4.TensorCoreKernels) pass.
    int moe_small_int4_gate_up_version = 1;
    // MoeParams::decode_version for MoE calls on the mma.sync grouped path (9 <= T, fewer than 32
    // rows per expert; bench/kernels/NOTES.md "Decode v2"): 1 moe_gemm.cu's tiles, 2 (default) the
    // swapped-operand decode GEMMs of moe_decode_gemm.cu, whose fp8 weights are copied by whole
    // 128-byte lines (H200, 512-sequence FP8 decode step: docs/PERF.md "Session 21").
    int moe_decode_version = 2;
    // MoeParams::decode_pdl with decode version 2 (0 or 1): the down GEMM launched with programmatic
    // dependent launch, its blocks taking the SMs gate_up's last wave leaves and copying their first
    // weights before gate_up ends. The same bits. Default 1 (H100, `moe_lab 1 --decode`, FP8 MoE call
    // in a CUDA graph: T = 64 294.0 → 289.4 µs, 256 350.7 → 346.0, 512 384.2 → 378.9;
    // bench/kernels/NOTES.md "Session 36").
    int moe_decode_pdl = 1;
    // MoeParams::decode_eout_bf16 with decode version 2 and the INT4 grouped GEMMs (0 or 1): the expert
    // outputs between the down GEMM and the combine in bf16 (as on the prefill path) instead of fp32.
    // Changes y's bits. 0 (default): with 1 an engine step's rows round where a one-row step's do not,
    // and CudaModel.EngineOnGpuEqualsSingleSequence* fail (bench/kernels/NOTES.md "Session 37").
    int moe_decode_eout_bf16 = 0;
    // MoeParams::prefill_version for MoE calls on the CUTLASS prefill path (>= 32 routed rows per
    // expert; bench/kernels/NOTES.md "Prefill v2"): 1 the one-block sort and the first gather /
    // SiLU / combine kernels, 2 (default; H200 2026-12-02: FP8 at 16,384 tokens 2,041 -> 1,752 µs)
    // the multi-block sort and the batched-load stages (y bitwise equal).
    int moe_prefill_version = 2;
    // The router and shared-expert-gate logits of MoE calls that do not compute them inside the
    // MoE kernels (every call but small-T version 2's): 0 two cuBLASLt fp32 GEMMs (SIMT SGEMM:
    // 409 µs per layer at 16,384 tokens on the H200); 1 (default) router_gemm.h's one pass over x
    // on bf16 tensor cores with split operands (x exactly as three bf16 terms, W as hi + lo:
    // within ~5e-7 of cuBLAS's logits on the parity fixtures) for calls of >= router_kernel_min_rows
    // (6,144 rows for bf16 routers, 8,192 for fp32 ones), where it is faster (an H100: 170 against
    // 399 µs at 16,384), the weights' hi/lo copies uploaded at
    // prepare_weights (DeviceExperts::router_hi). Smaller calls, and shapes it does not take
    // (E + 1 > 272 rows, H not a multiple of 8), keep cuBLAS. 2: the kernel at every size (slower
    // below ~5,000 rows with a bf16 router; for tests and measurement). bench/kernels/NOTES.md
    // "Router on tensor cores" has the history: with 2, routing flips at exact fp32 near-ties (gaps ~6e-8) move the
    // tiny test model's engine-equality gap past its bound; 1 never reaches the tests' sizes.
    int moe_router_kernel = 1;
    // Diagnosis (tests; synchronises every MoE call): each tensor-core router call outside graph
    // capture is repeated with cuBLAS's fp32 GEMMs on the same x and compared row by row
    // (backend/router_check.h): a row over kRouterCheckBound, or a top-k change where the fp32
    // logits are not a near-tie, is logged with its T and row; CudaOps::router_check_stats()
    // sums every call. The extra buffers shift the arena's later allocations in the layer.
    bool moe_router_check = false;
    // GatedDeltaNetParams::prefill_version for every GDN call (gdn_kernels.h; bench/kernels/NOTES.md
    // "v5"): 1 the 3xTF32 chunked paths (~1e-6 normalised error); 2 the bf16 tensor-core
    // chunk phases (gdn_tc_*.cu: bf16 operands, fp32 accumulation and state; H200 2026-12-02: 16 x
    // 1,024 tokens 3,536 -> 2,375 µs, 1 x 16,384 12,957 -> 2,541 µs, 3.5e-3 normalised error per
    // layer). Not the default: on the transformers fixtures it took the logits error from 9.5e-4 to
    // 2.0e-2 and the MTP head's from 1.0e-3 to 5.1e-2 (docs/PERF.md "Session-12 kernels").
    // 3: version 2 with every bf16 operand split into hi + lo bf16 (three mma per product; the
    // lo arrays double the bf16 workspace): ~16-bit operands, predicted ~5e-6 normalised error
    // (bench/kernels/NOTES.md "v5 accuracy"; not measured on the GPU yet).
    // 4: version 2 on fp16 operands (mma.sync f16, same cost and workspace as 2; 11-bit significand:
    // predicted ~4e-4 normalised error, NOTES.md "v4: fp16 operands").
    // 5: version 4's results bit for bit, with the prep's row loads and the output kernel's gate
    // loads issued ahead of their use (NOTES.md "GDN prep and output toward their byte floors";
    // H200 session 18: prep 732 -> 640 µs at 16 x 1,024).
    // 6: version 5's results bit for bit, with the state pass at 64 value columns per block where the
    // batch has enough (sequence, head) pairs (NOTES.md "GDN state pass toward its byte floor";
    // H200 session 18: state pass 536 -> 384 µs, the layer 2,117 -> 1,864 µs at 16 x 1,024).
    // 0 (default, auto; gdn_prefill_version_for below): version 6 where the cache stores the
    // recurrent state in bf16 (version 4's arithmetic, bit for bit), version 1 where it stores
    // fp32. The kernel's error budget is the state storage's: bf16 storage rounds every element to
    // 8 bits once per call (the op-level bound is 1e-2), beside which the fp16 operands' 4e-4 is
    // small; fp32 storage asks for fp32-class math, which version 1's 3xTF32 gives (~1e-6).
    // Head dims that are not multiples of 8 take version 1.
    int gdn_prefill_version = 0;
    // GatedDeltaNetParams::decode_version for every GDN call (gdn_kernels.h; bench/kernels/NOTES.md
    // "GDN decode v2"): the streaming decode kernel's version, which serves decode-only batches
    // (up to 8 rows per sequence) with bf16 state. 1 (default) as measured on the H200 (512
    // sequences 456 µs per layer, 62 % of copy); 2 no global load on an item's compute path and
    // three cp.async stages at the real shape; bit-identical out and state. Default flips after
    // the H200 lab run (`gdn_lab --decode`).
    int gdn_decode_version = 1;
    // GatedDeltaNetParams::slices_version for every GDN call: the warp-slice decode kernel's version
    // (3, the default: the state copied in and stored back by whole rows through a ring the block
    // shares, 80.7 % of copy at 512 sequences on the H200; 2: stores by each lane; 1: lane-private
    // copies; bit-identical; bench/kernels/NOTES.md "GDN decode v5").
    int gdn_slices_version = 3;
    // 1 (default): the chunked GDN prefill kernels get a block per chunk from a map written with
    // each batch (DeviceBatch::gdn_chunks, gdn_chunk_map.h); 0: a block per chunk key, each searching
    // the sequences (the earlier grid; the same bits). For timing the map against the search.
    int gdn_chunk_map = 1;
    // 1 (default): in a GDN call with chunked sequences beside one-token or short ones (a serving
    // step's prompts beside decodes), the token-serial kernels run on a second stream concurrently
    // with the chunk kernels (GatedDeltaNetParams::side_stream; the same bits); 0: one stream. H100:
    // 1-2 % off the GDN call at gdn_lab's serving shapes, nothing in the offline batch at 512
    // residents (docs/PERF.md "Session 34").
    // gdn_side_blocks: the warp slices' grid there (0: their usual one, GatedDeltaNetParams::side_blocks).
    int gdn_side_stream = 1;
    int gdn_side_blocks = 0;
    // GatedDeltaNetParams::decode_kernel for every GDN call: the kernel of the token-serial
    // sequences (decode rows, MTP verification, short prompts). -1 (default) by shape (warp slices
    // for one-token rows, then the streaming kernel for decode-only batches with bf16 state,
    // gdn_kernels.h), 0 the
    // one-block-per-head kernel (gdn_serial.cu), 1 the streaming kernel (gdn_decode.cu). For
    // measuring the by-shape choice end to end (`gpu_forward_bench --gdn-decode-kernel`): the
    // lab put the two within 5 % of each other at 512 sequences with bf16 state, in either order
    // on different days (bench/kernels/NOTES.md "GDN decode v3"). 2 the one-token sequences by
    // warp slices (gdn_decode_slices.cu, bench/kernels/NOTES.md "GDN decode v5: warp slices";
    // bf16 state, Dk = Dv = 64 or 128) in plain decode and mixed steps, the by-shape choice
    // elsewhere; -1 takes it too where it applies (H200: 430.7 µs per layer at 512 sequences
    // against 519.2 streaming and 493.6 one block per head).
    int gdn_decode_kernel = -1;
    // MoeParams::int4_grouped for MoE calls on INT4 W4A16 experts above the small-T path (9 <= T
    // <= 1,024; bench/kernels/NOTES.md "INT4 MoE grouped GEMM"): 0 (default) the BF16 copies of the
    // experts, 1 (default; H200 2026-12-02, one MoE call at T = 512: 367 µs against 469 on the
    // BF16 copies and 384 for FP8 experts) the tensor-core INT4 grouped GEMMs of
    // moe_decode_gemm_int4.cu (4-bit weights read).
    int moe_int4_grouped = 1;
    // INT4 W4A16 experts (and NVFP4 ones with nvfp4_kernels 1) without BF16 copies (issue 18;
    // moe_int4_dequant.h): 0 (default) every
    // INT4 MoE layer also keeps a BF16 copy of its experts (~65 GB for the real model: 40 layers
    // × 1.6 GB) for the MoE calls no INT4 kernel takes (above moe_int4_grouped_max_t rows: prompt
    // chunks; every call above 8 rows with moe_int4_grouped 0); 1 no copies: those calls first dequantise the layer's
    // experts (those with routed rows, on the prefill path) into one BF16 scratch of one layer's
    // size (1.6 GB for the real model), allocated at prepare_weights so the cache budget sees it,
    // then run the same GEMMs on the same bf16 values (y bitwise equal). Default flips after the
    // lead's H200 measurement (bench/kernels/NOTES.md "INT4 experts without BF16 copies").
    int moe_int4_scratch = 0;
    // MoeParams::int4_grouped_max_t: the most rows an MoE call takes on the INT4 grouped GEMMs
    // (moe_int4_grouped 1); larger calls take the CUTLASS prefill path on the BF16 copies, the
    // mixed-input GEMMs or the scratch. >= 9, or 0 (default) by what those larger calls run on:
    // 4,096 where they would dequantise into the scratch (NVFP4 experts without copies,
    // moe_int4_prefill_version 1), else 1,024 (H200, session 13's moe_int4_lab --scratch: the
    // grouped GEMMs beat a copy's BF16 GEMM only up to 1,024 rows, but beat dequantising into the
    // scratch + the BF16 GEMM up to 4,096; H100, session 43: the mixed-input GEMMs 571 / 629 / 919
    // µs against the grouped GEMMs' 563 / 960 / 1,793 at 1,024 / 2,048 / 4,096 tokens).
    int moe_int4_grouped_max_t = 0;
    // MoeParams::int4_prefill_version: INT4 experts without BF16 copies (moe_int4_scratch 1) on
    // the CUTLASS prefill path (MoE calls above moe_int4_grouped_max_t rows). 1: the layer's experts
    // with routed rows dequantised into the BF16 scratch (1.6 GB written for the real model), then
    // the BF16 grouped GEMMs. 2 (default): CUTLASS's mixed-input grouped GEMMs on the 4-bit codes
    // (moe_int4_mixed.h: the codes read in place, the scratch gets the transposed scales, 12.6 MB;
    // with moe_int4_grouped 1 and moe_gemm_path -1 the upload then sizes the scratch for those
    // alone, DeviceWeights::Int4ScratchPlan, instead of 1.6 GB of BF16 values): the same y
    // bit for bit (GPU tests), faster at every size measured (H100, session 42, `moe_int4_lab
    // --scratch`, one MoE call: 966 against 1,974 µs at 1,024 tokens, 2,870 against 3,652 at
    // 16,384, against the scratch with dequantisation version 2). NVFP4 experts keep 1.
    int moe_int4_prefill_version = 2;
    // NVFP4 weights read as 4-bit (issue 18 item 4; bench/kernels/NOTES.md "NVFP4 on the 4-bit
    // kernels"): 0 (default) NVFP4 linears and experts are dequantised to BF16 copies at upload and
    // every path reads those; 1 they also keep the packed NVFP4 device layout (backend/
    // nvfp4_layout.h: E2M1 codes, the E4M3 block scale bytes, an fp32 global per matrix; +0.5625
    // bytes per weight), which dense linears of up to 8 rows (launch_nvfp4_linear), the MoE small-T path
    // (T <= 8, moe_small_int4.cu) and the 4-bit grouped GEMMs (moe_int4_grouped, up to
    // moe_int4_grouped_max_t rows; moe_decode_gemm_int4.cu) read as INT4's are. Larger dense calls keep
    // the BF16 copies; the experts keep none with moe_int4_scratch 1 (larger MoE calls then dequantise
    // the layer's NVFP4 experts into the scratch). Serve sets 1 with --int4-expert-copies none (its
    // default; make_backend.cpp), 0 with bf16.
    int nvfp4_kernels = 0;
    // FP8 dense linears of 1..N rows (N <= 4) on the small-rows kernel's version 2
    // (small_linear_fp8.cu: x quantised once per block into shared memory, the weight streamed once
    // for all rows; an MTP verify is k + 1 rows): 0 (default) today's path, version 1 at one row
    // and the block-scaled cuBLASLt GEMM (>= 22 µs a call) from two rows. The same x quantisation
    // either way; only the fp32 summation order differs. Default 4 since the H200 run
    // (scripts/gpu_run.sh mtp_fast, docs/PERF.md): 10.6 against 16.7 µs at one row (in_proj_z),
    // 11.5 against 22.0 µs at two; one stream's k = 0 step 4.72 → 3.82 ms.
    int fp8_small_rows = 4;
    // fp32 linears (GDN b/a, the router below router_kernel_min_rows, the shared-expert gate) of
    // 9..f32_tiles_max_rows rows take the tiled fp32 kernel where T·out <= kF32LinearTilesMaxOutputs
    // (Gemm::set_f32_tiles_max_rows; f32_linear_tiles.cu: every output the small-rows kernel's bits,
    // so those values of a row do not depend on the batch; faster than cuBLAS there: the b/a pair
    // up to 1,024 rows, the router up to 128); 0 (default): cuBLAS's fp32 GEMM above 8 rows (its own
    // summation order). 0 .. kF32LinearTilesMaxRows. Opt-in although it is faster (the 512-sequence
    // FP8-lean step 35.15 → 34.62 ms on an H100, docs/PERF.md "Session 38"): with it on, the tiny
    // model's CudaModel.EngineOnGpuEqualsSingleSequence{MmaSyncMoe,UpToNearTies} meet a first
    // difference at a logit gap of 0.52 against their near-tie bound of 0.25 (as bf16 expert outputs
    // do, moe_decode_eout_bf16): changed rounding moves which requests hit a router near-tie.
    int f32_tiles_max_rows = 0;
    // Grid cap of that kernel in blocks per SM (1..4; labs and benches sweep it): at 2 (default)
    // Nsight Compute saw 24 % achieved occupancy and issue slots 50 % busy on the one-row GDN
    // qkv/z launch (docs/PERF.md "Session 23"); at one row the kernel's 64 registers allow 4.
    int fp8_small_blocks_per_sm = 2;
    // The FP8 small-rows kernel's version (Gemm::set_fp8_small_version): 2 fp32 FMAs; 3 (default) the
    // products on tensor cores (small_linear_fp8_mma.cu: exact f16 copies of the e4m3 codes, fp32 sums
    // in another order; ~1e-7 from version 2), the fused norms' launches included (the same norm
    // code, so h and x keep their bits). Default 3 since the H100 run of 2026-12-05 (fp8_gemm_lab 1
    // --mma, scripts/gpu_run.sh mma; docs/PERF.md "Session 30"): the GDN qkv+z launch 12.0 → 11.5 µs
    // at one row, 23.6 → 16.3 µs at four; one stream's MTP k = 1 step 4.95 → 4.70 ms, k = 0 equal.
    int fp8_small_version = 3;
    // Version 3's grid cap in blocks per SM: 0 (default) a block per 16 output features (768 blocks
    // for the GDN qkv/z); 1..4 that many blocks per SM, each looping over feature groups (with the
    // input norm a block then normalises x once for all its groups).
    int fp8_small_v3_blocks_per_sm = 0;
    // The 4-bit (INT4 W4A16, NVFP4) small-rows linears (Gemm::set_int4_linear_version), 1..8 rows:
    // 1 a launch per weight (int4_linear_kernels.cu: fp32 FMAs) and the norm kernel after; 2 up to four
    // weights of one input in one launch (the q/k/v, the GDN qkv/z) and, at T <= fused_output_norm,
    // the post-attention norm by the o_proj / out_proj launch's last block (SmallLinearOutputNorm), as
    // the FP8 small-rows kernels do, every output the same bits as 1's; 3 as 2 with the INT4
    // launches on tensor cores (int4_linear_mma.cu: the same products, fp32 sums in another order,
    // ~1e-7 apart; INT4 groups not a multiple of 128 keep 2's kernel); 4 (default) as 3 with NVFP4's
    // launches on tensor cores too (each 16-column block's scale folded into the codes, exactly; GPU
    // test CudaNvfp4.TensorCoreKernels). H100, session 39 (gpu_run.sh int4_lin, docs/PERF.md
    // "Session 39"): the one-stream int4-w4a16 k = 0 step 3.988 / 3.968 ms (1) → 3.777 / 3.736 (2; 130
    // → 80 4-bit launches) → 3.202 / 3.191 (3; 14.7 → 8.5 µs a launch), FP8's 3.156-3.189. Default 4
    // since session 41 (H100, docs/PERF.md "Session 41"): the nvfp4 one-stream step 3.536 ms at 3 →
    // 3.024 at 4 (FP8 3.227, INT4 2.962 in the same call; INT4 runs the same kernels at 3 and 4).
    int int4_linear_version = 4;
    // Ops::linears (several linears of one input: q/k/v, GDN qkv/z/b/a): 1 the weights on the
    // block-scaled FP8 path share one e4m3 quantisation of x, those on cuBLASLt's bf16 path one
    // bf16 copy (Gemm::linears; each output bitwise what its own linear gives, so only time
    // changes: at 16,384 rows a quantisation is ~60 µs); 0 one linear per output. Default 1 since
    // the H200 run (fp8_gemm_lab --shared, docs/PERF.md "Session 17"): q/k/v at 16,384 rows 741 →
    // 626 µs, GDN qkv/z/b/a 1,022 → 975 µs, every output bitwise equal.
    int shared_linear_input = 1;
    // Ops::rms_norm_linears (a layer's input norm and its projections) at T <= N rows (N in [0, 4]):
    // the norm rides in the prologue of the FP8 small-rows kernel's launch when one of the weights
    // takes that kernel (T <= fp8_small_rows, rows of 2,048 or 4,096; SmallLinearInputNorm), saving
    // the norm's own launch; above N, or with shared_linear_input 0, the norm kernel, then the
    // linears. h and every output are the same bits either way (CPU emulation:
    // bench/kernels/emu/small_linear_emu.cpp; GPU: CudaFusedInputNorm). Every block normalises the
    // T rows itself, one after another, so the launch grows with T: on the H200 (fp8_gemm_lab 1
    // --norm, docs/PERF.md "Session 27") it saves 0.3-0.6 us at T = 1 and costs 2-7 us at T = 2-4
    // on version 2. On version 3 (a block per 16 features, 768 blocks for the GDN qkv/z) it costs
    // 5.6 us at T = 1 on the H100 ("Session 30"); with the grid capped at 3 blocks per SM the
    // one-stream step is still slower than unfused. Default 0 since version 3 became the default.
    int fused_input_norm = 0;
    // Ops::linear_add2_rms_norm_zc (o_proj / GDN out_proj and the post-attention norm) at T <= N
    // rows (N in [0, 4]): the norm runs in the last block to finish of the FP8 small-rows launch
    // (SmallLinearOutputNorm: every block counts itself on a device counter) when the weight takes
    // that kernel (T <= fp8_small_rows, 2,048- or 4,096-wide rows), saving the norm's own launch;
    // above N the linear, then the norm kernel. The same bits either way (CPU emulation:
    // small_linear_emu; GPU: CudaFusedInputNorm). H200: saves 1.2 us at T = 1, 0.5 at T = 2, costs
    // 0.6-1.2 at T = 3-4. Default 2.
    int fused_output_norm = 2;
    // 1 (default): where the layer's input norm feeds projections that run the block-scaled FP8 GEMM
    // (cuBLASLt's row counts, shared_linear_input 1), the norm kernel also writes h's e4m3
    // quantisation (launch_residual_rms_norm_quant: launch_quant_fp8_rows128's bits, so every output
    // is the same), saving that kernel's pass over h (H200 Nsight Compute, session 21: 80 µs a layer
    // at 16,384 rows); 0: the norm kernel, then the quantisation kernel (Gemm::norm_for_linears).
    int fused_norm_quant = 1;
    // Sequences with 1..N new rows (N in [1, 4]; an MTP verify has k + 1) take the split-K decode
    // attention kernel, each row masked at its own position (GatedAttentionParams::
    // decode_max_rows), instead of the prefill kernel, whose one block per (sequence, kv head)
    // walks the whole context alone (after a 16k prompt a 2-row step spent 13.0 ms in attention
    // against 1.3 ms for one row). 1 (default): today's path, single rows only. Same maths; the
    // split-K combine reassociates the softmax sums. Only in batches of up to 8 sequences (the
    // one-stream MTP verify): with more, the prefill kernel is faster (attention_kernels.cu).
    // Default 4 since the H200 run (scripts/gpu_run.sh mtp_fast, docs/PERF.md).
    int attention_decode_rows = 4;
    // GatedAttentionParams::combine_version: 2 the split-K combine with its loads hoisted (at one
    // stream a combine of 32 splits waited on ~9 dependent round trips to L2, ~8 µs an attention
    // layer), 1 the earlier loop; bitwise equal. Default 1 until an H200 run times version 2
    // (attention_lab --combine, scripts/gpu_run.sh one_stream).
    int attention_combine_version = 1;
    // SamplingLaunch::chunks: vocabulary chunks per row of the draw. 0 (default): sampling_chunks'
    // choice (two blocks per SM while the rows are few); 1: one block per row; 2..512: that many
    // (tests and the lab compare them).
    int sampling_chunks = 0;
    // SamplingLaunch::chunked_select: 1 (default) runs the top-k / top-p thresholds and the logprob
    // statistics over the draw's chunks too when there is more than one (sampling_chunked.cu: one
    // sampled stream's ~0.5 ms of top-p and ~0.6 ms of logprobs a token spread over the SMs; the same
    // tokens and top ids as the CPU specification, CudaSampling.*). 0: one block per row for them.
    // Default 1 since the H100 run of 2026-12-05 (sampling_lab, docs/PERF.md "Session 30"): one row
    // of top_p 0.95 504 → 71 µs, top_k 50 475 → 96 µs, greedy + logprobs 5 625 → 83 µs; 64 rows
    // about 2× faster; 512 rows within ±3 %.
    int sampling_chunked_select = 1;
    // GatedAttentionParams::prefill_version for every attention call (attention_kernels.h): 1
    // (default) the mma.sync flash attention for all prefill rows; 2 FlashInfer's Hopper wgmma/TMA
    // kernel (attention_prefill_wgmma.cu) for the prefill rows of batches whose longest sequence
    // has >= kAttentionV2MinRows rows at head_dim 256 (version 1 elsewhere), with bf16 q, k, v, P
    // and O for either cache dtype. Needs a build with scripts/setup_flashinfer.sh's headers
    // (attention_prefill_v2_available()); without them version 1 is the default. Default 2 since
    // the H200 lab run (docs/PERF.md: 1 × 16,384 causal 11.1 → 3.55 ms, 619 TFLOP/s).
    int attention_prefill_version = attention_prefill_v2_available() ? 2 : 1;
    // GatedAttentionParams::decode_version for every attention call (attention_kernels.h): 1 the
    // one-warp split-K decode kernel; 2 (default) the streaming kernel with the keys as the mma's M,
    // a cp.async ring per warp and fp8 widened in registers (attention_decode_v2.cu,
    // bench/kernels/NOTES.md "Decode version 2"), wherever the tensor-core kernels run (head_dim
    // % 32 == 0). Same rows, masking, precision and combine. Default 2 since the H200 run
    // (attention_lab --decode, docs/PERF.md "Session 17"): fp8 cache, 512 × 1,500 keys, 607 → 269 µs.
    int attention_decode_version = 2;
};

// The GDN prefill version a call runs (CudaOptions::gdn_prefill_version): the option's, or with 0
// (auto) version 6 for bf16 state storage (version 4's results, faster) and version 1 for fp32.
inline int gdn_prefill_version_for(int option, bool ssm_bf16) {
    return option != 0 ? option : ssm_bf16 ? 6 : 1;
}

class CudaOps final : public Ops {
public:
    explicit CudaOps(const CudaOptions& options = {});
    ~CudaOps() override;

    float* alloc(int64_t n) override;
    void free_all() override;
    size_t mark() override;
    void release_to(size_t mark) override;
    float* persistent(int id, int64_t n) override;
    void copy(const float* src, int64_t n, float* dst) override;
    void copy_to_host(const float* src, int64_t n, float* dst) override;
    void copy_from_host(const float* src, int64_t n, float* dst) override;
    // The attention kernels rotate by the batch's M-RoPE streams (DeviceBatch::rope_positions).
    bool supports_mrope() const override { return true; }
    // On the GPU (vision_tower.h): its own stream, cuBLASLt handle and arena, so the submitting
    // thread may run it while the engine thread runs forwards.
    void vision_tower(const VisionWeights& w, const float* patches, const std::vector<VisionGrid>& grids, float* out,
                      float* blocks_out = nullptr) override;
    size_t reserve_vision_tower(const VisionWeights& w, int64_t max_rows) override;
    // The tower's arena bytes held from the device (0 before its first use; tests).
    size_t vision_arena_reserved();
    std::unique_ptr<ModelCache> make_cache(const CacheGeometry& g) override;
    void prepare_weights(const WeightSet& w) override;
    std::optional<DeviceMemoryUse> device_memory() override;
    int64_t begin_forward(const ForwardBatch& batch, const int32_t* positions, const Replay& replay = {}) override;
    float* run_layers(const std::function<float*()>& layers) override;
    std::vector<int64_t> graph_batch_sizes() const override;
    int64_t graph_captures() const override { return graphs_.captures(); }
    void synchronize() override;

    void embed(const WeightBuffer& table, const int32_t* ids, int64_t T, float* x) override;
    void rms_norm_zc(const float* x, const ParamVector& w, int64_t T, int64_t n, double eps, float* y) override;
    void add_rms_norm_zc(float* x, const float* y, const ParamVector& w, int64_t T, int64_t n, double eps,
                         float* out) override;
    void linear(const float* x, int64_t T, const LinearWeight& w, float* y) override;
    void linear_leading_rows(const float* x, int64_t T, const LinearWeight& w, int64_t rows, float* y) override;
    void linears(const float* x, int64_t T, std::initializer_list<LinearOut> outs) override;
    void rms_norm_linears(const float* x, const float* pending, const ParamVector& w, int64_t T, int64_t n,
                          double eps, float* h, std::initializer_list<LinearOut> outs) override;
    void add2_rms_norm_zc(float* x, const float* y1, const float* y2, const ParamVector& w, int64_t T, int64_t n,
                          double eps, float* out) override;
    void linear_add2_rms_norm_zc(const float* a, int64_t T, const LinearWeight& W, float* y, float* x,
                                 const float* pending, const ParamVector& norm_w, double eps, float* h) override;
    // rms_norm_linears calls whose norm rode on a linear launch (CudaOptions::fused_input_norm), and
    // linear_add2_rms_norm_zc calls whose norm did (fused_output_norm).
    int64_t fused_input_norms() const { return fused_input_norms_; }
    int64_t fused_output_norms() const { return fused_output_norms_; }
    // moe calls that took the small-T path (moe_small.cu): tests check which path they exercised.
    int64_t moe_small_calls() const { return moe_small_calls_; }
    // Of those, the calls whose down + combine ran by expert slots (CudaOptions::moe_small_down_version).
    int64_t moe_small_down_slots_calls() const { return moe_small_down_slots_calls_; }
    // Of those, the calls whose INT4 gate_up ran on tensor cores (CudaOptions::moe_small_int4_gate_up_version).
    int64_t moe_small_int4_gate_up_mma_calls() const { return moe_small_int4_gate_up_mma_calls_; }
    // moe calls whose INT4 experts ran on the mixed-input prefill GEMMs (CudaOptions::moe_int4_prefill_version).
    int64_t moe_int4_mixed_calls() const { return moe_int4_mixed_calls_; }
    // MoeParams::int4_grouped_max_t by the options (moe_int4_grouped_max_t; 0: by what the larger
    // calls run on, larger_calls_dequantise: the layer's experts dequantised into the BF16 scratch).
    int64_t moe_int4_grouped_max_t(bool larger_calls_dequantise) const {
        if (options_.moe_int4_grouped_max_t > 0) return options_.moe_int4_grouped_max_t;
        return options_.moe_int4_scratch == 1 && larger_calls_dequantise ? 4096 : 1024;
    }
    void argmax_rows(const float* x, int64_t R, int64_t n, int32_t* out) override;
    // The ids go to pinned memory with an event behind them: no stream sync until the wait.
    void argmax_rows_start(const float* x, int64_t R, int64_t n) override;
    void argmax_rows_wait(int32_t* out) override;
    void sample(float* logits, int64_t V, const SamplingBatch& batch, ModelCache& cache, SampleOutput& out) override;
    // Page-locked (cudaMallocHost): sample() copies a bitmask from it on copy_stream_, beside
    // the forward still running on the stream.
    UploadMemory& upload_memory() override;
    void store_token_ids(const ForwardBatch& batch, const int32_t* positions, ModelCache& cache) override;
    void add(float* x, const float* y, int64_t n) override;
    void fill_zero(float* x, int64_t n) override;
    void gather_rows(const float* src, const int32_t* rows, int64_t R, int64_t n, float* out) override;
    void concat_columns(const float* a, const float* b, int64_t T, int64_t n, float* out) override;
    void gated_attention(const float* qg, float* k, const float* v, const ParamVector& q_norm,
                         const ParamVector& k_norm, const AttentionDims& d, const ForwardBatch& batch,
                         const int32_t* positions, ModelCache& cache, int64_t kv_layer, float* out) override;
    void gated_delta_net(const float* qkv, const float* z, const float* b, const float* a, const GdnWeights& w,
                         const GdnDims& d, const ForwardBatch& batch, ModelCache& cache, int64_t gdn_layer,
                         float* out) override;
    void gdn_commit(const GdnWeights& w, const GdnDims& d, const ForwardBatch& commit,
                    const std::vector<int32_t>& deferred_rows, ModelCache& cache, int64_t gdn_layer) override;
    void moe(const float* x, int64_t T, const MoeWeights& w, int64_t top_k, bool norm_topk_prob, float* y) override;

    cudaStream_t stream() const { return stream_; }
    // The device storage of a cache this backend made (make_cache); null for any other cache
    // (another backend's, or a host one). checked_storage: the same, a QS_CHECK when it is not.
    CudaCacheStorage* storage(ModelCache* cache) const;
    CudaCacheStorage& checked_storage(ModelCache& cache) const;
    const DeviceWeights& weights() const { return weights_; }
    // The dense-linear engine (tests and labs: which FP8 path ran, forcing the dequant path).
    Gemm& gemm() { return *gemm_; }
    size_t arena_high_water() const { return arena_.high_water(); }
    size_t arena_reserved() const { return arena_.reserved(); }
    std::string device_name() const { return device_name_; }
    const ForwardGraphs& graphs() const { return graphs_; }
    // With CudaOptions::moe_router_check: the comparisons so far.
    const RouterCheckStats& router_check_stats() const { return router_check_; }
    // With CudaOptions::profile_ops: GPU ms and calls per op name since the last call (syncs).
    std::map<std::string, OpProfiler::Total> take_op_profile() { return profiler_.take(stream_); }
    // Syncs, graph launches, eager ops and copies (always) and, with CudaOptions::step_timeline,
    // GPU ms per phase since the last call (syncs).
    StepTimeline::Totals take_step_timeline() { return timeline_.take(stream_); }

private:
    // CudaOptions::moe_router_check for one call (logits, gate: the kernel's output).
    void check_router(const float* x, int64_t T, const MoeWeights& w, int64_t top_k, const float* logits,
                      const float* gate);
    // The op's profiler scope; labels the arena's blocks with the op's name.
    OpProfiler::Scope op_scope(const char* name) {
        arena_.set_label(name);
        if (!in_capture_) timeline_.count_eager_op();
        return profiler_.scope(name, stream_);
    }
    // A dense linear's profiler scope: lm_head calls (of the target or the MTP head) are a timeline
    // phase and a profile entry of their own.
    OpProfiler::Scope linear_scope(const LinearWeight& w) {
        const bool lm_head = w.handle.index == lm_head_;
        if (lm_head) timeline_.mark(phase_ == kMtpPhase ? "MTP lm_head" : "lm_head", stream_);
        return op_scope(lm_head ? "lm_head" : "linear");
    }
    // Waits for the stream (counted by the timeline).
    void sync_stream();
    // Uploads n int32 host values into the arena (ordered on the stream).
    int32_t* upload_ints(const int32_t* host, int64_t n);
    void check_batch(const ForwardBatch& batch) const;
    // Copies the deferred spans' GDN inputs into the layer's stash (SeqSpan::defer_state), by
    // the plan begin_forward made.
    void stash_deferred_inputs(const float* qkv, const float* b, const float* a, int64_t gdn_layer);
    // A batch shape that can run as a graph: `seqs` sequences (padded) of `stride` rows.
    struct GraphShape {
        int64_t seqs = 0;  // 0: the batch runs eagerly
        int32_t stride = 0;
    };
    GraphShape graph_shape(const ForwardBatch& batch, const Replay& replay, const CudaCacheStorage* storage) const;
    // begin_forward: the stash plan of a batch with deferred spans, and the stash buffers sized
    // for it (before any capture: a buffer that grows invalidates the graphs).
    void plan_stash(const ForwardBatch& batch, int64_t rows, const GraphShape& shape);

    CudaOptions options_;
    cudaStream_t stream_ = nullptr;
    // CudaOptions::gdn_side_stream: the GDN token-serial kernels' stream beside the chunk kernels,
    // forked from and joined back into stream_ inside each such call.
    cudaStream_t gdn_side_ = nullptr;
    cudaEvent_t gdn_side_fork_ = nullptr, gdn_side_join_ = nullptr;
    std::string device_name_;
    DeviceArena arena_;
    std::vector<DeviceArena::Mark> marks_;  // mark() hands out indices into this stack
    DeviceWeights weights_;
    std::unique_ptr<Gemm> gemm_;
    int64_t fused_input_norms_ = 0, fused_output_norms_ = 0;
    int64_t moe_small_calls_ = 0;
    int64_t moe_small_down_slots_calls_ = 0;
    int64_t moe_small_int4_gate_up_mma_calls_ = 0;
    int64_t moe_int4_mixed_calls_ = 0;
    // begin_forward: one pinned staging buffer and one device buffer that keep their addresses.
    int32_t* staging_ = nullptr;
    size_t staging_ints_ = 0;
    DeviceBuffer batch_ints_;
    DeviceBatch batch_{};
    const ForwardBatch* batch_host_ = nullptr;
    ForwardGraphs graphs_;
    OpProfiler profiler_;
    StepTimeline timeline_;
    RouterCheckStats router_check_;
    bool in_capture_ = false;  // run_layers is capturing a graph (ops then are not eager)
    // The last begin_forward's Replay::phase: names the lm_head and argmax after it.
    std::string phase_;
    static constexpr const char* kMtpPhase = "MTP head";  // Qwen36Model::mtp_forward's
    int32_t lm_head_ = -1;  // the lm_head's WeightHandle index: its linear is profiled apart
    bool graphs_possible_ = false;  // every op of these weights can be captured (prepare_weights)
    bool replay_pending_ = false;   // begin_forward padded the batch; run_layers uses graph_key_
    ForwardGraphs::Key graph_key_{};
    std::map<int, DeviceBuffer> persistent_;  // persistent(): outside the arena
    DeviceBuffer moe_counter_;  // MoeParams::small_counter: one int, 0 between MoE calls
    DeviceBuffer norm_counter_;  // SmallLinearOutputNorm::counter: one int, 0 between launches
    // GDN stash (stash_deferred_inputs): persistent ids kGdnStashId + 3·layer + {qkv, b, a}.
    // The plan of the last forward with deferred spans: the stash row where each deferred span
    // (by its first batch row) begins; either the whole batch copied row for row (graphs: no
    // row list to upload) or the deferred rows gathered (stash_rows_dev_, in the arena).
    static constexpr int kGdnStashId = 1 << 16;
    struct StashPlan {
        std::map<int32_t, int64_t> first;
        bool whole_batch = false;
        int64_t rows = 0;                         // stash rows
        int64_t seqs = 0, stride = 0;             // whole batch: the graph shape it was stashed in
        const int32_t* rows_dev = nullptr;        // gathered: batch row of each stash row
        bool this_forward = false;                // the current forward stashes
    } stash_;
    struct GdnShape {
        int64_t layers = 0, conv_dim = 0, value_heads = 0;  // seen by gated_delta_net
    } gdn_shape_;
    std::vector<int32_t> stash_rows_scratch_;
    // gdn_commit: the zero gate input and the unused output, shared by every layer of one commit
    // forward (one memset per commit instead of one per layer); begin_forward drops them.
    float* commit_zero_z_ = nullptr;
    float* commit_unused_out_ = nullptr;
    std::mutex vision_mu_;                   // guards the lazy creation of vision_
    // argmax_rows_start: the ids' pinned landing place and the event after their copy.
    int32_t* argmax_pinned_ = nullptr;
    int64_t argmax_pinned_rows_ = 0, argmax_started_rows_ = 0;
    cudaEvent_t argmax_done_ = nullptr;
    bool argmax_in_flight_ = false;
    std::unique_ptr<VisionRunner> vision_;   // vision_tower(): made on the first image (or reserve)
    VisionRunner& vision_runner();           // vision_, made under vision_mu_ when absent
    std::vector<char> sample_upload_;        // sample(): the SamplingBatch packed for one copy
    // sample(): the bitmask's own copy, on a second stream (the logits' forward may still be
    // running on stream_; the draw waits for bitmask_copied_), into a buffer outside the arena
    // (the arena's blocks are ordered on stream_ only). The previous sample() synced, so the
    // buffer is free when the next copy starts.
    cudaStream_t copy_stream_ = nullptr;
    cudaEvent_t bitmask_copied_ = nullptr;
    DeviceBuffer bitmask_dev_;
    std::vector<int32_t> sample_download_;   // sample(): what comes back
};

// Whether a CUDA device is present (false on CI machines without a GPU).
bool cuda_device_available();

// Why the CUDA kernels cannot run this config (empty when they can): attention head_dim must be
// even in [2, 256] (multiples of 32 on tensor cores, others on the fp32 fallback); GDN head dims
// multiples of 4 up to 128.
std::string cuda_unsupported_reason(const ModelConfig& c);

}  // namespace qs::cuda
