#!/usr/bin/env python3
"""profiling/plot.py: every chart of a bench CSV, drawn from a full grid, is readable and says what the CSV
says.

    python3 tests/profiling/plot_test.py [-v] [unittest arguments]

Readable: every text the figure draws (titles, axis labels, tick labels, legend entries) lies inside the
canvas, the legend overlaps no panel, panels overlap no panel, and the axes read in plain numbers.
Faithful: each line's points are the CSV's (time, bandwidth) or are computed here from it (speedup over
two-phase, the traffic bound from docs/shapes.md's transfer counts). The CSVs are synthetic, with random times, so
that every point differs. Exits 77 (skipped) without matplotlib.
"""
import contextlib
import csv
import io
import itertools
import os
import random
import re
import subprocess
import sys
import tempfile
import unittest
import warnings

PROFILING = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "profiling")
PLOT = os.path.join(PROFILING, "plot.py")
SKIP = 77

# The columns of `kdagraph bench --csv` (tests/tools/cli_test.py checks the command line writes these).
COLUMNS = ["backend", "mode", "exec", "sampler", "layers", "heads", "value_heads", "head_k", "head_v", "io_dtype",
           "state_dtype", "tokens", "batch", "bucket", "rounds", "host_ms", "device_ms", "tokens_per_s",
           "state_bytes_per_round", "bandwidth_gbs", "copy_ceiling_gbs", "graph_nodes", "graph_us_traced",
           "idle_pct", "largest_gap_us", "conv_width"]
MODES, EXECS, SAMPLERS = ["two-phase", "fused-accept", "replay"], ["eager", "graph"], ["in", "out"]
SHAPE = dict(layers=4, heads=2, value_heads=4, head_k=64, head_v=64)
CEILING_GBS = 37.5


def transfers(mode, T):
    """docs/shapes.md: state-sized transfers per layer and request in a round."""
    return {"two-phase": 1 + T + 2, "fused-accept": 1 + T, "replay": 2}[mode]


def bench_rows(seed, tokens, batches, modes=MODES, execs=EXECS, samplers=SAMPLERS, extras=None, on_device=False):
    """One row per point of the grid (extras: column -> values, swept too), random times."""
    rng = random.Random(seed)
    extras = extras or {}
    rows = []
    for mode, exec_kind, sampler, T, batch, *extra in itertools.product(modes, execs, samplers, tokens, batches,
                                                                          *extras.values()):
        ms = rng.uniform(0.05, 40.0)
        state_bytes = (SHAPE["value_heads"] * SHAPE["head_v"] * SHAPE["head_k"] * 4 * transfers(mode, T)
                       * SHAPE["layers"] * batch)
        row = dict.fromkeys(COLUMNS, "")
        row.update({k: str(v) for k, v in SHAPE.items()})
        row.update(backend="cuda" if on_device else "cpu", mode=mode, exec=exec_kind, sampler=sampler,
                   io_dtype="bf16", state_dtype="f32", tokens=str(T), batch=str(batch), bucket=str(batch),
                   rounds="20", host_ms=f"{rng.uniform(0.01, 1.0) if on_device else ms:.6g}",
                   device_ms=f"{ms:.6g}" if on_device else "", tokens_per_s=f"{batch * T / ms * 1e3:.6g}",
                   state_bytes_per_round=str(state_bytes), bandwidth_gbs=f"{state_bytes / ms / 1e6:.6g}",
                   copy_ceiling_gbs=str(CEILING_GBS), conv_width="4")
        row.update(zip(extras, extra))
        rows.append(row)
    return rows


def write_csv(rows, path):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def load_plot():
    sys.path.insert(0, PROFILING)
    import plot
    return plot


class ChartTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.plot = load_plot()
        # Imported here, outside the warning filter below: a matplotlib older than its pyparsing warns
        # about the parser on import, which says nothing about the charts.
        import matplotlib.backends.backend_agg  # noqa: F401
        import matplotlib.figure  # noqa: F401

    def render(self, rows, machine=None):
        """plot.render with every UserWarning an error (a constrained layout that cannot fit warns); also the
        stderr it writes."""
        err = io.StringIO()
        with warnings.catch_warnings(), contextlib.redirect_stderr(err):
            warnings.simplefilter("error", UserWarning)
            charts = dict(self.plot.render(rows, machine))
        return charts, err.getvalue()

    def drawn_texts(self, fig):
        """Draws the figure as savefig does and returns every non-empty visible Text it drew with its
        window extent, as drawn."""
        from matplotlib.text import Text
        drawn, draw = [], Text.draw

        def recording(text, renderer):
            draw(text, renderer)
            if text.get_visible() and text.get_text().strip():
                drawn.append((text.get_text(), text.get_window_extent(renderer)))

        Text.draw = recording
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", UserWarning)
                fig.canvas.draw()
        finally:
            Text.draw = draw
        return drawn

    def assert_readable(self, name, chart, expect_texts):
        fig = chart.fig
        drawn = self.drawn_texts(fig)
        canvas = fig.bbox
        for text, box in drawn:
            inside = (box.x0 >= canvas.x0 - 0.5 and box.y0 >= canvas.y0 - 0.5 and box.x1 <= canvas.x1 + 0.5
                      and box.y1 <= canvas.y1 + 0.5)
            self.assertTrue(inside, f"{name}: '{text}' at {box.bounds} is not inside the figure {canvas.bounds}")
        texts = [t for t, _ in drawn]
        for want in expect_texts:  # the recording saw the texts that matter: not a vacuous pass
            self.assertTrue(any(want in " ".join(t.split()) for t in texts), f"{name}: '{want}' was not drawn")

        renderer = fig.canvas.get_renderer()
        panels = list(chart.panels.values())
        legends = [lg for sub in fig.subfigs for lg in sub.legends] + fig.legends
        self.assertEqual(len(legends), 1, f"{name}: one legend explains the styles")
        legend_box = legends[0].get_window_extent(renderer)
        for ax in panels:
            self.assertFalse(legend_box.overlaps(ax.get_window_extent(renderer)), f"{name}: the legend covers a panel")
        for a, b in itertools.combinations(panels, 2):
            self.assertFalse(a.get_tightbbox(renderer).overlaps(b.get_tightbbox(renderer)),
                             f"{name}: panels '{a.get_title()}' and '{b.get_title()}' overlap")
        for ax in panels:
            for label in ax.get_xticklabels() + ax.get_yticklabels():
                if label.get_visible() and label.get_text():
                    self.assertRegex(label.get_text(), r"^\d+(\.\d+)?$", f"{name}: a tick label not in plain digits")

    def line(self, ax, gid):
        (found,) = [l for l in ax.get_lines() if l.get_gid() == gid]
        return list(found.get_xdata()), list(found.get_ydata())

    def assert_series(self, chart, rows, gid_of, value, facet_of=lambda r: (r["exec"],)):
        """Every panel holds, for each gid, the points value(row) of its rows, batches ascending."""
        expected = {}
        for r in rows:
            key = (facet_of(r), int(r["tokens"]), gid_of(r))
            if key[2] is not None:
                expected.setdefault(key, []).append((int(r["batch"]), value(r)))
        self.assertTrue(expected)
        for (facet, T, gid), points in expected.items():
            xs, ys = self.line(chart.panels[(facet, T)], gid)
            points.sort()
            self.assertEqual(xs, [b for b, _ in points], f"T={T} {facet} {gid}")
            for y, (b, want) in zip(ys, points):
                self.assertAlmostEqual(y / want, 1.0, places=9, msg=f"T={T} {facet} {gid} batch {b}")

    # -----------------------------------------------------------------------------------------------

    def test_full_grid(self):
        """Three modes x two executions x two sampler placements x four T x eight batches."""
        tokens, batches = [1, 2, 4, 8], [1, 2, 4, 8, 16, 32, 64, 128]
        rows = bench_rows(1, tokens, batches)
        charts, err = self.render(rows, machine="the test's imaginary machine")
        self.assertEqual(list(charts), ["latency", "speedup", "bandwidth"], err)
        common = ["the test's imaginary machine", "batch (requests per round)", "mode", "sampler placement",
                  "T = 8 | graph"] + [str(b) for b in batches]
        for name, chart in charts.items():
            self.assertEqual(set(chart.panels), {((e,), T) for e in EXECS for T in tokens})
            modes = MODES[1:] if name == "speedup" else MODES
            self.assert_readable(name, chart, common + modes + ["in: sampler", "out: launched"])

        host = lambda r: float(r["host_ms"])
        self.assert_series(charts["latency"], rows, lambda r: f"{r['mode']} {r['sampler']}", host)
        self.assert_series(charts["bandwidth"], rows, lambda r: f"{r['mode']} {r['sampler']}",
                           lambda r: float(r["bandwidth_gbs"]))
        two_phase = {(r["exec"], r["sampler"], r["tokens"], r["batch"]): host(r) for r in rows
                     if r["mode"] == "two-phase"}
        self.assert_series(charts["speedup"], rows,
                           lambda r: None if r["mode"] == "two-phase" else f"{r['mode']} {r['sampler']}",
                           lambda r: two_phase[(r["exec"], r["sampler"], r["tokens"], r["batch"])] / host(r))
        for ((exec_kind,), T), ax in charts["speedup"].panels.items():
            for mode in MODES[1:]:
                _, ys = self.line(ax, f"bound {mode}")
                bound = transfers("two-phase", T) / transfers(mode, T)
                self.assertEqual(list(ys), [bound, bound], f"T={T} {exec_kind}: the traffic bound of {mode}")
        for ax in charts["bandwidth"].panels.values():
            _, ys = self.line(ax, "copy ceiling")
            self.assertEqual(list(ys), [CEILING_GBS, CEILING_GBS])

    def test_extra_variant_columns_become_facets(self):
        """Columns the script does not know: two that tell points apart become rows of panels, one that
        varies with every point (a new measurement) does not, one that never varies goes in the title."""
        rows = bench_rows(2, [1, 4], [1, 8, 64], execs=["graph"], extras={"pdl": ["on", "off"],
                                                                        "conv": ["fused", "separate"]})
        rng = random.Random(3)
        for r in rows:
            r["conv_ms"] = f"{rng.uniform(0.001, 1):.6g}"
            r["build"] = "release"
        charts, err = self.render(rows)
        facets = {("graph", p, c) for p in ("on", "off") for c in ("fused", "separate")}
        for name, chart in charts.items():
            self.assertEqual({f for f, _ in chart.panels}, facets, name)
            self.assert_readable(name, chart, ["build release", "T = 4 | graph, pdl off, conv separate"])
        self.assert_series(charts["latency"], rows, lambda r: f"{r['mode']} {r['sampler']}",
                           lambda r: float(r["host_ms"]), facet_of=lambda r: (r["exec"], r["pdl"], r["conv"]))

    def test_repeated_points_are_medians(self):
        """The same grid twice in one file (two runs concatenated): each point is the median of its repeats."""
        first, second = bench_rows(4, [2], [1, 4]), bench_rows(5, [2], [1, 4])
        rows = first + second + bench_rows(6, [2], [1, 4])
        charts, err = self.render(rows)
        self.assertIn("appear more than once", err)
        runs = [first, second, rows[len(first) + len(second):]]
        median = lambda i: sorted(float(run[i]["host_ms"]) for run in runs)[1]
        index = {id(r): i for i, r in enumerate(first)}
        self.assert_series(charts["latency"], first, lambda r: f"{r['mode']} {r['sampler']}",
                           lambda r: median(index[id(r)]))

    def test_device_csv_without_two_phase(self):
        """A CUDA sweep of two modes, graphs only, sampler in: device times are drawn, the speedup chart
        is left out with a reason, the others render."""
        rows = bench_rows(7, [2, 4, 8], [1, 4, 16, 64, 128], modes=["fused-accept", "replay"], execs=["graph"],
                          samplers=["in"], on_device=True)
        charts, err = self.render(rows, machine="an H200 that " + "has a very long description " * 12)
        self.assertEqual(list(charts), ["latency", "bandwidth"])
        self.assertIn("no speedup chart", err)
        for name, chart in charts.items():
            self.assert_readable(name, chart, ["device ms per round" if name == "latency" else "state GB/s",
                                               "long description"])
        self.assert_series(charts["latency"], rows, lambda r: f"{r['mode']} {r['sampler']}",
                           lambda r: float(r["device_ms"]))

    def test_one_point(self):
        rows = bench_rows(8, [4], [32], modes=["two-phase", "fused-accept"], execs=["graph"], samplers=["out"])
        charts, _ = self.render(rows)
        for name, chart in charts.items():
            self.assert_readable(name, chart, ["32", "T = 4 | graph"])

    def test_command_line_writes_every_chart(self):
        with tempfile.TemporaryDirectory() as work:
            path = os.path.join(work, "sweep.csv")
            write_csv(bench_rows(9, [1, 4], [1, 2, 4]), path)
            out = os.path.join(work, "charts")
            p = subprocess.run([sys.executable, PLOT, path, "--out", out, "--machine", "a test"], capture_output=True,
                               text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            written = p.stdout.split()
            self.assertEqual([os.path.basename(w) for w in written],
                             [f"sweep_{n}.png" for n in ("latency", "speedup", "bandwidth")])
            for w in written:
                with open(w, "rb") as f:
                    self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n", w)


if __name__ == "__main__":
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("SKIPPED: matplotlib is not installed (pip install matplotlib)")
        sys.exit(SKIP)
    sys.exit(0 if unittest.main(exit=False).result.wasSuccessful() else 1)
