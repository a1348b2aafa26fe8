// A bounded load test of `npu-forward serve` on loopback: CONNS concurrent connections (keep-alive)
// send TOTAL short greedy completions between them. Every answer must be a 200 with the expected
// text; prints {"ok", "errors", "lost", "seconds"} as JSON. Usage: node t/serve-load.mjs PORT CONNS TOTAL
import http from 'node:http';
const [port, conns, total] = process.argv.slice(2).map(Number);
const agent = new http.Agent({ keepAlive: true, maxSockets: conns });
const body = JSON.stringify({ prompt: 'def f(x):', max_tokens: 4, temperature: 0 });
function one() {
  return new Promise((resolve) => {
    const req = http.request({ host: '127.0.0.1', port, path: '/v1/completions', method: 'POST', agent, timeout: 60000,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (res) => {
      let d = '';
      res.on('data', (c) => (d += c));
      res.on('end', () => {
        try { resolve(res.statusCode === 200 ? JSON.parse(d).choices[0].text : `status ${res.statusCode}`); } catch { resolve('bad json'); }
      });
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', (e) => resolve(`error ${e.message}`));
    req.end(body);
  });
}
let next = 0, ok = 0, errors = 0, first = null;
const seen = new Map();
const t0 = Date.now();
async function worker() {
  while (next < total) {
    next++;
    const r = await one();
    if (r.startsWith && (r.startsWith('status') || r.startsWith('error') || r === 'bad json')) { errors++; seen.set(r, (seen.get(r) || 0) + 1); continue; }
    if (first === null) first = r;
    if (r === first) ok++; else { errors++; seen.set('different text', (seen.get('different text') || 0) + 1); }
  }
}
await Promise.all(Array.from({ length: conns }, worker));
agent.destroy();
console.log(JSON.stringify({ ok, errors, lost: total - ok - errors, seconds: (Date.now() - t0) / 1e3, why: Object.fromEntries(seen) }));
