#!/usr/bin/env python3
"""Test images and transformers' image-processor outputs for tests/unit/image_preprocess_test.cpp.

    python tools/make_image_fixtures.py --out tests/data/image

Makes small deterministic images with PIL (PNG RGB/RGBA/palette/gray/16-bit RGB, JPEG colour and
gray, WebP lossy and lossless with alpha), encodes them, and runs transformers 5.17's
Qwen2VLImageProcessorPil (the PIL backend) on each decoded file with a small test
preprocessor_config.json (so the outputs stay small). Writes per image:
  NAME.{png,jpg,webp}        the encoded file (what our decoder reads)
  NAME.decoded.rgb           raw uint8 [H][W][3], PIL's Image.open(f).convert("RGB")
  NAME.pixel_values.npy      float32 [rows, 3·2·16·16], the PIL-backend processor output
  NAME.tv_pixel_values.npy   the torchvision-backend output (when torchvision is installed)
and manifest.json (each image's grid_thw, resized size), smart_resize.json (transformers'
smart_resize on a grid of sizes and limits, including the default 65536..16777216 limits).
Needs: transformers==5.17.0, pillow, numpy (torch + torchvision for the tv_ outputs).
"""
import argparse
import io
import json
import os

import numpy as np
from PIL import Image

from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil, smart_resize

CONFIG = {
    "image_processor_type": "Qwen2VLImageProcessorFast",
    "size": {"shortest_edge": 4096, "longest_edge": 8192},
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
}


def pattern(h, w, seed, channels=3):
    """A smooth gradient with rings and noise: exercises the resampler's filter and clipping."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    out = []
    for c in range(channels):
        v = 128 + 100 * np.sin(x / (3 + c) + y / (5 + 2 * c)) + 40 * np.cos(np.hypot(x - w / 2, y - h / 3) / 4)
        v += rng.normal(0, 25, size=(h, w))
        out.append(np.clip(np.rint(v), 0, 255))
    # A few hard edges (black/white blocks) for overshoot clipping.
    a = np.stack(out, axis=-1).astype(np.uint8)
    a[h // 4: h // 4 + max(2, h // 8), w // 5: w // 5 + max(2, w // 6)] = 255
    a[h // 2: h // 2 + max(2, h // 10), w // 2: w // 2 + max(2, w // 7)] = 0
    return a


def encode(img, fmt, **kw):
    buf = io.BytesIO()
    img.save(buf, format=fmt, **kw)
    return buf.getvalue()


def images():
    yield "rgb_97x61", "png", encode(Image.fromarray(pattern(61, 97, 1)), "PNG")
    rgba = np.concatenate([pattern(150, 200, 2), pattern(150, 200, 3, 1)], axis=-1)
    yield "rgba_200x150", "png", encode(Image.fromarray(rgba, "RGBA"), "PNG")
    pal = Image.fromarray(pattern(30, 40, 4)).quantize(colors=37)
    yield "palette_40x30", "png", encode(pal, "PNG")
    yield "gray_70x50", "png", encode(Image.fromarray(pattern(50, 70, 5, 1)[..., 0], "L"), "PNG")
    rgb16 = (pattern(48, 80, 6).astype(np.uint16) * 257 + np.random.default_rng(7).integers(0, 256, (48, 80, 3)).astype(np.uint16))
    # PIL cannot write 16-bit RGB; build the PNG with its 16-bit big-endian raw rows by hand.
    yield "rgb16_80x48", "png", png16(rgb16)
    yield "interlaced_64x64", "png", png_interlaced(pattern(64, 64, 8))
    yield "exact_64x96", "png", encode(Image.fromarray(pattern(64, 96, 9)), "PNG")
    # Uniform noise: the two pass orders of the resampler round differently on it (on smooth
    # images they often agree). 50x130 -> 64x128 goes vertical first, 140x70 -> 128x64 horizontal.
    noise = np.random.default_rng(16)
    yield "noise_50x130", "png", encode(Image.fromarray(noise.integers(0, 256, (130, 50, 3), dtype=np.uint8)), "PNG")
    yield "noise_140x70", "png", encode(Image.fromarray(noise.integers(0, 256, (70, 140, 3), dtype=np.uint8)), "PNG")
    yield "photo_300x180", "jpg", encode(Image.fromarray(pattern(180, 300, 10)), "JPEG", quality=90)
    yield "photo444_77x53", "jpg", encode(Image.fromarray(pattern(53, 77, 11)), "JPEG", quality=95, subsampling=0)
    yield "gray_64x64", "jpg", encode(Image.fromarray(pattern(64, 64, 12, 1)[..., 0], "L"), "JPEG", quality=85)
    yield "lossy_120x90", "webp", encode(Image.fromarray(pattern(90, 120, 13)), "WEBP", quality=80)
    rgba2 = np.concatenate([pattern(80, 50, 14), pattern(80, 50, 15, 1)], axis=-1)
    yield "lossless_alpha_50x80", "webp", encode(Image.fromarray(rgba2, "RGBA"), "WEBP", lossless=True)


def png_chunk(kind, data):
    import zlib
    import struct
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png16(a):
    import struct
    import zlib
    h, w, _ = a.shape
    raw = b"".join(b"\x00" + a[y].astype(">u2").tobytes() for y in range(h))
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0))
            + png_chunk(b"IDAT", zlib.compress(raw)) + png_chunk(b"IEND", b""))


def png_interlaced(a):
    """Adam7-interlaced 8-bit RGB PNG (PIL cannot write interlaced files)."""
    import struct
    import zlib
    h, w, _ = a.shape
    passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]
    raw = b""
    for x0, y0, dx, dy in passes:
        sub = a[y0::dy, x0::dx]
        if sub.size == 0:
            continue
        raw += b"".join(b"\x00" + sub[y].tobytes() for y in range(sub.shape[0]))
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 1))
            + png_chunk(b"IDAT", zlib.compress(raw)) + png_chunk(b"IEND", b""))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "preprocessor_config.json"), "w") as f:
        json.dump(CONFIG, f, indent=2)
        f.write("\n")
    pil_proc = Qwen2VLImageProcessorPil(**{k: v for k, v in CONFIG.items() if k != "image_processor_type"})
    try:
        from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
        import torchvision  # noqa: F401
        tv_proc = Qwen2VLImageProcessor(**{k: v for k, v in CONFIG.items() if k != "image_processor_type"})
    except Exception as e:  # noqa: BLE001
        print("no torchvision backend:", e)
        tv_proc = None
    manifest = {}
    for name, ext, data in images():
        path = os.path.join(args.out, f"{name}.{ext}")
        with open(path, "wb") as f:
            f.write(data)
        img = Image.open(path)
        mode = img.mode
        rgb = img.convert("RGB")
        with open(os.path.join(args.out, f"{name}.decoded.rgb"), "wb") as f:
            f.write(np.ascontiguousarray(np.asarray(rgb, dtype=np.uint8)).tobytes())
        out = pil_proc(images=[rgb], return_tensors="np")
        pv = np.ascontiguousarray(out["pixel_values"], dtype=np.float32)
        grid = [int(v) for v in out["image_grid_thw"][0]]
        np.save(os.path.join(args.out, f"{name}.pixel_values.npy"), pv)
        entry = {"file": f"{name}.{ext}", "pil_mode": mode, "width": rgb.width, "height": rgb.height, "grid_thw": grid}
        if tv_proc is not None:
            tv = tv_proc(images=[rgb], return_tensors="pt")
            tvv = tv["pixel_values"].numpy().astype(np.float32)
            np.save(os.path.join(args.out, f"{name}.tv_pixel_values.npy"), tvv)
            d = np.abs(tvv - pv)
            entry["tv_max_abs_diff"] = float(d.max())
            entry["tv_frac_diff"] = float((d > 0).mean())
        manifest[name] = entry
        print(name, entry)
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")

    cases = []
    sizes = [(1, 1), (10, 2000), (2000, 10), (31, 33), (32, 32), (48, 48), (47, 49), (100, 100), (224, 224),
             (480, 640), (1080, 1920), (3000, 4000), (8000, 6000), (17, 3000), (513, 511), (4096, 4096), (50, 9999)]
    limits = [(4096, 8192), (65536, 16777216), (3136, 1003520), (256 * 256, 512 * 512)]
    for h, w in sizes:
        for lo, hi in limits:
            try:
                rh, rw = smart_resize(h, w, factor=32, min_pixels=lo, max_pixels=hi)
                cases.append({"h": h, "w": w, "min": lo, "max": hi, "rh": rh, "rw": rw})
            except ValueError as e:
                cases.append({"h": h, "w": w, "min": lo, "max": hi, "error": str(e)})
    with open(os.path.join(args.out, "smart_resize.json"), "w") as f:
        json.dump(cases, f, indent=0)
        f.write("\n")


if __name__ == "__main__":
    main()
