#!/usr/bin/env node
'use strict';
/*
 * accept.js - drafter acceptance against the target, greedy speculative decoding, in
 * onnxruntime-node (CPU EP), on held-out prompts.
 *
 * Usage: node tools/train/accept.js TARGET_PACK DRAFT_PACK HELD
 *            [--k 4] [--prompt-tokens 64] [--new 64] [--max-prompts N] [--threads 1]
 *        node tools/train/accept.js TARGET_PACK DRAFT_PACK --ids FILE [--k 4] [--new 64] ...
 *
 * --ids FILE: the prompts are FILE's JSON array of token-id arrays (no held-out texts needed).
 *
 * HELD is share/models/corpus-manifest.tsv (its "held" rows, read from /usr/lib/python3.11;
 * a file whose crc32 differs from the manifest's is skipped) or `bpe.py dump` JSON. One prompt per
 * held-out file: the text from the start of the middle line that begins a def/class/
 * if/for/return/with statement, tokenised with @huggingface/tokenizers, first
 * --prompt-tokens ids. Each round the drafter proposes min(k, tokens still wanted) tokens greedily, the target
 * scores prefix+drafts in one run, the longest prefix of drafts equal to the target's
 * argmax is accepted and the target's own next token is appended (1 + accepted tokens
 * per round). Every run recomputes the whole sequence (empty past): slower than a KV
 * cache, but the greedy tokens are the same and nothing can go stale.
 * Check: the speculative output must equal the target's plain greedy output (a property
 * of greedy speculative decoding); any difference is reported and exits 1.
 * Output: JSON with tokens_per_round, acceptance rate, per-prompt numbers.
 */
const fs = require('fs');
const path = require('path');

const TOP = path.resolve(__dirname, '../..');
const NM = path.join(TOP, '.cache/node/node_modules');
const ort = require(path.join(NM, 'onnxruntime-node'));

function die(msg, code) {
  process.stderr.write('accept: ' + msg + '\n');
  process.exit(code);
}

class Model {
  static async open(dir, threads) {
    const m = new Model();
    const gc = JSON.parse(fs.readFileSync(path.join(dir, 'genai_config.json'), 'utf8')).model;
    m.layers = gc.decoder.num_hidden_layers;
    m.kv = gc.decoder.num_key_value_heads;
    m.head = gc.decoder.head_size;
    m.vocab = gc.vocab_size;
    m.s = await ort.InferenceSession.create(path.join(dir, 'model.onnx'),
      { intraOpNumThreads: threads, interOpNumThreads: 1 });
    m.hasPos = m.s.inputNames.includes('position_ids');
    return m;
  }

  // logits rows [ids.length][vocab] for the whole sequence (empty past)
  async logits(ids) {
    const S = ids.length;
    const f = {
      input_ids: new ort.Tensor('int64', BigInt64Array.from(ids.map(BigInt)), [1, S]),
      attention_mask: new ort.Tensor('int64', new BigInt64Array(S).fill(1n), [1, S]),
    };
    if (this.hasPos) f.position_ids = new ort.Tensor('int64', BigInt64Array.from(ids.map((_, i) => BigInt(i))), [1, S]);
    for (let i = 0; i < this.layers; i++) {
      f['past_key_values.' + i + '.key'] = new ort.Tensor('float32', new Float32Array(0), [1, this.kv, 0, this.head]);
      f['past_key_values.' + i + '.value'] = new ort.Tensor('float32', new Float32Array(0), [1, this.kv, 0, this.head]);
    }
    const r = await this.s.run(f);
    return r.logits.data;
  }

  argmaxAt(data, row) {
    let best = 0, bv = -Infinity;
    const o = row * this.vocab;
    for (let v = 0; v < this.vocab; v++) if (data[o + v] > bv) { bv = data[o + v]; best = v; }
    return best;
  }

  async next(ids) {
    return this.argmaxAt(await this.logits(ids), ids.length - 1);
  }
}

function crc32(buf) {
  let c, crc = 0xffffffff;
  for (let i = 0; i < buf.length; i++) {
    c = (crc ^ buf[i]) & 0xff;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0xedb88320 : c >>> 1;
    crc = (crc >>> 8) ^ c;
  }
  return (crc ^ 0xffffffff) >>> 0;
}

function heldTexts(file) {
  if (!file.endsWith('.tsv')) return JSON.parse(fs.readFileSync(file, 'utf8'));
  const out = [];
  for (const line of fs.readFileSync(file, 'utf8').split('\n')) {
    const [rel, , crc, split] = line.split('\t');
    if (split !== 'held') continue;
    let raw;
    try { raw = fs.readFileSync(path.join('/usr/lib/python3.11', rel)); } catch (e) { continue; }
    if (crc32(raw).toString(16).padStart(8, '0') !== crc) continue;
    out.push({ name: rel, text: raw.toString('utf8') });
  }
  return out;
}

function prompts(dump, tok, P) {
  const out = [];
  for (const d of dump) {
    if (!d.name.endsWith('.py')) continue;
    const starts = [];
    const re = /^[ \t]*(def|class|if|for|return|with) /gm;
    let m;
    while ((m = re.exec(d.text)) !== null) starts.push(m.index);
    if (!starts.length) continue;
    const at = starts[Math.floor(starts.length / 2)];
    const ids = tok.encode(d.text.slice(at), { add_special_tokens: false }).ids.slice(0, P);
    if (ids.length === P) out.push({ name: d.name, ids });
  }
  return out;
}

async function main() {
  const argv = process.argv.slice(2);
  const o = { k: 4, 'prompt-tokens': 64, new: 64, 'max-prompts': 1e9, threads: 1 };
  const pos = [];
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '-h' || argv[i] === '--help') {
      const c = fs.readFileSync(__filename, 'utf8').match(/\/\*([\s\S]*?)\*\//)[1];
      process.stdout.write(c.replace(/^ \* ?/gm, '').trim() + '\n');
      return 0;
    }
    if (argv[i] === '--ids') {
      if (i + 1 >= argv.length) die('--ids needs a FILE', 2);
      o.ids = argv[++i];
    } else if (argv[i].startsWith('--')) {
      const k = argv[i].slice(2);
      if (!(k in o) || i + 1 >= argv.length || !/^[0-9]+$/.test(argv[i + 1])) die('bad option ' + argv[i], 2);
      o[k] = parseInt(argv[++i], 10);
    } else pos.push(argv[i]);
  }
  if (pos.length !== (o.ids ? 2 : 3)) die('usage: accept.js TARGET_PACK DRAFT_PACK (HELD | --ids FILE) [options]', 2);
  const { Tokenizer } = await import(path.join(NM, '@huggingface/tokenizers/dist/tokenizers.mjs'));
  const tok = new Tokenizer(JSON.parse(fs.readFileSync(path.join(pos[0], 'tokenizer.json'), 'utf8')),
    JSON.parse(fs.readFileSync(path.join(pos[0], 'tokenizer_config.json'), 'utf8')));
  const T = await Model.open(pos[0], o.threads);
  const D = await Model.open(pos[1], o.threads);
  const ps = (o.ids
    ? JSON.parse(fs.readFileSync(o.ids, 'utf8')).map((ids, i) => ({ name: `ids[${i}]`, ids }))
    : prompts(heldTexts(pos[2]), tok, o['prompt-tokens'])).slice(0, o['max-prompts']);
  if (!ps.length) die('no prompts', 3);
  let rounds = 0, emitted = 0, accepted = 0, offered = 0, mismatch = 0;
  const per = [];
  for (const p of ps) {
    // plain target greedy, the reference
    const ref = p.ids.slice();
    while (ref.length < p.ids.length + o.new) ref.push(await T.next(ref));
    // speculative
    const seq = p.ids.slice();
    let r = 0, acc = 0;
    const goal = p.ids.length + o.new;
    while (seq.length < goal) {
      const ctx = seq.slice();
      const drafts = [];
      // no drafts past the goal: the last round offers only the tokens still wanted
      const kk = Math.min(o.k, goal - seq.length);
      for (let j = 0; j < kk; j++) { const d = await D.next(ctx); drafts.push(d); ctx.push(d); }
      const lg = await T.logits(ctx);
      let a = 0;
      while (a < kk && T.argmaxAt(lg, seq.length - 1 + a) === drafts[a]) a++;
      offered += kk;
      const add = drafts.slice(0, a).concat([T.argmaxAt(lg, seq.length - 1 + a)]);
      for (const t of add) if (seq.length < goal) seq.push(t);
      r++;
      acc += a;
    }
    const same = seq.every((t, i) => t === ref[i]);
    if (!same) mismatch++;
    rounds += r;
    accepted += acc;
    emitted += o.new;
    per.push({ name: p.name, rounds: r, accepted: acc, tokens_per_round: +(o.new / r).toFixed(3),
      same_as_target_greedy: same });
  }
  const res = {
    k: o.k, prompts: ps.length, prompt_tokens: o['prompt-tokens'], new_tokens_per_prompt: o.new,
    rounds, emitted, tokens_per_round: +(emitted / rounds).toFixed(3),
    offered, draft_acceptance: +(accepted / offered).toFixed(3), mismatches: mismatch, per_prompt: per,
  };
  console.log(JSON.stringify(res, null, 1));
  return mismatch ? 1 : 0;
}

main().then((c) => process.exit(c), (e) => die(String(e && e.stack || e), 4));
