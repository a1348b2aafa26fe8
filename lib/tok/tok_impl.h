/* lib/tok tokenizer internals shared by tok.c (the object, loading, lookups), tok_regex.c (patterns),
 * tok_split.c (normalizers, pre-tokenizers), tok_bpe.c (BPE), tok_encode.c and tok_decode.c (with the
 * streaming decoder); not part of the API (tok.h). */
#ifndef OGK_TOK_IMPL_H
#define OGK_TOK_IMPL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tok/tok_int.h"

/* ------------------------------------------------------------------------------------------------ */
/* hashing                                                                                           */

static inline uint64_t hash_bytes(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xff51afd7ed558ccdull);
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, s, 8);
        h = (h ^ v) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
        s += 8;
        n -= 8;
    }
    uint64_t v = 0;
    memcpy(&v, s, n);
    h = (h ^ v ^ ((uint64_t)n << 59)) * 0x94d049bb133111ebull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return h;
}


typedef struct {
    int is_regex;
    char *lit; /* String pattern */
    size_t litn;
    pcre2_code *re;
} tpat;

/* ------------------------------------------------------------------------------------------------ */
/* the tokenizer object                                                                              */

enum { N_NFC, N_NFD, N_NFKC, N_NFKD, N_REPLACE, N_PREPEND, N_SEQ, N_STRIP, N_PRECOMPILED };
typedef struct tnorm {
    int type;
    tpat pat;
    char *str; /* Replace content, Prepend text; Precompiled: the normalized strings */
    size_t strn;
    const uint32_t *units; /* Precompiled: the double-array trie (darts-clone units, host order) */
    uint32_t nunits;
    int left, right; /* Strip */
    struct tnorm *kids;
    int nkids;
} tnorm;

enum { P_SPLIT, P_BYTELEVEL, P_METASPACE, P_DIGITS, P_SEQ, P_WHITESPACE, P_WSSPLIT };
enum { B_ISOLATED, B_REMOVED };
typedef struct tpre {
    int type;
    tpat pat;
    int invert, behavior;
    int add_prefix_space, use_regex; /* ByteLevel */
    char *repl;                      /* Metaspace */
    size_t repln;
    int prepend; /* 0 never, 1 always, 2 first */
    pcre2_code *re;
    struct tpre *kids;
    int nkids;
} tpre;

enum { D_BYTELEVEL, D_METASPACE, D_BYTEFALLBACK, D_FUSE, D_STRIP, D_REPLACE, D_SEQ };
typedef struct tdec {
    int type;
    tpat pat;
    char *str; /* Replace content / Metaspace replacement / Strip content */
    size_t strn;
    int start, stop;
    struct tdec *kids;
    int nkids;
} tdec;

typedef struct {
    char *s;
    uint32_t n;
    int32_t id;
    int lstrip, rstrip, special, normalized;
} added_tok;

typedef struct {
    uint64_t h;
    char *key;
    uint32_t keyn, nids;
    int32_t *ids;
} cache_ent;
#define CACHE_SIZE (1u << 16)

struct tok {
    tok_arena arena;
    /* symbols: ids < ntok are tokens (vocab + added); extras (merge parts not in the vocab) follow */
    char **sym;
    uint32_t *symn;
    uint8_t *is_tok;
    int32_t nsym, symcap, ntok;
    uint32_t *hslot; /* symbol hash: sym id + 1, 0 = empty */
    uint32_t hcap;
    int32_t small_sym[0x800]; /* code points < 0x800 as single-char symbols (-1 = none) */
    /* merges: key (a << 32 | b) -> rank, result */
    uint64_t *mkey;
    uint32_t *mrank;
    int32_t *mres;
    uint32_t mcap;
    int byte_fallback, ignore_merges, fuse_unk;
    int32_t unk_id, byte_id[256];
    char *unk_token;
    /* added tokens */
    added_tok *added;
    int nadded;
    /* lookup content (and normalized content) -> index in added[]; small open table */
    struct {
        const char *s;
        uint32_t n;
        int idx;
    } *amap;
    uint32_t amapcap;
    int *split_raw, nsplit_raw, *split_norm, nsplit_norm; /* indices into added[] per splitter */
    char **split_norm_s;                                 /* normalized contents for split_norm */
    uint32_t *split_norm_n;
    uint8_t first_raw[256], first_norm[256];
    tnorm *norm;
    tpre *pre;
    tdec *dec;
    int pp_template; /* TemplateProcessing */
    int32_t *pp_items;   /* -1 = sequence A, else special token id */
    int npp_items;
    /* config */
    char *bos, *eos, *chat_template;
    char *chat_template_tools; /* the list form's template named "tool_use", or NULL */
    int32_t bos_id, eos_id;
    int cleanup;
    char **special_strs; /* special added tokens + additional_special_tokens */
    uint32_t *special_n;
    int nspecial;
    /* work: reused across calls (a tok is used by one thread at a time) */
    void *bw;
    uint32_t max_tok_bytes; /* the longest token's bytes (at least 4): a piece of n bytes is >= n / it tokens (0: not yet) */
    int regex_rc; /* a PCRE2 error (not "no match") from the last call, for the error message */
    pcre2_match_data *md;
    cache_ent *cache;
    /* bytes_to_unicode */
    char bl_enc[256][3];
    uint8_t bl_encn[256];
    int16_t bl_dec[0x144];
};


typedef struct {
    uint32_t off, len;
} span;
typedef struct {
    span *v;
    size_t n, cap;
} spans;


typedef struct {
    int32_t *v;
    size_t n, cap;
} idvec;

typedef struct {
    uint32_t rank, pos;
    int32_t left, a, b;
} hent;

static inline int hless(const hent *x, const hent *y) { return x->rank < y->rank || (x->rank == y->rank && x->pos < y->pos); }

typedef struct {
    int32_t *sym, *prev, *next;
    uint32_t *start, *len;
    hent *heap;
    size_t cap, hn, hcap;
} bpe_work;

/* ---- tok.c: the object, its symbols and merges, loading ---- */
int32_t tk_sym_find(const tok *t, const char *s, size_t n);
int tk_merge_find(const tok *t, int32_t a, int32_t b, uint32_t *rank, int32_t *res);
int tk_amap_get(const tok *t, const char *s, size_t n);

/* ---- tok_regex.c: patterns and regexes (Oniguruma -> PCRE2) ---- */
pcre2_code *tk_regex_compile(const char *pat, size_t n, int translate, ogk_error *e);
int tk_pat_load(tpat *p, const tj *cfg, tok_arena *a, ogk_error *e);
int tk_next_match(tok *t, pcre2_code *re, const char *s, size_t n, size_t *start, size_t *a, size_t *b);
/* Text a normalizer or decoder makes longer than this many times its input (plus TK_GROW_SLACK bytes) is
 * refused (TK_GREW): a Sequence of growing Replace stages would otherwise take memory without bound. Real
 * ones grow at most ~13x (NFKC of U+FDFA, its spaces as "\u2581"). */
#define TK_GROW 32
#define TK_GROW_SLACK 4096
#define TK_GREW (-2)
static inline size_t tk_grow_max(size_t n) { return n > (SIZE_MAX - TK_GROW_SLACK) / TK_GROW ? SIZE_MAX : n * TK_GROW + TK_GROW_SLACK; }
/* out grows past max: TK_GREW */
int tk_pat_replace(tok *t, const tpat *p, const char *s, size_t n, const char *rep, size_t repn, tok_buf *out, size_t max);

/* ---- tok_split.c: normalizers and pre-tokenizers ---- */
int tk_normalize_text(tok *t, const tnorm *nz, const char *s, size_t len, tok_buf *out, size_t max); /* TK_GREW past max */
/* A Precompiled normalizer (SentencePiece's precompiled_charsmap, base64 text of b64n bytes) into n: 0, or
 * -1 with e filled (not base64, sizes that do not hold together). tok_charsmap.c */
int tk_charsmap_load(tok *t, tnorm *n, const char *b64, size_t b64n, ogk_error *e);
/* s normalized by the charsmap, appended to out: at every position the longest rule that matches the
 * bytes there gives its replacement, else one character is copied (SentencePiece's NormalizePrefix) */
int tk_charsmap_apply(const tnorm *n, const char *s, size_t len, tok_buf *out);
/* base64 (standard alphabet, '=' padding) of n bytes, malloc'd and NUL-terminated; NULL on OOM */
char *tk_base64(const void *p, size_t n);
int tk_spans_push(spans *s, uint32_t off, uint32_t len);
int tk_regex_pieces_some(tok *t, pcre2_code *re, const char *w, span in, int mode, spans *out, size_t *prev, size_t *start, size_t most);
int tk_pretokenize_from(tok *t, const tpre *p, tok_buf *w, spans *in, spans *out, int section_index, int from);
int tk_pretokenize(tok *t, const tpre *p, tok_buf *w, spans *in, spans *out, int section_index);
const tpre *tk_first_regex_split(const tpre *p);

/* ---- tok_bpe.c: BPE ---- */
int tk_ids_push(idvec *v, int32_t id);
void tk_bpe_work_free(void *p);
int tk_bpe_word(tok *t, bpe_work *w, const char *s, uint32_t n, idvec *out);

#endif
