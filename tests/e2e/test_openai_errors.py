# Every error shape through the official client (typed exceptions, status codes, error bodies),
# plus raw HTTP for what the client cannot send (bad JSON, oversized bodies).
import httpx
import openai
import pytest

from conftest import API_KEY, start_server

MODEL = "tiny"
MSG = [{"role": "user", "content": "hi"}]


def check_body(err, param=None, code=None):
    body = err.body
    assert set(body) >= {"message", "type", "param", "code"}, body
    if param is not None:
        assert body["param"] == param, body
    if code is not None:
        assert body["code"] == code, body


@pytest.mark.parametrize("kwargs,param", [
    ({"temperature": -1}, "temperature"),
    ({"temperature": 5}, "temperature"),
    ({"top_p": 0}, "top_p"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": 5000}, "max_tokens"),
    ({"n": 0}, "n"),
    ({"presence_penalty": 9}, "presence_penalty"),
    ({"top_logprobs": 3}, "top_logprobs"),
    ({"stop": [""]}, "stop"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "response_format.json_schema.schema"),
    ({"extra_body": {"top_k": "many"}}, "top_k"),
])
def test_bad_values_are_400_with_param(client, kwargs, param):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=MSG, **kwargs)
    assert e.value.status_code == 400
    check_body(e.value, param=param)


def test_empty_and_malformed_messages(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=[])
    check_body(e.value, param="messages")
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=[{"role": "wizard", "content": "x"}])
    check_body(e.value, param="messages[0].role")


def test_prompt_too_long(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt="x" * 3000)
    check_body(e.value, param="prompt", code="context_length_exceeded")


def test_unknown_model_is_404(client):
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="gpt-nope", messages=MSG)
    check_body(e.value, param="model", code="model_not_found")


def test_api_key(server):
    bad = openai.OpenAI(base_url=server + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as e:
        bad.models.list()
    assert e.value.status_code == 401
    check_body(e.value, code="invalid_api_key")
    assert httpx.post(server + "/v1/chat/completions", json={"model": MODEL, "messages": MSG}).status_code == 401


def test_raw_http_errors(server):
    h = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"}
    r = httpx.post(server + "/v1/chat/completions", content=b"{not json", headers=h)
    assert r.status_code == 400 and set(r.json()["error"]) == {"message", "type", "param", "code"}
    r = httpx.post(server + "/v1/chat/completions", content=b"[1]", headers=h)
    assert r.status_code == 400
    r = httpx.post(server + "/v1/chat/completions", json={"model": MODEL, "messages": "hi"}, headers=h)
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages"
    r = httpx.post(server + "/v1/chat/completions", content=b"x" * 70000, headers=h)
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
    r = httpx.get(server + "/v1/nope", headers=h)
    assert r.status_code == 404
    assert httpx.get(server + "/metrics").status_code == 401  # every route needs the key
    m = httpx.get(server + "/metrics", headers=h)
    assert m.status_code == 200 and "qwenserve_time_to_first_token_seconds_bucket" in m.text
    t = httpx.post(server + "/tokenize", json={"prompt": "hi"}, headers=h).json()
    assert t["tokens"] == [104, 105] and t["count"] == 2
    assert httpx.post(server + "/detokenize", json={"tokens": [104, 105]}, headers=h).json()["prompt"] == "hi"


def test_overload_is_429_with_retry_after():
    proc, base = start_server("--max-num-seqs", "1", "--max-waiting", "1", "--fake-step-ms", "5", api_key=None)
    try:
        c = openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0)
        streams = [c.completions.create(model=MODEL, prompt="[[repeat]]", max_tokens=1000, stream=True) for _ in range(2)]
        next(iter(streams[0]))
        with pytest.raises(openai.RateLimitError) as e:
            c.completions.create(model=MODEL, prompt="x", max_tokens=1)
        assert e.value.status_code == 429
        assert e.value.response.headers["retry-after"] == "1"
        for s in streams:
            s.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
