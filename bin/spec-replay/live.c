/* spec-replay live: greedy speculative decoding of a target with a drafter in this process, against
 * the target's plain greedy decoding of the same prompt (the end-to-end check of the loop). */
#include <getopt.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/app.h"
#include "kern/kern.h"
#include "sr.h"
#include "util/util.h"

int live(void)
{
    if (!opt.target || !opt.draft)
        ogk_die(OGK_EXIT_USAGE, "-m TARGET and -d DRAFT are both required (see --help)");
    if (!!opt.prompt + !!opt.prompt_file + !!opt.ids_file != 1)
        ogk_die(OGK_EXIT_USAGE, "give exactly one of -p TEXT, -f FILE, --ids FILE");

    ogk_error e;
    model *T = open_model(opt.target), *D = open_model(opt.draft);
    check_pair(T, D);
    int np;
    int *prompt = prompt_ids(T, T->c.context_length < D->c.context_length ? T->c.context_length : D->c.context_length, &np);
    for (int i = 0; i < np; i++)
        if (prompt[i] >= T->c.vocab_size)
            ogk_die(OGK_EXIT_INPUT, "prompt: token id %d at %d is outside the vocabulary (%d)", prompt[i], i,
                    T->c.vocab_size);
    /* both runs must have room for every token (one cut short by the context would differ from the other) */
    int need = np + opt.n + opt.k + 1, ctx = opt.context ? opt.context : need;
    if (ctx < need)
        ogk_die(OGK_EXIT_INPUT, "prompt %d + %d tokens + %d drafts need %d positions; -c gives %d", np, opt.n, opt.k,
                need, ctx);
    if (ctx > T->c.context_length || ctx > D->c.context_length) /* -c: a bad value, as npu-forward's is */
        ogk_die(opt.context ? OGK_EXIT_USAGE : OGK_EXIT_INPUT, "%d positions (%s) are more than the models hold (%d and %d)", ctx,
                opt.context ? "-c" : "prompt + tokens + drafts", T->c.context_length, D->c.context_length);
    model_state *ts = new_state(T, ctx, opt.k + 1), *ds = new_state(D, ctx, 1);

    int *plain = malloc(sizeof(int) * opt.n), *spec = malloc(sizeof(int) * opt.n);
    float *gap = malloc(sizeof(float) * opt.n);
    if (!plain || !spec || !gap)
        ogk_die(OGK_EXIT_INIT, "out of memory");
    /* a warm-up of each (page faults, pool start-up), then the measured runs */
    double plain_ms;
    model_spec_stats st;
    int warm = opt.n < 8 ? opt.n : 8;
    if (model_greedy(ts, prompt, np, warm, opt.ignore_eos, plain, NULL, &plain_ms, &e) < 0 ||
        model_spec_greedy(ts, ds, prompt, np, warm, opt.k, opt.ignore_eos, spec, &st, &e))
        ogk_die(OGK_EXIT_INPUT, "%s", e.msg);
    int np_new = model_greedy(ts, prompt, np, opt.n, opt.ignore_eos, plain, gap, &plain_ms, &e);
    if (np_new < 0 || model_spec_greedy(ts, ds, prompt, np, opt.n, opt.k, opt.ignore_eos, spec, &st, &e))
        ogk_die(OGK_EXIT_INPUT, "%s", e.msg);

    /* the first position where the two differ, and whether the plain run was at a near-tie there */
    int diff = -1, upto = np_new < st.new_tokens ? np_new : st.new_tokens;
    for (int i = 0; i < upto && diff < 0; i++)
        if (plain[i] != spec[i])
            diff = i;
    if (diff < 0 && np_new != st.new_tokens)
        diff = upto;
    int real_diff = diff >= 0 && (diff >= np_new || gap[diff] > GAP_TIE);

    double t_tok = np_new ? plain_ms / np_new : 0;                       /* target decode ms per token */
    double d_tok = st.draft_tokens_run ? st.draft_ms / st.draft_tokens_run : 0; /* drafter ms per token */
    double c_ratio = t_tok > 0 ? d_tok / t_tok : 0;
    double v_round = st.rounds ? st.verify_ms / st.rounds : 0;
    double v_cost = t_tok > 0 ? v_round / t_tok : 0; /* a verify pass, in target decode steps */
    double tpr = st.rounds ? (double)st.new_tokens / st.rounds : 0;
    double alpha = st.drafted ? (double)st.accepted / st.drafted : 0;
    /* per round: the drafter's passes (k tokens, +1 after a fully accepted round) and one verify pass */
    double round_cost = st.rounds ? (double)st.draft_tokens_run / st.rounds * c_ratio + v_cost : 0;
    double predicted = round_cost > 0 ? tpr / round_cost : 0;
    double spec_tok = st.new_tokens ? st.decode_ms / st.new_tokens : 0;
    double measured = spec_tok > 0 ? t_tok / spec_tok : 0;

    json_t *j = json_pack("{s:o,s:o,s:s,s:i,s:i,s:i,s:i}", "target", ogk_json_str(opt.target), "draft", ogk_json_str(opt.draft), "mode",
                          kern_mode_name(opt.mode), "threads", kern_pool_threads(ts->pool), "k", opt.k,
                          "prompt_tokens", np, "new_tokens", st.new_tokens);
    json_object_set_new(j, "rounds", json_integer(st.rounds));
    json_object_set_new(j, "drafted", json_integer(st.drafted));
    json_object_set_new(j, "accepted", json_integer(st.accepted));
    json_object_set_new(j, "acceptance_rate", json_real(alpha));
    json_object_set_new(j, "tokens_per_round", json_real(tpr));
    json_object_set_new(j, "identical_to_greedy", json_boolean(diff < 0));
    json_object_set_new(j, "first_difference", diff < 0 ? json_null() : json_integer(diff));
    json_object_set_new(j, "gap_at_difference",
                        diff < 0 || diff >= np_new ? json_null() : json_real(gap[diff]));
    json_object_set_new(j, "target_ms_per_token", json_real(t_tok));
    json_object_set_new(j, "draft_ms_per_token", json_real(d_tok));
    json_object_set_new(j, "cost_ratio", json_real(c_ratio));
    json_object_set_new(j, "verify_ms_per_round", json_real(v_round));
    json_object_set_new(j, "verify_cost", json_real(v_cost));
    json_object_set_new(j, "predicted_speedup", json_real(predicted));
    json_object_set_new(j, "measured_speedup", json_real(measured));
    json_object_set_new(j, "plain", json_pack("{s:i,s:f,s:f}", "new_tokens", np_new, "decode_ms", plain_ms, "tok_s",
                                              plain_ms > 0 ? np_new / (plain_ms / 1e3) : 0.0));
    json_object_set_new(j, "spec", json_pack("{s:f,s:f,s:f,s:f,s:s}", "decode_ms", st.decode_ms, "tok_s",
                                             st.decode_ms > 0 ? st.new_tokens / (st.decode_ms / 1e3) : 0.0,
                                             "draft_ms", st.draft_ms, "verify_ms", st.verify_ms, "stop", st.stop));
    json_t *ids = json_array();
    for (int i = 0; i < st.new_tokens; i++)
        json_array_append_new(ids, json_integer(spec[i]));
    json_object_set_new(j, "ids", ids);
    int rc = 0;
    if (opt.json) {
        rc = ogk_json_print(stdout, j) < 0 ? OGK_EXIT_CHECK : 0;
    } else {
        printf("target %s, drafter %s, k %d, %s, %d threads; prompt %d tokens, %d generated\n", opt.target, opt.draft,
               opt.k, kern_mode_name(opt.mode), kern_pool_threads(ts->pool), np, st.new_tokens);
        printf("acceptance     %d of %d drafts (%.1f %%), %.3f tokens per round over %d rounds\n", st.accepted,
               st.drafted, 100 * alpha, tpr, st.rounds);
        printf("costs          target %.3f ms/token, drafter %.3f ms/token (c = %.3f), verify %.3f ms/round (%.2f "
               "target steps)\n",
               t_tok, d_tok, c_ratio, v_round, v_cost);
        printf("speed-up       predicted %.2fx (tokens per round / round cost), measured %.2fx (%.1f vs %.1f tok/s)\n",
               predicted, measured, spec_tok > 0 ? 1e3 / spec_tok : 0, t_tok > 0 ? 1e3 / t_tok : 0);
        if (diff < 0)
            printf("output         identical to plain greedy decoding\n");
        else
            printf("output         differs from plain greedy at token %d%s\n", diff,
                   real_diff ? "" : " (a near-tie there: top-1/top-2 gap below 1e-3)");
        if (fflush(stdout))
            rc = OGK_EXIT_INPUT;
    }
    json_decref(j);
    if (real_diff) {
        ogk_err("the speculative output differs from plain greedy at token %d (plain top-1/top-2 gap %g)", diff,
                diff < np_new ? gap[diff] : 0.0);
        rc = OGK_EXIT_CHECK;
    }
    model_state_free(ts), model_state_free(ds);
    model_close(T), model_close(D);
    free(prompt), free(plain), free(spec), free(gap);
    return rc;
}
