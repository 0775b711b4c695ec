#!/usr/bin/env python3
"""For --speculative-draft-vocab N: the share of a text's tokens whose id lies below N.

A draft over token ids [0, N) can only be accepted where the target's next token is below N, so
this share bounds the fraction of drafts such a vocabulary keeps. Byte-level BPE ids are in merge
order, so the first ids are the most frequent pieces of the tokenizer's training text; chat
control tokens (<|im_end|>, <think>, <tool_call>) sit at the end of the vocabulary and are never
proposed below N. Counts with Hugging Face `tokenizers` (independent of qwenserve's tokenizer).

    .venv/bin/python tools/draft_vocab_coverage.py --tokenizer tokenizer.json FILE... \
        [--jsonl-field text] [--n 16384,32768,65536]

FILE: plain text, or with --jsonl-field one JSON object per line whose field is a string (or a
JSON string per line when the field is '.'). Prints a markdown table row per file and one for all.
"""
import argparse
import json
import sys

from tokenizers import Tokenizer


def texts_of(path, field):
    with open(path, encoding="utf-8") as f:
        if field is None:
            yield f.read()
            return
        for line in f:
            line = line.strip()
            if not line:
                continue
            o = json.loads(line)
            v = o if field == "." else o.get(field) if isinstance(o, dict) else None
            if isinstance(v, str):
                yield v


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokenizer", required=True, help="tokenizer.json")
    ap.add_argument("--jsonl-field", help="read JSON lines and take this field ('.': the line is a string)")
    ap.add_argument("--n", default="8192,16384,32768,65536,131072", help="draft vocabulary sizes, comma-separated")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    try:
        ns = [int(x) for x in a.n.split(",")]
    except ValueError:
        sys.exit(f"--n: expected comma-separated integers, got '{a.n}'")
    if any(n <= 0 for n in ns):
        sys.exit("--n: every size must be positive")
    tok = Tokenizer.from_file(a.tokenizer)
    print("| text | tokens | " + " | ".join(f"ids < {n:,}" for n in ns) + " |")
    print("|:--|--:|" + "--:|" * len(ns))
    total = [0] * len(ns)
    total_tokens = 0
    for path in a.files:
        below = [0] * len(ns)
        count = 0
        for t in texts_of(path, a.jsonl_field):
            ids = tok.encode(t, add_special_tokens=False).ids
            count += len(ids)
            for j, n in enumerate(ns):
                below[j] += sum(1 for i in ids if i < n)
        if count == 0:
            sys.exit(f"{path}: no text")
        print(f"| {path} | {count:,} | " + " | ".join(f"{100 * b / count:.1f} %" for b in below) + " |")
        total = [x + b for x, b in zip(total, below)]
        total_tokens += count
    if len(a.files) > 1:
        print(f"| all | {total_tokens:,} | " + " | ".join(f"{100 * b / total_tokens:.1f} %" for b in total) + " |")


if __name__ == "__main__":
    main()
