/* The benchmark: prompt processing and token generation per prompt length, like onnxruntime-genai's
 * model_benchmark (TTFT, tok/s median and stddev, E2E, peak RSS). Greedy, EOS ignored, so every run
 * does the same work. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model.h"
#include "model_int.h"

void model_bench_prompt(int *ids, int n, int vocab)
{
    /* the LCG of tools/ort-ref.js --bench: ids away from the special tokens */
    uint64_t seed = 12345;
    int span = (vocab < 30000 ? vocab : 30000) - 100;
    if (span < 1)
        span = 1;
    for (int i = 0; i < n; i++) {
        seed = (seed * 1103515245u + 12345u) % 2147483648u;
        ids[i] = (100 + (int)(seed % (uint64_t)span)) % vocab;
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static json_t *stat(double *v, int n, int digits)
{
    double *c = malloc((size_t)n * sizeof *c), mean = 0, var = 0;
    memcpy(c, v, (size_t)n * sizeof *c);
    qsort(c, (size_t)n, sizeof *c, cmp_double);
    double med = n % 2 ? c[n / 2] : (c[n / 2 - 1] + c[n / 2]) / 2;
    for (int i = 0; i < n; i++)
        mean += v[i] / n;
    for (int i = 0; i < n; i++)
        var += (v[i] - mean) * (v[i] - mean) / (n > 1 ? n - 1 : 1);
    free(c);
    double f = pow(10, digits);
    return json_pack("{s:f,s:f}", "median", round(med * f) / f, "stddev", round(sqrt(var) * f) / f);
}

/* CPU seconds of the whole process (all its threads): on a loaded machine the work a pass did,
 * apart from the time it waited for a core (meaningful with one thread: pool workers spin) */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double median_of(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* After a prompt of L tokens: rounds of one 1-row step (logits of its row) and then every k-row pass
 * (logits of all rows, as a verify pass), each at position L and rewound after, so all see the same
 * cache and the same minute of the machine. Per k the medians over the rounds. */
static json_t *bench_verify(model_state *s, const model_bench_opts *o, const int *ids, int L, ogk_error *e)
{
    enum { ROUNDS = 31 };
    int nk = o->n_verify + 1;
    enum { NV = 8 };
    double *v = malloc(sizeof(double) * ROUNDS * nk * NV);
    json_t *out = json_array();
    int was = s->head_argmax;
    if (!v) {
        ogk_fail(e, "out of memory");
        json_decref(out);
        return NULL;
    }
    model_state_reset(s);
    if (model_forward(s, ids, L, 0, e))
        goto fail;
    s->head_argmax = !o->full_head; /* a greedy verify reads each row's argmax (head.c) */
    int toks[MODEL_VERIFY_MAX];
    for (int i = 0; i < MODEL_VERIFY_MAX; i++)
        toks[i] = ids[i % L];
    for (int r = -2; r < ROUNDS; r++) /* two warm-up rounds */
        for (int k = 0; k < nk; k++) {
            int rows = k ? o->verify_rows[k - 1] : 1;
            double t0 = ogk_now(), c0 = cpu_now();
            if (model_forward(s, toks, rows, rows > 1, e))
                goto fail;
            double ms = (ogk_now() - t0) * 1e3, cms = (cpu_now() - c0) * 1e3;
            model_rewind(s, rows);
            if (r < 0)
                continue;
            double *w = v + ((size_t)k * ROUNDS + r) * NV;
            w[0] = ms, w[1] = s->prof.layers_ms, w[2] = s->prof.attn_ms, w[3] = s->prof.head_ms;
            w[4] = ms / v[(size_t)r * NV]; /* over the step of this round */
            w[5] = cms, w[6] = cms / v[(size_t)r * NV + 5], w[7] = s->prof.gemm_ms;
        }
    double col[ROUNDS];
    /* the passes' classifier: the argmax head where the mode has one (i8 on a 16-bit kernel path) */
    const char *head = !o->full_head && model_matmul_mode(s, s->m->w.lm_head) == KERN_I16 ? "argmax" : "full";
    for (int k = 0; k < nk; k++) {
        double med[NV];
        for (int c = 0; c < NV; c++) {
            for (int r = 0; r < ROUNDS; r++)
                col[r] = v[((size_t)k * ROUNDS + r) * NV + c];
            med[c] = round(median_of(col, ROUNDS) * 1e4) / 1e4;
        }
        json_array_append_new(out, json_pack("{s:i,s:s,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f}", "rows", k ? o->verify_rows[k - 1] : 1,
                                             "head", head, "ms", med[0], "steps", med[4], "layers_ms", med[1], "attention_ms", med[2],
                                             "head_ms", med[3], "gemm_ms", med[7], "cpu_ms", med[5], "cpu_steps", med[6]));
    }
    free(v);
    s->head_argmax = was;
    return out;
fail:
    free(v);
    s->head_argmax = was;
    json_decref(out);
    return NULL;
}

json_t *model_bench(model_state *s, const model_bench_opts *o, ogk_error *e)
{
    const model *m = s->m;
    int maxlen = 0;
    for (int i = 0; i < o->n_lens; i++)
        maxlen = o->prompt_lens[i] > maxlen ? o->prompt_lens[i] : maxlen;
    int maxk = 1;
    for (int i = 0; i < o->n_verify; i++)
        maxk = o->verify_rows[i] > maxk ? o->verify_rows[i] : maxk;
    if (maxlen + (o->gen > maxk ? o->gen : maxk) > s->context) {
        ogk_fail(e, "prompt %d + %d generated tokens do not fit the context of %d (-c)", maxlen,
                 o->gen > maxk ? o->gen : maxk, s->context);
        return NULL;
    }
    if (maxk > s->logit_rows) {
        ogk_fail(e, "verify passes of %d rows need a state with as many logit rows (%d)", maxk, s->logit_rows);
        return NULL;
    }
    int *ids = malloc((size_t)maxlen * sizeof *ids);
    int R = o->reps > 0 ? o->reps : 1;
    double *ttft = malloc(sizeof(double) * R), *pp = malloc(sizeof(double) * R), *tg = malloc(sizeof(double) * R),
           *e2e = malloc(sizeof(double) * R), *bw = malloc(sizeof(double) * R), *fr = malloc(sizeof(double) * R),
           *frkv = malloc(sizeof(double) * R);
    kern_bw_probe *probe = NULL;
    if (o->probe) {
        size_t fsz;
        const uint8_t *fb = q4nx_bytes(m->file, &fsz);
        if (!(probe = kern_bw_probe_over(fb, fsz))) {
            ogk_fail(e, "the container is too small for a bandwidth probe");
            free(ids), free(ttft), free(pp), free(tg), free(e2e), free(bw), free(fr), free(frkv);
            return NULL;
        }
    }
    json_t *rows = json_array();
    model_sampler sp;
    model_sampler_init(&sp, m->c.vocab_size, 0, 0, 0, 1);
    for (int li = 0; li < o->n_lens; li++) {
        int L = o->prompt_lens[li];
        model_bench_prompt(ids, L, m->c.vocab_size);
        /* the KV cache a decode step reads besides the weights (keys and values of every layer and KV
         * head up to its position), on average over the generated tokens */
        double kv = (double)m->c.n_layers * m->c.n_kv_heads * m->c.head_dim * 2.0 * (s->kv_f16 ? 2 : 4) *
                    (L + (o->gen + 1) / 2.0);
        for (int r = -o->warmup; r < R; r++) {
            model_gen g = {.max_new = o->gen + 1, .ignore_eos = 1};
            model_gen_stats st;
            model_state_reset(s);
            double gbs = probe && r >= 0 ? kern_bw_probe_pass(s->pool, probe) : 0;
            if (model_generate(s, &sp, ids, L, &g, &st, e))
                goto fail;
            if (r < 0)
                continue;
            ttft[r] = st.ttft_ms;
            pp[r] = L / (st.prefill_ms / 1e3);
            tg[r] = o->gen / (st.decode_ms / 1e3);
            e2e[r] = st.prefill_ms + st.decode_ms + st.sampling_ms;
            bw[r] = gbs;
            fr[r] = gbs > 0 ? tg[r] * (double)m->weight_bytes / 1e9 / gbs : 0;
            frkv[r] = gbs > 0 ? tg[r] * ((double)m->weight_bytes + kv) / 1e9 / gbs : 0;
        }
        json_t *row = json_pack("{s:i,s:i,s:o,s:o,s:o,s:o}", "prompt_tokens", L, "gen_tokens", o->gen, "ttft_ms",
                                stat(ttft, R, 3), "prefill_tok_s", stat(pp, R, 2), "decode_tok_s", stat(tg, R, 2),
                                "e2e_ms", stat(e2e, R, 3));
        if (probe) {
            json_object_set_new(row, "dram_read_GBps", stat(bw, R, 2));
            json_object_set_new(row, "decode_fraction_of_dram", stat(fr, R, 4));
            json_object_set_new(row, "kv_bytes_per_token", json_integer((json_int_t)kv));
            json_object_set_new(row, "decode_fraction_of_dram_kv", stat(frkv, R, 4));
        }
        json_array_append_new(rows, row);
        if (o->n_verify) {
            json_t *vr = bench_verify(s, o, ids, L, e);
            if (!vr)
                goto fail;
            json_object_set_new(row, "verify", vr);
        }
    }
    model_sampler_free(&sp);
    kern_bw_probe_free(probe);
    free(ids), free(ttft), free(pp), free(tg), free(e2e), free(bw), free(fr), free(frkv);
    return json_pack("{s:s,s:i,s:i,s:s,s:i,s:I,s:o,s:I}", "family", m->c.family_name, "threads",
                     kern_pool_threads(s->pool), "context", s->context, "mode", kern_mode_name(s->mode),
                     "reps", R, "weight_bytes_per_token", (json_int_t)m->weight_bytes, "results", rows, "peak_rss_bytes",
                     (json_int_t)ogk_peak_rss());
fail:
    model_sampler_free(&sp);
    kern_bw_probe_free(probe);
    free(ids), free(ttft), free(pp), free(tg), free(e2e), free(bw), free(fr), free(frkv);
    json_decref(rows);
    return NULL;
}
