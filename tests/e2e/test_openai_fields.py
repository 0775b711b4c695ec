# Request fields through the official openai client: logit_bias and min_tokens reach the engine
# (the fake engine's "[[echo_params]]" script replies with what it received, and it keeps
# min_tokens as the real engine does), and every known field the server does not implement is
# a 400 naming it (docs/API.md lists them all). Structured outputs are refused by the fake engine
# (it constrains nothing); the real engine's: test_structured_outputs.py.
import openai
import pytest

MODEL = "tiny"
NO_THINK = {"chat_template_kwargs": {"enable_thinking": False}}
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]


def ask(text):
    return [{"role": "user", "content": text}]


def check_400(err, param, code="unsupported_value"):
    assert err.status_code == 400
    assert err.body["param"] == param, err.body
    assert err.body["code"] == code, err.body
    assert err.body["type"] == "invalid_request_error"


def test_logit_bias_and_min_tokens_reach_the_engine_completions(client):
    r = client.completions.create(model=MODEL, prompt="[[echo_params]]", max_tokens=100,
                                  logit_bias={"65": 100, "7": -5.5, "258": -100}, extra_body={"min_tokens": 3})
    assert r.choices[0].text == "logit_bias=65:100,7:-5.5,258:-100 min_tokens=3"


def test_logit_bias_and_min_tokens_reach_the_engine_chat_streaming(client):
    stream = client.chat.completions.create(model=MODEL, messages=ask("[[echo_params]]"), logit_bias={"10": 1},
                                            stream=True, extra_body={"min_tokens": 0, **NO_THINK})
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == "logit_bias=10:1 min_tokens=0"


def test_no_logit_bias_reaches_the_engine_as_empty(client):
    r = client.completions.create(model=MODEL, prompt="[[echo_params]]", max_tokens=100)
    assert r.choices[0].text == "logit_bias= min_tokens=0"


def test_min_tokens_holds_back_eos(client):
    # The script ends after "hi"; EOS is banned until 6 tokens, so 4 fillers, then EOS.
    r = client.completions.create(model=MODEL, prompt="[[reply:hi]]", max_tokens=20, extra_body={"min_tokens": 6})
    assert (r.choices[0].text, r.choices[0].finish_reason, r.usage.completion_tokens) == ("hi....", "stop", 7)
    r = client.completions.create(model=MODEL, prompt="[[reply:hi]]", max_tokens=20)
    assert (r.choices[0].text, r.usage.completion_tokens) == ("hi", 3)
    c = client.chat.completions.create(model=MODEL, messages=ask("[[reply:hi]]"), max_completion_tokens=20,
                                       extra_body={"min_tokens": 4, **NO_THINK})
    assert (c.choices[0].message.content, c.usage.completion_tokens) == ("hi..", 5)


def test_min_tokens_holds_back_stop_token_ids(client):
    r = client.completions.create(model=MODEL, prompt="[[reply:a;b]]", max_tokens=20,
                                  extra_body={"min_tokens": 3, "stop_token_ids": [ord(";")]})
    assert (r.choices[0].text, r.choices[0].finish_reason, r.usage.completion_tokens) == ("a..", "stop", 4)


@pytest.mark.parametrize("kwargs", [
    {"logit_bias": {"x": 1}},
    {"logit_bias": {"-1": 1}},
    {"logit_bias": {"1": 101}},
    {"logit_bias": {"1": -100.5}},
    {"logit_bias": {"1": "a"}},
    {"logit_bias": {"7": 1, "07": 2}},
    {"logit_bias": {"300": 1}},  # outside the vocabulary (259 tokens): the engine's check
    {"extra_body": {"logit_bias": [1, 2]}},
])
def test_bad_logit_bias(client, kwargs):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=ask("hi"), **kwargs)
    check_400(e.value, "logit_bias", code=None)
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt="hi", **kwargs)
    check_400(e.value, "logit_bias", code=None)


@pytest.mark.parametrize("kwargs", [
    {"extra_body": {"min_tokens": -1}},
    {"extra_body": {"min_tokens": "3"}},
    {"max_tokens": 5, "extra_body": {"min_tokens": 6}},
    {"extra_body": {"min_tokens": 3000}},  # more than the context left (max_model_len 2048)
])
def test_bad_min_tokens(client, kwargs):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt="hi", **kwargs)
    check_400(e.value, "min_tokens", code=None)


@pytest.mark.parametrize("kwargs,param", [
    ({"store": True}, "store"),
    ({"service_tier": "flex"}, "service_tier"),
    ({"modalities": ["text", "audio"]}, "modalities"),
    ({"audio": {"voice": "alloy", "format": "wav"}}, "audio"),
    ({"prediction": {"type": "content", "content": "x"}}, "prediction"),
    ({"web_search_options": {}}, "web_search_options"),
    ({"reasoning_effort": "low"}, "reasoning_effort"),
    ({"verbosity": "high"}, "verbosity"),
    ({"functions": [{"name": "f", "parameters": {}}]}, "functions"),
    ({"function_call": "auto"}, "function_call"),
    ({"moderation": {"model": "omni-moderation-latest"}}, "moderation"),
    ({"prompt_cache_retention": "24h"}, "prompt_cache_retention"),
    ({"stream": True, "stream_options": {"include_obfuscation": True}}, "stream_options.include_obfuscation"),
    ({"tools": [{"type": "function", "function": {"name": "f", "strict": True}}]}, "tools[0].function.strict"),
    ({"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "AA", "format": "wav"}}]}]},
     "messages[0].content[0].type"),
    ({"extra_body": {"guided_json": {"type": "object"}}}, "guided_json"),
    ({"extra_body": {"guided_regex": "a+"}}, "guided_regex"),
    ({"extra_body": {"guided_choice": ["yes", "no"]}}, "guided_choice"),
    ({"extra_body": {"guided_grammar": "root ::= \"a\""}}, "guided_grammar"),
    ({"extra_body": {"structured_outputs": {"choice": ["yes", "no"]}}}, "structured_outputs"),
    ({"extra_body": {"structural_tag": "{}"}}, "structural_tag"),
    ({"extra_body": {"prompt_logprobs": 1}}, "prompt_logprobs"),
    ({"extra_body": {"allowed_token_ids": [1, 2]}}, "allowed_token_ids"),
    ({"extra_body": {"bad_words": ["no"]}}, "bad_words"),
    ({"extra_body": {"logits_processors": ["my.Processor"]}}, "logits_processors"),
    ({"extra_body": {"use_beam_search": True}}, "use_beam_search"),
    ({"extra_body": {"length_penalty": 0.5}}, "length_penalty"),
    ({"extra_body": {"echo": True}}, "echo"),
    ({"extra_body": {"include_reasoning": False}}, "include_reasoning"),
    ({"extra_body": {"documents": [{"title": "t", "text": "x"}]}}, "documents"),
    ({"extra_body": {"chat_template": "{{ messages }}"}}, "chat_template"),
    ({"extra_body": {"cache_salt": "s3cret"}}, "cache_salt"),
    ({"extra_body": {"priority": 1}}, "priority"),
    ({"extra_body": {"request_id": "mine"}}, "request_id"),
    ({"extra_body": {"return_token_ids": True}}, "return_token_ids"),
    ({"extra_body": {"return_tokens_as_token_ids": True}}, "return_tokens_as_token_ids"),
    ({"extra_body": {"kv_transfer_params": {"do_remote_decode": True}}}, "kv_transfer_params"),
    ({"extra_body": {"vllm_xargs": {"k": 1}}}, "vllm_xargs"),
    ({"extra_body": {"mm_processor_kwargs": {"k": 1}}}, "mm_processor_kwargs"),
    ({"extra_body": {"chat_template_kwargs": {"thinking_budget": 5}}}, "chat_template_kwargs.thinking_budget"),
    ({"extra_body": {"prompt": "hi"}}, "prompt"),
])
def test_unimplemented_chat_fields_are_400(client, kwargs, param):
    kwargs = dict(kwargs)
    messages = kwargs.pop("messages", ask("[[reply:ok]]"))
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=messages, **kwargs)
    check_400(e.value, param)


@pytest.mark.parametrize("kwargs,param", [
    ({"echo": True, "logprobs": 1}, "echo"),
    ({"suffix": "end"}, "suffix"),
    ({"best_of": 2, "stream": True}, "best_of"),
    ({"extra_body": {"priority": 3}}, "priority"),
    ({"extra_body": {"add_generation_prompt": False}}, "add_generation_prompt"),
    ({"extra_body": {"parallel_tool_calls": False}}, "parallel_tool_calls"),
    ({"extra_body": {"prompt_logprobs": 0}}, "prompt_logprobs"),
    ({"extra_body": {"prompt_embeds": "AAAA"}}, "prompt_embeds"),
    ({"extra_body": {"guided_choice": ["a"]}}, "guided_choice"),
    ({"extra_body": {"max_completion_tokens": 5}}, "max_completion_tokens"),
    ({"extra_body": {"messages": ask("hi")}}, "messages"),
    ({"extra_body": {"tools": TOOLS}}, "tools"),
])
def test_unimplemented_completion_fields_are_400(client, kwargs, param):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt="[[reply:ok]]", **kwargs)
    check_400(e.value, param)


def test_harmless_and_unknown_fields_are_accepted(client):
    r = client.chat.completions.create(
        model=MODEL, messages=ask("[[reply:fine]]"), user="u-1", metadata={"k": "v"}, store=False, service_tier="auto",
        parallel_tool_calls=True, modalities=["text"], verbosity="medium", safety_identifier="h", prompt_cache_key="k",
        prompt_cache_retention="in_memory",
        extra_body={"skip_special_tokens": True, "spaces_between_special_tokens": False, "add_special_tokens": False,
                    "use_beam_search": False, "priority": 0, "bad_words": [], "frobnicate": {"x": 1}, **NO_THINK})
    assert r.choices[0].message.content == "fine"
    r = client.completions.create(model=MODEL, prompt="[[reply:fine]]", user="u-1", echo=False, best_of=1,
                                  extra_body={"add_special_tokens": True, "frobnicate": 1})
    assert r.choices[0].text == "fine"
