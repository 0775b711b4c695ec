#!/usr/bin/env bash
# GPU request of branch attn-dec (decode attention version 2; bench/kernels/NOTES.md "Decode
# version 2"). Run from the repository root (tests/data, models/qwen36-tiny) as
#   BUNDLE=<unpacked gpu-bundle of qs_gpu_tests + attention_lab> OUT=<log dir> bash run.sh
# Build the bundle with: QS_JOBS=1 bash scripts/build_gpu_bundle.sh qs_gpu_tests attention_lab
# Correctness first, then timings; <= 150 s in all (hard timeouts).
set -u
: "${BUNDLE:?}" "${OUT:?}"
mkdir -p "$OUT"
export QS_SOURCE_DIR="$PWD"
sum="$OUT/summary.txt"
: > "$sum"
run() {  # name, seconds, command...
    local name=$1 lim=$2
    shift 2
    timeout "$lim" stdbuf -oL -eL "$@" > "$OUT/$name.log" 2>&1
    echo "$name rc=$?" >> "$sum"
}
# 1. The lab: CPU-reference cases of version 2 (and its two lab-only variants), then v1 vs v2 timings.
run lab_decode 75 "$BUNDLE"/attention_lab 7 --decode
# 2. GPU parity: both versions against the CPU and each other (rows 1..4), the older attention tests.
run gtest_attention 30 "$BUNDLE"/qs_gpu_tests \
    --gtest_filter='*CudaOpsParity.*ttention*:CudaAttentionDecodeRows.*:*CudaMrope.*:CudaOptionsChoice.Attention*'
# 3. Model-level tests with version 2 forced (gpu_test_util.h apply_test_env).
run gtest_model_dec2 40 env QS_TEST_ATTENTION_DECODE_VERSION=2 "$BUNDLE"/qs_gpu_tests --gtest_filter='CudaModel.*'
{
    echo "== summary"
    cat "$sum"
    echo "== lab"
    grep -E "FAIL|ALL PASS|SOME FAILED" "$OUT/lab_decode.log" | head -20
    sed -n '/^decode v1 vs v2/,$p' "$OUT/lab_decode.log"
    echo "== gtest"
    grep -E "^\[  (PASSED|FAILED) |FAILED  \]" "$OUT/gtest_attention.log" "$OUT/gtest_model_dec2.log" | head -30
} | tee "$OUT/short.txt"
