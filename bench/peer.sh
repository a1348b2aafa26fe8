#!/usr/bin/env bash
# bench/peer.sh - ogakit (npu-forward --mode i8), llama.cpp (llama-bench, Q4_0 GGUF) and onnxruntime
# (accuracy_level 4) side by side on a fixture of Qwen2.5-0.5B shapes (GEOM=qwen15b: Qwen2.5-1.5B), in one run,
# on the same threads: prefill pp512 / pp2048 and decode tg$GEN after 128, 2048 and 4096 positions,
# plus ogakit's verify passes (k rows against a 1-row step at the same position, alternated in
# process). RUNS interleaved rounds, each running every contender once in turn, so a change of the
# shared machine from one minute to the next hits all alike; the tables hold the medians over the
# rounds and the ratios of those medians. A benchmark, not a test: run it on a quiet machine.
#
#   bench/peer.sh [RUNS]     (default 5)
#   env: THREADS=2  GEN=128  PP=512,2048  CTX=128,2048,4096  VERIFY=2,4,8,16  GEOM=qwen05b|qwen15b
#        PEERS="ours llama ort" (any subset)  LLAMA=noamx|native (llama.cpp build; default noamx)
#        SCALES=f32|f16 (the fixture's scales for ogakit and llama.cpp; default f32. f16: the pack built
#        with fp16 I/O, whose scales Q4_0's fp16 d holds exactly, so both run bit-identical weights;
#        onnxruntime stays on the fp32 pack, its CPU kernels' usual case)
#        GGUF=FILE (a ready GGUF for llama.cpp)  OUT=DIR (default bench/results)  OGAKIT_BUILD=build
#
# The GGUF: GGUF=FILE if given; else `q4nx-gguf` of the same container when build/bin/q4nx-gguf
# exists (the same weights, exactly; with --allow-lossy where a scale is not exact in fp16); else bench/mkgguf.py writes random fp16 weights of the same
# shapes and the pack's tokenizer, and `llama-quantize --pure ... Q4_0` makes every matrix Q4_0
# (block 32, like the pack), the tied embedding / classifier included (hidden 896 is not a multiple
# of 256, so K-quants would fall back anyway). Speed depends on shapes and dtypes, not on values.
# llama.cpp: tools/llama-cpp.sh builds it under .cache/llama (noamx: -march=native minus AMX, what
# CPUs without AMX run; native: AMX where the CPU has it; on a CPU without AMX the two are the same).
#
# Output: a markdown file and a JSON file under OUT named DATE-peer.{md,json} (DATEb-peer.. when that
# day already has one; written atomically),
# the markdown also on stdout. Exit status: 0 ok, 2 usage, 4 a contender could not be built or run.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
bin=${OGAKIT_BUILD:-$top/build}/bin
runs=${1:-5}
case "$runs" in ''|*[!0-9]*|0) echo "peer.sh: RUNS must be a positive integer, not '$runs'" >&2; exit 2 ;; esac
geom=${GEOM:-qwen05b} threads=${THREADS:-2} gen=${GEN:-128} pp=${PP:-512,2048} ctx=${CTX:-128,2048,4096} verify=${VERIFY:-2,4,8,16}
peers=${PEERS:-ours llama ort} llama_kind=${LLAMA:-noamx} out=${OUT:-$top/bench/results}
export PATH="$bin:$PATH"
for t in jq node; do command -v "$t" >/dev/null || { echo "peer.sh: $t is not installed" >&2; exit 4; }; done
has() { [[ " $peers " == *" $1 "* ]]; }
work=$(mktemp -d "${TMPDIR:-/tmp}/ogk-bench-peer.XXXXXX")
trap 'rm -rf "$work"' EXIT

case "$geom" in qwen05b) shapes="Qwen2.5-0.5B shapes" ;; qwen15b) shapes="Qwen2.5-1.5B shapes, head_dim 128" ;;
  *) echo "peer.sh: GEOM must be qwen05b or qwen15b, not '$geom'" >&2; exit 2 ;; esac
scales=${SCALES:-f32}
case "$scales" in f32|f16) ;; *) echo "peer.sh: SCALES must be f32 or f16, not '$scales'" >&2; exit 2 ;; esac
pack4=$("$top/tools/fixture.sh" qwen2 cpu tied "$geom" 4)
packw=$pack4 # the pack ogakit and llama.cpp run
[ "$scales" = f16 ] && packw=$("$top/tools/fixture.sh" qwen2 cpu tied "$geom" 4 fp16)
model=$work/model.q4nx
oga-extract "$packw" | q4nx-pack -l b8 -o "$model"

gguf_note=
if has llama; then
  lbin=$("$top/tools/llama-cpp.sh" "$llama_kind") || { echo "peer.sh: llama.cpp ($llama_kind) is not available" >&2; exit 4; }
  if [ -n "${GGUF:-}" ]; then
    gguf=$GGUF gguf_note="given: $GGUF"
  elif [ -x "$bin/q4nx-gguf" ]; then
    gguf=$work/model.gguf
    gguf_note="q4nx-gguf of the same container (the same weights)"
    if ! q4nx-gguf "$model" -o "$gguf" 2>"$work/gguf.err"; then
      # the fixture's fp32 scales need not be exact in Q4_0's fp16 d: rounded, the file has the same
      # shapes and dtypes (what speed depends on); --widen would write Q8_0/F32 tensors instead
      q4nx-gguf --allow-lossy "$model" -o "$gguf" 2>"$work/gguf-lossy.err" ||
        { cat "$work/gguf.err" "$work/gguf-lossy.err" >&2; echo "peer.sh: q4nx-gguf failed" >&2; exit 4; }
      gguf_note="q4nx-gguf --allow-lossy of the same container (its fp32 scales rounded to Q4_0's fp16)"
    fi
  else
    PYTHONPATH="$top/.cache/llama/src/gguf-py" /usr/bin/python3 "$top/bench/mkgguf.py" \
      --tokenizer "$pack4/tokenizer.json" "$work/f16.gguf" || { echo "peer.sh: mkgguf.py failed" >&2; exit 4; }
    "$lbin/llama-quantize" --pure "$work/f16.gguf" "$work/model.gguf" Q4_0 >"$work/quantize.log" 2>&1 ||
      { cat "$work/quantize.log" >&2; echo "peer.sh: llama-quantize failed" >&2; exit 4; }
    rm -f "$work/f16.gguf"
    gguf=$work/model.gguf gguf_note="random fp16 weights of the same shapes (bench/mkgguf.py), llama-quantize --pure Q4_0"
  fi
  cpu_amx=$(grep -m1 -o -w amx_int8 /proc/cpuinfo || true)
  llama_note="llama.cpp v0.5.0 (node-llama-cpp@3.22.1), build '$llama_kind'"
  if [ "$llama_kind" = noamx ]; then llama_note="$llama_note (-march=native minus AMX)"; else llama_note="$llama_note (-march=native, AMX where present)"; fi
  [ -n "$cpu_amx" ] || llama_note="$llama_note; this CPU has no AMX, so the noamx and native builds are the same code"
fi

maxctx=0
for l in ${pp//,/ } ${ctx//,/ }; do [ "$l" -gt "$maxctx" ] && maxctx=$l; done
lens=$(echo "${pp//,/ } ${ctx//,/ }" | tr ' ' '\n' | sort -n -u | paste -sd,)
stamp=$(date -u +%FT%TZ)
commit=$(git -C "$top" rev-parse --short HEAD 2>/dev/null || echo '?')
cmdline="GEOM=$geom SCALES=$scales THREADS=$threads GEN=$gen PP=$pp CTX=$ctx VERIFY=$verify PEERS=\"$peers\" LLAMA=$llama_kind${GGUF:+ GGUF=$GGUF} bench/peer.sh $runs"

nice_run() { nice -n 5 "$@"; }
for r in $(seq "$runs"); do
  if has ours; then
    nice_run npu-forward bench -m "$model" -l "$lens" -g "$gen" -r 1 -t "$threads" --mode i8 \
      ${verify:+--verify-rows "$verify"} --json >"$work/ours.$r.json"
  fi
  if has llama; then
    nice_run "$lbin/llama-bench" -m "$gguf" -t "$threads" -p "$pp" -n 0 -r 1 -o json >"$work/lpp.$r.json" 2>"$work/llama.err" ||
      { cat "$work/llama.err" >&2; exit 4; }
    nice_run "$lbin/llama-bench" -m "$gguf" -t "$threads" -p 0 -n "$gen" -d "$ctx" -r 1 -o json >"$work/ltg.$r.json" 2>"$work/llama.err" ||
      { cat "$work/llama.err" >&2; exit 4; }
  fi
  if has ort; then
    nice_run node "$top/tools/ort-ref.js" "$pack4" --bench --threads "$threads" --runs 1 --prefill "$pp" \
      --decode "$gen" --decode-ctx "$ctx" >"$work/ort.$r.json"
  fi
done

med() { sort -g | awk '{a[NR]=$1} END {if (!NR) print "null"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
ours_pp() { has ours && jq -r --argjson l "$1" '.results[] | select(.prompt_tokens == $l) | .prefill_tok_s.median' "$work"/ours.*.json | med || echo null; }
ours_tg() { has ours && jq -r --argjson l "$1" '.results[] | select(.prompt_tokens == $l) | .decode_tok_s.median' "$work"/ours.*.json | med || echo null; }
llama_pp() { has llama && jq -r --argjson l "$1" '.[] | select(.n_prompt == $l and .n_gen == 0) | .avg_ts' "$work"/lpp.*.json | med || echo null; }
llama_tg() { has llama && jq -r --argjson l "$1" '.[] | select(.n_depth == $l and .n_gen > 0) | .avg_ts' "$work"/ltg.*.json | med || echo null; }
ort_pp() { has ort && jq -r ".prefill${1}_tok_s" "$work"/ort.*.json | med || echo null; }
ort_tg() { has ort && jq -r --argjson l "$1" '.decode[] | select(.context == $l) | .tok_s' "$work"/ort.*.json | med || echo null; }

# rows: [name, ours, llama, ort]
rows=()
for l in ${pp//,/ }; do rows+=("pp$l|$(ours_pp "$l")|$(llama_pp "$l")|$(ort_pp "$l")"); done
for l in ${ctx//,/ }; do rows+=("tg$gen @ $l|$(ours_tg "$l")|$(llama_tg "$l")|$(ort_tg "$l")"); done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "null" || b == "null" || b == 0) print "-"; else printf "%.2fx", a / b }'; }
num() { awk -v a="$1" 'BEGIN { if (a == "null") print "-"; else printf "%.1f", a }'; }

md=$work/peer.md
{
  echo "# bench/peer.sh, $stamp"
  echo
  echo "Command: \`$cmdline\` (commit $commit, $threads threads, $runs interleaved rounds, medians; load at the start"
  echo "$(cut -d' ' -f1-3 /proc/loadavg); CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'))."
  echo "Model: the $geom fixture ($shapes, random int4 weights, block 32, tied embeddings; $scales scales for ogakit and llama.cpp)."
  has ours && echo "ogakit: npu-forward bench --mode i8 on the fixture's container (q4nx-pack -l b8)."
  has ort && echo "onnxruntime: tools/ort-ref.js --bench on the accuracy_level 4 pack."
  has llama && echo "llama.cpp: $llama_note; GGUF: $gguf_note."
  echo
  echo "| tok/s (median) | ogakit i8 | llama.cpp Q4_0 | onnxruntime acc4 | ogakit / llama.cpp | ogakit / onnxruntime |"
  echo "|---|---:|---:|---:|---:|---:|"
  for row in "${rows[@]}"; do
    IFS='|' read -r n a b c <<<"$row"
    echo "| $n | $(num "$a") | $(num "$b") | $(num "$c") | $(ratio "$a" "$b") | $(ratio "$a" "$c") |"
  done
  if has ours && [ -n "$verify" ]; then
    echo
    echo "ogakit greedy verify passes (k rows, each row's argmax: the argmax head) in decode steps (a 1-row pass at the same position,"
    echo "alternated in the same process; median over 31 rounds, then over the $runs runs):"
    echo
    printf '| after |'; for k in ${verify//,/ }; do printf ' %s rows |' "$k"; done; echo
    printf '|---|'; for k in ${verify//,/ }; do printf -- '---:|'; done; echo
    for l in $(echo "$lens" | tr , ' '); do
      printf '| %s |' "$l"
      for k in ${verify//,/ }; do
        printf ' %s |' "$(jq -r --argjson l "$l" --argjson k "$k" '.results[] | select(.prompt_tokens == $l) | .verify[] | select(.rows == $k) | .steps' "$work"/ours.*.json | med | awk '{printf "%.2f", $1}')"
      done
      echo
    done
  fi
} >"$md"

json=$work/peer.json
{
  jq -n --arg stamp "$stamp" --arg cmd "$cmdline" --arg commit "$commit" --argjson threads "$threads" \
    --argjson runs "$runs" --arg llama "${llama_note:-}" --arg gguf "$gguf_note" --arg geom "$geom" --arg scales "$scales" \
    '{date: $stamp, command: $cmd, commit: $commit, threads: $threads, runs: $runs, geometry: $geom, scales: $scales,
      llama_cpp: $llama, gguf: $gguf, rows: []}'
  for row in "${rows[@]}"; do
    IFS='|' read -r n a b c <<<"$row"
    jq -n --arg n "$n" --argjson a "$a" --argjson b "$b" --argjson c "$c" '{name: $n, ogakit: $a, llama_cpp: $b, onnxruntime: $c}'
  done
  if has ours; then jq -s '{ogakit_runs: .}' "$work"/ours.*.json; fi
} | jq -s '.[0] + {rows: [.[1:][] | select(has("name"))]} + ((.[1:][] | select(has("ogakit_runs"))) // {})' >"$json"

mkdir -p "$out"
# a day's first run is DATE-peer, later ones DATE{b,c,...}-peer: an earlier result is never overwritten
day=$(date -u +%F) base=$out/$day-peer
for sfx in b c d e f g h i j k l m n o p q r s t u v w x y z; do
  [ -e "$base.md" ] || [ -e "$base.json" ] || break
  base=$out/$day$sfx-peer
done
cp "$md" "$base.md.tmp" && mv "$base.md.tmp" "$base.md"
cp "$json" "$base.json.tmp" && mv "$base.json.tmp" "$base.json"
cat "$md"
echo "(saved: $base.md, $base.json)" >&2
