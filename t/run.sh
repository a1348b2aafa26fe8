#!/usr/bin/env bash
# Runs the C unit tests ($OGAKIT_BUILD/t/*) and the bats files (t/*.bats, or the ones named),
# counts TAP results and ends with one line: "N passed, N failed". Exit 1 if anything failed.
# OGAKIT_TEST_JOBS=N (make check JOBS=N) runs N test files at a time; their outputs are still printed
# whole and in order, each followed by its duration and when it started and ended.
# OGAKIT_SAN_BUILD=DIR (make check SAN=both) runs the same files a second time against the sanitizer build
# in DIR (OGAKIT_SAN=1), in the same queue after the plain ones: the sanitizer files fill in beside the
# plain run's last files rather than waiting for them (two runs one after the other each end with one
# CPU idle). Each run's count is printed after its files, then the sum as the last line.
# OGAKIT_SAN_PREP=COMMAND (with OGAKIT_SAN_BUILD) makes the sanitizer build: it runs first, as one job of the
# queue beside the plain files (in place of one of them), and the sanitizer files start after it; if it
# fails, that is one failure and they do not run.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
build=${OGAKIT_BUILD:-$top/build}
export OGAKIT_BUILD=$build
san_build=${OGAKIT_SAN_BUILD:-} prep=${OGAKIT_SAN_PREP:-}
jobs=${OGAKIT_TEST_JOBS:-1}
case "$jobs" in ''|*[!0-9]*|0) echo "run.sh: OGAKIT_TEST_JOBS must be a positive number, not '$jobs'" >&2; exit 2 ;; esac
if [ -n "$san_build" ] && [ -z "$prep" ] && [ ! -d "$san_build/t" ]; then
  echo "run.sh: OGAKIT_SAN_BUILD: no unit tests under '$san_build/t' (build it with make SAN=1)" >&2
  exit 2
fi
out=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$out"' EXIT

# list_targets BUILD: the files to run against BUILD, one per line
list_targets() {
  local b=$1 f u
  if [ "${#named[@]}" -gt 0 ]; then
    printf '%s\n' "${named[@]}"
    return
  fi
  # the longest files first (longest-processing-time order, from the CI logs' per-file times), so that with
  # JOBS > 1 the others fill in beside them and the jobs end together: in alphabetical order tok.bats
  # (3 min) started last and ran on alone. Files not named here run after these, in name order.
  local long=(forward.bats gguf.bats serve.bats tok.bats oga-info.bats hardening.bats q4nx.bats spec-replay.bats
              fixtures.bats oga-extract.bats npu-gemm.bats probe.bats chat-limits.bats jsonpattern.bats)
  local longunit=(kern_paths tok_encode_max kern_i16 serve_jsongate model_sample tok_jinja tok_robust kern_attend)
  for f in "${long[@]}"; do [ -e "$top/t/$f" ] && echo "$top/t/$f"; done
  for u in "${longunit[@]}"; do [ -x "$b/t/$u" ] && echo "$b/t/$u"; done
  for u in "$b"/t/*; do
    [ -x "$u" ] && [[ " ${longunit[*]} " != *" $(basename "$u") "* ]] && echo "$u"
  done
  for f in "$top"/t/*.bats; do
    [ -e "$f" ] && [[ " ${long[*]} " != *" $(basename "$f") "* ]] && echo "$f"
  done
}
named=("$@")
# targets[i]: a file; tsan[i]: 1 if it runs against the sanitizer build
targets=() tsan=()
while IFS= read -r f; do targets+=("$f") tsan+=(0); done < <(list_targets "$build")
nplain=${#targets[@]}
if [ -n "$san_build" ]; then
  for ((i = 0; i < nplain; i++)); do
    # the same files; a unit test runs from the sanitizer build's t/ (which may not be built yet)
    f=${targets[$i]}
    [[ "$f" == "$build"/t/* ]] && f=$san_build/t/${f##*/}
    targets+=("$f") tsan+=(1)
  done
fi

# the sanitizer build as a job of the queue: its output in $out/prep.log, then $out/prep (its lines for the
# report: the duration, or a failure with the log's end)
run_prep() {
  local t0=$SECONDS rc
  (cd "$top" && unset MAKEFLAGS MFLAGS MAKELEVEL && eval "$prep") >"$out/prep.log" 2>&1
  rc=$?
  {
    echo "# the sanitizer build ($prep): $((SECONDS - t0)) s (from $t0 s to $SECONDS s)"
    if [ "$rc" -ne 0 ]; then
      tail -n 30 "$out/prep.log"
      echo "not ok - the sanitizer build ($prep) failed (exit $rc); the sanitizer files did not run"
    fi
  } >"$out/prep.part"
  mv "$out/prep.part" "$out/prep"
}

# one test file's TAP (plus a "not ok" line when a unit test died without saying why) into $2
run_one() {
  local t=$1 o=$2 t0=$SECONDS rc
  if [ "$3" = 1 ]; then export OGAKIT_BUILD=$san_build OGAKIT_SAN=1; elif [ -n "$san_build" ]; then export OGAKIT_SAN=0; fi
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
    echo "# $(basename "$t"): $((SECONDS - t0)) s (from $t0 s to $SECONDS s)"
  } >"$o.part" 2>&1
  mv "$o.part" "$o"
}

# start the files, at most $jobs at a time, in the background; print each one's output in order
(
  [ -z "$san_build" ] || [ -z "$prep" ] || run_prep &
  for i in "${!targets[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
    if [ "${tsan[$i]}" = 1 ] && [ -n "$prep" ]; then
      while [ ! -e "$out/prep" ]; do sleep 0.5; done
      if grep -q '^not ok' "$out/prep"; then # nothing to run against
        : >"$out/$i"
        continue
      fi
    fi
    run_one "${targets[$i]}" "$out/$i" "${tsan[$i]}" &
  done
  wait
) &
# show FILE: print a file's lines and count its results; summary PREFIX P F S: a count line
pass=0 fail=0 skip=0
show() {
  local line
  while IFS= read -r line; do
    printf '%s\n' "$line"
    case "$line" in
      "not ok "*) fail=$((fail + 1)) ;;
      "ok "*"# skip"*|"ok "*"# SKIP"*) skip=$((skip + 1)) ;;
      "ok "*) pass=$((pass + 1)) ;;
    esac
  done <"$1"
}
summary() {
  if [ "$4" -gt 0 ]; then echo "$1$2 passed, $3 failed, $4 skipped"; else echo "$1$2 passed, $3 failed"; fi
}
for i in "${!targets[@]}"; do
  if [ -n "$san_build" ] && [ "$i" = "$nplain" ]; then # the plain run's count; the sanitizer run counts on
    summary "plain: " "$pass" "$fail" "$skip"
    p0=$pass f0=$fail s0=$skip
    echo "# SAN=1 ($san_build)"
    if [ -n "$prep" ]; then
      while [ ! -e "$out/prep" ]; do sleep 0.2; done
      show "$out/prep"
    fi
  fi
  while [ ! -e "$out/$i" ]; do sleep 0.2; done
  show "$out/$i"
done
wait
[ -z "$san_build" ] || summary "SAN=1: " $((pass - p0)) $((fail - f0)) $((skip - s0))
summary "" "$pass" "$fail" "$skip"
[ "$fail" -eq 0 ]
