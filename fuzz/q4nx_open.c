/* Fuzz target: the input is a model.q4nx container (q4nx.5). q4nx_open, then every accessor over every
 * tensor and asset, element accessors at the corners, and the dequantisation of a few rows through the
 * element accessors (ogk_q4_dequant_row) and every row of the ISA table this CPU runs (lib/kern), which
 * must agree bit for bit. */
#include "fuzz.h"
#include "kern/kern.h"
#include "q4nx/q4nx.h"

/* an accepted q8 tensor: source order, its parts inside the file; its first and last rows dequantise */
static void check_q8(const ogk_qtensor *t)
{
    FUZZ_CHECK(t->layout == OGK_PLAIN && t->n > 0 && t->k > 0 && t->block >= 16 && t->k_blocks > 0);
    FUZZ_CHECK(t->codes && t->scales && (!t->has_zp || t->zeros));
    size_t g = ogk_q8_groups(t->n, t->k, t->block);
    fuzz_touch(t->codes, ogk_q8_codes_bytes(t->n, t->k, t->block));
    fuzz_touch(t->scales, g * ogk_dtype_size(t->scale_dtype));
    if (t->has_zp)
        fuzz_touch(t->zeros, g);
    if (t->k > (1u << 22))
        return;
    float *a = malloc(sizeof(float) * t->k);
    FUZZ_CHECK(a);
    ogk_q8_dequant_row(t, 0, a);
    ogk_q8_dequant_row(t, t->n - 1, a);
    fuzz_touch(a, sizeof(float) * t->k);
    free(a);
}

static void check_q4(const ogk_qtensor *t)
{
    FUZZ_CHECK(t->n > 0 && t->k > 0 && t->block > 0 && t->k_blocks > 0);
    FUZZ_CHECK(t->codes && t->scales && (!t->has_zp || t->zeros));
    size_t cb = ogk_q4_codes_bytes(t->layout, t->n, t->k, t->block);
    size_t g = ogk_q4_groups(t->layout, t->n, t->k, t->block);
    fuzz_touch(t->codes, cb);
    fuzz_touch(t->scales, g * ogk_dtype_size(t->scale_dtype));
    if (t->has_zp)
        fuzz_touch(t->zeros, g);
    uint32_t rows[2] = {0, t->n - 1}, cols[2] = {0, t->k - 1};
    for (int i = 0; i < 2; i++) {
        for (int j = 0; j < 2; j++)
            fuzz_sink += ogk_q4_code(t, rows[i], cols[j]);
        float sc = ogk_q4_scale(t, rows[i], t->k_blocks - 1);
        uint32_t bits;
        memcpy(&bits, &sc, 4);
        fuzz_sink += bits + ogk_q4_zero(t, rows[i], 0);
    }
    if (t->k > (1u << 22))
        return;
    uint32_t nr = t->n < 3 ? t->n : 3, row0 = t->n - nr;
    float *a = malloc(sizeof(float) * t->k * nr), *b = malloc(sizeof(float) * t->k * nr),
          *c = malloc(sizeof(float) * t->k);
    FUZZ_CHECK(a && b && c);
    kern_isa_row(KERN_ISA_REF)->dequant(t, row0, nr, a);
    for (uint32_t r = 0; r < nr; r++) {
        ogk_q4_dequant_row(t, row0 + r, c);
        FUZZ_CHECK(!memcmp(c, a + (size_t)r * t->k, sizeof(float) * t->k));
    }
    for (int id = 0; id < KERN_ISA_COUNT; id++)
        if (kern_isa_supported(id)) {
            kern_isa_row(id)->dequant(t, row0, nr, b);
            FUZZ_CHECK(!memcmp(a, b, sizeof(float) * t->k * nr));
        }
    free(a);
    free(b);
    free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    int fd = fuzz_memfd_path(data, size, path);
    if (fd < 0)
        return 0;
    ogk_error e;
    e.msg[0] = 0;
    int code = -1;
    q4nx_file *f = q4nx_open(path, &e, &code);
    if (!f) {
        FUZZ_CHECK(e.msg[0] && code > 0);
        close(fd);
        return 0;
    }
    FUZZ_CHECK(code == 0 && q4nx_model(f) && q4nx_source(f) && q4nx_meta(f));
    FUZZ_CHECK(q4nx_layout(f) == OGK_RM || q4nx_layout(f) == OGK_B8);
    uint64_t fsize = q4nx_file_size(f);
    const uint8_t *base = q4nx_file_bytes(f);
    FUZZ_CHECK(fsize == size);
    const uint8_t *mb;
    size_t ml;
    uint32_t crc;
    q4nx_meta_bytes(f, &mb, &ml, &crc);
    FUZZ_CHECK(mb >= base && ml <= fsize && (uint64_t)(mb - base) <= fsize - ml);
    fuzz_touch(mb, ml);
    for (size_t i = 0; i < q4nx_tensor_count(f); i++) {
        const ogk_qtensor *t = q4nx_tensor_at(f, i);
        FUZZ_CHECK(t && t->name && t->role);
        FUZZ_CHECK(q4nx_find(f, t->role) == t);
        q4nx_extent x;
        q4nx_tensor_extent(f, i, &x);
        FUZZ_CHECK(x.offset <= fsize && x.size <= fsize - x.offset && x.bytes == base + x.offset);
        fuzz_touch(x.bytes, x.size);
        if (t->dtype == OGK_Q4) {
            FUZZ_CHECK(t->layout == q4nx_layout(f));
            check_q4(t);
        } else if (t->dtype == OGK_Q8) {
            check_q8(t);
        } else {
            FUZZ_CHECK(ogk_dtype_size(t->dtype) > 0 && t->ndim >= 1 && t->ndim <= 4);
            unsigned __int128 count = ogk_dtype_size(t->dtype);
            for (int d = 0; d < t->ndim; d++)
                count *= t->shape[d];
            FUZZ_CHECK(count == t->nbytes);
            FUZZ_CHECK((const uint8_t *)t->data >= base && t->nbytes <= fsize &&
                       (uint64_t)((const uint8_t *)t->data - base) <= fsize - t->nbytes);
            fuzz_touch(t->data, t->nbytes);
        }
    }
    FUZZ_CHECK(q4nx_tensor_at(f, q4nx_tensor_count(f)) == NULL);
    FUZZ_CHECK(q4nx_find(f, "no-such-role") == NULL);
    for (size_t i = 0; i < q4nx_asset_count(f); i++) {
        const char *nm;
        const uint8_t *ad, *ad2;
        size_t al, al2;
        q4nx_asset_at(f, i, &nm, &ad, &al, &crc);
        FUZZ_CHECK(nm && ad >= base && al <= fsize && (uint64_t)(ad - base) <= fsize - al);
        fuzz_touch(ad, al);
        FUZZ_CHECK(q4nx_asset(f, nm, &ad2, &al2) == 0 && ad2 == ad && al2 == al);
    }
    q4nx_close(f);
    close(fd);
    return 0;
}
