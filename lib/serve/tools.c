/* Tool calls (OpenAI's "tools"): the request's tool list and the conversation's earlier calls checked and
 * put in the shape chat templates read (arguments as objects, as transformers' templates expect), and the
 * model's answer read back into "tool_calls". Two written forms are recognised, the ones the families'
 * templates ask for: <tool_call>{"name": ..., "arguments": {...}}</tool_call> blocks after optional text
 * (Qwen2.5, Qwen3, Hermes), and an answer that is one JSON call, or a list of them, alone
 * ({"name": ..., "parameters": {...}}: Llama 3.x). A call counts only when every block parses and names a
 * tool of the request; anything else is the answer's text, unchanged. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve_int.h"

#define MAX_TOOLS 128
static const char OPEN[] = "<tool_call>", CLOSE[] = "</tool_call>", PYTAG[] = "<|python_tag|>";

#define BAD(param, ...) serve_err_set(err, 400, param, "invalid_value", __VA_ARGS__)

int serve_tool_name_ok(const json_t *v)
{
    if (!json_is_string(v))
        return 0;
    size_t n = json_string_length(v);
    const char *s = json_string_value(v);
    if (n == 0 || n > 64)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') ||
              s[i] == '_' || s[i] == '-'))
            return 0;
    return 1;
}

/* tool_choice: "auto", "none", "required" (one call to any tool) or {"type": "function", "function":
 * {"name": NAME}} (one call to that tool); a forced call needs tools, and NAME must be one of them */
static int parse_choice(serve_req *r, const json_t *tools, const json_t *choice, serve_err *err)
{
    const char *c = json_string_value(choice);
    if (json_is_object(choice)) {
        const json_t *f = json_object_get(choice, "function"), *ty = json_object_get(choice, "type");
        const char *name = json_string_value(json_object_get(f, "name"));
        if (!json_is_string(ty) || strcmp(json_string_value(ty), "function") || !name)
            return BAD("tool_choice", "'tool_choice' as an object is {\"type\": \"function\", \"function\": {\"name\": ...}}");
        size_t i;
        const json_t *t;
        json_array_foreach(tools, i, t) if (!strcmp(json_string_value(json_object_get(json_object_get(t, "function"), "name")),
                                                    name)) break;
        if (!tools || i == json_array_size(tools))
            return BAD("tool_choice", "'tool_choice' names '%.64s', which is not among the request's tools", name);
        if (!(r->force_name = strdup(name)))
            return serve_err_set(err, 500, NULL, NULL, "out of memory");
        r->force_tool = 1;
        return 0;
    }
    if (!c || (strcmp(c, "auto") && strcmp(c, "none") && strcmp(c, "required")))
        return BAD("tool_choice", "'tool_choice' must be \"auto\", \"none\", \"required\" or an object");
    r->tools_off = !strcmp(c, "none");
    if (!strcmp(c, "required")) {
        if (!tools || !json_array_size(tools))
            return BAD("tool_choice", "'tool_choice' \"required\" needs 'tools'");
        r->force_tool = 1;
    }
    return 0;
}

int serve_tools_parse(serve_req *r, const json_t *tools, const json_t *choice, serve_err *err)
{
    if (!tools)
        return choice ? parse_choice(r, NULL, choice, err) : 0;
    if (!json_is_array(tools))
        return serve_err_set(err, 400, "tools", "invalid_type", "'tools' must be an array");
    if (json_array_size(tools) > MAX_TOOLS)
        return BAD("tools", "at most %d tools", MAX_TOOLS);
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t)
    {
        const json_t *f = json_object_get(t, "function"), *type = json_object_get(t, "type");
        if (!json_is_object(t) || !json_is_string(type) || strcmp(json_string_value(type), "function"))
            return BAD("tools", "tools[%zu] is not {\"type\": \"function\", \"function\": {...}}", i);
        if (!json_is_object(f) || !serve_tool_name_ok(json_object_get(f, "name")))
            return BAD("tools", "tools[%zu].function.name must be 1-64 letters, digits, '_' or '-'", i);
        const json_t *d = json_object_get(f, "description"), *p = json_object_get(f, "parameters");
        if (d && !json_is_null(d) && !json_is_string(d))
            return BAD("tools", "tools[%zu].function.description must be a string", i);
        if (p && !json_is_null(p) && !json_is_object(p))
            return BAD("tools", "tools[%zu].function.parameters must be a JSON Schema object", i);
        for (size_t k = 0; k < i; k++)
            if (json_equal(json_object_get(f, "name"),
                           json_object_get(json_object_get(json_array_get(tools, k), "function"), "name")))
                return BAD("tools", "tools[%zu]: the name '%s' is given twice", i,
                           json_string_value(json_object_get(f, "name")));
    }
    if (choice && parse_choice(r, tools, choice, err))
        return -1;
    if (json_array_size(tools) && !r->tools_off)
        r->tools = json_deep_copy(tools);
    return 0;
}

jg_prog *serve_tools_program(const serve_req *r, int hermes)
{
    const char *names[JG_MAX_NAMES];
    int n = 0;
    if (r->force_name) {
        names[n++] = r->force_name;
    } else {
        size_t i;
        const json_t *t;
        json_array_foreach(r->tools, i, t) if (n < JG_MAX_NAMES) names[n++] =
            json_string_value(json_object_get(json_object_get(t, "function"), "name"));
    }
    /* each tool's arguments schema, where it compiles to objects */
    jg_schema *schemas[JG_MAX_NAMES] = {0};
    for (int i = 0; i < n; i++) {
        size_t k;
        const json_t *t;
        json_array_foreach(r->tools, k, t)
        {
            const json_t *f = json_object_get(t, "function"), *params = json_object_get(f, "parameters");
            char msg[256];
            if (strcmp(json_string_value(json_object_get(f, "name")), names[i]) || (params && !json_is_object(params)))
                continue;
            /* without parameters, OpenAI's empty parameter list: the arguments are {} */
            json_t *none = params ? NULL : json_pack("{s:s,s:{}}", "type", "object", "properties");
            schemas[i] = params || none ? jg_schema_compile(params ? params : none, msg, sizeof msg) : NULL;
            json_decref(none);
            if (schemas[i] && !jg_schema_object(schemas[i])) {
                jg_schema_free(schemas[i]);
                schemas[i] = NULL;
            }
        }
    }
    jg_prog *p = jg_prog_new();
    int rc = !p || jg_prog_lit(p, hermes ? "<tool_call>\n{\"name\": \"" : "{\"name\": \"") || jg_prog_names(p, names, n) ||
             jg_prog_lit(p, hermes ? "\", \"arguments\": " : "\", \"parameters\": ");
    if (rc || (rc = jg_prog_schema_by_name(p, names, schemas, n))) /* on success the program owns them */
        for (int i = 0; i < n; i++)
            jg_schema_free(schemas[i]);
    rc = rc || jg_prog_lit(p, hermes ? "}\n</tool_call>" : "}");
    if (rc) {
        jg_prog_free(p);
        return NULL;
    }
    return p;
}

/* arguments for a template: the object a JSON string holds, or the value as given */
static json_t *arguments_value(const json_t *a)
{
    if (json_is_string(a)) {
        json_t *o = json_loadb(json_string_value(a), json_string_length(a), JSON_DECODE_ANY, NULL);
        if (json_is_object(o))
            return o;
        json_decref(o);
    }
    return a ? json_deep_copy(a) : json_object();
}

json_t *serve_tool_calls_norm(const json_t *calls, size_t i, serve_err *err)
{
    if (!json_is_array(calls)) {
        BAD("messages", "messages[%zu].tool_calls must be an array", i);
        return NULL;
    }
    if (json_array_size(calls) > SERVE_MAX_CALLS) {
        BAD("messages", "messages[%zu]: at most %d tool calls", i, SERVE_MAX_CALLS);
        return NULL;
    }
    json_t *out = json_array();
    size_t k;
    const json_t *c;
    json_array_foreach(calls, k, c)
    {
        const json_t *f = json_object_get(c, "function"), *id = json_object_get(c, "id"), *type = json_object_get(c, "type");
        const json_t *a = f ? json_object_get(f, "arguments") : NULL;
        if (!json_is_object(c) || !json_is_object(f) || !serve_tool_name_ok(json_object_get(f, "name")) ||
            (type && !json_is_null(type) && !(json_is_string(type) && !strcmp(json_string_value(type), "function"))) ||
            (id && !json_is_null(id) && !json_is_string(id)) || (a && !json_is_null(a) && !json_is_string(a) && !json_is_object(a))) {
            json_decref(out);
            BAD("messages", "messages[%zu].tool_calls[%zu] is not {\"id\": ..., \"type\": \"function\", \"function\": "
                "{\"name\": ..., \"arguments\": ...}}", i, k);
            return NULL;
        }
        json_t *n = json_pack("{s:s,s:{s:O,s:o}}", "type", "function", "function", "name", json_object_get(f, "name"),
                              "arguments", arguments_value(a && !json_is_null(a) ? a : NULL));
        if (json_is_string(id))
            json_object_set(n, "id", (json_t *)id);
        json_array_append_new(out, n);
    }
    return out;
}

/* ---- the answer ---- */

static int space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static const char *find(const char *s, size_t n, const char *w)
{
    return memmem(s, n, w, strlen(w));
}

/* the text starts (after white space) with what a bare JSON call would: '{', '[' or the python tag */
static int json_start(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n && space(s[i]))
        i++;
    if (i == n)
        return 1; /* nothing yet: it might */
    size_t m = n - i < strlen(PYTAG) ? n - i : strlen(PYTAG);
    return s[i] == '{' || s[i] == '[' || !memcmp(s + i, PYTAG, m);
}

size_t serve_tools_hold(const char *s, size_t n)
{
    if (json_start(s, n))
        return 0;
    const char *at = find(s, n, OPEN);
    size_t r = at ? (size_t)(at - s) : n;
    /* the longest end of the text that could be the marker's beginning stays back */
    for (size_t k = strlen(OPEN) - 1; !at && k > 0; k--)
        if (k <= n && !memcmp(s + n - k, OPEN, k)) {
            r = n - k;
            break;
        }
    /* and the white space before it: content before calls ends trimmed, streamed or not */
    while (r > 0 && space(s[r - 1]))
        r--;
    return r;
}

static int tool_known(const json_t *tools, const char *name)
{
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t) if (!strcmp(json_string_value(json_object_get(json_object_get(t, "function"), "name")),
                                                name)) return 1;
    return 0;
}

/* one call object ({"name", "arguments" | "parameters"}) into OpenAI's shape; -1 when it is not one */
static int add_call(json_t *calls, const json_t *o, const json_t *tools)
{
    const json_t *name = json_object_get(o, "name"), *a = json_object_get(o, "arguments");
    if (!a)
        a = json_object_get(o, "parameters");
    if (!json_is_object(o) || !json_is_string(name) || !tool_known(tools, json_string_value(name)) ||
        json_array_size(calls) >= SERVE_MAX_CALLS || (a && !json_is_object(a) && !json_is_string(a)))
        return -1;
    char *args = !a ? strdup("{}") : json_is_string(a) ? strdup(json_string_value(a)) : json_dumps(a, JSON_COMPACT);
    if (!args)
        return -1;
    char id[48];
    serve_new_id(id, sizeof id, "call_");
    json_array_append_new(calls, json_pack("{s:s,s:s,s:{s:O,s:s}}", "id", id, "type", "function", "function", "name",
                                           name, "arguments", args));
    free(args);
    return 0;
}

/* a JSON value from s[*i..n), *i moved past it; NULL when there is none */
static json_t *json_at(const char *s, size_t n, size_t *i)
{
    json_error_t je;
    json_t *v = json_loadb(s + *i, n - *i, JSON_DISABLE_EOF_CHECK, &je); /* an object or array: no byte past it read */
    if (v)
        *i += (size_t)je.position;
    return v;
}

static int add_value(json_t *calls, json_t *v, const json_t *tools)
{
    int rc = 0;
    if (json_is_array(v)) {
        size_t k;
        const json_t *o;
        if (!json_array_size(v))
            rc = -1;
        json_array_foreach(v, k, o) if (add_call(calls, o, tools)) rc = -1;
    } else {
        rc = add_call(calls, v, tools);
    }
    json_decref(v);
    return rc;
}

int serve_tools_extract(const char *s, size_t n, const json_t *tools, size_t *content_len, json_t **calls_out)
{
    *calls_out = NULL;
    *content_len = n;
    if (!tools || !n)
        return 0;
    json_t *calls = json_array();
    size_t i = 0, content = 0;
    const char *at = find(s, n, OPEN);
    if (at) { /* text, then <tool_call> JSON </tool_call> blocks (the last close may be missing: EOS came first) */
        content = (size_t)(at - s);
        i = content;
        while (i < n) {
            if (n - i < strlen(OPEN) || memcmp(s + i, OPEN, strlen(OPEN)))
                goto none;
            i += strlen(OPEN);
            const char *end = find(s + i, n - i, CLOSE);
            size_t e = end ? (size_t)(end - s) : n, k = 0;
            json_t *v = json_at(s + i, e - i, &k);
            if (!v || add_value(calls, v, tools))
                goto none;
            for (k += i; k < e && space(s[k]); k++)
                ;
            if (k != e)
                goto none;
            i = end ? e + strlen(CLOSE) : n;
            while (i < n && space(s[i]))
                i++;
        }
    } else { /* the whole answer one call, a list of calls, or calls separated by ';' */
        while (i < n && space(s[i]))
            i++;
        if (n - i >= strlen(PYTAG) && !memcmp(s + i, PYTAG, strlen(PYTAG)))
            i += strlen(PYTAG);
        while (i < n) {
            json_t *v = json_at(s, n, &i);
            if (!v || add_value(calls, v, tools))
                goto none;
            while (i < n && (space(s[i]) || s[i] == ';'))
                i++;
        }
    }
    if (!json_array_size(calls))
        goto none;
    while (content > 0 && space(s[content - 1]))
        content--;
    *content_len = content;
    *calls_out = calls;
    return (int)json_array_size(calls);
none:
    json_decref(calls);
    return 0;
}
