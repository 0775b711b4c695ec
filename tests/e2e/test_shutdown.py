# SIGTERM: the server stops accepting, lets in-flight requests finish within the grace period,
# aborts the rest, and exits 0.
import signal
import threading
import time

import httpx
import openai

from conftest import server_output, start_server

MODEL = "tiny"


def test_sigterm_finishes_short_requests_and_aborts_long_ones():
    proc, base = start_server("--shutdown-grace-s", "1", "--fake-step-ms", "10", api_key=None)
    c = openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0)
    results = {}

    def short():
        s = c.completions.create(model=MODEL, prompt="[[reply:0123456789]]", stream=True)
        results["short"] = ("".join(ch.choices[0].text for ch in s if ch.choices))

    def long():
        s = c.completions.create(model=MODEL, prompt="[[repeat]]", max_tokens=1500, stream=True)
        finish = None
        for ch in s:
            finish = ch.choices[0].finish_reason or finish
        results["long"] = finish

    threads = [threading.Thread(target=short), threading.Thread(target=long)]
    for t in threads:
        t.start()
    time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.1)
    try:
        httpx.get(base + "/health", timeout=1)
        refused = False
    except httpx.HTTPError:
        refused = True
    for t in threads:
        t.join(timeout=20)
    assert proc.wait(timeout=20) == 0
    assert refused, "still accepting after SIGTERM"
    assert results["short"] == "0123456789"
    assert results["long"] == "abort"
    out = server_output(proc)
    assert "grace period over: aborting 1 requests" in out, out
