/* lib/serve — `npu-forward serve`: an OpenAI-compatible HTTP server over one model.
 *
 * Owns the HTTP side (libmicrohttpd: routing, API keys, body limits, SSE streaming, OpenAI's error
 * shape), request parsing and validation (req.c), and the scheduler (sched.c): one thread owns the
 * model and its slots (one KV cache each); every step it runs the next token of every decoding slot
 * together as one pass of M = active rows (model_forward_batch); waiting prompts are read in the same
 * passes in i8 mode (up to SERVE_PASS_ROWS rows a pass), in chunks of their own between steps in f32 mode. A slot keeps the ids of what its cache holds, so a
 * prompt that shares a prefix with the previous one served there reuses that KV (timings.cache_n).
 * Greedy output never depends on who else is served (model.h: model_forward_batch).
 * Must not touch argv, exit or signals (the program owns them), nor model or kernel internals.
 */
#ifndef OGK_SERVE_H
#define OGK_SERVE_H

#include <signal.h>
#include <stddef.h>

#include "util/util.h"

/* rows of one batched pass at most (decode rows, drafts, prompt rows): a running stream waits at most
 * one such pass for its next token while a burst of prompts is read; also the most slots */
#define SERVE_PASS_ROWS 128
#define SERVE_DRAFT_MAX 4 /* tokens a drafter proposes per step unless told (--draft-max) */

typedef struct serve_opts {
    const char *model_path;
    const char *host;    /* NULL: 127.0.0.1 */
    int port;            /* 0: any free port (reported through on_ready) */
    int parallel;        /* slots, >= 1 */
    int queue;           /* requests waiting for a slot before 503 */
    int context;         /* positions per slot (0: the model's) */
    int threads;         /* <= 0: online CPUs */
    int mode;            /* enum kern_mode; -1: the pack's (model_default_mode) */
    int weights_in; /* Q4NX_IN_* (--mmap, --no-mmap) */
    int prefix_cache;    /* reuse a slot's KV for a shared prompt prefix */
    const char *api_key; /* NULL: none */
    const char *cors;    /* Access-Control-Allow-Origin for browser pages ("*" or an origin); NULL: none */
    const char *draft_path; /* a drafter container (same vocabulary): greedy requests decode speculatively */
    int draft_max;          /* tokens it proposes per step (0: SERVE_DRAFT_MAX) */
    int reasoning;        /* chat answers: a <think> block goes to reasoning_content (1, "auto"), or stays in content (0) */
    size_t body_limit;   /* bytes; 0: 8 MiB */
    double shutdown_grace; /* seconds in-flight requests get to finish after *stop (< 0: 5) */
    double request_timeout; /* seconds a connection has to send a whole request, from its opening or its last
                             * answer (a client sending a byte now and then holds no connection longer); 0: 30 */
    /* set (e.g. by a signal handler) to stop: stop accepting, finish in-flight requests, return 0; set above 1
     * while they finish (a second signal): the grace is over, they are cancelled now */
    volatile sig_atomic_t *stop;
    /* status lines (listening, loaded, stopping): the program decides where they go; may be NULL */
    void (*log)(const char *line, void *ctx);
    void *log_ctx;
} serve_opts;

/* Serve until *o->stop is set. 0 after a clean shutdown; -1 with e filled and *code the exit status
 * to use: 4 the server could not start (address in use, bad host, the model does not load), 2 bad
 * options. */
int serve_run(const serve_opts *o, ogk_error *e, int *code);

#endif
