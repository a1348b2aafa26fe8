/* GGUF v3 writer: key/values serialised as they are added, tensor infos laid out at write time, tensor
 * data streamed from fill callbacks so no whole model is ever held in memory. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "gguf.h"

typedef struct {
    char *name;
    int type, ndim;
    uint64_t ne[4], nbytes, offset;
    gguf_fill_fn fill;
    void *ctx;
} wtensor;

struct gguf_writer {
    uint8_t *kv; /* serialised key/values */
    size_t kv_len, kv_cap;
    uint64_t kv_count;
    char **keys;
    size_t nkeys;
    size_t arr_left; /* string-array elements still to push */
    wtensor *t;
    size_t nt, cap_t;
};

const char *gguf_type_name(int type)
{
    switch (type) {
    case GGML_F32: return "F32";
    case GGML_F16: return "F16";
    case GGML_Q4_0: return "Q4_0";
    case GGML_Q4_1: return "Q4_1";
    case GGML_Q8_0: return "Q8_0";
    default: return "?";
    }
}

uint64_t gguf_row_bytes(int type, uint64_t ne0)
{
    switch (type) {
    case GGML_F32: return ne0 * 4;
    case GGML_F16: return ne0 * 2;
    case GGML_Q4_0: return ne0 % 32 ? 0 : ne0 / 32 * 18;
    case GGML_Q4_1: return ne0 % 32 ? 0 : ne0 / 32 * 20;
    case GGML_Q8_0: return ne0 % 32 ? 0 : ne0 / 32 * 34;
    default: return 0;
    }
}

gguf_writer *gguf_writer_new(void)
{
    return calloc(1, sizeof(gguf_writer));
}

void gguf_writer_free(gguf_writer *w)
{
    if (!w)
        return;
    free(w->kv);
    for (size_t i = 0; i < w->nkeys; i++)
        free(w->keys[i]);
    free(w->keys);
    for (size_t i = 0; i < w->nt; i++)
        free(w->t[i].name);
    free(w->t);
    free(w);
}

static int put(gguf_writer *w, const void *p, size_t n, ogk_error *e)
{
    if (w->kv_len + n > w->kv_cap) {
        size_t cap = w->kv_cap ? w->kv_cap : 4096;
        while (cap < w->kv_len + n)
            cap *= 2;
        uint8_t *b = realloc(w->kv, cap);
        if (!b)
            return ogk_fail(e, "out of memory (GGUF metadata)");
        w->kv = b, w->kv_cap = cap;
    }
    memcpy(w->kv + w->kv_len, p, n);
    w->kv_len += n;
    return 0;
}
static int put_u32(gguf_writer *w, uint32_t v, ogk_error *e) { return put(w, &v, 4, e); }
static int put_u64(gguf_writer *w, uint64_t v, ogk_error *e) { return put(w, &v, 8, e); }
static int put_str(gguf_writer *w, const char *s, size_t len, ogk_error *e)
{
    return put_u64(w, len, e) || put(w, s, len, e) ? -1 : 0;
}

/* the key and its value type; refuses duplicates and keys added inside an unfinished string array */
static int key(gguf_writer *w, const char *k, uint32_t type, ogk_error *e)
{
    if (w->arr_left)
        return ogk_fail(e, "GGUF key %s: string array before it is %zu elements short", k, w->arr_left);
    for (size_t i = 0; i < w->nkeys; i++)
        if (!strcmp(w->keys[i], k))
            return ogk_fail(e, "GGUF key %s: added twice", k);
    char **ks = realloc(w->keys, (w->nkeys + 1) * sizeof *ks);
    if (!ks)
        return ogk_fail(e, "out of memory");
    w->keys = ks;
    if (!(w->keys[w->nkeys] = strdup(k)))
        return ogk_fail(e, "out of memory");
    w->nkeys++;
    w->kv_count++;
    return put_str(w, k, strlen(k), e) || put_u32(w, type, e) ? -1 : 0;
}

int gguf_kv_u32(gguf_writer *w, const char *k, uint32_t v, ogk_error *e)
{
    return key(w, k, GGUF_U32, e) || put_u32(w, v, e) ? -1 : 0;
}
int gguf_kv_i32(gguf_writer *w, const char *k, int32_t v, ogk_error *e)
{
    return key(w, k, GGUF_I32, e) || put(w, &v, 4, e) ? -1 : 0;
}
int gguf_kv_f32(gguf_writer *w, const char *k, float v, ogk_error *e)
{
    return key(w, k, GGUF_F32V, e) || put(w, &v, 4, e) ? -1 : 0;
}
int gguf_kv_bool(gguf_writer *w, const char *k, int v, ogk_error *e)
{
    uint8_t b = v ? 1 : 0;
    return key(w, k, GGUF_BOOL, e) || put(w, &b, 1, e) ? -1 : 0;
}
int gguf_kv_str(gguf_writer *w, const char *k, const char *s, size_t len, ogk_error *e)
{
    return key(w, k, GGUF_STR, e) || put_str(w, s, len, e) ? -1 : 0;
}
int gguf_kv_arr_i32(gguf_writer *w, const char *k, const int32_t *v, size_t n, ogk_error *e)
{
    return key(w, k, GGUF_ARR, e) || put_u32(w, GGUF_I32, e) || put_u64(w, n, e) || put(w, v, n * 4, e) ? -1 : 0;
}
int gguf_kv_arr_f32(gguf_writer *w, const char *k, const float *v, size_t n, ogk_error *e)
{
    return key(w, k, GGUF_ARR, e) || put_u32(w, GGUF_F32V, e) || put_u64(w, n, e) || put(w, v, n * 4, e) ? -1 : 0;
}
int gguf_kv_arr_str_begin(gguf_writer *w, const char *k, size_t n, ogk_error *e)
{
    if (key(w, k, GGUF_ARR, e) || put_u32(w, GGUF_STR, e) || put_u64(w, n, e))
        return -1;
    w->arr_left = n;
    return 0;
}
int gguf_kv_arr_str_push(gguf_writer *w, const char *s, size_t len, ogk_error *e)
{
    if (!w->arr_left)
        return ogk_fail(e, "GGUF string array: more elements pushed than declared");
    w->arr_left--;
    return put_str(w, s, len, e);
}

int gguf_writer_tensor(gguf_writer *w, const char *name, int type, int ndim, const uint64_t *ne, gguf_fill_fn fill,
                       void *ctx, ogk_error *e)
{
    if (ndim < 1 || ndim > 4)
        return ogk_fail(e, "GGUF tensor %s: %d dimensions", name, ndim);
    uint64_t row = gguf_row_bytes(type, ne[0]), rows = 1;
    if (!row)
        return ogk_fail(e, "GGUF tensor %s: %s cannot hold rows of %llu elements", name, gguf_type_name(type),
                        (unsigned long long)ne[0]);
    for (int i = 1; i < ndim; i++)
        rows *= ne[i];
    for (size_t i = 0; i < w->nt; i++)
        if (!strcmp(w->t[i].name, name))
            return ogk_fail(e, "GGUF tensor %s: added twice", name);
    if (w->nt == w->cap_t) {
        size_t cap = w->cap_t ? 2 * w->cap_t : 64;
        wtensor *t = realloc(w->t, cap * sizeof *t);
        if (!t)
            return ogk_fail(e, "out of memory");
        w->t = t, w->cap_t = cap;
    }
    wtensor *t = &w->t[w->nt];
    memset(t, 0, sizeof *t);
    if (!(t->name = strdup(name)))
        return ogk_fail(e, "out of memory");
    t->type = type, t->ndim = ndim, t->fill = fill, t->ctx = ctx;
    memcpy(t->ne, ne, (size_t)ndim * sizeof *ne);
    t->nbytes = row * rows;
    w->nt++;
    return 0;
}

static uint64_t align_up(uint64_t x) { return (x + GGUF_ALIGN - 1) / GGUF_ALIGN * GGUF_ALIGN; }

static int out(int fd, const void *p, size_t n, int *failed, ogk_error *e)
{
    if (ogk_write_all(fd, p, n)) {
        *failed = 1;
        return ogk_fail(e, "writing the GGUF failed: %m");
    }
    return 0;
}

int gguf_writer_write(gguf_writer *w, int fd, int *out_failed, ogk_error *e)
{
    int failed_dummy = 0, *failed = out_failed ? out_failed : &failed_dummy;
    *failed = 0;
    if (w->arr_left)
        return ogk_fail(e, "GGUF string array %zu elements short", w->arr_left);
    /* header + key/values + tensor infos, in one buffer */
    size_t info_len = 0;
    for (size_t i = 0; i < w->nt; i++)
        info_len += 8 + strlen(w->t[i].name) + 4 + 8 * (size_t)w->t[i].ndim + 4 + 8;
    size_t head = 24 + w->kv_len + info_len;
    uint64_t data_start = align_up(head);
    uint8_t *h = calloc(1, data_start);
    if (!h)
        return ogk_fail(e, "out of memory");
    uint8_t *p = h;
    memcpy(p, "GGUF", 4), p += 4;
    uint32_t ver = GGUF_VERSION;
    uint64_t nt = w->nt;
    memcpy(p, &ver, 4), p += 4;
    memcpy(p, &nt, 8), p += 8;
    memcpy(p, &w->kv_count, 8), p += 8;
    if (w->kv_len)
        memcpy(p, w->kv, w->kv_len), p += w->kv_len;
    uint64_t off = 0;
    for (size_t i = 0; i < w->nt; i++) {
        wtensor *t = &w->t[i];
        uint64_t len = strlen(t->name);
        uint32_t nd = (uint32_t)t->ndim, ty = (uint32_t)t->type;
        memcpy(p, &len, 8), p += 8;
        memcpy(p, t->name, len), p += len;
        memcpy(p, &nd, 4), p += 4;
        memcpy(p, t->ne, 8 * nd), p += 8 * nd;
        memcpy(p, &ty, 4), p += 4;
        t->offset = off;
        memcpy(p, &off, 8), p += 8;
        off = align_up(off + t->nbytes);
    }
    int rc = out(fd, h, data_start, failed, e);
    free(h);
    if (rc)
        return -1;
    /* tensor data, each padded to the alignment */
    static const uint8_t zeros[GGUF_ALIGN];
    for (size_t i = 0; i < w->nt; i++) {
        wtensor *t = &w->t[i];
        uint8_t *buf = t->nbytes > (2u << 20) ? ogk_big_alloc(t->nbytes) : malloc(t->nbytes ? t->nbytes : 1);
        if (!buf)
            return ogk_fail(e, "out of memory (tensor %s, %llu bytes)", t->name, (unsigned long long)t->nbytes);
        memset(buf, 0, t->nbytes);
        rc = t->fill(t->ctx, buf, t->nbytes, e) ? -1 : out(fd, buf, t->nbytes, failed, e);
        free(buf);
        if (rc)
            return -1;
        uint64_t pad = align_up(t->nbytes) - t->nbytes;
        if (pad && out(fd, zeros, pad, failed, e))
            return -1;
        ogk_progress("tensors", i + 1, w->nt);
    }
    ogk_progress_done();
    return 0;
}
