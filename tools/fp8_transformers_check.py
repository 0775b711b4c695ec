#!/usr/bin/env python3
"""Loads an FP8 checkpoint written by `qwenserve quantize` in transformers (FineGrainedFP8Config
with dequantize=True, float32, CPU) and compares its logits on ids with qwenserve's.

    build/qwenserve quantize --model models/qwen36-tiny --output /tmp/q8 --format fp8-block
    build/qwenserve logits --model /tmp/q8 --ids $(python3 -c "import numpy; print(','.join(map(str, numpy.load('models/qwen36-tiny/ref_ids.npy'))))") --kv-cache-dtype f32 --out /tmp/q8.npy
    python3 tools/fp8_transformers_check.py --model /tmp/q8 --ids models/qwen36-tiny/ref_ids.npy --logits /tmp/q8.npy

(--kv-cache-dtype f32: the exact CPU cache; the default, bf16, rounds K/V as the GPU stores them.)
This checks the checkpoint format end to end against an independent reader (tensor names, the
per-expert layout, weight_scale_inv, quantization_config) as well as qwenserve's FP8 forward.
Needs torch, transformers and accelerate (the GPU machine's image has them).
"""
import argparse

import numpy as np
import torch
from transformers import AutoModelForImageTextToText, FineGrainedFP8Config


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--ids", required=True, help=".npy of token ids")
    ap.add_argument("--logits", required=True, help="qwenserve's logits .npy for the same ids")
    args = ap.parse_args()
    ids = np.load(args.ids)
    m = AutoModelForImageTextToText.from_pretrained(
        args.model, quantization_config=FineGrainedFP8Config(dequantize=True), dtype=torch.float32, device_map="cpu")
    m.eval()
    with torch.no_grad():
        ref = m(input_ids=torch.tensor(ids)[None]).logits[0].float().numpy()
    ours = np.load(args.logits)
    d = np.abs(ref - ours)
    print(f"transformers vs qwenserve on the FP8 checkpoint ({len(ids)} tokens): max |d| {d.max():.3g}, "
          f"rms {np.sqrt((d ** 2).mean()):.3g}, argmax agreement {(ref.argmax(1) == ours.argmax(1)).mean():.3f}")


if __name__ == "__main__":
    main()
