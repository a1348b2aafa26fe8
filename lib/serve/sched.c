/* The scheduler: one thread owns the model. Each turn of its loop it admits queued jobs into free
 * slots and runs one model_forward_batch pass: a row for every slot that has a token to feed (and its
 * drafts) and, in i8 mode, prompt rows of the slots still reading their prompt (round robin, up to
 * SERVE_PASS_ROWS rows in all; only a prompt's last row runs the classifier), then samples each slot's
 * next token. In f32 mode a prompt chunk (at most MODEL_F32_CHUNK rows of one slot) runs as a pass of its
 * own before the decode pass. Either way the others keep decoding while prompts are read, and a burst
 * of short prompts is read together in i8 mode.
 *
 * Prefix cache: a slot remembers the ids whose KV it holds. A new job goes to the free slot sharing
 * the longest prefix with its prompt and starts after it (at least its last prompt token is run, for
 * the logits). Reuse is exact: in i8 mode any reused position is bit-identical to a recomputation
 * (model.h); in f32 mode only positions that an earlier prefill computed in whole chunks aligned at
 * 0 are reused, and the rest is prefilled in chunks aligned the same way, which is what a fresh
 * model_forward over the prompt computes. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve_int.h"

enum { SLOT_FREE, SLOT_PREFILL, SLOT_DECODE };

struct serve_slot {
    model_state *s;
    model_state *d; /* the drafter's cache: ids hist[0..d->pos) */
    int *dfeed;     /* scratch: what the drafter has not run yet */
    serve_job *j;
    int phase;
    int done; /* prompt positions in the cache */
    int next; /* the token the next decode step feeds */
    model_sampler sp;
    tok_stream *ts;
    model_stopper st;
    int gen;        /* tokens sampled */
    int *hist;      /* ids whose KV the cache holds (s->pos of them) */
    int cap_hist;
    int n_full;     /* of hist: positions computed by whole prefill chunks aligned at 0 (f32 reuse) */
    double t_prompt_done;
    uint64_t used; /* when it last took a job: among equal prefixes the least recently used goes */
    /* reshaped logits (jobs with JSON mode, biases or penalties): the row sampled from, the JSON mode's
     * allowed tokens and automaton, the answer's tokens seen (penalties) */
    float *shaped;
    uint8_t *allowed, *seen;
    jg_gate jg;
};

/* ---------------------------------------------------------------- jobs */

serve_job *serve_job_new(void)
{
    serve_job *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    pthread_mutex_init(&j->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&j->cv, &ca);
    pthread_condattr_destroy(&ca);
    j->refs = 1, j->top_n = -1;
    return j;
}

void serve_job_unref(serve_job *j)
{
    if (!j)
        return;
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left)
        return;
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    for (int i = 0; i < j->n_stops; i++)
        free(j->stops[i]);
    jg_prog_free(j->prog);
    free(j->stops), free(j->bias_ids), free(j->bias), free(j->prompt), free(j->ids), free(j->tok_at), free(j->lps), free(j->top_ids), free(j->top_lps), free(j->text);
    free(j->p_lps), free(j->p_top_ids), free(j->p_top_lps);
    free(j);
}

static void job_text(const char *s, size_t n, void *arg);

/* ---------------------------------------------------------------- setup */

int serve_sched_init(serve_sched *S, const model *m, tok *t, pthread_mutex_t *tok_mu, int n_slots, int queue,
                     int context, int mode, int threads, int prefix_cache, ogk_error *e)
{
    memset(S, 0, sizeof *S);
    S->m = m, S->t = t, S->tok_mu = tok_mu, S->n_slots = n_slots, S->prefix_cache = prefix_cache;
    pthread_mutex_init(&S->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&S->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (n_slots < 1 || n_slots > SERVE_PASS_ROWS)
        return ogk_fail(e, "--parallel %d: want 1..%d slots", n_slots, SERVE_PASS_ROWS);
    S->q_cap = queue > 0 ? queue : 1;
    S->q_size = S->q_cap + n_slots;
    if (!(S->queue = calloc((size_t)S->q_size, sizeof *S->queue)) ||
        !(S->slots = calloc((size_t)n_slots, sizeof *S->slots)))
        return ogk_fail(e, "out of memory");
    if (!(S->pool = kern_pool_new(threads)))
        return ogk_fail(e, "cannot start %d threads", threads);
    /* the batch's activation rows: a state whose cache is never used (one position) */
    if (!(S->work = model_state_new_shared(m, 1, 1, mode, S->pool, e)))
        return -1;
    model_prepare_head(S->work); /* greedy passes of several rows: not on the first request's time */
    for (int i = 0; i < n_slots; i++) {
        serve_slot *sl = &S->slots[i];
        if (!(sl->s = model_state_new_shared(m, context, SERVE_SCORE_ROWS, mode, S->pool, e)))
            return -1;
        sl->cap_hist = sl->s->context;
        if (!(sl->hist = malloc((size_t)sl->cap_hist * sizeof *sl->hist)))
            return ogk_fail(e, "out of memory");
    }
    S->context = S->slots[0].s->context;
    return 0;
}

int serve_sched_drafter(serve_sched *S, const model *dm, int k, ogk_error *e)
{
    if (dm->c.vocab_size != S->m->c.vocab_size)
        return ogk_fail(e, "the drafter's vocabulary (%d) differs from the target's (%d)", dm->c.vocab_size,
                        S->m->c.vocab_size);
    if (k < 1 || k + 1 > MODEL_VERIFY_MAX || S->n_slots * (k + 1) > SERVE_PASS_ROWS)
        return ogk_fail(e, "--draft-max %d: want 1..%d, and --parallel x (draft-max + 1) <= %d", k,
                        MODEL_VERIFY_MAX - 1, SERVE_PASS_ROWS);
    S->dm = dm, S->draft_max = k;
    for (int i = 0; i < S->n_slots; i++) {
        serve_slot *sl = &S->slots[i];
        int rows = k + 1 > SERVE_SCORE_ROWS ? k + 1 : SERVE_SCORE_ROWS;
        model_state *t = model_state_new_shared(S->m, S->context, rows, sl->s->mode, S->pool, e);
        if (!t)
            return -1;
        model_state_free(sl->s);
        sl->s = t;
        if (!(sl->d = model_state_new_shared(dm, S->context, 1, sl->s->mode, S->pool, e)))
            return -1;
        if (!(sl->dfeed = malloc(((size_t)S->context + 1) * sizeof *sl->dfeed)))
            return ogk_fail(e, "out of memory");
    }
    return 0;
}

void serve_sched_free(serve_sched *S)
{
    for (int i = 0; S->slots && i < S->n_slots; i++) {
        model_state_free(S->slots[i].d);
        free(S->slots[i].dfeed);
        model_state_free(S->slots[i].s);
        free(S->slots[i].hist);
        free(S->slots[i].shaped), free(S->slots[i].allowed), free(S->slots[i].seen);
    }
    jg_vocab_free(S->jg);
    free(S->slots);
    model_state_free(S->work);
    kern_pool_free(S->pool);
    for (int i = 0; i < S->q_len; i++)
        serve_job_unref(S->queue[(S->q_head + i) % S->q_size]);
    free(S->queue);
    pthread_mutex_destroy(&S->mu);
    pthread_cond_destroy(&S->cv);
    memset(S, 0, sizeof *S);
}

/* a queued job that will not run: done, failed (why), the queue's reference dropped */
static void drop_queued(serve_job *j, const char *why, int status)
{
    pthread_mutex_lock(&j->mu);
    j->done = j->failed = 1, j->fail_status = status;
    snprintf(j->err, sizeof j->err, "%s", why);
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    serve_job_unref(j);
}

/* under S->mu: the queue without the jobs whose clients left (anywhere in it, so that they do not hold
 * places that others are refused for), the rest in order */
static void purge_cancelled(serve_sched *S)
{
    int kept = 0;
    for (int i = 0; i < S->q_len; i++) {
        serve_job *j = S->queue[(S->q_head + i) % S->q_size];
        if (__atomic_load_n(&j->cancel, __ATOMIC_RELAXED))
            drop_queued(j, "cancelled", 0);
        else
            S->queue[(S->q_head + kept++) % S->q_size] = j;
    }
    S->q_len = kept;
}

int serve_sched_submit(serve_sched *S, serve_job *j)
{
    pthread_mutex_lock(&S->mu);
    /* room: the queue's, and a place for each slot that is free but has not taken its next job yet (the
     * scheduler thread admits them between steps) */
    int room = S->q_cap + S->n_slots - S->taken;
    if (S->q_len >= room)
        purge_cancelled(S);
    if (S->stopping || S->q_len >= room) {
        int rc = S->stopping ? -2 : -1;
        pthread_mutex_unlock(&S->mu);
        return rc;
    }
    pthread_mutex_lock(&j->mu);
    j->refs++;
    j->t_queued = ogk_now();
    pthread_mutex_unlock(&j->mu);
    S->queue[(S->q_head + S->q_len++) % S->q_size] = j;
    pthread_cond_signal(&S->cv);
    pthread_mutex_unlock(&S->mu);
    return 0;
}

void serve_sched_wake(serve_sched *S)
{
    pthread_mutex_lock(&S->mu);
    pthread_cond_signal(&S->cv);
    pthread_mutex_unlock(&S->mu);
}

/* ---------------------------------------------------------------- a job's end */

/* the failure of a job cut or refused at shutdown (503 shutting_down, not a generation that failed) */
static const char SHUTTING_DOWN[] = "the server is shutting down";

/* the job is over (done, failed or cancelled): tell its HTTP side, account it, free the slot */
static void finish(serve_sched *S, serve_slot *sl, const char *reason, const char *failure)
{
    serve_job *j = sl->j;
    pthread_mutex_lock(&S->mu); /* its place counts as free before its client hears (and may ask again) */
    S->taken--;
    pthread_mutex_unlock(&S->mu);
    if (!failure && !sl->st.hit) { /* what the decoder and the stop-string filter still hold */
        ogk_error e;
        size_t n = 0;
        pthread_mutex_lock(S->tok_mu);
        const char *tail = tok_stream_flush(sl->ts, &n, &e);
        pthread_mutex_unlock(S->tok_mu);
        if (tail && n) {
            pthread_mutex_lock(&j->mu);
            j->decoded += n;
            pthread_mutex_unlock(&j->mu);
            model_stopper_feed(&sl->st, tail, n, job_text, j);
        }
        model_stopper_flush(&sl->st, job_text, j);
    }
    double now = ogk_now();
    pthread_mutex_lock(&j->mu);
    j->finish = reason;
    if (failure) {
        j->failed = 1;
        snprintf(j->err, sizeof j->err, "%s", failure);
        j->fail_status = failure == SHUTTING_DOWN ? 503 : 0;
    }
    if (!j->t_first)
        j->t_first = now;
    j->t_end = now;
    j->done = 1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    pthread_mutex_lock(&S->mu);
    S->requests++;
    S->prompt_tokens += (uint64_t)(sl->done - j->cache_n);
    S->cache_tokens += (uint64_t)j->cache_n;
    S->gen_tokens += (uint64_t)j->n_eval;
    if (sl->t_prompt_done > 0) {
        S->prompt_s += sl->t_prompt_done - j->t_start;
        S->gen_s += now - sl->t_prompt_done;
    }
    pthread_mutex_unlock(&S->mu);
    model_sampler_free(&sl->sp);
    pthread_mutex_lock(S->tok_mu);
    tok_stream_free(sl->ts);
    pthread_mutex_unlock(S->tok_mu);
    sl->ts = NULL;
    model_stopper_free(&sl->st);
    serve_job_unref(j);
    sl->j = NULL, sl->phase = SLOT_FREE;
}

/* ---------------------------------------------------------------- admission */

/* positions of slot sl's cache that a prompt can reuse */
static int reusable(const serve_sched *S, const serve_slot *sl, const int *p, int n)
{
    if (!S->prefix_cache)
        return 0;
    /* LongRoPE: a prompt longer than rope_long_after is rotated with the long caches throughout, a shorter
     * one with the short ones; the cache holds the last prompt's (s->seq_end) */
    int T = S->m->c.rope_long_after;
    if (T && (sl->s->seq_end > T) != (n > T))
        return 0;
    int lim = sl->s->pos < n - 1 ? sl->s->pos : n - 1, c = 0;
    while (c < lim && sl->hist[c] == p[c])
        c++;
    if (sl->s->mode != KERN_I8) {
        c = c < sl->n_full ? c : sl->n_full;
        c -= c % MODEL_F32_CHUNK;
    }
    return c;
}

/* ---------------------------------------------------------------- reshaped logits */

static int shaped_job(const serve_job *j) { return j->json || j->n_bias || j->presence != 0 || j->frequency != 0; }

/* the slot's buffers, and in JSON mode the vocabulary's pieces (built at the first such job) */
static int shape_init(serve_sched *S, serve_slot *sl)
{
    size_t V = (size_t)S->m->c.vocab_size;
    if ((!sl->shaped && !(sl->shaped = malloc(V * sizeof *sl->shaped))) ||
        (!sl->allowed && !(sl->allowed = malloc(V))) || (!sl->seen && !(sl->seen = calloc(V, 1))))
        return -1;
    if (sl->j->json && !S->jg) {
        ogk_error e;
        pthread_mutex_lock(S->tok_mu);
        S->jg = jg_vocab_new(S->t, S->m->c.vocab_size, &e);
        pthread_mutex_unlock(S->tok_mu);
        if (!S->jg)
            return -1;
    }
    return 0;
}

/* the row the job samples from: logit_bias added, the penalties of the answer's tokens so far subtracted
 * (presence once per token, frequency per occurrence), and in JSON mode every token that would not keep
 * the answer a prefix of a JSON object at -inf. NULL: no token may follow (JSON mode; not with a
 * vocabulary that holds every byte). */
static const float *shape(serve_sched *S, serve_slot *sl, const float *logits)
{
    const serve_job *j = sl->j;
    int V = S->m->c.vocab_size;
    float *x = sl->shaped;
    memcpy(x, logits, (size_t)V * sizeof *x);
    for (int i = 0; i < j->n_bias; i++)
        x[j->bias_ids[i]] += j->bias[i];
    if (j->presence != 0 || j->frequency != 0) {
        for (int i = 0; i < j->n_ids; i++) {
            int id = j->ids[i];
            if (!sl->seen[id])
                sl->seen[id] = 1, x[id] -= j->presence;
            x[id] -= j->frequency;
        }
        for (int i = 0; i < j->n_ids; i++)
            sl->seen[j->ids[i]] = 0;
    }
    if (j->json) {
        if (jg_gate_allowed(S->jg, &sl->jg, sl->allowed) <= 0)
            return NULL;
        for (int i = 0; i < S->m->c.n_eos; i++) /* an end token with text of its own would end it too early */
            if (S->m->c.eos_ids[i] >= 0 && S->m->c.eos_ids[i] < V)
                sl->allowed[S->m->c.eos_ids[i]] = 0;
        int left = 0;
        for (int id = 0; id < V; id++) {
            if (!sl->allowed[id])
                x[id] = -INFINITY;
            else
                left++;
        }
        if (!left)
            return NULL;
    }
    return x;
}

static void start_job(serve_sched *S, serve_slot *sl, serve_job *j)
{
    int r = j->score ? 0 : reusable(S, sl, j->prompt, j->n_prompt); /* scored: every prompt row's logits */
    sl->j = j, sl->phase = SLOT_PREFILL, sl->done = r, sl->gen = 0, sl->t_prompt_done = 0;
    sl->s->pos = r;
    model_set_seq_end(sl->s, j->n_prompt); /* the prompt is one sequence however its passes cut it */
    if (sl->d && sl->d->pos > r)
        sl->d->pos = r;
    if (sl->d)
        model_set_seq_end(sl->d, j->n_prompt);
    if (sl->n_full > r)
        sl->n_full = r;
    model_stopper_init(&sl->st, j->stops, j->n_stops);
    pthread_mutex_lock(S->tok_mu);
    sl->ts = tok_stream_new(S->t, TOK_STREAM_SKIP_SPECIAL | TOK_STREAM_SKIP_UNKNOWN);
    pthread_mutex_unlock(S->tok_mu);
    int V = model_sample_vocab(S->m->c.vocab_size, tok_vocab_size(S->t), j->temperature);
    int ok = sl->ts && !model_sampler_init(&sl->sp, V, j->temperature, j->top_k, j->top_p, j->seed);
    ok = ok && (!shaped_job(j) || !shape_init(S, sl));
    jg_gate_init(&sl->jg, j->prog);
    /* greedy without logprobs reads each logits row's argmax only: the classifier's argmax head (lib/model);
     * reshaped logits need the whole row */
    sl->s->head_argmax = j->temperature <= 0 && j->top_n < 0 && !shaped_job(j);
    if (sl->d)
        sl->d->head_argmax = 1; /* the drafter only drafts greedily */
    pthread_mutex_lock(&j->mu);
    j->t_start = ogk_now();
    j->cache_n = r;
    pthread_mutex_unlock(&j->mu);
    if (!ok)
        finish(S, sl, "stop", "out of memory");
}

/* under S->mu: queued jobs into free slots (the best prefix match first), cancelled ones dropped */
static void admit(serve_sched *S)
{
    purge_cancelled(S);
    while (S->q_len) {
        serve_job *j = S->queue[S->q_head];
        if (__atomic_load_n(&j->cancel, __ATOMIC_RELAXED)) { /* left while an earlier one was started */
            S->q_head = (S->q_head + 1) % S->q_size, S->q_len--;
            drop_queued(j, "cancelled", 0);
            continue;
        }
        serve_slot *best = NULL;
        int best_r = -1;
        for (int i = 0; i < S->n_slots; i++) {
            serve_slot *sl = &S->slots[i];
            if (sl->j)
                continue;
            int r = reusable(S, sl, j->prompt, j->n_prompt);
            if (r > best_r || (r == best_r && sl->used < best->used))
                best = sl, best_r = r;
        }
        if (!best)
            return;
        S->q_head = (S->q_head + 1) % S->q_size, S->q_len--;
        best->used = ++S->admitted;
        S->taken++;
        pthread_mutex_unlock(&S->mu);
        start_job(S, best, j);
        pthread_mutex_lock(&S->mu);
    }
}

/* ---------------------------------------------------------------- tokens out */

static void job_text(const char *s, size_t n, void *arg)
{
    serve_job *j = arg;
    pthread_mutex_lock(&j->mu);
    if (j->text_len + n + 1 > j->text_cap) {
        size_t cap = (j->text_len + n + 1) * 2;
        char *t = realloc(j->text, cap);
        if (!t) {
            pthread_mutex_unlock(&j->mu);
            return;
        }
        j->text = t, j->text_cap = cap;
    }
    memcpy(j->text + j->text_len, s, n);
    j->text_len += n;
    j->text[j->text_len] = 0;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

/* log-softmax of the raw logits: the chosen id's and the top_n largest (ties: lower id first) */
static void logprobs(const float *x, int V, int id, int top_n, float *lp, int *top_ids, float *top_lps)
{
    double lse = model_logsumexp(x, V);
    *lp = (float)(x[id] - lse);
    int n = top_n > 0 ? model_top_ids(x, V, top_n, top_ids) : 0;
    for (int i = 0; i < n; i++)
        top_lps[i] = (float)(x[top_ids[i]] - lse);
}

static int job_grow(serve_job *j, int top)
{
    if (j->n_ids < j->cap_ids)
        return 0;
    int cap = j->cap_ids * 2 + 16;
    int *ids = realloc(j->ids, (size_t)cap * sizeof *ids);
    if (!ids)
        return -1;
    j->ids = ids;
    size_t *at = realloc(j->tok_at, (size_t)cap * sizeof *at);
    if (!at)
        return -1;
    j->tok_at = at;
    if (j->top_n >= 0) {
        float *lps = realloc(j->lps, (size_t)cap * sizeof *lps);
        if (!lps)
            return -1;
        j->lps = lps;
        if (top) {
            int *ti = realloc(j->top_ids, (size_t)cap * top * sizeof *ti);
            if (!ti)
                return -1;
            j->top_ids = ti;
            float *tl = realloc(j->top_lps, (size_t)cap * top * sizeof *tl);
            if (!tl)
                return -1;
            j->top_lps = tl;
        }
    }
    j->cap_ids = cap;
    return 0;
}

/* a special token whose text is one of the job's stop strings ends the answer as an end token does */
static int special_stop(serve_sched *S, const serve_slot *sl, int id)
{
    if (!sl->st.n)
        return 0;
    size_t n = 0;
    pthread_mutex_lock(S->tok_mu);
    const char *s = tok_is_special(S->t, id) ? tok_id_to_token(S->t, id, &n) : NULL;
    int hit = model_stopper_special(&sl->st, s, n);
    pthread_mutex_unlock(S->tok_mu);
    return hit;
}

/* sample the slot's next token from logits (the row of the token at position at - 1) and hand it to the
 * job; decides whether it goes on (the same rules, in the same order, as model_generate: it could be fed at
 * position at). 1: it goes on, 0: the job is over. */
static int next_token(serve_sched *S, serve_slot *sl, const float *logits, int at)
{
    serve_job *j = sl->j;
    const model *m = S->m;
    if (model_logits_bad(logits, m->c.vocab_size) >= 0) {
        finish(S, sl, "stop", "the model's logits are not finite: its weights hold a NaN or an infinity, or the activations overflow");
        return 0;
    }
    const float *x = shaped_job(j) ? shape(S, sl, logits) : logits;
    if (!x) {
        finish(S, sl, "stop", !j->prog ? "JSON mode: no token of the vocabulary continues the answer as JSON"
                              : j->prog->nseg && j->prog->seg[0].kind == JG_SCHEMA
                                  ? "json_schema: no token of the vocabulary continues the answer within its schema"
                                  : "forced tool call: no token of the vocabulary continues the call");
        return 0;
    }
    int id = model_sample(&sl->sp, x);
    sl->gen++;
    pthread_mutex_lock(&j->mu);
    j->n_eval++;
    if (!j->t_first)
        j->t_first = ogk_now();
    pthread_mutex_unlock(&j->mu);
    if ((!j->ignore_eos && model_is_eos(m, id)) || special_stop(S, sl, id)) {
        finish(S, sl, "stop", NULL);
        return 0;
    }
    int top = j->top_n > 0 ? j->top_n : 0;
    float lp = 0, tl[SERVE_MAX_TOP];
    int ti[SERVE_MAX_TOP];
    if (j->top_n >= 0)
        logprobs(logits, m->c.vocab_size, id, top, &lp, ti, tl);
    pthread_mutex_lock(&j->mu);
    if (job_grow(j, top)) {
        pthread_mutex_unlock(&j->mu);
        finish(S, sl, "stop", "out of memory");
        return 0;
    }
    if (j->top_n >= 0) {
        j->lps[j->n_ids] = lp;
        if (top) { /* without top_logprobs the arrays are not there (memcpy of 0 bytes to NULL is undefined) */
            memcpy(j->top_ids + (size_t)j->n_ids * top, ti, (size_t)top * sizeof *ti);
            memcpy(j->top_lps + (size_t)j->n_ids * top, tl, (size_t)top * sizeof *tl);
        }
    }
    j->tok_at[j->n_ids] = j->decoded;
    j->ids[j->n_ids++] = id;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    ogk_error e;
    size_t n = 0;
    pthread_mutex_lock(S->tok_mu);
    const char *piece = tok_stream_put(sl->ts, id, &n, &e);
    pthread_mutex_unlock(S->tok_mu);
    if (!piece) {
        finish(S, sl, "stop", e.msg);
        return 0;
    }
    pthread_mutex_lock(&j->mu);
    j->decoded += n;
    pthread_mutex_unlock(&j->mu);
    if (model_stopper_feed(&sl->st, piece, n, job_text, j)) {
        finish(S, sl, "stop", NULL);
        return 0;
    }
    if (j->json) { /* the token's piece was allowed, so the automaton takes it; a complete object ends the answer */
        size_t pn;
        const char *p = jg_piece(S->jg, id, &pn);
        jg_gate_feed_bytes(&sl->jg, p, pn);
        if (jg_gate_done(&sl->jg)) {
            finish(S, sl, "stop", NULL);
            return 0;
        }
    }
    if (sl->gen >= j->max_tokens || at + 1 > sl->s->context) {
        finish(S, sl, "length", NULL);
        return 0;
    }
    sl->next = id, sl->phase = SLOT_DECODE;
    return 1;
}

/* ---------------------------------------------------------------- the loop */

/* n prompt rows of sl are in its cache: its history, and the first token once the prompt is done (from
 * last, the logits of the prompt's last row; none with max_tokens 0: the prompt scored alone) */
static void prompt_ran(serve_sched *S, serve_slot *sl, int n, const float *last)
{
    serve_job *j = sl->j;
    memcpy(sl->hist + sl->done, j->prompt + sl->done, (size_t)n * sizeof *sl->hist);
    if (sl->n_full == sl->done && n == MODEL_F32_CHUNK && sl->done % MODEL_F32_CHUNK == 0)
        sl->n_full += n;
    sl->done += n;
    if (sl->done == j->n_prompt) {
        sl->t_prompt_done = ogk_now();
        if (j->max_tokens > 0)
            next_token(S, sl, last, sl->s->pos);
        else
            finish(S, sl, "length", NULL);
    }
}

/* f32 mode: one chunk of sl's prompt as a pass of its own (model_forward: the M = rows kernels, whose
 * fp32 sums a prefix-cache reuse must meet again, see the top). A scored prompt (echo with logprobs, either
 * mode): SERVE_SCORE_ROWS rows with the logits of each, row i giving prompt token i + 1 its logprob. */
static void prefill_chunk(serve_sched *S, serve_slot *sl)
{
    _Static_assert(SERVE_SCORE_ROWS <= MODEL_CHUNK, "a scoring pass's rows all get logits");
    serve_job *j = sl->j;
    int n = j->n_prompt - sl->done, cap = j->score ? SERVE_SCORE_ROWS : MODEL_F32_CHUNK;
    n = n < cap ? n : cap;
    ogk_error e;
    if (model_forward(sl->s, j->prompt + sl->done, n, j->score, &e)) {
        finish(S, sl, "stop", e.msg);
        return;
    }
    size_t V = (size_t)S->m->c.vocab_size;
    int top = j->top_n > 0 ? j->top_n : 0;
    for (int r = 0; j->score && r < n; r++) {
        int p = sl->done + r + 1; /* the prompt token this row's logits predict */
        if (p < j->n_prompt) /* read only once the prompt is done (a first token, or the end): no lock */
            logprobs(sl->s->logits + (size_t)r * V, (int)V, j->prompt[p], top, &j->p_lps[p],
                     j->p_top_ids + (size_t)p * top, j->p_top_lps + (size_t)p * top);
    }
    prompt_ran(S, sl, n, sl->s->logits + (j->score ? (size_t)(n - 1) * V : 0));
}

/* the drafter catches up with the slot's cache and the token to feed, then proposes up to k tokens
 * greedily into run[1..]; returns how many (0: decode this slot plainly) */
static int draft(serve_sched *S, serve_slot *sl, int *run)
{
    serve_job *j = sl->j;
    model_state *T = sl->s, *D = sl->d;
    int k = S->draft_max, left = j->max_tokens - sl->gen; /* tokens this job may still produce */
    if (!D || j->temperature > 0 || left < 2 || shaped_job(j)) /* drafts are checked against the raw argmax */
        return 0;
    k = k < left - 1 ? k : left - 1;
    if (T->pos + k + 1 > T->context)
        k = T->context - T->pos - 1;
    if (k < 1)
        return 0;
    int n = 0;
    for (int p = D->pos; p < T->pos; p++)
        sl->dfeed[n++] = sl->hist[p];
    sl->dfeed[n++] = sl->next;
    ogk_error e;
    if (model_forward(D, sl->dfeed, n, 0, &e))
        return 0;
    run[0] = sl->next;
    run[1] = model_argmax(D->logits, D->m->c.vocab_size);
    for (int i = 1; i < k; i++) {
        if (model_forward(D, &run[i], 1, 0, &e))
            return i - 1 > 0 ? i - 1 : 0; /* cannot happen: the context was checked */
        run[i + 1] = model_argmax(D->logits, D->m->c.vocab_size);
    }
    return k;
}

/* One pass: a row for every decoding slot (and its drafts), and, when prompts is set (i8 mode, where a
 * row's result does not depend on its neighbours), prompt rows of the slots still reading theirs, round
 * robin from *rr, up to SERVE_PASS_ROWS rows in all: a burst of new requests is prefilled together instead
 * of one prompt per step, beside the decode rows (one weight stream for all of them). */
static void decode_step(serve_sched *S, int prompts, int *rr)
{
    _Static_assert(SERVE_PASS_ROWS <= MODEL_CHUNK, "a batched pass is one model_forward_batch");
    model_state *states[SERVE_PASS_ROWS];
    int tokens[SERVE_PASS_ROWS], n = 0;
    unsigned char want[SERVE_PASS_ROWS];
    int nk[SERVE_PASS_ROWS]; /* per slot: drafts in this pass (0: one plain row; -1: no decode row) */
    int np[SERVE_PASS_ROWS]; /* per slot: prompt rows in this pass */
    int run[SERVE_PASS_ROWS][MODEL_VERIFY_MAX + 1];
    for (int i = 0; i < S->n_slots; i++) {
        serve_slot *sl = &S->slots[i];
        nk[i] = -1, np[i] = 0;
        if (!sl->j || sl->phase != SLOT_DECODE)
            continue;
        nk[i] = draft(S, sl, run[i]);
        want[n] = 1, states[n] = sl->s, tokens[n++] = sl->next;
        for (int r = 1; r <= nk[i]; r++)
            want[n] = 1, states[n] = sl->s, tokens[n++] = run[i][r];
    }
    int n_dec = n, start = *rr;
    for (int k = 0; prompts && k < S->n_slots && n < SERVE_PASS_ROWS; k++) {
        int i = (start + k) % S->n_slots;
        serve_slot *sl = &S->slots[i];
        if (!sl->j || sl->phase != SLOT_PREFILL || sl->j->score) /* scored prompts: prefill_chunk */
            continue;
        int left = sl->j->n_prompt - sl->done, rows = left < SERVE_PASS_ROWS - n ? left : SERVE_PASS_ROWS - n;
        for (int r = 0; r < rows; r++)
            want[n] = r == left - 1, states[n] = sl->s, tokens[n++] = sl->j->prompt[sl->done + r];
        np[i] = rows;
        *rr = i + 1;
    }
    if (!n)
        return;
    ogk_error e;
    if (model_forward_batch(S->work, states, tokens, n, want, &e)) {
        for (int i = 0; i < S->n_slots; i++)
            if (nk[i] >= 0 || np[i])
                finish(S, &S->slots[i], "stop", e.msg);
        return;
    }
    pthread_mutex_lock(&S->mu);
    S->steps += n_dec > 0, S->step_rows += (uint64_t)n_dec; /* decode rows: the metric is the mean batch */
    pthread_mutex_unlock(&S->mu);
    int V = S->m->c.vocab_size;
    for (int i = 0; i < S->n_slots; i++) {
        serve_slot *sl = &S->slots[i];
        if (np[i])
            prompt_ran(S, sl, np[i], sl->s->logits);
        if (nk[i] < 0)
            continue;
        int k = nk[i], P = sl->s->pos - (k + 1); /* the position `next` went to */
        if (!k) {
            sl->hist[P] = sl->next;
            next_token(S, sl, sl->s->logits, sl->s->pos);
            continue;
        }
        /* the longest run of drafts the target agrees with; both caches keep only what was accepted */
        int a = 0;
        while (a < k && run[i][a + 1] == model_argmax(sl->s->logits + (size_t)a * V, V))
            a++;
        model_rewind(sl->s, k - a);
        if (sl->d->pos > sl->s->pos)
            model_rewind(sl->d, sl->d->pos - sl->s->pos);
        for (int r = 0; r <= a; r++)
            sl->hist[P + r] = run[i][r];
        pthread_mutex_lock(&sl->j->mu);
        sl->j->draft_n += k, sl->j->draft_accepted += a;
        pthread_mutex_unlock(&sl->j->mu);
        for (int r = 0; r <= a; r++) /* an accepted draft's row: its token is in the cache already */
            if (!next_token(S, sl, sl->s->logits + (size_t)r * V, P + r + 1))
                break;
    }
}

static void *sched_main(void *arg)
{
    serve_sched *S = arg;
    int rr = 0;
    double deadline = 0;
    for (;;) {
        pthread_mutex_lock(&S->mu);
        if (!S->stopping)
            admit(S);
        int active = 0;
        long kv = 0;
        for (int i = 0; i < S->n_slots; i++) {
            active += S->slots[i].j != NULL;
            kv += S->slots[i].s->pos;
        }
        S->kv_used = kv;
        if (S->stopping && !deadline)
            deadline = ogk_now() + (S->stopping > 1 ? S->stopping - 1 : 0);
        if (!active) {
            if (S->stopping) {
                pthread_mutex_unlock(&S->mu);
                break;
            }
            ogk_cond_wait_ms(&S->cv, &S->mu, 100);
            pthread_mutex_unlock(&S->mu);
            continue;
        }
        pthread_mutex_unlock(&S->mu);
        /* clients that went away (and, past the shutdown grace, everyone) free their slots now */
        int overdue = deadline && (ogk_now() > deadline || (S->hurry && *S->hurry > 1));
        for (int i = 0; i < S->n_slots; i++) {
            serve_slot *sl = &S->slots[i];
            if (sl->j && (overdue || __atomic_load_n(&sl->j->cancel, __ATOMIC_RELAXED)))
                finish(S, sl, "stop", overdue ? SHUTTING_DOWN : "cancelled");
        }
        /* i8: prompt rows go into the decode pass; f32 (and scored prompts in either mode): one prefill
         * chunk of its own, round robin over the slots still reading their prompt */
        int prompts = S->work->mode == KERN_I8;
        for (int k = 0; k < S->n_slots; k++) {
            serve_slot *sl = &S->slots[(rr + k) % S->n_slots];
            if (sl->j && sl->phase == SLOT_PREFILL && (!prompts || sl->j->score)) {
                prefill_chunk(S, sl);
                rr = (int)(sl - S->slots) + 1;
                break;
            }
        }
        decode_step(S, prompts, &rr);
    }
    return NULL;
}

int serve_sched_start(serve_sched *S, ogk_error *e)
{
    if (pthread_create(&S->th, NULL, sched_main, S))
        return ogk_fail(e, "cannot start the scheduler thread");
    S->running = 1;
    return 0;
}

void serve_sched_stop(serve_sched *S, double grace_s)
{
    pthread_mutex_lock(&S->mu);
    S->stopping = 1 + (int)ceil(grace_s);
    while (S->q_len) { /* never started: refused */
        serve_job *j = S->queue[S->q_head];
        S->q_head = (S->q_head + 1) % S->q_size, S->q_len--;
        drop_queued(j, SHUTTING_DOWN, 503);
    }
    pthread_cond_signal(&S->cv);
    pthread_mutex_unlock(&S->mu);
    if (S->running)
        pthread_join(S->th, NULL);
    S->running = 0;
}
