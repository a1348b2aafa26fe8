#!/usr/bin/env bats
# q4nx-pack and q4nx-verify on real fixture packs (oga-extract | q4nx-pack), and every way input can be
# wrong. The reference side of every comparison is q4nx-verify's own MatMulNBits decode of the pack's
# raw initializers; the controls prove that comparison can fail.

load helpers
bats_require_minimum_version 1.5.0

setup() {
  W=$BATS_TEST_TMPDIR
}

# pack_both FAMILY STYLE TIE: rm and b8 containers of that fixture in $W
pack_both() {
  pack=$(fixture "$1" "$2" "$3")
  oga-extract "$pack" > "$W/s.ogax"
  q4nx-pack -l rm -o "$W/rm.q4nx" < "$W/s.ogax"
  q4nx-pack -l b8 -o "$W/b8.q4nx" < "$W/s.ogax"
}

# n_matmulnbits PACK: number of distinct MatMulNBits weights in the pack's graph (independent count)
n_matmulnbits() {
  /usr/bin/python3 -c '
import onnx, sys
m = onnx.load(sys.argv[1] + "/model.onnx", load_external_data=False)
print(len({n.input[1] for n in m.graph.node if n.op_type == "MatMulNBits"}))' "$1"
}

# check_variant FAMILY STYLE TIE: both layouts verify --all against the pack, 100 % exact, controls
# fail as they must, tied check as the model says; rm and b8 dequantise identically.
check_variant() {
  local n l
  pack_both "$@"
  n=$(n_matmulnbits "$pack")
  for l in rm b8; do
    run q4nx-verify "$W/$l.q4nx" --pack "$pack" --all
    [ "$status" -eq 0 ] || { echo "$l: exit $status: $output" | tail -5; return 1; }
    # every check in one jq run; it names the checks that fail
    echo "$output" | jq -e --argjson n "$n" --arg tie "$3" --arg l "$l" '
      [.pack.tensors[] | select(.dtype == "q4")] as $q |
      [
        ["exact 100 %", .summary.exact_groups_pct == 100 and .summary.exact_groups == .summary.groups],
        ["groups", .summary.groups > 0],
        ["controls", .summary.controls == "all failed, as they must"],
        # every quantised tensor ran both controls and both failed
        ["each control", ([$q[] | .controls[] | select(.result != "failed, as it must")] | length) == 0],
        # every initializer read by a MatMulNBits node of the graph is compared (counted from the ONNX file)
        ["q4 tensors", ($q | length) > 0 and ($q | length) == $n],
        ["tied", .summary.tied == (if $tie == "tied" then "ok" else "skipped — no independent reference" end)]
      ] | map(select(.[1] != true) | .[0]) | if length == 0 then true else error($l + ": failed: " + join(", ")) end
    ' >/dev/null
  done
  run q4nx-verify "$W/rm.q4nx" --against "$W/b8.q4nx"
  [ "$status" -eq 0 ]
  [ "$(echo "$output" | jq -r .summary.against_exact_groups_pct)" = 100 ]
  [ "$(echo "$output" | jq -r .against.layout)" = b8 ]
}
# san_variant FAMILY STYLE TIE: check_variant, in the sanitizer run only for the variants that take a path
# of their own (every style x tie of qwen2, qk norms, fp16 phi3, llama's amd q/k/v, gemma, olmo's norm
# biases); the rest repeat those paths for other families, which the plain run checks
san_variant() {
  [ "${OGAKIT_SAN:-0}" != 1 ] || case "$*" in
    "qwen2 "*|"qwen3 cpu untied"|"phi3 amd tied"|"llama amd untied"|"gemma cpu tied"|"olmo "*) ;;
    *) skip "SAN=1: the same paths as qwen2 $2 $3 (the plain build runs every family)" ;;
  esac
  check_variant "$@"
}

@test "qwen2 cpu tied: rm and b8 verify --all 100% exact, controls fail, tied ok, rm == b8" { check_variant qwen2 cpu tied; }
@test "qwen2 cpu untied" { san_variant qwen2 cpu untied; }
@test "qwen2 amd tied" { san_variant qwen2 amd tied; }
@test "qwen2 amd untied" { san_variant qwen2 amd untied; }
@test "llama cpu tied" { san_variant llama cpu tied; }
@test "llama cpu untied" { san_variant llama cpu untied; }
@test "llama amd tied" { san_variant llama amd tied; }
@test "llama amd untied" { san_variant llama amd untied; }
@test "qwen3 cpu tied" { san_variant qwen3 cpu tied; }
@test "qwen3 cpu untied" { san_variant qwen3 cpu untied; }
@test "qwen3 amd tied" { san_variant qwen3 amd tied; }
@test "qwen3 amd untied" { san_variant qwen3 amd untied; }
@test "phi3 cpu tied" { san_variant phi3 cpu tied; }
@test "phi3 cpu untied" { san_variant phi3 cpu untied; }
@test "phi3 amd tied" { san_variant phi3 amd tied; }
@test "phi3 amd untied" { san_variant phi3 amd untied; }
@test "gemma cpu tied" { san_variant gemma cpu tied; }
@test "olmo cpu tied (LayerNorm biases)" { san_variant olmo cpu tied; }
@test "olmo amd untied" { san_variant olmo amd untied; }

@test "container keeps the model description, assets and provenance" {
  pack_both qwen2 cpu tied
  run q4nx-verify "$W/b8.q4nx"
  [ "$status" -eq 0 ]
  [ "$(echo "$output" | jq -r .container.layout)" = b8 ]
  [ "$(echo "$output" | jq -r .container.tensor_checksums)" = "ok ($(echo "$output" | jq .container.tensors) of $(echo "$output" | jq .container.tensors))" ]
  [ "$(echo "$output" | jq .container.assets)" -ge 1 ]
  # the tokenizer files are embedded byte for byte
  /usr/bin/python3 -c '
import sys
c = open(sys.argv[1], "rb").read()
for f in sys.argv[2:]:
    assert open(f, "rb").read() in c, f' "$W/b8.q4nx" "$pack/tokenizer.json" "$pack/tokenizer_config.json"
  # the model description and provenance are in the metadata
  grep -a -c '"family":"qwen2"' "$W/b8.q4nx"
  grep -a -c '"packer":"q4nx-pack ' "$W/b8.q4nx"
}

# 8-bit MatMulNBits (q8): the builder's k_quant_last / k_quant_mixed int8 lm_head and layers, -p int8, a tied
# GatherBlockQuantized of bits 8; stored in source order whatever the layout; the reference is q4nx-verify's own
# 8-bit decode of the pack's bytes, its controls (codes read signed, zero points dropped) must fail
@test "q8 (8-bit MatMulNBits, tied GatherBlockQuantized bits 8): verify --all exact in both layouts, controls fail, tied ok; a changed q8 code fails naming the tensor" {
  local v
  for v in "qwen2 cpu tied all" "llama amd untied mixed" "qwen3 cpu untied lm_head"; do
    set -- $v
    pack=$W/q8-$1-$2-$3-$4
    /usr/bin/python3 "$TOP/tools/mkpack.py" --family $1 --style $2 --tie $3 --q8 $4 --out "$pack" >/dev/null
    oga-extract "$pack" > "$W/s.ogax"
    q4nx-pack -l rm -o "$W/rm.q4nx" < "$W/s.ogax"
    q4nx-pack -l b8 -o "$W/b8.q4nx" < "$W/s.ogax"
    for l in rm b8; do
      run --separate-stderr q4nx-verify "$W/$l.q4nx" --pack "$pack" --all
      [ "$status" -eq 0 ] || { echo "$v $l: exit $status: $stderr"; return 1; }
      echo "$output" > "$W/$l.json"
      jq -e '.summary.exact_groups == .summary.groups and .summary.groups > 0' "$W/$l.json" >/dev/null
      [ "$(jq -r .summary.controls "$W/$l.json")" = "all failed, as they must" ]
      # every q8 tensor ran both of its controls, and both failed
      jq -e '[.pack.tensors[] | select(.dtype=="q8")] | length > 0 and all(.controls.codes_read_signed.result == "failed, as it must" and .controls.zero_points_dropped.result == "failed, as it must")' "$W/$l.json" >/dev/null
      [ "$(jq '[.pack.tensors[] | select(.dtype=="q4" or .dtype=="q8")] | length' "$W/$l.json")" = "$(n_matmulnbits "$pack")" ]
      [ "$3" != tied ] || [ "$(jq -r .summary.tied "$W/$l.json")" = ok ]
      # the k_quant_mixed pack: layer 0's v and down projections are q8, its q projection q4
      [ "$4" != mixed ] || jq -e '[.pack.tensors[] | {(.role): .dtype}] | add | .["layers.0.attn.v"] == "q8" and
        .["layers.0.mlp.down"] == "q8" and .["layers.0.attn.q"] == "q4" and .["lm_head"] == "q8"' "$W/$l.json" >/dev/null
    done
    run q4nx-verify "$W/rm.q4nx" --against "$W/b8.q4nx"
    [ "$status" -eq 0 ]
  done
  "$OGAKIT_BUILD/t/q4nx_pack" --retouch "$W/b8.q4nx" lm_head
  run q4nx-verify "$W/b8.q4nx"
  [ "$status" -eq 0 ]
  run q4nx-verify "$W/b8.q4nx" --pack "$pack" --all
  [ "$status" -eq 1 ]
  [[ "$output" == *"q4nx-verify: tensor "*"(role lm_head): 1 of "*" groups differ from the pack"* ]]
}

@test "a changed code with consistent checksums passes container checks but fails --pack, naming the tensor" {
  pack_both llama amd untied
  "$OGAKIT_BUILD/t/q4nx_pack" --retouch "$W/b8.q4nx" layers.1.mlp.up
  run q4nx-verify "$W/b8.q4nx"
  [ "$status" -eq 0 ]
  run q4nx-verify "$W/b8.q4nx" --pack "$pack" --all
  [ "$status" -eq 1 ]
  [[ "$output" == *"q4nx-verify: tensor "*"(role layers.1.mlp.up): 1 of "*" groups differ from the pack"* ]]
  run q4nx-verify "$W/b8.q4nx" --against "$W/rm.q4nx"
  [ "$status" -eq 1 ]
  [[ "$output" == *"role layers.1.mlp.up"* ]]
}

# a tensor whose every scale is 0 has no value a control could change: it was reported vacuous (exit 1)
# though the container is exact; its controls are now "not applicable", and a changed code elsewhere
# still fails
@test "q4nx-verify --pack: an all-zero tensor's controls are not applicable (exit 0); the comparison still fails a changed code" {
  local d=$W/zero-pack
  /usr/bin/python3 "$TOP/t/pack-mutate.py" "$(fixture qwen2 cpu tied)" "$d" zero-tensor
  oga-extract "$d" | q4nx-pack -o "$W/z.q4nx"
  run --separate-stderr q4nx-verify "$W/z.q4nx" --pack "$d" --all
  [ "$status" -eq 0 ] || { echo "$stderr"; return 1; }
  echo "$output" | jq -e '[.pack.tensors[] | select(.controls.nibbles_swapped.result? // "" | startswith("not applicable"))] | length == 1'
  echo "$output" | jq -e '[.pack.tensors[] | select(.controls.nibbles_swapped.result? == "failed, as it must")] | length >= 8'
  "$OGAKIT_BUILD/t/q4nx_pack" --retouch "$W/z.q4nx" layers.1.mlp.up
  run q4nx-verify "$W/z.q4nx" --pack "$d" --all
  [ "$status" -eq 1 ]
}

@test "q4nx-verify --pack of another model's pack (a smaller vocabulary, tied): exit 1 naming the shapes, not a crash" {
  oga-extract "$(fixture qwen2 cpu tied)" | q4nx-pack -o "$W/q.q4nx"
  for other in "llama cpu tied" "gemma2 cpu tied"; do
    run q4nx-verify "$W/q.q4nx" --pack "$(fixture $other)" --sample 2
    [ "$status" -eq 1 ]
    [[ "$output" == *"tied check: the pack's embedding "*" (block 32), the container's lm_head [151669 x "* ]]
  done
}

@test "q4nx-verify: metadata whose tensor count contradicts the tables (checksum consistent) fails by name" {
  oga-extract "$(fixture qwen2 cpu tied)" | q4nx-pack -o "$W/q.q4nx"
  /usr/bin/python3 "$TOP/t/q4nx-mutate.py" "$W/q.q4nx" "$W/m.q4nx" meta-tensors
  run q4nx-verify "$W/m.q4nx"
  [ "$status" -eq 1 ] && [[ "$output" == *"do not match the container's tables"* ]] || false
  run q4nx-verify "$W/q.q4nx"
  [ "$status" -eq 0 ]
}

@test "q4nx-verify (no --pack): a NaN or infinite scale with consistent checksums fails by name (tensor, row, group), exit 1" {
  # the mutation writes where q4nx(5)'s layouts put row R, group G and prints "NAME R G"; verify must find it there
  for v in "qwen2 cpu tied" "qwen2 amd untied"; do
    pack_both $v
    for l in rm b8; do
      run --separate-stderr /usr/bin/python3 "$TOP/t/q4nx-mutate.py" "$W/$l.q4nx" "$W/inf.q4nx" scale-inf
      [ "$status" -eq 0 ]
      read -r name row grp <<<"$output"
      run --separate-stderr q4nx-verify "$W/inf.q4nx"
      [ "$status" -eq 1 ] || { echo "$v $l: exit $status"; return 1; }
      [[ "$stderr" == *"q4nx-verify: $W/inf.q4nx: tensor $name (role "*"): 1 of "*" scales are not finite; the first: row $row, group $grp "*": inf"* ]]
      [ "$(echo "$output" | jq -r .container.scales)" = "NOT FINITE in 1 tensors" ]
      [ "$(echo "$output" | jq -r .ok)" = false ]
      [ "$(echo "$output" | jq -r .container.tensor_checksums)" = "ok ($(echo "$output" | jq -r .container.tensors) of $(echo "$output" | jq -r .container.tensors))" ]
      run q4nx-verify "$W/$l.q4nx"
      [ "$status" -eq 0 ] && [ "$(echo "$output" | jq -r .container.scales)" = ok ] || false
    done
  done
  # the existing NaN mutation (f32 scales, first scale): cpu packs quantise in blocks of 32
  pack_both qwen2 cpu tied
  /usr/bin/python3 "$TOP/t/q4nx-mutate.py" "$W/b8.q4nx" "$W/nan.q4nx" scale-nan
  run --separate-stderr q4nx-verify "$W/nan.q4nx"
  [ "$status" -eq 1 ] && [[ "$stderr" == *"scales are not finite; the first: row 0, group 0 (columns 0..31): nan"* ]] || false
}

@test "q4nx-pack: a pack whose MatMulNBits scales hold a NaN or an infinity is refused naming the tensor, row and group, exit 3, no file" {
  # oga-info takes the pack (its graph is whole; the values are not read); the packer must not write a
  # container whose weights are not numbers (it passed every checksum and computed NaN logits)
  for m in "qwen2 cpu tied scale-nan nan" "qwen2 amd untied scale-inf inf"; do
    set -- $m
    run --separate-stderr /usr/bin/python3 "$TOP/t/pack-mutate.py" "$(fixture $1 $2 $3)" "$W/p-$4" "$4"
    [ "$status" -eq 0 ]
    read -r name row grp <<<"$output"
    oga-extract "$W/p-$4" > "$W/s.ogax"
    for l in rm b8; do
      run q4nx-pack -l $l -o "$W/out.q4nx" < "$W/s.ogax"
      [ "$status" -eq 3 ] || { echo "$4 $l: exit $status: $output"; return 1; }
      [[ "$output" == "q4nx-pack: tensor $name: the scale of row $row, group $grp "*" is $5, not a finite number"* ]]
      [ ! -e "$W/out.q4nx" ]
    done
  done
}

@test "q4nx-pack: truncated OGAX stream -> named error, exit 3, no output file" {
  pack=$(fixture qwen2 amd untied)
  oga-extract "$pack" > "$W/s.ogax"
  size=$(stat -c %s "$W/s.ogax")
  for cut in 0 16 1000 $((size / 2)) $((size - 1)); do
    head -c "$cut" "$W/s.ogax" > "$W/t.ogax"
    run q4nx-pack -o "$W/out.q4nx" < "$W/t.ogax"
    [ "$status" -eq 3 ]
    [[ "$output" == "q4nx-pack: "*truncated* ]]
    [ ! -e "$W/out.q4nx" ]
    [ -z "$(ls "$W" | grep tmp || true)" ]
  done
}

@test "q4nx-pack: corrupted tensor header (sizes contradict) -> exit 3 naming the tensor, no file" {
  "$OGAKIT_BUILD/t/q4nx_pack" "$W/lie.ogax" 1
  run q4nx-pack -o "$W/out.q4nx" < "$W/lie.ogax"
  [ "$status" -eq 3 ]
  [[ "$output" == "q4nx-pack: tensor l0.qkv_Q4: "* ]]
  [ ! -e "$W/out.q4nx" ]
  # the same on a real stream: shape of the first tensor changed in its JSON header
  pack=$(fixture llama cpu untied)
  oga-extract "$pack" | /usr/bin/python3 -c '
import sys, re
b = sys.stdin.buffer.read()
i = b.index(b"\"type\":\"tensor\"")
j = b.index(b"\"shape\":[", i) + len("\"shape\":[")
b = b[:j] + (b"9" if b[j:j+1] != b"9" else b"8") + b[j+1:]
sys.stdout.buffer.write(b)' > "$W/bad.ogax"
  run q4nx-pack -o "$W/out.q4nx" < "$W/bad.ogax"
  [ "$status" -eq 3 ]
  [[ "$output" == "q4nx-pack: tensor "* ]]
  [ ! -e "$W/out.q4nx" ]
}

@test "q4nx-pack: flipped payload byte -> checksum error names the tensor, exit 3" {
  pack=$(fixture qwen3 cpu untied)
  oga-extract "$pack" > "$W/s.ogax"
  size=$(stat -c %s "$W/s.ogax")
  cp "$W/s.ogax" "$W/f.ogax"
  printf '\x5a' | dd of="$W/f.ogax" bs=1 seek=$((size / 2)) conv=notrunc 2>/dev/null
  cmp -s "$W/s.ogax" "$W/f.ogax" && skip "byte already 0x5a"
  run q4nx-pack -o "$W/out.q4nx" < "$W/f.ogax"
  [ "$status" -eq 3 ]
  [[ "$output" == "q4nx-pack: "*"checksum mismatch"* || "$output" == "q4nx-pack: "*"frame"* ]]
  [ ! -e "$W/out.q4nx" ]
}

@test "q4nx-pack: missing end frame -> exit 3, no file" {
  "$OGAKIT_BUILD/t/q4nx_pack" "$W/noend.ogax" 2
  run q4nx-pack -o "$W/out.q4nx" < "$W/noend.ogax"
  [ "$status" -eq 3 ]
  [[ "$output" == "q4nx-pack: "*"no end frame"* ]]
  [ ! -e "$W/out.q4nx" ]
}

@test "q4nx-pack: usage errors exit 2; --help exits 0" {
  run q4nx-pack --help
  [ "$status" -eq 0 ]
  [[ "$output" == usage:* ]]
  run q4nx-pack -l xy < /dev/null
  [ "$status" -eq 2 ]
  [[ "$output" == "q4nx-pack: -l: unknown layout"* ]]
  run q4nx-pack extra < /dev/null
  [ "$status" -eq 2 ]
}

@test "q4nx-verify: flipped bytes in a container -> checksum error names the tensor, exit 1" {
  pack_both phi3 cpu untied
  # a byte inside the first large tensor: take its offset from the report's order (use the middle of the file)
  size=$(stat -c %s "$W/b8.q4nx")
  cp "$W/b8.q4nx" "$W/f.q4nx"
  off=$((size / 2))
  orig=$(od -An -tx1 -j "$off" -N1 "$W/f.q4nx" | tr -d ' ')
  printf "\\x$(printf %02x $(( 0x$orig ^ 0xff )))" | dd of="$W/f.q4nx" bs=1 seek="$off" conv=notrunc 2>/dev/null
  run q4nx-verify "$W/f.q4nx"
  [ "$status" -eq 1 ]
  [[ "$output" == *"q4nx-verify: $W/f.q4nx: tensor "*"(role "*"): checksum mismatch (stored "* ]]
  [[ "$output" == *'"ok": false'* ]]
}

@test "q4nx-verify: truncated container, wrong magic, future versions -> named error, exit 3" {
  pack_both qwen2 cpu untied
  size=$(stat -c %s "$W/b8.q4nx")
  for cut in 10 100 $((size / 2)) $((size - 1)); do
    head -c "$cut" "$W/b8.q4nx" > "$W/t.q4nx"
    run q4nx-verify "$W/t.q4nx"
    [ "$status" -eq 3 ]
    [[ "$output" == "q4nx-verify: $W/t.q4nx: truncated container"* ]]
  done
  cp "$W/b8.q4nx" "$W/m.q4nx"
  printf 'GGUF' | dd of="$W/m.q4nx" bs=1 seek=0 conv=notrunc 2>/dev/null
  run q4nx-verify "$W/m.q4nx"
  [ "$status" -eq 3 ]
  [[ "$output" == "q4nx-verify: $W/m.q4nx: not a Q4NX container (bad magic)" ]]
  cp "$W/b8.q4nx" "$W/v.q4nx"
  printf '\x02' | dd of="$W/v.q4nx" bs=1 seek=8 conv=notrunc 2>/dev/null
  run q4nx-verify "$W/v.q4nx"
  [ "$status" -eq 3 ]
  [[ "$output" == *"format version 2 is newer than this reader"* ]]
  cp "$W/b8.q4nx" "$W/v.q4nx"
  printf '\x02' | dd of="$W/v.q4nx" bs=1 seek=12 conv=notrunc 2>/dev/null
  run q4nx-verify "$W/v.q4nx"
  [ "$status" -eq 3 ]
  [[ "$output" == *"layout version 2 is newer than this reader"* ]]
  run q4nx-verify "$W/nonexistent.q4nx"
  [ "$status" -eq 3 ]
}

@test "q4nx-verify: usage errors exit 2; --help exits 0; missing pack dir exits 3" {
  run q4nx-verify --help
  [ "$status" -eq 0 ]
  run q4nx-verify
  [ "$status" -eq 2 ]
  pack_both qwen2 cpu untied
  run q4nx-verify "$W/b8.q4nx" --all
  [ "$status" -eq 2 ]
  run q4nx-verify "$W/b8.q4nx" --pack "$pack" --all --sample 3
  [ "$status" -eq 2 ]
  run q4nx-verify "$W/b8.q4nx" --pack "$W/no-such-pack"
  [ "$status" -eq 3 ]
  run q4nx-verify "$W/b8.q4nx" --pack "$pack" --sample 3
  [ "$status" -eq 0 ]
  [ "$(echo "$output" | jq -r .summary.mode)" = "sample 3" ]
}

@test "q4nx-verify: SIMD and scalar paths (OGAKIT_KERNEL=ref) give the same report" {
  pack_both qwen3 amd tied
  for l in rm b8; do
    q4nx-verify "$W/$l.q4nx" --pack "$pack" --all | jq -S 'del(.summary.seconds, .summary.gb_per_s, .summary.checksum_seconds)' > "$W/simd.json"
    OGAKIT_KERNEL=ref q4nx-verify "$W/$l.q4nx" --pack "$pack" --all | jq -S 'del(.summary.seconds, .summary.gb_per_s, .summary.checksum_seconds)' > "$W/ref.json"
    cmp "$W/simd.json" "$W/ref.json"
    # controls included: their statistics are computed from the decoded values of both paths
    [ "$(jq '[.pack.tensors[] | select(.dtype=="q4") | .controls.nibbles_swapped.corr] | length' "$W/ref.json")" -gt 0 ]
  done
}

@test "q4nx-pack -o: a run interrupted by SIGTERM leaves neither the file nor its temp file" {
  pack=$(fixture qwen2 cpu untied)
  oga-extract "$pack" | head -c 200000 > "$W/part.ogax" || true
  mkfifo "$W/fifo"
  q4nx-pack -o "$W/out.q4nx" < "$W/fifo" 2>/dev/null &
  pid=$!
  exec 7>"$W/fifo"
  cat "$W/part.ogax" >&7
  # the output is open (an unnamed file in $W, or out.q4nx.tmp.PID where O_TMPFILE is missing)
  for _ in $(seq 50); do ls -l /proc/$pid/fd 2>/dev/null | grep -q -- "-> $W/" && break; sleep 0.1; done
  ls -l /proc/$pid/fd | grep -q -- "-> $W/"
  kill -TERM "$pid"
  rc=0
  wait "$pid" || rc=$?
  exec 7>&-
  [ "$rc" -ne 0 ]
  [ ! -e "$W/out.q4nx" ]
  ! ls "$W" | grep -q 'out.q4nx.tmp' || false
}

# what the ONNX proto leaves optional (op_type, node and attribute names) may be absent: lib/pack
# tolerates it, so q4nx-verify's own graph reading (the tied check) must too; it segfaulted on strcmp(NULL)
@test "q4nx-verify --pack: a graph with a node without op_type and an unnamed embedding node and attribute" {
  local d=$W/proto-nulls
  /usr/bin/python3 "$TOP/t/pack-mutate.py" "$(fixture qwen2 cpu tied)" "$d" proto-nulls
  oga-extract "$d" | q4nx-pack -o "$W/m.q4nx"
  run q4nx-verify "$W/m.q4nx" --pack "$d" --all
  [ "$status" -eq 0 ] || { echo "status $status: $output"; return 1; }
  [ "$(echo "$output" | jq -c '.pack.tied_check | [.result, .embedding_node]')" = '["ok","?"]' ]
}
