/* Minimal TAP for C unit tests: t/run.sh counts "ok" / "not ok" lines. */
#ifndef OGK_TAP_H
#define OGK_TAP_H
#include <stdio.h>

static int tap_n, tap_failed;
#define TAP_OK(cond, ...)                                                                                              \
    do {                                                                                                               \
        int tap_c_ = (cond);                                                                                           \
        tap_n++;                                                                                                       \
        if (!tap_c_)                                                                                                   \
            tap_failed++;                                                                                              \
        printf("%sok %d - ", tap_c_ ? "" : "not ", tap_n);                                                             \
        printf(__VA_ARGS__);                                                                                           \
        printf("\n");                                                                                                  \
        if (!tap_c_)                                                                                                   \
            printf("#   failed at %s:%d: %s\n", __FILE__, __LINE__, #cond);                                        \
    } while (0)
#define TAP_DONE() (printf("1..%d\n", tap_n), tap_failed ? 1 : 0)
#endif
