/* Fuzz target: the input is an OGAX stream (ogax.5), read the way q4nx-pack reads it: ogax_next frame
 * by frame, ogax_tensor_parse on tensor frames, the payload read part by part (or skipped). Beyond
 * "no crash", a header the parser accepts must describe sizes that really fit in 64 bits. */
#include "fuzz.h"
#include "ogax/ogax.h"

static void check_tensor(const ogax_frame *f, const ogax_tensor *t)
{
    /* recompute the sizes in 128 bits: an accepted header must not have wrapped */
    unsigned __int128 count = 1;
    for (int i = 0; i < t->ndim; i++) {
        FUZZ_CHECK(t->shape[i] > 0);
        count *= t->shape[i];
    }
    if (ogk_dtype_quantised(t->dtype)) {
        int q8 = t->dtype == OGK_Q8;
        FUZZ_CHECK(t->ndim == 2 && t->shape[0] == t->n && t->shape[1] == t->k);
        FUZZ_CHECK(t->n > 0 && t->k > 0 && t->block >= 16);
        unsigned __int128 kb = ((unsigned __int128)t->k + t->block - 1) / t->block;
        FUZZ_CHECK(kb == t->k_blocks);
        unsigned __int128 codes = (unsigned __int128)t->n * kb * t->block / (q8 ? 1 : 2);
        unsigned __int128 scales = (unsigned __int128)t->n * kb * ogk_dtype_size(t->scale_dtype);
        unsigned __int128 zeros = t->has_zp ? (unsigned __int128)t->n * (q8 ? kb : (kb + 1) / 2) : 0;
        FUZZ_CHECK(codes == t->codes.size && scales == t->scales.size && zeros == t->zeros.size);
        FUZZ_CHECK(codes + scales + zeros == f->payload_len);
    } else {
        FUZZ_CHECK(count * ogk_dtype_size(t->dtype) == t->data.size);
        FUZZ_CHECK(t->data.size == f->payload_len);
    }
}

static int read_payload(ogax_reader *r, uint64_t n, ogk_error *e)
{
    static uint8_t buf[4096];
    while (n) {
        uint64_t c = n < sizeof buf ? n : sizeof buf;
        if (ogax_read(r, buf, c, e))
            return -1;
        fuzz_touch(buf, (size_t)c);
        n -= c;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fd = fuzz_memfd(data, size);
    if (fd < 0)
        return 0;
    ogax_reader r;
    ogax_reader_init(&r, fd);
    ogk_error e;
    for (int n = 0; n < 100000; n++) {
        ogax_frame f;
        memset(&f, 0, sizeof f);
        e.msg[0] = 0;
        int rc = ogax_next(&r, &f, &e);
        if (rc <= 0) {
            FUZZ_CHECK(rc == 0 || e.msg[0]);
            break;
        }
        FUZZ_CHECK(f.hdr && f.type);
        int bad = 0;
        if (!strcmp(f.type, "tensor")) {
            ogax_tensor t;
            e.msg[0] = 0;
            if (ogax_tensor_parse(&f, &t, &e) == 0) {
                check_tensor(&f, &t);
                /* parts in order, as q4nx-pack reads them */
                const ogax_part *parts[4] = {&t.codes, &t.scales, &t.zeros, &t.data};
                for (int i = 0; i < 4 && !bad; i++)
                    if (parts[i]->present == 1 && read_payload(&r, parts[i]->size, &e))
                        bad = 1;
            } else {
                FUZZ_CHECK(e.msg[0]);
                bad = ogax_skip(&r, f.payload_len, &e) != 0;
            }
        } else if (f.payload_len <= (1u << 20)) {
            bad = read_payload(&r, f.payload_len, &e) != 0;
        } else {
            bad = ogax_skip(&r, f.payload_len, &e) != 0;
        }
        json_decref(f.hdr);
        if (bad)
            break;
    }
    close(fd);
    return 0;
}
