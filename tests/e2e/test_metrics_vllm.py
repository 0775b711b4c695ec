# /metrics under vLLM's names (issue 20): the text is parsed by Prometheus' own Python parser
# (prometheus_client), the vllm: families have vLLM's types and labels (model_name, engine,
# finished_reason), histograms are well formed, and the values move by what the requests did.
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
}


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
                  "vllm:request_time_per_output_token_seconds"):
            assert delta(h, h + "_count") == n, h
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
