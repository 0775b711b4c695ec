#!/usr/bin/env python3
"""Video-file references (PyAV 18.1 with its own FFmpeg, transformers 5.17) for
tests/unit/video_decode_test.cpp and tests/e2e/test_video_files.py.

    /work/venv-ref/bin/python tools/make_video_file_fixture.py --out tests/data/video_file

Encodes small deterministic clips with PyAV (64x64 frames, a moving gradient and a square, so
every frame differs), then, independently of qwenserve:
  <clip>.<ext>              the file (mp4/h264 yuv420p, webm/vp9 yuv420p, mkv/ffv1 yuv444p)
  <clip>/frames.rgb         raw uint8 [k, 64, 64, 3]: PyAV's decode of the sampled frames (distinct
                            indices, ascending), to_ndarray("rgb24") as transformers' pyav reader
  <clip>/pixel_values.npy   float32: Qwen3VLVideoProcessor (tests/data/video's config: fps 2,
                            min 4 frames) on those frames with PyAV's metadata (frames, average_rate)
                            and do_sample_frames=True: transformers samples the frames itself
  manifest.json             per clip: PyAV's total_num_frames and fps, transformers' sampled
                            frames_indices, grid_thw, and Qwen3VLProcessor's timestamps
"""
import argparse
import json
import os
from fractions import Fraction

import av
import numpy as np
import torch
import transformers
from transformers import Qwen3VLProcessor
from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor
from transformers.video_utils import VideoMetadata

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
CONFIG = os.path.join(REPO, "tests", "data", "video", "video_preprocessor_config.json")

# name, container extension, codec, pixel format, frames, frame rate
CLIPS = [
    ("h264", "mp4", "libx264", "yuv420p", 20, 8),
    ("vp9", "webm", "libvpx-vp9", "yuv420p", 13, 5),
    ("ffv1", "mkv", "ffv1", "yuv444p", 9, 3),
]
W = H = 64


def frame_rgb(i):
    y, x = np.mgrid[0:H, 0:W]
    img = np.zeros((H, W, 3), np.uint8)
    img[..., 0] = (x * 4 + i * 9) % 256
    img[..., 1] = (y * 4 + i * 5) % 256
    img[..., 2] = ((x + y) * 2 + i * 17) % 256
    s = 8 + (i * 3) % 40
    img[s:s + 16, s:s + 16] = [255, 255, 255]
    return img


def encode(path, codec, pix_fmt, n, rate):
    with av.open(path, "w") as out:
        st = out.add_stream(codec, rate=Fraction(rate, 1))
        st.width, st.height, st.pix_fmt = W, H, pix_fmt
        if codec == "libx264":
            st.options = {"crf": "18", "bf": "2"}  # B-frames: decode order differs from display order
        for i in range(n):
            f = av.VideoFrame.from_ndarray(frame_rgb(i), format="rgb24")
            for p in st.encode(f):
                out.mux(p)
        for p in st.encode():
            out.mux(p)


def decode_all(path):
    with av.open(path) as c:
        s = c.streams.video[0]
        total, fps = s.frames, s.average_rate
        frames = np.stack([f.to_ndarray(format="rgb24") for f in c.decode(video=0)])
    return int(total), float(fps), frames


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    cfg = json.load(open(CONFIG))
    proc = Qwen3VLVideoProcessor(**{k: v for k, v in cfg.items() if k != "video_processor_type"})
    manifest = {"pyav": av.__version__, "transformers": transformers.__version__,
                "ffmpeg": {k: ".".join(map(str, v)) for k, v in av.library_versions.items()}, "clips": {}}
    for name, ext, codec, pix_fmt, n, rate in CLIPS:
        path = os.path.join(a.out, f"{name}.{ext}")
        encode(path, codec, pix_fmt, n, rate)
        total, fps, frames = decode_all(path)
        assert frames.shape[0] == n, (name, frames.shape)
        # mkv/webm store no frame count: PyAV reports 0, which transformers' pyav reader would
        # pass on; the decoded count is what a sampler needs (and what qwenserve counts).
        meta_total = total if total > 0 else frames.shape[0]
        md = VideoMetadata(total_num_frames=meta_total, fps=fps, duration=meta_total / fps, video_backend="pyav",
                           height=H, width=W)
        res = proc(videos=[frames], video_metadata=[md], do_sample_frames=True, return_metadata=True,
                   return_tensors="pt")
        pv = res["pixel_values_videos"].numpy().astype(np.float32)
        grid = res["video_grid_thw"][0].tolist()
        meta = res["video_metadata"][0]
        indices = [int(i) for i in meta.frames_indices]
        ts = Qwen3VLProcessor._calculate_timestamps(None, indices, meta.fps, proc.temporal_patch_size)
        d = os.path.join(a.out, name)
        os.makedirs(d, exist_ok=True)
        frames[sorted(set(indices))].tofile(os.path.join(d, "frames.rgb"))
        np.save(os.path.join(d, "pixel_values.npy"), pv)
        manifest["clips"][name] = {"file": f"{name}.{ext}", "codec": codec, "pix_fmt": pix_fmt,
                                   "pyav_frames": total, "total_frames": meta_total, "fps": fps,
                                   "indices": indices, "grid_thw": grid, "timestamps": [float(t) for t in ts]}
        print(name, total, fps, indices, grid, ts)
    with open(os.path.join(a.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


if __name__ == "__main__":
    main()
