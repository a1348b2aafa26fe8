/* A small, fast JSON reader for tokenizer.json, plus the arena and byte buffer it and the tokenizer use.
 * Values live in an arena; unescaped strings point into the source (zero copy). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tok/tok_int.h"

struct tok_arena_chunk {
    tok_arena_chunk *next;
    size_t cap;
    _Alignas(16) unsigned char data[];
};

void *tok_arena_alloc(tok_arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (!a->head || a->used + n > a->cap) {
        size_t cap = n > (1u << 20) ? n : (1u << 20);
        tok_arena_chunk *c = malloc(sizeof *c + cap);
        if (!c)
            return NULL;
        c->next = a->head;
        c->cap = cap;
        a->head = c;
        a->total += cap;
        a->used = 0;
        a->cap = cap;
    }
    void *p = a->head->data + a->used;
    a->used += n;
    return p;
}

char *tok_arena_strdup(tok_arena *a, const char *s, size_t n)
{
    char *p = tok_arena_alloc(a, n + 1);
    if (p) {
        if (n)
            memcpy(p, s, n);
        p[n] = 0;
    }
    return p;
}

void tok_arena_free(tok_arena *a)
{
    tok_arena_chunk *c = a->head;
    while (c) {
        tok_arena_chunk *n = c->next;
        free(c);
        c = n;
    }
    a->head = NULL;
    a->used = a->cap = a->total = 0;
}

tok_arena_pos tok_arena_mark(const tok_arena *a) { return (tok_arena_pos){a->head, a->used, a->cap}; }

void tok_arena_rewind(tok_arena *a, tok_arena_pos m)
{
    while (a->head && a->head != m.head) {
        tok_arena_chunk *n = a->head->next;
        a->total -= a->head->cap;
        free(a->head);
        a->head = n;
    }
    a->used = m.used;
    a->cap = m.cap;
}

int tok_buf_reserve(tok_buf *b, size_t n)
{
    if (b->n + n + 1 <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + n + 1)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p)
        return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

int tok_buf_put(tok_buf *b, const void *s, size_t n)
{
    if (tok_buf_reserve(b, n))
        return -1;
    if (n)
        memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

/* ---- parser ---- */
typedef struct {
    const char *s, *end, *start;
    tok_arena *a;
    tj *stack; /* values of open containers */
    size_t sn, scap;
    const char *what;
    ogk_error *e;
    int depth;
} tjp;

static int tjp_fail(tjp *p, const char *why)
{
    size_t line = 1, col = 1;
    for (const char *q = p->start; q < p->s && q < p->end; q++) {
        if (*q == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    return ogk_fail(p->e, "%s: line %zu col %zu: %s", p->what, line, col, why);
}

static void tjp_ws(tjp *p)
{
    while (p->s < p->end && (*p->s == ' ' || *p->s == '\n' || *p->s == '\r' || *p->s == '\t'))
        p->s++;
}

static int tjp_push(tjp *p, const tj *v)
{
    if (p->sn == p->scap) {
        size_t cap = p->scap ? p->scap * 2 : 1024;
        tj *s = realloc(p->stack, cap * sizeof *s);
        if (!s)
            return tjp_fail(p, "out of memory");
        p->stack = s;
        p->scap = cap;
    }
    p->stack[p->sn++] = *v;
    return 0;
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static int tjp_hex4(tjp *p, const char *q, uint32_t *v)
{
    if (p->end - q < 4)
        return -1;
    uint32_t x = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval((unsigned char)q[i]);
        if (h < 0)
            return -1;
        x = x << 4 | (uint32_t)h;
    }
    *v = x;
    return 0;
}

static int tjp_string(tjp *p, tj *v)
{
    const char *q = ++p->s; /* after the quote */
    int esc = 0;
    while (q < p->end && *q != '"') {
        if ((unsigned char)*q < 0x20)
            return p->s = q, tjp_fail(p, "control character in string");
        if (*q == '\\') {
            esc = 1;
            q++;
        }
        q++;
    }
    if (q >= p->end)
        return tjp_fail(p, "unterminated string");
    size_t rawlen = (size_t)(q - p->s);
    if (tok_utf8_check(p->s, rawlen) != rawlen)
        return tjp_fail(p, "invalid UTF-8 in string");
    v->type = TJ_STR;
    if (!esc) {
        v->u.s = p->s;
        v->n = (uint32_t)rawlen;
        p->s = q + 1;
        return 0;
    }
    char *out = tok_arena_alloc(p->a, rawlen + 1), *o = out;
    if (!out)
        return tjp_fail(p, "out of memory");
    const char *r = p->s;
    while (r < q) {
        if (*r != '\\') {
            *o++ = *r++;
            continue;
        }
        r++;
        switch (*r) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '/': *o++ = '/'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            uint32_t cp, lo;
            if (tjp_hex4(p, r + 1, &cp))
                return p->s = r, tjp_fail(p, "bad \\u escape");
            r += 4;
            if (cp >= 0xD800 && cp < 0xDC00) {
                if (r + 6 < q + 1 && r[1] == '\\' && r[2] == 'u' && !tjp_hex4(p, r + 3, &lo) && lo >= 0xDC00 &&
                    lo < 0xE000) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    r += 6;
                } else {
                    return p->s = r, tjp_fail(p, "unpaired surrogate in \\u escape");
                }
            } else if (cp >= 0xDC00 && cp < 0xE000) {
                return p->s = r, tjp_fail(p, "unpaired surrogate in \\u escape");
            }
            o += tok_utf8_enc(cp, o);
            break;
        }
        default:
            return p->s = r, tjp_fail(p, "bad escape in string");
        }
        r++;
    }
    *o = 0;
    v->u.s = out;
    v->n = (uint32_t)(o - out);
    p->s = q + 1;
    return 0;
}

static int tjp_value(tjp *p, tj *v);

static int tjp_container(tjp *p, tj *v, int obj)
{
    if (++p->depth > 512)
        return tjp_fail(p, "nesting too deep");
    size_t base = p->sn;
    char close = obj ? '}' : ']';
    p->s++;
    tjp_ws(p);
    if (p->s < p->end && *p->s == close) {
        p->s++;
    } else {
        for (;;) {
            tj item;
            tjp_ws(p);
            if (obj) {
                if (p->s >= p->end || *p->s != '"')
                    return tjp_fail(p, "expected a string key");
                if (tjp_string(p, &item) || tjp_push(p, &item))
                    return -1;
                tjp_ws(p);
                if (p->s >= p->end || *p->s != ':')
                    return tjp_fail(p, "expected ':'");
                p->s++;
            }
            if (tjp_value(p, &item) || tjp_push(p, &item))
                return -1;
            tjp_ws(p);
            if (p->s < p->end && *p->s == ',') {
                p->s++;
                continue;
            }
            if (p->s < p->end && *p->s == close) {
                p->s++;
                break;
            }
            return tjp_fail(p, obj ? "expected ',' or '}'" : "expected ',' or ']'");
        }
    }
    size_t cnt = p->sn - base;
    v->type = obj ? TJ_OBJ : TJ_ARR;
    v->n = (uint32_t)(obj ? cnt / 2 : cnt);
    v->u.items = NULL;
    if (cnt) {
        v->u.items = tok_arena_alloc(p->a, cnt * sizeof(tj));
        if (!v->u.items)
            return tjp_fail(p, "out of memory");
        memcpy(v->u.items, p->stack + base, cnt * sizeof(tj));
    }
    p->sn = base;
    p->depth--;
    return 0;
}

static int tjp_lit(tjp *p, const char *lit, int type, tj *v)
{
    size_t n = strlen(lit);
    if ((size_t)(p->end - p->s) < n || memcmp(p->s, lit, n))
        return tjp_fail(p, "unexpected character");
    p->s += n;
    v->type = (uint8_t)type;
    v->n = 0;
    return 0;
}

/* RFC 8259's number: -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)? — strtod alone also takes
 * "018" and "1." (which Hugging Face's serde_json, and so a real tokenizer.json, never has) */
static int number_ok(const char *q)
{
    if (*q == '-')
        q++;
    if (*q == '0')
        q++;
    else if (*q >= '1' && *q <= '9')
        while (*q >= '0' && *q <= '9')
            q++;
    else
        return 0;
    if (*q == '.') {
        if (!(*++q >= '0' && *q <= '9'))
            return 0;
        while (*q >= '0' && *q <= '9')
            q++;
    }
    if (*q == 'e' || *q == 'E') {
        q++;
        if (*q == '+' || *q == '-')
            q++;
        if (!(*q >= '0' && *q <= '9'))
            return 0;
        while (*q >= '0' && *q <= '9')
            q++;
    }
    return *q == 0;
}

static int tjp_value(tjp *p, tj *v)
{
    tjp_ws(p);
    if (p->s >= p->end)
        return tjp_fail(p, "unexpected end of input");
    switch (*p->s) {
    case '{': return tjp_container(p, v, 1);
    case '[': return tjp_container(p, v, 0);
    case '"': return tjp_string(p, v);
    case 't': return tjp_lit(p, "true", TJ_TRUE, v);
    case 'f': return tjp_lit(p, "false", TJ_FALSE, v);
    case 'n': return tjp_lit(p, "null", TJ_NULL, v);
    default: {
        const char *q = p->s;
        if (q < p->end && *q == '-')
            q++;
        if (q >= p->end || *q < '0' || *q > '9')
            return tjp_fail(p, "unexpected character");
        while (q < p->end && ((*q >= '0' && *q <= '9') || *q == '.' || *q == 'e' || *q == 'E' || *q == '+' ||
                              *q == '-'))
            q++;
        char tmp[64];
        size_t n = (size_t)(q - p->s);
        if (n >= sizeof tmp)
            return tjp_fail(p, "number too long");
        memcpy(tmp, p->s, n);
        tmp[n] = 0;
        char *endp;
        v->type = TJ_NUM;
        v->n = 0;
        v->u.num = strtod(tmp, &endp);
        if (*endp || !number_ok(tmp))
            return tjp_fail(p, "bad number");
        p->s = q;
        return 0;
    }
    }
}

int tj_parse(tok_arena *a, const char *src, size_t len, const char *what, tj *out, ogk_error *e)
{
    tjp p = {.s = src, .end = src + len, .start = src, .a = a, .what = what, .e = e};
    int rc = tjp_value(&p, out);
    if (!rc) {
        tjp_ws(&p);
        if (p.s != p.end)
            rc = tjp_fail(&p, "trailing data after the JSON value");
    }
    free(p.stack);
    return rc;
}

const tj *tj_get(const tj *obj, const char *key)
{
    if (!obj || obj->type != TJ_OBJ)
        return NULL;
    size_t kn = strlen(key);
    for (uint32_t i = 0; i < obj->n; i++) {
        const tj *k = &obj->u.items[2 * i];
        if (k->n == kn && !memcmp(k->u.s, key, kn))
            return &obj->u.items[2 * i + 1];
    }
    return NULL;
}

int tj_streq(const tj *v, const char *s)
{
    size_t n = strlen(s);
    return v && v->type == TJ_STR && v->n == n && !memcmp(v->u.s, s, n);
}

int tj_bool(const tj *v, int dflt)
{
    if (!v || v->type == TJ_NULL)
        return dflt;
    return v->type == TJ_TRUE;
}
