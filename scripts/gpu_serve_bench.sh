#!/usr/bin/env bash
# The serving benchmark through HTTP on the GPU machine: `qwenserve serve --device cuda` on the
# full-size model with dummy weights, FP8 lean (fp8 block weights, bf16 GDN state, fp8 K/V),
# driven by `qwenserve bench` with the seed-replay fixture (chat prompts uniform in 256-1,792
# tokens, 256 completion tokens, thinking off, seed 1). Each MODE rewrites the fixture's sampling
# fields; each mode's summary lines go to standard output (the files stay in a temporary folder).
# Usage: bash scripts/gpu_serve_bench.sh [--requests N] [--clients C] [--serve "extra serve args"]
#            [--name NAME] [--single N] [--no-warmup] MODE...
#   --single N: after the modes, N requests of the first mode from one client (single stream).
#   Before each mode's pass, one request of the mode from one client (its duration is printed):
#   one-time costs, such as the first compile of the mode's grammar (seconds for the schema
#   mode's at the 248k vocabulary, which every request of the pass would otherwise wait behind
#   with the engine idle), stay out of the pass. --no-warmup: no such request (as before 2026-12-02).
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
#         | images (greedy, one 448x448 PNG per request before its text: 196 image tokens more per
#           prompt, the vision tower on every request) | image_mix (the same on every second request:
#           a mixed text+image load). An image mode starts the server with --dummy-vision (a
#           random tower of the release shapes); each request's image differs (no prefix hits).
# Needs gpu-bundle/ (scripts/build_gpu_bundle.sh) and the Qwen3.6 tokenizer in .carry/qwen36-tok
# (tools/qwen36_tokenizer_json.py; travels compressed as .carry/qwen36-tok.tar.xz).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-gpu-logs}"
mkdir -p "$OUT"
B=gpu-bundle
requests=1024 clients=1280 extra="" name=fp8_lean port=18500 single=0 warmup=1
while [ $# -gt 0 ]; do
    case "$1" in
        --requests) requests="$2"; shift 2 ;;
        --clients) clients="$2"; shift 2 ;;
        --serve) extra="$2"; shift 2 ;;
        --name) name="$2"; shift 2 ;;
        --single) single="$2"; shift 2 ;;
        --no-warmup) warmup=0; shift ;;
        *) break ;;
    esac
done
source scripts/gpu_serve_lib.sh
gpu_serve_unpack
fx=$(mktemp -d)  # fixtures, results and the server log stay off $OUT (the device tool returns 8 files)
# shellcheck disable=SC2086  # $extra is a list of arguments
case " $* " in *" images "*|*" image_mix "*) extra="$extra --dummy-vision" ;; esac
gpu_serve_start --max-waiting 8192 $extra
echo "serve up after ${up_after}s ($name: $extra)"
"$B/qwenserve" bench fixture --out "$fx/fixture.jsonl" --requests "$requests" --seed 1 --min-prompt 256 \
    --max-prompt 1792 --max-tokens 256 --context 2048 --model qwen3.6-35b-a3b > /dev/null
for mode in "$@"; do
    python3 - "$mode" "$fx/fixture.jsonl" "$fx/fixture_$mode.jsonl" <<'EOF'
import base64, json, struct, sys, zlib
mode, src, dst = sys.argv[1:]

SIDE = 448
# PNG rows with the Sub filter (1): each byte is the difference to the pixel on its left, from a
# small periodic alphabet, so the images compress to a few KB; a per-request table remaps the
# differences (keeping the filter byte 1), so every request's pixels differ.
BASE = b"".join(b"\1" + bytes(((x % 8) * 3 + (y % 8) * 5 + c) % 7 + 2 for x in range(SIDE) for c in range(3))
                for y in range(SIDE))

def png_data_url(i):
    """A SIDE x SIDE RGB PNG that differs with i (pure Python: no PIL needed)."""
    table = bytearray(range(256))
    for v in range(2, 9):
        table[v] = (v * 31 + i * 17) % 250 + 2
    chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", SIDE, SIDE, 8, 2, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(BASE.translate(bytes(table)), 9)) + chunk(b"IEND", b""))
    return "data:image/png;base64," + base64.b64encode(png).decode()

image_every = {"images": 1, "image_mix": 2}.get(mode, 0)
if image_every:
    mode = "greedy"
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
    for i, line in enumerate(f):
        r = json.loads(line)
        r["body"].pop("temperature", None)
        r["body"].update(fields)
        if image_every and i % image_every == 0:
            m = r["body"]["messages"][-1]
            m["content"] = [{"type": "image_url", "image_url": {"url": png_data_url(i)}},
                            {"type": "text", "text": m["content"]}]
        g.write(json.dumps(r) + "\n")
EOF
    if [ "$warmup" = 1 ]; then
        "$B/qwenserve" bench --url "http://127.0.0.1:$port" --fixture "$fx/fixture_$mode.jsonl" --clients 1 \
            --requests 1 > "$fx/warmup_$mode.txt" 2>&1
        echo "warm-up $mode (rc $?, 1 request): $(grep -E "^Duration" "$fx/warmup_$mode.txt")"
    fi
    curl -s "http://127.0.0.1:$port/metrics" > "$fx/metrics_before.txt"
    "$B/qwenserve" bench --url "http://127.0.0.1:$port" --fixture "$fx/fixture_$mode.jsonl" --clients "$clients" \
        --requests "$requests" --threads 4 --gpu-hourly-cost 5 --json-out "$fx/${name}_$mode.json" \
        --pass-timeout-s 400 > "$fx/${name}_$mode.txt" 2>&1
    echo "---- $name $mode (rc $?)"; grep -E "Completed|Failed|Duration|Output token|streaming|Mean TTFT|P99 TTFT|Mean TPOT|P99 ITL|Median ITL|\\$/M" "$fx/${name}_$mode.txt"
    curl -s "http://127.0.0.1:$port/metrics" > "$fx/metrics_after.txt"
    grep -E "^qwenserve_(mtp|engine_step|host)" "$fx/metrics_after.txt" | head -20
    # This mode's own engine time (the counters run from the server's start: warm-up and earlier
    # modes included): steps by kind and their seconds, and the engine's idle time, the pass's
    # duration less its steps (waiting for requests: admission, grammar compiles, the client).
    python3 - "$fx/metrics_before.txt" "$fx/metrics_after.txt" "$fx/${name}_$mode.txt" <<'EOF'
import re, sys
def read(path):
    d = {}
    for line in open(path):
        m = re.match(r'^(qwenserve_engine_step\w*)(\{[^}]*\})? ([0-9.eE+-]+)$', line.strip())
        if m: d[m.group(1) + (m.group(2) or '')] = float(m.group(3))
    return d
a, b = read(sys.argv[1]), read(sys.argv[2])
dur = next((float(l.split()[-1]) for l in open(sys.argv[3]) if l.startswith('Duration')), float('nan'))
delta = lambda k: b.get(k, 0.0) - a.get(k, 0.0)
total = 0.0
for kind in ('prefill', 'decode'):
    s = delta(f'qwenserve_engine_step_seconds_total{{kind="{kind}"}}')
    n = delta(f'qwenserve_engine_steps_by_kind_total{{kind="{kind}"}}')
    total += s
    print(f'mode engine {kind} steps: {n:.0f} in {s:.2f} s ({1e3 * s / max(n, 1):.1f} ms each)')
print(f'mode engine idle: {dur - total:.2f} s of the {dur:.2f} s pass (duration less steps)')
EOF
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
