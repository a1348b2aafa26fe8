#!/usr/bin/env node
// A tiny stand-in for an OpenAI-compatible server, for spec-replay's HTTP client tests: 127.0.0.1, a free
// port written to PORTFILE, greedy "model" next(seq) = (7 * last + second-to-last + 3) mod 97.
//   node t/fake-oai.js PORTFILE MODE    MODE: target | wrong (drafts next + 1) | llama (only /completion
//   returns ids) | llamaeos (llama, stopping at id 96 after half the tokens unless ignore_eos) | error (HTTP 500 on completions) | flaky (the n-th request's first token is shifted by n) | empty (no token, finish_reason "length") | more (max_tokens + 5 tokens, finish_reason "stop")
//   | vllm (ids only as vLLM gives them: logprobs.tokens "token_id:N" with return_tokens_as_token_ids; no /completion)
//   | bare (as vllm, but never any ids: an OpenAI-only server)
//   | busy (target, but the 1st completion request is answered 503 with Retry-After: 1, the 2nd 429 without it)
//   | down (every completion request 503)
//   | farlp (target, but step 0's second alternative has logprob -1e39: a gap no float holds)
//   | llamaonly (llama, but /v1/completions is a 404, as a server without OpenAI's API)
//   | strtok (target, but choices[0].tokens are strings)
//   | vllmeos (vllm, stopping at id 96 after half the tokens unless ignore_eos: finish_reason "stop", 96 last in the ids)
//   | llamaslow (llamaeos, each /completion answered after 150 ms, or FAKE_SLOW_MS)
//   | prefix (target with a prefix cache: a completion answered after 2 ms per prompt token beyond what the previous
//     request's prompt and answer share with it)
// POST /v1/completions {"prompt": [ids], "max_tokens"} -> choices[0].tokens / .text / .logprobs.top_logprobs
// (two alternatives per step; top-1 minus top-2 is 0.5 + (position mod 5)). Requests are appended to
// PORTFILE.log as JSON lines.
'use strict';
const http = require('http');
const fs = require('fs');
const [portFile, mode] = process.argv.slice(2);
const V = 97, EOS = 96;
let requests = 0, busy = 0, held = [];
const next = (s) => (7 * s[s.length - 1] + (s.length > 1 ? s[s.length - 2] : 0) + 3) % V;
function gen(prompt, n) {
  const s = prompt.slice(), out = [], tops = [];
  for (let i = 0; i < n; i++) {
    let t = next(s);
    const g = 0.5 + (s.length % 5);
    if (mode === 'wrong') t = (t + 1) % V;
    if (mode === 'flaky' && i === 0) t = (t + requests) % V;
    tops.push({ ['t' + t]: -0.25, alt: mode === 'farlp' && i === 0 ? -1e39 : -0.25 - g });
    out.push(t);
    s.push(t);
  }
  return { out, tops };
}
const srv = http.createServer((req, res) => {
  let body = '';
  req.on('data', (d) => (body += d));
  req.on('end', () => {
    fs.appendFileSync(portFile + '.log', JSON.stringify({ url: req.url, body }) + '\n');
    const send = (code, o) => { res.writeHead(code, { 'Content-Type': 'application/json' }); res.end(JSON.stringify(o)); };
    if (req.url === '/health') return send(200, { status: 'ok' });
    if (req.url === '/v1/models') return send(200, { object: 'list', data: [{ id: 'fake-' + mode, object: 'model' }] });
    if (mode === 'error') return send(500, { error: { message: 'the fake is broken on purpose' } });
    if ((mode === 'busy' || mode === 'down') && req.url === '/v1/completions') {
      busy++;
      if (mode === 'down' || busy === 1) {
        res.writeHead(503, { 'Content-Type': 'application/json', 'Retry-After': '1' });
        return res.end(JSON.stringify({ error: { message: 'loading' } }));
      }
      if (busy === 2) return send(429, { error: { message: 'too many requests' } });
    }
    let q;
    try { q = JSON.parse(body); } catch (e) { return send(400, { error: 'bad json' }); }
    if (!Array.isArray(q.prompt) || q.temperature !== 0) return send(400, { error: 'want token ids, temperature 0' });
    if (req.url === '/v1/completions' && mode === 'llamaonly') return send(404, { error: 'not found' });
    if (req.url === '/v1/completions') {
      requests++;
      // empty: answers no token, saying "length"; more: five more than asked, saying "stop"
      const n = mode === 'empty' ? 0 : mode === 'more' ? q.max_tokens + 5 : q.max_tokens;
      let { out, tops } = gen(q.prompt, n);
      const c = { index: 0, text: out.map((t) => 't' + t).join(' '), finish_reason: mode === 'more' ? 'stop' : 'length' };
      if (mode === 'vllmeos' && !q.ignore_eos) {
        // vLLM stopping at an end-of-generation token (id EOS) after half the tokens: finish_reason "stop", the
        // token left out of the text but last in the ids (and logprobs) it gives
        const k = Math.floor(n / 2);
        c.text = out.slice(0, k).map((t) => 't' + t).join(' ');
        out = out.slice(0, k).concat([EOS]);
        tops = tops.slice(0, k + 1);
        c.finish_reason = 'stop';
      }
      if (mode === 'vllm' || mode === 'vllmeos' || mode === 'bare') {
        // vLLM: no ids unless asked for as token strings; logprobs: N gives N alternatives per step
        if (q.logprobs != null) {
          const name = (t) => (q.return_tokens_as_token_ids && mode !== 'bare' ? 'token_id:' + t : 't' + t);
          const alts = tops.map((o, i) => {
            const r = { [name(out[i])]: -0.25 };
            if (q.logprobs >= 2) r.alt = Object.values(o)[1];
            return r;
          });
          c.logprobs = { tokens: out.map(name), token_logprobs: out.map(() => -0.25), top_logprobs: alts };
        }
      } else if (!mode.startsWith('llama')) {
        c.tokens = mode === 'strtok' ? out.map((t) => 't' + t) : out;
        if (q.logprobs) c.logprobs = { tokens: out.map((t) => 't' + t), token_logprobs: out.map(() => -0.25), top_logprobs: tops };
      }
      const r = { id: 'x', object: 'text_completion', model: 'fake', choices: [c] };
      if (mode !== 'prefix') return send(200, r);
      let same = 0;
      while (same < q.prompt.length && same < held.length && q.prompt[same] === held[same]) same++;
      held = q.prompt.concat(out);
      return setTimeout(() => send(200, r), 2 * (q.prompt.length - same));
    }
    if (req.url === '/completion' && (mode === 'llama' || mode === 'llamaeos' || mode === 'llamaonly' || mode === 'llamaslow')) {
      let { out, tops } = gen(q.prompt, q.n_predict);
      let content = out.map((t) => 't' + t).join(' ');
      // llamaeos: current llama-server stopping at an end-of-generation token (id EOS) after half the
      // tokens: "stop_type": "eos", and the stopping token last in "tokens" (not in the text)
      const eosmode = mode === 'llamaeos' || mode === 'llamaslow', stops = eosmode && !q.ignore_eos;
      if (stops) {
        const k = Math.floor(q.n_predict / 2);
        content = out.slice(0, k).map((t) => 't' + t).join(' ');
        out = out.slice(0, k).concat([EOS]);
        tops = tops.slice(0, k + 1);
      }
      const probs = tops.map((t) => ({ top_logprobs: Object.values(t).map((lp) => ({ logprob: lp })) }));
      const r = { content, tokens: out, completion_probabilities: q.n_probs ? probs : undefined };
      if (!eosmode) r.stopped_eos = false; else r.stop_type = stops ? 'eos' : 'limit';
      return mode === 'llamaslow' ? setTimeout(() => send(200, r), +(process.env.FAKE_SLOW_MS || 150)) : send(200, r);
    }
    send(404, { error: 'not found' });
  });
});
srv.listen(0, '127.0.0.1', () => fs.writeFileSync(portFile, String(srv.address().port)));
setTimeout(() => process.exit(0), 300e3).unref(); // never outlive a test run by much
