#!/usr/bin/env python3
# Bank-conflict check of the shared-memory fragment loads of decode attention version 2
# (src/backend/cuda/attention_decode_v2.cu: swz_k, swz_v and the lane -> address maps of the K
# fragment loads, V's ldmatrix.trans and the fp8 V 4-byte loads), for bf16/fp8 at D 64/128/256.
# Model: 32 banks of 4 bytes; 16-byte loads and ldmatrix served in 8-lane phases, 4-byte loads in
# one 32-lane phase; prints the worst n-way conflict per access. Run: python3 bench/kernels/attention_dec2_banks.py
# (2026-12-03: 1-way everywhere but fp8 V at D 64, 2-way; without the swizzles K 2-way, V 4-8-way.)
# 16-byte loads and ldmatrix in 8-lane phases, 4-byte loads in one 32-lane phase).
def swz_k(CH, kl): return ((kl & 1) << 2) if CH >= 8 else 0
def swz_v(CH, kl): return kl & (7 if CH >= 8 else CH - 1)
def conflicts16(addrs):  # list of 8 byte addresses of 16-byte accesses
    groups = {}
    for a in addrs: groups.setdefault((a // 16) % 8, set()).add(a)
    return max(len(v) for v in groups.values())
def conflicts4(addrs):
    banks = {}
    for a in addrs: banks.setdefault((a // 4) % 32, set()).add(a)
    return max(len(v) for v in banks.values())
worst = {}
for es, DP in [(2, 256), (2, 128), (2, 64), (1, 256), (1, 128), (1, 64)]:
    RB = DP * es; CH = RB // 16
    w = 1
    for c in range(CH // 4):
        for half in (0, 8):
            for p in range(4):
                addrs = []
                for lane in range(8 * p, 8 * p + 8):
                    g, t = lane >> 2, lane & 3
                    r = g + half
                    addrs.append(r * RB + (((4 * c + t) ^ swz_k(CH, g)) << 4))
                w = max(w, conflicts16(addrs))
    worst[('K', es, DP)] = w
    if es == 2:
        w = 1
        for n in range(DP // 16):
            for i in range(4):
                addrs = []
                for lane in range(8 * i, 8 * i + 8):
                    vk = (lane & 7) + ((lane >> 4) << 3)
                    ch = (2 * n + ((lane >> 3) & 1)) ^ swz_v(CH, vk)
                    addrs.append(vk * RB + ch * 16)
                w = max(w, conflicts16(addrs))
        worst[('V ldmatrix', es, DP)] = w
    else:
        w = 1
        for pp in range(DP // 32):
            for koff in (0, 1, 8, 9):
                addrs = []
                for lane in range(32):
                    g, t = lane >> 2, lane & 3
                    key = 2 * t + koff
                    ch = (2 * pp + (g >> 2)) ^ swz_v(CH, key)
                    addrs.append(key * RB + ch * 16 + (g & 3) * 4)
                w = max(w, conflicts4(addrs))
        worst[('V fp8 4B', es, DP)] = w
for k, v in worst.items(): print(k, 'ways', v)
