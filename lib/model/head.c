/* The classifier (logits = final-normed rows · lm_headᵀ), and its argmax head.
 *
 * In i8 mode the classifier runs with 16-bit activations (model_matmul_mode), at twice the int8 kernels'
 * multiply-adds: in a verify pass of 8 rows on a 2-core AVX-512 machine that is a quarter of the pass.
 * A caller that takes nothing but each row's argmax (greedy decoding, a greedy speculative verify) sets
 * s->head_argmax, and then the classifier:
 *   1. runs in int8 (L8),
 *   2. bounds, per entry, how far the 16-bit result L16 can be from L8:
 *        |L16 − L8| <= W_n · E_m + S_n · F_m
 *      W_n = ‖dequantised row n‖₂ (exact products: ‖scale·(code − zp)‖₂), S_n = max |scale| of row n (both
 *      once per model), E_m = ‖x̂8 − x̂16‖₂ the two quantisations' reconstructions of activation row m apart
 *      (Cauchy–Schwarz), F_m the fp32 rounding of both kernels' sums (kern.h: (kb + 8)·2^-23·Σ_g |scale·d|·
 *      (Σ code·|Q| + zp·Σ|Q|) <= (kb + 8)·2^-23·30·S_n·‖x̂‖₁ for each, doubled),
 *   3. takes T = max L8 − the row's largest bound (L16 >= T where L8 is largest, so the row's true maximum
 *      is >= T), finds the 16-column blocks holding an entry with L8 >= T − the largest bound (the ISA row's
 *      vmax and mark_ge scans), and in them every entry with L8 + its own bound >= T, and recomputes those
 *      blocks in 16-bit with the kernels' own bits (kern_matmul_cols).
 * Every other entry has L16 < T and L8 < T, below the recomputed maximum, so the row's argmax (ties: the
 * lowest id, as model_argmax) is the one the full 16-bit classifier gives — but the entries not recomputed
 * are int8 approximations: only the argmax may be read. When the bound leaves too many candidates (or
 * anything is not finite) the full 16-bit classifier runs instead. t/unit/model_head.c checks the bound on
 * every entry and the argmaxes against the full classifier. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kern/kern.h"
#include "model_int.h"

/* rows from which the argmax head runs: one row's classifier streams the weights at the memory's pace in
 * either mode, and the int8 one's scans would only add to it */
#define HEAD_MIN_ROWS 2
/* recompute at most this share of the classifier's 16-column blocks; beyond, the whole classifier */
#define HEAD_MAX_SHARE 8

struct model_head {
    pthread_mutex_t lock;
    int state;   /* 0 not made, 1 made, -1 could not be made (no memory) */
    float *norm; /* [vocab] W_n, rounded up */
    float *smax; /* [vocab] S_n */
    float norm_max, smax_max;
};

model_head *model_head_new(void)
{
    model_head *h = calloc(1, sizeof *h);
    if (h)
        pthread_mutex_init(&h->lock, NULL);
    return h;
}

void model_head_free(model_head *h)
{
    if (!h)
        return;
    pthread_mutex_destroy(&h->lock);
    free(h->norm), free(h->smax);
    free(h);
}

/* ---- the per-row weight bounds, once per model ---- */
typedef struct {
    const ogk_qtensor *w;
    model_head *h;
    int failed;
} bounds_job;

#define BOUNDS_ROWS 64
static void bounds_range(void *arg, size_t r0, size_t r1, int worker)
{
    (void)worker;
    bounds_job *bj = arg;
    const ogk_qtensor *w = bj->w;
    float *buf = malloc((size_t)BOUNDS_ROWS * w->k * sizeof *buf);
    if (!buf) {
        bj->failed = 1;
        return;
    }
    for (size_t r = r0; r < r1; r += BOUNDS_ROWS) {
        uint32_t n = r1 - r < BOUNDS_ROWS ? (uint32_t)(r1 - r) : BOUNDS_ROWS;
        kern_dequant_rows(w, (uint32_t)r, n, buf);
        for (uint32_t i = 0; i < n; i++) {
            const float *x = buf + (size_t)i * w->k;
            double ss = 0;
            for (uint32_t c = 0; c < w->k; c++)
                ss += (double)x[c] * x[c];
            float smax = 0;
            for (uint32_t g = 0; g < w->k_blocks; g++) {
                float sc = fabsf(ogk_q4_scale(w, (uint32_t)r + i, g));
                smax = sc > smax ? sc : smax;
            }
            /* the dequantised floats are the exact products rounded (relative 2^-24 each): 1 + 2^-20 covers it */
            bj->h->norm[r + i] = nextafterf((float)(sqrt(ss) * (1 + 0x1p-20)), INFINITY);
            bj->h->smax[r + i] = smax;
        }
    }
    free(buf);
}

static const model_head *head_bounds(model_state *s)
{
    model_head *h = s->m->head;
    const ogk_qtensor *w = s->m->w.lm_head;
    pthread_mutex_lock(&h->lock);
    if (!h->state) {
        h->norm = malloc((size_t)w->n * sizeof *h->norm);
        h->smax = malloc((size_t)w->n * sizeof *h->smax);
        bounds_job bj = {w, h, !h->norm || !h->smax};
        if (!bj.failed)
            kern_pool_for(s->pool, w->n, 0, bounds_range, &bj);
        for (uint32_t n = 0; !bj.failed && n < w->n; n++) {
            h->norm_max = h->norm[n] > h->norm_max ? h->norm[n] : h->norm_max;
            h->smax_max = h->smax[n] > h->smax_max ? h->smax[n] : h->smax_max;
        }
        h->state = bj.failed ? -1 : 1;
    }
    pthread_mutex_unlock(&h->lock);
    return h->state == 1 ? h : NULL;
}

/* ---- the activation side and the scan, one logits row per task ---- */
typedef struct {
    const ogk_qtensor *w;
    const model_head *h;
    const float *xb, *logits;
    unsigned char *marks; /* [rows][nb]: the row's candidate blocks */
    atomic_int bad;       /* a row's bound or maximum is not finite, or no memory: the full classifier */
} scan_job;

/* E (‖x̂8 − x̂16‖₂) and F (the two kernels' fp32 rounding over S_n) of activation row x; q [3·kp] bytes,
 * d [2·kb] floats, qs [kb] */
static void row_bounds(const ogk_qtensor *w, const float *x, int8_t *q, float *d, int32_t *qs, float *E, float *F)
{
    uint32_t K = w->k, B = w->block, kb = w->k_blocks, kp = kb * B;
    int8_t *q1 = q + kp, *q2 = q + 2 * (size_t)kp;
    kern_quant_row_i8(x, K, B, q, d, qs);
    kern_quant_row_i16(x, K, B, q1, q2, d + kb, qs);
    double e2 = 0, l1 = 0;
    for (uint32_t c = 0; c < K; c++) {
        double a = (double)d[c / B] * q[c], b = (double)d[kb + c / B] * (254.0 * q1[c] + q2[c]);
        e2 += (a - b) * (a - b), l1 += fabs(a) + fabs(b);
    }
    *E = (float)(sqrt(e2) * (1 + 1e-6));
    *F = (float)(2.0 * (kb + 8) * 0x1p-23 * 30.0 * l1);
}

static void scan_rows(void *arg, size_t r0, size_t r1, int worker)
{
    (void)worker;
    scan_job *sj = arg;
    const ogk_qtensor *w = sj->w;
    const model_head *h = sj->h;
    const kern_isa *isa = kern_isa_current();
    uint32_t V = w->n, kb = w->k_blocks, nb = (V + 15) / 16;
    int8_t *q = malloc((size_t)kb * w->block * 3);
    float *d = malloc(2 * (size_t)kb * sizeof *d);
    int32_t *qs = malloc((size_t)kb * sizeof *qs);
    if (!q || !d || !qs)
        atomic_store(&sj->bad, 1);
    for (size_t m = r0; m < r1 && !atomic_load(&sj->bad); m++) {
        float E, F;
        const float *L = sj->logits + m * V;
        unsigned char *mark = sj->marks + m * nb;
        row_bounds(w, sj->xb + m * w->k, q, d, qs, &E, &F);
        float bmax = h->norm_max * E + h->smax_max * F, mx = isa->vmax(L, V);
        /* the row's maximum is >= L8 at the int8 maximum minus its bound >= T (slack: the float evaluation
         * of the bounds and comparisons) */
        float slack = 1e-5f * (fabsf(mx) + bmax), T = mx - bmax - slack, thr = T - bmax;
        if (!isfinite(T) || !isfinite(thr) || !isfinite(bmax)) {
            atomic_store(&sj->bad, 1);
            break;
        }
        isa->mark_ge(L, V, thr, mark); /* blocks with an entry >= thr (or NaN); then each entry's own bound */
        for (uint32_t b = 0; b < nb; b++) {
            if (!mark[b])
                continue;
            mark[b] = 0;
            for (uint32_t v = b * 16; v < V && v < b * 16 + 16 && !mark[b]; v++)
                mark[b] = !(L[v] + (h->norm[v] * E + h->smax[v] * F) < T);
        }
    }
    free(q), free(d), free(qs);
}

/* steps 1-3 above; 1 when the full classifier has to run instead (nothing written that matters) */
static int argmax_head(model_state *s, float *logits, const float *xb, int n, ogk_error *e)
{
    const ogk_qtensor *w = s->m->w.lm_head;
    const model_head *h = head_bounds(s);
    if (!h)
        return 1;
    uint32_t V = w->n, nb = (V + 15) / 16;
    scan_job sj = {w, h, xb, logits, calloc((size_t)n * nb, 1), 0};
    uint32_t *cols = malloc((size_t)nb * sizeof *cols);
    int rc = 1;
    if (!sj.marks || !cols)
        goto done;
    if (kern_matmul(s->pool, w, xb, n, logits, KERN_I8, e)) {
        rc = -1;
        goto done;
    }
    kern_pool_for(n > 1 ? s->pool : NULL, (size_t)n, 1, scan_rows, &sj);
    size_t nc = 0;
    for (uint32_t b = 0; b < nb && !atomic_load(&sj.bad); b++) {
        int any = 0;
        for (int m = 0; m < n; m++)
            any |= sj.marks[(size_t)m * nb + b];
        if (any)
            cols[nc++] = b * 16;
    }
    if (atomic_load(&sj.bad) || nc * HEAD_MAX_SHARE > nb)
        goto done;
    rc = kern_matmul_cols(s->pool, w, xb, n, logits, KERN_I16, cols, nc, e) ? -1 : 0;
    s->prof.head_cols += (int)(nc * 16);
done:
    free(sj.marks), free(cols);
    return rc;
}

double model_head_worst(model_state *s, const float *x, int n)
{
    const ogk_qtensor *w = s->m->w.lm_head;
    const model_head *h = head_bounds(s);
    uint32_t V = w->n, kb = w->k_blocks;
    float *l8 = malloc((size_t)n * V * sizeof *l8), *l16 = malloc((size_t)n * V * sizeof *l16), *d = malloc(2 * kb * 4);
    int8_t *q = malloc((size_t)kb * w->block * 3);
    int32_t *qs = malloc(kb * sizeof *qs);
    double worst = -1;
    ogk_error e;
    if (h && l8 && l16 && d && q && qs && !kern_matmul(s->pool, w, x, n, l8, KERN_I8, &e) &&
        !kern_matmul(s->pool, w, x, n, l16, KERN_I16, &e)) {
        worst = 0;
        for (int m = 0; m < n; m++) {
            float E, F;
            row_bounds(w, x + (size_t)m * w->k, q, d, qs, &E, &F);
            for (uint32_t v = 0; v < V; v++) {
                double b = h->norm[v] * E + h->smax[v] * F, gap = fabs((double)l8[(size_t)m * V + v] - l16[(size_t)m * V + v]);
                worst = gap == 0 ? worst : b > 0 && gap / b > worst ? gap / b : b > 0 ? worst : INFINITY;
            }
        }
    }
    free(l8), free(l16), free(d), free(q), free(qs);
    return worst;
}

void model_prepare_head(model_state *s)
{
    if (model_matmul_mode(s, s->m->w.lm_head) == KERN_I16)
        head_bounds(s);
}

/* final logit soft-capping (Gemma 2: final_softcap > 0): the graph's Div, Tanh, Mul over n logits */
static void softcap(const model_config *c, float *x, size_t n)
{
    float cap = c->final_softcap;
    if (cap > 0)
        for (size_t i = 0; i < n; i++)
            x[i] = tanhf(x[i] / cap) * cap;
}

int model_classify(model_state *s, float *logits, const float *xb, int n, int argmax_only, ogk_error *e)
{
    int mode = model_matmul_mode(s, s->m->w.lm_head);
    if (argmax_only && n >= HEAD_MIN_ROWS && mode == KERN_I16) {
        int rc = argmax_head(s, logits, xb, n, e);
        if (rc <= 0)
            return rc;
    }
    if (kern_matmul(s->pool, s->m->w.lm_head, xb, n, logits, mode, e))
        return -1;
    softcap(&s->m->c, logits, (size_t)n * (size_t)s->m->c.vocab_size); /* monotonic: the argmax head skips it */
    return 0;
}
