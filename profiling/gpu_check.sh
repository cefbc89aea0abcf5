#!/usr/bin/env bash
# shellcheck disable=SC2317  # the stage functions run through run_stage
# The GPU check, in one run on a machine with a CUDA device (nvcc, cmake, ninja, compute-sanitizer; no
# network, no GoogleTest installed), in priority order: configure, build, the gpu-labelled tests, the
# verify benchmark, the round benchmark (kdagraph bench with --node-trace on the Kimi presets; other
# arguments from KDAGRAPH_BENCH_ARGS), the command line checked against the CPU reference, then
# compute-sanitizer memcheck and racecheck over a fast subset of the GPU tests. Logs, CSVs and a summary
# land in ./gpu_out; when $OUT is set (the device tool's return folder, which brings back at most 8
# files) the summary, the benchmark CSVs and tables, and a tarball of every log (the JUnit XML too) are
# copied there. A failing stage does not stop the next one; the exit status is 1 if any stage failed or
# ran out of time. The whole run stays within ${KDA_CHECK_BUDGET_S:-460} seconds (plus at most 10 s to
# stop a stage that overruns): each stage gets its cap or what is left of the budget. A stage whose tool
# cannot run on this machine (compute-sanitizer refuses some virtualized GPUs) is UNAVAILABLE, not
# passed; then the exit status is 3 unless something failed.
#
# Run from the repository root:  profiling/gpu_check.sh
# A second, targeted run: KDA_STAGES=configure,build,memcheck,racecheck profiling/gpu_check.sh (the other
# stages report "not selected").
# GoogleTest comes from source: ${KDAGRAPH_GTEST_SOURCE_DIR}, else ./.gtest (a copy of /usr/src/googletest,
# whose top-level CMakeLists.txt builds gtest), else /usr/src/googletest.
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RETURN_DIR=${OUT:-}
OUT=$ROOT/gpu_out
BUILD=${KDA_BUILD_DIR:-$ROOT/build-gpu}
ARCH=${KDAGRAPH_CUDA_ARCHITECTURES:-90}
BUDGET_S=${KDA_CHECK_BUDGET_S:-460}
JOBS=${KDA_JOBS:-$(nproc)}
# Every stage in the order it runs; KDA_STAGES (comma-separated) picks some of them.
ALL_STAGES=(environment configure build gpu_tests bench_verify other_benches cli_check memcheck racecheck)
SELECTED=${KDA_STAGES:-}
SELECTED=${SELECTED// /}
if [[ -n "$SELECTED" ]]; then
  IFS=, read -r -a wanted <<<"$SELECTED"
  for name in "${wanted[@]}"; do
    if [[ " ${ALL_STAGES[*]} " != *" $name "* ]]; then
      echo "KDA_STAGES: '$name' is not a stage; the stages are: ${ALL_STAGES[*]}" >&2
      exit 2
    fi
  done
fi
# Nothing from an earlier run may pass for this one's.
rm -rf "$OUT"
mkdir -p "$OUT"
export ROOT OUT BUILD ARCH JOBS
START=$(date +%s)
DEADLINE=$((START + BUDGET_S))

STAGES=() RESULTS=() SECONDS_USED=() FAILED=0 UNAVAILABLE=0
# A stage exits with this when its tool cannot run here at all.
EXIT_UNAVAILABLE=77

# run_stage NAME CAP_SECONDS FUNCTION: runs FUNCTION in a child bash under a time limit (its cap, or what
# is left of the budget), output to $OUT/NAME.log; records PASS, FAIL (exit status), TIMEOUT or SKIP.
run_stage() {
  local name=$1 cap=$2 fn=$3
  local left=$((DEADLINE - $(date +%s)))
  local limit=$((cap < left ? cap : left))
  local log="$OUT/$name.log" result rc t0 t1
  if [[ -n "$SELECTED" && ",$SELECTED," != *",$name,"* ]]; then
    STAGES+=("$name") RESULTS+=("not selected") SECONDS_USED+=(0)
    return
  fi
  if ((limit < 10)); then
    echo "== $name: skipped, out of time" | tee "$log"
    STAGES+=("$name") RESULTS+=("SKIP (no time)") SECONDS_USED+=(0) FAILED=1
    return
  fi
  echo "== $name (limit ${limit}s) -> $log"
  t0=$(date +%s)
  timeout --kill-after=10 "$limit" bash -c "set -u -o pipefail; EXIT_UNAVAILABLE=$EXIT_UNAVAILABLE; $(declare -f); $fn" \
    >"$log" 2>&1
  rc=$?
  t1=$(date +%s)
  if ((rc == 0)); then
    result=PASS
  elif ((rc == EXIT_UNAVAILABLE)); then
    result=UNAVAILABLE UNAVAILABLE=1
  elif ((rc == 124 || rc == 137)); then
    result=TIMEOUT FAILED=1
  else
    result="FAIL ($rc)" FAILED=1
  fi
  tail -n 5 "$log" | sed 's/^/   | /'
  echo "   $name: $result in $((t1 - t0))s"
  STAGES+=("$name") RESULTS+=("$result") SECONDS_USED+=($((t1 - t0)))
}

gtest_source() {
  local dir
  for dir in "${KDAGRAPH_GTEST_SOURCE_DIR:-}" "$ROOT/.gtest" "$ROOT/.gtest/googletest" /usr/src/googletest; do
    if [[ -n "$dir" && -f "$dir/CMakeLists.txt" ]]; then
      echo "$dir"
      return
    fi
  done
}
GTEST_DIR=$(gtest_source)
export GTEST_DIR

stage_environment() {
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
  nvcc --version | tail -n 2
  cmake --version | head -n 1
  echo "ninja $(ninja --version)"
  command -v compute-sanitizer || echo "compute-sanitizer: not found"
  echo "GoogleTest sources: ${GTEST_DIR:-none}"
  nvidia-smi -L | grep -q GPU
}

stage_configure() {
  local tests=ON gtest_arg=()
  if [[ -n "$GTEST_DIR" ]]; then
    gtest_arg=(-DKDAGRAPH_GTEST_SOURCE_DIR="$GTEST_DIR")
  else
    echo "no GoogleTest sources found: tests are not built" >&2
    tests=OFF
  fi
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKDAGRAPH_CUDA_ARCHITECTURES="$ARCH" \
    -DKDAGRAPH_BUILD_TESTS="$tests" "${gtest_arg[@]}" -DKDAGRAPH_WARNINGS_AS_ERRORS="${KDAGRAPH_WERROR:-OFF}" \
    >"$OUT/cmake_configure.txt" 2>&1
  local rc=$?
  cat "$OUT/cmake_configure.txt"
  ((rc == 0)) || exit "$rc"
  grep -q "CUDA backend ON" "$OUT/cmake_configure.txt" || { echo "the CUDA backend is OFF"; exit 1; }
}

stage_build() {
  ninja -C "$BUILD" -j "$JOBS"
}

stage_gpu_tests() {
  [[ -d "$BUILD/tests" ]] || { echo "tests were not built (no GoogleTest sources)"; exit 1; }
  ctest --test-dir "$BUILD" -L gpu -j 8 --timeout 90 --no-tests=error --output-on-failure \
    --output-junit "$OUT/ctest_gpu.xml"
}

# Each entry: binary (relative to the build dir) and a gtest filter; small enough to finish fast under
# the sanitizer, and covering every kernel: index build, accept, state copy, verify (both head dims,
# bf16, chunked tokens), and the Verifier's rounds.
sanitize() {
  local tool=$1
  shift
  local rc=0 spec bin filter log
  command -v compute-sanitizer >/dev/null || { echo "compute-sanitizer: not found"; exit "$EXIT_UNAVAILABLE"; }
  log=$(mktemp)
  for spec in "$@"; do
    bin=${spec%%:*}
    filter=${spec#*:}
    echo "--- compute-sanitizer --tool $tool $bin --gtest_filter=$filter"
    compute-sanitizer --tool "$tool" --error-exitcode 99 --print-limit 20 "$BUILD/$bin" --gtest_filter="$filter" \
      --gtest_brief=1 2>&1 | tee "$log" || rc=1
    # Some virtualized GPUs refuse the sanitizer outright; that is no verdict on the kernels.
    if grep -q -i "device not supported" "$log"; then
      echo "compute-sanitizer cannot run on this machine's GPU"
      exit "$EXIT_UNAVAILABLE"
    fi
  done
  return "$rc"
}

stage_memcheck() {
  sanitize memcheck \
    "tests/indices_cuda_test:*" \
    "tests/accept_cuda_test:*" \
    "tests/state_copy_cuda_test:*" \
    "tests/verify_cuda_test:*K64_T3_G2:*K128_T8_G1:VerifyCuda.*" \
    "tests/verifier_cuda_test:*K64_io_bf16*" \
    "tests/conv_cuda_test:*W4*C200*:ConvCuda.*"
}

stage_racecheck() {
  # Only the verify kernel shares memory between threads.
  sanitize racecheck \
    "tests/verify_cuda_test:*K128_T2_G2:VerifyCuda.LongDraftsStagedInChunks"
}

stage_bench_verify() {
  "$BUILD/profiling/bench_verify_cuda" --csv "$OUT/bench_verify_cuda.csv"
}

# Any other GPU benchmark the build produced: profiling/bench_*_cuda programs, and `kdagraph bench`.
# The command line end to end on the GPU, checked against the CPU two-phase reference (SPEC tolerances).
stage_cli_check() {
  local rc=0 args
  for args in "" "--dtype bf16 --mode two-phase --exec eager" "--batch 24 --vary-batch --retire-rate 0.1" \
    "--mode replay --batch 24 --vary-batch --retire-rate 0.1 --state-dtype bf16" \
    "--preset kimi-linear-48b-tp2 --batch 4 --rounds 10" "--preset kimi-linear-48b-tp2 --batch 4 --rounds 10 --mode replay"; do
    echo "--- kdagraph run --backend cuda --check $args"
    # shellcheck disable=SC2086  # the arguments are meant to split
    "$BUILD/tools/kdagraph" run --backend cuda --check $args || rc=1
  done
  return "$rc"
}

stage_other_benches() {
  local rc=0 ran=0 bench name
  for bench in "$BUILD"/profiling/bench_*_cuda; do
    [[ -x "$bench" ]] || continue
    name=$(basename "$bench")
    [[ "$name" == bench_verify_cuda ]] && continue
    echo "--- $name"
    "$bench" --csv "$OUT/$name.csv" || rc=1
    ran=1
  done
  if [[ -x "$BUILD/tools/kdagraph" ]]; then
    echo "--- kdagraph bench"
    # shellcheck disable=SC2086  # the arguments are meant to split
    # The graphs and replay issues' sweep: L = 20, HV = 16 (TP 2) and 32, T = 2 and 4, batch 1, 4, 16, 64,
    # the three modes under graphs (every aim compares graph points; eager adds only time).
    local preset trace=--node-trace
    # Idle time between graph nodes needs CUPTI; without it the sweep still times every point.
    grep -q "CUPTI not found" "$OUT/cmake_configure.txt" 2>/dev/null && trace=""
    for preset in kimi-linear-48b-tp2 kimi-linear-48b; do
      # shellcheck disable=SC2086  # the arguments are meant to split
      "$BUILD/tools/kdagraph" bench ${KDAGRAPH_BENCH_ARGS:---backend cuda --preset $preset --drafts 1,3 --batches 1,4,16,64 --execs graph --rounds 30 $trace} \
        --csv "$OUT/kdagraph_bench_$preset.csv" --md "$OUT/kdagraph_bench_$preset.md" || rc=1
    done
    ran=1
  fi
  if [[ -x "$BUILD/profiling/bench_conv" ]]; then
    # The conv issue: its share of a layer and the two-phase conv scatter, then the fused round with the
    # conv against the one without (aim: <= 1.05x at batch 1); the sweeps above ran with the conv.
    echo "--- bench_conv --backend cuda"
    "$BUILD/profiling/bench_conv" --backend cuda | tee "$OUT/bench_conv_cuda.md" || rc=1
    for conv in "" --no-conv; do
      # shellcheck disable=SC2086  # an empty $conv is no argument
      "$BUILD/tools/kdagraph" bench --backend cuda --preset kimi-linear-48b-tp2 --modes fused-accept --execs graph \
        --sampler in --drafts 3 --batches 1,16,128 --rounds 30 $conv --md "$OUT/kdagraph_bench_conv${conv}.md" || rc=1
    done
    ran=1
  fi
  ((ran)) || echo "no other GPU benchmark built"
  return "$rc"
}

echo "kdagraph GPU check: build $BUILD, architectures $ARCH, output $OUT, budget ${BUDGET_S}s"
run_stage environment 30 stage_environment
run_stage configure 90 stage_configure
run_stage build 240 stage_build
run_stage gpu_tests 150 stage_gpu_tests
run_stage bench_verify 90 stage_bench_verify
run_stage other_benches 150 stage_other_benches
run_stage cli_check 60 stage_cli_check
run_stage memcheck 120 stage_memcheck
run_stage racecheck 90 stage_racecheck

# The benchmarks' own tables (the verify's, the aims of each round sweep), then the summary, last.
if [[ -f "$OUT/bench_verify.log" ]]; then
  echo
  sed -n '/^| HV /,$p' "$OUT/bench_verify.log"
fi
for md in "$OUT"/kdagraph_bench_*.md; do
  if [[ -f "$md" ]]; then
    echo
    echo "${md##*/}:"
    sed -n '/^## Aims/,$p' "$md"
  fi
done
{
  echo
  echo "| stage | result | seconds |"
  echo "|---|---|---:|"
  for i in "${!STAGES[@]}"; do
    echo "| ${STAGES[$i]} | ${RESULTS[$i]} | ${SECONDS_USED[$i]} |"
  done
  echo "total $(($(date +%s) - START))s; logs in $OUT"
} | tee "$OUT/summary.md"
if [[ -n "$RETURN_DIR" && "$RETURN_DIR" != "$OUT" ]]; then
  tar czf "$RETURN_DIR/gpu_logs.tar.gz" -C "$OUT" .
  for f in summary.md bench_verify_cuda.csv kdagraph_bench_kimi-linear-48b-tp2.md kdagraph_bench_kimi-linear-48b.md \
    kdagraph_bench_kimi-linear-48b-tp2.csv kdagraph_bench_kimi-linear-48b.csv; do
    [[ -f "$OUT/$f" ]] && cp "$OUT/$f" "$RETURN_DIR/"
  done
fi
if ((FAILED)); then
  exit 1
fi
if ((UNAVAILABLE)); then
  exit 3
fi
exit 0
