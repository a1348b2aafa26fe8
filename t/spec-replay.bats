#!/usr/bin/env bats
# spec-replay: greedy speculative decoding on the bundled pair (share/models). Its counts are checked
# against tools/train/accept.js, the same algorithm written independently over onnxruntime; its
# output against plain greedy decoding; its self-draft case against what must hold (every draft
# accepted). Timings are reported, never asserted.
load helpers
bats_require_minimum_version 1.5.0

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
  # a recording of the target: 32 tokens of each default prompt (the replay tests share it)
  spec-replay record -m "$W/t.q4nx" --tokens 32 --ignore-eos -t 1 -o "$W/rec32.json"
}
teardown_file() { rm -rf "$W"; }

# accept_ref K: tools/train/accept.js (the outside oracle, over onnxruntime) on the bundled pair and the three
# prompts, 32 new tokens at K; kept under .cache/oracle keyed by the pair's files, the prompts, K, the script
# and onnxruntime's version (as helpers.bash oracle_cached), so the SAN run reuses the plain run's answer
accept_ref() {
  local dir=$TOP/.cache/oracle h m=$TOP/share/models
  h=$({ cat "$m"/pytiny-target/* "$m"/pytiny-draft/* "$W/prompts.json" "$TOP/tools/train/accept.js" \
    "$TOP/.cache/node/node_modules/onnxruntime-node/package.json"; printf 'accept.js k %s new 32\n' "$1"; } | sha256sum | cut -c1-32)
  if [ ! -s "$dir/accept-$h.json" ]; then
    mkdir -p "$dir"
    node "$TOP/tools/train/accept.js" "$m/pytiny-target" "$m/pytiny-draft" --ids "$W/prompts.json" --k "$1" --new 32 \
      >"$dir/accept-$h.json.$$" || { rm -f "$dir/accept-$h.json.$$"; return 1; }
    mv "$dir/accept-$h.json.$$" "$dir/accept-$h.json"
  fi
  cat "$dir/accept-$h.json"
}

@test "rounds and accepted drafts per prompt equal onnxruntime's (tools/train/accept.js), k = 4 and 2" {
  local k i n ours ref
  n=$(jq length "$W/prompts.json")
  for k in 4 2; do
    ref=$(accept_ref "$k")
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
    # a round offers min(k, tokens still wanted) drafts; only a last round whose drafts all hit ends
    # without the target's extra token
    echo "$out" | jq -e --argjson k "$k" '.drafted <= .rounds * $k and .drafted >= .rounds and .accepted <= .drafted and
      (.new_tokens == .accepted + .rounds or .new_tokens == .accepted + .rounds - 1) and
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
  run spec-replay -m "$W/t.q4nx" -d "$W/d.q4nx" -p x -k 4,
  [ "$status" -eq 2 ] && [[ "$output" == *"empty item"* ]] || false
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
  # a context too small for the runs (it made them differ: a false exit 1): 3; -c larger than the models' (a bad
  # option value, as npu-forward run's -c): 2
  run spec-replay -m "$W/t.q4nx" -d "$W/d.q4nx" -p hi -n 4 -c 3
  [ "$status" -eq 3 ] && [[ "$output" == *"need 10 positions; -c gives 3"* ]] || false
  run spec-replay -m "$W/t.q4nx" -d "$W/d.q4nx" -p hi -n 4 -c 100000
  [ "$status" -eq 2 ] && [[ "$output" == *"100000 positions (-c) are more than the models hold"* ]] || false
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

# ---- record / replay (lib/spec) ----

@test "spec-replay --selftest: every arm of the replay rule, the economics and the refusals passes" {
  run spec-replay --selftest
  [ "$status" -eq 0 ]
  [[ "$output" == *"1..29"* ]]
  [[ "$output" != *"not ok"* ]]
  [[ "$output" == *"2 rounds accepting [4,2], 6 offered"* ]]
}

@test "record: prompt ids are the tokenizer's, continuations are npu-forward run's greedy ids; identity fields" {
  spec-replay record -m "$W/t.q4nx" --tokens 24 --ignore-eos -t 1 -o "$W/rec.json"
  [ ! -e "$W/rec.json.tmp."* ] 2>/dev/null || false
  jq -e '.format == "ogakit-spec-recording" and .version == 1 and .vocab_size > 0 and
    (.target.checksum | test("^crc32c:[0-9a-f]{8}$")) and .target.name == "t.q4nx" and
    (.tokenizer.hash | test("^crc32c:[0-9a-f]{8}$")) and (.prompts | length) == 5 and
    ([.prompts[].kind] | index("code") != null) and
    all(.prompts[]; (.continuation_ids | length) == 24 and (.gaps | length) == 24 and .stop == "length" and
      .timings.decode_ms > 0 and .continuation_text != null)' "$W/rec.json"
  local i n text
  n=$(jq '.prompts | length' "$W/rec.json")
  for ((i = 0; i < n; i++)); do
    jq -j ".prompts[$i].text" "$W/rec.json" >"$W/text"
    [ "$(npu-forward tokenize -m "$W/t.q4nx" -f "$W/text" | jq -c .)" = "$(jq -c ".prompts[$i].prompt_ids" "$W/rec.json")" ]
    [ "$(npu-forward run -m "$W/t.q4nx" -f "$W/text" -n 24 --ignore-eos --json -t 1 | jq -c .ids)" = \
      "$(jq -c ".prompts[$i].continuation_ids" "$W/rec.json")" ]
  done
  # EOS honoured without --ignore-eos, as npu-forward run honours it (the bundled target rarely ends)
  spec-replay record -m "$W/t.q4nx" --prompts <(echo '{"prompts":[{"text":"def main("}]}') --tokens 100 -t 1 >"$W/eos.json"
  jq -e '.settings.ignore_eos == false and (.prompts[0] |
    .stop == (if (.continuation_ids | length) == 100 then "length" else "eos" end))' "$W/eos.json"
  [ "$(npu-forward run -m "$W/t.q4nx" -p "def main(" -n 100 --json -t 1 | jq -c .ids)" = "$(jq -c '.prompts[0].continuation_ids' "$W/eos.json")" ]
}

@test "record --twice: the continuations are identical (exit 0, said on stderr, in the document)" {
  run --separate-stderr spec-replay record -m "$W/t.q4nx" --tokens 16 --twice -t 1
  [ "$status" -eq 0 ]
  [[ "$stderr" == *"identical"* ]]
  echo "$output" | jq -e '.determinism == {"runs": 2, "identical": true}'
}

@test "replay of the bundled drafter against a recording = live mode's rounds and accepted drafts, k = 1, 2, 4, 7" {
  spec-replay -d "$W/d.q4nx" -k 1,2,4,7 -t 1 --json <"$W/rec32.json" >"$W/rep.json"
  local k i n live rep ks=(1 2 4 7)
  # under SAN live mode at the extremes, k 1 and 7 (the replay still runs all four): the same paths at every k,
  # and the first two tests run live mode at k 1, 2, 3, 4, 8, 16 there too (12 live runs took 14 s)
  [ "${OGAKIT_SAN:-0}" != 1 ] || ks=(1 7)
  n=$(jq '.prompts | length' "$W/rec32.json")
  for k in "${ks[@]}"; do
    for ((i = 0; i < n; i++)); do
      jq -c ".prompts[$i].prompt_ids" "$W/rec32.json" >"$W/p.json"
      live=$(spec-replay -m "$W/t.q4nx" -d "$W/d.q4nx" --ids "$W/p.json" -n 32 -k "$k" --ignore-eos -t 1 --json |
        jq -c '[.rounds, .accepted, .drafted, .identical_to_greedy]')
      rep=$(jq -c ".results[] | select(.k == $k) | .measured.per_prompt[$i] | [.rounds, .accepted, .offered, true]" "$W/rep.json")
      echo "# k $k prompt $i: live $live replay $rep" >&3
      [ "$live" = "$rep" ]
    done
  done
  # totals and per-round lists are consistent with the per-prompt numbers
  jq -e 'all(.results[]; .measured as $m | $m.rounds == ([$m.per_prompt[].rounds] | add) and
    $m.accepted == ([$m.per_prompt[].accepted] | add) and
    all($m.per_prompt[]; (.accepts | length) == .rounds and (.accepts | add) == .accepted and .tokens == 32) and
    $m.drafter_prefill_ms > 0 and $m.drafter_ms > 0 and
    .projected == null)' "$W/rep.json"
}

@test "replay: the target as its own drafter accepts everything, with a warning; 32 tokens at k 4 take 7 rounds" {
  run --separate-stderr spec-replay -d "$W/t.q4nx" -k 4 -t 1 --json --recording "$W/rec32.json"
  [ "$status" -eq 0 ]
  [[ "$stderr" == *"every draft accepted"* ]]
  # 32 = 6 rounds of 5 + a last round of 2 drafts, both accepted, no extra token
  echo "$output" | jq -e 'all(.results[0].measured.per_prompt[]; .rounds == 7 and .accepts == [4,4,4,4,4,4,2] and .offered == 26)'
}

@test "replay economics: given costs give the formulas' bars and speed-ups; measured and projected apart" {
  spec-replay -d "$W/d.q4nx" -k 2,4 --step-ms 2 --pass-ms 3,4 -t 1 --json <"$W/rec32.json" >"$W/eco.json"
  jq -e 'all(.results[]; .measured.tokens_per_round > 0 and .projected.costs == "given" and .projected.step_ms == 2)' "$W/eco.json"
  # independent arithmetic: v = pass/step, d = drafter ms per round / step, bars v+d and v+1+d, speed-up tpr / bar
  jq -e 'all(.results[]; .measured as $m | .projected as $p | ($p.pass_ms / 2) as $v |
    ($m.drafter_ms_per_round / 2) as $d |
    (($p.break_even_tokens_per_round.one_pass - ($v + $d)) | fabs) < 1e-9 and
    (($p.break_even_tokens_per_round.two_pass - ($v + 1 + $d)) | fabs) < 1e-9 and
    (($p.speedup.one_pass - $m.tokens_per_round / ($v + $d)) | fabs) < 1e-9 and
    (($p.speedup.two_pass - $m.tokens_per_round / ($v + 1 + $d)) | fabs) < 1e-9)' "$W/eco.json"
  [ "$(jq '[.results[].projected.pass_ms]' -c "$W/eco.json")" = "[3,4]" ]
  # the table says which numbers are measured and which projected
  run spec-replay -d "$W/d.q4nx" -k 4 --step-ms 2 --pass-ms 3 -t 1 <"$W/rec32.json"
  [ "$status" -eq 0 ]
  [[ "$output" == *"measured (replay)"* && "$output" == *"projected"* ]]
  # --measure times this machine's passes on the target
  spec-replay -d "$W/d.q4nx" -k 1,4 --measure -m "$W/t.q4nx" -t 1 --json <"$W/rec32.json" >"$W/meas.json"
  jq -e 'all(.results[]; .projected.costs == "measured" and .projected.step_ms > 0 and
    .projected.pass_ms >= .projected.step_ms and .projected.speedup.one_pass > 0)' "$W/meas.json"
}

@test "replay refusals: malformed, truncated, another vocabulary, a prompt the drafter tokenizes otherwise (3); half-specified (2)" {
  echo 'not json' >"$W/bad.json"
  run spec-replay -d "$W/d.q4nx" --recording "$W/bad.json"
  [ "$status" -eq 3 ]
  [[ "$output" == *"bad.json"*"not a complete JSON document"* ]]
  head -c 700 "$W/rec32.json" >"$W/trunc.json"
  run spec-replay -d "$W/d.q4nx" <"$W/trunc.json"
  [ "$status" -eq 3 ]
  [[ "$output" == *"stdin: not a complete JSON document"* ]]
  # every field checked: settings and its tokens, a continuation past them or "length" short of them,
  # vocab_size present (null allowed), timings an object of numbers
  local mut
  for mut in 'del(.settings)' '.settings.tokens = 4' '.settings.tokens = "32"' 'del(.vocab_size)' '.prompts[0].timings = 5' \
      '.prompts[0].continuation_ids |= .[:5]' '.settings.greedy = "yes"'; do
    jq -c "$mut" "$W/rec32.json" >"$W/mut.json"
    run spec-replay -d "$W/d.q4nx" --recording "$W/mut.json"
    [ "$status" -eq 3 ] || { echo "$mut: $status $output"; return 1; }
  done
  # a prompt name with control characters reaches the table and the warnings as '?'
  jq '.prompts[0].name = "a\u001b[2Jb"' "$W/rec32.json" >"$W/esc.json"
  run spec-replay -d "$W/d.q4nx" -k 2 --recording "$W/esc.json"
  [ "$status" -eq 0 ] && [[ "$output" == *"a?[2Jb"* ]] && [[ "$output" != *$'\e'* ]] || false
  jq '.version = 2' "$W/rec32.json" >"$W/v2.json"
  run spec-replay -d "$W/d.q4nx" --recording "$W/v2.json"
  [ "$status" -eq 3 ]
  [[ "$output" == *"newer"* ]]
  oga-extract "$(fixture qwen2 cpu tied tiny 0)" | q4nx-pack -l b8 -o "$W/tiny2.q4nx"
  run spec-replay -d "$W/tiny2.q4nx" --recording "$W/rec32.json"
  [ "$status" -eq 3 ]
  [[ "$output" == *"vocabulary mismatch"* ]]
  jq '.prompts[1].text = "something else entirely"' "$W/rec32.json" >"$W/retok.json"
  run spec-replay -d "$W/d.q4nx" --recording "$W/retok.json"
  [ "$status" -eq 3 ]
  [[ "$output" == *"prompt 1 (code): its text does not tokenize"* ]]
  run spec-replay -d "$W/d.q4nx" --pass-ms 3 --recording "$W/rec32.json"
  [ "$status" -eq 2 ]
  [[ "$output" == *"--pass-ms needs --step-ms"* ]]
  run spec-replay -d "$W/d.q4nx" --step-ms 3 --recording "$W/rec32.json"
  [ "$status" -eq 2 ]
  run spec-replay -d "$W/d.q4nx" --step-ms 3 --pass-ms 2 --recording "$W/rec32.json"
  [ "$status" -eq 2 ]
  [[ "$output" == *"at least one"* ]]
  run spec-replay -d "$W/d.q4nx" --measure --recording "$W/rec32.json"
  [ "$status" -eq 2 ]
  [[ "$output" == *"--measure needs -m"* ]]
  run spec-replay -k 4 --recording "$W/rec32.json"
  [ "$status" -eq 2 ]
  [[ "$output" == *"drafter"* ]]
  run spec-replay -m "$W/t.q4nx" -d "$W/d.q4nx" -p x -k 1,2
  [ "$status" -eq 2 ]
  run spec-replay record --help
  [ "$status" -eq 0 ]
  [[ "$output" == *"--twice"* && "$output" == *"--url"* ]]
  run spec-replay record --tokens 4
  [ "$status" -eq 2 ]
  [[ "$output" == *"-m TARGET.q4nx or --url URL"* ]]
  run spec-replay record -m "$W/t.q4nx" --prompts "$W/bad.json"
  [ "$status" -eq 3 ]
  # an output that cannot be made: 1, as in every program (it is opened before the work)
  run spec-replay record -m "$W/t.q4nx" --tokens 4 -o "$W/nodir/x.json"
  [ "$status" -eq 1 ]
  [ ! -e "$W/nodir" ]
}

# the HTTP client against t/fake-oai.js (127.0.0.1, a free port, killed by the teardown)
start_fake() { # MODE -> $URL
  local pf=$W/fake-$1.port i
  rm -f "$pf" "$pf.log"
  (exec node "$TOP/t/fake-oai.js" "$pf" "$1" 3>&-) & # exec: the pid recorded is the server's own
  echo $! >>"$W/fake.pids"
  for ((i = 0; i < 100; i++)); do [ -s "$pf" ] && break; sleep 0.05; done
  [ -s "$pf" ]
  URL=http://127.0.0.1:$(cat "$pf")
}
teardown() { [ ! -e "$W/fake.pids" ] || { xargs -r kill <"$W/fake.pids" 2>/dev/null; rm -f "$W/fake.pids"; }; }

# the fake's rule, written again here: next = (7 * last + second-to-last + 3) mod 97
fake_continuation() { # IDS_JSON N
  jq -c --argjson n "$2" 'reduce range($n) as $i ({s: ., out: []};
    ((.s[-1] * 7 + (if (.s | length) > 1 then .s[-2] else 0 end) + 3) % 97) as $t | .s += [$t] | .out += [$t]) | .out' <<<"$1"
}

@test "record --url: an OpenAI-compatible server's greedy ids, gaps from its top-2 logprobs, its model id" {
  start_fake target
  echo '{"prompts":[{"name":"a","ids":[5,9,12]},{"name":"b","kind":"code","ids":[1]}]}' >"$W/ids.json"
  spec-replay record --url "$URL" --prompts "$W/ids.json" --tokens 20 >"$W/url.json"
  jq -e '.target == {"url": "'"$URL"'", "model": "fake-target"} and .tokenizer == null and .vocab_size == null and
    all(.prompts[]; .timings.request_ms > 0)' "$W/url.json"
  [ "$(jq -c '.prompts[0].continuation_ids' "$W/url.json")" = "$(fake_continuation '[5,9,12]' 20)" ]
  [ "$(jq -c '.prompts[1].continuation_ids' "$W/url.json")" = "$(fake_continuation '[1]' 20)" ]
  # gap at step i: 0.5 + ((prompt length + i) mod 5)
  jq -e '.prompts[0] | [range(20) as $i | .gaps[$i] == 0.5 + ((3 + $i) % 5)] | all' "$W/url.json"
  # the requests: token ids, temperature 0, top-2 logprobs
  grep '/v1/completions' "$W/fake-target.port.log" | head -1 | jq -e '.body | fromjson |
    .prompt == [5,9,12] and .temperature == 0 and .max_tokens == 20 and .logprobs == 2 and .return_tokens'
  # llama-server's /completion when /v1/completions has no ids: the same recording
  start_fake llama
  spec-replay record --url "$URL" --prompts "$W/ids.json" --tokens 20 >"$W/llama.json"
  [ "$(jq -c '[.prompts[] | .continuation_ids, .gaps]' "$W/llama.json")" = "$(jq -c '[.prompts[] | .continuation_ids, .gaps]' "$W/url.json")" ]
  grep -q '"/completion"' "$W/fake-llama.port.log"
}

# vLLM gives no ids in choices[0]: only its logprobs.tokens as "token_id:N" when asked
# (return_tokens_as_token_ids); its /completion is a 404 (held-out audit: the fallback asked it and failed)
@test "record --url and --draft-url on vLLM (ids as logprobs.tokens \"token_id:N\"): the same ids and gaps, drafts too" {
  start_fake vllm
  echo '{"prompts":[{"name":"a","ids":[5,9,12]},{"name":"b","kind":"code","ids":[1]}]}' >"$W/ids.json"
  spec-replay record --url "$URL" --prompts "$W/ids.json" --tokens 20 >"$W/vllm.json"
  [ "$(jq -c '.prompts[0].continuation_ids' "$W/vllm.json")" = "$(fake_continuation '[5,9,12]' 20)" ]
  [ "$(jq -c '.prompts[1].continuation_ids' "$W/vllm.json")" = "$(fake_continuation '[1]' 20)" ]
  jq -e '.prompts[0] | [range(20) as $i | .gaps[$i] == 0.5 + ((3 + $i) % 5)] | all' "$W/vllm.json"
  # asked vLLM's way once it answered without ids, and never llama-server's
  grep '/v1/completions' "$W/fake-vllm.port.log" | tail -1 | jq -e '.body | fromjson | .return_tokens_as_token_ids and .logprobs == 2'
  ! grep -q '"/completion"' "$W/fake-vllm.port.log" || false
  # as a drafter: a perfect one (no gaps asked: logprobs 1 carries the ids)
  run --separate-stderr spec-replay --draft-url "$URL" -k 4 --json --recording "$W/vllm.json"
  [ "$status" -eq 0 ] && [[ "$stderr" == *"every draft accepted"* ]] || false
  echo "$output" | jq -e '.results[0].measured.per_prompt[0].accepts == [4,4,4,4]'
  grep '/v1/completions' "$W/fake-vllm.port.log" | tail -1 | jq -e '.body | fromjson | .return_tokens_as_token_ids and .logprobs == 1'
  # a server with no ids any of the three ways: refused saying so (exit 3), not only with /completion's 404
  start_fake bare
  run spec-replay record --url "$URL" --prompts "$W/ids.json" --tokens 4 -o "$W/bare.json"
  [ "$status" -eq 3 ] && [[ "$output" == *"no token ids: /v1/completions answered none (asked also vLLM's way) and then"*"/completion: HTTP 404"* ]] || false
  [ ! -e "$W/bare.json" ]
}

# a server that is loading or busy answers 503 / 429: asked again after its Retry-After (or a doubling pause),
# said on stderr; one that stays so is refused after the last try (exit 3)
@test "record --url: 503 with Retry-After and 429 are asked again (said on stderr); a server that stays 503 is refused" {
  start_fake busy
  echo '{"prompts":[{"name":"a","ids":[5,9,12]}]}' >"$W/ids1.json"
  run --separate-stderr spec-replay record --url "$URL" --prompts "$W/ids1.json" --tokens 8
  [ "$status" -eq 0 ]
  [[ "$stderr" == *"/v1/completions: HTTP 503; asking again in 1.0 s (1 of 5)"* ]] || false
  [[ "$stderr" == *"/v1/completions: HTTP 429; asking again in 1.0 s (2 of 5)"* ]] || false
  [ "$(echo "$output" | jq -c '.prompts[0].continuation_ids')" = "$(fake_continuation '[5,9,12]' 8)" ]
  # the request time is the answered attempt's, not the pauses'
  echo "$output" | jq -e '.prompts[0].timings.request_ms < 900'
  [ "$(grep -c '/v1/completions' "$W/fake-busy.port.log")" -eq 3 ]
  start_fake down
  run --separate-stderr spec-replay record --url "$URL" --prompts "$W/ids1.json" --tokens 8 -o "$W/down.json"
  [ "$status" -eq 3 ] && [[ "$stderr" == *"HTTP 503: "*"loading"* ]] || false
  [ ! -e "$W/down.json" ]
  [ "$(grep -c '/v1/completions' "$W/fake-down.port.log")" -eq 6 ]
}

# llama-server's ids stop before the end-of-generation token; vLLM keeps the token that stopped it in its output ids
# (and so in logprobs.tokens, the ids read its way): recorded, it was the continuation's last token, where a
# recording ends before it (as -m's and ogakit serve's do), so a drafter was scored against EOS
@test "record --url on llama-server and vLLM stopping at an end-of-generation token: stop eos, the token not in the continuation" {
  local mode
  echo '{"prompts":[{"name":"a","ids":[5,9,12]}]}' >"$W/ids.json"
  for mode in llamaeos vllmeos; do
    start_fake "$mode"
    spec-replay record --url "$URL" --prompts "$W/ids.json" --tokens 20 >"$W/eos.json"
    jq -e '.prompts[0] | .stop == "eos" and (.continuation_ids | length) == 10 and (.gaps | length) == 10' "$W/eos.json"
    [ "$(jq -c '.prompts[0].continuation_ids' "$W/eos.json")" = "$(fake_continuation '[5,9,12]' 10)" ]
    # --ignore-eos: the full length, stop "length"
    spec-replay record --url "$URL" --prompts "$W/ids.json" --tokens 20 --ignore-eos >"$W/noeos.json"
    jq -e '.prompts[0] | .stop == "length" and (.continuation_ids | length) == 20' "$W/noeos.json"
  done
}

# held-out audit: a server answering more tokens than max_tokens (finish "stop") gave a recording its own replay
# refused; a base URL with OpenAI's /v1 (as clients' base_url) asked /v1/v1/completions; credentials in a URL
# were written into the recording and every message
@test "record --url: more tokens than asked refused (exit 3); a /v1 base URL; credentials never shown" {
  start_fake more
  echo '{"prompts":[{"name":"a","ids":[5,9,12]}]}' >"$W/ids.json"
  run -3 spec-replay record --url "$URL" --prompts "$W/ids.json" --tokens 8
  [[ "$output" == *"answered 13 tokens, more than the 8 asked for"* ]]
  start_fake target
  # -o naming an input is refused before any completion is asked for (it came after all the requests)
  run -2 spec-replay record --url "$URL" --prompts "$W/ids.json" --tokens 8 -o "$W/ids.json"
  [ -z "$(grep completions "$W/fake-target.port.log" || true)" ]
  local hp=${URL#http://}
  spec-replay record --url "http://alice:s3cret@$hp/v1/" --prompts "$W/ids.json" --tokens 8 >"$W/v1.json"
  [ "$(jq -c '.prompts[0].continuation_ids' "$W/v1.json")" = "$(fake_continuation '[5,9,12]' 8)" ]
  jq -e --arg u "http://***@$hp/v1/" '.target.url == $u' "$W/v1.json"
  [ "$(grep -c s3cret "$W/v1.json")" = 0 ]
  run -3 spec-replay --draft-url "http://alice:s3cret@127.0.0.1:1" --recording "$W/v1.json"
  [[ "$output" == *"http://***@127.0.0.1:1"* ]]
  [[ "$output" != *s3cret* ]]
}

# held-out audit: a container drafter needed prompt + continuation + k + 1 positions, though a round never
# drafts past the continuation's end: a recording that fits was refused at k 8
@test "replay -d: a recording whose prompt and continuation fill the drafter's context replays at any k" {
  jq -nc '{prompts: [{name: "long", ids: [range(1000) | . % 4000 + 1]}]}' >"$W/long-ids.json"
  spec-replay record -m "$W/t.q4nx" --prompts "$W/long-ids.json" --tokens 16 --ignore-eos -t 1 -o "$W/long.json"
  run spec-replay -d "$W/d.q4nx" -k 1,8,16 -t 1 --json --recording "$W/long.json"
  [ "$status" -eq 0 ]
  echo "$output" | jq -e '[.results[].measured.per_prompt[0].accepted] | length == 3' >/dev/null
}

@test "record --twice: a target whose continuations change between runs fails with exit 1" {
  start_fake flaky
  run --separate-stderr spec-replay record --url "$URL" --prompts <(echo '[{"ids":[3,4]}]') --tokens 5 --twice
  [ "$status" -eq 1 ]
  [[ "$stderr" == *"differ"* ]]
  echo "$output" | jq -e '.determinism.identical == false'
}

@test "replay --draft-url: a perfect and an always-wrong drafter over HTTP give the rule's counts" {
  start_fake target
  local tgt=$URL
  echo '{"prompts":[{"name":"a","ids":[5,9,12]}]}' >"$W/ids1.json"
  spec-replay record --url "$tgt" --prompts "$W/ids1.json" --tokens 20 >"$W/u20.json"
  run --separate-stderr spec-replay --draft-url "$tgt" -k 4,7 --json --recording "$W/u20.json"
  [ "$status" -eq 0 ]
  [[ "$stderr" == *"every draft accepted"* ]]
  # k 4: 20 = 3 rounds of 5 + a last round of 4 drafts + 1; k 7: 8 + 8 + a last round of 4 drafts, no extra
  echo "$output" | jq -e '.results[0].measured.per_prompt[0].accepts == [4,4,4,4] and
    .results[1].measured.per_prompt[0].accepts == [7,7,4] and .results[1].measured.offered == 18 and
    .drafter.url != null'
  # the drafter took in the prompt but its last token, then saw every committed prefix: 3 + 0, 5, 10, 15 tokens at k 4
  grep '/v1/completions' "$W/fake-target.port.log" | tail -9 | head -5 | jq -s -e '[.[].body | fromjson | .prompt | length] == [2,3,8,13,18]'
  start_fake wrong
  run --separate-stderr spec-replay --draft-url "$URL" -k 3 --json --step-ms 1 --pass-ms 1 --recording "$W/u20.json"
  [ "$status" -eq 0 ]
  [[ "$stderr" == *"no draft accepted"* ]]
  echo "$output" | jq -e '.results[0].measured | .rounds == 20 and .accepted == 0 and (.accepts // .per_prompt[0].accepts | add) == 0'
  echo "$output" | jq -e '.results[0].projected.speedup.one_pass < 1'
  # a server that answers no token at all: a drafter so is said; a target so is refused at record
  start_fake empty
  run --separate-stderr spec-replay --draft-url "$URL" -k 3 --json --recording "$W/u20.json"
  [ "$status" -eq 0 ] && [[ "$stderr" == *"the drafter offered no token at all"* ]] || false
  run spec-replay record --url "$URL" --prompts "$W/ids1.json" --tokens 4 -o "$W/empty.json"
  [ "$status" -eq 3 ] && [[ "$output" == *"answered 0 tokens of 4"* ]] && [ ! -e "$W/empty.json" ] || false
  # a prompt given as both text and ids: which one the recording stands for is not guessed
  echo '{"prompts":[{"name":"both","ids":[5,9],"text":"x"}]}' >"$W/both.json"
  start_fake target
  run spec-replay record --url "$URL" --prompts "$W/both.json" --tokens 4 -o "$W/both-rec.json"
  [ "$status" -eq 3 ] && [[ "$output" == *"both given"* ]] && [ ! -e "$W/both-rec.json" ] || false
}

@test "HTTP peers: unreachable, or answering with errors, is refused with exit 3 naming the URL" {
  local port
  port=$(node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
  run spec-replay record --url "http://127.0.0.1:$port" --prompts <(echo '[{"ids":[1,2]}]') --tokens 4 --timeout 5
  [ "$status" -eq 3 ]
  [[ "$output" == *"127.0.0.1:$port"*"unreachable"* ]]
  start_fake error
  run spec-replay record --url "$URL" --prompts <(echo '[{"ids":[1,2]}]') --tokens 4
  [ "$status" -eq 3 ]
  [[ "$output" == *"HTTP 500"* ]]
  run spec-replay --draft-url "$URL" --recording "$W/rec32.json"
  [ "$status" -eq 3 ]
  run spec-replay record --url "$URL" --prompts <(echo '[{"text":"hello"}]') --tokens 4
  [ "$status" -eq 2 ]
  [[ "$output" == *"--tokenizer"* ]]
}

@test "record: text prompts on a container without a tokenizer exit 4 by name; id prompts still record" {
  cp -r "$TOP/share/models/pytiny-target" "$W/notok"
  rm "$W/notok/tokenizer.json"
  oga-extract --allow-incomplete "$W/notok" 2>/dev/null | q4nx-pack -l b8 -o "$W/notok.q4nx" 2>/dev/null
  run spec-replay record -m "$W/notok.q4nx" --tokens 4 -t 1 -o "$W/notok.json"
  [ "$status" -eq 4 ]
  [[ "$output" == *"prompts[0] is text"*"no tokenizer"* ]]
  [ ! -e "$W/notok.json" ]
  spec-replay record -m "$W/notok.q4nx" --prompts <(echo '[{"ids":[1,2,3]}]') --tokens 4 --ignore-eos -t 1 -o "$W/notok.json"
  jq -e '.tokenizer == null and (.prompts | length) == 1' "$W/notok.json"
}

# two real servers: `npu-forward serve` (the serve issue) for the target and the drafter
launch_serve() { # MODEL [SERVE OPTIONS] -> $URL, not waiting (wait_serve URL: GET /health 200, at most 60 s)
  local port
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  npu-forward serve -m "$1" --port "$port" -t 1 "${@:2}" >"$W/serve-$port.log" 2>&1 3>&- &
  echo $! >>"$W/fake.pids"
  URL=http://127.0.0.1:$port
}
wait_serve() {
  local i
  for ((i = 0; i < 1200; i++)); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$1/health")" = 200 ] && return 0
    sleep 0.05
  done
  cat "$W/serve-${1##*:}.log" >&3
  return 1
}

@test "through two npu-forward serve instances: the --url recording is -m's, --draft-url replays are -d's" {
  npu-forward serve --help >/dev/null 2>&1 || skip "npu-forward has no serve command"
  # the four servers start side by side (the key-holding pair is used below)
  launch_serve "$W/t.q4nx"
  local turl=$URL
  launch_serve "$W/d.q4nx"
  local durl=$URL
  launch_serve "$W/t.q4nx" --api-key sekrit
  local kurl=$URL
  launch_serve "$W/d.q4nx" --api-key sekrit2
  local kdurl=$URL
  wait_serve "$turl" && wait_serve "$durl" && wait_serve "$kurl" && wait_serve "$kdurl" || false
  # -m's recording of the default prompts, 32 tokens past EOS: setup_file's (record -m ... --tokens 32 --ignore-eos -t 1)
  cp "$W/rec32.json" "$W/viam.json"
  spec-replay record --url "$turl" --tokenizer "$W/t.q4nx" --tokens 32 --ignore-eos -o "$W/viaurl.json"
  [ "$(jq -c '[.prompts[] | .prompt_ids, .continuation_ids]' "$W/viaurl.json")" = \
    "$(jq -c '[.prompts[] | .prompt_ids, .continuation_ids]' "$W/viam.json")" ]
  jq -e --arg u "$turl" '.target.url == $u and .tokenizer.hash == ($m[0].tokenizer.hash)' --slurpfile m "$W/viam.json" "$W/viaurl.json"
  spec-replay -d "$W/d.q4nx" -k 1,2,4,7 -t 1 --json <"$W/viam.json" 2>/dev/null >"$W/rep-m.json"
  spec-replay --draft-url "$durl" -k 1,2,4,7 --json <"$W/viam.json" 2>/dev/null >"$W/rep-url.json"
  [ "$(jq -c '[.results[] | .k, [.measured.per_prompt[] | .rounds, .accepted, .offered, .accepts]]' "$W/rep-url.json")" = \
    "$(jq -c '[.results[] | .k, [.measured.per_prompt[] | .rounds, .accepted, .offered, .accepts]]' "$W/rep-m.json")" ]
  # servers behind serve --api-key: --api-key sends the key (a recording through one could not be made)
  run -3 spec-replay record --url "$kurl" --tokenizer "$W/t.q4nx" --tokens 32 --ignore-eos
  [[ "$output" == *"HTTP 401"* ]]
  spec-replay record --url "$kurl" --api-key sekrit --tokenizer "$W/t.q4nx" --tokens 32 --ignore-eos -o "$W/viakey.json"
  [ "$(jq -c '[.prompts[] | .prompt_ids, .continuation_ids]' "$W/viakey.json")" = \
    "$(jq -c '[.prompts[] | .prompt_ids, .continuation_ids]' "$W/viam.json")" ]
  spec-replay --draft-url "$kdurl" --api-key sekrit2 -k 1,2,4,7 --json <"$W/viam.json" 2>/dev/null >"$W/rep-key.json"
  [ "$(jq -c '[.results[] | .k, [.measured.per_prompt[] | .rounds, .accepted, .offered, .accepts]]' "$W/rep-key.json")" = \
    "$(jq -c '[.results[] | .k, [.measured.per_prompt[] | .rounds, .accepted, .offered, .accepts]]' "$W/rep-m.json")" ]
  run -2 spec-replay record -m "$W/t.q4nx" --api-key x
}

# ---- hostile recordings, prompt files, servers and options ----

# a prompt id above 2^31 - 1 was cast to int: 4294967301 became id 5, and the recording said the prompt was [5, 3]
@test "record --url: a prompt id beyond 2^31 - 1 is refused by name (exit 3), never wrapped into another id" {
  start_fake target
  echo '[{"ids":[4294967301, 3]}]' >"$W/wrap.json"
  run -3 spec-replay record --url "$URL" --prompts "$W/wrap.json" --tokens 4 -o "$W/wrap-rec.json"
  [[ "$output" == *"prompts[0].ids[0] is not a token id"* ]]
  [ ! -e "$W/wrap-rec.json" ]
  [ -z "$(grep completions "$W/fake-target.port.log" || true)" ]
}

# a URL refused for its scheme was quoted whole, password and all; a password with an unencoded '@' was half shown;
# HTTP:// (a scheme has no case) was refused
@test "URLs: credentials stay hidden in every refusal; the scheme's case does not matter" {
  run -2 spec-replay record --url "ftp://alice:s3cret@127.0.0.1:1" --prompts <(echo '[{"ids":[1]}]') --tokens 4
  [[ "$output" == *"ftp://***@127.0.0.1:1: want an http:// URL"* ]]
  [[ "$output" != *s3cret* ]]
  run -2 spec-replay --draft-url "gopher://alice:s3cret@127.0.0.1:1" --recording "$W/rec32.json"
  [[ "$output" == *"gopher://***@127.0.0.1:1"* && "$output" != *s3cret* ]] || false
  run -3 spec-replay --draft-url "http://alice:s3@cr3t@127.0.0.1:1" -k 2 --recording "$W/rec32.json" --timeout 5
  [[ "$output" == *"http://***@127.0.0.1:1"* && "$output" != *cr3t* ]] || false
  start_fake target
  echo '[{"ids":[5,9,12]}]' >"$W/ids1.json"
  spec-replay record --url "HTTP://${URL#http://}" --prompts "$W/ids1.json" --tokens 8 >"$W/upper.json"
  [ "$(jq -c '.prompts[0].continuation_ids' "$W/upper.json")" = "$(fake_continuation '[5,9,12]' 8)" ]
}

# a top-1/top-2 logprob difference past FLT_MAX became an infinite gap, which JSON cannot hold: the gaps array was
# written one short, and record exited 0 with a recording its own replay refused
@test "record --url: logprobs too far apart for a float leave the prompt's gaps null, and the recording replays" {
  start_fake farlp
  echo '[{"ids":[5,9,12]}]' >"$W/ids1.json"
  spec-replay record --url "$URL" --prompts "$W/ids1.json" --tokens 8 -o "$W/far.json"
  jq -e '.prompts[0] | .gaps == null and (.continuation_ids | length) == 8' "$W/far.json"
  [ "$(jq -c '.prompts[0].continuation_ids' "$W/far.json")" = "$(fake_continuation '[5,9,12]' 8)" ]
  run --separate-stderr spec-replay --draft-url "$URL" -k 2 --json --recording "$W/far.json"
  [ "$status" -eq 0 ]
  echo "$output" | jq -e '.results[0].measured.per_prompt[0].accepts == [2,2,2]'
}

# given costs whose ratio overflows a double: verify_pass_steps and the bars went missing from the JSON (json_real of
# an infinity is nothing) and the table printed 0.000 for them
@test "replay economics: costs whose ratio is beyond a double are refused in projected, never left half-written" {
  run spec-replay -d "$W/d.q4nx" -k 4 --step-ms 1e-300 --pass-ms 1e12 -t 1 --json --recording "$W/rec32.json"
  [ "$status" -eq 0 ]
  echo "$output" | jq -e '.results[0].projected | (.refused | test("beyond measure")) and .speedup == null and
    .break_even_tokens_per_round == null'
  run spec-replay -d "$W/d.q4nx" -k 4 --step-ms 1e-300 --pass-ms 1e12 -t 1 --recording "$W/rec32.json"
  [ "$status" -eq 0 ] && [[ "$output" == *"refused: "*"beyond measure"* ]] || false
}

# --api-key with a container drafter (or in live mode) was accepted and never sent anywhere (man: a usage error)
@test "--api-key without --draft-url is a usage error (2) in replay and live mode, as in record" {
  run -2 spec-replay -d "$W/d.q4nx" --api-key sekrit -t 1 --recording "$W/rec32.json"
  [[ "$output" == *"--api-key goes with --draft-url"* ]]
  run -2 spec-replay -m "$W/t.q4nx" -d "$W/d.q4nx" -p hi -n 2 --api-key sekrit -t 1
  [[ "$output" == *"--api-key goes with --draft-url"* ]]
}

# a key given twice was read as its last (jansson's default): the project's own formats refuse it
@test "replay: a recording with a key given twice is refused (exit 3), at the top and inside a prompt" {
  sed 's/"version":1,/"version":1,"version":1,/' "$W/rec32.json" >"$W/dup1.json"
  run -3 spec-replay -d "$W/d.q4nx" -t 1 --recording "$W/dup1.json"
  [[ "$output" == *"dup1.json: a key given twice"* ]]
  jq -c '.prompts[0].continuation_ids' "$W/rec32.json" >"$W/c0.json"
  sed "0,/\"continuation_ids\":/s//\"continuation_ids\":$(jq -c '.[:31] + [0]' "$W/c0.json"),\"continuation_ids\":/" \
    "$W/rec32.json" >"$W/dup2.json"
  [ "$(grep -o '"continuation_ids"' "$W/dup2.json" | wc -l)" -eq "$(($(jq '.prompts | length' "$W/rec32.json") + 1))" ]
  run -3 spec-replay -d "$W/d.q4nx" -t 1 --recording "$W/dup2.json"
  [[ "$output" == *"a key given twice"* ]]
}

# a server without OpenAI's /v1/completions (404) was refused with that 404: llama-server's /completion never asked
@test "record --url and --draft-url: a server whose /v1/completions is a 404 is asked llama-server's way" {
  start_fake llamaonly
  echo '{"prompts":[{"name":"a","ids":[5,9,12]}]}' >"$W/ids1.json"
  spec-replay record --url "$URL" --prompts "$W/ids1.json" --tokens 12 >"$W/lo.json"
  [ "$(jq -c '.prompts[0].continuation_ids' "$W/lo.json")" = "$(fake_continuation '[5,9,12]' 12)" ]
  jq -e '.prompts[0] | [range(12) as $i | .gaps[$i] == 0.5 + ((3 + $i) % 5)] | all' "$W/lo.json"
  grep -q '"/completion"' "$W/fake-llamaonly.port.log"
  run --separate-stderr spec-replay --draft-url "$URL" -k 4 --json --recording "$W/lo.json"
  [ "$status" -eq 0 ]
  echo "$output" | jq -e '.results[0].measured.per_prompt[0].accepts == [4,4,2]'
}

# a reply whose ids are not ids was refused without saying which server answered so
@test "record --url: a reply with token strings where ids belong is refused naming the server (exit 3)" {
  start_fake strtok
  echo '[{"ids":[5,9,12]}]' >"$W/ids1.json"
  run -3 spec-replay record --url "$URL" --prompts "$W/ids1.json" --tokens 4 -o "$W/strtok.json"
  [[ "$output" == *"prompt 'prompt 0': $URL: the reply's token 0 is not a token id"* ]]
  [ ! -e "$W/strtok.json" ]
}

# a drafter server that was busy (503, then 429) had the pauses before its retries counted as drafting time: a second
# of waiting per retry in drafter_ms, and in the economics (man: a request's time is the answered attempt's)
@test "replay --draft-url: a busy drafter's retry pauses are not its cost (the answered attempts' time)" {
  start_fake target
  echo '[{"ids":[5]}]' >"$W/ids1.json" # one token: no prefill request, the first draft meets the 503 and the 429
  spec-replay record --url "$URL" --prompts "$W/ids1.json" --tokens 8 >"$W/u8.json"
  start_fake busy
  run --separate-stderr spec-replay --draft-url "$URL" -k 4 --json --recording "$W/u8.json"
  [ "$status" -eq 0 ]
  [[ "$stderr" == *"HTTP 503; asking again in 1.0 s (1 of 5)"* && "$stderr" == *"HTTP 429; asking again in 1.0 s (2 of 5)"* ]] || false
  echo "$output" | jq -e '.results[0].measured | .per_prompt[0].accepts == [4,3] and .drafter_ms > 0 and .drafter_ms < 900'
}

# -o was opened after GET /v1/models (a request, retried up to 5 times on a loading server's 503): the man page
# promises it before the first request
@test "record --url: an -o that cannot be written is refused (exit 1) before the server is asked anything" {
  start_fake target
  echo '[{"ids":[5,9,12]}]' >"$W/ids1.json"
  run -1 spec-replay record --url "$URL" --prompts "$W/ids1.json" --tokens 4 -o "$W/nodir/x.json"
  [ ! -e "$W/nodir" ]
  [ ! -s "$W/fake-target.port.log" ]
}


# ---- a real llama-server (llama.cpp, tools/llama-cpp.sh) as the target and the drafter: skipped when not built ----
start_llama() { # Q4NX [LLAMA-SERVER OPTIONS] -> $URL: the container as GGUF behind llama-server (waits for /health)
  local dir port i g=${1%.q4nx}.gguf
  dir=$("$TOP/tools/llama-cpp.sh" --check noamx 2>/dev/null) || skip "llama.cpp is not built (tools/llama-cpp.sh): no llama-server"
  [ -s "$g" ] || q4nx-gguf --widen "$1" >"$g" 2>/dev/null
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  (exec "$dir/llama-server" -m "$g" --host 127.0.0.1 --port "$port" -c 512 -np 1 -t 1 "${@:2}" >"$W/llama-$port.log" 2>&1 3>&-) &
  echo $! >>"$W/fake.pids"
  URL=http://127.0.0.1:$port
  for ((i = 0; i < 300; i++)); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$URL/health")" = 200 ] && return 0
    sleep 0.1
  done
  cat "$W/llama-$port.log" >&3
  return 1
}

# llama-server's /completion echoes the prompt as text: a prompt holding the token of the byte 0 came back with
# "\u0000" in it, which the reader refused ("the reply is not JSON: \u0000 is not allowed"), target and drafter alike
@test "llama-server: a prompt holding the byte-0 token is recorded and replayed as through -m and -d" {
  start_llama "$W/t.q4nx"
  local turl=$URL nul
  nul=$(jq '.model.vocab["Ā"]' "$TOP/share/models/pytiny-target/tokenizer.json") # byte-level BPE: 0x00 is "Ā"
  jq -c --argjson z "$nul" '[.[] | {ids: (.[:2] + [$z] + .[2:])}]' "$W/prompts.json" >"$W/nul.json"
  spec-replay record --url "$turl" --prompts "$W/nul.json" --tokens 16 -o "$W/nul-url.json"
  spec-replay record -m "$W/t.q4nx" --prompts "$W/nul.json" --tokens 16 -t 1 -o "$W/nul-m.json"
  [ "$(jq -c '[.prompts[] | .prompt_ids, .continuation_ids, .stop]' "$W/nul-url.json")" = \
    "$(jq -c '[.prompts[] | .prompt_ids, .continuation_ids, .stop]' "$W/nul-m.json")" ]
  start_llama "$W/d.q4nx"
  spec-replay --draft-url "$URL" -k 1,4 --json --recording "$W/nul-m.json" 2>/dev/null >"$W/nul-rep-url.json"
  spec-replay -d "$W/d.q4nx" -k 1,4 -t 1 --json --recording "$W/nul-m.json" 2>/dev/null >"$W/nul-rep-d.json"
  [ "$(jq -c '[.results[] | .k, [.measured.per_prompt[] | .rounds, .accepted, .offered, .accepts]]' "$W/nul-rep-url.json")" = \
    "$(jq -c '[.results[] | .k, [.measured.per_prompt[] | .rounds, .accepted, .offered, .accepts]]' "$W/nul-rep-d.json")" ]
}

# llama-server's ignore_eos is a logit bias of -inf on its end-of-generation tokens: asked with it, a target gave the
# token it ranks second where its greedy choice is EOS (record --ignore-eos was not the greedy continuation -m
# records), and a drafter (always asked with it) never drafted EOS: the same weights as -d accepted 128 of 135
# drafts where -d accepts all. The pair here ends its text at id 258 ("   ", frequent) in both the pack and the GGUF.
@test "llama-server: --ignore-eos recordings and drafts are the greedy ones past EOS, as -m's and -d's" {
  local m=$TOP/share/models/pytiny-target f
  mkdir -p "$W/eos258"
  for f in model.onnx model.onnx.data tokenizer.json config.json; do ln -sf "$m/$f" "$W/eos258/$f"; done
  jq '.model.eos_token_id = 258' "$m/genai_config.json" >"$W/eos258/genai_config.json"
  jq --arg t "$(jq -r '.model.vocab | to_entries[] | select(.value == 258) | .key' "$m/tokenizer.json")" \
    '.eos_token = $t' "$m/tokenizer_config.json" >"$W/eos258/tokenizer_config.json"
  oga-extract "$W/eos258" | q4nx-pack -l b8 -o "$W/e258.q4nx"
  start_llama "$W/e258.q4nx"
  for f in "" --ignore-eos; do
    spec-replay record -m "$W/e258.q4nx" --tokens 16 $f -t 1 -o "$W/e258-m.json"
    spec-replay record --url "$URL" --tokenizer "$W/e258.q4nx" --tokens 16 $f -o "$W/e258-url.json"
    [ "$(jq -c '[.prompts[] | .prompt_ids, .continuation_ids, .stop, (.gaps | length)]' "$W/e258-url.json")" = \
      "$(jq -c '[.prompts[] | .prompt_ids, .continuation_ids, .stop, (.gaps | length)]' "$W/e258-m.json")" ]
  done
  # the EOS is in the continuations: some ended there without --ignore-eos
  jq -e '[.prompts[].continuation_ids[] | select(. == 258)] | length > 0' "$W/e258-m.json"
  spec-replay record -m "$W/e258.q4nx" --tokens 16 -t 1 | jq -e '[.prompts[] | select(.stop == "eos")] | length > 0'
  # the drafter behind llama-server drafts as the same container does (every draft accepted: the target itself)
  spec-replay --draft-url "$URL" -k 1,4 --json --recording "$W/e258-m.json" 2>/dev/null >"$W/e258-rep-url.json"
  spec-replay -d "$W/e258.q4nx" -k 1,4 -t 1 --json --recording "$W/e258-m.json" 2>/dev/null >"$W/e258-rep-d.json"
  [ "$(jq -c '[.results[] | .k, [.measured.per_prompt[] | .rounds, .accepted, .offered, .accepts]]' "$W/e258-rep-url.json")" = \
    "$(jq -c '[.results[] | .k, [.measured.per_prompt[] | .rounds, .accepted, .offered, .accepts]]' "$W/e258-rep-d.json")" ]
  jq -e '.results | all(.measured.accepted == .measured.offered)' "$W/e258-rep-url.json"
}

# once llama-server had answered through /completion, any later failure (the server killed, a prompt refused) was
# said as "no token ids: /v1/completions answered none (asked also vLLM's way) and then ...": as if it had no ids
@test "llama-server: a later request's error is said as it is, not as a server without token ids (exit 3)" {
  start_llama "$W/t.q4nx"
  jq -c '[{name: "fine", ids: .[0]}, {name: "outside", ids: (.[1] + [5000])}]' "$W/prompts.json" >"$W/out5000.json"
  run -3 spec-replay record --url "$URL" --prompts "$W/out5000.json" --tokens 4
  [[ "$output" == "spec-replay: prompt 'outside': $URL/completion: HTTP 400: "*"invalid tokens"* ]]
  [[ "$output" != *"no token ids"* ]]
  jq -c '{format: "ogakit-spec-recording", version: 1, target: {url: "x", model: null}, tokenizer: null, vocab_size: null,
    settings: {tokens: 4, ignore_eos: false, greedy: true}, prompts: [.[] | {name, kind: null, text: null,
    prompt_ids: .ids, continuation_ids: [1, 2, 3, 4], continuation_text: null, stop: "length", gaps: null, timings: null}]}' \
    "$W/out5000.json" >"$W/out5000-rec.json"
  run -3 spec-replay --draft-url "$URL" -k 2 --recording "$W/out5000-rec.json"
  [[ "$output" == *"prompt 1 (outside), k 2: $URL/completion: HTTP 400: "*"invalid tokens"* ]]
  [[ "$output" != *"no token ids"* ]]
}

# a llama-server drafter whose draft runs past an end-of-generation token takes two requests (the second from the
# prefix, the drafts and that token): only the last one's time was counted as the draft's cost
@test "replay --draft-url on llama-server: a draft asked again past EOS costs all its requests' time" {
  start_fake llama
  echo '[{"ids":[5,9,12]}]' >"$W/ids1.json"
  spec-replay record --url "$URL" --prompts "$W/ids1.json" --tokens 8 >"$W/l8.json"
  start_fake llamaslow # stops at EOS after half of what it is asked, each answer 150 ms late
  run --separate-stderr spec-replay --draft-url "$URL" -k 4 --json --recording "$W/l8.json"
  [ "$status" -eq 0 ]
  # rounds of 4, 4 and 2 drafts: two requests, two, one (5 x 150 ms); the EOS drafted third is a miss
  echo "$output" | jq -e '.results[0].measured | .per_prompt[0].accepts == [2,2,1] and .drafter_ms >= 750'
  [ "$(grep -c '"/completion"' "$W/fake-llamaslow.port.log")" -eq 6 ] # and the prompt's prefill
}

# temperature 0 is greedy only after the samplers before it in llama-server's chain, which its command line sets:
# a server started with --repeat-penalty 1.3 (as many guides start one) recorded a penalised continuation (the
# 32 tokens of the first default prompt diverged from -m's at the third), and drafted so
@test "llama-server started with sampling options (penalties, DRY, XTC, typical, biases): still the greedy continuation" {
  local o=(--repeat-penalty 1.3 --dry-multiplier 0.8 --samplers "penalties;dry;typ_p;xtc;top_k" --typical 0.3
    --xtc-probability 0.9 --xtc-threshold 0.01 --dynatemp-range 0.5 --logit-bias 258-5)
  start_llama "$W/t.q4nx" "${o[@]}"
  spec-replay record --url "$URL" --tokenizer "$W/t.q4nx" --tokens 32 --ignore-eos -o "$W/pen-url.json"
  [ "$(jq -c '[.prompts[] | .prompt_ids, .continuation_ids]' "$W/pen-url.json")" = \
    "$(jq -c '[.prompts[] | .prompt_ids, .continuation_ids]' "$W/rec32.json")" ]
  start_llama "$W/d.q4nx" "${o[@]}"
  spec-replay --draft-url "$URL" -k 1,4 --json --recording "$W/rec32.json" 2>/dev/null >"$W/pen-rep-url.json"
  spec-replay -d "$W/d.q4nx" -k 1,4 -t 1 --json --recording "$W/rec32.json" 2>/dev/null >"$W/pen-rep-d.json"
  [ "$(jq -c '[.results[] | .k, [.measured.per_prompt[] | .rounds, .accepted, .offered, .accepts]]' "$W/pen-rep-url.json")" = \
    "$(jq -c '[.results[] | .k, [.measured.per_prompt[] | .rounds, .accepted, .offered, .accepts]]' "$W/pen-rep-d.json")" ]
}

# llama-server with --context-shift goes on past its context, over a context it has cut ("truncated": true):
# recorded as the target's greedy continuation (the first default prompt's 260 tokens over 256 positions were not
# -m's), or drafted so; without it, it stops short and the refusal blamed max_tokens
@test "llama-server whose context runs out (--context-shift or not): refused naming it (exit 3), target and drafter" {
  local shift
  spec-replay record -m "$W/t.q4nx" --tokens 260 --ignore-eos -t 1 -o "$W/r260.json"
  for shift in --context-shift --no-context-shift; do
    start_llama "$W/t.q4nx" -c 256 "$shift"
    run -3 spec-replay record --url "$URL" --tokenizer "$W/t.q4nx" --tokens 260 --ignore-eos -o "$W/cs.json"
    [[ "$output" == "spec-replay: prompt 'prose': $URL: the server's context ran out (\"truncated\": true) before 314 tokens"* ]]
    [ ! -e "$W/cs.json" ]
    run -3 spec-replay --draft-url "$URL" -k 4 --recording "$W/r260.json"
    [[ "$output" == *"prompt 0 (prose), k 4: $URL: the server's context ran out"* ]]
  done
  # a prompt and continuation that just fill the 256 positions are whole (llama-server says "truncated" there too)
  jq -c '[{name: "fill", ids: .prompts[0].prompt_ids}]' "$W/r260.json" >"$W/fill.json"
  local fill=$((256 - $(jq '.[0].ids | length' "$W/fill.json")))
  spec-replay record --url "$URL" --prompts "$W/fill.json" --tokens "$fill" --ignore-eos -o "$W/fill-url.json"
  spec-replay record -m "$W/t.q4nx" --prompts "$W/fill.json" --tokens "$fill" --ignore-eos -t 1 -o "$W/fill-m.json"
  [ "$(jq -c '.prompts[0].continuation_ids' "$W/fill-url.json")" = "$(jq -c '.prompts[0].continuation_ids' "$W/fill-m.json")" ]
  run -3 spec-replay record --url "$URL" --prompts "$W/fill.json" --tokens "$((fill + 1))" --ignore-eos
  [[ "$output" == *"the server's context ran out (\"truncated\": true) before 257 tokens"* ]]
}

# llama-server applies its command line's stop strings (-r, --reverse-prompt) to a request that gives none: a target
# started with -r " in" stopped the first default prompt at its third token, refused as "3 tokens of 32 with
# finish_reason length (its max_tokens or context is smaller?)", and a drafter's drafts were cut there (129 of 130)
@test "llama-server started with a stop string (-r): the continuation and the drafts go on past it" {
  start_llama "$W/t.q4nx" -r " in"
  jq -c '{prompt: .prompts[0].prompt_ids, n_predict: 32, temperature: 0, return_tokens: true}' "$W/rec32.json" |
    curl -s -d @- "$URL/completion" | jq -e '.stop_type == "word" and (.tokens | length) < 32'
  spec-replay record --url "$URL" --tokenizer "$W/t.q4nx" --tokens 32 --ignore-eos -o "$W/rp-url.json"
  [ "$(jq -c '[.prompts[] | .prompt_ids, .continuation_ids, .stop]' "$W/rp-url.json")" = \
    "$(jq -c '[.prompts[] | .prompt_ids, .continuation_ids, .stop]' "$W/rec32.json")" ]
  start_llama "$W/d.q4nx" -r " in"
  spec-replay --draft-url "$URL" -k 1,4 --json --recording "$W/rec32.json" 2>/dev/null >"$W/rp-rep-url.json"
  spec-replay -d "$W/d.q4nx" -k 1,4 -t 1 --json --recording "$W/rec32.json" 2>/dev/null >"$W/rp-rep-d.json"
  [ "$(jq -c '[.results[] | .k, [.measured.per_prompt[] | .rounds, .accepted, .offered, .accepts]]' "$W/rp-rep-url.json")" = \
    "$(jq -c '[.results[] | .k, [.measured.per_prompt[] | .rounds, .accepted, .offered, .accepts]]' "$W/rp-rep-d.json")" ]
}

# a drafter behind a server had its prompt taken in by its first round's request: the whole prompt's time counted
# as drafting (a pytiny drafter on llama-server, a 450-token prompt: 1.9 ms per round, 1.4 of it drafting), where a
# container drafter's prefill is timed apart (drafter_prefill_ms)
@test "replay --draft-url: the drafter takes in each prompt apart from its rounds (a server keeping the prefix)" {
  start_fake target
  jq -nc '[{ids: [range(200) | . % 97]}]' >"$W/ids200.json"
  spec-replay record --url "$URL" --prompts "$W/ids200.json" --tokens 8 >"$W/p200.json"
  start_fake prefix # a prefix cache: 2 ms per prompt token not already held
  run --separate-stderr spec-replay --draft-url "$URL" -k 4 --json --recording "$W/p200.json"
  [ "$status" -eq 0 ]
  echo "$output" | jq -e '.results[0].measured | .per_prompt[0].accepts == [4,3] and .drafter_prefill_ms >= 398 and .drafter_ms < 200'
}

# a server slower than --timeout was said to be "unreachable: Timeout was reached"
@test "record --url and --draft-url: a server slower than --timeout is said so (exit 3), not unreachable" {
  # each /completion answered after 3 s; --timeout 0.5 s: time enough for the fake's quick refusals of
  # /v1/completions on a loaded machine (with 0.05 s against 150 ms they timed out too, once, under ASan)
  FAKE_SLOW_MS=3000 start_fake llamaslow
  echo '[{"ids":[5,9,12]}]' >"$W/ids1.json"
  run -3 spec-replay record --url "$URL" --prompts "$W/ids1.json" --tokens 4 --timeout 0.5
  [[ "$output" == "spec-replay: prompt 'prompt 0': $URL: no token ids: /v1/completions answered none (asked also vLLM's way) and then $URL/completion: no complete answer within 0.5 s (--timeout)" ]]
  run -3 spec-replay --draft-url "$URL" -k 2 --recording "$W/rec32.json" --timeout 0.5
  [[ "$output" == *"prompt 0 (prose), k 2: $URL: no token ids: "*"/completion: no complete answer within 0.5 s (--timeout)" ]]
}
