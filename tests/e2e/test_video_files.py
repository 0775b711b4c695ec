# Video files (mp4/h264, webm/vp9, mkv/ffv1: tests/data/video_file, made by
# tools/make_video_file_fixture.py with PyAV) through the official openai client against
# `qwenserve serve` on the tiny model with a vision tower (tests/data/vision_parity). A video file
# as a data: URL, a local file (--allowed-local-media-path) and an https:// URL from a loopback
# TLS server whose self-signed certificate is made here (--remote-ca-file) gives one reply; the
# prompt holds transformers' sampled frames' grid (3x4x4: the token count of a frame list of as
# many frames, the timestamps' token counts from the tokenizers library; their values, which
# tokenize to as many tokens, are checked in tests/server/video_file_input_test.cpp);
# mm_processor_kwargs resample; corrupt and truncated files, limits and a certificate the server
# does not trust are 400s naming the problem.
import base64
import http.server
import io
import json
import os
import ssl
import subprocess
import threading

import openai
import pytest
from PIL import Image
from tokenizers import Tokenizer

from conftest import BINARY, free_port, server_output, spawn, wait_healthy

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
MODEL_DIR = os.path.join(REPO, "tests", "data", "vision_parity")
FILES = os.path.join(REPO, "tests", "data", "video_file")
MODEL = "vision-tiny"
NO_THINK = {"chat_template_kwargs": {"enable_thinking": False}}
MANIFEST = json.load(open(os.path.join(FILES, "manifest.json")))["clips"]
MIME = {"mp4": "video/mp4", "webm": "video/webm", "mkv": "video/x-matroska"}


def data_url(clip):
    name = MANIFEST[clip]["file"]
    with open(os.path.join(FILES, name), "rb") as f:
        return f"data:{MIME[name.rsplit('.', 1)[1]]};base64," + base64.b64encode(f.read()).decode()


def video(url):
    return {"type": "video_url", "video_url": {"url": url}}


def user(*parts):
    return [{"role": "user", "content": [{"type": "text", "text": "Look: "}] + list(parts)}]


def chat(client, messages, max_tokens=6):
    r = client.chat.completions.create(model=MODEL, messages=messages, temperature=0, max_tokens=max_tokens,
                                       extra_body=NO_THINK)
    return r.choices[0].message.content or "", r.usage.prompt_tokens


def bad(client, messages, *needles):
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, messages)
    msg = str(e.value)
    for n in needles:
        assert n in msg, msg


def make_cert(tmp, name, cn):
    key, crt = os.path.join(tmp, name + ".key"), os.path.join(tmp, name + ".crt")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", crt,
                    "-days", "2", "-subj", f"/CN={cn}", "-addext", f"subjectAltName=IP:127.0.0.1,DNS:{cn}"],
                   check=True, capture_output=True)
    return key, crt


def serve_tls(key, crt):
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=FILES, **kw)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(crt, key)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    """Two loopback https servers over tests/data/video_file: one whose self-signed certificate the
    qwenserve server trusts (--remote-ca-file), one with another self-signed certificate."""
    tmp = str(tmp_path_factory.mktemp("tls"))
    trusted = make_cert(tmp, "trusted", "localhost")
    other = make_cert(tmp, "other", "localhost")
    a, b = serve_tls(*trusted), serve_tls(*other)
    yield {"ca": trusted[1], "good": f"https://127.0.0.1:{a.server_address[1]}",
           "bad": f"https://127.0.0.1:{b.server_address[1]}"}
    a.shutdown()
    b.shutdown()


@pytest.fixture(scope="module")
def client(tls):
    port = free_port()
    args = [BINARY, "serve", "--model", MODEL_DIR, "--served-model-name", MODEL, "--port", str(port),
            "--kv-cache-dtype", "f32", "--max-image-pixels", "20000", "--max-video-frames", "6",
            "--allowed-local-media-path", FILES, "--allow-remote-images", "--remote-ca-file", tls["ca"],
            "--remote-image-timeout-s", "5", "--max-video-bytes", "30000"]
    proc = spawn(args)
    base = f"http://127.0.0.1:{port}"
    wait_healthy(proc, base, 60)
    yield openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=120)
    proc.terminate()
    assert proc.wait(timeout=30) == 0, server_output(proc)


def test_data_url_file_and_https_give_one_reply(client, tls):
    got = chat(client, user(video(data_url("h264"))))
    assert chat(client, user(video(os.path.join(FILES, "h264.mp4")))) == got
    assert chat(client, user(video("file://" + os.path.join(FILES, "h264.mp4")))) == got
    assert chat(client, user(video(f"{tls['good']}/h264.mp4"))) == got
    # Another video (other frames, the same grid): another reply.
    assert chat(client, user(video(data_url("vp9"))))[0] != got[0]


def png_b64(rgb_bytes):
    img = Image.frombytes("RGB", (64, 64), rgb_bytes)
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


@pytest.mark.parametrize("clip", ["h264", "vp9", "ffv1"])
def test_prompt_has_transformers_frames_and_timestamps(client, clip):
    m = MANIFEST[clip]
    assert m["grid_thw"] == [3, 4, 4]
    _, file_tokens = chat(client, user(video(data_url(clip))))
    # The same number of frames as a frame list (PyAV's frames, 64x64): the same grid, so the
    # prompts differ only in the timestamps' tokens (the file's from the sampled indices and the
    # container's fps, the list's 1 s apart, --video-frame-list-fps).
    with open(os.path.join(FILES, clip, "frames.rgb"), "rb") as f:
        raw = f.read()
    frames = [png_b64(raw[i:i + 64 * 64 * 3]) for i in range(0, len(raw), 64 * 64 * 3)]
    while len(frames) < 6:
        frames.append(frames[-1])
    _, list_tokens = chat(client, user(video("data:video/jpeg;base64," + ",".join(frames))))
    tok = Tokenizer.from_file(os.path.join(MODEL_DIR, "tokenizer.json"))
    count = lambda ts: sum(len(tok.encode(f"<{t:.1f} seconds>", add_special_tokens=False).ids) for t in ts)
    assert file_tokens - list_tokens == count(m["timestamps"]) - count([0.5, 2.5, 4.5])


def test_bad_video_files_are_400s(client, tls):
    mp4 = open(os.path.join(FILES, "h264.mp4"), "rb").read()
    as_url = lambda b: "data:video/mp4;base64," + base64.b64encode(b).decode()
    bad(client, user(video(as_url(b"\x00\x00\x00\x18ftypmp42" + b"\x07" * 300))), "video 1")
    bad(client, user(video(as_url(mp4[: len(mp4) // 2]))), "video 1")
    bad(client, user(video(as_url(b"just some text, not a video"))), "not a video file")
    bad(client, user(video(as_url(mp4 * 4))), "--max-video-bytes")
    bad(client, user(video("/etc/hostname")), "outside --allowed-local-media-path")
    bad(client, user(video(f"{tls['bad']}/h264.mp4")), "video 1", "certificate")
    bad(client, user(video(f"{tls['good']}/missing.mp4")), "HTTP 404")


def test_frames_over_the_limit_are_a_400(client):
    # 13 frames at 5 fps sampled at 2 fps: 5 frames, within 6; --max-video-frames 6 is checked on
    # the sampled frames, so a longer clip sampled to more frames is refused (checked in C++,
    # tests/unit/video_decode_test.cpp); here the frame-list limit names the option.
    frames = ["AAAA"] * 7
    bad(client, user(video("data:video/jpeg;base64," + ",".join(frames))), "--max-video-frames")


def chat_kw(client, messages, kwargs, max_tokens=6):
    r = client.chat.completions.create(model=MODEL, messages=messages, temperature=0, max_tokens=max_tokens,
                                       extra_body={**NO_THINK, "mm_processor_kwargs": kwargs})
    return r.choices[0].message.content or "", r.usage.prompt_tokens


def test_mm_processor_kwargs_sample_the_file(client):
    import numpy as np
    m = MANIFEST["h264"]
    tok = Tokenizer.from_file(os.path.join(MODEL_DIR, "tokenizer.json"))
    count = lambda ts: sum(len(tok.encode(f"<{t:.1f} seconds>", add_special_tokens=False).ids) for t in ts)
    _, base = chat(client, user(video(data_url("h264"))))
    # num_frames 4: np.linspace(0, 19, 4).round() = 0, 6, 13, 19 (Qwen3VLVideoProcessor.sample_frames),
    # two temporal patches of 4 merged tokens instead of three.
    idx = np.linspace(0, m["total_frames"] - 1, 4).round().astype(int).tolist()
    ts = [(idx[i] + idx[i + 1]) / 2 / m["fps"] for i in (0, 2)]
    got, n = chat_kw(client, user(video(data_url("h264"))), {"num_frames": 4})
    assert base - n == 4 + 2 + count(m["timestamps"]) - count(ts)
    # fps 1: int(20 / 8 * 1) = 2 frames, raised to min_frames 4: the same frames as num_frames 4.
    assert chat_kw(client, user(video(data_url("h264"))), {"fps": 1}) == (got, n)
    # Every frame (20) is over --max-video-frames 6.
    with pytest.raises(openai.BadRequestError) as e:
        chat_kw(client, user(video(data_url("h264"))), {"do_sample_frames": False})
    assert "--max-video-frames" in str(e.value)


@pytest.mark.parametrize("kwargs,needle", [
    ({"bogus": 1}, "'bogus' is not supported"),
    ({"fps": 1, "num_frames": 4}, "mutually exclusive"),
    ({"fps": -1}, "'fps' must be a positive number"),
    ({"num_frames": 1.5}, "'num_frames' must be an integer"),
    ({"min_pixels": 10000, "max_pixels": 5000}, "exceeds max_pixels"),
])
def test_bad_mm_processor_kwargs_are_400s(client, kwargs, needle):
    with pytest.raises(openai.BadRequestError) as e:
        chat_kw(client, user(video(data_url("h264"))), kwargs)
    assert needle in str(e.value), str(e.value)
