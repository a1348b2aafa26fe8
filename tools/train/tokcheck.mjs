#!/usr/bin/env node
// tokcheck.mjs TOKDIR DUMP.json
// Loads TOKDIR/tokenizer.json + tokenizer_config.json with @huggingface/tokenizers and checks
// that its encoding of every text in DUMP.json (from `bpe.py dump`) equals the ids our own
// trainer's encoder produced, and that decoding gives the text back. Exit 0 all agree, 1 not.
import fs from 'fs';
import path from 'path';
import { fileURLToPath } from 'url';
import { createRequire } from 'module';

const TOP = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const require = createRequire(import.meta.url);
const { Tokenizer } = require(path.join(TOP, '.cache/node/node_modules/@huggingface/tokenizers'));

const [tokdir, dump] = process.argv.slice(2);
if (!tokdir || !dump) {
  process.stderr.write('usage: tokcheck.mjs TOKDIR DUMP.json\n');
  process.exit(2);
}
const tj = JSON.parse(fs.readFileSync(path.join(tokdir, 'tokenizer.json'), 'utf8'));
const tc = JSON.parse(fs.readFileSync(path.join(tokdir, 'tokenizer_config.json'), 'utf8'));
const tok = new Tokenizer(tj, tc);
const docs = JSON.parse(fs.readFileSync(dump, 'utf8'));
let bad = 0, ntok = 0;
for (const d of docs) {
  const ids = tok.encode(d.text, { add_special_tokens: false }).ids;
  ntok += ids.length;
  let i = 0;
  while (i < ids.length && i < d.ids.length && ids[i] === d.ids[i]) i++;
  if (i !== ids.length || i !== d.ids.length) {
    bad++;
    process.stderr.write(`tokcheck: ${d.name}: differ at token ${i}: hf ${JSON.stringify(ids.slice(i, i + 5))} ours ${JSON.stringify(d.ids.slice(i, i + 5))}\n`);
    continue;
  }
  const back = ids.length ? tok.decode(ids, { skip_special_tokens: false }) : "";
  if (back !== d.text) {
    bad++;
    process.stderr.write(`tokcheck: ${d.name}: decode does not round-trip\n`);
  }
}
// special tokens are recognised in text as single ids
const sp = tok.encode('<|im_start|>user\nhi<|im_end|>\n<|endoftext|>', { add_special_tokens: false }).ids;
const want = [tj.added_tokens[1].id, tj.added_tokens[2].id, tj.added_tokens[0].id];
if (!want.every((w) => sp.includes(w))) {
  bad++;
  process.stderr.write(`tokcheck: special tokens not recognised: ${JSON.stringify(sp)}\n`);
}
console.log(JSON.stringify({ texts: docs.length, tokens: ntok, disagreements: bad }));
process.exit(bad ? 1 : 0);
