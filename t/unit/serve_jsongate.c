/* JSON mode (lib/serve/jsongate.c): the byte automaton against hand-written cases and against jansson
 * (a separate parser) on generated documents and their mutations; every prefix of a document accepted,
 * never a dead end; the vocabulary mask against feeding each piece on its own. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

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
    TAP_OK(got == want && done == want_done, "%-40s taken %zu/%zu done %d", s, got, n, done);
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
    static const char *const w[] = {"", "", "", " ", "\n", "\n  ", "\t", "\r\n"};
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

/* what the gate should say of a whole text, from jansson: an object, nothing after it (leading white space
 * allowed), within the gate's own limits */
static int jansson_says(const char *s, size_t n)
{
    if (!n || s[n - 1] != '}')
        return 0;
    size_t lead = strspn(s, " \t\r\n");
    if (lead > JG_MAX_LEAD_WS || s[lead] != '{')
        return 0;
    /* the gate's limits: nesting and white-space runs outside strings (outside strings: count quotes) */
    int depth = 0, in_str = 0, run = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = 0;
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
        run = (c == ' ' || c == '\t' || c == '\n' || c == '\r') ? run + 1 : 0;
        if (run > JG_MAX_WS)
            return 0;
    }
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
        static const char *const lead[] = {"", " ", "\n", "\r\n"}; /* at most JG_MAX_LEAD_WS */
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

int main(void)
{
    /* whole objects */
    text_case("{}", -1, 1);
    text_case("  {\"a\": [1, -2.5e+3, true, false, null, \"x\"]}", -1, 1);
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
        text_case("   {}", JG_MAX_LEAD_WS, 0); /* and shorter before the object */
        char spaces[64] = "{";
        memset(spaces + 1, ' ', JG_MAX_WS + 1);
        spaces[JG_MAX_WS + 2] = 0;
        text_case(spaces, JG_MAX_WS + 1, 0);   /* white space runs are bounded */
    }
    property_runs();
    mask_runs();
    prog_runs();
    return TAP_DONE();
}
