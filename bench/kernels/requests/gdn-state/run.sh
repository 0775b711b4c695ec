#!/usr/bin/env bash
# GPU request of branch gdn-state (GDN prefill version 6: version 5 with the state pass at 64 value
# columns per 8-warp block by shape, bit-identical to version 5; bench/kernels/NOTES.md "GDN state
# pass toward its byte floor"). Run from the root of a tree with tests/data and models/qwen36-tiny
# (main's) as
#   BUNDLE=<unpacked gpu bundle: gdn_lab qs_gpu_tests [gpu_forward_bench]> OUT=<log dir> bash run.sh
# Bundle: QS_JOBS=1 bash scripts/build_gpu_bundle.sh gdn_lab qs_gpu_tests   (+ gpu_forward_bench for FULL=1)
# Correctness first, then timings; <= 150 s without FULL=1 (hard timeouts). Everything under $OUT
# ends in one $OUT/logs.tgz (the device returns at most 8 files).
set -u
: "${BUNDLE:?}" "${OUT:?}"
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$BUNDLE:${LD_LIBRARY_PATH:-}"
export QS_SOURCE_DIR="$PWD"
sum="$OUT/summary.txt"
: > "$sum"
nvidia-smi -L > "$OUT/device.txt" 2>&1
run() {  # name, seconds, command...
    local name=$1 lim=$2
    shift 2
    timeout "$lim" stdbuf -oL -eL "$@" > "$OUT/$name.log" 2>&1
    echo "$name rc=$?" >> "$sum"
}
# 1. Lab: versions 2, 4, 5 and 6 (64 columns forced) on the varlen mix against the CPU reference,
#    version 5's bits against 4's and 6's against 5's, then 16 x 1,024, 1 x 16,384 and 64 x 256
#    timed: total, conv, recurrence and each of prep / state pass / output alone, v2 / v4 / v5 / v6
#    (v6 by shape: 64 columns at 16 x 1,024 and 64 x 256, 16 at 1 x 16,384 = version 5 there).
run lab_tc_speed 85 "$BUNDLE/gdn_lab" --tc-speed 7
# 2. GPU parity: version 6 bit for bit against version 5 and both against the CPU (fp32 and bf16
#    state; the tiny and real shapes; the real shape's 16-sequence batches take 64 columns), and the
#    option's choice test.
run gtest_gdn 55 "$BUNDLE/qs_gpu_tests" \
    --gtest_filter='*CudaOpsParity.GatedDeltaNetPrefillVersion6EqualsVersion5*:CudaOptionsChoice.GdnPrefillVersionFollowsStateStorage'
# 3. Only with FULL=1 (more device time; gpu_forward_bench in the bundle): GPU time per op of a
#    16 x 1,024 and a 16,384-token prefill on an 8-layer dummy model (6 GDN layers), bf16 state,
#    versions 5 and 6.
if [ "${FULL:-0}" = 1 ]; then
    common=(--model builtin:qwen36-35b-a3b --load-format dummy --num-layers 8 --no-mtp --mode profile
            --gdn-state-dtype bf16)
    run profile_v5 150 "$BUNDLE/gpu_forward_bench" "${common[@]}" --gdn-prefill-version 5
    run profile_v6 150 "$BUNDLE/gpu_forward_bench" "${common[@]}" --gdn-prefill-version 6
fi
{
    echo "== summary"
    cat "$sum"
    echo "== lab"
    grep -E "FAIL|bit-identical|^PASS" "$OUT/lab_tc_speed.log" | head -20
    grep -E "^  tc/v[0-9]" "$OUT/lab_tc_speed.log" | head -30
    sed -n '/^| case | path/,$p' "$OUT/lab_tc_speed.log"
    echo "== gtest"
    grep -E "^\[  (PASSED|FAILED) |FAILED  \]|\[       OK \]" "$OUT/gtest_gdn.log" | head -30
} > "$OUT/short.txt" 2>&1
cat "$OUT/short.txt"
(cd "$OUT" && tar -czf logs.tgz --exclude=logs.tgz . && find . -type f ! -name logs.tgz -delete)
