/* Patterns of tokenizer.json (Replace normalizer and decoder, Split pre-tokenizer): strings, or
 * Oniguruma-flavoured regexes translated to PCRE2 with the reference's meanings. */
#define _GNU_SOURCE
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "tok/tok_impl.h"

/* ------------------------------------------------------------------------------------------------ */
/* patterns (Replace normalizer/decoder, Split pre-tokenizer)                                        */


/* Translate a tokenizer.json (Oniguruma-flavoured) regex to PCRE2 with the semantics the reference gives
 * it: \s \S = White_Space, \d \D = Nd, \w \W = the Oniguruma word set, '.' excludes only \n, ^ $ are line
 * anchors on \n, (?i: ...) folds ASCII letters only. Other syntax is shared by PCRE2 and passes through. */
#define WORD_CLASS_BODY "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{B2}\\x{B3}\\x{B9}\\x{BC}-\\x{BE}"
static int regex_translate(const char *re, size_t n, tok_buf *o)
{
    int fold_depth = -1, depth = 0, in_class = 0, rc = 0, last_quant = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        char c = re[i];
        int fold = fold_depth >= 0;
        if (c == '\\' && i + 1 < n) {
            char d = re[++i];
            last_quant = 0;
            if ((d == 'p' || d == 'P' || d == 'x') && i + 1 < n && re[i + 1] == '{') {
                const char *close = memchr(re + i, '}', n - i);
                if (!close)
                    return -2;
                size_t k = (size_t)(close - (re + i)) + 1;
                rc = tok_buf_put(o, "\\", 1) || tok_buf_put(o, re + i, k);
                i += k - 1;
                continue;
            }
            switch (d) {
            case 's': rc = tok_buf_puts(o, "\\p{White_Space}"); break;
            case 'S': rc = tok_buf_puts(o, "\\P{White_Space}"); break;
            case 'd': rc = tok_buf_puts(o, "\\p{Nd}"); break;
            case 'D': rc = tok_buf_puts(o, "\\P{Nd}"); break;
            case 'w': rc = tok_buf_puts(o, in_class ? WORD_CLASS_BODY : "[" WORD_CLASS_BODY "]"); break;
            case 'W':
                if (in_class)
                    return -2; /* complement inside a class: not supported */
                rc = tok_buf_puts(o, "[^" WORD_CLASS_BODY "]");
                break;
            case 'h': rc = tok_buf_puts(o, in_class ? "0-9A-Fa-f" : "[0-9A-Fa-f]"); break;
            case 'H': rc = in_class ? -2 : tok_buf_puts(o, "[^0-9A-Fa-f]"); break;
            default: {
                char two[2] = {'\\', d};
                rc = tok_buf_put(o, two, 2);
            }
            }
            continue;
        }
        if (in_class) {
            if (c == ']' && in_class == 1) {
                in_class = 0;
            } else if (c == '[') {
                in_class++;
            } else if (c == ']') {
                in_class--;
            } else if (fold && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))) {
                if (i + 1 < n && re[i + 1] == '-')
                    return -2; /* letter ranges under (?i: */
                char two[2] = {c, (char)(c ^ 0x20)};
                rc = tok_buf_put(o, two, 2);
                continue;
            }
            rc = tok_buf_put(o, &c, 1);
            continue;
        }
        /* quantifiers; a '+' right after one is dropped as the reference does (no possessive forms) */
        if (c == '+' || c == '*' || c == '?') {
            if (!(c == '+' && last_quant))
                rc = tok_buf_put(o, &c, 1);
            last_quant = 1;
            continue;
        }
        if (c == '{') {
            size_t j = i + 1, digits = 0;
            while (j < n && ((re[j] >= '0' && re[j] <= '9') || re[j] == ','))
                digits += re[j] != ',', j++;
            if (j < n && re[j] == '}' && digits) {
                rc = tok_buf_put(o, re + i, j - i + 1);
                i = j;
                last_quant = 1;
                continue;
            }
        }
        last_quant = 0;
        switch (c) {
        case '[':
            in_class = 1;
            rc = tok_buf_put(o, &c, 1);
            if (i + 1 < n && re[i + 1] == '^')
                rc = tok_buf_put(o, &re[++i], 1);
            if (!rc && i + 1 < n && re[i + 1] == ']') /* a literal ] first in the class */
                rc = tok_buf_puts(o, "\\]"), i++;
            break;
        case '.': rc = tok_buf_puts(o, "[^\\n]"); break;
        case '^': rc = tok_buf_puts(o, "(?:(?<![\\s\\S])|(?<=\\n))"); break;
        case '$': rc = tok_buf_puts(o, "(?:(?=\\n)|(?![\\s\\S]))"); break;
        case '(':
            if (n - i >= 4 && !memcmp(re + i, "(?i:", 4)) {
                if (fold_depth < 0)
                    fold_depth = depth;
                depth++;
                rc = tok_buf_puts(o, "(?:");
                i += 3;
                break;
            }
            if (n - i >= 2 && re[i + 1] == '?' && i + 2 < n && re[i + 2] != ':' && re[i + 2] != '=' &&
                re[i + 2] != '!' && re[i + 2] != '<' && re[i + 2] != '>')
                return -2; /* inline flags other than (?i: */
            depth++;
            rc = tok_buf_put(o, &c, 1);
            break;
        case ')':
            depth--;
            if (fold_depth == depth)
                fold_depth = -1;
            rc = tok_buf_put(o, &c, 1);
            break;
        default:
            if (fold && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))) {
                char cls[4] = {'[', c, (char)(c ^ 0x20), ']'};
                rc = tok_buf_put(o, cls, 4);
            } else {
                rc = tok_buf_put(o, &c, 1);
            }
        }
    }
    return rc;
}

pcre2_code *tk_regex_compile(const char *pat, size_t n, int translate, ogk_error *e)
{
    tok_buf b = {0};
    int rc = translate ? regex_translate(pat, n, &b) : tok_buf_put(&b, pat, n);
    if (rc) {
        free(b.p);
        ogk_fail(e, "unsupported regex construct in pattern '%.*s'", (int)(n > 200 ? 200 : n), pat);
        return NULL;
    }
    int err;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)b.p, b.n, PCRE2_UTF | PCRE2_UCP, &err, &off, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        ogk_fail(e, "regex '%.*s': %s at offset %zu", (int)(n > 200 ? 200 : n), pat, (char *)msg, (size_t)off);
        free(b.p);
        return NULL;
    }
    free(b.p);
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* falls back to the interpreter if JIT is absent */
    return re;
}

int tk_pat_load(tpat *p, const tj *cfg, tok_arena *a, ogk_error *e)
{
    const tj *s = tj_get(cfg, "String"), *r = tj_get(cfg, "Regex");
    if (s && s->type == TJ_STR) {
        p->lit = tok_arena_strdup(a, s->u.s, s->n);
        p->litn = s->n;
        return p->lit ? 0 : ogk_fail(e, "out of memory");
    }
    if (r && r->type == TJ_STR) {
        p->is_regex = 1;
        p->re = tk_regex_compile(r->u.s, r->n, 1, e);
        return p->re ? 0 : -1;
    }
    return ogk_fail(e, "pattern: neither String nor Regex");
}


/* ------------------------------------------------------------------------------------------------ */
/* normalizers                                                                                       */

/* The next match of re in s[0, n) from *start on: its span [*a, *b), and *start moved past it (one character
 * past an empty match, as JS regex iteration does). 1 found, 0 no more, -1 match error (t->regex_rc set). */
int tk_next_match(tok *t, pcre2_code *re, const char *s, size_t n, size_t *start, size_t *a, size_t *b)
{
    if (*start > n)
        return 0;
    int rc = pcre2_match(re, (PCRE2_SPTR)s, n, *start, PCRE2_NO_UTF_CHECK, t->md, NULL);
    if (rc == PCRE2_ERROR_NOMATCH)
        return 0;
    if (rc < 0) {
        t->regex_rc = rc;
        return -1;
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(t->md);
    *a = ov[0];
    *b = ov[1];
    *start = *b > *a ? *b : *b + (*b < n ? (size_t)tok_utf8_len((unsigned char)s[*b]) : 1);
    return 1;
}

/* Replace every (non-overlapping, JS replaceAll) match of pattern p in s with rep, appending to out. */
int tk_pat_replace(tok *t, const tpat *p, const char *s, size_t n, const char *rep, size_t repn, tok_buf *out, size_t max)
{
    if (!p->is_regex) {
        if (!p->litn)
            return tok_buf_put(out, s, n); /* JS replaceAll("") would interleave; no tokenizer uses it */
        size_t i = 0;
        while (i < n) {
            const char *hit = p->litn <= n - i ? memmem(s + i, n - i, p->lit, p->litn) : NULL;
            if (!hit)
                break;
            if (tok_buf_put(out, s + i, (size_t)(hit - (s + i))) || tok_buf_put(out, rep, repn))
                return -1;
            if (out->n > max)
                return TK_GREW;
            i = (size_t)(hit - s) + p->litn;
        }
        return tok_buf_put(out, s + i, n - i) ? -1 : out->n > max ? TK_GREW : 0;
    }
    size_t i = 0, start = 0, a, b;
    int rc;
    while ((rc = tk_next_match(t, p->re, s, n, &start, &a, &b)) > 0) {
        if (tok_buf_put(out, s + i, a - i) || tok_buf_put(out, rep, repn))
            return -1;
        if (out->n > max)
            return TK_GREW;
        i = b;
    }
    if (rc < 0)
        return -1;
    return tok_buf_put(out, s + i, n - i) ? -1 : out->n > max ? TK_GREW : 0;
}

