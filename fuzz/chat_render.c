/* Fuzz target: the chat-template renderer under its budget. The input is a template, optionally followed
 * by a NUL byte and a JSON object of template variables (else a fixed conversation). Rendered with
 * tok_jinja_render_with and a small budget (200k steps, 256 KiB of text, 32 MiB of memory) so that every
 * input is cheap; asserted: the render ends within 5 s of this thread's CPU time (whatever the
 * template does, the budget stops it; CPU time, so that a fuzzer paused or starved by the machine does
 * not report a slow render), a success returns a string of the length it reports within the text budget, and a failure has a
 * named error. Run with -rss_limit_mb (fuzz/README): a render that held more than its memory budget
 * would show up there. */
#include "fuzz.h"
#include "tok/tok.h"

#include <time.h>

static json_t *fixed;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    json_error_t je;
    fixed = json_loads("{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                       "{\"role\":\"user\",\"content\":\"Hi \\u00e9\\u4f60\"},"
                       "{\"role\":\"assistant\",\"content\":\"Hello.\",\"tool_calls\":[{\"type\":\"function\","
                       "\"function\":{\"name\":\"f\",\"arguments\":{\"a\":[1,2,{\"b\":null}]}}}]},"
                       "{\"role\":\"user\",\"content\":\"Bye\"}],"
                       "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
                       "\"add_generation_prompt\":true,\"bos_token\":\"<s>\",\"eos_token\":\"</s>\"}",
                       0, &je);
    if (!fixed) {
        fprintf(stderr, "chat_render: fixed context: %s\n", je.text);
        exit(4);
    }
    return 0;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t tn = nul ? (size_t)(nul - data) : size;
    char *src = malloc(tn + 1);
    if (!src)
        return 0;
    memcpy(src, data, tn);
    src[tn] = 0;
    json_t *vars = fixed;
    if (nul) {
        json_error_t je;
        vars = json_loadb((const char *)nul + 1, size - tn - 1, 0, &je);
        if (!json_is_object(vars)) {
            json_decref(vars);
            free(src);
            return 0;
        }
    }
    static const tok_jinja_limits lim = {.max_steps = 200000, .max_text = 256 << 10, .max_memory = 32 << 20};
    ogk_error e;
    e.msg[0] = 0;
    size_t len = 0;
    double t0 = now();
    char *out = tok_jinja_render_with(src, vars, &lim, &len, &e);
    double dt = now() - t0;
    FUZZ_CHECK(dt < 5.0);
    if (out) {
        FUZZ_CHECK(strlen(out) <= len && len <= lim.max_text);
        fuzz_touch(out, len);
        free(out);
    } else {
        FUZZ_CHECK(e.msg[0]);
    }
    if (vars != fixed)
        json_decref(vars);
    free(src);
    return 0;
}
