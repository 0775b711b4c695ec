#!/usr/bin/env python3
"""How far bf16 rounding alone moves the vision parity fixture's logits, and how far real faults do.

    /work/venv-ref/bin/python tools/vision_bf16_noise.py [--fixture tests/data/vision_parity]

Where it sits: tools/ (fixture studies); reads the committed tests/data/vision_parity model and
cases (tools/make_vision_parity_fixture.py) and runs transformers 5.17 only: no qwenserve code. It
explains the bound of the bf16 half of tests/gpu/cuda_images_test.cpp (docs/VISION.md "bf16 and
this fixture").

transformers runs the fixture in fp32 (eager attention, eager experts) with forward hooks that
round, as the CUDA backend's bf16 mode does, the inputs of the text model's linears, router and
experts ("linears"), of the tower's linears ("tower"), and q, k, v and the softmax numerators P of
the text attention ("attention": the bf16 cache and the tensor-core kernels' operands). Every
weight of the fixture is bf16-exact already, so these roundings are all that bf16 changes. Each
row prints the normalised error sqrt(sum d^2 / sum ref^2) and max |diff| of the prefill logits
against the fixture's fp32 logits, and the (layer, token) pairs whose MoE top-k set differs from
the fp32 run's. The fault rows apply one fault each in fp32: images left out, 1-D positions, the h
and w streams swapped, each image's embeddings in reverse row order, the images' order rotated.
"""
import argparse
import json
import os

import numpy as np
import torch
import transformers.models.qwen3_5_moe.modeling_qwen3_5_moe as hf
from transformers import Qwen3_5MoeForConditionalGeneration

IMAGE_TOKEN = 491
CASES = ["one_image", "two_images", "three_images"]
HERE = os.path.dirname(os.path.abspath(__file__))


def bf(x):
    return x.to(torch.bfloat16).to(x.dtype)


class Knobs:
    """What the hooks round (bf16) and which fault is applied (fp32)."""
    linears = tower = attention = False
    fault = None


def install_hooks(model, topk):
    lm, visual = model.model.language_model, model.model.visual

    def round_input(flag):
        def pre(mod, args):
            if getattr(Knobs, flag):
                return (bf(args[0]),) + tuple(args[1:])
        return pre

    for m in lm.modules():
        if isinstance(m, (torch.nn.Linear, hf.Qwen3_5MoeTopKRouter, hf.Qwen3_5MoeExperts)):
            m.register_forward_pre_hook(round_input("linears"))
        if isinstance(m, hf.Qwen3_5MoeTopKRouter):
            m.register_forward_hook(lambda mod, inp, out: topk.append(out[2].sort(-1).values.clone()))
    for m in visual.modules():
        if isinstance(m, torch.nn.Linear):
            m.register_forward_pre_hook(round_input("tower"))

    eager = hf.eager_attention_forward

    def attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kw):
        if not (Knobs.attention and isinstance(module, hf.Qwen3_5MoeAttention)):
            return eager(module, query, key, value, attention_mask, scaling, dropout, **kw)
        k = bf(hf.repeat_kv(key, module.num_key_value_groups))
        v = bf(hf.repeat_kv(value, module.num_key_value_groups))
        s = torch.matmul(bf(query), k.transpose(2, 3)) * scaling
        if attention_mask is not None:
            s = s + attention_mask
        p = torch.exp(s - s.amax(-1, keepdim=True))
        return (torch.matmul(bf(p), v) / p.sum(-1, keepdim=True)).transpose(1, 2).contiguous(), None

    hf.eager_attention_forward = attention

    rope_index = model.model.get_rope_index

    def faulty_rope_index(*args, **kwargs):
        pos, delta = rope_index(*args, **kwargs)
        if Knobs.fault == "1-D positions":
            n = pos.shape[-1]
            pos = torch.arange(n).view(1, 1, n).expand_as(pos).clone()
            delta = torch.zeros_like(delta)
        elif Knobs.fault == "h and w swapped":
            pos = pos[[0, 2, 1]]
        return pos, delta

    model.model.get_rope_index = faulty_rope_index
    image_features = model.model.get_image_features

    def faulty_image_features(*args, **kwargs):
        out = image_features(*args, **kwargs)
        e = list(out.pooler_output)
        if Knobs.fault == "rows reversed":
            e = [x.flip(0) for x in e]
        elif Knobs.fault == "images rotated" and len(e) > 1:
            flat = torch.cat(e)
            flat = torch.roll(flat, e[0].shape[0], dims=0)
            e = list(torch.split(flat, [x.shape[0] for x in e]))
        out.pooler_output = tuple(e)
        return out

    model.model.get_image_features = faulty_image_features


@torch.no_grad()
def prefill(model, fixture, case, with_images=True):
    d = os.path.join(fixture, case)
    c = json.load(open(os.path.join(d, "case.json")))
    ids = torch.from_numpy(np.load(os.path.join(d, "ids.npy"))).long().view(1, -1)
    model.model.rope_deltas = None
    if not with_images:
        return model(input_ids=ids, use_cache=False).logits[0].float().numpy()
    images = os.path.join(HERE, "..", "tests", "data", "image")
    pv = np.concatenate([np.load(os.path.join(images, os.path.splitext(n)[0] + ".pixel_values.npy"))
                         for n in c["images"]]).astype(np.float32)
    grid = torch.from_numpy(np.load(os.path.join(d, "grid_thw.npy"))).long()
    out = model(input_ids=ids, pixel_values=torch.from_numpy(pv), image_grid_thw=grid,
                mm_token_type_ids=(ids == IMAGE_TOKEN).int(), use_cache=False).logits[0].float().numpy()
    model.model.rope_deltas = None
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixture", default=os.path.join(HERE, "..", "tests", "data", "vision_parity"))
    args = ap.parse_args()
    torch.manual_seed(0)
    model = Qwen3_5MoeForConditionalGeneration.from_pretrained(
        args.fixture, dtype=torch.float32, attn_implementation="eager").eval()
    topk = []
    install_hooks(model, topk)
    runs = [("fp32", dict()),
            ("bf16: linears", dict(linears=True)),
            ("bf16: tower", dict(tower=True)),
            ("bf16: attention", dict(attention=True)),
            ("bf16: linears+tower+attention", dict(linears=True, tower=True, attention=True))]
    runs += [(f"fault: {f}", dict(fault=f)) for f in
             ("images left out", "1-D positions", "h and w swapped", "rows reversed", "images rotated")]
    print(f"{'case':13s} {'run':32s} {'norm err':>9s} {'max|diff|':>9s}  top-k changes (layer: tokens)")
    for case in CASES:
        ref = np.load(os.path.join(args.fixture, case, "logits_prefill.npy"))
        Knobs.linears = Knobs.tower = Knobs.attention = False
        Knobs.fault = None
        topk.clear()
        prefill(model, args.fixture, case)
        base = list(topk)
        for name, knobs in runs:
            Knobs.linears = knobs.get("linears", False)
            Knobs.tower = knobs.get("tower", False)
            Knobs.attention = knobs.get("attention", False)
            Knobs.fault = knobs.get("fault")
            topk.clear()
            got = prefill(model, args.fixture, case, with_images=Knobs.fault != "images left out")
            flips = {i: (a != b).any(-1).nonzero().flatten().tolist() for i, (a, b) in enumerate(zip(base, topk))}
            flips = ", ".join(f"{i}: {t}" for i, t in flips.items() if t) or "-"
            err = float(np.sqrt(((got - ref) ** 2).sum() / (ref ** 2).sum()))
            print(f"{case:13s} {name:32s} {err:9.2e} {float(np.abs(got - ref).max()):9.2e}  "
                  f"{flips if not Knobs.fault else ''}", flush=True)


if __name__ == "__main__":
    main()
