/* npu-forward — run an imported model: generate text, teacher-forced logits, benchmark, serve, and the
 * tokenizer subcommands. This file: usage, the common options, the helpers the commands share and the
 * command table; each command is a file of bin/npu-forward/ (cmd.h). Thin: option parsing and output;
 * the work is in lib/model, lib/tok and lib/serve, the shared opening and reading in lib/app. */
#include <float.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/app.h"
#include "npu-forward/cmd.h"
#include "kern/kern.h"
#include "model/model.h"
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
    "  bench      -m MODEL [-l 128,512,2048] [-g 128] [-r 5] [--warmup 1] [--probe] [--verify-rows 2,8,16 [--full-head]]\n"
    "             [--json]\n"
    "             prompt processing and token generation speed; --probe: a DRAM read pass over\n"
    "             the weights' memory before every run, and decode's fraction of it; --verify-rows: after\n"
    "             each prompt, passes of K rows alternated with 1-row steps (greedy verify passes: each row's\n"
    "             argmax; --full-head: every row's logits)\n"
    "  info       -m MODEL   the model's configuration, JSON\n"
    "  serve      -m MODEL [--host 127.0.0.1] [--port 8080] [--parallel 4] [--queue 256] [--api-key KEY] [--cors ORIGIN]\n"
    "             [--prefix-cache on|off] [--draft D.q4nx [--draft-max 4]] [--shutdown-grace 5]\n"
    "             [--request-timeout 30]\n"
    "             [--reasoning-format auto|none]\n"
    "             an OpenAI-compatible HTTP server (see npu-forward(1))\n"
    "  tokenize | detokenize | chat   tokenizer tools (see npu-forward tokenize --help)\n"
    "common options: -t THREADS (default: online CPUs), -c CONTEXT (default: the model's),\n"
    "  --mode f32|i8 (activations fp32, or int8 per block like accuracy_level 4; default: the pack's, i8 when its\n"
    "  MatMulNBits ran at accuracy_level 4, else f32; info says which),\n"
    "  --no-mmap / --mmap (read the weights into 2 MiB huge pages / map the file; default: the copy when\n"
    "  the kernel has transparent huge pages and the file is at most half of MemAvailable, else the mapping),\n"
    "  --verify (check every weight's checksum before running; the small parts are checked at every open)\n"
    "environment: OGAKIT_PROF=1 prints per-pass phase timings on stderr; OGAKIT_KERNEL=ref|avx2|avx512|amx.\n"
    "exit status: 0 ok, 1 the output could not be written, 2 usage, 3 input refused (not a container,\n"
    "  prompt too long, a chat template that nests too deeply or exceeds its render budget), 4 init failed.\n";

_Noreturn void nf_usage(int code)
{
    fputs(usage_text, code ? stderr : stdout);
    exit(code);
}


enum {
    O_CHAT = 256, O_SYSTEM, O_TEMP, O_TOPK_S, O_TOPP, O_SEED, O_STOP, O_MODE, O_JSON, O_IDS, O_IGNORE_EOS,
    O_TOPK, O_FEED, O_OUT_F32, O_WARMUP, O_NO_MMAP, O_MMAP, O_PROBE, O_VERIFY, O_VERIFY_ROWS, O_FULL_HEAD
};


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
    {"mmap", no_argument, 0, O_MMAP},
    {"probe", no_argument, 0, O_PROBE},       {"verify", no_argument, 0, O_VERIFY},
    {"verify-rows", required_argument, 0, O_VERIFY_ROWS}, {"full-head", no_argument, 0, O_FULL_HEAD},
    {"help", no_argument, 0, 'h'},
    {0, 0, 0, 0},
};

void nf_parse(int argc, char **argv, opts *o)
{
    memset(o, 0, sizeof *o);
    o->cmd = argv[0];
    o->mo.mode = -1; /* the pack's (app_mode) */
    o->n = 256, o->top_p = 1, o->feed = "prefill", o->lens = BENCH_DEFAULT_LENS, o->gen = 128;
    o->reps = 5, o->warmup = 1;
    int c;
    uint8_t seen[O_FULL_HEAD + 1] = {0};
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:p:f:n:t:c:l:g:r:h", long_opts, NULL)) != -1) {
        if (c > 0 && c <= O_FULL_HEAD)
            seen[c] = 1;
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
        case O_TEMP:
            /* a float: a finite double past FLT_MAX would become the infinity "inf" is refused as */
            if (!isfinite(o->temp = (float)ogk_parse_double("--temp", optarg)))
                ogk_die(OGK_EXIT_USAGE, "option --temp: '%s' is too large (at most %g)", optarg, (double)FLT_MAX);
            break;
        case O_TOPK_S: o->sample_top_k = (int)ogk_parse_long("--sample-top-k", optarg, 0, 1 << 24); break;
        case O_TOPP: o->top_p = (float)ogk_parse_double("--top-p", optarg); break;
        case O_SEED: o->seed = (uint64_t)ogk_parse_long("--seed", optarg, 0, 0x7fffffffffffffffL), o->seed_set = 1; break;
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
        case O_NO_MMAP: o->mo.weights_in = Q4NX_IN_LOAD; break;
        case O_MMAP: o->mo.weights_in = Q4NX_IN_MAP; break;
        case O_PROBE: o->probe = 1; break;
        case O_VERIFY: o->mo.verify = 1; break;
        case O_VERIFY_ROWS: o->verify_rows = optarg; break;
        case O_FULL_HEAD: o->full_head = 1; break;
        case O_IDS: o->ids_file = optarg; break;
        case O_IGNORE_EOS: o->ignore_eos = 1; break;
        case O_TOPK: o->top_logits = (int)ogk_parse_long("--top-logits", optarg, 1, 1 << 24); break;
        case O_FEED:
            if (strcmp(optarg, "prefill") && strcmp(optarg, "verify") && strcmp(optarg, "step"))
                ogk_die(OGK_EXIT_USAGE, "--feed: '%s' is not prefill, verify or step", optarg);
            o->feed = optarg;
            break;
        case O_OUT_F32: o->out_f32 = optarg; break;
        case 'h': nf_usage(0);
        default: nf_usage(OGK_EXIT_USAGE);
        }
    }
    if (optind < argc)
        ogk_die(OGK_EXIT_USAGE, "unexpected argument '%s'", argv[optind]);
    /* an option another command takes is refused, never silently ignored (the model's own: every command) */
    enum { RUN = 1, BENCH = 2, LOGITS = 4, INFO = 8 };
    static const struct {
        int code, cmds;
        const char *name;
    } owner[] = {{'p', RUN, "-p"}, {'f', RUN, "-f"}, {'n', RUN, "-n"}, {O_CHAT, RUN, "--chat"},
                 {O_SYSTEM, RUN, "--system"}, {O_TEMP, RUN, "--temp"}, {O_TOPK_S, RUN, "--sample-top-k"},
                 {O_TOPP, RUN, "--top-p"}, {O_SEED, RUN, "--seed"}, {O_STOP, RUN, "--stop"},
                 {O_IGNORE_EOS, RUN, "--ignore-eos"}, {O_IDS, RUN | LOGITS, "--ids"}, {O_JSON, RUN | BENCH, "--json"},
                 {'l', BENCH, "-l"}, {'g', BENCH, "-g"}, {'r', BENCH, "-r"}, {O_WARMUP, BENCH, "--warmup"},
                 {O_PROBE, BENCH, "--probe"}, {O_VERIFY_ROWS, BENCH, "--verify-rows"}, {O_FULL_HEAD, BENCH, "--full-head"},
                 {O_TOPK, LOGITS, "--top-logits"}, {O_FEED, LOGITS, "--feed"}, {O_OUT_F32, LOGITS, "--out-f32"}};
    int me = !strcmp(o->cmd, "run") ? RUN : !strcmp(o->cmd, "bench") ? BENCH : !strcmp(o->cmd, "logits") ? LOGITS : INFO;
    for (size_t k = 0; k < sizeof owner / sizeof *owner; k++)
        if (seen[owner[k].code] && !(owner[k].cmds & me))
            ogk_die(OGK_EXIT_USAGE, "%s: %s is not an option of this command (it belongs to %s)", o->cmd, owner[k].name,
                    owner[k].cmds & RUN ? "run" : owner[k].cmds & BENCH ? "bench" : "logits");
    if (o->system && !o->chat)
        ogk_die(OGK_EXIT_USAGE, "%s: --system is the chat's system message: it needs --chat", o->cmd);
    for (int k = 0; k < o->n_stops; k++) {
        size_t sl = strlen(o->stops[k]), ok = tok_utf8_check(o->stops[k], sl);
        if (!sl)
            ogk_die(OGK_EXIT_USAGE, "%s: --stop: an empty string stops nothing", o->cmd);
        /* the text is UTF-8: a stop string that is not could match inside a character and cut it in two */
        if (ok != sl)
            ogk_die(OGK_EXIT_USAGE, "%s: --stop: string %d is not valid UTF-8 (byte offset %zu)", o->cmd, k + 1, ok);
    }
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

model *nf_open_model(const opts *o)
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

model_state *nf_new_state(const model *m, const opts *o, int context, int logit_rows)
{
    ogk_error e;
    int code;
    model_state *s = app_state_new(m, &o->mo, context, logit_rows, &e, &code);
    if (!s)
        ogk_die(code, "%s", e.msg);
    return s;
}

tok *nf_open_tok(const model *m)
{
    ogk_error e;
    tok *t = app_model_tokenizer(m, &e);
    if (!t)
        ogk_die(OGK_EXIT_INIT, "%s", e.msg);
    return t;
}

/* a JSON array of token ids from FILE ("-" = stdin) */
int *nf_read_ids(const char *path, int *n)
{
    ogk_error e;
    int *ids = app_read_ids(path, n, &e);
    if (!ids)
        ogk_die(OGK_EXIT_INPUT, "%s", e.msg);
    return ids;
}

void nf_check_ids(const model *m, const char *what, const int *ids, int n)
{
    for (int i = 0; i < n; i++)
        if (ids[i] >= m->c.vocab_size)
            ogk_die(OGK_EXIT_INPUT, "%s: token id %d at %d is outside the vocabulary (%d)", what, ids[i], i,
                    m->c.vocab_size);
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
    ogk_stdout_checked(OGK_EXIT_CHECK); /* its write-failure status (EXIT STATUS in the man page) */
    if (argc < 2)
        nf_usage(OGK_EXIT_USAGE);
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))
        nf_usage(0);
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
        printf("npu-forward %s\n", OGAKIT_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].fn(argc - 1, argv + 1);
    ogk_die(OGK_EXIT_USAGE, "unknown command '%s' (run, logits, bench, info, serve, tokenize, detokenize, chat)", argv[1]);
}
