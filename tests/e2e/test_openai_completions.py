# Legacy completions through the official openai client.
import openai
import pytest

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


# Batched prompts (vLLM: a list of strings or of token-id lists): prompt i's completions are
# choices i·n .. i·n + n − 1, usage sums the prompts.
def test_completion_batched_prompts(client):
    prompts = ["[[reply:one {i}]]", "[[reply:two {i}]]", "[[reply:three]]"]
    r = client.completions.create(model=MODEL, prompt=prompts, n=2, max_tokens=50)
    assert [c.index for c in r.choices] == [0, 1, 2, 3, 4, 5]
    assert [c.text for c in r.choices] == ["one 0", "one 1", "two 0", "two 1", "three", "three"]
    assert all(c.finish_reason == "stop" for c in r.choices)
    assert r.usage.prompt_tokens == sum(len(p) for p in prompts)
    assert r.usage.completion_tokens == 2 * (6 + 6 + 6)  # each reply's bytes + EOS, twice


def test_completion_batched_token_prompts_and_echo(client):
    a, b = list(b"[[reply:x]]"), list(b"[[reply:yy]]")
    r = client.completions.create(model=MODEL, prompt=[a, b], max_tokens=20, echo=True)
    assert [c.text for c in r.choices] == ["[[reply:x]]x", "[[reply:yy]]yy"]
    assert r.usage.prompt_tokens == len(a) + len(b)


def test_completion_batched_streaming(client):
    stream = client.completions.create(model=MODEL, prompt=["[[reply:ab]]", "[[reply:cde]]"], n=2, max_tokens=20,
                                       stream=True, stream_options={"include_usage": True})
    texts, finish, usage = {}, {}, None
    for chunk in stream:
        if chunk.usage is not None and not chunk.choices:
            usage = chunk.usage
            continue
        for c in chunk.choices:
            texts[c.index] = texts.get(c.index, "") + c.text
            finish[c.index] = c.finish_reason or finish.get(c.index)
    assert texts == {0: "ab", 1: "ab", 2: "cde", 3: "cde"}
    assert finish == {i: "stop" for i in range(4)}
    assert usage.prompt_tokens == len("[[reply:ab]]") + len("[[reply:cde]]")
    assert usage.completion_tokens == 2 * 3 + 2 * 4


def test_completion_batched_best_of(client):
    # best_of per prompt: one choice a prompt, numbered prompt by prompt.
    r = client.completions.create(model=MODEL, prompt=["[[reply:p]]", "[[reply:q]]"], n=1, best_of=3, max_tokens=5)
    assert [(c.index, c.text) for c in r.choices] == [(0, "p"), (1, "q")]


def test_completion_batched_prompt_errors_name_the_prompt(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt=["a", ""], max_tokens=5)
    assert "prompt[1]" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt=["a", "b" * 5000], max_tokens=5)
    assert "prompt[1]" in str(e.value) and "maximum context length" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt=["x"] * 257, max_tokens=5)
    assert "at most 256" in str(e.value)
