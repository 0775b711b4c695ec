#!/usr/bin/env bash
# check_includes.sh must be able to fail: on a scratch tree it must report a new violation (an
# include of engine/ from bench/), accept a listed one, and report a listed one that is gone.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/src/bench" "$tmp/src/backend" "$tmp/src/engine"
printf '#include "core/status.h"\n#include "engine/engine_config.h"\n' >"$tmp/src/bench/sweep_grid.cpp"
printf '#include "model/weights.h"\n' >"$tmp/src/backend/ops.h"
printf '#include "backend/ops.h"\n' >"$tmp/src/engine/engine.cpp"  # allowed: engine sits above backend
printf 'src/backend/ops.h: model/weights.h\n' >"$tmp/known.txt"

expect() {  # expect EXIT_CODE NEEDLE: runs the check on the scratch tree
  local out rc=0
  out=$(bash "$here/check_includes.sh" "$tmp/src" "$tmp/known.txt" 2>&1) || rc=$?
  if [ "$rc" -ne "$1" ] || ! grep -qF -- "$2" <<<"$out"; then
    echo "self-test: wanted exit $1 and '$2', got exit $rc:" >&2
    echo "$out" >&2
    exit 1
  fi
}

expect 1 "layering violation: src/bench/sweep_grid.cpp: engine/engine_config.h"
printf '#include "config/engine_options.h"\n' >"$tmp/src/bench/sweep_grid.cpp"
expect 0 "1 known violations, no new ones"
printf '#include "backend/ops.h"\n' >"$tmp/src/backend/ops.h"
expect 1 "known violation is gone, delete its line from known.txt: src/backend/ops.h: model/weights.h"
echo "self-test: ok"
