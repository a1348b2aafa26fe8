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

    return TAP_DONE();
}
