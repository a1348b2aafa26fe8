/* JSON Schema "pattern" as a position automaton (see jgre.h).
 *
 * The parser computes, for each sub-expression, Glushkov's sets: whether it matches the empty string, the
 * positions that may come first and last, and, globally, the positions that may follow each position.
 * A counted repetition re-parses its atom's text once per copy, so every copy has positions of its own. */
#include "jgre.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint32_t lo, hi;
} range;

struct jgre {
    int npos, nullable;
    jgre_set first, last, live, follow[JGRE_MAX_POS + 1];
    uint8_t neg[JGRE_MAX_POS + 1]; /* position p's class: its ranges, or (neg) everything else */
    int off[JGRE_MAX_POS + 1], cnt[JGRE_MAX_POS + 1];
    range *rg;
    int nrg, caprg;
};

#define MAX_CP 0x10FFFFu
#define MAX_WORK 20000 /* atoms parsed, copies included: an expression nesting counts is refused past it */

static int set_has(jgre_set s, int p) { return (int)(s.w[p >> 6] >> (p & 63) & 1); }
static void set_add(jgre_set *s, int p) { s->w[p >> 6] |= 1ull << (p & 63); }
static jgre_set set_or(jgre_set a, jgre_set b) { return (jgre_set){{a.w[0] | b.w[0], a.w[1] | b.w[1]}}; }
static jgre_set set_and(jgre_set a, jgre_set b) { return (jgre_set){{a.w[0] & b.w[0], a.w[1] & b.w[1]}}; }
int jgre_empty(jgre_set s) { return !s.w[0] && !s.w[1]; }

typedef struct {
    int nullable;
    jgre_set first, last;
} frag;

typedef struct {
    const char *s;
    size_t n, i;
    jgre *r;
    char *err;
    size_t errn;
    int failed, work;
} parser;

static frag fail(parser *p, const char *fmt, ...)
{
    if (!p->failed) {
        char m[200];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(m, sizeof m, fmt, ap);
        va_end(ap);
        snprintf(p->err, p->errn, "pattern: %s (at character %zu)", m, p->i + 1);
    }
    p->failed = 1;
    return (frag){0};
}

static frag empty_frag(void) { return (frag){1, {{0, 0}}, {{0, 0}}}; }

/* a new position whose class is the ranges given (neg: everything but them) */
static frag position(parser *p, const range *rs, int n, int neg)
{
    jgre *r = p->r;
    if (r->npos == JGRE_MAX_POS)
        return fail(p, "more than %d character positions once counted repetitions are written out", JGRE_MAX_POS);
    if (r->nrg + n > r->caprg) {
        int cap = r->caprg * 2; /* jgre_compile starts it at 16 */
        while (cap < r->nrg + n)
            cap *= 2;
        range *nr = realloc(r->rg, (size_t)cap * sizeof *nr);
        if (!nr)
            return fail(p, "out of memory");
        r->rg = nr, r->caprg = cap;
    }
    int q = ++r->npos;
    if (n)
        memcpy(r->rg + r->nrg, rs, (size_t)n * sizeof *rs);
    r->off[q] = r->nrg, r->cnt[q] = n, r->neg[q] = (uint8_t)neg;
    r->nrg += n;
    frag f = {0, {{0, 0}}, {{0, 0}}};
    set_add(&f.first, q);
    set_add(&f.last, q);
    return f;
}

static frag cat(parser *p, frag a, frag b)
{
    for (int q = 1; q <= p->r->npos; q++)
        if (set_has(a.last, q))
            p->r->follow[q] = set_or(p->r->follow[q], b.first);
    return (frag){a.nullable && b.nullable, a.nullable ? set_or(a.first, b.first) : a.first,
                  b.nullable ? set_or(b.last, a.last) : b.last};
}

static frag loop(parser *p, frag a, int nullable)
{
    for (int q = 1; q <= p->r->npos; q++)
        if (set_has(a.last, q))
            p->r->follow[q] = set_or(p->r->follow[q], a.first);
    a.nullable = nullable || a.nullable;
    return a;
}

static frag alt(frag a, frag b) { return (frag){a.nullable || b.nullable, set_or(a.first, b.first), set_or(a.last, b.last)}; }

/* ---- characters and classes */

/* one UTF-8 character of the pattern (jansson gives valid UTF-8) */
static uint32_t next_cp(parser *p)
{
    const unsigned char *u = (const unsigned char *)p->s + p->i;
    size_t left = p->n - p->i;
    uint32_t c = u[0];
    int k = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if ((size_t)k > left)
        k = 1;
    if (k > 1) {
        c &= 0xFFu >> (k + 1);
        for (int j = 1; j < k; j++)
            c = c << 6 | (u[j] & 0x3F);
    }
    p->i += (size_t)k;
    return c;
}

static int hex_digits(parser *p, int k, uint32_t *v)
{
    *v = 0;
    if (p->i + (size_t)k > p->n)
        return 0;
    for (int j = 0; j < k; j++) {
        char c = p->s[p->i + (size_t)j];
        int d = c >= '0' && c <= '9' ? c - '0' : (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (c | 0x20) - 'a' + 10 : -1;
        if (d < 0)
            return 0;
        *v = *v << 4 | (uint32_t)d;
    }
    p->i += (size_t)k;
    return 1;
}

static const range DIGIT[] = {{'0', '9'}};
static const range WORD[] = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
static const range SPACE[] = {{9, 13},         {' ', ' '},         {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A},
                              {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
static const range LINE_BREAKS[] = {{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}};

typedef struct {
    range r[256];
    int n;
} rbuf;

static int rb_add(parser *p, rbuf *b, uint32_t lo, uint32_t hi)
{
    if (b->n == (int)(sizeof b->r / sizeof *b->r)) {
        fail(p, "a class of more than %d ranges", (int)(sizeof b->r / sizeof *b->r));
        return 0;
    }
    b->r[b->n++] = (range){lo, hi};
    return 1;
}

/* the ranges of \d \w \s (sorted, disjoint), or of \D \W \S (their complement) into b */
static int rb_escape_class(parser *p, rbuf *b, char e)
{
    const range *rs = e == 'd' || e == 'D' ? DIGIT : e == 'w' || e == 'W' ? WORD : SPACE;
    int n = e == 'd' || e == 'D' ? 1 : e == 'w' || e == 'W' ? 4 : (int)(sizeof SPACE / sizeof *SPACE);
    if (e >= 'a')
        for (int j = 0; j < n; j++)
            if (!rb_add(p, b, rs[j].lo, rs[j].hi))
                return 0;
    if (e < 'a') {
        uint32_t from = 0;
        for (int j = 0; j < n; j++) {
            if (rs[j].lo > from && !rb_add(p, b, from, rs[j].lo - 1))
                return 0;
            from = rs[j].hi + 1;
        }
        if (from <= MAX_CP && !rb_add(p, b, from, MAX_CP))
            return 0;
    }
    return 1;
}

/* an escape's single character after the '\' (in a class: inside = 1, where \b is a backspace); -1 when
 * it is a class escape (\d ...), -2 on an error (reported) */
static long escape_char(parser *p, int inside)
{
    if (p->i >= p->n) {
        fail(p, "'\\' at the end");
        return -2;
    }
    char e = p->s[p->i];
    if (e && strchr("dDwWsS", e)) {
        p->i++;
        return -1;
    }
    uint32_t v;
    switch (e) {
    case 'n': p->i++; return '\n';
    case 't': p->i++; return '\t';
    case 'r': p->i++; return '\r';
    case 'f': p->i++; return '\f';
    case 'v': p->i++; return '\v';
    case '0':
        if (p->i + 1 < p->n && p->s[p->i + 1] >= '0' && p->s[p->i + 1] <= '9')
            break;
        p->i++;
        return 0;
    case 'x':
        p->i++;
        if (!hex_digits(p, 2, &v)) {
            fail(p, "\\x wants two hexadecimal digits");
            return -2;
        }
        return v;
    case 'u':
        p->i++;
        if (!hex_digits(p, 4, &v)) {
            fail(p, "\\u wants four hexadecimal digits (\\u{...} is the u flag's, not supported)");
            return -2;
        }
        /* a surrogate pair written as two escapes: one character */
        if (v >= 0xD800 && v <= 0xDBFF && p->i + 6 <= p->n && p->s[p->i] == '\\' && p->s[p->i + 1] == 'u') {
            size_t at = p->i;
            uint32_t lo;
            p->i += 2;
            if (hex_digits(p, 4, &lo) && lo >= 0xDC00 && lo <= 0xDFFF)
                return 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
            p->i = at;
        }
        return v;
    case 'c':
        if (p->i + 1 < p->n && ((p->s[p->i + 1] | 0x20) >= 'a' && (p->s[p->i + 1] | 0x20) <= 'z')) {
            p->i += 2;
            return p->s[p->i - 1] % 32;
        }
        break;
    case 'b':
        if (inside) {
            p->i++;
            return '\b';
        }
        fail(p, "\\b (a word boundary) is not supported");
        return -2;
    case 'B':
        fail(p, "\\B (not a word boundary) is not supported");
        return -2;
    case 'k':
        fail(p, "\\k (a back-reference) is not supported");
        return -2;
    default:
        break;
    }
    if (e >= '1' && e <= '9') {
        fail(p, "\\%c (a back-reference) is not supported", e);
        return -2;
    }
    if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9')) {
        fail(p, "unknown escape \\%c", e);
        return -2;
    }
    return next_cp(p); /* escaped punctuation (or any other character) stands for itself */
}

static frag parse_class(parser *p)
{
    rbuf b = {.n = 0};
    int neg = 0;
    p->i++; /* '[' */
    if (p->i < p->n && p->s[p->i] == '^')
        neg = 1, p->i++;
    for (;;) {
        if (p->i >= p->n)
            return fail(p, "'[' without ']'");
        if (p->s[p->i] == ']') {
            p->i++;
            break;
        }
        long lo;
        if (p->s[p->i] == '\\') {
            p->i++;
            char e = p->i < p->n ? p->s[p->i] : 0;
            lo = escape_char(p, 1);
            if (lo == -2)
                return (frag){0};
            if (lo == -1) {
                if (!rb_escape_class(p, &b, e))
                    return (frag){0};
                continue;
            }
        } else
            lo = next_cp(p);
        long hi = lo;
        if (p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
            p->i++;
            if (p->s[p->i] == '\\') {
                p->i++;
                hi = escape_char(p, 1);
                if (hi == -2)
                    return (frag){0};
                if (hi == -1)
                    return fail(p, "a range ending in a class escape");
            } else
                hi = next_cp(p);
            if (hi < lo)
                return fail(p, "a range out of order");
        }
        if (!rb_add(p, &b, (uint32_t)lo, (uint32_t)hi))
            return (frag){0};
    }
    return position(p, b.r, b.n, neg);
}

static frag parse_alt(parser *p, int depth);

static frag parse_atom(parser *p, int depth)
{
    if (++p->work > MAX_WORK)
        return fail(p, "too complex (counted repetitions nest past %d atoms)", MAX_WORK);
    char c = p->s[p->i];
    if (c == '(') {
        p->i++;
        if (p->i < p->n && p->s[p->i] == '?') {
            if (p->i + 1 < p->n && p->s[p->i + 1] == ':')
                p->i += 2;
            else if (p->i + 2 < p->n && p->s[p->i + 1] == '<' && p->s[p->i + 2] != '=' && p->s[p->i + 2] != '!') {
                const char *gt = memchr(p->s + p->i, '>', p->n - p->i);
                if (!gt)
                    return fail(p, "a group name without '>'");
                p->i = (size_t)(gt - p->s) + 1;
            } else
                return fail(p, "look-arounds ((?= (?! (?<= (?<!) are not supported");
        }
        if (depth > 100)
            return fail(p, "groups nested more than 100 deep");
        frag f = parse_alt(p, depth + 1);
        if (p->failed)
            return f;
        if (p->i >= p->n || p->s[p->i] != ')')
            return fail(p, "'(' without ')'");
        p->i++;
        return f;
    }
    if (c == '[')
        return parse_class(p);
    if (c == '.') {
        p->i++;
        return position(p, LINE_BREAKS, 3, 1);
    }
    if (c == '^' || c == '$')
        return fail(p, "'%c' only as the first (last) character of the expression or of a top-level alternative", c);
    if (c == '*' || c == '+' || c == '?')
        return fail(p, "'%c' with nothing to repeat", c);
    if (c == ')')
        return fail(p, "')' without '('");
    if (c == '\\') {
        p->i++;
        char e = p->i < p->n ? p->s[p->i] : 0;
        long v = escape_char(p, 0);
        if (v == -2)
            return (frag){0};
        if (v == -1) {
            rbuf b = {.n = 0};
            if (!rb_escape_class(p, &b, e))
                return (frag){0};
            return position(p, b.r, b.n, 0);
        }
        range r = {(uint32_t)v, (uint32_t)v};
        return position(p, &r, 1, 0);
    }
    uint32_t v = next_cp(p);
    range r = {v, v};
    return position(p, &r, 1, 0);
}

/* {n}, {n,}, {n,m} at p->i: 1 and the bounds (max -1: none), or 0 (not a quantifier: '{' is a literal) */
static int braces(parser *p, long *lo, long *hi)
{
    size_t i = p->i + 1;
    long a = 0, b;
    int digits = 0;
    while (i < p->n && p->s[i] >= '0' && p->s[i] <= '9' && a < 100000)
        a = a * 10 + (p->s[i++] - '0'), digits++;
    if (!digits || i >= p->n)
        return 0;
    if (p->s[i] == '}') {
        b = a;
    } else if (p->s[i] == ',') {
        i++;
        b = -1;
        if (i < p->n && p->s[i] >= '0' && p->s[i] <= '9') {
            b = 0;
            while (i < p->n && p->s[i] >= '0' && p->s[i] <= '9' && b < 100000)
                b = b * 10 + (p->s[i++] - '0');
        }
        if (i >= p->n || p->s[i] != '}')
            return 0;
    } else
        return 0;
    p->i = i + 1;
    *lo = a, *hi = b;
    return 1;
}

static frag parse_quant(parser *p, int depth)
{
    size_t a0 = p->i;
    frag f = parse_atom(p, depth);
    size_t a1 = p->i;
    if (p->failed || p->i >= p->n)
        return f;
    char c = p->s[p->i];
    long lo, hi;
    if (c == '*' || c == '+' || c == '?') {
        p->i++;
        f = c == '?' ? (frag){1, f.first, f.last} : loop(p, f, c == '*');
    } else if (c == '{' && braces(p, &lo, &hi)) {
        if (hi >= 0 && hi < lo)
            return fail(p, "{%ld,%ld}: the bounds out of order", lo, hi);
        if (lo > JGRE_MAX_POS || hi > JGRE_MAX_POS)
            return fail(p, "a count above %d", JGRE_MAX_POS);
        size_t after = p->i;
        frag all = empty_frag();
        long copies = hi < 0 ? lo + 1 : hi;
        for (long k = 0; k < copies && !p->failed; k++) {
            frag g = f;
            if (k) { /* a copy: the atom's text parsed again, new positions */
                p->i = a0;
                g = parse_atom(p, depth);
                p->i = a1;
            }
            if (k >= lo)
                g = hi < 0 ? loop(p, g, 1) : (frag){1, g.first, g.last};
            all = cat(p, all, g);
        }
        p->i = after;
        f = all;
    } else
        return f;
    if (p->i < p->n && p->s[p->i] == '?') /* lazy: the same strings */
        p->i++;
    if (p->i < p->n && (p->s[p->i] == '*' || p->s[p->i] == '+' || p->s[p->i] == '?'))
        return fail(p, "'%c' after a quantifier", p->s[p->i]);
    return f;
}

static frag parse_seq(parser *p, int depth)
{
    frag f = empty_frag();
    while (!p->failed && p->i < p->n && p->s[p->i] != '|' && p->s[p->i] != ')')
        f = cat(p, f, parse_quant(p, depth));
    return f;
}

static frag parse_alt(parser *p, int depth)
{
    frag f = parse_seq(p, depth);
    while (!p->failed && p->i < p->n && p->s[p->i] == '|') {
        p->i++;
        f = alt(f, parse_seq(p, depth));
    }
    return f;
}

/* where the top-level alternative starting at i ends (its '|' or the end) */
static size_t alt_end(const char *s, size_t n, size_t i)
{
    int parens = 0, cls = 0;
    for (; i < n; i++) {
        if (s[i] == '\\') {
            i++;
            continue;
        }
        if (cls) {
            cls = s[i] != ']';
            continue;
        }
        if (s[i] == '[')
            cls = 1;
        else if (s[i] == '(')
            parens++;
        else if (s[i] == ')')
            parens--;
        else if (s[i] == '|' && parens <= 0)
            return i;
    }
    return n;
}

static int class_meets(const jgre *r, int q, uint32_t lo, uint32_t hi);
/* the class of a position holds a character a JSON string can carry (not a lone surrogate) */
static int class_nonempty(const jgre *r, int q) { return class_meets(r, q, 0, 0xD7FF) || class_meets(r, q, 0xE000, MAX_CP); }

static int class_has(const jgre *r, int q, uint32_t cp)
{
    const range *rs = r->rg + r->off[q];
    for (int j = 0; j < r->cnt[q]; j++)
        if (rs[j].lo <= cp && cp <= rs[j].hi)
            return !r->neg[q];
    return r->neg[q];
}

jgre *jgre_compile(const char *pat, size_t n, char *err, size_t errn)
{
    jgre *r = calloc(1, sizeof *r);
    if (r) { /* never NULL, so that r->rg + an offset is defined for classes of no ranges ("." of "" too) */
        r->caprg = 16;
        if (!(r->rg = malloc((size_t)r->caprg * sizeof *r->rg))) {
            free(r);
            r = NULL;
        }
    }
    if (!r) {
        snprintf(err, errn, "pattern: out of memory");
        return NULL;
    }
    parser p = {pat, n, 0, r, err, errn, 0, 0};
    /* each top-level alternative is anchored by its own ^ and $, else wrapped in "any characters" */
    frag all = {0, {{0, 0}}, {{0, 0}}};
    for (size_t i = 0;;) {
        size_t e = alt_end(pat, n, i);
        int a0 = i < e && pat[i] == '^', a1 = 0;
        if (e > i + (size_t)a0 && pat[e - 1] == '$') {
            size_t bs = 0;
            while (e - 1 - bs > i && pat[e - 2 - bs] == '\\')
                bs++;
            a1 = bs % 2 == 0;
        }
        parser q = p;
        q.i = i + (size_t)a0;
        q.n = e - (size_t)a1;
        frag f = a0 ? empty_frag() : loop(&q, position(&q, NULL, 0, 1), 1);
        f = cat(&q, f, parse_seq(&q, 0));
        if (!q.failed && q.i < q.n)
            fail(&q, "')' without '('");
        if (!a1 && !q.failed)
            f = cat(&q, f, loop(&q, position(&q, NULL, 0, 1), 1));
        p.failed = q.failed, p.work = q.work;
        if (p.failed)
            break;
        all = i ? alt(all, f) : f;
        if (e == n)
            break;
        i = e + 1;
    }
    if (p.failed) {
        jgre_free(r);
        return NULL;
    }
    r->first = all.first, r->last = all.last, r->nullable = all.nullable;
    /* live: the positions from which a match can be reached (through classes some character takes) */
    jgre_set ok = {{0, 0}};
    for (int q = 1; q <= r->npos; q++)
        if (class_nonempty(r, q))
            set_add(&ok, q);
    r->live = set_and(r->last, ok);
    for (int changed = 1; changed;) {
        changed = 0;
        for (int q = 1; q <= r->npos; q++)
            if (set_has(ok, q) && !set_has(r->live, q) && !jgre_empty(set_and(r->follow[q], r->live)))
                set_add(&r->live, q), changed = 1;
    }
    if (!r->nullable && jgre_empty(set_and(r->first, r->live))) {
        snprintf(err, errn, "pattern: matches no string");
        jgre_free(r);
        return NULL;
    }
    return r;
}

void jgre_free(jgre *r)
{
    if (r) {
        free(r->rg);
        free(r);
    }
}

jgre_set jgre_start(const jgre *r)
{
    (void)r;
    return (jgre_set){{1, 0}};
}

/* the live positions that may come after s, whatever the character */
static jgre_set successors(const jgre *r, jgre_set s)
{
    jgre_set next = set_has(s, 0) ? r->first : (jgre_set){{0, 0}};
    for (int w = 0; w < 2; w++)
        for (uint64_t bits = s.w[w] & (w ? ~0ull : ~1ull); bits; bits &= bits - 1)
            next = set_or(next, r->follow[w * 64 + __builtin_ctzll(bits)]);
    return set_and(next, r->live);
}

/* position q's class holds some code point of [lo, hi] */
static int class_meets(const jgre *r, int q, uint32_t lo, uint32_t hi)
{
    const range *rs = r->rg + r->off[q];
    if (!r->neg[q]) {
        for (int j = 0; j < r->cnt[q]; j++)
            if (rs[j].lo <= hi && rs[j].hi >= lo)
                return 1;
        return 0;
    }
    uint32_t c = lo; /* the least code point from lo up outside every range */
    for (int moved = 1; moved && c <= hi;) {
        moved = 0;
        for (int j = 0; j < r->cnt[q]; j++)
            if (rs[j].lo <= c && c <= rs[j].hi)
                c = rs[j].hi + 1, moved = 1;
    }
    return c <= hi;
}

int jgre_can(const jgre *r, jgre_set s, uint32_t lo, uint32_t hi)
{
    jgre_set next = successors(r, s);
    for (int w = 0; w < 2; w++)
        for (uint64_t bits = next.w[w]; bits; bits &= bits - 1)
            if (class_meets(r, w * 64 + __builtin_ctzll(bits), lo, hi))
                return 1;
    return 0;
}

jgre_set jgre_step(const jgre *r, jgre_set s, uint32_t cp)
{
    jgre_set next = successors(r, s);
    for (int w = 0; w < 2; w++)
        for (uint64_t bits = next.w[w]; bits; bits &= bits - 1) {
            int q = w * 64 + __builtin_ctzll(bits);
            if (!class_has(r, q, cp))
                next.w[w] &= ~(1ull << (q & 63));
        }
    return next;
}

int jgre_accepts(const jgre *r, jgre_set s) { return (set_has(s, 0) && r->nullable) || !jgre_empty(set_and(s, r->last)); }
