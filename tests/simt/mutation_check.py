#!/usr/bin/env python3
"""Plants bugs in the shipped kernels, one at a time, and runs the SIMT test programs against each: the
evidence that the sized-down executor matrices (tests/common/runner.h, Matrix::executor) still catch
every kind of bug they are there for. A developer's tool, not a CI stage (each bug rebuilds the
kernels: about two minutes a bug on two cores).

For each bug: a copy of one source text with one exact piece replaced (the piece must occur once), the
SIMT programs rebuilt in a build folder of their own over a scratch copy of the tree, and the programs
run in order, stopping at the first that fails. A bug is caught when a test fails (a wrong result, an
executor error); the report names the first program and tests that caught it, or says NOT CAUGHT.

Usage: tests/simt/mutation_check.py [--work DIR] [--only NAME]... [--list]
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# In order: the kernel cases (cheap), then the graph cases and the family (which alone launches the
# persistent schedule and the sweep's other tiles).
PROGRAMS = ["kernels_simt_test", "graph_cases_simt_test", "verify_family_simt_test", "pdl_simt_test"]

# name: (file, the exact text, its replacement, the kind of bug). The first five are the mutants that
# verify_mutants_simt_test generates (tests/simt/CMakeLists.txt); the rest are kinds issue 47 names.
BUGS = {
    "no_chunk_barrier": ("kernels/verify_kernel.cuh", "if (u0 > 0) __syncthreads();", "",
                         "a missing barrier: a later chunk's staging overwrites what the last token loop reads"),
    "no_staging_barrier": ("kernels/verify_kernel.cuh", "__pipeline_wait_prior(0);\n    __syncthreads();",
                           "__pipeline_wait_prior(0);", "a missing barrier between the staging and the token loop"),
    "no_copy_wait": ("kernels/verify_kernel.cuh", "__pipeline_wait_prior(0);\n    __syncthreads();", "__syncthreads();",
                     "a missing wait for the staging's copies"),
    "lane_off_by_one": ("kernels/verify_kernel.cuh", "const LaneRows<Tile> at = lane_rows<Tile>(b);",
                        "LaneRows<Tile> at = lane_rows<Tile>(b);\n  at.group_lane += 1;", "a wrong lane"),
    "early_inputs": ("kernels/verify_kernel.cuh", "grid_dependency_wait();\n  trigger_dependent_launch();\n", "",
                     "a PDL read before the wait (the wait dropped: the inputs are read before it)"),
    "reduction_cut_short": ("kernels/verify_update.cuh",
                            "void group_sums_pair(float (&x)[kRows], float (&y)[kRows]) {\n#pragma unroll\n  for (int offset = kLanes / 2; offset > 0; offset /= 2) {",
                            "void group_sums_pair(float (&x)[kRows], float (&y)[kRows]) {\n#pragma unroll\n  for (int offset = kLanes / 2; offset > 1; offset /= 2) {",
                            "a reduction cut short (the token loop's butterfly skips its last step)"),
    "projection_reduction_cut_short": ("kernels/verify_update.cuh",
                                       "void group_sums(float (&x)[kRows]) {\n#pragma unroll\n  for (int offset = kLanes / 2; offset > 0; offset /= 2) {",
                                       "void group_sums(float (&x)[kRows]) {\n#pragma unroll\n  for (int offset = kLanes / 2; offset > 1; offset /= 2) {",
                                       "a reduction cut short (the replayed tokens' projection)"),
    "write_row_off_by_one": ("kernels/verify_staging.cuh", "post_state_row(p, b.n, u - b.r.replay, report)",
                             "post_state_row(p, b.n, u - b.r.replay + (u > b.r.replay ? -1 : 0), report)",
                             "a wrong row: token t's post-state written to token t - 1's row"),
    "replay_write_back_off_by_one": ("kernels/verify_kernel.cuh",
                                     "if (kStoresState && u == b.r.replay - 1) write_back_prefix<Tile>(pool_rows, at.group_lane, s);\n          continue;",
                                     "if (kStoresState && u == b.r.replay - 2) write_back_prefix<Tile>(pool_rows, at.group_lane, s);\n          continue;",
                                     "a replay write-back off by one (the prefix's second-last state written back)"),
    "conv_window_off_by_one": ("kernels/verify_staging.cuh",
                               "for (int j = 0; j < W - 1; ++j) cs.history[j][lc] = cs.history[previous_new + j][lc];",
                               "for (int j = 0; j < W - 1; ++j) cs.history[j][lc] = cs.history[previous_new + j - 1][lc];",
                               "a wrong row of the fused conv's window for a later chunk"),
    "tree_keeps_the_wrong_state": ("kernels/verify_kernel.cuh", "        tree.keep(t + 1, s);\n", "        tree.keep(t, s);\n",
                                   "a token tree's branch state kept for the wrong token"),
    "persistent_no_unit_barrier": ("kernels/verify_kernel.cuh", "if (unit != int64_t(blockIdx.x)) __syncthreads();", "",
                                   "a missing barrier between a persistent block's units"),
    # Bugs between the kernels of a round, which only whole rounds show.
    "accept_keeps_the_parity": ("kernels/accept.h", "p.round_parity[slot] = 1 - (p.row_parity[n] & 1);",
                                "p.round_parity[slot] = p.row_parity[n] & 1;",
                                "accept leaves the parity as the round read it (the next round reads the halves it wrote over)"),
    "accept_reads_before_its_wait": ("kernels/accept.cu",
                                     "  grid_dependency_wait();\n  trigger_dependent_launch();\n  const int32_t n = int32_t(blockIdx.x) * kAcceptThreads + int32_t(threadIdx.x);\n  if (n < p.rows) accept_row(p, n);",
                                     "  const int32_t n = int32_t(blockIdx.x) * kAcceptThreads + int32_t(threadIdx.x);\n  if (n < p.rows) accept_row(p, n);\n  grid_dependency_wait();\n  trigger_dependent_launch();",
                                     "a PDL read before the wait between kernels (accept reads the sampler's lengths early)"),
}


def run(cmd, cwd, log):
    with open(log, "a") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        return subprocess.run(cmd, cwd=cwd, stdout=f, stderr=subprocess.STDOUT).returncode


def failed_tests(output):
    return re.findall(r"^\[  FAILED  \] (\S+)", output, re.M)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", default="/tmp/kdagraph_mutation_check", help="scratch tree and build folder")
    ap.add_argument("--only", action="append", default=[], help="a bug's name (again for more)")
    ap.add_argument("--list", action="store_true", help="list the bugs and exit")
    args = ap.parse_args()
    if args.list:
        for name, (path, _, _, kind) in BUGS.items():
            print(f"{name:32} {path:28} {kind}")
        return 0
    names = args.only or list(BUGS)
    unknown = [n for n in names if n not in BUGS]
    if unknown:
        print(f"no bug named {unknown}; --list names them", file=sys.stderr)
        return 2
    tree, build, log = (os.path.join(args.work, x) for x in ("src", "build", "log.txt"))
    os.makedirs(args.work, exist_ok=True)
    if os.path.isdir(tree):
        shutil.rmtree(tree)
    subprocess.run(["git", "clone", "-q", ROOT, tree], check=True)
    # The working tree's own edits too, as they are now.
    diff = subprocess.run(["git", "-C", ROOT, "diff", "HEAD"], capture_output=True, check=True).stdout
    if diff:
        subprocess.run(["git", "-C", tree, "apply"], input=diff, check=True)
    if run(["cmake", "-S", tree, "-B", build, "-G", "Ninja", "-DKDAGRAPH_ENABLE_CUDA=OFF", "-DKDAGRAPH_BUILD_BENCHMARKS=OFF",
            "-DKDAGRAPH_BUILD_TOOLS=OFF", "-DKDAGRAPH_SIMT_MUTANTS=OFF"], tree, log) != 0:
        print(f"configure failed: {log}", file=sys.stderr)
        return 1
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
    results = []
    for name in names:
        path, text, replacement, kind = BUGS[name]
        source = os.path.join(tree, path)
        original = open(source).read()
        if original.count(text) != 1:
            results.append((name, kind, f"the text occurs {original.count(text)} times in {path}: update the bug"))
            continue
        start = time.time()
        open(source, "w").write(original.replace(text, replacement))
        try:
            if run(["cmake", "--build", build, "--target"] + PROGRAMS, tree, log) != 0:
                results.append((name, kind, "does not compile"))
                continue
            verdict = "NOT CAUGHT"
            for program in PROGRAMS:
                p = subprocess.run([os.path.join(build, "tests", "simt", program)], capture_output=True, text=True, env=env)
                if p.returncode != 0:
                    tests = failed_tests(p.stdout) or ["(the program failed: " + p.stdout.strip().splitlines()[-1][:80] + ")"]
                    verdict = f"caught by {program}: {len(tests)} failed, first {tests[0]}"
                    break
            results.append((name, kind, verdict + f" ({time.time() - start:.0f} s)"))
        finally:
            open(source, "w").write(original)
        print(f"{name}: {results[-1][2]}", flush=True)
    print("\n| bug | kind | outcome |\n|---|---|---|")
    for name, kind, verdict in results:
        print(f"| {name} | {kind} | {verdict} |")
    return 0 if all(v.startswith("caught") for _, _, v in results) else 1


if __name__ == "__main__":
    sys.exit(main())
