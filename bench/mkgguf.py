#!/usr/bin/env python3
"""mkgguf.py - a GGUF (architecture qwen2) with Qwen2.5-0.5B's shapes and random fp16 weights, for
bench/peer.sh to time llama.cpp on the same geometry as the qwen05b fixture while no exact converter
of our container (q4nx-gguf) is built. The weights are NOT the fixture's: speed does not depend on
the values, only on shapes and dtypes (quantise the result with llama-quantize ... Q4_0).

  PYTHONPATH=.cache/llama/src/gguf-py python3 bench/mkgguf.py --tokenizer PACK/tokenizer.json OUT.gguf

The tokenizer is the pack's BPE (tokens, merges, added tokens), padded to the vocabulary size with
unused tokens, so llama.cpp loads it as a gpt2-style (qwen2 pre-tokenizer) vocabulary.
Exit status: 0 ok, 2 usage, 3 the tokenizer cannot be read, 4 the gguf package is missing.
"""
import argparse
import json
import os
import sys

import numpy as np

# Qwen2.5-0.5B (the fixture's qwen05b geometry)
GEOM = dict(hidden=896, layers=24, heads=14, kv_heads=2, head=64, inter=4864, context=32768, vocab=151936,
            rope_theta=1000000.0, eps=1e-6)


def die(msg, code):
    sys.stderr.write("mkgguf.py: %s\n" % msg)
    sys.exit(code)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokenizer", required=True, help="a Hugging Face tokenizer.json (BPE)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("out")
    a = ap.parse_args()
    try:
        import gguf
    except ImportError:
        die("the gguf package is not importable (PYTHONPATH=.cache/llama/src/gguf-py)", 4)
    try:
        tj = json.load(open(a.tokenizer, encoding="utf-8"))
        vocab, merges = tj["model"]["vocab"], tj["model"]["merges"]
    except (OSError, ValueError, KeyError, TypeError) as ex:
        die("%s: not a BPE tokenizer.json: %s" % (a.tokenizer, ex), 3)
    g = GEOM
    V = g["vocab"]
    tokens = ["[PAD%d]" % i for i in range(V)]
    types = [gguf.TokenType.UNUSED] * V
    for t, i in vocab.items():
        if 0 <= i < V:
            tokens[i], types[i] = t, gguf.TokenType.NORMAL
    eos = bos = None
    for at in tj.get("added_tokens", []):
        i = at["id"]
        if 0 <= i < V:
            tokens[i] = at["content"]
            types[i] = gguf.TokenType.CONTROL if at.get("special") else gguf.TokenType.USER_DEFINED
            if at["content"] == "<|endoftext|>":
                bos = eos = i
    merges = [m if isinstance(m, str) else " ".join(m) for m in merges]

    tmp = a.out + ".tmp"
    w = gguf.GGUFWriter(tmp, "qwen2")
    w.add_name("ogakit qwen05b-shaped random weights")
    w.add_context_length(g["context"])
    w.add_embedding_length(g["hidden"])
    w.add_feed_forward_length(g["inter"])
    w.add_block_count(g["layers"])
    w.add_head_count(g["heads"])
    w.add_head_count_kv(g["kv_heads"])
    w.add_rope_freq_base(g["rope_theta"])
    w.add_layer_norm_rms_eps(g["eps"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    if eos is not None:
        w.add_bos_token_id(bos)
        w.add_eos_token_id(eos)
        w.add_pad_token_id(eos)
    w.add_add_bos_token(False)

    rng = np.random.default_rng(a.seed)

    def mat(n, k):  # torch Linear [out, in]; gguf-py writes numpy shapes as they are
        return (rng.standard_normal((n, k), dtype=np.float32) * 0.02).astype(np.float16)

    def vec(n, v=None):
        return np.full(n, v, np.float32) if v is not None else (rng.standard_normal(n, dtype=np.float32) * 0.02)

    H, I, qd, kvd = g["hidden"], g["inter"], g["heads"] * g["head"], g["kv_heads"] * g["head"]
    w.add_tensor("token_embd.weight", mat(V, H))  # tied: no output.weight
    for l in range(g["layers"]):
        p = "blk.%d." % l
        w.add_tensor(p + "attn_norm.weight", vec(H, 1.0))
        w.add_tensor(p + "attn_q.weight", mat(qd, H))
        w.add_tensor(p + "attn_q.bias", vec(qd))
        w.add_tensor(p + "attn_k.weight", mat(kvd, H))
        w.add_tensor(p + "attn_k.bias", vec(kvd))
        w.add_tensor(p + "attn_v.weight", mat(kvd, H))
        w.add_tensor(p + "attn_v.bias", vec(kvd))
        w.add_tensor(p + "attn_output.weight", mat(H, qd))
        w.add_tensor(p + "ffn_norm.weight", vec(H, 1.0))
        w.add_tensor(p + "ffn_gate.weight", mat(I, H))
        w.add_tensor(p + "ffn_up.weight", mat(I, H))
        w.add_tensor(p + "ffn_down.weight", mat(H, I))
    w.add_tensor("output_norm.weight", vec(H, 1.0))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, a.out)


if __name__ == "__main__":
    main()
