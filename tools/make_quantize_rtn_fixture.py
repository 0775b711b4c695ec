#!/usr/bin/env python3
"""A tiny random BF16 checkpoint and compressed-tensors' own round-to-nearest quantisation of it,
for `qwenserve quantize --format int4-w4a16|nvfp4` (tests/model/quantize_low_bit_test.cpp).

    /work/venv-quant/bin/python tools/make_quantize_rtn_fixture.py --out tests/data/quantize_rtn

Writes:
  bf16/config.json, bf16/model.safetensors
      the flat qwen3_5_moe_text model of tools/make_quant_fixtures.py (2 layers: GDN + full
      attention, 4 experts, MTP), all BF16; layer 0's routed experts per expert, layer 1's fused
      (gate_up_proj [E, 2I, H] = gate rows then up rows, down_proj [E, H, I]) as transformers saves
      them, MTP fused.
  int4_g32.safetensors
      for every linear the quantiser must quantise (main-model attention q/k/v/o, GDN
      in_proj_qkv/in_proj_z/out_proj, routed experts per expert, shared expert; not router,
      shared_expert_gate, in_proj_a/b, lm_head or anything under mtp.): the tensors compressed-
      tensors' PackedQuantizationCompressor.compress makes from the BF16 weight with the scale
      and zero point of compute_dynamic_scales_and_zp (num_bits 4, int, symmetric, strategy
      group, group_size 32), as it runs on a BF16 model: weight_packed, weight_scale (BF16),
      weight_shape.
  nvfp4.safetensors
      the same modules through NVFP4PackedCompressor.compress with generate_gparam's global scale
      and compute_dynamic_scales_and_zp's E4M3 group scales (num_bits 4, float, tensor_group,
      group 16), computed on the weight in float32: weight_packed, weight_scale, weight_global_scale.
  config_int4_g32.json, config_nvfp4.json
      the `weights` QuantizationArgs of each scheme as compressed-tensors serialises them.
One linear (layer 0's shared_expert.gate_proj) has all-zero groups, groups 1e-5 and 1e-9 times the
rest, -0.0 weights and a tiny all-negative group: the recipes' edge cases.
Deterministic (seeded); versions in VERSIONS.txt.
"""
import argparse
import json
import os
import shutil
import sys

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_quant_fixtures as mq  # noqa: E402  (the tiny model's shapes and the module rule)


def bf16_model():
    dense, linears = mq.make_dense(21)
    # Edge cases of the recipes: all-zero groups (INT4's bf16-eps scale, NVFP4's 0.125 scale),
    # groups far below the tensor's amax (E4M3 subnormal and zero NVFP4 scales), and -0.0
    # weights (the sign of zero codes).
    w = linears["model.layers.0.mlp.shared_expert.gate_proj"]
    w[:4, :32] = 0
    w[4:8, :32] *= 1e-5
    w[8:12, :16] *= 1e-9
    w[12, 16:20] = -0.0
    w[13, 16:32] = -w[13, 16:32].abs() * 1e-3
    tensors = dict(dense)
    p = "model.layers.1.mlp.experts."
    gate_up, down = [], []
    for e in range(mq.E):
        gate_up.append(torch.cat([linears.pop(f"{p}{e}.gate_proj"), linears.pop(f"{p}{e}.up_proj")]))
        down.append(linears.pop(f"{p}{e}.down_proj"))
    tensors[p + "gate_up_proj"] = torch.stack(gate_up)
    tensors[p + "down_proj"] = torch.stack(down)
    for m, w in linears.items():
        tensors[m + ".weight"] = w
    # The matrices to quantise, by the per-expert module name the quantiser writes.
    todo = {m: w for m, w in linears.items() if mq.quantised(m)}
    for e in range(mq.E):
        todo[f"{p}{e}.gate_proj"] = gate_up[e][:mq.I]
        todo[f"{p}{e}.up_proj"] = gate_up[e][mq.I:]
        todo[f"{p}{e}.down_proj"] = down[e]
    return tensors, todo


def int4(w, args):
    from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
    from compressed_tensors.quantization import QuantizationScheme
    from compressed_tensors.quantization.utils.helpers import compute_dynamic_scales_and_zp
    assert w.dtype == torch.bfloat16
    scale, zp = compute_dynamic_scales_and_zp(w, args, None)
    assert scale.dtype == torch.bfloat16
    scheme = QuantizationScheme(targets=["Linear"], weights=args)
    return PackedQuantizationCompressor.compress({"weight": w, "weight_scale": scale, "weight_zero_point": zp}, scheme)


def nvfp4(w, args):
    from compressed_tensors.compressors.nvfp4.base import NVFP4PackedCompressor
    from compressed_tensors.quantization import QuantizationScheme
    from compressed_tensors.quantization.utils.helpers import compute_dynamic_scales_and_zp, generate_gparam
    wf = w.to(torch.float32)
    gscale = generate_gparam(wf.min(), wf.max())
    scale, _ = compute_dynamic_scales_and_zp(wf, args, None, global_scale=gscale)
    scheme = QuantizationScheme(targets=["Linear"], weights=args)
    return NVFP4PackedCompressor.compress({"weight": wf, "weight_scale": scale, "weight_global_scale": gscale}, scheme)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/data/quantize_rtn")
    a = ap.parse_args()
    import compressed_tensors
    from compressed_tensors.quantization import QuantizationArgs
    if os.path.exists(a.out):
        shutil.rmtree(a.out)
    os.makedirs(os.path.join(a.out, "bf16"))
    tensors, todo = bf16_model()
    with open(os.path.join(a.out, "bf16", "config.json"), "w") as f:
        json.dump(mq.text_config(), f, indent=2)
    save_file({k: v.contiguous() for k, v in sorted(tensors.items())}, os.path.join(a.out, "bf16", "model.safetensors"))
    schemes = {
        "int4_g32": (QuantizationArgs(num_bits=4, type="int", symmetric=True, strategy="group", group_size=32), int4),
        "nvfp4": (QuantizationArgs(num_bits=4, type="float", symmetric=True, strategy="tensor_group", group_size=16,
                                   scale_dtype=torch.float8_e4m3fn), nvfp4),
    }
    for name, (args, fn) in schemes.items():
        out = {}
        for m, w in sorted(todo.items()):
            for k, v in fn(w.contiguous(), args).items():
                out[f"{m}.{k}"] = v.contiguous()
        save_file(out, os.path.join(a.out, name + ".safetensors"))
        with open(os.path.join(a.out, f"config_{name}.json"), "w") as f:
            f.write(args.model_dump_json(indent=2) + "\n")
        print(f"{name}: {len(todo)} modules, {len(out)} tensors")
    size = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(a.out) for f in fs)
    print(f"{a.out}: {size / 1024:.0f} KiB")
    assert size < 1 << 20
    with open(os.path.join(a.out, "VERSIONS.txt"), "w") as f:
        f.write(f"compressed-tensors {compressed_tensors.__version__}\ntorch {torch.__version__}\n")


if __name__ == "__main__":
    main()
