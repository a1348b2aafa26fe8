/* The classifier's argmax head (lib/model head.c) against the full 16-bit classifier: in i8 mode, passes of
 * 2-16 rows (verify passes) and a continuous batch, with head_argmax set and not, on every kernel row this
 * CPU runs: every row's argmax and the logit at it must be bit-identical, and the head must have recomputed
 * only a small share of the entries (else it did not screen anything). A 1-row pass (below the head's
 * rows) keeps the full classifier's logits. Containers as arguments (t/forward.bats passes a trained model
 * and a random-weight one, whose flat logits put many entries near each row's maximum); without one it
 * reports a skip. */
#include <stdlib.h>
#include <string.h>

#include <math.h>

#include "model/model.h"
#include "model/model_int.h"
#include "tap.h"

static int state_run(model_state *s, const int *ids, int n, ogk_error *e)
{
    model_state_reset(s);
    return model_forward(s, ids, n, 0, e);
}

static void one(const char *path)
{
    ogk_error e;
    int code;
    model *m = model_open(path, &e, &code);
    TAP_OK(m != NULL, "open %s", path);
    if (!m)
        return;
    int V = m->c.vocab_size, ids[64];
    for (int i = 0; i < 64; i++)
        ids[i] = (i * 7919 + 13) % V;
    kern_pool *pool = kern_pool_new(2);
    int before = kern_isa_find(kern_isa_current()->name);
    for (int isa = 0; isa < KERN_ISA_COUNT; isa++) {
        if (!kern_isa_supported(isa) || kern_isa_set(isa)) {
            printf("ok %d - # skip row %s: not supported on this CPU\n", ++tap_n, kern_isa_row(isa)->name);
            continue;
        }
        const char *rn = kern_isa_row(isa)->name;
        model_state *s = model_state_new_shared(m, 256, 16, KERN_I8, pool, &e);
        float *full = malloc((size_t)16 * V * sizeof *full);
        if (!s || !full || state_run(s, ids, 24, &e)) {
            TAP_OK(0, "%s: state and prompt: %s", rn, e.msg);
            break;
        }
        /* the bound itself, on every entry: activations of several scales, a zero row and an outlier */
        if (kern_isa_row(isa)->gemm_i16) {
            int D = m->c.dim;
            float *x = malloc((size_t)6 * D * sizeof *x);
            uint64_t r = 0x2545F4914F6CDD1Dull;
            for (int i = 0; i < 6 * D; i++) {
                r ^= r << 13, r ^= r >> 7, r ^= r << 17;
                float u = (float)((r >> 40) & 0xFFFFFF) / 16777216.0f - 0.5f;
                x[i] = u * (i / D == 1 ? 1e-3f : i / D == 2 ? 0.0f : i / D == 3 ? 50.0f : 4.0f);
            }
            x[4 * D + D / 3] = 300.0f; /* an outlier */
            double worst = x ? model_head_worst(s, x, 6) : -1;
            TAP_OK(worst >= 0 && worst <= 1, "%s: |int8 - 16-bit classifier| <= the head's bound on every entry (worst %.3g of it)",
                   rn, worst);
            free(x);
        }
        /* verify passes of k rows at positions 24.. (rewound after each) */
        const int ks[] = {2, 5, 8, 16, 3, 16};
        int same = 1, passes = 0;
        long cols = 0, entries = 0;
        for (int p = 0; p < 6; p++) {
            int k = ks[p], run[16];
            for (int i = 0; i < k; i++)
                run[i] = (p * 131 + i * 37 + 5) % V;
            s->head_argmax = 0;
            if (model_forward(s, run, k, 1, &e))
                break;
            memcpy(full, s->logits, (size_t)k * V * sizeof *full);
            model_rewind(s, k);
            s->head_argmax = 1;
            if (model_forward(s, run, k, 1, &e))
                break;
            cols += s->prof.head_cols, entries += V;
            model_rewind(s, k);
            for (int r = 0; r < k; r++) {
                const float *a = full + (size_t)r * V, *b = s->logits + (size_t)r * V;
                int ia = model_argmax(a, V), ib = model_argmax(b, V);
                same &= ia == ib && !memcmp(&a[ia], &b[ib], sizeof *a);
            }
            passes++;
        }
        TAP_OK(passes == 6 && same, "%s: verify passes of 2-16 rows: every row's argmax and its logit as the full classifier's", rn);
        /* the screen ran and left most columns alone (a row without 16-bit kernels, ref, has a fp32
         * classifier and no head) */
        int has16 = kern_isa_row(isa)->gemm_i16 != NULL;
        TAP_OK(has16 ? cols > 0 && cols * 4 < entries : cols == 0,
               "%s: the head recomputed %ld of %ld classifier columns over %d passes", rn, cols, entries, passes);
        /* one row: the full classifier's logits, bit for bit */
        s->head_argmax = 0;
        int t = ids[30];
        int ok1 = !model_forward(s, &t, 1, 0, &e);
        memcpy(full, s->logits, (size_t)V * sizeof *full);
        model_rewind(s, 1);
        s->head_argmax = 1;
        ok1 &= !model_forward(s, &t, 1, 0, &e) && !memcmp(full, s->logits, (size_t)V * sizeof *full);
        model_rewind(s, 1);
        TAP_OK(ok1, "%s: a 1-row pass keeps the full classifier's logits", rn);
        /* a continuous batch: three states (1, 4 and 1 rows), flagged or not */
        model_state *st[2][3] = {{0}}, *work = model_state_new_shared(m, 1, 1, KERN_I8, pool, &e);
        int bsame = work != NULL;
        int tok[6] = {ids[40], ids[41], ids[42], ids[43], ids[44], ids[45]};
        for (int f = 0; f < 2 && bsame; f++) {
            for (int i = 0; i < 3; i++) {
                st[f][i] = model_state_new_shared(m, 256, 8, KERN_I8, pool, &e);
                bsame &= st[f][i] && !state_run(st[f][i], ids + i, 10 + 7 * i, &e);
                if (st[f][i])
                    st[f][i]->head_argmax = f;
            }
            model_state *rows[6] = {st[f][0], st[f][1], st[f][1], st[f][1], st[f][1], st[f][2]};
            bsame &= bsame && !model_forward_batch(work, rows, tok, 6, NULL, &e);
        }
        int per[3] = {1, 4, 1};
        for (int i = 0; i < 3 && bsame; i++)
            for (int r = 0; r < per[i]; r++) {
                const float *a = st[0][i]->logits + (size_t)r * V, *b = st[1][i]->logits + (size_t)r * V;
                int ia = model_argmax(a, V), ib = model_argmax(b, V);
                bsame &= ia == ib && !memcmp(&a[ia], &b[ib], sizeof *a);
            }
        TAP_OK(bsame, "%s: a batch of 3 states (6 rows): every row's argmax as the full classifier's", rn);
        for (int f = 0; f < 2; f++)
            for (int i = 0; i < 3; i++)
                model_state_free(st[f][i]);
        model_state_free(work);
        model_state_free(s);
        free(full);
    }
    kern_isa_set(before);
    kern_pool_free(pool);
    model_close(m);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        printf("ok 1 # skip no container (arguments)\n1..1\n");
        return 0;
    }
    for (int i = 1; i < argc; i++)
        one(argv[i]);
    return TAP_DONE();
}
