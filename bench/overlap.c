/* bench/overlap.c — does arithmetic hide under a DRAM stream on this CPU? One pass over 512 MiB of
 * "codes" (256 B a group) and "scales" (64 B a group), on T threads (each its half), four ways:
 *   read       loads only (the read probe's loop: one XOR per 64 B)
 *   indep      the same loads plus 32 VPDPBUSD a group on registers that do not depend on them
 *   gemv       the one-row int8 GEMV's work on the loaded bytes (nibble unpack, 8 VPDPBUSD, the
 *              group's scale: what kern_avx512's group_i8 does), so every VPDPBUSD waits for its load
 *   gemv_l2    the gemv loop over 512 KiB again and again (from L2: its arithmetic alone)
 * GB/s of each (bytes of codes + scales over the pass's wall time). Prints one JSON line. AVX-512 VNNI. */
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define KB 28 /* groups of a row block (K = 896, block 32) */
static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void *huge(size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, 2 << 20, n))
        return NULL;
    madvise(p, n, MADV_HUGEPAGE);
    memset(p, 1, n);
    return p;
}

static uint8_t *codes;
static float *scales;
static size_t groups;
static int8_t q[KB * 32];
static float xd[KB];
static volatile int sink;

__attribute__((noinline)) static void run_read(const uint8_t *c, const float *s, size_t n)
{
    __m512i a = _mm512_setzero_si512(), b = a;
    for (size_t g = 0; g < n; g++) {
        const uint8_t *p = c + g * 256;
        a = _mm512_xor_si512(a, _mm512_load_si512(p));
        b = _mm512_xor_si512(b, _mm512_load_si512(p + 64));
        a = _mm512_xor_si512(a, _mm512_load_si512(p + 128));
        b = _mm512_xor_si512(b, _mm512_load_si512(p + 192));
        a = _mm512_xor_si512(a, _mm512_castps_si512(_mm512_load_ps(s + g * 16)));
    }
    sink += _mm512_reduce_add_epi32(_mm512_xor_si512(a, b));
}

__attribute__((noinline)) static void run_indep(const uint8_t *c, const float *s, size_t n)
{
    __m512i a = _mm512_setzero_si512(), b = a, d[8];
    const __m512i k = _mm512_set1_epi32(0x01020304);
    for (int i = 0; i < 8; i++)
        d[i] = _mm512_set1_epi32(i);
    for (size_t g = 0; g < n; g++) {
        const uint8_t *p = c + g * 256;
        a = _mm512_xor_si512(a, _mm512_load_si512(p));
        b = _mm512_xor_si512(b, _mm512_load_si512(p + 64));
        a = _mm512_xor_si512(a, _mm512_load_si512(p + 128));
        b = _mm512_xor_si512(b, _mm512_load_si512(p + 192));
        a = _mm512_xor_si512(a, _mm512_castps_si512(_mm512_load_ps(s + g * 16)));
#pragma GCC unroll 32
        for (int i = 0; i < 32; i++)
            d[i % 8] = _mm512_dpbusd_epi32(d[i % 8], k, k);
    }
    for (int i = 0; i < 8; i++)
        a = _mm512_add_epi32(a, d[i]);
    sink += _mm512_reduce_add_epi32(_mm512_xor_si512(a, b));
}

__attribute__((noinline)) static void run_gemv(const uint8_t *c, const float *s, size_t n)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512 y = _mm512_setzero_ps(), out = y;
    for (size_t g = 0, gi = 0; g < n; g++, gi = gi + 1 == KB ? 0 : gi + 1) {
        const uint8_t *p = c + g * 256;
        __m512i a[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
#pragma GCC unroll 4
        for (int ch = 0; ch < 4; ch++) {
            __m512i w = _mm512_load_si512(p + ch * 64);
            int32_t ql, qh;
            memcpy(&ql, q + gi * 32 + ch * 8, 4);
            memcpy(&qh, q + gi * 32 + ch * 8 + 4, 4);
            a[(ch & 1) * 2] = _mm512_dpbusd_epi32(a[(ch & 1) * 2], _mm512_and_si512(w, m4), _mm512_set1_epi32(ql));
            a[(ch & 1) * 2 + 1] =
                _mm512_dpbusd_epi32(a[(ch & 1) * 2 + 1], _mm512_andnot_si512(m4, w), _mm512_set1_epi32(qh));
        }
        __m512i hi = _mm512_srai_epi32(_mm512_add_epi32(a[1], a[3]), 4);
        __m512 t = _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_add_epi32(a[0], a[2]), hi));
        y = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_load_ps(s + g * 16), _mm512_set1_ps(xd[gi])), t, y);
        if (gi == KB - 1)
            out = _mm512_add_ps(out, y), y = _mm512_setzero_ps();
    }
    sink += (int)_mm512_reduce_add_ps(out);
}

static int mode, nthreads;
static void *worker(void *arg)
{
    size_t id = (size_t)arg, share = groups / nthreads / KB * KB;
    const uint8_t *c = codes + id * share * 256;
    const float *s = scales + id * share * 16;
    if (mode == 0)
        run_read(c, s, share);
    else if (mode == 1)
        run_indep(c, s, share);
    else if (mode == 2)
        run_gemv(c, s, share);
    else
        for (int r = 0; r < 1024; r++) /* 512 KiB of codes and scales per pass: from L2 */
            run_gemv(c, s, (512 << 10) / 320 / KB * KB);
    return NULL;
}

static double pass(int m)
{
    pthread_t th[64];
    mode = m;
    double t0 = now();
    for (int i = 1; i < nthreads; i++)
        pthread_create(&th[i], NULL, worker, (void *)(size_t)i);
    worker(NULL);
    for (int i = 1; i < nthreads; i++)
        pthread_join(th[i], NULL);
    double t = now() - t0;
    size_t share = groups / nthreads / KB * KB, g = m == 3 ? (size_t)1024 * ((512 << 10) / 320 / KB * KB) : share;
    return (double)g * nthreads * 320 / t / 1e9;
}

int main(int argc, char **argv)
{
    nthreads = argc > 1 ? atoi(argv[1]) : 1;
    if (nthreads < 1 || nthreads > 64 || !__builtin_cpu_supports("avx512vnni")) {
        fprintf(stderr, "overlap: usage: overlap THREADS (1..64), on a CPU with AVX-512 VNNI\n");
        return 2;
    }
    groups = (size_t)(512 << 20) / 256;
    codes = huge(groups * 256), scales = huge(groups * 64);
    if (!codes || !scales) {
        fprintf(stderr, "overlap: out of memory\n");
        return 4;
    }
    for (int i = 0; i < KB * 32; i++)
        q[i] = (int8_t)(i * 7);
    for (int i = 0; i < KB; i++)
        xd[i] = 1.0f / (i + 1);
    pass(0); /* warm-up: pages in */
    double r = pass(0), i = pass(1), g = pass(2), l = pass(3);
    printf("{\"threads\": %d, \"read\": %.2f, \"indep\": %.2f, \"gemv\": %.2f, \"gemv_l2\": %.2f}\n", nthreads, r, i, g,
           l);
    return 0;
}
