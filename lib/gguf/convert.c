/* Q4NX container -> GGUF: the tensor plan (llama.cpp names, fused and permuted rows), the exact
 * re-blocking of MatMulNBits groups into ggml blocks, and the architecture metadata. The tokenizer
 * metadata is tokenizer.c's. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gguf_int.h"

int gguf_tokenizer_meta(const q4nx_file *f, gguf_writer *w, uint32_t vocab, int quiet, ogk_error *e); /* tokenizer.c; quiet: no notes */

/* ---------------------------------------------------------------- the plan */

typedef struct {
    const q4nx_file *f;
    const char **used; /* roles taken into the plan */
    size_t nused;
    gguf_plan *p;
    size_t n, cap;
    ogk_error *e;
} planner;

static const ogk_qtensor *take(planner *pl, const char *role)
{
    const ogk_qtensor *t = q4nx_find(pl->f, role);
    if (t)
        pl->used[pl->nused++] = t->role;
    return t;
}

static gguf_plan *add(planner *pl, const char *name, int kind)
{
    if (pl->n == pl->cap) {
        size_t cap = pl->cap ? 2 * pl->cap : 64;
        gguf_plan *p = realloc(pl->p, cap * sizeof *p);
        if (!p) {
            ogk_fail(pl->e, "out of memory");
            return NULL;
        }
        pl->p = p, pl->cap = cap;
    }
    gguf_plan *p = &pl->p[pl->n++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->kind = kind;
    return p;
}

static int is_float(int dtype) { return dtype == OGK_F32 || dtype == OGK_F16 || dtype == OGK_BF16; }

static uint64_t plain_count(const ogk_qtensor *t)
{
    size_t es = ogk_dtype_size(t->dtype);
    return es ? t->nbytes / es : 0;
}

/* a float vector of exactly n elements, as F32 */
static int vec(planner *pl, const char *name, const char *role, uint64_t n, int required)
{
    const ogk_qtensor *t = take(pl, role);
    if (!t)
        return required ? ogk_fail(pl->e, "tensor %s: missing (needed for %s)", role, name) : 0;
    if (!is_float(t->dtype) || plain_count(t) != n)
        return ogk_fail(pl->e, "tensor %s: %s with %llu elements, want a float vector of %llu", role,
                        ogk_dtype_name(t->dtype), (unsigned long long)plain_count(t), (unsigned long long)n);
    gguf_plan *p = add(pl, name, GPLAN_PLAIN);
    if (!p)
        return -1;
    p->type = GGML_F32, p->ndim = 1, p->nrows = 1, p->k = (uint32_t)n;
    p->seg[0] = (gguf_seg){t, 0, 1, 0};
    p->nseg = 1;
    snprintf(p->from, sizeof p->from, "%s", role);
    return 0;
}

/* rows of quantised tensors (each [rows, k]) stacked; perm[i]: head size to permute segment i by */
static int quant(planner *pl, const char *name, int nseg, const char *const *roles, const uint32_t *rows,
                 const uint32_t *perm, uint32_t k)
{
    gguf_plan *p = add(pl, name, GPLAN_Q);
    if (!p)
        return -1;
    p->ndim = 2, p->k = k;
    for (int i = 0; i < nseg; i++) {
        const ogk_qtensor *t = q4nx_find(pl->f, roles[i]);
        if (!t)
            return ogk_fail(pl->e, "tensor %s: missing (needed for %s)", roles[i], name);
        if (!ogk_dtype_quantised(t->dtype) || t->k != k || t->n < rows[i])
            return ogk_fail(pl->e, "tensor %s: %s [%u, %u], want quantised rows of %u", roles[i],
                            ogk_dtype_name(t->dtype), t->n, t->k, k);
        int again = 0;
        for (size_t u = 0; u < pl->nused; u++)
            again |= !strcmp(pl->used[u], t->role);
        if (!again)
            pl->used[pl->nused++] = t->role;
        /* consecutive segments of one tensor continue where the previous one ended */
        uint32_t row0 = 0;
        if (i && p->seg[i - 1].t == t)
            row0 = p->seg[i - 1].row0 + p->seg[i - 1].nrows;
        if ((uint64_t)row0 + rows[i] > t->n)
            return ogk_fail(pl->e, "tensor %s: %u rows, the plan needs %llu", roles[i], t->n,
                            (unsigned long long)row0 + rows[i]);
        p->seg[i] = (gguf_seg){t, row0, rows[i], perm ? perm[i] : 0};
        p->nrows += rows[i];
        size_t L = strlen(p->from);
        if (!i || p->seg[i - 1].t != t)
            snprintf(p->from + L, sizeof p->from - L, "%s%s", L ? "+" : "", roles[i]);
    }
    p->nseg = nseg;
    return 0;
}

static int one(planner *pl, const char *name, const char *role, uint32_t rows, uint32_t k, uint32_t perm)
{
    return quant(pl, name, 1, &role, &rows, &perm, k);
}

/* olmo: llama.cpp's norms have no weight and no bias, so the pack's weight must be exactly 1 and its bias
 * (optional) exactly 0 everywhere, as the builder writes OLMo's: nothing is written, any other value refused */
static int unit_norm(planner *pl, const char *role, const char *bias_role, uint64_t n)
{
    for (int b = 0; b < 2; b++) {
        const char *r = b ? bias_role : role;
        const ogk_qtensor *t = take(pl, r);
        if (!t) {
            if (b)
                continue;
            return ogk_fail(pl->e, "tensor %s: missing", r);
        }
        if (!is_float(t->dtype) || plain_count(t) != n)
            return ogk_fail(pl->e, "tensor %s: %s with %llu elements, want a float vector of %llu", r,
                            ogk_dtype_name(t->dtype), (unsigned long long)plain_count(t), (unsigned long long)n);
        float *v = malloc(n * sizeof *v);
        if (!v)
            return ogk_fail(pl->e, "out of memory");
        gguf_plain_row(t, 0, (uint32_t)n, v);
        uint64_t i = 0;
        while (i < n && v[i] == (b ? 0.0f : 1.0f))
            i++;
        float bad = i < n ? v[i] : 0;
        free(v);
        if (i < n)
            return ogk_fail(pl->e, "tensor %s: element %llu is %g, not %d: llama.cpp's olmo norms have no %s", r,
                            (unsigned long long)i, (double)bad, !b, b ? "bias" : "weight");
    }
    return 0;
}

typedef struct {
    const char *arch;
    uint32_t vocab, dim, ff, layers, heads, kv_heads, head_dim, rope_dim, ctx;
    float eps, theta;
    int tied, qkv_bias, qk_norm;
    int layer_norm; /* olmo: LayerNorms (llama.cpp's take no weights) */
    int freq_scaled; /* rope scaling of the frequencies only (llama3, linear): rope_freqs from the caches */
    uint32_t long_after; /* LongRoPE: the short caches serve sequences up to this length (0: one pair) */
    float attn_factor;   /* LongRoPE: the magnitude of the caches' rotations */
    /* gemma2 */
    float attn_softcap, final_softcap;
    uint32_t window;       /* 0: no sliding window */
    const json_t *windowed; /* sliding_window.layers */
} dims;

static int geti(const json_t *m, const char *k, uint32_t *v, int required, ogk_error *e)
{
    const json_t *j = json_object_get(m, k);
    if (!json_is_integer(j) || json_integer_value(j) <= 0 || json_integer_value(j) > (1 << 30)) {
        if (!required && (!j || json_is_null(j)))
            return 0;
        return ogk_fail(e, "model description: \"%s\" missing or not a positive integer", k);
    }
    *v = (uint32_t)json_integer_value(j);
    return 0;
}

int gguf_rope_freqs(const ogk_qtensor *cs, const ogk_qtensor *sn, uint32_t half, double *f, double *mag,
                    ogk_error *e)
{
    uint64_t rows = cs->shape[0] < sn->shape[0] ? cs->shape[0] : sn->shape[0];
    float *c = malloc(2 * (size_t)half * sizeof *c), *s = c ? c + half : NULL;
    if (!c)
        return ogk_fail(e, "out of memory");
    int rc = 0;
    /* the magnitude every rotation must have: 1, or (mag) the one position 1's pairs have on average
     * (LongRoPE's attention factor, which the builder multiplies into both pairs of caches) */
    double m = 1;
    if (mag) {
        uint64_t upto = rows < 17 ? rows : 17;
        m = 0;
        for (uint64_t p = 1; p < upto; p++) {
            gguf_plain_row(cs, (uint32_t)p, half, c);
            gguf_plain_row(sn, (uint32_t)p, half, s);
            for (uint32_t i = 0; i < half; i++)
                m += hypot(c[i], s[i]) / (double)(half * (upto - 1));
        }
        *mag = m;
    }
    /* rows 1, 2, 4, ..., and the last: each angle unwrapped with the estimate so far (its error times the
     * next row stays far below pi), so the last row's precision sets the frequency */
    for (uint64_t p = 1; p < rows && !rc; p = p == rows - 1 ? rows : p * 2 < rows - 1 ? p * 2 : rows - 1) {
        gguf_plain_row(cs, (uint32_t)p, half, c);
        gguf_plain_row(sn, (uint32_t)p, half, s);
        for (uint32_t i = 0; i < half; i++) {
            double r = hypot(c[i], s[i]), a = atan2(s[i], c[i]);
            if (!(fabs(r - m) <= 1e-2 * m)) {
                rc = mag ? ogk_fail(e, "rope caches %s / %s: row %llu, pair %u has magnitude %.6g, not the first "
                                    "rows' %.6g (llama.cpp scales every rotation by one attention factor)", cs->role,
                                    sn->role, (unsigned long long)p, i, r, m)
                         : ogk_fail(e, "rope.cos / rope.sin: row %llu, pair %u has magnitude %.6g, not 1 (scaled "
                                    "rotations: llama.cpp's frequency factors cannot give them)", (unsigned long long)p,
                                    i, r);
                break;
            }
            if (p > 1)
                a += 2 * M_PI * nearbyint((f[i] * (double)p - a) / (2 * M_PI));
            f[i] = a / (double)p;
        }
    }
    /* every row: p * f[i] within a few float32 roundings of the angle (the pack's own and llama.cpp's) */
    for (uint64_t p = 1; p < rows && !rc; p++) {
        gguf_plain_row(cs, (uint32_t)p, half, c);
        gguf_plain_row(sn, (uint32_t)p, half, s);
        for (uint32_t i = 0; i < half; i++) {
            double want = f[i] * (double)p, d = remainder(atan2(s[i], c[i]) - want, 2 * M_PI);
            if (fabs(d) > 2e-3 + 5e-7 * fabs(want) || !(fabs(hypot(c[i], s[i]) - m) <= 1e-2 * m)) {
                rc = ogk_fail(e, "rope caches %s / %s: row %llu, pair %u is off its frequency %.9g by %.3g rad, or "
                              "off the magnitude %.6g (not a fixed frequency and scale per pair)", cs->role, sn->role,
                              (unsigned long long)p, i, f[i], d, m);
                break;
            }
        }
    }
    free(c);
    return rc;
}

/* a pair of RoPE caches as the conversion reads them: [positions >= 2][half] floats each */
static int cache_pair_ok(const ogk_qtensor *cs, const ogk_qtensor *sn, uint32_t half)
{
    return cs && sn && cs->ndim == 2 && sn->ndim == 2 && cs->shape[0] >= 2 && sn->shape[0] >= 2 &&
           cs->shape[1] == half && sn->shape[1] == half && half >= 2 && is_float(cs->dtype) && is_float(sn->dtype);
}

/* LongRoPE (Phi-3 128k, Phi-3.5, Phi-4-mini as onnxruntime-genai's builder writes them): a short pair of
 * caches serves sequences of up to long_after positions, a long pair longer ones; each pair turns pair i
 * by theta's frequency divided by a factor of its own, and both are scaled by one attention factor.
 * llama.cpp's phi3 and llama (rope.scaling.type longrope) hold the two factor tables (rope_factors_short,
 * rope_factors_long; GPLAN_ROPE, measured off the caches), the factor (rope.scaling.attn_factor) and the
 * switch (rope.scaling.original_context_length); llama.cpp picks the long table for every position when
 * its context (n_ctx) is longer than the switch. Any theta serves, the tables being measured against it:
 * the description's, else Phi-3's 10000. Other architectures, or two magnitudes, are refused. */
static int long_rope(const q4nx_file *f, dims *d, ogk_error *e)
{
    if (strcmp(d->arch, "phi3") && strcmp(d->arch, "llama"))
        return ogk_fail(e, "LongRoPE (rope.long_after %u, two pairs of RoPE caches): llama.cpp's %s takes no long and "
                        "short frequency factors (its phi3 and llama do)", d->long_after, d->arch);
    static const char *const names[2][2] = {{"rope.cos", "rope.sin"}, {"rope.cos_long", "rope.sin_long"}};
    uint32_t half = d->rope_dim / 2;
    double mag[2];
    double *fr = malloc(half * sizeof *fr);
    if (!fr)
        return ogk_fail(e, "out of memory");
    for (int k = 0; k < 2; k++) {
        const ogk_qtensor *cs = q4nx_find(f, names[k][0]), *sn = q4nx_find(f, names[k][1]);
        if (!cache_pair_ok(cs, sn, half)) { /* (the short pair was checked by rope_theta already) */
            free(fr);
            return ogk_fail(e, "%s / %s: missing or not [positions >= 2][rope dim / 2 = %u] floats (rope.long_after "
                            "says LongRoPE)", names[k][0], names[k][1], half);
        }
        if (gguf_rope_freqs(cs, sn, half, fr, &mag[k], e)) {
            free(fr);
            return -1;
        }
        for (uint32_t i = 0; i < half; i++)
            if (!(fr[i] > 1e-12)) {
                double v = fr[i];
                free(fr);
                return ogk_fail(e, "%s / %s: pair %u turns by %.9g a position (llama.cpp's frequency factors give "
                                "positive frequencies only)", names[k][0], names[k][1], i, v);
            }
    }
    free(fr);
    if (!(fabs(mag[0] - mag[1]) <= 1e-3 * mag[1]) || !(mag[1] > 0))
        return ogk_fail(e, "LongRoPE: the short caches' rotations have magnitude %.6g, the long ones' %.6g (llama.cpp "
                        "scales both by one attention factor)", mag[0], mag[1]);
    if (d->theta <= 0)
        d->theta = 10000;
    d->attn_factor = (float)mag[1];
    return 0;
}

/* llama.cpp rotates pair i of position p by p·theta^(-2i/rope_dim) (rope.freq_base); ogakit and the pack
 * rotate by the container's caches. So the caches decide: position 1's angles must be theta's (a theta the
 * description lacks is read off pair 1), else the GGUF would rotate otherwise (a wrong or missing theta, a
 * scaled or otherwise altered frequency table) and is refused. With a frequency scaling in the description
 * (llama3, linear) the theta must be given, each pair's frequency is measured over every row of the caches,
 * and llama.cpp's llama divides theta's frequencies by rope_freqs (GPLAN_ROPE); other architectures refuse. */
static int rope_theta(const q4nx_file *f, dims *d, ogk_error *e)
{
    const ogk_qtensor *cs = q4nx_find(f, "rope.cos"), *sn = q4nx_find(f, "rope.sin");
    uint32_t half = d->rope_dim / 2;
    if (!cache_pair_ok(cs, sn, half))
        return ogk_fail(e, "rope.cos / rope.sin: missing or not [positions >= 2][rope dim / 2 = %u] floats", half);
    if (d->long_after)
        return long_rope(f, d, e);
    if (d->freq_scaled && d->theta <= 0)
        return ogk_fail(e, "rope scaling: the description gives no rope theta to scale");
    /* each pair's frequency over every row (fp16 caches: position 1 alone is good to ~1e-3) */
    double *fr = malloc(half * sizeof *fr);
    if (!fr)
        return ogk_fail(e, "out of memory");
    if (gguf_rope_freqs(cs, sn, half, fr, NULL, e)) {
        free(fr);
        return -1;
    }
    if (d->theta <= 0) /* pair 1 turns by theta^(-2 / rope_dim) a position */
        d->theta = fr[1] > 0 && fr[1] < 1 ? (float)pow(fr[1], -(double)d->rope_dim / 2) : 0;
    int bad = -1;
    double got = 0, want = 0;
    for (uint32_t i = 0; i < half && bad < 0 && d->theta > 0; i++) {
        got = fr[i], want = pow(d->theta, -2.0 * i / d->rope_dim);
        if (fabs(got - want) > 1e-3 * want + 1e-7)
            bad = (int)i;
    }
    free(fr);
    if (d->theta <= 0)
        return ogk_fail(e, "rope.cos / rope.sin: the caches' frequencies give no rope theta");
    if (d->freq_scaled) { /* llama3 / linear: rope_freqs says how much each pair is scaled */
        d->freq_scaled = bad >= 0;
        if (d->freq_scaled && strcmp(d->arch, "llama"))
            return ogk_fail(e, "rope scaling: the caches' frequencies are scaled, and llama.cpp's %s takes no frequency "
                            "factors (its llama does)", d->arch);
        return 0;
    }
    if (bad >= 0)
        return ogk_fail(e, "rope.cos / rope.sin: position 1, pair %d turns by %.9g, theta %g gives %.9g (llama.cpp "
                        "would rotate otherwise: scaled or altered frequencies are not converted)", bad, got,
                        (double)d->theta, want);
    return 0;
}

/* llama.cpp's gemma and gemma2 compute what the description says, or the description is refused by name:
 * both gate with GELU (tanh), read the classifier from token_embd, scale the embedding by sqrt(hidden) (the
 * builder's constant is that, rounded to 2 decimals: a difference of < 0.1 % is allowed and said in
 * q4nx-gguf(1)) and the scores by 1/sqrt(head_dim) (gemma2 at 46 layers, the 27B: 1/sqrt(hidden / heads));
 * gemma2 always soft-caps scores and logits (the caps are keys), norms the block outputs and may window
 * layers (sliding_window_pattern); gemma has none of these. */
static int gemma_dims(const json_t *m, dims *d, ogk_error *e)
{
    int g2 = !strcmp(d->arch, "gemma2");
    const json_t *act = json_object_get(m, "activation");
    if (!json_is_string(act) || strcmp(json_string_value(act), "gelu_tanh"))
        return ogk_fail(e, "activation %s: llama.cpp's %s gates with GELU (tanh)",
                        json_is_string(act) ? json_string_value(act) : "silu", d->arch);
    if (!d->tied)
        return ogk_fail(e, "an untied classifier: llama.cpp's %s reads its output from token_embd", d->arch);
    if (d->qkv_bias || d->qk_norm)
        return ogk_fail(e, "q/k/v biases or q/k norms: llama.cpp's %s has neither", d->arch);
    if (json_is_true(json_object_get(m, "sandwich_norms")) != g2)
        return ogk_fail(e, g2 ? "no sandwich norms: llama.cpp's gemma2 norms the attention and MLP outputs"
                              : "sandwich_norms: llama.cpp's gemma has no norms on the block outputs");
    const json_t *es = json_object_get(m, "embed_scale"), *as = json_object_get(m, "attn_scale"),
                 *ac = json_object_get(m, "attn_softcap"), *fc = json_object_get(m, "final_softcap"),
                 *sw = json_object_get(m, "sliding_window");
    double want = sqrt((double)d->dim);
    if (!json_is_number(es) || fabs(json_number_value(es) - want) > 0.00501)
        return ogk_fail(e, "embed_scale %g: llama.cpp's %s scales the embedding by sqrt(%u) = %.4f",
                        json_is_number(es) ? json_number_value(es) : 1.0, d->arch, d->dim, want);
    int wide = g2 && d->layers == 46;
    double sc = 1 / sqrt(wide ? (double)(d->dim / d->heads) : (double)d->head_dim);
    double have = json_is_number(as) ? json_number_value(as) : 1 / sqrt((double)d->head_dim);
    if (fabs(have / sc - 1) > 1e-6)
        return ogk_fail(e, "attn_scale %g: llama.cpp's %s scales scores by %g (1/sqrt(%s)) and has no key for another",
                        have, d->arch, sc, wide ? "hidden / heads" : "head_dim");
    if (!g2) {
        static const char *const none[] = {"attn_softcap", "final_softcap", "sliding_window"};
        for (size_t i = 0; i < sizeof none / sizeof *none; i++) {
            const json_t *v = json_object_get(m, none[i]);
            if (v && !json_is_null(v))
                return ogk_fail(e, "%s: llama.cpp's gemma has none (gemma2 has)", none[i]);
        }
        return 0;
    }
    if (!json_is_number(ac) || !json_is_number(fc))
        return ogk_fail(e, "no %s soft cap: llama.cpp's gemma2 always soft-caps (its key only sets the cap)",
                        json_is_number(ac) ? "final" : "attention");
    d->attn_softcap = (float)json_number_value(ac);
    d->final_softcap = (float)json_number_value(fc);
    if (json_is_object(sw)) {
        const json_t *sz = json_object_get(sw, "size");
        d->window = json_is_integer(sz) && json_integer_value(sz) > 0 && json_integer_value(sz) < (1 << 30)
                        ? (uint32_t)json_integer_value(sz) : 0;
        d->windowed = json_object_get(sw, "layers");
        if (!d->window || !json_is_array(d->windowed))
            return ogk_fail(e, "sliding_window: not {\"size\": N, \"layers\": [...]}");
        if (d->layers > 512)
            return ogk_fail(e, "%u layers: llama.cpp holds a sliding-window pattern of at most 512", d->layers);
    }
    return 0;
}

static int read_dims(const q4nx_file *f, dims *d, ogk_error *e)
{
    const json_t *m = q4nx_model(f);
    const char *fam = json_string_value(json_object_get(m, "family"));
    if (!fam)
        return ogk_fail(e, "model description: no \"family\"");
    /* llama.cpp's architecture of the same name (mistral runs as llama) */
    static const char *const archs[] = {"llama", "qwen2", "qwen3", "phi3", "gemma", "gemma2", "olmo", "chatglm"};
    d->arch = !strcmp(fam, "mistral") ? "llama" : NULL;
    for (size_t i = 0; i < sizeof archs / sizeof *archs && !d->arch; i++)
        if (!strcmp(fam, archs[i]))
            d->arch = archs[i];
    if (!d->arch)
        return ogk_fail(e, "family \"%s\": no llama.cpp architecture for it here (llama, mistral, qwen2, qwen3, phi3, gemma, "
                        "gemma2, olmo, chatglm)", fam);
    const json_t *nk = json_object_get(m, "norm");
    d->layer_norm = json_is_string(nk) && !strcmp(json_string_value(nk), "layer");
    if (d->layer_norm != !strcmp(d->arch, "olmo"))
        return ogk_fail(e, "norm \"%s\": llama.cpp's %s norms with %s", d->layer_norm ? "layer" : "rms", d->arch,
                        d->layer_norm ? "RMSNorm" : "a LayerNorm");
    if (geti(m, "vocab_size", &d->vocab, 1, e) || geti(m, "hidden_size", &d->dim, 1, e) ||
        geti(m, "intermediate_size", &d->ff, 1, e) || geti(m, "num_layers", &d->layers, 1, e) ||
        geti(m, "num_heads", &d->heads, 1, e) || geti(m, "num_kv_heads", &d->kv_heads, 1, e) ||
        geti(m, "context_length", &d->ctx, 1, e))
        return -1;
    d->head_dim = d->dim / d->heads;
    if (geti(m, "head_dim", &d->head_dim, 0, e))
        return -1;
    const json_t *eps = json_object_get(m, "rms_norm_eps");
    d->eps = json_is_number(eps) ? (float)json_number_value(eps) : 1e-6f;
    if (eps && !(json_is_number(eps) && json_number_value(eps) > 0 && json_number_value(eps) < 1))
        return ogk_fail(e, "model: rms_norm_eps must be a number in (0, 1)");
    const json_t *rope = json_object_get(m, "rope");
    d->rope_dim = d->head_dim;
    d->theta = 0; /* not given: read off the RoPE caches (rope_theta) */
    if (json_is_object(rope)) {
        if (geti(rope, "dim", &d->rope_dim, 0, e))
            return -1;
        const json_t *th = json_object_get(rope, "theta");
        if (json_is_number(th))
            d->theta = (float)json_number_value(th);
        const json_t *sc = json_object_get(rope, "scaling");
        const json_t *st = json_object_get(sc, "rope_type");
        const char *stype = json_string_value(st ? st : json_object_get(sc, "type"));
        const json_t *la = json_object_get(rope, "long_after");
        if (json_is_integer(la) && json_integer_value(la) > 0 && json_integer_value(la) < (1 << 30))
            d->long_after = (uint32_t)json_integer_value(la);
        else if (la && !json_is_null(la))
            return ogk_fail(e, "model description: rope.long_after is not a positive integer");
        if (stype && (!strcmp(stype, "llama3") || !strcmp(stype, "linear")))
            d->freq_scaled = 1; /* frequencies only: the caches say by how much (rope_theta) */
        else if (stype && (!strcmp(stype, "longrope") || !strcmp(stype, "su")))
            ; /* the caches decide: two pairs with rope.long_after (long_rope), else one as any other */
        else if (sc && !json_is_null(sc)) {
            char *s = json_dumps(sc, JSON_COMPACT);
            ogk_fail(e, "rope scaling %s: not converted yet (llama.cpp's rope scaling keys are not written by this "
                     "version); refusing rather than writing a model that rotates differently", s ? s : "?");
            free(s);
            return -1;
        }
        /* llama.cpp's chatglm rotates adjacent pairs (what the pack's interleaved rotation is); the other
         * architectures here rotate halves, or permute rows for it (llama, olmo) */
        if (json_is_true(json_object_get(rope, "interleaved")) != !strcmp(d->arch, "chatglm"))
            return ogk_fail(e, "rope: %s rotation is not what llama.cpp's %s expects",
                            strcmp(d->arch, "chatglm") ? "interleaved" : "rotate-halves", d->arch);
    } else if (!strcmp(d->arch, "chatglm")) {
        return ogk_fail(e, "rope: the description does not say the rotation is interleaved, which llama.cpp's chatglm "
                        "expects");
    }
    if (d->rope_dim > d->head_dim || d->rope_dim % 2)
        return ogk_fail(e, "rope dim %u does not fit head_dim %u", d->rope_dim, d->head_dim);
    /* llama.cpp's graphs for these assert n_embd_head == n_rot (qwen2/qwen3 aborted at load) */
    if ((!strcmp(d->arch, "llama") || !strcmp(d->arch, "olmo") || !strcmp(d->arch, "qwen2") ||
         !strcmp(d->arch, "qwen3")) && d->rope_dim != d->head_dim)
        return ogk_fail(e, "%s with partial rotary (rope dim %u < head_dim %u): llama.cpp's %s requires full "
                        "rotary", d->arch, d->rope_dim, d->head_dim, d->arch);
    /* these size the attention's q rows and output by hidden (llama.cpp's qwen2 aborted at load) */
    if ((!strcmp(d->arch, "olmo") || !strcmp(d->arch, "chatglm") || !strcmp(d->arch, "phi3") ||
         !strcmp(d->arch, "qwen2")) && d->heads * d->head_dim != d->dim)
        return ogk_fail(e, "%s with heads x head_dim %u != hidden %u: llama.cpp's %s cannot hold it", d->arch,
                        d->heads * d->head_dim, d->dim, d->arch);
    if (d->heads % d->kv_heads)
        return ogk_fail(e, "num_heads %u is not a multiple of num_kv_heads %u", d->heads, d->kv_heads);
    d->tied = json_is_true(json_object_get(m, "tie_embeddings"));
    d->qkv_bias = json_is_true(json_object_get(m, "qkv_bias"));
    d->qk_norm = json_is_true(json_object_get(m, "qk_norm"));
    if (!strcmp(d->arch, "gemma2") || !strcmp(d->arch, "gemma"))
        return gemma_dims(m, d, e) ? -1 : rope_theta(f, d, e);
    /* what these architectures of llama.cpp do not do (Gemma 2's additions, on any family's graph): refused,
     * never dropped (a file that computes something else) */
    const json_t *act = json_object_get(m, "activation");
    if (act && !json_is_null(act) && (!json_is_string(act) || strcmp(json_string_value(act), "silu")))
        return ogk_fail(e, "activation %s: llama.cpp's %s gates with SiLU", json_is_string(act) ? json_string_value(act) : "?",
                        d->arch);
    static const char *const extras[] = {"embed_scale", "attn_softcap", "final_softcap", "sliding_window"};
    for (size_t i = 0; i < sizeof extras / sizeof *extras; i++) {
        const json_t *v = json_object_get(m, extras[i]);
        if (v && !json_is_null(v))
            return ogk_fail(e, "%s: llama.cpp's %s has none; refusing rather than writing a model that computes "
                            "something else", extras[i], d->arch);
    }
    const json_t *as = json_object_get(m, "attn_scale");
    if (json_is_number(as) && fabs(json_number_value(as) * sqrt((double)d->head_dim) - 1) > 1e-6)
        return ogk_fail(e, "attn_scale %g: llama.cpp's %s scales scores by 1/sqrt(head_dim %u)", json_number_value(as),
                        d->arch, d->head_dim);
    if (json_is_true(json_object_get(m, "sandwich_norms")))
        return ogk_fail(e, "sandwich_norms: llama.cpp's %s has no norms on the block outputs", d->arch);
    return rope_theta(f, d, e);
}

static int build_plan(planner *pl, const dims *d)
{
    const q4nx_file *f = pl->f;
    ogk_error *e = pl->e;
    uint32_t qd = d->heads * d->head_dim, kvd = d->kv_heads * d->head_dim;
    /* llama.cpp's llama and olmo rotate adjacent pairs (its converter permutes q and k rows); the other
     * families rotate halves, as the pack does */
    int olmo = !strcmp(d->arch, "olmo");
    uint32_t perm = !strcmp(d->arch, "llama") || olmo ? d->head_dim : 0;
    /* embedding: the tied lm_head's rows, or its own tensor (quantised or float) */
    if (d->tied) {
        if (one(pl, "token_embd.weight", "lm_head", d->vocab, d->dim, 0))
            return -1;
    } else {
        const ogk_qtensor *t = q4nx_find(f, "embed");
        if (!t)
            return ogk_fail(e, "tensor embed: missing (the model is not tied)");
        if (ogk_dtype_quantised(t->dtype)) {
            if (one(pl, "token_embd.weight", "embed", d->vocab, d->dim, 0))
                return -1;
        } else {
            take(pl, "embed");
            if (!is_float(t->dtype) || t->ndim != 2 || t->shape[0] != d->vocab || t->shape[1] != d->dim)
                return ogk_fail(e, "tensor embed: %s, want float [%u, %u]", ogk_dtype_name(t->dtype), d->vocab, d->dim);
            gguf_plan *p = add(pl, "token_embd.weight", GPLAN_PLAIN);
            if (!p)
                return -1;
            p->type = t->dtype == OGK_F16 ? GGML_F16 : GGML_F32; /* f16 stays f16 (exact); bf16 widens */
            p->ndim = 2, p->nrows = d->vocab, p->k = d->dim;
            p->seg[0] = (gguf_seg){t, 0, d->vocab, 0};
            p->nseg = 1;
            snprintf(p->from, sizeof p->from, "embed");
        }
    }
    for (uint32_t l = 0; l < d->layers; l++) {
        char n[80], r[80], r2[80], r3[80];
#define N(s) (snprintf(n, sizeof n, "blk.%u.%s", l, s), n)
#define R(buf, s) (snprintf(buf, sizeof buf, "layers.%u.%s", l, s), buf)
        if (olmo ? unit_norm(pl, R(r, "input_norm"), R(r2, "input_norm_bias"), d->dim)
                 : vec(pl, N("attn_norm.weight"), R(r, "input_norm"), d->dim, 1))
            return -1;
        if (q4nx_find(f, R(r, "attn.qkv"))) {
            /* the pack's fused q|k|v rows stay fused (llama.cpp's attn_qkv), q and k permuted for llama */
            const char *roles[3] = {r, r, r};
            uint32_t rows[3] = {qd, kvd, kvd}, perms[3] = {perm, perm, 0};
            if (quant(pl, N("attn_qkv.weight"), 3, roles, rows, perms, d->dim))
                return -1;
        } else if (one(pl, N("attn_q.weight"), R(r, "attn.q"), qd, d->dim, perm) ||
                   one(pl, N("attn_k.weight"), R(r, "attn.k"), kvd, d->dim, perm) ||
                   one(pl, N("attn_v.weight"), R(r, "attn.v"), kvd, d->dim, 0)) {
            return -1;
        }
        int has_qkv_b = q4nx_find(f, R(r, "attn.qkv_bias")) != NULL, has_q_b = q4nx_find(f, R(r, "attn.q_bias")) != NULL;
        if ((has_qkv_b || has_q_b) && perm)
            return ogk_fail(e, "layer %u: llama with q/k biases: their permutation is not implemented", l);
        if (has_qkv_b) {
            if (!q4nx_find(f, R(r2, "attn.qkv")))
                return ogk_fail(e, "layer %u: a fused qkv bias with separate q/k/v weights (llama.cpp takes the "
                                "bias fused only with fused weights)", l);
            if (vec(pl, N("attn_qkv.bias"), R(r, "attn.qkv_bias"), qd + 2 * kvd, 1))
                return -1;
        } else if (has_q_b) {
            if (vec(pl, N("attn_q.bias"), R(r, "attn.q_bias"), qd, 1) ||
                vec(pl, N("attn_k.bias"), R(r2, "attn.k_bias"), kvd, 1) ||
                vec(pl, N("attn_v.bias"), R(r3, "attn.v_bias"), kvd, 1))
                return -1;
        } else if (d->qkv_bias) {
            return ogk_fail(e, "layer %u: the model has qkv biases but the container holds none", l);
        }
        if (d->qk_norm && (vec(pl, N("attn_q_norm.weight"), R(r, "attn.q_norm"), d->head_dim, 1) ||
                           vec(pl, N("attn_k_norm.weight"), R(r2, "attn.k_norm"), d->head_dim, 1)))
            return -1;
        if (one(pl, N("attn_output.weight"), R(r, "attn.o"), d->dim, qd, 0) ||
            (olmo ? unit_norm(pl, R(r2, "post_attn_norm"), R(r3, "post_attn_norm_bias"), d->dim)
                  : vec(pl, N("ffn_norm.weight"), R(r2, "post_attn_norm"), d->dim, 1)))
            return -1;
        if (!strcmp(d->arch, "gemma2") &&
            (vec(pl, N("post_attention_norm.weight"), R(r, "attn.out_norm"), d->dim, 1) ||
             vec(pl, N("post_ffw_norm.weight"), R(r2, "mlp.out_norm"), d->dim, 1)))
            return -1;
        if (!strcmp(d->arch, "phi3") || !strcmp(d->arch, "chatglm")) {
            /* llama.cpp's phi3 and chatglm take gate and up fused: ffn_up = [gate rows; up rows] (swiglu of halves) */
            const char *roles[2] = {R(r, "mlp.gate"), R(r2, "mlp.up")};
            uint32_t rows[2] = {d->ff, d->ff};
            if (quant(pl, N("ffn_up.weight"), 2, roles, rows, NULL, d->dim))
                return -1;
        } else if (one(pl, N("ffn_gate.weight"), R(r, "mlp.gate"), d->ff, d->dim, 0) ||
                   one(pl, N("ffn_up.weight"), R(r2, "mlp.up"), d->ff, d->dim, 0)) {
            return -1;
        }
        if (one(pl, N("ffn_down.weight"), R(r, "mlp.down"), d->dim, d->ff, 0))
            return -1;
#undef N
#undef R
    }
    if (olmo ? unit_norm(pl, "final_norm", "final_norm_bias", d->dim) : vec(pl, "output_norm.weight", "final_norm", d->dim, 1))
        return -1;
    const ogk_qtensor *lmt = q4nx_find(f, "lm_head");
    if (!d->tied && lmt && !ogk_dtype_quantised(lmt->dtype)) {
        /* unquantised: the MatMul's B [dim, vocab], transposed into llama.cpp's [vocab rows of dim] */
        take(pl, "lm_head");
        if (!is_float(lmt->dtype) || lmt->ndim != 2 || lmt->shape[0] != d->dim || lmt->shape[1] != d->vocab)
            return ogk_fail(e, "tensor lm_head: %s, want float [%u, %u] (an unquantised MatMul's K x N)",
                            ogk_dtype_name(lmt->dtype), d->dim, d->vocab);
        gguf_plan *p = add(pl, "output.weight", GPLAN_PLAIN);
        if (!p)
            return -1;
        p->type = lmt->dtype == OGK_F16 ? GGML_F16 : GGML_F32; /* f16 stays f16 (exact); bf16 widens */
        p->ndim = 2, p->nrows = d->vocab, p->k = d->dim, p->transposed = 1;
        p->seg[0] = (gguf_seg){lmt, 0, d->vocab, 0};
        p->nseg = 1;
        snprintf(p->from, sizeof p->from, "lm_head");
    } else if (!d->tied && one(pl, "output.weight", "lm_head", d->vocab, d->dim, 0))
        return -1;
    /* RoPE caches: llama.cpp computes rotations from rope.freq_base; nothing else may be left over */
    const ogk_qtensor *cs = take(pl, "rope.cos"), *sn = take(pl, "rope.sin");
    if (d->freq_scaled) {
        gguf_plan *p = add(pl, "rope_freqs.weight", GPLAN_ROPE);
        if (!p)
            return -1;
        p->type = GGML_F32, p->ndim = 1, p->nrows = 1, p->k = d->rope_dim / 2, p->rope_theta = d->theta;
        p->seg[0] = (gguf_seg){cs, 0, 1, 0};
        p->seg[1] = (gguf_seg){sn, 0, 1, 0};
        p->nseg = 2;
        snprintf(p->from, sizeof p->from, "rope.cos+rope.sin");
    }
    if (d->long_after) { /* LongRoPE: a factor table per pair of caches (long_rope) */
        const ogk_qtensor *cl = take(pl, "rope.cos_long"), *sl = take(pl, "rope.sin_long");
        for (int k = 0; k < 2; k++) {
            gguf_plan *p = add(pl, k ? "rope_factors_long.weight" : "rope_factors_short.weight", GPLAN_ROPE);
            if (!p)
                return -1;
            p->type = GGML_F32, p->ndim = 1, p->nrows = 1, p->k = d->rope_dim / 2, p->rope_theta = d->theta;
            p->rope_scaled = 1;
            p->seg[0] = (gguf_seg){k ? cl : cs, 0, 1, 0};
            p->seg[1] = (gguf_seg){k ? sl : sn, 0, 1, 0};
            p->nseg = 2;
            snprintf(p->from, sizeof p->from, k ? "rope.cos_long+rope.sin_long" : "rope.cos+rope.sin");
        }
    }
    for (size_t i = 0; i < q4nx_tensor_count(f); i++) {
        const char *role = q4nx_tensor_at(f, i)->role;
        int used = 0;
        for (size_t u = 0; u < pl->nused && !used; u++)
            used = !strcmp(pl->used[u], role);
        if (!used)
            return ogk_fail(e, "tensor %s: the container holds it but llama.cpp's %s has no place for it", role,
                            d->arch);
    }
    return 0;
}

gguf_plan *gguf_make_plan(const q4nx_file *f, size_t *n, const char **arch, ogk_error *e, int *code)
{
    *code = OGK_EXIT_INPUT;
    dims d = {0};
    if (read_dims(f, &d, e))
        return NULL;
    planner pl = {f, calloc(q4nx_tensor_count(f) + 4, sizeof(char *)), 0, NULL, 0, 0, e};
    if (!pl.used) {
        ogk_fail(e, "out of memory");
        return NULL;
    }
    int rc = build_plan(&pl, &d);
    free(pl.used);
    if (rc) {
        free(pl.p);
        return NULL;
    }
    *n = pl.n;
    if (arch)
        *arch = d.arch;
    return pl.p;
}

const ogk_qtensor *gguf_plan_row(const gguf_plan *p, uint32_t r, uint32_t *src)
{
    for (int i = 0; i < p->nseg; i++) {
        const gguf_seg *s = &p->seg[i];
        if (r >= s->nrows) {
            r -= s->nrows;
            continue;
        }
        uint32_t local = r;
        if (s->perm_hd) { /* output (head h, pair i, member j) <- source (h, j, i) */
            uint32_t hd = s->perm_hd, h = r / hd, w = r % hd;
            local = h * hd + (w % 2) * (hd / 2) + w / 2;
        }
        *src = s->row0 + local;
        return s->t;
    }
    *src = 0;
    return NULL;
}

/* element i of a float tensor (f32, f16 or bf16) as fp32 */
static float plain_elem(const ogk_qtensor *t, uint64_t i)
{
    const uint8_t *x = (const uint8_t *)t->data + i * ogk_dtype_size(t->dtype);
    if (t->dtype == OGK_F32) {
        float f;
        memcpy(&f, x, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, x, 2);
    return t->dtype == OGK_F16 ? ogk_f16_to_f32(h) : ogk_bf16_to_f32(h);
}

void gguf_plain_row(const ogk_qtensor *t, uint32_t row, uint32_t k, float *out)
{
    for (uint32_t i = 0; i < k; i++)
        out[i] = plain_elem(t, (uint64_t)row * k + i);
}

void gguf_plain_col(const ogk_qtensor *t, uint32_t col, uint32_t k, uint32_t ncols, float *out)
{
    for (uint32_t i = 0; i < k; i++)
        out[i] = plain_elem(t, (uint64_t)i * ncols + col);
}

/* ---------------------------------------------------------------- exact re-blocking */

static int f16_exact(float x)
{
    float y = ogk_f16_to_f32(ogk_f32_to_f16(x));
    return y == x && isfinite(x);
}

/* one 32-element block of a source row: codes, scale, zero point */
typedef struct {
    uint8_t q[32];
    float s;
    int z, lo, hi;
} block32;

static void get_block(const ogk_qtensor *t, uint32_t row, uint32_t k0, block32 *b)
{
    uint32_t g = k0 / t->block;
    int q8 = t->dtype == OGK_Q8;
    const uint8_t *c8 = q8 ? t->codes + (size_t)row * t->k_blocks * t->block + k0 : NULL;
    b->s = q8 ? ogk_q8_scale(t, row, g) : ogk_q4_scale(t, row, g);
    b->z = q8 ? ogk_q8_zero(t, row, g) : ogk_q4_zero(t, row, g);
    b->lo = 255, b->hi = 0;
    for (int i = 0; i < 32; i++) {
        b->q[i] = q8 ? c8[i] : ogk_q4_code(t, row, k0 + (uint32_t)i);
        if (b->q[i] < b->lo)
            b->lo = b->q[i];
        if (b->q[i] > b->hi)
            b->hi = b->q[i];
    }
}

/* Q8_0 holds (q - z) * s exactly when d = s is an fp16 and every q - z is an int8 (always, for 4-bit codes) */
static int q80_ok(const block32 *b) { return f16_exact(b->s) && b->lo - b->z >= -128 && b->hi - b->z <= 127; }

/* Q4_0 holds (q - z) * s exactly when d = s is an fp16 and every q - z + 8 is a 4-bit code */
static int q40_ok(const block32 *b)
{
    return f16_exact(b->s) && b->lo - b->z + 8 >= 0 && b->hi - b->z + 8 <= 15;
}
/* Q4_1: q' = q - c (c in [hi - 15, lo]) with d = s and m = (c - z) * s, both fp16; the shift c that
 * makes m exact, or -100 when none does */
static int q41_shift(const block32 *b)
{
    if (!f16_exact(b->s))
        return -100;
    for (int c = b->lo; c >= b->hi - 15; c--)
        if (f16_exact((float)(c - b->z) * b->s))
            return c;
    return -100;
}

typedef struct {
    int q40, q41, q80;         /* every block fits */
    int bad8;                  /* the first block that does not fit Q8_0 (when q80 is 0) is bad_row, bad_col */
    uint32_t bad_row, bad_col; /* the first block that fits neither Q4 type */
    float bad_s;
    int bad_z;
} fit;

static void scan(const gguf_plan *p, fit *ft)
{
    ft->q40 = ft->q41 = ft->q80 = 1;
    ft->bad_row = UINT32_MAX;
    for (uint32_t r = 0; r < p->nrows; r++) {
        uint32_t sr;
        const ogk_qtensor *t = gguf_plan_row(p, r, &sr);
        for (uint32_t k0 = 0; k0 < p->k; k0 += 32) {
            block32 b;
            get_block(t, sr, k0, &b);
            int a = q40_ok(&b), c = q41_shift(&b) != -100;
            ft->q40 &= a;
            ft->q41 &= c;
            int e8 = q80_ok(&b);
            if (!e8 && ft->q80 && !ft->bad8) /* an 8-bit source's refusal names its first block Q8_0 cannot hold */
                ft->bad8 = 1, ft->bad_row = r, ft->bad_col = k0, ft->bad_s = b.s, ft->bad_z = b.z;
            ft->q80 &= e8;
            if (!a && !c && ft->bad_row == UINT32_MAX)
                ft->bad_row = r, ft->bad_col = k0, ft->bad_s = b.s, ft->bad_z = b.z;
        }
    }
}

static void put_half(uint8_t *p, float x)
{
    uint16_t h = ogk_f32_to_f16(x);
    memcpy(p, &h, 2);
}

static int fill_quant(void *ctx, uint8_t *dst, uint64_t n, ogk_error *e)
{
    gguf_plan *p = ctx;
    uint64_t rb = gguf_row_bytes(p->type, p->k);
    if (rb * p->nrows != n)
        return ogk_fail(e, "tensor %s: %llu bytes planned, %llu asked", p->name, (unsigned long long)(rb * p->nrows),
                        (unsigned long long)n);
    float *ref = p->lossy || p->type == GGML_F32 ? malloc((size_t)p->k * sizeof *ref) : NULL;
    if ((p->lossy || p->type == GGML_F32) && !ref)
        return ogk_fail(e, "out of memory");
    for (uint32_t r = 0; r < p->nrows; r++) {
        uint32_t sr;
        const ogk_qtensor *t = gguf_plan_row(p, r, &sr);
        uint8_t *o = dst + (uint64_t)r * rb;
        if (ref)
            ogk_quant_dequant_row(t, sr, ref);
        if (p->type == GGML_F32) { /* widened: the container's own values */
            memcpy(o, ref, (size_t)p->k * 4);
            continue;
        }
        for (uint32_t k0 = 0; k0 < p->k; k0 += 32) {
            block32 b;
            get_block(t, sr, k0, &b);
            float d = b.s, m = 0;
            uint8_t v[32];
            switch (p->type) {
            case GGML_Q4_0: /* x = (v - 8) d with v = q - z + 8 */
                for (int i = 0; i < 32; i++) {
                    int x = b.q[i] - b.z + 8;
                    v[i] = (uint8_t)(x < 0 ? 0 : x > 15 ? 15 : x);
                }
                put_half(o, d);
                for (int j = 0; j < 16; j++)
                    o[2 + j] = (uint8_t)(v[j] | v[j + 16] << 4);
                o += 18;
                break;
            case GGML_Q4_1: { /* x = v d + m with v = q - c, m = (c - z) s */
                int c = p->lossy ? 0 : q41_shift(&b);
                if (c == -100)
                    c = 0;
                m = (float)(c - b.z) * b.s;
                for (int i = 0; i < 32; i++)
                    v[i] = (uint8_t)(b.q[i] - c);
                put_half(o, d);
                put_half(o + 2, m);
                for (int j = 0; j < 16; j++)
                    o[4 + j] = (uint8_t)(v[j] | v[j + 16] << 4);
                o += 20;
                break;
            }
            case GGML_Q8_0: /* x = v d with v = q - z; lossy and outside int8: requantised, d = max|x| / 127 */
                if (p->lossy && (b.lo - b.z < -128 || b.hi - b.z > 127)) {
                    float amax = 0;
                    for (int i = 0; i < 32; i++)
                        amax = fmaxf(amax, fabsf((float)(b.q[i] - b.z) * b.s));
                    d = ogk_f16_to_f32(ogk_f32_to_f16(amax / 127.0f));
                    for (int i = 0; i < 32; i++) {
                        float x = d > 0 ? rintf((float)(b.q[i] - b.z) * b.s / d) : 0;
                        v[i] = (uint8_t)(int8_t)(x < -127 ? -127 : x > 127 ? 127 : x);
                    }
                } else {
                    for (int i = 0; i < 32; i++)
                        v[i] = (uint8_t)(int8_t)(b.q[i] - b.z);
                }
                put_half(o, d);
                memcpy(o + 2, v, 32);
                o += 34;
                break;
            default:
                free(ref);
                return ogk_fail(e, "tensor %s: type %d", p->name, p->type);
            }
            if (p->lossy) { /* what llama.cpp will read back, against the container's value */
                float dh = ogk_f16_to_f32(ogk_f32_to_f16(d)), mh = ogk_f16_to_f32(ogk_f32_to_f16(m));
                for (int i = 0; i < 32; i++) {
                    float x = p->type == GGML_Q4_0   ? (float)(v[i] - 8) * dh
                              : p->type == GGML_Q8_0 ? (float)(int8_t)v[i] * dh
                                                     : (float)v[i] * dh + mh;
                    double err = fabs((double)x - (double)ref[k0 + (uint32_t)i]);
                    if (err > p->max_err || (isnan(err) && !isnan(p->max_err)))
                        p->max_err = err, p->err_row = r, p->err_col = k0 + (uint32_t)i;
                }
            }
        }
    }
    free(ref);
    return 0;
}

static int fill_plain(void *ctx, uint8_t *dst, uint64_t n, ogk_error *e)
{
    gguf_plan *p = ctx;
    uint64_t rb = gguf_row_bytes(p->type, p->k);
    if (rb * p->nrows != n)
        return ogk_fail(e, "tensor %s: size mismatch", p->name);
    const ogk_qtensor *t = p->seg[0].t;
    if (p->transposed) { /* [k, nrows] -> nrows rows of k, 64 source columns (output rows) at a time */
        size_t es = ogk_dtype_size(t->dtype), ds = p->type == GGML_F16 ? 2 : 4;
        const uint8_t *src = t->data;
        for (uint32_t r0 = 0; r0 < p->nrows; r0 += 64) {
            uint32_t nr = p->nrows - r0 < 64 ? p->nrows - r0 : 64;
            for (uint32_t i = 0; i < p->k; i++)
                for (uint32_t c = 0; c < nr; c++) {
                    uint64_t at = (uint64_t)i * p->nrows + r0 + c;
                    uint8_t *y = dst + (uint64_t)(r0 + c) * rb + (uint64_t)i * ds;
                    if (ds == es) { /* f32 -> f32, f16 -> f16: the bytes */
                        memcpy(y, src + at * es, es);
                    } else { /* bf16 -> f32 */
                        float v = plain_elem(t, at);
                        memcpy(y, &v, 4);
                    }
                }
        }
        return 0;
    }
    if (p->type == GGML_F16 && t->dtype == OGK_F16) { /* bytes as they are */
        memcpy(dst, t->data, n);
        return 0;
    }
    float *row = malloc((size_t)p->k * sizeof *row);
    if (!row)
        return ogk_fail(e, "out of memory");
    for (uint32_t r = 0; r < p->nrows; r++) {
        gguf_plain_row(t, r, p->k, row);
        memcpy(dst + (uint64_t)r * rb, row, (size_t)p->k * 4);
    }
    free(row);
    return 0;
}

/* rope_freqs: llama.cpp rotates pair i by p·theta^(-2i/dim) / rope_freqs[i]; the caches turn it by p·f[i] */
static int fill_rope(void *ctx, uint8_t *dst, uint64_t n, ogk_error *e)
{
    gguf_plan *p = ctx;
    if ((uint64_t)p->k * 4 != n)
        return ogk_fail(e, "tensor %s: size mismatch", p->name);
    double *f = malloc((size_t)p->k * sizeof *f);
    if (!f)
        return ogk_fail(e, "out of memory");
    double mag;
    int rc = gguf_rope_freqs(p->seg[0].t, p->seg[1].t, p->k, f, p->rope_scaled ? &mag : NULL, e);
    for (uint32_t i = 0; i < p->k && !rc; i++) {
        float v = (float)(pow(p->rope_theta, -(double)i / p->k) / f[i]);
        memcpy(dst + (size_t)i * 4, &v, 4);
    }
    free(f);
    return rc;
}

/* ---------------------------------------------------------------- metadata and the file */

static int arch_meta(gguf_writer *w, const q4nx_file *f, const char *arch, const char *name, size_t name_len,
                     ogk_error *e)
{
    dims d = {0};
    if (read_dims(f, &d, e))
        return -1;
    char k[96];
#define K(s) (snprintf(k, sizeof k, "%s.%s", arch, s), k)
    if (gguf_kv_str(w, "general.architecture", arch, strlen(arch), e) ||
        gguf_kv_str(w, "general.name", name, name_len, e) || gguf_kv_u32(w, "general.quantization_version", 2, e) ||
        gguf_kv_u32(w, K("vocab_size"), d.vocab, e) || gguf_kv_u32(w, K("context_length"), d.ctx, e) ||
        gguf_kv_u32(w, K("embedding_length"), d.dim, e) || gguf_kv_u32(w, K("block_count"), d.layers, e) ||
        gguf_kv_u32(w, K("feed_forward_length"), d.ff, e) || gguf_kv_u32(w, K("attention.head_count"), d.heads, e) ||
        gguf_kv_u32(w, K("attention.head_count_kv"), d.kv_heads, e) ||
        gguf_kv_f32(w, K(d.layer_norm ? "attention.layer_norm_epsilon" : "attention.layer_norm_rms_epsilon"), d.eps, e) ||
        gguf_kv_f32(w, K("rope.freq_base"), d.theta, e) || gguf_kv_u32(w, K("rope.dimension_count"), d.rope_dim, e))
        return -1;
    if (d.long_after && (gguf_kv_f32(w, K("rope.scaling.attn_factor"), d.attn_factor, e) ||
                         gguf_kv_u32(w, K("rope.scaling.original_context_length"), d.long_after, e) ||
                         gguf_kv_str(w, K("rope.scaling.type"), "longrope", 8, e)))
        return -1;
    if (d.head_dim != d.dim / d.heads &&
        (gguf_kv_u32(w, K("attention.key_length"), d.head_dim, e) ||
         gguf_kv_u32(w, K("attention.value_length"), d.head_dim, e)))
        return -1;
    if (!strcmp(arch, "gemma2")) {
        /* the caps; the window and, per layer, whether it applies (1) or the layer sees every position (0) */
        int32_t pat[512] = {0};
        size_t i;
        const json_t *v;
        json_array_foreach(d.windowed, i, v)
        {
            if (json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) < d.layers)
                pat[json_integer_value(v)] = 1;
        }
        /* no window: one as long as the context on llama.cpp's default pattern (it needs a windowed layer) */
        if (gguf_kv_f32(w, K("attn_logit_softcapping"), d.attn_softcap, e) ||
            gguf_kv_f32(w, K("final_logit_softcapping"), d.final_softcap, e) ||
            gguf_kv_u32(w, K("attention.sliding_window"), d.window ? d.window : d.ctx, e) ||
            (d.window && gguf_kv_arr_i32(w, K("attention.sliding_window_pattern"), pat, d.layers, e)))
            return -1;
    }
#undef K
    return 0;
}

gguf_file *gguf_expected_meta(const q4nx_file *f, const char *arch, ogk_error *e)
{
    gguf_file *g = NULL;
    gguf_writer *w = gguf_writer_new();
    int fd = memfd_create("ogakit-gguf-meta", MFD_CLOEXEC);
    dims d = {0};
    if (!w || fd < 0) {
        ogk_fail(e, "the expected metadata: %s", w ? strerror(errno) : "out of memory");
    } else if (!arch_meta(w, f, arch, "model", 5, e) && !read_dims(f, &d, e) && !gguf_tokenizer_meta(f, w, d.vocab, 1, e) &&
               !gguf_writer_write(w, fd, NULL, e)) {
        char path[64];
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        g = gguf_open(path, e);
    }
    if (fd >= 0)
        close(fd); /* the mapping keeps the file */
    gguf_writer_free(w);
    return g;
}

/* the first value of a plan's source that is not a finite number: a quantised tensor's scales (a code
 * times a NaN or infinite scale), a plain tensor's elements. 0 when every one is finite, else 1 with the
 * source row, the column (of the group's first element, for a scale) and the value */
static int first_nonfinite(const gguf_plan *p, uint32_t *row, uint32_t *col, float *val, int *is_scale, ogk_error *e)
{
    float *buf = p->kind == GPLAN_PLAIN ? malloc((size_t)p->k * sizeof *buf) : NULL;
    if (p->kind == GPLAN_PLAIN && !buf)
        return ogk_fail(e, "out of memory");
    int found = 0;
    for (uint32_t r = 0; r < p->nrows && !found; r++) {
        uint32_t sr;
        const ogk_qtensor *t = gguf_plan_row(p, r, &sr);
        if (!t)
            continue;
        if (p->kind == GPLAN_Q) {
            for (uint32_t g = 0; g < t->k_blocks && !found; g++) {
                float x = t->dtype == OGK_Q8 ? ogk_q8_scale(t, sr, g) : ogk_q4_scale(t, sr, g);
                if (!isfinite(x))
                    found = 1, *row = sr, *col = g * t->block, *val = x, *is_scale = 1;
            }
        } else if (p->kind == GPLAN_PLAIN) {
            if (p->transposed)
                gguf_plain_col(t, sr, p->k, p->nrows, buf);
            else
                gguf_plain_row(t, sr, p->k, buf);
            for (uint32_t c = 0; c < p->k && !found; c++)
                if (!isfinite(buf[c]))
                    found = 1, *row = sr, *col = c, *val = buf[c], *is_scale = 0;
        }
    }
    free(buf);
    return found;
}

int gguf_from_q4nx(const q4nx_file *f, const gguf_convert_opts *o, int fd, json_t **report, ogk_error *e, int *code)
{
    *code = OGK_EXIT_INPUT;
    if (report)
        *report = NULL;
    const char *arch;
    size_t n;
    gguf_plan *plan = gguf_make_plan(f, &n, &arch, e, code);
    if (!plan)
        return -1;
    gguf_writer *w = gguf_writer_new();
    json_t *tens = json_array(), *types = json_object();
    int rc = -1;
    if (!w) {
        ogk_fail(e, "out of memory");
        goto out;
    }
    /* general.name: the option, else the source pack's directory name; whole (a cut could split a UTF-8
     * character, and a GGUF string is UTF-8) */
    const char *name = "model";
    size_t name_len = 5;
    const char *src = json_string_value(json_object_get(q4nx_source(f), "pack"));
    if (o->name) {
        name = o->name, name_len = strlen(o->name);
    } else if (src && *src) {
        size_t L = strlen(src);
        while (L > 1 && src[L - 1] == '/')
            L--;
        size_t s0 = L;
        while (s0 && src[s0 - 1] != '/')
            s0--;
        if (L > s0)
            name = src + s0, name_len = L - s0;
    }
    if (arch_meta(w, f, arch, name, name_len, e))
        goto out;
    dims d = {0};
    read_dims(f, &d, e);
    if (gguf_tokenizer_meta(f, w, d.vocab, 0, e))
        goto out;
    /* choose each quantised tensor's type */
    for (size_t i = 0; i < n; i++) {
        gguf_plan *p = &plan[i];
        /* a NaN or infinity no GGUF type holds as a number: the weights were broken before they were packed
         * (a GGUF of them would fail its own --check, NaN equalling nothing) */
        uint32_t nr = 0, nc = 0;
        float nv = 0;
        int nsc = 0, bad = first_nonfinite(p, &nr, &nc, &nv, &nsc, e);
        if (bad < 0)
            goto out;
        if (bad) {
            ogk_fail(e, "tensor %s (%s): row %u %s %u: %s %g: the container's weights are not finite numbers", p->from,
                     p->name, nr, nsc ? "group at column" : "column", nc, nsc ? "scale" : "value", (double)nv);
            goto out;
        }
        if (p->kind == GPLAN_Q) {
            int geom = p->k % 32 == 0, q8 = 0;
            for (int s = 0; s < p->nseg; s++) {
                geom &= p->seg[s].t->block % 32 == 0;
                q8 |= p->seg[s].t->dtype == OGK_Q8;
            }
            fit ft = {0};
            p->odd_groups = !geom;
            if (geom)
                scan(p, &ft);
            if (geom && ft.q40) {
                p->type = GGML_Q4_0;
            } else if (geom && ft.q41) {
                p->type = GGML_Q4_1;
            } else if (q8 && geom && ft.q80) { /* 8-bit codes: Q8_0 is their own width, not a widening */
                p->type = GGML_Q8_0;
            } else if (o->policy == GGUF_WIDEN) {
                p->type = geom && ft.q80 ? GGML_Q8_0 : GGML_F32;
            } else if (o->policy == GGUF_LOSSY && geom) {
                int sym = 1;
                for (int s = 0; s < p->nseg; s++)
                    sym &= !p->seg[s].t->has_zp;
                p->type = q8 ? GGML_Q8_0 : sym ? GGML_Q4_0 : GGML_Q4_1; /* 8-bit codes keep 8 bits */
                p->lossy = 1;
            } else if (q8 && geom) {
                uint32_t sr;
                const ogk_qtensor *t = gguf_plan_row(p, ft.bad_row, &sr);
                ogk_fail(e, "tensor %s (%s): 8-bit row %u group %u: scale %.9g with zero point %d is not exact in Q8_0 "
                         "(an fp16 d, no offset); --widen writes it exactly as F32, --allow-lossy rounds it to Q8_0",
                         t->role, p->name, sr, ft.bad_col / t->block, (double)ft.bad_s, ft.bad_z);
                goto out;
            } else if (!geom) {
                ogk_fail(e, "tensor %s (%s): group size %u / row length %u is not a multiple of 32, the block of "
                         "%s%s", p->from, p->name, p->seg[0].t->block, p->k, q8 ? "Q8_0" : "Q4_0/Q4_1",
                         o->policy == GGUF_LOSSY ? "" : "; --widen writes it exactly as F32");
                goto out;
            } else {
                uint32_t sr;
                const ogk_qtensor *t = gguf_plan_row(p, ft.bad_row, &sr);
                ogk_fail(e, "tensor %s (%s): row %u group %u: scale %.9g with zero point %d is not exact in Q4_0 or "
                         "Q4_1 (fp16 d and m); --widen writes such tensors exactly as Q8_0/F32, --allow-lossy "
                         "rounds them", t->role, p->name, sr, ft.bad_col / t->block, (double)ft.bad_s, ft.bad_z);
                goto out;
            }
        }
        uint64_t ne[2] = {p->k, p->nrows};
        if (gguf_writer_tensor(w, p->name, p->type, p->ndim, ne, p->kind == GPLAN_Q      ? fill_quant
                                                                             : p->kind == GPLAN_ROPE ? fill_rope
                                                                                                     : fill_plain,
                               p, e))
            goto out;
    }
    int failed = 0;
    if (gguf_writer_write(w, fd, &failed, e)) {
        if (failed)
            *code = OGK_EXIT_CHECK;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        gguf_plan *p = &plan[i];
        json_t *j = json_pack("{s:s,s:s,s:s}", "name", p->name, "type", gguf_type_name(p->type), "from", p->from);
        int src8 = 0;
        for (int s = 0; p->kind == GPLAN_Q && s < p->nseg; s++)
            src8 |= p->seg[s].t->dtype == OGK_Q8;
        if (src8)
            json_object_set_new(j, "source_bits", json_integer(8));
        if (p->kind == GPLAN_Q && p->odd_groups)
            json_object_set_new(j, "odd_groups", json_true());
        if (p->kind == GPLAN_Q && p->type != GGML_Q4_0 && p->type != GGML_Q4_1 && !(src8 && p->type == GGML_Q8_0))
            json_object_set_new(j, "widened", json_true());
        if (p->lossy) {
            uint32_t sr;
            gguf_plan_row(p, p->err_row, &sr);
            json_object_set_new(j, "max_abs_error", json_real(p->max_err));
            json_object_set_new(j, "at", json_pack("{s:i,s:i}", "row", (int)sr, "col", (int)p->err_col));
        }
        json_array_append_new(tens, j);
        json_t *c = json_object_get(types, gguf_type_name(p->type));
        json_object_set_new(types, gguf_type_name(p->type), json_integer(c ? json_integer_value(c) + 1 : 1));
    }
    rc = 0;
out:
    if (report && !rc)
        *report = json_pack("{s:s,s:o,s:o}", "architecture", arch, "types", types, "tensors", tens);
    else
        json_decref(tens), json_decref(types);
    gguf_writer_free(w);
    free(plan);
    return rc;
}
