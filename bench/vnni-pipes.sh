#!/usr/bin/env bash
# bench/vnni-pipes.sh — the cost of the avx512 int8 tiles' companion instructions beside VPDPBUSD on this
# CPU (bench/vnni-pipes.c: a loop of 8 zmm VPDPBUSD alone and with 4 of each companion; cycles from an
# IMUL chain's clock). Medians of RUNS runs (default 5). A benchmark, not a test.
#   usage: bench/vnni-pipes.sh [RUNS]
# Prints JSON on stdout. Exit: 0 ok, 2 usage, 4 no avx512 row here or kern.a not built.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${OGAKIT_BUILD:-$top/build}
runs=${1:-5}
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "vnni-pipes.sh: RUNS must be a positive integer" >&2; exit 2; }
[ -f "$build/lib/kern.a" ] || { echo "vnni-pipes.sh: $build not built (make)" >&2; exit 4; }
exe=$top/.cache/bench/vnni-pipes
mkdir -p "$(dirname "$exe")"
cc -std=gnu11 -O2 -Wall -Wextra -Werror -I"$top/lib" -I"$build/gen" -o "$exe.tmp" "$top/bench/vnni-pipes.c" \
  "$build/lib/kern.a" "$build/lib/util.a" -ljansson -lm -pthread && mv "$exe.tmp" "$exe"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for _ in $(seq "$runs"); do
  "$exe" >>"$work/pipes.jsonl" || exit $?
done
jq -s '
  def med: sort | if length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
  . as $in
  | {runs: length, ghz: (map(.ghz) | med), dpbusd8_cycles: (map(.dpbusd8_cycles) | med),
     extra_cycles_per_op: (reduce (.[0].extra_cycles_per_op | keys_unsorted[]) as $op
       ({}; .[$op] = ([$in[].extra_cycles_per_op[$op]] | med)))}' "$work/pipes.jsonl"
