#!/usr/bin/env bash
# Sanitizer and fuzz jobs (docs/RELIABILITY.md), run by scripts/test.sh after the normal tests:
#   build-asan/  clang ASan+UBSan: the unit, engine, server and tokenizer suites, then each
#                libFuzzer harness of tests/fuzz for QS_FUZZ_SECONDS (default 20) from its seed
#                corpus (tests/fuzz/corpus/<name>/);
#   build-tsan/  clang TSan: the tests that run threads (qs_tsan_tests, below).
# Both without CUDA and without src/cli, src/bench (QS_CORE_LIB_ONLY). Any sanitizer report fails
# the test or harness that hit it. Usage: test_sanitizers.sh [asan|tsan|fuzz]... (default: all).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
fuzz_seconds=${QS_FUZZ_SECONDS:-20}
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(asan fuzz tsan)
want() { [[ " ${steps[*]} " == *" $1 "* ]]; }

# TSan: the HTTP server with concurrent clients (I/O threads, workers, the fake engine's thread,
# disconnects and aborts) and the real engine's loop thread with submit/abort/stats from others:
# the qs_tsan_tests binary (its files are listed in tests/CMakeLists.txt), label tsan.

# clang (CXX is read when a build directory is first configured).
export CXX=clang++
cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS=-gline-tables-only -DQS_CUDA=OFF -DQS_CORE_LIB_ONLY=ON -DQS_BUILD_BENCH=OFF
            -DQS_HTTPS_FETCH=OFF)
if command -v ccache >/dev/null; then cmake_args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
supp="$PWD/tests/sanitizers"
fuzzers=()
for f in tests/fuzz/*_fuzz.cpp; do fuzzers+=("$(basename "$f" .cpp)"); done

timed() {  # timed LABEL CMD...: runs CMD, prints how long it took
    local t0=$SECONDS
    "${@:2}"
    echo "sanitizers: $1 took $((SECONDS - t0)) s"
}

export ASAN_OPTIONS="detect_leaks=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$supp/ubsan.supp"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$supp/tsan.supp"

if want asan || want fuzz; then
    cmake -S . -B build-asan "${cmake_args[@]}" -DQS_SANITIZE=ON -DQS_FUZZ=ON >/dev/null
    targets=()
    want asan && targets+=(qs_unit_tests qs_engine_tests qs_server_tests qs_tokenizer_tests)
    want fuzz && targets+=("${fuzzers[@]}")
    timed "asan build" cmake --build build-asan -j "$jobs" --target "${targets[@]}"
fi
if want asan; then
    # Left out: BatchCli drives the qwenserve binary, which this build has not; MtpTrained and
    # MtpFork run the 20M-parameter trained model, minutes each under ASan on two cores, for
    # engine paths (MTP verify, forks) the dummy-model tests cover too.
    timed "asan tests" ctest --test-dir build-asan --output-on-failure -j "$jobs" --timeout 900 \
        -L '^(unit|engine|server|tokenizer)$' -E '^(BatchCli|MtpTrained|MtpFork)\.'
fi
if want fuzz; then
    for name in "${fuzzers[@]}"; do
        corpus="tests/fuzz/corpus/${name%_fuzz}"
        work="build-asan/fuzz-work/${name%_fuzz}"
        rm -rf "$work" && mkdir -p "$work/new"
        # New inputs go to $work/new (not the committed corpus); a crash is written to
        # $work/crash-* and fails the job: add it to the corpus as a regression seed once fixed.
        t0=$SECONDS
        if ! "build-asan/fuzz/$name" -max_total_time="$fuzz_seconds" -timeout=10 -rss_limit_mb=2048 \
                -artifact_prefix="$work/" "$work/new" "$corpus" >"$work/log" 2>&1; then
            tail -n 60 "$work/log"
            echo "sanitizers: $name failed; input in $work/crash-* (or timeout-*, oom-*)"
            exit 1
        fi
        echo "sanitizers: fuzz $name: $(grep -m1 -oE 'Done [0-9]+ runs' "$work/log"), $((SECONDS - t0)) s"
    done
fi
if want tsan; then
    cmake -S . -B build-tsan "${cmake_args[@]}" -DQS_TSAN=ON >/dev/null
    timed "tsan build" cmake --build build-tsan -j "$jobs" --target qs_tsan_tests
    # libomp is not instrumented: one OpenMP thread (the tiny models never fork anyway).
    OMP_NUM_THREADS=1 timed "tsan tests" ctest --test-dir build-tsan --output-on-failure -j "$jobs" \
        --timeout 900 -L '^tsan$'
fi
echo "sanitizers: ok"
