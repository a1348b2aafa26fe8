/* lib/serve internals shared by http.c, req.c and sched.c. */
#ifndef OGK_SERVE_INT_H
#define OGK_SERVE_INT_H

#include <pthread.h>
#include <stdint.h>
#include <stddef.h>

#include "model/model.h"
#include "jsongate.h"
#include "serve.h"
#include "tok/tok.h"

#define SERVE_MAX_TOP 20          /* top logprobs per token */
#define SERVE_MAX_STOPS 8
#define SERVE_MAX_N 16            /* choices per request ("n") */
#define SERVE_MAX_CHOICES 64      /* completions: prompts x n per request */
#define SERVE_MAX_TOKENS (1 << 24) /* beyond this max_tokens is refused as absurd */
#define SERVE_MAX_BIAS 4096        /* logit_bias entries */
#define SERVE_SCORE_ROWS 32         /* prompt rows a scoring pass runs (echo with logprobs): a slot's logit rows */

/* ---- an error in OpenAI's shape: {"error": {"message", "type", "param", "code"}} ---- */
typedef struct serve_err {
    int status;
    char message[384];
    const char *type, *param, *code;
} serve_err;
int serve_err_set(serve_err *err, int status, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6))); /* returns -1 */
/* a body jansson could not read: malformed (invalid_json), or a \u0000 it will not hold in a C string */
int serve_json_error(serve_err *err, const json_error_t *je);
/* an answer's or a tool call's id: prefix and 16 random hex digits */
void serve_new_id(char *buf, size_t n, const char *prefix);

/* ---- a parsed request (req.c): plain fields, validated ---- */
enum { REQ_COMPLETION, REQ_CHAT };
typedef struct serve_req {
    int kind;
    char *model;                /* as asked, or NULL */
    char *prompt;               /* completions: text */
    size_t prompt_len;
    int *prompt_ids, n_prompt_ids; /* completions: token ids */
    struct serve_prompt {       /* completions: a list of prompts (text, or ids), each its own choices */
        char *text;
        size_t len;
        int *ids, n_ids;
    } *plist;                   /* NULL: one prompt (prompt / prompt_ids) */
    int n_plist;
    json_t *messages;           /* chat: normalised [{role, content: string}] */
    int max_tokens;             /* 0: not given (or no_tokens) */
    int no_tokens;              /* completions: max_tokens 0 (with echo: the prompt alone) */
    int score;                  /* completions: echo with logprobs, the prompt's tokens get logprobs too */
    double temperature, top_p;
    int top_k;
    int has_seed;
    uint64_t seed;
    char *stops[SERVE_MAX_STOPS];
    int n_stops;
    int stream;
    int include_usage;          /* stream_options.include_usage: usage in a chunk of its own at the end */
    int logprobs;               /* -1 off, else top entries per token (0..SERVE_MAX_TOP) */
    int echo;
    int return_tokens;
    int ignore_eos;
    json_t *tools;              /* chat: the tools the model may call (NULL: none, or tool_choice "none") */
    int tools_off;              /* tool_choice "none" */
    json_t *tmpl_kwargs;        /* chat: chat_template_kwargs, more variables for the template (NULL: none) */
    int null_content;           /* chat: an assistant message with tool calls has content null (or none) */
    int force_tool;             /* tool_choice "required" or a named function: the answer is one call */
    char *force_name;           /* the named function, or NULL (any of the tools) */
    int json;                   /* response_format json_object or json_schema */
    jg_schema *schema;          /* response_format json_schema, compiled */
    json_t *schema_src;         /* ... and as given (each further choice compiles its own) */
    int n_choices;              /* "n": choices to generate (1..SERVE_MAX_N) */
    int *bias_ids, n_bias;      /* logit_bias */
    float *bias;
    double presence_penalty, frequency_penalty;
} serve_req;
/* Parse and validate a request body. 0, or -1 with err filled (a 4xx). */
/* a request member that is present and not null (JSON null is "not given", as OpenAI takes it), else NULL */
static inline const json_t *serve_field(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    return v && !json_is_null(v) ? v : NULL;
}
int serve_req_parse(const char *body, size_t len, int kind, serve_req *r, serve_err *err);
void serve_req_free(serve_req *r);
/* What only the prompt and the jobs needed, dropped once they are made (a request may wait long for a
 * slot): the messages, the template's variables, the schema; the tools keep their names (what reading
 * calls back needs). The JSON values stay (emptied), so copies of r still point at live ones. */
void serve_req_trim(serve_req *r);

/* ---- OpenAI's Responses API over chat (responses.c) ---- */
typedef struct serve_resp serve_resp;
/* A /v1/responses body as a chat-completions body (malloc'd, *len its length) and *rs the state that shapes
 * its answer; NULL with err filled (a 4xx: what the chat path cannot do is refused, naming the field). */
char *serve_resp_request(const char *body, size_t len, size_t *out_len, serve_resp **rs, serve_err *err);
/* an error of the chat path naming a chat field: the Responses field it came from */
void serve_resp_err(serve_err *err);
/* the chat.completion answer (taken) as a response object; NULL out of memory */
json_t *serve_resp_answer(serve_resp *rs, json_t *chat);
/* a chunk of the chat stream (taken; an {"error"} object too) as the Responses stream's events ("event:" and
 * "data:" lines, malloc'd; "" when it makes none); NULL out of memory */
char *serve_resp_events(serve_resp *rs, json_t *chunk);
void serve_resp_free(serve_resp *rs);

/* ---- tool calls (tools.c) ---- */
/* "tools" and "tool_choice" of a chat request into r->tools / r->tools_off. 0, or -1 with err filled. */
int serve_tools_parse(serve_req *r, const json_t *tools, const json_t *choice, serve_err *err);
/* tool calls in one assistant message, at most (a request's, an answer's) */
#define SERVE_MAX_CALLS 128
/* OpenAI's rule for function names: 1..64 of [A-Za-z0-9_-] (also what keeps them out of template syntax) */
int serve_tool_name_ok(const json_t *v);
/* messages[i].tool_calls checked and normalised for templates (arguments as objects); NULL with err filled */
json_t *serve_tool_calls_norm(const json_t *calls, size_t i, serve_err *err);
/* bytes at the start of an answer so far that are plain text whatever follows (streaming holds the rest) */
size_t serve_tools_hold(const char *s, size_t n);
/* the answer's tool calls: their count (0: none, the whole text is content), *calls OpenAI's tool_calls
 * array and *content_len the length of the text before them */
int serve_tools_extract(const char *s, size_t n, const json_t *tools, size_t *content_len, json_t **calls);
/* a forced call (r->force_tool) as a JSON-mode program: one call to r->force_name or any of r->tools, in
 * the Hermes / Qwen form (<tool_call> block, "arguments") or the Llama 3.x one (bare, "parameters"); the
 * arguments keep to the tool's "parameters" where that schema compiles (jg_schema_compile) to objects,
 * else they are any object. NULL: out of memory. */
jg_prog *serve_tools_program(const serve_req *r, int hermes);

/* ---- reasoning (think.c) ---- */
typedef struct serve_think {
    int decided; /* 0: the answer may still open a <think> block (release nothing yet) */
    int has;     /* it has one: reasoning is [r0, r1) */
    size_t r0, r1;
    size_t c0;   /* where the content starts (0 without a block; SIZE_MAX: not known yet) */
} serve_think;
/* The split of an answer's text so far (s, n): open, the prompt left a <think> block open; final, the
 * answer is complete. Without a block everything is content (c0 = 0). */
void serve_think_split(const char *s, size_t n, int open, int final, serve_think *t);
/* the rendered prompt ends inside a <think> block (its last <think> has no </think> after it) */
int serve_think_open(const char *prompt, size_t n);

/* ---- a request in flight, shared by its HTTP thread and the scheduler ---- */
typedef struct serve_job {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    /* what to run (read-only once submitted) */
    int *prompt, n_prompt;
    int max_tokens;
    float temperature, top_p;
    int top_k;
    uint64_t seed;
    char **stops;
    int n_stops;
    int top_n; /* logprobs: -1 off */
    int score; /* the prompt's logprobs too (p_*: entry i for prompt token i, from the logits of i - 1; 0 unset) */
    int p_silent_head, p_silent_tail; /* a scored text prompt: the ids its encoding put around the text's (a BOS),
                                       * which the echoed text does not hold */
    int ignore_eos;
    /* the logits reshaped before sampling (sched.c): JSON mode, biases, penalties on the answer's tokens */
    int json;       /* gated: a JSON object, or the program's text when prog is set */
    jg_prog *prog;  /* a forced tool call (owned) */
    int *bias_ids, n_bias;
    float *bias;
    float presence, frequency;
    /* results, under mu */
    int *ids, n_ids, cap_ids; /* generated ids (the EOS id, if any, is not among them) */
    size_t *tok_at;           /* where each id's text begins in the decoded stream (text's coordinates) */
    size_t decoded;           /* bytes decoded so far (text holds a prefix of them: stop strings cut) */
    float *p_lps;             /* score: [n_prompt] */
    int *p_top_ids;           /* score: [n_prompt][top_n] */
    float *p_top_lps;
    float *lps;               /* logprob of each generated id (with top_n >= 0) */
    int *top_ids;             /* [cap_ids][top_n] */
    float *top_lps;
    char *text;               /* released text (stop strings applied) */
    size_t text_len, text_cap;
    int n_eval;               /* tokens sampled, EOS included (usage.completion_tokens) */
    int done, failed;
    int fail_status;          /* failed: the HTTP status (0: 500, a generation that failed; 503: refused or cut at shutdown) */
    const char *finish;       /* "stop" / "length" */
    char err[256];
    int cancel;               /* set by the HTTP side: the client is gone */
    double t_queued, t_start, t_first, t_end; /* ogk_now() */
    int cache_n, draft_n, draft_accepted;
} serve_job;
/* the ids whose text begins before limit (the released text so far), or all of them once the job is
 * done with nothing cut: logprobs cover the answer's text, not what a stop string cut (under mu) */
static inline int serve_job_covered(const serve_job *j, size_t limit, int done)
{
    if (done && j->decoded <= j->text_len)
        return j->n_ids;
    int n = 0;
    while (n < j->n_ids && j->tok_at[n] < limit)
        n++;
    return n;
}
serve_job *serve_job_new(void);
void serve_job_unref(serve_job *j);

/* ---- the scheduler (sched.c) ---- */
typedef struct serve_slot serve_slot;
typedef struct serve_sched {
    const model *m;
    const model *dm; /* the drafter, or NULL */
    int draft_max;   /* tokens it proposes per step */
    tok *t;
    pthread_mutex_t *tok_mu; /* tok is not thread-safe: every call under this */
    kern_pool *pool;
    model_state *work;
    serve_slot *slots;
    int n_slots, prefix_cache, context;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    serve_job **queue;
    int q_head, q_len, q_cap, q_size; /* q_size: the ring, q_cap + one place a slot (jobs a free slot takes next) */
    int taken;                        /* slots holding a job (admit to finish) */
    int stopping, running;
    volatile sig_atomic_t *hurry; /* > 1 while stopping: the grace is over now (a second signal); may be NULL */
    pthread_t th;
    jg_vocab *jg; /* JSON mode's pieces, built at the first such job (scheduler thread) */
    /* metrics, under mu */
    uint64_t requests, prompt_tokens, gen_tokens, cache_tokens, admitted;
    uint64_t steps, step_rows; /* decode passes and the rows they ran (rows / steps = mean batch) */
    double prompt_s, gen_s;
    long kv_used;
} serve_sched;
/* Slots of `context` positions on a shared pool. 0, or -1 with e filled. */
int serve_sched_init(serve_sched *S, const model *m, tok *t, pthread_mutex_t *tok_mu, int n_slots, int queue,
                     int context, int mode, int threads, int prefix_cache, ogk_error *e);
/* Greedy requests are decoded speculatively: dm proposes up to k tokens, the target checks them as k + 1
 * rows of the step's pass (before serve_sched_start). 0, or -1 with e filled. */
int serve_sched_drafter(serve_sched *S, const model *dm, int k, ogk_error *e);
int serve_sched_start(serve_sched *S, ogk_error *e);
/* Queue a job (takes a reference). 0; -1 the queue is full; -2 the server is stopping. */
int serve_sched_submit(serve_sched *S, serve_job *j);
void serve_sched_wake(serve_sched *S);
/* Stop: queued jobs fail, running ones finish (cancelled after grace_s seconds); joins the thread. */
void serve_sched_stop(serve_sched *S, double grace_s);
void serve_sched_free(serve_sched *S);

#endif
