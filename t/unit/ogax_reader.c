/* lib/ogax reader on hostile streams: regressions for what fuzz/ogax_reader found. Streams are built
 * byte by byte here from ogax.5 (not with ogax_writer), so a writer bug cannot hide a reader bug. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ogax/ogax.h"
#include "tap.h"

static size_t put_frame(uint8_t *buf, size_t at, const char *hdr, uint64_t plen)
{
    uint32_t hl = (uint32_t)strlen(hdr);
    memcpy(buf + at, "OGAX", 4);
    for (int i = 0; i < 4; i++)
        buf[at + 4 + i] = (uint8_t)(hl >> (8 * i));
    for (int i = 0; i < 8; i++)
        buf[at + 8 + i] = (uint8_t)(plen >> (8 * i));
    memcpy(buf + at + 16, hdr, hl);
    return at + 16 + hl;
}

static int stream_fd(const uint8_t *b, size_t n)
{
    int fd = memfd_create("ogax", 0);
    if (fd < 0 || write(fd, b, n) != (ssize_t)n || lseek(fd, 0, SEEK_SET))
        abort();
    return fd;
}

int main(void)
{
    uint8_t buf[4096];
    ogk_error e;

    /* the error names the first frame's type; the type string lives in the header being released */
    size_t n = put_frame(buf, 0, "{\"type\":\"tensorXYZ\"}", 0);
    int fd = stream_fd(buf, n);
    ogax_reader r;
    ogax_reader_init(&r, fd);
    ogax_frame f;
    memset(&e, 0, sizeof e);
    int rc = ogax_next(&r, &f, &e);
    TAP_OK(rc == -1 && strstr(e.msg, "must start with a model frame, got \"tensorXYZ\""),
           "a stream not starting with a model frame is refused and names the frame type (%s)", e.msg);
    close(fd);

    /* shapes whose byte counts wrap 64 bits must be refused, not accepted with a 0-byte payload */
    static const struct {
        const char *hdr, *why;
    } wrap[] = {
        {"{\"type\":\"tensor\",\"name\":\"w\",\"role\":\"embed\",\"dtype\":\"f32\",\"shape\":[4294967296,4294967296],"
         "\"parts\":[{\"name\":\"data\",\"offset\":0,\"size\":0,\"crc32c\":0}]}",
         "more than 2^50 elements"},
        {"{\"type\":\"tensor\",\"name\":\"w\",\"role\":\"embed\",\"dtype\":\"i64\",\"shape\":[65536,65536,65536,65536],"
         "\"parts\":[{\"name\":\"data\",\"offset\":0,\"size\":0,\"crc32c\":0}]}",
         "more than 2^50 elements"},
        {"{\"type\":\"tensor\",\"name\":\"q\",\"role\":\"lm_head\",\"dtype\":\"q4\",\"shape\":[4294967296,32],"
         "\"quant\":{\"bits\":4,\"block_size\":32,\"k_blocks\":1,\"scale_dtype\":\"f32\",\"zero_points\":\"none\"},"
         "\"parts\":[{\"name\":\"codes\",\"offset\":0,\"size\":0,\"crc32c\":0},"
         "{\"name\":\"scales\",\"offset\":0,\"size\":0,\"crc32c\":0}]}",
         "N, K < 2^32"},
        /* q8 headers that contradict themselves (8-bit weights: one code a byte, zero points "u8") */
        {"{\"type\":\"tensor\",\"name\":\"q\",\"role\":\"lm_head\",\"dtype\":\"q8\",\"shape\":[2,32],"
         "\"quant\":{\"bits\":4,\"block_size\":32,\"k_blocks\":1,\"scale_dtype\":\"f32\",\"zero_points\":\"none\"},"
         "\"parts\":[{\"name\":\"codes\",\"offset\":0,\"size\":64,\"crc32c\":0},"
         "{\"name\":\"scales\",\"offset\":64,\"size\":8,\"crc32c\":0}]}",
         "bits 4 in a q8 tensor"},
        {"{\"type\":\"tensor\",\"name\":\"q\",\"role\":\"lm_head\",\"dtype\":\"q8\",\"shape\":[2,32],"
         "\"quant\":{\"bits\":8,\"block_size\":32,\"k_blocks\":1,\"scale_dtype\":\"f32\",\"zero_points\":\"u4\"},"
         "\"parts\":[{\"name\":\"codes\",\"offset\":0,\"size\":64,\"crc32c\":0},"
         "{\"name\":\"scales\",\"offset\":64,\"size\":8,\"crc32c\":0}]}",
         "zero_points must be \"u8\""},
        {"{\"type\":\"tensor\",\"name\":\"q\",\"role\":\"lm_head\",\"dtype\":\"q8\",\"shape\":[2,32],"
         "\"quant\":{\"bits\":8,\"block_size\":32,\"k_blocks\":1,\"scale_dtype\":\"f32\",\"zero_points\":\"none\"},"
         "\"parts\":[{\"name\":\"codes\",\"offset\":0,\"size\":32,\"crc32c\":0},"
         "{\"name\":\"scales\",\"offset\":32,\"size\":8,\"crc32c\":0}]}",
         "codes size 32 != N*k_blocks*block*bits/8 64"},
    };
    for (size_t i = 0; i < sizeof wrap / sizeof wrap[0]; i++) {
        n = put_frame(buf, 0, "{\"type\":\"model\",\"ogax\":2,\"model\":{},\"source\":{}}", 0);
        n = put_frame(buf, n, wrap[i].hdr, 0);
        fd = stream_fd(buf, n);
        ogax_reader_init(&r, fd);
        rc = ogax_next(&r, &f, &e);
        json_decref(rc == 1 ? f.hdr : NULL);
        rc = ogax_next(&r, &f, &e);
        ogax_tensor t;
        memset(&e, 0, sizeof e);
        int prc = rc == 1 ? ogax_tensor_parse(&f, &t, &e) : 0;
        TAP_OK(rc == 1 && prc == -1 && strstr(e.msg, wrap[i].why), "a tensor header whose sizes wrap 64 bits or contradict its quantisation is refused (%s)",
               e.msg);
        if (rc == 1)
            json_decref(f.hdr);
        close(fd);
    }

    return TAP_DONE();
}
