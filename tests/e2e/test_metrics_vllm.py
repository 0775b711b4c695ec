# /metrics under vLLM's names (issue 20): the text is parsed by Prometheus' own Python parser
# (prometheus_client), the vllm: families have vLLM's types and labels (model_name, engine,
# finished_reason), histograms are well formed, and the values move by what the requests did.
# The phase histograms (queue, prefill, decode, inference) have vLLM's buckets, one observation
# per finished completion, and prefill + decode = inference; a request that waits behind
# --max-num-seqs shows it as queue time.
import threading
import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from conftest import start_server

MODEL = "tiny"

# vLLM family name (as prometheus_client names it: counters without _total) → type.
EXPECTED = {
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:kv_cache_usage_perc": "gauge",
    "vllm:gpu_cache_usage_perc": "gauge",
    "vllm:prefix_cache_queries": "counter",
    "vllm:prefix_cache_hits": "counter",
    "vllm:num_preemptions": "counter",
    "vllm:prompt_tokens": "counter",
    "vllm:generation_tokens": "counter",
    "vllm:request_success": "counter",
    "vllm:request_prompt_tokens": "histogram",
    "vllm:request_generation_tokens": "histogram",
    "vllm:request_params_max_tokens": "histogram",
    "vllm:time_to_first_token_seconds": "histogram",
    "vllm:inter_token_latency_seconds": "histogram",
    "vllm:time_per_output_token_seconds": "histogram",
    "vllm:request_time_per_output_token_seconds": "histogram",
    "vllm:e2e_request_latency_seconds": "histogram",
    "vllm:request_decode_time_seconds": "histogram",
    "vllm:request_queue_time_seconds": "histogram",
    "vllm:request_prefill_time_seconds": "histogram",
    "vllm:request_inference_time_seconds": "histogram",
}
PHASES = ("vllm:request_queue_time_seconds", "vllm:request_prefill_time_seconds",
          "vllm:request_decode_time_seconds", "vllm:request_inference_time_seconds")
# vLLM's request_latency_buckets (vllm/v1/metrics/loggers.py), the phase histograms' bounds.
VLLM_REQUEST_LATENCY_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                                120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0, float("inf")]


def scrape(base):
    r = httpx.get(base + "/metrics", timeout=10)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {f.name: f for f in text_string_to_metric_families(r.text)}


def value(families, family, sample_name=None, **labels):
    """The one sample of `family` named `sample_name` (default: the family's own) whose labels
    include `labels`."""
    f = families[family]
    want = sample_name or (family + "_total" if f.type == "counter" else family)
    hits = [s.value for s in f.samples if s.name == want and labels.items() <= s.labels.items()]
    assert len(hits) == 1, (family, want, labels, f.samples)
    return hits[0]


def check_histogram(f):
    buckets = [s for s in f.samples if s.name == f.name + "_bucket"]
    count = [s.value for s in f.samples if s.name == f.name + "_count"]
    assert buckets and len(count) == 1, f.name
    bounds = [float(s.labels["le"]) for s in buckets]
    assert bounds == sorted(bounds) and bounds[-1] == float("inf"), f.name
    counts = [s.value for s in buckets]
    assert counts == sorted(counts), f"{f.name}: buckets not cumulative"
    assert counts[-1] == count[0], f.name


def test_vllm_names_types_labels_and_values_after_requests():
    proc, base = start_server(api_key=None)
    try:
        before = scrape(base)
        for name, typ in EXPECTED.items():
            assert name in before, f"{name} missing from /metrics"
            assert before[name].type == typ, (name, before[name].type)
            for s in before[name].samples:
                assert s.labels.get("model_name") == MODEL, s
                assert s.labels.get("engine") == "0", s
        reasons = {s.labels["finished_reason"] for s in before["vllm:request_success"].samples}
        assert {"stop", "length", "abort"} <= reasons
        assert "vllm:spec_decode_num_drafts" not in before  # no MTP on the fake engine
        for f in before.values():
            if f.type == "histogram":
                check_histogram(f)
        assert "qwenserve_time_to_first_token_seconds" in before  # the qwenserve_ names stay
        for name in PHASES:
            bounds = [float(s.labels["le"]) for s in before[name].samples if s.name == name + "_bucket"]
            assert bounds == VLLM_REQUEST_LATENCY_BUCKETS, name

        usage = {"prompt": 0, "completion": 0, "stop": 0, "length": 0}
        bodies = [
            {"prompt": "[[reply:one two three]]", "max_tokens": 40},  # ends with stop
            {"prompt": "[[repeat]]", "max_tokens": 7},                # ends with length
            {"prompt": "[[repeat]]", "max_tokens": 5, "stream": True},
        ]
        for b in bodies:
            r = httpx.post(base + "/v1/completions", json={"model": MODEL, **b}, timeout=30)
            assert r.status_code == 200, r.text
            if b.get("stream"):
                usage["completion"] += 5
                usage["prompt"] += len(b["prompt"])  # the fake tokenizer: one token a byte
                usage["length"] += 1
                continue
            j = r.json()
            usage["prompt"] += j["usage"]["prompt_tokens"]
            usage["completion"] += j["usage"]["completion_tokens"]
            usage[j["choices"][0]["finish_reason"]] += 1
        assert usage["stop"] == 1 and usage["length"] == 2
        after = scrape(base)

        def delta(family, sample_name=None, **labels):
            return value(after, family, sample_name, **labels) - value(before, family, sample_name, **labels)

        n = len(bodies)
        assert delta("vllm:prompt_tokens") == usage["prompt"]
        assert delta("vllm:generation_tokens") == usage["completion"]
        assert delta("vllm:request_success", finished_reason="stop") == usage["stop"]
        assert delta("vllm:request_success", finished_reason="length") == usage["length"]
        for h in ("vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds",
                  "vllm:request_prompt_tokens", "vllm:request_generation_tokens",
                  "vllm:request_params_max_tokens", "vllm:request_decode_time_seconds",
                  "vllm:request_time_per_output_token_seconds", *PHASES):
            assert delta(h, h + "_count") == n, h
        finished = sum(delta("vllm:request_success", finished_reason=r) for r in ("stop", "length", "abort", "error"))
        assert finished == n
        phase_sum = {h: delta(h, h + "_sum") for h in PHASES}
        assert all(v >= 0 for v in phase_sum.values()), phase_sum
        assert abs(phase_sum["vllm:request_prefill_time_seconds"] + phase_sum["vllm:request_decode_time_seconds"]
                   - phase_sum["vllm:request_inference_time_seconds"]) < 1e-6, phase_sum
        # The engine's span lies inside the HTTP server's (arrival there → the last token sent).
        assert (phase_sum["vllm:request_queue_time_seconds"] + phase_sum["vllm:request_inference_time_seconds"]
                <= delta("vllm:e2e_request_latency_seconds", "vllm:e2e_request_latency_seconds_sum"))
        # A generated token takes a step (--fake-step-ms 1): at least 1 ms a token after the first.
        assert phase_sum["vllm:request_decode_time_seconds"] >= 0.001 * (usage["completion"] - n)
        assert delta("vllm:request_prompt_tokens", "vllm:request_prompt_tokens_sum") == usage["prompt"]
        assert delta("vllm:request_generation_tokens", "vllm:request_generation_tokens_sum") == usage["completion"]
        assert delta("vllm:request_params_max_tokens", "vllm:request_params_max_tokens_sum") == 40 + 7 + 5
        # One inter-token gap per token after a completion's first (the fake engine emits one a step).
        assert delta("vllm:inter_token_latency_seconds", "vllm:inter_token_latency_seconds_count") == usage["completion"] - n
        assert delta("vllm:time_per_output_token_seconds", "vllm:time_per_output_token_seconds_count") == usage["completion"] - n
        assert delta("vllm:e2e_request_latency_seconds", "vllm:e2e_request_latency_seconds_sum") > 0
        for f in after.values():
            if f.type == "histogram":
                check_histogram(f)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_waiting_behind_max_num_seqs_is_queue_time():
    # One running request at a time: the second waits until the first (300 steps of >= 1 ms) ends.
    proc, base = start_server("--max-num-seqs", "1", api_key=None)
    try:
        before = scrape(base)
        first = threading.Thread(target=lambda: httpx.post(
            base + "/v1/completions", json={"model": MODEL, "prompt": "[[repeat]]", "max_tokens": 300}, timeout=60))
        first.start()
        deadline = time.time() + 20
        while value(scrape(base), "vllm:num_requests_running") < 1:
            assert time.time() < deadline, "the first request never ran"
            time.sleep(0.01)
        started = time.time()
        r = httpx.post(base + "/v1/completions", json={"model": MODEL, "prompt": "[[repeat]]", "max_tokens": 2},
                       timeout=60)
        assert r.status_code == 200, r.text
        waited = time.time() - started
        first.join(timeout=60)
        after = scrape(base)

        def delta(family, sample_name):
            return value(after, family, sample_name) - value(before, family, sample_name)

        q = "vllm:request_queue_time_seconds"
        assert delta(q, q + "_count") == 2
        # The second request's queue time is most of its wait (it ran for two steps of it).
        queued = delta(q, q + "_sum")
        assert 0.5 * waited <= queued <= waited + 0.05, (queued, waited)
        assert waited > 0.1, waited
    finally:
        proc.terminate()
        proc.wait(timeout=30)
