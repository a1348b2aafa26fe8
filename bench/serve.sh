#!/usr/bin/env bash
# bench/serve.sh - npu-forward serve under 1, 4, 8 and 16 concurrent streams on the qwen05b fixture
# (Qwen2.5-0.5B geometry, random weights): aggregate generated tokens per second, p50/p99 time to first
# token, per-stream decode rate; one JSON line per concurrency (bench/serve.mjs). The server runs with
# --parallel 16 (every stream has a slot) on THREADS threads in MODE (default i8: the mode whose steps
# batch every projection). Then, where llama.cpp is built (tools/llama-cpp.sh), llama-server on a GGUF of
# the same weights (q4nx-gguf, exact), with as many slots and the same context per slot and threads, under
# the same load; and the ratio of the two per concurrency. A benchmark, not a test: run it on a quiet
# machine.
#
#   bench/serve.sh [REQUESTS_PER_STREAM]     (env: THREADS=2, GEN=128, MODE=i8, MODEL=a .q4nx to use,
#                                             PEER=0 to skip llama-server, LLAMA=noamx|native: which
#                                             llama.cpp build serves as the peer, default noamx)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
bin=${OGAKIT_BUILD:-$top/build}/bin
per=${1:-2}
threads=${THREADS:-2} gen=${GEN:-128} mode=${MODE:-i8}
export PATH="$bin:$PATH"
work=$(mktemp -d "${TMPDIR:-/tmp}/ogk-bench-serve.XXXXXX")
server=
trap '[ -n "$server" ] && kill "$server" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
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
  node "$top/bench/serve.mjs" "$port" "$c" "$per" "$gen" npu-forward | tee -a "$work/ours.jsonl"
done
kill "$server"; wait "$server" 2>/dev/null || true; server=

# the peer: llama-server on the same weights
[ "${PEER:-1}" = 1 ] || exit 0
llama=$("$top/tools/llama-cpp.sh" --check --server-only "${LLAMA:-noamx}" 2>/dev/null) || { echo "# llama-server: not built (tools/llama-cpp.sh); no peer row" >&2; exit 0; }
q4nx-gguf -o "$work/model.gguf" "$model" 2>/dev/null || q4nx-gguf --widen -o "$work/model.gguf" "$model"
lport=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$llama/llama-server" -m "$work/model.gguf" --host 127.0.0.1 --port "$lport" -np 16 -c $((16 * 1024)) -t "$threads" \
  -tb "$threads" --no-warmup >"$work/llama.log" 2>&1 &
server=$!
up=0
for _ in $(seq 1200); do
  curl -sf "http://127.0.0.1:$lport/health" >/dev/null && { up=1; break; }
  kill -0 "$server" 2>/dev/null || { tail -5 "$work/llama.log" >&2; exit 4; }
  sleep 0.1
done
[ "$up" = 1 ] || { echo "# llama-server did not come up in 120 s" >&2; exit 4; }
node "$top/bench/serve.mjs" "$lport" 1 1 8 llama-server >/dev/null # warm-up
for c in 1 4 8 16; do
  node "$top/bench/serve.mjs" "$lport" "$c" "$per" "$gen" llama-server | tee -a "$work/peer.jsonl"
done
jq -sc 'group_by(.streams)[] | {streams: .[0].streams,
  aggregate_ratio: ((map(select(.server == "npu-forward"))[0].aggregate_tok_s) / (map(select(.server == "llama-server"))[0].aggregate_tok_s) * 100 | round / 100)}' \
  "$work/ours.jsonl" "$work/peer.jsonl"
