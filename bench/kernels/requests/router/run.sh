#!/usr/bin/env bash
# The router branch's control run (bench/kernels/NOTES.md "The model-level failures are not
# routing near-ties"): the three model-level tests that failed with the tensor-core router, with
# it off (QS_TEST_MOE_ROUTER_KERNEL=0) and on at every size (=2), on one bundle; then the MoE and
# router parity tests with it on. Run from the repo root of a tree that has models/qwen36-tiny and
# tests/data/parity: BUNDLE=<dir with qs_gpu_tests> OUT=<log dir> bash run.sh   (~2 minutes)
set -u
: "${BUNDLE:?}" "${OUT:?}"
export QS_SOURCE_DIR="$PWD" LD_LIBRARY_PATH="$BUNDLE:${LD_LIBRARY_PATH:-}"
models='CudaModel.TransformersFixtures:CudaModel.EngineOnGpuEqualsSingleSequence*'
for r in 0 2; do
    QS_TEST_MOE_ROUTER_KERNEL=$r timeout 240 "$BUNDLE/qs_gpu_tests" --gtest_color=no --gtest_filter="$models" \
        > "$OUT/models_router$r.log" 2>&1
    echo "models, router $r: rc=$?"
done
QS_TEST_MOE_ROUTER_KERNEL=2 timeout 240 "$BUNDLE/qs_gpu_tests" --gtest_color=no \
    --gtest_filter='CudaRouter*:*CudaOpsParity.MoE*:*CudaOpsParity.MoeBothGroupedGemmPaths*' > "$OUT/parity_router2.log" 2>&1
echo "parity, router 2: rc=$?"
for r in 0 2; do
    echo "== router $r"
    grep -E "^\[fixture\]|^\[engine\]|FAILED  \]" "$OUT/models_router$r.log"
done
