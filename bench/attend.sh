#!/usr/bin/env bash
# bench/attend.sh — the fp16 cache's attention kernel (the ISA table's attend_ht, the current row or
# OGAKIT_KERNEL's) as the model runs it at Qwen2.5-0.5B shapes (7 query heads of 64 per KV head, two KV
# heads on two threads, 24 layers' caches from DRAM): ms per pass over the layers for ROWS query rows
# (1: a decode step; 4-16: verify passes) after POSITIONS, median of REPS (bench/attend.c). A benchmark,
# not a test; for A/B runs of the attention code, alternate builds (OGAKIT_BUILD=DIR) launch by launch.
#   usage: bench/attend.sh [REPS]   (default 15)
# Prints one JSON object per shape on stdout. Exit: 0 ok, 2 usage, 4 kern.a not built or no attend_ht.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${OGAKIT_BUILD:-$top/build}
reps=${1:-15}
[[ $reps =~ ^[1-9][0-9]*$ ]] || { echo "attend.sh: REPS must be a positive integer" >&2; exit 2; }
[ -f "$build/lib/kern.a" ] || { echo "attend.sh: $build not built (make)" >&2; exit 4; }
exe=$top/.cache/bench/attend-$(echo "$build" | cksum | cut -d' ' -f1)
mkdir -p "$(dirname "$exe")"
cc -std=gnu11 -O2 -Wall -Wextra -Werror -I"$top/lib" -I"$build/gen" -o "$exe.tmp" "$top/bench/attend.c" \
  "$build/lib/kern.a" "$build/lib/util.a" -ljansson -lm -pthread && mv "$exe.tmp" "$exe"
for shape in "1 512" "1 4096" "4 4096" "8 4096" "16 2048"; do
  # shellcheck disable=SC2086
  "$exe" $shape "$reps" || exit $?
done
