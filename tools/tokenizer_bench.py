#!/usr/bin/env python3
"""Single-thread encode throughput of Hugging Face `tokenizers` on a JSON-lines corpus, to set
beside `qwenserve tokenize --benchmark` (same corpus, same MB = UTF-8 input bytes).

HF runs with RAYON_NUM_THREADS=1 and TOKENIZERS_PARALLELISM=false through encode_batch (so the
Python per-call overhead is paid once per pass, not per string).

Usage: tools/tokenizer_bench.py TOKENIZER_JSON CORPUS_JSONL [--repeat N]
"""
import json
import os
import sys
import time

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
from tokenizers import Tokenizer  # noqa: E402


def main():
    path, corpus_path = sys.argv[1], sys.argv[2]
    repeat = int(sys.argv[sys.argv.index("--repeat") + 1]) if "--repeat" in sys.argv else 3
    tok = Tokenizer.from_file(path)
    texts = [json.loads(l) for l in open(corpus_path, encoding="utf-8")]
    num_bytes = sum(len(t.encode("utf-8")) for t in texts)
    best = float("inf")
    for r in range(repeat):
        t0 = time.perf_counter()
        out = tok.encode_batch(texts, add_special_tokens=False)
        secs = time.perf_counter() - t0
        best = min(best, secs)
        print(f"pass {r + 1}: {secs:.3f} s, {num_bytes / secs / 1e6:.2f} MB/s")
    num_ids = sum(len(e.ids) for e in out)
    print(f"hf tokenizers encode_batch (1 thread): {len(texts)} strings, {num_bytes} bytes, "
          f"{num_ids} ids, best {best:.3f} s, {num_bytes / best / 1e6:.2f} MB/s")


if __name__ == "__main__":
    main()
