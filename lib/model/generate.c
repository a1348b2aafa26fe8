/* Sampling (greedy, temperature, top-k, top-p, seeded) and stop strings over streamed text. */
#define _GNU_SOURCE
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

/* the largest value in lanes the compiler can vectorise, then its first index (lowest id on ties) */
int model_argmax(const float *logits, int n)
{
    float lane[16], mx = logits[0];
    int i = 0;
    for (int l = 0; l < 16; l++)
        lane[l] = logits[0];
    for (; i + 16 <= n; i += 16)
        for (int l = 0; l < 16; l++)
            lane[l] = logits[i + l] > lane[l] ? logits[i + l] : lane[l];
    for (; i < n; i++)
        mx = logits[i] > mx ? logits[i] : mx;
    for (int l = 0; l < 16; l++)
        mx = lane[l] > mx ? lane[l] : mx;
    for (i = 0; i < n - 1; i++)
        if (logits[i] == mx)
            break;
    return i;
}

double model_logsumexp(const float *x, int n)
{
    const kern_isa *isa = kern_isa_current(); /* the vocabulary's maximum and sum of exponentials, vectorised */
    float mx = isa->vmax(x, (size_t)n);
    if (!(mx > -INFINITY))
        return mx;
    return mx + log(isa->expsum(x, (size_t)n, mx));
}

int model_top_ids(const float *x, int n, int k, int *idx)
{
    int got = 0;
    for (int i = 0; i < n && k > 0; i++) {
        if (got < k || x[i] > x[idx[got - 1]]) {
            int p = got < k ? got++ : k - 1;
            while (p > 0 && x[idx[p - 1]] < x[i]) {
                idx[p] = idx[p - 1];
                p--;
            }
            idx[p] = i;
        }
    }
    return got;
}

int model_sample_vocab(int model_vocab, int tok_vocab, float temperature)
{
    return temperature > 0 && tok_vocab > 0 && tok_vocab < model_vocab ? tok_vocab : model_vocab;
}

int model_sampler_init(model_sampler *sp, int vocab, float temperature, int top_k, float top_p, uint64_t seed)
{
    memset(sp, 0, sizeof *sp);
    sp->vocab = vocab, sp->temperature = temperature, sp->top_k = top_k, sp->top_p = top_p;
    sp->rng = seed ? seed : 0x9E3779B97F4A7C15ull;
    sp->idx = malloc((size_t)vocab * sizeof *sp->idx);
    sp->prob = malloc((size_t)vocab * sizeof *sp->prob);
    return sp->idx && sp->prob ? 0 : -1;
}

void model_sampler_free(model_sampler *sp)
{
    free(sp->idx);
    free(sp->prob);
    memset(sp, 0, sizeof *sp);
}

/* xorshift64*: uniform float in [0, 1) */
static float rng_uniform(uint64_t *s)
{
    *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
    return (float)((*s * 0x2545F4914F6CDD1Dull) >> 40) / 16777216.0f;
}

/* qsort_r's order: the logits (arg) descending, lower id first on ties */
static int by_logit_desc(const void *a, const void *b, void *arg)
{
    const float *lg = arg;
    float x = lg[*(const int *)a], y = lg[*(const int *)b];
    return x < y ? 1 : x > y ? -1 : *(const int *)a - *(const int *)b;
}

/* idx[0..k) becomes the k first of idx[0..n) in by_logit_desc's order (a total order), among themselves in
 * no order: Wirth's selection, O(n) on average */
static void select_first(int *idx, int n, int k, const float *lg)
{
    int l = 0, r = n - 1, K = k - 1;
    while (l < r) {
        int x = idx[K], i = l, j = r;
        do {
            while (by_logit_desc(&idx[i], &x, (void *)lg) < 0)
                i++;
            while (by_logit_desc(&x, &idx[j], (void *)lg) < 0)
                j--;
            if (i <= j) {
                int t = idx[i];
                idx[i++] = idx[j], idx[j--] = t;
            }
        } while (i <= j);
        if (j < K)
            l = i;
        if (K < i)
            r = j;
    }
}

/* idx[0..m) sorted: the m first of idx[0..n) in by_logit_desc's order */
static void sort_first(int *idx, int n, int m, const float *lg)
{
    if (m < n)
        select_first(idx, n, m, lg);
    qsort_r(idx, (size_t)m, sizeof *idx, by_logit_desc, (void *)lg);
}

/* temperature, then top-k, then top-p (nucleus), then a draw. Sorting is only as deep as the cuts need:
 * the k first for top-k, the nucleus for top-p (found 64, 256, ... deep), none for temperature alone
 * (the draw then walks the candidates in id order; a full sort of a flat distribution over 150k ids
 * cost twice a decode step) */
int model_sample(model_sampler *sp, const float *logits)
{
    int V = sp->vocab;
    if (sp->temperature <= 0)
        return model_argmax(logits, V);
    float mx = logits[model_argmax(logits, V)], T = sp->temperature;
    int n = 0;
    /* candidates: a logit more than 30 / (1/T) below the max has probability < e^-30 relative: never drawn */
    float floor = mx - 30.0f * T;
    for (int i = 0; i < V; i++)
        if (logits[i] >= floor)
            sp->idx[n++] = i;
    int sorted = sp->top_k > 0 && n > sp->top_k;
    if (sorted) {
        sort_first(sp->idx, n, sp->top_k, logits);
        n = sp->top_k;
    }
    double sum = 0;
    if (sp->top_p < 1) { /* 0: the top token alone, as the smallest set reaching it */
        for (int i = 0; i < n; i++)
            sum += expf((logits[sp->idx[i]] - mx) / T);
        /* the smallest prefix in order whose mass reaches top_p */
        for (int m = n < 64 ? n : 64;; m = m * 4 < n ? m * 4 : n) {
            if (!sorted)
                sort_first(sp->idx, n, m, logits);
            double cum = 0;
            int cut = 0;
            for (int i = 0; i < m && !cut; i++) {
                cum += expf((logits[sp->idx[i]] - mx) / T) / sum;
                if (cum >= sp->top_p)
                    cut = i + 1;
            }
            if (cut || m == n) {
                n = cut ? cut : n;
                break;
            }
        }
    }
    sum = 0;
    for (int i = 0; i < n; i++)
        sum += sp->prob[i] = expf((logits[sp->idx[i]] - mx) / T);
    double u = rng_uniform(&sp->rng) * sum, cum = 0;
    for (int i = 0; i < n; i++) {
        cum += sp->prob[i];
        if (u < cum)
            return sp->idx[i];
    }
    return sp->idx[n - 1];
}

/* ---- stop strings ---- */

void model_stopper_init(model_stopper *st, char **stops, int n)
{
    memset(st, 0, sizeof *st);
    st->stops = stops, st->n = n;
}

void model_stopper_free(model_stopper *st)
{
    free(st->buf);
    memset(st, 0, sizeof *st);
}

int model_stopper_special(const model_stopper *st, const char *text, size_t len)
{
    for (int i = 0; text && i < st->n; i++)
        if (strlen(st->stops[i]) == len && !memcmp(st->stops[i], text, len))
            return 1;
    return 0;
}

/* length of the longest suffix of buf that is a proper prefix of some stop string */
static size_t held_back(const model_stopper *st)
{
    size_t best = 0;
    for (int i = 0; i < st->n; i++) {
        size_t sl = strlen(st->stops[i]);
        if (!sl)
            continue;
        for (size_t k = sl - 1 < st->len ? sl - 1 : st->len; k > best; k--)
            if (!memcmp(st->buf + st->len - k, st->stops[i], k)) {
                best = k;
                break;
            }
    }
    return best;
}

int model_stopper_feed(model_stopper *st, const char *text, size_t len, void (*out)(const char *, size_t, void *),
                       void *ctx)
{
    if (st->hit)
        return 1;
    if (st->n == 0) {
        if (len)
            out(text, len, ctx);
        return 0;
    }
    if (st->len + len + 1 > st->cap) {
        size_t cap = (st->len + len + 1) * 2;
        char *b = realloc(st->buf, cap);
        if (!b)
            abort();
        st->buf = b, st->cap = cap;
    }
    memcpy(st->buf + st->len, text, len);
    st->len += len;
    st->buf[st->len] = 0;
    /* the earliest stop string in the buffer ends the text */
    size_t cut = st->len;
    for (int i = 0; i < st->n; i++) {
        if (!*st->stops[i])
            continue;
        char *p = memmem(st->buf, st->len, st->stops[i], strlen(st->stops[i]));
        if (p && (size_t)(p - st->buf) < cut)
            cut = (size_t)(p - st->buf), st->hit = 1;
    }
    if (st->hit) {
        if (cut)
            out(st->buf, cut, ctx);
        st->len = 0;
        return 1;
    }
    size_t keep = held_back(st), give = st->len - keep;
    if (give) {
        out(st->buf, give, ctx);
        memmove(st->buf, st->buf + give, keep);
        st->len = keep;
    }
    return 0;
}

void model_stopper_flush(model_stopper *st, void (*out)(const char *, size_t, void *), void *ctx)
{
    if (!st->hit && st->len)
        out(st->buf, st->len, ctx);
    st->len = 0;
}

/* ---- the generation loop ---- */

int model_generate(model_state *s, model_sampler *sp, const int *prompt, int n, const model_gen *g,
                   model_gen_stats *st, ogk_error *e)
{
    const model *m = s->m;
    memset(st, 0, sizeof *st);
    st->prompt_tokens = n;
    st->stop = "length";
    if (s->pos + n > s->context)
        return ogk_fail(e, "prompt of %d tokens does not fit the context of %d positions (-c sets it, up to %d)", n,
                        s->context - s->pos, m->c.context_length);
    double t0 = ogk_now();
    s->prof.sampling_ms = 0;
    model_set_seq_end(s, s->pos + n); /* LongRoPE: the prompt is one sequence (model.h) */
    if (model_forward(s, prompt, n, 0, e))
        return -1;
    model_prof_print(s, "prefill");
    st->prefill_ms = (ogk_now() - t0) * 1e3;
    double td = 0;
    while (st->new_tokens < g->max_new) {
        double ts = ogk_now();
        int id = model_sample(sp, s->logits);
        double dt = (ogk_now() - ts) * 1e3;
        st->sampling_ms += dt;
        s->prof.sampling_ms = dt; /* reported with the pass that runs this token */
        if (st->new_tokens == 0)
            st->ttft_ms = (ogk_now() - t0) * 1e3;
        st->new_tokens++;
        if (!g->ignore_eos && model_is_eos(m, id)) {
            st->stop = "eos";
            break;
        }
        if (g->on_token && g->on_token(id, g->ctx)) {
            st->stop = "stop";
            break;
        }
        if (st->new_tokens == g->max_new)
            break;
        if (s->pos + 1 > s->context) {
            st->stop = "context";
            break;
        }
        double tf = ogk_now();
        if (model_forward(s, &id, 1, 0, e))
            return -1;
        model_prof_print(s, "decode");
        s->prof.sampling_ms = 0;
        td += ogk_now() - tf;
    }
    st->decode_ms = td * 1e3;
    return 0;
}
