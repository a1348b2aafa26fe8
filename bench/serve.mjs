// bench/serve.mjs PORT STREAMS REQUESTS_PER_STREAM GEN [NAME]: STREAMS concurrent streaming greedy
// completions (GEN tokens each, EOS ignored) against an OpenAI-compatible server on 127.0.0.1:PORT
// (npu-forward serve, llama-server); prints one JSON line: aggregate generated tokens per second (all
// tokens / wall time), TTFT p50/p99 (request sent -> first text chunk), per-stream decode tok/s (median
// of the requests' timings.predicted_per_second, llama.cpp's field, which both servers send).
// One connection per request (llama-server closes a kept-alive one after its answer).
// Tokens: the final chunk's usage.completion_tokens, else the number of chunks that carried text.
import http from 'node:http';
const [port, streams, per, gen] = process.argv.slice(2, 6).map(Number);
const name = process.argv[6] || 'npu-forward';
const prompt = 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n';
function one(i) {
  return new Promise((resolve, reject) => {
    const body = JSON.stringify({ prompt: prompt + `# ${i}\n`, max_tokens: gen, temperature: 0, ignore_eos: true, stream: true,
      stream_options: { include_usage: true } });
    const t0 = process.hrtime.bigint();
    let ttft = null, buf = '', last = null, chunks = 0, tps = null;
    const req = http.request({ host: '127.0.0.1', port, path: '/v1/completions', method: 'POST', timeout: 600000, agent: false,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (res) => {
      res.on('data', (c) => {
        buf += c;
        let k;
        while ((k = buf.indexOf('\n\n')) >= 0) {
          const ev = buf.slice(0, k); buf = buf.slice(k + 2);
          if (!ev.startsWith('data: {')) continue;
          const j = JSON.parse(ev.slice(6));
          if (j.choices?.[0]?.text) {
            chunks++;
            if (ttft === null) ttft = Number(process.hrtime.bigint() - t0) / 1e6;
          }
          if (j.usage) last = j;
          if (j.timings?.predicted_per_second) tps = j.timings.predicted_per_second;
        }
      });
      res.on('end', () => (ttft !== null ? resolve({ ttft, tokens: last?.usage?.completion_tokens ?? chunks, tps })
        : reject(new Error(`no text from the server (HTTP ${res.statusCode})`))));
    });
    req.on('error', reject);
    req.end(body);
  });
}
const q = (a, p) => { const s = [...a].sort((x, y) => x - y); return s[Math.min(s.length - 1, Math.floor(p * s.length))]; };
const t0 = process.hrtime.bigint();
const results = (await Promise.all(Array.from({ length: streams }, async (_, s) => {
  const r = [];
  for (let i = 0; i < per; i++) r.push(await one(s * per + i));
  return r;
}))).flat();
const wall = Number(process.hrtime.bigint() - t0) / 1e9;
const tokens = results.reduce((a, r) => a + r.tokens, 0);
const tpss = results.map((r) => r.tps).filter((x) => x);
console.log(JSON.stringify({ server: name, streams, requests: results.length, gen, wall_s: +wall.toFixed(3),
  aggregate_tok_s: +(tokens / wall).toFixed(1), ttft_p50_ms: +q(results.map((r) => r.ttft), 0.5).toFixed(1),
  ttft_p99_ms: +q(results.map((r) => r.ttft), 0.99).toFixed(1), stream_tok_s_median: tpss.length ? +q(tpss, 0.5).toFixed(1) : null }));
