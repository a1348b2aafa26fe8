/* Jinja evaluator: scoping (a for loop has its own scope; set inside it stays there), statements,
 * expressions, calls, methods and tests; loop iterations and macro calls release their memory when
 * nothing older points into it. tok_jinja_render ties lexer, parser and evaluator together. */
#define _GNU_SOURCE
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tok/jinja_int.h"


static void exec_block(interp *I, node **body, size_t n, env *E, tok_buf *out);

static jv lookup(env *E, const char *s, size_t n)
{
    for (; E; E = E->parent) {
        jv *v = jj_obj_find(&E->vars, s, n);
        if (v)
            return *v;
    }
    return v_undef();
}

static void setvar(jctx *c, env *E, const char *s, size_t n, jv v) { jj_obj_set(c, &E->vars, s, n, v); }

static env *new_env(jctx *c, env *parent)
{
    env *e = jj_jalloc(c, sizeof *e);
    memset(e, 0, sizeof *e);
    e->vars.born = c->serial++;
    e->parent = parent;
    return e;
}

static jv method(jctx *c, const char *name, jv self)
{
    jfn *f = jj_jalloc(c, sizeof *f);
    memset(f, 0, sizeof *f);
    f->kind = F_METHOD;
    f->name = name;
    f->self = self;
    return (jv){.t = V_FN, .u.fn = f};
}

static jv builtin_attr(jctx *c, jv obj, const char *k, size_t kn)
{
#define K(w) (kn == strlen(w) && !memcmp(k, w, kn))
    if (obj.t == V_STR) {
        if (K("length"))
            return v_int((double)jj_utf16_len(obj.u.str.s, obj.u.str.n));
        static const char *const m[] = {"upper", "lower", "strip", "title", "capitalize", "rstrip", "lstrip",
                                        "startswith", "endswith", "split", "replace", "format"};
        for (size_t i = 0; i < sizeof m / sizeof *m; i++)
            if (K(m[i]))
                return method(c, m[i], obj);
    } else if (obj.t == V_ARR) {
        if (K("length"))
            return v_int((double)obj.u.arr->n);
    } else if (obj.t == V_OBJ) {
        static const char *const m[] = {"get", "items", "keys", "values", "dictsort"};
        for (size_t i = 0; i < sizeof m / sizeof *m; i++)
            if (K(m[i]))
                return method(c, m[i], obj);
    }
#undef K
    return v_undef();
}

jv jj_call_method(interp *I, jfn *f, jv *args, size_t nargs)
{
    jctx *c = I->c;
    jv s = f->self;
    size_t np = jj_npos(args, nargs);
    const char *m = f->name;
#define M(w) (!strcmp(m, w))
    if (s.t == V_STR) {
        if (M("upper") || M("lower"))
            return jj_case_map(c, s, M("upper"));
        if (M("strip") || M("lstrip") || M("rstrip")) {
            /* the reference ignores a chars argument and trims JS whitespace (strip('\n') trims spaces
             * too); we do the same so prompts stay byte-identical to it */
            return jj_js_trim(s, !M("rstrip"), !M("lstrip"));
        }
        if (M("format")) { /* Python's str.format (not in the reference): {} and {N} fields, {{ and }} */
            tok_buf *b = jj_tbuf_open(c);
            size_t auto_i = 0;
            int numbering = 0; /* 1 automatic ({}), 2 manual ({N}): Python refuses to switch */
            const char *p = s.u.str.s, *e = p + s.u.str.n;
            while (p < e) {
                if ((*p == '{' || *p == '}') && p + 1 < e && p[1] == *p) {
                    jj_put(c, b, p, 1);
                    p += 2;
                    continue;
                }
                if (*p == '}')
                    jj_jfail(c, "format(): single '}' encountered in format string");
                if (*p != '{') {
                    jj_put(c, b, p, 1);
                    p++;
                    continue;
                }
                const char *q = memchr(p, '}', (size_t)(e - p));
                if (!q)
                    jj_jfail(c, "format(): single '{' encountered in format string");
                size_t idx = auto_i++;
                if (numbering && numbering != (q > p + 1 ? 2 : 1))
                    jj_jfail(c, "format(): cannot switch between automatic field numbering and manual field specification");
                numbering = q > p + 1 ? 2 : 1;
                if (q > p + 1) {
                    idx = 0;
                    for (const char *d = p + 1; d < q; d++) {
                        if (*d < '0' || *d > '9' || idx > 1000)
                            jj_jfail(c, "format(): only {} and {number} fields are supported, not '%.*s'", (int)(q - p + 1), p);
                        idx = idx * 10 + (size_t)(*d - '0');
                    }
                }
                if (idx >= np)
                    jj_jfail(c, "format(): replacement index %zu out of range for %zu positional arguments", idx, np);
                jv t = jj_py_str(c, args[idx]);
                jj_put(c, b, t.u.str.s, t.u.str.n);
                p = q + 1;
            }
            jv r = v_str(jj_jstrdup(c, b->p ? b->p : "", b->n), b->n);
            jj_tbuf_close(c, b);
            return r;
        }
        if (M("startswith") || M("endswith")) {
            if (!np)
                jj_jfail(c, "%s() requires at least one argument", m);
            int ends = M("endswith");
            jv pats = args[0];
            size_t cnt = pats.t == V_ARR ? pats.u.arr->n : 1;
            if (pats.t != V_STR && pats.t != V_ARR)
                jj_jfail(c, "%s() argument must be a string or tuple of strings", m);
            for (size_t i = 0; i < cnt; i++) {
                jv p = pats.t == V_ARR ? pats.u.arr->v[i] : pats;
                if (p.t != V_STR)
                    jj_jfail(c, "%s() tuple elements must be strings", m);
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
                jj_jfail(c, "sep argument must be a string or null");
            if (maxs.t != V_INT)
                jj_jfail(c, "maxsplit argument must be a number");
            double maxsplit = maxs.u.num;
            jv parts[1];
            (void)parts;
            size_t cap = s.u.str.n + 2, cnt = 0;
            jv *v = jj_jalloc(c, cap * sizeof *v);
            if (sep.t == V_NULL) {
                jv t = jj_js_trim(s, 1, 0);
                size_t i = 0, n = t.u.str.n;
                const char *p = t.u.str.s;
                while (i < n) {
                    size_t k;
                    while (i < n && jj_js_ws_at(p, n, i, &k))
                        i += k;
                    if (i >= n)
                        break;
                    size_t st = i;
                    while (i < n && !jj_js_ws_at(p, n, i, &k))
                        i += (size_t)tok_utf8_len((unsigned char)p[i]);
                    if (maxsplit != -1 && (double)cnt >= maxsplit) {
                        v[cnt++] = v_str(p + st, n - st);
                        break;
                    }
                    v[cnt++] = v_str(p + st, i - st);
                }
            } else {
                if (!sep.u.str.n)
                    jj_jfail(c, "empty separator");
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
            jv a = jj_v_arr(c, cnt);
            memcpy(a.u.arr->v, v, cnt * sizeof *v);
            return a;
        }
        if (M("replace")) {
            if (np < 2)
                jj_jfail(c, "replace() requires at least two arguments");
            if (args[0].t != V_STR || args[1].t != V_STR)
                jj_jfail(c, "replace() arguments must be strings");
            jv cnt = np > 2 ? args[2] : jj_kwarg(args, nargs, "count");
            if (cnt.t == V_UNDEF)
                cnt = v_null();
            if (cnt.t != V_INT && cnt.t != V_NULL)
                jj_jfail(c, "replace() count argument must be a number or null");
            return jj_str_replace(c, s, args[0], args[1], cnt.t == V_NULL ? -1 : cnt.u.num);
        }
        if (M("capitalize") && s.u.str.n && (unsigned char)s.u.str.s[0] >= 0x80) {
            /* charAt(0).toUpperCase() + slice(1): the first UTF-16 unit, so an astral character stays */
            int len = tok_utf8_len((unsigned char)s.u.str.s[0]);
            if (len == 4)
                return s;
            jv head = jj_case_map(c, v_str(s.u.str.s, (size_t)len), 1);
            char *o = jj_jalloc(c, head.u.str.n + s.u.str.n - (size_t)len + 1);
            memcpy(o, head.u.str.s, head.u.str.n);
            memcpy(o + head.u.str.n, s.u.str.s + len, s.u.str.n - (size_t)len);
            return v_str(o, head.u.str.n + s.u.str.n - (size_t)len);
        }
        if (M("title") || M("capitalize")) {
            char *o = jj_jstrdup(c, s.u.str.s, s.u.str.n);
            for (size_t i = 0; i < s.u.str.n; i++) {
                /* title: /\b\w/ upper-cased, the JS regex's ASCII word characters (UTF-8 bytes of other
                 * characters are not word characters either); capitalize: the first character only */
                int start = M("capitalize") ? i == 0 : jj_is_word(o[i]) && (i == 0 || !jj_is_word(o[i - 1]));
                if (start && o[i] >= 'a' && o[i] <= 'z')
                    o[i] = (char)(o[i] - 32);
            }
            return v_str(o, s.u.str.n);
        }
    } else if (s.t == V_OBJ) {
        jobj *o = s.u.obj;
        if (M("get")) {
            if (!np || args[0].t != V_STR)
                jj_jfail(c, "Object key must be a string");
            jv *v = jj_obj_find(o, args[0].u.str.s, args[0].u.str.n);
            return v ? *v : np > 1 ? args[1] : v_null();
        }
        if (M("items") || M("keys") || M("values")) {
            jv a = jj_v_arr(c, o->n);
            for (size_t i = 0; i < o->n; i++) {
                jv key = v_str(o->k[i], o->kn[i]);
                if (M("items")) {
                    jv pair = jj_v_arr(c, 2);
                    pair.u.arr->v[0] = key;
                    pair.u.arr->v[1] = o->v[i];
                    a.u.arr->v[i] = pair;
                } else {
                    a.u.arr->v[i] = M("keys") ? key : o->v[i];
                }
            }
            return a;
        }
        if (M("dictsort")) { /* dictsort(case_sensitive=false, by='key', reverse=false): [key, value] pairs */
            jv cs = np > 0 ? args[0] : jj_kwarg(args, nargs, "case_sensitive");
            jv by = np > 1 ? args[1] : jj_kwarg(args, nargs, "by");
            jv rev = np > 2 ? args[2] : jj_kwarg(args, nargs, "reverse");
            if ((cs.t != V_UNDEF && cs.t != V_BOOL) || (rev.t != V_UNDEF && rev.t != V_BOOL))
                jj_jfail(c, "case_sensitive and reverse must be booleans");
            int on_value = 0;
            if (by.t == V_STR && by.u.str.n == 5 && !memcmp(by.u.str.s, "value", 5))
                on_value = 1;
            else if (by.t != V_UNDEF && !(by.t == V_STR && by.u.str.n == 3 && !memcmp(by.u.str.s, "key", 3)))
                jj_jfail(c, "by must be either 'key' or 'value'");
            jv a = jj_v_arr(c, o->n);
            for (size_t i = 0; i < o->n; i++) {
                jv pair = jj_v_arr(c, 2);
                pair.u.arr->v[0] = v_str(o->k[i], o->kn[i]);
                pair.u.arr->v[1] = o->v[i];
                size_t j = i; /* insertion sort: stable, as Array.prototype.sort */
                while (j > 0) {
                    jj_charge(c, 1);
                    int cmp = jj_compare_values(c, a.u.arr->v[j - 1].u.arr->v[on_value], pair.u.arr->v[on_value],
                                                cs.t == V_BOOL && cs.u.b);
                    if (rev.t == V_BOOL && rev.u.b)
                        cmp = -cmp;
                    if (cmp <= 0)
                        break;
                    a.u.arr->v[j] = a.u.arr->v[j - 1];
                    j--;
                }
                a.u.arr->v[j] = pair;
            }
            return a;
        }
    }
#undef M
    jj_jfail(c, "unsupported method '%s' on %s", m, jj_type_name(s));
}

/* a macro's (or a call block's caller's) arguments into its scope ME, as the reference binds them:
 * positional first, then by keyword, then defaults; extra positional ones are varargs and extra
 * keywords kwargs when the body reads those names, else errors */
static void bind_args(interp *I, node *m, const char *who, jv *args, size_t nargs, size_t np, env *ME)
{
    jctx *c = I->c;
    int wn = who ? (int)strlen(who) : (int)m->a->n;
    const char *ws = who ? who : m->a->s;
    const char *q = who ? "" : "'";
    jobj *kw = nargs > np ? args[nargs - 1].u.obj : NULL;
    jv rest = jj_v_obj(c, V_OBJ); /* keywords no parameter took */
    for (size_t i = 0; kw && i < kw->n; i++) {
        int taken = 0;
        for (size_t k = np; k < m->nkids && !taken; k++)
            taken = m->kids[k]->n == kw->kn[i] && !memcmp(m->kids[k]->s, kw->k[i], kw->kn[i]);
        if (!taken)
            jj_obj_set(c, rest.u.obj, kw->k[i], kw->kn[i], kw->v[i]);
    }
    for (size_t i = 0; i < m->nkids; i++) {
        node *par = m->kids[i];
        jv v = v_undef();
        if (i < np) {
            v = args[i];
        } else if (kw && jj_obj_find(kw, par->s, par->n)) {
            v = *jj_obj_find(kw, par->s, par->n);
        } else if (par->type == E_KWARG) {
            v = jj_eval(I, par->a, ME);
        }
        setvar(c, ME, par->s, par->n, v);
    }
    if (m->uses & JJ_USES_KWARGS)
        setvar(c, ME, "kwargs", 6, rest);
    else if (rest.u.obj->n)
        jj_jfail(c, "macro %s%.*s%s takes no keyword argument '%.*s'", q, wn, ws, q, (int)rest.u.obj->kn[0],
                 rest.u.obj->k[0]);
    if (m->uses & JJ_USES_VARARGS) {
        jv va = jj_v_arr(c, np > m->nkids ? np - m->nkids : 0);
        for (size_t i = m->nkids; i < np; i++)
            va.u.arr->v[i - m->nkids] = args[i];
        setvar(c, ME, "varargs", 7, va);
    } else if (np > m->nkids) {
        jj_jfail(c, "macro %s%.*s%s takes not more than %zu argument(s)", q, wn, ws, q, m->nkids);
    }
}

static jv call_fn(interp *I, jv fnv, jv *args, size_t nargs, env *E)
{
    jctx *c = I->c;
    if (fnv.t != V_FN)
        jj_jfail(c, "Cannot call something that is not a function: got %s", jj_type_name(fnv));
    jfn *f = fnv.u.fn;
    size_t np = jj_npos(args, nargs);
    switch (f->kind) {
    case F_METHOD: return jj_call_method(I, f, args, nargs);
    case F_RAISE: {
        jv m = np ? jj_to_string(c, args[0]) : v_cstr("");
        jj_jfail(c, "template raised: %.*s", (int)(m.u.str.n > 400 ? 400 : m.u.str.n), m.u.str.s);
    }
    case F_NAMESPACE: {
        jv ns = jj_v_obj(c, V_NS);
        if (np > 1)
            jj_jfail(c, "namespace expected at most 1 argument, got %zu", np);
        if (np == 1) {
            if (args[0].t == V_OBJ) {
                for (size_t i = 0; i < args[0].u.obj->n; i++)
                    jj_obj_set(c, ns.u.obj, args[0].u.obj->k[i], args[0].u.obj->kn[i], args[0].u.obj->v[i]);
            } else {
                jj_jfail(c, "unsupported: namespace() from a %s", jj_type_name(args[0]));
            }
        }
        if (nargs > np) {
            jobj *kw = args[nargs - 1].u.obj;
            for (size_t i = 0; i < kw->n; i++)
                jj_obj_set(c, ns.u.obj, kw->k[i], kw->kn[i], kw->v[i]);
        }
        return ns;
    }
    case F_RANGE: {
        double start = 0, stop, step = 1;
        for (size_t i = 0; i < np; i++)
            if (args[i].t != V_INT || !isfinite(args[i].u.num))
                jj_jfail(c, "range() arguments must be finite integers");
        if (np == 1) {
            stop = args[0].u.num;
        } else if (np >= 2) {
            start = args[0].u.num;
            stop = args[1].u.num;
            if (np > 2)
                step = args[2].u.num;
        } else {
            jj_jfail(c, "range() needs arguments");
        }
        if (step == 0)
            jj_jfail(c, "range() step must not be zero");
        double cnt = step > 0 ? ceil((stop - start) / step) : ceil((start - stop) / -step);
        if (cnt < 0)
            cnt = 0;
        if (!(cnt <= 1e6)) /* NaN too */
            jj_jfail(c, "range() too long");
        jv a = jj_v_arr(c, (size_t)cnt);
        for (size_t i = 0; i < (size_t)cnt; i++)
            a.u.arr->v[i] = v_int(start + step * (double)i);
        return a;
    }
    case F_STRFTIME: {
        if (!np || args[0].t != V_STR)
            jj_jfail(c, "strftime_now() needs a format string");
        time_t now = time(NULL);
        struct tm tm;
        localtime_r(&now, &tm);
        static const char *const mon[] = {"January", "February", "March",     "April",   "May",      "June",
                                          "July",    "August",   "September", "October", "November", "December"};
        tok_buf *b = jj_tbuf_open(c);
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
                jj_puts_(c, b, buf);
            } else {
                jj_put(c, b, f + i, 1);
            }
        }
        jv r = v_str(jj_jstrdup(c, b->p ? b->p : "", b->n), b->n);
        jj_tbuf_close(c, b);
        return r;
    }
    case F_MACRO:
    case F_CALLER: {
        node *m = f->macro;
        /* the body's text goes to a malloc'd buffer opened before the mark; when the call wrote to no
         * older object, everything it allocated (its scope included) goes before the result is copied */
        tok_buf *b = jj_tbuf_open(c);
        iter_mark im = jj_iter_begin(c);
        env *ME = new_env(c, f->kind == F_CALLER ? f->env : E);
        bind_args(I, m, f->kind == F_CALLER ? "None" : NULL, args, nargs, np, ME);
        exec_block(I, m->body, m->nbody, ME, b);
        jj_iter_end(c, im);
        jv r = v_str(jj_jstrdup(c, b->p ? b->p : "", b->n), b->n);
        jj_tbuf_close(c, b);
        return r;
    }
    }
    jj_jfail(c, "bad function");
}

/* an integer operation's result: finite, or the render fails by name */
static jv int_result(jctx *c, const node *x, double r)
{
    if (!isfinite(r))
        jj_jfail(c, "template line %d: integer overflow", x->line);
    return v_int(r);
}

/* Python's repetition of a string (the reference has none): times an integer or boolean, empty for a count
 * of 0 or less; refused before it is built when longer than the text budget */
static jv repeat(jctx *c, jv str, jv k)
{
    double n = k.t == V_BOOL ? k.u.b : k.u.num;
    c->python = 1;
    if (n <= 0 || str.u.str.n == 0)
        return v_str("", 0);
    if (n * (double)str.u.str.n > (double)c->lim.max_text)
        jj_budget_fail(c, JJ_TEXT);
    tok_buf *b = jj_tbuf_open(c);
    for (double i = 0; i < n; i++)
        jj_put(c, b, str.u.str.s, str.u.str.n);
    jv r = v_str(jj_jstrdup(c, b->p, b->n), b->n);
    jj_tbuf_close(c, b);
    return r;
}

/* JS loose equality for the value kinds templates compare */
static jv eval_bin(interp *I, node *x, env *E)
{
    jctx *c = I->c;
    const char *op = x->s;
    size_t on = x->n;
#define OP(w) (on == strlen(w) && !memcmp(op, w, on))
    jv l = jj_eval(I, x->a, E);
    if (OP("and"))
        return jj_truthy(l) ? jj_eval(I, x->b, E) : l;
    if (OP("or"))
        return jj_truthy(l) ? l : jj_eval(I, x->b, E);
    jv r = jj_eval(I, x->b, E);
    /* Python's Undefined (d[undefined]) equals only an undefined value (the reference's equals none too) */
    if ((OP("==") || OP("!=")) && ((l.t == V_UNDEF && l.py) || (r.t == V_UNDEF && r.py)))
        return v_bool((l.t == V_UNDEF && r.t == V_UNDEF) == OP("=="));
    if (OP("=="))
        return v_bool(jj_loose_eq(l, r));
    if (OP("!="))
        return v_bool(!jj_loose_eq(l, r));
    if (OP("~") && (l.t == V_NULL || r.t == V_NULL)) { /* the reference fails; Python's Jinja: str() of each, "None" */
        c->python = 1;
        return jj_concat(c, jj_py_str(c, l), jj_py_str(c, r));
    }
    if (OP("~") && (l.t == V_UNDEF || r.t == V_UNDEF)) /* the reference: undefined concatenates as '' */
        return jj_concat(c, l.t == V_UNDEF ? v_str("", 0) : l, r.t == V_UNDEF ? v_str("", 0) : r);
    if (l.t == V_UNDEF || r.t == V_UNDEF) {
        if (r.t == V_UNDEF && (OP("in") || OP("not in")))
            return v_bool(OP("not in"));
        /* Python's Jinja where the reference fails: undefined is in a list holding an undefined item (Undefined
         * equals Undefined) and in no other, and is no key */
        if ((r.t == V_ARR || r.t == V_OBJ) && (OP("in") || OP("not in"))) {
            int found = 0;
            for (size_t i = 0; r.t == V_ARR && i < r.u.arr->n && !found; i++)
                found = r.u.arr->v[i].t == V_UNDEF;
            return v_bool(found != OP("not in"));
        }
        jj_jfail(c, "template line %d: Cannot perform operation %.*s on undefined values", x->line, (int)on, op);
    }
    if (l.t == V_NULL || r.t == V_NULL)
        jj_jfail(c, "template line %d: Cannot perform operation on null values", x->line);
    if (OP("~"))
        return jj_concat(c, l, r);
    int lnum = l.t == V_INT || l.t == V_FLOAT, rnum = r.t == V_INT || r.t == V_FLOAT;
    if (OP("**") && (lnum || l.t == V_BOOL) && (rnum || r.t == V_BOOL)) {
        double a = l.t == V_BOOL ? l.u.b : l.u.num, b = r.t == V_BOOL ? r.u.b : r.u.num;
        if (a == 0 && b < 0)
            jj_jfail(c, "0.0 cannot be raised to a negative power");
        double res = pow(a, b);
        if (!isfinite(res))
            jj_jfail(c, "Exponentiation result is not a finite real number");
        return l.t == V_FLOAT || r.t == V_FLOAT || b < 0 ? v_float(res) : v_int(res);
    }
    if (lnum && rnum) {
        double a = l.u.num, b = r.u.num;
        int fl = l.t == V_FLOAT || r.t == V_FLOAT;
        /* integers stay finite (an infinite or NaN "integer" would reach range(), indexing, ...):
         * division or modulo by zero and overflow are errors, as in Python */
        if (!fl && b == 0 && (OP("//") || OP("%")))
            jj_jfail(c, "template line %d: integer division or modulo by zero", x->line);
        if (OP("+"))
            return fl ? v_float(a + b) : int_result(c, x, a + b);
        if (OP("-"))
            return fl ? v_float(a - b) : int_result(c, x, a - b);
        if (OP("*"))
            return fl ? v_float(a * b) : int_result(c, x, a * b);
        if (OP("/"))
            return v_float(a / b);
        if (OP("//"))
            return fl ? v_float(floor(a / b)) : int_result(c, x, floor(a / b));
        if (OP("%"))
            return fl ? v_float(fmod(a, b)) : int_result(c, x, fmod(a, b));
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
            jv a = jj_v_arr(c, l.u.arr->n + r.u.arr->n);
            memcpy(a.u.arr->v, l.u.arr->v, l.u.arr->n * sizeof(jv));
            memcpy(a.u.arr->v + l.u.arr->n, r.u.arr->v, r.u.arr->n * sizeof(jv));
            return a;
        }
    } else if (r.t == V_ARR) {
        jj_charge(c, r.u.arr->n);
        int mem = 0;
        for (size_t i = 0; i < r.u.arr->n && !mem; i++)
            mem = jj_strict_eq(r.u.arr->v[i], l);
        if (OP("in"))
            return v_bool(mem);
        if (OP("not in"))
            return v_bool(!mem);
    }
    /* where the reference fails: Python's 'ab' * 3 and 3 * 'ab' (not by a float, nor by a JSON real) */
    if (OP("*") && l.t == V_STR && ((r.t == V_INT && !r.real) || r.t == V_BOOL))
        return repeat(c, l, r);
    if (OP("*") && r.t == V_STR && ((l.t == V_INT && !l.real) || l.t == V_BOOL))
        return repeat(c, r, l);
    if ((l.t == V_STR || r.t == V_STR) && OP("+"))
        return jj_concat(c, l, r);
    if (l.t == V_STR && r.t == V_STR && (OP("in") || OP("not in"))) {
        jj_charge(c, 1 + r.u.str.n / 256);
        int has = l.u.str.n == 0 || (l.u.str.n <= r.u.str.n && memmem(r.u.str.s, r.u.str.n, l.u.str.s, l.u.str.n));
        return v_bool(OP("in") ? has : !has);
    }
    if (l.t == V_STR && r.t == V_OBJ && (OP("in") || OP("not in"))) {
        int has = jj_obj_find(r.u.obj, l.u.str.s, l.u.str.n) != NULL;
        return v_bool(OP("in") ? has : !has);
    }
    if (l.t == V_STR && r.t == V_STR && (OP("<") || OP(">") || OP("<=") || OP(">=")))
        jj_jfail(c, "template line %d: unsupported: string comparison with %.*s", x->line, (int)on, op);
    jj_jfail(c, "template line %d: Unknown operator \"%.*s\" between %s and %s", x->line, (int)on, op, jj_type_name(l),
          jj_type_name(r));
#undef OP
}

void jj_eval_args(interp *I, node **kids, size_t n, env *E, jv **out, size_t *nout)
{
    jctx *c = I->c;
    size_t cap = n + 1, cnt = 0;
    for (size_t i = 0; i < n; i++)
        if (kids[i]->type == E_SPREAD)
            cap += 64;
    jv *v = jj_jalloc(c, cap * sizeof *v);
    jv kw = v_undef();
    for (size_t i = 0; i < n; i++) {
        node *a = kids[i];
        if (a->type == E_SPREAD) {
            jv s = jj_eval(I, a->a, E);
            if (s.t != V_ARR)
                jj_jfail(c, "Cannot unpack non-iterable type: %s", jj_type_name(s));
            if (cnt + s.u.arr->n >= cap) {
                jv *nv = jj_jalloc(c, (cnt + s.u.arr->n + n + 1) * sizeof *nv);
                memcpy(nv, v, cnt * sizeof *v);
                v = nv;
                cap = cnt + s.u.arr->n + n + 1;
            }
            for (size_t k = 0; k < s.u.arr->n; k++)
                v[cnt++] = s.u.arr->v[k];
        } else if (a->type != E_KWARG && a->type != E_KWSPREAD) {
            v[cnt++] = jj_eval(I, a, E);
        }
    }
    for (size_t i = 0; i < n; i++) {
        node *a = kids[i];
        if (a->type == E_KWARG || a->type == E_KWSPREAD) {
            if (kw.t == V_UNDEF)
                kw = jj_v_obj(c, V_KW);
            if (a->type == E_KWARG) {
                if (jj_obj_find(kw.u.obj, a->s, a->n))
                    jj_jfail(c, "Got multiple values for keyword argument '%.*s'", (int)a->n, a->s);
                jj_obj_set(c, kw.u.obj, a->s, a->n, jj_eval(I, a->a, E));
            } else {
                jv m = jj_eval(I, a->a, E);
                if (m.t != V_OBJ)
                    jj_jfail(c, "Argument after ** must be a mapping, not %s", jj_type_name(m));
                for (size_t k = 0; k < m.u.obj->n; k++)
                    jj_obj_set(c, kw.u.obj, m.u.obj->k[k], m.u.obj->kn[k], m.u.obj->v[k]);
            }
        }
    }
    if (kw.t != V_UNDEF)
        v[cnt++] = kw;
    *out = v;
    *nout = cnt;
}

int jj_run_test(interp *I, const char *name, size_t n, jv v, int line)
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
    /* Python's Undefined is an (empty) iterable and sequence; the reference's undefined is neither */
    if (T("iterable"))
        return v.t == V_ARR || v.t == V_STR || (v.t == V_UNDEF && I->c->python);
    if (T("mapping"))
        return v.t == V_OBJ;
    if (T("sequence"))
        return v.t == V_ARR || v.t == V_OBJ || v.t == V_STR || (v.t == V_UNDEF && I->c->python);
    if (T("odd") || T("even")) {
        if (v.t != V_INT)
            jj_jfail(I->c, "cannot %.*s on %s", (int)n, name, jj_type_name(v));
        int odd = fmod(v.u.num, 2) != 0;
        return T("odd") ? odd : !odd;
    }
    if (T("lower") || T("upper")) {
        if (v.t != V_STR)
            return 0;
        jv m = jj_case_map(I->c, v, T("upper")); /* str === str.toLowerCase() / toUpperCase() */
        return m.u.str.n == v.u.str.n && !memcmp(m.u.str.s, v.u.str.s, v.u.str.n);
    }
#undef T
    jj_jfail(I->c, "template line %d: unsupported test '%.*s'", line, (int)n, name);
}

static jv eval_member(interp *I, node *x, env *E)
{
    jctx *c = I->c;
    jv obj = jj_eval(I, x->a, E);
    if (obj.t == V_UNDEF && obj.py) /* Python's Undefined (d[undefined]): its attributes and items raise */
        jj_jfail(c, "template line %d: an undefined value (a subscript that found nothing) has no attributes or items",
                 x->line);
    if (x->computed && x->b->type == E_SLICE) {
        if (obj.t != V_ARR && obj.t != V_STR)
            jj_jfail(c, "Slice object must be an array or string");
        node *s = x->b;
        jv st = s->a ? jj_eval(I, s->a, E) : v_undef(), sp = s->b ? jj_eval(I, s->b, E) : v_undef(),
           stp = s->c ? jj_eval(I, s->c, E) : v_undef();
        if ((st.t != V_INT && st.t != V_UNDEF) || (sp.t != V_INT && sp.t != V_UNDEF) || (stp.t != V_INT && stp.t != V_UNDEF))
            jj_jfail(c, "Slice indices must be integers or undefined");
        if ((st.t == V_INT && !isfinite(st.u.num)) || (sp.t == V_INT && !isfinite(sp.u.num)) ||
            (stp.t == V_INT && !isfinite(stp.u.num)))
            jj_jfail(c, "Slice indices must be finite");
        /* elements: array items or code points */
        size_t len = 0;
        size_t *off = NULL;
        if (obj.t == V_ARR) {
            len = obj.u.arr->n;
        } else {
            off = jj_jalloc(c, (obj.u.str.n + 1) * sizeof *off);
            for (size_t i = 0; i < obj.u.str.n; i += (size_t)tok_utf8_len((unsigned char)obj.u.str.s[i]))
                off[len++] = i;
            off[len] = obj.u.str.n;
        }
        double L = (double)len, step = stp.t == V_INT ? stp.u.num : 1, start, stop;
        if (step == 0)
            jj_jfail(c, "slice step cannot be zero");
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
        jv out = obj.t == V_ARR ? jj_v_arr(c, len) : v_undef();
        tok_buf *b = obj.t == V_STR ? jj_tbuf_open(c) : NULL;
        size_t k = 0;
        for (double i = start; step > 0 ? i < stop : i > stop; i += step) {
            size_t ii = (size_t)i;
            jj_charge(c, 1);
            if (obj.t == V_ARR)
                out.u.arr->v[k++] = obj.u.arr->v[ii];
            else
                jj_put(c, b, obj.u.str.s + off[ii], off[ii + 1] - off[ii]);
        }
        if (obj.t == V_ARR) {
            out.u.arr->n = k;
            return out;
        }
        jv r = v_str(jj_jstrdup(c, b->p ? b->p : "", b->n), b->n);
        jj_tbuf_close(c, b);
        return r;
    }
    jv prop;
    if (x->computed)
        prop = jj_eval(I, x->b, E);
    else if (x->b->type == E_NUM)
        prop = v_int(x->b->num);
    else
        prop = v_str(x->b->s, x->b->n);
    /* where the reference fails: Python's Jinja indexes a list or string with a boolean as with 0 / 1, and
     * answers a subscript that finds nothing (a dict by a non-string: d[undefined], d[none], d[1], d[[...]];
     * a list or string by a float, none, ...; an item of none or a number) with Undefined */
    if (x->computed && prop.t == V_BOOL && (obj.t == V_ARR || obj.t == V_STR)) {
        c->python = 1;
        prop = v_int(prop.u.b);
    }
    if (x->computed && obj.t != V_UNDEF && prop.t != V_STR && !(prop.t == V_INT && (obj.t == V_ARR || obj.t == V_STR))) {
        c->python = 1;
        return v_py_undef();
    }
    if (obj.t == V_OBJ || obj.t == V_NS || obj.t == V_KW) {
        if (prop.t != V_STR)
            jj_jfail(c, "Cannot access property with non-string: got %s", jj_type_name(prop));
        jv *f = jj_obj_find(obj.u.obj, prop.u.str.s, prop.u.str.n);
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
            if (!(i >= 0 && i < (double)cnt)) /* NaN too */
                return v_undef();
            size_t q = 0;
            for (size_t k = 0; k < (size_t)i; k++)
                q += (size_t)tok_utf8_len((unsigned char)obj.u.str.s[q]);
            return v_str(obj.u.str.s + q, (size_t)tok_utf8_len((unsigned char)obj.u.str.s[q]));
        }
        if (prop.t == V_STR)
            return builtin_attr(c, obj, prop.u.str.s, prop.u.str.n);
        jj_jfail(c, "Cannot access property with non-string/non-number: got %s", jj_type_name(prop));
    }
    if (prop.t != V_STR)
        jj_jfail(c, "Cannot access property with non-string: got %s", jj_type_name(prop));
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
        jv a = jj_v_arr(c, x->nkids);
        for (size_t i = 0; i < x->nkids; i++)
            a.u.arr->v[i] = jj_eval(I, x->kids[i], E);
        return a;
    }
    case E_OBJ: {
        jv o = jj_v_obj(c, V_OBJ);
        for (size_t i = 0; i + 1 < x->nkids; i += 2) {
            jv k = jj_eval(I, x->kids[i], E);
            if (k.t != V_STR)
                /* the reference's words (Python's Jinja takes any hashable key; this engine keys by string) */
                jj_jfail(c, "template line %d: Object keys must be strings: got %s (a dict literal's keys must be "
                            "strings here)", x->line, jj_type_name(k));
            jj_obj_set(c, o.u.obj, k.u.str.s, k.u.str.n, jj_eval(I, x->kids[i + 1], E));
        }
        return o;
    }
    case E_MEMBER: return eval_member(I, x, E);
    case E_CALL: {
        jv *args;
        size_t n;
        jj_eval_args(I, x->kids, x->nkids, E, &args, &n);
        jv f = jj_eval(I, x->a, E);
        return call_fn(I, f, args, n, E);
    }
    case E_UNARY: {
        jv a = jj_eval(I, x->a, E);
        if (x->s[0] == 'n')
            return v_bool(!jj_truthy(a));
        if (a.t == V_INT || a.t == V_FLOAT || a.t == V_BOOL) {
            double d = a.t == V_BOOL ? a.u.b : a.u.num;
            d = x->s[0] == '-' ? -d : d;
            return a.t == V_FLOAT ? v_float(d) : v_int(d);
        }
        jj_jfail(c, "template line %d: Unknown operator \"%c\" for %s", x->line, x->s[0], jj_type_name(a));
    }
    case E_BIN: return eval_bin(I, x, E);
    case E_FILTER: return jj_apply_filter(I, x, jj_eval(I, x->a, E), E);
    case E_TEST: {
        int r = jj_run_test(I, x->s, x->n, jj_eval(I, x->a, E), x->line);
        return v_bool(x->negate ? !r : r);
    }
    case E_TERNARY: return jj_truthy(jj_eval(I, x->a, E)) ? jj_eval(I, x->b, E) : jj_eval(I, x->c, E);
    case E_SELECT: return jj_truthy(jj_eval(I, x->b, E)) ? jj_eval(I, x->a, E) : v_undef();
    case E_KWARG:
    case E_SLICE:
    case E_SPREAD:
    case E_KWSPREAD: jj_jfail(c, "template line %d: misplaced argument syntax", x->line);
    }
    jj_jfail(c, "template line %d: unsupported construct", x->line);
}

/* every evaluation passes here: one step, one level of recursion */
jv jj_eval(interp *I, node *x, env *E)
{
    jctx *c = I->c;
    if (++c->rdepth > TOK_JINJA_MAX_RECURSION)
        jj_jfail(c, "template line %d: recursion too deep (more than %d levels)", x->line, TOK_JINJA_MAX_RECURSION);
    jj_charge(c, 1);
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
        jj_obj_find(&S->vars, "loop", 4)->t = V_UNDEF;
        if (target->type == E_IDENT)
            jj_obj_find(&S->vars, target->s, target->n)->t = V_UNDEF;
        for (size_t i = 0; target->type == E_TUPLE && i < target->nkids; i++)
            if (target->kids[i]->type == E_IDENT)
                jj_obj_find(&S->vars, target->kids[i]->s, target->kids[i]->n)->t = V_UNDEF;
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
            jj_jfail(c, "Cannot unpack non-iterable type in set: %s", jj_type_name(v));
        if (v.u.arr->n != target->nkids)
            jj_jfail(c, "Too %s items to unpack in set", target->nkids > v.u.arr->n ? "few" : "many");
        for (size_t i = 0; i < target->nkids; i++) {
            if (target->kids[i]->type != E_IDENT)
                jj_jfail(c, "Cannot unpack to non-identifier in set");
            setvar(c, E, target->kids[i]->s, target->kids[i]->n, v.u.arr->v[i]);
        }
    } else if (target->type == E_MEMBER && !target->computed) {
        jv obj = jj_eval(I, target->a, E);
        if (obj.t != V_NS)
            jj_jfail(c, "template line %d: cannot assign attribute on non-namespace object", target->line);
        if (target->b->type != E_IDENT)
            jj_jfail(c, "Cannot assign to member with non-identifier property");
        jj_obj_set(c, obj.u.obj, target->b->s, target->b->n, v);
    } else {
        jj_jfail(c, "template line %d: unsupported assignment target", target->line);
    }
}

static void exec_block(interp *I, node **body, size_t n, env *E, tok_buf *out)
{
    jctx *c = I->c;
    if (++c->rdepth > TOK_JINJA_MAX_RECURSION)
        jj_jfail(c, "template: recursion too deep (more than %d levels)", TOK_JINJA_MAX_RECURSION);
    for (size_t i = 0; i < n && !I->ctl; i++) {
        node *x = body[i];
        jj_charge(c, 1);
        switch (x->type) {
        case N_SET: {
            jv v;
            if (x->b) {
                v = jj_eval(I, x->b, E);
            } else {
                tok_buf *b = jj_tbuf_open(c);
                exec_block(I, x->body, x->nbody, E, b);
                v = v_str(jj_jstrdup(c, b->p ? b->p : "", b->n), b->n);
                jj_tbuf_close(c, b);
            }
            assign(I, x->a, v, E);
            break;
        }
        case N_IF:
            if (jj_truthy(jj_eval(I, x->a, E)))
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
            jv seq = jj_eval(I, it, S);
            if (seq.t == V_UNDEF) /* Python's Jinja where the reference fails: undefined iterates as empty */
                seq = jj_v_arr(c, 0);
            if (seq.t == V_OBJ) {
                jfn m = {.kind = F_METHOD, .name = "keys", .self = seq};
                seq = jj_call_method(I, &m, NULL, 0);
            }
            if (seq.t != V_ARR)
                jj_jfail(c, "template line %d: Expected iterable or object type in for loop: got %s", x->line, jj_type_name(seq));
            jarr *a = seq.u.arr;
            jv *items = jj_jalloc(c, (a->n + 1) * sizeof *items);
            size_t k = 0;
            for (size_t i = 0; i < a->n; i++) {
                if (x->a->type == E_TUPLE) {
                    if (a->v[i].t != V_ARR)
                        jj_jfail(c, "Cannot unpack non-iterable type: %s", jj_type_name(a->v[i]));
                    if (a->v[i].u.arr->n != x->a->nkids)
                        jj_jfail(c, "Too %s items to unpack", x->a->nkids > a->v[i].u.arr->n ? "few" : "many");
                }
                if (test) {
                    env *L = new_env(c, S);
                    assign(I, x->a, a->v[i], L);
                    if (!jj_truthy(jj_eval(I, test, L)))
                        continue;
                }
                items[k++] = a->v[i];
            }
            int iterated = 0;
            loop_slots(c, S, x->a, 0);
            for (size_t i = 0; i < k; i++) {
                jj_charge(c, 8);
                iter_mark im = jj_iter_begin(c);
                jv loop = jj_v_obj(c, V_OBJ);
                jobj *lo = loop.u.obj;
                jj_obj_set(c, lo, "index", 5, v_int((double)i + 1));
                jj_obj_set(c, lo, "index0", 6, v_int((double)i));
                jj_obj_set(c, lo, "revindex", 8, v_int((double)(k - i)));
                jj_obj_set(c, lo, "revindex0", 9, v_int((double)(k - i - 1)));
                jj_obj_set(c, lo, "first", 5, v_bool(i == 0));
                jj_obj_set(c, lo, "last", 4, v_bool(i == k - 1));
                jj_obj_set(c, lo, "length", 6, v_int((double)k));
                jj_obj_set(c, lo, "previtem", 8, i > 0 ? items[i - 1] : v_undef());
                jj_obj_set(c, lo, "nextitem", 8, i + 1 < k ? items[i + 1] : v_undef());
                setvar(c, S, "loop", 4, loop);
                assign(I, x->a, items[i], S);
                c->oldest_write = UINT64_MAX; /* those two writes are the loop's own */
                exec_block(I, x->body, x->nbody, S, out);
                if (jj_iter_end(c, im))
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
            jfn *f = jj_jalloc(c, sizeof *f);
            memset(f, 0, sizeof *f);
            f->kind = F_MACRO;
            f->macro = x;
            setvar(c, E, x->a->s, x->a->n, (jv){.t = V_FN, .u.fn = f});
            break;
        }
        case N_CALLBLOCK: {
            /* caller() renders the body in this scope; the macro sees it through its call site */
            jfn *f = jj_jalloc(c, sizeof *f);
            memset(f, 0, sizeof *f);
            f->kind = F_CALLER;
            f->macro = x;
            f->env = E;
            env *CE = new_env(c, E);
            setvar(c, CE, "caller", 6, (jv){.t = V_FN, .u.fn = f});
            jv *args;
            size_t na;
            jj_eval_args(I, x->a->kids, x->a->nkids, E, &args, &na);
            jv r = call_fn(I, jj_eval(I, x->a->a, E), args, na, CE);
            if (r.t != V_NULL && r.t != V_UNDEF) {
                jv s = jj_to_string(c, r);
                jj_put(c, out, s.u.str.s, s.u.str.n);
            }
            break;
        }
        case N_FILTERBLOCK: {
            tok_buf *b = jj_tbuf_open(c);
            exec_block(I, x->body, x->nbody, E, b);
            jv body = v_str(jj_jstrdup(c, b->p ? b->p : "", b->n), b->n);
            jj_tbuf_close(c, b);
            jv s = jj_to_string(c, jj_apply_filter(I, x->a, body, E));
            jj_put(c, out, s.u.str.s, s.u.str.n);
            break;
        }
        case N_BREAK: I->ctl = 1; break;
        case N_CONTINUE: I->ctl = 2; break;
        case N_COMMENT: break;
        default: {
            jv v = jj_eval(I, x, E);
            if (v.t != V_NULL && v.t != V_UNDEF) {
                jv s = jj_to_string(c, v);
                jj_put(c, out, s.u.str.s, s.u.str.n);
            }
        }
        }
    }
    c->rdepth--;
}

int tok_jinja_check(const char *src, ogk_error *e)
{
    jctx c = {.e = e, .serial = 1, .oldest_write = UINT64_MAX};
    c.lim.max_steps = TOK_JINJA_MAX_STEPS;
    c.lim.max_text = TOK_JINJA_MAX_OUTPUT;
    c.lim.max_memory = TOK_JINJA_MAX_MEMORY;
    size_t srcn = strlen(src), bad = tok_utf8_check(src, srcn);
    if (bad != srcn)
        return ogk_fail(e, "template is not valid UTF-8 (byte offset %zu)", bad);
    if (setjmp(c.jb)) {
        tok_arena_free(&c.a);
        return -1;
    }
    jtoks toks = {0};
    jj_lex(&c, src, srcn, &toks);
    jj_parse(&c, &toks);
    tok_arena_free(&c.a);
    return 0;
}

/* the first filter or test in x's tree this engine does not have, or NULL (the tree is at most
 * TOK_JINJA_MAX_DEPTH deep: the parser bounds it) */
static const node *unknown_name(const node *x)
{
    static const char *const tests[] = {"defined", "undefined", "none", "string", "boolean", "callable", "false",
                                        "true", "number", "integer", "iterable", "mapping", "sequence", "odd",
                                        "even", "lower", "upper"};
    if (!x)
        return NULL;
    if (x->type == E_FILTER && !jj_filter_known(x->s, x->n))
        return x;
    if (x->type == E_TEST) {
        size_t i = 0;
        while (i < sizeof tests / sizeof *tests && !(strlen(tests[i]) == x->n && !memcmp(tests[i], x->s, x->n)))
            i++;
        if (i == sizeof tests / sizeof *tests)
            return x;
    }
    const node *u;
    if ((u = unknown_name(x->a)) || (u = unknown_name(x->b)) || (u = unknown_name(x->c)))
        return u;
    for (size_t i = 0; i < x->nkids; i++)
        if ((u = unknown_name(x->kids[i])))
            return u;
    for (size_t i = 0; i < x->nbody; i++)
        if ((u = unknown_name(x->body[i])))
            return u;
    for (size_t i = 0; i < x->nalt; i++)
        if ((u = unknown_name(x->alt[i])))
            return u;
    return NULL;
}

int tok_jinja_lint(const char *src, ogk_error *e)
{
    jctx c = {.e = e, .serial = 1, .oldest_write = UINT64_MAX};
    c.lim.max_steps = TOK_JINJA_MAX_STEPS;
    c.lim.max_text = TOK_JINJA_MAX_OUTPUT;
    c.lim.max_memory = TOK_JINJA_MAX_MEMORY;
    size_t srcn = strlen(src);
    if (tok_utf8_check(src, srcn) != srcn || setjmp(c.jb)) {
        tok_arena_free(&c.a);
        return 0; /* tok_jinja_check's to say */
    }
    jtoks toks = {0};
    jj_lex(&c, src, srcn, &toks);
    nodes prog = jj_parse(&c, &toks);
    const node *u = NULL;
    for (size_t i = 0; i < prog.n && !u; i++)
        u = unknown_name(prog.v[i]);
    int rc = u ? ogk_fail(e, "template line %d, column %d: unsupported %s '%.*s'", u->line, u->col,
                          u->type == E_FILTER ? "filter" : "test", (int)(u->n > 40 ? 40 : u->n), u->s)
               : 0;
    tok_arena_free(&c.a);
    return rc;
}

int tok_chat_template_check(const char *src, const char *origin, ogk_error *e)
{
    ogk_error te;
    if (!tok_jinja_check(src, &te))
        return 0;
    return ogk_fail(e, "%s: the chat template does not parse: %s", origin, te.msg);
}

int tok_config_tools_template_check(const char *cfg, size_t n, const char *origin, ogk_error *e)
{
    json_t *j = json_loadb(cfg, n, 0, NULL), *v;
    const json_t *ct = json_object_get(j, "chat_template");
    size_t i;
    int rc = 0;
    json_array_foreach(ct, i, v)
    {
        const json_t *name = json_object_get(v, "name"), *t = json_object_get(v, "template");
        if (json_is_string(name) && !strcmp(json_string_value(name), "tool_use") && json_is_string(t)) {
            char o[600];
            snprintf(o, sizeof o, "%s (its \"tool_use\" template)", origin);
            rc = tok_chat_template_check(json_string_value(t), o, e);
            break;
        }
    }
    json_decref(j);
    return rc;
}

char *tok_jinja_render(const char *src, const json_t *vars, size_t *len, ogk_error *e)
{
    return tok_jinja_render_with(src, vars, NULL, len, e);
}

char *tok_jinja_render_with(const char *src, const json_t *vars, const tok_jinja_limits *lim, size_t *len,
                            ogk_error *e)
{
    jctx c = {.e = e, .serial = 1, .oldest_write = UINT64_MAX};
    c.lim.max_steps = lim && lim->max_steps ? lim->max_steps : TOK_JINJA_MAX_STEPS;
    c.lim.max_text = lim && lim->max_text ? lim->max_text : TOK_JINJA_MAX_OUTPUT;
    c.lim.max_memory = lim && lim->max_memory ? lim->max_memory : TOK_JINJA_MAX_MEMORY;
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
    jj_lex(&c, src, srcn, &toks);
    nodes prog = jj_parse(&c, &toks);
    env *G = new_env(&c, NULL);
    static const struct {
        const char *name;
        int kind;
    } fns[] = {{"namespace", F_NAMESPACE}, {"range", F_RANGE}, {"raise_exception", F_RAISE}, {"strftime_now", F_STRFTIME}};
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) {
        jfn *f = jj_jalloc(&c, sizeof *f);
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
        json_object_foreach((json_t *)vars, k, v) setvar(&c, G, k, strlen(k), jj_from_json(&c, v, 0));
    }
    interp I = {&c, &out, 0};
    exec_block(&I, prog.v, prog.n, G, &out);
    if (tok_buf_put(&out, "", 0))
        jj_jfail(&c, "out of memory");
    tok_arena_free(&c.a);
    *len = out.n;
    return out.p;
}

