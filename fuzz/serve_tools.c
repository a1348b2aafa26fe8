/* Fuzz target: the input is a model's answer to a chat request with tools (the model's text can be steered
 * by whoever writes the prompt). serve_tools_extract either finds no call (the whole text is content) or
 * calls that each name a tool of the request, with an id, type "function" and arguments as a string; the
 * content before them is a prefix of the text. serve_tools_hold, over every prefix of the answer as a
 * stream sees it, never goes back, never passes the prefix, and never releases text beyond the content
 * the complete answer is read as (what streams out is what the answer in one piece says). */
#include "fuzz.h"
#include "serve/serve_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static json_t *tools;
    if (!tools)
        tools = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}},"
                           "{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]",
                           0, NULL);
    const char *s = (const char *)data;
    size_t content = 0;
    json_t *calls = NULL;
    int n = serve_tools_extract(s, size, tools, &content, &calls);
    FUZZ_CHECK(n >= 0 && content <= size);
    if (n == 0) {
        FUZZ_CHECK(!calls && content == size);
    } else {
        FUZZ_CHECK(json_is_array(calls) && json_array_size(calls) == (size_t)n);
        size_t i;
        json_t *c;
        json_array_foreach(calls, i, c)
        {
            const char *name = json_string_value(json_object_get(json_object_get(c, "function"), "name"));
            FUZZ_CHECK(name && (!strcmp(name, "get_weather") || !strcmp(name, "f")));
            FUZZ_CHECK(json_is_string(json_object_get(json_object_get(c, "function"), "arguments")));
            FUZZ_CHECK(json_is_string(json_object_get(c, "id")) && json_is_string(json_object_get(c, "type")));
        }
    }
    size_t last = 0;
    for (size_t k = 0; k <= size; k++) {
        size_t r = serve_tools_hold(s, k);
        FUZZ_CHECK(r >= last && r <= k);
        if (n)
            FUZZ_CHECK(r <= content);
        last = r;
    }
    json_decref(calls);
    return 0;
}
