#!/usr/bin/env node
// Oracle for t/npu-gemm.bats: runs onnxruntime's MatMulNBits (one-node model from
// bench/mk-matmulnbits.py) on the activations npu-gemm used (DIR/X.f32) and compares with npu-gemm's
// result (DIR/Y.f32). Prints {"max_abs_err", "max_abs_ref", "rel_err"} (rel = max|Δ| / max|ref|).
// usage: node t/npu-gemm-ort.js DIR MODEL.onnx
const path = require('path');
const fs = require('fs');
const nm = process.env.OGAKIT_NODE_MODULES || path.join(__dirname, '..', '.cache', 'node', 'node_modules');
const ort = require(path.join(nm, 'onnxruntime-node'));

function f32(file) {
  const b = fs.readFileSync(file);
  return new Float32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.length));
}

(async () => {
  const [dir, model] = process.argv.slice(2);
  const meta = JSON.parse(fs.readFileSync(path.join(dir, 'meta.json'), 'utf8'));
  const x = f32(path.join(dir, 'X.f32')), y = f32(path.join(dir, 'Y.f32'));
  const M = x.length / meta.K;
  const sess = await ort.InferenceSession.create(model, { intraOpNumThreads: 1 });
  const out = await sess.run({ A: new ort.Tensor('float32', x, [M, meta.K]) });
  const r = out.Y.data;
  if (r.length !== y.length) throw new Error(`result length ${r.length} != ${y.length}`);
  let d = 0, m = 0;
  for (let i = 0; i < r.length; i++) {
    d = Math.max(d, Math.abs(r[i] - y[i]));
    m = Math.max(m, Math.abs(r[i]));
  }
  process.stdout.write(JSON.stringify({ max_abs_err: d, max_abs_ref: m, rel_err: d / m }) + '\n');
})().catch((e) => { process.stderr.write('npu-gemm-ort: ' + (e.stack || e) + '\n'); process.exit(4); });
