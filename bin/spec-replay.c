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
#include <getopt.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/app.h"
#include "kern/kern.h"
#include "spec-replay/sr.h"
#include "util/util.h"

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
          "  --api-key KEY       sent to --draft-url as \"Authorization: Bearer KEY\" (as serve --api-key wants)\n"
          "  -t THREADS          worker threads (default: online CPUs)\n"
          "  -c CONTEXT          live: positions per KV cache (default: prompt + n + k + 1)\n"
          "  --mode f32|i8       activations of the models (default: the pack's, as npu-forward; the target's\n"
          "                      when there are two models)\n"
          "  --ignore-eos        live: keep going past EOS ids\n"
          "  --no-mmap, --mmap   read containers into 2 MiB huge pages / map them (default: as npu-forward)\n"
          "  --verify            check every weight's checksum of the containers first\n"
          "  --json              JSON instead of the table\n"
          "  --selftest          run the replay rule's and the economics' self-test (TAP)\n"
          "  -h, --help          this text (-V, --version: the version)\n"
          "Exit: 0 ok, 1 live output differs from plain greedy at a step that is not a near-tie, or a\n"
          "self-test arm failed, or the output could not be written, 2 usage, 3 input refused (a malformed recording, a drafter whose tokenizer\n"
          "or vocabulary does not fit it, a server unreachable), 4 init failed (a model).\n",
          f);
}

struct sr_opts opt = {.n = 128, .k = 4, .mode = -1, .timeout = 120, .tokens = 64};

/* ---- shared: the model from the common options, a state, the live prompt ---- */
model *open_model(const char *path)
{
    ogk_error e;
    int code;
    app_model_opts mo = {.model = path, .threads = opt.threads, .mode = opt.mode, .weights_in = opt.weights_in, .verify = opt.verify};
    model *m = app_model_open(&mo, &e, &code);
    if (!m)
        ogk_die(code, "%s", e.msg);
    if (opt.mode < 0) /* the first model opened (the target, or a replay's drafter) decides */
        opt.mode = app_mode(m, &mo);
    return m;
}

/* the prompt's ids (--ids, or -p / -f encoded with the target's tokenizer); no more than max_ids */
int *prompt_ids(const model *m, int max_ids, int *n)
{
    ogk_error e;
    if (opt.ids_file) {
        int *ids = app_read_ids(opt.ids_file, n, &e);
        if (!ids)
            ogk_die(OGK_EXIT_INPUT, "%s", e.msg);
        return ids;
    }
    tok *t = app_model_tokenizer(m, &e);
    if (!t)
        ogk_die(OGK_EXIT_INIT, "%s: %s", opt.target, e.msg);
    app_prompt p = {.text = opt.prompt};
    char *text = NULL;
    if (opt.prompt)
        p.len = strlen(opt.prompt);
    else if (!(text = app_read_text(opt.prompt_file, &p.len, &e)))
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
void check_pair(const model *T, const model *D)
{
    if (T->c.vocab_size != D->c.vocab_size)
        ogk_die(OGK_EXIT_INIT, "%s has a vocabulary of %d, %s of %d: a drafter must share the target's", opt.draft,
                D->c.vocab_size, opt.target, T->c.vocab_size);
    const uint8_t *a, *b;
    size_t al, bl;
    int ha = !q4nx_asset(T->file, "tokenizer.json", &a, &al), hb = !q4nx_asset(D->file, "tokenizer.json", &b, &bl);
    if (ha != hb || (ha && (al != bl || memcmp(a, b, al))))
        ogk_err("warning: %s: its tokenizer.json differs from %s's; token ids are used as they are", opt.draft, opt.target);
}

model_state *new_state(const model *m, int context, int logit_rows)
{
    ogk_error e;
    int code;
    app_model_opts mo = {.threads = opt.threads, .mode = opt.mode};
    model_state *s = app_state_new(m, &mo, context, logit_rows, &e, &code);
    if (!s)
        ogk_die(code, "%s", e.msg);
    return s;
}


/* text to ids with the post-processor's special tokens (as the live mode's -p and npu-forward run) */
int *encode_text(tok *t, const char *text, size_t len, int *n, ogk_error *e)
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
int parse_list(const char *option, const char *s, double *v, int max, int integer, double lo, double hi)
{
    int n = 0;
    ogk_check_list(option, s);
    char *dup = strdup(s), *save = NULL;
    for (char *t = strtok_r(dup, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (n == max)
            ogk_die(OGK_EXIT_USAGE, "%s: more than %d values", option, max);
        v[n++] = integer ? (double)ogk_parse_long(option, t, (long)lo, (long)hi) : ogk_parse_double(option, t);
        if (!integer && !(v[n - 1] >= lo && v[n - 1] <= hi))
            ogk_die(OGK_EXIT_USAGE, "%s: '%s' is not a time in ms above 0", option, t);
    }
    free(dup);
    if (!n)
        ogk_die(OGK_EXIT_USAGE, "%s: no value", option);
    return n;
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
    ogk_stdout_checked(OGK_EXIT_CHECK); /* its write-failure status (EXIT STATUS in the man page) */
    if (argc > 1 && !strcmp(argv[1], "record"))
        return record_main(argc - 1, argv + 1);
    if (argc == 2 && (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V"))) { /* as every program */
        printf("spec-replay %s\n", OGAKIT_VERSION);
        return 0;
    }
    enum { O_IDS = 256, O_MODE, O_IGNORE_EOS, O_JSON, O_NO_MMAP, O_MMAP, O_DRAFT_URL, O_RECORDING, O_STEP, O_PASS, O_MEASURE,
           O_SELFTEST, O_TIMEOUT, O_VERIFY, O_API_KEY };
    static const struct option lo[] = {
        {"model", 1, 0, 'm'},       {"draft", 1, 0, 'd'},         {"prompt", 1, 0, 'p'},
        {"file", 1, 0, 'f'},        {"ids", 1, 0, O_IDS},         {"mode", 1, 0, O_MODE},
        {"ignore-eos", 0, 0, O_IGNORE_EOS}, {"json", 0, 0, O_JSON}, {"no-mmap", 0, 0, O_NO_MMAP}, {"mmap", 0, 0, O_MMAP},
        {"draft-url", 1, 0, O_DRAFT_URL}, {"recording", 1, 0, O_RECORDING}, {"step-ms", 1, 0, O_STEP},
        {"pass-ms", 1, 0, O_PASS},  {"measure", 0, 0, O_MEASURE}, {"selftest", 0, 0, O_SELFTEST},
        {"timeout", 1, 0, O_TIMEOUT}, {"k", 1, 0, 'k'},          {"help", 0, 0, 'h'},
        {"verify", 0, 0, O_VERIFY}, {"api-key", 1, 0, O_API_KEY},
        {0, 0, 0, 0}};
    int c, k_given = 0;
    double v[SPEC_K_MAX];
    while ((c = getopt_long(argc, argv, "m:d:p:f:n:k:t:c:h", lo, NULL)) != -1) {
        switch (c) {
        case 'm': opt.target = optarg; break;
        case 'd': opt.draft = optarg; break;
        case 'p': opt.prompt = optarg; break;
        case 'f': opt.prompt_file = optarg; break;
        case O_IDS: opt.ids_file = optarg; break;
        case 'n': opt.n = (int)ogk_parse_long("-n", optarg, 1, 1 << 20); break;
        case 'k':
            opt.nk = parse_list("-k", optarg, v, SPEC_K_MAX, 1, 1, SPEC_K_MAX);
            for (int i = 0; i < opt.nk; i++)
                opt.ks[i] = (int)v[i];
            opt.k = opt.ks[0], k_given = 1;
            break;
        case 't': opt.threads = (int)ogk_parse_long("-t", optarg, 1, 1024); break;
        case 'c': opt.context = (int)ogk_parse_long("-c", optarg, 2, 1 << 24); break;
        case O_MODE:
            if ((opt.mode = kern_mode_parse(optarg)) < 0)
                ogk_die(OGK_EXIT_USAGE, "--mode: '%s' is not f32 or i8", optarg);
            break;
        case O_IGNORE_EOS: opt.ignore_eos = 1; break;
        case O_JSON: opt.json = 1; break;
        case O_NO_MMAP: opt.weights_in = Q4NX_IN_LOAD; break;
        case O_MMAP: opt.weights_in = Q4NX_IN_MAP; break;
        case O_VERIFY: opt.verify = 1; break;
        case O_DRAFT_URL: opt.draft_url = optarg; break;
        case O_API_KEY: opt.api_key = optarg; break;
        case O_RECORDING: opt.recording = optarg; break;
        case O_STEP:
            opt.step_ms = ogk_parse_double("--step-ms", optarg);
            if (!(opt.step_ms > 0))
                ogk_die(OGK_EXIT_USAGE, "--step-ms: want a time in ms above 0");
            break;
        case O_PASS: opt.n_pass = parse_list("--pass-ms", optarg, opt.pass_ms, SPEC_K_MAX, 0, 1e-9, 1e12); break;
        case O_MEASURE: opt.measure = 1; break;
        case O_SELFTEST: opt.selftest = 1; break;
        case O_TIMEOUT:
            opt.timeout = ogk_parse_double("--timeout", optarg);
            if (!(opt.timeout > 0))
                ogk_die(OGK_EXIT_USAGE, "--timeout: want seconds above 0");
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return OGK_EXIT_USAGE;
        }
    }
    if (optind < argc)
        ogk_die(OGK_EXIT_USAGE, "unexpected argument '%s'", argv[optind]);
    if (opt.selftest) {
        int fails = spec_selftest(st_report, NULL);
        printf("1..%d\n", st_n);
        return fails ? OGK_EXIT_CHECK : 0;
    }
    if (!k_given)
        opt.ks[0] = opt.k, opt.nk = 1;
    if (opt.api_key && !opt.draft_url) /* a key for no server: never sent, so never silently accepted */
        ogk_die(OGK_EXIT_USAGE, "--api-key goes with --draft-url (record: with --url)");
    int live_mode = opt.prompt || opt.prompt_file || opt.ids_file;
    if (live_mode) {
        if (opt.draft_url || opt.recording || opt.n_pass || opt.step_ms > 0 || opt.measure)
            ogk_die(OGK_EXIT_USAGE, "live mode (-p, -f, --ids) takes no --draft-url, --recording, --step-ms, "
                                    "--pass-ms or --measure: those are the replay's");
        if (opt.nk > 1)
            ogk_die(OGK_EXIT_USAGE, "live mode runs one k; a list of k is for replays of a recording");
        return live();
    }
    /* replay */
    if (!!opt.draft + !!opt.draft_url != 1)
        ogk_die(OGK_EXIT_USAGE, opt.draft || opt.draft_url ? "give one drafter: -d DRAFT or --draft-url URL"
                                                      : "a replay needs a drafter: -d DRAFT or --draft-url URL; live "
                                                        "mode needs -m TARGET -d DRAFT and a prompt (see --help)");
    if (opt.n_pass && !(opt.step_ms > 0))
        ogk_die(OGK_EXIT_USAGE, "--pass-ms needs --step-ms (one target decode step, ms)");
    if (opt.step_ms > 0 && !opt.n_pass)
        ogk_die(OGK_EXIT_USAGE, "--step-ms needs --pass-ms (one verify pass of k+1 rows, ms)");
    if (opt.n_pass > 1 && opt.n_pass != opt.nk)
        ogk_die(OGK_EXIT_USAGE, "--pass-ms: %d values for %d values of -k (give one, or one per k)", opt.n_pass, opt.nk);
    for (int i = 0; i < opt.n_pass; i++)
        if (opt.pass_ms[i] < opt.step_ms)
            ogk_die(OGK_EXIT_USAGE, "--pass-ms %g is below --step-ms %g: a verify pass of k+1 rows costs at least one "
                                    "decode step",
                    opt.pass_ms[i], opt.step_ms);
    if (opt.measure && opt.n_pass)
        ogk_die(OGK_EXIT_USAGE, "--measure or --step-ms/--pass-ms, not both");
    if (opt.measure && !opt.target)
        ogk_die(OGK_EXIT_USAGE, "--measure needs -m TARGET.q4nx (the target to time)");
    if (opt.target && !opt.measure)
        ogk_die(OGK_EXIT_USAGE, "-m TARGET without a prompt (-p, -f, --ids; live mode) or --measure (replay)");
    if (opt.ignore_eos || opt.context || opt.n != 128)
        ogk_die(OGK_EXIT_USAGE, "-n, -c and --ignore-eos are live mode's (a replay follows the recording)");
    return replay();
}
