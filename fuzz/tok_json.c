/* Fuzz target: the input is a tokenizer.json. tok_load; when it loads, encode a fixed text (ASCII,
 * digits, whitespace runs, CJK, emoji, combining marks, the common special-token spellings), decode the
 * ids back (plain, skipping specials, and through the streaming decoder, which must agree with
 * tok_decode(cleanup=0)), and look a few ids and tokens up. */
#include "fuzz.h"
#include "tok/tok.h"

#include <jansson.h>

static const char TEXT[] =
    "<|im_start|>user\nHello, world! It's 2024-06-01: 3.14159 x 42  tabs\there\r\n"
    "\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c \xf0\x9f\x98\x80\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd "
    "cafe\xcc\x81 caf\xc3\xa9 \xef\xbc\xa1\xef\xbc\xa2 <s></s><|endoftext|><|begin_of_text|>"
    "<|eot_id|><|im_end|>   trailing   ";

/* tok.h: the stream equals tok_decode except under a Strip decoder with start > 1 or stop > 0 */
static int strip_breaks_stream(const json_t *d)
{
    if (!json_is_object(d))
        return 0;
    const char *ty = json_string_value(json_object_get(d, "type"));
    if (ty && !strcmp(ty, "Strip")) {
        json_t *st = json_object_get(d, "start"), *sp = json_object_get(d, "stop");
        return (json_is_number(st) && json_number_value(st) > 1) || (json_is_number(sp) && json_number_value(sp) != 0);
    }
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(d, "decoders"), i, v)
    {
        if (strip_breaks_stream(v))
            return 1;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ogk_error e;
    e.msg[0] = 0;
    tok *t = tok_load((const char *)data, size, NULL, 0, &e);
    if (!t) {
        FUZZ_CHECK(e.msg[0]);
        return 0;
    }
    json_t *root = json_loadb((const char *)data, size, 0, NULL);
    int stream_exact = !strip_breaks_stream(json_object_get(root, "decoder"));
    json_decref(root);
    int32_t vs = tok_vocab_size(t);
    FUZZ_CHECK(vs >= 0);
    for (int special = 0; special < 2; special++) {
        int32_t *ids = NULL;
        size_t n = 0;
        if (tok_encode(t, TEXT, sizeof TEXT - 1, special, &ids, &n, &e)) {
            free(ids);
            continue;
        }
        for (size_t i = 0; i < n; i++) {
            FUZZ_CHECK(ids[i] >= 0 && ids[i] < vs);
        }
        size_t len = 0;
        char *s = tok_decode(t, ids, n, 0, 0, &len, &e);
        size_t len2 = 0;
        char *s2 = tok_decode(t, ids, n, 1, -1, &len2, &e);
        free(s2);
        tok_stream *st = tok_stream_new(t, 0);
        if (st && s) {
            size_t cap = len + 64, got = 0;
            char *cat = malloc(cap);
            int ok = 1;
            for (size_t i = 0; i < n && ok; i++) {
                size_t l = 0;
                const char *o = tok_stream_put(st, ids[i], &l, &e);
                if (!o) {
                    ok = 0;
                    break;
                }
                if (got + l > cap) {
                    cap = 2 * (got + l);
                    cat = realloc(cat, cap);
                }
                memcpy(cat + got, o, l);
                got += l;
            }
            size_t l = 0;
            const char *o = ok ? tok_stream_flush(st, &l, &e) : NULL;
            if (o) {
                if (got + l > cap)
                    cat = realloc(cat, got + l);
                memcpy(cat + got, o, l);
                got += l;
                if (stream_exact)
                    FUZZ_CHECK(got == len && !memcmp(cat, s, len));
            }
            free(cat);
        }
        tok_stream_free(st);
        free(s);
        free(ids);
    }
    for (int32_t id = 0; id < vs && id < 8; id++) {
        size_t l = 0;
        const char *tk = tok_id_to_token(t, id, &l);
        if (tk)
            FUZZ_CHECK(tok_token_to_id(t, tk, l) >= 0);
        (void)tok_is_special(t, id);
    }
    (void)tok_bos_id(t);
    (void)tok_eos_id(t);
    tok_free(t);
    return 0;
}
