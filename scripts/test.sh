#!/usr/bin/env bash
# Sets up, builds and runs every test (the README's test command; .ci/run runs this), then the
# sanitizer and fuzz jobs (scripts/test_sanitizers.sh, docs/RELIABILITY.md).
set -euo pipefail
cd "$(dirname "$0")/.."
timed() {  # timed LABEL CMD...: runs CMD, prints how long it took (CI's time budget is watched per stage)
    local t0=$SECONDS
    "${@:2}"
    echo "test.sh: $1 took $((SECONDS - t0)) s"
}
timed setup bash scripts/setup.sh
timed build bash scripts/build.sh -DQS_WERROR=ON  # a warning in project code fails CI
export PATH="$PWD/.venv/bin:$PATH"
(cd build && timed ctest ctest --output-on-failure -j "$(nproc)" --timeout 900)
timed sanitizers bash scripts/test_sanitizers.sh
