# shellcheck shell=bash disable=SC2317
# How profiling/gpu_check.sh runs its stages (sourced by it; its settings, STAGE_NAMES, STAGE_CAP and
# RETURNED are set): a stage's commands go through `x`, which runs them or, in the dry run, checks them
# without a GPU; each stage runs in a process group of its own under its cap; a capture that fails under
# lazy module loading reruns its stage with CUDA_MODULE_LOADING=EAGER; the summary and the files the
# device tool brings back come last.

# ---- running a command, or checking it (dry run) ------------------------------------------------------
# x CMD...: runs a stage's command (after printing it). In the dry run it checks the command instead,
# without a GPU: a program of the build exists or is a target, a test filter matches tests, the command
# line and the scripts accept their arguments (--help, --dry-run), cmake knows each -D, ctest finds the
# label; a check that fails makes the stage fail.
x() {
  if ((DRY)); then
    dry_check "$@"
    return
  fi
  echo "+ $*" >&2
  "$@"
}

dry_ok() { echo "dry: ok    $*" >&2; }
# A failed check fails its stage, whatever the stage does with the status.
dry_fail() {
  echo "dry: FAIL  $*" >&2
  echo "$*" >>"$WORK/$STAGE.dryfail"
  return 1
}

# A path under the build: built (then its arguments are tried), or a target the build will make.
dry_build_output() {
  local path=$1
  shift
  local rel=${path#"$BUILD"/}
  if [[ ! -x "$path" ]]; then
    ninja -C "$BUILD" -t query "$rel" >/dev/null 2>&1 && { dry_ok "$rel: a target of this build (not built here)"; return; }
    dry_fail "$rel: neither built nor a target of $BUILD"
    return
  fi
  local filter="" arg
  for arg in "$@"; do [[ "$arg" == --gtest_filter=* ]] && filter=${arg#--gtest_filter=}; done
  if [[ -n "$filter" ]]; then
    # Each pattern of the filter must name tests: a renamed test would otherwise drop out of a subset.
    local pattern n total=0
    IFS=: read -r -a patterns <<<"${filter%%-*}"
    for pattern in "${patterns[@]}"; do
      n=$("$path" --gtest_list_tests --gtest_filter="$pattern" | grep -c '^  ')
      ((n > 0)) || { dry_fail "$rel: --gtest_filter pattern $pattern matches no test"; return; }
      total=$((total + n))
    done
    dry_ok "$rel --gtest_filter=$filter: $total tests"
  elif [[ "$rel" == tests/* ]]; then
    dry_ok "$rel (a test program)"
  elif "$path" "$@" --help >/dev/null 2>&1; then
    dry_ok "$rel $*: arguments accepted"
  else
    dry_fail "$rel $*: arguments refused ($("$path" "$@" --help 2>&1 | tail -n 1))"
  fi
}

dry_check() {
  local argv=("$@")
  if [[ "${argv[0]}" == env ]]; then
    argv=("${argv[@]:1}")
    while [[ "${argv[0]}" == *=* ]]; do argv=("${argv[@]:1}"); done
  fi
  if [[ "${argv[0]}" == timeout ]]; then  # timeout [-k SECONDS] [-s SIGNAL] SECONDS COMMAND...
    argv=("${argv[@]:1}")
    while [[ "${argv[0]}" == -k || "${argv[0]}" == -s ]]; do argv=("${argv[@]:2}"); done
    [[ "${argv[0]}" =~ ^[0-9]+$ ]] || { dry_fail "timeout: no whole seconds before ${argv[*]}"; return; }
    argv=("${argv[@]:1}")
  fi
  local prog=${argv[0]} args=("${argv[@]:1}") kind
  # The build's programs by path, the others by name (compute-sanitizer and ncu may be called by their full paths).
  case "$prog" in
    "$BUILD"/*) kind=build ;;
    "$PYTHON") kind=python ;;
    *) kind=${prog##*/} ;;
  esac
  case "$kind" in
    build) dry_build_output "$prog" "${args[@]}" ;;
    compute-sanitizer | ncu)
      local i
      for i in "${!args[@]}"; do
        if [[ "${args[$i]}" == "$BUILD"/* ]]; then
          echo "dry: note  $kind ${args[*]:0:$i} (its options are checked where it is installed)" >&2
          dry_check "${args[@]:$i}"
          return
        fi
      done
      dry_fail "$kind ${args[*]}: no program of the build to run"
      ;;
    cmake)
      local a name bad=0
      for a in "${args[@]}"; do
        [[ "$a" == -D* ]] || continue
        name=${a#-D}
        name=${name%%=*}
        [[ "$name" == CMAKE_* || "$name" == Python_* ]] && continue
        grep -q "^$name:" "$BUILD/CMakeCache.txt" || { dry_fail "cmake: -D$name is no cache variable of this project"; bad=1; }
      done
      ((bad)) || dry_ok "cmake ${args[*]}"
      ((!bad))
      ;;
    ninja)
      local a skip=0 bad=0
      for a in "${args[@]}"; do
        if ((skip)); then skip=0; continue; fi
        case "$a" in -C | -j | -k) skip=1; continue ;; -*) continue ;; esac
        ninja -C "$BUILD" -t query "$a" >/dev/null 2>&1 || { dry_fail "ninja: $a is not a target of $BUILD"; bad=1; }
      done
      ((bad)) || dry_ok "ninja ${args[*]}"
      ((!bad))
      ;;
    ctest)
      local label="" i n
      for i in "${!args[@]}"; do [[ "${args[$i]}" == -L ]] && label=${args[$((i + 1))]}; done
      n=$(ctest --test-dir "$BUILD" -N -L "$label" | sed -n 's/^Total Tests: //p')
      if ((${n:-0} > 0)); then dry_ok "ctest -L $label: $n tests"; else dry_fail "ctest -L $label: no tests"; fi
      ;;
    python)
      case "${args[0]}" in
        -c)
          if "$PYTHON" -c 'import sys; compile(sys.argv[1], "-c", "exec")' "${args[1]}"; then
            dry_ok "$PYTHON -c <code>: compiles"
          else
            dry_fail "$PYTHON -c <code>: does not compile"
          fi
          ;;
        -m)
          local a
          for a in "${args[@]:2}"; do
            # Sources must exist; the build's and the run's own paths and the wheel need not.
            if [[ "$a" == "$ROOT"/* && "$a" != "$BUILD"/* && "$a" != *.whl && ! -e "$a" ]]; then
              dry_fail "$a does not exist"
              return
            fi
          done
          dry_ok "$PYTHON ${args[*]} (module ${args[1]}: on the GPU machine)"
          ;;
        *.py)
          local probe=--help
          grep -q -- "--dry-run" "${args[0]}" && probe=--dry-run
          if "$PYTHON" "${args[@]}" "$probe" >/dev/null 2>&1; then
            dry_ok "${args[0]#"$ROOT"/} ${args[*]:1}: arguments accepted ($probe)"
          else
            dry_fail "${args[0]#"$ROOT"/} ${args[*]:1}: refused ($probe)"
          fi
          ;;
        *) dry_ok "$PYTHON ${args[*]}" ;;
      esac
      ;;
    *)
      if command -v "$prog" >/dev/null; then
        dry_ok "$prog ${args[*]}"
      else
        echo "dry: note  $prog is not installed here (the GPU machine has it)" >&2
      fi
      ;;
  esac
}

# expect WHAT CMD...: a check of a stage's output; fails the stage with WHAT (the dry run has no output).
expect() {
  local what=$1
  shift
  ((DRY)) && return 0
  "$@" || { echo "FAILED: $what"; exit 1; }
}
# unavailable WHY: the stage's tool cannot run here (the dry run goes on, checking the rest).
unavailable() {
  echo "UNAVAILABLE: $1"
  ((DRY)) && return 0
  exit "$EXIT_UNAVAILABLE"
}
# note TEXT: one line in the stage table beside the stage's result.
note() { echo "$*" >"$WORK/$STAGE.note"; }
# section: the stage's part of the summary, from stdin.
section() { cat >"$WORK/$STAGE.section.md"; }

# ---- running the stages -----------------------------------------------------------------------------------
# A capture that fails because a kernel's module was first loaded inside it (lazy loading).
CAPTURE_FAILURE='cudaErrorStreamCapture|stream is capturing|capture.*(invalidated|unsupported)'
RESULTS=() SECONDS_USED=() FAILED=0 UNAVAILABLE_ANY=0
# Seconds the stages run so far left of their caps. A stage may run past its own cap on them (the first
# GPU run used 192 s of its 420 s while two stages ran out of their caps); the stages after it keep
# their whole caps, and the run its budget.
SAVED=0

# run_stage NAME: stage_NAME in its own process group under its cap plus the seconds saved before it (or
# what is left of the budget), output to $WORK/NAME.log; records PASS, FAIL (status), TIMEOUT,
# UNAVAILABLE or "not selected" ("opt-in, not selected"). The lazy-loading rerun sets KDA_RETRY=1, so a
# stage of many tests can run only those that failed.
run_stage() {
  STAGE=$1
  local cap=${STAGE_CAP[$STAGE]} log="$WORK/$STAGE.log" t0 rc result used
  if ! selected "$STAGE"; then
    RESULTS+=("${STAGE_OPT_IN[$STAGE]:+opt-in, }not selected") SECONDS_USED+=(0)
    return
  fi
  local allowed=$((cap + SAVED))
  t0=$(date +%s)
  run_limited "stage_$STAGE" "$(limit "$allowed")" "$log"
  rc=$?
  if ((rc != 0 && !DRY)) && [[ "${CUDA_MODULE_LOADING:-}" != EAGER ]] && grep -Eqi "$CAPTURE_FAILURE" "$log"; then
    export CUDA_MODULE_LOADING=EAGER
    echo "== $STAGE: a capture failed (lazy module loading?); again with CUDA_MODULE_LOADING=EAGER, kept from here on"
    mv "$log" "$WORK/$STAGE.lazy.log"
    KDA_RETRY=1 run_limited "stage_$STAGE" "$(limit $((allowed - ($(date +%s) - t0))))" "$log"
    rc=$?
    echo "CUDA_MODULE_LOADING=EAGER (a capture failed under lazy loading: $STAGE.lazy.log)" >>"$WORK/$STAGE.note"
  fi
  [[ -f "$WORK/$STAGE.dryfail" ]] && rc=1
  case $rc in
    0) result=PASS ;;
    "$EXIT_UNAVAILABLE") result=UNAVAILABLE UNAVAILABLE_ANY=1 ;;
    124) result=TIMEOUT FAILED=1 ;;
    125) result="SKIP (no time)" FAILED=1 ;;
    *) result="FAIL ($rc)" FAILED=1 ;;
  esac
  if ((DRY)); then  # every check the stage made
    sed 's/^/   | /' "$log"
  else
    tail -n 4 "$log" | sed 's/^/   | /'
  fi
  used=$(($(date +%s) - t0))
  echo "   $STAGE: $result in $used s"
  ((used > cap && !DRY)) && echo "ran $((used - cap)) s past its cap, on the ${SAVED} s the stages before it left" >>"$WORK/$STAGE.note"
  SAVED=$((allowed - used > 0 ? allowed - used : 0))
  RESULTS+=("$result") SECONDS_USED+=("$used")
}

# The stage's limit: its cap, or what is left of the budget.
limit() {
  local left=$((DEADLINE - $(date +%s)))
  echo $(($1 < left ? $1 : left))
}

# run_limited FUNCTION SECONDS LOG: FUNCTION in a process group of its own, killed with everything it
# started if it outlives SECONDS. Status: the function's, 124 when killed, 125 when there was no time.
run_limited() {
  local fn=$1 seconds=$2 log=$3 pid sleeper done_pid rc
  if ((seconds < 3)); then
    echo "== ${fn#stage_}: no time left" | tee "$log"
    return 125
  fi
  echo "== ${fn#stage_} (limit ${seconds} s) -> $log"
  (
    set -o pipefail
    # When the stage is killed: a stage can stop its parts first (gpu_check.sh's sanitize).
    # shellcheck disable=SC2034
    STAGE_DEADLINE=$(($(date +%s) + seconds))
    "$fn"
  ) >"$log" 2>&1 &
  pid=$!
  sleep "$seconds" &
  sleeper=$!
  wait -n -p done_pid "$pid" "$sleeper"
  rc=$?
  if [[ "$done_pid" == "$pid" ]]; then
    kill "$sleeper" 2>/dev/null
    wait "$sleeper" 2>/dev/null
    return "$rc"
  fi
  echo "== killed after ${seconds} s" >>"$log"
  {  # stderr off: job control would report the kill ("Terminated")
    kill -TERM -- "-$pid"
    sleep 2
    kill -KILL -- "-$pid"
    wait "$pid"
  } 2>/dev/null
  return 124
}

# The whole plan against its limits: the caps within the budget (an opt-in stage's alone), at most 8 files
# back.
check_plan() {
  local total=0 name plan=() opt_in=()
  # shellcheck disable=SC2004  # an associative array's key needs its $
  for name in "${STAGE_NAMES[@]}"; do
    if [[ -n "${STAGE_OPT_IN[$name]:-}" ]]; then
      opt_in+=("$name")
      ((STAGE_CAP[$name] <= BUDGET_S)) || { echo "opt-in stage $name's cap is over the budget of ${BUDGET_S} s"; return 1; }
    else
      plan+=("$name")
      total=$((total + STAGE_CAP[$name]))
    fi
  done
  echo "stages: ${plan[*]}; opt-in: ${opt_in[*]:-none}; caps ${total} s of ${BUDGET_S} s; ${#RETURNED[@]} files back"
  ((total <= BUDGET_S)) || {
    echo "the stages' caps add up to ${total} s, over the budget of ${BUDGET_S} s"
    return 1
  }
  ((${#RETURNED[@]} <= 8)) || { echo "RETURNED names ${#RETURNED[@]} files; the device tool brings back 8"; return 1; }
}

# Before the first stage: the dry run's build checked, an earlier run's output removed, the plan checked;
# each stage in a process group of its own from here on (set -m), so a stage out of time is stopped with
# its children.
prepare_run() {
  if ((DRY)); then
    [[ -f "$BUILD/CMakeCache.txt" ]] || { echo "dry run: $BUILD is not a configured build (KDA_BUILD_DIR)"; exit 2; }
    [[ -f "$BUILD/build.ninja" ]] || { echo "dry run: $BUILD is not a Ninja build (the check builds with Ninja)"; exit "$EXIT_UNAVAILABLE"; }
    if ! ninja -C "$BUILD" -t query bench_verify_cuda >/dev/null 2>&1; then
      echo "dry run: $BUILD has no CUDA backend (no bench_verify_cuda target); nothing of the GPU check to compare"
      exit "$EXIT_UNAVAILABLE"
    fi
  else
    rm -rf "$WORK"  # nothing from an earlier run may pass for this one's
  fi
  mkdir -p "$WORK"
  check_plan || exit 1
  set -m
  START=$(date +%s)
  DEADLINE=$((START + BUDGET_S))
  echo "kdagraph GPU check$( ((DRY)) && echo ' (dry run)'): build $BUILD, architectures $ARCH, output $WORK, budget ${BUDGET_S} s"
}

# After the last stage: the summary (sections in stage order, the table of stages last), printed and
# written; the files back to the device tool; the exit status.
finish() {
  local name i f
  {
    echo "# kdagraph GPU check, commit $COMMIT"
    for name in "${STAGE_NAMES[@]}"; do
      [[ -f "$WORK/$name.section.md" ]] && { echo; cat "$WORK/$name.section.md"; }
    done
    echo
    echo "| stage | result | seconds | cap | note |"
    echo "|---|---|---:|---:|---|"
    for i in "${!STAGE_NAMES[@]}"; do
      name=${STAGE_NAMES[$i]}
      echo "| $name | ${RESULTS[$i]} | ${SECONDS_USED[$i]} | ${STAGE_CAP[$name]} | $(paste -sd';' "$WORK/$name.note" 2>/dev/null) |"
    done
    echo
    echo "total $(($(date +%s) - START)) s of ${BUDGET_S} s; logs in $WORK$( [[ -n "$RETURN_DIR" ]] && echo ", returned as gpu_logs.tar.gz")"
  } >"$WORK/summary.md"
  echo
  cat "$WORK/summary.md"
  if [[ -n "$RETURN_DIR" && "$RETURN_DIR" != "$WORK" ]] && ((!DRY)); then
    mkdir -p "$RETURN_DIR"
    tar czf "$RETURN_DIR/gpu_logs.tar.gz" -C "$WORK" .
    for f in "${RETURNED[@]}"; do
      [[ -f "$WORK/$f" ]] && cp "$WORK/$f" "$RETURN_DIR/"
    done
  fi
  ((FAILED)) && exit 1
  ((UNAVAILABLE_ANY)) && exit 3
  exit 0
}
