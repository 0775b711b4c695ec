# Legacy completions through the official openai client.
MODEL = "tiny"


def test_completion_non_streaming(client):
    r = client.completions.create(model=MODEL, prompt="[[reply:hello world]]", max_tokens=50)
    assert r.object == "text_completion"
    assert r.choices[0].text == "hello world"
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.prompt_tokens == len("[[reply:hello world]]")


def test_completion_streaming_usage_and_logprobs(client):
    stream = client.completions.create(model=MODEL, prompt="[[repeat]]", max_tokens=6, stream=True, logprobs=1,
                                       stream_options={"include_usage": True})
    text, finish, usage, ntok = "", None, None, 0
    for chunk in stream:
        if chunk.usage is not None and not chunk.choices:
            usage = chunk.usage
            continue
        c = chunk.choices[0]
        text += c.text
        ntok += len(c.logprobs.tokens) if c.logprobs else 0
        finish = c.finish_reason or finish
    assert (text, finish, ntok) == ("ab ab ", "length", 6)
    assert usage.completion_tokens == 6


def test_completion_token_prompt_and_stop(client):
    ids = list(b"[[reply:x;y]]")
    r = client.completions.create(model=MODEL, prompt=ids, stop=";", max_tokens=20)
    assert r.choices[0].text == "x"
    assert r.choices[0].finish_reason == "stop"
