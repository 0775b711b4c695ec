#!/usr/bin/env bash
# Sets up, builds and runs every test (the README's test command; .ci/run runs this).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh -DQS_WERROR=ON  # a warning in project code fails CI
export PATH="$PWD/.venv/bin:$PATH"
cd build
ctest --output-on-failure -j "$(nproc)" --timeout 900
