#!/usr/bin/python3
"""gemma2-ref.py - an independent numpy (float64) reference of the Hugging Face Gemma 2 forward pass,
checked against onnxruntime's logits on a gemma2 pack that tools/mkpack.py wrote.

  gemma2-ref.py PACK W.npz [--ids JSON] [--tol T] [--window hf|plus1] [--embed-scale hf|builder]
                [--feed prefill|step] [--json]

PACK is a pack from `mkpack.py --family gemma2 ... --dump-weights W.npz` (or from --config/--weights W.npz);
W.npz the Hugging Face float weights. The reference reads only PACK/config.json (the Hugging Face config)
and, from model.onnx, how the projections were quantised (MatMulNBits block_size, zero points or not,
io dtype): it quantises and dequantises the projection and lm_head weights (and, when tied, the
embedding) with mkpack.py's quantize/dequantize, so that the comparison sees no int4 error, then runs
Gemma 2 as transformers' modeling_gemma2 does:
  h = embed[ids] * sqrt(hidden); per layer: h += post_attention_norm(attn(input_norm(h)));
  h += post_feedforward_norm(mlp(pre_feedforward_norm(h))); logits = final_norm(h) @ lm_head^T,
  then cap * tanh(logits / cap) (final_logit_softcapping);
  RMSNorm x / sqrt(mean(x^2) + eps) * (1 + w); RoPE on the two halves (rotate_half), theta rope_theta;
  scores q.k * query_pre_attn_scalar^-0.5, soft-capped cap * tanh(s / cap) (attn_logit_softcapping),
  causal, and on the sliding layers (layer_idx % 2 == 0) a window of sliding_window keys;
  mlp down(gelu_tanh(gate(x)) * up(x)).
The window: Hugging Face lets query i see key j iff i - j < sliding_window (sliding_window keys,
itself included): --window hf, the default. onnxruntime's GroupQueryAttention with local_window_size =
sliding_window (the attribute the builder writes) does the same since onnxruntime PR #25927 ("Fix Local
Attention off by 1 bug", September 2025; onnxruntime-node 1.30 here agrees with hf to ~5e-6, prefill and
step); before it, it kept local_window_size + 1 keys, i - j <= sliding_window: --window plus1. Both rules
are computed and printed, so a run shows which one the onnxruntime at hand follows.
The embedding scale: Hugging Face multiplies by sqrt(hidden) (--embed-scale hf, the default), the
builder's graph by sqrt(hidden) rounded to 2 decimals (--embed-scale builder): the same for hidden 64
or 256, but 11.31 for 128 (sqrt 11.3137), which moves fp32 logits by ~2e-3.
onnxruntime's logits come from `node tools/ort-ref.js PACK teacher --feed F` (F: prefill, default).
The graph's local_window_size per layer is read and printed too (a mismatch with the layers the
reference slides is an error).

Prints one line per window rule: max |logit diff| and the position where it is largest; exits 0 when the
chosen rule's max |diff| < tol (default 1e-4 for fp32 io, 5e-2 for fp16 io), 1 when not, 2 usage, 3 on an
unreadable pack / weights, 4 when onnxruntime fails.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import mkpack  # noqa: E402  (quantize / dequantize only)

DEFAULT_IDS = [2, 651, 6037, 8426, 25341, 4248, 1163, 573, 27894, 5929, 235265,
               1417, 603, 476, 2121, 576, 573, 71129, 5912, 235265]  # 20 ids


def die(msg, code):
    sys.stderr.write("gemma2-ref: %s\n" % msg)
    sys.exit(code)


def graph_facts(pack):
    """Quantisation settings, io dtype and per-layer local_window_size from model.onnx (no weights loaded)."""
    m = onnx.load(os.path.join(pack, "model.onnx"), load_external_data=False)
    g = m.graph
    io = None
    for o in g.output:
        if o.name == "logits":
            io = np.float16 if o.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16 else np.float32
    block, sym, windows, gbq = None, None, [], False
    for n in g.node:
        a = {x.name: onnx.helper.get_attribute_value(x) for x in n.attribute}
        if n.op_type == "MatMulNBits" and "/layers.0/" in n.name and block is None:
            block = a["block_size"]
            sym = len(n.input) < 4 or n.input[3] == ""
        elif n.op_type == "GroupQueryAttention":
            windows.append(a.get("local_window_size", -1))
        elif n.op_type == "GatherBlockQuantized":
            gbq = True
    if io is None or block is None:
        die("%s/model.onnx: no logits output or no MatMulNBits in layer 0" % pack, 3)
    return dict(io=io, block=block, sym=sym, windows=windows, gbq=gbq)


def qdq(w, fx):
    """int4 quantise then dequantise as mkpack.py (and so the graph) does: float32 [N, K] -> float64."""
    blob, scale, zp = mkpack.quantize(np.asarray(w, np.float32), fx["block"], fx["sym"], fx["io"])
    return mkpack.dequantize(blob, scale, zp, w.shape[1]).astype(np.float64)


def rms(x, w1, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w1


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def forward(c, W, fx, ids, rule, stats=None, embed_scale="hf"):
    """Logits [S, V] (float64) of the Gemma 2 forward over ids; rule 'hf' (i - j < W), 'plus1' (i - j <= W)
    or 'nowindow' (no sliding window anywhere).
    stats (a dict) gets the scaled scores' spread before soft-capping (visible entries) and the residual
    stream's make-up."""
    h, nl = c["hidden_size"], c["num_hidden_layers"]
    nh, nkv = c["num_attention_heads"], c.get("num_key_value_heads", c["num_attention_heads"])
    hd = c.get("head_dim") or h // nh
    eps, theta = c.get("rms_norm_eps", 1e-6), c.get("rope_theta", 10000.0)
    scale = c.get("query_pre_attn_scalar", 256) ** -0.5
    acap, fcap = c.get("attn_logit_softcapping"), c.get("final_logit_softcapping")
    sw = c.get("sliding_window")
    tied = bool(c.get("tie_word_embeddings", False))
    io = fx["io"]
    f64 = lambda a: np.asarray(a, np.float32).astype(np.float64)
    # norm weights as stored: 1 + w (float32 when the graph keeps norms in float32; it does for fp16 io too)
    nw = lambda name: f64(np.asarray(W[name], np.float32) + np.float32(1.0))
    lm = qdq(W["model.embed_tokens.weight"] if tied else W["lm_head.weight"], fx)
    emb_t = lm if tied else np.asarray(W["model.embed_tokens.weight"], np.float32).astype(io).astype(np.float64)

    S = len(ids)
    # HF: normalizer sqrt(hidden) in the hidden dtype; the builder rounds it to 2 decimals
    x = emb_t[ids] * (np.sqrt(h) if embed_scale == "hf" else float(np.round(np.sqrt(h), decimals=2)))
    pos = np.arange(S, dtype=np.float64)
    inv = 1.0 / (theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
    fr = np.outer(pos, inv)
    cos, sin = np.cos(fr), np.sin(fr)                 # [S, hd/2]

    def rope(t):                                      # t [heads, S, hd]; HF rotate_half
        a, b = t[..., : hd // 2], t[..., hd // 2:]
        return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)

    i_ = np.arange(S)[:, None]
    j_ = np.arange(S)[None, :]
    for layer in range(nl):
        p = "model.layers.%d." % layer
        y = rms(x, nw(p + "input_layernorm.weight"), eps)
        q = (y @ qdq(W[p + "self_attn.q_proj.weight"], fx).T).reshape(S, nh, hd).transpose(1, 0, 2)
        k = (y @ qdq(W[p + "self_attn.k_proj.weight"], fx).T).reshape(S, nkv, hd).transpose(1, 0, 2)
        v = (y @ qdq(W[p + "self_attn.v_proj.weight"], fx).T).reshape(S, nkv, hd).transpose(1, 0, 2)
        q, k = rope(q), rope(k)
        rep = nh // nkv
        k, v = np.repeat(k, rep, axis=0), np.repeat(v, rep, axis=0)
        s = q @ k.transpose(0, 2, 1) * scale
        if stats is not None:
            sv = s[np.broadcast_to((j_ <= i_)[None], s.shape)]
            stats.setdefault("score_absmax", []).append(float(np.abs(sv).max()))
            stats.setdefault("score_std", []).append(float(sv.std()))
        if acap:
            s = acap * np.tanh(s / acap)
        vis = j_ <= i_
        if sw and layer % 2 == 0:                     # HF Gemma 2: sliding on even layers
            vis &= (i_ - j_ < sw) if rule == "hf" else (i_ - j_ <= sw)
        if rule == "nowindow":
            vis = j_ <= i_
        s = np.where(vis[None], s, -np.inf)
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        s /= s.sum(axis=-1, keepdims=True)
        a = (s @ v).transpose(1, 0, 2).reshape(S, nh * hd)
        o = a @ qdq(W[p + "self_attn.o_proj.weight"], fx).T
        if stats is not None and layer == 0:
            stats["embed_rms"] = float(np.sqrt(np.mean(x * x)))
        x = x + rms(o, nw(p + "post_attention_layernorm.weight"), eps)
        y = rms(x, nw(p + "pre_feedforward_layernorm.weight"), eps)
        gt = y @ qdq(W[p + "mlp.gate_proj.weight"], fx).T
        up = y @ qdq(W[p + "mlp.up_proj.weight"], fx).T
        d = (gelu_tanh(gt) * up) @ qdq(W[p + "mlp.down_proj.weight"], fx).T
        x = x + rms(d, nw(p + "post_feedforward_layernorm.weight"), eps)
    y = rms(x, nw("model.norm.weight"), eps)
    logits = y @ lm.T
    if stats is not None:
        stats["residual_rms"] = float(np.sqrt(np.mean(x * x)))
        stats["logits_std_before_cap"] = float(logits.std())
        stats["logits_max_before_cap"] = float(logits.max(axis=1).mean())
    if fcap:
        logits = fcap * np.tanh(logits / fcap)
    return logits


def ort_logits(pack, ids, feed, V):
    with tempfile.TemporaryDirectory() as td:
        out = os.path.join(td, "logits.f32")
        cmd = ["node", os.path.join(HERE, "ort-ref.js"), pack, "teacher", "--ids", json.dumps(ids),
               "--feed", feed, "--logits-f32", out]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if r.returncode != 0:
            die("ort-ref.js failed (%d): %s" % (r.returncode, r.stderr.decode(errors="replace").strip()), 4)
        return np.fromfile(out, dtype="<f4").reshape(len(ids), V).astype(np.float64)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("pack")
    ap.add_argument("weights")
    ap.add_argument("--ids", help="JSON array of token ids (default: 20 fixed ids)")
    ap.add_argument("--tol", type=float)
    ap.add_argument("--window", choices=["hf", "plus1"], default="hf",
                    help="the rule the exit status judges by (default hf: i - j < sliding_window)")
    ap.add_argument("--feed", choices=["prefill", "step"], default="prefill")
    ap.add_argument("--embed-scale", choices=["hf", "builder"], default="hf",
                    help="sqrt(hidden) (hf, default) or sqrt(hidden) rounded to 2 decimals (builder)")
    ap.add_argument("--json", action="store_true", help="print the results as one JSON object")
    a = ap.parse_args(argv)
    try:
        c = json.load(open(os.path.join(a.pack, "config.json")))
        W = dict(np.load(a.weights))
    except (OSError, ValueError) as e:
        die(str(e), 3)
    if c.get("model_type") != "gemma2":
        die("%s/config.json: model_type %r, not gemma2" % (a.pack, c.get("model_type")), 3)
    fx = graph_facts(a.pack)
    V = c["vocab_size"]
    ids = json.loads(a.ids) if a.ids else [i % V for i in DEFAULT_IDS]
    if not ids or any(not isinstance(i, int) or not 0 <= i < V for i in ids):
        die("--ids: want a JSON array of ids in [0, %d)" % V, 2)
    tol = a.tol if a.tol is not None else (1e-4 if fx["io"] == np.float32 else 5e-2)
    sw = c.get("sliding_window")
    want_w = [sw if sw and i % 2 == 0 else -1 for i in range(c["num_hidden_layers"])]
    res = {"ids": len(ids), "io": np.dtype(fx["io"]).name, "block": fx["block"], "symmetric": fx["sym"],
           "graph_local_window_size": fx["windows"], "hf_sliding_layers_window": want_w}
    ref = ort_logits(a.pack, ids, a.feed, V)
    for rule in ("hf", "plus1"):
        d = np.abs(forward(c, W, fx, ids, rule, embed_scale=a.embed_scale) - ref)
        pos = int(d.max(axis=1).argmax())
        res[rule] = {"max_abs_diff": float(d.max()), "at_position": pos,
                     "max_abs_diff_per_position": [float("%.3g" % v) for v in d.max(axis=1)]}
    res["logits_std"] = float(ref.std())
    res["tol"] = tol
    res["embed_scale"] = a.embed_scale
    ok = res[a.window]["max_abs_diff"] < tol and fx["windows"] == want_w
    res["ok"] = ok
    if a.json:
        print(json.dumps(res))
    else:
        print("gemma2-ref: %s, %d ids, io %s, block %d %s; graph local_window_size %s (HF sliding layers: %s)"
              % (a.pack, len(ids), res["io"], fx["block"], "sym" if fx["sym"] else "asym", fx["windows"], want_w))
        for rule, desc in (("hf", "i - j < W"), ("plus1", "i - j <= W")):
            r = res[rule]
            print("  window %-5s (%s): max |logit diff| %.3g at position %d; per position %s"
                  % (rule, desc, r["max_abs_diff"], r["at_position"], r["max_abs_diff_per_position"]))
        print("  %s: --window %s, tol %g" % ("ok" if ok else "FAIL", a.window, tol))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
