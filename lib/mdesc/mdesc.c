/* The one check of a runnable model: description, tensors, roles, tokenizer (see mdesc.h). */
#define _GNU_SOURCE
#include "mdesc.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    int family;
} families[] = {
    {"llama", FAMILY_LLAMA}, {"mistral", FAMILY_LLAMA}, {"qwen2", FAMILY_QWEN2}, {"qwen3", FAMILY_QWEN3}, {"phi3", FAMILY_PHI3},
    {"gemma", FAMILY_GEMMA}, {"gemma2", FAMILY_GEMMA2}, {"olmo", FAMILY_OLMO}, {"chatglm", FAMILY_CHATGLM},
};

const char *model_family_name(int family)
{
    for (size_t i = 0; i < sizeof families / sizeof *families; i++)
        if (families[i].family == family)
            return families[i].name;
    return "?";
}

int model_family_of(const char *name)
{
    for (size_t i = 0; name && i < sizeof families / sizeof *families; i++)
        if (!strcmp(name, families[i].name))
            return families[i].family;
    return -1;
}

static void where_set(mdesc_where *w, const char *fmt, const char *s)
{
    if (w)
        snprintf(w->key, sizeof w->key, fmt, s);
}

/* ---------------------------------------------------------------- the description */

/* An integer in [min, MDESC_MAX_DIM): 1 read, 0 absent (and not required), -1 refused. */
static int get_int(const json_t *o, const char *key, int *out, int required, int min, ogk_error *e, mdesc_where *w)
{
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        if (!required)
            return 0;
        where_set(w, "%s", key);
        return ogk_fail(e, "model description: missing \"%s\"", key);
    }
    if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) >= MDESC_MAX_DIM) {
        where_set(w, "%s", key);
        if (json_is_integer(v))
            return ogk_fail(e, "model description: \"%s\" %" JSON_INTEGER_FORMAT " is out of range [%d, 2^30)", key,
                            json_integer_value(v), min);
        return ogk_fail(e, "model description: \"%s\" is not an integer", key);
    }
    *out = (int)json_integer_value(v);
    return 1;
}

static int token_id(const json_t *o, const char *key, int *out, int vocab, ogk_error *e, mdesc_where *w)
{
    int r = get_int(o, key, out, 0, 0, e, w);
    if (r < 0)
        return -1;
    if (r > 0 && *out >= vocab) {
        where_set(w, "%s", key);
        return ogk_fail(e, "model description: \"%s\" %d is outside the vocabulary (%d)", key, *out, vocab);
    }
    return 0;
}

/* A positive finite number, or null / absent (0 returned, *out left alone). */
static int get_pos(const json_t *o, const char *key, float *out, ogk_error *e, mdesc_where *w)
{
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    double d = json_is_number(v) ? json_number_value(v) : -1;
    if (!(d > 0) || !isfinite((float)d) || !((float)d > 0)) {
        where_set(w, "%s", key);
        return ogk_fail(e, "model description: \"%s\" is not a positive number", key);
    }
    *out = (float)d;
    return 0;
}

/* What some families add to the transformer (Gemma 2): activation, embedding scale, the scores' scale and
 * soft caps, the sliding window, sandwich norms. Absent keys keep the other families' transformer. */
static int mdesc_extras(model_config *c, const json_t *j, ogk_error *e, int *code, mdesc_where *w)
{
    static const char *const acts[] = {"silu", "gelu_tanh", "gelu"};
    const json_t *a = json_object_get(j, "activation");
    c->activation = MODEL_ACT_SILU;
    if (a && !json_is_null(a)) {
        const char *an = json_string_value(a);
        int k = -1;
        for (int i = 0; an && i < 3; i++)
            if (!strcmp(an, acts[i]))
                k = i;
        if (k < 0) {
            where_set(w, "%s", "activation");
            if (an)
                *code = OGK_EXIT_INIT;
            return ogk_fail(e, "model description: \"activation\" %s%.40s%s (supported: silu, gelu_tanh, gelu)",
                            an ? "\"" : "", an ? an : "is not a string", an ? "\" is not one the runtime applies" : "");
        }
        c->activation = k;
    }
    c->embed_scale = 1.0f;
    c->attn_scale = 1.0f / sqrtf((float)c->head_dim);
    if (get_pos(j, "embed_scale", &c->embed_scale, e, w) || get_pos(j, "attn_scale", &c->attn_scale, e, w) ||
        get_pos(j, "attn_softcap", &c->attn_softcap, e, w) || get_pos(j, "final_softcap", &c->final_softcap, e, w))
        return -1;
    const json_t *sw = json_object_get(j, "sliding_window");
    if (sw && !json_is_null(sw)) {
        const json_t *ls = json_object_get(sw, "layers");
        if (!json_is_object(sw)) {
            where_set(w, "%s", "sliding_window");
            return ogk_fail(e, "model description: \"sliding_window\" is not {\"size\": N, \"layers\": [layer, ...]}");
        }
        if (get_int(sw, "size", &c->window, 1, 1, e, w) < 0) {
            where_set(w, "%s", "sliding_window.size");
            return -1;
        }
        if (!json_is_array(ls)) {
            where_set(w, "%s", "sliding_window.layers");
            return ogk_fail(e, "model description: \"sliding_window\".layers is not an array of layer numbers");
        }
        size_t i;
        const json_t *v;
        json_array_foreach(ls, i, v)
        {
            json_int_t l = json_is_integer(v) ? json_integer_value(v) : -1;
            if (l < 0 || l >= c->n_layers) {
                where_set(w, "%s", "sliding_window.layers");
                return ogk_fail(e, "model description: \"sliding_window\".layers[%zu] is not a layer of %d", i, c->n_layers);
            }
            if (l >= MODEL_MAX_WINDOW_LAYERS) {
                *code = OGK_EXIT_INIT;
                where_set(w, "%s", "sliding_window.layers");
                return ogk_fail(e, "model description: a sliding window on layer %d (the runtime windows layers below %d)",
                                (int)l, MODEL_MAX_WINDOW_LAYERS);
            }
            c->window_layer[l / 8] |= (unsigned char)(1u << (l % 8));
        }
    }
    c->sandwich = json_is_true(json_object_get(j, "sandwich_norms"));
    const json_t *nk = json_object_get(j, "norm");
    if (nk && !json_is_null(nk)) {
        const char *ns = json_string_value(nk);
        if (!ns || (strcmp(ns, "rms") && strcmp(ns, "layer"))) {
            where_set(w, "%s", "norm");
            return ogk_fail(e, "model description: \"norm\" is %s%.40s%s (want \"rms\" or \"layer\")", ns ? "\"" : "",
                            ns ? ns : "not a string", ns ? "\"" : "");
        }
        c->layer_norm = !strcmp(ns, "layer");
    }
    return 0;
}

int mdesc_config(model_config *c, const json_t *j, ogk_error *e, int *code, mdesc_where *w)
{
    memset(c, 0, sizeof *c);
    *code = OGK_EXIT_INPUT;
    if (w)
        w->key[0] = 0;
    if (!json_is_object(j))
        return ogk_fail(e, "container has no model description");
    const json_t *fj = json_object_get(j, "family");
    const char *fam = json_string_value(fj);
    if (!fam) {
        where_set(w, "%s", "family");
        return ogk_fail(e, "model description: \"family\" is %s", fj && !json_is_null(fj) ? "not a string" : "missing");
    }
    c->family = model_family_of(fam);
    if (c->family < 0) {
        *code = OGK_EXIT_INIT;
        where_set(w, "%s", "family");
        return ogk_fail(e, "unsupported family \"%.40s\" (supported: " MODEL_FAMILIES ")", fam);
    }
    snprintf(c->family_name, sizeof c->family_name, "%s", fam);
    if (get_int(j, "vocab_size", &c->vocab_size, 1, 1, e, w) < 0 || get_int(j, "hidden_size", &c->dim, 1, 1, e, w) < 0 ||
        get_int(j, "intermediate_size", &c->hidden_dim, 1, 1, e, w) < 0 ||
        get_int(j, "num_layers", &c->n_layers, 1, 1, e, w) < 0 || get_int(j, "num_heads", &c->n_heads, 1, 1, e, w) < 0 ||
        get_int(j, "num_kv_heads", &c->n_kv_heads, 1, 1, e, w) < 0 ||
        get_int(j, "context_length", &c->context_length, 1, 1, e, w) < 0)
        return -1;
    c->head_dim = c->dim / c->n_heads;
    if (get_int(j, "head_dim", &c->head_dim, 0, 1, e, w) < 0)
        return -1;
    if (!c->head_dim) {
        where_set(w, "%s", "head_dim");
        return ogk_fail(e, "model description: hidden_size %d / num_heads %d gives a head_dim of 0", c->dim, c->n_heads);
    }
    if (c->n_heads % c->n_kv_heads) {
        where_set(w, "%s", "num_kv_heads");
        return ogk_fail(e, "model description: num_heads %d is not a multiple of num_kv_heads %d", c->n_heads,
                        c->n_kv_heads);
    }
    const json_t *eps = json_object_get(j, "rms_norm_eps");
    c->rms_eps = 1e-6f;
    if (eps && !json_is_null(eps)) {
        if (!json_is_number(eps) || !(json_number_value(eps) > 0) || !((float)json_number_value(eps) > 0) ||
            json_number_value(eps) > 1) {
            where_set(w, "%s", "rms_norm_eps");
            return ogk_fail(e, "model description: \"rms_norm_eps\" is not a number in (0, 1]");
        }
        c->rms_eps = (float)json_number_value(eps);
    }
    const json_t *rope = json_object_get(j, "rope");
    c->rope_dim = c->head_dim;
    if (json_is_object(rope)) {
        if (get_int(rope, "dim", &c->rope_dim, 0, 1, e, w) < 0) {
            where_set(w, "%s", "rope.dim");
            return -1;
        }
        c->rope_interleaved = json_is_true(json_object_get(rope, "interleaved"));
        const json_t *la = json_object_get(rope, "long_after");
        if (la && !json_is_null(la) && (!json_is_integer(la) || json_integer_value(la) < 1 || json_integer_value(la) > INT32_MAX)) {
            where_set(w, "%s", "rope.long_after");
            return ogk_fail(e, "model description: rope.long_after is not a positive integer");
        }
        c->rope_long_after = la && json_is_integer(la) ? (int)json_integer_value(la) : 0;
    } else if (rope && !json_is_null(rope)) {
        where_set(w, "%s", "rope");
        return ogk_fail(e, "model description: \"rope\" is not an object");
    }
    if (c->rope_dim > c->head_dim || c->rope_dim % 2) {
        where_set(w, "%s", "rope.dim");
        return ogk_fail(e, "model description: rope dim %d does not fit head_dim %d (even, at most head_dim)", c->rope_dim,
                        c->head_dim);
    }
    c->qkv_bias = json_is_true(json_object_get(j, "qkv_bias"));
    c->qk_norm = json_is_true(json_object_get(j, "qk_norm"));
    c->tied = json_is_true(json_object_get(j, "tie_embeddings"));
    c->bos_id = c->pad_id = -1;
    if (token_id(j, "bos_token_id", &c->bos_id, c->vocab_size, e, w) ||
        token_id(j, "pad_token_id", &c->pad_id, c->vocab_size, e, w))
        return -1;
    const json_t *eos = json_object_get(j, "eos_token_ids");
    json_t *one = NULL;
    if (json_is_integer(eos))
        eos = one = json_pack("[O]", eos);
    if (eos && !json_is_null(eos) && !json_is_array(eos)) {
        where_set(w, "%s", "eos_token_ids");
        return ogk_fail(e, "model description: \"eos_token_ids\" is not an array of token ids");
    }
    size_t i;
    const json_t *v;
    json_array_foreach(eos, i, v)
    {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= c->vocab_size) {
            json_decref(one);
            where_set(w, "%s", "eos_token_ids");
            if (json_is_integer(v))
                return ogk_fail(e, "model description: eos token id %" JSON_INTEGER_FORMAT " is outside the vocabulary (%d)",
                                json_integer_value(v), c->vocab_size);
            return ogk_fail(e, "model description: \"eos_token_ids\"[%zu] is not a token id", i);
        }
        if (c->n_eos == MODEL_MAX_EOS) {
            json_decref(one);
            where_set(w, "%s", "eos_token_ids");
            return ogk_fail(e, "model description: more than %d eos token ids", MODEL_MAX_EOS);
        }
        c->eos_ids[c->n_eos++] = (int)json_integer_value(v);
    }
    json_decref(one);
    return mdesc_extras(c, j, e, code, w);
}

/* ---------------------------------------------------------------- roles */

/* The per-layer roles, in the order oga-info emits them. */
static const char *const layer_roles[] = {
    "input_norm", "input_norm_bias", "attn.qkv", "attn.q", "attn.k", "attn.v", "attn.qkv_bias", "attn.q_bias", "attn.k_bias",
    "attn.v_bias", "attn.q_norm", "attn.k_norm", "attn.o", "attn.o_bias", "attn.out_norm", "post_attn_norm", "post_attn_norm_bias",
    "mlp.gate", "mlp.up", "mlp.down", "mlp.out_norm",
};
static const char *const top_roles[] = {"embed", "lm_head", "final_norm", "final_norm_bias", "rope.cos", "rope.sin", "rope.cos_long", "rope.sin_long"};

/* layer number of "layers.N.rest" (rest returned), -1 when not of that form */
static long layer_of(const char *role, const char **rest)
{
    if (strncmp(role, "layers.", 7))
        return -1;
    const char *s = role + 7;
    if (*s < '0' || *s > '9' || (*s == '0' && s[1] != '.'))
        return -1;
    long n = 0;
    while (*s >= '0' && *s <= '9') {
        n = n * 10 + (*s++ - '0');
        if (n >= MDESC_MAX_DIM)
            return -1;
    }
    if (*s != '.')
        return -1;
    *rest = s + 1;
    return n;
}

int mdesc_role_known(const char *role, int n_layers)
{
    if (!role)
        return 0;
    for (size_t i = 0; i < sizeof top_roles / sizeof *top_roles; i++)
        if (!strcmp(role, top_roles[i]))
            return 1;
    const char *rest;
    long l = layer_of(role, &rest);
    if (l < 0 || (n_layers >= 0 && l >= n_layers))
        return 0;
    for (size_t i = 0; i < sizeof layer_roles / sizeof *layer_roles; i++)
        if (!strcmp(rest, layer_roles[i]))
            return 1;
    return 0;
}

/* ---------------------------------------------------------------- tensors */

typedef struct {
    const mdesc_tensor **by_role;
    size_t n;
    ogk_error *e;
    mdesc_where *w;
} tset;

static int by_role_cmp(const void *a, const void *b)
{
    return strcmp((*(const mdesc_tensor *const *)a)->role, (*(const mdesc_tensor *const *)b)->role);
}

static const mdesc_tensor *find(const tset *s, const char *role)
{
    size_t lo = 0, hi = s->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(s->by_role[mid]->role, role);
        if (!c)
            return s->by_role[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static const char *dtname(int d)
{
    static const char *n[] = {"?", "f32", "f16", "bf16", "q4", "q8"};
    return d >= 1 && d <= 5 ? n[d] : "?";
}

static int fail_t(const tset *s, const char *role, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail_t(const tset *s, const char *role, const char *fmt, ...)
{
    char buf[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    where_set(s->w, "tensor %s", role);
    return ogk_fail(s->e, "tensor %s: %s", role, buf);
}

static int is_quant(int d) { return d == MDESC_Q4 || d == MDESC_Q8; }

/* A quantised weight [n, k], 4 or 8 bits. */
static int want_q4(const tset *s, const char *role, uint64_t n, uint64_t k)
{
    const mdesc_tensor *t = find(s, role);
    if (!t)
        return fail_t(s, role, "missing");
    if (!is_quant(t->dtype))
        return fail_t(s, role, "dtype %s, want q4 or q8", dtname(t->dtype));
    if (t->ndim != 2 || t->shape[0] != n || t->shape[1] != k)
        return fail_t(s, role, "shape [%" PRIu64 ", %" PRIu64 "], want [%" PRIu64 ", %" PRIu64 "]", t->shape[0],
                      t->ndim > 1 ? t->shape[1] : 0, n, k);
    return 0;
}

static uint64_t elements(const mdesc_tensor *t)
{
    uint64_t c = 1;
    for (int d = 0; d < t->ndim && d < 4; d++)
        c = t->shape[d] && c > UINT64_MAX / t->shape[d] ? UINT64_MAX : c * t->shape[d];
    return c;
}

static int is_float(int d) { return d == MDESC_F32 || d == MDESC_F16 || d == MDESC_BF16; }

/* A float vector of exactly count elements (at least count when prefix). */
static int want_floats(const tset *s, const char *role, uint64_t count, int prefix)
{
    const mdesc_tensor *t = find(s, role);
    if (!t)
        return fail_t(s, role, "missing");
    if (!is_float(t->dtype))
        return fail_t(s, role, "dtype %s, want a float vector", dtname(t->dtype));
    uint64_t have = elements(t);
    if (prefix ? have < count : have != count)
        return fail_t(s, role, "%" PRIu64 " elements, want %s%" PRIu64, have, prefix ? ">= " : "", count);
    return 0;
}

/* A LayerNorm's bias: optional (absent: 0), [count] floats; refused beside an RMSNorm */
static int want_norm_bias(const tset *s, const model_config *c, const char *role, uint64_t count)
{
    if (!find(s, role))
        return 0;
    if (!c->layer_norm)
        return fail_t(s, role, "a norm bias, but the model description's norm is \"rms\" (RMSNorm has no bias)");
    return want_floats(s, role, count, 0);
}

static int check_layer(const tset *s, const model_config *c, int l)
{
    uint64_t qd = (uint64_t)c->n_heads * c->head_dim, kvd = (uint64_t)c->n_kv_heads * c->head_dim, dim = (uint64_t)c->dim,
             hid = (uint64_t)c->hidden_dim;
    char role[96];
#define ROLE(x) (snprintf(role, sizeof role, "layers.%d.%s", l, x), role)
#define HAS(x) (find(s, ROLE(x)) != NULL)
    if (want_floats(s, ROLE("input_norm"), dim, 0) || want_floats(s, ROLE("post_attn_norm"), dim, 0) ||
        want_norm_bias(s, c, ROLE("input_norm_bias"), dim) || want_norm_bias(s, c, ROLE("post_attn_norm_bias"), dim))
        return -1;
    /* attention projections: packed (cpu-style) or separate (amd-style), never both */
    if (HAS("attn.qkv")) {
        if (HAS("attn.q") || HAS("attn.k") || HAS("attn.v"))
            return fail_t(s, ROLE("attn.qkv"), "both a packed qkv and separate q/k/v projections");
        if (want_q4(s, ROLE("attn.qkv"), qd + 2 * kvd, dim))
            return -1;
    } else if (want_q4(s, ROLE("attn.q"), qd, dim) || want_q4(s, ROLE("attn.k"), kvd, dim) ||
               want_q4(s, ROLE("attn.v"), kvd, dim)) {
        return -1;
    }
    int packed_bias = HAS("attn.qkv_bias"), any_bias = packed_bias || HAS("attn.q_bias") || HAS("attn.k_bias") ||
                                                     HAS("attn.v_bias");
    if (!c->qkv_bias && any_bias)
        return fail_t(s, ROLE(packed_bias ? "attn.qkv_bias" : HAS("attn.q_bias") ? "attn.q_bias"
                                                            : HAS("attn.k_bias") ? "attn.k_bias" : "attn.v_bias"),
                      "a projection bias, but the model description says qkv_bias false");
    if (c->qkv_bias) {
        if (packed_bias) {
            if (HAS("attn.q_bias") || HAS("attn.k_bias") || HAS("attn.v_bias"))
                return fail_t(s, ROLE("attn.qkv_bias"), "both a packed qkv bias and separate q/k/v biases");
            if (want_floats(s, ROLE("attn.qkv_bias"), qd + 2 * kvd, 0))
                return -1;
        } else if (want_floats(s, ROLE("attn.q_bias"), qd, 0) || want_floats(s, ROLE("attn.k_bias"), kvd, 0) ||
                   want_floats(s, ROLE("attn.v_bias"), kvd, 0)) {
            return -1;
        }
    }
    if (!c->qk_norm && (HAS("attn.q_norm") || HAS("attn.k_norm")))
        return fail_t(s, ROLE(HAS("attn.q_norm") ? "attn.q_norm" : "attn.k_norm"),
                      "a q/k norm, but the model description says qk_norm false");
    if (c->qk_norm &&
        (want_floats(s, ROLE("attn.q_norm"), (uint64_t)c->head_dim, 0) ||
         want_floats(s, ROLE("attn.k_norm"), (uint64_t)c->head_dim, 0)))
        return -1;
    if (HAS("attn.o_bias"))
        return fail_t(s, role, "an o_proj bias: no family this runtime supports has one, and it would be ignored");
    if (c->sandwich && (want_floats(s, ROLE("attn.out_norm"), dim, 0) || want_floats(s, ROLE("mlp.out_norm"), dim, 0)))
        return -1;
    if (!c->sandwich && (HAS("attn.out_norm") || HAS("mlp.out_norm")))
        return fail_t(s, ROLE(HAS("attn.out_norm") ? "attn.out_norm" : "mlp.out_norm"),
                      "a norm on a block's output, but the model description says sandwich_norms false");
    if (want_q4(s, ROLE("attn.o"), dim, qd) || want_q4(s, ROLE("mlp.gate"), hid, dim) || want_q4(s, ROLE("mlp.up"), hid, dim) ||
        want_q4(s, ROLE("mlp.down"), dim, hid))
        return -1;
#undef HAS
#undef ROLE
    return 0;
}

/* The family's shape: what the graph must have for the family the config names. */
static int check_family(const tset *s, const model_config *c)
{
    int want_bias = c->family == FAMILY_QWEN2 || c->family == FAMILY_CHATGLM, want_norm = c->family == FAMILY_QWEN3;
    if (c->qkv_bias != want_bias || c->qk_norm != want_norm) {
        where_set(s->w, "%s", "family");
        return ogk_fail(s->e,
                        "family \"%s\" contradicts the graph: it has %s and %s, a %s model has %s and %s",
                        c->family_name, c->qkv_bias ? "q/k/v biases" : "no q/k/v biases",
                        c->qk_norm ? "q/k norms" : "no q/k norms", c->family_name,
                        want_bias ? "q/k/v biases" : "no q/k/v biases", want_norm ? "q/k norms" : "no q/k norms");
    }
    int want_layer = c->family == FAMILY_OLMO;
    if (c->layer_norm != want_layer) {
        where_set(s->w, "%s", "family");
        return ogk_fail(s->e, "family \"%s\" contradicts the graph: its norms are %s, a %s model's are %s", c->family_name,
                        c->layer_norm ? "LayerNorms" : "RMSNorms", c->family_name, want_layer ? "LayerNorms" : "RMSNorms");
    }
    int want_sandwich = c->family == FAMILY_GEMMA2;
    if (c->sandwich != want_sandwich) {
        where_set(s->w, "%s", "family");
        return ogk_fail(s->e, "family \"%s\" contradicts the graph: it has %s norms on the attention and MLP outputs, a %s model "
                        "has %s", c->family_name, c->sandwich ? "" : "no", c->family_name, want_sandwich ? "them" : "none");
    }
    return 0;
}

int mdesc_check_tensors(model_config *c, const mdesc_tensor *t, size_t n, ogk_error *e, mdesc_where *w)
{
    if (w)
        w->key[0] = 0;
    tset s = {calloc(n + 1, sizeof *s.by_role), n, e, w};
    if (!s.by_role)
        return ogk_fail(e, "out of memory");
    int rc = -1;
    for (size_t i = 0; i < n; i++) {
        if (!mdesc_role_known(t[i].role, c->n_layers)) {
            where_set(w, "tensor %s", t[i].role ? t[i].role : "?");
            ogk_fail(e, "tensor %.80s: \"%.80s\" is not a role of a %d-layer model", t[i].role ? t[i].role : "?",
                     t[i].role ? t[i].role : "", c->n_layers);
            goto out;
        }
        s.by_role[i] = &t[i];
    }
    qsort(s.by_role, n, sizeof *s.by_role, by_role_cmp);
    for (size_t i = 1; i < n; i++)
        if (!strcmp(s.by_role[i - 1]->role, s.by_role[i]->role)) {
            fail_t(&s, s.by_role[i]->role, "two tensors have this role");
            goto out;
        }
    uint64_t V = (uint64_t)c->vocab_size, D = (uint64_t)c->dim;
    /* lm_head: quantised [V, D], or an unquantised MatMul's float weight as the graph holds it, [D, V] */
    const mdesc_tensor *lmt = find(&s, "lm_head");
    if (lmt && is_float(lmt->dtype)) {
        if (c->tied) {
            fail_t(&s, "lm_head", "a float (unquantised) lm_head with tied embeddings: not supported");
            goto out;
        }
        if (lmt->ndim != 2) {
            fail_t(&s, "lm_head", "float with %d dimensions, want [%" PRIu64 ", %" PRIu64 "] (the MatMul's inputs x outputs)",
                   lmt->ndim, D, V);
            goto out;
        }
        if (lmt->shape[0] != D || lmt->shape[1] != V) {
            fail_t(&s, "lm_head", "float, shape [%" PRIu64 ", %" PRIu64 "], want [%" PRIu64 ", %" PRIu64 "] (the MatMul's inputs x outputs)",
                   lmt->shape[0], lmt->shape[1], D, V);
            goto out;
        }
    } else if (want_q4(&s, "lm_head", V, D))
        goto out;
    const mdesc_tensor *emb = find(&s, "embed");
    if (c->tied && emb) {
        fail_t(&s, "embed", "present, but the model description says tie_embeddings true (lm_head is the embedding)");
        goto out;
    }
    if (!c->tied) {
        if (!emb) {
            fail_t(&s, "embed", "missing (the model is not tied)");
            goto out;
        }
        if (is_quant(emb->dtype) ? want_q4(&s, "embed", V, D) : 0)
            goto out;
        if (!is_quant(emb->dtype) && (!is_float(emb->dtype) || elements(emb) != V * D)) {
            fail_t(&s, "embed", "%s, %" PRIu64 " elements, want q4, q8 or float [%" PRIu64 ", %" PRIu64 "]", dtname(emb->dtype),
                   elements(emb), V, D);
            goto out;
        }
    }
    if (check_family(&s, c))
        goto out;
    for (int l = 0; l < c->n_layers; l++)
        if (check_layer(&s, c, l))
            goto out;
    if (want_floats(&s, "final_norm", D, 0) || want_norm_bias(&s, c, "final_norm_bias", D))
        goto out;
    /* RoPE: the pack's own cos/sin caches [rows, rope_dim/2]; the context is what they cover. With LongRoPE
     * (rope.long_after T) the long pair covers the context and the short one the first T positions. */
    static const char *const pair[2][2] = {{"rope.cos", "rope.sin"}, {"rope.cos_long", "rope.sin_long"}};
    uint64_t rows[2] = {0, 0};
    for (int l = 0; l < 2; l++) {
        const mdesc_tensor *cs = find(&s, pair[l][0]), *sn = find(&s, pair[l][1]);
        if (l && !c->rope_long_after) {
            if (cs || sn) {
                fail_t(&s, cs ? cs->role : sn->role, "a long RoPE cache without rope.long_after in the description");
                goto out;
            }
            break;
        }
        if (!cs || !sn) {
            fail_t(&s, cs ? pair[l][1] : pair[l][0], "missing (the model must carry the pack's RoPE caches)");
            goto out;
        }
        for (int k = 0; k < 2; k++) {
            const mdesc_tensor *r = k ? sn : cs;
            if (r->ndim != 2 || r->shape[1] * 2 != (uint64_t)c->rope_dim || !r->shape[0]) {
                fail_t(&s, r->role, "shape [%" PRIu64 ", %" PRIu64 "], want [rows, rope dim / 2 = %d]", r->shape[0],
                       r->ndim > 1 ? r->shape[1] : 0, c->rope_dim / 2);
                goto out;
            }
        }
        if (cs->shape[0] != sn->shape[0]) {
            fail_t(&s, sn->role, "%" PRIu64 " rows, %s has %" PRIu64, sn->shape[0], cs->role, cs->shape[0]);
            goto out;
        }
        rows[l] = cs->shape[0];
    }
    uint64_t cover = c->rope_long_after ? rows[1] : rows[0];
    if (cover < (uint64_t)c->context_length)
        c->context_length = (int)cover; /* positions the caches cover */
    /* the short pair serves sequences of up to long_after positions (the context's, when that is less) */
    uint64_t short_rows = c->rope_long_after && (uint64_t)c->rope_long_after < (uint64_t)c->context_length
                              ? (uint64_t)c->rope_long_after : (uint64_t)c->context_length;
    if (rows[0] < short_rows) {
        fail_t(&s, "rope.cos", "%" PRIu64 " rows, fewer than the %" PRIu64 " positions before rope.long_after", rows[0],
               short_rows);
        goto out;
    }
    uint64_t half = (uint64_t)(c->rope_dim / 2), cnt = (uint64_t)c->context_length * half;
    if (want_floats(&s, "rope.cos", short_rows * half, 1) || want_floats(&s, "rope.sin", short_rows * half, 1))
        goto out;
    if (c->rope_long_after && (want_floats(&s, "rope.cos_long", cnt, 1) || want_floats(&s, "rope.sin_long", cnt, 1)))
        goto out;
    rc = 0;
out:
    free(s.by_role);
    return rc;
}

/* ---------------------------------------------------------------- tokenizer */

tok *mdesc_tokenizer(const model_config *c, const uint8_t *tj, size_t tjl, const uint8_t *tc, size_t tcl, ogk_error *e)
{
    if (!tj) {
        ogk_fail(e, "tokenizer: no tokenizer.json");
        return NULL;
    }
    ogk_error te;
    tok *t = tok_load((const char *)tj, tjl, (const char *)tc, tc ? tcl : 0, &te);
    if (!t) {
        ogk_fail(e, "tokenizer: %s", te.msg);
        return NULL;
    }
    if (c && tok_vocab_size(t) > c->vocab_size) {
        ogk_fail(e, "tokenizer: ids up to %d, beyond the model's vocabulary of %d", tok_vocab_size(t) - 1, c->vocab_size);
        tok_free(t);
        return NULL;
    }
    return t;
}
