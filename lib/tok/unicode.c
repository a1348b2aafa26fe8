/* UTF-8 validation, the WHATWG replacement decoder, and Unicode normalization (NFC/NFD/NFKC/NFKD) from the
 * generated UCD tables in unicode_tables.c (UAX #15: full decomposition, canonical ordering, canonical
 * composition with composition exclusions; Hangul algorithmically). */
#include <stdlib.h>
#include <string.h>

#include "tok/tok_int.h"

int tok_utf8_enc(uint32_t cp, char *o)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Length of the valid sequence at s[0..len), or 0 when invalid; *sub = bytes of the maximal subpart
 * (the prefix the WHATWG decoder consumes before emitting one U+FFFD; at least 1). */
static size_t utf8_seq(const unsigned char *s, size_t len, size_t *sub)
{
    unsigned c = s[0];
    size_t need;
    unsigned lo = 0x80, hi = 0xBF;
    *sub = 1;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        need = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        if (c == 0xE0)
            lo = 0xA0;
        if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        if (c == 0xF0)
            lo = 0x90;
        if (c == 0xF4)
            hi = 0x8F;
    } else {
        return 0;
    }
    for (size_t i = 1; i <= need; i++) {
        if (i >= len)
            return 0;
        unsigned b = s[i];
        if (b < lo || b > hi)
            return 0;
        lo = 0x80;
        hi = 0xBF;
        *sub = i + 1;
    }
    return need + 1;
}

size_t tok_utf8_check(const char *str, size_t len)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0, sub;
    while (i < len) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        size_t n = utf8_seq(s + i, len - i, &sub);
        if (!n)
            return i;
        i += n;
    }
    return len;
}

int tok_utf8_sanitize(const unsigned char *s, size_t len, char **out, size_t *n, size_t *cap)
{
    tok_buf b = {*out, *n, *cap};
    size_t i = 0, sub;
    int rc = 0;
    while (i < len && !rc) {
        size_t start = i;
        while (i < len && s[i] < 0x80)
            i++;
        size_t m;
        while (i < len && (m = utf8_seq(s + i, len - i, &sub)) != 0)
            i += m;
        rc = tok_buf_put(&b, s + start, i - start);
        if (i < len && !rc) {
            (void)utf8_seq(s + i, len - i, &sub);
            rc = tok_buf_put(&b, "\xEF\xBF\xBD", 3);
            i += sub;
        }
    }
    if (!b.p && !rc)
        rc = tok_buf_put(&b, "", 0);
    *out = b.p;
    *n = b.n;
    *cap = b.cap;
    return rc;
}

int tok_js_space(uint32_t cp)
{
    if (cp == ' ' || (cp >= 9 && cp <= 13))
        return 1;
    if (cp < 0xA0)
        return 0;
    return cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000 || cp == 0xFEFF;
}

/* ---- normalization ---- */
enum { SBase = 0xAC00, LBase = 0x1100, VBase = 0x1161, TBase = 0x11A7, LCount = 19, VCount = 21, TCount = 28,
       NCount = VCount * TCount, SCount = LCount * NCount };

static inline unsigned ccc(uint32_t cp)
{
    if (cp >= 0x110000)
        return 0;
    return tok_uc_ccc_s2[(size_t)tok_uc_ccc_s1[cp >> 8] * 256 + (cp & 255)];
}

static inline unsigned uflag(uint32_t cp)
{
    if (cp >= 0x110000)
        return 0;
    return tok_uc_flag_s2[(size_t)tok_uc_flag_s1[cp >> 8] * 256 + (cp & 255)];
}

typedef struct {
    uint32_t *v;
    size_t n, cap;
} cpvec;

static int cp_push(cpvec *c, uint32_t cp)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 64;
        uint32_t *v = realloc(c->v, cap * sizeof *v);
        if (!v)
            return -1;
        c->v = v;
        c->cap = cap;
    }
    c->v[c->n++] = cp;
    return 0;
}

static int push_hangul_or(cpvec *c, uint32_t cp)
{
    if (cp >= SBase && cp < SBase + SCount) {
        uint32_t s = cp - SBase;
        if (cp_push(c, LBase + s / NCount) || cp_push(c, VBase + (s % NCount) / TCount))
            return -1;
        if (s % TCount && cp_push(c, TBase + s % TCount))
            return -1;
        return 0;
    }
    return cp_push(c, cp);
}

static int decompose(cpvec *c, uint32_t cp, int compat)
{
    size_t lo = 0, hi = tok_uc_ndecomp;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (tok_uc_decomp[mid].cp < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    const tok_uc_decomp_entry *d = NULL;
    for (size_t i = lo; i < tok_uc_ndecomp && tok_uc_decomp[i].cp == cp; i++) {
        if (tok_uc_decomp[i].compat == 0 || compat)
            d = &tok_uc_decomp[i]; /* the compat entry follows the canonical one */
    }
    if (!d)
        return push_hangul_or(c, cp);
    for (unsigned i = 0; i < d->len; i++)
        if (push_hangul_or(c, tok_uc_decomp_data[d->off + i]))
            return -1;
    return 0;
}

static uint32_t compose_pair(uint32_t a, uint32_t b)
{
    if (a >= LBase && a < LBase + LCount && b >= VBase && b < VBase + VCount)
        return SBase + ((a - LBase) * VCount + (b - VBase)) * TCount;
    if (a >= SBase && a < SBase + SCount && (a - SBase) % TCount == 0 && b > TBase && b < TBase + TCount)
        return a + (b - TBase);
    uint64_t key = (uint64_t)a << 21 | b;
    size_t lo = 0, hi = tok_uc_ncomp;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (tok_uc_comp[mid].key < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < tok_uc_ncomp && tok_uc_comp[lo].key == key ? tok_uc_comp[lo].cp : 0;
}

/* Quick check: 1 when normalizing valid UTF-8 s to form cannot change it (no flagged code point). */
int tok_nf_unchanged(tok_nf form, const char *s, size_t len)
{
    int compat = form == TOK_NFKC || form == TOK_NFKD, comp = form == TOK_NFC || form == TOK_NFKC;
    unsigned need = compat ? 2 : 1;
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        if (u[i] < 0x80 || (form == TOK_NFC && u[i] < 0xCC)) { /* nothing below U+0300 changes under NFC */
            i += tok_utf8_len(u[i]);
            continue;
        }
        uint32_t cp;
        i += (size_t)tok_utf8_dec(u + i, &cp);
        /* Hangul syllables are algorithmic (not flagged): they change only under decomposition */
        if ((uflag(cp) & need) != 0 || (!comp && cp >= SBase && cp < SBase + SCount))
            return 0;
    }
    return 1;
}

char *tok_normalize(tok_nf form, const char *s, size_t len, size_t *out_len)
{
    if (tok_utf8_check(s, len) != len)
        return NULL;
    int compat = form == TOK_NFKC || form == TOK_NFKD;
    int comp = form == TOK_NFC || form == TOK_NFKC;
    const unsigned char *u = (const unsigned char *)s;
    int touch = !tok_nf_unchanged(form, s, len);
    if (!touch) {
        char *o = malloc(len + 1);
        if (!o)
            return NULL;
        memcpy(o, s, len);
        o[len] = 0;
        *out_len = len;
        return o;
    }
    cpvec c = {0};
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        i += (size_t)tok_utf8_dec(u + i, &cp);
        if (decompose(&c, cp, compat))
            goto oom;
    }
    /* canonical ordering: stable insertion sort of each run of non-starters by ccc */
    for (size_t i = 1; i < c.n; i++) {
        unsigned cc = ccc(c.v[i]);
        if (!cc)
            continue;
        size_t j = i;
        uint32_t x = c.v[i];
        while (j > 0 && ccc(c.v[j - 1]) > cc) {
            c.v[j] = c.v[j - 1];
            j--;
        }
        c.v[j] = x;
    }
    size_t n = c.n;
    if (comp && n) {
        size_t out = 0;
        long starter = -1;
        unsigned last_cc = 0;
        for (size_t i = 0; i < n; i++) {
            uint32_t x = c.v[i];
            unsigned cc = ccc(x);
            if (starter >= 0) {
                int adjacent = (size_t)starter == out - 1;
                if (adjacent || (last_cc != 0 && last_cc < cc)) {
                    uint32_t y = compose_pair(c.v[starter], x);
                    if (y) {
                        c.v[starter] = y;
                        continue;
                    }
                }
            }
            if (cc == 0)
                starter = (long)out;
            last_cc = cc;
            c.v[out++] = x;
        }
        n = out;
    }
    char *o = malloc(n * 4 + 1);
    if (!o)
        goto oom;
    size_t on = 0;
    for (size_t i = 0; i < n; i++)
        on += (size_t)tok_utf8_enc(c.v[i], o + on);
    o[on] = 0;
    free(c.v);
    *out_len = on;
    return o;
oom:
    free(c.v);
    return NULL;
}
