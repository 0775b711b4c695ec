#!/usr/bin/env bash
# GPU request of branch nvfp4-gpu (NVFP4 read as 4-bit; CudaOptions::nvfp4_kernels). Run from the
# root of a tree with tests/data (main's): BUNDLE=<unpacked bundle: qs_gpu_tests int4_gemv_lab
# moe_int4_lab> OUT=<log dir> bash run.sh. Parity first, then timings; at most 185 s in all
# (150 without FULL=1 plus the parity). Everything under $OUT ends in one $OUT/logs.tgz (the device
# returns at most 8 files).
set -u
: "${BUNDLE:?}" "${OUT:?}"
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$BUNDLE:${LD_LIBRARY_PATH:-}"
nvidia-smi -L > "$OUT/device.txt" 2>&1
run() {  # name timeout_s command...
    local name=$1 t=$2
    shift 2
    timeout "$t" stdbuf -oL -eL "$@" > "$OUT/$name.log" 2>&1
    echo "$name rc=$?" | tee -a "$OUT/summary.txt"
}
# 1. Parity: the NVFP4 kernels against the CPU specification (fixtures of ModelOpt and
#    compressed-tensors through the kernel; real shapes through CudaOps with the option on/off),
#    then the INT4 tests the templating touched (must stay green).
run nvfp4_tests 50 "$BUNDLE/qs_gpu_tests" --gtest_filter='CudaNvfp4*'
run int4_tests 40 "$BUNDLE/qs_gpu_tests" --gtest_filter='CudaInt4.LinearsTakeTheInt4KernelUpTo8Rows:CudaInt4.MoeSmallTAndGroupedGemm:CudaInt4Fixture.*'
# 2. Dense small-rows: int4 rpw1/2/4 | nvfp4 rpw1/2/4 | fp8 | bf16 per shape and T (+ the checks).
run int4_gemv_lab 60 "$BUNDLE/int4_gemv_lab"
# 3. MoE small-T: NVFP4 experts packed vs their BF16 copies vs FP8, T = 1, 2, 4, 8.
run moe_nvfp4_lab 35 "$BUNDLE/moe_int4_lab" 1 --nvfp4
# 4. Only with FULL=1 (a session with more device time; needs gpu_forward_bench in the bundle): one
#    stream's decode on 8-layer dummy models, NVFP4 with the option off (BF16 copies) and on, INT4
#    and FP8 beside (the same prompt and steps; ms/token in each log's summary).
if [ "${FULL:-0}" = 1 ]; then
    common=(--model builtin:qwen36-35b-a3b --load-format dummy --num-layers 8 --no-mtp --mode single)
    run single_nvfp4_off 150 "$BUNDLE/gpu_forward_bench" "${common[@]}" --dummy-format nvfp4 --nvfp4-kernels 0
    run single_nvfp4_on 150 "$BUNDLE/gpu_forward_bench" "${common[@]}" --dummy-format nvfp4 --nvfp4-kernels 1
    run single_int4 150 "$BUNDLE/gpu_forward_bench" "${common[@]}" --dummy-format int4-w4a16
    run single_fp8 150 "$BUNDLE/gpu_forward_bench" "${common[@]}" --dummy-format fp8-block
fi
echo "--- summary"
cat "$OUT/summary.txt"
grep -h "FAIL\|PASSED\|FAILED\|^PASS" "$OUT"/*.log | tail -20
grep -h "T=1:" "$OUT/int4_gemv_lab.log" | head -5
grep -hE "^ +[1248] +(bf16|fp8|nvfp4)" "$OUT/moe_nvfp4_lab.log"
(cd "$OUT" && tar -czf logs.tgz --exclude=logs.tgz . && find . -type f ! -name logs.tgz -delete)
