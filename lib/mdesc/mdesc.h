/* lib/mdesc — what a runnable model is. The ONE validation every gate applies, so that a pack oga-info
 * calls importable is a model npu-forward runs:
 *   - the normalised model description (the JSON object OGAX's model frame carries and the container
 *     stores; ogax(5)) checked and turned into a model_config (mdesc_config);
 *   - the set of tensors a runnable model needs, by role, with their dtypes and shapes, checked against
 *     that config (mdesc_check_tensors) -- config values that contradict the graph are refused here;
 *   - the vocabulary of tensor roles (mdesc_role_known);
 *   - the tokenizer assets loaded the way the runtime loads them (mdesc_tokenizer).
 * lib/pack (oga-info, oga-extract), q4nx-pack and lib/model (npu-forward, spec-replay) all call these;
 * none keeps a list of its own. Owns no file format: tensors are described to it through mdesc_tensor
 * arrays. Must not include lib/pack, lib/q4nx, lib/ogax or lib/model headers.
 *
 * Roles (the strings pack, OGAX, the container and the model share):
 *   embed, lm_head (tied: ONE tensor with role lm_head, tie_embeddings true), final_norm, rope.cos,
 *   rope.sin, and for every layer N < num_layers (decimal, no leading zeros):
 *   layers.N.input_norm, layers.N.post_attn_norm, layers.N.attn.qkv | attn.q / attn.k / attn.v,
 *   layers.N.attn.qkv_bias | attn.q_bias / attn.k_bias / attn.v_bias, layers.N.attn.q_norm / attn.k_norm,
 *   layers.N.attn.o, layers.N.attn.o_bias (known, but no family the runtime supports has one: refused
 *   by mdesc_check_tensors), layers.N.mlp.gate / mlp.up / mlp.down, and with sandwich norms (Gemma 2)
 *   layers.N.attn.out_norm / layers.N.mlp.out_norm (the block's output normed before the residual add);
 *   with LayerNorms (description "norm": "layer", OLMo) the optional biases layers.N.input_norm_bias,
 *   layers.N.post_attn_norm_bias, final_norm_bias (absent: 0). */
#ifndef OGK_MDESC_H
#define OGK_MDESC_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "tok/tok.h"
#include "util/util.h"

#define MODEL_MAX_EOS 8
#define MDESC_MAX_DIM (1 << 30) /* any dimension, context length or token id is below this */

enum model_family { FAMILY_LLAMA, FAMILY_QWEN2, FAMILY_QWEN3, FAMILY_PHI3, FAMILY_GEMMA2, FAMILY_OLMO, FAMILY_GEMMA,
                   FAMILY_CHATGLM };
enum model_act { MODEL_ACT_SILU = 0, MODEL_ACT_GELU_TANH = 1, MODEL_ACT_GELU = 2 }; /* the MLP's gate activation */
#define MODEL_MAX_WINDOW_LAYERS 1024 /* layers a sliding-window model may have (window_layer's bits) */

typedef struct model_config {
    int family;
    char family_name[16];
    int vocab_size;
    int dim;        /* hidden_size */
    int hidden_dim; /* intermediate_size (MLP) */
    int n_layers;
    int n_heads;
    int n_kv_heads;
    int head_dim;
    int context_length; /* the model's (mdesc_check_tensors lowers it to the RoPE caches' rows) */
    float rms_eps;
    int rope_dim;         /* rotary dims per head (<= head_dim), from the pack's cos/sin caches */
    int rope_interleaved; /* 0: rotate halves (GroupQueryAttention / RotaryEmbedding default) */
    int rope_long_after;  /* LongRoPE (Phi-3): a pass over a sequence longer than this rotates with rope.cos_long /
                           * rope.sin_long, a shorter one with rope.cos / rope.sin; 0: one pair */
    int qkv_bias;         /* qwen2: q, k, v projections have biases */
    int qk_norm;          /* qwen3: per-head RMSNorm of q and k before RoPE */
    int tied;             /* embedding = dequantised rows of lm_head */
    int bos_id;           /* -1 when none */
    int eos_ids[MODEL_MAX_EOS];
    int n_eos;
    int pad_id;
    /* what Gemma 2 adds (the defaults are the other families' transformer): */
    int activation;      /* MODEL_ACT_*: silu(gate) * up, gelu_tanh(gate) * up (FastGelu) or gelu(gate) * up (erf) */
    float embed_scale;   /* embedding rows multiplied by it (1: none) */
    float attn_scale;    /* scores = q.k * attn_scale (1/sqrt(head_dim) unless the model says otherwise) */
    float attn_softcap;  /* scores = cap * tanh(scores / cap) before the softmax; 0 none */
    float final_softcap; /* logits = cap * tanh(logits / cap); 0 none */
    int window;          /* sliding window: a query at position p of a layer with window_layer bit set attends to
                          * positions p - window + 1 .. p (onnxruntime's local_window_size); 0 none */
    unsigned char window_layer[MODEL_MAX_WINDOW_LAYERS / 8];
    int sandwich;        /* layers.N.attn.out_norm / mlp.out_norm: the block outputs normed before the residual add */
    int layer_norm;      /* OLMo ("norm": "layer"): the residual stream's norms are LayerNorms, (x - mean) / sqrt(var +
                          * eps) * w + b (the *_norm_bias roles, absent: 0); else RMSNorms x / sqrt(mean(x^2) + eps) * w */
} model_config;

/* 1 when layer l attends through the sliding window */
static inline int model_layer_windowed(const model_config *c, int l)
{
    return c->window > 0 && l >= 0 && l < MODEL_MAX_WINDOW_LAYERS && (c->window_layer[l / 8] >> (l % 8) & 1);
}

const char *model_family_name(int family);
/* The family a model.type names (mistral runs as llama), -1 for one this runtime does not run. */
int model_family_of(const char *name);
#define MODEL_FAMILIES "llama, mistral, qwen2, qwen3, phi3, gemma, gemma2, olmo, chatglm"

/* Where a refusal points: the description key ("bos_token_id", "family", ...) or "tensor ROLE", so a
 * caller can name the file and key it came from. */
typedef struct {
    char key[96];
} mdesc_where;

/* Check the model description and fill c. 0, or -1 with e filled, *code 3 (malformed: missing key,
 * wrong type, out of range, contradiction) or 4 (well formed, but a model this runtime cannot run:
 * unknown family); where (may be NULL) names the key. */
int mdesc_config(model_config *c, const json_t *model, ogk_error *e, int *code, mdesc_where *where);

/* One tensor as the check sees it. dtype: MDESC_* below (callers map their dtype vocabulary onto
 * it; 0 for any other dtype); quantised tensors have ndim 2, shape [N, K]. */
typedef struct {
    const char *role;
    int dtype;
    int ndim;
    uint64_t shape[4];
} mdesc_tensor;
#define MDESC_F32 1
#define MDESC_F16 2
#define MDESC_BF16 3
#define MDESC_Q4 4
#define MDESC_Q8 5 /* 8-bit quantised (source order) */

/* Check that the tensors (every tensor of the model, any order) are exactly what a model of config c
 * runs: every role known, none twice, none the runtime would ignore, every needed one present with
 * the right dtype and shape, the config's switches (qkv_bias, qk_norm, tie_embeddings, family) as the
 * tensors say. Lowers c->context_length to the rows the RoPE caches cover. 0, or -1 with e filled
 * (always exit code 4: the model cannot be run) and where naming the tensor or key. */
int mdesc_check_tensors(model_config *c, const mdesc_tensor *t, size_t n, ogk_error *e, mdesc_where *where);

/* Whether role is one of the role strings above, for a model of n_layers layers (n_layers < 0: any). */
int mdesc_role_known(const char *role, int n_layers);

/* Load the tokenizer from its assets as the runtime does (tokenizer_config may be NULL) and check it
 * against c (its ids fit the vocabulary). NULL with e filled on failure (exit code 4). */
tok *mdesc_tokenizer(const model_config *c, const uint8_t *tokenizer_json, size_t tj_len, const uint8_t *tokenizer_config,
                     size_t tc_len, ogk_error *e);

#endif
