/* BPE over one pre-tokenized piece: merges by rank (lowest first, leftmost on ties) with a heap, a word
 * cache, byte fallback and unknown tokens as the reference. */
#define _GNU_SOURCE
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "tok/tok_impl.h"

/* ------------------------------------------------------------------------------------------------ */
/* BPE                                                                                               */

int tk_ids_push(idvec *v, int32_t id)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 256;
        int32_t *p = realloc(v->v, cap * sizeof *p);
        if (!p)
            return -1;
        v->v = p;
        v->cap = cap;
    }
    v->v[v->n++] = id;
    return 0;
}


void tk_bpe_work_free(void *p)
{
    bpe_work *w = p;
    if (!w)
        return;
    free(w->sym);
    free(w->prev);
    free(w->next);
    free(w->start);
    free(w->len);
    free(w->heap);
    free(w);
}

static int heap_push(bpe_work *w, hent e)
{
    if (w->hn == w->hcap) {
        size_t cap = w->hcap ? w->hcap * 2 : 64;
        hent *h = realloc(w->heap, cap * sizeof *h);
        if (!h)
            return -1;
        w->heap = h;
        w->hcap = cap;
    }
    size_t i = w->hn++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!hless(&e, &w->heap[p]))
            break;
        w->heap[i] = w->heap[p];
        i = p;
    }
    w->heap[i] = e;
    return 0;
}

static hent heap_pop(bpe_work *w)
{
    hent top = w->heap[0], last = w->heap[--w->hn];
    size_t i = 0, n = w->hn;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && hless(&w->heap[c + 1], &w->heap[c]))
            c++;
        if (!hless(&w->heap[c], &last))
            break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n)
        w->heap[i] = last;
    return top;
}

static int bpe_try(const tok *t, bpe_work *w, int32_t left)
{
    int32_t right = w->next[left];
    uint32_t rank;
    int32_t res;
    if (right < 0 || !tk_merge_find(t, w->sym[left], w->sym[right], &rank, &res))
        return 0;
    hent e = {rank, w->start[left], left, w->sym[left], w->sym[right]};
    return heap_push(w, e);
}

static int emit_sym(const tok *t, int32_t sym, const char *s, uint32_t n, idvec *out)
{
    if (sym >= 0 && sym < t->ntok && t->is_tok[sym])
        return tk_ids_push(out, sym);
    if (t->byte_fallback) {
        int all = 1;
        for (uint32_t i = 0; i < n; i++)
            all &= t->byte_id[(unsigned char)s[i]] >= 0;
        if (all) {
            for (uint32_t i = 0; i < n; i++)
                if (tk_ids_push(out, t->byte_id[(unsigned char)s[i]]))
                    return -1;
            return 0;
        }
    }
    if (t->unk_id >= 0)
        return tk_ids_push(out, t->unk_id);
    return 0; /* no unk token: the piece is dropped, as the reference does */
}

int tk_bpe_word(tok *t, bpe_work *w, const char *s, uint32_t n, idvec *out)
{
    if (!n)
        return 0;
    if (t->ignore_merges) {
        int32_t id = tk_sym_find(t, s, n);
        if (id >= 0 && id < t->ntok && t->is_tok[id])
            return tk_ids_push(out, id);
    }
    uint64_t h = 0;
    cache_ent *ce = NULL;
    if (n < 256) {
        h = hash_bytes(s, n);
        ce = &t->cache[h & (CACHE_SIZE - 1)];
        if (ce->key && ce->h == h && ce->keyn == n && !memcmp(ce->key, s, n)) {
            for (uint32_t i = 0; i < ce->nids; i++)
                if (tk_ids_push(out, ce->ids[i]))
                    return -1;
            return 0;
        }
    }
    if (n > w->cap) {
        size_t cap = n * 2;
        int32_t *a = realloc(w->sym, cap * sizeof *a), *b, *c;
        if (!a)
            return -1;
        w->sym = a;
        if (!(b = realloc(w->prev, cap * sizeof *b)))
            return -1;
        w->prev = b;
        if (!(c = realloc(w->next, cap * sizeof *c)))
            return -1;
        w->next = c;
        uint32_t *d = realloc(w->start, cap * sizeof *d), *f;
        if (!d)
            return -1;
        w->start = d;
        if (!(f = realloc(w->len, cap * sizeof *f)))
            return -1;
        w->len = f;
        w->cap = cap;
    }
    int32_t m = 0;
    for (uint32_t i = 0; i < n;) {
        uint32_t cp;
        int k = tok_utf8_dec((const unsigned char *)s + i, &cp);
        w->sym[m] = cp < 0x800 ? t->small_sym[cp] : tk_sym_find(t, s + i, (size_t)k);
        w->start[m] = i;
        w->len[m] = (uint32_t)k;
        w->prev[m] = m - 1;
        w->next[m] = m + 1;
        m++;
        i += (uint32_t)k;
    }
    w->next[m - 1] = -1;
    w->hn = 0;
    for (int32_t i = 0; i + 1 < m; i++)
        if (bpe_try(t, w, i))
            return -1;
    while (w->hn) {
        hent e = heap_pop(w);
        int32_t l = e.left, r = w->next[l];
        if (w->sym[l] != e.a || r < 0 || w->sym[r] != e.b)
            continue;
        uint32_t rank;
        int32_t res;
        tk_merge_find(t, e.a, e.b, &rank, &res);
        w->sym[l] = res;
        w->len[l] += w->len[r];
        w->sym[r] = -2; /* dead */
        w->next[l] = w->next[r];
        if (w->next[r] >= 0)
            w->prev[w->next[r]] = l;
        if (w->prev[l] >= 0 && bpe_try(t, w, w->prev[l]))
            return -1;
        if (bpe_try(t, w, l))
            return -1;
    }
    size_t before = out->n;
    for (int32_t i = 0; i >= 0; i = w->next[i])
        if (emit_sym(t, w->sym[i], s + w->start[i], w->len[i], out))
            return -1;
    if (ce) {
        size_t k = out->n - before;
        int32_t *ids = malloc((k ? k : 1) * sizeof *ids);
        char *key = malloc(n);
        if (ids && key) {
            free(ce->key);
            free(ce->ids);
            if (k) /* out->v is NULL while nothing was emitted yet */
                memcpy(ids, out->v + before, k * sizeof *ids);
            memcpy(key, s, n);
            ce->key = key;
            ce->ids = ids;
            ce->keyn = n;
            ce->nids = (uint32_t)k;
            ce->h = h;
        } else {
            free(ids);
            free(key);
        }
    }
    return 0;
}

