#!/usr/bin/python3
"""Writes a one-node ONNX model, Y = MatMulNBits(A, B, scales[, zero_points]), from the weights that
`npu-gemm --shape N,K [--bits 8] --dump-source DIR` wrote (MatMulNBits source order, so both sides multiply the
same codes, scales and zero points). f16/bf16 scales are widened to float32 exactly, because the CPU
MatMulNBits kernel runs with float32 activations (T1 = float).

usage: /usr/bin/python3 bench/mk-matmulnbits.py DIR OUT.onnx [ACCURACY_LEVEL]
"""
import json
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def main():
    if len(sys.argv) not in (3, 4):
        sys.stderr.write(__doc__)
        sys.exit(2)
    d, out = sys.argv[1], sys.argv[2]
    acc = int(sys.argv[3]) if len(sys.argv) == 4 else 4
    meta = json.load(open(d + "/meta.json"))
    n, k, block, kb = meta["N"], meta["K"], meta["block"], meta["k_blocks"]
    bits = meta.get("bits", 4)  # 4: two codes (and zero points) a byte; 8: one
    codes = np.fromfile(d + "/B.u8", dtype=np.uint8).reshape(n, kb, block * bits // 8)
    sdt = meta["scale_dtype"]
    if sdt == "f32":
        scales = np.fromfile(d + "/scales.bin", dtype=np.float32)
    elif sdt == "f16":
        scales = np.fromfile(d + "/scales.bin", dtype=np.float16).astype(np.float32)
    else:  # bf16: the high half of a float32
        raw = np.fromfile(d + "/scales.bin", dtype=np.uint16).astype(np.uint32) << 16
        scales = raw.view(np.float32)
    inits = [numpy_helper.from_array(codes, "B"), numpy_helper.from_array(scales.reshape(n * kb), "scales")]
    inputs = ["A", "B", "scales"]
    if meta["zero_points"]:
        zp = np.fromfile(d + "/zero_points.u8", dtype=np.uint8).reshape(n, (kb * bits + 7) // 8)
        inits.append(numpy_helper.from_array(zp, "zero_points"))
        inputs.append("zero_points")
    node = helper.make_node("MatMulNBits", inputs, ["Y"], domain="com.microsoft", name="mm",
                            K=k, N=n, bits=bits, block_size=block, accuracy_level=acc)
    graph = helper.make_graph([node], "matmulnbits",
                              [helper.make_tensor_value_info("A", TensorProto.FLOAT, ["M", k])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["M", n])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    onnx.save(model, out)


if __name__ == "__main__":
    main()
