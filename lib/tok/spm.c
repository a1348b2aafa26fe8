/* A SentencePiece model (tokenizer.model) as the tokenizer.json that encodes and decodes as it does, so
 * the rest of lib/tok (and the containers, which carry tokenizer.json) need nothing else. See tok.h
 * (tok_spm_json) for what is taken and what is refused.
 *
 * The file is a protocol buffer (sentencepiece_model.proto, public): ModelProto { repeated SentencePiece
 * pieces = 1 { piece = 1, score = 2, type = 3 }; TrainerSpec trainer_spec = 2 { model_type = 3,
 * treat_whitespace_as_suffix = 24, byte_fallback = 35 }; NormalizerSpec normalizer_spec = 3 { name = 1,
 * precompiled_charsmap = 2, add_dummy_prefix = 3, remove_extra_whitespaces = 4, escape_whitespaces = 5 } }.
 * It is read here with bounds checks on every length; unknown fields are skipped.
 *
 * BPE encoding in SentencePiece merges, again and again, the adjacent pair whose concatenation is a piece
 * with the highest score (leftmost on ties). As tokenizer.json merges: every split of every normal piece
 * into two pieces, ranked by the merged piece's score (then its id): the pairs of one piece can never
 * compete for the same symbols, so the order is the same -- for models whose pieces have distinct
 * scores, as trained BPE models do. Two different pieces of equal score rank by id here, where
 * SentencePiece would take the leftmost pair (tokenizer.json cannot express equal ranks). */
#define _GNU_SOURCE
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "tok/tok_impl.h"

enum { SP_NORMAL = 1, SP_UNKNOWN = 2, SP_CONTROL = 3, SP_USER = 4, SP_UNUSED = 5, SP_BYTE = 6 };
#define SPM_MAX_PIECES (1 << 22)
#define SPM_MAX_PIECE 1024

typedef struct {
    const uint8_t *p, *end;
} pb;

typedef struct {
    const char *s;
    uint32_t n;
    float score;
    int type;
} spm_piece;

typedef struct {
    spm_piece *pc;
    int32_t npc, cap;
    int model_type, byte_fallback, suffix;
    const char *norm_name;
    const uint8_t *charsmap;
    size_t norm_name_n, charsmap_n;
    int dummy_prefix, remove_ws, escape_ws;
} spm_model;

static int pb_varint(pb *r, uint64_t *v)
{
    uint64_t x = 0;
    for (int sh = 0; sh < 64; sh += 7) {
        if (r->p >= r->end)
            return -1;
        uint8_t b = *r->p++;
        x |= (uint64_t)(b & 0x7f) << sh;
        if (!(b & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return -1;
}

/* The next field: its number, wire type and (length-delimited) body or (varint / fixed32) value. */
static int pb_field(pb *r, uint32_t *num, int *wt, pb *body, uint64_t *val)
{
    uint64_t key;
    if (pb_varint(r, &key) || key >> 3 == 0 || key >> 3 > 0x1fffffff)
        return -1;
    *num = (uint32_t)(key >> 3);
    *wt = (int)(key & 7);
    switch (*wt) {
    case 0:
        return pb_varint(r, val);
    case 1:
        if (r->end - r->p < 8)
            return -1;
        r->p += 8;
        return 0;
    case 2: {
        uint64_t n;
        if (pb_varint(r, &n) || n > (uint64_t)(r->end - r->p))
            return -1;
        body->p = r->p;
        body->end = r->p + n;
        r->p += n;
        return 0;
    }
    case 5: {
        if (r->end - r->p < 4)
            return -1;
        uint32_t u;
        memcpy(&u, r->p, 4);
        *val = u;
        r->p += 4;
        return 0;
    }
    default:
        return -1; /* groups (3, 4) and unknown types: not in this format */
    }
}

static int read_piece(spm_model *m, pb *r, ogk_error *e)
{
    if (m->npc >= SPM_MAX_PIECES)
        return ogk_fail(e, "tokenizer.model: more than %d pieces", SPM_MAX_PIECES);
    if (m->npc == m->cap) {
        int32_t cap = m->cap ? 2 * m->cap : 1024;
        spm_piece *pc = realloc(m->pc, (size_t)cap * sizeof *pc);
        if (!pc)
            return ogk_fail(e, "out of memory");
        m->pc = pc;
        m->cap = cap;
    }
    spm_piece *p = &m->pc[m->npc];
    *p = (spm_piece){NULL, 0, 0.0f, SP_NORMAL};
    while (r->p < r->end) {
        uint32_t num;
        int wt;
        pb body;
        uint64_t v = 0;
        if (pb_field(r, &num, &wt, &body, &v))
            return ogk_fail(e, "tokenizer.model: piece %d: malformed field", m->npc);
        if (num == 1 && wt == 2) {
            p->s = (const char *)body.p;
            p->n = (uint32_t)(body.end - body.p);
        } else if (num == 2 && wt == 5) {
            uint32_t u = (uint32_t)v;
            memcpy(&p->score, &u, 4);
        } else if (num == 3 && wt == 0) {
            p->type = (int)v;
        }
    }
    if (!p->s || !p->n || p->n > SPM_MAX_PIECE || tok_utf8_check(p->s, p->n) != p->n || memchr(p->s, 0, p->n))
        return ogk_fail(e, "tokenizer.model: piece %d is %s", m->npc,
                        !p->s || !p->n ? "empty" : p->n > SPM_MAX_PIECE ? "longer than 1024 bytes"
                        : memchr(p->s, 0, p->n) ? "holding a NUL byte" : "not UTF-8");
    if (p->type < SP_NORMAL || p->type > SP_BYTE)
        return ogk_fail(e, "tokenizer.model: piece %d ('%.*s') has unknown type %d", m->npc, (int)p->n, p->s, p->type);
    if (p->score != p->score)
        return ogk_fail(e, "tokenizer.model: piece %d ('%.*s') has a NaN score", m->npc, (int)p->n, p->s);
    m->npc++;
    return 0;
}

static int spm_parse(spm_model *m, const uint8_t *data, size_t n, ogk_error *e)
{
    m->model_type = 1; /* the proto's defaults */
    m->dummy_prefix = m->remove_ws = m->escape_ws = 1;
    pb r = {data, data + n};
    int have_trainer = 0, have_norm = 0;
    while (r.p < r.end) {
        uint32_t num;
        int wt;
        pb body;
        uint64_t v;
        if (pb_field(&r, &num, &wt, &body, &v))
            return ogk_fail(e, "tokenizer.model: not a SentencePiece model (malformed protocol buffer at byte %zu)",
                            (size_t)(r.p - data));
        if (wt != 2)
            continue;
        if (num == 1) {
            if (read_piece(m, &body, e))
                return -1;
        } else if (num == 2) {
            have_trainer = 1;
            while (body.p < body.end) {
                pb b2;
                if (pb_field(&body, &num, &wt, &b2, &v))
                    return ogk_fail(e, "tokenizer.model: trainer_spec: malformed field");
                if (wt != 0)
                    continue;
                if (num == 3)
                    m->model_type = (int)v;
                else if (num == 24)
                    m->suffix = v != 0;
                else if (num == 35)
                    m->byte_fallback = v != 0;
            }
        } else if (num == 3) {
            have_norm = 1;
            while (body.p < body.end) {
                pb b2 = {0};
                if (pb_field(&body, &num, &wt, &b2, &v))
                    return ogk_fail(e, "tokenizer.model: normalizer_spec: malformed field");
                if (num == 1 && wt == 2) {
                    m->norm_name = (const char *)b2.p;
                    m->norm_name_n = (size_t)(b2.end - b2.p);
                } else if (num == 2 && wt == 2) {
                    m->charsmap = b2.p;
                    m->charsmap_n = (size_t)(b2.end - b2.p);
                } else if (wt == 0 && num == 3) {
                    m->dummy_prefix = v != 0;
                } else if (wt == 0 && num == 4) {
                    m->remove_ws = v != 0;
                } else if (wt == 0 && num == 5) {
                    m->escape_ws = v != 0;
                }
            }
        }
    }
    if (!m->npc)
        return ogk_fail(e, "tokenizer.model: no pieces (not a SentencePiece model?)");
    if (!have_trainer || !have_norm)
        return ogk_fail(e, "tokenizer.model: no %s (not a SentencePiece model, or cut short?)",
                        have_trainer ? "normalizer_spec" : "trainer_spec");
    return 0;
}

typedef struct {
    int32_t res, a, b; /* merged piece, its two parts */
    uint32_t k;        /* split offset */
} spm_merge;

static int merge_cmp(const void *x, const void *y, void *pieces)
{
    const spm_merge *a = x, *b = y;
    const spm_piece *pc = pieces;
    float sa = pc[a->res].score, sb = pc[b->res].score;
    if (sa != sb)
        return sa > sb ? -1 : 1;
    if (a->res != b->res)
        return a->res < b->res ? -1 : 1;
    return a->k < b->k ? -1 : a->k > b->k;
}

/* piece string -> id (open addressing over the pieces) */
typedef struct {
    int32_t *slot;
    uint32_t mask;
    const spm_piece *pc;
} spm_index;

static int32_t idx_find(const spm_index *x, const char *s, size_t n)
{
    for (uint32_t i = (uint32_t)hash_bytes(s, n) & x->mask;; i = (i + 1) & x->mask) {
        int32_t id = x->slot[i];
        if (id < 0)
            return -1;
        if (x->pc[id].n == n && !memcmp(x->pc[id].s, s, n))
            return id;
    }
}

static json_t *added_token(int32_t id, const char *s, size_t n, int special)
{
    return json_pack("{s:I,s:s%,s:b,s:b,s:b,s:b,s:b}", "id", (json_int_t)id, "content", s, n, "single_word", 0,
                     "lstrip", 0, "rstrip", 0, "normalized", 0, "special", special);
}

static json_t *replace_norm(const char *kind, const char *pat, const char *with)
{
    return json_pack("{s:s,s:{s:s},s:s}", "type", "Replace", "pattern", kind, pat, "content", with);
}

/* ChatGLM3's tokenization_chatglm.py appends these after the SentencePiece pieces, in this order, at ids
 * piece count + i whether or not a piece already spells one, and prefixes every encoding with [gMASK] sop.
 * (ChatGLM2's file appends only the first five, and nothing in its files tells the two apart: with a
 * ChatGLM2 model the four role tokens are ids past its tokenizer that only text spelling them produces.) */
static const char *const CHATGLM_SPECIALS[] = {"[MASK]", "[gMASK]", "[sMASK]", "sop", "eop",
                                               "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>"};

static const char *cfg_str(json_t *cfg, const char *key)
{
    json_t *v = json_object_get(cfg, key);
    if (json_is_object(v))
        v = json_object_get(v, "content");
    return json_is_string(v) ? json_string_value(v) : NULL;
}

char *tok_spm_json(const void *data, size_t n, const char *config, size_t config_len, size_t *out_len, ogk_error *e)
{
    spm_model m = {0};
    spm_index ix = {0};
    spm_merge *mg = NULL;
    json_t *root = NULL, *cfg = NULL;
    char *out = NULL;
    if (spm_parse(&m, data, n, e))
        goto done;
    if (m.model_type != 2) {
        static const char *const KIND[] = {"?", "UNIGRAM", "BPE", "WORD", "CHAR"};
        ogk_fail(e, "tokenizer.model: model type %s is not supported (only BPE SentencePiece models)",
                 m.model_type >= 1 && m.model_type <= 4 ? KIND[m.model_type] : "unknown");
        goto done;
    }
    if (m.suffix) {
        ogk_fail(e, "tokenizer.model: treat_whitespace_as_suffix is not supported");
        goto done;
    }
    if (config) {
        json_error_t je;
        cfg = json_loadb(config, config_len, JSON_DECODE_INT_AS_REAL, &je);
        if (!json_is_object(cfg)) {
            if (cfg)
                ogk_fail(e, "tokenizer_config.json: not a JSON object");
            else
                ogk_fail(e, "tokenizer_config.json: line %d: %s", je.line, je.text);
            goto done;
        }
    }
    uint32_t cap = 16;
    while (cap < (uint32_t)m.npc * 2)
        cap *= 2;
    ix = (spm_index){malloc(cap * sizeof *ix.slot), cap - 1, m.pc};
    if (!ix.slot) {
        ogk_fail(e, "out of memory");
        goto done;
    }
    memset(ix.slot, 0xff, cap * sizeof *ix.slot);
    int32_t unk = -1, nunused = 0;
    for (int32_t i = 0; i < m.npc; i++) {
        const spm_piece *p = &m.pc[i];
        if (idx_find(&ix, p->s, p->n) >= 0) {
            ogk_fail(e, "tokenizer.model: piece '%.*s' appears twice (ids %d and %d)", (int)p->n, p->s,
                     idx_find(&ix, p->s, p->n), i);
            goto done;
        }
        uint32_t j = (uint32_t)hash_bytes(p->s, p->n) & ix.mask;
        while (ix.slot[j] >= 0)
            j = (j + 1) & ix.mask;
        ix.slot[j] = i;
        if (p->type == SP_UNKNOWN && unk < 0)
            unk = i;
        nunused += p->type == SP_UNUSED;
    }
    if (unk < 0) {
        ogk_fail(e, "tokenizer.model: no unknown piece (<unk>)");
        goto done;
    }
    if (nunused) {
        ogk_fail(e, "tokenizer.model: %d pieces are marked unused; such models are not supported", nunused);
        goto done;
    }
    /* merges: every split of a normal piece into two normal pieces (user-defined ones are added tokens,
     * matched whole before BPE) */
    size_t nmg = 0, capm = 0;
    for (int32_t i = 0; i < m.npc; i++) {
        const spm_piece *p = &m.pc[i];
        if (p->type != SP_NORMAL)
            continue;
        for (uint32_t k = (uint32_t)tok_utf8_len((unsigned char)p->s[0]); k < p->n;
             k += (uint32_t)tok_utf8_len((unsigned char)p->s[k])) {
            int32_t a = idx_find(&ix, p->s, k), b = idx_find(&ix, p->s + k, p->n - k);
            if (a < 0 || b < 0 || m.pc[a].type != SP_NORMAL || m.pc[b].type != SP_NORMAL)
                continue;
            if (nmg == capm) {
                capm = capm ? 2 * capm : 4096;
                spm_merge *t = realloc(mg, capm * sizeof *t);
                if (!t) {
                    ogk_fail(e, "out of memory");
                    goto done;
                }
                mg = t;
            }
            mg[nmg++] = (spm_merge){i, a, b, k};
        }
    }
    if (nmg) /* (qsort of NULL, 0 is undefined) */
        qsort_r(mg, nmg, sizeof *mg, merge_cmp, m.pc);

    json_t *vocab = json_object(), *merges = json_array(), *added = json_array();
    int bad = 0; /* a jansson set or append failed (out of memory only): no half-built tokenizer.json */
    /* everything hangs off root from here on, so every error path frees it all with root */
    root = json_pack("{s:s,s:n,s:o,s:n,s:n,s:n,s:n,s:n,s:{s:o,s:o}}", "version", "1.0", "truncation", "added_tokens",
                     added, "normalizer", "pre_tokenizer", "post_processor", "decoder", "padding", "model", "vocab",
                     vocab, "merges", merges);
    if (!root) {
        ogk_fail(e, "out of memory");
        goto done;
    }
    for (int32_t i = 0; i < m.npc; i++) {
        const spm_piece *p = &m.pc[i];
        char *k = strndup(p->s, p->n);
        if (!k) {
            ogk_fail(e, "out of memory");
            goto done;
        }
        bad |= json_object_set_new(vocab, k, json_integer(i));
        free(k);
        if (p->type == SP_UNKNOWN || p->type == SP_CONTROL || p->type == SP_USER)
            bad |= json_array_append_new(added, added_token(i, p->s, p->n, p->type != SP_USER));
    }
    for (size_t i = 0; i < nmg; i++) {
        const spm_piece *a = &m.pc[mg[i].a], *b = &m.pc[mg[i].b];
        bad |= json_array_append_new(merges, json_pack("[s%,s%]", a->s, (size_t)a->n, b->s, (size_t)b->n));
    }
    int32_t ntok = m.npc;
    /* ChatGLM's tokens after the pieces (tokenization_chatglm.py: ids piece count + i) */
    const char *cls = cfg_str(cfg, "tokenizer_class");
    int chatglm = cls && !strcmp(cls, "ChatGLMTokenizer");
    if (chatglm)
        for (size_t i = 0; i < sizeof CHATGLM_SPECIALS / sizeof *CHATGLM_SPECIALS; i++) {
            const char *s = CHATGLM_SPECIALS[i];
            bad |= json_array_append_new(added, added_token(ntok++, s, strlen(s), 1));
        }
    /* tokenizer_config.json's added_tokens_decoder: {"id": {"content": ..., "special": ...}} */
    json_t *atd = json_object_get(cfg, "added_tokens_decoder");
    const char *key;
    json_t *val;
    json_object_foreach(atd, key, val)
    {
        char *end;
        long id = strtol(key, &end, 10);
        json_t *c = json_object_get(val, "content");
        if (*end || end == key || id < 0 || id > 16777216 || !json_is_string(c) || !json_string_length(c)) {
            ogk_fail(e, "tokenizer_config.json: added_tokens_decoder '%s': needs an integer id and a content", key);
            goto done;
        }
        size_t j, dup = 0;
        json_t *it;
        json_array_foreach(added, j, it) dup |= json_integer_value(json_object_get(it, "id")) == id;
        /* the same token again: an added token already (a control, unknown or user-defined piece, or one
         * of ChatGLM's); a normal or byte piece named here becomes an added token too, matched whole in
         * text as transformers does (a clash with a different string tok_load refuses) */
        int typ = id < m.npc ? m.pc[id].type : 0;
        if (dup || ((typ == SP_UNKNOWN || typ == SP_CONTROL || typ == SP_USER) && m.pc[id].n == json_string_length(c) &&
                    !memcmp(m.pc[id].s, json_string_value(c), m.pc[id].n)))
            continue;
        json_t *t = added_token((int32_t)id, json_string_value(c), json_string_length(c),
                                json_is_true(json_object_get(val, "special")));
        json_t *flag;
        const char *fk;
        json_object_foreach(val, fk, flag) if (json_is_boolean(flag) && strcmp(fk, "special")) bad |=
            json_object_set(t, fk, flag);
        bad |= json_array_append_new(added, t);
    }

    bad |= json_object_set_new(root, "model",
                        json_pack("{s:s,s:n,s:s%,s:n,s:n,s:b,s:b,s:b,s:O,s:O}", "type", "BPE", "dropout", "unk_token",
                                  m.pc[unk].s, (size_t)m.pc[unk].n, "continuing_subword_prefix", "end_of_word_suffix",
                                  "fuse_unk", 1, "byte_fallback", m.byte_fallback, "ignore_merges", 0, "vocab", vocab,
                                  "merges", merges));
    /* normalizer: SentencePiece's, in its order: the precompiled rules, extra spaces removed (the space
     * character: leading, trailing, runs), the dummy prefix, spaces escaped as U+2581 */
    const char *meta = m.escape_ws ? "\xe2\x96\x81" : " ";
    json_t *norms = json_array();
    /* the dummy prefix goes on any text that is not empty once leading spaces are gone, before the rules
     * apply (a text the rules erase keeps it) -- unless extra spaces are removed, which strips it again
     * from a text that ends up empty or all spaces: so Prepend comes first, or after the removal */
    if (m.dummy_prefix && !m.remove_ws)
        bad |= json_array_append_new(norms, json_pack("{s:s,s:s}", "type", "Prepend", "prepend", meta));
    if (m.charsmap_n) { /* the rules compiled into the model (nmt_nfkc, nfkc_cf, ...) */
        char *b = tk_base64(m.charsmap, m.charsmap_n);
        if (!b) {
            json_decref(norms);
            ogk_fail(e, "out of memory");
            goto done;
        }
        bad |= json_array_append_new(norms, json_pack("{s:s,s:s}", "type", "Precompiled", "precompiled_charsmap", b));
        free(b);
    }
    if (m.remove_ws) {
        bad |= json_array_append_new(norms, replace_norm("Regex", "\\A +| +\\z", ""));
        bad |= json_array_append_new(norms, replace_norm("Regex", " {2,}", " "));
        if (m.dummy_prefix)
            bad |= json_array_append_new(norms, json_pack("{s:s,s:s}", "type", "Prepend", "prepend", meta));
    }
    if (m.escape_ws)
        bad |= json_array_append_new(norms, replace_norm("String", " ", meta));
    bad |= json_object_set_new(root, "normalizer", json_pack("{s:s,s:o}", "type", "Sequence", "normalizers", norms));
    json_t *decs = json_array();
    if (m.escape_ws)
        bad |= json_array_append_new(decs, replace_norm("String", meta, " "));
    bad |= json_array_append_new(decs, json_pack("{s:s}", "type", "ByteFallback"));
    bad |= json_array_append_new(decs, json_pack("{s:s}", "type", "Fuse"));
    /* SentencePiece's decoder drops the U+2581 a first piece starts with when a dummy prefix is added or
     * extra spaces removed (a plain space, unescaped, stays) */
    if (m.escape_ws && (m.dummy_prefix || m.remove_ws))
        bad |= json_array_append_new(decs,
                              json_pack("{s:s,s:s,s:i,s:i}", "type", "Strip", "content", " ", "start", 1, "stop", 0));
    bad |= json_object_set_new(root, "decoder", json_pack("{s:s,s:o}", "type", "Sequence", "decoders", decs));
    /* post-processor: ChatGLM's [gMASK] sop prefix; otherwise BOS / EOS as tokenizer_config.json's
     * add_bos_token / add_eos_token say (LlamaTokenizer's defaults, true / false, when it does not) */
    json_t *single = json_array();
    if (chatglm) {
        bad |= json_array_append_new(single, json_pack("{s:{s:s,s:i}}", "SpecialToken", "id", "[gMASK]", "type_id", 0));
        bad |= json_array_append_new(single, json_pack("{s:{s:s,s:i}}", "SpecialToken", "id", "sop", "type_id", 0));
    } else {
        json_t *ab = json_object_get(cfg, "add_bos_token");
        const char *bos = cfg_str(cfg, "bos_token");
        int32_t bid = bos ? idx_find(&ix, bos, strlen(bos)) : -1;
        for (int32_t i = 0; !bos && i < m.npc; i++)
            if (m.pc[i].type == SP_CONTROL && m.pc[i].n == 3 && !memcmp(m.pc[i].s, "<s>", 3))
                bid = i;
        if ((ab ? json_is_true(ab) : 1) && bid >= 0)
            bad |= json_array_append_new(single, json_pack("{s:{s:s%,s:i}}", "SpecialToken", "id", m.pc[bid].s,
                                                    (size_t)m.pc[bid].n, "type_id", 0));
    }
    bad |= json_array_append_new(single, json_pack("{s:{s:s,s:i}}", "Sequence", "id", "A", "type_id", 0));
    if (!chatglm && json_is_true(json_object_get(cfg, "add_eos_token"))) {
        const char *eos = cfg_str(cfg, "eos_token");
        int32_t eid = eos ? idx_find(&ix, eos, strlen(eos)) : -1;
        if (eid >= 0)
            bad |= json_array_append_new(single, json_pack("{s:{s:s%,s:i}}", "SpecialToken", "id", m.pc[eid].s,
                                                    (size_t)m.pc[eid].n, "type_id", 0));
    }
    /* transformers' form: the pair template and each special token's ids (ogakit reads "single" only) */
    json_t *pair = json_deep_copy(single), *spec = json_object();
    bad |= json_array_append_new(pair, json_pack("{s:{s:s,s:i}}", "Sequence", "id", "B", "type_id", 1));
    size_t si;
    json_t *it;
    json_array_foreach(single, si, it)
    {
        const char *sid = json_string_value(json_object_get(json_object_get(it, "SpecialToken"), "id"));
        json_t *ai;
        size_t aj;
        json_array_foreach(added, aj, ai) if (sid && !strcmp(json_string_value(json_object_get(ai, "content")), sid))
            bad |= json_object_set_new(spec, sid, json_pack("{s:s,s:[O],s:[s]}", "id", sid, "ids", json_object_get(ai, "id"),
                                                     "tokens", sid));
    }
    bad |= json_object_set_new(root, "post_processor",
                        json_pack("{s:s,s:o,s:o,s:o}", "type", "TemplateProcessing", "single", single, "pair", pair,
                                  "special_tokens", spec));
    if (bad) {
        ogk_fail(e, "out of memory");
        goto done;
    }
    out = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!out)
        ogk_fail(e, "out of memory");
    else
        *out_len = strlen(out);
done:
    json_decref(root);
    json_decref(cfg);
    free(mg);
    free(ix.slot);
    free(m.pc);
    return out;
}
