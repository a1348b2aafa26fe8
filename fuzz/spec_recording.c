/* Fuzz target: the input is a recording (spec-recording.5). spec_rec_parse either refuses it with a
 * named error or returns prompts whose every field a replay reads is consistent: non-empty prompt ids,
 * ids inside the stated vocabulary, gaps (when present) one per continuation token, a known stop; a
 * replay with a drafter that proposes the continuation shifted by one runs over every prompt. */
#include "fuzz.h"
#include "spec/spec.h"

static int shifted(void *self, const int *prefix, int n, int k, int *out, ogk_error *e)
{
    (void)self, (void)e;
    for (int i = 0; i < k; i++)
        out[i] = prefix[n - 1] + i;
    return k;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ogk_error e = {{0}};
    spec_rec *r = spec_rec_parse((const char *)data, size, "fuzz", &e);
    if (!r) {
        FUZZ_CHECK(e.msg[0] != 0);
        return 0;
    }
    FUZZ_CHECK(r->n > 0 && r->version >= 1 && r->version <= SPEC_REC_VERSION);
    spec_drafter d = {shifted, NULL, NULL, NULL};
    for (int i = 0; i < r->n; i++) {
        const spec_prompt *p = &r->p[i];
        FUZZ_CHECK(p->n_ids > 0 && p->n_cont >= 0 && p->stop);
        for (int j = 0; j < p->n_ids; j++)
            FUZZ_CHECK(p->ids[j] >= 0 && (!r->vocab_size || p->ids[j] < r->vocab_size));
        for (int j = 0; j < p->n_cont; j++)
            FUZZ_CHECK(p->cont[j] >= 0 && (!r->vocab_size || p->cont[j] < r->vocab_size));
        spec_result sr;
        if (p->n_cont <= 4096 && !spec_replay(p->ids, p->n_ids, p->cont, p->n_cont, 3, &d, &sr, &e)) {
            FUZZ_CHECK(sr.committed == p->n_cont && sr.accepted <= sr.offered && sr.rounds <= p->n_cont);
            spec_result_free(&sr);
        }
        (void)spec_check_vocab(r, r->vocab_size ? r->vocab_size : 1, &e);
    }
    spec_rec_free(r);
    return 0;
}
