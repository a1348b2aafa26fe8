#!/usr/bin/env bash
# Runs the C unit tests ($OGAKIT_BUILD/t/*) and the bats files (t/*.bats, or the ones named),
# counts TAP results and ends with one line: "N passed, N failed". Exit 1 if anything failed.
# OGAKIT_TEST_JOBS=N (make check JOBS=N) runs N test files at a time; their outputs are still printed
# whole and in order, each followed by its duration.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
build=${OGAKIT_BUILD:-$top/build}
export OGAKIT_BUILD=$build
jobs=${OGAKIT_TEST_JOBS:-1}
case "$jobs" in ''|*[!0-9]*|0) echo "run.sh: OGAKIT_TEST_JOBS must be a positive number, not '$jobs'" >&2; exit 2 ;; esac
out=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$out"' EXIT

if [ "$#" -gt 0 ]; then
  targets=("$@")
else
  # the longest files first (longest-processing-time order, from the CI logs' per-file times), so that with
  # JOBS > 1 the others fill in beside them and the jobs end together: in alphabetical order tok.bats
  # (3 min) started last and ran on alone. Files not named here run after these, in name order.
  long=(forward.bats gguf.bats serve.bats tok.bats oga-info.bats hardening.bats q4nx.bats spec-replay.bats
        fixtures.bats oga-extract.bats npu-gemm.bats probe.bats chat-limits.bats jsonpattern.bats)
  longunit=(kern_paths tok_encode_max kern_i16 serve_jsongate model_sample tok_jinja tok_robust kern_attend)
  targets=()
  for b in "${long[@]}"; do [ -e "$top/t/$b" ] && targets+=("$top/t/$b"); done
  for u in "${longunit[@]}"; do [ -x "$build/t/$u" ] && targets+=("$build/t/$u"); done
  for u in "$build"/t/*; do
    [ -x "$u" ] && [[ " ${longunit[*]} " != *" $(basename "$u") "* ]] && targets+=("$u")
  done
  for b in "$top"/t/*.bats; do
    [ -e "$b" ] && [[ " ${long[*]} " != *" $(basename "$b") "* ]] && targets+=("$b")
  done
fi

# one test file's TAP (plus a "not ok" line when a unit test died without saying why) into $2
run_one() {
  local t=$1 o=$2 t0=$SECONDS rc
  {
    echo "# $(basename "$t")"
    case "$t" in
      *.bats) bats --tap --timing "$t" 2>&1 ;;
      *)
        "$t" >"$o.unit" 2>&1
        rc=$?
        cat "$o.unit"
        if [ "$rc" -ne 0 ] && ! grep -qE '^(not )?ok ' "$o.unit"; then
          echo "not ok - $(basename "$t") exited $rc before reporting"
        elif [ "$rc" -gt 1 ]; then
          echo "not ok - $(basename "$t") exited $rc (crash?)"
        fi
        rm -f "$o.unit" ;;
    esac
    echo "# $(basename "$t"): $((SECONDS - t0)) s"
  } >"$o.part" 2>&1
  mv "$o.part" "$o"
}

# start the files, at most $jobs at a time, in the background; print each one's output in order
(
  for i in "${!targets[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
    run_one "${targets[$i]}" "$out/$i" &
  done
  wait
) &
pass=0 fail=0 skip=0
for i in "${!targets[@]}"; do
  while [ ! -e "$out/$i" ]; do sleep 0.2; done
  while IFS= read -r line; do
    printf '%s\n' "$line"
    case "$line" in
      "not ok "*) fail=$((fail + 1)) ;;
      "ok "*"# skip"*|"ok "*"# SKIP"*) skip=$((skip + 1)) ;;
      "ok "*) pass=$((pass + 1)) ;;
    esac
  done <"$out/$i"
done
wait
if [ "$skip" -gt 0 ]; then echo "$pass passed, $fail failed, $skip skipped"; else echo "$pass passed, $fail failed"; fi
[ "$fail" -eq 0 ]
