# Videos through the official openai client against `qwenserve serve` on the real engine (CPU
# backend) with the tiny model that has a vision tower (tests/data/vision_parity, whose
# video_preprocessor_config.json is tests/data/video's): video_url parts as vLLM's frame lists
# (data:video/jpeg;base64,<frame>,<frame>,...). The reply to a chat with one video equals
# transformers' own (Qwen3VLProcessor's prompt with timestamps, fp32 greedy generation,
# tests/data/video/one_video/case.json) on a server with an f32 KV cache, streaming equal to
# non-streaming; a video next to an image; two videos with the same tokens but other frames get
# other replies (the prefix cache keys pads by pixels) while a repeated video is served from the
# cache; bad videos are 400s naming the problem.
import base64
import json
import os

import openai
import pytest

from conftest import BINARY, free_port, server_output, spawn, wait_healthy

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
MODEL_DIR = os.path.join(REPO, "tests", "data", "vision_parity")
VIDEO = os.path.join(REPO, "tests", "data", "video")
IMAGES = os.path.join(REPO, "tests", "data", "image")
MODEL = "vision-tiny"
NO_THINK = {"chat_template_kwargs": {"enable_thinking": False}}


def b64(path):
    with open(path, "rb") as f:
        return base64.b64encode(f.read()).decode()


def frames(clip):
    m = json.load(open(os.path.join(VIDEO, "manifest.json")))[clip]
    return [b64(os.path.join(VIDEO, clip, f)) for f in m["frames"]]


def video_part(frame_list, mime="video/jpeg"):
    return {"type": "video_url", "video_url": {"url": f"data:{mime};base64," + ",".join(frame_list)}}


def image_part(name):
    mime = {"png": "image/png", "jpg": "image/jpeg"}[name.rsplit(".", 1)[1]]
    return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{b64(os.path.join(IMAGES, name))}"}}


def user(*parts):
    return [{"role": "user", "content": list(parts)}]


def text(t):
    return {"type": "text", "text": t}


def chat(client, messages, max_tokens=8):
    r = client.chat.completions.create(model=MODEL, messages=messages, temperature=0, max_tokens=max_tokens,
                                       extra_body=NO_THINK)
    return r.choices[0].message.content or "", r.usage, r.choices[0].finish_reason


def chat_streamed(client, messages, max_tokens=8):
    out, finish = "", None
    for chunk in client.chat.completions.create(model=MODEL, messages=messages, temperature=0, max_tokens=max_tokens,
                                                extra_body=NO_THINK, stream=True):
        for ch in chunk.choices:
            out += ch.delta.content or ""
            finish = ch.finish_reason or finish
    return out, finish


@pytest.fixture(scope="module")
def server():
    port = free_port()
    args = [BINARY, "serve", "--model", MODEL_DIR, "--served-model-name", MODEL, "--port", str(port),
            "--kv-cache-dtype", "f32", "--max-image-pixels", "20000", "--max-video-frames", "6",
            "--max-images-per-request", "3"]
    proc = spawn(args)
    base = f"http://127.0.0.1:{port}"
    wait_healthy(proc, base, 60)
    yield base
    proc.terminate()
    assert proc.wait(timeout=30) == 0, server_output(proc)


@pytest.fixture()
def client(server):
    return openai.OpenAI(base_url=server + "/v1", api_key="unused", max_retries=0, timeout=120)


def test_reply_equals_transformers_greedy(client):
    ref = json.load(open(os.path.join(VIDEO, "one_video", "case.json")))
    parts = [text(v) if k == "text" else video_part(frames(v)) for k, v in ref["parts"]]
    got, usage, finish = chat(client, user(*parts), ref["max_tokens"])
    # The prompt is Qwen3VLProcessor's: timestamps, one <|video_pad|> run per temporal patch.
    assert usage.prompt_tokens == ref["num_tokens"]
    assert usage.completion_tokens == len(ref["completion_ids"])
    assert got == ref["completion_text"]
    assert finish == ref["finish_reason"]
    assert chat_streamed(client, user(*parts), ref["max_tokens"]) == (got, finish)


def test_video_and_image_streaming_equals_non_streaming(client):
    ref = json.load(open(os.path.join(VIDEO, "video_and_image", "case.json")))
    parts = [text(v) if k == "text" else video_part(frames(v)) if k == "video" else image_part(v)
             for k, v in ref["parts"]]
    got, usage, _ = chat(client, user(*parts), ref["max_tokens"])
    assert usage.prompt_tokens == ref["num_tokens"]
    assert got == ref["completion_text"]
    assert chat_streamed(client, user(*parts), ref["max_tokens"])[0] == got


def test_other_frames_other_reply_and_the_cache_tells_them_apart(client):
    a = frames("clip_a")
    ra, ua, _ = chat(client, user(text("Look: "), video_part(a)))
    # The same frames reversed: the same tokens, other pixels.
    rb, ub, _ = chat(client, user(text("Look: "), video_part(a[::-1])))
    assert ua.prompt_tokens == ub.prompt_tokens
    assert ra != rb
    # Again the first: the same reply, its video pages served from the prefix cache.
    rc, uc, _ = chat(client, user(text("Look: "), video_part(a)))
    assert rc == ra
    details = uc.prompt_tokens_details
    assert details is not None and details.cached_tokens >= 16, uc


def bad(client, messages, *needles):
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, messages)
    msg = str(e.value)
    for n in needles:
        assert n in msg, msg


def test_bad_videos_are_400s(client):
    a = frames("clip_a")
    bad(client, user(video_part([a[0], a[1][:40] + "!!" + a[1][42:]])), "video 1", "frame 2", "base64")
    bad(client, user(video_part([a[0], base64.b64encode(b"GIF89a" + b"\0" * 32).decode()])), "frame 2",
        "unsupported image format")
    bad(client, user(video_part(a + a)), "8 frames", "--max-video-frames")
    bad(client, user(video_part([a[0], b64(os.path.join(IMAGES, "photo_300x180.jpg"))])), "frame 2", "pixels")
    bad(client, user(video_part([a[0], frames("clip_b")[0]])), "one size")
    bad(client, user(video_part([a[0]])), "at least 2 frames")
    # Other video/* types are video files (tests/e2e/test_video_files.py): a JPEG is not one.
    bad(client, user(video_part([a[0]], "video/mp4")), "video 1")
    bad(client, user({"type": "video_url", "video_url": {"url": "/tmp/x.mp4"}}), "local video files are not allowed")
    bad(client, user(video_part(a), video_part(a), image_part("gray_64x64.jpg"), image_part("gray_64x64.jpg")),
        "at most 3")
