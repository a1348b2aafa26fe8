/* llama-oracle - llama.cpp's library as an independent oracle for t/gguf.bats (through t/gguf-oracle.py).
 * Test code: built by tools/llama-cpp.sh (the "oracle" kind) against llama.cpp's public C API (llama.h) and
 * its static libraries, so CI compiles llama.cpp's model code and nothing of its server, common library or
 * tools. Not part of ogakit.
 *
 *   llama-oracle greedy MODEL.gguf N IDS.json
 *       decodes the prompt ids (a JSON array of integers) in one batch, then N greedy tokens one at a time;
 *       prints one line per token: "ID GAP", GAP the top-1 minus top-2 logit at that step
 *   llama-oracle tokenize MODEL.gguf ADD_SPECIAL FILE...
 *       llama_tokenize of each FILE's bytes (ADD_SPECIAL 0 or 1; special tokens in the text parsed, as
 *       llama-server's /tokenize does by default); prints each file's ids on one line, space-separated
 *
 * Exit status: 0 ok, 2 usage, 3 unreadable input, 4 llama.cpp failed (model load, context, decode).
 * LLAMA_ORACLE_LOG=1 lets llama.cpp's log through to stderr. */
#include "llama.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int show_log;

static void log_cb(enum ggml_log_level level, const char *text, void *user)
{
    (void)level;
    (void)user;
    if (show_log)
        fputs(text, stderr);
}

static char *slurp(const char *path, long *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *b = NULL;
    long n = 0, cap = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = (n + 4096 + 1) * 2;
            char *nb = realloc(b, cap);
            if (!nb) {
                free(b);
                fclose(f);
                return NULL;
            }
            b = nb;
        }
        size_t r = fread(b + n, 1, 4096, f);
        n += (long)r;
        if (r < 4096)
            break;
    }
    fclose(f);
    b[n] = 0;
    *len = n;
    return b;
}

/* the integers of a JSON array of integers, in order */
static int parse_ids(const char *s, llama_token **out)
{
    int n = 0, cap = 64;
    llama_token *v = malloc(cap * sizeof *v);
    const char *p = strchr(s, '[');
    if (!v || !p)
        goto bad;
    p++;
    for (;;) {
        char *end;
        while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r' || *p == ',')
            p++;
        if (*p == ']')
            break;
        long x = strtol(p, &end, 10);
        if (end == p || x < 0 || x > 0x7fffffff)
            goto bad;
        if (n == cap) {
            cap *= 2;
            llama_token *nv = realloc(v, cap * sizeof *v);
            if (!nv)
                goto bad;
            v = nv;
        }
        v[n++] = (llama_token)x;
        p = end;
    }
    *out = v;
    return n;
bad:
    free(v);
    return -1;
}

static int usage(void)
{
    fprintf(stderr, "usage: llama-oracle greedy MODEL.gguf N IDS.json\n"
                    "       llama-oracle tokenize MODEL.gguf ADD_SPECIAL FILE...\n");
    return 2;
}

static int tokenize(const struct llama_vocab *vocab, const char *path, int add_special)
{
    long len;
    char *text = slurp(path, &len);
    if (!text) {
        fprintf(stderr, "llama-oracle: cannot read %s\n", path);
        return 3;
    }
    int cap = (int)len + 16;
    llama_token *ids = malloc(cap * sizeof *ids);
    int n = ids ? llama_tokenize(vocab, text, (int32_t)len, ids, cap, add_special, true) : -1;
    if (n < 0) {
        fprintf(stderr, "llama-oracle: llama_tokenize failed on %s (%d)\n", path, n);
        free(ids);
        free(text);
        return 4;
    }
    for (int i = 0; i < n; i++)
        printf(i ? " %d" : "%d", ids[i]);
    printf("\n");
    free(ids);
    free(text);
    return 0;
}

/* argmax of the last logits and the gap to the runner-up */
static llama_token pick(struct llama_context *ctx, int nv, double *gap)
{
    const float *l = llama_get_logits_ith(ctx, -1);
    int a = 0, b = -1;
    for (int i = 1; i < nv; i++) {
        if (l[i] > l[a]) {
            b = a;
            a = i;
        } else if (b < 0 || l[i] > l[b])
            b = i;
    }
    *gap = b >= 0 ? (double)l[a] - (double)l[b] : 1e30;
    return a;
}

static int greedy(struct llama_model *model, int n, const char *ids_path)
{
    long len;
    char *js = slurp(ids_path, &len);
    llama_token *prompt = NULL;
    int np = js ? parse_ids(js, &prompt) : -1;
    free(js);
    if (np <= 0) {
        fprintf(stderr, "llama-oracle: %s: not a non-empty JSON array of token ids\n", ids_path);
        free(prompt);
        return 3;
    }
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)(np + n + 16 > 1024 ? np + n + 16 : 1024);
    cp.n_batch = cp.n_ctx;
    cp.n_threads = 2;
    cp.n_threads_batch = 2;
    cp.no_perf = true;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        fprintf(stderr, "llama-oracle: llama_init_from_model failed\n");
        free(prompt);
        return 4;
    }
    int nv = llama_vocab_n_tokens(llama_model_get_vocab(model));
    int rc = 0;
    if (llama_decode(ctx, llama_batch_get_one(prompt, np)) != 0) {
        fprintf(stderr, "llama-oracle: llama_decode failed on the prompt\n");
        rc = 4;
    }
    for (int i = 0; i < n && rc == 0; i++) {
        double gap;
        llama_token t = pick(ctx, nv, &gap);
        printf("%d %.6g\n", t, gap);
        if (i + 1 < n && llama_decode(ctx, llama_batch_get_one(&t, 1)) != 0) {
            fprintf(stderr, "llama-oracle: llama_decode failed at step %d\n", i + 1);
            rc = 4;
        }
    }
    llama_free(ctx);
    free(prompt);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 5 || (strcmp(argv[1], "greedy") != 0 && strcmp(argv[1], "tokenize") != 0))
        return usage();
    int is_greedy = strcmp(argv[1], "greedy") == 0;
    if (is_greedy && argc != 5)
        return usage();
    char *end;
    long num = strtol(argv[3], &end, 10);
    if (*end || num < 0 || num > 100000 || (!is_greedy && num > 1))
        return usage();
    show_log = getenv("LLAMA_ORACLE_LOG") != NULL;
    llama_log_set(log_cb, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.vocab_only = !is_greedy;
    struct llama_model *model = llama_model_load_from_file(argv[2], mp);
    if (!model) {
        fprintf(stderr, "llama-oracle: llama.cpp could not load %s (LLAMA_ORACLE_LOG=1 says why)\n", argv[2]);
        llama_backend_free();
        return 4;
    }
    int rc = 0;
    if (is_greedy)
        rc = greedy(model, (int)num, argv[4]);
    else
        for (int i = 4; i < argc && rc == 0; i++)
            rc = tokenize(llama_model_get_vocab(model), argv[i], (int)num);
    llama_model_free(model);
    llama_backend_free();
    return rc;
}
