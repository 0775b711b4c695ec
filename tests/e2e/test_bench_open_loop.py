# `qwenserve bench` open loop with ShareGPT input (issue 20) against a live fake-engine server:
# the committed tests/data/sharegpt/sample.json is measured with the Qwen tokenizer, and which
# conversations are sent and with what max_tokens is checked against Hugging Face `tokenizers`
# on the same file with vLLM's filter (prompt and answer >= 4 tokens, prompt <= 1024,
# prompt + answer <= 2048). The fake engine repeats until max_tokens ("[[repeat]]" in every
# prompt), so the tokens generated add up to the max_tokens of the requests sent.
import json
import os
import subprocess

from tokenizers import Tokenizer

from conftest import BINARY, start_server

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
DATA = os.path.join(REPO, "tests", "data", "sharegpt", "sample.json")
TOKENIZER = os.path.join(REPO, "models", "qwen36-tiny", "tokenizer.json")


def expected_max_tokens():
    tok = Tokenizer.from_file(TOKENIZER)
    n = lambda s: len(tok.encode(s, add_special_tokens=False).ids)
    out = []
    for entry in json.load(open(DATA)):
        turns = entry["conversations"]
        human = next((i for i, t in enumerate(turns) if t["from"] in ("human", "user")), None)
        if human is None or human + 1 >= len(turns) or turns[human + 1]["from"] not in ("gpt", "chatgpt", "assistant"):
            continue
        p, a = n(turns[human]["value"]), n(turns[human + 1]["value"])
        if p < 4 or a < 4 or p > 1024 or p + a > 2048:
            continue
        out.append(a)
    return out


def bench(base, tmp_path, *extra):
    out = tmp_path / "r.json"
    r = subprocess.run([BINARY, "bench", "--url", base, "--model", "tiny", "--json-out", str(out), *extra],
                       capture_output=True, text=True, timeout=120)
    return r, (json.loads(out.read_text()) if r.returncode == 0 else None)


def test_sharegpt_open_loop_sends_what_vllms_filter_keeps(tmp_path):
    want = expected_max_tokens()
    assert len(want) == 5  # the file is built so: 7 of 12 entries fall to one rule each
    proc, base = start_server(api_key=None)
    try:
        r, j = bench(base, tmp_path, "--sharegpt", DATA, "--tokenizer", TOKENIZER, "--request-rate", "40",
                     "--burstiness", "0.5", "--seed", "3", "--clients", "4")
        assert r.returncode == 0, r.stderr
        assert j["open_loop"] == {"request_rate": 40.0, "arrival": "poisson", "burstiness": 0.5, "seed": 3}
        res = j["result"]
        assert res["completed"] == len(want), res
        assert res["total_completion_tokens"] == sum(want)
        assert "Pass 1" in r.stdout

        r, j = bench(base, tmp_path, "--sharegpt", DATA, "--tokenizer", TOKENIZER, "--requests", "2",
                     "--request-rate", "100", "--arrival", "constant")
        assert r.returncode == 0, r.stderr
        assert j["result"]["completed"] == 2
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_bad_combinations_name_the_option(tmp_path):
    for args, needle in ((["--sharegpt", DATA], "--tokenizer"),
                         (["--sharegpt", DATA, "--fixture", DATA], "exactly one of --fixture"),
                         ([], "exactly one of --fixture"),
                         (["--sharegpt", DATA, "--tokenizer", TOKENIZER, "--burstiness", "2"], "--request-rate"),
                         (["--sharegpt", DATA, "--tokenizer", TOKENIZER, "--request-rate", "-1"], "--request-rate"),
                         (["--sharegpt", DATA, "--tokenizer", TOKENIZER, "--request-rate", "5", "--burstiness", "0"],
                          "--burstiness"),
                         (["--sharegpt", DATA, "--tokenizer", TOKENIZER, "--request-rate", "5", "--arrival", "x"],
                          "--arrival")):
        r, _ = bench("http://127.0.0.1:1", tmp_path, *args)
        assert r.returncode != 0, args
        assert needle in r.stderr, (args, r.stderr)
