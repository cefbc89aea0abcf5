#!/usr/bin/env bash
# shellcheck disable=SC2317  # the stage functions run through run_stage
# The GPU check (issue 24): everything a lent GPU should show, in one run of at most KDA_CHECK_BUDGET_S
# (540) seconds, one device call, on a machine with a CUDA device, nvcc, cmake, ninja, python3 with torch,
# triton, cupy, nanobind, scikit-build-core and pytest, compute-sanitizer, and no network. It configures
# and builds, for KDAGRAPH_CUDA_ARCHITECTURES (90), only what its stages run (the library, the
# *_cuda_test targets, bench_verify_cuda, bench_conv_verify, the command line, the Python extension),
# then: the kernels' registers, shared memory, stack and spills from ptxas; every gpu-labelled test;
# tests/python against this build (torch and cupy arrays, torch.cuda.graph captures of the drop-ins,
# token trees; none may skip); the command line against the CPU reference; the capture of every bucket
# and the device memory of one graph; the verify's bandwidth; one kernel per layer (the conv fused into
# the verify) against two, PDL on and off (bench_conv_verify); whole rounds in every mode (kdagraph
# bench); flash-linear-attention's Triton KDA on the same tensors (profiling/fla_peer.py, from the
# fla-core wheel in ./.whl); compute-sanitizer memcheck and racecheck over a fast subset (fused accept,
# replay, graph replays, token trees). profiling/README.md says how to run it with the device tool and how
# its results are committed.
#
# Run from the repository root:
#   profiling/gpu_check.sh                                    the whole check
#   KDA_STAGES=build,memcheck profiling/gpu_check.sh          a targeted rerun (the others: "not selected");
#                                                             the build makes only the chosen stages' targets
#   KDA_STAGES=profile profiling/gpu_check.sh                  the opt-in profile stage (Nsight Compute on the
#                                                             verify at the aims' shapes), a second call on
#                                                             the first's warm machine (its build is there;
#                                                             a fresh one needs environment,configure,build too)
#   KDA_DRY_RUN=1 KDA_BUILD_DIR=build profiling/gpu_check.sh  no GPU: checks every stage's command lines
#                                                             against a configured CUDA build (CI runs it)
# More settings: KDA_BUILD_DIR (build-gpu), KDA_JOBS (nproc), KDA_PYTHON (python3), KDA_COMMIT (recorded
# in the summary: the device machine gets the files without .git), KDAGRAPH_GTEST_SOURCE_DIR (else ./.gtest,
# a copy of Debian's /usr/src/googletest, else /usr/src/googletest), KDAGRAPH_RANDOM123_INCLUDE (else ./.deps,
# holding a copy of Debian's /usr/include/Random123), KDAGRAPH_WERROR (OFF).
#
# Each stage runs under its own cap (the caps add up to at most the budget; the dry run checks that), plus
# the seconds the stages before it left of theirs (the note says when it ran past its own cap on them). A
# failing stage does not stop the next. Logs and results land in ./gpu_out; when $OUT is
# set (the device tool's return folder, at most 8 files) RETURNED is copied there, the logs as one
# tarball. The summary (each stage's section, then the table of stages) is printed last. Exit status: 0
# all passed; 1 a stage failed or ran out of time; 3 none failed but a tool could not run here
# (UNAVAILABLE, e.g. compute-sanitizer on a GPU it refuses, or no fla-core wheel). A capture that fails on
# a module's first load (lazy loading) reruns its stage with CUDA_MODULE_LOADING=EAGER, which then stays
# set for the rest of the run.
set -u
if ((BASH_VERSINFO[0] < 5 || (BASH_VERSINFO[0] == 5 && BASH_VERSINFO[1] < 1))); then
  echo "gpu_check.sh needs bash 5.1 or later (wait -n -p)" >&2
  exit 2
fi

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DRY=${KDA_DRY_RUN:-0}
RETURN_DIR=${OUT:-}
BUILD=${KDA_BUILD_DIR:-$ROOT/build-gpu}
[[ "$BUILD" == /* ]] || BUILD=$ROOT/$BUILD
ARCH=${KDAGRAPH_CUDA_ARCHITECTURES:-90}
BUDGET_S=${KDA_CHECK_BUDGET_S:-540}
JOBS=${KDA_JOBS:-$(nproc)}
PYTHON=${KDA_PYTHON:-python3}
COMMIT=${KDA_COMMIT:-$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)}
if ((DRY)); then
  WORK=$(mktemp -d)
  trap 'rm -rf "$WORK"' EXIT
else
  WORK=$ROOT/gpu_out
fi
EXIT_UNAVAILABLE=77
# The toolkit's programs (nvcc, compute-sanitizer) where a CUDA image leaves them off PATH.
command -v nvcc >/dev/null || { [[ -x /usr/local/cuda/bin/nvcc ]] && export PATH=/usr/local/cuda/bin:$PATH; }

# ---- the stages, in running order ----------------------------------------------------------------------
# stage NAME CAP [TARGET...]: stage_NAME (below) runs within CAP seconds, after the build stage has made
# the TARGETs (@cuda_tests: every *_cuda_test target of the build). To add a stage: write stage_NAME
# (its commands through `x`, so the dry run checks them), add its line here and lower other caps so the
# total stays within the budget; a file it wants back goes into RETURNED (at most 8 with
# the tarball).
# opt_in_stage: the same, but run only when KDA_STAGES names it (and by the dry run), outside the
# budget's sum: for a targeted second call, when the first has shown what to look into.
STAGE_NAMES=()
declare -A STAGE_CAP STAGE_TARGETS STAGE_OPT_IN
stage() {
  local name=$1 cap=$2
  shift 2
  STAGE_NAMES+=("$name")
  STAGE_CAP[$name]=$cap
  STAGE_TARGETS[$name]="$*"
}
opt_in_stage() {
  stage "$@"
  STAGE_OPT_IN[$1]=1
}
stage environment 10
stage configure 20
stage build 90 kdagraph
stage ptxas 5 kdagraph
stage gpu_tests 70 @cuda_tests
stage python_tests 60 _kdagraph _kdagraph_stub kdagraph_cli
stage cli_check 15 kdagraph_cli
stage capture 10 kdagraph_cli
stage bench_verify 15 bench_verify_cuda
stage verify_sweep 45 bench_verify_sweep
stage conv_verify_bench 25 bench_conv_verify
stage round_bench 75 kdagraph_cli
stage fla_peer 40 _kdagraph _kdagraph_stub kdagraph_cli
stage sweep_report 5
stage memcheck 40 kernels_cuda_test graph_cuda_test kdagraph_cli bench_verify_sweep
stage racecheck 15 kernels_cuda_test graph_cuda_test kdagraph_cli bench_verify_sweep
opt_in_stage profile 150 bench_verify_sweep
RETURNED=(summary.md gpu_logs.tar.gz bench_verify_cuda.csv kdagraph_bench_kimi-linear-48b-tp2.csv
  kdagraph_bench_kimi-linear-48b.csv fla_peer.csv verify_sweep.csv)
# Targets that exist only when an option is on: where it is off, the build leaves them out (and says so).
declare -A TARGET_OPTION=([_kdagraph]=KDAGRAPH_BUILD_PYTHON [_kdagraph_stub]=KDAGRAPH_BUILD_PYTHON)

SELECTED=${KDA_STAGES:-}
SELECTED=${SELECTED// /}
if [[ -n "$SELECTED" ]]; then
  IFS=, read -r -a wanted <<<"$SELECTED"
  for name in "${wanted[@]}"; do
    if [[ -z "${STAGE_CAP[$name]:-}" ]]; then
      echo "KDA_STAGES: '$name' is not a stage; the stages are: ${STAGE_NAMES[*]}" >&2
      exit 2
    fi
  done
fi
# Named in KDA_STAGES, or, with none named, every stage but the opt-in ones (the dry run checks those too).
selected() {
  if [[ -n "$SELECTED" ]]; then
    [[ ",$SELECTED," == *",$1,"* ]]
  else
    ((DRY)) || [[ -z "${STAGE_OPT_IN[$1]:-}" ]]
  fi
}

# ---- the stages ----------------------------------------------------------------------------------------
gtest_source() {
  local dir
  for dir in "${KDAGRAPH_GTEST_SOURCE_DIR:-}" "$ROOT/.gtest" /usr/src/googletest; do
    [[ -n "$dir" && -f "$dir/CMakeLists.txt" ]] && { echo "$dir"; return; }
  done
}
GTEST_DIR=$(gtest_source)
# Random123's headers (kernels/rounding.h): installed (librandom123-dev), else carried in ./.deps/Random123.
random123_include() {
  local dir
  for dir in "${KDAGRAPH_RANDOM123_INCLUDE:-}" "$ROOT/.deps" /usr/include; do
    [[ -n "$dir" && -f "$dir/Random123/philox.h" ]] && { echo "$dir"; return; }
  done
}
RANDOM123_DIR=$(random123_include)
fla_wheel() { compgen -G "$ROOT/.whl/fla_core-*.whl" | head -n 1; }
# toolkit_program NAME [DIR...]: the toolkit's program NAME (compute-sanitizer, ncu) on PATH, beside nvcc, or
# in one of DIRs, where CUDA images install it off PATH.
toolkit_program() {
  local name=$1 dir
  shift
  command -v "$name" && return
  for dir in "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")" "$@"; do
    [[ -x "$dir/$name" ]] && { echo "$dir/$name"; return; }
  done
  return 1
}
sanitizer_path() { toolkit_program compute-sanitizer /usr/local/cuda/compute-sanitizer; }

VERSIONS_PY='
import importlib.metadata as m, sys
names = ["torch", "triton", "cupy-cuda13x", "nanobind", "scikit-build-core", "pytest", "numpy", "einops"]
def version(n):
    try:
        return m.version(n)
    except m.PackageNotFoundError:
        return "absent"
print("python", sys.version.split()[0], " ".join(f"{n} {version(n)}" for n in names))'

stage_environment() {
  local gpu
  gpu=$(x nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,compute_cap \
    --format=csv,noheader)
  echo "$gpu"
  x nvcc --version
  x cmake --version
  x ninja --version
  x "$PYTHON" -c "$VERSIONS_PY"
  echo "compute-sanitizer: $(sanitizer_path || echo not found)"
  echo "GoogleTest sources: ${GTEST_DIR:-none}; fla-core wheel: $(fla_wheel || true)"
  section <<EOF
GPU: $gpu (name, driver, memory, max SM and memory clocks, compute capability)
Commit $COMMIT, $(date -u +%Y-%m-%dT%H:%MZ), architectures $ARCH, budget ${BUDGET_S} s.
EOF
  expect "a CUDA device is visible" nvidia-smi -L
}

stage_configure() {
  local tests=ON python=OFF gtest=() random123=()
  if [[ -n "$RANDOM123_DIR" ]]; then
    random123=(-DKDAGRAPH_RANDOM123_INCLUDE="$RANDOM123_DIR")
  else
    echo "no Random123 headers (.deps/Random123, /usr/include/Random123): the configure will say so"
  fi
  if [[ -n "$GTEST_DIR" ]]; then
    gtest=(-DKDAGRAPH_GTEST_SOURCE_DIR="$GTEST_DIR")
  else
    echo "no GoogleTest sources (.gtest, /usr/src/googletest): the tests are not built"
    tests=OFF
  fi
  # The extension needs nanobind and Python's headers; without them the Python stages fail, not the build.
  if "$PYTHON" -m nanobind --cmake_dir >/dev/null 2>&1 &&
    "$PYTHON" -c 'import os, sysconfig; assert os.path.isfile(os.path.join(sysconfig.get_paths()["include"], "Python.h"))' 2>/dev/null; then
    python=ON
  else
    echo "no nanobind or no Python.h for $PYTHON: the extension is not built"
  fi
  x cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKDAGRAPH_CUDA_ARCHITECTURES="$ARCH" \
    -DKDAGRAPH_BUILD_TESTS="$tests" "${gtest[@]}" "${random123[@]}" -DKDAGRAPH_BUILD_PYTHON="$python" \
    -DPython_EXECUTABLE="$(command -v "$PYTHON")" -DKDAGRAPH_WARNINGS_AS_ERRORS="${KDAGRAPH_WERROR:-OFF}" |
    tee "$WORK/cmake_configure.txt"
  local rc=$?
  expect "the CUDA backend is ON" grep -q "CUDA backend ON" "$WORK/cmake_configure.txt"
  return "$rc"
}

# The targets of the selected stages, @cuda_tests expanded from the build's own target list.
build_targets() {
  local name t out=()
  for name in "${STAGE_NAMES[@]}"; do
    selected "$name" || continue
    for t in ${STAGE_TARGETS[$name]}; do
      if [[ "$t" == @cuda_tests ]]; then
        mapfile -t -O "${#out[@]}" out < <(ninja -C "$BUILD" -t targets all 2>/dev/null |
          sed -n 's/^\([a-z0-9_]*_cuda_test\): phony$/\1/p' | grep -v '^cmake_')
      else
        out+=("$t")
      fi
    done
  done
  for t in "${out[@]}"; do
    local option=${TARGET_OPTION[$t]:-}
    if [[ -n "$option" ]] && grep -q "^$option:BOOL=OFF" "$BUILD/CMakeCache.txt" 2>/dev/null; then
      echo "not built: $t ($option is OFF in this build)" >&2
    else
      echo "$t"
    fi
  done | sort -u
}

stage_build() {
  local targets
  mapfile -t targets < <(build_targets)
  echo "targets: ${targets[*]}"
  # -k 0: a target that fails to compile leaves the others built, and their stages run.
  x ninja -C "$BUILD" -k 0 -j "$JOBS" "${targets[@]}"
  local rc=$?
  # ptxas prints its report only when it compiles: keep it with the build, for a rerun that compiles less.
  ((DRY)) || grep -E '^(ptxas |    [0-9]+ bytes stack frame)' "$WORK/build.log" >>"$BUILD/ptxas.log"
  return "$rc"
}

stage_ptxas() {
  x "$PYTHON" "$ROOT/profiling/ptxas_report.py" "$BUILD/ptxas.log" --md "$WORK/ptxas.md"
  local rc=$?
  [[ -f "$WORK/ptxas.md" ]] && { echo "ptxas (-Xptxas=-v of the library's CUDA sources):"; echo; cat "$WORK/ptxas.md"; } | section
  return "$rc"
}

stage_gpu_tests() {
  local again=()
  ((${KDA_RETRY:-0})) && again=(--rerun-failed)
  x ctest --test-dir "$BUILD" -L gpu -j "$JOBS" --timeout 60 --no-tests=error --output-on-failure "${again[@]}" \
    --output-junit "$WORK/ctest_gpu.xml" | tee "$WORK/ctest_gpu.txt"
  local rc=$?
  note "$(grep -E 'tests passed' "$WORK/ctest_gpu.txt"); $(grep -c '(Skipped)' "$WORK/ctest_gpu.txt") skipped"
  return "$rc"
}

# The package as `pip install .` lays it out, from this build: python/kdagraph, the extension and its
# stubs; the command line on PATH. Its root is PYSTAGE.
PYSTAGE=$BUILD/python-stage
stage_python_package() {
  if ((DRY)); then
    [[ -f "$ROOT/python/kdagraph/__init__.py" ]] && dry_ok "the package from python/kdagraph and the _kdagraph target"
    return
  fi
  rm -rf "$PYSTAGE"
  mkdir -p "$PYSTAGE/kdagraph" "$PYSTAGE/bin"
  ln -s "$ROOT"/python/kdagraph/* "$PYSTAGE/kdagraph/"
  ln -s "$BUILD"/python/_kdagraph*.so "$BUILD/python/_kdagraph.pyi" "$PYSTAGE/kdagraph/" &&
    ln -s "$BUILD/tools/kdagraph" "$PYSTAGE/bin/kdagraph"
}

# tests/python on the GPU (torch and cupy arrays, torch.cuda.graph captures of the drop-ins, token trees):
# with KDAGRAPH_REQUIRE_GPU=1 a test marked gpu that skips fails instead (tests/python/conftest.py), and
# the note counts the gpu, cuda_graph, cupy and tree tests by outcome. One OpenMP thread: the suite's CPU
# work is small (13 s on one thread), while OpenMP threads that outnumber the free cores wait for each
# other at every barrier (on two busy cores two threads took the suite from 13 s to 305 s), and torch
# brings its own OpenMP runtime beside kdagraph's, two pools in each process. Each process also pays
# torch's import and a CUDA context (seconds; the subprocess test once more): spread over pytest-xdist
# workers where it is installed (a quarter of the cores), or one process. pytest-timeout, where installed,
# fails a test that hangs by name instead of leaving the whole stage to its cap.
PYTEST_TIMEOUT_S=40
stage_python_tests() {
  stage_python_package || exit 1
  local again=() spread=() site=$PYSTAGE wheel workers=$((JOBS / 4))
  ((${KDA_RETRY:-0})) && again=(--last-failed)
  ((workers > 1)) && "$PYTHON" -c 'import xdist' 2>/dev/null && spread=(-n "$workers")
  "$PYTHON" -c 'import pytest_timeout' 2>/dev/null && spread+=(--timeout "$PYTEST_TIMEOUT_S")
  echo "pytest ${spread[*]:-(one process, no per-test timeout)}"
  # flash-linear-attention's reference for test_fla_oracle.py, as the CI's virtual environment has it.
  wheel=$(fla_wheel) && x "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --upgrade \
    --target "$BUILD/fla_site" "$wheel" && site=$PYSTAGE:$BUILD/fla_site
  x env PYTHONPATH="$site" PATH="$PYSTAGE/bin:$PATH" PYTHONUNBUFFERED=1 KDAGRAPH_REQUIRE_GPU=1 \
    OMP_NUM_THREADS=1 "$PYTHON" -m pytest -q -rs -o cache_dir="$BUILD/pytest_cache" \
    "${spread[@]}" "${again[@]}" --junitxml="$WORK/pytest.xml" "$ROOT/tests/python" | tee "$WORK/pytest.txt"
  local rc=$?
  note "$(tail -n 1 "$WORK/pytest.txt"); $(grep -m 1 '^kdagraph markers:' "$WORK/pytest.txt")"
  # Each kind ran and passed at least once, none skipped: a suite that collected none of them fails (a
  # rerun of the failed tests alone is not held to it).
  local kind
  ((${KDA_RETRY:-0})) || for kind in gpu cuda_graph cupy tree; do
    expect "the $kind tests ran" grep -Eq "[:;] $kind [1-9][0-9]* passed 0 skipped" "$WORK/pytest.txt"
  done
  return "$rc"
}

# The command line end to end on the GPU, checked against the CPU two-phase reference (docs/modes.md's CPU-GPU tolerances); the
# trees verify token trees (docs/trees.md): the tree kernels fused and not, across the staging chunk, every mode;
# the last two the replay ring at Kimi-K3's shape (docs/modes.md, docs/shapes.md), flushing every round and with trees.
stage_cli_check() {
  local rc=0 args
  for args in "" "--dtype bf16 --mode two-phase --exec eager" "--batch 24 --vary-batch --retire-rate 0.1" \
    "--mode replay --batch 24 --vary-batch --retire-rate 0.1 --state-dtype bf16" \
    "--preset kimi-linear-48b-tp2 --batch 4 --rounds 10" "--preset kimi-linear-48b-tp2 --batch 4 --rounds 10 --mode replay" \
    "--tree 3 --draft 11 --vary-batch --retire-rate 0.1" "--tree 2 --draft 7 --mode replay --state-dtype bf16" \
    "--tree 4 --draft 15 --mode two-phase --unfused-conv --dtype bf16" \
    "--preset kimi-k3-tp8 --batch 4 --rounds 10 --mode replay --flush-min 0 --dtype bf16" \
    "--preset kimi-k3-tp8 --batch 16 --vary-batch --retire-rate 0.1 --mode replay --tree 3 --dtype bf16"; do
    # shellcheck disable=SC2086  # the arguments are meant to split
    x "$BUILD/tools/kdagraph" run --backend cuda --check $args || rc=1
  done
  return "$rc"
}

# Issue 24's aims: capturing every bucket (here 35, up to 128) of an L = 20 round < 0.5 s in all, < 1 MiB
# of graph memory per bucket. cudaMemGetInfo around each capture moves in whole pages (2 MiB on an H200,
# the smallest step the captures show) and includes the first loads of the kernels' modules: their sum
# over the buckets is an upper bound, reported per bucket on average. The aim is judged on one graph's
# memory: GRAPH_COPIES copies of the largest bucket's round instantiated and uploaded at once, their
# memory divided by GRAPH_COPIES (a page of slack before the first copy or after the last moves it by at
# most page / GRAPH_COPIES).
GRAPH_COPIES=64
CAPTURE_PY='
import json, sys
r = json.load(open(sys.argv[1]))
layers, buckets, largest = r["model"]["layers"], r["graphs_captured"], max(r["buckets"])
total_s, all_mib = r["capture_ms"] / 1e3, r["graph_device_bytes"] / 2**20
m = r["graph_memory"]
copies, bucket = m["copies"], m["bucket"]
graph_mib, copies_mib = m["bytes_per_graph"] / 2**20, m["device_bytes"] / 2**20
steps = [c["device_bytes"] / 2**20 for c in r["captures"] if c["device_bytes"] > 0]
page = f" +- {min(steps) / copies:.3f} MiB (a {min(steps):.2f} MiB page over the copies)" if steps else ""
verdict = lambda ok: "pass" if ok else "miss"
print(f"Capture, L = {layers}, {buckets} buckets (up to {largest}): {total_s:.3f} s in all (aim < 0.5 s: "
      f"{verdict(total_s < 0.5)}); one graph holds {graph_mib:.3f} MiB of device memory{page}, from {copies} "
      f"copies of bucket {bucket} that took {copies_mib:.2f} MiB at once (aim < 1 MiB per bucket: "
      f"{verdict(graph_mib < 1)}). The captures themselves took {all_mib:.2f} MiB in all, {all_mib / buckets:.3f} "
      "MiB per bucket on average (cudaMemGetInfo in whole pages, the first loads of the kernel modules included)")'
stage_capture() {
  x "$BUILD/tools/kdagraph" run --backend cuda --preset kimi-linear-48b-tp2 --batch 128 --slots 128 --rounds 3 \
    --graph-memory-copies "$GRAPH_COPIES" --json-file "$WORK/capture.json" || return 1
  x "$PYTHON" -c "$CAPTURE_PY" "$WORK/capture.json" | section
}

stage_bench_verify() {
  x "$BUILD/profiling/bench_verify_cuda" --csv "$WORK/bench_verify_cuda.csv" | tee "$WORK/bench_verify_cuda.txt"
  local rc=$?
  # The device line, then the table's rows that carry an aim, and its last line.
  {
    grep -m 2 -E '^(device|verify):' "$WORK/bench_verify_cuda.txt"
    echo
    sed -n '/^| HV /,$p' "$WORK/bench_verify_cuda.txt" | awk -F'|' 'NR <= 2 || ($13 !~ /^ *- *$/ && NF > 10)'
    tail -n 1 "$WORK/bench_verify_cuda.txt"
  } | section
  return "$rc"
}

# Issue 31: every member of the verify kernel family beside the library's verify (profiling/
# bench_verify_sweep.cu), each checked bitwise against the library before it is timed (a member that
# differs fails the stage); the CSV and the console come back, the tables are sweep_report's.
stage_verify_sweep() {
  x "$BUILD/profiling/bench_verify_sweep" --csv "$WORK/verify_sweep.csv" | tee "$WORK/verify_sweep.txt"
  local rc=$?
  note "$(tail -n 1 "$WORK/verify_sweep.txt" 2>/dev/null)"
  return "$rc"
}

# One kernel per layer (issue 21): the conv fused into the verify against the conv and verify as two
# launches, per layer and for the round of 20 layers, batch 1 to 8, T 2 and 4, PDL on and then off.
stage_conv_verify_bench() {
  local rc=0
  x "$BUILD/profiling/bench_conv_verify" --backend cuda --runs 200 | tee "$WORK/conv_verify_pdl.txt" || rc=1
  x "$BUILD/profiling/bench_conv_verify" --backend cuda --runs 200 --no-pdl | tee "$WORK/conv_verify_no_pdl.txt" ||
    rc=1
  cat "$WORK"/conv_verify_pdl.txt "$WORK"/conv_verify_no_pdl.txt 2>/dev/null | section
  return "$rc"
}

# Whole rounds (kdagraph bench): L = 20, HV = 16 (TP 2) and 32, T = 2 and 4, three batch sizes, the three
# modes under graphs, sampler in and out of the graph; --node-trace for the idle time between nodes.
stage_round_bench() {
  local rc=0 preset trace=()
  ninja -C "$BUILD" -t query kdagraph_cupti_trace >/dev/null 2>&1 && trace=(--node-trace)
  for preset in kimi-linear-48b-tp2 kimi-linear-48b; do
    x "$BUILD/tools/kdagraph" bench --backend cuda --preset "$preset" --drafts 1,3 --batches 1,16,64 --execs graph \
      --rounds 30 "${trace[@]}" --csv "$WORK/kdagraph_bench_$preset.csv" --md "$WORK/kdagraph_bench_$preset.md" || rc=1
  done
  # Kimi-K3 at TP 8, T = 8 (docs/shapes.md): the replay ring (its default flush_min, T + 1) against fused accept
  # as whole rounds (issue 48's aim: >= 2x at batch >= 32).
  x "$BUILD/tools/kdagraph" bench --backend cuda --preset kimi-k3-tp8 --dtype bf16 --batches 1,32,64 --execs graph \
    --modes fused-accept,replay --sampler in --rounds 30 --csv "$WORK/kdagraph_bench_kimi-k3-tp8.csv" \
    --md "$WORK/kdagraph_bench_kimi-k3-tp8.md" || rc=1
  # Token trees against chains of the same T = 8 at batch 1 and 16 (docs/trees.md: the tree kernels' cost).
  local tree
  for tree in 0 4; do
    local tree_args=()
    ((tree)) && tree_args=(--tree "$tree")
    x "$BUILD/tools/kdagraph" bench --backend cuda --preset kimi-linear-48b-tp2 --drafts 7 --batches 1,16 \
      --execs graph --modes fused-accept --sampler in --rounds 30 "${tree_args[@]}" \
      --md "$WORK/kdagraph_bench_tree$tree.md" || rc=1
  done
  for preset in kimi-linear-48b-tp2 kimi-linear-48b kimi-k3-tp8; do
    [[ -f "$WORK/kdagraph_bench_$preset.md" ]] || continue
    echo "kdagraph bench --preset $preset:"
    sed -n '/^## Aims/,$p' "$WORK/kdagraph_bench_$preset.md"
  done | section
  for tree in 0 4; do
    [[ -f "$WORK/kdagraph_bench_tree$tree.md" ]] || continue
    echo "kdagraph bench, T = 8, top-$tree trees (0: chains):"
    grep -E '^\| (mode|---|fused-accept)' "$WORK/kdagraph_bench_tree$tree.md"
  done | section
  return "$rc"
}

stage_fla_peer() {
  local wheel
  wheel=$(fla_wheel)
  if [[ -z "$wheel" ]]; then
    unavailable "no fla-core wheel in .whl/ (pip download fla-core==0.6.0 --no-deps -d .whl, then carry .whl)"
    wheel=$ROOT/.whl/fla_core-0.6.0-py3-none-any.whl
  fi
  x "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$BUILD/fla_site" "$wheel" ||
    return 1
  stage_python_package || return 1
  x env PYTHONPATH="$BUILD/fla_site:$PYSTAGE" PYTHONUNBUFFERED=1 "$PYTHON" "$ROOT/profiling/fla_peer.py" \
    --csv "$WORK/fla_peer.csv" --md "$WORK/fla_peer.md"
  local rc=$?
  [[ -f "$WORK/fla_peer.md" ]] && section <"$WORK/fla_peer.md"
  return "$rc"
}

# The sweep's report, its only one (profiling/sweep_report.py): the sweep's tables, and issue 31's aims
# judged on this run (the sweep's library and fastest member beside FLA's, fla_peer, and the sweep's own
# ratios). Reads the two stages' CSVs; sweep_report.md is the stage's section of the summary.
stage_sweep_report() {
  x "$PYTHON" "$ROOT/profiling/sweep_report.py" --sweep "$WORK/verify_sweep.csv" --fla "$WORK/fla_peer.csv" \
    --md "$WORK/sweep_report.md"
  local rc=$?
  [[ -f "$WORK/sweep_report.md" ]] && section <"$WORK/sweep_report.md"
  return "$rc"
}

# ncu (Nsight Compute), where the toolkit or Nsight Compute's own installer puts it.
ncu_path() { toolkit_program ncu /usr/local/cuda/bin /opt/nvidia/nsight-compute/*; }

# Opt-in (a second call): why the verify misses an aim (issue 31), from Nsight Compute's counters for the
# library's verify and the persistent members on one shape an aim (bench_verify_sweep --check --shapes
# aims: each line it prints is one verify launch, the order ncu sees them in). A table of time, DRAM
# traffic and throughput, achieved occupancy and SM throughput (profiling/ncu_table.py), then the same
# kernels' sections (memory workload, occupancy, warp states: where the warps stall) in the logs.
# --clock-control none: the clocks the sweep ran at (the device README asks to leave them alone).
NCU_METRICS=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,sm__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,launch__registers_per_thread
stage_profile() {
  local ncu rc=0 program=("$BUILD/profiling/bench_verify_sweep" --check --shapes aims --only persistent)
  ncu=$(ncu_path) || { unavailable "ncu (Nsight Compute) is not installed"; ncu=ncu; }
  x "$ncu" --clock-control none --kernel-name regex:verify_kernel --metrics "$NCU_METRICS" --csv --page raw \
    --print-units base --log-file "$WORK/profile_ncu.csv" "${program[@]}" >"$WORK/profile_program.txt" || rc=1
  # A machine whose counters ncu cannot read (gVisor: the profiler library does not load; no permission
  # for the counters) is no verdict on the kernels.
  ((DRY)) || ! grep -Eqi "LibraryNotLoaded|ERR_NVGPUCTRPERM|Failed to initialize the profiler" "$WORK/profile_ncu.csv" ||
    unavailable "ncu cannot read this GPU's counters: $(grep -m 1 -Ei 'error|failed' "$WORK/profile_ncu.csv")"
  x "$PYTHON" "$ROOT/profiling/ncu_table.py" "$WORK/profile_ncu.csv" "$WORK/profile_program.txt" \
    --md "$WORK/profile.md" || rc=1
  x "$ncu" --clock-control none --kernel-name regex:verify_kernel --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats --section SchedulerStats \
    --log-file "$WORK/profile_sections.txt" "${program[@]}" >/dev/null || rc=1
  [[ -f "$WORK/profile.md" ]] && {
    echo "Nsight Compute, the verify at the aims' shapes (library and persistent members; sections in profile_sections.txt):"
    echo
    cat "$WORK/profile.md"
  } | section
  return "$rc"
}

# sanitize TOOL TARGET...: compute-sanitizer over every TARGET at once, one log each. A TARGET is BINARY:FILTER (a
# gtest subset of tests/BINARY), "kdagraph ARGS" (the command line) or "profiling/PROGRAM ARGS" (a
# benchmark). The note tells the sanitizer's findings (its exit status 99) apart from a program that failed
# on its own. Each program is stopped (with what it started) a few seconds before the stage's cap, and
# named as timed out: one slow program does not take the verdicts of the others with it.
sanitize() {
  local tool=$1
  shift
  local sanitizer spec cmd name pids=() logs=() specs=() rc=0 i status found=() failed=() seconds
  sanitizer=$(sanitizer_path) || { unavailable "compute-sanitizer is not installed"; sanitizer=compute-sanitizer; }
  seconds=$((${STAGE_DEADLINE:-0} - $(date +%s) - 4))
  ((seconds > 0)) || seconds=1
  for spec in "$@"; do
    if [[ "$spec" == "kdagraph "* ]]; then
      read -r -a cmd <<<"${spec#kdagraph }"
      cmd=("$BUILD/tools/kdagraph" "${cmd[@]}")
      name=kdagraph_${#logs[@]}
    elif [[ "$spec" == profiling/* ]]; then
      read -r -a cmd <<<"$spec"
      name=${cmd[0]#profiling/}_${#logs[@]}
      cmd[0]=$BUILD/${cmd[0]}
    else
      name=${spec%%:*}
      cmd=("$BUILD/tests/$name" --gtest_filter="${spec#*:}" --gtest_brief=1)
    fi
    logs+=("$WORK/${tool}_$name.log") specs+=("$spec")
    # timeout signals its own process group: the sanitizer and the program it runs.
    x timeout -k 2 "$seconds" "$sanitizer" --tool "$tool" --error-exitcode 99 --print-limit 20 "${cmd[@]}" \
      >"${logs[-1]}" 2>&1 &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}"
    status=$?
    name=${logs[$i]##*/}
    name=${name%.log}
    case $status in
      0) ;;
      99) found+=("${name#"${tool}"_}") rc=1 ;;
      124 | 137) failed+=("${name#"${tool}"_} (timed out after ${seconds} s)") rc=1 ;;
      *) failed+=("${name#"${tool}"_} (exit $status)") rc=1 ;;
    esac
  done
  for i in "${!logs[@]}"; do
    echo "--- ${logs[$i]##*/}: ${specs[$i]}"
    tail -n 4 "${logs[$i]}"
  done
  note "${#logs[@]} programs; $tool errors in ${#found[@]}${found[*]:+: ${found[*]}};" \
    "failed on their own (no $tool error): ${#failed[@]}${failed[*]:+: ${failed[*]}}"
  # Some virtualized GPUs refuse the sanitizer outright; that is no verdict on the kernels.
  grep -q -i "device not supported" "${logs[@]}" && unavailable "compute-sanitizer refuses this GPU"
  return "$rc"
}

# Every kernel: index build, accept, state copy, verify (both head dims, bf16, long drafts staged in
# chunks), the Verifier's three modes, conv, and the ops over caller views (a device layer table with a
# null entry); fused accept, two-phase and replay through the ops and the engine's graphs with the conv
# fused in; a replayed graph that clamps a corrupt accept length; token trees through the command line
# (fused accept with the conv fused, replay with it unfused across the tree kernel's 8-token chunk); every
# member of the verify family once on a few shapes (bench_verify_sweep --check: the persistent members'
# prefetch past a block's last unit, the dynamic shared memory the tall tiles opt in to).
stage_memcheck() {
  sanitize memcheck \
    "kernels_cuda_test:Indices.*:Accept.*:TreeAccept.*:StateCopy.*:*K64_T3_G2:*K128_T8_G1:Verify.LongDraftsStagedInChunks:Verify.SixteenBitWithinTolerance:*f32_W4_halves_C200_T3:Conv.*" \
    "graph_cuda_test:*VerifierModes*K64_io_bf16*:Ops.*:*MatchTheVerifierBitwise/sglang:ConvVerify.FusedMatchesUnfusedForTheSanitizers:GraphRunner.CorruptAcceptLengthIsClampedAndRecorded" \
    "kdagraph run --backend cuda --check --tree 2 --draft 5 --batch 4 --rounds 4 --vary-batch --retire-rate 0.2" \
    "kdagraph run --backend cuda --check --tree 3 --draft 9 --batch 3 --rounds 3 --mode replay --unfused-conv" \
    "profiling/bench_verify_sweep --check"
}

# Only the verify kernels share memory between threads (ptxas: smem): the chain alone and with the conv
# fused in, in every mode, the tree kernel (fused accept, and replay's path replay), and the family's
# members that the library does not launch and whose shared memory is new: the persistent ones (a seed
# prefetched by cp.async into dynamic shared memory while the unit before still runs) and the conv's
# 64-row tile.
stage_racecheck() {
  sanitize racecheck "kernels_cuda_test:*K128_T2_G2:Verify.LongDraftsStagedInChunks" \
    "graph_cuda_test:ConvVerify.FusedMatchesUnfusedForTheSanitizers" \
    "kdagraph run --backend cuda --tree 2 --draft 5 --batch 2 --rounds 2" \
    "kdagraph run --backend cuda --tree 2 --draft 3 --batch 2 --rounds 3 --mode replay" \
    "profiling/bench_verify_sweep --check --only persistent --only rows64-lanes16-R4-w8-b1"
}

source "$ROOT/profiling/gpu_check_runner.sh"
prepare_run
for name in "${STAGE_NAMES[@]}"; do run_stage "$name"; done
finish
