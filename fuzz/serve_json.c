/* Fuzz target: JSON mode (lib/serve/jsongate.c). The input is an answer, then after a 0xFF byte a
 * vocabulary (pieces separated by 0xFE); an answer that starts with 0xFD is checked against a forced
 * tool call's program instead (<tool_call>\n{"name": "NAME", "arguments": OBJECT}\n</tool_call>, four
 * names). The automaton takes a prefix of the answer; if it takes all of it and calls it complete,
 * jansson reads one object (numbers past a double's range aside; for the program, the object between the
 * literals, and the name is one of the four); every state on the way has a byte that goes on (no dead
 * end); at every 4th state the vocabulary's mask equals feeding each piece alone. An answer that starts
 * with 0xFC is a JSON Schema up to a NUL, then the answer walked against it (jg_schema_compile must name
 * what it refuses, never crash; a complete answer is JSON to jansson). */
#include "fuzz.h"

#include <jansson.h>

#include "serve/jsongate.h"

typedef struct {
    const uint8_t *p[256];
    size_t n[256];
} vocab;

static int piece(void *arg, int id, char **bytes, size_t *len)
{
    vocab *v = arg;
    if (!v->n[id])
        return 0;
    *bytes = malloc(v->n[id] + 1);
    if (!*bytes)
        return -1;
    memcpy(*bytes, v->p[id], v->n[id]);
    *len = v->n[id];
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *sep = memchr(data, 0xFF, size);
    size_t an = sep ? (size_t)(sep - data) : size;
    vocab voc = {0};
    int V = 0;
    if (sep) {
        const uint8_t *p = sep + 1, *end = data + size;
        while (p < end && V < 256) {
            const uint8_t *q = memchr(p, 0xFE, (size_t)(end - p));
            size_t n = q ? (size_t)(q - p) : (size_t)(end - p);
            voc.p[V] = p, voc.n[V++] = n;
            p = q ? q + 1 : end;
        }
    }
    static jg_prog *prog;
    static const char *const names[] = {"get_weather", "add", "add2", "a-b_c"};
    if (!prog) {
        prog = jg_prog_new();
        FUZZ_CHECK(prog && !jg_prog_lit(prog, "<tool_call>\n{\"name\": \"") && !jg_prog_names(prog, names, 4) &&
                   !jg_prog_lit(prog, "\", \"arguments\": ") && !jg_prog_object(prog) &&
                   !jg_prog_lit(prog, "}\n</tool_call>"));
    }
    int use_prog = an && data[0] == 0xFD;
    if (use_prog)
        data++, an--, size--;
    /* 0xFC: a schema (JSON text up to a NUL) and the answer after it */
    jg_prog *sprog = NULL;
    if (an && data[0] == 0xFC) {
        const uint8_t *z = memchr(data, 0, an);
        if (!z)
            return 0;
        json_error_t je;
        json_t *sj = json_loadb((const char *)data + 1, (size_t)(z - data - 1), 0, &je);
        char err[256];
        jg_schema *sc = sj ? jg_schema_compile(sj, err, sizeof err) : NULL;
        json_decref(sj);
        if (!sc)
            return 0;
        sprog = jg_prog_new();
        FUZZ_CHECK(sprog && !jg_prog_schema(sprog, sc));
        an -= (size_t)(z + 1 - data), data = z + 1;
    }
    ogk_error e;
    jg_vocab *jv = V ? jg_vocab_build(V, piece, &voc, &e) : NULL;
    uint8_t allowed[256];
    jg_state s;
    if (use_prog)
        jg_init_prog(&s, prog);
    else if (sprog)
        jg_init_prog(&s, sprog);
    else
        jg_init(&s);
    size_t k = 0;
    for (;; k++) {
        int any = jg_done(&s);
        for (int c = 0; c < 256 && !any; c++) {
            jg_state t = s;
            any = jg_feed(&t, (unsigned char)c);
        }
        FUZZ_CHECK(any || sprog); /* a schema may have no values at all (a = a) */
        if (jv && k % 4 == 0) {
            int cnt = jg_allowed(jv, &s, allowed), want = 0;
            for (int id = 0; id < V; id++) {
                jg_state t = s;
                int w = voc.n[id] && jg_feed_bytes(&t, (const char *)voc.p[id], voc.n[id]);
                FUZZ_CHECK(w == allowed[id]);
                want += w;
            }
            FUZZ_CHECK(cnt == want);
        }
        if (k == an || !jg_feed(&s, data[k]))
            break;
    }
    if (k == an && jg_done(&s)) {
        const char *t = (const char *)data;
        size_t tn = an;
        if (use_prog) { /* the object between "arguments": and the closing literal, after a known name */
            static const char pre[] = "<tool_call>\n{\"name\": \"", post[] = "}\n</tool_call>";
            FUZZ_CHECK(an > sizeof pre + sizeof post && !memcmp(t, pre, sizeof pre - 1) &&
                       !memcmp(t + an - (sizeof post - 1), post, sizeof post - 1));
            const char *q = t + sizeof pre - 1;
            int known = 0;
            for (int i = 0; i < 4; i++) {
                size_t l = strlen(names[i]);
                known |= !strncmp(q, names[i], l) && !strncmp(q + l, "\", \"arguments\": ", 16);
            }
            FUZZ_CHECK(known);
            const char *o = strstr(q, "\", \"arguments\": ") + 16;
            t = o, tn = (size_t)(data + an - (sizeof post - 1) - (const uint8_t *)o);
        }
        json_error_t je;
        json_t *j = json_loadb(t, tn, JSON_ALLOW_NUL | JSON_DECODE_ANY, &je);
        FUZZ_CHECK((j && (json_is_object(j) || sprog)) || strstr(je.text, "overflow") || strstr(je.text, "too big") ||
                   strstr(je.text, "NUL byte in object key"));
        json_decref(j);
    }
    jg_vocab_free(jv);
    jg_prog_free(sprog);
    return 0;
}
