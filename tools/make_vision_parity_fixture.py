#!/usr/bin/env python3
"""A tiny random Qwen3_5MoeForConditionalGeneration WITH its vision tower, and transformers' logits
for conversations with 1, 2 and 3 images of different sizes, for tests/model/vision_parity_test.cpp.

    /work/venv-ref/bin/python tools/make_vision_parity_fixture.py --out tests/data/vision_parity

Where it sits: tools/ (fixture generators); reuses the model construction of
tools/make_parity_fixtures.py (config, randomisation, bf16 rounding, the MTP block). Its output is
committed; the model tests run the C++ CPU forward (tower + M-RoPE + embeddings at the pad rows)
and compare with these logits (max |diff| <= 1e-3).

The text model is fixture a's (hidden 32, 5 layers, partial rotary 0.25, mrope_section [2, 1, 1]
interleaved: the four rotary frequencies use T, H, W, T, so every stream matters); the tower has
patch 16 (the committed test images' pixel_values, tests/data/image, fit it), 1 block, hidden 16.
The tokenizer is models/qwen36-tiny's cut to the 512-token vocabulary: its first 479 BPE tokens (the
merges among them) and its 33 added tokens moved to 479..511, so <|im_end|> is 481, <|vision_start|>
488, <|vision_end|> 489, <|image_pad|> 491, <|video_pad|> 492 (the server tests run this model
through the chat template). Per case (images listed in CASES) it writes:
  <case>/ids.npy             int64 [T]: text, <vision_start>, <image_pad> x grid_h*grid_w/4, <vision_end>, ...
  <case>/grid_thw.npy        int64 [n, 3]
  <case>/logits_prefill.npy  float32 [T, V]: one forward over the whole prompt with the images
  <case>/decode_ids.npy      int64 [D]: tokens fed one at a time after the prompt (with the cache)
  <case>/logits_decode.npy   float32 [D, V]: their logits (positions continue with rope_deltas)
  <case>/positions.npy       int64 [3, T]: transformers' get_rope_index, and rope_delta in case.json
  chat_reference.json        a chat (text + 2 images, thinking off) rendered by the cut tokenizer's own
                             jinja template (transformers' apply_chat_template), its <|image_pad|>
                             expanded as the processor does, and transformers' greedy continuation
                             (fp32, up to 8 tokens or <|im_end|>): what the server must answer
The images are read by name from tests/data/image (the C++ test decodes and preprocesses them itself;
their pixel_values there equal what this script feeds transformers). The model directory holds
config.json, model.safetensors (model.language_model.*, model.visual.*, lm_head, mtp.*), the
test preprocessor_config.json and the cut tokenizer. Made by torch 2.11.0, transformers 5.17.0; CPU, seconds.
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_parity_fixtures as mpf  # noqa: E402

from transformers import Qwen3_5MoeConfig, Qwen3_5MoeForConditionalGeneration  # noqa: E402

NUM_BASE = 479  # BPE tokens kept from models/qwen36-tiny; its added tokens follow
ADDED_FROM = 4000  # models/qwen36-tiny's first added token id
VISION_START, VISION_END, IMAGE, VIDEO = (NUM_BASE + i for i in (9, 10, 12, 13))
IM_END = NUM_BASE + 2
TINY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models", "qwen36-tiny")
IMAGES_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "image")
# Grids (patches): rgb_97x61 4x6, noise_50x130 8x4, gray_64x64 4x4 (PNG, PNG, JPEG).
CASES = {
    "one_image": dict(images=["noise_50x130.png"], text=[5, 7]),
    "two_images": dict(images=["rgb_97x61.png", "gray_64x64.jpg"], text=[3, 4, 6]),
    "three_images": dict(images=["rgb_97x61.png", "noise_50x130.png", "gray_64x64.jpg"], text=[4, 3, 5, 6]),
}
NUM_DECODE = 4
SEED = 2121


def write_tokenizer(out):
    """models/qwen36-tiny's tokenizer cut to NUM_BASE BPE tokens + its added tokens after them."""
    tok = json.load(open(os.path.join(TINY, "tokenizer.json")))
    vocab = {k: i for k, i in tok["model"]["vocab"].items() if i < NUM_BASE}
    tok["model"]["vocab"] = vocab
    tok["model"]["merges"] = [m for m in tok["model"]["merges"] if m[0] in vocab and m[1] in vocab and m[0] + m[1] in vocab]
    for a in tok["added_tokens"]:
        a["id"] = a["id"] - ADDED_FROM + NUM_BASE
    assert max(a["id"] for a in tok["added_tokens"]) < 512
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump(tok, f, ensure_ascii=False)
    cfg = json.load(open(os.path.join(TINY, "tokenizer_config.json")))
    cfg["added_tokens_decoder"] = {str(int(k) - ADDED_FROM + NUM_BASE): v for k, v in cfg["added_tokens_decoder"].items()}
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False)
    names = {a["content"]: a["id"] for a in tok["added_tokens"]}
    assert names["<|vision_start|>"] == VISION_START and names["<|image_pad|>"] == IMAGE, names
    assert names["<|im_end|>"] == IM_END


def make_config():
    fx = mpf.FIXTURES[0]
    text = dict(mpf.COMMON_TEXT)
    text.update(fx["text"])
    text["eos_token_id"] = IM_END
    vision = dict(mpf.TINY_VISION, patch_size=16, out_hidden_size=text["hidden_size"])
    return Qwen3_5MoeConfig(
        text_config=text,
        vision_config=vision,
        tie_word_embeddings=False,
        image_token_id=IMAGE,
        video_token_id=VIDEO,
        vision_start_token_id=VISION_START,
        vision_end_token_id=VISION_END,
        attn_implementation="eager",
        experts_implementation="eager",
    )


def image_inputs(names):
    manifest = json.load(open(os.path.join(IMAGES_DIR, "manifest.json")))
    pv, grids = [], []
    for n in names:
        stem = os.path.splitext(n)[0]
        pv.append(np.load(os.path.join(IMAGES_DIR, f"{stem}.pixel_values.npy")))
        grids.append(manifest[stem]["grid_thw"])
    return np.concatenate(pv).astype(np.float32), np.array(grids, dtype=np.int64)


def prompt_ids(case, grids, gen):
    """Text runs (random ids below 490) around each image's <vision_start> pads <vision_end>."""
    ids, types = [], []
    for i, n in enumerate(case["text"]):
        ids += torch.randint(0, 470, (n,), generator=gen).tolist()
        types += [0] * n
        if i < len(grids):
            t, h, w = (int(x) for x in grids[i])
            pads = t * h * w // 4
            ids += [VISION_START] + [IMAGE] * pads + [VISION_END]
            types += [0] + [1] * pads + [0]
    return torch.tensor(ids, dtype=torch.int64), torch.tensor(types, dtype=torch.int32)


@torch.no_grad()
def reference(model, ids, types, pv, grid, decode_ids):
    x = ids.view(1, -1)
    kw = dict(pixel_values=torch.from_numpy(pv), image_grid_thw=torch.from_numpy(grid),
              mm_token_type_ids=types.view(1, -1))
    positions, delta = model.model.get_rope_index(x, mm_token_type_ids=types.view(1, -1),
                                                  image_grid_thw=torch.from_numpy(grid))
    model.model.rope_deltas = None
    prefill = model(input_ids=x, use_cache=False, **kw).logits[0]
    model.model.rope_deltas = None
    out = model(input_ids=x, use_cache=True, **kw)
    assert (out.logits[0] - prefill).abs().max() < 1e-5
    cache = out.past_key_values
    rows = []
    for t in decode_ids.tolist():
        out = model(input_ids=torch.tensor([[t]]), past_key_values=cache, use_cache=True)
        cache = out.past_key_values
        rows.append(out.logits[0, -1])
    model.model.rope_deltas = None
    return prefill, torch.stack(rows), positions[:, 0], int(delta.flatten()[0])


CHAT_IMAGES = ["rgb_97x61.png", "noise_50x130.png"]
CHAT_TEXT = "Describe these: "
CHAT_MAX_TOKENS = 8


@torch.no_grad()
def chat_reference(model, out):
    """transformers' template, pad expansion and greedy generation for one chat with two images."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out)
    content = [{"type": "text", "text": CHAT_TEXT}] + [{"type": "image_url", "image_url": {"url": n}} for n in CHAT_IMAGES]
    text = tok.apply_chat_template([{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True,
                                   enable_thinking=False)
    pv, grid = image_inputs(CHAT_IMAGES)
    ids, types, k = [], [], 0
    for t in tok.encode(text):
        if t == IMAGE:
            n = int(grid[k].prod()) // 4
            ids += [IMAGE] * n
            types += [1] * n
            k += 1
        else:
            ids.append(t)
            types.append(0)
    assert k == len(CHAT_IMAGES)
    x = torch.tensor([ids])
    model.model.rope_deltas = None
    o = model(input_ids=x, pixel_values=torch.from_numpy(pv), image_grid_thw=torch.from_numpy(grid),
              mm_token_type_ids=torch.tensor([types]), use_cache=True)
    cache, gen = o.past_key_values, []
    nxt = int(o.logits[0, -1].argmax())
    while True:
        gen.append(nxt)
        if nxt == IM_END or len(gen) == CHAT_MAX_TOKENS:
            break
        o = model(input_ids=torch.tensor([[nxt]]), past_key_values=cache, use_cache=True)
        cache = o.past_key_values
        nxt = int(o.logits[0, -1].argmax())
    model.model.rope_deltas = None
    content_ids = [t for t in gen if t != IM_END]
    mpf.write_json(os.path.join(out, "chat_reference.json"), dict(
        images=CHAT_IMAGES, text=CHAT_TEXT, enable_thinking=False, max_tokens=CHAT_MAX_TOKENS, prompt_ids=ids,
        completion_ids=gen, completion_text=tok.decode(content_ids, skip_special_tokens=True),
        finish_reason="stop" if gen[-1] == IM_END else "length"))
    print("chat:", len(ids), "prompt tokens, completion", gen)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tests/data/vision_parity")
    args = ap.parse_args()
    torch.set_num_threads(min(8, os.cpu_count() or 1))
    torch.use_deterministic_algorithms(True)
    if os.path.isdir(args.out):
        shutil.rmtree(args.out)
    os.makedirs(args.out)
    seed = SEED
    for _attempt in range(20):
        torch.manual_seed(seed)
        cfg = make_config()
        model = Qwen3_5MoeForConditionalGeneration(cfg).float().eval()
        mtp = mpf.MtpBlock(model.config.text_config).float().eval()
        mpf.randomise(model, cfg.text_config)
        mpf.randomise(mtp, cfg.text_config)
        mpf.round_to_bf16(model)
        mpf.round_to_bf16(mtp)
        probe = mpf.Probe(model, mtp)
        gen = torch.Generator().manual_seed(seed + 7)
        results = {}
        for name, case in CASES.items():
            pv, grid = image_inputs(case["images"])
            ids, types = prompt_ids(case, grid, gen)
            decode_ids = torch.randint(0, 470, (NUM_DECODE,), generator=gen)
            results[name] = (ids, grid, decode_ids) + reference(model, ids, types, pv, grid, decode_ids)
        gap = min(probe.gaps)
        probe.close()
        if gap >= mpf.MIN_ROUTER_GAP:
            break
        print(f"seed {seed}: min router gap {gap:.2e}, retrying")
        seed += 1
    else:
        raise RuntimeError("no seed with robust routing")

    model.save_pretrained(args.out, save_original_format=False)
    mpf.add_tensors(args.out, mpf.mtp_state_dict(mtp))
    shutil.copy(os.path.join(IMAGES_DIR, "preprocessor_config.json"), args.out)
    write_tokenizer(args.out)
    chat_reference(model, args.out)
    for name, (ids, grid, decode_ids, prefill, decode, positions, delta) in results.items():
        d = os.path.join(args.out, name)
        os.makedirs(d)
        np.save(os.path.join(d, "ids.npy"), ids.numpy())
        np.save(os.path.join(d, "grid_thw.npy"), grid)
        np.save(os.path.join(d, "logits_prefill.npy"), prefill.float().numpy())
        np.save(os.path.join(d, "decode_ids.npy"), decode_ids.numpy())
        np.save(os.path.join(d, "logits_decode.npy"), decode.float().numpy())
        np.save(os.path.join(d, "positions.npy"), positions.numpy())
        mpf.write_json(os.path.join(d, "case.json"), dict(images=CASES[name]["images"], rope_delta=delta,
                                                          num_tokens=int(ids.numel())))
        print(f"{name}: {ids.numel()} tokens, grids {grid.tolist()}, rope delta {delta}, "
              f"logits std {float(prefill.std()):.2f}")
    mpf.write_json(os.path.join(args.out, "reference.json"), dict(
        seed=seed, min_router_logit_gap=gap, torch=torch.__version__,
        transformers=__import__("transformers").__version__))
    print("seed", seed, "min router gap", gap, "bytes", mpf.dir_bytes(args.out))


if __name__ == "__main__":
    main()
