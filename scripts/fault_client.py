#!/usr/bin/env python3
"""Fault-load client for `qwenserve serve` (issue 17 item 5), standard library only (the GPU
machine reaches no registry). Every client is its own HTTP/1.1 connection, all started at once:

  overload     N clients POST /v1/completions at once against the bounded queue; each ends as
               ok (200, complete: [DONE] or a JSON body with a finish reason), refused (429 or
               503, with or without Retry-After), timeout (504 request_timeout), lost (reset,
               EOF before the end, an error event, any other status) or hung (no end within
               --timeout-s).
  disconnect   N streaming clients that each close their socket after --after-events events.

Before the load and after it settles (in flight, running and waiting back to 0 within
--settle-s) it reads /metrics (pages and slots in use, counters) and, with --pid, the server's
RSS, and with --gpu the GPU memory in use (nvidia-smi). Prints one JSON object; exit 0 when
nothing was lost or hung and pages, slots and in-flight came back to their values before.

Usage: fault_client.py overload|disconnect --url URL --clients N [--max-tokens M] [--stream]
         [--prompt-words W] [--after-events K] [--timeout-s S] [--settle-s S] [--pid PID] [--gpu]
         [--api-key K] [--model NAME]
Used by tests/e2e/test_faults.py (small N, CPU) and scripts/gpu_faults.sh (H200)."""
import argparse
import asyncio
import json
import resource
import subprocess
import sys
import time
import urllib.parse
import urllib.request


def metrics(url, key):
    req = urllib.request.Request(url + "/metrics", headers={"Authorization": f"Bearer {key}"} if key else {})
    with urllib.request.urlopen(req, timeout=30) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            try:
                out[name] = float(value)
            except ValueError:
                pass
    return out


def rss_mib(pid):
    if not pid:
        return None
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return None


def gpu_mib(enabled):
    if not enabled:
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30).stdout
        return float(out.split()[0])
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None


WATCH = ["qwenserve_num_requests_in_flight", "qwenserve_num_requests_running", "qwenserve_num_requests_waiting",
         "qwenserve_kv_cache_pages_in_use", "qwenserve_state_slots_in_use", "qwenserve_client_disconnects_total",
         "qwenserve_request_timeouts_total", "qwenserve_engine_stalled", "qwenserve_engine_stalls_total",
         'qwenserve_request_success_total{finished_reason="abort"}']


def snapshot(a):
    m = metrics(a.url, a.api_key)
    s = {k: m.get(k) for k in WATCH}
    s["rss_mib"] = rss_mib(a.pid)
    s["gpu_mib"] = gpu_mib(a.gpu)
    return s


async def read_head(reader):
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    return status, headers


async def one_client(a, host, port, path, body, i):
    """Returns (outcome, detail)."""
    writer = None
    try:
        reader, writer = await asyncio.open_connection(host, port)
        auth = f"Authorization: Bearer {a.api_key}\r\n" if a.api_key else ""
        writer.write((f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n{auth}"
                      f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body)
        await writer.drain()
        status, headers = await read_head(reader)
        if status != 200:
            data = await reader.read()
            if status in (429, 503):
                return ("refused_%d" % status, "retry_after" if "retry-after" in headers else "no_retry_after")
            if status == 504 and b"request_timeout" in data:
                return ("timeout", "")
            return ("lost", f"status {status}: {data[:200]!r}")
        if a.mode == "disconnect":
            events = 0
            buf = b""
            while events < a.after_events:
                chunk = await reader.read(65536)
                if not chunk:
                    return ("ended_first", "")
                buf += chunk
                events = buf.count(b"data: ")
                if b"data: [DONE]" in buf:
                    return ("ended_first", "")
            writer.transport.abort()  # a reset, as a killed client leaves it
            writer = None
            return ("disconnected", "")
        data = await reader.read()
        if a.stream:
            if b'"error"' in data:
                return ("timeout", "") if b"request_timeout" in data else ("lost", "error event")
            return ("ok", "") if b"data: [DONE]" in data else ("lost", "no [DONE]")
        try:
            j = json.loads(data)
            return ("ok", "") if j["choices"][0]["finish_reason"] in ("stop", "length") else ("lost", "finish")
        except (ValueError, KeyError, IndexError):
            return ("lost", "bad body")
    except (ConnectionError, asyncio.IncompleteReadError, OSError) as e:
        return ("lost", type(e).__name__)
    finally:
        if writer is not None:
            writer.close()


async def run_load(a):
    u = urllib.parse.urlparse(a.url)
    host, port = u.hostname, u.port or 80
    prompt = " ".join(["hello"] * a.prompt_words)
    body = json.dumps({"model": a.model, "prompt": prompt, "max_tokens": a.max_tokens, "ignore_eos": True,
                       "temperature": 0, "stream": a.stream or a.mode == "disconnect"}).encode()

    async def bounded(i):
        try:
            return await asyncio.wait_for(one_client(a, host, port, "/v1/completions", body, i), a.timeout_s)
        except asyncio.TimeoutError:
            return ("hung", "")

    t0 = time.time()
    results = await asyncio.gather(*(bounded(i) for i in range(a.clients)))
    return results, time.time() - t0


def settle(a, before):
    """Waits until nothing is in flight; returns (seconds, snapshot)."""
    t0 = time.time()
    while True:
        s = snapshot(a)
        idle = all((s.get(k) or 0) == 0 for k in ["qwenserve_num_requests_in_flight", "qwenserve_num_requests_running",
                                                   "qwenserve_num_requests_waiting"])
        if idle or time.time() - t0 > a.settle_s:
            return time.time() - t0, s
        time.sleep(0.2)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("mode", choices=["overload", "disconnect"])
    p.add_argument("--url", required=True)
    p.add_argument("--clients", type=int, required=True)
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--prompt-words", type=int, default=32)
    p.add_argument("--stream", action="store_true")
    p.add_argument("--after-events", type=int, default=3)
    p.add_argument("--timeout-s", type=float, default=120.0)
    p.add_argument("--settle-s", type=float, default=60.0)
    p.add_argument("--pid", type=int, default=0)
    p.add_argument("--gpu", action="store_true")
    p.add_argument("--api-key", default="")
    p.add_argument("--model", default="qwen3.6-35b-a3b")
    a = p.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, a.clients + 256)) if hard != resource.RLIM_INFINITY else max(soft, a.clients + 256)
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))

    before = snapshot(a)
    results, wall = asyncio.run(run_load(a))
    settle_s, after = settle(a, before)
    counts = {}
    details = {}
    for outcome, detail in results:
        counts[outcome] = counts.get(outcome, 0) + 1
        if detail:
            details[f"{outcome}:{detail}"] = details.get(f"{outcome}:{detail}", 0) + 1
    back = {k: (before.get(k) or 0) == (after.get(k) or 0) for k in
            ["qwenserve_kv_cache_pages_in_use", "qwenserve_state_slots_in_use", "qwenserve_num_requests_in_flight"]}
    lost, hung = counts.get("lost", 0), counts.get("hung", 0)
    no_retry = sum(v for k, v in details.items() if k.endswith(":no_retry_after"))
    out = {"mode": a.mode, "clients": a.clients, "wall_s": round(wall, 2), "settle_s": round(settle_s, 2),
           "counts": counts, "details": details, "lost": lost, "hung": hung, "refusals_without_retry_after": no_retry,
           "before": before, "after": after, "back_to_baseline": back,
           "passed": lost == 0 and hung == 0 and no_retry == 0 and all(back.values())}
    print(json.dumps(out, indent=1))
    return 0 if out["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
