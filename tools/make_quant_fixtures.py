#!/usr/bin/env python3
"""Tiny quantised Qwen3.5/3.6-MoE checkpoints in each published low-bit format, with the
reference libraries' dequantised weights.

    /work/venv-quant/bin/python tools/make_quant_fixtures.py --out tests/data/quant

Per fixture directory (tests/model/quant_formats_test.cpp reads them):
  config.json            flat `qwen3_5_moe_text` config (2 layers: GDN + full attention, 4 experts,
                         MTP) with the format's `quantization_config`
  model.safetensors      the quantised checkpoint: main-model linears low-bit, per-expert names;
                         embeddings, lm_head, router, shared-expert gate, GDN in_proj_a/b and the
                         whole MTP block (fused 3-D experts) BF16 — a BF16 MTP beside low-bit experts
  dense/                 the same model with every quantised linear replaced by the reference
                         library's dequantisation in F32 (no quantization_config)
Fixtures:
  ct_int4      compressed-tensors pack-quantized: experts/shared expert INT4 group 16 symmetric,
               attention + GDN linears INT4 group 32 asymmetric (a second config group).
               Quantised, packed and dequantised by compressed-tensors itself.
  ct_nvfp4     compressed-tensors nvfp4-pack-quantized (global scale divides), by compressed-tensors.
  modelopt_nvfp4  ModelOpt MIXED_PRECISION: experts + shared expert W4A16_NVFP4, GDN linears NVFP4,
               attention FP8 per tensor; quantised and dequantised by nvidia-modelopt's
               NVFP4QTensor (CPU), FP8 dequantised as fp8 · weight_scale.
  autoround_int4  AutoRound auto_round:auto_gptq: bits 4 group 16 sym; extra_config makes the
               shared experts 16-bit and the attention linears 8-bit group 32 asymmetric;
               block_name_to_quantize leaves MTP out.
  gptq_act_order  GPTQ v1, bits 4 group 16 asym, desc_act true (a random g_idx per module).
The GPTQ/AutoRound packing (qweight [in/8, out] packed along the input, qzeros [groups, out/8]
holding zero − 1, fp16 scales [groups, out]) is written here from the format's published
definition (auto-gptq / GPTQModel "gptq" v1 checkpoints; spec §4.3) in numpy, and checked
against auto-round's own packer (auto_round.export...qlinear_triton_act.QuantLinear.pack) when
that imports; the dequantisation reference is (q − (z + 1)) · s in float32.
Deterministic (seeded). Versions used for the committed files are printed into
tests/data/quant/VERSIONS.txt.
"""
import argparse
import json
import os
import shutil

import numpy as np
import torch
from safetensors.torch import save_file

H, D, NH, NKV = 32, 32, 2, 1
NK, NV, DK, DV, CONV = 2, 4, 16, 16, 4
E, TOPK, I, IS, V = 4, 2, 32, 32, 256
LAYERS = ["linear_attention", "full_attention"]


def text_config():
    return {
        "architectures": ["Qwen3_5MoeForCausalLM"], "model_type": "qwen3_5_moe_text", "dtype": "bfloat16",
        "attention_bias": False, "attn_output_gate": True, "head_dim": D, "hidden_act": "silu",
        "hidden_size": H, "layer_types": LAYERS, "linear_conv_kernel_dim": CONV, "linear_key_head_dim": DK,
        "linear_num_key_heads": NK, "linear_num_value_heads": NV, "linear_value_head_dim": DV,
        "max_position_embeddings": 4096, "moe_intermediate_size": I, "mtp_num_hidden_layers": 1,
        "num_attention_heads": NH, "num_experts": E, "num_experts_per_tok": TOPK,
        "num_hidden_layers": len(LAYERS), "num_key_value_heads": NKV, "rms_norm_eps": 1e-6,
        "partial_rotary_factor": 0.25,
        "rope_parameters": {"mrope_interleaved": True, "mrope_section": [2, 1, 1], "partial_rotary_factor": 0.25,
                            "rope_theta": 10000000, "rope_type": "default"},
        "shared_expert_intermediate_size": IS, "tie_word_embeddings": False, "vocab_size": V,
    }


def bf16(t):
    return t.to(torch.bfloat16)


def make_dense(seed):
    """name -> BF16 tensor (A_log and the GDN norm F32), per-expert names in the main model,
    fused experts in MTP. Linear weights are returned in a separate dict keyed by module."""
    g = torch.Generator().manual_seed(seed)

    def lin(o, i):
        return bf16(torch.randn(o, i, generator=g) / i ** 0.5)

    def vec(n, s=0.1):
        return bf16(torch.randn(n, generator=g) * s)

    t, linears = {}, {}
    t["model.embed_tokens.weight"] = bf16(torch.randn(V, H, generator=g))
    t["lm_head.weight"] = lin(V, H)
    t["model.norm.weight"] = vec(H)

    def layer(p, kind, fused):
        t[p + "input_layernorm.weight"] = vec(H)
        t[p + "post_attention_layernorm.weight"] = vec(H)
        if kind == "full_attention":
            linears[p + "self_attn.q_proj"] = lin(2 * NH * D, H)
            linears[p + "self_attn.k_proj"] = lin(NKV * D, H)
            linears[p + "self_attn.v_proj"] = lin(NKV * D, H)
            linears[p + "self_attn.o_proj"] = lin(H, NH * D)
            t[p + "self_attn.q_norm.weight"] = vec(D)
            t[p + "self_attn.k_norm.weight"] = vec(D)
        else:
            cd = 2 * NK * DK + NV * DV
            linears[p + "linear_attn.in_proj_qkv"] = lin(cd, H)
            linears[p + "linear_attn.in_proj_z"] = lin(NV * DV, H)
            linears[p + "linear_attn.in_proj_a"] = lin(NV, H)
            linears[p + "linear_attn.in_proj_b"] = lin(NV, H)
            linears[p + "linear_attn.out_proj"] = lin(H, NV * DV)
            t[p + "linear_attn.conv1d.weight"] = bf16(torch.randn(cd, 1, CONV, generator=g) * 0.5)
            t[p + "linear_attn.A_log"] = torch.log(torch.rand(NV, generator=g) * 15 + 1).to(torch.float32)
            t[p + "linear_attn.dt_bias"] = vec(NV, 0.5)
            t[p + "linear_attn.norm.weight"] = (1 + torch.randn(DV, generator=g) * 0.1).to(torch.float32)
        linears[p + "mlp.gate"] = lin(E, H)
        linears[p + "mlp.shared_expert_gate"] = lin(1, H)
        for n, (o, i) in {"gate_proj": (IS, H), "up_proj": (IS, H), "down_proj": (H, IS)}.items():
            linears[p + f"mlp.shared_expert.{n}"] = lin(o, i)
        if fused:
            t[p + "mlp.experts.gate_up_proj"] = bf16(torch.randn(E, 2 * I, H, generator=g) / H ** 0.5)
            t[p + "mlp.experts.down_proj"] = bf16(torch.randn(E, H, I, generator=g) / I ** 0.5)
        else:
            for e in range(E):
                for n, (o, i) in {"gate_proj": (I, H), "up_proj": (I, H), "down_proj": (H, I)}.items():
                    linears[p + f"mlp.experts.{e}.{n}"] = lin(o, i)

    for li, kind in enumerate(LAYERS):
        layer(f"model.layers.{li}.", kind, fused=False)
    t["mtp.pre_fc_norm_embedding.weight"] = vec(H)
    t["mtp.pre_fc_norm_hidden.weight"] = vec(H)
    t["mtp.norm.weight"] = vec(H)
    linears["mtp.fc"] = lin(H, 2 * H)
    layer("mtp.layers.0.", "full_attention", fused=True)
    return t, linears


KEEP = ("mlp.gate", "mlp.shared_expert_gate", "linear_attn.in_proj_a", "linear_attn.in_proj_b")


def quantised(module):
    return module.startswith("model.layers.") and not module.endswith(KEEP)


def is_attention(m):
    return ".self_attn." in m or ".linear_attn." in m


# ---------------------------------------------------------------- compressed-tensors
def ct_args(**kw):
    from compressed_tensors.quantization import QuantizationArgs
    return QuantizationArgs(**kw)


def ct_int(w, args):
    from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
    from compressed_tensors.quantization import QuantizationScheme
    from compressed_tensors.quantization.utils.helpers import compute_dynamic_scales_and_zp
    scale, zp = compute_dynamic_scales_and_zp(w, args, None)
    scheme = QuantizationScheme(targets=["Linear"], weights=args)
    sd = {"weight": w, "weight_scale": scale.to(w.dtype), "weight_zero_point": zp}
    comp = PackedQuantizationCompressor.compress(sd, scheme)
    # Reference dequantisation: the library's own decompress, fed float32 scales so that the
    # products are exact (with the checkpoint's bf16 scales it rounds them to bf16).
    dsd = dict(comp)
    dsd["weight_scale"] = comp["weight_scale"].to(torch.float32)
    ref = PackedQuantizationCompressor.decompress(dsd, scheme)["weight"].to(torch.float32)
    native = PackedQuantizationCompressor.decompress(dict(comp), scheme)["weight"]
    assert torch.equal(ref.to(native.dtype), native), "bf16 rounding of the exact dequant differs"
    return comp, ref


def ct_nvfp4(w, args):
    from compressed_tensors.compressors.nvfp4.base import NVFP4PackedCompressor
    from compressed_tensors.compressors.nvfp4.helpers import unpack_fp4_from_uint8
    from compressed_tensors.quantization import QuantizationScheme
    from compressed_tensors.quantization.lifecycle.forward import dequantize
    from compressed_tensors.quantization.utils.helpers import compute_dynamic_scales_and_zp, generate_gparam
    wf = w.to(torch.float32)
    gscale = generate_gparam(wf.min(), wf.max())
    scale, _ = compute_dynamic_scales_and_zp(wf, args, None, global_scale=gscale)
    scheme = QuantizationScheme(targets=["Linear"], weights=args)
    comp = NVFP4PackedCompressor.compress({"weight": w, "weight_scale": scale, "weight_global_scale": gscale}, scheme)
    m, n = comp["weight_packed"].shape
    q = unpack_fp4_from_uint8(comp["weight_packed"], m, n * 2, dtype=torch.float32)
    ref = dequantize(q, comp["weight_scale"].to(torch.float32), args=args, global_scale=comp["weight_global_scale"],
                     dtype=torch.float32)
    native = NVFP4PackedCompressor.decompress(dict(comp), scheme)["weight"]
    assert torch.equal(ref.to(native.dtype), native), "bf16 rounding of the exact NVFP4 dequant differs"
    return comp, ref


def ct_fixture(kind):
    from compressed_tensors.quantization import QuantizationScheme  # noqa: F401 (import check)
    dense, linears = make_dense(11 if kind == "int4" else 12)
    if kind == "int4":
        expert_args = ct_args(num_bits=4, type="int", symmetric=True, strategy="group", group_size=16)
        attn_args = ct_args(num_bits=4, type="int", symmetric=False, strategy="group", group_size=32)
        groups = {"group_0": (["re:.*mlp\\.(experts|shared_expert)\\..*"], expert_args),
                  "group_1": (["re:.*(self_attn|linear_attn)\\..*"], attn_args)}
        fmt = "pack-quantized"
    else:
        a = ct_args(num_bits=4, type="float", symmetric=True, strategy="tensor_group", group_size=16,
                    scale_dtype=torch.float8_e4m3fn)
        groups = {"group_0": (["Linear"], a)}
        fmt = "nvfp4-pack-quantized"
    ignore = ["lm_head", "re:.*mlp\\.gate$", "re:.*shared_expert_gate$", "re:.*in_proj_[ab]$", "re:^mtp\\..*"]
    tensors, deq = dict(dense), {}
    for m, w in linears.items():
        if not quantised(m):
            tensors[m + ".weight"] = w
            deq[m + ".weight"] = w
            continue
        args = groups["group_1"][1] if kind == "int4" and is_attention(m) else groups["group_0"][1]
        comp, ref = ct_int(w, args) if kind == "int4" else ct_nvfp4(w, args)
        for k, v in comp.items():
            tensors[f"{m}.{k}"] = v.contiguous()
        deq[m + ".weight"] = ref
    qc = {"quant_method": "compressed-tensors", "format": fmt, "quantization_status": "compressed",
          "config_groups": {n: {"targets": t, "weights": json.loads(a.model_dump_json()),
                                "input_activations": None, "output_activations": None, "format": fmt}
                            for n, (t, a) in groups.items()},
          "ignore": ignore, "kv_cache_scheme": None, "sparsity_config": {}}
    return tensors, deq, qc


# ---------------------------------------------------------------- ModelOpt
def modelopt_fixture():
    from modelopt.torch.quantization.qtensor.nvfp4_tensor import NVFP4QTensor
    dense, linears = make_dense(13)
    tensors, deq, layers = dict(dense), {}, {}
    for m, w in linears.items():
        if not quantised(m):
            tensors[m + ".weight"] = w
            deq[m + ".weight"] = w
            continue
        if ".self_attn." in m:
            amax = w.float().abs().max()
            s = (amax / 448.0).to(torch.float32)
            q = (w.float() / s).clamp(-448, 448).to(torch.float8_e4m3fn)
            tensors[m + ".weight"] = q
            tensors[m + ".weight_scale"] = s.reshape([])
            tensors[m + ".input_scale"] = torch.tensor(0.02, dtype=torch.float32)
            deq[m + ".weight"] = q.to(torch.float32) * s
            layers[m] = {"quant_algo": "FP8"}
            continue
        qt, scale, scale2 = NVFP4QTensor.quantize(w, 16)
        packed = qt._quantized_data
        tensors[m + ".weight"] = packed
        tensors[m + ".weight_scale"] = scale
        tensors[m + ".weight_scale_2"] = scale2.reshape([]).to(torch.float32)
        tensors[m + ".input_scale"] = torch.tensor(0.05, dtype=torch.float32)
        deq[m + ".weight"] = qt.dequantize(dtype=torch.float32, scale=scale, double_scale=scale2,
                                           block_sizes={-1: 16}).to(torch.float32)
        layers[m] = {"quant_algo": "W4A16_NVFP4" if ".mlp." in m else "NVFP4", "group_size": 16}
    qc = {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION", "kv_cache_quant_algo": None,
          "exclude_modules": ["lm_head", "mtp*", "*mlp.gate", "*shared_expert_gate", "*in_proj_a", "*in_proj_b"],
          "quantized_layers": layers, "producer": {"name": "modelopt"}}
    return tensors, deq, qc


# ---------------------------------------------------------------- GPTQ / AutoRound
def gptq_quantise(w, bits, group, sym, g_idx=None):
    """Round-to-nearest GPTQ-style: per (group, output) scale/zero over the inputs of the group.
    Returns codes [in, out] (uint), scales [groups, out] fp16, zeros [groups, out] (the real zero)."""
    wf = w.to(torch.float32).T.contiguous().numpy()  # [in, out]
    n_in, n_out = wf.shape
    groups = (n_in + group - 1) // group
    if g_idx is None:
        g_idx = np.arange(n_in) // group
    maxq = 2 ** bits - 1
    scales = np.zeros((groups, n_out), np.float16)
    zeros = np.zeros((groups, n_out), np.int64)
    codes = np.zeros((n_in, n_out), np.int64)
    for gi in range(groups):
        rows = np.nonzero(g_idx == gi)[0]
        x = wf[rows]
        xmin, xmax = np.minimum(x.min(0), 0), np.maximum(x.max(0), 0)
        if sym:
            amax = np.maximum(np.abs(xmin), xmax)
            s = (2 * amax / maxq).astype(np.float16)
            z = np.full(n_out, (maxq + 1) // 2)
        else:
            s = ((xmax - xmin) / maxq).astype(np.float16)
            z = np.clip(np.round(-xmin / np.where(s == 0, 1, s.astype(np.float32))), 0, maxq).astype(np.int64)
        s = np.where(s == 0, np.float16(1), s)
        scales[gi], zeros[gi] = s, z
        codes[rows] = np.clip(np.round(x / s.astype(np.float32)) + z, 0, maxq)
    return codes, scales, zeros, g_idx


def pack_rows(vals, bits):
    """Packs along axis 0: word r holds vals[r*per + k] at bit k*bits."""
    per = 32 // bits
    n = vals.shape[0]
    pad = (-n) % per
    v = np.concatenate([vals, np.zeros((pad,) + vals.shape[1:], vals.dtype)]).astype(np.uint32)
    v = v.reshape((-1, per) + vals.shape[1:])
    out = np.zeros(v.shape[:1] + vals.shape[1:], np.uint32)
    for k in range(per):
        out |= v[:, k] << np.uint32(k * bits)
    return out.view(np.int32)


def gptq_tensors(m, w, bits, group, sym, act_order, rng):
    n_in = w.shape[1]
    g_idx = None
    if act_order:  # desc_act: a permuted assignment of inputs to groups, as GPTQ stores it
        g_idx = (np.arange(n_in) // group)[rng.permutation(n_in)]
    codes, scales, zeros, g_idx = gptq_quantise(w, bits, group, sym, g_idx)
    t = {m + ".qweight": torch.from_numpy(pack_rows(codes, bits)),
         m + ".qzeros": torch.from_numpy(pack_rows((zeros - 1).T, bits).T.copy()),  # v1 stores zero - 1
         m + ".scales": torch.from_numpy(scales)}
    t[m + ".g_idx"] = torch.from_numpy(g_idx.astype(np.int32))
    ref = (codes[:, :] - zeros[g_idx]).astype(np.float32) * scales[g_idx].astype(np.float32)
    return t, torch.from_numpy(ref.T.copy()), (codes, scales, zeros, g_idx)


def unpack_rows(words, bits, n):
    """Inverse of pack_rows: words [ceil(n/per), ...] int32 -> values [n, ...]."""
    per = 32 // bits
    w = words.view(np.uint32)
    vals = np.stack([(w >> np.uint32(k * bits)) & np.uint32(2 ** bits - 1) for k in range(per)], axis=1)
    return vals.reshape((-1,) + words.shape[1:])[:n].astype(np.int64)


def autoround_tensors(m, w, bits, group, sym):
    """auto-round's auto_gptq packer (auto_round_extension.torch.qlinear_torch_zp.QuantLinear) makes
    qweight/qzeros/scales from our round-to-nearest scales and zeros; the reference dequant
    unpacks its tensors with the published layout: (q - (qzero + 1)) * scale in float32."""
    from auto_round_extension.torch.qlinear_torch_zp import QuantLinear
    codes, scales, zeros, g_idx = gptq_quantise(w, bits, group, sym)
    lin = torch.nn.Linear(w.shape[1], w.shape[0], bias=False)
    lin.weight.data = w.to(torch.float32)
    ql = QuantLinear(bits, group, w.shape[1], w.shape[0], False)
    ql.pack(lin, torch.from_numpy(scales.T.astype(np.float32)).contiguous(),
            torch.from_numpy(zeros.T.astype(np.int64)).contiguous())
    t = {m + ".qweight": ql.qweight.contiguous(), m + ".qzeros": ql.qzeros.contiguous(),
         m + ".scales": ql.scales.contiguous()}
    assert t[m + ".scales"].dtype == torch.float16
    n_in, n_out = w.shape[1], w.shape[0]
    q = unpack_rows(t[m + ".qweight"].numpy(), bits, n_in)                  # [in, out]
    z = unpack_rows(t[m + ".qzeros"].numpy().T.copy(), bits, n_out).T + 1   # [groups, out]
    sc = t[m + ".scales"].numpy().astype(np.float32)
    gi = np.arange(n_in) // group
    ref = (q - z[gi]).astype(np.float32) * sc[gi]
    # Our numpy packing (used for the act-order fixture) agrees with auto-round's.
    assert np.array_equal(pack_rows(q, bits), t[m + ".qweight"].numpy()), m
    assert np.array_equal(pack_rows((z - 1).T, bits).T, t[m + ".qzeros"].numpy()), m
    return t, torch.from_numpy(ref.T.copy())


def gptq_fixture(kind):
    dense, linears = make_dense(14 if kind == "autoround" else 15)
    rng = np.random.default_rng(5)
    tensors, deq, extra = dict(dense), {}, {}
    note = ("packed by auto-round's auto_gptq QuantLinear" if kind == "autoround" else
            "packed by this script's numpy (checked equal to auto-round's packer in autoround_int4)")
    for m, w in linears.items():
        if not quantised(m):
            tensors[m + ".weight"] = w
            deq[m + ".weight"] = w
            continue
        if kind == "autoround":
            if ".shared_expert." in m:
                extra[m] = {"bits": 16, "data_type": "float"}
                tensors[m + ".weight"] = w
                deq[m + ".weight"] = w
                continue
            bits, group, sym = (8, 32, False) if ".self_attn." in m else (4, 16, True)
            if bits == 8:
                extra[m] = {"bits": 8, "group_size": 32, "sym": False}
            t, ref = autoround_tensors(m, w, bits, group, sym)
        else:
            t, ref, _ = gptq_tensors(m, w, 4, 16, False, True, rng)
        tensors.update(t)
        deq[m + ".weight"] = ref
    if kind == "autoround":
        qc = {"quant_method": "auto-round", "packing_format": "auto_round:auto_gptq", "bits": 4, "group_size": 16,
              "sym": True, "data_type": "int", "iters": 0, "nsamples": 0, "autoround_version": "fixture",
              "block_name_to_quantize": "model.layers", "extra_config": extra}
    else:
        qc = {"quant_method": "gptq", "bits": 4, "group_size": 16, "desc_act": True, "sym": False,
              "checkpoint_format": "gptq", "static_groups": False, "true_sequential": True}
    return tensors, deq, qc, note


# ---------------------------------------------------------------- writing
def write(d, tensors, deq, qc):
    if os.path.exists(d):
        shutil.rmtree(d)
    os.makedirs(os.path.join(d, "dense"))
    cfg = text_config()
    with open(os.path.join(d, "dense", "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    cfg["quantization_config"] = qc
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    save_file({k: v.contiguous() for k, v in sorted(tensors.items())}, os.path.join(d, "model.safetensors"))
    dense = {k: v for k, v in tensors.items()
             if k.endswith(".weight") and k[:-7] + ".weight" in deq and v.dtype in (torch.bfloat16, torch.float32)}
    dense = {k: v for k, v in tensors.items() if not any(k.startswith(m[:-7] + ".") for m in deq)}
    dense.update(deq)
    save_file({k: v.contiguous() for k, v in sorted(dense.items())}, os.path.join(d, "dense", "model.safetensors"))
    size = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)
    print(f"{d}: {len(tensors)} tensors, {size / 1024:.0f} KiB")
    assert size < 1 << 20


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/data/quant")
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    versions = [f"torch {torch.__version__}", f"numpy {np.__version__}"]
    try:
        import auto_round
        versions.append(f"auto-round {auto_round.__version__}")
    except Exception:  # noqa: BLE001
        pass
    todo = a.only.split(",") if a.only else ["ct_int4", "ct_nvfp4", "modelopt_nvfp4", "autoround_int4", "gptq_act_order"]
    for name in todo:
        d = os.path.join(a.out, name)
        if name.startswith("ct_"):
            import compressed_tensors
            versions.append(f"compressed-tensors {compressed_tensors.__version__}")
            write(d, *ct_fixture(name[3:]))
        elif name == "modelopt_nvfp4":
            import modelopt
            versions.append(f"nvidia-modelopt {modelopt.__version__}")
            write(d, *modelopt_fixture())
        else:
            tensors, deq, qc, note = gptq_fixture(name.split("_")[0])
            print(f"{name}: {note}")
            versions.append(f"{name}: {note}")
            write(d, tensors, deq, qc)
    with open(os.path.join(a.out, "VERSIONS.txt"), "w") as f:
        f.write("\n".join(sorted(set(versions))) + "\n")


if __name__ == "__main__":
    main()
