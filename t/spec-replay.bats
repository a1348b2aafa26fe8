#!/usr/bin/env bats
# spec-replay: greedy speculative decoding on the bundled pair (share/models). Its counts are checked
# against tools/train/accept.js, the same algorithm written independently over onnxruntime; its
# output against plain greedy decoding; its self-draft case against what must hold (every draft
# accepted). Timings are reported, never asserted.
load helpers

setup_file() {
  export W=$(mktemp -d "${BATS_FILE_TMPDIR:-/tmp}/ogk-spec.XXXXXX")
  oga-extract "$TOP/share/models/pytiny-target" | q4nx-pack -l b8 -o "$W/t.q4nx"
  oga-extract "$TOP/share/models/pytiny-draft" | q4nx-pack -l b8 -o "$W/d.q4nx"
  # three prompts as token ids (the target's tokenizer; both sides get the same ids)
  for p in "def fibonacci(n):" "import os
import sys

class Config(object):" "    for key, value in sorted(items):"; do
    npu-forward tokenize -m "$W/t.q4nx" "$p"
  done | jq -s -c . >"$W/prompts.json"
}
teardown_file() { rm -rf "$W"; }

@test "rounds and accepted drafts per prompt equal onnxruntime's (tools/train/accept.js), k = 4 and 2" {
  local k i n ours ref
  n=$(jq length "$W/prompts.json")
  for k in 4 2; do
    ref=$(node "$TOP/tools/train/accept.js" "$TOP/share/models/pytiny-target" "$TOP/share/models/pytiny-draft" \
      --ids "$W/prompts.json" --k "$k" --new 32)
    [ "$(echo "$ref" | jq .mismatches)" -eq 0 ]
    for ((i = 0; i < n; i++)); do
      jq -c ".[$i]" "$W/prompts.json" >"$W/p.json"
      ours=$(spec-replay -m "$W/t.q4nx" -d "$W/d.q4nx" --ids "$W/p.json" -n 32 -k "$k" --ignore-eos -t 1 --json)
      echo "# k $k prompt $i: ours $(echo "$ours" | jq -c '[.rounds, .accepted]') onnxruntime $(echo "$ref" | jq -c ".per_prompt[$i] | [.rounds, .accepted]")" >&3
      [ "$(echo "$ours" | jq .rounds)" -eq "$(echo "$ref" | jq ".per_prompt[$i].rounds")" ]
      [ "$(echo "$ours" | jq .accepted)" -eq "$(echo "$ref" | jq ".per_prompt[$i].accepted")" ]
      [ "$(echo "$ours" | jq .identical_to_greedy)" = true ]
    done
  done
}

@test "the output is plain greedy decoding's, for every k; JSON and counts are consistent" {
  local k out ids=""
  for k in 1 3 8 16; do
    run spec-replay -m "$W/t.q4nx" -d "$W/d.q4nx" -p "def main(" -n 40 -k "$k" --ignore-eos --json
    [ "$status" -eq 0 ]
    out=$output
    [ "$(echo "$out" | jq .identical_to_greedy)" = true ]
    [ "$(echo "$out" | jq .new_tokens)" -eq 40 ]
    [ "$(echo "$out" | jq .plain.new_tokens)" -eq 40 ]
    echo "$out" | jq -e --argjson k "$k" '.drafted == .rounds * $k and .accepted <= .drafted and
      .new_tokens <= .accepted + .rounds and .new_tokens > .accepted + .rounds - 1 - $k and
      (.tokens_per_round - .new_tokens / .rounds | fabs) < 1e-9 and .first_difference == null'
    echo "$out" | jq -e '.cost_ratio > 0 and .verify_cost > 0 and .predicted_speedup > 0 and .measured_speedup > 0'
    # every k yields the same tokens
    [ -z "$ids" ] || [ "$(echo "$out" | jq -c .ids)" = "$ids" ]
    ids=$(echo "$out" | jq -c .ids)
  done
}

@test "self-draft: the target as its own drafter has every draft accepted" {
  run spec-replay -m "$W/t.q4nx" -d "$W/t.q4nx" -p "def main(" -n 33 -k 4 --ignore-eos --json
  [ "$status" -eq 0 ]
  echo "$output" | jq -e '.accepted == .drafted and .acceptance_rate == 1 and .rounds == 7'
}

@test "stops at EOS unless --ignore-eos; the table names acceptance, costs and speed-up" {
  run spec-replay -m "$W/t.q4nx" -d "$W/d.q4nx" -p "def main(" -n 24 -k 4
  [ "$status" -eq 0 ]
  [[ "$output" == *"acceptance"* && "$output" == *"costs"* && "$output" == *"speed-up"* ]]
  [[ "$output" == *"identical to plain greedy"* ]]
  # with -n large enough for the model to end its text, the spec run stops where plain greedy does
  run spec-replay -m "$W/t.q4nx" -d "$W/d.q4nx" -p "def main(" -n 400 -k 4 --json
  [ "$status" -eq 0 ]
  echo "$output" | jq -e '.new_tokens == .plain.new_tokens and .identical_to_greedy'
}

@test "errors: usage (2), missing, truncated or bad files (3), a drafter with another vocabulary (4)" {
  run spec-replay -m "$W/t.q4nx" -p x
  [ "$status" -eq 2 ]
  [[ "$output" == *"-d DRAFT"* ]]
  run spec-replay -m "$W/t.q4nx" -d "$W/d.q4nx"
  [ "$status" -eq 2 ]
  run spec-replay -m "$W/t.q4nx" -d "$W/d.q4nx" -p x -k 17
  [ "$status" -eq 2 ]
  run spec-replay -m "$W/t.q4nx" -d "$W/missing.q4nx" -p x
  [ "$status" -eq 3 ]
  [[ "$output" == *"missing.q4nx"* ]]
  echo 'not json' >"$W/bad.json"
  run spec-replay -m "$W/t.q4nx" -d "$W/d.q4nx" --ids "$W/bad.json"
  [ "$status" -eq 3 ]
  [[ "$output" == *"JSON array of token ids"* ]]
  head -c 4096 "$W/d.q4nx" >"$W/trunc.q4nx"
  run spec-replay -m "$W/t.q4nx" -d "$W/trunc.q4nx" -p x
  [ "$status" -eq 3 ]
  [[ "$output" == *"trunc.q4nx"* ]]
  echo '[1, 2, 999999]' >"$W/bad.json"
  run spec-replay -m "$W/t.q4nx" -d "$W/d.q4nx" --ids "$W/bad.json"
  [ "$status" -eq 3 ]
  [[ "$output" == *"outside the vocabulary"* ]]
  local tiny
  tiny=$W/tiny.q4nx
  oga-extract "$(fixture qwen2 cpu tied tiny 0)" | q4nx-pack -l b8 -o "$tiny"
  run spec-replay -m "$W/t.q4nx" -d "$tiny" -p x
  [ "$status" -eq 4 ]
  [[ "$output" == *"vocabulary"* ]]
  run spec-replay --help
  [ "$status" -eq 0 ]
  [ -f "$TOP/man/man1/spec-replay.1" ]
}
