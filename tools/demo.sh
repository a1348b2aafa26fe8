#!/usr/bin/env bash
# The main job on the bundled default model: pack dir -> oga-info -> oga-extract | q4nx-pack ->
# q4nx-verify --all -> npu-forward run, then spec-replay with the bundled drafter (live, then a
# recording of the target replayed at k = 1, 2, 4, 7 with this machine's costs), then npu-forward
# serve on a free loopback port, asked one chat question with curl, and stopped. Uses
# share/models/pytiny-target when present, else a generated fixture pack. Each stage's failure stops
# the demo with that stage's exit code.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
bin=${OGAKIT_BUILD:-$top/build}/bin
export PATH="$bin:$PATH"
pack=${1:-}
prompt=${DEMO_PROMPT:-"def fibonacci(n):"}
if [ -z "$pack" ]; then
  if [ -d "$top/share/models/pytiny-target" ]; then
    pack=$top/share/models/pytiny-target
  else
    pack=$("$top/tools/fixture.sh" qwen2 cpu tied tiny)
  fi
fi
work=$(mktemp -d)
server=
trap '[ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$work"' EXIT
step() { printf '\n== %s\n' "$*" >&2; }

step "oga-info $pack"
oga-info "$pack" | jq -c '{flavour, family, importable, layers: .dims.num_layers, hidden: .dims.hidden_size, vocab: .dims.vocab_size, tensors: .tensor_count, refusals: (.refusals|length)}'

step "oga-extract | q4nx-pack -l b8 -o model.q4nx"
oga-extract "$pack" | q4nx-pack -l b8 -o "$work/model.q4nx"
ls -l "$work/model.q4nx" >&2

step "q4nx-verify model.q4nx --pack --all"
q4nx-verify "$work/model.q4nx" --pack "$pack" --all | jq -c '{ok, summary}'

step "npu-forward run -m model.q4nx -n 64 -p \"$prompt\""
npu-forward run -m "$work/model.q4nx" -n 64 -p "$prompt"
echo

# the bundled drafter, when the pack is the bundled target: speculative decoding, measured
draft=$top/share/models/pytiny-draft
if [ "$pack" = "$top/share/models/pytiny-target" ] && [ -d "$draft" ]; then
  step "oga-extract pytiny-draft | q4nx-pack; spec-replay -m model.q4nx -d draft.q4nx -n 64 -k 4"
  oga-extract "$draft" | q4nx-pack -l b8 -o "$work/draft.q4nx"
  spec-replay -m "$work/model.q4nx" -d "$work/draft.q4nx" -n 64 -k 4 -p "$prompt"
  step "spec-replay record -m model.q4nx --tokens 64 | spec-replay -d draft.q4nx -k 1,2,4,7 --measure"
  spec-replay record -m "$work/model.q4nx" --tokens 64 -o "$work/target.json"
  spec-replay -d "$work/draft.q4nx" -k 1,2,4,7 --measure -m "$work/model.q4nx" <"$work/target.json"
fi

# the model behind an OpenAI-compatible server: one chat question with curl, then SIGTERM
step "npu-forward serve -m model.q4nx --port 0; curl /v1/chat/completions; stop"
npu-forward serve -m "$work/model.q4nx" --port 0 --parallel 2 2>"$work/serve.log" &
server=$!
for _ in $(seq 200); do grep -q 'ready:' "$work/serve.log" && break; kill -0 "$server" 2>/dev/null || break; sleep 0.05; done
grep -q 'ready:' "$work/serve.log" || { cat "$work/serve.log" >&2; exit 4; }
port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/serve.log" | head -1)
curl -s -m 60 "http://127.0.0.1:$port/v1/chat/completions" -H 'Content-Type: application/json' \
  -d "$(jq -nc --arg q "${DEMO_QUESTION:-Write a Python function that adds two numbers.}" \
        '{messages: [{role: "user", content: $q}], max_tokens: 48, temperature: 0}')" |
  jq -c '{answer: .choices[0].message.content, finish_reason: .choices[0].finish_reason, usage, predicted_per_second: .timings.predicted_per_second}'
kill -TERM "$server"
wait "$server"
server=
