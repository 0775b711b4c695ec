#!/usr/bin/env python3
"""Builds tiny random Qwen3.5/3.6-MoE checkpoints and records transformers reference outputs.

Where it sits: tools/ (fixture generators). Its output, tests/data/parity/, is committed and read by
the `model` tests, which run the C++ CPU forward pass on each checkpoint and compare with the
reference logits (max |diff| <= 1e-3).

What it does, per fixture (see FIXTURES below and tools/README.md):
  * builds a tiny `Qwen3_5MoeForConditionalGeneration` (nested `qwen3_5_moe` config with a
    `text_config` and a tiny `vision_config`, untied head), randomises every parameter with
    scales that keep activations and logits O(1), rounds every parameter to a bf16-representable
    value (so one reference serves an fp32 and a bf16 copy of the weights);
  * builds the MTP block (transformers has none) from transformers' own modules, exactly as
    shared/spec/model.md section 3.2 describes, and appends its `mtp.*` tensors to the checkpoint;
  * runs the model in float32 on the CPU with eager attention and the eager (loop) experts and
    saves: ids, prefill logits, incremental (KV/state cache, one token at a time) logits, the
    final-normed hidden state, per-layer residual-stream states, MTP draft logits;
  * reloads every written checkpoint with `from_pretrained` and checks it reproduces the
    reference, so each directory is a valid transformers checkpoint.
Extra copies of the first fixture test loaders only (same reference, other storage): per-expert
expert tensors, bf16 tensors, and a text-only (`model.` prefix, flat config) sharded copy.

Run: python3 tools/make_parity_fixtures.py --out tests/data/parity
Needs torch and transformers (versions in scripts/requirements-tools.txt); CPU only; ~1 minute.
"""

import argparse
import copy
import json
import math
import os
import shutil
import sys

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

import transformers
from transformers import (
    Qwen3_5MoeConfig,
    Qwen3_5MoeForCausalLM,
    Qwen3_5MoeForConditionalGeneration,
    Qwen3_5MoeTextModel,
)
from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe as hf

L, F = "linear_attention", "full_attention"

# Tiny configs. Together they vary every dimension that can vary: layer pattern (irregular,
# full-attention first and last-layer linear, `full_attention_interval` without `layer_types`),
# GQA ratio (2, 4, 2 with odd head counts), GDN value/key head ratio (2, 1, 2) and key vs value
# head dim, partial_rotary_factor (0.25, 0.5, 1.0), rope_theta, rms_norm_eps, vocab, expert
# count / top-k (8/2, 16/4, 4/1), head dims, conv kernel (4, 3), hidden size, sequence lengths.
FIXTURES = [
    dict(
        name="a_h32_l5_gqa2_v2k_p025",
        seed=1001,
        T=96,
        K=70,
        text=dict(
            hidden_size=32,
            num_hidden_layers=5,
            layer_types=[L, F, L, L, F],
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=32,
            linear_num_key_heads=2,
            linear_num_value_heads=4,
            linear_key_head_dim=16,
            linear_value_head_dim=16,
            linear_conv_kernel_dim=4,
            num_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=8,
            shared_expert_intermediate_size=16,
            vocab_size=512,
            rms_norm_eps=1e-6,
            partial_rotary_factor=0.25,
            rope_parameters=dict(
                rope_type="default",
                rope_theta=10000000,
                partial_rotary_factor=0.25,
                mrope_section=[2, 1, 1],
                mrope_interleaved=True,
            ),
        ),
        # Storage copies of this fixture (same reference outputs).
        copies=True,
    ),
    dict(
        name="b_h48_l4_fullfirst_gqa4_v1k_p05",
        seed=2002,
        T=100,
        K=65,
        text=dict(
            hidden_size=48,
            num_hidden_layers=4,
            layer_types=[F, L, F, L],
            num_attention_heads=4,
            num_key_value_heads=1,
            head_dim=16,
            linear_num_key_heads=2,
            linear_num_value_heads=2,
            linear_key_head_dim=16,
            linear_value_head_dim=24,
            linear_conv_kernel_dim=3,
            num_experts=16,
            num_experts_per_tok=4,
            moe_intermediate_size=4,
            shared_expert_intermediate_size=12,
            vocab_size=256,
            rms_norm_eps=1e-5,
            # Deliberately inconsistent, to pin down precedence: HF's rotary embedding reads
            # rope_parameters["partial_rotary_factor"] (0.5 here); the top-level key (0.25) only
            # fills rope_parameters when that key is missing there.
            partial_rotary_factor=0.25,
            rope_parameters=dict(
                rope_type="default",
                rope_theta=1000000,
                partial_rotary_factor=0.5,
                mrope_section=[2, 1, 1],
                mrope_interleaved=True,
            ),
        ),
        copies=False,
    ),
    dict(
        name="c_h40_l4_interval2_gqa2_v2k_p1",
        seed=3003,
        T=90,
        K=66,
        text=dict(
            hidden_size=40,
            num_hidden_layers=4,
            # no layer_types: layer i is full iff (i+1) % 2 == 0  ->  [L, F, L, F]
            full_attention_interval=2,
            num_attention_heads=6,
            num_key_value_heads=3,
            head_dim=16,
            linear_num_key_heads=3,
            linear_num_value_heads=6,
            linear_key_head_dim=8,
            linear_value_head_dim=8,
            linear_conv_kernel_dim=4,
            num_experts=4,
            num_experts_per_tok=1,
            moe_intermediate_size=16,
            shared_expert_intermediate_size=16,
            vocab_size=384,
            rms_norm_eps=1e-6,
            rope_parameters=dict(
                rope_type="default",
                rope_theta=10000000,
                partial_rotary_factor=1.0,
                mrope_section=[3, 3, 2],
                mrope_interleaved=True,
            ),
        ),
        copies=False,
    ),
]

COMMON_TEXT = dict(
    model_type="qwen3_5_moe_text",
    attn_output_gate=True,
    attention_bias=False,
    hidden_act="silu",
    max_position_embeddings=4096,
    mamba_ssm_dtype="float32",
    mtp_num_hidden_layers=1,
    mtp_use_dedicated_embeddings=False,
    tie_word_embeddings=False,
    bos_token_id=None,
    eos_token_id=None,
    pad_token_id=None,
)

TINY_VISION = dict(
    depth=1,
    hidden_size=16,
    intermediate_size=32,
    num_heads=2,
    in_channels=3,
    patch_size=4,
    temporal_patch_size=2,
    spatial_merge_size=2,
    num_position_embeddings=16,
    deepstack_visual_indexes=[],
)

# Router top-k decisions must be robust: the smallest gap between the k-th and (k+1)-th largest
# router logit over all tokens and MoE layers (main and MTP) must exceed this, or the seed is
# bumped. fp32 engines that differ from HF only in summation order agree on router logits to
# ~1e-6, so 1e-4 leaves a wide margin.
MIN_ROUTER_GAP = 1e-4


# --------------------------------------------------------------------------------------------
# Model construction and randomisation
# --------------------------------------------------------------------------------------------


def make_config(fx):
    text = dict(COMMON_TEXT)
    text.update(copy.deepcopy(fx["text"]))
    vision = dict(TINY_VISION, out_hidden_size=text["hidden_size"])
    cfg = Qwen3_5MoeConfig(
        text_config=text,
        vision_config=vision,
        tie_word_embeddings=False,
        attn_implementation="eager",
        experts_implementation="eager",
    )
    return cfg


class MtpBlock(nn.Module):
    """The MTP block of spec section 3.1/3.2, built from transformers' own modules.

    State-dict names (under `mtp.`) are the real checkpoint names: pre_fc_norm_embedding,
    pre_fc_norm_hidden, fc, layers.0.* (a full-attention decoder layer), norm.
    """

    def __init__(self, text_config):
        super().__init__()
        h = text_config.hidden_size
        eps = text_config.rms_norm_eps
        n = text_config.num_hidden_layers
        # The MTP decoder layer is a full-attention layer; give it index n (its cache slot
        # would follow the main layers) in a config copy whose layer_types covers that index.
        mcfg = copy.deepcopy(text_config)
        mcfg.layer_types = list(text_config.layer_types) + [F]
        self.pre_fc_norm_embedding = hf.Qwen3_5MoeRMSNorm(h, eps=eps)
        self.pre_fc_norm_hidden = hf.Qwen3_5MoeRMSNorm(h, eps=eps)
        self.fc = nn.Linear(2 * h, h, bias=False)
        self.layers = nn.ModuleList([hf.Qwen3_5MoeDecoderLayer(mcfg, layer_idx=n)])
        self.norm = hf.Qwen3_5MoeRMSNorm(h, eps=eps)
        self.layer_cfg = mcfg

    def forward(self, embeds, hidden, rotary_emb):
        """embeds: [1, L, H] = embed(x_{p+1}); hidden: [1, L, H] = final-normed target h_p.

        Runs the decoder layer as an ordinary causal full-attention layer over the L shifted
        rows with RoPE positions 0..L-1. Returns the MTP-normed hidden state [1, L, H].
        """
        u = torch.cat([self.pre_fc_norm_embedding(embeds), self.pre_fc_norm_hidden(hidden)], dim=-1)
        u = self.fc(u)
        length = u.shape[1]
        pos = torch.arange(length).view(1, 1, -1).expand(3, 1, -1)
        cos_sin = rotary_emb(u, pos)
        mask = torch.full((length, length), torch.finfo(u.dtype).min).triu(1)[None, None]
        u = self.layers[0](u, position_embeddings=cos_sin, attention_mask=mask, position_ids=pos[0])
        return self.norm(u)


def _normal(t, std, mean=0.0):
    with torch.no_grad():
        t.normal_(mean=mean, std=std)


def randomise(module_root, text_cfg):
    """Gives every parameter a random value with O(1)-activation scales (see README)."""
    H = text_cfg.hidden_size
    for mod in module_root.modules():
        if isinstance(mod, hf.Qwen3_5MoeRMSNorm):
            _normal(mod.weight, 0.1)  # zero-centred: effective scale 1 + w
        elif isinstance(mod, hf.Qwen3_5MoeRMSNormGated):
            _normal(mod.weight, 0.1, mean=1.0)  # plain scale w
        elif isinstance(mod, hf.Qwen3_5MoeGatedDeltaNet):
            nv = mod.num_v_heads
            with torch.no_grad():
                # A in [0.01, 1] and dt_bias ~ N(-1, 0.5): per-token decay exp(g) spans ~0.5..0.999,
                # so some heads carry state across the 64-token chunk boundary.
                mod.A_log.copy_(torch.empty(nv).uniform_(0.01, 1.0).log())
                mod.dt_bias.normal_(mean=-1.0, std=0.5)
                k = mod.conv1d.weight.shape[-1]
                mod.conv1d.weight.normal_(0.0, 1.0 / math.sqrt(k))
        elif isinstance(mod, hf.Qwen3_5MoeExperts):
            _normal(mod.gate_up_proj, 1.0 / math.sqrt(mod.hidden_dim))
            _normal(mod.down_proj, 1.0 / math.sqrt(mod.intermediate_dim))
        elif isinstance(mod, hf.Qwen3_5MoeTopKRouter):
            _normal(mod.weight, 2.0 / math.sqrt(H))
        elif isinstance(mod, nn.Embedding):
            _normal(mod.weight, 1.0)
        elif isinstance(mod, nn.Linear):
            fan_in = mod.weight.shape[1]
            _normal(mod.weight, 1.0 / math.sqrt(fan_in))
            if mod.bias is not None:
                _normal(mod.bias, 0.02)
        elif isinstance(mod, nn.LayerNorm):
            _normal(mod.weight, 0.1, mean=1.0)
            _normal(mod.bias, 0.02)
        elif isinstance(mod, nn.Conv3d):
            _normal(mod.weight, 0.1)
            _normal(mod.bias, 0.02)
    # lm_head: logits std ~ 2 for a unit-RMS final hidden state.
    if hasattr(module_root, "lm_head"):
        _normal(module_root.lm_head.weight, 2.0 / math.sqrt(H))
    # Anything the loop above missed would keep its default init: fail loudly instead.
    for name, p in module_root.named_parameters():
        if float(p.detach().std()) == 0.0 and p.numel() > 1:
            raise RuntimeError(f"parameter {name} not randomised")


def round_to_bf16(module_root):
    with torch.no_grad():
        for p in module_root.parameters():
            p.copy_(p.to(torch.bfloat16).to(torch.float32))


# --------------------------------------------------------------------------------------------
# Reference computation
# --------------------------------------------------------------------------------------------


class Probe:
    """Forward hooks: router top-k gaps, GDN decay statistics, per-layer residual states."""

    def __init__(self, model, mtp):
        self.gaps = []
        self.decays = []
        self.layer_out = []
        self.handles = []
        lm = model.model.language_model
        routers = [m for m in list(model.modules()) + list(mtp.modules()) if isinstance(m, hf.Qwen3_5MoeTopKRouter)]
        for r in routers:
            self.handles.append(r.register_forward_hook(self._router_hook))
        for m in lm.modules():
            if isinstance(m, hf.Qwen3_5MoeGatedDeltaNet):
                self.handles.append(m.in_proj_a.register_forward_hook(self._make_decay_hook(m)))
        self.handles.append(lm.layers[0].register_forward_pre_hook(self._embed_hook, with_kwargs=True))
        for layer in lm.layers:
            self.handles.append(layer.register_forward_hook(self._layer_hook))
        self.record_layers = False

    def _router_hook(self, mod, inp, out):
        logits = out[0].detach().float()
        top = torch.topk(logits, mod.top_k + 1, dim=-1).values
        self.gaps.append(float((top[:, mod.top_k - 1] - top[:, mod.top_k]).min()))

    def _make_decay_hook(self, gdn):
        def hook(mod, inp, out):
            g = -gdn.A_log.float().exp() * torch.nn.functional.softplus(out.float() + gdn.dt_bias)
            self.decays.append(g.exp().detach().flatten())

        return hook

    def _embed_hook(self, mod, args, kwargs):
        if self.record_layers:
            x = args[0] if args else kwargs["hidden_states"]
            self.layer_out.append(x.detach().clone())

    def _layer_hook(self, mod, inp, out):
        if self.record_layers:
            o = out[0] if isinstance(out, tuple) else out
            self.layer_out.append(o.detach().clone())

    def close(self):
        for h in self.handles:
            h.remove()


@torch.no_grad()
def mtp_via_text_model(mtp, embeds, hidden):
    tcfg = copy.deepcopy(mtp.layer_cfg)
    tcfg.num_hidden_layers = 1
    tcfg.layer_types = [F]
    tm = Qwen3_5MoeTextModel(tcfg).float().eval()
    sd = {f"layers.0.{k}": v for k, v in mtp.layers[0].state_dict().items()}
    sd["norm.weight"] = mtp.norm.weight.detach()
    sd["embed_tokens.weight"] = tm.embed_tokens.weight.detach()
    tm.load_state_dict(sd, strict=True)
    u = torch.cat([mtp.pre_fc_norm_embedding(embeds), mtp.pre_fc_norm_hidden(hidden)], dim=-1)
    return tm(inputs_embeds=mtp.fc(u), use_cache=False).last_hidden_state


@torch.no_grad()
def compute_reference(model, mtp, ids, K):
    lm = model.model.language_model
    T = ids.shape[0]
    x = ids.view(1, T)
    probe = Probe(model, mtp)

    # One forward over all T tokens (no cache): the prefill reference.
    probe.record_layers = True
    hidden = model.model(input_ids=x, use_cache=False).last_hidden_state  # [1, T, H], final-normed
    probe.record_layers = False
    logits = model.lm_head(hidden)
    logits_full = model(input_ids=x, use_cache=False).logits
    assert torch.equal(logits, logits_full), "lm_head(last_hidden_state) != model(...).logits"
    layers = torch.cat(probe.layer_out, dim=0)  # [num_layers + 1, T, H]

    # Prefill ids[0:K] with the cache, then one token at a time.
    out = model(input_ids=x[:, :K], use_cache=True)
    cache = out.past_key_values
    rows = [out.logits[0, -1]]
    for t in range(K, T):
        out = model(input_ids=x[:, t : t + 1], past_key_values=cache, use_cache=True)
        cache = out.past_key_values
        rows.append(out.logits[0, -1])
    incremental = torch.stack(rows)  # [T-K+1, V], positions K-1..T-1

    # Self-check only: prefill ids[0:K], then ids[K:T] as one multi-token cached step (the
    # chunked kernel with an initial state and a conv window from the cache).
    gaps = list(probe.gaps)
    out = model(input_ids=x[:, :K], use_cache=True)
    out2 = model(input_ids=x[:, K:], past_key_values=out.past_key_values, use_cache=True)
    continued = torch.cat([out.logits[0, -1:], out2.logits[0]], dim=0)

    # MTP: row p (0..T-2) takes h_p and x_{p+1}; predicts x_{p+2}.
    embeds = lm.embed_tokens(x[:, 1:])
    mtp_hidden = mtp(embeds, hidden[:, :-1], lm.rotary_emb)
    mtp_logits = model.lm_head(mtp_hidden)
    gaps += probe.gaps[-len(mtp.layers):]
    # Causality self-check: the first K MTP rows do not depend on later rows.
    head = mtp(embeds[:, :K], hidden[:, :K], lm.rotary_emb)
    mtp_causal = float((head - mtp_hidden[:, :K]).abs().max())
    # Cross-check of the MTP wiring (mask, positions) with transformers' own text model: a
    # one-layer full-attention Qwen3_5MoeTextModel holding the MTP layer and mtp.norm, fed
    # inputs_embeds = fc(concat(norm_e(e), norm_h(h))).
    mtp_alt = float((mtp_via_text_model(mtp, embeds, hidden[:, :-1]) - mtp_hidden).abs().max())

    decays = torch.cat(probe.decays)
    stats = dict(
        min_router_logit_gap=min(gaps),
        decay_min=float(decays.min()),
        decay_median=float(decays.median()),
        decay_max=float(decays.max()),
        mtp_causal_check=mtp_causal,
        mtp_text_model_check=mtp_alt,
    )
    for key in ("logits", "incremental", "mtp_logits"):
        v = {"logits": logits, "incremental": incremental, "mtp_logits": mtp_logits}[key]
        assert torch.isfinite(v).all(), f"non-finite {key}"
    assert 1.0 <= float(logits.std()) <= 5.0, f"logits std {float(logits.std())} outside [1, 5]"
    assert mtp_causal < 1e-5 and mtp_alt < 1e-5, (mtp_causal, mtp_alt)
    probe.close()
    return dict(
        logits_prefill=logits[0],
        hidden_final=hidden[0],
        hidden_layers=layers,
        logits_incremental=incremental,
        logits_continued=continued,
        mtp_logits=mtp_logits[0],
        mtp_hidden_final=mtp_hidden[0],
        stats=stats,
    )


# --------------------------------------------------------------------------------------------
# Writing checkpoints
# --------------------------------------------------------------------------------------------


def split_experts(sd):
    """Fused 3-D experts -> per-expert `experts.{e}.{gate,up,down}_proj.weight`."""
    out = {}
    for k, v in sd.items():
        if k.endswith("mlp.experts.gate_up_proj"):
            base = k[: -len("gate_up_proj")]
            inter = v.shape[1] // 2
            for e in range(v.shape[0]):
                out[f"{base}{e}.gate_proj.weight"] = v[e, :inter].contiguous()
                out[f"{base}{e}.up_proj.weight"] = v[e, inter:].contiguous()
        elif k.endswith("mlp.experts.down_proj"):
            base = k[: -len("down_proj")]
            for e in range(v.shape[0]):
                out[f"{base}{e}.down_proj.weight"] = v[e].contiguous()
        else:
            out[k] = v
    return out


def mtp_state_dict(mtp, per_expert=False):
    sd = {f"mtp.{k}": v.detach().clone().contiguous() for k, v in mtp.state_dict().items()}
    return split_experts(sd) if per_expert else sd


def read_dir_tensors(d):
    """name -> (file, tensor) for every safetensors file in d."""
    out = {}
    for fn in sorted(os.listdir(d)):
        if fn.endswith(".safetensors"):
            with safe_open(os.path.join(d, fn), "pt") as f:
                for k in f.keys():
                    out[k] = (fn, f.get_tensor(k))
    return out


def add_tensors(d, extra):
    """Appends `extra` (name -> tensor) to the last safetensors file of d; updates the index."""
    files = sorted(fn for fn in os.listdir(d) if fn.endswith(".safetensors"))
    target = files[-1]
    path = os.path.join(d, target)
    with safe_open(path, "pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
        meta = f.metadata() or {"format": "pt"}
    clash = set(tensors) & set(extra)
    assert not clash, clash
    tensors.update(extra)
    save_file(tensors, path, metadata=meta)
    index_path = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(index_path):
        with open(index_path) as f:
            index = json.load(f)
        for k, v in extra.items():
            index["weight_map"][k] = target
            meta = index["metadata"]
            meta["total_size"] = meta.get("total_size", 0) + v.numel() * v.element_size()
            if "total_parameters" in meta:
                meta["total_parameters"] += v.numel()
        index["weight_map"] = dict(sorted(index["weight_map"].items()))
        with open(index_path, "w") as f:
            json.dump(index, f, indent=2)
            f.write("\n")


def edit_config(d, fn):
    path = os.path.join(d, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    fn(cfg)
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


def text_cfg_fixups(fx):
    """Config edits that save_pretrained cannot express (keys HF consumes at construction)."""

    def fix(tc):
        if "full_attention_interval" in fx["text"]:
            tc.pop("layer_types", None)
            tc["full_attention_interval"] = fx["text"]["full_attention_interval"]
        if "partial_rotary_factor" not in fx["text"]:
            tc.pop("partial_rotary_factor", None)  # only rope_parameters carries it

    return fix


def save_base(model, mtp, d, fx, per_expert):
    model.save_pretrained(d, save_original_format=per_expert)
    saved = read_dir_tensors(d)
    has_fused = any(k.endswith("experts.gate_up_proj") for k in saved)
    has_split = any(".experts.0.gate_proj.weight" in k for k in saved)
    assert has_split == per_expert and has_fused != per_expert, (per_expert, has_fused, has_split)
    add_tensors(d, mtp_state_dict(mtp, per_expert=per_expert))
    edit_config(d, lambda c: text_cfg_fixups(fx)(c["text_config"]))


def save_bf16(src_dir, d):
    """Every tensor BF16 except linear_attn.A_log and linear_attn.norm.weight (F32), as released."""
    os.makedirs(d, exist_ok=True)
    tensors = {}
    for k, (_, v) in read_dir_tensors(src_dir).items():
        keep_f32 = k.endswith("linear_attn.A_log") or k.endswith("linear_attn.norm.weight")
        tensors[k] = v if keep_f32 else v.to(torch.bfloat16)
        assert torch.equal(tensors[k].float(), v), f"{k} is not bf16-representable"
    save_file(tensors, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    for fn in ("config.json", "generation_config.json"):
        shutil.copy(os.path.join(src_dir, fn), os.path.join(d, fn))
    edit_config(d, lambda c: c.update(dtype="bfloat16"))


def save_text_only(model, mtp, d, fx, total_bytes):
    """`model.` prefix, flat `qwen3_5_moe_text` config, no visual tensors, 3 shards + index."""
    tcfg = copy.deepcopy(model.config.text_config)
    tcfg.architectures = ["Qwen3_5MoeForCausalLM"]
    text_model = Qwen3_5MoeForCausalLM(tcfg).eval()
    sd = {}
    for k, v in model.state_dict().items():
        if k.startswith("model.visual."):
            continue
        sd[k.replace("model.language_model.", "model.")] = v
    text_model.load_state_dict(sd, strict=True)
    # HF packs whole tensors greedily, so a limit of half the size gives 3 shards here.
    shard = total_bytes // 2 + 1
    text_model.save_pretrained(d, save_original_format=False, max_shard_size=shard)
    files = [fn for fn in os.listdir(d) if fn.endswith(".safetensors")]
    assert 2 <= len(files) <= 3, files
    add_tensors(d, mtp_state_dict(mtp))
    edit_config(d, text_cfg_fixups(fx))


# --------------------------------------------------------------------------------------------
# Reload checks
# --------------------------------------------------------------------------------------------


@torch.no_grad()
def reload_logits(d, cls, ids):
    m = cls.from_pretrained(
        d, dtype=torch.float32, attn_implementation="eager", experts_implementation="eager"
    ).eval()
    return m(input_ids=ids.view(1, -1), use_cache=False).logits[0]


def check_mtp_tensors(d, mtp, per_expert):
    saved = read_dir_tensors(d)
    want = mtp_state_dict(mtp, per_expert=per_expert)
    got = {k: v for k, (_, v) in saved.items() if k.startswith("mtp.")}
    assert set(got) == set(want), set(got) ^ set(want)
    for k in want:
        assert torch.equal(got[k].float(), want[k]), k


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


REF_FILES = {
    "logits_prefill": "f32 [T, V]: one forward over ids[0:T]",
    "logits_incremental": "f32 [T-K+1, V]: positions K-1..T-1; prefill ids[0:K] with the cache, then one token at a time",
    "hidden_final": "f32 [T, H]: final-normed hidden state (lm_head input; the MTP's h_p)",
    "hidden_layers": "f32 [num_hidden_layers+1, T, H]: residual stream: embeddings, then each decoder layer's output (before the final norm)",
    "mtp_logits": "f32 [T-1, V]: row p = MTP draft logits for token p+2 from h_p and ids[p+1] at RoPE position p",
    "mtp_hidden_final": "f32 [T-1, H]: mtp.norm output of row p (lm_head input of the draft)",
}


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


def dir_bytes(d):
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))


def ckpt_bytes(d):
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if f.endswith(".safetensors"))


def config_summary(model):
    tc = model.config.text_config
    keys = [
        "hidden_size", "num_hidden_layers", "layer_types", "num_attention_heads",
        "num_key_value_heads", "head_dim", "linear_num_key_heads", "linear_num_value_heads",
        "linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel_dim", "num_experts",
        "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size",
        "vocab_size", "rms_norm_eps", "rope_parameters",
    ]
    s = {k: getattr(tc, k) for k in keys}
    s["rotary_dim"] = int(tc.head_dim * tc.rope_parameters["partial_rotary_factor"])
    return s


def build(fx):
    seed = fx["seed"]
    for attempt in range(20):
        torch.manual_seed(seed)
        cfg = make_config(fx)
        model = Qwen3_5MoeForConditionalGeneration(cfg).float().eval()
        mtp = MtpBlock(model.config.text_config).float().eval()
        randomise(model, cfg.text_config)
        randomise(mtp, cfg.text_config)
        round_to_bf16(model)
        round_to_bf16(mtp)
        gen = torch.Generator().manual_seed(seed + 7)
        ids = torch.randint(0, cfg.text_config.vocab_size, (fx["T"],), generator=gen, dtype=torch.int64)
        ref = compute_reference(model, mtp, ids, fx["K"])
        if ref["stats"]["min_router_logit_gap"] >= MIN_ROUTER_GAP:
            return seed, model, mtp, ids, ref
        print(f"  {fx['name']}: seed {seed} min router gap {ref['stats']['min_router_logit_gap']:.2e}, retrying")
        seed += 1
    raise RuntimeError("no seed with robust routing")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tests/data/parity")
    args = ap.parse_args()
    torch.set_num_threads(min(8, os.cpu_count() or 1))
    torch.use_deterministic_algorithms(True)
    if os.path.isdir(args.out):
        shutil.rmtree(args.out)
    os.makedirs(args.out)

    table = []
    for fx in FIXTURES:
        seed, model, mtp, ids, ref = build(fx)
        T, K = fx["T"], fx["K"]
        name = fx["name"]
        d = os.path.join(args.out, name)
        save_base(model, mtp, d, fx, per_expert=False)

        prefill = ref["logits_prefill"]
        overlap = prefill[K - 1 :]
        d_inc = float((overlap - ref["logits_incremental"]).abs().max())
        d_cont = float((overlap - ref["logits_continued"]).abs().max())
        reloaded = reload_logits(d, Qwen3_5MoeForConditionalGeneration, ids)
        d_reload = float((reloaded - prefill).abs().max())
        check_mtp_tensors(d, mtp, per_expert=False)

        np.save(os.path.join(d, "ids.npy"), ids.numpy().astype("<i8"))
        for key in REF_FILES:
            np.save(os.path.join(d, f"{key}.npy"), np.ascontiguousarray(ref[key].numpy().astype("<f4")))
        summary = config_summary(model)
        summary["layer_types_in_config_json"] = "full_attention_interval" not in fx["text"]
        reference = {
            "refs_dir": ".",
            "variant": "base",
            "expert_layout": "fused",
            "weights_dtype": "float32",
            "tensor_prefix": "model.language_model.",
            "ids_file": "ids.npy",
            "num_tokens": T,
            "incremental_from": K,
            "files": {key: f"{key}.npy" for key in REF_FILES},
            "file_contents": REF_FILES,
            "seed": seed,
            "transformers_version": transformers.__version__,
            "torch_version": torch.__version__,
            "compute": "float32, CPU, eager attention, eager experts; every parameter bf16-representable",
            "self_check": {
                "max_abs_prefill_minus_incremental": d_inc,
                "max_abs_prefill_minus_chunked_continuation": d_cont,
                "max_abs_reload_minus_reference": d_reload,
            },
            "stats": {
                **ref["stats"],
                "logits_std": float(prefill.std()),
                "logits_absmax": float(prefill.abs().max()),
                "mtp_logits_std": float(ref["mtp_logits"].std()),
                "residual_rms_last_layer": float(ref["hidden_layers"][-1].pow(2).mean().sqrt()),
            },
            "config_summary": summary,
        }
        write_json(os.path.join(d, "reference.json"), reference)
        table.append((name, "base (fused, f32)", ckpt_bytes(d), dir_bytes(d), reference["stats"], d_inc, d_cont, d_reload))

        if not fx["copies"]:
            continue

        def finish_copy(cd, cls, storage, **changes):
            dr = float((reload_logits(cd, cls, ids) - prefill).abs().max())
            r = dict(reference, refs_dir=f"../{name}", **changes)
            r["self_check"] = dict(reference["self_check"], max_abs_reload_minus_reference=dr)
            write_json(os.path.join(cd, "reference.json"), r)
            table.append((os.path.basename(cd), storage, ckpt_bytes(cd), dir_bytes(cd), None, None, None, dr))

        # (a) per-expert experts: what save_pretrained writes by default (save_original_format).
        cd = f"{d}__per_expert"
        save_base(model, mtp, cd, fx, per_expert=True)
        check_mtp_tensors(cd, mtp, per_expert=True)
        finish_copy(cd, Qwen3_5MoeForConditionalGeneration, "per-expert, f32",
                    variant="per_expert", expert_layout="per_expert")

        # (b) bf16 tensors (A_log and the GDN norm weight stay F32).
        cd = f"{d}__bf16"
        save_bf16(d, cd)
        check_mtp_tensors(cd, mtp, per_expert=False)
        finish_copy(cd, Qwen3_5MoeForConditionalGeneration, "fused, bf16", variant="bf16",
                    weights_dtype="bfloat16 (linear_attn.A_log, linear_attn.norm.weight: float32)")

        # (c) text-only: `model.` prefix, flat config, no visual tensors, sharded.
        cd = f"{d}__text_sharded"
        text_bytes = sum(v.numel() * 4 for k, v in model.state_dict().items() if not k.startswith("model.visual."))
        save_text_only(model, mtp, cd, fx, text_bytes)
        check_mtp_tensors(cd, mtp, per_expert=False)
        finish_copy(cd, Qwen3_5MoeForCausalLM, "text-only, 3 shards, f32",
                    variant="text_only_sharded", tensor_prefix="model.")

    print()
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    hdr = f"{'fixture':44s} {'storage':26s} {'ckpt KB':>8s} {'dir KB':>7s} {'logit std':>9s} {'|logit|max':>10s} {'router gap':>10s} {'decay med':>9s} {'|pre-inc|':>9s} {'|pre-cont|':>10s} {'|reload|':>9s}"
    print(hdr)
    print("-" * len(hdr))
    total = 0
    for name, storage, cb, db, st, di, dc, dr in table:
        total += db
        if st is None:
            print(f"{name:44s} {storage:26s} {cb / 1024:8.0f} {db / 1024:7.0f} {'(same reference as its base)':>61s} {dr:9.1e}")
        else:
            print(
                f"{name:44s} {storage:26s} {cb / 1024:8.0f} {db / 1024:7.0f} {st['logits_std']:9.2f} {st['logits_absmax']:10.2f}"
                f" {st['min_router_logit_gap']:10.1e} {st['decay_median']:9.3f} {di:9.1e} {dc:10.1e} {dr:9.1e}"
            )
    print(f"total {total / 1024:.0f} KB in {args.out}")
    bad = [t for t in table if (t[5] is not None and (t[5] > 1e-4 or t[6] > 1e-4)) or t[7] > 1e-5]
    if bad:
        print("FAILED self-checks:", [t[0] for t in bad])
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
