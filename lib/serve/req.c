/* Request bodies of /v1/completions and /v1/chat/completions: JSON into a serve_req, every field
 * checked for type and range, anything wrong a named 4xx in OpenAI's error shape. Unknown fields are
 * ignored (as OpenAI-compatible servers do: clients send fields for other servers); known OpenAI fields
 * this server does not implement (JSON mode, penalties, forced tool calls, ...) are refused unless empty or
 * neutral. Tools (chat only) are checked in tools.c. */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "serve_int.h"

void serve_new_id(char *buf, size_t n, const char *prefix)
{
    uint64_t r = 0;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) != sizeof r)
        r = (uint64_t)(ogk_now() * 1e9) ^ (uint64_t)pthread_self();
    snprintf(buf, n, "%s%016llx", prefix, (unsigned long long)r);
}

int serve_err_set(serve_err *err, int status, const char *param, const char *code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    /* valid UTF-8, or jansson refuses the body and the client gets no answer: an invalid byte (a request's
     * own text quoted back, or a character the length limit cut in two) becomes '?' */
    char *m = err->message;
    for (size_t i = 0, n = strlen(m); i < n;) {
        i += tok_utf8_check(m + i, n - i);
        if (i < n)
            m[i++] = '?';
    }
    err->status = status, err->param = param, err->code = code;
    err->type = status == 401   ? "authentication_error"
                : status == 404 ? "not_found_error"
                : status == 503 ? "unavailable_error"
                : status >= 500 ? "server_error"
                                : "invalid_request_error";
    return -1;
}

#define BAD(param, ...) serve_err_set(err, 400, param, "invalid_value", __VA_ARGS__)
#define BADTYPE(param, want) serve_err_set(err, 400, param, "invalid_type", "'%s' must be %s", param, want)

/* a field that is absent or null counts as not given */

int serve_json_error(serve_err *err, const json_error_t *je)
{
    if (strstr(je->text, "JSON_ALLOW_NUL")) /* valid JSON, but C strings end at a NUL */
        return serve_err_set(err, 400, NULL, "invalid_value",
                             "a string holds \\u0000 (a NUL character), which this server does not take (at byte %d)",
                             je->position);
    return serve_err_set(err, 400, NULL, "invalid_json", "malformed JSON body: %s (at byte %d)", je->text, je->position);
}

static int get_number(const json_t *o, const char *key, double lo, double hi, double *out, serve_err *err)
{
    const json_t *v = serve_field(o, key);
    if (!v)
        return 0;
    if (!json_is_number(v))
        return BADTYPE(key, "a number");
    double x = json_number_value(v);
    if (!isfinite(x) || x < lo || x > hi)
        return BAD(key, "'%s' is %g, want a number in [%g, %g]", key, x, lo, hi);
    *out = x;
    return 0;
}

static int get_int(const json_t *o, const char *key, long long lo, long long hi, long long *out, serve_err *err)
{
    const json_t *v = serve_field(o, key);
    if (!v)
        return 0;
    if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) && fabs(json_real_value(v)) < 9e15) {
        long long x = (long long)json_real_value(v);
        if (x < lo || x > hi)
            return BAD(key, "'%s' is %lld, want an integer in [%lld, %lld]", key, x, lo, hi);
        *out = x;
        return 0;
    }
    if (!json_is_integer(v))
        return BADTYPE(key, "an integer");
    long long x = json_integer_value(v);
    if (x < lo || x > hi)
        return BAD(key, "'%s' is %lld, want an integer in [%lld, %lld]", key, x, lo, hi);
    *out = x;
    return 0;
}

static int get_bool(const json_t *o, const char *key, int *out, serve_err *err)
{
    const json_t *v = serve_field(o, key);
    if (!v)
        return 0;
    if (!json_is_boolean(v))
        return BADTYPE(key, "a boolean");
    *out = json_is_true(v);
    return 0;
}

static int add_stop(serve_req *r, const json_t *s, serve_err *err)
{
    if (!json_is_string(s))
        return BADTYPE("stop", "a string or an array of strings");
    if (r->n_stops == SERVE_MAX_STOPS)
        return BAD("stop", "at most %d stop strings", SERVE_MAX_STOPS);
    if (json_string_length(s) == 0)
        return 0; /* an empty stop string stops nothing */
    if (json_string_length(s) > 256)
        return BAD("stop", "a stop string longer than 256 bytes");
    if (!(r->stops[r->n_stops] = strndup(json_string_value(s), json_string_length(s))))
        return serve_err_set(err, 500, NULL, NULL, "out of memory");
    r->n_stops++;
    return 0;
}

/* chat content: a string, or an array of text parts joined (an assistant's refusal parts as their text) */
static json_t *content_text(const json_t *c, size_t i, int assistant, serve_err *err)
{
    if (!c)
        return json_string("");
    if (json_is_string(c))
        return json_incref((json_t *)c);
    if (!json_is_array(c)) {
        BAD("messages", "messages[%zu].content must be a string or an array of content parts", i);
        return NULL;
    }
    char *buf = NULL;
    size_t len = 0, k;
    FILE *f = open_memstream(&buf, &len);
    const json_t *p;
    json_array_foreach(c, k, p)
    {
        const char *type = json_string_value(json_object_get(p, "type"));
        int refusal = type && assistant && !strcmp(type, "refusal");
        const json_t *t = json_object_get(p, refusal ? "refusal" : "text");
        if (!json_is_object(p) || !type || (strcmp(type, "text") && !refusal) || !json_is_string(t)) {
            fclose(f), free(buf);
            if (type && strcmp(type, "text") && !refusal)
                BAD("messages", "messages[%zu].content[%zu]: a part of type '%.64s' is not supported (this server reads "
                    "text: {\"type\": \"text\", \"text\": ...} parts%s)", i, k, type,
                    assistant ? " and an assistant's refusal parts" : "");
            else
                BAD("messages", "messages[%zu].content[%zu]: a part must be {\"type\": \"%s\", \"%s\": a string}", i, k,
                    refusal ? "refusal" : "text", refusal ? "refusal" : "text");
            return NULL;
        }
        fwrite(json_string_value(t), 1, json_string_length(t), f);
    }
    fclose(f);
    json_t *s = json_stringn(buf ? buf : "", len);
    free(buf);
    return s;
}

static int parse_messages(serve_req *r, const json_t *msgs, serve_err *err)
{
    if (!msgs)
        return serve_err_set(err, 400, "messages", "missing_required_parameter", "'messages' is required");
    if (!json_is_array(msgs))
        return BADTYPE("messages", "an array");
    if (json_array_size(msgs) == 0)
        return BAD("messages", "'messages' is empty");
    r->messages = json_array();
    size_t i;
    const json_t *m;
    json_array_foreach(msgs, i, m)
    {
        if (!json_is_object(m))
            return BAD("messages", "messages[%zu] is not an object", i);
        const json_t *role = json_object_get(m, "role");
        if (!json_is_string(role))
            return BAD("messages", "messages[%zu].role must be a string", i);
        const char *rs = json_string_value(role);
        if (strcmp(rs, "system") && strcmp(rs, "user") && strcmp(rs, "assistant") && strcmp(rs, "developer") &&
            strcmp(rs, "tool"))
            return BAD("messages", "messages[%zu].role '%s' is not system, developer, user, assistant or tool", i, rs);
        /* an assistant's tool calls without content: null, as transformers gives templates that branch on
         * it (DeepSeek's "content is none"); where a template cannot take null, http.c renders "" instead */
        const json_t *calls0 = serve_field(m, "tool_calls"), *c0 = serve_field(m, "content");
        int keep_null = !strcmp(rs, "assistant") && !c0 && calls0;
        if (!c0 && strcmp(rs, "assistant")) /* OpenAI's rule: only an assistant's message may go without */
            return serve_err_set(err, 400, "messages", "missing_required_parameter",
                                 "messages[%zu]: a %s message needs 'content' (a string or text parts)", i, rs);
        json_t *c = keep_null ? json_null() : content_text(c0, i, !strcmp(rs, "assistant"), err);
        if (!c)
            return -1;
        r->null_content |= keep_null;
        /* developer is OpenAI's newer name for system; templates know system */
        json_t *nm = json_pack("{s:s,s:o}", "role", strcmp(rs, "developer") ? rs : "system", "content", c);
        json_array_append_new(r->messages, nm);
        const json_t *v;
        if (!strcmp(rs, "assistant") && (v = serve_field(m, "tool_calls"))) {
            json_t *calls = serve_tool_calls_norm(v, i, err);
            if (!calls)
                return -1;
            json_object_set_new(nm, "tool_calls", calls);
        }
        /* the reasoning of an earlier turn, as this server answers it: templates (Qwen3's) print it */
        if (!strcmp(rs, "assistant") && (v = serve_field(m, "reasoning_content"))) {
            if (!json_is_string(v))
                return BAD("messages", "messages[%zu].reasoning_content must be a string", i);
            json_object_set(nm, "reasoning_content", (json_t *)v);
        }
        if (!strcmp(rs, "tool"))
            for (int k = 0; k < 2; k++) { /* which call this answers, as templates may print it */
                const char *key = k ? "name" : "tool_call_id";
                if ((v = serve_field(m, key)) && !json_is_string(v))
                    return BAD("messages", "messages[%zu].%s must be a string", i, key);
                if (v)
                    json_object_set(nm, key, (json_t *)v);
            }
    }
    return 0;
}

/* a non-empty JSON array of token ids into *ids / *n; where: the prompt's place in a list (-1: the prompt) */
static int parse_ids(const json_t *a, long where, int **ids, int *n, serve_err *err)
{
    char at[32] = "";
    if (where >= 0)
        snprintf(at, sizeof at, "[%ld]", where);
    size_t m = json_array_size(a);
    if (m > (1u << 22))
        return BAD("prompt", "'prompt%s' has %zu ids", at, m);
    if (!(*ids = malloc(m * sizeof **ids)))
        return serve_err_set(err, 500, NULL, NULL, "out of memory");
    for (size_t i = 0; i < m; i++) {
        const json_t *v = json_array_get(a, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 0x7fffffff)
            return BAD("prompt", "prompt%s[%zu] is not a token id", at, i);
        (*ids)[i] = (int)json_integer_value(v);
    }
    *n = (int)m;
    return 0;
}

static int parse_prompt(serve_req *r, const json_t *p, serve_err *err)
{
    if (!p)
        return serve_err_set(err, 400, "prompt", "missing_required_parameter", "'prompt' is required");
    if (json_is_string(p)) {
        if (!(r->prompt = strndup(json_string_value(p), json_string_length(p))))
            return serve_err_set(err, 500, NULL, NULL, "out of memory");
        r->prompt_len = json_string_length(p);
        return 0;
    }
    if (!json_is_array(p))
        return BADTYPE("prompt", "a string or an array of token ids");
    size_t n = json_array_size(p);
    if (n == 1 && json_is_string(json_array_get(p, 0)))
        return parse_prompt(r, json_array_get(p, 0), err);
    if (n == 0)
        return BAD("prompt", "'prompt' is empty");
    const json_t *first = json_array_get(p, 0);
    if (!json_is_string(first) && !json_is_array(first))
        return parse_ids(p, -1, &r->prompt_ids, &r->n_prompt_ids, err);
    /* a list of prompts: strings or arrays of ids */
    if (n > SERVE_MAX_CHOICES)
        return BAD("prompt", "'prompt' lists %zu prompts; at most %d a request", n, SERVE_MAX_CHOICES);
    if (!(r->plist = calloc(n, sizeof *r->plist)))
        return serve_err_set(err, 500, NULL, NULL, "out of memory");
    r->n_plist = (int)n;
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(p, i);
        struct serve_prompt *q = &r->plist[i];
        if (json_is_string(v)) {
            if (!(q->text = strndup(json_string_value(v), json_string_length(v))))
                return serve_err_set(err, 500, NULL, NULL, "out of memory");
            q->len = json_string_length(v);
        } else if (!json_is_array(v) || !json_array_size(v)) {
            return BAD("prompt", "prompt[%zu] is neither a string nor an array of token ids", i);
        } else if (parse_ids(v, (long)i, &q->ids, &q->n_ids, err)) {
            return -1;
        }
    }
    return 0;
}

/* OpenAI fields whose meaning this server does not implement: refused when they ask for something (a
 * client would otherwise get an answer that silently ignores them), accepted when empty or neutral */
static int refuse_unsupported(const json_t *j, serve_err *err)
{
    const json_t *v = serve_field(j, "functions");
    if (v && !(json_is_array(v) && !json_array_size(v)))
        return serve_err_set(err, 400, "functions", "unsupported_parameter",
                             "'functions' is not supported by this server (use 'tools')");
    if ((v = serve_field(j, "suffix")) && !(json_is_string(v) && !json_string_length(v)))
        return serve_err_set(err, 400, "suffix", "unsupported_parameter", "'suffix' (insertion) is not supported");
    if ((v = serve_field(j, "best_of")) && !(json_is_integer(v) && json_integer_value(v) == 1))
        return serve_err_set(err, 400, "best_of", "unsupported_parameter", "'best_of': only 1 is supported");
    /* spoken answers (gpt-4o-audio's "audio": {"voice", "format"} beside "modalities": ["text", "audio"]) */
    if (serve_field(j, "audio"))
        return serve_err_set(err, 400, "audio", "unsupported_parameter",
                             "'audio' (spoken output) is not supported: this server answers with text only");
    if ((v = serve_field(j, "modalities"))) {
        size_t i;
        const json_t *m;
        if (!json_is_array(v))
            return BADTYPE("modalities", "an array of strings");
        json_array_foreach(v, i, m) if (!json_is_string(m) || strcmp(json_string_value(m), "text"))
            return serve_err_set(err, 400, "modalities", "unsupported_parameter",
                                 "'modalities'[%zu]: only \"text\" output is supported", i);
    }
    return 0;
}

/* response_format: text, or json_object (JSON mode); a schema needs a grammar this server lacks */
static int parse_format(serve_req *r, const json_t *v, serve_err *err)
{
    if (!v)
        return 0;
    const json_t *t = json_is_object(v) ? json_object_get(v, "type") : NULL;
    if (!json_is_string(t))
        return serve_err_set(err, 400, "response_format", "invalid_value",
                             "'response_format' must be an object with a string 'type'");
    const char *ty = json_string_value(t);
    if (!strcmp(ty, "json_object")) {
        r->json = 1;
    } else if (!strcmp(ty, "json_schema")) {
        /* {"type": "json_schema", "json_schema": {"name", "schema", "strict", "description"}} */
        const json_t *js = json_object_get(v, "json_schema"), *sch = json_object_get(js, "schema");
        if (!json_is_object(js) || !json_is_object(sch))
            return serve_err_set(err, 400, "response_format", "invalid_value",
                                 "'response_format.json_schema.schema' must be an object");
        char msg[256];
        if (!(r->schema = jg_schema_compile(sch, msg, sizeof msg)))
            return serve_err_set(err, 400, "response_format", "invalid_value", "%s", msg);
        r->schema_src = json_incref((json_t *)sch);
        if (!jg_schema_object(r->schema))
            return serve_err_set(err, 400, "response_format", "invalid_value",
                                 "json_schema: the schema must describe an object (JSON mode writes one object; an "
                                 "array or a scalar at the top is not supported)");
        r->json = 1;
    } else if (strcmp(ty, "text"))
        return BAD("response_format", "'response_format.type' is '%.64s', want 'text', 'json_object' or 'json_schema'", ty);
    return 0;
}

/* logit_bias: {"token id": bias in [-100, 100]}; the ids are checked against the model by the caller */
static int parse_bias(serve_req *r, const json_t *v, serve_err *err)
{
    if (!v)
        return 0;
    if (!json_is_object(v))
        return BADTYPE("logit_bias", "an object of token ids to numbers");
    size_t n = json_object_size(v);
    if (n > SERVE_MAX_BIAS)
        return BAD("logit_bias", "'logit_bias' has %zu entries, at most %d are accepted", n, SERVE_MAX_BIAS);
    if (!n)
        return 0;
    if (!(r->bias_ids = malloc(n * sizeof *r->bias_ids)) || !(r->bias = malloc(n * sizeof *r->bias)))
        return serve_err_set(err, 500, NULL, NULL, "out of memory");
    const char *k;
    const json_t *b;
    json_object_foreach((json_t *)v, k, b)
    {
        char *end;
        errno = 0;
        long id = strtol(k, &end, 10);
        if (!*k || *end || k[0] == '-' || k[0] == '+' || isspace((unsigned char)k[0]) || errno || id > INT32_MAX)
            return BAD("logit_bias", "'logit_bias': key '%.32s' is not a token id", k);
        if (!json_is_number(b))
            return BAD("logit_bias", "'logit_bias[\"%.32s\"]' must be a number", k);
        double x = json_number_value(b);
        if (!(x >= -100 && x <= 100))
            return BAD("logit_bias", "'logit_bias[\"%.32s\"]' is %g, want a number in [-100, 100]", k, x);
        r->bias_ids[r->n_bias] = (int)id, r->bias[r->n_bias++] = (float)x;
    }
    return 0;
}

int serve_req_parse(const char *body, size_t len, int kind, serve_req *r, serve_err *err)
{
    memset(r, 0, sizeof *r);
    r->kind = kind, r->temperature = 1.0, r->top_p = 1.0, r->logprobs = -1, r->n_choices = 1;
    json_error_t je;
    json_t *j = json_loadb(body, len, 0, &je); /* a key given twice: the last, as Python reads it */
    if (!j)
        return serve_json_error(err, &je);
    int rc = -1;
    if (!json_is_object(j)) {
        serve_err_set(err, 400, NULL, "invalid_json", "the body must be a JSON object");
        goto out;
    }
    if (refuse_unsupported(j, err) || parse_format(r, serve_field(j, "response_format"), err) ||
        parse_bias(r, serve_field(j, "logit_bias"), err) ||
        get_number(j, "presence_penalty", -2, 2, &r->presence_penalty, err) ||
        get_number(j, "frequency_penalty", -2, 2, &r->frequency_penalty, err))
        goto out;
    const json_t *v;
    if ((v = serve_field(j, "model"))) {
        if (!json_is_string(v)) {
            BADTYPE("model", "a string");
            goto out;
        }
        r->model = strdup(json_string_value(v));
    }
    if (kind == REQ_CHAT ? parse_messages(r, json_object_get(j, "messages"), err) ||
                               serve_tools_parse(r, serve_field(j, "tools"), serve_field(j, "tool_choice"), err)
                         : parse_prompt(r, serve_field(j, "prompt"), err))
        goto out;
    if (kind == REQ_CHAT && (v = serve_field(j, "chat_template_kwargs"))) {
        if (!json_is_object(v)) {
            BADTYPE("chat_template_kwargs", "an object");
            goto out;
        }
        if (json_object_get(v, "messages") || json_object_get(v, "tools")) {
            BAD("chat_template_kwargs", "'chat_template_kwargs' may not set 'messages' or 'tools' (give them as fields)");
            goto out;
        }
        r->tmpl_kwargs = json_deep_copy(v);
    }
    if (kind != REQ_CHAT && (v = serve_field(j, "tools")) && !(json_is_array(v) && !json_array_size(v))) {
        serve_err_set(err, 400, "tools", "unsupported_parameter", "'tools' needs /v1/chat/completions");
        goto out;
    }
    if (r->force_tool && r->json) {
        serve_err_set(err, 400, "tool_choice", "invalid_value", "a forced tool call and JSON mode cannot be asked together");
        goto out;
    }
    if ((v = serve_field(j, "parallel_tool_calls")) && !json_is_boolean(v)) {
        BADTYPE("parallel_tool_calls", "a boolean");
        goto out;
    }
    long long x = 0;
    /* max_tokens (completions and chat) or its newer chat name */
    const char *mt = kind == REQ_CHAT && serve_field(j, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    if (serve_field(j, mt)) { /* completions: 0 with echo scores the prompt alone (checked with echo below) */
        if (get_int(j, mt, kind == REQ_COMPLETION ? 0 : 1, SERVE_MAX_TOKENS, &x, err))
            goto out;
        r->max_tokens = (int)x;
        r->no_tokens = x == 0;
    }
    if (get_number(j, "temperature", 0, 100, &r->temperature, err) || get_number(j, "top_p", 0, 1, &r->top_p, err))
        goto out;
    x = 0;
    if (get_int(j, "top_k", -1, 1 << 24, &x, err)) /* -1: off, as vLLM and SGLang take it (as 0 is here) */
        goto out;
    r->top_k = x < 0 ? 0 : (int)x;
    if (serve_field(j, "seed")) {
        if (get_int(j, "seed", LLONG_MIN, LLONG_MAX, &x, err))
            goto out;
        r->has_seed = 1, r->seed = (uint64_t)x;
    }
    x = 1;
    if (get_int(j, "n", 1, SERVE_MAX_N, &x, err))
        goto out;
    r->n_choices = (int)x;
    if ((v = serve_field(j, "stop"))) {
        if (json_is_array(v)) {
            size_t i;
            const json_t *s;
            json_array_foreach(v, i, s) if (add_stop(r, s, err)) goto out;
        } else if (add_stop(r, v, err)) {
            goto out;
        }
    }
    if (get_bool(j, "stream", &r->stream, err) || get_bool(j, "return_tokens", &r->return_tokens, err) ||
        get_bool(j, "ignore_eos", &r->ignore_eos, err))
        goto out;
    if (kind == REQ_CHAT) {
        int lp = 0;
        if (get_bool(j, "logprobs", &lp, err))
            goto out;
        x = -1;
        if (get_int(j, "top_logprobs", 0, SERVE_MAX_TOP, &x, err))
            goto out;
        if (x >= 0 && !lp) {
            BAD("top_logprobs", "'top_logprobs' needs 'logprobs': true");
            goto out;
        }
        r->logprobs = lp ? (x < 0 ? 0 : (int)x) : -1;
    } else {
        x = -1;
        if (get_int(j, "logprobs", 0, SERVE_MAX_TOP, &x, err))
            goto out;
        r->logprobs = (int)x;
        if (get_bool(j, "echo", &r->echo, err))
            goto out;
        if (r->no_tokens && !r->echo) {
            BAD(mt, "'max_tokens' is 0, want an integer in [1, %d] (0 only with 'echo': the prompt scored alone)",
                SERVE_MAX_TOKENS);
            goto out;
        }
        /* echo with logprobs: the prompt's own tokens get theirs too (lm-evaluation-harness's loglikelihood) */
        r->score = r->echo && r->logprobs >= 0;
    }
    if ((v = serve_field(j, "stream_options")) && !json_is_object(v)) {
        BADTYPE("stream_options", "an object");
        goto out;
    }
    const json_t *iu = v ? json_object_get(v, "include_usage") : NULL;
    if (iu && !json_is_boolean(iu) && !json_is_null(iu)) {
        BADTYPE("stream_options.include_usage", "a boolean");
        goto out;
    }
    r->include_usage = json_is_true(iu);
    rc = 0;
out:
    json_decref(j);
    if (rc)
        serve_req_free(r);
    return rc;
}

void serve_req_trim(serve_req *r)
{
    json_array_clear(r->messages);
    json_object_clear(r->tmpl_kwargs);
    json_object_clear(r->schema_src);
    jg_schema_free(r->schema);
    r->schema = NULL;
    size_t i;
    json_t *t;
    json_array_foreach(r->tools, i, t)
    {
        json_t *name = json_object_get(json_object_get(t, "function"), "name");
        json_t *f = json_pack("{s:O}", "name", name);
        json_object_clear(t);
        json_object_set_new(t, "type", json_string("function"));
        json_object_set_new(t, "function", f ? f : json_object());
    }
}

void serve_req_free(serve_req *r)
{
    free(r->model), free(r->prompt), free(r->prompt_ids), free(r->bias_ids), free(r->bias), free(r->force_name);
    for (int i = 0; i < r->n_plist; i++)
        free(r->plist[i].text), free(r->plist[i].ids);
    free(r->plist);
    json_decref(r->messages);
    json_decref(r->tools);
    json_decref(r->tmpl_kwargs);
    jg_schema_free(r->schema);
    json_decref(r->schema_src);
    for (int i = 0; i < r->n_stops; i++)
        free(r->stops[i]);
    memset(r, 0, sizeof *r);
}
