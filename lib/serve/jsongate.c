/* JSON mode: the byte automaton and the vocabulary trie (see jsongate.h). */
#define _GNU_SOURCE
#include "jsongate.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
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

/* white space between tokens: none, one space, or a line break and up to JG_MAX_INDENT spaces or tabs
 * (s->ws: 0 none yet, 0xFF after the space, 1 + the indentation after a line break) */
static int ws_step(jg_state *s, unsigned char c)
{
    if (!s->ws && (c == ' ' || c == '\n')) {
        s->ws = c == ' ' ? 0xFF : 1;
        return 1;
    }
    if ((c == ' ' || c == '\t') && s->ws >= 1 && s->ws <= JG_MAX_INDENT) {
        s->ws++;
        return 1;
    }
    return 0;
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
    if (!s->depth && !s->any)
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
        if (!s->depth) /* any value (a schema's): the number ended before c, which is not its */
            return -1;
        s->mode = J_AFTER, s->ws = 0;
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
    if (is_ws(c))
        return ws_step(s, c);
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
    for (int i = 0; i < p->nseg; i++) {
        free(p->seg[i].lit);
        jg_schema_free(p->seg[i].schema);
        for (int k = 0; p->seg[i].by_name && k < p->n_names; k++)
            jg_schema_free(p->seg[i].by_name[k]);
        free(p->seg[i].by_name);
    }
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

int jg_prog_schema(jg_prog *p, jg_schema *sc)
{
    if (p->nseg == JG_MAX_SEGS || !sc)
        return -1;
    p->seg[p->nseg].kind = JG_SCHEMA, p->seg[p->nseg++].schema = sc;
    return 0;
}

int jg_prog_schema_by_name(jg_prog *p, const char *const *names, jg_schema **schemas, int n)
{
    if (p->nseg == JG_MAX_SEGS || n != p->n_names || !(p->seg[p->nseg].by_name = calloc((size_t)n, sizeof(jg_schema *))))
        return -1;
    p->seg[p->nseg].kind = JG_SCHEMA;
    for (int i = 0; i < n; i++) /* the names were sorted: each schema goes where its name went */
        for (int k = 0; k < n; k++)
            if (!strcmp(p->names[k], names[i]))
                p->seg[p->nseg].by_name[k] = schemas[i];
    p->nseg++;
    return 0;
}

static const jg_schema *seg_schema(const jg_state *s, int i)
{
    return s->prog->seg[i].by_name ? s->prog->seg[i].by_name[s->pick] : s->prog->seg[i].schema;
}

static void schema_enter(jg_state *s, const jg_schema *sc);
static int feed_schema(jg_state *s, const jg_schema *sc, unsigned char c);

/* the state at the start of segment i */
static void enter(jg_state *s, int i)
{
    const jg_prog *p = s->prog;
    uint8_t pick = s->pick, br_n = s->br_n; /* a value that ended on its first byte: its alternatives stay counted */
    jg_init(s);
    s->prog = p, s->seg = (uint8_t)i, s->pick = pick, s->br_n = br_n;
    if (i < p->nseg && p->seg[i].kind == JG_NAME)
        s->nlo = 0, s->nhi = (uint8_t)p->n_names;
    if (i < p->nseg && p->seg[i].kind == JG_SCHEMA && seg_schema(s, i))
        schema_enter(s, seg_schema(s, i));
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
        return feed_json(s, c) > 0;
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
            s->pick = s->nlo;
            enter(s, i + 1); /* a whole name: c belongs to what follows */
            continue;
        }
        case JG_SCHEMA:
            if (seg_schema(s, i)) {
                int r = feed_schema(s, seg_schema(s, i), c);
                if (r > 0 && !s->fdepth)
                    enter(s, i + 1);
                if (r >= 0)
                    return r;
                enter(s, i + 1); /* the value ended before c */
                continue;
            }
            __attribute__((fallthrough)); /* no schema for this name: any object */
        default: {
            if (feed_json(s, c) <= 0)
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
    uint16_t *chars; /* [V]: a plain piece's characters (a \u pair one), for strings with a maxLength */
};

/* inside a string, between characters: where plain pieces are taken as they are */
static uint32_t string_room(const jg_state *s, const jg_schema *sc);
/* inside a string, between characters: plain pieces of up to the returned number of characters are taken
 * as they are (UINT32_MAX: any; 0: none, walk every piece) */
static uint32_t string_plain(const jg_state *s)
{
    if (s->mode != J_STR || s->sub != S_CH || s->need || s->hi_sur)
        return 0;
    if (!s->prog)
        return UINT32_MAX;
    if (s->seg >= s->prog->nseg || (s->prog->seg[s->seg].kind != JG_OBJECT && s->prog->seg[s->seg].kind != JG_SCHEMA))
        return 0;
    const jg_schema *sc = s->prog->seg[s->seg].kind == JG_SCHEMA ? seg_schema(s, s->seg) : NULL;
    return !sc || !s->fdepth ? UINT32_MAX : string_room(s, sc);
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
    if (!(v->plain = calloc((size_t)V, 1)) || !(v->chars = calloc((size_t)V, sizeof *v->chars)))
        goto oom;
    for (int k = 0; k < v->n; k++) {
        size_t n;
        const char *p = jg_piece(v, v->id[k], &n);
        jg_state a;
        jg_init(&a);
        a.mode = J_STR, a.depth = 1, a.stack = 1;
        size_t i = 0, chars = 0;
        for (; i < n; i++) { /* never out of the string; a character starts as in feed_schema's count */
            unsigned char c = (unsigned char)p[i];
            int starts = a.sub == S_CH && !a.need && c != '"';
            if (!feed(&a, c) || a.mode != J_STR)
                break;
            chars += starts;
        }
        v->chars[v->id[k]] = chars < UINT16_MAX ? (uint16_t)chars : UINT16_MAX;
        v->plain[v->id[k]] = i == n && string_plain(&a) != 0;
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

static int tok_piece(void *t, int id, char **bytes, size_t *len) { return tok_piece_bytes(t, id, 0, bytes, len); }

jg_vocab *jg_vocab_new(tok *t, int V, ogk_error *e) { return jg_vocab_build(V, tok_piece, t, e); }

void jg_vocab_free(jg_vocab *v)
{
    if (!v)
        return;
    free(v->id), free(v->lcp), free(v->off), free(v->bytes), free(v->plain), free(v->chars);
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

/* the part of a state in use: the fields and the schema frames of the walk */
static size_t state_bytes(const jg_state *s) { return offsetof(jg_state, f) + s->fdepth * sizeof s->f[0]; }

/* s, then c, taking the k-th of the alternatives c may begin (0 where c begins no choice); *nb: how many
 * there were (1 or 0 without a choice) */
static int feed_alt(jg_state *t, const jg_state *s, unsigned char c, int k, int *nb)
{
    memcpy(t, s, state_bytes(s));
    t->br_want = (uint8_t)k, t->br_n = 0;
    int ok = feed(t, c);
    *nb = t->br_n;
    t->br_want = 0, t->br_n = 0;
    return ok;
}

/* s takes all of p[0, n) along some path of alternatives */
static int accepts(const jg_state *s, const char *p, size_t n)
{
    jg_state t, u, w;
    memcpy(&t, s, state_bytes(s));
    for (size_t d = 0; d < n; d++) {
        int nb, nw, ok = feed_alt(&u, &t, (unsigned char)p[d], 0, &nb);
        for (int k = 1; k < nb; k++)
            if (feed_alt(&w, &t, (unsigned char)p[d], k, &nw) && accepts(&w, p + d + 1, n - d - 1))
                return 1;
        if (!ok)
            return 0;
        memcpy(&t, &u, state_bytes(&u));
    }
    return 1;
}

int jg_allowed(const jg_vocab *v, const jg_state *s, uint8_t *allowed)
{
    memset(allowed, 0, (size_t)v->V);
    if (jg_done(s))
        return 0;
    /* st[d]: the state after the first d bytes of the current piece along the first alternatives; states
     * valid up to `have`; nb[d + 1]: the alternatives byte d could begin there, brs[d]: choices among the
     * first d bytes. A piece refused at byte d - 1 without a choice before refuses every later piece
     * sharing its first d bytes (`dead`); with one, the other alternatives are walked (accepts). */
    jg_state stk[64], *st = stk;
    uint8_t nbk[65], *nb = nbk;
    uint32_t brk[65], *brs = brk;
    if (v->max_len >= 64) {
        st = malloc((v->max_len + 1) * (sizeof *st + sizeof *nb + sizeof *brs));
        if (!st)
            return -1;
        brs = (uint32_t *)(st + v->max_len + 1), nb = (uint8_t *)(brs + v->max_len + 1);
    }
    memcpy(&st[0], s, state_bytes(s));
    st[0].br_want = 0, st[0].br_n = 0, brs[0] = 0;
    /* inside a string, plain pieces are taken without a walk; the others resume from the bytes they share
     * with the last piece walked (the least of the common prefixes in between) */
    const uint32_t room = string_plain(s); /* plain pieces of up to this many characters go without a walk */
    size_t have = 0, dead = (size_t)-1, lrun = (size_t)-1;
    int count = 0;
    for (int k = 0; k < v->n; k++) {
        size_t n, l = v->lcp[k] < lrun ? v->lcp[k] : lrun;
        if (room && v->plain[v->id[k]] && v->chars[v->id[k]] <= room) {
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
        int fb = 0; /* the alternatives of the byte refused */
        for (; d < n; d++) {
            int alts;
            if (!feed_alt(&st[d + 1], &st[d], (unsigned char)p[d], 0, &alts)) {
                fb = alts;
                break;
            }
            nb[d + 1] = (uint8_t)alts, brs[d + 1] = brs[d] + (alts > 1);
        }
        have = d;
        int ok = d == n;
        if (!ok && !brs[d] && fb <= 1)
            dead = d + 1;
        for (size_t b = 0; !ok && b <= d && (brs[d] || fb > 1); b++) {
            int alts = b < d ? nb[b + 1] : fb, x;
            for (int i = 1; i < alts && !ok; i++) {
                jg_state u;
                ok = feed_alt(&u, &st[b], (unsigned char)p[b], i, &x) && accepts(&u, p + b + 1, n - b - 1);
            }
        }
        if (ok)
            allowed[v->id[k]] = 1, count++;
    }
    if (st != stk)
        free(st);
    return count;
}

/* ---------------------------------------------------------------- schemas */

enum { K_ANY, K_ANYOBJ, K_OBJECT, K_ARRAY, K_STRING, K_NUMBER, K_INTEGER, K_MAP, K_LITS, K_ANYOF };
#define MAX_NODES 512
#define MAX_PROPS 64
#define MAX_LITS 255
#define MAX_REFS 64

typedef struct jnode {
    int kind, n;       /* n: properties, literals or alternatives */
    char **key;        /* object: property names (in order), their value nodes, the required ones */
    size_t *klen;
    int *sub;          /* object: value nodes; anyOf: alternatives */
    uint64_t req;
    int items;         /* array: the items after the prefix (-1: none); map: the values */
    int *pfx, npfx;    /* array: the first items' nodes (prefixItems, or draft 4's "items" list) */
    int keys;          /* map: the node its keys are strings of */
    char **lit;        /* literals: compact JSON texts, sorted */
    size_t *llen;
    uint8_t first[32]; /* the bytes a value of the node may start with */
    uint32_t cmin, cmax; /* string: characters, array: items, map: keys (cmax UINT32_MAX: no bound) */
    jgre *re;            /* string: its pattern (NULL: none) */
    int bounded;         /* number / integer: lo, hi hold (integer: inclusive integers) */
    uint8_t lo_ex, hi_ex;
    double lo, hi;
    int frames; /* the fewest schema frames a value of the node takes (JG_SCHEMA_DEPTH at most; FRAMES_NONE: no value) */
} jnode;
#define FRAMES_NONE (1 << 20)

struct jg_schema {
    int n, root;
    jnode node[];
};

void jg_schema_free(jg_schema *sc)
{
    if (!sc)
        return;
    for (int i = 0; i < sc->n; i++) {
        jnode *n = &sc->node[i];
        for (int k = 0; n->key && k < n->n; k++)
            free(n->key[k]);
        for (int k = 0; n->lit && k < n->n; k++)
            free(n->lit[k]);
        free(n->key), free(n->klen), free(n->sub), free(n->lit), free(n->llen), free(n->pfx);
        jgre_free(n->re);
    }
    free(sc);
}

typedef struct {
    jg_schema *sc;
    const json_t *root;
    const char *ref[MAX_REFS];
    int ref_node[MAX_REFS], n_refs;
    char *err;
    size_t errn;
} cctx;

#define CFAIL(...) (snprintf(c->err, c->errn, __VA_ARGS__), -1)

static void first_set(uint8_t *f, const char *chars)
{
    for (; *chars; chars++)
        f[(unsigned char)*chars >> 3] |= (uint8_t)(1u << ((unsigned char)*chars & 7));
}

static int new_node(cctx *c, int kind)
{
    if (c->sc->n == MAX_NODES)
        return CFAIL("json_schema: more than %d nodes", MAX_NODES);
    jnode *n = &c->sc->node[c->sc->n];
    memset(n, 0, sizeof *n);
    n->kind = kind;
    n->cmax = UINT32_MAX, n->lo = -INFINITY, n->hi = INFINITY;
    static const char *const starts[] = {"{[\"-0123456789tfn", "{", "{", "[", "\"", "-0123456789", "-0123456789", "{"};
    if (kind < K_LITS)
        first_set(n->first, starts[kind]);
    return c->sc->n++;
}

static int by_text(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* literals (enum, const, boolean, null): their compact JSON texts */
static int lits_node(cctx *c, const json_t *vals, const char *where)
{
    size_t nv = json_array_size(vals);
    if (!nv || nv > MAX_LITS)
        return CFAIL("json_schema: %s: 1 to %d values", where, MAX_LITS);
    int id = new_node(c, K_LITS);
    if (id < 0)
        return -1;
    jnode *n = &c->sc->node[id];
    if (!(n->lit = calloc(nv, sizeof *n->lit)) || !(n->llen = calloc(nv, sizeof *n->llen)))
        return CFAIL("out of memory");
    for (size_t i = 0; i < nv; i++) {
        if (!(n->lit[i] = json_dumps(json_array_get(vals, i), JSON_COMPACT | JSON_ENCODE_ANY)))
            return CFAIL("out of memory");
        n->n++;
        for (size_t k = 0; k < i; k++)
            if (!strcmp(n->lit[k], n->lit[i]))
                return CFAIL("json_schema: %s: the value %.64s is given twice", where, n->lit[i]);
    }
    qsort(n->lit, nv, sizeof *n->lit, by_text);
    for (size_t i = 0; i < nv; i++) {
        n->llen[i] = strlen(n->lit[i]);
        first_set(n->first, (char[]){n->lit[i][0], 0});
    }
    return id;
}

static int compile(cctx *c, const json_t *s, const char *where, int depth);

/* anyOf / oneOf / a list of types: a value's first byte takes the alternatives that may begin with it
 * (start_value; several of them fork the walk: jg_gate) */
static int anyof_node(cctx *c, int *alts, int na)
{
    int id = new_node(c, K_ANYOF);
    if (id < 0)
        return -1;
    jnode *n = &c->sc->node[id];
    if (!(n->sub = malloc((size_t)na * sizeof *n->sub)))
        return CFAIL("out of memory");
    for (int i = 0; i < na; i++) {
        const jnode *a = &c->sc->node[alts[i]];
        for (int b = 0; b < 32; b++)
            n->first[b] |= a->first[b];
        n->sub[n->n++] = alts[i];
    }
    return id;
}

/* a string or an array, with its bounds on characters or items (kmin, kmax) */
static int counted_node(cctx *c, const json_t *s, int kind, const char *kmin, const char *kmax, const char *where)
{
    const json_t *a = json_object_get(s, kmin), *b = json_object_get(s, kmax);
    if ((a && (!json_is_integer(a) || json_integer_value(a) < 0)) || (b && (!json_is_integer(b) || json_integer_value(b) < 0)))
        return CFAIL("json_schema: %s: %s must be a non-negative integer", where, a && !(json_is_integer(a) && json_integer_value(a) >= 0) ? kmin : kmax);
    if (a && json_integer_value(a) >= UINT32_MAX)
        return CFAIL("json_schema: %s: %s %" JSON_INTEGER_FORMAT " is larger than this server supports", where, kmin,
                     json_integer_value(a));
    if (a && b && json_integer_value(a) > json_integer_value(b))
        return CFAIL("json_schema: %s: %s %" JSON_INTEGER_FORMAT " is larger than %s %" JSON_INTEGER_FORMAT
                     " (no value could keep to both)", where, kmin, json_integer_value(a), kmax, json_integer_value(b));
    int id = new_node(c, kind);
    if (id < 0)
        return -1;
    jnode *n = &c->sc->node[id];
    n->cmin = a ? (uint32_t)json_integer_value(a) : 0;
    n->cmax = b && json_integer_value(b) < UINT32_MAX ? (uint32_t)json_integer_value(b) : UINT32_MAX;
    return id;
}

#define NUM_MAX 999999999999999.0 /* the largest integer of JG_NUM_DIGITS digits */

/* x is written exactly in at most JG_NUM_DIGITS digits without an exponent (as a bounded number must be) */
static int writable(double x)
{
    char buf[64];
    for (int k = 0; k < JG_NUM_DIGITS; k++) {
        snprintf(buf, sizeof buf, "%.*f", k, x);
        int digits = 0;
        for (const char *p = buf; *p; p++)
            digits += *p >= '0' && *p <= '9';
        if (digits > JG_NUM_DIGITS)
            return 0;
        if (strtod(buf, NULL) == x)
            return 1;
    }
    return 0;
}

/* a number or an integer, with its bounds: minimum / maximum, exclusiveMinimum / exclusiveMaximum as numbers
 * (draft 6 on) or as booleans beside the other two (draft 4) */
static int number_node(cctx *c, const json_t *s, int integer, const char *where)
{
    static const char *const kw[4] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
    const json_t *v[4];
    double lo = -INFINITY, hi = INFINITY;
    int lo_ex = 0, hi_ex = 0, any = 0;
    for (int i = 0; i < 4; i++)
        v[i] = json_object_get(s, kw[i]);
    for (int i = 0; i < 4; i++) {
        if (!v[i])
            continue;
        any = 1;
        if (i >= 2 && json_is_boolean(v[i])) {
            if (!v[i - 2] && json_is_true(v[i]))
                return CFAIL("json_schema: %s: %s true without %s", where, kw[i], kw[i - 2]);
            continue;
        }
        if (!json_is_number(v[i]))
            return CFAIL("json_schema: %s: %s must be a number", where, kw[i]);
        double x = json_number_value(v[i]);
        /* a lower bound under -1e15 or an upper one over 1e15 keeps out no number of JG_NUM_DIGITS digits
         * (zod's z.number().int() bounds every integer by -(2^53 - 1) and 2^53 - 1): taken as 1e15 */
        if (i % 2 == 0 ? x < -1e15 : x > 1e15)
            x = copysign(1e15, x);
        if (!(fabs(x) <= 1e15))
            return CFAIL("json_schema: %s: %s %g: bounds beyond 1e15 in size are not supported", where, kw[i], x);
        /* the tighter of minimum and exclusiveMinimum (maximum and exclusiveMaximum) */
        int ex = i >= 2 || (v[i + 2] && json_is_true(v[i + 2]));
        if (i % 2 == 0 && (x > lo || (x == lo && ex)))
            lo = x, lo_ex = ex;
        if (i % 2 == 1 && (x < hi || (x == hi && ex)))
            hi = x, hi_ex = ex;
    }
    int id = new_node(c, integer ? K_INTEGER : K_NUMBER);
    if (id < 0 || !any)
        return id;
    if (integer) { /* inclusive integer bounds */
        double l = ceil(lo), h = floor(hi);
        if (lo_ex && l == lo)
            l += 1;
        if (hi_ex && h == hi)
            h -= 1;
        lo = l, hi = h, lo_ex = hi_ex = 0;
        if (lo > hi)
            return CFAIL("json_schema: %s: no integer lies within its bounds", where);
        if (lo > NUM_MAX || hi < -NUM_MAX)
            return CFAIL("json_schema: %s: no integer of at most %d digits lies within its bounds", where, JG_NUM_DIGITS);
    } else {
        /* at JG_NUM_DIGITS digits, numbers of size x lie some 1e-14 x apart: a range narrower than that
         * (other than one value those digits write) might hold none of them */
        if (lo >= 1e15 || hi <= -1e15)
            return CFAIL("json_schema: %s: no number of at most %d digits lies within its bounds", where, JG_NUM_DIGITS);
        int exact = lo == hi && !lo_ex && !hi_ex && writable(lo);
        double size = fmax(1.0, fmax(fabs(lo), fabs(hi)));
        if (!exact && !(hi - lo >= 1e-13 * size))
            return CFAIL("json_schema: %s: its bounds leave too narrow a range for numbers of %d digits", where, JG_NUM_DIGITS);
    }
    jnode *n = &c->sc->node[id];
    n->bounded = 1, n->lo = lo, n->hi = hi, n->lo_ex = (uint8_t)lo_ex, n->hi_ex = (uint8_t)hi_ex;
    return id;
}

/* "format" (an annotation in JSON Schema, but what validators such as ajv-formats check answers against):
 * these become the pattern that writes them, unless the schema has its own pattern or lengths (then the
 * format stays an annotation, as any other format does). Every string they take is valid in its format:
 * RFC 3339 full-date (days per month, 29 February in leap years only), full-time with an offset (seconds
 * 00-59, at most 6 fraction digits, "T" and "Z" upper case), RFC 4122 UUIDs, dotted-quad IPv4 without
 * leading zeros, and dot-atom e-mail addresses whose domain has a dot (labels of letters, digits and
 * inner hyphens, their length not bounded). */
#define FMT_DATE "(\\d{4}-((0[13578]|1[02])-(0[1-9]|[12]\\d|3[01])|(0[469]|11)-(0[1-9]|[12]\\d|30)|02-(0[1-9]|1\\d|2[0-8]))" \
                 "|\\d\\d(0[48]|[2468][048]|[13579][26])-02-29|([02468][048]|[13579][26])00-02-29)"
#define FMT_TIME "([01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(\\.\\d{1,6})?(Z|[+-]([01]\\d|2[0-3]):[0-5]\\d)"
#define FMT_OCTET "(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)"
#define FMT_LABEL "[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?"
static const struct {
    const char *name, *re;
} FORMATS[] = {
    {"date", "^" FMT_DATE "$"},
    {"time", "^" FMT_TIME "$"},
    {"date-time", "^" FMT_DATE "T" FMT_TIME "$"},
    {"uuid", "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"},
    {"ipv4", "^(" FMT_OCTET "\\.){3}" FMT_OCTET "$"},
    {"email", "^[A-Za-z0-9_%+-]+(\\.[A-Za-z0-9_%+-]+)*@" FMT_LABEL "(\\." FMT_LABEL ")+$"},
};

/* an array: its items' schema ("items"), the first ones' own (a tuple: "prefixItems", or draft 4's list in
 * "items" with "additionalItems" for the rest; false: no more), minItems / maxItems; uniqueItems only where
 * at most one item may come (the walk keeps no memory of the items) */
static int array_node(cctx *c, const json_t *s, const char *where, int depth)
{
    const json_t *items = json_object_get(s, "items"), *pfx = json_object_get(s, "prefixItems"),
                 *uq = json_object_get(s, "uniqueItems");
    if (pfx && json_is_array(items))
        return CFAIL("json_schema: %s: prefixItems beside a list in items", where);
    if (json_is_array(items)) /* draft 4 to 2019-09 */
        pfx = items, items = json_object_get(s, "additionalItems");
    if (pfx && (!json_is_array(pfx) || json_array_size(pfx) > 64))
        return CFAIL("json_schema: %s: prefixItems must be a list of up to 64 schemas", where);
    if (uq && !json_is_boolean(uq))
        return CFAIL("json_schema: %s: uniqueItems must be a boolean", where);
    int id = counted_node(c, s, K_ARRAY, "minItems", "maxItems", where);
    if (id < 0)
        return -1;
    uint32_t np = (uint32_t)json_array_size(pfx);
    jnode *n = &c->sc->node[id];
    if (json_is_false(items) && n->cmax > np)
        n->cmax = np;
    if (n->cmin > n->cmax)
        return CFAIL("json_schema: %s: minItems %u is more than the %u items it may have", where, n->cmin, n->cmax);
    if (json_is_true(uq) && n->cmax > 1)
        return CFAIL("json_schema: %s: uniqueItems true is not supported (the answer keeps no memory of its items; "
                     "maxItems 1 would keep to it)", where);
    if (np && !(n->pfx = malloc(np * sizeof *n->pfx)))
        return CFAIL("out of memory");
    char w[256];
    for (uint32_t i = 0; i < np; i++) {
        snprintf(w, sizeof w, "%.200s.prefixItems[%u]", where, i);
        int it = compile(c, json_array_get(pfx, i), w, depth + 1);
        if (it < 0)
            return -1;
        n = &c->sc->node[id];
        n->pfx[n->npfx++] = it;
    }
    snprintf(w, sizeof w, "%.200s.items", where);
    int it = items && !json_is_false(items) ? compile(c, items, w, depth + 1) : new_node(c, K_ANY);
    if (it < 0)
        return -1;
    c->sc->node[id].items = it;
    return id;
}

/* an object of keys of its own (a dict): every value of additionalProperties' schema, or of the one
 * patternProperties pattern's (the keys then matching it); the keys strings of propertyNames' schema;
 * minProperties / maxProperties count them. A key may come twice (the walk keeps no memory of them). */
static int map_node(cctx *c, const json_t *s, const char *where, int depth)
{
    const json_t *pp = json_object_get(s, "patternProperties"), *add = json_object_get(s, "additionalProperties"),
                 *pn = json_object_get(s, "propertyNames"), *vs = add;
    const char *pat = NULL;
    if (json_object_size(pp)) {
        void *it = json_object_iter((json_t *)pp);
        pat = json_object_iter_key(it), vs = json_object_iter_value(it);
        if (pn)
            return CFAIL("json_schema: %s: propertyNames beside patternProperties is not supported", where);
    }
    int id = counted_node(c, s, K_MAP, "minProperties", "maxProperties", where);
    if (id < 0)
        return -1;
    if (c->sc->node[id].cmin > 1) /* JSON parsers keep one of two equal keys: the object would have fewer */
        return CFAIL("json_schema: %s: minProperties above 1 without properties is not supported (the answer keeps "
                     "no memory of its keys, and a key written twice counts once)", where);
    if ((!pat && json_is_false(add)) || (pat && json_is_false(vs))) { /* no key at all */
        if (c->sc->node[id].cmin)
            return CFAIL("json_schema: %s: minProperties beside additionalProperties false and no properties", where);
        c->sc->node[id].cmax = 0;
    }
    json_t *ks;
    if (pn && !json_is_object(pn) && !json_is_true(pn))
        return CFAIL("json_schema: %s: propertyNames must be a schema", where);
    if (json_is_object(pn) && !json_object_get(pn, "type") &&
        (json_object_get(pn, "pattern") || json_object_get(pn, "minLength") || json_object_get(pn, "maxLength") ||
         json_object_get(pn, "format")))
        ks = json_copy((json_t *)pn), json_object_set_new(ks, "type", json_string("string")); /* names are strings */
    else if (json_is_object(pn))
        ks = json_incref((json_t *)pn);
    else
        ks = pat ? json_pack("{s:s,s:s}", "type", "string", "pattern", pat) : json_pack("{s:s}", "type", "string");
    if (!ks)
        return CFAIL("out of memory");
    char w[256];
    snprintf(w, sizeof w, "%.200s.%s", where, pat ? "patternProperties" : "propertyNames");
    int k = compile(c, ks, w, depth + 1);
    json_decref(ks);
    if (k < 0)
        return -1;
    uint8_t quote[32] = {0};
    first_set(quote, "\"");
    if (memcmp(c->sc->node[k].first, quote, sizeof quote))
        return CFAIL("json_schema: %s: property names are strings (its schema allows other values)", w);
    snprintf(w, sizeof w, "%.200s.%s", where, pat ? "patternProperties" : "additionalProperties");
    int v = vs && json_is_object(vs) ? compile(c, vs, w, depth + 1) : new_node(c, K_ANY);
    if (v < 0)
        return -1;
    c->sc->node[id].keys = k, c->sc->node[id].items = v;
    return id;
}

static int type_node(cctx *c, const json_t *s, const char *type, const char *where, int depth)
{
    char w[256];
    if (!strcmp(type, "string")) {
        const json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
        if (pat && !json_is_string(pat))
            return CFAIL("json_schema: %s: pattern must be a string", where);
        if (pat && (json_object_get(s, "minLength") || json_object_get(s, "maxLength")))
            return CFAIL("json_schema: %s: pattern beside minLength or maxLength is not supported (say the length in "
                         "the pattern)", where);
        const char *re = pat ? json_string_value(pat) : NULL;
        size_t re_n = pat ? json_string_length(pat) : 0;
        for (size_t i = 0; !re && json_is_string(fmt) && !json_object_get(s, "minLength") &&
                           !json_object_get(s, "maxLength") && i < sizeof FORMATS / sizeof *FORMATS; i++)
            if (!strcmp(json_string_value(fmt), FORMATS[i].name))
                re = FORMATS[i].re, re_n = strlen(re);
        int id = counted_node(c, s, K_STRING, "minLength", "maxLength", where);
        if (id < 0 || !re)
            return id;
        char e[256];
        if (!(c->sc->node[id].re = jgre_compile(re, re_n, e, sizeof e)))
            return CFAIL("json_schema: %s: %s", where, e);
        return id;
    }
    if (!strcmp(type, "number") || !strcmp(type, "integer"))
        return number_node(c, s, !strcmp(type, "integer"), where);
    if (!strcmp(type, "boolean") || !strcmp(type, "null")) {
        json_t *v = !strcmp(type, "null") ? json_pack("[n]") : json_pack("[bb]", 0, 1);
        int id = v ? lits_node(c, v, where) : CFAIL("out of memory");
        json_decref(v);
        return id;
    }
    if (!strcmp(type, "array"))
        return array_node(c, s, where, depth);
    if (strcmp(type, "object"))
        return CFAIL("json_schema: %s: unknown type '%.32s'", where, type);
    const json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required"),
                 *add = json_object_get(s, "additionalProperties"), *pp = json_object_get(s, "patternProperties");
    if (pp && (!json_is_object(pp) || json_object_size(pp) > 1 || props))
        return CFAIL("json_schema: %s: patternProperties is supported as one pattern, without properties", where);
    int free_add = !add || json_is_true(add) || (json_is_object(add) && !json_object_size(add));
    if (!props && json_array_size(req)) {
        /* required keys without properties: an object of those keys (no others), each value of
         * additionalProperties' schema (or any value) */
        if (pp || json_object_get(s, "propertyNames"))
            return CFAIL("json_schema: %s: required beside patternProperties or propertyNames (without properties) "
                         "is not supported", where);
        if (json_is_false(add))
            return CFAIL("json_schema: %s: required keys, but no properties and additionalProperties false: no "
                         "object keeps to it", where);
        json_t *o = json_pack("{s:s, s:{}, s:O}", "type", "object", "properties", "required", req);
        if (!o)
            return CFAIL("out of memory");
        json_t *ps = json_object_get(o, "properties");
        size_t i;
        const json_t *r;
        json_array_foreach(req, i, r)
        {
            if (!json_is_string(r) || json_object_set(ps, json_string_value(r), json_is_object(add) ? (json_t *)add : json_true())) {
                json_decref(o);
                return CFAIL("json_schema: %s.required[%zu] must be a string", where, i);
            }
        }
        for (const char *const *b = (const char *const[]){"minProperties", "maxProperties", NULL}; *b; b++)
            if (json_object_get(s, *b))
                json_object_set(o, *b, json_object_get(s, *b));
        int id = type_node(c, o, "object", where, depth);
        json_decref(o);
        return id;
    }
    if (!props && (pp || (!free_add && !json_is_false(add)) || json_object_get(s, "propertyNames") ||
                   json_object_get(s, "minProperties") || json_object_get(s, "maxProperties")))
        return map_node(c, s, where, depth); /* keys of their own (a dict, say) */
    if (!props && free_add)
        return new_node(c, K_ANYOBJ); /* any object */
    if (props && !free_add && !json_is_false(add))
        return CFAIL("json_schema: %s: additionalProperties with a schema beside properties is not supported", where);
    if (json_object_get(s, "propertyNames"))
        return CFAIL("json_schema: %s: propertyNames beside properties is not supported", where);
    if (props && !json_is_object(props))
        return CFAIL("json_schema: %s.properties must be an object", where);
    size_t np = json_object_size(props);
    if (np > MAX_PROPS)
        return CFAIL("json_schema: %s: more than %d properties", where, MAX_PROPS);
    int id = new_node(c, K_OBJECT);
    if (id < 0)
        return -1;
    jnode *n = &c->sc->node[id];
    if (np && (!(n->key = calloc(np, sizeof *n->key)) || !(n->klen = calloc(np, sizeof *n->klen)) ||
               !(n->sub = calloc(np, sizeof *n->sub))))
        return CFAIL("out of memory");
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)props, k, v)
    {
        for (const char *p = k; *p; p++)
            if ((unsigned char)*p < 0x20 || *p == '"' || *p == '\\')
                return CFAIL("json_schema: %s: property names with '\"', '\\\\' or control characters are not supported", where);
        snprintf(w, sizeof w, "%.120s.properties.%.64s", where, k);
        int sub = compile(c, v, w, depth + 1);
        if (sub < 0)
            return -1;
        n = &c->sc->node[id]; /* compile may not move nodes, but keep the pointer fresh */
        int i = n->n++;
        if (!(n->key[i] = strdup(k)))
            return CFAIL("out of memory");
        n->klen[i] = strlen(k), n->sub[i] = sub;
    }
    size_t i;
    const json_t *r;
    if (req && !json_is_array(req))
        return CFAIL("json_schema: %s.required must be an array", where);
    json_array_foreach(req, i, r)
    {
        int found = -1;
        for (int q = 0; json_is_string(r) && q < n->n; q++)
            if (!strcmp(n->key[q], json_string_value(r)))
                found = q;
        if (found < 0)
            return CFAIL("json_schema: %s.required[%zu] is not one of its properties", where, i);
        n->req |= 1ull << found;
    }
    /* beside properties, only bounds the object keeps anyway: the required keys are enough, all of them not too many */
    const json_t *pmin = json_object_get(s, "minProperties"), *pmax = json_object_get(s, "maxProperties");
    if ((pmin && (!json_is_integer(pmin) || json_integer_value(pmin) > __builtin_popcountll(n->req))) ||
        (pmax && (!json_is_integer(pmax) || json_integer_value(pmax) < n->n)))
        return CFAIL("json_schema: %s: minProperties / maxProperties beside properties are supported only where the "
                     "required properties reach the minimum and all of them stay within the maximum", where);
    return id;
}

/* the keywords a schema may have: annotations first (NOTES of them), then the ones the walk keeps to */
enum { NOTES = 16 };
static const char *const ANNOTATIONS[] = {"title", "description", "default", "examples", "format", "$schema", "$id",
                                          "$comment", "deprecated", "readOnly", "writeOnly", "$defs", "definitions",
                                          "discriminator", "contentEncoding", "contentMediaType", "type", "properties", "required", "additionalProperties", "items", "enum",
                                          "const", "anyOf", "oneOf", "$ref", "strict", "name", "prefixItems",
                                          "additionalItems", "patternProperties", "propertyNames", "allOf", "nullable"};
/* bounds, and the types that take them (type_node reads them) */
static const struct {
    const char *kw, *type, *type2;
} BOUNDS[] = {{"minLength", "string", NULL},       {"maxLength", "string", NULL},         {"pattern", "string", NULL},
              {"minItems", "array", NULL},
              {"maxItems", "array", NULL},         {"uniqueItems", "array", NULL},        {"minProperties", "object", NULL},
              {"maxProperties", "object", NULL},   {"minimum", "number", "integer"},      {"maximum", "number", "integer"},
              {"exclusiveMinimum", "number", "integer"}, {"exclusiveMaximum", "number", "integer"}};

/* the schema's "type" names t (a name or a list of names) */
static int has_type(const json_t *type, const char *t)
{
    if (!t)
        return 0;
    if (json_is_string(type))
        return !strcmp(json_string_value(type), t);
    size_t i;
    const json_t *v;
    json_array_foreach(type, i, v) if (json_is_string(v) && !strcmp(json_string_value(v), t)) return 1;
    return 0;
}

/* only annotations (and definitions) */
static int notes_only(const json_t *s)
{
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)s, k, v)
    {
        int a = 0;
        while (a < NOTES && strcmp(ANNOTATIONS[a], k))
            a++;
        if (a == NOTES || !strcmp(k, "format"))
            return 0;
    }
    return 1;
}

/* the definition a "#/$defs/NAME" or "#/definitions/NAME" reference names (NULL: none); *local: it has
 * one of those forms */
static const json_t *ref_target(const cctx *c, const char *r, int *local)
{
    if (r && !strcmp(r, "#")) { /* the whole schema (a tree of its own values) */
        if (local)
            *local = 1;
        return c->root;
    }
    const char *name = r && !strncmp(r, "#/$defs/", 8) ? r + 8 : r && !strncmp(r, "#/definitions/", 14) ? r + 14 : NULL;
    if (local)
        *local = name != NULL;
    return name ? json_object_get(json_object_get(c->root, r[2] == '$' ? "$defs" : "definitions"), name) : NULL;
}

/* the schemas whose values allOf asks for, each with its references followed and its own allOf taken
 * apart, appended to parts (n so far, at most 64) */
static int allof_parts(cctx *c, const json_t *s, const json_t **parts, int *n, const char *where, int hops)
{
    if (hops > 16)
        return CFAIL("json_schema: %s: allOf and $ref lead through more than 16 schemas", where);
    if (!json_is_object(s))
        return json_is_true(s) ? 0 : CFAIL("json_schema: %s: allOf's schemas must be objects", where);
    const json_t *ref = json_object_get(s, "$ref"), *all = json_object_get(s, "allOf");
    if (ref) {
        const char *r = json_string_value(ref);
        const json_t *t = ref_target(c, r, NULL);
        if (!t)
            return CFAIL("json_schema: %s: '%.64s' is not a definition of this schema", where, r ? r : "?");
        if (allof_parts(c, t, parts, n, where, hops + 1))
            return -1;
    }
    if (all) {
        size_t i;
        const json_t *v;
        if (!json_is_array(all) || !json_array_size(all))
            return CFAIL("json_schema: %s.allOf must be a list of schemas", where);
        json_array_foreach(all, i, v) if (allof_parts(c, v, parts, n, where, hops + 1)) return -1;
    }
    if (ref || all) { /* what stands beside them */
        const char *k;
        const json_t *v;
        json_object_foreach((json_t *)s, k, v) if (strcmp(k, "$ref") && strcmp(k, "allOf")) goto own;
        return 0;
    }
own:
    if (*n == 64)
        return CFAIL("json_schema: %s: allOf of more than 64 schemas", where);
    parts[(*n)++] = s;
    return 0;
}

/* allOf as the one schema that asks for all its parts' values: the parts' keywords together (one keyword
 * in two parts must say the same, but for properties, whose schemas in two parts become an allOf of both,
 * and required, which adds up); additionalProperties false in a part keeps only that part's properties.
 * A part that is only annotations asks nothing. NULL with the error filled. */
static json_t *allof_merge(cctx *c, const json_t *s, const char *where)
{
    const json_t *parts[64];
    int n = 0;
    if (allof_parts(c, s, parts, &n, where, 0))
        return NULL;
    json_t *out = json_object(), *props = json_object(), *req = json_array();
    if (!out || !props || !req)
        goto oom;
    for (int i = 0; i < n; i++) {
        const char *k;
        const json_t *v;
        if (notes_only(parts[i]))
            continue;
        json_object_foreach((json_t *)parts[i], k, v)
        {
            int a = 0;
            while (a < NOTES && strcmp(ANNOTATIONS[a], k))
                a++;
            if ((a < NOTES && strcmp(k, "format")) || !strcmp(k, "$ref") || !strcmp(k, "allOf"))
                continue;
            if (!strcmp(k, "properties")) {
                const char *pk;
                const json_t *pv;
                if (!json_is_object(v)) {
                    (void)CFAIL("json_schema: %s: allOf: properties must be an object", where);
                    goto fail;
                }
                json_object_foreach((json_t *)v, pk, pv)
                {
                    const json_t *old = json_object_get(props, pk);
                    json_t *both = !old || json_equal(old, pv) ? json_incref((json_t *)pv) : json_pack("{s:[OO]}", "allOf", old, pv);
                    if (!both || json_object_set_new(props, pk, both))
                        goto oom;
                }
            } else if (!strcmp(k, "required")) {
                size_t ri;
                const json_t *rv;
                json_array_foreach(v, ri, rv)
                {
                    size_t q = 0;
                    while (q < json_array_size(req) && !json_equal(json_array_get(req, q), rv))
                        q++;
                    if (q == json_array_size(req) && json_array_append(req, (json_t *)rv))
                        goto oom;
                }
            } else if (!strcmp(k, "additionalProperties") && (json_is_true(v) || (json_is_object(v) && !json_object_size(v)))) {
                continue;
            } else if (!strcmp(k, "additionalProperties") && !json_is_false(v)) {
                (void)CFAIL("json_schema: %s: allOf: additionalProperties with a schema is not supported", where);
                goto fail;
            } else if (json_object_get(out, k) && !json_equal(json_object_get(out, k), v)) {
                (void)CFAIL("json_schema: %s: allOf: its schemas give '%.64s' different values (not supported)", where, k);
                goto fail;
            } else if (json_object_set(out, k, (json_t *)v)) {
                goto oom;
            }
        }
    }
    /* additionalProperties false: only the properties of every part that says so */
    for (int i = 0; i < n; i++) {
        if (!json_is_false(json_object_get(parts[i], "additionalProperties")))
            continue;
        const json_t *own = json_object_get(parts[i], "properties");
        const char *pk;
        json_t *pv, *tmp;
        json_object_foreach_safe(props, tmp, pk, pv) if (!json_object_get(own, pk)) json_object_del(props, pk);
    }
    if (json_object_size(props) || json_is_false(json_object_get(out, "additionalProperties")))
        if (json_object_set(out, "properties", props))
            goto oom;
    if (json_array_size(req) && json_object_set(out, "required", req))
        goto oom;
    if (json_object_size(props) && !json_object_get(out, "type") && json_object_set_new(out, "type", json_string("object")))
        goto oom;
    json_decref(props), json_decref(req);
    return out;
oom:
    (void)CFAIL("out of memory");
fail:
    json_decref(out), json_decref(props), json_decref(req);
    return NULL;
}

static int compile(cctx *c, const json_t *s, const char *where, int depth)
{
    if (depth > 64)
        return CFAIL("json_schema: %s: nested more than 64 levels", where);
    if (json_is_true(s) || (json_is_object(s) && !json_object_size(s)))
        return new_node(c, K_ANY);
    if (!json_is_object(s))
        return CFAIL("json_schema: %s must be an object", where);
    const json_t *nul = json_object_get(s, "nullable");
    if (nul && !json_is_boolean(nul))
        return CFAIL("json_schema: %s: nullable must be a boolean", where);
    if (nul || json_object_get(s, "allOf")) {
        /* OpenAPI's nullable true: the value or null; allOf: the one schema that asks for all its parts */
        json_t *t = json_copy((json_t *)s);
        if (!t)
            return CFAIL("out of memory");
        json_object_del(t, "nullable");
        if (json_object_get(t, "allOf")) {
            json_t *m = allof_merge(c, t, where);
            json_decref(t);
            if (!(t = m))
                return -1;
        }
        if (json_is_true(nul)) {
            json_t *alt = json_pack("{s:[o{s:s}]}", "anyOf", t, "type", "null");
            if (!alt)
                return CFAIL("out of memory");
            t = alt;
        }
        int id = compile(c, t, where, depth + 1);
        json_decref(t);
        return id;
    }
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)s, k, v)
    {
        size_t a = 0, b = 0;
        while (a < sizeof ANNOTATIONS / sizeof *ANNOTATIONS && strcmp(ANNOTATIONS[a], k))
            a++;
        while (b < sizeof BOUNDS / sizeof *BOUNDS && strcmp(BOUNDS[b].kw, k))
            b++;
        if (a == sizeof ANNOTATIONS / sizeof *ANNOTATIONS && b == sizeof BOUNDS / sizeof *BOUNDS)
            return CFAIL("json_schema: %s: '%.64s' is not supported", where, k);
        /* a bound is kept where the schema's own type takes it: not beside $ref, enum, const or anyOf */
        const json_t *type = json_object_get(s, "type");
        if (b < sizeof BOUNDS / sizeof *BOUNDS &&
            (json_object_get(s, "$ref") || json_object_get(s, "enum") || json_object_get(s, "const") ||
             json_object_get(s, "anyOf") || json_object_get(s, "oneOf") ||
             !(has_type(type, BOUNDS[b].type) || has_type(type, BOUNDS[b].type2))))
            return CFAIL("json_schema: %s: '%s' is supported beside \"type\": \"%s\"%s%s%s only (not beside $ref, enum, "
                         "const or anyOf)", where, k, BOUNDS[b].type, BOUNDS[b].type2 ? " or \"" : "",
                         BOUNDS[b].type2 ? BOUNDS[b].type2 : "", BOUNDS[b].type2 ? "\"" : "");
    }
    const json_t *ref = json_object_get(s, "$ref");
    if (ref) {
        const char *r = json_string_value(ref);
        int local;
        const json_t *t = ref_target(c, r, &local);
        if (!local)
            return CFAIL("json_schema: %s: only \"#\", \"#/$defs/...\" and \"#/definitions/...\" references are supported", where);
        for (int i = 0; i < c->n_refs; i++)
            if (!strcmp(c->ref[i], r))
                return c->ref_node[i];
        if (!t)
            return CFAIL("json_schema: %s: '%.64s' is not defined", where, r);
        if (c->n_refs == MAX_REFS)
            return CFAIL("json_schema: more than %d references", MAX_REFS);
        /* a placeholder any-of of one, filled once the target is compiled: recursion ends here */
        int id = new_node(c, K_ANYOF);
        if (id < 0)
            return -1;
        c->ref[c->n_refs] = r, c->ref_node[c->n_refs++] = id;
        int tid = compile(c, t, r, depth + 1);
        if (tid < 0)
            return -1;
        jnode *n = &c->sc->node[id];
        if (!(n->sub = malloc(sizeof *n->sub)))
            return CFAIL("out of memory");
        n->sub[0] = tid, n->n = 1;
        memcpy(n->first, c->sc->node[tid].first, sizeof n->first);
        return id;
    }
    const json_t *e = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
    if (e)
        return json_is_array(e) ? lits_node(c, e, where) : CFAIL("json_schema: %s.enum must be an array", where);
    if (cn) {
        json_t *one = json_pack("[O]", cn);
        int id = one ? lits_node(c, one, where) : CFAIL("out of memory");
        json_decref(one);
        return id;
    }
    const json_t *any = json_object_get(s, "anyOf");
    any = any ? any : json_object_get(s, "oneOf");
    const json_t *type = json_object_get(s, "type");
    int alts[64], na = 0;
    char w[256];
    if (any) {
        if (!json_is_array(any) || !json_array_size(any) || json_array_size(any) > 64)
            return CFAIL("json_schema: %s.anyOf must be an array of 1 to 64 schemas", where);
        size_t i;
        json_array_foreach(any, i, v)
        {
            snprintf(w, sizeof w, "%.200s.anyOf[%zu]", where, i);
            if ((alts[na++] = compile(c, v, w, depth + 1)) < 0)
                return -1;
        }
        return na == 1 ? alts[0] : anyof_node(c, alts, na);
    }
    if (json_is_array(type)) {
        if (!json_array_size(type))
            return CFAIL("json_schema: %s.type is an empty list (no value is of none of the types)", where);
        size_t i;
        json_array_foreach(type, i, v)
        {
            if (!json_is_string(v) || i >= 8)
                return CFAIL("json_schema: %s.type must be a type name or a list of up to 8", where);
            if ((alts[na++] = type_node(c, s, json_string_value(v), where, depth)) < 0)
                return -1;
        }
        return na == 1 ? alts[0] : anyof_node(c, alts, na);
    }
    if (json_is_string(type))
        return type_node(c, s, json_string_value(type), where, depth);
    if (type)
        return CFAIL("json_schema: %s.type must be a type name or a list", where);
    if (json_object_get(s, "properties"))
        return type_node(c, s, "object", where, depth);
    return new_node(c, K_ANY); /* annotations only */
}

/* Each anyOf's first bytes, those of its alternatives: a reference met again while its target was being
 * compiled had none yet (a least fixed point, after compiling) */
static void settle_first(jg_schema *sc)
{
    for (int changed = 1; changed;) {
        changed = 0;
        for (int i = 0; i < sc->n; i++) {
            jnode *n = &sc->node[i];
            if (n->kind == K_ANYOF)
                for (int k = 0; k < n->n; k++)
                    for (int b = 0; b < 32; b++)
                        if (sc->node[n->sub[k]].first[b] & ~n->first[b])
                            n->first[b] |= sc->node[n->sub[k]].first[b], changed = 1;
        }
    }
}

/* Each node's fewest frames (jnode.frames): a value nests in its container's frame, so an object takes one
 * more than its most demanding required property, an array one more than its first minItems items, a
 * dict one more than a key and a value when it must have one, an anyOf its least alternative's, the rest
 * one. The least fixed point from "none" (references may lead back: a = {"a": a} required has none);
 * the walk (fits) offers only what can still end within JG_SCHEMA_DEPTH frames. Returns the root's. */
static int min_frames(jg_schema *sc)
{
    for (int i = 0; i < sc->n; i++)
        sc->node[i].frames = FRAMES_NONE;
    for (int changed = 1; changed;) {
        changed = 0;
        for (int i = 0; i < sc->n; i++) {
            jnode *n = &sc->node[i];
            int f = 1, m = 0;
            switch (n->kind) {
            case K_OBJECT:
                for (int k = 0; k < n->n; k++)
                    if (n->req >> k & 1)
                        m = sc->node[n->sub[k]].frames > m ? sc->node[n->sub[k]].frames : m;
                f = 1 + m;
                break;
            case K_ARRAY:
                for (uint32_t k = 0; k < n->cmin && k <= (uint32_t)n->npfx; k++) { /* past the prefix: items */
                    int it = k < (uint32_t)n->npfx ? n->pfx[k] : n->items;
                    int fi = it < 0 ? FRAMES_NONE : sc->node[it].frames;
                    m = fi > m ? fi : m;
                }
                f = 1 + m;
                break;
            case K_MAP:
                if (n->cmin)
                    f = 1 + (sc->node[n->items].frames > sc->node[n->keys].frames ? sc->node[n->items].frames
                                                                                   : sc->node[n->keys].frames);
                break;
            case K_ANYOF:
                f = FRAMES_NONE;
                for (int k = 0; k < n->n; k++)
                    f = sc->node[n->sub[k]].frames < f ? sc->node[n->sub[k]].frames : f;
                break;
            }
            f = f > FRAMES_NONE ? FRAMES_NONE : f;
            if (f < n->frames)
                n->frames = f, changed = 1;
        }
    }
    return sc->node[sc->root].frames;
}

jg_schema *jg_schema_compile(const json_t *schema, char *err, size_t errn)
{
    cctx c = {.root = schema, .err = err, .errn = errn};
    *err = 0;
    if (!(c.sc = calloc(1, sizeof *c.sc + MAX_NODES * sizeof(jnode)))) {
        snprintf(err, errn, "out of memory");
        return NULL;
    }
    if ((c.sc->root = compile(&c, schema, "schema", 0)) < 0) {
        jg_schema_free(c.sc);
        return NULL;
    }
    settle_first(c.sc);
    int f = min_frames(c.sc);
    if (f > JG_SCHEMA_DEPTH) {
        if (f == FRAMES_NONE)
            snprintf(err, errn, "json_schema: no value can keep to it: a required property or item leads back to its "
                                "own schema without end");
        else
            snprintf(err, errn, "json_schema: its least value nests %d values (objects, arrays and what they hold) "
                                "deep, more than the %d supported", f, JG_SCHEMA_DEPTH);
        jg_schema_free(c.sc);
        return NULL;
    }
    return c.sc;
}

/* ---- walking a schema */

enum { PH_START, PH_OBJ_FIRST, PH_KEY, PH_COLON, PH_OBJ_AFTER, PH_OBJ_NEXT, PH_ARR_FIRST, PH_ARR_AFTER, PH_ARR_ITEM,
       PH_STR, PH_NUM, PH_LIT, PH_ANY, PH_MAP_FIRST, PH_MAP_COLON, PH_MAP_AFTER, PH_MAP_NEXT };

static void schema_enter(jg_state *s, const jg_schema *sc)
{
    s->fdepth = 1;
    s->f[0].node = (uint16_t)sc->root, s->f[0].phase = PH_START, s->f[0].prop = 0, s->f[0].count = 0;
}

static void pop_value(jg_state *s)
{
    s->fdepth--;
    s->mode = J_DONE;
}

static int push_value(jg_state *s, int node)
{
    if (s->fdepth == JG_SCHEMA_DEPTH)
        return 0;
    s->f[s->fdepth].node = (uint16_t)node, s->f[s->fdepth].phase = PH_START, s->f[s->fdepth].prop = 0;
    s->f[s->fdepth].count = 0;
    s->fdepth++;
    return 1;
}

/* a value of node id, its frame at index at, can end within JG_SCHEMA_DEPTH frames */
static int fits(const jg_schema *sc, int id, int at) { return id >= 0 && sc->node[id].frames <= JG_SCHEMA_DEPTH - at; }

/* the keys that may come next in object n (its frame below index at): the properties from prop up to the
 * first required one, those whose values fit */
static uint64_t keys_from(const jg_schema *sc, const jnode *n, int prop, int at)
{
    uint64_t cand = 0;
    for (int k = prop; k < n->n; k++) {
        if (fits(sc, n->sub[k], at))
            cand |= 1ull << k;
        if (n->req >> k & 1)
            break;
    }
    return cand;
}

/* array n's item k (its frame at index at) may come: there is one, and it fits */
static int item_fits(const jg_schema *sc, const jnode *n, uint32_t k, int at)
{
    return k < n->cmax && fits(sc, k < (uint32_t)n->npfx ? n->pfx[k] : n->items, at);
}

static int in_first(const jnode *n, unsigned char c) { return n->first[c >> 3] >> (c & 7) & 1; }

int jg_schema_object(const jg_schema *sc)
{
    uint8_t only[32] = {0};
    first_set(only, "{");
    return !memcmp(sc->node[sc->root].first, only, sizeof only);
}

/* ---- bounded numbers: a prefix is taken only if some number it may still become lies within the bounds */

static const double P10[JG_NUM_DIGITS + 1] = {1e0, 1e1, 1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                              1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15};

/* the bounds hold some value of [a, b], magnitudes (0 <= a <= b) with the sign s->neg */
static int num_meets(const jnode *n, int neg, double a, double b)
{
    double x = neg ? -b : a, y = neg ? -a : b;
    return (n->hi_ex ? x < n->hi : x <= n->hi) && (n->lo_ex ? y > n->lo : y >= n->lo);
}

/* Some number this prefix may still become (end: the number as it stands, ending here) is in bounds. The
 * values a prefix reaches are ranges of magnitudes: all digits N so far (nint before the point, nfrac
 * after it) and room for JG_NUM_DIGITS in all; each range's ends are exact integers over a power of 10,
 * so they round as the same decimals written out would. */
static int num_live(const jnode *n, const jg_state *s, int end)
{
    int integer = n->kind == K_INTEGER, ni = s->nint, m = s->nfrac;
    double N = (double)s->num;
    if (end)
        return num_meets(n, s->neg, N / P10[m], N / P10[m]);
    if (!ni) /* only the sign: any magnitude of up to JG_NUM_DIGITS digits */
        return num_meets(n, s->neg, 0, P10[JG_NUM_DIGITS] - 1);
    if (s->sub == N_DOT || s->sub == N_FRAC) {
        int more = JG_NUM_DIGITS - ni - m; /* fraction digits still to come */
        return num_meets(n, s->neg, N / P10[m], ((N + 1) * P10[more] - 1) / P10[m + more]);
    }
    /* the integer part goes on with k more digits (none after a leading 0), then perhaps a fraction */
    for (int k = 0; k <= (s->num ? JG_NUM_DIGITS - ni : 0); k++) {
        int more = integer ? 0 : JG_NUM_DIGITS - ni - k;
        if (num_meets(n, s->neg, N * P10[k], ((N + 1) * P10[k] * P10[more] - 1) / P10[more]))
            return 1;
    }
    return 0;
}

/* a bounded number took c (feed_number said yes): no exponent, at most JG_NUM_DIGITS digits, still live */
static int num_step(jg_state *s, const jnode *n, unsigned char c)
{
    if (c == '-') {
        s->neg = 1;
    } else if (c >= '0' && c <= '9') {
        if (s->nint + s->nfrac >= JG_NUM_DIGITS)
            return 0;
        s->num = s->num * 10 + (c - '0');
        if (s->sub == N_FRAC)
            s->nfrac++;
        else
            s->nint++;
    } else if (c != '.' || s->nint >= JG_NUM_DIGITS) {
        return 0; /* an exponent, or no room for a fraction digit */
    }
    return num_live(n, s, 0);
}

/* the characters a string may still take (its maxLength less those written; UINT32_MAX: no bound) */
static uint32_t string_room(const jg_state *s, const jg_schema *sc)
{
    const jnode *n = &sc->node[s->f[s->fdepth - 1].node];
    if (n->kind == K_STRING && n->re)
        return 0; /* every piece walked: each character goes through the pattern */
    if (n->kind != K_STRING || n->cmax == UINT32_MAX)
        return UINT32_MAX;
    return n->cmax > s->f[s->fdepth - 1].count ? n->cmax - s->f[s->fdepth - 1].count : 0;
}

/* The alternatives of anyOf node id that a value beginning with c may be: its leaves (nodes of other kinds)
 * under the alternatives whose first bytes hold c, depth first, each once, at most MAX_LEAVES. Every
 * anyOf node visited costs one of *budget, so references that lead back to themselves end. */
#define MAX_LEAVES 64
#define MAX_LEAF_VISITS 256
static int anyof_leaves(const jg_schema *sc, int id, unsigned char c, int *leaf, int nl, int *budget)
{
    const jnode *n = &sc->node[id];
    if (!in_first(n, c))
        return nl;
    if (n->kind != K_ANYOF) {
        for (int i = 0; i < nl; i++)
            if (leaf[i] == id)
                return nl;
        if (nl < MAX_LEAVES)
            leaf[nl++] = id;
        return nl;
    }
    if ((*budget)-- <= 0)
        return nl;
    for (int k = 0; k < n->n; k++)
        nl = anyof_leaves(sc, n->sub[k], c, leaf, nl, budget);
    return nl;
}

/* the first byte of the top frame's value */
static int start_value(jg_state *s, const jg_schema *sc, unsigned char c)
{
    int d = s->fdepth - 1, id = s->f[d].node;
    if (!in_first(&sc->node[id], c))
        return 0;
    if (sc->node[id].kind == K_ANYOF) { /* the br_want-th of the alternatives c may begin */
        int leaf[MAX_LEAVES], budget = MAX_LEAF_VISITS, nl = anyof_leaves(sc, id, c, leaf, 0, &budget), m = 0;
        for (int i = 0; i < nl; i++) /* those that can end within the frames left */
            if (fits(sc, leaf[i], d))
                leaf[m++] = leaf[i];
        nl = m;
        s->br_n = (uint8_t)nl;
        if (s->br_want >= nl)
            return 0;
        id = leaf[s->br_want];
    }
    const jnode *n = &sc->node[id];
    s->f[d].node = (uint16_t)id;
    switch (n->kind) {
    case K_OBJECT:
        s->f[d].phase = PH_OBJ_FIRST, s->f[d].prop = 0;
        return 1;
    case K_ARRAY:
        s->f[d].phase = PH_ARR_FIRST;
        return 1;
    case K_MAP:
        s->f[d].phase = PH_MAP_FIRST, s->f[d].count = 0;
        return 1;
    case K_STRING:
        s->mode = J_STR, s->sub = S_CH, s->key = 0, s->need = 0, s->hi_sur = 0, s->depth = 0;
        s->f[d].phase = PH_STR, s->f[d].count = 0;
        if (n->re)
            s->re = jgre_start(n->re);
        return 1;
    case K_NUMBER:
    case K_INTEGER:
        s->mode = J_NUM, s->sub = c == '-' ? N_MINUS : c == '0' ? N_ZERO : N_INT;
        s->f[d].phase = PH_NUM;
        s->num = 0, s->nint = s->nfrac = s->neg = 0;
        return !n->bounded || num_step(s, n, c);
    case K_LITS: {
        int lo = -1, hi = -1;
        for (int k = 0; k < n->n; k++)
            if ((unsigned char)n->lit[k][0] == c) {
                if (lo < 0)
                    lo = k;
                hi = k + 1;
            }
        s->nlo = (uint8_t)lo, s->nhi = (uint8_t)hi, s->off = 1;
        s->f[d].phase = PH_LIT;
        if (hi - lo == 1 && n->llen[lo] == 1)
            pop_value(s);
        return 1;
    }
    default: /* any value, or any object: the free automaton from its first byte */
        s->mode = J_VALUE, s->depth = 0, s->stack = 0, s->any = n->kind == K_ANY, s->ws = 0;
        s->f[d].phase = PH_ANY;
        if (!value_start(s, c))
            return 0;
        if (s->mode == J_DONE)
            pop_value(s);
        return 1;
    }
}

/* some code point of [lo, hi] (surrogates left out) may come next */
static int can_direct(const jgre *re, jgre_set st, uint32_t lo, uint32_t hi)
{
    return (lo <= 0xD7FF && jgre_can(re, st, lo, hi < 0xD7FF ? hi : 0xD7FF)) ||
           (hi >= 0xE000 && jgre_can(re, st, lo > 0xE000 ? lo : 0xE000, hi));
}

/* the astral characters of high surrogates [lo, hi] */
static int can_astral(const jgre *re, jgre_set st, uint32_t lo, uint32_t hi)
{
    if (hi < 0xD800 || lo > 0xDBFF)
        return 0;
    lo = lo < 0xD800 ? 0xD800 : lo, hi = hi > 0xDBFF ? 0xDBFF : hi;
    return jgre_can(re, st, 0x10000 + ((lo - 0xD800) << 10), 0x10000 + ((hi - 0xD800) << 10) + 0x3FF);
}

/* a string with a pattern took byte c (its state before: sub0, need0, sur0): a character that ends here
 * steps the pattern, and one begun must still be able to end as a character it can take (so the walk never
 * stops inside a UTF-8 sequence or a \u escape with nothing to go on with). 0: refused. */
static int pattern_step(const jgre *re, jg_state *s, uint8_t sub0, uint8_t need0, uint8_t sur0, unsigned char c)
{
    uint32_t cp;
    if (sub0 == S_CH && !need0 && c < 0x80 && c != '\\') {
        cp = c;
        goto step;
    } else if (sub0 == S_CH && !need0 && c >= 0xC0) { /* a lead byte: the characters it can begin */
        s->cp = c & (c >= 0xF0 ? 0x07 : c >= 0xE0 ? 0x0F : 0x1F);
    } else if (sub0 == S_CH && need0) {
        s->cp = s->cp << 6 | (c & 0x3F);
        if (!s->need) {
            cp = s->cp;
            goto step;
        }
    } else if (sub0 == S_ESC && s->sub == S_CH) {
        cp = c == 'b' ? 8 : c == 'f' ? 12 : c == 'n' ? 10 : c == 'r' ? 13 : c == 't' ? 9 : c;
        goto step;
    } else if (sub0 == S_HEX && s->sub != S_HEX) { /* the fourth digit */
        if (s->sub == S_SUR_BS) {
            s->cp = s->hex; /* a high surrogate: its pair follows */
            return can_astral(re, s->re, s->cp, s->cp);
        }
        cp = sur0 ? 0x10000 + ((s->cp - 0xD800) << 10) + (uint32_t)(s->hex - 0xDC00) : s->hex;
        goto step;
    }
    /* within a character: the code points it can still become */
    if (s->sub == S_CH && s->need) {
        int k = s->need - 1; /* bytes free after the next one, whose range is [s->lo, s->hi] */
        uint32_t lo = (s->cp << 6 | (s->lo & 0x3Fu)) << (6 * k), hi = (s->cp << 6 | (s->hi & 0x3Fu)) << (6 * k);
        return can_direct(re, s->re, lo, hi | ((1u << (6 * k)) - 1));
    }
    if (s->sub == S_HEX && s->pos) { /* \u with pos digits read: the values they begin */
        int k = 4 * (4 - s->pos);
        uint32_t lo = (uint32_t)s->hex << k, hi = lo | ((1u << k) - 1);
        if (s->hi_sur) { /* the low half of a pair */
            lo = lo < 0xDC00 ? 0xDC00 : lo, hi = hi > 0xDFFF ? 0xDFFF : hi;
            uint32_t base = 0x10000 + ((s->cp - 0xD800) << 10);
            return lo <= hi && jgre_can(re, s->re, base + lo - 0xDC00, base + hi - 0xDC00);
        }
        return can_direct(re, s->re, lo, hi) || can_astral(re, s->re, lo, hi);
    }
    if (s->sub == S_ESC || (s->sub == S_HEX && !s->hi_sur)) /* after '\\' or "\\u": any character to come */
        return can_direct(re, s->re, 0, 0x10FFFF) || can_astral(re, s->re, 0xD800, 0xDBFF);
    return 1; /* between the halves of a pair: its high half was checked */
step:;
    jgre_set t = jgre_step(re, s->re, cp);
    if (jgre_empty(t))
        return 0;
    s->re = t;
    return 1;
}

/* 1 taken, 0 refused, -1 the schema's value ended before c (c is what follows it) */
static int feed_schema(jg_state *s, const jg_schema *sc, unsigned char c)
{
    for (;;) {
        if (!s->fdepth)
            return -1;
        int d = s->fdepth - 1;
        const jnode *n = &sc->node[s->f[d].node];
        int ph = s->f[d].phase;
        if (ph == PH_STR) {
            /* a character starts (a byte, a UTF-8 lead byte or an escape; not the low half of a \u pair) */
            int starts = s->sub == S_CH && !s->need && c != '"';
            if (s->sub == S_CH && !s->need && c == '"' && s->f[d].count < n->cmin)
                return 0; /* too short to end */
            if (starts && s->f[d].count >= n->cmax)
                return 0;
            if (n->re && s->sub == S_CH && !s->need && c == '"' && !jgre_accepts(n->re, s->re))
                return 0; /* the pattern does not match yet */
            uint8_t sub0 = s->sub, need0 = s->need, sur0 = s->hi_sur;
            if (!feed_string(s, c))
                return 0;
            if (n->re && s->mode == J_STR && !pattern_step(n->re, s, sub0, need0, sur0, c))
                return 0;
            s->f[d].count += starts;
            if (s->mode == J_DONE)
                pop_value(s);
            return 1;
        }
        if (ph == PH_NUM) {
            int r = feed_number(s, c);
            if (r > 0) {
                if (n->kind == K_INTEGER && (s->sub == N_DOT || s->sub == N_E))
                    return 0;
                return !n->bounded || num_step(s, n, c);
            }
            if (!r || (n->bounded && !num_live(n, s, 1)))
                return 0;
            pop_value(s);
            continue;
        }
        if (ph == PH_ANY) {
            int r = feed_json(s, c);
            if (r > 0 && s->mode == J_DONE)
                pop_value(s);
            if (r >= 0)
                return r;
            pop_value(s);
            continue;
        }
        if (ph == PH_LIT) {
            int lo = -1, hi = -1;
            for (int k = s->nlo; k < s->nhi; k++)
                if (n->llen[k] > s->off && (unsigned char)n->lit[k][s->off] == c) {
                    if (lo < 0)
                        lo = k;
                    hi = k + 1;
                }
            if (lo >= 0) {
                s->nlo = (uint8_t)lo, s->nhi = (uint8_t)hi, s->off++;
                if (hi - lo == 1 && n->llen[lo] == s->off)
                    pop_value(s);
                return 1;
            }
            if (n->llen[s->nlo] != s->off) /* no whole value yet (the shortest sorts first) */
                return 0;
            pop_value(s);
            continue;
        }
        if (ph == PH_KEY) {
            if (c == '"') {
                for (int k = 0; k < n->n; k++)
                    if ((s->cand >> k & 1) && n->klen[k] == s->off) {
                        s->f[d].prop = (uint8_t)k, s->f[d].phase = PH_COLON;
                        return 1;
                    }
                return 0;
            }
            uint64_t nc = 0;
            for (int k = 0; k < n->n; k++)
                if ((s->cand >> k & 1) && n->klen[k] > s->off && (unsigned char)n->key[k][s->off] == c)
                    nc |= 1ull << k;
            if (!nc)
                return 0;
            s->cand = nc, s->off++;
            return 1;
        }
        if (is_ws(c))
            return ws_step(s, c);
        s->ws = 0;
        switch (ph) {
        case PH_START:
            return start_value(s, sc, c);
        case PH_OBJ_FIRST:
        case PH_OBJ_AFTER:
            if (c == '}' && (s->f[d].prop >= 64 || !(n->req >> s->f[d].prop))) { /* no required key left */
                pop_value(s);
                return 1;
            }
            if (ph == PH_OBJ_AFTER) {
                if (c != ',' || !keys_from(sc, n, s->f[d].prop, s->fdepth))
                    return 0;
                s->f[d].phase = PH_OBJ_NEXT;
                return 1;
            }
            __attribute__((fallthrough)); /* the first key */
        case PH_OBJ_NEXT:
            if (c != '"' || !(s->cand = keys_from(sc, n, s->f[d].prop, s->fdepth)))
                return 0;
            s->off = 0;
            s->f[d].phase = PH_KEY;
            return 1;
        case PH_COLON:
            if (c != ':')
                return 0;
            s->f[d].phase = PH_OBJ_AFTER;
            s->f[d].prop++; /* the next key comes after this one */
            return push_value(s, n->sub[s->f[d].prop - 1]);
        case PH_ARR_FIRST:
            if (c == ']') {
                if (n->cmin)
                    return 0;
                pop_value(s);
                return 1;
            }
            if (!item_fits(sc, n, 0, s->fdepth))
                return 0;
            __attribute__((fallthrough)); /* the first item */
        case PH_ARR_ITEM: {
            uint32_t k = s->f[d].count++;
            s->f[d].phase = PH_ARR_AFTER;
            if (!push_value(s, k < (uint32_t)n->npfx ? n->pfx[k] : n->items))
                return 0;
            continue; /* c starts the item */
        }
        case PH_MAP_FIRST:
        case PH_MAP_AFTER:
            if (c == '}') {
                if (s->f[d].count < n->cmin)
                    return 0;
                pop_value(s);
                return 1;
            }
            if (ph == PH_MAP_AFTER) {
                if (c != ',' || s->f[d].count >= n->cmax || !fits(sc, n->keys, s->fdepth) || !fits(sc, n->items, s->fdepth))
                    return 0;
                s->f[d].phase = PH_MAP_NEXT;
                return 1;
            }
            __attribute__((fallthrough)); /* the first key */
        case PH_MAP_NEXT:
            if (c != '"' || s->f[d].count >= n->cmax || !fits(sc, n->keys, s->fdepth) || !fits(sc, n->items, s->fdepth))
                return 0;
            s->f[d].phase = PH_MAP_COLON;
            s->f[d].count++;
            if (!push_value(s, n->keys))
                return 0;
            continue; /* c starts the key, a string of its own node */
        case PH_MAP_COLON:
            if (c != ':')
                return 0;
            s->f[d].phase = PH_MAP_AFTER;
            return push_value(s, n->items);
        case PH_ARR_AFTER:
            if (c == ']') {
                if (s->f[d].count < n->cmin)
                    return 0;
                pop_value(s);
                return 1;
            }
            if (c != ',' || !item_fits(sc, n, s->f[d].count, s->fdepth))
                return 0;
            s->f[d].phase = PH_ARR_ITEM;
            return 1;
        }
        return 0;
    }
}

/* ---------------------------------------------------------------- the gate */

void jg_gate_init(jg_gate *g, const jg_prog *p)
{
    g->n = 1;
    if (p)
        jg_init_prog(&g->s[0], p);
    else
        jg_init(&g->s[0]);
}

/* a and b go on alike: the same program place and schema frames, and between values (where the last
 * value's scratch fields no longer count) the same white space; elsewhere the same fields throughout */
static int same_path(const jg_state *a, const jg_state *b)
{
    if (a->prog != b->prog || a->seg != b->seg || a->pick != b->pick || a->fdepth != b->fdepth ||
        memcmp(a->f, b->f, a->fdepth * sizeof a->f[0]))
        return 0;
    if (a->prog && a->seg < a->prog->nseg && a->prog->seg[a->seg].kind == JG_SCHEMA && a->fdepth) {
        switch (a->f[a->fdepth - 1].phase) {
        case PH_START: case PH_OBJ_FIRST: case PH_OBJ_AFTER: case PH_OBJ_NEXT: case PH_COLON: case PH_ARR_FIRST:
        case PH_ARR_AFTER: case PH_ARR_ITEM: case PH_MAP_FIRST: case PH_MAP_AFTER: case PH_MAP_NEXT: case PH_MAP_COLON:
            return a->ws == b->ws;
        }
    }
    return !memcmp(a, b, offsetof(jg_state, f));
}

static void gate_add(jg_gate *g, const jg_state *s)
{
    for (int i = 0; i < g->n; i++)
        if (same_path(&g->s[i], s))
            return;
    if (g->n < JG_FORKS)
        memcpy(&g->s[g->n++], s, state_bytes(s));
}

int jg_gate_feed(jg_gate *g, unsigned char c)
{
    jg_gate out;
    out.n = 0;
    for (int i = 0; i < g->n; i++) {
        jg_state t;
        int nb, x;
        if (feed_alt(&t, &g->s[i], c, 0, &nb))
            gate_add(&out, &t);
        for (int k = 1; k < nb; k++)
            if (feed_alt(&t, &g->s[i], c, k, &x))
                gate_add(&out, &t);
    }
    if (!out.n)
        return 0;
    g->n = out.n;
    for (int i = 0; i < out.n; i++)
        memcpy(&g->s[i], &out.s[i], state_bytes(&out.s[i]));
    return 1;
}

int jg_gate_feed_bytes(jg_gate *g, const char *p, size_t n)
{
    jg_gate t;
    t.n = g->n;
    for (int i = 0; i < g->n; i++)
        memcpy(&t.s[i], &g->s[i], state_bytes(&g->s[i]));
    for (size_t i = 0; i < n; i++)
        if (!jg_gate_feed(&t, (unsigned char)p[i]))
            return 0;
    g->n = t.n;
    for (int i = 0; i < t.n; i++)
        memcpy(&g->s[i], &t.s[i], state_bytes(&t.s[i]));
    return 1;
}

int jg_gate_done(const jg_gate *g)
{
    for (int i = 0; i < g->n; i++)
        if (jg_done(&g->s[i]))
            return 1;
    return 0;
}

int jg_gate_allowed(const jg_vocab *v, const jg_gate *g, uint8_t *allowed)
{
    if (g->n == 1)
        return jg_allowed(v, &g->s[0], allowed);
    uint8_t *one = malloc((size_t)v->V);
    if (!one)
        return -1;
    memset(allowed, 0, (size_t)v->V);
    int count = 0;
    for (int i = 0; i < g->n; i++) {
        if (jg_allowed(v, &g->s[i], one) < 0) {
            free(one);
            return -1;
        }
        for (int id = 0; id < v->V; id++)
            if (one[id] && !allowed[id])
                allowed[id] = 1, count++;
    }
    free(one);
    return count;
}
