/* fuzz/ — shared helpers of the libFuzzer targets (see fuzz/README). Not part of the build's
 * programs: `make fuzz` compiles these with clang and -fsanitize=fuzzer,address,undefined. */
#ifndef OGK_FUZZ_H
#define OGK_FUZZ_H
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* A fuzz-found invariant violation: print and abort so libFuzzer saves the input as a crash. */
#define FUZZ_CHECK(cond)                                                                  \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                      \
        }                                                                                 \
    } while (0)

/* The input as a file descriptor (a memfd at offset 0), for readers that take an fd or a path
 * (/proc/self/fd/N). -1 on failure (then the input is skipped). */
static inline int fuzz_memfd(const uint8_t *data, size_t size)
{
    int fd = memfd_create("fuzz", MFD_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t off = 0;
    while (off < size) {
        ssize_t w = write(fd, data + off, size - off);
        if (w <= 0) {
            close(fd);
            return -1;
        }
        off += (size_t)w;
    }
    if (lseek(fd, 0, SEEK_SET) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Reads every byte of a region so ASan sees an out-of-range pointer; the sum keeps it from being
 * optimised away. */
static volatile unsigned fuzz_sink;
static inline void fuzz_touch(const void *p, size_t n)
{
    const volatile uint8_t *b = p;
    unsigned s = 0;
    if (!p || !n)
        return;
    /* first, last and a stride through the middle: whole-region reads would dominate the time */
    size_t step = n / 64 + 1;
    for (size_t i = 0; i < n; i += step)
        s += b[i];
    s += b[n - 1];
    fuzz_sink += s;
}
#endif
