#!/usr/bin/env python3
"""The verify's hardware counters as a table: Nsight Compute's raw CSV (ncu --csv --page raw --print-units
base, one row a profiled kernel, in launch order) beside what `bench_verify_sweep --check` printed (one line a
verify launch, in the same order), for gpu_check.sh's opt-in profile stage (issue 31: why an aim is missed).

    ncu_table.py NCU_CSV PROGRAM_OUTPUT [--md FILE] [--dry-run]

Columns: time, DRAM bytes read and written over that time, DRAM throughput as a share of its peak, the
warps resident on an SM as a share of the most it holds (achieved occupancy), the SMs' busiest unit as
a share of its peak, grid and registers. A verify far below the DRAM peak with low occupancy waits on
latency (too few bytes in flight); near the SM peak it is bound by its instructions.
"""
import argparse
import csv
import re
import sys

METRICS = {
    "gpu__time_duration.sum": "ns",
    "dram__bytes_read.sum": "bytes",
    "dram__bytes_write.sum": "bytes",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "%",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "%",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "%",
    "launch__grid_size": "",
    "launch__registers_per_thread": "",
}
# bench_verify_sweep's line for one run (Sweep::add): section, mode, shape, member, then the check.
RUN_LINE = re.compile(r"^(chain|modes|conv|tree)\s+(\S+)\s+HV=\s*(\d+) T=(\d+) batch=\s*(\d+) state=(\S+)\s+(\S+)\s+(.*)$")


def number(text):
    text = text.strip().replace(",", "")
    try:
        return float(text)
    except ValueError:
        return None


def kernel_rows(lines):
    """The rows of ncu's raw CSV page: dicts by column, the units row and ncu's own messages left out."""
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return []
    rows = list(csv.reader(lines[start:]))
    header = rows[0]
    out = []
    for row in rows[1:]:
        if len(row) != len(header) or not row[0].strip().isdigit():
            continue  # the units row, or a message
        out.append(dict(zip(header, row)))
    return out


def runs(lines):
    return [m.groups() for m in map(RUN_LINE.match, lines) if m]


def table(kernels, launches):
    missing = [m for m in METRICS if kernels and m not in kernels[0]]
    out = []
    if missing:
        out.append(f"ncu's CSV lacks {', '.join(missing)}: shown as -\n")
    paired = len(kernels) == len(launches)
    if not paired:
        out.append(f"ncu profiled {len(kernels)} verify kernels, the program printed {len(launches)} runs: "
                   "the rows are in launch order, unlabelled\n")
    out.append("| section | mode | HV | T | batch | state | member | us | DRAM GB/s | DRAM % peak | occupancy % | "
               "SM % peak | grid | registers |")
    out.append("|---|---|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for i, k in enumerate(kernels):
        v = {m: number(k.get(m, "")) for m in METRICS}
        label = launches[i][:7] if paired else ("-",) * 7

        def show(x, fmt):
            return "-" if x is None else format(x, fmt)

        ns = v["gpu__time_duration.sum"]
        moved = None
        if ns and v["dram__bytes_read.sum"] is not None and v["dram__bytes_write.sum"] is not None:
            moved = (v["dram__bytes_read.sum"] + v["dram__bytes_write.sum"]) / ns  # bytes per ns = GB/s
        out.append("| " + " | ".join(label) + " | " + " | ".join([
            show(None if ns is None else ns / 1e3, ".1f"), show(moved, ".0f"),
            show(v["dram__throughput.avg.pct_of_peak_sustained_elapsed"], ".0f"),
            show(v["sm__warps_active.avg.pct_of_peak_sustained_active"], ".0f"),
            show(v["sm__throughput.avg.pct_of_peak_sustained_elapsed"], ".0f"),
            show(v["launch__grid_size"], ".0f"), show(v["launch__registers_per_thread"], ".0f")]) + " |")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ncu_csv")
    ap.add_argument("program_output")
    ap.add_argument("--md", help="also write the table here")
    ap.add_argument("--dry-run", action="store_true", help="check the arguments only (gpu_check.sh's dry run)")
    args = ap.parse_args()
    if args.dry_run:
        return 0
    with open(args.ncu_csv, errors="replace") as f:
        kernels = kernel_rows(f.read().splitlines())
    with open(args.program_output, errors="replace") as f:
        launches = runs(f.read().splitlines())
    if not kernels:
        print(f"no kernel rows in {args.ncu_csv} (ncu's raw CSV page)", file=sys.stderr)
        return 1
    md = table(kernels, launches)
    sys.stdout.write(md)
    if args.md:
        with open(args.md, "w") as f:
            f.write(md)
    return 0 if len(kernels) == len(launches) else 1


if __name__ == "__main__":
    sys.exit(main())
