#!/usr/bin/env python3
"""Reference values for the eval statistics (src/eval/paired_stats, src/eval/power), computed with
scipy, an implementation independent of ours. Writes tests/data/eval/stats_reference.json, which
tests/eval/stats_test.cpp compares against. Run with the project venv:

    .venv/bin/python tools/eval_stats_reference.py [--out tests/data/eval/stats_reference.json]

Contents:
  mcnemar     exact two-sided McNemar p for (b, c): scipy.stats.binomtest(b, b + c, 0.5).pvalue
  quantiles   scipy.stats.norm.ppf(p)
  intervals   Agresti-Min interval for p_B - p_A (each cell + 1/2, paired Wald), z from norm.ppf
  connor      Connor (1987) sample size, z from norm.ppf
  exact_power exact power of the exact McNemar test: sum over d of Bin(d; n, psi) x P(reject | d),
              reject when binomtest(x, d, 0.5).pvalue <= alpha, x ~ Bin(d, (psi + delta)/(2 psi))
  exact_n     the first n whose exact power reaches the target
"""
import argparse
import json
import math
import random

import scipy
from scipy.stats import binom, binomtest, norm


def mcnemar(b, c):
    return 1.0 if b + c == 0 else float(binomtest(b, b + c, 0.5).pvalue)


def agresti_min(both_pass, only_a, only_b, both_fail, alpha):
    n = both_pass + only_a + only_b + both_fail
    n2 = n + 2
    pb, pa = (only_b + 0.5) / n2, (only_a + 0.5) / n2
    d = pb - pa
    half = norm.ppf(1 - alpha / 2) * math.sqrt(max(0.0, (pb + pa - d * d) / n2))
    return [(only_b - only_a) / n, max(-1.0, d - half), min(1.0, d + half)]


def connor(delta, psi, alpha, power):
    za, zb = norm.ppf(1 - alpha / 2), norm.ppf(power)
    root = za * math.sqrt(psi) + zb * math.sqrt(psi - delta * delta)
    return math.ceil(root * root / (delta * delta) - 1e-9)


class ExactPower:
    def __init__(self, delta, psi, alpha):
        self.psi, self.alpha = psi, alpha
        self.pi = (psi + delta) / (2 * psi)
        self.reject = []  # index d: P(reject | d discordant)

    def reject_prob(self, d):
        xs = [x for x in range(d + 1) if d > 0 and binomtest(x, d, 0.5).pvalue <= self.alpha]
        return float(sum(binom.pmf(x, d, self.pi) for x in xs))

    def power(self, n):
        while len(self.reject) <= n:
            self.reject.append(self.reject_prob(len(self.reject)))
        return float(sum(binom.pmf(d, n, self.psi) * self.reject[d] for d in range(n + 1)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/data/eval/stats_reference.json")
    args = ap.parse_args()
    rng = random.Random(19)

    pairs = [(b, c) for b in range(0, 31) for c in range(0, 31)]
    pairs += [(4, 3), (3, 4), (0, 200), (150, 190), (500, 430), (1000, 1100), (2, 60)]
    pairs += [(rng.randrange(0, 400), rng.randrange(0, 400)) for _ in range(60)]
    mc = [[b, c, mcnemar(b, c)] for b, c in pairs]

    qs = [1e-6, 1e-4, 0.001, 0.01, 0.02, 0.024, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.6, 0.8, 0.9,
          0.95, 0.975, 0.976, 0.99, 0.999]
    quantiles = [[p, float(norm.ppf(p))] for p in qs]

    intervals = []
    for _ in range(80):
        t = [rng.randrange(0, 60) for _ in range(4)]
        if sum(t) == 0:
            t[0] = 1
        alpha = rng.choice([0.05, 0.1, 0.01])
        intervals.append(t + [alpha] + agresti_min(*t, alpha))
    intervals.append([43, 4, 3, 0, 0.05] + agresti_min(43, 4, 3, 0, 0.05))

    con = []
    for delta in [0.02, 0.05, 0.1, 0.15, 0.2]:
        for psi in [0.2, 0.25, 0.28, 0.3, 0.4, 0.5]:
            if psi < delta:
                continue
            for alpha, power in [(0.05, 0.8), (0.05, 0.9), (0.01, 0.8), (0.1, 0.8)]:
                con.append([delta, psi, alpha, power, connor(delta, psi, alpha, power)])

    exact = []
    for delta, psi, alpha, ns in [(0.1, 0.28, 0.05, [10, 50, 100, 218, 250]),
                                  (0.2, 0.3, 0.05, [20, 40, 75]),
                                  (0.05, 0.5, 0.01, [30, 120])]:
        e = ExactPower(delta, psi, alpha)
        for n in ns:
            exact.append([delta, psi, alpha, n, e.power(n)])

    exact_n = []
    for delta, psi, alpha, power in [(0.1, 0.28, 0.05, 0.8), (0.2, 0.3, 0.05, 0.8),
                                     (0.15, 0.25, 0.05, 0.9)]:
        e = ExactPower(delta, psi, alpha)
        n = 1
        while e.power(n) < power:
            n += 1
        exact_n.append([delta, psi, alpha, power, n])

    out = {"generator": "tools/eval_stats_reference.py", "scipy": scipy.__version__,
           "mcnemar": mc, "quantiles": quantiles, "intervals": intervals, "connor": con,
           "exact_power": exact, "exact_n": exact_n}
    with open(args.out, "w") as f:  # one table per line: reviewable diffs
        keys = list(out)
        f.write("{\n")
        for i, k in enumerate(keys):
            end = "," if i + 1 < len(keys) else ""
            v = out[k]
            if isinstance(v, list):
                rows = ",\n".join(json.dumps(r) for r in v)
                f.write(f"{json.dumps(k)}: [\n{rows}\n]{end}\n")
            else:
                f.write(f"{json.dumps(k)}: {json.dumps(v)}{end}\n")
        f.write("}\n")
    print(f"wrote {args.out}: {len(mc)} McNemar tables, {len(intervals)} intervals, "
          f"{len(con)} Connor sizes, {len(exact)} exact powers, {len(exact_n)} exact sizes")


if __name__ == "__main__":
    main()
