#!/usr/bin/python3
"""mkbad.py - malformed (and unusual-but-valid) OGA packs for tests.

  mkbad.py --list              names, one per line
  mkbad.py NAME OUTDIR         write one (also: mkpack.py --bad NAME --out OUTDIR,
                               tools/fixture.sh bad NAME)

Each pack holds bad.json: {"name", "defect" (what is wrong, naming the file/key/tensor),
"valid_onnx" (whether onnxruntime can still run it), "expect" (what a reader should do)}.
Most are built from the tiny phi3 pack (32000-token vocab keeps them small), then broken.
"""
import json
import os
import shutil
import sys

import numpy as np
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mkpack  # noqa: E402

BAD = {
    "truncated-data": ("model.onnx.data cut to half its length; later initializers' offset+length run past its end",
                       False, "refuse (exit 3) naming model.onnx.data and a tensor"),
    "offset-past-end": ("initializer model.layers.1.mlp.down_proj.MatMul.weight_Q4: external offset moved so "
                        "offset+length runs past the end of model.onnx.data (file itself intact)",
                        False, "refuse (exit 3) naming the tensor"),
    "not-protobuf": ("model.onnx is text, not a protobuf ModelProto", False, "refuse (exit 3) naming model.onnx"),
    "deep-nesting": ("model.onnx is ~600 KB of messages nested 150001 deep (graph -> node -> attribute.g -> graph "
                     "...): well-formed protobuf that a recursive parser follows off the stack", False,
                     "refuse (exit 3) naming model.onnx, without parsing it"),
    "config-missing-key": ("genai_config.json: model.decoder.num_hidden_layers removed", False,
                           "refuse (exit 3) naming the key"),
    "config-wrong-type": ("genai_config.json: model.decoder.num_attention_heads is the string \"8\"", False,
                          "refuse (exit 3) naming the key"),
    "dims-contradict": ("genai_config.json: model.decoder.hidden_size 96, but the tensors are built for 64 "
                        "(e.g. model.layers.0.input_layernorm.weight [64])", False,
                        "refuse (exit 3) naming the key and a tensor"),
    "bits2": ("/model/layers.0/mlp/down_proj/MatMul_Q4 is MatMulNBits bits=2 (B [N,k_blocks,8], four codes a "
              "byte, implicit zero point 2)", True, "refuse that tensor by name (2-bit weights not supported)"),
    "gidx": ("/model/layers.0/attn/q_proj/MatMulNBits has a g_idx input (input 4, "
             "model.layers.0.attn.q_proj.MatMulNBits.g_idx int32 [K], act-order style permuted groups); "
             "onnxruntime accepts it", True,
             "refuse that tensor by name (g_idx not supported)"),
    "block16": ("every MatMulNBits and the GatherBlockQuantized use block_size=16 (valid per spec)", True,
                "accept: import like any pack"),
    "no-tokenizer": ("tokenizer.json and tokenizer_config.json are absent", True,
                     "report the missing files; refuse where a tokenizer is needed"),
    "amd-npu": ("AMD Ryzen AI NPU-style pack: fusion.onnx whose body is one com.ryzenai DynamicDispatch node, "
                "weights in opaque .cache/*.const files described by .cache/*_meta.json, plus prefill.bin, "
                "prefill.pb.bin, dd_metastate_*.fconst/.state, rai_config.json", False,
                "read config and tokenizer, refuse the dispatch node and every opaque weight by name"),
}
NAMES = list(BAD)


def base(family="phi3", style="cpu", tie="untied", block=None):
    cfg, tokdir = mkpack.cfg_from_family(family, "tiny", tie == "tied")
    W = mkpack.random_weights(cfg, 1234)
    io = np.float16 if style == "amd" else np.float32
    return cfg, W, style, io, tokdir, block


def write(out, cfg, W, style, io, tokdir, block=None, mutate=None):
    os.makedirs(out, exist_ok=True)
    g = mkpack.build(cfg, W, style, 0, io, block)
    if mutate:
        mutate(g)
    mkpack.write_model(g, out)
    mkpack.write_json(os.path.join(out, "genai_config.json"), mkpack.genai_config(cfg, style))
    mkpack.write_json(os.path.join(out, "config.json"), mkpack.hf_config(cfg))
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(tokdir, fn), os.path.join(out, fn))


def find_node(g, name):
    for n in g.nodes:
        if n.name == name:
            return n
    raise KeyError(name)


def set_attr(node, name, value):
    for a in node.attribute:
        if a.name == name:
            a.i = value
            return
    node.attribute.extend([helper.make_attribute(name, value)])


def replace_init(g, name, arr):
    for j, (n, _) in enumerate(g.inits):
        if n == name:
            g.inits[j] = (name, np.ascontiguousarray(arr))
            return
    raise KeyError(name)


def edit_genai(out, fn):
    p = os.path.join(out, "genai_config.json")
    c = json.load(open(p))
    fn(c)
    mkpack.write_json(p, c)


def make(name, out):
    if name not in BAD:
        sys.stderr.write("mkbad: unknown name %s (one of: %s)\n" % (name, " ".join(NAMES)))
        return 2
    cfg, W, style, io, tokdir, block = base()

    if name == "bits2":
        def m(g):
            w = W["model.layers.0.mlp.down_proj.weight"]           # [N, K]
            n, k = w.shape
            kb = (k + 31) // 32
            wp = np.zeros((n, kb * 32), np.float32)
            wp[:, :k] = w
            wp = wp.reshape(n, kb, 32)
            idx = np.abs(wp).argmax(axis=2)
            mx = np.take_along_axis(wp, idx[..., None], axis=2)[..., 0]
            scale = (mx / -2.0).astype(np.float32)
            safe = np.where(scale != 0, scale, 1)
            c = np.clip(np.rint(wp / safe[..., None]) + 2, 0, 3).astype(np.uint8)
            q = (c[..., 0::4] | c[..., 1::4] << 2 | c[..., 2::4] << 4 | c[..., 3::4] << 6).astype(np.uint8)
            node = find_node(g, "/model/layers.0/mlp/down_proj/MatMul_Q4")
            set_attr(node, "bits", 2)
            replace_init(g, "model.layers.0.mlp.down_proj.MatMul.weight_Q4", q)
            replace_init(g, "model.layers.0.mlp.down_proj.MatMul.weight_scales", scale.reshape(-1))
        write(out, cfg, W, style, io, tokdir, mutate=m)
    elif name == "gidx":
        cfg, W, style, io, tokdir, block = base(style="amd")

        def m(g):
            node = find_node(g, "/model/layers.0/attn/q_proj/MatMulNBits")
            k = cfg["hidden"]
            # act-order: groups assigned out of order (a permutation of k // block)
            gi = (np.arange(k) // 128).astype(np.int32)[np.random.default_rng(7).permutation(k)]
            nm = g.init("model.layers.0.attn.q_proj.MatMulNBits.g_idx", gi)
            node.input.append(nm)
        write(out, cfg, W, style, io, tokdir, mutate=m)
    elif name == "block16":
        cfg, W, style, io, tokdir, block = base(tie="tied")
        write(out, cfg, W, style, io, tokdir, block=16)
    elif name == "amd-npu":
        make_npu(out)
    else:
        write(out, cfg, W, style, io, tokdir)
        data = os.path.join(out, "model.onnx.data")
        if name == "truncated-data":
            sz = os.path.getsize(data)
            with open(data, "r+b") as fh:
                fh.truncate(sz // 2)
        elif name == "offset-past-end":
            import onnx
            mp = os.path.join(out, "model.onnx")
            mdl = onnx.load(mp, load_external_data=False)
            sz = os.path.getsize(data)
            for t in mdl.graph.initializer:
                if t.name == "model.layers.1.mlp.down_proj.MatMul.weight_Q4":
                    ln = int({e.key: e.value for e in t.external_data}["length"])
                    for e in t.external_data:
                        if e.key == "offset":
                            e.value = str(sz - ln // 2)
            open(mp, "wb").write(mdl.SerializeToString())
        elif name == "not-protobuf":
            # 'N' (0x4e) is field 9 with wire type 6, which does not exist: no protobuf parser accepts it
            open(os.path.join(out, "model.onnx"), "w").write("NOT A PROTOBUF: this model.onnx was overwritten by "
                                                             "tools/mkbad.py\n")
        elif name == "deep-nesting":
            open(os.path.join(out, "model.onnx"), "wb").write(deep_nesting(50000))
        elif name == "config-missing-key":
            edit_genai(out, lambda c: c["model"]["decoder"].pop("num_hidden_layers"))
        elif name == "config-wrong-type":
            edit_genai(out, lambda c: c["model"]["decoder"].__setitem__("num_attention_heads", "8"))
        elif name == "dims-contradict":
            edit_genai(out, lambda c: c["model"]["decoder"].__setitem__("hidden_size", 96))
        elif name == "no-tokenizer":
            for fn in ("tokenizer.json", "tokenizer_config.json"):
                os.remove(os.path.join(out, fn))
    d, valid, expect = BAD[name]
    mkpack.write_json(os.path.join(out, "bad.json"), {"name": name, "defect": d, "valid_onnx": valid,
                                                       "expect": expect})
    return 0


def deep_nesting(levels):
    """A ModelProto whose graph holds a node whose attribute holds a graph ... levels times: written as
    bytes (the protobuf package refuses to build it). Each message's header is its tag and length."""
    def varint(n):
        b = bytearray()
        while True:
            b.append((n & 0x7f) | (0x80 if n > 0x7f else 0))
            n >>= 7
            if not n:
                return bytes(b)
    heads, size = [], 0  # innermost first
    for _ in range(levels):
        for tag in (0x32, 0x2a, 0x0a):  # AttributeProto.g (6), NodeProto.attribute (5), GraphProto.node (1)
            heads.append(bytes([tag]) + varint(size))
            size += len(heads[-1])
    return b"\x3a" + varint(size) + b"".join(reversed(heads))  # ModelProto.graph (7)


def make_npu(out):
    """A pack shaped like AMD's *_rai_*_npu_* packs (public facts: reference/oga-format.md).
    Readable: genai_config.json, tokenizer, the float embedding table in fusion.onnx.data.
    Opaque: the com.ryzenai DynamicDispatch node and the .const/.fconst/.state/.bin buffers."""
    cfg, tokdir = mkpack.cfg_from_family("qwen2", "tiny", False)
    W = mkpack.random_weights(cfg, 1234)
    h, nl, nkv, hd, V = cfg["hidden"], cfg["layers"], cfg["kv_heads"], cfg["head"], cfg["vocab"]
    maxlen = 4096
    os.makedirs(os.path.join(out, ".cache"), exist_ok=True)
    rng = np.random.default_rng(99)

    # .const files: opaque packed weight buffers, described by the _meta.json tensor map
    tensor_map, op_list, const_no = {}, [], 0
    for i in range(nl):
        for part, (n, k) in (("attn/q_proj", (cfg["heads"] * hd, h)), ("attn/k_proj", (nkv * hd, h)),
                             ("attn/v_proj", (nkv * hd, h)), ("attn/o_proj", (h, cfg["heads"] * hd)),
                             ("mlp/gate_proj", (cfg["inter"], h)), ("mlp/up_proj", (cfg["inter"], h)),
                             ("mlp/down_proj", (h, cfg["inter"]))):
            node = "/model/layers.%d/%s/MatMulNBits" % (i, part)
            p = node[1:].replace("/", ".")
            kb = (k + 127) // 128
            fn = ".cache\\MatMulNBits_2_0_%d.const" % const_no
            const_no += 1
            blob = rng.integers(0, 256, size=n * kb * 64 + n * kb * 4 + n * ((kb + 1) // 2), dtype=np.uint8)
            open(os.path.join(out, ".cache", "MatMulNBits_2_0_%d.const" % (const_no - 1)), "wb").write(blob.tobytes())
            off = 0
            for suffix, dt, shape, nb in ((".qweight", "uint8", [n, kb, 64], n * kb * 64),
                                          (".scales.f", "float", [n * kb], n * kb * 4),
                                          (".qzeros", "uint8", [n * ((kb + 1) // 2)], n * ((kb + 1) // 2))):
                tensor_map[p + suffix] = {"packed_buffer_label": "const", "xrt_arg_id": 2, "dtype": dt,
                                          "shape": shape, "offset": off, "file_name": fn, "file_size": nb}
                off += nb
            op_list.append({"name": node, "type": "MladfMatMul", "in_args": [node + "_in"],
                            "const_args": [p + ".qweight", p + ".scales.f", p + ".qzeros"],
                            "out_args": [node + "_out"],
                            "attrs": {"bits": ["int", [4]], "block_size": ["int", [128]], "K": ["int", [k]],
                                      "N": ["int", [n]]}})
    for i in range(nl):
        op_list.append({"name": "/model/layers.%d/attn/FLATMHA" % i, "type": "FLATMHA", "in_args": [],
                        "const_args": [], "out_args": [], "attrs": {"kv_dtype": ["str", ["bf16"]],
                                                                     "kv_shape": ["int", [1, nkv, maxlen, hd]]}})
    meta = {"dd_meta_major_version": 1, "dd_meta_minor_version": 4, "op_list": op_list,
            "fused_tensors": {"const": {"buffer_size": const_no}, "scratch": {"buffer_size": 1 << 20}},
            "tensor_map": tensor_map}
    mkpack.write_json(os.path.join(out, ".cache", "MatMulNBits_2_0_meta.json"), meta)
    for fn, nb in (("prefill.bin", 4096), ("prefill.pb.bin", 8192), ("dd_metastate_0.fconst", 2048),
                   ("dd_metastate_0.state", 1024)):
        open(os.path.join(out, fn), "wb").write(rng.integers(0, 256, size=nb, dtype=np.uint8).tobytes())
    mkpack.write_json(os.path.join(out, "rai_config.json"), {"max_prompt_length": 2048,
                                                             "prompt_lengths": [128, 256, 512, 1024, 2048]})

    # fusion.onnx: Gather over a float (bf16 in real packs; fp16 here) embedding, then one dispatch node
    g = mkpack.Graph(np.float16)
    g.inputs.append(helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]))
    g.inputs.append(helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch_size", "total_sequence_length"]))
    g.inputs.append(helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch_size", "sequence_length"]))
    dd_in = ["/model/embed_tokens/Gather/output_0", "attention_mask", "position_ids"]
    dd_out = ["logits"]
    for i in range(nl):
        for kv in ("key", "value"):
            g.inputs.append(helper.make_tensor_value_info("past_key_values.%d.%s" % (i, kv), TensorProto.BFLOAT16,
                                                          [1, nkv, maxlen, hd]))
            g.outputs.append(helper.make_tensor_value_info("present.%d.%s" % (i, kv), TensorProto.BFLOAT16,
                                                           [1, nkv, maxlen, hd]))
            dd_in.append("past_key_values.%d.%s" % (i, kv))
            dd_out.append("present.%d.%s" % (i, kv))
    g.outputs.insert(0, helper.make_tensor_value_info("logits", TensorProto.FLOAT16, ["batch_size", "sequence_length", V]))
    emb = g.init("model.embed_tokens.weight", W["model.embed_tokens.weight"].astype(np.float16))
    g.node("Gather", "/model/embed_tokens/Gather", [emb, "input_ids"])
    g.node("DynamicDispatch", "/model/DynamicDispatch_0", dd_in, dd_out, domain="com.ryzenai",
           meta_json=".cache\\MatMulNBits_2_0_meta.json", state_file="dd_metastate_0.state",
           fconst_file="dd_metastate_0.fconst", max_seq_len=maxlen)
    mkpack.write_model(g, out)
    os.replace(os.path.join(out, "model.onnx"), os.path.join(out, "fusion.onnx"))
    os.replace(os.path.join(out, "model.onnx.data"), os.path.join(out, "fusion.onnx.data"))
    mf = os.path.join(out, "fusion.onnx")
    import onnx
    mdl = onnx.load(mf, load_external_data=False)
    for t in mdl.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = "fusion.onnx.data"
    mdl.opset_import.extend([helper.make_opsetid("com.ryzenai", 1)])
    open(mf, "wb").write(mdl.SerializeToString())

    gc = mkpack.genai_config(cfg, "amd")
    dec = gc["model"]["decoder"]
    dec["filename"] = "fusion.onnx"
    dec["session_options"] = {
        "log_id": "onnxruntime-genai", "custom_ops_library": "onnx_custom_ops.dll",
        "custom_allocator": "ryzen_mm", "external_data_file": "prefill.pb.bin",
        "config_entries": {"hybrid_opt_token_backend": "npu", "max_length_for_kv_cache": str(maxlen),
                           "dd_cache": ".cache", "onnx_custom_ops_const_key": ".cache\\MatMulNBits_2_0_meta.json"},
        "provider_options": [],
    }
    gc["model"]["context_length"] = maxlen
    gc["search"].update({"do_sample": True, "temperature": 0.7, "top_k": 20, "top_p": 0.8, "max_length": maxlen})
    mkpack.write_json(os.path.join(out, "genai_config.json"), gc)
    mkpack.write_json(os.path.join(out, "config.json"), mkpack.hf_config(cfg))
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(tokdir, fn), os.path.join(out, fn))


if __name__ == "__main__":
    if sys.argv[1:] == ["--list"]:
        print("\n".join(NAMES))
        sys.exit(0)
    if len(sys.argv) == 3:
        sys.exit(make(sys.argv[1], sys.argv[2]))
    sys.stderr.write(__doc__)
    sys.exit(2)
