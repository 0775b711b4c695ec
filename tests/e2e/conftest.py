# Starts a live `qwenserve serve --fake-engine` for the e2e tests (the official openai client
# against real HTTP). QS_BINARY names the binary (ctest sets it).
import os
import socket
import subprocess
import tempfile
import time

import httpx
import openai
import pytest

BINARY = os.environ.get("QS_BINARY", os.path.join(os.path.dirname(__file__), "../../build/qwenserve"))
API_KEY = "e2e-key"
MODEL = "tiny"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(args, env=None):
    """Starts the server with its output (the log) going to a temporary file, not a pipe: the
    request log writes a line per request, and a pipe nobody reads would fill up and block it."""
    log = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
    proc.log = log
    return proc


def server_output(proc):
    """Everything the server has written so far (stdout and stderr)."""
    proc.log.flush()
    proc.log.seek(0)
    return proc.log.read()


def wait_healthy(proc, base, seconds, headers=None):
    """Waits until `base`/health answers 200; fails the test (killing `proc`) when the process
    exits first or `seconds` pass."""
    deadline = time.time() + seconds
    while True:
        if proc.poll() is not None:
            pytest.fail(f"{proc.args[0]} exited: " + server_output(proc))
        try:
            if httpx.get(base + "/health", headers=headers or {}, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.time() > deadline:
            proc.kill()
            pytest.fail(f"{base} did not become healthy within {seconds} s")
        time.sleep(0.05)


def start_server(*extra, api_key=API_KEY):
    port = free_port()
    args = [BINARY, "serve", "--model", "builtin:tiny", "--served-model-name", MODEL, "--fake-engine",
            "--port", str(port), "--fake-step-ms", "1", "--max-model-len", "2048", *extra]
    if api_key:
        args += ["--api-key", api_key]
    proc = spawn(args)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
            if httpx.get(base + "/health", headers=headers, timeout=1).status_code == 200:
                return proc, base
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            raise RuntimeError("server exited: " + server_output(proc))
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("server did not become healthy")


@pytest.fixture(scope="session")
def server():
    proc, base = start_server("--max-body-bytes", "65536")
    yield base
    proc.terminate()
    proc.wait(timeout=30)


@pytest.fixture()
def client(server):
    return openai.OpenAI(base_url=server + "/v1", api_key=API_KEY, max_retries=0)
