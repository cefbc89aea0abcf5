#!/usr/bin/env bash
# .githooks/commit-msg against messages it must take and messages it must refuse.
set -uo pipefail
hook="$(dirname "$0")/../.githooks/commit-msg"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failures=0
check() {  # check EXPECTED(accept|refuse) NAME MESSAGE
  printf '%s' "$3" > "$dir/msg"
  if "$hook" "$dir/msg" 2>"$dir/err"; then got=accept; else got=refuse; fi
  if [ "$got" != "$1" ]; then
    echo "FAIL $2: expected $1, got $got ($(cat "$dir/err"))"
    failures=$((failures + 1))
  else
    echo "ok   $2"
  fi
}
long=$(printf 'x%.0s' $(seq 73))
check accept "subject only" $'Replay: fold the ring before the token loop\n'
check accept "subject and body" $'Fold the ring first\n\nWhy: 1.4x fewer bytes.\n'
check accept "72 characters" "$(printf 'y%.0s' $(seq 72))"$'\n'
check accept "comments ignored" $'Fix the index build\n# Please enter the commit message\n# '"$long"$'\n'
check accept "scissors" $'Fix it\n# ------------------------ >8 ------------------------\n'"$long"$'\n'
check accept "fixup marker" "fixup! $long"$'\n'
check refuse "73 characters" "$long"$'\n'
check refuse "empty" $'\n\n'
check refuse "no blank line" $'Fold the ring first\nbecause it is faster\n'
check refuse "trailing period" $'Fold the ring first.\n'
check refuse "trailing space" $'Fold the ring first \n'
exit $((failures > 0))
