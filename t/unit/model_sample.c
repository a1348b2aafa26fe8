/* lib/model sampling and stop strings against their definitions: greedy = argmax (lowest id on
 * ties), softmax(logits / T) frequencies, top-k and top-p (nucleus) cuts, seeded reproducibility;
 * stop strings split across pieces. Expected values are worked out from the definitions by hand. */
#include <math.h>
#include <string.h>

#include "model/model.h"
#include "tap.h"

static int draws(model_sampler *sp, const float *lg, int n, int *count)
{
    memset(count, 0, 8 * sizeof *count);
    for (int i = 0; i < n; i++)
        count[model_sample(sp, lg)]++;
    return n;
}

/* a large vocabulary (5000 ids, logits in [0, 8) in no order): the ids top-k and top-p may draw, worked out
 * by a full sort here (logit descending, lower id first), against what 60000 draws give */
static const float *ref_lg;
static int ref_cmp(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return ref_lg[x] > ref_lg[y] ? -1 : ref_lg[x] < ref_lg[y] ? 1 : x - y;
}

static void large_vocab(void)
{
    enum { V = 5000, N = 20000 };
    static float lg[V];
    static int order[V], seen[V];
    unsigned h = 1;
    for (int i = 0; i < V; i++) {
        h = h * 1103515245u + 12345u;
        lg[i] = (float)(h >> 8 & 0xFFFF) / 8192.0f;
    }
    lg[4321] = lg[17]; /* a tie, ordered by id */
    for (int i = 0; i < V; i++)
        order[i] = i;
    ref_lg = lg;
    qsort(order, V, sizeof *order, ref_cmp);
    double mx = lg[order[0]];
    /* the nucleus of the k first: the fewest first ids whose weight reaches half of theirs */
#define NUCLEUS(k, out)                                                                                              \
    do {                                                                                                             \
        double tot = 0, cum = 0;                                                                                     \
        for (int i = 0; i < (k); i++)                                                                                \
            tot += exp(lg[order[i]] - mx);                                                                           \
        for ((out) = 0; cum < 0.5 * tot;)                                                                            \
            cum += exp(lg[order[(out)++]] - mx);                                                                     \
    } while (0)
    int nucleus, nucleus300;
    NUCLEUS(V, nucleus);
    NUCLEUS(300, nucleus300);
    struct {
        int top_k;
        float top_p;
        int want; /* the ids it may draw: order[0..want) */
    } cases[] = {{100, 1, 100}, {0, 0.5f, nucleus}, {300, 0.5f, nucleus300}};
    for (int c = 0; c < 3; c++) {
        /* the least likely of them is expected >= 20 times: that all are drawn is no luck */
        double tot = 0;
        for (int i = 0; i < cases[c].want; i++)
            tot += exp(lg[order[i]] - mx);
        if (N * exp(lg[order[cases[c].want - 1]] - mx) / tot < 20)
            TAP_OK(0, "case %d: too few draws to expect every id", c);
        model_sampler sp;
        model_sampler_init(&sp, V, 1, cases[c].top_k, cases[c].top_p, 9);
        memset(seen, 0, sizeof seen);
        for (int i = 0; i < N; i++)
            seen[model_sample(&sp, lg)]++;
        model_sampler_free(&sp);
        int inside = 0, outside = 0;
        for (int r = 0; r < V; r++)
            r < cases[c].want ? (inside += seen[order[r]] > 0) : (outside += seen[order[r]]);
        TAP_OK(inside == cases[c].want && outside == 0,
               "5000 ids, top-k %d, top-p %.1f: every one of the %d first in order drawn (%d), none beyond (%d)",
               cases[c].top_k, cases[c].top_p, cases[c].want, inside, outside);
    }
    TAP_OK(nucleus > 256 && nucleus < 1000, "the top-p 0.5 nucleus is %d ids deep (past two rounds of 64, 256)", nucleus);
}

static char out[256];
static size_t out_len;
static void sink(const char *s, size_t n, void *ctx)
{
    (void)ctx;
    memcpy(out + out_len, s, n);
    out_len += n;
    out[out_len] = 0;
}

int main(void)
{
    /* a padded classifier (8 rows, a tokenizer of 6 ids) whose padded rows win: sampling draws only the
     * tokenizer's ids, greedy keeps the whole row */
    {
        float pad[8] = {0, 0.5f, 0.2f, 0, 0.1f, 0.3f, 4, 4};
        int count[8], V = model_sample_vocab(8, 6, 2.0f), padded = 0;
        TAP_OK(V == 6 && model_sample_vocab(8, 6, 0) == 8 && model_sample_vocab(8, 9, 2.0f) == 8 &&
                   model_sample_vocab(8, 0, 2.0f) == 8, "sample vocabulary: the tokenizer's ids when sampling, else all");
        model_sampler sp;
        model_sampler_init(&sp, 8, 2.0f, 0, 1, 5);
        draws(&sp, pad, 2000, count);
        padded = count[6] + count[7];
        model_sampler_free(&sp);
        model_sampler_init(&sp, V, 2.0f, 0, 1, 5);
        draws(&sp, pad, 2000, count);
        model_sampler_free(&sp);
        TAP_OK(padded > 1000 && count[6] + count[7] == 0 && count[1] > 0,
               "a sampler over the sample vocabulary never draws a padded id (%d of 2000 over the whole row)", padded);
    }
    large_vocab();
    float tie[5] = {1, 3, 3, 2, -1};
    TAP_OK(model_argmax(tie, 5) == 1, "argmax: first of equal maxima");
    static float big[1003];
    for (int i = 0; i < 1003; i++)
        big[i] = (float)((i * 37) % 101) * 0.01f;
    big[517] = big[900] = 2.0f;
    TAP_OK(model_argmax(big, 1003) == 517, "argmax over lanes and a tail: first of equal maxima");
    big[1002] = 3.0f;
    TAP_OK(model_argmax(big, 1003) == 1002, "argmax: the maximum in the tail");
    big[0] = 4.0f;
    TAP_OK(model_argmax(big, 1003) == 0, "argmax: the maximum first");

    /* p = 0.5, 0.3, 0.2, ~0 */
    float lg[4] = {logf(0.5f), logf(0.3f), logf(0.2f), -100};
    model_sampler sp;
    int c[8], N = 40000;
    model_sampler_init(&sp, 4, 0, 0, 1, 1);
    TAP_OK(model_sample(&sp, lg) == 0, "temperature 0 is greedy");
    model_sampler_free(&sp);

    model_sampler_init(&sp, 4, 1, 0, 1, 42);
    draws(&sp, lg, N, c);
    TAP_OK(fabs(c[0] / (double)N - 0.5) < 0.015 && fabs(c[1] / (double)N - 0.3) < 0.015 &&
               fabs(c[2] / (double)N - 0.2) < 0.015 && c[3] == 0,
           "T=1 draws follow softmax: %d %d %d %d of %d", c[0], c[1], c[2], c[3], N);
    model_sampler_free(&sp);

    /* T = 2: p ~ sqrt(0.5), sqrt(0.3), sqrt(0.2) -> 0.4154, 0.3218, 0.2628 */
    model_sampler_init(&sp, 4, 2, 0, 1, 7);
    draws(&sp, lg, N, c);
    TAP_OK(fabs(c[0] / (double)N - 0.4154) < 0.015 && fabs(c[1] / (double)N - 0.3218) < 0.015 &&
               fabs(c[2] / (double)N - 0.2628) < 0.015,
           "T=2 flattens: %d %d %d of %d", c[0], c[1], c[2], N);
    model_sampler_free(&sp);

    /* top-k 2: 0.5/0.8 = 0.625, 0.375 */
    model_sampler_init(&sp, 4, 1, 2, 1, 9);
    draws(&sp, lg, N, c);
    TAP_OK(c[2] == 0 && fabs(c[0] / (double)N - 0.625) < 0.015, "top-k 2 keeps two: %d %d %d", c[0], c[1], c[2]);
    model_sampler_free(&sp);

    /* top-p 0.6: 0.5 < 0.6 <= 0.8, so {0, 1} renormalised; top-p 0.5: {0} only */
    model_sampler_init(&sp, 4, 1, 0, 0.6f, 11);
    draws(&sp, lg, N, c);
    TAP_OK(c[2] == 0 && fabs(c[0] / (double)N - 0.625) < 0.015, "top-p 0.6 keeps the nucleus: %d %d %d", c[0], c[1],
           c[2]);
    model_sampler_free(&sp);
    model_sampler_init(&sp, 4, 1, 0, 0.5f, 11);
    draws(&sp, lg, 2000, c);
    TAP_OK(c[0] == 2000, "top-p 0.5 keeps the top token only");
    model_sampler_free(&sp);
    model_sampler_init(&sp, 4, 1, 0, 0, 11); /* the smallest set reaching 0: the top token (not "no top-p") */
    draws(&sp, lg, 2000, c);
    TAP_OK(c[0] == 2000, "top-p 0 keeps the top token only: %d %d %d", c[0], c[1], c[2]);
    model_sampler_free(&sp);

    /* top-k 1 is greedy at any temperature */
    model_sampler_init(&sp, 4, 5, 1, 1, 3);
    draws(&sp, lg, 1000, c);
    TAP_OK(c[0] == 1000, "top-k 1 is greedy");
    model_sampler_free(&sp);

    /* same seed, same draws; another seed, other draws */
    int a[64], b[64], d[64];
    model_sampler s1, s2, s3;
    model_sampler_init(&s1, 4, 1, 0, 1, 123), model_sampler_init(&s2, 4, 1, 0, 1, 123);
    model_sampler_init(&s3, 4, 1, 0, 1, 124);
    for (int i = 0; i < 64; i++)
        a[i] = model_sample(&s1, lg), b[i] = model_sample(&s2, lg), d[i] = model_sample(&s3, lg);
    TAP_OK(!memcmp(a, b, sizeof a), "same seed, same draws");
    TAP_OK(memcmp(a, d, sizeof a) != 0, "another seed, other draws");
    model_sampler_free(&s1), model_sampler_free(&s2), model_sampler_free(&s3);

    /* stop strings */
    char *stops[] = {"</s>", "ab"};
    model_stopper st;
    model_stopper_init(&st, stops, 2);
    out_len = 0;
    int hit = model_stopper_feed(&st, "xx<", 3, sink, NULL);
    TAP_OK(!hit && !strcmp(out, "xx"), "a possible stop prefix is held back ('%s')", out);
    hit = model_stopper_feed(&st, "/", 1, sink, NULL);
    hit = model_stopper_feed(&st, "s>yy", 4, sink, NULL);
    TAP_OK(hit && !strcmp(out, "xx"), "a stop split over three pieces stops; text before it released ('%s')", out);
    model_stopper_free(&st);

    model_stopper_init(&st, stops, 2);
    out_len = 0;
    model_stopper_feed(&st, "a", 1, sink, NULL);
    model_stopper_feed(&st, "c</", 3, sink, NULL);
    model_stopper_feed(&st, "x", 1, sink, NULL);
    model_stopper_flush(&st, sink, NULL);
    TAP_OK(!st.hit && !strcmp(out, "ac</x"), "near misses are released in order ('%s')", out);
    model_stopper_free(&st);

    model_stopper_init(&st, stops, 2);
    out_len = 0;
    hit = model_stopper_feed(&st, "zab</s>", 7, sink, NULL);
    TAP_OK(hit && !strcmp(out, "z"), "the earliest stop string wins ('%s')", out);
    model_stopper_free(&st);

    model_stopper_init(&st, NULL, 0);
    out_len = 0;
    model_stopper_feed(&st, "plain", 5, sink, NULL);
    TAP_OK(!strcmp(out, "plain"), "no stop strings: text passes through");
    model_stopper_free(&st);
    return TAP_DONE();
}
