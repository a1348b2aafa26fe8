/* npu-forward serve: the OpenAI-compatible server (lib/serve) from the command line, until SIGINT, SIGTERM or SIGHUP. */
#include <ctype.h>
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

static volatile sig_atomic_t serve_stop;
/* the first signal drains, a second one cuts the drain short (the in-flight requests cancelled now) */
static void on_signal(int sig) { (void)sig, serve_stop = serve_stop ? 2 : 1; }
static void serve_log(const char *line, void *ctx) { (void)ctx, ogk_err("%s", line); }

/* "*", or http(s)://host[:port]: a browser's Origin, no path, nothing a header could not carry */
static int cors_origin(const char *s)
{
    if (!strcmp(s, "*"))
        return 1;
    const char *h = !strncmp(s, "http://", 7) ? s + 7 : !strncmp(s, "https://", 8) ? s + 8 : NULL;
    if (!h || !*h)
        return 0;
    for (const char *p = h; *p; p++)
        if (!(isalnum((unsigned char)*p) || strchr(".-:[]", *p)))
            return 0;
    return 1;
}

int cmd_serve(int argc, char **argv)
{
    enum { S_HOST = 300, S_PORT, S_PARALLEL, S_QUEUE, S_API_KEY, S_PREFIX, S_MODE, S_NO_MMAP, S_MMAP, S_DRAFT, S_DRAFT_MAX, S_GRACE, S_CORS, S_REASONING, S_REQ_TIMEOUT };
    static const struct option so[] = {
        {"model", required_argument, 0, 'm'},     {"threads", required_argument, 0, 't'},
        {"context", required_argument, 0, 'c'},   {"host", required_argument, 0, S_HOST},
        {"port", required_argument, 0, S_PORT},   {"parallel", required_argument, 0, S_PARALLEL},
        {"queue", required_argument, 0, S_QUEUE}, {"api-key", required_argument, 0, S_API_KEY},
        {"prefix-cache", required_argument, 0, S_PREFIX}, {"mode", required_argument, 0, S_MODE},
        {"no-mmap", no_argument, 0, S_NO_MMAP}, {"mmap", no_argument, 0, S_MMAP},   {"draft", required_argument, 0, S_DRAFT},
        {"draft-max", required_argument, 0, S_DRAFT_MAX}, {"shutdown-grace", required_argument, 0, S_GRACE},
        {"request-timeout", required_argument, 0, S_REQ_TIMEOUT},
        {"cors", required_argument, 0, S_CORS},   {"reasoning-format", required_argument, 0, S_REASONING},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    serve_opts o = {.mode = -1, .port = 8080, .parallel = 4, .queue = 256, .prefix_cache = 1, .reasoning = 1, .shutdown_grace = 5, .stop = &serve_stop,
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
        case S_PARALLEL: o.parallel = (int)ogk_parse_long("--parallel", optarg, 1, SERVE_PASS_ROWS); break;
        case S_QUEUE: o.queue = (int)ogk_parse_long("--queue", optarg, 1, 1 << 20); break;
        case S_API_KEY:
            if (!*optarg || strpbrk(optarg, "\r\n"))
                ogk_die(OGK_EXIT_USAGE, "--api-key: an empty key or one with a line break guards nothing");
            o.api_key = optarg;
            break;
        case S_CORS:
            if (!cors_origin(optarg))
                ogk_die(OGK_EXIT_USAGE, "--cors: '%s' is not an origin (\"*\", or http:// or https:// and a host[:port])",
                        optarg);
            o.cors = optarg;
            break;
        case S_REASONING: /* llama-server's names: deepseek is what auto does here */
            if (strcmp(optarg, "auto") && strcmp(optarg, "deepseek") && strcmp(optarg, "none"))
                ogk_die(OGK_EXIT_USAGE, "--reasoning-format: '%s' is not auto, deepseek or none", optarg);
            o.reasoning = strcmp(optarg, "none") != 0;
            break;
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
        case S_NO_MMAP: o.weights_in = Q4NX_IN_LOAD; break;
        case S_MMAP: o.weights_in = Q4NX_IN_MAP; break;
        case S_DRAFT: o.draft_path = optarg; break;
        case S_GRACE: o.shutdown_grace = (double)ogk_parse_long("--shutdown-grace", optarg, 0, 86400); break;
        case S_REQ_TIMEOUT: o.request_timeout = (double)ogk_parse_long("--request-timeout", optarg, 1, 86400); break;
        case S_DRAFT_MAX: o.draft_max = (int)ogk_parse_long("--draft-max", optarg, 1, MODEL_VERIFY_MAX - 1); break;
        case 'h': nf_usage(0);
        default: nf_usage(OGK_EXIT_USAGE);
        }
    }
    if (optind < argc)
        ogk_die(OGK_EXIT_USAGE, "unexpected argument '%s'", argv[optind]);
    if (!o.model_path)
        ogk_die(OGK_EXIT_USAGE, "serve: -m MODEL is required");
    if (o.draft_max && !o.draft_path) /* it was taken and ignored */
        ogk_die(OGK_EXIT_USAGE, "serve: --draft-max without --draft D.q4nx (no drafter to propose tokens)");
    int dk = o.draft_max > 0 ? o.draft_max : SERVE_DRAFT_MAX; /* the verify rows of all slots fit one pass (serve_sched_drafter) */
    if (o.draft_path && o.parallel * (dk + 1) > SERVE_PASS_ROWS)
        ogk_die(OGK_EXIT_USAGE, "serve: --parallel %d with --draft: each slot's pass checks --draft-max + 1 = %d rows, "
                "and all of them must fit one pass of %d rows (at most --parallel %d here)", o.parallel, dk + 1,
                SERVE_PASS_ROWS, SERVE_PASS_ROWS / (dk + 1));
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    /* SIGHUP (the terminal it was started from closed) drains as SIGTERM does: it ended the process at once,
     * dropping the requests in flight; one started with it ignored (nohup) keeps ignoring it */
    struct sigaction hup;
    if (sigaction(SIGHUP, NULL, &hup) || hup.sa_handler != SIG_IGN)
        sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    ogk_error e;
    int code;
    if (serve_run(&o, &e, &code))
        ogk_die(code, "serve: %s", e.msg);
    ogk_err("serve: stopped");
    return 0;
}
