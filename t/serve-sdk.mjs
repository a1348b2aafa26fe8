// The npm `openai` SDK, unmodified, against `npu-forward serve`: completions, chat, streaming chat,
// logprobs, responses. Usage: node t/serve-sdk.mjs BASE_URL MODEL_ID EXPECTED_JSON
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
const one = await client.models.retrieve(modelId);
check(one.id === modelId && one.object === 'model', 'models.retrieve', one);

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
const cn = await client.chat.completions.create({ model: modelId, messages: q, max_tokens: 24, temperature: 0, n: 2 });
check(cn.choices.length === 2 && cn.choices.every((c, i) => c.index === i && c.message.content === want.chat),
  'chat.completions.create n: 2, both choices the greedy text', cn.choices);

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
// a forced call: the SDK reads one call of the tool, its arguments a JSON object; streamed, the SDK's
// tool_calls deltas carry the same call
// (a tool whose parameters keep the arguments to a choice: this small model can loop in a free string)
const ftools = [{ type: 'function', function: { name: 'pick_city', parameters: { type: 'object',
  properties: { city: { enum: ['Oslo', 'Rome'] }, days: { type: 'integer' } }, required: ['city'], additionalProperties: false } } }];
const fc = await client.chat.completions.create({ model: modelId, messages: q, tools: ftools, tool_choice: 'required', max_tokens: 300, temperature: 0 });
const call = fc.choices[0].message.tool_calls?.[0];
let argsObj = null;
try { argsObj = JSON.parse(call.function.arguments); } catch { /* checked below */ }
check(fc.choices[0].finish_reason === 'tool_calls' && fc.choices[0].message.tool_calls.length === 1 &&
  call.function.name === 'pick_city' && argsObj !== null && ['Oslo', 'Rome'].includes(argsObj.city) &&
  Object.keys(argsObj).every((k) => k === 'city' || (k === 'days' && Number.isInteger(argsObj.days))),
  'tool_choice required: one call of the tool, arguments that keep to its parameters', fc.choices[0]);
const fs2 = await client.chat.completions.create({ model: modelId, messages: q, tools: ftools, max_tokens: 300, temperature: 0, stream: true,
  tool_choice: { type: 'function', function: { name: 'pick_city' } } });
let fname = '', fargs = '', ffin = null;
for await (const ev of fs2) {
  for (const d of ev.choices[0]?.delta?.tool_calls ?? []) { fname += d.function?.name ?? ''; fargs += d.function?.arguments ?? ''; }
  ffin = ev.choices[0]?.finish_reason ?? ffin;
}
check(fname === 'pick_city' && fargs === call.function.arguments && ffin === 'tool_calls', 'a named function, streamed: the same call',
  { fname, fargs, ffin });
// JSON mode: an answer that ends (not cut by max_tokens) parses as one object; sampled, a few seeds until one
// ends (this small model can loop inside a string)
let jm = null, jobj = null;
for (let seed = 1; seed <= 6 && !jobj; seed++) {
  jm = await client.chat.completions.create({ model: modelId, messages: q, max_tokens: 300, temperature: 0.9, seed,
    response_format: { type: 'json_object' } });
  if (jm.choices[0].finish_reason === 'stop') jobj = JSON.parse(jm.choices[0].message.content);
  else if (!/^( |\n[ \t]*)?\{/.test(jm.choices[0].message.content)) break;
}
check(jobj !== null && typeof jobj === 'object' && !Array.isArray(jobj),
  'response_format json_object: the content is one JSON object', jm.choices[0]);
// json_schema (strict, as the SDK's helpers send it): the answer keeps to the schema
const js = await client.chat.completions.create({ model: modelId, messages: q, max_tokens: 200, temperature: 0,
  response_format: { type: 'json_schema', json_schema: { name: 'pet', strict: true, schema: { type: 'object',
    properties: { kind: { enum: ['cat', 'dog'] }, legs: { type: 'integer', minimum: 0, maximum: 8 }, wild: { type: 'boolean' } },
    required: ['kind', 'legs', 'wild'], additionalProperties: false } } } });
let pet = null;
try { pet = JSON.parse(js.choices[0].message.content); } catch { /* checked below */ }
check(js.choices[0].finish_reason === 'stop' && pet !== null && ['cat', 'dog'].includes(pet.kind) && Number.isInteger(pet.legs) && pet.legs >= 0 && pet.legs <= 8 &&
  typeof pet.wild === 'boolean' && Object.keys(pet).join() === 'kind,legs,wild', 'response_format json_schema: an object of the schema', js.choices[0]);
let status = 0;
try { await client.chat.completions.create({ model: modelId, messages: q, max_tokens: 2, response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', properties: { n: { type: 'integer', multipleOf: 2 } } } } } }); } catch (e) { status = e.status; }
check(status === 400, 'a json_schema keyword the server cannot keep to: the SDK raises a 400', status);

// the Responses API (client.responses): the same greedy text, whole and through the SDK's stream helper (which
// checks the events' order as it assembles the response); a forced call as a function_call item; a field
// that needs stored responses raises a 400
const rr = await client.responses.create({ model: modelId, input: 'What is a list?', max_output_tokens: 24, temperature: 0 });
check(rr.object === 'response' && rr.output_text === want.chat && rr.output[0].type === 'message' &&
  rr.usage.output_tokens > 0 && rr.usage.total_tokens === rr.usage.input_tokens + rr.usage.output_tokens,
  'responses.create greedy text equals npu-forward run --chat', rr);
const rs = client.responses.stream({ model: modelId, input: [{ role: 'user', content: [{ type: 'input_text', text: 'What is a list?' }] }],
  max_output_tokens: 24, temperature: 0 });
let rtext = '';
rs.on('response.output_text.delta', (e) => { rtext += e.delta; });
const rfinal = await rs.finalResponse();
// (the helper takes the final response from response.completed alone; one cut by max_output_tokens ends with
// response.incomplete, as OpenAI's does, and the helper keeps its own snapshot)
const rall = rfinal.output.filter((o) => o.type === 'message').flatMap((o) => o.content).map((c) => c.text).join('');
check(rtext === want.chat && rall === want.chat, 'responses.stream: the same text, a final response', { rtext, rall });
const rtools = ftools.map((t) => ({ type: 'function', name: t.function.name, parameters: t.function.parameters, strict: false }));
const rc = await client.responses.create({ model: modelId, input: 'What is a list?', tools: rtools, tool_choice: 'required',
  max_output_tokens: 300, temperature: 0 });
const rcall = rc.output.find((o) => o.type === 'function_call');
check(rc.status === 'completed' && rcall?.name === 'pick_city' && rcall.arguments === call.function.arguments && rcall.call_id,
  'responses with tool_choice required: a function_call item, the call chat makes', rc.output);
status = 0;
try { await client.responses.create({ model: modelId, input: 'x', previous_response_id: 'resp_1' }); } catch (e) { status = e.status; }
check(status === 400, 'responses with previous_response_id: the SDK raises a 400', status);

status = 0;
try { await client.completions.create({ model: 'no-such-model', prompt: 'x', max_tokens: 2 }); } catch (e) { status = e.status; }
check(status === 404, 'unknown model: the SDK raises a 404', status);
