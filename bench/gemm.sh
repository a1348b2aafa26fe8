#!/usr/bin/env bash
# bench/gemm.sh — lib/kern against onnxruntime's MatMulNBits (accuracy_level 4, same weights, same
# thread count) on the Qwen2.5-0.5B role shapes (the qwen05b fixture's geometry; 4-bit in two styles
# and 8-bit), plus the M = 1
# pass over a whole model's weights against the DRAM read bandwidth measured in the same run.
# A benchmark, not a test: run it on a quiet machine. Every number is the median of RUNS (>= 5) runs;
# each npu-gemm run is itself the median of its launches, each onnxruntime run the interquartile
# mean of its profiled MatMulNBits kernel times.
#   usage: bench/gemm.sh [-t THREADS] [-r RUNS] [-m MODEL.q4nx] [-o RESULTS.jsonl] [--quick]
# Prints a markdown table on stdout; raw JSON lines go to RESULTS.jsonl (default: a temp file).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${OGAKIT_BUILD:-$top/build}
G=$build/bin/npu-gemm
threads=2 runs=5 model="" out="" quick=0
while [ $# -gt 0 ]; do
  case "$1" in
    -t) threads=$2; shift 2 ;;
    -r) runs=$2; shift 2 ;;
    -m) model=$2; shift 2 ;;
    -o) out=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    *) echo "gemm.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -x "$G" ] || { echo "gemm.sh: $G not built (make BUILD=... $G)" >&2; exit 4; }
[ "$runs" -ge 5 ] || [ "$quick" = 1 ] || { echo "gemm.sh: -r must be >= 5" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
[ -n "$out" ] || out=$work/results.jsonl
: >"$out"

med() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
# run_ours FIELD ARGS...: median over runs of .FIELD
run_ours() {
  local field=$1; shift
  for _ in $(seq "$runs"); do
    "$G" -t "$threads" "$@" | jq -c . | tee -a "$out" | jq -r ".$field"
  done | med
}

shapes_role=(qkv o gate/up down lm_head)
shapes_nk=(1152,896 896,896 4864,896 896,4864 151936,896)
# q8: 8-bit weights (the builder's int8 lm_head, k_quant layers, -p int8), block 32 without zero points
styles=("cpu:--block 32" "amd:--block 128 --asym --scale-dtype f16" "q8:--bits 8 --block 32")
[ "$quick" = 1 ] && shapes_role=(qkv down) && shapes_nk=(1152,896 896,4864)

echo "# bench/gemm.sh — $(date -u +%Y-%m-%dT%H:%MZ), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), threads $threads, runs $runs"
echo "# kernel path: $("$G" --shape 16,32 --reps 1 --check-rows 0 | jq -r .kernel); load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo

# 1+2. The M = 1 pass over a whole model's weights (Qwen2.5-0.5B: 24 layers of qkv, o, gate, up,
# down, and lm_head) against the DRAM read bandwidth: npu-gemm --model-pass --probe-mb alternates
# each pass with one pass of the read probe in the same process, so both see the same machine; the
# fraction is the median of the pass-by-pass ratios. Synthetic weights and the probe buffer are
# both 2 MiB-page allocations; with -m the probe reads the container's own memory (its 4 KiB-page
# mapping, or its 2 MiB-page --no-mmap copy), so probe and kernels always see the same kind of pages.
spec="1152x896*24,896x896*24,4864x896*48,896x4864*24,151936x896"
passes=("cpu f32" "cpu i8" "amd f32" "amd i8" "q8 i8")
[ -n "$model" ] && passes+=("model f32" "model i8" "model-huge i8")
echo "## M = 1 over a whole model's weights vs the DRAM read bandwidth measured alongside"
echo
echo "| weights | mode | threads | MB | ms per pass | GB/s | DRAM read GB/s | fraction of DRAM read |"
echo "|---|---|---:|---:|---:|---:|---:|---:|"
tlist=("$threads")
[ "$threads" != 1 ] && tlist+=(1) # the 1-thread row shows the kernel apart from thread scheduling
for th in "${tlist[@]}"; do
for p in "${passes[@]}"; do
  set -- $p
  case $1 in
    cpu) src=(--shapes "$spec" --block 32); what="qwen05b shapes, cpu style (block 32, f32 scales)" ;;
    amd) src=(--shapes "$spec" --block 128 --asym --scale-dtype f16); what="qwen05b shapes, amd style (block 128, f16 scales, zero points)" ;;
    q8) src=(--shapes "$spec" --bits 8 --block 32); what="qwen05b shapes, 8-bit (block 32, f32 scales)" ;;
    model) src=(-m "$model"); what="$(basename "$model") (mapped; probe reads the mapping)" ;;
    model-huge) src=(-m "$model" --no-mmap); what="$(basename "$model") (--no-mmap: 2 MiB pages; probe reads them)" ;;
  esac
  rows=$(for _ in $(seq "$runs"); do
    "$G" -t "$th" --model-pass "${src[@]}" --mode "$2" --check-rows 4 --probe-mb 512 --reps 9 | jq -c . | tee -a "$out" |
      jq -r '[.ms, .weight_bytes, .dram_read_GBps, .fraction_of_dram] | @tsv'
  done)
  ms=$(echo "$rows" | cut -f1 | med)
  mb=$(echo "$rows" | head -1 | cut -f2 | awk '{print $1 / 1e6}')
  bw=$(echo "$rows" | cut -f3 | med)
  fr=$(echo "$rows" | cut -f4 | med)
  printf '| %s | %s | %d | %.0f | %.2f | %.1f | %.1f | %.0f %% |\n' "$what" "$2" "$th" "$mb" "$ms" \
    "$(awk -v mb="$mb" -v ms="$ms" 'BEGIN{print mb / ms}')" "$bw" "$(awk -v f="$fr" 'BEGIN{print 100 * f}')"
done
done
echo

# 3. per role shape: ours (f32, i8) vs onnxruntime MatMulNBits accuracy_level 4
echo "## Per role shape: ms per launch (median of $runs runs), onnxruntime MatMulNBits accuracy_level 4 vs ours"
echo
echo "ORT ms = the smaller of its profiled MatMulNBits kernel time and its session.run wall time (the"
echo "number most favourable to onnxruntime); the ratios divide it by ours."
echo
echo "| role | N x K | style | M | ORT kernel ms | ORT run ms | ours i8 ms | ours f32 ms | ORT / i8 | ORT / f32 |"
echo "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"
for i in "${!shapes_role[@]}"; do
  role=${shapes_role[$i]} nk=${shapes_nk[$i]}
  for st in "${styles[@]}"; do
    name=${st%%:*} args=${st#*:}
    d=$work/w && rm -rf "$d"
    # shellcheck disable=SC2086
    "$G" --shape "$nk" $args --dump-source "$d" --reps 1 --check-rows 0 >/dev/null
    /usr/bin/python3 "$top/bench/mk-matmulnbits.py" "$d" "$d/m.onnx" 4
    for M in 1 128; do
      ort=$(node "$top/bench/ort-matmulnbits.js" "$d/m.onnx" "$M" "${nk#*,}" "$threads" 0 "$runs")
      echo "$ort" >>"$out"
      ok=$(echo "$ort" | jq -r .kernel_ms) orun=$(echo "$ort" | jq -r .run_ms)
      obest=$(echo "$ort" | jq -r '[.kernel_ms, .run_ms] | min')
      # shellcheck disable=SC2086
      i8=$(run_ours ms --shape "$nk" $args --rows "$M" --mode i8 --check-rows 16)
      # shellcheck disable=SC2086
      f32=$(run_ours ms --shape "$nk" $args --rows "$M" --mode f32 --check-rows 16)
      printf '| %s | %s | %s | %d | %.4f | %.4f | %.4f | %.4f | %.2fx | %.2fx |\n' "$role" "${nk/,/ x }" "$name" "$M" \
        "$ok" "$orun" "$i8" "$f32" "$(awk -v a="$obest" -v b="$i8" 'BEGIN{print a/b}')" \
        "$(awk -v a="$obest" -v b="$f32" 'BEGIN{print a/b}')"
    done
  done
done
echo
echo "raw results: $out"
