#!/usr/bin/env bash
# Sets up, builds and runs the main job on the embedded default model (models/qwen36-tiny).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
build/qwenserve generate --model models/qwen36-tiny --prompt-ids 1,2,3,4,5 --max-tokens 32
