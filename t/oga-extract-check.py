#!/usr/bin/python3
"""oga-extract-check.py PACK STREAM - an independent reader for t/oga-extract.bats.

Parses the OGAX stream (framing per ogax(5)) in Python and compares it with the pack as the onnx
package loads it (Debian python3-onnx + numpy): every initializer of model.onnx must reach the
stream exactly once (as a tensor's codes / data, or as the scales / zero points of a MatMulNBits
tensor), byte for byte; roles are derived here from the builder's initializer names (the C code
derives them from the graph, so the two must agree); q4 shapes are checked against the MatMulNBits
attributes and the model frame against config.json / genai_config.json. Prints "ok N tensors" or
the first mismatch, exit 1."""
import json
import os
import re
import struct
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def frames(path):
    with open(path, "rb") as f:
        while True:
            fh = f.read(16)
            if not fh:
                fail("no end frame")
            if len(fh) < 16 or fh[:4] != b"OGAX":
                fail("bad frame header")
            hl, pl = struct.unpack("<IQ", fh[4:])
            hdr = json.loads(f.read(hl))
            payload = f.read(pl)
            if len(payload) != pl:
                fail("truncated payload")
            yield hdr, payload
            if hdr["type"] == "end":
                if f.read(1):
                    fail("bytes after the end frame")
                return


def role_from_name(name):
    """The builder's naming conventions (tools/mkpack.py, reference/oga-format.md)."""
    m = re.match(r"model\.layers\.(\d+)\.(.*)$", name)
    if name in ("cos_cache", "sin_cache"):
        return "rope." + name[:3]
    if name.startswith("lm_head."):
        return "lm_head"
    if name in ("model.embed_tokens.weight", "embed.gbq.data"):
        return "embed"
    if not m:
        return None
    i, rest = m.group(1), m.group(2)
    norms = {"input_layernorm": "layers.%s.input_norm" % i, "post_attention_layernorm": "layers.%s.post_attn_norm" % i,
             "final_norm_layernorm": "final_norm"}
    m1 = re.match(r"(\w+)\.(weight|bias)$", rest)
    if m1 and m1.group(1) in norms:   # LayerNorms (OLMo) have a bias too
        return norms[m1.group(1)] + ("_bias" if m1.group(2) == "bias" else "")
    m2 = re.match(r"(attn|mlp)\.(\w+?)_proj\.(MatMul\.weight_Q4|MatMulNBits\.qweight|Add\.bias)$", rest)
    if m2:
        return "layers.%s.%s.%s%s" % (i, m2.group(1), m2.group(2), "_bias" if m2.group(3) == "Add.bias" else "")
    m3 = re.match(r"attn\.(q|k)_norm\.layernorm\.weight$", rest)
    if m3:
        return "layers.%s.attn.%s_norm" % (i, m3.group(1))
    return None


def main():
    pack, stream = sys.argv[1], sys.argv[2]
    model = onnx.load(os.path.join(pack, "model.onnx"), load_external_data=True)
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    mnb = {n.input[1]: n for n in g.node if n.op_type == "MatMulNBits"}
    gbq = {n.input[0]: n for n in g.node if n.op_type == "GatherBlockQuantized"}
    attrs = lambda n: {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
    genai = json.load(open(os.path.join(pack, "genai_config.json")))["model"]
    hf = json.load(open(os.path.join(pack, "config.json")))
    if hf.get("model_type") == "chatglm":   # ChatGLM's own keys
        hf = dict(hf, intermediate_size=hf["ffn_hidden_size"], rms_norm_eps=hf["layernorm_epsilon"],
                  rope_theta=None)
    seen = set()
    ntensors = 0
    mdl = None
    for hdr, payload in frames(stream):
        if hdr["type"] == "model":
            mdl = hdr["model"]
            d = genai["decoder"]
            want = dict(vocab_size=genai["vocab_size"], hidden_size=d["hidden_size"], num_layers=d["num_hidden_layers"],
                        num_heads=d["num_attention_heads"], num_kv_heads=d["num_key_value_heads"], head_dim=d["head_size"],
                        context_length=genai["context_length"], intermediate_size=hf["intermediate_size"],
                        bos_token_id=genai["bos_token_id"], pad_token_id=genai["pad_token_id"],
                        tie_embeddings=hf["tie_word_embeddings"], family=genai["type"])
            eos = genai["eos_token_id"]
            want["eos_token_ids"] = eos if isinstance(eos, list) else [eos]
            for k, v in want.items():
                if mdl.get(k) != v:
                    fail("model.%s = %r, pack says %r" % (k, mdl.get(k), v))
            eps = hf.get("rms_norm_eps", hf.get("layer_norm_eps", 1e-5))   # OLMo's config has none: 1e-5
            if mdl.get("norm") != ("layer" if genai["type"] == "olmo" else "rms"):
                fail("model.norm = %r for a %s pack" % (mdl.get("norm"), genai["type"]))
            if abs(mdl["rms_norm_eps"] - eps) > 1e-12 or mdl["rope"]["theta"] != hf["rope_theta"]:   # chatglm: None
                fail("model eps/theta %r %r" % (mdl["rms_norm_eps"], mdl["rope"]["theta"]))
            continue
        if hdr["type"] == "asset":
            want = open(os.path.join(pack, hdr["name"]), "rb").read()
            if payload != want:
                fail("asset %s differs from the pack's file" % hdr["name"])
            continue
        if hdr["type"] == "end":
            break
        ntensors += 1
        name, role = hdr["name"], hdr["role"]
        if role != role_from_name(name):
            fail("tensor %s: role %s, its builder name says %s" % (name, role, role_from_name(name)))
        if name not in inits:
            fail("tensor %s is not an initializer" % name)
        parts = {p["name"]: payload[p["offset"]:p["offset"] + p["size"]] for p in hdr["parts"]}
        if hdr["dtype"] == "q4" and hdr["quant"]["source_op"] == "GatherBlockQuantized":
            n = gbq.get(name)
            if n is None:
                fail("tensor %s: not the data of a GatherBlockQuantized" % name)
            a = attrs(n)
            data = numpy_helper.to_array(inits[name])
            V, K, B = data.shape[0], data.shape[1] * 2, a["block_size"]
            kb = (K + B - 1) // B
            padded = np.zeros((V, kb * B // 2), np.uint8)   # MatMulNBits rows are whole blocks
            padded[:, :K // 2] = data
            if hdr["shape"] != [V, K] or parts["codes"] != padded.tobytes():
                fail("tensor %s: GatherBlockQuantized codes or shape differ" % name)
            for part, slot in (("scales", 2), ("zeros", 3)):
                if len(n.input) > slot and n.input[slot]:
                    if parts.get(part) != numpy_helper.to_array(inits[n.input[slot]]).tobytes():
                        fail("tensor %s: part %s differs" % (name, part))
                    seen.add(n.input[slot])
            seen.add(name)
        elif hdr["dtype"] == "q4":
            n = mnb.get(name)
            if n is None:
                fail("q4 tensor %s is not a MatMulNBits weight" % name)
            a = attrs(n)
            if hdr["shape"] != [a["N"], a["K"]] or hdr["quant"]["block_size"] != a["block_size"]:
                fail("tensor %s: shape %s block %s, node says N=%d K=%d block %d" % (
                    name, hdr["shape"], hdr["quant"]["block_size"], a["N"], a["K"], a["block_size"]))
            checks = [("codes", n.input[1]), ("scales", n.input[2])]
            if len(n.input) > 3 and n.input[3]:
                checks.append(("zeros", n.input[3]))
            elif "zeros" in parts:
                fail("tensor %s: zeros part but the node has no zero points" % name)
            for part, iname in checks:
                if parts.get(part) != numpy_helper.to_array(inits[iname]).tobytes():
                    fail("tensor %s: part %s differs from initializer %s" % (name, part, iname))
                seen.add(iname)
        else:
            arr = numpy_helper.to_array(inits[name])
            if list(arr.shape) != hdr["shape"] or parts["data"] != arr.tobytes():
                fail("tensor %s: data or shape differs from the initializer" % name)
            seen.add(name)
    missing = sorted(set(inits) - seen)
    if missing:
        fail("initializers not in the stream: %s" % ", ".join(missing[:5]))
    print("ok %d tensors" % ntensors)


if __name__ == "__main__":
    main()
