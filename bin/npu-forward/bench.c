/* npu-forward bench: prompt processing and token generation speed (llama-bench's pp/tg), with an
 * optional DRAM read probe and verify passes of K rows. */
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/app.h"
#include "cmd.h"
#include "kern/kern.h"
#include "model/model.h"
#include "serve/serve.h"
#include "tok/tok.h"
#include "util/util.h"

int cmd_bench(int argc, char **argv)
{
    opts o;
    nf_parse(argc, argv, &o);
    int lens[64], nl = 0;
    ogk_check_list("-l", o.lens);
    char *list = strdup(o.lens), *save = NULL;
    for (char *p = strtok_r(list, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        if (nl == 64)
            ogk_die(OGK_EXIT_USAGE, "-l: at most 64 lengths");
        lens[nl++] = (int)ogk_parse_long("-l", p, 1, 1 << 24);
    }
    free(list);
    if (!nl)
        ogk_die(OGK_EXIT_USAGE, "-l: no prompt lengths");
    int vk[MODEL_VERIFY_MAX], nv = 0;
    if (o.verify_rows) {
        ogk_check_list("--verify-rows", o.verify_rows);
        list = strdup(o.verify_rows), save = NULL;
        for (char *p = strtok_r(list, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
            if (nv == MODEL_VERIFY_MAX)
                ogk_die(OGK_EXIT_USAGE, "--verify-rows: at most %d row counts", MODEL_VERIFY_MAX);
            vk[nv++] = (int)ogk_parse_long("--verify-rows", p, 2, MODEL_VERIFY_MAX);
        }
        free(list);
        if (!nv)
            ogk_die(OGK_EXIT_USAGE, "--verify-rows: no row counts");
    }
    model *m = nf_open_model(&o);
    /* the default lengths must fit the model: drop those that do not (saying so), and when none
     * fits, use the longest prompt that does; lengths given with -l are the user's (too long: exit 2, as -c
     * beyond the model's context is) */
    /* the tokens each length runs past its prompt: the generated ones, or the largest verify pass */
    int runs = o.gen > 1 ? o.gen : 1;
    for (int i = 0; i < nv; i++)
        runs = vk[i] > runs ? vk[i] : runs;
    if (!strcmp(o.lens, BENCH_DEFAULT_LENS)) {
        int ctx = app_context(m, &o.mo), kept = 0;
        for (int i = 0; i < nl; i++) {
            if (lens[i] + runs <= ctx)
                lens[kept++] = lens[i];
            else
                ogk_err("bench: skipping prompt length %d: %d + %d generated or verified exceed the context (%d)",
                        lens[i], lens[i], runs, ctx);
        }
        if (!kept) {
            if (ctx - runs < 1)
                ogk_die(OGK_EXIT_USAGE, "-g %d: no prompt fits a context of %d", runs, ctx);
            lens[kept++] = ctx - runs;
            ogk_err("bench: using prompt length %d (the longest that fits)", lens[0]);
        }
        nl = kept;
    }
    int maxlen = 0;
    for (int i = 0; i < nl; i++)
        maxlen = lens[i] > maxlen ? lens[i] : maxlen;
    int context = o.mo.context; /* a bench needs only what it runs: a smaller cache, a smaller RSS */
    if (!context)
        context = maxlen + o.gen + MODEL_VERIFY_MAX < m->c.context_length ? maxlen + o.gen + MODEL_VERIFY_MAX
                                                                          : m->c.context_length;
    if (maxlen + runs > context)
        ogk_die(OGK_EXIT_USAGE, "-l %d + %d generated or verified tokens: more than the context of %d positions (%s)",
                maxlen, runs, context, o.mo.context ? "-c" : "the model's");
    model_state *s = nf_new_state(m, &o, context, nv ? MODEL_VERIFY_MAX : 1);
    if (o.full_head && !nv)
        ogk_die(OGK_EXIT_USAGE, "--full-head: only with --verify-rows");
    model_bench_opts bo = {lens, nl, o.gen, o.reps, o.warmup, o.probe, nv ? vk : NULL, nv, o.full_head};
    ogk_error e;
    json_t *r = model_bench(s, &bo, &e);
    if (!r)
        ogk_die(OGK_EXIT_INPUT, "%s", e.msg);
    json_object_set_new(r, "kernel", json_string(kern_isa_current()->name));
    const char *held = q4nx_loaded(m->file) ? "huge-page copy" : "mapping";
    json_object_set_new(r, "weights_in", json_string(held));
    if (o.json) {
        ogk_json_print(stdout, r);
    } else {
        printf("model %s  family %s  threads %d  mode %s  kernel %s  weights/token %.1f MB (%s)\n", o.mo.model,
               m->c.family_name, kern_pool_threads(s->pool), kern_mode_name(app_mode(m, &o.mo)),
               kern_isa_current()->name, m->weight_bytes / 1e6, held);
        printf("%8s %6s %16s %20s %20s %14s%s\n", "prompt", "gen", "TTFT ms", "prefill tok/s", "decode tok/s", "E2E ms",
               o.probe ? "   DRAM GB/s  decode/DRAM  w+KV/DRAM" : "");
        size_t i;
        json_t *row;
        json_array_foreach(json_object_get(r, "results"), i, row)
        {
#define MED(k) json_real_value(json_object_get(json_object_get(row, k), "median"))
#define SD(k) json_real_value(json_object_get(json_object_get(row, k), "stddev"))
            printf("%8d %6d %9.2f ± %-5.2f %12.1f ± %-6.1f %12.2f ± %-6.2f %14.1f",
                   (int)json_integer_value(json_object_get(row, "prompt_tokens")),
                   (int)json_integer_value(json_object_get(row, "gen_tokens")), MED("ttft_ms"), SD("ttft_ms"),
                   MED("prefill_tok_s"), SD("prefill_tok_s"), MED("decode_tok_s"), SD("decode_tok_s"), MED("e2e_ms"));
            if (json_object_get(row, "decode_fraction_of_dram"))
                printf(" %12.1f %10.0f %% %9.0f %%", MED("dram_read_GBps"), 100 * MED("decode_fraction_of_dram"),
                       100 * MED("decode_fraction_of_dram_kv"));
            putchar('\n');
#undef MED
#undef SD
            size_t j;
            json_t *v;
            json_array_foreach(json_object_get(row, "verify"), j, v)
            {
#define NUM(k) json_real_value(json_object_get(v, k))
                printf("%15s %2d rows: %8.3f ms = %5.2f steps (layers %.3f, attention %.3f, head %.3f ms; "
                       "CPU %.3f ms = %.2f steps)\n",
                       "pass of", (int)json_integer_value(json_object_get(v, "rows")), NUM("ms"), NUM("steps"),
                       NUM("layers_ms"), NUM("attention_ms"), NUM("head_ms"), NUM("cpu_ms"), NUM("cpu_steps"));
#undef NUM
            }
        }
        printf("peak RSS %.1f MB (median of %d runs after %d warm-up)\n",
               json_integer_value(json_object_get(r, "peak_rss_bytes")) / 1e6, o.reps, o.warmup);
    }
    json_decref(r);
    model_state_free(s);
    model_close(m);
    return 0;
}
