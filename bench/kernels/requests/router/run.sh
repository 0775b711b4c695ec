#!/usr/bin/env bash
# The router branch's check for the next GPU session (bench/kernels/NOTES.md "Router: the
# two-way split dithers"; README beside this file). From the repo root of a tree with
# models/qwen36-tiny and tests/data/parity:
#   BUNDLE=<dir with qs_gpu_tests and router_lab> OUT=<log dir> bash run.sh      (~1-2 minutes)
# Everything it writes is packed into $OUT/logs.tgz at the end.
set -u
: "${BUNDLE:?}" "${OUT:?}"
export QS_SOURCE_DIR="$PWD" LD_LIBRARY_PATH="$BUNDLE:${LD_LIBRARY_PATH:-}"
L="$OUT/logs"
mkdir -p "$L"
models='CudaModel.TransformersFixtures:CudaModel.EngineOnGpuEqualsSingleSequence*'
t() { echo "== $1: rc=$2 (${SECONDS}s)" | tee -a "$L/summary.txt"; }
# Steps in order of importance; each gets at most what is left of 140 s.
left() { local l=$((140 - SECONDS)); [ $l -gt 60 ] && l=60; [ $l -lt 1 ] && l=1; echo $l; }
# 1. The three model-level tests: router off (0), split copies uploaded but cuBLAS (1: the kernel
#    only from 4,096 rows, which these tests never reach), the kernel at every size (2).
for r in 0 1 2; do
    QS_TEST_MOE_ROUTER_KERNEL=$r timeout $(left) "$BUNDLE/qs_gpu_tests" --gtest_color=no --gtest_filter="$models" \
        > "$L/models_router$r.log" 2>&1
    t "models, router $r" $?
done
# 2. The same with the kernel on and every eager call compared with cuBLAS (suspicious rows
#    logged as "router check: ..."), graphs on (as the tests run) and off (every call compared).
QS_TEST_MOE_ROUTER_KERNEL=2 QS_TEST_MOE_ROUTER_CHECK=1 timeout $(left) "$BUNDLE/qs_gpu_tests" --gtest_color=no \
    --gtest_filter="$models" > "$L/models_router2_check.log" 2>&1
t "models, router 2, check" $?
QS_TEST_MOE_ROUTER_KERNEL=2 QS_TEST_MOE_ROUTER_CHECK=1 QS_TEST_GRAPH_MAX_BATCH=0 timeout $(left) "$BUNDLE/qs_gpu_tests" \
    --gtest_color=no --gtest_filter="$models" > "$L/models_router2_check_nographs.log" 2>&1
t "models, router 2, check, no graphs" $?
# 3. The call-by-call check as a test of its own, and the router / MoE parity tests with it on.
timeout $(left) "$BUNDLE/qs_gpu_tests" --gtest_color=no --gtest_filter='CudaRouterModel.*' > "$L/router_model.log" 2>&1
t "CudaRouterModel" $?
# 4 (before the parity tests, which may run long). The kernel's accuracy and time with the exact
#    three-term split of x (was 164 µs at 16,384 rows with a bf16 router, two terms).
[ -x "$BUNDLE/router_lab" ] && { timeout $(left) "$BUNDLE/router_lab" > "$L/router_lab.log" 2>&1; t "router_lab" $?; }
QS_TEST_MOE_ROUTER_KERNEL=2 timeout $(left) "$BUNDLE/qs_gpu_tests" --gtest_color=no \
    --gtest_filter='CudaRouter*:*CudaOpsParity.MoE*:*CudaOpsParity.MoeBothGroupedGemmPaths*' > "$L/parity_router2.log" 2>&1
t "parity, router 2" $?
{
    for f in models_router0 models_router1 models_router2 models_router2_check models_router2_check_nographs; do
        echo "== $f"
        grep -E "^\[fixture\]|^\[engine\]|FAILED  \]|router check" "$L/$f.log" | head -40
    done
    echo "== CudaRouterModel"
    grep -E "^\[router check\]|router check|FAILED  \]|PASSED" "$L/router_model.log" | head -20
    echo "== parity, router 2"
    grep -E "FAILED  \]|PASSED" "$L/parity_router2.log"
} >> "$L/summary.txt"
cat "$L/summary.txt"
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
