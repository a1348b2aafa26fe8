/* Fuzz target: the input is a chat template. tok_jinja_render with a fixed context like the one
 * npu-forward chat builds (system/user/assistant messages, a tool call, tools, bos/eos tokens,
 * add_generation_prompt). A render either returns a string of the length it reports or fails with a
 * named error. */
#include "fuzz.h"
#include "tok/tok.h"

static json_t *vars;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    json_error_t je;
    vars = json_loads(
        "{\"messages\":["
        "{\"role\":\"system\",\"content\":\"You are terse.\"},"
        "{\"role\":\"user\",\"content\":\"Hello <b>&</b> \\u00e9\\u4f60\\ud83d\\ude00\"},"
        "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"type\":\"function\",\"function\":"
        "{\"name\":\"get_time\",\"arguments\":{\"tz\":\"UTC\",\"n\":3}}}]},"
        "{\"role\":\"tool\",\"content\":\"12:00\"},"
        "{\"role\":\"assistant\",\"content\":\"<think>\\nhm\\n</think>\\n\\nIt is noon.\"},"
        "{\"role\":\"user\",\"content\":\"Thanks!\"}],"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"description\":\"Time now\","
        "\"parameters\":{\"type\":\"object\",\"properties\":{\"tz\":{\"type\":\"string\"}},\"required\":[\"tz\"]}}}],"
        "\"add_generation_prompt\":true,\"enable_thinking\":false,"
        "\"bos_token\":\"<|begin_of_text|>\",\"eos_token\":\"<|im_end|>\",\"date_string\":\"01 Jun 2024\"}",
        0, &je);
    if (!vars) {
        fprintf(stderr, "jinja: fixed context: %s\n", je.text);
        exit(4);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *src = malloc(size + 1);
    if (!src)
        return 0;
    memcpy(src, data, size);
    src[size] = 0;
    ogk_error e;
    e.msg[0] = 0;
    size_t len = 0;
    char *out = tok_jinja_render(src, vars, &len, &e);
    if (out) {
        FUZZ_CHECK(strlen(out) <= len);
        fuzz_touch(out, len);
        free(out);
    } else {
        FUZZ_CHECK(e.msg[0]);
    }
    free(src);
    return 0;
}
