/* An OpenAI-compatible server as target or drafter: greedy completions of token-id prompts over
 * libcurl. POST /v1/completions {"prompt": [ids], "max_tokens", "temperature": 0, "return_tokens": true,
 * "logprobs": 2} is read for choices[0].tokens / .text / .finish_reason / .logprobs; a server whose
 * reply has no token ids there is asked vLLM's way ("return_tokens_as_token_ids": logprobs.tokens as
 * "token_id:N"), then llama-server's (POST /completion, "tokens"). A 429 or 503 (busy, still loading) is
 * asked again after its Retry-After (at most RETRY_S) or a doubling pause, RETRIES times. */
#define _GNU_SOURCE /* asprintf */
#include <curl/curl.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "spec.h"

struct spec_http {
    char *base;
    long timeout_ms;
    CURL *c;
    int api;   /* API_*: how this server gives token ids, found at the first completion */
    double last_ms; /* the last request's final attempt, in ms (a retried request's pauses left out) */
    double draft_ms; /* the last draft's requests' final attempts, in ms (more than one past an EOS on llama-server) */
    long last_status; /* its HTTP status (0: no answer) */
    char *shown; /* the base as messages show it (no credentials) */
    char *auth;  /* "Authorization: Bearer KEY", or NULL */
    int cache_prompt; /* llama-server's prompt cache: on for drafts (a drafter's real cost), off for records */
};

#define REPLY_MAX (64u << 20) /* bytes of a reply: a peer that sends more is refused */
#define RETRIES 5               /* further attempts after a 429 / 503 */
#define RETRY_S 10              /* the longest pause before one, whatever Retry-After asks */

enum { API_OPENAI, API_VLLM, API_LLAMA };

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

char *spec_url_shown(const char *url)
{
    /* the authority runs to the first '/', '?' or '#'; its userinfo to its last '@' (a password with an
     * '@' left unencoded is hidden whole) */
    const char *host = strstr(url, "://"), *at = NULL;
    for (const char *q = host ? host + 3 : NULL; q && *q && !strchr("/?#", *q); q++)
        if (*q == '@')
            at = q;
    if (!at)
        return strdup(url);
    char *s = malloc(strlen(url) + 4);
    if (s)
        sprintf(s, "%.*s***%s", (int)(host + 3 - url), url, at);
    return s;
}

int spec_http_key(spec_http *h, const char *key, ogk_error *e)
{
    if (!key)
        return 0;
    if (!*key || strpbrk(key, "\r\n"))
        return ogk_fail(e, "--api-key: an empty key or one with a line break");
    free(h->auth);
    if (asprintf(&h->auth, "Authorization: Bearer %s", key) < 0) {
        h->auth = NULL;
        return ogk_fail(e, "out of memory");
    }
    return 0;
}

spec_http *spec_http_new(const char *url, double timeout_s, ogk_error *e)
{
    if (strncasecmp(url, "http://", 7) && strncasecmp(url, "https://", 8)) { /* a scheme has no case */
        char *su = spec_url_shown(url); /* a mistyped URL keeps its credentials out of the message too */
        ogk_fail(e, "%s: want an http:// URL", su ? su : "the URL");
        free(su);
        return NULL;
    }
    pthread_once(&curl_once, curl_init_once);
    spec_http *h = calloc(1, sizeof *h);
    if (!h || !(h->base = strdup(url)) || !(h->shown = spec_url_shown(url)) || !(h->c = curl_easy_init())) {
        spec_http_free(h);
        ogk_fail(e, "out of memory (curl)");
        return NULL;
    }
    size_t n = strlen(h->base);
    while (n > 0 && h->base[n - 1] == '/')
        h->base[--n] = 0;
    /* a base given with OpenAI's /v1 (as clients' base_url is): the paths below add it */
    if (n >= 3 && !strcmp(h->base + n - 3, "/v1") && strstr(h->base, "://") + 3 < h->base + n - 3)
        h->base[n -= 3] = 0;
    /* 1 ms .. a day: libcurl reads 0 as no timeout at all, and a huge value would overflow a long */
    h->timeout_ms = !(timeout_s * 1e3 >= 1) ? 1 : timeout_s * 1e3 > 864e5 ? 86400000L : (long)(timeout_s * 1e3);
    return h;
}

void spec_http_free(spec_http *h)
{
    if (!h)
        return;
    if (h->c)
        curl_easy_cleanup(h->c);
    free(h->base);
    free(h->shown);
    free(h->auth);
    free(h);
}

typedef struct {
    char *p;
    size_t n, cap;
    int too_big;
} buf;

static size_t on_data(char *d, size_t sz, size_t nm, void *ctx)
{
    buf *b = ctx;
    size_t add = sz * nm;
    if (b->n + add > REPLY_MAX) {
        b->too_big = 1;
        return 0; /* libcurl stops with a write error */
    }
    if (b->n + add + 1 > b->cap) {
        size_t cap = (b->n + add + 1) * 2;
        char *p = realloc(b->p, cap);
        if (!p)
            return 0;
        b->p = p, b->cap = cap;
    }
    memcpy(b->p + b->n, d, add);
    b->n += add;
    b->p[b->n] = 0;
    return add;
}

/* one request; body NULL: GET. The parsed JSON reply, or NULL with e filled. */
static json_t *request(spec_http *h, const char *path, const json_t *body, ogk_error *e)
{
    char url[2048], shown[2048];
    if ((size_t)snprintf(url, sizeof url, "%s%s", h->base, path) >= sizeof url)
        return ogk_fail(e, "%s: the URL is longer than %zu bytes", h->shown, sizeof url), NULL;
    snprintf(shown, sizeof shown, "%s%s", h->shown, path);
    buf b = {0};
    char *js = body ? json_dumps(body, JSON_COMPACT) : NULL;
    struct curl_slist *hd = curl_slist_append(NULL, "Content-Type: application/json");
    if (h->auth)
        hd = curl_slist_append(hd, h->auth);
    CURL *c = h->c;
    CURLcode rc;
    long status = 0;
    for (int attempt = 0;; attempt++) {
        curl_easy_reset(c);
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
        curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, h->timeout_ms);
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, hd); /* the key goes with GETs too (/v1/models) */
        if (js)
            curl_easy_setopt(c, CURLOPT_POSTFIELDS, js);
        double t0 = ogk_now();
        rc = curl_easy_perform(c);
        h->last_ms = (ogk_now() - t0) * 1e3;
        status = 0;
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        h->last_status = rc == CURLE_OK ? status : 0;
        if (rc != CURLE_OK || (status != 429 && status != 503) || attempt == RETRIES)
            break;
        /* busy or still loading: its Retry-After (seconds), else 0.5 s doubling; at most RETRY_S */
        curl_off_t after = -1;
        double pause = curl_easy_getinfo(c, CURLINFO_RETRY_AFTER, &after) == CURLE_OK && after > 0
                           ? (double)after
                           : 0.5 * (double)(1 << attempt);
        if (pause > RETRY_S)
            pause = RETRY_S;
        ogk_err("%s: HTTP %ld; asking again in %.1f s (%d of %d)", shown, status, pause, attempt + 1, RETRIES);
        struct timespec ts = {(time_t)pause, (long)((pause - (double)(time_t)pause) * 1e9)};
        while (nanosleep(&ts, &ts) && errno == EINTR)
            ;
        free(b.p);
        b = (buf){0};
    }
    curl_slist_free_all(hd);
    free(js);
    json_t *j = NULL;
    if (b.too_big) {
        ogk_fail(e, "%s: the reply is over %u MiB", shown, REPLY_MAX >> 20);
    } else if (rc == CURLE_OPERATION_TIMEDOUT) { /* reached, but slower than asked: not "unreachable" */
        ogk_fail(e, "%s: no complete answer within %g s (--timeout)", shown, (double)h->timeout_ms / 1e3);
    } else if (rc != CURLE_OK) {
        ogk_fail(e, "%s: unreachable: %s", shown, curl_easy_strerror(rc));
    } else if (status < 200 || status > 299) {
        ogk_fail(e, "%s: HTTP %ld: %.200s", shown, status, b.p ? b.p : "");
    } else {
        json_error_t je; /* "\u0000" allowed: llama-server echoes the prompt's text, where a token can be the byte 0 */
        j = b.p ? json_loadb(b.p, b.n, JSON_ALLOW_NUL, &je) : NULL;
        if (!j)
            ogk_fail(e, "%s: the reply is not JSON%s%s", shown, b.p ? ": " : "", b.p ? je.text : "");
    }
    free(b.p);
    return j;
}

char *spec_http_model_id(spec_http *h)
{
    ogk_error e;
    json_t *j = request(h, "/v1/models", NULL, &e);
    const json_t *id = json_object_get(json_array_get(json_object_get(j, "data"), 0), "id");
    char *s = json_is_string(id) ? strdup(json_string_value(id)) : NULL;
    json_decref(j);
    return s;
}

void spec_completion_free(spec_completion *c)
{
    free(c->ids), free(c->text), free(c->gaps);
    memset(c, 0, sizeof *c);
}

/* top-1 minus top-2 of one step's alternatives: an object {token: logprob} (OpenAI completions), or an
 * array of {"logprob"} / {"prob"} objects (llama.cpp). NAN when fewer than two. */
static float gap_of(const json_t *alts)
{
    double v[2] = {-INFINITY, -INFINITY}, x;
    int n = 0;
    const char *k;
    json_t *a;
    size_t i;
    if (json_is_object(alts)) {
        json_object_foreach((json_t *)alts, k, a) if (json_is_number(a))
        {
            x = json_number_value(a), n++;
            if (x > v[0])
                v[1] = v[0], v[0] = x;
            else if (x > v[1])
                v[1] = x;
        }
    } else if (json_is_array(alts)) {
        json_array_foreach(alts, i, a)
        {
            const json_t *lp = json_object_get(a, "logprob"), *p = json_object_get(a, "prob");
            if (json_is_number(lp))
                x = json_number_value(lp);
            else if (json_is_number(p) && json_number_value(p) > 0)
                x = log(json_number_value(p));
            else
                continue;
            n++;
            if (x > v[0])
                v[1] = v[0], v[0] = x;
            else if (x > v[1])
                v[1] = x;
        }
    }
    return n >= 2 ? (float)(v[0] - v[1]) : NAN;
}

static int read_ids(const json_t *a, spec_completion *c, const char *where, ogk_error *e)
{
    c->n = (int)json_array_size(a);
    c->ids = malloc(sizeof(int) * (size_t)(c->n + 1));
    if (!c->ids)
        return ogk_fail(e, "out of memory");
    for (int i = 0; i < c->n; i++) {
        const json_t *v = json_array_get(a, (size_t)i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 0x7fffffff)
            return ogk_fail(e, "%s: the reply's token %d is not a token id", where, i);
        c->ids[i] = (int)json_integer_value(v);
    }
    return 0;
}

static void take_gaps(spec_completion *c, const json_t *steps, int (*alts_of)(const json_t *, const json_t **))
{
    if (!json_is_array(steps) || (int)json_array_size(steps) < c->n || !c->n)
        return;
    c->gaps = malloc(sizeof(float) * (size_t)c->n);
    for (int i = 0; c->gaps && i < c->n; i++) {
        const json_t *alts;
        float g = alts_of(json_array_get(steps, (size_t)i), &alts) ? NAN : gap_of(alts);
        if (!isfinite(g)) { /* fewer than two alternatives, or logprobs too far apart for a float */
            free(c->gaps);
            c->gaps = NULL;
            return;
        }
        c->gaps[i] = g;
    }
}

static int openai_alts(const json_t *step, const json_t **alts)
{
    *alts = step;
    return 0;
}
static int llama_alts(const json_t *step, const json_t **alts)
{
    *alts = json_object_get(step, "top_logprobs");
    if (!*alts)
        *alts = json_object_get(step, "probs");
    return *alts ? 0 : -1;
}

/* vLLM's ids with "return_tokens_as_token_ids": logprobs.tokens ["token_id:N", ...] as a new array of N, or
 * NULL when any entry is not of that form */
static json_t *vllm_ids(const json_t *tokens)
{
    if (!json_is_array(tokens))
        return NULL;
    json_t *a = json_array();
    size_t i;
    const json_t *v;
    json_array_foreach(tokens, i, v)
    {
        const char *s = json_string_value(v), *d = s && !strncmp(s, "token_id:", 9) ? s + 9 : NULL;
        char *end;
        long long id = d && *d >= '0' && *d <= '9' ? strtoll(d, &end, 10) : -1;
        if (id < 0 || *end || id > 0x7fffffff || json_array_append_new(a, json_integer(id))) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

/* one reply of llama-server's /completion (to n_sent tokens, asked for `asked` more) into part: its ids, gaps and text,
 * and whether an end-of-generation token stopped it ("stop_type": "eos"; older servers: "stopped_eos": true) or a stop
 * string ("word", "stopped_word": one its command line set, -r; the tokens hold all of it). The EOS
 * token is the last of "tokens" (llama-server appends each sampled token before testing it): left out unless keep_eos,
 * as its text leaves it out. A reply past the server's context is refused: "truncated" (it stopped short, or with
 * --context-shift went on over a context it cut, then holding fewer than were sent and answered, "tokens_cached"
 * leaving out the last answered), but for an answer of all that was asked that just fills the context. */
static int llama_part(spec_http *h, const json_t *rep, int n_sent, int asked, int want_gaps, int keep_eos,
                      spec_completion *part, int *eos, int *word, ogk_error *e)
{
    memset(part, 0, sizeof *part);
    const json_t *tk = json_object_get(rep, "tokens"), *tx = json_object_get(rep, "content"),
                 *st = json_object_get(rep, "stop_type");
    if (!json_is_array(tk))
        return ogk_fail(e, "%s: neither /v1/completions (choices[0].tokens, or vLLM's logprobs.tokens) nor /completion "
                           "(tokens) returned token ids",
                        h->shown);
    if (read_ids(tk, part, h->shown, e)) {
        spec_completion_free(part);
        return -1;
    }
    const json_t *held = json_object_get(rep, "tokens_cached");
    if (json_is_true(json_object_get(rep, "truncated")) &&
        !(part->n >= asked && json_is_integer(held) && json_integer_value(held) + 1 >= (json_int_t)n_sent + part->n)) {
        spec_completion_free(part);
        return ogk_fail(e, "%s: the server's context ran out (\"truncated\": true) before %d tokens: what it answers "
                           "past it is not the model's continuation of the whole sequence; give it a larger one (-c)",
                        h->shown, n_sent + asked);
    }
    *eos = json_is_true(json_object_get(rep, "stopped_eos")) ||
           (json_is_string(st) && !strcmp(json_string_value(st), "eos"));
    *word = json_is_true(json_object_get(rep, "stopped_word")) ||
            (json_is_string(st) && !strcmp(json_string_value(st), "word"));
    if (*eos && !keep_eos && part->n > 0)
        part->n--;
    part->text = json_is_string(tx) ? strdup(json_string_value(tx)) : NULL;
    if (want_gaps)
        take_gaps(part, json_object_get(rep, "completion_probabilities"), llama_alts);
    return 0;
}

/* llama-server's own endpoint; v1: how /v1/completions answered when this call found its way here (said with an
 * error of the first request), NULL when an earlier call did. Its ignore_eos is a logit bias of -inf on every end-of-generation token, so what it
 * answers with it is not the greedy continuation (a drafter's drafts, or a target's recording, with the token the
 * model ranks second where its greedy choice is EOS). So it is never asked to: a reply that stopped at such a token
 * ends the continuation before it (as the OpenAI replies and `record -m` do), or, with ignore_eos, is asked again
 * from everything so far, that token included, as -m and npu-forward serve keep going past it. A reply stopped by
 * a stop string (a request's empty "stop" is its command line's -r) is asked again so too. */
static int llama_complete(spec_http *h, const int *prompt, int n, int max_tokens, int ignore_eos, int want_gaps,
                          const char *v1, spec_completion *c, ogk_error *e)
{
    json_t *seq = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(seq, json_integer(prompt[i]));
    int gaps = want_gaps, eos = 0, word = 0, rc = 0;
    size_t text_len = 0;
    c->ids = malloc(sizeof(int));
    c->text = strdup("");
    if (!c->ids || !c->text)
        rc = ogk_fail(e, "out of memory");
    for (int asked = 0; !rc; asked++) {
        /* temperature 0 is greedy only after the samplers before it in the server's chain (its command line's
         * --repeat-penalty, --dry-multiplier, --xtc-probability, --typical, --samplers; --dynatemp-range; its
         * --logit-bias): a chain of temperature alone, no dynamic range, no biases */
        json_t *body = json_pack("{s:O,s:i,s:i,s:b,s:b,s:b,s:[s],s:i,s:[]}", "prompt", seq, "n_predict",
                                 max_tokens - c->n, "temperature", 0, "return_tokens", 1, "cache_prompt", h->cache_prompt,
                                 "ignore_eos", 0, "samplers", "temperature", "dynatemp_range", 0, "logit_bias");
        if (want_gaps)
            json_object_set_new(body, "n_probs", json_integer(2));
        json_t *rep = request(h, "/completion", body, e);
        json_decref(body);
        if (!rep && !asked && v1) { /* a server that speaks only OpenAI's API without ids: say what was asked, not
                                     * just the 404 */
            char why[sizeof e->msg];
            snprintf(why, sizeof why, "%s", e->msg);
            ogk_fail(e, "%s: no token ids: /v1/completions %s and then %s", h->shown, v1, why);
        }
        spec_completion part;
        if (!rep || llama_part(h, rep, n + c->n, max_tokens - c->n, want_gaps, ignore_eos, &part, &eos, &word, e)) {
            json_decref(rep);
            rc = -1;
            break;
        }
        json_decref(rep);
        int *ids = realloc(c->ids, sizeof(int) * (size_t)(c->n + part.n + 1));
        float *g = gaps && part.gaps ? realloc(c->gaps, sizeof(float) * (size_t)(c->n + part.n + 1)) : NULL;
        size_t tl = part.text ? strlen(part.text) : 0;
        char *t = c->text ? realloc(c->text, text_len + tl + 1) : NULL;
        if (ids)
            c->ids = ids;
        if (t)
            c->text = t;
        if (!ids || (gaps && part.gaps && !g) || (c->text && !t)) {
            spec_completion_free(&part);
            rc = ogk_fail(e, "out of memory");
            break;
        }
        memcpy(c->ids + c->n, part.ids, sizeof(int) * (size_t)part.n);
        if (g)
            memcpy((c->gaps = g) + c->n, part.gaps, sizeof(float) * (size_t)part.n);
        else if (gaps) /* a part without both alternatives at every step: no gaps for the whole */
            gaps = 0, free(c->gaps), c->gaps = NULL;
        if (!part.text || word) /* a part without text, or without its stop string's: no text for the whole */
            free(c->text), c->text = NULL;
        else if (c->text)
            memcpy(c->text + text_len, part.text, tl + 1), text_len += tl;
        for (int i = 0; i < part.n; i++)
            json_array_append_new(seq, json_integer(part.ids[i]));
        c->n += part.n;
        c->ms += h->last_ms;
        int more = ((eos && ignore_eos) || word) && part.n > 0 && c->n < max_tokens;
        spec_completion_free(&part);
        if (!more)
            break;
    }
    json_decref(seq);
    snprintf(c->stop, sizeof c->stop, "%s", eos && !ignore_eos ? "eos" : "length");
    if (rc)
        spec_completion_free(c);
    return rc;
}

int spec_http_complete(spec_http *h, const int *prompt, int n, int max_tokens, int ignore_eos, int want_gaps,
                       spec_completion *c, ogk_error *e)
{
    memset(c, 0, sizeof *c);
    json_t *ids = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(ids, json_integer(prompt[i]));
    json_t *rep = NULL, *body;
    const char *v1 = NULL; /* how /v1/completions answered, when this call falls back to /completion */
    while (h->api != API_LLAMA) {
        int vllm = h->api == API_VLLM;
        body = json_pack("{s:O,s:i,s:i,s:b,s:b,s:b}", "prompt", ids, "max_tokens", max_tokens, "temperature", 0,
                         "return_tokens", 1, "ignore_eos", ignore_eos, "stream", 0);
        if (vllm) /* the ids come with the logprobs: at least the chosen token's */
            json_object_set_new(body, "return_tokens_as_token_ids", json_true());
        if (want_gaps || vllm)
            json_object_set_new(body, "logprobs", json_integer(want_gaps ? 2 : 1));
        rep = request(h, "/v1/completions", body, e);
        json_decref(body);
        if (!rep && h->api == API_OPENAI && h->last_status == 404) { /* no such endpoint: llama-server's own */
            h->api = API_LLAMA;
            v1 = "answered HTTP 404";
            break;
        }
        if (!rep) {
            json_decref(ids);
            return -1;
        }
        const json_t *ch = json_array_get(json_object_get(rep, "choices"), 0);
        const json_t *lp = json_object_get(ch, "logprobs");
        json_t *tk = vllm ? vllm_ids(json_object_get(lp, "tokens")) : json_incref(json_object_get(ch, "tokens"));
        if (json_is_array(tk)) {
            const json_t *tx = json_object_get(ch, "text"), *fr = json_object_get(ch, "finish_reason");
            int rc = read_ids(tk, c, h->shown, e);
            json_decref(tk);
            c->text = json_is_string(tx) ? strdup(json_string_value(tx)) : NULL;
            int stopped = json_is_string(fr) && !strcmp(json_string_value(fr), "stop");
            snprintf(c->stop, sizeof c->stop, "%s", stopped ? "eos" : "length");
            /* vLLM keeps the end-of-generation token that stopped it in its ids (its text leaves it out); a
             * recording ends before it, as the other replies do: dropped (asked with no stop strings, "stop"
             * is always such a token) */
            if (!rc && vllm && stopped && c->n > 0)
                c->n--;
            if (!rc && want_gaps)
                take_gaps(c, json_object_get(lp, "top_logprobs"), openai_alts);
            c->ms = h->last_ms;
            json_decref(rep), json_decref(ids);
            if (rc)
                spec_completion_free(c);
            return rc;
        }
        json_decref(tk);
        json_decref(rep);
        h->api++; /* no ids in the reply: vLLM's way next, then llama-server's native endpoint */
        v1 = "answered none (asked also vLLM's way)";
    }
    json_decref(ids);
    return llama_complete(h, prompt, n, max_tokens, ignore_eos, want_gaps, v1, c, e);
}

int spec_http_draft(void *self, const int *prefix, int n, int k, int *out, ogk_error *e)
{
    spec_completion c;
    spec_http *h = self;
    h->cache_prompt = 1; /* a drafter keeps its prefix between rounds, as a live drafter would */
    if (spec_http_complete(h, prefix, n, k, 1, 0, &c, e))
        return -1;
    int got = c.n < k ? c.n : k;
    h->draft_ms = c.ms;
    memcpy(out, c.ids, sizeof(int) * (size_t)got);
    spec_completion_free(&c);
    return got;
}

int spec_http_prefill(void *self, const int *prompt, int n, ogk_error *e)
{
    /* the prompt but its last token, one token asked for and dropped: a server that keeps a prefix (llama-server's
     * cache_prompt, a prefix cache) then spends the first round on the drafts, not on the prompt */
    spec_completion c;
    spec_http *h = self;
    h->cache_prompt = 1;
    if (n < 2)
        return 0;
    if (spec_http_complete(h, prompt, n - 1, 1, 1, 0, &c, e))
        return -1;
    spec_completion_free(&c);
    return 0;
}

double spec_http_last_ms(void *self) { return ((spec_http *)self)->draft_ms; }
