/* lib/tok Jinja internals shared by jinja_value.c (values, arena, budget, strings, JSON), jinja_lex.c,
 * jinja_parse.c, jinja_eval.c, jinja_filters.c and jinja_templates.c; not part of the API (tok.h).
 * All values of one render live in one arena (jctx.a); errors unwind with longjmp (jj_jfail) to
 * tok_jinja_render, which frees everything. */
#ifndef OGK_JINJA_INT_H
#define OGK_JINJA_INT_H

#include <setjmp.h>
#include <stdint.h>
#include <string.h>

#include "tok/tok_int.h"

/* ------------------------------------------------------------------------------------------------ */
/* values                                                                                            */

enum { V_UNDEF, V_NULL, V_BOOL, V_INT, V_FLOAT, V_STR, V_ARR, V_OBJ, V_NS, V_FN, V_KW };

typedef struct jarr jarr;
typedef struct jobj jobj;
typedef struct jfn jfn;
typedef struct {
    uint8_t t;
    uint8_t real; /* V_INT from a JSON real (100.0, 1e16): a float to Python's str(), an integer to the reference */
    uint8_t py;   /* V_UNDEF from a subscript only Python's Jinja answers (d[undefined], d[1], list[none]): Python's
                   * Undefined, whose attributes and items raise (the reference's undefined has undefined ones) */
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
enum { F_NAMESPACE, F_RANGE, F_RAISE, F_STRFTIME, F_METHOD, F_MACRO, F_CALLER };
struct jfn {
    int kind;
    const char *name; /* method name */
    jv self;
    node *macro; /* F_MACRO: the macro; F_CALLER: the call block (its parameters and body) */
    env *env;    /* F_CALLER: the scope of the call block */
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
    tok_jinja_limits lim; /* the budget of this render */
    int pdepth;           /* parser nesting: statements, expressions, and each link of a chain */
    int rdepth;           /* evaluator recursion: expression nodes, blocks, macro calls */
    uint64_t steps;       /* work done: nodes evaluated, loop iterations, elements and bytes touched */
    size_t buf_bytes;     /* text held in open tbufs and the output */
    uint64_t serial;      /* next jobj.born */
    uint64_t oldest_write; /* the oldest jobj written since the innermost open iteration began */
    tbuf *bufs;           /* open tbufs, innermost first */
    int python;           /* the render took a path only Python's Jinja renders (the reference raises there): from
                           * then on the tests that differ answer as Python's (undefined is iterable) */
} jctx;


/* An iteration (a loop body, a macro call) may release what it allocated when it wrote to no object
 * older than itself (its results went to the output, or are copied out): then nothing older points
 * into its memory. iter_begin / iter_end bracket it; iter_end says whether it may rewind. */
typedef struct {
    tok_arena_pos pos;
    uint64_t serial, outer_oldest;
} iter_mark;


static inline jv v_undef(void) { return (jv){.t = V_UNDEF}; }
static inline jv v_py_undef(void) { return (jv){.t = V_UNDEF, .py = 1}; }
static inline jv v_null(void) { return (jv){.t = V_NULL}; }
static inline jv v_bool(int b) { return (jv){.t = V_BOOL, .u.b = !!b}; }
static inline jv v_int(double d) { return (jv){.t = V_INT, .u.num = d}; }
static inline jv v_float(double d) { return (jv){.t = V_FLOAT, .u.num = d}; }
static inline jv v_str(const char *s, size_t n) { return (jv){.t = V_STR, .u.str = {s, n}}; }
static inline jv v_cstr(const char *s) { return v_str(s, strlen(s)); }

typedef struct {
    int indent; /* -1 = none */
    int ensure_ascii, sort_keys;
    const char *item_sep, *key_sep;
    int undef_to_null;
} json_opts;


/* ------------------------------------------------------------------------------------------------ */
/* tokens (jinja_lex.c)                                                                              */

enum { T_TEXT, T_NUM, T_STR, T_IDENT, T_EQUALS, T_LPAREN, T_RPAREN, T_OPEN_STMT, T_CLOSE_STMT, T_OPEN_EXPR,
       T_CLOSE_EXPR, T_LBRACKET, T_RBRACKET, T_LBRACE, T_RBRACE, T_COMMA, T_DOT, T_COLON, T_PIPE, T_ADD, T_MUL,
       T_POW, T_CMP, T_UNARY, T_COMMENT };

typedef struct {
    int type;
    const char *s;
    size_t n;
    int line, col; /* where it begins in the template as written (col: characters, from 1) */
} jtok;

typedef struct {
    jtok *v;
    size_t n, cap;
} jtoks;


/* ------------------------------------------------------------------------------------------------ */
/* the tree (jinja_parse.c)                                                                          */

enum { N_TEXT, N_IF, N_FOR, N_SET, N_MACRO, N_BREAK, N_CONTINUE, N_CALLBLOCK, N_FILTERBLOCK, N_COMMENT,
       E_STR, E_NUM, E_IDENT, E_ARR, E_TUPLE, E_OBJ, E_MEMBER, E_SLICE, E_CALL, E_KWARG, E_UNARY, E_BIN,
       E_FILTER, E_TEST, E_TERNARY, E_SELECT, E_SPREAD, E_KWSPREAD };

struct node {
    int type, line, col;
    const char *s; /* text, identifier, operator, string literal */
    size_t n;
    double num;
    int is_float, computed, negate;
    int uses;          /* macros and call blocks: the special names their body reads (JJ_USES_*) */
    node *a, *b, *c;   /* operands; If: test; For: loopvar, iterable */
    node **kids;       /* list literal items, call args, object keys/values interleaved */
    size_t nkids;
    node **body, **alt; /* statement bodies */
    size_t nbody, nalt;
};


typedef struct {
    node **v;
    size_t n, cap;
} nodes;
enum { JJ_USES_VARARGS = 1, JJ_USES_KWARGS = 2 };

typedef struct {
    jctx *c;
    tok_buf *out;
    int ctl; /* 1 break, 2 continue */
} interp;

/* ---- jinja_value.c ---- */
_Noreturn void jj_jfail(jctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
enum { JJ_STEPS, JJ_TEXT, JJ_MEMORY };
_Noreturn void jj_budget_fail(jctx *c, int what); /* "template exceeds its render budget: ..." */
/* count work; refuse past the step budget */
static inline void jj_charge(jctx *c, uint64_t n)
{
    c->steps += n;
    if (c->steps > c->lim.max_steps)
        jj_budget_fail(c, JJ_STEPS);
}
void *jj_jalloc(jctx *c, size_t n); /* arena memory, counted against the budgets */
tok_buf *jj_tbuf_open(jctx *c);     /* a malloc'd text buffer freed on error too; close innermost first */
void jj_tbuf_close(jctx *c, tok_buf *b);
iter_mark jj_iter_begin(jctx *c);
int jj_iter_end(jctx *c, iter_mark m);
char *jj_jstrdup(jctx *c, const char *s, size_t n);
jv jj_v_arr(jctx *c, size_t n);
jv jj_v_obj(jctx *c, int t);
jv *jj_obj_find(jobj *o, const char *k, size_t kn);
void jj_obj_set(jctx *c, jobj *o, const char *k, size_t kn, jv v);
jv jj_from_json(jctx *c, const json_t *j, int depth);
int jj_truthy(jv v);
const char *jj_type_name(jv v);
void jj_put(jctx *c, tok_buf *b, const char *s, size_t n); /* checked against the text and memory budgets */
void jj_puts_(jctx *c, tok_buf *b, const char *s);
extern const json_opts jj_JSON_DEFAULT, jj_JSON_PRINT;
jv jj_json_value(jctx *c, jv v, const json_opts *o); /* tojson */
jv jj_to_string(jctx *c, jv v);                      /* the text a value renders as */
jv jj_py_str(jctx *c, jv v); /* Python's str(): dicts, lists, None, True as Python's Jinja renders them */
jv jj_raw_string(jctx *c, jv v);                     /* String(value), which ~ and string + use */
jv jj_concat(jctx *c, jv a, jv b);
size_t jj_utf16_len(const char *s, size_t n);
int jj_str_eq(jv v, const char *s);
jv jj_js_trim(jv s, int left, int right);
jv jj_case_map(jctx *c, jv s, int upper);
int jj_ascii_only(jv s);
jv jj_str_replace(jctx *c, jv s, jv old, jv new, double count);
jv jj_kwarg(jv *args, size_t nargs, const char *name); /* a keyword argument, or undefined */
size_t jj_npos(jv *args, size_t nargs);                /* the number of positional arguments */
int jj_loose_eq(jv a, jv b);
int jj_strict_eq(jv a, jv b);
jv jj_get_attr_path(jv item, const char *path, size_t n);
int jj_compare_values(jctx *c, jv a, jv b, int case_sensitive);

/* ---- jinja_lex.c ---- */
void jj_lex(jctx *c, const char *src, size_t len, jtoks *out);
int jj_js_ws_at(const char *s, size_t n, size_t i, size_t *k); /* JS whitespace at s[i] (*k bytes) */
int jj_is_word(char ch);

/* ---- jinja_parse.c ---- */
nodes jj_parse(jctx *c, const jtoks *t); /* the template's top-level statements */
int jj_filter_known(const char *name, size_t n); /* a filter jj_apply_filter has (on some value) */

/* ---- jinja_eval.c, jinja_filters.c ---- */
jv jj_eval(interp *I, node *x, env *E);
void jj_eval_args(interp *I, node **kids, size_t n, env *E, jv **out, size_t *nout);
int jj_run_test(interp *I, const char *name, size_t n, jv v, int line);
jv jj_call_method(interp *I, jfn *f, jv *args, size_t nargs);
jv jj_apply_filter(interp *I, node *x, jv v, env *E);

#endif
