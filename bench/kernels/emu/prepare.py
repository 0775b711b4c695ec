#!/usr/bin/env python3
"""Rewrites a kernel .cu file into host C++ for the emulation in cuda_runtime.h beside this file:
kernel launches become emu::launch calls, dynamic shared memory a per-block buffer, and the inline
PTX helpers to_tf32 / mma_tf32 their emulated equivalents. Usage: prepare.py in.cu out.cpp"""
import re
import sys

src = open(sys.argv[1]).read()

def replace_function(text, signature, body):
    i = text.index(signature)
    j = text.index('{', i)
    depth, k = 0, j
    while True:
        if text[k] == '{':
            depth += 1
        elif text[k] == '}':
            depth -= 1
            if depth == 0:
                break
        k += 1
    return text[:j] + '{\n' + body + '\n}' + text[k + 1:]

if 'to_tf32(float x)' in src:
    src = replace_function(src, 'to_tf32(float x)', '    return ::emu::tf32_rna(__float_as_uint(x));')
if 'void mma_tf32(' in src:
    src = replace_function(src, 'void mma_tf32(', '    ::emu::mma_m16n8k8_tf32(d, a, b);')
src = re.sub(r'extern __shared__ (\w+) (\w+)\[\];', r'\1* \2 = static_cast<\1*>(::emu::dyn_smem());', src)
src = re.sub(r'([\w:]+(?:<[^<>;]*>)?)<<<(.*?)>>>\((.*?)\);',
             lambda m: '::emu::launch(%s, %s, %s);' % (m.group(1), m.group(2).rsplit(',', 1)[0] if m.group(2).count(',') >= 3 else m.group(2), m.group(3)),
             src, flags=re.S)
if '<<<' in src or 'asm(' in src or 'asm volatile' in src:
    sys.exit('prepare.py: unconverted CUDA syntax left in ' + sys.argv[1])
open(sys.argv[2], 'w').write(src)
