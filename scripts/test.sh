#!/usr/bin/env bash
# Sets up, builds and runs every test (the README's test command; .ci/run runs this), then the
# sanitizer and fuzz jobs (scripts/test_sanitizers.sh, docs/RELIABILITY.md).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh -DQS_WERROR=ON  # a warning in project code fails CI
export PATH="$PWD/.venv/bin:$PATH"
(cd build && ctest --output-on-failure -j "$(nproc)" --timeout 900)
bash scripts/test_sanitizers.sh
