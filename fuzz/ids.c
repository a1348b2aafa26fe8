/* Fuzz target: the token-ids reader of npu-forward (--ids, logits) and spec-replay (--ids):
 * app_read_ids on the input as a file. It either accepts it, and then gives a non-empty array of ids
 * in [0, 2^31), each the value of the array's element (checked against jansson's own reading), or
 * refuses it with a named error. */
#include "fuzz.h"
#include "app/app.h"

#include <jansson.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    int fd = fuzz_memfd_path(data, size, path);
    if (fd < 0)
        return 0;
    ogk_error e = {0};
    int n = -1;
    int *ids = app_read_ids(path, &n, &e);
    close(fd);
    if (!ids) {
        FUZZ_CHECK(e.msg[0]);
        return 0;
    }
    FUZZ_CHECK(n > 0);
    json_t *j = json_loadb((const char *)data, size, JSON_DECODE_ANY, NULL);
    FUZZ_CHECK(json_is_array(j) && json_array_size(j) == (size_t)n);
    for (int i = 0; i < n; i++) {
        FUZZ_CHECK(ids[i] >= 0);
        FUZZ_CHECK(json_integer_value(json_array_get(j, (size_t)i)) == ids[i]);
    }
    json_decref(j);
    free(ids);
    return 0;
}
