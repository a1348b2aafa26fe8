#!/usr/bin/env bash
# Runs the C unit tests ($OGAKIT_BUILD/t/*) and the bats files (t/*.bats, or the ones named),
# counts TAP results and ends with one line: "N passed, N failed". Exit 1 if anything failed.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
build=${OGAKIT_BUILD:-$top/build}
export OGAKIT_BUILD=$build
pass=0 fail=0 skip=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT

count() { # reads TAP on stdin, echoes it, updates counters via the log
  local line
  while IFS= read -r line; do
    printf '%s\n' "$line"
    case "$line" in
      "not ok "*) echo F >>"$log" ;;
      "ok "*"# skip"*|"ok "*"# SKIP"*) echo S >>"$log" ;;
      "ok "*) echo P >>"$log" ;;
    esac
  done
}

if [ "$#" -gt 0 ]; then
  targets=("$@")
else
  targets=()
  for u in "$build"/t/*; do [ -x "$u" ] && targets+=("$u"); done
  for b in "$top"/t/*.bats; do [ -e "$b" ] && targets+=("$b"); done
fi

for t in "${targets[@]}"; do
  echo "# $(basename "$t")"
  t0=$SECONDS
  case "$t" in
    *.bats)
      bats --tap "$t" 2>&1 | count ;;
    *)
      before=$(grep -c . "$log" 2>/dev/null || echo 0)
      "$t" 2>&1 | count
      rc=${PIPESTATUS[0]}
      after=$(grep -c . "$log" 2>/dev/null || echo 0)
      if [ "$rc" -ne 0 ] && [ "$after" = "$before" ]; then
        echo "not ok - $(basename "$t") exited $rc before reporting"; echo F >>"$log"
      elif [ "$rc" -gt 1 ]; then
        echo "not ok - $(basename "$t") exited $rc (crash?)"; echo F >>"$log"
      fi ;;
  esac
  echo "# $(basename "$t"): $((SECONDS - t0)) s"
done
pass=$(grep -c '^P' "$log"); fail=$(grep -c '^F' "$log"); skip=$(grep -c '^S' "$log")
if [ "$skip" -gt 0 ]; then echo "$pass passed, $fail failed, $skip skipped"; else echo "$pass passed, $fail failed"; fi
[ "$fail" -eq 0 ]
