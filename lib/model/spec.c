/* Greedy speculative decoding with a drafter, and the plain greedy loop it must reproduce (the rule
 * is in model.h). Both start the same way: the prompt minus its last token is prefilled, and that
 * last token is the first one a pass runs. */
#include <string.h>

#include "model.h"

#define SPEC_MAX_K 16

static int is_stop(const model *m, int id, int ignore_eos) { return !ignore_eos && model_is_eos(m, id); }

/* the prompt but its last token into s (nothing for a one-token prompt) */
static int prefill(model_state *s, const int *prompt, int n, ogk_error *e)
{
    model_state_reset(s);
    model_set_seq_end(s, n); /* the whole prompt, its last token read later with the first drafts */
    return n > 1 ? model_forward(s, prompt, n - 1, 0, e) : 0;
}

static int argmax_row(const model_state *s, int row)
{
    int V = s->m->c.vocab_size;
    return model_argmax(s->logits + (size_t)row * V, V);
}

int model_greedy(model_state *T, const int *prompt, int n, int max_new, int ignore_eos, int *out, float *gap,
                 double *decode_ms, ogk_error *e)
{
    const model *m = T->m;
    int V = m->c.vocab_size, got = 0, last = prompt[n - 1];
    if (prefill(T, prompt, n, e))
        return -1;
    double t0 = ogk_now(), untimed = 0;
    while (got < max_new) {
        if (T->pos + 1 > T->context)
            break;
        if (model_forward(T, &last, 1, 0, e))
            return -1;
        model_prof_print(T, "decode");
        int id = model_argmax(T->logits, V);
        if (gap) { /* the top-2 gap is for the report, not part of decoding: its scan is not timed */
            double g0 = ogk_now();
            float top2 = -3.4e38f;
            for (int i = 0; i < V; i++)
                if (i != id && T->logits[i] > top2)
                    top2 = T->logits[i];
            gap[got] = T->logits[id] - top2;
            untimed += ogk_now() - g0;
        }
        if (is_stop(m, id, ignore_eos))
            break;
        out[got++] = last = id;
    }
    *decode_ms = (ogk_now() - t0 - untimed) * 1e3;
    return got;
}

int model_spec_greedy(model_state *T, model_state *D, const int *prompt, int n, int max_new, int k, int ignore_eos,
                      int *out, model_spec_stats *st, ogk_error *e)
{
    const model *m = T->m;
    memset(st, 0, sizeof *st);
    st->stop = "length";
    if (k < 1 || k > SPEC_MAX_K || k + 1 > T->logit_rows)
        return ogk_fail(e, "k = %d: want 1..%d, and a target state with k + 1 logit rows", k, SPEC_MAX_K);
    if (D->m->c.vocab_size != m->c.vocab_size)
        return ogk_fail(e, "the drafter's vocabulary (%d) differs from the target's (%d)", D->m->c.vocab_size,
                        m->c.vocab_size);
    double t0 = ogk_now();
    if (prefill(T, prompt, n, e) || prefill(D, prompt, n, e))
        return -1;
    st->prefill_ms = (ogk_now() - t0) * 1e3;
    /* both read nothing of their logits but argmaxes: the classifier's argmax head (head.c) */
    int t_was = T->head_argmax, d_was = D->head_argmax, rc = -1;
    T->head_argmax = D->head_argmax = 1;
    int last = prompt[n - 1];
    int feed[2] = {last}, nfeed = 1; /* accepted tokens the drafter has not run yet */
    double r0 = ogk_now();
    while (st->new_tokens < max_new) {
        /* no drafts past max_new: the last round offers only what is still wanted */
        int kk = k < max_new - st->new_tokens ? k : max_new - st->new_tokens;
        if (T->pos + kk + 1 > T->context || D->pos + nfeed + kk - 1 > D->context) {
            st->stop = "context";
            break;
        }
        /* draft kk tokens greedily */
        int run[SPEC_MAX_K + 1];
        double td = ogk_now();
        if (model_forward(D, feed, nfeed, 0, e))
            goto fail;
        st->draft_tokens_run += nfeed;
        run[0] = last;
        run[1] = argmax_row(D, 0);
        for (int i = 1; i < kk; i++) {
            if (model_forward(D, &run[i], 1, 0, e))
                goto fail;
            st->draft_tokens_run++;
            run[i + 1] = argmax_row(D, 0);
        }
        double tv = ogk_now();
        st->draft_ms += (tv - td) * 1e3;
        /* verify: kk + 1 rows; row i predicts the token after run[i] */
        if (model_forward(T, run, kk + 1, 1, e))
            goto fail;
        model_prof_print(T, "verify");
        st->verify_ms += (ogk_now() - tv) * 1e3;
        int j = 0;
        while (j < kk && run[j + 1] == argmax_row(T, j))
            j++;
        int next = argmax_row(T, j);
        st->rounds++, st->drafted += kk, st->accepted += j;
        /* the target keeps last + run[1..j]; the drafter ran feed + run[1..kk-1] */
        model_rewind(T, kk - j);
        if (j < kk) {
            model_rewind(D, kk - 1 - j);
            feed[0] = next, nfeed = 1;
        } else {
            feed[0] = run[kk], feed[1] = next, nfeed = 2;
        }
        run[j + 1] = next;
        for (int i = 1; i <= j + 1 && st->new_tokens < max_new; i++) {
            if (is_stop(m, run[i], ignore_eos)) {
                st->stop = "eos";
                goto done;
            }
            out[st->new_tokens++] = run[i];
        }
        last = next;
    }
done:
    st->decode_ms = (ogk_now() - r0) * 1e3;
    rc = 0;
fail:
    T->head_argmax = t_was, D->head_argmax = d_was;
    return rc;
}
