# Two CPU replicas of `qwenserve serve` (the real engine on models/qwen36-tiny) behind HAProxy
# (Debian's package, installed by scripts/setup.sh) run with the committed configuration
# deploy/haproxy/qwenserve.cfg: the official openai client through the load balancer gets normal
# and streaming completions; least-connections routing spreads concurrent streams over both
# replicas (each replica's own /metrics counts what it served); when one replica is killed the
# health checks take it out and every following request succeeds on the other.
import concurrent.futures
import os
import re
import shutil
import signal
import time

import httpx
import openai
import pytest

from conftest import BINARY, free_port, spawn, wait_healthy

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
MODEL_DIR = os.path.join(REPO, "models", "qwen36-tiny")
CONFIG = os.path.join(REPO, "deploy", "haproxy", "qwenserve.cfg")
MODEL = "qwen36-tiny"
PROMPT = "import os\nimport sys\n\n\ndef main():\n"


def served(base):
    """Generated tokens this replica has counted (its own /metrics)."""
    text = httpx.get(base + "/metrics", timeout=5).text
    m = re.search(r"^qwenserve_generation_tokens_total (\S+)$", text, re.M)
    assert m, "qwenserve_generation_tokens_total missing from /metrics"
    return float(m.group(1))


@pytest.fixture(scope="module")
def cluster():
    assert shutil.which("haproxy"), "haproxy is not installed (scripts/setup.sh installs it)"
    replicas = []
    for _ in range(2):
        port = free_port()
        proc = spawn([BINARY, "serve", "--model", MODEL_DIR, "--served-model-name", MODEL, "--port", str(port),
                      "--max-num-seqs", "8"])
        replicas.append((proc, f"http://127.0.0.1:{port}", port))
    for proc, base, _ in replicas:
        wait_healthy(proc, base, 60)
    lb_port, stats_port = free_port(), free_port()
    env = dict(os.environ, QS_LB_PORT=str(lb_port), QS_LB_STATS_PORT=str(stats_port), QS_REPLICA_1=f"127.0.0.1:{replicas[0][2]}",
               QS_REPLICA_2=f"127.0.0.1:{replicas[1][2]}")
    lb = spawn(["haproxy", "-db", "-f", CONFIG], env)
    lb_base = f"http://127.0.0.1:{lb_port}"
    wait_healthy(lb, lb_base, 20)
    time.sleep(1.5)  # both servers pass their first checks (rise 2 × inter 500 ms)
    yield replicas, lb_base, f"http://127.0.0.1:{stats_port}/stats;csv"
    lb.send_signal(signal.SIGTERM)
    lb.wait(timeout=10)
    for proc, _, _ in replicas:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=30)


def client(base):
    return openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0, timeout=60)


def server_status(stats_url):
    """HAProxy's view of each replica: {'replica1': 'UP', ...}."""
    rows = httpx.get(stats_url, timeout=5).text.splitlines()
    header = rows[0].lstrip("# ").split(",")
    status = {}
    for row in rows[1:]:
        f = dict(zip(header, row.split(",")))
        if f.get("pxname") == "qwenserve" and f.get("svname", "").startswith("replica"):
            status[f["svname"]] = f["status"]
    return status


def test_completions_and_streams_through_the_balancer(cluster):
    _, lb, stats = cluster
    assert server_status(stats) == {"replica1": "UP", "replica2": "UP"}
    c = client(lb)
    r = c.completions.create(model=MODEL, prompt=PROMPT, max_tokens=12, temperature=0)
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 12
    chunks = list(c.completions.create(model=MODEL, prompt=PROMPT, max_tokens=12, temperature=0, stream=True))
    streamed = "".join(ch.choices[0].text for ch in chunks if ch.choices)
    assert streamed == r.choices[0].text  # greedy: the same text from either replica


def test_least_connections_spreads_concurrent_streams(cluster):
    replicas, lb, _ = cluster
    before = [served(base) for _, base, _ in replicas]

    def one_stream(i):
        s = client(lb).chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": f"Write a function number {i}."}], max_tokens=48,
            temperature=0, stream=True, extra_body={"ignore_eos": True})
        return sum(1 for ch in s if ch.choices and ch.choices[0].delta.content)

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        counts = list(pool.map(one_stream, range(8)))
    assert all(n > 0 for n in counts)
    gained = [served(base) - b for (_, base, _), b in zip(replicas, before)]
    assert sum(gained) == 8 * 48
    # Eight streams held open at once: least-connections gives each replica some of them.
    assert min(gained) >= 2 * 48, f"tokens per replica {gained}: the balancer did not spread the streams"


def test_a_dead_replica_is_taken_out(cluster):
    replicas, lb, stats = cluster
    proc, dead_base, _ = replicas[0]
    proc.kill()
    proc.wait(timeout=10)
    deadline = time.time() + 10  # fall 2 × inter 500 ms
    while server_status(stats).get("replica1", "").startswith("UP") and time.time() < deadline:
        time.sleep(0.2)
    assert server_status(stats) == {"replica1": "DOWN", "replica2": "UP"}
    alive_base = replicas[1][1]
    before = served(alive_base)
    c = client(lb)
    for i in range(6):
        r = c.completions.create(model=MODEL, prompt=PROMPT + f"# {i}\n", max_tokens=4, temperature=0)
        assert r.usage.completion_tokens == 4
    assert served(alive_base) - before == 6 * 4
    assert httpx.get(lb + "/health", timeout=5).status_code == 200
