/* Tokenizer: the object (symbols, merges, added tokens), loading tokenizer.json + tokenizer_config.json,
 * and the lookups of tok.h. Semantics mirror @huggingface/tokenizers; see tok.h. Encoding is in
 * tok_encode.c (through tok_split.c and tok_bpe.c), decoding in tok_decode.c. */
#define _GNU_SOURCE
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "tok/tok_impl.h"

int32_t tk_sym_find(const tok *t, const char *s, size_t n)
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
    int32_t id = tk_sym_find(t, s, n);
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

int tk_merge_find(const tok *t, int32_t a, int32_t b, uint32_t *rank, int32_t *res)
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
        if (tk_pat_load(&n->pat, tj_get(c, "pattern"), &t->arena, e))
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
    } else if (tj_streq(ty, "Precompiled")) {
        n->type = N_PRECOMPILED;
        const tj *m = tj_get(c, "precompiled_charsmap");
        if (!m || m->type != TJ_STR)
            return ogk_fail(e, "normalizer Precompiled: no precompiled_charsmap string");
        return tk_charsmap_load(t, n, m->u.s, m->n, e);
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
        if (tk_pat_load(&p->pat, tj_get(c, "pattern"), &t->arena, e))
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
            p->re = tk_regex_compile(gpt2, strlen(gpt2), 0, e);
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
        p->re = tk_regex_compile(re, strlen(re), 0, e);
        if (!p->re)
            return -1;
    } else if (tj_streq(ty, "Whitespace")) {
        p->type = P_WHITESPACE;
        static const char ws[] = "[A-Za-z0-9_]+|[^A-Za-z0-9_" JS_WS "]+";
        p->re = tk_regex_compile(ws, strlen(ws), 0, e);
        if (!p->re)
            return -1;
    } else if (tj_streq(ty, "WhitespaceSplit")) {
        p->type = P_WSSPLIT;
        static const char ws[] = "[^" JS_WS "]+";
        p->re = tk_regex_compile(ws, strlen(ws), 0, e);
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
        if (tk_pat_load(&d->pat, tj_get(c, "pattern"), &t->arena, e))
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
    tk_bpe_work_free(t->bw);
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

int tk_amap_get(const tok *t, const char *s, size_t n)
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
        if (!root)
            return ogk_fail(e, "tokenizer_config.json: line %d: %s", je.line, je.text);
        if (!json_is_object(root)) {
            json_decref(root);
            return ogk_fail(e, "tokenizer_config.json: not a JSON object");
        }
        char *b = cfg_token_string(json_object_get(root, "bos_token"));
        char *s = cfg_token_string(json_object_get(root, "eos_token"));
        if (b) {
            t->bos = tok_arena_strdup(&t->arena, b, strlen(b));
            t->bos_id = tk_sym_find(t, b, strlen(b));
        }
        if (s) {
            t->eos = tok_arena_strdup(&t->arena, s, strlen(s));
            t->eos_id = tk_sym_find(t, s, strlen(s));
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
            /* named templates, [{"name": "default", "template": ...}, {"name": "tool_use", ...}]: "default"
             * (else the first, as the pack import takes), and "tool_use" for conversations that carry tools */
            size_t i;
            json_t *it, *dflt = NULL, *first = NULL, *tools = NULL;
            json_array_foreach(ct, i, it) {
                json_t *name = json_object_get(it, "name"), *tpl = json_object_get(it, "template");
                if (!json_is_string(tpl))
                    continue;
                first = first ? first : tpl;
                if (json_is_string(name) && !strcmp(json_string_value(name), "default") && !dflt)
                    dflt = tpl;
                if (json_is_string(name) && !strcmp(json_string_value(name), "tool_use") && !tools)
                    tools = tpl;
            }
            if (dflt || first)
                t->chat_template = tok_arena_strdup(&t->arena, json_string_value(dflt ? dflt : first),
                                                    json_string_length(dflt ? dflt : first));
            if (tools)
                t->chat_template_tools = tok_arena_strdup(&t->arena, json_string_value(tools), json_string_length(tools));
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
        t->unk_id = tk_sym_find(t, unk->u.s, unk->n);
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
    char stmp[1024], *tmp = stmp; /* a merge's two parts joined; longer ones (runs of spaces) on the heap */
    size_t tmp_cap = sizeof stmp;
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
            if (tmp != stmp)
                free(tmp);
            return ogk_fail(e, "tokenizer.json: merge %u is neither \"a b\" nor [\"a\", \"b\"]", i);
        }
        if (an + bn > tmp_cap) {
            char *n = malloc(an + bn);
            if (tmp != stmp)
                free(tmp);
            if (!n)
                return ogk_fail(e, "out of memory");
            tmp = n, tmp_cap = an + bn;
        }
        int32_t sa = sym_intern(t, a, an), sb = sym_intern(t, b, bn);
        memcpy(tmp, a, an);
        memcpy(tmp + an, b, bn);
        int32_t sr = sym_intern(t, tmp, an + bn);
        if (sa < 0 || sb < 0 || sr < 0) {
            if (tmp != stmp)
                free(tmp);
            return ogk_fail(e, "out of memory");
        }
        merge_put(t, sa, sb, i, sr);
    }
    if (tmp != stmp)
        free(tmp);
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->byte_id[b] = tk_sym_find(t, name, 6);
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
            int rc = tk_normalize_text(t, t->norm, at->s, at->n, &nb, tk_grow_max(at->n));
            if (rc) {
                free(nb.p);
                return ogk_fail(e, "added token '%s': normalization failed%s", at->s,
                                rc == TK_GREW ? ": the normalizer makes it more than 32 times longer" : "");
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

static int load_post(tok *t, const tj *pp, int depth, ogk_error *e)
{
    if (!pp || pp->type == TJ_NULL)
        return 0;
    const tj *ty = tj_get(pp, "type");
    if (tj_streq(ty, "ByteLevel")) /* offsets only: the ids stay */
        return 0;
    if (tj_streq(ty, "Sequence")) { /* Llama 3.1 / 3.2: [ByteLevel, TemplateProcessing], applied in order */
        const tj *ps = tj_get(pp, "processors");
        if (!ps || ps->type != TJ_ARR)
            return ogk_fail(e, "post_processor Sequence: no 'processors' list");
        if (depth > 8)
            return ogk_fail(e, "post_processor Sequence: nested more than 8 deep");
        for (uint32_t i = 0; i < ps->n; i++)
            if (load_post(t, &ps->u.items[i], depth + 1, e))
                return -1;
        return 0;
    }
    if (tj_streq(ty, "TemplateProcessing")) {
        const tj *single = tj_get(pp, "single");
        if (!single || single->type != TJ_ARR)
            return ogk_fail(e, "post_processor TemplateProcessing: no 'single' template");
        if (t->pp_template)
            return ogk_fail(e, "post_processor Sequence: a second TemplateProcessing (one template is applied here)");
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
                int a = tk_amap_get(t, id->u.s, id->n);
                int32_t tid = a >= 0 ? t->added[a].id : tk_sym_find(t, id->u.s, id->n);
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
    if (load_added(t, tj_get(&root, "added_tokens"), e) || load_post(t, tj_get(&root, "post_processor"), 0, e))
        goto fail;
    if (t->unk_token)
        t->unk_id = tk_sym_find(t, t->unk_token, strlen(t->unk_token));
    if (t->unk_id >= t->ntok)
        t->unk_id = -1;
    for (int b = 0; b < 256; b++)
        if (t->byte_id[b] >= t->ntok || (t->byte_id[b] >= 0 && !t->is_tok[t->byte_id[b]]))
            t->byte_id[b] = -1;
    for (uint32_t cp = 0; cp < 0x800; cp++) {
        char u[4];
        int k = tok_utf8_enc(cp, u);
        t->small_sym[cp] = tk_sym_find(t, u, (size_t)k);
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
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    size_t cn = 0;
    char *cfg = NULL;
    if (access(path, F_OK) == 0 && !(cfg = ogk_read_file(path, &cn, e)))
        return NULL;
    tok *t = NULL;
    ogk_map m;
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    if (access(path, F_OK) != 0) {
        /* no tokenizer.json: a SentencePiece tokenizer.model, converted (tok_spm_json) */
        char mp[4096];
        snprintf(mp, sizeof mp, "%s/tokenizer.model", dir);
        if (access(mp, F_OK) == 0) {
            size_t jn = 0;
            char *js = NULL;
            if (!ogk_map_open(&m, mp, e)) {
                js = tok_spm_json(m.data, m.size, cfg, cn, &jn, e);
                ogk_map_close(&m);
            }
            if (js)
                t = tok_load(js, jn, cfg, cn, e);
            free(js);
            free(cfg);
            if (!t)
                return NULL;
            goto template;
        }
    }
    if (ogk_map_open(&m, path, e)) {
        free(cfg);
        return NULL;
    }
    t = tok_load((const char *)m.data, m.size, cfg, cn, e);
    free(cfg);
    ogk_map_close(&m);
template:
    /* newer transformers save the template beside the config, as chat_template.jinja, and that file wins
     * over the config's (the pack import reads it the same way: lib/pack/pack.c) */
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    if (t && access(path, F_OK) == 0) {
        size_t tn;
        char *tpl = ogk_read_file(path, &tn, e);
        if (!tpl || tok_utf8_check(tpl, tn) < tn || tok_set_chat_template(t, tpl, tn)) {
            if (tpl)
                ogk_fail(e, "%s: %s", path, tok_utf8_check(tpl, tn) < tn ? "not UTF-8 text" : "out of memory");
            free(tpl);
            tok_free(t);
            return NULL;
        }
        free(tpl);
    }
    return t;
}


/* ------------------------------------------------------------------------------------------------ */

int32_t tok_vocab_size(const tok *t) { return t->ntok; }
int32_t tok_token_to_id(const tok *t, const char *s, size_t len)
{
    int32_t id = tk_sym_find(t, s, len);
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
    if (id < 0 || id >= t->ntok || !t->is_tok[id])
        return 0;
    for (int k = 0; k < t->nspecial; k++) /* the decoder's rule (tok_decode.c is_special) */
        if (t->special_n[k] == t->symn[id] && !memcmp(t->special_strs[k], t->sym[id], t->symn[id]))
            return 1;
    return 0;
}
void tok_special_affixes(const tok *t, int *before, int *after)
{
    int k = 0;
    *before = *after = 0;
    for (; t->pp_template && k < t->npp_items && t->pp_items[k] >= 0; k++)
        ++*before;
    for (k++; t->pp_template && k < t->npp_items; k++)
        *after += t->pp_items[k] >= 0;
}
const char *tok_bos_token(const tok *t) { return t->bos; }
const char *tok_eos_token(const tok *t) { return t->eos; }
int32_t tok_bos_id(const tok *t) { return t->bos_id; }
int32_t tok_eos_id(const tok *t) { return t->eos_id; }
const char *tok_chat_template(const tok *t) { return t->chat_template; }
const char *tok_chat_template_tools(const tok *t) { return t->chat_template_tools; }
int tok_set_chat_template(tok *t, const char *src, size_t n)
{
    char *c = tok_arena_strdup(&t->arena, src, n);
    if (!c)
        return -1;
    t->chat_template = c, t->chat_template_tools = NULL;
    return 0;
}
