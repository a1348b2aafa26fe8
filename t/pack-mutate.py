#!/usr/bin/python3
"""pack-mutate.py SRC DST MUTATION - a copy of pack SRC with one edit of its model.onnx, for the
edge cases of t/oga-info.bats that the malformed fixtures (tools/mkbad.py) do not cover. Big files
are symlinked; model.onnx is rewritten with the onnx package (external data is not loaded).

Mutations:
  escape-location   an initializer's external location "../model.onnx.data"    -> external_data
  float-zeros       a MatMulNBits with float zero points [N*k_blocks]            -> tensor_dtype
  k-mismatch        a MatMulNBits K attribute that contradicts its weight        -> tensor_shape
  plain-lm-head     lm_head as an unquantised MatMul over a float initializer    -> unsupported_op
  unassigned        an extra float weight read by a node the walk does not know  -> unassigned
  inline-norms      norm weights inline: raw_data, float_data, fp16 in int32_data -> still importable
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def main():
    src, dst, what = sys.argv[1:4]
    os.makedirs(dst, exist_ok=True)
    for f in os.listdir(src):
        if f != "model.onnx" and not f.startswith("."):
            p = os.path.join(dst, f)
            if not os.path.exists(p):
                os.symlink(os.path.join(src, f), p)
    m = onnx.load(os.path.join(src, "model.onnx"), load_external_data=False)
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    mnb = [n for n in g.node if n.op_type == "MatMulNBits"]
    attr = lambda n, k: [a for a in n.attribute if a.name == k][0]

    if what == "escape-location":
        t = inits[mnb[0].input[2]]
        for e in t.external_data:
            if e.key == "location":
                e.value = "../model.onnx.data"
    elif what == "float-zeros":
        n = mnb[0]
        N, K, B = attr(n, "N").i, attr(n, "K").i, attr(n, "block_size").i
        kb = (K + B - 1) // B
        dt = inits[n.input[2]].data_type
        z = np.full(N * kb, 8, np.float16 if dt == TensorProto.FLOAT16 else np.float32)
        g.initializer.append(numpy_helper.from_array(z, "float_zero_points"))
        del n.input[3:]
        n.input.append("float_zero_points")
    elif what == "k-mismatch":
        attr(mnb[0], "K").i += attr(mnb[0], "block_size").i
    elif what == "plain-lm-head":
        lm = [n for n in mnb if "logits" in n.output][0]
        N, K = attr(lm, "N").i, attr(lm, "K").i
        dt = inits[lm.input[2]].data_type
        w = np.zeros((K, N), np.float16 if dt == TensorProto.FLOAT16 else np.float32)
        g.initializer.append(numpy_helper.from_array(w, "lm_head.weight"))
        g.node.remove(lm)
        g.node.append(helper.make_node("MatMul", [lm.input[0], "lm_head.weight"], ["logits"], name="/lm_head/MatMul"))
    elif what == "unassigned":
        g.initializer.append(numpy_helper.from_array(np.ones(64, np.float32), "stray.weight"))
        g.node.append(helper.make_node("Identity", ["stray.weight"], ["stray_out"], name="/stray/Identity"))
    elif what == "inline-norms":
        data = open(os.path.join(src, "model.onnx.data"), "rb").read()
        norms = [t for t in g.initializer if t.name.endswith("layernorm.weight")]
        for i, t in enumerate(norms[:3]):
            loc = {e.key: e.value for e in t.external_data}
            raw = data[int(loc["offset"]):int(loc["offset"]) + int(loc["length"])]
            del t.external_data[:]
            t.data_location = TensorProto.DEFAULT
            dtype = np.float16 if t.data_type == TensorProto.FLOAT16 else np.float32
            arr = np.frombuffer(raw, dtype)
            if i == 0:
                t.raw_data = raw
            elif dtype == np.float32:
                t.float_data.extend(arr.tolist())
            else:
                t.int32_data.extend(arr.view(np.uint16).astype(np.int32).tolist())
    else:
        sys.exit("unknown mutation " + what)
    onnx.save(m, os.path.join(dst, "model.onnx"))


if __name__ == "__main__":
    main()
