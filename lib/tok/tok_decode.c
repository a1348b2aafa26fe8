/* Decoding: decoders (ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, Sequence), clean-up, and
 * the streaming decoder. */
#define _GNU_SOURCE
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "tok/tok_impl.h"

/* ------------------------------------------------------------------------------------------------ */
/* decode                                                                                            */

typedef struct {
    char **s;
    size_t *n;
    size_t cnt, cap;
} strlist;

static int sl_push(strlist *l, const char *s, size_t n)
{
    if (l->cnt == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        char **a = realloc(l->s, cap * sizeof *a);
        if (!a)
            return -1;
        l->s = a;
        size_t *b = realloc(l->n, cap * sizeof *b);
        if (!b)
            return -1;
        l->n = b;
        l->cap = cap;
    }
    char *c = malloc(n + 1);
    if (!c)
        return -1;
    if (n)
        memcpy(c, s, n);
    c[n] = 0;
    l->s[l->cnt] = c;
    l->n[l->cnt++] = n;
    return 0;
}

static void sl_free(strlist *l)
{
    for (size_t i = 0; i < l->cnt; i++)
        free(l->s[i]);
    free(l->s);
    free(l->n);
    memset(l, 0, sizeof *l);
}

static int is_added_content(const tok *t, const char *s, size_t n)
{
    for (int i = 0; i < t->nadded; i++)
        if (t->added[i].n == n && !memcmp(t->added[i].s, s, n))
            return 1;
    return 0;
}

static int bytelevel_flush(const tok *t, tok_buf *cur, strlist *out, int raw)
{
    tok_buf bytes = {0};
    const unsigned char *p = (const unsigned char *)cur->p;
    int rc = 0;
    for (size_t i = 0; i < cur->n && !rc;) {
        uint32_t cp;
        i += (size_t)tok_utf8_dec(p + i, &cp);
        unsigned char b = cp < 0x144 && t->bl_dec[cp] >= 0 ? (unsigned char)t->bl_dec[cp] : 0;
        rc = tok_buf_put(&bytes, &b, 1);
    }
    char *o = NULL;
    size_t on = 0, oc = 0;
    if (!rc && raw)
        rc = sl_push(out, bytes.p ? bytes.p : "", bytes.n);
    else if (!rc)
        rc = tok_utf8_sanitize((unsigned char *)bytes.p, bytes.n, &o, &on, &oc);
    if (!rc && !raw)
        rc = sl_push(out, o, on);
    free(o);
    free(bytes.p);
    cur->n = 0;
    return rc;
}

/* how: 0 for a text; for a token's bytes (tok_piece_bytes) DC_RAW keeps bytes that are not UTF-8 as they
 * are, DC_MID leaves out the start-of-text rules (Metaspace's first space, Strip) */
enum { DC_RAW = 1, DC_MID = 2 };
static int decode_chain(tok *t, const tdec *d, strlist *in, strlist *out, int how, size_t max)
{
    int rc = 0, raw = how & DC_RAW, mid = how & DC_MID;
    switch (d->type) {
    case D_SEQ: {
        strlist cur = *in, nxt = {0};
        memset(in, 0, sizeof *in);
        for (int k = 0; k < d->nkids && !rc; k++) {
            rc = decode_chain(t, &d->kids[k], &cur, &nxt, how, max);
            sl_free(&cur);
            cur = nxt;
            memset(&nxt, 0, sizeof nxt);
        }
        *out = cur;
        return rc;
    }
    case D_BYTELEVEL: {
        tok_buf cur = {0};
        for (size_t i = 0; i < in->cnt && !rc; i++) {
            if (is_added_content(t, in->s[i], in->n[i])) {
                if (cur.n)
                    rc = bytelevel_flush(t, &cur, out, raw);
                if (!rc)
                    rc = sl_push(out, in->s[i], in->n[i]);
            } else {
                rc = tok_buf_put(&cur, in->s[i], in->n[i]);
            }
        }
        if (!rc && cur.n)
            rc = bytelevel_flush(t, &cur, out, raw);
        free(cur.p);
        return rc;
    }
    case D_METASPACE: {
        tpat p = {.lit = d->str, .litn = d->strn};
        for (size_t i = 0, sum = 0; i < in->cnt && !rc; i++) {
            tok_buf b = {0};
            rc = tk_pat_replace(t, &p, in->s[i], in->n[i], " ", 1, &b, max - sum);
            sum += b.n;
            size_t skip = (!mid && i == 0 && b.n && b.p[0] == ' ') ? 1 : 0;
            if (!rc)
                rc = sl_push(out, b.p ? b.p + skip : "", b.n - skip);
            free(b.p);
        }
        return rc;
    }
    case D_REPLACE:
        for (size_t i = 0, sum = 0; i < in->cnt && !rc; i++) {
            tok_buf b = {0};
            rc = tk_pat_replace(t, &d->pat, in->s[i], in->n[i], d->str, d->strn, &b, max - sum);
            sum += b.n;
            if (!rc)
                rc = sl_push(out, b.p ? b.p : "", b.n);
            free(b.p);
        }
        return rc;
    case D_FUSE: {
        tok_buf b = {0};
        for (size_t i = 0; i < in->cnt && !rc; i++)
            rc = tok_buf_put(&b, in->s[i], in->n[i]);
        if (!rc)
            rc = sl_push(out, b.p ? b.p : "", b.n);
        free(b.p);
        return rc;
    }
    case D_BYTEFALLBACK: {
        tok_buf bytes = {0};
        for (size_t i = 0; i <= in->cnt && !rc; i++) {
            int byte = -1;
            if (i < in->cnt && in->n[i] == 6 && !memcmp(in->s[i], "<0x", 3) && in->s[i][5] == '>') {
                /* parseInt(s.slice(3, 5), 16): leading hex digits */
                int h1 = in->s[i][3], h2 = in->s[i][4];
                int v1 = isxdigit(h1) ? (isdigit(h1) ? h1 - '0' : (h1 | 0x20) - 'a' + 10) : -1;
                int v2 = isxdigit(h2) ? (isdigit(h2) ? h2 - '0' : (h2 | 0x20) - 'a' + 10) : -1;
                if (v1 >= 0)
                    byte = v2 >= 0 ? v1 * 16 + v2 : v1;
            }
            if (byte >= 0) {
                unsigned char b = (unsigned char)byte;
                rc = tok_buf_put(&bytes, &b, 1);
                continue;
            }
            if (bytes.n && raw) {
                rc = sl_push(out, bytes.p, bytes.n);
                bytes.n = 0;
            } else if (bytes.n) {
                char *o = NULL;
                size_t on = 0, oc = 0;
                rc = tok_utf8_sanitize((unsigned char *)bytes.p, bytes.n, &o, &on, &oc);
                size_t skip = on >= 3 && !memcmp(o, "\xEF\xBB\xBF", 3) ? 3 : 0; /* TextDecoder drops a BOM */
                if (!rc)
                    rc = sl_push(out, o + skip, on - skip);
                free(o);
                bytes.n = 0;
            }
            if (i < in->cnt && !rc)
                rc = sl_push(out, in->s[i], in->n[i]);
        }
        free(bytes.p);
        return rc;
    }
    case D_STRIP:
        for (size_t i = 0; i < in->cnt && !rc; i++) {
            size_t a = 0, b = in->n[i], cn = mid ? 0 : d->strn;
            for (int k = 0; k < d->start && cn && a + cn <= b && !memcmp(in->s[i] + a, d->str, cn); k++)
                a += cn;
            for (int k = 0; k < d->stop && cn && b >= a + cn && !memcmp(in->s[i] + b - cn, d->str, cn); k++)
                b -= cn;
            rc = sl_push(out, in->s[i] + a, b - a);
        }
        return rc;
    }
    return -1;
}

static const char *const cleanup_pairs[][2] = {{" .", "."},   {" ?", "?"},   {" !", "!"},   {" ,", ","},
                                               {" ' ", "'"},  {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"},
                                               {" 've", "'ve"}, {" 're", "'re"}};


char *tok_decode(tok *t, const int32_t *ids, size_t n, int skip_special, int cleanup, size_t *len, ogk_error *e)
{
    strlist in = {0}, out = {0};
    char *res = NULL;
    size_t inb = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->ntok || !t->is_tok[id]) {
            ogk_fail(e, "token id %d is not in the vocabulary (size %d)", id, t->ntok);
            goto done;
        }
        if (skip_special && tok_is_special(t, id))
            continue;
        if (sl_push(&in, t->sym[id], t->symn[id]))
            goto oom;
        inb += t->symn[id];
    }
    tok_buf b = {0};
    if (t->dec) {
        int rc = decode_chain(t, t->dec, &in, &out, 0, tk_grow_max(inb));
        if (rc == TK_GREW) {
            ogk_fail(e, "the tokenizer's decoder makes these %zu tokens more than %d times longer: refused", n, TK_GROW);
            goto done;
        }
        if (rc)
            goto oom;
        for (size_t i = 0; i < out.cnt; i++)
            if (tok_buf_put(&b, out.s[i], out.n[i]))
                goto oom;
    } else {
        for (size_t i = 0; i < in.cnt; i++)
            if ((i && tok_buf_put(&b, " ", 1)) || tok_buf_put(&b, in.s[i], in.n[i]))
                goto oom;
    }
    if (tok_buf_put(&b, "", 0))
        goto oom;
    if (cleanup < 0)
        cleanup = t->cleanup;
    if (cleanup) {
        for (size_t k = 0; k < sizeof cleanup_pairs / sizeof cleanup_pairs[0]; k++) {
            tpat p = {.lit = (char *)cleanup_pairs[k][0], .litn = strlen(cleanup_pairs[k][0])};
            tok_buf nb = {0};
            if (tk_pat_replace(t, &p, b.p, b.n, cleanup_pairs[k][1], strlen(cleanup_pairs[k][1]), &nb, SIZE_MAX) ||
                tok_buf_put(&nb, "", 0)) {
                free(nb.p);
                free(b.p);
                goto oom;
            }
            free(b.p);
            b = nb;
        }
    }
    res = b.p;
    *len = b.n;
    goto done;
oom:
    ogk_fail(e, "out of memory");
done:
    sl_free(&in);
    sl_free(&out);
    return res;
}

int tok_piece_bytes(tok *t, int32_t id, int start, char **bytes, size_t *len)
{
    *bytes = NULL, *len = 0;
    if (id < 0 || id >= t->ntok || !t->is_tok[id] || tok_is_special(t, id))
        return 0;
    strlist in = {0}, out = {0};
    tok_buf b = {0};
    int rc = sl_push(&in, t->sym[id], t->symn[id]);
    if (!rc && t->dec) {
        rc = decode_chain(t, t->dec, &in, &out, DC_RAW | (start ? 0 : DC_MID), tk_grow_max(t->symn[id]));
        for (size_t i = 0; !rc && i < out.cnt; i++)
            rc = tok_buf_put(&b, out.s[i], out.n[i]);
    } else if (!rc) { /* no decoder: tokens joined by spaces */
        rc = (!start && tok_buf_put(&b, " ", 1)) || tok_buf_put(&b, t->sym[id], t->symn[id]);
    }
    if (!rc)
        rc = tok_buf_put(&b, "", 0);
    sl_free(&in);
    sl_free(&out);
    if (rc) {
        free(b.p);
        return -1;
    }
    *bytes = b.p, *len = b.n;
    return 1;
}

/* ------------------------------------------------------------------------------------------------ */
/* streaming decoder: decode a window of ids and emit the growth of the text, holding back while it ends
 * in U+FFFD (an incomplete UTF-8 sequence that the next token may finish) */

struct tok_stream {
    tok *t;
    int skip_special, skip_unknown;
    idvec ids;
    size_t prefix, read;
    char *out;
};

tok_stream *tok_stream_new(tok *t, int flags)
{
    tok_stream *s = calloc(1, sizeof *s);
    if (s) {
        s->t = t;
        s->skip_special = !!(flags & TOK_STREAM_SKIP_SPECIAL);
        s->skip_unknown = !!(flags & TOK_STREAM_SKIP_UNKNOWN);
    }
    return s;
}

static const char *stream_step(tok_stream *s, int final, size_t *len, ogk_error *e)
{
    size_t pn = 0, nn = 0;
    free(s->out);
    s->out = NULL;
    *len = 0;
    const int32_t *win = s->ids.v ? s->ids.v + s->prefix : NULL; /* NULL: flushed before any id */
    char *pt = tok_decode(s->t, win, s->read - s->prefix, s->skip_special, 0, &pn, e);
    if (!pt)
        return NULL;
    char *nt = tok_decode(s->t, win, s->ids.n - s->prefix, s->skip_special, 0, &nn, e);
    if (!nt) {
        free(pt);
        return NULL;
    }
    int held = nn >= 3 && !memcmp(nt + nn - 3, "\xEF\xBF\xBD", 3);
    if (nn > pn && !memcmp(nt, pt, pn) && (!held || final)) {
        memmove(nt, nt + pn, nn - pn);
        nt[nn - pn] = 0;
        *len = nn - pn;
        s->out = nt;
        s->prefix = s->read;
        s->read = s->ids.n;
    } else {
        free(nt);
        s->out = strdup("");
        if (!s->out)
            ogk_fail(e, "out of memory");
    }
    free(pt);
    return s->out;
}

const char *tok_stream_put(tok_stream *s, int32_t id, size_t *len, ogk_error *e)
{
    /* a dropped special token adds nothing to the window (whose decoding each step costs its length: a
     * run of them, e.g. EOS with ignore_eos, would make the steps quadratic) */
    int known = id >= 0 && id < s->t->ntok && s->t->is_tok[id];
    if ((s->skip_special && known && tok_is_special(s->t, id)) || (s->skip_unknown && !known)) {
        *len = 0;
        return "";
    }
    if (tk_ids_push(&s->ids, id)) {
        ogk_fail(e, "out of memory");
        return NULL;
    }
    return stream_step(s, 0, len, e);
}

const char *tok_stream_flush(tok_stream *s, size_t *len, ogk_error *e) { return stream_step(s, 1, len, e); }

void tok_stream_free(tok_stream *s)
{
    if (!s)
        return;
    free(s->ids.v);
    free(s->out);
    free(s);
}

