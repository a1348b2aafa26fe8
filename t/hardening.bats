#!/usr/bin/env bats
# Hostile packs and containers (issue 12): what one gate accepts, every later gate accepts; what the
# runtime would refuse, oga-info refuses first, by name. Mutants are built here from fixture packs as
# Hugging Face snapshot directories are laid out: symlinks to the real files, the mutated file a copy.
load helpers
bats_require_minimum_version 1.5.0

setup() {
  W=$BATS_TEST_TMPDIR
}

# what a test started in the background (its pids in $W/pids) is stopped, however the test ended
teardown() {
  [ ! -f "$W/pids" ] || while read -r p; do kill "$p" 2>/dev/null || true; done <"$W/pids"
}

# linkpack SRC DIR: DIR holds a symlink to every file of SRC
linkpack() {
  mkdir -p "$2"
  local f
  for f in "$1"/*; do ln -s "$(realpath "$f")" "$2/"; done
}

# genai_edit DIR PYEXPR: replace DIR/genai_config.json by a copy with m (its "model" object) edited
genai_edit() {
  local src
  src=$(realpath "$1/genai_config.json")
  rm "$1/genai_config.json"
  /usr/bin/python3 -c '
import json, sys
g = json.load(open(sys.argv[1])); m = g["model"]
exec(sys.argv[3])
json.dump(g, open(sys.argv[2], "w"), indent=1)' "$src" "$1/genai_config.json" "$2"
}

# refused DIR WHAT CODE: oga-info exits 3 naming WHAT with CODE, and oga-extract refuses too
refused() {
  run -3 timeout 60 oga-info -q "$1"
  echo "$output" | jq -e --arg w "$2" --arg c "$3" \
    '.importable == false and ([.refusals[] | select(.what == $w and .code == $c)] | length) == 1' >/dev/null ||
    { echo "$output" | jq -c .refusals; return 1; }
  run -3 timeout 60 oga-extract "$1" -o "$W/x.ogax"
  [ ! -e "$W/x.ogax" ]
}

# ---- defect 3: a FIFO (or anything not a regular file) is refused, never waited on

@test "hardening: a symlinked pack (Hugging Face snapshot layout) is importable" {
  linkpack "$(fixture qwen2 cpu tied)" "$W/p"
  run -0 timeout 60 oga-info -q "$W/p"
}

@test "hardening: a FIFO in place of any pack file is refused by name with exit 3, without hanging" {
  local src f
  src=$(fixture qwen2 cpu tied)
  for f in model.onnx model.onnx.data genai_config.json config.json tokenizer.json tokenizer_config.json; do
    rm -rf "$W/p"
    linkpack "$src" "$W/p"
    rm "$W/p/$f"
    mkfifo "$W/p/$f"
    run -3 timeout 20 oga-info -q "$W/p"
    echo "$output" | jq -e --arg f "file $f" \
      '[.refusals[] | select(.what == $f and .code == "file_unreadable" and (.reason | test("FIFO")))] | length == 1' \
      >/dev/null || { echo "$f: $output"; return 1; }
    run -3 timeout 20 oga-extract "$W/p" -o "$W/x.ogax"
    [[ "$output" == *"$f"* ]] || { echo "$f: $output"; return 1; }
  done
}

@test "hardening: a FIFO as a _meta.json of the .cache directory is not waited on" {
  linkpack "$(fixture qwen2 cpu tied)" "$W/p"
  mkdir "$W/p/.cache"
  mkfifo "$W/p/.cache/x_meta.json"
  run -3 timeout 20 oga-info -q "$W/p"
}

@test "hardening: a FIFO or a directory as the container, the pack or the ids file of the programs is refused" {
  local pack
  pack=$(fixture qwen2 cpu tied)
  oga-extract "$pack" | q4nx-pack -o "$W/m.q4nx"
  mkfifo "$W/fifo"
  run -3 timeout 20 npu-forward run -m "$W/fifo" -p hi -n 1
  [[ "$output" == *"$W/fifo: not a regular file (a FIFO)"* ]]
  # a text input (ids, prompt) may be a stream: a FIFO is read to its end, a directory is refused
  run -0 timeout 20 bash -c "echo '[1, 2, 3]' > '$W/fifo' & npu-forward logits -m '$W/m.q4nx' --ids '$W/fifo' --top-logits 1"
  run -3 timeout 20 npu-forward logits -m "$W/m.q4nx" --ids "$W"
  [[ "$output" == *"not a regular file (a directory)"* ]]
  run -3 timeout 20 q4nx-verify "$W/fifo"
  [[ "$output" == *"not a regular file (a FIFO)"* ]]
  run -3 timeout 20 npu-forward run -m "$W" -p hi -n 1
  [[ "$output" == *"not a regular file (a directory)"* ]]
}

# ---- defect 4: the gates agree; the runtime's load-time checks are oga-info's

@test "hardening: model.type unknown or empty is refused by oga-info (the runtime has no such family)" {
  local t
  for t in unknown ""; do
    rm -rf "$W/p"; linkpack "$(fixture qwen2 cpu tied)" "$W/p"
    genai_edit "$W/p" "m['type'] = '$t'"
    refused "$W/p" "genai_config.json: model.type" model_unsupported
  done
}

@test "hardening: token ids outside the vocabulary (bos 2^40, pad 2^33, eos 2^40) are refused by oga-info" {
  local k v
  for kv in bos_token_id=2**40 pad_token_id=2**33 eos_token_id=2**40 "eos_token_id=[151645, 2**40]" bos_token_id=151669; do
    k=${kv%%=*} v=${kv#*=}
    rm -rf "$W/p"; linkpack "$(fixture qwen2 cpu tied)" "$W/p"
    genai_edit "$W/p" "m['$k'] = $v"
    refused "$W/p" "genai_config.json: model.$k" model_config || { echo "$kv"; return 1; }
  done
}

@test "hardening: context_length 0 or 2^62 is refused by oga-info" {
  local v
  for v in 0 2**62; do
    rm -rf "$W/p"; linkpack "$(fixture qwen2 cpu tied)" "$W/p"
    genai_edit "$W/p" "m['context_length'] = $v"
    refused "$W/p" "genai_config.json: model.context_length" model_config || { echo "$v"; return 1; }
  done
}

@test "hardening: model.type llama, phi3 or qwen3 on a qwen2-shaped graph contradicts the graph" {
  local t
  for t in llama phi3 qwen3 mistral; do
    rm -rf "$W/p"; linkpack "$(fixture qwen2 amd untied)" "$W/p"
    genai_edit "$W/p" "m['type'] = '$t'"
    refused "$W/p" "genai_config.json: model.type" model_tensors || { echo "$t"; return 1; }
  done
  # and the other way round: qwen2 on a graph without q/k/v biases
  rm -rf "$W/p"; linkpack "$(fixture llama cpu tied)" "$W/p"
  genai_edit "$W/p" "m['type'] = 'qwen2'"
  refused "$W/p" "genai_config.json: model.type" model_tensors
}

@test "hardening: an empty, 100k-deep or 50 MB-string tokenizer.json is refused by oga-info" {
  local how
  for how in "''" "'[' * 100000 + ']' * 100000" "'{\"x\": \"' + 'a' * 50000000 + '\"}'"; do
    rm -rf "$W/p"; linkpack "$(fixture qwen2 cpu tied)" "$W/p"
    rm "$W/p/tokenizer.json"
    /usr/bin/python3 -c "import sys; open(sys.argv[1], 'w').write($how)" "$W/p/tokenizer.json"
    refused "$W/p" "file tokenizer.json" tokenizer || { echo "$how"; return 1; }
  done
}

@test "hardening: a model.onnx edit that loses one layer's q bias is refused by oga-info" {
  local src
  src=$(fixture qwen2 amd untied)
  linkpack "$src" "$W/p"
  rm "$W/p/model.onnx"
  /usr/bin/python3 -c '
import onnx, sys
m = onnx.load(sys.argv[1], load_external_data=False)
n = [n for n in m.graph.node if n.name == "/model/layers.0/attn/q_proj/Add"][0]
n.input[1] = n.input[1][:-1] + "5"   # one byte: the bias is no longer an initializer
onnx.save(m, sys.argv[2])' "$src/model.onnx" "$W/p/model.onnx"
  # the walk names the Add that no longer adds a constant (before it, the runtime's check named the
  # missing q_bias: layer 0 would have run without one)
  refused "$W/p" "layer 0 attention" unsupported_op
}

@test "hardening: every fixture the gates import, npu-forward loads (the same check on both sides)" {
  local v pack
  for v in "qwen2 cpu tied" "qwen3 amd untied" "llama cpu untied" "phi3 amd tied"; do
    pack=$(fixture $v)
    run -0 oga-info -q "$pack"
    oga-extract "$pack" | q4nx-pack -o "$W/m.q4nx"
    run -0 npu-forward run -m "$W/m.q4nx" -p "hi" -n 1 --ignore-eos
  done
}

# ---- defect 6: a corrupted container is refused at open (small parts) or with --verify (weights)

# flip C FILE WHAT: flip one byte of FILE's WHAT ("meta", "asset NAME" or "tensor ROLE"), parsed from
# the container's footer and tables as q4nx(5) documents them (independently of lib/q4nx)
flip() {
  /usr/bin/python3 - "$1" "$2" <<'PY'
import struct, sys
path, what = sys.argv[1], sys.argv[2]
b = bytearray(open(path, "rb").read())
ft = len(b) - 64
meta_off, meta_size, table_off = struct.unpack_from("<QQQ", b, ft)
nt, na = struct.unpack_from("<II", b, ft + 24)
str_off = struct.unpack_from("<Q", b, ft + 32)[0]
def s(off, n): return bytes(b[str_off + off:str_off + off + n]).decode()
if what == "meta":
    at = meta_off + meta_size // 2
elif what == "meta-start":  # its opening '{' becomes 'z': the metadata no longer reads as JSON
    at = meta_off
else:
    kind, name = what.split(" ", 1)
    at = None
    if kind == "tensor":
        for i in range(nt):
            e = table_off + 128 * i
            ro, rl = struct.unpack_from("<II", b, e + 8)
            if s(ro, rl) == name:
                off, size = struct.unpack_from("<QQ", b, e + 64); at = off + size // 2
    else:
        for i in range(na):
            e = table_off + 128 * nt + 32 * i
            no, nl = struct.unpack_from("<II", b, e)
            if s(no, nl) == name:
                off, size = struct.unpack_from("<QQ", b, e + 8); at = off + size // 2
    assert at is not None, what
b[at] ^= 0x01
open(path, "wb").write(b)
PY
}

@test "hardening: npu-forward refuses a container whose metadata, tokenizer or norm bytes changed (exit 3, named)" {
  oga-extract "$(fixture qwen2 cpu tied)" | q4nx-pack -o "$W/m.q4nx"
  run -0 npu-forward run -m "$W/m.q4nx" -p hi -n 1
  local w
  for w in meta meta-start "asset tokenizer.json" "asset tokenizer_config.json" "tensor final_norm" "tensor layers.1.attn.qkv_bias"; do
    cp "$W/m.q4nx" "$W/c.q4nx"
    flip "$W/c.q4nx" "$w"
    run -3 npu-forward run -m "$W/c.q4nx" -p hi -n 1
    case "$w" in
      meta*) [[ "$output" == *"$W/c.q4nx: metadata checksum mismatch"* ]] ;;
      asset*) [[ "$output" == *"$W/c.q4nx: asset ${w#asset }: checksum mismatch"* ]] ;;
      tensor*) [[ "$output" == *"(role ${w#tensor }): checksum mismatch"* ]] ;;
    esac || { echo "$w: $output"; return 1; }
    run -3 npu-forward logits -m "$W/c.q4nx" --ids <(echo '[1, 2]')
    # q4nx-verify still reports every checksum itself (exit 1, not a refusal at open), metadata that no
    # longer reads as JSON too
    run -1 q4nx-verify "$W/c.q4nx"
    [[ "$w" != meta* ]] || [[ "$output" == *"metadata checksum mismatch"* ]]
  done
}

@test "hardening: a NaN scale with consistent checksums: run, logits and serve say the logits are not finite, never print garbage with exit 0" {
  oga-extract "$(fixture qwen2 cpu tied)" | q4nx-pack -o "$W/m.q4nx"
  /usr/bin/python3 "$TOP/t/q4nx-mutate.py" "$W/m.q4nx" "$W/nan.q4nx" scale-nan
  run -3 npu-forward run -m "$W/nan.q4nx" -p hi -n 4
  [[ "$output" == *"logits at position "*" are not finite"* ]]
  run -3 npu-forward logits -m "$W/nan.q4nx" --ids <(echo '[1, 2]')
  [[ "$output" == *"not finite"* ]]
  npu-forward serve -m "$W/nan.q4nx" --port 0 -t 1 2>"$W/srv.log" &
  local spid=$! port=""
  echo "$spid" >> "$W/pids"
  for _ in $(seq 200); do grep -q 'ready:' "$W/srv.log" && break; sleep 0.05; done
  port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$W/srv.log" | head -1)
  run curl -s -m 30 "http://127.0.0.1:$port/v1/completions" -d '{"prompt": "hi", "max_tokens": 3}'
  echo "$output" | jq -e '.error.message | test("not finite")'
}

@test "hardening: npu-forward --verify (and spec-replay --verify) refuse flipped lm_head weights that a plain run does not see" {
  oga-extract "$(fixture qwen2 cpu tied)" | q4nx-pack -o "$W/m.q4nx"
  run -0 npu-forward run -m "$W/m.q4nx" -p hi -n 1 --verify
  cp "$W/m.q4nx" "$W/c.q4nx"
  flip "$W/c.q4nx" "tensor lm_head"
  run -0 npu-forward run -m "$W/c.q4nx" -p hi -n 1
  run -3 npu-forward run -m "$W/c.q4nx" -p hi -n 1 --verify
  [[ "$output" == *"tensor "*"(role lm_head): checksum mismatch"* ]]
  run -3 spec-replay -m "$W/c.q4nx" -d "$W/m.q4nx" -p hi -n 2 --verify
  [[ "$output" == *"(role lm_head): checksum mismatch"* ]]
}

# ---- defect 5: OGAX frame headers are covered by a checksum; roles are checked when packing

# ogax_edit IN OUT FIX PYSTMT: rewrite the frames of stream IN into OUT, running PYSTMT on each header
# h (a dict); FIX=1 recomputes the end frame's headers_crc32c (CRC32C written here from ogax(5)), so a
# forged stream is consistent and only the role checks can catch it
ogax_edit() {
  /usr/bin/python3 - "$@" <<'PY'
import json, os, struct, sys
src, dst, fix, stmt = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4]
sys.path.insert(0, os.environ["TOP"] + "/t")
from crc32c import crc32c
b = open(src, "rb").read()
out, at, hcrc = bytearray(), 0, 0
while at < len(b):
    hl, pl = struct.unpack_from("<IQ", b, at + 4)
    h = json.loads(b[at + 16:at + 16 + hl])
    pay = b[at + 16 + hl:at + 16 + hl + pl]
    at += 16 + hl + pl
    if h["type"] == "end":
        if fix:
            h["headers_crc32c"] = hcrc
    else:
        exec(stmt)
    hb = json.dumps(h, separators=(",", ":")).encode()
    pre = b"OGAX" + struct.pack("<IQ", len(hb), len(pay))
    if h["type"] != "end":
        hcrc = crc32c(crc32c(hcrc, pre), hb)
    out += pre + hb + pay
open(dst, "wb").write(out)
PY
}

@test "hardening: a changed role or name in an OGAX frame header is refused by q4nx-pack and oga-extract --check" {
  oga-extract "$(fixture qwen2 cpu tied)" -o "$W/s.ogax"
  # the issue's example: one byte of a role, "layers.0.mlp.up" -> "=ayers.0.mlp.up"
  /usr/bin/python3 -c '
import sys
b = open(sys.argv[1], "rb").read()
i = b.index(b"\"role\":\"layers.0.mlp.up\"")
open(sys.argv[2], "wb").write(b[:i + 8] + b"=" + b[i + 9:])' "$W/s.ogax" "$W/r.ogax"
  run -3 q4nx-pack -o "$W/m.q4nx" < "$W/r.ogax"
  [[ "$output" == *"=ayers.0.mlp.up"*"not a known role"* ]]
  [ ! -e "$W/m.q4nx" ]
  run -3 oga-extract --check "$W/r.ogax"
  [[ "$output" == *"not a known role"* ]]
  # a name byte (no role check can see it): only the header checksum does
  /usr/bin/python3 -c '
import sys
b = open(sys.argv[1], "rb").read()
i = b.index(b"\"name\":\"model.layers.0.mlp.up_proj")
open(sys.argv[2], "wb").write(b[:i + 8] + b"M" + b[i + 9:])' "$W/s.ogax" "$W/n.ogax"
  run -3 q4nx-pack -o "$W/m.q4nx" < "$W/n.ogax"
  [[ "$output" == *"frame headers checksum mismatch"* ]]
  [ ! -e "$W/m.q4nx" ]
  run -3 oga-extract --check "$W/n.ogax"
  [[ "$output" == *"frame headers checksum mismatch"* ]]
  # two layers' gate roles swapped keep every role valid and unique: the checksum catches it
  ogax_edit "$W/s.ogax" "$W/l.ogax" 0 'sw = {"layers.0.mlp.gate": "layers.1.mlp.gate", "layers.1.mlp.gate": "layers.0.mlp.gate"}
if h.get("role") in sw: h["role"] = sw[h["role"]]'
  run -3 q4nx-pack -o "$W/m.q4nx" < "$W/l.ogax"
  [[ "$output" == *"frame headers checksum mismatch"* ]]
}

@test "hardening: q4nx-pack checks roles against the known set and the model's layer count, even with consistent checksums" {
  oga-extract "$(fixture qwen2 cpu tied)" -o "$W/s.ogax"
  ogax_edit "$W/s.ogax" "$W/same.ogax" 1 'pass'
  run -0 q4nx-pack -o "$W/ok.q4nx" < "$W/same.ogax"
  local r
  for r in "=ayers.0.mlp.up" "layers.2.mlp.up" "layers.01.mlp.up" "layers.0.mlp.upp" "lm_head " ""; do
    ogax_edit "$W/s.ogax" "$W/f.ogax" 1 "h['role'] = '$r' if h.get('role') == 'layers.0.mlp.up' else h.get('role'); h.pop('role') if h['role'] is None else None"
    run -3 q4nx-pack -o "$W/m.q4nx" < "$W/f.ogax"
    [[ "$output" == *"role"* ]] || { echo "'$r': $output"; return 1; }
    [ ! -e "$W/m.q4nx" ]
  done
}

@test "hardening: a version 1 OGAX stream (no header checksum) is refused by name" {
  oga-extract "$(fixture qwen2 cpu tied)" -o "$W/s.ogax"
  ogax_edit "$W/s.ogax" "$W/v1.ogax" 1 'h["ogax"] = 1 if h["type"] == "model" else None; h.pop("ogax") if h.get("ogax") is None else None'
  run -3 q4nx-pack -o "$W/m.q4nx" < "$W/v1.ogax"
  [[ "$output" == *"OGAX version 1 stream"* ]]
}

# ---- defect 7: a writer killed by SIGKILL leaves no temp file; stale ones of dead writers are removed

# open_in PID DIR: wait until process PID has a file of DIR open for writing (up to 10 s)
open_in() {
  local _
  for _ in $(seq 100); do
    ls -l "/proc/$1/fd" 2>/dev/null | grep -q -- "-> $2/" && return 0
    sleep 0.1
  done
  return 1
}

@test "hardening: kill -9 of q4nx-pack mid-write leaves no file and no temp file" {
  oga-extract "$(fixture qwen2 cpu untied)" -o "$W/s.ogax"
  mkdir "$W/out"
  mkfifo "$W/fifo"
  q4nx-pack -o "$W/out/m.q4nx" < "$W/fifo" 2>/dev/null &
  local pid=$!
  exec 7>"$W/fifo"
  head -c 3000000 "$W/s.ogax" >&7   # part of the stream: the container is half written
  open_in "$pid" "$W/out"
  kill -9 "$pid"
  wait "$pid" || true
  exec 7>&-
  [ -z "$(ls -A "$W/out")" ] || { ls -la "$W/out"; return 1; }
}

# held-out audit: -o over an existing 0600 file left a 0644 one (the temp file's mode), readable by all
@test "hardening: -o over an existing file keeps its permissions (0600 stays 0600); a new file is 0644 less the umask" {
  local pack
  pack=$(fixture qwen2 cpu untied)
  umask 022
  oga-extract "$pack" -o "$W/new.ogax"
  [ "$(stat -c %a "$W/new.ogax")" = 644 ]
  printf 'old' >"$W/s.ogax"
  chmod 600 "$W/s.ogax"
  oga-extract "$pack" -o "$W/s.ogax"
  [ "$(stat -c %a "$W/s.ogax")" = 600 ]
  cmp "$W/s.ogax" "$W/new.ogax"
  chmod 640 "$W/s.ogax"
  q4nx-pack -o "$W/s.ogax" <"$W/new.ogax"
  [ "$(stat -c %a "$W/s.ogax")" = 640 ]
}

# held-out audit: the replacing file was the writer's, in the writer's group: root's -o over a user's 0600
# file left it root's (its owner could no longer read it), and a 0640 file of a group the writer is not in
# came out readable by the writer's group
@test "hardening: -o over another's file keeps its owner and group, or grants the new group no more than others had" {
  [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null || skip "needs root and setpriv to run as nobody"
  local pack d
  pack=$TOP/share/models/pytiny-target
  d=$(mktemp -d /tmp/ogk-mode.XXXXXX) && chmod 777 "$d"
  oga-extract "$pack" -o "$d/new.ogax"
  printf 'old' >"$d/a.ogax" && chown nobody:nogroup "$d/a.ogax" && chmod 600 "$d/a.ogax"
  oga-extract "$pack" -o "$d/a.ogax" # root replaces nobody's file
  local a b c
  a=$(stat -c '%U:%G %a' "$d/a.ogax")
  # nobody replaces its own file of group root (a group nobody is not in, so cannot give): 0640 and 0664
  printf 'old' >"$d/b.ogax" && chown nobody:root "$d/b.ogax" && chmod 640 "$d/b.ogax"
  printf 'old' >"$d/c.ogax" && chown nobody:root "$d/c.ogax" && chmod 664 "$d/c.ogax"
  setpriv --reuid=nobody --regid=nogroup --clear-groups oga-extract "$pack" -o "$d/b.ogax"
  setpriv --reuid=nobody --regid=nogroup --clear-groups oga-extract "$pack" -o "$d/c.ogax"
  b=$(stat -c '%U:%G %a' "$d/b.ogax") c=$(stat -c '%U:%G %a' "$d/c.ogax")
  cmp "$d/b.ogax" "$d/new.ogax" && cmp "$d/a.ogax" "$d/new.ogax"
  rm -rf "$d"
  [ "$a" = "nobody:nogroup 600" ] && [ "$b" = "nobody:nogroup 600" ] && [ "$c" = "nobody:nogroup 644" ] ||
    { echo "a: $a b: $b c: $c"; false; }
}

@test "hardening: kill -9 of oga-extract -o mid-write leaves no file and no temp file" {
  local pack
  pack=$(fixture qwen2 cpu tied qwen05b 4)
  mkdir "$W/out"
  oga-extract "$pack" -o "$W/out/s.ogax" &
  local pid=$!
  open_in "$pid" "$W/out"
  kill -STOP "$pid"   # mid-write, whatever the machine's speed
  ls -l "/proc/$pid/fd" | grep -q -- "-> $W/out/"
  kill -9 "$pid"
  wait "$pid" || true
  [ -z "$(ls -A "$W/out")" ] || { ls -la "$W/out"; return 1; }
}

@test "hardening: -o names a device, a FIFO or a link: written through, never replaced; a link to a file replaces the file, not the link" {
  local pack
  pack=$(fixture qwen2 cpu tied)
  oga-extract "$pack" -o "$W/ref.ogax"
  # a character device (as /dev/null is; made here, not the machine's own) stays a device
  if mknod -m 666 "$W/null" c 1 3 2>/dev/null; then
    oga-extract "$pack" -o "$W/null"
    [ -c "$W/null" ]
    oga-extract "$pack" | q4nx-pack -o "$W/null"
    [ -c "$W/null" ]
    oga-extract "$pack" | q4nx-pack -o "$W/m.q4nx"
    q4nx-gguf --widen -o "$W/null" "$W/m.q4nx" 2>/dev/null
    [ -c "$W/null" ]
  else
    echo "# not root: the device node case skipped" >&3
  fi
  # a link to standard output (a pipe): the bytes reach the pipe, the link stays
  ln -s /proc/self/fd/1 "$W/out"
  [ "$(oga-extract "$pack" -o "$W/out" | cmp - "$W/ref.ogax" && echo same)" = same ]
  [ -L "$W/out" ]
  # a FIFO: read at the other end whole
  mkfifo "$W/fifo"
  cat "$W/fifo" > "$W/via-fifo" &
  oga-extract "$pack" -o "$W/fifo"
  wait $!
  cmp "$W/via-fifo" "$W/ref.ogax" && [ -p "$W/fifo" ] || false
  # a link to a regular file: the file gets the output, the link is kept
  echo old > "$W/real"
  ln -s real "$W/link"
  oga-extract "$pack" -o "$W/link"
  [ -L "$W/link" ] && cmp "$W/real" "$W/ref.ogax" || false
  # a link to nothing, and a directory: refused by name, nothing made
  ln -s nowhere "$W/dangling"
  run -1 oga-extract "$pack" -o "$W/dangling"
  [[ "$output" == *"symbolic link to nothing"* ]] && [ ! -e "$W/nowhere" ] || false
  mkdir "$W/dir"
  run -1 oga-extract "$pack" -o "$W/dir"
  [[ "$output" == *"is a directory"* ]] && [ -z "$(ls -A "$W/dir")" ] || false
}

@test "hardening: a writer removes stale temp files of its output left by dead processes, and only those" {
  oga-extract "$(fixture qwen2 cpu tied)" -o "$W/s.ogax"
  mkdir "$W/out"
  local dead
  sh -c 'exit 0' & dead=$!
  wait "$dead"
  while kill -0 "$dead" 2>/dev/null; do dead=$((dead + 1)); done   # no such process now
  echo stale > "$W/out/m.q4nx.tmp.$dead"
  echo live > "$W/out/m.q4nx.tmp.$$"            # this shell is alive: not ours to remove
  echo other > "$W/out/m.q4nx.tmp.notapid"
  echo other > "$W/out/x.q4nx.tmp.$dead"        # another output's name
  run -0 q4nx-pack -o "$W/out/m.q4nx" < "$W/s.ogax"
  [ ! -e "$W/out/m.q4nx.tmp.$dead" ]
  [ -e "$W/out/m.q4nx.tmp.$$" ] && [ -e "$W/out/m.q4nx.tmp.notapid" ] && [ -e "$W/out/x.q4nx.tmp.$dead" ] || false
  [ -s "$W/out/m.q4nx" ]
  # oga-extract -o does the same for its output
  echo stale > "$W/out/t.ogax.tmp.$dead"
  run -0 oga-extract "$(fixture qwen2 cpu tied)" -o "$W/out/t.ogax"
  [ ! -e "$W/out/t.ogax.tmp.$dead" ]
  cmp "$W/out/t.ogax" "$W/s.ogax"
}

# ---- the attack campaign (tools/attack.py) at a small scale: a rerun of every class of attack

@test "hardening: tools/attack.py, every class at scale 0.05 (about 70 cases): no crash, hang, stray file or gate disagreement" {
  run timeout 600 /usr/bin/python3 "$TOP/tools/attack.py" -b "$OGAKIT_BUILD" -s 0.05 --seed "$RANDOM" -o "$W/cases.jsonl"
  echo "$output"
  [ "$status" -eq 0 ]
  echo "$output" | grep -Eq '^[0-9]+ cases, 0 failed$'
  # every class ran (disk only where tmpfs can be mounted; it says so otherwise)
  local c
  for c in container stream pack cli template kill; do
    echo "$output" | grep -Eq "^$c +[0-9]+ +0 "
  done
  [ "$(wc -l < "$W/cases.jsonl")" -ge 60 ]
}

@test "hardening: tools/attack.py fails a case that crashes (a program killed by a signal counts as a crash)" {
  # a build directory whose oga-info is a stand-in that dies of SIGSEGV: the pack class must report it
  mkdir -p "$W/b/bin"
  local p
  for p in oga-extract q4nx-pack q4nx-verify npu-forward; do ln -s "$OGAKIT_BUILD/bin/$p" "$W/b/bin/$p"; done
  printf '#!/bin/sh\nkill -SEGV $$\n' > "$W/b/bin/oga-info"
  chmod +x "$W/b/bin/oga-info"
  run timeout 300 /usr/bin/python3 "$TOP/tools/attack.py" -b "$W/b" -s 0.02 --class pack
  echo "$output"
  [ "$status" -eq 1 ]
  echo "$output" | grep -q "oga-info crashed"
  echo "$output" | grep -Eq '^[0-9]+ cases, [1-9][0-9]* failed$'
}

@test "hardening: an endless text input (stdin on /dev/zero, a pipe) is refused by name at the text limit, not read until memory runs out" {
  oga-extract "$(fixture qwen2 cpu tied)" | q4nx-pack -o "$W/m.q4nx"
  # (each case reads 256 MiB, ~6 s under ASan: the sanitizer run takes one stdin and the FIFO, which go
  # through the same reader as the others)
  local c cs=(tokenize detokenize chat)
  [ "${OGAKIT_SAN:-0}" = 1 ] && cs=(tokenize)
  for c in "${cs[@]}"; do
    run -3 timeout 60 npu-forward "$c" -m "$W/m.q4nx" < /dev/zero
    [[ "$output" == *"stdin: more than 256 MiB of text (the limit of a text input)"* ]]
  done
  run -3 timeout 60 npu-forward run -m "$W/m.q4nx" -f <(cat /dev/zero) -n 1
  [[ "$output" == *"more than 256 MiB of text"* ]]
  [ "${OGAKIT_SAN:-0}" = 1 ] && return 0
  run -3 timeout 60 npu-forward run -m "$W/m.q4nx" -f - -n 1 < /dev/zero
  [[ "$output" == *"more than 256 MiB of text"* ]]
  run -3 timeout 60 spec-replay -d "$W/m.q4nx" < /dev/zero
  [[ "$output" == *"more than 256 MiB of text"* ]]
  # a stream that ends past the limit but before the reader's buffer doubled again (it was read whole, 300 MB
  # taken: the check ran only when the buffer filled)
  run -3 timeout 60 bash -c "head -c $((257 << 20)) /dev/zero | npu-forward tokenize -m '$W/m.q4nx'"
  [[ "$output" == *"stdin: more than 256 MiB of text"* ]]
}

@test "hardening: a closed pipe or a full disk on standard output is a named write failure with the program's status, never a silent death or exit 0" {
  p=$TOP/share/models/pytiny-target
  oga-extract "$p" >"$W/t.ogax"
  q4nx-pack -o "$W/t.q4nx" <"$W/t.ogax"
  # the reader closes early: q4nx-pack and q4nx-gguf die by SIGPIPE (status 141) without it
  run bash -c "q4nx-pack -o - <'$W/t.ogax' 2>'$W/err' | head -c 10 >/dev/null; echo \${PIPESTATUS[0]}"
  [ "$output" = 1 ] && grep -q 'write failed' "$W/err" || false
  run bash -c "q4nx-gguf --widen '$W/t.q4nx' 2>'$W/err' | head -c 10 >/dev/null; echo \${PIPESTATUS[0]}"
  [ "$output" = 1 ] && grep -qi 'writing the GGUF failed: broken pipe' "$W/err" || false
  # a full disk: these exited 0
  run npu-forward info -m "$W/t.q4nx"
  [ "$status" = 0 ]
  run bash -c "npu-forward info -m '$W/t.q4nx' >/dev/full"
  [ "$status" = 1 ] && [[ "$output" == *"standard output: write failed"* ]] || false
  run bash -c "oga-extract --check '$W/t.ogax' >/dev/full"
  [ "$status" = 1 ] && [[ "$output" == *"write failed"* ]] || false
  run bash -c "spec-replay --selftest >/dev/full"
  [ "$status" = 1 ] && [[ "$output" == *"write failed"* ]] || false
  # every program the same status (npu-forward and spec-replay gave 3, the others 1), one message each (a
  # failed write named by the program was named again by the exit check)
  echo '[1, 2, 3]' >"$W/ids"
  run bash -c "npu-forward logits -m '$W/t.q4nx' --ids '$W/ids' --top-logits 1 >/dev/full"
  [ "$status" = 1 ] && [ "$(grep -c 'write failed' <<<"$output")" = 1 ] || false
  run bash -c "npu-forward run -m '$W/t.q4nx' -p hi -n 2 >/dev/full"
  [ "$status" = 1 ] && [ "$(grep -c 'write failed' <<<"$output")" = 1 ] || false
  run bash -c "q4nx-verify '$W/t.q4nx' >/dev/full"
  [ "$status" = 1 ] && [ "$(grep -c 'cannot write the report' <<<"$output")" = 1 ] || false
  run bash -c "oga-info '$p' >/dev/full"
  [ "$status" = 1 ] && [ "$(grep -c 'write failed' <<<"$output")" = 1 ] || false
  # -o a full device: the output is named (the device is written through, not replaced)
  run bash -c "q4nx-pack -o /dev/full <'$W/t.ogax'"
  [ "$status" = 1 ] && [[ "$output" == *"q4nx-pack: /dev/full: write failed"* ]] || false
  run oga-extract "$p" -o /dev/full
  [ "$status" = 1 ] && [[ "$output" == *"oga-extract: /dev/full: write failed"* ]] && [ -c /dev/full ] || false
}

# opening a file output hooked SIGPIPE back to a fatal handler: a closed stdout then killed the program (141)
@test "hardening: with a file output open (--out-f32), a reader that closed standard output is still a named write failure (1), the file whole" {
  oga-extract "$TOP/share/models/pytiny-target" | q4nx-pack -o "$W/t.q4nx"
  echo '[1, 2, 3]' >"$W/ids"
  npu-forward logits -m "$W/t.q4nx" --ids "$W/ids" --out-f32 "$W/ref.f32" >/dev/null
  # standard output a pipe whose reader is gone before the program starts (no race with the reader)
  run /usr/bin/python3 -c 'import os, subprocess, sys
r, w = os.pipe(); os.close(r)
sys.exit(subprocess.run(sys.argv[1:], stdout=w).returncode)' npu-forward logits -m "$W/t.q4nx" --ids "$W/ids" --out-f32 "$W/l.f32"
  [ "$status" = 1 ] && [[ "$output" == *"write failed"* ]] || false
  cmp "$W/l.f32" "$W/ref.f32"
}

# a closed descriptor was free for the next open(): the first file a program opened took its number
@test "hardening: a closed standard output, error or input (>&-, 2>&-, <&-) stays closed: nothing lands in a file the program opens" {
  p=$TOP/share/models/pytiny-target
  oga-extract "$p" >"$W/t.ogax"
  q4nx-pack -o "$W/t.q4nx" <"$W/t.ogax"
  # q4nx-gguf --widen names each widened tensor on stderr: with stderr closed those lines went into the GGUF (exit 0)
  q4nx-gguf --widen -o "$W/a.gguf" "$W/t.q4nx" 2>/dev/null
  q4nx-gguf --widen -o "$W/b.gguf" "$W/t.q4nx" 2>&-
  cmp "$W/a.gguf" "$W/b.gguf"
  # stdout closed: the first input took fd 1 and was refused as "also this run's standard output" (exit 2)
  local c
  for c in "oga-info '$p'" "oga-extract '$p'" "npu-forward info -m '$W/t.q4nx'" "q4nx-verify '$W/t.q4nx'" \
    "q4nx-gguf --widen '$W/t.q4nx'" "npu-forward run -m '$W/t.q4nx' -p hi -n 2"; do
    run bash -c "$c >&-"
    [ "$status" = 1 ] && [[ "$output" =~ write\ failed|cannot\ write|writing\ .*\ failed ]] &&
      [[ "$output" != *"standard output;"* ]] ||
      { echo "$c: $status $output"; return 1; }
  done
  # stdin closed: a read error on it (exit 3), no container
  run -3 bash -c "q4nx-pack -o '$W/c.q4nx' <&-"
  [[ "$output" == *"Bad file descriptor"* ]] && [ ! -e "$W/c.q4nx" ]
  # a model read from a closed stdin (-m -) is named so too, not 'not a regular file or a pipe (a character device)'
  run -3 bash -c "npu-forward info -m - <&-"
  [[ "$output" == *"standard input: Bad file descriptor"* ]] || false
}

# SIGXFSZ killed the writer (status 153, no message); ignored, the write fails with EFBIG
@test "hardening: past ulimit -f a writer names the failure (File too large, exit 1), keeps the old output, leaves no temp file" {
  p=$TOP/share/models/pytiny-target
  oga-extract "$p" >"$W/t.ogax"
  q4nx-pack -o "$W/t.q4nx" <"$W/t.ogax"
  mkdir "$W/out"
  echo old >"$W/out/m.q4nx"
  run bash -c "ulimit -f 1024; exec q4nx-pack -o '$W/out/m.q4nx' <'$W/t.ogax'"
  [ "$status" = 1 ] && [[ "$output" == *"m.q4nx: write failed: File too large"* ]] || false
  [ "$(cat "$W/out/m.q4nx")" = old ] && [ "$(ls -A "$W/out")" = m.q4nx ] || false
  run bash -c "ulimit -f 1024; exec q4nx-gguf --widen -o '$W/out/m.gguf' '$W/t.q4nx'"
  [ "$status" = 1 ] && [[ "$output" == *"File too large"* ]] && [ "$(ls -A "$W/out")" = m.q4nx ] || false
  run bash -c "ulimit -f 1024; exec oga-extract '$p' >'$W/s.ogax'"
  [ "$status" = 1 ] && [[ "$output" == *"File too large"* ]] || false
  echo '[1, 2, 3, 4, 5]' >"$W/ids"
  run bash -c "ulimit -f 16; exec npu-forward logits -m '$W/t.q4nx' --ids '$W/ids' --out-f32 '$W/out/l.f32' >/dev/null"
  [ "$status" = 1 ] && [[ "$output" == *"File too large"* ]] && [ "$(ls -A "$W/out")" = m.q4nx ] || false
}

# a container the process has no memory to map or copy was "input refused" (3), as if malformed
@test "hardening: no memory to map or load a container (ulimit -v) is init failed (exit 4, named), in every program that opens one" {
  skip_under_san "ASan's shadow memory does not start under a small ulimit -v"
  oga-extract "$TOP/share/models/pytiny-target" | q4nx-pack -o "$W/t.q4nx"
  truncate -s 2G "$W/big.q4nx"   # sparse: 2 GiB of address space to map, nothing on disk
  [ "$(stat -c %s "$W/big.q4nx")" = $((2 << 30)) ]
  local c
  for c in "npu-forward run -m big.q4nx -p hi -n 1" "npu-forward run --mmap -m big.q4nx -p hi -n 1" \
    "npu-forward run --no-mmap -m big.q4nx -p hi -n 1" "npu-forward info -m big.q4nx" "q4nx-verify big.q4nx" \
    "q4nx-gguf --widen -o x.gguf big.q4nx" "q4nx-gguf --check t.q4nx big.q4nx" \
    "spec-replay -m t.q4nx -d big.q4nx -p hi -n 2 -k 1"; do
    run bash -c "cd '$W' && ulimit -v $((1 << 20)) && exec $c"
    [ "$status" = 4 ] && [[ "$output" =~ big\.q4nx:\ (mmap:\ Cannot\ allocate\ memory|out\ of\ memory) ]] ||
      { echo "$c: $status $output"; return 1; }
  done
  [ ! -e "$W/x.gguf" ]
  # with the memory, the same file is refused as what it is: not a container (3)
  run -3 npu-forward info -m "$W/big.q4nx"
  [[ "$output" == *"not a Q4NX container"* ]]
}

# a mapped input truncated by another process: the next read of a page past its new end was a SIGBUS (status 135)
@test "hardening: an input file truncated while it is read (mapped) is named, exit 3, no output: not a bus error" {
  cp -r "$TOP/share/models/pytiny-target" "$W/pk"
  oga-extract "$W/pk" | q4nx-pack -o "$W/m.q4nx"
  mkfifo "$W/out"
  # the writer blocks on the FIFO after the first bytes: the file is cut under it, then the rest is read
  oga-extract "$W/pk" -o "$W/out" 2>"$W/err" &
  local pid=$!
  exec 7<"$W/out"
  head -c 100000 <&7 >/dev/null
  truncate -s 4096 "$W/pk/model.onnx.data"
  cat <&7 >/dev/null
  exec 7<&-
  local st=0
  wait "$pid" || st=$?
  [ "$st" = 3 ] && grep -q 'pk/model.onnx.data: the file shrank while being read' "$W/err" || { echo "status $st"; cat "$W/err"; false; }
  # a container mapped by q4nx-gguf (its -o written through the FIFO)
  q4nx-gguf --widen -o "$W/out" "$W/m.q4nx" 2>"$W/err" &
  pid=$!
  exec 7<"$W/out"
  head -c 100000 <&7 >/dev/null
  truncate -s 200000 "$W/m.q4nx"
  cat <&7 >/dev/null
  exec 7<&-
  st=0
  wait "$pid" || st=$?
  [ "$st" = 3 ] && grep -q 'm.q4nx: the file shrank while being read' "$W/err" || { echo "status $st"; cat "$W/err"; false; }
}

# held-out audit: the SIGBUS handler for mapped inputs returned on a SIGBUS that was sent (kill -BUS), not
# a fault: nothing repeated it, and the process went on as if the signal were ignored (exit 0)
@test "hardening: a SIGBUS sent to a reader of a mapped input keeps its default action (status 135)" {
  cp -r "$TOP/share/models/pytiny-target" "$W/pk"
  mkfifo "$W/out"
  oga-extract "$W/pk" -o "$W/out" 2>"$W/err" &
  local pid=$!
  exec 7<"$W/out"
  head -c 100000 <&7 >/dev/null # the pack is mapped (the handler is set), the writer blocked on the FIFO
  kill -BUS "$pid"
  cat <&7 >/dev/null
  exec 7<&-
  local st=0
  wait "$pid" || st=$?
  [ "$st" = 135 ] || { echo "status $st"; cat "$W/err"; false; }
  ! grep -q 'shrank' "$W/err"
}

@test "hardening: npu-forward -m PACK_DIR with a cache that cannot take the container: init failed (4) naming the directory, or q4nx-pack's own failure" {
  p=$TOP/share/models/pytiny-target
  echo file >"$W/notdir"
  # a file as OGAKIT_CACHE: q4nx-pack could not create the container, oga-extract was blamed (its broken pipe), exit 1
  run env OGAKIT_CACHE="$W/notdir" npu-forward info -m "$p"
  [ "$status" = 4 ] && [[ "$output" == *"cache directory $W/notdir: Not a directory (set OGAKIT_CACHE)"* ]] || false
  [ "$(cat "$W/notdir")" = file ]
  # the cache file past ulimit -f: q4nx-pack failed first, and its status and name are the import's
  mkdir "$W/cache"
  run bash -c "ulimit -f 1024; OGAKIT_CACHE='$W/cache' exec npu-forward info -m '$p'"
  [ "$status" = 1 ] && [[ "$output" == *"File too large"* ]] &&
    [[ "$output" == *"importing the pack failed (q4nx-pack exited 1)"* ]] || false
  [ -z "$(ls -A "$W/cache")" ]
  # a cache directory this user cannot write (root can: run as nobody where that works)
  [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null || skip "needs root and setpriv to run as nobody"
  local d
  d=$(mktemp -d /tmp/ogk-cache.XXXXXX) && chmod 755 "$d"
  mkdir "$d/ro" && chmod 555 "$d/ro"
  run setpriv --reuid=nobody --regid=nogroup --clear-groups env OGAKIT_CACHE="$d/ro" npu-forward info -m "$p"
  rm -rf "$d"
  [ "$status" = 4 ] && [[ "$output" == *"cache directory $d/ro: Permission denied (set OGAKIT_CACHE)"* ]] || false
}

# held-out audit: without HOME the import cache was /tmp/.cache/ogakit, a directory any local user can make first
# and fill with a container of their choosing under the name the import would look for
@test "hardening: npu-forward -m PACK_DIR without HOME caches under the account's home (passwd), never /tmp" {
  [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null || skip "needs root and setpriv to run as nobody"
  home=$(getent passwd nobody | cut -d: -f6)
  [ -n "$home" ] && [ ! -e "$home" ] || skip "nobody's home directory ($home) exists here"
  run setpriv --reuid=nobody --regid=nogroup --clear-groups env -u HOME -u XDG_CACHE_HOME -u OGAKIT_CACHE \
    npu-forward info -m "$TOP/share/models/pytiny-target"
  [ "$status" = 4 ] && [[ "$output" == *"cache directory $home/.cache/ogakit: "* ]] || { echo "$output"; false; }
}

# held-out audit: an importer killed by a signal (the OOM killer, a kill -9) was reported as "exited 4"
@test "hardening: npu-forward -m PACK_DIR whose importer is killed by a signal says so (exit 4), no container left" {
  mkdir "$W/bin" "$W/cache"
  cp "$(command -v npu-forward)" "$W/bin/"
  ln -s "$(command -v q4nx-pack)" "$W/bin/q4nx-pack"
  printf '#!/bin/sh\nkill -9 $$\n' >"$W/bin/oga-extract" && chmod +x "$W/bin/oga-extract"
  run env OGAKIT_CACHE="$W/cache" "$W/bin/npu-forward" info -m "$TOP/share/models/pytiny-target"
  [ "$status" = 4 ] && [[ "$output" == *"importing the pack failed (oga-extract was killed by signal 9 ("*")"* ]] ||
    { echo "$output"; false; }
  [ -z "$(ls -A "$W/cache")" ]
}

# the writer's "out of memory" for a tensor's buffers was exit 3, as if the stream were corrupt
@test "hardening: q4nx-pack with no memory for a tensor (ulimit -v) exits 4 (init failed), named, no file" {
  skip_under_san "ASan's shadow memory does not start under a small ulimit -v"
  oga-extract "$(fixture qwen2 cpu tied qwen05b 4)" -o "$W/s.ogax"
  mkdir "$W/out"
  run bash -c "ulimit -v 120000 && exec q4nx-pack -o '$W/out/m.q4nx' <'$W/s.ogax'"
  [ "$status" = 4 ] && [[ "$output" == *"out of memory"* ]] || { echo "$status $output"; false; }
  [ -z "$(ls -A "$W/out")" ]
}

# a pack file the process had no memory to map was a refusal like any other: "not importable", exit 3
@test "hardening: oga-info / oga-extract / q4nx-verify --pack with no memory to map a pack file (ulimit -v): exit 4, the refusal out_of_memory, nothing written" {
  skip_under_san "ASan's shadow memory does not start under a small ulimit -v"
  cp -r "$TOP/share/models/pytiny-target" "$W/pk"
  truncate -s 2G "$W/pk/model.onnx.data"   # the same bytes first, then a sparse 2 GiB to map
  run bash -c "ulimit -v $((1 << 20)) && exec oga-info -q '$W/pk'"
  [ "$status" = 4 ] || { echo "$output"; false; }
  echo "$output" | jq -e '.importable == false and ([.refusals[] | select(.what == "file model.onnx.data" and
      .code == "out_of_memory")] | length) == 1' >/dev/null
  local a
  for a in "" --allow-incomplete; do
    run bash -c "ulimit -v $((1 << 20)) && exec oga-extract $a '$W/pk' -o '$W/s.ogax'"
    [ "$status" = 4 ] && [[ "$output" == *"out of memory: the pack was not judged"* ]] && [ ! -e "$W/s.ogax" ] ||
      { echo "$a: $status $output"; false; }
  done
  # q4nx-verify --pack the same
  oga-extract "$TOP/share/models/pytiny-target" | q4nx-pack -o "$W/t.q4nx"
  run bash -c "ulimit -v $((1 << 20)) && exec q4nx-verify '$W/t.q4nx' --pack '$W/pk' --all"
  [ "$status" = 4 ] && [[ "$output" == *"mmap: Cannot allocate memory"* ]] || { echo "$output"; false; }
  # with the memory, the pack is judged: no such refusal
  run oga-info -q "$W/pk"
  [ "$(echo "$output" | jq '[.refusals[] | select(.code == "out_of_memory")] | length')" = 0 ]
}

@test "hardening: a tensor frame claiming a terabyte payload is refused by q4nx-pack before anything is allocated (exit 3, named)" {
  oga-extract "$TOP/share/models/pytiny-target" >"$W/t.ogax"
  /usr/bin/python3 - "$W/t.ogax" "$W/bad.ogax" <<'PY'
import json, os, struct, sys
d = bytearray(open(sys.argv[1], 'rb').read())
at = 0
while at < len(d):
    hl, pl = struct.unpack_from('<IQ', d, at + 4)
    if json.loads(d[at + 16:at + 16 + hl])['type'] == 'tensor':
        struct.pack_into('<Q', d, at + 8, 1 << 40)
        break
    at += 16 + hl + pl
open(sys.argv[2], 'wb').write(d)
PY
  run q4nx-pack -o "$W/x.q4nx" <"$W/bad.ogax"
  [ "$status" = 3 ]
  [[ "$output" == *"payload 1099511627776 bytes, parts say"* ]]
  [ ! -e "$W/x.q4nx" ]
}

# ogax_frames SRC DST PYSTMT: DST is SRC with its list of frames edited: PYSTMT changes `frames` (the frames
# before the end frame, each [header dict, payload bytes or an int: a claimed length with no bytes]); the end
# frame is recomputed from the result (counts, payload bytes, headers_crc32c), so only what PYSTMT did is wrong
ogax_frames() {
  /usr/bin/python3 - "$@" <<'PY'
import json, os, struct, sys
sys.path.insert(0, os.environ["TOP"] + "/t")
from crc32c import crc32c
b = open(sys.argv[1], "rb").read()
frames, at = [], 0
while at < len(b):
    hl, pl = struct.unpack_from("<IQ", b, at + 4)
    h = json.loads(b[at + 16:at + 16 + hl])
    if h["type"] != "end":
        frames.append([h, b[at + 16 + hl:at + 16 + hl + pl]])
    at += 16 + hl + pl
exec(sys.argv[3])
out, hcrc, pb = bytearray(), 0, 0
for h, pay in frames:
    hb = json.dumps(h, separators=(",", ":")).encode()
    plen = pay if isinstance(pay, int) else len(pay)
    pre = b"OGAX" + struct.pack("<IQ", len(hb), plen)
    hcrc = crc32c(crc32c(hcrc, pre), hb)
    out += pre + hb + (b"" if isinstance(pay, int) else pay)
    pb += plen
end = {"type": "end", "frames": len(frames), "tensors": sum(h["type"] == "tensor" for h, _ in frames),
       "assets": sum(h["type"] == "asset" for h, _ in frames), "payload_bytes": pb, "headers_crc32c": hcrc}
eb = json.dumps(end, separators=(",", ":")).encode()
open(sys.argv[2], "wb").write(out + b"OGAX" + struct.pack("<IQ", len(eb), 0) + eb)
PY
}

# held-out audit: the reader took frames in any order and of any type (--check passed an unknown type that
# q4nx-pack refuses), a model frame with a payload, an asset frame without a checksum (packed unchecked);
# a model, asset or unknown frame claiming 2 TiB was allocated before anything else: "out of memory", exit 4
@test "hardening: OGAX frames out of order, of an unknown type, a model frame with a payload, an asset frame without a checksum or of 2 TiB: refused by name (exit 3), no file" {
  oga-extract "$TOP/share/models/pytiny-target" >"$W/t.ogax"
  ogax_frames "$W/t.ogax" "$W/same.ogax" 'pass'
  run -0 q4nx-pack -o "$W/ok.q4nx" <"$W/same.ogax"
  run -0 oga-extract --check "$W/same.ogax"
  local i stmt want
  local -a cases=(
    'frames.insert(len(frames) - 1, frames.pop(1))' 'asset frame after the tensor frames'
    'frames.insert(2, [{"type": "note"}, b"abc"])' 'unknown type "note"'
    'frames.insert(2, [{"type": "note"}, 1 << 41])' 'unknown type "note"'
    'frames[0][1] = b"xyz"' 'model frame has a payload'
    'frames[0][1] = 1 << 41' 'model frame has a payload'
    'frames[1][0].pop("crc32c")' 'no crc32c'
    'frames[1][0]["crc32c"] = "0"' 'no crc32c'
    'frames[1][0].pop("name")' 'no name'
    'frames[1][0]["size"] = 10' 'size 10 contradicts the payload'
    'frames.insert(1, [{"type": "asset", "name": "x.json", "size": 1 << 41, "crc32c": 0}, 1 << 41])' 'larger than the 256 MiB asset limit'
  )
  for ((i = 0; i < ${#cases[@]}; i += 2)); do
    stmt=${cases[i]} want=${cases[i + 1]}
    ogax_frames "$W/t.ogax" "$W/f.ogax" "$stmt"
    run q4nx-pack -o "$W/m.q4nx" <"$W/f.ogax"
    [ "$status" = 3 ] && [[ "$output" == *"$want"* ]] && [ ! -e "$W/m.q4nx" ] || { echo "q4nx-pack, $stmt: $status $output"; return 1; }
    run oga-extract --check "$W/f.ogax"
    [ "$status" = 3 ] && [[ "$output" == *"$want"* ]] || { echo "--check, $stmt: $status $output"; return 1; }
  done
}

# held-out audit: --check passed streams q4nx-pack refuses (a role or an asset twice); q4nx-pack wrote a
# container with more assets than any reader takes (exit 0; q4nx-verify then refused it as corrupt)
@test "hardening: a tensor role or asset name twice is refused by --check as by q4nx-pack; 70000 assets are refused by q4nx-pack, not written as a container no reader opens" {
  oga-extract "$TOP/share/models/pytiny-target" >"$W/t.ogax"
  ogax_frames "$W/t.ogax" "$W/d.ogax" 'frames.append(frames[-1])'
  run -3 q4nx-pack -o "$W/m.q4nx" <"$W/d.ogax"
  [[ "$output" == *"duplicate role"* ]]
  run -3 oga-extract --check "$W/d.ogax"
  [[ "$output" == *"duplicate role"* ]]
  ogax_frames "$W/t.ogax" "$W/d.ogax" 'frames.insert(2, frames[1])'
  run -3 q4nx-pack -o "$W/m.q4nx" <"$W/d.ogax"
  [[ "$output" == *"duplicate name"* ]]
  run -3 oga-extract --check "$W/d.ogax"
  [[ "$output" == *"duplicate name"* ]]
  ogax_frames "$W/t.ogax" "$W/many.ogax" \
    'frames[1:1] = [[{"type": "asset", "name": "a%d" % i, "size": 0, "crc32c": 0}, b""] for i in range(70000)]'
  run q4nx-pack -o "$W/m.q4nx" <"$W/many.ogax"
  [ "$status" = 3 ] && [[ "$output" == *"more than 65536 assets"* ]] && [ ! -e "$W/m.q4nx" ] || { echo "$status $output"; return 1; }
}

# held-out audit: q4nx-pack looked for a repeated role by comparing each tensor's with every earlier one's:
# 80 000 one-value tensors took 11 s of CPU, the 2^20 a container holds about half an hour (a hang)
@test "hardening: 200 000 tiny tensor frames are packed in linear time (was quadratic in the role check)" {
  /usr/bin/python3 - "$W/many.ogax" 200000 <<'PY'
import json, os, struct, sys
n = int(sys.argv[2])
sys.path.insert(0, os.environ["TOP"] + "/t")
from crc32c import crc32c
out, hcrc = [], 0
def frame(h, pay=b""):
    global hcrc
    hb = json.dumps(h, separators=(",", ":")).encode()
    pre = b"OGAX" + struct.pack("<IQ", len(hb), len(pay))
    if h["type"] != "end":
        hcrc = crc32c(crc32c(hcrc, pre), hb)
    out.append(pre + hb + pay)
frame({"type": "model", "ogax": 2, "model": {"num_layers": n}, "source": {}})
one = struct.pack("<f", 1.0)
for i in range(n):
    frame({"type": "tensor", "name": "w%d" % i, "role": "layers.%d.input_norm" % i, "dtype": "f32", "shape": [1],
           "parts": [{"name": "data", "offset": 0, "size": 4, "crc32c": crc32c(0, one)}]}, one)
frame({"type": "end", "frames": n + 1, "tensors": n, "assets": 0, "payload_bytes": 4 * n, "headers_crc32c": hcrc})
open(sys.argv[1], "wb").write(b"".join(out))
PY
  run timeout 30 q4nx-pack -o "$W/m.q4nx" <"$W/many.ogax"
  [ "$status" = 0 ] || { echo "$status $output"; return 1; }
  run -0 q4nx-verify "$W/m.q4nx"
}

# held-out audit: jansson refuses text that is not UTF-8, so a report naming such a path was built as nothing
# (npu-forward info printed nothing with exit 0) or lost its key (q4nx-verify's "file" and "container")
@test "hardening: a path that is not UTF-8 is named in the JSON reports ('?' for its bytes from 0x80), never an empty or partial report" {
  p=$TOP/share/models/pytiny-target
  m=$W/$'m\xfe.q4nx'
  oga-extract "$p" | q4nx-pack -o "$m"
  run -0 npu-forward info -m "$m"
  echo "$output" | jq -e --arg w "$W/m?.q4nx" '.model == $w and .family == "qwen2"' >/dev/null
  run -0 q4nx-verify "$m"
  echo "$output" | jq -e --arg w "$W/m?.q4nx" '.file == $w and (.container | type) == "object"' >/dev/null
  echo '[1, 2, 3]' >"$W/ids"
  run -0 npu-forward logits -m "$m" --ids "$W/ids" --out-f32 "$W/"$'l\xff.f32'
  echo "$output" | jq -e --arg w "$W/l?.f32" '.logits_f32 == $w' >/dev/null
  # what an error message quotes cannot drive the terminal: control characters (here an escape sequence in
  # a file name, as a peer's answer or a recording's names may hold) are written as '?'
  run -3 npu-forward info -m "$W/"$'x\e[2Jy\a.q4nx'
  [[ "$output" == *"x?[2Jy?.q4nx"* ]]
  [[ "$output" != *$'\e'* ]]
  run -0 npu-gemm --sweep -m "$m" --reps 1 --check-rows 0
  echo "$output" | jq -e --arg w "$W/m?.q4nx" '.model == $w' >/dev/null
}

# held-out audit: -o naming the run's own input replaced it (the model by logits, the prompts or the model by
# a recording, the stream by its container, the pack's weights by the stream)
@test "hardening: -o (or standard output) naming a file the run reads is refused (exit 2) and the file is kept" {
  cp -r "$TOP/share/models/pytiny-target" "$W/pk"
  oga-extract "$W/pk" >"$W/s.ogax"
  q4nx-pack -o "$W/m.q4nx" <"$W/s.ogax"
  echo '[1, 2, 3]' >"$W/ids"
  echo '[{"text": "def f"}]' >"$W/prompts.json"
  md5sum "$W/pk/model.onnx.data" "$W/s.ogax" "$W/m.q4nx" "$W/ids" "$W/prompts.json" >"$W/sums"
  run -2 npu-forward logits -m "$W/m.q4nx" --ids "$W/ids" --out-f32 "$W/m.q4nx"
  [[ "$output" == *"is an input of this run"* ]]
  run -2 npu-forward logits -m "$W/m.q4nx" --ids "$W/ids" --out-f32 "$W/ids"
  run -2 bash -c "npu-forward logits -m '$W/m.q4nx' --ids - --out-f32 '$W/ids' <'$W/ids'"
  run -2 spec-replay record -m "$W/m.q4nx" --prompts "$W/prompts.json" --tokens 2 -o "$W/prompts.json"
  run -2 spec-replay record -m "$W/m.q4nx" --prompts "$W/prompts.json" --tokens 2 -o "$W/m.q4nx"
  run -2 bash -c "q4nx-pack -o '$W/s.ogax' <'$W/s.ogax'"
  [[ "$output" == *"standard input"* ]]
  run -2 oga-extract -o "$W/pk/model.onnx.data" "$W/pk"
  # an empty -o is a usage error too (it was 1, as if a file could not be written)
  run -2 oga-extract -o "" "$W/pk"
  [[ "$output" == *"empty output path"* ]]
  run -2 bash -c "q4nx-pack -o '' <'$W/s.ogax'"
  run -2 q4nx-gguf -o "" "$W/m.q4nx"
  ln -s "$W/m.q4nx" "$W/link.q4nx"
  run -2 npu-forward logits -m "$W/m.q4nx" --ids "$W/ids" --out-f32 "$W/link.q4nx"
  # standard output appended to an input (">>": the shell does not truncate it) was written into the file read
  run -2 bash -c "q4nx-gguf --widen '$W/m.q4nx' >>'$W/m.q4nx'"
  [[ "$output" == *"standard output"* ]]
  run -2 bash -c "oga-extract '$W/pk' >>'$W/pk/model.onnx.data'"
  run -2 bash -c "q4nx-pack <'$W/s.ogax' >>'$W/s.ogax'"
  run -2 bash -c "npu-forward info -m '$W/m.q4nx' >>'$W/m.q4nx'"
  md5sum -c --quiet "$W/sums"
  [ -z "$(ls -a "$W/pk" "$W" | grep -E '\.tmp\.[0-9]+$')" ]
  # another file is written as before
  run -0 npu-forward logits -m "$W/m.q4nx" --ids "$W/ids" --out-f32 "$W/l.f32"
  [ -s "$W/l.f32" ]
}

# npu-forward(1) says "-" is standard input for a container; "-m -" was "-: No such file or directory"
@test "hardening: a container from standard input (-m -): a redirected file or a pipe; a terminal or device refused (3)" {
  oga-extract "$TOP/share/models/pytiny-target" | q4nx-pack -o "$W/m.q4nx"
  want=$(npu-forward info -m "$W/m.q4nx" | jq -c '[.family, .layers, .vocab_size]')
  [ "$(npu-forward info -m - <"$W/m.q4nx" | jq -c '[.family, .layers, .vocab_size]')" = "$want" ]
  [ "$(cat "$W/m.q4nx" | npu-forward info -m - | jq -c '[.family, .layers, .vocab_size]')" = "$want" ]
  cat "$W/m.q4nx" | q4nx-verify - >/dev/null
  run -3 npu-forward info -m - </dev/null
  [[ "$output" == *"standard input: not a regular file or a pipe"* ]]
  # a damaged container from a pipe is refused as from a file
  head -c 5000 "$W/m.q4nx" | { run -3 npu-forward info -m -; }
}

@test "hardening: an endless container or pack input (/dev/zero by path, as a pipe on -, behind a pack's symlinks) ends at once, named, exit 3" {
  # (old: a pipe on '-' was read whole before its magic was looked at: cat /dev/zero | q4nx-verify - grew
  # until memory ran out; the limit here keeps a regression from filling the machine)
  local lim=
  [ "${OGAKIT_SAN:-0}" = 1 ] || lim="ulimit -v 4000000;"
  local c
  for c in "q4nx-verify -" "q4nx-gguf -o $W/z.gguf -" "npu-forward info -m -" "npu-forward run -m - -p hi -n 1" \
           "spec-replay -m - -d - -p hi"; do
    run timeout 20 bash -c "$lim cat /dev/zero | $c"
    [ "$status" -eq 3 ] || { echo "$c: exit $status: $output"; return 1; }
    [[ "$output" == *"standard input: not a Q4NX container (bad magic; the pipe is not read further)"* ]] ||
      { echo "$c: $output"; return 1; }
  done
  [ ! -e "$W/z.gguf" ]
  # a GGUF read from a pipe: the same
  oga-extract "$(fixture qwen2 cpu tied)" | q4nx-pack -o "$W/m.q4nx"
  run timeout 20 bash -c "$lim cat /dev/zero | q4nx-gguf --check '$W/m.q4nx' -"
  [ "$status" -eq 3 ] && [[ "$output" == *"standard input: not a GGUF file (bad magic; the pipe is not read further)"* ]] || false
  # by path: every program that takes a file, and q4nx-pack's stream
  for c in "q4nx-verify /dev/zero" "q4nx-gguf -o $W/z.gguf /dev/zero" "npu-forward info -m /dev/zero" \
           "npu-gemm -m /dev/zero --tensor x" "oga-info /dev/zero" "oga-extract /dev/zero" "q4nx-verify $W/m.q4nx --pack /dev/zero"; do
    run timeout 20 bash -c "$lim $c"
    [ "$status" -eq 3 ] && [[ "$output" == *"/dev/zero: not a "* ]] || { echo "$c: exit $status: $output"; return 1; }
  done
  run timeout 20 bash -c "$lim q4nx-pack -o '$W/z.q4nx' < /dev/zero"
  [ "$status" -eq 3 ] && [[ "$output" == *"not an OGAX frame at byte 0 (bad magic)"* ]] && [ ! -e "$W/z.q4nx" ] || false
  # a pack whose files are /dev/zero (symlinks): refused by name, never read
  local f pack
  pack=$(fixture qwen2 cpu tied)
  for f in model.onnx model.onnx.data genai_config.json config.json tokenizer.json tokenizer_config.json; do
    rm -rf "$W/zp"
    linkpack "$pack" "$W/zp"
    ln -sf /dev/zero "$W/zp/$f"
    run timeout 20 bash -c "$lim oga-extract '$W/zp' -o '$W/zp.ogax'"
    [ "$status" -eq 3 ] && [[ "$output" == *"file $f: "*"not a regular file (a character device)"* ]] && [ ! -e "$W/zp.ogax" ] ||
      { echo "$f: exit $status: $output"; return 1; }
    run timeout 20 bash -c "$lim oga-info -q '$W/zp'"
    [ "$status" -eq 3 ] || { echo "oga-info $f: exit $status"; return 1; }
  done
}

@test "hardening: a pack's JSON or tokenizer file too large to read into memory (ulimit -v) is out_of_memory, exit 4, not file_unreadable (3)" {
  skip_under_san "ASan's shadow memory does not start under a small ulimit -v"
  local f
  for f in tokenizer_config.json tokenizer.json config.json; do
    rm -rf "$W/pk"
    cp -r "$TOP/share/models/pytiny-target" "$W/pk"
    truncate -s 2G "$W/pk/$f" # read whole (not mapped): the buffer cannot grow to 2 GiB under 1 GiB
    run --separate-stderr bash -c "ulimit -v $((1 << 20)) && exec oga-info -q '$W/pk'"
    [ "$status" = 4 ] || { echo "$f: $status $output $stderr"; false; }
    echo "$output" | jq -e --arg w "file $f" '([.refusals[] | select(.what == $w and .code == "out_of_memory")] | length) == 1 and
        ([.refusals[] | select(.code == "file_unreadable")] | length) == 0' >/dev/null || { echo "$output" | jq -c .refusals; false; }
  done
}
