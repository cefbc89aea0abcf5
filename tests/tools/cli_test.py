#!/usr/bin/env python3
"""Tests of the `kdagraph` command line, one ctest per case (tests/tools/CMakeLists.txt asks --list).

    cli_test.py --cli PATH [--recorder LIB] [--nvtx-off-cli PATH] [--nvtx-compiled-out]
                [--drift-plot profiling/drift_plot.py] [--work DIR] CASE

Exit 0: passed; 1: failed (with the reason); 77: skipped (does not apply to this build or machine).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

SKIP = 77
CASES = {}
# Signs of a crash instead of a clean refusal.
CRASH_MARKERS = ("terminate called", "what():", "Aborted", "Segmentation fault", "Traceback", "core dumped")


class Failure(Exception):
    pass


class Skip(Exception):
    pass


def case(fn):
    CASES[fn.__name__] = fn
    return fn


def run(args, cli=None, env=None, timeout=120):
    cmd = [cli or ARGS.cli] + args
    full_env = dict(os.environ)
    full_env.update(env or {})
    p = subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=timeout)
    if p.returncode < 0:
        raise Failure(f"{' '.join(cmd)} died of signal {-p.returncode}\n{p.stderr}")
    for marker in CRASH_MARKERS:
        if marker in p.stderr:
            raise Failure(f"{' '.join(cmd)} crashed ('{marker}'):\n{p.stderr}")
    return p


def expect_ok(args, **kw):
    p = run(args, **kw)
    if p.returncode != 0:
        raise Failure(f"kdagraph {' '.join(args)} exited {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return p


def expect_refused(args, names, status=2):
    """Non-zero exit `status` and a one-line reason on stderr naming each of `names`."""
    p = run(args)
    if p.returncode != status:
        raise Failure(f"kdagraph {' '.join(args)} exited {p.returncode}, expected {status}\nstderr:\n{p.stderr}")
    for name in names:
        if name not in p.stderr:
            raise Failure(f"kdagraph {' '.join(args)}: the message does not name '{name}':\n{p.stderr}")
    print(p.stderr.strip())


# ---------------------------------------------------------------------------------------------------
# Help and bad command lines
# ---------------------------------------------------------------------------------------------------

@case
def help_texts():
    for args in (["--help"], ["run", "--help"], ["bench", "--help"]):
        p = expect_ok(args)
        if "usage: kdagraph" not in p.stdout:
            raise Failure(f"kdagraph {' '.join(args)} printed no usage:\n{p.stdout}")
    for option in ("--preset", "--draft", "--batch", "--mode", "--exec", "--backend", "--accept-rate", "--check", "--json"):
        if option not in expect_ok(["run", "--help"]).stdout:
            raise Failure(f"kdagraph run --help does not list {option}")


ERRORS = {
    "error_unknown_option": (["run", "--frobnicate"], ["--frobnicate", "--batch"]),
    "error_batch_zero": (["run", "--batch", "0"], ["--batch", "0", "[1, 4096]"]),
    "error_accept_rate": (["run", "--accept-rate", "1.5"], ["--accept-rate", "1.5", "[0, 1]"]),
    "error_mode": (["run", "--mode", "bogus"], ["--mode", "bogus", "two-phase", "fused-accept"]),
    "error_rounds_not_a_number": (["run", "--rounds", "abc"], ["--rounds", "abc"]),
    "error_missing_value": (["run", "--rounds"], ["--rounds"]),
    "error_exec": (["run", "--exec", "fast"], ["--exec", "eager", "graph"]),
    "error_backend": (["run", "--backend", "tpu"], ["--backend", "auto", "cpu", "cuda"]),
    "error_draft_negative": (["run", "--draft", "-1"], ["--draft", "-1"]),
    "error_dtype": (["run", "--dtype", "f64"], ["--dtype", "f32", "bf16", "f16"]),
    "error_state_dtype": (["run", "--state-dtype", "f64"], ["--state-dtype", "f32", "bf16", "f16"]),
    "error_preset": (["run", "--preset", "huge"], ["--preset", "tiny", "kimi-linear-48b"]),
    "error_heads_grouping": (["run", "--heads", "3", "--value-heads", "4"], ["--value-heads", "--heads"]),
    "error_slots_below_batch": (["run", "--batch", "4", "--slots", "2"], ["--slots", "--batch"]),
    "error_flag_with_value": (["run", "--check=yes"], ["--check"]),
    "error_stray_argument": (["run", "fast"], ["fast"]),
    "error_unknown_command": (["frobnicate"], ["frobnicate", "run", "bench", "drift"]),
    "error_no_command": ([], ["run", "bench", "drift"]),
    "error_drift_states": (["drift", "--states", "f32,f64"], ["--states", "f64"]),
    "error_bench_modes": (["bench", "--modes", "two-phase,bogus"], ["--modes", "bogus"]),
    "error_bench_batches": (["bench", "--batches", "1,0"], ["--batches", "0"]),
    "error_bench_sampler": (["bench", "--sampler", "sideways"], ["--sampler", "in", "out"]),
    "error_bench_node_trace_cpu": (["bench", "--backend", "cpu", "--node-trace"], ["--node-trace"]),
    "error_run_graph_memory_copies": (["run", "--graph-memory-copies", "0"], ["--graph-memory-copies", "4096"]),
    "error_run_graph_memory_eager": (["run", "--exec", "eager", "--graph-memory-copies", "4"],
                                     ["--graph-memory-copies", "--exec eager"]),
    # docs/modes.md: the ring holds a round's T records beside up to R - T pending ones (T = 4 by default).
    "error_ring_below_2t": (["run", "--mode", "replay", "--ring", "3"], ["--ring", "ring.records", "3", "[8, "]),
    "error_ring_zero": (["run", "--ring", "0"], ["--ring", "0", "[1, 65536]"]),
    "error_flush_min_above_r_minus_t": (["run", "--mode", "replay", "--ring", "8", "--flush-min", "5"],
                                        ["--flush-min", "ring.flush_min", "5", "[0, 4]"]),
    # The bench checks every point's ring before it times the first.
    "error_bench_ring": (["bench", "--backend", "cpu", "--drafts", "0,3", "--ring", "7"],
                         ["--ring", "ring.records", "7", "[8, "]),
}


def make_error_case(name, args, names):
    def fn():
        expect_refused(args, names)
    fn.__name__ = name
    CASES[name] = fn


for _name, (_args, _names) in ERRORS.items():
    make_error_case(_name, _args, _names)


@case
def error_unwritable_json_file():
    # A run-time error, not a bad command line: exit 1, naming the option.
    path = os.path.join(work_dir(), "no-such-folder", "out.json")
    expect_refused(["run", "--backend", "cpu", "--rounds", "2", "--json-file", path], ["--json-file"], status=1)


@case
def error_cuda_unavailable():
    p = run(["run", "--backend", "cuda", "--rounds", "1"])
    if p.returncode == 0:
        raise Skip("a CUDA device is available here: --backend cuda is not an error")
    if p.returncode != 2 or "--backend" not in p.stderr:
        raise Failure(f"--backend cuda without a device exited {p.returncode}:\n{p.stderr}")
    print(p.stderr.strip())


# ---------------------------------------------------------------------------------------------------
# drift (docs/low_precision.md)
# ---------------------------------------------------------------------------------------------------


@case
def drift_reports_every_configuration_against_fp64():
    """A short drift run: every mode x storage x rounding of each workload, with checkpoints 10 and R; an
    fp32 state within fp32 error of the fp64 recurrence, a 16-bit one within its own (and not exact),
    f16 (11 bits) closer than bf16 (8 bits); the plot script draws the JSON."""
    path = os.path.join(work_dir(), "drift.json")
    p = expect_ok(["drift", "--rounds", "30", "--batch", "2", "--head-dim", "16", "--json", "--json-file", path])
    drift = json.loads(p.stdout)
    with open(path) as f:
        if json.load(f) != drift:
            raise Failure("--json-file differs from --json")
    if [w["name"] for w in drift["workloads"]] != ["typical", "slow", "sparse"]:
        raise Failure(f"workloads: {[w['name'] for w in drift['workloads']]}")
    for w in drift["workloads"]:
        configs = {c["label"]: c for c in w["configurations"]}
        if len(configs) != 15:  # 3 modes x (f32 + 2 dtypes x 2 roundings)
            raise Failure(f"{w['name']}: {sorted(configs)}")
        for label, c in configs.items():
            if [x["round"] for x in c["checkpoints"]] != [10, 30]:
                raise Failure(f"{label}: checkpoints {c['checkpoints']}")
            worst = max(max(x["output_error"], x["state_error"]) for x in c["checkpoints"])
            best = min(min(x["output_error"], x["state_error"]) for x in c["checkpoints"])
            bound, floor = (1e-5, 0.0) if c["state"] == "f32" else (5e-2, 1e-5)
            if not floor <= best and worst <= bound:
                raise Failure(f"{w['name']} {label}: errors {c['checkpoints']} outside [{floor}, {bound}]")
            if not floor < best:
                raise Failure(f"{w['name']} {label}: a 16-bit state matched fp64 exactly: {c['checkpoints']}")
        for mode in ("two-phase", "fused-accept", "replay"):
            f16 = configs[f"{mode} f16 nearest"]["checkpoints"][-1]["state_error"]
            bf16 = configs[f"{mode} bf16 nearest"]["checkpoints"][-1]["state_error"]
            if not f16 < bf16:
                raise Failure(f"{w['name']} {mode}: f16 state error {f16} not below bf16's {bf16}")
    if ARGS.drift_plot:
        q = subprocess.run([sys.executable, ARGS.drift_plot, path, "--out", os.path.join(work_dir(), "drift.png")],
                           capture_output=True, text=True)
        if q.returncode != 0 or not os.path.getsize(os.path.join(work_dir(), "drift.png")):
            raise Failure(f"drift_plot.py failed:\n{q.stderr}")
    print(json.dumps(drift["workloads"][1]["configurations"][1]["checkpoints"]))


# ---------------------------------------------------------------------------------------------------
# run
# ---------------------------------------------------------------------------------------------------

SUMMARY = re.compile(r"^\s{2}(?P<label>[a-z][a-z ]+?)\s{2,}(?P<value>.*)$")


def summary(text):
    """The text summary's `label  value` lines as a dict."""
    out = {}
    for line in text.splitlines():
        m = SUMMARY.match(line)
        if m:
            out[m.group("label").strip()] = m.group("value")
    return out


@case
def run_default():
    """The README's invocation: no options at all (the CPU when there is no GPU)."""
    p = expect_ok(["run"])
    s = summary(p.stdout)
    for label in ("rounds", "tokens accepted", "time per round", "tokens per second", "backend", "mode", "exec"):
        if label not in s:
            raise Failure(f"the summary has no '{label}' line:\n{p.stdout}")
    print(p.stdout)


CPU_ISAS = ("baseline", "avx2", "avx512")


@case
def run_reports_cpu_isa():
    """The summary and the JSON name the instruction set and threads the CPU kernels ran with
    (kernels/cpu_isa.h); KDAGRAPH_CPU_ISA pins a lower set, KDAGRAPH_CPU_THREADS their threads over
    OpenMP's; values they cannot take are refused by name."""
    best = summary(expect_ok(["run", "--backend", "cpu", "--rounds", "3"]).stdout).get("cpu kernels", "")
    if best.split(",")[0] not in CPU_ISAS:
        raise Failure(f"the summary's 'cpu kernels' line names no instruction set: '{best}'")
    p = expect_ok(["run", "--backend", "cpu", "--rounds", "3", "--json"], env={"KDAGRAPH_CPU_ISA": "baseline"})
    d = json.loads(p.stdout)
    if d.get("cpu_isa") != "baseline" or not isinstance(d.get("cpu_threads"), int) or d["cpu_threads"] < 1:
        raise Failure(f"KDAGRAPH_CPU_ISA=baseline: the JSON says cpu_isa {d.get('cpu_isa')}, threads {d.get('cpu_threads')}")
    p = run(["run", "--backend", "cpu", "--rounds", "3"], env={"KDAGRAPH_CPU_ISA": "sse9"})
    if p.returncode == 0 or "KDAGRAPH_CPU_ISA" not in p.stderr:
        raise Failure(f"KDAGRAPH_CPU_ISA=sse9 was not refused by name (exit {p.returncode}):\n{p.stderr}")
    d = json.loads(expect_ok(["run", "--backend", "cpu", "--rounds", "3", "--json"],
                             env={"KDAGRAPH_CPU_THREADS": "1", "OMP_NUM_THREADS": "2"}).stdout)
    if d.get("cpu_threads") != 1:
        raise Failure(f"KDAGRAPH_CPU_THREADS=1 under OMP_NUM_THREADS=2: the JSON says cpu_threads {d.get('cpu_threads')}")
    p = run(["run", "--backend", "cpu", "--rounds", "3"], env={"KDAGRAPH_CPU_THREADS": "two"})
    if p.returncode == 0 or "KDAGRAPH_CPU_THREADS" not in p.stderr:
        raise Failure(f"KDAGRAPH_CPU_THREADS=two was not refused by name (exit {p.returncode}):\n{p.stderr}")
    print(best)


@case
def run_draft_zero():
    p = expect_ok(["run", "--backend", "cpu", "--draft", "0", "--rounds", "10", "--check"])
    if "T=1 (draft 0)" not in p.stdout:
        raise Failure(f"--draft 0 should run T=1:\n{p.stdout}")
    s = summary(p.stdout)
    # Plain decode accepts exactly one token per request and round.
    if int(s["tokens accepted"]) != 10 * 8:
        raise Failure(f"--draft 0: {s['tokens accepted']} tokens accepted, expected 80")
    print(p.stdout)


def check_case(mode, exec_kind, extra=(), comparison="bitwise"):
    # Batches of a random 1..12 live requests (buckets 1-8, 10, 12: rows are padded), requests retiring
    # and joining along the way.
    args = ["run", "--backend", "cpu", "--check", "--mode", mode, "--exec", exec_kind, "--batch", "12",
            "--vary-batch", "--retire-rate", "0.2", "--rounds", "40", "--seed", "7"] + list(extra)
    p = expect_ok(args)
    s = summary(p.stdout)
    check = s.get("check", "")
    if not check.startswith("passed") or comparison not in check:
        raise Failure(f"no {comparison} check line:\n{p.stdout}")
    m = re.match(r"passed: (\d+) rounds and (\d+) retired requests", check)
    if not m or int(m.group(1)) != 40 or int(m.group(2)) < 12:
        raise Failure(f"the check compared too little: {check}")
    rows = s.get("rounds by rows", "")
    if len(re.findall(r"\d+ rows x", rows)) < 3:
        raise Failure(f"the batches did not cross buckets: {rows}")
    print(p.stdout)


@case
def check_trees():
    # docs/trees.md: top-3 trees of T = 6 tokens, a random path accepted, checked bitwise against the two-phase
    # eager reference (which verifies the same trees) in fused-accept graphs.
    check_case("fused-accept", "graph", ["--tree", "3", "--draft", "5"])


@case
def check_trees_replay():
    # Replay: the accept step moves the records of each slot's accepted path into place in its ring.
    check_case("replay", "graph", ["--tree", "2", "--draft", "4"])


@case
def tree_of_one_is_the_chain():
    # A top-1 tree is a chain, accepted with the chain sampler's draws: the same tokens accepted.
    base = ["run", "--backend", "cpu", "--rounds", "30", "--draft", "4", "--no-conv", "--seed", "3"]
    chain = summary(expect_ok(base).stdout)
    tree = summary(expect_ok(base + ["--tree", "1"]).stdout)
    if chain["tokens accepted"] != tree["tokens accepted"]:
        raise Failure(f"--tree 1 accepted {tree['tokens accepted']} tokens, the chain {chain['tokens accepted']}")
    if "top-1 trees" not in tree.get("token trees", ""):
        raise Failure(f"the summary does not say the rounds verify trees: {tree}")


@case
def check_two_phase_eager():
    check_case("two-phase", "eager")


@case
def check_two_phase_graph():
    check_case("two-phase", "graph")


@case
def check_fused_accept_eager():
    check_case("fused-accept", "eager")


@case
def check_fused_accept_graph():
    check_case("fused-accept", "graph")


@case
def check_replay_eager():
    check_case("replay", "eager")


@case
def check_replay_graph():
    check_case("replay", "graph")


@case
def check_replay_bf16_state():
    # docs/low_precision.md: replay rounds a bf16 state at its flushes only, the reference at every post-state: close,
    # not bitwise.
    check_case("replay", "graph", ["--state-dtype", "bf16"], comparison="relative error <= 0.01")


@case
def graph_memory_is_reported_per_bucket_and_per_graph():
    """The JSON gives the capture's device memory in all and per bucket, and with --graph-memory-copies N
    the copies' memory of the largest bucket and one graph's share, as the text summary does; without the
    option graph_memory is null and the text has no such line. The CPU backend's graphs hold no device
    memory, so every figure is 0 there; on CUDA the bytes are the run's own."""
    args = ["run", "--backend", "cpu", "--rounds", "2", "--batch", "6"]
    d = json.loads(expect_ok(args + ["--json"]).stdout)
    if d.get("graph_memory", "absent") is not None or "graph_device_bytes_per_bucket" not in d:
        raise Failure(f"without --graph-memory-copies: graph_memory {d.get('graph_memory', 'absent')}, "
                      f"per bucket {d.get('graph_device_bytes_per_bucket', 'absent')}")
    if "graph memory" in summary(expect_ok(args).stdout):
        raise Failure("the text summary has a graph memory line without --graph-memory-copies")
    path = os.path.join(work_dir(), "graph_memory.json")
    p = expect_ok(args + ["--graph-memory-copies", "5", "--json-file", path])
    with open(path) as f:
        d = json.load(f)
    m = d["graph_memory"]
    if (m["bucket"], m["copies"]) != (max(d["buckets"]), 5):
        raise Failure(f"graph_memory {m}: expected the largest bucket {max(d['buckets'])} and 5 copies")
    if not close(m["bytes_per_graph"], m["device_bytes"] / 5) or m["device_bytes"] != 0:
        raise Failure(f"graph_memory {m}: one graph is the copies' bytes / 5, and 0 on the CPU")
    if not close(d["graph_device_bytes_per_bucket"], d["graph_device_bytes"] / d["graphs_captured"]):
        raise Failure(f"per bucket {d['graph_device_bytes_per_bucket']} is not {d['graph_device_bytes']} / "
                      f"{d['graphs_captured']}")
    line = summary(p.stdout).get("graph memory", "")
    if not re.fullmatch(r"0 MiB per graph \(5 copies of bucket 6 took 0 MiB at once\)", line):
        raise Failure(f"the text summary's graph memory line: '{line}'\n{p.stdout}")
    print(line)


def ring_bytes(L, H, HV, K, V, R, io_bytes):
    """docs/modes.md: per layer, R records of k [H, K] and the raw gate [HV, K] in the io dtype and u [HV, V] in
    fp32, each of the two rows rounded up to 16 bytes."""
    def row(n):
        return (n + 15) // 16 * 16
    return L * (row(R * (H * K + HV * K) * io_bytes) + row(R * HV * V * 4))


@case
def replay_reports_its_traffic_and_memory():
    """Per mode, the state traffic and memory per slot the summary and the JSON give are docs/modes.md's: replay
    keeps a checkpoint and a ring of R = 3 T records (the default) instead of S scratch states."""
    L, H, HV, K, T, S = 2, 2, 4, 64, 4, 4  # the tiny preset, --draft 3: S = T
    state = HV * K * K * 4
    want = {"two-phase": (1 + T + 2, state * S, 0), "fused-accept": (1 + T, state * S, 0),
            "replay": (2, 0, ring_bytes(L, H, HV, K, K, 3 * T, 4))}
    for mode, (transfers, scratch, ring) in want.items():
        p = expect_ok(["run", "--backend", "cpu", "--mode", mode, "--rounds", "2", "--batch", "3", "--json"])
        d = json.loads(p.stdout)
        if d["state_transfers_per_round"] != transfers or d["state_bytes_per_round"] != state * transfers * L * 3:
            raise Failure(f"{mode}: traffic {d['state_transfers_per_round']}, {d['state_bytes_per_round']}")
        got = d["bytes_per_slot"]
        if (got["pool"], got["scratch"], got["ring"]) != (state * L, scratch * L, ring):
            raise Failure(f"{mode}: bytes per slot {got}, expected {(state * L, scratch * L, ring)}")
        if "token_cache" in got:
            raise Failure(f"{mode}: the JSON still reports a token cache: {got}")
        text = summary(expect_ok(["run", "--backend", "cpu", "--mode", mode, "--rounds", "2", "--batch", "3"]).stdout)
        if f"({transfers} state transfers" not in text.get("state traffic", ""):
            raise Failure(f"{mode}: the text summary's traffic line: {text.get('state traffic')}")
        if not re.search(rf"ring {ring / 2**20:.4g} MiB$", text.get("memory per slot", "")):
            raise Failure(f"{mode}: the text summary's memory line: {text.get('memory per slot')}")
        print(mode, d["state_transfers_per_round"], got)


@case
def bytes_moved_are_counted_by_the_kernels():
    """`run` counts the bytes of states and ring records its kernels move (Verifier::bytes_moved). With a
    fixed batch and no retirement, two-phase and fused-accept move exactly docs/shapes.md's state transfers;
    replay moves fewer bytes than fused-accept, and keeps fewer per slot, at the same shape."""
    L, HV, K, T, n = 2, 4, 64, 4, 3  # the tiny preset, --draft 3
    state = HV * K * K * 4
    moved, kept = {}, {}
    for mode in ("two-phase", "fused-accept", "replay"):
        d = json.loads(expect_ok(["run", "--backend", "cpu", "--mode", mode, "--rounds", "6", "--batch", str(n),
                                  "--json"]).stdout)
        moved[mode] = d["bytes_moved_per_round"]
        kept[mode] = sum(d["bytes_per_slot"].values())
        if not moved[mode] > 0:
            raise Failure(f"{mode}: bytes_moved_per_round {moved[mode]}")
        if "ring records" not in d.get("bytes_moved_counts", "") or "conv" not in d["bytes_moved_counts"]:
            raise Failure(f"{mode}: the JSON does not say what it counts: {d.get('bytes_moved_counts')}")
    for mode, transfers in (("two-phase", 1 + T + 2), ("fused-accept", 1 + T)):
        if moved[mode] != state * transfers * L * n:
            raise Failure(f"{mode}: the kernels counted {moved[mode]} bytes a round, docs/shapes.md says "
                          f"{state * transfers * L * n}")
    if not moved["replay"] < moved["fused-accept"]:
        raise Failure(f"replay moved {moved['replay']} bytes a round, fused-accept {moved['fused-accept']}")
    if not kept["replay"] < kept["fused-accept"]:
        raise Failure(f"replay keeps {kept['replay']} bytes a slot, fused-accept {kept['fused-accept']}")
    print(moved, kept)


@case
def ring_options_set_the_ring():
    """--ring and --flush-min set replay's ring (defaults 3 T and T + 1); the JSON and the summary say
    which, and the ring's memory follows R. Other modes have none."""
    L, H, HV, K, T = 2, 2, 4, 64, 4  # the tiny preset, --draft 3
    base = ["run", "--backend", "cpu", "--rounds", "2", "--batch", "2"]
    for flags, (R, flush_min) in (([], (3 * T, T + 1)), (["--ring", "16", "--flush-min", "0"], (16, 0)),
                                  (["--ring", "8"], (8, T))):  # flush_min T + 1 would pass R - T = 4
        d = json.loads(expect_ok(base + ["--mode", "replay", "--json"] + flags).stdout)
        if d["ring"] != {"records": R, "flush_min": flush_min}:
            raise Failure(f"{flags}: the JSON's ring is {d['ring']}, expected R {R}, flush_min {flush_min}")
        if d["bytes_per_slot"]["ring"] != ring_bytes(L, H, HV, K, K, R, 4):
            raise Failure(f"{flags}: ring bytes per slot {d['bytes_per_slot']['ring']}")
        mode = summary(expect_ok(base + ["--mode", "replay"] + flags).stdout).get("mode", "")
        if f"R={R}" not in mode or ("every round" if flush_min == 0 else f"at {flush_min} pending") not in mode:
            raise Failure(f"{flags}: the text summary's mode line: {mode}")
    d = json.loads(expect_ok(base + ["--mode", "fused-accept", "--ring", "16", "--json"]).stdout)
    if d["ring"] is not None or d["bytes_per_slot"]["ring"] != 0:
        raise Failure(f"fused-accept --ring 16: the JSON's ring is {d['ring']}, {d['bytes_per_slot']}")
    print(mode)


@case
def check_replay_ring_sizes():
    # The smallest ring (R = 2 T: flushes whenever a record is pending), and a fold every round.
    check_case("replay", "graph", ["--ring", "8", "--flush-min", "4"])
    check_case("replay", "eager", ["--flush-min", "0"])


@case
def preset_kimi_k3_tp8():
    """docs/shapes.md's reference shape: 69 KDA layers, HV = H = 12 heads of K = V = 128 at TP 8, the conv over
    C = 2 H K + HV V, T = 8 unless --draft says otherwise; checked against the CPU reference."""
    import csv
    L, H, K, T = 69, 12, 128, 8
    base = ["run", "--backend", "cpu", "--preset", "kimi-k3-tp8", "--batch", "1", "--slots", "1"]
    for mode in ("fused-accept", "replay"):
        p = expect_ok(base + ["--mode", mode, "--rounds", "3", "--check"])
        s = summary(p.stdout)
        if f"T={T} (draft {T - 1})" not in p.stdout or not s.get("check", "").startswith("passed"):
            raise Failure(f"{mode}:\n{p.stdout}")
        if not s.get("conv", "").startswith(f"W=4 SiLU, no bias, C={3 * H * K}"):
            raise Failure(f"{mode}: the conv line: {s.get('conv')}")
    d = json.loads(expect_ok(base + ["--rounds", "1", "--json"]).stdout)
    if d["model"] != {"layers": L, "heads": H, "value_heads": H, "head_k": K, "head_v": K} or d["tokens"] != T:
        raise Failure(f"the preset runs {d['model']}, T = {d['tokens']}")
    d = json.loads(expect_ok(base + ["--rounds", "1", "--draft", "3", "--no-conv", "--json"]).stdout)
    if d["tokens"] != 4 or d["conv"] is not None:
        raise Failure(f"--draft 3 --no-conv: T = {d['tokens']}, conv {d['conv']}")
    # The other presets keep the command's defaults: T = 4 for run, drafts 0 and 3 for bench on the CPU.
    if json.loads(expect_ok(["run", "--backend", "cpu", "--rounds", "1", "--json"]).stdout)["tokens"] != 4:
        raise Failure("the tiny preset no longer runs T = 4 by default")
    bench = ["bench", "--backend", "cpu", "--batches", "1", "--modes", "replay", "--execs", "graph", "--sampler", "in",
             "--rounds", "1", "--warmup", "0"]
    for preset, tokens in (("tiny", ["1", "4"]), ("kimi-k3-tp8", [str(T)])):
        csv_path = os.path.join(work_dir(), f"{preset}.csv")
        expect_ok(bench + ["--preset", preset, "--csv", csv_path])
        with open(csv_path, newline="") as f:
            rows = list(csv.DictReader(f))
        if [r["tokens"] for r in rows] != tokens or any(r["conv_width"] != "4" for r in rows):
            raise Failure(f"bench --preset {preset}: T {[r['tokens'] for r in rows]}, expected {tokens}")
    print(p.stdout)


@case
def conv_on_by_default_and_off_with_no_conv():
    """docs/conv.md: the short convolution runs by default (W = 4, SiLU, no bias, C = 2 H K + HV V), --no-conv
    runs the recurrent part alone; the text and JSON summaries say which, with the conv state's size."""
    L, H, HV, K, T, S = 2, 2, 4, 64, 4, 4  # the tiny preset, --draft 3
    C = 2 * H * K + HV * K
    for mode, columns, scratch in (("two-phase", 3, S * 3), ("fused-accept", 2 * (4 - 1 + S), 0), ("replay", 2 * (4 - 1 + S), 0)):
        d = json.loads(expect_ok(["run", "--backend", "cpu", "--mode", mode, "--rounds", "2", "--json"]).stdout)
        if d["conv"] != {"width": 4, "channels": C, "activation": "silu", "bias": False, "fused": True}:
            raise Failure(f"{mode}: the JSON's conv is {d['conv']}")
        got = d["bytes_per_slot"]
        if (got["conv_state"], got["conv_scratch"]) != (L * columns * C * 4, L * scratch * C * 4):
            raise Failure(f"{mode}: conv bytes per slot {got}")
        text = summary(expect_ok(["run", "--backend", "cpu", "--mode", mode, "--rounds", "2"]).stdout)
        if not text.get("conv", "").startswith(f"W=4 SiLU, no bias, C={C}"):
            raise Failure(f"{mode}: the text summary's conv line: {text.get('conv')}")
    d = json.loads(expect_ok(["run", "--backend", "cpu", "--rounds", "2", "--no-conv", "--json"]).stdout)
    if d["conv"] is not None or d["bytes_per_slot"]["conv_state"] != 0:
        raise Failure(f"--no-conv: the JSON says conv {d['conv']}, {d['bytes_per_slot']}")
    text = summary(expect_ok(["run", "--backend", "cpu", "--rounds", "2", "--no-conv"]).stdout)
    if not text.get("conv", "").startswith("off"):
        raise Failure(f"--no-conv: the text summary's conv line: {text.get('conv')}")
    print(d["conv"], text["conv"])


@case
def conv_fused_by_default_and_unfused_on_request():
    """Issue 21: with the conv, one kernel per layer (the conv fused into the verify) unless --unfused-conv;
    the JSON counts the kernel nodes of a captured round: per layer the engine's input kernel and the
    verify (and the conv when unfused), plus the index build, sampler and accept (and two-phase's commit of
    the state and of the conv window)."""
    L = 2  # the tiny preset
    for mode, tail in (("fused-accept", 3), ("replay", 3), ("two-phase", 5)):
        for flags, per_layer, fused in (([], 2, True), (["--unfused-conv"], 3, False)):
            d = json.loads(expect_ok(["run", "--backend", "cpu", "--mode", mode, "--rounds", "2", "--json"] + flags).stdout)
            if d["conv"]["fused"] != fused:
                raise Failure(f"{mode} {flags}: the JSON's conv is {d['conv']}")
            if d["kernel_nodes_per_round"] != L * per_layer + tail:
                raise Failure(f"{mode} {flags}: {d['kernel_nodes_per_round']} kernel nodes a round, expected "
                              f"{L * per_layer + tail}")
            if any(c["kernel_nodes"] != d["kernel_nodes_per_round"] for c in d["captures"]):
                raise Failure(f"{mode} {flags}: the buckets' graphs hold different rounds: {d['captures']}")
        print(mode, "kernel nodes fused", L * 2 + tail, "unfused", L * 3 + tail)
    text = summary(expect_ok(["run", "--backend", "cpu", "--rounds", "2", "--unfused-conv"]).stdout)
    if "--unfused-conv" not in text.get("conv", ""):
        raise Failure(f"the text summary's conv line: {text.get('conv')}")


@case
def pdl_on_by_default_and_off_with_no_pdl():
    """docs/graphs.md: programmatic dependent launch is on by default, --no-pdl turns it off; the summaries say
    which, and a checked run agrees with the reference either way."""
    d = json.loads(expect_ok(["run", "--backend", "cpu", "--rounds", "2", "--json"]).stdout)
    if d.get("pdl") is not True:
        raise Failure(f"the JSON's pdl is {d.get('pdl')}, expected true by default")
    d = json.loads(expect_ok(["run", "--backend", "cpu", "--rounds", "2", "--no-pdl", "--json"]).stdout)
    if d.get("pdl") is not False:
        raise Failure(f"--no-pdl: the JSON's pdl is {d.get('pdl')}")
    text = summary(expect_ok(["run", "--backend", "cpu", "--rounds", "2", "--no-pdl"]).stdout)
    if not text.get("pdl", "").startswith("off"):
        raise Failure(f"--no-pdl: the text summary's pdl line: {text.get('pdl')}")
    check_case("fused-accept", "graph", ["--no-pdl"])
    print(d["pdl"], text["pdl"])


@case
def check_no_conv():
    check_case("fused-accept", "graph", ["--no-conv"])
    check_case("two-phase", "eager", ["--no-conv"])


@case
def check_sampler_outside_graph():
    check_case("two-phase", "graph", ["--sampler-outside-graph"])
    check_case("fused-accept", "graph", ["--sampler-outside-graph"])


@case
def check_bf16():
    check_case("fused-accept", "graph", ["--dtype", "bf16", "--state-dtype", "bf16", "--draft", "5"])


@case
def check_large_batch_crosses_bucket_steps():
    # 40 live requests: buckets 1-8, 10-32 step 2 and 40.
    p = expect_ok(["run", "--backend", "cpu", "--check", "--batch", "40", "--vary-batch", "--rounds", "12",
                   "--retire-rate", "0.1", "--draft", "2"])
    if "passed" not in summary(p.stdout).get("check", ""):
        raise Failure(p.stdout)
    print(p.stdout)


def number_in(text, pattern):
    m = re.search(pattern, text)
    if not m:
        raise Failure(f"'{pattern}' not found in '{text}'")
    return float(m.group(1))


def close(a, b, rel=1e-3):
    return abs(a - b) <= rel * max(abs(a), abs(b)) + 1e-12


@case
def json_output():
    args = ["run", "--backend", "cpu", "--rounds", "20", "--vary-batch", "--retire-rate", "0.2", "--check"]
    p = expect_ok(args + ["--json"])
    try:
        d = json.loads(p.stdout)
    except ValueError as e:
        raise Failure(f"--json printed no JSON ({e}):\n{p.stdout}")
    for key in ("rounds", "tokens_accepted", "round_ms", "tokens_per_s", "backend", "mode", "exec", "buckets",
                "check", "timing"):
        if key not in d:
            raise Failure(f"the JSON has no '{key}'")
    if d["rounds"] != 20 or d["backend"] != "cpu" or not d["check"]["passed"]:
        raise Failure(f"unexpected JSON: {p.stdout}")

    # One run, both forms: the text summary and --json-file carry the same figures.
    path = os.path.join(work_dir(), "summary.json")
    p = expect_ok(args + ["--json-file", path])
    with open(path) as f:
        d = json.load(f)
    s = summary(p.stdout)
    pairs = [
        (float(s["rounds"]), d["rounds"]),
        (float(s["tokens accepted"]), d["tokens_accepted"]),
        (float(s["requests retired"]), d["requests_retired"]),
        (number_in(s["time per round"], r"^([\d.e+-]+) ms median"), d["round_ms"]["median"]),
        (number_in(s["time per round"], r"min ([\d.e+-]+)"), d["round_ms"]["min"]),
        (number_in(s["time per round"], r"max ([\d.e+-]+)"), d["round_ms"]["max"]),
        (number_in(s["time per round"], r"mean ([\d.e+-]+)"), d["round_ms"]["mean"]),
        (float(s["tokens per second"]), d["tokens_per_s"]),
        (float(s["device errors"]), d["device_errors"]),
        (number_in(s["bytes moved"], r"^([\d.e+-]+) MiB per round"), d["bytes_moved_per_round"] / 2**20),
    ]
    for text_value, json_value in pairs:
        if not close(text_value, json_value):
            raise Failure(f"text {text_value} vs JSON {json_value}\n{p.stdout}\n{json.dumps(d, indent=1)}")
    for label, key in (("backend", "backend"), ("mode", "mode")):
        if s[label] != d[key]:
            raise Failure(f"{label}: text '{s[label]}' vs JSON '{d[key]}'")
    if not s["exec"].startswith(d["exec"]) or ",".join(map(str, d["buckets"])) not in s["exec"]:
        raise Failure(f"exec: text '{s['exec']}' vs JSON {d['exec']} {d['buckets']}")
    if not close(d["tokens_per_s"], d["tokens_accepted"] / d["total_s"]):
        raise Failure("tokens_per_s is not tokens_accepted / total_s")
    print(p.stdout)


# ---------------------------------------------------------------------------------------------------
# bench
# ---------------------------------------------------------------------------------------------------

BENCH_COLUMNS = ["backend", "mode", "exec", "sampler", "layers", "heads", "value_heads", "head_k", "head_v",
                 "io_dtype", "state_dtype", "tokens", "batch", "bucket", "rounds", "host_ms", "device_ms",
                 "tokens_per_s", "state_bytes_per_round", "bandwidth_gbs", "copy_ceiling_gbs", "graph_nodes",
                 "graph_us_traced", "idle_pct", "largest_gap_us", "conv_width", "cpu_isa", "ring_records",
                 "ring_flush_min"]


def small_bench(name):
    csv_path = os.path.join(work_dir(), f"{name}.csv")
    md_path = os.path.join(work_dir(), f"{name}.md")
    p = expect_ok(["bench", "--backend", "cpu", "--batches", "1,3", "--drafts", "0,2", "--rounds", "3",
                   "--warmup", "1", "--csv", csv_path, "--md", md_path])
    return p, csv_path, md_path


@case
def bench_outputs():
    import csv
    p, csv_path, md_path = small_bench("bench")
    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    if list(rows[0].keys()) != BENCH_COLUMNS:
        raise Failure(f"CSV columns {list(rows[0].keys())}")
    # 2 drafts x 2 batches x 3 modes x 2 executions x 2 sampler placements
    if len(rows) != 48:
        raise Failure(f"{len(rows)} CSV rows, expected 48")
    if any(r["conv_width"] != "4" for r in rows):
        raise Failure("the bench runs the short convolution by default (conv_width 4)")
    if any(r["cpu_isa"] not in CPU_ISAS for r in rows):
        raise Failure(f"the CSV's cpu_isa is none of {CPU_ISAS}")
    seen = {(r["mode"], r["exec"], r["sampler"], r["tokens"], r["batch"]) for r in rows}
    if len(seen) != 48:
        raise Failure("the CSV repeats points")
    for r in rows:
        if float(r["host_ms"]) <= 0 or float(r["bandwidth_gbs"]) <= 0 or r["device_ms"] != "":
            raise Failure(f"bad CPU row {r}")
        if any(r[k] != "" for k in ("graph_nodes", "graph_us_traced", "idle_pct", "largest_gap_us")):
            raise Failure(f"an untraced CPU row has node-trace values: {r}")
        L, HV, K, V, T, n = (int(r[k]) for k in ("layers", "value_heads", "head_k", "head_v", "tokens", "batch"))
        transfers = {"two-phase": 1 + T + 2, "fused-accept": 1 + T, "replay": 2}[r["mode"]]
        if int(r["state_bytes_per_round"]) != HV * V * K * 4 * transfers * L * n:
            raise Failure(f"state bytes per round of {r} are not docs/shapes.md's")
        # Replay's default ring (docs/modes.md): R = 3 T, flush_min = T + 1, or R - T where that is less.
        ring = (str(3 * T), str(min(T + 1, 2 * T))) if r["mode"] == "replay" else ("", "")
        if (r["ring_records"], r["ring_flush_min"]) != ring:
            raise Failure(f"the ring columns of {r}, expected {ring}")
    with open(md_path) as f:
        md = f.read()
    if md != p.stdout:
        raise Failure("--md file differs from the table printed on stdout")
    if len([l for l in md.splitlines() if l.split(" |")[0] in ("| two-phase", "| fused-accept", "| replay")]) != 48:
        raise Failure(f"the markdown table does not have 48 rows:\n{md}")
    if "CPU timings" not in md:
        raise Failure("the CPU table does not say its timings are CPU timings")
    check_bench_aims(md, rows)
    print(md)


def check_bench_aims(md, rows):
    """The aims table: per T at batch 1, the two-phase baseline (graph, sampler out) over fused-accept
    under a graph with the sampler out and in, judged against (1 + T + 2) / (1 + T)."""
    def host_ms(mode, sampler, T):
        (r,) = [r for r in rows if (r["mode"], r["exec"], r["sampler"], r["tokens"], r["batch"]) ==
                (mode, "graph", sampler, str(T), "1")]
        return float(r["host_ms"])
    graph_aims, replay_aims = md.split("## Aims", 1)[-1].split("Replay against fused-accept", 1)
    aims = [l for l in graph_aims.splitlines() if re.match(r"\| \d+ \|", l)]
    if [int(l.split("|")[1]) for l in aims] != [1, 3]:
        raise Failure(f"the aims table does not have one row per T (1 and 3):\n{md}")
    for line in aims:
        cells = [c.strip() for c in line.strip("|").split("|")]
        T = int(cells[0])
        base = host_ms("two-phase", "out", T)
        bound = (1 + T + 2) / (1 + T)
        if not close(float(cells[1]), base, 1e-3) or not close(float(cells[8]), bound, 1e-3):
            raise Failure(f"aims row {line}: baseline or bound is not the CSV's / (3 + T) / (1 + T)")
        for col, sampler in ((2, "out"), (5, "in")):
            fused = host_ms("fused-accept", sampler, T)
            speedup = base / fused
            if not close(float(cells[col + 1]), speedup, 2e-3):
                raise Failure(f"aims row {line}: speedup is not {base} / {fused}")
            if cells[col + 2] != ("pass" if speedup >= 0.95 * bound else "miss"):
                raise Failure(f"aims row {line}: verdict for speedup {speedup} against bound {bound}")
    # Replay against fused-accept, whole rounds in the graph: a row per (T, batch).
    def graph_in_ms(mode, T, batch):
        (r,) = [r for r in rows if (r["mode"], r["exec"], r["sampler"], r["tokens"], r["batch"]) ==
                (mode, "graph", "in", str(T), str(batch))]
        return float(r["host_ms"])
    lines = [l for l in replay_aims.splitlines() if re.match(r"\| \d+ \| \d+ \|", l)]
    if sorted((int(l.split("|")[1]), int(l.split("|")[2])) for l in lines) != [(1, 1), (1, 3), (3, 1), (3, 3)]:
        raise Failure(f"the replay aims table does not have a row per T and batch:\n{md}")
    for line in lines:
        cells = [c.strip() for c in line.strip("|").split("|")]
        T, batch = int(cells[0]), int(cells[1])
        fused, replay = graph_in_ms("fused-accept", T, batch), graph_in_ms("replay", T, batch)
        speedup = fused / replay
        if not (close(float(cells[2]), fused) and close(float(cells[3]), replay) and close(float(cells[4]), speedup, 2e-3)
                and close(float(cells[5]), (1 + T) / 2)):
            raise Failure(f"replay aims row {line}: not the CSV's figures")
        aim = 1.0 if batch == 1 else None
        want = "-" if aim is None else ("pass" if speedup >= aim else "miss")
        if cells[7] != want:
            raise Failure(f"replay aims row {line}: verdict {cells[7]}, expected {want}")


# ---------------------------------------------------------------------------------------------------
# NVTX ranges, seen through our injection library (NVTX_INJECTION64_PATH, as Nsight loads its own)
# ---------------------------------------------------------------------------------------------------

class Range:
    def __init__(self, name, payload, parent):
        self.name, self.payload, self.parent, self.children = name, payload, parent, []


def record_ranges(args, cli=None):
    """Runs the command line under the recorder; returns (loaded, top-level ranges of domain kdagraph)."""
    if not ARGS.recorder:
        raise Skip("no NVTX recorder in this build (NVTX headers not found)")
    path = os.path.join(work_dir(), "nvtx_record.tsv")
    if os.path.exists(path):
        os.remove(path)
    expect_ok(args, cli=cli, env={"NVTX_INJECTION64_PATH": ARGS.recorder, "KDAGRAPH_NVTX_RECORD": path})
    if not os.path.exists(path):
        return False, []
    top, stacks, loaded = [], {}, False
    with open(path) as f:
        for n, line in enumerate(f, 1):
            fields = line.rstrip("\n").split("\t")
            if fields[0] == "init":
                loaded = True
                continue
            thread, domain = fields[1], fields[2]
            if domain != "kdagraph":
                raise Failure(f"line {n}: a range in domain '{domain}', not 'kdagraph': {line}")
            stack = stacks.setdefault(thread, [])
            if fields[0] == "push":
                parent = stack[-1] if stack else None
                r = Range(fields[3], None if fields[4] == "-" else int(fields[4]), parent)
                (parent.children if parent else top).append(r)
                stack.append(r)
            elif fields[0] == "pop":
                if not stack:
                    raise Failure(f"line {n}: a pop without a push")
                stack.pop()
    for thread, stack in stacks.items():
        if stack:
            raise Failure(f"thread {thread}: ranges left open: {[r.name for r in stack]}")
    return loaded, top


def names(ranges):
    return [r.name for r in ranges]


def expect_round_body(r, layers, tail, per_layer=("layer",)):
    """A capture or eager round: the index build, the L layers in order, each its verify with the conv
    (on by default) fused in, or with --unfused-conv (per_layer conv, layer) its conv then its verify,
    then `tail` (sampler steps)."""
    want = ["index_build"] + list(per_layer) * layers + tail
    if names(r.children) != want:
        raise Failure(f"{r.name} {r.payload} holds {names(r.children)}, expected {want}")
    for kind in per_layer:
        if [c.payload for c in r.children if c.name == kind] != list(range(layers)):
            raise Failure(f"{r.name}: {kind} payloads {[c.payload for c in r.children if c.name == kind]}")
    for c in r.children:
        if c.children:
            raise Failure(f"{c.name} has nested ranges {names(c.children)}")


def expect_prefills_and_materialize(top, batch, slots):
    prefills = [r for r in top if r.name == "prefill"]
    if len(prefills) < batch or any(not 0 <= r.payload < slots for r in prefills):
        raise Failure(f"prefill ranges {[(r.name, r.payload) for r in prefills]}")
    if not any(r.name == "materialize" and r.payload >= 1 for r in top):
        raise Failure("no materialize range with the retired count as payload")
    if top[-1].name != "materialize":
        raise Failure(f"the run should end by materializing, not {top[-1].name}")


@case
def nvtx_graph_two_phase():
    if ARGS.nvtx_compiled_out:
        raise Skip("this build compiles NVTX out (KDAGRAPH_ENABLE_NVTX=OFF); see nvtx_compiled_out")
    loaded, top = record_ranges(["run", "--backend", "cpu", "--mode", "two-phase", "--exec", "graph", "--batch",
                                 "6", "--rounds", "6", "--vary-batch", "--retire-rate", "0.3", "--seed", "3"])
    if not loaded or not top:
        raise Failure("the recorder saw no ranges")
    captures = [r for r in top if r.name == "capture"]
    if sorted(r.payload for r in captures) != [1, 2, 3, 4, 5, 6]:
        raise Failure(f"capture payloads {[r.payload for r in captures]}, expected the buckets 1-6")
    if [r.payload for r in captures] != [6, 5, 4, 3, 2, 1]:
        raise Failure("buckets should be captured largest first")
    for r in captures:
        expect_round_body(r, 2, ["accept", "commit", "instantiate"])
    replays = [r for r in top if r.name == "replay"]
    if len(replays) != 6 or any(r.payload not in range(1, 7) or r.children for r in replays):
        raise Failure(f"replays {[(r.payload, names(r.children)) for r in replays]}")
    allowed = {"prefill", "capture", "replay", "materialize"}
    if set(names(top)) - allowed:
        raise Failure(f"unexpected top-level ranges {set(names(top)) - allowed}")
    expect_prefills_and_materialize(top, 6, 12)
    print(f"{len(top)} top-level ranges: " + " ".join(f"{r.name}({r.payload})" for r in top))


@case
def nvtx_eager_fused_accept():
    if ARGS.nvtx_compiled_out:
        raise Skip("this build compiles NVTX out (KDAGRAPH_ENABLE_NVTX=OFF); see nvtx_compiled_out")
    loaded, top = record_ranges(["run", "--backend", "cpu", "--mode", "fused-accept", "--exec", "eager",
                                 "--batch", "5", "--rounds", "3"])
    if not loaded:
        raise Failure("the recorder saw no ranges")
    rounds = [r for r in top if r.name == "eager_round"]
    if len(rounds) != 3 or any(r.payload != 5 for r in rounds):
        raise Failure(f"eager rounds {[(r.name, r.payload) for r in rounds]}")
    for r in rounds:
        expect_round_body(r, 2, ["accept"])  # fused-accept: no commit
    if set(names(top)) - {"prefill", "eager_round", "materialize"}:
        raise Failure(f"unexpected top-level ranges {names(top)}")
    expect_prefills_and_materialize(top, 5, 10)
    print(" ".join(f"{r.name}({r.payload})" for r in top))


@case
def nvtx_sampler_outside_graph():
    if ARGS.nvtx_compiled_out:
        raise Skip("this build compiles NVTX out (KDAGRAPH_ENABLE_NVTX=OFF); see nvtx_compiled_out")
    loaded, top = record_ranges(["run", "--backend", "cpu", "--mode", "two-phase", "--exec", "graph", "--batch",
                                 "3", "--rounds", "4", "--sampler-outside-graph", "--unfused-conv"])
    if not loaded:
        raise Failure("the recorder saw no ranges")
    for r in top:
        if r.name == "capture":
            expect_round_body(r, 2, ["instantiate"], ("conv", "layer"))  # no sampler step; two launches a layer
    rounds = [r.name for r in top if r.name in ("replay", "accept", "commit")]
    if rounds != ["replay", "accept", "commit"] * 4:
        raise Failure(f"each replay should be followed by the accept and the commit launches: {rounds}")
    print(" ".join(f"{r.name}({r.payload})" for r in top))


@case
def nvtx_compiled_out():
    """The same run with NVTX compiled out records nothing: the recorder is never even loaded."""
    if not ARGS.nvtx_off_cli:
        raise Skip("no build of the command line with NVTX compiled out")
    loaded, top = record_ranges(["run", "--backend", "cpu", "--mode", "two-phase", "--exec", "graph", "--batch",
                                 "6", "--rounds", "6", "--vary-batch", "--retire-rate", "0.3", "--seed", "3"],
                                cli=ARGS.nvtx_off_cli)
    if loaded or top:
        raise Failure(f"NVTX is compiled out, yet the recorder was loaded ({loaded}) and saw {names(top)}")
    print("no NVTX call: the injection library was never loaded")


# ---------------------------------------------------------------------------------------------------

def work_dir():
    if not ARGS.work:
        ARGS.work = tempfile.mkdtemp(prefix="kdagraph_cli_test_")
    path = os.path.join(ARGS.work, ARGS.case)
    os.makedirs(path, exist_ok=True)
    return path


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--list", action="store_true", help="print the case names, one a line")
    ap.add_argument("--cli", help="the kdagraph executable")
    ap.add_argument("--recorder", help="the NVTX injection library (tests/tools/nvtx_recorder.cpp)")
    ap.add_argument("--nvtx-off-cli", help="the command line built with NVTX compiled out")
    ap.add_argument("--nvtx-compiled-out", action="store_true", help="--cli itself has NVTX compiled out")
    ap.add_argument("--drift-plot", help="profiling/drift_plot.py")
    ap.add_argument("--work", help="a folder for the files the cases write")
    ap.add_argument("case", nargs="?")
    ARGS = ap.parse_args()
    if ARGS.list:
        print("\n".join(CASES))
        return 0
    if ARGS.case not in CASES or not ARGS.cli:
        ap.error(f"--cli and a case are needed; cases: {' '.join(CASES)}")
    try:
        CASES[ARGS.case]()
    except Skip as e:
        print(f"SKIPPED: {e}")
        return SKIP
    except Failure as e:
        print(f"FAILED: {e}")
        return 1
    except Exception:  # a bug in this driver or output it did not expect: fail with the trace
        import traceback
        traceback.print_exc()
        print("FAILED")
        return 1
    print("PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
