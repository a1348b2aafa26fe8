/* spec-replay: speculative decoding measured three ways. Live: greedy speculative decoding of a target
 * with a drafter against the target's plain greedy decoding in one process (the end-to-end check of the
 * loop). Record: the target's greedy continuations of a prompt set, once, into a recording (a container
 * or an OpenAI-compatible server). Replay: drafters (a container or a server) against a recording at
 * one or more k, with the economics of each k. Thin: options, output and exit codes; the recording
 * format, the replay rule and the economics are lib/spec's. See man/man1/spec-replay.1 and
 * man/man5/spec-recording.5. */
#include <getopt.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/app.h"
#include "kern/kern.h"
#include "model/model.h"
#include "spec/spec.h"
#include "tok/tok.h"
#include "util/util.h"

#define GAP_TIE 1e-3f /* a plain-greedy step whose top-1/top-2 logit gap is below this is a near-tie */

static void usage(FILE *f)
{
    fputs("usage: spec-replay -m TARGET.q4nx -d DRAFT.q4nx (-p TEXT | -f FILE | --ids FILE) [options]   live\n"
          "       spec-replay record (-m TARGET.q4nx | --url URL) [--prompts FILE] [--tokens N] [-o OUT]\n"
          "       spec-replay (-d DRAFT.q4nx | --draft-url URL) [-k LIST] [--recording FILE] [economics] < REC\n"
          "       spec-replay --selftest\n"
          "Live: greedy speculative decoding of TARGET with DRAFT against TARGET's plain greedy decoding of\n"
          "the same prompt: acceptance, cost ratios, predicted and measured speed-up.\n"
          "Replay: a drafter against a recording (spec-replay record --help): rounds, acceptance, the\n"
          "drafter's measured cost, and with costs the projected speed-up per k.\n"
          "  -m, --model T       target container (live; with --measure: the target to time)\n"
          "  -d, --draft D       drafter container (same vocabulary)\n"
          "  --draft-url URL     replay: a drafter behind an OpenAI-compatible server (greedy /v1/completions)\n"
          "  -p, --prompt TEXT   live: prompt text (the target's tokenizer); -f FILE (\"-\": stdin); --ids FILE\n"
          "                      (a JSON array of token ids)\n"
          "  -n N                live: tokens to generate (default 128)\n"
          "  -k, --k K[,K...]    drafted tokens per round, 1..16 (default 4); replay: a list, one row per k\n"
          "  --recording FILE    replay: the recording (default: standard input)\n"
          "  --step-ms X         replay: one target decode step, ms (with --pass-ms)\n"
          "  --pass-ms Y[,Y...]  replay: one verify pass of k+1 rows, ms (one value, or one per k)\n"
          "  --measure           replay: time the step and the passes here, on -m TARGET\n"
          "  --timeout S         seconds per HTTP request (default 120)\n"
          "  -t THREADS          worker threads (default: online CPUs)\n"
          "  -c CONTEXT          live: positions per KV cache (default: prompt + n + k + 1)\n"
          "  --mode f32|i8       activations of the models (default f32)\n"
          "  --ignore-eos        live: keep going past EOS ids\n"
          "  --no-mmap           read containers into 2 MiB huge pages\n"
          "  --verify            check every weight's checksum of the containers first\n"
          "  --json              JSON instead of the table\n"
          "  --selftest          run the replay rule's and the economics' self-test (TAP)\n"
          "  -h, --help          this text\n"
          "Exit: 0 ok, 1 live output differs from plain greedy at a step that is not a near-tie, or a\n"
          "self-test arm failed, 2 usage, 3 input refused (a malformed recording, a drafter whose tokenizer\n"
          "or vocabulary does not fit it, a server unreachable), 4 init failed (a model).\n",
          f);
}

static void record_usage(FILE *f)
{
    fputs("usage: spec-replay record (-m TARGET.q4nx | --url URL [--tokenizer T]) [--prompts FILE]\n"
          "                          [--tokens N] [--ignore-eos] [--twice] [-o OUT] [-t THREADS] [--mode f32|i8]\n"
          "Records TARGET's greedy continuations of each prompt (default share/prompts/acceptance.json) as a\n"
          "recording (man 5 spec-recording) on stdout or, atomically, in OUT.\n"
          "  -m, --model T       the target container\n"
          "  --url URL           the target behind an OpenAI-compatible server (POST /v1/completions with\n"
          "                      token ids; llama-server's /completion as a fallback)\n"
          "  --tokenizer T       with --url: tokenizer of text prompts (a container or a tokenizer.json)\n"
          "  --prompts FILE      {\"prompts\": [{\"name\", \"kind\", \"text\" | \"ids\"}]} (default: acceptance.json)\n"
          "  --tokens N          tokens per prompt (default 64)\n"
          "  --ignore-eos        keep going past EOS ids (else a continuation ends before EOS)\n"
          "  --twice             record twice; exit 1 unless the continuations are identical\n"
          "  -o OUT              write OUT atomically instead of stdout\n"
          "  --timeout S         seconds per HTTP request (default 120)\n"
          "Exit: 0 ok, 1 --twice found different continuations, 2 usage, 3 a prompt file or server refused\n"
          "or unreachable, 4 init failed.\n",
          f);
}

static struct {
    const char *target, *draft, *prompt, *prompt_file, *ids_file;
    int n, k, threads, context, mode, ignore_eos, json, no_mmap, verify;
    /* replay */
    const char *draft_url, *recording;
    int ks[SPEC_K_MAX], nk;
    double step_ms, pass_ms[SPEC_K_MAX];
    int n_pass, measure, selftest;
    double timeout;
    /* record */
    const char *url, *tokenizer, *prompts, *out;
    int tokens, twice;
} o = {.n = 128, .k = 4, .mode = KERN_F32, .timeout = 120, .tokens = 64};

/* ---- shared: the model from the common options, a state, the live prompt ---- */
static model *open_model(const char *path)
{
    ogk_error e;
    int code;
    app_model_opts mo = {.model = path, .threads = o.threads, .mode = o.mode, .no_mmap = o.no_mmap, .verify = o.verify};
    model *m = app_model_open(&mo, &e, &code);
    if (!m)
        ogk_die(code, "%s", e.msg);
    return m;
}

/* the prompt's ids (--ids, or -p / -f encoded with the target's tokenizer); no more than max_ids */
static int *prompt_ids(const model *m, int max_ids, int *n)
{
    ogk_error e;
    if (o.ids_file) {
        int *ids = app_read_ids(o.ids_file, n, &e);
        if (!ids)
            ogk_die(OGK_EXIT_INPUT, "%s", e.msg);
        return ids;
    }
    tok *t = app_model_tokenizer(m, &e);
    if (!t)
        ogk_die(OGK_EXIT_INIT, "%s: %s", o.target, e.msg);
    app_prompt p = {.text = o.prompt};
    char *text = NULL;
    if (o.prompt)
        p.len = strlen(o.prompt);
    else if (!(text = app_read_text(o.prompt_file, &p.len, &e)))
        ogk_die(OGK_EXIT_INPUT, "%s", e.msg);
    else
        p.text = text;
    int *ids = app_prompt_ids(m, t, &p, max_ids, n, &e);
    if (!ids)
        ogk_die(OGK_EXIT_INPUT, "%s (the models hold %d positions)", e.msg, max_ids);
    free(text);
    tok_free(t);
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
    int code;
    app_model_opts mo = {.threads = o.threads, .mode = o.mode};
    model_state *s = app_state_new(m, &mo, context, logit_rows, &e, &code);
    if (!s)
        ogk_die(code, "%s", e.msg);
    return s;
}


/* text, token ids and tokenizers for the record and replay modes: the one place they call the
 * shared prompt helpers (so those can move without touching the modes) */
static char *read_text(const char *path, size_t *len, ogk_error *e) { return app_read_text(path, len, e); }
static tok *container_tokenizer(const model *m, ogk_error *e) { return app_model_tokenizer(m, e); }
/* text to ids with the post-processor's special tokens (as the live mode's -p and npu-forward run) */
static int *encode_text(tok *t, const char *text, size_t len, int *n, ogk_error *e)
{
    int32_t *v;
    size_t nn;
    if (tok_encode(t, text, len, 1, &v, &nn, e))
        return NULL;
    if (!nn) {
        free(v);
        ogk_fail(e, "empty (no tokens)");
        return NULL;
    }
    int *ids = malloc(sizeof(int) * nn);
    for (size_t i = 0; ids && i < nn; i++)
        ids[i] = v[i];
    free(v);
    if (!ids)
        ogk_fail(e, "out of memory");
    *n = (int)nn;
    return ids;
}

/* ---- live: both models in this process ---- */
static int live(void)
{
    if (!o.target || !o.draft)
        ogk_die(OGK_EXIT_USAGE, "-m TARGET and -d DRAFT are both required (see --help)");
    if (!!o.prompt + !!o.prompt_file + !!o.ids_file != 1)
        ogk_die(OGK_EXIT_USAGE, "give exactly one of -p TEXT, -f FILE, --ids FILE");

    ogk_error e;
    model *T = open_model(o.target), *D = open_model(o.draft);
    check_pair(T, D);
    int np;
    int *prompt = prompt_ids(T, T->c.context_length < D->c.context_length ? T->c.context_length : D->c.context_length, &np);
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

/* "a,b,c" of numbers into v (at most max); the count, or dies with usage naming opt */
static int parse_list(const char *opt, const char *s, double *v, int max, int integer, double lo, double hi)
{
    int n = 0;
    char *dup = strdup(s), *save = NULL;
    for (char *t = strtok_r(dup, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (n == max)
            ogk_die(OGK_EXIT_USAGE, "%s: more than %d values", opt, max);
        v[n++] = integer ? (double)ogk_parse_long(opt, t, (long)lo, (long)hi) : ogk_parse_double(opt, t);
        if (!integer && !(v[n - 1] >= lo && v[n - 1] <= hi))
            ogk_die(OGK_EXIT_USAGE, "%s: '%s' is not a time in ms above 0", opt, t);
    }
    free(dup);
    if (!n)
        ogk_die(OGK_EXIT_USAGE, "%s: no value", opt);
    return n;
}

/* ---- record ---- */

/* the default prompt set: $OGAKIT_SHARE/prompts, or next to the program (installed or build tree) */
static char *default_prompts(void)
{
    static const char *rel[] = {"../share/ogakit/prompts", "../../share/prompts", "../../../share/prompts"};
    const char *env = getenv("OGAKIT_SHARE");
    char exe[4096], path[4200];
    if (env) {
        snprintf(path, sizeof path, "%s/prompts/acceptance.json", env);
        return strdup(path);
    }
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *dir = dirname(exe);
        for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) {
            snprintf(path, sizeof path, "%s/%s/acceptance.json", dir, rel[i]);
            if (!access(path, R_OK))
                return strdup(path);
        }
    }
    ogk_die(OGK_EXIT_INPUT, "no default prompt set (share/prompts/acceptance.json) found; give --prompts FILE");
}

static tok *load_tokenizer(const char *path, char *hash, size_t *bytes)
{
    ogk_error e;
    int code;
    size_t len, clen = 0;
    const uint8_t *tj, *tc = NULL;
    char *file = NULL;
    q4nx_file *f = NULL;
    size_t pl = strlen(path);
    if (pl > 5 && !strcmp(path + pl - 5, ".q4nx")) {
        if (!(f = q4nx_open(path, &e, &code)))
            ogk_die(code, "--tokenizer: %s", e.msg);
        if (q4nx_asset(f, "tokenizer.json", &tj, &len))
            ogk_die(OGK_EXIT_INPUT, "--tokenizer: %s has no tokenizer.json", path);
        if (q4nx_asset(f, "tokenizer_config.json", &tc, &clen))
            tc = NULL, clen = 0;
    } else {
        if (!(file = ogk_read_file(path, &len, &e)))
            ogk_die(OGK_EXIT_INPUT, "--tokenizer: %s", e.msg);
        tj = (const uint8_t *)file;
    }
    spec_hash(tj, len, hash);
    *bytes = len;
    tok *t = tok_load((const char *)tj, len, (const char *)tc, clen, &e);
    if (!t)
        ogk_die(OGK_EXIT_INPUT, "--tokenizer: %s: %s", path, e.msg);
    free(file);
    q4nx_close(f);
    return t;
}

/* the prompt set: {"prompts": [...]} or a bare array; each {"name", "kind", "text" | "ids"} */
static json_t *load_prompts(const char *path)
{
    ogk_error e;
    size_t len;
    char *txt = read_text(path, &len, &e);
    if (!txt)
        ogk_die(OGK_EXIT_INPUT, "--prompts: %s", e.msg);
    json_error_t je;
    json_t *j = json_loadb(txt, len, 0, &je);
    free(txt);
    if (!j)
        ogk_die(OGK_EXIT_INPUT, "%s: not JSON (line %d: %s)", path, je.line, je.text);
    json_t *ps = json_is_array(j) ? j : json_object_get(j, "prompts");
    if (!json_is_array(ps) || !json_array_size(ps))
        ogk_die(OGK_EXIT_INPUT, "%s: want {\"prompts\": [...]} with at least one prompt", path);
    size_t i;
    json_t *p;
    json_array_foreach(ps, i, p)
    {
        const json_t *t = json_object_get(p, "text"), *ids = json_object_get(p, "ids");
        if (!json_is_object(p) || (!json_is_string(t) && !json_is_array(ids)))
            ogk_die(OGK_EXIT_INPUT, "%s: prompts[%zu]: want an object with \"text\" or \"ids\"", path, i);
    }
    json_incref(ps);
    json_decref(j);
    return ps;
}

static int *prompt_of(const json_t *p, tok *t, const char *where, size_t i, int vocab, int *n)
{
    ogk_error e;
    const json_t *ids = json_object_get(p, "ids"), *text = json_object_get(p, "text");
    int *v;
    if (json_is_array(ids)) {
        *n = (int)json_array_size(ids);
        v = malloc(sizeof(int) * (size_t)(*n + 1));
        for (int k = 0; k < *n; k++) {
            const json_t *x = json_array_get(ids, (size_t)k);
            if (!json_is_integer(x) || json_integer_value(x) < 0 || (vocab && json_integer_value(x) >= vocab))
                ogk_die(OGK_EXIT_INPUT, "%s: prompts[%zu].ids[%d] is not a token id of the target", where, i, k);
            v[k] = (int)json_integer_value(x);
        }
        if (!*n)
            ogk_die(OGK_EXIT_INPUT, "%s: prompts[%zu].ids is empty", where, i);
        return v;
    }
    if (!t)
        ogk_die(OGK_EXIT_USAGE, "%s: prompts[%zu] is text: --url needs --tokenizer T to turn it into ids", where, i);
    v = encode_text(t, json_string_value(text), json_string_length(text), n, &e);
    if (!v)
        ogk_die(OGK_EXIT_INPUT, "%s: prompts[%zu]: %s", where, i, e.msg);
    return v;
}

static char *decode_text(tok *t, const int *ids, int n)
{
    if (!t || !n)
        return t ? strdup("") : NULL;
    ogk_error e;
    size_t len;
    int32_t *v = malloc(sizeof(int32_t) * (size_t)n);
    for (int i = 0; v && i < n; i++)
        v[i] = ids[i];
    char *s = v ? tok_decode(t, v, (size_t)n, 1, 0, &len, &e) : NULL;
    free(v);
    return s;
}

typedef struct {
    model *T;
    model_state *ts;
    spec_http *h;
    tok *t;
} rec_peer;

/* one pass over the prompts into a new recording document */
static json_t *record_once(rec_peer *rp, json_t *ps, json_t *target, json_t *tokenizer, int vocab)
{
    ogk_error e;
    json_t *set = json_pack("{s:i,s:b,s:b}", "tokens", o.tokens, "ignore_eos", o.ignore_eos, "greedy", 1);
    if (rp->T)
        json_object_set_new(set, "mode", json_string(o.mode == KERN_I8 ? "i8" : "f32")),
            json_object_set_new(set, "threads", json_integer(kern_pool_threads(rp->ts->pool)));
    json_incref(target);
    if (tokenizer)
        json_incref(tokenizer);
    json_t *doc = spec_rec_new(target, tokenizer, vocab, set);
    size_t i;
    json_t *pj;
    json_array_foreach(ps, i, pj)
    {
        spec_prompt p = {0};
        const json_t *nm = json_object_get(pj, "name"), *kd = json_object_get(pj, "kind"),
                     *tx = json_object_get(pj, "text");
        char defname[32];
        snprintf(defname, sizeof defname, "prompt %zu", i);
        p.name = json_is_string(nm) ? (char *)json_string_value(nm) : defname;
        p.kind = json_is_string(kd) ? (char *)json_string_value(kd) : NULL;
        p.text = json_is_string(tx) ? (char *)json_string_value(tx) : NULL;
        p.ids = prompt_of(pj, rp->t, o.prompts, i, rp->T ? rp->T->c.vocab_size : 0, &p.n_ids);
        p.decode_ms = p.request_ms = -1;
        spec_completion c = {0};
        if (rp->T) {
            if (p.n_ids + o.tokens + 1 > rp->ts->context)
                ogk_die(OGK_EXIT_INPUT, "prompt '%s': %d tokens + %d do not fit the target's context (%d)", p.name,
                        p.n_ids, o.tokens, rp->ts->context);
            p.cont = malloc(sizeof(int) * (size_t)o.tokens);
            p.gaps = malloc(sizeof(float) * (size_t)o.tokens);
            p.n_cont = model_greedy(rp->ts, p.ids, p.n_ids, o.tokens, o.ignore_eos, p.cont, p.gaps, &p.decode_ms, &e);
            if (p.n_cont < 0)
                ogk_die(OGK_EXIT_INPUT, "prompt '%s': %s", p.name, e.msg);
            p.stop = p.n_cont == o.tokens ? "length" : "eos";
        } else {
            if (spec_http_complete(rp->h, p.ids, p.n_ids, o.tokens, o.ignore_eos, 1, &c, &e))
                ogk_die(OGK_EXIT_INPUT, "prompt '%s': %s", p.name, e.msg);
            p.cont = c.ids, p.n_cont = c.n, p.gaps = c.gaps, p.stop = c.stop, p.request_ms = c.ms;
            c.ids = NULL, c.gaps = NULL;
        }
        p.cont_text = rp->t ? decode_text(rp->t, p.cont, p.n_cont) : (c.text ? strdup(c.text) : NULL);
        if (spec_rec_add(doc, &p, &e))
            ogk_die(OGK_EXIT_INIT, "%s", e.msg);
        spec_completion_free(&c);
        free(p.ids), free(p.cont), free(p.gaps), free(p.cont_text);
    }
    return doc;
}

static int record_main(int argc, char **argv)
{
    enum { R_URL = 256, R_TOKENIZER, R_PROMPTS, R_TOKENS, R_IGNORE_EOS, R_TWICE, R_MODE, R_NO_MMAP, R_TIMEOUT };
    static const struct option lo[] = {{"model", 1, 0, 'm'},         {"url", 1, 0, R_URL},
                                       {"tokenizer", 1, 0, R_TOKENIZER}, {"prompts", 1, 0, R_PROMPTS},
                                       {"tokens", 1, 0, R_TOKENS},   {"ignore-eos", 0, 0, R_IGNORE_EOS},
                                       {"twice", 0, 0, R_TWICE},     {"mode", 1, 0, R_MODE},
                                       {"no-mmap", 0, 0, R_NO_MMAP}, {"timeout", 1, 0, R_TIMEOUT},
                                       {"output", 1, 0, 'o'},        {"help", 0, 0, 'h'},
                                       {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:o:t:n:h", lo, NULL)) != -1) {
        switch (c) {
        case 'm': o.target = optarg; break;
        case R_URL: o.url = optarg; break;
        case R_TOKENIZER: o.tokenizer = optarg; break;
        case R_PROMPTS: o.prompts = optarg; break;
        case 'n':
        case R_TOKENS: o.tokens = (int)ogk_parse_long("--tokens", optarg, 1, 1 << 20); break;
        case R_IGNORE_EOS: o.ignore_eos = 1; break;
        case R_TWICE: o.twice = 1; break;
        case R_MODE:
            if (strcmp(optarg, "f32") && strcmp(optarg, "i8"))
                ogk_die(OGK_EXIT_USAGE, "--mode: '%s' is not f32 or i8", optarg);
            o.mode = strcmp(optarg, "i8") ? KERN_F32 : KERN_I8;
            break;
        case R_NO_MMAP: o.no_mmap = 1; break;
        case R_TIMEOUT: o.timeout = ogk_parse_double("--timeout", optarg); break;
        case 'o': o.out = optarg; break;
        case 't': o.threads = (int)ogk_parse_long("-t", optarg, 1, 1024); break;
        case 'h': record_usage(stdout); return 0;
        default: record_usage(stderr); return OGK_EXIT_USAGE;
        }
    }
    if (optind < argc)
        ogk_die(OGK_EXIT_USAGE, "record: unexpected argument '%s'", argv[optind]);
    if (!!o.target + !!o.url != 1)
        ogk_die(OGK_EXIT_USAGE, "record: give exactly one target, -m TARGET.q4nx or --url URL (see record --help)");
    if (o.tokenizer && !o.url)
        ogk_die(OGK_EXIT_USAGE, "record: --tokenizer goes with --url (a container brings its own)");
    if (!(o.timeout > 0))
        ogk_die(OGK_EXIT_USAGE, "--timeout: want seconds above 0");
    char *dflt = o.prompts ? NULL : default_prompts();
    if (dflt)
        o.prompts = dflt;
    json_t *ps = load_prompts(o.prompts);

    ogk_error e;
    rec_peer rp = {0};
    json_t *target, *tokenizer = NULL;
    char hash[16];
    int vocab = 0;
    if (o.target) {
        if (kern_isa_init(&e))
            ogk_die(OGK_EXIT_INIT, "%s", e.msg);
        rp.T = open_model(o.target);
        vocab = rp.T->c.vocab_size;
        rp.t = container_tokenizer(rp.T, &e); /* NULL: ids-only prompts still work */
        const uint8_t *tj;
        size_t tl;
        if (!q4nx_asset(rp.T->file, "tokenizer.json", &tj, &tl)) {
            spec_hash(tj, tl, hash);
            tokenizer = json_pack("{s:s,s:I}", "hash", hash, "bytes", (json_int_t)tl);
        }
        int ctx = 0;
        size_t i;
        json_t *pj;
        json_array_foreach(ps, i, pj)
        {
            int n;
            int *ids = prompt_of(pj, rp.t, o.prompts, i, vocab, &n);
            if (n + o.tokens + 1 > ctx)
                ctx = n + o.tokens + 1;
            free(ids);
        }
        if (ctx > rp.T->c.context_length)
            ogk_die(OGK_EXIT_INPUT, "the longest prompt + %d tokens needs %d positions; %s holds %d", o.tokens, ctx,
                    o.target, rp.T->c.context_length);
        rp.ts = new_state(rp.T, ctx, 1);
        char *name = strdup(o.target);
        size_t fsz = (size_t)q4nx_file_size(rp.T->file);
        spec_hash(q4nx_file_bytes(rp.T->file), fsz, hash);
        target = json_pack("{s:s,s:s,s:s,s:I}", "container", o.target, "name", basename(name), "checksum", hash,
                           "bytes", (json_int_t)fsz);
        free(name);
    } else {
        if (!(rp.h = spec_http_new(o.url, o.timeout, &e)))
            ogk_die(OGK_EXIT_USAGE, "--url: %s", e.msg);
        if (o.tokenizer) {
            size_t tl;
            rp.t = load_tokenizer(o.tokenizer, hash, &tl);
            tokenizer = json_pack("{s:s,s:I}", "hash", hash, "bytes", (json_int_t)tl);
        }
        char *id = spec_http_model_id(rp.h);
        target = json_pack("{s:s,s:s?}", "url", o.url, "model", id);
        free(id);
    }
    json_t *doc = record_once(&rp, ps, target, tokenizer, vocab);
    int rc = 0;
    if (o.twice) {
        json_t *again = record_once(&rp, ps, target, tokenizer, vocab);
        int same = spec_rec_same_continuations(doc, again);
        json_object_set_new(doc, "determinism", json_pack("{s:i,s:b}", "runs", 2, "identical", same));
        if (!same) {
            ogk_err("record --twice: the two recordings' continuations differ (the target is not deterministic)");
            rc = OGK_EXIT_CHECK;
        } else {
            ogk_err("record --twice: both recordings' continuations are identical");
        }
        json_decref(again);
    }
    char *s = json_dumps(doc, JSON_COMPACT);
    ogk_out out;
    if (o.out) {
        if (ogk_out_open(&out, o.out, &e))
            ogk_die(OGK_EXIT_INPUT, "%s", e.msg);
        if (!s || ogk_write_all(out.fd, s, strlen(s)) || ogk_write_all(out.fd, "\n", 1) || ogk_out_commit(&out, &e)) {
            ogk_out_abort(&out);
            ogk_die(OGK_EXIT_INPUT, "%s: cannot write the recording", o.out);
        }
    } else if (!s || fputs(s, stdout) == EOF || fputs("\n", stdout) == EOF || fflush(stdout)) {
        ogk_die(OGK_EXIT_INPUT, "stdout: cannot write the recording");
    }
    free(s);
    json_decref(doc), json_decref(target), json_decref(tokenizer), json_decref(ps);
    if (rp.t)
        tok_free(rp.t);
    if (rp.ts)
        model_state_free(rp.ts);
    if (rp.T)
        model_close(rp.T);
    spec_http_free(rp.h);
    free(dflt);
    return rc;
}

/* ---- replay ---- */

static const char *prompt_name(const spec_prompt *p, int i)
{
    static char buf[32];
    if (p->name)
        return p->name;
    snprintf(buf, sizeof buf, "prompt %d", i);
    return buf;
}

/* the drafter's tokenizer must read every recorded prompt text as the target did */
static void check_drafter_tokenizer(const spec_rec *r, const model *D)
{
    ogk_error e;
    const uint8_t *tj;
    size_t tl;
    if (q4nx_asset(D->file, "tokenizer.json", &tj, &tl)) {
        ogk_err("warning: %s has no tokenizer.json: prompt texts are not checked against it", o.draft);
        return;
    }
    char hash[16];
    spec_hash(tj, tl, hash);
    if (r->tokenizer_hash && strcmp(hash, r->tokenizer_hash))
        ogk_err("warning: %s: its tokenizer.json (%s) is not the recorded target's (%s); checking each prompt", o.draft,
                hash, r->tokenizer_hash);
    tok *t = container_tokenizer(D, &e);
    if (!t)
        ogk_die(OGK_EXIT_INPUT, "%s: %s", o.draft, e.msg);
    for (int i = 0; i < r->n; i++) {
        const spec_prompt *p = &r->p[i];
        if (!p->text)
            continue;
        int n;
        int *ids = encode_text(t, p->text, strlen(p->text), &n, &e);
        if (!ids)
            ogk_die(OGK_EXIT_INPUT, "prompt %d (%s): the drafter's tokenizer: %s", i, prompt_name(p, i), e.msg);
        if (spec_check_prefix(p, i, ids, n, &e))
            ogk_die(OGK_EXIT_INPUT, "%s: %s", o.draft, e.msg);
        free(ids);
    }
    tok_free(t);
}

static int econ_json(json_t *proj, double tpr, double step, double pass, double draft_per_round, const char **why)
{
    spec_econ ec;
    ogk_error e;
    if (spec_economics(tpr, step, pass, draft_per_round, &ec, &e)) {
        *why = NULL;
        json_object_set_new(proj, "refused", json_string(e.msg));
        return -1;
    }
    json_object_set_new(proj, "verify_pass_steps", json_real(ec.verify_steps));
    json_object_set_new(proj, "drafter_steps_per_round", json_real(ec.draft_steps));
    json_object_set_new(proj, "break_even_tokens_per_round",
                        json_pack("{s:f,s:f}", "one_pass", ec.break_even_one, "two_pass", ec.break_even_two));
    json_object_set_new(proj, "speedup", json_pack("{s:f,s:f}", "one_pass", ec.speedup_one, "two_pass", ec.speedup_two));
    return 0;
}

static const char *speed_word(double s) { return s < 1 ? " (slow-down)" : ""; }

static int replay(void)
{
    ogk_error e;
    if (isatty(0) && !o.recording)
        ogk_die(OGK_EXIT_USAGE, "no recording: give --recording FILE or one on standard input (see --help)");
    const char *where = o.recording ? o.recording : "stdin";
    size_t len;
    char *txt = read_text(o.recording ? o.recording : "-", &len, &e);
    if (!txt)
        ogk_die(OGK_EXIT_INPUT, "%s", e.msg);
    spec_rec *r = spec_rec_parse(txt, len, where, &e);
    free(txt);
    if (!r)
        ogk_die(OGK_EXIT_INPUT, "%s", e.msg);
    int kmax = 0;
    for (int i = 0; i < o.nk; i++)
        kmax = o.ks[i] > kmax ? o.ks[i] : kmax;

    /* the drafter */
    model *D = NULL;
    model_state *ds = NULL;
    spec_model_drafter md = {0};
    spec_http *h = NULL;
    spec_drafter drafter;
    if (kern_isa_init(&e))
        ogk_die(OGK_EXIT_INIT, "%s", e.msg);
    if (o.draft) {
        D = open_model(o.draft);
        if (spec_check_vocab(r, D->c.vocab_size, &e))
            ogk_die(OGK_EXIT_INPUT, "%s: %s", o.draft, e.msg);
        check_drafter_tokenizer(r, D);
        int ctx = 0;
        for (int i = 0; i < r->n; i++)
            if (r->p[i].n_ids + r->p[i].n_cont + kmax + 1 > ctx)
                ctx = r->p[i].n_ids + r->p[i].n_cont + kmax + 1;
        if (ctx > D->c.context_length)
            ogk_die(OGK_EXIT_INPUT, "%s: the longest prompt + continuation + %d drafts needs %d positions; it holds %d",
                    o.draft, kmax, ctx, D->c.context_length);
        ds = new_state(D, ctx, 1);
        if (spec_model_drafter_init(&md, ds, &e))
            ogk_die(OGK_EXIT_INIT, "%s", e.msg);
        drafter = (spec_drafter){spec_model_draft, spec_model_prefill, &md};
    } else {
        if (!(h = spec_http_new(o.draft_url, o.timeout, &e)))
            ogk_die(OGK_EXIT_USAGE, "--draft-url: %s", e.msg);
        drafter = (spec_drafter){spec_http_draft, NULL, h};
        ogk_err("note: a drafter behind %s: its vocabulary and tokenizer cannot be checked against the recording",
                o.draft_url);
    }

    /* the target's costs: given, or measured here */
    const char *cost_source = NULL;
    double pass_ms[SPEC_K_MAX];
    double step_ms = o.step_ms;
    if (o.n_pass) {
        cost_source = "given";
        for (int i = 0; i < o.nk; i++)
            pass_ms[i] = o.pass_ms[o.n_pass == 1 ? 0 : i];
    } else if (o.measure) {
        cost_source = "measured";
        model *T = open_model(o.target);
        char hash[16];
        spec_hash(q4nx_file_bytes(T->file), (size_t)q4nx_file_size(T->file), hash);
        const json_t *ck = json_object_get(r->target, "checksum");
        if (!json_is_string(ck) || strcmp(json_string_value(ck), hash))
            ogk_err("warning: %s (%s) is not the recorded target's container; its costs are measured anyway", o.target,
                    hash);
        const spec_prompt *p0 = &r->p[0];
        model_state *ts = new_state(T, p0->n_ids + kmax + 2, kmax + 1);
        for (int i = 0; i < o.nk; i++) {
            double s;
            if (spec_model_time_passes(ts, p0->ids, p0->n_ids, o.ks[i] + 1, 5, &s, &pass_ms[i], &e))
                ogk_die(OGK_EXIT_INPUT, "--measure: %s", e.msg);
            step_ms = i ? (step_ms < s ? step_ms : s) : s; /* the fastest of the per-k medians */
        }
        for (int i = 0; i < o.nk; i++)
            if (pass_ms[i] < step_ms) {
                ogk_err("note: k %d: the measured verify pass (%.3f ms) was below a step (%.3f ms); counted as one "
                        "step",
                        o.ks[i], pass_ms[i], step_ms);
                pass_ms[i] = step_ms;
            }
        model_state_free(ts);
        model_close(T);
    }

    json_t *res = json_array();
    int warned = 0;
    for (int ki = 0; ki < o.nk; ki++) {
        int k = o.ks[ki];
        int R = 0, off = 0, acc = 0, com = 0;
        double dms = 0, pms = 0; /* drafting, and the drafter's prompt prefills (not a round's cost) */
        json_t *per = json_array();
        for (int i = 0; i < r->n; i++) {
            const spec_prompt *p = &r->p[i];
            spec_result sr;
            if (spec_replay(p->ids, p->n_ids, p->cont, p->n_cont, k, &drafter, &sr, &e))
                ogk_die(OGK_EXIT_INPUT, "prompt %d (%s), k %d: %s", i, prompt_name(p, i), k, e.msg);
            json_t *al = json_array();
            for (int j = 0; j < sr.rounds; j++)
                json_array_append_new(al, json_integer(sr.accepts[j]));
            const char *warn = NULL;
            if (sr.offered > 0 && sr.accepted == sr.offered)
                warn = "every draft accepted: is the drafter the target, or the recording the drafter's?";
            else if (sr.offered > 0 && sr.accepted == 0)
                warn = "no draft accepted: another tokenizer or model family, or a broken drafter?";
            if (warn) {
                ogk_err("warning: k %d, prompt %d (%s): %s", k, i, prompt_name(p, i), warn);
                warned++;
            }
            json_t *pp = json_object();
            json_object_set_new(pp, "name", json_string(prompt_name(p, i)));
            json_object_set_new(pp, "kind", p->kind ? json_string(p->kind) : json_null());
            json_object_set_new(pp, "rounds", json_integer(sr.rounds));
            json_object_set_new(pp, "tokens", json_integer(sr.committed));
            json_object_set_new(pp, "tokens_per_round", json_real(sr.rounds ? (double)sr.committed / sr.rounds : 0));
            json_object_set_new(pp, "offered", json_integer(sr.offered));
            json_object_set_new(pp, "accepted", json_integer(sr.accepted));
            json_object_set_new(pp, "acceptance_rate", json_real(sr.offered ? (double)sr.accepted / sr.offered : 0));
            json_object_set_new(pp, "accepts", al);
            json_object_set_new(pp, "drafter_ms_per_drafted_token", json_real(sr.offered ? sr.draft_ms / sr.offered : 0));
            json_object_set_new(pp, "warning", warn ? json_string(warn) : json_null());
            json_array_append_new(per, pp);
            R += sr.rounds, off += sr.offered, acc += sr.accepted, com += sr.committed, dms += sr.draft_ms, pms += sr.prefill_ms;
            spec_result_free(&sr);
        }
        double tpr = R ? (double)com / R : 0;
        json_t *meas = json_object();
        json_object_set_new(meas, "rounds", json_integer(R));
        json_object_set_new(meas, "tokens", json_integer(com));
        json_object_set_new(meas, "tokens_per_round", json_real(tpr));
        json_object_set_new(meas, "offered", json_integer(off));
        json_object_set_new(meas, "accepted", json_integer(acc));
        json_object_set_new(meas, "acceptance_rate", json_real(off ? (double)acc / off : 0));
        json_object_set_new(meas, "drafter_ms", json_real(dms));
        json_object_set_new(meas, "drafter_ms_per_drafted_token", json_real(off ? dms / off : 0));
        json_object_set_new(meas, "drafter_ms_per_round", json_real(R ? dms / R : 0));
        json_object_set_new(meas, "drafter_prefill_ms", json_real(pms));
        json_object_set_new(meas, "per_prompt", per);
        json_t *row = json_pack("{s:i,s:o}", "k", k, "measured", meas);
        if (cost_source) {
            json_t *proj = json_pack("{s:s,s:f,s:f}", "costs", cost_source, "step_ms", step_ms, "pass_ms", pass_ms[ki]);
            const char *why;
            econ_json(proj, tpr, step_ms, pass_ms[ki], R ? dms / R : 0, &why);
            json_object_set_new(row, "projected", proj);
        } else {
            json_object_set_new(row, "projected", json_null());
        }
        json_array_append_new(res, row);
    }

    json_t *out = json_object();
    json_object_set_new(out, "recording", json_pack("{s:O,s:i,s:s?}", "target", r->target, "prompts", r->n,
                                                    "tokenizer_hash", r->tokenizer_hash));
    json_object_set_new(out, "drafter", o.draft ? json_pack("{s:s,s:i}", "container", o.draft, "vocab_size",
                                                            D->c.vocab_size)
                                                : json_pack("{s:s}", "url", o.draft_url));
    json_object_set_new(out, "results", res);
    int rc = 0;
    if (o.json) {
        rc = ogk_json_print(stdout, out) < 0 ? OGK_EXIT_INPUT : 0;
    } else {
        const json_t *tg = r->target;
        const char *tname = json_string_value(json_object_get(tg, json_object_get(tg, "name") ? "name" : "url"));
        printf("recording: target %s, %d prompts; drafter %s\n", tname ? tname : "?", r->n,
               o.draft ? o.draft : o.draft_url);
        if (cost_source)
            printf("%-73s| projected (step %.3f ms, passes %s)\n", "measured (replay)", step_ms, cost_source);
        else
            printf("measured (replay)\n");
        printf("%3s  %6s  %6s  %9s  %7s  %8s  %7s  %12s ", "k", "rounds", "tokens", "tok/round", "offered", "accepted",
               "rate", "draft ms/tok");
        if (cost_source)
            printf("| verify steps  break-even 1p / 2p  speed-up 1p / 2p");
        printf("\n");
        size_t i;
        json_t *row;
        json_array_foreach(res, i, row)
        {
            const json_t *m = json_object_get(row, "measured"), *pj = json_object_get(row, "projected");
#define NUM(o, k) json_number_value(json_object_get(o, k))
            printf("%3d  %6d  %6d  %9.3f  %7d  %8d  %5.1f %%  %12.4f ", (int)NUM(row, "k"), (int)NUM(m, "rounds"),
                   (int)NUM(m, "tokens"), NUM(m, "tokens_per_round"), (int)NUM(m, "offered"), (int)NUM(m, "accepted"),
                   100 * NUM(m, "acceptance_rate"), NUM(m, "drafter_ms_per_drafted_token"));
            if (json_is_object(pj) && json_object_get(pj, "refused"))
                printf("| refused: %s", json_string_value(json_object_get(pj, "refused")));
            else if (json_is_object(pj)) {
                const json_t *be = json_object_get(pj, "break_even_tokens_per_round"),
                             *sp = json_object_get(pj, "speedup");
                printf("| %12.3f  %7.3f / %7.3f  %.3fx%s / %.3fx%s", NUM(pj, "verify_pass_steps"), NUM(be, "one_pass"),
                       NUM(be, "two_pass"), NUM(sp, "one_pass"), speed_word(NUM(sp, "one_pass")), NUM(sp, "two_pass"),
                       speed_word(NUM(sp, "two_pass")));
            }
            printf("\n");
            size_t j;
            json_t *pp;
            json_array_foreach(json_object_get(m, "per_prompt"), j, pp)
            printf("%3s  %6d  %6d  %9.3f  %7d  %8d  %5.1f %%  %12.4f   %s\n", "", (int)NUM(pp, "rounds"),
                   (int)NUM(pp, "tokens"), NUM(pp, "tokens_per_round"), (int)NUM(pp, "offered"), (int)NUM(pp, "accepted"),
                   100 * NUM(pp, "acceptance_rate"), NUM(pp, "drafter_ms_per_drafted_token"),
                   json_string_value(json_object_get(pp, "name")));
#undef NUM
        }
        if (fflush(stdout))
            rc = OGK_EXIT_INPUT;
    }
    (void)warned;
    json_decref(out);
    spec_model_drafter_free(&md);
    if (ds)
        model_state_free(ds);
    if (D)
        model_close(D);
    spec_http_free(h);
    spec_rec_free(r);
    return rc;
}

/* ---- self-test ---- */
static int st_n;
static void st_report(int ok, const char *name, void *ctx)
{
    (void)ctx;
    printf("%sok %d - %s\n", ok ? "" : "not ", ++st_n, name);
}

int main(int argc, char **argv)
{
    ogk_prog_set(argv[0]);
    if (argc > 1 && !strcmp(argv[1], "record"))
        return record_main(argc - 1, argv + 1);
    enum { O_IDS = 256, O_MODE, O_IGNORE_EOS, O_JSON, O_NO_MMAP, O_DRAFT_URL, O_RECORDING, O_STEP, O_PASS, O_MEASURE,
           O_SELFTEST, O_TIMEOUT, O_VERIFY };
    static const struct option lo[] = {
        {"model", 1, 0, 'm'},       {"draft", 1, 0, 'd'},         {"prompt", 1, 0, 'p'},
        {"file", 1, 0, 'f'},        {"ids", 1, 0, O_IDS},         {"mode", 1, 0, O_MODE},
        {"ignore-eos", 0, 0, O_IGNORE_EOS}, {"json", 0, 0, O_JSON}, {"no-mmap", 0, 0, O_NO_MMAP},
        {"draft-url", 1, 0, O_DRAFT_URL}, {"recording", 1, 0, O_RECORDING}, {"step-ms", 1, 0, O_STEP},
        {"pass-ms", 1, 0, O_PASS},  {"measure", 0, 0, O_MEASURE}, {"selftest", 0, 0, O_SELFTEST},
        {"timeout", 1, 0, O_TIMEOUT}, {"k", 1, 0, 'k'},          {"help", 0, 0, 'h'},
        {"verify", 0, 0, O_VERIFY},
        {0, 0, 0, 0}};
    int c, k_given = 0;
    double v[SPEC_K_MAX];
    while ((c = getopt_long(argc, argv, "m:d:p:f:n:k:t:c:h", lo, NULL)) != -1) {
        switch (c) {
        case 'm': o.target = optarg; break;
        case 'd': o.draft = optarg; break;
        case 'p': o.prompt = optarg; break;
        case 'f': o.prompt_file = optarg; break;
        case O_IDS: o.ids_file = optarg; break;
        case 'n': o.n = (int)ogk_parse_long("-n", optarg, 1, 1 << 20); break;
        case 'k':
            o.nk = parse_list("-k", optarg, v, SPEC_K_MAX, 1, 1, SPEC_K_MAX);
            for (int i = 0; i < o.nk; i++)
                o.ks[i] = (int)v[i];
            o.k = o.ks[0], k_given = 1;
            break;
        case 't': o.threads = (int)ogk_parse_long("-t", optarg, 1, 1024); break;
        case 'c': o.context = (int)ogk_parse_long("-c", optarg, 2, 1 << 24); break;
        case O_MODE:
            if (!strcmp(optarg, "f32"))
                o.mode = KERN_F32;
            else if (!strcmp(optarg, "i8"))
                o.mode = KERN_I8;
            else
                ogk_die(OGK_EXIT_USAGE, "--mode: '%s' is not f32 or i8", optarg);
            break;
        case O_IGNORE_EOS: o.ignore_eos = 1; break;
        case O_JSON: o.json = 1; break;
        case O_NO_MMAP: o.no_mmap = 1; break;
        case O_VERIFY: o.verify = 1; break;
        case O_DRAFT_URL: o.draft_url = optarg; break;
        case O_RECORDING: o.recording = optarg; break;
        case O_STEP:
            o.step_ms = ogk_parse_double("--step-ms", optarg);
            if (!(o.step_ms > 0))
                ogk_die(OGK_EXIT_USAGE, "--step-ms: want a time in ms above 0");
            break;
        case O_PASS: o.n_pass = parse_list("--pass-ms", optarg, o.pass_ms, SPEC_K_MAX, 0, 1e-9, 1e12); break;
        case O_MEASURE: o.measure = 1; break;
        case O_SELFTEST: o.selftest = 1; break;
        case O_TIMEOUT:
            o.timeout = ogk_parse_double("--timeout", optarg);
            if (!(o.timeout > 0))
                ogk_die(OGK_EXIT_USAGE, "--timeout: want seconds above 0");
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return OGK_EXIT_USAGE;
        }
    }
    if (optind < argc)
        ogk_die(OGK_EXIT_USAGE, "unexpected argument '%s'", argv[optind]);
    if (o.selftest) {
        int fails = spec_selftest(st_report, NULL);
        printf("1..%d\n", st_n);
        return fails ? OGK_EXIT_CHECK : 0;
    }
    if (!k_given)
        o.ks[0] = o.k, o.nk = 1;
    int live_mode = o.prompt || o.prompt_file || o.ids_file;
    if (live_mode) {
        if (o.draft_url || o.recording || o.n_pass || o.step_ms > 0 || o.measure)
            ogk_die(OGK_EXIT_USAGE, "live mode (-p, -f, --ids) takes no --draft-url, --recording, --step-ms, "
                                    "--pass-ms or --measure: those are the replay's");
        if (o.nk > 1)
            ogk_die(OGK_EXIT_USAGE, "live mode runs one k; a list of k is for replays of a recording");
        return live();
    }
    /* replay */
    if (!!o.draft + !!o.draft_url != 1)
        ogk_die(OGK_EXIT_USAGE, o.draft || o.draft_url ? "give one drafter: -d DRAFT or --draft-url URL"
                                                      : "a replay needs a drafter: -d DRAFT or --draft-url URL; live "
                                                        "mode needs -m TARGET -d DRAFT and a prompt (see --help)");
    if (o.n_pass && !(o.step_ms > 0))
        ogk_die(OGK_EXIT_USAGE, "--pass-ms needs --step-ms (one target decode step, ms)");
    if (o.step_ms > 0 && !o.n_pass)
        ogk_die(OGK_EXIT_USAGE, "--step-ms needs --pass-ms (one verify pass of k+1 rows, ms)");
    if (o.n_pass > 1 && o.n_pass != o.nk)
        ogk_die(OGK_EXIT_USAGE, "--pass-ms: %d values for %d values of -k (give one, or one per k)", o.n_pass, o.nk);
    for (int i = 0; i < o.n_pass; i++)
        if (o.pass_ms[i] < o.step_ms)
            ogk_die(OGK_EXIT_USAGE, "--pass-ms %g is below --step-ms %g: a verify pass of k+1 rows costs at least one "
                                    "decode step",
                    o.pass_ms[i], o.step_ms);
    if (o.measure && o.n_pass)
        ogk_die(OGK_EXIT_USAGE, "--measure or --step-ms/--pass-ms, not both");
    if (o.measure && !o.target)
        ogk_die(OGK_EXIT_USAGE, "--measure needs -m TARGET.q4nx (the target to time)");
    if (o.target && !o.measure)
        ogk_die(OGK_EXIT_USAGE, "-m TARGET without a prompt (-p, -f, --ids; live mode) or --measure (replay)");
    if (o.ignore_eos || o.context || o.n != 128)
        ogk_die(OGK_EXIT_USAGE, "-n, -c and --ignore-eos are live mode's (a replay follows the recording)");
    return replay();
}
