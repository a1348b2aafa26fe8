#!/usr/bin/env bats
# tools/oga_pack_probe.sh: the gates in order, one JSON line each, and the first failing gate named
# with its program's exit code.
load helpers
bats_require_minimum_version 1.5.0

setup_file() { export W=$(mktemp -d "${BATS_FILE_TMPDIR:-/tmp}/ogk-probe.XXXXXX"); }
# the probe is a shell script: what it runs of ours (oga-info, oga-extract | q4nx-pack, q4nx-verify, npu-forward
# run and serve on a small pack) runs under the sanitizers in those programs' own files
setup() { skip_under_san "tools/oga_pack_probe.sh is a script; its programs' paths run under SAN in their own test files"; }
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
if (process.env.FAKE_DEAF) process.on('SIGTERM', () => {}); // a server that does not stop on SIGTERM
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

@test "a server that ignores SIGTERM is killed all the same, and the probe ends in time" {
  fake_serve_bin
  export FAKE_PIDFILE=$W/fake-deaf.pid
  rm -f "$FAKE_PIDFILE"
  # held-out audit: the probe waited for the server for ever after its SIGTERM
  run --separate-stderr timeout 40 env OGAKIT_BUILD="$W/fs" FAKE_SERVE=unhealthy FAKE_DEAF=1 OGK_PROBE_HEALTH_S=1 \
    "$P" "$TOP/share/models/pytiny-target"
  fpid=$(cat "$FAKE_PIDFILE")
  kill -0 "$fpid" 2>/dev/null && { kill -KILL "$fpid"; false; } || true
  [ "$status" -eq 5 ]
  [[ "$stderr" == *"gate 'health' failed (exit 5)"* ]]
}

@test "a port another server holds fails the serve gate with 4 (its answers are not taken for ours)" {
  lport=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  node -e 'require("http").createServer((q, r) => { r.writeHead(200); r.end("{}"); }).listen(+process.argv[1], "127.0.0.1");
    setTimeout(() => process.exit(0), 60e3)' "$lport" &
  hpid=$!
  for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$lport/" && break; sleep 0.05; done
  run --separate-stderr "$P" "$TOP/share/models/pytiny-target" "$lport"
  kill "$hpid"
  [ "$status" -eq 4 ]
  [ "$(echo "$output" | jq -s -c '[.[] | [.gate, .ok]] | .[-2:]')" = '[["run",true],["serve",false]]' ]
  [[ "$stderr" == *"gate 'serve' failed (exit 4)"*"127.0.0.1:$lport is already in use"* ]]
}

@test "pack paths: a leading dash after --, spaces, unicode, a trailing slash, a symbolic link, a relative path" {
  mkdir -p "$W/paths/d ü"
  cp -r "$TOP/share/models/pytiny-target" "$W/paths/-pk"
  ln -sfn "$W/paths/-pk" "$W/paths/d ü/l ink"
  cd "$W/paths"
  # held-out audit: -pk reached oga-info as an option (gate import failed with 2)
  run --separate-stderr "$P" --no-serve -- -pk
  [ "$status" -eq 0 ] && [[ "$stderr" == *"all gates passed: import extract verify run" ]] || false
  run --separate-stderr "$P" --no-serve "d ü/l ink/"
  [ "$status" -eq 0 ] && [[ "$stderr" == *"all gates passed"* ]] || false
}

@test "TMPDIR: an unusable one exits 4 before any gate (the gates wrote into /), one with spaces works and is left empty" {
  run --separate-stderr env TMPDIR="$W/no such dir" "$P" --no-serve "$TOP/share/models/pytiny-target"
  [ "$status" -eq 4 ] && [ -z "$output" ] && [[ "$stderr" == *"cannot create a work directory in $W/no such dir"* ]] || false
  mkdir -p "$W/t m p"
  run --separate-stderr env TMPDIR="$W/t m p" "$P" --no-serve "$TOP/share/models/pytiny-target"
  [ "$status" -eq 0 ] && [ -z "$(ls -A "$W/t m p")" ] || false
}

@test "OGK_PROBE_START_S / OGK_PROBE_HEALTH_S that are not whole seconds are usage errors (the health gate was skipped and all passed)" {
  for e in OGK_PROBE_HEALTH_S=1.5 OGK_PROBE_START_S=abc OGK_PROBE_HEALTH_S=-1; do
    run --separate-stderr env "$e" "$P" "$TOP/share/models/pytiny-target"
    [ "$status" -eq 2 ] && [ -z "$output" ] && [[ "$stderr" == *"${e%%=*}"*"whole seconds"* ]] || false
  done
}

@test "extract: q4nx-pack's refusal is the gate's code (not oga-extract's broken pipe, 1)" {
  mkdir -p "$W/fp/bin"
  for p in "$OGAKIT_BUILD"/bin/*; do ln -sf "$p" "$W/fp/bin/"; done
  rm "$W/fp/bin/q4nx-pack"
  printf '#!/bin/sh\necho "q4nx-pack: corrupt stream (fake)" >&2\nexit 3\n' >"$W/fp/bin/q4nx-pack"
  chmod +x "$W/fp/bin/q4nx-pack"
  run --separate-stderr env OGAKIT_BUILD="$W/fp" "$P" "$TOP/share/models/pytiny-target"
  [ "$status" -eq 3 ]
  [ "$(echo "$output" | jq -s -c '[.[] | [.gate, .ok]]')" = '[["import",true],["extract",false]]' ]
  [[ "$stderr" == *"gate 'extract' failed (exit 3)"*"corrupt stream (fake)"* ]]
}

@test "standard output that cannot take the gates' lines (a full disk, a closed pipe): exit 1, named, no gate after it (it was 0, all passed)" {
  run bash -c "'$P' --no-serve '$TOP/share/models/pytiny-target' >/dev/full"
  [ "$status" = 1 ] && [[ "$output" == *"standard output: write failed (the 'import' gate's line)"* ]] || false
  [[ "$output" != *"all gates passed"* ]]
  run bash -c "'$P' --no-serve '$TOP/share/models/pytiny-target' | head -c 10 >/dev/null; echo \${PIPESTATUS[0]}"
  [ "${lines[-1]}" = 1 ] && [[ "$output" == *"standard output: write failed"* ]] || false
}

@test "a missing jq, curl or program is named with exit 4 before any gate, and -o's temp file is not left" {
  mkdir -p "$W/nojq" "$W/nocurl" "$W/out"
  # every program of /usr/bin and /bin linked in (one ln per directory: a fork per program took 100 s), less one
  for d in /usr/bin /bin; do
    [ -L "$d" ] || { ln -sf -t "$W/nojq" "$d"/*; ln -sf -t "$W/nocurl" "$d"/*; }
  done
  rm -f "$W/nojq/jq" "$W/nocurl/curl"
  [ -x "$W/nojq/curl" ] && [ -x "$W/nocurl/jq" ] && [ ! -e "$W/nojq/jq" ] && [ ! -e "$W/nocurl/curl" ] || false
  run --separate-stderr env PATH="$W/nojq" "$P" -o "$W/out/k.q4nx" "$TOP/share/models/pytiny-target"
  [ "$status" -eq 4 ] && [ -z "$output" ] && [[ "$stderr" == *"jq is required"* ]] || false
  [ -z "$(ls -A "$W/out")" ]
  run --separate-stderr env PATH="$W/nocurl" OGK_PROBE_START_S=2 "$P" "$TOP/share/models/pytiny-target"
  [ "$status" -eq 4 ] && [ -z "$output" ] && [[ "$stderr" == *"curl is required"* ]] || false
  run --separate-stderr env PATH="$W/nocurl" "$P" --no-serve "$TOP/share/models/pytiny-target" # no server, no curl needed
  [ "$status" -eq 0 ]
  run --separate-stderr env OGAKIT_BUILD="$W/none" PATH="$W/nocurl" "$P" --no-serve "$TOP/share/models/pytiny-target"
  [ "$status" -eq 4 ] && [ -z "$output" ] && [[ "$stderr" == *"oga-info is required"* ]] || false
}
