/* Reading a container: mmap it and check every structural fact before handing out a pointer (hostile
 * files are expected input: every offset and length is range-checked with overflow-free arithmetic).
 * The small parts are checksummed at every open (metadata, tables and strings; every asset; plain
 * tensors under Q4NX_SMALL_TENSOR bytes): a few milliseconds at most, so a corrupted description,
 * tokenizer or norm vector is refused instead of run. The weights' checksums are q4nx_verify_weights'
 * (npu-forward --verify) and q4nx-verify's, which opens with Q4NX_OPEN_NOCRC to report every mismatch. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format.h"
#include "q4nx.h"

struct q4nx_file {
    ogk_map map;
    int layout;
    json_t *meta;
    const json_t *model, *source;
    size_t nt, na;
    ogk_qtensor *t;
    q4nx_extent *x;
    const char **asset_name;
    const uint8_t **asset_data;
    uint64_t *asset_size;
    uint32_t *asset_crc;
    uint64_t meta_off, meta_end;
    uint32_t meta_crc;
    const ogk_qtensor **by_role; /* sorted by role for q4nx_find */
};

typedef struct {
    uint64_t off, size;
    size_t idx;
    int asset;
} span;

static int span_cmp(const void *a, const void *b)
{
    const span *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

static int role_cmp(const void *a, const void *b)
{
    return strcmp((*(const ogk_qtensor *const *)a)->role, (*(const ogk_qtensor *const *)b)->role);
}

/* A NUL-terminated string of exactly len bytes inside the string table, or NULL. */
static const char *get_string(const uint8_t *str, uint64_t str_size, uint32_t off, uint32_t len)
{
    if (len == 0 || (uint64_t)off + len >= str_size)
        return NULL;
    const char *s = (const char *)str + off;
    if (s[len] != 0 || memchr(s, 0, len))
        return NULL;
    return s;
}

static int all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

/* Fills t and x from table entry i; 0 or -1 with e naming the tensor. */
static int parse_tensor(q4nx_file *f, size_t i, const uint8_t *ent, const uint8_t *str, uint64_t str_size,
                        ogk_error *e)
{
    ogk_qtensor *t = &f->t[i];
    q4nx_extent *x = &f->x[i];
    t->name = get_string(str, str_size, q4nx_rd32(ent + TE_NAME_OFF), q4nx_rd32(ent + TE_NAME_LEN));
    t->role = get_string(str, str_size, q4nx_rd32(ent + TE_ROLE_OFF), q4nx_rd32(ent + TE_ROLE_LEN));
    if (!t->name || !t->role)
        return ogk_fail(e, "tensor table entry %zu: name or role outside the string table", i);
    const char *nm = t->name;
    if (!all_zero(ent + TE_PAD0, 3) || !all_zero(ent + TE_RESERVED, Q4NX_TENSOR_ENTRY - TE_RESERVED))
        return ogk_fail(e, "tensor %s: reserved bytes are not zero", nm);
    t->dtype = ent[TE_DTYPE];
    t->layout = ent[TE_LAYOUT];
    t->ndim = ent[TE_NDIM];
    x->offset = q4nx_rd64(ent + TE_OFFSET);
    x->size = q4nx_rd64(ent + TE_SIZE);
    x->scales_off = q4nx_rd64(ent + TE_SCALES_OFF);
    x->zeros_off = q4nx_rd64(ent + TE_ZEROS_OFF);
    x->crc32c = q4nx_rd32(ent + TE_CRC);
    if (x->offset < Q4NX_HEADER_SIZE || x->offset > f->meta_off || x->size > f->meta_off - x->offset)
        return ogk_fail(e, "tensor %s: bytes [%" PRIu64 ", +%" PRIu64 ") outside the data region [%d, %" PRIu64 ")",
                        nm, x->offset, x->size, Q4NX_HEADER_SIZE, f->meta_off);
    uint64_t align = x->size >= Q4NX_LARGE_TENSOR ? Q4NX_ALIGN_LARGE : Q4NX_ALIGN;
    if (x->offset % align)
        return ogk_fail(e, "tensor %s: offset %" PRIu64 " is not %" PRIu64 "-byte aligned", nm, x->offset, align);
    x->bytes = f->map.data + x->offset;
    uint64_t shape[4];
    for (int d = 0; d < 4; d++)
        shape[d] = q4nx_rd64(ent + TE_SHAPE + 8 * d);
    if (t->ndim < 1 || t->ndim > 4)
        return ogk_fail(e, "tensor %s: %d dimensions (1..4)", nm, t->ndim);
    for (int d = t->ndim; d < 4; d++)
        if (shape[d])
            return ogk_fail(e, "tensor %s: unused shape[%d] is not zero", nm, d);
    if (ogk_dtype_quantised(t->dtype)) {
        int sd = ent[TE_SCALE_DTYPE], zp = ent[TE_ZP], q8 = t->dtype == OGK_Q8;
        uint32_t block = q4nx_rd32(ent + TE_BLOCK), kb = q4nx_rd32(ent + TE_KBLOCKS);
        if (!q8 && t->layout != f->layout)
            return ogk_fail(e, "tensor %s: layout %d differs from the container's %s", nm, t->layout,
                            ogk_layout_name(f->layout));
        if (q8 && t->layout != OGK_PLAIN)
            return ogk_fail(e, "tensor %s: q8 in layout %d (q8 is stored in source order, layout 0)", nm, t->layout);
        if (t->ndim != 2 || shape[0] == 0 || shape[1] == 0 || shape[0] > (1u << 31) || shape[1] > (1u << 30) ||
            shape[0] * shape[1] > ((uint64_t)1 << 42))
            return ogk_fail(e, "tensor %s: quantised shape must be [N, K] with N <= 2^31, K <= 2^30, N*K <= 2^42", nm);
        if (sd != OGK_F32 && sd != OGK_F16 && sd != OGK_BF16)
            return ogk_fail(e, "tensor %s: scale dtype %d is not f32, f16 or bf16", nm, sd);
        if (zp > 1)
            return ogk_fail(e, "tensor %s: zero-point flag %d (0 or 1)", nm, zp);
        if (block > 4096)
            return ogk_fail(e, "tensor %s: block size %u out of range", nm, block);
        const char *why = q8 ? (block < 16 || (block & (block - 1)) ? "block size must be a power of two >= 16" : NULL)
                             : ogk_q4_layout_refusal(t->layout, (uint32_t)shape[0], (uint32_t)shape[1], block);
        if (why)
            return ogk_fail(e, "tensor %s: %s", nm, why);
        t->n = (uint32_t)shape[0];
        t->k = (uint32_t)shape[1];
        t->block = block;
        t->k_blocks = (uint32_t)((shape[1] + block - 1) / block);
        if (kb != t->k_blocks)
            return ogk_fail(e, "tensor %s: k_blocks %u != ceil(K/block) %u", nm, kb, t->k_blocks);
        t->scale_dtype = sd;
        t->has_zp = zp;
        uint64_t cb = ogk_quant_codes_bytes(&t->desc), g = ogk_quant_groups(&t->desc);
        uint64_t so, zo, size;
        ogk_q4_parts(cb, g, ogk_dtype_size(sd), zp, &so, &zo, &size);
        if (x->scales_off != so || x->zeros_off != zo || x->size != size)
            return ogk_fail(e,
                            "tensor %s: parts (scales at +%" PRIu64 ", zeros at +%" PRIu64 ", %" PRIu64
                            " bytes) contradict its shape and layout (+%" PRIu64 ", +%" PRIu64 ", %" PRIu64 ")",
                            nm, x->scales_off, x->zeros_off, x->size, so, zo, size);
        t->codes = x->bytes;
        t->scales = x->bytes + so;
        t->zeros = zp ? x->bytes + zo : NULL;
    } else {
        size_t es = ogk_dtype_size(t->dtype);
        if (!es)
            return ogk_fail(e, "tensor %s: unknown dtype %d", nm, t->dtype);
        if (t->layout != OGK_PLAIN || ent[TE_SCALE_DTYPE] || ent[TE_ZP] || q4nx_rd32(ent + TE_BLOCK) ||
            q4nx_rd32(ent + TE_KBLOCKS) || x->scales_off || x->zeros_off)
            return ogk_fail(e, "tensor %s: plain tensor with quantisation fields set", nm);
        uint64_t count = 1;
        for (int d = 0; d < t->ndim; d++) {
            if (shape[d] == 0 || shape[d] > ((uint64_t)1 << 40) || count > (((uint64_t)1 << 50) / shape[d]))
                return ogk_fail(e, "tensor %s: shape[%d] = %" PRIu64 " out of range", nm, d, shape[d]);
            count *= shape[d];
        }
        if (count * es != x->size)
            return ogk_fail(e, "tensor %s: %" PRIu64 " bytes, shape and dtype say %" PRIu64, nm, x->size, count * es);
        t->data = x->bytes;
        t->nbytes = x->size;
    }
    for (int d = 0; d < t->ndim; d++)
        t->shape[d] = shape[d];
    return 0;
}

static const char *hex32(uint32_t v, char *buf)
{
    snprintf(buf, 12, "0x%08x", v);
    return buf;
}

static int tensor_crc_fails(const q4nx_file *f, size_t i, const char *path, ogk_error *e)
{
    char h1[12], h2[12];
    uint32_t got = ogk_crc32c(0, f->x[i].bytes, f->x[i].size);
    if (got == f->x[i].crc32c)
        return 0;
    return ogk_fail(e, "%s: tensor %s (role %s): checksum mismatch (stored %s, computed %s): the container is corrupt",
                    path, f->t[i].name, f->t[i].role, hex32(f->x[i].crc32c, h1), hex32(got, h2));
}

static q4nx_file *open_fail(q4nx_file *f, int *code, int c)
{
    q4nx_close(f);
    if (code)
        *code = c;
    return NULL;
}

const uint8_t *q4nx_bytes(const q4nx_file *f, size_t *size)
{
    *size = f->map.size;
    return f->map.data;
}

int q4nx_loaded(const q4nx_file *f) { return f->map.copied; }

q4nx_file *q4nx_open(const char *path, ogk_error *e, int *code)
{
    return q4nx_open_flags(path, 0, e, code);
}

q4nx_file *q4nx_open_flags(const char *path, int flags, ogk_error *e, int *code)
{
    q4nx_file *f = calloc(1, sizeof *f);
    if (!f) {
        ogk_fail(e, "out of memory");
        return open_fail(f, code, OGK_EXIT_INIT);
    }
    static const ogk_magic magic = {Q4NX_MAGIC, 8, "a Q4NX container"}; /* a pipe of anything else: at once */
    if (ogk_map_magic(&f->map, path, flags & Q4NX_OPEN_LOAD ? OGK_MAP_LOAD : flags & Q4NX_OPEN_AUTO ? OGK_MAP_AUTO : OGK_MAP_OPEN,
                      &magic, e))
        return open_fail(f, code, errno == ENOMEM ? OGK_EXIT_INIT : OGK_EXIT_INPUT); /* no memory: init failed */
    const uint8_t *p = f->map.data;
    uint64_t size = f->map.size;
    if (size < 8 || memcmp(p, Q4NX_MAGIC, 8) != 0) {
        ogk_fail(e, "%s: not a Q4NX container (bad magic)", path);
        return open_fail(f, code, OGK_EXIT_INPUT);
    }
    if (size < Q4NX_HEADER_SIZE + Q4NX_FOOTER_SIZE) {
        ogk_fail(e, "%s: truncated container (%" PRIu64 " bytes)", path, size);
        return open_fail(f, code, OGK_EXIT_INPUT);
    }
    uint32_t fv = q4nx_rd32(p + HDR_FORMAT), lv = q4nx_rd32(p + HDR_LAYOUT_VERSION);
    if (fv != Q4NX_FORMAT_VERSION) {
        ogk_fail(e, "%s: format version %u %s (this reader knows version %d)", path, fv,
                 fv > Q4NX_FORMAT_VERSION ? "is newer than this reader" : "is not supported", Q4NX_FORMAT_VERSION);
        return open_fail(f, code, OGK_EXIT_INPUT);
    }
    if (lv != Q4NX_LAYOUT_VERSION) {
        ogk_fail(e, "%s: layout version %u %s (this reader knows version %d)", path, lv,
                 lv > Q4NX_LAYOUT_VERSION ? "is newer than this reader" : "is not supported", Q4NX_LAYOUT_VERSION);
        return open_fail(f, code, OGK_EXIT_INPUT);
    }
    f->layout = (int)q4nx_rd32(p + HDR_LAYOUT);
    if (f->layout != OGK_RM && f->layout != OGK_B8) {
        ogk_fail(e, "%s: unknown layout %d in the header", path, f->layout);
        return open_fail(f, code, OGK_EXIT_INPUT);
    }
    if (q4nx_rd32(p + HDR_SIZE) != Q4NX_HEADER_SIZE || q4nx_rd32(p + HDR_FLAGS) ||
        !all_zero(p + HDR_RESERVED, Q4NX_HEADER_SIZE - HDR_RESERVED)) {
        ogk_fail(e, "%s: header size, flags or reserved bytes are not as version %d defines them", path, fv);
        return open_fail(f, code, OGK_EXIT_INPUT);
    }
    const uint8_t *ft = p + size - Q4NX_FOOTER_SIZE;
    if (memcmp(ft + FTR_MAGIC, Q4NX_END_MAGIC, 8) != 0) {
        ogk_fail(e, "%s: truncated container (no footer at the end of its %" PRIu64 " bytes)", path, size);
        return open_fail(f, code, OGK_EXIT_INPUT);
    }
    uint64_t foot = size - Q4NX_FOOTER_SIZE;
    uint64_t mo = q4nx_rd64(ft + FTR_META_OFF), ms = q4nx_rd64(ft + FTR_META_SIZE), to = q4nx_rd64(ft + FTR_TABLE_OFF);
    uint64_t so = q4nx_rd64(ft + FTR_STR_OFF), ss = q4nx_rd64(ft + FTR_STR_SIZE);
    uint32_t nt = q4nx_rd32(ft + FTR_TENSORS), na = q4nx_rd32(ft + FTR_ASSETS);
    f->meta_crc = q4nx_rd32(ft + FTR_META_CRC);
    /* sections in order: data | meta JSON | tables | strings | footer, each bound checked before use */
    int ok = mo >= Q4NX_HEADER_SIZE && mo % Q4NX_ALIGN == 0 && mo <= foot && ms <= foot - mo && ms > 0 &&
             to % Q4NX_ALIGN == 0 && to >= mo + ms && to <= foot && nt <= Q4NX_MAX_TENSORS && na <= Q4NX_MAX_ASSETS &&
             (uint64_t)nt * Q4NX_TENSOR_ENTRY + (uint64_t)na * Q4NX_ASSET_ENTRY <= foot - to &&
             so == to + (uint64_t)nt * Q4NX_TENSOR_ENTRY + (uint64_t)na * Q4NX_ASSET_ENTRY && ss == foot - so &&
             q4nx_rd32(ft + FTR_ZERO) == 0;
    if (!ok) {
        ogk_fail(e, "%s: footer section offsets out of range or out of order (truncated or corrupt container)", path);
        return open_fail(f, code, OGK_EXIT_INPUT);
    }
    f->meta_off = mo;
    f->meta_end = foot;
    char h1[12], h2[12];
    uint32_t got;
    if (!(flags & Q4NX_OPEN_NOCRC) && (got = ogk_crc32c(0, p + mo, foot - mo)) != f->meta_crc) {
        ogk_fail(e, "%s: metadata checksum mismatch (stored %s, computed %s): the container is corrupt", path,
                 hex32(f->meta_crc, h1), hex32(got, h2));
        return open_fail(f, code, OGK_EXIT_INPUT);
    }
    json_error_t je;
    f->meta = json_loadb((const char *)p + mo, ms, JSON_REJECT_DUPLICATES, &je);
    f->model = json_object_get(f->meta, "model");
    f->source = json_object_get(f->meta, "source");
    if (!json_is_object(f->meta) || !json_is_object(f->model) || !json_is_object(f->source)) {
        /* without the open-time checksums (q4nx-verify): metadata that does not read is first a checksum
         * question, a check that failed (exit 1) when its bytes changed, as any other section's */
        if ((flags & Q4NX_OPEN_NOCRC) && (got = ogk_crc32c(0, p + mo, foot - mo)) != f->meta_crc) {
            ogk_fail(e, "%s: metadata checksum mismatch (stored %s, computed %s): the container is corrupt (its "
                     "metadata does not read%s%s)", path, hex32(f->meta_crc, h1), hex32(got, h2), f->meta ? "" : ": ",
                     f->meta ? "" : je.text);
            return open_fail(f, code, OGK_EXIT_CHECK);
        }
        ogk_fail(e, "%s: metadata is not a JSON object with \"model\" and \"source\" objects%s%s", path,
                 f->meta ? "" : ": ", f->meta ? "" : je.text);
        return open_fail(f, code, OGK_EXIT_INPUT);
    }
    f->nt = nt;
    f->na = na;
    f->t = calloc(nt + 1, sizeof *f->t);
    f->x = calloc(nt + 1, sizeof *f->x);
    f->by_role = calloc(nt + 1, sizeof *f->by_role);
    f->asset_name = calloc(na + 1, sizeof *f->asset_name);
    f->asset_data = calloc(na + 1, sizeof *f->asset_data);
    f->asset_size = calloc(na + 1, sizeof *f->asset_size);
    f->asset_crc = calloc(na + 1, sizeof *f->asset_crc);
    span *sp = calloc((size_t)nt + na + 1, sizeof *sp);
    if (!f->t || !f->x || !f->by_role || !f->asset_name || !f->asset_data || !f->asset_size || !f->asset_crc || !sp) {
        free(sp);
        ogk_fail(e, "out of memory");
        return open_fail(f, code, OGK_EXIT_INIT);
    }
    const uint8_t *str = p + so;
    for (size_t i = 0; i < nt; i++) {
        ogk_error te;
        if (parse_tensor(f, i, p + to + i * Q4NX_TENSOR_ENTRY, str, ss, &te)) {
            free(sp);
            ogk_fail(e, "%s: %s", path, te.msg);
            return open_fail(f, code, OGK_EXIT_INPUT);
        }
        f->by_role[i] = &f->t[i];
        sp[i] = (span){f->x[i].offset, f->x[i].size, i, 0};
    }
    for (size_t i = 0; i < na; i++) {
        const uint8_t *a = p + to + (uint64_t)nt * Q4NX_TENSOR_ENTRY + i * Q4NX_ASSET_ENTRY;
        const char *nm = get_string(str, ss, q4nx_rd32(a + AE_NAME_OFF), q4nx_rd32(a + AE_NAME_LEN));
        uint64_t off = q4nx_rd64(a + AE_OFFSET), sz = q4nx_rd64(a + AE_SIZE);
        if (!nm || off < Q4NX_HEADER_SIZE || off > mo || sz > mo - off || q4nx_rd32(a + AE_ZERO)) {
            free(sp);
            ogk_fail(e, "%s: asset table entry %zu%s%s is out of range", path, i, nm ? " " : "", nm ? nm : "");
            return open_fail(f, code, OGK_EXIT_INPUT);
        }
        f->asset_name[i] = nm;
        f->asset_data[i] = p + off;
        f->asset_size[i] = sz;
        f->asset_crc[i] = q4nx_rd32(a + AE_CRC);
        sp[nt + i] = (span){off, sz, i, 1};
    }
    /* no two tensors or assets may share bytes */
    qsort(sp, (size_t)nt + na, sizeof *sp, span_cmp);
    for (size_t i = 1; i < (size_t)nt + na; i++)
        if (sp[i - 1].off + sp[i - 1].size > sp[i].off) {
            const char *a = sp[i - 1].asset ? f->asset_name[sp[i - 1].idx] : f->t[sp[i - 1].idx].name;
            const char *b = sp[i].asset ? f->asset_name[sp[i].idx] : f->t[sp[i].idx].name;
            free(sp);
            ogk_fail(e, "%s: %s and %s overlap", path, a, b);
            return open_fail(f, code, OGK_EXIT_INPUT);
        }
    free(sp);
    qsort(f->by_role, nt, sizeof *f->by_role, role_cmp);
    for (size_t i = 1; i < nt; i++)
        if (!strcmp(f->by_role[i - 1]->role, f->by_role[i]->role)) {
            ogk_fail(e, "%s: two tensors have the role %s", path, f->by_role[i]->role);
            return open_fail(f, code, OGK_EXIT_INPUT);
        }
    for (size_t i = 0; i < na; i++)
        for (size_t j = i + 1; j < na; j++)
            if (!strcmp(f->asset_name[i], f->asset_name[j])) {
                ogk_fail(e, "%s: two assets are named %s", path, f->asset_name[i]);
                return open_fail(f, code, OGK_EXIT_INPUT);
            }
    if (!(flags & Q4NX_OPEN_NOCRC)) {
        for (size_t i = 0; i < na; i++)
            if ((got = ogk_crc32c(0, f->asset_data[i], f->asset_size[i])) != f->asset_crc[i]) {
                ogk_fail(e, "%s: asset %s: checksum mismatch (stored %s, computed %s): the container is corrupt", path,
                         f->asset_name[i], hex32(f->asset_crc[i], h1), hex32(got, h2));
                return open_fail(f, code, OGK_EXIT_INPUT);
            }
        for (size_t i = 0; i < nt; i++)
            if (!ogk_dtype_quantised(f->t[i].dtype) && f->x[i].size < Q4NX_SMALL_TENSOR && tensor_crc_fails(f, i, path, e))
                return open_fail(f, code, OGK_EXIT_INPUT);
    }
    if (code)
        *code = 0;
    return f;
}

int q4nx_verify_weights(const q4nx_file *f, const char *path, ogk_error *e)
{
    for (size_t i = 0; i < f->nt; i++)
        if (tensor_crc_fails(f, i, path, e))
            return -1;
    return 0;
}

void q4nx_close(q4nx_file *f)
{
    if (!f)
        return;
    ogk_map_close(&f->map);
    json_decref(f->meta);
    free(f->t);
    free(f->x);
    free(f->by_role);
    free(f->asset_name);
    free(f->asset_data);
    free(f->asset_size);
    free(f->asset_crc);
    free(f);
}

const json_t *q4nx_model(const q4nx_file *f) { return f->model; }
const json_t *q4nx_source(const q4nx_file *f) { return f->source; }
const json_t *q4nx_meta(const q4nx_file *f) { return f->meta; }
int q4nx_layout(const q4nx_file *f) { return f->layout; }
size_t q4nx_tensor_count(const q4nx_file *f) { return f->nt; }
uint64_t q4nx_file_size(const q4nx_file *f) { return f->map.size; }
const uint8_t *q4nx_file_bytes(const q4nx_file *f) { return f->map.data; }
size_t q4nx_asset_count(const q4nx_file *f) { return f->na; }

const ogk_qtensor *q4nx_tensor_at(const q4nx_file *f, size_t i) { return i < f->nt ? &f->t[i] : NULL; }

const ogk_qtensor *q4nx_find(const q4nx_file *f, const char *role)
{
    size_t lo = 0, hi = f->nt;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(f->by_role[mid]->role, role);
        if (!c)
            return f->by_role[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

int q4nx_asset(const q4nx_file *f, const char *name, const uint8_t **data, size_t *len)
{
    for (size_t i = 0; i < f->na; i++)
        if (!strcmp(f->asset_name[i], name)) {
            *data = f->asset_data[i];
            *len = f->asset_size[i];
            return 0;
        }
    return -1;
}

void q4nx_tensor_extent(const q4nx_file *f, size_t i, q4nx_extent *x) { *x = f->x[i]; }

void q4nx_asset_at(const q4nx_file *f, size_t i, const char **name, const uint8_t **data, size_t *len, uint32_t *crc)
{
    *name = f->asset_name[i];
    *data = f->asset_data[i];
    *len = f->asset_size[i];
    *crc = f->asset_crc[i];
}

void q4nx_meta_bytes(const q4nx_file *f, const uint8_t **data, size_t *len, uint32_t *crc)
{
    *data = f->map.data + f->meta_off;
    *len = f->meta_end - f->meta_off;
    *crc = f->meta_crc;
}
