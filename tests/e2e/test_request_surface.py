# The request surface (issue 16 item 2) through the official openai client, against
# `qwenserve serve --fake-engine` with the REAL tokenizer and chat template of models/qwen36-tiny:
# the fake engine's "[[echo_request]]" script replies with the prompt ids and the priority it
# received, so the prompt the server built can be compared with independent references:
# jinja2 rendering the template text (in transformers' environment, tools/chat_template_parity.py)
# and HF `tokenizers` encoding it. Covered: chat_template_kwargs (enable_thinking,
# preserve_thinking; unknown keys refused), add_generation_prompt, continue_final_message (cut
# as transformers' apply_chat_template cuts it), --chat-template FILE (a Qwen3 template renders
# as jinja2 renders it; a Llama 3.1 template through the Jinja interpreter renders as jinja2
# renders it, its raise_exception a 400; a construct the interpreter does not support stops the
# server with an error naming the file and line), priority (refused without --scheduling-policy priority, else
# passed to the engine), truncate_prompt_tokens, echo (plain and streamed), parallel_tool_calls,
# stream_options.continuous_usage_stats. The real engine's side (priority order, best_of,
# skip_special_tokens, structural tags): test_request_surface_engine.py.
import json
import os
import subprocess
import sys

import openai
import pytest
from tokenizers import Tokenizer

from conftest import BINARY, free_port, spawn, wait_healthy

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
MODEL_DIR = os.path.join(REPO, "models", "qwen36-tiny")
QWEN3_DIR = os.path.join(REPO, "..", "shared", "data", "tokenizers", "qwen3")
MODEL = "tiny"
sys.path.insert(0, os.path.join(REPO, "tools"))
from chat_template_parity import make_env  # noqa: E402  (jinja2 as transformers configures it)

pytestmark = pytest.mark.skipif(not os.path.isdir(MODEL_DIR), reason=f"{MODEL_DIR} is absent (trained test model)")

TOKENIZER = Tokenizer.from_file(os.path.join(MODEL_DIR, "tokenizer.json"))
MODEL_TEMPLATE = json.load(open(os.path.join(MODEL_DIR, "tokenizer_config.json")))["chat_template"]
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {
    "type": "object", "properties": {"x": {"type": "integer"}}}}}]
HISTORY = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "First question?"},
    {"role": "assistant", "content": "First answer.", "reasoning_content": "I thought about it."},
    {"role": "user", "content": "Second question? [[echo_request]]"},
]


def start(*extra):
    port = free_port()
    proc = spawn([BINARY, "serve", "--model", MODEL_DIR, "--served-model-name", MODEL, "--fake-engine",
                  "--fake-step-ms", "1", "--port", str(port), *extra])
    base = f"http://127.0.0.1:{port}"
    wait_healthy(proc, base, 30)
    return proc, base


@pytest.fixture(scope="module")
def servers():
    """The default server (fcfs) and one with --scheduling-policy priority."""
    procs = [start(), start("--scheduling-policy", "priority")]
    yield [base for _, base in procs]
    for proc, _ in procs:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture()
def client(servers):
    return openai.OpenAI(base_url=servers[0] + "/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.fixture()
def priority_client(servers):
    return openai.OpenAI(base_url=servers[1] + "/v1", api_key="unused", max_retries=0, timeout=60)


def reference_ids(template_text, messages, **kwargs):
    kwargs.setdefault("add_generation_prompt", True)
    text = make_env().from_string(template_text).render(messages=messages, **kwargs)
    return TOKENIZER.encode(text, add_special_tokens=False).ids


def continue_final(template_text, messages, **kwargs):
    """transformers' apply_chat_template(continue_final_message=True): rendered without the
    generation prompt, then cut right after the last occurrence of the final message's
    (stripped) text."""
    text = make_env().from_string(template_text).render(messages=messages, add_generation_prompt=False, **kwargs)
    final = messages[-1]["content"].strip()
    return TOKENIZER.encode(text[:text.rindex(final) + len(final)], add_special_tokens=False).ids


def echoed(text):
    """'priority=P prompt_ids=1,2,3' → (P, [1, 2, 3])."""
    prio, ids = text.split(" ")
    return int(prio.split("=")[1]), [int(x) for x in ids.split("=")[1].split(",")]


def chat_echo(client, messages, **kw):
    r = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=4000, **kw)
    m = r.choices[0].message
    text = (m.content or "") + (getattr(m, "reasoning_content", None) or "")
    return echoed(text), r


@pytest.mark.parametrize("kwargs", [
    {},
    {"enable_thinking": False},
    {"preserve_thinking": True},
    {"enable_thinking": False, "preserve_thinking": True, "add_vision_id": True},
])
def test_chat_template_kwargs_render_as_jinja2(client, kwargs):
    (_, ids), r = chat_echo(client, HISTORY, extra_body={"chat_template_kwargs": kwargs})
    assert ids == reference_ids(MODEL_TEMPLATE, HISTORY, **kwargs)
    assert r.usage.prompt_tokens == len(ids)


def test_kwargs_change_the_prompt(client):
    # The cases above would pass with the kwargs ignored if they rendered the same: they do not.
    plain = reference_ids(MODEL_TEMPLATE, HISTORY)
    assert reference_ids(MODEL_TEMPLATE, HISTORY, enable_thinking=False) != plain
    assert reference_ids(MODEL_TEMPLATE, HISTORY, preserve_thinking=True) != plain


def test_chat_template_kwargs_unknown_key_is_400(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=HISTORY,
                                       extra_body={"chat_template_kwargs": {"thinking_budget": 10}})
    assert e.value.body["param"] == "chat_template_kwargs.thinking_budget"
    assert "enable_thinking" in e.value.body["message"]


def test_add_generation_prompt_false(client):
    (_, ids), _ = chat_echo(client, HISTORY, extra_body={"add_generation_prompt": False})
    assert ids == reference_ids(MODEL_TEMPLATE, HISTORY, add_generation_prompt=False)
    assert ids != reference_ids(MODEL_TEMPLATE, HISTORY)


@pytest.mark.parametrize("thinking", [True, False])
def test_continue_final_message(client, thinking):
    msgs = HISTORY + [{"role": "assistant", "content": "The answer is"}]
    kw = {} if thinking else {"enable_thinking": False}
    (_, ids), _ = chat_echo(client, msgs, extra_body={"continue_final_message": True, "add_generation_prompt": False,
                                                       "chat_template_kwargs": kw})
    assert ids == continue_final(MODEL_TEMPLATE, msgs, **kw)
    assert TOKENIZER.decode(ids, skip_special_tokens=False).endswith("The answer is")
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=msgs,
                                       extra_body={"continue_final_message": True, "add_generation_prompt": True})
    assert e.value.body["param"] == "continue_final_message"


def test_priority_needs_the_priority_policy(client, priority_client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=HISTORY, extra_body={"priority": 5})
    assert (e.value.body["param"], e.value.body["code"]) == ("priority", "unsupported_value")
    assert "--scheduling-policy priority" in e.value.body["message"]
    (prio, _), _ = chat_echo(client, HISTORY, extra_body={"priority": 0})
    assert prio == 0
    for p in (-7, 0, 12):
        r = priority_client.completions.create(model=MODEL, prompt="[[echo_request]]", max_tokens=4000,
                                               extra_body={"priority": p})
        assert echoed(r.choices[0].text)[0] == p


def test_truncate_prompt_tokens_keeps_the_last_tokens(client):
    prompt = "one two three four five six seven eight nine ten " * 5 + "[[echo_request]]"
    full = TOKENIZER.encode(prompt, add_special_tokens=False).ids
    for k in (len(full) - 3, 12):
        r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=4000,
                                      extra_body={"truncate_prompt_tokens": k})
        assert echoed(r.choices[0].text)[1] == full[-k:]
        assert r.usage.prompt_tokens == k
    r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=4000, extra_body={"truncate_prompt_tokens": -1})
    assert echoed(r.choices[0].text)[1] == full  # -1: max_model_len, longer than the prompt
    (_, ids), _ = chat_echo(client, HISTORY, extra_body={"truncate_prompt_tokens": 20})
    assert ids == reference_ids(MODEL_TEMPLATE, HISTORY)[-20:]
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt="x", extra_body={"truncate_prompt_tokens": 10 ** 8})
    assert e.value.body["param"] == "truncate_prompt_tokens"


def test_echo_prepends_the_prompt(client):
    prompt = "Say it. [[reply:done]]"
    r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=50, echo=True)
    assert r.choices[0].text == prompt + "done"
    stream = client.completions.create(model=MODEL, prompt=prompt, max_tokens=50, echo=True, n=2, stream=True)
    texts = {}
    for c in stream:
        for ch in c.choices:
            texts[ch.index] = texts.get(ch.index, "") + ch.text
    assert texts == {0: prompt + "done", 1: prompt + "done"}
    ids = TOKENIZER.encode(prompt, add_special_tokens=False).ids
    r = client.completions.create(model=MODEL, prompt=ids, max_tokens=50, echo=True)
    assert r.choices[0].text == TOKENIZER.decode(ids, skip_special_tokens=False) + "done"
    r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=50, echo=False)
    assert r.choices[0].text == "done"
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt=prompt, echo=True, logprobs=1)
    assert (e.value.body["param"], e.value.body["code"]) == ("echo", "unsupported_value")


TWO_CALLS = ("<tool_call>\n<function=f>\n<parameter=x>\n1\n</parameter>\n</function>\n</tool_call>\n"
             "<tool_call>\n<function=f>\n<parameter=x>\n2\n</parameter>\n</function>\n</tool_call>")


@pytest.mark.parametrize("stream", [False, True])
def test_parallel_tool_calls(client, stream):
    msgs = [{"role": "user", "content": f"[[reply:{TWO_CALLS}]]"}]
    for parallel, want in ((True, ['{"x": 1}', '{"x": 2}']), (False, ['{"x": 1}'])):
        kw = dict(model=MODEL, messages=msgs, tools=TOOLS, parallel_tool_calls=parallel, max_tokens=4000,
                  extra_body={"chat_template_kwargs": {"enable_thinking": False}})
        if stream:
            args = {}
            finish = None
            for c in client.chat.completions.create(stream=True, **kw):
                for ch in c.choices:
                    for tc in ch.delta.tool_calls or []:
                        args[tc.index] = args.get(tc.index, "") + (tc.function.arguments or "")
                    finish = ch.finish_reason or finish
            got = [args[i] for i in sorted(args)]
        else:
            r = client.chat.completions.create(**kw)
            got = [tc.function.arguments for tc in r.choices[0].message.tool_calls]
            finish = r.choices[0].finish_reason
        assert [json.loads(a) for a in got] == [json.loads(a) for a in want], parallel
        assert finish == "tool_calls"


def test_continuous_usage_stats(client):
    prompt = "[[reply:abcdef]]"
    n_prompt = len(TOKENIZER.encode(prompt, add_special_tokens=False).ids)
    chunks = list(client.completions.create(model=MODEL, prompt=prompt, max_tokens=50, stream=True,
                                            stream_options={"include_usage": True, "continuous_usage_stats": True}))
    with_choices = [c for c in chunks if c.choices]
    assert with_choices and all(c.usage is not None for c in with_choices)
    completion = [c.usage.completion_tokens for c in with_choices]
    assert completion == sorted(completion) and completion[-1] == chunks[-1].usage.completion_tokens
    assert all(c.usage.prompt_tokens == n_prompt for c in chunks)
    assert all(c.usage.total_tokens == c.usage.prompt_tokens + c.usage.completion_tokens for c in chunks)
    plain = list(client.completions.create(model=MODEL, prompt=prompt, max_tokens=50, stream=True,
                                           stream_options={"include_usage": True}))
    assert all(c.usage is None for c in plain if c.choices)


def test_chat_template_file(tmp_path):
    # A Qwen3 template (JSON tool calls, its own think handling) given with --chat-template:
    # the prompt is jinja2's rendering of that file, not of the model's own template.
    qwen3 = json.load(open(os.path.join(QWEN3_DIR, "tokenizer_config.json")))["chat_template"]
    path = tmp_path / "qwen3.jinja"
    path.write_text(qwen3)
    proc, base = start("--chat-template", str(path))
    try:
        c = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=60)
        msgs = HISTORY[:2] + [{"role": "user", "content": "Tools? [[echo_request]]"}]
        for kwargs in ({}, {"enable_thinking": False}):
            r = c.chat.completions.create(model=MODEL, messages=msgs, tools=TOOLS, max_tokens=4000,
                                          extra_body={"chat_template_kwargs": kwargs})
            m = r.choices[0].message
            _, ids = echoed((m.content or "") + (getattr(m, "reasoning_content", None) or ""))
            assert ids == reference_ids(qwen3, msgs, tools=TOOLS, **kwargs)
            assert ids != reference_ids(MODEL_TEMPLATE, msgs, tools=TOOLS, **kwargs)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    # A template with a construct the Jinja interpreter does not support: the server refuses to
    # start, naming the file, the line and the construct.
    custom = tmp_path / "custom.jinja"
    custom.write_text("{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}\n{% include 'x.jinja' %}")
    out = subprocess.run([BINARY, "serve", "--model", MODEL_DIR, "--fake-engine", "--port", "0",
                          "--chat-template", str(custom)], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert str(custom) in out.stderr + out.stdout
    assert "line 3: unsupported template tag '{% include %}'" in out.stderr + out.stdout


def test_chat_template_file_jinja(tmp_path):
    # A template of another family (Llama 3.1's, tests/data/jinja) is rendered by the Jinja
    # interpreter: the prompt is jinja2's rendering with transformers' variables (tools None
    # without tools, the tokenizer's special tokens, every chat_template_kwargs key); the
    # template's raise_exception is a 400 carrying its message.
    path = os.path.join(REPO, "tests", "data", "jinja", "llama3.1_instruct.jinja")
    llama = open(path, encoding="utf-8").read()
    config = json.load(open(os.path.join(MODEL_DIR, "tokenizer_config.json")))
    specials = {k: config[k] for k in ("bos_token", "eos_token", "pad_token") if isinstance(config.get(k), str)}
    proc, base = start("--chat-template", path)
    try:
        c = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=60)
        msgs = HISTORY[:2] + [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "Go [[echo_request]]"}]
        cases = [({}, None), ({"date_string": "01 Jan 2030", "bos_token": "<|begin_of_text|>"}, None),
                 ({"tools_in_user_message": False}, TOOLS)]
        for kwargs, tools in cases:
            extra = {"chat_template_kwargs": kwargs} if kwargs else {}
            r = c.chat.completions.create(model=MODEL, messages=msgs, max_tokens=4000, extra_body=extra,
                                          **({"tools": tools} if tools else {}))
            m = r.choices[0].message
            _, ids = echoed((m.content or "") + (getattr(m, "reasoning_content", None) or ""))
            assert ids == reference_ids(llama, msgs, tools=tools, documents=None, **{**specials, **kwargs})
        # Two tool calls in one turn: the template raises, the message reaches the client.
        calls = [{"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}}
                 for i in range(2)]
        bad = msgs[:2] + [{"role": "assistant", "content": "", "tool_calls": calls},
                          {"role": "tool", "tool_call_id": "c0", "content": "1"}, {"role": "user", "content": "?"}]
        with pytest.raises(openai.BadRequestError) as e:
            c.chat.completions.create(model=MODEL, messages=bad, tools=TOOLS, max_tokens=5)
        assert e.value.status_code == 400
        assert "This model only supports single tool-calls at once!" in e.value.body["message"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
