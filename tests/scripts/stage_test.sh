#!/usr/bin/env bash
# scripts/lib.sh's stage(): what it prints, what it remembers, what it returns, what it leaves.
# Runs with a stage-times file and a 1 s progress interval of its own.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fails=0
check() {  # check DESCRIPTION COMMAND...
  if "${@:2}"; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}
run() {  # run SCRIPT-BODY: a script named "demo" that sources lib.sh; its stderr into $work/err
  printf 'source %q\n%s\n' "$root/scripts/lib.sh" "$1" >"$work/demo"
  DESKBOX_STAGE_TIMES="$work/times" DESKBOX_STAGE_TICK=1 bash "$work/demo" 2>"$work/err"
}

run 'stage "first" sleep 0.2'; rc=$?
check "a stage that succeeds returns 0" test "$rc" -eq 0
check "it is announced with no expectation the first time" grep -qx '==> first' "$work/err"
check "it says how long it took" grep -qE '^<== first: [0-9]+ s$' "$work/err"
check "its time is remembered under the script's name" grep -qP '^demo first\t[0-9]+$' "$work/times"

run 'stage "first" true'
check "the next time it says the last time" grep -qE '^==> first \(last time [0-9]+ s\)$' "$work/err"

run 'stage "broken" bash -c "exit 7" || echo "rc=$?" >&2'
check "a failing stage returns its command's status" grep -qx 'rc=7' "$work/err"
check "a failing stage's time is not remembered" bash -c "! grep -q '^demo broken' '$work/times'"

run 'stage "long" sleep 2.5; echo "children: $(jobs -p | wc -l)" >&2'
check "a long stage says how far it is" grep -qE '^\.\.\. long: [0-9]+ s so far$' "$work/err"
check "it leaves no background job" grep -qx 'children: 0' "$work/err"
before=$(pgrep -c -f "^sleep 1$" || true)
sleep 1.5
check "it leaves no sleeping ticker behind" test "$(pgrep -c -f '^sleep 1$' || true)" -le "$before"

run 'stage "long" sleep 1.5'
check "a long stage's progress names the last time" grep -qE '^\.\.\. long: [0-9]+ s so far of about [0-9]+ s$' "$work/err"

echo "$fails failed"
[ "$fails" -eq 0 ]
