#!/usr/bin/env python3
"""Charts from a `kdagraph bench --csv` file, one question each.

    python3 profiling/plot.py bench.csv [--out DIR] [--machine "the machine that ran it"]

Writes, next to the CSV unless --out says otherwise:
  <name>_latency.png    time per round by mode against batch (device time on CUDA, host time on the CPU)
  <name>_speedup.png    two-phase time over each other mode's, same execution and sampler placement,
                        against the traffic bound: two-phase bytes over the mode's (docs/shapes.md)
  <name>_bandwidth.png  state bandwidth (docs/shapes.md's bytes over that time) against the measured copy ceiling

Every chart has a panel per T (columns) and per execution (rows); colour and marker are the mode, the
line style the sampler placement, explained once by a legend beside the panels. A column the CSV has
beyond the ones bench_csv.py knows that tells points apart (a kernel variant, a launch attribute) adds
rows of panels. A chart the CSV has no data for (no two-phase rows, no bandwidth) is left out with a line
on stderr. --machine names the machine in every title.

Needs matplotlib (pip install matplotlib).
"""
import argparse
import math
import os
import statistics
import sys
import textwrap
from decimal import Decimal

from bench_csv import Bench, load, number, round_time

# Okabe-Ito colours (distinguishable with colour-blindness), and a marker each so print in grey works.
MODE_STYLES = {"two-phase": ("#D55E00", "s"), "fused-accept": ("#0072B2", "o"), "replay": ("#009E73", "^")}
OTHER_MODE_STYLES = [("#CC79A7", "D"), ("#E69F00", "v"), ("#56B4E9", "P"), ("#000000", "X")]
SAMPLER_STYLES = {"in": ("-", "in: sampler, accept (and commit) in the round"),
                  "out": ("--", "out: launched separately after it")}
OTHER_SAMPLER_STYLES = [":", "-."]
DOT_STEP = 2.6  # a dot and its gap, in line widths: the traffic bounds are dotted, never dashed like "out"
BASELINE = "two-phase"

PANEL_W, PANEL_H = 3.3, 2.5  # inches of one panel with its tick labels
YLABEL_W = 0.5               # inches left of the panels for the y label
DPI = 120
TITLE_SIZE, PANEL_TITLE_SIZE, LABEL_SIZE, LEGEND_SIZE = 11, 9, 9, 8


def plain(v):
    """A tick label in plain digits: 0.05, 1, 2.5, 200 (never 10^k or 1e3)."""
    return format(Decimal(f"{v:.12g}").normalize(), "f")


def mode_style(bench, mode):
    """(colour, marker) of a mode; modes this script does not know take the spare styles in turn."""
    if mode in MODE_STYLES:
        return MODE_STYLES[mode]
    others = [m for m in bench.modes if m not in MODE_STYLES]
    return OTHER_MODE_STYLES[others.index(mode) % len(OTHER_MODE_STYLES)]


def sampler_style(bench, sampler):
    """(line style, legend label) of a sampler placement."""
    if sampler in SAMPLER_STYLES:
        return SAMPLER_STYLES[sampler]
    others = [s for s in bench.samplers if s not in SAMPLER_STYLES]
    return OTHER_SAMPLER_STYLES[others.index(sampler) % len(OTHER_SAMPLER_STYLES)], f"sampler {sampler}"


def legend_entries(bench, modes, references):
    """(handle, label, is a heading): a heading, then an entry per mode (colour and marker), per sampler
    placement (line style) and per reference line (references: (label, Line2D keyword arguments))."""
    from matplotlib.lines import Line2D
    entries = [(Line2D([], [], linestyle="none"), "mode", True)]
    for mode in modes:
        colour, marker = mode_style(bench, mode)
        entries.append((Line2D([], [], color=colour, marker=marker, markersize=5), mode, False))
    entries.append((Line2D([], [], linestyle="none"), "sampler placement", True))
    for sampler in bench.samplers:
        style, label = sampler_style(bench, sampler)
        entries.append((Line2D([], [], color="black", linestyle=style), label, False))
    if references:
        entries.append((Line2D([], [], linestyle="none"), "reference", True))
        entries += [(Line2D([], [], **style), label, False) for label, style in references]
    return entries


# ---------------------------------------------------------------------------------------------------
# Layout: a grid of panels, the legend beside it, the figure sized for both, long texts wrapped to fit
# ---------------------------------------------------------------------------------------------------

def fit_text(artist, text, renderer, limit_px, vertical=False):
    """Sets the artist's text, wrapped at word boundaries so that its extent stays within limit_px."""
    width = max(len(text), 1)
    while True:
        artist.set_text(textwrap.fill(text, width))
        box = artist.get_window_extent(renderer)
        extent = box.height if vertical else box.width
        if extent <= limit_px or width <= 8:
            return
        width = max(8, int(width * limit_px / extent) - 1)


def batch_ticks(ax, batches):
    """Every batch of the sweep on the log2 x axis, labelled in plain numbers; labels thinned where
    they would crowd (about eight to a panel)."""
    from matplotlib.ticker import FixedFormatter, FixedLocator, NullLocator
    span = math.log2(max(batches) / min(batches))
    labels, last = [], None
    for b in batches:
        crowded = last is not None and math.log2(b / last) < span / 8 - 1e-9
        labels.append("" if crowded else str(b))
        last = last if crowded else b
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(batches))
    ax.xaxis.set_major_formatter(FixedFormatter(labels))
    ax.xaxis.set_minor_locator(NullLocator())
    pad = 2 ** (0.15 * max(span, 1))
    ax.set_xlim(min(batches) / pad, max(batches) * pad)


def value_ticks(ax, values):
    """Y limits around every value drawn. Values spanning 3x or more: a log axis with ticks at 1, 2, 5
    times a power of ten (finer where the span is narrow); otherwise linear. Plain numbers either way."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator, ScalarFormatter
    values = [v for v in values if v > 0]
    lo, hi = min(values), max(values)
    if hi / lo < 3:
        ax.set_ylim(lo / 1.15, hi * 1.15)
        formatter = ScalarFormatter(useOffset=False)
        formatter.set_scientific(False)
        ax.yaxis.set_major_formatter(formatter)
        return
    pad = (hi / lo) ** 0.06
    lo, hi = lo / pad, hi * pad
    ax.set_yscale("log")
    ax.set_ylim(lo, hi)
    decades = range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
    for mantissas in ((1, 2, 5), (1, 1.5, 2, 3, 5, 7)):
        ticks = [t for t in (float(f"{m * 10 ** k:.12g}") for k in decades for m in mantissas) if lo <= t <= hi]
        if len(ticks) >= 3:
            break
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: plain(v)))
    ax.yaxis.set_minor_locator(NullLocator())


class Chart:
    """One figure: on the left a subfigure of panels, panels[(facet, T)] -> Axes, facets in rows and T in
    columns, sharing both axes; on the right a subfigure holding the legend; the title above both."""

    def __init__(self, bench, title, ylabel):
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        self.bench, self.title_text, self.ylabel_text = bench, title, ylabel
        self.fig = Figure(layout="constrained", dpi=DPI)
        FigureCanvasAgg(self.fig)
        self.halves = self.fig.add_gridspec(1, 2)
        self.panel_fig = self.fig.add_subfigure(self.halves[0])
        self.legend_fig = self.fig.add_subfigure(self.halves[1])
        grid = self.panel_fig.subplots(len(bench.facets), len(bench.tokens), squeeze=False, sharex=True, sharey=True)
        self.panels = {}
        for i, facet in enumerate(bench.facets):
            for j, t in enumerate(bench.tokens):
                ax = self.panels[(facet, t)] = grid[i][j]
                ax.set_title(f"T = {t}  |  {bench.facet_name(facet)}", fontsize=PANEL_TITLE_SIZE)
                ax.grid(True, alpha=0.3)
                ax.tick_params(labelsize=LABEL_SIZE)
        self.values = []  # every y drawn, for the shared limits

    def lines(self, modes, points_of):
        """A line per panel, mode and sampler placement: points_of(mode, sampler, facet, T) -> (batch, y)."""
        for (facet, t), ax in self.panels.items():
            for mode in modes:
                colour, marker = mode_style(self.bench, mode)
                for sampler in self.bench.samplers:
                    points = points_of(mode, sampler, facet, t)
                    if points:
                        ax.plot([b for b, _ in points], [y for _, y in points], color=colour, marker=marker,
                                markersize=4, linestyle=sampler_style(self.bench, sampler)[0], linewidth=1.4,
                                gid=f"{mode} {sampler}")
                        self.values += [y for _, y in points]

    def level(self, ax, y, gid, **style):
        """A horizontal reference line across one panel."""
        ax.axhline(y, gid=gid, **style)
        self.values.append(y)

    def finish(self, modes, references):
        """Plain-number axes, the legend beside the panels, long texts wrapped, and the figure sized to
        hold the panels at PANEL_W x PANEL_H and the legend at its natural size."""
        bench, fig = self.bench, self.fig
        first = next(iter(self.panels.values()))
        batch_ticks(first, bench.batches)
        value_ticks(first, self.values)

        entries = legend_entries(bench, modes, references)
        legend = self.legend_fig.legend([h for h, _, _ in entries], [l for _, l, _ in entries], loc="upper left",
                                        fontsize=LEGEND_SIZE, frameon=False, handlelength=2.6, borderaxespad=0.2)
        for text, (_, _, heading) in zip(legend.get_texts(), entries):
            text.set_fontweight("bold" if heading else "normal")
        title = fig.suptitle("", fontsize=TITLE_SIZE)
        xlabel = self.panel_fig.supxlabel("batch (requests per round)", fontsize=LABEL_SIZE + 1)
        ylabel = self.panel_fig.supylabel("", fontsize=LABEL_SIZE + 1)

        renderer = fig.canvas.get_renderer()
        inch = fig.dpi
        legend_box = legend.get_window_extent(renderer)
        panels_w, panels_h = len(bench.tokens) * PANEL_W + YLABEL_W, len(bench.facets) * PANEL_H
        legend_w = legend_box.width / inch + 0.2
        self.halves.set_width_ratios([panels_w, legend_w])
        fit_text(title, self.title_text, renderer, (panels_w + legend_w - 0.3) * inch)
        for ax in self.panels.values():
            fit_text(ax.title, ax.get_title(), renderer, (PANEL_W - 0.4) * inch)
        fit_text(ylabel, self.ylabel_text, renderer, (panels_h - 0.3) * inch, vertical=True)
        above = title.get_window_extent(renderer).height / inch + 0.15
        below = xlabel.get_window_extent(renderer).height / inch + 0.2
        fig.set_size_inches(panels_w + legend_w, max(panels_h, legend_box.height / inch + 0.2) + above + below)
        return self


# ---------------------------------------------------------------------------------------------------
# The three questions
# ---------------------------------------------------------------------------------------------------

def title(bench, question, machine):
    on = f" Measured on {machine.strip()}." if machine else ""
    return f"kdagraph: {question}. {bench.describe()}. T = tokens verified per request per round.{on}"


def latency_chart(bench, machine):
    """Which mode is fastest at each batch."""
    unit = "device ms per round" if bench.on_device else "host ms per round (CPU)"
    chart = Chart(bench, title(bench, "time per round by mode", machine), unit)
    chart.lines(bench.modes, lambda mode, sampler, facet, t: bench.series(round_time, mode, sampler, facet, t))
    return chart.finish(bench.modes, [])


def speedup_chart(bench, machine):
    """How much of the traffic it saves each mode turns into time: two-phase time over the mode's, and
    two-phase bytes over the mode's as the bound; None without two-phase rows to compare with."""
    modes = [m for m in bench.modes if m != BASELINE]
    if BASELINE not in bench.modes or not modes:
        return None
    chart = Chart(bench, title(bench, f"speedup over {BASELINE} (its time over the mode's, same execution and "
                                      f"sampler placement) against the traffic bound", machine),
                  f"speedup over {BASELINE} (x)")

    def speedup(mode, sampler, facet, t):
        base = dict(bench.series(round_time, BASELINE, sampler, facet, t))
        return [(b, base[b] / v) for b, v in bench.series(round_time, mode, sampler, facet, t) if b in base and v > 0]

    chart.lines(modes, speedup)
    state_bytes = lambda r: number(r.get("state_bytes_per_round"))
    for (facet, t), ax in chart.panels.items():
        chart.level(ax, 1.0, "1", color="0.55", linewidth=0.9)
        for i, mode in enumerate(modes):
            # docs/shapes.md's bytes scale with the batch and do not depend on the sampler's placement: one ratio
            # per mode and panel, dotted. The modes' dots interleave where two bounds coincide (T = 1).
            base = dict(bench.series(state_bytes, BASELINE, bench.samplers[0], facet, t))
            ratios = [base[b] / v for b, v in bench.series(state_bytes, mode, bench.samplers[0], facet, t)
                      if b in base and v > 0]
            if ratios:
                dots = (DOT_STEP * i, (1.0, DOT_STEP * len(modes) - 1.0))
                chart.level(ax, statistics.median(ratios), f"bound {mode}", color=mode_style(bench, mode)[0],
                            linestyle=dots, linewidth=2.2)
    return chart.finish(modes, [("traffic bound: two-phase bytes / mode bytes, in the mode's colour",
                                 dict(color="black", linestyle=":", linewidth=2.2)),
                                ("1: as fast as two-phase", dict(color="0.55", linewidth=0.9))])


def bandwidth_chart(bench, machine):
    """How close each mode's state traffic comes to a plain copy; None without bandwidth figures."""
    bandwidth = lambda r: number(r.get("bandwidth_gbs"))
    if not any(bandwidth(r) is not None for r in bench.rows):
        return None
    time = "device time" if bench.on_device else "host time"
    chart = Chart(bench, title(bench, f"state bandwidth (docs/shapes.md bytes per round over {time}) against the copy "
                                      f"ceiling measured in the same run", machine), "state GB/s")
    chart.lines(bench.modes, lambda mode, sampler, facet, t: bench.series(bandwidth, mode, sampler, facet, t))
    for (facet, t), ax in chart.panels.items():
        ceilings = [number(r.get("copy_ceiling_gbs")) for r in bench.rows
                    if bench.facet_of(r) == facet and int(r["tokens"]) == t]
        ceilings = [c for c in ceilings if c is not None]
        if ceilings:
            chart.level(ax, statistics.median(ceilings), "copy ceiling", color="black", linestyle="-.", linewidth=1.2)
    return chart.finish(bench.modes, [("copy ceiling (median of the run's)",
                                       dict(color="black", linestyle="-.", linewidth=1.2))])


CHARTS = (("latency", latency_chart), ("speedup", speedup_chart), ("bandwidth", bandwidth_chart))


def render(rows, machine=None):
    """Every chart the rows allow, as (name, Chart) pairs; why any is left out goes to stderr."""
    bench = Bench(rows)
    if bench.repeated:
        print(f"plot.py: {bench.repeated} points appear more than once; drawing their medians", file=sys.stderr)
    charts = []
    for name, draw in CHARTS:
        chart = draw(bench, machine)
        if chart is None:
            print(f"plot.py: no {name} chart: the CSV has no data for it", file=sys.stderr)
        else:
            charts.append((name, chart))
    return charts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv", help="a CSV written by kdagraph bench --csv")
    ap.add_argument("--out", help="folder for the PNG files (default: the CSV's folder)")
    ap.add_argument("--machine", help="the machine the CSV was measured on, named in every title")
    args = ap.parse_args()
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        sys.exit("plot.py needs matplotlib: pip install matplotlib")

    rows = load(args.csv)
    out_dir = args.out or os.path.dirname(os.path.abspath(args.csv))
    os.makedirs(out_dir, exist_ok=True)
    stem = os.path.splitext(os.path.basename(args.csv))[0]
    for name, chart in render(rows, args.machine):
        path = os.path.join(out_dir, f"{stem}_{name}.png")
        chart.fig.savefig(path, dpi=DPI)
        print(path)


if __name__ == "__main__":
    main()
