/* lib/model — the transformer forward pass over a Q4NX container, and what runs it: the classifier and its
 * argmax head (head.c), generation with sampling and streaming (generate.c), the benchmark (bench.c). Owns the model structs, the KV cache
 * and every activation buffer. Must not know container bytes (lib/q4nx gives views), kernel internals
 * (lib/kern multiplies) or tokenizer internals (lib/tok turns text into ids and back).
 *
 * Three structs say what a model is, in llama2.c's terms:
 *   model_config   dims and family switches, from the container's model description
 *   model_weights  views into the mmapped container (never copied; small norm/bias/rope vectors in
 *                  fp16/bf16 are converted to fp32 once at load)
 *   model_state    every activation buffer and the KV cache, allocated once per context
 */
#ifndef OGK_MODEL_H
#define OGK_MODEL_H

#include <stdint.h>

#include "kern/kern.h"
#include "mdesc/mdesc.h"
#include "q4nx/q4nx.h"
#include "util/util.h"

#define MODEL_CHUNK 512    /* rows a pass takes at most: i8 mode's prefill chunks, batched passes */
#define MODEL_F32_CHUNK 128 /* f32 mode's prefill chunks (its fp32 sums depend on the pass's rows, so a
                               prefix-cache reuse meets whole chunks of this size again) */
#define MODEL_VERIFY_MAX 16 /* rows of a speculative verify pass */


/* model_config (dims and family switches, from the container's model description) is lib/mdesc's:
 * the one check of what a runnable model is, shared with the pack reader. */

typedef struct model_layer {
    const float *input_norm;     /* [dim] attention norm's weights */
    const float *input_norm_b, *post_attn_norm_b; /* [dim] LayerNorm biases (c.layer_norm) or NULL (0) */
    const ogk_qtensor *wqkv;     /* packed q|k|v rows (cpu-style packs), or NULL and: */
    const ogk_qtensor *wq, *wk, *wv; /* separate (amd-style packs) */
    const float *bq, *bk, *bv;   /* qkv bias (qwen2) or NULL */
    const float *q_norm, *k_norm; /* [head_dim] (qwen3) or NULL */
    const ogk_qtensor *wo;
    const float *post_attn_norm; /* [dim] ffn norm's weights */
    const float *attn_out_norm, *mlp_out_norm; /* [dim] sandwich norms of the block outputs (Gemma 2) or NULL */
    const ogk_qtensor *w_gate, *w_up, *w_down;
} model_layer;

typedef struct model_weights {
    const ogk_qtensor *embed;   /* [vocab, dim]: plain float, or quantised (tied: == lm_head) */
    model_layer *layers;
    const float *final_norm;    /* [dim] */
    const float *final_norm_b;  /* [dim] LayerNorm bias (c.layer_norm) or NULL (0) */
    const ogk_qtensor *lm_head; /* [vocab, dim] quantised, or (untied) an unquantised MatMul's fp32 [dim, vocab]:
                                   dtype OGK_F32, data, n = vocab, k = dim (model.lm_plain) */
    const float *rope_cos, *rope_sin; /* [context][rope_dim/2] the pack's caches */
    const float *rope_cos_long, *rope_sin_long; /* LongRoPE (c.rope_long_after): the caches of longer sequences */
} model_weights;

typedef struct model_head model_head; /* the argmax head's per-row bounds of the classifier (head.c) */

typedef struct model {
    q4nx_file *file;
    model_config c;
    model_weights w;
    void **owned; /* buffers converted at load */
    int n_owned;
    uint64_t weight_bytes; /* quantised bytes one decode token streams (codes + scales + zeros) */
    model_head *head;
    ogk_qtensor lm_plain; /* w.lm_head when the pack's lm_head is unquantised */
} model;

/* Per-pass phase timings (OGAKIT_PROF=1 prints them). */
typedef struct model_prof {
    double embed_ms, layers_ms, attn_ms, head_ms, sampling_ms; /* attn_ms: part of layers_ms */
    double gemm_ms; /* the layers' weight GEMM launches (matmul_pair), part of layers_ms (the classifier: head_ms) */
    int rows, launches;
    int head_cols; /* classifier columns the argmax head recomputed in 16-bit (0: it did not run) */
} model_prof;

typedef struct model_state {
    const model *m;
    kern_pool *pool;
    int context;    /* positions the KV cache holds (<= model context) */
    int logit_rows; /* rows of logits one pass can return (1, <= 16, or 128) */
    int mode;       /* enum kern_mode: KERN_F32 or KERN_I8 activations (the classifier: model_int.h) */
    int pos;        /* tokens already in the KV cache */
    /* LongRoPE (model_config.rope_long_after): the row at position p rotates with the long caches when its
     * sequence is longer than that: max(p + 1, seq_end) (model_set_seq_end) */
    int seq_end;
    /* set by a caller that reads nothing of a logits row but its argmax (model_argmax: greedy decoding without
     * logprobs, a greedy verify): in i8 mode the classifier then runs in int8 and recomputes in 16-bit only
     * the entries that could be a row's maximum (head.c). The argmax is the full classifier's; the other
     * entries are int8 approximations. 0 by default. */
    int head_argmax;
    /* activations for up to MODEL_CHUNK rows, row-major */
    float *x;      /* [rows][dim] the residual stream */
    float *xb;     /* [rows][dim] normed input of a sublayer, then its output */
    float *q;      /* [rows][n_heads*head_dim] queries, then the attention output */
    float *k, *v;  /* [rows][n_kv_heads*head_dim] */
    float *qkv;    /* [rows][q+k+v] packed projection output */
    float *hb, *hb2; /* [rows][hidden_dim] gate and up */
    float *att;    /* [n_heads][context] scores, one slice per head */
    float *logits; /* [logit_rows][vocab] */
    float *batch_logits; /* model_forward_batch's classifier output [rows][vocab] (grown on use) */
    size_t batch_cap;
    /* kv cache [layer][kv_head][context][head_dim]: fp32, or fp16 (IEEE half) when kv_f16 (the i8 mode:
     * half the bytes that long-context attention reads) */
    void *key_cache, *value_cache;
    int kv_f16;
    /* the keys once more, transposed in blocks of 16 positions (kern.h: attend_ht), for the fp16
     * cache's attention: [layer][kv_head][block][head_dim][16] fp16; NULL unless the i8 mode, a head_dim
     * attend_ht takes (KERN_ATTEND_HD) and a kernel row with attend_ht */
    uint16_t *key_t;
    model_prof prof;
    int prof_print; /* OGAKIT_PROF set */
    int pool_borrowed; /* the pool belongs to someone else (model_state_new_shared) */
    int failed;       /* a kernel refused during this pass (model_forward returns its error) */
    ogk_error fail;
    /* one query row's attention for g query heads sharing a KV head (q and att slices consecutive,
     * att slices as floats apart): the ISA table row's attend (kern.h) */
    void (*attend)(float *q, int g, const float *kc, const float *vc, int n, int hd, float scale, float *att,
                   size_t as);
    void (*attend_h)(float *q, size_t qs, int rows, int g, const uint16_t *kc, const uint16_t *vc, int n0, int hd,
                     float scale, float *att, size_t as);
    void (*attend_ht)(float *q, size_t qs, int rows, int g, const uint16_t *kt, const uint16_t *vc, int n0, int hd,
                      float scale, float *att, size_t as);
    /* soft-capped / windowed attention (Gemma 2): the ISA table row's attend_ext */
    void (*attend_ext)(float *q, int g, const void *kc, const void *vc, int f16, int t0, int n, int hd, float scale,
                       float cap, float *att, size_t as);
    /* g[i] = act(g[i]) * up[i] over n values: the ISA table row's swiglu, or the GELU gates (model.c) */
    void (*swiglu)(float *g, const float *up, size_t n);
    void (*half)(uint16_t *dst, const float *src, size_t n); /* fp32 -> the fp16 cache */
} model_state;

/* Open a container and bind the model to it. NULL on failure with e filled and *code set:
 * 3 not a container / malformed, 4 a model this code cannot run (family, missing or misshapen tensor). */
model *model_open(const char *path, ogk_error *e, int *code);
/* model_open with q4nx_open_flags flags (Q4NX_OPEN_LOAD: weights copied into huge pages). */
model *model_open_flags(const char *path, int flags, ogk_error *e, int *code);
void model_close(model *m);

/* Allocate the state for a context of `context` positions (0: the model's). logit_rows is the most rows
 * one model_forward call returns logits for (1 for generation, up to MODEL_CHUNK for teacher forcing).
 * threads <= 0: online CPUs; the state owns the kernel thread pool. */
model_state *model_state_new(const model *m, int context, int logit_rows, int mode, int threads, ogk_error *e);
void model_state_free(model_state *s);
/* The same on a pool the caller owns and frees after the state (several states, one set of threads:
 * the server's slots). Use the states from one thread at a time (the pool is not reentrant). */
model_state *model_state_new_shared(const model *m, int context, int logit_rows, int mode, kern_pool *pool,
                                    ogk_error *e);
void model_state_reset(model_state *s); /* forget the cache (pos = 0, seq_end = 0) */
/* The length of the sequence now being read (a prompt's, however many calls or passes read it): as
 * onnxruntime-genai reads a whole prompt in one run, a LongRoPE model (model_config.rope_long_after) then
 * rotates all of it with the caches of a sequence that long. Past it (generated tokens, verify rows) the
 * row at position p is in a sequence of p + 1, as in one-token steps, so a row's result does not depend on
 * how rows are grouped into calls or passes. 0 (the default, and after model_state_reset): p + 1 alone. */
void model_set_seq_end(model_state *s, int end);
/* rows of one prefill pass in s's mode: MODEL_CHUNK in i8 mode, MODEL_F32_CHUNK in f32 mode */
int model_prefill_rows(const model_state *s);

/* Run tokens[0..n) at positions s->pos.. through the model, appending to the KV cache. Rows go in
 * passes of up to model_prefill_rows(s). all_rows: logits of every row into s->logits (requires n <= logit_rows);
 * otherwise only the last row's (s->logits row 0). Returns 0, or -1 with e filled when the context is full or
 * a kernel refused (then the pass is not kept: s->pos is as before the call). */
int model_forward(model_state *s, const int *tokens, int n, int all_rows, ogk_error *e);
/* the first of V logits that is not finite (NaN, an infinity), or -1; model_forward fails on its last row's */
int model_logits_bad(const float *x, int V);
/* Make the classifier's argmax head ready now (s->head_argmax, head.c: its bounds are otherwise made on the
 * first pass that uses it, ~0.1 s for a 150k vocabulary on 2 threads); nothing when s's mode has no head. */
void model_prepare_head(model_state *s);

/* Take back the last n positions (rejected speculative tokens). */
void model_rewind(model_state *s, int n);

int model_is_eos(const model *m, int id);
/* The mode a run takes when none is asked for: KERN_I8 when the pack's MatMulNBits projections ran at
 * accuracy_level 4 (onnxruntime would quantise activations to int8), else KERN_F32. */
int model_default_mode(const model *m);

/* ---- continuous batching (batch.c) ----
 * One pass of n rows, row i a token of states[i] (states of one model) at states[i]->pos: the
 * projections of all rows run as one matmul of M = n rows through work's activation buffers (work:
 * any state of the model, its KV cache is not touched), so the weights stream once for all of them;
 * RoPE, the KV write and attention run per row against that row's own cache. A state may take
 * several consecutive rows (a speculative verify, or a chunk of its prompt: tokens at consecutive
 * positions); its pos advances by its row count. want (NULL: every row) says which rows need logits:
 * the classifier runs for those only, and a state's r-th such row lands in its logits row r (at most
 * logit_rows of them per state).
 * Each row's result is bit-identical to model_forward(state, &token, 1, 0) one token at a time: in i8 mode the
 * kernels' result for a row does not depend on M (exact integer dot products, int8 or the classifier's
 * 16-bit, then the same fp32 steps per group in the same order); fp32 activations (f32 mode, and the
 * classifier on a kernel path without 16-bit activations) are summed in a different order by the M = 1
 * and M > 1 kernels, so those matmuls run row by row at M = 1 (the weights are then read once per row). n <= MODEL_CHUNK. 0, or -1 with e filled (a full
 * context, an id out of range). */
int model_forward_batch(model_state *work, model_state *const *states, const int *tokens, int n,
                        const unsigned char *want, ogk_error *e);

/* ---- sampling (generate.c) ---- */
typedef struct model_sampler {
    float temperature; /* 0: greedy */
    int top_k;         /* 0: off */
    float top_p;       /* 1: off; 0: the most likely token only */
    uint64_t rng;
    int *idx;          /* [vocab] scratch */
    float *prob;       /* [vocab] scratch */
    int vocab;
} model_sampler;
int model_sampler_init(model_sampler *sp, int vocab, float temperature, int top_k, float top_p, uint64_t seed);
/* the ids a sampler draws from: the model's vocabulary (model_vocab), but with temperature > 0 only the tokenizer's ids
 * (tok_vocab: the tokenizer's max id + 1) when the classifier has more rows (Qwen pads its vocabulary):
 * a padded row's logit can win a draw at a high temperature, and no text decodes from it. Greedy
 * decoding keeps the whole row (the argmax head's result is exact over the whole row only). */
int model_sample_vocab(int model_vocab, int tok_vocab, float temperature);
void model_sampler_free(model_sampler *sp);
int model_sample(model_sampler *sp, const float *logits);
int model_argmax(const float *logits, int n);
/* log(sum(exp(x))) over n logits, in double (the log-softmax's normaliser) */
double model_logsumexp(const float *x, int n);
/* the indices of the k largest of n logits into idx[k], largest first (ties: lower index first);
 * returns how many were written (min(k, n)) */
int model_top_ids(const float *x, int n, int k, int *idx);

/* Stop strings over streamed text: holds back what could still become a stop string. */
typedef struct model_stopper {
    char **stops;
    int n;
    char *buf; /* text not yet released */
    size_t len, cap;
    int hit;
} model_stopper;
void model_stopper_init(model_stopper *st, char **stops, int n);
void model_stopper_free(model_stopper *st);
/* Feed text; writes what may be released to out (callback). Returns 1 once a stop string is seen
 * (the text before it has been released, the rest dropped). */
int model_stopper_feed(model_stopper *st, const char *text, size_t len, void (*out)(const char *, size_t, void *),
                       void *ctx);
void model_stopper_flush(model_stopper *st, void (*out)(const char *, size_t, void *), void *ctx);
/* 1 when text, a special token's (which adds none to the text the filter reads), is one of the stop strings:
 * "<|im_end|>" as a stop string ends an answer where the model writes that token */
int model_stopper_special(const model_stopper *st, const char *text, size_t len);

/* ---- generation (generate.c): prefill the prompt, then sample and decode one token per pass ---- */
typedef struct model_gen {
    int max_new;    /* tokens to generate at most */
    int ignore_eos; /* keep going past EOS ids (benchmarks, oracle comparisons) */
    int (*on_token)(int id, void *ctx); /* every new non-EOS token; nonzero stops ("stop") */
    void *ctx;
} model_gen;
typedef struct model_gen_stats {
    int prompt_tokens, new_tokens;
    double prefill_ms, ttft_ms, decode_ms, sampling_ms;
    const char *stop; /* "eos", "length", "stop", "context" */
} model_gen_stats;
/* Runs from the state's current position (model_state_reset first for a fresh prompt). 0, or -1 with
 * e filled (the prompt does not fit the context). */
int model_generate(model_state *s, model_sampler *sp, const int *prompt, int n, const model_gen *g,
                   model_gen_stats *st, ogk_error *e);

/* (Prompts, inputs and the container's tokenizer for programs: lib/app.) */

/* ---- greedy speculative decoding (spec.c) ----
 * The target prefills all of the prompt but its last token; every round the drafter proposes k
 * tokens greedily, the target runs [last accepted token, drafts] in one verify pass (k+1 rows of
 * logits), the longest prefix of drafts equal to the target's argmax is accepted and the target's
 * own next token appended; both KV caches are rewound past what was rejected. A round offers
 * min(k, tokens still wanted) drafts (lib/spec's replay rule), so drafted counts only drafts that
 * could be kept; rounds repeat until max_new tokens exist (a last round whose drafts are all accepted
 * computes one token past max_new; it is dropped) or, unless ignore_eos,
 * an EOS id is produced (not included). The output equals the target's plain greedy decoding up to
 * near-ties between the verify pass's and a decode step's float rounding. */
typedef struct model_spec_stats {
    int rounds, drafted, accepted, new_tokens;
    int draft_tokens_run;                   /* tokens the drafter's forward passes ran */
    double prefill_ms, draft_ms, verify_ms; /* draft/verify: the rounds' passes */
    double decode_ms;                       /* all rounds, wall */
    const char *stop;                       /* "eos", "length", "context" */
} model_spec_stats;
/* out: room for max_new ids. T needs logit_rows >= k + 1. Both states run with head_argmax set (their
 * logits hold argmaxes only afterwards; the flags are restored). 0, or -1 with e filled. */
int model_spec_greedy(model_state *T, model_state *D, const int *prompt, int n, int max_new, int k, int ignore_eos,
                      int *out, model_spec_stats *st, ogk_error *e);
/* Plain greedy decoding over the same rule (prompt all but last, then one token per pass), for
 * comparison: ids into out, top-1 minus top-2 logit of every step into gap (may be NULL), time of
 * the decode passes into *decode_ms. Returns the number of new tokens, or -1 with e filled. */
int model_greedy(model_state *T, const int *prompt, int n, int max_new, int ignore_eos, int *out, float *gap,
                 double *decode_ms, ogk_error *e);

/* ---- benchmark (bench.c), like onnxruntime-genai's model_benchmark ---- */
typedef struct model_bench_opts {
    const int *prompt_lens;
    int n_lens;
    int gen;    /* tokens generated after each prompt (decode passes) */
    int reps;   /* measured repetitions per length (after one warm-up) */
    int warmup; /* warm-up runs per length */
    int probe;  /* before every measured run, one DRAM read pass over the container's bytes */
    const int *verify_rows; /* after each prompt: passes of these many rows (2..MODEL_VERIFY_MAX, like a */
    int n_verify;           /* greedy verify pass: each row's argmax) alternated with 1-row decode steps */
    int full_head;          /* the verify passes compute every row's logits (not the argmax head) */
} model_bench_opts;
/* JSON result: per prompt length TTFT / prefill tok/s / decode tok/s / E2E (median and stddev), peak
 * RSS, weight bytes per token; with probe, per length the probe's GB/s and decode's fraction of it
 * (weight bytes per token x decode tok/s / probe GB/s, the median of the run-by-run ratios). With
 * verify_rows: per length "verify": [{rows, head, ms, steps, layers_ms, attention_ms, head_ms, cpu_ms, cpu_steps}],
 * each the median over rounds that run a 1-row step and every k-row pass in turn at the same position
 * (steps: the k-row pass over the step of its round; cpu_: the same in process CPU time; head: "argmax" when the
 * passes ran the classifier's argmax head, "full" with full_head or a mode without one); the state needs
 * logit_rows >= the largest k. NULL with e filled
 * when a length does not fit the context. */
json_t *model_bench(model_state *s, const model_bench_opts *o, ogk_error *e);
/* The deterministic prompt the benchmark uses (same LCG as tools/ort-ref.js --bench). */
void model_bench_prompt(int *ids, int n, int vocab);

void model_prof_print(const model_state *s, const char *pass);

#endif
