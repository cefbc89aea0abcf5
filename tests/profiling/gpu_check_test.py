#!/usr/bin/env python3
"""Tests of the GPU check's CPU side, one ctest per case (tests/CMakeLists.txt asks --list): the dry run of
profiling/gpu_check.sh against this build (and that it catches a broken command line, one mutant per
kind of check), the ptxas report's parser, and profiling/fla_peer.py's logic that needs no GPU.

    gpu_check_test.py --root SOURCE_DIR --build BUILD_DIR CASE

Exit 0: passed; 1: failed (with the reason); 77: skipped (does not apply to this build or machine).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

SKIP = 77
CASES = {}


class Failure(Exception):
    pass


class Skip(Exception):
    pass


def case(fn):
    CASES[fn.__name__] = fn
    return fn


def check(condition, message):
    if not condition:
        raise Failure(message)


# ---- gpu_check.sh's dry run ---------------------------------------------------------------------------------

def dry_run(script, env=None):
    full = dict(os.environ, KDA_DRY_RUN="1", KDA_BUILD_DIR=ARGS.build)
    full.pop("OUT", None)
    full.update(env or {})
    p = subprocess.run(["bash", script], capture_output=True, text=True, env=full, timeout=300)
    if p.returncode == SKIP:
        raise Skip(p.stdout.strip().splitlines()[-1] if p.stdout.strip() else "the dry run does not apply here")
    return p


def stage_results(stdout):
    """{stage: result} from the summary's table."""
    return {s: r for s, r in re.findall(r"^\| (\w+) \| ([^|]+?) \|", stdout, re.M) if s != "stage"}


def mutant_root(replace_from, replace_to):
    """A throwaway tree whose every entry links to the real one, except profiling/gpu_check.sh: a copy with
    one text replaced (which must occur in it)."""
    text = open(os.path.join(ARGS.root, "profiling", "gpu_check.sh")).read()
    check(replace_from in text, f"the mutant's text {replace_from!r} is not in gpu_check.sh any more")
    tmp = tempfile.mkdtemp(prefix="gpu_check_mutant_")
    for entry in os.listdir(ARGS.root):
        if entry not in ("profiling", ".git", "gpu_out"):
            os.symlink(os.path.join(ARGS.root, entry), os.path.join(tmp, entry))
    os.mkdir(os.path.join(tmp, "profiling"))
    for entry in os.listdir(os.path.join(ARGS.root, "profiling")):
        if entry != "gpu_check.sh":
            os.symlink(os.path.join(ARGS.root, "profiling", entry), os.path.join(tmp, "profiling", entry))
    with open(os.path.join(tmp, "profiling", "gpu_check.sh"), "w") as f:
        f.write(text.replace(replace_from, replace_to, 1))
    return tmp


@case
def dry_run_checks_every_stage():
    p = dry_run(os.path.join(ARGS.root, "profiling", "gpu_check.sh"))
    check(p.returncode == 0, f"the dry run failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    results = stage_results(p.stdout)
    plan = re.search(r"^stages: (.*?); opt-in: (.*?);", p.stdout, re.M)
    check(plan, f"no plan line in the dry run:\n{p.stdout}")
    stages, opt_in = plan.group(1).split(), plan.group(2).split()
    check(len(stages) >= 10 and "profile" in opt_in, f"stages {stages}, opt-in {opt_in}")
    # The dry run checks the opt-in stages' command lines too.
    check(set(results) == set(stages + opt_in), f"the table lists {sorted(results)}, not {stages + opt_in}")
    check(all(r == "PASS" for r in results.values()), f"stages not passed: {results}")
    caps = re.search(r"caps (\d+) s of (\d+) s; (\d+) files back", p.stdout)
    check(caps, f"no plan line in the dry run:\n{p.stdout}")
    total, budget, files = (int(g) for g in caps.groups())
    # One device call runs at most 600 s: the check's budget, the tarball and a margin.
    check(total <= budget <= 540, f"the caps exceed the budget: {caps.group(0)}")
    check("verify_sweep" in stages and "sweep_report" in stages, f"no stage for issue 31's sweep: {stages}")
    check(files <= 8, "more than 8 files back")
    # The checks really ran: gtest filters counted, the command line's arguments tried, ctest's label found.
    for needle in (r"dry: ok +tests/kernels_cuda_test --gtest_filter=\S+: [1-9]\d* tests",
                   r"dry: ok +tools/kdagraph bench .*: arguments accepted",
                   r"dry: ok +ctest -L gpu: [1-9]\d* tests", r"dry: ok +cmake -S",
                   r"dry: ok +profiling/fla_peer.py .*--dry-run",
                   r"dry: ok +tools/kdagraph run --backend cuda .*--graph-memory-copies \d+ .*: arguments accepted",
                   r"dry: ok +tests/graph_cuda_test --gtest_filter=\S+: [1-9]\d* tests",
                   r"dry: ok +tools/kdagraph run --backend cuda --check --tree .*--mode replay.*: arguments accepted",
                   r"dry: ok +\S+ -m pytest .*tests/python",
                   r"dry: ok +profiling/bench_verify_sweep --csv \S+: arguments accepted",
                   r"dry: ok +profiling/bench_verify_sweep --check: arguments accepted",
                   r"dry: ok +profiling/bench_verify_sweep --check --only persistent .*: arguments accepted",
                   r"dry: ok +profiling/bench_verify_sweep --check --shapes aims .*: arguments accepted",
                   r"dry: ok +profiling/ncu_table.py \S+ \S+ --md \S+: arguments accepted \(--dry-run\)",
                   r"dry: ok +profiling/sweep_report.py .*--dry-run"):
        check(re.search(needle, p.stdout), f"no line like {needle!r} in the dry run:\n{p.stdout}")


# Each mutant breaks one command line the way an edit could; the dry run must fail that stage.
MUTANTS = {
    "a_gtest_filter_that_matches_nothing": ("*K64_T3_G2", "*K64_T3_G9", {}, "memcheck"),
    "a_misspelt_command_line_option": ("--retire-rate 0.1\"", "--retire-rat 0.1\"", {}, "cli_check"),
    "a_cmake_option_the_project_lacks": ("-DKDAGRAPH_BUILD_TESTS=", "-DKDAGRAPH_BUILD_TEST=", {}, "configure"),
    # Without the stage's cap in the text, so that moving the caps leaves the mutant standing.
    "a_target_the_build_lacks": ("bench_verify_cuda\nstage verify_sweep", "bench_verify_cud\nstage verify_sweep",
                                 {"KDA_STAGES": "build,bench_verify"}, "build"),
    "a_misspelt_script_option": ('"$ROOT/profiling/fla_peer.py" \\\n    --csv', '"$ROOT/profiling/fla_peer.py" \\\n    --cvs',
                                 {}, "fla_peer"),
    "a_benchmark_option_it_lacks": ('--csv "$WORK/bench_verify_cuda.csv"', '--csvs "$WORK/bench_verify_cuda.csv"', {},
                                    "bench_verify"),
    "a_sanitized_command_line_option_it_lacks": ("--mode replay --unfused-conv", "--mode replay --unfused-cnv", {},
                                                 "memcheck"),
    "a_capture_option_it_lacks": ("--graph-memory-copies", "--graph-memory-copy", {}, "capture"),
    "a_python_test_folder_that_is_gone": ('"$ROOT/tests/python"', '"$ROOT/tests/pythn"', {}, "python_tests"),
    "a_sweep_option_it_lacks": ('--csv "$WORK/verify_sweep.csv"', '--cvs "$WORK/verify_sweep.csv"', {}, "verify_sweep"),
    # A family member renamed or dropped: the sanitizer's subset would otherwise run without it.
    "a_table_option_the_script_lacks": ('--md "$WORK/profile.md"', '--mdd "$WORK/profile.md"', {}, "profile"),
    "a_sanitized_member_no_longer_in_the_family": ("--only rows64-lanes16-R4-w8-b1", "--only rows64-lanes16-R4-w8-b9",
                                                   {}, "racecheck"),
}


def make_mutant_case(name, mutation):
    replace_from, replace_to, env, stage = mutation

    def run_mutant():
        root = mutant_root(replace_from, replace_to)
        try:
            p = dry_run(os.path.join(root, "profiling", "gpu_check.sh"), dict(env, KDA_STAGES=env.get("KDA_STAGES", stage)))
        finally:
            shutil.rmtree(root)
        check(p.returncode == 1, f"the dry run passed a mutant ({name}): exit {p.returncode}\n{p.stdout}")
        result = stage_results(p.stdout).get(stage, "")
        check(result.startswith("FAIL"), f"stage {stage} is '{result}', not FAIL:\n{p.stdout}")

    run_mutant.__name__ = "dry_run_catches_" + name
    return case(run_mutant)


for _name, _mutation in MUTANTS.items():
    make_mutant_case(_name, _mutation)


@case
def dry_run_refuses_caps_over_the_budget():
    p = dry_run(os.path.join(ARGS.root, "profiling", "gpu_check.sh"), {"KDA_CHECK_BUDGET_S": "300"})
    check(p.returncode == 1 and "over the budget of 300 s" in p.stdout, f"exit {p.returncode}:\n{p.stdout}")


@case
def dry_run_refuses_more_than_eight_files_back():
    root = mutant_root("RETURNED=(summary.md", "RETURNED=(a b c summary.md")
    try:
        p = dry_run(os.path.join(root, "profiling", "gpu_check.sh"))
    finally:
        shutil.rmtree(root)
    check(p.returncode == 1 and "the device tool brings back 8" in p.stdout, f"exit {p.returncode}:\n{p.stdout}")


@case
def an_unknown_stage_is_refused_by_name():
    p = dry_run(os.path.join(ARGS.root, "profiling", "gpu_check.sh"), {"KDA_STAGES": "build,memchek"})
    check(p.returncode == 2 and "'memchek' is not a stage" in p.stderr, f"exit {p.returncode}:\n{p.stderr}")


# ---- the stage runner, for real (stages that need no GPU) ------------------------------------------------

RUNNER_STAGES = r"""
stage_lazy() {
  echo "loading=${CUDA_MODULE_LOADING:-lazy} retry=${KDA_RETRY:-0}"
  [[ "${CUDA_MODULE_LOADING:-}" == EAGER ]] && return 0
  echo "launch failed: cudaErrorStreamCaptureInvalidated: operation failed due to a previous error during capture"
  return 1
}
stage_after() { echo "after: loading=${CUDA_MODULE_LOADING:-lazy}"; note "a note"; echo "after's section" | section; }
stage_slow() {
  sleep 60 &
  echo $! >"$WORK/slow_child.pid"
  wait
}
stage_broken() { return 3; }
stage_sleepy() { sleep 5; echo "sleepy: done"; }
stage_sanitized() { sanitize memcheck "profiling/clean" "profiling/faulty" "profiling/slow 1"; }
"""

# compute-sanitizer for stage_sanitized: a program named slow outlives any cap (its pid in $KDA_FAKE_DIR), one
# named faulty has an error (the sanitizer's status 99), the others are clean.
FAKE_SANITIZER = r"""#!/usr/bin/env bash
case "$*" in
  */profiling/slow*) sleep 60 & echo $! >"$KDA_FAKE_DIR/slow_program.pid"; wait ;;
  */profiling/faulty*) echo "========= Invalid __global__ read of size 4 bytes"; exit 99 ;;
  *) echo "========= ERROR SUMMARY: 0 errors" ;;
esac
"""


def alive(pid):
    try:
        os.kill(pid, 0)
        return open(f"/proc/{pid}/stat").read().split()[2] != "Z"
    except (ProcessLookupError, FileNotFoundError):
        return False


def run_fake_stages(stages, opt_in=(), select=True, env_extra=None):
    """gpu_check.sh for real, with only `stages` (defined in RUNNER_STAGES) in its table, then `opt_in` as
    opt-in stages (the real ones are taken out of the running order); KDA_STAGES names them all when
    `select`, else none; `env_extra` added to its environment."""
    table = "".join(f"stage {name} {cap}\n" for name, cap in stages)
    table += "".join(f"opt_in_stage {name} {cap}\n" for name, cap in opt_in)
    root = mutant_root("stage environment 10\n", table + "stage environment 10\n")
    try:
        script = os.path.join(root, "profiling", "gpu_check.sh")
        order = "STAGE_NAMES=(" + " ".join(n for n, _ in list(stages) + list(opt_in)) + ")\n"
        text = open(script).read().replace('source "$ROOT/profiling/gpu_check_runner.sh"',
                                           RUNNER_STAGES + order + 'source "$ROOT/profiling/gpu_check_runner.sh"')
        open(script, "w").write(text)
        env = dict(os.environ, KDA_STAGES=",".join(n for n, _ in list(stages) + list(opt_in)),
                   KDA_CHECK_BUDGET_S="1000", KDA_BUILD_DIR=os.path.join(root, "build-fake"))
        for name in ("OUT", "KDA_DRY_RUN", "CUDA_MODULE_LOADING") + (() if select else ("KDA_STAGES",)):
            env.pop(name, None)
        env.update(env_extra or {})
        p = subprocess.run(["bash", script], capture_output=True, text=True, env=env, timeout=120)
        work = os.path.join(root, "gpu_out")
        logs = {f: open(os.path.join(work, f)).read() for f in os.listdir(work) if os.path.isfile(os.path.join(work, f))}
        return p, logs
    finally:
        shutil.rmtree(root)


@case
def runner_reruns_a_failed_capture_with_eager_module_loading():
    p, logs = run_fake_stages([("lazy", 20), ("after", 5)])
    check(p.returncode == 0, f"exit {p.returncode}:\n{p.stdout}{p.stderr}")
    results = stage_results(p.stdout)
    check(results.get("lazy") == "PASS" and results.get("after") == "PASS", f"results {results}")
    check("loading=lazy retry=0" in logs["lazy.lazy.log"], "the first attempt ran under lazy loading")
    check("loading=EAGER retry=1" in logs["lazy.log"], "the rerun ran with EAGER and KDA_RETRY")
    check("after: loading=EAGER" in logs["after.log"], "EAGER stays set for the stages after")
    check("CUDA_MODULE_LOADING=EAGER" in logs["lazy.note"], "the note says so")
    summary = logs["summary.md"]
    check("after's section" in summary and "a note" in summary, summary)
    check(summary.rstrip().splitlines()[-1].startswith("total "), "the table of stages comes last")


@case
def runner_stops_a_stage_at_its_cap_with_its_children():
    import time

    start = time.time()
    p, logs = run_fake_stages([("slow", 3), ("broken", 5), ("after", 5)])
    check(time.time() - start < 30, "the slow stage ran past its cap")
    results = stage_results(p.stdout)
    check(results.get("slow") == "TIMEOUT" and results.get("broken") == "FAIL (3)" and results.get("after") == "PASS",
          f"results {results}")
    check(p.returncode == 1, f"a timeout or failure exits 1, not {p.returncode}")
    child = int(logs["slow_child.pid"])
    check(not alive(child), f"the slow stage's child {child} outlived it")
    check("Terminated" not in p.stdout + p.stderr, "job control's notice is silenced")


@case
def runner_lends_a_stage_the_seconds_earlier_stages_left_but_not_later_stages_caps():
    # 5 s of work under a 3 s cap: after a stage that left most of its 10 s, it passes on them and the note
    # says so; before that stage, it is stopped at its own cap (the later stage's 10 s are not lent).
    p, logs = run_fake_stages([("after", 10), ("sleepy", 3)])
    results = stage_results(p.stdout)
    check(p.returncode == 0 and results.get("sleepy") == "PASS", f"exit {p.returncode}, results {results}")
    check(re.search(r"ran [1-9] s past its cap, on the (8|9|10) s the stages before it left", logs.get("sleepy.note", "")),
          f"the note says it ran on saved time: {logs.get('sleepy.note')!r}")
    p, logs = run_fake_stages([("sleepy", 3), ("after", 10)])
    results = stage_results(p.stdout)
    check(results.get("sleepy") == "TIMEOUT" and results.get("after") == "PASS", f"results {results}")
    check("sleepy: done" not in logs.get("sleepy.log", ""), "the first stage ran on the later stage's cap")


@case
def sanitize_stops_a_slow_program_before_the_cap_and_keeps_the_others_verdicts():
    import time

    fake = tempfile.mkdtemp(prefix="fake_sanitizer_")
    try:
        path = os.path.join(fake, "compute-sanitizer")
        with open(path, "w") as f:
            f.write(FAKE_SANITIZER)
        os.chmod(path, 0o755)
        start = time.time()
        p, logs = run_fake_stages([("sanitized", 9)], env_extra={
            "PATH": fake + os.pathsep + os.environ["PATH"], "KDA_FAKE_DIR": fake})
        took = time.time() - start
        results = stage_results(p.stdout)
        check(results.get("sanitized") == "FAIL (1)", f"a finding and a timeout fail the stage, not {results}")
        check(took < 20, f"the stage took {took:.0f} s")
        note = logs.get("sanitized.note", "")
        check("memcheck errors in 1: faulty_1;" in note, f"the finding is named: {note!r}")
        check(re.search(r"failed on their own \(no memcheck error\): 1: slow_2 \(timed out after \d+ s\)", note),
              f"the slow program is named as timed out: {note!r}")
        check("ERROR SUMMARY: 0 errors" in logs.get("memcheck_clean_0.log", ""), "the clean program's log is kept")
        program = int(open(os.path.join(fake, "slow_program.pid")).read())
        check(not alive(program), f"the slow program {program} outlived its limit")
    finally:
        shutil.rmtree(fake)


@case
def runner_runs_an_opt_in_stage_only_when_named():
    p, logs = run_fake_stages([("after", 5)], opt_in=[("broken", 5)], select=False)
    results = stage_results(p.stdout)
    check(p.returncode == 0 and results.get("after") == "PASS" and results.get("broken") == "opt-in, not selected",
          f"exit {p.returncode}, results {results}")
    check(re.search(r"opt-in: broken; caps 5 s of", p.stdout), f"the plan counts the opt-in stage:\n{p.stdout}")
    p, logs = run_fake_stages([("after", 5)], opt_in=[("broken", 5)])
    results = stage_results(p.stdout)
    check(p.returncode == 1 and results.get("broken") == "FAIL (3)", f"named, it runs: exit {p.returncode}, {results}")


# ---- ncu_table.py ----------------------------------------------------------------------------------------------

# The raw page as ncu --csv --page raw --print-units base writes it to its log file (its messages, the header,
# the units row, a row a kernel; the metrics' columns in ncu's order, not the script's), and the program's
# lines for the same two launches.
NCU_CSV = """\
==PROF== Connected to process 4242 (/build-gpu/profiling/bench_verify_sweep)
==PROF== Profiling "verify_kernel": 0%....50%....100% - 9 passes
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","dram__bytes_read.sum","dram__bytes_write.sum","dram__throughput.avg.pct_of_peak_sustained_elapsed","gpu__time_duration.sum","launch__grid_size","launch__registers_per_thread","sm__throughput.avg.pct_of_peak_sustained_elapsed","sm__warps_active.avg.pct_of_peak_sustained_active"
"","","","","","","","","","","","byte","byte","%","nsecond","","register/thread","%","%"
"0","4242","bench_verify_sweep","127.0.0.1","void kdagraph::verify_kernel<...>(kdagraph::VerifyParams)","1","13","(128, 1, 1)","(32768, 1, 1)","0","9.0","33,554,432","167,772,160","61.5","80000","32768","128","40.2","55.1"
"1","4242","bench_verify_sweep","127.0.0.1","void kdagraph::verify_kernel<...>(kdagraph::VerifyParams)","1","13","(128, 1, 1)","(528, 1, 1)","0","9.0","33554432","167772160","85.0","50000","528","122","52.0","90.3"
==PROF== Disconnected from process 4242
"""
NCU_PROGRAM = """\
device: NVIDIA H200, 132 SMs, L2 60 MiB; --check: 2 members, once a shape (--shapes aims), untimed
chain     fused-accept HV=32 T=4 batch=128 state=f32  library                            library
chain     fused-accept HV=32 T=4 batch=128 state=f32  rows16-lanes32-R4-w4-b4-persistent bitwise
0 of 1 member runs with the library's formula gave other bits than the library
"""


def ncu_table(csv_text, program_text):
    folder = tempfile.mkdtemp(prefix="ncu_")
    paths = [os.path.join(folder, name) for name in ("ncu.csv", "program.txt")]
    for path, text in zip(paths, (csv_text, program_text)):
        with open(path, "w") as f:
            f.write(text)
    p = subprocess.run([sys.executable, os.path.join(ARGS.root, "profiling", "ncu_table.py"), *paths],
                       capture_output=True, text=True, timeout=60)
    shutil.rmtree(folder)
    return p


@case
def ncu_table_labels_each_kernel_with_its_run():
    p = ncu_table(NCU_CSV, NCU_PROGRAM)
    check(p.returncode == 0, f"exit {p.returncode}:\n{p.stdout}{p.stderr}")
    rows = [line for line in p.stdout.splitlines() if line.startswith("| chain")]
    check(len(rows) == 2, f"not one row a kernel:\n{p.stdout}")
    # 32 + 160 MiB (201326592 bytes) over 80 us is 2517 GB/s, over 50 us 4027 GB/s.
    library = [c.strip() for c in rows[0].split("|")[1:-1]]
    check(library[:7] == ["chain", "fused-accept", "32", "4", "128", "f32", "library"], f"labels {library}")
    check(library[7:] == ["80.0", "2517", "62", "55", "40", "32768", "128"], f"values {library[7:]}")
    member = [c.strip() for c in rows[1].split("|")[1:-1]]
    check(member[6] == "rows16-lanes32-R4-w4-b4-persistent" and member[7:9] == ["50.0", "4027"], f"member {member}")


@case
def ncu_table_does_not_pair_rows_it_cannot_match():
    program = NCU_PROGRAM.replace("chain     fused-accept HV=32 T=4 batch=128 state=f32  library                            library\n", "")
    p = ncu_table(NCU_CSV, program)
    check(p.returncode == 1 and "unlabelled" in p.stdout, f"exit {p.returncode}:\n{p.stdout}")
    check("rows16" not in p.stdout, f"a row was labelled with another launch:\n{p.stdout}")
    p = ncu_table("==PROF== Disconnected from process 1\n", NCU_PROGRAM)
    check(p.returncode == 1 and "no kernel rows" in p.stderr, f"exit {p.returncode}:\n{p.stderr}")


# ---- ptxas_report.py -------------------------------------------------------------------------------------------

# As nvcc -Xptxas=-v prints them (a build of kernels/verify.cu and accept.cu), then a spilling kernel.
PTXAS_CLEAN = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_ZN8kdagraph41_GLOBAL__N__fa87f4bb_9_verify_cu_36edfe6313verify_kernelILi128ELi4EffEEvNS_12VerifyParamsE' for 'sm_90'
ptxas info    : Function properties for _ZN8kdagraph41_GLOBAL__N__fa87f4bb_9_verify_cu_36edfe6313verify_kernelILi128ELi4EffEEvNS_12VerifyParamsE
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 95 registers, used 1 barriers, 25680 bytes smem
ptxas info    : Compile time = 992.572 ms
[12/40] Building CUDA object CMakeFiles/kdagraph.dir/kernels/accept.cu.o
ptxas info    : Compiling entry function '_ZN8kdagraph13accept_kernelENS_12AcceptParamsE' for 'sm_90'
ptxas info    : Function properties for _ZN8kdagraph13accept_kernelENS_12AcceptParamsE
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 19 registers, 384 bytes cmem[0]
"""
PTXAS_SPILL = """\
ptxas info    : Compiling entry function '_ZN8kdagraph13accept_kernelENS_12AcceptParamsE' for 'sm_90'
ptxas info    : Function properties for _ZN8kdagraph13accept_kernelENS_12AcceptParamsE
    24 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 255 registers, 384 bytes cmem[0]
"""


def ptxas_report(text):
    path = os.path.join(tempfile.mkdtemp(prefix="ptxas_"), "build.log")
    with open(path, "w") as f:
        f.write(text)
    p = subprocess.run([sys.executable, os.path.join(ARGS.root, "profiling", "ptxas_report.py"), path],
                       capture_output=True, text=True, timeout=60)
    shutil.rmtree(os.path.dirname(path))
    return p


@case
def ptxas_report_reads_every_kernel():
    p = ptxas_report(PTXAS_CLEAN)
    check(p.returncode == 0, f"exit {p.returncode}:\n{p.stdout}{p.stderr}")
    rows = [line for line in p.stdout.splitlines() if line.startswith("| `")]
    check(len(rows) == 2, f"two kernels, not:\n{p.stdout}")
    verify = next(r for r in rows if "verify_kernel" in r)
    check(re.search(r"\| sm_90 \| 95 \| 25680 \| 0 \| 0 \| 0 \| 1 \|$", verify), f"the verify kernel's row: {verify}")
    check("2 kernels (sm_90), 19 to 95 registers" in p.stdout and "no spills" in p.stdout, p.stdout)


@case
def ptxas_report_fails_on_spills_and_on_nothing():
    p = ptxas_report(PTXAS_CLEAN + PTXAS_SPILL)  # accept_kernel compiled again: the later lines count
    check(p.returncode == 1, f"spills must fail the report; exit {p.returncode}:\n{p.stdout}")
    accept = next(r for r in p.stdout.splitlines() if "accept_kernel" in r)
    check("LOCAL MEMORY" in accept and "| 255 | 0 | 24 | 8 | 12 |" in accept, f"the spilling row: {accept}")
    check("LOCAL MEMORY in 1" in p.stdout, p.stdout)
    p = ptxas_report("[1/2] Linking CXX executable tools/kdagraph\n")
    check(p.returncode == 2 and "not checked" in p.stdout, f"a log without ptxas lines: exit {p.returncode}")


# The synthetic drafter keeps a tree's child counts in local memory by design: its stack frame is listed,
# not failed; a spill in it still fails. The token-tree verify keeps its branch states in shared memory
# now: a stack frame there fails, as in the chain kernel.
PTXAS_DRAFTER = """\
ptxas info    : Compiling entry function '_ZN8kdagraph12_GLOBAL__N_121synthetic_tree_kernelEPiiiiy' for 'sm_90'
ptxas info    : Function properties for _ZN8kdagraph12_GLOBAL__N_121synthetic_tree_kernelEPiiiiy
    1104 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 40 registers, used 0 barriers, 1104 bytes cumulative stack size
"""
PTXAS_TREE = """\
ptxas info    : Compiling entry function '_ZN8kdagraph52_GLOBAL__N__bd98041f_14_verify_tree_cu_4ab55af6_503813verify_kernelILi128ELi4ELb0ELb1EffEEvNS_12VerifyParamsE' for 'sm_90'
ptxas info    : Function properties for _ZN8kdagraph52_GLOBAL__N__bd98041f_14_verify_tree_cu_4ab55af6_503813verify_kernelILi128ELi4ELb0ELb1EffEEvNS_12VerifyParamsE
    1104 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 106 registers, used 1 barriers, 1104 bytes cumulative stack size, 25680 bytes smem
"""


@case
def ptxas_report_lists_only_the_drafters_stack_by_design():
    p = ptxas_report(PTXAS_CLEAN + PTXAS_DRAFTER)
    check(p.returncode == 0, f"the drafter's stack is by design; exit {p.returncode}:\n{p.stdout}")
    drafter = next(r for r in p.stdout.splitlines() if "1104" in r and r.startswith("| `"))
    check("stack by design" in drafter and "LOCAL MEMORY" not in drafter, f"the drafter's row: {drafter}")
    check("1 with a stack frame by design" in p.stdout, p.stdout)
    p = ptxas_report(PTXAS_CLEAN + PTXAS_DRAFTER.replace("0 bytes spill stores", "8 bytes spill stores"))
    check(p.returncode == 1, f"a spill in the drafter must fail; exit {p.returncode}:\n{p.stdout}")
    p = ptxas_report(PTXAS_CLEAN + PTXAS_TREE)
    check(p.returncode == 1, f"a stack frame in the tree verify must fail; exit {p.returncode}:\n{p.stdout}")
    chain = PTXAS_CLEAN.replace("    0 bytes stack frame, 0 bytes spill stores", "    16 bytes stack frame, 0 bytes spill stores", 1)
    p = ptxas_report(chain)
    check(p.returncode == 1, f"a stack frame in the chain kernel must fail; exit {p.returncode}:\n{p.stdout}")


# ---- fla_peer.py -----------------------------------------------------------------------------------------------

def fla_peer():
    try:
        import numpy  # noqa: F401
    except ImportError:
        raise Skip("numpy is not installed for this python")
    sys.path.insert(0, os.path.join(ARGS.root, "profiling"))
    import fla_peer as module
    return module


@case
def fla_peer_is_unavailable_without_fla():
    fla_peer()  # numpy, or skip
    code = ("import runpy, sys; sys.modules['fla'] = None; sys.argv = ['fla_peer.py']; "
            f"runpy.run_path({os.path.join(ARGS.root, 'profiling', 'fla_peer.py')!r}, run_name='__main__')")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    check(p.returncode == SKIP, f"exit {p.returncode}, not {SKIP}:\n{p.stdout}{p.stderr}")
    check("UNAVAILABLE: fla-core is not installed" in p.stdout, p.stdout)
    check("FlashInfer's KDA kernels need SM100" in p.stdout, "the output says why the peers are Triton's")


@case
def fla_peer_builds_the_issues_calls_on_the_same_tensors():
    m = fla_peer()
    shapes = m.grid()
    check(sorted({(s.batch, s.value_heads, s.tokens) for s in shapes}) ==
          sorted((b, hv, t) for b in (1, 8, 32, 128) for hv in (16, 32) for t in (2, 4, 8)), "the grid")
    s = m.Shape(8, 16, 4)
    tensors = {name: object() for name in list(m.tensor_shapes(s)) + ["pool_kdagraph", "pool_fla", "o_kdagraph", "o_fla"]}
    fla_args, fla_kwargs = m.fla_call(tensors, s)
    check(set(fla_kwargs) == {"A_log", "dt_bias", "initial_state", "scale", "inplace_final_state", "state_v_first",
                              "ssm_state_indices", "num_accepted_tokens", "use_qk_l2norm_in_kernel",
                              "use_gate_in_kernel", "use_beta_sigmoid_in_kernel", "out"}, f"FLA's keywords: {sorted(fla_kwargs)}")
    check(all(fla_kwargs[k] is True for k in m.FLA_FLAGS), "every flag of the issue's call is on")
    kd_args, kd_kwargs = m.kdagraph_call(tensors, s)
    check(fla_args == kd_args, "the same q, k, v, g, beta")
    for shared in ("A_log", "dt_bias", "ssm_state_indices", "num_accepted_tokens"):
        check(fla_kwargs[shared] is kd_kwargs[shared], f"{shared} is the same object for both")
    check(fla_kwargs["scale"] == kd_kwargs["scale"] == 128 ** -0.5, "the same scale, 1 / sqrt(K)")
    check(fla_kwargs["initial_state"] is tensors["pool_fla"] and kd_kwargs["initial_state"] is tensors["pool_kdagraph"],
          "each call updates its own copy of the pool")
    check(kd_kwargs["beta_is_logit"] and kd_kwargs["use_gate_in_kernel"] and kd_kwargs["use_qk_l2norm_in_kernel"],
          "kdagraph gets the same preprocessing")


@case
def fla_peer_keywords_are_named_parameters_of_both_functions():
    """Against the carried wheel's source (no torch needed: parsed, not imported) and kdagraph's package."""
    import ast

    m = fla_peer()
    s = m.Shape(1, 16, 2)
    tensors = {name: name for name in list(m.tensor_shapes(s)) + ["pool_kdagraph", "pool_fla", "o_kdagraph", "o_fla"]}

    def parameters(source, function):
        fn = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef) and n.name == function)
        return {a.arg for a in fn.args.args + fn.args.kwonlyargs}

    kd = parameters(open(os.path.join(ARGS.root, "python", "kdagraph", "_recurrent_kda.py")).read(), "recurrent_kda")
    stray = set(m.kdagraph_call(tensors, s)[1]) - kd
    check(not stray, f"recurrent_kda has no parameter {sorted(stray)}")
    wheels = [w for w in os.listdir(os.path.join(ARGS.root, ".whl"))] if os.path.isdir(os.path.join(ARGS.root, ".whl")) else []
    wheels = [w for w in wheels if w.startswith("fla_core-")]
    if not wheels:
        raise Skip("no fla-core wheel in .whl/ (pip download fla-core==0.6.0 --no-deps -d .whl)")
    with zipfile.ZipFile(os.path.join(ARGS.root, ".whl", wheels[0])) as z:
        source = z.read("fla/ops/kda/fused_recurrent.py").decode()
    fla = parameters(source, "fused_recurrent_kda_fwd")
    stray = set(m.fla_call(tensors, s)[1]) - fla
    check(not stray, f"fused_recurrent_kda_fwd ({wheels[0]}) has no parameter {sorted(stray)}: **kwargs would swallow it")


@case
def fla_peer_indices_are_sglangs():
    m = fla_peer()
    import numpy as np

    s = m.Shape(8, 16, 4)
    rng = np.random.default_rng(1)
    slots, accept = m.batch_plan(s, rng)
    check(len(set(slots.tolist())) == s.batch and slots.min() >= 0 and slots.max() < s.slots, f"slots {slots}")
    check(s.slots > s.batch, "some slots stay outside the batch")
    check(accept.min() >= 1 and accept.max() <= s.tokens, f"accept lengths {accept}")
    idx, nat = m.expected_indices(slots, accept, s)
    for b in range(s.batch):
        check(list(idx[b]) == [slots[b] * s.tokens + t for t in range(s.tokens)], f"row {b}: {idx[b]}")
        check(nat[b] == accept[slots[b]], f"row {b}'s accept length")


def scalar_reference(seed, q, k, v, x, beta_logit, A_log, dt_bias, scale):
    """docs/math.md element by element, sharing nothing with fla_peer.reference_row."""
    import math

    T, H, K = len(q), len(q[0]), len(q[0][0])
    HV, V = len(v[0]), len(v[0][0])
    S = [[[float(seed[h][j][i]) for i in range(K)] for j in range(V)] for h in range(HV)]
    outs, posts = [], []
    for t in range(T):
        o_t = []
        for h in range(HV):
            qh, kh = q[t][h * H // HV], k[t][h * H // HV]
            qn = math.sqrt(sum(a * a for a in qh) + 1e-6)
            kn = math.sqrt(sum(a * a for a in kh) + 1e-6)
            qq = [a / qn * scale for a in qh]
            kk = [a / kn for a in kh]
            beta = 1 / (1 + math.exp(-beta_logit[t][h]))
            for i in range(K):
                z = x[t][h][i] + dt_bias[h * K + i]
                g = -math.exp(A_log[h]) * (z if z > 20 else math.log1p(math.exp(z)))
                for j in range(V):
                    S[h][j][i] *= math.exp(g)
            for j in range(V):
                p = sum(S[h][j][i] * kk[i] for i in range(K))
                u = beta * (v[t][h][j] - p)
                for i in range(K):
                    S[h][j][i] += kk[i] * u
            o_t.append([sum(S[h][j][i] * qq[i] for i in range(K)) for j in range(V)])
        outs.append(o_t)
        posts.append([[row[:] for row in S[h]] for h in range(HV)])
    return outs, posts


@case
def fla_peer_reference_is_spec_1():
    m = fla_peer()
    import numpy as np

    rng = np.random.default_rng(7)
    T, H, HV, K = 3, 1, 2, 4  # grouped heads: both value heads read query/key head 0
    seed = rng.uniform(-1, 1, (HV, K, K))
    q, k = rng.uniform(-1, 1, (T, H, K)), rng.uniform(-1, 1, (T, H, K))
    v, x = rng.uniform(-1, 1, (T, HV, K)), rng.uniform(-4, 2, (T, HV, K))
    beta, A_log, dt_bias = rng.uniform(-3, 3, (T, HV)), rng.uniform(-1.5, 0.5, HV), rng.uniform(-0.5, 0.5, HV * K)
    got_o, got_s = m.reference_row(seed, q, k, v, x, beta, A_log, dt_bias, 0.5)
    want_o, want_s = scalar_reference(seed.tolist(), q.tolist(), k.tolist(), v.tolist(), x.tolist(), beta.tolist(),
                                      A_log.tolist(), dt_bias.tolist(), 0.5)
    check(np.allclose(got_o, want_o, rtol=1e-12, atol=1e-12), f"outputs\n{got_o}\n{want_o}")
    check(np.allclose(got_s, want_s, rtol=1e-12, atol=1e-12), "post-states")


@case
def fla_peer_agreement_catches_each_difference():
    m = fla_peer()
    import numpy as np

    rng = np.random.default_rng(3)
    B, T, HV, V = 3, 2, 2, 4
    out = rng.uniform(-1, 1, (B, T, HV, V))
    states = rng.uniform(-1, 1, (B, T, HV, V, V))
    rows = [0, B - 1]
    same = m.agreement(out, out.copy(), states, states.copy(), rows, out[rows], states[rows])
    check(same.agrees and same.out_between == 0 and same.state_kdagraph == 0, f"identical arrays: {same}")
    off = states.copy()
    off[1, 1, 0, 2, 3] += 1.0  # a row not checked against the reference: only the comparison between sees it
    a = m.agreement(out, out, states, off, rows, out[rows], states[rows])
    check(not a.agrees and a.state_between > m.TOLERANCE and a.state_fla == 0, f"a post-state off by one: {a}")
    nan = out.copy()
    nan[0, 0, 0, 0] = np.nan
    a = m.agreement(nan, out, states, states, rows, out[rows], states[rows])
    check(not a.agrees and a.out_kdagraph == float("inf"), f"a NaN output: {a}")
    a = m.agreement(out, out, states, states, rows, out[rows], states[rows], untouched=False)
    check(not a.agrees, "a row outside the batch changed")
    small = out * (1 + 1e-3)
    check(m.agreement(small, out, states, states, rows, out[rows], states[rows]).agrees, "bf16-sized differences agree")


@case
def fla_peer_dry_run_lists_every_call():
    """Needs only the standard library (no numpy): the GPU check's dry run calls it on any machine."""
    p = subprocess.run([sys.executable, os.path.join(ARGS.root, "profiling", "fla_peer.py"), "--dry-run"],
                       capture_output=True, text=True, timeout=120)
    check(p.returncode == 0, p.stderr)
    check(p.stdout.count("fused_recurrent_kda_fwd(") == 24 and p.stdout.count("kdagraph.recurrent_kda(") == 24, p.stdout)
    check("initial_state=pool_fla[640, 32, 128, 128]:float32" in p.stdout, "batch 128 (and 32 spare slots) at T = 4")


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--list", action="store_true", help="print the case names, one a line")
    ap.add_argument("--root")
    ap.add_argument("--build")
    ap.add_argument("case", nargs="?")
    ARGS = ap.parse_args()
    if ARGS.list:
        print("\n".join(CASES))
        return 0
    ARGS.root, ARGS.build = os.path.abspath(ARGS.root), os.path.abspath(ARGS.build)
    try:
        CASES[ARGS.case]()
    except Skip as e:
        print(f"SKIPPED: {e}")
        return SKIP
    except Failure as e:
        print(f"FAILED: {e}")
        return 1
    print("passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
