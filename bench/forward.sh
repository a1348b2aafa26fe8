#!/usr/bin/env bash
# bench/forward.sh - npu-forward against onnxruntime on the same qwen05b fixture pack (Qwen2.5-0.5B
# geometry, random weights), in the same run, on the same threads: prefill pp128/pp512 and decode
# tg128 at contexts 128 and 512, medians of RUNS runs; and decode's fraction of the DRAM roofline:
# `npu-forward bench --probe` runs one DRAM read pass over the weights' own memory before every
# measured run, and the fraction is the median of the run-by-run (weight bytes per token x tok/s /
# probe GB/s). The probe swings between ~40 and ~78 GB/s on the shared machine from one minute to
# the next, so a bandwidth measured once, apart from the runs, cannot be compared with them.
# A benchmark, not a test: run it on a quiet machine.
#
#   bench/forward.sh [RUNS]          (env: THREADS=2, GEN=128, OGAKIT_BUILD=build)
#
# onnxruntime runs the pack at the builder's default accuracy_level 4 (its int8-activation fast path)
# and at level 0 (fp32 activations); npu-forward runs --mode i8 and --mode f32 on a container of the
# same weights (the two packs differ only in the MatMulNBits accuracy_level attribute).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
bin=${OGAKIT_BUILD:-$top/build}/bin
runs=${1:-5}
threads=${THREADS:-2}
gen=${GEN:-128}
export PATH="$bin:$PATH"
work=$(mktemp -d "${TMPDIR:-/tmp}/ogk-bench-forward.XXXXXX")
trap 'rm -rf "$work"' EXIT

pack0=$("$top/tools/fixture.sh" qwen2 cpu tied qwen05b 0)
pack4=$("$top/tools/fixture.sh" qwen2 cpu tied qwen05b 4)
oga-extract "$pack0" | q4nx-pack -l b8 -o "$work/model.q4nx"
cmp -s "$pack0/model.onnx.data" "$pack4/model.onnx.data" || echo "note: the acc0 and acc4 packs' weights differ" >&2

echo "# bench/forward.sh: qwen05b fixture, $threads threads, $runs rounds, tg$gen; $(date -u +%FT%TZ); load $(cut -d' ' -f1-3 /proc/loadavg)"


nice_run() { nice -n 5 "$@"; }
# RUNS rounds; each round runs every contender once (after its own warm-up), one after the other,
# so a change of the machine's bandwidth from minute to minute hits all of them alike; the table
# shows the median over the rounds of each number.
ob() { nice_run npu-forward bench -m "$work/model.q4nx" -l 128,512 -g "$gen" -r 1 -t "$threads" --probe --json "$@"; }
for r in $(seq "$runs"); do
  ob --mode i8 >"$work/ours-i8.$r.json"
  nice_run node "$top/tools/ort-ref.js" "$pack4" --bench --threads "$threads" --runs 1 --decode "$gen" --decode-ctx 128,512 >"$work/ort-4.$r.json"
  ob --mode f32 >"$work/ours-f32.$r.json"
  nice_run node "$top/tools/ort-ref.js" "$pack0" --bench --threads "$threads" --runs 1 --decode "$gen" --decode-ctx 128,512 >"$work/ort-0.$r.json"
  # i8 with the weights mapped in place (4 KiB file pages; the probe reads those pages) instead of
  # the default 2 MiB-page copy
  ob --mode i8 --mmap >"$work/ours-i8m.$r.json"
done

med() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
wbytes=$(jq .weight_bytes_per_token "$work/ours-f32.1.json")
ours() { jq -r --argjson l "$2" ".results[] | select(.prompt_tokens == \$l) | .$3.median" "$work"/ours-$1.*.json | med; }
ortv() { jq -r "$2" "$work"/ort-$1.*.json | med; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'; }
roof() { awk -v f="$(ours "$1" "$2" decode_fraction_of_dram)" 'BEGIN { printf "%.0f%%", 100 * f }'; }
bw() { ours "$1" "$2" dram_read_GBps; }

printf '\nweights/token %.1f MB; DRAM read probe (median, GB/s) i8 runs %s / %s, f32 runs %s / %s (ctx 128 / 512)\n\n' \
  "$(awk -v w="$wbytes" 'BEGIN{print w/1e6}')" "$(bw i8 128)" "$(bw i8 512)" "$(bw f32 128)" "$(bw f32 512)"
printf '%-16s %14s %14s %8s %14s %14s %8s %9s\n' "tok/s (median)" "ours i8" "ORT acc4" "ratio" "ours f32" "ORT acc0" "ratio" "roofline"
for l in 128 512; do
  a=$(ours i8 $l prefill_tok_s) b=$(ortv 4 ".prefill${l}_tok_s") c=$(ours f32 $l prefill_tok_s) d=$(ortv 0 ".prefill${l}_tok_s")
  printf '%-16s %14.1f %14.1f %8s %14.1f %14.1f %8s %9s\n' "pp$l" "$a" "$b" "$(ratio "$a" "$b")" "$c" "$d" "$(ratio "$c" "$d")" "-"
done
for l in 128 512; do
  a=$(ours i8 $l decode_tok_s) b=$(ortv 4 ".decode[] | select(.context == $l) | .tok_s")
  c=$(ours f32 $l decode_tok_s) d=$(ortv 0 ".decode[] | select(.context == $l) | .tok_s")
  printf '%-16s %14.1f %14.1f %8s %14.1f %14.1f %8s %9s\n' "tg$gen @ ctx $l" "$a" "$b" "$(ratio "$a" "$b")" "$c" "$d" "$(ratio "$c" "$d")" \
    "$(roof i8 $l)/$(roof f32 $l)"
done
for l in 128 512; do
  a=$(ours i8m $l decode_tok_s)
  printf '%-16s %14.1f %14s %8s %14s %14s %8s %9s\n' "  --mmap i8" "$a" "" "$(ratio "$a" "$(ortv 4 ".decode[] | select(.context == $l) | .tok_s")")" "" "" "" "$(roof i8m $l)"
done
printf '\nTTFT ms (median): pp128 i8 %s, f32 %s; pp512 i8 %s, f32 %s. Peak RSS %s MB.\n' \
  "$(ours i8 128 ttft_ms)" "$(ours f32 128 ttft_ms)" "$(ours i8 512 ttft_ms)" "$(ours f32 512 ttft_ms)" \
  "$(jq '.peak_rss_bytes / 1e6 | floor' "$work"/ours-f32.*.json | med)"
echo "roofline column: i8/f32 decode tok/s x weight bytes per token / the DRAM read probe run just before"
echo "over the same memory (median over the rounds); --mmap row: weights mapped in 4 KiB file pages (the other
rows: the default 2 MiB-page copy where the kernel has transparent huge pages). Every number"
echo "is the median over $runs rounds, each round running all five contenders once in turn."
