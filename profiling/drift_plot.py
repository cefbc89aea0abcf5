#!/usr/bin/env python3
"""The chart of a `kdagraph drift --json` file (docs/low_precision.md): each configuration's output error against the
fp64 recurrence, round by round, one panel per workload.

    python3 profiling/drift_plot.py drift.json [--out drift.png] [--machine "the machine that ran it"]

Colour is the state dtype and rounding, the line style the mode; log axes (rounds 1 to R, relative
error). A round's error is the L2 error of all its outputs over their L2 norm. Needs matplotlib.
"""
import argparse
import json
import os
import sys

# Okabe-Ito colours: distinguishable with colour-blindness.
COLOURS = {"f32": "#000000", "bf16 nearest": "#0072B2", "bf16 stochastic": "#56B4E9",
           "f16 nearest": "#D55E00", "f16 stochastic": "#E69F00"}
STYLES = {"two-phase": ":", "fused-accept": "-", "replay": "--"}


def storage(config):
    return "f32" if config["state"] == "f32" else f'{config["state"]} {config["rounding"]}'


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json_file")
    ap.add_argument("--out", help="the PNG to write (default: next to the JSON, .png)")
    ap.add_argument("--machine", default="", help="names the machine in the title")
    args = ap.parse_args(argv)
    with open(args.json_file) as f:
        drift = json.load(f)
    if drift.get("command") != "drift" or not drift.get("workloads"):
        print(f"{args.json_file}: not the JSON of kdagraph drift", file=sys.stderr)
        return 1
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = drift["workloads"]
    fig, axes = plt.subplots(1, len(workloads), figsize=(5.2 * len(workloads), 4.4), squeeze=False, sharey=True)
    for ax, workload in zip(axes[0], workloads):
        for config in workload["configurations"]:
            points = [(r, e) for r, e in config["per_round_output_error"] if e is not None and e > 0]
            if not points:
                continue
            rounds, errors = zip(*points)
            ax.plot(rounds, errors, color=COLOURS.get(storage(config), "#999999"),
                    linestyle=STYLES.get(config["mode"], "-"), linewidth=1.2, label=config["label"])
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(workload["name"], fontsize=10)
        ax.set_xlabel("round")
        ax.grid(True, which="major", alpha=0.3)
    axes[0][0].set_ylabel("relative error of the round's outputs (fp64 reference)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8, frameon=False)
    title = (f'kdagraph drift: T = {drift["tokens"]}, B = {drift["batch"]}, K = V = {drift["head_dim"]}, '
             f'HV = {drift["value_heads"]}, {drift["rounds"]} rounds')
    fig.suptitle(title + (f" ({args.machine})" if args.machine else ""), fontsize=11)
    fig.tight_layout()
    out = args.out or os.path.splitext(args.json_file)[0] + ".png"
    fig.savefig(out, dpi=120, bbox_inches="tight")
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
