/* bench/jsonmask.c — the JSON mode's per-step cost (lib/serve/jsongate.c): building a tokenizer's pieces,
 * then one jg_allowed mask in states along a JSON answer and a schema's, median of REPS each, in ms.
 *   jsonmask TOKENIZER_DIR REPS [NAME]   (bench/jsonmask.sh runs it on the real tokenizers)
 * One JSON object per state on stdout. Exit: 0 ok, 2 usage, 3 the tokenizer does not load. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/jsongate.h"

static double now_ms(void) { return ogk_now() * 1e3; } /* util's monotonic clock */

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void one(const char *tokname, const jg_vocab *v, int V, const jg_prog *prog, const char *kind, const char *prefix,
                int reps)
{
    jg_state s;
    if (prog)
        jg_init_prog(&s, prog);
    else
        jg_init(&s);
    if (!jg_feed_bytes(&s, prefix, strlen(prefix))) {
        fprintf(stderr, "jsonmask: '%s' is not a prefix\n", prefix);
        exit(1);
    }
    uint8_t *al = malloc((size_t)V);
    double *t = malloc((size_t)reps * sizeof *t);
    int n = 0;
    for (int r = 0; r < reps; r++) {
        double a = now_ms();
        n = jg_allowed(v, &s, al);
        t[r] = now_ms() - a;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp);
    json_t *o = json_pack("{s:s,s:s,s:s,s:i,s:f}", "tokenizer", tokname, "mode", kind, "after", prefix, "allowed", n,
                          "mask_ms", t[reps / 2]);
    char *js = json_dumps(o, JSON_COMPACT);
    puts(js);
    free(js), json_decref(o), free(al), free(t);
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 4 || atoi(argv[2]) < 1) {
        fprintf(stderr, "usage: jsonmask TOKENIZER_DIR REPS [NAME]\n");
        return 2;
    }
    int reps = atoi(argv[2]);
    ogk_error e;
    tok *t = tok_load_dir(argv[1], &e);
    if (!t) {
        fprintf(stderr, "jsonmask: %s\n", e.msg);
        return 3;
    }
    const char *name = argc > 3 ? argv[3] : argv[1];
    int V = tok_vocab_size(t);
    double a = now_ms();
    jg_vocab *v = jg_vocab_new(t, V, &e);
    printf("{\"tokenizer\":\"%s\",\"ids\":%d,\"build_ms\":%.1f}\n", name, V, now_ms() - a);
    static const char *const plain[] = {"", "{", "{\"a", "{\"a\":", "{\"a\": [1, ", "{\"a\": \"x\"", "{\"a\": tr"};
    for (size_t i = 0; i < sizeof plain / sizeof *plain; i++)
        one(name, v, V, NULL, "json_object", plain[i], reps);
    json_error_t je;
    json_t *sj = json_loads("{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"},"
                            "\"pets\":{\"type\":\"array\",\"items\":{\"enum\":[\"cat\",\"dog\"]}}},\"required\":[\"name\",\"age\"]}",
                            0, &je);
    char err[256];
    jg_prog *p = jg_prog_new();
    jg_prog_schema(p, jg_schema_compile(sj, err, sizeof err));
    json_decref(sj);
    static const char *const sch[] = {"{", "{\"name\": \"Ann", "{\"name\": \"Ann\", \"age\": 4", "{\"name\": \"Ann\", \"age\": 4, \"pets\": [\"c"};
    for (size_t i = 0; i < sizeof sch / sizeof *sch; i++)
        one(name, v, V, p, "json_schema", sch[i], reps);
    jg_prog_free(p);
    /* the same with bounds: a string's maxLength (plain pieces up to the room left go without a walk), an
     * integer's range (every digit piece walked) */
    sj = json_loads("{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":40},"
                    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150}},\"required\":[\"name\",\"age\"]}",
                    0, &je);
    p = jg_prog_new();
    jg_prog_schema(p, jg_schema_compile(sj, err, sizeof err));
    json_decref(sj);
    static const char *const bnd[] = {"{\"name\": \"Ann", "{\"name\": \"Ann\", \"age\": 4"};
    for (size_t i = 0; i < sizeof bnd / sizeof *bnd; i++)
        one(name, v, V, p, "json_schema_bounds", bnd[i], reps);
    jg_prog_free(p);
    jg_vocab_free(v);
    tok_free(t);
    return 0;
}
