#!/usr/bin/env python3
"""What transformers 5.17 accepts and refuses in a Qwen3.6 config.json: the oracle for
tests/unit/config_acceptance_test.cpp.

Starts from models/qwen36-tiny/config.json, applies one change per case (set or delete a key of
text_config or of the top level), writes the result to a temporary directory, and loads it with
`AutoConfig.from_pretrained` (the path every transformers loader takes). Records per case the
full config, whether transformers accepted it, its error message (first line) and the warnings it
logged. qwenserve must accept every config transformers accepts unless it cannot run it (the C++
test lists those, with the field its message must name), and refuse every config transformers
refuses.

Needs transformers==5.17.0 (scripts/requirements-tools.txt; torch is not needed to load configs):
    python3 -m venv /work/venv-cfg && /work/venv-cfg/bin/pip install transformers==5.17.0
    /work/venv-cfg/bin/python tools/config_acceptance_fixture.py
Writes tests/data/config/transformers_acceptance.json.
"""
import copy
import io
import json
import logging
import os
import sys
import tempfile

import transformers
from transformers import AutoConfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE = os.path.join(ROOT, "models", "qwen36-tiny", "config.json")
OUT = os.path.join(ROOT, "tests", "data", "config", "transformers_acceptance.json")
DELETE = object()

# (name, [(path, value)]): path is a list of keys from the top of config.json; DELETE removes it.
T = "text_config"
RP = [T, "rope_parameters"]
CASES = [
    ("base", []),
    # M-RoPE sections: transformers does not validate them (ignore_keys_at_rope_validation).
    ("mrope_section_sum_below_half_rotary", [(RP + ["mrope_section"], [2, 2, 2])]),
    ("mrope_section_sum_above_half_rotary", [(RP + ["mrope_section"], [4, 4, 4])]),
    ("mrope_section_two_entries", [(RP + ["mrope_section"], [4, 4])]),
    ("mrope_section_negative_entry", [(RP + ["mrope_section"], [10, -1, -1])]),
    ("mrope_section_absent", [(RP + ["mrope_section"], DELETE)]),
    ("mrope_interleaved_false", [(RP + ["mrope_interleaved"], False)]),
    # RoPE type and parameters.
    ("rope_type_yarn", [(RP + ["rope_type"], "yarn"), (RP + ["factor"], 4.0),
                        (RP + ["original_max_position_embeddings"], 8192)]),
    ("rope_type_linear", [(RP + ["rope_type"], "linear"), (RP + ["factor"], 2.0)]),
    ("rope_type_unknown", [(RP + ["rope_type"], "bogus")]),
    ("rope_theta_zero", [(RP + ["rope_theta"], 0)]),
    ("rope_theta_negative", [(RP + ["rope_theta"], -1.0)]),
    ("rope_theta_string", [(RP + ["rope_theta"], "big")]),
    ("partial_rotary_factor_half", [(RP + ["partial_rotary_factor"], 0.5), ([T, "partial_rotary_factor"], 0.5)]),
    ("partial_rotary_factor_non_integer_dim", [(RP + ["partial_rotary_factor"], 0.3),
                                               ([T, "partial_rotary_factor"], 0.3)]),
    ("partial_rotary_factor_above_one", [(RP + ["partial_rotary_factor"], 1.5),
                                         ([T, "partial_rotary_factor"], 1.5)]),
    # Layer types.
    ("layer_types_count_mismatch", [([T, "layer_types"], ["linear_attention"] * 3 + ["full_attention"])]),
    ("layer_types_unknown_entry", [([T, "layer_types"], ["linear_attention"] * 7 + ["sliding_attention"])]),
    ("layer_types_bogus_entry", [([T, "layer_types"], ["linear_attention"] * 7 + ["bogus"])]),
    ("layer_types_legacy_names", [([T, "layer_types"], ["mamba", "conv", "linear_attention", "attention"] * 2)]),
    ("layer_types_absent_interval_4", [([T, "layer_types"], DELETE)]),
    ("layer_types_all_full", [([T, "layer_types"], ["full_attention"] * 8)]),
    ("full_attention_interval_zero_with_layer_types", [([T, "full_attention_interval"], 0)]),
    ("full_attention_interval_zero_without_layer_types", [([T, "full_attention_interval"], 0),
                                                         ([T, "layer_types"], DELETE)]),
    ("full_attention_interval_2_without_layer_types", [([T, "full_attention_interval"], 2),
                                                      ([T, "layer_types"], DELETE)]),
    # Token ids: transformers only warns about ids outside the vocabulary.
    ("bos_token_id_outside_vocab", [([T, "bos_token_id"], 5000)]),
    ("pad_token_id_minus_one", [([T, "pad_token_id"], -1)]),
    ("eos_token_id_outside_vocab", [([T, "eos_token_id"], [4002, 9999])]),
    ("eos_token_id_single", [([T, "eos_token_id"], 4002)]),
    # Fields transformers does not define (kept as attributes, unused by its model).
    ("mamba_ssm_dtype_bogus", [([T, "mamba_ssm_dtype"], "int8")]),
    ("mtp_num_hidden_layers_zero", [([T, "mtp_num_hidden_layers"], 0)]),
    ("mtp_num_hidden_layers_negative", [([T, "mtp_num_hidden_layers"], -1)]),
    ("mtp_use_dedicated_embeddings_true", [([T, "mtp_use_dedicated_embeddings"], True)]),
    ("attn_output_gate_false", [([T, "attn_output_gate"], False)]),
    ("unknown_extra_field", [([T, "some_future_field"], 3)]),
    # Typed fields (huggingface_hub strict dataclasses).
    ("hidden_size_string", [([T, "hidden_size"], "256")]),
    ("hidden_size_float", [([T, "hidden_size"], 256.0)]),
    ("hidden_size_zero", [([T, "hidden_size"], 0)]),
    ("num_experts_per_tok_above_num_experts", [([T, "num_experts_per_tok"], 32)]),
    ("num_attention_heads_not_multiple_of_kv", [([T, "num_attention_heads"], 3)]),
    ("linear_value_heads_not_multiple_of_key", [([T, "linear_num_value_heads"], 3)]),
    ("rms_norm_eps_zero", [([T, "rms_norm_eps"], 0.0)]),
    ("rms_norm_eps_int", [([T, "rms_norm_eps"], 1)]),
    ("hidden_act_gelu", [([T, "hidden_act"], "gelu")]),
    ("attention_bias_true", [([T, "attention_bias"], True)]),
    ("norm_topk_prob_false", [([T, "norm_topk_prob"], False)]),
    ("tie_word_embeddings_true", [([T, "tie_word_embeddings"], True), (["tie_word_embeddings"], True)]),
    ("max_position_embeddings_absent", [([T, "max_position_embeddings"], DELETE)]),
    ("head_dim_absent", [([T, "head_dim"], DELETE)]),
    ("model_type_other", [(["model_type"], "qwen3_moe"), ([T, "model_type"], "qwen3_moe")]),
    # Every text field absent: transformers' class defaults (the 35B-A3B shapes) apply.
    ("text_config_minimal", [([T], {"model_type": "qwen3_5_moe_text"})]),
    ("text_fields_absent_but_sizes", [([T], {"model_type": "qwen3_5_moe_text", "hidden_size": 256,
                                              "vocab_size": 4096, "num_hidden_layers": 8})]),
]
# The flat layout (model_type qwen3_5_moe_text at the top): the base's text_config alone.
FLAT_CASES = [("flat_text_config", []), ("flat_norm_topk_prob_false", [(["norm_topk_prob"], False)])]

# Resolved values compared with qwenserve's parse (text config attributes; rope_* from
# rope_parameters).
RESOLVED = ["vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
            "head_dim", "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
            "linear_value_head_dim", "linear_conv_kernel_dim", "num_experts", "num_experts_per_tok",
            "moe_intermediate_size", "shared_expert_intermediate_size", "max_position_embeddings",
            "rms_norm_eps", "tie_word_embeddings", "layer_types", "bos_token_id", "eos_token_id", "pad_token_id"]


def apply(cfg, changes):
    cfg = copy.deepcopy(cfg)
    for path, value in changes:
        node = cfg
        for k in path[:-1]:
            node = node.setdefault(k, {})
        if value is DELETE:
            node.pop(path[-1], None)
        else:
            node[path[-1]] = value
    return cfg


def resolved(config):
    tc = config.get_text_config()
    r = {k: getattr(tc, k, None) for k in RESOLVED}
    rp = dict(tc.rope_parameters or {})
    for k in ("rope_theta", "partial_rotary_factor", "rope_type", "mrope_section"):
        r[k] = rp.get(k)
    return r


def load(cfg):
    """(accepted, error, resolved values) of AutoConfig.from_pretrained on this config.json."""
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f)
        try:
            c = AutoConfig.from_pretrained(d)
        except Exception as e:  # noqa: BLE001 - any refusal counts
            return False, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", None
    try:
        return True, "", resolved(c)
    except Exception:  # noqa: BLE001 - another model's config (model_type_other): no values to compare
        return True, "", None


def main():
    assert transformers.__version__ == "5.17.0", transformers.__version__
    with open(BASE) as f:
        base = json.load(f)
    log = io.StringIO()
    handler = logging.StreamHandler(log)
    tlog = logging.getLogger("transformers")
    tlog.addHandler(handler)
    tlog.setLevel(logging.WARNING)
    out = []
    cases = [(n, c, base) for n, c in CASES] + [(n, c, base[T]) for n, c in FLAT_CASES]
    for name, changes, start in cases:
        cfg = apply(start, changes)
        log.seek(0)
        log.truncate()
        accepted, error, values = load(cfg)
        warnings = [w for w in log.getvalue().splitlines() if w.strip()]
        out.append({"name": name, "transformers_accepts": accepted, "error": error[:300],
                    "warnings": [w[:300] for w in warnings], "resolved": values, "config": cfg})
        print(f"{name:45s} {'accepts' if accepted else 'REFUSES'} {error[:110]}", file=sys.stderr)
    doc = {"generator": "tools/config_acceptance_fixture.py", "transformers": transformers.__version__,
           "base": "models/qwen36-tiny/config.json", "cases": out}
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
