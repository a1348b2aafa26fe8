#!/usr/bin/python3
"""npref.py - an independent numpy forward pass over an OGA fixture pack, to check that the
pack's graph means what the Hugging Face model means (the check on mkpack.py itself).

  npref.py PACK --ids '[1,2,3]' [--logits-f32 FILE]
      -> JSON {"logits": [[V floats] per position]} on stdout, or the rows as raw
         little-endian float32 [positions][V] in FILE (as ort-ref.js --logits-f32 writes)

Reads weights from the pack's initializers by name and dequantises them with the documented
MatMulNBits formula W[k,n] = (q - zp) * scale (zp 8 when absent); RoPE from config.json's
rope_theta (rotate-half, as Hugging Face does); causal grouped-query attention; float64 math.
It does not use the graph's nodes, so a graph that wires weights wrongly disagrees with it.
"""
import json
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def load(pack):
    m = onnx.load(os.path.join(pack, "model.onnx"), load_external_data=False)
    data = open(os.path.join(pack, "model.onnx.data"), "rb").read()
    T = {}
    for t in m.graph.initializer:
        ext = {e.key: e.value for e in t.external_data}
        off, ln = int(ext["offset"]), int(ext["length"])
        t2 = onnx.TensorProto()
        t2.CopyFrom(t)
        del t2.external_data[:]
        t2.data_location = onnx.TensorProto.DEFAULT
        t2.raw_data = data[off:off + ln]
        T[t.name] = numpy_helper.to_array(t2)
    attrs = {}
    for n in m.graph.node:
        if n.op_type == "MatMulNBits":
            attrs[n.input[1]] = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
    return T, attrs


def deq(T, attrs, bname, sname, zname):
    a = attrs[bname]
    blob = T[bname]
    n, k, bs = a["N"], a["K"], a["block_size"]
    kb = (k + bs - 1) // bs
    blob = blob.reshape(n, kb, bs // 2)
    q = np.empty((n, kb, bs), np.float64)
    q[..., 0::2] = blob & 0xF
    q[..., 1::2] = blob >> 4
    s = T[sname].astype(np.float64).reshape(n, kb)
    if zname:
        zp = T[zname].reshape(n, -1)
        z = np.empty((n, zp.shape[1] * 2), np.float64)
        z[:, 0::2] = zp & 0xF
        z[:, 1::2] = zp >> 4
        z = z[:, :kb]
    else:
        z = np.full((n, kb), 8.0)
    w = (q - z[..., None]) * s[..., None]
    return w.reshape(n, kb * bs)[:, :k]          # [N, K]: y = x @ w.T


def weight(T, attrs, node_base):
    """node_base '/model/layers.0/attn/q_proj' -> float [N, K] from either naming style."""
    p = node_base[1:].replace("/", ".")
    if p + ".MatMulNBits.qweight" in T:
        b = p + ".MatMulNBits."
        return deq(T, attrs, b + "qweight", b + "scales", b + "qzeros")
    b = p + ".MatMul.weight"
    return deq(T, attrs, b + "_Q4", b + "_scales", b + "_zero_points" if b + "_zero_points" in T else None)


def forward(pack, ids):
    T, attrs = load(pack)
    gc = json.load(open(os.path.join(pack, "genai_config.json")))
    hf = json.load(open(os.path.join(pack, "config.json")))
    d = gc["model"]["decoder"]
    fam = gc["model"]["type"]
    nl, nh, nkv, hd = d["num_hidden_layers"], d["num_attention_heads"], d["num_key_value_heads"], d["head_size"]
    eps, theta = hf["rms_norm_eps"], hf["rope_theta"]
    f = lambda name: T[name].astype(np.float64)

    def rms(x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w

    lm = weight(T, attrs, "/lm_head")
    if "model.embed_tokens.weight" in T:
        x = f("model.embed_tokens.weight")[ids]
    else:
        x = lm[ids]
    S = len(ids)
    inv = 1.0 / theta ** (np.arange(0, hd, 2) / hd)
    ang = np.outer(np.arange(S), inv)
    cos, sin = np.cos(ang), np.sin(ang)

    def rope(t):  # [S, H, hd]
        a, b = t[..., :hd // 2], t[..., hd // 2:]
        c, s = cos[:, None, :], sin[:, None, :]
        return np.concatenate([a * c - b * s, b * c + a * s], -1)

    for i in range(nl):
        L, P = "/model/layers.%d" % i, "model.layers.%d." % i
        h = rms(x, f(P + "input_layernorm.weight"))
        if P + "attn.qkv_proj.MatMul.weight_Q4" in T:
            qkv = h @ weight(T, attrs, L + "/attn/qkv_proj").T
            if P + "attn.qkv_proj.Add.bias" in T:
                qkv = qkv + f(P + "attn.qkv_proj.Add.bias")
            q, k, v = np.split(qkv, [nh * hd, nh * hd + nkv * hd], axis=-1)
        else:
            out = []
            for c in "qkv":
                y = h @ weight(T, attrs, L + "/attn/%s_proj" % c).T
                if P + "attn.%s_proj.Add.bias" % c in T:
                    y = y + f(P + "attn.%s_proj.Add.bias" % c)
                out.append(y)
            q, k, v = out
        q, k, v = q.reshape(S, nh, hd), k.reshape(S, nkv, hd), v.reshape(S, nkv, hd)
        if fam == "qwen3":
            q = rms(q, f(P + "attn.q_norm.layernorm.weight"))
            k = rms(k, f(P + "attn.k_norm.layernorm.weight"))
        q, k = rope(q), rope(k)
        rep = nh // nkv
        att = np.empty((S, nh, hd))
        mask = np.triu(np.full((S, S), -np.inf), 1)
        for hh in range(nh):
            sc = q[:, hh] @ k[:, hh // rep].T / np.sqrt(hd) + mask
            sc = np.exp(sc - sc.max(-1, keepdims=True))
            sc /= sc.sum(-1, keepdims=True)
            att[:, hh] = sc @ v[:, hh // rep]
        x = x + att.reshape(S, nh * hd) @ weight(T, attrs, L + "/attn/o_proj").T
        h = rms(x, f(P + "post_attention_layernorm.weight"))
        g = h @ weight(T, attrs, L + "/mlp/gate_proj").T
        u = h @ weight(T, attrs, L + "/mlp/up_proj").T
        x = x + (g / (1 + np.exp(-g)) * u) @ weight(T, attrs, L + "/mlp/down_proj").T
    h = rms(x, f("model.layers.%d.final_norm_layernorm.weight" % nl))
    return h @ lm.T


if __name__ == "__main__":
    a = sys.argv[1:]
    if len(a) not in (3, 5) or a[1] != "--ids" or (len(a) == 5 and a[3] != "--logits-f32"):
        sys.stderr.write(__doc__)
        sys.exit(2)
    logits = forward(a[0], json.loads(a[2])).astype(np.float32)
    if len(a) == 5:
        # raw little-endian float32 [positions][V], as ort-ref.js --logits-f32 writes
        logits.astype("<f4").tofile(a[4])
        json.dump({"positions": logits.shape[0], "logits_f32": a[4]}, sys.stdout)
    else:
        json.dump({"logits": logits.tolist()}, sys.stdout)
