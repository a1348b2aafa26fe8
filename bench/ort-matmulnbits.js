#!/usr/bin/env node
// Times onnxruntime's MatMulNBits on a one-node model (bench/mk-matmulnbits.py) with M activation
// rows: `runs` batches of `reps` session.run calls after a warm-up. Reports, as JSON on stdout,
// the node's own kernel time from ORT's profiler (interquartile mean per batch of whole-microsecond readings; the median over batches) and the
// wall time of session.run (median), so binding overhead can be told apart from the kernel.
// usage: node bench/ort-matmulnbits.js MODEL.onnx M K [threads=2] [reps=auto] [runs=5]
const path = require('path');
const fs = require('fs');
const os = require('os');
const nm = process.env.OGAKIT_NODE_MODULES || path.join(__dirname, '..', '.cache', 'node', 'node_modules');
const ort = require(path.join(nm, 'onnxruntime-node'));

// mean of the middle half: robust to scheduling outliers, and finer than the profiler's whole microseconds
function iqmean(a) {
  const s = [...a].sort((x, y) => x - y);
  const lo = Math.floor(s.length / 4), hi = Math.max(lo + 1, Math.ceil(s.length * 3 / 4));
  const m = s.slice(lo, hi);
  return m.reduce((t, v) => t + v, 0) / m.length;
}

function median(a) {
  const s = [...a].sort((x, y) => x - y);
  const n = s.length;
  return n % 2 ? s[(n - 1) / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

async function main() {
  const [model, Ms, Ks, th = '2', repsArg = '0', runsArg = '5'] = process.argv.slice(2);
  if (!model || !Ms || !Ks) {
    process.stderr.write('usage: node bench/ort-matmulnbits.js MODEL.onnx M K [threads] [reps] [runs]\n');
    process.exit(2);
  }
  const M = +Ms, K = +Ks, threads = +th, runs = +runsArg;
  const prefix = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'ortprof-')), 'p');
  const sess = await ort.InferenceSession.create(model, {
    intraOpNumThreads: threads, interOpNumThreads: 1, executionMode: 'sequential',
    graphOptimizationLevel: 'all', enableProfiling: true, profileFilePrefix: prefix,
  });
  const x = new Float32Array(M * K);
  let seed = 12345;
  for (let i = 0; i < x.length; i++) {
    let s = 0;
    for (let j = 0; j < 3; j++) { seed = (seed * 1103515245 + 12345) >>> 0; s += seed / 2147483648 - 1; }
    x[i] = s;
  }
  const feeds = { A: new ort.Tensor('float32', x, [M, K]) };
  for (let i = 0; i < 3; i++) await sess.run(feeds);
  let reps = +repsArg;
  if (!reps) {
    const t0 = process.hrtime.bigint();
    await sess.run(feeds);
    const one = Number(process.hrtime.bigint() - t0) / 1e9;
    reps = Math.max(5, Math.min(2000, Math.floor(0.3 / Math.max(one, 1e-6))));
  }
  const wall = [];
  const marks = []; // run index boundaries for profile batches
  for (let r = 0; r < runs; r++) {
    for (let i = 0; i < reps; i++) {
      const t0 = process.hrtime.bigint();
      await sess.run(feeds);
      wall.push(Number(process.hrtime.bigint() - t0) / 1e6);
    }
    marks.push(wall.length);
  }
  await sess.endProfiling();
  const dir = path.dirname(prefix);
  const files = fs.readdirSync(dir).filter((f) => f.endsWith('.json'));
  if (files.length !== 1) throw new Error('no profile written in ' + dir);
  const file = path.join(dir, files[0]);
  const ev = JSON.parse(fs.readFileSync(file, 'utf8'));
  fs.rmSync(path.dirname(file), { recursive: true, force: true });
  const kern = ev.filter((e) => e.cat === 'Node' && /_kernel_time$/.test(e.name) && e.args && e.args.op_name === 'MatMulNBits')
    .map((e) => e.dur / 1e3);
  // the first 3 + 1 calibration runs are warm-up: take the last runs*reps kernel times
  const timed = kern.slice(kern.length - runs * reps);
  const batch = [];
  for (let r = 0; r < runs; r++) {
    const b = timed.slice(r * reps, (r + 1) * reps);
    batch.push(iqmean(b));
  }
  const out = {
    engine: 'onnxruntime-node ' + (ort.env.versions ? ort.env.versions.common : ''),
    M, K, threads, reps, runs,
    kernel_ms: median(batch), kernel_ms_batches: batch,
    run_ms: median(wall),
  };
  process.stdout.write(JSON.stringify(out) + '\n');
}
main().catch((e) => { process.stderr.write('ort-matmulnbits: ' + (e.stack || e) + '\n'); process.exit(4); });
