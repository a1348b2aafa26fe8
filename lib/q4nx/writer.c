/* Writing a container: header first, then assets and tensors as they arrive (aligned, checksummed),
 * then the metadata JSON, the tables, the strings and the footer. Never seeks, so stdout may be a pipe. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "format.h"
#include "q4nx.h"

typedef struct {
    uint8_t e[Q4NX_TENSOR_ENTRY];
    char *role;
} wtensor;

struct q4nx_writer {
    int fd, layout;
    uint64_t pos;
    wtensor *t;
    size_t nt, capt;
    uint8_t *assets; /* entries, Q4NX_ASSET_ENTRY bytes each */
    char **asset_names;
    size_t na, capa;
    char *str;
    size_t nstr, capstr;
    uint8_t *buf;
    size_t capbuf;
    int failed;
    json_t *extra;
    json_t *names; /* "r:ROLE" and "a:ASSET" seen: duplicates found in O(1), not by a scan per entry */
};

static int wr(q4nx_writer *w, const void *p, size_t n, ogk_error *e)
{
    if (ogk_write_all(w->fd, p, n)) {
        w->failed = 1;
        return ogk_fail(e, "write failed: %s", errno == EPIPE ? "broken pipe" : strerror(errno));
    }
    w->pos += n;
    return 0;
}

static int pad_to(q4nx_writer *w, uint64_t align, ogk_error *e)
{
    static const uint8_t zero[Q4NX_ALIGN_LARGE];
    uint64_t n = q4nx_align_up(w->pos, align) - w->pos;
    return n ? wr(w, zero, (size_t)n, e) : 0;
}

/* Appends s (with its NUL) to the string table; offset and length through the out parameters. */
/* out of memory: named, and errno ENOMEM (the caller's init failure, not a refused stream) */
static int oom(ogk_error *e, size_t n)
{
    if (n)
        ogk_fail(e, "out of memory (%zu bytes)", n);
    else
        ogk_fail(e, "out of memory");
    errno = ENOMEM;
    return -1;
}

static int add_string(q4nx_writer *w, const char *s, uint32_t *off, uint32_t *len, ogk_error *e)
{
    size_t n = strlen(s);
    if (n > 65535)
        return ogk_fail(e, "name too long (%zu bytes)", n);
    if (w->nstr + n + 1 > w->capstr) {
        size_t c = w->capstr ? w->capstr * 2 : 4096;
        while (c < w->nstr + n + 1)
            c *= 2;
        char *p = realloc(w->str, c);
        if (!p)
            return oom(e, 0);
        w->str = p;
        w->capstr = c;
    }
    if (w->nstr + n + 1 > UINT32_MAX)
        return ogk_fail(e, "string table too large");
    memcpy(w->str + w->nstr, s, n + 1);
    *off = (uint32_t)w->nstr;
    *len = (uint32_t)n;
    w->nstr += n + 1;
    return 0;
}

static uint8_t *scratch(q4nx_writer *w, size_t n, ogk_error *e)
{
    if (n > w->capbuf) {
        free(w->buf);
        w->buf = ogk_big_alloc(n);
        w->capbuf = w->buf ? n : 0;
        if (!w->buf) {
            oom(e, n);
            return NULL;
        }
    }
    return w->buf;
}

q4nx_writer *q4nx_writer_new(int fd, int layout, ogk_error *e)
{
    if (layout != OGK_RM && layout != OGK_B8) {
        ogk_fail(e, "unknown layout %d", layout);
        return NULL;
    }
    q4nx_writer *w = calloc(1, sizeof *w);
    if (!w) {
        oom(e, 0);
        return NULL;
    }
    w->fd = fd;
    w->layout = layout;
    uint8_t h[Q4NX_HEADER_SIZE] = {0};
    memcpy(h, Q4NX_MAGIC, 8);
    q4nx_wr32(h + HDR_FORMAT, Q4NX_FORMAT_VERSION);
    q4nx_wr32(h + HDR_LAYOUT_VERSION, Q4NX_LAYOUT_VERSION);
    q4nx_wr32(h + HDR_LAYOUT, (uint32_t)layout);
    q4nx_wr32(h + HDR_SIZE, Q4NX_HEADER_SIZE);
    if (wr(w, h, sizeof h, e)) {
        q4nx_writer_free(w);
        return NULL;
    }
    return w;
}

uint64_t q4nx_writer_bytes(const q4nx_writer *w) { return w->pos; }
int q4nx_writer_write_failed(const q4nx_writer *w) { return w->failed; }

void q4nx_writer_meta(q4nx_writer *w, const char *key, json_t *value)
{
    if (!w->extra)
        w->extra = json_object();
    if (strcmp(key, "q4nx") && strcmp(key, "model") && strcmp(key, "source"))
        json_object_set_new(w->extra, key, value);
    else
        json_decref(value);
}

int q4nx_writer_asset(q4nx_writer *w, const char *name, const void *data, size_t len, ogk_error *e)
{
    if (!*name)
        return ogk_fail(e, "asset with an empty name");
    if (w->na >= Q4NX_MAX_ASSETS) /* the footer's limit: a reader refuses a container with more */
        return ogk_fail(e, "asset %s: more than %u assets in one container", name, Q4NX_MAX_ASSETS);
    int dup = ogk_seen_before(&w->names, "a:", name);
    if (dup)
        return dup < 0 ? oom(e, 0) : ogk_fail(e, "asset %s: duplicate name", name);
    if (w->na == w->capa) {
        size_t c = w->capa ? w->capa * 2 : 16;
        uint8_t *a = realloc(w->assets, c * Q4NX_ASSET_ENTRY);
        if (a)
            w->assets = a;
        char **n = realloc(w->asset_names, c * sizeof *n);
        if (n)
            w->asset_names = n;
        if (!a || !n)
            return oom(e, 0);
        w->capa = c;
    }
    uint8_t *a = w->assets + w->na * Q4NX_ASSET_ENTRY;
    memset(a, 0, Q4NX_ASSET_ENTRY);
    uint32_t off, nl;
    if (add_string(w, name, &off, &nl, e))
        return -1;
    if (pad_to(w, Q4NX_ALIGN, e))
        return -1;
    q4nx_wr32(a + AE_NAME_OFF, off);
    q4nx_wr32(a + AE_NAME_LEN, nl);
    q4nx_wr64(a + AE_OFFSET, w->pos);
    q4nx_wr64(a + AE_SIZE, len);
    q4nx_wr32(a + AE_CRC, ogk_crc32c(0, data, len));
    if (wr(w, data, len, e))
        return -1;
    w->asset_names[w->na++] = strdup(name);
    return 0;
}

/* A new table entry with name and role filled in; NULL (e set) on a duplicate role. */
static uint8_t *new_entry(q4nx_writer *w, const char *name, const char *role, ogk_error *e)
{
    if (!*role || !*name) {
        ogk_fail(e, "tensor with an empty name or role");
        return NULL;
    }
    if (w->nt >= Q4NX_MAX_TENSORS) { /* the footer's limit: a reader refuses a container with more */
        ogk_fail(e, "tensor %s: more than %u tensors in one container", name, Q4NX_MAX_TENSORS);
        return NULL;
    }
    /* recorded here, before the entry is committed: a tensor refused after this point fails the whole
     * write, so its role is never offered again */
    int dup = ogk_seen_before(&w->names, "r:", role);
    if (dup) {
        if (dup < 0)
            oom(e, 0);
        else
            ogk_fail(e, "tensor %s: duplicate role %s", name, role);
        return NULL;
    }
    if (w->nt == w->capt) {
        size_t c = w->capt ? w->capt * 2 : 64;
        wtensor *t = realloc(w->t, c * sizeof *t);
        if (!t) {
            oom(e, 0);
            return NULL;
        }
        w->t = t;
        w->capt = c;
    }
    wtensor *t = &w->t[w->nt];
    memset(t->e, 0, sizeof t->e);
    uint32_t off, len;
    if (add_string(w, name, &off, &len, e))
        return NULL;
    q4nx_wr32(t->e + TE_NAME_OFF, off);
    q4nx_wr32(t->e + TE_NAME_LEN, len);
    if (add_string(w, role, &off, &len, e))
        return NULL;
    q4nx_wr32(t->e + TE_ROLE_OFF, off);
    q4nx_wr32(t->e + TE_ROLE_LEN, len);
    t->role = NULL;
    return t->e;
}

static int commit_entry(q4nx_writer *w, const char *role, ogk_error *e)
{
    if (!(w->t[w->nt].role = strdup(role)))
        return oom(e, 0);
    w->nt++;
    return 0;
}

/* Places size bytes at the next aligned position, fills offset and size in the entry. */
static int place(q4nx_writer *w, uint8_t *ent, uint64_t size, ogk_error *e)
{
    if (pad_to(w, size >= Q4NX_LARGE_TENSOR ? Q4NX_ALIGN_LARGE : Q4NX_ALIGN, e))
        return -1;
    q4nx_wr64(ent + TE_OFFSET, w->pos);
    q4nx_wr64(ent + TE_SIZE, size);
    return 0;
}

/* A quantised tensor's entry (its parts assembled in b, size bytes: codes, scales at so, zero points at zo) and
 * its bytes in the data region. */
static int put_quant(q4nx_writer *w, uint8_t *ent, const char *role, int dtype, int layout, uint32_t n, uint32_t k,
                     uint32_t block, int scale_dtype, int has_zp, const uint8_t *b, uint64_t so, uint64_t zo,
                     uint64_t size, ogk_error *e)
{
    ent[TE_DTYPE] = (uint8_t)dtype;
    ent[TE_LAYOUT] = (uint8_t)layout;
    ent[TE_SCALE_DTYPE] = (uint8_t)scale_dtype;
    ent[TE_ZP] = has_zp ? 1 : 0;
    ent[TE_NDIM] = 2;
    q4nx_wr32(ent + TE_BLOCK, block);
    q4nx_wr32(ent + TE_KBLOCKS, (k + block - 1) / block);
    q4nx_wr64(ent + TE_SHAPE, n);
    q4nx_wr64(ent + TE_SHAPE + 8, k);
    q4nx_wr64(ent + TE_SCALES_OFF, so);
    q4nx_wr64(ent + TE_ZEROS_OFF, zo);
    q4nx_wr32(ent + TE_CRC, ogk_crc32c(0, b, size));
    if (place(w, ent, size, e) || wr(w, b, size, e))
        return -1;
    return commit_entry(w, role, e);
}

/* A new entry for a quantised tensor whose scale dtype and size are legal (NULL with e filled otherwise). */
static uint8_t *quant_entry(q4nx_writer *w, const char *name, const char *role, uint32_t n, uint32_t k, int scale_dtype,
                            ogk_error *e)
{
    if (scale_dtype != OGK_F32 && scale_dtype != OGK_F16 && scale_dtype != OGK_BF16) {
        ogk_fail(e, "tensor %s: scales must be f32, f16 or bf16", name);
        return NULL;
    }
    if (k > (1u << 30) || n > (1u << 31) || (uint64_t)n * k > ((uint64_t)1 << 42)) {
        ogk_fail(e, "tensor %s: %u x %u is too large", name, n, k);
        return NULL;
    }
    return new_entry(w, name, role, e);
}

/* Refuses scales (source order [N][kb], a legal scale dtype) that are not all finite numbers: a NaN or an
 * infinity times a code is no weight, so the source was broken before it came here; a container of it would
 * pass its checksums and compute NaN logits. Names the first one's row and group. */
static int scales_finite(const char *name, uint32_t n, uint32_t k, uint32_t block, int scale_dtype, const void *scales,
                         ogk_error *e)
{
    uint32_t kb = (k + block - 1) / block;
    const uint8_t *s = scales;
    for (uint64_t i = 0, ng = (uint64_t)n * kb; i < ng; i++) {
        float v;
        if (scale_dtype == OGK_F32) {
            memcpy(&v, s + 4 * i, 4);
        } else {
            uint16_t h = (uint16_t)(s[2 * i] | s[2 * i + 1] << 8);
            v = scale_dtype == OGK_F16 ? ogk_f16_to_f32(h) : ogk_bf16_to_f32(h);
        }
        if (!isfinite(v)) {
            uint32_t g = (uint32_t)(i % kb), c1 = (g + 1) * block < k ? (g + 1) * block : k;
            return ogk_fail(e, "tensor %s: the scale of row %" PRIu64 ", group %u (columns %u..%u) is %g, not a finite number: "
                               "the source's weights are broken", name, i / kb, g, g * block, c1 - 1, (double)v);
        }
    }
    return 0;
}

int q4nx_writer_q4(q4nx_writer *w, const char *name, const char *role, uint32_t n, uint32_t k, uint32_t block,
                   int scale_dtype, const uint8_t *codes, const void *scales, const uint8_t *zp, ogk_error *e)
{
    const char *why = ogk_q4_layout_refusal(w->layout, n, k, block);
    if (why)
        return ogk_fail(e, "tensor %s: layout %s: %s", name, ogk_layout_name(w->layout), why);
    uint8_t *ent = quant_entry(w, name, role, n, k, scale_dtype, e);
    if (!ent || scales_finite(name, n, k, block, scale_dtype, scales, e))
        return -1;
    uint64_t cb = ogk_q4_codes_bytes(w->layout, n, k, block), g = ogk_q4_groups(w->layout, n, k, block);
    uint64_t ss = ogk_dtype_size(scale_dtype), so, zo, size;
    ogk_q4_parts(cb, g, ss, zp != NULL, &so, &zo, &size);
    uint8_t *b = scratch(w, size, e);
    if (!b)
        return -1;
    memset(b + cb, 0, so - cb); /* padding between parts; the parts themselves are written whole */
    if (zp)
        memset(b + so + g * ss, 0, zo - (so + g * ss));
    ogk_q4_relayout(w->layout, n, k, block, scale_dtype, codes, scales, zp, b, b + so, zp ? b + zo : NULL);
    return put_quant(w, ent, role, OGK_Q4, w->layout, n, k, block, scale_dtype, zp != NULL, b, so, zo, size, e);
}

int q4nx_writer_q8(q4nx_writer *w, const char *name, const char *role, uint32_t n, uint32_t k, uint32_t block,
                   int scale_dtype, const uint8_t *codes, const void *scales, const uint8_t *zp, ogk_error *e)
{
    if (n == 0 || k == 0 || block < 16 || block > 4096 || (block & (block - 1)))
        return ogk_fail(e, "tensor %s: q8 %u x %u in blocks of %u: empty, or block not a power of two in 16..4096", name,
                        n, k, block);
    uint8_t *ent = quant_entry(w, name, role, n, k, scale_dtype, e);
    if (!ent || scales_finite(name, n, k, block, scale_dtype, scales, e))
        return -1;
    uint64_t cb = ogk_q8_codes_bytes(n, k, block), g = ogk_q8_groups(n, k, block);
    uint64_t ss = ogk_dtype_size(scale_dtype), so, zo, size;
    ogk_q4_parts(cb, g, ss, zp != NULL, &so, &zo, &size);
    uint8_t *b = scratch(w, size, e);
    if (!b)
        return -1;
    memset(b, 0, size); /* padding between parts */
    memcpy(b, codes, cb); /* source order is the q8 layout: the parts as they are */
    memcpy(b + so, scales, g * ss);
    if (zp)
        memcpy(b + zo, zp, g);
    return put_quant(w, ent, role, OGK_Q8, OGK_PLAIN, n, k, block, scale_dtype, zp != NULL, b, so, zo, size, e);
}

int q4nx_writer_plain(q4nx_writer *w, const char *name, const char *role, int dtype, int ndim, const uint64_t *shape,
                      const void *data, uint64_t nbytes, ogk_error *e)
{
    size_t es = ogk_dtype_size(dtype);
    if (!es)
        return ogk_fail(e, "tensor %s: dtype %s cannot be stored plain", name, ogk_dtype_name(dtype));
    if (ndim < 1 || ndim > 4)
        return ogk_fail(e, "tensor %s: %d dimensions (1..4)", name, ndim);
    uint64_t count = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == 0 || shape[i] > ((uint64_t)1 << 40) || count > (((uint64_t)1 << 50) / shape[i]))
            return ogk_fail(e, "tensor %s: shape[%d] = %llu out of range", name, i, (unsigned long long)shape[i]);
        count *= shape[i];
    }
    if (count * es != nbytes)
        return ogk_fail(e, "tensor %s: %llu bytes for %llu elements of %s", name, (unsigned long long)nbytes,
                        (unsigned long long)count, ogk_dtype_name(dtype));
    uint8_t *ent = new_entry(w, name, role, e);
    if (!ent)
        return -1;
    ent[TE_DTYPE] = (uint8_t)dtype;
    ent[TE_NDIM] = (uint8_t)ndim;
    for (int i = 0; i < ndim; i++)
        q4nx_wr64(ent + TE_SHAPE + 8 * i, shape[i]);
    q4nx_wr32(ent + TE_CRC, ogk_crc32c(0, data, nbytes));
    if (place(w, ent, nbytes, e) || wr(w, data, nbytes, e))
        return -1;
    return commit_entry(w, role, e);
}

int q4nx_writer_finish(q4nx_writer *w, const json_t *model, const json_t *source, ogk_error *e)
{
    if (!json_is_object(model) || !json_is_object(source))
        return ogk_fail(e, "model and source descriptions must be JSON objects");
    json_t *meta = json_pack("{s:{s:i,s:i,s:s,s:I,s:I},s:O,s:O}", "q4nx", "format_version", Q4NX_FORMAT_VERSION,
                             "layout_version", Q4NX_LAYOUT_VERSION, "layout", ogk_layout_name(w->layout), "tensors",
                             (json_int_t)w->nt, "assets", (json_int_t)w->na, "model", (json_t *)model, "source",
                             (json_t *)source);
    if (meta && w->extra)
        json_object_update_missing(meta, w->extra);
    char *js = meta ? json_dumps(meta, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(meta);
    if (!js)
        return ogk_fail(e, "cannot serialise the metadata");
    if (pad_to(w, Q4NX_ALIGN, e)) {
        free(js);
        return -1;
    }
    uint64_t meta_off = w->pos, meta_size = strlen(js);
    uint64_t table_off = q4nx_align_up(meta_off + meta_size, 64);
    uint64_t str_off = table_off + w->nt * Q4NX_TENSOR_ENTRY + w->na * Q4NX_ASSET_ENTRY;
    uint64_t total = str_off + w->nstr - meta_off;
    uint8_t *b = scratch(w, total, e);
    if (!b) {
        free(js);
        return -1;
    }
    memset(b, 0, total);
    memcpy(b, js, meta_size);
    free(js);
    for (size_t i = 0; i < w->nt; i++)
        memcpy(b + (table_off - meta_off) + i * Q4NX_TENSOR_ENTRY, w->t[i].e, Q4NX_TENSOR_ENTRY);
    if (w->na)
        memcpy(b + (table_off - meta_off) + w->nt * Q4NX_TENSOR_ENTRY, w->assets, w->na * Q4NX_ASSET_ENTRY);
    if (w->nstr)
        memcpy(b + (str_off - meta_off), w->str, w->nstr);
    uint8_t f[Q4NX_FOOTER_SIZE] = {0};
    q4nx_wr64(f + FTR_META_OFF, meta_off);
    q4nx_wr64(f + FTR_META_SIZE, meta_size);
    q4nx_wr64(f + FTR_TABLE_OFF, table_off);
    q4nx_wr32(f + FTR_TENSORS, (uint32_t)w->nt);
    q4nx_wr32(f + FTR_ASSETS, (uint32_t)w->na);
    q4nx_wr64(f + FTR_STR_OFF, str_off);
    q4nx_wr64(f + FTR_STR_SIZE, w->nstr);
    q4nx_wr32(f + FTR_META_CRC, ogk_crc32c(0, b, total));
    memcpy(f + FTR_MAGIC, Q4NX_END_MAGIC, 8);
    if (wr(w, b, total, e) || wr(w, f, sizeof f, e))
        return -1;
    return 0;
}

void q4nx_writer_free(q4nx_writer *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->nt; i++)
        free(w->t[i].role);
    for (size_t i = 0; i < w->na; i++)
        free(w->asset_names[i]);
    free(w->t);
    free(w->assets);
    free(w->asset_names);
    free(w->str);
    free(w->buf);
    json_decref(w->extra);
    json_decref(w->names);
    free(w);
}
