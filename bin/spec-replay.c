/* spec-replay: greedy speculative decoding of a target model with a drafter, measured against the
 * target's plain greedy decoding of the same prompt in the same process: drafter acceptance, its
 * economics (what the drafter and the verify pass cost in target decode steps, and the speed-up that
 * predicts) and the real end-to-end speed-up. See man/man1/spec-replay.1. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kern/kern.h"
#include "model/model.h"
#include "tok/tok.h"
#include "util/util.h"

#define GAP_TIE 1e-3f /* a plain-greedy step whose top-1/top-2 logit gap is below this is a near-tie */

static void usage(FILE *f)
{
    fputs("usage: spec-replay -m TARGET.q4nx -d DRAFT.q4nx (-p TEXT | -f FILE | --ids FILE) [options]\n"
          "Greedy speculative decoding of TARGET with DRAFT against TARGET's plain greedy decoding of the\n"
          "same prompt: acceptance, cost ratios, predicted and measured speed-up. A table, or JSON.\n"
          "  -m, --model T       target container\n"
          "  -d, --draft D       drafter container (same vocabulary)\n"
          "  -p, --prompt TEXT   prompt text (the target's tokenizer); -f FILE (\"-\": stdin); --ids FILE\n"
          "                      (a JSON array of token ids)\n"
          "  -n N                tokens to generate (default 128)\n"
          "  -k K                drafted tokens per round, 1..16 (default 4)\n"
          "  -t THREADS          worker threads (default: online CPUs)\n"
          "  -c CONTEXT          positions per KV cache (default: prompt + n + k + 1)\n"
          "  --mode f32|i8       activations of both models (default f32)\n"
          "  --ignore-eos        keep going past EOS ids\n"
          "  --no-mmap           read both containers into 2 MiB huge pages\n"
          "  --json              JSON instead of the table\n"
          "  -h, --help          this text\n"
          "Exit: 0 ok, 1 the speculative output differs from plain greedy at a step that is not a\n"
          "near-tie, 2 usage, 3 input refused, 4 init failed (a model, a vocabulary mismatch).\n",
          f);
}

static struct {
    const char *target, *draft, *prompt, *prompt_file, *ids_file;
    int n, k, threads, context, mode, ignore_eos, json, no_mmap;
} o = {.n = 128, .k = 4, .mode = KERN_F32};

static model *open_model(const char *path)
{
    ogk_error e;
    int code;
    model *m = model_open_flags(path, o.no_mmap ? Q4NX_OPEN_LOAD : 0, &e, &code);
    if (!m)
        ogk_die(code, "%s", e.msg);
    return m;
}

static int *prompt_ids(const model *m, int *n)
{
    ogk_error e;
    if (o.ids_file) {
        int *ids = model_read_ids(o.ids_file, n, &e);
        if (!ids)
            ogk_die(OGK_EXIT_INPUT, "%s", e.msg);
        return ids;
    }
    tok *t = model_tokenizer(m, &e);
    if (!t)
        ogk_die(OGK_EXIT_INIT, "%s: %s", o.target, e.msg);
    size_t len;
    char *text = o.prompt ? strdup(o.prompt) : model_read_text(o.prompt_file, &len, &e);
    if (!text)
        ogk_die(OGK_EXIT_INPUT, "%s", e.msg);
    if (o.prompt)
        len = strlen(text);
    int *ids = model_encode(t, text, len, 1, n, &e);
    free(text);
    tok_free(t);
    if (!ids)
        ogk_die(OGK_EXIT_INPUT, "prompt: %s", e.msg);
    return ids;
}

/* the drafter must number tokens as the target does: same vocabulary size, and a warning when the
 * tokenizer files differ (ids still pass through, as they would in any speculative decoder) */
static void check_pair(const model *T, const model *D)
{
    if (T->c.vocab_size != D->c.vocab_size)
        ogk_die(OGK_EXIT_INIT, "%s has a vocabulary of %d, %s of %d: a drafter must share the target's", o.draft,
                D->c.vocab_size, o.target, T->c.vocab_size);
    const uint8_t *a, *b;
    size_t al, bl;
    int ha = !q4nx_asset(T->file, "tokenizer.json", &a, &al), hb = !q4nx_asset(D->file, "tokenizer.json", &b, &bl);
    if (ha != hb || (ha && (al != bl || memcmp(a, b, al))))
        ogk_err("warning: %s: its tokenizer.json differs from %s's; token ids are used as they are", o.draft, o.target);
}

static model_state *new_state(const model *m, int context, int logit_rows)
{
    ogk_error e;
    model_state *s = model_state_new(m, context, logit_rows, o.mode, o.threads, &e);
    if (!s)
        ogk_die(OGK_EXIT_INIT, "%s", e.msg);
    return s;
}

int main(int argc, char **argv)
{
    ogk_prog_set(argv[0]);
    enum { O_IDS = 256, O_MODE, O_IGNORE_EOS, O_JSON, O_NO_MMAP };
    static const struct option lo[] = {
        {"model", 1, 0, 'm'},      {"draft", 1, 0, 'd'},  {"prompt", 1, 0, 'p'},
        {"file", 1, 0, 'f'},       {"ids", 1, 0, O_IDS},  {"mode", 1, 0, O_MODE},
        {"ignore-eos", 0, 0, O_IGNORE_EOS}, {"json", 0, 0, O_JSON}, {"no-mmap", 0, 0, O_NO_MMAP},
        {"help", 0, 0, 'h'},       {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "m:d:p:f:n:k:t:c:h", lo, NULL)) != -1) {
        switch (c) {
        case 'm': o.target = optarg; break;
        case 'd': o.draft = optarg; break;
        case 'p': o.prompt = optarg; break;
        case 'f': o.prompt_file = optarg; break;
        case O_IDS: o.ids_file = optarg; break;
        case 'n': o.n = (int)ogk_parse_long("-n", optarg, 1, 1 << 20); break;
        case 'k': o.k = (int)ogk_parse_long("-k", optarg, 1, 16); break;
        case 't': o.threads = (int)ogk_parse_long("-t", optarg, 1, 1024); break;
        case 'c': o.context = (int)ogk_parse_long("-c", optarg, 2, 1 << 24); break;
        case O_MODE:
            if ((o.mode = kern_mode_parse(optarg)) < 0)
                ogk_die(OGK_EXIT_USAGE, "--mode: '%s' is not f32 or i8", optarg);
            break;
        case O_IGNORE_EOS: o.ignore_eos = 1; break;
        case O_JSON: o.json = 1; break;
        case O_NO_MMAP: o.no_mmap = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return OGK_EXIT_USAGE;
        }
    }
    if (optind < argc)
        ogk_die(OGK_EXIT_USAGE, "unexpected argument '%s'", argv[optind]);
    if (!o.target || !o.draft)
        ogk_die(OGK_EXIT_USAGE, "-m TARGET and -d DRAFT are both required (see --help)");
    if (!!o.prompt + !!o.prompt_file + !!o.ids_file != 1)
        ogk_die(OGK_EXIT_USAGE, "give exactly one of -p TEXT, -f FILE, --ids FILE");

    ogk_error e;
    if (kern_isa_init(&e)) /* a bad OGAKIT_KERNEL: the same refusal in every program */
        ogk_die(OGK_EXIT_INIT, "%s", e.msg);
    model *T = open_model(o.target), *D = open_model(o.draft);
    check_pair(T, D);
    int np;
    int *prompt = prompt_ids(T, &np);
    for (int i = 0; i < np; i++)
        if (prompt[i] >= T->c.vocab_size)
            ogk_die(OGK_EXIT_INPUT, "prompt: token id %d at %d is outside the vocabulary (%d)", prompt[i], i,
                    T->c.vocab_size);
    int ctx = o.context ? o.context : np + o.n + o.k + 1;
    if (ctx > T->c.context_length || ctx > D->c.context_length)
        ogk_die(OGK_EXIT_INPUT, "prompt %d + %d tokens + %d drafts need %d positions; the models hold %d and %d", np,
                o.n, o.k, np + o.n + o.k + 1, T->c.context_length, D->c.context_length);
    model_state *ts = new_state(T, ctx, o.k + 1), *ds = new_state(D, ctx, 1);

    int *plain = malloc(sizeof(int) * o.n), *spec = malloc(sizeof(int) * o.n);
    float *gap = malloc(sizeof(float) * o.n);
    if (!plain || !spec || !gap)
        ogk_die(OGK_EXIT_INIT, "out of memory");
    /* a warm-up of each (page faults, pool start-up), then the measured runs */
    double plain_ms;
    model_spec_stats st;
    int warm = o.n < 8 ? o.n : 8;
    if (model_greedy(ts, prompt, np, warm, o.ignore_eos, plain, NULL, &plain_ms, &e) < 0 ||
        model_spec_greedy(ts, ds, prompt, np, warm, o.k, o.ignore_eos, spec, &st, &e))
        ogk_die(OGK_EXIT_INPUT, "%s", e.msg);
    int np_new = model_greedy(ts, prompt, np, o.n, o.ignore_eos, plain, gap, &plain_ms, &e);
    if (np_new < 0 || model_spec_greedy(ts, ds, prompt, np, o.n, o.k, o.ignore_eos, spec, &st, &e))
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

    json_t *j = json_pack("{s:s,s:s,s:s,s:i,s:i,s:i,s:i}", "target", o.target, "draft", o.draft, "mode",
                          kern_mode_name(o.mode), "threads", kern_pool_threads(ts->pool), "k", o.k,
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
    if (o.json) {
        rc = ogk_json_print(stdout, j) < 0 ? OGK_EXIT_INPUT : 0;
    } else {
        printf("target %s, drafter %s, k %d, %s, %d threads; prompt %d tokens, %d generated\n", o.target, o.draft,
               o.k, kern_mode_name(o.mode), kern_pool_threads(ts->pool), np, st.new_tokens);
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
