# Chat completions through the official openai client: non-streaming and streaming, reasoning
# split, tools, stop, n, logprobs, usage; json_object refused (the fake engine constrains nothing).
import json

import openai
import pytest

MODEL = "tiny"


def ask(text):
    return [{"role": "user", "content": text}]


def test_models_list(client):
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL]


def test_chat_non_streaming_reasoning_split(client):
    r = client.chat.completions.create(model=MODEL, messages=ask("[[reply:I think</think>\n\nHello!]]"))
    m = r.choices[0].message
    assert m.role == "assistant"
    assert m.content == "Hello!"
    assert m.reasoning_content == "I think"
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.completion_tokens == len("I think</think>\n\nHello!") + 1
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")


def test_chat_thinking_disabled(client):
    r = client.chat.completions.create(model=MODEL, messages=ask("[[reply:plain answer]]"),
                                       extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    assert r.choices[0].message.content == "plain answer"
    assert r.choices[0].message.reasoning_content is None


def test_chat_streaming_with_usage(client):
    stream = client.chat.completions.create(model=MODEL, messages=ask("[[reply:why</think>Because.]]"), stream=True,
                                            stream_options={"include_usage": True})
    content, reasoning, finish, usage, roles = "", "", None, None, 0
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
            assert chunk.choices == []
            continue
        d = chunk.choices[0].delta
        roles += d.role == "assistant"
        content += d.content or ""
        reasoning += getattr(d, "reasoning_content", None) or ""
        finish = chunk.choices[0].finish_reason or finish
    assert (content, reasoning, finish, roles) == ("Because.", "why", "stop", 1)
    assert usage.completion_tokens == len("why</think>Because.") + 1


def test_chat_max_tokens_length(client):
    r = client.chat.completions.create(model=MODEL, messages=ask("[[repeat]]"), max_completion_tokens=7,
                                       extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 7
    assert r.choices[0].message.content == "ab ab a"


def test_chat_stop_and_n(client):
    r = client.chat.completions.create(model=MODEL, messages=ask("[[reply:</think>one {i} two]]"), n=3, stop=[" two"],
                                       temperature=0.7, seed=1)
    assert len(r.choices) == 3
    for i, c in enumerate(r.choices):
        assert c.index == i
        assert c.message.content == f"one {i}"
        assert c.finish_reason == "stop"


def test_chat_logprobs(client):
    r = client.chat.completions.create(model=MODEL, messages=ask("[[reply:</think>ab]]"), logprobs=True, top_logprobs=2)
    lp = r.choices[0].logprobs.content
    assert len(lp) == r.usage.completion_tokens
    assert all(len(t.top_logprobs) == 2 and t.logprob <= 0 for t in lp)
    assert lp[-3].token == "a" and lp[-3].bytes == [97]


def test_chat_tool_calls(client):
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}}]
    reply = ('[[reply:need weather</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n'
             '</parameter>\n</function>\n</tool_call>]]')
    r = client.chat.completions.create(model=MODEL, messages=ask(reply), tools=tools)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls"
    assert c.message.content is None
    assert c.message.reasoning_content == "need weather"
    (call,) = c.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    # The same, streamed: one tool-call delta with the whole call.
    stream = client.chat.completions.create(model=MODEL, messages=ask(reply), tools=tools, stream=True)
    calls, finish = [], None
    for chunk in stream:
        ch = chunk.choices[0]
        calls += ch.delta.tool_calls or []
        finish = ch.finish_reason or finish
    assert finish == "tool_calls"
    assert [(t.index, t.function.name) for t in calls] == [(0, "get_weather")]
    # A follow-up turn with the tool result renders and answers.
    msgs = ask("weather?") + [
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "sunny [[reply:</think>It is sunny.]]"}]
    r = client.chat.completions.create(model=MODEL, messages=msgs, tools=tools)
    assert r.choices[0].message.content == "It is sunny."


def test_chat_json_object_is_refused_by_the_fake_engine(client):
    # The scripted engine constrains nothing, so it refuses constraints rather than ignore them;
    # the real engine's structured outputs: test_structured_outputs.py.
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=ask('[[reply:</think>{"a": 1}]]'),
                                       response_format={"type": "json_object"})
    assert e.value.body["param"] == "response_format"
    assert e.value.body["code"] == "unsupported_value"
