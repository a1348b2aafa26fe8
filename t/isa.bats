#!/usr/bin/env bats
# OGAKIT_KERNEL, the one switch of lib/kern's ISA table: every program that runs kernels (npu-forward,
# npu-gemm, q4nx-verify, spec-replay) refuses an unknown or unsupported value the same way (exit 4,
# the same message after the program's name), and runs with every row the CPU supports.
load helpers

setup_file() {
  export W=$(mktemp -d "${BATS_FILE_TMPDIR:-/tmp}/ogk-isa.XXXXXX")
  export PACK=$(fixture qwen2 cpu tied tiny 0)
  oga-extract "$PACK" | q4nx-pack -l b8 -o "$W/m.q4nx"
}
teardown_file() { rm -rf "$W"; }

# run_all VALUE: each program once with OGAKIT_KERNEL=VALUE; "prog status message" lines in $W/out
run_all() {
  : >"$W/out"
  local p
  for p in npu-forward npu-gemm q4nx-verify spec-replay; do
    case $p in
      npu-forward) OGAKIT_KERNEL=$1 run npu-forward run -m "$W/m.q4nx" -p hi -n 1 ;;
      npu-gemm) OGAKIT_KERNEL=$1 run npu-gemm --shape 64,64 --reps 1 ;;
      q4nx-verify) OGAKIT_KERNEL=$1 run q4nx-verify "$W/m.q4nx" --pack "$PACK" --all ;;
      spec-replay) OGAKIT_KERNEL=$1 run spec-replay -m "$W/m.q4nx" -d "$W/m.q4nx" -p hi -n 2 ;;
    esac
    # the diagnostic line, without the program's name
    echo "$p $status $(echo "$output" | grep -m1 "^$p: " | sed "s/^$p: //")" >>"$W/out"
  done
}

@test "OGAKIT_KERNEL=bogus: every program refuses it with exit 4 and the same message" {
  run_all bogus
  cat "$W/out"
  [ "$(wc -l <"$W/out")" -eq 4 ]
  [ "$(cut -d' ' -f2 "$W/out" | sort -u)" = 4 ]
  [ "$(cut -d' ' -f3- "$W/out" | sort -u)" = "OGAKIT_KERNEL=bogus: unknown kernel path (ref, avx2, avx512, amx)" ]
}

@test "OGAKIT_KERNEL naming a row this CPU lacks: refused the same way, or skipped when it has them all" {
  local k missing=
  for k in avx2 avx512 amx; do
    OGAKIT_KERNEL=$k npu-gemm --list-devices --bw-mb 1 >/dev/null 2>&1 || missing=$k
  done
  [ -n "$missing" ] || skip "this CPU runs every row of the table (ref, avx2, avx512, amx)"
  run_all "$missing"
  cat "$W/out"
  [ "$(cut -d' ' -f2 "$W/out" | sort -u)" = 4 ]
  [ "$(cut -d' ' -f3- "$W/out" | sort -u)" = "OGAKIT_KERNEL=$missing: this CPU lacks the instructions it needs" ]
}

@test "OGAKIT_KERNEL=ref|avx2|avx512|amx: every program runs with each row this CPU supports, and says which" {
  local k
  for k in ref avx2 avx512 amx; do
    if ! OGAKIT_KERNEL=$k npu-gemm --list-devices --bw-mb 1 >"$W/dev.json" 2>/dev/null; then
      echo "# row $k: not supported on this CPU" >&3
      continue
    fi
    [ "$(jq -r '.devices[0].kernel' "$W/dev.json")" = "$k" ]
    run_all "$k"
    cat "$W/out"
    [ "$(cut -d' ' -f2 "$W/out" | sort -u)" = 0 ]
    OGAKIT_KERNEL=$k npu-gemm --shape 64,64 --reps 1 | jq -e --arg k "$k" '.kernel == $k and .within_bound'
  done
}

@test "npu-gemm --kernel: overrides the chosen row; an empty OGAKIT_KERNEL means the default" {
  run npu-gemm --kernel ref --shape 64,64 --reps 1
  [ "$status" -eq 0 ]
  [ "$(echo "$output" | jq -r .kernel)" = ref ]
  run npu-gemm --kernel sse9 --shape 64,64
  [ "$status" -eq 2 ]
  OGAKIT_KERNEL= npu-gemm --shape 64,64 --reps 1 | jq -e '.kernel | IN("ref", "avx2", "avx512", "amx")'
}

@test "npu-gemm --list-devices: the CPU's name and features come from the ISA table" {
  run npu-gemm --list-devices --bw-mb 1
  [ "$status" -eq 0 ]
  echo "$output" | jq -e '.devices[0].type == "cpu" and (.devices[0].name | length > 0)'
  # every feature listed is one /proc/cpuinfo's flags line names (avx512vnni is avx512_vnni there)
  local f flags
  flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
  for f in $(echo "$output" | jq -r '.devices[0].features[]'); do
    case $f in
      avx512vnni) f=avx512_vnni ;; avx512bf16) f=avx512_bf16 ;;
    esac
    [[ "$flags" == *" $f "* ]]
  done
}
