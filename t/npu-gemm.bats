#!/usr/bin/env bats
# npu-gemm: the CPU GEMM against the scalar reference (npu-gemm checks and exits 1 outside the bound),
# against onnxruntime's MatMulNBits on the same weights (an independent implementation), kernel paths,
# device listing and the NPU refusals.
load helpers

setup() { tmp=$(mktemp -d); }
teardown() { rm -rf "$tmp"; }

@test "--help prints usage and exits 0; the man page exists" {
  run npu-gemm --help
  [ "$status" -eq 0 ]
  [[ "$output" == *"--shape N,K"* ]]
  [ -f "$TOP/man/man1/npu-gemm.1" ]
  run npu-gemm --version
  [ "$status" -eq 0 ] && [[ "$output" == "npu-gemm "* ]] || false
}

@test "usage errors exit 2 with a named error" {
  run npu-gemm
  [ "$status" -eq 2 ]
  # a --dump-source DIR that cannot be made is an output failure (1), named
  run npu-gemm --shape 64,64 --reps 1 --dump-source "$BATS_TEST_TMPDIR/none/w"
  [ "$status" -eq 1 ] && [[ "$output" == *"--dump-source $BATS_TEST_TMPDIR/none/w: No such file or directory"* ]] || false
  run npu-gemm --shape 10
  [ "$status" -eq 2 ]
  [[ "$output" == *"npu-gemm: --shape 10: expected N,K"* ]]
  run npu-gemm --shape 64,64 --block 24
  [ "$status" -eq 2 ]
  # an option of another mode is named, not taken and ignored (held-out audit)
  for bad in "--shape 64,64 --tensor lm_head" "--shape 64,64 --bw-mb 8" "--shape 64,64 --probe-mb 8" \
    "--shape 64,64 --no-mmap" "--shape 64,64 --shapes 64x64" "--list-devices --block 64" \
    "--model-pass --shapes 64x64 --mmap"; do
    run npu-gemm $bad
    [ "$status" -eq 2 ] && [[ "$output" == *"goes with"* || "$output" == *"say how a container"* || "$output" == *"describe synthetic"* ]] || false
  done
  # --bits: 4 or 8; 8-bit weights have one layout (source order) and no 16-bit activations
  for bad in "--bits 6" "--bits 8 --layout b8" "--bits 8 --mode i16" "--bits x"; do
    run npu-gemm --shape 64,64 $bad
    [ "$status" -eq 2 ] && [[ "$output" == *"--bits"* || "$output" == *"goes with 4-bit weights"* ]] || { echo "$bad: $output"; false; }
  done
  run npu-gemm --shape 64,64 --mode f16
  [ "$status" -eq 2 ]
  [[ "$output" == *"--mode: 'f16' is not f32, i8 or i16"* ]]
  run npu-gemm --shape 64,64 --device gpu
  [ "$status" -eq 2 ]
  # --model-pass --shapes: sizes beyond 2^24 (they wrapped to 32 bits) and an empty list
  for s in 9223372036854775807x2 2x9223372036854775807 4294967296x32 '' ,; do
    run npu-gemm --model-pass --shapes "$s"
    [ "$status" -eq 2 ] && [[ "$output" == *"--shapes"* ]] || false
  done
  OGAKIT_KERNEL=sse9 run npu-gemm --shape 64,64
  [ "$status" -eq 4 ] # the refusal every program gives (t/isa.bats)
  [[ "$output" == *"OGAKIT_KERNEL=sse9: unknown kernel path"* ]]
}

@test "--shape: JSON with timings, checked within the reference bound" {
  run npu-gemm --shape 100,200 --rows 7 --reps 3 --check-rows 0
  [ "$status" -eq 0 ]
  run npu-gemm --shape 100,200 --rows 7 --reps 3 --check-rows 1000
  [ "$status" -eq 0 ]
  echo "$output" | jq -e '.M == 7 and .N == 100 and .K == 200 and .checked_rows == 100 and .within_bound
                          and .ms > 0 and .GBps > 0 and .GFLOPs > 0 and .max_rel_err < 1e-5'
}

# lacks K: true when this CPU lacks kernel path K's instructions (npu-gemm's refusal, exit 4): its runs are
# skipped as a whole rather than each refused in turn
lacks() {
  run npu-gemm --kernel "$1" --shape 37,300 --rows 1 --reps 1
  [ "$status" -eq 4 ] && [[ "$output" == *"lacks the instructions"* ]]
}

# all_ok FILE JQ: FILE holds, per run, a label (a JSON string) and then npu-gemm's JSON report; true when JQ
# holds for every report (one jq over them all, not one per run), else names the runs where it does not
all_ok() {
  local bad
  bad=$(jq -n -c "[inputs] as \$a | [range(0; \$a | length; 2) | select(\$a[. + 1] | $2 | not) | \$a[.]]" "$1") || return 1
  [ "$bad" = "[]" ] || { echo "failed: $bad"; return 1; }
}

@test "every kernel path, layout, mode and scale type agrees with the reference on odd shapes" {
  local k l cfg m M n=0
  for k in ref avx2 avx512 amx; do
    ! lacks $k || { echo "# $k: not on this CPU (skipped)" >&3; continue; }
    for l in b8 rm; do
      for cfg in "--block 32" "--block 128 --asym --scale-dtype f16" "--block 64 --asym --scale-dtype bf16"; do
        for m in f32 i8 i16; do
          for M in 1 16 130; do
            run npu-gemm --kernel $k --layout $l $cfg --mode $m --shape 37,300 --rows $M --reps 1 --check-rows 37
            if [ "$status" -eq 4 ] && [[ "$output" == *"lacks the instructions"* ]]; then continue; fi
            [ "$status" -eq 0 ] || { echo "$k $l $cfg $m M=$M: $output"; false; }
            printf '"%s"\n%s\n' "$k $l $cfg $m M=$M" "$output" >>"$tmp/runs"
            n=$((n + 1))
          done
        done
      done
    done
  done
  [ "$n" -ge 54 ] # ref's at least
  all_ok "$tmp/runs" '.within_bound and .checked_rows == 37'
}

@test "--bits 8: every kernel path and mode agrees with the reference on odd shapes" {
  local k cfg m M n=0
  for k in ref avx2 avx512 amx; do
    ! lacks $k || { echo "# $k: not on this CPU (skipped)" >&3; continue; }
    for cfg in "--block 32" "--block 128 --asym --scale-dtype f16" "--block 16 --asym --scale-dtype bf16"; do
      for m in f32 i8; do
        for M in 1 16 130; do
          run npu-gemm --bits 8 --kernel $k $cfg --mode $m --shape 37,300 --rows $M --reps 1 --check-rows 37
          if [ "$status" -eq 4 ] && [[ "$output" == *"lacks the instructions"* ]]; then continue; fi
          [ "$status" -eq 0 ] || { echo "$k $cfg $m M=$M: $output"; false; }
          printf '"%s"\n%s\n' "$k $cfg $m M=$M" "$output" >>"$tmp/runs"
          n=$((n + 1))
        done
      done
    done
  done
  [ "$n" -ge 18 ] # ref's at least
  all_ok "$tmp/runs" '.bits == 8 and .layout == "plain" and .within_bound and .checked_rows == 37'
  # the weights' bytes: codes, scales and zero points one a byte each (37 x 3 groups of 128)
  run npu-gemm --bits 8 --shape 37,300 --block 128 --asym --reps 1
  echo "$output" | jq -e '.weight_bytes == 37 * 384 + 37 * 3 * 4 + 37 * 3'
}

@test "same weights in onnxruntime MatMulNBits: f32 mode = accuracy_level 0, i8 mode = accuracy_level 4" {
  for cfg in "--block 32" "--block 128 --asym --scale-dtype f16" "--block 64 --asym --scale-dtype bf16 --layout rm" \
    "--bits 8 --block 32" "--bits 8 --block 128 --asym --scale-dtype f16" "--bits 8 --block 64 --asym --scale-dtype bf16"; do
    npu-gemm --shape 77,200 --rows 7 $cfg --dump-source "$tmp" --reps 1 >/dev/null
    /usr/bin/python3 "$TOP/bench/mk-matmulnbits.py" "$tmp" "$tmp/a0.onnx" 0
    /usr/bin/python3 "$TOP/bench/mk-matmulnbits.py" "$tmp" "$tmp/a4.onnx" 4
    # f32: both sum the same fp32 products in different orders (|err| ~ K * 2^-24 of the row's scale)
    run node "$TOP/t/npu-gemm-ort.js" "$tmp" "$tmp/a0.onnx"
    [ "$status" -eq 0 ]
    echo "$cfg f32: $output"
    echo "$output" | jq -e '.rel_err < 1e-5'
    # i8: both quantise activations per block to int8 with scale max|x|/127
    npu-gemm --shape 77,200 --rows 7 $cfg --dump-source "$tmp" --reps 1 --mode i8 >/dev/null
    run node "$TOP/t/npu-gemm-ort.js" "$tmp" "$tmp/a4.onnx"
    [ "$status" -eq 0 ]
    echo "$cfg i8: $output"
    echo "$output" | jq -e '.rel_err < 1e-5'
  done
}

@test "--model-pass over synthetic shapes" {
  run npu-gemm --model-pass --shapes "64x96*3,32x160" --reps 2 --check-rows 8
  [ "$status" -eq 0 ]
  echo "$output" | jq -e '.tensors == 4 and .within_bound and .weight_bytes > 0'
  run npu-gemm --model-pass --shapes "64x"
  [ "$status" -eq 2 ]
}

@test "--model-pass --probe-mb: a probe buffer of every size (1 MB came from malloc unaligned and was refused as out of memory)" {
  local mb
  for mb in 1 3 8; do
    run npu-gemm --model-pass --shapes "64x96*3" --reps 2 --check-rows 0 --probe-mb "$mb"
    [ "$status" -eq 0 ] || { echo "--probe-mb $mb: $output"; return 1; }
    echo "$output" | jq -e --argjson mb "$mb" '.probe_MB == $mb and .dram_read_GBps > 0'
  done
}

@test "--list-devices: the CPU with its measured read bandwidth, no NPU here" {
  OGAKIT_ACCEL_DIR="$tmp" run npu-gemm --list-devices --bw-mb 64 -t 1
  [ "$status" -eq 0 ]
  echo "$output" | jq -e '.devices[0].type == "cpu" and .devices[0].dram_read_GBps > 0 and .devices[0].threads == 1
                          and ([.devices[] | select(.type == "npu")] | length) == 0'
}

@test "--device npu without an amdxdna device: exit 4, says where it looked" {
  OGAKIT_ACCEL_DIR="$tmp" run npu-gemm --device npu --shape 64,64
  [ "$status" -eq 4 ]
  [ "$output" = "npu-gemm: no amdxdna device (looked at $tmp/*)" ]
  echo "not a device" >"$tmp/accel0"
  OGAKIT_ACCEL_DIR="$tmp" run npu-gemm --device npu --shape 64,64
  [ "$status" -eq 4 ]
  [ "$output" = "npu-gemm: no amdxdna device (looked at $tmp/*)" ]
  if [ ! -e /dev/accel ]; then
    run npu-gemm --device npu --shape 64,64
    [ "$status" -eq 4 ]
    [ "$output" = "npu-gemm: no amdxdna device (looked at /dev/accel/*)" ]
  fi
}

@test "-m: a missing or malformed container is refused with exit 3" {
  run npu-gemm -m "$tmp/none.q4nx" --tensor lm_head
  [ "$status" -eq 3 ]
  echo "junk" >"$tmp/bad.q4nx"
  run npu-gemm -m "$tmp/bad.q4nx" --tensor lm_head
  [ "$status" -eq 3 ]
  run npu-gemm -m "$tmp/bad.q4nx"
  [ "$status" -eq 2 ]
}

@test "-m --tensor and --sweep on a packed fixture" {
  command -v oga-extract >/dev/null && command -v q4nx-pack >/dev/null || skip "oga-extract/q4nx-pack not built"
  pack=$(fixture qwen2 amd untied tiny)
  oga-extract "$pack" | q4nx-pack -l b8 -o "$tmp/m.q4nx"
  run npu-gemm -m "$tmp/m.q4nx" --tensor layers.0.attn.q --rows 3 --reps 2
  [ "$status" -eq 0 ]
  echo "$output" | jq -e '.M == 3 and .within_bound and .role == "layers.0.attn.q"'
  oga-extract "$pack" | q4nx-pack -l rm -o "$tmp/rm.q4nx"
  for m in f32 i8; do
    run npu-gemm -m "$tmp/rm.q4nx" --tensor lm_head --rows 5 --reps 1 --mode $m --check-rows 100
    [ "$status" -eq 0 ]
    echo "$output" | jq -e '.layout == "rm" and .within_bound and .checked_rows == 100'
  done
  run npu-gemm --sweep -m "$tmp/m.q4nx" --reps 2 --check-rows 4
  [ "$status" -eq 0 ]
  echo "$output" | jq -e '(.launches | length) >= 12 and (.fit.floor_ms | type) == "number"
                          and all(.launches[]; .within_bound and (.residual_ms | type) == "number")'
}

@test "8-bit tensors of a pack (int8 lm_head, k_quant_mixed layers): -m --tensor, --sweep and --model-pass take them" {
  command -v oga-extract >/dev/null && command -v q4nx-pack >/dev/null || skip "oga-extract/q4nx-pack not built"
  /usr/bin/python3 "$TOP/tools/mkpack.py" --family qwen2 --style cpu --tie untied --q8 mixed --out "$tmp/p" >/dev/null
  oga-extract "$tmp/p" | q4nx-pack -l b8 -o "$tmp/m.q4nx"
  for m in f32 i8; do
    run npu-gemm -m "$tmp/m.q4nx" --tensor lm_head --rows 5 --reps 1 --mode $m --check-rows 100
    [ "$status" -eq 0 ] || { echo "$m: $output"; false; }
    echo "$output" | jq -e '.bits == 8 and .layout == "plain" and .within_bound and .checked_rows == 100'
  done
  # no 16-bit activations for an 8-bit tensor: refused by name (3), and left out of i16 sweeps and passes
  run npu-gemm -m "$tmp/m.q4nx" --tensor lm_head --mode i16 --reps 1
  [ "$status" -eq 3 ] && [[ "$output" == *"q8 has the f32 and i8 modes"* ]] || false
  run npu-gemm --sweep -m "$tmp/m.q4nx" --reps 1 --check-rows 4 --mode i8
  [ "$status" -eq 0 ]
  echo "$output" | jq -e 'any(.launches[]; .bits == 8) and any(.launches[]; .bits == 4)
                          and all(.launches[]; .within_bound)'
  run npu-gemm --sweep -m "$tmp/m.q4nx" --reps 1 --check-rows 4 --mode i16
  [ "$status" -eq 0 ]
  echo "$output" | jq -e 'all(.launches[]; .bits == 4)'
  # --model-pass: every multiplied tensor, the 8-bit ones included (their bytes one code a byte)
  run npu-gemm --model-pass -m "$tmp/m.q4nx" --reps 1 --check-rows 4 --mode i8
  [ "$status" -eq 0 ]
  all=$(echo "$output" | jq .tensors)
  run npu-gemm --model-pass -m "$tmp/m.q4nx" --reps 1 --check-rows 4 --mode i16
  [ "$status" -eq 0 ]
  four=$(echo "$output" | jq .tensors)
  [ "$all" -gt "$four" ]
}
