#!/usr/bin/env bash
# The main job: sets up, builds, starts the OpenAI-compatible server on the embedded default
# model (models/qwen36-tiny, CPU backend) on a fixed loopback port, waits for /health, sends one
# chat completion with curl and prints the reply, then stops the server with SIGTERM.
# Exits non-zero if any step fails (including a server that does not exit cleanly).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh --target qwenserve  # the demo needs the server alone

PORT=18437
BASE="http://127.0.0.1:$PORT"
LOG=build/run_main_server.log
build/qwenserve serve --model models/qwen36-tiny --served-model-name qwen36-tiny --host 127.0.0.1 --port "$PORT" \
  >"$LOG" 2>&1 &
SERVER=$!
# Whatever happens below, the server does not outlive this script.
trap 'kill "$SERVER" 2>/dev/null || true' EXIT

# Bounded wait for readiness (the tiny model loads in well under a second).
for _ in $(seq 1 300); do
  if curl -sf "$BASE/health" >/dev/null; then break; fi
  if ! kill -0 "$SERVER" 2>/dev/null; then echo "run_main: the server exited:"; cat "$LOG"; exit 1; fi
  sleep 0.1
done
curl -sf "$BASE/health" >/dev/null || { echo "run_main: /health not 200 after 30 s"; cat "$LOG"; exit 1; }
echo "run_main: server up at $BASE ($(grep -o 'capacity: .*' "$LOG" | head -1))"

REQUEST='{"model": "qwen36-tiny", "temperature": 0, "max_tokens": 64,
  "messages": [{"role": "user", "content": "What does `join` in the `posixpath` module do?"}]}'
echo "run_main: POST /v1/chat/completions $REQUEST"
REPLY=$(curl -sf "$BASE/v1/chat/completions" -H 'Content-Type: application/json' -d "$REQUEST")
echo "$REPLY" | .venv/bin/python -c '
import json, sys
r = json.load(sys.stdin)
m = r["choices"][0]["message"]
print("reasoning:", (m.get("reasoning_content") or "").strip())
print("reply:    ", m["content"])
print("finish_reason:", r["choices"][0]["finish_reason"], " usage:", r["usage"])
'

kill -TERM "$SERVER"
wait "$SERVER"  # set -e: a non-zero exit status fails the job
trap - EXIT
echo "run_main: server stopped cleanly"
