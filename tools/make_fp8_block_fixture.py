#!/usr/bin/env python3
"""Reference values for the FP8 E4M3 128x128 block format (Qwen's official FP8 checkpoints).

    python3 tools/make_fp8_block_fixture.py --out tests/data/fp8/fp8_block_fixture.safetensors

Writes one safetensors file with, for each case C:
  C.w          BF16 [rows, cols]   the weight to quantise
  C.q          F8_E4M3             torch's quantisation of it (torch.float8_e4m3fn cast)
  C.scale_inv  F32 or BF16         [ceil(rows/128), ceil(cols/128)], the multiplier per block
  C.dequant    F32                 q.float() * scale_inv (broadcast over each 128x128 block)
The quantisation follows transformers' Fp8Quantize (integrations/finegrained_fp8.py): per block
amax, scale = 448 / amax (1 for an all-zero block), scale_inv = 1 / scale, q = fp8(clamp(w * scale,
-448, 448)); note that PyTorch evaluates `448.0 / amax` as reciprocal(amax) * 448. Edge blocks (shapes that are not multiples of 128) use the valid elements only (zero
padding does not change amax). For the divisible case the script also runs transformers' own
Fp8Quantize (when transformers is importable) and checks that it gives the same bytes.
With a BF16 scale_inv the inverse is rounded to bf16 and the factor is 1 / that value.
tests/model/fp8_block_test.cpp checks qwenserve's quantiser and dequantisation against this file.
"""
import argparse

import torch
from safetensors.torch import save_file

BLOCK = 128
FP8 = torch.float8_e4m3fn
FP8_MAX = torch.finfo(FP8).max  # 448


def quantise(w: torch.Tensor, scale_dtype: torch.dtype):
    rows, cols = w.shape
    br, bc = -(-rows // BLOCK), -(-cols // BLOCK)
    padded = torch.zeros(br * BLOCK, bc * BLOCK, dtype=torch.float32)
    padded[:rows, :cols] = w.to(torch.float32)
    blocks = padded.reshape(br, BLOCK, bc, BLOCK)
    amax = blocks.abs().amax(dim=(1, 3))
    safe = torch.where(amax > 0, amax, torch.ones_like(amax))
    scale = torch.where(amax > 0, FP8_MAX / safe, torch.ones_like(amax))
    inv = (1.0 / scale).to(torch.float32)
    if scale_dtype == torch.bfloat16:
        inv = inv.to(torch.bfloat16).to(torch.float32)
        scale = 1.0 / inv
    q = torch.clamp(blocks * scale[:, None, :, None], min=-FP8_MAX, max=FP8_MAX).to(FP8)
    q = q.reshape(br * BLOCK, bc * BLOCK)[:rows, :cols].contiguous()
    full = inv.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)[:rows, :cols]
    dequant = q.to(torch.float32) * full
    return q, inv.to(scale_dtype), dequant.contiguous()


def weight(rows: int, cols: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(rows, cols, generator=g)
    # Blocks of very different magnitudes, so every block has its own scale.
    br, bc = -(-rows // BLOCK), -(-cols // BLOCK)
    mags = torch.logspace(-4, 2, br * bc).reshape(br, bc)
    w *= mags.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)[:rows, :cols]
    # Within-block spread large enough that small elements land in e4m3's subnormal range.
    w *= torch.exp(torch.randn(rows, cols, generator=g) * 1.2)
    w[0, 0] = 0.0
    if br > 1 and bc > 2:
        w[BLOCK:, 2 * BLOCK:] = 0.0  # an all-zero (edge) block: scale 1
    return w.to(torch.bfloat16)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    tensors = {}
    cases = [("edge_f32", 160, 272, 1, torch.float32), ("edge_bf16", 160, 272, 1, torch.bfloat16),
             ("even_f32", 256, 256, 2, torch.float32)]
    for name, rows, cols, seed, sdt in cases:
        w = weight(rows, cols, seed)
        q, inv, dq = quantise(w, sdt)
        tensors.update({f"{name}.w": w, f"{name}.q": q, f"{name}.scale_inv": inv, f"{name}.dequant": dq})
        print(f"{name}: [{rows}, {cols}] scales {list(inv.shape)} {inv.dtype}, "
              f"{int((q.view(torch.uint8) & 0x78 == 0).sum())} subnormal/zero codes")
    try:
        from types import SimpleNamespace

        from transformers.integrations.finegrained_fp8 import Fp8Quantize
        cfg = SimpleNamespace(weight_block_size=(BLOCK, BLOCK), scale_fmt="float")
        ref = Fp8Quantize(SimpleNamespace(quantization_config=cfg))._quantize_one("x.weight", tensors["even_f32.w"])
        assert torch.equal(ref["x.weight"].view(torch.uint8), tensors["even_f32.q"].view(torch.uint8))
        assert torch.equal(ref["x.weight_scale_inv"], tensors["even_f32.scale_inv"])
        print("transformers Fp8Quantize gives the same codes and scales for even_f32")
    except ImportError as e:
        print(f"transformers not importable ({e}); cross-check skipped")
    save_file(tensors, args.out, metadata={"format": "pt", "torch": torch.__version__})


if __name__ == "__main__":
    main()
