#!/usr/bin/env node
'use strict';
/*
 * tok-golden.js - the tokenizer / chat template oracle: @huggingface/tokenizers and @huggingface/jinja
 * (from .cache/node/node_modules) produce the expected values that t/tok.bats compares ogakit against.
 *
 * Usage (input on stdin, one JSON value per line; output one JSON value per line):
 *   node tools/tok-golden.js encode DIR [--no-special]   JSON strings -> JSON arrays of ids
 *   node tools/tok-golden.js decode DIR [--skip-special]  JSON arrays of ids -> JSON strings
 *   node tools/tok-golden.js chat (DIR | --template FILE [--template FILE...] [--bos S] [--eos S])
 *        conversations ({"messages": [...], ...} or [...]) -> JSON strings (the rendered prompt);
 *        bos_token / eos_token come from DIR/tokenizer_config.json, as ogakit does. Several templates:
 *        each over every conversation in turn (template-major), one process for all; a template
 *        that does not parse then gives {"error": ...} on each of its lines.
 *   node tools/tok-golden.js bench DIR FILE REPS          encode FILE line by line REPS times; prints
 *        {"bytes":..,"seconds":..,"mb_per_s":..}
 *   node tools/tok-golden.js compare EXPECTED ACTUAL      JSONL files, value by value; prints the first
 *        difference and exits 1 (0 when identical)
 * DIR holds tokenizer.json and tokenizer_config.json. Exit status: 0 ok, 1 compare found a difference,
 * 2 usage, 3 unreadable input.
 */
const fs = require('fs');
const path = require('path');

const TOP = path.resolve(__dirname, '..');
const NM = path.join(TOP, '.cache/node/node_modules');

function die(msg, code) {
  process.stderr.write('tok-golden: ' + msg + '\n');
  process.exit(code);
}

function lines(text) {
  const out = text.split('\n');
  if (out.length && out[out.length - 1] === '') out.pop();
  return out;
}

function loadTokenizer(dir) {
  const { Tokenizer } = require(path.join(NM, '@huggingface/tokenizers/dist/tokenizers.cjs'));
  let tj, tc = {};
  try {
    tj = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer.json'), 'utf8'));
    const cfg = path.join(dir, 'tokenizer_config.json');
    if (fs.existsSync(cfg)) tc = JSON.parse(fs.readFileSync(cfg, 'utf8'));
  } catch (e) {
    die(dir + ': ' + e.message, 3);
  }
  return { tok: new Tokenizer(tj, tc), config: tc };
}

function tokenString(v) {
  if (v && typeof v === 'object') v = v.content;
  return typeof v === 'string' ? v : undefined;
}

const argv = process.argv.slice(2);
const cmd = argv[0];
const has = (flag) => argv.includes(flag);
const opt = (flag) => {
  const i = argv.indexOf(flag);
  return i >= 0 ? argv[i + 1] : undefined;
};
const stdinLines = () => lines(fs.readFileSync(0, 'utf8'));
const out = [];

if (cmd === 'encode') {
  const { tok } = loadTokenizer(argv[1]);
  const add = !has('--no-special');
  for (const l of stdinLines()) out.push(JSON.stringify(tok.encode(JSON.parse(l), { add_special_tokens: add }).ids));
} else if (cmd === 'decode') {
  const { tok } = loadTokenizer(argv[1]);
  const skip = has('--skip-special');
  for (const l of stdinLines()) {
    const ids = JSON.parse(l);
    out.push(JSON.stringify(ids.length ? tok.decode(ids, { skip_special_tokens: skip }) : ''));
  }
} else if (cmd === 'chat') {
  const { Template } = require(path.join(NM, '@huggingface/jinja/dist/index.cjs'));
  // each source: its text, or the error that stops it (a template that does not parse)
  const sources = [];
  let bos, eos;
  if (opt('--template')) {
    argv.forEach((a, i) => { if (a === '--template') sources.push(fs.readFileSync(argv[i + 1], 'utf8')); });
    bos = opt('--bos');
    eos = opt('--eos');
  } else {
    const { config } = loadTokenizer(argv[1]);
    let src = config.chat_template;
    if (Array.isArray(src)) src = (src.find((x) => x.name === 'default') || {}).template;
    if (typeof src !== 'string') die(argv[1] + ': no chat_template', 3);
    sources.push(src);
    bos = tokenString(config.bos_token);
    eos = tokenString(config.eos_token);
  }
  const convs = stdinLines();
  for (const src of sources) {
    let tpl, perr;
    if (sources.length === 1) tpl = new Template(src);
    else {
      try {
        tpl = new Template(src);
      } catch (e) {
        perr = { error: String(e.message || e) };
      }
    }
    for (const l of convs) {
      let v = JSON.parse(l);
      if (Array.isArray(v)) v = { messages: v };
      if (v.bos_token === undefined && bos !== undefined) v.bos_token = bos;
      if (v.eos_token === undefined && eos !== undefined) v.eos_token = eos;
      let r = perr;
      if (!perr) {
        try {
          r = tpl.render(v);
        } catch (e) {
          r = { error: String(e.message || e) };
        }
      }
      out.push(JSON.stringify(r));
    }
  }
} else if (cmd === 'bench') {
  const { tok } = loadTokenizer(argv[1]);
  const text = fs.readFileSync(argv[2], 'utf8');
  const reps = parseInt(argv[3] || '3', 10);
  const ls = lines(text);
  const t0 = process.hrtime.bigint();
  for (let r = 0; r < reps; r++) for (const l of ls) tok.encode(l);
  const dt = Number(process.hrtime.bigint() - t0) / 1e9;
  const bytes = Buffer.byteLength(text);
  out.push(JSON.stringify({ bytes, reps, seconds: dt, mb_per_s: (bytes * reps) / dt / 1e6 }));
} else if (cmd === 'compare') {
  const a = lines(fs.readFileSync(argv[1], 'utf8'));
  const b = lines(fs.readFileSync(argv[2], 'utf8'));
  const n = Math.max(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a[i] === undefined ? undefined : JSON.stringify(JSON.parse(a[i]));
    const y = b[i] === undefined ? undefined : JSON.stringify(JSON.parse(b[i]));
    if (x !== y) {
      process.stdout.write(`line ${i + 1} differs\n  expected: ${x}\n  actual:   ${y}\n`);
      process.exit(1);
    }
  }
  out.push(`${n} identical`);
} else {
  die('usage: tok-golden.js encode|decode|chat|bench|compare ... (see the header)', 2);
}
process.stdout.write(out.join('\n') + (out.length ? '\n' : ''));
