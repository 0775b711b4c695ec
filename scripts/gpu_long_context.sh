#!/usr/bin/env bash
# Long context on the GPU machine (issue 19 item 4): `qwenserve serve --device cuda` on the
# full-size model with dummy weights, FP8 lean (fp8 block weights, bf16 GDN state, fp8 K/V), with
# --max-model-len 262144; one client sends one chat request per prompt length (prompt of exactly
# that many tokens, 128 completion tokens): TTFT is the prefill of the whole prompt (chunked by
# max_num_batched_tokens), TPOT the decode speed at that context. GPU memory in use is polled
# every 0.5 s; its peak is printed per length.
# Usage: bash scripts/gpu_long_context.sh [LENGTH...]   (default: 32768 131072 220000)
# Needs gpu-bundle/ and the Qwen3.6 tokenizer (as scripts/gpu_serve_bench.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
B=gpu-bundle
port=18600
lengths=("$@")
[ ${#lengths[@]} -eq 0 ] && lengths=(32768 131072 220000)
source scripts/gpu_serve_lib.sh
gpu_serve_unpack
fx=$(mktemp -d)
mem_peak() {  # polls used GPU memory (MiB) into $fx/mem.txt until killed
    while true; do nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits >> "$fx/mem.txt"; sleep 0.5; done
}
gpu_serve_start --max-model-len 262144
echo "serve up after ${up_after}s"
grep -E "capacity|budget" "$fx/serve.log" | tail -3
for len in "${lengths[@]}"; do
    "$B/qwenserve" bench fixture --out "$fx/f_$len.jsonl" --requests 1 --seed 7 --min-prompt "$len" \
        --max-prompt "$len" --max-tokens 128 --context 262144 --model qwen3.6-35b-a3b > /dev/null || { echo "fixture $len failed"; continue; }
    : > "$fx/mem.txt"
    mem_peak & poller=$!
    "$B/qwenserve" bench --url "http://127.0.0.1:$port" --fixture "$fx/f_$len.jsonl" --clients 1 --requests 1 \
        --pass-timeout-s 500 > "$fx/b_$len.txt" 2>&1
    rc=$?
    kill $poller 2>/dev/null; wait $poller 2>/dev/null
    echo "---- prompt $len tokens (rc $rc), peak GPU memory $(sort -n "$fx/mem.txt" | tail -1) MiB"
    grep -E "Completed|Failed|Mean TTFT|Mean TPOT|Output token|Total input" "$fx/b_$len.txt"
done
kill -TERM $server; wait $server
echo "serve exit $?"
grep -E "error|warn|arena" "$fx/serve.log" | tail -8
exit 0
