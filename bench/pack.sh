#!/usr/bin/env bash
# bench/pack.sh [GEOM] — throughput of `oga-extract | q4nx-pack` (rm and b8) and of
# `q4nx-verify --all` on a fixture pack (default: qwen2 cpu tied qwen05b), from the page cache.
# GB/s are of pack data (the pack's model.onnx.data bytes). Each figure is the best of $RUNS runs
# (default 3); CPU seconds (user+sys of every process in the pipeline) are reported next to wall
# seconds, because our machines are shared and wall time includes waiting for a core.
# Prints one JSON object per measurement. Targets (issue 3): pack >= 1 GB/s, verify --all >= 0.5 GB/s.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
export PATH="${OGAKIT_BUILD:-$top/build}/bin:$PATH"
geom=${1:-qwen05b}
runs=${RUNS:-3}
pack=$("$top/tools/fixture.sh" qwen2 cpu tied "$geom")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bytes=$(stat -c %s "$pack/model.onnx.data")
cat "$pack"/* > /dev/null   # page cache

# measure NAME CMD...: best wall and CPU seconds of $runs runs of `bash -c CMD`
measure() {
  local name=$1 cmd=$2 best_w= best_c= i t0 t1 c0 c1
  for ((i = 0; i < runs; i++)); do
    read -r c0 < <(awk '{print $14+$15+$16+$17}' /proc/$$/stat)
    t0=$(date +%s.%N)
    bash -c "$cmd"
    t1=$(date +%s.%N)
    # children's CPU time, accumulated in this shell's cutime/cstime (clock ticks)
    read -r c1 < <(awk '{print $14+$15+$16+$17}' /proc/$$/stat)
    local w c
    w=$(echo "$t1 - $t0" | bc -l)
    c=$(echo "($c1 - $c0) / $(getconf CLK_TCK)" | bc -l)
    if [ -z "$best_w" ] || [ "$(echo "$w < $best_w" | bc -l)" = 1 ]; then best_w=$w; fi
    if [ -z "$best_c" ] || [ "$(echo "$c < $best_c" | bc -l)" = 1 ]; then best_c=$c; fi
  done
  jq -cn --arg name "$name" --argjson bytes "$bytes" --argjson w "$best_w" --argjson c "$best_c" \
    '{bench: $name, pack_bytes: $bytes, wall_s: ($w*1000|round/1000), cpu_s: ($c*1000|round/1000),
      gb_per_s_wall: ($bytes/$w/1e9*100|round/100), gb_per_s_cpu: (if $c > 0 then ($bytes/$c/1e9*100|round/100) else null end)}'
}

for l in b8 rm; do
  measure "extract | q4nx-pack -l $l > /dev/null" "oga-extract '$pack' | q4nx-pack -l $l > /dev/null"
done
# the two halves on their own: extract to /dev/null, and pack from a stream file in the page cache
measure "oga-extract > /dev/null" "oga-extract '$pack' > /dev/null"
oga-extract "$pack" > "$work/s.ogax"
for l in b8 rm; do
  measure "q4nx-pack -l $l < stream file > /dev/null" "q4nx-pack -l $l < '$work/s.ogax' > /dev/null"
done
rm -f "$work/s.ogax"
oga-extract "$pack" | q4nx-pack -l b8 -o "$work/b8.q4nx"
oga-extract "$pack" | q4nx-pack -l rm -o "$work/rm.q4nx"
for l in b8 rm; do
  measure "q4nx-verify $l --pack --all" "q4nx-verify '$work/$l.q4nx' --pack '$pack' --all > '$work/v.json'"
  jq -e '.ok' "$work/v.json" > /dev/null || { echo "bench/pack.sh: verify failed on $l" >&2; exit 1; }
done
measure "q4nx-verify rm --against b8" "q4nx-verify '$work/rm.q4nx' --against '$work/b8.q4nx' > /dev/null"
