#!/usr/bin/env python3
"""Summarises a kernel trace (the CSV of tools/kernel_trace, scripts/gpu_run.sh stage trace_step):
the kernels of CUDA-graph replays as the GPU ran them, their durations and the idle gaps between them.

A replay is one cudaGraphLaunch: the kernels with the same graph_id and correlation_id (kernels
launched outside a graph, graph_id 0, belong to none). The replays of the most frequently launched
graph(s), or of --graph-id, are summarised per graph: span (first start to last end), busy (sum of
kernel durations), idle (sum of the gaps before each kernel: its start minus the latest end of the
kernels before it, when positive) and overlap (the part of a kernel that runs while an earlier one
still does), so that span = busy - overlap + idle. Then a markdown table per kernel name and, with
--by-node, one per graph node in graph order.

Usage: python3 tools/kernel_trace_summary.py trace.csv[.xz] [--graph-id ID,...] [--range N]
                                             [--top N] [--by-node [N]]
"""
import argparse
import csv
import lzma
import sys
from collections import Counter, defaultdict

INT_FIELDS = ("start_ns", "end_ns", "correlation_id", "graph_id", "graph_node_id", "stream_id",
              "grid_x", "grid_y", "grid_z", "block_x", "range")


def read_rows(path):
    """The trace's rows as dicts with integer fields, sorted by start."""
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt", newline="") as f:
        rows = []
        for row in csv.DictReader(f):
            for k in INT_FIELDS:
                row[k] = int(row.get(k) or 0)
            rows.append(row)
    rows.sort(key=lambda r: r["start_ns"])
    return rows


def replays_of(rows):
    """graph_id -> its replays, each a list of rows sorted by start, in launch order."""
    launches = defaultdict(list)
    for r in rows:
        if r["graph_id"]:
            launches[(r["graph_id"], r["correlation_id"])].append(r)
    by_graph = defaultdict(list)
    for (graph, _), kernels in sorted(launches.items(), key=lambda kv: kv[1][0]["start_ns"]):
        by_graph[graph].append(kernels)
    return dict(by_graph)


def timeline(kernels):
    """Span, busy, idle and overlap (ns) of kernels sorted by start, and each kernel's gap before
    it (None for the first)."""
    span = max(k["end_ns"] for k in kernels) - kernels[0]["start_ns"]
    busy = idle = overlap = 0
    gaps = []
    latest_end = None
    for k in kernels:
        busy += k["end_ns"] - k["start_ns"]
        if latest_end is None:
            gaps.append(None)
        else:
            gap = max(0, k["start_ns"] - latest_end)
            idle += gap
            overlap += max(0, min(latest_end, k["end_ns"]) - k["start_ns"])
            gaps.append(gap)
        latest_end = k["end_ns"] if latest_end is None else max(latest_end, k["end_ns"])
    return {"span": span, "busy": busy, "idle": idle, "overlap": overlap, "gaps": gaps}


def summarize(replays):
    """Means over the replays of one graph (µs), and per kernel name: launches, durations and the
    gaps before them."""
    n = len(replays)
    totals = Counter()
    per_name = defaultdict(lambda: {"n": 0, "t": 0, "gap_n": 0, "gap": 0})
    for kernels in replays:
        tl = timeline(kernels)
        for key in ("span", "busy", "idle", "overlap"):
            totals[key] += tl[key]
        totals["kernels"] += len(kernels)
        for k, gap in zip(kernels, tl["gaps"]):
            p = per_name[k["kernel"]]
            p["n"] += 1
            p["t"] += k["end_ns"] - k["start_ns"]
            if gap is not None:
                p["gap_n"] += 1
                p["gap"] += gap
    mean = {key: totals[key] / n / 1e3 for key in ("span", "busy", "idle", "overlap")}
    mean["kernels"] = totals["kernels"] / n
    mean["replays"] = n
    names = {}
    for name, p in per_name.items():
        names[name] = {
            "per_replay": p["n"] / n,
            "mean_us": p["t"] / p["n"] / 1e3,
            "us_per_replay": p["t"] / n / 1e3,
            "share": p["t"] / n / 1e3 / mean["span"] if mean["span"] else 0.0,
            "mean_gap_us": p["gap"] / p["gap_n"] / 1e3 if p["gap_n"] else None,  # always first
            "gap_us_per_replay": p["gap"] / n / 1e3,
        }
    return mean, names


def by_node(replays):
    """Per graph node, in graph order (mean position in the replays): kernel, launch shape, mean µs
    and mean gap before it."""
    nodes = defaultdict(lambda: {"pos": 0, "n": 0, "t": 0, "gap_n": 0, "gap": 0})
    for kernels in replays:
        tl = timeline(kernels)
        for pos, (k, gap) in enumerate(zip(kernels, tl["gaps"])):
            d = nodes[k["graph_node_id"]]
            d["kernel"] = k["kernel"]
            d["shape"] = f"{k['grid_x']}×{k['grid_y']}×{k['grid_z']} / {k['block_x']}"
            d["pos"] += pos
            d["n"] += 1
            d["t"] += k["end_ns"] - k["start_ns"]
            if gap is not None:
                d["gap_n"] += 1
                d["gap"] += gap
    out = []
    for node, d in nodes.items():
        out.append({"node": node, "pos": d["pos"] / d["n"], "kernel": d["kernel"], "shape": d["shape"],
                    "mean_us": d["t"] / d["n"] / 1e3,
                    "mean_gap_us": d["gap"] / d["gap_n"] / 1e3 if d["gap_n"] else None})
    out.sort(key=lambda d: d["pos"])
    return out


def us(v):
    return "–" if v is None else f"{v:.2f}"


def print_overview(rows, graphs):
    ranges = sorted({r["range"] for r in rows})
    for rng in ranges:
        sel = [r for r in rows if r["range"] == rng]
        tl = timeline(sel)
        label = f"profiler window {rng}" if rng else "whole trace"
        print(f"{label}: {len(sel)} kernels over {tl['span'] / 1e6:.3f} ms: busy {tl['busy'] / 1e6:.3f} ms, "
              f"idle {tl['idle'] / 1e6:.3f} ms, overlap {tl['overlap'] / 1e6:.3f} ms")
    eager = [r["end_ns"] - r["start_ns"] for r in rows if not r["graph_id"]]
    print(f"{len(eager)} kernels outside graphs ({sum(eager) / 1e3:.1f} µs)")
    print()
    print("| graph | replays | kernels per replay | mean span µs | mean busy µs | mean idle µs |")
    print("|--:|--:|--:|--:|--:|--:|")
    for graph, reps in sorted(graphs.items(), key=lambda kv: (-len(kv[1]), kv[0]))[:20]:
        mean, _ = summarize(reps)
        print(f"| {graph} | {len(reps)} | {mean['kernels']:.1f} | {mean['span']:.1f} | {mean['busy']:.1f} | "
              f"{mean['idle']:.1f} |")
    print()


def print_graph(graph, reps, top, nodes):
    mean, names = summarize(reps)
    print(f"## graph {graph}")
    print()
    print(f"replays {mean['replays']}, mean span {mean['span']:.1f} µs, mean busy {mean['busy']:.1f} µs, "
          f"mean idle {mean['idle']:.1f} µs, mean overlap {mean['overlap']:.1f} µs, "
          f"kernels per replay {mean['kernels']:.1f}")
    print()
    print("| kernel | per replay | mean µs | µs per replay | share of span | mean gap before µs | "
          "gap µs per replay |")
    print("|---|--:|--:|--:|--:|--:|--:|")
    for name, p in sorted(names.items(), key=lambda kv: -kv[1]["us_per_replay"])[:top]:
        print(f"| {name} | {p['per_replay']:.2f} | {p['mean_us']:.2f} | {p['us_per_replay']:.1f} | "
              f"{100 * p['share']:.1f} % | {us(p['mean_gap_us'])} | {p['gap_us_per_replay']:.1f} |")
    print()
    if nodes is not None:
        print("| # | node | kernel | grid / block | mean µs | mean gap before µs |")
        print("|--:|--:|---|---|--:|--:|")
        for d in by_node(reps)[: nodes or None]:
            print(f"| {d['pos']:.0f} | {d['node']} | {d['kernel']} | {d['shape']} | {d['mean_us']:.2f} | "
                  f"{us(d['mean_gap_us'])} |")
        print()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--graph-id", help="graphs to summarise, comma-separated (default: the most replayed)")
    ap.add_argument("--range", type=int, help="only this profiler window (column range)")
    ap.add_argument("--top", type=int, default=60, help="kernel names per table")
    ap.add_argument("--by-node", type=int, nargs="?", const=0, metavar="N",
                    help="also a table per graph node in graph order, the first N (default all)")
    args = ap.parse_args(argv)

    rows = read_rows(args.csv)
    if args.range is not None:
        rows = [r for r in rows if r["range"] == args.range]
    if not rows:
        sys.exit(f"{args.csv}: no kernels" + (f" in range {args.range}" if args.range is not None else ""))
    graphs = replays_of(rows)
    print_overview(rows, graphs)
    if args.graph_id:
        selected = [int(g) for g in args.graph_id.split(",")]
        missing = [g for g in selected if g not in graphs]
        if missing:
            sys.exit(f"no replays of graph(s) {missing}; graphs: {sorted(graphs)}")
    else:
        most = max((len(r) for r in graphs.values()), default=0)
        selected = sorted(g for g, r in graphs.items() if len(r) == most)
    for graph in selected:
        print_graph(graph, graphs[graph], args.top, args.by_node)


if __name__ == "__main__":
    main()
