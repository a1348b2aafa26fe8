/* lib/tok internals shared by its .c files; not part of the public API (tok.h). */
#ifndef OGK_TOK_INT_H
#define OGK_TOK_INT_H

#include <stddef.h>
#include <stdint.h>

#include "tok/tok.h"

/* ---- arena: bump allocator in chunks, freed at once ---- */
typedef struct tok_arena_chunk tok_arena_chunk;
typedef struct {
    tok_arena_chunk *head;
    size_t used, cap;
    size_t total; /* bytes held in chunks (what a memory budget counts) */
} tok_arena;
void *tok_arena_alloc(tok_arena *a, size_t n); /* 8-byte aligned; NULL on OOM */
char *tok_arena_strdup(tok_arena *a, const char *s, size_t n); /* NUL-terminated copy */
void tok_arena_free(tok_arena *a);
/* A position to return to: everything allocated after tok_arena_mark is released by tok_arena_rewind
 * (the caller guarantees nothing older points into it). Marks nest. */
typedef struct {
    tok_arena_chunk *head;
    size_t used, cap;
} tok_arena_pos;
tok_arena_pos tok_arena_mark(const tok_arena *a);
void tok_arena_rewind(tok_arena *a, tok_arena_pos m);

/* ---- a small fast JSON reader (tokenizer.json is 11 MB; jansson takes ~250 ms on it) ----
 * Objects keep key order; strings are NUL-terminated copies or point into the source when they have no
 * escapes (then they are NOT NUL-terminated: always use .n). */
enum { TJ_NULL, TJ_FALSE, TJ_TRUE, TJ_NUM, TJ_STR, TJ_ARR, TJ_OBJ };
typedef struct tj {
    uint8_t type;
    uint32_t n; /* string length in bytes; array items; object members */
    union {
        double num;
        const char *s;
        struct tj *items; /* array: n items; object: 2n items, key then value */
    } u;
} tj;
/* Parse; returns 0, or -1 with e filled ("tokenizer.json: line L col C: why"). */
int tj_parse(tok_arena *a, const char *src, size_t len, const char *what, tj *out, ogk_error *e);
const tj *tj_get(const tj *obj, const char *key); /* NULL when absent or obj is not an object */
int tj_streq(const tj *v, const char *s);          /* v is the string s */
int tj_bool(const tj *v, int dflt);                /* true/false, dflt when absent or null */

/* ---- UTF-8 ---- */
/* Decode one code point at s (valid UTF-8 assumed); returns its byte length. */
static inline int tok_utf8_dec(const unsigned char *s, uint32_t *cp)
{
    unsigned c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    if (c < 0xE0) {
        *cp = ((c & 0x1F) << 6) | (s[1] & 0x3F);
        return 2;
    }
    if (c < 0xF0) {
        *cp = ((c & 0x0F) << 12) | ((s[1] & 0x3F) << 6) | (s[2] & 0x3F);
        return 3;
    }
    *cp = ((c & 0x07) << 18) | ((s[1] & 0x3F) << 12) | ((s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    return 4;
}
int tok_utf8_enc(uint32_t cp, char *out); /* returns 1..4 */
static inline int tok_utf8_len(unsigned char c) { return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4; }
/* WHATWG UTF-8 decode of arbitrary bytes: invalid sequences become U+FFFD (maximal subparts). Appends
 * to *out (realloc'd buffer of *cap bytes, *n used). Returns 0 or -1 on OOM. */
int tok_utf8_sanitize(const unsigned char *s, size_t len, char **out, size_t *n, size_t *cap);
/* JS String.prototype.trim whitespace (WhiteSpace + LineTerminator) */
int tok_js_space(uint32_t cp);

/* 1 when normalizing valid UTF-8 s to form cannot change it (quick check, no allocation) */
int tok_nf_unchanged(tok_nf form, const char *s, size_t len);

/* valid UTF-8 s upper- or lower-cased as JavaScript's toUpperCase / toLowerCase do (full mappings:
 * ß -> SS, İ -> i̇, word-final Σ -> ς; utf8proc's Unicode version); malloc'd, NUL-terminated; NULL on OOM */
char *tok_case_map(const char *s, size_t n, int upper, size_t *out_n);

/* Python's str.isprintable of one code point: not Cc, Cf, Cs, Co, Cn, Zl, Zp, nor Zs other than ' '
 * (utf8proc's Unicode version) */
int tok_py_printable(uint32_t cp);

/* the Unicode version normalization follows (utf8proc's) */
const char *tok_unicode_version(void);

/* ---- growable byte buffer ---- */
typedef struct {
    char *p;
    size_t n, cap;
} tok_buf;
/* room for n more bytes (and the NUL) so the next puts do not reallocate; 0 or -1 on OOM */
int tok_buf_reserve(tok_buf *b, size_t n);
int tok_buf_put(tok_buf *b, const void *s, size_t n); /* 0 or -1 on OOM; keeps a NUL after the data */
static inline int tok_buf_puts(tok_buf *b, const char *s) { return tok_buf_put(b, s, __builtin_strlen(s)); }

/* ---- Jinja values are built from jansson (jinja.c) ---- */

#endif
