/* Reasoning split (lib/serve/think.c): hand-written splits of whole answers, and over every prefix of an
 * answer as a stream sees it, what may go out is never more than, and always agrees with, the split of the
 * whole answer. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "serve/serve_int.h"
#include "tap.h"

#define NONE SIZE_MAX

static void split_case(const char *s, int open, int final, int decided, int has, const char *reasoning, size_t c0,
                       const char *what)
{
    serve_think t;
    serve_think_split(s, strlen(s), open, final, &t);
    int ok = t.decided == decided && t.has == has && t.c0 == c0 &&
             (!has || (t.r1 - t.r0 == strlen(reasoning) && !memcmp(s + t.r0, reasoning, t.r1 - t.r0)));
    TAP_OK(ok, "%s", what);
    if (!ok)
        printf("#   decided %d has %d r [%zu, %zu) c0 %zu\n", t.decided, t.has, t.r0, t.r1, t.c0);
}

static void stream_property(const char *s, int open)
{
    size_t n = strlen(s);
    serve_think w;
    serve_think_split(s, n, open, 1, &w);
    int ok = 1;
    size_t last_r1 = 0;
    for (size_t k = 0; k <= n; k++) {
        serve_think t;
        serve_think_split(s, k, open, 0, &t);
        if (!t.decided) {
            ok &= t.c0 == 0 && !t.has; /* nothing known: nothing released */
            continue;
        }
        ok &= t.has == w.has;
        if (t.has) {
            ok &= t.r0 == w.r0 && t.r1 <= w.r1 && t.r1 >= last_r1;
            last_r1 = t.r1;
        }
        ok &= t.c0 == NONE || t.c0 == w.c0;
    }
    char shown[48];
    snprintf(shown, sizeof shown, "%s", s);
    for (char *c = shown; *c; c++)
        *c = *c == '\n' ? '|' : *c;
    TAP_OK(ok, "streamed (open %d): every prefix's split agrees with the whole's: %s", open, shown);
}

int main(void)
{
    split_case("hello", 0, 1, 1, 0, NULL, 0, "no block: all content");
    split_case("  <think>abc</think>\n\nhello", 0, 1, 1, 1, "abc", 22, "a block after white space, content after its end");
    split_case("<think>abc", 0, 1, 1, 1, "abc", 10, "a block cut short: all reasoning, no content");
    split_case("<thi", 0, 0, 0, 0, NULL, 0, "streamed: '<thi' may still open a block");
    split_case("<thi", 0, 1, 1, 0, NULL, 0, "whole: '<thi' is content");
    split_case("abc</think>x", 1, 1, 1, 1, "abc", 11, "the prompt left the block open");
    split_case("abc", 1, 1, 1, 1, "abc", 3, "the prompt left it open and the answer never closes it");
    split_case("<think>abc</thi", 0, 0, 1, 1, "abc", NONE, "streamed: a possible '</think>' is held back");
    split_case("<think>a</think>  ", 0, 0, 1, 1, "a", NONE, "streamed: white space after the block may still precede content");
    split_case("<think>a</think>  ", 0, 1, 1, 1, "a", 18, "whole: white space only after the block: empty content");
    split_case("x<think>a</think>b", 0, 1, 1, 0, NULL, 0, "a block after text is content");
    split_case("<think></think>ok", 0, 1, 1, 1, "", 15, "an empty block");
    split_case("<think>a</think>b</think>c", 0, 1, 1, 1, "a", 16, "the first end closes the block");
    stream_property("  <think>\nstep one </thinker> step two\n</think>\n\nThe answer.", 0);
    stream_property("<think>abc", 0);
    stream_property("hello <think>", 0);
    stream_property("reasoning</th</think>\n content", 1);
    stream_property("<th", 0);
    TAP_OK(serve_think_open("<|user|>hi<|assistant|><think>\n", 31), "a prompt ending in '<think>\\n' leaves it open");
    const char *closed = "<think>x</think>answer";
    TAP_OK(!serve_think_open(closed, strlen(closed)), "a closed block does not");
    const char *reopen = "<think></think> <think>";
    TAP_OK(serve_think_open(reopen, strlen(reopen)), "the last block counts");
    TAP_OK(!serve_think_open("plain", 5), "no block, nothing open");
    return TAP_DONE();
}
