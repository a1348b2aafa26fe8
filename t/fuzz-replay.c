/* t/fuzz-replay.c — runs a libFuzzer target's entry point over given files (directories: every file in
 * them), without libFuzzer: `make check` builds each fuzz/<target>.c with this main (gcc, and ASan +
 * UBSan under SAN=1) and t/fuzz-regress.bats replays fuzz/regress/<target>/ through it, so an input
 * that once crashed a reader crashes the test if the bug comes back. Exit 0 when every input ran
 * (a target that finds a bug aborts, as under libFuzzer), 2 usage, 3 an unreadable input. */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return 3;
    }
    size_t cap = 1 << 16, n = 0, r;
    uint8_t *buf = malloc(cap);
    while (buf && (r = fread(buf + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) {
            uint8_t *b2 = realloc(buf, cap *= 2);
            if (!b2)
                free(buf);
            buf = b2;
        }
    }
    int bad = !buf || ferror(f);
    fclose(f);
    if (bad) {
        fprintf(stderr, "%s: cannot read\n", path);
        free(buf);
        return 3;
    }
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    printf("ran %s (%zu bytes)\n", path, n);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE|DIR...\n", argv[0]);
        return 2;
    }
    if (LLVMFuzzerInitialize)
        LLVMFuzzerInitialize(&argc, &argv);
    int rc = 0, ran = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode)) {
            struct dirent **names;
            int n = scandir(argv[i], &names, NULL, alphasort);
            for (int k = 0; k < n; k++) {
                if (names[k]->d_name[0] != '.') {
                    char p[4096];
                    snprintf(p, sizeof p, "%s/%s", argv[i], names[k]->d_name);
                    rc |= run_file(p);
                    ran++;
                }
                free(names[k]);
            }
            free(names);
        } else {
            rc |= run_file(argv[i]);
            ran++;
        }
    }
    printf("%d inputs\n", ran);
    return rc;
}
