# Common setup for bats files: `load helpers`. Puts the build's programs on PATH, sets $TOP.
TOP=$(cd "$BATS_TEST_DIRNAME/.." && pwd)
OGAKIT_BUILD=${OGAKIT_BUILD:-$TOP/build}
PATH="$OGAKIT_BUILD/bin:$PATH"
export TOP OGAKIT_BUILD PATH
# fixture FAMILY STYLE TIE [GEOM] [ACC]: path of a generated OGA pack (cached)
fixture() { "$TOP/tools/fixture.sh" "$@"; }
# skip_under_san WHY: in the ASan+UBSan run (make check SAN=1), skip a test whose time goes to an
# outside oracle (Python reading a file our program wrote, llama.cpp computing the same model) and that
# runs none of our C that other tests do not run; the plain build runs it.
skip_under_san() { [ "${OGAKIT_SAN:-0}" != 1 ] || skip "SAN=1: $1 (the plain build runs it)"; }
# node: the reference side of the tests (onnxruntime's oracle, @huggingface's tokenizers and jinja, the
# openai SDK) with glibc's malloc advising transparent huge pages: an oracle run's logits are hundreds of
# MB, and their 4 KiB page faults took most of its time (one teacher pass over the gates' prompts at a
# 150k vocabulary 8.5 -> 3.4 s). Only node runs so: ogakit's own programs run in the plain environment.
node() {
  GLIBC_TUNABLES=${GLIBC_TUNABLES:+$GLIBC_TUNABLES:}glibc.malloc.hugetlb=1 command node "$@"
}
# oracle_cached PACK ARGS...: tools/ort-ref.js PACK ARGS... (stdout), kept under .cache/oracle keyed by the
# pack's fixture stamp, the arguments, the oracle script and the onnxruntime version, so the second run
# of the suite (make check SAN=1) does not compute the same greedy continuations again. Only for small
# outputs (ids, top-k JSON); logit files are written where the caller says, never cached.
oracle_cache_key() {
  local pack=$1
  shift
  { cat "$pack/.stamp" "$TOP/tools/ort-ref.js" "$TOP/.cache/node/node_modules/onnxruntime-node/package.json"
    printf '%s\n' "$@"; } | sha256sum | cut -c1-32
}
# oracle_cached_has PACK ARGS...: true when oracle_cached PACK ARGS... would answer from the cache
oracle_cached_has() {
  [ -f "$1/.stamp" ] && [ -s "$TOP/.cache/oracle/$(oracle_cache_key "$@").json" ]
}
oracle_cached() {
  local pack=$1 dir=$TOP/.cache/oracle h
  [ -f "$pack/.stamp" ] || { shift; node "$TOP/tools/ort-ref.js" "$pack" "$@"; return; } # not a cached fixture
  h=$(oracle_cache_key "$@")
  shift
  if [ ! -s "$dir/$h.json" ]; then
    mkdir -p "$dir"
    node "$TOP/tools/ort-ref.js" "$pack" "$@" >"$dir/$h.json.$$" || { rm -f "$dir/$h.json.$$"; return 1; }
    mv "$dir/$h.json.$$" "$dir/$h.json"
  fi
  cat "$dir/$h.json"
}
# longrope_pack STYLE DIR [T [FAMILY [PRF]]] -> a Phi-3 (or FAMILY) pack with LongRoPE as onnxruntime-genai's
# builder writes it (an If picks the long-factor caches once attention_mask is longer than
# original_max_position_embeddings = T, default 64, else the short ones), from the family fixture's
# weights, untied; with PRF (partial_rotary_factor) Phi-4-mini's shape instead: head_dim 128 (GEOM hd128;
# onnxruntime wants a cos cache width that is a multiple of 8), tied, RoPE on head_dim x PRF dims. Built
# once per run
longrope_pack() {
  local style=$1 T=${3:-64} fam=${4:-phi3} prf=${5:-} d=$2/lr-$1 geom=tiny tie=untied
  [ "$T" = 64 ] && [ "$fam" = phi3 ] && [ -z "$prf" ] || d=$d-$fam-$T${prf:+-p$prf}
  [ -z "$prf" ] || geom=hd128 tie=tied
  if [ ! -d "$d/pack" ]; then
    mkdir -p "$d"
    /usr/bin/python3 "$TOP/tools/mkpack.py" --family "$fam" --style "$style" --tie $tie --geom $geom --out "$d/src" \
      --dump-weights "$d/w.npz" >/dev/null
    jq --argjson T "$T" --arg prf "$prf" '.original_max_position_embeddings = $T
        | if $prf != "" then .partial_rotary_factor = ($prf | tonumber) else . end
        | (.head_dim * (.partial_rotary_factor // 1) / 2 | floor) as $h
        | .rope_scaling = {"type": "longrope", "short_factor": [range(0; $h) | 1 + . * 0.01],
                           "long_factor": [range(0; $h) | 1 + . * 0.5]}' \
      "$d/src/config.json" >"$d/config.json"
    /usr/bin/python3 "$TOP/tools/mkpack.py" --config "$d/config.json" --weights "$d/w.npz" --style "$style" \
      --tokenizer-dir "$d/src" --out "$d/pack" >/dev/null
  fi
  echo "$d/pack"
}
