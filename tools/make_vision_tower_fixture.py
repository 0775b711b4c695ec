#!/usr/bin/env python3
"""A tiny random Qwen3.5-MoE vision tower and transformers' output on two images, for
tests/model/vision_tower_test.cpp.

    python tools/make_vision_tower_fixture.py --out tests/data/vision

Builds transformers 5.17's Qwen3_5MoeVisionModel (float32, eager attention) from a tiny
vision_config (2 blocks, hidden 32, 2 heads, a 4x4 learned position grid), sets every parameter to
a random bf16-representable value, and runs it on the pixel_values of two committed test images of
different grids (tests/data/image: rgb_97x61 -> 1x4x6 patches, gray_70x50 -> 1x4x4) in one call,
so attention must stay within each image (cu_seqlens). Writes:
  model.safetensors   the weights, named model.visual.* as in a Qwen3_5MoeForConditionalGeneration
  config.json         {"vision_config": ...} as transformers resolved it
  pixel_values.npy    float32 [40, 1536], grid_thw.npy int64 [2, 3]
  ref_merged.npy      float32 [10, 24]: the merger output (pooler_output), the image embeddings
  ref_blocks.npy      float32 [40, 32]: the last block's output (last_hidden_state)
  mrope_cases.json    transformers' get_rope_index (M-RoPE positions and the decode delta) for
                      prompts with 0-3 images of different grids, text between and after
Needs torch==2.11.0, transformers==5.17.0, safetensors, numpy.
"""
import argparse
import json
import os

import numpy as np
import torch
from safetensors.torch import save_file

from transformers.models.qwen3_5_moe.configuration_qwen3_5_moe import Qwen3_5MoeVisionConfig
from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import Qwen3_5MoeVisionModel

VISION = dict(depth=2, hidden_size=32, hidden_act="gelu_pytorch_tanh", intermediate_size=48, num_heads=2,
              in_channels=3, patch_size=16, spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=24,
              num_position_embeddings=16)
IMAGES = ["rgb_97x61", "gray_70x50"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--images", default=os.path.join(os.path.dirname(__file__), "..", "tests", "data", "image"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(21)
    cfg = Qwen3_5MoeVisionConfig(**VISION)
    cfg._attn_implementation = "eager"
    model = Qwen3_5MoeVisionModel(cfg).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm1.weight") or name.endswith("norm2.weight") or name.endswith("norm.weight"):
                v = 1.0 + 0.1 * torch.randn_like(p)
            elif name.endswith("bias"):
                v = 0.05 * torch.randn_like(p)
            elif "pos_embed" in name:
                v = 0.5 * torch.randn_like(p)
            else:
                v = torch.randn_like(p) / np.sqrt(p.shape[-1] if p.dim() == 2 else np.prod(p.shape[1:]))
            p.copy_(v.to(torch.bfloat16).float())
    pv = np.concatenate([np.load(os.path.join(args.images, f"{n}.pixel_values.npy")) for n in IMAGES])
    manifest = json.load(open(os.path.join(args.images, "manifest.json")))
    grid = np.array([manifest[n]["grid_thw"] for n in IMAGES], dtype=np.int64)
    with torch.no_grad():
        out = model(torch.from_numpy(pv), grid_thw=torch.from_numpy(grid), return_dict=True)
    merged = out.pooler_output.float().numpy()
    blocks = out.last_hidden_state.float().numpy()
    state = {f"model.visual.{k}": v.contiguous() for k, v in model.state_dict().items()}
    save_file(state, os.path.join(args.out, "model.safetensors"), metadata={"format": "pt"})
    d = cfg.to_dict()
    keep = list(VISION) + ["rope_parameters", "model_type"]
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump({"model_type": "qwen3_5_moe", "vision_config": {k: d[k] for k in keep if k in d}}, f, indent=1)
        f.write("\n")
    np.save(os.path.join(args.out, "pixel_values.npy"), pv.astype(np.float32))
    np.save(os.path.join(args.out, "grid_thw.npy"), grid)
    np.save(os.path.join(args.out, "ref_merged.npy"), merged.astype(np.float32))
    np.save(os.path.join(args.out, "ref_blocks.npy"), blocks.astype(np.float32))
    print("merged", merged.shape, "blocks", blocks.shape, "params", {k: tuple(v.shape) for k, v in state.items()})
    print("rope", d.get("rope_parameters"))
    with open(os.path.join(args.out, "mrope_cases.json"), "w") as f:
        json.dump(mrope_cases(), f)
        f.write("\n")


def mrope_cases():
    """get_rope_index reads only config.vision_config.spatial_merge_size and
    get_vision_position_ids, so it runs on a stub instead of a whole model."""
    import types
    from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import Qwen3_5MoeModel
    stub = types.SimpleNamespace(config=types.SimpleNamespace(vision_config=types.SimpleNamespace(spatial_merge_size=2)))
    stub.get_vision_position_ids = types.MethodType(Qwen3_5MoeModel.get_vision_position_ids, stub)
    layouts = [
        [("text", 7)],
        [("text", 3), ("image", (1, 4, 6)), ("text", 5)],
        [("text", 2), ("image", (1, 8, 4)), ("text", 1), ("image", (1, 4, 4)), ("text", 9)],
        [("image", (1, 2, 2)), ("text", 4), ("image", (1, 6, 10)), ("text", 2), ("image", (1, 12, 2)), ("text", 3)],
        [("text", 4), ("image", (1, 16, 16))],
    ]
    cases = []
    for layout in layouts:
        types_, grids = [], []
        for kind, v in layout:
            if kind == "text":
                types_ += [0] * v
            else:
                t, h, w = v
                types_ += [1] * (t * (h // 2) * (w // 2))
                grids.append(list(v))
        n = len(types_)
        ids = torch.zeros((1, n), dtype=torch.long)
        tt = torch.tensor([types_], dtype=torch.int32)
        g = torch.tensor(grids, dtype=torch.long) if grids else None
        pos, delta = Qwen3_5MoeModel.get_rope_index(stub, ids, tt, image_grid_thw=g)
        cases.append({"token_types": types_, "grids": grids, "positions": pos[:, 0, :].tolist(),
                      "delta": int(delta.reshape(-1)[0])})
    return cases


if __name__ == "__main__":
    main()
