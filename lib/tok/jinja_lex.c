/* Jinja lexer: @huggingface/jinja's preprocessing (trim_blocks, lstrip_blocks, one trailing newline
 * dropped) and tokens, with the same whitespace control and error cases. Iterative: input of any shape
 * costs time linear in its length, never stack. */
#include <stdlib.h>
#include <string.h>

#include "tok/jinja_int.h"

/* a position in the template as written: line, and column in characters (both from 1) */
typedef struct {
    int line, col;
} jpos;

static void tpush(jctx *c, jtoks *t, int type, const char *s, size_t n, jpos at)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 256;
        jtok *nv = jj_jalloc(c, cap * sizeof *nv);
        if (t->n)
            memcpy(nv, t->v, t->n * sizeof *nv);
        t->v = nv;
        t->cap = cap;
    }
    t->v[t->n++] = (jtok){type, s, n, at.line, at.col};
}

int jj_js_ws_at(const char *s, size_t n, size_t i, size_t *k)
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

/* the source after lstrip_blocks and trim_blocks, and *lines: the template line and column of each of its
 * bytes (and of its end), so that messages name the place in the template as written, not in the text left
 * once lstrip_blocks and trim_blocks have taken white space around its blocks */
static char *preprocess(jctx *c, const char *src, size_t *len, jpos **lines)
{
    size_t n = *len;
    if (n && src[n - 1] == '\n')
        n--;
    /* lstrip_blocks: /^[ \t]*({[#%-])/gm -> "$1" */
    char *a = jj_jalloc(c, n + 1);
    jpos *la = jj_jalloc(c, (n + 1) * sizeof *la);
    int line = 1;
    size_t an = 0;
    for (size_t i = 0; i < n;) {
        int col = 1;
        if (i == 0 || src[i - 1] == '\n') {
            size_t j = i;
            while (j < n && (src[j] == ' ' || src[j] == '\t'))
                j++;
            if (j + 1 < n && src[j] == '{' && (src[j + 1] == '#' || src[j + 1] == '%' || src[j + 1] == '-'))
                col += (int)(j - i), i = j; /* spaces and tabs: a byte each */
        }
        do {
            la[an] = (jpos){line, col}, a[an++] = src[i++];
            if (i < n && ((unsigned char)src[i] & 0xC0) != 0x80)
                col++; /* a UTF-8 continuation byte stays in its character's column */
        } while (i < n && src[i - 1] != '\n');
        line++; /* the copy stopped after a newline (or at the end) */
    }
    /* trim_blocks: /([#%-]})\n/g -> "$1" */
    char *b = jj_jalloc(c, an + 1);
    jpos *lb = jj_jalloc(c, (an + 1) * sizeof *lb);
    size_t bn = 0;
    for (size_t i = 0; i < an; i++) {
        lb[bn] = la[i], b[bn++] = a[i];
        if (a[i] == '}' && i > 0 && (a[i - 1] == '#' || a[i - 1] == '%' || a[i - 1] == '-') && i + 1 < an &&
            a[i + 1] == '\n') {
            /* the regex matches left to right without overlap: "-}" consumed here */
            i++;
        }
    }
    b[bn] = 0;
    lb[bn] = !bn ? (jpos){1, 1} : b[bn - 1] == '\n' ? (jpos){lb[bn - 1].line + 1, 1} : (jpos){lb[bn - 1].line, lb[bn - 1].col + 1};
    *len = bn;
    *lines = lb;
    return b;
}

int jj_is_word(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_'; }
static int is_digit(char ch) { return ch >= '0' && ch <= '9'; }

void jj_lex(jctx *c, const char *src0, size_t len0, jtoks *out)
{
    size_t n = len0;
    jpos *lines;
    const char *s = preprocess(c, src0, &n, &lines);
#define HERE (lines[i < n ? i : n]) /* the template line and column at the current position */
#define AT "template line %d, column %d: "
#define POS HERE.line, HERE.col
    size_t i = 0;
    int curly = 0;
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
                i++;
            }
            if (i > st) {
                tpush(c, out, T_TEXT, s + st, i - st, lines[st]);
                continue;
            }
        }
        if (s[i] == '{' && i + 1 < n && s[i + 1] == '#') {
            jpos open = HERE;
            i += 2;
            int strip_before = i < n && s[i] == '-';
            if (strip_before)
                i++;
            size_t st = i;
            while (!(i + 1 < n && s[i] == '#' && s[i + 1] == '}')) {
                if (i + 2 >= n)
                    jj_jfail(c, AT "Missing end of comment tag (the comment begun here is not closed)", open.line, open.col);
                i++;
            }
            size_t cn = i - st;
            int strip_after = cn && s[st + cn - 1] == '-';
            if (strip_before && LAST == T_TEXT) {
                trim_end_tok(&out->v[out->n - 1]);
                if (!out->v[out->n - 1].n)
                    out->n--;
            }
            tpush(c, out, T_COMMENT, s + st, cn - (size_t)strip_after, open);
            i += 2;
            size_t k;
            if (strip_after)
                while (jj_js_ws_at(s, n, i, &k))
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
            tpush(c, out, stmt ? T_OPEN_STMT : T_OPEN_EXPR, s + i, 2, HERE);
            if (!stmt)
                curly = 0;
            i += 3;
            continue;
        }
        {
            size_t k;
            while (jj_js_ws_at(s, n, i, &k)) {
                i += k;
            }
        }
        if (i >= n)
            break;
        if (n - i >= 3 && (!memcmp(s + i, "-%}", 3) || !memcmp(s + i, "-}}", 3))) {
            tpush(c, out, s[i + 1] == '%' ? T_CLOSE_STMT : T_CLOSE_EXPR, s + i + 1, 2, HERE);
            i += 3;
            size_t k;
            while (jj_js_ws_at(s, n, i, &k)) {
                i += k;
            }
            continue;
        }
        char ch = s[i];
        if (ch == '-' || ch == '+') {
            lt = LAST;
            if (lt == T_TEXT || lt == -1)
                jj_jfail(c, AT "Unexpected character: %c", POS, ch);
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
                tpush(c, out, nd ? T_NUM : T_UNARY, s + st, i - st, lines[st]);
                continue;
            }
        }
        int matched = 0;
        for (size_t k = 0; k < sizeof table / sizeof table[0]; k++) {
            size_t L = strlen(table[k].seq);
            if (table[k].type == T_CLOSE_EXPR && curly > 0)
                continue;
            if (n - i >= L && !memcmp(s + i, table[k].seq, L)) {
                tpush(c, out, table[k].type, s + i, L, HERE);
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
            jpos open = HERE;
            i++;
            tok_buf b = {0};
            while (1) {
                if (i >= n) {
                    free(b.p);
                    jj_jfail(c, AT "Unexpected end of input (the string begun here is not closed)", open.line, open.col);
                }
                if (s[i] == ch)
                    break;
                if (s[i] == '\\') {
                    if (++i >= n) {
                        free(b.p);
                        jj_jfail(c, AT "Unexpected end of input (the string begun here is not closed)", open.line, open.col);
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
                                jj_jfail(c, AT "Invalid hexadecimal escape sequence", POS);
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
                        jj_jfail(c, AT "Unexpected escaped character: %c", POS, e);
                    }
                    tok_buf_put(&b, m, 1);
                    continue;
                }
                tok_buf_put(&b, s + i, 1);
                i++;
                if (i >= n) {
                    free(b.p);
                    jj_jfail(c, AT "Unexpected end of input (the string begun here is not closed)", open.line, open.col);
                }
            }
            i++;
            tpush(c, out, T_STR, jj_jstrdup(c, b.p ? b.p : "", b.n), b.n, open);
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
            tpush(c, out, T_NUM, s + st, i - st, lines[st]);
            continue;
        }
        if (jj_is_word(ch)) {
            size_t st = i;
            while (i < n && jj_is_word(s[i]))
                i++;
            tpush(c, out, T_IDENT, s + st, i - st, lines[st]);
            continue;
        }
        uint32_t cp;
        int k = tok_utf8_dec((const unsigned char *)s + i, &cp);
        jj_jfail(c, AT "Unexpected character: %.*s", POS, k, s + i);
    }
#undef LAST
#undef POS
#undef AT
#undef HERE
}
