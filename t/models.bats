#!/usr/bin/env bats
# The bundled model pair (share/models, trained by tools/train): real OGA packs that onnxruntime runs,
# that ogakit imports bit-exactly, and whose drafter is measured against the target by an independent
# script over onnxruntime (tools/train/accept.js). Expected values come from onnxruntime, not from us.
load helpers
bats_require_minimum_version 1.5.0

T=$TOP/share/models/pytiny-target
D=$TOP/share/models/pytiny-draft

setup_file() { export W=$(mktemp -d "${BATS_FILE_TMPDIR:-/tmp}/ogk-models.XXXXXX"); }
teardown_file() { rm -rf "$W"; }

@test "bundled packs: oga-info imports both (builder-cpu, qwen2, vocab 4096), nothing refused" {
  for p in "$T" "$D"; do
    run oga-info "$p"
    [ "$status" -eq 0 ]
    [ "$(echo "$output" | jq -r .flavour)" = builder-cpu ]
    [ "$(echo "$output" | jq -r .family)" = qwen2 ]
    [ "$(echo "$output" | jq .dims.vocab_size)" = "$(jq .vocab_size "$p/config.json")" ]
    [ "$(echo "$output" | jq '.refusals | length')" -eq 0 ]
  done
}

@test "bundled packs: extract | pack (b8, rm) | verify --all is 100% exact for both" {
  for p in "$T" "$D"; do
    for l in b8 rm; do
      oga-extract "$p" | q4nx-pack -l $l -o "$W/m.q4nx"
      run q4nx-verify "$W/m.q4nx" --pack "$p" --all
      [ "$status" -eq 0 ]
      [ "$(echo "$output" | jq .summary.exact_groups_pct)" = 100 ]
    done
  done
}

@test "bundled pair: greedy speculative decoding (k=4) over onnxruntime accepts drafts (tokens/round > 1.5)" {
  run node "$TOP/tools/train/accept.js" "$T" "$D" "$TOP/share/models/corpus-manifest.tsv" --k 4 --max-prompts 3 --new 16
  echo "$output" | tail -5
  [ "$status" -eq 0 ]
  tpr=$(echo "$output" | jq -s '.[-1].tokens_per_round')
  echo "# tokens per round on 3 held-out prompts: $tpr" >&3
  /usr/bin/python3 -c "import sys; sys.exit(0 if float('$tpr') > 1.5 else 1)"
}

@test "npu-forward -m PACK_DIR: imported once into the cache (OGAKIT_CACHE), reused, same text as the container" {
  export OGAKIT_CACHE=$W/cache
  oga-extract "$T" | q4nx-pack -l b8 -o "$W/t.q4nx"
  want=$(npu-forward run -m "$W/t.q4nx" -p "def f(x):" -n 12)
  run --separate-stderr npu-forward run -m "$T" -p "def f(x):" -n 12
  [ "$status" -eq 0 ]
  [ "$output" = "$want" ]
  [[ "$stderr" == *"importing the pack"* ]]
  [ "$(ls "$OGAKIT_CACHE" | grep -c '\.q4nx$')" -eq 1 ]
  run --separate-stderr npu-forward run -m "$T" -p "def f(x):" -n 12
  [ "$status" -eq 0 ]
  [ "$output" = "$want" ]
  [[ "$stderr" == *"from the cache"* && "$stderr" != *"importing"* ]]
  # a directory that is not a pack, and a pack that is refused: exit 3, nothing cached
  run npu-forward run -m "$W" -p x
  [ "$status" -eq 3 ]
  run npu-forward run -m "$("$TOP/tools/fixture.sh" bad truncated-data)" -p x
  [ "$status" -eq 3 ]
  [ "$(ls "$OGAKIT_CACHE" | grep -c '\.q4nx$')" -eq 1 ]
}
