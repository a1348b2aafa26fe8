#!/usr/bin/env bats
# JSON Schema "pattern" in the JSON mode (lib/serve/jgre.c through lib/serve/jsongate.c) against node's
# RegExp (ECMA-262, which JSON Schema names, with the u flag: code points): the same verdict on generated
# strings, and every string the gate lets a random walk close matches. The walks and the verdicts come
# from the unit test's modes (build/t/serve_jsongate --pattern-walks / --pattern-match).
load helpers
bats_require_minimum_version 1.5.0

JG=$OGAKIT_BUILD/t/serve_jsongate

# patterns as a JSON array (each valid in node with the u flag, and in ours)
PATTERNS='["^[A-Z]{2}-[0-9]{3}$", "x(yz)?\\d", "^(?:a|bc)*$", "^\\w+@\\w+\\.(com|org)$", "^[^\\s\"]{1,4}$",
  "^\\u00e9|\\uD83D\\uDE00$", "^.{3}$", "^[\\d-]+$", "abc", "^\\$\\d+(\\.\\d{2})?$", "^(?<y>\\d{4})-\\d\\d$",
  "^[a-c]*?x+?$", "", "^(a|b)+c?$|^z", "^[^a-z]*$", "^\\S+\\s\\S+$", "[.]{2}|^-", "^(ab){2,3}$", "^\\d{3,}$",
  "^[\\u0041-\\u005A\\x61]+$", "^(?:\\+?1[-. ]?)?\\(?\\d{3}\\)?[-. ]?\\d{3}[-. ]?\\d{4}$", "^[^@]+@[^@]+\\.[^@]+$",
  "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", "^(\\d{4})-(0[1-9]|1[0-2])-(0[1-9]|[12]\\d|3[01])$"]'

setup_file() {
  [ -x "$JG" ] || { echo "not built: $JG" >&2; return 1; }
  export W=$(mktemp -d "${BATS_FILE_TMPDIR:-/tmp}/ogk-jp.XXXXXX")
  echo "$PATTERNS" > "$W/patterns.json"
  # 300 random walks through {"s": ...} per pattern: the values of those that closed the string (exit 1 and
  # a file named dead<k> at a dead end)
  local k pats
  patterns
  for ((k = 0; k < ${#PATS[@]}; k++)); do
    "$JG" --pattern-walks "${PATS[$k]}" 300 > "$W/walk$k.jsonl" 2> "$W/walk$k.err" ||
      cp "$W/walk$k.err" "$W/dead$k"
  done
}
# patterns: PATS, the patterns as a bash array (one jq, NUL-separated; a jq per pattern before)
patterns() { mapfile -d '' -t PATS < <(jq -j '.[] | (., "\u0000")' <<<"$PATTERNS"); [ "${#PATS[@]}" -gt 20 ]; }

teardown_file() { rm -rf "$W"; }

@test "pattern: the automaton's verdict equals node's RegExp (u flag) on generated strings, every pattern" {
  # strings: random ones over an alphabet of the patterns' characters and others (astral, escapes, spaces),
  # strings built to match and those the walks closed, and their near misses (each with one character
  # changed, dropped or doubled); node decides which match
  node - "$W/patterns.json" "$W" <<'EOF'
const fs = require('fs');
const [pf, w] = process.argv.slice(2);
const pats = JSON.parse(fs.readFileSync(pf, 'utf8'));
let seed = 7;
const rnd = (n) => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n; };
const alpha = [...'abcxyzABZ0129-_.@$ ()+e\u00e9\u{1F600}"\\\t\n\u00a0'];
const built = ['AB-123', 'xyz7', 'abcbca', 'me@host.com', 'q@w.org', 'a!?', '\u00e9t\u00e9', 'ok\u{1F600}', 'a\nb',
  '12-3', 'xxabcxx', '$12.50', '$7', '2024-05', 'aacx', 'abababab', 'zzz', 'ABC', 'a b', '..', '-x', 'abab', '1234',
  'AZa', '+1 (555) 123-4567', '555.123.4567', 'x@y.z', '0123abcd-0a1b-2c3d-4e5f-00112233aabb', '2024-02-29',
  '2024-13-01', '1999-12-31'];
for (let i = 0; i < pats.length; i++) {
  const re = new RegExp(pats[i], 'u');
  const ss = new Set();
  for (let k = 0; k < 1500; k++) {
    let s = '';
    for (let n = rnd(9); n > 0; n--) s += alpha[rnd(alpha.length)];
    ss.add(s);
  }
  const walked = fs.readFileSync(`${w}/walk${i}.jsonl`, 'utf8').split('\n').filter((l) => l).map(JSON.parse);
  for (const b of built.concat(walked.slice(0, 60))) {
    const cs = [...b];
    ss.add(b);
    for (let j = 0; j < cs.length; j++) {
      ss.add(cs.slice(0, j).join('') + cs.slice(j + 1).join(''));
      ss.add(cs.slice(0, j + 1).join('') + cs.slice(j).join(''));
      ss.add(cs.slice(0, j).join('') + alpha[rnd(alpha.length)] + cs.slice(j + 1).join(''));
    }
  }
  const list = [...ss];
  fs.writeFileSync(`${w}/s${i}.jsonl`, list.map((s) => JSON.stringify(s)).join('\n') + '\n');
  fs.writeFileSync(`${w}/want${i}`, list.map((s) => (re.test(s) ? 1 : 0)).join('\n') + '\n');
}
EOF
  local n pi p pos
  patterns
  n=${#PATS[@]}
  for ((pi = 0; pi < n; pi++)); do
    p=${PATS[$pi]}
    run -0 "$JG" --pattern-match "$p" < "$W/s$pi.jsonl"
    echo "$output" > "$W/got$pi"
    if ! cmp -s "$W/want$pi" "$W/got$pi"; then
      echo "pattern $p: differs from node on:"
      paste "$W/s$pi.jsonl" "$W/want$pi" "$W/got$pi" | awk -F'\t' '$2 != $3' | head -5
      return 1
    fi
    pos=$(grep -c '^1$' "$W/want$pi" || true)
    echo "# $p: $(wc -l < "$W/want$pi") strings, $pos match" >&3
  done
  # the comparison means something: every pattern has strings on both sides
  for ((pi = 0; pi < n; pi++)); do
    [ "${PATS[$pi]}" = "" ] && continue
    grep -q '^1$' "$W/want$pi" && grep -q '^0$' "$W/want$pi" || false
  done
}

@test "pattern: every string a random walk through the JSON mode closes matches (node's RegExp), and no walk gets stuck" {
  local n pi
  patterns
  n=${#PATS[@]}
  for ((pi = 0; pi < n; pi++)); do
    [ ! -e "$W/dead$pi" ] || { echo "pattern ${PATS[$pi]}: $(cat "$W/dead$pi")"; return 1; }
  done
  # one node for every pattern's walks (a node each before)
  run node -e '
    const fs = require("fs");
    const pats = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
    let failed = 0;
    pats.forEach((p, i) => {
      const re = new RegExp(p, "u");
      const ended = fs.readFileSync(`${process.argv[2]}/walk${i}.jsonl`, "utf8").split("\n").filter((l) => l).map(JSON.parse);
      const bad = ended.filter((s) => !re.test(s));
      if (bad.length) { console.log("pattern " + p + ": no match:", JSON.stringify(bad.slice(0, 5))); failed++; }
      else console.log("# " + p + ": " + ended.length + " of 300 walks closed the string, all match");
    });
    process.exit(failed ? 1 : 0);' "$W/patterns.json" "$W"
  echo "$output"
  [ "$status" -eq 0 ]
  [ "$(grep -c '^# .*all match$' <<<"$output")" -eq "$n" ]
  echo "$output" >&3
}

# "format": the formats the JSON mode writes as patterns (lib/serve/jsongate.c FORMATS); node checks every
# closed walk with its own rules, written here from the RFCs, not from our expressions
@test "format: date, time, date-time, uuid, ipv4, email: every string a walk closes is valid by node's own checks" {
  local f
  for f in date time date-time uuid ipv4 email; do
    run -0 "$JG" --format-walks $f 400
    printf '%s\n' "$output" > "$W/fmt-$f.jsonl"
  done
  # one node judges every format's walks (a node each before)
  run -0 node -e '
    const fs = require("fs"), net = require("net");
    let failed = 0;
    for (const f of process.argv.slice(2)) {
      const time = (s) => {
        const m = /^(\d\d):(\d\d):(\d\d)(\.\d+)?(Z|z|[+-](\d\d):(\d\d))$/.exec(s);
        return !!m && +m[1] < 24 && +m[2] < 60 && +m[3] < 60 && (m[6] === undefined || (+m[6] < 24 && +m[7] < 60));
      };
      // a calendar date: the UTC day it names prints back as itself (month lengths, leap years)
      const date = (s) => /^\d{4}-\d\d-\d\d$/.test(s) && !isNaN(Date.parse(s + "T00:00:00Z")) &&
        new Date(s + "T00:00:00Z").toISOString().slice(0, 10) === s;
      const label = "[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?";
      const ok = {
        date,
        time,
        "date-time": (s) => /^.{10}[Tt]/.test(s) && date(s.slice(0, 10)) && time(s.slice(11)) && !isNaN(Date.parse(s)),
        uuid: (s) => /^[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}$/i.test(s),
        ipv4: (s) => net.isIPv4(s) && s.split(".").every((o) => String(Number(o)) === o),
        // RFC 5322 dot-atom local part, a domain of two labels or more
        email: (s) => new RegExp("^[A-Za-z0-9!#$%&\x27*+/=?^_`{|}~-]+(\\.[A-Za-z0-9!#$%&\x27*+/=?^_`{|}~-]+)*@" +
          label + "(\\." + label + ")+$").test(s),
      }[f];
      const all = fs.readFileSync(`${process.argv[1]}/fmt-${f}.jsonl`, "utf8").split("\n").filter((l) => l).map(JSON.parse);
      const bad = all.filter((s) => !ok(s)), distinct = new Set(all).size;
      if (bad.length || all.length < 100 || distinct < all.length / 2) {
        console.log("format " + f + ": closed", all.length, "distinct", distinct, "invalid:", JSON.stringify(bad.slice(0, 5)));
        failed++;
      } else console.log("# format " + f + ": " + all.length + " closed, " + distinct + " distinct, all valid");
    }
    process.exit(failed ? 1 : 0);' "$W" date time date-time uuid ipv4 email
  echo "$output" >&3
  [ "$(grep -c '^# format .* all valid$' <<<"$output")" -eq 6 ]
}

# the schema keywords of dicts, tuples and composition (lib/serve/jsongate.c map_node, array_node,
# allof_merge, unions whose alternatives begin alike: jg_gate): every document a random walk through the schema completes is valid by ajv (the JSON
# Schema validator, draft 2020-12, or draft-07 for the items list), and the walks reach their variety
@test "schema: dicts, tuples, allOf, nullable, unions: every document a walk completes is valid by ajv" {
  local schemas="$W/schemas.jsonl" k=0 line
  cat > "$schemas" <<'SCHEMAS'
{"d":"2020","s":{"type":"object","additionalProperties":{"type":"integer","minimum":-5,"maximum":99},"maxProperties":3,"minProperties":1}}
{"d":"2020","s":{"type":"object","properties":{"tags":{"type":"object","additionalProperties":{"type":"array","items":{"type":"string","maxLength":3},"maxItems":2}}},"required":["tags"]}}
{"d":"2020","s":{"type":"object","patternProperties":{"^[a-c]{1,3}$":{"type":"boolean"}},"additionalProperties":false}}
{"d":"2020","s":{"type":"object","propertyNames":{"enum":["alpha","beta","gamma"]},"additionalProperties":{"enum":[1,"x",null]}}}
{"d":"2020","s":{"type":"object","propertyNames":{"pattern":"^k[0-9]$"},"maxProperties":2}}
{"d":"2020","s":{"type":"object","properties":{"t":{"type":"array","prefixItems":[{"type":"integer"},{"type":"string","maxLength":4},{"enum":["a","b"]}],"items":false,"minItems":2}},"required":["t"]}}
{"d":"2020","s":{"type":"object","properties":{"t":{"type":"array","prefixItems":[{"type":"boolean"}],"items":{"type":"integer","minimum":0,"maximum":9},"maxItems":4}},"required":["t"]}}
{"d":"07","s":{"type":"object","properties":{"t":{"type":"array","items":[{"type":"string","maxLength":2},{"type":"number","minimum":0,"maximum":1}],"additionalItems":false}},"required":["t"]}}
{"d":"2020","s":{"type":"object","properties":{"pet":{"allOf":[{"$ref":"#/$defs/Pet"}],"description":"the pet"},"n":{"allOf":[{"type":"string","maxLength":3},{"minLength":2}]}},"required":["pet","n"],"$defs":{"Base":{"type":"object","properties":{"id":{"type":"integer","minimum":0,"maximum":9}},"required":["id"]},"Pet":{"allOf":[{"$ref":"#/$defs/Base"},{"type":"object","properties":{"name":{"type":"string","maxLength":4},"kind":{"enum":["cat","dog"]}},"required":["name"]}]}}}}
{"d":"2020","s":{"allOf":[{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string","maxLength":2}},"additionalProperties":false},{"type":"object","properties":{"a":{"minimum":0,"maximum":5},"c":{"type":"boolean"}},"required":["a"]}]}}
{"d":"2020","s":{"type":"object","properties":{"m":{"type":"integer","nullable":true},"o":{"type":"object","properties":{"x":{"type":"string","maxLength":2}},"additionalProperties":true,"nullable":true},"u":{"type":"array","items":{"type":"integer"},"uniqueItems":true,"maxItems":1}},"required":["m","o","u"]}}
{"d":"2020","s":{"type":"object","properties":{"pets":{"type":"array","items":{"anyOf":[{"type":"object","properties":{"kind":{"const":"cat"},"lives":{"type":"integer","minimum":0,"maximum":9}},"required":["kind","lives"],"additionalProperties":false},{"type":"object","properties":{"kind":{"const":"dog"},"good":{"type":"boolean"}},"required":["kind","good"],"additionalProperties":false},{"type":"object","properties":{"kind":{"type":"string","maxLength":3}},"required":["kind"],"additionalProperties":false}]},"maxItems":3},"n":{"anyOf":[{"type":"integer","minimum":0,"maximum":9},{"type":"number","minimum":100,"maximum":200}]},"m":{"anyOf":[{"enum":["auto","none"]},{"type":"string","maxLength":2}]}},"required":["pets","n","m"],"additionalProperties":false}}
{"d":"2020","s":{"type":"array","items":{"oneOf":[{"$ref":"#/$defs/A"},{"$ref":"#/$defs/B"}]},"minItems":1,"maxItems":3,"$defs":{"A":{"type":"object","properties":{"t":{"const":"a"},"x":{"type":"integer","minimum":0,"maximum":99}},"required":["t","x"],"additionalProperties":false},"B":{"type":"object","properties":{"t":{"const":"b"},"y":{"anyOf":[{"type":"string","maxLength":3},{"type":"null"}]}},"required":["t"],"additionalProperties":false}}}}
{"d":"2020","s":{"type":"object","additionalProperties":{"type":"integer","minimum":0,"maximum":9},"required":["a","b"]}}
{"d":"2020","s":{"title":"Owner","type":"object","properties":{"name":{"title":"Name","type":"string","maxLength":4},"pet":{"title":"Pet","discriminator":{"propertyName":"kind","mapping":{"cat":"#/$defs/Cat","dog":"#/$defs/Dog"}},"oneOf":[{"$ref":"#/$defs/Cat"},{"$ref":"#/$defs/Dog"}]}},"required":["name","pet"],"$defs":{"Cat":{"title":"Cat","type":"object","properties":{"kind":{"const":"cat","title":"Kind","type":"string"},"lives":{"title":"Lives","type":"integer","minimum":0,"maximum":9}},"required":["kind","lives"]},"Dog":{"title":"Dog","type":"object","properties":{"kind":{"const":"dog","title":"Kind","type":"string"},"good":{"title":"Good","type":"boolean"}},"required":["kind","good"]}}}}
SCHEMAS
  while IFS= read -r line; do # (the schemas by one jq, not one each)
    run -0 "$JG" --schema-walks "$line" 300 160
    printf '%s\n' "$output" > "$W/docs$k.jsonl"
    k=$((k + 1))
  done < <(jq -c .s "$schemas")
  [ "$k" -eq "$(wc -l <"$schemas")" ]
  run -0 node -e '
    const fs = require("fs");
    const Ajv = require(process.env.TOP + "/.cache/node/node_modules/ajv").default;
    const Ajv2020 = require(process.env.TOP + "/.cache/node/node_modules/ajv/dist/2020").default;
    // OpenAPI nullable (ajv knows the keyword; strict off keeps it from refusing other annotations)
    const v = {"07": new Ajv({strict: false}), "2020": new Ajv2020({strict: false})};
    const lines = fs.readFileSync(process.argv[1], "utf8").split("\n").filter((l) => l).map(JSON.parse);
    let bad = 0;
    lines.forEach((l, k) => {
      const check = v[l.d].compile(l.s);
      const docs = fs.readFileSync(`${process.argv[2]}/docs${k}.jsonl`, "utf8").split("\n").filter((x) => x);
      const invalid = docs.filter((d) => !check(JSON.parse(d)));
      const distinct = new Set(docs).size;
      console.log(`# schema ${k}: ${docs.length} documents, ${distinct} distinct, ${invalid.length} invalid`);
      if (invalid.length || docs.length < 150 || distinct < 20) {
        bad++;
        console.log("  schema", JSON.stringify(l.s), "invalid:", invalid.slice(0, 3).join(" | "));
      }
    });
    process.exit(bad ? 1 : 0);' "$schemas" "$W"
  echo "$output" | sed 's/^/# /' >&3
}
