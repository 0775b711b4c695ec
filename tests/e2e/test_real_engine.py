# The official openai client against `qwenserve serve` on the REAL batched engine (CPU backend)
# with the trained test model models/qwen36-tiny and MTP speculative decoding (2 drafts), so the
# server/engine seam is exercised end to end: EOS, stop strings, finish reasons, usage, cached
# tokens, logprobs, logit_bias and seeded sampling with penalties (OpenAI's default temperature
# 1), reasoning split, n > 1, errors, and clean accounting at the end.
# Greedy (temperature 0) outputs are deterministic, so streaming must equal non-streaming.
# Skipped only when the model directory is absent.
import os
import time

import httpx
import openai
import pytest

from conftest import BINARY, free_port, server_output, spawn, wait_healthy

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
MODEL_DIR = os.path.join(REPO, "models", "qwen36-tiny")
MODEL = "qwen36-tiny"
CHAT_Q = [{"role": "user", "content": "Explain the function `dumps` from `json`."}]
NO_THINK = {"chat_template_kwargs": {"enable_thinking": False}}
CODE_PROMPT = 'class Stack:\n    """'
LOOP_PROMPT = "import os\nimport sys\n\n\ndef main():\n"  # the model repeats itself: no early EOS

pytestmark = pytest.mark.skipif(not os.path.isdir(MODEL_DIR), reason=f"{MODEL_DIR} is absent (trained test model)")


@pytest.fixture(scope="module")
def server_proc():
    port = free_port()
    args = [BINARY, "serve", "--model", MODEL_DIR, "--served-model-name", MODEL, "--num-speculative-tokens", "2",
            "--port", str(port)]
    proc = spawn(args)
    base = f"http://127.0.0.1:{port}"
    wait_healthy(proc, base, 30)
    yield base, proc
    proc.terminate()  # SIGTERM: drains, then exits 0
    assert proc.wait(timeout=30) == 0, server_output(proc)


@pytest.fixture(scope="module")
def server(server_proc):
    return server_proc[0]


@pytest.fixture()
def client(server):
    return openai.OpenAI(base_url=server + "/v1", api_key="unused", max_retries=0, timeout=60)


def reasoning_of(obj):
    return getattr(obj, "reasoning_content", None)


def chat_stream(client, **kw):
    """Concatenated content and reasoning, finish reasons by index, the usage chunk."""
    content, reasoning, finish, usage = {}, {}, {}, None
    for chunk in client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw):
        if chunk.usage:
            usage = chunk.usage
        for ch in chunk.choices:
            content[ch.index] = content.get(ch.index, "") + (ch.delta.content or "")
            reasoning[ch.index] = reasoning.get(ch.index, "") + (reasoning_of(ch.delta) or "")
            if ch.finish_reason:
                assert ch.index not in finish, "two finish reasons for one choice"
                finish[ch.index] = ch.finish_reason
    return content, reasoning, finish, usage


@pytest.mark.parametrize("thinking", [True, False])
def test_chat_streaming_equals_non_streaming(client, thinking):
    extra = {} if thinking else NO_THINK
    r = client.chat.completions.create(model=MODEL, messages=CHAT_Q, temperature=0, max_tokens=32, extra_body=extra)
    msg = r.choices[0].message
    assert (msg.content or "") + (reasoning_of(msg) or ""), "empty reply"
    content, reasoning, finish, usage = chat_stream(client, model=MODEL, messages=CHAT_Q, temperature=0, max_tokens=32,
                                                    extra_body=extra)
    assert content[0] == (msg.content or "")
    assert reasoning[0] == (reasoning_of(msg) or "")
    assert finish[0] == r.choices[0].finish_reason
    assert usage.completion_tokens == r.usage.completion_tokens
    assert usage.prompt_tokens == r.usage.prompt_tokens
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_completion_streaming_equals_non_streaming(client):
    r = client.completions.create(model=MODEL, prompt=CODE_PROMPT, temperature=0, max_tokens=32)
    text = r.choices[0].text
    assert text.strip()
    streamed, finish = "", None
    for chunk in client.completions.create(model=MODEL, prompt=CODE_PROMPT, temperature=0, max_tokens=32, stream=True):
        for ch in chunk.choices:
            streamed += ch.text
            finish = ch.finish_reason or finish
    assert streamed == text
    assert finish == r.choices[0].finish_reason
    # The same prompt again hits the prefix cache only for whole pages; the output is unchanged.
    again = client.completions.create(model=MODEL, prompt=CODE_PROMPT * 8, temperature=0, max_tokens=8)
    cached = client.completions.create(model=MODEL, prompt=CODE_PROMPT * 8, temperature=0, max_tokens=8)
    assert cached.choices[0].text == again.choices[0].text
    assert cached.usage.prompt_tokens_details and cached.usage.prompt_tokens_details.cached_tokens > 0


def test_n2_with_seed_is_reproducible(client):
    kw = dict(model=MODEL, messages=CHAT_Q, temperature=1.0, max_tokens=12, n=2, seed=1234)
    a = client.chat.completions.create(**kw)
    b = client.chat.completions.create(**kw)
    assert [c.index for c in a.choices] == [0, 1]
    for x, y in zip(a.choices, b.choices):
        assert (x.message.content, reasoning_of(x.message)) == (y.message.content, reasoning_of(y.message))
    # Every choice's tokens are counted once; a choice ends at EOS or at max_tokens.
    lengths = sum(c.finish_reason == "length" for c in a.choices)
    assert lengths * 12 <= a.usage.completion_tokens <= 2 * 12
    content, reasoning, finish, usage = chat_stream(client, **kw)
    assert set(finish) == {0, 1}
    for i, c in enumerate(a.choices):
        assert content[i] == (c.message.content or "") and reasoning[i] == (reasoning_of(c.message) or "")
    assert usage.completion_tokens == a.usage.completion_tokens


def test_logit_bias_forces_a_token_with_default_sampling(server, client):
    # OpenAI's default temperature (1): a +100 bias leaves no other token any mass.
    ids = httpx.post(server + "/tokenize", json={"model": MODEL, "prompt": " stack"}).json()["tokens"]
    assert len(ids) == 1, ids
    text = httpx.post(server + "/detokenize", json={"model": MODEL, "tokens": ids}).json()["prompt"]
    r = client.completions.create(model=MODEL, prompt=CODE_PROMPT, max_tokens=5, logit_bias={str(ids[0]): 100})
    assert r.choices[0].text == text * 5
    assert r.usage.completion_tokens == 5
    # A -100 bias on the greedy choice changes the first token.
    greedy = client.completions.create(model=MODEL, prompt=CODE_PROMPT, temperature=0, max_tokens=1, logprobs=1)
    first = greedy.choices[0].logprobs.tokens[0]
    first_id = httpx.post(server + "/tokenize", json={"model": MODEL, "prompt": first}).json()["tokens"]
    if len(first_id) == 1:
        banned = client.completions.create(model=MODEL, prompt=CODE_PROMPT, temperature=0, max_tokens=1,
                                           logit_bias={str(first_id[0]): -100})
        assert banned.choices[0].text != first


def test_sampled_with_penalties_and_logprobs_is_reproducible(client):
    kw = dict(model=MODEL, prompt=LOOP_PROMPT, max_tokens=16, seed=77, top_p=0.9, presence_penalty=0.5,
              frequency_penalty=0.3, logprobs=2, extra_body={"top_k": 40, "repetition_penalty": 1.1, "min_p": 0.02})
    a = client.completions.create(**kw)
    b = client.completions.create(**kw)
    assert a.choices[0].text == b.choices[0].text
    assert a.choices[0].logprobs.token_logprobs == b.choices[0].logprobs.token_logprobs
    assert all(lp <= 0 for lp in a.choices[0].logprobs.token_logprobs)
    # Another seed draws another continuation (16 tokens at top_p 0.9: equal only by a fluke).
    c = client.completions.create(**{**kw, "seed": 78})
    assert c.choices[0].text != a.choices[0].text or c.choices[0].logprobs.token_logprobs != a.choices[0].logprobs.token_logprobs


@pytest.mark.parametrize("stream", [False, True])
def test_stop_string_cuts_before_it(client, stream):
    base = client.completions.create(model=MODEL, prompt=CODE_PROMPT, temperature=0, max_tokens=32).choices[0].text
    assert len(base) > 20, base
    stop = base[12:17]
    want = base[: base.find(stop)]
    if stream:
        text, finish = "", None
        for chunk in client.completions.create(model=MODEL, prompt=CODE_PROMPT, temperature=0, max_tokens=32,
                                               stop=[stop], stream=True):
            for ch in chunk.choices:
                text += ch.text
                finish = ch.finish_reason or finish
    else:
        r = client.completions.create(model=MODEL, prompt=CODE_PROMPT, temperature=0, max_tokens=32, stop=[stop])
        text, finish = r.choices[0].text, r.choices[0].finish_reason
    assert text == want, (stop, base)
    assert finish == "stop"


def test_max_tokens_finishes_with_length(client):
    r = client.completions.create(model=MODEL, prompt=LOOP_PROMPT, temperature=0, max_tokens=7)
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 7
    r = client.chat.completions.create(model=MODEL, messages=CHAT_Q, temperature=0, max_tokens=5)
    assert r.choices[0].finish_reason == "length"  # still thinking after 5 tokens
    assert r.usage.completion_tokens == 5


def test_logprobs_shape(client):
    r = client.chat.completions.create(model=MODEL, messages=CHAT_Q, temperature=0, max_tokens=6, logprobs=True,
                                       top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens == 6
    for e in content:
        assert e.logprob <= 0 and len(e.top_logprobs) == 3
        assert bytes(e.bytes).decode("utf-8", "replace") == e.token
        assert [t.logprob for t in e.top_logprobs] == sorted((t.logprob for t in e.top_logprobs), reverse=True)
        assert e.top_logprobs[0].token == e.token  # greedy: the sampled token is the most likely
        assert abs(e.top_logprobs[0].logprob - e.logprob) < 1e-5
    assert "".join(e.token for e in content) == reasoning_of(r.choices[0].message) + (r.choices[0].message.content or "")

    r = client.completions.create(model=MODEL, prompt=LOOP_PROMPT, temperature=0, max_tokens=6, logprobs=2)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 6
    assert "".join(lp.tokens) == r.choices[0].text
    assert lp.text_offset == sorted(lp.text_offset) and lp.text_offset[0] == 0
    for tok, top in zip(lp.tokens, lp.top_logprobs):
        assert 1 <= len(top) <= 3 and tok in top


def test_reasoning_split(client):
    r = client.chat.completions.create(model=MODEL, messages=CHAT_Q, temperature=0, max_tokens=32)
    assert reasoning_of(r.choices[0].message), "thinking enabled (default): reasoning_content expected"
    assert "</think>" not in (r.choices[0].message.content or "")
    r = client.chat.completions.create(model=MODEL, messages=CHAT_Q, temperature=0, max_tokens=32, extra_body=NO_THINK)
    assert not reasoning_of(r.choices[0].message), "thinking disabled: no reasoning_content"
    assert r.choices[0].message.content


def test_errors(client):
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="no-such-model", messages=CHAT_Q)
    assert e.value.status_code == 404 and e.value.body["param"] == "model"
    for kwargs, param in [({"temperature": -1}, "temperature"), ({"max_tokens": 0}, "max_tokens"),
                          ({"top_p": 0}, "top_p"), ({"n": 0}, "n")]:
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model=MODEL, messages=CHAT_Q, **kwargs)
        assert e.value.status_code == 400 and e.value.body["param"] == param, e.value.body
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt=[1, 2, 99999], max_tokens=4)
    assert e.value.body["param"] == "prompt"
    with pytest.raises(openai.BadRequestError) as e:  # > 32768 tokens (the model's max_position_embeddings)
        client.completions.create(model=MODEL, prompt="abc " * 20000, max_tokens=4)
    assert e.value.body["code"] == "context_length_exceeded" and e.value.body["param"] == "prompt"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "abc " * 20000}])
    assert e.value.body["code"] == "context_length_exceeded"


def metric(text, name):
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise KeyError(name)


def test_zz_metrics_after_everything(server, client):
    # Runs last (file order): nothing may be left running or holding KV pages.
    deadline = time.time() + 5
    while True:
        m = httpx.get(server + "/metrics").text
        idle = (metric(m, "qwenserve_num_requests_running") == 0 and metric(m, "qwenserve_kv_cache_usage_ratio") == 0
                and metric(m, "qwenserve_num_requests_in_flight") == 0)
        if idle or time.time() > deadline:
            break
        time.sleep(0.05)
    assert metric(m, "qwenserve_num_requests_running") == 0
    assert metric(m, "qwenserve_num_requests_waiting") == 0
    assert metric(m, "qwenserve_kv_cache_usage_ratio") == 0
    assert metric(m, "qwenserve_state_slot_usage_ratio") == 0
    assert metric(m, "qwenserve_num_requests_in_flight") == 0
    assert metric(m, "qwenserve_prefix_cache_hits_total") > 0
    assert metric(m, "qwenserve_mtp_draft_tokens_total") > 0
    assert 0 < metric(m, "qwenserve_mtp_accepted_tokens_total") <= metric(m, "qwenserve_mtp_draft_tokens_total")
    # The engine's request phases: one prefill, decode and inference time per request that got a
    # token (a queue time also for one aborted after scheduling), and prefill + decode = inference.
    count = {p: metric(m, f"qwenserve_request_{p}_time_seconds_count") for p in ("queue", "prefill", "decode", "inference")}
    total = {p: metric(m, f"qwenserve_request_{p}_time_seconds_sum") for p in ("queue", "prefill", "decode", "inference")}
    assert count["prefill"] == count["decode"] == count["inference"] > 0, count
    assert count["queue"] >= count["prefill"], count
    assert abs(total["prefill"] + total["decode"] - total["inference"]) < 1e-6, total
    assert total["queue"] + total["inference"] <= metric(m, "qwenserve_e2e_request_latency_seconds_sum"), total
    assert httpx.get(server + "/health").status_code == 200


def test_startup_log_shows_resolved_engine_values(server_proc):
    # The start-up log prints the engine's knobs as it runs them: max_model_len and
    # num_state_snapshots resolved (0 asks for "automatic"), by the documented rules
    # (README/ARCHITECTURE): max_model_len = min(max_position_embeddings, KV tokens),
    # snapshots = max(4, max_num_seqs / 4) with prefix caching on.
    import json
    import re
    _, proc = server_proc
    out = server_output(proc)
    line = next(l for l in out.splitlines() if "serve: engine=batched" in l)
    knobs = dict(re.findall(r"(\w+)=(\S+)", line))
    kv_tokens = int(re.search(r"capacity: KV: \d+ pages = (\d+) tokens", out).group(1))
    with open(os.path.join(MODEL_DIR, "config.json")) as f:
        cfg = json.load(f)
    mpe = cfg.get("text_config", cfg)["max_position_embeddings"]
    assert int(knobs["max_model_len"]) == min(mpe, kv_tokens), line
    assert int(knobs["num_state_snapshots"]) == max(4, int(knobs["max_num_seqs"]) // 4), line
    assert int(knobs["num_kv_blocks"]) > 0, line
