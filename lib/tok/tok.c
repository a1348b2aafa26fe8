/* Tokenizer: load tokenizer.json + tokenizer_config.json, encode (added tokens, normalizer, pre-tokenizer,
 * BPE, post-processor), decode (decoders, clean-up), and the streaming decoder. Semantics mirror
 * @huggingface/tokenizers; see tok.h. */
#define _GNU_SOURCE
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

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

/* ------------------------------------------------------------------------------------------------ */
/* patterns (Replace normalizer/decoder, Split pre-tokenizer)                                        */

typedef struct {
    int is_regex;
    char *lit; /* String pattern */
    size_t litn;
    pcre2_code *re;
} tpat;

/* Translate a tokenizer.json (Oniguruma-flavoured) regex to PCRE2 with the semantics the reference gives
 * it: \s \S = White_Space, \d \D = Nd, \w \W = the Oniguruma word set, '.' excludes only \n, ^ $ are line
 * anchors on \n, (?i: ...) folds ASCII letters only. Other syntax is shared by PCRE2 and passes through. */
#define WORD_CLASS_BODY "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{B2}\\x{B3}\\x{B9}\\x{BC}-\\x{BE}"
static int regex_translate(const char *re, size_t n, tok_buf *o)
{
    int fold_depth = -1, depth = 0, in_class = 0, rc = 0, last_quant = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        char c = re[i];
        int fold = fold_depth >= 0;
        if (c == '\\' && i + 1 < n) {
            char d = re[++i];
            last_quant = 0;
            if ((d == 'p' || d == 'P' || d == 'x') && i + 1 < n && re[i + 1] == '{') {
                const char *close = memchr(re + i, '}', n - i);
                if (!close)
                    return -2;
                size_t k = (size_t)(close - (re + i)) + 1;
                rc = tok_buf_put(o, "\\", 1) || tok_buf_put(o, re + i, k);
                i += k - 1;
                continue;
            }
            switch (d) {
            case 's': rc = tok_buf_puts(o, "\\p{White_Space}"); break;
            case 'S': rc = tok_buf_puts(o, "\\P{White_Space}"); break;
            case 'd': rc = tok_buf_puts(o, "\\p{Nd}"); break;
            case 'D': rc = tok_buf_puts(o, "\\P{Nd}"); break;
            case 'w': rc = tok_buf_puts(o, in_class ? WORD_CLASS_BODY : "[" WORD_CLASS_BODY "]"); break;
            case 'W':
                if (in_class)
                    return -2; /* complement inside a class: not supported */
                rc = tok_buf_puts(o, "[^" WORD_CLASS_BODY "]");
                break;
            case 'h': rc = tok_buf_puts(o, in_class ? "0-9A-Fa-f" : "[0-9A-Fa-f]"); break;
            case 'H': rc = in_class ? -2 : tok_buf_puts(o, "[^0-9A-Fa-f]"); break;
            default: {
                char two[2] = {'\\', d};
                rc = tok_buf_put(o, two, 2);
            }
            }
            continue;
        }
        if (in_class) {
            if (c == ']' && in_class == 1) {
                in_class = 0;
            } else if (c == '[') {
                in_class++;
            } else if (c == ']') {
                in_class--;
            } else if (fold && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))) {
                if (i + 1 < n && re[i + 1] == '-')
                    return -2; /* letter ranges under (?i: */
                char two[2] = {c, (char)(c ^ 0x20)};
                rc = tok_buf_put(o, two, 2);
                continue;
            }
            rc = tok_buf_put(o, &c, 1);
            continue;
        }
        /* quantifiers; a '+' right after one is dropped as the reference does (no possessive forms) */
        if (c == '+' || c == '*' || c == '?') {
            if (!(c == '+' && last_quant))
                rc = tok_buf_put(o, &c, 1);
            last_quant = 1;
            continue;
        }
        if (c == '{') {
            size_t j = i + 1, digits = 0;
            while (j < n && ((re[j] >= '0' && re[j] <= '9') || re[j] == ','))
                digits += re[j] != ',', j++;
            if (j < n && re[j] == '}' && digits) {
                rc = tok_buf_put(o, re + i, j - i + 1);
                i = j;
                last_quant = 1;
                continue;
            }
        }
        last_quant = 0;
        switch (c) {
        case '[':
            in_class = 1;
            rc = tok_buf_put(o, &c, 1);
            if (i + 1 < n && re[i + 1] == '^')
                rc = tok_buf_put(o, &re[++i], 1);
            if (!rc && i + 1 < n && re[i + 1] == ']') /* a literal ] first in the class */
                rc = tok_buf_puts(o, "\\]"), i++;
            break;
        case '.': rc = tok_buf_puts(o, "[^\\n]"); break;
        case '^': rc = tok_buf_puts(o, "(?:(?<![\\s\\S])|(?<=\\n))"); break;
        case '$': rc = tok_buf_puts(o, "(?:(?=\\n)|(?![\\s\\S]))"); break;
        case '(':
            if (n - i >= 4 && !memcmp(re + i, "(?i:", 4)) {
                if (fold_depth < 0)
                    fold_depth = depth;
                depth++;
                rc = tok_buf_puts(o, "(?:");
                i += 3;
                break;
            }
            if (n - i >= 2 && re[i + 1] == '?' && i + 2 < n && re[i + 2] != ':' && re[i + 2] != '=' &&
                re[i + 2] != '!' && re[i + 2] != '<' && re[i + 2] != '>')
                return -2; /* inline flags other than (?i: */
            depth++;
            rc = tok_buf_put(o, &c, 1);
            break;
        case ')':
            depth--;
            if (fold_depth == depth)
                fold_depth = -1;
            rc = tok_buf_put(o, &c, 1);
            break;
        default:
            if (fold && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))) {
                char cls[4] = {'[', c, (char)(c ^ 0x20), ']'};
                rc = tok_buf_put(o, cls, 4);
            } else {
                rc = tok_buf_put(o, &c, 1);
            }
        }
    }
    return rc;
}

static pcre2_code *regex_compile(const char *pat, size_t n, int translate, ogk_error *e)
{
    tok_buf b = {0};
    int rc = translate ? regex_translate(pat, n, &b) : tok_buf_put(&b, pat, n);
    if (rc) {
        free(b.p);
        ogk_fail(e, "unsupported regex construct in pattern '%.*s'", (int)(n > 200 ? 200 : n), pat);
        return NULL;
    }
    int err;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)b.p, b.n, PCRE2_UTF | PCRE2_UCP, &err, &off, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        ogk_fail(e, "regex '%.*s': %s at offset %zu", (int)(n > 200 ? 200 : n), pat, (char *)msg, (size_t)off);
        free(b.p);
        return NULL;
    }
    free(b.p);
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* falls back to the interpreter if JIT is absent */
    return re;
}

static int pat_load(tpat *p, const tj *cfg, tok_arena *a, ogk_error *e)
{
    const tj *s = tj_get(cfg, "String"), *r = tj_get(cfg, "Regex");
    if (s && s->type == TJ_STR) {
        p->lit = tok_arena_strdup(a, s->u.s, s->n);
        p->litn = s->n;
        return p->lit ? 0 : ogk_fail(e, "out of memory");
    }
    if (r && r->type == TJ_STR) {
        p->is_regex = 1;
        p->re = regex_compile(r->u.s, r->n, 1, e);
        return p->re ? 0 : -1;
    }
    return ogk_fail(e, "pattern: neither String nor Regex");
}

/* ------------------------------------------------------------------------------------------------ */
/* the tokenizer object                                                                              */

enum { N_NFC, N_NFD, N_NFKC, N_NFKD, N_REPLACE, N_PREPEND, N_SEQ, N_STRIP };
typedef struct tnorm {
    int type;
    tpat pat;
    char *str; /* Replace content, Prepend text */
    size_t strn;
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
    int32_t bos_id, eos_id;
    int cleanup;
    char **special_strs; /* special added tokens + additional_special_tokens */
    uint32_t *special_n;
    int nspecial;
    /* work: reused across calls (a tok is used by one thread at a time) */
    void *bw;
    int regex_rc; /* a PCRE2 error (not "no match") from the last call, for the error message */
    pcre2_match_data *md;
    cache_ent *cache;
    /* bytes_to_unicode */
    char bl_enc[256][3];
    uint8_t bl_encn[256];
    int16_t bl_dec[0x144];
};

static int32_t sym_find(const tok *t, const char *s, size_t n)
{
    if (!t->hcap)
        return -1;
    uint64_t h = hash_bytes(s, n);
    uint32_t mask = t->hcap - 1;
    for (uint32_t i = (uint32_t)h & mask;; i = (i + 1) & mask) {
        uint32_t v = t->hslot[i];
        if (!v)
            return -1;
        int32_t id = (int32_t)v - 1;
        if (t->symn[id] == n && !memcmp(t->sym[id], s, n))
            return id;
    }
}

static int sym_hash_insert(tok *t, int32_t id)
{
    uint64_t h = hash_bytes(t->sym[id], t->symn[id]);
    uint32_t mask = t->hcap - 1;
    for (uint32_t i = (uint32_t)h & mask;; i = (i + 1) & mask) {
        uint32_t v = t->hslot[i];
        if (!v) {
            t->hslot[i] = (uint32_t)id + 1;
            return 0;
        }
        int32_t o = (int32_t)v - 1;
        if (t->symn[o] == t->symn[id] && !memcmp(t->sym[o], t->sym[id], t->symn[id])) {
            t->hslot[i] = (uint32_t)id + 1; /* later definition wins (as a JS Map) */
            return 0;
        }
    }
}

static int sym_grow(tok *t, int32_t need)
{
    if (need > t->symcap) {
        int32_t cap = t->symcap ? t->symcap : 1024;
        while (cap < need)
            cap *= 2;
        char **s = realloc(t->sym, (size_t)cap * sizeof *s);
        if (!s)
            return -1;
        t->sym = s;
        uint32_t *sn = realloc(t->symn, (size_t)cap * sizeof *sn);
        if (!sn)
            return -1;
        t->symn = sn;
        uint8_t *it = realloc(t->is_tok, (size_t)cap);
        if (!it)
            return -1;
        t->is_tok = it;
        for (int32_t i = t->symcap; i < cap; i++) {
            t->sym[i] = NULL;
            t->symn[i] = 0;
            t->is_tok[i] = 0;
        }
        t->symcap = cap;
    }
    if ((uint64_t)need * 2 > t->hcap) {
        uint32_t cap = t->hcap ? t->hcap : 4096;
        while ((uint64_t)cap < (uint64_t)need * 2)
            cap *= 2;
        free(t->hslot);
        t->hslot = calloc(cap, sizeof *t->hslot);
        if (!t->hslot)
            return -1;
        t->hcap = cap;
        for (int32_t i = 0; i < t->nsym; i++)
            if (t->sym[i])
                sym_hash_insert(t, i);
    }
    return 0;
}

/* Define token id as string s (copied); ids may be sparse. Redefining an id as the same string is
 * fine (added_tokens repeat vocab entries); as another string it is -2: one id cannot decode to two
 * strings, and the string -> id map would lose the first one. */
static int tok_define(tok *t, int32_t id, const char *s, size_t n)
{
    if (id < t->symcap && t->is_tok[id])
        return t->symn[id] == n && !memcmp(t->sym[id], s, n) ? 0 : -2;
    if (sym_grow(t, id + 1 > t->nsym ? id + 1 : t->nsym))
        return -1;
    char *c = tok_arena_strdup(&t->arena, s, n);
    if (!c)
        return -1;
    t->sym[id] = c;
    t->symn[id] = (uint32_t)n;
    t->is_tok[id] = 1;
    if (id + 1 > t->nsym)
        t->nsym = id + 1;
    return sym_hash_insert(t, id);
}

/* Find or add an extra (non-token) symbol. */
static int32_t sym_intern(tok *t, const char *s, size_t n)
{
    int32_t id = sym_find(t, s, n);
    if (id >= 0)
        return id;
    id = t->nsym;
    if (sym_grow(t, id + 1))
        return -1;
    t->sym[id] = tok_arena_strdup(&t->arena, s, n);
    if (!t->sym[id])
        return -1;
    t->symn[id] = (uint32_t)n;
    t->nsym = id + 1;
    sym_hash_insert(t, id);
    return id;
}

static inline uint64_t mkey(int32_t a, int32_t b) { return (uint64_t)(uint32_t)a << 32 | (uint32_t)b; }

static int merge_find(const tok *t, int32_t a, int32_t b, uint32_t *rank, int32_t *res)
{
    if (!t->mcap || a < 0 || b < 0)
        return 0;
    uint64_t k = mkey(a, b), h = k * 0x9E3779B97F4A7C15ull;
    uint32_t mask = t->mcap - 1;
    for (uint32_t i = (uint32_t)(h >> 32) & mask;; i = (i + 1) & mask) {
        if (t->mres[i] == INT32_MIN)
            return 0;
        if (t->mkey[i] == k) {
            *rank = t->mrank[i];
            *res = t->mres[i];
            return 1;
        }
    }
}

static void merge_put(tok *t, int32_t a, int32_t b, uint32_t rank, int32_t res)
{
    uint64_t k = mkey(a, b), h = k * 0x9E3779B97F4A7C15ull;
    uint32_t mask = t->mcap - 1;
    for (uint32_t i = (uint32_t)(h >> 32) & mask;; i = (i + 1) & mask) {
        if (t->mres[i] == INT32_MIN || t->mkey[i] == k) {
            t->mkey[i] = k;
            t->mrank[i] = rank; /* a repeated pair keeps the later rank (JS Map semantics) */
            t->mres[i] = res;
            return;
        }
    }
}

/* ------------------------------------------------------------------------------------------------ */
/* loading                                                                                           */

/* The error for a normalizer/pre_tokenizer/decoder/post_processor "type" this loader does not know. */
static int unsupported_type(ogk_error *e, const char *what, const tj *ty)
{
    return ogk_fail(e, "unsupported %s type '%.*s'", what, ty && ty->type == TJ_STR ? (int)ty->n : 4,
                    ty && ty->type == TJ_STR ? ty->u.s : "none");
}

/* A "Sequence" component's list c[key], and its kids array: l->n + 1 zeroed elements of elsz bytes.
 * NULL (e set) when the list is missing. */
static void *load_seq(tok *t, const tj *c, const char *what, const char *key, size_t elsz, const tj **lp,
                      ogk_error *e)
{
    const tj *l = tj_get(c, key);
    if (!l || l->type != TJ_ARR) {
        ogk_fail(e, "%s Sequence: no %s list", what, key);
        return NULL;
    }
    void *kids = tok_arena_alloc(&t->arena, (l->n + 1) * elsz);
    memset(kids, 0, (l->n + 1) * elsz);
    *lp = l;
    return kids;
}

static int load_norm(tok *t, const tj *c, tnorm *n, ogk_error *e)
{
    const tj *ty = tj_get(c, "type");
    if (tj_streq(ty, "NFC"))
        n->type = N_NFC;
    else if (tj_streq(ty, "NFD"))
        n->type = N_NFD;
    else if (tj_streq(ty, "NFKC"))
        n->type = N_NFKC;
    else if (tj_streq(ty, "NFKD"))
        n->type = N_NFKD;
    else if (tj_streq(ty, "Replace")) {
        n->type = N_REPLACE;
        const tj *ct = tj_get(c, "content");
        if (pat_load(&n->pat, tj_get(c, "pattern"), &t->arena, e))
            return -1;
        n->str = tok_arena_strdup(&t->arena, ct && ct->type == TJ_STR ? ct->u.s : "", ct && ct->type == TJ_STR ? ct->n : 0);
        n->strn = ct && ct->type == TJ_STR ? ct->n : 0;
    } else if (tj_streq(ty, "Prepend")) {
        n->type = N_PREPEND;
        const tj *p = tj_get(c, "prepend");
        if (!p || p->type != TJ_STR)
            return ogk_fail(e, "normalizer Prepend: no prepend string");
        n->str = tok_arena_strdup(&t->arena, p->u.s, p->n);
        n->strn = p->n;
    } else if (tj_streq(ty, "Strip")) {
        n->type = N_STRIP;
        n->left = tj_bool(tj_get(c, "strip_left"), 0);
        n->right = tj_bool(tj_get(c, "strip_right"), 0);
    } else if (tj_streq(ty, "Sequence")) {
        n->type = N_SEQ;
        const tj *l;
        if (!(n->kids = load_seq(t, c, "normalizer", "normalizers", sizeof *n->kids, &l, e)))
            return -1;
        n->nkids = (int)l->n;
        for (uint32_t i = 0; i < l->n; i++)
            if (load_norm(t, &l->u.items[i], &n->kids[i], e))
                return -1;
    } else {
        return unsupported_type(e, "normalizer", ty);
    }
    return 0;
}

/* JS whitespace classes, for the pre-tokenizers whose patterns are native JS regexes */
#define JS_WS "\\t\\n\\x{0B}\\f\\r \\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}\\x{FEFF}"

static int load_pre(tok *t, const tj *c, tpre *p, ogk_error *e)
{
    const tj *ty = tj_get(c, "type");
    if (tj_streq(ty, "Split")) {
        p->type = P_SPLIT;
        if (pat_load(&p->pat, tj_get(c, "pattern"), &t->arena, e))
            return -1;
        p->invert = tj_bool(tj_get(c, "invert"), 0);
        const tj *b = tj_get(c, "behavior");
        /* the reference implements Removed and treats every other behavior as Isolated */
        p->behavior = (b && b->type == TJ_STR && b->n == 7 && !strncasecmp(b->u.s, "removed", 7)) ? B_REMOVED
                                                                                                   : B_ISOLATED;
    } else if (tj_streq(ty, "ByteLevel")) {
        p->type = P_BYTELEVEL;
        p->add_prefix_space = tj_bool(tj_get(c, "add_prefix_space"), 0);
        p->use_regex = tj_bool(tj_get(c, "use_regex"), 1);
        if (p->use_regex) {
            static const char gpt2[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" JS_WS
                                       "\\p{L}\\p{N}]+|[" JS_WS "]+(?![^" JS_WS "])|[" JS_WS "]+";
            p->re = regex_compile(gpt2, strlen(gpt2), 0, e);
            if (!p->re)
                return -1;
        }
    } else if (tj_streq(ty, "Metaspace")) {
        p->type = P_METASPACE;
        const tj *r = tj_get(c, "replacement"), *ps = tj_get(c, "prepend_scheme");
        const char *rs = r && r->type == TJ_STR ? r->u.s : "\xE2\x96\x81";
        size_t rn = r && r->type == TJ_STR ? r->n : 3;
        p->repl = tok_arena_strdup(&t->arena, rs, rn);
        p->repln = rn;
        p->prepend = 1;
        if (tj_streq(ps, "never"))
            p->prepend = 0;
        else if (tj_streq(ps, "first"))
            p->prepend = 2;
    } else if (tj_streq(ty, "Digits")) {
        p->type = P_DIGITS;
        const char *re = tj_bool(tj_get(c, "individual_digits"), 0) ? "[^0-9]+|[0-9]" : "[^0-9]+|[0-9]+";
        p->re = regex_compile(re, strlen(re), 0, e);
        if (!p->re)
            return -1;
    } else if (tj_streq(ty, "Whitespace")) {
        p->type = P_WHITESPACE;
        static const char ws[] = "[A-Za-z0-9_]+|[^A-Za-z0-9_" JS_WS "]+";
        p->re = regex_compile(ws, strlen(ws), 0, e);
        if (!p->re)
            return -1;
    } else if (tj_streq(ty, "WhitespaceSplit")) {
        p->type = P_WSSPLIT;
        static const char ws[] = "[^" JS_WS "]+";
        p->re = regex_compile(ws, strlen(ws), 0, e);
        if (!p->re)
            return -1;
    } else if (tj_streq(ty, "Sequence")) {
        p->type = P_SEQ;
        const tj *l;
        if (!(p->kids = load_seq(t, c, "pre_tokenizer", "pretokenizers", sizeof *p->kids, &l, e)))
            return -1;
        p->nkids = (int)l->n;
        for (uint32_t i = 0; i < l->n; i++)
            if (load_pre(t, &l->u.items[i], &p->kids[i], e))
                return -1;
    } else {
        return unsupported_type(e, "pre_tokenizer", ty);
    }
    return 0;
}

static int load_dec(tok *t, const tj *c, tdec *d, ogk_error *e)
{
    const tj *ty = tj_get(c, "type");
    if (tj_streq(ty, "ByteLevel")) {
        d->type = D_BYTELEVEL;
    } else if (tj_streq(ty, "Metaspace")) {
        d->type = D_METASPACE;
        const tj *r = tj_get(c, "replacement");
        const char *rs = r && r->type == TJ_STR ? r->u.s : "\xE2\x96\x81";
        d->strn = r && r->type == TJ_STR ? r->n : 3;
        d->str = tok_arena_strdup(&t->arena, rs, d->strn);
    } else if (tj_streq(ty, "ByteFallback")) {
        d->type = D_BYTEFALLBACK;
    } else if (tj_streq(ty, "Fuse")) {
        d->type = D_FUSE;
    } else if (tj_streq(ty, "Strip")) {
        d->type = D_STRIP;
        const tj *ct = tj_get(c, "content"), *st = tj_get(c, "start"), *sp = tj_get(c, "stop");
        d->strn = ct && ct->type == TJ_STR ? ct->n : 0;
        d->str = tok_arena_strdup(&t->arena, d->strn ? ct->u.s : "", d->strn);
        d->start = st && st->type == TJ_NUM ? (int)st->u.num : 0;
        d->stop = sp && sp->type == TJ_NUM ? (int)sp->u.num : 0;
    } else if (tj_streq(ty, "Replace")) {
        d->type = D_REPLACE;
        if (pat_load(&d->pat, tj_get(c, "pattern"), &t->arena, e))
            return -1;
        const tj *ct = tj_get(c, "content");
        d->strn = ct && ct->type == TJ_STR ? ct->n : 0;
        d->str = tok_arena_strdup(&t->arena, d->strn ? ct->u.s : "", d->strn);
    } else if (tj_streq(ty, "Sequence")) {
        d->type = D_SEQ;
        const tj *l;
        if (!(d->kids = load_seq(t, c, "decoder", "decoders", sizeof *d->kids, &l, e)))
            return -1;
        d->nkids = (int)l->n;
        for (uint32_t i = 0; i < l->n; i++)
            if (load_dec(t, &l->u.items[i], &d->kids[i], e))
                return -1;
    } else {
        return unsupported_type(e, "decoder", ty);
    }
    return 0;
}

static void free_pat(tpat *p)
{
    if (p->re)
        pcre2_code_free(p->re);
}
static void free_norm(tnorm *n)
{
    if (!n)
        return;
    free_pat(&n->pat);
    for (int i = 0; i < n->nkids; i++)
        free_norm(&n->kids[i]);
}
static void free_pre(tpre *p)
{
    if (!p)
        return;
    free_pat(&p->pat);
    if (p->re)
        pcre2_code_free(p->re);
    for (int i = 0; i < p->nkids; i++)
        free_pre(&p->kids[i]);
}
static void free_dec(tdec *d)
{
    if (!d)
        return;
    free_pat(&d->pat);
    for (int i = 0; i < d->nkids; i++)
        free_dec(&d->kids[i]);
}

static void bpe_work_free(void *p);

void tok_free(tok *t)
{
    if (!t)
        return;
    free_norm(t->norm);
    free_pre(t->pre);
    free_dec(t->dec);
    free(t->sym);
    free(t->symn);
    free(t->is_tok);
    free(t->hslot);
    free(t->mkey);
    free(t->mrank);
    free(t->mres);
    free(t->amap);
    free(t->split_raw);
    free(t->split_norm);
    free(t->split_norm_s);
    free(t->split_norm_n);
    free(t->special_strs);
    free(t->special_n);
    free(t->pp_items);
    if (t->md)
        pcre2_match_data_free(t->md);
    bpe_work_free(t->bw);
    if (t->cache) {
        for (uint32_t i = 0; i < CACHE_SIZE; i++) {
            free(t->cache[i].key);
            free(t->cache[i].ids);
        }
        free(t->cache);
    }
    tok_arena_free(&t->arena);
    free(t);
}

static int normalize_text(tok *t, const tnorm *n, const char *s, size_t len, tok_buf *out);

static void amap_put(tok *t, const char *s, uint32_t n, int idx)
{
    uint32_t mask = t->amapcap - 1;
    for (uint32_t i = (uint32_t)hash_bytes(s, n) & mask;; i = (i + 1) & mask) {
        if (!t->amap[i].s || (t->amap[i].n == n && !memcmp(t->amap[i].s, s, n))) {
            t->amap[i].s = s;
            t->amap[i].n = n;
            t->amap[i].idx = idx;
            return;
        }
    }
}

static int amap_get(const tok *t, const char *s, size_t n)
{
    if (!t->amapcap)
        return -1;
    uint32_t mask = t->amapcap - 1;
    for (uint32_t i = (uint32_t)hash_bytes(s, n) & mask;; i = (i + 1) & mask) {
        if (!t->amap[i].s)
            return -1;
        if (t->amap[i].n == n && !memcmp(t->amap[i].s, s, n))
            return t->amap[i].idx;
    }
}

static void bytes_to_unicode(tok *t)
{
    int n = 0;
    for (int i = 0; i < 0x144; i++)
        t->bl_dec[i] = -1;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        uint32_t cp = printable ? (uint32_t)b : (uint32_t)(256 + n++);
        t->bl_encn[b] = (uint8_t)tok_utf8_enc(cp, t->bl_enc[b]);
        t->bl_dec[cp] = (int16_t)b;
    }
}

static char *cfg_token_string(const json_t *v)
{
    if (json_is_object(v))
        v = json_object_get(v, "content");
    return json_is_string(v) ? strdup(json_string_value(v)) : NULL;
}

static int load_config(tok *t, const char *cfg, size_t len, ogk_error *e)
{
    t->cleanup = 1;
    t->bos_id = t->eos_id = -1;
    json_t *extra_special = NULL;
    json_t *root = NULL;
    if (cfg) {
        json_error_t je;
        root = json_loadb(cfg, len, JSON_DECODE_INT_AS_REAL, &je);
        if (!root || !json_is_object(root)) {
            json_decref(root);
            return ogk_fail(e, "tokenizer_config.json: line %d: %s", je.line, root ? "not an object" : je.text);
        }
        char *b = cfg_token_string(json_object_get(root, "bos_token"));
        char *s = cfg_token_string(json_object_get(root, "eos_token"));
        if (b) {
            t->bos = tok_arena_strdup(&t->arena, b, strlen(b));
            t->bos_id = sym_find(t, b, strlen(b));
        }
        if (s) {
            t->eos = tok_arena_strdup(&t->arena, s, strlen(s));
            t->eos_id = sym_find(t, s, strlen(s));
        }
        free(b);
        free(s);
        json_t *cu = json_object_get(root, "clean_up_tokenization_spaces");
        if (json_is_boolean(cu))
            t->cleanup = json_is_true(cu);
        json_t *ct = json_object_get(root, "chat_template");
        if (json_is_string(ct)) {
            t->chat_template = tok_arena_strdup(&t->arena, json_string_value(ct), json_string_length(ct));
        } else if (json_is_array(ct)) {
            size_t i;
            json_t *it;
            json_array_foreach(ct, i, it) {
                json_t *name = json_object_get(it, "name"), *tpl = json_object_get(it, "template");
                if (json_is_string(name) && !strcmp(json_string_value(name), "default") && json_is_string(tpl))
                    t->chat_template = tok_arena_strdup(&t->arena, json_string_value(tpl), json_string_length(tpl));
            }
        }
        extra_special = json_object_get(root, "additional_special_tokens");
    }
    size_t nextra = json_is_array(extra_special) ? json_array_size(extra_special) : 0;
    t->special_strs = calloc((size_t)t->nadded + nextra + 1, sizeof(char *));
    t->special_n = calloc((size_t)t->nadded + nextra + 1, sizeof(uint32_t));
    if (!t->special_strs || !t->special_n) {
        json_decref(root);
        return ogk_fail(e, "out of memory");
    }
    for (int i = 0; i < t->nadded; i++) {
        if (t->added[i].special) {
            t->special_strs[t->nspecial] = t->added[i].s;
            t->special_n[t->nspecial++] = t->added[i].n;
        }
    }
    for (size_t i = 0; i < nextra; i++) {
        char *s = cfg_token_string(json_array_get(extra_special, i));
        if (!s)
            continue;
        size_t n = strlen(s);
        int dup = 0;
        for (int j = 0; j < t->nspecial; j++)
            dup |= t->special_n[j] == n && !memcmp(t->special_strs[j], s, n);
        if (!dup) {
            t->special_strs[t->nspecial] = tok_arena_strdup(&t->arena, s, n);
            t->special_n[t->nspecial++] = (uint32_t)n;
        }
        free(s);
    }
    json_decref(root);
    return 0;
}

static int load_model(tok *t, const tj *m, const tj *added, ogk_error *e)
{
    const tj *ty = tj_get(m, "type");
    if (ty && !tj_streq(ty, "BPE"))
        return ogk_fail(e, "unsupported model type '%.*s' (only BPE)", ty->type == TJ_STR ? (int)ty->n : 1,
                        ty->type == TJ_STR ? ty->u.s : "?");
    const tj *vocab = tj_get(m, "vocab"), *merges = tj_get(m, "merges");
    if (!vocab || vocab->type != TJ_OBJ)
        return ogk_fail(e, "tokenizer.json: model.vocab is not an object");
    if (merges && merges->type != TJ_ARR)
        return ogk_fail(e, "tokenizer.json: model.merges is not an array");
    const tj *eow = tj_get(m, "end_of_word_suffix"), *cws = tj_get(m, "continuing_subword_suffix");
    if ((eow && eow->type == TJ_STR && eow->n) || (cws && cws->type == TJ_STR && cws->n))
        return ogk_fail(e, "unsupported BPE option: end_of_word_suffix / continuing_subword_suffix");
    int32_t maxid = -1;
    for (uint32_t i = 0; i < vocab->n; i++) {
        const tj *v = &vocab->u.items[2 * i + 1];
        if (v->type != TJ_NUM || v->u.num < 0 || v->u.num > 16777216 || v->u.num != (int32_t)v->u.num)
            return ogk_fail(e, "tokenizer.json: vocab entry %u: id is not an integer in 0..16777216", i);
        if ((int32_t)v->u.num > maxid)
            maxid = (int32_t)v->u.num;
    }
    for (uint32_t i = 0; added && added->type == TJ_ARR && i < added->n; i++) {
        const tj *id = tj_get(&added->u.items[i], "id");
        if (id && id->type == TJ_NUM && id->u.num >= 0 && id->u.num <= 16777216 && (int32_t)id->u.num > maxid)
            maxid = (int32_t)id->u.num;
    }
    uint32_t nm = merges ? merges->n : 0;
    if (sym_grow(t, maxid + 1 + 1024))
        return ogk_fail(e, "out of memory");
    for (uint32_t i = 0; i < vocab->n; i++) {
        const tj *k = &vocab->u.items[2 * i];
        int32_t id = (int32_t)vocab->u.items[2 * i + 1].u.num;
        int rc = tok_define(t, id, k->u.s, k->n);
        if (rc == -2)
            return ogk_fail(e, "tokenizer.json: vocab: id %d is given to two tokens", id);
        if (rc)
            return ogk_fail(e, "out of memory");
    }
    t->byte_fallback = tj_bool(tj_get(m, "byte_fallback"), 0);
    t->ignore_merges = tj_bool(tj_get(m, "ignore_merges"), 0);
    t->fuse_unk = tj_bool(tj_get(m, "fuse_unk"), 0);
    const tj *unk = tj_get(m, "unk_token");
    t->unk_id = -1;
    if (unk && unk->type == TJ_STR) {
        t->unk_token = tok_arena_strdup(&t->arena, unk->u.s, unk->n);
        t->unk_id = sym_find(t, unk->u.s, unk->n);
    }
    /* merges */
    uint32_t cap = 1024;
    while (cap < nm * 2 + 2)
        cap *= 2;
    t->mcap = cap;
    t->mkey = malloc(cap * sizeof *t->mkey);
    t->mrank = malloc(cap * sizeof *t->mrank);
    t->mres = malloc(cap * sizeof *t->mres);
    if (!t->mkey || !t->mrank || !t->mres)
        return ogk_fail(e, "out of memory");
    for (uint32_t i = 0; i < cap; i++)
        t->mres[i] = INT32_MIN;
    /* ids up to the largest vocab or added id are tokens (added ones are defined later); extras (merge
     * parts that are not tokens) are numbered after them */
    t->nsym = t->ntok = maxid + 1;
    char tmp[1024];
    for (uint32_t i = 0; i < nm; i++) {
        const tj *mg = &merges->u.items[i];
        const char *a, *b;
        size_t an, bn;
        if (mg->type == TJ_ARR && mg->n == 2 && mg->u.items[0].type == TJ_STR && mg->u.items[1].type == TJ_STR) {
            a = mg->u.items[0].u.s;
            an = mg->u.items[0].n;
            b = mg->u.items[1].u.s;
            bn = mg->u.items[1].n;
        } else if (mg->type == TJ_STR) {
            const char *sp = memchr(mg->u.s, ' ', mg->n);
            if (!sp)
                return ogk_fail(e, "tokenizer.json: merge %u has no space: '%.*s'", i, (int)mg->n, mg->u.s);
            a = mg->u.s;
            an = (size_t)(sp - a);
            b = sp + 1;
            const char *sp2 = memchr(b, ' ', mg->n - an - 1);
            bn = sp2 ? (size_t)(sp2 - b) : mg->n - an - 1; /* JS split(" ", 2) drops the rest */
        } else {
            return ogk_fail(e, "tokenizer.json: merge %u is neither \"a b\" nor [\"a\", \"b\"]", i);
        }
        if (an + bn > sizeof tmp)
            return ogk_fail(e, "tokenizer.json: merge %u is too long", i);
        int32_t sa = sym_intern(t, a, an), sb = sym_intern(t, b, bn);
        memcpy(tmp, a, an);
        memcpy(tmp + an, b, bn);
        int32_t sr = sym_intern(t, tmp, an + bn);
        if (sa < 0 || sb < 0 || sr < 0)
            return ogk_fail(e, "out of memory");
        merge_put(t, sa, sb, i, sr);
    }
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->byte_id[b] = sym_find(t, name, 6);
    }
    return 0;
}

static int load_added(tok *t, const tj *list, ogk_error *e)
{
    if (!list)
        return 0;
    if (list->type != TJ_ARR)
        return ogk_fail(e, "tokenizer.json: added_tokens is not an array");
    t->added = tok_arena_alloc(&t->arena, (list->n + 1) * sizeof *t->added);
    if (!t->added)
        return ogk_fail(e, "out of memory");
    for (uint32_t i = 0; i < list->n; i++) {
        const tj *a = &list->u.items[i], *id = tj_get(a, "id"), *c = tj_get(a, "content");
        if (!id || id->type != TJ_NUM || id->u.num < 0 || id->u.num > 16777216 || !c || c->type != TJ_STR || !c->n)
            return ogk_fail(e, "tokenizer.json: added_tokens[%u]: needs an integer id and a non-empty content", i);
        added_tok *at = &t->added[t->nadded++];
        at->id = (int32_t)id->u.num;
        at->s = tok_arena_strdup(&t->arena, c->u.s, c->n);
        at->n = c->n;
        at->lstrip = tj_bool(tj_get(a, "lstrip"), 0);
        at->rstrip = tj_bool(tj_get(a, "rstrip"), 0);
        at->special = tj_bool(tj_get(a, "special"), 0);
        at->normalized = tj_bool(tj_get(a, "normalized"), !at->special);
        int rc = tok_define(t, at->id, at->s, at->n);
        if (rc == -2)
            return ogk_fail(e, "tokenizer.json: added_tokens[%u]: id %d already belongs to another token", i, at->id);
        if (rc)
            return ogk_fail(e, "out of memory");
    }
    uint32_t cap = 16;
    while (cap < (uint32_t)t->nadded * 4 + 4)
        cap *= 2;
    t->amapcap = cap;
    t->amap = calloc(cap, sizeof *t->amap);
    t->split_raw = calloc((size_t)t->nadded + 1, sizeof(int));
    t->split_norm = calloc((size_t)t->nadded + 1, sizeof(int));
    t->split_norm_s = calloc((size_t)t->nadded + 1, sizeof(char *));
    t->split_norm_n = calloc((size_t)t->nadded + 1, sizeof(uint32_t));
    if (!t->amap || !t->split_raw || !t->split_norm || !t->split_norm_s || !t->split_norm_n)
        return ogk_fail(e, "out of memory");
    for (int i = 0; i < t->nadded; i++) {
        added_tok *at = &t->added[i];
        amap_put(t, at->s, at->n, i);
        if (at->normalized && t->norm) {
            tok_buf nb = {0};
            if (normalize_text(t, t->norm, at->s, at->n, &nb)) {
                free(nb.p);
                return ogk_fail(e, "added token '%s': normalization failed", at->s);
            }
            char *ns = tok_arena_strdup(&t->arena, nb.p ? nb.p : "", nb.n);
            free(nb.p);
            amap_put(t, ns, (uint32_t)nb.n, i);
            if (nb.n) {
                t->split_norm_s[t->nsplit_norm] = ns;
                t->split_norm_n[t->nsplit_norm] = (uint32_t)nb.n;
                t->split_norm[t->nsplit_norm++] = i;
                t->first_norm[(unsigned char)ns[0]] = 1;
            }
        } else {
            t->split_raw[t->nsplit_raw++] = i;
            t->first_raw[(unsigned char)at->s[0]] = 1;
        }
    }
    return 0;
}

static int load_post(tok *t, const tj *pp, ogk_error *e)
{
    if (!pp || pp->type == TJ_NULL)
        return 0;
    const tj *ty = tj_get(pp, "type");
    if (tj_streq(ty, "ByteLevel"))
        return 0;
    if (tj_streq(ty, "TemplateProcessing")) {
        const tj *single = tj_get(pp, "single");
        if (!single || single->type != TJ_ARR)
            return ogk_fail(e, "post_processor TemplateProcessing: no 'single' template");
        t->pp_template = 1;
        t->pp_items = calloc(single->n + 1, sizeof(int32_t));
        if (!t->pp_items)
            return ogk_fail(e, "out of memory");
        for (uint32_t i = 0; i < single->n; i++) {
            const tj *it = &single->u.items[i], *st = tj_get(it, "SpecialToken"), *sq = tj_get(it, "Sequence");
            if (st) {
                const tj *id = tj_get(st, "id");
                if (!id || id->type != TJ_STR)
                    return ogk_fail(e, "post_processor: SpecialToken without id");
                int a = amap_get(t, id->u.s, id->n);
                int32_t tid = a >= 0 ? t->added[a].id : sym_find(t, id->u.s, id->n);
                if (tid < 0 || tid >= t->ntok || !t->is_tok[tid])
                    return ogk_fail(e, "post_processor: special token '%.*s' is not in the vocabulary", (int)id->n,
                                    id->u.s);
                t->pp_items[t->npp_items++] = tid;
            } else if (sq) {
                if (!tj_streq(tj_get(sq, "id"), "A"))
                    return ogk_fail(e, "post_processor: single template refers to sequence B");
                t->pp_items[t->npp_items++] = -1;
            }
        }
        return 0;
    }
    return unsupported_type(e, "post_processor", ty);
}

tok *tok_load(const char *json, size_t len, const char *config, size_t config_len, ogk_error *e)
{
    tok *t = calloc(1, sizeof *t);
    if (!t) {
        ogk_fail(e, "out of memory");
        return NULL;
    }
    tok_arena tmp = {0}; /* the parsed tokenizer.json, freed once loaded */
    tj root;
    if (tj_parse(&tmp, json, len, "tokenizer.json", &root, e))
        goto fail;
    if (root.type != TJ_OBJ) {
        ogk_fail(e, "tokenizer.json: not a JSON object");
        goto fail;
    }
    const tj *model = tj_get(&root, "model");
    if (!model || model->type != TJ_OBJ) {
        ogk_fail(e, "tokenizer.json: no model object");
        goto fail;
    }
    bytes_to_unicode(t);
    for (int i = 0; i < 0x800; i++)
        t->small_sym[i] = -1;
    if (load_model(t, model, tj_get(&root, "added_tokens"), e))
        goto fail;
    const tj *n = tj_get(&root, "normalizer"), *p = tj_get(&root, "pre_tokenizer"), *d = tj_get(&root, "decoder");
    if (n && n->type == TJ_OBJ) {
        t->norm = tok_arena_alloc(&t->arena, sizeof *t->norm);
        memset(t->norm, 0, sizeof *t->norm);
        if (load_norm(t, n, t->norm, e))
            goto fail;
    }
    if (p && p->type == TJ_OBJ) {
        t->pre = tok_arena_alloc(&t->arena, sizeof *t->pre);
        memset(t->pre, 0, sizeof *t->pre);
        if (load_pre(t, p, t->pre, e))
            goto fail;
    }
    if (d && d->type == TJ_OBJ) {
        t->dec = tok_arena_alloc(&t->arena, sizeof *t->dec);
        memset(t->dec, 0, sizeof *t->dec);
        if (load_dec(t, d, t->dec, e))
            goto fail;
    }
    if (load_added(t, tj_get(&root, "added_tokens"), e) || load_post(t, tj_get(&root, "post_processor"), e))
        goto fail;
    if (t->unk_token)
        t->unk_id = sym_find(t, t->unk_token, strlen(t->unk_token));
    if (t->unk_id >= t->ntok)
        t->unk_id = -1;
    for (int b = 0; b < 256; b++)
        if (t->byte_id[b] >= t->ntok || (t->byte_id[b] >= 0 && !t->is_tok[t->byte_id[b]]))
            t->byte_id[b] = -1;
    for (uint32_t cp = 0; cp < 0x800; cp++) {
        char u[4];
        int k = tok_utf8_enc(cp, u);
        t->small_sym[cp] = sym_find(t, u, (size_t)k);
    }
    if (load_config(t, config, config_len, e))
        goto fail;
    t->md = pcre2_match_data_create(4, NULL);
    t->cache = calloc(CACHE_SIZE, sizeof *t->cache);
    if (!t->md || !t->cache) {
        ogk_fail(e, "out of memory");
        goto fail;
    }
    tok_arena_free(&tmp);
    return t;
fail:
    tok_arena_free(&tmp);
    tok_free(t);
    return NULL;
}

tok *tok_load_dir(const char *dir, ogk_error *e)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    ogk_map m;
    if (ogk_map_open(&m, path, e))
        return NULL;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    size_t cn = 0;
    char *cfg = NULL;
    if (access(path, F_OK) == 0) {
        cfg = ogk_read_file(path, &cn, e);
        if (!cfg) {
            ogk_map_close(&m);
            return NULL;
        }
    }
    tok *t = tok_load((const char *)m.data, m.size, cfg, cn, e);
    free(cfg);
    ogk_map_close(&m);
    return t;
}

/* ------------------------------------------------------------------------------------------------ */
/* normalizers                                                                                       */

/* The next match of re in s[0, n) from *start on: its span [*a, *b), and *start moved past it (one character
 * past an empty match, as JS regex iteration does). 1 found, 0 no more, -1 match error (t->regex_rc set). */
static int next_match(tok *t, pcre2_code *re, const char *s, size_t n, size_t *start, size_t *a, size_t *b)
{
    if (*start > n)
        return 0;
    int rc = pcre2_match(re, (PCRE2_SPTR)s, n, *start, PCRE2_NO_UTF_CHECK, t->md, NULL);
    if (rc == PCRE2_ERROR_NOMATCH)
        return 0;
    if (rc < 0) {
        t->regex_rc = rc;
        return -1;
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(t->md);
    *a = ov[0];
    *b = ov[1];
    *start = *b > *a ? *b : *b + (*b < n ? (size_t)tok_utf8_len((unsigned char)s[*b]) : 1);
    return 1;
}

/* Replace every (non-overlapping, JS replaceAll) match of pattern p in s with rep, appending to out. */
static int pat_replace(tok *t, const tpat *p, const char *s, size_t n, const char *rep, size_t repn, tok_buf *out)
{
    if (!p->is_regex) {
        if (!p->litn)
            return tok_buf_put(out, s, n); /* JS replaceAll("") would interleave; no tokenizer uses it */
        size_t i = 0;
        while (i < n) {
            const char *hit = p->litn <= n - i ? memmem(s + i, n - i, p->lit, p->litn) : NULL;
            if (!hit)
                break;
            if (tok_buf_put(out, s + i, (size_t)(hit - (s + i))) || tok_buf_put(out, rep, repn))
                return -1;
            i = (size_t)(hit - s) + p->litn;
        }
        return tok_buf_put(out, s + i, n - i);
    }
    size_t i = 0, start = 0, a, b;
    int rc;
    while ((rc = next_match(t, p->re, s, n, &start, &a, &b)) > 0) {
        if (tok_buf_put(out, s + i, a - i) || tok_buf_put(out, rep, repn))
            return -1;
        i = b;
    }
    if (rc < 0)
        return -1;
    return tok_buf_put(out, s + i, n - i);
}

static int normalize_text(tok *t, const tnorm *nz, const char *s, size_t len, tok_buf *out)
{
    out->n = 0;
    switch (nz->type) {
    case N_NFC:
    case N_NFD:
    case N_NFKC:
    case N_NFKD: {
        static const tok_nf forms[] = {TOK_NFC, TOK_NFD, TOK_NFKC, TOK_NFKD};
        size_t on;
        char *o = tok_normalize(forms[nz->type], s, len, &on);
        if (!o)
            return -1;
        int rc = tok_buf_put(out, o, on);
        free(o);
        return rc;
    }
    case N_REPLACE: return pat_replace(t, &nz->pat, s, len, nz->str, nz->strn, out);
    case N_PREPEND: return tok_buf_put(out, nz->str, nz->strn) || tok_buf_put(out, s, len) ? -1 : 0;
    case N_STRIP: {
        size_t a = 0, b = len;
        uint32_t cp;
        while (nz->left && a < b) {
            int k = tok_utf8_dec((const unsigned char *)s + a, &cp);
            if (!tok_js_space(cp))
                break;
            a += (size_t)k;
        }
        while (nz->right && b > a) {
            size_t q = b - 1;
            while (q > a && ((unsigned char)s[q] & 0xC0) == 0x80)
                q--;
            tok_utf8_dec((const unsigned char *)s + q, &cp);
            if (!tok_js_space(cp))
                break;
            b = q;
        }
        return tok_buf_put(out, s + a, b - a);
    }
    case N_SEQ: {
        tok_buf cur = {0}, nxt = {0};
        if (tok_buf_put(&cur, s, len))
            return -1;
        for (int i = 0; i < nz->nkids; i++) {
            if (normalize_text(t, &nz->kids[i], cur.p, cur.n, &nxt)) {
                free(cur.p);
                free(nxt.p);
                return -1;
            }
            tok_buf sw = cur;
            cur = nxt;
            nxt = sw;
        }
        int rc = tok_buf_put(out, cur.p, cur.n);
        free(cur.p);
        free(nxt.p);
        return rc;
    }
    }
    return -1;
}

/* ------------------------------------------------------------------------------------------------ */
/* pre-tokenizers: lists of spans into a work buffer                                                 */

typedef struct {
    uint32_t off, len;
} span;
typedef struct {
    span *v;
    size_t n, cap;
} spans;

static int spans_push(spans *s, uint32_t off, uint32_t len)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        span *v = realloc(s->v, cap * sizeof *v);
        if (!v)
            return -1;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n].off = off;
    s->v[s->n].len = len;
    s->n++;
    return 0;
}

/* JS regex_split / match semantics: mode 0 = Isolated (gaps and non-empty matches), 1 = matches only,
 * 2 = gaps only (Removed). After an empty match the search resumes one character later.
 * regex_pieces_some goes on from *prev / *start (0 / 0 at first) and stops after about `most` pieces:
 * 1 when there are more, 0 when done, -1 on a match error. */
static int regex_pieces_some(tok *t, pcre2_code *re, const char *w, span in, int mode, spans *out, size_t *prev,
                             size_t *start, size_t most)
{
    const char *s = w + in.off;
    size_t n = in.len, a, b, n0 = out->n;
    int rc;
    while (out->n - n0 < most && (rc = next_match(t, re, s, n, start, &a, &b)) > 0) {
        if (mode != 1 && *prev < a && spans_push(out, in.off + (uint32_t)*prev, (uint32_t)(a - *prev)))
            return -1;
        if (mode != 2 && b > a && spans_push(out, in.off + (uint32_t)a, (uint32_t)(b - a)))
            return -1;
        *prev = b;
    }
    if (out->n - n0 >= most)
        return 1;
    if (rc < 0)
        return -1;
    if (mode != 1 && *prev < n && spans_push(out, in.off + (uint32_t)*prev, (uint32_t)(n - *prev)))
        return -1;
    *prev = n;
    return 0;
}

static int regex_pieces(tok *t, pcre2_code *re, const char *w, span in, int mode, spans *out)
{
    size_t prev = 0, start = 0;
    return regex_pieces_some(t, re, w, in, mode, out, &prev, &start, SIZE_MAX) < 0 ? -1 : 0;
}

/* the pre-tokenizer p over the spans in (a Sequence from its kid number `from` on) */
static int pretokenize_from(tok *t, const tpre *p, tok_buf *w, spans *in, spans *out, int section_index, int from)
{
    out->n = 0;
    if (p->type == P_SEQ) {
        spans a = {0}, b = {0};
        int rc = 0;
        for (size_t i = 0; i < in->n && !rc; i++)
            rc = spans_push(&a, in->v[i].off, in->v[i].len);
        for (int k = from; k < p->nkids && !rc; k++) {
            rc = pretokenize_from(t, &p->kids[k], w, &a, &b, section_index, 0);
            spans sw = a;
            a = b;
            b = sw;
        }
        for (size_t i = 0; i < a.n && !rc; i++)
            rc = spans_push(out, a.v[i].off, a.v[i].len);
        free(a.v);
        free(b.v);
        return rc;
    }
    for (size_t i = 0; i < in->n; i++) {
        span sp = in->v[i];
        switch (p->type) {
        case P_SPLIT:
            if (p->pat.is_regex) {
                if (regex_pieces(t, p->pat.re, w->p, sp, p->invert ? 1 : p->behavior == B_REMOVED ? 2 : 0, out))
                    return -1;
            } else {
                /* String pattern: invert keeps only the matches; otherwise (Isolated, and Removed — the
                 * reference's split keeps its captured delimiter) gaps and matches */
                const char *s = w->p + sp.off;
                size_t k = 0, prev = 0;
                while (p->pat.litn && k + p->pat.litn <= sp.len) {
                    const char *hit = memmem(s + k, sp.len - k, p->pat.lit, p->pat.litn);
                    if (!hit)
                        break;
                    size_t a = (size_t)(hit - s);
                    if (!p->invert && prev < a && spans_push(out, sp.off + (uint32_t)prev, (uint32_t)(a - prev)))
                        return -1;
                    if (spans_push(out, sp.off + (uint32_t)a, (uint32_t)p->pat.litn))
                        return -1;
                    k = prev = a + p->pat.litn;
                }
                if (!p->invert && prev < sp.len && spans_push(out, sp.off + (uint32_t)prev, sp.len - (uint32_t)prev))
                    return -1;
            }
            break;
        case P_BYTELEVEL: {
            spans words = {0};
            int rc = 0;
            uint32_t base = sp.off;
            if (p->add_prefix_space && !(sp.len && w->p[sp.off] == ' ')) {
                /* prefix a space: copy " " + piece to the end of the work buffer */
                base = (uint32_t)w->n;
                rc = tok_buf_reserve(w, sp.len + 1) || tok_buf_put(w, " ", 1) || tok_buf_put(w, w->p + sp.off, sp.len);
                sp.off = base;
                sp.len++;
            }
            if (!rc && p->use_regex)
                rc = regex_pieces(t, p->re, w->p, sp, 1, &words);
            else if (!rc)
                rc = spans_push(&words, sp.off, sp.len);
            for (size_t j = 0; j < words.n && !rc; j++) {
                uint32_t o = (uint32_t)w->n;
                if ((rc = tok_buf_reserve(w, (size_t)words.v[j].len * 2)) != 0)
                    break;
                const unsigned char *src = (const unsigned char *)w->p + words.v[j].off;
                char *dst = w->p + w->n;
                for (uint32_t q = 0; q < words.v[j].len; q++) {
                    unsigned c = src[q];
                    dst[0] = t->bl_enc[c][0];
                    if (t->bl_encn[c] == 2) {
                        dst[1] = t->bl_enc[c][1];
                        dst += 2;
                    } else {
                        dst += 1;
                    }
                }
                w->n = (size_t)(dst - w->p);
                w->p[w->n] = 0;
                rc = spans_push(out, o, (uint32_t)w->n - o);
            }
            free(words.v);
            if (rc)
                return -1;
            break;
        }
        case P_METASPACE: {
            uint32_t o = (uint32_t)w->n;
            const char *s = w->p + sp.off;
            int starts = sp.len >= p->repln && !memcmp(s, p->repl, p->repln);
            int pre = !starts && !(sp.len && s[0] == ' ') && (p->prepend == 1 || (p->prepend == 2 && section_index == 0));
            /* note: a leading ' ' becomes the replacement below, so it already "starts with" it */
            tok_buf tmp = {0};
            int rc = 0;
            if (pre)
                rc = tok_buf_put(&tmp, p->repl, p->repln);
            for (uint32_t q = 0; q < sp.len && !rc; q++)
                rc = s[q] == ' ' ? tok_buf_put(&tmp, p->repl, p->repln) : tok_buf_put(&tmp, s + q, 1);
            if (!rc)
                rc = tok_buf_put(w, tmp.p, tmp.n);
            free(tmp.p);
            if (rc || spans_push(out, o, (uint32_t)w->n - o))
                return -1;
            break;
        }
        case P_DIGITS:
        case P_WHITESPACE:
        case P_WSSPLIT:
            if (regex_pieces(t, p->re, w->p, sp, 1, out))
                return -1;
            break;
        }
    }
    return 0;
}

static int pretokenize(tok *t, const tpre *p, tok_buf *w, spans *in, spans *out, int section_index)
{
    return pretokenize_from(t, p, w, in, out, section_index, 0);
}

/* A pre-tokenizer whose first step is a regex Split cuts the text into pieces that the later steps treat
 * one by one: those pieces can be produced a window at a time (encode stops early on a long text). */
static const tpre *first_regex_split(const tpre *p)
{
    if (p && p->type == P_SEQ && p->nkids > 0)
        p = &p->kids[0];
    return p && p->type == P_SPLIT && p->pat.is_regex ? p : NULL;
}

/* ------------------------------------------------------------------------------------------------ */
/* BPE                                                                                               */

typedef struct {
    int32_t *v;
    size_t n, cap;
} idvec;

static int ids_push(idvec *v, int32_t id)
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

static void bpe_work_free(void *p)
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
    if (right < 0 || !merge_find(t, w->sym[left], w->sym[right], &rank, &res))
        return 0;
    hent e = {rank, w->start[left], left, w->sym[left], w->sym[right]};
    return heap_push(w, e);
}

static int emit_sym(const tok *t, int32_t sym, const char *s, uint32_t n, idvec *out)
{
    if (sym >= 0 && sym < t->ntok && t->is_tok[sym])
        return ids_push(out, sym);
    if (t->byte_fallback) {
        int all = 1;
        for (uint32_t i = 0; i < n; i++)
            all &= t->byte_id[(unsigned char)s[i]] >= 0;
        if (all) {
            for (uint32_t i = 0; i < n; i++)
                if (ids_push(out, t->byte_id[(unsigned char)s[i]]))
                    return -1;
            return 0;
        }
    }
    if (t->unk_id >= 0)
        return ids_push(out, t->unk_id);
    return 0; /* no unk token: the piece is dropped, as the reference does */
}

static int bpe_word(tok *t, bpe_work *w, const char *s, uint32_t n, idvec *out)
{
    if (!n)
        return 0;
    if (t->ignore_merges) {
        int32_t id = sym_find(t, s, n);
        if (id >= 0 && id < t->ntok && t->is_tok[id])
            return ids_push(out, id);
    }
    uint64_t h = 0;
    cache_ent *ce = NULL;
    if (n < 256) {
        h = hash_bytes(s, n);
        ce = &t->cache[h & (CACHE_SIZE - 1)];
        if (ce->key && ce->h == h && ce->keyn == n && !memcmp(ce->key, s, n)) {
            for (uint32_t i = 0; i < ce->nids; i++)
                if (ids_push(out, ce->ids[i]))
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
        w->sym[m] = cp < 0x800 ? t->small_sym[cp] : sym_find(t, s + i, (size_t)k);
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
        merge_find(t, e.a, e.b, &rank, &res);
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
        int a = amap_get(t, w + secs->v[i].off, secs->v[i].len);
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
    int rc = -1;
    if (tok_buf_put(&w, text, len) || split_added(t, w.p, 0, (uint32_t)len, 0, &raw))
        goto oom;
    apply_strip(t, w.p, &raw);
    if (add_special && t->pp_template) {
        for (int k = 0; k < t->npp_items && t->pp_items[k] >= 0; k++)
            if (ids_push(&ids, t->pp_items[k]))
                goto oom;
    }
    for (size_t si = 0; si < raw.n; si++) {
        section sec = raw.v[si];
        if (!sec.len)
            continue;
        int a = amap_get(t, w.p + sec.off, sec.len);
        if (a >= 0) {
            if (ids_push(&ids, t->added[a].id))
                goto oom;
            continue;
        }
        uint32_t off = sec.off, slen = sec.len;
        if (t->norm && !(t->norm->type <= N_NFKD && tok_nf_unchanged((tok_nf)t->norm->type, w.p + sec.off, sec.len))) {
            if (normalize_text(t, t->norm, w.p + sec.off, sec.len, &nb))
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
            int b = amap_get(t, w.p + ss.off, ss.len);
            if (b >= 0) {
                if (ids_push(&ids, t->added[b].id))
                    goto oom;
                continue;
            }
            in.n = 0;
            size_t from = ids.n;
            const tpre *fs = max_ids < SIZE_MAX ? first_regex_split(t->pre) : NULL;
            if (fs) {
                /* a window of the first split's pieces at a time through the rest and BPE */
                size_t prev = 0, start = 0;
                span sp = {ss.off, ss.len};
                int more = 1, mode = fs->invert ? 1 : fs->behavior == B_REMOVED ? 2 : 0;
                while (more) {
                    in.n = 0;
                    if ((more = regex_pieces_some(t, fs->pat.re, w.p, sp, mode, &in, &prev, &start, 4096)) < 0)
                        goto oom;
                    spans *pieces = &in;
                    if (fs != t->pre) {
                        if (pretokenize_from(t, t->pre, &w, &in, &out, (int)si, 1))
                            goto oom;
                        pieces = &out;
                    }
                    for (size_t k = 0; k < pieces->n; k++)
                        if (bpe_word(t, bwp, w.p + pieces->v[k].off, pieces->v[k].len, &ids))
                            goto oom;
                    if (ids.n > max_ids && !(t->fuse_unk && t->unk_id >= 0)) /* fuse_unk may still shrink them */
                        goto too_many;
                }
            } else {
                if (spans_push(&in, ss.off, ss.len))
                    goto oom;
                spans *pieces = &in;
                if (t->pre) {
                    if (pretokenize(t, t->pre, &w, &in, &out, (int)si))
                        goto oom;
                    pieces = &out;
                }
                for (size_t k = 0; k < pieces->n; k++) {
                    if (bpe_word(t, bwp, w.p + pieces->v[k].off, pieces->v[k].len, &ids))
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
            if (t->pp_items[k] >= 0 && ids_push(&ids, t->pp_items[k]))
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
    free(w.p);
    free(nb.p);
    free(raw.v);
    free(sub.v);
    free(in.v);
    free(out.v);
    free(ids.v);
    return rc;
}

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

static int bytelevel_flush(const tok *t, tok_buf *cur, strlist *out)
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
    if (!rc)
        rc = tok_utf8_sanitize((unsigned char *)bytes.p, bytes.n, &o, &on, &oc);
    if (!rc)
        rc = sl_push(out, o, on);
    free(o);
    free(bytes.p);
    cur->n = 0;
    return rc;
}

static int decode_chain(tok *t, const tdec *d, strlist *in, strlist *out)
{
    int rc = 0;
    switch (d->type) {
    case D_SEQ: {
        strlist cur = *in, nxt = {0};
        memset(in, 0, sizeof *in);
        for (int k = 0; k < d->nkids && !rc; k++) {
            rc = decode_chain(t, &d->kids[k], &cur, &nxt);
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
                    rc = bytelevel_flush(t, &cur, out);
                if (!rc)
                    rc = sl_push(out, in->s[i], in->n[i]);
            } else {
                rc = tok_buf_put(&cur, in->s[i], in->n[i]);
            }
        }
        if (!rc && cur.n)
            rc = bytelevel_flush(t, &cur, out);
        free(cur.p);
        return rc;
    }
    case D_METASPACE: {
        tpat p = {.lit = d->str, .litn = d->strn};
        for (size_t i = 0; i < in->cnt && !rc; i++) {
            tok_buf b = {0};
            rc = pat_replace(t, &p, in->s[i], in->n[i], " ", 1, &b);
            size_t skip = (i == 0 && b.n && b.p[0] == ' ') ? 1 : 0;
            if (!rc)
                rc = sl_push(out, b.p ? b.p + skip : "", b.n - skip);
            free(b.p);
        }
        return rc;
    }
    case D_REPLACE:
        for (size_t i = 0; i < in->cnt && !rc; i++) {
            tok_buf b = {0};
            rc = pat_replace(t, &d->pat, in->s[i], in->n[i], d->str, d->strn, &b);
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
            if (bytes.n) {
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
            size_t a = 0, b = in->n[i], cn = d->strn;
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
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->ntok || !t->is_tok[id]) {
            ogk_fail(e, "token id %d is not in the vocabulary (size %d)", id, t->ntok);
            goto done;
        }
        if (skip_special) {
            int sp = 0;
            for (int k = 0; k < t->nspecial && !sp; k++)
                sp = t->special_n[k] == t->symn[id] && !memcmp(t->special_strs[k], t->sym[id], t->symn[id]);
            if (sp)
                continue;
        }
        if (sl_push(&in, t->sym[id], t->symn[id]))
            goto oom;
    }
    tok_buf b = {0};
    if (t->dec) {
        if (decode_chain(t, t->dec, &in, &out))
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
            if (pat_replace(t, &p, b.p, b.n, cleanup_pairs[k][1], strlen(cleanup_pairs[k][1]), &nb) ||
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

/* ------------------------------------------------------------------------------------------------ */
/* streaming decoder: decode a window of ids and emit the growth of the text, holding back while it ends
 * in U+FFFD (an incomplete UTF-8 sequence that the next token may finish) */

struct tok_stream {
    tok *t;
    int skip_special;
    idvec ids;
    size_t prefix, read;
    char *out;
};

tok_stream *tok_stream_new(tok *t, int skip_special)
{
    tok_stream *s = calloc(1, sizeof *s);
    if (s) {
        s->t = t;
        s->skip_special = skip_special;
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
    if (ids_push(&s->ids, id)) {
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

/* ------------------------------------------------------------------------------------------------ */

int32_t tok_vocab_size(const tok *t) { return t->ntok; }
int32_t tok_token_to_id(const tok *t, const char *s, size_t len)
{
    int32_t id = sym_find(t, s, len);
    return id >= 0 && id < t->ntok && t->is_tok[id] ? id : -1;
}
const char *tok_id_to_token(const tok *t, int32_t id, size_t *len)
{
    if (id < 0 || id >= t->ntok || !t->is_tok[id])
        return NULL;
    if (len)
        *len = t->symn[id];
    return t->sym[id];
}
int tok_is_special(const tok *t, int32_t id)
{
    for (int i = 0; i < t->nadded; i++)
        if (t->added[i].id == id)
            return t->added[i].special;
    return 0;
}
const char *tok_bos_token(const tok *t) { return t->bos; }
const char *tok_eos_token(const tok *t) { return t->eos; }
int32_t tok_bos_id(const tok *t) { return t->bos_id; }
int32_t tok_eos_id(const tok *t) { return t->eos_id; }
const char *tok_chat_template(const tok *t) { return t->chat_template; }
