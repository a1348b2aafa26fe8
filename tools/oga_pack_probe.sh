#!/usr/bin/env bash
# oga_pack_probe.sh - run an OGA pack through ogakit's gates in order, stop at the first that fails,
# and say which one failed: its name on stderr and in the JSON, its program's exit code as ours.
#
#   tools/oga_pack_probe.sh [-l b8|rm] [-o OUT.q4nx] [-p PROMPT] [-t THREADS] [--oracle] [--no-serve] PACK [PORT]
#
# Gates:
#   import   oga-info PACK: the pack parses and nothing in it is refused      (fails with 3)
#   extract  oga-extract PACK | q4nx-pack -l L: the container is written       (3 malformed, 4)
#   verify   q4nx-verify --pack PACK --all: every weight group bit-exact       (1, 3, 4)
#   run      npu-forward run: the model loads and generates 8 tokens greedily   (4 init, 3)
#   oracle   (--oracle) teacher-forced top-1 ids equal onnxruntime's on the prompt and those 8
#            tokens, wherever onnxruntime's top-1/top-2 gap exceeds 1e-2     (1; 3 no onnxruntime)
#   serve    npu-forward serve -m the container --port PORT (default: a free one) starts and
#            answers HTTP on 127.0.0.1 within OGK_PROBE_START_S seconds (default 30)  (4)
#   health   GET /health answers 200 within OGK_PROBE_HEALTH_S seconds (default 60)   (5)
#   completion  POST /v1/completions, greedy, 8 tokens: the run gate's ids           (1; 3)
# The server is killed on every way out. stdout: one JSON object per gate that ran ({gate, ok, exit,
# seconds, detail}); exit 0 when all pass, 2 on usage errors. The container is removed unless -o
# names where to keep it. See oga_pack_probe(1).
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
# the build's programs, or (installed as PREFIX/bin/oga_pack_probe) the programs beside this script
export PATH="${OGAKIT_BUILD:-$top/build}/bin:$(cd "$(dirname "$0")" && pwd):$PATH"
me=oga_pack_probe
# the header comment, up to the first line that is not a comment
usage() { awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$0"; }
die_usage() { echo "$me: $*" >&2; exit 2; }

layout=b8 out="" prompt="def main():" threads="" oracle=0 serve=1 pack="" port="" operands=()
while [ $# -gt 0 ]; do
  case "$1" in
    -l) [ $# -ge 2 ] || die_usage "-l needs b8 or rm"; layout=$2; shift 2 ;;
    -o) [ $# -ge 2 ] && [ -n "$2" ] || die_usage "-o needs a path"; out=$2; shift 2 ;;
    -p) [ $# -ge 2 ] || die_usage "-p needs a prompt"; prompt=$2; shift 2 ;;
    -t) [ $# -ge 2 ] || die_usage "-t needs a thread count"
        [[ $2 =~ ^[1-9][0-9]{0,3}$ ]] && [ "$2" -le 1024 ] || die_usage "-t $2: expected a thread count (1-1024, as npu-forward takes)"
        threads="-t $2"; shift 2 ;;
    --oracle) oracle=1; shift ;;
    --no-serve) serve=0; shift ;;
    -h | --help) usage; exit 0 ;;
    --) shift; operands+=("$@"); break ;;
    -*) die_usage "unknown option $1 (see --help)" ;;
    *) operands+=("$1"); shift ;;
  esac
done
for a in "${operands[@]}"; do
  if [ -z "$pack" ]; then pack=$a
  elif [ -z "$port" ]; then port=$a
  else die_usage "one PACK and one PORT only"; fi
done
[ -n "$pack" ] || die_usage "a PACK directory is required (see --help)"
# a pack path that starts with - (given after --) goes to the programs as ./-..., never as an option
[[ $pack != -* ]] || pack=./$pack
case "$layout" in b8 | rm) ;; *) die_usage "-l $layout: expected b8 or rm" ;; esac
case "$port" in "" | [1-9] | [1-9][0-9] | [1-9][0-9][0-9] | [1-9][0-9][0-9][0-9] | [1-9][0-9][0-9][0-9][0-9]) ;;
  *) die_usage "PORT $port: expected a TCP port number" ;; esac
[ -z "$port" ] || [ "$port" -le 65535 ] || die_usage "PORT $port: expected a TCP port number (1-65535)"
# the serve and health gates' bounds: whole seconds (anything else made their arithmetic fail, which
# skipped the gates and still ended in "all gates passed")
for v in OGK_PROBE_START_S OGK_PROBE_HEALTH_S; do
  [[ ${!v:-1} =~ ^[0-9]{1,6}$ ]] || die_usage "$v=${!v}: expected whole seconds (0-999999)"
done
start_s=$((10#${OGK_PROBE_START_S:-30})) health_s=$((10#${OGK_PROBE_HEALTH_S:-60}))
# the programs the gates run, before anything is created: a missing one is named (not exit 127)
need=(jq oga-info oga-extract q4nx-pack q4nx-verify npu-forward)
[ "$serve" = 0 ] || need+=(curl)
for c in "${need[@]}"; do
  command -v "$c" >/dev/null || { echo "$me: $c is required (not found in ${OGAKIT_BUILD:-$top/build}/bin or PATH)" >&2; exit 4; }
done
# the server (when one was started), the work directory and -o's temp file go on every way out
spid="" passed=() work="" out_tmp=""
# stop_server: SIGTERM, then SIGKILL when it has not gone within 5 s (a hung server cannot hold the probe)
stop_server() {
  local i
  [ -n "$spid" ] || return 0
  kill "$spid" 2>/dev/null
  for ((i = 0; i < 50; i++)); do kill -0 "$spid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$spid" 2>/dev/null && kill -KILL "$spid" 2>/dev/null
  wait "$spid" 2>/dev/null
  spid=""
}
cleanup() { stop_server; [ -z "$work" ] || rm -rf "$work"; [ -z "$out_tmp" ] || rm -f "$out_tmp"; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
# -o: checked before any gate runs; the container goes there at the end through a temp file beside it
# (renamed over it: nothing half-written under its name), or straight into a device or FIFO
if [ -n "$out" ]; then
  [ ! -d "$out" ] || die_usage "-o $out: is a directory (name a file)"
  if [ -L "$out" ] && [ ! -e "$out" ]; then die_usage "-o $out: a symbolic link to nothing"; fi
  [ ! -L "$out" ] || [ ! -f "$out" ] || out=$(readlink -f -- "$out") # the file a link names is replaced
  for f in "$pack"/* "$pack"/*/*; do # the pack's own files (a snapshot's links name the same blobs) are its input
    [ ! -e "$out" ] || [ ! "$out" -ef "$f" ] || die_usage "-o $out: is the pack's own $(basename -- "$f") (name another file)"
  done
  if [ ! -e "$out" ] || [ -f "$out" ]; then
    out_tmp=$(mktemp "$(dirname -- "$out")/.$(basename -- "$out").XXXXXX" 2>/dev/null) ||
      { echo "$me: -o $out: cannot create a file in $(dirname -- "$out")" >&2; exit 1; }
  fi
fi
# (an unusable TMPDIR left $work empty: the gates wrote their files into /)
work=$(mktemp -d "${TMPDIR:-/tmp}/ogk-probe.XXXXXX") && [ -d "$work" ] ||
  { work=""; echo "$me: cannot create a work directory in ${TMPDIR:-/tmp} (set TMPDIR to a writable directory)" >&2; exit 4; }
model=$work/model.q4nx

# gate NAME CMD...: runs CMD (stdout to $work/NAME.out, stderr to $work/NAME.err), prints the gate's
# JSON line (a line that cannot be written, a full disk or a closed pipe, exits 1: the report is the
# probe's output); on failure names the gate and exits with CMD's code
gate() {
  local name=$1 t0 rc detail
  shift
  t0=$(date +%s.%N)
  "$@" >"$work/$name.out" 2>"$work/$name.err"
  rc=$?
  detail=$(tail -n 3 "$work/$name.err" | tr '\n' ' ' | sed 's/ *$//')
  jq -nc --arg g "$name" --argjson rc "$rc" --arg d "$detail" \
    --argjson s "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f", b - a }')" \
    '{gate: $g, ok: ($rc == 0), exit: $rc, seconds: $s, detail: (if $d == "" then null else $d end)}' ||
    { echo "$me: standard output: write failed (the '$name' gate's line); stopping" >&2; exit 1; }
  if [ "$rc" -ne 0 ]; then
    echo "$me: gate '$name' failed (exit $rc): ${detail:-no message}" >&2
    exit "$rc"
  fi
  passed+=("$name")
}

import() { oga-info "$pack" >"$work/info.json" || return; jq -e '.refusals | length == 0' "$work/info.json" >/dev/null || { jq -r '.refusals[] | "refused: \(.)"' "$work/info.json" >&2; return 3; }; }
# oga-extract's code, unless it is 1 (its writes failed: q4nx-pack stopped reading) and q4nx-pack failed
extract() {
  oga-extract "$pack" | q4nx-pack -l "$layout" -o "$model"
  local s=("${PIPESTATUS[@]}")
  [ "${s[0]}" -eq 0 ] || { [ "${s[0]}" -eq 1 ] && [ "${s[1]}" -ne 0 ]; } || return "${s[0]}"
  return "${s[1]}"
}
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

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# serve: the server process starts and answers HTTP (any status: it may still be loading)
serve_start() {
  if ! npu-forward serve --help >/dev/null 2>&1; then
    echo "serve: npu-forward has no serve command" >&2
    return 4
  fi
  [ -n "$port" ] || port=$(free_port) || { echo "no free port found" >&2; return 4; }
  # another server on the port would answer for ours (whose bind fails): refused before starting
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "127.0.0.1:$port is already in use" >&2
    return 4
  fi
  # shellcheck disable=SC2086
  npu-forward serve -m "$model" --port "$port" $threads >"$work/server.out" 2>"$work/server.err" &
  spid=$!
  local t_end=$((SECONDS + start_s)) code
  while [ "$SECONDS" -lt "$t_end" ]; do
    if ! kill -0 "$spid" 2>/dev/null; then
      wait "$spid"; code=$?; spid=""
      tail -n 3 "$work/server.err" >&2
      echo "npu-forward serve exited with $code before answering" >&2
      return 4
    fi
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$port/health") || code=000
    # an answer counts while our server runs (it may have answered just before exiting)
    [ "$code" = 000 ] || ! kill -0 "$spid" 2>/dev/null || { echo "serving on 127.0.0.1:$port (pid $spid, /health $code)" >&2; return 0; }
    sleep 0.2
  done
  echo "npu-forward serve did not answer on 127.0.0.1:$port within $start_s s" >&2
  return 4
}
health() {
  local t_end=$((SECONDS + health_s)) code=000
  while [ "$SECONDS" -lt "$t_end" ]; do
    code=$(curl -s -o "$work/health.json" -w '%{http_code}' --max-time 5 "http://127.0.0.1:$port/health") || code=000
    [ "$code" != 200 ] || { echo "GET /health 200" >&2; return 0; }
    kill -0 "$spid" 2>/dev/null || { echo "the server died (last /health: $code)" >&2; return 5; }
    sleep 0.2
  done
  echo "GET /health did not answer 200 within $health_s s (last: $code)" >&2
  return 5
}
completion() {
  local code
  jq -c '{prompt: .prompt_ids, max_tokens: 8, temperature: 0, ignore_eos: true, return_tokens: true}' "$work/run.json" >"$work/req.json"
  code=$(curl -s -o "$work/completion.json" -w '%{http_code}' --max-time 120 -H 'Content-Type: application/json' \
    --data-binary @"$work/req.json" "http://127.0.0.1:$port/v1/completions") || { echo "POST /v1/completions: no answer" >&2; return 3; }
  [ "$code" = 200 ] || { echo "POST /v1/completions: HTTP $code: $(head -c 200 "$work/completion.json")" >&2; return 3; }
  jq -e --slurpfile r "$work/run.json" '.choices[0].tokens == $r[0].ids' "$work/completion.json" >/dev/null || {
    echo "the completion's ids $(jq -c '.choices[0].tokens' "$work/completion.json") are not npu-forward run's $(jq -c .ids "$work/run.json")" >&2
    return 1
  }
  jq -c '{text: .choices[0].text, tokens: .choices[0].tokens}' "$work/completion.json"
}

gate import import
gate extract extract
gate verify verify
gate run run
[ "$oracle" = 0 ] || gate oracle oracle_check
if [ "$serve" = 1 ]; then
  gate serve serve_start
  gate health health
  gate completion completion
fi
if [ -n "$out_tmp" ]; then
  { cat "$model" >"$out_tmp" && chmod 644 "$out_tmp" && mv -f -- "$out_tmp" "$out"; } ||
    { echo "$me: -o $out: writing the container failed" >&2; exit 1; }
  out_tmp=""
elif [ -n "$out" ]; then
  cat "$model" >"$out" || { echo "$me: -o $out: writing the container failed" >&2; exit 1; }
fi
echo "$me: all gates passed: ${passed[*]}" >&2
exit 0
