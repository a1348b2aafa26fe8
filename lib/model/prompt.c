/* Prompts for the programs that run models: the container's tokenizer, token ids from a JSON file,
 * text read from a file or stdin. Shared by npu-forward and spec-replay. */
#include <stdlib.h>
#include <string.h>

#include "model.h"

tok *model_tokenizer(const model *m, ogk_error *e)
{
    const uint8_t *tj, *tc = NULL;
    size_t tjl, tcl = 0;
    if (q4nx_asset(m->file, "tokenizer.json", &tj, &tjl)) {
        ogk_fail(e, "the container has no tokenizer.json asset");
        return NULL;
    }
    if (q4nx_asset(m->file, "tokenizer_config.json", &tc, &tcl))
        tc = NULL, tcl = 0;
    return mdesc_tokenizer(&m->c, tj, tjl, tc, tcl, e);
}

char *model_read_text(const char *path, size_t *len, ogk_error *e)
{
    if (strcmp(path, "-"))
        return ogk_read_file(path, len, e);
    size_t cap = 1 << 16, n = 0;
    char *txt = malloc(cap);
    ssize_t r;
    while (txt && (r = ogk_read_full(0, txt + n, cap - n - 1)) > 0)
        if ((n += (size_t)r) + 1 >= cap) {
            char *t2 = realloc(txt, cap *= 2);
            if (!t2)
                free(txt);
            txt = t2;
        }
    if (!txt) {
        ogk_fail(e, "out of memory reading stdin");
        return NULL;
    }
    txt[n] = 0;
    *len = n;
    return txt;
}

int *model_read_ids(const char *path, int *n, ogk_error *e)
{
    size_t len;
    char *txt = model_read_text(path, &len, e);
    if (!txt)
        return NULL;
    json_error_t je;
    json_t *j = json_loadb(txt, len, 0, &je);
    free(txt);
    if (!json_is_array(j) || json_array_size(j) == 0) {
        ogk_fail(e, "%s: want a non-empty JSON array of token ids%s%s", path, j ? "" : ": ", j ? "" : je.text);
        json_decref(j);
        return NULL;
    }
    *n = (int)json_array_size(j);
    int *ids = malloc((size_t)*n * sizeof *ids);
    for (int i = 0; ids && i < *n; i++) {
        json_t *v = json_array_get(j, (size_t)i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 0x7fffffff) {
            ogk_fail(e, "%s: element %d is not a token id", path, i);
            free(ids), json_decref(j);
            return NULL;
        }
        ids[i] = (int)json_integer_value(v);
    }
    json_decref(j);
    if (!ids)
        ogk_fail(e, "out of memory");
    return ids;
}

int *model_encode(tok *t, const char *text, size_t len, int add_special, int *n, ogk_error *e)
{
    int32_t *ids32;
    size_t nn;
    if (tok_encode(t, text, len, add_special, &ids32, &nn, e))
        return NULL;
    if (nn == 0) {
        free(ids32);
        ogk_fail(e, "empty (no tokens)");
        return NULL;
    }
    int *ids = malloc(nn * sizeof *ids);
    for (size_t i = 0; ids && i < nn; i++)
        ids[i] = ids32[i];
    free(ids32);
    if (!ids)
        ogk_fail(e, "out of memory");
    *n = (int)nn;
    return ids;
}
