/* OpenAI's Responses API (POST /v1/responses) over the chat path: a request is read into a chat-completions
 * request (input items into messages, instructions first, text.format into response_format, flat function
 * tools into chat's), which runs as any chat request does; its answer (a chat.completion, or the chunks of
 * its stream) is then written as a response object, or as the Responses stream's typed events. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve_int.h"

struct serve_resp {
    char id[48];
    json_t *echo;     /* the settings every response object repeats */
    json_int_t created;
    char model[256];
    int seq;          /* the stream's sequence_number */
    int started;      /* response.created sent */
    json_t *output;   /* the stream's finished items */
    int cur;          /* the stream's open item: 0 none, 1 a message, 2 reasoning */
    char item_id[48];
    char *text;       /* ... and its text so far */
    size_t len;
    const char *finish; /* chat's finish_reason */
};

#define BAD(param, ...) serve_err_set(err, 400, param, "invalid_value", __VA_ARGS__)
#define UNSUPPORTED(param, ...) serve_err_set(err, 400, param, "unsupported_parameter", __VA_ARGS__)

static int is_type(const json_t *o, const char *type)
{
    const char *t = json_string_value(json_object_get(o, "type"));
    return t && !strcmp(t, type);
}

/* a message's content (or a function_call_output's output: what names it): a string, or text parts
 * (input_text, output_text; refusal where it is the assistant's) as chat's text parts; NULL with err filled */
static json_t *content_parts(const json_t *c, size_t i, const char *what, int assistant, serve_err *err)
{
    if (json_is_string(c))
        return json_incref((json_t *)c);
    if (!json_is_array(c)) {
        BAD("input", "input[%zu].%s must be a string or an array of content parts", i, what);
        return NULL;
    }
    json_t *out = json_array();
    size_t k;
    const json_t *p;
    json_array_foreach(c, k, p)
    {
        const char *type = json_string_value(json_object_get(p, "type"));
        int refusal = assistant && type && !strcmp(type, "refusal");
        const json_t *t = json_object_get(p, refusal ? "refusal" : "text");
        if (type && !refusal && strcmp(type, "input_text") && strcmp(type, "output_text")) {
            json_decref(out);
            BAD("input", "input[%zu].%s[%zu]: a part of type '%.64s' is not supported (this server reads text: "
                "input_text, output_text)", i, what, k, type);
            return NULL;
        }
        if (!json_is_object(p) || !type || !json_is_string(t)) {
            json_decref(out);
            BAD("input", "input[%zu].%s[%zu] must be {\"type\": \"input_text\", \"text\": a string}", i, what, k);
            return NULL;
        }
        json_array_append_new(out, refusal ? json_pack("{s:s,s:O}", "type", "refusal", "refusal", t)
                                           : json_pack("{s:s,s:O}", "type", "text", "text", t));
    }
    return out;
}

/* the input (a string, or an array of items) after the instructions, as chat messages; -1 with err filled */
static int input_messages(json_t *msgs, const json_t *input, serve_err *err)
{
    if (!input)
        return serve_err_set(err, 400, "input", "missing_required_parameter", "'input' is required");
    if (json_is_string(input)) {
        json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "user", "content", input));
        return 0;
    }
    if (!json_is_array(input))
        return serve_err_set(err, 400, "input", "invalid_type", "'input' must be a string or an array of input items");
    if (!json_array_size(input))
        return BAD("input", "'input' is empty");
    size_t i;
    const json_t *it;
    json_array_foreach(input, i, it)
    {
        if (!json_is_object(it))
            return BAD("input", "input[%zu] is not an object", i);
        const json_t *tv = serve_field(it, "type");
        const char *type = json_string_value(tv);
        if (tv && !type) /* no type is a message (EasyInputMessage); a type is a string */
            return serve_err_set(err, 400, "input", "invalid_type", "input[%zu].type must be a string", i);
        json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
        if (!type || !strcmp(type, "message")) {
            const char *role = json_string_value(json_object_get(it, "role"));
            if (!role || (strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "system") &&
                          strcmp(role, "developer")))
                return BAD("input", "input[%zu].role must be user, assistant, system or developer", i);
            json_t *c = content_parts(json_object_get(it, "content"), i, "content", !strcmp(role, "assistant"), err);
            if (!c)
                return -1;
            json_array_append_new(msgs, json_pack("{s:s,s:o}", "role", role, "content", c));
        } else if (!strcmp(type, "function_call")) {
            /* {call_id, name, arguments}: a tool call of the assistant's turn (the message before it, if the
             * assistant's, else one of its own) */
            const json_t *id = json_object_get(it, "call_id"), *name = json_object_get(it, "name"),
                         *args = json_object_get(it, "arguments");
            if (!json_is_string(id) || !json_is_string(name) || !json_is_string(args))
                return BAD("input", "input[%zu]: a function_call needs call_id, name and arguments (strings)", i);
            if (!serve_tool_name_ok(name))
                return BAD("input", "input[%zu].name must be 1-64 letters, digits, '_' or '-'", i);
            if (!last || strcmp(json_string_value(json_object_get(last, "role")), "assistant"))
                json_array_append_new(msgs, last = json_pack("{s:s,s:n}", "role", "assistant", "content"));
            if (!json_object_get(last, "tool_calls"))
                json_object_set_new(last, "tool_calls", json_array());
            if (json_array_size(json_object_get(last, "tool_calls")) == SERVE_MAX_CALLS)
                return BAD("input", "input[%zu]: at most %d function_call items in a row (one assistant turn)", i,
                           SERVE_MAX_CALLS);
            json_array_append_new(json_object_get(last, "tool_calls"),
                                  json_pack("{s:O,s:s,s:{s:O,s:O}}", "id", id, "type", "function", "function", "name",
                                            name, "arguments", args));
        } else if (!strcmp(type, "function_call_output")) {
            const json_t *id = json_object_get(it, "call_id"), *out = json_object_get(it, "output");
            json_t *c = json_is_string(id) && out ? content_parts(out, i, "output", 0, err) : NULL;
            if (!c)
                return json_is_string(id) && out ? -1
                                                  : BAD("input", "input[%zu]: a function_call_output needs call_id "
                                                                 "and output (strings)", i);
            json_array_append_new(msgs, json_pack("{s:s,s:O,s:o}", "role", "tool", "tool_call_id", id, "content", c));
        } else if (strcmp(type, "reasoning")) { /* earlier reasoning: dropped, as chat templates drop it */
            return BAD("input", "input[%zu]: an item of type '%.64s' is not supported (messages, function_call, "
                       "function_call_output)", i, type);
        }
    }
    return 0;
}

/* tools: flat function tools ({type, name, description, parameters, strict}) as chat's; -1 with err filled */
static int chat_tools(json_t *chat, const json_t *tools, const json_t *choice, serve_err *err)
{
    if (tools) {
        if (!json_is_array(tools))
            return serve_err_set(err, 400, "tools", "invalid_type", "'tools' must be an array");
        json_t *out = json_array();
        json_object_set_new(chat, "tools", out);
        size_t i;
        const json_t *t;
        json_array_foreach(tools, i, t)
        {
            const char *type = json_string_value(json_object_get(t, "type"));
            if (!type || strcmp(type, "function"))
                return UNSUPPORTED("tools", "tools[%zu]: a tool of type '%.64s' is not supported (function tools only)",
                                   i, type ? type : "(none)");
            json_t *f = json_object();
            static const char *const keys[] = {"name", "description", "parameters", "strict"};
            for (int k = 0; k < 4; k++)
                if (json_object_get(t, keys[k]))
                    json_object_set(f, keys[k], json_object_get(t, keys[k]));
            json_array_append_new(out, json_pack("{s:s,s:o}", "type", "function", "function", f));
        }
    }
    if (!choice || json_is_string(choice)) {
        if (choice)
            json_object_set(chat, "tool_choice", (json_t *)choice);
        return 0;
    }
    const json_t *name = json_object_get(choice, "name");
    if (!is_type(choice, "function") || !json_is_string(name))
        return UNSUPPORTED("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": "
                           "\"function\", \"name\": ...}");
    json_object_set_new(chat, "tool_choice", json_pack("{s:s,s:{s:O}}", "type", "function", "function", "name", name));
    return 0;
}

/* text.format as chat's response_format; -1 with err filled */
static int chat_format(json_t *chat, const json_t *text, serve_err *err)
{
    if (!text)
        return 0;
    const json_t *f = json_is_object(text) ? serve_field(text, "format") : NULL;
    if (!json_is_object(text) || (f && !json_is_object(f)))
        return serve_err_set(err, 400, "text", "invalid_type", "'text' must be an object {\"format\": {\"type\": ...}}");
    if (!f)
        return 0;
    if (!is_type(f, "json_schema")) { /* text, json_object (or a type chat names) */
        json_object_set(chat, "response_format", (json_t *)f);
        return 0;
    }
    json_t *js = json_object();
    static const char *const keys[] = {"name", "schema", "strict", "description"};
    for (int k = 0; k < 4; k++)
        if (json_object_get(f, keys[k]))
            json_object_set(js, keys[k], json_object_get(f, keys[k]));
    json_object_set_new(chat, "response_format", json_pack("{s:s,s:o}", "type", "json_schema", "json_schema", js));
    return 0;
}

/* characters of valid UTF-8 (what jansson holds): the bytes that do not continue one */
static size_t chars(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

/* fields that change what is asked, which this server cannot do: 400 naming the first */
static int refuse_unsupported(const json_t *j, serve_err *err)
{
    static const char *const named[] = {"previous_response_id", "conversation", "prompt", "reasoning", "max_tool_calls"};
    for (size_t k = 0; k < sizeof named / sizeof *named; k++)
        if (serve_field(j, named[k]))
            return UNSUPPORTED(named[k], "'%s' is not supported by this server", named[k]);
    /* chat's names: ignored, max_tokens would leave the answer unbounded, n or stop change it */
    static const char *const chat[][2] = {{"messages", "input"},
                                          {"max_tokens", "max_output_tokens"},
                                          {"max_completion_tokens", "max_output_tokens"},
                                          {"response_format", "text.format"},
                                          {"n", NULL},
                                          {"stop", NULL}};
    for (size_t k = 0; k < sizeof chat / sizeof *chat; k++)
        if (serve_field(j, chat[k][0]))
            return chat[k][1] ? UNSUPPORTED(chat[k][0], "'%s' is chat's; /v1/responses names it '%s'", chat[k][0], chat[k][1])
                              : UNSUPPORTED(chat[k][0], "'%s' is not supported on /v1/responses (use /v1/chat/completions)",
                                            chat[k][0]);
    const json_t *v;
    if ((v = serve_field(j, "store")) && !json_is_false(v))
        return UNSUPPORTED("store", "'store': this server keeps no responses (send \"store\": false)");
    if ((v = serve_field(j, "background")) && !json_is_false(v))
        return UNSUPPORTED("background", "'background' is not supported (the answer comes with the request)");
    if ((v = serve_field(j, "include")) && !(json_is_array(v) && !json_array_size(v)))
        return UNSUPPORTED("include", "'include' is not supported (nothing more than the output is kept)");
    if ((v = serve_field(j, "top_logprobs")) && !(json_is_integer(v) && json_integer_value(v) == 0))
        return UNSUPPORTED("top_logprobs", "'top_logprobs' is not supported on /v1/responses (use /v1/chat/completions)");
    if ((v = serve_field(j, "truncation")) && !(json_is_string(v) && !strcmp(json_string_value(v), "disabled")))
        return UNSUPPORTED("truncation", "'truncation': only \"disabled\" is supported");
    if ((v = serve_field(j, "instructions")) && !json_is_string(v))
        return serve_err_set(err, 400, "instructions", "invalid_type", "'instructions' must be a string");
    /* metadata (echoed in the response): OpenAI's bounds, up to 16 pairs, keys of <= 64 characters, string
     * values of <= 512 */
    if ((v = serve_field(j, "metadata"))) {
        if (!json_is_object(v))
            return serve_err_set(err, 400, "metadata", "invalid_type", "'metadata' must be an object of strings");
        if (json_object_size(v) > 16)
            return BAD("metadata", "'metadata' has %zu pairs; at most 16", json_object_size(v));
        const char *k;
        const json_t *x;
        json_object_foreach((json_t *)v, k, x)
        {
            if (chars(k, strlen(k)) > 64)
                return BAD("metadata", "a 'metadata' key is longer than 64 characters");
            if (!json_is_string(x))
                return BAD("metadata", "'metadata.%.64s' must be a string", k);
            if (chars(json_string_value(x), json_string_length(x)) > 512)
                return BAD("metadata", "'metadata.%.64s' is longer than 512 characters", k);
        }
    }
    return 0;
}

char *serve_resp_request(const char *body, size_t len, size_t *out_len, serve_resp **rs, serve_err *err)
{
    *rs = NULL;
    json_error_t je;
    json_t *j = json_loadb(body, len, 0, &je);
    if (!j) {
        serve_json_error(err, &je);
        return NULL;
    }
    char *out = NULL;
    json_t *chat = json_object(), *msgs = json_array();
    json_object_set_new(chat, "messages", msgs);
    if (!json_is_object(j)) {
        serve_err_set(err, 400, NULL, "invalid_json", "the body must be a JSON object");
        goto done;
    }
    const json_t *ins = serve_field(j, "instructions");
    if (refuse_unsupported(j, err))
        goto done;
    if (ins)
        json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "system", "content", ins));
    if (input_messages(msgs, serve_field(j, "input"), err) || chat_tools(chat, serve_field(j, "tools"), serve_field(j, "tool_choice"), err) ||
        chat_format(chat, serve_field(j, "text"), err))
        goto done;
    /* the rest as chat names it (chat checks the values) */
    static const char *const same[][2] = {{"model", "model"},
                                          {"max_output_tokens", "max_tokens"},
                                          {"temperature", "temperature"},
                                          {"top_p", "top_p"},
                                          {"stream", "stream"},
                                          {"parallel_tool_calls", "parallel_tool_calls"}};
    for (size_t k = 0; k < sizeof same / sizeof *same; k++)
        if (serve_field(j, same[k][0]))
            json_object_set(chat, same[k][1], json_object_get(j, same[k][0]));
    /* a stream ends with a chunk of the usage, which response.completed carries */
    if (json_is_true(serve_field(j, "stream")))
        json_object_set_new(chat, "stream_options", json_pack("{s:b}", "include_usage", 1));
    if (!(*rs = calloc(1, sizeof **rs)))
        goto oom;
    serve_resp *r = *rs;
    serve_new_id(r->id, sizeof r->id, "resp_");
    static const char *const echoed[] = {"instructions", "max_output_tokens", "temperature", "top_p",      "tools",
                                         "tool_choice",  "text",              "parallel_tool_calls", "metadata"};
    json_t *defaults = json_pack("{s:n,s:n,s:f,s:f,s:[],s:s,s:{s:{s:s}},s:b,s:{}}", "instructions", "max_output_tokens",
                                 "temperature", 1.0, "top_p", 1.0, "tools", "tool_choice", "auto", "text", "format",
                                 "type", "text", "parallel_tool_calls", 1, "metadata");
    r->echo = json_object();
    for (size_t k = 0; defaults && r->echo && k < sizeof echoed / sizeof *echoed; k++) {
        const json_t *v = serve_field(j, echoed[k]);
        json_object_set(r->echo, echoed[k], v ? (json_t *)v : json_object_get(defaults, echoed[k]));
    }
    json_decref(defaults);
    if (!r->echo || !(r->output = json_array()))
        goto oom;
    out = json_dumps(chat, JSON_COMPACT);
    if (!out)
        goto oom;
    *out_len = strlen(out);
    goto done;
oom:
    serve_err_set(err, 500, NULL, NULL, "out of memory");
    serve_resp_free(*rs), *rs = NULL;
done:
    json_decref(chat);
    json_decref(j);
    return out;
}

/* a chat-only level of the message's field name dropped, where `level` follows `at` (and an index after it):
 * "tools[0].function.name" is tools[0].name, "'text.format.json_schema.schema'" text.format.schema */
static void drop_level(char *msg, const char *at, const char *level)
{
    char *p = strstr(msg, at);
    if (!p)
        return;
    p += strlen(at);
    p += strspn(p, "0123456789]");
    size_t n = strlen(level);
    if (!strncmp(p, level, n))
        memmove(p, p + n, strlen(p + n) + 1);
}

void serve_resp_err(serve_err *err)
{
    static const char *const names[][2] = {
        {"messages", "input"}, {"response_format", "text.format"}, {"max_tokens", "max_output_tokens"}};
    if (err->param && !strcmp(err->param, "tools"))
        drop_level(err->message, "tools[", ".function");
    for (size_t k = 0; err->param && k < sizeof names / sizeof *names; k++) {
        if (strcmp(err->param, names[k][0]))
            continue;
        err->param = names[k][1];
        char was[32], *at; /* the message's 'name' (or 'name.member') too */
        size_t n = (size_t)snprintf(was, sizeof was, "'%s", names[k][0]);
        if (!(at = strstr(err->message, was)) || !strchr("'.[", at[n]))
            return;
        char rest[sizeof err->message];
        snprintf(rest, sizeof rest, "%s", at + n);
        snprintf(at, sizeof err->message - (size_t)(at - err->message), "'%s%s", names[k][1], rest);
        drop_level(err->message, "'text.format", ".json_schema");
        return;
    }
}

void serve_resp_free(serve_resp *rs)
{
    if (!rs)
        return;
    json_decref(rs->echo), json_decref(rs->output);
    free(rs->text);
    free(rs);
}

/* ---------------------------------------------------------------- the answer */

static json_t *usage_of(const json_t *u)
{
    if (!json_is_object(u))
        return json_null();
    json_int_t in = json_integer_value(json_object_get(u, "prompt_tokens")),
               out = json_integer_value(json_object_get(u, "completion_tokens")),
               cached = json_integer_value(json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens")),
               reasoning = json_integer_value(json_object_get(json_object_get(u, "completion_tokens_details"), "reasoning_tokens"));
    return json_pack("{s:I,s:{s:I},s:I,s:{s:I},s:I}", "input_tokens", in, "input_tokens_details", "cached_tokens",
                     cached, "output_tokens", out, "output_tokens_details", "reasoning_tokens", reasoning, "total_tokens",
                     in + out);
}

/* the response object: status in_progress (output so far), completed or incomplete (chat's finish
 * "length": the output's token limit or the context's end) */
static json_t *resp_object(serve_resp *rs, const char *status, json_t *output, json_t *usage)
{
    json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:b,s:n,s:n,s:s,s:o,s:n,s:{s:n,s:n},s:b,s:s,s:o,s:o}", "id", rs->id,
                          "object", "response", "created_at", rs->created, "status", status, "background", 0, "error",
                          "incomplete_details", "model", rs->model, "output", output, "previous_response_id",
                          "reasoning", "effort", "summary", "store", 0, "truncation", "disabled", "usage",
                          usage ? usage : json_null(), "metadata", json_object()); /* rs->echo's, below */
    if (!o)
        return NULL;
    json_object_update(o, rs->echo);
    if (!strcmp(status, "incomplete"))
        json_object_set_new(o, "incomplete_details", json_pack("{s:s}", "reason", "max_output_tokens"));
    return o;
}

static const char *final_status(const char *finish) { return finish && !strcmp(finish, "length") ? "incomplete" : "completed"; }

static json_t *message_item(const char *id, const char *status, const char *text, size_t n)
{
    return json_pack("{s:s,s:s,s:s,s:s,s:[{s:s,s:[],s:[],s:s%}]}", "id", id, "type", "message", "status", status,
                     "role", "assistant", "content", "type", "output_text", "annotations", "logprobs", "text", text, n);
}

static json_t *reasoning_item(const char *id, const char *text, size_t n)
{
    return json_pack("{s:s,s:s,s:[],s:[{s:s,s:s%}]}", "id", id, "type", "reasoning", "summary", "content", "type",
                     "reasoning_text", "text", text, n);
}

/* chat's tool_calls as function_call items */
static void call_items(json_t *output, const json_t *calls)
{
    size_t k;
    const json_t *c;
    json_array_foreach(calls, k, c)
    {
        const json_t *f = json_object_get(c, "function");
        char id[48];
        serve_new_id(id, sizeof id, "fc_");
        json_array_append_new(output, json_pack("{s:s,s:s,s:s,s:O,s:O,s:O}", "id", id, "type", "function_call",
                                                "status", "completed", "call_id", json_object_get(c, "id"), "name",
                                                json_object_get(f, "name"), "arguments", json_object_get(f, "arguments")));
    }
}

/* the text of all output_text parts (the SDKs' output_text) */
static json_t *output_text(const json_t *output)
{
    json_t *s = json_string("");
    size_t i;
    const json_t *it;
    json_array_foreach(output, i, it) if (is_type(it, "message"))
    {
        const char *t = json_string_value(json_object_get(json_array_get(json_object_get(it, "content"), 0), "text"));
        size_t a = json_string_length(s), b = t ? strlen(t) : 0;
        char *all = malloc(a + b + 1);
        if (all) {
            memcpy(all, json_string_value(s), a), memcpy(all + a, t ? t : "", b);
            json_string_setn(s, all, a + b);
        }
        free(all);
    }
    return s;
}

json_t *serve_resp_answer(serve_resp *rs, json_t *chat)
{
    const json_t *choice = json_array_get(json_object_get(chat, "choices"), 0), *msg = json_object_get(choice, "message");
    const json_t *content = json_object_get(msg, "content"), *reasoning = json_object_get(msg, "reasoning_content"),
                 *calls = json_object_get(msg, "tool_calls");
    const char *finish = json_string_value(json_object_get(choice, "finish_reason"));
    rs->created = json_integer_value(json_object_get(chat, "created"));
    snprintf(rs->model, sizeof rs->model, "%s", json_string_value(json_object_get(chat, "model")));
    const char *status = final_status(finish);
    json_t *output = json_array();
    char id[48];
    /* as the stream has them: items of what was written, a message with no text only as the sole item */
    if (json_string_length(reasoning)) {
        serve_new_id(id, sizeof id, "rs_");
        json_array_append_new(output, reasoning_item(id, json_string_value(reasoning), json_string_length(reasoning)));
    }
    if (json_string_length(content) || (!json_array_size(output) && !json_array_size(calls))) {
        serve_new_id(id, sizeof id, "msg_");
        json_array_append_new(output, message_item(id, status, json_string_value(content) ? json_string_value(content) : "",
                                                   json_string_length(content)));
    }
    call_items(output, calls);
    json_t *text = output_text(output);
    json_t *o = resp_object(rs, status, output, usage_of(json_object_get(chat, "usage")));
    if (o)
        json_object_set_new(o, "output_text", text);
    else
        json_decref(text);
    json_decref(chat);
    return o;
}

/* ---------------------------------------------------------------- the stream */

/* one event (ev taken) onto f: "event: TYPE" and its data, which carries type and sequence_number */
static void emit(serve_resp *rs, FILE *f, const char *type, json_t *ev)
{
    json_t *e = json_pack("{s:s,s:i}", "type", type, "sequence_number", rs->seq++);
    json_object_update(e, ev);
    json_decref(ev);
    char *s = json_dumps(e, JSON_COMPACT);
    json_decref(e);
    if (s)
        fprintf(f, "event: %s\ndata: %s\n\n", type, s);
    free(s);
}

static int out_index(const serve_resp *rs) { return (int)json_array_size(rs->output); }

static void item_added(serve_resp *rs, FILE *f, json_t *item)
{
    emit(rs, f, "response.output_item.added", json_pack("{s:i,s:o}", "output_index", out_index(rs), "item", item));
}

static void item_done(serve_resp *rs, FILE *f, json_t *item)
{
    emit(rs, f, "response.output_item.done", json_pack("{s:i,s:O}", "output_index", out_index(rs), "item", item));
    json_array_append_new(rs->output, item);
}

/* open an item of kind k (1 a message, 2 reasoning) */
static void open_item(serve_resp *rs, FILE *f, int k)
{
    rs->cur = k, rs->len = 0;
    serve_new_id(rs->item_id, sizeof rs->item_id, k == 1 ? "msg_" : "rs_");
    if (k == 2) { /* its text is a content part too, as a message's is (the SDKs' stream readers add deltas to it) */
        item_added(rs, f, json_pack("{s:s,s:s,s:[],s:[]}", "id", rs->item_id, "type", "reasoning", "summary", "content"));
        emit(rs, f, "response.content_part.added",
             json_pack("{s:s,s:i,s:i,s:{s:s,s:s}}", "item_id", rs->item_id, "output_index", out_index(rs),
                       "content_index", 0, "part", "type", "reasoning_text", "text", ""));
        return;
    }
    item_added(rs, f, json_pack("{s:s,s:s,s:s,s:s,s:[]}", "id", rs->item_id, "type", "message", "status", "in_progress",
                                "role", "assistant", "content"));
    emit(rs, f, "response.content_part.added",
         json_pack("{s:s,s:i,s:i,s:{s:s,s:[],s:[],s:s}}", "item_id", rs->item_id, "output_index", out_index(rs),
                   "content_index", 0, "part", "type", "output_text", "annotations", "logprobs", "text", ""));
}

static void close_item(serve_resp *rs, FILE *f, const char *status)
{
    const char *t = rs->text ? rs->text : "";
    if (rs->cur == 2) {
        emit(rs, f, "response.reasoning_text.done", json_pack("{s:s,s:i,s:i,s:s%}", "item_id", rs->item_id, "output_index",
                                                              out_index(rs), "content_index", 0, "text", t, rs->len));
        emit(rs, f, "response.content_part.done",
             json_pack("{s:s,s:i,s:i,s:{s:s,s:s%}}", "item_id", rs->item_id, "output_index", out_index(rs),
                       "content_index", 0, "part", "type", "reasoning_text", "text", t, rs->len));
        item_done(rs, f, reasoning_item(rs->item_id, t, rs->len));
    } else if (rs->cur == 1) {
        emit(rs, f, "response.output_text.done",
             json_pack("{s:s,s:i,s:i,s:s%,s:[]}", "item_id", rs->item_id, "output_index", out_index(rs), "content_index",
                       0, "text", t, rs->len, "logprobs"));
        emit(rs, f, "response.content_part.done",
             json_pack("{s:s,s:i,s:i,s:{s:s,s:[],s:[],s:s%}}", "item_id", rs->item_id, "output_index", out_index(rs),
                       "content_index", 0, "part", "type", "output_text", "annotations", "logprobs", "text", t, rs->len));
        item_done(rs, f, message_item(rs->item_id, status, t, rs->len));
    }
    rs->cur = 0, rs->len = 0;
}

/* text of the open item (kind k), sent as a delta */
static void add_text(serve_resp *rs, FILE *f, int k, const json_t *s)
{
    size_t n = json_string_length(s);
    if (!n)
        return;
    if (rs->cur != k) {
        close_item(rs, f, "completed");
        open_item(rs, f, k);
    }
    char *t = realloc(rs->text, rs->len + n + 1);
    if (!t)
        return;
    memcpy(t + rs->len, json_string_value(s), n);
    rs->text = t, rs->len += n, t[rs->len] = 0;
    emit(rs, f, k == 1 ? "response.output_text.delta" : "response.reasoning_text.delta",
         json_pack(k == 1 ? "{s:s,s:i,s:i,s:O,s:[]}" : "{s:s,s:i,s:i,s:O}", "item_id", rs->item_id, "output_index",
                   out_index(rs), "content_index", 0, "delta", s, "logprobs"));
}

static void stream_calls(serve_resp *rs, FILE *f, const json_t *calls)
{
    close_item(rs, f, "completed");
    json_t *items = json_array();
    call_items(items, calls);
    size_t k;
    json_t *it;
    json_array_foreach(items, k, it)
    {
        const char *id = json_string_value(json_object_get(it, "id"));
        json_t *open = json_deep_copy(it);
        json_object_set_new(open, "status", json_string("in_progress"));
        json_object_set_new(open, "arguments", json_string(""));
        item_added(rs, f, open);
        emit(rs, f, "response.function_call_arguments.delta",
             json_pack("{s:s,s:i,s:O}", "item_id", id, "output_index", out_index(rs), "delta",
                       json_object_get(it, "arguments")));
        emit(rs, f, "response.function_call_arguments.done",
             json_pack("{s:s,s:i,s:O,s:O}", "item_id", id, "output_index", out_index(rs), "name",
                       json_object_get(it, "name"), "arguments", json_object_get(it, "arguments")));
        item_done(rs, f, json_incref(it));
    }
    json_decref(items);
}

char *serve_resp_events(serve_resp *rs, json_t *chunk)
{
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    if (!f) {
        json_decref(chunk);
        return NULL;
    }
    const json_t *error = json_object_get(chunk, "error");
    if (!rs->started) {
        rs->started = 1;
        rs->created = json_integer_value(json_object_get(chunk, "created"));
        snprintf(rs->model, sizeof rs->model, "%s", json_string_value(json_object_get(chunk, "model")));
        if (!rs->created)
            rs->created = (json_int_t)time(NULL);
        emit(rs, f, "response.created", json_pack("{s:o}", "response", resp_object(rs, "in_progress", json_array(), NULL)));
        emit(rs, f, "response.in_progress",
             json_pack("{s:o}", "response", resp_object(rs, "in_progress", json_array(), NULL)));
    }
    if (error) { /* the generation failed: error, then response.failed */
        emit(rs, f, "error", json_pack("{s:O,s:O,s:O}", "code", json_object_get(error, "code"), "message",
                                       json_object_get(error, "message"), "param", json_object_get(error, "param")));
        json_t *o = resp_object(rs, "failed", json_deep_copy(rs->output), NULL);
        json_object_set_new(o, "error", json_pack("{s:O,s:O}", "code", json_object_get(error, "code"), "message",
                                                  json_object_get(error, "message")));
        emit(rs, f, "response.failed", json_pack("{s:o}", "response", o));
    }
    const json_t *choice = json_array_get(json_object_get(chunk, "choices"), 0), *delta = json_object_get(choice, "delta");
    const json_t *v;
    if ((v = json_object_get(delta, "reasoning_content")) && json_is_string(v))
        add_text(rs, f, 2, v);
    if ((v = json_object_get(delta, "content")) && json_is_string(v))
        add_text(rs, f, 1, v);
    if ((v = json_object_get(delta, "tool_calls")))
        stream_calls(rs, f, v);
    if ((v = json_object_get(choice, "finish_reason")) && json_is_string(v)) {
        rs->finish = !strcmp(json_string_value(v), "length") ? "length" : "stop";
        close_item(rs, f, final_status(rs->finish));
        if (!json_array_size(rs->output)) { /* no text and no call: an empty message, as the whole answer has */
            open_item(rs, f, 1);
            close_item(rs, f, final_status(rs->finish));
        }
    }
    if ((v = json_object_get(chunk, "usage")) && json_is_object(v)) { /* the last chunk */
        const char *status = final_status(rs->finish);
        json_t *o = resp_object(rs, status, json_deep_copy(rs->output), usage_of(v));
        emit(rs, f, !strcmp(status, "completed") ? "response.completed" : "response.incomplete",
             json_pack("{s:o}", "response", o));
    }
    json_decref(chunk);
    if (fclose(f)) {
        free(buf);
        return NULL;
    }
    return buf;
}
