/* npu-forward — run an imported model: generate text, teacher-forced logits, benchmark, and the
 * tokenizer subcommands (bin/npu-forward/tokenizer.c). Thin: option parsing and output; the work is in
 * lib/model and lib/tok, the shared opening and reading in lib/app. */
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/app.h"
#include "kern/kern.h"
#include "model/model.h"
#include "npu-forward/cmd.h"
#include "serve/serve.h"
#include "tok/tok.h"
#include "util/util.h"

static const char usage_text[] =
    "usage: npu-forward COMMAND [options]\n"
    "commands:\n"
    "  run        -m MODEL (-p TEXT | -f FILE | --ids FILE) [--chat [--system TEXT]] [-n N]\n"
    "             [--temp T] [--sample-top-k K] [--top-p P] [--seed S] [--stop STR]... [--ignore-eos] [--json]\n"
    "             generate text, streamed to stdout (--top-k: old name of --sample-top-k)\n"
    "  logits     -m MODEL --ids FILE [--top-logits K] [--feed prefill|verify|step] [--out-f32 FILE]\n"
    "             logits at every position (teacher forcing), JSON; --top-logits K lists only the K\n"
    "             largest per position (--topk: old name)\n"
    "  bench      -m MODEL [-l 128,512,2048] [-g 128] [-r 5] [--warmup 1] [--probe] [--verify-rows 2,8,16] [--json]\n"
    "             prompt processing and token generation speed; --probe: a DRAM read pass over\n"
    "             the weights' memory before every run, and decode's fraction of it; --verify-rows: after\n"
    "             each prompt, passes of K rows (all rows' logits) alternated with 1-row steps\n"
    "  info       -m MODEL   the model's configuration, JSON\n"
    "  serve      -m MODEL [--host 127.0.0.1] [--port 8080] [--parallel 4] [--queue 256] [--api-key KEY]\n"
    "             [--prefix-cache on|off] [--draft D.q4nx [--draft-max 4]] [--shutdown-grace 5]\n"
    "             an OpenAI-compatible HTTP server (see npu-forward(1))\n"
    "  tokenize | detokenize | chat   tokenizer tools (see npu-forward tokenize --help)\n"
    "common options: -t THREADS (default: online CPUs), -c CONTEXT (default: the model's),\n"
    "  --mode f32|i8 (activations fp32, or int8 per block like accuracy_level 4; default: the pack's, i8 when its\n"
    "  MatMulNBits ran at accuracy_level 4, else f32; info says which),\n"
    "  --no-mmap (read the weights into 2 MiB huge pages instead of mapping the file: faster decode),\n"
    "  --verify (check every weight's checksum before running; the small parts are checked at every open)\n"
    "environment: OGAKIT_PROF=1 prints per-pass phase timings on stderr; OGAKIT_KERNEL=ref|avx2|avx512.\n"
    "exit status: 0 ok, 2 usage, 3 input refused (not a container, prompt too long, a chat template that\n"
    "  nests too deeply or exceeds its render budget), 4 init failed.\n";

static _Noreturn void usage(int code)
{
    fputs(usage_text, code ? stderr : stdout);
    exit(code);
}

/* ---- options shared by run / logits / bench / info ---- */
typedef struct {
    app_model_opts mo; /* -m, -t, -c, --mode, --no-mmap */
    const char *cmd, *prompt, *prompt_file, *ids_file, *system, *out_f32, *feed, *lens, *verify_rows;
    int chat, n, sample_top_k, json, ignore_eos, top_logits, gen, reps, warmup, probe;
    float temp, top_p;
    uint64_t seed;
    char **stops;
    int n_stops;
} opts;

enum {
    O_CHAT = 256, O_SYSTEM, O_TEMP, O_TOPK_S, O_TOPP, O_SEED, O_STOP, O_MODE, O_JSON, O_IDS, O_IGNORE_EOS,
    O_TOPK, O_FEED, O_OUT_F32, O_WARMUP, O_NO_MMAP, O_PROBE, O_VERIFY, O_VERIFY_ROWS
};

#define BENCH_DEFAULT_LENS "128,512,2048"

static const struct option long_opts[] = {
    {"model", required_argument, 0, 'm'},     {"prompt", required_argument, 0, 'p'},
    {"file", required_argument, 0, 'f'},      {"n-predict", required_argument, 0, 'n'},
    {"threads", required_argument, 0, 't'},   {"context", required_argument, 0, 'c'},
    {"chat", no_argument, 0, O_CHAT},         {"system", required_argument, 0, O_SYSTEM},
    {"temp", required_argument, 0, O_TEMP},   {"sample-top-k", required_argument, 0, O_TOPK_S},
    {"top-k", required_argument, 0, O_TOPK_S}, {"top-logits", required_argument, 0, O_TOPK},
    {"top-p", required_argument, 0, O_TOPP},  {"seed", required_argument, 0, O_SEED},
    {"stop", required_argument, 0, O_STOP},   {"mode", required_argument, 0, O_MODE},
    {"json", no_argument, 0, O_JSON},         {"ids", required_argument, 0, O_IDS},
    {"ignore-eos", no_argument, 0, O_IGNORE_EOS}, {"topk", required_argument, 0, O_TOPK},
    {"feed", required_argument, 0, O_FEED},   {"out-f32", required_argument, 0, O_OUT_F32},
    {"warmup", required_argument, 0, O_WARMUP}, {"no-mmap", no_argument, 0, O_NO_MMAP},
    {"probe", no_argument, 0, O_PROBE},       {"verify", no_argument, 0, O_VERIFY},
    {"verify-rows", required_argument, 0, O_VERIFY_ROWS},
    {"help", no_argument, 0, 'h'},
    {0, 0, 0, 0},
};

static void parse(int argc, char **argv, opts *o)
{
    memset(o, 0, sizeof *o);
    o->cmd = argv[0];
    o->mo.mode = -1; /* the pack's (app_mode) */
    o->n = 256, o->top_p = 1, o->feed = "prefill", o->lens = BENCH_DEFAULT_LENS, o->gen = 128;
    o->reps = 5, o->warmup = 1;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:p:f:n:t:c:l:g:r:h", long_opts, NULL)) != -1) {
        switch (c) {
        case 'm': o->mo.model = optarg; break;
        case 'p': o->prompt = optarg; break;
        case 'f': o->prompt_file = optarg; break;
        case 'n': o->n = (int)ogk_parse_long("-n", optarg, 0, 1 << 24); break;
        case 't': o->mo.threads = (int)ogk_parse_long("-t", optarg, 1, 1024); break;
        case 'c': o->mo.context = (int)ogk_parse_long("-c", optarg, 1, 1 << 24); break;
        case 'l': o->lens = optarg; break;
        case 'g': o->gen = (int)ogk_parse_long("-g", optarg, 1, 1 << 20); break;
        case 'r': o->reps = (int)ogk_parse_long("-r", optarg, 1, 10000); break;
        case O_WARMUP: o->warmup = (int)ogk_parse_long("--warmup", optarg, 0, 100); break;
        case O_CHAT: o->chat = 1; break;
        case O_SYSTEM: o->system = optarg; break;
        case O_TEMP: o->temp = (float)ogk_parse_double("--temp", optarg); break;
        case O_TOPK_S: o->sample_top_k = (int)ogk_parse_long("--sample-top-k", optarg, 0, 1 << 24); break;
        case O_TOPP: o->top_p = (float)ogk_parse_double("--top-p", optarg); break;
        case O_SEED: o->seed = (uint64_t)ogk_parse_long("--seed", optarg, 0, 0x7fffffffffffffffL); break;
        case O_STOP:
            o->stops = realloc(o->stops, (size_t)(o->n_stops + 1) * sizeof *o->stops);
            if (!o->stops)
                ogk_die(OGK_EXIT_INIT, "out of memory");
            o->stops[o->n_stops++] = optarg;
            break;
        case O_MODE:
            if ((o->mo.mode = kern_mode_parse(optarg)) < 0)
                ogk_die(OGK_EXIT_USAGE, "--mode: '%s' is not f32 or i8", optarg);
            break;
        case O_JSON: o->json = 1; break;
        case O_NO_MMAP: o->mo.no_mmap = 1; break;
        case O_PROBE: o->probe = 1; break;
        case O_VERIFY: o->mo.verify = 1; break;
        case O_VERIFY_ROWS: o->verify_rows = optarg; break;
        case O_IDS: o->ids_file = optarg; break;
        case O_IGNORE_EOS: o->ignore_eos = 1; break;
        case O_TOPK: o->top_logits = (int)ogk_parse_long("--top-logits", optarg, 1, 1 << 24); break;
        case O_FEED:
            if (strcmp(optarg, "prefill") && strcmp(optarg, "verify") && strcmp(optarg, "step"))
                ogk_die(OGK_EXIT_USAGE, "--feed: '%s' is not prefill, verify or step", optarg);
            o->feed = optarg;
            break;
        case O_OUT_F32: o->out_f32 = optarg; break;
        case 'h': usage(0);
        default: usage(OGK_EXIT_USAGE);
        }
    }
    if (optind < argc)
        ogk_die(OGK_EXIT_USAGE, "unexpected argument '%s'", argv[optind]);
    if (!o->mo.model)
        ogk_die(OGK_EXIT_USAGE, "%s: -m MODEL is required", argv[0]);
    /* the two top-k options mean different things: each belongs to one command */
    if (o->sample_top_k && strcmp(o->cmd, "run"))
        ogk_die(OGK_EXIT_USAGE, "%s: --sample-top-k (--top-k) samples in run; logits lists with --top-logits", o->cmd);
    if (o->top_logits && strcmp(o->cmd, "logits"))
        ogk_die(OGK_EXIT_USAGE, "%s: --top-logits (--topk) lists logits in logits; run samples with --sample-top-k",
                o->cmd);
    if (o->temp < 0 || o->top_p < 0 || o->top_p > 1)
        ogk_die(OGK_EXIT_USAGE, "--temp must be >= 0 and --top-p in [0, 1]");
}

static model *open_model(const opts *o)
{
    ogk_error e;
    int code;
    app_model_opts mo = o->mo;
    mo.model = npu_forward_import(o->mo.model);
    model *m = app_model_open(&mo, &e, &code);
    if (!m)
        ogk_die(code, "%s", e.msg);
    return m;
}

static model_state *new_state(const model *m, const opts *o, int context, int logit_rows)
{
    ogk_error e;
    int code;
    model_state *s = app_state_new(m, &o->mo, context, logit_rows, &e, &code);
    if (!s)
        ogk_die(code, "%s", e.msg);
    return s;
}

static tok *open_tok(const model *m)
{
    ogk_error e;
    tok *t = app_model_tokenizer(m, &e);
    if (!t)
        ogk_die(OGK_EXIT_INIT, "%s", e.msg);
    return t;
}

/* a JSON array of token ids from FILE ("-" = stdin) */
static int *read_ids(const char *path, int *n)
{
    ogk_error e;
    int *ids = app_read_ids(path, n, &e);
    if (!ids)
        ogk_die(OGK_EXIT_INPUT, "%s", e.msg);
    return ids;
}

static void check_ids(const model *m, const char *what, const int *ids, int n)
{
    for (int i = 0; i < n; i++)
        if (ids[i] >= m->c.vocab_size)
            ogk_die(OGK_EXIT_INPUT, "%s: token id %d at %d is outside the vocabulary (%d)", what, ids[i], i,
                    m->c.vocab_size);
}

/* ---------------------------------------------------------------- run */

typedef struct {
    tok_stream *ts;
    model_stopper stop;
    int *ids;
    int n_ids, cap;
    char *text; /* --json: everything released */
    size_t text_len, text_cap;
    int json;
} run_ctx;

static void emit(const char *s, size_t n, void *arg)
{
    run_ctx *r = arg;
    if (r->json) {
        if (r->text_len + n + 1 > r->text_cap) {
            r->text_cap = (r->text_len + n + 1) * 2;
            if (!(r->text = realloc(r->text, r->text_cap)))
                ogk_die(OGK_EXIT_INIT, "out of memory");
        }
        memcpy(r->text + r->text_len, s, n);
        r->text_len += n;
        r->text[r->text_len] = 0;
        return;
    }
    if (fwrite(s, 1, n, stdout) != n || fflush(stdout))
        ogk_die(OGK_EXIT_INPUT, "stdout: write failed");
}

static int on_token(int id, void *arg)
{
    run_ctx *r = arg;
    ogk_error e;
    if (r->n_ids == r->cap && !(r->ids = realloc(r->ids, (size_t)(r->cap = r->cap * 2 + 64) * sizeof *r->ids)))
        ogk_die(OGK_EXIT_INIT, "out of memory");
    r->ids[r->n_ids++] = id;
    size_t n;
    const char *s = tok_stream_put(r->ts, id, &n, &e);
    if (!s)
        ogk_die(OGK_EXIT_INIT, "detokenize: %s", e.msg);
    return model_stopper_feed(&r->stop, s, n, emit, r);
}

/* the prompt's token ids: --ids, or text (-p / -f) encoded, through the chat template with --chat; a
 * prompt longer than the context is refused as soon as that is known */
static int *prompt_ids(const model *m, tok *t, const opts *o, int *n)
{
    if (o->ids_file)
        return read_ids(o->ids_file, n);
    ogk_error e;
    app_prompt p = {.text = o->prompt, .chat = o->chat, .system = o->system};
    char *text = NULL;
    if (o->prompt)
        p.len = strlen(o->prompt);
    else if (!(text = app_read_text(o->prompt_file, &p.len, &e)))
        ogk_die(OGK_EXIT_INPUT, "%s", e.msg);
    else
        p.text = text;
    int context = app_context(m, &o->mo);
    int *ids = app_prompt_ids(m, t, &p, context, n, &e);
    if (!ids)
        ogk_die(OGK_EXIT_INPUT, "%s (%d positions: -c, up to %d)", e.msg, context, m->c.context_length);
    free(text);
    return ids;
}

static int cmd_run(int argc, char **argv)
{
    opts o;
    parse(argc, argv, &o);
    if (!!o.prompt + !!o.prompt_file + !!o.ids_file != 1)
        ogk_die(OGK_EXIT_USAGE, "run: give exactly one of -p TEXT, -f FILE, --ids FILE");
    if (o.chat && o.ids_file)
        ogk_die(OGK_EXIT_USAGE, "run: --chat renders text; it does not apply to --ids");
    model *m = open_model(&o);
    tok *t = open_tok(m);
    int n;
    int *ids = prompt_ids(m, t, &o, &n);
    check_ids(m, "prompt", ids, n);
    model_state *s = new_state(m, &o, 0, 1);
    if (n > s->context)
        ogk_die(OGK_EXIT_INPUT, "prompt: %d tokens do not fit the context of %d positions (-c, up to %d)", n,
                s->context, m->c.context_length);
    model_sampler sp;
    if (model_sampler_init(&sp, m->c.vocab_size, o.temp, o.sample_top_k, o.top_p, o.seed ? o.seed : (uint64_t)getpid()))
        ogk_die(OGK_EXIT_INIT, "out of memory");
    run_ctx r = {.ts = tok_stream_new(t, 1), .json = o.json};
    if (!r.ts)
        ogk_die(OGK_EXIT_INIT, "out of memory");
    model_stopper_init(&r.stop, o.stops, o.n_stops);
    model_gen g = {.max_new = o.n, .ignore_eos = o.ignore_eos, .on_token = on_token, .ctx = &r};
    model_gen_stats st;
    ogk_error e;
    if (model_generate(s, &sp, ids, n, &g, &st, &e))
        ogk_die(OGK_EXIT_INPUT, "%s", e.msg);
    if (!r.stop.hit) {
        size_t fl;
        const char *tail = tok_stream_flush(r.ts, &fl, &e);
        if (tail)
            model_stopper_feed(&r.stop, tail, fl, emit, &r);
        model_stopper_flush(&r.stop, emit, &r);
    }
    if (o.json) {
        json_t *pj = json_array(), *gj = json_array();
        for (int i = 0; i < n; i++)
            json_array_append_new(pj, json_integer(ids[i]));
        for (int i = 0; i < r.n_ids; i++)
            json_array_append_new(gj, json_integer(r.ids[i]));
        json_t *out = json_pack(
            "{s:o,s:o,s:s%,s:s,s:{s:i,s:i,s:f,s:f,s:f,s:f}}", "prompt_ids", pj, "ids", gj, "text",
            r.text ? r.text : "", r.text_len, "stop_reason", st.stop, "timings", "prompt_n", st.prompt_tokens,
            "predicted_n", st.new_tokens, "prompt_ms", st.prefill_ms, "ttft_ms", st.ttft_ms, "predicted_ms",
            st.decode_ms, "predicted_per_second",
            st.decode_ms > 0 && st.new_tokens > 1 ? (st.new_tokens - 1) / (st.decode_ms / 1e3) : 0.0);
        if (ogk_json_print(stdout, out))
            ogk_die(OGK_EXIT_INPUT, "stdout: write failed");
        json_decref(out);
    }
    if (s->prof_print)
        fprintf(stderr, "npu-forward: prompt %d tokens %.1f ms (%.1f tok/s), %d generated in %.1f ms (%.2f tok/s), stop %s\n",
                n, st.prefill_ms, n / (st.prefill_ms / 1e3), st.new_tokens, st.decode_ms,
                st.new_tokens > 1 ? (st.new_tokens - 1) / (st.decode_ms / 1e3) : 0.0, st.stop);
    model_stopper_free(&r.stop);
    tok_stream_free(r.ts);
    free(r.ids), free(r.text), free(ids), free(o.stops);
    model_sampler_free(&sp);
    model_state_free(s);
    tok_free(t);
    model_close(m);
    return 0;
}

/* ---------------------------------------------------------------- logits */

static double logsumexp(const float *x, int n)
{
    float mx = x[0];
    for (int i = 1; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    double s = 0;
    for (int i = 0; i < n; i++)
        s += exp((double)x[i] - mx);
    return mx + log(s);
}

/* the k largest (ties: lower id first) */
static json_t *topk_json(const float *x, int V, int k)
{
    int *idx = malloc((size_t)k * sizeof *idx), n = 0;
    for (int j = 0; j < V; j++) {
        if (n < k || x[j] > x[idx[n - 1]]) {
            int p = n < k ? n++ : k - 1;
            while (p > 0 && x[idx[p - 1]] < x[j]) {
                idx[p] = idx[p - 1];
                p--;
            }
            idx[p] = j;
        }
    }
    json_t *ids = json_array(), *lg = json_array();
    for (int i = 0; i < n; i++) {
        json_array_append_new(ids, json_integer(idx[i]));
        json_array_append_new(lg, json_real(x[idx[i]]));
    }
    free(idx);
    return json_pack("{s:o,s:o,s:f}", "ids", ids, "logits", lg, "lse", logsumexp(x, V));
}

static int cmd_logits(int argc, char **argv)
{
    opts o;
    parse(argc, argv, &o);
    if (!o.ids_file)
        ogk_die(OGK_EXIT_USAGE, "logits: --ids FILE is required");
    model *m = open_model(&o);
    int n, V = m->c.vocab_size;
    int *ids = read_ids(o.ids_file, &n);
    check_ids(m, "ids", ids, n);
    /* feed: prefill = passes of 128 rows (M = 128 kernels), verify = 16 (M <= 16), step = 1 (decode) */
    int per = !strcmp(o.feed, "prefill") ? MODEL_CHUNK : !strcmp(o.feed, "verify") ? MODEL_VERIFY_MAX : 1;
    model_state *s = new_state(m, &o, 0, per);
    if (n > s->context)
        ogk_die(OGK_EXIT_INPUT, "ids: %d tokens do not fit the context of %d positions", n, s->context);
    ogk_out out = {0};
    ogk_error e;
    if (o.out_f32 && ogk_out_open(&out, o.out_f32, &e))
        ogk_die(OGK_EXIT_INPUT, "%s", e.msg);
    json_t *rows = json_array();
    for (int done = 0; done < n; done += per) {
        int k = n - done < per ? n - done : per;
        if (model_forward(s, ids + done, k, 1, &e))
            ogk_die(OGK_EXIT_INPUT, "%s", e.msg);
        model_prof_print(s, o.feed);
        for (int r = 0; r < k; r++) {
            const float *x = s->logits + (size_t)r * V;
            if (o.out_f32) {
                if (ogk_write_all(out.fd, x, (size_t)V * sizeof *x))
                    ogk_die(OGK_EXIT_INPUT, "%s: write failed", o.out_f32);
            } else if (o.top_logits) {
                json_array_append_new(rows, topk_json(x, V, o.top_logits < V ? o.top_logits : V));
            } else {
                json_t *a = json_array();
                for (int j = 0; j < V; j++)
                    json_array_append_new(a, json_real(x[j]));
                json_array_append_new(rows, a);
            }
        }
    }
    if (o.out_f32 && ogk_out_commit(&out, &e))
        ogk_die(OGK_EXIT_INPUT, "%s", e.msg);
    json_t *idj = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(idj, json_integer(ids[i]));
    json_t *res = json_pack("{s:s,s:s,s:s,s:i,s:o,s:i}", "mode", "teacher", "feed", o.feed, "accuracy",
                            kern_mode_name(app_mode(m, &o.mo)), "vocab_size", V, "ids", idj, "positions", n);
    if (o.out_f32)
        json_object_set_new(res, "logits_f32", json_string(o.out_f32)), json_decref(rows);
    else
        json_object_set_new(res, o.top_logits ? "topk" : "logits", rows);
    if (ogk_json_print(stdout, res))
        ogk_die(OGK_EXIT_INPUT, "stdout: write failed");
    json_decref(res);
    free(ids);
    model_state_free(s);
    model_close(m);
    return 0;
}

/* ---------------------------------------------------------------- bench */

static int cmd_bench(int argc, char **argv)
{
    opts o;
    parse(argc, argv, &o);
    int lens[64], nl = 0;
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
    model *m = open_model(&o);
    /* the default lengths must fit the model: drop those that do not (saying so), and when none
     * fits, use the longest prompt that does; lengths given with -l are the user's (too long: exit 3) */
    if (!strcmp(o.lens, BENCH_DEFAULT_LENS)) {
        int ctx = app_context(m, &o.mo), kept = 0;
        for (int i = 0; i < nl; i++) {
            if (lens[i] + o.gen <= ctx)
                lens[kept++] = lens[i];
            else
                ogk_err("bench: skipping prompt length %d: %d + %d generated exceed the context (%d)", lens[i],
                        lens[i], o.gen, ctx);
        }
        if (!kept) {
            if (ctx - o.gen < 1)
                ogk_die(OGK_EXIT_USAGE, "-g %d: no prompt fits a context of %d", o.gen, ctx);
            lens[kept++] = ctx - o.gen;
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
    model_state *s = new_state(m, &o, context, nv ? MODEL_VERIFY_MAX : 1);
    model_bench_opts bo = {lens, nl, o.gen, o.reps, o.warmup, o.probe, nv ? vk : NULL, nv};
    ogk_error e;
    json_t *r = model_bench(s, &bo, &e);
    if (!r)
        ogk_die(OGK_EXIT_INPUT, "%s", e.msg);
    json_object_set_new(r, "kernel", json_string(kern_isa_current()->name));
    if (o.json) {
        ogk_json_print(stdout, r);
    } else {
        printf("model %s  family %s  threads %d  mode %s  kernel %s  weights/token %.1f MB\n", o.mo.model,
               m->c.family_name, kern_pool_threads(s->pool), kern_mode_name(app_mode(m, &o.mo)),
               kern_isa_current()->name, m->weight_bytes / 1e6);
        printf("%8s %6s %16s %20s %20s %14s%s\n", "prompt", "gen", "TTFT ms", "prefill tok/s", "decode tok/s", "E2E ms",
               o.probe ? "   DRAM GB/s  decode/DRAM" : "");
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
                printf(" %12.1f %10.0f %%", MED("dram_read_GBps"), 100 * MED("decode_fraction_of_dram"));
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

/* ---------------------------------------------------------------- info */

static int cmd_info(int argc, char **argv)
{
    opts o;
    parse(argc, argv, &o);
    model *m = open_model(&o);
    const model_config *c = &m->c;
    json_t *eos = json_array();
    for (int i = 0; i < c->n_eos; i++)
        json_array_append_new(eos, json_integer(c->eos_ids[i]));
    json_t *r = json_pack("{s:s,s:s,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:b,s:b,s:b,s:o,s:I,s:s}", "model", o.mo.model,
                          "family", c->family_name, "vocab_size", c->vocab_size, "hidden_size", c->dim,
                          "intermediate_size", c->hidden_dim, "num_layers", c->n_layers, "num_heads", c->n_heads,
                          "num_kv_heads", c->n_kv_heads, "head_dim", c->head_dim, "context_length",
                          c->context_length, "rope_dim", c->rope_dim, "qkv_bias", c->qkv_bias, "qk_norm", c->qk_norm,
                          "tied", c->tied, "eos_token_ids", eos, "weight_bytes_per_token", (json_int_t)m->weight_bytes,
                          "layout", ogk_layout_name(q4nx_layout(m->file)));
    /* the mode a run takes without --mode, and why */
    const json_t *acc = json_object_get(q4nx_model(m->file), "accuracy_level");
    json_object_set_new(r, "accuracy_level", json_is_integer(acc) ? json_incref((json_t *)acc) : json_null());
    json_object_set_new(r, "default_mode", json_string(kern_mode_name(model_default_mode(m))));
    ogk_json_print(stdout, r);
    json_decref(r);
    model_close(m);
    return 0;
}

/* ---------------------------------------------------------------- serve */

static volatile sig_atomic_t serve_stop;
static void on_signal(int sig) { (void)sig, serve_stop = 1; }
static void serve_log(const char *line, void *ctx) { (void)ctx, ogk_err("%s", line); }

static int cmd_serve(int argc, char **argv)
{
    enum { S_HOST = 300, S_PORT, S_PARALLEL, S_QUEUE, S_API_KEY, S_PREFIX, S_MODE, S_NO_MMAP, S_DRAFT, S_DRAFT_MAX, S_GRACE };
    static const struct option so[] = {
        {"model", required_argument, 0, 'm'},     {"threads", required_argument, 0, 't'},
        {"context", required_argument, 0, 'c'},   {"host", required_argument, 0, S_HOST},
        {"port", required_argument, 0, S_PORT},   {"parallel", required_argument, 0, S_PARALLEL},
        {"queue", required_argument, 0, S_QUEUE}, {"api-key", required_argument, 0, S_API_KEY},
        {"prefix-cache", required_argument, 0, S_PREFIX}, {"mode", required_argument, 0, S_MODE},
        {"no-mmap", no_argument, 0, S_NO_MMAP},   {"draft", required_argument, 0, S_DRAFT},
        {"draft-max", required_argument, 0, S_DRAFT_MAX}, {"shutdown-grace", required_argument, 0, S_GRACE},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    serve_opts o = {.mode = -1, .port = 8080, .parallel = 4, .queue = 256, .prefix_cache = 1, .shutdown_grace = 5, .stop = &serve_stop,
                    .log = serve_log};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:t:c:h", so, NULL)) != -1) {
        switch (c) {
        case 'm': o.model_path = optarg; break;
        case 't': o.threads = (int)ogk_parse_long("-t", optarg, 1, 1024); break;
        case 'c': o.context = (int)ogk_parse_long("-c", optarg, 1, 1 << 24); break;
        case S_HOST: o.host = optarg; break;
        case S_PORT: o.port = (int)ogk_parse_long("--port", optarg, 0, 65535); break;
        case S_PARALLEL: o.parallel = (int)ogk_parse_long("--parallel", optarg, 1, MODEL_CHUNK); break;
        case S_QUEUE: o.queue = (int)ogk_parse_long("--queue", optarg, 1, 1 << 20); break;
        case S_API_KEY: o.api_key = optarg; break;
        case S_PREFIX:
            if (strcmp(optarg, "on") && strcmp(optarg, "off"))
                ogk_die(OGK_EXIT_USAGE, "--prefix-cache: '%s' is not on or off", optarg);
            o.prefix_cache = !strcmp(optarg, "on");
            break;
        case S_MODE:
            if (strcmp(optarg, "f32") && strcmp(optarg, "i8"))
                ogk_die(OGK_EXIT_USAGE, "--mode: '%s' is not f32 or i8", optarg);
            o.mode = !strcmp(optarg, "i8") ? KERN_I8 : KERN_F32;
            break;
        case S_NO_MMAP: o.no_mmap = 1; break;
        case S_DRAFT: o.draft_path = optarg; break;
        case S_GRACE: o.shutdown_grace = (double)ogk_parse_long("--shutdown-grace", optarg, 0, 86400); break;
        case S_DRAFT_MAX: o.draft_max = (int)ogk_parse_long("--draft-max", optarg, 1, MODEL_VERIFY_MAX - 1); break;
        case 'h': usage(0);
        default: usage(OGK_EXIT_USAGE);
        }
    }
    if (optind < argc)
        ogk_die(OGK_EXIT_USAGE, "unexpected argument '%s'", argv[optind]);
    if (!o.model_path)
        ogk_die(OGK_EXIT_USAGE, "serve: -m MODEL is required");
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    ogk_error e;
    int code;
    if (serve_run(&o, &e, &code))
        ogk_die(code, "serve: %s", e.msg);
    ogk_err("serve: stopped");
    return 0;
}


static const struct {
    const char *name;
    int (*fn)(int, char **);
} commands[] = {
    {"run", cmd_run},
    {"logits", cmd_logits},
    {"bench", cmd_bench},
    {"info", cmd_info},
    {"tokenize", cmd_tokenize},
    {"detokenize", cmd_detokenize},
    {"chat", cmd_chat},
    {"serve", cmd_serve},
};

int main(int argc, char **argv)
{
    ogk_prog_set(argv[0]);
    if (argc < 2)
        usage(OGK_EXIT_USAGE);
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))
        usage(0);
    if (!strcmp(argv[1], "--version")) {
        printf("npu-forward %s\n", OGAKIT_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].fn(argc - 1, argv + 1);
    ogk_die(OGK_EXIT_USAGE, "unknown command '%s' (run, logits, bench, info, serve, tokenize, detokenize, chat)", argv[1]);
}
