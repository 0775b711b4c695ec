#!/usr/bin/env bash
# Configures and builds qwenserve into build/ (Release). Extra arguments go to cmake configure.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build -j "$jobs"
