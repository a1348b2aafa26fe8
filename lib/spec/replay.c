/* The replay rule (spec.h): rounds of drafts against a recorded greedy continuation. */
#include <stdlib.h>
#include <string.h>

#include "spec.h"

int spec_replay(const int *prompt, int np, const int *cont, int nc, int k, const spec_drafter *d, spec_result *r,
                ogk_error *e)
{
    memset(r, 0, sizeof *r);
    if (k < 1 || k > SPEC_K_MAX)
        return ogk_fail(e, "k = %d: want 1..%d", k, SPEC_K_MAX);
    if (np < 1 || nc < 0)
        return ogk_fail(e, "a replay needs a prompt of at least one token");
    int *seq = malloc(sizeof(int) * (size_t)(np + nc + 1));
    r->accepts = malloc(sizeof(int) * (size_t)(nc + 1)); /* at most one round per committed token */
    if (!seq || !r->accepts) {
        free(seq);
        spec_result_free(r);
        return ogk_fail(e, "out of memory");
    }
    memcpy(seq, prompt, sizeof(int) * (size_t)np);
    memcpy(seq + np, cont, sizeof(int) * (size_t)nc);
    if (d->prefill) {
        double t0 = ogk_now();
        int rc = d->prefill(d->self, prompt, np, e);
        r->prefill_ms = (ogk_now() - t0) * 1e3;
        if (rc) {
            free(seq);
            spec_result_free(r);
            return -1;
        }
    }
    int c = 0; /* continuation tokens committed */
    while (c < nc) {
        int left = nc - c, kk = k < left ? k : left, drafts[SPEC_K_MAX];
        double t0 = ogk_now();
        int got = d->draft(d->self, seq, np + c, kk, drafts, e);
        r->draft_ms += d->last_ms && got >= 0 ? d->last_ms(d->self) : (ogk_now() - t0) * 1e3;
        if (got < 0) {
            free(seq);
            spec_result_free(r);
            return -1;
        }
        if (got > kk)
            got = kk;
        int j = 0;
        while (j < got && drafts[j] == cont[c + j])
            j++;
        /* the target's own token after the accepted run, when the recording holds one */
        int commit = j < left ? j + 1 : j;
        r->accepts[r->rounds++] = j;
        r->offered += got, r->accepted += j;
        c += commit;
    }
    r->committed = c;
    free(seq);
    return 0;
}

void spec_result_free(spec_result *r)
{
    free(r->accepts);
    r->accepts = NULL;
}

int spec_check_vocab(const spec_rec *r, int drafter_vocab, ogk_error *e)
{
    if (drafter_vocab <= 0)
        return 0;
    if (r->vocab_size > 0 && r->vocab_size != drafter_vocab)
        return ogk_fail(e, "vocabulary mismatch: the recording's target has %d tokens, the drafter %d", r->vocab_size,
                        drafter_vocab);
    for (int i = 0; i < r->n; i++) {
        const spec_prompt *p = &r->p[i];
        for (int j = 0; j < p->n_ids + p->n_cont; j++) {
            int id = j < p->n_ids ? p->ids[j] : p->cont[j - p->n_ids];
            if (id >= drafter_vocab)
                return ogk_fail(e, "vocabulary mismatch: prompt %d (%s) holds token id %d, outside the drafter's %d", i,
                                p->name ? p->name : "unnamed", id, drafter_vocab);
        }
    }
    return 0;
}

int spec_check_prefix(const spec_prompt *p, int index, const int *enc, int ne, ogk_error *e)
{
    int total = p->n_ids + p->n_cont;
    for (int j = 0; j < ne; j++) {
        int want = j < total ? (j < p->n_ids ? p->ids[j] : p->cont[j - p->n_ids]) : -1;
        if (enc[j] != want)
            return ogk_fail(e,
                            "prompt %d (%s): its text does not tokenize, in the drafter's tokenizer, to a prefix of "
                            "prompt + continuation (token %d: %d, recorded %d)",
                            index, p->name ? p->name : "unnamed", j, enc[j], want);
    }
    return 0;
}
