#!/usr/bin/env bats
# oga-info on every fixture variant (4 families x 2 styles x tied/untied) and every malformed pack.
# Expected values come from the pack's own config.json / genai_config.json (what mkpack.py was asked
# to write) and from the builder styles' documented structure, never from oga-info's own output.
load helpers
bats_require_minimum_version 1.5.0

# expected sorted role list for FAMILY STYLE TIE with L layers
expected_roles() {
  local fam=$1 style=$2 tie=$3 L=$4 i
  {
    for ((i = 0; i < L; i++)); do
      echo "layers.$i.input_norm"; echo "layers.$i.post_attn_norm"; echo "layers.$i.attn.o"
      echo "layers.$i.mlp.gate"; echo "layers.$i.mlp.up"; echo "layers.$i.mlp.down"
      if [ "$style" = cpu ]; then # the CPU builder packs q, k, v into one MatMulNBits
        echo "layers.$i.attn.qkv"; [ "$fam" = qwen2 ] && echo "layers.$i.attn.qkv_bias"
      else
        echo "layers.$i.attn.q"; echo "layers.$i.attn.k"; echo "layers.$i.attn.v"
        [ "$fam" = qwen2 ] && { echo "layers.$i.attn.q_bias"; echo "layers.$i.attn.k_bias"; echo "layers.$i.attn.v_bias"; }
      fi
      [ "$fam" = qwen3 ] && { echo "layers.$i.attn.q_norm"; echo "layers.$i.attn.k_norm"; }
    done
    echo final_norm; echo lm_head; echo rope.cos; echo rope.sin
    [ "$tie" = untied ] && echo embed
    true
  } | sort
}

check_variant() {
  local fam=$1 style=$2 tie=$3 pack out
  pack=$(fixture "$fam" "$style" "$tie")
  out=$BATS_TEST_TMPDIR/info.json
  run oga-info --tensors "$pack"
  [ "$status" -eq 0 ] || { echo "$output"; return 1; }
  echo "$output" >"$out"
  # every check in one jq run; it names the checks that fail
  jq -e --slurpfile c "$pack/config.json" --slurpfile gen "$pack/genai_config.json" \
    --arg fam "$fam" --arg style "$style" --arg tie "$tie" '
    $c[0] as $c | $gen[0].model as $g |
    $c.hidden_size as $H | $c.intermediate_size as $I | $c.num_attention_heads as $NH |
    $c.num_key_value_heads as $NKV | $c.head_dim as $HD | $c.vocab_size as $V |
    def shapes($re): [.tensors[] | select(.role | test($re)) | .shape] | unique;
    [
      ["dims", .dims == {vocab_size: $V, hidden_size: $H, intermediate_size: $I, num_layers: $c.num_hidden_layers,
                         num_heads: $NH, num_kv_heads: $NKV, head_dim: $HD}],
      ["context_length", .context_length == $g.context_length],
      ["eos", .tokens.eos_token_ids == ($g.eos_token_id | if type == "array" then . else [.] end)],
      ["bos", .tokens.bos_token_id == $g.bos_token_id],
      ["pad", .tokens.pad_token_id == $g.pad_token_id],
      ["family", .family == $fam],
      ["flavour", .flavour == "builder-" + $style],
      ["tie", .tie_embeddings == $c.tie_word_embeddings],
      ["rope", .rope.theta == $c.rope_theta and .rope.dim == $HD],
      ["eps", .rms_norm_eps == $c.rms_norm_eps],
      ["importable", .importable and (.refusals | length) == 0],
      ["qkv_bias", .qkv_bias == ($fam == "qwen2")],
      ["qk_norm", .qk_norm == ($fam == "qwen3")],
      ["quant", [.quantization.block_sizes, .quantization.zero_points, .io_dtype] ==
                (if $style == "cpu" then [[32], "symmetric", "f32"] else [[128], "asymmetric", "f16"] end)],
      ["lm_head", [.tensors[] | select(.role == "lm_head") | [.dtype, .shape]] == [["q4", [$V, $H]]]],
      ["down", shapes("mlp.down$") == [[$H, $I]]],
      ["gate_up", shapes("mlp.(gate|up)$") == [[$I, $H]]],
      ["o", shapes("attn.o$") == [[$H, $NH * $HD]]],
      ["norms", ([.tensors[] | select(.role | test("norm$")) | .shape[0]] | unique) ==
                (if $fam == "qwen3" then [$HD, $H] | sort else [$H] end)],
      ["qkv", if $style == "cpu" then shapes("attn.qkv$") == [[($NH + 2 * $NKV) * $HD, $H]]
              else shapes("attn.(k|v)$") == [[$NKV * $HD, $H]] and shapes("attn.q$") == [[$NH * $HD, $H]] end],
      ["embed", if $tie == "untied" then [.tensors[] | select(.role == "embed") | .shape] == [[$V, $H]]
                else ([.tensors[] | select(.role == "embed")] | length) == 0 end],
      ["by_role", ([.by_role[].count] | add) == (.tensors | length) and .tensor_count == (.tensors | length)],
      ["files", (.files.present_files | index("tokenizer.json") != null and index("tokenizer_config.json") != null
                 and index("genai_config.json") != null and index("config.json") != null)]
    ] | map(select(.[1] != true) | .[0]) | if length == 0 then true else error("failed: " + join(", ")) end
  ' "$out"
  # roles: exactly the expected set, each once
  diff <(jq -r '.tensors[].role' "$out" | sort) <(expected_roles "$fam" "$style" "$tie" "$(jq .num_hidden_layers "$pack/config.json")")
}

@test "oga-info qwen2 cpu tied"    { check_variant qwen2 cpu tied; }
@test "oga-info qwen2 cpu untied"  { check_variant qwen2 cpu untied; }
@test "oga-info qwen2 amd tied"    { check_variant qwen2 amd tied; }
@test "oga-info qwen2 amd untied"  { check_variant qwen2 amd untied; }
@test "oga-info llama cpu tied"    { check_variant llama cpu tied; }
@test "oga-info llama cpu untied"  { check_variant llama cpu untied; }
@test "oga-info llama amd tied"    { check_variant llama amd tied; }
@test "oga-info llama amd untied"  { check_variant llama amd untied; }
@test "oga-info qwen3 cpu tied"    { check_variant qwen3 cpu tied; }
@test "oga-info qwen3 cpu untied"  { check_variant qwen3 cpu untied; }
@test "oga-info qwen3 amd tied"    { check_variant qwen3 amd tied; }
@test "oga-info qwen3 amd untied"  { check_variant qwen3 amd untied; }
@test "oga-info phi3 cpu tied"     { check_variant phi3 cpu tied; }
@test "oga-info phi3 cpu untied"   { check_variant phi3 cpu untied; }
@test "oga-info phi3 amd tied"     { check_variant phi3 amd tied; }
@test "oga-info phi3 amd untied"   { check_variant phi3 amd untied; }

@test "oga-info: usage errors exit 2, --help exits 0" {
  run oga-info
  [ "$status" -eq 2 ] && [[ "$output" == *"oga-info: missing PACK"* ]] || false
  run oga-info --bogus x
  [ "$status" -eq 2 ]
  run oga-info a b
  [ "$status" -eq 2 ]
  run oga-info --help
  [ "$status" -eq 0 ] && [[ "$output" == *"usage: oga-info"* ]] || false
}

@test "oga-info: not a pack is a named error, exit 3" {
  run oga-info "$BATS_TEST_TMPDIR/nonexistent"
  [ "$status" -eq 3 ] && [[ "$output" == "oga-info: "*"No such file or directory"* ]] || false
  mkdir -p "$BATS_TEST_TMPDIR/empty"
  run oga-info "$BATS_TEST_TMPDIR/empty"
  [ "$status" -eq 3 ] && [[ "$output" == *"not an OGA pack"* ]] || false
}

# malformed packs: NAME CODE [WHAT-substring]
bad_case() {
  local name=$1 code=$2 what=${3:-} pack
  pack=$(fixture bad "$name") || skip "fixture bad $name not available yet (tools/mkbad.py)"
  run --separate-stderr oga-info "$pack"
  [ "$status" -eq 3 ] || { echo "status $status: $stderr"; return 1; }
  # the report is still printed, with the named refusal
  echo "$output" | jq -e --arg c "$code" '.importable == false and ([.refusals[].code] | index($c))' >/dev/null ||
    { echo "$output" | jq -c .refusals; return 1; }
  [ -z "$what" ] || echo "$output" | jq -e --arg c "$code" --arg w "$what" \
    '[.refusals[] | select(.code == $c) | .what | contains($w)] | any' >/dev/null
  # and the same refusal, named, on stderr
  [[ "$stderr" == *"oga-info: refused: "*"[$code]"* ]]
}

@test "bad pack truncated-data: truncated, exit 3"          {
  bad_case truncated-data truncated model.onnx.data
  echo "$output" | jq -e '[.refusals[] | select(.code == "external_data" and (.what | startswith("tensor ")))] | length > 0'
}
@test "bad pack offset-past-end: external_data, exit 3"     { bad_case offset-past-end external_data tensor; }
@test "bad pack not-protobuf: not_protobuf, exit 3"         { bad_case not-protobuf not_protobuf model.onnx; }
@test "bad pack deep-nesting: not_protobuf, exit 3, not a stack overflow" {
  bad_case deep-nesting not_protobuf model.onnx
  echo "$output" | jq -e '.refusals[0].reason | contains("nested more than 64 deep")'
}
@test "bad pack config-missing-key: config_missing, exit 3" { bad_case config-missing-key config_missing genai_config.json; }
@test "bad pack config-wrong-type: config_type, exit 3"     { bad_case config-wrong-type config_type genai_config.json; }
@test "bad pack dims-contradict: config_dims, exit 3"       { bad_case dims-contradict config_dims; }
@test "bad pack bits2: unsupported_bits, exit 3"            { bad_case bits2 unsupported_bits tensor; }
@test "bad pack gidx: g_idx, exit 3"                        { bad_case gidx g_idx tensor; }
@test "pack block16 (valid per spec): imported and extracted byte for byte" {
  local pack
  pack=$(fixture bad block16) || skip "fixture bad block16 not available yet (tools/mkbad.py)"
  run oga-info -q "$pack"
  [ "$status" -eq 0 ] && [ "$(echo "$output" | jq -c .quantization.block_sizes)" = "[16]" ] || false
  [ "$(echo "$output" | jq .tie_embeddings)" = true ]
  oga-extract -o "$BATS_TEST_TMPDIR/s.ogax" "$pack"
  run /usr/bin/python3 "$TOP/t/oga-extract-check.py" "$pack" "$BATS_TEST_TMPDIR/s.ogax"
  [ "$status" -eq 0 ] || { echo "$output"; return 1; }
}
@test "bad pack no-tokenizer: tokenizer_missing, exit 3"    { bad_case no-tokenizer tokenizer_missing tokenizer.json; }
@test "bad pack amd-npu: npu_packed and flavour amd-npu"    {
  bad_case amd-npu npu_packed
  [ "$(echo "$output" | jq -r .flavour)" = amd-npu ]
  # the dispatch node and every weight its _meta.json packs into .const buffers, by name
  echo "$output" | jq -e '[.refusals[] | select(.code == "npu_packed") | .what] | index("node /model/DynamicDispatch_0")'
  local pack; pack=$(fixture bad amd-npu)
  for t in $(jq -r '.tensor_map | keys[]' "$pack/.cache/MatMulNBits_2_0_meta.json"); do
    echo "$output" | jq -e --arg w "tensor $t" '[.refusals[].what] | index($w)' >/dev/null || { echo "not refused: $t"; return 1; }
  done
  # what is readable is read: config, tokenizer, the float embedding
  [ "$(echo "$output" | jq -c '[.family, .dims.hidden_size, .dims.vocab_size]')" = \
    "$(jq -c '[.model.type, .model.decoder.hidden_size, .model.vocab_size]' "$pack/genai_config.json")" ]
  [ "$(echo "$output" | jq -r '.by_role | keys | join(",")')" = embed ]
}

@test "every bad pack listed by fixture.sh --list-bad has a case here" {
  local n
  for n in $("$TOP/tools/fixture.sh" --list-bad); do
    grep -Eq "bad_case $n |fixture bad $n\)" "$BATS_TEST_FILENAME" || { echo "no case for $n"; return 1; }
  done
}

@test "oga-info survives hostile model.onnx and genai_config.json (truncations, byte flips): exit 0 or 3, never a crash" {
  local src dst=$BATS_TEST_TMPDIR/p i n off rc
  src=$(fixture qwen3 amd tied)
  mkdir -p "$dst"
  for f in "$src"/*; do ln -s "$f" "$dst/"; done
  n=$(stat -c %s "$src/model.onnx")
  RANDOM=7
  # (60 mutations; 30 under ASan, where each oga-info run takes ~0.5 s)
  for i in $(seq "$([ "${OGAKIT_SAN:-0}" = 1 ] && echo 30 || echo 60)"); do
    rm -f "$dst/model.onnx" "$dst/genai_config.json"
    cp "$src/model.onnx" "$dst/model.onnx"
    cp "$src/genai_config.json" "$dst/genai_config.json"
    off=$(( (RANDOM * 32768 + RANDOM) % n ))
    case $((i % 4)) in
      0) truncate -s "$off" "$dst/model.onnx" ;;
      1|2) printf "\\x$(printf %02x $((RANDOM % 256)))" | dd of="$dst/model.onnx" bs=1 seek="$off" conv=notrunc status=none ;;
      3) truncate -s $((RANDOM % $(stat -c %s "$src/genai_config.json"))) "$dst/genai_config.json" ;;
    esac
    rc=0
    oga-info -q "$dst" >/dev/null 2>&1 || rc=$?
    [ "$rc" -eq 0 ] || [ "$rc" -eq 3 ] || { echo "mutation $i (offset $off): exit $rc"; return 1; }
  done
}

# edge cases the malformed fixtures do not cover (t/pack-mutate.py edits a good fixture)
mutated() { # STYLE MUTATION -> path (made once per test)
  local d=$BATS_TEST_TMPDIR/mut-$1-$2
  [ -e "$d/model.onnx" ] || /usr/bin/python3 "$TOP/t/pack-mutate.py" "$(fixture qwen2 "$1" tied)" "$d" "$2" || return
  echo "$d"
}
mutate_both() { # MUTATION...: mutated cpu M and mutated amd M for each M, in one Python run
  local a=() m s
  for s in cpu amd; do
    for m in "$@"; do a+=("$(fixture qwen2 "$s" tied)" "$BATS_TEST_TMPDIR/mut-$s-$m" "$m"); done
  done
  /usr/bin/python3 "$TOP/t/pack-mutate.py" "${a[@]}"
}
mutation_case() { # MUTATION CODE WHAT-substring
  local s d
  [ -e "$BATS_TEST_TMPDIR/mut-amd-$1/model.onnx" ] || mutate_both "$1"
  for s in cpu amd; do
    d=$(mutated "$s" "$1")
    run --separate-stderr oga-info -q "$d"
    [ "$status" -eq 3 ] || { echo "$s: status $status"; return 1; }
    echo "$output" | jq -e --arg c "$2" --arg w "$3" '[.refusals[] | select(.code == $c and (.what | contains($w)))] | length > 0' >/dev/null ||
      { echo "$s:"; echo "$output" | jq -c .refusals; return 1; }
  done
}

@test "refused: an external location outside the pack"      { mutation_case escape-location external_data scales; }
@test "refused: MatMulNBits float zero points"               { mutation_case float-zeros tensor_dtype float_zero_points; }
@test "refused: MatMulNBits K contradicting its weight"      { mutation_case k-mismatch tensor_shape "layers.0."; }
# an unquantised lm_head (MatMul over a float [K, N]): an untied pack's is taken as a float tensor; in a tied pack
# the embedding still gathers codes that no MatMulNBits reads, which is refused
@test "an unquantised lm_head: importable untied (a float [hidden, vocab] tensor), refused tied" {
  local s d
  for s in cpu amd; do
    d=$BATS_TEST_TMPDIR/mut-$s-untied
    /usr/bin/python3 "$TOP/t/pack-mutate.py" "$(fixture qwen2 $s untied)" "$d" plain-lm-head
    run --separate-stderr oga-info -q "$d"
    [ "$status" -eq 0 ]
    echo "$output" | jq -e '.importable and .by_role.lm_head.count == 1' >/dev/null
    oga-extract "$d" | q4nx-pack -o "$d.q4nx"
    npu-forward info -m "$d.q4nx" | jq -e '.tied == false' >/dev/null
    d=$(mutated "$s" plain-lm-head)
    run --separate-stderr oga-info -q "$d"
    [ "$status" -eq 3 ] || false
    echo "$output" | jq -e '[.refusals[] | select(.code == "unsupported_op" and (.what | contains("lm_head")) and
      (.reason | contains("GatherBlockQuantized")))] | length > 0' >/dev/null
  done
}
@test "refused: a weight the graph walk cannot place"        { mutation_case unassigned unassigned stray.weight; }
@test "refused: a node without an op_type (no crash)"         { mutation_case no-op-type graph "layer 0"; }
# attributes the runtime does not implement: refused by name, never ignored (wrong output)
@test "refused: MatMulNBits weight_prepacked"                 { mutation_case weight-prepacked unsupported_op "tensor model.layers.0."; }
@test "refused: two layers with different local_window_size"  { mutation_case gqa-window-mixed unsupported_op "layer 1 attention"; }
@test "refused: a softcap on some attention nodes, not all"   { mutation_case gqa-softcap-one unsupported_op graph; }
@test "refused: attention scales that differ between layers"  { mutation_case gqa-scale-mixed unsupported_op "layer 1 attention"; }
@test "refused: MultiHeadAttention neither causal nor masked" { mutation_case mha-bidirectional unsupported_op "layer 0 attention"; }
# the graph input attention_mask as it is fed pads and nothing else: taken for a causal mask, the pack
# imported and ran causal attention where onnxruntime's scores are bidirectional (held-out audit)
@test "refused: MultiHeadAttention whose only mask is attention_mask as fed (padding); unidirectional 1 imports" {
  mutation_case mha-padding unsupported_op "layer 0 attention"
  local d
  d=$(mutated cpu mha-padding)
  run oga-info -q "$d"
  echo "$output" | jq -e '[.refusals[] | select(.reason | contains("attention_mask as fed (padding only)"))] | length > 0'
  # amd graphs rotate q and k by RotaryEmbedding nodes: nothing else to say about the attention
  d=$(mutated amd mha-padding-causal)
  run oga-info -q "$d"
  echo "$output" | jq -e '[.refusals[] | select(.what | contains("attention"))] | length == 0' || { echo "$output" | jq -c .refusals; return 1; }
  # cpu graphs rotate inside GroupQueryAttention (do_rotary): a MultiHeadAttention there rotates nothing
  d=$(mutated cpu mha-padding-causal)
  run oga-info -q "$d"
  echo "$output" | jq -e '[.refusals[] | select(.what == "layer 0 attention" and (.reason | contains("neither is rotated")))] | length == 1' ||
    { echo "$output" | jq -c .refusals; return 1; }
}
# norms: what the runtime computes (the model's one epsilon, the last axis, nothing added before the norm, one kind)
@test "refused: a norm with another epsilon, over another axis, with a bias added before it" {
  mutate_both norm-eps norm-axis norm-prebias
  mutation_case norm-eps unsupported_op layers.1.input_norm
  mutation_case norm-axis unsupported_op layers.0.input_norm
  mutation_case norm-prebias unsupported_op layers.0.post_attn_norm
}
@test "olmo: LayerNorms import with their biases (norm layer), without them too; an RMSNorm among them is refused" {
  local s d
  for s in "cpu tied" "amd untied"; do
    run oga-info -q "$(fixture olmo $s)"
    [ "$status" -eq 0 ] || { echo "$s: $output"; return 1; }
    echo "$output" | jq -e '.norm == "layer" and .by_role["input_norm_bias"].count == 2 and
      .by_role["post_attn_norm_bias"].count == 2 and .by_role["final_norm_bias"].count == 1'
  done
  run oga-info -q "$(fixture llama cpu tied)"
  [ "$(echo "$output" | jq -r .norm)" = rms ]
  d=$BATS_TEST_TMPDIR/olmo-nobias
  /usr/bin/python3 "$TOP/t/pack-mutate.py" "$(fixture olmo amd untied)" "$d" norm-nobias
  run oga-info -q "$d"
  [ "$status" -eq 0 ] && echo "$output" | jq -e '.norm == "layer" and ([.by_role | keys[] | select(endswith("_bias"))] == [])' || false
  d=$BATS_TEST_TMPDIR/olmo-mixed
  /usr/bin/python3 "$TOP/t/pack-mutate.py" "$(fixture olmo cpu tied)" "$d" norm-mixed
  run --separate-stderr oga-info -q "$d"
  [ "$status" -eq 3 ]
  echo "$output" | jq -e '[.refusals[] | select(.what == "layers.1.input_norm" and .code == "unsupported_op" and
    (.reason | contains("an RMSNorm where the model'"'"'s norms are LayerNorms")))] | length == 1'
}
# what Gemma 2 brings, on any family's graph: carried into the model description, which the runtime applies
@test "sliding window, softcap and a custom scale on every attention node: importable, in the description" {
  mutate_both gqa-window gqa-softcap gqa-scale
  local s o
  for s in cpu amd; do
    run oga-info -q "$(mutated "$s" gqa-window)"
    [ "$status" -eq 0 ] || { echo "$s: $output"; return 1; }
    [ "$(echo "$output" | jq -c .sliding_window)" = '{"size":4,"layers":[0,1]}' ]
    run oga-info -q "$(mutated "$s" gqa-softcap)"
    [ "$status" -eq 0 ] && [ "$(echo "$output" | jq .attn_softcap)" = 30 ] || false
    [ "$(echo "$output" | jq -c '[.sliding_window, .final_softcap, .embed_scale, .sandwich_norms, .activation]')" = '[null,null,null,false,"silu"]' ]
    run oga-info -q "$(mutated "$s" gqa-scale)"
    [ "$status" -eq 0 ] || { echo "$s: $output"; return 1; }
    [ "$(echo "$output" | jq .attn_scale)" = 0.0625 ]   # (1/sqrt(16))^2: tiny's head_dim 16
  done
}
@test "refused: a gate activation the runtime does not apply (x * Gelu(x))" { mutation_case gelu-gate unsupported_op "layer 0 mlp"; }
@test "refused: a family the runtime does not run, by name, also when the graph walk fails too" {
  local d t g
  d=$(mutated cpu no-op-type)
  g=$(readlink -f "$d/genai_config.json")
  for t in granite phi nemotron; do
    rm -f "$d/genai_config.json"
    jq --arg t "$t" '.model.type = $t' "$g" >"$d/genai_config.json"
    run --separate-stderr oga-info "$d"
    [ "$status" -eq 3 ] || { echo "$t: status $status"; return 1; }
    echo "$output" | jq -e --arg t "$t" '[.refusals[] | select(.code == "model_unsupported" and .what == "genai_config.json: model.type"
      and (.reason | contains("\"" + $t + "\"")))] | length == 1' >/dev/null || { echo "$t:"; echo "$output" | jq -c .refusals; return 1; }
    echo "$output" | jq -e '[.refusals[].code] | index("graph")' >/dev/null  # the walk's own refusal is kept
    [[ "$stderr" == *"genai_config.json: model.type: unsupported family \"$t\""* ]]
  done
}
# text that is not UTF-8 cannot go into the JSON report or the OGAX stream: refused by name, or (a
# path) shown with '?' for the bad bytes; it made the report fail ("write failed", exit 1)
@test "refused: a Latin-1 chat_template.jinja (not_utf8), the report still whole" {
  local src d=$BATS_TEST_TMPDIR/latin1-template f
  src=$(fixture qwen2 cpu tied)
  mkdir -p "$d"
  for f in "$src"/*; do ln -s "$f" "$d/"; done
  rm "$d/tokenizer_config.json"
  jq 'del(.chat_template)' "$src/tokenizer_config.json" >"$d/tokenizer_config.json"
  printf '{%% for m in messages %%}\xe9{{ m.content }}{%% endfor %%}' >"$d/chat_template.jinja"
  run --separate-stderr oga-info "$d"
  [ "$status" -eq 3 ] || { echo "status $status: $stderr"; return 1; }
  echo "$output" | jq -e '[.refusals[] | select(.code == "not_utf8" and .what == "file chat_template.jinja")] | length == 1'
  run -3 oga-extract -o "$BATS_TEST_TMPDIR/s.ogax" "$d"
  [[ "$output" == *"refused: file chat_template.jinja: not UTF-8 text"*"[not_utf8]"* ]]
}
# transformers lets chat_template.jinja clobber tokenizer_config.json's template (its named list too);
# ogakit used the config's, silently, in the pack report, the container and the tokenizer directory
@test "chat_template.jinja wins over tokenizer_config.json's template: report, container, tokenizer directory" {
  local src d=$BATS_TEST_TMPDIR/both-templates f ids
  src=$(fixture qwen2 cpu tied)
  mkdir -p "$d"
  for f in "$src"/*; do ln -s "$f" "$d/"; done
  rm "$d/tokenizer_config.json"
  jq '.chat_template = [{"name": "default", "template": "CFG{{ messages[0].content }}"},
                        {"name": "tool_use", "template": "TOOLS{{ messages[0].content }}"}]' \
    "$src/tokenizer_config.json" >"$d/tokenizer_config.json"
  printf 'JINJA{%% for m in messages %%}[{{ m.role }}]{{ m.content }}{%% endfor %%}' >"$d/chat_template.jinja"
  run oga-info "$d"
  [ "$status" -eq 0 ]
  echo "$output" | jq -e '.chat_template == true'
  oga-extract "$d" | q4nx-pack -o "$BATS_TEST_TMPDIR/t.q4nx"
  for src in "-m $BATS_TEST_TMPDIR/t.q4nx" "--tokenizer $d"; do
    # shellcheck disable=SC2086
    run npu-forward chat $src <<<'{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f"}}]}'
    [ "$status" -eq 0 ] && [ "$output" = "JINJA[user]hi" ] || { echo "$src: $status $output"; return 1; }
  done
  ids=$(npu-forward run -m "$BATS_TEST_TMPDIR/t.q4nx" --chat -p hi -n 1 --json -t 1 | jq -c .prompt_ids)
  [ "$(npu-forward detokenize -m "$BATS_TEST_TMPDIR/t.q4nx" "$ids")" = "JINJA[user]hi" ]
  # without the file, the config's named list: "default", and "tool_use" when tools are given
  rm "$d/chat_template.jinja"
  run npu-forward chat --tokenizer "$d" <<<'{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f"}}]}'
  [ "$output" = "TOOLShi" ]
  run npu-forward chat --tokenizer "$d" <<<'[{"role": "user", "content": "hi"}]'
  [ "$output" = "CFGhi" ]
}
# a snapshot-style pack whose link points at a blob that never arrived: it was "missing", so the pack
# imported without its template and settings (tokenizer_config.json) or was told to add a file it has
@test "refused: a file of the pack that is a symbolic link to nothing (file_unreadable, named)" {
  local src d=$BATS_TEST_TMPDIR/dangling f name
  src=$(fixture qwen2 cpu tied)
  for name in tokenizer_config.json tokenizer.json chat_template.jinja; do
    rm -rf "$d"; mkdir -p "$d"
    for f in "$src"/*; do ln -s "$f" "$d/"; done
    rm -f "$d/$name"; ln -s "$BATS_TEST_TMPDIR/blobs/never-downloaded" "$d/$name"
    run --separate-stderr oga-info "$d"
    [ "$status" -eq 3 ] || { echo "$name: status $status"; return 1; }
    echo "$output" | jq -e --arg w "file $name" '[.refusals[] | select(.what == $w and .code == "file_unreadable"
      and (.reason | contains("symbolic link to a file that does not exist")))] | length == 1' ||
      { echo "$name:"; echo "$output" | jq -c .refusals; return 1; }
  done
}
# the report showed the configured context while npu-forward quietly ran what the RoPE caches cover
@test "a context_length beyond the RoPE caches: the report keeps it, a note names the context that runs" {
  local src d=$BATS_TEST_TMPDIR/ctx f rows
  src=$(fixture qwen2 cpu tied)
  mkdir -p "$d"
  for f in "$src"/*; do ln -s "$f" "$d/"; done
  rows=$(oga-info -q "$src" | jq .rope.cache_rows)
  rm "$d/genai_config.json"
  jq --argjson c $((rows * 2)) '.model.context_length = $c' "$src/genai_config.json" >"$d/genai_config.json"
  run --separate-stderr oga-info "$d"
  [ "$status" -eq 0 ]
  [ "$(echo "$output" | jq .context_length)" = $((rows * 2)) ]
  [[ "$stderr" == *"note: context_length $((rows * 2)) is configured, but the RoPE caches cover $rows positions: npu-forward runs a context of $rows"* ]]
  oga-extract "$d" | q4nx-pack -o "$BATS_TEST_TMPDIR/ctx.q4nx"
  [ "$(npu-forward info -m "$BATS_TEST_TMPDIR/ctx.q4nx" | jq .context_length)" = "$rows" ]
  run --separate-stderr oga-info "$src"
  [ -z "$stderr" ]
}
# onnxruntime-genai joins decoder.filename to the pack's directory: "./model.onnx" and a model in a
# subdirectory (its external data beside it, as ONNX locations are relative to the model) were refused
@test "decoder.filename \"./model.onnx\" and \"onnx/model.onnx\" (data beside it) import as the plain pack; \"..\" refused" {
  local src d f ids n=0
  src=$(fixture qwen2 cpu tied)
  oga-extract "$src" | q4nx-pack -o "$BATS_TEST_TMPDIR/ref.q4nx"
  echo '[1, 2, 3, 4]' >"$BATS_TEST_TMPDIR/ids.json"
  ref=$(npu-forward logits -m "$BATS_TEST_TMPDIR/ref.q4nx" -t 1 --ids "$BATS_TEST_TMPDIR/ids.json" --top-logits 3)
  for fn in ./model.onnx onnx/model.onnx .//onnx/./model.onnx ../x/model.onnx; do
    d=$BATS_TEST_TMPDIR/fn-$((n += 1)) # one directory each ($RANDOM once drew the same number twice)
    mkdir -p "$d/onnx"
    for f in "$src"/*; do ln -s "$f" "$d/"; done
    rm "$d/genai_config.json"
    jq --arg f "$fn" '.model.decoder.filename = $f' "$src/genai_config.json" >"$d/genai_config.json"
    if [[ "$fn" == *onnx/* ]]; then rm "$d/model.onnx" "$d/model.onnx.data"; ln -s "$src/model.onnx" "$src/model.onnx.data" "$d/onnx/"; fi
    if [ "$fn" = ../x/model.onnx ]; then
      run oga-info -q "$d"
      echo "$output" | jq -e '[.refusals[] | select(.what == "genai_config.json: model.decoder.filename" and .code == "config_type")] | length == 1'
      continue
    fi
    oga-extract "$d" | q4nx-pack -o "$d/m.q4nx"
    [ "$(npu-forward logits -m "$d/m.q4nx" -t 1 --ids "$BATS_TEST_TMPDIR/ids.json" --top-logits 3)" = "$ref" ] || { echo "$fn differs"; return 1; }
  done
}
# onnxruntime-genai maps the inputs it feeds to the graph's names (decoder.inputs): a graph with other
# names was refused as having no embedding, under one "unassigned" refusal per weight
@test "decoder.inputs names the graph's input_ids and attention_mask: imported as the plain pack; a wrong name refused once, by name" {
  local src d ids
  for style in cpu amd; do
    src=$(fixture qwen2 $style tied)
    d=$(mutated $style rename-inputs)
    rm "$d/genai_config.json"
    jq '.model.decoder.inputs.input_ids = "tokens" | .model.decoder.inputs.attention_mask = "attn_mask"' "$src/genai_config.json" >"$d/genai_config.json"
    run oga-info -q "$d"
    [ "$status" -eq 0 ] || { echo "$style: $output" | jq -c .refusals; return 1; }
    oga-extract "$src" | q4nx-pack -o "$BATS_TEST_TMPDIR/a.q4nx"
    oga-extract "$d" | q4nx-pack -o "$BATS_TEST_TMPDIR/b.q4nx"
    echo '[1, 2, 3, 4]' >"$BATS_TEST_TMPDIR/ids.json"
    [ "$(npu-forward logits -m "$BATS_TEST_TMPDIR/a.q4nx" -t 1 --ids "$BATS_TEST_TMPDIR/ids.json" --top-logits 3)" = \
      "$(npu-forward logits -m "$BATS_TEST_TMPDIR/b.q4nx" -t 1 --ids "$BATS_TEST_TMPDIR/ids.json" --top-logits 3)" ]
  done
  jq '.model.decoder.inputs.input_ids = "nope"' "$src/genai_config.json" >"$d/genai_config.json"
  run --separate-stderr oga-info "$d"
  [ "$status" -eq 3 ]
  echo "$output" | jq -e '[.refusals[] | select(.code == "graph" and (.reason | contains("no graph input named \"nope\"")))] | length == 1'
  echo "$output" | jq -e '[.refusals[] | select(.code == "unassigned")] | length == 1'
}
@test "refused: a node name in model.onnx that is not UTF-8 (not_utf8)" { mutation_case latin1-name not_utf8 model.onnx; }
@test "a pack directory whose name is not UTF-8: the report's pack field shows '?' for the bad byte" {
  local src d f
  src=$(fixture qwen2 cpu tied)
  d=$BATS_TEST_TMPDIR/$'pack-\xe9'
  mkdir -p "$d"
  for f in "$src"/*; do ln -s "$f" "$d/"; done
  run oga-info -q "$d"
  [ "$status" -eq 0 ] || { echo "status $status: $output"; return 1; }
  [ "$(echo "$output" | jq -r '.pack | endswith("/pack-?")')" = true ]
  oga-extract -o "$BATS_TEST_TMPDIR/s.ogax" "$d"   # its provenance names the pack the same way
  [ "$(oga-extract --check "$BATS_TEST_TMPDIR/s.ogax" | jq .ok)" = true ]
  oga-extract "$d" | q4nx-pack -o "$BATS_TEST_TMPDIR/m.q4nx"
  run q4nx-verify "$BATS_TEST_TMPDIR/m.q4nx" --pack "$d"
  [ "$status" -eq 0 ] && [ "$(echo "$output" | jq -r '.pack.dir | endswith("/pack-?")')" = true ] || false
}
@test "a GatherBlockQuantized padded copy that does not fit in memory: refused (out_of_memory, exit 4), no abort" {
  skip_under_san "ASan's own reservations run into the data limit"
  local d=$BATS_TEST_TMPDIR/gbq-huge
  /usr/bin/python3 "$TOP/t/pack-mutate.py" "$(fixture llama amd untied)" "$d" gbq-huge
  run bash -c "ulimit -d 700000 && oga-info -q '$d'"   # KiB: below the 1 GiB copy, above the rest
  [ "$status" -eq 4 ] || { echo "status $status: $output"; return 1; }
  echo "$output" | jq -e '[.refusals[] | select(.code == "out_of_memory" and .what == "tensor huge.gbq.data")] | length == 1'
}
@test "refused: a bias fused into an MLP MatMulNBits (input 5)" { mutation_case fused-mlp-bias unsupported_op gate.fused_bias; }
@test "q/k/v biases fused into their MatMulNBits (input 5): importable, qkv_bias, same bytes" {
  importable_mutation qwen2 tied fused-bias
  run oga-info -q "$BATS_TEST_TMPDIR/mut-amd-fused-bias"
  [ "$(echo "$output" | jq -c '[.qkv_bias, .by_role["attn.q_bias"].count, .by_role["attn.v_bias"].count]')" = '[true,2,2]' ]
}
@test "the model's accuracy_level is null when some MatMulNBits has none (absent or mixed, ogax(5))" {
  local src d=$BATS_TEST_TMPDIR/acc-partial
  src=$(fixture qwen2 cpu tied tiny 4)
  oga-extract -o "$BATS_TEST_TMPDIR/a.ogax" "$src"
  [ "$(oga-extract --check "$BATS_TEST_TMPDIR/a.ogax" | jq .model.accuracy_level)" = 4 ]
  /usr/bin/python3 "$TOP/t/pack-mutate.py" "$src" "$d" acc-partial
  oga-extract -o "$BATS_TEST_TMPDIR/b.ogax" "$d"
  [ "$(oga-extract --check "$BATS_TEST_TMPDIR/b.ogax" | jq .model.accuracy_level)" = null ]
}
@test "refused: a node between lm_head and the logits (Relu), a soft cap whose Div and Mul differ, an embedding scaled by an input" {
  local d
  run --separate-stderr oga-info -q "$(mutated cpu logits-relu)"
  [ "$status" -eq 3 ] || { echo "status $status"; return 1; }
  echo "$output" | jq -e '[.refusals[] | select(.code == "unsupported_op" and (.reason | contains("reaches the logits through /lm_head/Relu")))] | length == 1'
  for m in softcap-unequal embed-input-scale; do
    d=$BATS_TEST_TMPDIR/g2-$m
    /usr/bin/python3 "$TOP/t/pack-mutate.py" "$(fixture gemma2 cpu tied)" "$d" $m
    run --separate-stderr oga-info -q "$d"
    [ "$status" -eq 3 ] || { echo "$m: status $status"; return 1; }
    echo "$output" | jq -c .refusals
    case $m in
      softcap-unequal) echo "$output" | jq -e '[.refusals[] | select(.code == "unsupported_op" and (.reason | contains("/lm_head/softcap/Div")))] | length == 1' ;;
      embed-input-scale) echo "$output" | jq -e '[.refusals[] | select(.code == "unsupported_op" and (.reason | contains("scales the embedding by embed_scale, not by a positive constant")))] | length == 1' ;;
    esac
  done
}
@test "GroupQueryAttention without a scale attribute (the default 1/sqrt(head_dim)) imports" {
  local s
  for s in cpu amd; do
    run oga-info -q "$(mutated "$s" gqa-scale-default)"
    [ "$status" -eq 0 ] || { echo "$s: $output"; return 1; }
  done
}

@test "inline initializers (raw_data, float_data, fp16 in int32_data) import byte for byte" {
  local s d
  for s in cpu amd; do
    d=$(mutated "$s" inline-norms)
    run oga-info -q "$d"
    [ "$status" -eq 0 ] || { echo "$output" | jq -c .refusals; return 1; }
    oga-extract -o "$BATS_TEST_TMPDIR/s.ogax" "$d"
    run /usr/bin/python3 "$TOP/t/oga-extract-check.py" "$d" "$BATS_TEST_TMPDIR/s.ogax"
    [ "$status" -eq 0 ] || { echo "$s: $output"; return 1; }
  done
}

# regression (fuzz/pack_onnx): the value table grew under a pending g->v[val_get(..)] store, which
# wrote into the freed table when the compiler loaded g->v first (clang does; run under SAN=1 or make fuzz)
@test "a graph with more values than the first value-table allocation reads clean" {
  local s d
  for s in cpu amd; do
    d=$(mutated "$s" many-values)
    run --separate-stderr oga-info -q "$d"
    [ "$status" -eq 0 ] || { echo "$s: status $status $stderr"; echo "$output" | jq -c .refusals; return 1; }
  done
}

# importable variants of the builder graph: the independent checker derives every role from the
# builder's initializer names and compares every byte with what onnx loads
importable_mutation() { # FAMILY TIE MUTATION
  local s d
  for s in cpu amd; do
    d=$BATS_TEST_TMPDIR/mut-$s-$3
    /usr/bin/python3 "$TOP/t/pack-mutate.py" "$(fixture "$1" "$s" "$2")" "$d" "$3"
    run oga-info -q "$d"
    [ "$status" -eq 0 ] || { echo "$s:"; echo "$output" | jq -c .refusals; return 1; }
    oga-extract -o "$BATS_TEST_TMPDIR/s.ogax" "$d"
    run /usr/bin/python3 "$TOP/t/oga-extract-check.py" "$d" "$BATS_TEST_TMPDIR/s.ogax"
    [ "$status" -eq 0 ] || { echo "$s: $output"; return 1; }
  done
}

@test "residual stream as Add + SimplifiedLayerNormalization (no Skip norms): same roles, same bytes" {
  importable_mutation qwen3 tied add-residual
}

@test "an embedding with its own GatherBlockQuantized (block 32 symmetric; block 128 padded, zero points)" {
  importable_mutation llama untied gbq-embed
  run oga-info -t -q "$BATS_TEST_TMPDIR/mut-amd-gbq-embed"
  [ "$(echo "$output" | jq -c '.tensors[] | select(.role == "embed") | [.dtype, .quant.source_op, .quant.block_size, .quant.zero_points]')" = \
    '["q4","GatherBlockQuantized",128,"u4"]' ]
  [ "$(echo "$output" | jq .tie_embeddings)" = false ]
}

@test "a pack another user cannot read: the permission named (not 'not an OGA pack'), each refusal once" {
  [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null || skip "needs root and setpriv to run as nobody"
  # a directory nobody can reach (the test's own is inside bats' private one)
  local d
  d=$(mktemp -d /tmp/ogk-perm.XXXXXX) && chmod 755 "$d" && echo "$d" > "$BATS_TEST_TMPDIR/perm-dir"
  cp -r "$TOP/share/models/pytiny-draft" "$d/pk"
  chmod -R a+rX "$d/pk" && chmod 700 "$d/pk"
  as_nobody() { setpriv --reuid=nobody --regid=nogroup --clear-groups "$@"; }
  as_nobody oga-info -q "$TOP/share/models/pytiny-draft" >/dev/null || skip "nobody cannot run the programs here"
  run as_nobody oga-info "$d/pk"
  [ "$status" -eq 3 ] && [[ "$output" == *"cannot read the directory: Permission denied"* ]] || false
  chmod 755 "$d/pk" && chmod 600 "$d/pk/genai_config.json"
  run --separate-stderr as_nobody oga-info -q "$d/pk"
  [ "$status" -eq 3 ]
  [ "$(echo "$output" | jq '[.refusals[] | select(.code == "file_unreadable")] | length')" = 1 ]
  echo "$output" | jq -e '.refusals[0].reason | test("Permission denied")'
}

teardown() { [ ! -f "$BATS_TEST_TMPDIR/perm-dir" ] || rm -rf "$(cat "$BATS_TEST_TMPDIR/perm-dir")"; }

# Every node inside a block is one the runtime computes, or the pack is refused with the block named.
# Each of these edits was imported before and ran as if the node were not there (review of session 36).
@test "refused: a node inside a block the runtime does not compute (Relu, Div for the product, Mul by 2, a bypassed down_proj)" {
  mutate_both relu-down div-gate-up mul2-up down-bypass relu-attn relu-o relu-qkv
  mutation_case relu-down unsupported_op "layer 0 mlp"
  mutation_case div-gate-up unsupported_op "layer 0 mlp"
  mutation_case mul2-up unsupported_op "layer 0 mlp"
  mutation_case down-bypass unsupported_op "layer 0 mlp"
  mutation_case relu-attn unsupported_op "layer 0 attention"
  mutation_case relu-o unsupported_op "layer 0 attention"
  mutation_case relu-qkv unsupported_op "layer 0 attention"
  # the refusal names the node
  run oga-info -q "$(mutated cpu relu-down)"
  echo "$output" | jq -e '[.refusals[] | select(.reason | contains("Relu /mutate/Relu"))] | length == 1'
}
# refused_once "FIXTURE ARGS" MUTATION WHAT: the mutant of that fixture is refused (exit 3), with exactly one
# unsupported_op refusal of WHAT
refused_once() {
  local d=$BATS_TEST_TMPDIR/${1// /-}-$2
  /usr/bin/python3 "$TOP/t/pack-mutate.py" "$(fixture $1)" "$d" "$2"
  run --separate-stderr oga-info -q "$d"
  [ "$status" -eq 3 ] || { echo "$1 $2: $status"; return 1; }
  echo "$output" | jq -e --arg w "$3" '[.refusals[] | select(.what == $w and .code == "unsupported_op")] | length == 1' ||
    { echo "$1 $2: $output"; return 1; }
}
@test "refused: q and k not rotated once in a layer (RotaryEmbedding removed, one removed, one added); a Split of q|k|v out of order" {
  local f m d
  for f in "qwen2 amd tied" "llama amd untied"; do
    for m in rotary-none rotary-q-only rotary-twice; do
      refused_once "$f" "$m" "layer 0 attention"
    done
  done
  d=$BATS_TEST_TMPDIR/qwen3-split-swap
  /usr/bin/python3 "$TOP/t/pack-mutate.py" "$(fixture qwen3 cpu tied)" "$d" split-swap
  run --separate-stderr oga-info -q "$d"
  [ "$status" -eq 3 ]
  echo "$output" | jq -e '[.refusals[] | select(.what == "layer 0 attention" and (.reason | contains("q, k, v out of order")))] | length == 1'
}
# the logits are the graph output genai_config.json names, and every graph input read is one the runtime feeds
@test "refused: logits taken from another output than decoder.outputs.logits; a graph input decoder.inputs does not name" {
  local s src d
  mutation_case logits-raw-output unsupported_op graph
  for s in cpu amd; do
    src=$(fixture qwen2 $s tied)
    d=$BATS_TEST_TMPDIR/names-$s
    mkdir -p "$d"
    ln -sf "$src"/* "$d/"
    rm "$d/genai_config.json"
    jq '.model.decoder.outputs.logits = "nonexistent"' "$src/genai_config.json" >"$d/genai_config.json"
    run --separate-stderr oga-info -q "$d"
    [ "$status" -eq 3 ]
    echo "$output" | jq -e '[.refusals[] | select(.what == "graph" and (.reason | contains("\"nonexistent\"")))] | length == 1'
    jq '.model.decoder.inputs.position_ids = "nope"' "$src/genai_config.json" >"$d/genai_config.json"
    run --separate-stderr oga-info -q "$d"
    if [ $s = amd ]; then # its graph reads position_ids, which the runtime would no longer feed
      [ "$status" -eq 3 ]
      echo "$output" | jq -e '[.refusals[] | select(.what == "graph input position_ids" and .code == "graph")] | length == 1'
    else                  # its graph has no position_ids input: nothing changes
      [ "$status" -eq 0 ]
    fi
  done
}
# the runtime gathers the embedding's rows: another gather or quantisation axis was imported as rows
@test "refused: an embedding gathered along axis 1 (float Gather, GatherBlockQuantized tied or not) or quantised along axis 0" {
  local f m
  for f in "qwen2 cpu tied" "qwen2 cpu untied" "qwen2 amd untied" "qwen2 amd tied"; do
    for m in embed-axis embed-qaxis; do
      [ $m = embed-qaxis ] && [[ "$f" != *" tied" ]] && continue
      refused_once "$f" "$m" "tensor embed"
    done
  done
}
# a 20 MiB chat template went into the OGAX model frame's header, past the 16 MiB every reader takes:
# oga-extract exited 0 with a stream q4nx-pack refused
@test "refused: a chat template over 1 MiB (chat_template.jinja or tokenizer_config.json's), by oga-info and oga-extract" {
  local src d
  src=$(fixture qwen2 cpu tied)
  d=$BATS_TEST_TMPDIR/bigtpl
  mkdir -p "$d"
  ln -s "$src"/* "$d/"
  rm -f "$d/chat_template.jinja"
  head -c $((20 << 20)) /dev/zero | tr '\0' 'x' >"$d/chat_template.jinja"
  run --separate-stderr oga-info -q "$d"
  [ "$status" -eq 3 ]
  echo "$output" | jq -e '[.refusals[] | select(.code == "too_large" and .what == "file chat_template.jinja")] | length == 1'
  run --separate-stderr oga-extract -o "$BATS_TEST_TMPDIR/x.ogax" "$d"
  [ "$status" -eq 3 ]
  [ ! -e "$BATS_TEST_TMPDIR/x.ogax" ]
  rm "$d/chat_template.jinja" "$d/tokenizer_config.json"
  jq --rawfile t <(head -c $((2 << 20)) /dev/zero | tr '\0' 'y') '.chat_template = $t' "$src/tokenizer_config.json" >"$d/tokenizer_config.json"
  run --separate-stderr oga-info -q "$d"
  [ "$status" -eq 3 ]
  echo "$output" | jq -e '[.refusals[] | select(.code == "too_large" and .what == "file tokenizer_config.json: chat_template")] | length == 1'
}
# what onnxruntime refuses as a graph, refused by name (each was imported: ops matched by op_type alone,
# a value defined twice, an integer attribute of another type taken for absent)
@test "refused: a known op in another domain, a node writing an initializer's name, num_heads as a float" {
  mutate_both domain-evil init-redefined heads-float
  mutation_case domain-mnb unsupported_op "node /model/layers.0/attn/q"
  mutation_case domain-evil unsupported_op "node /model/layers.0/attn/GroupQueryAttention"
  mutation_case init-redefined graph "node /mutate/Identity"
  mutation_case heads-float unsupported_op "node /model/layers.1/attn/GroupQueryAttention"
  run oga-info -q "$(mutated cpu domain-evil)"
  echo "$output" | jq -e '[.refusals[] | select(.reason | contains("in domain \"com.evil\""))] | length == 2'
}
# stderr has one line per refusal: a line feed in a name split it in two
@test "oga-info: a name with a line feed keeps one stderr line per refusal ('?' for it); the JSON keeps the name" {
  local d
  d=$(mutated cpu newline-name)
  run --separate-stderr oga-info -q "$d"
  [ "$status" -eq 3 ]
  echo "$output" | jq -e '[.refusals[] | select(.what == "tensor stray\nweight")] | length == 1'
  run --separate-stderr oga-info "$d"
  n=$(echo "$output" | jq '.refusals | length')
  [ "$(printf '%s\n' "$stderr" | grep -c '^oga-info: refused: ')" -eq "$n" ]
  [ "$(printf '%s\n' "$stderr" | grep -c .)" -eq "$n" ]
  [[ "$stderr" == *"refused: tensor stray?weight: "* ]]
}
# a value the runtime would compute NaN from, or replace by a default, is refused, not replaced
@test "refused: a negative norm epsilon in the graph; rope_theta, rms_norm_eps, partial_rotary_factor out of range in config.json" {
  local src d k v
  mutation_case norm-eps-negative unsupported_op layers.0.input_norm
  src=$(fixture qwen2 cpu tied)
  d=$BATS_TEST_TMPDIR/cfg-range
  mkdir -p "$d"
  ln -sf "$src"/* "$d/"
  for kv in rope_theta=-5 rope_theta=0 rms_norm_eps=-1e-6 partial_rotary_factor=1.5 partial_rotary_factor=0; do
    k=${kv%%=*} v=${kv#*=}
    rm -f "$d/config.json"
    jq --arg k "$k" --argjson v "$v" '.[$k] = $v' "$src/config.json" >"$d/config.json"
    run --separate-stderr oga-info -q "$d"
    [ "$status" -eq 3 ] || { echo "$kv: $status"; return 1; }
    echo "$output" | jq -e --arg w "config.json: $k" '[.refusals[] | select(.what == $w and .code == "config_type")] | length == 1'
  done
  rm -f "$d/config.json"
  jq '.partial_rotary_factor = 1' "$src/config.json" >"$d/config.json"
  run -0 oga-info -q "$d"
}
# the builder fuses Qwen3's per-head q/k norms into GroupQueryAttention for CUDA / WebGPU (inputs 14, 15):
# those weights were refused as unassigned; the same model otherwise
@test "fused q/k norms on GroupQueryAttention's inputs 14 and 15 import as q_norm / k_norm: the same logits as the norm nodes" {
  local src d
  src=$(fixture qwen3 cpu tied)
  d=$BATS_TEST_TMPDIR/fused
  /usr/bin/python3 "$TOP/t/pack-mutate.py" "$src" "$d" fused-qknorm
  run --separate-stderr oga-info -q "$d"
  [ "$status" -eq 0 ] || { echo "$output" | jq -c .refusals; return 1; }
  echo "$output" | jq -e '.qk_norm == true and .by_role["attn.q_norm"].count == 2 and .by_role["attn.k_norm"].count == 2'
  oga-extract "$src" | q4nx-pack -o "$BATS_TEST_TMPDIR/a.q4nx"
  oga-extract "$d" | q4nx-pack -o "$BATS_TEST_TMPDIR/b.q4nx"
  echo '[1, 2, 3, 4]' >"$BATS_TEST_TMPDIR/ids.json"
  [ "$(npu-forward logits -m "$BATS_TEST_TMPDIR/a.q4nx" -t 1 --ids "$BATS_TEST_TMPDIR/ids.json" --top-logits 3)" = \
    "$(npu-forward logits -m "$BATS_TEST_TMPDIR/b.q4nx" -t 1 --ids "$BATS_TEST_TMPDIR/ids.json" --top-logits 3)" ]
}
# positions computed in the graph (the builder's DML LongRoPE reformatting) are not the runtime's: refused
@test "refused: RotaryEmbedding positions computed in the graph, not the position_ids input" {
  local f d
  for f in "qwen2 amd tied" "phi3 amd tied hd96 0 fp32"; do
    d=$BATS_TEST_TMPDIR/pos-${f// /-}
    /usr/bin/python3 "$TOP/t/pack-mutate.py" "$(fixture $f)" "$d" posids-reformat
    run --separate-stderr oga-info -q "$d"
    [ "$status" -eq 3 ]
    echo "$output" | jq -e '[.refusals[] | select(.what == "layer 0 attention" and (.reason | contains("not the graph input position_ids")))] | length >= 1'
  done
}
