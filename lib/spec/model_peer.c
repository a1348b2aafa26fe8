/* A container as drafter or as the timed target: the greedy drafter with a KV cache kept between
 * rounds, and the timing of a decode step and a verify pass (lib/model's passes, as its live loop runs
 * them). */
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "spec.h"

int spec_model_drafter_init(spec_model_drafter *md, model_state *s, ogk_error *e)
{
    memset(md, 0, sizeof *md);
    md->s = s;
    md->held = malloc(sizeof(int) * (size_t)s->context);
    if (!md->held)
        return ogk_fail(e, "out of memory");
    model_state_reset(s);
    return 0;
}

void spec_model_drafter_free(spec_model_drafter *md)
{
    free(md->held);
    md->held = NULL;
}

static int run(spec_model_drafter *md, const int *t, int n, ogk_error *e)
{
    if (model_forward(md->s, t, n, 0, e))
        return -1;
    memcpy(md->held + md->n_held, t, sizeof(int) * (size_t)n);
    md->n_held += n, md->tokens_run += n;
    return 0;
}

int spec_model_draft(void *self, const int *prefix, int n, int k, int *out, ogk_error *e)
{
    spec_model_drafter *md = self;
    model_state *s = md->s;
    s->head_argmax = 1; /* drafts read argmaxes only: the live loop's drafter runs the same head */
    if (n + k > s->context)
        return ogk_fail(e, "the drafter's context of %d positions cannot hold %d tokens and %d drafts", s->context, n,
                        k);
    /* keep the longest common prefix, but always run at least the prefix's last token (its logits) */
    int common = 0;
    while (common < md->n_held && common < n - 1 && md->held[common] == prefix[common])
        common++;
    model_rewind(s, md->n_held - common);
    md->n_held = common;
    if (common == 0 && n > 1) {
        /* a fresh prompt: the prompt but its last token, then the last, as the live loop */
        model_state_reset(s);
        if (run(md, prefix, n - 1, e))
            return -1;
        common = n - 1;
    }
    if (run(md, prefix + common, n - common, e))
        return -1;
    int V = s->m->c.vocab_size;
    for (int i = 0; i < k; i++) {
        out[i] = model_argmax(s->logits, V);
        if (i + 1 < k && run(md, &out[i], 1, e))
            return -1;
    }
    return k;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int spec_model_time_passes(model_state *s, const int *prompt, int np, int rows, int reps, double *step_ms,
                           double *pass_ms, ogk_error *e)
{
    if (rows < 1 || rows > s->logit_rows || np + rows > s->context || reps < 1 || reps > 64)
        return ogk_fail(e, "cannot time a pass of %d rows after %d tokens (context %d, %d logit rows)", rows, np,
                        s->context, s->logit_rows);
    model_state_reset(s);
    model_set_seq_end(s, np);
    if (np > 1 && model_forward(s, prompt, np - 1, 0, e))
        return -1;
    int toks[SPEC_K_MAX + 1];
    for (int i = 0; i < rows; i++)
        toks[i] = prompt[(np - 1 + i) % np];
    /* a verify pass reads argmaxes only: the classifier's argmax head, as the live loop runs it */
    int was = s->head_argmax;
    s->head_argmax = 1;
    double st[65], pt[65];
    int rc = 0;
    for (int r = 0; r <= reps && !rc; r++) { /* r = 0: warm-up */
        double t0 = ogk_now();
        rc = model_forward(s, toks, 1, 0, e);
        double t1 = ogk_now();
        model_rewind(s, 1);
        rc = rc ? rc : model_forward(s, toks, rows, 1, e);
        double t2 = ogk_now();
        model_rewind(s, rows);
        st[r] = (t1 - t0) * 1e3, pt[r] = (t2 - t1) * 1e3;
    }
    s->head_argmax = was;
    if (rc)
        return -1;
    qsort(st + 1, (size_t)reps, sizeof(double), cmp_d);
    qsort(pt + 1, (size_t)reps, sizeof(double), cmp_d);
    *step_ms = st[1 + reps / 2];
    *pass_ms = pt[1 + reps / 2];
    return 0;
}

int spec_model_prefill(void *self, const int *prompt, int n, ogk_error *e)
{
    spec_model_drafter *md = self;
    md->n_held = 0;
    model_state_reset(md->s);
    return n > 1 ? run(md, prompt, n - 1, e) : 0;
}
