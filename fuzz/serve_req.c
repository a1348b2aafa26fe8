/* Fuzz target: the input is an HTTP request body for /v1/completions (first byte even) or
 * /v1/chat/completions (odd), the rest of the bytes. serve_req_parse either accepts it, and then
 * every field is in its documented range (logit_bias, penalties, JSON mode included) and the prompt is
 * there in the kind's form, or refuses it
 * with a 4xx/5xx in OpenAI's error shape (a message and a type). */
#include "fuzz.h"
#include "serve/serve_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int kind = data[0] & 1 ? REQ_CHAT : REQ_COMPLETION;
    serve_req r;
    serve_err err;
    memset(&err, 0, sizeof err);
    if (serve_req_parse((const char *)data + 1, size - 1, kind, &r, &err)) {
        FUZZ_CHECK(err.status >= 400 && err.status < 600);
        FUZZ_CHECK(err.message[0] && err.type);
        return 0;
    }
    FUZZ_CHECK(r.kind == kind);
    FUZZ_CHECK(r.max_tokens >= 0 && r.max_tokens <= SERVE_MAX_TOKENS);
    FUZZ_CHECK(r.temperature >= 0 && r.temperature <= 100 && r.top_p >= 0 && r.top_p <= 1 && r.top_k >= 0);
    FUZZ_CHECK(r.logprobs >= -1 && r.logprobs <= SERVE_MAX_TOP);
    FUZZ_CHECK(r.n_stops >= 0 && r.n_stops <= SERVE_MAX_STOPS);
    for (int i = 0; i < r.n_stops; i++)
        FUZZ_CHECK(r.stops[i] && r.stops[i][0]);
    FUZZ_CHECK(r.json == 0 || r.json == 1);
    FUZZ_CHECK(!r.schema || (r.json && jg_schema_object(r.schema)));
    FUZZ_CHECK(!r.tmpl_kwargs || (kind == REQ_CHAT && json_is_object(r.tmpl_kwargs) &&
                                  !json_object_get(r.tmpl_kwargs, "messages") && !json_object_get(r.tmpl_kwargs, "tools")));
    FUZZ_CHECK(!r.force_tool || (r.tools && !r.json));
    FUZZ_CHECK(!r.force_name || r.force_tool);
    FUZZ_CHECK(r.n_bias >= 0 && r.n_bias <= SERVE_MAX_BIAS && (!r.n_bias || (r.bias_ids && r.bias)));
    for (int i = 0; i < r.n_bias; i++)
        FUZZ_CHECK(r.bias_ids[i] >= 0 && r.bias[i] >= -100 && r.bias[i] <= 100);
    FUZZ_CHECK(r.presence_penalty >= -2 && r.presence_penalty <= 2 && r.frequency_penalty >= -2 &&
               r.frequency_penalty <= 2);
    if (kind == REQ_CHAT) {
        FUZZ_CHECK(json_is_array(r.messages) && json_array_size(r.messages) > 0);
        size_t i;
        json_t *m;
        json_array_foreach(r.messages, i, m)
        {
            FUZZ_CHECK(json_is_string(json_object_get(m, "role")) && json_is_string(json_object_get(m, "content")));
            const json_t *calls = json_object_get(m, "tool_calls"), *c;
            size_t k;
            FUZZ_CHECK(!calls || json_is_array(calls));
            json_array_foreach(calls, k, c)
            {
                const json_t *f = json_object_get(c, "function");
                FUZZ_CHECK(json_is_string(json_object_get(f, "name")) && json_object_get(f, "arguments"));
            }
        }
        /* tools: a non-empty list of named functions (none with tool_choice "none") */
        FUZZ_CHECK(!r.tools || (json_is_array(r.tools) && json_array_size(r.tools) > 0 && json_array_size(r.tools) <= 128 &&
                                !r.tools_off));
        json_array_foreach(r.tools, i, m)
            FUZZ_CHECK(json_string_length(json_object_get(json_object_get(m, "function"), "name")) > 0);
        FUZZ_CHECK(!r.prompt && !r.prompt_ids && !r.echo);
    } else {
        /* one prompt (text or ids), or a list of 1..SERVE_MAX_CHOICES, each text or a non-empty list of ids */
        FUZZ_CHECK(!r.messages && !r.tools && (!!r.prompt + !!r.prompt_ids + !!r.plist) == 1);
        FUZZ_CHECK(!r.plist || (r.n_plist >= 1 && r.n_plist <= SERVE_MAX_CHOICES));
        for (int i = 0; i < r.n_prompt_ids; i++)
            FUZZ_CHECK(r.prompt_ids[i] >= 0);
        for (int p = 0; p < r.n_plist; p++) {
            FUZZ_CHECK(!!r.plist[p].text + !!r.plist[p].ids == 1 && (!r.plist[p].ids || r.plist[p].n_ids > 0));
            for (int i = 0; i < r.plist[p].n_ids; i++)
                FUZZ_CHECK(r.plist[p].ids[i] >= 0);
        }
        /* echo with logprobs scores the prompt; max_tokens 0 only with echo */
        FUZZ_CHECK(r.score == (r.echo && r.logprobs >= 0) && (!r.no_tokens || r.echo));
    }
    serve_req_free(&r);
    return 0;
}
