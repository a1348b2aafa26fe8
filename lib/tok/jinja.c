/* A Jinja-subset interpreter for chat templates, following @huggingface/jinja (the reference the tests
 * compare against): the same preprocessing (trim_blocks, lstrip_blocks, one trailing newline dropped),
 * lexer, operator precedence, scoping (a for loop has its own scope; set inside it stays there), value
 * semantics (JS-flavoured: booleans print as "true", floats with integral values as "2.0", == is loose)
 * and error cases. Anything outside the subset is a named error quoting the construct.
 * All values of one render live in one arena; errors unwind with longjmp. */
#define _GNU_SOURCE
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tok/tok_int.h"

/* ------------------------------------------------------------------------------------------------ */
/* values                                                                                            */

enum { V_UNDEF, V_NULL, V_BOOL, V_INT, V_FLOAT, V_STR, V_ARR, V_OBJ, V_NS, V_FN, V_KW };

typedef struct jarr jarr;
typedef struct jobj jobj;
typedef struct jfn jfn;
typedef struct {
    uint8_t t;
    union {
        int b;
        double num; /* V_INT and V_FLOAT: JS numbers */
        struct {
            const char *s;
            size_t n;
        } str;
        jarr *arr;
        jobj *obj; /* V_OBJ, V_NS, V_KW */
        jfn *fn;
    } u;
} jv;

struct jarr {
    size_t n;
    jv *v;
};
struct jobj {
    size_t n, cap;
    uint64_t born; /* creation serial: a write to an object older than a loop iteration keeps its memory */
    const char **k;
    size_t *kn;
    jv *v;
};

typedef struct node node;
typedef struct env env;
enum { F_NAMESPACE, F_RANGE, F_RAISE, F_STRFTIME, F_METHOD, F_MACRO };
struct jfn {
    int kind;
    const char *name; /* method name */
    jv self;
    node *macro;
};

struct env {
    env *parent;
    jobj vars;
};

/* ------------------------------------------------------------------------------------------------ */
/* interpreter state                                                                                 */

/* A text buffer held across calls that may jfail (macro bodies, block sets, joins, tojson): its struct
 * is in the arena and linked into the context, so the error path frees its malloc'd text too. */
typedef struct tbuf {
    tok_buf b; /* first: a tok_buf * is a tbuf * */
    struct tbuf *prev;
} tbuf;

/* What one render may use (tok.h: TOK_JINJA_*): hostile templates are refused by name, never crash or
 * run away; the real chat templates use a small fraction of each. */
typedef struct {
    tok_arena a;
    jmp_buf jb;
    ogk_error *e;
    int pdepth;           /* parser nesting: statements, expressions, and each link of a chain */
    int rdepth;           /* evaluator recursion: expression nodes, blocks, macro calls */
    uint64_t steps;       /* work done: nodes evaluated, loop iterations, elements and bytes touched */
    size_t buf_bytes;     /* text held in open tbufs and the output */
    uint64_t serial;      /* next jobj.born */
    uint64_t oldest_write; /* the oldest jobj written since the innermost open iteration began */
    tbuf *bufs;           /* open tbufs, innermost first */
} jctx;

static _Noreturn void jfail(jctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static _Noreturn void jfail(jctx *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->e->msg, sizeof c->e->msg, fmt, ap);
    va_end(ap);
    longjmp(c->jb, 1);
}

#define JSTR_(x) #x
#define JSTR(x) JSTR_(x)
static _Noreturn void budget_fail(jctx *c, const char *what)
{
    jfail(c, "template exceeds its render budget: %s", what);
}

/* count work; refuse past the step budget */
static inline void charge(jctx *c, uint64_t n)
{
    c->steps += n;
    if (c->steps > TOK_JINJA_MAX_STEPS)
        budget_fail(c, "more than " JSTR(TOK_JINJA_MAX_STEPS) " steps");
}

static void check_memory(jctx *c)
{
    if (c->a.total + c->buf_bytes > (size_t)TOK_JINJA_MAX_MEMORY)
        budget_fail(c, "more than " JSTR(TOK_JINJA_MAX_MEMORY) " bytes of memory");
}

static void *jalloc(jctx *c, size_t n)
{
    charge(c, 1 + n / 256);
    void *p = tok_arena_alloc(&c->a, n ? n : 1);
    if (!p)
        jfail(c, "out of memory");
    check_memory(c);
    return p;
}

static tok_buf *tbuf_open(jctx *c)
{
    tbuf *t = jalloc(c, sizeof *t);
    memset(t, 0, sizeof *t);
    t->prev = c->bufs;
    c->bufs = t;
    return &t->b;
}
static void tbuf_close(jctx *c, tok_buf *b)
{
    tbuf *t = (tbuf *)b; /* buffers nest: b is the innermost open one */
    c->buf_bytes -= t->b.n;
    free(t->b.p);
    t->b.p = NULL;
    c->bufs = t->prev;
}

/* An iteration (a loop body, a macro call) may release what it allocated when it wrote to no object
 * older than itself (its results went to the output, or are copied out): then nothing older points
 * into its memory. iter_begin / iter_end bracket it; iter_end says whether it may rewind. */
typedef struct {
    tok_arena_pos pos;
    uint64_t serial, outer_oldest;
} iter_mark;

static iter_mark iter_begin(jctx *c)
{
    iter_mark m = {tok_arena_mark(&c->a), c->serial, c->oldest_write};
    c->oldest_write = UINT64_MAX;
    return m;
}

static int iter_end(jctx *c, iter_mark m)
{
    int clean = c->oldest_write >= m.serial;
    if (clean)
        tok_arena_rewind(&c->a, m.pos);
    if (m.outer_oldest < c->oldest_write)
        c->oldest_write = m.outer_oldest;
    return clean;
}

static char *jstrdup(jctx *c, const char *s, size_t n)
{
    char *p = jalloc(c, n + 1);
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

static jv v_undef(void) { return (jv){.t = V_UNDEF}; }
static jv v_null(void) { return (jv){.t = V_NULL}; }
static jv v_bool(int b) { return (jv){.t = V_BOOL, .u.b = !!b}; }
static jv v_int(double d) { return (jv){.t = V_INT, .u.num = d}; }
static jv v_float(double d) { return (jv){.t = V_FLOAT, .u.num = d}; }
static jv v_str(const char *s, size_t n) { return (jv){.t = V_STR, .u.str = {s, n}}; }
static jv v_cstr(const char *s) { return v_str(s, strlen(s)); }

static jv v_arr(jctx *c, size_t n)
{
    jarr *a = jalloc(c, sizeof *a);
    a->n = n;
    a->v = jalloc(c, (n ? n : 1) * sizeof(jv));
    return (jv){.t = V_ARR, .u.arr = a};
}

static jv v_obj(jctx *c, int t)
{
    jobj *o = jalloc(c, sizeof *o);
    memset(o, 0, sizeof *o);
    o->born = c->serial++;
    return (jv){.t = (uint8_t)t, .u.obj = o};
}

static jv *obj_find(jobj *o, const char *k, size_t kn)
{
    for (size_t i = 0; i < o->n; i++)
        if (o->kn[i] == kn && !memcmp(o->k[i], k, kn))
            return &o->v[i];
    return NULL;
}

static void obj_set(jctx *c, jobj *o, const char *k, size_t kn, jv v)
{
    if (o->born < c->oldest_write)
        c->oldest_write = o->born;
    charge(c, 1 + o->n / 8);
    jv *p = obj_find(o, k, kn);
    if (p) {
        *p = v;
        return;
    }
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 8;
        const char **nk = jalloc(c, cap * sizeof *nk);
        size_t *nkn = jalloc(c, cap * sizeof *nkn);
        jv *nv = jalloc(c, cap * sizeof *nv);
        if (o->n) {
            memcpy(nk, o->k, o->n * sizeof *nk);
            memcpy(nkn, o->kn, o->n * sizeof *nkn);
            memcpy(nv, o->v, o->n * sizeof *nv);
        }
        o->k = nk;
        o->kn = nkn;
        o->v = nv;
        o->cap = cap;
    }
    o->k[o->n] = k;
    o->kn[o->n] = kn;
    o->v[o->n++] = v;
}

static jv from_json(jctx *c, const json_t *j, int depth)
{
    if (depth > TOK_JINJA_MAX_DEPTH)
        jfail(c, "template variables nested too deeply (more than %d levels)", TOK_JINJA_MAX_DEPTH);
    switch (json_typeof(j)) {
    case JSON_NULL: return v_null();
    case JSON_TRUE: return v_bool(1);
    case JSON_FALSE: return v_bool(0);
    case JSON_INTEGER: return v_int((double)json_integer_value(j));
    case JSON_REAL: {
        double d = json_real_value(j);
        return d == floor(d) && isfinite(d) ? v_int(d) : v_float(d); /* JS: Number.isInteger */
    }
    case JSON_STRING: return v_str(json_string_value(j), json_string_length(j));
    case JSON_ARRAY: {
        jv a = v_arr(c, json_array_size(j));
        for (size_t i = 0; i < a.u.arr->n; i++)
            a.u.arr->v[i] = from_json(c, json_array_get(j, i), depth + 1);
        return a;
    }
    case JSON_OBJECT: {
        jv o = v_obj(c, V_OBJ);
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)j, k, v) obj_set(c, o.u.obj, k, strlen(k), from_json(c, v, depth + 1));
        return o;
    }
    }
    return v_undef();
}

static int truthy(jv v)
{
    switch (v.t) {
    case V_UNDEF:
    case V_NULL: return 0;
    case V_BOOL: return v.u.b;
    case V_INT:
    case V_FLOAT: return v.u.num != 0 && !isnan(v.u.num);
    case V_STR: return v.u.str.n > 0;
    case V_ARR: return v.u.arr->n > 0;
    case V_OBJ: return v.u.obj->n > 0;
    default: return 1;
    }
}

static const char *type_name(jv v)
{
    static const char *const n[] = {"UndefinedValue", "NullValue",   "BooleanValue", "IntegerValue",
                                    "FloatValue",     "StringValue", "ArrayValue",   "ObjectValue",
                                    "NamespaceValue", "FunctionValue", "KeywordArgumentsValue"};
    return n[v.t];
}

/* JS Number.prototype.toString */
static void js_num(double d, char *out, size_t cap)
{
    if (isnan(d)) {
        snprintf(out, cap, "NaN");
        return;
    }
    if (isinf(d)) {
        snprintf(out, cap, d < 0 ? "-Infinity" : "Infinity");
        return;
    }
    if (d == 0) {
        snprintf(out, cap, "0");
        return;
    }
    char buf[40];
    int p;
    for (p = 1; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*e", p - 1, d);
        if (strtod(buf, NULL) == d)
            break;
    }
    /* buf = [-]D.DDDDe[+-]XX with p significant digits */
    char digits[24];
    int nd = 0, neg = buf[0] == '-';
    const char *q = buf + neg;
    for (; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9')
            digits[nd++] = *q;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = 0;
    int exp10 = atoi(q + 1); /* value = 0.DIGITS * 10^(exp10+1) */
    int n = exp10 + 1;
    char *o = out;
    size_t left = cap;
#define PUT(...)                                                                                                       \
    do {                                                                                                               \
        int k_ = snprintf(o, left, __VA_ARGS__);                                                                       \
        o += k_;                                                                                                       \
        left -= (size_t)k_;                                                                                            \
    } while (0)
    if (neg)
        PUT("-");
    if (nd <= n && n <= 21) {
        PUT("%s", digits);
        for (int i = nd; i < n; i++)
            PUT("0");
    } else if (0 < n && n <= 21) {
        PUT("%.*s.%s", n, digits, digits + n);
    } else if (-6 < n && n <= 0) {
        PUT("0.");
        for (int i = 0; i < -n; i++)
            PUT("0");
        PUT("%s", digits);
    } else {
        PUT("%c", digits[0]);
        if (nd > 1)
            PUT(".%s", digits + 1);
        PUT("e%c%d", n - 1 >= 0 ? '+' : '-', abs(n - 1));
    }
#undef PUT
}

typedef struct {
    int indent; /* -1 = none */
    int ensure_ascii, sort_keys;
    const char *item_sep, *key_sep;
    int undef_to_null;
} json_opts;

/* every text a render builds goes through here: the output budget bounds each buffer, the memory
 * budget all of them together */
static void put(jctx *c, tok_buf *b, const char *s, size_t n)
{
    if (b->n + n > (size_t)TOK_JINJA_MAX_OUTPUT)
        budget_fail(c, "a text longer than " JSTR(TOK_JINJA_MAX_OUTPUT) " bytes");
    charge(c, 1 + n / 256);
    if (tok_buf_put(b, s, n))
        jfail(c, "out of memory");
    c->buf_bytes += n;
    check_memory(c);
}
static void puts_(jctx *c, tok_buf *b, const char *s) { put(c, b, s, strlen(s)); }

static void json_str(jctx *c, tok_buf *b, const char *s, size_t n, int ascii)
{
    put(c, b, "\"", 1);
    for (size_t i = 0; i < n;) {
        unsigned char ch = (unsigned char)s[i];
        char esc[16];
        if (ch == '"' || ch == '\\') {
            esc[0] = '\\';
            esc[1] = (char)ch;
            put(c, b, esc, 2);
            i++;
        } else if (ch < 0x20) {
            const char *m = ch == '\b' ? "\\b" : ch == '\f' ? "\\f" : ch == '\n' ? "\\n" : ch == '\r' ? "\\r" : ch == '\t' ? "\\t" : NULL;
            if (m) {
                puts_(c, b, m);
            } else {
                snprintf(esc, sizeof esc, "\\u%04x", ch);
                puts_(c, b, esc);
            }
            i++;
        } else if (ascii && ch >= 0x7F) {
            uint32_t cp;
            int k = ch < 0x80 ? (cp = ch, 1) : tok_utf8_dec((const unsigned char *)s + i, &cp);
            if (cp >= 0x10000) {
                cp -= 0x10000;
                snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
            } else {
                snprintf(esc, sizeof esc, "\\u%04x", cp);
            }
            puts_(c, b, esc);
            i += (size_t)k;
        } else {
            put(c, b, s + i, 1);
            i++;
        }
    }
    put(c, b, "\"", 1);
}

static void to_json(jctx *c, tok_buf *b, jv v, const json_opts *o, int depth)
{
    char num[64];
    if (depth > TOK_JINJA_MAX_DEPTH)
        jfail(c, "template: a value nested too deeply to render (more than %d levels)", TOK_JINJA_MAX_DEPTH);
    switch (v.t) {
    case V_NULL: puts_(c, b, "null"); return;
    case V_UNDEF: puts_(c, b, o->undef_to_null ? "null" : "undefined"); return;
    case V_BOOL: puts_(c, b, v.u.b ? "true" : "false"); return;
    case V_INT:
    case V_FLOAT:
        if (!isfinite(v.u.num)) {
            puts_(c, b, "null");
            return;
        }
        charge(c, 16); /* shortest round trip: up to 17 printf/strtod pairs */
        js_num(v.u.num, num, sizeof num);
        puts_(c, b, num);
        return;
    case V_STR: json_str(c, b, v.u.str.s, v.u.str.n, o->ensure_ascii); return;
    case V_ARR:
    case V_OBJ:
    case V_NS:
    case V_KW: {
        int is_arr = v.t == V_ARR;
        size_t n = is_arr ? v.u.arr->n : v.u.obj->n;
        size_t *order = jalloc(c, (n ? n : 1) * sizeof *order);
        for (size_t i = 0; i < n; i++)
            order[i] = i;
        if (!is_arr && o->sort_keys) {
            /* insertion sort by UTF-8 bytes (localeCompare differs for non-ASCII keys; rare) */
            for (size_t i = 1; i < n; i++) {
                size_t x = order[i], j = i;
                while (j > 0) {
                    charge(c, 1);
                    size_t y = order[j - 1];
                    size_t m = v.u.obj->kn[x] < v.u.obj->kn[y] ? v.u.obj->kn[x] : v.u.obj->kn[y];
                    int r = memcmp(v.u.obj->k[y], v.u.obj->k[x], m);
                    if (r < 0 || (r == 0 && v.u.obj->kn[y] <= v.u.obj->kn[x]))
                        break;
                    order[j] = y;
                    j--;
                }
                order[j] = x;
            }
        }
        puts_(c, b, is_arr ? "[" : "{");
        for (size_t i = 0; i < n; i++) {
            if (i)
                puts_(c, b, o->item_sep);
            if (o->indent >= 0) {
                puts_(c, b, "\n");
                for (int k = 0; k < o->indent * (depth + 1); k++)
                    puts_(c, b, " ");
            }
            if (is_arr) {
                to_json(c, b, v.u.arr->v[i], o, depth + 1);
            } else {
                json_str(c, b, v.u.obj->k[order[i]], v.u.obj->kn[order[i]], o->ensure_ascii);
                puts_(c, b, o->key_sep);
                to_json(c, b, v.u.obj->v[order[i]], o, depth + 1);
            }
        }
        if (o->indent >= 0 && n) {
            puts_(c, b, "\n");
            for (int k = 0; k < o->indent * depth; k++)
                puts_(c, b, " ");
        }
        puts_(c, b, is_arr ? "]" : "}");
        return;
    }
    case V_FN: jfail(c, "Cannot convert to JSON: FunctionValue");
    }
}

static jv json_value(jctx *c, jv v, const json_opts *o)
{
    tok_buf *b = tbuf_open(c);
    to_json(c, b, v, o, 0);
    jv r = v_str(jstrdup(c, b->p ? b->p : "", b->n), b->n);
    tbuf_close(c, b);
    return r;
}

static const json_opts JSON_DEFAULT = {-1, 0, 0, ", ", ": ", 1};
static const json_opts JSON_PRINT = {-1, 0, 0, ", ", ": ", 0};

/* the text a value renders as ({{ v }} and string concatenation) */
static jv to_string(jctx *c, jv v)
{
    char num[64];
    switch (v.t) {
    case V_STR: return v;
    case V_UNDEF: return v_cstr("undefined");
    case V_NULL: return v_cstr("null");
    case V_BOOL: return v_cstr(v.u.b ? "true" : "false");
    case V_INT:
        charge(c, 16); /* shortest round trip: up to 17 printf/strtod pairs */
        js_num(v.u.num, num, sizeof num);
        return v_str(jstrdup(c, num, strlen(num)), strlen(num));
    case V_FLOAT:
        charge(c, 16); /* shortest round trip: up to 17 printf/strtod pairs */
        if (v.u.num == 0 && signbit(v.u.num))
            return v_cstr("-0.0");
        if (v.u.num == floor(v.u.num) && isfinite(v.u.num) && fabs(v.u.num) < 1e21)
            snprintf(num, sizeof num, "%.1f", v.u.num);
        else
            js_num(v.u.num, num, sizeof num);
        return v_str(jstrdup(c, num, strlen(num)), strlen(num));
    case V_FN: return v_cstr("[function]");
    default: return json_value(c, v, &JSON_PRINT);
    }
}

/* ------------------------------------------------------------------------------------------------ */
/* lexer                                                                                             */

enum { T_TEXT, T_NUM, T_STR, T_IDENT, T_EQUALS, T_LPAREN, T_RPAREN, T_OPEN_STMT, T_CLOSE_STMT, T_OPEN_EXPR,
       T_CLOSE_EXPR, T_LBRACKET, T_RBRACKET, T_LBRACE, T_RBRACE, T_COMMA, T_DOT, T_COLON, T_PIPE, T_ADD, T_MUL,
       T_POW, T_CMP, T_UNARY, T_COMMENT };

typedef struct {
    int type;
    const char *s;
    size_t n;
    int line;
} jtok;

typedef struct {
    jtok *v;
    size_t n, cap;
} jtoks;

static void tpush(jctx *c, jtoks *t, int type, const char *s, size_t n, int line)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 256;
        jtok *nv = jalloc(c, cap * sizeof *nv);
        if (t->n)
            memcpy(nv, t->v, t->n * sizeof *nv);
        t->v = nv;
        t->cap = cap;
    }
    t->v[t->n++] = (jtok){type, s, n, line};
}

static int js_ws_at(const char *s, size_t n, size_t i, size_t *k)
{
    if (i >= n)
        return 0;
    uint32_t cp;
    *k = (size_t)tok_utf8_dec((const unsigned char *)s + i, &cp);
    return tok_js_space(cp);
}

/* JS trimEnd of a text token (in the arena) */
static void trim_end_tok(jtok *t)
{
    const unsigned char *p = (const unsigned char *)t->s;
    while (t->n) {
        size_t q = t->n - 1;
        while (q > 0 && (p[q] & 0xC0) == 0x80)
            q--;
        uint32_t cp;
        tok_utf8_dec(p + q, &cp);
        if (!tok_js_space(cp))
            break;
        t->n = q;
    }
}

static char *preprocess(jctx *c, const char *src, size_t *len)
{
    size_t n = *len;
    if (n && src[n - 1] == '\n')
        n--;
    /* lstrip_blocks: /^[ \t]*({[#%-])/gm -> "$1" */
    char *a = jalloc(c, n + 1);
    size_t an = 0;
    for (size_t i = 0; i < n;) {
        if (i == 0 || src[i - 1] == '\n') {
            size_t j = i;
            while (j < n && (src[j] == ' ' || src[j] == '\t'))
                j++;
            if (j + 1 < n && src[j] == '{' && (src[j + 1] == '#' || src[j + 1] == '%' || src[j + 1] == '-'))
                i = j;
        }
        a[an++] = src[i++];
        while (i < n && src[i - 1] != '\n')
            a[an++] = src[i++];
    }
    /* trim_blocks: /([#%-]})\n/g -> "$1" */
    char *b = jalloc(c, an + 1);
    size_t bn = 0;
    for (size_t i = 0; i < an; i++) {
        b[bn++] = a[i];
        if (a[i] == '}' && i > 0 && (a[i - 1] == '#' || a[i - 1] == '%' || a[i - 1] == '-') && i + 1 < an &&
            a[i + 1] == '\n') {
            /* the regex matches left to right without overlap: "-}" consumed here */
            i++;
        }
    }
    b[bn] = 0;
    *len = bn;
    return b;
}

static int is_word(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_'; }
static int is_digit(char ch) { return ch >= '0' && ch <= '9'; }

static void lex(jctx *c, const char *src0, size_t len0, jtoks *out)
{
    size_t n = len0;
    const char *s = preprocess(c, src0, &n);
    size_t i = 0;
    int curly = 0, line = 1;
    static const struct {
        const char *seq;
        int type;
    } table[] = {{"{%", T_OPEN_STMT}, {"%}", T_CLOSE_STMT}, {"{{", T_OPEN_EXPR}, {"}}", T_CLOSE_EXPR},
                 {"(", T_LPAREN},     {")", T_RPAREN},      {"{", T_LBRACE},     {"}", T_RBRACE},
                 {"[", T_LBRACKET},   {"]", T_RBRACKET},    {",", T_COMMA},      {".", T_DOT},
                 {":", T_COLON},      {"|", T_PIPE},        {"<=", T_CMP},       {">=", T_CMP},
                 {"==", T_CMP},       {"!=", T_CMP},        {"<", T_CMP},        {">", T_CMP},
                 {"+", T_ADD},        {"-", T_ADD},         {"~", T_ADD},        {"**", T_POW},
                 {"*", T_MUL},        {"//", T_MUL},        {"/", T_MUL},        {"%", T_MUL},
                 {"=", T_EQUALS}};
#define LAST (out->n ? out->v[out->n - 1].type : -1)
    while (i < n) {
        int lt = LAST;
        if (lt == -1 || lt == T_CLOSE_STMT || lt == T_CLOSE_EXPR || lt == T_COMMENT) {
            size_t st = i;
            while (i < n && !(s[i] == '{' && i + 1 < n && (s[i + 1] == '%' || s[i + 1] == '{' || s[i + 1] == '#'))) {
                if (s[i] == '\n')
                    line++;
                i++;
            }
            if (i > st) {
                tpush(c, out, T_TEXT, s + st, i - st, line);
                continue;
            }
        }
        if (s[i] == '{' && i + 1 < n && s[i + 1] == '#') {
            i += 2;
            int strip_before = i < n && s[i] == '-';
            if (strip_before)
                i++;
            size_t st = i;
            while (!(i + 1 < n && s[i] == '#' && s[i + 1] == '}')) {
                if (i + 2 >= n)
                    jfail(c, "template line %d: Missing end of comment tag", line);
                if (s[i] == '\n')
                    line++;
                i++;
            }
            size_t cn = i - st;
            int strip_after = cn && s[st + cn - 1] == '-';
            if (strip_before && LAST == T_TEXT) {
                trim_end_tok(&out->v[out->n - 1]);
                if (!out->v[out->n - 1].n)
                    out->n--;
            }
            tpush(c, out, T_COMMENT, s + st, cn - (size_t)strip_after, line);
            i += 2;
            size_t k;
            if (strip_after)
                while (js_ws_at(s, n, i, &k))
                    i += k;
            continue;
        }
        if (n - i >= 3 && (!memcmp(s + i, "{%-", 3) || !memcmp(s + i, "{{-", 3))) {
            if (LAST == T_TEXT) {
                trim_end_tok(&out->v[out->n - 1]);
                if (!out->v[out->n - 1].n)
                    out->n--;
            }
            int stmt = s[i + 1] == '%';
            tpush(c, out, stmt ? T_OPEN_STMT : T_OPEN_EXPR, s + i, 2, line);
            if (!stmt)
                curly = 0;
            i += 3;
            continue;
        }
        {
            size_t k;
            while (js_ws_at(s, n, i, &k)) {
                if (s[i] == '\n')
                    line++;
                i += k;
            }
        }
        if (i >= n)
            break;
        if (n - i >= 3 && (!memcmp(s + i, "-%}", 3) || !memcmp(s + i, "-}}", 3))) {
            tpush(c, out, s[i + 1] == '%' ? T_CLOSE_STMT : T_CLOSE_EXPR, s + i + 1, 2, line);
            i += 3;
            size_t k;
            while (js_ws_at(s, n, i, &k)) {
                if (s[i] == '\n')
                    line++;
                i += k;
            }
            continue;
        }
        char ch = s[i];
        if (ch == '-' || ch == '+') {
            lt = LAST;
            if (lt == T_TEXT || lt == -1)
                jfail(c, "template line %d: Unexpected character: %c", line, ch);
            if (!(lt == T_IDENT || lt == T_NUM || lt == T_STR || lt == T_RPAREN || lt == T_RBRACKET)) {
                size_t st = i++;
                while (i < n && is_digit(s[i]))
                    i++;
                size_t nd = i - st - 1;
                if (nd && i + 1 < n && s[i] == '.' && is_digit(s[i + 1])) {
                    i++;
                    while (i < n && is_digit(s[i]))
                        i++;
                }
                tpush(c, out, nd ? T_NUM : T_UNARY, s + st, i - st, line);
                continue;
            }
        }
        int matched = 0;
        for (size_t k = 0; k < sizeof table / sizeof table[0]; k++) {
            size_t L = strlen(table[k].seq);
            if (table[k].type == T_CLOSE_EXPR && curly > 0)
                continue;
            if (n - i >= L && !memcmp(s + i, table[k].seq, L)) {
                tpush(c, out, table[k].type, s + i, L, line);
                if (table[k].type == T_OPEN_EXPR)
                    curly = 0;
                else if (table[k].type == T_LBRACE)
                    curly++;
                else if (table[k].type == T_RBRACE)
                    curly--;
                i += L;
                matched = 1;
                break;
            }
        }
        if (matched)
            continue;
        if (ch == '\'' || ch == '"') {
            i++;
            tok_buf b = {0};
            while (1) {
                if (i >= n) {
                    free(b.p);
                    jfail(c, "template line %d: Unexpected end of input", line);
                }
                if (s[i] == ch)
                    break;
                if (s[i] == '\\') {
                    if (++i >= n) {
                        free(b.p);
                        jfail(c, "template line %d: Unexpected end of input", line);
                    }
                    char e = s[i++];
                    if (e == 'x' || e == 'u') {
                        int L = e == 'x' ? 2 : 4;
                        unsigned v = 0;
                        for (int q = 0; q < L; q++, i++) {
                            char h = i < n ? s[i] : 0;
                            int d = h >= '0' && h <= '9' ? h - '0' : (h | 32) >= 'a' && (h | 32) <= 'f' ? (h | 32) - 'a' + 10 : -1;
                            if (d < 0) {
                                free(b.p);
                                jfail(c, "template line %d: Invalid hexadecimal escape sequence", line);
                            }
                            v = v * 16 + (unsigned)d;
                        }
                        char u8[4];
                        int k = tok_utf8_enc(v, u8);
                        tok_buf_put(&b, u8, (size_t)k);
                        continue;
                    }
                    const char *m = e == 'n' ? "\n" : e == 't' ? "\t" : e == 'r' ? "\r" : e == 'b' ? "\b" : e == 'f' ? "\f" : e == 'v' ? "\v" : e == '\'' ? "'" : e == '"' ? "\"" : e == '\\' ? "\\" : NULL;
                    if (!m) {
                        free(b.p);
                        jfail(c, "template line %d: Unexpected escaped character: %c", line, e);
                    }
                    tok_buf_put(&b, m, 1);
                    continue;
                }
                if (s[i] == '\n')
                    line++;
                tok_buf_put(&b, s + i, 1);
                i++;
                if (i >= n) {
                    free(b.p);
                    jfail(c, "template line %d: Unexpected end of input", line);
                }
            }
            i++;
            tpush(c, out, T_STR, jstrdup(c, b.p ? b.p : "", b.n), b.n, line);
            free(b.p);
            continue;
        }
        if (is_digit(ch)) {
            size_t st = i;
            while (i < n && is_digit(s[i]))
                i++;
            if (LAST != T_DOT && i + 1 < n && s[i] == '.' && is_digit(s[i + 1])) {
                i++;
                while (i < n && is_digit(s[i]))
                    i++;
            }
            tpush(c, out, T_NUM, s + st, i - st, line);
            continue;
        }
        if (is_word(ch)) {
            size_t st = i;
            while (i < n && is_word(s[i]))
                i++;
            tpush(c, out, T_IDENT, s + st, i - st, line);
            continue;
        }
        uint32_t cp;
        int k = tok_utf8_dec((const unsigned char *)s + i, &cp);
        jfail(c, "template line %d: Unexpected character: %.*s", line, k, s + i);
    }
#undef LAST
}

/* ------------------------------------------------------------------------------------------------ */
/* parser                                                                                            */

enum { N_TEXT, N_IF, N_FOR, N_SET, N_MACRO, N_BREAK, N_CONTINUE, N_CALLBLOCK, N_FILTERBLOCK, N_COMMENT,
       E_STR, E_NUM, E_IDENT, E_ARR, E_TUPLE, E_OBJ, E_MEMBER, E_SLICE, E_CALL, E_KWARG, E_UNARY, E_BIN,
       E_FILTER, E_TEST, E_TERNARY, E_SELECT, E_SPREAD, E_KWSPREAD };

struct node {
    int type, line;
    const char *s; /* text, identifier, operator, string literal */
    size_t n;
    double num;
    int is_float, computed, negate;
    node *a, *b, *c;   /* operands; If: test; For: loopvar, iterable */
    node **kids;       /* list literal items, call args, object keys/values interleaved */
    size_t nkids;
    node **body, **alt; /* statement bodies */
    size_t nbody, nalt;
};

typedef struct {
    jctx *c;
    jtok *t;
    size_t n, i;
} parser;

typedef struct {
    node **v;
    size_t n, cap;
} nodes;

static void npush(jctx *c, nodes *l, node *x)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        node **nv = jalloc(c, cap * sizeof *nv);
        if (l->n)
            memcpy(nv, l->v, l->n * sizeof *nv);
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = x;
}

static node *mk(parser *p, int type)
{
    node *x = jalloc(p->c, sizeof *x);
    memset(x, 0, sizeof *x);
    x->type = type;
    x->line = p->i < p->n ? p->t[p->i].line : (p->n ? p->t[p->n - 1].line : 1);
    return x;
}

static int at(parser *p, int type) { return p->i < p->n && p->t[p->i].type == type; }
static int at_ident(parser *p, const char *name)
{
    return p->i < p->n && p->t[p->i].type == T_IDENT && p->t[p->i].n == strlen(name) &&
           !memcmp(p->t[p->i].s, name, p->t[p->i].n);
}
static int at_ident2(parser *p, const char *a, const char *b)
{
    if (!at_ident(p, a))
        return 0;
    p->i++;
    int r = at_ident(p, b);
    p->i--;
    return r;
}
static int at_stmt(parser *p, const char *name)
{
    if (!at(p, T_OPEN_STMT))
        return 0;
    p->i++;
    int r = at_ident(p, name);
    p->i--;
    return r;
}

static _Noreturn void perr(parser *p, const char *what)
{
    int line = p->i < p->n ? p->t[p->i].line : (p->n ? p->t[p->n - 1].line : 1);
    if (p->i < p->n)
        jfail(p->c, "template line %d: %s at '%.*s'", line, what, (int)(p->t[p->i].n > 40 ? 40 : p->t[p->i].n), p->t[p->i].s);
    jfail(p->c, "template line %d: %s at end of template", line, what);
}

/* One more level of nesting: a statement, an expression, or one link of a chain of operators, filters,
 * tests, member accesses or calls (a chain of n links is an n-deep tree). Bounding this bounds every
 * recursion over the tree: the parser's, the evaluator's and the printer's. */
static void penter(parser *p)
{
    if (++p->c->pdepth > TOK_JINJA_MAX_DEPTH) {
        int line = p->i < p->n ? p->t[p->i].line : (p->n ? p->t[p->n - 1].line : 1);
        jfail(p->c, "template line %d: nested too deeply (more than %d levels of statements, expressions and chained "
                    "operators)", line, TOK_JINJA_MAX_DEPTH);
    }
}
static void pleave(parser *p, int n) { p->c->pdepth -= n; }

static jtok *expect(parser *p, int type, const char *what)
{
    if (!at(p, type))
        perr(p, what);
    return &p->t[p->i++];
}

static void expect_ident(parser *p, const char *name)
{
    if (!at_ident(p, name)) {
        char msg[64];
        snprintf(msg, sizeof msg, "expected '%s'", name);
        perr(p, msg);
    }
    p->i++;
}

static node *parse_expr(parser *p);
static node *parse_primary(parser *p);
static node *parse_any(parser *p);

static node *parse_seq(parser *p, int primary)
{
    node *first = primary ? parse_primary(p) : parse_expr(p);
    if (!at(p, T_COMMA))
        return first;
    node *t = mk(p, E_TUPLE);
    nodes l = {0};
    npush(p->c, &l, first);
    while (at(p, T_COMMA)) {
        p->i++;
        npush(p->c, &l, primary ? parse_primary(p) : parse_expr(p));
        if (!at(p, T_COMMA))
            break;
    }
    t->kids = l.v;
    t->nkids = l.n;
    return t;
}

static node **parse_args(parser *p, size_t *count)
{
    expect(p, T_LPAREN, "expected '('");
    nodes l = {0};
    int saw_kw = 0;
    while (!at(p, T_RPAREN)) {
        if (p->i >= p->n)
            perr(p, "unterminated argument list");
        node *arg;
        if (at(p, T_POW)) {
            p->i++;
            arg = mk(p, E_KWSPREAD);
            arg->a = parse_expr(p);
        } else if (at(p, T_MUL) && p->t[p->i].n == 1 && p->t[p->i].s[0] == '*') {
            p->i++;
            arg = mk(p, E_SPREAD);
            arg->a = parse_expr(p);
        } else {
            arg = parse_expr(p);
            if (at(p, T_EQUALS)) {
                p->i++;
                if (arg->type != E_IDENT)
                    perr(p, "expected an identifier for a keyword argument");
                node *kw = mk(p, E_KWARG);
                kw->s = arg->s;
                kw->n = arg->n;
                kw->a = parse_expr(p);
                arg = kw;
                saw_kw = 1;
            } else if (saw_kw) {
                perr(p, "positional argument after keyword argument");
            }
        }
        npush(p->c, &l, arg);
        if (at(p, T_COMMA))
            p->i++;
    }
    p->i++;
    *count = l.n;
    return l.v;
}

static node *parse_call(parser *p, node *callee);

static node *parse_member_args(parser *p)
{
    node *sl[3] = {0};
    int ns = 0, is_slice = 0;
    while (!at(p, T_RBRACKET)) {
        if (p->i >= p->n)
            perr(p, "unterminated '['");
        if (at(p, T_COLON)) {
            if (ns < 3)
                sl[ns] = NULL;
            ns++;
            p->i++;
            is_slice = 1;
        } else {
            node *e = parse_expr(p);
            if (ns < 3)
                sl[ns] = e;
            ns++;
            if (at(p, T_COLON)) {
                p->i++;
                is_slice = 1;
            }
        }
    }
    if (!ns)
        perr(p, "expected at least one argument for member/slice expression");
    if (is_slice) {
        if (ns > 3)
            perr(p, "expected 0-3 arguments for slice expression");
        node *s = mk(p, E_SLICE);
        s->a = sl[0];
        s->b = ns > 1 ? sl[1] : NULL;
        s->c = ns > 2 ? sl[2] : NULL;
        return s;
    }
    return sl[0];
}

static node *parse_member(parser *p, node *obj)
{
    int links = 0;
    while (at(p, T_DOT) || at(p, T_LBRACKET)) {
        penter(p), links++;
        int computed = at(p, T_LBRACKET);
        p->i++;
        node *m = mk(p, E_MEMBER);
        m->a = obj;
        m->computed = computed;
        if (computed) {
            m->b = parse_member_args(p);
            expect(p, T_RBRACKET, "expected ']'");
        } else {
            m->b = parse_primary(p);
            if (m->b->type != E_IDENT && !(m->b->type == E_NUM && !m->b->is_float))
                perr(p, "expected an identifier or integer after '.'");
        }
        obj = m;
    }
    pleave(p, links);
    return obj;
}

static node *parse_call(parser *p, node *callee)
{
    penter(p);
    node *x = mk(p, E_CALL);
    x->a = callee;
    x->kids = parse_args(p, &x->nkids);
    x = parse_member(p, x);
    if (at(p, T_LPAREN))
        x = parse_call(p, x);
    pleave(p, 1);
    return x;
}

/* A list literal, or (pairs) an object literal of key ':' value items, after its opening token and up to close;
 * the kids are the items (keys and values alternating for an object). */
static node *parse_coll(parser *p, int kind, int close, int pairs)
{
    node *x = mk(p, kind);
    nodes l = {0};
    while (!at(p, close)) {
        if (p->i >= p->n)
            perr(p, pairs ? "unterminated object literal" : "unterminated list literal");
        npush(p->c, &l, parse_expr(p));
        if (pairs) {
            expect(p, T_COLON, "expected ':' in an object literal");
            npush(p->c, &l, parse_expr(p));
        }
        if (at(p, T_COMMA))
            p->i++;
    }
    p->i++;
    x->kids = l.v;
    x->nkids = l.n;
    return x;
}

static node *parse_primary(parser *p)
{
    if (p->i >= p->n)
        perr(p, "unexpected end of template in an expression");
    jtok *t = &p->t[p->i++];
    switch (t->type) {
    case T_NUM: {
        node *x = mk(p, E_NUM);
        char buf[64];
        snprintf(buf, sizeof buf, "%.*s", (int)(t->n < 63 ? t->n : 63), t->s);
        x->num = strtod(buf, NULL);
        x->is_float = memchr(t->s, '.', t->n) != NULL;
        return x;
    }
    case T_STR: {
        node *x = mk(p, E_STR);
        tok_buf b = {0};
        tok_buf_put(&b, t->s, t->n);
        while (at(p, T_STR)) { /* adjacent literals concatenate */
            tok_buf_put(&b, p->t[p->i].s, p->t[p->i].n);
            p->i++;
        }
        x->s = jstrdup(p->c, b.p ? b.p : "", b.n);
        x->n = b.n;
        free(b.p);
        return x;
    }
    case T_IDENT: {
        node *x = mk(p, E_IDENT);
        x->s = t->s;
        x->n = t->n;
        return x;
    }
    case T_LPAREN: {
        node *x = parse_seq(p, 0);
        expect(p, T_RPAREN, "expected ')'");
        return x;
    }
    case T_LBRACKET: return parse_coll(p, E_ARR, T_RBRACKET, 0);
    case T_LBRACE: return parse_coll(p, E_OBJ, T_RBRACE, 1);
    default:
        p->i--;
        perr(p, "unexpected token");
    }
}

static node *parse_unary_sign(parser *p)
{
    if ((at(p, T_UNARY) || at(p, T_ADD)) && (p->t[p->i].s[0] == '-' || p->t[p->i].s[0] == '+') && p->t[p->i].n == 1) {
        node *x = mk(p, E_UNARY);
        x->s = p->t[p->i].s;
        x->n = 1;
        p->i++;
        penter(p);
        x->a = parse_unary_sign(p);
        pleave(p, 1);
        return x;
    }
    node *m = parse_member(p, parse_primary(p));
    if (at(p, T_LPAREN))
        return parse_call(p, m);
    return m;
}

static node *parse_filter(parser *p)
{
    node *x = parse_unary_sign(p);
    int links = 0;
    while (at(p, T_PIPE)) {
        penter(p), links++;
        p->i++;
        node *f = parse_primary(p);
        if (f->type != E_IDENT)
            perr(p, "expected a filter name");
        node *fx = mk(p, E_FILTER);
        fx->a = x;
        fx->s = f->s;
        fx->n = f->n;
        if (at(p, T_LPAREN)) {
            fx->computed = 1; /* called with arguments */
            fx->kids = parse_args(p, &fx->nkids);
        }
        x = fx;
    }
    pleave(p, links);
    return x;
}

static node *parse_test(parser *p)
{
    node *x = parse_filter(p);
    int links = 0;
    while (at_ident(p, "is")) {
        penter(p), links++;
        p->i++;
        int neg = 0;
        if (at_ident(p, "not")) {
            neg = 1;
            p->i++;
        }
        node *t = parse_primary(p);
        if (t->type != E_IDENT)
            perr(p, "expected a test name");
        node *tx = mk(p, E_TEST);
        tx->a = x;
        tx->negate = neg;
        tx->s = t->s;
        tx->n = t->n;
        x = tx;
    }
    pleave(p, links);
    return x;
}

static node *bin(parser *p, const char *op, size_t opn, node *l, node *r)
{
    node *x = mk(p, E_BIN);
    x->s = op;
    x->n = opn;
    x->a = l;
    x->b = r;
    return x;
}

/* One left-associative binary level: operands from next, joined by the operator tokens of type kind, or
 * (kw not NULL) by the keyword kw. */
static node *parse_lassoc(parser *p, int kind, const char *kw, node *(*next)(parser *))
{
    node *l = next(p);
    int links = 0;
    while (kw ? at_ident(p, kw) : at(p, kind)) {
        penter(p), links++;
        jtok *t = &p->t[p->i++];
        l = kw ? bin(p, kw, strlen(kw), l, next(p)) : bin(p, t->s, t->n, l, next(p));
    }
    pleave(p, links);
    return l;
}

static node *parse_pow(parser *p) { return parse_lassoc(p, T_POW, NULL, parse_test); }
static node *parse_mul(parser *p) { return parse_lassoc(p, T_MUL, NULL, parse_pow); }
static node *parse_add(parser *p) { return parse_lassoc(p, T_ADD, NULL, parse_mul); }

static node *parse_cmp(parser *p)
{
    node *l = parse_add(p);
    int links = 0;
    for (;;) {
        const char *op;
        size_t opn;
        if (at_ident2(p, "not", "in")) {
            op = "not in";
            opn = 6;
            p->i += 2;
        } else if (at_ident(p, "in")) {
            op = "in";
            opn = 2;
            p->i++;
        } else if (at(p, T_CMP)) {
            op = p->t[p->i].s;
            opn = p->t[p->i].n;
            p->i++;
        } else {
            break;
        }
        penter(p), links++;
        l = bin(p, op, opn, l, parse_add(p));
    }
    pleave(p, links);
    return l;
}

static node *parse_not(parser *p)
{
    node *r = NULL;
    while (at_ident(p, "not")) {
        p->i++;
        node *x = mk(p, E_UNARY);
        x->s = "not";
        x->n = 3;
        penter(p);
        x->a = parse_not(p);
        pleave(p, 1);
        r = x;
    }
    return r ? r : parse_cmp(p);
}

static node *parse_and(parser *p) { return parse_lassoc(p, 0, "and", parse_not); }
static node *parse_or(parser *p) { return parse_lassoc(p, 0, "or", parse_and); }

static node *parse_expr(parser *p)
{
    penter(p);
    node *a = parse_or(p);
    if (at_ident(p, "if")) {
        p->i++;
        node *test = parse_or(p);
        if (at_ident(p, "else")) {
            p->i++;
            node *x = mk(p, E_TERNARY);
            x->a = test;
            x->b = a;
            x->c = parse_expr(p);
            pleave(p, 1);
            return x;
        }
        node *x = mk(p, E_SELECT);
        x->a = a;
        x->b = test;
        pleave(p, 1);
        return x;
    }
    pleave(p, 1);
    return a;
}

static void parse_body(parser *p, nodes *l, const char *e1, const char *e2, const char *e3)
{
    while (!(at_stmt(p, e1) || (e2 && at_stmt(p, e2)) || (e3 && at_stmt(p, e3)))) {
        if (p->i >= p->n) {
            char msg[96];
            const char *end = !strncmp(e1, "end", 3) ? e1 : e2 && !strncmp(e2, "end", 3) ? e2 : e3 ? e3 : e1;
            snprintf(msg, sizeof msg, "missing {%% %s %%}", end);
            perr(p, msg);
        }
        npush(p->c, l, parse_any(p));
    }
}

static node *parse_if(parser *p)
{
    node *x = mk(p, N_IF);
    x->a = parse_expr(p);
    expect(p, T_CLOSE_STMT, "expected '%}'");
    nodes body = {0}, alt = {0};
    parse_body(p, &body, "elif", "else", "endif");
    if (at_stmt(p, "elif")) {
        p->i += 2;
        penter(p); /* an elif is an if nested in the else branch */
        npush(p->c, &alt, parse_if(p));
        pleave(p, 1);
    } else if (at_stmt(p, "else")) {
        p->i += 2;
        expect(p, T_CLOSE_STMT, "expected '%}'");
        parse_body(p, &alt, "endif", NULL, NULL);
    }
    x->body = body.v;
    x->nbody = body.n;
    x->alt = alt.v;
    x->nalt = alt.n;
    return x;
}

static node *parse_stmt(parser *p)
{
    penter(p);
    expect(p, T_OPEN_STMT, "expected '{%'");
    if (!at(p, T_IDENT))
        perr(p, "expected a statement name");
    jtok *name = &p->t[p->i];
    int line = name->line;
    node *x;
#define IS(w) (name->n == strlen(w) && !memcmp(name->s, w, name->n))
    if (IS("set")) {
        p->i++;
        x = mk(p, N_SET);
        x->a = parse_seq(p, 0);
        if (at(p, T_EQUALS)) {
            p->i++;
            x->b = parse_seq(p, 0);
        } else {
            expect(p, T_CLOSE_STMT, "expected '%}'");
            nodes body = {0};
            parse_body(p, &body, "endset", NULL, NULL);
            x->body = body.v;
            x->nbody = body.n;
            p->i++;
            expect_ident(p, "endset");
        }
        expect(p, T_CLOSE_STMT, "expected '%}'");
    } else if (IS("if")) {
        p->i++;
        x = parse_if(p);
        expect(p, T_OPEN_STMT, "expected '{% endif %}'");
        expect_ident(p, "endif");
        expect(p, T_CLOSE_STMT, "expected '%}'");
    } else if (IS("for")) {
        p->i++;
        x = mk(p, N_FOR);
        x->a = parse_seq(p, 1);
        if (x->a->type != E_IDENT && x->a->type != E_TUPLE)
            perr(p, "expected an identifier or tuple as the loop variable");
        expect_ident(p, "in");
        x->b = parse_expr(p);
        expect(p, T_CLOSE_STMT, "expected '%}'");
        nodes body = {0}, alt = {0};
        parse_body(p, &body, "endfor", "else", NULL);
        if (at_stmt(p, "else")) {
            p->i += 2;
            expect(p, T_CLOSE_STMT, "expected '%}'");
            parse_body(p, &alt, "endfor", NULL, NULL);
        }
        x->body = body.v;
        x->nbody = body.n;
        x->alt = alt.v;
        x->nalt = alt.n;
        expect(p, T_OPEN_STMT, "expected '{% endfor %}'");
        expect_ident(p, "endfor");
        expect(p, T_CLOSE_STMT, "expected '%}'");
    } else if (IS("macro")) {
        p->i++;
        x = mk(p, N_MACRO);
        x->a = parse_primary(p);
        if (x->a->type != E_IDENT)
            perr(p, "expected a macro name");
        x->kids = parse_args(p, &x->nkids);
        for (size_t k = 0; k < x->nkids; k++)
            if (x->kids[k]->type != E_IDENT && x->kids[k]->type != E_KWARG)
                perr(p, "expected a parameter name");
        expect(p, T_CLOSE_STMT, "expected '%}'");
        nodes body = {0};
        parse_body(p, &body, "endmacro", NULL, NULL);
        x->body = body.v;
        x->nbody = body.n;
        p->i++;
        expect_ident(p, "endmacro");
        expect(p, T_CLOSE_STMT, "expected '%}'");
    } else if (IS("break") || IS("continue")) {
        x = mk(p, IS("break") ? N_BREAK : N_CONTINUE);
        p->i++;
        expect(p, T_CLOSE_STMT, "expected '%}'");
    } else {
        jfail(p->c, "template line %d: unsupported statement '{%% %.*s'", line, (int)(name->n > 40 ? 40 : name->n), name->s);
    }
#undef IS
    pleave(p, 1);
    return x;
}

static node *parse_any(parser *p)
{
    jtok *t = &p->t[p->i];
    switch (t->type) {
    case T_COMMENT: p->i++; return mk(p, N_COMMENT);
    case T_TEXT: {
        node *x = mk(p, N_TEXT);
        x->s = t->s;
        x->n = t->n;
        p->i++;
        return x;
    }
    case T_OPEN_STMT: return parse_stmt(p);
    case T_OPEN_EXPR: {
        p->i++;
        node *x = parse_expr(p);
        expect(p, T_CLOSE_EXPR, "expected '}}'");
        return x;
    }
    default: perr(p, "unexpected token");
    }
}

/* ------------------------------------------------------------------------------------------------ */
/* evaluation                                                                                        */

typedef struct {
    jctx *c;
    tok_buf *out;
    int ctl; /* 1 break, 2 continue */
} interp;

static jv eval(interp *I, node *x, env *E);
static void exec_block(interp *I, node **body, size_t n, env *E, tok_buf *out);

static jv lookup(env *E, const char *s, size_t n)
{
    for (; E; E = E->parent) {
        jv *v = obj_find(&E->vars, s, n);
        if (v)
            return *v;
    }
    return v_undef();
}

static void setvar(jctx *c, env *E, const char *s, size_t n, jv v) { obj_set(c, &E->vars, s, n, v); }

static env *new_env(jctx *c, env *parent)
{
    env *e = jalloc(c, sizeof *e);
    memset(e, 0, sizeof *e);
    e->vars.born = c->serial++;
    e->parent = parent;
    return e;
}

static jv method(jctx *c, const char *name, jv self)
{
    jfn *f = jalloc(c, sizeof *f);
    memset(f, 0, sizeof *f);
    f->kind = F_METHOD;
    f->name = name;
    f->self = self;
    return (jv){.t = V_FN, .u.fn = f};
}

static size_t utf16_len(const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        unsigned char ch = (unsigned char)s[i];
        int L = tok_utf8_len(ch);
        k += L == 4 ? 2 : 1;
        i += (size_t)L;
    }
    return k;
}

static jv builtin_attr(jctx *c, jv obj, const char *k, size_t kn)
{
#define K(w) (kn == strlen(w) && !memcmp(k, w, kn))
    if (obj.t == V_STR) {
        if (K("length"))
            return v_int((double)utf16_len(obj.u.str.s, obj.u.str.n));
        static const char *const m[] = {"upper", "lower", "strip", "title", "capitalize", "rstrip", "lstrip",
                                        "startswith", "endswith", "split", "replace"};
        for (size_t i = 0; i < sizeof m / sizeof *m; i++)
            if (K(m[i]))
                return method(c, m[i], obj);
    } else if (obj.t == V_ARR) {
        if (K("length"))
            return v_int((double)obj.u.arr->n);
    } else if (obj.t == V_OBJ) {
        static const char *const m[] = {"get", "items", "keys", "values"};
        for (size_t i = 0; i < sizeof m / sizeof *m; i++)
            if (K(m[i]))
                return method(c, m[i], obj);
        if (K("dictsort"))
            jfail(c, "unsupported method 'dictsort'");
    }
#undef K
    return v_undef();
}

static int str_eq(jv v, const char *s) { return v.t == V_STR && v.u.str.n == strlen(s) && !memcmp(v.u.str.s, s, v.u.str.n); }

/* JS string trim family on UTF-8 */
static jv js_trim(jv s, int left, int right)
{
    const unsigned char *p = (const unsigned char *)s.u.str.s;
    size_t a = 0, b = s.u.str.n;
    uint32_t cp;
    while (left && a < b) {
        int k = tok_utf8_dec(p + a, &cp);
        if (!tok_js_space(cp))
            break;
        a += (size_t)k;
    }
    while (right && b > a) {
        size_t q = b - 1;
        while (q > a && (p[q] & 0xC0) == 0x80)
            q--;
        tok_utf8_dec(p + q, &cp);
        if (!tok_js_space(cp))
            break;
        b = q;
    }
    return v_str(s.u.str.s + a, b - a);
}

static jv case_map(jctx *c, jv s, int upper)
{
    /* ASCII case mapping; non-ASCII characters are passed through (JS maps them: differs only there) */
    char *o = jalloc(c, s.u.str.n + 1);
    for (size_t i = 0; i < s.u.str.n; i++) {
        char ch = s.u.str.s[i];
        o[i] = upper ? (ch >= 'a' && ch <= 'z' ? (char)(ch - 32) : ch) : (ch >= 'A' && ch <= 'Z' ? (char)(ch + 32) : ch);
    }
    return v_str(o, s.u.str.n);
}

static int ascii_only(jv s)
{
    for (size_t i = 0; i < s.u.str.n; i++)
        if ((unsigned char)s.u.str.s[i] >= 0x80)
            return 0;
    return 1;
}

static jv str_replace(jctx *c, jv s, jv old, jv new, double count)
{
    if (count == 0)
        return s;
    double remaining = count < 0 ? INFINITY : count;
    tok_buf *b = tbuf_open(c);
    if (!old.u.str.n) {
        /* (?=) matches before every code point and at the end */
        size_t i = 0;
        while (i <= s.u.str.n) {
            if (remaining > 0) {
                put(c, b, new.u.str.s, new.u.str.n);
                remaining--;
            }
            if (i == s.u.str.n)
                break;
            int k = tok_utf8_len((unsigned char)s.u.str.s[i]);
            put(c, b, s.u.str.s + i, (size_t)k);
            i += (size_t)k;
        }
    } else {
        size_t i = 0;
        while (i < s.u.str.n) {
            charge(c, 1 + (s.u.str.n - i) / 256);
            const char *hit = remaining > 0 && old.u.str.n <= s.u.str.n - i ? memmem(s.u.str.s + i, s.u.str.n - i, old.u.str.s, old.u.str.n) : NULL;
            if (!hit)
                break;
            put(c, b, s.u.str.s + i, (size_t)(hit - (s.u.str.s + i)));
            put(c, b, new.u.str.s, new.u.str.n);
            remaining--;
            i = (size_t)(hit - s.u.str.s) + old.u.str.n;
        }
        put(c, b, s.u.str.s + i, s.u.str.n - i);
    }
    jv r = v_str(jstrdup(c, b->p ? b->p : "", b->n), b->n);
    tbuf_close(c, b);
    return r;
}

static jv kwarg(jv *args, size_t nargs, const char *name)
{
    if (nargs && args[nargs - 1].t == V_KW) {
        jv *v = obj_find(args[nargs - 1].u.obj, name, strlen(name));
        if (v)
            return *v;
    }
    return v_undef();
}
static size_t npos(jv *args, size_t nargs) { return nargs && args[nargs - 1].t == V_KW ? nargs - 1 : nargs; }

static jv call_method(interp *I, jfn *f, jv *args, size_t nargs)
{
    jctx *c = I->c;
    jv s = f->self;
    size_t np = npos(args, nargs);
    const char *m = f->name;
#define M(w) (!strcmp(m, w))
    if (s.t == V_STR) {
        if (M("upper") || M("lower")) {
            if (!ascii_only(s))
                jfail(c, "unsupported: %s() of non-ASCII text", m);
            return case_map(c, s, M("upper"));
        }
        if (M("strip") || M("lstrip") || M("rstrip")) {
            /* the reference ignores a chars argument and trims JS whitespace (strip('\n') trims spaces
             * too); we do the same so prompts stay byte-identical to it */
            return js_trim(s, !M("rstrip"), !M("lstrip"));
        }
        if (M("startswith") || M("endswith")) {
            if (!np)
                jfail(c, "%s() requires at least one argument", m);
            int ends = M("endswith");
            jv pats = args[0];
            size_t cnt = pats.t == V_ARR ? pats.u.arr->n : 1;
            if (pats.t != V_STR && pats.t != V_ARR)
                jfail(c, "%s() argument must be a string or tuple of strings", m);
            for (size_t i = 0; i < cnt; i++) {
                jv p = pats.t == V_ARR ? pats.u.arr->v[i] : pats;
                if (p.t != V_STR)
                    jfail(c, "%s() tuple elements must be strings", m);
                if (p.u.str.n <= s.u.str.n &&
                    !memcmp(ends ? s.u.str.s + s.u.str.n - p.u.str.n : s.u.str.s, p.u.str.s, p.u.str.n))
                    return v_bool(1);
            }
            return v_bool(0);
        }
        if (M("split")) {
            jv sep = np > 0 ? args[0] : v_null();
            jv maxs = np > 1 ? args[1] : v_int(-1);
            if (sep.t != V_STR && sep.t != V_NULL)
                jfail(c, "sep argument must be a string or null");
            if (maxs.t != V_INT)
                jfail(c, "maxsplit argument must be a number");
            double maxsplit = maxs.u.num;
            jv parts[1];
            (void)parts;
            size_t cap = s.u.str.n + 2, cnt = 0;
            jv *v = jalloc(c, cap * sizeof *v);
            if (sep.t == V_NULL) {
                jv t = js_trim(s, 1, 0);
                size_t i = 0, n = t.u.str.n;
                const char *p = t.u.str.s;
                while (i < n) {
                    size_t k;
                    while (i < n && js_ws_at(p, n, i, &k))
                        i += k;
                    if (i >= n)
                        break;
                    size_t st = i;
                    while (i < n && !js_ws_at(p, n, i, &k))
                        i += (size_t)tok_utf8_len((unsigned char)p[i]);
                    if (maxsplit != -1 && (double)cnt >= maxsplit) {
                        v[cnt++] = v_str(p + st, n - st);
                        break;
                    }
                    v[cnt++] = v_str(p + st, i - st);
                }
            } else {
                if (!sep.u.str.n)
                    jfail(c, "empty separator");
                size_t i = 0;
                for (;;) {
                    const char *hit = sep.u.str.n <= s.u.str.n - i ? memmem(s.u.str.s + i, s.u.str.n - i, sep.u.str.s, sep.u.str.n) : NULL;
                    if (!hit || (maxsplit != -1 && (double)cnt >= maxsplit)) {
                        v[cnt++] = v_str(s.u.str.s + i, s.u.str.n - i);
                        break;
                    }
                    v[cnt++] = v_str(s.u.str.s + i, (size_t)(hit - (s.u.str.s + i)));
                    i = (size_t)(hit - s.u.str.s) + sep.u.str.n;
                }
            }
            jv a = v_arr(c, cnt);
            memcpy(a.u.arr->v, v, cnt * sizeof *v);
            return a;
        }
        if (M("replace")) {
            if (np < 2)
                jfail(c, "replace() requires at least two arguments");
            if (args[0].t != V_STR || args[1].t != V_STR)
                jfail(c, "replace() arguments must be strings");
            jv cnt = np > 2 ? args[2] : kwarg(args, nargs, "count");
            if (cnt.t == V_UNDEF)
                cnt = v_null();
            if (cnt.t != V_INT && cnt.t != V_NULL)
                jfail(c, "replace() count argument must be a number or null");
            return str_replace(c, s, args[0], args[1], cnt.t == V_NULL ? -1 : cnt.u.num);
        }
        if (M("title") || M("capitalize")) {
            if (!ascii_only(s))
                jfail(c, "unsupported: %s() of non-ASCII text", m);
            char *o = jstrdup(c, s.u.str.s, s.u.str.n);
            for (size_t i = 0; i < s.u.str.n; i++) {
                /* title: /\b\w/ upper-cased (ASCII word chars); capitalize: the first character only */
                int start = M("capitalize") ? i == 0 : is_word(o[i]) && (i == 0 || !is_word(o[i - 1]));
                if (start && o[i] >= 'a' && o[i] <= 'z')
                    o[i] = (char)(o[i] - 32);
            }
            return v_str(o, s.u.str.n);
        }
    } else if (s.t == V_OBJ) {
        jobj *o = s.u.obj;
        if (M("get")) {
            if (!np || args[0].t != V_STR)
                jfail(c, "Object key must be a string");
            jv *v = obj_find(o, args[0].u.str.s, args[0].u.str.n);
            return v ? *v : np > 1 ? args[1] : v_null();
        }
        if (M("items") || M("keys") || M("values")) {
            jv a = v_arr(c, o->n);
            for (size_t i = 0; i < o->n; i++) {
                jv key = v_str(o->k[i], o->kn[i]);
                if (M("items")) {
                    jv pair = v_arr(c, 2);
                    pair.u.arr->v[0] = key;
                    pair.u.arr->v[1] = o->v[i];
                    a.u.arr->v[i] = pair;
                } else {
                    a.u.arr->v[i] = M("keys") ? key : o->v[i];
                }
            }
            return a;
        }
    }
#undef M
    jfail(c, "unsupported method '%s' on %s", m, type_name(s));
}

static jv call_fn(interp *I, jv fnv, jv *args, size_t nargs, env *E)
{
    jctx *c = I->c;
    if (fnv.t != V_FN)
        jfail(c, "Cannot call something that is not a function: got %s", type_name(fnv));
    jfn *f = fnv.u.fn;
    size_t np = npos(args, nargs);
    switch (f->kind) {
    case F_METHOD: return call_method(I, f, args, nargs);
    case F_RAISE: {
        jv m = np ? to_string(c, args[0]) : v_cstr("");
        jfail(c, "template raised: %.*s", (int)(m.u.str.n > 400 ? 400 : m.u.str.n), m.u.str.s);
    }
    case F_NAMESPACE: {
        jv ns = v_obj(c, V_NS);
        if (np > 1)
            jfail(c, "namespace expected at most 1 argument, got %zu", np);
        if (np == 1) {
            if (args[0].t == V_OBJ) {
                for (size_t i = 0; i < args[0].u.obj->n; i++)
                    obj_set(c, ns.u.obj, args[0].u.obj->k[i], args[0].u.obj->kn[i], args[0].u.obj->v[i]);
            } else {
                jfail(c, "unsupported: namespace() from a %s", type_name(args[0]));
            }
        }
        if (nargs > np) {
            jobj *kw = args[nargs - 1].u.obj;
            for (size_t i = 0; i < kw->n; i++)
                obj_set(c, ns.u.obj, kw->k[i], kw->kn[i], kw->v[i]);
        }
        return ns;
    }
    case F_RANGE: {
        double start = 0, stop, step = 1;
        for (size_t i = 0; i < np; i++)
            if (args[i].t != V_INT)
                jfail(c, "range() arguments must be integers");
        if (np == 1) {
            stop = args[0].u.num;
        } else if (np >= 2) {
            start = args[0].u.num;
            stop = args[1].u.num;
            if (np > 2)
                step = args[2].u.num;
        } else {
            jfail(c, "range() needs arguments");
        }
        if (step == 0)
            jfail(c, "range() step must not be zero");
        double cnt = step > 0 ? ceil((stop - start) / step) : ceil((start - stop) / -step);
        if (cnt < 0)
            cnt = 0;
        if (cnt > 1e6)
            jfail(c, "range() too long");
        jv a = v_arr(c, (size_t)cnt);
        for (size_t i = 0; i < (size_t)cnt; i++)
            a.u.arr->v[i] = v_int(start + step * (double)i);
        return a;
    }
    case F_STRFTIME: {
        if (!np || args[0].t != V_STR)
            jfail(c, "strftime_now() needs a format string");
        time_t now = time(NULL);
        struct tm tm;
        localtime_r(&now, &tm);
        static const char *const mon[] = {"January", "February", "March",     "April",   "May",      "June",
                                          "July",    "August",   "September", "October", "November", "December"};
        tok_buf *b = tbuf_open(c);
        const char *f = args[0].u.str.s;
        size_t n = args[0].u.str.n;
        for (size_t i = 0; i < n; i++) {
            char buf[32];
            if (f[i] == '%' && i + 1 < n && strchr("YmdbBHM%", f[i + 1])) {
                switch (f[++i]) {
                case 'Y': snprintf(buf, sizeof buf, "%d", tm.tm_year + 1900); break;
                case 'm': snprintf(buf, sizeof buf, "%02d", tm.tm_mon + 1); break;
                case 'd': snprintf(buf, sizeof buf, "%02d", tm.tm_mday); break;
                case 'b': snprintf(buf, sizeof buf, "%.3s", mon[tm.tm_mon]); break;
                case 'B': snprintf(buf, sizeof buf, "%s", mon[tm.tm_mon]); break;
                case 'H': snprintf(buf, sizeof buf, "%02d", tm.tm_hour); break;
                case 'M': snprintf(buf, sizeof buf, "%02d", tm.tm_min); break;
                default: snprintf(buf, sizeof buf, "%%"); break;
                }
                puts_(c, b, buf);
            } else {
                put(c, b, f + i, 1);
            }
        }
        jv r = v_str(jstrdup(c, b->p ? b->p : "", b->n), b->n);
        tbuf_close(c, b);
        return r;
    }
    case F_MACRO: {
        node *m = f->macro;
        /* the body's text goes to a malloc'd buffer opened before the mark; when the call wrote to no
         * older object, everything it allocated (its scope included) goes before the result is copied */
        tok_buf *b = tbuf_open(c);
        iter_mark im = iter_begin(c);
        env *ME = new_env(c, E);
        jobj *kw = nargs > np ? args[nargs - 1].u.obj : NULL;
        if (np > m->nkids)
            jfail(c, "macro '%.*s' takes not more than %zu argument(s)", (int)m->a->n, m->a->s, m->nkids);
        for (size_t i = 0; i < m->nkids; i++) {
            node *par = m->kids[i];
            jv v = v_undef();
            if (i < np) {
                v = args[i];
            } else if (kw && obj_find(kw, par->s, par->n)) {
                v = *obj_find(kw, par->s, par->n);
            } else if (par->type == E_KWARG) {
                v = eval(I, par->a, ME);
            }
            setvar(c, ME, par->s, par->n, v);
        }
        exec_block(I, m->body, m->nbody, ME, b);
        iter_end(c, im);
        jv r = v_str(jstrdup(c, b->p ? b->p : "", b->n), b->n);
        tbuf_close(c, b);
        return r;
    }
    }
    jfail(c, "bad function");
}

/* JS loose equality for the value kinds templates compare */
static int loose_eq(jv a, jv b)
{
    int an = a.t == V_UNDEF || a.t == V_NULL, bn = b.t == V_UNDEF || b.t == V_NULL;
    if (an || bn)
        return an && bn;
    int anum = a.t == V_INT || a.t == V_FLOAT || a.t == V_BOOL, bnum = b.t == V_INT || b.t == V_FLOAT || b.t == V_BOOL;
    double x = a.t == V_BOOL ? a.u.b : a.u.num, y = b.t == V_BOOL ? b.u.b : b.u.num;
    if (anum && bnum)
        return x == y;
    if (a.t == V_STR && b.t == V_STR)
        return a.u.str.n == b.u.str.n && !memcmp(a.u.str.s, b.u.str.s, a.u.str.n);
    if ((a.t == V_STR && bnum) || (anum && b.t == V_STR)) {
        jv s = a.t == V_STR ? a : b;
        double num = anum ? x : y;
        char buf[64];
        if (s.u.str.n >= sizeof buf)
            return 0;
        memcpy(buf, s.u.str.s, s.u.str.n);
        buf[s.u.str.n] = 0;
        char *end;
        const char *q = buf;
        while (*q == ' ' || *q == '\t' || *q == '\n')
            q++;
        if (!*q)
            return num == 0;
        double d = strtod(q, &end);
        while (*end == ' ' || *end == '\t' || *end == '\n')
            end++;
        return !*end && d == num;
    }
    if (a.t != b.t)
        return 0;
    switch (a.t) {
    case V_ARR: return a.u.arr == b.u.arr;
    case V_OBJ:
    case V_NS:
    case V_KW: return a.u.obj == b.u.obj;
    case V_FN: return a.u.fn == b.u.fn;
    }
    return 0;
}

/* JS strict equality (=== on .value): primitives by value, containers by identity */
static int strict_eq(jv a, jv b)
{
    if (a.t != b.t) {
        int an = a.t == V_INT || a.t == V_FLOAT, bn = b.t == V_INT || b.t == V_FLOAT;
        if (an && bn)
            return a.u.num == b.u.num;
        return 0;
    }
    switch (a.t) {
    case V_UNDEF:
    case V_NULL: return 1;
    case V_BOOL: return a.u.b == b.u.b;
    case V_INT:
    case V_FLOAT: return a.u.num == b.u.num;
    case V_STR: return a.u.str.n == b.u.str.n && !memcmp(a.u.str.s, b.u.str.s, a.u.str.n);
    default: return loose_eq(a, b);
    }
}

/* String(value) of the underlying JS value, which `~` and string `+` use (not the rendering: 2.0 -> "2") */
static jv raw_string(jctx *c, jv v)
{
    char num[64];
    switch (v.t) {
    case V_INT:
    case V_FLOAT:
        charge(c, 16); /* shortest round trip: up to 17 printf/strtod pairs */
        js_num(v.u.num, num, sizeof num);
        return v_str(jstrdup(c, num, strlen(num)), strlen(num));
    case V_ARR: {
        tok_buf *b = tbuf_open(c);
        for (size_t i = 0; i < v.u.arr->n; i++) {
            jv e = v.u.arr->v[i];
            jv s = e.t == V_NULL || e.t == V_UNDEF ? v_cstr("") : to_string(c, e);
            if (i)
                put(c, b, ",", 1);
            put(c, b, s.u.str.s, s.u.str.n);
        }
        jv r = v_str(jstrdup(c, b->p ? b->p : "", b->n), b->n);
        tbuf_close(c, b);
        return r;
    }
    case V_OBJ:
    case V_NS:
    case V_KW: return v_cstr("[object Map]");
    default: return to_string(c, v);
    }
}

static jv concat(jctx *c, jv a, jv b)
{
    jv x = raw_string(c, a), y = raw_string(c, b);
    char *p = jalloc(c, x.u.str.n + y.u.str.n + 1);
    memcpy(p, x.u.str.s, x.u.str.n);
    memcpy(p + x.u.str.n, y.u.str.s, y.u.str.n);
    p[x.u.str.n + y.u.str.n] = 0;
    return v_str(p, x.u.str.n + y.u.str.n);
}

static jv eval_bin(interp *I, node *x, env *E)
{
    jctx *c = I->c;
    const char *op = x->s;
    size_t on = x->n;
#define OP(w) (on == strlen(w) && !memcmp(op, w, on))
    jv l = eval(I, x->a, E);
    if (OP("and"))
        return truthy(l) ? eval(I, x->b, E) : l;
    if (OP("or"))
        return truthy(l) ? l : eval(I, x->b, E);
    jv r = eval(I, x->b, E);
    if (OP("=="))
        return v_bool(loose_eq(l, r));
    if (OP("!="))
        return v_bool(!loose_eq(l, r));
    if (l.t == V_UNDEF || r.t == V_UNDEF) {
        if (r.t == V_UNDEF && (OP("in") || OP("not in")))
            return v_bool(OP("not in"));
        jfail(c, "template line %d: Cannot perform operation %.*s on undefined values", x->line, (int)on, op);
    }
    if (l.t == V_NULL || r.t == V_NULL)
        jfail(c, "template line %d: Cannot perform operation on null values", x->line);
    if (OP("~"))
        return concat(c, l, r);
    int lnum = l.t == V_INT || l.t == V_FLOAT, rnum = r.t == V_INT || r.t == V_FLOAT;
    if (OP("**") && (lnum || l.t == V_BOOL) && (rnum || r.t == V_BOOL)) {
        double a = l.t == V_BOOL ? l.u.b : l.u.num, b = r.t == V_BOOL ? r.u.b : r.u.num;
        if (a == 0 && b < 0)
            jfail(c, "0.0 cannot be raised to a negative power");
        double res = pow(a, b);
        if (!isfinite(res))
            jfail(c, "Exponentiation result is not a finite real number");
        return l.t == V_FLOAT || r.t == V_FLOAT || b < 0 ? v_float(res) : v_int(res);
    }
    if (lnum && rnum) {
        double a = l.u.num, b = r.u.num;
        int fl = l.t == V_FLOAT || r.t == V_FLOAT;
        if (OP("+"))
            return fl ? v_float(a + b) : v_int(a + b);
        if (OP("-"))
            return fl ? v_float(a - b) : v_int(a - b);
        if (OP("*"))
            return fl ? v_float(a * b) : v_int(a * b);
        if (OP("/"))
            return v_float(a / b);
        if (OP("//"))
            return fl ? v_float(floor(a / b)) : v_int(floor(a / b));
        if (OP("%"))
            return fl ? v_float(fmod(a, b)) : v_int(fmod(a, b));
        if (OP("<"))
            return v_bool(a < b);
        if (OP(">"))
            return v_bool(a > b);
        if (OP(">="))
            return v_bool(a >= b);
        if (OP("<="))
            return v_bool(a <= b);
    } else if (l.t == V_ARR && r.t == V_ARR) {
        if (OP("+")) {
            jv a = v_arr(c, l.u.arr->n + r.u.arr->n);
            memcpy(a.u.arr->v, l.u.arr->v, l.u.arr->n * sizeof(jv));
            memcpy(a.u.arr->v + l.u.arr->n, r.u.arr->v, r.u.arr->n * sizeof(jv));
            return a;
        }
    } else if (r.t == V_ARR) {
        charge(c, r.u.arr->n);
        int mem = 0;
        for (size_t i = 0; i < r.u.arr->n && !mem; i++)
            mem = strict_eq(r.u.arr->v[i], l);
        if (OP("in"))
            return v_bool(mem);
        if (OP("not in"))
            return v_bool(!mem);
    }
    if ((l.t == V_STR || r.t == V_STR) && OP("+"))
        return concat(c, l, r);
    if (l.t == V_STR && r.t == V_STR && (OP("in") || OP("not in"))) {
        charge(c, 1 + r.u.str.n / 256);
        int has = l.u.str.n == 0 || (l.u.str.n <= r.u.str.n && memmem(r.u.str.s, r.u.str.n, l.u.str.s, l.u.str.n));
        return v_bool(OP("in") ? has : !has);
    }
    if (l.t == V_STR && r.t == V_OBJ && (OP("in") || OP("not in"))) {
        int has = obj_find(r.u.obj, l.u.str.s, l.u.str.n) != NULL;
        return v_bool(OP("in") ? has : !has);
    }
    if (l.t == V_STR && r.t == V_STR && (OP("<") || OP(">") || OP("<=") || OP(">=")))
        jfail(c, "template line %d: unsupported: string comparison with %.*s", x->line, (int)on, op);
    jfail(c, "template line %d: Unknown operator \"%.*s\" between %s and %s", x->line, (int)on, op, type_name(l),
          type_name(r));
#undef OP
}

static void eval_args(interp *I, node **kids, size_t n, env *E, jv **out, size_t *nout)
{
    jctx *c = I->c;
    size_t cap = n + 1, cnt = 0;
    for (size_t i = 0; i < n; i++)
        if (kids[i]->type == E_SPREAD)
            cap += 64;
    jv *v = jalloc(c, cap * sizeof *v);
    jv kw = v_undef();
    for (size_t i = 0; i < n; i++) {
        node *a = kids[i];
        if (a->type == E_SPREAD) {
            jv s = eval(I, a->a, E);
            if (s.t != V_ARR)
                jfail(c, "Cannot unpack non-iterable type: %s", type_name(s));
            if (cnt + s.u.arr->n >= cap) {
                jv *nv = jalloc(c, (cnt + s.u.arr->n + n + 1) * sizeof *nv);
                memcpy(nv, v, cnt * sizeof *v);
                v = nv;
                cap = cnt + s.u.arr->n + n + 1;
            }
            for (size_t k = 0; k < s.u.arr->n; k++)
                v[cnt++] = s.u.arr->v[k];
        } else if (a->type != E_KWARG && a->type != E_KWSPREAD) {
            v[cnt++] = eval(I, a, E);
        }
    }
    for (size_t i = 0; i < n; i++) {
        node *a = kids[i];
        if (a->type == E_KWARG || a->type == E_KWSPREAD) {
            if (kw.t == V_UNDEF)
                kw = v_obj(c, V_KW);
            if (a->type == E_KWARG) {
                if (obj_find(kw.u.obj, a->s, a->n))
                    jfail(c, "Got multiple values for keyword argument '%.*s'", (int)a->n, a->s);
                obj_set(c, kw.u.obj, a->s, a->n, eval(I, a->a, E));
            } else {
                jv m = eval(I, a->a, E);
                if (m.t != V_OBJ)
                    jfail(c, "Argument after ** must be a mapping, not %s", type_name(m));
                for (size_t k = 0; k < m.u.obj->n; k++)
                    obj_set(c, kw.u.obj, m.u.obj->k[k], m.u.obj->kn[k], m.u.obj->v[k]);
            }
        }
    }
    if (kw.t != V_UNDEF)
        v[cnt++] = kw;
    *out = v;
    *nout = cnt;
}

static jv get_attr_path(jv item, const char *path, size_t n)
{
    size_t i = 0;
    jv v = item;
    while (i <= n) {
        const char *dot = memchr(path + i, '.', n - i);
        size_t pn = dot ? (size_t)(dot - (path + i)) : n - i;
        if (v.t == V_OBJ || v.t == V_NS) {
            jv *f = obj_find(v.u.obj, path + i, pn);
            v = f ? *f : v_undef();
        } else if (v.t == V_ARR) {
            char buf[24];
            snprintf(buf, sizeof buf, "%.*s", (int)(pn < 23 ? pn : 23), path + i);
            char *end;
            long k = strtol(buf, &end, 10);
            if (end == buf || k < 0 || (size_t)k >= v.u.arr->n)
                return v_undef();
            v = v.u.arr->v[k];
        } else {
            return v_undef();
        }
        if (!dot)
            break;
        i += pn + 1;
    }
    return v;
}

/* compareRuntimeValues: numbers (and booleans) numerically, strings by code unit (case-folded unless
 * case_sensitive), null with null, undefined with undefined; anything else is an error */
static int compare_values(jctx *c, jv a, jv b, int case_sensitive)
{
    if (a.t == V_NULL && b.t == V_NULL)
        return 0;
    if (a.t == V_NULL || b.t == V_NULL || a.t == V_UNDEF || b.t == V_UNDEF) {
        if (a.t == V_UNDEF && b.t == V_UNDEF)
            return 0;
        jfail(c, "Cannot compare %s with %s", type_name(a), type_name(b));
    }
    int an = a.t == V_INT || a.t == V_FLOAT || a.t == V_BOOL, bn = b.t == V_INT || b.t == V_FLOAT || b.t == V_BOOL;
    if (an && bn) {
        double x = a.t == V_BOOL ? a.u.b : a.u.num, y = b.t == V_BOOL ? b.u.b : b.u.num;
        return x < y ? -1 : x > y ? 1 : 0;
    }
    if (a.t != b.t)
        jfail(c, "Cannot compare different types: %s and %s", type_name(a), type_name(b));
    if (a.t != V_STR)
        jfail(c, "Cannot compare type: %s", type_name(a));
    if (!case_sensitive && (!ascii_only(a) || !ascii_only(b)))
        jfail(c, "unsupported: case-insensitive sort of non-ASCII text");
    size_t n = a.u.str.n < b.u.str.n ? a.u.str.n : b.u.str.n;
    for (size_t i = 0; i < n; i++) {
        unsigned char x = (unsigned char)a.u.str.s[i], y = (unsigned char)b.u.str.s[i];
        if (!case_sensitive) {
            x = x >= 'A' && x <= 'Z' ? (unsigned char)(x + 32) : x;
            y = y >= 'A' && y <= 'Z' ? (unsigned char)(y + 32) : y;
        }
        if (x != y)
            return x < y ? -1 : 1;
    }
    return a.u.str.n < b.u.str.n ? -1 : a.u.str.n > b.u.str.n ? 1 : 0;
}

static int run_test(interp *I, const char *name, size_t n, jv v, int line)
{
#define T(w) (n == strlen(w) && !memcmp(name, w, n))
    if (T("defined"))
        return v.t != V_UNDEF;
    if (T("undefined"))
        return v.t == V_UNDEF;
    if (T("none"))
        return v.t == V_NULL;
    if (T("string"))
        return v.t == V_STR;
    if (T("boolean"))
        return v.t == V_BOOL;
    if (T("callable"))
        return v.t == V_FN;
    if (T("false"))
        return v.t == V_BOOL && !v.u.b;
    if (T("true"))
        return v.t == V_BOOL && v.u.b;
    if (T("number"))
        return v.t == V_INT || v.t == V_FLOAT;
    if (T("integer"))
        return v.t == V_INT;
    if (T("iterable"))
        return v.t == V_ARR || v.t == V_STR;
    if (T("mapping"))
        return v.t == V_OBJ;
    if (T("sequence"))
        return v.t == V_ARR || v.t == V_OBJ || v.t == V_STR;
    if (T("odd") || T("even")) {
        if (v.t != V_INT)
            jfail(I->c, "cannot %.*s on %s", (int)n, name, type_name(v));
        int odd = fmod(v.u.num, 2) != 0;
        return T("odd") ? odd : !odd;
    }
    if (T("lower") || T("upper")) {
        if (v.t != V_STR)
            return 0;
        if (!ascii_only(v))
            jfail(I->c, "unsupported: test '%.*s' on non-ASCII text", (int)n, name);
        for (size_t i = 0; i < v.u.str.n; i++) {
            char ch = v.u.str.s[i];
            if (T("lower") ? (ch >= 'A' && ch <= 'Z') : (ch >= 'a' && ch <= 'z'))
                return 0;
        }
        return 1;
    }
#undef T
    jfail(I->c, "template line %d: unsupported test '%.*s'", line, (int)n, name);
}

static jv apply_filter(interp *I, node *x, jv v, env *E)
{
    jctx *c = I->c;
    const char *f = x->s;
    size_t fn = x->n;
#define F(w) (fn == strlen(w) && !memcmp(f, w, fn))
    jv *args = NULL;
    size_t nargs = 0, np = 0;
    if (x->computed) {
        eval_args(I, x->kids, x->nkids, E, &args, &nargs);
        np = npos(args, nargs);
    }
    if (F("safe"))
        return v;
    if (F("tojson")) {
        json_opts o = JSON_DEFAULT;
        if (x->computed) {
            jv ind = kwarg(args, nargs, "indent"), ea = kwarg(args, nargs, "ensure_ascii"),
               sk = kwarg(args, nargs, "sort_keys"), sep = kwarg(args, nargs, "separators");
            if (ind.t == V_INT) {
                o.indent = (int)ind.u.num;
                if (o.indent > 0)
                    o.item_sep = ",";
                else
                    o.indent = -1; /* indent 0 is falsy in the reference: no newlines */
            } else if (ind.t != V_UNDEF && ind.t != V_NULL) {
                jfail(c, "If set, indent must be a number");
            }
            if (ea.t == V_BOOL)
                o.ensure_ascii = ea.u.b;
            if (sk.t == V_BOOL)
                o.sort_keys = sk.u.b;
            if (sep.t == V_ARR) {
                if (sep.u.arr->n != 2 || sep.u.arr->v[0].t != V_STR || sep.u.arr->v[1].t != V_STR)
                    jfail(c, "separators must be a tuple of two strings");
                o.item_sep = jstrdup(c, sep.u.arr->v[0].u.str.s, sep.u.arr->v[0].u.str.n);
                o.key_sep = jstrdup(c, sep.u.arr->v[1].u.str.s, sep.u.arr->v[1].u.str.n);
            }
        }
        return json_value(c, v, &o);
    }
    if (F("default") || F("d")) {
        if (F("d"))
            jfail(c, "template line %d: unsupported filter 'd'", x->line);
        if (!x->computed)
            goto unknown;
        jv dflt = np ? args[0] : v_cstr("");
        jv boolean = np > 1 ? args[1] : kwarg(args, nargs, "boolean");
        if (v.t == V_UNDEF || (boolean.t == V_BOOL && boolean.u.b && !truthy(v)))
            return dflt;
        return v;
    }
    if (F("join") && x->computed) {
        jv sep = np ? args[0] : kwarg(args, nargs, "separator");
        if (sep.t == V_UNDEF)
            sep = v_cstr("");
        if (sep.t != V_STR)
            jfail(c, "separator must be a string");
        tok_buf *b = tbuf_open(c);
        if (v.t == V_ARR) {
            for (size_t i = 0; i < v.u.arr->n; i++) {
                if (i)
                    put(c, b, sep.u.str.s, sep.u.str.n);
                jv s = to_string(c, v.u.arr->v[i]);
                if (v.u.arr->v[i].t == V_NULL || v.u.arr->v[i].t == V_UNDEF)
                    s = v_cstr(""); /* JS Array.join renders null/undefined as "" */
                put(c, b, s.u.str.s, s.u.str.n);
            }
        } else if (v.t == V_STR) {
            for (size_t i = 0; i < v.u.str.n;) {
                int k = tok_utf8_len((unsigned char)v.u.str.s[i]);
                if (i)
                    put(c, b, sep.u.str.s, sep.u.str.n);
                put(c, b, v.u.str.s + i, (size_t)k);
                i += (size_t)k;
            }
        } else {
            jfail(c, "Cannot apply filter \"join\" to type: %s", type_name(v));
        }
        jv r = v_str(jstrdup(c, b->p ? b->p : "", b->n), b->n);
        tbuf_close(c, b);
        return r;
    }
    if (v.t == V_ARR) {
        jarr *a = v.u.arr;
        if (F("length") || F("count"))
            return v_int((double)a->n);
        if (F("list"))
            return v;
        if (F("first"))
            return a->n ? a->v[0] : v_undef();
        if (F("last"))
            return a->n ? a->v[a->n - 1] : v_undef();
        if (F("reverse")) {
            jv r = v_arr(c, a->n);
            for (size_t i = 0; i < a->n; i++)
                r.u.arr->v[i] = a->v[a->n - 1 - i];
            return r;
        }
        if (F("join") && !x->computed) {
            jv s = apply_filter(I, &(node){.type = E_FILTER, .s = "join", .n = 4, .computed = 1}, v, E);
            return s;
        }
        if (F("string"))
            return json_value(c, v, &JSON_PRINT);
        if (F("sort")) {
            jv rev = np > 0 ? args[0] : kwarg(args, nargs, "reverse");
            jv cs = np > 1 ? args[1] : kwarg(args, nargs, "case_sensitive");
            jv attr = np > 2 ? args[2] : kwarg(args, nargs, "attribute");
            if ((rev.t != V_UNDEF && rev.t != V_BOOL) || (cs.t != V_UNDEF && cs.t != V_BOOL))
                jfail(c, "reverse and case_sensitive must be booleans");
            if (attr.t != V_UNDEF && attr.t != V_NULL && attr.t != V_STR && attr.t != V_INT)
                jfail(c, "attribute must be a string, integer, or null");
            char ab[32];
            const char *ap = NULL;
            size_t an = 0;
            if (attr.t == V_STR) {
                ap = attr.u.str.s;
                an = attr.u.str.n;
            } else if (attr.t == V_INT) {
                snprintf(ab, sizeof ab, "%.0f", attr.u.num);
                ap = ab;
                an = strlen(ab);
            }
            jv out = v_arr(c, a->n), *key = jalloc(c, (a->n + 1) * sizeof *key);
            for (size_t i = 0; i < a->n; i++) {
                out.u.arr->v[i] = a->v[i];
                key[i] = ap ? get_attr_path(a->v[i], ap, an) : a->v[i];
            }
            /* stable insertion sort, as Array.prototype.sort is stable */
            for (size_t i = 1; i < a->n; i++) {
                jv xv = out.u.arr->v[i], xk = key[i];
                size_t j = i;
                while (j > 0) {
                    charge(c, 1);
                    int r = compare_values(c, key[j - 1], xk, cs.t == V_BOOL && cs.u.b);
                    if (rev.t == V_BOOL && rev.u.b)
                        r = -r;
                    if (r <= 0)
                        break;
                    out.u.arr->v[j] = out.u.arr->v[j - 1];
                    key[j] = key[j - 1];
                    j--;
                }
                out.u.arr->v[j] = xv;
                key[j] = xk;
            }
            return out;
        }
        if (F("selectattr") || F("rejectattr")) {
            int sel = F("selectattr");
            for (size_t i = 0; i < x->nkids; i++)
                if (x->kids[i]->type != E_STR)
                    jfail(c, "arguments of `%.*s` must be strings", (int)fn, f);
            if (!np || args[0].t != V_STR)
                jfail(c, "%.*s needs an attribute name", (int)fn, f);
            jv out = v_arr(c, a->n);
            size_t k = 0;
            for (size_t i = 0; i < a->n; i++) {
                if (a->v[i].t != V_OBJ && a->v[i].t != V_NS)
                    jfail(c, "`%.*s` can only be applied to array of objects", (int)fn, f);
                jv *at = obj_find(a->v[i].u.obj, args[0].u.str.s, args[0].u.str.n);
                int res = 0;
                if (at && at->t != V_UNDEF) {
                    if (np > 1) {
                        if (np > 2 && (str_eq(args[1], "equalto") || str_eq(args[1], "eq")))
                            res = strict_eq(*at, args[2]);
                        else
                            res = run_test(I, args[1].u.str.s, args[1].u.str.n, *at, x->line);
                    } else {
                        res = truthy(*at);
                    }
                }
                if (sel ? res : !res)
                    out.u.arr->v[k++] = a->v[i];
            }
            out.u.arr->n = k;
            return out;
        }
        if (F("map")) {
            jv attr = kwarg(args, nargs, "attribute");
            if (attr.t != V_STR)
                jfail(c, "template line %d: unsupported: map() without attribute=", x->line);
            jv dflt = kwarg(args, nargs, "default");
            jv out = v_arr(c, a->n);
            for (size_t i = 0; i < a->n; i++) {
                if (a->v[i].t != V_OBJ && a->v[i].t != V_NS)
                    jfail(c, "items in map must be an object");
                jv r = get_attr_path(a->v[i], attr.u.str.s, attr.u.str.n);
                out.u.arr->v[i] = r.t == V_UNDEF ? dflt : r;
            }
            return out;
        }
        if (F("unique")) {
            jv out = v_arr(c, a->n);
            size_t k = 0;
            for (size_t i = 0; i < a->n; i++) {
                int seen = 0;
                charge(c, 1 + k);
                for (size_t j = 0; j < k && !seen; j++)
                    seen = strict_eq(out.u.arr->v[j], a->v[i]);
                if (!seen)
                    out.u.arr->v[k++] = a->v[i];
            }
            out.u.arr->n = k;
            return out;
        }
    } else if (v.t == V_STR) {
        if (F("length") || F("count"))
            return v_int((double)utf16_len(v.u.str.s, v.u.str.n));
        if (F("upper") || F("lower")) {
            if (!ascii_only(v))
                jfail(c, "unsupported: %.*s of non-ASCII text", (int)fn, f);
            return case_map(c, v, F("upper"));
        }
        if (F("title") || F("capitalize")) {
            jfn m = {.kind = F_METHOD, .name = F("title") ? "title" : "capitalize", .self = v};
            return call_method(I, &m, NULL, 0);
        }
        if (F("trim"))
            return js_trim(v, 1, 1);
        if (F("string") || (F("join") && !x->computed))
            return v;
        if (F("replace")) {
            jfn m = {.kind = F_METHOD, .name = "replace", .self = v};
            return call_method(I, &m, args, nargs);
        }
        if (F("int")) {
            char buf[64];
            snprintf(buf, sizeof buf, "%.*s", (int)(v.u.str.n < 63 ? v.u.str.n : 63), v.u.str.s);
            char *end;
            const char *q = buf;
            while (*q == ' ' || *q == '\t' || *q == '\n')
                q++;
            long long k = strtoll(q, &end, 10);
            if (end == q)
                return np ? args[0] : v_int(0);
            return v_int((double)k);
        }
        if (F("indent")) {
            jv w = np ? args[0] : kwarg(args, nargs, "width");
            jv first = np > 1 ? args[1] : kwarg(args, nargs, "first");
            jv blank = np > 2 ? args[2] : kwarg(args, nargs, "blank");
            int width = w.t == V_INT ? (int)w.u.num : 4;
            if (w.t != V_UNDEF && w.t != V_INT)
                jfail(c, "width must be a number");
            tok_buf *b = tbuf_open(c);
            size_t i = 0;
            int lineno = 0;
            while (i <= v.u.str.n) {
                const char *nl = memchr(v.u.str.s + i, '\n', v.u.str.n - i);
                size_t ln = nl ? (size_t)(nl - (v.u.str.s + i)) : v.u.str.n - i;
                int skip = (!truthy(first) && lineno == 0) || (!truthy(blank) && ln == 0);
                if (lineno)
                    put(c, b, "\n", 1);
                for (int k = 0; k < width && !skip; k++)
                    put(c, b, " ", 1);
                put(c, b, v.u.str.s + i, ln);
                lineno++;
                if (!nl)
                    break;
                i += ln + 1;
            }
            jv r = v_str(jstrdup(c, b->p ? b->p : "", b->n), b->n);
            tbuf_close(c, b);
            return r;
        }
    } else if (v.t == V_INT || v.t == V_FLOAT) {
        if (F("abs"))
            return v.t == V_INT ? v_int(fabs(v.u.num)) : v_float(fabs(v.u.num));
        if (F("int"))
            return x->computed ? v : v_int(floor(v.u.num));
        if (F("float"))
            return x->computed ? v : v_float(v.u.num);
        if (F("string"))
            return to_string(c, v);
    } else if (v.t == V_OBJ) {
        if (F("length"))
            return v_int((double)v.u.obj->n);
        if (F("items")) {
            jfn m = {.kind = F_METHOD, .name = "items", .self = v};
            return call_method(I, &m, NULL, 0);
        }
        if (F("keys") || F("values")) {
            jfn m = {.kind = F_METHOD, .name = F("keys") ? "keys" : "values", .self = v};
            return call_method(I, &m, NULL, 0);
        }
    } else if (v.t == V_BOOL) {
        if (F("int"))
            return v_int(v.u.b);
        if (F("float"))
            return v_float(v.u.b);
        if (F("string"))
            return v_cstr(v.u.b ? "true" : "false");
        if (F("bool"))
            return v;
    }
unknown:
    jfail(c, "template line %d: unsupported filter '%.*s' on %s", x->line, (int)fn, f, type_name(v));
#undef F
}

static jv eval_member(interp *I, node *x, env *E)
{
    jctx *c = I->c;
    jv obj = eval(I, x->a, E);
    if (x->computed && x->b->type == E_SLICE) {
        if (obj.t != V_ARR && obj.t != V_STR)
            jfail(c, "Slice object must be an array or string");
        node *s = x->b;
        jv st = s->a ? eval(I, s->a, E) : v_undef(), sp = s->b ? eval(I, s->b, E) : v_undef(),
           stp = s->c ? eval(I, s->c, E) : v_undef();
        if ((st.t != V_INT && st.t != V_UNDEF) || (sp.t != V_INT && sp.t != V_UNDEF) || (stp.t != V_INT && stp.t != V_UNDEF))
            jfail(c, "Slice indices must be integers or undefined");
        /* elements: array items or code points */
        size_t len = 0;
        size_t *off = NULL;
        if (obj.t == V_ARR) {
            len = obj.u.arr->n;
        } else {
            off = jalloc(c, (obj.u.str.n + 1) * sizeof *off);
            for (size_t i = 0; i < obj.u.str.n; i += (size_t)tok_utf8_len((unsigned char)obj.u.str.s[i]))
                off[len++] = i;
            off[len] = obj.u.str.n;
        }
        double L = (double)len, step = stp.t == V_INT ? stp.u.num : 1, start, stop;
        if (step == 0)
            jfail(c, "slice step cannot be zero");
        if (step > 0) {
            start = st.t == V_INT ? st.u.num : 0;
            stop = sp.t == V_INT ? sp.u.num : L;
            start = start < 0 ? fmax(L + start, 0) : fmin(start, L);
            stop = stop < 0 ? fmax(L + stop, 0) : fmin(stop, L);
        } else {
            start = st.t == V_INT ? st.u.num : L - 1;
            stop = sp.t == V_INT ? sp.u.num : -1;
            start = start < 0 ? fmax(L + start, -1) : fmin(start, L - 1);
            stop = stop < -1 ? fmax(L + stop, -1) : fmin(stop, L - 1);
        }
        jv out = obj.t == V_ARR ? v_arr(c, len) : v_undef();
        tok_buf *b = obj.t == V_STR ? tbuf_open(c) : NULL;
        size_t k = 0;
        for (double i = start; step > 0 ? i < stop : i > stop; i += step) {
            size_t ii = (size_t)i;
            charge(c, 1);
            if (obj.t == V_ARR)
                out.u.arr->v[k++] = obj.u.arr->v[ii];
            else
                put(c, b, obj.u.str.s + off[ii], off[ii + 1] - off[ii]);
        }
        if (obj.t == V_ARR) {
            out.u.arr->n = k;
            return out;
        }
        jv r = v_str(jstrdup(c, b->p ? b->p : "", b->n), b->n);
        tbuf_close(c, b);
        return r;
    }
    jv prop;
    if (x->computed)
        prop = eval(I, x->b, E);
    else if (x->b->type == E_NUM)
        prop = v_int(x->b->num);
    else
        prop = v_str(x->b->s, x->b->n);
    if (obj.t == V_OBJ || obj.t == V_NS || obj.t == V_KW) {
        if (prop.t != V_STR)
            jfail(c, "Cannot access property with non-string: got %s", type_name(prop));
        jv *f = obj_find(obj.u.obj, prop.u.str.s, prop.u.str.n);
        if (f)
            return *f;
        return obj.t == V_OBJ ? builtin_attr(c, obj, prop.u.str.s, prop.u.str.n) : v_undef();
    }
    if (obj.t == V_ARR || obj.t == V_STR) {
        if (prop.t == V_INT) {
            double i = prop.u.num;
            if (obj.t == V_ARR) {
                double n = (double)obj.u.arr->n;
                if (i < 0)
                    i += n;
                return i >= 0 && i < n ? obj.u.arr->v[(size_t)i] : v_undef();
            }
            /* by code point (the reference indexes UTF-16 units; identical for BMP text) */
            size_t cnt = 0;
            for (size_t q = 0; q < obj.u.str.n; q += (size_t)tok_utf8_len((unsigned char)obj.u.str.s[q]))
                cnt++;
            if (i < 0)
                i += (double)cnt;
            if (i < 0 || i >= (double)cnt)
                return v_undef();
            size_t q = 0;
            for (size_t k = 0; k < (size_t)i; k++)
                q += (size_t)tok_utf8_len((unsigned char)obj.u.str.s[q]);
            return v_str(obj.u.str.s + q, (size_t)tok_utf8_len((unsigned char)obj.u.str.s[q]));
        }
        if (prop.t == V_STR)
            return builtin_attr(c, obj, prop.u.str.s, prop.u.str.n);
        jfail(c, "Cannot access property with non-string/non-number: got %s", type_name(prop));
    }
    if (prop.t != V_STR)
        jfail(c, "Cannot access property with non-string: got %s", type_name(prop));
    return v_undef();
}

static jv eval_node(interp *I, node *x, env *E)
{
    jctx *c = I->c;
    switch (x->type) {
    case N_TEXT:
    case E_STR: return v_str(x->s, x->n);
    case N_COMMENT: return v_null();
    case E_NUM: return x->is_float ? v_float(x->num) : v_int(x->num);
    case E_IDENT: return lookup(E, x->s, x->n);
    case E_ARR:
    case E_TUPLE: {
        jv a = v_arr(c, x->nkids);
        for (size_t i = 0; i < x->nkids; i++)
            a.u.arr->v[i] = eval(I, x->kids[i], E);
        return a;
    }
    case E_OBJ: {
        jv o = v_obj(c, V_OBJ);
        for (size_t i = 0; i + 1 < x->nkids; i += 2) {
            jv k = eval(I, x->kids[i], E);
            if (k.t != V_STR)
                jfail(c, "template line %d: unsupported: object literal key of type %s", x->line, type_name(k));
            obj_set(c, o.u.obj, k.u.str.s, k.u.str.n, eval(I, x->kids[i + 1], E));
        }
        return o;
    }
    case E_MEMBER: return eval_member(I, x, E);
    case E_CALL: {
        jv *args;
        size_t n;
        eval_args(I, x->kids, x->nkids, E, &args, &n);
        jv f = eval(I, x->a, E);
        return call_fn(I, f, args, n, E);
    }
    case E_UNARY: {
        jv a = eval(I, x->a, E);
        if (x->s[0] == 'n')
            return v_bool(!truthy(a));
        if (a.t == V_INT || a.t == V_FLOAT || a.t == V_BOOL) {
            double d = a.t == V_BOOL ? a.u.b : a.u.num;
            d = x->s[0] == '-' ? -d : d;
            return a.t == V_FLOAT ? v_float(d) : v_int(d);
        }
        jfail(c, "template line %d: Unknown operator \"%c\" for %s", x->line, x->s[0], type_name(a));
    }
    case E_BIN: return eval_bin(I, x, E);
    case E_FILTER: return apply_filter(I, x, eval(I, x->a, E), E);
    case E_TEST: {
        int r = run_test(I, x->s, x->n, eval(I, x->a, E), x->line);
        return v_bool(x->negate ? !r : r);
    }
    case E_TERNARY: return truthy(eval(I, x->a, E)) ? eval(I, x->b, E) : eval(I, x->c, E);
    case E_SELECT: return truthy(eval(I, x->b, E)) ? eval(I, x->a, E) : v_undef();
    case E_KWARG:
    case E_SLICE:
    case E_SPREAD:
    case E_KWSPREAD: jfail(c, "template line %d: misplaced argument syntax", x->line);
    }
    jfail(c, "template line %d: unsupported construct", x->line);
}

/* every evaluation passes here: one step, one level of recursion */
static jv eval(interp *I, node *x, env *E)
{
    jctx *c = I->c;
    if (++c->rdepth > TOK_JINJA_MAX_RECURSION)
        jfail(c, "template line %d: recursion too deep (more than %d levels)", x->line, TOK_JINJA_MAX_RECURSION);
    charge(c, 1);
    jv v = eval_node(I, x, E);
    c->rdepth--;
    return v;
}

/* the loop's own variables (loop, the targets) in S: made once before the loop so that setting them per
 * iteration does not grow S, and cleared after a rewind so that nothing points into released memory */
static void loop_slots(jctx *c, env *S, node *target, int clear)
{
    jv u = v_undef();
    if (clear) {
        obj_find(&S->vars, "loop", 4)->t = V_UNDEF;
        if (target->type == E_IDENT)
            obj_find(&S->vars, target->s, target->n)->t = V_UNDEF;
        for (size_t i = 0; target->type == E_TUPLE && i < target->nkids; i++)
            if (target->kids[i]->type == E_IDENT)
                obj_find(&S->vars, target->kids[i]->s, target->kids[i]->n)->t = V_UNDEF;
        return;
    }
    setvar(c, S, "loop", 4, u);
    if (target->type == E_IDENT)
        setvar(c, S, target->s, target->n, u);
    for (size_t i = 0; target->type == E_TUPLE && i < target->nkids; i++)
        if (target->kids[i]->type == E_IDENT)
            setvar(c, S, target->kids[i]->s, target->kids[i]->n, u);
}

static void assign(interp *I, node *target, jv v, env *E)
{
    jctx *c = I->c;
    if (target->type == E_IDENT) {
        setvar(c, E, target->s, target->n, v);
    } else if (target->type == E_TUPLE) {
        if (v.t != V_ARR)
            jfail(c, "Cannot unpack non-iterable type in set: %s", type_name(v));
        if (v.u.arr->n != target->nkids)
            jfail(c, "Too %s items to unpack in set", target->nkids > v.u.arr->n ? "few" : "many");
        for (size_t i = 0; i < target->nkids; i++) {
            if (target->kids[i]->type != E_IDENT)
                jfail(c, "Cannot unpack to non-identifier in set");
            setvar(c, E, target->kids[i]->s, target->kids[i]->n, v.u.arr->v[i]);
        }
    } else if (target->type == E_MEMBER && !target->computed) {
        jv obj = eval(I, target->a, E);
        if (obj.t != V_NS)
            jfail(c, "template line %d: cannot assign attribute on non-namespace object", target->line);
        if (target->b->type != E_IDENT)
            jfail(c, "Cannot assign to member with non-identifier property");
        obj_set(c, obj.u.obj, target->b->s, target->b->n, v);
    } else {
        jfail(c, "template line %d: unsupported assignment target", target->line);
    }
}

static void exec_block(interp *I, node **body, size_t n, env *E, tok_buf *out)
{
    jctx *c = I->c;
    if (++c->rdepth > TOK_JINJA_MAX_RECURSION)
        jfail(c, "template: recursion too deep (more than %d levels)", TOK_JINJA_MAX_RECURSION);
    for (size_t i = 0; i < n && !I->ctl; i++) {
        node *x = body[i];
        charge(c, 1);
        switch (x->type) {
        case N_SET: {
            jv v;
            if (x->b) {
                v = eval(I, x->b, E);
            } else {
                tok_buf *b = tbuf_open(c);
                exec_block(I, x->body, x->nbody, E, b);
                v = v_str(jstrdup(c, b->p ? b->p : "", b->n), b->n);
                tbuf_close(c, b);
            }
            assign(I, x->a, v, E);
            break;
        }
        case N_IF:
            if (truthy(eval(I, x->a, E)))
                exec_block(I, x->body, x->nbody, E, out);
            else
                exec_block(I, x->alt, x->nalt, E, out);
            break;
        case N_FOR: {
            env *S = new_env(c, E);
            node *it = x->b, *test = NULL;
            if (it->type == E_SELECT) {
                test = it->b;
                it = it->a;
            }
            jv seq = eval(I, it, S);
            if (seq.t == V_OBJ) {
                jfn m = {.kind = F_METHOD, .name = "keys", .self = seq};
                seq = call_method(I, &m, NULL, 0);
            }
            if (seq.t != V_ARR)
                jfail(c, "template line %d: Expected iterable or object type in for loop: got %s", x->line, type_name(seq));
            jarr *a = seq.u.arr;
            jv *items = jalloc(c, (a->n + 1) * sizeof *items);
            size_t k = 0;
            for (size_t i = 0; i < a->n; i++) {
                if (x->a->type == E_TUPLE) {
                    if (a->v[i].t != V_ARR)
                        jfail(c, "Cannot unpack non-iterable type: %s", type_name(a->v[i]));
                    if (a->v[i].u.arr->n != x->a->nkids)
                        jfail(c, "Too %s items to unpack", x->a->nkids > a->v[i].u.arr->n ? "few" : "many");
                }
                if (test) {
                    env *L = new_env(c, S);
                    assign(I, x->a, a->v[i], L);
                    if (!truthy(eval(I, test, L)))
                        continue;
                }
                items[k++] = a->v[i];
            }
            int iterated = 0;
            loop_slots(c, S, x->a, 0);
            for (size_t i = 0; i < k; i++) {
                charge(c, 8);
                iter_mark im = iter_begin(c);
                jv loop = v_obj(c, V_OBJ);
                jobj *lo = loop.u.obj;
                obj_set(c, lo, "index", 5, v_int((double)i + 1));
                obj_set(c, lo, "index0", 6, v_int((double)i));
                obj_set(c, lo, "revindex", 8, v_int((double)(k - i)));
                obj_set(c, lo, "revindex0", 9, v_int((double)(k - i - 1)));
                obj_set(c, lo, "first", 5, v_bool(i == 0));
                obj_set(c, lo, "last", 4, v_bool(i == k - 1));
                obj_set(c, lo, "length", 6, v_int((double)k));
                obj_set(c, lo, "previtem", 8, i > 0 ? items[i - 1] : v_undef());
                obj_set(c, lo, "nextitem", 8, i + 1 < k ? items[i + 1] : v_undef());
                setvar(c, S, "loop", 4, loop);
                assign(I, x->a, items[i], S);
                c->oldest_write = UINT64_MAX; /* those two writes are the loop's own */
                exec_block(I, x->body, x->nbody, S, out);
                if (iter_end(c, im))
                    loop_slots(c, S, x->a, 1);
                if (I->ctl == 2) {
                    I->ctl = 0;
                    continue;
                }
                if (I->ctl == 1) {
                    I->ctl = 0;
                    break;
                }
                iterated = 1;
            }
            if (!iterated)
                exec_block(I, x->alt, x->nalt, S, out);
            break;
        }
        case N_MACRO: {
            jfn *f = jalloc(c, sizeof *f);
            memset(f, 0, sizeof *f);
            f->kind = F_MACRO;
            f->macro = x;
            setvar(c, E, x->a->s, x->a->n, (jv){.t = V_FN, .u.fn = f});
            break;
        }
        case N_BREAK: I->ctl = 1; break;
        case N_CONTINUE: I->ctl = 2; break;
        case N_COMMENT: break;
        default: {
            jv v = eval(I, x, E);
            if (v.t != V_NULL && v.t != V_UNDEF) {
                jv s = to_string(c, v);
                put(c, out, s.u.str.s, s.u.str.n);
            }
        }
        }
    }
    c->rdepth--;
}

char *tok_jinja_render(const char *src, const json_t *vars, size_t *len, ogk_error *e)
{
    jctx c = {.e = e, .serial = 1, .oldest_write = UINT64_MAX};
    tok_buf out = {0};
    size_t srcn = strlen(src);
    if (tok_utf8_check(src, srcn) != srcn) {
        ogk_fail(e, "template is not valid UTF-8");
        return NULL;
    }
    if (setjmp(c.jb)) {
        free(out.p);
        for (tbuf *t = c.bufs; t; t = t->prev)
            free(t->b.p);
        tok_arena_free(&c.a);
        return NULL;
    }
    jtoks toks = {0};
    lex(&c, src, srcn, &toks);
    parser p = {&c, toks.v, toks.n, 0};
    nodes prog = {0};
    while (p.i < p.n)
        npush(&c, &prog, parse_any(&p));
    env *G = new_env(&c, NULL);
    static const struct {
        const char *name;
        int kind;
    } fns[] = {{"namespace", F_NAMESPACE}, {"range", F_RANGE}, {"raise_exception", F_RAISE}, {"strftime_now", F_STRFTIME}};
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) {
        jfn *f = jalloc(&c, sizeof *f);
        memset(f, 0, sizeof *f);
        f->kind = fns[i].kind;
        setvar(&c, G, fns[i].name, strlen(fns[i].name), (jv){.t = V_FN, .u.fn = f});
    }
    setvar(&c, G, "true", 4, v_bool(1));
    setvar(&c, G, "false", 5, v_bool(0));
    setvar(&c, G, "none", 4, v_null());
    setvar(&c, G, "True", 4, v_bool(1));
    setvar(&c, G, "False", 5, v_bool(0));
    setvar(&c, G, "None", 4, v_null());
    if (vars && json_is_object(vars)) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)vars, k, v) setvar(&c, G, k, strlen(k), from_json(&c, v, 0));
    }
    interp I = {&c, &out, 0};
    exec_block(&I, prog.v, prog.n, G, &out);
    if (tok_buf_put(&out, "", 0))
        jfail(&c, "out of memory");
    tok_arena_free(&c.a);
    *len = out.n;
    return out.p;
}

/* ------------------------------------------------------------------------------------------------ */
/* built-in templates for families whose tokenizer_config.json has none                              */

static const char tpl_chatml[] =
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

static const char tpl_llama3[] =
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}";

/* Llama-2-chat: the system prompt is folded into the first user turn inside <<SYS>> */
static const char tpl_llama2[] =
    "{%- if messages and messages[0]['role'] == 'system' %}"
    "{%- set system = '<<SYS>>\\n' + messages[0]['content'] | trim + '\\n<</SYS>>\\n\\n' %}"
    "{%- set loop_messages = messages[1:] %}"
    "{%- else %}{%- set system = '' %}{%- set loop_messages = messages %}{%- endif %}"
    "{%- for message in loop_messages %}"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{%- endif %}"
    "{%- if message['role'] == 'user' %}"
    "{{- bos_token + '[INST] ' + (system if loop.first else '') + message['content'] | trim + ' [/INST]' }}"
    "{%- elif message['role'] == 'assistant' %}"
    "{{- ' ' + message['content'] | trim + ' ' + eos_token }}"
    "{%- endif %}"
    "{%- endfor %}";

/* Mistral-Instruct: [INST] turns; a system message is prepended to the first user turn */
static const char tpl_mistral[] =
    "{{- bos_token }}"
    "{%- if messages and messages[0]['role'] == 'system' %}"
    "{%- set system = messages[0]['content'] + '\\n\\n' %}{%- set loop_messages = messages[1:] %}"
    "{%- else %}{%- set system = '' %}{%- set loop_messages = messages %}{%- endif %}"
    "{%- for message in loop_messages %}"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{%- endif %}"
    "{%- if message['role'] == 'user' %}"
    "{{- '[INST] ' + (system if loop.first else '') + message['content'] + ' [/INST]' }}"
    "{%- elif message['role'] == 'assistant' %}"
    "{{- message['content'] + eos_token }}"
    "{%- endif %}"
    "{%- endfor %}";

static const char tpl_phi3[] =
    "{%- for message in messages %}"
    "{{- '<|' + message['role'] + '|>\\n' + message['content'] + '<|end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|assistant|>\\n' }}{%- else %}{{- eos_token }}{%- endif %}";

const char *tok_builtin_template(const char *family)
{
    if (!family)
        return NULL;
    if (!strcmp(family, "chatml") || !strcmp(family, "qwen2") || !strcmp(family, "qwen3"))
        return tpl_chatml;
    if (!strcmp(family, "llama3"))
        return tpl_llama3;
    if (!strcmp(family, "llama2") || !strcmp(family, "llama"))
        return tpl_llama2;
    if (!strcmp(family, "mistral"))
        return tpl_mistral;
    if (!strcmp(family, "phi3"))
        return tpl_phi3;
    return NULL;
}

const char *tok_chat_template_for(const tok *t, const char *family)
{
    if (t && tok_chat_template(t))
        return tok_chat_template(t);
    if (family && !strcmp(family, "llama") && t && tok_token_to_id(t, "<|start_header_id|>", 19) >= 0)
        family = "llama3";
    return tok_builtin_template(family);
}

char *tok_chat_render(const tok *t, const char *family, const json_t *vars, size_t *len, ogk_error *e)
{
    const char *src = tok_chat_template_for(t, family);
    if (!src) {
        ogk_fail(e, "no chat template: the tokenizer has none and there is no built-in one for family '%s'",
                 family ? family : "(unknown)");
        return NULL;
    }
    json_t *v = json_is_object(vars) ? json_copy((json_t *)vars) : json_object();
    if (t) {
        if (!json_object_get(v, "bos_token") && tok_bos_token(t))
            json_object_set_new(v, "bos_token", json_string(tok_bos_token(t)));
        if (!json_object_get(v, "eos_token") && tok_eos_token(t))
            json_object_set_new(v, "eos_token", json_string(tok_eos_token(t)));
    }
    char *r = tok_jinja_render(src, v, len, e);
    json_decref(v);
    return r;
}
