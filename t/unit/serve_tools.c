/* Tool calls (lib/serve/tools.c): the request's tools and tool_choice, the conversation's earlier calls
 * normalised for templates, how much of a streamed answer may go out before a call could start, and the
 * answer's calls read back. Expected values are written by hand from OpenAI's shapes and the two written
 * forms (Hermes/Qwen <tool_call> blocks, Llama 3.x bare JSON), never produced by the code under test. */
#include <stdlib.h>
#include <string.h>

#include "serve/serve_int.h"
#include "tap.h"

static json_t *J(const char *s)
{
    json_error_t je;
    json_t *v = json_loads(s, JSON_DECODE_ANY, &je);
    if (!v)
        fprintf(stderr, "bad test JSON: %s\n", s);
    return v;
}

static const char *TOOLS = "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"d\","
                           "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}},"
                           "{\"type\":\"function\",\"function\":{\"name\":\"add-2\"}}]";

/* parse tools/tool_choice: rc, and on failure the param and a word of the message */
static void parse_case(const char *tools, const char *choice, int want_rc, int want_tools, const char *want_msg,
                       const char *what)
{
    serve_req r;
    memset(&r, 0, sizeof r);
    serve_err err;
    memset(&err, 0, sizeof err);
    json_t *t = tools ? J(tools) : NULL, *c = choice ? J(choice) : NULL;
    int rc = serve_tools_parse(&r, t, c, &err);
    int ok = rc == want_rc && (r.tools != NULL) == want_tools &&
             (!want_msg || (err.status == 400 && strstr(err.message, want_msg)));
    TAP_OK(ok, "%s", what);
    if (!ok)
        printf("#   rc %d tools %p status %d message '%s'\n", rc, (void *)r.tools, err.status, err.message);
    json_decref(t), json_decref(c), json_decref(r.tools);
    free(r.force_name);
}

/* extract: count, content, and the calls as name + arguments pairs "name(args);..." */
static void extract_case(const char *text, int want_n, const char *want_content, const char *want_calls,
                         const char *what)
{
    json_t *tools = J(TOOLS), *calls = NULL;
    size_t clen = 0;
    int n = serve_tools_extract(text, strlen(text), tools, &clen, &calls);
    char got[512] = "";
    size_t k;
    json_t *c;
    int ids_ok = 1;
    json_array_foreach(calls, k, c)
    {
        const json_t *f = json_object_get(c, "function");
        const char *id = json_string_value(json_object_get(c, "id"));
        ids_ok &= id && !strncmp(id, "call_", 5) && !strcmp(json_string_value(json_object_get(c, "type")), "function");
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s(%s);", json_string_value(json_object_get(f, "name")),
                 json_string_value(json_object_get(f, "arguments")));
    }
    int ok = n == want_n && clen == strlen(want_content) && !memcmp(text, want_content, clen) &&
             !strcmp(got, want_calls) && ids_ok;
    TAP_OK(ok, "%s", what);
    if (!ok)
        printf("#   n %d content '%.*s' calls '%s'\n", n, (int)clen, text, got);
    json_decref(calls), json_decref(tools);
}

static void hold_case(const char *text, size_t want, const char *what)
{
    size_t got = serve_tools_hold(text, strlen(text));
    TAP_OK(got == want, "%s (%zu, want %zu)", what, got, want);
}

int main(void)
{
    /* the request */
    parse_case(TOOLS, NULL, 0, 1, NULL, "two function tools are taken");
    parse_case(TOOLS, "\"auto\"", 0, 1, NULL, "tool_choice auto keeps them");
    parse_case(TOOLS, "\"none\"", 0, 0, NULL, "tool_choice none: rendered and read back without tools");
    parse_case("[]", NULL, 0, 0, NULL, "an empty list is no tools");
    parse_case(TOOLS, "\"required\"", 0, 1, NULL, "tool_choice required keeps the tools (a forced call)");
    parse_case(TOOLS, "{\"type\":\"function\",\"function\":{\"name\":\"add-2\"}}", 0, 1, NULL,
               "a named function of the tools is taken (a forced call)");
    parse_case(TOOLS, "{\"type\":\"function\",\"function\":{\"name\":\"add\"}}", -1, 0, "not among the request's tools",
               "a named function not among the tools is refused by name");
    parse_case(TOOLS, "{\"type\":\"function\"}", -1, 0, "as an object is", "a forced function without a name");
    parse_case(NULL, "\"required\"", -1, 0, "needs 'tools'", "tool_choice required without tools");
    parse_case("[]", "\"required\"", -1, 0, "needs 'tools'", "tool_choice required with an empty list");
    parse_case(NULL, "{\"type\":\"function\",\"function\":{\"name\":\"f\"}}", -1, 0, "not among",
               "a named function without tools");
    {
        serve_req r;
        serve_err err;
        memset(&r, 0, sizeof r);
        json_t *t = J(TOOLS), *c = J("{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}");
        int rc = serve_tools_parse(&r, t, c, &err);
        TAP_OK(!rc && r.force_tool && r.force_name && !strcmp(r.force_name, "get_weather"), "the forced name is kept");
        free(r.force_name);
        json_decref(r.tools);
        memset(&r, 0, sizeof r);
        json_decref(c);
        c = J("\"required\"");
        rc = serve_tools_parse(&r, t, c, &err);
        TAP_OK(!rc && r.force_tool && !r.force_name, "required: any of the tools");
        json_decref(r.tools), json_decref(t), json_decref(c);
    }
    parse_case(TOOLS, "\"sometimes\"", -1, 0, "'tool_choice' must be", "an unknown tool_choice is refused");
    parse_case("{\"type\":\"function\"}", NULL, -1, 0, "must be an array", "tools not an array");
    parse_case("[{\"type\":\"retrieval\"}]", NULL, -1, 0, "tools[0] is not", "a tool of another type");
    parse_case("[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]", NULL, -1, 0, "tools[0].function.name",
               "a name with a space");
    parse_case("[{\"type\":\"function\",\"function\":{\"name\":\"\"}}]", NULL, -1, 0, "tools[0].function.name",
               "an empty name");
    parse_case("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":[1]}}]", NULL, -1, 0,
               "parameters must be", "parameters that are not a schema object");
    parse_case("[{\"type\":\"function\",\"function\":{\"name\":\"f\"}},{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]",
               NULL, -1, 0, "given twice", "a name given twice");
    {
        char *big = malloc(200 * 64 + 16), *p = big;
        p += sprintf(p, "[");
        for (int i = 0; i < 129; i++)
            p += sprintf(p, "%s{\"type\":\"function\",\"function\":{\"name\":\"f%d\"}}", i ? "," : "", i);
        sprintf(p, "]");
        parse_case(big, NULL, -1, 0, "at most 128 tools", "129 tools are refused");
        free(big);
    }

    /* earlier calls in the conversation: arguments as objects for the template */
    {
        serve_err err;
        json_t *in = J("[{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
                       "\"arguments\":\"{\\\"city\\\": \\\"Oslo\\\"}\"}},"
                       "{\"function\":{\"name\":\"add-2\",\"arguments\":\"not json\"}},"
                       "{\"function\":{\"name\":\"add-2\"}}]");
        json_t *out = serve_tool_calls_norm(in, 3, &err);
        json_t *want = J("[{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
                         "\"arguments\":{\"city\":\"Oslo\"}}},"
                         "{\"type\":\"function\",\"function\":{\"name\":\"add-2\",\"arguments\":\"not json\"}},"
                         "{\"type\":\"function\",\"function\":{\"name\":\"add-2\",\"arguments\":{}}}]");
        TAP_OK(out && json_equal(out, want), "earlier calls: a JSON arguments string becomes its object, others stay, "
                                             "absent ones are {}");
        json_decref(in), json_decref(out), json_decref(want);
        in = J("[{\"function\":{\"arguments\":\"{}\"}}]");
        out = serve_tool_calls_norm(in, 2, &err);
        TAP_OK(!out && strstr(err.message, "messages[2].tool_calls[0]"), "an earlier call without a name: named error");
        json_decref(in);
        in = J("{\"function\":{}}");
        out = serve_tool_calls_norm(in, 1, &err);
        TAP_OK(!out && strstr(err.message, "messages[1].tool_calls must be an array"), "tool_calls not an array");
        json_decref(in);
    }

    /* streaming: what may go out before the answer is complete */
    hold_case("Hello there", 11, "plain text goes out whole");
    hold_case("Let me check. <tool_call>\n{\"name\"", 13, "text stops where a <tool_call> block opens (and the "
              "white space before it)");
    hold_case("Let me check. <tool_", 13, "an end that could open a block stays back");
    hold_case("One\n\n", 3, "trailing white space waits for what follows");
    hold_case("One\n\nTwo", 8, "and goes out with it");
    hold_case("a < b", 5, "a '<' that cannot open a block goes out");
    hold_case("a <", 1, "a trailing '<' stays back");
    hold_case("  ", 0, "white space alone: it could still become a JSON call");
    hold_case(" {\"name\": \"get_weather\"", 0, "an answer opening with '{' is held whole");
    hold_case("[{", 0, "an answer opening with '[' is held whole");
    hold_case("<|python", 0, "the start of Llama's python tag is held");

    /* the answer read back */
    extract_case("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>", 1, "",
                 "get_weather({\"city\":\"Oslo\"});", "one Hermes block");
    extract_case("I will look.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n"
                 "</tool_call>\n<tool_call>\n{\"name\": \"add-2\", \"arguments\": {}}\n</tool_call>\n",
                 2, "I will look.", "get_weather({\"city\":\"Oslo\"});add-2({});",
                 "text, then two blocks: content trimmed, both calls in order");
    extract_case("<tool_call>{\"name\": \"add-2\", \"arguments\": {\"x\": [1, 2]}}", 1, "", "add-2({\"x\":[1,2]});",
                 "a last block whose close never came (EOS first)");
    extract_case("<tool_call>{\"name\": \"add-2\", \"arguments\": \"{\\\"x\\\":1}\"}</tool_call>", 1, "",
                 "add-2({\"x\":1});", "arguments given as a string are passed on as that string");
    extract_case("<tool_call>{\"name\": \"delete_all\", \"arguments\": {}}</tool_call>", 0,
                 "<tool_call>{\"name\": \"delete_all\", \"arguments\": {}}</tool_call>", "",
                 "a call of a tool the request did not offer is text");
    extract_case("<tool_call>{\"name\": \"add-2\", \"arguments\": {}</tool_call>", 0,
                 "<tool_call>{\"name\": \"add-2\", \"arguments\": {}</tool_call>", "", "broken JSON in a block is text");
    extract_case("<tool_call>{\"name\": \"add-2\"} trailing</tool_call>", 0,
                 "<tool_call>{\"name\": \"add-2\"} trailing</tool_call>", "", "more than one value in a block is text");
    extract_case("<tool_call>{\"name\": \"add-2\"}</tool_call> and then words", 0,
                 "<tool_call>{\"name\": \"add-2\"}</tool_call> and then words", "", "words after the blocks: text");
    extract_case("{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}", 1, "",
                 "get_weather({\"city\":\"Rome\"});", "a bare Llama 3.x call with parameters");
    extract_case("<|python_tag|>{\"name\": \"add-2\", \"parameters\": {}}; {\"name\": \"get_weather\", \"parameters\": "
                 "{\"city\": \"A\"}}",
                 2, "", "add-2({});get_weather({\"city\":\"A\"});", "the python tag, two calls separated by ';'");
    extract_case("[{\"name\": \"add-2\", \"arguments\": {}}, {\"name\": \"add-2\", \"arguments\": {\"y\": 2}}]", 2, "",
                 "add-2({});add-2({\"y\":2});", "a JSON list of calls");
    extract_case("{\"city\": \"Oslo\"}", 0, "{\"city\": \"Oslo\"}", "", "a JSON answer that is no call is text");
    extract_case("{\"name\": \"add-2\"} is what I would call", 0, "{\"name\": \"add-2\"} is what I would call", "",
                 "a call followed by words is text");
    extract_case("[]", 0, "[]", "", "an empty list is text");
    extract_case("Just an answer.", 0, "Just an answer.", "", "plain text has no calls");
    {
        json_t *calls = NULL;
        size_t clen = 0;
        TAP_OK(serve_tools_extract("<tool_call>{\"name\":\"add-2\"}</tool_call>", 36, NULL, &clen, &calls) == 0 &&
                   !calls && clen == 36,
               "without tools nothing is read as a call");
    }
    /* a forced call as a program: the family's form, the allowed names */
    {
        serve_req r;
        memset(&r, 0, sizeof r);
        r.tools = J(TOOLS);
        static const struct {
            int hermes;
            const char *name, *text;
            int done;
        } pc[] = {
            {1, NULL, "<tool_call>\n{\"name\": \"add-2\", \"arguments\": {}}\n</tool_call>", 1},
            {1, NULL, "<tool_call>\n{\"name\": \"add-2\", \"arguments\": {\"x\": 1}}\n</tool_call>", 0}, /* no parameters: {} */
            {1, NULL, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>", 1},
            {0, NULL, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}", 1},
            {1, NULL, "{\"name\": \"get_weather\"", 0},                          /* not the Hermes form */
            {0, NULL, "<tool_call>", 0},                                          /* not the bare form */
            {1, "add-2", "<tool_call>\n{\"name\": \"get_weather\"", 0},           /* not the named one */
            {1, "add-2", "<tool_call>\n{\"name\": \"add-2\", \"arguments\": {}}\n</tool_call>", 1},
            {0, NULL, "{\"name\": \"get_weather\", \"parameters\": {}} ", 0}, /* nothing after */
        };
        for (size_t i = 0; i < sizeof pc / sizeof *pc; i++) {
            r.force_name = (char *)pc[i].name;
            jg_prog *p = serve_tools_program(&r, pc[i].hermes);
            jg_state st;
            jg_init_prog(&st, p);
            int all = jg_feed_bytes(&st, pc[i].text, strlen(pc[i].text));
            TAP_OK(p && all == pc[i].done && jg_done(&st) == pc[i].done, "forced call program %zu (%s form%s%s)", i,
                   pc[i].hermes ? "Hermes" : "bare", pc[i].name ? ", only " : "", pc[i].name ? pc[i].name : "");
            jg_prog_free(p);
        }
        json_decref(r.tools);
    }
    return TAP_DONE();
}
