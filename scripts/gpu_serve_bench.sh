#!/usr/bin/env bash
# The serving benchmark through HTTP on the GPU machine: `qwenserve serve --device cuda` on the
# full-size model with dummy weights, FP8 lean (fp8 block weights, bf16 GDN state, fp8 K/V),
# driven by `qwenserve bench` with the seed-replay fixture (chat prompts uniform in 256-1,792
# tokens, 256 completion tokens, thinking off, seed 1). Each MODE rewrites the fixture's sampling
# fields; each mode's summary lines go to standard output (the files stay in a temporary folder).
# Usage: bash scripts/gpu_serve_bench.sh [--requests N] [--clients C] [--serve "extra serve args"]
#            [--name NAME] [--single N] MODE...
#   --single N: after the modes, N requests of the first mode from one client (single stream).
#   MODE: greedy | sampled (T 0.7, top_p 0.95) | penalties (T 1, repetition 1.1, presence 0.5,
#         frequency 0.5) | logprobs (greedy, logprobs 5) | default (no sampling fields: T 1)
#         | json (greedy, response_format json_object: the grammar mask on every row; replies end
#           when the object closes, so fewer tokens than greedy) | regex (greedy, structured_outputs
#           regex "[a-z ]+" with min_tokens 256: a mask on every row and exactly greedy's 256
#           tokens per reply, the like-for-like cost of constraints) | schema (greedy, response_format
#           json_schema: an object with a maxLength string, an integer range and an array of at
#           least 128 length-bounded strings, min_tokens 256: a mask on every row, and the array
#           keeps the object open past 256 tokens, so replies are greedy's 256 tokens; if a reply
#           completed earlier, the completed grammar allows only the stop tokens and min_tokens
#           yields to it (engine/sample_rows.cpp), so it ends short, never hangs: compare the
#           "Output token" totals)
# Needs gpu-bundle/ (scripts/build_gpu_bundle.sh) and the Qwen3.6 tokenizer in .carry/qwen36-tok
# (tools/qwen36_tokenizer_json.py; travels compressed as .carry/qwen36-tok.tar.xz).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-gpu-logs}"
mkdir -p "$OUT"
B=gpu-bundle
requests=1024 clients=1280 extra="" name=fp8_lean port=18500 single=0
while [ $# -gt 0 ]; do
    case "$1" in
        --requests) requests="$2"; shift 2 ;;
        --clients) clients="$2"; shift 2 ;;
        --serve) extra="$2"; shift 2 ;;
        --name) name="$2"; shift 2 ;;
        --single) single="$2"; shift 2 ;;
        *) break ;;
    esac
done
source scripts/gpu_serve_lib.sh
gpu_serve_unpack
fx=$(mktemp -d)  # fixtures, results and the server log stay off $OUT (the device tool returns 8 files)
# shellcheck disable=SC2086  # $extra is a list of arguments
gpu_serve_start --max-waiting 8192 $extra
echo "serve up after ${up_after}s ($name: $extra)"
"$B/qwenserve" bench fixture --out "$fx/fixture.jsonl" --requests "$requests" --seed 1 --min-prompt 256 \
    --max-prompt 1792 --max-tokens 256 --context 2048 --model qwen3.6-35b-a3b > /dev/null
for mode in "$@"; do
    python3 - "$mode" "$fx/fixture.jsonl" "$fx/fixture_$mode.jsonl" <<'EOF'
import json, sys
mode, src, dst = sys.argv[1:]
fields = {"greedy": {"temperature": 0}, "sampled": {"temperature": 0.7, "top_p": 0.95},
          "penalties": {"temperature": 1.0, "repetition_penalty": 1.1, "presence_penalty": 0.5, "frequency_penalty": 0.5},
          "logprobs": {"temperature": 0, "logprobs": True, "top_logprobs": 5}, "default": {},
          "json": {"temperature": 0, "response_format": {"type": "json_object"}},
          "regex": {"temperature": 0, "structured_outputs": {"regex": "[a-z ]+"}, "ignore_eos": False,
                    "min_tokens": 256},
          "schema": {"temperature": 0, "ignore_eos": False, "min_tokens": 256, "response_format": {
              "type": "json_schema", "json_schema": {"name": "record", "strict": True, "schema": {
                  "type": "object", "properties": {
                      "name": {"type": "string", "minLength": 1, "maxLength": 40},
                      "age": {"type": "integer", "minimum": 0, "maximum": 150},
                      "notes": {"type": "array", "minItems": 128,
                                "items": {"type": "string", "minLength": 2, "maxLength": 40}}},
                  "required": ["name", "age", "notes"]}}}}}[mode]
with open(src) as f, open(dst, "w") as g:
    for line in f:
        r = json.loads(line)
        r["body"].pop("temperature", None)
        r["body"].update(fields)
        g.write(json.dumps(r) + "\n")
EOF
    "$B/qwenserve" bench --url "http://127.0.0.1:$port" --fixture "$fx/fixture_$mode.jsonl" --clients "$clients" \
        --requests "$requests" --threads 4 --gpu-hourly-cost 5 --json-out "$fx/${name}_$mode.json" \
        --pass-timeout-s 400 > "$fx/${name}_$mode.txt" 2>&1
    echo "---- $name $mode (rc $?)"; grep -E "Completed|Failed|Duration|Output token|Mean TTFT|P99 TTFT|Mean TPOT|P99 ITL|Median ITL|\\$/M" "$fx/${name}_$mode.txt"
    curl -s "http://127.0.0.1:$port/metrics" | grep -E "^qwenserve_(mtp|engine_step|host)" | head -20
done
if [ "$single" -gt 0 ]; then
    "$B/qwenserve" bench --url "http://127.0.0.1:$port" --fixture "$fx/fixture_$1.jsonl" --clients 1 \
        --requests "$single" --gpu-hourly-cost 5 > "$fx/single.txt" 2>&1
    echo "---- $name $1 single stream (rc $?)"; grep -E "Completed|Output token|Mean TPOT|Median TPOT" "$fx/single.txt"
    curl -s "http://127.0.0.1:$port/metrics" | grep -E "^qwenserve_mtp" | head
fi
kill -TERM $server; wait $server
echo "serve exit $?"
grep -E "capacity|budget|error|warn|arena|CUDA" "$fx/serve.log" | tail -12
exit 0
