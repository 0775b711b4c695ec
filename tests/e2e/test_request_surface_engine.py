# The request surface on the REAL engine (models/qwen36-tiny, CPU backend) through the official
# openai client (issue 16 items 2 and 2b): priority order under --scheduling-policy priority
# (against FIFO order without priorities), best_of (the n best of best_of by cumulative logprob,
# against the same seeded completions asked for with n = best_of), skip_special_tokens (against
# HF `tokenizers` decoding the forced special tokens), parallel_tool_calls false with
# tool_choice required (exactly one call), and structural tags (replies valid under the
# `jsonschema` package inside the tag, in both request shapes). The fake-engine side of the
# same fields: test_request_surface.py.
import json
import os
import threading
import time

import jsonschema
import openai
import pytest
from tokenizers import Tokenizer

from conftest import BINARY, free_port, server_output, spawn, wait_healthy

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
MODEL_DIR = os.path.join(REPO, "models", "qwen36-tiny")
MODEL = "qwen36-tiny"
NO_THINK = {"chat_template_kwargs": {"enable_thinking": False}}
LOOP_PROMPT = "import os\nimport sys\n\n\ndef main():\n"
CODE_PROMPT = 'class Stack:\n    """'

pytestmark = pytest.mark.skipif(not os.path.isdir(MODEL_DIR), reason=f"{MODEL_DIR} is absent (trained test model)")


@pytest.fixture(scope="module")
def server():
    # One running sequence at a time: the waiting queue's order is what priority changes.
    port = free_port()
    proc = spawn([BINARY, "serve", "--model", MODEL_DIR, "--served-model-name", MODEL, "--port", str(port),
                  "--scheduling-policy", "priority", "--max-num-seqs", "1", "--worker-threads", "4"])
    base = f"http://127.0.0.1:{port}"
    wait_healthy(proc, base, 60)
    yield base
    proc.terminate()
    assert proc.wait(timeout=30) == 0, server_output(proc)


@pytest.fixture()
def client(server):
    return openai.OpenAI(base_url=server + "/v1", api_key="unused", max_retries=0, timeout=300)


def finish_order(client, priorities):
    """Starts a long request, then queues one short request per priority (in list order, 0.3 s
    apart) while it runs; returns the indexes of the short ones in the order they finished."""
    long_stream = client.completions.create(model=MODEL, prompt=LOOP_PROMPT, max_tokens=400, temperature=0,
                                            stream=True, extra_body={"ignore_eos": True})
    next(iter(long_stream))  # running: it holds the only sequence slot
    done = []
    lock = threading.Lock()

    def short(i, p):
        client.completions.create(model=MODEL, prompt=CODE_PROMPT, max_tokens=4, temperature=0,
                                  extra_body={"priority": p})
        with lock:
            done.append(i)

    threads = []
    for i, p in enumerate(priorities):
        t = threading.Thread(target=short, args=(i, p))
        t.start()
        threads.append(t)
        time.sleep(0.3)
    for chunk in long_stream:
        pass
    for t in threads:
        t.join(timeout=300)
    return done


def test_priority_orders_the_waiting_queue(client):
    assert finish_order(client, [0, 0, 0]) == [0, 1, 2]  # FIFO among equals
    assert finish_order(client, [5, 0, -5]) == [2, 1, 0]  # lower runs first, whatever the arrival


def test_best_of_returns_the_best_by_cumulative_logprob(client):
    kw = dict(model=MODEL, prompt=CODE_PROMPT, max_tokens=12, temperature=1.0, seed=7)
    every = client.completions.create(n=4, logprobs=0, **kw)
    scored = sorted(every.choices, key=lambda c: -sum(c.logprobs.token_logprobs))
    assert len({c.text for c in every.choices}) > 1, "seeded samples differ"
    best = client.completions.create(n=2, extra_body={"best_of": 4}, **kw)
    assert [c.text for c in best.choices] == [c.text for c in scored[:2]]
    assert [c.index for c in best.choices] == [0, 1]
    assert best.choices[0].logprobs is None  # not asked for
    one = client.completions.create(n=1, extra_body={"best_of": 4}, **kw)
    assert one.choices[0].text == scored[0].text
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(n=1, stream=True, extra_body={"best_of": 2}, **kw)
    assert e.value.body["param"] == "best_of"


def test_skip_special_tokens(client):
    tok = Tokenizer.from_file(os.path.join(MODEL_DIR, "tokenizer.json"))
    special = tok.token_to_id("<|vision_pad|>")
    assert special is not None
    kw = dict(model=MODEL, prompt=CODE_PROMPT, max_tokens=3, temperature=0, logit_bias={str(special): 100})
    kept = client.completions.create(extra_body={"skip_special_tokens": False}, **kw)
    assert kept.choices[0].text == tok.decode([special] * 3, skip_special_tokens=False) == "<|vision_pad|>" * 3
    skipped = client.completions.create(**kw)
    assert skipped.choices[0].text == tok.decode([special] * 3, skip_special_tokens=True) == ""
    assert skipped.usage.completion_tokens == kept.usage.completion_tokens == 3


def test_parallel_tool_calls_false_gives_one_call(client):
    tools = [{"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}},
        {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}}]
    for seed in range(4):
        r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Add 2 and 3."}],
                                           tools=tools, tool_choice="required", parallel_tool_calls=False,
                                           max_tokens=300, seed=seed, extra_body=NO_THINK)
        c = r.choices[0]
        assert c.finish_reason == "tool_calls", c
        assert len(c.message.tool_calls) == 1
        if c.message.tool_calls[0].function.name == "add":
            jsonschema.validate(json.loads(c.message.tool_calls[0].function.arguments), tools[0]["function"]["parameters"])


SCHEMA = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 9},
                                           "word": {"enum": ["alpha", "beta", "gamma"]}},
          "required": ["n", "word"]}
TAG = {"type": "structural_tag", "format": {"type": "sequence", "elements": [
    {"type": "const_string", "value": "Answer: "},
    {"type": "tag", "begin": "<json>", "content": {"type": "json_schema", "json_schema": SCHEMA}, "end": "</json>"}]}}


def check_tagged(text):
    assert text.startswith("Answer: <json>") and text.endswith("</json>"), text
    jsonschema.validate(json.loads(text[len("Answer: <json>"):-len("</json>")]), SCHEMA)


def test_structural_tag_response_format(client):
    for seed in range(6):
        r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Pick one."}],
                                           response_format=TAG, max_tokens=200, seed=seed,
                                           temperature=0 if seed == 0 else 1.0, extra_body=NO_THINK)
        assert r.choices[0].finish_reason == "stop", r.choices[0]
        check_tagged(r.choices[0].message.content)
    # vLLM's structured_outputs.structural_tag takes the tag as JSON text; completions too.
    r = client.completions.create(model=MODEL, prompt=CODE_PROMPT, max_tokens=200, seed=3,
                                  extra_body={"structured_outputs": {"structural_tag": json.dumps(TAG)}})
    assert r.choices[0].finish_reason == "stop"
    check_tagged(r.choices[0].text)


def test_legacy_structural_tag(client):
    # The older shape: free text, and after the trigger the tag with its schema. The constant
    # begin forces the tiny model into the tag through a regex-free prompt: the reply is
    # whatever it writes, but any tag in it is complete and valid.
    legacy = {"type": "structural_tag", "triggers": ["<json>"],
              "structures": [{"begin": "<json>", "schema": SCHEMA, "end": "</json>"}]}
    for seed in range(3):
        r = client.completions.create(model=MODEL, prompt="<json>", max_tokens=60, seed=seed,
                                      extra_body={"response_format": legacy})
        text = r.choices[0].text
        while "<json>" in text:
            start = text.index("<json>") + len("<json>")
            if "</json>" not in text[start:]:
                assert r.choices[0].finish_reason == "length"
                break
            end = text.index("</json>", start)
            jsonschema.validate(json.loads(text[start:end]), SCHEMA)
            text = text[end:]


@pytest.mark.parametrize("rf, needle", [
    ({"type": "structural_tag"}, "format"),
    ({"type": "structural_tag", "format": {"type": "no_such_format"}}, "no_such_format"),
    ({"type": "structural_tag", "format": {"type": "json_schema", "json_schema": {"type": "array",
                                                                                   "uniqueItems": True}}}, "uniqueItems"),
    ({"type": "structural_tag", "triggers": ["<a"], "structures": [{"begin": "<b>", "schema": {}, "end": "</b>"}]},
     "trigger"),
])
def test_bad_structural_tags_are_400s(client, rf, needle):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}], response_format=rf,
                                       extra_body=NO_THINK)
    assert e.value.body["param"] == "response_format"
    assert needle in e.value.body["message"], e.value.body["message"]
