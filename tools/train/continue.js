#!/usr/bin/env node
'use strict';
/*
 * continue.js - greedy continuations of text prompts from onnxruntime, through the
 * oracle tools/ort-ref.js (generate): the prompt is tokenised with @huggingface/tokenizers
 * from the pack's tokenizer.json (no special tokens added), ort-ref.js generates N tokens
 * greedily, and the new ids are decoded (cut at <|endoftext|>).
 *
 * Usage: node tools/train/continue.js PACK [-n 48] PROMPT...   (PROMPT may contain \n escapes)
 * Output: one JSON object per prompt: {"prompt", "ids", "text"}.
 */
const fs = require('fs');
const path = require('path');
const { execFileSync } = require('child_process');

const TOP = path.resolve(__dirname, '../..');
const NM = path.join(TOP, '.cache/node/node_modules');

async function main() {
  const argv = process.argv.slice(2);
  if (!argv.length || argv[0] === '--help' || argv[0] === '-h') {
    process.stdout.write(fs.readFileSync(__filename, 'utf8').match(/\/\*([\s\S]*?)\*\//)[1].replace(/^ \* ?/gm, '').trim() + '\n');
    return argv.length ? 0 : 2;
  }
  const pack = argv.shift();
  let n = 48;
  if (argv[0] === '-n') { argv.shift(); n = parseInt(argv.shift(), 10); }
  const { Tokenizer } = await import(path.join(NM, '@huggingface/tokenizers/dist/tokenizers.mjs'));
  const tj = JSON.parse(fs.readFileSync(path.join(pack, 'tokenizer.json'), 'utf8'));
  const tok = new Tokenizer(tj, JSON.parse(fs.readFileSync(path.join(pack, 'tokenizer_config.json'), 'utf8')));
  const eos = tj.added_tokens.find((t) => t.content === '<|endoftext|>').id;
  for (const raw of argv) {
    const prompt = raw.replace(/\\n/g, '\n');
    const ids = tok.encode(prompt, { add_special_tokens: false }).ids;
    const out = JSON.parse(execFileSync('node', [path.join(TOP, 'tools/ort-ref.js'), pack, 'generate',
      '--ids', JSON.stringify(ids), '-n', String(n), '--no-logits', '--threads', '1'], { maxBuffer: 1 << 26 }).toString());
    let gen = out.ids;
    const e = gen.indexOf(eos);
    if (e >= 0) gen = gen.slice(0, e);
    console.log(JSON.stringify({ prompt, ids: out.ids, text: gen.length ? tok.decode(gen, { skip_special_tokens: true }) : '' }));
  }
  return 0;
}

main().then((c) => process.exit(c), (e) => { process.stderr.write('continue: ' + (e.stack || e) + '\n'); process.exit(4); });
