#!/usr/bin/env bash
# The endurance gate at full size on the GPU machine (issue 17 item 5): `qwenserve campaign sweep`
# starts `serve --device cuda` on the full-size model with dummy weights, FP8 lean (fp8 block
# weights, bf16 GDN state, fp8 K/V), and takes it through the sweep's gates (docs/BENCH.md):
# start, functional, warm-up, two measured passes, then one endurance pass of N requests
# (default 16,384) whose every reply must complete and pass the output screen, and a clean stop.
# With dummy weights the screen gates on the stream contract (malformed) and reports blank and
# loop verdicts without failing on them: random text can end in a run of one token (BENCH.md). The requests sample at temperature 1 (OpenAI's default): dummy
# weights make meaningless text, and greedy decoding of such weights can repeat itself, which
# the screen would rightly call a loop; sampled text exercises the same server without that.
# Prompts are uniform in 64-512 tokens and replies 64 tokens (ignore_eos), so 16,384 requests fit
# in one device call (about 4-5 minutes).
# Writes $OUT/endurance_summary.txt (the sweep's output), the ledger and the server log.
# Needs gpu-bundle/ (or .carry/gpu-bundle.tar.xz) and the Qwen3.6 tokenizer (.carry/qwen36-tok*).
# Usage: OUT=dir bash scripts/gpu_endurance.sh [ENDURANCE_REQUESTS]
set -uo pipefail
cd "$(dirname "$0")/.."
B=gpu-bundle
OUT="${OUT:-gpu-logs}"
mkdir -p "$OUT"
n="${1:-16384}"
source scripts/gpu_serve_lib.sh
gpu_serve_unpack
fx=$(mktemp -d)
"$B/qwenserve" bench fixture --out "$fx/greedy.jsonl" --requests 2048 --seed 3 --min-prompt 64 --max-prompt 512 \
    --max-tokens 64 --context 2048 --model qwen3.6-35b-a3b > /dev/null || exit 1
python3 - "$fx/greedy.jsonl" "$fx/fixture.jsonl" <<'EOF'
import json, sys
with open(sys.argv[1]) as f, open(sys.argv[2], "w") as g:
    for line in f:
        r = json.loads(line)
        r["body"]["temperature"] = 1.0
        g.write(json.dumps(r) + "\n")
EOF
t0=$(date +%s)
"$B/qwenserve" campaign sweep --ledger "$OUT/endurance_ledger.jsonl" --fixture "$fx/fixture.jsonl" \
    --model builtin:qwen36-35b-a3b --clients 512 --requests 1024 --warmup-requests 1024 \
    --endurance-requests "$n" --screen --gpu-hourly-cost 5 --log-dir "$fx/logs" --start-timeout-s 240 \
    --pass-timeout-s 500 -- --load-format dummy --dummy-format fp8-block --gdn-state-dtype bf16 \
    --kv-cache-dtype fp8_e4m3 --device cuda --tokenizer .carry/qwen36-tok --served-model-name qwen3.6-35b-a3b \
    > "$OUT/endurance_summary.txt" 2>&1
rc=$?
echo "campaign sweep exit $rc after $(( $(date +%s) - t0 )) s" | tee -a "$OUT/endurance_summary.txt"
tail -c 20000 "$fx"/logs/*.server.log > "$OUT/endurance_server_tail.log" 2>/dev/null
grep -h -E "arena|cache budget|warm-up" "$fx"/logs/*.server.log > "$OUT/endurance_memory.log" 2>/dev/null
exit $rc
