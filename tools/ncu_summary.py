#!/usr/bin/env python3
"""Groups an Nsight Compute CSV (scripts/gpu_run.sh stage ncu_step) by kernel: launches, total and
mean duration, DRAM bytes read and written, and the achieved rate against the H200's measured copy
ceiling (4.25 TB/s, docs/PERF.md "H200 ceilings"). Prints a markdown table, largest total first.

Usage: python3 tools/ncu_summary.py ncu_step_512_k0.csv [--names full|short] [--top N]
"""
import argparse
import csv
import io
import sys
from collections import defaultdict

COPY_BPS = 4.25e12

TIME_UNITS = {"nsecond": 1e-9, "usecond": 1e-6, "msecond": 1e-3, "second": 1.0,
              "ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
BYTE_UNITS = {"byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "Tbyte": 1e12,
              "KB": 1e3, "MB": 1e6, "GB": 1e9}


def short_name(name):
    """The kernel's name without its namespace, template arguments and parameter list."""
    depth, out = 0, []
    for ch in name:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    s = "".join(out).strip()
    if s.startswith("void "):
        s = s[5:]
    return s.split("::")[-1] or name


def value(row):
    text = row["Metric Value"].replace(",", "")
    try:
        v = float(text)
    except ValueError:
        return None
    unit = row.get("Metric Unit", "")
    if unit in TIME_UNITS:
        return v * TIME_UNITS[unit]
    if unit in BYTE_UNITS:
        return v * BYTE_UNITS[unit]
    return v


def read_rows(path):
    with open(path, newline="") as f:
        text = f.read()
    # ncu writes its own log lines (==PROF== ...) before the CSV header: start at the header.
    start = text.find('"ID"')
    if start < 0:
        sys.exit(f"{path}: no ncu CSV header found")
    return list(csv.DictReader(io.StringIO(text[start:])))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--names", choices=["full", "short"], default="short")
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args()

    launches = defaultdict(dict)  # ID -> metric -> value (+ name)
    for row in read_rows(args.csv):
        rec = launches[row["ID"]]
        rec["name"] = row["Kernel Name"]
        v = value(row)
        if v is not None:
            rec[row["Metric Name"]] = v
    groups = defaultdict(lambda: {"n": 0, "t": 0.0, "rd": 0.0, "wr": 0.0, "grid": set()})
    for rec in launches.values():
        key = rec["name"] if args.names == "full" else short_name(rec["name"])
        g = groups[key]
        g["n"] += 1
        g["t"] += rec.get("gpu__time_duration.sum", 0.0)
        g["rd"] += rec.get("dram__bytes_read.sum", 0.0)
        g["wr"] += rec.get("dram__bytes_write.sum", 0.0)
        if "launch__grid_size" in rec:
            g["grid"].add(int(rec["launch__grid_size"]))
    total_t = sum(g["t"] for g in groups.values())
    total_b = sum(g["rd"] + g["wr"] for g in groups.values())
    print(f"{len(launches)} launches, {total_t * 1e3:.3f} ms of kernel time, "
          f"{total_b / 1e9:.3f} GB of DRAM traffic ({total_b / total_t / 1e12 if total_t else 0:.2f} TB/s)")
    print()
    print("| kernel | launches | total µs | share | mean µs | DRAM read MB | written MB | TB/s | % of copy | grids |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|--:|---|")
    for key, g in sorted(groups.items(), key=lambda kv: -kv[1]["t"])[: args.top]:
        rate = (g["rd"] + g["wr"]) / g["t"] if g["t"] else 0.0
        grids = ",".join(str(x) for x in sorted(g["grid"])[:4]) + ("…" if len(g["grid"]) > 4 else "")
        print(f"| {key} | {g['n']} | {g['t'] * 1e6:.1f} | {100 * g['t'] / total_t:.1f} % | "
              f"{g['t'] * 1e6 / g['n']:.2f} | {g['rd'] / 1e6:.1f} | {g['wr'] / 1e6:.1f} | {rate / 1e12:.2f} | "
              f"{100 * rate / COPY_BPS:.0f} % | {grids} |")


if __name__ == "__main__":
    main()
