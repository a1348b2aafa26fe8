/* UTF-8 validation, the WHATWG replacement decoder, and Unicode normalization (NFC/NFD/NFKC/NFKD) through
 * utf8proc (Debian libutf8proc; UAX #15 for its Unicode version, which tok_unicode_version() names and
 * t/unit/tok_unicode checks against NormalizationTest.txt). */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

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

const char *tok_unicode_version(void) { return utf8proc_unicode_version(); }

/* Quick check: 1 when normalizing valid UTF-8 s to form cannot change it. Conservative: a code point
 * with any decomposition, a nonzero combining class, a part in any composition, or a Hangul syllable or
 * jamo (composed and decomposed algorithmically) sends the text through tok_normalize. */
int tok_nf_unchanged(tok_nf form, const char *s, size_t len)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        if (u[i] < 0x80 || (form == TOK_NFC && u[i] < 0xCC)) { /* nothing below U+0300 changes under NFC */
            i += tok_utf8_len(u[i]);
            continue;
        }
        uint32_t cp;
        i += (size_t)tok_utf8_dec(u + i, &cp);
        if ((cp >= 0x1100 && cp < 0x1200) || (cp >= 0xAC00 && cp < 0xD7A4) || (cp >= 0x3130 && cp < 0x3190))
            return 0;
        const utf8proc_property_t *p = utf8proc_get_property((utf8proc_int32_t)cp);
        if (p->combining_class || p->decomp_seqindex != UINT16_MAX || p->comb_index != UINT16_MAX)
            return 0;
    }
    return 1;
}

char *tok_normalize(tok_nf form, const char *s, size_t len, size_t *out_len)
{
    if (tok_utf8_check(s, len) != len)
        return NULL;
    if (tok_nf_unchanged(form, s, len)) {
        char *o = malloc(len + 1);
        if (!o)
            return NULL;
        memcpy(o, s, len);
        o[len] = 0;
        *out_len = len;
        return o;
    }
    /* STABLE: composition exclusions are honoured (UAX #15); unassigned code points pass through */
    int opt = UTF8PROC_STABLE | (form == TOK_NFC || form == TOK_NFKC ? UTF8PROC_COMPOSE : UTF8PROC_DECOMPOSE);
    if (form == TOK_NFKC || form == TOK_NFKD)
        opt |= UTF8PROC_COMPAT;
    /* In pieces of about 64 KiB, each cut just before an ASCII character: an ASCII character is a starter
     * and the second half of no composition, so nothing after it reorders or composes with what is
     * before it, and the pieces normalize independently. utf8proc works in 4 bytes per code point: this
     * keeps that to the piece instead of the whole (possibly many-MB) text. */
    size_t cap = len + 1, on = 0;
    char *out = malloc(cap);
    for (size_t i = 0; out && i < len;) {
        size_t j = len - i > 65536 ? i + 65536 : len;
        while (j < len && (unsigned char)s[j] >= 0x80)
            j++;
        utf8proc_uint8_t *o = NULL;
        utf8proc_ssize_t n = utf8proc_map((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(j - i), &o,
                                          (utf8proc_option_t)opt);
        if (n < 0) { /* out of memory (the input is valid UTF-8) */
            free(out);
            return NULL;
        }
        if (on + (size_t)n + 1 > cap) {
            char *g = realloc(out, cap = (on + (size_t)n + 1) * 2);
            if (!g)
                free(out);
            out = g;
        }
        if (out)
            memcpy(out + on, o, (size_t)n), on += (size_t)n;
        free(o);
        i = j;
    }
    if (!out)
        return NULL;
    out[on] = 0;
    *out_len = on;
    return out;
}
