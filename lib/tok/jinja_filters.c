/* Jinja filters (`value | name(args)`): one function per filter and a {name, function} table. A filter
 * returns 1 with its result, or 0 when it does not apply to the value's type, which is the named error
 * "unsupported filter 'name' on Type" (as is a name not in the table). Semantics of @huggingface/jinja. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tok/jinja_int.h"

typedef struct {
    interp *I;
    jctx *c;
    node *x;    /* the filter node: its name, line, argument nodes */
    jv *args;   /* evaluated arguments (keyword arguments last, as one V_KW) */
    size_t nargs, np; /* all, positional */
} fargs;

static jv arg(const fargs *a, size_t i, const char *kw)
{
    return a->np > i ? a->args[i] : jj_kwarg(a->args, a->nargs, kw);
}

static int f_safe(fargs *a, jv v, jv *out)
{
    (void)a;
    *out = v;
    return 1;
}

static int f_tojson(fargs *a, jv v, jv *out)
{
    jctx *c = a->c;
    json_opts o = jj_JSON_DEFAULT;
    if (a->x->computed) {
        jv ind = jj_kwarg(a->args, a->nargs, "indent"), ea = jj_kwarg(a->args, a->nargs, "ensure_ascii"),
           sk = jj_kwarg(a->args, a->nargs, "sort_keys"), sep = jj_kwarg(a->args, a->nargs, "separators");
        if (ind.t == V_INT) {
            if (!(fabs(ind.u.num) <= 1000))
                jj_jfail(c, "tojson indent must be an integer of at most 1000");
            o.indent = (int)ind.u.num;
            if (o.indent > 0)
                o.item_sep = ",";
            else
                o.indent = -1; /* indent 0 is falsy in the reference: no newlines */
        } else if (ind.t != V_UNDEF && ind.t != V_NULL) {
            jj_jfail(c, "If set, indent must be a number");
        }
        if (ea.t == V_BOOL)
            o.ensure_ascii = ea.u.b;
        if (sk.t == V_BOOL)
            o.sort_keys = sk.u.b;
        if (sep.t == V_ARR) {
            if (sep.u.arr->n != 2 || sep.u.arr->v[0].t != V_STR || sep.u.arr->v[1].t != V_STR)
                jj_jfail(c, "separators must be a tuple of two strings");
            o.item_sep = jj_jstrdup(c, sep.u.arr->v[0].u.str.s, sep.u.arr->v[0].u.str.n);
            o.key_sep = jj_jstrdup(c, sep.u.arr->v[1].u.str.s, sep.u.arr->v[1].u.str.n);
        }
    }
    *out = jj_json_value(c, v, &o);
    return 1;
}

static int f_d(fargs *a, jv v, jv *out)
{
    (void)v, (void)out;
    jj_jfail(a->c, "template line %d: unsupported filter 'd'", a->x->line);
}

static int f_default(fargs *a, jv v, jv *out)
{
    if (!a->x->computed)
        return 0;
    jv dflt = a->np ? a->args[0] : v_cstr("");
    jv boolean = arg(a, 1, "boolean");
    *out = v.t == V_UNDEF || (boolean.t == V_BOOL && boolean.u.b && !jj_truthy(v)) ? dflt : v;
    return 1;
}

/* join(sep=""): array items as strings (null / undefined as ""), or a string's characters */
static int f_join(fargs *a, jv v, jv *out)
{
    jctx *c = a->c;
    if (v.t != V_ARR && v.t != V_STR) {
        if (!a->x->computed)
            return 0;
        jj_jfail(c, "Cannot apply filter \"join\" to type: %s", jj_type_name(v));
    }
    jv sep = arg(a, 0, "separator");
    if (sep.t == V_UNDEF)
        sep = v_cstr("");
    if (sep.t != V_STR)
        jj_jfail(c, "separator must be a string");
    tok_buf *b = jj_tbuf_open(c);
    if (v.t == V_ARR) {
        for (size_t i = 0; i < v.u.arr->n; i++) {
            if (i)
                jj_put(c, b, sep.u.str.s, sep.u.str.n);
            jv e = v.u.arr->v[i];
            /* the reference joins the items' JS values: String(2.0) is "2", a dict "[object Map]", null "" */
            jv s = e.t == V_NULL || e.t == V_UNDEF ? v_cstr("") : jj_raw_string(c, e);
            jj_put(c, b, s.u.str.s, s.u.str.n);
        }
    } else {
        for (size_t i = 0; i < v.u.str.n;) {
            int k = tok_utf8_len((unsigned char)v.u.str.s[i]);
            if (i)
                jj_put(c, b, sep.u.str.s, sep.u.str.n);
            jj_put(c, b, v.u.str.s + i, (size_t)k);
            i += (size_t)k;
        }
    }
    *out = v_str(jj_jstrdup(c, b->p ? b->p : "", b->n), b->n);
    jj_tbuf_close(c, b);
    return 1;
}

static int length_of(jv v, int objects, jv *out)
{
    if (v.t == V_ARR)
        *out = v_int((double)v.u.arr->n);
    else if (v.t == V_STR)
        *out = v_int((double)jj_utf16_len(v.u.str.s, v.u.str.n));
    else if (v.t == V_OBJ && objects)
        *out = v_int((double)v.u.obj->n);
    else
        return 0;
    return 1;
}
static int f_length(fargs *a, jv v, jv *out) { return (void)a, length_of(v, 1, out); }
static int f_count(fargs *a, jv v, jv *out) { return (void)a, length_of(v, 0, out); }

static int f_list(fargs *a, jv v, jv *out)
{
    (void)a;
    *out = v;
    return v.t == V_ARR;
}

static int f_first(fargs *a, jv v, jv *out)
{
    (void)a;
    if (v.t != V_ARR)
        return 0;
    *out = v.u.arr->n ? v.u.arr->v[0] : v_undef();
    return 1;
}

static int f_last(fargs *a, jv v, jv *out)
{
    (void)a;
    if (v.t != V_ARR)
        return 0;
    *out = v.u.arr->n ? v.u.arr->v[v.u.arr->n - 1] : v_undef();
    return 1;
}

static int f_reverse(fargs *a, jv v, jv *out)
{
    if (v.t != V_ARR)
        return 0;
    jarr *s = v.u.arr;
    *out = jj_v_arr(a->c, s->n);
    for (size_t i = 0; i < s->n; i++)
        out->u.arr->v[i] = s->v[s->n - 1 - i];
    return 1;
}

static int f_string(fargs *a, jv v, jv *out)
{
    switch (v.t) {
    case V_ARR: *out = jj_json_value(a->c, v, &jj_JSON_PRINT); return 1;
    case V_STR: *out = v; return 1;
    case V_INT:
    case V_FLOAT: *out = jj_to_string(a->c, v); return 1;
    case V_BOOL: *out = v_cstr(v.u.b ? "true" : "false"); return 1;
    /* where the reference fails: Python's str() (a dict as {'k': 'v'}, None) */
    case V_OBJ:
    case V_NULL: *out = jj_py_str(a->c, v); return 1;
    default: return 0;
    }
}

/* min / max (Python's Jinja; not in the reference): of a list of numbers or of strings; an empty list's is
 * undefined */
/* Python's make_attrgetter: the item's attribute= (a dotted path), or the item */
static jv py_key(fargs *a, jv item, jv attr)
{
    if (attr.t == V_STR)
        return jj_get_attr_path(item, attr.u.str.s, attr.u.str.n);
    if (attr.t == V_INT)
        return item.t == V_ARR && attr.u.num >= 0 && attr.u.num < (double)item.u.arr->n ? item.u.arr->v[(size_t)attr.u.num]
                                                                                         : v_undef();
    if (attr.t != V_UNDEF && attr.t != V_NULL)
        jj_jfail(a->c, "template line %d: attribute must be a string", a->x->line);
    return item;
}

static int min_max(fargs *a, jv v, jv *out, int max)
{
    if (v.t != V_ARR)
        return 0;
    jarr *r = v.u.arr;
    jv attr = a->x->computed ? arg(a, 1, "attribute") : v_undef(), best = v_undef();
    jv cs = a->x->computed ? arg(a, 0, "case_sensitive") : v_undef();
    *out = v_undef();
    for (size_t i = 0; i < r->n; i++) {
        jv x = py_key(a, r->v[i], attr);
        int num = x.t == V_INT || x.t == V_FLOAT;
        if (!num && x.t != V_STR)
            jj_jfail(a->c, "template line %d: %s of a list holding %s", a->x->line, max ? "max" : "min", jj_type_name(x));
        if (i && (num != (best.t == V_INT || best.t == V_FLOAT)))
            jj_jfail(a->c, "template line %d: %s of a list mixing numbers and strings", a->x->line, max ? "max" : "min");
        int cmp = !i ? 0 : jj_compare_values(a->c, x, best, jj_truthy(cs));
        if (!i || (max ? cmp > 0 : cmp < 0))
            best = x, *out = r->v[i];
    }
    return 1;
}
static int f_min(fargs *a, jv v, jv *out) { return min_max(a, v, out, 0); }
static int f_max(fargs *a, jv v, jv *out) { return min_max(a, v, out, 1); }

/* sort(reverse=false, case_sensitive=false, attribute=none): stable, as Array.prototype.sort */
static int f_sort(fargs *a, jv v, jv *out)
{
    jctx *c = a->c;
    if (v.t != V_ARR)
        return 0;
    jarr *s = v.u.arr;
    jv rev = arg(a, 0, "reverse"), cs = arg(a, 1, "case_sensitive"), attr = arg(a, 2, "attribute");
    if ((rev.t != V_UNDEF && rev.t != V_BOOL) || (cs.t != V_UNDEF && cs.t != V_BOOL))
        jj_jfail(c, "reverse and case_sensitive must be booleans");
    if (attr.t != V_UNDEF && attr.t != V_NULL && attr.t != V_STR && attr.t != V_INT)
        jj_jfail(c, "attribute must be a string, integer, or null");
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
    jv r = jj_v_arr(c, s->n), *key = jj_jalloc(c, (s->n + 1) * sizeof *key);
    for (size_t i = 0; i < s->n; i++) {
        r.u.arr->v[i] = s->v[i];
        key[i] = ap ? jj_get_attr_path(s->v[i], ap, an) : s->v[i];
    }
    for (size_t i = 1; i < s->n; i++) { /* insertion sort: stable */
        jv xv = r.u.arr->v[i], xk = key[i];
        size_t j = i;
        while (j > 0) {
            jj_charge(c, 1);
            int cmp = jj_compare_values(c, key[j - 1], xk, cs.t == V_BOOL && cs.u.b);
            if (rev.t == V_BOOL && rev.u.b)
                cmp = -cmp;
            if (cmp <= 0)
                break;
            r.u.arr->v[j] = r.u.arr->v[j - 1];
            key[j] = key[j - 1];
            j--;
        }
        r.u.arr->v[j] = xv;
        key[j] = xk;
    }
    *out = r;
    return 1;
}

/* selectattr / rejectattr(attribute[, test[, value]]) over an array of objects (attr), and select / reject([test[,
 * value]]) over an array, each item tested itself (Python's Jinja; the reference has only the attr forms: Llama
 * 3.1's template rejects 'code_interpreter' from builtin_tools) */
static int select_reject(fargs *a, jv v, jv *out, int sel, int attr)
{
    jctx *c = a->c;
    node *x = a->x;
    if (v.t != V_ARR)
        return 0;
    jarr *s = v.u.arr;
    for (size_t i = 0; i < x->nkids; i++)
        if (x->kids[i]->type != E_STR && (attr || i == 0))
            jj_jfail(c, attr ? "arguments of `%.*s` must be strings" : "the test of `%.*s` must be a string", (int)x->n,
                     x->s);
    if (attr && (!a->np || a->args[0].t != V_STR))
        jj_jfail(c, "%.*s needs an attribute name", (int)x->n, x->s);
    const jv *t = a->args + attr; /* the test and its value */
    size_t nt = a->np > (size_t)attr ? a->np - (size_t)attr : 0;
    jv r = jj_v_arr(c, s->n);
    size_t k = 0;
    for (size_t i = 0; i < s->n; i++) {
        jv *at = &s->v[i];
        if (attr) {
            if (s->v[i].t != V_OBJ && s->v[i].t != V_NS)
                jj_jfail(c, "`%.*s` can only be applied to array of objects", (int)x->n, x->s);
            at = jj_obj_find(s->v[i].u.obj, a->args[0].u.str.s, a->args[0].u.str.n);
        }
        int res = 0;
        if (at && at->t != V_UNDEF) {
            if (nt) {
                if (nt > 1 && (jj_str_eq(t[0], "equalto") || jj_str_eq(t[0], "eq") || jj_str_eq(t[0], "==")))
                    res = jj_strict_eq(*at, t[1]);
                else if (nt > 1 && (jj_str_eq(t[0], "ne") || jj_str_eq(t[0], "!=")))
                    res = !jj_strict_eq(*at, t[1]);
                else if (nt > 1)
                    jj_jfail(c, "`%.*s`: the test '%.*s' with a value is not supported (equalto, ne)", (int)x->n, x->s,
                             (int)t[0].u.str.n, t[0].u.str.s);
                else
                    res = jj_run_test(a->I, t[0].u.str.s, t[0].u.str.n, *at, x->line);
            } else {
                res = jj_truthy(*at);
            }
        }
        if (sel ? res : !res)
            r.u.arr->v[k++] = s->v[i];
    }
    r.u.arr->n = k;
    *out = r;
    return 1;
}
static int f_selectattr(fargs *a, jv v, jv *out) { return select_reject(a, v, out, 1, 1); }
static int f_rejectattr(fargs *a, jv v, jv *out) { return select_reject(a, v, out, 0, 1); }
static int f_select(fargs *a, jv v, jv *out) { return select_reject(a, v, out, 1, 0); }
static int f_reject(fargs *a, jv v, jv *out) { return select_reject(a, v, out, 0, 0); }

/* map(attribute=path, default=...) */
static int f_map(fargs *a, jv v, jv *out)
{
    jctx *c = a->c;
    if (v.t != V_ARR)
        return 0;
    jarr *s = v.u.arr;
    jv attr = jj_kwarg(a->args, a->nargs, "attribute");
    if (attr.t != V_STR)
        jj_jfail(c, "template line %d: unsupported: map() without attribute=", a->x->line);
    jv dflt = jj_kwarg(a->args, a->nargs, "default");
    jv r = jj_v_arr(c, s->n);
    for (size_t i = 0; i < s->n; i++) {
        if (s->v[i].t != V_OBJ && s->v[i].t != V_NS)
            jj_jfail(c, "items in map must be an object");
        jv e = jj_get_attr_path(s->v[i], attr.u.str.s, attr.u.str.n);
        r.u.arr->v[i] = e.t == V_UNDEF ? dflt : e;
    }
    *out = r;
    return 1;
}

static int f_unique(fargs *a, jv v, jv *out)
{
    if (v.t != V_ARR)
        return 0;
    jarr *s = v.u.arr;
    jv r = jj_v_arr(a->c, s->n);
    size_t k = 0;
    for (size_t i = 0; i < s->n; i++) {
        int seen = 0;
        jj_charge(a->c, 1 + k);
        if (a->x->computed) { /* unique(case_sensitive, attribute): Python's Jinja (the reference takes none) */
            jv attr = arg(a, 1, "attribute"), cs = arg(a, 0, "case_sensitive");
            jv key = py_key(a, s->v[i], attr);
            if (key.t == V_STR && !jj_truthy(cs))
                key = jj_case_map(a->c, key, 0);
            for (size_t j = 0; j < k && !seen; j++) {
                jv kj = py_key(a, r.u.arr->v[j], attr);
                if (kj.t == V_STR && !jj_truthy(cs))
                    kj = jj_case_map(a->c, kj, 0);
                seen = jj_strict_eq(kj, key) ||
                       ((kj.t == V_INT || kj.t == V_FLOAT) && (key.t == V_INT || key.t == V_FLOAT) && kj.u.num == key.u.num);
            }
        } else {
            for (size_t j = 0; j < k && !seen; j++)
                seen = jj_strict_eq(r.u.arr->v[j], s->v[i]);
        }
        if (!seen)
            r.u.arr->v[k++] = s->v[i];
    }
    r.u.arr->n = k;
    *out = r;
    return 1;
}

static int case_filter(fargs *a, jv v, jv *out, int upper)
{
    if (v.t != V_STR)
        return 0;
    *out = jj_case_map(a->c, v, upper);
    return 1;
}
static int f_upper(fargs *a, jv v, jv *out) { return case_filter(a, v, out, 1); }
static int f_lower(fargs *a, jv v, jv *out) { return case_filter(a, v, out, 0); }

/* filters that are the string method of the same name */
static int as_method(fargs *a, jv v, jv *out, const char *name, int with_args)
{
    jfn m = {.kind = F_METHOD, .name = name, .self = v};
    *out = jj_call_method(a->I, &m, with_args ? a->args : NULL, with_args ? a->nargs : 0);
    return 1;
}
static int f_dictsort(fargs *a, jv v, jv *out) { return v.t == V_OBJ && as_method(a, v, out, "dictsort", 1); }
static int f_title(fargs *a, jv v, jv *out) { return v.t == V_STR && as_method(a, v, out, "title", 0); }
static int f_capitalize(fargs *a, jv v, jv *out) { return v.t == V_STR && as_method(a, v, out, "capitalize", 0); }
static int f_replace(fargs *a, jv v, jv *out) { return v.t == V_STR && as_method(a, v, out, "replace", 1); }
static int f_items(fargs *a, jv v, jv *out) { return v.t == V_OBJ && as_method(a, v, out, "items", 0); }
static int f_keys(fargs *a, jv v, jv *out) { return v.t == V_OBJ && as_method(a, v, out, "keys", 0); }
static int f_values(fargs *a, jv v, jv *out) { return v.t == V_OBJ && as_method(a, v, out, "values", 0); }

static int f_trim(fargs *a, jv v, jv *out)
{
    (void)a;
    if (v.t != V_STR)
        return 0;
    *out = jj_js_trim(v, 1, 1);
    return 1;
}

/* int(default=0): a string's leading integer (parseInt), a number's floor, a boolean's 0/1 */
static int f_int(fargs *a, jv v, jv *out)
{
    switch (v.t) {
    case V_STR: {
        char buf[64];
        snprintf(buf, sizeof buf, "%.*s", (int)(v.u.str.n < 63 ? v.u.str.n : 63), v.u.str.s);
        char *end;
        const char *q = buf;
        while (*q == ' ' || *q == '\t' || *q == '\n')
            q++;
        long long k = strtoll(q, &end, 10);
        *out = end == q ? (a->np ? a->args[0] : v_int(0)) : v_int((double)k);
        return 1;
    }
    case V_INT:
    case V_FLOAT: *out = a->x->computed ? v : v_int(trunc(v.u.num) + 0.0); return 1; /* Math.trunc(x) + 0 */
    case V_BOOL: *out = v_int(v.u.b); return 1;
    default: return 0;
    }
}

static int f_float(fargs *a, jv v, jv *out)
{
    if (v.t == V_STR) { /* parseFloat: JS white space skipped, the longest decimal prefix (or Infinity), else 0 */
        const unsigned char *p = (const unsigned char *)v.u.str.s, *e = p + v.u.str.n;
        while (p < e) {
            uint32_t cp;
            int len = tok_utf8_dec(p, &cp);
            if (!tok_js_space(cp))
                break;
            p += len;
        }
        char buf[400];
        size_t k = 0;
        const unsigned char *q = p;
        if (q < e && (*q == '+' || *q == '-'))
            buf[k++] = (char)*q++;
        double val = 0;
        if ((size_t)(e - q) >= 8 && !memcmp(q, "Infinity", 8)) {
            val = k && buf[0] == '-' ? -INFINITY : INFINITY;
        } else {
            size_t digits = 0;
            while (q < e && *q >= '0' && *q <= '9' && k < sizeof buf - 8)
                buf[k++] = (char)*q++, digits++;
            if (q < e && *q == '.') {
                buf[k++] = (char)*q++;
                while (q < e && *q >= '0' && *q <= '9' && k < sizeof buf - 8)
                    buf[k++] = (char)*q++, digits++;
            }
            if (digits && q < e && (*q == 'e' || *q == 'E')) {
                const unsigned char *x = q + 1;
                size_t k0 = k;
                buf[k++] = 'e';
                if (x < e && (*x == '+' || *x == '-'))
                    buf[k++] = (char)*x++;
                if (x < e && *x >= '0' && *x <= '9') {
                    while (x < e && *x >= '0' && *x <= '9' && k < sizeof buf - 1)
                        buf[k++] = (char)*x++;
                } else {
                    k = k0; /* "1e" / "1e+": the exponent is not part of the number */
                }
            }
            buf[k] = 0;
            val = digits ? strtod(buf, NULL) : 0;
        }
        *out = v_float(isnan(val) ? 0 : val);
        return 1;
    }
    if (v.t == V_INT || v.t == V_FLOAT)
        *out = a->x->computed ? v : v_float(v.u.num);
    else if (v.t == V_BOOL)
        *out = v_float(v.u.b);
    else
        return 0;
    return 1;
}

static int f_abs(fargs *a, jv v, jv *out)
{
    (void)a;
    if (v.t != V_INT && v.t != V_FLOAT)
        return 0;
    *out = v.t == V_INT ? v_int(fabs(v.u.num)) : v_float(fabs(v.u.num));
    return 1;
}

static int f_bool(fargs *a, jv v, jv *out)
{
    (void)a;
    *out = v;
    return v.t == V_BOOL;
}

/* indent(width=4, first=false, blank=false) */
static int f_indent(fargs *a, jv v, jv *out)
{
    jctx *c = a->c;
    if (v.t != V_STR)
        return 0;
    jv w = arg(a, 0, "width"), first = arg(a, 1, "first"), blank = arg(a, 2, "blank");
    if (w.t != V_UNDEF && w.t != V_INT && w.t != V_STR)
        jj_jfail(c, "indent width must be a number or a string");
    if (w.t == V_INT && !(fabs(w.u.num) <= 1000))
        jj_jfail(c, "indent width must be an integer of at most 1000");
    if (w.t == V_STR && w.u.str.n > 1000)
        jj_jfail(c, "indent width must be a string of at most 1000 bytes");
    /* a string width is the prefix itself (Jinja 3's indent('--')) */
    const char *pre = w.t == V_STR ? w.u.str.s : NULL;
    int width = w.t == V_INT ? (int)w.u.num : w.t == V_STR ? (int)w.u.str.n : 4;
    tok_buf *b = jj_tbuf_open(c);
    size_t i = 0;
    int lineno = 0;
    while (i <= v.u.str.n) {
        const char *nl = memchr(v.u.str.s + i, '\n', v.u.str.n - i);
        size_t ln = nl ? (size_t)(nl - (v.u.str.s + i)) : v.u.str.n - i;
        int skip = (!jj_truthy(first) && lineno == 0) || (!jj_truthy(blank) && ln == 0);
        if (lineno)
            jj_put(c, b, "\n", 1);
        if (pre && !skip)
            jj_put(c, b, pre, (size_t)width);
        for (int k = 0; k < width && !skip && !pre; k++)
            jj_put(c, b, " ", 1);
        jj_put(c, b, v.u.str.s + i, ln);
        lineno++;
        if (!nl)
            break;
        i += ln + 1;
    }
    *out = v_str(jj_jstrdup(c, b->p ? b->p : "", b->n), b->n);
    jj_tbuf_close(c, b);
    return 1;
}

static const struct {
    const char *name;
    int (*fn)(fargs *a, jv v, jv *out);
} filters[] = {
    {"abs", f_abs},         {"bool", f_bool},       {"capitalize", f_capitalize}, {"count", f_count}, {"dictsort", f_dictsort},
    {"d", f_d},             {"default", f_default}, {"first", f_first},           {"float", f_float},
    {"indent", f_indent},   {"int", f_int},         {"items", f_items},           {"join", f_join},
    {"keys", f_keys},       {"last", f_last},       {"length", f_length},         {"list", f_list},
    {"lower", f_lower},     {"map", f_map},         {"max", f_max},               {"min", f_min},
    {"reject", f_reject},   {"rejectattr", f_rejectattr}, {"replace", f_replace},
    {"reverse", f_reverse}, {"safe", f_safe},       {"select", f_select}, {"selectattr", f_selectattr}, {"sort", f_sort},
    {"string", f_string},   {"title", f_title},     {"tojson", f_tojson},         {"trim", f_trim},
    {"unique", f_unique},   {"upper", f_upper},     {"values", f_values},
};

/* Python's str.isspace: the whitespace \s matches in Jinja's title */
static int py_space(uint32_t u)
{
    return (u >= 9 && u <= 13) || (u >= 0x1c && u <= 0x20) || u == 0x85 || u == 0xa0 || u == 0x1680 ||
           (u >= 0x2000 && u <= 0x200a) || u == 0x2028 || u == 0x2029 || u == 0x202f || u == 0x205f || u == 0x3000;
}

/* Python's Jinja title (whole = 0) and capitalize (whole = 1) of a string: title splits it at runs of
 * whitespace and - ( { [ <, and writes each piece's first character upper-cased and the rest lower-cased;
 * capitalize does that to the whole string. (The reference's title and capitalize only upper-case.) */
static jv py_title(jctx *c, jv s, int whole)
{
    const char *p = s.u.str.s;
    size_t n = s.u.str.n, i = 0;
    tok_buf *b = jj_tbuf_open(c);
    while (i < n) {
        int delim = -1;
        size_t first = 0, j = i;
        while (j < n) {
            size_t k = (size_t)tok_utf8_len((unsigned char)p[j]);
            uint32_t u = (unsigned char)p[j];
            if (j + k > n)
                k = 1;
            else
                tok_utf8_dec((const unsigned char *)p + j, &u);
            int d = !whole && (u == '-' || u == '(' || u == '{' || u == '[' || u == '<' || py_space(u));
            if (delim >= 0 && d != delim)
                break;
            if (delim < 0)
                first = k;
            delim = d;
            j += k;
        }
        jv up = jj_case_map(c, v_str(p + i, first), 1), low = jj_case_map(c, v_str(p + i + first, j - i - first), 0);
        jj_put(c, b, up.u.str.s, up.u.str.n);
        jj_put(c, b, low.u.str.s, low.u.str.n);
        i = j;
    }
    jv r = v_str(jj_jstrdup(c, b->p ? b->p : "", b->n), b->n);
    jj_tbuf_close(c, b);
    return r;
}

int jj_filter_known(const char *name, size_t n)
{
    for (size_t i = 0; i < sizeof filters / sizeof *filters; i++)
        if (strlen(filters[i].name) == n && !memcmp(filters[i].name, name, n))
            return 1;
    return 0;
}

jv jj_apply_filter(interp *I, node *x, jv v, env *E)
{
    fargs a = {.I = I, .c = I->c, .x = x};
    if (x->computed) {
        jj_eval_args(I, x->kids, x->nkids, E, &a.args, &a.nargs);
        a.np = jj_npos(a.args, a.nargs);
    }
#define F(w) (x->n == strlen(w) && !memcmp(x->s, w, x->n))
    /* where the reference fails, as Python's Jinja (transformers): an undefined value is '' to the string
     * filters, 0 long, and an empty sequence to the filters that iterate; none an empty one to selectattr,
     * rejectattr and map (their `if seq`) */
    if (v.t == V_UNDEF) {
        if (F("trim") || F("lower") || F("upper") || F("title") || F("capitalize") || F("string") || F("join"))
            return v_str("", 0);
        if (F("length") || F("count"))
            return v_int(0);
        if (F("list") || F("selectattr") || F("rejectattr") || F("select") || F("reject") || F("map") || F("unique") ||
            F("reverse") || F("sort"))
            v = jj_v_arr(I->c, 0);
    } else if (v.t == V_NULL && (F("selectattr") || F("rejectattr") || F("select") || F("reject") || F("map"))) {
        v = jj_v_arr(I->c, 0);
    }
    for (size_t i = 0; i < sizeof filters / sizeof *filters; i++) {
        if (strlen(filters[i].name) != x->n || memcmp(filters[i].name, x->s, x->n))
            continue;
        jv out;
        if (filters[i].fn(&a, v, &out))
            return out;
        /* where the reference fails (a list of content parts | trim): Python's Jinja applies the string
         * filters to str() of the value ("[{'type': 'text', ...}]", None, True, 1.5) */
        int nonstr = v.t == V_ARR || v.t == V_OBJ || v.t == V_NULL || v.t == V_BOOL || v.t == V_INT || v.t == V_FLOAT;
        if ((F("title") || F("capitalize")) && nonstr && !a.nargs) {
            I->c->python = 1;
            return py_title(I->c, jj_py_str(I->c, v), F("capitalize"));
        }
        if ((F("trim") || F("lower") || F("upper") || F("replace")) && nonstr &&
            filters[i].fn(&a, jj_py_str(I->c, v), &out))
            return out;
        break;
    }
#undef F
    jj_jfail(I->c, "template line %d: unsupported filter '%.*s' on %s", x->line, (int)x->n, x->s, jj_type_name(v));
}
