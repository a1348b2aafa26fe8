/* JSON mode (lib/serve/jsongate.c): the byte automaton against hand-written cases and against jansson
 * (a separate parser) on generated documents and their mutations; every prefix of a document accepted,
 * never a dead end; the vocabulary mask against feeding each piece on its own. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/jgre.h"
#include "serve/jsongate.h"
#include "tap.h"

/* bytes accepted before the first refusal (n: all), and whether the object is then complete */
static size_t run(const char *s, size_t n, int *done)
{
    jg_state st;
    jg_init(&st);
    size_t i = 0;
    while (i < n && jg_feed(&st, (unsigned char)s[i]))
        i++;
    *done = jg_done(&st);
    return i;
}

/* want_stop: bytes taken (-1: all); want_done: complete after them */
static void text_case(const char *s, int want_stop, int want_done)
{
    int done;
    size_t n = strlen(s), got = run(s, n, &done);
    size_t want = want_stop < 0 ? n : (size_t)want_stop;
    char shown[72];
    snprintf(shown, sizeof shown, "%s", s);
    for (char *c = shown; *c; c++)
        *c = *c == '\n' ? '|' : *c == '\r' ? '<' : *c == '\t' ? '>' : *c;
    TAP_OK(got == want && done == want_done, "%-40s taken %zu/%zu done %d", shown, got, n, done);
}

/* ---------------------------------------------------------------- generated documents */

static unsigned long long rng = 88172645463325252ull;
static unsigned rnd(unsigned n)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (unsigned)(rng % n);
}

static void put(char *b, size_t *n, size_t cap, const char *s)
{
    size_t l = strlen(s);
    if (*n + l < cap)
        memcpy(b + *n, s, l), *n += l;
}

static void ws(char *b, size_t *n, size_t cap)
{
    static const char *const w[] = {"", "", "", " ", "\n", "\n  ", "\n\t\t", "\n                    "};
    put(b, n, cap, w[rnd(8)]);
}

static void gen_string(char *b, size_t *n, size_t cap)
{
    static const char *const parts[] = {"a", "key", " ", "\\n", "\\\"", "\\\\", "\\/", "\\u00e9", "\\uD83D\\uDE00",
                                        "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\x7f", "1", "\\t", "\\u001F"};
    put(b, n, cap, "\"");
    for (int i = rnd(4); i > 0; i--)
        put(b, n, cap, parts[rnd(16)]);
    put(b, n, cap, "\"");
}

static void gen_value(char *b, size_t *n, size_t cap, int depth, int object_only)
{
    static const char *const atoms[] = {"0", "-0", "12", "-3.25", "1e5", "2E-3", "0.5e+10", "true", "false", "null"};
    unsigned k = object_only ? 0 : rnd(depth > 5 ? 3 : 6);
    if (k == 0 || k == 4) { /* object */
        put(b, n, cap, "{");
        for (int i = rnd(4), first = 1; i > 0; i--, first = 0) {
            if (!first)
                put(b, n, cap, ",");
            ws(b, n, cap);
            gen_string(b, n, cap);
            ws(b, n, cap);
            put(b, n, cap, ":");
            ws(b, n, cap);
            gen_value(b, n, cap, depth + 1, 0);
            ws(b, n, cap);
        }
        put(b, n, cap, "}");
    } else if (k == 5) {
        put(b, n, cap, "[");
        for (int i = rnd(4), first = 1; i > 0; i--, first = 0) {
            if (!first)
                put(b, n, cap, ",");
            ws(b, n, cap);
            gen_value(b, n, cap, depth + 1, 0);
            ws(b, n, cap);
        }
        put(b, n, cap, "]");
    } else if (k == 1) {
        gen_string(b, n, cap);
    } else {
        put(b, n, cap, atoms[rnd(10)]);
    }
}

/* what the gate should say of a whole text, from jansson: an object, nothing after it, within the gate's
 * own limits: nesting, and white space between tokens (outside strings) that is nothing, one space, or a
 * line break and up to 20 spaces or tabs */
static int jansson_says(const char *s, size_t n)
{
    if (!n || s[n - 1] != '}')
        return 0;
    int depth = 0, in_str = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = 0;
            continue;
        }
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            size_t r = i;
            while (r < n && (s[r] == ' ' || s[r] == '\t' || s[r] == '\n' || s[r] == '\r'))
                r++;
            int ok = (r - i == 1 && c == ' ') || c == '\n';
            for (size_t k = i + 1; c == '\n' && k < r; k++)
                ok &= s[k] == ' ' || s[k] == '\t';
            if (!ok || (c == '\n' && r - i - 1 > 20))
                return 0;
            i = r - 1;
            continue;
        }
        if (c == '"')
            in_str = 1;
        if (c == '{' || c == '[')
            depth++;
        if (c == '}' || c == ']')
            depth--;
        if (depth > JG_MAX_DEPTH)
            return 0;
    }
    size_t lead = strspn(s, " \t\r\n");
    if (s[lead] != '{')
        return 0;
    json_error_t je;
    json_t *j = json_loadb(s, n, JSON_ALLOW_NUL, &je);
    int ok = j && json_is_object(j);
    json_decref(j);
    /* numbers past a double's range are grammatical; jansson refuses them as values */
    return ok || (!j && (strstr(je.text, "overflow") || strstr(je.text, "too big")));
}

/* from every state on the way, some byte goes on (no dead end) */
static int live(const char *s, size_t n)
{
    jg_state st;
    jg_init(&st);
    for (size_t i = 0; i <= n; i++) {
        if (jg_done(&st))
            return 1;
        int any = 0;
        for (int c = 0; c < 256 && !any; c++) {
            jg_state t = st;
            any = jg_feed(&t, (unsigned char)c);
        }
        if (!any || i == n || !jg_feed(&st, (unsigned char)s[i]))
            return any;
    }
    return 1;
}

static void property_runs(void)
{
    static const char mut[] = "{}[]\",:0123456789-+.eEtrufalsn \\u\n\x01\xc3\xa9\xff";
    int docs = 0, doc_ok = 0, prefixes_ok = 1, agree = 0, muts = 0, lives = 1;
    char b[4096];
    for (int it = 0; it < 4000; it++) {
        size_t n = 0;
        static const char *const lead[] = {"", " ", "\n", "\n  "};
        put(b, &n, sizeof b, lead[rnd(4)]);
        gen_value(b, &n, sizeof b, 0, 1);
        b[n] = 0;
        docs++;
        int done;
        size_t got = run(b, n, &done);
        int want = jansson_says(b, n);
        doc_ok += got == n && done == want && want;
        if (!(got == n && done == want && want) && getenv("JG_DEBUG"))
            fprintf(stderr, "doc: got %zu/%zu done %d jansson %d: %.*s\n", got, n, done, want, (int)n, b);
        /* every proper prefix is taken and not complete */
        for (size_t k = 0; k < n; k++) {
            size_t g = run(b, k, &done);
            prefixes_ok &= g == k && !done;
        }
        /* mutations: one byte replaced, inserted or deleted; the gate and jansson agree on the whole */
        for (int m = 0; m < 8; m++) {
            char c[4100];
            size_t cn = 0, at = rnd((unsigned)n + 1);
            memcpy(c, b, at), cn = at;
            unsigned op = rnd(3);
            if (op != 2)
                c[cn++] = mut[rnd(sizeof mut - 1)];
            size_t from = op == 1 ? at : at + 1;
            if (from > n)
                from = n;
            memcpy(c + cn, b + from, n - from), cn += n - from;
            size_t g = run(c, cn, &done);
            int gate = g == cn && done;
            agree += gate == jansson_says(c, cn);
            if (gate != jansson_says(c, cn) && getenv("JG_DEBUG"))
            {
                fprintf(stderr, "mut: gate %d (%zu/%zu): ", gate, g, cn);
                for (size_t q = 0; q < cn; q++)
                    fprintf(stderr, (unsigned char)c[q] < 0x20 || (unsigned char)c[q] > 0x7e ? "\\x%02x" : "%c", (unsigned char)c[q]);
                fprintf(stderr, "\n");
            }
            muts++;
            lives &= live(c, cn);
        }
    }
    TAP_OK(doc_ok == docs, "generated objects: %d of %d taken whole and complete (jansson agrees)", doc_ok, docs);
    TAP_OK(prefixes_ok, "every proper prefix of them taken, none complete");
    TAP_OK(agree == muts, "mutated texts: the gate and jansson agree on %d of %d", agree, muts);
    TAP_OK(lives, "no dead end: every state reached has a byte that goes on");
}

/* ---------------------------------------------------------------- the mask */

typedef struct {
    char **p;
    size_t *n;
} pieces;

static int piece_of(void *arg, int id, char **bytes, size_t *len)
{
    pieces *ps = arg;
    if (!ps->p[id])
        return 0;
    *bytes = malloc(ps->n[id] + 1);
    memcpy(*bytes, ps->p[id], ps->n[id]);
    *len = ps->n[id];
    return 1;
}

static void mask_runs(void)
{
    enum { V = 3000 };
    static const char alpha[] = "{}[]\",: \n0123456789-.eEtruefalsnul\\abc\xc3\xa9\xe2\x82\xac\x80";
    pieces ps = {calloc(V, sizeof(char *)), calloc(V, sizeof(size_t))};
    for (int i = 0; i < V; i++) {
        if (i % 97 == 5)
            continue; /* ids without a piece */
        size_t n = i < 256 ? 1 : 1 + rnd(6);
        ps.p[i] = malloc(n);
        for (size_t k = 0; k < n; k++)
            ps.p[i][k] = i < 256 ? (char)i : alpha[rnd(sizeof alpha - 1)];
        ps.n[i] = n;
        static const char *const fixed[] = {"\",\"", "\":\"", "\"}", "\"]", "\"],\"", "\":", "a\",\"b", "\\\"",
                                            "\",\"a\"", "\":{\"", "\"\"", "\\u00"}; /* leave a string and reenter one */
        if (i >= 256 && i < 256 + (int)(sizeof fixed / sizeof *fixed)) {
            n = strlen(fixed[i - 256]);
            ps.p[i] = realloc(ps.p[i], n);
            memcpy(ps.p[i], fixed[i - 256], n);
            ps.n[i] = n;
        }
        if (i > 300 && i % 11 == 0 && ps.p[i - 1]) { /* shared prefixes */
            size_t m = ps.n[i - 1] < n ? ps.n[i - 1] : n;
            memcpy(ps.p[i], ps.p[i - 1], m - (m > 1));
        }
    }
    ogk_error e;
    jg_vocab *v = jg_vocab_build(V, piece_of, &ps, &e);
    TAP_OK(v != NULL, "a vocabulary of %d pieces", V);
    uint8_t *al = malloc(V);
    int states = 0, same = 0, nonempty = 0;
    char b[2048];
    for (int it = 0; it < 300 && v; it++) {
        size_t n = 0;
        gen_value(b, &n, sizeof b, 0, 1);
        jg_state st;
        jg_init(&st);
        for (size_t k = 0; k < n; k++) {
            if (rnd(3) == 0 || k == n - 1) {
                int cnt = jg_allowed(v, &st, al), want = 0, ok = 1;
                for (int id = 0; id < V; id++) {
                    jg_state t = st;
                    int w = ps.p[id] && jg_feed_bytes(&t, ps.p[id], ps.n[id]);
                    want += w;
                    ok &= (al[id] != 0) == w;
                }
                states++;
                same += ok && cnt == want;
                nonempty += cnt > 0;
            }
            jg_feed(&st, (unsigned char)b[k]);
        }
    }
    TAP_OK(states > 1000 && same == states, "mask = each piece fed alone, in %d of %d states", same, states);
    TAP_OK(nonempty == states, "some token allowed in every state before the end (%d of %d)", nonempty, states);
    jg_state done;
    jg_init(&done);
    jg_feed_bytes(&done, "{}", 2);
    TAP_OK(v && jg_done(&done) && jg_allowed(v, &done, al) == 0, "nothing allowed once the object is complete");
    jg_vocab_free(v);
    for (int i = 0; i < V; i++)
        free(ps.p[i]);
    free(ps.p), free(ps.n), free(al);
}

/* ---------------------------------------------------------------- programs (forced tool calls) */

static jg_prog *call_prog(void)
{
    static const char *const names[] = {"get_weather", "add2", "add", "a-b_c"};
    jg_prog *p = jg_prog_new();
    int rc = jg_prog_lit(p, "<tool_call>\n{\"name\": \"") || jg_prog_names(p, names, 4) ||
             jg_prog_lit(p, "\", \"arguments\": ") || jg_prog_object(p) || jg_prog_lit(p, "}\n</tool_call>");
    if (rc) {
        jg_prog_free(p);
        return NULL;
    }
    return p;
}

static void prog_case(const jg_prog *p, const char *s, int want_stop, int want_done)
{
    jg_state st;
    jg_init_prog(&st, p);
    size_t n = strlen(s), i = 0, want = want_stop < 0 ? n : (size_t)want_stop;
    while (i < n && jg_feed(&st, (unsigned char)s[i]))
        i++;
    char shown[128];
    snprintf(shown, sizeof shown, "%s", s);
    for (char *c = shown; *c; c++)
        *c = *c == '\n' ? '|' : *c;
    TAP_OK(i == want && jg_done(&st) == want_done, "program: %-60s taken %zu/%zu done %d", shown, i, n, jg_done(&st));
}

static void prog_runs(void)
{
    jg_prog *p = call_prog();
    TAP_OK(p != NULL, "a program: literal, 4 names, literal, object, literal");
    if (!p)
        return;
    const char *pre = "<tool_call>\n{\"name\": \"";
    char b[512];
    static const char *const whole[] = {"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>",
                                        "add\", \"arguments\": {}}\n</tool_call>",
                                        "add2\", \"arguments\":  {\"a\": [1, {\"b\": null}]}}\n</tool_call>",
                                        "a-b_c\", \"arguments\": {\"\\u00e9\": \"}\"}}\n</tool_call>"};
    for (int i = 0; i < 4; i++) {
        snprintf(b, sizeof b, "%s%s", pre, whole[i]);
        prog_case(p, b, -1, 1);
    }
    size_t pl = strlen(pre);
    snprintf(b, sizeof b, "%sadd\", \"arguments\": {}}\n</tool_call> ", pre);
    prog_case(p, b, (int)strlen(b) - 1, 1); /* nothing after the program */
    snprintf(b, sizeof b, "%sad\"", pre);
    prog_case(p, b, (int)pl + 2, 0);        /* "ad" is no name */
    snprintf(b, sizeof b, "%ssub\"", pre);
    prog_case(p, b, (int)pl, 0);
    snprintf(b, sizeof b, "%sadd3\"", pre);
    prog_case(p, b, (int)pl + 3, 0);
    snprintf(b, sizeof b, "%s\"", pre);
    prog_case(p, b, (int)pl, 0);            /* an empty name */
    snprintf(b, sizeof b, "%sadd\", \"arguments\": [1]", pre);
    prog_case(p, b, (int)pl + 19, 0);       /* the arguments are an object */
    snprintf(b, sizeof b, "%sadd\",\"arguments\": {}", pre);
    prog_case(p, b, (int)pl + 5, 0);        /* the literal as it is */
    prog_case(p, "<tool_call> {", 11, 0);
    prog_case(p, "Sure! <tool_call>", 0, 0);

    /* the mask against each piece alone, in states along whole calls */
    enum { V = 1500 };
    static const char alpha[] = "<>_/{}[]\",: \nadd2get_weatherlcoknmsuOslo0123456789\\b-\xc3\xa9";
    static const char *const fixed[] = {"<tool_call>", "\n", "{\"", "name", "\": \"", "add", "add2", "get", "_weather",
                                        "\", \"", "arguments", "\":", " {\"", "\"}}", "}\n", "</tool_call>", "\",",
                                        "a-b", "_c\"", "2\", \"arg", "}}\n</tool_call>"};
    char *pc[V];
    size_t pn[V];
    for (int i = 0; i < V; i++) {
        size_t n = i < 256 ? 1 : i < 256 + (int)(sizeof fixed / sizeof *fixed) ? strlen(fixed[i - 256]) : 1 + rnd(7);
        pc[i] = malloc(n + 1);
        for (size_t k = 0; k < n; k++)
            pc[i][k] = i < 256 ? (char)i : i < 256 + (int)(sizeof fixed / sizeof *fixed) ? fixed[i - 256][k]
                                                                                         : alpha[rnd(sizeof alpha - 1)];
        pn[i] = n;
    }
    pieces ps = {pc, pn};
    ogk_error e;
    jg_vocab *v = jg_vocab_build(V, piece_of, &ps, &e);
    uint8_t al[V];
    int states = 0, same = 0, nonempty = 0, live_ok = 1;
    for (int w = 0; w < 4 && v; w++) {
        snprintf(b, sizeof b, "%s%s", pre, whole[w]);
        jg_state st;
        jg_init_prog(&st, p);
        for (size_t k = 0; k < strlen(b); k++) {
            int cnt = jg_allowed(v, &st, al), want = 0, ok = 1, any = 0;
            for (int id = 0; id < V; id++) {
                jg_state t = st;
                int x = jg_feed_bytes(&t, pc[id], pn[id]);
                want += x;
                ok &= (al[id] != 0) == x;
            }
            for (int c = 0; c < 256 && !any; c++) {
                jg_state t = st;
                any = jg_feed(&t, (unsigned char)c);
            }
            live_ok &= any;
            states++, same += ok && cnt == want, nonempty += cnt > 0;
            jg_feed(&st, (unsigned char)b[k]);
        }
    }
    TAP_OK(v && states > 200 && same == states, "program: mask = each piece fed alone, in %d of %d states", same, states);
    TAP_OK(nonempty == states && live_ok, "program: some token and some byte go on in every state before the end");
    jg_vocab_free(v);
    for (int i = 0; i < V; i++)
        free(pc[i]);
    /* refused programs */
    jg_prog *q = jg_prog_new();
    const char *bad[] = {"a\"b"}, *empty[] = {""};
    TAP_OK(q && jg_prog_lit(q, "") == -1 && jg_prog_names(q, bad, 1) == -1, "a program refuses an empty literal and a name with '\"'");
    jg_prog_free(q);
    q = jg_prog_new();
    TAP_OK(q && jg_prog_names(q, empty, 1) == -1 && jg_prog_names(q, bad, 0) == -1, "and an empty name or no names");
    jg_prog_free(q);
    jg_prog_free(p);
}

/* ---------------------------------------------------------------- schemas */

static const char *SCHEMA =
    "{\"type\":\"object\",\"title\":\"Person\",\"properties\":{\"name\":{\"type\":\"string\",\"description\":\"d\"},"
    "\"age\":{\"type\":\"integer\"},\"email\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"null\"}]},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}},\"pet\":{\"$ref\":\"#/$defs/Pet\"},"
    "\"mood\":{\"enum\":[\"happy\",\"sad\",1,12]},\"extra\":{}},\"required\":[\"name\",\"age\",\"pet\"],"
    "\"$defs\":{\"Pet\":{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"cat\"},\"lives\":{\"type\":\"number\"},"
    "\"ok\":{\"type\":\"boolean\"}},\"required\":[\"kind\"],\"additionalProperties\":false}},\"additionalProperties\":false}";

/* s through the gate of p: taken up to want_stop (-1: all), complete or not */
static void schema_case(const jg_prog *p, const char *s, int want_stop, int want_done)
{
    jg_gate g;
    jg_gate_init(&g, p);
    size_t n = strlen(s), i = 0, want = want_stop < 0 ? n : (size_t)want_stop;
    while (i < n && jg_gate_feed(&g, (unsigned char)s[i]))
        i++;
    TAP_OK(i == want && jg_gate_done(&g) == want_done, "schema: %-62s taken %zu/%zu done %d", s, i, n, jg_gate_done(&g));
}

static jg_prog *schema_prog(const char *src, char *err, size_t errn)
{
    json_error_t je;
    json_t *j = json_loads(src, 0, &je);
    jg_schema *sc = j ? jg_schema_compile(j, err, errn) : NULL;
    json_decref(j);
    if (!sc)
        return NULL;
    jg_prog *p = jg_prog_new();
    if (jg_prog_schema(p, sc)) {
        jg_schema_free(sc);
        jg_prog_free(p);
        return NULL;
    }
    return p;
}

static void refused_schema(const char *src, const char *want, const char *what)
{
    char err[256] = "";
    jg_prog *p = schema_prog(src, err, sizeof err);
    TAP_OK(!p && strstr(err, want), "%s: %s", what, err);
    jg_prog_free(p);
}

static int pattern_walks(const jg_prog *p, int walks, int max_bytes, FILE *out, const char *field);

static void schema_runs(void)
{
    char err[256] = "";
    jg_prog *p = schema_prog(SCHEMA, err, sizeof err);
    TAP_OK(p != NULL, "a schema with types, anyOf, enum, const, $ref, nested objects and arrays compiles %s", err);
    if (!p)
        return;
    schema_case(p, "{\"name\": \"Ann\", \"age\": 30, \"pet\": {\"kind\": \"cat\"}}", -1, 1);
    schema_case(p, "{\"name\":\"A\",\"age\":-1,\"email\":null,\"tags\":[\"x\",\"y\"],\"pet\":{\"kind\":\"cat\",\"lives\":9.5,\"ok\":true},\"mood\":12}", -1, 1);
    schema_case(p, " {\"name\": \"A\", \"age\": 1, \"email\": \"a@b\", \"tags\": [], \"pet\": {\"kind\":\"cat\"}, \"mood\": \"sad\"}", -1, 1);
    schema_case(p, "{\"name\":\"A\",\"age\":1,\"pet\":{\"kind\":\"cat\"},\"mood\":1,\"extra\":[1,{\"x\":null}]}", -1, 1);
    schema_case(p, "{\"name\":\"A\",\"age\":1,\"pet\":{\"kind\":\"cat\"},\"extra\":-2.5e3}", -1, 1);
    schema_case(p, "{\"name\":\"A\",\"age\":1.5", 19, 0);                 /* an integer */
    schema_case(p, "{\"name\":\"A\",\"pet\"", 13, 0);                     /* age is required before pet */
    schema_case(p, "{\"age\":1", 2, 0);                                     /* properties in order: name first */
    schema_case(p, "{\"name\":\"A\",\"age\":1,\"pet\":{\"kind\":\"cat\"},\"zzz\"", 42, 0); /* no other keys */
    schema_case(p, "{\"name\":\"A\",\"age\":1,\"pet\":{\"kind\":\"cat\"},\"mood\":3", 48, 0); /* not in the enum */
    schema_case(p, "{\"name\":\"A\",\"age\":1,\"pet\":{\"kind\":\"dog\"", 35, 0); /* the const */
    schema_case(p, "{\"name\":\"A\"}", 11, 0);                             /* age is required */
    schema_case(p, "{\"name\":\"A\",\"age\":1,\"email\":5", 28, 0);       /* a string or null */
    schema_case(p, "{\"name\":\"A\",\"age\":1,\"pet\":{\"kind\":\"cat\",\"lives\":true", 48, 0);
    schema_case(p, "{\"name\":\"A\",\"age\":1,\"pet\":{\"kind\":\"cat\"}} ", 41, 1); /* nothing after */
    schema_case(p, "{\"name\":\"A\",\"age\":1,\"tags\":[1", 28, 0);        /* items are strings */
    /* no dead end along these, and the mask = each piece alone */
    static const char *const pieces_s[] = {"{\"", "name", "\":", " \"", "A\",", " \"age", "\": ", "1", "2", ",", "}",
                                           "\"pet\":", " {\"kind\": \"cat\"}", "}}", "null", "\"mood", "\":1", "2}",
                                           "[\"", "x\",\"", "y\"]", "\"tags\":", "tr", "ue", "9.5", "-", "e3", "\"email",
                                           "\"extra\":", "[1,{", "\"x\":", "\"sad\"", "\"happy", "\"}"};
    enum { NP = sizeof pieces_s / sizeof *pieces_s, V = 256 + NP };
    char *pc[V];
    size_t pn[V];
    for (int i = 0; i < V; i++) {
        const char *src = i < 256 ? NULL : pieces_s[i - 256];
        pn[i] = i < 256 ? 1 : strlen(src);
        pc[i] = malloc(pn[i] + 1);
        if (src)
            memcpy(pc[i], src, pn[i]);
        else
            pc[i][0] = (char)i;
    }
    pieces ps = {pc, pn};
    ogk_error e;
    jg_vocab *v = jg_vocab_build(V, piece_of, &ps, &e);
    static const char *const walks[] = {
        "{\"name\":\"A\",\"age\":-1,\"email\":null,\"tags\":[\"x\",\"y\"],\"pet\":{\"kind\":\"cat\",\"lives\":9.5,\"ok\":true},\"mood\":12}",
        "{\"name\": \"Ann\", \"age\": 30, \"pet\": {\"kind\": \"cat\"}, \"extra\": [1, {\"x\": null}, \"s\", -2.5e3]}"};
    uint8_t al[V];
    int states = 0, same = 0, live_ok = 1;
    for (int w = 0; w < 2 && v; w++) {
        jg_state st;
        jg_init_prog(&st, p);
        for (size_t k = 0; k < strlen(walks[w]); k++) {
            int cnt = jg_allowed(v, &st, al), want = 0, ok = 1, any = 0;
            for (int id = 0; id < V; id++) {
                jg_state t = st;
                int x = jg_feed_bytes(&t, pc[id], pn[id]);
                want += x, ok &= (al[id] != 0) == x;
            }
            for (int c = 0; c < 256 && !any; c++) {
                jg_state t = st;
                any = jg_feed(&t, (unsigned char)c);
            }
            live_ok &= any && cnt > 0;
            states++, same += ok && cnt == want;
            if (!jg_feed(&st, (unsigned char)walks[w][k]))
                live_ok = 0;
        }
        live_ok &= jg_done(&st);
    }
    TAP_OK(v && same == states && states > 150, "schema: mask = each piece fed alone, in %d of %d states", same, states);
    TAP_OK(live_ok, "schema: the walks are taken whole, with a byte and a token to go on in every state");
    jg_vocab_free(v);
    for (int i = 0; i < V; i++)
        free(pc[i]);
    jg_prog_free(p);
    /* recursion through $ref (a tree), nested as deep as the walk allows */
    p = schema_prog("{\"$ref\":\"#/$defs/n\",\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
                    "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/n\"}}},\"required\":[\"v\"]}}}",
                    err, sizeof err);
    TAP_OK(p != NULL, "a recursive schema compiles %s", err);
    if (p) {
        schema_case(p, "{\"v\":1,\"kids\":[{\"v\":2},{\"v\":3,\"kids\":[{\"v\":4,\"kids\":[]}]}]}", -1, 1);
        char deep[1024] = "";
        for (int i = 0; i < 8; i++)
            strcat(deep, "{\"v\":0,\"kids\":[");
        schema_case(p, deep, -1, 0); /* 16 frames: the walk's depth */
        strcat(deep, "{");
        schema_case(p, deep, (int)strlen(deep) - 1, 0);
        jg_prog_free(p);
    }
    p = schema_prog("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":[\"integer\",\"null\"]},\"b\":{\"type\":\"object\"}},"
                    "\"required\":[\"a\",\"b\"]}", err, sizeof err);
    TAP_OK(p != NULL, "type lists and a free object compile %s", err);
    if (p) {
        schema_case(p, "{\"a\":null,\"b\":{\"any\":[1,2]}}", -1, 1);
        schema_case(p, "{\"a\":7,\"b\":[", 11, 0);
        jg_prog_free(p);
    }
    { /* 64 properties, the most an object may have: the last one written, then the end */
        char big[2048] = "{\"type\":\"object\",\"properties\":{";
        for (int i = 0; i < 64; i++)
            sprintf(big + strlen(big), "%s\"p%02d\":{\"type\":\"integer\"}", i ? "," : "", i);
        strcat(big, "}}");
        p = schema_prog(big, err, sizeof err);
        TAP_OK(p != NULL, "64 properties compile %s", err);
        if (p) {
            schema_case(p, "{\"p63\":1}", -1, 1);
            schema_case(p, "{\"p62\":1,\"p63\":2}", -1, 1);
            jg_prog_free(p);
        }
        strcpy(big + strlen(big) - 2, ",\"p64\":{}}}");
        refused_schema(big, "more than 64 properties", "65 properties");
    }
    refused_schema("{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\",\"multipleOf\":2}}}", "'multipleOf' is not supported",
                   "a keyword the walk cannot keep to is refused by name");
    refused_schema("{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"array\",\"uniqueItems\":true}}}", "uniqueItems true",
                   "uniqueItems");
    refused_schema("{\"$ref\":\"https://example.com/s.json\"}", "references are supported", "an outside reference");
    refused_schema("{\"$ref\":\"#/$defs/missing\"}", "is not defined", "a missing definition");
    refused_schema("{\"type\":\"object\",\"properties\":{\"a\":{}},\"additionalProperties\":{\"type\":\"string\"}}",
                   "additionalProperties with a schema beside properties", "additionalProperties with a schema beside properties");
    refused_schema("{\"type\":\"object\",\"additionalProperties\":{\"type\":\"string\"},\"minProperties\":2}",
                   "minProperties above 1", "a dict's minProperties above 1 (a key written twice counts once)");
    refused_schema("{\"type\":\"object\",\"propertyNames\":{\"type\":\"integer\"}}", "property names are strings",
                   "propertyNames that are not strings");
    refused_schema("{\"type\":\"object\",\"patternProperties\":{\"^a\":{},\"^b\":{}}}", "one pattern", "two patternProperties");
    refused_schema("{\"allOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}", "different values",
                   "allOf parts that say different things");
    refused_schema("{\"allOf\":[{\"$ref\":\"#/$defs/a\"}],\"$defs\":{\"a\":{\"allOf\":[{\"$ref\":\"#/$defs/a\"}]}}}",
                   "more than 16", "allOf that leads back to itself");
    refused_schema("{\"type\":\"array\",\"prefixItems\":[{},{}],\"items\":false,\"minItems\":3}", "more than the 2 items",
                   "a tuple shorter than its minItems");
    refused_schema("{\"type\":\"object\",\"properties\":{\"a\":{}},\"minProperties\":1}", "minProperties",
                   "minProperties the required keys do not reach");
    /* dicts: keys of their own, each value of one schema, their count bounded */
    p = schema_prog("{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"},\"maxProperties\":2}", err, sizeof err);
    TAP_OK(p != NULL, "a dict compiles %s", err);
    if (p) {
        schema_case(p, "{}", -1, 1);
        schema_case(p, "{\"a\": 1, \"b\\n\\u00e9\": -2}", -1, 1);
        schema_case(p, "{\"a\":1,\"b\":2,", 12, 0); /* maxProperties */
        schema_case(p, "{\"a\":\"x\"", 5, 0);       /* integers */
        schema_case(p, "{\"a\"}", 4, 0);
        jg_prog_free(p);
    }
    p = schema_prog("{\"type\":\"object\",\"patternProperties\":{\"^[a-z]{2}$\":{\"type\":\"boolean\"}},"
                    "\"additionalProperties\":false,\"minProperties\":1}", err, sizeof err);
    TAP_OK(p != NULL, "patternProperties compiles %s", err);
    if (p) {
        schema_case(p, "{\"ab\":true,\"zz\":false}", -1, 1);
        schema_case(p, "{}", 1, 0);          /* minProperties */
        schema_case(p, "{\"abc", 4, 0);     /* the pattern */
        schema_case(p, "{\"a\"", 3, 0);
        jg_prog_free(p);
    }
    p = schema_prog("{\"type\":\"object\",\"propertyNames\":{\"enum\":[\"x\",\"yy\"]}}", err, sizeof err);
    TAP_OK(p != NULL, "propertyNames compiles %s", err);
    if (p) {
        schema_case(p, "{\"yy\":[1,{\"q\":null}],\"x\":2}", -1, 1);
        schema_case(p, "{\"y\"", 3, 0);
        jg_prog_free(p);
    }
    /* tuples: prefixItems (2020-12), an items list (draft 4 to 2019-09) */
    p = schema_prog("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"integer\"},{\"enum\":[\"a\",\"b\"]}],\"items\":false,"
                    "\"minItems\":1}", err, sizeof err);
    TAP_OK(p != NULL, "prefixItems compiles %s", err);
    if (p) {
        schema_case(p, "[7]", -1, 1);
        schema_case(p, "[7, \"b\"]", -1, 1);
        schema_case(p, "[]", 1, 0);
        schema_case(p, "[\"a\"", 1, 0);
        schema_case(p, "[7,\"a\",", 6, 0); /* items false: two at most */
        jg_prog_free(p);
    }
    p = schema_prog("{\"type\":\"array\",\"items\":[{\"type\":\"string\"}],\"additionalItems\":{\"type\":\"null\"}}", err, sizeof err);
    TAP_OK(p != NULL, "an items list with additionalItems compiles %s", err);
    if (p) {
        schema_case(p, "[\"s\",null,null]", -1, 1);
        schema_case(p, "[\"s\",1", 5, 0);
        jg_prog_free(p);
    }
    /* allOf: the parts together (pydantic's models with a base and a described $ref), OpenAPI's nullable */
    p = schema_prog("{\"type\":\"object\",\"properties\":{\"pet\":{\"allOf\":[{\"$ref\":\"#/$defs/Pet\"}],\"description\":\"d\"},"
                    "\"n\":{\"allOf\":[{\"type\":\"string\",\"maxLength\":3},{\"minLength\":2}]},"
                    "\"m\":{\"type\":\"integer\",\"nullable\":true}},\"required\":[\"pet\",\"n\",\"m\"],"
                    "\"$defs\":{\"Base\":{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"}},\"required\":[\"id\"]},"
                    "\"Pet\":{\"allOf\":[{\"$ref\":\"#/$defs/Base\"},{\"properties\":{\"name\":{\"type\":\"string\"}},"
                    "\"required\":[\"name\"]}]}}}", err, sizeof err);
    TAP_OK(p != NULL, "allOf and nullable compile %s", err);
    if (p) {
        schema_case(p, "{\"pet\":{\"id\":1,\"name\":\"x\"},\"n\":\"ab\",\"m\":null}", -1, 1);
        schema_case(p, "{\"pet\":{\"id\":1,\"name\":\"x\"},\"n\":\"abc\",\"m\":5}", -1, 1);
        schema_case(p, "{\"pet\":{\"name\"", 9, 0); /* the base's id first, and required */
        schema_case(p, "{\"pet\":{\"id\":1}", 14, 0); /* the name is required */
        schema_case(p, "{\"pet\":{\"id\":1,\"name\":\"x\"},\"n\":\"a\"", 33, 0); /* minLength 2 */
        schema_case(p, "{\"pet\":{\"id\":1,\"name\":\"x\"},\"n\":\"abcd", 35, 0); /* maxLength 3 */
        jg_prog_free(p);
    }
    refused_schema("{\"enum\":[1,1]}", "given twice", "an enum value given twice");
    refused_schema("{\"type\":\"complex\"}", "unknown type", "an unknown type");
    /* references that lead back to themselves (a = a | null): compiled, and the alternatives' walk
     * (anyof_leaves) visits each anyOf a bounded number of times instead of going round for ever */
    p = schema_prog("{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#/$defs/a\"}},\"$defs\":{\"a\":{\"anyOf\":"
                    "[{\"$ref\":\"#/$defs/a\"},{\"type\":\"null\"}]}}}", err, sizeof err);
    TAP_OK(p != NULL, "a self-referring anyOf compiles %s", err);
    if (p) {
        schema_case(p, "{\"a\":null}", -1, 1);
        schema_case(p, "{\"a\":1", 5, 0);
        jg_prog_free(p);
    }
    refused_schema("{\"$ref\":\"#/$defs/a\",\"$defs\":{\"a\":{\"anyOf\":[{\"$ref\":\"#/$defs/b\"}]},"
                   "\"b\":{\"anyOf\":[{\"$ref\":\"#/$defs/a\"}]}}}", "no value can keep to it",
                   "references that lead only to references");
    /* required keys without properties: those keys, each value of additionalProperties' schema or any */
    p = schema_prog("{\"type\":\"object\",\"required\":[\"zz\"]}", err, sizeof err);
    TAP_OK(p != NULL, "required without properties compiles %s", err);
    if (p) {
        schema_case(p, "{\"zz\":[1,{\"q\":null}]}", -1, 1);
        schema_case(p, "{}", 1, 0);
        jg_prog_free(p);
    }
    p = schema_prog("{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"},\"required\":[\"a\",\"b\"]}", err, sizeof err);
    TAP_OK(p != NULL, "required beside a dict's values compiles %s", err);
    if (p) {
        schema_case(p, "{\"a\":1,\"b\":-2}", -1, 1);
        schema_case(p, "{\"a\":\"x\"", 5, 0);
        schema_case(p, "{\"a\":1}", 6, 0);
        jg_prog_free(p);
    }
    refused_schema("{\"type\":\"object\",\"patternProperties\":{\"^a\":{}},\"required\":[\"ab\"]}", "required beside patternProperties",
                   "required beside patternProperties");
    refused_schema("{\"type\":\"object\",\"additionalProperties\":false,\"required\":[\"a\"]}", "no object keeps to it",
                   "required keys where no key may be");
    /* schemas no value keeps to are refused when compiled, not found out by a walk that cannot go on */
    refused_schema("{\"$ref\":\"#/$defs/n\",\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"c\":{\"$ref\":\"#/$defs/n\"}},"
                   "\"required\":[\"c\"]}}}", "no value can keep to it", "a required property that leads back to its object");
    refused_schema("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":[]}}}", "empty list", "an empty list of types");
    refused_schema("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":1e15}}}",
                   "no integer of at most 15 digits", "integers of 16 digits and more");
    refused_schema("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"maximum\":-1e15}}}",
                   "no integer of at most 15 digits", "integers of 16 digits and more, negative");
    refused_schema("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"number\",\"minimum\":1e15}}}",
                   "no number of at most 15 digits", "numbers from 1e15");
    /* bounds beyond 1e15 on the side that keeps every 15-digit number: zod's z.number().int() (2^53 - 1) */
    p = schema_prog("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":-9007199254740991,"
                    "\"maximum\":9007199254740991},\"b\":{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":1e300}},"
                    "\"required\":[\"a\",\"b\"],\"additionalProperties\":false}", err, sizeof err);
    TAP_OK(p != NULL, "zod's safe-integer bounds and a maximum of 1e300 compile %s", err);
    if (p) {
        schema_case(p, "{\"a\":-999999999999999,\"b\":99999999999999.9}", -1, 1);
        schema_case(p, "{\"a\":1234567890123456", 20, 0); /* 15 digits at most */
        schema_case(p, "{\"a\":1,\"b\":-", 11, 0);          /* b > 0 still */
        jg_prog_free(p);
    }
    /* JSON Schema's content annotations, as zod writes them beside a base64 string's pattern: the pattern kept */
    p = schema_prog("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"format\":\"base64\","
                    "\"contentEncoding\":\"base64\",\"contentMediaType\":\"image/png\",\"pattern\":\"^$|^(?:[0-9a-zA-Z+/]{4})*"
                    "(?:(?:[0-9a-zA-Z+/]{2}==)|(?:[0-9a-zA-Z+/]{3}=))?$\"}},\"required\":[\"a\"],\"additionalProperties\":false}",
                    err, sizeof err);
    TAP_OK(p != NULL, "contentEncoding and contentMediaType are annotations %s", err);
    if (p) {
        schema_case(p, "{\"a\":\"QUJDRA==\"}", -1, 1);
        schema_case(p, "{\"a\":\"Q=", 7, 0);
        jg_prog_free(p);
    }
    refused_schema("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"number\",\"minimum\":1e-20,\"maximum\":1e-20}}}",
                   "too narrow", "one number that 15 digits without an exponent do not write");
    p = schema_prog("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"number\",\"minimum\":1e-5,\"maximum\":1e-5}}}", err, sizeof err);
    TAP_OK(p != NULL, "one number that they do write (1e-5 as 0.00001) compiles %s", err);
    if (p) {
        schema_case(p, "{\"a\":0.00001}", -1, 1);
        jg_prog_free(p);
    }
    /* nesting: a value whose least form nests more than JG_SCHEMA_DEPTH values is refused; as deep as that
     * is taken; optional nesting (a tree) is offered only while it can still end */
    for (int deep = JG_SCHEMA_DEPTH - 1; deep <= JG_SCHEMA_DEPTH; deep++) {
        char sch[2048] = "", doc[256] = "";
        for (int i = 0; i < deep; i++)
            strcat(sch, "{\"type\":\"array\",\"minItems\":1,\"items\":"), strcat(doc, "[");
        strcat(sch, "{\"type\":\"integer\"}"), strcat(doc, "7");
        for (int i = 0; i < deep; i++)
            strcat(sch, "}"), strcat(doc, "]");
        if (deep == JG_SCHEMA_DEPTH) {
            refused_schema(sch, "more than the 16 supported", "arrays that must hold an item, 16 deep, and an integer in them");
        } else {
            p = schema_prog(sch, err, sizeof err);
            TAP_OK(p != NULL, "arrays that must hold an item, 15 deep, and an integer in them compile %s", err);
            if (p) {
                schema_case(p, doc, -1, 1);
                jg_prog_free(p);
            }
        }
    }
    /* a tree: children of its own schema ("#"), and optional parts that must hold something ("pair" an
     * integer, "w" its x): offered only where that still fits (without the check the walk would take
     * "pair":[ in the deepest object and then have nothing to go on with) */
    p = schema_prog("{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},\"kids\":{\"type\":\"array\","
                    "\"items\":{\"$ref\":\"#\"}},\"pair\":{\"type\":\"array\",\"minItems\":1,\"items\":{\"type\":\"integer\"}},"
                    "\"w\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"}},\"required\":[\"x\"]},"
                    "\"m\":{\"type\":\"object\",\"additionalProperties\":{\"$ref\":\"#\"}}}}", err, sizeof err);
    TAP_OK(p != NULL, "a tree (optional children of its own schema) compiles %s", err);
    if (p) {
        int ended = pattern_walks(p, 200, 4000, NULL, NULL);
        TAP_OK(ended > 0, "a tree: 200 random walks, no dead end (%d ended)", ended);
        char doc[512] = "";
        for (int i = 0; i < JG_SCHEMA_DEPTH / 2 - 1; i++)
            strcat(doc, "{\"kids\":["); /* objects in frames 0, 2, .. 12, arrays in 1, 3, .. 13 */
        size_t at = strlen(doc);
        strcat(doc, "{\"v\":1,\"kids\":[],\"pair\":[1]}"); /* an object in frame 14: "pair" would need 16 frames */
        schema_case(p, doc, (int)at + 18, 0);
        doc[at] = 0;
        strcat(doc, "{\"w\":{\"x\":1}}");
        schema_case(p, doc, (int)at + 2, 0);
        doc[at] = 0;
        strcat(doc, "{\"v\":1,\"kids\":[{\"v\":2}]}"); /* kids in frame 15 cannot hold an object */
        schema_case(p, doc, (int)at + 15, 0);
        doc[at - strlen("{\"kids\":[")] = 0;
        strcat(doc, "{\"pair\":[1],\"w\":{\"x\":1}}"); /* both, in frame 12 */
        schema_case(p, doc, -1, 0);
        jg_prog_free(p);
    }
}

/* ---------------------------------------------------------------- unions (anyOf whose alternatives begin alike) */

static const char *UNION =
    "{\"type\":\"object\",\"properties\":{\"pets\":{\"type\":\"array\",\"items\":{\"anyOf\":["
    "{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"cat\"},\"lives\":{\"type\":\"integer\"}},\"required\":[\"kind\",\"lives\"]},"
    "{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"dog\"},\"good\":{\"type\":\"boolean\"}},\"required\":[\"kind\",\"good\"]},"
    "{\"type\":\"object\",\"properties\":{\"kind\":{\"type\":\"string\",\"maxLength\":4}},\"required\":[\"kind\"]}]},\"maxItems\":4},"
    "\"n\":{\"anyOf\":[{\"type\":\"integer\",\"minimum\":0,\"maximum\":9},{\"type\":\"number\",\"minimum\":100}]},"
    "\"mode\":{\"anyOf\":[{\"enum\":[\"auto\",\"none\"]},{\"type\":\"string\",\"maxLength\":2}]}},\"required\":[\"pets\"]}";

static void schema_unions(void)
{
    char err[256] = "";
    jg_prog *p = schema_prog(UNION, err, sizeof err);
    TAP_OK(p != NULL, "unions: objects alike, integer beside number, an enum beside a string compile %s", err);
    if (!p)
        return;
    static const struct {
        const char *s;
        int stop, done;
    } cases[] = {
        {"{\"pets\":[{\"kind\":\"cat\",\"lives\":9}]}", -1, 1},
        {"{\"pets\":[{\"kind\":\"dog\",\"good\":true},{\"kind\":\"cat\",\"lives\":1}]}", -1, 1},
        {"{\"pets\":[{\"kind\":\"cow\"}]}", -1, 1},          /* the third: any kind of up to 4 characters */
        {"{\"pets\":[{\"kind\":\"cat\"}]}", -1, 1},          /* the third again ("cat" fits it) */
        {"{\"pets\":[{\"kind\":\"horse\"}]}", 22, 0},        /* none: too long for the third */
        {"{\"pets\":[{\"kind\":\"cat\",\"good\"", 24, 0},    /* the cat has lives, the third no other keys */
        {"{\"pets\":[{\"kind\":\"dog\",\"lives\"", 24, 0},
        {"{\"pets\":[{\"kind\":\"dog\"}", 23, 0},            /* good is required of the dog ("dog" is no kind of the third? it is) */
        {"{\"pets\":[],\"n\":7}", -1, 1},
        {"{\"pets\":[],\"n\":123.5}", -1, 1},
        {"{\"pets\":[],\"n\":12}", 17, 0},                    /* 12: no integer <= 9, no number >= 100 */
        {"{\"pets\":[],\"mode\":\"auto\"}", -1, 1},
        {"{\"pets\":[],\"mode\":\"ab\"}", -1, 1},
        {"{\"pets\":[],\"mode\":\"abc", 21, 0},
        {"{\"pets\":[],\"mode\":\"autos", 23, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        schema_case(p, cases[i].s, cases[i].stop, cases[i].done);
    /* paths that meet again are merged: a long array of items that two alternatives both fit */
    jg_gate g;
    jg_gate_init(&g, p);
    const char *many = "{\"pets\":[{\"kind\":\"cat\",\"lives\":1},{\"kind\":\"cat\",\"lives\":2},{\"kind\":\"cat\",\"lives\":3},"
                       "{\"kind\":\"cat\",\"lives\":4}],\"n\":5,\"mode\":\"no\"}";
    int most = 0, ok = 1;
    for (const char *c = many; *c && ok; c++) {
        ok = jg_gate_feed(&g, (unsigned char)*c);
        most = g.n > most ? g.n : most;
    }
    TAP_OK(ok && jg_gate_done(&g) && most <= 3 && g.n == 1, "unions: the paths merge after each item (at most %d, %d at the end)",
           most, g.n);
    /* the mask against each piece fed alone through a copy of the gate, in every state of some documents;
     * the pieces: every substring of up to 12 bytes of the documents, so many span the bytes that choose */
    const char *docs[] = {"{\"pets\":[{\"kind\":\"dog\",\"good\":false},{\"kind\":\"ca\"}],\"n\":104,\"mode\":\"none\"}",
                          "{\"pets\":[{\"kind\":\"cat\",\"lives\":-3}],\"n\":0,\"mode\":\"x\"}"};
    enum { MAXP = 4096 };
    char **pc = calloc(MAXP, sizeof *pc);
    size_t *pn = calloc(MAXP, sizeof *pn);
    int V = 0;
    for (int d = 0; d < 2; d++)
        for (size_t a = 0; docs[d][a]; a++)
            for (size_t l = 1; l <= 12 && docs[d][a + l - 1]; l++) {
                int dup = 0;
                for (int k = 0; k < V && !dup; k++)
                    dup = pn[k] == l && !memcmp(pc[k], docs[d] + a, l);
                if (!dup && V < MAXP)
                    pc[V] = strndup(docs[d] + a, l), pn[V++] = l;
            }
    pieces ps = {pc, pn};
    ogk_error e;
    jg_vocab *v = jg_vocab_build(V, piece_of, &ps, &e);
    uint8_t *al = malloc((size_t)V);
    int states = 0, same = 0, nonempty = 0, forked = 0;
    for (int d = 0; d < 2 && v; d++) {
        jg_gate_init(&g, p);
        for (const char *c = docs[d]; *c; c++) {
            int cnt = jg_gate_allowed(v, &g, al), want = 0, agree = 1;
            for (int id = 0; id < V; id++) {
                jg_gate t = g;
                int x = jg_gate_feed_bytes(&t, pc[id], pn[id]);
                want += x, agree &= (al[id] != 0) == x;
            }
            states++, same += agree && cnt == want, nonempty += cnt > 0, forked += g.n > 1;
            if (!jg_gate_feed(&g, (unsigned char)*c))
                break;
        }
    }
    TAP_OK(v && states == (int)(strlen(docs[0]) + strlen(docs[1])) && same == states && nonempty == states,
           "unions: mask = each piece fed alone, in %d of %d states (%d of them with more than one path, %d with some token)",
           same, states, forked, nonempty);
    /* one state's mask walks the alternatives a piece chooses inside itself: "{\"kind\":\"dog\"" is the
     * second alternative's, past the first byte that chose the first */
    jg_gate_init(&g, p);
    jg_gate_feed_bytes(&g, "{\"pets\":[", 9);
    int id = -1;
    for (int k = 0; k < V && v; k++)
        if (pn[k] == 12 && !memcmp(pc[k], "{\"kind\":\"dog", 12))
            id = k;
    TAP_OK(id >= 0 && g.n == 1 && jg_allowed(v, &g.s[0], al) > 0 && al[id], "unions: a piece that chooses inside itself is allowed");
    jg_vocab_free(v);
    for (int i = 0; i < V; i++)
        free(pc[i]);
    free(pc), free(pn), free(al);
    jg_prog_free(p);
    /* more alike alternatives than the gate follows: the first JG_FORKS stay, the rest cannot be written */
    char big[8192] = "{\"anyOf\":[";
    for (int i = 0; i < JG_FORKS + 4; i++)
        snprintf(big + strlen(big), sizeof big - strlen(big), "%s{\"type\":\"object\",\"properties\":{\"t\":{\"const\":\"k%02d\"}},"
                 "\"required\":[\"t\"]}", i ? "," : "", i);
    strcat(big, "]}");
    p = schema_prog(big, err, sizeof err);
    TAP_OK(p != NULL, "%d alike alternatives compile %s", JG_FORKS + 4, err);
    if (p) {
        char doc[64];
        snprintf(doc, sizeof doc, "{\"t\":\"k%02d\"}", JG_FORKS - 1);
        schema_case(p, doc, -1, 1);
        snprintf(doc, sizeof doc, "{\"t\":\"k%02d\"}", JG_FORKS);
        schema_case(p, doc, 8, 0);
        jg_prog_free(p);
    }
}

/* ---------------------------------------------------------------- bounds */

/* {"n": TEXT} against an object schema whose n is `inner`: accepted whole and complete? */
static int bounded_whole(const jg_prog *p, const char *text)
{
    char doc[128];
    snprintf(doc, sizeof doc, "{\"n\":%s}", text);
    jg_state st;
    jg_init_prog(&st, p);
    for (const char *c = doc; *c; c++)
        if (!jg_feed(&st, (unsigned char)*c))
            return 0;
    return jg_done(&st);
}

/* what the bounds say of TEXT, from jansson and strtod: a JSON number without exponent, in bounds */
static int number_in(const char *text, int integer, double lo, int lo_ex, double hi, int hi_ex)
{
    char doc[128];
    snprintf(doc, sizeof doc, "[%s]", text);
    json_t *j = json_loads(doc, 0, NULL);
    int ok = j && json_is_number(json_array_get(j, 0)) && !strpbrk(text, "eE") && (!integer || !strchr(text, '.'));
    json_decref(j);
    if (!ok)
        return 0;
    double x = strtod(text, NULL);
    return (lo_ex ? x > lo : x >= lo) && (hi_ex ? x < hi : x <= hi);
}

/* every text of up to maxlen bytes over "-0123456789." as n: the gate takes exactly the ones in bounds, and
 * from every prefix it takes some byte still goes on (no dead end) */
static void bounded_numbers(int maxlen, const char *type, const char *bounds, double lo, int lo_ex, double hi, int hi_ex)
{
    static const char alpha[] = "-0123456789.";
    char src[256], err[256] = "";
    snprintf(src, sizeof src, "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"%s\",%s}},\"required\":[\"n\"]}", type,
             bounds);
    jg_prog *p = schema_prog(src, err, sizeof err);
    if (!p) {
        TAP_OK(0, "bounds %s %s compile: %s", type, bounds, err);
        return;
    }
    int integer = !strcmp(type, "integer");
    long texts = 0, wrong = 0, taken = 0, dead = 0;
    char t[8], first_wrong[16] = "";
    for (int len = 1; len <= maxlen; len++) {
        long total = 1;
        for (int i = 0; i < len; i++)
            total *= 12;
        for (long code = 0; code < total; code++) {
            long x = code;
            for (int i = 0; i < len; i++, x /= 12)
                t[i] = alpha[x % 12];
            t[len] = 0;
            texts++;
            int want = number_in(t, integer, lo, lo_ex, hi, hi_ex), got = bounded_whole(p, t);
            if (want != got && !wrong++)
                snprintf(first_wrong, sizeof first_wrong, "%s", t);
            taken += got;
            /* the prefix {"n":t taken: some byte goes on */
            jg_state st;
            jg_init_prog(&st, p);
            char doc[32];
            snprintf(doc, sizeof doc, "{\"n\":%s", t);
            int all = 1;
            for (const char *c = doc; *c && all; c++)
                all = jg_feed(&st, (unsigned char)*c);
            if (all) { /* probing only bytes a number or what ends it could take: finds more dead ends, never fewer */
                int any = 0;
                for (const char *c = "0123456789.-}, "; *c && !any; c++) {
                    jg_state u = st;
                    any = jg_feed(&u, (unsigned char)*c);
                }
                dead += !any;
            }
        }
    }
    TAP_OK(!wrong && !dead && taken > 0, "bounds: %s %s: %ld texts, %ld numbers taken, %ld wrong (first '%s'), %ld dead ends",
           type, bounds, texts, taken, wrong, first_wrong, dead);
    jg_prog_free(p);
}

/* random walks from the start: each byte drawn from the ones the gate takes; the object must end within 64 */
static void bounded_walks(const char *inner, const char *what)
{
    char src[512], err[256] = "";
    snprintf(src, sizeof src, "{\"type\":\"object\",\"properties\":{\"n\":%s},\"required\":[\"n\"]}", inner);
    jg_prog *p = schema_prog(src, err, sizeof err);
    int ended = 0, walks = 100;
    for (int w = 0; p && w < walks; w++) {
        jg_state st;
        jg_init_prog(&st, p);
        for (int k = 0; k < 64 && !jg_done(&st); k++) {
            unsigned char ok[256];
            int n = 0;
            for (int c = 0; c < 256; c++) {
                jg_state u = st;
                if (c != ' ' && c != '\n' && c != '\t' && jg_feed(&u, (unsigned char)c)) /* white space idles */
                    ok[n++] = (unsigned char)c;
            }
            if (!n)
                break;
            /* ending bytes ('"', ']', '}', ',') twice as likely, so the walks end */
            unsigned char c = ok[rnd((unsigned)n)];
            for (int r = 0; r < 2 && !strchr("\"]},", c); r++)
                c = ok[rnd((unsigned)n)];
            jg_feed(&st, c);
        }
        ended += jg_done(&st);
    }
    TAP_OK(p && ended == walks, "bounds: %s: %d of %d random walks end %s", what, ended, walks, err);
    jg_prog_free(p);
}

/* ---------------------------------------------------------------- patterns */

/* {"s": a string with KEY (pattern, format) VALUE}, required */
static jg_prog *string_prog(const char *key, const char *pattern, char *err, size_t errn)
{
    json_t *j = json_pack("{s:s,s:{s:{s:s,s:s}},s:[s]}", "type", "object", "properties", "s", "type", "string", key,
                          pattern, "required", "s");
    char *src = j ? json_dumps(j, 0) : NULL;
    json_decref(j);
    jg_prog *p = src ? schema_prog(src, err, errn) : NULL;
    free(src);
    return p;
}
static jg_prog *pattern_prog(const char *pattern, char *err, size_t errn)
{
    return string_prog("pattern", pattern, err, errn);
}

/* random walks through {"s": "..."}: each byte drawn from all those the gate takes (UTF-8 sequences and
 * escapes among them, '"' favoured so strings end); out: the values of the walks that ended, a JSON text
 * a line (NULL: not kept). Returns the walks that ended, or -1 at a dead end (a state taking no byte). */
static int pattern_walks(const jg_prog *p, int walks, int max_bytes, FILE *out, const char *field)
{
    int ended = 0;
    for (int w = 0; w < walks; w++) {
        jg_gate st;
        jg_gate_init(&st, p);
        char doc[4096];
        size_t n = 0;
        for (int k = 0; k < max_bytes && !jg_gate_done(&st) && n < sizeof doc - 1; k++) {
            unsigned char ok[256];
            int m = 0;
            for (int c = 0; c < 256; c++) {
                jg_gate u = st;
                if (c != ' ' && c != '\n' && c != '\t' && jg_gate_feed(&u, (unsigned char)c))
                    ok[m++] = (unsigned char)c;
            }
            if (!m) {
                doc[n] = 0;
                fprintf(stderr, "# dead end after: %s\n", doc);
                return -1;
            }
            unsigned char c = ok[rnd((unsigned)m)];
            if (field)
                for (int r = 0; r < 3 && !strchr("\"}", c) && memchr(ok, '"', (size_t)m); r++)
                    c = ok[rnd((unsigned)m)];
            else /* whole documents: the bytes that end things (strings, containers, numbers) favoured */
                for (int r = 0; r < 3 && !strchr("\"}],", c); r++)
                    c = ok[rnd((unsigned)m)];
            jg_gate_feed(&st, c);
            doc[n++] = (char)c;
        }
        doc[n] = 0;
        if (jg_gate_done(&st)) {
            ended++;
            if (out) {
                /* as jansson writes it (the whole document as written where jansson refuses a number beyond
                 * a double's range: valid JSON, which other parsers read as infinite) */
                json_t *j = json_loadb(doc, n, JSON_ALLOW_NUL, NULL);
                char *v = j ? json_dumps(field ? json_object_get(j, field) : j, JSON_ENCODE_ANY | JSON_ENSURE_ASCII) : NULL;
                fprintf(out, "%s\n", v ? v : field ? "null" : doc);
                free(v);
                json_decref(j);
            }
        }
    }
    return ended;
}

static void pattern_runs(void)
{
    static const char *const ok[] = {"^[A-Z]{2}-[0-9]{3}$", "x(yz)?\\d", "^(?:a|bc)*$", "^\\w+@\\w+\\.(com|org)$",
                                     "^[^\\s\"]{1,4}$", "^\\u00e9|\\uD83D\\uDE00$", "^.{3}$", "^[\\d-]+$", "abc",
                                     "^\\$\\d+(\\.\\d{2})?$", "^(?<y>\\d{4})-\\d\\d$", "^[a-c]*?x+?$", ""};
    char err[256];
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        err[0] = 0;
        jg_prog *p = pattern_prog(ok[i], err, sizeof err);
        int ended = p ? pattern_walks(p, 60, 48, NULL, "s") : -1;
        /* (random bytes seldom spell what some patterns want, so not every walk ends; none may get stuck) */
        TAP_OK(p && ended >= 0, "pattern %-36s compiles %s; 60 random walks: no dead end, %d ended", ok[i], err, ended);
        jg_prog_free(p);
    }
    static const struct {
        const char *pat, *want;
    } bad[] = {{"(a)\\1", "back-reference"}, {"a(?=b)", "look-around"}, {"\\bword", "word boundary"},
               {"a^b", "'^' only"},        {"a{3,2}", "out of order"},  {"(ab", "without ')'"},
               {"ab)", "without '('"},     {"[ab", "without ']'"},     {"[b-a]", "out of order"},
               {"*a", "nothing to repeat"}, {"a**", "after a quantifier"}, {"x{200}", "count above"},
               {"(a{60}){3}", "positions"}, {"[^\\s\\S]", "matches no string"}, {"\\q", "unknown escape"},
               {"((((a{9}){9}){9}){9})", "positions"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = 0;
        jg_prog *p = pattern_prog(bad[i].pat, err, sizeof err);
        TAP_OK(!p && strstr(err, bad[i].want) && strstr(err, "pattern"), "pattern %-20s refused: %s", bad[i].pat, err);
        jg_prog_free(p);
    }
    refused_schema("{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\",\"pattern\":\"a\",\"maxLength\":3}}}",
                   "beside minLength or maxLength", "pattern with a length bound");
    refused_schema("{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"integer\",\"pattern\":\"a\"}}}",
                   "\"type\": \"string\"", "pattern beside another type");
    refused_schema("{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\",\"pattern\":5}}}", "must be a string",
                   "a pattern that is not a string");
    /* by hand: closed only where it matches, a character only while a match can still come */
    jg_prog *p = pattern_prog("^[A-Z]{2}-\\d$", err, sizeof err);
    if (p) {
        schema_case(p, "{\"s\":\"AB-7\"}", -1, 1);
        schema_case(p, "{\"s\":\"AB-\"", 9, 0);   /* no digit yet: not closed */
        schema_case(p, "{\"s\":\"Ab", 7, 0);     /* lower case */
        schema_case(p, "{\"s\":\"AB-77", 10, 0); /* one digit only */
        schema_case(p, "{\"s\":\"\\u0041\\u0042-\\u0039\"}", -1, 1); /* escapes are their characters */
        schema_case(p, "{\"s\":\"\\u0061", 10, 0);   /* \u006 begins no capital: refused at its '6' */
        schema_case(p, "{\"s\":\"\\u01", 9, 0);      /* no character from U+0100 up can come */
        schema_case(p, "{\"s\":\"\xc3", 6, 0);         /* nor one of two bytes */
        jg_prog_free(p);
    }
    p = pattern_prog("^\\uD83D\\uDE00\u00e9$", err, sizeof err);
    if (p) {
        schema_case(p, "{\"s\":\"\xf0\x9f\x98\x80\xc3\xa9\"}", -1, 1);
        schema_case(p, "{\"s\":\"\\uD83D\\uDE00\\u00E9\"}", -1, 1);
        schema_case(p, "{\"s\":\"\\uD83D\\uDE01", 17, 0); /* another emoji: its last digit */
        schema_case(p, "{\"s\":\"\xf0\x9f\x98\x81", 9, 0);
        schema_case(p, "{\"s\":\"\\uD83E", 11, 0);         /* the high half decides the range */
        jg_prog_free(p);
    }
    /* "format": dates as RFC 3339 has them (month lengths, leap years), a pattern or a length bound first */
    p = string_prog("format", "date", err, sizeof err);
    if (p) {
        schema_case(p, "{\"s\":\"2024-02-29\"}", -1, 1);
        schema_case(p, "{\"s\":\"2000-02-29\"}", -1, 1);
        schema_case(p, "{\"s\":\"2023-02-29", 15, 0); /* not a leap year: its '9' */
        schema_case(p, "{\"s\":\"1900-02-29", 15, 0); /* a century not divisible by 400 */
        schema_case(p, "{\"s\":\"2023-04-31", 15, 0); /* April has 30 days */
        schema_case(p, "{\"s\":\"2023-12-31\"}", -1, 1);
        schema_case(p, "{\"s\":\"2023-13", 12, 0);
        schema_case(p, "{\"s\":\"2023-1-", 12, 0);   /* two-digit months */
        jg_prog_free(p);
    }
    p = string_prog("format", "date-time", err, sizeof err);
    if (p) {
        schema_case(p, "{\"s\":\"2026-12-06T09:15:00Z\"}", -1, 1);
        schema_case(p, "{\"s\":\"2026-12-06T23:59:59.123456+05:30\"}", -1, 1);
        schema_case(p, "{\"s\":\"2026-12-06T24", 18, 0);
        schema_case(p, "{\"s\":\"2026-12-06T09:15:00\"", 25, 0); /* no offset: not closed */
        jg_prog_free(p);
    }
    p = schema_prog("{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\",\"format\":\"uuid\","
                    "\"pattern\":\"^x$\"}}}", err, sizeof err);
    if (p) { /* the schema's own pattern, not the format's */
        schema_case(p, "{\"s\":\"x\"}", -1, 1);
        jg_prog_free(p);
    }
    p = schema_prog("{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\",\"format\":\"ipv4\","
                    "\"maxLength\":3}}}", err, sizeof err);
    if (p) { /* lengths given: the format is an annotation */
        schema_case(p, "{\"s\":\"abc\"}", -1, 1);
        jg_prog_free(p);
    }
    p = string_prog("format", "hostname", err, sizeof err); /* not one of them: an annotation */
    if (p) {
        schema_case(p, "{\"s\":\"any thing\"}", -1, 1);
        jg_prog_free(p);
    }
}

static void bounds_runs(void)
{
    bounded_numbers(5, "integer", "\"minimum\":-12,\"maximum\":345", -12, 0, 345, 0);
    bounded_numbers(4, "integer", "\"exclusiveMinimum\":0,\"exclusiveMaximum\":100", 0, 1, 100, 1);
    bounded_numbers(4, "integer", "\"minimum\":2.5", 2.5, 0, INFINITY, 0);
    bounded_numbers(4, "integer", "\"maximum\":-7", -INFINITY, 0, -7, 0);
    bounded_numbers(4, "integer", "\"minimum\":5,\"maximum\":5", 5, 0, 5, 0);
    bounded_numbers(4, "integer", "\"minimum\":10,\"exclusiveMinimum\":true,\"maximum\":99", 10, 1, 99, 0); /* draft 4 */
    bounded_numbers(5, "number", "\"minimum\":0.5,\"maximum\":2.25", 0.5, 0, 2.25, 0);
    bounded_numbers(4, "number", "\"exclusiveMinimum\":-1,\"maximum\":0.3", -1, 1, 0.3, 0);
    bounded_numbers(4, "number", "\"minimum\":0,\"exclusiveMaximum\":1", 0, 0, 1, 1);
    bounded_numbers(5, "number", "\"minimum\":-0.05", -0.05, 0, INFINITY, 0);
    bounded_numbers(4, "number", "\"minimum\":12.5,\"maximum\":12.5", 12.5, 0, 12.5, 0);
    bounded_numbers(4, "number", "\"exclusiveMinimum\":99.9", 99.9, 1, INFINITY, 0);
    bounded_walks("{\"type\":\"number\",\"minimum\":0.123,\"exclusiveMaximum\":0.124}", "a number in [0.123, 0.124)");
    bounded_walks("{\"type\":\"integer\",\"minimum\":-999999999999999,\"maximum\":-999999999999990}", "15-digit integers");
    bounded_walks("{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":1e-12}", "a number in (0, 1e-12]");
    bounded_walks("{\"type\":\"array\",\"minItems\":2,\"maxItems\":3,\"items\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":3}}",
                  "arrays of 2-3 strings of 1-3 characters");
    char err[256] = "";
    jg_prog *p = schema_prog("{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\",\"minLength\":2,\"maxLength\":4},"
                             "\"a\":{\"type\":\"array\",\"minItems\":1,\"maxItems\":2,\"items\":{\"type\":\"integer\"}},"
                             "\"z\":{\"type\":[\"string\",\"null\"],\"maxLength\":0}}}", err, sizeof err);
    TAP_OK(p != NULL, "minLength/maxLength, minItems/maxItems compile %s", err);
    if (p) {
        schema_case(p, "{\"s\":\"ab\"}", -1, 1);
        schema_case(p, "{\"s\":\"a\"}", 7, 0);                           /* too short to end */
        schema_case(p, "{\"s\":\"abcde\"}", 10, 0);                      /* the fifth character */
        schema_case(p, "{\"s\":\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80x\"}", -1, 1); /* 4 characters in 10 bytes */
        schema_case(p, "{\"s\":\"\\u00e9\\uD83D\\uDE00\\n\"}", -1, 1);  /* 3: a \u pair is one character */
        schema_case(p, "{\"s\":\"\\u00e9\\uD83D\\uDE00\\n\\tx\"}", 28, 0); /* the fifth */
        schema_case(p, "{\"a\":[]", 6, 0);                               /* minItems 1 */
        schema_case(p, "{\"a\":[1,22]}", -1, 1);
        schema_case(p, "{\"a\":[1,22,", 10, 0);                          /* maxItems 2 */
        schema_case(p, "{\"z\":\"\"}", -1, 1);
        schema_case(p, "{\"z\":null}", -1, 1);
        schema_case(p, "{\"z\":\"x", 6, 0);
        jg_prog_free(p);
    }
    /* the mask on a bounded string: plain pieces are walked, not waved through */
    p = schema_prog("{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\",\"minLength\":3,\"maxLength\":5}}}", err, sizeof err);
    static const char *const pcs[] = {"a", "ab", "abc", "abcd", "abcdef", "\"", "a\"", "abc\"", "\xc3\xa9", "\\n", "}", "{\"s\":\""};
    enum { NP = sizeof pcs / sizeof *pcs };
    char *pc[NP];
    size_t pn[NP];
    for (int i = 0; i < NP; i++)
        pc[i] = strdup(pcs[i]), pn[i] = strlen(pcs[i]);
    pieces ps = {pc, pn};
    ogk_error e;
    jg_vocab *v = p ? jg_vocab_build(NP, piece_of, &ps, &e) : NULL;
    int states = 0, same = 0;
    const char *walk = "{\"s\":\"abcd\xc3\xa9\"}";
    jg_state st;
    if (p)
        jg_init_prog(&st, p);
    for (size_t k = 0; v && k < strlen(walk); k++) {
        uint8_t al[NP];
        int cnt = jg_allowed(v, &st, al), want = 0, ok = 1;
        for (int id = 0; id < NP; id++) {
            jg_state t = st;
            int x = jg_feed_bytes(&t, pc[id], pn[id]);
            want += x, ok &= (al[id] != 0) == x;
        }
        states++, same += ok && cnt == want;
        if (!jg_feed(&st, (unsigned char)walk[k]))
            break;
    }
    TAP_OK(v && states == (int)strlen(walk) && same == states, "bounds: the mask of a bounded string = each piece fed alone, in %d of %d states",
           same, states);
    jg_vocab_free(v);
    for (int i = 0; i < NP; i++)
        free(pc[i]);
    jg_prog_free(p);
    refused_schema("{\"type\":\"string\",\"minimum\":1}", "'minimum' is supported beside \"type\": \"number\"", "minimum beside a string");
    refused_schema("{\"enum\":[\"a\",\"bb\"],\"maxLength\":1}", "'maxLength' is supported beside", "maxLength beside enum");
    refused_schema("{\"type\":\"string\",\"minLength\":3,\"maxLength\":2}", "no value could keep to both", "minLength > maxLength");
    refused_schema("{\"type\":\"array\",\"minItems\":-1}", "non-negative integer", "a negative minItems");
    refused_schema("{\"type\":\"string\",\"maxLength\":1.5}", "non-negative integer", "a fractional maxLength");
    refused_schema("{\"type\":\"integer\",\"exclusiveMinimum\":true}", "without minimum", "a draft-4 exclusiveMinimum alone");
    refused_schema("{\"type\":\"integer\",\"minimum\":1.2,\"maximum\":1.8}", "no integer", "no integer in range");
    refused_schema("{\"type\":\"number\",\"minimum\":1e16}", "beyond 1e15", "a lower bound beyond 1e15");
    refused_schema("{\"type\":\"integer\",\"maximum\":-1e16}", "beyond 1e15", "an upper bound beyond -1e15");
    refused_schema("{\"type\":\"number\",\"minimum\":0.1,\"maximum\":0.1000000000000001}", "too narrow", "a range too narrow for 15 digits");
    refused_schema("{\"type\":\"number\",\"minimum\":\"0\"}", "must be a number", "a bound that is a string");
}

/* For t/jsonpattern.bats, which checks the answers against node's RegExp (ECMA-262, "u" flag):
 *   serve_jsongate --pattern-walks PATTERN N   the values of the random walks through {"s": ...} that
 *                                              ended, a JSON string a line (exit 1 at a dead end)
 *   serve_jsongate --pattern-match PATTERN     for each JSON string on stdin, 1 if the pattern's automaton
 *                                              takes it whole and it matches, else 0
 *   serve_jsongate --format-walks FORMAT N     as --pattern-walks, the string's "format" FORMAT */
static int pattern_mode(int argc, char **argv)
{
    char err[256] = "";
    if ((!strcmp(argv[1], "--pattern-walks") || !strcmp(argv[1], "--format-walks")) && argc == 4) {
        jg_prog *p = string_prog(argv[1][2] == 'p' ? "pattern" : "format", argv[2], err, sizeof err);
        if (!p) {
            fprintf(stderr, "%s\n", err);
            return 3;
        }
        int r = pattern_walks(p, atoi(argv[3]), 96, stdout, "s");
        jg_prog_free(p);
        if (r < 0)
            fprintf(stderr, "a dead end\n");
        return r < 0;
    }
    if (!strcmp(argv[1], "--schema-walks") && argc == 5) {
        /* N random walks through the schema, at most MAX bytes each: the documents that ended, a line each */
        jg_prog *p = schema_prog(argv[2], err, sizeof err);
        if (!p) {
            fprintf(stderr, "%s\n", err);
            return 3;
        }
        int r = pattern_walks(p, atoi(argv[3]), atoi(argv[4]), stdout, NULL);
        jg_prog_free(p);
        if (r < 0)
            fprintf(stderr, "a dead end\n");
        return r < 0;
    }
    if (!strcmp(argv[1], "--pattern-match") && argc == 3) {
        jgre *re = jgre_compile(argv[2], strlen(argv[2]), err, sizeof err);
        if (!re) {
            fprintf(stderr, "%s\n", err);
            return 3;
        }
        char line[65536];
        while (fgets(line, sizeof line, stdin)) {
            json_t *j = json_loads(line, JSON_DECODE_ANY, NULL);
            const unsigned char *u = (const unsigned char *)json_string_value(j);
            jgre_set st = jgre_start(re);
            int alive = u != NULL;
            for (size_t i = 0; alive && u[i];) { /* jansson's strings are valid UTF-8 */
                uint32_t c = u[i];
                int k = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
                if (k > 1)
                    c &= 0xFFu >> (k + 1);
                for (int m = 1; m < k; m++)
                    c = c << 6 | (u[i + (size_t)m] & 0x3F);
                i += (size_t)k;
                st = jgre_step(re, st, c);
                alive = !jgre_empty(st);
            }
            printf("%d\n", alive && jgre_accepts(re, st));
            json_decref(j);
        }
        jgre_free(re);
        return 0;
    }
    fprintf(stderr, "usage: serve_jsongate [--pattern-walks PATTERN N | --pattern-match PATTERN | --format-walks FORMAT N | --schema-walks SCHEMA N MAX]\n");
    return 2;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        return pattern_mode(argc, argv);
    /* whole objects */
    text_case("{}", -1, 1);
    text_case(" {\"a\": [1, -2.5e+3, true, false, null, \"x\"]}", -1, 1);
    text_case("{\"k\":{\"n\":{}},\"l\":[[],[{}]]}", -1, 1);
    text_case("{\"s\":\"\\u00e9\\uD83D\\uDE00\\n\\\"\\\\\\/\\b\\f\\r\\t\"}", -1, 1);
    text_case("{\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\":0}", -1, 1);
    /* prefixes: taken, not complete */
    text_case("{\"a\": [1, 2", -1, 0);
    text_case("{\"a\": tr", -1, 0);
    text_case("{\"a\": \"\\uD83D", -1, 0);
    /* refusals, at the byte that breaks it */
    text_case("[1]", 0, 0);                    /* the top level is an object */
    text_case("\"s\"", 0, 0);
    text_case("{} ", 2, 1);                    /* nothing after the object */
    text_case("{}{}", 2, 1);
    text_case("{\"a\":01}", 6, 0);             /* no leading zeros */
    text_case("{\"a\":1.}", 7, 0);             /* a digit after the point */
    text_case("{\"a\":-}", 6, 0);
    text_case("{\"a\":1e}", 7, 0);
    text_case("{\"a\":+1}", 5, 0);
    text_case("{\"a\":.5}", 5, 0);
    text_case("{\"a\":tru}", 8, 0);
    text_case("{\"a\":nul1}", 8, 0);
    text_case("{a:1}", 1, 0);                  /* keys are strings */
    text_case("{\"a\" 1}", 5, 0);
    text_case("{\"a\":1,}", 7, 0);             /* no trailing comma */
    text_case("{\"a\":[1,]}", 8, 0);
    text_case("{\"a\":[1}", 7, 0);             /* brackets must match */
    text_case("{\"a\":\"\x01\"}", 6, 0);       /* control bytes must be escaped */
    text_case("{\"a\":\"\\x\"}", 7, 0);        /* unknown escape */
    text_case("{\"a\":\"\\u12G4\"}", 10, 0);
    text_case("{\"a\":\"\\uDC00\"}", 9, 0);    /* a lone low surrogate: refused at its second digit */
    text_case("{\"a\":\"\\uD800x\"}", 12, 0);  /* a high surrogate without its low one */
    text_case("{\"a\":\"\\uD800\\u0041\"}", 14, 0);
    text_case("{\"a\":\"\xc0\xaf\"}", 6, 0);   /* overlong */
    text_case("{\"a\":\"\xed\xa0\x80\"}", 7, 0); /* a surrogate in UTF-8 */
    text_case("{\"a\":\"\xf4\x90\x80\x80\"}", 7, 0); /* past U+10FFFF */
    text_case("{\"a\":\"\xc3\"}", 7, 0);       /* a lead byte without its continuation */
    text_case("{\"a\":\"\xff\"}", 6, 0);
    {
        char deep[200] = "{\"a\":";
        size_t n = strlen(deep);
        for (int i = 0; i < JG_MAX_DEPTH; i++)
            deep[n++] = '[';
        deep[n] = 0;
        text_case(deep, (int)n - 1, 0);        /* nesting past JG_MAX_DEPTH */
        text_case("  {}", 1, 0);               /* white space: one space, */
        text_case("{\n\t\t\"a\":\n    1}", -1, 1); /* or a line break and indentation */
        text_case("{\r\n}", 1, 0);
        text_case("{\"a\":\t1}", 5, 0);
        char spaces[64] = "{\n";
        memset(spaces + 2, ' ', JG_MAX_INDENT + 1);
        spaces[JG_MAX_INDENT + 3] = 0;
        text_case(spaces, JG_MAX_INDENT + 2, 0); /* up to JG_MAX_INDENT of it */
    }
    property_runs();
    mask_runs();
    prog_runs();
    schema_runs();
    schema_unions();
    bounds_runs();
    pattern_runs();
    return TAP_DONE();
}
