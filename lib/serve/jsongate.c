/* JSON mode: the byte automaton and the vocabulary trie (see jsongate.h). */
#define _GNU_SOURCE
#include "jsongate.h"

#include <stdlib.h>
#include <string.h>

enum { J_VALUE, J_OBJ_FIRST, J_OBJ_KEY, J_COLON, J_AFTER, J_ARR_FIRST, J_STR, J_NUM, J_LIT, J_DONE };
/* string: plain, after '\', in \uXXXX (pos digits read), after a high surrogate: '\' then 'u' wanted */
enum { S_CH, S_ESC, S_HEX, S_SUR_BS, S_SUR_U };
/* number: after '-', a leading 0, integer digits, '.', fraction digits, 'e', exponent sign, exponent digits */
enum { N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };
static const char *const LIT[] = {"true", "false", "null"};

void jg_init(jg_state *s)
{
    memset(s, 0, sizeof *s);
    s->mode = J_VALUE;
}

int jg_done(const jg_state *s) { return s->prog ? s->seg == s->prog->nseg : s->mode == J_DONE; }

static int is_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static int hexval(unsigned char c)
{
    return c >= '0' && c <= '9' ? c - '0' : (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (c | 0x20) - 'a' + 10 : -1;
}

/* a value ended: the containing one goes on, or the outermost object is complete */
static void value_done(jg_state *s) { s->mode = s->depth ? J_AFTER : J_DONE; }

static int top_is_object(const jg_state *s) { return s->depth && (s->stack >> (s->depth - 1) & 1); }

static int push(jg_state *s, int object)
{
    if (s->depth == JG_MAX_DEPTH)
        return 0;
    s->stack = (s->stack & ~(1ull << s->depth)) | ((uint64_t)object << s->depth);
    s->depth++;
    s->mode = object ? J_OBJ_FIRST : J_ARR_FIRST;
    return 1;
}

static void pop(jg_state *s)
{
    s->depth--;
    value_done(s);
}

/* a value's first byte (top level: only '{') */
static int value_start(jg_state *s, unsigned char c)
{
    if (c == '{')
        return push(s, 1);
    if (!s->depth)
        return 0;
    if (c == '[')
        return push(s, 0);
    if (c == '"') {
        s->mode = J_STR, s->sub = S_CH, s->key = 0, s->need = 0;
        return 1;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        s->mode = J_NUM, s->sub = c == '-' ? N_MINUS : c == '0' ? N_ZERO : N_INT;
        return 1;
    }
    for (int i = 0; i < 3; i++)
        if (c == (unsigned char)LIT[i][0]) {
            s->mode = J_LIT, s->sub = (uint8_t)i, s->pos = 1;
            return 1;
        }
    return 0;
}

static int feed_string(jg_state *s, unsigned char c)
{
    switch (s->sub) {
    case S_CH:
        if (s->need) { /* a UTF-8 continuation byte in [lo, hi] */
            if (c < s->lo || c > s->hi)
                return 0;
            s->need--, s->lo = 0x80, s->hi = 0xBF;
            return 1;
        }
        if (c == '"') {
            if (s->key)
                s->mode = J_COLON;
            else
                value_done(s);
            return 1;
        }
        if (c == '\\') {
            s->sub = S_ESC;
            return 1;
        }
        if (c < 0x20)
            return 0;
        if (c < 0x80)
            return 1;
        /* UTF-8 lead bytes, and the range of the byte after (no overlong forms, surrogates or > U+10FFFF) */
        if (c >= 0xC2 && c <= 0xDF)
            s->need = 1, s->lo = 0x80, s->hi = 0xBF;
        else if (c >= 0xE0 && c <= 0xEF)
            s->need = 2, s->lo = c == 0xE0 ? 0xA0 : 0x80, s->hi = c == 0xED ? 0x9F : 0xBF;
        else if (c >= 0xF0 && c <= 0xF4)
            s->need = 3, s->lo = c == 0xF0 ? 0x90 : 0x80, s->hi = c == 0xF4 ? 0x8F : 0xBF;
        else
            return 0;
        return 1;
    case S_ESC:
        if (c == 'u') {
            s->sub = S_HEX, s->pos = 0, s->hex = 0;
            return 1;
        }
        if (!c || !strchr("\"\\/bfnrt", c))
            return 0;
        s->sub = S_CH;
        return 1;
    case S_SUR_BS:
        if (c != '\\')
            return 0;
        s->sub = S_SUR_U;
        return 1;
    case S_SUR_U:
        if (c != 'u')
            return 0;
        s->sub = S_HEX, s->pos = 0, s->hex = 0;
        return 1;
    case S_HEX: {
        int v = hexval(c);
        if (v < 0)
            return 0;
        /* decided on the first two digits: D8-DB a high surrogate (a low one must follow), DC-DF a low
         * one (only right after a high one), anything else a plain character (not after a high one) */
        if (s->pos == 0 && s->hi_sur && v != 0xD)
            return 0;
        if (s->pos == 1 && s->hex == 0xD) {
            if (s->hi_sur ? v < 0xC : v >= 0xC)
                return 0;
        }
        s->hex = (uint16_t)(s->hex << 4 | v);
        if (++s->pos < 4)
            return 1;
        if (s->hi_sur)
            s->hi_sur = 0, s->sub = S_CH;
        else if (s->hex >= 0xD800 && s->hex <= 0xDBFF)
            s->hi_sur = 1, s->sub = S_SUR_BS;
        else
            s->sub = S_CH;
        return 1;
    }
    }
    return 0;
}

/* 1 taken, 0 refused, -1 the number ended before c (c belongs to what follows) */
static int feed_number(jg_state *s, unsigned char c)
{
    int digit = c >= '0' && c <= '9';
    switch (s->sub) {
    case N_MINUS:
        if (!digit)
            return 0;
        s->sub = c == '0' ? N_ZERO : N_INT;
        return 1;
    case N_ZERO:
    case N_INT:
        if (digit && s->sub == N_INT)
            return 1;
        if (c == '.') {
            s->sub = N_DOT;
            return 1;
        }
        if (c == 'e' || c == 'E') {
            s->sub = N_E;
            return 1;
        }
        return digit ? 0 : -1; /* 0 then a digit: refused */
    case N_DOT:
        if (!digit)
            return 0;
        s->sub = N_FRAC;
        return 1;
    case N_FRAC:
        if (digit)
            return 1;
        if (c == 'e' || c == 'E') {
            s->sub = N_E;
            return 1;
        }
        return -1;
    case N_E:
        if (c == '+' || c == '-') {
            s->sub = N_ESIGN;
            return 1;
        }
        /* fall through */
    case N_ESIGN:
        if (!digit)
            return 0;
        s->sub = N_EXP;
        return 1;
    case N_EXP:
        return digit ? 1 : -1;
    }
    return 0;
}

static int feed_json(jg_state *s, unsigned char c)
{
    switch (s->mode) {
    case J_STR:
        return feed_string(s, c);
    case J_NUM: {
        int r = feed_number(s, c);
        if (r >= 0)
            return r;
        s->mode = J_AFTER, s->ws = 0; /* the number is a value inside a container: depth > 0 */
        break;
    }
    case J_LIT:
        if (c != (unsigned char)LIT[s->sub][s->pos])
            return 0;
        if (!LIT[s->sub][++s->pos])
            value_done(s);
        return 1;
    case J_DONE:
        return 0;
    }
    if (is_ws(c)) {
        if (s->ws >= (s->mode == J_VALUE && !s->depth ? JG_MAX_LEAD_WS : JG_MAX_WS))
            return 0;
        s->ws++;
        return 1;
    }
    s->ws = 0;
    switch (s->mode) {
    case J_VALUE:
        return value_start(s, c);
    case J_ARR_FIRST:
        if (c == ']') {
            pop(s);
            return 1;
        }
        return value_start(s, c);
    case J_OBJ_FIRST:
        if (c == '}') {
            pop(s);
            return 1;
        }
        /* fall through */
    case J_OBJ_KEY:
        if (c != '"')
            return 0;
        s->mode = J_STR, s->sub = S_CH, s->key = 1, s->need = 0;
        return 1;
    case J_COLON:
        if (c != ':')
            return 0;
        s->mode = J_VALUE;
        return 1;
    case J_AFTER:
        if (c == ',') {
            s->mode = top_is_object(s) ? J_OBJ_KEY : J_VALUE;
            return 1;
        }
        if (c == (top_is_object(s) ? '}' : ']')) {
            pop(s);
            return 1;
        }
        return 0;
    }
    return 0;
}

/* ---------------------------------------------------------------- programs */

jg_prog *jg_prog_new(void) { return calloc(1, sizeof(jg_prog)); }

void jg_prog_free(jg_prog *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->nseg; i++)
        free(p->seg[i].lit);
    for (int i = 0; i < p->n_names; i++)
        free(p->names[i]);
    free(p->names);
    free(p);
}

int jg_prog_lit(jg_prog *p, const char *lit)
{
    if (p->nseg == JG_MAX_SEGS || !*lit || !(p->seg[p->nseg].lit = strdup(lit)))
        return -1;
    p->seg[p->nseg].kind = JG_LIT, p->seg[p->nseg++].n = strlen(lit);
    return 0;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int jg_prog_names(jg_prog *p, const char *const *names, int n)
{
    if (p->nseg == JG_MAX_SEGS || p->names || n < 1 || n > JG_MAX_NAMES || !(p->names = calloc((size_t)n, sizeof *p->names)))
        return -1;
    for (int i = 0; i < n; i++) {
        if (!*names[i] || strpbrk(names[i], "\"\\") || !(p->names[i] = strdup(names[i])))
            return -1;
        p->n_names++;
    }
    qsort(p->names, (size_t)n, sizeof *p->names, by_name);
    p->seg[p->nseg++].kind = JG_NAME;
    return 0;
}

int jg_prog_object(jg_prog *p)
{
    if (p->nseg == JG_MAX_SEGS)
        return -1;
    p->seg[p->nseg++].kind = JG_OBJECT;
    return 0;
}

/* the state at the start of segment i */
static void enter(jg_state *s, int i)
{
    const jg_prog *p = s->prog;
    jg_init(s);
    s->prog = p, s->seg = (uint8_t)i;
    if (i < p->nseg && p->seg[i].kind == JG_NAME)
        s->nlo = 0, s->nhi = (uint8_t)p->n_names;
}

void jg_init_prog(jg_state *s, const jg_prog *p)
{
    jg_init(s);
    s->prog = p;
    enter(s, 0);
}

static int feed(jg_state *s, unsigned char c)
{
    const jg_prog *p = s->prog;
    if (!p)
        return feed_json(s, c);
    while (s->seg < p->nseg) {
        int i = s->seg;
        switch (p->seg[i].kind) {
        case JG_LIT:
            if (c != (unsigned char)p->seg[i].lit[s->off])
                return 0;
            if (++s->off == p->seg[i].n)
                enter(s, i + 1);
            return 1;
        case JG_NAME: {
            /* names sharing the bytes so far are [nlo, nhi), sorted: those going on with c are a run */
            int lo = -1, hi = -1;
            for (int k = s->nlo; k < s->nhi; k++)
                if ((unsigned char)p->names[k][s->off] == c && c) {
                    if (lo < 0)
                        lo = k;
                    hi = k + 1;
                }
            if (lo >= 0) {
                s->nlo = (uint8_t)lo, s->nhi = (uint8_t)hi, s->off++;
                return 1;
            }
            if (!s->off || p->names[s->nlo][s->off]) /* no whole name yet (the shortest sorts first) */
                return 0;
            enter(s, i + 1); /* a whole name: c belongs to what follows */
            continue;
        }
        default: {
            if (!feed_json(s, c))
                return 0;
            if (s->mode == J_DONE)
                enter(s, i + 1);
            return 1;
        }
        }
    }
    return 0;
}

int jg_feed(jg_state *s, unsigned char c)
{
    jg_state t = *s;
    if (!feed(&t, c))
        return 0;
    *s = t;
    return 1;
}

int jg_feed_bytes(jg_state *s, const char *p, size_t n)
{
    jg_state t = *s;
    for (size_t i = 0; i < n; i++)
        if (!feed(&t, (unsigned char)p[i]))
            return 0;
    *s = t;
    return 1;
}

/* ---------------------------------------------------------------- the vocabulary */

struct jg_vocab {
    int V, n;         /* ids, and the tokens with a piece */
    int *id;          /* [n]: ids sorted by piece */
    uint32_t *lcp;    /* [n]: bytes shared with the piece before */
    size_t *off;      /* [V + 1]: piece of id i = bytes[off[i], off[i + 1]) */
    char *bytes;
    size_t max_len;
    uint8_t *plain; /* [V]: the piece leaves a string's plain state as it found it (text, escapes, whole characters) */
};

/* inside a string, between characters: where plain pieces are taken as they are */
static int string_plain(const jg_state *s)
{
    return (!s->prog || (s->seg < s->prog->nseg && s->prog->seg[s->seg].kind == JG_OBJECT)) && s->mode == J_STR &&
           s->sub == S_CH && !s->need && !s->hi_sur;
}

static int by_piece(const void *a, const void *b, void *arg)
{
    const jg_vocab *sort_v = arg;
    int x = *(const int *)a, y = *(const int *)b;
    size_t nx = sort_v->off[x + 1] - sort_v->off[x], ny = sort_v->off[y + 1] - sort_v->off[y];
    int c = memcmp(sort_v->bytes + sort_v->off[x], sort_v->bytes + sort_v->off[y], nx < ny ? nx : ny);
    return c ? c : nx != ny ? (nx < ny ? -1 : 1) : x - y;
}

jg_vocab *jg_vocab_build(int V, jg_piece_fn piece, void *arg, ogk_error *e)
{
    jg_vocab *v = calloc(1, sizeof *v);
    size_t cap = 1 << 20, used = 0;
    if (!v || !(v->off = calloc((size_t)V + 1, sizeof *v->off)) || !(v->bytes = malloc(cap)) ||
        !(v->id = malloc((size_t)V * sizeof *v->id)) || !(v->lcp = malloc((size_t)V * sizeof *v->lcp)))
        goto oom;
    v->V = V;
    for (int i = 0; i < V; i++) {
        char *p = NULL;
        size_t n = 0;
        int r = piece(arg, i, &p, &n);
        if (r < 0)
            goto oom;
        if (r > 0 && used + n > cap) {
            while (used + n > cap)
                cap *= 2;
            char *nb = realloc(v->bytes, cap);
            if (!nb) {
                free(p);
                goto oom;
            }
            v->bytes = nb;
        }
        if (r > 0 && n) {
            memcpy(v->bytes + used, p, n);
            used += n;
            v->id[v->n++] = i;
            v->max_len = n > v->max_len ? n : v->max_len;
        }
        free(p);
        v->off[i + 1] = used;
    }
    qsort_r(v->id, (size_t)v->n, sizeof *v->id, by_piece, v);
    if (!(v->plain = calloc((size_t)V, 1)))
        goto oom;
    for (int k = 0; k < v->n; k++) {
        size_t n;
        const char *p = jg_piece(v, v->id[k], &n);
        jg_state a;
        jg_init(&a);
        a.mode = J_STR, a.depth = 1, a.stack = 1;
        size_t i = 0;
        while (i < n && feed(&a, (unsigned char)p[i]) && a.mode == J_STR) /* never out of the string */
            i++;
        v->plain[v->id[k]] = i == n && string_plain(&a);
    }
    for (int k = 0; k < v->n; k++) {
        uint32_t l = 0;
        if (k) {
            size_t a, b;
            const char *pa = jg_piece(v, v->id[k - 1], &a), *pb = jg_piece(v, v->id[k], &b);
            while (l < a && l < b && pa[l] == pb[l])
                l++;
        }
        v->lcp[k] = l;
    }
    return v;
oom:
    jg_vocab_free(v);
    ogk_fail(e, "out of memory (the JSON mode's vocabulary)");
    return NULL;
}

static int tok_piece(void *t, int id, char **bytes, size_t *len) { return tok_piece_bytes(t, id, bytes, len); }

jg_vocab *jg_vocab_new(tok *t, int V, ogk_error *e) { return jg_vocab_build(V, tok_piece, t, e); }

void jg_vocab_free(jg_vocab *v)
{
    if (!v)
        return;
    free(v->id), free(v->lcp), free(v->off), free(v->bytes), free(v->plain);
    free(v);
}

const char *jg_piece(const jg_vocab *v, int id, size_t *len)
{
    if (id < 0 || id >= v->V || v->off[id + 1] == v->off[id]) {
        *len = 0;
        return NULL;
    }
    *len = v->off[id + 1] - v->off[id];
    return v->bytes + v->off[id];
}

int jg_allowed(const jg_vocab *v, const jg_state *s, uint8_t *allowed)
{
    memset(allowed, 0, (size_t)v->V);
    if (jg_done(s))
        return 0;
    /* st[d]: the state after the first d bytes of the current piece; states valid up to `have`; a piece
     * refused at byte d - 1 refuses every later piece sharing its first d bytes (`dead`) */
    jg_state stk[64], *st = v->max_len < 64 ? stk : malloc((v->max_len + 1) * sizeof *st);
    if (!st)
        return -1;
    st[0] = *s;
    /* inside a string, plain pieces are taken without a walk; the others resume from the bytes they share
     * with the last piece walked (the least of the common prefixes in between) */
    const int fast = string_plain(s);
    size_t have = 0, dead = (size_t)-1, lrun = (size_t)-1;
    int count = 0;
    for (int k = 0; k < v->n; k++) {
        size_t n, l = v->lcp[k] < lrun ? v->lcp[k] : lrun;
        if (fast && v->plain[v->id[k]]) {
            allowed[v->id[k]] = 1, count++;
            lrun = l;
            continue;
        }
        lrun = (size_t)-1;
        const char *p = jg_piece(v, v->id[k], &n);
        if (l >= dead)
            continue;
        dead = (size_t)-1;
        size_t d = l < have ? l : have;
        for (; d < n; d++) {
            st[d + 1] = st[d];
            if (!feed(&st[d + 1], (unsigned char)p[d]))
                break;
        }
        have = d;
        if (d == n)
            allowed[v->id[k]] = 1, count++;
        else
            dead = d + 1;
    }
    if (st != stk)
        free(st);
    return count;
}
