/* lib/tok Unicode: normalization against the Unicode conformance file NormalizationTest.txt (Debian
 * unicode-data; skipped when absent), UTF-8 validation and the WHATWG replacement decoder against
 * vectors from the Encoding Standard. */
#include <stdlib.h>
#include <string.h>

#include "tap.h"
#include "tok/tok_int.h"

static size_t parse_cps(const char *f, char *out)
{
    size_t n = 0;
    while (*f) {
        while (*f == ' ')
            f++;
        if (!*f)
            break;
        unsigned long cp = strtoul(f, (char **)&f, 16);
        n += (size_t)tok_utf8_enc((uint32_t)cp, out + n);
    }
    out[n] = 0;
    return n;
}

static int check(tok_nf form, const char *in, size_t n, const char *want, size_t wn)
{
    size_t on;
    char *o = tok_normalize(form, in, n, &on);
    int ok = o && on == wn && !memcmp(o, want, wn);
    free(o);
    return ok;
}

static void conformance(void)
{
    FILE *f = popen("bzcat /usr/share/unicode/NormalizationTest.txt.bz2 2>/dev/null || "
                    "cat /usr/share/unicode/NormalizationTest.txt 2>/dev/null", "r");
    char line[4096];
    size_t lines = 0, fails = 0;
    char first_fail[200] = "";
    while (f && fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '@' || line[0] == '\n')
            continue;
        char *fld[5], *p = line;
        int k;
        for (k = 0; k < 5; k++) {
            fld[k] = p;
            char *semi = strchr(p, ';');
            if (!semi)
                break;
            *semi = 0;
            p = semi + 1;
        }
        if (k < 5)
            continue;
        char c[5][256];
        size_t cn[5];
        for (int i = 0; i < 5; i++)
            cn[i] = parse_cps(fld[i], c[i]);
        /* NFC: c2 == toNFC(c1) == toNFC(c2) == toNFC(c3); c4 == toNFC(c4) == toNFC(c5); and so on */
        int ok = 1;
        for (int i = 0; i < 3; i++) {
            ok &= check(TOK_NFC, c[i], cn[i], c[1], cn[1]);
            ok &= check(TOK_NFD, c[i], cn[i], c[2], cn[2]);
        }
        for (int i = 3; i < 5; i++) {
            ok &= check(TOK_NFC, c[i], cn[i], c[3], cn[3]);
            ok &= check(TOK_NFD, c[i], cn[i], c[4], cn[4]);
        }
        for (int i = 0; i < 5; i++) {
            ok &= check(TOK_NFKC, c[i], cn[i], c[3], cn[3]);
            ok &= check(TOK_NFKD, c[i], cn[i], c[4], cn[4]);
        }
        lines++;
        if (!ok && getenv("TOK_DEBUG") && fails < 3) {
            for (int i = 0; i < 5; i++)
                for (int fm = 0; fm < 4; fm++) {
                    size_t on;
                    char *o = tok_normalize((tok_nf)fm, c[i], cn[i], &on);
                    printf("# col %d form %d ->", i, fm);
                    for (size_t q = 0; o && q < on;) {
                        uint32_t cp;
                        q += (size_t)tok_utf8_dec((unsigned char *)o + q, &cp);
                        printf(" %04X", cp);
                    }
                    printf("\n");
                    free(o);
                }
        }
        if (!ok && !fails++)
            snprintf(first_fail, sizeof first_fail, "%s;%s;%s;%s;%s", fld[0], fld[1], fld[2], fld[3], fld[4]);
    }
    if (f)
        pclose(f);
    if (lines == 0) {
        printf("ok %d - # SKIP NormalizationTest.txt not installed (apt-get install unicode-data)\n", ++tap_n);
        return;
    }
    TAP_OK(fails == 0 && lines > 15000, "NormalizationTest.txt (Unicode %s): %zu lines, %zu fail %s", tok_unicode_version(),
           lines, fails, first_fail);
}

static void utf8(void)
{
    TAP_OK(tok_utf8_check("abc\xC3\xA9", 5) == 5, "valid 2-byte sequence");
    TAP_OK(tok_utf8_check("a\xC0\xAF", 3) == 1, "overlong C0 AF refused at offset 1");
    TAP_OK(tok_utf8_check("\xED\xA0\x80", 3) == 0, "surrogate ED A0 80 refused");
    TAP_OK(tok_utf8_check("\xF4\x90\x80\x80", 4) == 0, "above U+10FFFF refused");
    TAP_OK(tok_utf8_check("ab\xE2\x82", 4) == 2, "truncated sequence refused");
    TAP_OK(tok_utf8_check("\xF0\x9F\x98\x80", 4) == 4, "4-byte emoji valid");
    /* WHATWG: one U+FFFD per maximal subpart */
    struct {
        const char *in;
        size_t n;
        const char *want;
    } v[] = {
        {"\xF0\x80\x80", 3, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"\xE2\x82", 2, "\xEF\xBF\xBD"},
        {"a\xE2\x82" "b", 4, "a\xEF\xBF\xBD" "b"},
        {"\xFF", 1, "\xEF\xBF\xBD"},
        {"\xED\xA0\x80", 3, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"\xF4\x8F\xBF\xBF", 4, "\xF4\x8F\xBF\xBF"},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        char *o = NULL;
        size_t on = 0, oc = 0;
        int rc = tok_utf8_sanitize((const unsigned char *)v[i].in, v[i].n, &o, &on, &oc);
        TAP_OK(rc == 0 && on == strlen(v[i].want) && !memcmp(o, v[i].want, on), "WHATWG decode vector %zu", i);
        free(o);
    }
    size_t on;
    TAP_OK(tok_normalize(TOK_NFC, "a\xFF", 2, &on) == NULL, "normalizing invalid UTF-8 fails cleanly");
}

/* long texts are normalized in pieces cut before ASCII characters (unicode.c): the pieces must join to
 * the whole. "e" + U+0301 composes to U+00E9 under NFC, and U+00E9 decomposes back under NFD; 100,000 of
 * them span several pieces. */
static void long_text(void)
{
    enum { N = 100000 };
    char *dec = malloc(N * 3 + 1), *comp = malloc(N * 2 + 1);
    for (size_t i = 0; i < N; i++) {
        memcpy(dec + i * 3, "e\xcc\x81", 3);
        memcpy(comp + i * 2, "\xc3\xa9", 2);
    }
    size_t n;
    char *o = tok_normalize(TOK_NFC, dec, N * 3, &n);
    TAP_OK(o && n == N * 2 && !memcmp(o, comp, n), "NFC of %d decomposed e-acute (%d bytes) in pieces", N, N * 3);
    free(o);
    o = tok_normalize(TOK_NFD, comp, N * 2, &n);
    TAP_OK(o && n == N * 3 && !memcmp(o, dec, n), "NFD of %d e-acute in pieces", N);
    free(o), free(dec), free(comp);
}

int main(void)
{
    utf8();
    conformance();
    long_text();
    return TAP_DONE();
}
