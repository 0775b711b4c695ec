#!/usr/bin/env bash
# Configures and builds qwenserve into build/ (Release).
# Usage: scripts/build.sh [--target NAME]... [cmake configure arguments]
#   --target NAME   build only NAME (repeatable; default: every target: the server, tests,
#                   benchmarks). scripts/run_main.sh builds --target qwenserve alone.
#   -DQS_WERROR=ON  warnings in project code are errors (scripts/test.sh, CI).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
targets=()
configure=()
while [ $# -gt 0 ]; do
  case "$1" in
    --target) targets+=(--target "${2:?--target needs a name}"); shift 2 ;;
    *) configure+=("$1"); shift ;;
  esac
done
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${configure[@]}" >/dev/null
cmake --build build -j "$jobs" "${targets[@]}"
