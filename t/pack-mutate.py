#!/usr/bin/python3
"""pack-mutate.py SRC DST MUTATION [SRC DST MUTATION ...] - a copy of pack SRC with one edit of its
model.onnx, for the edge cases of t/oga-info.bats that the malformed fixtures (tools/mkbad.py) do not
cover; several triples are made in turn in one run (Python and onnx start once). Big files are symlinked; model.onnx is rewritten with the onnx package (external data is not loaded).

Mutations:
  escape-location   an initializer's external location "../model.onnx.data"    -> external_data
  float-zeros       a MatMulNBits with float zero points [N*k_blocks]            -> tensor_dtype
  k-mismatch        a MatMulNBits K attribute that contradicts its weight        -> tensor_shape
  plain-lm-head     lm_head as an unquantised MatMul over a float [K, N] initializer (zeros) -> untied:
                    importable (a float lm_head); tied: refused (the embedding gathers orphaned codes)
  unassigned        an extra float weight read by a node the walk does not know  -> unassigned
  inline-norms      norm weights inline: raw_data, float_data, fp16 in int32_data -> still importable
  add-residual      every SkipSimplifiedLayerNormalization as Add + SimplifiedLayerNormalization
                    (older builders) -> still importable, same roles
  gbq-embed         (untied packs) the float Gather embedding re-quantised here into its own
                    GatherBlockQuantized (uint8 [V, K/2], 2-D scales, zero points on amd packs)
                    -> importable, embed with source_op GatherBlockQuantized
  many-values       300 extra (unused) graph inputs, so the reader's value table grows while it
                    indexes inputs and nodes (a use-after-realloc found by fuzz/pack_onnx)
                    -> still importable
  no-op-type        the first MatMulNBits node without an op_type (optional in the proto; was a
                    strcmp on NULL, fuzz/pack_onnx)                              -> refused, no crash
  weight-prepacked  the first MatMulNBits with weight_prepacked=1                -> unsupported_op
  gqa-window        every GroupQueryAttention with local_window_size=4 (sliding window) -> importable,
                    sliding_window {size 4, layers [0, 1]}
  gqa-window-mixed  layer 0 local_window_size=4, layer 1 local_window_size=8     -> unsupported_op
  gqa-softcap       every GroupQueryAttention with softcap=30                    -> importable, attn_softcap 30
  gqa-softcap-one   only layer 1's GroupQueryAttention with softcap=30           -> unsupported_op
  gqa-scale         every GroupQueryAttention with scale 1/head_dim, not 1/sqrt(head_dim) -> importable,
                    attn_scale 1/head_dim
  gqa-scale-mixed   layer 1's scale 1/head_dim, layer 0's 1/sqrt(head_dim)       -> unsupported_op
  gqa-scale-default every GroupQueryAttention without a scale attribute (1/sqrt(head_dim)) -> still importable
  rename-inputs     the graph inputs input_ids / attention_mask named tokens / attn_mask -> (with
                    genai_config.json's decoder.inputs naming them) importable
  zero-tensor       the first o_proj all zero (codes 0x88, scales 0): a valid pack  -> importable
  scale-nan         the first MatMulNBits's scales inline, the one of row 3, group 1 (group 0 when a row has
                    one) a NaN; prints "B-NAME ROW GROUP"              -> importable (the graph is whole),
                    refused by q4nx-pack; scale-inf the same with +infinity
  mha-bidirectional every GroupQueryAttention as a MultiHeadAttention with no mask and unidirectional 0
                    (scores over every position, not causal)                     -> unsupported_op
  mha-padding       the same with key_padding_mask (input 4) Cast(attention_mask): a padding mask only
                                                                                 -> unsupported_op
  mha-padding-causal  mha-padding with unidirectional 1                          -> no attention refusal
  gelu-gate         layer 0's gate activation Gelu(x) * x instead of Sigmoid(x) * x -> unsupported_op
  fused-bias        (qwen2) each q/k/v bias Add folded into its MatMulNBits as input 5 (bias)
                    -> importable, the same roles and qkv_bias true
  acc-partial       the first MatMulNBits without its accuracy_level attribute  -> importable, accuracy_level null
  proto-nulls       (tied packs) what the proto leaves optional, absent: a node without an op_type
                    first in the graph, the embedding's GatherBlockQuantized without a name and
                    with an attribute without a name                            -> still importable
  latin1-name       layer 0's Sigmoid node named in Latin-1 (b"...\\xe9"), not UTF-8 -> not_utf8
  gbq-huge          (untied amd packs) the embedding a GatherBlockQuantized over 2^24 rows of K = hidden
                    < block 128 (rows padded to a whole block: a 1 GiB copy), data, scales and zero
                    points in a sparse file huge.data                             -> out_of_memory
                    under a data limit below 1 GiB, never an abort
  fused-mlp-bias    a zero bias fused into layer 0's gate MatMulNBits (input 5)   -> unsupported_op
  logits-relu       a Relu between lm_head and the logits output (any pack)     -> unsupported_op
  softcap-unequal   (gemma2) the final soft cap's Mul by 30, its Div by the fixture's cap
                    (tanh(l / c) * 30 is no soft cap)                            -> unsupported_op
  embed-input-scale (gemma2) the embedding Mul by a new graph input "embed_scale", not a constant
                                                                                 -> unsupported_op
  norm-eps          the second Skip norm's epsilon times 10                      -> unsupported_op
  norm-eps-negative every norm's epsilon negated (config.json's was taken instead) -> unsupported_op
  norm-axis         the first norm over axis 1                                   -> unsupported_op
  norm-prebias      a bias added before the first Skip norm (its optional last input) -> unsupported_op
  norm-mixed        (olmo) layer 1's input norm a SkipSimplifiedLayerNormalization among LayerNorms
                                                                                 -> unsupported_op
  norm-nobias       (olmo) every LayerNorm without its bias input (optional)    -> importable, no *_norm_bias
Inside a block, every node is one the runtime computes, or the pack is refused (unsupported_op, the
block named): these were imported and run as if the node were not there.
  relu-down         a Relu after layer 0's down_proj output
  div-gate-up       layer 0's gate * up product a Div
  relu-attn         a Relu after layer 0's attention output (before o_proj)
  relu-o            a Relu after layer 0's o_proj output
  relu-qkv          (qwen2) a Relu after layer 0's first q/k/v bias Add (the packed one on cpu packs)
  mul2-up           a Mul by 2 after layer 0's up_proj output
  down-bypass       the residual add after layer 0's MLP reads up_proj's output, not down_proj's
  rotary-none       (amd) layer 0's q and k RotaryEmbedding nodes removed (not rotated)
  rotary-q-only     (amd) layer 0's k RotaryEmbedding removed (only q rotated)
  rotary-twice      (amd) a second RotaryEmbedding after layer 0's q one
  split-swap        (qwen3 cpu) the Split of layer 0's packed q|k|v: k and v outputs swapped
  logits-raw-output a Relu on the logits while lm_head's raw output is a graph output of its own
  embed-axis        the embedding gathers along axis 1 (Gather axis, GatherBlockQuantized gather_axis)
  embed-qaxis       (tied) the embedding's GatherBlockQuantized quantize_axis 0
  domain-mnb        the first MatMulNBits in the ONNX domain (onnxruntime has it in com.microsoft only)
  domain-evil       every GroupQueryAttention in the domain "com.evil"
  init-redefined    a node writing the name of layer 0's input norm weight (an initializer)
  heads-float       every GroupQueryAttention's num_heads a FLOAT attribute
  fused-qknorm      (qwen3 cpu) the per-head q/k norms fused into GroupQueryAttention as the builder writes
                    them for CUDA / WebGPU (weights on its inputs 14 and 15, qk_norm_epsilon) -> importable,
                    the same roles
  posids-reformat   (amd) RotaryEmbedding positions shifted in the graph (the builder's LongRoPE
                    position-ids reformatting for DML)                          -> unsupported_op
  newline-name      an extra float weight "stray\nweight" (a line feed in its name) no walked node reads
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def main():
    args = sys.argv[1:]
    if not args or len(args) % 3:
        sys.exit("usage: pack-mutate.py SRC DST MUTATION [SRC DST MUTATION ...]")
    for i in range(0, len(args), 3):
        mutate(*args[i:i + 3])


def mutate(src, dst, what):
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
    elif what == "rename-inputs":
        # the graph's input_ids and attention_mask inputs named tokens and attn_mask (genai_config.json's
        # decoder.inputs map says so: the test writes it)
        ren = {"input_ids": "tokens", "attention_mask": "attn_mask"}
        for v in g.input:
            v.name = ren.get(v.name, v.name)
        for n in g.node:
            for i, x in enumerate(n.input):
                if x in ren:
                    n.input[i] = ren[x]
    elif what == "zero-tensor":
        # the first o_proj's weights all zero: codes 0x88 (both nibbles 8, the implicit zero point), scales 0
        n = [n for n in mnb if "o_proj" in n.name][0]
        for slot, fill in ((1, 0x88), (2, 0)):
            t = inits[n.input[slot]]
            size = int(np.prod(t.dims)) * (1 if t.data_type == TensorProto.UINT8 else
                                           2 if t.data_type in (TensorProto.FLOAT16, TensorProto.BFLOAT16) else 4)
            del t.external_data[:]
            t.data_location = TensorProto.DEFAULT
            t.raw_data = bytes([fill]) * size
    elif what in ("scale-nan", "scale-inf"):
        n = mnb[0]
        K, B = attr(n, "K").i, attr(n, "block_size").i
        kb = (K + B - 1) // B
        t = inits[n.input[2]]
        loc = {e.key: e.value for e in t.external_data}
        if loc:
            with open(os.path.join(src, loc["location"]), "rb") as f:
                f.seek(int(loc.get("offset", 0)))
                raw = f.read(int(loc["length"]))
        else:
            raw = t.raw_data
        dtype = {TensorProto.FLOAT16: np.float16, TensorProto.FLOAT: np.float32}.get(t.data_type)
        if dtype is None:  # bfloat16: the upper half of a float32
            a = np.frombuffer(raw, np.uint16).copy()
            row, grp = 3, min(1, kb - 1)
            a[row * kb + grp] = 0x7FC0 if what == "scale-nan" else 0x7F80
        else:
            a = np.frombuffer(raw, dtype).copy()
            row, grp = 3, min(1, kb - 1)
            a[row * kb + grp] = np.nan if what == "scale-nan" else np.inf
        del t.external_data[:]
        t.data_location = TensorProto.DEFAULT
        t.raw_data = a.tobytes()
        print(n.input[1], row, grp)
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
    elif what == "add-residual":
        nodes = list(g.node)
        del g.node[:]
        for n in nodes:
            if n.op_type != "SkipSimplifiedLayerNormalization":
                g.node.append(n)
                continue
            eps = [a for a in n.attribute if a.name == "epsilon"]
            res = n.output[3] if len(n.output) > 3 and n.output[3] else n.name + "/residual"
            g.node.append(helper.make_node("Add", [n.input[0], n.input[1]], [res], name=n.name + "/Add"))
            sln = helper.make_node("SimplifiedLayerNormalization", [res, n.input[2]], [n.output[0]], name=n.name + "/SLN",
                                   axis=-1, stash_type=1)
            sln.attribute.extend(eps)
            g.node.append(sln)
    elif what == "gbq-embed":
        emb = [n for n in g.node if n.op_type == "Gather" and "input_ids" in n.input][0]
        t = inits[emb.input[0]]
        data = open(os.path.join(src, "model.onnx.data"), "rb").read()
        loc = {e.key: e.value for e in t.external_data}
        dt = np.float16 if t.data_type == TensorProto.FLOAT16 else np.float32
        w = np.frombuffer(data[int(loc["offset"]):int(loc["offset"]) + int(loc["length"])], dt).reshape(tuple(t.dims))
        amd = dt == np.float16
        block = 128 if amd else 32
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
        import mkpack
        blob, scale, zp = mkpack.quantize(w.astype(np.float32), block, not amd, dt)
        V, K = w.shape
        codes = np.ascontiguousarray(blob.reshape(V, -1)[:, :K // 2])  # GatherBlockQuantized rows are not padded
        g.initializer.remove(t)
        g.initializer.extend([numpy_helper.from_array(codes, "embed.gbq.data"),
                              numpy_helper.from_array(np.ascontiguousarray(scale), "embed.gbq.scales")])
        ins = ["embed.gbq.data", "input_ids", "embed.gbq.scales"]
        if zp is not None:
            g.initializer.append(numpy_helper.from_array(mkpack.pack_zero_points(zp), "embed.gbq.zeros"))
            ins.append("embed.gbq.zeros")
        gbq = helper.make_node("GatherBlockQuantized", ins, list(emb.output), name="/model/embed_tokens/GatherBlockQuantized",
                               domain="com.microsoft", bits=4, block_size=block, gather_axis=0, quantize_axis=1)
        idx = list(g.node).index(emb)
        g.node.remove(emb)
        g.node.insert(idx, gbq)
    elif what == "many-values":
        g.input.extend([helper.make_tensor_value_info("unused_%d" % i, TensorProto.FLOAT, [1]) for i in range(300)])
    elif what == "no-op-type":
        mnb[0].ClearField("op_type")
    elif what == "weight-prepacked":
        mnb[0].attribute.extend([helper.make_attribute("weight_prepacked", 1)])
    elif what.startswith("gqa-"):
        for li, n in enumerate([n for n in g.node if n.op_type == "GroupQueryAttention"]):
            if what == "gqa-window":
                attr(n, "local_window_size").i = 4
            elif what == "gqa-window-mixed":
                attr(n, "local_window_size").i = 4 if li == 0 else 8
            elif what == "gqa-softcap":
                attr(n, "softcap").f = 30.0
            elif what == "gqa-softcap-one":
                if li == 1:
                    attr(n, "softcap").f = 30.0
            elif what == "gqa-scale":
                attr(n, "scale").f = attr(n, "scale").f ** 2
            elif what == "gqa-scale-mixed":
                if li == 1:
                    attr(n, "scale").f = attr(n, "scale").f ** 2
            elif what == "gqa-scale-default":
                n.attribute.remove(attr(n, "scale"))
            else:
                sys.exit("unknown mutation " + what)
    elif what.startswith("mha-"):
        # each GroupQueryAttention as a com.microsoft MultiHeadAttention over its query, key and value:
        # num_heads and scale kept, no mask input
        for n in g.node:
            if n.op_type != "GroupQueryAttention":
                continue
            heads, scale = attr(n, "num_heads").i, attr(n, "scale").f
            n.op_type = "MultiHeadAttention"
            del n.attribute[:]
            del n.input[3:]
            n.attribute.extend([helper.make_attribute("num_heads", heads)])
            if what in ("mha-padding", "mha-padding-causal"):
                n.input.extend(["", "audit_kpm_i32"])
                if what == "mha-padding-causal":
                    n.attribute.extend([helper.make_attribute("unidirectional", 1)])
            elif what != "mha-bidirectional":
                sys.exit("unknown mutation " + what)
        if what != "mha-bidirectional":
            g.node.insert(0, helper.make_node("Cast", ["attention_mask"], ["audit_kpm_i32"], to=TensorProto.INT32,
                                              name="/mutate/key_padding_mask"))
    elif what == "gelu-gate":
        sig = [n for n in g.node if n.op_type == "Sigmoid"][0]
        sig.op_type = "Gelu"
        sig.domain = "com.microsoft"
    elif what == "fused-bias":
        prod = {o: n for n in g.node for o in n.output}
        for add in [n for n in g.node if n.op_type == "Add" and any(i in inits for i in n.input)]:
            lin = [prod.get(i) for i in add.input if i not in inits][0]
            if lin is None or lin.op_type != "MatMulNBits":
                continue
            bias = [i for i in add.input if i in inits][0]
            while len(lin.input) < 5:
                lin.input.append("")
            lin.input.append(bias)
            lin.output[0] = add.output[0]
            g.node.remove(add)
    elif what == "acc-partial":
        mnb[0].attribute.remove(attr(mnb[0], "accuracy_level"))
    elif what == "proto-nulls":
        emb = [n for n in g.node if n.op_type == "GatherBlockQuantized"][0]
        emb.ClearField("name")
        a = emb.attribute.add()
        a.type = onnx.AttributeProto.INT
        a.i = 1
        g.node.insert(0, onnx.NodeProto(output=["no_op_type_out"]))
    elif what == "latin1-name":
        [n for n in g.node if n.op_type == "Sigmoid"][0].name = "LATIN1-NAME-X"
        # the protobuf package only writes UTF-8: swap the marker's last byte in the serialised model
        raw = m.SerializeToString().replace(b"LATIN1-NAME-X", b"LATIN1-NAME-\xe9")
        open(os.path.join(dst, "model.onnx"), "wb").write(raw)
        return
    elif what == "logits-relu":
        lm = [n for n in g.node if "logits" in n.output][0]
        lm.output[0] = "pre_relu_logits"
        g.node.append(helper.make_node("Relu", ["pre_relu_logits"], ["logits"], name="/lm_head/Relu"))
    elif what in ("relu-down", "relu-attn", "relu-o", "relu-qkv", "mul2-up"):
        pick = {"relu-down": lambda n: n.name.startswith("/model/layers.0/mlp/down_proj/"),
                "relu-attn": lambda n: n.name == "/model/layers.0/attn/GroupQueryAttention",
                "relu-o": lambda n: n.name.startswith("/model/layers.0/attn/o_proj/"),
                "relu-qkv": lambda n: n.op_type == "Add" and n.name.startswith("/model/layers.0/attn/") and "proj/Add" in n.name,
                "mul2-up": lambda n: n.name.startswith("/model/layers.0/mlp/up_proj/")}[what]
        n = [n for n in g.node if pick(n)][0]
        v, nv = n.output[0], n.output[0] + "/mutated"
        for c in g.node:
            for i, x in enumerate(c.input):
                if x == v:
                    c.input[i] = nv
        if what == "mul2-up":
            g.initializer.append(numpy_helper.from_array(np.array(2, np.float32 if "cpu" in src else np.float16), "mutate.two"))
            g.node.append(helper.make_node("Mul", [v, "mutate.two"], [nv], name="/mutate/Mul"))
        else:
            g.node.append(helper.make_node("Relu", [v], [nv], name="/mutate/Relu"))
    elif what == "div-gate-up":
        [n for n in g.node if n.name == "/model/layers.0/mlp/Mul"][0].op_type = "Div"
    elif what == "down-bypass":
        down = [n for n in g.node if n.name.startswith("/model/layers.0/mlp/down_proj/")][0]
        up = [n for n in g.node if n.name.startswith("/model/layers.0/mlp/up_proj/")][0]
        for c in g.node:
            for i, x in enumerate(c.input):
                if x == down.output[0]:
                    c.input[i] = up.output[0]
    elif what in ("rotary-none", "rotary-q-only", "rotary-twice"):
        rot = [n for n in g.node if n.op_type == "RotaryEmbedding" and n.name.startswith("/model/layers.0/")]
        if what == "rotary-twice":
            q = [n for n in rot if "q_rotary" in n.name][0]
            v, nv = q.output[0], q.output[0] + "/again"
            for c in g.node:
                for i, x in enumerate(c.input):
                    if x == v:
                        c.input[i] = nv
            g.node.append(helper.make_node("RotaryEmbedding", [v] + list(q.input[1:]), [nv], name="/mutate/RotaryEmbedding",
                                           domain="com.microsoft"))
        for n in rot if what == "rotary-none" else [n for n in rot if "k_rotary" in n.name] if what == "rotary-q-only" else []:
            for c in g.node:
                for i, x in enumerate(c.input):
                    if x == n.output[0]:
                        c.input[i] = n.input[0]
            g.node.remove(n)
    elif what == "split-swap":
        sp = [n for n in g.node if n.op_type == "Split" and n.name.startswith("/model/layers.0/")][0]
        a, b = sp.output[1], sp.output[2]
        sp.output[1], sp.output[2] = b, a
    elif what == "logits-raw-output":
        lm = [n for n in g.node if "logits" in n.output][0]
        lm.output[0] = "raw_logits"
        g.node.append(helper.make_node("Relu", ["raw_logits"], ["logits"], name="/lm_head/Relu"))
        g.output.append(helper.make_tensor_value_info("raw_logits", g.output[0].type.tensor_type.elem_type, None))
    elif what in ("embed-axis", "embed-qaxis"):
        e = [n for n in g.node if n.op_type in ("Gather", "GatherBlockQuantized") and "input_ids" in n.input][0]
        key = "axis" if e.op_type == "Gather" else "gather_axis" if what == "embed-axis" else "quantize_axis"
        for a in list(e.attribute):
            if a.name == key:
                e.attribute.remove(a)
        e.attribute.extend([helper.make_attribute(key, 1 if what == "embed-axis" else 0)])
    elif what == "domain-mnb":
        mnb[0].domain = ""
    elif what == "domain-evil":
        for n in g.node:
            if n.op_type == "GroupQueryAttention":
                n.domain = "com.evil"
    elif what == "init-redefined":
        w = [n for n in g.node if n.name == "/model/layers.0/input_layernorm/LayerNorm"][0].input[1]
        g.node.insert(0, helper.make_node("Identity", ["input_ids"], [w], name="/mutate/Identity"))
    elif what == "heads-float":
        for n in g.node:
            if n.op_type == "GroupQueryAttention":
                h = attr(n, "num_heads")
                n.attribute.remove(h)
                n.attribute.extend([helper.make_attribute("num_heads", float(h.i))])
    elif what == "fused-qknorm":
        prod = lambda v: [n for n in g.node if v in n.output][0]
        for gqa in [n for n in g.node if n.op_type == "GroupQueryAttention"]:
            qn, kn = prod(gqa.input[0]), prod(gqa.input[1])     # Reshape_2
            qs, ks = prod(qn.input[0]), prod(kn.input[0])       # the norms
            qr, kr = prod(qs.input[0]), prod(ks.input[0])       # Reshape_1
            eps = attr(qs, "epsilon").f
            gqa.input[0], gqa.input[1] = qr.input[0], kr.input[0]
            ins = list(gqa.input) + [""] * (14 - len(gqa.input)) + [qs.input[1], ks.input[1]]
            del gqa.input[:]
            gqa.input.extend(ins)
            gqa.attribute.append(helper.make_attribute("qk_norm_epsilon", eps))
            for n in (qn, kn, qs, ks, qr, kr):
                g.node.remove(n)
    elif what == "posids-reformat":
        b = "/model/pos_ids_reformat"
        four = numpy_helper.from_array(np.array(4, np.int64), b + "/four")
        g.initializer.append(four)
        new = [helper.make_node("ReduceMax", ["position_ids"], [b + "/max"], name=b + "/ReduceMax", keepdims=0),
               helper.make_node("GreaterOrEqual", [b + "/max", b + "/four"], [b + "/ge"], name=b + "/GE"),
               helper.make_node("Cast", [b + "/ge"], [b + "/cast"], name=b + "/Cast", to=TensorProto.INT64),
               helper.make_node("Mul", [b + "/cast", b + "/four"], [b + "/mul"], name=b + "/Mul"),
               helper.make_node("Add", [b + "/mul", "position_ids"], [b + "/pos"], name=b + "/Add")]
        for n in g.node:
            if n.op_type == "RotaryEmbedding":
                n.input[1] = b + "/pos"
        nodes = list(g.node)
        del g.node[:]
        g.node.extend(new + nodes)
    elif what == "newline-name":
        g.initializer.append(numpy_helper.from_array(np.ones(64, np.float32), "stray\nweight"))
        g.node.append(helper.make_node("Identity", ["stray\nweight"], ["stray_out"], name="/stray/Identity"))
    elif what == "softcap-unequal":
        mul = [n for n in g.node if n.name == "/lm_head/softcap/Mul"][0]
        g.node.append(helper.make_node("Constant", [], ["cap30"], name="cap30",
                                       value=helper.make_tensor("cap30", TensorProto.FLOAT, [], [30.0])))
        mul.input[1] = "cap30"
    elif what == "embed-input-scale":
        mul = [n for n in g.node if n.name == "/model/embed_tokens/Mul"][0]
        g.input.append(helper.make_tensor_value_info("embed_scale", TensorProto.FLOAT, []))
        mul.input[1] = "embed_scale"
    elif what == "gbq-huge":
        emb = [n for n in g.node if n.op_type == "Gather" and "input_ids" in n.input][0]
        t = inits[emb.input[0]]
        V, K = 1 << 24, t.dims[1]
        parts = (("huge.gbq.data", TensorProto.UINT8, [V, K // 2], V * K // 2),
                 ("huge.gbq.scales", TensorProto.FLOAT16, [V, 1], V * 2),
                 ("huge.gbq.zeros", TensorProto.UINT8, [V, 1], V))
        off = 0
        g.initializer.remove(t)
        for name, dt, dims, nb in parts:
            x = onnx.TensorProto(name=name, data_type=dt, dims=dims, data_location=TensorProto.EXTERNAL)
            for k, v in (("location", "huge.data"), ("offset", str(off)), ("length", str(nb))):
                e = x.external_data.add()
                e.key, e.value = k, v
            g.initializer.append(x)
            off += nb
        with open(os.path.join(dst, "huge.data"), "wb") as fh:
            fh.truncate(off)  # sparse: nothing is written
        gbq = helper.make_node("GatherBlockQuantized", ["huge.gbq.data", "input_ids", "huge.gbq.scales", "huge.gbq.zeros"],
                               list(emb.output), name="/model/embed_tokens/GatherBlockQuantized", domain="com.microsoft",
                               bits=4, block_size=128, gather_axis=0, quantize_axis=1)
        idx = list(g.node).index(emb)
        g.node.remove(emb)
        g.node.insert(idx, gbq)
    elif what == "fused-mlp-bias":
        n = [n for n in mnb if "gate_proj" in n.name][0]
        dt = inits[n.input[2]].data_type
        g.initializer.append(numpy_helper.from_array(
            np.zeros(attr(n, "N").i, np.float16 if dt == TensorProto.FLOAT16 else np.float32), "gate.fused_bias"))
        while len(n.input) < 5:
            n.input.append("")
        n.input.append("gate.fused_bias")
    elif what in ("norm-eps", "norm-eps-negative", "norm-axis", "norm-prebias", "norm-mixed", "norm-nobias"):
        norms = [n for n in g.node if n.op_type.endswith("LayerNormalization") and "layernorm" in n.name]
        skip = [n for n in norms if n.op_type.startswith("Skip")]
        if what == "norm-eps":      # one norm with another epsilon
            attr(skip[1], "epsilon").f *= 10
        elif what == "norm-eps-negative":  # every norm's epsilon negated (the final norm's too)
            for n in g.node:
                if n.op_type.endswith("LayerNormalization"):
                    attr(n, "epsilon").f = -attr(n, "epsilon").f
        elif what == "norm-axis":   # the first norm over axis 1 (the sequence), not the hidden size
            attr(norms[0], "axis").i = 1
        elif what == "norm-prebias":  # a bias the Skip norm adds to input + skip before normalising
            n = skip[0]
            h = [t for t in g.initializer if t.name == n.input[2]][0].dims[0]
            dt = inits[n.input[2]].data_type
            g.initializer.append(numpy_helper.from_array(
                np.zeros(h, np.float16 if dt == TensorProto.FLOAT16 else np.float32), "skip.prebias"))
            last = 4 if n.op_type == "SkipLayerNormalization" else 3
            while len(n.input) < last:
                n.input.append("")
            n.input.append("skip.prebias")
        elif what == "norm-mixed":  # (olmo) layer 1's input norm an RMSNorm among LayerNorms
            n = [n for n in skip if n.name.startswith("/model/layers.1/input_layernorm")][0]
            n.op_type = "SkipSimplifiedLayerNormalization"
            del n.input[3:]
        else:                       # (olmo) LayerNorms without their (optional) bias inputs
            for n in norms:
                b = n.input[3 if n.op_type.startswith("Skip") else 2]
                del n.input[3 if n.op_type.startswith("Skip") else 2:]
                g.initializer.remove(inits[b])
    else:
        sys.exit("unknown mutation " + what)
    onnx.save(m, os.path.join(dst, "model.onnx"))


if __name__ == "__main__":
    main()
