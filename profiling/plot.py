#!/usr/bin/env python3
"""Charts from a `kdagraph bench --csv` file.

    python3 profiling/plot.py bench.csv [--out DIR]

Writes, next to the CSV unless --out says otherwise:
  <name>_latency.png    time per round vs batch, one line per mode, execution and sampler placement,
                        one panel per T (device time on CUDA, host time on the CPU)
  <name>_bandwidth.png  state bandwidth (the bytes SPEC 7 says a round moves, over that time) vs batch,
                        against the measured copy ceiling; only when the CSV has those columns

Needs matplotlib (pip install matplotlib).
"""
import argparse
import csv
import math
import os
import sys

MODE_COLORS = {"two-phase": "tab:red", "fused-accept": "tab:blue", "replay": "tab:green"}
EXEC_STYLES = {"eager": "--", "graph": "-"}
SAMPLER_MARKERS = {"in": "o", "out": "x"}


def number(text):
    """A float from a CSV cell; None when empty or not a number."""
    try:
        v = float(text)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def load(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"plot.py: {path} has no rows")
    for need in ("mode", "exec", "tokens", "batch", "host_ms"):
        if need not in rows[0]:
            sys.exit(f"plot.py: {path} has no column '{need}'; is it a kdagraph bench CSV?")
    return rows


def round_time(row):
    """Device time per round when the CSV has it (CUDA), else host time (CPU)."""
    device = number(row.get("device_ms"))
    return device if device is not None else number(row["host_ms"])


def variants(rows):
    seen = []
    for r in rows:
        key = (r["mode"], r["exec"], r.get("sampler", "in"))
        if key not in seen:
            seen.append(key)
    return seen


def panels(plt, rows, title, ylabel):
    from matplotlib.ticker import FixedLocator, NullLocator, ScalarFormatter
    tokens = sorted({int(r["tokens"]) for r in rows})
    batches = sorted({int(r["batch"]) for r in rows})
    fig, axes = plt.subplots(1, len(tokens), figsize=(5.5 * len(tokens), 5.2), squeeze=False, sharey=False)
    fig.suptitle(title)
    for ax, t in zip(axes[0], tokens):
        ax.set_title(f"T = {t}")
        ax.set_xlabel("batch (requests per round)")
        ax.set_ylabel(ylabel)
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(FixedLocator(batches))
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_locator(NullLocator())
        ax.grid(True, which="both", alpha=0.3)
    return fig, dict(zip(tokens, axes[0]))


def save(fig, axes, path):
    """One legend for all panels, below them."""
    handles, labels = next(iter(axes.values())).get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8, frameon=False)
    rows_of_legend = (len(labels) + 2) // 3
    fig.tight_layout(rect=(0, 0.045 * rows_of_legend + 0.02, 1, 1))
    fig.savefig(path, dpi=120)


def draw_lines(axes_by_t, rows, value):
    for mode, exec_kind, sampler in variants(rows):
        label = f"{mode}, {exec_kind}, sampler {sampler}"
        for t, ax in axes_by_t.items():
            pts = sorted(
                (int(r["batch"]), value(r))
                for r in rows
                if int(r["tokens"]) == t and (r["mode"], r["exec"], r.get("sampler", "in")) == (mode, exec_kind, sampler)
                and value(r) is not None
            )
            if not pts:
                continue
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=label,
                    color=MODE_COLORS.get(mode, "tab:gray"), linestyle=EXEC_STYLES.get(exec_kind, ":"),
                    marker=SAMPLER_MARKERS.get(sampler, "s"), markersize=5)


def describe(rows):
    r = rows[0]
    shape = ""
    if "layers" in r:
        shape = f" L={r['layers']} H={r['heads']} HV={r['value_heads']} K={r['head_k']} V={r['head_v']}"
    dtypes = f", io {r['io_dtype']}, state {r['state_dtype']}" if "io_dtype" in r else ""
    return f"{r.get('backend', '?')}{shape}{dtypes}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv", help="a CSV written by kdagraph bench --csv")
    ap.add_argument("--out", help="folder for the PNG files (default: the CSV's folder)")
    args = ap.parse_args()

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot.py needs matplotlib: pip install matplotlib")

    rows = load(args.csv)
    out_dir = args.out or os.path.dirname(os.path.abspath(args.csv))
    os.makedirs(out_dir, exist_ok=True)
    stem = os.path.splitext(os.path.basename(args.csv))[0]
    on_device = any(number(r.get("device_ms")) is not None for r in rows)
    written = []

    ylabel = "device ms per round" if on_device else "host ms per round (CPU timings)"
    fig, axes = panels(plt, rows, f"kdagraph round latency: {describe(rows)}", ylabel)
    draw_lines(axes, rows, round_time)
    for ax in axes.values():
        ax.set_yscale("log")
    path = os.path.join(out_dir, f"{stem}_latency.png")
    save(fig, axes, path)
    written.append(path)

    if "bandwidth_gbs" in rows[0] and any(number(r["bandwidth_gbs"]) is not None for r in rows):
        fig, axes = panels(plt, rows, f"kdagraph state bandwidth: {describe(rows)}", "state GB/s")
        draw_lines(axes, rows, lambda r: number(r["bandwidth_gbs"]))
        ceilings = [number(r.get("copy_ceiling_gbs")) for r in rows]
        ceilings = [c for c in ceilings if c is not None]
        if ceilings:
            ceiling = sorted(ceilings)[len(ceilings) // 2]
            for ax in axes.values():
                ax.axhline(ceiling, color="black", linestyle=":", label=f"copy ceiling {ceiling:.4g} GB/s")
        path = os.path.join(out_dir, f"{stem}_bandwidth.png")
        save(fig, axes, path)
        written.append(path)

    for p in written:
        print(p)


if __name__ == "__main__":
    main()
