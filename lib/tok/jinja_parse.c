/* Jinja parser: tokens to a tree with @huggingface/jinja's operator precedence. Every recursion and
 * every left-deep chain counts against TOK_JINJA_MAX_DEPTH (penter), so the tree is never deeper than
 * that and nothing that walks it can overflow the stack. */
#include <stdlib.h>
#include <string.h>

#include "tok/jinja_int.h"

typedef struct {
    jctx *c;
    jtok *t;
    size_t n, i;
    jtok *opener; /* the '{%' of the innermost statement being parsed: what a missing end tag leaves open */
} parser;


static void npush(jctx *c, nodes *l, node *x)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        node **nv = jj_jalloc(c, cap * sizeof *nv);
        if (l->n)
            memcpy(nv, l->v, l->n * sizeof *nv);
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = x;
}

static node *mk(parser *p, int type)
{
    node *x = jj_jalloc(p->c, sizeof *x);
    memset(x, 0, sizeof *x);
    x->type = type;
    const jtok *at = p->i < p->n ? &p->t[p->i] : p->n ? &p->t[p->n - 1] : NULL;
    x->line = at ? at->line : 1;
    x->col = at ? at->col : 1;
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
    if (p->i < p->n)
        jj_jfail(p->c, "template line %d, column %d: %s at '%.*s'", p->t[p->i].line, p->t[p->i].col, what,
                 (int)(p->t[p->i].n > 40 ? 40 : p->t[p->i].n), p->t[p->i].s);
    const jtok *last = p->n ? &p->t[p->n - 1] : NULL;
    jj_jfail(p->c, "template line %d, column %d: %s at end of template", last ? last->line : 1, last ? last->col : 1, what);
}

/* One more level of nesting: a statement, an expression, or one link of a chain of operators, filters,
 * tests, member accesses or calls (a chain of n links is an n-deep tree). Bounding this bounds every
 * recursion over the tree: the parser's, the evaluator's and the printer's. */
static void penter(parser *p)
{
    if (++p->c->pdepth > TOK_JINJA_MAX_DEPTH) {
        const jtok *at = p->i < p->n ? &p->t[p->i] : p->n ? &p->t[p->n - 1] : NULL;
        jj_jfail(p->c, "template line %d, column %d: nested too deeply (more than %d levels of statements, expressions "
                       "and chained operators)", at ? at->line : 1, at ? at->col : 1, TOK_JINJA_MAX_DEPTH);
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
        x->s = jj_jstrdup(p->c, b.p ? b.p : "", b.n);
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
        const jtok *nt = p->i < p->n ? &p->t[p->i] : NULL; /* its name: where messages place the filter */
        node *f = parse_primary(p);
        if (f->type != E_IDENT)
            perr(p, "expected a filter name");
        node *fx = mk(p, E_FILTER);
        fx->line = nt->line, fx->col = nt->col;
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
        const jtok *nt = p->i < p->n ? &p->t[p->i] : NULL;
        node *t = parse_primary(p);
        if (t->type != E_IDENT)
            perr(p, "expected a test name");
        node *tx = mk(p, E_TEST);
        tx->line = nt->line, tx->col = nt->col;
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
            const jtok *o = p->opener;
            if (!o || o + 1 >= p->t + p->n) /* not inside a statement: cannot happen, as e1 comes from one */
                perr(p, msg);
            jj_jfail(p->c, "template line %d, column %d: {%% %.*s %%} is not closed: %s at end of template", o->line,
                     o->col, (int)(o[1].n > 40 ? 40 : o[1].n), o[1].s, msg);
        }
        npush(p->c, l, parse_any(p));
    }
}

/* x's body up to {% END %}, that tag included (its closing '%}' left to the caller) */
static void parse_block(parser *p, node *x, const char *end)
{
    nodes body = {0};
    parse_body(p, &body, end, NULL, NULL);
    x->body = body.v;
    x->nbody = body.n;
    p->i++;
    expect_ident(p, end);
}

/* whether a name is read anywhere in a tree (a macro's body: varargs, kwargs) */
static int reads(const node *x, const char *name)
{
    if (!x)
        return 0;
    if (x->type == E_IDENT && x->n == strlen(name) && !memcmp(x->s, name, x->n))
        return 1;
    if (reads(x->a, name) || reads(x->b, name) || reads(x->c, name))
        return 1;
    for (size_t i = 0; i < x->nkids; i++)
        if (reads(x->kids[i], name))
            return 1;
    for (size_t i = 0; i < x->nbody; i++)
        if (reads(x->body[i], name))
            return 1;
    for (size_t i = 0; i < x->nalt; i++)
        if (reads(x->alt[i], name))
            return 1;
    return 0;
}

static void parameters(parser *p, node *x)
{
    x->kids = parse_args(p, &x->nkids);
    for (size_t k = 0; k < x->nkids; k++)
        if (x->kids[k]->type != E_IDENT && x->kids[k]->type != E_KWARG)
            perr(p, "expected a parameter name");
}

/* the special names a macro or call block's body reads (outside its parameters' names) */
static void special_names(node *x)
{
    static const char *const names[] = {"varargs", "kwargs"};
    for (int k = 0; k < 2; k++) {
        int declared = 0;
        for (size_t i = 0; i < x->nkids; i++)
            declared |= x->kids[i]->n == strlen(names[k]) && !memcmp(x->kids[i]->s, names[k], x->kids[i]->n);
        for (size_t i = 0; !declared && i < x->nbody; i++)
            if (reads(x->body[i], names[k])) {
                x->uses |= 1 << k;
                break;
            }
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
    jtok *open = expect(p, T_OPEN_STMT, "expected '{%'"), *outer = p->opener;
    if (!at(p, T_IDENT))
        perr(p, "expected a statement name");
    jtok *name = &p->t[p->i];
    p->opener = open;
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
            parse_block(p, x, "endset");
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
        parameters(p, x);
        expect(p, T_CLOSE_STMT, "expected '%}'");
        parse_block(p, x, "endmacro");
        expect(p, T_CLOSE_STMT, "expected '%}'");
        special_names(x);
    } else if (IS("call")) {
        /* {% call(params) macro(args) %}body{% endcall %}: the macro runs with caller() rendering body */
        p->i++;
        x = mk(p, N_CALLBLOCK);
        if (at(p, T_LPAREN))
            parameters(p, x);
        node *callee = parse_primary(p);
        if (callee->type != E_IDENT || !at(p, T_LPAREN))
            perr(p, "expected a macro name after 'call', then its arguments");
        x->a = mk(p, E_CALL);
        x->a->a = callee;
        x->a->kids = parse_args(p, &x->a->nkids);
        expect(p, T_CLOSE_STMT, "expected '%}'");
        parse_block(p, x, "endcall");
        expect(p, T_CLOSE_STMT, "expected '%}'");
        special_names(x);
    } else if (IS("filter")) {
        /* {% filter name(args) %}body{% endfilter %}: the body's text through one filter */
        p->i++;
        const jtok *nt = p->i < p->n ? &p->t[p->i] : NULL;
        node *f = parse_primary(p);
        if (f->type != E_IDENT)
            perr(p, "expected a filter name");
        x = mk(p, N_FILTERBLOCK);
        x->a = mk(p, E_FILTER);
        x->a->line = nt->line, x->a->col = nt->col;
        x->a->s = f->s;
        x->a->n = f->n;
        if (at(p, T_LPAREN)) {
            x->a->computed = 1;
            x->a->kids = parse_args(p, &x->a->nkids);
        }
        expect(p, T_CLOSE_STMT, "expected '%}'");
        parse_block(p, x, "endfilter");
        expect(p, T_CLOSE_STMT, "expected '%}'");
    } else if (IS("generation")) {
        /* {% generation %}...{% endgeneration %} marks the assistant's tokens for training masks
         * (transformers' return_assistant_tokens_mask); rendering keeps its body as is: an if on 1 */
        p->i++;
        expect(p, T_CLOSE_STMT, "expected '%}'");
        x = mk(p, N_IF);
        x->a = mk(p, E_NUM);
        x->a->num = 1;
        parse_block(p, x, "endgeneration");
        expect(p, T_CLOSE_STMT, "expected '%}'");
    } else if (IS("break") || IS("continue")) {
        x = mk(p, IS("break") ? N_BREAK : N_CONTINUE);
        p->i++;
        expect(p, T_CLOSE_STMT, "expected '%}'");
    } else if ((name->n > 3 && !memcmp(name->s, "end", 3)) || IS("elif") || IS("else")) {
        /* an end tag its block does not take: most often a block inside it left open */
        if (outer)
            jj_jfail(p->c, "template line %d, column %d: unexpected {%% %.*s %%}: the {%% %.*s %%} at line %d, column %d "
                           "is not closed before it", open->line, open->col, (int)(name->n > 40 ? 40 : name->n), name->s,
                     (int)(outer[1].n > 40 ? 40 : outer[1].n), outer[1].s, outer->line, outer->col);
        jj_jfail(p->c, "template line %d, column %d: unexpected {%% %.*s %%}: no block is open", open->line, open->col,
                 (int)(name->n > 40 ? 40 : name->n), name->s);
    } else {
        jj_jfail(p->c, "template line %d, column %d: unsupported statement '{%% %.*s'", open->line, open->col,
                 (int)(name->n > 40 ? 40 : name->n), name->s);
    }
#undef IS
    p->opener = outer;
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


nodes jj_parse(jctx *c, const jtoks *t)
{
    parser p = {c, t->v, t->n, 0, NULL};
    nodes prog = {0};
    while (p.i < p.n)
        npush(c, &prog, parse_any(&p));
    return prog;
}
