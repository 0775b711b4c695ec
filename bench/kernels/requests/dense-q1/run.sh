#!/usr/bin/env bash
# GPU request of branch dense-q1: Ops::linears / Gemm::linears (issue 14 item 4; CudaOptions::
# shared_linear_input). Bundle: `QS_JOBS=1 bash scripts/build_gpu_bundle.sh qs_gpu_tests fp8_gemm_lab`
# on this branch. Run from the root of a tree with models/ and tests/data (main's is fine):
#   BUNDLE=<unpacked bundle> OUT=<log dir> bash run.sh        (~100 s; the step timeouts sum to 135 s)
# Order: correctness first (the op-level bitwise test, the existing linear parity tests, the
# model-level tests on the new path and on the default), then the lab's shared-input table alone,
# then its whole prefill mode (per-shape table, then the shared-input table again).
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
step op_tests 30 "$BUNDLE/qs_gpu_tests" --gtest_color=no \
    --gtest_filter='CudaSharedLinears.*:CudaOpsParity.*Linear*'
QS_TEST_SHARED_LINEAR_INPUT=1 step model_tests_shared 20 "$BUNDLE/qs_gpu_tests" --gtest_color=no \
    --gtest_filter='CudaModel.*'
step model_tests_default 20 "$BUNDLE/qs_gpu_tests" --gtest_color=no --gtest_filter='CudaModel.*'
step fp8_shared 25 "$BUNDLE/fp8_gemm_lab" 1 --shared
step fp8_prefill 40 "$BUNDLE/fp8_gemm_lab" 2 --prefill
{
    echo "== steps"
    cat "$OUT/steps.txt"
    echo "== gtest"
    grep -H "^\[  PASSED\|^\[  FAILED\|tests ran" "$OUT"/op_tests.log "$OUT"/model_tests_*.log
    echo "== lab --shared: shared input, old vs new (seed 1)"
    sed -n '/^shared input/,$p' "$OUT/fp8_shared.log"
    echo "== lab --prefill: per shape (whole call / quantisation alone / GEMM alone), then shared input (seed 2)"
    sed -n '/^prefill timings/,$p' "$OUT/fp8_prefill.log"
} > "$OUT/summary.txt"
cat "$OUT/summary.txt"
