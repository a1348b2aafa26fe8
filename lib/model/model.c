/* The forward pass. Reads top-down like the math; each family difference is a small named step
 * (qkv bias, q/k norm), not a copy of the loop. Rows: a pass takes up to MODEL_CHUNK token rows at
 * consecutive positions (prefill chunk, verify batch, or one decode token) through the same code. */
#define _GNU_SOURCE
#include "model.h"
#include "model_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kern/kern.h"

/* query rows per attend_h / attend_ht call (the i8 mode's fp16 cache): a prompt chunk reads each key and value
 * once per ATTN_ROWS rows; the score buffer holds ATTN_ROWS slices per head */
#define ATTN_ROWS 16

/* positions the transposed key copy holds: the context rounded up to whole blocks of 16 */
static size_t key_t_ctx(int context) { return ((size_t)context + 15) / 16 * 16; }

/* ---------------------------------------------------------------- loading */

/* The container's tensors as lib/mdesc sees them: the one check of a runnable model, shared with the
 * pack reader (oga-info), so the binding below can only fail on memory. */
static int check_tensors(model *m, ogk_error *e)
{
    size_t n = q4nx_tensor_count(m->file);
    mdesc_tensor *t = calloc(n + 1, sizeof *t);
    if (!t)
        return ogk_fail(e, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const ogk_qtensor *q = q4nx_tensor_at(m->file, i);
        t[i].role = q->role;
        t[i].dtype = q->dtype == OGK_F32 ? MDESC_F32 : q->dtype == OGK_F16 ? MDESC_F16 : q->dtype == OGK_BF16 ? MDESC_BF16
                   : q->dtype == OGK_Q4 ? MDESC_Q4 : q->dtype == OGK_Q8 ? MDESC_Q8 : 0; /* mdesc has its own numbers */
        t[i].ndim = q->ndim;
        memcpy(t[i].shape, q->shape, sizeof t[i].shape);
    }
    int rc = mdesc_check_tensors(&m->c, t, n, e, NULL);
    free(t);
    return rc;
}

/* fp32 view of a small plain tensor of exactly `count` elements (first `count` when prefix): points
 * into the mapping when it already is aligned fp32, else converted once into an owned buffer. */
static const float *plain_floats(model *m, const char *role, const ogk_qtensor *t, uint64_t count, int prefix,
                                 ogk_error *e)
{
    if (!t) {
        ogk_fail(e, "tensor %s: missing", role);
        return NULL;
    }
    size_t es = ogk_dtype_size(t->dtype);
    if (t->dtype != OGK_F32 && t->dtype != OGK_F16 && t->dtype != OGK_BF16) {
        ogk_fail(e, "tensor %s: dtype %s, want a float vector", role, ogk_dtype_name(t->dtype));
        return NULL;
    }
    uint64_t have = t->nbytes / es;
    if (prefix ? have < count : have != count) {
        ogk_fail(e, "tensor %s: %llu elements, want %s%llu", role, (unsigned long long)have, prefix ? ">= " : "",
                 (unsigned long long)count);
        return NULL;
    }
    if (t->dtype == OGK_F32 && ((uintptr_t)t->data & 3) == 0)
        return t->data;
    float *f = malloc(count * sizeof *f);
    void **o = realloc(m->owned, (size_t)(m->n_owned + 1) * sizeof *o);
    if (!f || !o) {
        free(f);
        free(o);
        ogk_fail(e, "out of memory converting %s", role);
        return NULL;
    }
    m->owned = o;
    m->owned[m->n_owned++] = f;
    for (uint64_t i = 0; i < count; i++) {
        if (t->dtype == OGK_F32) {
            memcpy(&f[i], (const uint8_t *)t->data + i * 4, 4);
        } else {
            uint16_t h;
            memcpy(&h, (const uint8_t *)t->data + i * 2, 2);
            f[i] = t->dtype == OGK_F16 ? ogk_f16_to_f32(h) : ogk_bf16_to_f32(h);
        }
    }
    return f;
}

static const ogk_qtensor *quantised(model *m, const char *role, uint32_t n, uint32_t k, int optional, ogk_error *e)
{
    const ogk_qtensor *t = q4nx_find(m->file, role);
    if (!t) {
        if (!optional)
            ogk_fail(e, "tensor %s: missing", role);
        return NULL;
    }
    if (!ogk_dtype_quantised(t->dtype)) {
        ogk_fail(e, "tensor %s: dtype %s, want q4 or q8", role, ogk_dtype_name(t->dtype));
        return NULL;
    }
    if (t->n != n || t->k != k) {
        ogk_fail(e, "tensor %s: shape [%u, %u], want [%u, %u]", role, t->n, t->k, n, k);
        return NULL;
    }
    m->weight_bytes += ogk_quant_codes_bytes(&t->desc) + ogk_quant_groups(&t->desc) * (ogk_dtype_size(t->scale_dtype) + !!t->has_zp);
    return t;
}

static int bind_layer(model *m, int l, ogk_error *e)
{
    const model_config *c = &m->c;
    model_layer *L = &m->w.layers[l];
    uint32_t qd = (uint32_t)(c->n_heads * c->head_dim), kvd = (uint32_t)(c->n_kv_heads * c->head_dim);
    char role[96];
#define ROLE(s) (snprintf(role, sizeof role, "layers.%d.%s", l, s), role)
#define FIND(s) q4nx_find(m->file, ROLE(s))
    if (!(L->input_norm = plain_floats(m, ROLE("input_norm"), FIND("input_norm"), (uint64_t)c->dim, 0, e)) ||
        !(L->post_attn_norm = plain_floats(m, ROLE("post_attn_norm"), FIND("post_attn_norm"), (uint64_t)c->dim, 0, e)))
        return -1;
    /* a LayerNorm's biases (absent: 0) */
    if (c->layer_norm && ((FIND("input_norm_bias") &&
                           !(L->input_norm_b = plain_floats(m, ROLE("input_norm_bias"), FIND("input_norm_bias"),
                                                            (uint64_t)c->dim, 0, e))) ||
                          (FIND("post_attn_norm_bias") &&
                           !(L->post_attn_norm_b = plain_floats(m, ROLE("post_attn_norm_bias"), FIND("post_attn_norm_bias"),
                                                                (uint64_t)c->dim, 0, e)))))
        return -1;
    /* attention projections: packed (cpu-style) or separate (amd-style) */
    if (FIND("attn.qkv")) {
        if (!(L->wqkv = quantised(m, ROLE("attn.qkv"), qd + 2 * kvd, (uint32_t)c->dim, 0, e)))
            return -1;
    } else if (!(L->wq = quantised(m, ROLE("attn.q"), qd, (uint32_t)c->dim, 0, e)) ||
               !(L->wk = quantised(m, ROLE("attn.k"), kvd, (uint32_t)c->dim, 0, e)) ||
               !(L->wv = quantised(m, ROLE("attn.v"), kvd, (uint32_t)c->dim, 0, e))) {
        return -1;
    }
    if (c->qkv_bias) {
        if (FIND("attn.qkv_bias")) {
            const float *b = plain_floats(m, ROLE("attn.qkv_bias"), FIND("attn.qkv_bias"), qd + 2 * kvd, 0, e);
            if (!b)
                return -1;
            L->bq = b, L->bk = b + qd, L->bv = b + qd + kvd;
        } else if (!(L->bq = plain_floats(m, ROLE("attn.q_bias"), FIND("attn.q_bias"), qd, 0, e)) ||
                   !(L->bk = plain_floats(m, ROLE("attn.k_bias"), FIND("attn.k_bias"), kvd, 0, e)) ||
                   !(L->bv = plain_floats(m, ROLE("attn.v_bias"), FIND("attn.v_bias"), kvd, 0, e))) {
            return -1;
        }
    }
    if (c->qk_norm &&
        (!(L->q_norm = plain_floats(m, ROLE("attn.q_norm"), FIND("attn.q_norm"), (uint64_t)c->head_dim, 0, e)) ||
         !(L->k_norm = plain_floats(m, ROLE("attn.k_norm"), FIND("attn.k_norm"), (uint64_t)c->head_dim, 0, e))))
        return -1;
    if (c->sandwich &&
        (!(L->attn_out_norm = plain_floats(m, ROLE("attn.out_norm"), FIND("attn.out_norm"), (uint64_t)c->dim, 0, e)) ||
         !(L->mlp_out_norm = plain_floats(m, ROLE("mlp.out_norm"), FIND("mlp.out_norm"), (uint64_t)c->dim, 0, e))))
        return -1;
    if (!(L->wo = quantised(m, ROLE("attn.o"), (uint32_t)c->dim, qd, 0, e)) ||
        !(L->w_gate = quantised(m, ROLE("mlp.gate"), (uint32_t)c->hidden_dim, (uint32_t)c->dim, 0, e)) ||
        !(L->w_up = quantised(m, ROLE("mlp.up"), (uint32_t)c->hidden_dim, (uint32_t)c->dim, 0, e)) ||
        !(L->w_down = quantised(m, ROLE("mlp.down"), (uint32_t)c->dim, (uint32_t)c->hidden_dim, 0, e)))
        return -1;
#undef FIND
#undef ROLE
    return 0;
}

static int bind_weights(model *m, ogk_error *e)
{
    const model_config *c = &m->c;
    m->w.layers = calloc((size_t)c->n_layers, sizeof *m->w.layers);
    if (!m->w.layers)
        return ogk_fail(e, "out of memory");
    const ogk_qtensor *lt = q4nx_find(m->file, "lm_head");
    if (lt && !ogk_dtype_quantised(lt->dtype)) {
        /* unquantised (the builder's nodes_to_exclude=/lm_head/MatMul): the MatMul's B, [dim, vocab], as fp32;
         * check_tensors (lib/mdesc) has taken it as untied and of that shape */
        const float *d = plain_floats(m, "lm_head", lt, (uint64_t)c->dim * (uint64_t)c->vocab_size, 0, e);
        if (!d)
            return -1;
        m->lm_plain = *lt;
        m->lm_plain.dtype = OGK_F32, m->lm_plain.data = d;
        m->lm_plain.n = (uint32_t)c->vocab_size, m->lm_plain.k = (uint32_t)c->dim;
        m->lm_plain.nbytes = (uint64_t)c->dim * (uint64_t)c->vocab_size * 4;
        m->w.lm_head = &m->lm_plain;
        m->weight_bytes += m->lm_plain.nbytes;
    } else if (!(m->w.lm_head = quantised(m, "lm_head", (uint32_t)c->vocab_size, (uint32_t)c->dim, 0, e)))
        return -1;
    if (c->tied) {
        m->w.embed = m->w.lm_head;
    } else {
        const ogk_qtensor *t = q4nx_find(m->file, "embed");
        if (!t)
            return ogk_fail(e, "tensor embed: missing (the model is not tied)");
        if (ogk_dtype_quantised(t->dtype)) {
            if (t->n != (uint32_t)c->vocab_size || t->k != (uint32_t)c->dim)
                return ogk_fail(e, "tensor embed: shape [%u, %u], want [%d, %d]", t->n, t->k, c->vocab_size, c->dim);
        } else if ((t->dtype != OGK_F32 && t->dtype != OGK_F16 && t->dtype != OGK_BF16) ||
                   t->nbytes != (uint64_t)c->vocab_size * c->dim * ogk_dtype_size(t->dtype)) {
            return ogk_fail(e, "tensor embed: %s, %llu bytes, want float [%d, %d]", ogk_dtype_name(t->dtype),
                            (unsigned long long)t->nbytes, c->vocab_size, c->dim);
        }
        m->w.embed = t;
    }
    for (int l = 0; l < c->n_layers; l++)
        if (bind_layer(m, l, e))
            return -1;
    if (!(m->w.final_norm = plain_floats(m, "final_norm", q4nx_find(m->file, "final_norm"), (uint64_t)c->dim, 0, e)))
        return -1;
    const ogk_qtensor *fb = c->layer_norm ? q4nx_find(m->file, "final_norm_bias") : NULL;
    if (fb && !(m->w.final_norm_b = plain_floats(m, "final_norm_bias", fb, (uint64_t)c->dim, 0, e)))
        return -1;
    /* RoPE: the pack's own cos/sin caches [context_length, rope_dim/2] (scaled variants included) */
    const ogk_qtensor *cs = q4nx_find(m->file, "rope.cos"), *sn = q4nx_find(m->file, "rope.sin");
    if (!cs || !sn)
        return ogk_fail(e, "tensor rope.cos/rope.sin: missing (the container must carry the pack's RoPE caches)");
    if (cs->ndim == 2 && cs->shape[1] * 2 != (uint64_t)c->rope_dim)
        return ogk_fail(e, "tensor rope.cos: %llu columns, want rope dim / 2 = %d", (unsigned long long)cs->shape[1],
                        c->rope_dim / 2);
    uint64_t half = (uint64_t)(c->rope_dim / 2), cnt = (uint64_t)m->c.context_length * half;
    /* LongRoPE: the short pair serves sequences up to rope_long_after, the long one the rest */
    uint64_t short_cnt = c->rope_long_after && (uint64_t)c->rope_long_after < (uint64_t)m->c.context_length
                             ? (uint64_t)c->rope_long_after * half : cnt;
    if (!(m->w.rope_cos = plain_floats(m, "rope.cos", cs, short_cnt, 1, e)) ||
        !(m->w.rope_sin = plain_floats(m, "rope.sin", sn, short_cnt, 1, e)))
        return -1;
    if (c->rope_long_after &&
        (!(m->w.rope_cos_long = plain_floats(m, "rope.cos_long", q4nx_find(m->file, "rope.cos_long"), cnt, 1, e)) ||
         !(m->w.rope_sin_long = plain_floats(m, "rope.sin_long", q4nx_find(m->file, "rope.sin_long"), cnt, 1, e))))
        return -1;
    return 0;
}

model *model_open(const char *path, ogk_error *e, int *code)
{
    return model_open_flags(path, 0, e, code);
}

model *model_open_flags(const char *path, int flags, ogk_error *e, int *code)
{
    model *m = calloc(1, sizeof *m);
    if (!m) {
        *code = OGK_EXIT_INIT;
        ogk_fail(e, "out of memory");
        return NULL;
    }
    *code = OGK_EXIT_INPUT;
    if (!(m->file = q4nx_open_flags(path, flags, e, code))) {
        free(m);
        return NULL;
    }
    if (mdesc_config(&m->c, q4nx_model(m->file), e, code, NULL))
        goto fail;
    *code = OGK_EXIT_INIT;
    if (check_tensors(m, e) || bind_weights(m, e))
        goto fail;
    if (!(m->head = model_head_new())) {
        ogk_fail(e, "out of memory");
        goto fail;
    }
    return m;
fail:
    model_close(m);
    return NULL;
}

void model_close(model *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->n_owned; i++)
        free(m->owned[i]);
    free(m->owned);
    free(m->w.layers);
    model_head_free(m->head);
    if (m->file)
        q4nx_close(m->file);
    free(m);
}

int model_default_mode(const model *m)
{
    const json_t *a = json_object_get(q4nx_model(m->file), "accuracy_level");
    return json_is_integer(a) && json_integer_value(a) == 4 ? KERN_I8 : KERN_F32;
}

int model_is_eos(const model *m, int id)
{
    for (int i = 0; i < m->c.n_eos; i++)
        if (m->c.eos_ids[i] == id)
            return 1;
    return 0;
}

/* ---------------------------------------------------------------- state */

model_state *model_state_new(const model *m, int context, int logit_rows, int mode, int threads, ogk_error *e)
{
    const model_config *c = &m->c;
    if (context <= 0 || context > c->context_length)
        context = c->context_length;
    if (logit_rows < 1)
        logit_rows = 1;
    if (logit_rows > MODEL_CHUNK)
        logit_rows = MODEL_CHUNK;
    if (kern_isa_init(e) < 0) /* a refused OGAKIT_KERNEL */
        return NULL;
    model_state *s = calloc(1, sizeof *s);
    if (!s) {
        ogk_fail(e, "out of memory");
        return NULL;
    }
    s->m = m, s->context = context, s->logit_rows = logit_rows, s->mode = mode;
    if (!(s->pool = kern_pool_new(threads))) {
        free(s);
        int n = threads > 0 ? threads : ogk_ncpu(); /* 0: one per CPU (kern_pool_new) */
        ogk_fail(e, "cannot start %d threads (out of memory or a process limit)", n > KERN_MAX_THREADS ? KERN_MAX_THREADS : n);
        return NULL;
    }
    size_t R = MODEL_CHUNK, qd = (size_t)c->n_heads * c->head_dim, kvd = (size_t)c->n_kv_heads * c->head_dim;
    /* the KV cache is large and touched only as positions fill: calloc maps zero pages lazily */
    size_t cache = (size_t)c->n_layers * kvd * (size_t)context;
    s->x = calloc(R * c->dim, sizeof(float));
    s->xb = calloc(R * c->dim, sizeof(float));
    s->q = calloc(R * qd, sizeof(float));
    s->k = calloc(R * kvd, sizeof(float));
    s->v = calloc(R * kvd, sizeof(float));
    s->qkv = calloc(R * (qd + 2 * kvd), sizeof(float));
    s->hb = calloc(R * c->hidden_dim, sizeof(float));
    s->hb2 = calloc(R * c->hidden_dim, sizeof(float));
    s->att = calloc((size_t)c->n_heads * (mode == KERN_I8 ? ATTN_ROWS : 1) * context, sizeof(float));
    s->logits = calloc((size_t)logit_rows * c->vocab_size, sizeof(float));
    s->kv_f16 = mode == KERN_I8;
    s->key_cache = ogk_big_calloc(cache, s->kv_f16 ? sizeof(uint16_t) : sizeof(float));
    s->value_cache = ogk_big_calloc(cache, s->kv_f16 ? sizeof(uint16_t) : sizeof(float));
    s->attend_ht = kern_isa_current()->attend_ht;
    int want_key_t = s->kv_f16 && s->attend_ht && KERN_ATTEND_HD(c->head_dim);
    if (want_key_t)
        s->key_t = ogk_big_calloc((size_t)c->n_layers * kvd * key_t_ctx(context), sizeof(uint16_t));
    if (!s->x || !s->xb || !s->q || !s->k || !s->v || !s->qkv || !s->hb || !s->hb2 || !s->att || !s->logits ||
        !s->key_cache || !s->value_cache || (want_key_t && !s->key_t)) {
        model_state_free(s);
        ogk_fail(e, "out of memory for a context of %d positions (-c lowers it)", context);
        return NULL;
    }
    /* attention and SwiGLU from the same row of the ISA table as the kernels (OGAKIT_KERNEL=ref: portable) */
    s->attend = kern_isa_current()->attend;
    s->attend_h = kern_isa_current()->attend_h;
    s->attend_ext = kern_isa_current()->attend_ext;
    s->swiglu = c->activation == MODEL_ACT_GELU_TANH ? kern_isa_current()->geglu
                : c->activation == MODEL_ACT_GELU      ? kern_gelu_erf_gate
                                                       : kern_isa_current()->swiglu;
    s->half = kern_isa_current()->half;
    const char *p = getenv("OGAKIT_PROF");
    s->prof_print = p && *p && strcmp(p, "0");
    return s;
}

void model_state_free(model_state *s)
{
    if (!s)
        return;
    free(s->x), free(s->xb), free(s->q), free(s->k), free(s->v), free(s->qkv), free(s->hb), free(s->hb2);
    free(s->att), free(s->logits), free(s->batch_logits), free(s->key_cache), free(s->value_cache), free(s->key_t);
    if (!s->pool_borrowed)
        kern_pool_free(s->pool);
    free(s);
}

void model_state_reset(model_state *s) { s->pos = 0, s->seq_end = 0; }

void model_set_seq_end(model_state *s, int end) { s->seq_end = end > 0 ? end : 0; }

int model_prefill_rows(const model_state *s) { return s->mode == KERN_I8 ? MODEL_CHUNK : MODEL_F32_CHUNK; }

void model_rewind(model_state *s, int n) { s->pos = n > s->pos ? 0 : s->pos - n; }

/* ---------------------------------------------------------------- the steps */

/* A sum over x in 16 lanes (element i into lane i mod 16, each a product then a sum: no fused
 * multiply-add, so every build and CPU gets the same bits), the lanes added in a fixed tree: 16
 * independent chains instead of one of n dependent adds. squares: the sum of (x - mean)^2 (mean 0: x^2),
 * else of x. */
static inline float lane_sum(const float *x, int n, int squares, float mean)
{
    float acc[16] = {0};
    int i = 0;
    for (; i + 16 <= n; i += 16)
        for (int l = 0; l < 16; l++)
            acc[l] += squares ? (x[i + l] - mean) * (x[i + l] - mean) : x[i + l];
    for (int l = 0; i < n; i++, l++)
        acc[l] += squares ? (x[i] - mean) * (x[i] - mean) : x[i];
    for (int h = 8; h; h >>= 1)
        for (int l = 0; l < h; l++)
            acc[l] += acc[l + h];
    return acc[0];
}

static void rmsnorm(float *o, const float *x, const float *w, int n, float eps)
{
    float r = 1.0f / sqrtf(lane_sum(x, n, 1, 0.0f) / (float)n + eps);
    for (int i = 0; i < n; i++)
        o[i] = x[i] * r * w[i];
}

/* LayerNorm: (x - mean) / sqrt(var + eps) * w + b (b NULL: 0), the variance of the deviations (two passes,
 * not E[x^2] - mean^2) */
static void layernorm(float *o, const float *x, const float *w, const float *b, int n, float eps)
{
    float mean = lane_sum(x, n, 0, 0.0f) / (float)n;
    float r = 1.0f / sqrtf(lane_sum(x, n, 1, mean) / (float)n + eps);
    for (int i = 0; i < n; i++)
        o[i] = (x[i] - mean) * r * w[i] + (b ? b[i] : 0.0f);
}

/* the residual stream's norm of one row: the model's kind (RMSNorm, or LayerNorm with bias b) */
static void norm_row(const model_config *c, float *o, const float *x, const float *w, const float *b)
{
    if (c->layer_norm)
        layernorm(o, x, w, b, c->dim, c->rms_eps);
    else
        rmsnorm(o, x, w, c->dim, c->rms_eps);
}

/* y[rows x N] = x[rows x K] · Wᵀ, through the kernels */
int model_matmul_mode(const model_state *s, const ogk_qtensor *w)
{
    return s->mode != KERN_I8 || !ogk_dtype_quantised(w->dtype) ? KERN_F32 /* an unquantised lm_head: fp32, as onnxruntime's MatMul */
           : w != s->m->w.lm_head ? KERN_I8
           : w->dtype == OGK_Q8 ? KERN_F32 /* q8 has no 16-bit mode: its classifier in fp32 */
           : kern_isa_current()->gemm_i16 ? KERN_I16 : KERN_F32;
}

/* a launch refused: the rest of the pass runs on, and model_forward returns the first error */
static void launch_failed(model_state *s, const ogk_qtensor *w, const ogk_error *e)
{
    if (!s->failed) {
        s->failed = 1;
        ogk_fail(&s->fail, "%s: %s", w->role, e->msg);
    }
}

/* y1 = x·w1ᵀ, and y2 = x·w2ᵀ in the same launch when w2 is not NULL (the MLP's gate and up: kern_matmul2) */
static void matmul_pair(model_state *s, float *y1, const ogk_qtensor *w1, float *y2, const ogk_qtensor *w2,
                        const float *x, int rows)
{
    /* every tensor was checked to be Q4 of the right shape at load, so the kernels cannot refuse it */
    int mode = model_matmul_mode(s, w1);
    if (w2 && mode != model_matmul_mode(s, w2)) {
        matmul_pair(s, y1, w1, NULL, NULL, x, rows);
        matmul_pair(s, y2, w2, NULL, NULL, x, rows);
        return;
    }
    ogk_error e;
    double t0 = ogk_now(); /* two clock reads a launch: tens of nanoseconds against microseconds */
    if (kern_matmul2(s->pool, w1, y1, w2, y2, x, rows, mode, &e))
        launch_failed(s, w1, &e);
    s->prof.launches++;
    s->prof.gemm_ms += (ogk_now() - t0) * 1e3;
}

static void matmul(model_state *s, float *y, const float *x, int rows, const ogk_qtensor *w)
{
    matmul_pair(s, y, w, NULL, NULL, x, rows);
}

/* token embedding rows into x: plain float rows, or dequantised rows of a quantised table (tied) */
static void embed(model_state *s, const int *tokens, int rows)
{
    const ogk_qtensor *t = s->m->w.embed;
    int dim = s->m->c.dim;
    for (int r = 0; r < rows; r++) {
        float *x = s->x + (size_t)r * dim;
        if (ogk_dtype_quantised(t->dtype)) {
            ogk_quant_dequant_row(t, (uint32_t)tokens[r], x);
            continue;
        }
        const uint8_t *row = (const uint8_t *)t->data + (size_t)tokens[r] * dim * ogk_dtype_size(t->dtype);
        for (int i = 0; i < dim; i++) {
            if (t->dtype == OGK_F32) {
                memcpy(&x[i], row + (size_t)i * 4, 4);
            } else {
                uint16_t h;
                memcpy(&h, row + (size_t)i * 2, 2);
                x[i] = t->dtype == OGK_F16 ? ogk_f16_to_f32(h) : ogk_bf16_to_f32(h);
            }
        }
    }
    float sc = s->m->c.embed_scale; /* Gemma: rows times sqrt(hidden_size), as the graph's Mul */
    if (sc != 1.0f)
        for (size_t i = 0; i < (size_t)rows * dim; i++)
            s->x[i] *= sc;
}

/* q, k, v projections of xb: one packed matmul (into s->qkv, split by split_qkv), or three */
static void qkv_project(model_state *s, const model_layer *L, int rows)
{
    if (!L->wqkv) {
        matmul(s, s->q, s->xb, rows, L->wq);
        matmul(s, s->k, s->xb, rows, L->wk);
        matmul(s, s->v, s->xb, rows, L->wv);
        return;
    }
    matmul(s, s->qkv, s->xb, rows, L->wqkv);
}

/* rows [r0, r1) of the packed projection split into q, k, v */
static void split_qkv(model_state *s, int r0, int r1)
{
    const model_config *c = &s->m->c;
    int qd = c->n_heads * c->head_dim, kvd = c->n_kv_heads * c->head_dim, all = qd + 2 * kvd;
    for (int r = r0; r < r1; r++) {
        const float *p = s->qkv + (size_t)r * all;
        memcpy(s->q + (size_t)r * qd, p, (size_t)qd * sizeof(float));
        memcpy(s->k + (size_t)r * kvd, p + qd, (size_t)kvd * sizeof(float));
        memcpy(s->v + (size_t)r * kvd, p + qd + kvd, (size_t)kvd * sizeof(float));
    }
}

/* qwen2: q, k, v biases */
static void add_qkv_bias(model_state *s, const model_layer *L, int r0, int r1)
{
    const model_config *c = &s->m->c;
    int qd = c->n_heads * c->head_dim, kvd = c->n_kv_heads * c->head_dim;
    for (int r = r0; r < r1; r++) {
        for (int i = 0; i < qd; i++)
            s->q[(size_t)r * qd + i] += L->bq[i];
        for (int i = 0; i < kvd; i++) {
            s->k[(size_t)r * kvd + i] += L->bk[i];
            s->v[(size_t)r * kvd + i] += L->bv[i];
        }
    }
}

/* qwen3: RMSNorm of every q and k head over head_dim, before RoPE */
static void qk_norm(model_state *s, const model_layer *L, int r0, int r1)
{
    const model_config *c = &s->m->c;
    int hd = c->head_dim;
    for (int h = r0 * c->n_heads; h < r1 * c->n_heads; h++)
        rmsnorm(s->q + (size_t)h * hd, s->q + (size_t)h * hd, L->q_norm, hd, c->rms_eps);
    for (int h = r0 * c->n_kv_heads; h < r1 * c->n_kv_heads; h++)
        rmsnorm(s->k + (size_t)h * hd, s->k + (size_t)h * hd, L->k_norm, hd, c->rms_eps);
}

/* rotate the first rope_dim dims of one head at position pos with the pack's cos/sin caches */
static void rope_head(float *x, const float *cos, const float *sin, int rope_dim, int interleaved)
{
    int half = rope_dim / 2;
    for (int i = 0; i < half; i++) {
        int a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + half;
        float x0 = x[a], x1 = x[b];
        x[a] = x0 * cos[i] - x1 * sin[i];
        x[b] = x1 * cos[i] + x0 * sin[i];
    }
}

static void rope(model_state *s, int pos0, int r0, int r1)
{
    const model_config *c = &s->m->c;
    int hd = c->head_dim, half = c->rope_dim / 2;
    for (int r = r0; r < r1; r++) {
        /* LongRoPE: the row's sequence is at least p + 1 long, and seq_end long while a prompt is read */
        int p = pos0 + r, end = p + 1 > s->seq_end ? p + 1 : s->seq_end, lng = c->rope_long_after && end > c->rope_long_after;
        const float *cs = (lng ? s->m->w.rope_cos_long : s->m->w.rope_cos) + (size_t)p * half,
                    *sn = (lng ? s->m->w.rope_sin_long : s->m->w.rope_sin) + (size_t)p * half;
        for (int h = 0; h < c->n_heads; h++)
            rope_head(s->q + ((size_t)r * c->n_heads + h) * hd, cs, sn, c->rope_dim, c->rope_interleaved);
        for (int h = 0; h < c->n_kv_heads; h++)
            rope_head(s->k + ((size_t)r * c->n_kv_heads + h) * hd, cs, sn, c->rope_dim, c->rope_interleaved);
    }
}

/* element 0 of (layer, kv head, position) in a KV cache of fp32 or fp16 elements */
static inline void *cache_at(const model_state *s, void *cache, int layer, int kvh, int pos)
{
    const model_config *c = &s->m->c;
    size_t i = (((size_t)layer * c->n_kv_heads + kvh) * s->context + pos) * c->head_dim;
    return s->kv_f16 ? (void *)((uint16_t *)cache + i) : (void *)((float *)cache + i);
}

/* hd values into the cache: copied, or rounded to fp16 (nearest even; beyond the half range clamped to
 * ±65504 rather than made infinite, so a large key cannot turn a score into inf - inf: kern.h's half) */
static void kv_put(const model_state *s, void *dst, const float *src, size_t hd)
{
    if (s->kv_f16)
        s->half(dst, src, hd);
    else
        memcpy(dst, src, hd * sizeof(float));
}

/* (layer, kv head)'s transposed keys: blocks of 16 positions x head_dim */
static uint16_t *key_t_at(const model_state *s, int layer, int kvh)
{
    const model_config *c = &s->m->c;
    return s->key_t + ((size_t)layer * c->n_kv_heads + kvh) * (size_t)key_t_ctx(s->context) * c->head_dim;
}

/* save key, value of every row at its time step into the kv cache (and the key into the transposed copy) */
static void kv_store(model_state *s, int layer, int pos0, int r0, int r1)
{
    const model_config *c = &s->m->c;
    size_t hd = (size_t)c->head_dim;
    for (int r = r0; r < r1; r++)
        for (int h = 0; h < c->n_kv_heads; h++) {
            int pos = pos0 + r;
            void *kd = cache_at(s, s->key_cache, layer, h, pos);
            kv_put(s, kd, s->k + ((size_t)r * c->n_kv_heads + h) * hd, hd);
            if (s->key_t) { /* the fp16 row just written, into its lane of the position's block */
                const uint16_t *kr = kd;
                uint16_t *b = key_t_at(s, layer, h) + (size_t)(pos / 16) * 16 * hd + pos % 16;
                for (size_t i = 0; i < hd; i++)
                    b[i * 16] = kr[i];
            }
            kv_put(s, cache_at(s, s->value_cache, layer, h, pos), s->v + ((size_t)r * c->n_kv_heads + h) * hd, hd);
        }
}

/* causal grouped-query attention of one query head over positions [0, pos]; output over q */
typedef struct {
    model_state *s;
    int layer, pos0, rows, group, nsub; /* query heads per task; tasks per KV head */
} attn_job;

/* causal grouped-query attention, one task = up to attn_group() query heads of one KV head (so each
 * key/value row is read once for all of them), every row of the pass; output over q */
#define ATTN_GROUP 4 /* fp32 cache: the attend kernels' widest head group */
/* query heads per task: the fp32 cache's attend takes up to ATTN_GROUP; the fp16 cache's attend_h / attend_ht
 * read each key and value chunk once for all (row, head) pairs of a call, so they take all of a KV head's
 * query heads (up to 16) in one call, split further only so that every thread has a task. A pair's result
 * does not depend on the others in its call, so the grouping changes no bits. */
static int attn_group(const model_state *s)
{
    const model_config *c = &s->m->c;
    int G = c->n_heads / c->n_kv_heads;
    if (!s->kv_f16)
        return G < ATTN_GROUP ? G : ATTN_GROUP;
    int nsub = (G + 15) / 16, threads = kern_pool_threads(s->pool);
    int want = (threads + c->n_kv_heads - 1) / c->n_kv_heads; /* tasks per KV head for one per thread */
    if (want > nsub)
        nsub = want < G ? want : G;
    return (G + nsub - 1) / nsub;
}

static void attention_task(attn_job *j, int task)
{
    model_state *s = j->s;
    const model_config *c = &s->m->c;
    int hd = c->head_dim, G = c->n_heads / c->n_kv_heads, grp = j->group;
    int kvh = task / j->nsub, h0 = kvh * G + task % j->nsub * grp;
    int g = kvh * G + G - h0 < grp ? kvh * G + G - h0 : grp;
    float scale = c->attn_scale;
    const void *kc = cache_at(s, s->key_cache, j->layer, kvh, 0), *vc = cache_at(s, s->value_cache, j->layer, kvh, 0);
    size_t qs = (size_t)c->n_heads * hd;
    if (c->attn_softcap > 0 || model_layer_windowed(c, j->layer)) {
        /* soft-capped scores or a sliding window (Gemma 2): row by row; a windowed row at position p sees
         * the window's positions p - window + 1 .. p (what onnxruntime does with local_window_size) */
        float *att = s->att + (size_t)h0 * (s->kv_f16 ? ATTN_ROWS : 1) * s->context;
        for (int r = 0; r < j->rows; r++) {
            int n = j->pos0 + r + 1, t0 = model_layer_windowed(c, j->layer) && n > c->window ? n - c->window : 0;
            s->attend_ext(s->q + (size_t)r * qs + (size_t)h0 * hd, g, kc, vc, s->kv_f16, t0, n, hd, scale, c->attn_softcap,
                          att, (size_t)s->context);
        }
        return;
    }
    if (s->kv_f16) { /* ATTN_ROWS rows at a time: the cache is read once for all of them */
        float *att = s->att + (size_t)h0 * ATTN_ROWS * s->context;
        for (int r = 0; r < j->rows; r += ATTN_ROWS) {
            int n = j->rows - r < ATTN_ROWS ? j->rows - r : ATTN_ROWS;
            float *q = s->q + (size_t)r * qs + (size_t)h0 * hd;
            if (s->key_t) /* over the transposed keys (the same bits as attend_h's) */
                s->attend_ht(q, qs, n, g, key_t_at(s, j->layer, kvh), vc, j->pos0 + r + 1, hd, scale, att,
                            (size_t)s->context);
            else
                s->attend_h(q, qs, n, g, kc, vc, j->pos0 + r + 1, hd, scale, att, (size_t)s->context);
        }
        return;
    }
    float *att = s->att + (size_t)h0 * s->context;
    for (int r = 0; r < j->rows; r++)
        s->attend(s->q + (size_t)r * qs + (size_t)h0 * hd, g, kc, vc, j->pos0 + r + 1, hd, scale, att,
                  (size_t)s->context);
}

static void attention_tasks(void *arg, size_t t0, size_t t1, int worker)
{
    (void)worker;
    for (size_t t = t0; t < t1; t++)
        attention_task(arg, (int)t);
}

#ifndef ATTN_POOL_WORK
#define ATTN_POOL_WORK 1024 /* rows x positions x heads: from here the pool splits heads (ctx 512 decode: +10 %) */
#endif
static void attention(model_state *s, int layer, int pos0, int rows)
{
    const model_config *c = &s->m->c;
    int group = attn_group(s);
    attn_job j = {s, layer, pos0, rows, group, (c->n_heads / c->n_kv_heads + group - 1) / group};
    /* a short decode step's attention is microseconds: waking the pool would cost more than it saves */
    size_t work = (size_t)rows * (size_t)(pos0 + rows) * (size_t)c->n_heads;
    size_t tasks = (size_t)c->n_kv_heads * (size_t)j.nsub;
    kern_pool_for(work < ATTN_POOL_WORK ? NULL : s->pool, tasks, 1, attention_tasks, &j);
}

/* SwiGLU: hb = silu(gate) * up; the rows split over the pool when there are many */
static void swiglu_range(void *arg, size_t r0, size_t r1, int worker)
{
    (void)worker;
    model_state *s = arg;
    size_t h = (size_t)s->m->c.hidden_dim;
    s->swiglu(s->hb + r0 * h, s->hb2 + r0 * h, (r1 - r0) * h);
}

static void swiglu(model_state *s, int rows)
{
    kern_pool_for(rows >= 8 ? s->pool : NULL, (size_t)rows, 0, swiglu_range, s);
}

/* ---------------------------------------------------------------- per-row steps
 * The work between the GEMMs that goes row by row (norms, residuals, the q/k/v steps and the KV
 * write) runs over the pool for passes of ROWS_POOL_MIN rows and more (prompt chunks); a row's
 * result is the same whichever thread computes it. */
#ifndef ROWS_POOL_MIN
#define ROWS_POOL_MIN 16
#endif
typedef struct rows_job rows_job;
struct rows_job {
    model_state *s;
    const model_layer *L;
    const float *norm, *norm_b; /* norm_step: the norm's weights after the residual (NULL: none) and bias */
    const float *pre;  /* norm_step: the sandwich norm of xb before the residual (NULL: none) */
    int layer, pos0, split, residual;
    void (*fn)(const rows_job *j, int r0, int r1);
};

static void rows_range(void *arg, size_t r0, size_t r1, int worker)
{
    (void)worker;
    const rows_job *j = arg;
    j->fn(j, (int)r0, (int)r1);
}

static void for_rows(const rows_job *j, int rows)
{
    kern_pool_for(rows >= ROWS_POOL_MIN ? j->s->pool : NULL, (size_t)rows, 0, rows_range, (void *)j);
}

/* xb = rmsnorm(xb) (when pre); x += xb (when residual); then xb = norm(x) (when norm) */
static void norm_step(const rows_job *j, int r0, int r1)
{
    model_state *s = j->s;
    const model_config *c = &s->m->c;
    size_t dim = (size_t)c->dim;
    for (int r = r0; r < r1; r++) {
        float *x = s->x + (size_t)r * dim, *xb = s->xb + (size_t)r * dim;
        if (j->pre)
            rmsnorm(xb, xb, j->pre, (int)dim, c->rms_eps);
        if (j->residual)
            for (size_t i = 0; i < dim; i++)
                x[i] += xb[i];
        if (j->norm)
            norm_row(c, xb, x, j->norm, j->norm_b);
    }
}

/* after the q, k, v projections: the packed one split; the family's steps (qkv bias, q/k norm);
 * rotary position; key and value into the KV cache */
static void qkv_step(const rows_job *j, int r0, int r1)
{
    model_state *s = j->s;
    const model_config *c = &s->m->c;
    if (j->split)
        split_qkv(s, r0, r1);
    if (c->qkv_bias)
        add_qkv_bias(s, j->L, r0, r1);
    if (c->qk_norm)
        qk_norm(s, j->L, r0, r1);
    rope(s, j->pos0, r0, r1);
    kv_store(s, j->layer, j->pos0, r0, r1);
}

/* ---------------------------------------------------------------- the forward pass */

/* a layer's first launch: the packed q/k/v projection, or q */
static const ogk_qtensor *first_weight(const model_layer *L) { return L->wqkv ? L->wqkv : L->wq; }

/* which rows of a pass need logits */
enum { LOGITS_NONE, LOGITS_LAST, LOGITS_ALL };

/* one pass of rows tokens at positions s->pos.. (rows <= MODEL_CHUNK), logits into `logits` */
static void forward_rows(model_state *s, const int *tokens, int rows, int want, float *logits)
{
    const model *m = s->m;
    const model_config *c = &m->c;
    int dim = c->dim, pos0 = s->pos;
    double t0 = ogk_now();

    embed(s, tokens, rows);
    double t1 = ogk_now();

    rows_job rj = {.s = s, .pos0 = pos0, .norm = m->w.layers[0].input_norm, .norm_b = m->w.layers[0].input_norm_b,
                   .fn = norm_step};
    for_rows(&rj, rows); /* the first layer's attention norm */
    for (int l = 0; l < c->n_layers; l++) {
        const model_layer *L = &m->w.layers[l];
        rj.L = L, rj.layer = l;

        /* q, k, v; the family's extra steps; rotary position; key, value into the kv cache */
        kern_matmul_next(s->pool, L->wo, NULL);
        qkv_project(s, L, rows);
        rj.fn = qkv_step, rj.split = L->wqkv != NULL;
        for_rows(&rj, rows);

        /* attend */
        double ta = ogk_now();
        attention(s, l, pos0, rows);
        s->prof.attn_ms += (ogk_now() - ta) * 1e3;

        /* output projection, residual connection back into x; ffn norm */
        kern_matmul_next(s->pool, L->w_gate, L->w_up);
        matmul(s, s->xb, s->q, rows, L->wo);
        rj.fn = norm_step, rj.residual = 1, rj.norm = L->post_attn_norm, rj.norm_b = L->post_attn_norm_b;
        rj.pre = L->attn_out_norm;
        for_rows(&rj, rows);

        /* SwiGLU MLP: down(silu(gate(x)) * up(x)); residual; the next layer's attention norm */
        kern_matmul_next(s->pool, L->w_down, NULL);
        matmul_pair(s, s->hb, L->w_gate, s->hb2, L->w_up, s->xb, rows);
        swiglu(s, rows);
        if (l + 1 < c->n_layers)
            kern_matmul_next(s->pool, first_weight(&m->w.layers[l + 1]), NULL);
        else
            kern_matmul_next(s->pool, want != LOGITS_NONE ? m->w.lm_head : NULL, NULL);
        matmul(s, s->xb, s->hb, rows, L->w_down);
        rj.norm = l + 1 < c->n_layers ? m->w.layers[l + 1].input_norm : NULL, rj.pre = L->mlp_out_norm;
        rj.norm_b = l + 1 < c->n_layers ? m->w.layers[l + 1].input_norm_b : NULL;
        for_rows(&rj, rows);
        rj.pre = NULL;
    }
    double t2 = ogk_now();

    /* final norm; classifier into logits (only the rows asked for) */
    if (want != LOGITS_NONE) {
        int first = want == LOGITS_ALL ? 0 : rows - 1, n = rows - first;
        model_step_norm(c, s->xb, s->x + (size_t)first * dim, m->w.final_norm, m->w.final_norm_b, n);
        ogk_error e;
        kern_matmul_next(s->pool, first_weight(&m->w.layers[0]), NULL);
        if (model_classify(s, logits, s->xb, n, s->head_argmax, &e))
            launch_failed(s, m->w.lm_head, &e);
        s->prof.launches++;
    }
    double t3 = ogk_now();

    s->pos += rows;
    s->prof.rows += rows;
    s->prof.embed_ms += (t1 - t0) * 1e3;
    s->prof.layers_ms += (t2 - t1) * 1e3;
    s->prof.head_ms += (t3 - t2) * 1e3;
}

int model_forward(model_state *s, const int *tokens, int n, int all_rows, ogk_error *e)
{
    const model_config *c = &s->m->c;
    if (n <= 0)
        return ogk_fail(e, "no tokens to run");
    if (s->pos + n > s->context)
        return ogk_fail(e, "context full: %d positions + %d tokens > %d (-c raises it up to the model's %d)", s->pos, n,
                        s->context, c->context_length);
    if (all_rows && n > s->logit_rows)
        return ogk_fail(e, "%d rows of logits asked, the state holds %d", n, s->logit_rows);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->vocab_size)
            return ogk_fail(e, "token id %d out of range [0, %d)", tokens[i], c->vocab_size);
    int pos0 = s->pos;
    double sampling = s->prof.sampling_ms; /* of the token this pass runs (set by the caller) */
    memset(&s->prof, 0, sizeof s->prof);
    s->prof.sampling_ms = sampling;
    /* prefill in chunks; only the last chunk's last row needs logits unless all do */
    const int chunk = model_prefill_rows(s);
    for (int done = 0; done < n; done += chunk) {
        int rows = n - done < chunk ? n - done : chunk;
        int want = all_rows ? LOGITS_ALL : done + rows == n ? LOGITS_LAST : LOGITS_NONE;
        forward_rows(s, tokens + done, rows, want, s->logits + (all_rows ? (size_t)done * c->vocab_size : 0));
        if (s->failed) {
            s->failed = 0;
            s->pos = pos0;
            *e = s->fail;
            return -1;
        }
    }
    /* the last row's logits: a NaN or infinity there comes from the weights (a corrupt scale, say), and
     * every answer after it would be garbage read as text */
    const float *last = s->logits + (all_rows ? (size_t)(n - 1) * c->vocab_size : 0);
    int bad = model_logits_bad(last, c->vocab_size);
    if (bad >= 0)
        return ogk_fail(e, "the logits at position %d are not finite (id %d: %g): the weights hold a NaN or an "
                           "infinity, or the activations overflow", s->pos - 1, bad, (double)last[bad]);
    return 0;
}

/* vectorised (SSE2, the baseline): ~30 us over 152k logits here, against ~90 scalar (0.4 % of a 0.5B decode step) */
__attribute__((optimize("tree-vectorize"))) int model_logits_bad(const float *x, int V)
{
    /* all exponent bits set (NaN or an infinity) carry into bit 31 when one more exponent step is added;
     * no other exponent does: and, add, or, which the compiler vectorises */
    const uint32_t *u = (const uint32_t *)(const void *)x;
    uint32_t any = 0;
    for (int i = 0; i < V; i++)
        any |= (u[i] & 0x7f800000u) + 0x00800000u;
    if (!(any & 0x80000000u))
        return -1;
    for (int i = 0; i < V; i++)
        if (!isfinite(x[i]))
            return i;
    return -1;
}

void model_prof_print(const model_state *s, const char *pass)
{
    if (!s->prof_print)
        return;
    fprintf(stderr,
            "%s: prof %s rows=%d launches=%d embed=%.3fms layers=%.3fms (attention=%.3fms) head=%.3fms "
            "sampling=%.3fms gemm=%.3fms head_cols=%d\n",
            ogk_prog(), pass, s->prof.rows, s->prof.launches, s->prof.embed_ms, s->prof.layers_ms, s->prof.attn_ms,
            s->prof.head_ms, s->prof.sampling_ms, s->prof.gemm_ms, s->prof.head_cols);
}

/* ---------------------------------------------------------------- hooks for batch.c (model_int.h) */

model_state *model_state_new_shared(const model *m, int context, int logit_rows, int mode, kern_pool *pool,
                                    ogk_error *e)
{
    model_state *s = model_state_new(m, context, logit_rows, mode, 1, e);
    if (!s)
        return NULL;
    kern_pool_free(s->pool);
    s->pool = pool, s->pool_borrowed = 1;
    return s;
}

void model_step_embed(model_state *s, const int *tokens, int rows) { embed(s, tokens, rows); }

void model_step_norm(const model_config *c, float *o, const float *x, const float *w, const float *b, int rows)
{
    for (int r = 0; r < rows; r++)
        norm_row(c, o + (size_t)r * c->dim, x + (size_t)r * c->dim, w, b);
}

void model_step_swiglu(model_state *s, int rows) { swiglu(s, rows); }

void model_step_split_qkv(model_state *s, int rows) { split_qkv(s, 0, rows); }

void model_step_residual_norm(model_state *s, int rows, int residual, const float *pre, const float *norm,
                              const float *norm_b)
{
    rows_job rj = {.s = s, .norm = norm, .norm_b = norm_b, .pre = pre, .residual = residual, .fn = norm_step};
    for_rows(&rj, rows);
}

/* forward_rows' attention sublayer for rows already projected into s->q, s->k, s->v at s->pos.. */
void model_step_attention(model_state *s, const model_layer *L, int layer, int rows)
{
    rows_job rj = {.s = s, .L = L, .layer = layer, .pos0 = s->pos, .fn = qkv_step};
    for_rows(&rj, rows);
    attention(s, layer, s->pos, rows);
}
