/* Jinja values (JS-flavoured, as @huggingface/jinja: booleans print "true", integral floats "2.0", == is
 * loose), the render's arena, budget and error unwinding, and the string and JSON helpers the evaluator
 * and the filters share. */
#define _GNU_SOURCE
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "tok/jinja_int.h"

_Noreturn void jj_jfail(jctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
_Noreturn void jj_jfail(jctx *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->e->msg, sizeof c->e->msg, fmt, ap);
    va_end(ap);
    longjmp(c->jb, 1);
}

_Noreturn void jj_budget_fail(jctx *c, int what)
{
    const tok_jinja_limits *l = &c->lim;
    if (what == JJ_STEPS)
        jj_jfail(c, "template exceeds its render budget: more than %llu steps", (unsigned long long)l->max_steps);
    if (what == JJ_TEXT)
        jj_jfail(c, "template exceeds its render budget: a text longer than %zu bytes", l->max_text);
    jj_jfail(c, "template exceeds its render budget: more than %zu bytes of memory", l->max_memory);
}

static void check_memory(jctx *c)
{
    if (c->a.total + c->buf_bytes > c->lim.max_memory)
        jj_budget_fail(c, JJ_MEMORY);
}

void *jj_jalloc(jctx *c, size_t n)
{
    jj_charge(c, 1 + n / 256);
    void *p = tok_arena_alloc(&c->a, n ? n : 1);
    if (!p)
        jj_jfail(c, "out of memory");
    check_memory(c);
    return p;
}

tok_buf *jj_tbuf_open(jctx *c)
{
    tbuf *t = jj_jalloc(c, sizeof *t);
    memset(t, 0, sizeof *t);
    t->prev = c->bufs;
    c->bufs = t;
    return &t->b;
}
void jj_tbuf_close(jctx *c, tok_buf *b)
{
    tbuf *t = (tbuf *)b; /* buffers nest: b is the innermost open one */
    c->buf_bytes -= t->b.n;
    free(t->b.p);
    t->b.p = NULL;
    c->bufs = t->prev;
}

iter_mark jj_iter_begin(jctx *c)
{
    iter_mark m = {tok_arena_mark(&c->a), c->serial, c->oldest_write};
    c->oldest_write = UINT64_MAX;
    return m;
}

int jj_iter_end(jctx *c, iter_mark m)
{
    int clean = c->oldest_write >= m.serial;
    if (clean)
        tok_arena_rewind(&c->a, m.pos);
    if (m.outer_oldest < c->oldest_write)
        c->oldest_write = m.outer_oldest;
    return clean;
}

char *jj_jstrdup(jctx *c, const char *s, size_t n)
{
    char *p = jj_jalloc(c, n + 1);
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}


jv jj_v_arr(jctx *c, size_t n)
{
    jarr *a = jj_jalloc(c, sizeof *a);
    a->n = n;
    a->v = jj_jalloc(c, (n ? n : 1) * sizeof(jv));
    return (jv){.t = V_ARR, .u.arr = a};
}

jv jj_v_obj(jctx *c, int t)
{
    jobj *o = jj_jalloc(c, sizeof *o);
    memset(o, 0, sizeof *o);
    o->born = c->serial++;
    return (jv){.t = (uint8_t)t, .u.obj = o};
}

jv *jj_obj_find(jobj *o, const char *k, size_t kn)
{
    for (size_t i = 0; i < o->n; i++)
        if (o->kn[i] == kn && !memcmp(o->k[i], k, kn))
            return &o->v[i];
    return NULL;
}

void jj_obj_set(jctx *c, jobj *o, const char *k, size_t kn, jv v)
{
    if (o->born < c->oldest_write)
        c->oldest_write = o->born;
    jj_charge(c, 1 + o->n / 8);
    jv *p = jj_obj_find(o, k, kn);
    if (p) {
        *p = v;
        return;
    }
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 8;
        const char **nk = jj_jalloc(c, cap * sizeof *nk);
        size_t *nkn = jj_jalloc(c, cap * sizeof *nkn);
        jv *nv = jj_jalloc(c, cap * sizeof *nv);
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

jv jj_from_json(jctx *c, const json_t *j, int depth)
{
    if (depth > TOK_JINJA_MAX_DEPTH)
        jj_jfail(c, "template variables nested too deeply (more than %d levels)", TOK_JINJA_MAX_DEPTH);
    switch (json_typeof(j)) {
    case JSON_NULL: return v_null();
    case JSON_TRUE: return v_bool(1);
    case JSON_FALSE: return v_bool(0);
    case JSON_INTEGER: return v_int((double)json_integer_value(j));
    case JSON_REAL: {
        double d = json_real_value(j);
        if (d == floor(d) && isfinite(d)) { /* JS: Number.isInteger */
            jv r = v_int(d);
            r.real = 1;
            return r;
        }
        return v_float(d);
    }
    case JSON_STRING: return v_str(json_string_value(j), json_string_length(j));
    case JSON_ARRAY: {
        jv a = jj_v_arr(c, json_array_size(j));
        for (size_t i = 0; i < a.u.arr->n; i++)
            a.u.arr->v[i] = jj_from_json(c, json_array_get(j, i), depth + 1);
        return a;
    }
    case JSON_OBJECT: {
        jv o = jj_v_obj(c, V_OBJ);
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)j, k, v) jj_obj_set(c, o.u.obj, k, strlen(k), jj_from_json(c, v, depth + 1));
        return o;
    }
    }
    return v_undef();
}

int jj_truthy(jv v)
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

const char *jj_type_name(jv v)
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

/* every text a render builds goes through here: the output budget bounds each buffer, the memory
 * budget all of them together */
void jj_put(jctx *c, tok_buf *b, const char *s, size_t n)
{
    if (b->n + n > c->lim.max_text)
        jj_budget_fail(c, JJ_TEXT);
    jj_charge(c, 1 + n / 256);
    if (tok_buf_put(b, s, n))
        jj_jfail(c, "out of memory");
    c->buf_bytes += n;
    check_memory(c);
}
void jj_puts_(jctx *c, tok_buf *b, const char *s) { jj_put(c, b, s, strlen(s)); }

static void json_str(jctx *c, tok_buf *b, const char *s, size_t n, int ascii)
{
    jj_put(c, b, "\"", 1);
    for (size_t i = 0; i < n;) {
        unsigned char ch = (unsigned char)s[i];
        char esc[16];
        if (ch == '"' || ch == '\\') {
            esc[0] = '\\';
            esc[1] = (char)ch;
            jj_put(c, b, esc, 2);
            i++;
        } else if (ch < 0x20) {
            const char *m = ch == '\b' ? "\\b" : ch == '\f' ? "\\f" : ch == '\n' ? "\\n" : ch == '\r' ? "\\r" : ch == '\t' ? "\\t" : NULL;
            if (m) {
                jj_puts_(c, b, m);
            } else {
                snprintf(esc, sizeof esc, "\\u%04x", ch);
                jj_puts_(c, b, esc);
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
            jj_puts_(c, b, esc);
            i += (size_t)k;
        } else {
            jj_put(c, b, s + i, 1);
            i++;
        }
    }
    jj_put(c, b, "\"", 1);
}

static void to_json(jctx *c, tok_buf *b, jv v, const json_opts *o, int depth)
{
    char num[64];
    if (depth > TOK_JINJA_MAX_DEPTH)
        jj_jfail(c, "template: a value nested too deeply to render (more than %d levels)", TOK_JINJA_MAX_DEPTH);
    switch (v.t) {
    case V_NULL: jj_puts_(c, b, "null"); return;
    case V_UNDEF:
        if (v.py && o->undef_to_null) /* tojson of Python's Undefined (d[undefined]): json.dumps refuses it */
            jj_jfail(c, "Object of type Undefined is not JSON serializable");
        jj_puts_(c, b, o->undef_to_null ? "null" : "undefined");
        return;
    case V_BOOL: jj_puts_(c, b, v.u.b ? "true" : "false"); return;
    case V_INT:
    case V_FLOAT:
        if (!isfinite(v.u.num)) {
            jj_puts_(c, b, "null");
            return;
        }
        jj_charge(c, 16); /* shortest round trip: up to 17 printf/strtod pairs */
        js_num(v.u.num, num, sizeof num);
        jj_puts_(c, b, num);
        return;
    case V_STR: json_str(c, b, v.u.str.s, v.u.str.n, o->ensure_ascii); return;
    case V_ARR:
    case V_OBJ:
    case V_NS:
    case V_KW: {
        int is_arr = v.t == V_ARR;
        size_t n = is_arr ? v.u.arr->n : v.u.obj->n;
        size_t *order = jj_jalloc(c, (n ? n : 1) * sizeof *order);
        for (size_t i = 0; i < n; i++)
            order[i] = i;
        if (!is_arr && o->sort_keys) {
            /* insertion sort by UTF-8 bytes (localeCompare differs for non-ASCII keys; rare) */
            for (size_t i = 1; i < n; i++) {
                size_t x = order[i], j = i;
                while (j > 0) {
                    jj_charge(c, 1);
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
        jj_puts_(c, b, is_arr ? "[" : "{");
        for (size_t i = 0; i < n; i++) {
            if (i)
                jj_puts_(c, b, o->item_sep);
            if (o->indent >= 0) {
                jj_puts_(c, b, "\n");
                for (int k = 0; k < o->indent * (depth + 1); k++)
                    jj_puts_(c, b, " ");
            }
            if (is_arr) {
                to_json(c, b, v.u.arr->v[i], o, depth + 1);
            } else {
                json_str(c, b, v.u.obj->k[order[i]], v.u.obj->kn[order[i]], o->ensure_ascii);
                jj_puts_(c, b, o->key_sep);
                to_json(c, b, v.u.obj->v[order[i]], o, depth + 1);
            }
        }
        if (o->indent >= 0 && n) {
            jj_puts_(c, b, "\n");
            for (int k = 0; k < o->indent * depth; k++)
                jj_puts_(c, b, " ");
        }
        jj_puts_(c, b, is_arr ? "]" : "}");
        return;
    }
    case V_FN: jj_jfail(c, "Cannot convert to JSON: FunctionValue");
    }
}

jv jj_json_value(jctx *c, jv v, const json_opts *o)
{
    tok_buf *b = jj_tbuf_open(c);
    to_json(c, b, v, o, 0);
    jv r = v_str(jj_jstrdup(c, b->p ? b->p : "", b->n), b->n);
    jj_tbuf_close(c, b);
    return r;
}

const json_opts jj_JSON_DEFAULT = {-1, 0, 0, ", ", ": ", 1};
const json_opts jj_JSON_PRINT = {-1, 0, 0, ", ", ": ", 0};

/* the text a value renders as ({{ v }} and string concatenation) */
jv jj_to_string(jctx *c, jv v)
{
    char num[64];
    switch (v.t) {
    case V_STR: return v;
    case V_UNDEF: return v_cstr("undefined");
    case V_NULL: return v_cstr("null");
    case V_BOOL: return v_cstr(v.u.b ? "true" : "false");
    case V_INT:
        jj_charge(c, 16); /* shortest round trip: up to 17 printf/strtod pairs */
        js_num(v.u.num, num, sizeof num);
        return v_str(jj_jstrdup(c, num, strlen(num)), strlen(num));
    case V_FLOAT:
        jj_charge(c, 16); /* shortest round trip: up to 17 printf/strtod pairs */
        if (v.u.num == 0 && signbit(v.u.num))
            return v_cstr("-0.0");
        if (v.u.num == floor(v.u.num) && isfinite(v.u.num) && fabs(v.u.num) < 1e21)
            snprintf(num, sizeof num, "%.1f", v.u.num);
        else
            js_num(v.u.num, num, sizeof num);
        return v_str(jj_jstrdup(c, num, strlen(num)), strlen(num));
    case V_FN: return v_cstr("[function]");
    default: return jj_json_value(c, v, &jj_JSON_PRINT);
    }
}

/* ---- Python's str() of a value (Python's Jinja renders dicts, None and booleans so), for what the
 * reference cannot render (|string of a dict, str.format's arguments) ---- */
static void py_str_repr(jctx *c, tok_buf *b, const char *s, size_t n)
{
    char q = memchr(s, '\'', n) && !memchr(s, '"', n) ? '"' : '\'';
    jj_put(c, b, &q, 1);
    for (size_t i = 0; i < n;) {
        unsigned char ch = (unsigned char)s[i];
        char esc[16];
        if (ch >= 0x80 && i + (size_t)tok_utf8_len(ch) <= n) { /* as Python's repr: printable characters as they are, others \xhh, \uhhhh, \Uhhhhhhhh */
            uint32_t cp;
            int k = tok_utf8_dec((const unsigned char *)s + i, &cp);
            if (tok_py_printable(cp))
                jj_put(c, b, s + i, (size_t)k);
            else {
                snprintf(esc, sizeof esc, cp <= 0xff ? "\\x%02x" : cp <= 0xffff ? "\\u%04x" : "\\U%08x", (unsigned)cp);
                jj_put(c, b, esc, strlen(esc));
            }
            i += (size_t)k;
            continue;
        }
        i++;
        if (ch == '\\' || ch == (unsigned char)q)
            esc[0] = '\\', esc[1] = (char)ch, esc[2] = 0;
        else if (ch == '\n')
            strcpy(esc, "\\n");
        else if (ch == '\r')
            strcpy(esc, "\\r");
        else if (ch == '\t')
            strcpy(esc, "\\t");
        else if (ch < 0x20 || ch == 0x7f)
            snprintf(esc, sizeof esc, "\\x%02x", ch);
        else {
            jj_put(c, b, (const char *)&ch, 1);
            continue;
        }
        jj_put(c, b, esc, strlen(esc));
    }
    jj_put(c, b, &q, 1);
}

/* Python's repr of a float: the shortest digits that read back, written positionally when the decimal
 * exponent is in [-4, 16) (at least one digit after the point) and as m.mmme-05 / e+16 otherwise */
static void py_float(double d, char *out, size_t cap)
{
    if (!isfinite(d)) {
        snprintf(out, cap, "%s", isnan(d) ? "nan" : d > 0 ? "inf" : "-inf");
        return;
    }
    if (d == 0) {
        snprintf(out, cap, "%s", signbit(d) ? "-0.0" : "0.0");
        return;
    }
    int p = 1;
    char buf[64];
    for (; p <= 17; p++) { /* shortest %.{p}e that reads back */
        snprintf(buf, sizeof buf, "%.*e", p - 1, d);
        if (strtod(buf, NULL) == d)
            break;
    }
    /* buf: [-]d[.ddd]e[+-]XX -> the digits and the decimal exponent */
    char dig[24];
    int nd = 0;
    const char *q = buf + (buf[0] == '-');
    for (; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9' && nd < (int)sizeof dig - 1)
            dig[nd++] = *q;
    while (nd > 1 && dig[nd - 1] == '0')
        nd--;
    dig[nd] = 0;
    int ex = atoi(q + 1);
    size_t k = 0;
    char tmp[64];
    if (d < 0)
        tmp[k++] = '-';
    if (ex >= -4 && ex < 16) {
        if (ex < 0) {
            tmp[k++] = '0', tmp[k++] = '.';
            for (int i = 0; i < -ex - 1; i++)
                tmp[k++] = '0';
            for (int i = 0; i < nd; i++)
                tmp[k++] = dig[i];
        } else {
            for (int i = 0; i <= ex; i++)
                tmp[k++] = i < nd ? dig[i] : '0';
            tmp[k++] = '.';
            if (nd > ex + 1)
                for (int i = ex + 1; i < nd; i++)
                    tmp[k++] = dig[i];
            else
                tmp[k++] = '0';
        }
        tmp[k] = 0;
    } else {
        tmp[k++] = dig[0];
        if (nd > 1) {
            tmp[k++] = '.';
            for (int i = 1; i < nd; i++)
                tmp[k++] = dig[i];
        }
        snprintf(tmp + k, sizeof tmp - k, "e%c%02d", ex < 0 ? '-' : '+', ex < 0 ? -ex : ex);
    }
    snprintf(out, cap, "%s", tmp);
}

static void py_repr(jctx *c, tok_buf *b, jv v, int depth)
{
    jj_charge(c, 4);
    if (depth > 64)
        jj_jfail(c, "a value nested more than 64 deep cannot be rendered");
    char num[64];
    switch (v.t) {
    case V_STR: py_str_repr(c, b, v.u.str.s, v.u.str.n); return;
    case V_NULL: jj_puts_(c, b, "None"); return;
    case V_UNDEF: return;
    case V_BOOL: jj_puts_(c, b, v.u.b ? "True" : "False"); return;
    case V_INT: {
        if (v.real) {
            py_float(v.u.num, num, sizeof num);
            jj_puts_(c, b, num);
            return;
        }
        jv t = jj_to_string(c, v);
        jj_put(c, b, t.u.str.s, t.u.str.n);
        return;
    }
    case V_FLOAT: py_float(v.u.num, num, sizeof num); jj_puts_(c, b, num); return;
    case V_ARR:
        jj_put(c, b, "[", 1);
        for (size_t i = 0; i < v.u.arr->n; i++) {
            if (i)
                jj_put(c, b, ", ", 2);
            py_repr(c, b, v.u.arr->v[i], depth + 1);
        }
        jj_put(c, b, "]", 1);
        return;
    case V_OBJ:
    case V_NS:
        jj_put(c, b, "{", 1);
        for (size_t i = 0; i < v.u.obj->n; i++) {
            if (i)
                jj_put(c, b, ", ", 2);
            py_str_repr(c, b, v.u.obj->k[i], v.u.obj->kn[i]);
            jj_put(c, b, ": ", 2);
            py_repr(c, b, v.u.obj->v[i], depth + 1);
        }
        jj_put(c, b, "}", 1);
        return;
    default: jj_puts_(c, b, "[function]"); return;
    }
}

jv jj_py_str(jctx *c, jv v)
{
    if (v.t == V_STR)
        return v;
    tok_buf *b = jj_tbuf_open(c);
    py_repr(c, b, v, 0);
    jv r = v_str(jj_jstrdup(c, b->p ? b->p : "", b->n), b->n);
    jj_tbuf_close(c, b);
    return r;
}

size_t jj_utf16_len(const char *s, size_t n)
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

int jj_str_eq(jv v, const char *s) { return v.t == V_STR && v.u.str.n == strlen(s) && !memcmp(v.u.str.s, s, v.u.str.n); }

/* JS string trim family on UTF-8 */
jv jj_js_trim(jv s, int left, int right)
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

jv jj_case_map(jctx *c, jv s, int upper)
{
    /* JS toUpperCase / toLowerCase: full Unicode mappings (tok_case_map) */
    size_t n;
    char *m = tok_case_map(s.u.str.s, s.u.str.n, upper, &n);
    if (!m)
        jj_jfail(c, "out of memory");
    char *o = jj_jstrdup(c, m, n);
    free(m);
    return v_str(o, n);
}

int jj_ascii_only(jv s)
{
    for (size_t i = 0; i < s.u.str.n; i++)
        if ((unsigned char)s.u.str.s[i] >= 0x80)
            return 0;
    return 1;
}

jv jj_str_replace(jctx *c, jv s, jv old, jv new, double count)
{
    if (count == 0)
        return s;
    double remaining = count < 0 ? INFINITY : count;
    tok_buf *b = jj_tbuf_open(c);
    if (!old.u.str.n) {
        /* (?=) matches before every code point and at the end */
        size_t i = 0;
        while (i <= s.u.str.n) {
            if (remaining > 0) {
                jj_put(c, b, new.u.str.s, new.u.str.n);
                remaining--;
            }
            if (i == s.u.str.n)
                break;
            int k = tok_utf8_len((unsigned char)s.u.str.s[i]);
            jj_put(c, b, s.u.str.s + i, (size_t)k);
            i += (size_t)k;
        }
    } else {
        size_t i = 0;
        while (i < s.u.str.n) {
            jj_charge(c, 1 + (s.u.str.n - i) / 256);
            const char *hit = remaining > 0 && old.u.str.n <= s.u.str.n - i ? memmem(s.u.str.s + i, s.u.str.n - i, old.u.str.s, old.u.str.n) : NULL;
            if (!hit)
                break;
            jj_put(c, b, s.u.str.s + i, (size_t)(hit - (s.u.str.s + i)));
            jj_put(c, b, new.u.str.s, new.u.str.n);
            remaining--;
            i = (size_t)(hit - s.u.str.s) + old.u.str.n;
        }
        jj_put(c, b, s.u.str.s + i, s.u.str.n - i);
    }
    jv r = v_str(jj_jstrdup(c, b->p ? b->p : "", b->n), b->n);
    jj_tbuf_close(c, b);
    return r;
}

jv jj_kwarg(jv *args, size_t nargs, const char *name)
{
    if (nargs && args[nargs - 1].t == V_KW) {
        jv *v = jj_obj_find(args[nargs - 1].u.obj, name, strlen(name));
        if (v)
            return *v;
    }
    return v_undef();
}
size_t jj_npos(jv *args, size_t nargs) { return nargs && args[nargs - 1].t == V_KW ? nargs - 1 : nargs; }

int jj_loose_eq(jv a, jv b)
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
int jj_strict_eq(jv a, jv b)
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
    default: return jj_loose_eq(a, b);
    }
}

/* String(value) of the underlying JS value, which `~` and string `+` use (not the rendering: 2.0 -> "2") */
jv jj_raw_string(jctx *c, jv v)
{
    char num[64];
    switch (v.t) {
    case V_INT:
    case V_FLOAT:
        jj_charge(c, 16); /* shortest round trip: up to 17 printf/strtod pairs */
        js_num(v.u.num, num, sizeof num);
        return v_str(jj_jstrdup(c, num, strlen(num)), strlen(num));
    case V_ARR: {
        tok_buf *b = jj_tbuf_open(c);
        for (size_t i = 0; i < v.u.arr->n; i++) {
            jv e = v.u.arr->v[i];
            /* the items are the reference's runtime values: each its own toString(), null's and undefined's
             * "undefined" (a JS array's join would write "" only for a raw null) */
            jv s = e.t == V_NULL || e.t == V_UNDEF ? v_cstr("undefined") : jj_to_string(c, e);
            if (i)
                jj_put(c, b, ",", 1);
            jj_put(c, b, s.u.str.s, s.u.str.n);
        }
        jv r = v_str(jj_jstrdup(c, b->p ? b->p : "", b->n), b->n);
        jj_tbuf_close(c, b);
        return r;
    }
    case V_OBJ:
    case V_NS:
    case V_KW: return v_cstr("[object Map]");
    default: return jj_to_string(c, v);
    }
}

jv jj_concat(jctx *c, jv a, jv b)
{
    jv x = jj_raw_string(c, a), y = jj_raw_string(c, b);
    char *p = jj_jalloc(c, x.u.str.n + y.u.str.n + 1);
    memcpy(p, x.u.str.s, x.u.str.n);
    memcpy(p + x.u.str.n, y.u.str.s, y.u.str.n);
    p[x.u.str.n + y.u.str.n] = 0;
    return v_str(p, x.u.str.n + y.u.str.n);
}

jv jj_get_attr_path(jv item, const char *path, size_t n)
{
    size_t i = 0;
    jv v = item;
    while (i <= n) {
        const char *dot = memchr(path + i, '.', n - i);
        size_t pn = dot ? (size_t)(dot - (path + i)) : n - i;
        if (v.t == V_OBJ || v.t == V_NS) {
            jv *f = jj_obj_find(v.u.obj, path + i, pn);
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
int jj_compare_values(jctx *c, jv a, jv b, int case_sensitive)
{
    if (a.t == V_NULL && b.t == V_NULL)
        return 0;
    if (a.t == V_NULL || b.t == V_NULL || a.t == V_UNDEF || b.t == V_UNDEF) {
        if (a.t == V_UNDEF && b.t == V_UNDEF)
            return 0;
        jj_jfail(c, "Cannot compare %s with %s", jj_type_name(a), jj_type_name(b));
    }
    int an = a.t == V_INT || a.t == V_FLOAT || a.t == V_BOOL, bn = b.t == V_INT || b.t == V_FLOAT || b.t == V_BOOL;
    if (an && bn) {
        double x = a.t == V_BOOL ? a.u.b : a.u.num, y = b.t == V_BOOL ? b.u.b : b.u.num;
        return x < y ? -1 : x > y ? 1 : 0;
    }
    if (a.t != b.t)
        jj_jfail(c, "Cannot compare different types: %s and %s", jj_type_name(a), jj_type_name(b));
    if (a.t != V_STR)
        jj_jfail(c, "Cannot compare type: %s", jj_type_name(a));
    if (!case_sensitive && (!jj_ascii_only(a) || !jj_ascii_only(b))) { /* toLowerCase() both, then as below */
        a = jj_case_map(c, a, 0);
        b = jj_case_map(c, b, 0);
    }
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

