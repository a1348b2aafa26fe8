/* lib/util: CRC32C against the standard check value and the table path; fp16/bf16 round trips; a mapped
 * file cut while mapped is named. */
#include "tap.h"
#include "util/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

uint32_t ogk_crc32c_sw(uint32_t crc, const void *buf, size_t n);

/* A child maps `files` files of two pages (in dir), cuts file number `cut` to nothing and reads its second
 * page: returns its exit status (128 + N: killed by signal N) and what it wrote on stderr (in err). `cut`
 * equal to `files`: one more file, mapped by mmap itself (not an input the library knows), is cut. */
static int cut_mapped(const char *dir, int files, int cut, char *err, size_t cap)
{
    int fds[2];
    if (pipe(fds))
        return -2;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], STDERR_FILENO);
        static ogk_map m[200];
        static char page[8192];
        char path[4096];
        for (int i = 0; i < files + (cut == files); i++) {
            ogk_error e;
            snprintf(path, sizeof path, "%s/m%d", dir, i);
            FILE *f = fopen(path, "wb");
            if (!f || fwrite(page, 1, sizeof page, f) != sizeof page || fclose(f))
                _exit(98);
            int fd = i < files ? -1 : open(path, O_RDONLY);
            void *raw = fd < 0 ? NULL : mmap(NULL, sizeof page, PROT_READ, MAP_PRIVATE, fd, 0);
            if (i < files ? ogk_map_open(&m[i], path, &e) : raw == MAP_FAILED)
                _exit(98);
            if (raw)
                m[i].data = raw;
        }
        snprintf(path, sizeof path, "%s/m%d", dir, cut);
        if (truncate(path, 0))
            _exit(97);
        _exit(((volatile const uint8_t *)m[cut].data)[4096]);
    }
    close(fds[1]);
    size_t n = 0;
    ssize_t r;
    while (n + 1 < cap && (r = read(fds[0], err + n, cap - 1 - n)) > 0)
        n += (size_t)r;
    err[n && err[n - 1] == '\n' ? n - 1 : n] = 0;
    close(fds[0]);
    int st;
    if (pid < 0 || waitpid(pid, &st, 0) != pid)
        return -2;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int main(void)
{
    TAP_OK(ogk_crc32c(0, "123456789", 9) == 0xE3069283u, "crc32c check value (RFC 3720)");
    TAP_OK(ogk_crc32c_sw(0, "123456789", 9) == 0xE3069283u, "crc32c table path check value");

    size_t n = 3 * 8192 * 3 + 77;
    uint8_t *buf = malloc(n);
    uint32_t s = 12345;
    for (size_t i = 0; i < n; i++)
        buf[i] = (uint8_t)((s = s * 1103515245u + 12345u) >> 16);
    int agree = 1;
    size_t lens[] = {0, 1, 7, 8, 9, 24575, 24576, 24577, 50000, n};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++)
        if (ogk_crc32c(0, buf, lens[i]) != ogk_crc32c_sw(0, buf, lens[i]))
            agree = 0;
    TAP_OK(agree, "crc32c hardware path equals table path on lengths around the 3-stream chunk");
    uint32_t whole = ogk_crc32c(0, buf, n);
    uint32_t split = ogk_crc32c(ogk_crc32c(0, buf, 1000), buf + 1000, n - 1000);
    TAP_OK(whole == split, "crc32c is incremental");
    free(buf);

    int f16ok = 1;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = ogk_f16_to_f32((uint16_t)h);
        if (isnan(f))
            continue;
        if (ogk_f32_to_f16(f) != h)
            f16ok = 0;
    }
    TAP_OK(f16ok, "every non-NaN fp16 round-trips through fp32");
    TAP_OK(ogk_f16_to_f32(0x3c00) == 1.0f && ogk_f16_to_f32(0xc000) == -2.0f && ogk_f16_to_f32(0x0001) == ldexpf(1, -24),
           "fp16 known values (1, -2, smallest subnormal)");
    TAP_OK(ogk_f32_to_f16(1.0f + ldexpf(1, -11)) == 0x3c00 && ogk_f32_to_f16(1.0f + 3 * ldexpf(1, -11)) == 0x3c02,
           "fp16 rounds to nearest even");
    TAP_OK(ogk_f32_to_f16(65520.0f) == 0x7c00 && ogk_f32_to_f16_sat(65520.0f) == 0x7bff &&
               ogk_f32_to_f16_sat(-1e30f) == 0xfbff && ogk_f32_to_f16_sat(INFINITY) == 0x7bff &&
               ogk_f32_to_f16_sat(-INFINITY) == 0xfbff && ogk_f32_to_f16_sat(65504.0f) == 0x7bff &&
               ogk_f32_to_f16_sat(1.0f + 3 * ldexpf(1, -11)) == 0x3c02 && isnan(ogk_f16_to_f32(ogk_f32_to_f16_sat(NAN))),
           "fp16 saturating (the KV cache's): beyond +-65504 and infinities clamp to +-65504, the rest rounds as before");
    int bfok = 1;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = ogk_bf16_to_f32((uint16_t)h);
        if (!isnan(f) && ogk_f32_to_bf16(f) != h)
            bfok = 0;
    }
    TAP_OK(bfok, "every non-NaN bf16 round-trips through fp32");

    /* a SIGBUS in any mapping names that file, exit 3: the table held 64, and a cut in the 65th was status 135 */
    char dir[] = "/tmp/ogk-unit-XXXXXX", err[1024], want[64];
    if (mkdtemp(dir)) {
        int first = cut_mapped(dir, 3, 1, err, sizeof err);
        TAP_OK(first == 3 && strstr(err, "/m1: the file shrank while being read"), "a cut mapping is named, exit 3 (%d: %s)",
               first, err);
        int late = cut_mapped(dir, 150, 140, err, sizeof err);
        snprintf(want, sizeof want, "/m%d: the file shrank while being read", 140);
        TAP_OK(late == 3 && strstr(err, want), "the 141st of 150 mappings, cut, is named, exit 3 (%d: %s)", late, err);
        int other = cut_mapped(dir, 2, 2, err, sizeof err);
        TAP_OK(other == 128 + SIGBUS && !strstr(err, "shrank"), "a cut mapping the library did not make: SIGBUS (%d: %s)",
               other, err);
        /* a path longer than the table's 255 bytes: its end, the file's name, is the one kept */
        char deep[600];
        snprintf(deep, sizeof deep, "%s/%0200d", dir, 0);
        int made = mkdir(deep, 0700) == 0;
        snprintf(deep + strlen(deep), sizeof deep - strlen(deep), "/%0200d", 1);
        made = made && mkdir(deep, 0700) == 0;
        int lng = made ? cut_mapped(deep, 1, 0, err, sizeof err) : -2;
        TAP_OK(lng == 3 && strstr(err, "1/m0: the file shrank while being read") && strstr(err, ": ..."),
               "a cut mapping with a 400-byte path is named by its end (%d: %s)", lng, err);
        char cmd[64];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        TAP_OK(system(cmd) == 0, "scratch directory removed");
    } else
        TAP_OK(0, "mkdtemp");
    return TAP_DONE();
}
