/* model_forward_batch against model_forward one token at a time: every row's logits must be
 * bit-identical (model.h's promise, which makes served greedy text independent of who else is served),
 * for 4 states at different positions in one pass, and for a state taking 5 consecutive rows (a
 * speculative verify) beside two others, and for prompt chunks that want only their last row's logits
 * (the server's batched prefill); f32 and i8 modes. Needs a container: the path as argv[1] or
 * OGAKIT_TEST_Q4NX (t/serve.bats passes the bundled model); without one it reports a skip. */
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "tap.h"

/* a state with `n` tokens of ids already run one at a time */
static model_state *state_at(const model *m, kern_pool *p, int mode, const int *ids, int n, ogk_error *e)
{
    model_state *s = model_state_new_shared(m, 256, 8, mode, p, e);
    for (int i = 0; s && i < n; i++)
        if (model_forward(s, &ids[i], 1, 0, e))
            return NULL;
    return s;
}

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : getenv("OGAKIT_TEST_Q4NX");
    if (!path) {
        printf("ok 1 # skip no container (argv[1] or OGAKIT_TEST_Q4NX)\n1..1\n");
        return 0;
    }
    ogk_error e;
    int code;
    model *m = model_open(path, &e, &code);
    TAP_OK(m != NULL, "open %s", path);
    if (!m)
        return TAP_DONE();
    int V = m->c.vocab_size, ids[64];
    for (int i = 0; i < 64; i++)
        ids[i] = (i * 7919 + 13) % V;
    kern_pool *pool = kern_pool_new(2);
    for (int mode = KERN_F32; mode <= KERN_I8; mode++) {
        const char *mn = mode == KERN_I8 ? "i8" : "f32";
        model_state *work = model_state_new_shared(m, 1, 1, mode, pool, &e);
        /* reference: 4 sequences of different lengths, next token one at a time */
        int lens[4] = {1, 9, 17, 30};
        model_state *ref[4], *bat[4];
        float *want[4];
        for (int i = 0; i < 4; i++) {
            ref[i] = state_at(m, pool, mode, ids + i, lens[i], &e);
            bat[i] = state_at(m, pool, mode, ids + i, lens[i], &e);
            model_forward(ref[i], &ids[40 + i], 1, 0, &e);
            want[i] = malloc((size_t)V * sizeof(float));
            memcpy(want[i], ref[i]->logits, (size_t)V * sizeof(float));
        }
        int tok[4] = {ids[40], ids[41], ids[42], ids[43]};
        int rc = model_forward_batch(work, bat, tok, 4, NULL, &e);
        TAP_OK(rc == 0, "%s: a batch of 4 states runs", mn);
        int same = 1;
        for (int i = 0; i < 4; i++)
            same &= bat[i]->pos == lens[i] + 1 && !memcmp(bat[i]->logits, want[i], (size_t)V * sizeof(float));
        TAP_OK(same, "%s: every row's logits are bit-identical to one-token model_forward", mn);
        /* a verify: state 1 takes 5 consecutive rows between states 0 and 2 */
        int vt[5] = {ids[50], ids[51], ids[52], ids[53], ids[54]};
        float *vw = malloc((size_t)5 * V * sizeof(float));
        for (int r = 0; r < 5; r++) {
            model_forward(ref[1], &vt[r], 1, 0, &e);
            memcpy(vw + (size_t)r * V, ref[1]->logits, (size_t)V * sizeof(float));
        }
        model_forward(ref[0], &ids[55], 1, 0, &e);
        model_forward(ref[2], &ids[56], 1, 0, &e);
        model_state *rows[7] = {bat[0], bat[1], bat[1], bat[1], bat[1], bat[1], bat[2]};
        int rt[7] = {ids[55], vt[0], vt[1], vt[2], vt[3], vt[4], ids[56]};
        rc = model_forward_batch(work, rows, rt, 7, NULL, &e);
        TAP_OK(rc == 0 && bat[1]->pos == ref[1]->pos && bat[0]->pos == ref[0]->pos, "%s: a 5-row verify beside 2 rows", mn);
        TAP_OK(!memcmp(bat[1]->logits, vw, (size_t)5 * V * sizeof(float)) &&
                   !memcmp(bat[0]->logits, ref[0]->logits, (size_t)V * sizeof(float)) &&
                   !memcmp(bat[2]->logits, ref[2]->logits, (size_t)V * sizeof(float)),
               "%s: the verify rows' logits equal 5 one-token passes; the neighbours' are unchanged", mn);
        /* refusals: a state's rows apart, more rows than its logits hold */
        model_state *apart[3] = {bat[0], bat[1], bat[0]};
        TAP_OK(model_forward_batch(work, apart, rt, 3, NULL, &e) == -1 && strstr(e.msg, "consecutive"),
               "%s: rows of one state apart are refused (%s)", mn, e.msg);
        model_state *many[9] = {bat[3], bat[3], bat[3], bat[3], bat[3], bat[3], bat[3], bat[3], bat[3]};
        int mt[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
        TAP_OK(model_forward_batch(work, many, mt, 9, NULL, &e) == -1, "%s: 9 rows for a state of 8 logit rows are refused", mn);
        /* prompt chunks beside a decode row (the server's batched prefill): state 3 takes 6 rows and wants
         * the last one's logits, state 2 takes 3 rows and wants none, state 0 one row; then every state
         * runs one more token alone, which reads the KV the batch wrote */
        int pt[10] = {ids[57], ids[58], ids[59], ids[60], ids[61], ids[62], ids[20], ids[21], ids[22], ids[23]};
        model_state *pr[10] = {bat[3], bat[3], bat[3], bat[3], bat[3], bat[3], bat[2], bat[2], bat[2], bat[0]};
        unsigned char pw[10] = {0, 0, 0, 0, 0, 1, 0, 0, 0, 1};
        float *chunk = malloc((size_t)V * sizeof(float));
        if (mode == KERN_I8) { /* i8: one model_forward over the whole chunk gives the same bits */
            model_state *c3 = state_at(m, pool, mode, ids + 3, lens[3], &e);
            model_forward(c3, &ids[43], 1, 0, &e);
            model_forward(c3, pt, 6, 0, &e);
            memcpy(chunk, c3->logits, (size_t)V * sizeof(float));
            model_state_free(c3);
        }
        for (int r = 0; r < 6; r++)
            model_forward(ref[3], &pt[r], 1, 0, &e);
        for (int r = 6; r < 9; r++)
            model_forward(ref[2], &pt[r], 1, 0, &e);
        model_forward(ref[0], &pt[9], 1, 0, &e);
        memset(bat[2]->logits, 0x7f, (size_t)V * sizeof(float)); /* must stay so: no row of state 2 wants logits */
        float keep = bat[2]->logits[0];
        rc = model_forward_batch(work, pr, pt, 10, pw, &e);
        TAP_OK(rc == 0 && bat[3]->pos == ref[3]->pos && bat[2]->pos == ref[2]->pos && bat[0]->pos == ref[0]->pos,
               "%s: prompt chunks of 6 and 3 rows beside a decode row run (%s)", mn, rc ? e.msg : "ok");
        TAP_OK(!memcmp(bat[3]->logits, ref[3]->logits, (size_t)V * sizeof(float)) &&
                   !memcmp(bat[0]->logits, ref[0]->logits, (size_t)V * sizeof(float)) && bat[2]->logits[0] == keep &&
                   bat[2]->logits[V - 1] == keep,
               "%s: the wanted rows' logits equal one-token passes (logits row 0); a state wanting none keeps its own",
               mn);
        if (mode == KERN_I8)
            TAP_OK(!memcmp(bat[3]->logits, chunk, (size_t)V * sizeof(float)),
                   "%s: the chunk's last logits equal one model_forward over the chunk", mn);
        int same_kv = 1;
        for (int i = 0; i < 4; i++) {
            model_forward(ref[i], &ids[63], 1, 0, &e);
            model_forward(bat[i], &ids[63], 1, 0, &e);
            same_kv &= !memcmp(bat[i]->logits, ref[i]->logits, (size_t)V * sizeof(float));
        }
        TAP_OK(same_kv, "%s: the KV the batch wrote gives the next token the same logits", mn);
        free(chunk);
        for (int i = 0; i < 4; i++)
            model_state_free(ref[i]), model_state_free(bat[i]), free(want[i]);
        free(vw);
        model_state_free(work);
    }
    kern_pool_free(pool);
    model_close(m);
    return TAP_DONE();
}
