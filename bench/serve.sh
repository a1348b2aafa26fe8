#!/usr/bin/env bash
# bench/serve.sh - npu-forward serve under 1, 4, 8 and 16 concurrent streams on the qwen05b fixture
# (Qwen2.5-0.5B geometry, random weights): aggregate generated tokens per second, p50/p99 time to first
# token, per-stream decode rate; one JSON line per concurrency (bench/serve.mjs). The server runs with
# --parallel 16 (every stream has a slot) on THREADS threads in MODE (default i8: the mode whose steps
# batch every projection). A benchmark, not a test: run it on a quiet machine.
#
#   bench/serve.sh [REQUESTS_PER_STREAM]     (env: THREADS=2, GEN=128, MODE=i8, MODEL=a .q4nx to use)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
bin=${OGAKIT_BUILD:-$top/build}/bin
per=${1:-2}
threads=${THREADS:-2} gen=${GEN:-128} mode=${MODE:-i8}
export PATH="$bin:$PATH"
work=$(mktemp -d "${TMPDIR:-/tmp}/ogk-bench-serve.XXXXXX")
server=
trap '[ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$work"' EXIT
model=${MODEL:-}
if [ -z "$model" ]; then
  oga-extract "$("$top/tools/fixture.sh" qwen2 cpu tied qwen05b)" | q4nx-pack -l b8 -o "$work/model.q4nx"
  model=$work/model.q4nx
fi
npu-forward serve -m "$model" --port 0 --parallel 16 -t "$threads" --mode "$mode" -c 1024 2>"$work/serve.log" &
server=$!
for _ in $(seq 600); do grep -q 'ready:' "$work/serve.log" && break; kill -0 "$server" || exit 4; sleep 0.1; done
port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/serve.log" | head -1)
echo "# $(grep 'ready:' "$work/serve.log" | sed 's/^npu-forward: //'); $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
node "$top/bench/serve.mjs" "$port" 1 1 8 >/dev/null # warm-up
for c in 1 4 8 16; do
  node "$top/bench/serve.mjs" "$port" "$c" "$per" "$gen"
done
