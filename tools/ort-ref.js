#!/usr/bin/env node
'use strict';
/*
 * ort-ref.js - the onnxruntime oracle: runs an OGA pack's decoder (model.onnx) in
 * onnxruntime-node 1.30 (CPU EP) with a real KV-cache loop and prints JSON on stdout.
 *
 * Usage:
 *   node tools/ort-ref.js PACK generate --ids '[1,2,3]' [-n 32] [--topk K | --no-logits]
 *       Greedy decoding: one prefill run over the prompt, then one token per run with
 *       past_key_values fed back from present.*; attention_mask all ones [1, total],
 *       position_ids = positions (when the graph has that input). Stops after N new tokens
 *       (eos is not a stop: the count is exact). Output:
 *       {"mode":"generate","feed":"prefill+step","prompt_ids":[..],"ids":[new ids],
 *        "logits":[[V floats] per new token]}  (logits that chose ids[i]) or with --topk:
 *        "topk":[{"ids":[K],"logits":[K],"lse":x}, ...].
 *   node tools/ort-ref.js PACK teacher (--ids JSON | --ids-file F) [--feed prefill|step] [--topk K]
 *       Teacher forcing: feeds the given ids and records logits at every position
 *       (logits[i] predicts ids[i+1]). --feed prefill (default) runs the whole sequence in
 *       one call; --feed step runs one token per call through the KV cache.
 *   node tools/ort-ref.js PACK --bench [--threads T] [--runs R] [--decode N] [--decode-ctx 128,512]
 *       [--prefill 128,512]
 *       Prefill tok/s at 128 and 512 tokens (or the --prefill lengths: "prefillL_tok_s"), decode tok/s (N tokens, default 32, after a
 *       prompt of each --decode-ctx length, default 128: "decode":[{context,tok_s}], and
 *       decode_tok_s for the first); medians of R runs (default 5) after one warm-up.
 * --ids may also hold an array of sequences (a batch): each runs as above, one after the other in
 *   the one session; the JSON then has "batch":[per-sequence objects] and the logits rows (or
 *   --logits-f32 rows) of all sequences in order.
 * Common options: --threads T (intra-op threads, default 2).
 * --logits-f32 FILE (generate, teacher): write the logits rows to FILE as raw little-endian
 *   float32 [rows][V] instead of into the JSON (which then says "logits_f32": FILE).
 * Floats are printed with 9 significant digits (exact for fp32; fp16 outputs are widened).
 * Exit status: 0 ok, 2 usage, 3 pack unreadable, 4 onnxruntime failed to load/run.
 */
const fs = require('fs');
const path = require('path');

const TOP = path.resolve(__dirname, '..');
const ort = require(path.join(TOP, '.cache/node/node_modules/onnxruntime-node'));

function die(msg, code) {
  process.stderr.write('ort-ref: ' + msg + '\n');
  process.exit(code);
}

function usage(code) {
  const c = fs.readFileSync(__filename, 'utf8');
  const m = c.match(/\/\*([\s\S]*?)\*\//);
  (code ? process.stderr : process.stdout).write(m[1].replace(/^ \* ?/gm, '').trim() + '\n');
  process.exit(code);
}

function parseArgs(argv) {
  const a = { threads: 2, n: 32, topk: 0, feed: 'prefill', runs: 5, decode: 32, logits: true };
  const pos = [];
  for (let i = 0; i < argv.length; i++) {
    const s = argv[i];
    const val = () => {
      if (i + 1 >= argv.length) die(s + ': needs a value', 2);
      return argv[++i];
    };
    const int = (v) => {
      if (!/^[0-9]+$/.test(v)) die(s + ': not a non-negative integer: ' + v, 2);
      return parseInt(v, 10);
    };
    if (s === '-h' || s === '--help') usage(0);
    else if (s === '--ids') a.ids = val();
    else if (s === '--ids-file') a.idsFile = val();
    else if (s === '-n') a.n = int(val());
    else if (s === '--topk') a.topk = int(val());
    else if (s === '--no-logits') a.logits = false;
    else if (s === '--feed') a.feed = val();
    else if (s === '--threads') a.threads = int(val());
    else if (s === '--runs') a.runs = int(val());
    else if (s === '--decode') a.decode = int(val());
    else if (s === '--decode-ctx') a.decodeCtx = val().split(',').map(int);
    else if (s === '--prefill') a.prefill = val().split(',').map(int);
    else if (s === '--bench') a.bench = true;
    else if (s === '--logits-f32') a.logitsF32 = val();
    else if (s.startsWith('-')) die('unknown option ' + s, 2);
    else pos.push(s);
  }
  if (pos.length < 1) usage(2);
  a.pack = pos[0];
  a.mode = a.bench ? 'bench' : pos[1];
  if (!['generate', 'teacher', 'bench'].includes(a.mode)) die('mode must be generate, teacher or --bench', 2);
  if (!['prefill', 'step'].includes(a.feed)) die('--feed: prefill or step', 2);
  if (a.threads < 1) die('--threads: at least 1', 2);
  return a;
}

function readIds(a) {
  let txt;
  if (a.ids !== undefined) txt = a.ids;
  else if (a.idsFile !== undefined) {
    try { txt = fs.readFileSync(a.idsFile, 'utf8'); } catch (e) { die(a.idsFile + ': ' + e.message, 2); }
  } else die('--ids or --ids-file required', 2);
  let ids;
  try { ids = JSON.parse(txt); } catch (e) { die('ids: not JSON: ' + e.message, 2); }
  const ok = (v) => Array.isArray(v) && v.length > 0 && v.every((x) => Number.isInteger(x) && x >= 0);
  // a batch: an array of sequences, run one after the other in this one session
  if (Array.isArray(ids) && ids.length > 0 && ids.every(ok)) return { batch: true, seqs: ids };
  if (!ok(ids)) die('ids: want a non-empty JSON array of non-negative integers (or an array of them)', 2);
  return { batch: false, seqs: [ids] };
}

// ---- fp16 <-> fp32
const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);
function halfToFloat(h) {
  const s = (h & 0x8000) << 16;
  const e = (h >> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0) {
    const v = m * Math.pow(2, -24);
    return s ? -v : v;
  }
  if (e === 31) u32[0] = s | 0x7f800000 | (m << 13);
  else u32[0] = s | ((e + 112) << 23) | (m << 13);
  return f32[0];
}

class Pack {
  constructor(dir) {
    this.dir = dir;
    let gc;
    try { gc = JSON.parse(fs.readFileSync(path.join(dir, 'genai_config.json'), 'utf8')); } catch (e) {
      die(dir + '/genai_config.json: ' + e.message, 3);
    }
    const m = gc.model || {};
    const d = m.decoder || {};
    this.cfg = gc;
    this.vocab = m.vocab_size;
    this.layers = d.num_hidden_layers;
    this.kvHeads = d.num_key_value_heads;
    this.head = d.head_size;
    this.filename = d.filename || 'model.onnx';
    const ins = d.inputs || {};
    const outs = d.outputs || {};
    this.nameIds = ins.input_ids || 'input_ids';
    this.nameMask = ins.attention_mask || 'attention_mask';
    this.namePos = ins.position_ids || 'position_ids';
    this.pastK = ins.past_key_names || 'past_key_values.%d.key';
    this.pastV = ins.past_value_names || 'past_key_values.%d.value';
    this.nameLogits = outs.logits || 'logits';
    this.presK = outs.present_key_names || 'present.%d.key';
    this.presV = outs.present_value_names || 'present.%d.value';
    for (const [k, v] of [['vocab_size', this.vocab], ['num_hidden_layers', this.layers],
      ['num_key_value_heads', this.kvHeads], ['head_size', this.head]])
      if (!Number.isInteger(v) || v <= 0) die(dir + '/genai_config.json: ' + k + ' missing or not a positive integer', 3);
  }

  async open(threads) {
    const file = path.join(this.dir, this.filename);
    try {
      this.sess = await ort.InferenceSession.create(file, {
        executionProviders: ['cpu'], intraOpNumThreads: threads, interOpNumThreads: 1,
        graphOptimizationLevel: 'all',
      });
    } catch (e) {
      die(file + ': onnxruntime refused the model: ' + String(e.message || e).split('\n')[0], 4);
    }
    this.inputNames = new Set(this.sess.inputNames);
    const md = this.sess.inputMetadata || [];
    const pk = md.find((x) => x.name === this.pastK.replace('%d', '0'));
    this.kvType = pk && pk.type ? pk.type : 'float32';
    if (this.kvType !== 'float32' && this.kvType !== 'float16') die('past_key_values type ' + this.kvType + ' not supported', 4);
    this.hasPos = this.inputNames.has(this.namePos);
  }

  emptyPast() {
    const past = [];
    const ctor = this.kvType === 'float16' ? Uint16Array : Float32Array;
    for (let i = 0; i < this.layers; i++)
      past.push([new ort.Tensor(this.kvType, new ctor(0), [1, this.kvHeads, 0, this.head]),
        new ort.Tensor(this.kvType, new ctor(0), [1, this.kvHeads, 0, this.head])]);
    return past;
  }

  // Runs ids (array) at positions [pastLen, pastLen+len). Returns {logits: Float32Array [len*V], past}
  async run(ids, past, pastLen) {
    const S = ids.length;
    const T = pastLen + S;
    const feeds = {};
    feeds[this.nameIds] = new ort.Tensor('int64', BigInt64Array.from(ids.map(BigInt)), [1, S]);
    feeds[this.nameMask] = new ort.Tensor('int64', new BigInt64Array(T).fill(1n), [1, T]);
    if (this.hasPos) {
      const p = new BigInt64Array(S);
      for (let s = 0; s < S; s++) p[s] = BigInt(pastLen + s);
      feeds[this.namePos] = new ort.Tensor('int64', p, [1, S]);
    }
    for (let i = 0; i < this.layers; i++) {
      feeds[this.pastK.replace('%d', i)] = past[i][0];
      feeds[this.pastV.replace('%d', i)] = past[i][1];
    }
    let out;
    try { out = await this.sess.run(feeds); } catch (e) {
      die('onnxruntime run failed: ' + String(e.message || e).split('\n')[0], 4);
    }
    const next = [];
    for (let i = 0; i < this.layers; i++)
      next.push([out[this.presK.replace('%d', i)], out[this.presV.replace('%d', i)]]);
    const lt = out[this.nameLogits];
    if (lt.dims[lt.dims.length - 1] !== this.vocab) die('logits last dim ' + lt.dims + ' != vocab_size ' + this.vocab, 4);
    let logits = lt.data;
    if (lt.type === 'float16') {
      const w = new Float32Array(logits.length);
      for (let j = 0; j < w.length; j++) w[j] = halfToFloat(logits[j]);
      logits = w;
    }
    return { logits, past: next };
  }
}

function rowOf(logits, V, r) { return logits.subarray(r * V, (r + 1) * V); }

function argmax(row) {
  let b = 0;
  for (let j = 1; j < row.length; j++) if (row[j] > row[b]) b = j;
  return b;
}

const fmt = (x) => (Number.isFinite(x) ? Number(x.toPrecision(9)) : (Number.isNaN(x) ? 'NaN' : (x > 0 ? 'Infinity' : '-Infinity')));

function logsumexp(row) {
  let m = -Infinity;
  for (let j = 0; j < row.length; j++) if (row[j] > m) m = row[j];
  let s = 0;
  for (let j = 0; j < row.length; j++) s += Math.exp(row[j] - m);
  return m + Math.log(s);
}

function topk(row, k) {
  // ties broken by lower id
  const idx = [];
  for (let j = 0; j < row.length; j++) {
    if (idx.length < k || row[j] > row[idx[idx.length - 1]]) {
      let p = idx.length < k ? idx.length : k - 1;
      if (idx.length < k) idx.push(j);
      while (p > 0 && row[idx[p - 1]] < row[j]) { idx[p] = idx[p - 1]; p--; }
      idx[p] = j;
    }
  }
  return { ids: idx, logits: idx.map((j) => fmt(row[j])), lse: fmt(logsumexp(row)) };
}

function record(rows, a) {
  if (a.logitsF32) {
    const tmp = a.logitsF32 + '.tmp' + process.pid;  // whole file or none
    try {
      const fd = fs.openSync(tmp, 'w');
      for (const r of rows) fs.writeSync(fd, new Uint8Array(r.buffer, r.byteOffset, r.byteLength));
      fs.closeSync(fd);
      fs.renameSync(tmp, a.logitsF32);
    } catch (e) {
      try { fs.unlinkSync(tmp); } catch (e2) { /* not there */ }
      die(a.logitsF32 + ': ' + e.message, 4);
    }
    return { logits_f32: a.logitsF32 };
  }
  if (a.topk > 0) return { topk: rows.map((r) => topk(r, a.topk)) };
  if (!a.logits) return {};
  return { logits: rows.map((r) => Array.from(r, fmt)) };
}

async function generate(p, a, prompt) {
  let past = p.emptyPast();
  let r = await p.run(prompt, past, 0);
  let pastLen = prompt.length;
  const ids = [];
  const rows = [];
  let row = rowOf(r.logits, p.vocab, prompt.length - 1);
  for (let t = 0; t < a.n; t++) {
    const next = argmax(row);
    ids.push(next);
    if (a.logits || a.topk) rows.push(Float32Array.from(row));
    if (t + 1 === a.n) break;
    r = await p.run([next], r.past, pastLen);
    pastLen += 1;
    row = rowOf(r.logits, p.vocab, 0);
  }
  return { head: { mode: 'generate', feed: 'prefill+step', prompt_ids: prompt, ids }, rows };
}

async function teacher(p, a, ids) {
  const rows = [];
  if (a.feed === 'prefill') {
    const r = await p.run(ids, p.emptyPast(), 0);
    // views of this run's own output (each run returns new arrays): no copy of [positions][V]
    for (let s = 0; s < ids.length; s++) rows.push(rowOf(r.logits, p.vocab, s));
  } else {
    let past = p.emptyPast();
    for (let s = 0; s < ids.length; s++) {
      const r = await p.run([ids[s]], past, s);
      past = r.past;
      rows.push(Float32Array.from(rowOf(r.logits, p.vocab, 0)));
    }
  }
  return { head: { mode: 'teacher', feed: a.feed, ids, positions: ids.length }, rows };
}

function median(xs) {
  const s = xs.slice().sort((x, y) => x - y);
  const n = s.length;
  return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

async function bench(p, a) {
  // deterministic pseudo-random prompt ids (LCG), away from special tokens
  let seed = 12345;
  const rnd = () => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed; };
  const prompt = (n) => Array.from({ length: n }, () => 100 + (rnd() % Math.max(1, Math.min(p.vocab, 30000) - 100)));
  const now = () => Number(process.hrtime.bigint()) / 1e9;
  const res = { mode: 'bench', threads: a.threads, runs: a.runs };
  for (const n of a.prefill || [128, 512]) {
    const ids = prompt(n);
    await p.run(ids, p.emptyPast(), 0); // warm-up
    const tps = [];
    for (let i = 0; i < a.runs; i++) {
      const t0 = now();
      await p.run(ids, p.emptyPast(), 0);
      tps.push(n / (now() - t0));
    }
    res['prefill' + n + '_tok_s'] = Number(median(tps).toFixed(2));
  }
  // decode N tokens after a prompt of each --decode-ctx length (default 128)
  res.decode = [];
  for (const ctx of a.decodeCtx || [128]) {
    const ids = prompt(ctx);
    const tps = [];
    for (let i = 0; i <= a.runs; i++) {
      let r = await p.run(ids, p.emptyPast(), 0);
      let pastLen = ids.length;
      let tok = argmax(rowOf(r.logits, p.vocab, ids.length - 1));
      const t0 = now();
      for (let t = 0; t < a.decode; t++) {
        r = await p.run([tok], r.past, pastLen);
        pastLen++;
        tok = argmax(rowOf(r.logits, p.vocab, 0));
      }
      if (i > 0) tps.push(a.decode / (now() - t0)); // run 0 is the warm-up
    }
    res.decode.push({ context: ctx, tok_s: Number(median(tps).toFixed(2)) });
  }
  res.decode_tokens = a.decode;
  res.decode_context = res.decode[0].context;
  res.decode_tok_s = res.decode[0].tok_s;
  return res;
}

async function main() {
  const a = parseArgs(process.argv.slice(2));
  if (!fs.existsSync(a.pack) || !fs.statSync(a.pack).isDirectory()) die(a.pack + ': not a directory', 3);
  if (a.mode !== 'bench') readIds(a); // usage errors before the (slow) session load
  const p = new Pack(a.pack);
  await p.open(a.threads);
  let out;
  if (a.mode === 'bench') out = await bench(p, a);
  else {
    const { batch, seqs } = readIds(a);
    const heads = [];
    let rows = [];
    for (const seq of seqs) {
      const r = a.mode === 'generate' ? await generate(p, a, seq) : await teacher(p, a, seq);
      heads.push(r.head);
      rows = rows.concat(r.rows);
    }
    out = batch ? { mode: a.mode, feed: heads[0].feed, batch: heads } : heads[0];
    if (batch && a.mode === 'teacher') out.positions = rows.length;
    out = Object.assign(out, record(rows, a));
  }
  out = Object.assign({ pack: path.resolve(a.pack), onnxruntime: ort.env.versions ? ort.env.versions.common : '1.30.0',
    io_dtype: p.kvType, vocab_size: p.vocab }, out);
  process.stdout.write(JSON.stringify(out) + '\n');
}

main().catch((e) => die(String((e && e.stack) || e), 4));
