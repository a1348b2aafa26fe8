/* The recording document (man/man5/spec-recording.5): building it, and reading it back with every
 * field checked, so a replay never runs on a truncated or ill-formed file. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "spec.h"

void spec_hash(const void *data, size_t len, char *buf)
{
    snprintf(buf, 16, "crc32c:%08x", ogk_crc32c(0, data, len));
}

json_t *spec_rec_new(json_t *target, json_t *tokenizer, int vocab_size, json_t *settings)
{
    json_t *d = json_object();
    json_object_set_new(d, "format", json_string(SPEC_REC_FORMAT));
    json_object_set_new(d, "version", json_integer(SPEC_REC_VERSION));
    json_object_set_new(d, "target", target ? target : json_null());
    json_object_set_new(d, "tokenizer", tokenizer ? tokenizer : json_null());
    json_object_set_new(d, "vocab_size", vocab_size > 0 ? json_integer(vocab_size) : json_null());
    json_object_set_new(d, "settings", settings ? settings : json_object());
    json_object_set_new(d, "prompts", json_array());
    return d;
}

static json_t *ids_json(const int *ids, int n)
{
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, json_integer(ids[i]));
    return a;
}

static json_t *str_or_null(const char *s) { return s ? json_string(s) : json_null(); }

int spec_rec_add(json_t *doc, const spec_prompt *p, ogk_error *e)
{
    json_t *o = json_object();
    json_object_set_new(o, "name", str_or_null(p->name));
    json_object_set_new(o, "kind", str_or_null(p->kind));
    json_object_set_new(o, "text", str_or_null(p->text));
    json_object_set_new(o, "prompt_ids", ids_json(p->ids, p->n_ids));
    json_object_set_new(o, "continuation_ids", ids_json(p->cont, p->n_cont));
    json_t *ct = p->cont_text ? json_string(p->cont_text) : json_null();
    json_object_set_new(o, "continuation_text", ct ? ct : json_null()); /* NULL: not valid UTF-8 */
    json_object_set_new(o, "stop", json_string(p->stop ? p->stop : "length"));
    /* a gap JSON cannot hold (NaN, infinite) makes the prompt's gaps unknown: json_real refuses it, and a
     * shorter array is a recording the reader refuses */
    int gaps_ok = p->gaps != NULL;
    for (int i = 0; gaps_ok && i < p->n_cont; i++)
        gaps_ok = isfinite(p->gaps[i]);
    if (gaps_ok) {
        json_t *g = json_array();
        for (int i = 0; i < p->n_cont; i++)
            json_array_append_new(g, json_real(p->gaps[i]));
        json_object_set_new(o, "gaps", g);
    } else {
        json_object_set_new(o, "gaps", json_null());
    }
    if (p->decode_ms >= 0)
        json_object_set_new(o, "timings",
                            json_pack("{s:f,s:f}", "decode_ms", p->decode_ms, "ms_per_token",
                                      p->n_cont ? p->decode_ms / p->n_cont : 0.0));
    else if (p->request_ms >= 0)
        json_object_set_new(o, "timings", json_pack("{s:f}", "request_ms", p->request_ms));
    else
        json_object_set_new(o, "timings", json_null());
    if (json_array_append_new(json_object_get(doc, "prompts"), o))
        return ogk_fail(e, "out of memory");
    return 0;
}

int spec_rec_same_continuations(const json_t *a, const json_t *b)
{
    const json_t *pa = json_object_get(a, "prompts"), *pb = json_object_get(b, "prompts");
    if (json_array_size(pa) != json_array_size(pb))
        return 0;
    for (size_t i = 0; i < json_array_size(pa); i++)
        if (!json_equal(json_object_get(json_array_get(pa, i), "continuation_ids"),
                        json_object_get(json_array_get(pb, i), "continuation_ids")))
            return 0;
    return 1;
}

/* an array of token ids into a new int array; NULL with e filled */
static int *read_ids(const json_t *a, int vocab, int *n, int allow_empty, const char *where, int pi, const char *key,
                     ogk_error *e)
{
    if (!json_is_array(a) || (!allow_empty && json_array_size(a) == 0)) {
        ogk_fail(e, "%s: prompts[%d].%s: want %sarray of token ids", where, pi, key, allow_empty ? "an " : "a non-empty ");
        return NULL;
    }
    *n = (int)json_array_size(a);
    int *ids = malloc(sizeof(int) * (size_t)(*n + 1));
    if (!ids) {
        ogk_fail(e, "out of memory");
        return NULL;
    }
    for (int i = 0; i < *n; i++) {
        json_t *v = json_array_get(a, (size_t)i);
        json_int_t x = json_is_integer(v) ? json_integer_value(v) : -1;
        if (x < 0 || x > 0x7fffffff || (vocab > 0 && x >= vocab)) {
            ogk_fail(e, "%s: prompts[%d].%s[%d]: %s", where, pi, key, i,
                     x < 0 || x > 0x7fffffff ? "not a token id" : "outside the recorded vocabulary");
            free(ids);
            return NULL;
        }
        ids[i] = (int)x;
    }
    return ids;
}

static char *opt_str(const json_t *o, const char *key, int *bad)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return NULL;
    if (!json_is_string(v)) {
        *bad = 1;
        return NULL;
    }
    return strdup(json_string_value(v));
}

spec_rec *spec_rec_parse(const char *buf, size_t len, const char *where, ogk_error *e)
{
    json_error_t je;
    /* a key given twice is refused: which of the two a reader takes is not the document's to leave open */
    json_t *d = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
    if (!d) {
        if (json_error_code(&je) == json_error_duplicate_key)
            ogk_fail(e, "%s: a key given twice (line %d, column %d: %s)", where, je.line, je.column, je.text);
        else
            ogk_fail(e, "%s: not a complete JSON document (line %d, column %d: %s)", where, je.line, je.column,
                     je.text);
        return NULL;
    }
    spec_rec *r = calloc(1, sizeof *r);
    if (!r) {
        json_decref(d);
        ogk_fail(e, "out of memory");
        return NULL;
    }
    r->doc = d;
    const json_t *fmt = json_object_get(d, "format"), *ver = json_object_get(d, "version");
    if (!json_is_object(d) || !json_is_string(fmt) || strcmp(json_string_value(fmt), SPEC_REC_FORMAT)) {
        ogk_fail(e, "%s: not a recording (want an object with \"format\": \"%s\")", where, SPEC_REC_FORMAT);
        goto fail;
    }
    if (!json_is_integer(ver) || json_integer_value(ver) < 1) {
        ogk_fail(e, "%s: \"version\" is missing or not a positive integer", where);
        goto fail;
    }
    if (json_integer_value(ver) > SPEC_REC_VERSION) {
        ogk_fail(e, "%s: recording version %lld is newer than this reader's (%d)", where,
                 (long long)json_integer_value(ver), SPEC_REC_VERSION);
        goto fail;
    }
    r->version = (int)json_integer_value(ver);
    const json_t *vs = json_object_get(d, "vocab_size");
    if (!vs) {
        ogk_fail(e, "%s: \"vocab_size\" is missing (the target's vocabulary size, or null)", where);
        goto fail;
    }
    if (!json_is_null(vs)) {
        if (!json_is_integer(vs) || json_integer_value(vs) < 1 || json_integer_value(vs) > 0x7fffffff) {
            ogk_fail(e, "%s: \"vocab_size\" is not a positive integer", where);
            goto fail;
        }
        r->vocab_size = (int)json_integer_value(vs);
    }
    r->target = json_object_get(d, "target");
    if (!json_is_object(r->target)) {
        ogk_fail(e, "%s: \"target\" is missing or not an object", where);
        goto fail;
    }
    json_incref(r->target);
    const json_t *tk = json_object_get(d, "tokenizer");
    if (tk && !json_is_null(tk)) {
        const json_t *h = json_object_get(tk, "hash");
        if (!json_is_object(tk) || !json_is_string(h)) {
            ogk_fail(e, "%s: \"tokenizer\" is not null or an object with a \"hash\" string", where);
            goto fail;
        }
        r->tokenizer_hash = strdup(json_string_value(h));
    }
    /* settings: the most a continuation holds, and how it was made */
    const json_t *st = json_object_get(d, "settings"), *stok = json_object_get(st, "tokens");
    if (!json_is_object(st) || !json_is_integer(stok) || json_integer_value(stok) < 1 ||
        json_integer_value(stok) > 0x7fffffff) {
        ogk_fail(e, "%s: \"settings\" is missing or its \"tokens\" is not a positive integer", where);
        goto fail;
    }
    static const char *const flags[] = {"ignore_eos", "greedy"};
    for (size_t k = 0; k < 2; k++)
        if (json_object_get(st, flags[k]) && !json_is_boolean(json_object_get(st, flags[k]))) {
            ogk_fail(e, "%s: settings.%s is not a boolean", where, flags[k]);
            goto fail;
        }
    const json_t *smode = json_object_get(st, "mode"), *sthr = json_object_get(st, "threads");
    if ((smode && !json_is_null(smode) && !json_is_string(smode)) ||
        (sthr && !json_is_null(sthr) && (!json_is_integer(sthr) || json_integer_value(sthr) < 1))) {
        ogk_fail(e, "%s: settings.mode is a string and settings.threads a positive integer (or null)", where);
        goto fail;
    }
    int max_tokens = (int)json_integer_value(stok);
    const json_t *ps = json_object_get(d, "prompts");
    if (!json_is_array(ps) || json_array_size(ps) == 0) {
        ogk_fail(e, "%s: \"prompts\" is missing or empty", where);
        goto fail;
    }
    r->p = calloc(json_array_size(ps), sizeof *r->p);
    if (!r->p) {
        ogk_fail(e, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < json_array_size(ps); i++) {
        const json_t *o = json_array_get(ps, i);
        spec_prompt *p = &r->p[r->n++];
        int bad = 0, pi = (int)i;
        p->decode_ms = p->request_ms = -1;
        if (!json_is_object(o)) {
            ogk_fail(e, "%s: prompts[%d] is not an object", where, pi);
            goto fail;
        }
        p->name = opt_str(o, "name", &bad);
        p->kind = opt_str(o, "kind", &bad);
        p->text = opt_str(o, "text", &bad);
        p->cont_text = opt_str(o, "continuation_text", &bad);
        p->stop = opt_str(o, "stop", &bad);
        if (bad) {
            ogk_fail(e, "%s: prompts[%d]: name, kind, text, continuation_text and stop are strings or null", where, pi);
            goto fail;
        }
        if (!p->stop || (strcmp(p->stop, "eos") && strcmp(p->stop, "length") && strcmp(p->stop, "context"))) {
            ogk_fail(e, "%s: prompts[%d].stop: want \"eos\", \"length\" or \"context\"", where, pi);
            goto fail;
        }
        if (!(p->ids = read_ids(json_object_get(o, "prompt_ids"), r->vocab_size, &p->n_ids, 0, where, pi,
                                "prompt_ids", e)) ||
            !(p->cont = read_ids(json_object_get(o, "continuation_ids"), r->vocab_size, &p->n_cont, 1, where, pi,
                                 "continuation_ids", e)))
            goto fail;
        const json_t *g = json_object_get(o, "gaps");
        if (g && !json_is_null(g)) {
            if (!json_is_array(g) || (int)json_array_size(g) != p->n_cont) {
                ogk_fail(e, "%s: prompts[%d].gaps: want null or one number per continuation token (%d)", where, pi,
                         p->n_cont);
                goto fail;
            }
            p->gaps = malloc(sizeof(float) * (size_t)(p->n_cont + 1));
            for (int j = 0; p->gaps && j < p->n_cont; j++) {
                const json_t *v = json_array_get(g, (size_t)j);
                if (!json_is_number(v)) {
                    ogk_fail(e, "%s: prompts[%d].gaps[%d] is not a number", where, pi, j);
                    goto fail;
                }
                p->gaps[j] = (float)json_number_value(v);
            }
        }
        /* the continuation against the settings: at most tokens; "length" means that many */
        if (p->n_cont > max_tokens || (!strcmp(p->stop, "length") && p->n_cont != max_tokens)) {
            ogk_fail(e, "%s: prompts[%d]: %d continuation tokens with stop \"%s\" and settings.tokens %d (\"length\" "
                        "is that many, never more)", where, pi, p->n_cont, p->stop, max_tokens);
            goto fail;
        }
        const json_t *t = json_object_get(o, "timings");
        int tbad = t && !json_is_null(t) && !json_is_object(t);
        const char *tk2;
        const json_t *tv;
        json_object_foreach((json_t *)(json_is_object(t) ? t : NULL), tk2, tv) tbad |= !json_is_number(tv) && !json_is_null(tv);
        if (tbad) {
            ogk_fail(e, "%s: prompts[%d].timings: want null or an object of numbers", where, pi);
            goto fail;
        }
        if (json_is_object(t) && json_is_number(json_object_get(t, "decode_ms")))
            p->decode_ms = json_number_value(json_object_get(t, "decode_ms"));
        if (json_is_object(t) && json_is_number(json_object_get(t, "request_ms")))
            p->request_ms = json_number_value(json_object_get(t, "request_ms"));
    }
    return r;
fail:
    spec_rec_free(r);
    return NULL;
}

void spec_rec_free(spec_rec *r)
{
    if (!r)
        return;
    for (int i = 0; i < r->n; i++) {
        spec_prompt *p = &r->p[i];
        free(p->name), free(p->kind), free(p->text), free(p->cont_text), free(p->stop);
        free(p->ids), free(p->cont), free(p->gaps);
    }
    free(r->p);
    free(r->tokenizer_hash);
    json_decref(r->target);
    json_decref(r->doc);
    free(r);
}
