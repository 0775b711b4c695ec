#!/usr/bin/env python3
"""Smoke test of `qwenserve serve --device cuda` on the GPU machine (standard library only: the
machine has no registry). Starts the server on models/qwen36-tiny, waits for /health, sends
concurrent chat completions (plain and streaming, greedy) and checks each answer's shape and
that /metrics counts them (and reports how many streamed texts equal the plain ones); stops the server with
SIGTERM and requires a clean exit. Exit status 0 only if all of that holds.
Usage: gpu_serve_smoke.py BINARY [PORT]"""
import json
import signal
import subprocess
import sys
import threading
import time
import urllib.request

binary = sys.argv[1]
port = int(sys.argv[2]) if len(sys.argv) > 2 else 8765
base = f"http://127.0.0.1:{port}"
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def post(path, body, stream=False):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        if not stream:
            return r.status, json.loads(r.read())
        events = []
        for line in r:
            line = line.decode().strip()
            if line.startswith("data: "):
                events.append(line[6:])
        return r.status, events


server = subprocess.Popen([binary, "serve", "--model", "models/qwen36-tiny", "--device", "cuda", "--port", str(port),
                           "--cache-memory-mb", "512"])
try:
    for _ in range(240):
        try:
            with urllib.request.urlopen(base + "/health", timeout=2) as r:
                if r.status == 200:
                    break
        except Exception:
            time.sleep(0.5)
    else:
        check(False, "server became healthy within 120 s")
        raise SystemExit(1)
    with urllib.request.urlopen(base + "/v1/models", timeout=10) as r:
        model_id = json.loads(r.read())["data"][0]["id"]
    prompts = [f"Write a Python function number {i} that adds two numbers." for i in range(8)]
    results = {}

    def ask(i, p):
        try:
            ask_once(i, p)
        except Exception as e:  # reported per request below
            results[i] = e

    def ask_once(i, p):
        body = {"model": model_id, "messages": [{"role": "user", "content": p}], "max_tokens": 48,
                "temperature": 0}
        st, plain = post("/v1/chat/completions", body)
        st2, events = post("/v1/chat/completions", dict(body, stream=True), stream=True)
        results[i] = (st, plain, st2, events)

    threads = [threading.Thread(target=ask, args=(i, p)) for i, p in enumerate(prompts)]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"8 plain + 8 streaming requests in {time.time() - t0:.2f} s", flush=True)
    text, same = "", 0
    for i in range(len(prompts)):
        if not isinstance(results.get(i), tuple):
            check(False, f"request {i}: {results.get(i)!r}")
            continue
        st, plain, st2, events = results[i]
        check(st == 200 and st2 == 200, f"request {i}: HTTP 200")
        text = plain["choices"][0]["message"].get("content") or ""
        usage = plain.get("usage", {})
        check(usage.get("completion_tokens", 0) > 0, f"request {i}: {usage.get('completion_tokens')} completion tokens")
        check(events and events[-1] == "[DONE]", f"request {i}: stream ends with [DONE]")
        streamed = ""
        for e in events[:-1]:
            for c in json.loads(e).get("choices", []):
                streamed += c.get("delta", {}).get("content") or ""
        check(len(streamed) > 0, f"request {i}: the stream carries text ({len(streamed)} chars)")
        # Greedy, but batched differently: bf16 rounding may part the two at a near-tie.
        same += streamed == text
    print(f"streamed text equal to the plain greedy text in {same} of {len(prompts)} requests", flush=True)
    with urllib.request.urlopen(base + "/metrics", timeout=10) as r:
        metrics = r.read().decode()
    generated = sum(float(l.split()[-1]) for l in metrics.splitlines()
                    if l.startswith("qwenserve_generation_tokens_total"))
    want = sum(r[1].get("usage", {}).get("completion_tokens", 0) for r in results.values() if isinstance(r, tuple))
    check(generated >= 2 * want, f"/metrics counts the generated tokens ({generated:.0f} >= 2 x {want})")
    print(repr(text[:200]), flush=True)
finally:
    server.send_signal(signal.SIGTERM)
    try:
        rc = server.wait(timeout=60)
    except subprocess.TimeoutExpired:
        server.kill()
        rc = None
    check(rc == 0, f"server exits cleanly on SIGTERM (rc {rc})")
print("PASS" if not failures else f"FAILED: {len(failures)} checks", flush=True)
sys.exit(1 if failures else 0)
