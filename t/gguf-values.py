#!/usr/bin/python3
"""gguf-values.py PACK MODEL.gguf - an independent check of q4nx-gguf's values for t/gguf.bats.

The pack side: model.onnx's initializers (onnx + numpy), MatMulNBits weights dequantised here as
ContribOperators.md defines them ((code - zero point) * scale, low nibble first, zero points packed
two per byte, default 8). The GGUF side: llama.cpp's own Python reader and dequantisers (gguf-py from
the llama.cpp source tree, on PYTHONPATH). The mapping from pack names to llama.cpp tensor names, the
fusions (qkv as the pack has it, phi3 gate|up) and llama's q/k row permutation (as llama.cpp's
convert_hf_to_gguf.py permutes: reshape(heads, 2, hd/2, K).swapaxes(1, 2)) are written here again, not
taken from the C code. olmo: no norm tensors (llama.cpp's olmo norms have no parameters). Every value
must be equal, but rope_freqs (Llama 3 rope scaling) and rope_factors_short / _long (LongRoPE), which
q4nx-gguf reads off the RoPE caches: they are computed here from config.json's rope_scaling as llama.cpp's
converter does, and must agree within 2e-3; so must LongRoPE's rope.scaling.attn_factor (the converter's
sqrt(1 + ln(max / original) / ln(original))), and rope.scaling.original_context_length must be the original.
Prints "ok N tensors, M values" or the first difference, exit 1."""
import importlib.util
import json
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper

import gguf  # llama.cpp's gguf-py

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_read  # noqa: E402  (gguf-py's reader over a plain array: t/gguf_read.py)

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("oec", os.path.join(here, "oga-extract-check.py"))
oec = importlib.util.module_from_spec(spec)
spec.loader.exec_module(oec)


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def main():
    pack, path = sys.argv[1], sys.argv[2]
    model = onnx.load(os.path.join(pack, "model.onnx"), load_external_data=True)
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    nodes = {}
    for n in g.node:
        if n.op_type in ("MatMulNBits", "GatherBlockQuantized"):
            nodes[n.input[1] if n.op_type == "MatMulNBits" else n.input[0]] = n
    attrs = lambda n: {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
    genai = json.load(open(os.path.join(pack, "genai_config.json")))["model"]
    hf = json.load(open(os.path.join(pack, "config.json")))
    family = genai["type"]
    d = genai["decoder"]
    heads, kv, hd = d["num_attention_heads"], d["num_key_value_heads"], d["head_size"]

    def value(name):
        """the float32 values of an initializer: dequantised when quantised"""
        arr = numpy_helper.to_array(inits[name])
        n = nodes.get(name)
        if n is None:
            return arr.astype(np.float32)
        a = attrs(n)
        if n.op_type == "MatMulNBits":
            N, K, B = a["N"], a["K"], a["block_size"]
            codes = arr.reshape(N, -1)
        else:  # GatherBlockQuantized: data [V, K/2], scales [V, kb], zero points [V, ceil(kb/2)]
            B = a["block_size"]
            N, K = arr.shape[0], arr.shape[1] * 2
            codes = arr.reshape(N, -1)
        kb = (K + B - 1) // B
        q = np.zeros((N, codes.shape[1] * 2), np.float32)
        q[:, 0::2] = codes & 15
        q[:, 1::2] = codes >> 4
        q = q[:, :kb * B].reshape(N, kb, B)
        s = numpy_helper.to_array(inits[n.input[2]]).astype(np.float32).reshape(N, kb)
        if len(n.input) > 3 and n.input[3]:
            zp = numpy_helper.to_array(inits[n.input[3]])
            if zp.dtype == np.uint8 and zp.size == N * ((kb + 1) // 2):
                zp = zp.reshape(N, -1)
                z = np.zeros((N, kb), np.float32)
                for j in range(kb):
                    z[:, j] = (zp[:, j // 2] >> (4 * (j % 2))) & 15
            else:
                z = zp.astype(np.float32).reshape(N, kb)
        else:
            z = np.full((N, kb), 8, np.float32)
        w = (q - z[:, :, None]) * s[:, :, None]
        return w.reshape(N, kb * B)[:, :K].astype(np.float32)

    params = {i for n in nodes.values() for i in n.input[2:]}  # scales and zero points
    by_role = {}
    for name in inits:
        r = oec.role_from_name(name)
        if r and name not in params:
            by_role[r] = name

    def role(r):
        if r not in by_role:
            fail("the pack has no initializer for role %s" % r)
        return value(by_role[r])

    def perm(w, nh):  # llama.cpp's convert_hf_to_gguf.py permute (rotate-halves -> adjacent pairs)
        if family not in ("llama", "mistral", "olmo"):
            return w
        return w.reshape(nh, 2, w.shape[0] // nh // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)

    want = {}
    tied = hf.get("tie_word_embeddings", False)
    want["token_embd.weight"] = role("lm_head") if tied else role("embed")
    if not tied:
        want["output.weight"] = role("lm_head")
    norms = family != "olmo"
    if norms:
        want["output_norm.weight"] = role("final_norm")
    rs = hf.get("rope_scaling") or {}
    if rs.get("rope_type", rs.get("type")) == "llama3":
        base, dim = hf["rope_theta"], hd
        inv = base ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)
        w = 2 * np.pi / inv
        lo, hi, old = rs["low_freq_factor"], rs["high_freq_factor"], rs["original_max_position_embeddings"]
        smooth = (old / w - lo) / (hi - lo)
        want["rope_freqs.weight"] = np.where(w < old / hi, 1.0, np.where(w > old / lo, rs["factor"],
                                             1 / ((1 - smooth) / rs["factor"] + smooth))).astype(np.float32)
    long_meta = None
    if rs.get("rope_type", rs.get("type")) in ("longrope", "su"):
        want["rope_factors_short.weight"] = np.array(rs["short_factor"], dtype=np.float32)
        want["rope_factors_long.weight"] = np.array(rs["long_factor"], dtype=np.float32)
        orig, mx = hf["original_max_position_embeddings"], hf["max_position_embeddings"]
        long_meta = (orig, float(np.sqrt(1 + np.log(mx / orig) / np.log(orig))) if mx > orig else 1.0)
    for i in range(d["num_hidden_layers"]):
        L = "layers.%d." % i
        b = "blk.%d." % i
        if norms:
            want[b + "attn_norm.weight"] = role(L + "input_norm")
            want[b + "ffn_norm.weight"] = role(L + "post_attn_norm")
        if L + "attn.qkv" in by_role:
            w = role(L + "attn.qkv")
            qd, kd = heads * hd, kv * hd
            want[b + "attn_qkv.weight"] = np.concatenate([perm(w[:qd], heads), perm(w[qd:qd + kd], kv), w[qd + kd:]])
        else:
            want[b + "attn_q.weight"] = perm(role(L + "attn.q"), heads)
            want[b + "attn_k.weight"] = perm(role(L + "attn.k"), kv)
            want[b + "attn_v.weight"] = role(L + "attn.v")
        for r, gname in (("attn.qkv_bias", "attn_qkv.bias"), ("attn.q_bias", "attn_q.bias"),
                         ("attn.k_bias", "attn_k.bias"), ("attn.v_bias", "attn_v.bias"),
                         ("attn.q_norm", "attn_q_norm.weight"), ("attn.k_norm", "attn_k_norm.weight")):
            if L + r in by_role:
                want[b + gname] = role(L + r)
        want[b + "attn_output.weight"] = role(L + "attn.o")
        if family in ("phi3", "chatglm"):
            want[b + "ffn_up.weight"] = np.concatenate([role(L + "mlp.gate"), role(L + "mlp.up")])
        else:
            want[b + "ffn_gate.weight"] = role(L + "mlp.gate")
            want[b + "ffn_up.weight"] = role(L + "mlp.up")
        want[b + "ffn_down.weight"] = role(L + "mlp.down")

    r = gguf_read.read(path)
    have = {t.name: t for t in r.tensors}
    if long_meta:
        arch = bytes(r.fields["general.architecture"].parts[-1]).decode()

        def meta(k):
            f = r.fields.get("%s.rope.scaling.%s" % (arch, k))
            return None if f is None else f.parts[f.data[0]][0]
        got_orig, got_af = meta("original_context_length"), meta("attn_factor")
        if got_orig != long_meta[0] or got_af is None or abs(got_af / long_meta[1] - 1) > 2e-3:
            fail("LongRoPE: original_context_length %r, attn_factor %r; llama.cpp's converter writes %r, %r" % (
                got_orig, got_af, long_meta[0], long_meta[1]))
    if set(have) != set(want):
        fail("tensor names: GGUF only %s; pack only %s" % (sorted(set(have) - set(want))[:5],
                                                           sorted(set(want) - set(have))[:5]))
    values = 0
    for name, w in want.items():
        t = have[name]
        got = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(w.shape)
        if name.startswith("rope_f") and np.allclose(got, w, rtol=2e-3, atol=0):
            values += w.size
            continue
        if not np.array_equal(got, w):
            idx = np.argwhere(got != w)[0]
            fail("%s (%s): %d of %d values differ; first at %s: pack %r, GGUF %r" % (
                name, t.tensor_type.name, int((got != w).sum()), w.size, tuple(int(x) for x in idx),
                float(w[tuple(idx)]), float(got[tuple(idx)])))
        values += w.size
    print("ok %d tensors, %d values" % (len(want), values))


if __name__ == "__main__":
    main()
