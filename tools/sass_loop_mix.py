#!/usr/bin/env python3
"""The instruction mix of each loop of a CUDA kernel, from its SASS (no GPU needed).

Why: a kernel that is bound by instruction issue rather than by memory (the INT4 grouped decode
GEMM under Nsight Compute, session 43) gets faster only by fewer instructions per byte, and the
SASS of its inner loop says where they go (session 44 found the INT4 unpack's `& mask ^ magic`
compiled to two LOP3s a pair this way).

Usage:
  pip download --no-deps nvidia-cuda-cuobjdump   # CUDA's cuobjdump as a wheel (unzip it)
  cuobjdump -sass build-gpu/CMakeFiles/qs_lib.dir/src/backend/cuda/moe_decode_gemm_int4.cu.o > k.sass
  python3 tools/sass_loop_mix.py k.sass [FUNCTION_SUBSTRING]

A loop is the span from a backward branch's target to the branch; for each loop of each function
(whose mangled name contains FUNCTION_SUBSTRING, if given) it prints the instruction count and the
most frequent opcodes (predicates and modifiers dropped: HMMA.16816.F32.BF16 counts as HMMA).
"""
import collections
import re
import sys


def functions(text):
    """(name, [(address, opcode, text)]) for each function of cuobjdump -sass output."""
    name, body = None, []
    for line in text.split("\n"):
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            if name:
                yield name, body
            name, body = m.group(1), []
            continue
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m and name:
            txt = re.sub(r"^@!?U?P\w+\s+", "", m.group(2).strip())
            body.append((int(m.group(1), 16), txt.split()[0], txt))
    if name:
        yield name, body


def loops(body):
    index = {a: i for i, (a, _, _) in enumerate(body)}
    for i, (a, op, txt) in enumerate(body):
        if not op.startswith("BRA"):
            continue
        m = re.search(r"0x([0-9a-f]+)", txt)
        if m and int(m.group(1), 16) <= a and int(m.group(1), 16) in index:
            yield index[int(m.group(1), 16)], i


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    want = sys.argv[2] if len(sys.argv) > 2 else ""
    with open(sys.argv[1]) as f:
        text = f.read()
    for name, body in functions(text):
        if want not in name:
            continue
        print(f"{name}: {len(body)} instructions")
        for s, e in sorted(loops(body)):
            span = body[s:e + 1]
            if len(span) < 8:
                continue
            mix = collections.Counter(op.split(".")[0] for _, op, _ in span)
            print(f"  loop {span[0][0]:#x}-{span[-1][0]:#x}: {len(span)} instructions: " +
                  ", ".join(f"{k} {v}" for k, v in mix.most_common(12)))


if __name__ == "__main__":
    main()
