#!/usr/bin/env bash
# GPU request of branch dense-q1: Ops::linears / Gemm::linears (issue 14 item 4; CudaOptions::
# shared_linear_input). Bundle: `QS_JOBS=1 bash scripts/build_gpu_bundle.sh qs_gpu_tests fp8_gemm_lab`
# on this branch. Run from the root of a tree with models/ and tests/data (main's is fine):
#   BUNDLE=<unpacked bundle> OUT=<log dir> bash run.sh        (~100 s; the step timeouts sum to 140 s)
# Order: correctness first (the op-level bitwise test, the existing linear parity tests, the
# model-level tests on the new path and on the default), then the lab's prefill tables.
set -u
: "${BUNDLE:?BUNDLE=<unpacked gpu bundle>}" "${OUT:?OUT=<log dir>}"
mkdir -p "$OUT"
: > "$OUT/steps.txt"
step() {
    local name=$1 limit=$2 t0=$SECONDS
    shift 2
    timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
    echo "$name rc=$? $((SECONDS - t0))s" >> "$OUT/steps.txt"
}
step op_tests 35 "$BUNDLE/qs_gpu_tests" --gtest_color=no \
    --gtest_filter='CudaSharedLinears.*:CudaOpsParity.*Linear*'
QS_TEST_SHARED_LINEAR_INPUT=1 step model_tests_shared 25 "$BUNDLE/qs_gpu_tests" --gtest_color=no \
    --gtest_filter='CudaModel.*'
step model_tests_default 25 "$BUNDLE/qs_gpu_tests" --gtest_color=no --gtest_filter='CudaModel.*'
step fp8_prefill 55 "$BUNDLE/fp8_gemm_lab" 1 --prefill
{
    echo "== steps"
    cat "$OUT/steps.txt"
    echo "== gtest"
    grep -H "^\[  PASSED\|^\[  FAILED\|tests ran" "$OUT"/op_tests.log "$OUT"/model_tests_*.log
    echo "== lab: prefill table (whole call / quantisation alone / GEMM alone)"
    sed -n '/^prefill timings/,/^shared input/p' "$OUT/fp8_prefill.log"
    echo "== lab: shared input, old vs new"
    sed -n '/^shared input/,$p' "$OUT/fp8_prefill.log"
} > "$OUT/summary.txt"
cat "$OUT/summary.txt"
