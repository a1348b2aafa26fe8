#!/usr/bin/env bats
# npu-forward: parity with the onnxruntime oracle (tools/ort-ref.js) on the fixture packs, and the
# command line's errors. Expected values come from onnxruntime (and @huggingface/tokenizers for the
# prompt ids in share/prompts/gates.json); never from ogakit.
#
# Gates (issue 6), teacher-forced over the gates.json prompts plus 32 oracle-generated tokens each:
#   f32: mean KL(oracle || ours) < 1e-5 in each of 12 chunks of 64 positions, same top-1 wherever the
#        oracle's top-1/top-2 gap > 1e-2; oracle = accuracy_level 0, fp32 activations.
#   i8:  mean KL no larger than onnxruntime's own accuracy_level 4 run against its level-0 run.
load helpers
bats_require_minimum_version 1.5.0

KL_MAX=1e-5
# plain_run: true in the plain build's run; a test's further gates on a path the first one already took
# (other layouts, feeds, packs of the same family) are left to it under SAN=1
plain_run() { [ "${OGAKIT_SAN:-0}" != 1 ]; }
# Under SAN=1 the gates read the first two prompts (154-179 positions, 12 chunks of 12) unless a test says
# otherwise: the sanitizer run looks for memory errors along the same code paths, and one gate there still
# reads all three (a 512-row i8 prefill pass); the plain run holds every bound over all prompts.
if [ "${OGAKIT_SAN:-0}" = 1 ]; then
  : "${NPROMPTS:=2}" "${CHUNK:=12}"
  export NPROMPTS CHUNK
fi

setup_file() {
  work=/dev/shm
  [ -w "$work" ] || work=${BATS_FILE_TMPDIR:-/tmp}
  export W=$(mktemp -d "$work/ogk-forward.XXXXXX")
  # the comparator: test code, independent of ogakit (libc + libm)
  fc=$OGAKIT_BUILD/ttools/forward-compare
  [ -x "$fc" ] || { echo "forward-compare not built (make builds $fc)" >&2; return 1; }
  cp "$fc" "$W/forward-compare"
}

teardown_file() { rm -rf "$W"; }

# container FAMILY STYLE TIE LAYOUT [ACC] [IODTYPE] -> path (built once per run); GEOM=hd96|hd128 for
# packs of other head sizes (default tiny)
container() {
  local fam=$1 style=$2 tie=$3 layout=$4 acc=${5:-0} io=${6:-fp32} geom=${GEOM:-tiny}
  local out=$W/$fam-$style-$tie-$geom-acc$acc-$io.$layout.q4nx
  if [ ! -s "$out" ]; then
    local pack
    pack=$(fixture "$fam" "$style" "$tie" "$geom" "$acc" "$io")
    oga-extract "$pack" | q4nx-pack -l "$layout" -o "$out"
  fi
  echo "$out"
}

# prompt_ids FAMILY INDEX -> JSON array (reference tokenizer's ids)
prompt_ids() { jq -c ".prompts[$2].ids.$1" "$TOP/share/prompts/gates.json"; }

# nprompts -> how many of the gates' prompts a gate reads: $NPROMPTS, else all of them
nprompts() { echo "${NPROMPTS:-$(jq '.prompts | length' "$TOP/share/prompts/gates.json")}"; }

# oracle_seqs FAMILY STYLE TIE [IODTYPE]: $W/<fam-style-tie-geom-io-pN>.seq<i>.json, prompt i + 32 greedy
# tokens of the level-0 oracle (so every accuracy level sees the same ids); echoes that prefix
oracle_seqs() {
  local fam=$1 style=$2 tie=$3 io=${4:-fp32} geom=${GEOM:-tiny} seqs n
  n=$(nprompts)
  seqs=$W/$fam-$style-$tie-$geom-$io-p$n
  if [ ! -s "$seqs.seq0.json" ]; then
    # fewer prompts than the gates hold (the sanitizer run, the big vocabularies): the first n sequences
    # of the greedy run over all of them when that run is cached already (the plain run computed it);
    # else a run over the n
    local pack all use=$n
    pack=$(fixture "$fam" "$style" "$tie" "$geom" 0 "$io")
    all=$(jq '.prompts | length' "$TOP/share/prompts/gates.json")
    [ "$n" -lt "$all" ] && oracle_cached_has "$pack" generate -n 32 --no-logits \
      --ids "$(jq -c "[.prompts[:$all][].ids.$fam]" "$TOP/share/prompts/gates.json")" && use=$all
    oracle_cached "$pack" generate -n 32 --no-logits \
      --ids "$(jq -c "[.prompts[:$use][].ids.$fam]" "$TOP/share/prompts/gates.json")" >"$seqs.gen.json"
    # one jq for all n: line i is sequence i
    jq -c ".batch[:$n][] | .prompt_ids + .ids" "$seqs.gen.json" >"$seqs.lines"
    [ "$(wc -l <"$seqs.lines")" -eq "$n" ]
    split -a 1 -d -l 1 --additional-suffix=.json "$seqs.lines" "$seqs.seq"
  fi
  echo "$seqs"
}

# oracle FAMILY STYLE TIE [ACC] [IODTYPE]: $W/<key>.f32, the oracle's teacher-forced logits over the
# oracle_seqs sequences in order. One onnxruntime session per step (the sequences go in as one batch).
# Echoes the key.
oracle() {
  local fam=$1 style=$2 tie=$3 acc=${4:-0} io=${5:-fp32} geom=${GEOM:-tiny} key seqs
  key=$fam-$style-$tie-$geom-acc$acc-$io-p$(nprompts)
  seqs=$(oracle_seqs "$fam" "$style" "$tie" "$io")
  if [ ! -s "$W/$key.f32" ]; then
    jq -s -c . "$seqs".seq*.json >"$seqs.all.json"
    node "$TOP/tools/ort-ref.js" "$(fixture "$fam" "$style" "$tie" "$geom" "$acc" "$io")" teacher \
      --ids-file "$seqs.all.json" --logits-f32 "$W/$key.f32" >/dev/null
  fi
  echo "$key"
}

# peer_kl FAMILY STYLE TIE IODTYPE VOCAB: the i8 gates' bound, the mean KL of onnxruntime's accuracy_level 4
# run (fp32 io) against its level-0 run (IODTYPE) on the same ids. Two oracle runs and the comparator, so
# the number is kept under .cache/oracle keyed by both packs' fixture stamps, the ids, the oracle script,
# the onnxruntime version and the comparator's source (as oracle_cached): the sanitizer run and a file's
# later gates on the same ids take it from there instead of running onnxruntime's level 4 again.
peer_kl() {
  local fam=$1 style=$2 tie=$3 io=$4 V=$5 geom=${GEOM:-tiny} p0 p4 seqs s4 h f key k4
  local memo=$W/peer.$fam-$style-$tie-$geom-$io-p$(nprompts)
  [ ! -s "$memo" ] || { cat "$memo"; return; }
  p0=$(fixture "$fam" "$style" "$tie" "$geom" 0 "$io")
  p4=$(fixture "$fam" "$style" "$tie" "$geom" 4 fp32)
  seqs=$(oracle_seqs "$fam" "$style" "$tie" "$io")
  s4=$(oracle_seqs "$fam" "$style" "$tie" fp32)
  h=$(oracle_cache_key "$p0" peer-kl "$(cat "$p4/.stamp" "$seqs".seq*.json "$s4".seq*.json "$TOP/t/forward-compare.c")")
  f=$TOP/.cache/oracle/$h.json
  if [ ! -s "$f" ]; then
    key=$(oracle "$fam" "$style" "$tie" 0 "$io")
    k4=$(oracle "$fam" "$style" "$tie" 4)
    mkdir -p "${f%/*}"
    "$W/forward-compare" --vocab "$V" "$W/$key.f32" "$W/$k4.f32" >"$f.$$.out" || { cat "$f.$$.out"; rm -f "$f.$$"*; return 1; }
    jq .mean_kl "$f.$$.out" >"$f.$$" && rm "$f.$$.out" && mv "$f.$$" "$f"
  fi
  cp "$f" "$memo"
  cat "$f"
}

# vocab CONTAINER -> its vocabulary size (npu-forward info, once per container)
vocab() {
  [ -s "$1.vocab" ] || npu-forward info -m "$1" | jq .vocab_size >"$1.vocab"
  cat "$1.vocab"
}

# gate FAMILY STYLE TIE LAYOUT MODE [FEED]: our logits vs the level-0 oracle; prints the compare JSON
# on fd 3 and sets $output; bound: KL_MAX for f32, the peer bound for i8. Our rows go to the comparator
# through a pipe (each prompt's npu-forward in turn), not through a file; a failed npu-forward fails
# the gate (its status is kept in $W/ours.status).
gate() {
  local fam=$1 style=$2 tie=$3 layout=$4 mode=$5 feed=${6:-prefill} m key n i V seqs bound gap threads=
  local io=${IO:-fp32} geom=${GEOM:-tiny}
  m=$(container "$fam" "$style" "$tie" "$layout" 0 "$io")
  key=$(oracle "$fam" "$style" "$tie" 0 "$io")
  n=$(nprompts)
  seqs=$(oracle_seqs "$fam" "$style" "$tie" "$io")
  V=$(vocab "$m")
  # one-row passes of a tiny model: pool wake-ups would cost more than the work
  [ "$feed" = prefill ] || threads="-t 1"
  bound=$KL_MAX gap=${GAP:-1e-2}
  if [ "$mode" = i8 ]; then
    # the peer bound: onnxruntime's accuracy_level 4 against its own level-0 run on the same ids;
    # ours must be no larger. top-1 is not checked (the peer itself flips a few percent of them).
    bound=$(peer_kl "$fam" "$style" "$tie" "$io" "$V") gap=inf
    echo "# ort acc4 vs acc0: mean KL $bound (bound $bound)" >&3
  fi
  rm -f "$W/ours.status"
  ours() {
    local i
    for ((i = 0; i < n; i++)); do
      npu-forward logits -m "$m" --mode "$mode" --feed "$feed" $threads --ids "$seqs.seq$i.json" \
        --out-f32 /dev/fd/4 4>&1 >/dev/null || echo "prompt $i: npu-forward exited $?" >>"$W/ours.status"
    done
  }
  if [ "$mode" = i8 ]; then
    run "$W/forward-compare" --vocab "$V" --gap "$gap" "$W/$key.f32" <(ours)
  else
    run "$W/forward-compare" --vocab "$V" --kl-max "$bound" --gap "$gap" --chunk "${CHUNK:-64}" "$W/$key.f32" <(ours)
  fi
  echo "# $fam $style $tie $geom $layout $mode $feed: $(echo "$output" | jq -c '{positions, mean_kl, max_kl, chunk_mean_kl_max, top1_checked, top1_mismatched}')" >&3
  [ ! -e "$W/ours.status" ] || { cat "$W/ours.status"; return 1; }
  [ "$status" -eq 0 ]
  [ "$mode" != i8 ] || awk -v k="$(echo "$output" | jq .mean_kl)" -v b="$bound" 'BEGIN { exit !(k <= b) }'
}

@test "the comparator: KL as numpy computes it, and it fails on a bound, a top-1 flip, a NaN" {
  # 24 positions over a vocabulary of 3000: random logits, ours = oracle + noise; KL per position in
  # numpy (float64, log-softmax), independent of the comparator's own exp
  /usr/bin/python3 - "$W" <<'PY'
import sys, json, numpy as np
w = sys.argv[1]; r = np.random.default_rng(7)
o = (r.standard_normal((24, 3000)) * 4).astype(np.float32)
u = (o + r.standard_normal(o.shape) * 0.05).astype(np.float32)
def ls(x):
    x = x.astype(np.float64); m = x.max(1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(1, keepdims=True))
lo, lu = ls(o), ls(u)
kl = (np.exp(lo) * (lo - lu)).sum(1)
o.tofile(w + "/c.o.f32"); u.tofile(w + "/c.u.f32")
flip = o.copy(); i = int(o[3].argmax()); flip[3, i] = o[3].min() - 1; flip.tofile(w + "/c.flip.f32")
nan = o.copy(); nan[5, 17] = np.nan; nan.tofile(w + "/c.nan.f32")
json.dump({"mean": float(kl.mean()), "max": float(kl.max())}, open(w + "/c.want.json", "w"))
PY
  run "$W/forward-compare" --vocab 3000 --chunk 2 --chunks 12 --kl-max 1 "$W/c.o.f32" "$W/c.u.f32"
  [ "$status" -eq 0 ]
  echo "$output" | jq -e --slurpfile w "$W/c.want.json" '.positions == 24 and .nonfinite == 0 and
    ((.mean_kl - $w[0].mean) | fabs) <= 1e-5 * $w[0].mean and ((.max_kl - $w[0].max) | fabs) <= 1e-5 * $w[0].max'
  run "$W/forward-compare" --vocab 3000 --chunk 2 --chunks 12 --kl-max 1e-9 "$W/c.o.f32" "$W/c.u.f32"
  [ "$status" -eq 1 ]
  run "$W/forward-compare" --vocab 3000 --chunk 2 --chunks 12 --kl-max 1e9 "$W/c.o.f32" "$W/c.o.f32"
  [ "$status" -eq 0 ] && [ "$(echo "$output" | jq .mean_kl)" = 0 ] || false
  run "$W/forward-compare" --vocab 3000 --chunk 2 --chunks 12 --kl-max 1e9 "$W/c.o.f32" "$W/c.flip.f32"
  [ "$status" -eq 1 ] && echo "$output" | jq -e '.top1_mismatched == 1 and .first_mismatch.position == 3' || false
  run "$W/forward-compare" --vocab 3000 "$W/c.o.f32" "$W/c.nan.f32" # no bound: a NaN fails all the same
  [ "$status" -eq 1 ] && echo "$output" | jq -e '.nonfinite == 1' || false
  run "$W/forward-compare" --vocab 3000 --chunk 2 --chunks 13 --kl-max 1e9 "$W/c.o.f32" "$W/c.o.f32"
  [ "$status" -eq 1 ] # fewer chunks than asked for
  # ours through a pipe (as the gates give it): the same JSON as from the file; a stream that ends early,
  # mid-row or goes on past the oracle's rows fails
  want=$("$W/forward-compare" --vocab 3000 --chunk 2 --chunks 12 --kl-max 1 "$W/c.o.f32" "$W/c.u.f32")
  run "$W/forward-compare" --vocab 3000 --chunk 2 --chunks 12 --kl-max 1 "$W/c.o.f32" <(cat "$W/c.u.f32")
  [ "$status" -eq 0 ] && [ "$(echo "$output" | jq -c 'del(.first_mismatch)')" = "$(echo "$want" | jq -c 'del(.first_mismatch)')" ] || false
  run "$W/forward-compare" --vocab 3000 "$W/c.o.f32" <(cat "$W/c.nan.f32")
  [ "$status" -eq 1 ] && echo "$output" | jq -e '.nonfinite == 1' || false
  run "$W/forward-compare" --vocab 3000 "$W/c.o.f32" <(head -c $((23 * 3000 * 4)) "$W/c.u.f32")
  [ "$status" -eq 1 ] && [[ "$output" == *"ends at 23 rows"* ]] || false
  run "$W/forward-compare" --vocab 3000 "$W/c.o.f32" <(head -c $((24 * 3000 * 4 - 2)) "$W/c.u.f32")
  [ "$status" -eq 1 ] && [[ "$output" == *"ends at 23 rows"* ]] || false
  run "$W/forward-compare" --vocab 3000 "$W/c.o.f32" <(cat "$W/c.u.f32"; echo more)
  [ "$status" -eq 1 ] && [[ "$output" == *"goes on past the 24 rows"* ]] || false
}

# ---- f32 gates: every family x style, tied and untied alternating, both layouts ----
@test "gate f32: qwen2 cpu tied (b8, rm)"    { gate qwen2 cpu tied b8 f32;   gate qwen2 cpu tied rm f32; }
@test "gate f32: qwen2 amd untied (b8, rm)"  { gate qwen2 amd untied b8 f32; gate qwen2 amd untied rm f32; }
@test "gate f32: llama cpu untied (b8, rm)"  { gate llama cpu untied b8 f32; gate llama cpu untied rm f32; }
@test "gate f32: llama amd tied (b8, rm)"    { gate llama amd tied b8 f32;   gate llama amd tied rm f32; }
@test "gate f32: qwen3 cpu tied (b8, rm)"    { gate qwen3 cpu tied b8 f32;   gate qwen3 cpu tied rm f32; }
@test "gate f32: qwen3 amd untied (b8, rm)"  { gate qwen3 amd untied b8 f32; gate qwen3 amd untied rm f32; }
@test "gate f32: phi3 cpu untied (b8, rm)"   { gate phi3 cpu untied b8 f32;  gate phi3 cpu untied rm f32; }
@test "gate f32: phi3 amd tied (b8, rm)"     { gate phi3 amd tied b8 f32;    gate phi3 amd tied rm f32; }

# ---- gemma2: the embedding scaled, sandwich norms, a GELU (tanh) gate, scores scaled by
# query_pre_attn_scalar^-0.5 and soft-capped, logits soft-capped, a sliding window of 8 positions on
# every other layer, 256k ids. The first two prompts (6 and 99 tokens, + 32 each: 169 positions, the
# second crossing the window throughout; 12 chunks of 14) keep the 256k-wide logit files of the oracle small ----
@test "gate f32: gemma2 cpu tied (b8, rm), amd untied (b8); decode and verify feeds" {
  export NPROMPTS=2 CHUNK=14   # 12 chunks of 14 of the 169 positions
  gate gemma2 cpu tied b8 f32
  gate gemma2 cpu tied b8 f32 step
  gate gemma2 amd untied b8 f32 verify
  # under SAN=1 the untied pack's prompt run and the rm layout are left to the plain run: the verify feed
  # above reads the same untied pack, and the rm layout's weight paths run in "gate f32: qwen2 cpu tied"
  plain_run || return 0
  gate gemma2 cpu tied rm f32
  gate gemma2 amd untied b8 f32
}
@test "gate i8: gemma2 (cpu tied b8, amd untied rm, decode feed): mean KL no larger than onnxruntime acc4's" {
  export NPROMPTS=2
  gate gemma2 cpu tied b8 i8
  gate gemma2 cpu tied b8 i8 step
  # under SAN=1 left to the plain run: gemma2's i8 attention runs above and in the kernel-row test (verify
  # feed), the rm layout's i8 weight paths in "gate i8: every family" (qwen3 amd untied rm, phi3 cpu untied rm)
  plain_run || return 0
  gate gemma2 amd untied rm i8
}
# batch_rows FAMILY: t/unit/model_batch on that fixture (cpu tied, b8): its 20 checks pass
batch_rows() {
  run "$OGAKIT_BUILD/t/model_batch" "$(container "$1" cpu tied b8)"
  echo "$output"
  [ "$status" = 0 ]
  [ "$(echo "$output" | grep -c '^ok ')" = 20 ]
}
@test "gemma2: batched rows bit-identical to one-token passes (model_forward_batch, f32 and i8)" { batch_rows gemma2; }

# ---- gemma (Gemma 1): the embedding scaled by sqrt(hidden), RMSNorm weights stored + 1, a GELU (tanh)
# gate; no sandwich norms, caps or window (those are gemma2's). 256k ids: the first two prompts ----
@test "gate f32: gemma cpu tied (b8), amd untied (b8, verify feed); i8 (rm)" {
  export NPROMPTS=2 CHUNK=14
  gate gemma cpu tied b8 f32
  plain_run || return 0
  gate gemma amd untied b8 f32 verify
  gate gemma amd untied rm i8
}

# ---- chatglm (ChatGLM3): q/k/v biases, RoPE on the first half of each head in adjacent pairs (interleaved,
# partial); onnxruntime wants a cos cache width that is a multiple of 8: head_dim 64 (GEOM hd64) ----
@test "gate f32: chatglm cpu tied (b8, prompt and decode feeds), amd untied (b8 verify feed, fp32 and fp16 io); i8 (rm)" {
  export GEOM=hd64
  gate chatglm cpu tied b8 f32
  plain_run || return 0
  gate chatglm cpu tied b8 f32 step
  gate chatglm amd untied b8 f32 verify
  KL_MAX=1e-4 GAP=0.05 IO=fp16 gate chatglm amd untied b8 f32
  gate chatglm amd untied rm i8 verify
}

# ---- olmo (AMD-OLMo): every norm of the residual stream a LayerNorm (mean subtracted) with weight and
# bias (LayerNormalization, then SkipLayerNormalization); the fixture's weights and biases are random, so
# dropping the mean, the weight or the bias fails the bound ----
@test "gate f32: olmo cpu tied (b8, rm), amd untied (b8); decode and verify feeds" {
  gate olmo cpu tied b8 f32
  plain_run || return 0
  gate olmo cpu tied rm f32
  gate olmo cpu tied b8 f32 step
  gate olmo amd untied b8 f32 verify
}
@test "gate i8: olmo (cpu tied b8, amd untied rm verify feed): mean KL no larger than onnxruntime acc4's" {
  gate olmo cpu tied b8 i8
  plain_run || return 0
  gate olmo amd untied rm i8 verify
}
@test "olmo: batched rows bit-identical to one-token passes (model_forward_batch, f32 and i8)" { batch_rows olmo; }

# ---- amd-style packs in their default fp16 I/O: onnxruntime computes in fp16, so its logits carry
# fp16 rounding (a logit step of 1/64 near 10); bound KL 1e-4, top-1 where the gap exceeds 0.05 ----
@test "gate fp16-io oracle: qwen3 amd tied (rm), phi3 amd untied (b8) (fp16 scales), gemma2 amd tied (fp32 norms, Casts), olmo amd untied" {
  KL_MAX=1e-4 GAP=0.05 IO=fp16 gate qwen3 amd tied rm f32
  KL_MAX=1e-4 GAP=0.05 IO=fp16 gate phi3 amd untied b8 f32
  NPROMPTS=2 CHUNK=14 KL_MAX=1e-4 GAP=0.05 IO=fp16 gate gemma2 amd tied b8 f32
  KL_MAX=1e-4 GAP=0.05 IO=fp16 gate olmo amd untied b8 f32
}

# ---- the decode (M = 1) and verify (M <= 16) passes agree with the oracle too ----
@test "gate f32: step and verify feeds (qwen2 cpu tied, llama amd untied)" {
  gate qwen2 cpu tied b8 f32 step
  gate qwen2 cpu tied b8 f32 verify
  gate llama amd untied b8 f32 verify
}

# ---- head sizes of the bigger real models (128: Qwen2.5-1.5B, Llama-3.2-3B, Mistral; 96: Phi-3), whose
# attention takes other code than the fixtures' 16 and Qwen2.5-0.5B's 64 ----
@test "gate head_dim 128 and 96: f32 prompt, decode and verify feeds, and i8" {
  GEOM=hd128 gate qwen2 cpu tied b8 f32
  GEOM=hd128 gate qwen2 cpu tied b8 f32 step
  GEOM=hd128 gate llama amd untied rm f32 verify
  GEOM=hd128 gate qwen2 cpu tied b8 i8
  # qwen2 cpu tied hd128 b8 i8 verify: the next test's, on every kernel row (the default one among them)
  # under SAN=1 hd128's i8 verify rows run in the next test (qwen2 cpu tied, each kernel row)
  if plain_run; then GEOM=hd128 gate llama amd untied b8 i8 verify; fi
  GEOM=hd96 gate phi3 cpu untied b8 f32
  GEOM=hd96 gate phi3 amd tied rm f32 verify
  GEOM=hd96 gate phi3 cpu untied b8 i8
  GEOM=hd96 gate phi3 cpu untied b8 i8 step
}

@test "gate head_dim 64 and 128 and gemma2, i8 verify feed, on every kernel row this CPU has (each row's attention)" {
  local k
  for k in ref avx2 avx512 amx; do
    if [ "$k" = ref ] && [ "${OGAKIT_SAN:-0}" = 1 ]; then # the scalar row's minute, not under ASan
      echo "# row ref: skipped under SAN=1 (the plain build runs it)" >&3
      continue
    fi
    if ! OGAKIT_KERNEL=$k npu-gemm --list-devices --bw-mb 1 >/dev/null 2>&1; then
      echo "# row $k: skipped, not supported on this CPU" >&3
      continue
    fi
    echo "# row $k" >&3
    OGAKIT_KERNEL=$k GEOM=hd64 gate llama cpu tied b8 i8 verify
    OGAKIT_KERNEL=$k GEOM=hd128 gate qwen2 cpu tied b8 i8 verify
    NPROMPTS=2 OGAKIT_KERNEL=$k gate gemma2 cpu tied b8 i8 verify   # attend_ext: soft caps, the window
  done
}

# ---- i8 gates: no worse than onnxruntime's own int8 activations ----
@test "gate i8: every family, tied and untied, both layouts: mean KL no larger than onnxruntime acc4's" {
  NPROMPTS=3 CHUNK=64 gate qwen2 cpu tied b8 i8 # all three prompts, under SAN=1 too
  gate llama amd tied b8 i8
  gate qwen3 amd untied rm i8
  gate phi3 cpu untied rm i8
  plain_run || return 0 # the other style, tie and layout of each family
  gate qwen2 amd untied rm i8
  gate llama cpu untied rm i8
  gate qwen3 cpu tied b8 i8
  gate phi3 amd tied b8 i8
}

# mkpack OUT ARGS...: a copy at OUT of the pack tools/mkpack.py ARGS writes; the pack is generated once and
# kept under .cache/packs, keyed by the generator's hash and the arguments (as tools/fixture.sh keeps the
# family packs), so the sanitizer run and later runs copy it instead of running the generator again
mkpack() {
  local out=$1 h d
  shift
  h=$({ cat "$TOP/tools/mkpack.py"; printf '%s\n' "$@"; } | sha256sum | cut -c1-32)
  d=$TOP/.cache/packs/$h
  if [ ! -s "$d/genai_config.json" ]; then
    mkdir -p "${d%/*}"
    rm -rf "$d.tmp.$$"
    /usr/bin/python3 "$TOP/tools/mkpack.py" "$@" --out "$d.tmp.$$" >/dev/null || { rm -rf "$d.tmp.$$"; return 1; }
    rm -rf "$d" && mv -T "$d.tmp.$$" "$d"
  fi
  rm -rf "$out" && cp -r "$d" "$out"
}

# ort_feeds STYLE PACK TAG FEED...: the gates' two phi3 prompts (115 positions) through onnxruntime (one run,
# $W/TAG.o.f32; and as steps, $W/TAG.os.f32) and through npu-forward --feed FEED (prefill against the run,
# step and verify against the steps), each within STYLE's bounds (amd: fp16 io, the fp16-io gates'
# bound and gap). Leaves the container in $M and its vocabulary size in $V.
ort_feeds() {
  local style=$1 pack=$2 tag=$3 feed
  shift 3
  M=$W/$tag.q4nx
  oga-extract "$pack" | q4nx-pack -o "$M"
  V=$(npu-forward info -m "$M" | jq .vocab_size)
  jq -c '[.prompts[0].ids.phi3[], .prompts[1].ids.phi3[]]' "$TOP/share/prompts/gates.json" >"$W/$tag.ids"
  echo "[$(cat "$W/$tag.ids")]" >"$W/$tag.all"
  node "$TOP/tools/ort-ref.js" "$pack" teacher --ids-file "$W/$tag.all" --logits-f32 "$W/$tag.o.f32" >/dev/null
  node "$TOP/tools/ort-ref.js" "$pack" teacher --feed step --ids-file "$W/$tag.all" --logits-f32 "$W/$tag.os.f32" >/dev/null
  for feed in "$@"; do
    # a prompt as one run; steps and verify rows each at its own length (as one-token steps)
    npu-forward logits -m "$M" --mode f32 --feed $feed -t 1 --ids "$W/$tag.ids" --out-f32 "$W/$tag.u.f32" >/dev/null
    run "$W/forward-compare" --vocab "$V" --kl-max "$([ $style = amd ] && echo 1e-4 || echo "$KL_MAX")" \
      --gap "$([ $style = amd ] && echo 0.05 || echo 1e-2)" --chunk 16 --chunks 7 \
      "$W/$tag.$([ $feed = prefill ] && echo o || echo os).f32" "$W/$tag.u.f32"
    echo "# $tag $feed: $(echo "$output" | jq -c '{positions, mean_kl, max_kl, top1_mismatched}')" >&3
    [ "$status" -eq 0 ] || return 1
  done
}

@test "LongRoPE (Phi-3 128k): the If-switched rotary caches as onnxruntime runs them: a prompt past the switch, steps and verify rows across it, greedy" {
  local style pack ids
  for style in cpu amd; do
    pack=$(longrope_pack $style "$W")
    oga-info "$pack" | jq -e '.importable and .rope.long_after == 64 and .rope.cache_rows == 2048 and
      .by_role["rope.cos_long"].count == 1 and .by_role["rope.sin_long"].count == 1' >/dev/null
    ort_feeds $style "$pack" lr-$style prefill step verify
    # the switch matters: onnxruntime's prompt run (long caches throughout) and its steps differ
    run "$W/forward-compare" --vocab "$V" "$W/lr-$style.o.f32" "$W/lr-$style.os.f32"
    echo "$output" | jq -e '.mean_kl > 0.01' >/dev/null
    # greedy from a 40-token prompt: generation crosses the switch
    ids=$(jq -c '.prompts[0].ids.phi3[:40]' "$TOP/share/prompts/gates.json")
    echo "$ids" >"$W/lr.g.ids"
    ref=$(node "$TOP/tools/ort-ref.js" "$pack" generate --ids "$ids" -n 40 --topk 2)
    upto=$(echo "$ref" | jq '[.topk[] | (.logits[0] - .logits[1]) > 0.01] | (index(false) // 39) + 1')
    echo "# longrope $style greedy: $upto of 40 tokens comparable" >&3
    [ "$upto" -gt 20 ]
    [ "$(npu-forward run -m "$M" --mode f32 --ids "$W/lr.g.ids" -n 40 --ignore-eos --json | jq -c ".ids[:$upto]")" = \
      "$(echo "$ref" | jq -c ".ids[:$upto]")" ]
  done
}

@test "Phi-4-mini's shape (partial rotary 0.75 in halves, LongRoPE, tied, head_dim 128): prompt and steps as onnxruntime runs them" {
  local style pack
  for style in cpu amd; do
    pack=$(longrope_pack $style "$W" 64 phi3 0.75)
    oga-info "$pack" | jq -e '.importable and .rope.dim == 96 and .rope.interleaved == false and .rope.long_after == 64' >/dev/null
    ort_feeds $style "$pack" p4-$style prefill step
  done
}

# An unquantised lm_head (the builder's nodes_to_exclude=/lm_head/MatMul: a MatMul over a float [hidden,
# vocab] weight): kept as the pack holds it and computed in fp32, as onnxruntime's MatMul (both modes; --mode
# i8 quantises the layers' activations only). cpu: fp32 weight and io; amd: fp16 weight and io.
@test "an unquantised lm_head (MatMul, fp32 cpu and fp16 amd packs): prompt, steps and verify rows as onnxruntime runs them; i8 within onnxruntime acc4's distance" {
  local style
  for style in cpu amd; do
    mkpack "$W/flm-$style" --family qwen2 --style $style --tie untied --float-lm-head
    oga-info "$W/flm-$style" | jq -e '.importable and .by_role.lm_head.count == 1' >/dev/null
    ort_feeds $style "$W/flm-$style" flm-$style prefill step verify
    npu-forward info -m "$M" | jq -e '.tied == false' >/dev/null
  done
  # i8: no further from onnxruntime's level 0 than its own level 4 is (the same weights, seed and ids)
  mkpack "$W/flm-cpu4" --family qwen2 --style cpu --tie untied --float-lm-head --accuracy-level 4
  node "$TOP/tools/ort-ref.js" "$W/flm-cpu4" teacher --ids-file "$W/flm-cpu.all" --logits-f32 "$W/flm-cpu4.o.f32" >/dev/null
  M=$W/flm-cpu.q4nx
  peer=$("$W/forward-compare" --vocab "$V" "$W/flm-cpu.o.f32" "$W/flm-cpu4.o.f32" | jq .mean_kl)
  npu-forward logits -m "$M" --mode i8 -t 1 --ids "$W/flm-cpu.ids" --out-f32 "$W/flm-i8.f32" >/dev/null
  ours=$("$W/forward-compare" --vocab "$V" "$W/flm-cpu.o.f32" "$W/flm-i8.f32" | jq .mean_kl)
  echo "# unquantised lm_head i8: mean KL $ours, onnxruntime acc4's $peer" >&3
  awk -v k="$ours" -v b="$peer" 'BEGIN { exit !(k > 0 && k <= b) }'
}

# A quantised Gather embedding as onnxruntime's MatMulNBitsQuantizer writes it (the builder's
# int4_op_types_to_quantize=MatMul/Gather, untied): GatherBlockQuantized over INT4 data (symmetric: signed codes,
# no zero points) or UINT4 data (UINT4 zero points; or none, which onnxruntime takes as 0), [vocab, hidden] packed
# flat; one block per row (kb odd: zero points across bytes), a zero-padded partial block, fp16 scales (amd)
@test "a quantised Gather embedding (GatherBlockQuantized over INT4 / UINT4 data): prompt and steps as onnxruntime runs them" {
  local v tag
  for v in "int4 cpu 32" "uint4 cpu 64" "uint4-nozp cpu 16" "uint4 amd 128"; do
    set -- $v
    tag=qg-$1-$2-$3
    mkpack "$W/$tag" --family phi3 --style $2 --tie untied --block-size $3 --quant-gather $1
    oga-info "$W/$tag" | jq -e '.importable and .by_role.embed.count == 1 and (.quantization.source_ops | index("GatherBlockQuantized"))' >/dev/null
    if plain_run || [ "$1" = int4 ]; then ort_feeds $2 "$W/$tag" $tag prefill step; else ort_feeds $2 "$W/$tag" $tag prefill; fi
    q4nx-verify "$M" --pack "$W/$tag" --all >/dev/null
  done
}

# 8-bit MatMulNBits (q8; the builder's k_quant_last / k_quant_mixed int8 lm_head and layers, -p int8 every
# projection, a tied GatherBlockQuantized of bits 8): f32 as onnxruntime's level 0 (prompt, steps, verify rows);
# --mode i8 (int8 activations for the q8 layers, the q8 classifier in fp32) no further from level 0 than
# onnxruntime's own level 4 of the same pack
@test "q8 weights (int8 lm_head, k_quant_mixed layers, every projection; tied 8-bit embedding): prompt, steps and verify rows as onnxruntime runs them; i8 within onnxruntime acc4's distance" {
  local v tag
  for v in "cpu tied all" "amd untied mixed" "cpu tied lm_head"; do
    set -- $v
    tag=q8-$1-$2-$3
    mkpack "$W/$tag" --family qwen2 --style $1 --tie $2 --q8 $3
    oga-info "$W/$tag" | jq -e '.importable and (.quantization.bits | index(8))' >/dev/null
    if plain_run || [ "$3" = all ]; then ort_feeds $1 "$W/$tag" $tag prefill step verify; else ort_feeds $1 "$W/$tag" $tag prefill; fi
  done
  # i8 against onnxruntime's accuracy_level 4 run of the same weights (every projection q8, tied)
  mkpack "$W/q8-cpu4" --family qwen2 --style cpu --tie tied --q8 all --accuracy-level 4
  node "$TOP/tools/ort-ref.js" "$W/q8-cpu4" teacher --ids-file "$W/q8-cpu-tied-all.all" --logits-f32 "$W/q8-cpu4.o.f32" >/dev/null
  M=$W/q8-cpu-tied-all.q4nx
  V=$(npu-forward info -m "$M" | jq .vocab_size)
  peer=$("$W/forward-compare" --vocab "$V" "$W/q8-cpu-tied-all.o.f32" "$W/q8-cpu4.o.f32" | jq .mean_kl)
  npu-forward logits -m "$M" --mode i8 -t 1 --ids "$W/q8-cpu-tied-all.ids" --out-f32 "$W/q8-i8.f32" >/dev/null
  ours=$("$W/forward-compare" --vocab "$V" "$W/q8-cpu-tied-all.o.f32" "$W/q8-i8.f32" | jq .mean_kl)
  echo "# q8 i8: mean KL $ours, onnxruntime acc4's $peer" >&3
  awk -v k="$ours" -v b="$peer" 'BEGIN { exit !(k > 0 && k <= b) }'
  # every kernel row this CPU has gives the same greedy text (q8 on each row's kernels, and the ref row's)
  local want isa
  want=$(npu-forward run -m "$M" --mode f32 --ids "$W/q8-cpu-tied-all.ids" -n 8 --ignore-eos --json | jq -c .ids)
  [ "$(echo "$want" | jq length)" = 8 ]
  for isa in ref avx2 avx512 amx; do
    # the scalar row's q8 kernels under SAN=1: npu-gemm.bats's --bits 8 test (every mode on odd shapes)
    if [ $isa = ref ] && ! plain_run; then echo "# ref: skipped under SAN=1 (the plain build runs it)" >&3; continue; fi
    OGAKIT_KERNEL=$isa npu-forward info -m "$M" >/dev/null 2>&1 || { echo "# $isa: not on this CPU (skipped)" >&3; continue; }
    [ "$(OGAKIT_KERNEL=$isa npu-forward run -m "$M" --mode f32 --ids "$W/q8-cpu-tied-all.ids" -n 8 --ignore-eos --json | jq -c .ids)" = "$want" ]
  done
}

@test "LongRoPE: an If that picks the rotary caches on anything but the sequence length is refused by name" {
  local pack bad=$W/lr-bad
  pack=$(longrope_pack cpu "$W")
  rm -rf "$bad" && cp -r "$pack" "$bad"
  # the condition on the summed mask (a count of real tokens, not the length) instead of attention_mask's length
  /usr/bin/python3 - "$bad/model.onnx" <<'PY'
import sys, onnx
m = onnx.load(sys.argv[1], load_external_data=False)
gt = [n for n in m.graph.node if n.op_type == "Greater"][0]
gt.input[0] = [n for n in m.graph.node if n.op_type == "ReduceSum"][0].output[0]
onnx.save(m, sys.argv[1])
PY
  run --separate-stderr oga-info "$bad"
  [ "$status" -eq 3 ]
  echo "$output" | jq -e '[.refusals[] | select(.code == "unsupported_op" and (.reason | test("condition other than Greater")))] | length >= 1'
  run oga-extract "$bad"
  [ "$status" -eq 3 ]
}

# ---- free-running greedy: identical to the oracle while its top-1/top-2 gaps stay above 1e-2 ----
greedy() {
  local fam=$1 style=$2 tie=$3 m pack ids ref ours upto
  m=$(container "$fam" "$style" "$tie" b8)
  pack=$(fixture "$fam" "$style" "$tie" tiny 0 fp32)
  ids=$(prompt_ids "$fam" 1)
  ref=$(oracle_cached "$pack" generate --ids "$ids" -n 32 --topk 2)
  # compare up to and including the first step whose gap is <= 1e-2 (after it, both are right)
  upto=$(echo "$ref" | jq '[.topk[] | (.logits[0] - .logits[1]) > 0.01] | (index(false) // 31) + 1')
  echo "$ids" >"$W/greedy.ids"
  ours=$(npu-forward run -m "$m" --ids "$W/greedy.ids" -n 32 --ignore-eos --json | jq -c ".ids[:$upto]")
  echo "# $fam $style $tie: $upto of 32 tokens comparable" >&3
  [ "$ours" = "$(echo "$ref" | jq -c ".ids[:$upto]")" ]
}

@test "greedy run: 32 tokens as the oracle (qwen2 cpu tied, llama amd untied, qwen3 cpu untied, phi3 amd tied, gemma2 cpu tied, olmo cpu tied, gemma amd untied)" {
  greedy qwen2 cpu tied
  greedy llama amd untied
  greedy qwen3 cpu untied
  greedy phi3 amd tied
  greedy gemma2 cpu tied
  greedy olmo cpu tied
  greedy gemma amd untied
}

@test "greedy run: the bundled trained model, 32 tokens identical to the oracle" {
  [ -d "$TOP/share/models/pytiny-target" ] || skip "no bundled trained model (share/models/pytiny-target)"
  local pack=$TOP/share/models/pytiny-target m=$W/trained.q4nx ref ours
  oga-extract "$pack" | q4nx-pack -l b8 -o "$m"
  # prompt ids from the reference tokenizer, not ours
  PACK=$pack NM=$TOP/.cache/node/node_modules node --input-type=module -e '
    const { Tokenizer } = await import(process.env.NM + "/@huggingface/tokenizers/dist/tokenizers.mjs");
    const fs = await import("fs");
    const rd = (f) => JSON.parse(fs.readFileSync(process.env.PACK + "/" + f, "utf8"));
    const t = new Tokenizer(rd("tokenizer.json"), fs.existsSync(process.env.PACK + "/tokenizer_config.json") ? rd("tokenizer_config.json") : {});
    console.log(JSON.stringify(t.encode("def fibonacci(n):").ids));' >"$W/trained.ids"
  ref=$(node "$TOP/tools/ort-ref.js" "$pack" generate --ids-file "$W/trained.ids" -n 32 --no-logits | jq -c .ids)
  ours=$(npu-forward run -m "$m" --ids "$W/trained.ids" -n 32 --ignore-eos --json | jq -c .ids)
  echo "# oracle $ref" >&3
  [ "$ours" = "$ref" ]
}

# ---- text in, text out ----
@test "run -p/-f: prompt ids are the reference tokenizer's; streamed text is the --json text; --stop" {
  local m text streamed stop want
  m=$(container qwen2 cpu tied b8)
  jq -j '.prompts[1].text' "$TOP/share/prompts/gates.json" >"$W/code.txt" # keeps the final newline
  run npu-forward run -m "$m" -f "$W/code.txt" -n 12 --ignore-eos --json
  [ "$status" -eq 0 ]
  [ "$(echo "$output" | jq -c .prompt_ids)" = "$(prompt_ids qwen2 1)" ]
  [ "$(echo "$output" | jq '.ids | length')" -eq 12 ]
  text=$(echo "$output" | jq -j .text)
  streamed=$(npu-forward run -m "$m" -f "$W/code.txt" -n 12 --ignore-eos)
  [ "$streamed" = "$text" ]
  # -p with the same text (no trailing newline here, so compare with the ids minus the last)
  run npu-forward run -m "$m" -p "$(jq -r '.prompts[0].text' "$TOP/share/prompts/gates.json")" -n 1 --json
  [ "$(echo "$output" | jq -c .prompt_ids)" = "$(prompt_ids qwen2 0)" ]
  # --stop: the text up to the first occurrence of a string taken from the middle of the output
  stop=${text:$((${#text} / 2)):3}
  want=${text%%"$stop"*}
  streamed=$(npu-forward run -m "$m" -f "$W/code.txt" -n 12 --ignore-eos --stop "$stop")
  echo "# stop '$stop': '$streamed'" >&3
  [ "$streamed" = "$want" ]
  run npu-forward run -m "$m" -f "$W/code.txt" -n 12 --ignore-eos --stop "$stop" --json
  [ "$(echo "$output" | jq -r .stop_reason)" = stop ]
}

@test "run --temp/--top-k/--top-p/--seed: same seed same text, different seeds differ" {
  local m a b c
  m=$(container llama cpu untied b8)
  a=$(npu-forward run -m "$m" -p "Once upon a time" -n 24 --temp 1.5 --top-k 1000 --top-p 0.99 --seed 7 --ignore-eos --json | jq -c .ids)
  b=$(npu-forward run -m "$m" -p "Once upon a time" -n 24 --temp 1.5 --top-k 1000 --top-p 0.99 --seed 7 --ignore-eos --json | jq -c .ids)
  c=$(npu-forward run -m "$m" -p "Once upon a time" -n 24 --temp 1.5 --top-k 1000 --top-p 0.99 --seed 8 --ignore-eos --json | jq -c .ids)
  [ "$a" = "$b" ]
  [ "$a" != "$c" ]
  # --top-k 1 is greedy whatever the temperature
  a=$(npu-forward run -m "$m" -p "Once upon a time" -n 12 --temp 2 --top-k 1 --seed 3 --ignore-eos --json | jq -c .ids)
  b=$(npu-forward run -m "$m" -p "Once upon a time" -n 12 --ignore-eos --json | jq -c .ids)
  [ "$a" = "$b" ]
}

@test "run --seed 0 is a seed like any other: two runs draw the same tokens (not the process id's)" {
  local m a b
  m=$(container llama cpu untied b8)
  a=$(npu-forward run -m "$m" -p "Once upon a time" -n 24 --temp 1.5 --seed 0 --ignore-eos --json | jq -c .ids)
  b=$(npu-forward run -m "$m" -p "Once upon a time" -n 24 --temp 1.5 --seed 0 --ignore-eos --json | jq -c .ids)
  [ "$(echo "$a" | jq length)" -eq 24 ]
  [ "$a" = "$b" ]
}

@test "run --chat renders the model's chat template" {
  local m
  m=$(container qwen2 cpu tied b8)
  run npu-forward run -m "$m" -p "Hi" --chat -n 2 --json
  [ "$status" -eq 0 ]
  # ChatML: the prompt starts with <|im_start|> (151644) as the Qwen template renders it
  echo "$output" | jq -e '.prompt_ids | index(151644) != null'
}

@test "run --chat --system: a system text that is not UTF-8 is refused by name (exit 3), not dropped from the prompt" {
  local m
  m=$(container qwen2 cpu tied b8)
  run npu-forward run -m "$m" -p "Hi" --chat --system $'be brief\xff' -n 1 --json
  [ "$status" -eq 3 ]
  [[ "$output" == *"--system"*"UTF-8"* ]]
  # a valid one is rendered into the prompt
  run --separate-stderr npu-forward run -m "$m" -p "Hi" --chat --system "be brief" -n 1 --json
  [ "$status" -eq 0 ]
  echo "$output" | jq -c .prompt_ids >"$W/sys.ids"
  [[ "$(npu-forward detokenize -m "$m" -f "$W/sys.ids")" == *"system"*"be brief"*"user"*"Hi"* ]]
}

@test "logits --topk: top-k ids and logsumexp per position as JSON, matching the oracle's top-1" {
  local m pack ids
  m=$(container qwen2 cpu tied b8)
  pack=$(fixture qwen2 cpu tied tiny 0 fp32)
  ids=$(prompt_ids qwen2 0)
  echo "$ids" >"$W/lt.ids"
  run npu-forward logits -m "$m" --ids "$W/lt.ids" --topk 5
  [ "$status" -eq 0 ]
  [ "$(echo "$output" | jq '.topk | length')" -eq "$(echo "$ids" | jq length)" ]
  [ "$(echo "$output" | jq -c '[.topk[].ids[0]]')" = \
    "$(oracle_cached "$pack" teacher --ids "$ids" --topk 5 | jq -c '[.topk[].ids[0]]')" ]
}

@test "bench: table and --json with TTFT, tok/s median and stddev, E2E, peak RSS" {
  local m
  m=$(container qwen2 cpu tied b8)
  run npu-forward bench -m "$m" -l 16,32 -g 8 -r 2 --json
  [ "$status" -eq 0 ]
  echo "$output" | jq -e '.results | length == 2'
  echo "$output" | jq -e '.results[0] | .ttft_ms.median > 0 and .decode_tok_s.median > 0 and .prefill_tok_s.stddev >= 0 and .e2e_ms.median > 0'
  echo "$output" | jq -e '.peak_rss_bytes > 0 and .weight_bytes_per_token > 0'
  run npu-forward bench -m "$m" -l 16 -g 4 -r 1
  [ "$status" -eq 0 ]
  [[ "$output" == *"TTFT"* && "$output" == *"peak RSS"* ]]
}

@test "bench --probe: DRAM read GB/s over the weights' memory and decode's fraction of it, per length" {
  local m
  m=$(container qwen2 cpu tied b8)
  run npu-forward bench -m "$m" -l 16,32 -g 8 -r 3 --probe --json
  [ "$status" -eq 0 ]
  echo "$output" | jq -e '.results | length == 2'
  echo "$output" | jq -e '[.results[] | .dram_read_GBps.median > 0 and .decode_fraction_of_dram.median > 0] | all'
  # the fraction is the run-by-run ratio: it must agree with tok/s x bytes / GB/s within the spread
  echo "$output" | jq -e '.weight_bytes_per_token as $w | [.results[] |
    (.decode_tok_s.median * $w / 1e9 / .dram_read_GBps.median) / .decode_fraction_of_dram.median |
    . > 0.5 and . < 2] | all'
  # with the KV cache a step reads: a larger fraction, the same ratio law; the KV bytes grow with the
  # mean position (prompt + (gen + 1) / 2), here 16 + 4.5 and 32 + 4.5
  echo "$output" | jq -e '.weight_bytes_per_token as $w | [.results[] |
    .decode_fraction_of_dram_kv.median > .decode_fraction_of_dram.median and
    ((.decode_tok_s.median * ($w + .kv_bytes_per_token) / 1e9 / .dram_read_GBps.median) /
     .decode_fraction_of_dram_kv.median | . > 0.5 and . < 2)] | all'
  echo "$output" | jq -e '(.results[1].kv_bytes_per_token / .results[0].kv_bytes_per_token) * 20.5 / 36.5 |
    . > 0.999 and . < 1.001'
  run npu-forward bench -m "$m" -l 16 -g 4 -r 1 --json
  echo "$output" | jq -e '.results[0] | has("dram_read_GBps") | not'
}

@test "bench --verify-rows: k-row passes against 1-row steps per length; bad row counts are usage errors" {
  local m
  m=$(container qwen2 cpu tied b8)
  run npu-forward bench -m "$m" -l 16,24 -g 4 -r 1 --mode i8 --verify-rows 2,5,16 --json
  [ "$status" -eq 0 ]
  # per length the step (rows 1, steps 1 by definition) and each k in the order given
  echo "$output" | jq -e '[.results[] | [.verify[].rows] == [1, 2, 5, 16]] | all'
  echo "$output" | jq -e '[.results[].verify[0] | .steps == 1 and .cpu_steps == 1] | all'
  echo "$output" | jq -e '[.results[].verify[] | .ms > 0 and .steps > 0 and .cpu_ms > 0 and .layers_ms > 0 and .head_ms > 0] | all'
  # the weight GEMMs' share: part of every pass, never more than the pass
  echo "$output" | jq -e '[.results[].verify[] | .gemm_ms > 0 and .gemm_ms < .ms] | all'
  run npu-forward bench -m "$m" -l 16 -g 4 -r 1 --verify-rows 2,8
  [ "$status" -eq 0 ]
  [[ "$output" == *"pass of  8 rows"* && "$output" == *"steps"* ]]
  run npu-forward bench -m "$m" -l 16 -g 4 -r 1 --verify-rows 17
  [ "$status" -eq 2 ]
  run npu-forward bench -m "$m" -l 16 -g 4 -r 1 --verify-rows 1
  [ "$status" -eq 2 ]
  run npu-forward bench -m "$m" -l 16 -g 4 -r 1 --verify-rows ,
  [ "$status" -eq 2 ]
  run npu-forward bench -m "$m" -l 16 -g 4 -r 1 --json
  echo "$output" | jq -e '.results[0] | has("verify") | not'
  # the passes are greedy verify passes (the argmax head), or with --full-head full logits
  run npu-forward bench -m "$m" -l 16 -g 1 -r 1 --mode i8 --verify-rows 4 --json
  echo "$output" | jq -e '[.results[0].verify[].head] == ["argmax", "argmax"]'
  run npu-forward bench -m "$m" -l 16 -g 1 -r 1 --mode i8 --verify-rows 4 --full-head --json
  echo "$output" | jq -e '[.results[0].verify[].head] == ["full", "full"]'
  run npu-forward bench -m "$m" -l 16 -g 1 -r 1 --mode f32 --verify-rows 4 --json # no 16-bit classifier
  echo "$output" | jq -e '[.results[0].verify[].head] == ["full", "full"]'
  run -2 npu-forward bench -m "$m" -l 16 -g 1 -r 1 --full-head
  [[ "$output" == *"--full-head: only with --verify-rows"* ]]
  # -l past the context is a bad option value, as run's -c past it is (it exited 3, run 2)
  ctx=$(npu-forward info -m "$m" | jq .context_length)
  run -2 npu-forward bench -m "$m" -l "$ctx" -g 4 -r 1
  [[ "$output" == *"more than the context of $ctx positions"* ]]
  run -2 npu-forward bench -m "$m" -l 16 -g 4 -r 1 -c 18
}

@test "logits: --out-f32 with --top-logits (the top list was dropped) and an empty --out-f32 are usage errors; an --out-f32 that cannot be written exits 1" {
  m=$(container qwen2 cpu tied b8)
  echo '[1, 2, 3]' >"$BATS_TEST_TMPDIR/ids"
  run -2 npu-forward logits -m "$m" --ids "$BATS_TEST_TMPDIR/ids" --out-f32 "$BATS_TEST_TMPDIR/l.f32" --top-logits 3
  [[ "$output" == *"give one"* ]] && [ ! -e "$BATS_TEST_TMPDIR/l.f32" ] || false
  run -2 npu-forward logits -m "$m" --ids "$BATS_TEST_TMPDIR/ids" --out-f32 ""
  [[ "$output" == *"needs a file name"* ]]
  # a file that cannot be written: 1 (npu-forward(1): "--out-f32 cannot be written"), named
  run -1 npu-forward logits -m "$m" --ids "$BATS_TEST_TMPDIR/ids" --out-f32 "$BATS_TEST_TMPDIR/no/such/dir/l.f32"
  [[ "$output" == *"no/such/dir"* ]]
}

@test "argmax head: its int8-vs-16-bit bound holds on every entry; each row's argmax and logit are the full classifier's (random and trained models, b8 and rm, every kernel row)" {
  local trained=$W/pytiny-target.q4nx
  oga-extract "$TOP/share/models/pytiny-target" | q4nx-pack -l b8 -o "$trained"
  run "$OGAKIT_BUILD/t/model_head" "$(container qwen2 cpu tied b8 4)" "$(container llama amd untied rm 4)" "$trained"
  echo "$output"
  [ "$status" = 0 ]
  ! echo "$output" | grep -q '^not ok' || false
  # three models, each: open, and per kernel row this CPU runs 4 checks (5 with 16-bit kernels)
  [ "$(echo "$output" | grep -c '^ok .*open ')" = 3 ]
  [ "$(echo "$output" | grep -c '^ok .*the head recomputed [1-9]')" -ge 3 ]
  [ "$(echo "$output" | grep -c '^ok .*bound on every entry')" -ge 3 ]
}

@test "the default --mode follows the pack: i8 for accuracy_level 4, f32 for level 0; info says which" {
  local m4 m0
  m4=$(container qwen2 cpu tied b8 4)
  m0=$(container qwen2 cpu tied b8)
  [ "$(npu-forward info -m "$m4" | jq -c '[.accuracy_level, .default_mode]')" = '[4,"i8"]' ]
  [ "$(npu-forward info -m "$m0" | jq -c '[.accuracy_level, .default_mode]')" = '[0,"f32"]' ]
  echo "$(prompt_ids qwen2 0)" >"$W/dm.ids"
  npu-forward logits -m "$m4" --ids "$W/dm.ids" --out-f32 "$W/dm.def.f32" >/dev/null
  npu-forward logits -m "$m4" --ids "$W/dm.ids" --out-f32 "$W/dm.i8.f32" --mode i8 >/dev/null
  npu-forward logits -m "$m4" --ids "$W/dm.ids" --out-f32 "$W/dm.f32.f32" --mode f32 >/dev/null
  cmp "$W/dm.def.f32" "$W/dm.i8.f32"
  ! cmp -s "$W/dm.def.f32" "$W/dm.f32.f32" || false
  npu-forward logits -m "$m0" --ids "$W/dm.ids" --out-f32 "$W/dm0.def.f32" >/dev/null
  npu-forward logits -m "$m0" --ids "$W/dm.ids" --out-f32 "$W/dm0.f32.f32" --mode f32 >/dev/null
  cmp "$W/dm0.def.f32" "$W/dm0.f32.f32"
}

@test "bench: the default lengths are fitted to the context (skipped by name; the longest that fits when none does)" {
  local m
  m=$(container qwen2 cpu tied b8)
  run --separate-stderr npu-forward bench -m "$m" -c 300 -g 4 -r 1 --warmup 0 --json
  [ "$status" -eq 0 ]
  [ "$(echo "$output" | jq -c '[.results[].prompt_tokens]')" = "[128]" ]
  [[ "$stderr" == *"skipping prompt length 512"* && "$stderr" == *"skipping prompt length 2048"* ]]
  run --separate-stderr npu-forward bench -m "$m" -c 100 -g 4 -r 1 --warmup 0 --json
  [ "$status" -eq 0 ]
  [ "$(echo "$output" | jq -c '[.results[].prompt_tokens]')" = "[96]" ]
  # lengths given with -l are the user's: one that does not fit is refused (a bad option value, as -c past the
  # model's context)
  # the verify passes count as the generated tokens do (the default 512 was kept, then refused)
  run --separate-stderr npu-forward bench -m "$m" -c 514 -g 1 -r 1 --warmup 0 --mode i8 --verify-rows 4 --json
  [ "$status" -eq 0 ]
  [ "$(echo "$output" | jq -c '[.results[].prompt_tokens]')" = "[128]" ]
  run npu-forward bench -m "$m" -c 100 -g 4 -r 1 -l 128
  [ "$status" -eq 2 ]
}

@test "bench --probe: the table shows DRAM GB/s and decode's fraction of it" {
  local m
  m=$(container qwen2 cpu tied b8)
  run --separate-stderr npu-forward bench -m "$m" -l 16 -g 8 -r 2 --probe
  [ "$status" -eq 0 ]
  [[ "$output" == *"DRAM GB/s"*"decode/DRAM"* ]]
  echo "$output" | grep -E '^ +16 +8 .* %$'
}

@test "--no-mmap / --mmap: weights read into huge pages or mapped give bit-identical logits and text" {
  local m big
  m=$(container qwen2 amd untied b8)
  echo "$(prompt_ids qwen2 0)" >"$W/nm.ids"
  npu-forward logits -m "$m" --ids "$W/nm.ids" --out-f32 "$W/nm.map.f32" --mmap >/dev/null
  npu-forward logits -m "$m" --ids "$W/nm.ids" --out-f32 "$W/nm.load.f32" --no-mmap >/dev/null
  [ -s "$W/nm.map.f32" ]
  cmp "$W/nm.map.f32" "$W/nm.load.f32"
  # the bundled model's container is over 2 MiB: the huge-page buffer path, not the small one
  big=$W/pytiny.q4nx
  [ -s "$big" ] || oga-extract "$TOP/share/models/pytiny-target" | q4nx-pack -l b8 -o "$big"
  [ "$(stat -c %s "$big")" -gt $((2 << 20)) ]
  a=$(npu-forward run -m "$big" -p "def main(" -n 24 --ignore-eos --json --mmap | jq -c .ids)
  b=$(npu-forward run -m "$big" -p "def main(" -n 24 --ignore-eos --json --no-mmap | jq -c .ids)
  [ "$(echo "$a" | jq length)" -eq 24 ]
  [ "$a" = "$b" ]
  run npu-forward run -m "$W/missing.q4nx" -p x --no-mmap
  [ "$status" -eq 3 ]
  [[ "$output" == *"missing.q4nx"* ]]
}

@test "the weights' default home: a huge-page copy where THP is on and memory spare, else the mapping; bench says which" {
  local big want avail size
  big=$W/pytiny.q4nx
  [ -s "$big" ] || oga-extract "$TOP/share/models/pytiny-target" | q4nx-pack -l b8 -o "$big"
  size=$(stat -c %s "$big")
  avail=$(($(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo) * 1024))
  want=mapping
  if grep -qE '\[(always|madvise)\]' /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null &&
     [ "$size" -le $((avail / 2)) ]; then want="huge-page copy"; fi
  b() { npu-forward bench -m "$1" -l 8 -g 2 -r 1 --warmup 0 --json "${@:2}" | jq -r .weights_in; }
  [ "$(b "$big")" = "$want" ]
  [ "$(b "$big" --mmap)" = mapping ]
  [ "$(b "$big" --no-mmap)" = "huge-page copy" ]
  run npu-forward bench -m "$big" -l 8 -g 2 -r 1 --warmup 0 --mmap
  [ "$status" -eq 0 ]
  [[ "${lines[0]}" == *"(mapping)" ]]
}

@test "OGAKIT_PROF=1 prints per-pass phase lines on stderr" {
  local m
  m=$(container qwen2 cpu tied b8)
  OGAKIT_PROF=1 npu-forward run -m "$m" -p "Hello" -n 3 --ignore-eos 2>"$W/prof" >/dev/null
  grep -q 'prof prefill rows=.* launches=.* embed=.* layers=.* head=.* sampling=' "$W/prof"
  grep -q 'prof decode rows=1 ' "$W/prof"
}

# ---- errors ----
@test "errors: usage (exit 2)" {
  run npu-forward
  [ "$status" -eq 2 ]
  run npu-forward frobnicate
  [ "$status" -eq 2 ]
  run npu-forward run -p hi
  [ "$status" -eq 2 ]
  [[ "$output" == "npu-forward: "* ]]
  run npu-forward run -m x.q4nx
  [ "$status" -eq 2 ]
  run npu-forward run -m "$(container qwen2 cpu tied b8)" -p hi -c 999999
  [ "$status" -eq 2 ]
  run npu-forward run -m x -p hi --mode f16
  [ "$status" -eq 2 ]
  # --temp inf is refused, and so is a number a float cannot hold (it became that infinity)
  run npu-forward run -m x -p hi --temp 1e39
  [ "$status" -eq 2 ] && [[ "$output" == *"--temp"* ]] || false
  # a --stop that is not UTF-8 could match inside a character of the (UTF-8) text and cut it in two
  # (--json then had no valid text to report: exit 4)
  run npu-forward run -m "$(container qwen2 cpu tied b8)" -p hi -n 4 --stop $'\x9d'
  [ "$status" -eq 2 ] && [[ "$output" == *"--stop"*"UTF-8"* ]] || false
  local l
  for l in "8,,16" "8," ",8"; do
    run npu-forward bench -m x -l "$l"
    [ "$status" -eq 2 ] && [[ "$output" == *"empty item"* ]] || false
  done
  run npu-forward --help
  [ "$status" -eq 0 ]
}

@test "errors: not a container (exit 3), missing file (exit 3)" {
  echo "not a container at all, just text" >"$W/bogus.q4nx"
  run npu-forward run -m "$W/bogus.q4nx" -p hi
  [ "$status" -eq 3 ]
  [[ "$output" == "npu-forward: "* ]]
  run npu-forward run -m "$W/does-not-exist.q4nx" -p hi
  [ "$status" -eq 3 ]
}

@test "errors: unsupported family (exit 4), prompt longer than the context (exit 3), bad ids (exit 3)" {
  local m
  m=$(container qwen2 cpu tied b8)
  # same-length rename of the family in the model description: a well-formed container of a family
  # this code does not run
  perl -0777 -pe 's/("family":\s*")qwen2"/$1bloom"/' "$m" >"$W/bloom.q4nx"
  if cmp -s "$m" "$W/bloom.q4nx"; then skip "family string not found in the metadata"; fi
  # the metadata checksum (q4nx(5) footer: meta_crc32c over [meta_offset, size - 64)) is recomputed, so
  # the container is well formed, not corrupt
  /usr/bin/python3 - "$W/bloom.q4nx" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
ft = len(b) - 64
mo = struct.unpack_from("<Q", b, ft)[0]
crc = 0xFFFFFFFF
for x in b[mo:ft]:
    crc ^= x
    for _ in range(8):
        crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
struct.pack_into("<I", b, ft + 48, crc ^ 0xFFFFFFFF)
open(sys.argv[1], "wb").write(b)
PY
  run npu-forward run -m "$W/bloom.q4nx" -p hi
  [ "$status" -eq 4 ]
  [[ "$output" == *"unsupported family"* ]]
  echo "$(prompt_ids qwen2 1)" >"$W/p.ids"
  run npu-forward run -m "$m" --ids "$W/p.ids" -c 16
  [ "$status" -eq 3 ]
  [[ "$output" == *"context"* ]]
  echo '[1, 2, 99999999]' >"$W/bad.ids"
  run npu-forward logits -m "$m" --ids "$W/bad.ids"
  [ "$status" -eq 3 ]
  echo '[1, "x"]' >"$W/bad.ids"
  run npu-forward logits -m "$m" --ids "$W/bad.ids"
  [ "$status" -eq 3 ]
}

@test "a model whose classifier has rows past its tokenizer (Phi-3: 32064 against 32000): run and serve generate a padded id as no text, not an error" {
  # a tiny phi3 of vocab 32064 (the llama2 tokenizer's 32000 + 64 padded rows) whose row 32050 is twice row
  # 31040, so greedy decoding picks 32050 wherever it would pick 31040 and more
  /usr/bin/python3 - "$W/pad" <<'PY'
import json, sys
import numpy as np
sys.path.insert(0, __import__("os").environ["TOP"] + "/tools")
import mkpack
o = sys.argv[1]
cfg = dict(family="phi3", hidden=64, layers=2, heads=4, kv_heads=2, head=16, inter=128, vocab=32064, tied=False,
           context=256, theta=mkpack.FAMILY_HF["phi3"][2], eps=mkpack.FAMILY_HF["phi3"][3],
           tokens=mkpack.FAMILY_TOKENS["phi3"])
W = mkpack.RandomWeights(cfg, 7)
z = {k: W[k] for k in W.keys()}
z["lm_head.weight"][32050] = 40 * z["lm_head.weight"][31040] + 40 * z["lm_head.weight"][100]
np.savez(o + ".npz", **z)
json.dump(mkpack.hf_config(cfg), open(o + ".json", "w"))
PY
  /usr/bin/python3 "$TOP/tools/mkpack.py" --config "$W/pad.json" --weights "$W/pad.npz" --style cpu --out "$W/padpack" >/dev/null
  oga-extract "$W/padpack" | q4nx-pack -l b8 -o "$W/pad.q4nx"
  run npu-forward run -m "$W/pad.q4nx" -p "hello world" -n 8 --temp 0 --ignore-eos --json -t 1
  [ "$status" -eq 0 ] || { echo "$output"; return 1; }
  echo "$output" | jq -e '(.ids | index(32050)) != null and (.ids | length) == 8 and (.text | type) == "string"'
  # serve: the same ids through /v1/completions, 200
  npu-forward serve -m "$W/pad.q4nx" --port 0 -t 1 2>"$W/pad.log" 3>&- &
  local pid=$! port i body
  for i in $(seq 200); do grep -q 'ready:' "$W/pad.log" && break; sleep 0.05; done
  port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$W/pad.log" | head -1)
  body=$(curl -s -m 30 "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt": "hello world", "max_tokens": 8, "temperature": 0, "ignore_eos": true, "return_tokens": true, "logprobs": 1}') || true
  kill "$pid"; wait "$pid" 2>/dev/null || true
  echo "$body" | jq -e --argjson want "$(echo "$output" | jq -c .ids)" '.choices[0].tokens == $want and (.choices[0].logprobs.tokens | length) == 8'
}
