// The npm `openai` SDK, unmodified, against `npu-forward serve`: completions, chat, streaming chat,
// logprobs. Usage: node t/serve-sdk.mjs BASE_URL MODEL_ID EXPECTED_JSON
// EXPECTED_JSON: {"completion": greedy text of the completion prompt (from `npu-forward run`),
//                 "chat": greedy text of the chat question (from `npu-forward run --chat`)}
// Prints one line per check; exit 1 on the first failed one.
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import path from 'node:path';
const nm = process.env.OGAKIT_NODE_MODULES || path.join(import.meta.dirname ?? path.dirname(new URL(import.meta.url).pathname), '..', '.cache', 'node', 'node_modules');
const require = createRequire(nm + '/');
const OpenAI = require('openai').default;
const [base, modelId, expectedFile] = process.argv.slice(2);
const want = JSON.parse(readFileSync(expectedFile, 'utf8'));
const client = new OpenAI({ baseURL: base, apiKey: process.env.OGAKIT_API_KEY || 'none', timeout: 30000, maxRetries: 0 });
const check = (ok, what, got) => {
  if (!ok) { console.log(`not ok: ${what}: ${JSON.stringify(got)}`); process.exit(1); }
  console.log(`ok: ${what}`);
};

const models = await client.models.list();
check(models.data.length === 1 && models.data[0].id === modelId, 'models.list', models.data);

const c = await client.completions.create({ model: modelId, prompt: 'def fibonacci(n):', max_tokens: 24, temperature: 0 });
check(c.choices[0].text === want.completion, 'completions.create greedy text equals npu-forward run', c.choices[0].text);
check(c.usage.completion_tokens > 0 && c.usage.total_tokens === c.usage.prompt_tokens + c.usage.completion_tokens,
  'completions usage', c.usage);

const lp = await client.completions.create({ model: modelId, prompt: 'def fibonacci(n):', max_tokens: 4, temperature: 0, logprobs: 3 });
const L = lp.choices[0].logprobs;
check(L.tokens.length === 4 && L.token_logprobs.every((x) => x <= 0) && L.top_logprobs.every((o) => Object.keys(o).length >= 1),
  'completions logprobs', L);
// greedy: the chosen token is the most likely one
check(L.token_logprobs.every((x, i) => Math.abs(x - Math.max(...Object.values(L.top_logprobs[i]))) < 1e-6),
  'greedy token is the top logprob', L);

const q = [{ role: 'user', content: 'What is a list?' }];
const ch = await client.chat.completions.create({ model: modelId, messages: q, max_tokens: 24, temperature: 0 });
check(ch.choices[0].message.role === 'assistant' && ch.choices[0].message.content === want.chat,
  'chat.completions.create greedy text equals npu-forward run --chat', ch.choices[0].message.content);

const st = await client.chat.completions.create({ model: modelId, messages: q, max_tokens: 24, temperature: 0, stream: true });
let text = '', chunks = 0, finish = null;
for await (const ev of st) {
  chunks++;
  text += ev.choices[0]?.delta?.content ?? '';
  if (ev.choices[0]?.finish_reason) finish = ev.choices[0].finish_reason;
}
check(chunks >= 3 && text === want.chat && finish !== null, 'streaming chat: same text, a finish reason', { chunks, text, finish });

const cl = await client.chat.completions.create({ model: modelId, messages: q, max_tokens: 3, temperature: 0, logprobs: true, top_logprobs: 2 });
const content = cl.choices[0].logprobs.content;
check(content.length >= 1 && content.every((t) => t.top_logprobs.length === 2 && t.logprob <= 0 && t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob),
  'chat logprobs + top_logprobs', content);

// tools through the SDK's typed API, with an earlier call and its answer (this model's template ignores
// tools, so the text is the plain chat's; no call can be read from it)
const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather in a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
const tq = [...q, { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function',
  function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } }] },
  { role: 'tool', tool_call_id: 'call_1', content: '-3' }];
const tc = await client.chat.completions.create({ model: modelId, messages: tq, tools, tool_choice: 'auto', max_tokens: 8, temperature: 0 });
check(tc.choices[0].message.role === 'assistant' && typeof tc.choices[0].message.content === 'string' &&
  !tc.choices[0].message.tool_calls && ['stop', 'length'].includes(tc.choices[0].finish_reason),
  'chat with tools and an earlier tool call: an answer', tc.choices[0]);
const ts = await client.chat.completions.create({ model: modelId, messages: tq, tools, max_tokens: 8, temperature: 0, stream: true });
let ttext = '';
for await (const ev of ts) ttext += ev.choices[0]?.delta?.content ?? '';
check(ttext === tc.choices[0].message.content, 'streamed with tools: the same text', ttext);
let status = 0;
try { await client.chat.completions.create({ model: modelId, messages: q, tools, tool_choice: 'required', max_tokens: 2 }); } catch (e) { status = e.status; }
check(status === 400, 'tool_choice required: the SDK raises a 400', status);

status = 0;
try { await client.completions.create({ model: 'no-such-model', prompt: 'x', max_tokens: 2 }); } catch (e) { status = e.status; }
check(status === 404, 'unknown model: the SDK raises a 404', status);
