#!/usr/bin/env bash
# bench/overlap.sh — does arithmetic hide under a DRAM stream here? (bench/overlap.c: loads alone, loads
# beside independent VPDPBUSD work, the one-row int8 GEMV's dependent work on the loaded bytes, and that
# work from L2.) Runs alternate 1 and 2 threads RUNS times (default 5); prints JSON with the medians and
# the ratios gemv/read and indep/read. A benchmark, not a test.
#   usage: bench/overlap.sh [RUNS]
# Exit: 0 ok, 2 usage (or no AVX-512 VNNI here), 4 out of memory.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
runs=${1:-5}
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "overlap.sh: RUNS must be a positive integer" >&2; exit 2; }
exe=$top/.cache/bench/overlap
mkdir -p "$(dirname "$exe")"
cc -std=gnu11 -O2 -Wall -Wextra -Werror -mavx512f -mavx512bw -mavx512vnni -pthread -o "$exe.tmp" "$top/bench/overlap.c" &&
  mv "$exe.tmp" "$exe"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for _ in $(seq "$runs"); do
  for t in 1 2; do "$exe" "$t" >>"$work/runs.jsonl" || exit $?; done
done
jq -s '
  def med: sort | if length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
  group_by(.threads) | map({threads: .[0].threads, runs: length,
    read: (map(.read) | med), indep: (map(.indep) | med), gemv: (map(.gemv) | med), gemv_l2: (map(.gemv_l2) | med),
    gemv_over_read: (map(.gemv / .read) | med), indep_over_read: (map(.indep / .read) | med)})' "$work/runs.jsonl"
