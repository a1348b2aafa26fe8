#!/usr/bin/env bats
# fuzz/regress/<target>/ replayed through each fuzz target built without libFuzzer (t/fuzz-replay.c;
# under SAN=1 with ASan + UBSan, where most of these inputs once crashed): an input that found a bug
# must run clean now. fuzz/README lists each input's bug and its own regression test.
load helpers
bats_require_minimum_version 1.5.0

setup() {
  export TMPDIR=$BATS_TEST_TMPDIR   # the pack targets make their scratch pack directory here
  export OGAKIT_FUZZ_PACK
  OGAKIT_FUZZ_PACK=$(fixture qwen2 cpu tied tiny)
}

@test "fuzz-regress: every target has a replay binary, and every fuzz/regress directory a target" {
  local f d
  for f in "$TOP"/fuzz/*.c; do [ -x "$OGAKIT_BUILD/fuzz-replay/$(basename "$f" .c)" ]; done
  for d in "$TOP"/fuzz/regress/*/; do [ -e "$TOP/fuzz/$(basename "$d").c" ]; done
}

@test "fuzz-regress: the inputs of fixed bugs run clean through their targets" {
  local d t n=0
  for d in "$TOP"/fuzz/regress/*/; do
    t=$(basename "$d")
    run timeout 300 "$OGAKIT_BUILD/fuzz-replay/$t" "$d"
    echo "$t: $output" | tail -3
    [ "$status" -eq 0 ]
    [[ "$output" == *" inputs" ]]
    n=$((n + 1))
  done
  [ "$n" -ge 5 ]
}

@test "fuzz-regress: the replay driver refuses what it cannot read (exit 3) and a missing argument (exit 2)" {
  run -3 "$OGAKIT_BUILD/fuzz-replay/ids" "$BATS_TEST_TMPDIR/nonexistent"
  run -2 "$OGAKIT_BUILD/fuzz-replay/ids"
}
