#!/usr/bin/env bash
# Faults at full size on the GPU machine (issue 17 item 5): `qwenserve serve --device cuda` on the
# full-size model with dummy weights, FP8 lean (scripts/gpu_serve_lib.sh), and
#   1. warm-up OOM: serve with an impossible --max-num-batched-tokens must exit 4 with a message
#      naming the knob and a value that fits (backend/batched_tokens_fit);
#   2. watchdog: one server runs with --engine-stall-timeout-s 3 and --debug-engine-stall-s 8 after
#      40 steps; a few requests start, /health must turn 503 (status "stalled") and back to 200,
#      qwenserve_engine_stalls_total 1, and the requests finish 200;
#   3. overload: 5,000 clients at once (streaming, 64 tokens) against max-num-seqs 512 +
#      max-waiting 1024 + max-in-flight 4096: counts of 200 / 429 / 503, lost, hung, and pages,
#      slots, in-flight, RSS and GPU memory before and after (scripts/fault_client.py);
#   4. disconnect storm: 1,000 streaming clients that reset their sockets after 3 events: every
#      slot and page must come back;
#   5. per-request timeout: the same server has --request-timeout-s 30; 4 requests of 8,192
#      tokens must end as 504 request_timeout and leave nothing held.
# Writes $OUT/faults_summary.txt (the table), the client JSONs and serve logs. About 4-5 minutes
# of device time (two model loads, the rest is load). Needs gpu-bundle/ (or
# .carry/gpu-bundle.tar.xz) and the Qwen3.6 tokenizer (.carry/qwen36-tok*), as gpu_serve_bench.sh.
# Usage: OUT=dir bash scripts/gpu_faults.sh
set -uo pipefail
cd "$(dirname "$0")/.."
B=gpu-bundle
OUT="${OUT:-gpu-logs}"
mkdir -p "$OUT"
port=18700
source scripts/gpu_serve_lib.sh
gpu_serve_unpack
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
fx="$OUT"
summary="$OUT/faults_summary.txt"
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }
url="http://127.0.0.1:$port"
metric() { curl -s "$url/metrics" | awk -v n="$1" '$1 == n {print $2}'; }
say "# gpu_faults.sh $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader)"
say "ulimit -n $(ulimit -n)"

# ---- 1. warm-up OOM -------------------------------------------------------------------------
t0=$(date +%s)
"$B/qwenserve" serve --model builtin:qwen36-35b-a3b --load-format dummy --dummy-format fp8-block \
    --gdn-state-dtype bf16 --kv-cache-dtype fp8_e4m3 --device cuda --tokenizer .carry/qwen36-tok \
    --port "$port" --max-num-batched-tokens 2000000 > "$OUT/oom_serve.log" 2>&1
rc=$?
msg=$(grep -m1 "max-num-batched-tokens 2000000 does not fit" "$OUT/oom_serve.log")
say ""
say "## 1. warm-up OOM (--max-num-batched-tokens 2000000): exit $rc (expect 4) in $(( $(date +%s) - t0 )) s"
say "message: ${msg:-<none: see oom_serve.log>}"
grep -E "warm-up of|CUDA error|out of device memory" "$OUT/oom_serve.log" | tail -3 | tee -a "$summary"
oom_ok=0; [ "$rc" = 4 ] && [ -n "$msg" ] && echo "$msg" | grep -q "use --max-num-batched-tokens [0-9]* or less" && oom_ok=1

# ---- the server for 2-5 -------------------------------------------------------------------
gpu_serve_start --max-num-seqs 512 --max-waiting 1024 --max-in-flight 4096 --engine-stall-timeout-s 3 \
    --debug-engine-stall-s 8 --debug-engine-stall-after-steps 40 --request-timeout-s 30 --disable-log-requests
cp "$fx/serve.log" "$OUT/serve_start.log" 2>/dev/null
say ""
say "serve up after ${up_after} s (pid $server); $(grep -m1 -E 'warm-up of .* predicted' "$fx/serve.log")"
say "$(grep -m1 -E 'warm-up of .* took' "$fx/serve.log")"

# ---- 2. watchdog ----------------------------------------------------------------------------
say ""
say "## 2. watchdog (--engine-stall-timeout-s 3, a step held 8 s after 40 steps)"
pids=()
for i in 1 2 3 4; do
    curl -s -o "$OUT/wd_$i.json" -w "%{http_code}\n" "$url/v1/completions" -H 'Content-Type: application/json' \
        -d '{"model":"qwen3.6-35b-a3b","prompt":"Write a long story.","max_tokens":200,"ignore_eos":true}' \
        > "$OUT/wd_$i.code" &
    pids+=($!)
done
first_503=""; back_200=""; t0=$(date +%s.%N)
for k in $(seq 1 120); do
    code=$(curl -s -o "$OUT/health.json" -w "%{http_code}" "$url/health")
    now=$(python3 -c "print(round($(date +%s.%N) - $t0, 2))")
    if [ "$code" = 503 ] && [ -z "$first_503" ]; then first_503=$now; cp "$OUT/health.json" "$OUT/health_503.json"; fi
    if [ "$code" = 200 ] && [ -n "$first_503" ]; then back_200=$now; break; fi
    sleep 0.25
done
wait "${pids[@]}"  # not a bare wait: serve is a background job of this shell too
codes=$(cat "$OUT"/wd_*.code | sort | uniq -c | tr '\n' ' ')
say "/health 503 at ${first_503:-never} s ($(cat "$OUT/health_503.json" 2>/dev/null)), 200 again at ${back_200:-never} s"
say "requests during the stall: $codes; qwenserve_engine_stalls_total $(metric qwenserve_engine_stalls_total)"
wd_ok=0; [ -n "$first_503" ] && [ -n "$back_200" ] && [ "$(metric qwenserve_engine_stalls_total)" = 1 ] && \
    [ "$(cat "$OUT"/wd_*.code | grep -c 200)" = 4 ] && wd_ok=1

# ---- 3. overload ----------------------------------------------------------------------------
say ""
say "## 3. overload: 5000 streaming clients at once, 64 tokens each"
python3 scripts/fault_client.py overload --url "$url" --clients 5000 --max-tokens 64 --stream --pid "$server" --gpu \
    --timeout-s 240 --settle-s 120 > "$OUT/overload.json"
ov_rc=$?
python3 - "$OUT/overload.json" <<'EOF' | tee -a "$summary"
import json, sys
o = json.load(open(sys.argv[1]))
c = o["counts"]
print(f"200 ok {c.get('ok', 0)}, 429 {c.get('refused_429', 0)}, 503 {c.get('refused_503', 0)}, 504 {c.get('timeout', 0)}, "
      f"lost {o['lost']}, hung {o['hung']}, refusals without Retry-After {o['refusals_without_retry_after']}; "
      f"wall {o['wall_s']} s, settled in {o['settle_s']} s; details {o['details']}")
print("| | before | after |\n|---|---|---|")
for k in ["qwenserve_kv_cache_pages_in_use", "qwenserve_state_slots_in_use", "qwenserve_num_requests_in_flight",
          "rss_mib", "gpu_mib"]:
    print(f"| {k} | {o['before'][k]} | {o['after'][k]} |")
print("passed" if o["passed"] else "FAILED")
EOF

# ---- 4. disconnect storm --------------------------------------------------------------------
say ""
say "## 4. disconnect storm: 1000 streaming clients reset after 3 events"
python3 scripts/fault_client.py disconnect --url "$url" --clients 1000 --max-tokens 512 --after-events 3 \
    --pid "$server" --gpu --timeout-s 240 --settle-s 120 > "$OUT/disconnect.json"
dc_rc=$?
python3 - "$OUT/disconnect.json" <<'EOF' | tee -a "$summary"
import json, sys
o = json.load(open(sys.argv[1]))
print(f"counts {o['counts']}; wall {o['wall_s']} s, settled in {o['settle_s']} s")
b, a = o["before"], o["after"]
d = (a["qwenserve_client_disconnects_total"] or 0) - (b["qwenserve_client_disconnects_total"] or 0)
print(f"disconnects counted {d}; slots {b['qwenserve_state_slots_in_use']} -> {a['qwenserve_state_slots_in_use']}, "
      f"pages {b['qwenserve_kv_cache_pages_in_use']} -> {a['qwenserve_kv_cache_pages_in_use']}, "
      f"RSS {b['rss_mib']} -> {a['rss_mib']} MiB, GPU {b['gpu_mib']} -> {a['gpu_mib']} MiB")
print("passed" if o["passed"] else "FAILED")
EOF

# ---- 5. per-request timeout -----------------------------------------------------------------
say ""
say "## 5. --request-timeout-s 30: 4 requests of 8192 tokens"
t0=$(date +%s)
pids=()
for i in 1 2 3 4; do
    curl -s -o "$OUT/to_$i.json" -w "%{http_code}\n" "$url/v1/completions" -H 'Content-Type: application/json' \
        -d '{"model":"qwen3.6-35b-a3b","prompt":"Count.","max_tokens":8192,"ignore_eos":true}' > "$OUT/to_$i.code" &
    pids+=($!)
done
wait "${pids[@]}"
sleep 1
say "codes: $(cat "$OUT"/to_*.code | sort | uniq -c | tr '\n' ' ') after $(( $(date +%s) - t0 )) s; $(head -c 200 "$OUT/to_1.json")"
say "after: in flight $(metric qwenserve_num_requests_in_flight), slots $(metric qwenserve_state_slots_in_use), pages $(metric qwenserve_kv_cache_pages_in_use), timeouts $(metric qwenserve_request_timeouts_total)"
to_ok=0; [ "$(cat "$OUT"/to_*.code | grep -c 504)" = 4 ] && [ "$(metric qwenserve_state_slots_in_use)" = 0 ] && to_ok=1

kill -TERM "$server"; wait "$server"; serve_rc=$?
cp "$fx/serve.log" "$OUT/serve.log" 2>/dev/null
say ""
say "| case | result |"
say "|---|---|"
say "| warm-up OOM message | $([ $oom_ok = 1 ] && echo pass || echo FAIL) |"
say "| watchdog | $([ $wd_ok = 1 ] && echo pass || echo FAIL) |"
say "| overload 5000 | $([ $ov_rc = 0 ] && echo pass || echo FAIL) |"
say "| disconnect storm 1000 | $([ $dc_rc = 0 ] && echo pass || echo FAIL) |"
say "| request timeout | $([ $to_ok = 1 ] && echo pass || echo FAIL) |"
say "| serve exit on SIGTERM | $serve_rc |"
exit 0
