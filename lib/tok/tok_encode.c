/* Encoding: added tokens (longest first, before and after normalization), normalizer and pre-tokenizer
 * per section, BPE, post-processor; tok_encode_max stops once a bound is passed. */
#define _GNU_SOURCE
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "tok/tok_impl.h"

/* ------------------------------------------------------------------------------------------------ */
/* encode                                                                                            */

/* Split s by added tokens (longest match, left to right). Each section: span + added index or -1. */
typedef struct {
    uint32_t off, len;
    int added;
} section;
typedef struct {
    section *v;
    size_t n, cap;
} sections;

static int sec_push(sections *s, uint32_t off, uint32_t len, int added)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        section *v = realloc(s->v, cap * sizeof *v);
        if (!v)
            return -1;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = (section){off, len, added};
    return 0;
}

static int split_added(const tok *t, const char *s, uint32_t base, uint32_t n, int normalized, sections *out)
{
    const uint8_t *first = normalized ? t->first_norm : t->first_raw;
    int cnt = normalized ? t->nsplit_norm : t->nsplit_raw;
    uint32_t start = 0, i = 0;
    while (i < n) {
        int best = -1;
        uint32_t bestn = 0;
        if (cnt && first[(unsigned char)s[i]]) {
            for (int k = 0; k < cnt; k++) {
                const char *c;
                uint32_t cn;
                if (normalized) {
                    c = t->split_norm_s[k];
                    cn = t->split_norm_n[k];
                } else {
                    c = t->added[t->split_raw[k]].s;
                    cn = t->added[t->split_raw[k]].n;
                }
                if (cn > bestn && cn <= n - i && !memcmp(s + i, c, cn)) {
                    best = k;
                    bestn = cn;
                }
            }
        }
        if (best >= 0) {
            if (i > start && sec_push(out, base + start, i - start, -1))
                return -1;
            if (sec_push(out, base + i, bestn, 0))
                return -1;
            i += bestn;
            start = i;
        } else {
            i++;
        }
    }
    if (start < n && sec_push(out, base + start, n - start, -1))
        return -1;
    return 0;
}

static void js_trim(const char *w, section *s, int end)
{
    const unsigned char *p = (const unsigned char *)w + s->off;
    uint32_t cp;
    if (end) {
        while (s->len) {
            uint32_t q = s->len - 1;
            while (q > 0 && (p[q] & 0xC0) == 0x80)
                q--;
            tok_utf8_dec(p + q, &cp);
            if (!tok_js_space(cp))
                break;
            s->len = q;
        }
    } else {
        while (s->len) {
            int k = tok_utf8_dec(p, &cp);
            if (!tok_js_space(cp))
                break;
            p += k;
            s->off += (uint32_t)k;
            s->len -= (uint32_t)k;
        }
    }
}

static void apply_strip(const tok *t, const char *w, sections *secs)
{
    for (size_t i = 0; i < secs->n; i++) {
        int a = tk_amap_get(t, w + secs->v[i].off, secs->v[i].len);
        if (a < 0 || secs->v[i].len == 0)
            continue;
        if (t->added[a].lstrip && i > 0)
            js_trim(w, &secs->v[i - 1], 1);
        if (t->added[a].rstrip && i + 1 < secs->n)
            js_trim(w, &secs->v[i + 1], 0);
    }
}

static void fuse_unk(const tok *t, idvec *v, size_t from)
{
    if (!t->fuse_unk || t->unk_id < 0)
        return;
    size_t o = from;
    for (size_t i = from; i < v->n; i++) {
        if (v->v[i] == t->unk_id && o > from && v->v[o - 1] == t->unk_id)
            continue;
        v->v[o++] = v->v[i];
    }
    v->n = o;
}

int tok_encode(tok *t, const char *text, size_t len, int add_special, int32_t **ids_out, size_t *n_out, ogk_error *e)
{
    return tok_encode_max(t, text, len, add_special, SIZE_MAX, ids_out, n_out, e);
}

int tok_encode_max(tok *t, const char *text, size_t len, int add_special, size_t max_ids, int32_t **ids_out,
                   size_t *n_out, ogk_error *e)
{
    size_t bad = tok_utf8_check(text, len);
    if (bad != len)
        return ogk_fail(e, "input is not valid UTF-8 (byte offset %zu)", bad);
    if (len > UINT32_MAX / 4)
        return ogk_fail(e, "input too large (%zu bytes)", len);
    tok_buf w = {0}, nb = {0};
    sections raw = {0}, sub = {0};
    spans in = {0}, out = {0};
    idvec ids = {0};
    bpe_work *bwp = t->bw;
    if (!bwp && !(bwp = t->bw = calloc(1, sizeof(bpe_work))))
        return ogk_fail(e, "out of memory");
    /* with a bound, a piece too long for the tokens left is refused before its BPE (every token covers at
     * most max_tok_bytes of it; fused unknowns may cover more, so not with fuse_unk) */
    int lb = max_ids < SIZE_MAX && !(t->fuse_unk && t->unk_id >= 0);
    if (lb && !t->max_tok_bytes) {
        uint32_t m = 4;
        for (int32_t i = 0; i < t->ntok; i++)
            m = t->symn[i] > m ? t->symn[i] : m;
        t->max_tok_bytes = m;
    }
    int rc = -1;
    if (tok_buf_put(&w, text, len) || split_added(t, w.p, 0, (uint32_t)len, 0, &raw))
        goto oom;
    apply_strip(t, w.p, &raw);
    if (add_special && t->pp_template) {
        for (int k = 0; k < t->npp_items && t->pp_items[k] >= 0; k++)
            if (tk_ids_push(&ids, t->pp_items[k]))
                goto oom;
    }
    for (size_t si = 0; si < raw.n; si++) {
        section sec = raw.v[si];
        if (!sec.len)
            continue;
        int a = tk_amap_get(t, w.p + sec.off, sec.len);
        if (a >= 0) {
            if (tk_ids_push(&ids, t->added[a].id))
                goto oom;
            continue;
        }
        uint32_t off = sec.off, slen = sec.len;
        if (t->norm && !(t->norm->type <= N_NFKD && tok_nf_unchanged((tok_nf)t->norm->type, w.p + sec.off, sec.len))) {
            int nr = tk_normalize_text(t, t->norm, w.p + sec.off, sec.len, &nb, tk_grow_max(sec.len));
            if (nr == TK_GREW) {
                ogk_fail(e, "the tokenizer's normalizer makes this text more than %d times longer (%u bytes at byte %u): "
                            "refused", TK_GROW, sec.len, sec.off);
                goto done;
            }
            if (nr)
                goto oom;
            if (!nb.n)
                continue;
            off = (uint32_t)w.n;
            slen = (uint32_t)nb.n;
            if (tok_buf_put(&w, nb.p, nb.n))
                goto oom;
        }
        sub.n = 0;
        if (split_added(t, w.p + off, off, slen, 1, &sub))
            goto oom;
        apply_strip(t, w.p, &sub);
        for (size_t j = 0; j < sub.n; j++) {
            section ss = sub.v[j];
            if (!ss.len)
                continue;
            int b = tk_amap_get(t, w.p + ss.off, ss.len);
            if (b >= 0) {
                if (tk_ids_push(&ids, t->added[b].id))
                    goto oom;
                continue;
            }
            in.n = 0;
            size_t from = ids.n;
            const tpre *fs = max_ids < SIZE_MAX ? tk_first_regex_split(t->pre) : NULL;
            if (fs) {
                /* a window of the first split's pieces at a time through the rest and BPE */
                size_t prev = 0, start = 0;
                span sp = {ss.off, ss.len};
                int more = 1, mode = fs->invert ? 1 : fs->behavior == B_REMOVED ? 2 : 0;
                while (more) {
                    in.n = 0;
                    if ((more = tk_regex_pieces_some(t, fs->pat.re, w.p, sp, mode, &in, &prev, &start, 4096)) < 0)
                        goto oom;
                    spans *pieces = &in;
                    if (fs != t->pre) {
                        if (tk_pretokenize_from(t, t->pre, &w, &in, &out, (int)si, 1))
                            goto oom;
                        pieces = &out;
                    }
                    for (size_t k = 0; k < pieces->n; k++) {
                        if (lb && ids.n + (pieces->v[k].len + t->max_tok_bytes - 1) / t->max_tok_bytes > max_ids)
                            goto too_many;
                        if (tk_bpe_word(t, bwp, w.p + pieces->v[k].off, pieces->v[k].len, &ids))
                            goto oom;
                    }
                    if (ids.n > max_ids && !(t->fuse_unk && t->unk_id >= 0)) /* fuse_unk may still shrink them */
                        goto too_many;
                }
            } else {
                if (tk_spans_push(&in, ss.off, ss.len))
                    goto oom;
                spans *pieces = &in;
                if (t->pre) {
                    if (tk_pretokenize(t, t->pre, &w, &in, &out, (int)si))
                        goto oom;
                    pieces = &out;
                }
                for (size_t k = 0; k < pieces->n; k++) {
                    if (lb && ids.n + (pieces->v[k].len + t->max_tok_bytes - 1) / t->max_tok_bytes > max_ids)
                        goto too_many;
                    if (tk_bpe_word(t, bwp, w.p + pieces->v[k].off, pieces->v[k].len, &ids))
                        goto oom;
                    if (ids.n > max_ids && !(t->fuse_unk && t->unk_id >= 0))
                        goto too_many;
                }
            }
            fuse_unk(t, &ids, from);
        }
        if (ids.n > max_ids)
            goto too_many;
    }
    if (add_special && t->pp_template) {
        int k = 0;
        while (k < t->npp_items && t->pp_items[k] >= 0)
            k++;
        for (k++; k < t->npp_items; k++)
            if (t->pp_items[k] >= 0 && tk_ids_push(&ids, t->pp_items[k]))
                goto oom;
    }
    if (ids.n > max_ids)
        goto too_many;
    rc = 0;
    *ids_out = ids.v ? ids.v : malloc(sizeof(int32_t));
    *n_out = ids.n;
    ids.v = NULL;
    if (!*ids_out)
        rc = ogk_fail(e, "out of memory");
    goto done;
too_many:
    ogk_fail(e, "more than %zu tokens", max_ids);
    goto done;
oom:
    if (t->regex_rc) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(t->regex_rc, msg, sizeof msg);
        ogk_fail(e, "pre-tokenizer regex failed on this input: %s", (char *)msg);
        t->regex_rc = 0;
    } else {
        ogk_fail(e, "out of memory");
    }
done:
    if (bwp->cap > (1u << 16)) { /* a long piece's work (tens of bytes a byte of it) is not kept for the next call */
        tk_bpe_work_free(bwp);
        t->bw = NULL;
    }
    free(w.p);
    free(nb.p);
    free(raw.v);
    free(sub.v);
    free(in.v);
    free(out.v);
    free(ids.v);
    return rc;
}

