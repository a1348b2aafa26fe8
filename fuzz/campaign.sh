#!/usr/bin/env bash
# fuzz/campaign.sh — run libFuzzer targets of the fuzz build for a while each and keep the score.
#   fuzz/campaign.sh [-b BUILD] [-s SECONDS] [-j JOBS] TARGET...   run each TARGET for SECONDS (default 600)
#   fuzz/campaign.sh --tally                                        CPU time and runs per target so far
# Every run starts from .cache/fuzz-corpus/TARGET (fuzz/mkseeds.py makes it; the fuzzer adds what it
# keeps), under nice -n 19, with -timeout=20 -rss_limit_mb=2048 and -max_len=262144 (the deep-nesting
# seeds need it); -j JOBS runs that many targets at once (one process each). A run appends one line to
# .cache/fuzz-campaign.log: date, target, CPU seconds (user + sys of the fuzzer), execs, cov, ft,
# corpus size, result (clean, or the crash file under .cache/fuzz-out/), wall seconds. SIGINT to a
# fuzzer ends its run early (libFuzzer prints its stats); the time it ran is logged. A timeout is rerun
# alone: one that does not reproduce (-timeout is wall-clock, so a fuzzer paused with SIGSTOP or
# starved reports one) is logged as clean, saying so; so is a saved slow unit that reruns fast. A crash stops nothing else; fix it, then put a
# small input in fuzz/regress/TARGET/ (fuzz/README).
# Exit: 0 every run clean, 1 a run found something, 2 usage, 4 the fuzz build is missing.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=$top/.cache/b-fuzz secs=600 jobs=1 tally=0
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    -b) build=$2; shift 2 ;;
    -s) secs=$2; shift 2 ;;
    -j) jobs=$2; shift 2 ;;
    --tally) tally=1; shift ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "campaign.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
log=$top/.cache/fuzz-campaign.log
if [ "$tally" = 1 ]; then
  [ -s "$log" ] || { echo "campaign.sh: no runs recorded yet ($log)"; exit 0; }
  awk -F'\t' '{ s[$2] += $3; e[$2] += $4; n[$2]++; if ($5 > c[$2]) c[$2] = $5; if ($8 !~ /^clean/) bad[$2]++ }
    END { printf "%-16s %5s %10s %14s %8s %s\n", "target", "runs", "CPU s", "execs", "max cov", "findings";
          for (t in s) printf "%-16s %5d %10d %14d %8d %d\n", t, n[t], s[t], e[t], c[t], bad[t] }' "$log" | sort
  exit 0
fi
[ ${#targets[@]} -gt 0 ] || { echo "usage: fuzz/campaign.sh [-b BUILD] [-s SECONDS] [-j JOBS] TARGET... | --tally" >&2; exit 2; }
[[ "$secs" =~ ^[0-9]+$ && "$jobs" =~ ^[1-9][0-9]*$ ]] || { echo "campaign.sh: -s and -j take positive integers" >&2; exit 2; }
for t in "${targets[@]}"; do
  [ -x "$build/fuzz/$t" ] || { echo "campaign.sh: $build/fuzz/$t not built (make BUILD=$build fuzz)" >&2; exit 4; }
  [ -d "$top/.cache/fuzz-corpus/$t" ] || { echo "campaign.sh: no corpus for $t (fuzz/mkseeds.py .cache/fuzz-corpus BUILD)" >&2; exit 4; }
done
export OGAKIT_FUZZ_PACK=${OGAKIT_FUZZ_PACK:-$("$top/tools/fixture.sh" qwen2 cpu tied tiny)}
mkdir -p "$top/.cache/fuzz-out"

one() {
  local t=$1 out rc execs cov ft corp result t0 el cpu
  out=$(mktemp)
  t0=$(date +%s)
  local TIMEFORMAT='%3U %3S'
  { time nice -n 19 "$build/fuzz/$t" -max_total_time="$secs" -timeout=20 -rss_limit_mb=2048 -max_len=262144 \
    -print_final_stats=1 -artifact_prefix="$top/.cache/fuzz-out/$t-" "$top/.cache/fuzz-corpus/$t" >"$out" 2>&1; } 2>"$out.cpu"
  rc=$?
  el=$(($(date +%s) - t0))
  cpu=$(awk '{printf "%d", $1 + $2}' "$out.cpu")
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$out" | awk '{print $2}' | tail -1)
  cov=$(grep -Eo 'cov: [0-9]+' "$out" | tail -1 | awk '{print $2}')
  ft=$(grep -Eo 'ft: [0-9]+' "$out" | tail -1 | awk '{print $2}')
  corp=$(find "$top/.cache/fuzz-corpus/$t" -type f | wc -l)
  result=clean
  # a slow unit (libFuzzer saves one past 10 s, wall-clock, and runs on) is no finding: it is rerun here
  # and noted; one that reruns slowly is logged as found
  local slow; slow=$(grep -o "Test unit written to .*slow-unit-.*" "$out" | tail -1 | sed 's/Test unit written to //')
  sed -i '/Test unit written to .*slow-unit-/d' "$out"
  if [ -n "$slow" ] && [ -f "$slow" ]; then
    local s0 s1 sl; s0=$(date +%s.%N)
    timeout 60 "$build/fuzz/$t" -rss_limit_mb=2048 "$slow" >/dev/null 2>&1
    s1=$(date +%s.%N); sl=$(awk -v a="$s0" -v b="$s1" 'BEGIN{printf "%.1f", b-a}')
    if awk -v s="$sl" 'BEGIN{exit !(s < 10)}'; then
      rm -f "$slow"; slow=" (a slow unit that reruns in $sl s: the run was paused or starved)"
    else
      result="found: $slow (a unit that reruns in $sl s)"; slow=
    fi
  fi
  if [ "$result" != clean ]; then
    :
  elif [ "$rc" != 0 ] && grep -q "run interrupted" "$out" && ! grep -q "Test unit written" "$out"; then
    result=clean   # stopped by SIGINT (the machine was wanted for something else): the time so far counts
  elif [ "$rc" != 0 ]; then
    result=$(grep -o "Test unit written to .*" "$out" | tail -1 | sed 's/Test unit written to //')
    result="found: ${result:-exit $rc} ($(grep -m1 -E 'ERROR: |invariant failed|runtime error' "$out" | cut -c1-120))"
    cp "$out" "$top/.cache/fuzz-out/$t-$(date +%s).log"
    # libFuzzer's -timeout is wall-clock: a fuzzer that was paused (SIGSTOP) or starved past 20 s reports a
    # timeout that is not one. A real hang reproduces; an input that reruns well inside the limit is logged so.
    local unit; unit=$(grep -o "Test unit written to .*" "$out" | tail -1 | sed 's/Test unit written to //')
    if grep -q 'ERROR: libFuzzer: timeout' "$out" && [ -f "$unit" ]; then
      local r0 r1; r0=$(date +%s.%N)
      if timeout 60 "$build/fuzz/$t" -timeout=20 -rss_limit_mb=2048 "$unit" >/dev/null 2>&1; then
        r1=$(date +%s.%N)
        result="clean (a timeout that did not reproduce: the input reruns in $(awk -v a="$r0" -v b="$r1" 'BEGIN{printf "%.1f", b-a}') s; the run was paused or starved)"
        rm -f "$unit"
      fi
    fi
  fi
  [ "$result" = clean ] && result="clean$slow"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$t" "$cpu" "${execs:-0}" "${cov:-0}" "${ft:-0}" \
    "$corp" "$result" "$el" >>"$log"
  echo "$t: $cpu CPU s ($el s), ${execs:-0} execs, cov ${cov:-0}, ft ${ft:-0}, corpus $corp: $result"
  rm -f "$out" "$out.cpu"
  [[ "$result" == clean* ]]
}

fail=0 running=0
for t in "${targets[@]}"; do
  one "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then
    wait -n || fail=1
    running=$((running - 1))
  fi
done
while [ "$running" -gt 0 ]; do
  wait -n || fail=1
  running=$((running - 1))
done
exit $fail
