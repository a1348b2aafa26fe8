/* The HTTP side: libmicrohttpd with one thread per connection (a request's thread may block until
 * its job is done, or stream it), routing, the API key, the body limit, responses in OpenAI's shapes
 * (llama.cpp's timings added), SSE streaming, /tokenize, /detokenize, /metrics; and serve_run, which
 * binds, loads the model while /health answers 503, and shuts down on *stop. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <malloc.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "app/app.h"
#include "kern/kern.h"
#include "serve_int.h"

#define DEFAULT_BODY_LIMIT ((size_t)8 << 20)
#define DEFAULT_COMPLETION_TOKENS 16 /* OpenAI's default max_tokens for /v1/completions */
#define SHUTDOWN_GRACE_S 5
#define REQUEST_TIMEOUT_S 30
#define MAX_CONNECTIONS 1024u
#define BODY_TRIM ((size_t)1 << 20) /* a body this large is given back to the system once parsed */

/* a connection, from its opening to its close: while no request of it has arrived whole (since it opened
 * or its last answer went out), the main loop shuts it after the request timeout (slow-loris: 1024
 * connections each sending a header byte every few seconds held every slot of the HTTP server) */
typedef struct tracked {
    struct tracked *prev, *next;
    int fd;
    int busy;     /* a request arrived whole and is being answered */
    int cut;      /* shut by the deadline */
    double since; /* opened, or its last answer done */
} tracked;

typedef struct server {
    const serve_opts *o;
    model *m, *dm;
    tok *t;
    pthread_mutex_t tok_mu;
    serve_sched S;
    int sched_ok;
    int ready; /* atomic: the model is loaded */
    int stopping; /* atomic: draining after SIGTERM / SIGINT / SIGHUP (/health says so) */
    char model_id[256];
    time_t created; /* /v1/models: the container's write time */
    size_t body_limit;
    size_t body_held; /* atomic: bytes of request bodies being received, at most BODY_BUDGET body limits */
    uint64_t http_requests, http_errors; /* atomic */
    int inflight; /* atomic: completion requests not yet fully answered (shutdown waits for them) */
    pthread_mutex_t conn_mu; /* the open connections (notify_connection adds and removes them) */
    tracked *conns;
    double request_timeout;
    uint64_t conns_cut; /* connections shut for not sending a request in time */
    int tmpl_bad;              /* APP_TEMPLATE_*: a chat template that does not parse (found at start) */
    ogk_error tmpl_e, tools_e; /* what is wrong with it (the default one, the tool_use one) */
} server;

static void conn_busy(server *srv, struct MHD_Connection *c, int busy);

typedef struct conn {
    server *srv;
    char *body;
    size_t len, cap;
    int too_big, responded, counted, over_budget;
    size_t dropped; /* body bytes swallowed after a refusal */
    serve_resp *resp; /* /v1/responses: its body is a chat request, whose answer this shapes */
} conn;

/* bodies being received together hold at most this many body limits (256 MiB at the default 8 MiB): each
 * connection may buffer up to the limit, and a local client can open hundreds; a body that would pass the
 * budget is dropped and answered 503 server_busy */
#define BODY_BUDGET 32

/* the connection's body buffer freed and its bytes given back to the budget */
static void body_free(server *srv, conn *cn)
{
    if (cn->cap)
        __atomic_sub_fetch(&srv->body_held, cn->cap, __ATOMIC_RELAXED);
    free(cn->body);
    cn->body = NULL, cn->len = cn->cap = 0;
}

/* the request is being answered: no more of it is read, and the request timeout stops counting */
static void answering(server *srv, struct MHD_Connection *c, conn *cn)
{
    cn->responded = 1;
    conn_busy(srv, c, 1);
}

/* a refused request's body is read and dropped so that its answer can go out, but only up to the body
 * limit: a client that keeps sending (an endless chunked body) is disconnected */
static enum MHD_Result drop_body(const server *srv, conn *cn, size_t *upload_size)
{
    cn->dropped += *upload_size;
    *upload_size = 0;
    return cn->dropped > srv->body_limit ? MHD_NO : MHD_YES;
}

/* text -> ids (int), refusing an empty encoding and, as soon as it is clear, one of more than max_ids */
static int *encode(tok *t, const char *text, size_t len, int add_special, size_t max_ids, int *n, ogk_error *e)
{
    int32_t *ids32;
    size_t nn;
    if (tok_encode_max(t, text, len, add_special, max_ids, &ids32, &nn, e))
        return NULL;
    if (nn == 0) {
        free(ids32);
        ogk_fail(e, "empty (no tokens)");
        return NULL;
    }
    int *ids = malloc(nn * sizeof *ids);
    for (size_t i = 0; ids && i < nn; i++)
        ids[i] = ids32[i];
    free(ids32);
    if (!ids)
        ogk_fail(e, "out of memory");
    *n = (int)nn;
    return ids;
}

/* ---------------------------------------------------------------- small helpers */

static void logf_(const server *srv, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void logf_(const server *srv, const char *fmt, ...)
{
    if (!srv->o->log)
        return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    srv->o->log(line, srv->o->log_ctx);
}

/* a JSON string of bytes that may not be valid UTF-8 (decoded pieces are; be safe anyway) */
static json_t *jstr(const char *s, size_t n)
{
    json_t *j = json_stringn(s ? s : "", s ? n : 0);
    if (j)
        return j;
    char *c = malloc(n * 3 + 1);
    size_t o = 0;
    for (size_t i = 0; c && i < n;) {
        size_t ok = tok_utf8_check(s + i, n - i); /* length of the valid prefix */
        memcpy(c + o, s + i, ok);
        o += ok, i += ok;
        if (i < n)
            memcpy(c + o, "\xEF\xBF\xBD", 3), o += 3, i++;
    }
    j = json_stringn(c ? c : "", c ? o : 0);
    free(c);
    return j ? j : json_string("");
}

/* --cors ORIGIN: the header that lets a browser page of that origin read the answers (none without it) */
static void add_cors(const server *srv, struct MHD_Response *r)
{
    if (!srv->o->cors)
        return;
    MHD_add_response_header(r, "Access-Control-Allow-Origin", srv->o->cors);
    if (strcmp(srv->o->cors, "*"))
        MHD_add_response_header(r, "Vary", "Origin");
}

/* buf (malloc'd, taken) as the answer, with one more header hname: hval when hname is given (a 503's
 * Retry-After, a 405's Allow); close: the connection closes after it (what follows cannot be framed) */
static enum MHD_Result send_text_close(const server *srv, struct MHD_Connection *c, int status, const char *type,
                                       char *buf, size_t len, const char *hname, const char *hval, int close)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, buf, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(buf);
        return MHD_NO;
    }
    add_cors(srv, r);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (hname)
        MHD_add_response_header(r, hname, hval);
    if (close)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_text(const server *srv, struct MHD_Connection *c, int status, const char *type, char *buf,
                                 size_t len)
{
    return send_text_close(srv, c, status, type, buf, len, NULL, NULL, 0);
}

static enum MHD_Result send_json(const server *srv, struct MHD_Connection *c, int status, json_t *j)
{
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!s)
        return MHD_NO;
    return send_text(srv, c, status, "application/json", s, strlen(s));
}

static json_t *err_json(const serve_err *err)
{
    return json_pack("{s:{s:s,s:s,s:s?,s:s?}}", "error", "message", err->message, "type", err->type, "param",
                     err->param, "code", err->code);
}

/* allow: a 405's methods (its Allow header) */
static enum MHD_Result send_err_allow(server *srv, struct MHD_Connection *c, const serve_err *err, int close,
                                      const char *allow)
{
    __atomic_add_fetch(&srv->http_errors, 1, __ATOMIC_RELAXED);
    json_t *j = err_json(err);
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!s) /* out of memory: a fixed answer rather than none */
        s = strdup("{\"error\":{\"message\":\"server error\",\"type\":\"server_error\",\"param\":null,\"code\":null}}");
    if (!s)
        return MHD_NO;
    return send_text_close(srv, c, err->status, "application/json", s, strlen(s),
                           err->status == 503 ? MHD_HTTP_HEADER_RETRY_AFTER : allow ? MHD_HTTP_HEADER_ALLOW : NULL,
                           err->status == 503 ? "1" : allow, close);
}

static enum MHD_Result send_err_close(server *srv, struct MHD_Connection *c, const serve_err *err, int close)
{
    return send_err_allow(srv, c, err, close, NULL);
}

static enum MHD_Result send_err(server *srv, struct MHD_Connection *c, const serve_err *err)
{
    return send_err_close(srv, c, err, 0);
}

static enum MHD_Result fail(server *srv, struct MHD_Connection *c, int status, const char *param, const char *code,
                            const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static enum MHD_Result fail(server *srv, struct MHD_Connection *c, int status, const char *param, const char *code,
                            const char *fmt, ...)
{
    serve_err err;
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    serve_err_set(&err, status, param, code, "%s", msg);
    return send_err(srv, c, &err);
}

/* 405, with the Allow header RFC 9110 asks for: post, the endpoint takes POST, else GET (and HEAD) */
static enum MHD_Result not_allowed(server *srv, struct MHD_Connection *c, const char *method, const char *url, int post)
{
    serve_err err;
    serve_err_set(&err, 405, NULL, "method_not_allowed", "%.64s %.200s: use %s", method, url, post ? "POST" : "GET");
    return send_err_allow(srv, c, &err, 0, post ? "POST, OPTIONS" : "GET, HEAD, OPTIONS");
}

/* the headers that frame the body: Content-Length (the first value, and whether another differs),
 * Transfer-Encoding (how many, the last value), and whether a field name is malformed */
typedef struct {
    const char *first;
    int differ;
    int n_te;
    const char *te;
    int bad_name;
} cl_seen;

/* RFC 9110 5.1: a field name is a token */
static int token_char(unsigned char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

static enum MHD_Result cl_visit(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    (void)kind;
    cl_seen *cl = cls;
    size_t n = strlen(key);
    for (size_t i = 0; i < n; i++)
        cl->bad_name |= !token_char((unsigned char)key[i]);
    /* libmicrohttpd 0.9 joins a folded line (obs-fold) onto the field's name ("Content-Length:\r\n 30" is a
     * field "Content-Length30" without a value): a framing field's name with more after it was one */
    static const char *const framing[] = {MHD_HTTP_HEADER_CONTENT_LENGTH, MHD_HTTP_HEADER_TRANSFER_ENCODING};
    for (int k = 0; k < 2; k++)
        cl->bad_name |= n > strlen(framing[k]) && !strncasecmp(key, framing[k], strlen(framing[k]));
    cl->bad_name |= n == 0;
    if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING)) {
        cl->n_te++;
        cl->te = value ? value : "";
    }
    if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH))
        return MHD_YES;
    if (!cl->first)
        cl->first = value ? value : "";
    else if (strcmp(cl->first, value ? value : ""))
        cl->differ = 1;
    return MHD_YES;
}

/* A request whose body length cannot be told (RFC 9112 6.1, 6.3: a transfer coding other than a final
 * chunked, Transfer-Encoding given twice (its values are one list: "chunked, chunked" or "chunked,
 * identity"); Content-Length given twice with different values, or beside Transfer-Encoding: the
 * request-smuggling forms), or whose header has a field name that is not a token (RFC 9112 5.1: white
 * space before the colon, which this libmicrohttpd takes as part of the name, so "Content-Length : 30"
 * framed nothing; 5.2: a line folded onto a framing field): 400, and the
 * connection closes (what follows on it cannot be framed). NULL: the framing is fine. */
static const char *bad_framing(struct MHD_Connection *c)
{
    cl_seen cl = {0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, cl_visit, &cl);
    const char *te = cl.te;
    if (cl.bad_name)
        return "a header field name that is not a token (white space before its colon, or a line folded onto it)";
    if (cl.n_te > 1)
        return "Transfer-Encoding given more than once (the body's length cannot be told)";
    if (te && strcasecmp(te, "chunked"))
        return "Transfer-Encoding other than chunked alone (the body's length cannot be told)";
    if (te && cl.first) /* RFC 9112 6.3: a server may reject it; which length a proxy in front used is unknown */
        return "both Transfer-Encoding and Content-Length (the request-smuggling form)";
    return cl.differ ? "Content-Length given twice with different values" : NULL;
}

static enum MHD_Result refuse_framing(server *srv, struct MHD_Connection *c, const char *why)
{
    serve_err err;
    serve_err_set(&err, 400, NULL, "bad_request", "%s", why);
    return send_err_close(srv, c, &err, 1);
}

static int conn_fd(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* the client's side of the connection: 0 open, 1 it has shut its sending side (a close or a TCP half-close,
 * alike on the wire until something is written to it), 2 the socket failed (a reset: nobody reads). Asked
 * of poll, not of a peek at the input: bytes the client sent after its request (a pipelined next request)
 * sit unread before its end of input, and a peek would see them, never the close behind them */
static int peer_state(int fd)
{
    if (fd < 0)
        return 0;
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0)
        return 0;
    if (p.revents & (POLLERR | POLLHUP | POLLNVAL))
        return 2;
    return p.revents & POLLRDHUP ? 1 : 0;
}

/* wait until the job has more text than text_seen, more tokens than toks_seen (unless < 0) or is
 * done (toks_seen -2: only done); -1 when the client is gone (the job is cancelled). stream: 1 when the
 * client has shut its sending side, which a stream answers with an SSE comment (stream_probe): a client
 * that has left resets the connection on it, one that half-closed reads on (a whole answer's client that
 * shut its side counts as gone) */
static int job_wait(serve_job *j, int fd, size_t text_seen, int toks_seen, int stream)
{
    double checked = ogk_now();
    pthread_mutex_lock(&j->mu);
    while (!j->done && (toks_seen == -2 || (j->text_len == text_seen && (toks_seen < 0 || j->n_ids == toks_seen)))) {
        ogk_cond_wait_ms(&j->cv, &j->mu, 100);
        /* every 100 ms, woken or not (a busy job wakes this many times a second) */
        double now = ogk_now();
        if (now - checked < 0.1)
            continue;
        checked = now;
        int ps = peer_state(fd);
        if (ps == 1 && stream) {
            pthread_mutex_unlock(&j->mu);
            return 1;
        }
        if (ps) {
            __atomic_store_n(&j->cancel, 1, __ATOMIC_RELAXED);
            pthread_mutex_unlock(&j->mu);
            return -1;
        }
    }
    pthread_mutex_unlock(&j->mu);
    return 0;
}

/* ---------------------------------------------------------------- the prompt */

static int check_model(server *srv, const serve_req *r, serve_err *err)
{
    if (!r->model || !strcmp(r->model, srv->model_id) || !strcmp(r->model, srv->o->model_path))
        return 0;
    return serve_err_set(err, 404, "model", "model_not_found", "The model '%s' does not exist (this server has '%s')",
                         r->model, srv->model_id);
}

/* token ids of a request's prompt: given ids (checked), text encoded, or messages through the chat
 * template. NULL with err filled. */
/* the prompt's ids; *hermes: the rendered chat prompt speaks of <tool_call> blocks (the form a forced call
 * takes) */
static int *prompt_ids(server *srv, const serve_req *r, int *n, int *hermes, int *think_open, serve_err *err)
{
    const model *m = srv->m;
    if (r->prompt_ids) {
        for (int i = 0; i < r->n_prompt_ids; i++)
            if (r->prompt_ids[i] >= m->c.vocab_size) {
                serve_err_set(err, 400, "prompt", "invalid_value",
                              "prompt[%d]: token id %d is outside the vocabulary (%d)", i, r->prompt_ids[i],
                              m->c.vocab_size);
                return NULL;
            }
        int *ids = malloc((size_t)r->n_prompt_ids * sizeof *ids);
        if (!ids) {
            serve_err_set(err, 500, NULL, NULL, "out of memory");
            return NULL;
        }
        memcpy(ids, r->prompt_ids, (size_t)r->n_prompt_ids * sizeof *ids);
        *n = r->n_prompt_ids;
        return ids;
    }
    ogk_error e;
    char *text = r->prompt;
    size_t len = r->prompt_len;
    int add_special = 1, *ids = NULL;
    /* a template that does not parse is the server's fault, not the request's: 500, and the same words as the
     * line said at start (the tool_use one is taken for a conversation with tools, as tok_chat_render does) */
    int tools_tmpl = r->kind == REQ_CHAT && r->tools && !json_is_null(r->tools) && tok_chat_template_tools(srv->t);
    if (r->kind == REQ_CHAT && (srv->tmpl_bad & (tools_tmpl ? APP_TEMPLATE_TOOLS_BAD : APP_TEMPLATE_BAD))) {
        serve_err_set(err, 500, NULL, "chat_template_invalid", "%s; this server answers completions, not chat",
                      (tools_tmpl ? &srv->tools_e : &srv->tmpl_e)->msg);
        return NULL;
    }
    pthread_mutex_lock(&srv->tok_mu);
    if (r->kind == REQ_CHAT) {
        /* the template writes the special tokens itself (as apply_chat_template does) */
        json_t *vars = json_pack("{s:O,s:b}", "messages", r->messages, "add_generation_prompt", 1);
        if (r->tmpl_kwargs) /* enable_thinking and the like; may turn add_generation_prompt off */
            json_object_update(vars, r->tmpl_kwargs);
        if (r->tools)
            json_object_set(vars, "tools", r->tools);
        const json_t *tmpl = json_object_get(q4nx_model(m->file), "chat_template");
        for (int pass = 0; pass < 2; pass++) {
            text = json_is_string(tmpl) && !tok_chat_template(srv->t)
                       ? tok_jinja_render(json_string_value(tmpl), vars, &len, &e)
                       : tok_chat_render(srv->t, m->c.family_name, vars, &len, &e);
            if (text || !r->null_content || pass)
                break;
            /* the template cannot take an assistant's null content (most concatenate it): "" instead */
            json_t *msgs = json_deep_copy(r->messages), *mv;
            size_t k;
            json_array_foreach(msgs, k, mv) if (json_is_null(json_object_get(mv, "content")))
                json_object_set_new(mv, "content", json_string(""));
            json_object_set_new(vars, "messages", msgs);
        }
        json_decref(vars);
        add_special = 0;
        *hermes = text && strstr(text, "<tool_call>") != NULL;
        *think_open = text && serve_think_open(text, len);
        if (!text) {
            pthread_mutex_unlock(&srv->tok_mu);
            serve_err_set(err, 400, "messages", "invalid_value", "chat template: %s", e.msg);
            return NULL;
        }
    }
    /* a prompt that cannot leave room for a completion is refused without encoding all of it (the lock is
     * the scheduler's too) */
    size_t max_ids = srv->S.context > 1 ? (size_t)srv->S.context - 1 : 1;
    ids = encode(srv->t, text, len, add_special, max_ids, n, &e);
    pthread_mutex_unlock(&srv->tok_mu);
    if (text != r->prompt)
        free(text);
    const char *param = r->kind == REQ_CHAT ? "messages" : "prompt";
    if (!ids && !strncmp(e.msg, "more than", 9))
        serve_err_set(err, 400, param, "context_length_exceeded",
                      "This model's maximum context length is %d tokens; the prompt is %s, leaving no room for a "
                      "completion",
                      srv->S.context, e.msg);
    else if (!ids)
        serve_err_set(err, 400, param, "invalid_value", "prompt: %s", e.msg);
    return ids;
}

/* ---------------------------------------------------------------- response pieces */

/* OpenAI's usage; prompt_tokens_details.cached_tokens: the prompt positions the prefix cache held;
 * completion_tokens_details.reasoning_tokens (chat: reasoning >= 0) the answer's tokens of its <think> block */
static json_t *usage_pack(int prompt, int completion, int cached, int reasoning)
{
    json_t *u = json_pack("{s:i,s:i,s:i,s:{s:i}}", "prompt_tokens", prompt, "completion_tokens", completion,
                          "total_tokens", prompt + completion, "prompt_tokens_details", "cached_tokens", cached);
    if (u && reasoning >= 0)
        json_object_set_new(u, "completion_tokens_details", json_pack("{s:i}", "reasoning_tokens", reasoning));
    return u;
}

/* the generated tokens of a finished job's reasoning (its <think> block, the tags and the white space before
 * the content included: the ids whose text begins before the content), 0 without one; -1 where the request
 * is not chat's. think: the request's answers are split (chat, --reasoning-format auto) */
static int reasoning_tokens(const serve_job *j, int kind, int think, int think_open)
{
    if (kind != REQ_CHAT)
        return -1;
    serve_think th = {0};
    if (think)
        serve_think_split(j->text ? j->text : "", j->text_len, think_open, 1, &th);
    return th.has ? serve_job_covered(j, th.c0, 0) : 0;
}

/* several choices (n per prompt): each prompt's cached positions once, its first choice's (as prompt_tokens
 * counts each prompt once) */
static int cached_total(serve_job *const *jobs, int nj, int n)
{
    int c = 0;
    for (int k = 0; k < nj; k += n > 0 ? n : 1)
        c += jobs[k]->cache_n;
    return c;
}

/* llama.cpp's timings: prompt = the positions evaluated (cached ones not), predicted = tokens sampled */
static json_t *timings_json(const serve_job *j)
{
    double pms = (j->t_first - j->t_start) * 1e3, gms = (j->t_end - j->t_first) * 1e3;
    int pn = j->n_prompt - j->cache_n, gn = j->n_eval;
    if (pms < 0)
        pms = 0;
    if (gms < 0)
        gms = 0;
    return json_pack("{s:i,s:i,s:f,s:f,s:f,s:i,s:f,s:f,s:f,s:i,s:i}", "cache_n", j->cache_n, "prompt_n", pn,
                     "prompt_ms", pms, "prompt_per_token_ms", pn ? pms / pn : 0.0, "prompt_per_second",
                     pms > 0 ? pn / (pms / 1e3) : 0.0, "predicted_n", gn, "predicted_ms", gms,
                     "predicted_per_token_ms", gn > 1 ? gms / (gn - 1) : 0.0, "predicted_per_second",
                     gms > 0 && gn > 1 ? (gn - 1) / (gms / 1e3) : 0.0, "draft_n", j->draft_n, "draft_n_accepted",
                     j->draft_accepted);
}

/* characters of the text the tokens' bytes make, counted as the WHATWG decoder that gives the text reads them
 * (a character, or the U+FFFD of a maximal invalid subpart, at its first byte): text_offset counts characters,
 * as OpenAI's (Python string) offsets do. need: continuation bytes still expected, lo..hi the next one's range. */
typedef struct {
    size_t chars;
    int need;
    uint8_t lo, hi;
    int started; /* a token with text has been counted: the decoder's start-of-text rules are behind */
} u8count;

static void u8count_add(u8count *c, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint8_t b = (uint8_t)s[i];
        if (c->need) {
            if (b >= c->lo && b <= c->hi) {
                c->need--, c->lo = 0x80, c->hi = 0xBF;
                continue;
            }
            c->need = 0; /* the broken sequence was one U+FFFD, counted at its first byte; b starts afresh */
        }
        c->chars++;
        c->lo = 0x80, c->hi = 0xBF;
        if (b >= 0xC2 && b <= 0xDF)
            c->need = 1;
        else if (b >= 0xE0 && b <= 0xEF)
            c->need = 2, c->lo = b == 0xE0 ? 0xA0 : 0x80, c->hi = b == 0xED ? 0x9F : 0xBF;
        else if (b >= 0xF0 && b <= 0xF4)
            c->need = 3, c->lo = b == 0xF0 ? 0x90 : 0x80, c->hi = b == 0xF4 ? 0x8F : 0xBF;
    }
}

/* one id's piece for logprobs and /tokenize (caller holds tok_mu): the bytes it adds in the middle of a text,
 * or with start at its beginning (tok_piece_bytes) (special tokens: their text; ids the tokenizer lacks: none). The piece is their text where they are whole
 * UTF-8, else OpenAI's "bytes:\\xNN..." spelling (a token that holds part of a character); *bytes (when asked)
 * the raw bytes, which put back together give the text; count (when given) takes them. raw: the piece as an array of bytes instead of the spelling
 * where it is not whole UTF-8 (llama-server's /tokenize). */
static json_t *piece_json_ex(server *srv, int id, int start, json_t **bytes, u8count *count, int raw)
{
    char *s = NULL;
    size_t n = 0;
    if (tok_piece_bytes(srv->t, id, start, &s, &n) <= 0) {
        ogk_error e;
        int32_t v = id;
        free(s);
        s = tok_decode(srv->t, &v, 1, 0, 0, &n, &e); /* special: its text; absent: NULL, no text */
        if (!s)
            n = 0;
    }
    if (bytes) {
        *bytes = json_array();
        for (size_t i = 0; i < n; i++)
            json_array_append_new(*bytes, json_integer((unsigned char)s[i]));
    }
    if (count)
        u8count_add(count, s, n);
    json_t *j;
    if (!s || tok_utf8_check(s, n) == n)
        j = jstr(s, n);
    else if (raw) {
        j = json_array();
        for (size_t i = 0; i < n; i++)
            json_array_append_new(j, json_integer((unsigned char)s[i]));
    } else {
        char *t = malloc(6 + 4 * n + 1);
        size_t o = t ? (size_t)sprintf(t, "bytes:") : 0;
        for (size_t i = 0; t && i < n; i++)
            o += (size_t)sprintf(t + o, "\\x%02x", (unsigned char)s[i]);
        j = jstr(t, o);
        free(t);
    }
    free(s);
    return j;
}

static json_t *piece_json(server *srv, int id, int start, json_t **bytes)
{
    return piece_json_ex(srv, id, start, bytes, NULL, 0);
}

/* the text the answer's (or the echoed prompt's) tokens make starts at the first one that has text: its piece
 * is taken as tok_decode begins a text (Llama 2's and Mistral's "▁Hello" first is "Hello") */
static int piece_start(server *srv, u8count *c, int id)
{
    int start = !c->started;
    size_t n;
    if (tok_id_to_token(srv->t, id, &n) && !tok_is_special(srv->t, id))
        c->started = 1;
    return start;
}

/* logprobs of generated tokens [t0, t1): the completions shape or the chat shape */
/* generated tokens [t0, t1) of a job, copied under its lock: the scheduler grows (reallocates) the job's
 * arrays while a stream reads them */
typedef struct {
    int n, top; /* tokens; alternatives per token */
    int *ids, *top_ids;
    float *lps, *top_lps;
    int silent_head, silent_tail; /* a scored prompt: its first and last ids that the echoed text does not hold */
} tok_slice;

static void slice_free(tok_slice *s) { free(s->ids), free(s->top_ids), free(s->lps), free(s->top_lps); }

/* the caller holds j->mu (or the job is done); -1 out of memory */
static int slice_copy(const serve_job *j, int t0, int t1, tok_slice *s)
{
    int n = t1 - t0, top = j->top_n > 0 ? j->top_n : 0;
    size_t nt = (size_t)n * top;
    *s = (tok_slice){n, top, malloc((size_t)n * sizeof(int) + 1), malloc(nt * sizeof(int) + 1),
                     malloc((size_t)n * sizeof(float) + 1), malloc(nt * sizeof(float) + 1), 0, 0};
    if (!s->ids || !s->top_ids || !s->lps || !s->top_lps) {
        slice_free(s);
        return -1;
    }
    if (n)
        memcpy(s->ids, j->ids + t0, (size_t)n * sizeof(int));
    if (n && j->top_n >= 0) /* logprobs asked: lps exist (and the alternatives, with top_n > 0) */
        memcpy(s->lps, j->lps + t0, (size_t)n * sizeof(float));
    if (nt) {
        memcpy(s->top_ids, j->top_ids + (size_t)t0 * top, nt * sizeof(int));
        memcpy(s->top_lps, j->top_lps + (size_t)t0 * top, nt * sizeof(float));
    }
    return 0;
}

/* null_first: the slice is a scored prompt, whose first token has no logprob (completions only) */
static json_t *logprobs_json(server *srv, const tok_slice *j, int kind, u8count *offset, int null_first)
{
    int top = j->top, t0 = 0, t1 = j->n;
    pthread_mutex_lock(&srv->tok_mu);
    json_t *out;
    if (kind == REQ_CHAT) {
        json_t *content = json_array();
        for (int i = t0; i < t1; i++) {
            json_t *b, *tops = json_array();
            int start = piece_start(srv, offset, j->ids[i]);
            json_t *tokj = piece_json(srv, j->ids[i], start, &b);
            for (int k = 0; k < top; k++) {
                json_t *tb, *tj = piece_json(srv, j->top_ids[(size_t)i * top + k], start, &tb);
                json_array_append_new(tops, json_pack("{s:o,s:f,s:o}", "token", tj, "logprob",
                                                      (double)j->top_lps[(size_t)i * top + k], "bytes", tb));
            }
            json_array_append_new(content, json_pack("{s:o,s:f,s:o,s:o}", "token", tokj, "logprob", (double)j->lps[i],
                                                     "bytes", b, "top_logprobs", tops));
        }
        out = json_pack("{s:o,s:n}", "content", content, "refusal");
    } else {
        json_t *toks = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
        for (int i = t0; i < t1; i++) {
            json_array_append_new(offs, json_integer((json_int_t)offset->chars));
            int start = piece_start(srv, offset, j->ids[i]);
            /* the offsets count the text returned: an answer's special tokens are not in it (skipped as the
             * text is decoded), nor the ids a text prompt's encoding added (its BOS) */
            int silent = null_first ? i < j->silent_head || i >= j->n - j->silent_tail : tok_is_special(srv->t, j->ids[i]);
            json_t *tj = piece_json_ex(srv, j->ids[i], start, NULL, silent ? NULL : offset, 0);
            json_array_append_new(toks, tj);
            if (null_first && i == 0) {
                json_array_append_new(lps, json_null());
                json_array_append_new(tops, json_null());
                continue;
            }
            json_array_append_new(lps, json_real(j->lps[i]));
            json_t *o = json_object();
            for (int k = 0; k < top; k++) {
                json_t *kj = piece_json(srv, j->top_ids[(size_t)i * top + k], start, NULL);
                if (!json_object_get(o, json_string_value(kj))) /* two ids may decode alike: keep the likelier */
                    json_object_set_new(o, json_string_value(kj), json_real(j->top_lps[(size_t)i * top + k]));
                json_decref(kj);
            }
            /* OpenAI's rule: the chosen token is always among them (up to logprobs + 1 entries; 0: it alone) */
            if (!json_object_get(o, json_string_value(tj)))
                json_object_set_new(o, json_string_value(tj), json_real(j->lps[i]));
            json_array_append_new(tops, o);
        }
        out = json_pack("{s:o,s:o,s:o,s:o}", "tokens", toks, "token_logprobs", lps, "top_logprobs", tops,
                        "text_offset", offs);
    }
    if (null_first) /* the echoed prompt's: the answer after it is a text of its own (decoded alone) */
        offset->started = 0;
    pthread_mutex_unlock(&srv->tok_mu);
    return out;
}

static json_t *ids_json(const int *ids, int n)
{
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, json_integer(ids[i]));
    return a;
}

/* ---------------------------------------------------------------- streaming */

typedef struct stream {
    server *srv;
    serve_job *j;
    serve_req r; /* kind, logprobs, return_tokens, echo */
    int fd;
    char id[48];
    long created;
    size_t text_sent;
    u8count offset;
    int toks_sent, stage; /* 0 nothing sent, 1 streaming, 2 final chunk sent, 3 [DONE] sent */
    char *pend;
    size_t pend_len, pend_off;
    char *echo;
    size_t echo_len;
    json_t *calls; /* with tools: the answer's tool calls, once it is complete */
    int calls_sent;
    int think, think_open; /* reasoning split (chat, --reasoning-format auto); the prompt left <think> open */
    size_t rsent;          /* reasoning text sent up to */
    int index;             /* the choice this stream writes */
    /* n > 1: the first choice's stream sends the others' events after its own, choice by choice (they
     * are generated meanwhile); only the last one's final chunk carries usage (every choice's), and only
     * it is followed by [DONE]. The others share r (the first owns it) and the job array. */
    struct stream **more;
    int n_more, cur, sub, no_usage;
    json_t *tail; /* stream_options.include_usage: the usage chunk, sent after the final one */
    serve_resp *resp; /* /v1/responses: each chunk becomes its events, and no [DONE] ends them */
    int usage_prompt;      /* usage.prompt_tokens of a request with several prompts (0: the job's) */
    serve_job **jobs; /* the last choice's stream: all n jobs, for the usage */
    int n_jobs;
} stream;

/* what of the answer so far (s, tl) may go out: reasoning up to *r_end, content [*c_from, *c_end) */
static void releasable(stream *st, const char *s, size_t tl, int done, size_t *r_from, size_t *r_end, size_t *c_from,
                       size_t *c_end)
{
    serve_think th = {.decided = 1};
    if (st->think)
        serve_think_split(s, tl, st->think_open, done, &th);
    *r_from = th.r0 > st->rsent ? th.r0 : st->rsent;
    *r_end = th.has && th.r1 > *r_from ? th.r1 : *r_from;
    if (!th.decided || th.c0 == SIZE_MAX) {
        *c_from = *c_end = st->text_sent;
        return;
    }
    size_t base = th.c0, rel = tl;
    const json_t *tools = st->r.json ? NULL : st->r.tools; /* a JSON-mode answer is content, never a call */
    if (tools) {
        size_t clen = tl - base;
        if (!done)
            rel = base + serve_tools_hold(s + base, tl - base);
        else if (!st->calls && serve_tools_extract(s + base, tl - base, tools, &clen, &st->calls))
            rel = base + clen;
        else if (st->calls)
            rel = st->text_sent; /* the calls' own text is never content */
    }
    *c_from = base > st->text_sent ? base : st->text_sent;
    *c_end = rel > *c_from ? rel : *c_from;
}

static json_t *chunk_base(stream *st, json_t *choice)
{
    json_t *c = json_pack("{s:s,s:s,s:I,s:s,s:[o]}", "id", st->id, "object",
                          st->r.kind == REQ_CHAT ? "chat.completion.chunk" : "text_completion", "created",
                          (json_int_t)st->created, "model", st->srv->model_id, "choices", choice);
    if (st->r.include_usage) /* OpenAI's: null on every chunk but the last */
        json_object_set_new(c, "usage", json_null());
    return c;
}

static void set_pending(stream *st, json_t *chunk)
{
    free(st->pend);
    st->pend = NULL, st->pend_len = st->pend_off = 0;
    if (st->resp) {
        if ((st->pend = serve_resp_events(st->resp, chunk)))
            st->pend_len = strlen(st->pend);
        return;
    }
    char *s = json_dumps(chunk, JSON_COMPACT);
    json_decref(chunk);
    if (s && asprintf(&st->pend, "data: %s\n\n", s) > 0)
        st->pend_len = strlen(st->pend);
    free(s);
}

/* an SSE comment (clients skip it) for a client that has shut its sending side while the stream waits:
 * written to a client that has left, it brings the reset that job_wait then sees */
static int stream_probe(stream *st)
{
    free(st->pend);
    st->pend = strdup(":\n\n");
    st->pend_len = st->pend ? strlen(st->pend) : 0, st->pend_off = 0;
    return st->pend ? 1 : -1;
}

/* the next SSE event: a piece of text (and its tokens), the final chunk, then [DONE]; 0 at the end */
static int next_event(stream *st)
{
    serve_job *j = st->j;
    if (st->stage == 3)
        return 0;
    if (st->stage == 2 && st->tail) { /* include_usage: choices [] and the usage, before [DONE] */
        json_t *t = st->tail;
        st->tail = NULL;
        set_pending(st, t);
        return 1;
    }
    if (st->stage == 2 && st->resp) /* the Responses stream has no [DONE] */
        return 0;
    if (st->stage == 2) {
        free(st->pend);
        st->pend = strdup("data: [DONE]\n\n");
        st->pend_len = strlen(st->pend), st->pend_off = 0, st->stage = 3;
        return 1;
    }
    if (st->stage == 0 && (st->r.kind == REQ_CHAT || st->echo || j->score)) {
        json_t *choice, *plp = json_null();
        if (j->score) { /* the prompt's logprobs, once it is read (a first token, or the end) */
            int w = job_wait(j, st->fd, 0, 0, 1);
            if (w)
                return w < 0 ? -1 : stream_probe(st);
            pthread_mutex_lock(&j->mu);
            int failed = j->failed; /* refused or cut before its prompt was scored: no logprobs to give */
            pthread_mutex_unlock(&j->mu);
            tok_slice ps = {j->n_prompt, j->top_n > 0 ? j->top_n : 0, j->prompt, j->p_top_ids, j->p_lps, j->p_top_lps,
                            j->p_silent_head, j->p_silent_tail};
            if (!failed)
                plp = logprobs_json(st->srv, &ps, st->r.kind, &st->offset, 1);
        }
        if (st->r.kind == REQ_CHAT)
            choice = json_pack("{s:i,s:{s:s,s:s},s:n,s:n}", "index", st->index, "delta", "role", "assistant", "content", "",
                               "logprobs", "finish_reason");
        else
            choice = json_pack("{s:o,s:i,s:o,s:n}", "text", jstr(st->echo, st->echo_len), "index", st->index, "logprobs",
                               plp, "finish_reason");
        st->stage = 1;
        set_pending(st, chunk_base(st, choice));
        return 1;
    }
    st->stage = 1;
    int lp = st->r.logprobs >= 0;
    /* with tools or reasoning, text that may open a tool call or a <think> block, or close one, is held back
     * (and the tokens with it) until it is known */
    int held = (st->r.tools && !st->r.json) || st->think;
    size_t seen = st->text_sent > st->rsent ? st->text_sent : st->rsent, r_from, r_end, c_from, c_end;
    for (;;) {
        /* new text (the tokens with logprobs go out with their text: serve_job_covered), or the end */
        int w = job_wait(j, st->fd, seen, -1, 1);
        if (w)
            return w < 0 ? -1 : stream_probe(st);
        if (!held)
            break;
        pthread_mutex_lock(&j->mu);
        int done = j->done;
        seen = j->text_len;
        releasable(st, j->text ? j->text : "", seen, done, &r_from, &r_end, &c_from, &c_end);
        pthread_mutex_unlock(&j->mu);
        if (done || r_end > r_from || c_end > c_from)
            break;
    }
    pthread_mutex_lock(&j->mu);
    int failed = j->failed, done = j->done;
    size_t tl = j->text_len;
    int n_ids = lp ? serve_job_covered(j, tl, done) : j->n_ids; /* logprobs: the tokens of the text released */
    if (failed) {
        r_from = r_end = st->rsent;
        c_from = c_end = st->text_sent;
    } else {
        releasable(st, j->text ? j->text : "", tl, done, &r_from, &r_end, &c_from, &c_end);
    }
    int reasoning = r_end > r_from; /* reasoning goes out first, content after it */
    json_t *text = reasoning ? jstr(j->text + r_from, r_end - r_from) : jstr(j->text + c_from, c_end - c_from);
    tok_slice sl;
    int oom = slice_copy(j, st->toks_sent, n_ids, &sl); /* the tokens since the last event */
    pthread_mutex_unlock(&j->mu);
    if (oom)
        failed = 1;
    if (failed) {
        json_decref(text);
        if (!oom)
            slice_free(&sl);
        serve_err err;
        int st503 = !oom && j->fail_status == 503;
        serve_err_set(&err, st503 ? 503 : 500, NULL, st503 ? "shutting_down" : "generation_failed", "%s",
                      oom ? "out of memory" : j->err);
        set_pending(st, err_json(&err));
        st->stage = 2;
        return 1;
    }
    /* with logprobs, every event carries the tokens since the last one; otherwise only new text counts */
    if (reasoning || c_end > c_from || (lp && n_ids > st->toks_sent && (!held || (done && !st->calls)))) {
        json_t *lpj = lp ? logprobs_json(st->srv, &sl, st->r.kind, &st->offset, 0) : json_null();
        json_t *choice = st->r.kind == REQ_CHAT
                             ? json_pack("{s:i,s:{s:o},s:o,s:n}", "index", st->index, "delta",
                                         reasoning ? "reasoning_content" : "content", text, "logprobs", lpj,
                                         "finish_reason")
                             : json_pack("{s:o,s:i,s:o,s:n}", "text", text, "index", st->index, "logprobs", lpj,
                                         "finish_reason");
        if (st->r.return_tokens)
            json_object_set_new(choice, "tokens", ids_json(sl.ids, sl.n));
        slice_free(&sl);
        if (reasoning)
            st->rsent = r_end;
        else
            st->text_sent = c_end;
        st->toks_sent = n_ids;
        set_pending(st, chunk_base(st, choice));
        return 1;
    }
    json_decref(text);
    if (st->calls && !st->calls_sent) { /* all the calls in one delta, each with its index, and their tokens */
        json_t *lpj = lp ? logprobs_json(st->srv, &sl, st->r.kind, &st->offset, 0) : json_null();
        json_t *toks = st->r.return_tokens ? ids_json(sl.ids, sl.n) : NULL;
        slice_free(&sl);
        st->toks_sent = n_ids;
        json_t *d = json_array();
        size_t k;
        json_t *c;
        json_array_foreach(st->calls, k, c)
        {
            json_t *e = json_deep_copy(c);
            json_object_set_new(e, "index", json_integer((json_int_t)k));
            json_array_append_new(d, e);
        }
        st->calls_sent = 1;
        json_t *choice = json_pack("{s:i,s:{s:o},s:o,s:n}", "index", st->index, "delta", "tool_calls", d, "logprobs", lpj,
                                   "finish_reason");
        if (toks)
            json_object_set_new(choice, "tokens", toks);
        set_pending(st, chunk_base(st, choice));
        return 1;
    }
    slice_free(&sl); /* the job is done: its arrays no longer change */
    /* done, everything sent: the final chunk with the finish reason, usage and timings */
    json_t *choice = st->r.kind == REQ_CHAT ? json_pack("{s:i,s:{},s:n,s:s}", "index", st->index, "delta", "logprobs",
                                                        "finish_reason", st->calls ? "tool_calls" : j->finish)
                                            : json_pack("{s:s,s:i,s:n,s:s}", "text", "", "index", st->index, "logprobs",
                                                        "finish_reason", j->finish);
    if (st->r.return_tokens) /* every generated id, as in one piece: with logprobs the events carried only
                              * those of the text, and a stop string may have cut the text before the last */
        json_object_set_new(choice, "tokens", ids_json(j->ids + st->toks_sent, j->n_ids - st->toks_sent));
    json_t *c = chunk_base(st, choice);
    if (!st->no_usage) { /* one choice, or the last of several (which has the job array) */
        /* with include_usage in a chunk of its own, choices [] (OpenAI's); else on this final one */
        json_t *u = st->r.include_usage ? json_pack("{s:s,s:s,s:I,s:s,s:[]}", "id", st->id, "object",
                                                    st->r.kind == REQ_CHAT ? "chat.completion.chunk" : "text_completion",
                                                    "created", (json_int_t)st->created, "model", st->srv->model_id,
                                                    "choices")
                                          : c;
        if (!u)
            u = c;
        json_object_set_new(u, "usage", usage_pack(j->n_prompt, j->n_eval, j->cache_n,
                                                   reasoning_tokens(j, st->r.kind, st->think, st->think_open)));
        json_object_set_new(u, "timings", timings_json(st->jobs ? st->jobs[0] : j));
        if (st->jobs) { /* every choice's tokens */
            int ne = 0, nr = st->r.kind == REQ_CHAT ? 0 : -1;
            for (int k = 0; k < st->n_jobs; k++) {
                ne += st->jobs[k]->n_eval;
                if (nr >= 0)
                    nr += reasoning_tokens(st->jobs[k], st->r.kind, st->think, st->think_open);
            }
            int pt = st->usage_prompt ? st->usage_prompt : j->n_prompt;
            json_object_set_new(u, "usage", usage_pack(pt, ne, cached_total(st->jobs, st->n_jobs, st->r.n_choices), nr));
        }
        if (u != c)
            st->tail = u;
    }
    set_pending(st, c);
    st->stage = 2;
    return 1;
}

/* the next event of a stream of several choices: each choice's events in turn, [DONE] after the last */
static int next_event_multi(stream *st)
{
    if (!st->n_more)
        return next_event(st);
    for (;;) {
        stream *s = st->cur ? st->more[st->cur - 1] : st;
        if (s->stage == 2 && st->cur < st->n_more) { /* this choice is complete: the next one */
            st->cur++;
            continue;
        }
        int r = next_event(s);
        if (r > 0 && s != st) { /* its event goes out through the first stream's buffer */
            free(st->pend);
            st->pend = s->pend, st->pend_len = s->pend_len, st->pend_off = s->pend_off;
            s->pend = NULL, s->pend_len = s->pend_off = 0;
        }
        return r;
    }
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    stream *st = cls;
    while (st->pend_off == st->pend_len) {
        int r = next_event_multi(st);
        if (r < 0)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        if (r == 0)
            return MHD_CONTENT_READER_END_OF_STREAM;
    }
    size_t n = st->pend_len - st->pend_off < max ? st->pend_len - st->pend_off : max;
    memcpy(buf, st->pend + st->pend_off, n);
    st->pend_off += n;
    return (ssize_t)n;
}

static void stream_free(void *cls)
{
    stream *st = cls;
    for (int k = 0; k < st->n_more; k++)
        stream_free(st->more[k]);
    free(st->more);
    free(st->jobs);
    /* a client that left mid-stream: its slot is freed at the scheduler's next step */
    __atomic_store_n(&st->j->cancel, 1, __ATOMIC_RELAXED);
    serve_sched_wake(&st->srv->S);
    serve_job_unref(st->j);
    if (!st->sub)
        serve_req_free(&st->r);
    json_decref(st->calls), json_decref(st->tail);
    serve_resp_free(st->resp);
    free(st->pend), free(st->echo);
    free(st);
}

/* ---------------------------------------------------------------- completions */

/* JSON values in a body (separators and openings outside strings, counted without parsing): a body of
 * 8 MiB of "0," would parse into four million values, some 200 MB, before any check on them */
static size_t json_values(const char *s, size_t n, size_t stop)
{
    size_t v = 1;
    int in_str = 0;
    for (size_t i = 0; i < n && v <= stop; i++) {
        char ch = s[i];
        if (in_str) {
            if (ch == '\\')
                i++;
            else if (ch == '"')
                in_str = 0;
        } else if (ch == '"') {
            in_str = 1;
        } else if (ch == ',' || ch == '[' || ch == '{') {
            v++;
        }
    }
    return v;
}

/* no request needs many more values (or a text more ids) than a context's worth of token ids */
static size_t value_limit(const server *srv) { return (size_t)srv->S.context + 65536; }

/* a body with more JSON values than that: 1 with err filled (refused before it is parsed) */
static int too_many_values(const server *srv, const conn *cn, serve_err *err)
{
    size_t max = value_limit(srv);
    if (json_values(cn->body ? cn->body : "", cn->len, max) <= max)
        return 0;
    serve_err_set(err, 400, NULL, "invalid_value", "the request has more than %zu JSON values (the context is %d)", max,
                  srv->S.context);
    return 1;
}

/* The job of choice k of request r (prompt ids copied; biases, stops and programs its own; seed + k when
 * the request has one): NULL when out of memory. */
static serve_job *job_for(server *srv, const serve_req *r, const int *ids, int n, int kind, int hermes, int k)
{
    int ctx = srv->S.context;
    serve_job *j = serve_job_new();
    if (!j)
        return NULL;
    if (!(j->prompt = malloc((size_t)n * sizeof *ids)))
        goto oom;
    memcpy(j->prompt, ids, (size_t)n * sizeof *ids);
    j->n_prompt = n;
    /* chat's default: to the end of the context (the last token is never fed back: ctx + 1 in all) */
    j->max_tokens = r->no_tokens ? 0 : r->max_tokens ? r->max_tokens : kind == REQ_CHAT ? ctx - n + 1 : DEFAULT_COMPLETION_TOKENS;
    j->temperature = (float)r->temperature, j->top_p = (float)r->top_p, j->top_k = r->top_k;
    if (r->has_seed)
        j->seed = r->seed + (uint64_t)k ? r->seed + (uint64_t)k : 0x9E3779B97F4A7C15ull;
    else if (getrandom(&j->seed, sizeof j->seed, GRND_NONBLOCK) != sizeof j->seed || !j->seed)
        j->seed = ((uint64_t)(ogk_now() * 1e9) + (uint64_t)k) | 1;
    j->top_n = r->logprobs, j->ignore_eos = r->ignore_eos;
    if ((j->score = r->score) && !r->prompt_ids) /* a text prompt: encoded with its special tokens */
        tok_special_affixes(srv->t, &j->p_silent_head, &j->p_silent_tail);
    if (j->score) { /* the prompt's logprobs: entry i for prompt token i (0 has none) */
        size_t top = r->logprobs > 0 ? (size_t)r->logprobs : 0;
        if (!(j->p_lps = calloc((size_t)n, sizeof *j->p_lps)) ||
            !(j->p_top_ids = calloc((size_t)n * top + 1, sizeof *j->p_top_ids)) ||
            !(j->p_top_lps = calloc((size_t)n * top + 1, sizeof *j->p_top_lps)))
            goto oom;
    }
    j->json = r->json, j->presence = (float)r->presence_penalty, j->frequency = (float)r->frequency_penalty;
    if (r->n_bias) {
        if (!(j->bias_ids = malloc((size_t)r->n_bias * sizeof *j->bias_ids)) ||
            !(j->bias = malloc((size_t)r->n_bias * sizeof *j->bias)))
            goto oom;
        memcpy(j->bias_ids, r->bias_ids, (size_t)r->n_bias * sizeof *j->bias_ids);
        memcpy(j->bias, r->bias, (size_t)r->n_bias * sizeof *j->bias);
        j->n_bias = r->n_bias;
    }
    if (r->schema) { /* json_schema: a program of that one value, compiled for this job */
        char msg[256];
        jg_schema *sc = jg_schema_compile(r->schema_src, msg, sizeof msg); /* compiled once already: it compiles */
        if (!sc || !(j->prog = jg_prog_new()) || jg_prog_schema(j->prog, sc)) {
            if (!j->prog)
                jg_schema_free(sc);
            goto oom;
        }
    }
    if (r->force_tool && !(j->prog = serve_tools_program(r, hermes)))
        goto oom;
    j->json |= j->prog != NULL;
    if (r->n_stops && !r->force_tool) { /* a forced call ends where its program does: a stop string would
                                         * hand back part of a call as a finished text answer */
        if (!(j->stops = calloc((size_t)r->n_stops, sizeof *j->stops)))
            goto oom;
        for (int i = 0; i < r->n_stops; i++)
            if (!(j->stops[i] = strdup(r->stops[i])))
                goto oom;
        j->n_stops = r->n_stops;
    }
    return j;
oom:
    if (j->stops) /* the count the job frees */
        j->n_stops = r->n_stops;
    serve_job_unref(j);
    return NULL;
}

/* Choice k of a finished job, as OpenAI writes it (chat: message with content, reasoning_content,
 * tool_calls; completions: text), or NULL when out of memory. */
static json_t *choice_json(server *srv, const serve_req *r, serve_job *j, int kind, int think_open, int k)
{
    json_t *text;
    if (r->echo && r->prompt) {
        char *all = malloc(r->prompt_len + j->text_len + 1);
        if (all) {
            memcpy(all, r->prompt, r->prompt_len);
            memcpy(all + r->prompt_len, j->text ? j->text : "", j->text_len);
        }
        text = jstr(all, all ? r->prompt_len + j->text_len : 0);
        free(all);
    } else {
        text = jstr(j->text, j->text_len);
    }
    u8count off = {0};
    tok_slice sl = {0};
    if (r->logprobs >= 0 && slice_copy(j, 0, serve_job_covered(j, j->text_len, 1), &sl)) { /* done: no lock needed */
        json_decref(text);
        return NULL;
    }
    json_t *lp = json_null();
    if (j->score) { /* echo with logprobs: the prompt's tokens (the first without one), then the answer's */
        tok_slice ps = {j->n_prompt, sl.top, j->prompt, j->p_top_ids, j->p_lps, j->p_top_lps, j->p_silent_head, j->p_silent_tail};
        lp = logprobs_json(srv, &ps, kind, &off, 1);
        json_t *gen = logprobs_json(srv, &sl, kind, &off, 0);
        static const char *const keys[] = {"tokens", "token_logprobs", "top_logprobs", "text_offset"};
        for (size_t i = 0; lp && gen && i < sizeof keys / sizeof *keys; i++)
            json_array_extend(json_object_get(lp, keys[i]), json_object_get(gen, keys[i]));
        json_decref(gen);
    } else if (r->logprobs >= 0) {
        lp = logprobs_json(srv, &sl, kind, &off, 0);
    }
    slice_free(&sl);
    json_t *calls = NULL, *reasoning = NULL;
    size_t content_len;
    /* chat: a <think> block is reasoning_content, the rest content; tool calls are read from the content */
    serve_think th = {.decided = 1};
    if (kind == REQ_CHAT && srv->o->reasoning)
        serve_think_split(j->text ? j->text : "", j->text_len, think_open, 1, &th);
    const char *ct = (j->text ? j->text : "") + th.c0;
    size_t ctn = j->text_len - th.c0;
    if (th.has) {
        reasoning = jstr(j->text + th.r0, th.r1 - th.r0);
        json_decref(text);
        text = jstr(ct, ctn);
    }
    /* tool calls are read from the content, except where response_format made it the asked JSON value */
    if (r->tools && !r->json && serve_tools_extract(ct, ctn, r->tools, &content_len, &calls)) {
        json_decref(text);
        text = content_len ? jstr(ct, content_len) : json_null();
    }
    /* refusal: a member OpenAI's message always has (null: this server never refuses in words) */
    json_t *choice = kind == REQ_CHAT ? json_pack("{s:i,s:{s:s,s:o,s:n},s:o,s:s}", "index", k, "message", "role",
                                                  "assistant", "content", text, "refusal", "logprobs", lp,
                                                  "finish_reason", calls ? "tool_calls" : j->finish)
                                      : json_pack("{s:o,s:i,s:o,s:s}", "text", text, "index", k, "logprobs", lp,
                                                  "finish_reason", j->finish);
    if (!choice)
        return NULL;
    if (reasoning)
        json_object_set_new(json_object_get(choice, "message"), "reasoning_content", reasoning);
    if (calls)
        json_object_set_new(json_object_get(choice, "message"), "tool_calls", calls);
    if (r->return_tokens)
        json_object_set_new(choice, "tokens", ids_json(j->ids, j->n_ids));
    return choice;
}

static enum MHD_Result completion(server *srv, struct MHD_Connection *c, conn *cn, int kind)
{
    serve_req r;
    serve_err err;
    int refused = too_many_values(srv, cn, &err) || serve_req_parse(cn->body ? cn->body : "", cn->len, kind, &r, &err);
    /* the body is not read again: a request waiting for a slot (or streaming its answer) does not hold it,
     * nor the memory its parse used (glibc keeps freed memory of a thread's arena resident: each queued
     * request of a few MiB held that much) */
    size_t body_cap = cn->cap;
    body_free(srv, cn);
    if (body_cap >= BODY_TRIM)
        malloc_trim(0);
    if (refused) {
        if (cn->resp) /* the Responses field the chat field came from */
            serve_resp_err(&err);
        return send_err(srv, c, &err);
    }
    int hermes = 0, think_open = 0;
    /* the tokenizer's ids: the classifier's padded rows past them (Qwen2.5's 151936 against 151665) have no
     * text, and a bias could make greedy decoding pick one */
    int nv = tok_vocab_size(srv->t) < srv->m->c.vocab_size ? tok_vocab_size(srv->t) : srv->m->c.vocab_size;
    for (int i = 0; i < r.n_bias; i++)
        if (r.bias_ids[i] >= nv) {
            serve_err_set(&err, 400, "logit_bias", "invalid_value",
                          "'logit_bias': token id %d is outside the vocabulary (%d ids%s)", r.bias_ids[i], nv,
                          nv < srv->m->c.vocab_size ? "; the model's rows past them are padding, without text" : "");
            serve_req_free(&r);
            return send_err(srv, c, &err);
        }
    if (check_model(srv, &r, &err)) {
        serve_req_free(&r);
        return send_err(srv, c, &err);
    }
    /* the prompts (one, or a list: each its own n choices, choice p * n + k), each request as it alone would
     * be (a view of r with that prompt; views borrow r's memory) */
    int np = r.n_plist ? r.n_plist : 1, nj = np * r.n_choices, oom = 0, ctx = srv->S.context, prompt_total = 0;
    if (nj > SERVE_MAX_CHOICES) {
        int nc = r.n_choices;
        serve_req_free(&r);
        return fail(srv, c, 400, np > 1 ? "prompt" : "n", "invalid_value",
                    "%d prompts x 'n' %d is %d choices; at most %d a request", np, nc, nj, SERVE_MAX_CHOICES);
    }
    if (nj > srv->S.q_cap) { /* every choice waits in the queue for a slot: more could never be taken */
        int nc = r.n_choices;
        serve_req_free(&r);
        if (np > 1)
            return fail(srv, c, 400, "prompt", "invalid_value", "%d prompts x 'n' %d is %d choices; each waits for a slot "
                        "in the queue, which holds at most %d (--queue)", np, nc, nj, srv->S.q_cap);
        return fail(srv, c, 400, "n", "invalid_value", "%d choices; this server queues at most %d requests (--queue)", nj,
                    srv->S.q_cap);
    }
    serve_req views[SERVE_MAX_CHOICES];
    serve_job *jobs[SERVE_MAX_CHOICES] = {0};
    for (int p = 0; p < np; p++) {
        views[p] = r;
        if (r.n_plist) {
            views[p].prompt = r.plist[p].text, views[p].prompt_len = r.plist[p].len;
            views[p].prompt_ids = r.plist[p].ids, views[p].n_prompt_ids = r.plist[p].n_ids;
        }
    }
    for (int p = 0; p < np && !oom; p++) {
        int n = 0, *ids = prompt_ids(srv, &views[p], &n, &hermes, &think_open, &err);
        if (ids && n >= ctx) {
            free(ids), ids = NULL;
            serve_err_set(&err, 400, kind == REQ_CHAT ? "messages" : "prompt", "context_length_exceeded",
                          "This model's maximum context length is %d tokens; the prompt%s is %d tokens, leaving no "
                          "room for a completion",
                          ctx, r.n_plist ? " (one of the list)" : "", n);
        }
        if (!ids) {
            for (int k = 0; k < nj; k++)
                if (jobs[k])
                    serve_job_unref(jobs[k]);
            serve_req_free(&r);
            if (cn->resp)
                serve_resp_err(&err);
            return send_err(srv, c, &err);
        }
        prompt_total += n;
        for (int k = 0; k < r.n_choices && !oom; k++)
            oom = !(jobs[p * r.n_choices + k] = job_for(srv, &views[p], ids, n, kind, hermes, k));
        free(ids);
        if (r.echo && !views[p].prompt && views[p].prompt_ids && !oom) {
            /* echo of a prompt of token ids: their text (special tokens' too), kept in r (freed with it) */
            ogk_error e;
            size_t len = 0;
            pthread_mutex_lock(&srv->tok_mu);
            char *txt = tok_decode(srv->t, (const int32_t *)views[p].prompt_ids, (size_t)views[p].n_prompt_ids, 0, 0,
                                   &len, &e);
            pthread_mutex_unlock(&srv->tok_mu);
            oom = !txt;
            if (txt) {
                if (r.n_plist)
                    r.plist[p].text = txt, r.plist[p].len = len;
                else
                    r.prompt = txt, r.prompt_len = len;
                views[p].prompt = txt, views[p].prompt_len = len;
            }
        }
    }
    /* the jobs are made: what only they needed goes (views share r's values, emptied in place) */
    serve_req_trim(&r);
    for (int p = 0; p < np; p++)
        views[p].schema = NULL;
    int sub = 0, nsub = 0;
    for (int k = 0; k < nj && !oom && !sub; k++)
        if (!(sub = serve_sched_submit(&srv->S, jobs[k])))
            nsub++;
    if (oom || sub) {
        for (int k = 0; k < nj; k++) {
            if (jobs[k] && k < nsub)
                __atomic_store_n(&jobs[k]->cancel, 1, __ATOMIC_RELAXED);
            if (jobs[k])
                serve_job_unref(jobs[k]);
        }
        if (nsub)
            serve_sched_wake(&srv->S);
        serve_req_free(&r);
        if (oom)
            return fail(srv, c, 500, NULL, NULL, "out of memory");
        if (sub == -2)
            return fail(srv, c, 503, NULL, "shutting_down", "the server is shutting down");
        return fail(srv, c, 503, NULL, "server_busy", "all %d slots are busy and the queue is full; retry later",
                    srv->S.n_slots);
    }
    serve_job *j = jobs[0];
    char id[48];
    serve_new_id(id, sizeof id, kind == REQ_CHAT ? "chatcmpl-" : "cmpl-");
    long created = (long)time(NULL);
    int fd = conn_fd(c);

    if (r.stream) {
        stream *st = calloc(1, sizeof *st);
        if (st && nj > 1 && !(st->more = calloc((size_t)nj - 1, sizeof *st->more)))
            st = (free(st), NULL);
        if (!st) {
            for (int k = 0; k < nj; k++) {
                __atomic_store_n(&jobs[k]->cancel, 1, __ATOMIC_RELAXED);
                serve_job_unref(jobs[k]);
            }
            serve_req_free(&r);
            return fail(srv, c, 500, NULL, NULL, "out of memory");
        }
        st->srv = srv, st->j = j, st->r = r, st->fd = fd, st->created = created, st->resp = cn->resp;
        cn->resp = NULL;
        st->think = srv->o->reasoning && kind == REQ_CHAT, st->think_open = think_open;
        snprintf(st->id, sizeof st->id, "%s", id);
        if (r.echo && views[0].prompt) {
            st->echo = strndup(views[0].prompt, views[0].prompt_len);
            st->echo_len = st->echo ? views[0].prompt_len : 0;
        }
        /* choices 1..n-1: streams of their own, sent after the first one's (next_event_multi); a stream
         * that cannot be made leaves its job to be cancelled with the others */
        int bad = 0;
        for (int k = 1; k < nj; k++) {
            stream *s2 = bad ? NULL : malloc(sizeof *s2);
            if (!s2) {
                bad = 1;
                __atomic_store_n(&jobs[k]->cancel, 1, __ATOMIC_RELAXED);
                serve_job_unref(jobs[k]);
                continue;
            }
            *s2 = *st;
            s2->more = NULL, s2->n_more = 0, s2->pend = NULL, s2->j = jobs[k], s2->index = k, s2->sub = 1;
            const serve_req *v = &views[k / r.n_choices]; /* choice k's prompt */
            s2->echo = r.echo && v->prompt ? strndup(v->prompt, v->prompt_len) : NULL;
            s2->echo_len = s2->echo ? v->prompt_len : 0;
            st->more[st->n_more++] = s2;
        }
        if (nj > 1) {
            stream *last = st->more[st->n_more - 1 < 0 ? 0 : st->n_more - 1];
            st->no_usage = 1;
            for (int k = 0; k + 1 < st->n_more; k++)
                st->more[k]->no_usage = 1;
            if (!bad && st->n_more && (last->jobs = malloc((size_t)nj * sizeof *last->jobs))) {
                memcpy(last->jobs, jobs, (size_t)nj * sizeof *jobs);
                last->n_jobs = nj;
                last->usage_prompt = prompt_total; /* each prompt once */
            }
            if (bad) { /* out of memory: the answer is an error */
                stream_free(st);
                return fail(srv, c, 500, NULL, NULL, "out of memory");
            }
        }
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, st, stream_free);
        if (!resp) {
            stream_free(st);
            return MHD_NO;
        }
        add_cors(srv, resp);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
        MHD_destroy_response(resp);
        return ret;
    }

    /* not streamed: wait for every choice (the client leaving cancels them all) */
    int gone = 0, failed = -1;
    for (int k = 0; k < nj && !gone; k++) {
        gone = job_wait(jobs[k], fd, 0, -2, 0) != 0;
        if (!gone && jobs[k]->failed && failed < 0)
            failed = k;
    }
    enum MHD_Result ret = MHD_NO; /* nobody to answer when the client left */
    json_t *choices = json_array();
    int n_eval = 0, n_reason = kind == REQ_CHAT ? 0 : -1;
    for (int k = 0; k < nj && !gone && failed < 0; k++) {
        json_t *ch = choice_json(srv, &views[k / r.n_choices], jobs[k], kind, think_open, k);
        if (!ch) {
            failed = nj; /* out of memory */
            break;
        }
        json_array_append_new(choices, ch);
        n_eval += jobs[k]->n_eval;
        if (n_reason >= 0)
            n_reason += reasoning_tokens(jobs[k], kind, srv->o->reasoning, think_open);
    }
    if (gone) {
        for (int k = 0; k < nj; k++)
            __atomic_store_n(&jobs[k]->cancel, 1, __ATOMIC_RELAXED);
        serve_sched_wake(&srv->S);
        json_decref(choices);
    } else if (failed >= 0) {
        int st503 = failed < nj && jobs[failed]->fail_status == 503; /* refused at shutdown, never started */
        ret = fail(srv, c, st503 ? 503 : 500, NULL, st503 ? "shutting_down" : failed < nj ? "generation_failed" : NULL, "%s",
                   failed < nj ? jobs[failed]->err : "out of memory");
        json_decref(choices);
    } else {
        /* usage: each prompt once, every choice's completion tokens; timings: the first choice's */
        json_t *usage = usage_pack(prompt_total, n_eval, cached_total(jobs, nj, r.n_choices), n_reason);
        json_t *out = json_pack("{s:s,s:s,s:I,s:s,s:o,s:o,s:o}", "id", id, "object",
                                kind == REQ_CHAT ? "chat.completion" : "text_completion", "created",
                                (json_int_t)created, "model", srv->model_id, "choices", choices, "usage", usage,
                                "timings", timings_json(j));
        if (out && cn->resp)
            out = serve_resp_answer(cn->resp, out);
        ret = out ? send_json(srv, c, 200, out) : fail(srv, c, 500, NULL, NULL, "out of memory");
    }
    for (int k = 0; k < nj; k++)
        serve_job_unref(jobs[k]);
    serve_req_free(&r);
    return ret;
}

/* ---------------------------------------------------------------- the other endpoints */

/* the body as a JSON object, bounded as completions' are (too_many_values) */
static json_t *body_object(server *srv, conn *cn, serve_err *err)
{
    if (too_many_values(srv, cn, err))
        return NULL;
    json_error_t je;
    json_t *j = json_loadb(cn->body ? cn->body : "", cn->len, 0, &je); /* a key given twice: the last, as Python reads it */
    if (!j) {
        serve_json_error(err, &je);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        serve_err_set(err, 400, NULL, "invalid_json", "the body must be a JSON object");
        return NULL;
    }
    return j;
}

/* OpenAI's POST /v1/responses: the body read into a chat request (responses.c), answered as chat's is and
 * shaped as a response */
static enum MHD_Result responses(server *srv, struct MHD_Connection *c, conn *cn)
{
    serve_err err;
    size_t len = 0;
    char *chat = too_many_values(srv, cn, &err) ? NULL
                                                : serve_resp_request(cn->body ? cn->body : "", cn->len, &len, &cn->resp, &err);
    if (!chat)
        return send_err(srv, c, &err);
    size_t body_cap = cn->cap;
    body_free(srv, cn);
    if (body_cap >= BODY_TRIM) /* as completion gives a large body's memory back */
        malloc_trim(0);
    cn->body = chat, cn->len = len; /* not the receiving budget's (cap 0) */
    return completion(srv, c, cn, REQ_CHAT);
}

/* llama-server's POST /tokenize: {"content", "add_special", "with_pieces"} -> {"tokens"} */
static enum MHD_Result tokenize(server *srv, struct MHD_Connection *c, conn *cn)
{
    serve_err err;
    json_t *b = body_object(srv, cn, &err);
    if (!b)
        return send_err(srv, c, &err);
    const json_t *content = json_object_get(b, "content"), *as = json_object_get(b, "add_special"),
                 *wp = json_object_get(b, "with_pieces");
    if (!json_is_string(content) || (as && !json_is_boolean(as)) || (wp && !json_is_boolean(wp))) {
        const char *param = json_is_string(content) ? (as && !json_is_boolean(as) ? "add_special" : "with_pieces") : "content";
        enum MHD_Result ret = fail(srv, c, 400, param, "invalid_type",
                                   "want {\"content\": string, \"add_special\": bool, \"with_pieces\": bool}");
        json_decref(b); /* after: param and the test above read b's members */
        return ret;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    ogk_error e;
    /* bounded as a prompt is (value_limit): an 8 MiB text with its pieces would hold the tokenizer, which
     * every request needs, for seconds and take hundreds of MB */
    pthread_mutex_lock(&srv->tok_mu);
    int rc = tok_encode_max(srv->t, json_string_value(content), json_string_length(content), json_is_true(as),
                            value_limit(srv), &ids, &n, &e);
    json_t *toks = json_array();
    for (size_t i = 0; !rc && i < n; i++) {
        if (json_is_true(wp))
            json_array_append_new(toks, json_pack("{s:i,s:o}", "id", ids[i], "piece", piece_json_ex(srv, ids[i], 0, NULL, NULL, 1)));
        else
            json_array_append_new(toks, json_integer(ids[i]));
    }
    pthread_mutex_unlock(&srv->tok_mu);
    free(ids);
    json_decref(b);
    if (rc) {
        json_decref(toks);
        return fail(srv, c, 400, "content", "invalid_value", "content: %s", e.msg);
    }
    return send_json(srv, c, 200, json_pack("{s:o}", "tokens", toks));
}

/* llama-server's POST /detokenize: {"tokens": [ids]} -> {"content"} */
static enum MHD_Result detokenize(server *srv, struct MHD_Connection *c, conn *cn)
{
    serve_err err;
    json_t *b = body_object(srv, cn, &err);
    if (!b)
        return send_err(srv, c, &err);
    const json_t *a = json_object_get(b, "tokens");
    if (!json_is_array(a)) {
        json_decref(b);
        return fail(srv, c, 400, "tokens", "invalid_type", "'tokens' must be an array of token ids");
    }
    size_t n = json_array_size(a);
    int32_t *ids = malloc((n + 1) * sizeof *ids);
    for (size_t i = 0; ids && i < n; i++) {
        const json_t *v = json_array_get(a, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= srv->m->c.vocab_size) {
            free(ids);
            json_decref(b);
            return fail(srv, c, 400, "tokens", "invalid_value", "tokens[%zu] is not a token id in [0, %d)", i,
                        srv->m->c.vocab_size);
        }
        ids[i] = (int32_t)json_integer_value(v);
    }
    json_decref(b);
    if (!ids)
        return fail(srv, c, 500, NULL, NULL, "out of memory");
    ogk_error e;
    size_t len = 0;
    pthread_mutex_lock(&srv->tok_mu);
    char *s = tok_decode(srv->t, ids, n, 0, -1, &len, &e);
    pthread_mutex_unlock(&srv->tok_mu);
    free(ids);
    if (!s)
        return fail(srv, c, 400, "tokens", "invalid_value", "tokens: %s", e.msg);
    json_t *out = json_pack("{s:o}", "content", jstr(s, len));
    free(s);
    return send_json(srv, c, 200, out);
}

/* the model as /v1/models lists it */
static json_t *model_json(server *srv)
{
    const model_config *mc = &srv->m->c;
    json_t *meta = json_pack("{s:s,s:i,s:i,s:i,s:i,s:i,s:I}", "family", mc->family_name, "n_vocab", mc->vocab_size,
                             "n_ctx_train", mc->context_length, "n_ctx", srv->S.context, "n_embd", mc->dim,
                             "n_layer", mc->n_layers, "weight_bytes", (json_int_t)srv->m->weight_bytes);
    return json_pack("{s:s,s:s,s:I,s:s,s:i,s:o}", "id", srv->model_id, "object", "model", "created",
                     (json_int_t)srv->created, "owned_by", "ogakit", "context_length", srv->S.context, "meta", meta);
}

static enum MHD_Result models(server *srv, struct MHD_Connection *c)
{
    return send_json(srv, c, 200, json_pack("{s:s,s:[o]}", "object", "list", "data", model_json(srv)));
}

/* GET /v1/models/ID (OpenAI's retrieve): this server's model by its id or path, else 404 */
static enum MHD_Result model_get(server *srv, struct MHD_Connection *c, const char *id)
{
    if (strcmp(id, srv->model_id) && strcmp(id, srv->o->model_path))
        return fail(srv, c, 404, "model", "model_not_found", "The model '%.200s' does not exist (this server has '%s')",
                    id, srv->model_id);
    return send_json(srv, c, 200, model_json(srv));
}

static enum MHD_Result metrics(server *srv, struct MHD_Connection *c)
{
    serve_sched *S = &srv->S;
    pthread_mutex_lock(&S->mu);
    uint64_t req = S->requests, pt = S->prompt_tokens, gt = S->gen_tokens, ct = S->cache_tokens;
    double ps = S->prompt_s, gs = S->gen_s;
    uint64_t steps = S->steps, rows = S->step_rows;
    int busy = S->taken, q = S->q_len;
    long kv = S->kv_used;
    pthread_mutex_unlock(&S->mu);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return MHD_NO;
#define M(name, type, help, fmt, v) fprintf(f, "# HELP ogakit_" name " " help "\n# TYPE ogakit_" name " " type "\nogakit_" name " " fmt "\n", v)
    M("requests_total", "counter", "Choices finished in a slot (one per choice of a request: done, stopped, or cancelled once running; not those refused or cancelled in the queue).", "%llu",
      (unsigned long long)req);
    M("http_requests_total", "counter", "HTTP requests received.", "%llu",
      (unsigned long long)__atomic_load_n(&srv->http_requests, __ATOMIC_RELAXED));
    M("http_errors_total", "counter", "HTTP requests answered with an error status.", "%llu",
      (unsigned long long)__atomic_load_n(&srv->http_errors, __ATOMIC_RELAXED));
    M("connections_timed_out_total", "counter", "Connections closed for not sending a whole request within --request-timeout.",
      "%llu", (unsigned long long)__atomic_load_n(&srv->conns_cut, __ATOMIC_RELAXED));
    M("prompt_tokens_total", "counter", "Prompt tokens evaluated (cached ones not counted).", "%llu",
      (unsigned long long)pt);
    M("prompt_tokens_cached_total", "counter", "Prompt tokens reused from the prefix cache.", "%llu",
      (unsigned long long)ct);
    M("tokens_predicted_total", "counter", "Tokens generated.", "%llu", (unsigned long long)gt);
    M("prompt_seconds_total", "counter", "Time spent on prompts, summed over requests.", "%.6f", ps);
    M("tokens_predicted_seconds_total", "counter", "Time spent generating, summed over requests.", "%.6f", gs);
    M("prompt_tokens_per_second", "gauge", "Prompt tokens per second of prompt time, since start.", "%.3f",
      ps > 0 ? pt / ps : 0.0);
    M("predicted_tokens_per_second", "gauge", "Generated tokens per second of generation time per request, since start.",
      "%.3f", gs > 0 ? gt / gs : 0.0);
    M("decode_steps_total", "counter", "Decode passes (every busy slot's next token in one pass).", "%llu",
      (unsigned long long)steps);
    M("decode_rows_total", "counter", "Rows those passes ran (divided by the steps: the mean batch).", "%llu",
      (unsigned long long)rows);
    M("requests_queued", "gauge", "Requests waiting for a slot.", "%d", q);
    M("slots_busy", "gauge", "Slots serving a request.", "%d", busy);
    M("slots_total", "gauge", "Slots (--parallel).", "%d", S->n_slots);
    M("kv_cells_used", "gauge", "KV cache positions holding tokens, over all slots.", "%ld", kv);
    M("kv_cells_total", "gauge", "KV cache positions, over all slots.", "%ld", (long)S->context * S->n_slots);
#undef M
    fclose(f);
    return send_text(srv, c, 200, "text/plain; version=0.0.4", buf, len);
}

/* ---------------------------------------------------------------- routing */

static int is(const char *url, const char *a, const char *b) { return !strcmp(url, a) || (b && !strcmp(url, b)); }

/* libmicrohttpd 0.9.75 hands a header's value on as a C string (and its _n length is that string's): a value
 * with a NUL in it ends at the NUL, and what the client sent after it is out of sight ("Bearer KEY\0junk" read
 * as "Bearer KEY"). RFC 9110 5.5 wants such a value refused or its NUL read as a space. The header block it
 * parsed stays in place, from the method's first byte for MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE bytes, with
 * each line's CR and LF overwritten by NULs; so after a value's end come NULs and then the next field line's
 * name (or the block's end), and any other byte there was sent after a NUL in the value. When the layout is
 * not that one (a value or a name outside the block: a line folded onto a field, whose name libmicrohttpd
 * copies elsewhere; another libmicrohttpd), nothing is looked into. */
typedef struct {
    uintptr_t lo, hi, at;
    int name, moved;
} field_start;

static enum MHD_Result field_start_visit(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    (void)kind, (void)value;
    field_start *f = cls;
    uintptr_t k = (uintptr_t)key;
    f->name |= k == f->at;
    f->moved |= k < f->lo || k >= f->hi;
    return MHD_YES;
}

static int bytes_after_nul(struct MHD_Connection *c, const char *method, const char *v, size_t n)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
    if (!ci || !method)
        return 0;
    uintptr_t lo = (uintptr_t)method, hi = lo + ci->header_size, p = (uintptr_t)v + n;
    if ((uintptr_t)v < lo || p >= hi)
        return 0;
    while (p < hi && !*(const char *)p)
        p++;
    if (p == hi)
        return 0;
    field_start f = {lo, hi, p, 0, 0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, field_start_visit, &f);
    return !f.name && !f.moved;
}

/* the request carries the key: "Authorization: Bearer KEY" or "x-api-key: KEY", the whole value and nothing
 * more (no bytes after a NUL in it). Compared in time that depends on the key's length only, never on how
 * much of it the client got right or on the length it sent. */
static int authorised(server *srv, struct MHD_Connection *c, const char *method)
{
    const char *key = srv->o->api_key;
    if (!key || !*key)
        return 1;
    const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION), *h = v;
    if (h && !strncasecmp(h, "Bearer ", 7)) {
        h += 7;
        while (*h == ' ')
            h++;
    } else {
        h = v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key");
    }
    if (!h)
        return 0;
    size_t kn = strlen(key), hn = strlen(h);
    unsigned char d = hn != kn || bytes_after_nul(c, method, v, strlen(v));
    for (size_t i = 0; i < kn; i++) /* every byte of the key is looked at, whatever came */
        d |= (unsigned char)(key[i] ^ (i < hn ? (unsigned char)h[i] : 0));
    return d == 0;
}

/* OPTIONS: 204 with the methods; with --cors, what a browser's preflight needs to go on */
static enum MHD_Result preflight(const server *srv, struct MHD_Connection *c)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD, POST, OPTIONS");
    if (srv->o->cors) {
        add_cors(srv, r);
        MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, HEAD, POST, OPTIONS");
        /* the headers the page asks to send (the openai SDK's X-Stainless-* among them), when they are a
         * plain list of header names: the server reads only its own and ignores the rest */
        const char *want = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Headers");
        int plain = want && *want && strlen(want) < 2048;
        for (const char *p = want; plain && *p; p++)
            plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || strchr("-_, ", *p);
        MHD_add_response_header(r, "Access-Control-Allow-Headers", plain ? want : "Authorization, Content-Type, X-Api-Key");
        MHD_add_response_header(r, "Vary", "Access-Control-Request-Headers");
        MHD_add_response_header(r, "Access-Control-Max-Age", "600");
    }
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_NO_CONTENT, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    (void)version;
    server *srv = cls;
    conn *cn = *con_cls;
    /* the absolute form of a request target (RFC 9112 3.2.2: servers accept it): its path */
    if (!strncasecmp(url, "http://", 7) || !strncasecmp(url, "https://", 8)) {
        const char *path = strchr(url + (url[4] == ':' ? 7 : 8), '/');
        url = path ? path : "/";
    }
    int post = !strcmp(method, "POST"), get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    if (!cn) {
        if (!(cn = calloc(1, sizeof *cn)))
            return MHD_NO;
        cn->srv = srv;
        *con_cls = cn;
        __atomic_add_fetch(&srv->http_requests, 1, __ATOMIC_RELAXED);
        const char *bad = bad_framing(c);
        if (bad) {
            answering(srv, c, cn);
            return refuse_framing(srv, c, bad);
        }
        if (!strcmp(method, "OPTIONS")) { /* a browser's preflight: carries no key */
            answering(srv, c, cn);
            return preflight(srv, c);
        }
        /* refuse before reading a body: wrong key, announced size over the limit */
        if (!is(url, "/health", "/v1/health") && !authorised(srv, c, method)) {
            answering(srv, c, cn);
            return fail(srv, c, 401, NULL, "invalid_api_key", "Invalid API key (send 'Authorization: Bearer KEY')");
        }
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > srv->body_limit) {
            answering(srv, c, cn);
            return fail(srv, c, 413, NULL, "request_too_large", "request body of %s bytes is over the limit of %zu",
                        cl, srv->body_limit);
        }
        return MHD_YES;
    }
    if (cn->responded) /* answered already */
        return drop_body(srv, cn, upload_size);
    if (*upload_size) {
        size_t n = *upload_size;
        if (cn->too_big || cn->over_budget || cn->len + n > srv->body_limit) {
            cn->too_big |= !cn->over_budget;
            return drop_body(srv, cn, upload_size);
        }
        if (cn->len + n + 1 > cn->cap) {
            size_t cap = (cn->len + n + 1) * 2;
            cap = cap > srv->body_limit + 1 ? srv->body_limit + 1 : cap;
            size_t grow = cap - cn->cap;
            if (__atomic_add_fetch(&srv->body_held, grow, __ATOMIC_RELAXED) > (size_t)BODY_BUDGET * srv->body_limit) {
                __atomic_sub_fetch(&srv->body_held, grow, __ATOMIC_RELAXED);
                cn->over_budget = 1; /* the rest is dropped; the answer is a 503 */
                body_free(srv, cn);
                return drop_body(srv, cn, upload_size);
            }
            char *b = realloc(cn->body, cap);
            if (!b) {
                __atomic_sub_fetch(&srv->body_held, grow, __ATOMIC_RELAXED);
                return MHD_NO;
            }
            cn->body = b, cn->cap = cap;
        }
        *upload_size = 0;
        memcpy(cn->body + cn->len, upload, n);
        cn->len += n;
        cn->body[cn->len] = 0;
        return MHD_YES;
    }
    answering(srv, c, cn);
    if (cn->too_big)
        return fail(srv, c, 413, NULL, "request_too_large", "request body over the limit of %zu bytes", srv->body_limit);
    if (cn->over_budget)
        return fail(srv, c, 503, NULL, "server_busy",
                    "the request bodies being received hold %d times the body limit of %zu bytes; retry later",
                    BODY_BUDGET, srv->body_limit);
    int ready = __atomic_load_n(&srv->ready, __ATOMIC_ACQUIRE);
    if (is(url, "/health", "/v1/health")) {
        if (!get)
            return not_allowed(srv, c, method, url, 0);
        if (!ready)
            return fail(srv, c, 503, NULL, "model_loading", "Loading model");
        if (__atomic_load_n(&srv->stopping, __ATOMIC_ACQUIRE)) /* a balancer on a kept-alive connection looks away */
            return fail(srv, c, 503, NULL, "shutting_down", "the server is shutting down");
        return send_json(srv, c, 200, json_pack("{s:s}", "status", "ok"));
    }
    struct {
        const char *a, *b;
        int post;
    } routes[] = {{"/v1/models", "/models", 0},       {"/metrics", NULL, 0},     {"/v1/completions", "/completions", 1},
                  {"/v1/chat/completions", "/chat/completions", 1}, {"/tokenize", NULL, 1}, {"/detokenize", NULL, 1},
                  {"/v1/responses", "/responses", 1}};
    int route = -1;
    for (int i = 0; i < (int)(sizeof routes / sizeof *routes); i++)
        if (is(url, routes[i].a, routes[i].b))
            route = i;
    const char *mid = !strncmp(url, "/v1/models/", 11) ? url + 11 : !strncmp(url, "/models/", 8) ? url + 8 : NULL;
    if (route < 0 && mid && *mid) {
        if (!get)
            return not_allowed(srv, c, method, url, 0);
        if (!ready)
            return fail(srv, c, 503, NULL, "model_loading", "Loading model");
        return model_get(srv, c, mid);
    }
    if (route < 0)
        return fail(srv, c, 404, NULL, "not_found", "no endpoint %s %s", method, url);
    if (routes[route].post ? !post : !get)
        return not_allowed(srv, c, method, url, routes[route].post);
    if (!ready)
        return fail(srv, c, 503, NULL, "model_loading", "Loading model");
    switch (route) {
    case 0: return models(srv, c);
    case 1: return metrics(srv, c);
    case 2:
    case 3:
    case 6:
        cn->counted = 1;
        __atomic_add_fetch(&srv->inflight, 1, __ATOMIC_ACQ_REL);
        return route == 6 ? responses(srv, c, cn) : completion(srv, c, cn, route == 2 ? REQ_COMPLETION : REQ_CHAT);
    case 4: return tokenize(srv, c, cn);
    default: return detokenize(srv, c, cn);
    }
}

/* c's request arrived whole (busy 1: it is being answered), or its answer is done (0: the next request's
 * time starts) */
static void conn_busy(server *srv, struct MHD_Connection *c, int busy)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    tracked *t = ci ? ci->socket_context : NULL;
    if (!t)
        return;
    pthread_mutex_lock(&srv->conn_mu);
    t->busy = busy, t->since = ogk_now();
    pthread_mutex_unlock(&srv->conn_mu);
}

static void notify_conn(void *cls, struct MHD_Connection *c, void **socket_context, enum MHD_ConnectionNotificationCode toe)
{
    server *srv = cls;
    tracked *t = *socket_context;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        int fd = conn_fd(c);
        if (fd < 0 || !(t = calloc(1, sizeof *t)))
            return; /* untracked: only MHD's idle timeout bounds it */
        t->fd = fd, t->since = ogk_now();
        pthread_mutex_lock(&srv->conn_mu);
        t->next = srv->conns;
        if (srv->conns)
            srv->conns->prev = t;
        srv->conns = t;
        pthread_mutex_unlock(&srv->conn_mu);
        *socket_context = t;
    } else if (t) { /* closed: MHD closes the socket after this returns, so a cut never meets a reused fd */
        pthread_mutex_lock(&srv->conn_mu);
        if (t->prev)
            t->prev->next = t->next;
        else
            srv->conns = t->next;
        if (t->next)
            t->next->prev = t->prev;
        pthread_mutex_unlock(&srv->conn_mu);
        free(t);
        *socket_context = NULL;
    }
}

/* shut the connections that have not sent a whole request within the timeout (their threads then see the
 * end of input and close them) */
static void cut_slow(server *srv)
{
    double now = ogk_now();
    int n = 0;
    pthread_mutex_lock(&srv->conn_mu);
    for (tracked *t = srv->conns; t; t = t->next)
        if (!t->busy && !t->cut && now - t->since > srv->request_timeout) {
            shutdown(t->fd, SHUT_RDWR);
            t->cut = 1, n++;
        }
    pthread_mutex_unlock(&srv->conn_mu);
    if (n)
        __atomic_add_fetch(&srv->conns_cut, (uint64_t)n, __ATOMIC_RELAXED);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    (void)toe;
    server *srv = cls;
    conn *cn = *con_cls;
    conn_busy(srv, c, 0);
    if (cn) {
        if (cn->counted)
            __atomic_sub_fetch(&srv->inflight, 1, __ATOMIC_ACQ_REL);
        body_free(srv, cn);
        serve_resp_free(cn->resp);
        free(cn);
    }
    *con_cls = NULL;
}

/* ---------------------------------------------------------------- libmicrohttpd's own refusals */

/* libmicrohttpd refuses some malformed requests itself, before the handler sees them: a header line without
 * a colon (400), a header block over its buffer (431), a Content-Length that is not a number (400) or past
 * 2^64 (413), a chunk size that is not hex (400) or too large (413). Its answer is an HTML page, and 0.9.75
 * wrote the head of the Content-Length ones twice (the first head's Content-Length then framed the second
 * head: the client read a garbled answer). It says so in its log before it builds the answer, from the
 * connection's own thread: the server then writes its own answer (its JSON error, Connection: close) and
 * shuts the socket's sending side, so that libmicrohttpd's answer goes nowhere and it closes the
 * connection. The log call does not name the connection: the URI callback, which runs in the connection's
 * thread for each request line it has read, keeps it for the thread. A refusal of the request line itself
 * (a bad HTTP version, a line too long: no connection kept yet) keeps libmicrohttpd's answer, which is
 * well formed; a request line without a space is closed without one (libmicrohttpd gives no hook). */
static __thread struct MHD_Connection *thread_conn;

static void *uri_seen(void *cls, const char *uri, struct MHD_Connection *c)
{
    (void)cls, (void)uri;
    thread_conn = c;
    return NULL; /* the request's con_cls: the handler's first call makes it */
}

/* the text of libmicrohttpd's HTML page ("<html><head><title>T</title></head><body>TEXT</body></html>"): TEXT
 * without its tags, into out (n bytes); "" when there is none */
static void page_text(const char *html, char *out, size_t n)
{
    const char *b = html ? strstr(html, "<body>") : NULL, *e = b ? strstr(b, "</body>") : NULL;
    size_t o = 0;
    for (const char *p = b ? b + 6 : NULL; p && p < e && o + 1 < n; p++) {
        if (*p == '<') {
            const char *q = memchr(p, '>', (size_t)(e - p));
            if (q) {
                p = q;
                continue;
            }
        }
        out[o++] = (unsigned char)*p < 0x20 ? ' ' : *p;
    }
    out[o] = 0;
}

/* all of buf onto the socket (non-blocking: waits for room, at most a second in all) */
static int send_all(int fd, const char *buf, size_t len)
{
    double t0 = ogk_now();
    while (len) {
        ssize_t k = send(fd, buf, len, MSG_NOSIGNAL);
        if (k > 0) {
            buf += k, len -= (size_t)k;
            continue;
        }
        if (k < 0 && errno == EINTR)
            continue;
        if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK) || ogk_now() - t0 > 1)
            return -1;
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        poll(&p, 1, 100);
    }
    return 0;
}

static void mhd_refused(server *srv, struct MHD_Connection *c, unsigned status, const char *html)
{
    int fd = conn_fd(c);
    if (fd < 0)
        return;
    char why[256];
    page_text(html, why, sizeof why);
    const char *code = status == 413   ? "request_too_large"
                       : status == 414 ? "uri_too_long"
                       : status == 431 ? "header_too_large"
                       : status == 505 ? "http_version_not_supported"
                                       : "bad_request";
    serve_err err;
    serve_err_set(&err, (int)status, NULL, code, "the HTTP parser refused the request: %s",
                  *why ? why : "malformed or too large");
    json_t *j = err_json(&err);
    char *body = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    const char *reason = MHD_get_reason_phrase_for(status);
    char *head = NULL;
    int hn = asprintf(&head, "HTTP/1.1 %u %s\r\nConnection: close\r\nContent-Type: application/json\r\n%s%s%s%s"
                      "Content-Length: %zu\r\n\r\n", status, *reason ? reason : "Error",
                      srv->o->cors ? "Access-Control-Allow-Origin: " : "", srv->o->cors ? srv->o->cors : "",
                      srv->o->cors ? "\r\n" : "", srv->o->cors && strcmp(srv->o->cors, "*") ? "Vary: Origin\r\n" : "",
                      body ? strlen(body) : 0);
    if (hn > 0 && body && !send_all(fd, head, (size_t)hn) && !send_all(fd, body, strlen(body))) {
        __atomic_add_fetch(&srv->http_errors, 1, __ATOMIC_RELAXED);
        shutdown(fd, SHUT_WR);
    }
    free(head);
    free(body);
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    static const char refusal[] = "Error processing request (HTTP response code is %u ('%s'))";
    if (strncmp(fmt, refusal, sizeof refusal - 1) || !thread_conn)
        return;
    va_list aq;
    va_copy(aq, ap);
    unsigned status = va_arg(aq, unsigned);
    const char *html = va_arg(aq, const char *);
    va_end(aq);
    mhd_refused(cls, thread_conn, status, html);
}

/* ---------------------------------------------------------------- start, run, stop */

/* our own listening socket, so that "address in use" and friends are named */
static int listen_on(const char *host, int port, int *bound_port, int *v6, ogk_error *e)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int rc = getaddrinfo(host, ps, &hints, &ai);
    if (rc)
        return ogk_fail(e, "--host %s: %s", host, gai_strerror(rc));
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        freeaddrinfo(ai);
        return ogk_fail(e, "socket: %s", strerror(errno));
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 512)) {
        int err = errno;
        close(fd);
        freeaddrinfo(ai);
        return ogk_fail(e, "cannot listen on %s:%d: %s", host, port, strerror(err));
    }
    *v6 = ai->ai_family == AF_INET6;
    freeaddrinfo(ai);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    *bound_port = port;
    if (!getsockname(fd, (struct sockaddr *)&ss, &sl))
        *bound_port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                     : ((struct sockaddr_in *)&ss)->sin_port);
    return fd;
}

static void model_name(const char *path, char *out, size_t n)
{
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    size_t l = strlen(b);
    if (l > 5 && !strcmp(b + l - 5, ".q4nx"))
        l -= 5;
    snprintf(out, n, "%.*s", (int)l, b);
    /* the id goes into every answer's JSON, which must be UTF-8: a name that is not has its bytes from 0x80
     * as '?' (as the programs' reports name such paths); one the length cut inside a character ends before it */
    size_t m = strlen(out), ok = tok_utf8_check(out, m);
    if (ok < m && tok_utf8_check(b, l) == l)
        out[ok] = 0;
    else
        for (size_t i = 0; ok < m && out[i]; i++)
            if ((unsigned char)out[i] >= 0x80)
                out[i] = '?';
}

int serve_run(const serve_opts *o, ogk_error *e, int *code)
{
    *code = OGK_EXIT_INIT;
    server *srv = calloc(1, sizeof *srv);
    if (!srv)
        return ogk_fail(e, "out of memory");
    srv->o = o;
    srv->body_limit = o->body_limit ? o->body_limit : DEFAULT_BODY_LIMIT;
    pthread_mutex_init(&srv->tok_mu, NULL);
    pthread_mutex_init(&srv->conn_mu, NULL);
    srv->request_timeout = o->request_timeout > 0 ? o->request_timeout : REQUEST_TIMEOUT_S;
    model_name(o->model_path, srv->model_id, sizeof srv->model_id);
    struct stat mst; /* /v1/models' created: when the container was written, read once */
    srv->created = stat(o->model_path, &mst) ? time(NULL) : mst.st_mtime;
    const char *host = o->host ? o->host : "127.0.0.1";
    int port = 0, v6 = 0, rc = -1;
    struct MHD_Daemon *d = NULL;
    /* one address may hold what the slots and the queue can use, and some more: the others still get in */
    int n_slots = o->parallel > 0 ? o->parallel : 4, n_queue = o->queue > 0 ? o->queue : 256, nq = n_slots + n_queue + 64;
    unsigned per_ip = nq < (int)MAX_CONNECTIONS / 2 ? (unsigned)nq : MAX_CONNECTIONS / 2;
    int fd = listen_on(host, o->port, &port, &v6, e);
    if (fd < 0)
        goto out;
    d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC |
                             MHD_USE_ERROR_LOG | (v6 ? MHD_USE_IPv6 : 0),
                         0, NULL, NULL, handler, srv, MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_LIMIT,
                         MAX_CONNECTIONS, MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_ip, MHD_OPTION_CONNECTION_TIMEOUT,
                         (unsigned)120, MHD_OPTION_NOTIFY_COMPLETED, completed, srv, MHD_OPTION_NOTIFY_CONNECTION,
                         notify_conn, srv, MHD_OPTION_URI_LOG_CALLBACK, uri_seen, srv, MHD_OPTION_EXTERNAL_LOGGER,
                         mhd_log, srv, MHD_OPTION_END);
    if (!d) {
        close(fd);
        ogk_fail(e, "cannot start the HTTP server on %s:%d", host, port);
        goto out;
    }
    logf_(srv, "listening on http://%s%s%s:%d (loading %s)", v6 ? "[" : "", host, v6 ? "]" : "", port, o->model_path);

    /* the model: /health says 503 until it is ready */
    ogk_error me;
    int mcode = OGK_EXIT_INIT; /* model_open's: 3 for a missing or malformed container, as run gives */
    if (kern_isa_init(&me) || !(srv->m = model_open_flags(o->model_path, q4nx_in_flags(o->weights_in), &me, &mcode))) {
        ogk_fail(e, "%s", me.msg);
        *code = mcode;
        goto out;
    }
    if (o->context > srv->m->c.context_length) {
        ogk_fail(e, "-c %d: the model's context is %d", o->context, srv->m->c.context_length);
        *code = OGK_EXIT_USAGE;
        goto out;
    }
    if (!(srv->t = app_model_tokenizer(srv->m, &me))) {
        ogk_fail(e, "%s", me.msg);
        goto out;
    }
    /* a chat template that does not parse: said once now; completions are served, chat requests get a 500 */
    srv->tmpl_bad = app_chat_templates_check(srv->m->file, o->model_path, srv->t, srv->m->c.family_name,
                                             json_string_value(json_object_get(q4nx_model(srv->m->file), "chat_template")),
                                             &srv->tmpl_e, &srv->tools_e);
    if (srv->tmpl_bad & APP_TEMPLATE_BAD)
        logf_(srv, "warning: %s; chat requests will be answered 500 chat_template_invalid (completions work)",
              srv->tmpl_e.msg);
    const char *tsrc = app_chat_template(srv->t, srv->m->c.family_name,
                                         json_string_value(json_object_get(q4nx_model(srv->m->file), "chat_template")));
    ogk_error le;
    if (!(srv->tmpl_bad & APP_TEMPLATE_BAD) && tsrc && tok_jinja_lint(tsrc, &le))
        logf_(srv, "warning: the chat template uses what the Jinja engine lacks: %s; a chat request that reaches it "
                   "will be refused (400)", le.msg);
    if (srv->tmpl_bad & APP_TEMPLATE_TOOLS_BAD)
        logf_(srv, "warning: %s; chat requests with tools will be answered 500 chat_template_invalid", srv->tools_e.msg);
    int mode = o->mode >= 0 ? o->mode : model_default_mode(srv->m); /* -1: the pack's */
    if (o->draft_path && !(srv->dm = model_open_flags(o->draft_path, q4nx_in_flags(o->weights_in), &me, &mcode))) {
        ogk_fail(e, "%s", me.msg);
        *code = mcode;
        goto out;
    }
    if (serve_sched_init(&srv->S, srv->m, srv->t, &srv->tok_mu, n_slots, n_queue, o->context, mode, o->threads, o->prefix_cache, &me)) {
        ogk_fail(e, "%s", me.msg);
        goto out;
    }
    srv->S.hurry = o->stop; /* a second signal: the shutdown grace is over */
    if ((srv->dm && serve_sched_drafter(&srv->S, srv->dm, o->draft_max > 0 ? o->draft_max : SERVE_DRAFT_MAX, &me)) ||
        serve_sched_start(&srv->S, &me)) {
        ogk_fail(e, "%s", me.msg);
        goto out;
    }
    srv->sched_ok = 1;
    __atomic_store_n(&srv->ready, 1, __ATOMIC_RELEASE);
    logf_(srv, "ready: model %s, %d slots of %d positions, mode %s, %d threads, kernel %s%s%s", srv->model_id,
          srv->S.n_slots, srv->S.context, kern_mode_name(mode), kern_pool_threads(srv->S.pool),
          kern_isa_current()->name, srv->dm ? ", drafter " : "", srv->dm ? o->draft_path : "");
    for (int k = 0; !o->stop || !*o->stop; k++) {
        usleep(50 * 1000);
        if (k % 10 == 0)
            cut_slow(srv);
    }

    /* stop accepting; let the in-flight requests finish (cancelled after a grace period) */
    logf_(srv, "stopping: finishing in-flight requests");
    __atomic_store_n(&srv->stopping, 1, __ATOMIC_RELEASE);
    MHD_socket lfd = MHD_quiesce_daemon(d);
    if (lfd != MHD_INVALID_SOCKET)
        close(lfd);
    double grace = o->shutdown_grace >= 0 ? o->shutdown_grace : SHUTDOWN_GRACE_S;
    serve_sched_stop(&srv->S, grace);
    /* every job is over: let their answers reach the clients before the connections close */
    for (double t0 = ogk_now(); __atomic_load_n(&srv->inflight, __ATOMIC_ACQUIRE) > 0 && ogk_now() - t0 < 5;)
        usleep(10 * 1000);
    rc = 0, *code = 0;
out:
    if (d)
        MHD_stop_daemon(d);
    if (srv->sched_ok)
        serve_sched_stop(&srv->S, 0);
    if (srv->S.slots || srv->S.queue || srv->S.pool)
        serve_sched_free(&srv->S);
    tok_free(srv->t);
    model_close(srv->dm);
    model_close(srv->m);
    pthread_mutex_destroy(&srv->tok_mu);
    pthread_mutex_destroy(&srv->conn_mu);
    free(srv);
    return rc;
}
