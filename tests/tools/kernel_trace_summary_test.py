#!/usr/bin/env python3
"""tools/kernel_trace_summary.py on a hand-made trace whose numbers are worked out below: two replays
of a 3-kernel graph (7), one replay of another graph (9) and one kernel outside any graph.
Standard library only; registered in tests/CMakeLists.txt (ctest label unit)."""
import contextlib
import importlib.util
import io
import lzma
import os
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in tools/
HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.path.join(HERE, "..", "..", "tools", "kernel_trace_summary.py")
spec = importlib.util.spec_from_file_location("kernel_trace_summary", TOOL)
kts = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kts)

HEADER = ("start_ns,end_ns,correlation_id,graph_id,graph_node_id,stream_id,grid_x,grid_y,grid_z,"
          "block_x,range,kernel\n")
# (start, end, correlation, graph, node, name). Replay 1 (correlation 100): A, then B after a
# 500 ns gap, then C starting 100 ns before B ends (overlap 100). Replay 2 (200): gaps of 1,000 ns.
KERNELS = [
    (1000, 3000, 100, 7, 11, "A"), (3500, 4500, 100, 7, 12, "B"), (4400, 6000, 100, 7, 13, "C"),
    (7000, 7500, 120, 0, 0, "eager"),
    (8000, 9000, 150, 9, 21, "other"),
    (15000, 17000, 200, 7, 13, "C"), (10000, 12000, 200, 7, 11, "A"), (13000, 14000, 200, 7, 12, "B"),
]


def trace_text():
    lines = [f'{s},{e},{c},{g},{n},13,{n},1,1,128,1,"{name}"\n' for s, e, c, g, n, name in KERNELS]
    return HEADER + "".join(lines)


class KernelTraceSummaryTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "trace.csv")
        with open(self.path, "w") as f:
            f.write(trace_text())

    def tearDown(self):
        self.dir.cleanup()

    def test_replays_group_by_graph_and_correlation(self):
        graphs = kts.replays_of(kts.read_rows(self.path))
        self.assertEqual(sorted(graphs), [7, 9])
        self.assertEqual([[k["kernel"] for k in rep] for rep in graphs[7]], [["A", "B", "C"]] * 2)
        self.assertEqual(len(graphs[9]), 1)

    def test_replay_timeline(self):
        rep1, rep2 = kts.replays_of(kts.read_rows(self.path))[7]
        t1 = kts.timeline(rep1)
        # span 6000 - 1000; busy 2000 + 1000 + 1600; idle 500; C overlaps B for 4500 - 4400.
        self.assertEqual((t1["span"], t1["busy"], t1["idle"], t1["overlap"]), (5000, 4600, 500, 100))
        self.assertEqual(t1["gaps"], [None, 500, 0])
        t2 = kts.timeline(rep2)
        self.assertEqual((t2["span"], t2["busy"], t2["idle"], t2["overlap"]), (7000, 5000, 2000, 0))
        for t in (t1, t2):
            self.assertEqual(t["span"], t["busy"] - t["overlap"] + t["idle"])

    def test_means_per_graph_and_kernel(self):
        mean, names = kts.summarize(kts.replays_of(kts.read_rows(self.path))[7])
        # Means of the two replays above, in µs.
        self.assertEqual(mean["replays"], 2)
        self.assertAlmostEqual(mean["span"], 6.0)
        self.assertAlmostEqual(mean["busy"], 4.8)
        self.assertAlmostEqual(mean["idle"], 1.25)
        self.assertAlmostEqual(mean["overlap"], 0.05)
        self.assertAlmostEqual(mean["kernels"], 3.0)
        b = names["B"]
        self.assertAlmostEqual(b["per_replay"], 1.0)
        self.assertAlmostEqual(b["mean_us"], 1.0)
        self.assertAlmostEqual(b["share"], 1.0 / 6.0)
        self.assertAlmostEqual(b["mean_gap_us"], 0.75)  # gaps 0.5 and 1.0
        c = names["C"]
        self.assertAlmostEqual(c["mean_us"], 1.8)  # 1.6 and 2.0
        self.assertAlmostEqual(c["mean_gap_us"], 0.5)  # 0 (it overlaps B) and 1.0
        self.assertIsNone(names["A"]["mean_gap_us"])  # first in its replay: no gap

    def test_by_node_in_graph_order(self):
        nodes = kts.by_node(kts.replays_of(kts.read_rows(self.path))[7])
        self.assertEqual([d["node"] for d in nodes], [11, 12, 13])
        self.assertAlmostEqual(nodes[1]["mean_gap_us"], 0.75)
        self.assertEqual(nodes[0]["shape"], "11×1×1 / 128")

    def test_whole_trace_timeline(self):
        # All eight kernels: span 17000 - 1000; idle 500 + 1000 + 500 + 3 × 1000; overlap 100.
        t = kts.timeline(kts.read_rows(self.path))
        self.assertEqual((t["span"], t["busy"], t["idle"], t["overlap"]), (16000, 11100, 5000, 100))

    def test_command_line_picks_the_most_replayed_graph(self):
        xz = self.path + ".xz"
        with lzma.open(xz, "wt") as f:
            f.write(trace_text())
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            kts.main([xz, "--by-node"])
        text = out.getvalue()
        self.assertIn("## graph 7", text)
        self.assertNotIn("## graph 9", text)
        self.assertIn("| B | 1.00 | 1.00 | 1.0 | 16.7 % | 0.75 |", text)
        self.assertIn("| 1 | 12 | B | 12×1×1 / 128 | 1.00 | 0.75 |", text)
        self.assertIn("| 0 | 11 | A | 11×1×1 / 128 | 2.00 | – |", text)
        self.assertIn("1 kernels outside graphs", text)

    def test_graph_and_range_selection(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            kts.main([self.path, "--graph-id", "9", "--range", "1"])
        self.assertIn("## graph 9", out.getvalue())
        self.assertNotIn("## graph 7", out.getvalue())
        with self.assertRaises(SystemExit):
            kts.main([self.path, "--range", "2"])


if __name__ == "__main__":
    unittest.main()
