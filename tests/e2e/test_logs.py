# The server's log (issue 20): --log-format json writes one JSON object a line; each finished
# request writes one request-log line (id, tokens, timings, finish reason) whose numbers match
# what the client got back, without the prompt unless --log-prompts; --log-level warn drops it;
# --disable-log-requests turns it off.
import json
import signal

import httpx

from conftest import server_output, start_server

MODEL = "tiny"
# The marker is not hexadecimal, so a git hash in the start-up line cannot contain it.
MARKER = "private-prompt-marker-qz"
SECRET = "[[reply:hello there]] a private prompt " + MARKER


def run_one_request(*flags):
    proc, base = start_server(*flags, api_key=None)
    r = httpx.post(base + "/v1/chat/completions", timeout=30,
                   json={"model": MODEL, "messages": [{"role": "user", "content": SECRET}], "max_tokens": 50})
    assert r.status_code == 200, r.text
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    return r.json(), server_output(proc)


def request_lines(out):
    return [json.loads(l) for l in out.splitlines() if l.startswith("{") and json.loads(l)["msg"] == "request"]


def test_json_lines_and_one_request_line_matching_the_response():
    body, out = run_one_request("--log-format", "json")
    lines = [l for l in out.splitlines() if l.strip()]
    assert lines
    for l in lines:  # every line is a JSON object with time, level and msg
        obj = json.loads(l)
        assert {"time", "level", "msg"} <= obj.keys(), l
        assert obj["level"] in ("debug", "info", "warn", "error")
    reqs = request_lines(out)
    assert len(reqs) == 1, out
    r = reqs[0]
    assert r["id"] == body["id"]
    assert r["api"] == "chat"
    assert r["prompt_tokens"] == body["usage"]["prompt_tokens"]
    assert r["completion_tokens"] == body["usage"]["completion_tokens"]
    assert r["finish_reason"] == body["choices"][0]["finish_reason"]
    assert 0 <= r["ttft_s"] <= r["e2e_s"]
    # The engine's phases: inside the HTTP server's span; decoding took a step (>= 1 ms) a token.
    assert r["queue_s"] >= 0 and r["prefill_s"] >= 0
    assert r["decode_s"] >= 0.001 * (r["completion_tokens"] - 1)
    assert r["queue_s"] + r["prefill_s"] + r["decode_s"] <= r["e2e_s"]
    assert "prompt" not in r
    assert MARKER not in out  # the prompt is nowhere in the log


def test_log_prompts_puts_the_prompt_in_the_request_line():
    _, out = run_one_request("--log-format", "json", "--log-prompts")
    (r,) = request_lines(out)
    assert SECRET in r["prompt"]


def test_text_format_request_line():
    body, out = run_one_request()
    lines = [l for l in out.splitlines() if "] request " in l]
    assert len(lines) == 1, out
    assert f"id={body['id']}" in lines[0]
    assert f"completion_tokens={body['usage']['completion_tokens']}" in lines[0]
    assert MARKER not in out


def test_log_level_warn_drops_info_lines():
    _, out = run_one_request("--log-level", "warn")
    assert "] request " not in out
    assert " info] " not in out, out


def test_disable_log_requests():
    _, out = run_one_request("--disable-log-requests")
    assert "] request " not in out
    assert "request-log=off" in out
