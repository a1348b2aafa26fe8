/* lib/spec — speculative decoding measured in two steps: a recording of a target's greedy
 * continuations (a versioned JSON document, man/man5/spec-recording.5), replays of a drafter against
 * it under the real loop's rule, and the economics that turn acceptance and costs into projected
 * speed-ups. Also the two kinds of peer a recording or a replay talks to: a container (through
 * lib/model's API: greedy decoding, a prefix-cached greedy drafter, timed passes) and an
 * OpenAI-compatible HTTP server (libcurl: /v1/completions with token-id prompts).
 * Owns the recording format, the replay rule and the economics formulas. Must not parse argv, print,
 * or exit (programs do), and knows nothing of the forward pass beyond model.h. The pure parts
 * (recording.c, replay.c, econ.c, selftest.c) use only lib/util. */
#ifndef OGK_SPEC_H
#define OGK_SPEC_H

#include "util/util.h"

#define SPEC_REC_FORMAT "ogakit-spec-recording"
#define SPEC_REC_VERSION 1
#define SPEC_K_MAX 16 /* drafts per round (a verify pass holds k + 1 rows) */

/* ---- the recording (recording.c) ---- */
typedef struct spec_prompt {
    char *name, *kind, *text; /* text NULL: the prompt was given as ids */
    int *ids, n_ids;          /* the prompt, in the target's tokenizer */
    int *cont, n_cont;        /* the target's greedy continuation (EOS excluded) */
    char *cont_text;          /* may be NULL */
    float *gaps;              /* [n_cont] top-1 minus top-2 logit per step, or NULL (unknown) */
    char *stop;               /* "eos", "length", "context" */
    double decode_ms;         /* decode passes (a container); < 0: unknown */
    double request_ms;        /* the HTTP request, prefill included (a server); < 0: unknown */
} spec_prompt;

typedef struct spec_rec {
    int version;
    int vocab_size;       /* the target's; 0 unknown */
    char *tokenizer_hash; /* "crc32c:xxxxxxxx" of tokenizer.json, or NULL */
    json_t *target;       /* {"container","checksum"} or {"url","model"} (owned) */
    spec_prompt *p;
    int n;
    json_t *doc; /* the parsed document (owned) */
} spec_rec;

/* Parse and validate a recording. where names the input in errors ("target.json", "stdin"). NULL with
 * e filled: malformed or truncated JSON, a wrong format name or version, a missing or ill-typed field,
 * ids outside the stated vocabulary, gaps of the wrong length. */
spec_rec *spec_rec_parse(const char *buf, size_t len, const char *where, ogk_error *e);
void spec_rec_free(spec_rec *r);
/* A new recording document: target and tokenizer (either may be NULL; stolen), the vocabulary (0
 * unknown), the settings object (stolen). Add prompts with spec_rec_add (copies). */
json_t *spec_rec_new(json_t *target, json_t *tokenizer, int vocab_size, json_t *settings);
int spec_rec_add(json_t *doc, const spec_prompt *p, ogk_error *e);
/* 1 when the two documents' continuations (ids, per prompt) are identical. */
int spec_rec_same_continuations(const json_t *a, const json_t *b);
/* "crc32c:xxxxxxxx" of bytes into buf (>= 16 bytes) */
void spec_hash(const void *data, size_t len, char *buf);

/* ---- the replay rule (replay.c) ----
 * A round starts from the committed prefix (prompt + the continuation's first c tokens), offers
 * k' = min(k, remaining) drafts, accepts the longest run of them equal to the continuation, and
 * commits one more token, the target's own, when the continuation has one left; the last round of a
 * recording ends without it when its drafts reach the continuation's end. So the rounds over a
 * continuation of n tokens commit exactly n, and a perfect drafter at k = 4 over 7 tokens gives two
 * rounds accepting [4, 2] of 6 offered. */
typedef struct spec_drafter {
    /* up to k greedy tokens following prefix[0..n) into out; returns how many (0..k), or -1 with e
     * filled. Fewer than k (an HTTP drafter that stopped) are all that round offers. */
    int (*draft)(void *self, const int *prefix, int n, int k, int *out, ogk_error *e);
    /* optional: take in a new prompt before its first round (timed apart from the drafting, as a
     * target's prefill is apart from its decode steps). 0, or -1 with e filled. */
    int (*prefill)(void *self, const int *prompt, int n, ogk_error *e);
    void *self;
    /* optional: the time in ms the last draft() took as the drafter counts it (an HTTP drafter: its answered
     * attempt, a 429's or 503's pauses left out); NULL: the wall time of the call */
    double (*last_ms)(void *self);
} spec_drafter;

typedef struct spec_result {
    int rounds, offered, accepted, committed;
    int *accepts;    /* [rounds] drafts accepted per round */
    double draft_ms;   /* wall time inside draft() */
    double prefill_ms; /* wall time inside prefill() */
} spec_result;

/* Refusals before a replay. spec_check_vocab: the drafter's vocabulary (0 unknown) must be the
 * recording's, and hold every recorded id. spec_check_prefix: enc, the prompt's text encoded by the
 * drafter's tokenizer, must be a prefix of prompt + continuation (else the drafter would be asked
 * about a sequence it cannot produce). 0, or -1 with e filled naming the prompt. */
int spec_check_vocab(const spec_rec *r, int drafter_vocab, ogk_error *e);
int spec_check_prefix(const spec_prompt *p, int index, const int *enc, int ne, ogk_error *e);

int spec_replay(const int *prompt, int np, const int *cont, int nc, int k, const spec_drafter *d, spec_result *r,
                ogk_error *e);
void spec_result_free(spec_result *r);

/* ---- economics (econ.c) ----
 * Costs in target decode steps: v = verify pass of k+1 rows / one decode step, d = the drafter's
 * measured time per round / one decode step. A one-pass round (the verify pass also runs the token
 * the previous round committed, as lib/model's loop does) costs v + d steps, a two-pass round (verify,
 * then a decode step to consume the committed token) v + 1 + d. Plain greedy makes 1 token per step,
 * so the break-even tokens per round equal those costs and the projected speed-up is tokens per round
 * / cost. Refused: step <= 0, a pass cheaper than a step, a drafter cost <= 0 (no drafter is free:
 * accepting nothing is therefore always a slow-down), tokens per round < 1. */
typedef struct spec_econ {
    double verify_steps, draft_steps;       /* v, d */
    double break_even_one, break_even_two;  /* tokens per round where the speed-up is 1 */
    double speedup_one, speedup_two;        /* projected */
} spec_econ;
int spec_economics(double tokens_per_round, double step_ms, double pass_ms, double draft_ms_per_round,
                   spec_econ *o, ogk_error *e);

/* ---- self-test (selftest.c): the replay rule, the economics and the recording's refusals against
 * hand-worked cases. report() is called once per arm; returns the number of failed arms. ---- */
int spec_selftest(void (*report)(int ok, const char *name, void *ctx), void *ctx);

/* ---- a container as target or drafter (model_peer.c) ---- */
struct model_state;
/* A greedy drafter over a model state that keeps its KV cache between rounds: each call rewinds to
 * the longest common prefix of what it holds and the new prefix, runs the rest (on an empty cache:
 * the prefix but its last token, then the last, as lib/model's live loop does), then drafts. */
typedef struct spec_model_drafter {
    struct model_state *s;
    int *held; /* tokens in the cache, [s->context] */
    int n_held;
    long tokens_run;
} spec_model_drafter;
int spec_model_drafter_init(spec_model_drafter *md, struct model_state *s, ogk_error *e);
void spec_model_drafter_free(spec_model_drafter *md);
int spec_model_draft(void *self, const int *prefix, int n, int k, int *out, ogk_error *e);
/* the prompt but its last token into a fresh cache (the live loop's prefill) */
int spec_model_prefill(void *self, const int *prompt, int n, ogk_error *e);
/* Median over reps (after one warm-up) of one decode step and of one verify pass of rows tokens
 * (all_rows logits), at the position after prompt[0..np). s needs logit_rows >= rows. */
int spec_model_time_passes(struct model_state *s, const int *prompt, int np, int rows, int reps, double *step_ms,
                           double *pass_ms, ogk_error *e);

/* ---- an OpenAI-compatible server as target or drafter (http.c) ---- */
typedef struct spec_http spec_http;
/* url: "http://HOST:PORT" (a trailing slash is ignored). timeout_s bounds each request. */
/* url as it may be shown (messages, recordings, reports): user:password@ as ***@. malloc'd (NULL: out of memory) */
char *spec_url_shown(const char *url);
/* key (NULL: none) sent with every request as "Authorization: Bearer KEY" (npu-forward serve --api-key,
 * OpenAI-compatible servers); 0, or -1 with e filled (a key with a line break, or out of memory) */
int spec_http_key(spec_http *h, const char *key, ogk_error *e);
spec_http *spec_http_new(const char *url, double timeout_s, ogk_error *e);
void spec_http_free(spec_http *h);
typedef struct spec_completion {
    int *ids, n;  /* generated token ids */
    char *text;   /* may be NULL */
    float *gaps;  /* [n] top-1 minus top-2 logprob, or NULL when the server gave no top-2 */
    char stop[16]; /* "eos", "length" */
    double ms;    /* wall time of the request */
} spec_completion;
/* Greedy completion of prompt ids; POST /v1/completions (fallback: llama-server's /completion). 0, or
 * -1 with e filled: unreachable (connection), an HTTP error status, a reply without token ids. */
int spec_http_complete(spec_http *h, const int *prompt, int n, int max_tokens, int ignore_eos, int want_gaps,
                       spec_completion *c, ogk_error *e);
void spec_completion_free(spec_completion *c);
/* GET /v1/models: the first model's id (malloc'd), or NULL when the server names none. */
char *spec_http_model_id(spec_http *h);
/* a drafter over HTTP: greedy /v1/completions of k tokens from each committed prefix */
int spec_http_draft(void *self, const int *prefix, int n, int k, int *out, ogk_error *e);
/* its prefill: the prompt but its last token asked for a token (a server keeping the prefix drafts from there) */
int spec_http_prefill(void *self, const int *prompt, int n, ogk_error *e);
/* its last draft's time, in ms: the answered attempts of its requests (spec_drafter.last_ms) */
double spec_http_last_ms(void *self);

#endif
