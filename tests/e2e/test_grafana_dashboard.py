# deploy/grafana/qwenserve.json (issue 20): every panel's PromQL names only series that a live
# `qwenserve serve` exports on /metrics (the real engine on models/qwen36-tiny with MTP on, so
# the speculative-decoding series are there too), groups and filters only by labels those
# series carry (plus the target labels Prometheus adds), and uses only the dashboard's own
# variables. The PromQL is read by a small lexer below, itself tested on known expressions.
import json
import os
import re

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import BINARY, free_port, spawn, wait_healthy

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
DASHBOARD = os.path.join(REPO, "deploy", "grafana", "qwenserve.json")
MODEL_DIR = os.path.join(REPO, "models", "qwen36-tiny")
# Labels Prometheus adds to every scraped series.
TARGET_LABELS = {"instance", "job"}
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
            "offset", "inf", "nan"}


def strip_strings(expr):
    return re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)


def grouping_labels(expr):
    """Labels named in by/without/on/ignoring clauses."""
    out = set()
    for m in re.finditer(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)", strip_strings(expr)):
        out |= {l.strip() for l in m.group(1).split(",") if l.strip()}
    return out


def matcher_labels(expr):
    """Labels named in {…} selectors."""
    out = set()
    for m in re.finditer(r"\{([^}]*)\}", expr):
        out |= set(re.findall(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)", m.group(1)))
    return out


def metric_names(expr):
    """The series names a PromQL expression selects (Grafana variables allowed)."""
    e = strip_strings(expr)
    e = re.sub(r"\$\{[^}]*\}|\$\w+", " ", e)                       # $var, ${var}, $__rate_interval
    e = re.sub(r"\{[^}]*\}", " ", e)                                # label matchers
    e = re.sub(r"\[[^\]]*\]", " ", e)                               # range and subquery windows
    e = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    e = re.sub(r"\boffset\s+-?\w+", " ", e)                         # offset 5m
    e = re.sub(r"(?<![\w:])\d+(?:\.\d+)?(?:[eE][+-]?\d+)?", " ", e)  # numbers
    names = set()
    for m in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", e):
        rest = e[m.end():].lstrip()
        if rest.startswith("("):  # a function or an aggregation
            continue
        if m.group(0).lower() in KEYWORDS:
            continue
        names.add(m.group(0))
    return names


def panels(dash):
    for p in dash["panels"]:
        yield p
        yield from p.get("panels", [])


def expressions(dash):
    return [(p["title"], t["expr"]) for p in panels(dash) for t in p.get("targets", [])]


def problems(dash, exported_names, exported_labels):
    """Every reason the dashboard does not fit what /metrics exports (empty: it fits)."""
    out = []
    variables = {v["name"] for v in dash["templating"]["list"]}
    for title, expr in expressions(dash):
        names = metric_names(expr)
        if not names:
            out.append(f"{title}: no metric in {expr!r}")
        for n in sorted(names - exported_names):
            out.append(f"{title}: {n} is not exported")
        for l in sorted((grouping_labels(expr) | matcher_labels(expr)) - exported_labels - TARGET_LABELS):
            out.append(f"{title}: label {l} is on no exported series")
        for v in re.findall(r"\$\{?(\w+)", expr):
            if not v.startswith("__") and v not in variables:
                out.append(f"{title}: variable ${v} is not defined")
    return out


def test_lexer_on_known_expressions():
    assert metric_names('histogram_quantile(0.99, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket'
                        '{model_name=~"$model_name"}[$__rate_interval])))') == {"vllm:time_to_first_token_seconds_bucket"}
    assert metric_names("$cost_per_hour / 3600 / sum(rate(vllm:generation_tokens_total[5m])) * 1e6") == \
        {"vllm:generation_tokens_total"}
    assert metric_names('a_total{x="b c"} / on (instance) group_left (y) b offset 5m and c') == {"a_total", "b", "c"}
    assert grouping_labels("sum by (finished_reason, le) (x) / on(instance) y") == {"finished_reason", "le", "instance"}
    assert matcher_labels('x{model_name=~"a", finished_reason!="b"}') == {"model_name", "finished_reason"}


@pytest.fixture(scope="module")
def exported():
    """Series names and label names of a live server's /metrics after one request."""
    if not os.path.isdir(MODEL_DIR):
        pytest.skip(f"{MODEL_DIR} is absent")
    port = free_port()
    proc = spawn([BINARY, "serve", "--model", MODEL_DIR, "--served-model-name", "tiny", "--num-speculative-tokens", "2",
                  "--port", str(port)])
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(proc, base, 60)
        r = httpx.post(base + "/v1/completions", json={"model": "tiny", "prompt": "def f(x):", "max_tokens": 8,
                                                       "temperature": 0}, timeout=60)
        assert r.status_code == 200, r.text
        text = httpx.get(base + "/metrics", timeout=10).text
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    names, labels = set(), set()
    for f in text_string_to_metric_families(text):
        for s in f.samples:
            names.add(s.name)
            labels |= set(s.labels)
    return names, labels


def test_every_panel_queries_exported_series(exported):
    with open(DASHBOARD) as f:
        dash = json.load(f)
    names, labels = exported
    assert "vllm:spec_decode_num_drafts_total" in names  # MTP on: the speculative series are there
    assert len(expressions(dash)) >= 15
    assert problems(dash, names, labels) == []


def test_the_check_fails_on_an_unknown_series_label_or_variable(exported):
    names, labels = exported
    with open(DASHBOARD) as f:
        dash = json.load(f)
    dash["panels"].append({"title": "bad", "targets": [
        {"expr": 'sum by (pod) (rate(vllm:no_such_metric_total{model_name=~"$nope"}[$__rate_interval]))'}]})
    found = problems(dash, names, labels)
    assert found == ["bad: vllm:no_such_metric_total is not exported", "bad: label pod is on no exported series",
                     "bad: variable $nope is not defined"]


def test_dashboard_shape():
    with open(DASHBOARD) as f:
        dash = json.load(f)
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert {"datasource", "model_name", "cost_per_hour"} <= variables.keys()
    float(variables["cost_per_hour"]["query"])  # a number by default
    ids = [p["id"] for p in panels(dash)]
    assert len(ids) == len(set(ids))
    exprs = " ".join(e for _, e in expressions(dash))
    for needed in ("histogram_quantile", "vllm:time_to_first_token_seconds_bucket",
                   "vllm:inter_token_latency_seconds_bucket", "vllm:num_requests_waiting",
                   "vllm:kv_cache_usage_perc", "qwenserve_http_errors_total", "$cost_per_hour"):
        assert needed in exprs, needed
    for p in panels(dash):
        if p["type"] != "row":
            assert p.get("targets"), p["title"]
            g = p["gridPos"]
            assert 0 <= g["x"] and g["x"] + g["w"] <= 24, p["title"]
