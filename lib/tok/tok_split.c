/* Normalizers (NFC..NFKD, Replace, Prepend, Strip, Sequence) and pre-tokenizers (Split, ByteLevel,
 * Metaspace, Digits, Whitespace, WhitespaceSplit, Sequence): text to the pieces BPE sees. */
#define _GNU_SOURCE
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "tok/tok_impl.h"

int tk_normalize_text(tok *t, const tnorm *nz, const char *s, size_t len, tok_buf *out, size_t max)
{
    out->n = 0;
    int rc = -1;
    switch (nz->type) {
    case N_NFC:
    case N_NFD:
    case N_NFKC:
    case N_NFKD: {
        static const tok_nf forms[] = {TOK_NFC, TOK_NFD, TOK_NFKC, TOK_NFKD};
        size_t on;
        char *o = tok_normalize(forms[nz->type], s, len, &on);
        if (!o)
            return -1;
        rc = tok_buf_put(out, o, on);
        free(o);
        break;
    }
    case N_REPLACE: return tk_pat_replace(t, &nz->pat, s, len, nz->str, nz->strn, out, max);
    case N_PRECOMPILED: rc = tk_charsmap_apply(nz, s, len, out); break;
    case N_PREPEND:
        /* nothing to an empty text, as the Rust tokenizers do (the JS port prepends anyway; a section is
         * only empty here when an earlier normalizer emptied it, as SentencePiece's extra-space removal
         * does to a run of spaces: tok_spm_json) */
        rc = len && (tok_buf_put(out, nz->str, nz->strn) || tok_buf_put(out, s, len)) ? -1 : 0;
        break;
    case N_STRIP: {
        size_t a = 0, b = len;
        uint32_t cp;
        while (nz->left && a < b) {
            int k = tok_utf8_dec((const unsigned char *)s + a, &cp);
            if (!tok_js_space(cp))
                break;
            a += (size_t)k;
        }
        while (nz->right && b > a) {
            size_t q = b - 1;
            while (q > a && ((unsigned char)s[q] & 0xC0) == 0x80)
                q--;
            tok_utf8_dec((const unsigned char *)s + q, &cp);
            if (!tok_js_space(cp))
                break;
            b = q;
        }
        return tok_buf_put(out, s + a, b - a);
    }
    case N_SEQ: {
        tok_buf cur = {0}, nxt = {0};
        if (tok_buf_put(&cur, s, len))
            return -1;
        for (int i = 0; i < nz->nkids; i++) {
            if ((rc = tk_normalize_text(t, &nz->kids[i], cur.p, cur.n, &nxt, max))) {
                free(cur.p);
                free(nxt.p);
                return rc;
            }
            tok_buf sw = cur;
            cur = nxt;
            nxt = sw;
        }
        rc = tok_buf_put(out, cur.p, cur.n);
        free(cur.p);
        free(nxt.p);
        return rc;
    }
    }
    return rc ? rc : out->n > max ? TK_GREW : 0;
}


/* ------------------------------------------------------------------------------------------------ */
/* pre-tokenizers: lists of spans into a work buffer                                                 */

int tk_spans_push(spans *s, uint32_t off, uint32_t len)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        span *v = realloc(s->v, cap * sizeof *v);
        if (!v)
            return -1;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n].off = off;
    s->v[s->n].len = len;
    s->n++;
    return 0;
}

/* JS regex_split / match semantics: mode 0 = Isolated (gaps and non-empty matches), 1 = matches only,
 * 2 = gaps only (Removed). After an empty match the search resumes one character later.
 * regex_pieces_some goes on from *prev / *start (0 / 0 at first) and stops after about `most` pieces:
 * 1 when there are more, 0 when done, -1 on a match error. */
int tk_regex_pieces_some(tok *t, pcre2_code *re, const char *w, span in, int mode, spans *out, size_t *prev,
                             size_t *start, size_t most)
{
    const char *s = w + in.off;
    size_t n = in.len, a, b, n0 = out->n;
    int rc;
    while (out->n - n0 < most && (rc = tk_next_match(t, re, s, n, start, &a, &b)) > 0) {
        if (mode != 1 && *prev < a && tk_spans_push(out, in.off + (uint32_t)*prev, (uint32_t)(a - *prev)))
            return -1;
        if (mode != 2 && b > a && tk_spans_push(out, in.off + (uint32_t)a, (uint32_t)(b - a)))
            return -1;
        *prev = b;
    }
    if (out->n - n0 >= most)
        return 1;
    if (rc < 0)
        return -1;
    if (mode != 1 && *prev < n && tk_spans_push(out, in.off + (uint32_t)*prev, (uint32_t)(n - *prev)))
        return -1;
    *prev = n;
    return 0;
}

static int regex_pieces(tok *t, pcre2_code *re, const char *w, span in, int mode, spans *out)
{
    size_t prev = 0, start = 0;
    return tk_regex_pieces_some(t, re, w, in, mode, out, &prev, &start, SIZE_MAX) < 0 ? -1 : 0;
}

/* the pre-tokenizer p over the spans in (a Sequence from its kid number `from` on) */
int tk_pretokenize_from(tok *t, const tpre *p, tok_buf *w, spans *in, spans *out, int section_index, int from)
{
    out->n = 0;
    if (p->type == P_SEQ) {
        spans a = {0}, b = {0};
        int rc = 0;
        for (size_t i = 0; i < in->n && !rc; i++)
            rc = tk_spans_push(&a, in->v[i].off, in->v[i].len);
        for (int k = from; k < p->nkids && !rc; k++) {
            rc = tk_pretokenize_from(t, &p->kids[k], w, &a, &b, section_index, 0);
            spans sw = a;
            a = b;
            b = sw;
        }
        for (size_t i = 0; i < a.n && !rc; i++)
            rc = tk_spans_push(out, a.v[i].off, a.v[i].len);
        free(a.v);
        free(b.v);
        return rc;
    }
    for (size_t i = 0; i < in->n; i++) {
        span sp = in->v[i];
        switch (p->type) {
        case P_SPLIT:
            if (p->pat.is_regex) {
                if (regex_pieces(t, p->pat.re, w->p, sp, p->invert ? 1 : p->behavior == B_REMOVED ? 2 : 0, out))
                    return -1;
            } else {
                /* String pattern: invert keeps only the matches; otherwise (Isolated, and Removed — the
                 * reference's split keeps its captured delimiter) gaps and matches */
                const char *s = w->p + sp.off;
                size_t k = 0, prev = 0;
                while (p->pat.litn && k + p->pat.litn <= sp.len) {
                    const char *hit = memmem(s + k, sp.len - k, p->pat.lit, p->pat.litn);
                    if (!hit)
                        break;
                    size_t a = (size_t)(hit - s);
                    if (!p->invert && prev < a && tk_spans_push(out, sp.off + (uint32_t)prev, (uint32_t)(a - prev)))
                        return -1;
                    if (tk_spans_push(out, sp.off + (uint32_t)a, (uint32_t)p->pat.litn))
                        return -1;
                    k = prev = a + p->pat.litn;
                }
                if (!p->invert && prev < sp.len && tk_spans_push(out, sp.off + (uint32_t)prev, sp.len - (uint32_t)prev))
                    return -1;
            }
            break;
        case P_BYTELEVEL: {
            spans words = {0};
            int rc = 0;
            uint32_t base = sp.off;
            if (p->add_prefix_space && !(sp.len && w->p[sp.off] == ' ')) {
                /* prefix a space: copy " " + piece to the end of the work buffer */
                base = (uint32_t)w->n;
                rc = tok_buf_reserve(w, sp.len + 1) || tok_buf_put(w, " ", 1) || tok_buf_put(w, w->p + sp.off, sp.len);
                sp.off = base;
                sp.len++;
            }
            if (!rc && p->use_regex)
                rc = regex_pieces(t, p->re, w->p, sp, 1, &words);
            else if (!rc)
                rc = tk_spans_push(&words, sp.off, sp.len);
            for (size_t j = 0; j < words.n && !rc; j++) {
                uint32_t o = (uint32_t)w->n;
                if ((rc = tok_buf_reserve(w, (size_t)words.v[j].len * 2)) != 0)
                    break;
                const unsigned char *src = (const unsigned char *)w->p + words.v[j].off;
                char *dst = w->p + w->n;
                for (uint32_t q = 0; q < words.v[j].len; q++) {
                    unsigned c = src[q];
                    dst[0] = t->bl_enc[c][0];
                    if (t->bl_encn[c] == 2) {
                        dst[1] = t->bl_enc[c][1];
                        dst += 2;
                    } else {
                        dst += 1;
                    }
                }
                w->n = (size_t)(dst - w->p);
                w->p[w->n] = 0;
                rc = tk_spans_push(out, o, (uint32_t)w->n - o);
            }
            free(words.v);
            if (rc)
                return -1;
            break;
        }
        case P_METASPACE: {
            uint32_t o = (uint32_t)w->n;
            const char *s = w->p + sp.off;
            int starts = sp.len >= p->repln && !memcmp(s, p->repl, p->repln);
            int pre = !starts && !(sp.len && s[0] == ' ') && (p->prepend == 1 || (p->prepend == 2 && section_index == 0));
            /* note: a leading ' ' becomes the replacement below, so it already "starts with" it */
            tok_buf tmp = {0};
            int rc = 0;
            if (pre)
                rc = tok_buf_put(&tmp, p->repl, p->repln);
            for (uint32_t q = 0; q < sp.len && !rc; q++)
                rc = s[q] == ' ' ? tok_buf_put(&tmp, p->repl, p->repln) : tok_buf_put(&tmp, s + q, 1);
            if (!rc)
                rc = tok_buf_put(w, tmp.p, tmp.n);
            free(tmp.p);
            if (rc || tk_spans_push(out, o, (uint32_t)w->n - o))
                return -1;
            break;
        }
        case P_DIGITS:
        case P_WHITESPACE:
        case P_WSSPLIT:
            if (regex_pieces(t, p->re, w->p, sp, 1, out))
                return -1;
            break;
        }
    }
    return 0;
}

int tk_pretokenize(tok *t, const tpre *p, tok_buf *w, spans *in, spans *out, int section_index)
{
    return tk_pretokenize_from(t, p, w, in, out, section_index, 0);
}

/* A pre-tokenizer whose first step is a regex Split cuts the text into pieces that the later steps treat
 * one by one: those pieces can be produced a window at a time (encode stops early on a long text). */
const tpre *tk_first_regex_split(const tpre *p)
{
    if (p && p->type == P_SEQ && p->nkids > 0)
        p = &p->kids[0];
    return p && p->type == P_SPLIT && p->pat.is_regex ? p : NULL;
}

