# The Kubernetes manifests (deploy/k8s/qwenserve.yaml), read with PyYAML: readiness and
# liveness probe /health on the container's port, the Service targets that port, Prometheus
# scrapes /metrics on it, a GPU is requested, and the container's arguments are options that
# `qwenserve serve` knows (run with a model path that does not exist, it must complain about the
# model, not about an option).
import os
import subprocess

import yaml

from conftest import BINARY

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
MANIFEST = os.path.join(REPO, "deploy", "k8s", "qwenserve.yaml")


def docs():
    with open(MANIFEST) as f:
        return {d["kind"]: d for d in yaml.safe_load_all(f)}


def container():
    return docs()["Deployment"]["spec"]["template"]["spec"]["containers"][0]


def test_probes_ports_and_scraping_agree():
    d = docs()
    c = container()
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    args = c["args"]
    assert args[0] == "serve"
    serve_port = int(args[args.index("--port") + 1])
    assert ports["http"] == serve_port
    for probe in ("readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"]["path"] == "/health", probe
        assert c[probe]["httpGet"]["port"] in ("http", serve_port), probe
    assert c["livenessProbe"]["initialDelaySeconds"] >= 300  # weights load for minutes
    assert "--host" in args and args[args.index("--host") + 1] == "0.0.0.0"
    svc = d["Service"]
    assert svc["spec"]["selector"] == d["Deployment"]["spec"]["selector"]["matchLabels"]
    assert svc["spec"]["ports"][0]["targetPort"] in ("http", serve_port)
    ann = d["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    assert ann["prometheus.io/scrape"] == "true"
    assert ann["prometheus.io/path"] == "/metrics"
    assert int(ann["prometheus.io/port"]) == serve_port
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 1
    # With an API key every route needs it, /health and /metrics too unless --open-health-metrics:
    # the probes and the scraper send none.
    if any(e["name"] == "QS_API_KEY" for e in c.get("env", [])):
        assert "--open-health-metrics" in args


def test_container_arguments_are_serve_options():
    args = list(container()["args"])
    args[args.index("--model") + 1] = "/nonexistent/qwen36"
    r = subprocess.run([BINARY, *args], capture_output=True, text=True, timeout=60)
    out = r.stdout + r.stderr
    assert r.returncode != 0
    assert "unknown option" not in out, out
    assert "/nonexistent/qwen36" in out, out
