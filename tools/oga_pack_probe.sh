#!/usr/bin/env bash
# oga_pack_probe.sh - run an OGA pack through ogakit's gates in order, stop at the first that fails,
# and say which one failed: its name on stderr and in the JSON, its program's exit code as ours.
#
#   tools/oga_pack_probe.sh [-l b8|rm] [-o OUT.q4nx] [-p PROMPT] [-t THREADS] [--oracle] PACK
#
# Gates:
#   import   oga-info PACK: the pack parses and nothing in it is refused      (fails with 3)
#   extract  oga-extract PACK | q4nx-pack -l L: the container is written       (3 malformed, 4)
#   verify   q4nx-verify --pack PACK --all: every weight group bit-exact       (1)
#   run      npu-forward run: the model loads and generates 8 tokens greedily   (4 init, 3)
#   oracle   (--oracle) teacher-forced top-1 ids equal onnxruntime's on the prompt and those 8
#            tokens, wherever onnxruntime's top-1/top-2 gap exceeds 1e-2     (1; 3 no onnxruntime)
# stdout: one JSON object per gate that ran ({gate, ok, exit, seconds, detail}); exit 0 when all
# pass, 2 on usage errors. The container is removed unless -o names where to keep it.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
export PATH="${OGAKIT_BUILD:-$top/build}/bin:$PATH"
me=oga_pack_probe
usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; }
die_usage() { echo "$me: $*" >&2; exit 2; }

layout=b8 out="" prompt="def main():" threads="" oracle=0 pack=""
while [ $# -gt 0 ]; do
  case "$1" in
    -l) [ $# -ge 2 ] || die_usage "-l needs b8 or rm"; layout=$2; shift 2 ;;
    -o) [ $# -ge 2 ] || die_usage "-o needs a path"; out=$2; shift 2 ;;
    -p) [ $# -ge 2 ] || die_usage "-p needs a prompt"; prompt=$2; shift 2 ;;
    -t) [ $# -ge 2 ] || die_usage "-t needs a thread count"; threads="-t $2"; shift 2 ;;
    --oracle) oracle=1; shift ;;
    -h | --help) usage; exit 0 ;;
    -*) die_usage "unknown option $1 (see --help)" ;;
    *) [ -z "$pack" ] || die_usage "one PACK only"; pack=$1; shift ;;
  esac
done
[ -n "$pack" ] || die_usage "a PACK directory is required (see --help)"
case "$layout" in b8 | rm) ;; *) die_usage "-l $layout: expected b8 or rm" ;; esac
command -v jq >/dev/null || { echo "$me: jq is required" >&2; exit 4; }

work=$(mktemp -d "${TMPDIR:-/tmp}/ogk-probe.XXXXXX")
trap 'rm -rf "$work"' EXIT
model=$work/model.q4nx

# gate NAME CMD...: runs CMD (stdout to $work/NAME.out, stderr to $work/NAME.err), prints the gate's
# JSON line; on failure names the gate and exits with CMD's code
gate() {
  local name=$1 t0 rc detail
  shift
  t0=$(date +%s.%N)
  "$@" >"$work/$name.out" 2>"$work/$name.err"
  rc=$?
  detail=$(tail -n 3 "$work/$name.err" | tr '\n' ' ' | sed 's/ *$//')
  jq -nc --arg g "$name" --argjson rc "$rc" --arg d "$detail" \
    --argjson s "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f", b - a }')" \
    '{gate: $g, ok: ($rc == 0), exit: $rc, seconds: $s, detail: (if $d == "" then null else $d end)}'
  if [ "$rc" -ne 0 ]; then
    echo "$me: gate '$name' failed (exit $rc): ${detail:-no message}" >&2
    exit "$rc"
  fi
}

import() { oga-info "$pack" >"$work/info.json" || return; jq -e '.refusals | length == 0' "$work/info.json" >/dev/null || { jq -r '.refusals[] | "refused: \(.)"' "$work/info.json" >&2; return 3; }; }
extract() { oga-extract "$pack" | q4nx-pack -l "$layout" -o "$model"; local s=("${PIPESTATUS[@]}"); [ "${s[0]}" -eq 0 ] || return "${s[0]}"; return "${s[1]}"; }
verify() { q4nx-verify "$model" --pack "$pack" --all; }
# shellcheck disable=SC2086
run() { npu-forward run -m "$model" -p "$prompt" -n 8 --ignore-eos --json $threads >"$work/run.json" && jq -c '{prompt_ids, ids, text}' "$work/run.json"; }
oracle_check() {
  [ -e "$top/.cache/node/node_modules/onnxruntime-node" ] || { echo "onnxruntime-node is not installed (bash tools/deps.sh)" >&2; return 3; }
  jq -c '.prompt_ids + .ids' "$work/run.json" >"$work/ids.json"
  node "$top/tools/ort-ref.js" "$pack" teacher --ids-file "$work/ids.json" --topk 2 >"$work/ort.json" || return 3
  # shellcheck disable=SC2086
  npu-forward logits -m "$model" --ids "$work/ids.json" --topk 2 $threads >"$work/ours.json" || return
  local bad
  bad=$(jq -n --slurpfile o "$work/ort.json" --slurpfile u "$work/ours.json" \
    '[range(0; $o[0].topk | length) as $i | select(($o[0].topk[$i].logits[0] - $o[0].topk[$i].logits[1]) > 0.01 and
      $o[0].topk[$i].ids[0] != $u[0].topk[$i].ids[0]) | $i]')
  [ "$bad" = "[]" ] || { echo "top-1 differs from onnxruntime at positions $bad" >&2; return 1; }
  echo "top-1 equals onnxruntime's at every position with a gap > 1e-2" >&2
}

gate import import
gate extract extract
gate verify verify
gate run run
[ "$oracle" = 0 ] || gate oracle oracle_check
[ -z "$out" ] || mv "$model" "$out" || exit 3
exit 0
