/* UTF-8 validation, the WHATWG replacement decoder, and Unicode normalization (NFC/NFD/NFKC/NFKD) through
 * utf8proc (Debian libutf8proc; UAX #15 for its Unicode version, which tok_unicode_version() names and
 * t/unit/tok_unicode checks against NormalizationTest.txt), and the full case mappings chat templates' upper / lower
 * need. */
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

int tok_py_printable(uint32_t cp)
{
    if (cp == ' ')
        return 1;
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS: return 0;
    default: return 1;
    }
}

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

/* ---- case mapping (JS String.prototype.toUpperCase / toLowerCase, which chat templates' upper / lower
 * are in the reference renderer) ---- */

/* SpecialCasing.txt's unconditional upper-case mappings to more than one code point (ß -> SS, ligatures,
 * Greek with ypogegrammeni, ...); everything else maps one to one through utf8proc's simple mappings */
static const struct {
    uint32_t cp, to[3];
} upper_multi[] = {
    {0x00DF, {0x0053, 0x0053}},
    {0x0149, {0x02BC, 0x004E}},
    {0x01F0, {0x004A, 0x030C}},
    {0x0390, {0x0399, 0x0308, 0x0301}},
    {0x03B0, {0x03A5, 0x0308, 0x0301}},
    {0x0587, {0x0535, 0x0552}},
    {0x1E96, {0x0048, 0x0331}},
    {0x1E97, {0x0054, 0x0308}},
    {0x1E98, {0x0057, 0x030A}},
    {0x1E99, {0x0059, 0x030A}},
    {0x1E9A, {0x0041, 0x02BE}},
    {0x1F50, {0x03A5, 0x0313}},
    {0x1F52, {0x03A5, 0x0313, 0x0300}},
    {0x1F54, {0x03A5, 0x0313, 0x0301}},
    {0x1F56, {0x03A5, 0x0313, 0x0342}},
    {0x1F80, {0x1F08, 0x0399}},
    {0x1F81, {0x1F09, 0x0399}},
    {0x1F82, {0x1F0A, 0x0399}},
    {0x1F83, {0x1F0B, 0x0399}},
    {0x1F84, {0x1F0C, 0x0399}},
    {0x1F85, {0x1F0D, 0x0399}},
    {0x1F86, {0x1F0E, 0x0399}},
    {0x1F87, {0x1F0F, 0x0399}},
    {0x1F88, {0x1F08, 0x0399}},
    {0x1F89, {0x1F09, 0x0399}},
    {0x1F8A, {0x1F0A, 0x0399}},
    {0x1F8B, {0x1F0B, 0x0399}},
    {0x1F8C, {0x1F0C, 0x0399}},
    {0x1F8D, {0x1F0D, 0x0399}},
    {0x1F8E, {0x1F0E, 0x0399}},
    {0x1F8F, {0x1F0F, 0x0399}},
    {0x1F90, {0x1F28, 0x0399}},
    {0x1F91, {0x1F29, 0x0399}},
    {0x1F92, {0x1F2A, 0x0399}},
    {0x1F93, {0x1F2B, 0x0399}},
    {0x1F94, {0x1F2C, 0x0399}},
    {0x1F95, {0x1F2D, 0x0399}},
    {0x1F96, {0x1F2E, 0x0399}},
    {0x1F97, {0x1F2F, 0x0399}},
    {0x1F98, {0x1F28, 0x0399}},
    {0x1F99, {0x1F29, 0x0399}},
    {0x1F9A, {0x1F2A, 0x0399}},
    {0x1F9B, {0x1F2B, 0x0399}},
    {0x1F9C, {0x1F2C, 0x0399}},
    {0x1F9D, {0x1F2D, 0x0399}},
    {0x1F9E, {0x1F2E, 0x0399}},
    {0x1F9F, {0x1F2F, 0x0399}},
    {0x1FA0, {0x1F68, 0x0399}},
    {0x1FA1, {0x1F69, 0x0399}},
    {0x1FA2, {0x1F6A, 0x0399}},
    {0x1FA3, {0x1F6B, 0x0399}},
    {0x1FA4, {0x1F6C, 0x0399}},
    {0x1FA5, {0x1F6D, 0x0399}},
    {0x1FA6, {0x1F6E, 0x0399}},
    {0x1FA7, {0x1F6F, 0x0399}},
    {0x1FA8, {0x1F68, 0x0399}},
    {0x1FA9, {0x1F69, 0x0399}},
    {0x1FAA, {0x1F6A, 0x0399}},
    {0x1FAB, {0x1F6B, 0x0399}},
    {0x1FAC, {0x1F6C, 0x0399}},
    {0x1FAD, {0x1F6D, 0x0399}},
    {0x1FAE, {0x1F6E, 0x0399}},
    {0x1FAF, {0x1F6F, 0x0399}},
    {0x1FB2, {0x1FBA, 0x0399}},
    {0x1FB3, {0x0391, 0x0399}},
    {0x1FB4, {0x0386, 0x0399}},
    {0x1FB6, {0x0391, 0x0342}},
    {0x1FB7, {0x0391, 0x0342, 0x0399}},
    {0x1FBC, {0x0391, 0x0399}},
    {0x1FC2, {0x1FCA, 0x0399}},
    {0x1FC3, {0x0397, 0x0399}},
    {0x1FC4, {0x0389, 0x0399}},
    {0x1FC6, {0x0397, 0x0342}},
    {0x1FC7, {0x0397, 0x0342, 0x0399}},
    {0x1FCC, {0x0397, 0x0399}},
    {0x1FD2, {0x0399, 0x0308, 0x0300}},
    {0x1FD3, {0x0399, 0x0308, 0x0301}},
    {0x1FD6, {0x0399, 0x0342}},
    {0x1FD7, {0x0399, 0x0308, 0x0342}},
    {0x1FE2, {0x03A5, 0x0308, 0x0300}},
    {0x1FE3, {0x03A5, 0x0308, 0x0301}},
    {0x1FE4, {0x03A1, 0x0313}},
    {0x1FE6, {0x03A5, 0x0342}},
    {0x1FE7, {0x03A5, 0x0308, 0x0342}},
    {0x1FF2, {0x1FFA, 0x0399}},
    {0x1FF3, {0x03A9, 0x0399}},
    {0x1FF4, {0x038F, 0x0399}},
    {0x1FF6, {0x03A9, 0x0342}},
    {0x1FF7, {0x03A9, 0x0342, 0x0399}},
    {0x1FFC, {0x03A9, 0x0399}},
    {0xFB00, {0x0046, 0x0046}},
    {0xFB01, {0x0046, 0x0049}},
    {0xFB02, {0x0046, 0x004C}},
    {0xFB03, {0x0046, 0x0046, 0x0049}},
    {0xFB04, {0x0046, 0x0046, 0x004C}},
    {0xFB05, {0x0053, 0x0054}},
    {0xFB06, {0x0053, 0x0054}},
    {0xFB13, {0x0544, 0x0546}},
    {0xFB14, {0x0544, 0x0535}},
    {0xFB15, {0x0544, 0x053B}},
    {0xFB16, {0x054E, 0x0546}},
    {0xFB17, {0x0544, 0x053D}},
};

/* cased letters and case-ignorable characters, as the Final_Sigma condition uses them (approximated by
 * general category: Lu/Ll/Lt and letters with a case mapping; Mn/Me/Cf/Lm/Sk and the apostrophe, full
 * stop, colon and middle dots of Word_Break MidLetter / MidNumLet) */
static int cased(uint32_t c)
{
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT ||
           utf8proc_toupper((utf8proc_int32_t)c) != (utf8proc_int32_t)c ||
           utf8proc_tolower((utf8proc_int32_t)c) != (utf8proc_int32_t)c;
}
static int case_ignorable(uint32_t c)
{
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_ME || k == UTF8PROC_CATEGORY_CF ||
           k == UTF8PROC_CATEGORY_LM || k == UTF8PROC_CATEGORY_SK || c == '\'' || c == '.' || c == ':' ||
           c == 0xB7 || c == 0x2018 || c == 0x2019 || c == 0x2024 || c == 0x2027 || c == 0xFE13 ||
           c == 0xFE52 || c == 0xFE55 || c == 0xFF07 || c == 0xFF0E || c == 0xFF1A;
}

/* Σ at [i, i + 2) of s is word-final: a cased letter before it and none after (case-ignorables skipped) */
static int final_sigma(const unsigned char *s, size_t n, size_t i)
{
    int before = 0;
    for (size_t j = i; j > 0;) {
        size_t k = j - 1;
        while (k > 0 && (s[k] & 0xC0) == 0x80)
            k--;
        uint32_t c;
        tok_utf8_dec(s + k, &c);
        if (!case_ignorable(c)) {
            before = cased(c);
            break;
        }
        j = k;
    }
    if (!before)
        return 0;
    for (size_t j = i + 2; j < n;) {
        uint32_t c;
        j += (size_t)tok_utf8_dec(s + j, &c);
        if (!case_ignorable(c))
            return !cased(c);
    }
    return 1;
}

char *tok_case_map(const char *str, size_t n, int upper, size_t *out_n)
{
    const unsigned char *s = (const unsigned char *)str;
    char *o = malloc(n * 3 + 1); /* no mapping grows a character beyond 3x its UTF-8 bytes */
    size_t w = 0;
    if (!o)
        return NULL;
    for (size_t i = 0; i < n;) {
        uint32_t c;
        int len = tok_utf8_dec(s + i, &c);
        if (c < 0x80) {
            o[w++] = (char)(upper ? (c >= 'a' && c <= 'z' ? c - 32 : c) : (c >= 'A' && c <= 'Z' ? c + 32 : c));
        } else if (upper) {
            size_t lo = 0, hi = sizeof upper_multi / sizeof *upper_multi;
            while (lo < hi) {
                size_t mid = (lo + hi) / 2;
                if (upper_multi[mid].cp < c)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            if (lo < sizeof upper_multi / sizeof *upper_multi && upper_multi[lo].cp == c)
                for (int k = 0; k < 3 && upper_multi[lo].to[k]; k++)
                    w += (size_t)tok_utf8_enc(upper_multi[lo].to[k], o + w);
            else
                w += (size_t)tok_utf8_enc((uint32_t)utf8proc_toupper((utf8proc_int32_t)c), o + w);
        } else if (c == 0x130) { /* İ -> i + combining dot above */
            w += (size_t)tok_utf8_enc('i', o + w);
            w += (size_t)tok_utf8_enc(0x307, o + w);
        } else if (c == 0x3A3) {
            w += (size_t)tok_utf8_enc(final_sigma(s, n, i) ? 0x3C2 : 0x3C3, o + w);
        } else {
            w += (size_t)tok_utf8_enc((uint32_t)utf8proc_tolower((utf8proc_int32_t)c), o + w);
        }
        i += (size_t)len;
    }
    o[w] = 0;
    *out_n = w;
    return o;
}
