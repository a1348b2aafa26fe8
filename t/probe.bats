#!/usr/bin/env bats
# tools/oga_pack_probe.sh: the gates in order, one JSON line each, and the first failing gate named
# with its program's exit code.
load helpers
bats_require_minimum_version 1.5.0

setup_file() { export W=$(mktemp -d "${BATS_FILE_TMPDIR:-/tmp}/ogk-probe.XXXXXX"); }
teardown_file() { rm -rf "$W"; }

P=$TOP/tools/oga_pack_probe.sh

@test "a good pack passes import, extract, verify, run and the onnxruntime oracle; -o keeps the container" {
  run "$P" --oracle -l rm -o "$W/kept.q4nx" "$TOP/share/models/pytiny-target"
  [ "$status" -eq 0 ]
  [ "$(echo "$output" | jq -s -c '[.[].gate]')" = '["import","extract","verify","run","oracle"]' ]
  [ "$(echo "$output" | jq -s '[.[].ok] | all')" = true ]
  q4nx-verify "$W/kept.q4nx" --pack "$TOP/share/models/pytiny-target" --all >/dev/null
  [ "$(npu-forward info -m "$W/kept.q4nx" | jq -r .layout)" = rm ]
}

@test "a refused pack stops at import with exit 3, and nothing after it runs" {
  for b in amd-npu bits8 truncated-data no-tokenizer; do
    run --separate-stderr "$P" "$(fixture bad "$b")"
    [ "$status" -eq 3 ]
    [ "$(echo "$output" | jq -s -c '[.[].gate]')" = '["import"]' ]
    [[ "$stderr" == *"gate 'import' failed (exit 3)"* ]]
  done
}

@test "a container that does not match its pack fails verify with exit 1" {
  # a q4nx-pack that flips one byte of the payload it writes (the container's CRCs catch it)
  mkdir -p "$W/fake/bin"
  for p in "$OGAKIT_BUILD"/bin/*; do ln -sf "$p" "$W/fake/bin/"; done
  rm "$W/fake/bin/q4nx-pack"
  cat >"$W/fake/bin/q4nx-pack" <<EOS
#!/usr/bin/env bash
"$OGAKIT_BUILD/bin/q4nx-pack" "\$@" || exit
o=\${@: -1}
printf '\xff' | dd of="\$o" bs=1 seek=\$((\$(stat -c %s "\$o") / 2)) conv=notrunc 2>/dev/null
EOS
  chmod +x "$W/fake/bin/q4nx-pack"
  run --separate-stderr env OGAKIT_BUILD="$W/fake" "$P" "$(fixture qwen2 cpu tied tiny 0)"
  [ "$status" -eq 1 ]
  [ "$(echo "$output" | jq -s -c '[.[] | [.gate, .ok]]')" = '[["import",true],["extract",true],["verify",false]]' ]
  [[ "$stderr" == *"gate 'verify' failed (exit 1)"* ]]
}

@test "a prompt the model cannot run fails the run gate with npu-forward's code" {
  run --separate-stderr "$P" -p "" "$(fixture llama amd untied tiny 0)"
  [ "$status" -eq 3 ]
  [ "$(echo "$output" | jq -s -c '[.[].gate]')" = '["import","extract","verify","run"]' ]
  [[ "$stderr" == *"gate 'run' failed (exit 3)"* ]]
}

@test "usage errors exit 2; --help prints the gates" {
  run "$P"
  [ "$status" -eq 2 ]
  run "$P" -l xx "$TOP/share/models/pytiny-target"
  [ "$status" -eq 2 ]
  run "$P" --frobnicate x
  [ "$status" -eq 2 ]
  run "$P" --help
  [ "$status" -eq 0 ]
  [[ "$output" == *"verify"* && "$output" == *"oracle"* ]]
}
