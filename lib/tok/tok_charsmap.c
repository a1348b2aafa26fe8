/* SentencePiece's precompiled character maps (normalizer_spec.precompiled_charsmap: nmt_nfkc, nfkc_cf,
 * ... rules compiled into the model), the "Precompiled" normalizer of tokenizer.json.
 *
 * The blob (a public format, sentencepiece's normalizer): a little-endian uint32 T, then T bytes of a
 * darts-clone double-array trie (uint32 units) whose keys are UTF-8 byte strings and whose values are
 * offsets into the rest of the blob, NUL-terminated replacement strings. Each unit: bit 8 has_leaf,
 * bits 0-7 (and 31) the label, value = the low 31 bits of a leaf unit, offset = (u >> 10) << ((u >> 6) &
 * 8) (bit 9 scales it by 256). Every index the walk makes and every value is bounds-checked at use, a
 * rule whose key ends inside a character or whose replacement is not UTF-8 is ignored: a hostile blob can
 * give wrong text but never read outside itself or hand the rest of lib/tok invalid UTF-8. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "tok/tok_impl.h"

static int b64v(unsigned char c)
{
    return c >= 'A' && c <= 'Z' ? c - 'A' : c >= 'a' && c <= 'z' ? c - 'a' + 26 : c >= '0' && c <= '9' ? c - '0' + 52
           : c == '+' ? 62 : c == '/' ? 63 : -1;
}

char *tk_base64(const void *p, size_t n)
{
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *s = p;
    char *o = malloc((n + 2) / 3 * 4 + 1), *w = o;
    if (!o)
        return NULL;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0) | (i + 2 < n ? s[i + 2] : 0);
        *w++ = A[v >> 18];
        *w++ = A[v >> 12 & 63];
        *w++ = i + 1 < n ? A[v >> 6 & 63] : '=';
        *w++ = i + 2 < n ? A[v & 63] : '=';
    }
    *w = 0;
    return o;
}

int tk_charsmap_load(tok *t, tnorm *n, const char *b64, size_t b64n, ogk_error *e)
{
    if (b64n % 4)
        return ogk_fail(e, "normalizer Precompiled: precompiled_charsmap is not base64 (length %zu)", b64n);
    uint8_t *blob = tok_arena_alloc(&t->arena, b64n / 4 * 3 + 4);
    if (!blob)
        return ogk_fail(e, "out of memory");
    size_t bn = 0;
    for (size_t i = 0; i < b64n; i += 4) {
        int v[4];
        for (int k = 0; k < 4; k++) {
            unsigned char c = (unsigned char)b64[i + k];
            v[k] = c == '=' && i + 4 == b64n && k >= 2 ? -2 : b64v(c);
            if (v[k] == -1 || (k == 2 && v[2] == -2 && b64[i + 3] != '='))
                return ogk_fail(e, "normalizer Precompiled: precompiled_charsmap is not base64 (byte %zu)", i + k);
        }
        uint32_t x = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)(v[2] < 0 ? 0 : v[2]) << 6 |
                     (uint32_t)(v[3] < 0 ? 0 : v[3]);
        blob[bn++] = (uint8_t)(x >> 16);
        if (v[2] >= 0)
            blob[bn++] = (uint8_t)(x >> 8);
        if (v[3] >= 0)
            blob[bn++] = (uint8_t)x;
    }
    if (bn == 0) { /* an empty map normalizes nothing */
        n->units = NULL;
        n->nunits = 0;
        n->str = NULL;
        n->strn = 0;
        return 0;
    }
    if (bn < 4)
        return ogk_fail(e, "normalizer Precompiled: precompiled_charsmap is %zu bytes, shorter than its header", bn);
    uint32_t tn = (uint32_t)blob[0] | (uint32_t)blob[1] << 8 | (uint32_t)blob[2] << 16 | (uint32_t)blob[3] << 24;
    if (tn % 4 || tn > bn - 4 || tn < 4)
        return ogk_fail(e, "normalizer Precompiled: the trie's size %u does not fit the %zu-byte map", tn, bn);
    uint32_t *u = tok_arena_alloc(&t->arena, tn);
    if (!u)
        return ogk_fail(e, "out of memory");
    for (uint32_t i = 0; i < tn / 4; i++) {
        const uint8_t *q = blob + 4 + 4 * (size_t)i;
        u[i] = (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24;
    }
    n->units = u;
    n->nunits = tn / 4;
    n->str = (char *)blob + 4 + tn;
    n->strn = bn - 4 - tn;
    return 0;
}

/* The longest key of the trie that prefixes s: its length (0: none) and value. */
static size_t longest_rule(const tnorm *n, const unsigned char *s, size_t len, uint32_t *value)
{
    const uint32_t *a = n->units;
    uint32_t N = n->nunits;
    size_t best = 0;
#define OFFSET(u) (((u) >> 10) << (((u) >> 6) & 8))
    uint32_t pos = OFFSET(a[0]);
    for (size_t i = 0; i < len; i++) {
        pos ^= s[i];
        if (pos >= N)
            break;
        uint32_t u = a[pos];
        if ((u & ((1u << 31) | 0xFF)) != s[i])
            break;
        pos ^= OFFSET(u);
        if (pos >= N)
            break;
        if (u >> 8 & 1) {
            best = i + 1;
            *value = a[pos] & 0x7FFFFFFFu;
        }
    }
#undef OFFSET
    return best;
}

int tk_charsmap_apply(const tnorm *n, const char *s, size_t len, tok_buf *out)
{
    size_t i = 0;
    while (i < len) {
        uint32_t v = 0;
        size_t k = n->nunits ? longest_rule(n, (const unsigned char *)s + i, len - i, &v) : 0;
        const char *r = NULL;
        size_t rn = 0;
        if (k && tok_utf8_check(s + i, k) != k) /* a key that ends inside a character: not a rule (the text after
                                                 * it would start mid-character) */
            k = 0;
        if (k && v < n->strn) {
            r = n->str + v;
            const char *z = memchr(r, 0, n->strn - v);
            rn = z ? (size_t)(z - r) : n->strn - v;
            if (tok_utf8_check(r, rn) != rn) /* the rest of lib/tok reads only valid UTF-8 */
                r = NULL;
        }
        if (!k || !r) { /* no rule (or a value outside the strings, or not UTF-8): the character as it is */
            k = (size_t)tok_utf8_len((unsigned char)s[i]);
            if (k > len - i)
                k = len - i;
            r = s + i;
            rn = k;
        }
        if (tok_buf_put(out, r, rn))
            return -1;
        i += k;
    }
    return 0;
}
