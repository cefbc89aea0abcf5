#!/usr/bin/env python3
"""The verify sweep's report: its tables, and issue 31's aims judged on one GPU check's run, from the
sweep's CSV (bench_verify_sweep --csv) beside flash-linear-attention's Triton verify (fla_peer.py --csv)
on the same shapes. The sweep's only report: bench_verify_sweep measures and writes the CSV.

The tables (what the sweep measured, each shape's library and fastest member): chains with the library
against the fastest member and two tiles' time split into prologue and state stores (the -prologue
probe; the full member less its -nostores probe); each chain member against the library by batch
(geometric mean of library / member over the chain grid); the modes; the conv fused in against two
launches; trees against chains; and L = 20 rounds at batch 1, a layer split into the floor (launches
that only wait and trigger), the 16-row tile's prologue less the floor, and the rest.

    sweep_report.py --sweep verify_sweep.csv [--fla fla_peer.csv] [--md FILE] [--dry-run]

The aims. Per shape of the fp32-state chain grid (fused accept): the library's verify and the sweep's fastest
member (one that computes the verify: a member with the library's formula only if it gave the library's
bits), each against FLA. Two harnesses time the library: the sweep (CUDA events around one launch,
bench_verify_sweep.cu) and fla_peer (CUDA-graph replays from Python, beside FLA's own); the speedup
judged for the library is fla_peer's, same harness on both sides; the fastest member's is the sweep's
time against fla_peer's FLA time, and says so. Then the kernel-level ratios of the sweep: verify
bandwidth at batch >= 32, HV 32, T 4 against the copy bandwidth of the same run; replay against fused
accept at batch 64, T 4; the conv fused in against two launches at batch 1 and 8; top-4 trees against
chains at T 8. The aims are judged on the library's verify; beside the replay and conv ratios stands
what the fastest members give (a member that meets an aim the library misses is a candidate for its
tile). The whole-round aims (L = 20 rounds at batch 1; replay's round) are round_bench's; beside them the
sweep's rounds (L = 20 layers of one kernel in one graph with PDL) say how much of the batch-1 round's aim
the verify alone takes with each kernel, and what is left for the rest of the round.
Exit status: 0 the report was written (aims missed are results, not errors); 1 an input is missing or
malformed.
"""
import argparse
import csv
import math
import os
import sys

AIM_FLA = 1.3        # kdagraph / FLA, every shape
AIM_COPY = 0.85      # verify bandwidth at batch >= 32, HV 32, T 4, against the copy of the same run
AIM_REPLAY = 1.8     # replay / fused accept, batch 64, T 4 (issue 31 judges the whole round)
AIM_CONV = 0.85      # fused conv + verify / the two launches, batch 1 to 8
AIM_TREE = 1.2       # top-4 tree / chain, T 8
AIM_ROUND_US = {2: 120.0, 4: 150.0}  # L = 20 fused-accept round at batch 1, by T (round_bench's whole round)
# An aim whose rows the sweep's CSV lacks (the CSV is written row by row: a sweep stopped at its cap).
NOT_MEASURED = "no rows for it in the sweep's CSV (stopped at its cap?)"
NO_FLA_ROWS = "no row in fla_peer.csv for the sweep's shapes (stopped at its cap?)"
END_SECTION = "end"  # the CSV's last row, written once every shape has run (SweepCsv::finish)
ROUND_LAYERS = 20    # the layers of a round shape (kSweepRoundLayers, profiling/verify_sweep.h)
NARROW, WIDE = "rows16-lanes32-R4-w4-b4", "rows64-lanes16-R4-w8-b2"  # the chains' split tiles


def read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def exact_or_formula(row):
    check = row["check"]
    return check in ("library", "bitwise") or check.startswith("err")


def fastest(rows):
    """The fastest kernel that computes the verify (a round's two launches a layer, "unfused", aside)."""
    ok = [r for r in rows if exact_or_formula(r) and r["member"] != "unfused"]
    return min(ok, key=lambda r: float(r["us"])) if ok else None


def verdict(ok, complete=True):
    if ok is None:
        return "not measured"
    if not ok:
        return "miss"  # a miss on the rows measured is a miss on the whole run
    return "met" if complete else "met so far (the run stopped early)"


def or_unmeasured(found, name):
    """The aims a section's rows judged, or the aim `name` as not measured where it had none."""
    return found or [(name, NOT_MEASURED, None)]


def by_shape(sweep, section, **match):
    out = {}
    for r in sweep:
        if r["section"] != section or any(r[k] != str(v) for k, v in match.items()):
            continue
        out.setdefault((int(r["value_heads"]), int(r["tokens"]), int(r["batch"]), r["mode"], r["state"]), []).append(r)
    return out


def member(rows, name):
    return next((r for r in rows if r["member"] == name), None)


def us(row):
    return float(row["us"])


def copy_pct(row):
    return f"{100 * float(row['fraction_of_copy']):.0f}%"


def tables(sweep):
    """The sweep's own tables: what it measured, shape by shape."""
    measured = [r for r in sweep if r["section"] != END_SECTION]
    copy = next((float(r["copy_gbps"]) for r in measured if r["copy_gbps"]), 0.0)
    lines = [f"## The verify sweep: cudaMemcpy D2D (read + write) {copy:.0f} GB/s; cold medians (us)", "",
             "K = V = 128, H = HV, bf16 io, gate, beta logit and L2 norm in the kernel. `fastest`: the fastest kernel "
             "that computes the verify (no probe; a member with the library's formula only if it gave the library's "
             "bits).", "",
             "### Chains, fused accept: the library and the fastest member", "",
             "| HV | T | batch | state | library us | % copy | fastest | us | % copy | library / fastest | "
             "narrow prologue us | narrow stores us | wide prologue us | wide stores us |",
             "|---:|---:|---:|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for (hv, t, b, _, state), rows in by_shape(sweep, "chain").items():
        lib, best = member(rows, "library"), fastest(rows)
        if lib is None or best is None:
            continue

        # Prologue: the prologue probe's time; stores: the full member's time less the no-stores probe's.
        def split(base, stores):
            full, probe = member(rows, base), member(rows, base + ("-nostores" if stores else "-prologue"))
            if full is None or probe is None:
                return "-"
            return f"{us(full) - us(probe) if stores else us(probe):.1f}"
        lines.append(f"| {hv} | {t} | {b} | {state} | {us(lib):.1f} | {copy_pct(lib)} | {best['member']} | {us(best):.1f} | "
                     f"{copy_pct(best)} | {us(lib) / us(best):.2f} | {split(NARROW, False)} | {split(NARROW, True)} | "
                     f"{split(WIDE, False)} | {split(WIDE, True)} |")

    lines += ["", "### Each member against the library over the chain grid (geometric mean of library / member)", "",
              "| member | batch 1 | batch 8 | batch 32 | batch 128 | all | check |", "|---|---:|---:|---:|---:|---:|---|"]
    by_member = {}
    for r in sweep:
        if r["section"] != "chain" or r["member"] == "library":
            continue
        m = by_member.setdefault(r["member"], {"logs": {}, "differs": False})
        m["differs"] |= r["check"].startswith("DIFFERS")
        if float(r["library_us"]) > 0 and us(r) > 0:
            m["logs"].setdefault(int(r["batch"]), []).append(math.log(float(r["library_us"]) / us(r)))
    for name, m in by_member.items():
        every = [x for logs in m["logs"].values() for x in logs]
        if not every:
            continue
        cells = [f"{math.exp(sum(m['logs'][b]) / len(m['logs'][b])):.2f}" if b in m["logs"] else "-" for b in (1, 8, 32, 128)]
        lines.append(f"| {name} | {' | '.join(cells)} | {math.exp(sum(every) / len(every)):.2f} | "
                     f"{'DIFFERS on some shapes' if m['differs'] else 'ok'} |")

    lines += ["", "### Modes (replay folds its slots' pending records first: R = 3 T, flushing at T + 1 pending, every "
              "round (flush0) or only when full (lazy))", "",
              "| HV | T | batch | state | mode | library us | % copy | fastest | us | fused-accept / replay, library |",
              "|---:|---:|---:|---|---|---:|---:|---|---:|---:|"]
    modes = by_shape(sweep, "modes")
    for (hv, t, b, mode, state), rows in modes.items():
        lib, best = member(rows, "library"), fastest(rows)
        if lib is None or best is None:
            continue
        ratio = "-"
        fused = member(modes.get((hv, t, b, "fused-accept", state), []), "library")
        if mode.startswith("replay") and fused is not None:
            ratio = f"{us(fused) / us(lib):.2f}"
        lines.append(f"| {hv} | {t} | {b} | {state} | {mode} | {us(lib):.1f} | {copy_pct(lib)} | {best['member']} | "
                     f"{us(best):.1f} | {ratio} |")

    lines += ["", "### The short conv fused in (C = 6144, W 4): one kernel against two launches", "",
              "| HV | T | batch | unfused us | library fused us | fused / unfused | fastest | us |",
              "|---:|---:|---:|---:|---:|---:|---|---:|"]
    for (hv, t, b, _, _), rows in by_shape(sweep, "conv").items():
        lib, unfused, best = member(rows, "library"), member(rows, "unfused"), fastest(rows)
        if lib is None or unfused is None or best is None:
            continue
        lines.append(f"| {hv} | {t} | {b} | {us(unfused):.1f} | {us(lib):.1f} | {us(lib) / us(unfused):.2f} | "
                     f"{best['member']} | {us(best):.1f} |")

    lines += ["", "### Top-4 token trees against chains, the library's kernels", "",
              "| HV | T | batch | chain us | tree us | tree / chain |", "|---:|---:|---:|---:|---:|---:|"]
    for (hv, t, b, _, _), rows in by_shape(sweep, "tree").items():
        tree, chain = member(rows, "library"), member(rows, "chain")
        if tree is not None and chain is not None:
            lines.append(f"| {hv} | {t} | {b} | {us(chain):.1f} | {us(tree):.1f} | {us(tree) / us(chain):.2f} |")

    differs = sum(r["check"].startswith("DIFFERS") for r in measured)
    lines += ["", f"{differs} member run(s) gave other bits than the library"
              f"{': a bug, fix it before reading the times' if differs else ''}.", ""]
    return lines


def report(sweep, fla):
    lines = tables(sweep) + ["## Issue 31's aims on this run", ""]
    aims, partial_aims = [], set()  # partial: judged on some of its shapes only
    chains = by_shape(sweep, "chain", state="f32")
    if fla is not None:
        peer = {(int(r["value_heads"]), int(r["tokens"]), int(r["batch"])): r for r in fla}
        lines += ["Chains, fp32 state, fused accept, cold medians (us). Library / FLA: fla_peer's two times (one harness); "
                  "fastest / FLA: the sweep's fastest member against fla_peer's FLA time (two harnesses).", "",
                  "| HV | T | batch | FLA | library (fla_peer) | library / FLA | library (sweep) | fastest member | us | "
                  "fastest / FLA |", "|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|"]
        worst_lib = worst_best = math.inf
        compared, without_fla = 0, []
        for (hv, t, b, _, _), rows in sorted(chains.items()):
            p = peer.get((hv, t, b))
            lib, best = member(rows, "library"), fastest(rows)
            if p is None and lib is not None:
                without_fla.append(f"HV {hv} T {t} batch {b}")
            if p is None or lib is None or best is None:
                continue
            compared += 1
            fla_us, kd_us = float(p["fla_cold_us"]), float(p["kdagraph_cold_us"])
            lib_speedup, best_speedup = fla_us / kd_us, fla_us / float(best["us"])
            worst_lib, worst_best = min(worst_lib, lib_speedup), min(worst_best, best_speedup)
            lines.append(f"| {hv} | {t} | {b} | {fla_us:.1f} | {kd_us:.1f} | {lib_speedup:.2f} | {float(lib['us']):.1f} | "
                         f"{best['member']} | {float(best['us']):.1f} | {best_speedup:.2f} |")
        name = f"kdagraph / FLA, every shape (>= {AIM_FLA}x)"
        if math.isfinite(worst_lib):
            aims.append((name, f"library {worst_lib:.2f}x, fastest member {worst_best:.2f}x at worst"
                         f"{f' ({compared} of {compared + len(without_fla)} shapes)' if without_fla else ''}",
                         worst_lib >= AIM_FLA))
        else:
            aims.append((name, NOT_MEASURED if not without_fla else NO_FLA_ROWS, None))
        lines.append("")
        if without_fla:
            # fla_peer writes its CSV row by row: a run stopped at its cap, or a shape that failed, leaves
            # shapes the sweep measured without FLA's time. An aim met on the others is not met on all.
            partial_aims.add(name)
            lines += [f"fla_peer.csv has no row for {len(without_fla)} of the sweep's shapes ({', '.join(without_fla)}): "
                      "it stopped early or a shape failed (its log says which).", ""]
    else:
        lines += ["No fla_peer.csv: the FLA comparison waits for a run with the fla-core wheel.", ""]

    bandwidth = [(rows, b) for (hv, t, b, _, _), rows in chains.items() if hv == 32 and t == 4 and b >= 32]
    if bandwidth:
        fractions = [float(member(rows, "library")["fraction_of_copy"]) for rows, _ in bandwidth if member(rows, "library")]
        best = [float(fastest(rows)["fraction_of_copy"]) for rows, _ in bandwidth if fastest(rows)]
        aims.append((f"verify bandwidth, batch >= 32, HV 32, T 4 (>= {AIM_COPY:.0%} of copy)",
                     f"library {min(fractions):.0%}, fastest {min(best):.0%} at worst", min(fractions) >= AIM_COPY))
    else:
        aims.append((f"verify bandwidth, batch >= 32, HV 32, T 4 (>= {AIM_COPY:.0%} of copy)", NOT_MEASURED, None))
    modes = by_shape(sweep, "modes", tokens=4, batch=64, state="f32")
    found = []
    for hv in (16, 32):
        replay, fused = modes.get((hv, 4, 64, "replay", "f32")), modes.get((hv, 4, 64, "fused-accept", "f32"))
        if replay and fused and member(replay, "library") and member(fused, "library"):
            ratio = float(member(fused, "library")["us"]) / float(member(replay, "library")["us"])
            fast_replay, fast_fused = fastest(replay), fastest(fused)
            best = float(fast_fused["us"]) / float(fast_replay["us"])
            found.append((f"replay / fused accept, batch 64, T 4, HV {hv}, one layer (>= {AIM_REPLAY}x; the aim is the round's)",
                          f"{ratio:.2f}x; fastest members {best:.2f}x (replay {fast_replay['member']}, "
                          f"fused accept {fast_fused['member']})", ratio >= AIM_REPLAY))
    aims += or_unmeasured(found, f"replay / fused accept, batch 64, T 4 (>= {AIM_REPLAY}x)")
    found = []
    for key, rows in sorted(by_shape(sweep, "conv").items()):
        lib, unfused = member(rows, "library"), member(rows, "unfused")
        if lib and unfused:
            ratio = float(lib["us"]) / float(unfused["us"])
            fast = fastest(rows)
            found.append((f"fused conv / unfused, one layer, T {key[1]}, batch {key[2]} (<= {AIM_CONV})",
                          f"{ratio:.2f}; fastest member {float(fast['us']) / float(unfused['us']):.2f} ({fast['member']})",
                          ratio <= AIM_CONV))
    aims += or_unmeasured(found, f"fused conv / unfused, one layer (<= {AIM_CONV})")
    found = []
    for key, rows in sorted(by_shape(sweep, "tree").items()):
        tree, chain = member(rows, "library"), member(rows, "chain")
        if tree and chain:
            ratio = float(tree["us"]) / float(chain["us"])
            found.append((f"top-4 tree / chain, one layer, T 8, batch {key[2]} (<= {AIM_TREE})", f"{ratio:.2f}",
                          ratio <= AIM_TREE))
    aims += or_unmeasured(found, f"top-4 tree / chain, one layer, T 8 (<= {AIM_TREE})")
    rounds = []
    for section, conv in (("round-conv", "fused"), ("round", "none")):
        for (_, t, _, _, _), rows in sorted(by_shape(sweep, section).items()):
            lib, best, unfused = member(rows, "library"), fastest(rows), member(rows, "unfused")
            if lib is None or best is None:
                continue
            lib_us, best_us = float(lib["us"]), float(best["us"])
            floor_row = member(rows, "floor")
            # The library's batch-1 tile (16 rows) cut before its token loop; the last such row, as the sweep ran it.
            prologue = [r for r in rows if int(r["tile_rows"]) == 16 and r["member"].endswith("-prologue")]
            prologue_row = prologue[-1] if prologue else None

            def per_layer(r, minus=0.0):
                return "-" if r is None else f"{(float(r['us']) - minus) / ROUND_LAYERS:.2f}"
            floor_us = per_layer(floor_row)
            prologue_us = per_layer(prologue_row, float(floor_row["us"])) if floor_row else "-"
            rest_us = per_layer(lib, float(prologue_row["us"])) if prologue_row else "-"
            unfused_us = f"{float(unfused['us']):.1f}" if unfused else "-"
            aim = AIM_ROUND_US.get(t)
            aim_cols = f"{aim:.0f} | {aim - best_us:.0f}" if aim else "- | -"
            rounds.append(f"| {conv} | {t} | {lib_us:.1f} | {lib_us / ROUND_LAYERS:.2f} | {floor_us} | {prologue_us} | "
                          f"{rest_us} | {best['member']} | {best_us:.1f} | {lib_us / best_us:.2f} | {unfused_us} | "
                          f"{aim_cols} |")
    if rounds:
        lines += [f"The verify's part of an L = {ROUND_LAYERS} round at batch 1, HV 16, fp32 state (the sweep's rounds: "
                  f"one kernel's {ROUND_LAYERS} launches in one graph with PDL, cold, us). A layer of the library's round "
                  "split three ways (us a layer): the floor, launches of the library's grid whose blocks only wait and "
                  "trigger; the prologue, the 16-row tile (the library's at batch 1) cut before its token loop, less the "
                  "floor; the rest, the token loop and its stores. The round's aim is round_bench's whole round; what "
                  "the fastest kernel leaves of it is the time left for the index build, the drafter and the sampler.", "",
                  "| conv | T | library | us a layer | floor | prologue | rest | fastest | us | library / fastest | "
                  "unfused (conv + verify) | round aim | left of it |",
                  "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|"] + rounds + [""]
    # bench_verify_sweep writes its last row (section "end") only when every shape has run.
    complete = any(r["section"] == END_SECTION for r in sweep)
    if not complete:
        lines += ["The sweep's CSV has no end row: the run stopped before its last shape (at its cap?). An aim met "
                  "on the rows it reached is not met on the run's shapes.", ""]
    lines += ["| aim | measured | verdict |", "|---|---|---|"]
    lines += [f"| {name} | {value} | {verdict(ok, complete and name not in partial_aims)} |" for name, value, ok in aims]
    missed, unmeasured = sum(ok is False for _, _, ok in aims), sum(ok is None for _, _, ok in aims)
    so_far = not complete or any(ok and name in partial_aims for name, _, ok in aims)
    lines += ["", f"{missed} of {len(aims)} aims missed, {unmeasured} not measured"
              f"{', the others met only on the rows measured' if so_far else ''}; the L = 20 round aims are "
              "round_bench's."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweep", required=True, help="bench_verify_sweep --csv")
    ap.add_argument("--fla", help="fla_peer.py --csv")
    ap.add_argument("--md", help="write the report here too")
    ap.add_argument("--dry-run", action="store_true", help="check the arguments only (gpu_check.sh's dry run)")
    args = ap.parse_args(argv)
    if args.dry_run:
        return 0
    if not os.path.isfile(args.sweep):
        print(f"sweep_report: no sweep results at {args.sweep} (did the verify_sweep stage run?)")
        return 1
    fla = read(args.fla) if args.fla and os.path.isfile(args.fla) else None
    text = report(read(args.sweep), fla)
    print(text)
    if args.md:
        with open(args.md, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
