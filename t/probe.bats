#!/usr/bin/env bats
# tools/oga_pack_probe.sh: the gates in order, one JSON line each, and the first failing gate named
# with its program's exit code.
load helpers
bats_require_minimum_version 1.5.0

setup_file() { export W=$(mktemp -d "${BATS_FILE_TMPDIR:-/tmp}/ogk-probe.XXXXXX"); }
teardown_file() { rm -rf "$W"; }

P=$TOP/tools/oga_pack_probe.sh

@test "a good pack passes import, extract, verify, run, the onnxruntime oracle, serve, health, completion; -o keeps the container" {
  run --separate-stderr "$P" --oracle -l rm -o "$W/kept.q4nx" "$TOP/share/models/pytiny-target"
  if ! npu-forward serve --help >/dev/null 2>&1; then
    # a build without the serve command: the serve gate says so, honestly, with 4
    [ "$status" -eq 4 ]
    [ "$(echo "$output" | jq -s -c '[.[] | [.gate, .ok]] | .[-2:]')" = '[["oracle",true],["serve",false]]' ]
    [[ "$stderr" == *"gate 'serve' failed (exit 4): serve: npu-forward has no serve command"* ]]
    skip "npu-forward has no serve command: the serve, health and completion gates were not reached"
  fi
  [ "$status" -eq 0 ]
  [ "$(echo "$output" | jq -s -c '[.[].gate]')" = '["import","extract","verify","run","oracle","serve","health","completion"]' ]
  [[ "$stderr" == *"all gates passed: import extract verify run oracle serve health completion"* ]]
  [ "$(echo "$output" | jq -s '[.[].ok] | all')" = true ]
  q4nx-verify "$W/kept.q4nx" --pack "$TOP/share/models/pytiny-target" --all >/dev/null
  [ "$(npu-forward info -m "$W/kept.q4nx" | jq -r .layout)" = rm ]
  [ "$(stat -c %a "$W/kept.q4nx")" = 644 ] && [ -z "$(ls -A "$W" | grep '^\.kept')" ] || false # no temp file left beside it
}

@test "a refused pack stops at import with exit 3, and nothing after it runs" {
  for b in amd-npu bits2 truncated-data no-tokenizer; do
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
  run "$P" x 80 81
  [ "$status" -eq 2 ]
  run "$P" "$TOP/share/models/pytiny-target" 80x
  [ "$status" -eq 2 ]
  [[ "$output" == *"PORT 80x"* ]]
  # checked before any gate runs (no JSON line on stdout): a port past 65535, a thread count, -o's place
  run --separate-stderr "$P" "$TOP/share/models/pytiny-target" 70000
  [ "$status" -eq 2 ] && [ -z "$output" ] || false
  run --separate-stderr "$P" -t abc "$TOP/share/models/pytiny-target"
  [ "$status" -eq 2 ] && [ -z "$output" ] || false
  run --separate-stderr "$P" -o "$BATS_TEST_TMPDIR/none/m.q4nx" "$TOP/share/models/pytiny-target"
  [ "$status" -eq 1 ] && [ -z "$output" ] && [[ "$stderr" == *"cannot create a file in"* ]] || false
  run --separate-stderr "$P" -o "$BATS_TEST_TMPDIR" "$TOP/share/models/pytiny-target"
  [ "$status" -eq 2 ] && [[ "$stderr" == *"is a directory"* ]] || false
  # held-out audit: -o naming the pack's own file overwrote it; -o "" kept nothing; -t 2000 passed this
  # check and failed the run gate after the import
  cp -r "$TOP/share/models/pytiny-target" "$W/pk"
  sum=$(md5sum <"$W/pk/model.onnx.data")
  run --separate-stderr "$P" --no-serve -o "$W/pk/model.onnx.data" "$W/pk"
  [ "$status" -eq 2 ] && [ -z "$output" ] && [[ "$stderr" == *"the pack's own model.onnx.data"* ]] || false
  [ "$(md5sum <"$W/pk/model.onnx.data")" = "$sum" ]
  run --separate-stderr "$P" -o "" "$W/pk"
  [ "$status" -eq 2 ] && [ -z "$output" ] || false
  run --separate-stderr "$P" -t 2000 "$W/pk"
  [ "$status" -eq 2 ] && [ -z "$output" ] || false
  run "$P" --help
  [ "$status" -eq 0 ]
  [[ "$output" == *"verify"* && "$output" == *"oracle"* && "$output" == *"health"* ]]
  # only the header comment: no line of the script's code
  [[ "$output" != *"pipefail"* && "$output" != *"top="* && "$output" != *"#"* ]]
  [ -f "$TOP/man/man1/oga_pack_probe.1" ]
  # make install installs the probe and its man page (a dry run)
  make -s -n -C "$TOP" install PREFIX=/usr/local DESTDIR="$W/inst" >"$W/install.txt"
  grep -q 'tools/oga_pack_probe.sh .*/usr/local/bin/oga_pack_probe' "$W/install.txt"
  grep -q 'man/man1/\*.1' "$W/install.txt"
}

# a stand-in npu-forward whose serve command misbehaves as FAKE_SERVE says (exit4 | unhealthy |
# wrong), its other commands the real ones; the fake server writes its pid to $W/fake.pid
fake_serve_bin() {
  mkdir -p "$W/fs/bin"
  for p in "$OGAKIT_BUILD"/bin/*; do ln -sf "$p" "$W/fs/bin/"; done
  rm "$W/fs/bin/npu-forward"
  cat >"$W/fs/serve.js" <<'EOS'
const http = require('http'), fs = require('fs');
const a = process.argv, port = +a[a.indexOf('--port') + 1], mode = process.env.FAKE_SERVE;
if (mode === 'exit4') { console.error('npu-forward: model.q4nx: cannot load (fake)'); process.exit(4); }
fs.writeFileSync(process.env.FAKE_PIDFILE, String(process.pid));
http.createServer((q, r) => {
  let b = ''; q.on('data', (d) => (b += d)); q.on('end', () => {
    if (q.url === '/health') { r.writeHead(mode === 'unhealthy' ? 503 : 200); return r.end('{}'); }
    r.writeHead(200, { 'Content-Type': 'application/json' });
    r.end(JSON.stringify({ choices: [{ text: 'x', tokens: [1, 2, 3], finish_reason: 'length' }] }));
  });
}).listen(port, '127.0.0.1');
setTimeout(() => process.exit(0), 120e3).unref();
EOS
  cat >"$W/fs/bin/npu-forward" <<EOS
#!/usr/bin/env bash
if [ "\$1" = serve ]; then
  [ "\$2" != --help ] || exit 0
  exec node "$W/fs/serve.js" "\$@"
fi
exec "$OGAKIT_BUILD/bin/npu-forward" "\$@"
EOS
  chmod +x "$W/fs/bin/npu-forward"
}

@test "serve gates: init failure exits 4 at serve, no /health 200 exits 5 at health, other ids exit 1 at completion; the server is always killed" {
  fake_serve_bin
  export FAKE_PIDFILE=$W/fake.pid
  run --separate-stderr env OGAKIT_BUILD="$W/fs" FAKE_SERVE=exit4 "$P" "$TOP/share/models/pytiny-target"
  [ "$status" -eq 4 ]
  [ "$(echo "$output" | jq -s -c '[.[].gate]')" = '["import","extract","verify","run","serve"]' ]
  [[ "$stderr" == *"gate 'serve' failed (exit 4)"*"exited with 4"* ]]
  rm -f "$FAKE_PIDFILE"
  run --separate-stderr env OGAKIT_BUILD="$W/fs" FAKE_SERVE=unhealthy OGK_PROBE_HEALTH_S=2 "$P" "$TOP/share/models/pytiny-target"
  [ "$status" -eq 5 ]
  [ "$(echo "$output" | jq -s -c '[.[] | [.gate, .ok]] | .[-2:]')" = '[["serve",true],["health",false]]' ]
  [[ "$stderr" == *"gate 'health' failed (exit 5)"*"within 2 s"* ]]
  ! kill -0 "$(cat "$FAKE_PIDFILE")" 2>/dev/null || false
  rm -f "$FAKE_PIDFILE"
  run --separate-stderr env OGAKIT_BUILD="$W/fs" FAKE_SERVE=wrong "$P" "$TOP/share/models/pytiny-target" \
    "$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  [ "$status" -eq 1 ]
  [ "$(echo "$output" | jq -s -c '[.[] | [.gate, .ok]] | .[-3:]')" = '[["serve",true],["health",true],["completion",false]]' ]
  [[ "$stderr" == *"gate 'completion' failed (exit 1)"*"not npu-forward run's"* ]]
  ! kill -0 "$(cat "$FAKE_PIDFILE")" 2>/dev/null || false
}
