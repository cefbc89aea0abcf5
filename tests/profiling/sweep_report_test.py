#!/usr/bin/env python3
"""profiling/sweep_report.py on made-up sweep and fla_peer tables: the sweep's tables give each shape's
library and fastest member, split a chain tile's time and a round's layer from their probes' rows, and
average each member against the library by batch; each aim is judged from the rows it names, a member that gave other bits than the library is never the fastest, a run without FLA's table
still reports the sweep's own aims, and one stopped part way says which aims it could not judge. Exit 0:
passed, 1: failed."""
import csv
import io
import os
import sys
import tempfile
from contextlib import redirect_stdout

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "profiling"))
import sweep_report  # noqa: E402

SWEEP_COLUMNS = ["section", "mode", "value_heads", "tokens", "batch", "state", "member", "tile_rows", "us", "gbps",
                 "copy_gbps", "fraction_of_copy", "library_us", "speedup_vs_library", "check"]
FLA_COLUMNS = ["value_heads", "tokens", "batch", "kdagraph_cold_us", "fla_cold_us"]
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)


def row(section, member, us, check_="bitwise", mode="fused-accept", hv=32, t=4, b=32, fraction=0.5, library_us=0,
        tile_rows=16):
    return {"section": section, "mode": mode, "value_heads": hv, "tokens": t, "batch": b, "state": "f32", "member": member,
            "tile_rows": tile_rows, "us": us, "gbps": 0, "copy_gbps": 4000, "fraction_of_copy": fraction,
            "library_us": library_us, "speedup_vs_library": 0, "check": check_}


def write(path, columns, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns)
        w.writeheader()
        for r in rows:
            w.writerow({c: r.get(c, 0) for c in columns})


def run(sweep_rows, fla_rows):
    d = tempfile.mkdtemp(prefix="sweep_report_")
    write(os.path.join(d, "s.csv"), SWEEP_COLUMNS, sweep_rows)
    args = ["--sweep", os.path.join(d, "s.csv"), "--md", os.path.join(d, "r.md")]
    if fla_rows is not None:
        write(os.path.join(d, "f.csv"), FLA_COLUMNS, fla_rows)
        args += ["--fla", os.path.join(d, "f.csv")]
    with redirect_stdout(io.StringIO()):
        rc = sweep_report.main(args)
    check(rc == 0, f"exit {rc}")
    return open(os.path.join(d, "r.md")).read()


def aim_line(text, start):
    return next((line for line in text.splitlines() if line.startswith("| " + start)), "")


sweep = [
    # batch 32: the library at 90% of copy, a faster member that gave other bits, a slower exact one.
    # The wide tile's probes: its prologue alone, and the tile without its state stores.
    row("chain", "library", 100.0, "library", fraction=0.90, library_us=100.0),
    row("chain", "rows64-broken", 50.0, "DIFFERS (3 words)", fraction=1.8, library_us=100.0),
    row("chain", "rows64-lanes16-R4-w8-b2", 80.0, fraction=1.1, library_us=100.0),
    row("chain", "rows64-lanes16-R4-w8-b2-prologue", 20.0, "probe", fraction=4.4, library_us=100.0, tile_rows=64),
    row("chain", "rows64-lanes16-R4-w8-b2-nostores", 50.0, "probe", fraction=1.8, library_us=100.0, tile_rows=64),
    # batch 128: the library at 80% of copy.
    row("chain", "library", 400.0, "library", b=128, fraction=0.80),
    row("chain", "rows16-lanes32-R4-w4-b4-post", 300.0, "err 1.0e-03", b=128, fraction=1.07, library_us=400.0),
    row("chain", "rows64-lanes16-R4-w8-b2", 500.0, b=128, fraction=0.64, library_us=400.0),
    row("modes", "library", 100.0, "library", mode="fused-accept", b=64, hv=16),
    row("modes", "library", 50.0, "library", mode="replay", b=64, hv=16),
    # replay: a persistent member faster than the library, and one that differs faster still.
    row("modes", "rows16-lanes32-R4-w4-b4-persistent", 40.0, mode="replay", b=64, hv=16),
    row("modes", "rows16-broken", 10.0, "DIFFERS (1 words)", mode="replay", b=64, hv=16),
    row("conv", "library", 9.0, "library", mode="fused-accept", hv=16, t=2, b=1),
    row("conv", "unfused", 10.0, "-", mode="fused-accept", hv=16, t=2, b=1),
    row("conv", "rows64-lanes16-R4-w8-b1", 8.0, mode="fused-accept", hv=16, t=2, b=1),
    row("tree", "library", 11.0, "library", hv=16, t=8, b=1),
    row("tree", "chain", 10.0, "-", hv=16, t=8, b=1),
    # L = 20 rounds at batch 1: with the conv fused, a member faster than the library, one that differs
    # faster still, the two launches, and the floor and prologue probe, faster than any kernel that
    # computes the verify; without it, the library alone, and its floor.
    row("round-conv", "library", 170.0, "library", hv=16, t=2, b=1),
    row("round-conv", "rows16-lanes16-R2-w4-b3", 100.0, hv=16, t=2, b=1),
    row("round-conv", "rows16-broken", 50.0, "DIFFERS (9 words)", hv=16, t=2, b=1),
    row("round-conv", "unfused", 90.0, hv=16, t=2, b=1),
    row("round-conv", "floor", 40.0, "floor", hv=16, t=2, b=1),
    row("round-conv", "rows64-lanes16-R4-w8-b1-prologue", 30.0, "probe", hv=16, t=2, b=1, tile_rows=64),
    row("round-conv", "rows16-lanes32-R4-w4-b3-prologue", 60.0, "probe", hv=16, t=2, b=1),
    row("round", "library", 160.0, "library", hv=16, t=4, b=1),
    row("round", "floor", 40.0, "floor", hv=16, t=4, b=1),
    {"section": "end", "check": "complete"},
]
fla = [{"value_heads": 32, "tokens": 4, "batch": 32, "kdagraph_cold_us": 100.0, "fla_cold_us": 140.0},
       {"value_heads": 32, "tokens": 4, "batch": 128, "kdagraph_cold_us": 400.0, "fla_cold_us": 480.0}]
text = run(sweep, fla)
check("| 32 | 4 | 32 | 140.0 | 100.0 | 1.40 | 100.0 | rows64-lanes16-R4-w8-b2 | 80.0 | 1.75 |" in text,
      "batch 32: the exact member at 80 us is the fastest, not the one that differs:\n" + text)
check("rows16-lanes32-R4-w4-b4-post | 300.0 | 1.60 |" in text, "batch 128: a post_state member counts:\n" + text)
check(aim_line(text, "kdagraph / FLA").endswith("| miss |") and "library 1.20x" in aim_line(text, "kdagraph / FLA"),
      "480 / 400 = 1.2 misses 1.3:\n" + text)
check("library 80%" in aim_line(text, "verify bandwidth") and aim_line(text, "verify bandwidth").endswith("| miss |"),
      "the worst library fraction is batch 128's 80%:\n" + text)
check("2.00x" in aim_line(text, "replay / fused accept") and aim_line(text, "replay / fused accept").endswith("| met |"),
      "replay at 50 us against fused at 100 us:\n" + text)
check("fastest members 2.50x (replay rows16-lanes32-R4-w4-b4-persistent, fused accept library)"
      in aim_line(text, "replay / fused accept"), "the fastest exact replay member, 100 / 40:\n" + text)
check("0.90" in aim_line(text, "fused conv") and aim_line(text, "fused conv").endswith("| miss |"), "9 / 10 > 0.85:\n" + text)
check("fastest member 0.80 (rows64-lanes16-R4-w8-b1)" in aim_line(text, "fused conv"),
      "the fastest conv member against the two launches, not the unfused row itself:\n" + text)
check("1.10" in aim_line(text, "top-4 tree") and aim_line(text, "top-4 tree").endswith("| met |"), "11 / 10 <= 1.2:\n" + text)
check("3 of 5 aims missed" in text, "five aims, three missed:\n" + text)
# 170 / 20 = 8.5 a layer: the floor 40 / 20, the 16-row prologue (60 - 40) / 20 (not the 64-row one), the
# rest (170 - 60) / 20.
check("| fused | 2 | 170.0 | 8.50 | 2.00 | 1.00 | 5.50 | rows16-lanes16-R2-w4-b3 | 100.0 | 1.70 | 90.0 | 120 | 20 |"
      in text, "the conv round: the layer split, and the fastest exact kernel (not the two launches, nor the member "
      "that differs, nor the floor or a probe) leaves 20 of the 120 us aim:\n" + text)
check("| none | 4 | 160.0 | 8.00 | 2.00 | - | - | library | 160.0 | 1.00 | - | 150 | -10 |" in text,
      "the round without the conv: no prologue row, so no split past the floor; over the aim by 10 us:\n" + text)
# The sweep's tables.
check("cudaMemcpy D2D (read + write) 4000 GB/s" in text, "the copy bandwidth heads the tables:\n" + text)
check("| 32 | 4 | 32 | f32 | 100.0 | 90% | rows64-lanes16-R4-w8-b2 | 80.0 | 110% | 1.25 | - | - | 20.0 | 30.0 |" in text,
      "batch 32: 100 / 80 against the fastest exact member, the wide tile's prologue 20 and stores 80 - 50:\n" + text)
check("| rows64-lanes16-R4-w8-b2 | - | - | 1.25 | 0.80 | 1.00 | ok |" in text,
      "the wide tile: 100 / 80 at batch 32, 400 / 500 at batch 128, their geometric mean 1:\n" + text)
check("| rows64-broken | - | - | 2.00 | - | 2.00 | DIFFERS on some shapes |" in text,
      "a member that differs is averaged and marked:\n" + text)
check("| 16 | 4 | 64 | f32 | replay | 50.0 | 50% | rows16-lanes32-R4-w4-b4-persistent | 40.0 | 2.00 |" in text,
      "replay's library and fastest exact member, fused accept's library 100 / replay's 50:\n" + text)
check("| 16 | 4 | 64 | f32 | fused-accept | 100.0 | 50% | library | 100.0 | - |" in text, "fused accept has no ratio:\n" + text)
check("| 16 | 2 | 1 | 10.0 | 9.0 | 0.90 | rows64-lanes16-R4-w8-b1 | 8.0 |" in text, "the conv's table:\n" + text)
check("| 16 | 8 | 1 | 10.0 | 11.0 | 1.10 |" in text, "the trees' table:\n" + text)
check("3 member run(s) gave other bits than the library: a bug" in text, "the three DIFFERS rows counted:\n" + text)

without_fla = run(sweep, None)
check("No fla_peer.csv" in without_fla and aim_line(without_fla, "kdagraph / FLA") == "",
      "no FLA aim without FLA's table:\n" + without_fla)
check(aim_line(without_fla, "verify bandwidth") != "", "the sweep's aims stand without FLA:\n" + without_fla)

# fla_peer stopped at its cap (or failed a shape) after batch 32: the FLA aim, met there (1.4x), is met
# on that shape only, and the shape without FLA's time is named.
fla_partial = run(sweep, fla[:1])
check(aim_line(fla_partial, "kdagraph / FLA").endswith("| met so far (the run stopped early) |")
      and "library 1.40x" in aim_line(fla_partial, "kdagraph / FLA") and "(1 of 2 shapes)" in aim_line(fla_partial, "kdagraph / FLA"),
      "an FLA table without batch 128 meets the aim on batch 32 only:\n" + fla_partial)
check("no row for 1 of the sweep's shapes (HV 32 T 4 batch 128)" in fla_partial, "the missing shape named:\n" + fla_partial)
check("the others met only on the rows measured" in fla_partial, "the summary says met so far:\n" + fla_partial)
check(aim_line(text, "kdagraph / FLA").find("shapes)") < 0 and "no row for" not in text, "a whole FLA table is not partial:\n" + text)
fla_none = run(sweep, [dict(fla[0], batch=8)])
check(aim_line(fla_none, "kdagraph / FLA").endswith("| not measured |") and "fla_peer.csv" in aim_line(fla_none, "kdagraph / FLA"),
      "an FLA table with none of the sweep's shapes measures nothing:\n" + fla_none)

# A sweep stopped at its cap after the modes and the conv (its CSV is written row by row): the aims it
# has no rows for are said to be unmeasured, neither met nor missed.
partial = run([r for r in sweep if r["section"] in ("modes", "conv")], fla)
for aim in ("kdagraph / FLA", "verify bandwidth", "top-4 tree"):
    check(aim_line(partial, aim).endswith("| not measured |"), f"{aim} has no rows:\n" + partial)
check("1 of 5 aims missed, 3 not measured, the others met only" in partial, "the conv missed, three unmeasured:\n" + partial)
check(aim_line(partial, "replay / fused accept").endswith("| met so far (the run stopped early) |"),
      "without the end row, a met aim is met on the rows measured only:\n" + partial)

for f in failures:
    print("FAILED:", f)
print("sweep_report_test:", "failed" if failures else "passed")
sys.exit(1 if failures else 0)
