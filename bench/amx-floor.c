/* amx-floor: what one group step of kern_amx.c's tiles costs at best on this CPU, one thread, everything in L1.
 * A group step is 16 activation rows x 16 outputs x one block of 32: the tile side (zero a C tile, load an A
 * and a B tile, one product, store the C tile) and the vector side (per row: convert the int32 sums, scale
 * times the row's d, fused multiply-add into the row's fp32 outputs). Each side is timed alone and both
 * interleaved as the kernel runs them (the vector side scaling the tile stored two steps before), for the
 * int8 tiles the kernel uses (TDPBSSD, K = 32 bytes) and for bf16 tiles (TDPBF16PS, K = 32 values: fp32
 * sums, so no conversion). Prints JSON. Exit: 0 ok, 2 usage, 4 no AMX (the ISA table, lib/kern/isa.c, reads
 * cpuid and asks Linux for the tile state). Built against kern.a and run by bench/amx-floor.sh. */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kern/kern.h"
#include "util/util.h"

typedef struct {
    unsigned char palette, start_row, reserved[14];
    unsigned short colsb[16];
    unsigned char rows[16];
} tilecfg;

static char A[2][1024] __attribute__((aligned(64))), Bt[2][1024] __attribute__((aligned(64)));
static int32_t C[4][256] __attribute__((aligned(64)));
static float D[64];

enum { TILE = 1, VECTOR = 2 };

/* ns per group step, `what` sides, bf16 or int8 tiles */
static double run(int what, int bf, long n)
{
    __m512 y[16], s = _mm512_set1_ps(1.0001f);
    for (int i = 0; i < 16; i++)
        y[i] = _mm512_setzero_ps();
    double t0 = ogk_now();
    for (long it = 0; it < n; it++) {
        int32_t *c = C[it & 3];
        __asm__("" : "+r"(c));
        if (what & TILE) { /* tile numbers are immediates: two literal copies, alternating */
#define STEP(C, TA, TB)                                                                                                \
    do {                                                                                                               \
        _tile_zero(C);                                                                                                 \
        _tile_loadd(TA, A[C], 64);                                                                                     \
        _tile_loadd(TB, Bt[C], 64);                                                                                    \
        if (bf)                                                                                                        \
            _tile_dpbf16ps(C, TA, TB);                                                                                 \
        else                                                                                                           \
            _tile_dpbssd(C, TA, TB);                                                                                   \
        _tile_stored(C, c, 64);                                                                                        \
    } while (0)
            if (it & 1)
                STEP(1, 5, 7);
            else
                STEP(0, 4, 6);
#undef STEP
        }
        if (what & VECTOR) {
            const int32_t *src = C[(it + 2) & 3];
            const float *d = D + (it & 31);
            __asm__("" : "+r"(src), "+r"(d));
            if (bf) {
#pragma GCC unroll 16
                for (int i = 0; i < 16; i++)
                    y[i] = _mm512_fmadd_ps(_mm512_mul_ps(s, _mm512_set1_ps(d[i])),
                                           _mm512_load_ps((const float *)src + 16 * i), y[i]);
            } else {
#pragma GCC unroll 16
                for (int i = 0; i < 16; i++)
                    y[i] = _mm512_fmadd_ps(_mm512_mul_ps(s, _mm512_set1_ps(d[i])),
                                           _mm512_cvtepi32_ps(_mm512_load_si512(src + 16 * i)), y[i]);
            }
        }
    }
    double t = ogk_now() - t0;
    float z = 0; /* keep the sums alive */
    for (int i = 0; i < 16; i++)
        z += _mm512_reduce_add_ps(y[i]);
    __asm__ volatile("" : : "x"(z));
    return t / (double)n * 1e9;
}

static void configure(int bf)
{
    tilecfg c __attribute__((aligned(64)));
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 4; t++)
        c.rows[t] = 16, c.colsb[t] = 64;
    for (int t = 4; t < 6; t++) /* A: 16 rows x 32 int8 or 32 bf16 */
        c.rows[t] = 16, c.colsb[t] = bf ? 64 : 32;
    for (int t = 6; t < 8; t++) /* B: 32 k in 4-byte (int8) or 2-value (bf16) pairs per row */
        c.rows[t] = bf ? 16 : 8, c.colsb[t] = 64;
    __asm__ volatile("ldtilecfg %0" : : "m"(c) : "memory");
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 4000000;
    if (argc > 2 || n < 1000) {
        fprintf(stderr, "usage: amx-floor [STEPS >= 1000]\n");
        return 2;
    }
    int bf16 = 0, has;
    const char *name;
    for (int i = 0; (name = kern_cpu_feature(i, &has)); i++)
        bf16 |= has && !strcmp(name, "amx_bf16");
    if (!kern_isa_supported(KERN_ISA_AMX) || !bf16) {
        fprintf(stderr, "amx-floor: this CPU (or the kernel's tile permission) gives no AMX-INT8/BF16 row\n");
        return 4;
    }
    for (int i = 0; i < 64; i++)
        D[i] = 1.0f + (float)i * 1e-3f;
    printf("{\"steps\": %ld", n);
    for (int bf = 0; bf < 2; bf++) {
        configure(bf);
        run(TILE | VECTOR, bf, n / 10); /* warm-up */
        double t = run(TILE, bf, n), v = run(VECTOR, bf, n), both = run(TILE | VECTOR, bf, n);
        printf(", \"%s\": {\"tile_ns\": %.2f, \"vector_ns\": %.2f, \"both_ns\": %.2f, \"overlap\": %.2f}",
               bf ? "bf16" : "int8", t, v, both, (t + v - both) / (t < v ? t : v));
        _tile_release();
    }
    printf("}\n");
    return 0;
}
