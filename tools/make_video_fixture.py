#!/usr/bin/env python3
"""Video input references from transformers 5.17 for tests/unit/video_preprocess_test.cpp and
tests/model/video_parity_test.cpp.

    /work/venv-ref/bin/python tools/make_video_fixture.py --out tests/data/video

Where it sits: tools/ (fixture generators), next to make_vision_parity_fixture.py, whose committed
model (tests/data/vision_parity: the tiny random Qwen3_5MoeForConditionalGeneration with its tower)
it loads unchanged. It writes small deterministic frames and what transformers' own classes make of
them:

  <clip>/frame<i>.{png,jpg}  the frames as a client sends them (a vLLM-style frame list)
  <clip>/pixel_values.npy    float32 [rows, 3*2*16*16]: Qwen3VLVideoProcessor (the torchvision
                             backend transformers uses for videos) with do_sample_frames=False
  manifest.json              per clip: frames, grid_thw, timestamps (seconds, per temporal patch),
                             whether the frames needed resizing (then our Pillow-exact resize is
                             compared within a bound, not exactly)
  video_preprocessor_config.json  the test config (small pixel limits; fps, min/max frames)
  sample_frames.json         Qwen3VLVideoProcessor.sample_frames on a grid of (total frames, video
                             fps, requested fps or num_frames, min/max frames)
  smart_resize.json          the video smart_resize (qwen3_vl) on a grid of sizes and limits
  <case>/ids.npy             int64 [T]: the chat rendered by the cut tokenizer's jinja template
                             (apply_chat_template, a {"type": "video"} part) and expanded by
                             Qwen3VLProcessor (timestamps "<t seconds>", per-frame vision_start /
                             video_pad x n / vision_end)
  <case>/positions.npy       int64 [3, T]: the model's get_rope_index; rope_delta in case.json
  <case>/logits_prefill.npy  float32 [T, 128]: one forward over the prompt with the video (and image),
                             the first 128 of the 512 vocabulary columns
  <case>/decode_ids.npy, logits_decode.npy  4 steps after the prompt
  <case>/case.json           the parts, rendered template, grids, rope delta, and transformers' greedy
                             continuation (fp32, up to 8 tokens or <|im_end|>): what the server answers
  ../vision_parity/video_preprocessor_config.json  the same video config, for the served model
Frame lists carry no frame rate; like vLLM's data:video/jpeg frames, fps = 1 and frames_indices
0..n-1 are the metadata, so a temporal patch of frames (2i, 2i+1) is at (2i + 0.5) seconds.
Made by torch 2.11.0, transformers 5.17.0, torchvision 0.26.0, Pillow 13.0.0; CPU, seconds.
"""
import argparse
import io
import json
import os
import shutil
import sys

import numpy as np
import torch
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_parity_fixtures as mpf  # noqa: E402
import make_vision_parity_fixture as vpf  # noqa: E402

from transformers import AutoTokenizer, Qwen3_5MoeForConditionalGeneration, Qwen3VLProcessor  # noqa: E402
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil  # noqa: E402
from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor, smart_resize  # noqa: E402
from transformers.video_utils import VideoMetadata  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
PARITY = os.path.join(ROOT, "tests", "data", "vision_parity")
IMAGES_DIR = os.path.join(ROOT, "tests", "data", "image")

VIDEO_CONFIG = {
    "video_processor_type": "Qwen3VLVideoProcessor",
    "size": {"shortest_edge": 4096, "longest_edge": 65536},
    "patch_size": 16,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "do_rescale": True,
    "rescale_factor": 0.00392156862745098,
    "do_normalize": True,
    "do_resize": True,
    "do_convert_rgb": True,
    "do_sample_frames": True,
    "fps": 2,
    "min_frames": 4,
    "max_frames": 768,
}
# name: (frames, height, width, format). clip_a and clip_b are already at their smart_resize size
# (multiples of 32, inside the limits), so the pixel values are exact; clip_resize needs a resize
# (torchvision's antialiased bicubic, which differs from Pillow's by a few levels).
CLIPS = {
    "clip_a": (4, 32, 64, "png"),
    "clip_b": (3, 32, 32, "jpg"),
    "clip_resize": (3, 40, 28, "png"),
}
CASES = {
    "one_video": dict(parts=[("text", "Watch: "), ("video", "clip_a"), ("text", " what moves?")]),
    "video_and_image": dict(parts=[("image", "rgb_97x61.png"), ("text", "and "), ("video", "clip_b"),
                                   ("text", " compare")]),
}
NUM_DECODE = 4
CHAT_MAX_TOKENS = 8
LOGIT_COLS = 128
SEED = 77


def frame(h, w, k, seed):
    """A smooth moving gradient with a bright block and mild noise (frames differ over time)."""
    rng = np.random.default_rng(seed + k)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    out = []
    for c in range(3):
        v = 128 + 90 * np.sin((x + 3 * k) / (4 + c) + y / (6 + c)) + 30 * np.cos((y - 2 * k) / 5)
        v += rng.normal(0, 12, size=(h, w))
        out.append(np.clip(np.rint(v), 0, 255))
    a = np.stack(out, axis=-1).astype(np.uint8)
    a[h // 4: h // 4 + h // 6, (w // 5 + 4 * k) % w: (w // 5 + 4 * k) % w + w // 8] = 250
    return a


def write_clips(out):
    manifest, videos = {}, {}
    vp = Qwen3VLVideoProcessor(**VIDEO_CONFIG)
    for ci, (name, (n, h, w, fmt)) in enumerate(CLIPS.items()):
        d = os.path.join(out, name)
        os.makedirs(d)
        frames = []
        for k in range(n):
            img = Image.fromarray(frame(h, w, k, 1000 * ci))
            path = os.path.join(d, f"frame{k}.{fmt}")
            if fmt == "png":
                img.save(path, format="PNG", optimize=True)
            else:
                img.save(path, format="JPEG", quality=85)
            frames.append(np.asarray(Image.open(path).convert("RGB")))
        video = np.stack(frames)
        meta = VideoMetadata(total_num_frames=n, fps=1.0, frames_indices=list(range(n)))
        r = vp(videos=[video], video_metadata=[meta], do_sample_frames=False, cap_pixels_per_frame=False,
               return_tensors="pt")
        pv = r["pixel_values_videos"].numpy().astype(np.float32)
        grid = [int(v) for v in r["video_grid_thw"][0]]
        np.save(os.path.join(d, "pixel_values.npy"), pv)
        rh, rw = smart_resize(n, h, w, 2, 32, VIDEO_CONFIG["size"]["shortest_edge"], VIDEO_CONFIG["size"]["longest_edge"])
        manifest[name] = dict(frames=[f"frame{k}.{fmt}" for k in range(n)], height=h, width=w, grid_thw=grid,
                              resized=[rh, rw], needs_resize=(rh, rw) != (h, w))
        videos[name] = (video, meta)
        print(name, grid, pv.shape)
    return manifest, videos


def sample_frames_cases():
    cases = []
    for min_f, max_f in ((4, 768), (2, 8), (1, 3)):
        vp = Qwen3VLVideoProcessor(**dict(VIDEO_CONFIG, min_frames=min_f, max_frames=max_f))
        for total in (1, 2, 3, 7, 16, 31, 100):
            for video_fps in (1.0, 7.5, 29.97, 30.0):
                for req in ({"fps": 2}, {"fps": 0.5}, {"fps": 3.7}, {"num_frames": 5}, {"num_frames": 1}, {}):
                    meta = VideoMetadata(total_num_frames=total, fps=video_fps)
                    kw = dict(req)
                    if "num_frames" in kw:
                        kw["fps"] = None
                    idx = vp.sample_frames(meta, **kw)
                    cases.append(dict(total=total, video_fps=video_fps, min_frames=min_f, max_frames=max_f,
                                      fps=req.get("fps"), num_frames=req.get("num_frames"),
                                      indices=[int(i) for i in idx]))
    return cases


def smart_resize_cases():
    cases = []
    for t in (2, 3, 4, 8, 33):
        for h, w in ((64, 64), (50, 70), (32, 500), (720, 1280), (1080, 1920), (17, 40), (300, 31)):
            for lo, hi in ((4096, 65536), (128 * 32 * 32, 32 * 32 * 768), (4096, 25165824)):
                try:
                    rh, rw = smart_resize(t, h, w, 2, 32, lo, hi)
                    cases.append(dict(t=t, h=h, w=w, min_pixels=lo, max_pixels=hi, out=[rh, rw]))
                except ValueError as e:
                    cases.append(dict(t=t, h=h, w=w, min_pixels=lo, max_pixels=hi, error=str(e)))
    return cases


@torch.no_grad()
def run_case(model, processor, tok, name, case, videos, out, gen):
    content = []
    images, vids, metas = [], [], []
    for kind, val in case["parts"]:
        if kind == "text":
            content.append({"type": "text", "text": val})
        elif kind == "image":
            content.append({"type": "image"})
            images.append(Image.open(os.path.join(IMAGES_DIR, val)).convert("RGB"))
        else:
            content.append({"type": "video"})
            v, m = videos[val]
            vids.append(v)
            metas.append(VideoMetadata(**{k: m[k] for k in m}))
    text = tok.apply_chat_template([{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True,
                                   enable_thinking=False)
    r = processor(text=[text], images=images or None, videos=vids, video_metadata=metas, do_sample_frames=False,
                  cap_pixels_per_frame=False, return_tensors="pt")
    ids = r["input_ids"]
    types = r["mm_token_type_ids"]
    kw = dict(pixel_values_videos=r["pixel_values_videos"], video_grid_thw=r["video_grid_thw"],
              mm_token_type_ids=types)
    if images:
        kw.update(pixel_values=r["pixel_values"], image_grid_thw=r["image_grid_thw"])
    positions, delta = model.model.get_rope_index(ids, mm_token_type_ids=types, image_grid_thw=kw.get("image_grid_thw"),
                                                  video_grid_thw=r["video_grid_thw"])
    model.model.rope_deltas = None
    prefill = model(input_ids=ids, use_cache=False, **kw).logits[0]
    model.model.rope_deltas = None
    o = model(input_ids=ids, use_cache=True, **kw)
    assert (o.logits[0] - prefill).abs().max() < 1e-5
    cache = o.past_key_values
    decode_ids = torch.randint(0, 470, (NUM_DECODE,), generator=gen)
    rows = []
    for t in decode_ids.tolist():
        o = model(input_ids=torch.tensor([[t]]), past_key_values=cache, use_cache=True)
        cache = o.past_key_values
        rows.append(o.logits[0, -1])
    model.model.rope_deltas = None
    # Greedy continuation (what the server must answer with an f32 KV cache, tests/e2e/test_videos.py).
    o = model(input_ids=ids, use_cache=True, **kw)
    cache, greedy = o.past_key_values, []
    nxt = int(o.logits[0, -1].argmax())
    while True:
        greedy.append(nxt)
        if nxt == vpf.IM_END or len(greedy) == CHAT_MAX_TOKENS:
            break
        o = model(input_ids=torch.tensor([[nxt]]), past_key_values=cache, use_cache=True)
        cache = o.past_key_values
        nxt = int(o.logits[0, -1].argmax())
    model.model.rope_deltas = None
    content_ids = [t for t in greedy if t != vpf.IM_END]
    d = os.path.join(out, name)
    os.makedirs(d)
    np.save(os.path.join(d, "ids.npy"), ids[0].numpy())
    np.save(os.path.join(d, "positions.npy"), positions[:, 0].numpy())
    # Columns [0, LOGIT_COLS) of every row (a hidden-state error shows in every column; the whole
    # [T, 512] would be 4x the bytes).
    np.save(os.path.join(d, "logits_prefill.npy"), np.ascontiguousarray(prefill.float().numpy()[:, :LOGIT_COLS]))
    np.save(os.path.join(d, "decode_ids.npy"), decode_ids.numpy())
    np.save(os.path.join(d, "logits_decode.npy"), torch.stack(rows).float().numpy())
    mpf.write_json(os.path.join(d, "case.json"), dict(
        parts=[list(p) for p in case["parts"]], rendered=text, rope_delta=int(delta.flatten()[0]),
        num_tokens=int(ids.shape[1]), video_grid_thw=r["video_grid_thw"].tolist(), enable_thinking=False,
        max_tokens=CHAT_MAX_TOKENS, completion_ids=greedy,
        completion_text=tok.decode(content_ids, skip_special_tokens=True),
        finish_reason="stop" if greedy[-1] == vpf.IM_END else "length",
        image_grid_thw=r["image_grid_thw"].tolist() if images else []))
    print(f"{name}: {ids.shape[1]} tokens, video grids {r['video_grid_thw'].tolist()}, delta {int(delta.flatten()[0])}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tests/data/video")
    args = ap.parse_args()
    torch.set_num_threads(min(8, os.cpu_count() or 1))
    torch.use_deterministic_algorithms(True)
    if os.path.isdir(args.out):
        shutil.rmtree(args.out)
    os.makedirs(args.out)
    mpf.write_json(os.path.join(args.out, "video_preprocessor_config.json"), VIDEO_CONFIG)
    # The served model directory gets the same video config (the server reads it from there).
    mpf.write_json(os.path.join(PARITY, "video_preprocessor_config.json"), VIDEO_CONFIG)
    manifest, videos = write_clips(args.out)
    mpf.write_json(os.path.join(args.out, "manifest.json"), manifest)
    with open(os.path.join(args.out, "sample_frames.json"), "w") as f:
        json.dump(sample_frames_cases(), f, separators=(",", ":"))
    mpf.write_json(os.path.join(args.out, "smart_resize.json"), smart_resize_cases())

    model = Qwen3_5MoeForConditionalGeneration.from_pretrained(PARITY, torch_dtype=torch.float32,
                                                               attn_implementation="eager").eval()
    tok = AutoTokenizer.from_pretrained(PARITY)
    improc = Qwen2VLImageProcessorPil(**json.load(open(os.path.join(PARITY, "preprocessor_config.json"))))
    vidproc = Qwen3VLVideoProcessor(**VIDEO_CONFIG)
    processor = Qwen3VLProcessor(image_processor=improc, tokenizer=tok, video_processor=vidproc,
                                 chat_template=tok.chat_template)
    gen = torch.Generator().manual_seed(SEED)
    for name, case in CASES.items():
        run_case(model, processor, tok, name, case, videos, args.out, gen)
    mpf.write_json(os.path.join(args.out, "reference.json"), dict(
        torch=torch.__version__, transformers=__import__("transformers").__version__,
        model="tests/data/vision_parity (make_vision_parity_fixture.py)"))
    total = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(args.out) for f in fs)
    print("bytes", total)


if __name__ == "__main__":
    main()
