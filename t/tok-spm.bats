#!/usr/bin/env bats
# SentencePiece tokenizer.model (lib/tok/spm.c: tok_spm_json) against the sentencepiece library itself
# (Debian python3-sentencepiece, through tools/spm-golden.py; nothing here is a stored expectation).
# The models are trained now on t/corpus with the options real packs use (Llama 2: byte fallback,
# dummy prefix, spaces kept; the trainer's default: spaces squeezed; no dummy prefix and unescaped
# spaces; no dummy prefix with spaces squeezed; a dummy prefix with spaces unescaped; user-defined
# symbols; the nmt_nfkc and nmt_nfkc_cf character maps, ChatGLM's kind).
# Inputs: t/corpus line by line and whole, t/corpus/edge.jsonl.
load helpers
bats_require_minimum_version 1.5.0

spg() { /usr/bin/python3 "$TOP/tools/spm-golden.py" "$@"; }

setup_file() {
  export W=$(mktemp -d "${BATS_FILE_TMPDIR:-/tmp}/ogk-spm.XXXXXX")
  spg train "$TOP/t/corpus" "$W/m"
  for m in llama squeeze bare nodummy unesc userdef nfkc nfkccf; do
    echo '{"clean_up_tokenization_spaces": false}' > "$W/m/$m/tokenizer_config.json"
  done
  /usr/bin/python3 - "$TOP/t/corpus" "$W" <<'EOF'
import glob, json, os, sys
src, w = sys.argv[1], sys.argv[2]
ins = [json.loads(l) for l in open(os.path.join(src, "edge.jsonl"), encoding="utf-8")]
for f in sorted(glob.glob(os.path.join(src, "*"))):
    if f.endswith((".jsonl", "README")):
        continue
    t = open(f, encoding="utf-8").read()
    ins += t.split("\n") + [t]
ins += ["  two  leading", "trailing   ", "   ", " x", "x ", "a \t b\n  c  ", "\u65e5\u672c\u8a9e \U0001F600 ok"]
# text holding a control piece's spelling is encoded as transformers' converted tokenizers do (the
# piece is a special token: checked below), not as spm_encode spells it out
ctl = ("<s>", "</s>", "<unk>")
with open(os.path.join(w, "in.jsonl"), "w") as o:
    for s in ins:
        if not any(c in s for c in ctl):
            o.write(json.dumps(s, ensure_ascii=False) + "\n")
EOF
}

teardown_file() { rm -rf "$W"; }

# same JSON lines in two files (parsed, so spacing does not count); the first difference named
same_lines() {
  /usr/bin/python3 - "$1" "$2" "$W/in.jsonl" <<'EOF'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]
b = [json.loads(l) for l in open(sys.argv[2], encoding="utf-8")]
src = [json.loads(l) for l in open(sys.argv[3], encoding="utf-8")]
bad = [i for i in range(max(len(a), len(b))) if i >= len(a) or i >= len(b) or a[i] != b[i]]
if len(a) < 100 or bad:
    i = bad[0] if bad else -1
    sys.exit("%d / %d lines differ; first: line %d %r\n sentencepiece %s\n ogakit        %s"
             % (len(bad), len(a), i + 1, src[i][:120] if 0 <= i < len(src) else "",
                str(a[i])[:400] if 0 <= i < len(a) else "-", str(b[i])[:400] if 0 <= i < len(b) else "-"))
print("%d lines identical" % len(a))
EOF
}

@test "tokenizer.model: ids identical to sentencepiece for eight BPE option sets (byte fallback or <unk>, dummy prefix or not, spaces squeezed or kept, escaped or not, user-defined symbols, nmt_nfkc / nmt_nfkc_cf maps)" {
  # (the sanitizer run takes three: byte fallback, <unk> with a character map and squeezed spaces, no
  # dummy prefix; the others go through the same C)
  local ms=(llama squeeze bare nodummy unesc userdef nfkc nfkccf)
  [ "${OGAKIT_SAN:-0}" = 1 ] && ms=(llama nfkc bare)
  for m in "${ms[@]}"; do
    spg encode "$W/m/$m" < "$W/in.jsonl" > "$W/$m.gold"
    npu-forward tokenize --jsonl --no-special --tokenizer "$W/m/$m" < "$W/in.jsonl" > "$W/$m.ids"
    run -0 same_lines "$W/$m.gold" "$W/$m.ids"
    echo "$m: $output"
  done
  # the goldens mean something: the option sets encode differently, and merged pieces (ids past the
  # 3 control and 256 byte pieces) are most of what llama's encoding uses
  run -1 cmp -s "$W/llama.gold" "$W/nfkc.gold"
  run -1 cmp -s "$W/bare.gold" "$W/nfkc.gold"
  run -0 jq -se 'map(.[]) | map(select(. >= 259)) | length > 1000' "$W/llama.gold"
}

@test "tokenizer.model: decodes as sentencepiece (byte pieces, dummy prefix, unescaped spaces, mapped text)" {
  local ms=(llama bare nodummy unesc userdef squeeze nfkc nfkccf)
  [ "${OGAKIT_SAN:-0}" = 1 ] && ms=(llama nfkc)
  for m in "${ms[@]}"; do
    [ -s "$W/$m.gold" ] || spg encode "$W/m/$m" < "$W/in.jsonl" > "$W/$m.gold"
    # U+FEFF from byte pieces is dropped, as lib/tok's byte-fallback decoder does after transformers.js
    # (tok.bats checks that against it), and <unk> (id 0) reads "<unk>" where sentencepiece writes
    # " ⁇ ", as transformers' tokenizers do: compared on the lines without them
    paste -d '\t' "$W/in.jsonl" "$W/$m.gold" | grep -v $'\xef\xbb\xbf' | grep -v '\\ufeff' | cut -f2 |
      jq -c 'select(index(0) == null)' > "$W/$m.dgold"
    [ "$(wc -l < "$W/$m.dgold")" -gt 5000 ]
    spg decode "$W/m/$m" < "$W/$m.dgold" > "$W/$m.gtxt"
    npu-forward detokenize --jsonl --tokenizer "$W/m/$m" < "$W/$m.dgold" > "$W/$m.txt"
    run -0 same_lines "$W/$m.gtxt" "$W/$m.txt"
    echo "$m: $output"
  done
}

@test "tokenizer.model: BOS as tokenizer_config.json says (add_bos_token, default on; add_eos_token); control pieces in text are special tokens" {
  d=$W/m/llama
  read -r bos eos unk < <(spg info "$d" | jq -r '"\(.bos) \(.eos) \(.unk)"')
  gold=$(echo '"Hello world"' | spg encode "$d" | jq -c .)
  run -0 npu-forward tokenize --tokenizer "$d" "Hello world"
  [ "$(jq -c . <<<"$output")" = "$(jq -c --argjson b "$bos" "[\$b] + $gold" <<<null)" ]
  cp -r "$d" "$W/noboseos"
  echo '{"add_bos_token": false, "add_eos_token": true, "eos_token": "</s>"}' > "$W/noboseos/tokenizer_config.json"
  run -0 npu-forward tokenize --tokenizer "$W/noboseos" "Hello world"
  [ "$(jq -c . <<<"$output")" = "$(jq -c --argjson e "$eos" "$gold + [\$e]" <<<null)" ]
  # "<s>hello</s>": BOS, "hello" with its dummy prefix, EOS (as transformers' converted Llama tokenizer)
  h=$(echo '"hello"' | spg encode "$d" | jq -c .)
  run -0 npu-forward tokenize --no-special --tokenizer "$d" "<s>hello</s><unk>"
  [ "$(jq -c . <<<"$output")" = "$(jq -c --argjson b "$bos" --argjson e "$eos" --argjson u "$unk" "[\$b] + $h + [\$e, \$u]" <<<null)" ]
  # they decode as their spelling, and --skip-special drops them
  run -0 npu-forward detokenize --tokenizer "$d" "[$bos, $(jq -r 'join(",")' <<<"$h"), $eos]"
  [ "$output" = "<s> hello</s>" ] || [ "$output" = "<s>hello</s>" ]
  run -0 npu-forward detokenize --skip-special --tokenizer "$d" "[$bos, $(jq -r 'join(",")' <<<"$h"), $eos]"
  [ "$output" = "hello" ]
}

@test "tokenizer.model: user-defined symbols are single tokens wherever they occur" {
  d=$W/m/userdef
  sep=$(spg info "$d" | jq '.user["<sep>"]')
  ctx=$(spg info "$d" | jq '.user["[CTX]"]')
  [ "$sep" -gt 0 ] && [ "$ctx" -gt 0 ] || false
  a=$(echo '"left side"' | spg encode "$d" | jq -c .)
  b=$(echo '"right"' | spg encode "$d" | jq -c .)
  run -0 npu-forward tokenize --no-special --tokenizer "$d" "left side<sep>right[CTX]"
  [ "$(jq -c . <<<"$output")" = "$(jq -c --argjson s "$sep" --argjson c "$ctx" "$a + [\$s] + $b + [\$c]" <<<null)" ]
}

@test "tokenizer.model: added_tokens_decoder naming a normal piece makes it an added token; ChatGLM's tokens keep their ids when a piece spells one" {
  # a normal piece (no U+2581, three or more letters) named in added_tokens_decoder is matched whole in
  # text, as transformers matches added tokens: alone it is its own id, where sentencepiece (dummy
  # prefix) spells the text otherwise
  d=$W/m/llama
  read -r k piece < <(/usr/bin/python3 - "$d/tokenizer.model" <<'PY'
import sys
from sentencepiece import sentencepiece_model_pb2 as pb
m = pb.ModelProto(); m.ParseFromString(open(sys.argv[1], "rb").read())
k = next(i for i, p in enumerate(m.pieces) if p.type == 1 and len(p.piece) >= 3 and p.piece.isalpha())
print(k, m.pieces[k].piece)
PY
  )
  sp=$(jq -cn --arg p "$piece" '$p' | spg encode "$d" | jq -c .)
  [ "$sp" != "[$k]" ]
  cp -r "$d" "$W/atd"
  jq -n --arg p "$piece" --arg k "$k" '{added_tokens_decoder: {($k): {content: $p, special: true}}}' > "$W/atd/tokenizer_config.json"
  run -0 npu-forward tokenize --no-special --tokenizer "$W/atd" "$piece"
  [ "$(jq -c . <<<"$output")" = "[$k]" ]
  run -0 npu-forward detokenize --skip-special --tokenizer "$W/atd" "[$k]"
  [ "$output" = "" ]
  # ChatGLM: a piece renamed "sop" moves neither sop (piece count + 3) nor the tokens after it
  g=$W/glmsop
  mkdir -p "$g"
  /usr/bin/python3 - "$d/tokenizer.model" "$g/tokenizer.model" "$k" <<'PY'
import sys
from sentencepiece import sentencepiece_model_pb2 as pb
m = pb.ModelProto(); m.ParseFromString(open(sys.argv[1], "rb").read())
m.pieces[int(sys.argv[3])].piece = "sop"
open(sys.argv[2], "wb").write(m.SerializeToString())
PY
  echo '{"tokenizer_class": "ChatGLMTokenizer", "clean_up_tokenization_spaces": false}' > "$g/tokenizer_config.json"
  n=$(spg info "$d" | jq .pieces)
  run -0 npu-forward tokenize --no-special --tokenizer "$g" "sop"
  [ "$(jq -c . <<<"$output")" = "[$((n + 3))]" ]
  run -0 npu-forward tokenize --no-special --tokenizer "$g" "<|user|>"
  [ "$(jq -c . <<<"$output")" = "[$((n + 6))]" ]
}

@test "tokenizer.model: ChatGLM (tokenizer_class ChatGLMTokenizer): its nine tokens after the pieces, the [gMASK] sop prefix, its chat template" {
  d=$W/glm
  cp -r "$W/m/llama" "$d"
  n=$(spg info "$d" | jq .pieces)
  cat > "$d/tokenizer_config.json" <<'EOF'
{"tokenizer_class": "ChatGLMTokenizer", "clean_up_tokenization_spaces": false, "eos_token": "</s>",
 "chat_template": "{% for message in messages %}{% if loop.first %}[gMASK]sop<|{{ message['role'] }}|>\n {{ message['content'] }}{% else %}<|{{ message['role'] }}|>\n {{ message['content'] }}{% endif %}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"}
EOF
  # tokenization_chatglm.py: [MASK] [gMASK] [sMASK] sop eop <|system|> <|user|> <|assistant|> <|observation|>
  k=0 # (not i: bats' run changes it)
  for t in '[MASK]' '[gMASK]' '[sMASK]' sop eop '<|system|>' '<|user|>' '<|assistant|>' '<|observation|>'; do
    run -0 npu-forward tokenize --no-special --tokenizer "$d" "$t"
    [ "$(jq -c . <<<"$output")" = "[$((n + k))]" ]
    k=$((k + 1))
  done
  hi=$(echo '"hi"' | spg encode "$d" | jq -c .)
  run -0 npu-forward tokenize --tokenizer "$d" "hi"
  [ "$(jq -c . <<<"$output")" = "$(jq -c "[$((n + 1)), $((n + 3))] + $hi" <<<null)" ]
  # the chat template's prompt: each text section encoded as sentencepiece does a separate call
  msg=$(echo '"\n hello there"' | spg encode "$d" | jq -c .)
  run -0 npu-forward chat --ids --add-generation-prompt --tokenizer "$d" <<<'[{"role": "user", "content": "hello there"}]'
  [ "$(jq -c . <<<"$output")" = "$(jq -c "[$((n + 1)), $((n + 3)), $((n + 6))] + $msg + [$((n + 7))]" <<<null)" ]
}

@test "tokenizer.model: a pack with no tokenizer.json imports, runs, and carries the converted tokenizer (oga-info, oga-extract, -m)" {
  src=$(fixture chatglm cpu tied hd64)
  p=$W/pack
  cp -r "$src" "$p"
  rm "$p/tokenizer.json"
  cp "$W/m/llama/tokenizer.model" "$p/"
  echo '{"tokenizer_class": "ChatGLMTokenizer", "clean_up_tokenization_spaces": false, "eos_token": "</s>"}' > "$p/tokenizer_config.json"
  run -0 oga-info "$p"
  [ "$(jq -r '.files.tokenizer_json_from' <<<"$output")" = tokenizer.model ]
  oga-extract "$p" | q4nx-pack -l b8 -o "$W/glm.q4nx"
  npu-forward tokenize --jsonl -m "$W/glm.q4nx" < "$W/in.jsonl" > "$W/c.ids"
  npu-forward tokenize --jsonl --tokenizer "$p" < "$W/in.jsonl" > "$W/d.ids"
  cmp "$W/c.ids" "$W/d.ids"
  run -0 npu-forward run -m "$W/glm.q4nx" -n 4 -p "Hello" --json
  [ "$(jq '.ids | length' <<<"$output")" -eq 4 ]
  [ "$(jq -c '.prompt_ids[:2]' <<<"$output")" = "[$(($(spg info "$p" | jq .pieces) + 1)),$(($(spg info "$p" | jq .pieces) + 3))]" ]
}

@test "tokenizer.model: q4nx-gguf converts such a pack, and says that llama.cpp does not apply a character map" {
  for m in llama nfkccf; do
    p=$W/gg-$m
    cp -r "$(fixture chatglm cpu tied hd128 0 fp16)" "$p"
    rm "$p/tokenizer.json"
    cp "$W/m/$m/tokenizer.model" "$p/"
    oga-extract "$p" | q4nx-pack -o "$W/gg.q4nx"
    run -0 q4nx-gguf --widen -o "$W/gg.gguf" "$W/gg.q4nx"
    if [ $m = nfkccf ]; then [[ "$output" == *"SentencePiece character map"* ]]; else [[ "$output" != *"character map"* ]]; fi
    [ -s "$W/gg.gguf" ]
    rm -rf "$p" "$W/gg.q4nx" "$W/gg.gguf"
  done
}

@test "Precompiled: a rule whose key ends inside a character is ignored (the text after it would start mid-character)" {
  # a hand-made map (darts-clone units): "\xe3\x81" (two bytes of a three-byte character) -> "", and
  # "\xf0\x9f\x98\x80" (U+1F600, whole) -> "", over a byte-fallback vocabulary of the 256 bytes
  mkdir -p "$W/hm"
  /usr/bin/python3 - "$W/hm/tokenizer.json" <<'EOF'
import base64, json, struct, sys
rules = {b"\xe3\x81": 0, b"\xf0\x9f\x98\x80": 0}   # key -> offset of its replacement ("" at 0)
root = {}
for k, v in rules.items():
    n = root
    for c in k:
        n = n.setdefault(c, {})
    n[None] = v
units, blocks = {}, [1]
def place(node, pos, label):
    base = 256 * blocks[0]; blocks[0] += 1
    leaf = None in node
    units[pos] = label | (int(leaf) << 8) | ((pos ^ base) << 10)
    if leaf:
        units[base] = node[None]
    for c, ch in node.items():
        if c is not None:
            place(ch, base ^ c, c)
rb = 256 * blocks[0]; blocks[0] += 1
units[0] = rb << 10
for c, ch in root.items():
    place(ch, rb ^ c, c)
trie = b"".join(struct.pack("<I", units.get(i, 0)) for i in range(256 * blocks[0]))
blob = struct.pack("<I", len(trie)) + trie + b"\0"
vocab = {"<unk>": 0}
vocab.update({"<0x%02X>" % i: 1 + i for i in range(256)})
json.dump({"version": "1.0", "added_tokens": [], "pre_tokenizer": None, "post_processor": None, "decoder": None,
           "normalizer": {"type": "Precompiled", "precompiled_charsmap": base64.b64encode(blob).decode()},
           "model": {"type": "BPE", "unk_token": "<unk>", "byte_fallback": True, "fuse_unk": True, "vocab": vocab,
                     "merges": []}}, open(sys.argv[1], "w"))
EOF
  # the whole-character rule applies (U+1F600 erased); the partial one does not (the bytes of U+3042 stay)
  run -0 npu-forward tokenize --no-special --tokenizer "$W/hm" $'a\xf0\x9f\x98\x80\xe3\x81\x82'
  [ "$(jq -c . <<<"$output")" = "[$((0x61 + 1)),$((0xe3 + 1)),$((0x81 + 1)),$((0x82 + 1))]" ]
}

@test "tokenizer.model: unigram models, damaged character maps, damaged and foreign files are refused by name (exit 3)" {
  run -3 npu-forward tokenize --tokenizer "$W/m/unigram" hi
  [[ "$output" == *"model type UNIGRAM is not supported"* ]]
  # a character map whose trie does not fit it
  mkdir -p "$W/badmap"
  /usr/bin/python3 - "$W/m/nfkc/tokenizer.model" "$W/badmap/tokenizer.model" <<'EOF'
import struct, sys
from sentencepiece import sentencepiece_model_pb2 as pb
m = pb.ModelProto()
m.ParseFromString(open(sys.argv[1], "rb").read())
cm = m.normalizer_spec.precompiled_charsmap
m.normalizer_spec.precompiled_charsmap = struct.pack("<I", len(cm)) + cm[4:]
open(sys.argv[2], "wb").write(m.SerializeToString())
EOF
  run -3 npu-forward tokenize --tokenizer "$W/badmap" hi
  [[ "$output" == *"normalizer Precompiled: the trie's size"*"does not fit"* ]]
  mkdir -p "$W/bad"
  for cut in 0 7 5000 $(($(stat -c %s "$W/m/llama/tokenizer.model") - 3)); do
    head -c "$cut" "$W/m/llama/tokenizer.model" > "$W/bad/tokenizer.model"
    run -3 npu-forward tokenize --tokenizer "$W/bad" hi
    [[ "$output" == *"tokenizer.model: "* ]]
  done
  cp "$TOP/t/corpus/bsd.txt" "$W/bad/tokenizer.model"
  run -3 npu-forward tokenize --tokenizer "$W/bad" hi
  [[ "$output" == *"not a SentencePiece model"* ]]
  # a tokenizer_config.json whose added_tokens_decoder is not id -> token (under SAN: nothing leaks)
  cp "$W/m/llama/tokenizer.model" "$W/bad/"
  echo '{"added_tokens_decoder": {"x": {"content": "a"}}}' > "$W/bad/tokenizer_config.json"
  run -3 npu-forward tokenize --tokenizer "$W/bad" hi
  [[ "$output" == *"added_tokens_decoder 'x'"* ]]
  echo '["text"]' > "$W/bad/tokenizer_config.json"
  run -3 npu-forward tokenize --tokenizer "$W/bad" hi
  [[ "$output" == *"tokenizer_config.json: not a JSON object"* ]]
  # the pack import names the file
  p=$W/badpack
  cp -r "$(fixture chatglm cpu tied hd64)" "$p"
  rm "$p/tokenizer.json"
  cp "$W/m/unigram/tokenizer.model" "$p/"
  run -3 oga-extract "$p"
  [[ "$output" == *"tokenizer.model"*"UNIGRAM"* ]]
}
