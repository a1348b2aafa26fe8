/* fuzz/ — shared helpers of the libFuzzer targets (see fuzz/README). Not part of the build's
 * programs: `make fuzz` compiles these with clang and -fsanitize=fuzzer,address,undefined. */
#ifndef OGK_FUZZ_H
#define OGK_FUZZ_H
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <limits.h>
#include <sys/mman.h>
#include <sys/stat.h>
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

/* The input as a path (/proc/self/fd/N of fuzz_memfd) in path[64]; the fd, or -1 (skip the input) */
static inline int fuzz_memfd_path(const uint8_t *data, size_t size, char *path)
{
    int fd = fuzz_memfd(data, size);
    if (fd >= 0)
        snprintf(path, 64, "/proc/self/fd/%d", fd);
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

/* A scratch pack directory for the pack targets: a new directory in $TMPDIR (dir, PATH_MAX) that
 * links every file of the pack named by $OGAKIT_FUZZ_PACK (its real path into src_dir) except
 * tokenizer.json, which becomes `stub` (the real one makes an exec take a second), and except `skip`
 * (the file the target fuzzes; NULL: none). Exits 2 (no pack named) or 4 (cannot set up). */
static inline void fuzz_pack_dir(const char *who, const char *skip, const char *stub, char *dir, char *src_dir)
{
    const char *src = getenv("OGAKIT_FUZZ_PACK");
    if (!src || !realpath(src, src_dir)) {
        fprintf(stderr, "%s: set OGAKIT_FUZZ_PACK to a pack directory (tools/fixture.sh qwen2 cpu tied tiny)\n", who);
        exit(2);
    }
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(dir, PATH_MAX, "%s/fuzz-%s-XXXXXX", tmp, who);
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        exit(4);
    }
    DIR *d = opendir(src_dir);
    if (!d) {
        perror(src_dir);
        exit(2);
    }
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.' || !strcmp(de->d_name, "tokenizer.json") || (skip && !strcmp(de->d_name, skip)))
            continue;
        char from[PATH_MAX * 2], to[PATH_MAX * 2];
        snprintf(from, sizeof from, "%s/%s", src_dir, de->d_name);
        snprintf(to, sizeof to, "%s/%s", dir, de->d_name);
        char *abs = realpath(from, NULL);
        if (!abs || symlink(abs, to)) {
            perror(to);
            exit(4);
        }
        free(abs);
    }
    closedir(d);
    char tj[PATH_MAX * 2];
    snprintf(tj, sizeof tj, "%s/tokenizer.json", dir);
    FILE *f = fopen(tj, "w");
    if (!f || fputs(stub, f) < 0 || fclose(f)) {
        perror(tj);
        exit(4);
    }
    fprintf(stderr, "%s: pack directory %s\n", who, dir);
}
#endif
