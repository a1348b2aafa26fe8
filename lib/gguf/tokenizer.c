/* Tokenizer metadata for llama.cpp from the container's tokenizer.json / tokenizer_config.json:
 * byte-level BPE as tokenizer.ggml.model "gpt2" (with the pre-tokenizer name whose regex llama.cpp
 * applies), sentencepiece-style BPE with byte fallback as "llama" (scores rank the merges). */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "gguf_int.h"

int gguf_tokenizer_meta(const q4nx_file *f, gguf_writer *w, uint32_t vocab, int quiet, ogk_error *e);

/* llama.cpp token types */
enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6 };

/* HF ByteLevel's own split (use_regex, the default): GPT-2's regex */
#define GPT2_RE "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define PRE_MAX 4

/* The regexes a byte-level tokenizer splits with, in order, as tokenizer.json writes them, and the llama.cpp
 * pre-tokenizer whose regex list splits that way (llama-vocab.cpp rewrites them for its engine), with whether
 * that pre-tokenizer makes llama.cpp take a word found whole in the vocabulary without merges (BPE's
 * ignore_merges); `differs`: where llama.cpp's version splits otherwise (NULL: nowhere), noted on stderr;
 * `covers`: the last regex matches every character (so a Split that removes what it does not match, as
 * GPT-4o's Removed + invert, removes nothing and keeps the same pieces) */
#define MARKS "leaves combining marks (Thai vowel signs and tone marks, Devanagari matras) out of words, so text with them"
static const struct {
    const char *re[PRE_MAX], *pre, *differs;
    int ignore_merges, covers;
} pres[] = {
    {{"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
      "\\s+(?!\\S)|\\s+"}, "qwen2", NULL, 0, 1},
    {{"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
      "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}, "llama-bpe", NULL, 1, 1},
    /* the llama 3 regex without the contraction alternatives: llama-bpe's regex is the nearest llama.cpp has;
     * they split differently only where a contraction is followed by more letters ("'llama") */
    {{"[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
     "llama-bpe", "splits contractions followed by letters differently", 1, 1},
    /* GPT-4o's o200k (Phi-4-mini) */
    {{"[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
      "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
      "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}, "gpt-4o", MARKS " splits differently", 0, 1},
    /* Mistral NeMo's Tekken */
    {{"[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|[^\\r\\n\\p{L}\\p{N}]?"
      "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|"
      "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}, "tekken", MARKS " splits differently", 1, 1},
    /* DeepSeek V3: digits, then CJK runs, then the rest */
    {{"\\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+",
      "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+"
      "[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"}, "deepseek-v3", NULL, 0, 0}, /* its last leaves digits to the first */
    /* GPT-2's, ByteLevel's own (GPT-NeoX, OLMo): llama.cpp's lacks the last "|\s+", which only ever takes a
     * single whitespace character before a non-space, and llama.cpp keeps unmatched text as a piece */
    {{GPT2_RE}, "gpt-2", NULL, 0, 1},
};

static const char *str(const json_t *o, const char *k) { return json_string_value(json_object_get(o, k)); }

/* re[(*n)++] = r, or -1 with why when the list is full */
static int push_re(const char **re, int *n, const char *r, char *why, size_t wn)
{
    if (*n == PRE_MAX) {
        snprintf(why, wn, "more than %d splits", PRE_MAX);
        return -1;
    }
    re[(*n)++] = r;
    return 0;
}

/* The split regexes of a byte-level pre_tokenizer in the order it applies them: Splits of a regex that keep
 * every piece (behavior Isolated, or Removed with invert, the form of GPT-4o's: the same pieces where the
 * regex matches every character; so only the last may be Removed, and only where its list `covers`), and
 * ByteLevel's own GPT-2 regex where use_regex. 0, or -1 with the part that has no llama.cpp counterpart in
 * why[0..wn) */
static int split_list(const json_t *pre, const char **re, int *n, int *removed, char *why, size_t wn)
{
    const char *ty = str(pre, "type");
    if (!ty) {
        snprintf(why, wn, "a pre-tokenizer without a type");
        return -1;
    }
    if (!strcmp(ty, "Sequence")) {
        size_t i;
        const json_t *v;
        json_array_foreach(json_object_get(pre, "pretokenizers"), i, v) if (split_list(v, re, n, removed, why, wn))
            return -1;
        return 0;
    }
    if (!strcmp(ty, "ByteLevel")) {
        if (json_is_true(json_object_get(pre, "add_prefix_space"))) {
            snprintf(why, wn, "ByteLevel with add_prefix_space (llama.cpp adds no space)");
            return -1;
        }
        return json_is_false(json_object_get(pre, "use_regex")) ? 0 : push_re(re, n, GPT2_RE, why, wn);
    }
    if (strcmp(ty, "Split")) {
        snprintf(why, wn, "a %s pre-tokenizer in a byte-level tokenizer", ty);
        return -1;
    }
    const char *r = str(json_object_get(pre, "pattern"), "Regex"), *b = str(pre, "behavior");
    int inv = json_is_true(json_object_get(pre, "invert"));
    if (!r) {
        snprintf(why, wn, "a Split on a string, not a regex");
        return -1;
    }
    if (!b || !((!strcmp(b, "Isolated") && !inv) || (!strcmp(b, "Removed") && inv))) {
        snprintf(why, wn, "a Split with behavior %s%s (llama.cpp keeps every piece apart: Isolated)", b ? b : "(none)",
                 inv ? " and invert" : "");
        return -1;
    }
    if (!strcmp(b, "Removed"))
        *removed = *n;
    return push_re(re, n, r, why, wn);
}

/* the first object of `type` in j, depth first (a Sequence's parts included), or NULL */
static const json_t *find_type(const json_t *j, const char *type)
{
    if (json_is_object(j)) {
        const char *ty = str(j, "type");
        if (ty && !strcmp(ty, type))
            return j;
        const char *k;
        const json_t *v, *f;
        json_object_foreach((json_t *)j, k, v) if ((f = find_type(v, type))) return f;
    } else if (json_is_array(j)) {
        size_t i;
        const json_t *v, *f;
        json_array_foreach(j, i, v) if ((f = find_type(v, type))) return f;
    }
    return NULL;
}

/* the special tokens the post-processor's template for one sequence (TemplateProcessing, alone or inside a
 * Sequence, as Llama 3.x's [ByteLevel, TemplateProcessing]) puts before the text (side 0) or after it (side 1):
 * how many, and the name of the one nearest the text's edge of the sequence (the first before, the last after) */
static size_t template_side(const json_t *tj, int side, const char **name)
{
    const json_t *single = json_object_get(find_type(json_object_get(tj, "post_processor"), "TemplateProcessing"),
                                           "single");
    size_t n = json_array_size(single), a = n, count = 0;
    *name = NULL;
    for (size_t i = 0; i < n && a == n; i++)
        if (json_object_get(json_array_get(single, i), "Sequence"))
            a = i;
    for (size_t i = side ? a + 1 : 0; i < (side ? n : a); i++) {
        const char *id = str(json_object_get(json_array_get(single, i), "SpecialToken"), "id");
        if (!id)
            continue;
        if (!count++ || side)
            *name = id;
    }
    return a == n ? 0 : count;
}

static int is_byte_token(const char *s)
{
    return strlen(s) == 6 && !strncmp(s, "<0x", 3) && s[5] == '>' && strchr("0123456789ABCDEF", s[3]) &&
           strchr("0123456789ABCDEF", s[4]) && s[3] && s[4];
}

/* the id of a token string: an added token's, else the vocabulary's, or -1 */
static int token_id(const char *s, const json_t *vocab, const json_t *added)
{
    if (!s)
        return -1;
    size_t i;
    const json_t *a;
    json_array_foreach(added, i, a)
    {
        const char *c = str(a, "content");
        if (c && !strcmp(c, s) && json_is_integer(json_object_get(a, "id")))
            return (int)json_integer_value(json_object_get(a, "id"));
    }
    const json_t *id = json_object_get(vocab, s);
    return json_is_integer(id) ? (int)json_integer_value(id) : -1;
}

/* the id of a token string given in tokenizer_config (string, or {"content": ...}), or -1 */
static int config_token(const json_t *cfg, const char *key, const json_t *vocab, const json_t *added)
{
    const json_t *v = json_object_get(cfg, key);
    return token_id(json_is_string(v) ? json_string_value(v) : str(v, "content"), vocab, added);
}

int gguf_tokenizer_meta(const q4nx_file *f, gguf_writer *w, uint32_t vocab_size, int quiet, ogk_error *e)
{
    const uint8_t *data;
    size_t len;
    if (q4nx_asset(f, "tokenizer.json", &data, &len))
        return ogk_fail(e, "asset tokenizer.json: missing (the GGUF needs the tokenizer)");
    json_error_t je;
    json_t *tj = json_loadb((const char *)data, len, 0, &je), *cfg = NULL;
    if (!tj)
        return ogk_fail(e, "asset tokenizer.json: line %d: %s", je.line, je.text);
    if (!q4nx_asset(f, "tokenizer_config.json", &data, &len))
        cfg = json_loadb((const char *)data, len, 0, &je);
    if (!cfg)
        cfg = json_object();
    int rc = -1;
    char **tok = calloc(vocab_size, sizeof *tok);
    int32_t *type = calloc(vocab_size, sizeof *type);
    float *score = NULL;
    const json_t *model = json_object_get(tj, "model"), *vocab = json_object_get(model, "vocab"),
                 *merges = json_object_get(model, "merges"), *added = json_object_get(tj, "added_tokens");
    const char *mtype = str(model, "type");
    if (!tok || !type) {
        ogk_fail(e, "out of memory");
        goto out;
    }
    if (!mtype || strcmp(mtype, "BPE") || !json_is_object(vocab) || !json_is_array(merges)) {
        ogk_fail(e, "asset tokenizer.json: model type %s: only BPE tokenizers (byte-level, or with byte fallback) "
                 "are converted", mtype ? mtype : "(none)");
        goto out;
    }
    int bytelevel = find_type(json_object_get(tj, "pre_tokenizer"), "ByteLevel") != NULL;
    int spm = !bytelevel && json_is_true(json_object_get(model, "byte_fallback"));
    if (!bytelevel && !spm) {
        ogk_fail(e, "asset tokenizer.json: BPE that is neither byte-level nor byte-fallback: no llama.cpp tokenizer "
                 "model matches");
        goto out;
    }
    /* tokens by id */
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)vocab, k, v)
    {
        json_int_t id = json_integer_value(v);
        if (!json_is_integer(v) || id < 0 || id >= vocab_size) {
            ogk_fail(e, "asset tokenizer.json: token \"%s\" has id %lld, outside the model's %u rows", k, (long long)id,
                     vocab_size);
            goto out;
        }
        free(tok[id]);
        tok[id] = strdup(k);
        type[id] = spm && is_byte_token(k) ? TT_BYTE : TT_NORMAL;
    }
    size_t i;
    json_array_foreach(added, i, v)
    {
        const char *c = str(v, "content");
        json_int_t id = json_integer_value(json_object_get(v, "id"));
        if (!c || id < 0 || id >= vocab_size) {
            ogk_fail(e, "asset tokenizer.json: added token %zu: no content or id outside %u rows", i, vocab_size);
            goto out;
        }
        free(tok[id]);
        tok[id] = strdup(c);
        type[id] = json_is_true(json_object_get(v, "special")) ? TT_CONTROL : TT_USER;
    }
    int unk = -1;
    if (spm && str(model, "unk_token")) {
        const json_t *u = json_object_get(vocab, str(model, "unk_token"));
        if (json_is_integer(u))
            unk = (int)json_integer_value(u), type[unk] = TT_UNKNOWN;
    }
    for (uint32_t id = 0; id < vocab_size; id++) /* rows past the tokenizer: padding, never produced */
        if (!tok[id]) {
            if (asprintf(&tok[id], "[PAD%u]", id) < 0) {
                tok[id] = NULL;
                ogk_fail(e, "out of memory");
                goto out;
            }
            type[id] = TT_UNUSED;
        }
    if (spm) {
        /* llama.cpp's sentencepiece tokenizer merges the adjacent pair whose concatenation scores highest:
         * score = -(rank of the first merge producing the token), so it merges in merge-rank order */
        if (!(score = malloc(vocab_size * sizeof *score))) {
            ogk_fail(e, "out of memory");
            goto out;
        }
        for (uint32_t id = 0; id < vocab_size; id++)
            score[id] = type[id] == TT_NORMAL ? -1e9f : 0.0f;
        json_array_foreach(merges, i, v)
        {
            char *cat = NULL;
            if (json_is_string(v)) {
                const char *s = json_string_value(v), *sp = strchr(s, ' ');
                if (sp && asprintf(&cat, "%.*s%s", (int)(sp - s), s, sp + 1) < 0)
                    cat = NULL;
            } else if (json_array_size(v) == 2) {
                if (asprintf(&cat, "%s%s", json_string_value(json_array_get(v, 0)) ?: "",
                             json_string_value(json_array_get(v, 1)) ?: "") < 0)
                    cat = NULL;
            }
            const json_t *id = cat ? json_object_get(vocab, cat) : NULL;
            if (json_is_integer(id) && score[json_integer_value(id)] == -1e9f)
                score[json_integer_value(id)] = -(float)i;
            free(cat);
        }
        for (uint32_t id = 0; id < vocab_size; id++)
            if (score[id] == -1e9f)
                score[id] = -1e6f - (float)id; /* single pieces: never a merge result */
    }
    const char *pre = NULL;
    if (bytelevel) {
        const char *re[PRE_MAX];
        char why[160] = "";
        int n = 0, removed = -1;
        const json_t *pj = json_object_get(tj, "pre_tokenizer");
        if (!split_list(pj, re, &n, &removed, why, sizeof why) && removed >= 0 && removed != n - 1)
            snprintf(why, sizeof why, "a Split with behavior Removed before another split (it drops what its regex "
                     "does not match)");
        for (size_t p = 0; !why[0] && p < sizeof pres / sizeof *pres && !pre; p++) {
            int m = 0;
            while (m < n && pres[p].re[m] && !strcmp(re[m], pres[p].re[m]))
                m++;
            if (m < n || (m < PRE_MAX && pres[p].re[m]))
                continue;
            if (removed >= 0 && !pres[p].covers) {
                snprintf(why, sizeof why, "a Split with behavior Removed (and invert) over a regex that leaves "
                         "characters unmatched (the Split drops them; llama.cpp keeps them)");
                break;
            }
            pre = pres[p].pre;
            if (pres[p].differs && !quiet)
                ogk_err("note: tokenizer.json's pre-tokenizer regex has no exact llama.cpp counterpart; using "
                        "\"%s\", which %s", pre, pres[p].differs);
            if (pres[p].ignore_merges != json_is_true(json_object_get(model, "ignore_merges")) && !quiet)
                ogk_err("note: llama.cpp's \"%s\" %s a word found whole in the vocabulary; this tokenizer.json %s "
                        "(ignore_merges %s): a word the merges do not rebuild whole can split differently", pre,
                        pres[p].ignore_merges ? "takes" : "merges", pres[p].ignore_merges ? "merges it" : "takes it",
                        pres[p].ignore_merges ? "false" : "true");
        }
        if (!pre) {
            if (why[0])
                ogk_fail(e, "asset tokenizer.json: pre-tokenizer: %s: no llama.cpp pre-tokenizer applies it", why);
            else if (!n)
                ogk_fail(e, "asset tokenizer.json: pre-tokenizer: no split regex: no llama.cpp pre-tokenizer is "
                         "known to apply it");
            else {
                char list[1024] = "";
                for (int i = 0; i < n; i++)
                    snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? " then " : "", re[i]);
                ogk_fail(e, "asset tokenizer.json: pre-tokenizer regex %s: no llama.cpp pre-tokenizer is known to "
                         "apply it", list);
            }
            goto out;
        }
    }
    if (gguf_kv_str(w, "tokenizer.ggml.model", spm ? "llama" : "gpt2", spm ? 5 : 4, e) ||
        (pre && gguf_kv_str(w, "tokenizer.ggml.pre", pre, strlen(pre), e)) ||
        gguf_kv_arr_str_begin(w, "tokenizer.ggml.tokens", vocab_size, e))
        goto out;
    for (uint32_t id = 0; id < vocab_size; id++)
        if (gguf_kv_arr_str_push(w, tok[id], strlen(tok[id]), e))
            goto out;
    if (gguf_kv_arr_i32(w, "tokenizer.ggml.token_type", type, vocab_size, e) ||
        (score && gguf_kv_arr_f32(w, "tokenizer.ggml.scores", score, vocab_size, e)))
        goto out;
    if (!spm) {
        if (gguf_kv_arr_str_begin(w, "tokenizer.ggml.merges", json_array_size(merges), e))
            goto out;
        json_array_foreach(merges, i, v)
        {
            char *m = NULL;
            if (json_is_string(v))
                m = strdup(json_string_value(v));
            else if (asprintf(&m, "%s %s", json_string_value(json_array_get(v, 0)) ?: "",
                              json_string_value(json_array_get(v, 1)) ?: "") < 0)
                m = NULL;
            if (!m) {
                ogk_fail(e, "out of memory");
                goto out;
            }
            int r = gguf_kv_arr_str_push(w, m, strlen(m), e);
            free(m);
            if (r)
                goto out;
        }
    }
    /* special ids: the model description's, else tokenizer_config's token strings */
    const json_t *md = q4nx_model(f);
    const json_t *bos = json_object_get(md, "bos_token_id"), *pad = json_object_get(md, "pad_token_id");
    const json_t *eos = json_object_get(md, "eos_token_ids");
    /* the description's ids, every one, inside the vocabulary (64-bit as written: none wraps into it) */
    const json_t *given[3] = {bos, pad, json_is_array(eos) ? NULL : eos};
    for (size_t k = 0; k < json_array_size(eos) + 3; k++) {
        const json_t *v = k < 3 ? given[k] : json_array_get(eos, k - 3);
        if (v && !json_is_null(v) &&
            (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= (json_int_t)vocab_size)) {
            char *t = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
            ogk_fail(e, "model: the %s token id %.40s is outside the vocabulary (%u ids)",
                     k == 0 ? "bos" : k == 1 ? "pad" : "eos", t ? t : "?", vocab_size);
            free(t);
            goto out;
        }
    }
    int bos_id = json_is_integer(bos) ? (int)json_integer_value(bos) : config_token(cfg, "bos_token", vocab, added);
    int eos_id = config_token(cfg, "eos_token", vocab, added);
    if (eos_id < 0 && json_is_array(eos) && json_is_integer(json_array_get(eos, 0)))
        eos_id = (int)json_integer_value(json_array_get(eos, 0));
    if (eos_id < 0 && json_is_integer(eos))
        eos_id = (int)json_integer_value(eos);
    int pad_id = json_is_integer(pad) ? (int)json_integer_value(pad) : config_token(cfg, "pad_token", vocab, added);
    /* add_bos / add_eos: tokenizer_config's flags (as transformers reads them); else the post-processor's
     * template, as lib/tok applies it: its token before the text (the bos id too, when neither the description
     * nor tokenizer_config names one), the eos after it */
    const char *before, *after;
    size_t nbefore = template_side(tj, 0, &before), nafter = template_side(tj, 1, &after);
    int tb = token_id(before, vocab, added), ta = token_id(after, vocab, added);
    const json_t *ab = json_object_get(cfg, "add_bos_token"), *ae = json_object_get(cfg, "add_eos_token");
    if (bos_id < 0 && !json_is_boolean(ab))
        bos_id = tb;
    int add_bos = json_is_boolean(ab) ? json_is_true(ab) : nbefore > 0 && tb == bos_id;
    int add_eos = json_is_boolean(ae) ? json_is_true(ae) : nafter > 0 && ta == eos_id;
    /* a flag without its token adds nothing (transformers refuses it; llama.cpp would add its default id, 11 for
     * a gpt2 vocabulary) */
    add_bos &= bos_id >= 0, add_eos &= eos_id >= 0;
    if (!json_is_boolean(ab) && !json_is_boolean(ae) && (nbefore > 1 || nafter > 1) && !quiet)
        ogk_err("note: the tokenizer's template puts %zu special tokens before the text and %zu after it; llama.cpp "
                "adds at most its bos before and its eos after, so its ids for a sequence differ", nbefore, nafter);
    const struct {
        const char *what;
        int id;
    } sp[] = {{"bos", bos_id}, {"eos", eos_id}, {"pad", pad_id}};
    for (size_t k = 0; k < sizeof sp / sizeof *sp; k++)
        if (sp[k].id >= 0 && (uint32_t)sp[k].id >= vocab_size) {
            ogk_fail(e, "model: the %s token id %d is outside the vocabulary (%u ids)", sp[k].what, sp[k].id, vocab_size);
            goto out;
        }
    if ((bos_id >= 0 && gguf_kv_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)bos_id, e)) ||
        (eos_id >= 0 && gguf_kv_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)eos_id, e)) ||
        (pad_id >= 0 && gguf_kv_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)pad_id, e)) ||
        (unk >= 0 && gguf_kv_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)unk, e)) ||
        gguf_kv_bool(w, "tokenizer.ggml.add_bos_token", add_bos, e) ||
        gguf_kv_bool(w, "tokenizer.ggml.add_eos_token", add_eos, e))
        goto out;
    if (spm) {
        /* llama.cpp's add_space_prefix: the Prepend "▁" normalizer, or a Metaspace pre-tokenizer (alone or in a
         * Sequence) that prepends (add_prefix_space, or prepend_scheme "first" / "always": the newer form of
         * Mistral v0.3 and re-saved Llama 2 tokenizers, without a normalizer) */
        const json_t *ms = find_type(json_object_get(tj, "pre_tokenizer"), "Metaspace");
        const char *scheme = str(ms, "prepend_scheme");
        int prefix = find_type(json_object_get(tj, "normalizer"), "Prepend") ||
                     json_is_true(json_object_get(json_object_get(tj, "pre_tokenizer"), "add_prefix_space")) ||
                     json_is_true(json_object_get(ms, "add_prefix_space")) ||
                     (scheme && (!strcmp(scheme, "first") || !strcmp(scheme, "always")));
        if (gguf_kv_bool(w, "tokenizer.ggml.add_space_prefix", prefix, e))
            goto out;
        /* llama.cpp prefixes the space to the text after every special token as well (the Prepend normalizer's
         * way, applied to each piece between added tokens); prepend_scheme "first" prefixes the input's start only */
        if (prefix && scheme && !strcmp(scheme, "first") && !find_type(json_object_get(tj, "normalizer"), "Prepend") &&
            !quiet)
            ogk_err("note: tokenizer.json's Metaspace prefixes \"\u2581\" to the start of the input only (prepend_scheme "
                    "first); llama.cpp's add_space_prefix also prefixes a space to the text after each special token, "
                    "so text that follows one (\"</s> world\", \"[INST] Hi\") tokenizes differently there");
        /* a SentencePiece character map (nmt_nfkc: ChatGLM) has no llama.cpp counterpart; llama.cpp's own
         * converter drops it too, so this is said, not refused */
        if (find_type(json_object_get(tj, "normalizer"), "Precompiled") && !quiet)
            ogk_err("note: tokenizer.json normalizes with a SentencePiece character map (Precompiled), which "
                    "llama.cpp does not apply: text whose characters the map changes (NFKC forms, some "
                    "punctuation and spaces) tokenizes differently there");
    }
    const char *tmpl = str(md, "chat_template");
    if (!tmpl)
        tmpl = str(cfg, "chat_template");
    if (tmpl && *tmpl && gguf_kv_str(w, "tokenizer.chat_template", tmpl, strlen(tmpl), e))
        goto out;
    /* tokenizer_config's named templates besides the default (tool_use, rag, ...) as
     * tokenizer.chat_template.NAME, as llama.cpp's own converter writes them */
    const json_t *named = json_object_get(cfg, "chat_template");
    json_array_foreach(json_is_array(named) ? named : NULL, i, v)
    {
        const char *nm = str(v, "name"), *t = str(v, "template");
        if (!nm || !t || !strcmp(nm, "default") || !*nm || strlen(nm) > 200)
            continue;
        char key[256];
        snprintf(key, sizeof key, "tokenizer.chat_template.%s", nm);
        if (gguf_kv_str(w, key, t, strlen(t), e))
            goto out;
    }
    rc = 0;
out:
    if (tok)
        for (uint32_t id = 0; id < vocab_size; id++)
            free(tok[id]);
    free(tok);
    free(type);
    free(score);
    json_decref(tj);
    json_decref(cfg);
    return rc;
}
