#!/usr/bin/env bats
# oga-extract: every fixture variant gives a well-formed OGAX stream that an independent Python reader
# (t/oga-extract-check.py, onnx + numpy) finds byte-identical to the pack; the library reader
# (--check) accepts it and rejects damaged copies; malformed packs give a named refusal, exit 3 and
# no bytes on stdout.
load helpers
bats_require_minimum_version 1.5.0

variant() {
  local pack s=$BATS_TEST_TMPDIR/s.ogax
  pack=$(fixture "$1" "$2" "$3")
  run oga-extract -o "$s" "$pack"
  [ "$status" -eq 0 ] || { echo "$output"; return 1; }
  run /usr/bin/python3 "$TOP/t/oga-extract-check.py" "$pack" "$s"
  [ "$status" -eq 0 ] || { echo "$output"; return 1; }
  run oga-extract --check "$s"
  [ "$status" -eq 0 ] || { echo "$output"; return 1; }
  [ "$(echo "$output" | jq -r '.ok')" = true ]
  # stdout and -o give the same bytes
  cmp <(oga-extract "$pack") "$s"
}

@test "oga-extract qwen2 cpu tied"    { variant qwen2 cpu tied; }
@test "oga-extract qwen2 cpu untied"  { variant qwen2 cpu untied; }
@test "oga-extract qwen2 amd tied"    { variant qwen2 amd tied; }
@test "oga-extract qwen2 amd untied"  { variant qwen2 amd untied; }
@test "oga-extract llama cpu tied"    { variant llama cpu tied; }
@test "oga-extract llama cpu untied"  { variant llama cpu untied; }
@test "oga-extract llama amd tied"    { variant llama amd tied; }
@test "oga-extract llama amd untied"  { variant llama amd untied; }
@test "oga-extract qwen3 cpu tied"    { variant qwen3 cpu tied; }
@test "oga-extract qwen3 cpu untied"  { variant qwen3 cpu untied; }
@test "oga-extract qwen3 amd tied"    { variant qwen3 amd tied; }
@test "oga-extract qwen3 amd untied"  { variant qwen3 amd untied; }
@test "oga-extract phi3 cpu tied"     { variant phi3 cpu tied; }
@test "oga-extract phi3 cpu untied"   { variant phi3 cpu untied; }
@test "oga-extract phi3 amd tied"     { variant phi3 amd tied; }
@test "oga-extract phi3 amd untied"   { variant phi3 amd untied; }
@test "oga-extract gemma cpu tied"    { variant gemma cpu tied; }
@test "oga-extract gemma amd untied"  { variant gemma amd untied; }
@test "oga-extract chatglm cpu tied, amd untied (head_dim 64: interleaved half rotary, ChatGLM's config keys)" {
  local pack s=$BATS_TEST_TMPDIR/s.ogax st
  for st in "cpu tied" "amd untied"; do
    pack=$(fixture chatglm $st hd64)
    oga-extract -o "$s" "$pack"
    run /usr/bin/python3 "$TOP/t/oga-extract-check.py" "$pack" "$s"
    [ "$status" -eq 0 ] || { echo "$st: $output"; return 1; }
    oga-extract --check "$s" | jq -e '.ok and .model.rope.interleaved and .model.rope.dim == 32 and .model.qkv_bias'
  done
}
@test "oga-extract olmo cpu tied"     { variant olmo cpu tied; }   # LayerNorm weights and biases
@test "oga-extract olmo amd untied"   { variant olmo amd untied; }

@test "oga-extract refuses a terminal on stdout (exit 2)" {
  local pack
  pack=$(fixture qwen2 cpu tied)
  run script -qec "oga-extract '$pack'" /dev/null
  [ "$status" -eq 2 ] && [[ "$output" == *"oga-extract: refusing to write an OGAX stream to a terminal"* ]] || false
}

# held-out audit: the progress line divided tensor counts by 2^20 as if they were bytes: "oga-extract: oga-extract
# 65% (0/0 MB)" from start to end (q4nx-gguf's the same)
@test "oga-extract and q4nx-gguf on a terminal: the progress line counts tensors (N/T), not '0/0 MB'" {
  local pack w=$BATS_TEST_TMPDIR nt
  pack=$(fixture qwen2 cpu tied)
  run script -qec "oga-extract -o '$w/s.ogax' '$pack'" /dev/null
  [ "$status" -eq 0 ]
  # the stream's tensor frames, counted from its headers here
  nt=$(/usr/bin/python3 -c '
import json, struct, sys
b, at, n = open(sys.argv[1], "rb").read(), 0, 0
while at < len(b):
    hl, pl = struct.unpack_from("<IQ", b, at + 4)
    n += json.loads(b[at + 16:at + 16 + hl])["type"] == "tensor"
    at += 16 + hl + pl
print(n)' "$w/s.ogax")
  [ "$nt" -gt 1 ]
  [[ "$output" != *" MB)"* ]] && [[ "$output" == *"tensors $nt/$nt"* ]] || { echo "$nt: $output" | cat -v; return 1; }
  q4nx-pack -o "$w/m.q4nx" <"$w/s.ogax"
  run script -qec "q4nx-gguf --widen -o '$w/m.gguf' '$w/m.q4nx'" /dev/null
  [ "$status" -eq 0 ]
  # the GGUF's own tensor count (no rope caches): the last line's done equals its total
  local last
  last=$(grep -ao 'tensors [0-9]*/[0-9]*' <<<"$output" | tail -1)
  [[ "$output" != *" MB)"* ]] && [[ "$last" =~ ^tensors\ ([0-9]+)/([0-9]+)$ ]] &&
    [ "${BASH_REMATCH[1]}" = "${BASH_REMATCH[2]}" ] && [ "${BASH_REMATCH[1]}" -gt 1 ] || { echo "$output" | cat -v; return 1; }
}

@test "oga-extract usage: exit 2; --help exit 0" {
  run oga-extract
  [ "$status" -eq 2 ]
  run oga-extract --nope x
  [ "$status" -eq 2 ]
  run oga-extract --help
  [ "$status" -eq 0 ] && [[ "$output" == *"usage: oga-extract"* ]] || false
  # an output file that cannot be created is a write failure (1, as the man page says), not a usage error
  run oga-extract -o "$BATS_TEST_TMPDIR/no/such/dir/x.ogax" "$(fixture qwen2 cpu tied)"
  [ "$status" -eq 1 ] && [[ "$output" == *"cannot create"* ]] || false
}

@test "oga-extract --check rejects truncated, corrupted and padded streams" {
  local pack s=$BATS_TEST_TMPDIR/s.ogax n
  pack=$(fixture qwen2 amd untied)
  oga-extract "$pack" >"$s"
  n=$(stat -c %s "$s")
  head -c $((n - 10)) "$s" >"$BATS_TEST_TMPDIR/trunc"
  run oga-extract --check "$BATS_TEST_TMPDIR/trunc"
  [ "$status" -eq 3 ] && [[ "$output" == *"oga-extract: "*"truncated"* ]] || false
  # flip one byte in the middle of the last tensor payloads: a part CRC must catch it
  cp "$s" "$BATS_TEST_TMPDIR/flip"
  printf '\x5a' | dd of="$BATS_TEST_TMPDIR/flip" bs=1 seek=$((n / 2)) conv=notrunc status=none
  cmp -s "$s" "$BATS_TEST_TMPDIR/flip" && skip "the byte was already 0x5a"
  run oga-extract --check "$BATS_TEST_TMPDIR/flip"
  [ "$status" -eq 3 ] && [[ "$output" == *"CRC32C"* ]] || false
  { cat "$s"; printf 'x'; } >"$BATS_TEST_TMPDIR/pad"
  run oga-extract --check "$BATS_TEST_TMPDIR/pad"
  [ "$status" -eq 3 ] && [[ "$output" == *"trailing bytes"* ]] || false
  # --check takes no extraction options
  run oga-extract --check /dev/null -o "$BATS_TEST_TMPDIR/x"
  [ "$status" -eq 2 ] && [ ! -e "$BATS_TEST_TMPDIR/x" ] || false
}

@test "oga-extract: not a pack, exit 3 and nothing on stdout" {
  run --separate-stderr oga-extract "$BATS_TEST_TMPDIR/nothing-here"
  [ "$status" -eq 3 ] && [ -z "$output" ] && [[ "$stderr" == "oga-extract: "* ]] || false
}

@test "oga-extract -o leaves no file behind when the pack is refused" {
  local pack
  pack=$(fixture bad no-tokenizer) || skip "fixture bad no-tokenizer not available yet"
  run oga-extract -o "$BATS_TEST_TMPDIR/out.ogax" "$pack"
  [ "$status" -eq 3 ]
  [ ! -e "$BATS_TEST_TMPDIR/out.ogax" ] && [ -z "$(ls "$BATS_TEST_TMPDIR" | grep out.ogax || true)" ] || false
}

# malformed packs: exit 3, the named refusal on stderr, zero bytes on stdout; --allow-incomplete
# writes a stream that is well formed and says what it left out
bad_case() {
  local name=$1 code=$2 pack out=$BATS_TEST_TMPDIR/out rc=0
  pack=$(fixture bad "$name") || skip "fixture bad $name not available yet (tools/mkbad.py)"
  oga-extract "$pack" >"$out" 2>"$BATS_TEST_TMPDIR/err" || rc=$?
  [ "$rc" -eq 3 ] || { cat "$BATS_TEST_TMPDIR/err"; return 1; }
  [ ! -s "$out" ]
  grep -q "oga-extract: refused: .*\[$code\]" "$BATS_TEST_TMPDIR/err"
  grep -q "nothing written" "$BATS_TEST_TMPDIR/err"
  # what can be extracted is, and the stream says what is missing
  if oga-extract --allow-incomplete "$pack" >"$out" 2>"$BATS_TEST_TMPDIR/err"; then
    run oga-extract --check "$out"
    [ "$status" -eq 0 ] || { echo "$output"; return 1; }
    head -c 100000 "$out" | grep -qa "\"complete\":false"
    head -c 100000 "$out" | grep -qa "\"code\":\"$code\""
    grep -q "oga-extract: left out: .*\[$code\]" "$BATS_TEST_TMPDIR/err"
  else
    return 1
  fi
}

@test "extract bad truncated-data"      { bad_case truncated-data truncated; }
@test "extract bad offset-past-end"     { bad_case offset-past-end external_data; }
@test "extract bad not-protobuf"        { bad_case not-protobuf not_protobuf; }
@test "extract bad deep-nesting"        { bad_case deep-nesting not_protobuf; }
@test "extract bad config-missing-key"  { bad_case config-missing-key config_missing; }
@test "extract bad config-wrong-type"   { bad_case config-wrong-type config_type; }
@test "extract bad dims-contradict"     { bad_case dims-contradict config_dims; }
@test "extract bad bits2"               { bad_case bits2 unsupported_bits; }
@test "extract bad gidx"                { bad_case gidx g_idx; }
@test "extract bad no-tokenizer"        { bad_case no-tokenizer tokenizer_missing; }
@test "extract bad amd-npu"             { bad_case amd-npu npu_packed; }

# A chat template our Jinja engine cannot parse does not stop the import (the weights and the tokenizer serve
# completions), but oga-extract and q4nx-pack say so on stderr, naming the file, the template's line and
# column and why; before, both were silent and the first chat request found out.
@test "oga-extract / q4nx-pack: a chat template that does not parse is a warning naming the file, line and column; the import succeeds" {
  local d=$BATS_TEST_TMPDIR/badtpl s=$BATS_TEST_TMPDIR/s.ogax
  cp -r "$(fixture qwen2 cpu tied)" "$d"
  # the pack as it comes parses: no warning
  run --separate-stderr oga-extract -o "$s" "$d"
  [ "$status" -eq 0 ]
  [[ "$stderr" != *"chat template"* ]] || { echo "$stderr"; return 1; }
  # an {% if %} never closed (opened at line 3, column 3: lstrip_blocks does not move it) before the
  # {% endfor %} at column 30
  jq --arg t $'{%- for m in messages -%}\n[{{ m.content }}]\n  {%- if m.role == "user" %}U{% endfor %}' \
    '.chat_template = $t' "$(fixture qwen2 cpu tied)/tokenizer_config.json" > "$d/tokenizer_config.json"
  run --separate-stderr oga-extract -o "$s" "$d"
  echo "$stderr"
  [ "$status" -eq 0 ]
  [[ "$stderr" == *"oga-extract: warning: $d/tokenizer_config.json: the chat template does not parse: template line 3, column 30: unexpected {% endfor %}: the {% if %} at line 3, column 3 is not closed before it"* ]]
  [[ "$stderr" == *"completions will work"* ]]
  run --separate-stderr q4nx-pack -l rm -o "$BATS_TEST_TMPDIR/m.q4nx" < "$s"
  echo "$stderr"
  [ "$status" -eq 0 ]
  [[ "$stderr" == *"q4nx-pack: warning: $d/tokenizer_config.json (the stream's chat_template): the chat template does not parse: template line 3, column 30: unexpected {% endfor %}"* ]]
  [ -s "$BATS_TEST_TMPDIR/m.q4nx" ]
  # a construct we do not support, in chat_template.jinja (which wins over the config's): that file is named
  printf 'ok\n{{ 1 }} {%% with x = 1 %%}{{ x }}{%% endwith %%}\n' > "$d/chat_template.jinja"
  run --separate-stderr oga-extract -o "$s" "$d"
  echo "$stderr"
  [ "$status" -eq 0 ]
  [[ "$stderr" == *"oga-extract: warning: $d/chat_template.jinja: the chat template does not parse: template line 2, column 9: unsupported statement '{% with'"* ]]
  run --separate-stderr q4nx-pack -l rm -o "$BATS_TEST_TMPDIR/m.q4nx" < "$s"
  [ "$status" -eq 0 ]
  [[ "$stderr" == *"$d/chat_template.jinja (the stream's chat_template): the chat template does not parse: template line 2, column 9: unsupported statement"* ]]
  # a named list whose "tool_use" template does not parse (a string left open at line 1, column 4): named as such
  rm "$d/chat_template.jinja"
  jq '.chat_template = [{"name": "default", "template": "{{ messages | length }}"}, {"name": "tool_use", "template": "ok{{ \"open }}"}]' \
    "$(fixture qwen2 cpu tied)/tokenizer_config.json" > "$d/tokenizer_config.json"
  run --separate-stderr oga-extract -o "$s" "$d"
  echo "$stderr"
  [ "$status" -eq 0 ]
  [[ "$stderr" == *"oga-extract: warning: $d/tokenizer_config.json (its \"tool_use\" template): the chat template does not parse: template line 1, column 6: Unexpected end of input"* ]]
  [ "$(grep -c warning <<<"$stderr")" = 1 ]
  run --separate-stderr q4nx-pack -l rm -o "$BATS_TEST_TMPDIR/m.q4nx" < "$s"
  echo "$stderr"
  [ "$status" -eq 0 ]
  [[ "$stderr" == *"q4nx-pack: warning: $d/tokenizer_config.json (its \"tool_use\" template): the chat template does not parse: template line 1, column 6"* ]]
  [ "$(grep -c warning <<<"$stderr")" = 1 ]
}
