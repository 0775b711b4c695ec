# Images through the official openai client against `qwenserve serve` on the real engine (CPU
# backend) with the tiny model that has a vision tower (tests/data/vision_parity; its logits
# equal transformers' in tests/model/vision_parity_test.cpp, and the engine's greedy output equals
# the offline single-sequence run in tests/engine/image_engine_test.cpp): one image, several
# images, streaming equal to non-streaming; the same image from a data: URL, a local file
# (--allowed-local-media-path) and a loopback http:// server (--allow-remote-images) gives the
# same reply; another image a different one; bad images are 400s naming the problem. And the reply
# to a chat with two images equals transformers' own (its jinja template, pad expansion and fp32
# greedy generation, tests/data/vision_parity/chat_reference.json) on a server with an f32 KV cache.
import base64
import json
import http.server
import os
import threading

import openai
import pytest

from conftest import BINARY, free_port, server_output, spawn, wait_healthy

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
MODEL_DIR = os.path.join(REPO, "tests", "data", "vision_parity")
TEXT_MODEL_DIR = os.path.join(REPO, "models", "qwen36-tiny")
IMAGES = os.path.join(REPO, "tests", "data", "image")
MODEL = "vision-tiny"
NO_THINK = {"chat_template_kwargs": {"enable_thinking": False}}


def data_url(name, mime=None):
    with open(os.path.join(IMAGES, name), "rb") as f:
        b = base64.b64encode(f.read()).decode()
    mime = mime or {"png": "image/png", "jpg": "image/jpeg", "webp": "image/webp"}[name.rsplit(".", 1)[1]]
    return f"data:{mime};base64,{b}"


def image_part(url):
    return {"type": "image_url", "image_url": {"url": url}}


def user(*parts):
    return [{"role": "user", "content": [{"type": "text", "text": "Describe "}] + list(parts)}]


@pytest.fixture(scope="module")
def http_images():
    """A loopback HTTP server over tests/data/image."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=IMAGES, **kw)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


@pytest.fixture(scope="module")
def server():
    port = free_port()
    args = [BINARY, "serve", "--model", MODEL_DIR, "--served-model-name", MODEL, "--port", str(port),
            "--allowed-local-media-path", IMAGES, "--allow-remote-images", "--max-image-pixels", "20000",
            "--max-images-per-request", "3", "--remote-image-timeout-s", "2"]
    proc = spawn(args)
    base = f"http://127.0.0.1:{port}"
    wait_healthy(proc, base, 60)
    yield base
    proc.terminate()
    assert proc.wait(timeout=30) == 0, server_output(proc)


@pytest.fixture()
def client(server):
    return openai.OpenAI(base_url=server + "/v1", api_key="unused", max_retries=0, timeout=120)


def chat(client, messages, **kw):
    r = client.chat.completions.create(model=MODEL, messages=messages, temperature=0, max_tokens=8,
                                       extra_body=NO_THINK, **kw)
    return r.choices[0].message.content, r.usage


def chat_streamed(client, messages):
    text = ""
    for chunk in client.chat.completions.create(model=MODEL, messages=messages, temperature=0, max_tokens=8,
                                                extra_body=NO_THINK, stream=True):
        for ch in chunk.choices:
            text += ch.delta.content or ""
    return text


def test_reply_equals_transformers_greedy():
    ref = json.load(open(os.path.join(MODEL_DIR, "chat_reference.json")))
    port = free_port()
    proc = spawn([BINARY, "serve", "--model", MODEL_DIR, "--served-model-name", MODEL, "--port", str(port),
                  "--kv-cache-dtype", "f32"])
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(proc, base, 60)
        c = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=120)
        content = [{"type": "text", "text": ref["text"]}] + [image_part(data_url(n)) for n in ref["images"]]
        for stream in (False, True):
            kw = dict(model=MODEL, messages=[{"role": "user", "content": content}], temperature=0,
                      max_tokens=ref["max_tokens"], extra_body={"chat_template_kwargs": {"enable_thinking": False}})
            if stream:
                text, finish = "", None
                for chunk in c.chat.completions.create(stream=True, **kw):
                    for ch in chunk.choices:
                        text += ch.delta.content or ""
                        finish = ch.finish_reason or finish
            else:
                r = c.chat.completions.create(**kw)
                text, finish = r.choices[0].message.content or "", r.choices[0].finish_reason
                assert r.usage.prompt_tokens == len(ref["prompt_ids"])
                assert r.usage.completion_tokens == len(ref["completion_ids"])
            assert text == ref["completion_text"]
            assert finish == ref["finish_reason"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_one_image_streaming_equals_non_streaming(client):
    msgs = user(image_part(data_url("noise_50x130.png")))
    text, usage = chat(client, msgs)
    assert chat_streamed(client, msgs) == text
    # The template's one <|image_pad|> became the image's 8x4/4 = 8 merged tokens.
    _, usage_text = chat(client, user())
    assert usage.prompt_tokens > usage_text.prompt_tokens + 8


def test_several_images_and_the_image_matters(client):
    three = user(image_part(data_url("rgb_97x61.png")), image_part(data_url("noise_50x130.png")),
                 image_part(data_url("gray_64x64.jpg")))
    text, _ = chat(client, three)
    assert chat_streamed(client, three) == text
    # Same grid (4x6 patches), other pixels: same prompt tokens, another reply.
    a, ua = chat(client, user(image_part(data_url("rgb_97x61.png"))))
    b, ub = chat(client, user(image_part(data_url("exact_64x96.png"))))
    assert ua.prompt_tokens == ub.prompt_tokens
    assert a != b


def test_file_http_and_data_url_give_the_same_reply(client, http_images):
    want, _ = chat(client, user(image_part(data_url("lossy_120x90.webp"))))
    assert chat(client, user(image_part(os.path.join(IMAGES, "lossy_120x90.webp"))))[0] == want
    assert chat(client, user(image_part("file://" + os.path.join(IMAGES, "lossy_120x90.webp"))))[0] == want
    assert chat(client, user(image_part(f"{http_images}/lossy_120x90.webp")))[0] == want


def bad(client, messages, *needles):
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, messages)
    msg = str(e.value)
    for n in needles:
        assert n in msg, msg


def test_bad_images_are_400s(client, http_images):
    png = data_url("rgb_97x61.png")
    bad(client, user(image_part(png[:200] + "!!!" + png[203:])), "base64")
    bad(client, user(image_part("data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"x" * 64).decode())),
        "PNG")
    bad(client, user(image_part("data:image/gif;base64," + base64.b64encode(b"GIF89a" + b"\0" * 32).decode())),
        "unsupported image format")
    bad(client, user(image_part(data_url("photo_300x180.jpg"))), "pixels")  # 54,000 > --max-image-pixels 20000
    bad(client, user(*[image_part(png)] * 4), "at most 3")
    bad(client, user(image_part(f"http://127.0.0.1:{free_port()}/x.png")), "unreachable")
    bad(client, user(image_part(f"{http_images}/missing.png")), "404")
    bad(client, user(image_part(f"https://127.0.0.1:{free_port()}/x.png")), "https://", "unreachable")
    bad(client, user(image_part("/etc/passwd")), "outside --allowed-local-media-path")
    # An image sent as a video_url (tests/e2e/test_videos.py has the videos).
    bad(client, [{"role": "user", "content": [{"type": "video_url", "video_url": {"url": png}}]}], "video 1",
        "not a video type")


def test_text_only_model_refuses_images():
    port = free_port()
    proc = spawn([BINARY, "serve", "--model", TEXT_MODEL_DIR, "--served-model-name", MODEL, "--port", str(port)])
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(proc, base, 60)
        c = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=60)
        bad(c, user(image_part(data_url("gray_64x64.jpg"))), "no images")
        # Local files and remote URLs are refused without the options.
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_max_images_zero_turns_image_input_off():
    port = free_port()
    proc = spawn([BINARY, "serve", "--model", MODEL_DIR, "--served-model-name", MODEL, "--port", str(port),
                  "--max-images-per-request", "0"])
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(proc, base, 60)
        c = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=60)
        bad(c, user(image_part(data_url("gray_64x64.jpg"))), "--max-images-per-request is 0")
        assert chat(c, [{"role": "user", "content": "Describe nothing"}])[0] is not None
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert "image and video input off (--max-images-per-request 0)" in server_output(proc)


def test_dummy_vision_tower_turns_image_input_on(client):
    """--load-format dummy makes no tower (images are a 400); --dummy-vision adds one of the
    config's shapes, so an image request is served and its prompt expands to the same number of
    tokens as on the real weights (the tower's merged-token count comes from its shapes)."""
    msgs = user(image_part(data_url("rgb_97x61.png")), {"type": "text", "text": "What is this?"})
    _, real_usage = chat(client, msgs)
    for extra, expect_images in (([], False), (["--dummy-vision"], True)):
        port = free_port()
        proc = spawn([BINARY, "serve", "--model", MODEL_DIR, "--served-model-name", MODEL, "--port", str(port),
                      "--load-format", "dummy"] + extra)
        base = f"http://127.0.0.1:{port}"
        try:
            wait_healthy(proc, base, 60)
            c = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=60)
            if expect_images:
                _, usage = chat(c, msgs)
                assert usage.prompt_tokens == real_usage.prompt_tokens
            else:
                bad(c, msgs, "no images")
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def test_local_and_remote_need_their_options(http_images):
    port = free_port()
    proc = spawn([BINARY, "serve", "--model", MODEL_DIR, "--served-model-name", MODEL, "--port", str(port)])
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(proc, base, 60)
        c = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=60)
        bad(c, user(image_part(os.path.join(IMAGES, "gray_64x64.jpg"))), "--allowed-local-media-path")
        bad(c, user(image_part(f"{http_images}/gray_64x64.jpg")), "--allow-remote-images")
        assert chat(c, user(image_part(data_url("gray_64x64.jpg"))))[0] is not None
    finally:
        proc.terminate()
        proc.wait(timeout=30)
