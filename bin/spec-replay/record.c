/* spec-replay record: a target's greedy continuations of a prompt set (a container, or a server
 * through /v1/completions) into a recording (man 5 spec-recording). */
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
          "  --api-key KEY       sent to --url as \"Authorization: Bearer KEY\" (as serve --api-key wants)\n"
          "Exit: 0 ok, 1 --twice found different continuations, 2 usage, 3 a prompt file or server refused\n"
          "or unreachable, 4 init failed.\n",
          f);
}


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
    char *txt = app_read_text(path, &len, &e);
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
        if (json_is_string(t) && json_is_array(ids)) /* which would the recording's text stand for? */
            ogk_die(OGK_EXIT_INPUT, "%s: prompts[%zu]: \"text\" and \"ids\" both given (one, please)", path, i);
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
            /* above INT_MAX, an id would wrap to another one (a server's target has no known vocabulary) */
            if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > 0x7fffffff ||
                (vocab && json_integer_value(x) >= vocab))
                ogk_die(OGK_EXIT_INPUT, "%s: prompts[%zu].ids[%d] is not a token id of the target", where, i, k);
            v[k] = (int)json_integer_value(x);
        }
        if (!*n)
            ogk_die(OGK_EXIT_INPUT, "%s: prompts[%zu].ids is empty", where, i);
        return v;
    }
    if (!t && opt.url)
        ogk_die(OGK_EXIT_USAGE, "%s: prompts[%zu] is text: --url needs --tokenizer T to turn it into ids", where, i);
    if (!t)
        ogk_die(OGK_EXIT_INIT, "%s: prompts[%zu] is text, and %s has no tokenizer to turn it into ids (give \"ids\")",
                where, i, opt.target);
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
    json_t *set = json_pack("{s:i,s:b,s:b}", "tokens", opt.tokens, "ignore_eos", opt.ignore_eos, "greedy", 1);
    if (rp->T)
        json_object_set_new(set, "mode", json_string(kern_mode_name(opt.mode))),
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
        p.ids = prompt_of(pj, rp->t, opt.prompts, i, rp->T ? rp->T->c.vocab_size : 0, &p.n_ids);
        p.decode_ms = p.request_ms = -1;
        spec_completion c = {0};
        if (rp->T) {
            if (p.n_ids + opt.tokens + 1 > rp->ts->context)
                ogk_die(OGK_EXIT_INPUT, "prompt '%s': %d tokens + %d do not fit the target's context (%d)", p.name,
                        p.n_ids, opt.tokens, rp->ts->context);
            p.cont = malloc(sizeof(int) * (size_t)opt.tokens);
            p.gaps = malloc(sizeof(float) * (size_t)opt.tokens);
            p.n_cont = model_greedy(rp->ts, p.ids, p.n_ids, opt.tokens, opt.ignore_eos, p.cont, p.gaps, &p.decode_ms, &e);
            if (p.n_cont < 0)
                ogk_die(OGK_EXIT_INPUT, "prompt '%s': %s", p.name, e.msg);
            p.stop = p.n_cont == opt.tokens ? "length" : "eos";
        } else {
            if (spec_http_complete(rp->h, p.ids, p.n_ids, opt.tokens, opt.ignore_eos, 1, &c, &e))
                ogk_die(OGK_EXIT_INPUT, "prompt '%s': %s", p.name, e.msg);
            p.cont = c.ids, p.n_cont = c.n, p.gaps = c.gaps, p.stop = c.stop, p.request_ms = c.ms;
            if (p.n_cont > opt.tokens) /* a recording of more than settings.tokens is one replay refuses */
                ogk_die(OGK_EXIT_INPUT, "prompt '%s': the server answered %d tokens, more than the %d asked for "
                                        "(max_tokens)", p.name, p.n_cont, opt.tokens);
            if (!strcmp(p.stop, "length") && p.n_cont != opt.tokens) /* the server stopped short, saying "length" */
                ogk_die(OGK_EXIT_INPUT, "prompt '%s': the server answered %d tokens of %d with finish_reason \"length\" "
                                        "(its max_tokens or context is smaller than --tokens?)", p.name, p.n_cont,
                        opt.tokens);
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

int record_main(int argc, char **argv)
{
    enum { R_URL = 256, R_TOKENIZER, R_PROMPTS, R_TOKENS, R_IGNORE_EOS, R_TWICE, R_MODE, R_NO_MMAP, R_MMAP, R_TIMEOUT,
           R_API_KEY };
    static const struct option lo[] = {{"model", 1, 0, 'm'},         {"url", 1, 0, R_URL},
                                       {"tokenizer", 1, 0, R_TOKENIZER}, {"prompts", 1, 0, R_PROMPTS},
                                       {"tokens", 1, 0, R_TOKENS},   {"ignore-eos", 0, 0, R_IGNORE_EOS},
                                       {"twice", 0, 0, R_TWICE},     {"mode", 1, 0, R_MODE},
                                       {"no-mmap", 0, 0, R_NO_MMAP}, {"mmap", 0, 0, R_MMAP}, {"timeout", 1, 0, R_TIMEOUT},
                                       {"output", 1, 0, 'o'},        {"help", 0, 0, 'h'},
                                       {"api-key", 1, 0, R_API_KEY},
                                       {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:o:t:n:h", lo, NULL)) != -1) {
        switch (c) {
        case 'm': opt.target = optarg; break;
        case R_URL: opt.url = optarg; break;
        case R_TOKENIZER: opt.tokenizer = optarg; break;
        case R_PROMPTS: opt.prompts = optarg; break;
        case 'n':
        case R_TOKENS: opt.tokens = (int)ogk_parse_long("--tokens", optarg, 1, 1 << 20); break;
        case R_IGNORE_EOS: opt.ignore_eos = 1; break;
        case R_TWICE: opt.twice = 1; break;
        case R_MODE:
            if ((opt.mode = kern_mode_parse(optarg)) < 0)
                ogk_die(OGK_EXIT_USAGE, "--mode: '%s' is not f32 or i8", optarg);
            break;
        case R_NO_MMAP: opt.weights_in = Q4NX_IN_LOAD; break;
        case R_MMAP: opt.weights_in = Q4NX_IN_MAP; break;
        case R_TIMEOUT: opt.timeout = ogk_parse_double("--timeout", optarg); break;
        case R_API_KEY: opt.api_key = optarg; break;
        case 'o': opt.out = optarg; break;
        case 't': opt.threads = (int)ogk_parse_long("-t", optarg, 1, 1024); break;
        case 'h': record_usage(stdout); return 0;
        default: record_usage(stderr); return OGK_EXIT_USAGE;
        }
    }
    if (optind < argc)
        ogk_die(OGK_EXIT_USAGE, "record: unexpected argument '%s'", argv[optind]);
    if (!!opt.target + !!opt.url != 1)
        ogk_die(OGK_EXIT_USAGE, "record: give exactly one target, -m TARGET.q4nx or --url URL (see record --help)");
    if (opt.tokenizer && !opt.url)
        ogk_die(OGK_EXIT_USAGE, "record: --tokenizer goes with --url (a container brings its own)");
    if (opt.api_key && !opt.url)
        ogk_die(OGK_EXIT_USAGE, "record: --api-key goes with --url");
    if (!(opt.timeout > 0))
        ogk_die(OGK_EXIT_USAGE, "--timeout: want seconds above 0");
    char *dflt = opt.prompts ? NULL : default_prompts();
    if (dflt)
        opt.prompts = dflt;
    json_t *ps = load_prompts(opt.prompts);

    ogk_error e;
    rec_peer rp = {0};
    json_t *target = NULL, *tokenizer = NULL;
    char hash[16];
    int vocab = 0;
    if (opt.target) {
        if (kern_isa_init(&e))
            ogk_die(OGK_EXIT_INIT, "%s", e.msg);
        rp.T = open_model(opt.target);
        vocab = rp.T->c.vocab_size;
        rp.t = app_model_tokenizer(rp.T, &e); /* NULL: ids-only prompts still work */
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
            int *ids = prompt_of(pj, rp.t, opt.prompts, i, vocab, &n);
            if (n + opt.tokens + 1 > ctx)
                ctx = n + opt.tokens + 1;
            free(ids);
        }
        if (ctx > rp.T->c.context_length)
            ogk_die(OGK_EXIT_INPUT, "the longest prompt + %d tokens needs %d positions; %s holds %d", opt.tokens, ctx,
                    opt.target, rp.T->c.context_length);
        rp.ts = new_state(rp.T, ctx, 1);
        char *name = strdup(opt.target);
        size_t fsz = (size_t)q4nx_file_size(rp.T->file);
        spec_hash(q4nx_file_bytes(rp.T->file), fsz, hash);
        target = json_pack("{s:o,s:o,s:s,s:I}", "container", ogk_json_str(opt.target), "name", ogk_json_str(basename(name)), "checksum", hash,
                           "bytes", (json_int_t)fsz);
        free(name);
    } else {
        if (!(rp.h = spec_http_new(opt.url, opt.timeout, &e)) || spec_http_key(rp.h, opt.api_key, &e))
            ogk_die(OGK_EXIT_USAGE, "--url: %s", e.msg);
        if (opt.tokenizer) {
            size_t tl;
            rp.t = load_tokenizer(opt.tokenizer, hash, &tl);
            tokenizer = json_pack("{s:s,s:I}", "hash", hash, "bytes", (json_int_t)tl);
        }
    }
    /* -o opened before the work (an unwritable place, or one of the inputs, is refused now, not after every
     * request: the server is asked nothing, not even its model's name); written at the end */
    ogk_out out;
    if (opt.out && ogk_out_open(&out, opt.out, &e))
        ogk_die(OGK_EXIT_CHECK, "%s", e.msg);
    if (rp.h) {
        char *id = spec_http_model_id(rp.h);
        char *shown = spec_url_shown(opt.url); /* a recording is shared: no credentials in it */
        target = json_pack("{s:o,s:o?}", "url", ogk_json_str(shown ? shown : "?"), "model", id ? ogk_json_str(id) : NULL);
        free(shown);
        free(id);
    }
    json_t *doc = record_once(&rp, ps, target, tokenizer, vocab);
    int rc = 0;
    if (opt.twice) {
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
    if (opt.out) {
        if (!s || ogk_write_all(out.fd, s, strlen(s)) || ogk_write_all(out.fd, "\n", 1) || ogk_out_commit(&out, &e)) {
            ogk_out_abort(&out);
            ogk_die(OGK_EXIT_CHECK, "%s: cannot write the recording", opt.out);
        }
    } else if (!s || fputs(s, stdout) == EOF || fputs("\n", stdout) == EOF || fflush(stdout)) {
        ogk_die(OGK_EXIT_CHECK, "stdout: cannot write the recording");
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
