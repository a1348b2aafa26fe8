#!/usr/bin/env bash
# bench/amx-floor.sh — the AMX tiles' group step against its floor on this CPU (bench/amx-floor.c: the
# tile side, the vector side and both interleaved, in L1, int8 and bf16 tiles), and kern_amx.c's step as
# npu-gemm measures it (one thread, a 4864 x 896 block-32 tensor, 512 rows: ms / (304 row blocks x 28
# groups x 32 row tiles), npu-gemm's median launch). Medians of RUNS runs (default 5). A benchmark, not a test.
#   usage: bench/amx-floor.sh [RUNS]
# Prints JSON on stdout. Exit: 0 ok, 2 usage, 4 no AMX here or npu-gemm not built.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${OGAKIT_BUILD:-$top/build}
runs=${1:-5}
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "amx-floor.sh: RUNS must be a positive integer" >&2; exit 2; }
[ -x "$build/bin/npu-gemm" ] && [ -f "$build/lib/kern.a" ] || { echo "amx-floor.sh: $build not built (make)" >&2; exit 4; }
exe=$top/.cache/bench/amx-floor
mkdir -p "$(dirname "$exe")"
cc -std=gnu11 -O2 -Wall -Wextra -Werror -mavx512f -mavx512bw -mavx512vl -mavx512dq \
  -mamx-tile -mamx-int8 -mamx-bf16 -I"$top/lib" -I"$build/gen" -o "$exe.tmp" "$top/bench/amx-floor.c" \
  "$build/lib/kern.a" "$build/lib/util.a" -ljansson -lm -pthread && mv "$exe.tmp" "$exe"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for _ in $(seq "$runs"); do
  "$exe" >>"$work/floor.jsonl"
  "$build/bin/npu-gemm" --kernel amx --shape 4864,896 --rows 512 --mode i8 -t 1 --check-rows 0 --time 0.5 \
    >>"$work/gemm.jsonl"
done
jq -s --argjson groups $((304 * 28 * 32)) '
  def med: sort | if length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
  (map(select(.steps)) ) as $f | (map(select(.ms))) as $g |
  {runs: ($f | length),
   int8: {tile_ns: ($f | map(.int8.tile_ns) | med), vector_ns: ($f | map(.int8.vector_ns) | med),
          both_ns: ($f | map(.int8.both_ns) | med)},
   bf16: {tile_ns: ($f | map(.bf16.tile_ns) | med), vector_ns: ($f | map(.bf16.vector_ns) | med),
          both_ns: ($f | map(.bf16.both_ns) | med)},
   kernel_ns: ($g | map(.ms) | med * 1e6 / $groups)}
  | .kernel_over_floor = (.kernel_ns / .int8.both_ns)' "$work/floor.jsonl" "$work/gemm.jsonl"
