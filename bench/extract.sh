#!/usr/bin/env bash
# bench/extract.sh [PACK] [RUNS] - oga-extract throughput to /dev/null from the page cache.
# Default PACK: the qwen05b fixture (tools/fixture.sh qwen2 cpu tied qwen05b). One warm-up run fills
# the page cache; then RUNS (default 7, at least 5) timed runs; prints every run and the median as
# stream bytes / wall seconds. Runs under nice -n 19 (the machines are shared).
# Output: one JSON line {"pack","bytes","runs_s":[...],"median_s","median_gb_s"} on stdout.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
bin=${OGAKIT_BUILD:-$top/build}/bin
pack=${1:-$("$top/tools/fixture.sh" qwen2 cpu tied qwen05b)}
runs=${2:-7}
[ "$runs" -ge 5 ] || { echo "extract.sh: RUNS must be >= 5" >&2; exit 2; }
[ -x "$bin/oga-extract" ] || { echo "extract.sh: $bin/oga-extract not built (make, or set OGAKIT_BUILD)" >&2; exit 4; }
bytes=$("$bin/oga-extract" "$pack" | wc -c)          # warm-up: reads the whole pack into the page cache
times=()
for _ in $(seq "$runs"); do
  t0=$(date +%s.%N)
  nice -n 19 "$bin/oga-extract" "$pack" >/dev/null
  t1=$(date +%s.%N)
  times+=("$(echo "$t1 - $t0" | bc -l)")
done
sorted=$(printf '%s\n' "${times[@]}" | sort -g)
median=$(printf '%s\n' "$sorted" | sed -n "$(( (runs + 1) / 2 ))p")
gbs=$(echo "$bytes / $median / 1000000000" | bc -l)
printf 'oga-extract %s: %d bytes, median %.4f s over %d runs = %.2f GB/s\n' "$(basename "$pack")" "$bytes" "$median" "$runs" "$gbs" >&2
printf '{"pack":"%s","bytes":%d,"runs_s":[%s],"median_s":%.6f,"median_gb_s":%.3f}\n' "$pack" "$bytes" \
  "$(printf '%s\n' "${times[@]}" | awk '{printf "%s%.6f", (NR>1?",":""), $1}')" "$median" "$gbs"
