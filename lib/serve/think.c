/* Reasoning (DeepSeek-R1, Qwen3): an answer that opens with <think> (or whose prompt ends inside an open
 * <think> block, as DeepSeek-R1's template leaves it) is split into reasoning_content — the text up to
 * </think> — and content, the rest without its leading white space. Over a stream the split is taken on
 * the text so far: nothing is released while the answer may still open a block, nor the bytes that may be
 * the start of </think>, nor white space after it that may still precede the content. */
#define _GNU_SOURCE
#include <stdint.h>
#include <string.h>

#include "serve_int.h"

static const char OPEN[] = "<think>", CLOSE[] = "</think>";

static int is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

/* the longest proper prefix of t (length tn) that ends s (length n) */
static size_t partial_suffix(const char *s, size_t n, const char *t, size_t tn)
{
    for (size_t k = tn - 1; k > 0; k--)
        if (k <= n && !memcmp(s + n - k, t, k))
            return k;
    return 0;
}

void serve_think_split(const char *s, size_t n, int open, int final, serve_think *t)
{
    memset(t, 0, sizeof *t);
    size_t r0 = 0;
    if (!open) {
        size_t i = 0;
        while (i < n && is_ws(s[i]))
            i++;
        size_t m = n - i < sizeof OPEN - 1 ? n - i : sizeof OPEN - 1;
        if (memcmp(s + i, OPEN, m)) { /* no block: all content */
            t->decided = 1;
            return;
        }
        if (m < sizeof OPEN - 1) { /* "<thi": a block may still open */
            t->decided = final;
            return;
        }
        r0 = i + sizeof OPEN - 1;
    }
    t->decided = t->has = 1;
    t->r0 = r0;
    const char *e = memmem(s + r0, n - r0, CLOSE, sizeof CLOSE - 1);
    if (!e) { /* still thinking (or cut there): reasoning only */
        t->r1 = final ? n : n - partial_suffix(s + r0, n - r0, CLOSE, sizeof CLOSE - 1);
        t->c0 = final ? n : SIZE_MAX;
        return;
    }
    t->r1 = (size_t)(e - s);
    size_t c = t->r1 + sizeof CLOSE - 1;
    while (c < n && is_ws(s[c]))
        c++;
    t->c0 = c < n || final ? c : SIZE_MAX;
}

int serve_think_open(const char *prompt, size_t n)
{
    const char *last = NULL;
    for (const char *p = prompt; (p = memmem(p, n - (size_t)(p - prompt), OPEN, sizeof OPEN - 1)); p++)
        last = p;
    return last && !memmem(last, n - (size_t)(last - prompt), CLOSE, sizeof CLOSE - 1);
}
