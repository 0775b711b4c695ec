#!/usr/bin/env python3
"""Which bf16 roundings of GDN prefill version 2 (gdn_tc_*.cu) dominate its error.

A numpy model of the v2 chunk algorithm (chunk 64, WY/UT transform, state pass, output pass, the
gated RMSNorm), each bf16 rounding point switchable, against the sequential fp32 recurrence of the
CPU specification (src/backend/cpu/cpu_gdn.cpp) computed in float64 from the same fp32 inputs.
Error = normalised ‖x − ref‖ / ‖ref‖ of the outputs and of the final state, as the GPU tests
(tests/gpu/cuda_ops_parity_test.cpp) and gdn_lab measure it.

  python3 bench/kernels/gdn_tc_rounding.py [--tokens 900] [--heads 4] [--dk 128] [--seed 1]
      [--mode all=x2,S=bf ...] [--ranges] [--vscale 1 --sscale 0.3 --gscale 1]
      (needs numpy; ~10 s for the default table; results in bench/kernels/NOTES.md "v5 accuracy"
      and "v4: fp16 operands")

Modes per point: bf (bf16), x2 (bf16 hi + lo), h (fp16, with its range), hx2 (fp16 hi + lo), m11
(fp16's 11-bit significand with an unlimited exponent: h − m11 is what fp16's range costs), f (fp32).
--ranges prints, per point, max |x| and the share of non-zero values in fp16's subnormal range and
below its smallest subnormal (rounded to 0).

Rounding points (names as in the table; "x2" = kept as a bf16 hi + lo pair, i.e. ~16 bits):
  qk   q̂, k̂ in the workspace (operands of L, P, q̂S, k̂ᵀV')     kw   k̂βe^γ (operand of W = T·kw)
  v    vβ (operand of U = T·vβ)                                 T    (I + L)^-1
  WU   W and U stored bf16                                      S    chunk state as operand of W·S
  H    chunk-start state for the output (q̂·H)                  Vp   V' = U − W S stored bf16
  Vs   V'e^{γlast−γ} (operand of the state update)              P    intra-chunk scores q̂k̂ᵀ⊙e^{γr−γs}
"""
import argparse
import numpy as np

POINTS = ["qk", "kw", "v", "T", "WU", "S", "H", "Vp", "Vs", "P"]


def bf16(x):
    """Round to bf16 (nearest even), returned as float64."""
    f = np.asarray(x, dtype=np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


def bf16x2(x):
    hi = bf16(x)
    return hi + bf16(np.asarray(x, dtype=np.float64) - hi)


def f16(x):
    """Round to fp16 (nearest even, subnormals below 6.1e-5, overflow to inf), as float64."""
    return np.asarray(x, np.float64).astype(np.float16).astype(np.float64)


def m11(x):
    """fp16's 11-bit significand without its exponent range (no underflow, no overflow)."""
    m, e = np.frexp(np.asarray(x, np.float64))
    return np.ldexp(np.round(m * 2048.0) / 2048.0, e)


def f16x2(x):
    hi = f16(x)
    return hi + f16(np.asarray(x, np.float64) - hi)


RANGES = {}  # point -> [max |x|, nonzero count, count below fp16's normal 6.1e-5, count below 2^-25 (-> 0)]


def note_range(p, x):
    a = np.abs(np.asarray(x, np.float64))
    nz = a[a > 0]
    r = RANGES.setdefault(p, [0.0, 0, 0, 0])
    r[0] = max(r[0], float(a.max()) if a.size else 0.0)
    r[1] += nz.size
    r[2] += int((nz < 6.103515625e-05).sum())
    r[3] += int((nz < 2.0 ** -25).sum())


def make_inputs(rng, n, H, dk, dv, vscale=1.0, sscale=0.3, gscale=1.0):
    silu = lambda x: x / (1 + np.exp(-x))
    # conv output (silu of a mix of the N(0,1) qkv rows), as the GPU tests draw them
    q = silu(rng.normal(0, 1, (H, n, dk))).astype(np.float32)
    k = silu(rng.normal(0, 1, (H, n, dk))).astype(np.float32)
    v = (vscale * silu(rng.normal(0, 1, (H, n, dv)))).astype(np.float32)
    beta = (1 / (1 + np.exp(-rng.normal(0, 1, (H, n))))).astype(np.float32)
    A = np.exp(rng.uniform(0, np.log(16), H))  # dummy_weights: A in [1, 16]
    dt = rng.uniform(0.001, 0.1, H)
    dt_bias = dt + np.log(-np.expm1(-dt))
    a = rng.normal(0, 1, (H, n))
    g = (-gscale * A[:, None] * np.log1p(np.exp(a + dt_bias[:, None]))).astype(np.float32)
    S0 = rng.normal(0, sscale, (H, dk, dv)).astype(np.float32)
    z = rng.normal(0, 1, (H, n, dv)).astype(np.float32)
    l2 = lambda x: (x / np.sqrt((x.astype(np.float64) ** 2).sum(-1, keepdims=True) + 1e-6)).astype(np.float32)
    qn = (l2(q) / np.float32(np.sqrt(dk))).astype(np.float32)
    kn = l2(k)
    return dict(q=qn, k=kn, v=v, beta=beta, g=g, S0=S0, z=z)


def gated_norm(o, z):
    o = o / np.sqrt((o ** 2).mean(-1, keepdims=True) + 1e-6)
    return o * z / (1 + np.exp(-z))


def reference(I):
    q, k, v, beta, g = (I[x].astype(np.float64) for x in "q k v beta g".split())
    H, n, _ = q.shape
    S = I["S0"].astype(np.float64).copy()
    o = np.empty_like(v)
    for t in range(n):
        S *= np.exp(g[:, t])[:, None, None]
        m = np.einsum("hkv,hk->hv", S, k[:, t])
        d = beta[:, t, None] * (v[:, t] - m)
        S += k[:, t, :, None] * d[:, None, :]
        o[:, t] = np.einsum("hkv,hk->hv", S, q[:, t])
    return gated_norm(o, I["z"]), S


def chunked(I, mode):
    """mode[p]: 'bf' (round to bf16), 'x2' (bf16 hi + lo), 'h' (fp16), 'hx2' (fp16 hi + lo), 'm11'
    (fp16's significand, unlimited exponent), 'f' (fp32)."""
    def R(p, x):
        m = mode[p]
        note_range(p, x)
        if m == "hx2":
            return f16x2(x)
        if m == "m11":
            return m11(x)
        if m == "bf":
            return bf16(x)
        if m == "x2":
            return bf16x2(x)
        if m == "h":  # fp16 (11-bit significand); overflow shows as inf
            return f16(x)
        return np.asarray(x, np.float32).astype(np.float64)
    q, k, v, beta, g = (I[x] for x in "q k v beta g".split())
    H, n, dk = q.shape
    S = I["S0"].astype(np.float64).copy()
    o = np.empty(v.shape)
    for c0 in range(0, n, 64):
        sl = slice(c0, min(n, c0 + 64))
        gam = np.cumsum(g[:, sl].astype(np.float32), axis=1, dtype=np.float32).astype(np.float64)
        b = beta[:, sl].astype(np.float64)
        kb, qb = R("qk", k[:, sl]), R("qk", q[:, sl])
        note_range("e^γ", np.exp(gam))
        kw = R("kw", k[:, sl] * (b * np.exp(gam))[..., None])
        vb = R("v", v[:, sl] * b[..., None])
        dec = np.exp(gam[:, :, None] - gam[:, None, :])
        nc = gam.shape[1]
        Lm = np.tril(b[..., None] * np.einsum("hrd,hsd->hrs", kb, kb) * dec, -1)
        note_range("L", Lm)
        T = R("T", np.linalg.inv(np.eye(nc) + Lm))
        W, U = R("WU", T @ kw), R("WU", T @ vb)
        Sop, Hs = R("S", S), R("H", S)
        Vp = U - W @ Sop
        glast = gam[:, -1]
        Vs = R("Vs", Vp * np.exp(glast[:, None] - gam)[..., None])
        P = R("P", np.tril(np.einsum("hrd,hsd->hrs", qb, kb) * dec))
        o[:, sl] = np.exp(gam)[..., None] * (qb @ Hs) + P @ R("Vp", Vp)
        S = np.exp(glast)[:, None, None] * S + np.swapaxes(kb, 1, 2) @ Vs
    return gated_norm(o, I["z"]), S


def nerr(x, r):
    return float(np.linalg.norm(x - r) / np.linalg.norm(r))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=900)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--dk", type=int, default=128)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--vscale", type=float, default=1.0, help="v = vscale * silu(N(0,1))")
    ap.add_argument("--sscale", type=float, default=0.3, help="initial state N(0, sscale)")
    ap.add_argument("--gscale", type=float, default=1.0, help="gates g times gscale (faster decay)")
    ap.add_argument("--ranges", action="store_true", help="with --mode: max |x| and small values per point")
    ap.add_argument("--mode", action="append", default=[], help="comma list point=bf|x2|h|f over the v2 baseline (repeatable); prints those lines only")
    a = ap.parse_args()
    I = make_inputs(np.random.default_rng(a.seed), a.tokens, a.heads, a.dk, a.dk, a.vscale, a.sscale, a.gscale)
    ro, rs = reference(I)
    v2 = {p: "bf" for p in POINTS}

    def run(mode, label):
        RANGES.clear()
        o, s = chunked(I, mode)
        print(f"| {label:34s} | {nerr(o, ro):.2e} | {nerr(s, rs):.2e} |", flush=True)

    print(f"D = {a.dk}, {a.heads} value heads, {a.tokens} tokens, seed {a.seed}, vscale {a.vscale}, "
          f"sscale {a.sscale}, gscale {a.gscale}")
    print("| rounding | out err | state err |\n|---|---|---|")
    if a.mode:
        for md in a.mode:
            m = dict(v2)
            for kv in md.split(","):
                p, x = kv.split("=")
                if p == "all":
                    m = {q: x for q in POINTS}
                else:
                    m[p] = x
            run(m, md)
        if a.ranges:  # of the last --mode's run (the values are the same up to roundings)
            print("| point | max abs | nonzero values below 6.1e-5 (fp16 subnormal) | below 2^-25 (fp16 0) |\n|---|---|---|---|")
            for p, (mx, nz, sub, zero) in RANGES.items():
                print(f"| {p} | {mx:.3g} | {sub / max(nz, 1):.2%} | {zero / max(nz, 1):.2%} |")
        return
    run({p: "f" for p in POINTS}, "none (fp32 chunked)")
    run(v2, "v2: all bf16")
    for p in POINTS:
        run({**v2, p: "f"}, f"v2, {p} fp32")
    for p in POINTS:
        run({**{x: "f" for x in POINTS}, p: "bf"}, f"only {p} bf16")


if __name__ == "__main__":
    main()
