#!/usr/bin/env python3
"""Loads an INT4 W4A16 or NVFP4 checkpoint written by `qwenserve quantize` in transformers +
compressed-tensors (CompressedTensorsConfig(run_compressed=False): decompressed at load, CPU) and
compares its logits on ids with qwenserve's, and its weights with the checkpoint's packed tensors
dequantised here in float32 from the format's definition.

    build/qwenserve quantize --model models/qwen36-tiny --output /tmp/q4 --format int4-w4a16
    build/qwenserve logits --model /tmp/q4 --ids $(python3 -c "import numpy; print(','.join(map(str, numpy.load('models/qwen36-tiny/ref_ids.npy'))))") --kv-cache-dtype f32 --out /tmp/q4.npy
    /work/venv-quant/bin/python tools/ct_transformers_check.py --model /tmp/q4 --ids models/qwen36-tiny/ref_ids.npy --logits /tmp/q4.npy

This checks the checkpoint end to end against an independent reader (tensor names, per-expert
layout into transformers' fused experts, quantization_config, ignore list). transformers
decompresses into BF16 parameters, so its weights are ours rounded to BF16 and its logits differ
from qwenserve's float32 dequantisation by that rounding. Measured on the tiny model, 2026-12-02
(transformers 5.17.0, compressed-tensors 0.20.1):
  int4-w4a16: experts equal ours rounded to bf16, linears equal; logits max |d| 0.48, rms 0.022,
              argmax agreement 1.000.
  nvfp4:      the linears (shared expert, attention) equal ours to bf16 rounding, but transformers'
              fused experts come out as ours times weight_global_scale (its per-expert -> fused
              conversion multiplies by the global scale, ModelOpt's convention, where
              compressed-tensors divides: the library's own NVFP4PackedCompressor.decompress agrees
              with us, tests/model/quant_formats_test.cpp), and with dtype float32 its forward stops
              on a BF16 linear. A transformers issue, reported by this script rather than hidden.
"""
import argparse
import json

import numpy as np
import torch
from safetensors.torch import load_file
from transformers import AutoModelForImageTextToText
from transformers.utils.quantization_config import CompressedTensorsConfig

E2M1 = torch.tensor([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6])


def dequant(sd, m, fmt, group):
    pk = sd[m + ".weight_packed"]
    if fmt == "pack-quantized":
        q = torch.stack([(pk >> (4 * j)) & 15 for j in range(8)], -1).reshape(pk.shape[0], -1).float() - 8
        return q * sd[m + ".weight_scale"].float().repeat_interleave(group, 1)
    codes = torch.stack([pk & 15, pk >> 4], -1).reshape(pk.shape[0], -1).long()
    scale = sd[m + ".weight_scale"].float() / sd[m + ".weight_global_scale"].float()
    return E2M1[codes] * scale.repeat_interleave(16, 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--ids", required=True, help=".npy of token ids")
    ap.add_argument("--logits", required=True, help="qwenserve's logits .npy for the same ids")
    a = ap.parse_args()
    qc = json.load(open(a.model + "/config.json"))["quantization_config"]
    fmt, group = qc["format"], qc["config_groups"]["group_0"]["weights"]["group_size"]
    m = AutoModelForImageTextToText.from_pretrained(a.model, quantization_config=CompressedTensorsConfig(run_compressed=False),
                                                    dtype=torch.float32, device_map="cpu")
    m.eval()
    sd = load_file(a.model + "/model.safetensors")
    lm = m.model.language_model
    worst, worst_e, exact = 0.0, 0.0, True
    for li, layer in enumerate(lm.layers):
        p = f"model.language_model.layers.{li}.mlp."
        for e in range(layer.mlp.experts.gate_up_proj.shape[0]):
            g = dequant(sd, f"{p}experts.{e}.gate_proj", fmt, group)
            u = dequant(sd, f"{p}experts.{e}.up_proj", fmt, group)
            d = dequant(sd, f"{p}experts.{e}.down_proj", fmt, group)
            for ours, theirs in ((torch.cat([g, u]), layer.mlp.experts.gate_up_proj[e]), (d, layer.mlp.experts.down_proj[e])):
                diff = (ours - theirs.float()).abs().max().item()
                rel = diff / ours.abs().max().item()
                worst_e = max(worst_e, rel)
                exact = exact and torch.equal(ours.to(torch.bfloat16).float(), theirs.float())
        s = dequant(sd, f"{p}shared_expert.down_proj", fmt, group)
        worst = max(worst, (s - layer.mlp.shared_expert.down_proj.weight.float()).abs().max().item())
    print(f"experts: transformers' fused weights {'==' if exact else '!='} our packed tensors dequantised in "
          f"float32 and rounded to bf16 (max |d| / max |w| {worst_e:.3g}); shared_expert.down_proj max |d| {worst:.3g}")
    ids = np.load(a.ids)
    with torch.no_grad():
        ref = m(input_ids=torch.tensor(ids)[None]).logits[0].float().numpy()
    ours = np.load(a.logits)
    d = np.abs(ref - ours)
    print(f"transformers vs qwenserve on the {fmt} checkpoint ({len(ids)} tokens): max |d| {d.max():.3g}, "
          f"rms {np.sqrt((d ** 2).mean()):.3g}, argmax agreement {(ref.argmax(1) == ours.argmax(1)).mean():.3f}")


if __name__ == "__main__":
    main()
