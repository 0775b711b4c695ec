#!/usr/bin/env bash
# Runs the carried GPU binaries (gpu-bundle/, made by scripts/build_gpu_bundle.sh) on the GPU
# machine and writes every log under $OUT (default: gpu-logs/). Stages, in the order given:
#   labs    every kernel lab (CPU reference check + timing)
#   tests   the GPU test binary (ctest label `gpu` runs the same tests where ctest is available)
#   bf16 | fp8   gpu_forward_bench on the real config with dummy weights (BF16 / FP8 blocks)
#   vision  gpu_vision_bench: image encode time of the vision tower at 448², 1,024², 2,048²
#   single | single_fp8 | single_nograph   single-stream numbers only (BF16 / FP8 / BF16 without
#           CUDA graphs)
#   bf16_nograph   the BF16 benchmark without CUDA graphs
#   tests:FILTER   the GPU tests matching a gtest filter
#   serve   `qwenserve serve --device cuda` on models/qwen36-tiny answering concurrent chat
#           completions, plain and streaming (scripts/gpu_serve_smoke.py)
#   fp8_lean   the FP8 benchmark with bf16 GDN state and an fp8 K/V cache
#   profile | profile_fp8_lean   GPU time per op (prefill, single-stream decode, 512-sequence decode)
#   mtp_step  FP8 lean, graphs on: a k=0 decode step against MTP k=1/k=2 steps at forced acceptance
#           0 and 0.8, 1 and 512 resident sequences, GPU ms per phase, syncs and launches per step
#           (gpu_forward_bench --mode mtp; MTP_STEP_ARGS adds options, e.g. "--mtp-k 0,1")
#   mtp_spare_tests  the GPU tests of MTP spare-slot mode (--mtp-spare-slots): the verify variant
#           against the CPU, the deferred commit, verify/commit graphs, engine MTP equality
#   mtp_spare  gpu_forward_bench --mode mtp at k = 0/1, P = 0/0.8, 1 and 512 sequences, spare slots 0
#           (the commit of accepted drafts, today) and 512 (one per sequence); five engines: give it
#           STAGE_TIMEOUT=590, or split it over two calls with MTP_SPARE_SEQS=1 and MTP_SPARE_SEQS=512
#   mtp_fast  issue 13's one-stream MTP verify step: `fp8_gemm_lab 1 --small-v2` (FP8 small-rows v2 at
#           1-4 rows: checks, µs against today's path), `attention_lab 1 --verify-rows` (2-4-row
#           sequences on the split-K decode kernel: checks, µs against today's prefill-kernel path at
#           1k and 16k context), the GPU tests CudaSmallRowsV2.* and
#           CudaAttentionDecodeRows.*, then gpu_forward_bench --mode mtp (FP8 lean, graphs on, one
#           stream, k = 0/1, P = 0/0.8) with today's options and with --fp8-small-rows 4
#           --attention-decode-rows 4 (MTP_FAST_EXTRA adds options to the new run, e.g.
#           "--moe-small-version 2"); needs qs_gpu_tests fp8_gemm_lab attention_lab gpu_forward_bench
#           in the bundle
#   mtp_fast_long  the same bench after a 16,384-token prompt (k = 0/1, P = 0, 8 steps): the 2-row
#           step's attention on the prefill kernel (today) against the split-K decode kernel
#           (--attention-decode-rows 4)
#   fp8gemm  the FP8 dense-linear lab (fp8_gemm_lab) and its GPU parity test only
#   fused_norm  the norms in the FP8 small-rows launches (CudaOptions::fused_input_norm: the input norm
#           in the projections' launch; fused_output_norm: the post-attention norm in the o_proj /
#           out_proj launch's last block): `fp8_gemm_lab 1 --norm` (bitwise against the norm kernel
#           beside the linears, µs per call in CUDA graphs at 1-4 rows), the GPU tests
#           CudaFusedInputNorm.* with the linears' and the tiny model's, then the one-stream FP8-lean
#           step (k = 0 and 1, P = 0) with neither and the defaults (input norm fused at 1 row, output
#           norm at 1-2), twice (four engines; FUSED_NORM_POINTS lists other IN·OUT pairs of max fused
#           rows, e.g. "00 11 44"); needs qs_gpu_tests fp8_gemm_lab
#           gpu_forward_bench in the bundle
#   one_stream  session 27's one-stream cuts: `attention_lab 1 --combine` (the split-K combine's loads
#           hoisted, GatedAttentionParams::combine_version 2, against the earlier loop: µs, outputs bit for
#           bit), the GPU tests of the combine, the MoE down prefetch and the fused norms, then the
#           one-stream FP8-lean step (k = 0 and 1, P = 0) with today's defaults, with
#           --attention-combine-version 2, and with that and --moe-small-prefetch-down 1, twice (six
#           engines, ~3.5 min: STAGE_TIMEOUT=300); needs qs_gpu_tests attention_lab gpu_forward_bench
#           in the bundle
#   fp8_prefill  `fp8_gemm_lab 1 --prefill`: the FP8 dense linears at 4,096 and 16,384 rows, checked, then
#           the whole call and the activation quantisation alone, TFLOP/s against the measured fp8 peak
#   gdn_decode  the GDN lab's decode mode (gdn_lab --decode: one-block-per-head vs streaming decode
#           kernel at 1 / 64 / 256 / 512 sequences, fp32 and bf16 state) and the GPU GDN parity tests
#   gdn_dec2  GDN decode version 2 (CudaOptions::gdn_decode_version): `gdn_lab --decode` (serial, the
#           streaming kernel v1 and v2 at 1 / 64 / 512 sequences, fp32 and bf16 state, CPU-reference
#           checks, v2 bits = v1 bits, µs and GB/s, a v1-against-v2 table last) and the GPU GDN parity
#           tests (with CudaOpsParity.GatedDeltaNetDecodeVersion2); ~1.5 min
#   gdn_dec2_step  the 512-sequence FP8-lean k=0 decode step (gpu_forward_bench --mode mtp --mtp-k 0
#           --mtp-seqs 512), --gdn-decode-version 1 then 2 (two engines: ~3 min; STAGE_TIMEOUT=300)
#   gdn_slices  the one-token GDN decode kernel by warp slices (gdn_decode_slices.cu, decode_kernel 2,
#           by shape since it was added): `gdn_lab --decode` (serial, streaming v1/v2 and slices at 1 / 64
#           / 512 sequences: CPU-reference checks, µs, GB/s) and the GPU tests *GatedDeltaNet*,
#           CudaModel.*, CudaGraphs* on the bundle's defaults
#   gdn_slices_rows  the warp-slice kernel's versions 2 (the default) and 3 (the stores by whole rows too):
#           `gdn_lab --decode` (every version checked against the CPU reference and for equal bits, then
#           timed) and the 512-sequence FP8-lean k=0 decode step with --gdn-slices-version 2, then 3
#           (two engines, ~2 min)
#   step512:OPTS  the 512-sequence lean k=0 decode step (gpu_forward_bench --mode mtp --mtp-k 0 --mtp-seqs 512,
#           bf16 GDN state, fp8 KV) with OPTS (gpu_forward_bench options, commas for spaces; fp8-block
#           dummy weights unless OPTS names a --dummy-format), e.g. step512:--moe-decode-eout-bf16,0 or
#           step512:--dummy-format,int4-w4a16,--int4-expert-copies,none; ~35-60 s an engine
#   moe_dec_step  the 512-sequence FP8-lean k=0 decode step with the MoE decode GEMMs' version 1 (moe_gemm.cu,
#           the default), then 2 (moe_decode_gemm.cu: --moe-decode-version 2); two engines, ~1 min
#   gdn_slices_step  the 512-sequence FP8-lean k=0 decode step (gpu_forward_bench --mode mtp --mtp-k 0
#           --mtp-seqs 512) with --gdn-decode-kernel 1 (streaming: the default before), 0 and -1 (the
#           default: warp slices); three engines, ~4 min: STAGE_TIMEOUT=300
#   ncu_step[:SEQS[:K]]  Nsight Compute over one FP8-lean decode step of SEQS resident sequences (default
#           512) with MTP k = K (default 0): `gpu_forward_bench --mode mtp --mtp-steps 1
#           --mtp-profiler-range` under `ncu --profile-from-start off --clock-control none`, per kernel its
#           duration, DRAM bytes read / written and launch shape (one pass: no kernel replay), as CSV
#           (ncu_step_SEQS_kK.csv; tools/ncu_summary.py groups it by kernel). NCU_EXTRA adds
#           gpu_forward_bench options (e.g. --gdn-decode-kernel 0)
#   ncu_prefill  the same per-kernel CSV for one 16 × 1,024-token prefill forward (gpu_forward_bench --mode
#           profile --profile-ncu-case prefill16x1024, FP8 lean): ncu_prefill.csv
#   ncu_detail:REGEX[:SEQS]  `ncu --set full` with source counters on NCU_COUNT (default 3) kernels of one
#           SEQS-sequence decode step whose names match REGEX, after skipping NCU_SKIP (default 0) of
#           them: ncu_detail_*.ncu-rep, its details page and its per-SASS-instruction stall samples (CSV).
#           All ncu_* stages run with --gpu-memory-utilization 0.5 (NCU_MEM_UTIL; ~0.88 on an H100)
#           on fp8-block weights (NCU_FORMAT, e.g. int4-w4a16: the INT4 grouped GEMM is
#           moe_int4_gemm_kernel) --cuda-graph-max-batch 0 (ncu_model_args:
#           Nsight Compute failed to profile with the default memory plan or with graphs, session 20)
#   trace_step[:SEQS[:K]]  the GPU timeline of FP8-lean decode steps without Nsight Systems: every kernel's
#           start and end, one by one inside CUDA-graph replays, of `gpu_forward_bench --mode mtp --mtp-seqs
#           SEQS (default 1) --mtp-k K (default 0) --mtp-acceptance 0 --mtp-steps 32 --mtp-profiler-range`
#           (graphs on, the normal memory plan, as mtp_step) under the CUPTI tracer tools/kernel_trace
#           (CUDA_INJECTION64_PATH, QS_KERNEL_TRACE_RANGE=profiler: the 32 timed steps only) as CSV
#           (trace_step_SEQS_kK.csv, xz-compressed past 4 MB), and tools/kernel_trace_summary.py's tables
#           of it (trace_step_SEQS_kK.md: per replay of the step's graphs its span, busy and idle time; per
#           kernel mean µs and the gap before it). TRACE_EXTRA adds gpu_forward_bench options; the bundle
#           needs qs_kernel_trace (build_gpu_bundle.sh ... gpu_forward_bench qs_kernel_trace)
#   gdn_tc  the GDN lab's prefill version 2 mode (gdn_lab --tc: bf16 tensor-core chunk phases against
#           today's default at 16 × 1,024, 1 × 16,384, 64 × 256 and a varlen mix, reference check,
#           µs and TFLOP/s) and the GPU GDN parity tests (with CudaOpsParity.GatedDeltaNetPrefillVersion2)
#   gdn_acc  GDN prefill versions 2/3's accuracy gate (issue 14 item 2; bench/kernels/NOTES.md "v5
#           accuracy"): gdn_lab --tc (v1 vs v2 vs v3 µs and error at 16 × 1,024, 1 × 16,384, 64 × 256),
#           then the 4 GPU tests v2 failed, their bounds unchanged, with QS_TEST_GDN_PREFILL_VERSION=
#           GDN_ACC_VERSION (default 3; gpu_test_util.h): CudaModel.TransformersFixtures,
#           CudaModel.EngineOnGpuEqualsSingleSequenceMmaSyncMoe, CudaOpsParity.GatedDeltaNetWithStateSlots
#           (tiny, real); bundle: gdn_lab qs_gpu_tests. ~3 minutes (not timed yet)
#   attn_v2  attention prefill version 2 (issue 14 item 3: FlashInfer's Hopper wgmma kernel,
#           attention_prefill_wgmma.cu): `attention_lab 1 --v2` (CPU-reference cases: 4k prompt,
#           varlen + decode row, chunks over cached pages, bf16 and fp8; then v1 vs v2 µs and
#           TFLOP/s at 1 × 16,384 and 16 × 1,024 with ‖v2 − v1‖/‖v1‖) and the GPU tests CudaAttentionV2*
#           and CudaOpsParity.GatedAttention* (~2 minutes, most of it the CPU references)
#   sampling the sampling lab (the default, with the per-row passes over vocabulary chunks below 2 rows
#           an SM, beside CudaOptions::sampling_chunks 1) and the GPU sampling tests only
#   mma     `fp8_gemm_lab 1 --mma`: the FP8 small-rows kernel's version 3 (tensor cores) against version 2
#           on the model's launches at 1-4 rows, checked, timed in CUDA graphs; its GPU tests; then
#           one-stream steps (k = 0, 1) with --fp8-small-version 2; 3 with the input norm unfused at a
#           block per 16 features and at 3 blocks per SM; 3 at 3 blocks per SM with it fused; twice;
#           needs fp8_gemm_lab qs_gpu_tests gpu_forward_bench (~6 minutes)
#   down_slots  the small-T MoE down + combine by expert slots (CudaOptions::moe_small_down_version 2,
#           moe_small_down_slots.cu): `moe_lab 1 --small` (paths small+ds / smv2+ds bitwise against the
#           down kernel by token, then µs eager and in CUDA graphs at T = 1-16), its GPU tests, then the
#           one-stream FP8-lean step (k = 0 and 1, P = 0) with --moe-small-down-version 1 and 2, twice
#           (four engines); needs moe_lab qs_gpu_tests gpu_forward_bench (~4 minutes: STAGE_TIMEOUT=300)
#   grammar_masks  grammar_mask_bench (needs it in the bundle: build_gpu_bundle.sh ... grammar_mask_bench)
#           on the host's 16 cores, the Qwen3.6 vocabulary: the built-in JSON schema, regex "[a-z ]+",
#           and the schema of the http `schema` mode (with --steps 32: 32 engine steps of 512 rows,
#           the accepts serial on the engine thread against deferred into the parallel fill; and its
#           first compile with 16 xgrammar threads against the server's 2)
#   moe_small  `moe_lab 1 --small` (the MoE small-T path, v1 and v2, beside mma.sync) and the GPU MoE
#           tests only (with the tiny model's greedy decode on small-T v2)
#   moe_decode  `moe_lab 1 --decode` (the decode grouped GEMMs v1 vs v2 at T = 64, 256, 512) and the
#           GPU MoE tests only (with CudaOpsParity.MoeDecodeVersion2)
#   moe_prefill  `moe_lab 1 --prefill` (the CUTLASS prefill path, versions 1 and 2 of its stages, beside
#           mma.sync at T = 1,024 to 16,384) and the GPU MoE tests only (with CudaOpsParity.MoePrefillVersion2)
#   profile_fp8_lean_dec2   profile_fp8_lean with --moe-decode-version 2
#   int4    INT4 W4A16 kernels (issue 18 item 4): int4_gemv_lab and the INT4 GPU tests (CudaInt4*)
#           with the dense-linear parity tests
#   single_int4   single-stream numbers on int4-w4a16 dummy weights (compare with single_fp8)
#   int4_vs_fp8  issue 18's comparison with today's defaults, fp8-block then int4-w4a16 dummy weights
#           (--int4-expert-copies none, bf16 GDN state, fp8 KV): the one-stream k = 0 step, the 512-sequence
#           step, and where the bundle has qs_kernel_trace the one-stream kernel timeline (trace1_FMT.csv/.md,
#           as trace_step); bundle: gpu_forward_bench [qs_kernel_trace]; ~4 minutes (session 38: one stream
#           3.225 against 3.828 ms, the 512 step 35.174 against 35.003 on an H100)
#   int4_lin  INT4 one-stream variants (INT4_LIN_VARIANTS: each one engine's extra options, words joined by
#           commas; default "--int4-linear-version,2 --int4-linear-version,3"): the one-stream k = 0 step on
#           int4-w4a16 dummy weights (--int4-expert-copies none, bf16 state, fp8 KV), each variant twice
#           alternating (INT4_LIN_REPS, default "a b"), then FP8's, and where the bundle has qs_kernel_trace
#           the kernel timeline of linear version INT4_LIN_TRACE (default 3, none: no trace; trace1_int4_vN.csv/.md)
#           with INT4_LIN_TRACE_EXTRA's options (commas for spaces; default none); INT4_LIN_NVFP4="3 4" adds
#           the step on nvfp4 dummy weights at those --int4-linear-version values (one_stream_nvfp4_vN);
#           bundle: gpu_forward_bench [qs_kernel_trace]; ~4 minutes (session 39, H100: v1 3.988 / 3.968 ms,
#           v2 3.777 / 3.736, FP8 3.189)
#   int4_moe  the INT4 MoE grouped GEMM on tensor cores (CudaOptions::moe_int4_grouped): moe_int4_lab
#           (bf16 / fp8 / int4 today / int4 tensor-core MoE at T = 1, 8, 64, 512, CPU-reference checks)
#           and the INT4 GPU tests (CudaInt4*, with CudaInt4.MoeInt4GroupedGemm)
#   int4_scratch  INT4 experts without BF16 copies (--int4-expert-copies none, CudaOptions::moe_int4_scratch):
#           `moe_int4_lab 1 --scratch` (fp8 / int4-copies / int4-scratch / int4-mixed / int4-mma at T = 1,024
#           to 16,384, the dequantisation and the mixed path's preparation alone; scratch must equal copies
#           bitwise), the GPU tests (MoE calls and a 1,500-token model forward bitwise equal to the copies,
#           the device memory saved; the mixed-input prefill GEMMs against the scratch path)
#   prefill16k  one 16,000-token prompt in one forward (gpu_forward_bench --mode single, FP8-lean options,
#           --int4-expert-copies none): its MoE calls read the scratch on 4-bit weights. PREFILL16K_VARIANTS: each
#           "FORMAT[,extra,options]" (default: int4-w4a16, nvfp4, fp8-block), each run per PREFILL16K_REPS
#           (default "a b"); the prefill line is the number (session 41, H100: int4 0.427-0.431 s, fp8 0.322-0.326)
#   single_int4_nocopies | single_int4_4k  gpu_forward_bench --mode single --prompt 4096 on int4-w4a16
#           dummy weights without / with the BF16 expert copies (the `memory` line: the cache budget;
#           the prefill time: the prompt's MoE calls dequantise into the scratch without copies)
#   profile_int4 | profile_int4_grouped | profile_fp8   GPU time per op on int4-w4a16 dummy weights (the
#           512-sequence decode step's `moe` row is the number), BF16 expert copies / --moe-int4-grouped 1,
#           and on fp8-block dummy weights (same options otherwise)
#   profile_int4_lean   profile_fp8_lean's options on int4-w4a16 dummy weights (bf16 GDN state, fp8 K/V; the
#           serve default --int4-expert-copies none): the 16,384-token prefill's ops beside FP8 lean's
#   batch_int4 | batch_int4_grouped | batch_fp8   offline batch throughput (512 resident sequences) on
#           int4-w4a16 (BF16 expert copies / --moe-int4-grouped 1) and fp8-block dummy weights
#   single_moev2 | single_fp8_moev2   single-stream numbers with the small-T MoE path's version 2
#           (--moe-small-version 2; BF16 / FP8)
#   http:MODE,MODE[:SERVE_ARGS]   scripts/gpu_serve_bench.sh: serve FP8 lean + qwenserve bench per
#           mode (greedy, sampled, penalties, logprobs, default, json, regex, schema), e.g.
#           http:greedy,sampled
# Usage: bash scripts/gpu_run.sh labs tests bf16
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-gpu-logs}"
mkdir -p "$OUT"
export QS_SOURCE_DIR="$PWD"
B=gpu-bundle
# Unpack the carried bundle (scripts/build_gpu_bundle.sh) when only the archive travelled.
if [ -f .carry/gpu-bundle.tar.xz ] && [ ! -x "$B/qs_gpu_tests" ]; then mkdir -p "$B" && tar -C "$B" -xJf .carry/gpu-bundle.tar.xz; fi
# The GPU tests' data packed by `scripts/device_trim.sh packed` (the tree carried without tests/data).
# Always unpacked when it travelled: the device's copy of the tree may hold the held-out folders
# empty (session 30: tests/data/parity there, its fixtures not), which a directory test took for done.
if [ -f .carry/test-data.tar.xz ]; then
    mkdir -p tests/data && tar -C tests/data -xJf .carry/test-data.tar.xz
fi
# The bundle carries libgomp in case the machine lacks it; cuBLASLt comes from the CUDA toolkit.
export LD_LIBRARY_PATH="$PWD/$B:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}"
STAGE_TIMEOUT="${STAGE_TIMEOUT:-300}"
nvidia-smi --query-gpu=name,memory.total,memory.used,clocks.sm,clocks.max.sm --format=csv > "$OUT/gpu.txt" 2>&1
summary="$OUT/summary.txt"
: > "$summary"
run() {  # name, command...
    local name="$1"; shift
    local t0=$(date +%s.%N)
    timeout "$STAGE_TIMEOUT" stdbuf -oL -eL "$@" > "$OUT/$name.log" 2>&1
    local rc=$?
    printf "%-28s rc=%-3s %6.1f s\n" "$name" "$rc" "$(python3 -c "import time; print(time.time() - $t0)")" | tee -a "$summary"
}
# The one-stream FP8-lean step, k = 0 and 1 at acceptance 0 (fused_norm, one_stream); STEP_VARIANTS
# (each one engine's extra options, words joined by commas) run twice, alternating: a b.
one_stream_step_args=(--model builtin:qwen36-35b-a3b --load-format dummy --dummy-format fp8-block
                      --gdn-state-dtype bf16 --kv-cache-dtype fp8_e4m3 --mode mtp --mtp-k 0,1
                      --mtp-acceptance 0 --mtp-seqs 1)
run_step_variants() {  # name prefix, variant... (each "--opt,value,--opt,value")
    local prefix="$1"; shift
    for r in a b; do
        for v in "$@"; do
            local tag; tag=$(echo "$v" | tr -d '-' | tr ',' '_')
            run "${prefix}_${tag}_$r" "$B/gpu_forward_bench" "${one_stream_step_args[@]}" ${v//,/ }
        done
    done
}
# The ncu_* stages: FP8 lean, with half the usual memory plan and no CUDA graphs (with either, Nsight
# Compute failed to profile kernels here: session 20), and one pass of metrics (no kernel replay).
# NCU_MEM_UTIL sets the memory plan's fraction: 0.5 fits the H200 (141 GB); an H100 (80 GB) needs ~0.88 for the
# 36.6 GB of FP8 weights (at 0.5 the engine refuses: a negative cache budget, session 36).
ncu_model_args=(--model builtin:qwen36-35b-a3b --load-format dummy --dummy-format "${NCU_FORMAT:-fp8-block}" --gdn-state-dtype bf16
                --kv-cache-dtype fp8_e4m3 --gpu-memory-utilization "${NCU_MEM_UTIL:-0.5}" --cuda-graph-max-batch 0)
ncu_bench_args=("${ncu_model_args[@]}" --mode mtp --mtp-steps 1 --mtp-profiler-range)
# The trace_* stages: FP8 lean as mtp_step runs it (graphs on, the normal memory plan).
lean_model_args=(--model builtin:qwen36-35b-a3b --load-format dummy --dummy-format fp8-block --gdn-state-dtype bf16
                 --kv-cache-dtype fp8_e4m3)
trace_ready() {  # the tracer is in the bundle and finds a libcupti: the bundle's, else the machine's
    if [ ! -f "$B/libqs_kernel_trace.so" ]; then
        echo "$1: no $B/libqs_kernel_trace.so (build_gpu_bundle.sh ... qs_kernel_trace)" | tee -a "$summary"
        return 1
    fi
    ldd "$B/libqs_kernel_trace.so" | grep -q "libcupti.* not found" || return 0
    local d
    for d in /usr/local/cuda/extras/CUPTI/lib64 /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
             $(python3 -c 'import glob, nvidia; print(*[d for p in nvidia.__path__ for d in glob.glob(p + "/*/lib")])' 2>/dev/null); do
        if [ -f "$d/libcupti.so.13" ]; then export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"; return 0; fi
    done
    echo "$1: no libcupti.so.13 in the bundle or on this machine: rebuild the bundle without QS_BUNDLE_CUPTI=0" | tee -a "$summary"
    return 1
}
ncu_metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,launch__grid_size,launch__block_size,launch__registers_per_thread
for stage in "$@"; do
    case "$stage" in
        labs) for lab in "$B"/*_lab; do [ -x "$lab" ] && run "$(basename "$lab")" "$lab"; done ;;
        *_lab) run "$stage" "$B/$stage" ;;
        mtp_fast) run fp8_gemm_lab_small_v2 "$B/fp8_gemm_lab" 1 --small-v2
                  run attention_lab_verify_rows "$B/attention_lab" 1 --verify-rows
                  run gpu_tests_mtp_fast "$B/qs_gpu_tests" --gtest_color=no \
                      --gtest_filter='CudaSmallRowsV2.*:CudaAttentionDecodeRows.*'
                  mtp_fast_args=(--model builtin:qwen36-35b-a3b --load-format dummy --dummy-format fp8-block
                                 --gdn-state-dtype bf16 --kv-cache-dtype fp8_e4m3 --mode mtp --mtp-k 0,1
                                 --mtp-acceptance 0,0.8 --mtp-seqs 1)
                  run mtp_fast_today "$B/gpu_forward_bench" "${mtp_fast_args[@]}"
                  run mtp_fast_new "$B/gpu_forward_bench" "${mtp_fast_args[@]}" --fp8-small-rows 4 \
                      --attention-decode-rows 4 ${MTP_FAST_EXTRA:-} ;;
        mtp_fast_long) mtp_long_args=(--model builtin:qwen36-35b-a3b --load-format dummy --dummy-format fp8-block
                                      --gdn-state-dtype bf16 --kv-cache-dtype fp8_e4m3 --mode mtp --mtp-k 0,1
                                      --mtp-acceptance 0 --mtp-seqs 1 --mtp-prompt-tokens 16384 --mtp-steps 8)
                       run mtp_fast_long_today "$B/gpu_forward_bench" "${mtp_long_args[@]}"
                       run mtp_fast_long_new "$B/gpu_forward_bench" "${mtp_long_args[@]}" --fp8-small-rows 4 \
                           --attention-decode-rows 4 ;;
        fp8_prefill) run fp8_gemm_lab_prefill "$B/fp8_gemm_lab" 1 --prefill ;;
        fused_norm) run fp8_gemm_lab_norm "$B/fp8_gemm_lab" 1 --norm
                    run gpu_tests_fused_norm "$B/qs_gpu_tests" --gtest_color=no \
                        --gtest_filter='CudaFusedInputNorm.*:CudaSharedLinears.*:CudaSmallRows*:CudaOpProfile.*:CudaModel.TinyModel*'
                    variants=()
                    for f in ${FUSED_NORM_POINTS:-00 12}; do
                        variants+=("--fused-input-norm,${f:0:1},--fused-output-norm,${f:1:1}")
                    done
                    run_step_variants fused_norm_step "${variants[@]}" ;;
        one_stream) run attention_lab_combine "$B/attention_lab" 1 --combine
                    run gpu_tests_one_stream "$B/qs_gpu_tests" --gtest_color=no \
                        --gtest_filter='*GatedAttentionDecodeVersions*:*MoeSmallPrefetchDown*:*MoeSmallVersion2*:CudaFusedInputNorm.*:CudaModel.*:CudaGraphs.*'
                    run_step_variants one_stream "--attention-combine-version,1" "--attention-combine-version,2" \
                        "--attention-combine-version,2,--moe-small-prefetch-down,1" ;;
        mma) run fp8_gemm_lab_mma "$B/fp8_gemm_lab" 1 --mma
             run fp8_gemm_lab_norm "$B/fp8_gemm_lab" 1 --norm
             run gpu_tests_mma "$B/qs_gpu_tests" --gtest_color=no \
                 --gtest_filter='CudaSmallRows*:CudaOptionsChoice.*:CudaFusedInputNorm.*'
             # One stream, k = 0 and 1: today's defaults; version 3 with the input norm unfused (the H100
             # norm lab: fused on v3's 768 blocks it costs 5-30 µs a launch) at a block per 16 features
             # and at 3 blocks per SM; version 3 at 3 blocks per SM with the input norm fused.
             run_step_variants mma_step "--fp8-small-version,2" "--fp8-small-version,3,--fused-input-norm,0" \
                 "--fp8-small-version,3,--fp8-small-v3-blocks-per-sm,3,--fused-input-norm,0" \
                 "--fp8-small-version,3,--fp8-small-v3-blocks-per-sm,3" ;;
        down_slots) run moe_lab_small "$B/moe_lab" 1 --small
                    run gpu_tests_down_slots "$B/qs_gpu_tests" --gtest_color=no \
                        --gtest_filter='*MoeSmallDownSlots*:*MoeSmallVersion2*:*MoeBothGroupedGemmPaths*:CudaOptionsChoice.*'
                    run_step_variants down_slots_step "--moe-small-down-version,1" "--moe-small-down-version,2" ;;
        fp8gemm) run fp8_gemm_lab "$B/fp8_gemm_lab"
                 run gpu_tests_fp8 "$B/qs_gpu_tests" --gtest_color=no --gtest_filter='*Fp8BlockLinear*' ;;
        tests) run gpu_tests "$B/qs_gpu_tests" --gtest_color=no ;;
        int4) run int4_gemv_lab "$B/int4_gemv_lab"
              run gpu_tests_int4 "$B/qs_gpu_tests" --gtest_color=no --gtest_filter='*Int4*:CudaOpsParity.*Linear*' ;;
        int4_moe) run moe_int4_lab "$B/moe_int4_lab" 1
                  run gpu_tests_int4 "$B/qs_gpu_tests" --gtest_color=no --gtest_filter='*Int4*' ;;
        int4_scratch) run moe_int4_lab_scratch "$B/moe_int4_lab" 1 --scratch
                      run gpu_tests_int4_scratch "$B/qs_gpu_tests" --gtest_color=no \
                          --gtest_filter='CudaInt4.*Bf16Copies*:CudaInt4.*MixedInput*' ;;
        single_int4_nocopies) run single_int4_nocopies "$B/gpu_forward_bench" --model builtin:qwen36-35b-a3b --load-format dummy \
                          --no-mtp --mode single --prompt 4096 --decode-steps 32 --dummy-format int4-w4a16 \
                          --int4-expert-copies none ;;
        prefill16k) for r in ${PREFILL16K_REPS:-a b}; do
                        for v in ${PREFILL16K_VARIANTS:-int4-w4a16 nvfp4 fp8-block}; do
                            fmt="${v%%,*}"; extra=""; [ "$v" != "$fmt" ] && extra="${v#*,}"
                            run "prefill16k_$(printf %s "$v" | tr -c 'A-Za-z0-9' '_')$r" "$B/gpu_forward_bench" \
                                --model builtin:qwen36-35b-a3b --load-format dummy --no-mtp --mode single --prompt 16000 \
                                --decode-steps 8 --dummy-format "$fmt" --int4-expert-copies none --gdn-state-dtype bf16 \
                                --kv-cache-dtype fp8_e4m3 ${extra//,/ }
                        done
                    done ;;
        single_int4_4k) run single_int4_4k "$B/gpu_forward_bench" --model builtin:qwen36-35b-a3b --load-format dummy \
                            --no-mtp --mode single --prompt 4096 --decode-steps 32 --dummy-format int4-w4a16 ;;
        profile_int4) run profile_int4 "$B/gpu_forward_bench" --model builtin:qwen36-35b-a3b --load-format dummy --no-mtp \
                          --mode profile --dummy-format int4-w4a16 ;;
        profile_int4_grouped) run profile_int4_grouped "$B/gpu_forward_bench" --model builtin:qwen36-35b-a3b \
                                  --load-format dummy --no-mtp --mode profile --dummy-format int4-w4a16 --moe-int4-grouped 1 ;;
        profile_fp8) run profile_fp8 "$B/gpu_forward_bench" --model builtin:qwen36-35b-a3b --load-format dummy --no-mtp \
                         --mode profile --dummy-format fp8-block ;;
        batch_int4) run batch_int4 "$B/gpu_forward_bench" --model builtin:qwen36-35b-a3b --load-format dummy --no-mtp \
                        --mode batch --dummy-format int4-w4a16 ;;
        batch_int4_grouped) run batch_int4_grouped "$B/gpu_forward_bench" --model builtin:qwen36-35b-a3b --load-format dummy \
                                --no-mtp --mode batch --dummy-format int4-w4a16 --moe-int4-grouped 1 ;;
        batch_fp8) run batch_fp8 "$B/gpu_forward_bench" --model builtin:qwen36-35b-a3b --load-format dummy --no-mtp \
                       --mode batch --dummy-format fp8-block ;;
        single_int4) run single_int4 "$B/gpu_forward_bench" --model builtin:qwen36-35b-a3b --load-format dummy --no-mtp \
                         --mode single --dummy-format int4-w4a16 ;;
        moe_small) run moe_lab_small "$B/moe_lab" 1 --small
                   run gpu_tests_moe "$B/qs_gpu_tests" --gtest_color=no \
                       --gtest_filter='*MoE*:*Moe*:CudaModel.TinyModelGreedy64MatchesTransformers*' ;;
        moe_prefill) run moe_lab_prefill "$B/moe_lab" 1 --prefill
                     run gpu_tests_moe "$B/qs_gpu_tests" --gtest_color=no --gtest_filter='*MoE*:*Moe*' ;;
        moe_decode) run moe_lab_decode "$B/moe_lab" 1 --decode
                    run gpu_tests_moe "$B/qs_gpu_tests" --gtest_color=no --gtest_filter='*MoE*:*Moe*' ;;
        gdn_decode) run gdn_lab_decode "$B/gdn_lab" --decode
                    run gpu_tests_gdn "$B/qs_gpu_tests" --gtest_color=no --gtest_filter='*GatedDeltaNet*' ;;
        gdn_dec2) run gdn_lab_decode_v2 "$B/gdn_lab" --decode
                  run gpu_tests_gdn_dec2 "$B/qs_gpu_tests" --gtest_color=no --gtest_filter='*GatedDeltaNet*' ;;
        gdn_dec2_step) for v in 1 2; do
                           run "gdn_dec2_step_v$v" "$B/gpu_forward_bench" --model builtin:qwen36-35b-a3b --load-format dummy \
                               --dummy-format fp8-block --gdn-state-dtype bf16 --kv-cache-dtype fp8_e4m3 --mode mtp \
                               --mtp-k 0 --mtp-seqs 512 --gdn-decode-version "$v"
                       done ;;
        gdn_slices) run gdn_lab_decode_slices "$B/gdn_lab" --decode
                    run gpu_tests_gdn_slices "$B/qs_gpu_tests" --gtest_color=no --gtest_filter='*GatedDeltaNet*:CudaModel.*:CudaGraphs*' ;;
        gdn_slices_rows) run gdn_lab_decode_rows "$B/gdn_lab" --decode
                         for v in 2 3; do
                             run "gdn_slices_rows_step_v$v" "$B/gpu_forward_bench" --model builtin:qwen36-35b-a3b --load-format dummy \
                                 --dummy-format fp8-block --gdn-state-dtype bf16 --kv-cache-dtype fp8_e4m3 --mode mtp \
                                 --mtp-k 0 --mtp-seqs 512 --gdn-slices-version "$v"
                         done ;;
        step512:*) opts="${stage#step512:}"; opts="${opts//,/ }"
                   fmt=(--dummy-format fp8-block); case " $opts " in *" --dummy-format "*) fmt=() ;; esac
                   tag=$(echo "${stage#step512:}" | tr -d '-' | tr ',' '_' | cut -c1-60)
                   # shellcheck disable=SC2086
                   run "step512_${tag:-default}" "$B/gpu_forward_bench" --model builtin:qwen36-35b-a3b --load-format dummy \
                       "${fmt[@]}" --gdn-state-dtype bf16 --kv-cache-dtype fp8_e4m3 --mode mtp --mtp-k 0 --mtp-seqs 512 $opts ;;
        moe_dec_step) for v in 1 2; do
                          run "moe_dec_step_v$v" "$B/gpu_forward_bench" --model builtin:qwen36-35b-a3b --load-format dummy \
                              --dummy-format fp8-block --gdn-state-dtype bf16 --kv-cache-dtype fp8_e4m3 --mode mtp \
                              --mtp-k 0 --mtp-seqs 512 --moe-decode-version "$v"
                      done ;;
        gdn_slices_step) for k in 1 0 -1; do
                             run "gdn_slices_step_k$k" "$B/gpu_forward_bench" --model builtin:qwen36-35b-a3b --load-format dummy \
                                 --dummy-format fp8-block --gdn-state-dtype bf16 --kv-cache-dtype fp8_e4m3 --mode mtp \
                                 --mtp-k 0 --mtp-seqs 512 --gdn-decode-kernel "$k"
                         done ;;
        gdn_tc) run gdn_lab_tc "$B/gdn_lab" --tc
                run gpu_tests_gdn "$B/qs_gpu_tests" --gtest_color=no --gtest_filter='*GatedDeltaNet*' ;;
        gdn_acc) run gdn_lab_tc "$B/gdn_lab" --tc
                 QS_TEST_GDN_PREFILL_VERSION="${GDN_ACC_VERSION:-3}" run "gpu_tests_gdn_v${GDN_ACC_VERSION:-3}" \
                     "$B/qs_gpu_tests" --gtest_color=no --gtest_filter='CudaModel.TransformersFixtures:CudaModel.EngineOnGpuEqualsSingleSequenceMmaSyncMoe:*/CudaOpsParity.GatedDeltaNetWithStateSlots/*'
                 grep -h "^\[fixture\]\|^\[engine\]\|^\[  FAILED\|^\[  PASSED\|Failure\|Which is\|out \|state " \
                     "$OUT/gpu_tests_gdn_v${GDN_ACC_VERSION:-3}.log" | head -60 >> "$summary" ;;
        attn_v2) run attention_lab_v2 "$B/attention_lab" 1 --v2
                 run gpu_tests_attn_v2 "$B/qs_gpu_tests" --gtest_color=no \
                     --gtest_filter='CudaAttentionV2*:*GatedAttention*' ;;
        sampling) run sampling_lab "$B/sampling_lab"
                  run gpu_tests_sampling "$B/qs_gpu_tests" --gtest_color=no --gtest_filter='CudaSampling*' ;;
        http:*) spec="${stage#http:}"; modes="${spec%%:*}"; serve_args=""; [ "$spec" != "$modes" ] && serve_args="${spec#*:}"
                tag=$(printf %s "$serve_args" | tr -c 'A-Za-z0-9.' '_' | sed 's/__*/_/g; s/_benchmark_mtp_acceptance_/_acc/; s/_num_speculative_tokens_/k/')
                STAGE_TIMEOUT=${HTTP_TIMEOUT:-560} run "http_${tag:-base}" bash scripts/gpu_serve_bench.sh \
                    --requests "${HTTP_REQUESTS:-1024}" --clients "${HTTP_CLIENTS:-1280}" --name "fp8_lean${tag:+_$tag}" \
                    --single "${HTTP_SINGLE:-0}" \
                    --serve "$serve_args" ${modes//,/ } ;;
        grammar_masks) [ -f .carry/qwen36-tok/tokenizer.json ] || { mkdir -p .carry/qwen36-tok && tar -C .carry/qwen36-tok -xJf .carry/qwen36-tok.tar.xz; }
                       run grammar_masks_json "$B/grammar_mask_bench" --tokenizer .carry/qwen36-tok --threads 16 --reps 3 \
                           --walk 16 --rows 1,8,32,128,512
                       run grammar_masks_regex "$B/grammar_mask_bench" --tokenizer .carry/qwen36-tok --threads 16 --reps 3 \
                           --walk 16 --rows 1,8,32,128,512 --regex "[a-z ]+"
                       http_schema='{"type": "object", "properties": {"name": {"type": "string", "minLength": 1,
                           "maxLength": 40}, "age": {"type": "integer", "minimum": 0, "maximum": 150}, "notes": {"type":
                           "array", "minItems": 128, "items": {"type": "string", "minLength": 2, "maxLength": 40}}},
                           "required": ["name", "age", "notes"]}'
                       run grammar_masks_http_schema "$B/grammar_mask_bench" --tokenizer .carry/qwen36-tok --threads 16 \
                           --reps 3 --walk 32 --rows 1,8,32,128,512 --steps 32 --schema "$http_schema"
                       # The first compile with 16 xgrammar threads instead of the server's 2.
                       run grammar_masks_compile16 "$B/grammar_mask_bench" --tokenizer .carry/qwen36-tok --threads 16 \
                           --reps 1 --walk 0 --rows 1 --compile-threads 16 --schema "$http_schema" ;;
        bf16) run bench_bf16 "$B/gpu_forward_bench" --model builtin:qwen36-35b-a3b --load-format dummy --no-mtp ;;
        vision) run vision_encode "$B/gpu_vision_bench" --sizes 448,1024,2048 --reps 5 ;;
        fp8) run bench_fp8 "$B/gpu_forward_bench" --model builtin:qwen36-35b-a3b --load-format dummy --no-mtp \
                 --dummy-format fp8-block ;;
        single) run single_bf16 "$B/gpu_forward_bench" --model builtin:qwen36-35b-a3b --load-format dummy --no-mtp --mode single ;;
        single_fp8) run single_fp8 "$B/gpu_forward_bench" --model builtin:qwen36-35b-a3b --load-format dummy --no-mtp \
                        --mode single --dummy-format fp8-block ;;
        single_moev2) run single_bf16_moev2 "$B/gpu_forward_bench" --model builtin:qwen36-35b-a3b --load-format dummy \
                          --no-mtp --mode single --moe-small-version 2 ;;
        single_fp8_moev2) run single_fp8_moev2 "$B/gpu_forward_bench" --model builtin:qwen36-35b-a3b --load-format dummy \
                              --no-mtp --mode single --dummy-format fp8-block --moe-small-version 2 ;;
        single_nograph) run single_bf16_nograph "$B/gpu_forward_bench" --model builtin:qwen36-35b-a3b --load-format dummy \
                            --no-mtp --mode single --cuda-graph-max-batch 0 ;;
        bf16_nograph) run bench_bf16_nograph "$B/gpu_forward_bench" --model builtin:qwen36-35b-a3b --load-format dummy \
                          --no-mtp --cuda-graph-max-batch 0 ;;
        serve) run serve_smoke python3 scripts/gpu_serve_smoke.py "$B/qwenserve" ;;
        fp8_lean) run bench_fp8_lean "$B/gpu_forward_bench" --model builtin:qwen36-35b-a3b --load-format dummy --no-mtp \
                      --dummy-format fp8-block --gdn-state-dtype bf16 --kv-cache-dtype fp8_e4m3 ;;
        profile) run profile_bf16 "$B/gpu_forward_bench" --model builtin:qwen36-35b-a3b --load-format dummy --no-mtp \
                     --mode profile ;;
        profile_int4_lean) run profile_int4_lean "$B/gpu_forward_bench" --model builtin:qwen36-35b-a3b --load-format dummy \
                              --no-mtp --mode profile --dummy-format int4-w4a16 --gdn-state-dtype bf16 --kv-cache-dtype fp8_e4m3 ;;
        profile_fp8_lean) run profile_fp8_lean "$B/gpu_forward_bench" --model builtin:qwen36-35b-a3b --load-format dummy \
                              --no-mtp --mode profile --dummy-format fp8-block --gdn-state-dtype bf16 --kv-cache-dtype fp8_e4m3 ;;
        profile_fp8_lean_dec2) run profile_fp8_lean_dec2 "$B/gpu_forward_bench" --model builtin:qwen36-35b-a3b --load-format dummy \
                                   --no-mtp --mode profile --dummy-format fp8-block --gdn-state-dtype bf16 --kv-cache-dtype fp8_e4m3 \
                                   --moe-decode-version 2 ;;
        mtp_step) run mtp_step "$B/gpu_forward_bench" --model builtin:qwen36-35b-a3b --load-format dummy \
                      --dummy-format fp8-block --gdn-state-dtype bf16 --kv-cache-dtype fp8_e4m3 --mode mtp ${MTP_STEP_ARGS:-} ;;
        mtp_spare_tests) run mtp_spare_tests "$B/qs_gpu_tests" --gtest_color=no \
                       --gtest_filter='*GatedDeltaNetVerifyWritesSpareSlot*:*GatedDeltaNetDeferredVerifyAndCommit*:CudaGraphs.VerifyAndCommit*:CudaSampling.EngineMtp*' ;;
        mtp_spare) run mtp_spare "$B/gpu_forward_bench" --model builtin:qwen36-35b-a3b --load-format dummy \
                       --dummy-format fp8-block --gdn-state-dtype bf16 --kv-cache-dtype fp8_e4m3 --mode mtp \
                       --mtp-k 0,1 --mtp-acceptance 0,0.8 --mtp-seqs "${MTP_SPARE_SEQS:-1,512}" --mtp-spare-slots-list 0,512 ;;
        ncu_step|ncu_step:*) spec="${stage#ncu_step}"; spec="${spec#:}"; seqs="${spec%%:*}"; seqs="${seqs:-512}"
                  k=0; [ "$spec" != "${spec#*:}" ] && k="${spec#*:}"
                  run "ncu_step_${seqs}_k$k" ncu --profile-from-start off --clock-control none --csv \
                      --metrics "$ncu_metrics" \
                      --log-file "$OUT/ncu_step_${seqs}_k$k.csv" "$B/gpu_forward_bench" "${ncu_bench_args[@]}" \
                      --mtp-k "$k" --mtp-acceptance 0 --mtp-seqs "$seqs" ${NCU_EXTRA:-} ;;
        trace_step|trace_step:*) spec="${stage#trace_step}"; spec="${spec#:}"; seqs="${spec%%:*}"; seqs="${seqs:-1}"
                  k=0; [ "$spec" != "${spec#*:}" ] && k="${spec#*:}"
                  tag="trace_step_${seqs}_k$k"
                  trace_ready "$tag" || continue
                  CUDA_INJECTION64_PATH="$PWD/$B/libqs_kernel_trace.so" QS_KERNEL_TRACE_OUT="$OUT/$tag.csv" \
                  QS_KERNEL_TRACE_RANGE=profiler run "$tag" "$B/gpu_forward_bench" "${lean_model_args[@]}" --mode mtp \
                      --mtp-seqs "$seqs" --mtp-k "$k" --mtp-acceptance 0 --mtp-steps 32 --mtp-profiler-range ${TRACE_EXTRA:-}
                  if [ -f "$OUT/$tag.csv" ]; then
                      python3 tools/kernel_trace_summary.py "$OUT/$tag.csv" > "$OUT/$tag.md" 2>&1
                      [ "$(stat -c %s "$OUT/$tag.csv")" -gt 4000000 ] && xz -f "$OUT/$tag.csv"
                  fi ;;
        ncu_prefill) run ncu_prefill ncu --profile-from-start off --clock-control none --csv \
                         --metrics "$ncu_metrics" \
                         --log-file "$OUT/ncu_prefill.csv" "$B/gpu_forward_bench" "${ncu_model_args[@]}" \
                         --no-mtp --mode profile --profile-ncu-case prefill16x1024 ${NCU_EXTRA:-} ;;
        ncu_detail:*) spec="${stage#ncu_detail:}"; regex="${spec%%:*}"; seqs=512; [ "$spec" != "$regex" ] && seqs="${spec#*:}"
                      tag="$(printf %s "$regex" | tr -c 'A-Za-z0-9_' '_')_$seqs"
                      run "ncu_detail_$tag" ncu --profile-from-start off --clock-control none --set full \
                          --import-source no -k "regex:$regex" --launch-skip "${NCU_SKIP:-0}" --launch-count "${NCU_COUNT:-3}" \
                          -f -o "$OUT/ncu_detail_$tag" \
                          "$B/gpu_forward_bench" "${ncu_bench_args[@]}" --mtp-k 0 --mtp-seqs "$seqs" ${NCU_EXTRA:-}
                      ncu -i "$OUT/ncu_detail_$tag.ncu-rep" --page details > "$OUT/ncu_detail_$tag.txt" 2>&1
                      ncu -i "$OUT/ncu_detail_$tag.ncu-rep" --page source --print-source sass --csv \
                          > "$OUT/ncu_detail_${tag}_sass.csv" 2>&1 ;;
        int4_vs_fp8) for fmt in fp8-block int4-w4a16; do
                         int4_fmt_args=(--model builtin:qwen36-35b-a3b --load-format dummy --dummy-format "$fmt"
                                        --int4-expert-copies none --gdn-state-dtype bf16 --kv-cache-dtype fp8_e4m3
                                        --mode mtp --mtp-k 0 --mtp-acceptance 0)
                         run "one_stream_$fmt" "$B/gpu_forward_bench" "${int4_fmt_args[@]}" --mtp-seqs 1
                         run "step512_$fmt" "$B/gpu_forward_bench" "${int4_fmt_args[@]}" --mtp-seqs 512
                         trace_ready "trace1_$fmt" || continue
                         CUDA_INJECTION64_PATH="$PWD/$B/libqs_kernel_trace.so" QS_KERNEL_TRACE_OUT="$OUT/trace1_$fmt.csv" \
                         QS_KERNEL_TRACE_RANGE=profiler run "trace1_$fmt" "$B/gpu_forward_bench" "${int4_fmt_args[@]}" \
                             --mtp-seqs 1 --mtp-steps 32 --mtp-profiler-range
                         [ -f "$OUT/trace1_$fmt.csv" ] && python3 tools/kernel_trace_summary.py "$OUT/trace1_$fmt.csv" \
                             > "$OUT/trace1_$fmt.md" 2>&1
                     done ;;
        int4_lin) int4_lin_args=(--model builtin:qwen36-35b-a3b --load-format dummy --int4-expert-copies none
                                 --gdn-state-dtype bf16 --kv-cache-dtype fp8_e4m3 --mode mtp --mtp-k 0 --mtp-acceptance 0
                                 --mtp-seqs 1)
                  for r in ${INT4_LIN_REPS:-a b}; do
                      for v in ${INT4_LIN_VARIANTS:---int4-linear-version,2 --int4-linear-version,3}; do
                          run "one_stream_int4_$(printf %s "$v" | tr -c 'A-Za-z0-9' '_')$r" "$B/gpu_forward_bench" \
                              "${int4_lin_args[@]}" --dummy-format int4-w4a16 ${v//,/ }
                      done
                  done
                  run one_stream_fp8 "$B/gpu_forward_bench" "${int4_lin_args[@]}" --dummy-format fp8-block
                  for v in ${INT4_LIN_NVFP4:-}; do  # NVFP4 dummy weights at these --int4-linear-version values
                      run "one_stream_nvfp4_v$v" "$B/gpu_forward_bench" "${int4_lin_args[@]}" --dummy-format nvfp4 \
                          --int4-linear-version "$v"
                  done
                  tv="${INT4_LIN_TRACE:-3}"
                  [ "$tv" = none ] && continue
                  trace_ready "trace1_int4_v$tv" || continue
                  CUDA_INJECTION64_PATH="$PWD/$B/libqs_kernel_trace.so" QS_KERNEL_TRACE_OUT="$OUT/trace1_int4_v$tv.csv" \
                  QS_KERNEL_TRACE_RANGE=profiler run "trace1_int4_v$tv" "$B/gpu_forward_bench" "${int4_lin_args[@]}" \
                      --dummy-format int4-w4a16 --int4-linear-version "$tv" ${INT4_LIN_TRACE_EXTRA//,/ } --mtp-steps 32 \
                      --mtp-profiler-range
                  [ -f "$OUT/trace1_int4_v$tv.csv" ] && python3 tools/kernel_trace_summary.py "$OUT/trace1_int4_v$tv.csv" \
                      > "$OUT/trace1_int4_v$tv.md" 2>&1 ;;
        tests:*) run "gpu_tests_$(printf %s "${stage#tests:}" | tr -c 'A-Za-z0-9_' '_')" "$B/qs_gpu_tests" --gtest_color=no --gtest_filter="${stage#tests:}" ;;
        *) echo "unknown stage $stage" | tee -a "$summary" ;;
    esac
done
echo "---- summary"; cat "$summary"
for f in "$OUT"/*.log; do echo "---- tail $f"; tail -n ${TAIL_LINES:-25} "$f"; done
# The device returns at most 8 files from $OUT: past 7, everything also goes into one logs.tgz and
# only it and the summary stay (session 17 lost two requests' logs to that limit).
if [ "$(find "$OUT" -type f | wc -l)" -gt 7 ]; then
    tar -C "$OUT" -czf /tmp/gpu_run_logs.tgz . && find "$OUT" -type f ! -name summary.txt -delete &&
        mv /tmp/gpu_run_logs.tgz "$OUT/logs.tgz" && echo "---- $OUT packed into logs.tgz (8-file limit)"
fi
