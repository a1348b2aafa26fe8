/* lib/kern: every row of the ISA table this CPU runs (rows it lacks are skipped by name) equals the scalar reference (kern_ref_rows, which reads weights through
 * lib/q4nx's accessors and sums in double) within the bounds stated in kern.h, on odd shapes, both
 * layouts, both modes, f32/f16/bf16 scales, with and without zero points, M = 1, 7, 16, 128, 130.
 *   f32: |y - ref| <= (B + kb + 4) * 2^-23 * sum_k |scale|*(code + zp)*|x|
 *   i8:  |y - ref| <= (kb + 4) * 2^-23 * sum_g |scale*d*(sum code*q - zp*sum q)|
 * The bounds are Higham's a-priori bounds for the sums each path performs, doubled; a single wrong
 * code (error ~ |scale*x|) exceeds them by orders of magnitude on these shapes.
 * Also, per row: its int8 quantisation is bit-identical to the scalar one, its rm band shuffle to the
 * scalar one, its read loop XORs what it reads; the i8 mode's error against the exact product is
 * measured and printed; results do not depend on the thread count; the table's names and modes. */
#include "tap.h"
#include "kern/kern.h"
#include "kern/kern_int.h" /* kern_pool_take_next: the next-launch hint is consumed */
#include "util/tensor.h"
#include "util/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KERN_TEST_SEED 0x9E3779B97F4A7C15ull
#include "kern_tensors.h"

/* the bound of kern.h for output (m, n) */
static double bound(const ogk_qtensor *W, const float *x, uint32_t n, int mode, const int8_t *q, const float *d,
                    const int32_t *qs)
{
    uint32_t B = W->block, kb = W->k_blocks, K = W->k;
    double S = 0;
    if (mode == KERN_F32) {
        for (uint32_t c = 0; c < K; c++) {
            uint32_t g = c / B;
            S += fabs(ogk_q4_scale(W, n, g)) * (ogk_q4_code(W, n, c) + ogk_q4_zero(W, n, g)) * fabs(x[c]);
        }
        return (B + kb + 4) * ldexp(1.0, -23) * S;
    }
    for (uint32_t g = 0; g < kb; g++) {
        int64_t s = 0;
        for (uint32_t c = g * B; c < (g + 1) * B && c < K; c++)
            s += (int64_t)ogk_q4_code(W, n, c) * q[c];
        s -= (int64_t)ogk_q4_zero(W, n, g) * qs[g];
        S += fabs(ogk_q4_scale(W, n, g) * (double)d[g] * (double)s);
    }
    return (kb + 4) * ldexp(1.0, -23) * S + 1e-30;
}

typedef struct {
    uint32_t n, k, block;
} shape;
static const shape shapes[] = {{37, 32, 32}, {50, 200, 32}, {17, 128, 128}, {33, 300, 128}, {100, 72, 16},
                               {1, 64, 64},  {65, 256, 256}, {20, 520, 64}};
static const int Ms[] = {1, 7, 16, 128, 130};

static double i8_err_max, i8_err_rms_num, i8_err_rms_den;

/* compare one path against the reference over all shapes and M; returns 1 when all within bound */
static int check_path(int isa, kern_pool *pool, int layout, int mode, int sdt, int zp, char *why, size_t whylen)
{
    int ok = 1;
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes && ok; si++) {
        const shape *sh = &shapes[si];
        if (layout == OGK_RM && sh->block > 256)
            continue;
        tensor T;
        make(&T, layout, sh->n, sh->k, sh->block, sdt, zp);
        for (size_t mi = 0; mi < sizeof Ms / sizeof *Ms && ok; mi++) {
            int M = Ms[mi];
            if (M > 16 && sh->n * sh->k > 20000)
                M = M == 128 ? 24 : 33; /* keep the double-precision reference quick */
            float *x = make_x(M, sh->k);
            float *y = malloc((size_t)M * sh->n * sizeof *y), *r = malloc((size_t)M * sh->n * sizeof *r);
            ogk_error e;
            kern_ref_rows(&T.t, x, M, r, mode, 0, sh->n);
            for (size_t i = 0; i < (size_t)M * sh->n; i++)
                y[i] = NAN;
            if (kern_matmul_isa(isa, pool, &T.t, x, M, y, mode, &e) < 0) {
                snprintf(why, whylen, "%.500s", e.msg);
                ok = 0;
            }
            uint32_t kp = T.t.k_blocks * sh->block;
            int8_t *q = malloc(kp);
            float *d = malloc(T.t.k_blocks * sizeof *d);
            int32_t *qs = malloc(T.t.k_blocks * sizeof *qs);
            for (int m = 0; m < M && ok; m++) {
                kern_quant_row_i8(x + (size_t)m * sh->k, sh->k, sh->block, q, d, qs);
                for (uint32_t n = 0; n < sh->n && ok; n++) {
                    double want = r[(size_t)m * sh->n + n], got = y[(size_t)m * sh->n + n];
                    double tol = bound(&T.t, x + (size_t)m * sh->k, n, mode, q, d, qs);
                    if (!(fabs(got - want) <= tol)) {
                        snprintf(why, whylen, "N=%u K=%u B=%u M=%d m=%d n=%u: got %.9g want %.9g (|d| %.3g > %.3g)",
                                 sh->n, sh->k, sh->block, M, m, n, got, want, fabs(got - want), tol);
                        ok = 0;
                    }
                }
            }
            free(x), free(y), free(r), free(q), free(d), free(qs);
        }
        drop(&T);
    }
    return ok;
}

static void measure_i8_error(void)
{
    /* the int8 mode against the exact product, on a realistic shape (896 inputs, block 32 / 128) */
    for (int b = 0; b < 2; b++) {
        tensor T;
        uint32_t N = 256, K = 896, B = b ? 128 : 32;
        make(&T, OGK_B8, N, K, B, b ? OGK_F16 : OGK_F32, b);
        int M = 4;
        float *x = malloc((size_t)M * K * sizeof *x), *yf = malloc((size_t)M * N * 4), *yi = malloc((size_t)M * N * 4);
        for (size_t i = 0; i < (size_t)M * K; i++) /* roughly gaussian activations */
            x[i] = frand() + frand() + frand();
        kern_ref_rows(&T.t, x, M, yf, KERN_F32, 0, N);
        kern_ref_rows(&T.t, x, M, yi, KERN_I8, 0, N);
        double num = 0, den = 0, mx = 0, ymax = 0;
        for (size_t i = 0; i < (size_t)M * N; i++) {
            num += (yi[i] - yf[i]) * (double)(yi[i] - yf[i]);
            den += (double)yf[i] * yf[i];
            mx = fmax(mx, fabs(yi[i] - yf[i]));
            ymax = fmax(ymax, fabs(yf[i]));
        }
        printf("# i8 vs exact, N=%u K=%u block %u: relative RMS error %.2e, max |err| / max |y| %.2e\n", N, K, B,
               sqrt(num / den), mx / ymax);
        i8_err_max = fmax(i8_err_max, mx / ymax);
        i8_err_rms_num += num, i8_err_rms_den += den;
        free(x), free(yf), free(yi);
        drop(&T);
    }
}

/* a row this CPU cannot run: skipped, by name */
static void skip_row(int isa)
{
    printf("ok %d - # skip row %s: not supported on this CPU\n", ++tap_n, kern_isa_row(isa)->name);
}

static void count_fn(void *arg, size_t b, size_t e, int worker)
{
    int *hits = arg;
    (void)worker;
    for (size_t i = b; i < e; i++)
        __atomic_add_fetch(&hits[i], 1, __ATOMIC_RELAXED);
}

typedef struct {
    int *hits;
    size_t n, grain, align;
    int bad; /* a range that does not start at a multiple of align, is longer than grain or ends between */
} aligned_arg;

static void aligned_fn(void *arg, size_t b, size_t e, int worker)
{
    aligned_arg *a = arg;
    (void)worker;
    if (b % a->align || e - b > a->grain || (e % a->align && e != a->n) || e <= b)
        __atomic_store_n(&a->bad, 1, __ATOMIC_RELAXED);
    for (size_t i = b; i < e; i++)
        __atomic_add_fetch(&a->hits[i], 1, __ATOMIC_RELAXED);
}

typedef struct {
    int hits[400];
    int by_caller;
} slow_arg;

static void slow_fn(void *arg, size_t b, size_t e, int worker)
{
    slow_arg *a = arg;
    if (worker != 0) {
        struct timespec ts = {0, 2000000}; /* a descheduled worker: 2 ms per range */
        nanosleep(&ts, NULL);
    }
    for (size_t i = b; i < e; i++) {
        __atomic_add_fetch(&a->hits[i], 1, __ATOMIC_RELAXED);
        if (worker == 0)
            __atomic_add_fetch(&a->by_caller, 1, __ATOMIC_RELAXED);
    }
}


/* ---- q8 (8-bit, source order): a reference of its own, in double from the codes as MatMulNBits defines them ---- */
typedef struct {
    ogk_qtensor t;
    uint8_t *codes, *zeros;
    void *scales;
} tensor8;

static void make8(tensor8 *T, uint32_t n, uint32_t k, uint32_t block, int sdt, int zp)
{
    uint32_t kb = (k + block - 1) / block;
    size_t ss = ogk_dtype_size(sdt);
    T->codes = malloc((size_t)n * kb * block);
    T->scales = malloc((size_t)n * kb * ss);
    T->zeros = malloc((size_t)n * kb);
    for (size_t i = 0; i < (size_t)n * kb * block; i++)
        T->codes[i] = (uint8_t)rnd();
    for (size_t i = 0; i < (size_t)n * kb; i++) {
        float s = (0.0005f + 0.01f * fabsf(frand())) * (rnd() & 1 ? -1.0f : 1.0f);
        if (sdt == OGK_F32)
            memcpy((uint8_t *)T->scales + i * 4, &s, 4);
        else {
            uint16_t h = sdt == OGK_F16 ? ogk_f32_to_f16(s) : ogk_f32_to_bf16(s);
            memcpy((uint8_t *)T->scales + i * 2, &h, 2);
        }
        T->zeros[i] = (uint8_t)rnd();
    }
    T->t = (ogk_qtensor){.name = "test8", .dtype = OGK_Q8, .layout = OGK_PLAIN, .n = n, .k = k, .block = block,
                         .k_blocks = kb, .scale_dtype = sdt, .has_zp = zp, .codes = T->codes, .scales = T->scales,
                         .zeros = zp ? T->zeros : NULL};
}

static double scale8(const tensor8 *T, size_t i)
{
    if (T->t.scale_dtype == OGK_F32) {
        float f;
        memcpy(&f, (const uint8_t *)T->scales + i * 4, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, (const uint8_t *)T->scales + i * 2, 2);
    return T->t.scale_dtype == OGK_F16 ? ogk_f16_to_f32(h) : ogk_bf16_to_f32(h);
}

/* want (double) and the tolerance for output (row x, column n): f32 the product with W = (code - zp) * scale;
 * i8 the same with x's int8 quantisation (kern_quant_row_i8, tested above against its definition); the
 * tolerance is Higham's bound over the magnitudes |scale*d|*(code + zp)*|q| (the paths scale before the zero
 * point's term), with as many terms as the widest sum a path may run (kb + kp / 32 + 24), doubled */
static void ref8(const tensor8 *T, const float *x, uint32_t n, int mode, double *want, double *tol)
{
    uint32_t K = T->t.k, B = T->t.block, kb = T->t.k_blocks;
    const uint8_t *c = T->codes + (size_t)n * kb * B;
    int8_t *q = malloc((size_t)kb * B);
    float *d = malloc(kb * sizeof *d);
    int32_t *qs = malloc(kb * sizeof *qs);
    kern_quant_row_i8(x, K, B, q, d, qs);
    double y = 0, S = 0;
    for (uint32_t g = 0; g < kb; g++) {
        double sc = scale8(T, (size_t)n * kb + g);
        int zp = T->t.has_zp ? T->zeros[(size_t)n * kb + g] : 128;
        for (uint32_t k = g * B; k < (g + 1) * B && k < K; k++) {
            if (mode == KERN_F32) {
                y += (double)(float)((float)(c[k] - zp) * (float)sc) * x[k];
                S += fabs(sc) * (c[k] + zp) * fabs(x[k]);
            } else {
                y += sc * d[g] * (double)((c[k] - zp) * q[k]);
                S += fabs(sc * d[g]) * (c[k] + zp) * abs(q[k]);
            }
        }
    }
    *want = y;
    *tol = 2.0 * (kb + (double)kb * B / 32 + 24 + (mode == KERN_F32 ? B : 0)) * ldexp(1.0, -24) * S + 1e-30;
    free(q), free(d), free(qs);
}

/* skew: small codes (0..15), zero points 0 and positive activations, the groups asymmetric quantisation gives
 * weights of one sign: Σ code·q is small against 128·Σq, so a path that sums (code − 128)·q and corrects
 * afterwards in fp32 would lose it (the bound is of the magnitudes code·|q| and zp·|q|) */
static int check_q8(int isa, kern_pool *pool, int mode, int sdt, int zp, int skew, char *why, size_t whylen)
{
    static const shape sh8[] = {{37, 32, 32},  {50, 200, 32}, {17, 128, 128}, {33, 300, 128}, {100, 72, 16},
                                {1, 64, 64},   {9, 1000, 256}, {20, 520, 64}, {5, 48, 16},
                                {3, 8960, 32}, {4, 4200, 16}}; /* the last two: more groups than one pass keeps */
    static const int M8[] = {1, 3, 17};
    int ok = 1;
    for (size_t si = 0; si < sizeof sh8 / sizeof *sh8 && ok; si++) {
        tensor8 T;
        make8(&T, sh8[si].n, sh8[si].k, sh8[si].block, sdt, zp);
        uint32_t kb8 = T.t.k_blocks;
        for (size_t i = 0; skew && i < (size_t)sh8[si].n * kb8 * sh8[si].block; i++)
            T.codes[i] &= 15;
        for (size_t i = 0; skew && i < (size_t)sh8[si].n * kb8; i++)
            T.zeros[i] = 0;
        for (size_t mi = 0; mi < sizeof M8 / sizeof *M8 && ok; mi++) {
            int M = M8[mi];
            uint32_t N = sh8[si].n, K = sh8[si].k;
            float *x = make_x(M, K), *y = malloc((size_t)M * N * sizeof *y);
            for (size_t i = 0; skew && i < (size_t)M * K; i++)
                x[i] = fabsf(x[i]);
            for (size_t i = 0; i < (size_t)M * N; i++)
                y[i] = NAN;
            ogk_error e;
            if (kern_matmul_isa(isa, pool, &T.t, x, M, y, mode, &e) < 0) {
                snprintf(why, whylen, "%.500s", e.msg);
                ok = 0;
            }
            for (int m = 0; m < M && ok; m++)
                for (uint32_t n = 0; n < N && ok; n++) {
                    double want, tol, got = y[(size_t)m * N + n];
                    ref8(&T, x + (size_t)m * K, n, mode, &want, &tol);
                    if (!(fabs(got - want) <= tol)) {
                        snprintf(why, whylen, "N=%u K=%u B=%u M=%d m=%d n=%u: got %.9g want %.9g (|d| %.3g > %.3g)", N, K,
                                 sh8[si].block, M, m, n, got, want, fabs(got - want), tol);
                        ok = 0;
                    }
                }
            free(x), free(y);
        }
        free(T.codes), free(T.scales), free(T.zeros);
    }
    return ok;
}

int main(void)
{
    ogk_prog_set("kern_paths");
    kern_pool *pool = kern_pool_new(3);
    TAP_OK(pool && kern_pool_threads(pool) == 3, "pool of 3 threads");

    /* pool: every index exactly once, for several sizes and grains */
    int pool_ok = 1;
    size_t sizes[] = {0, 1, 2, 5, 97, 1000};
    for (size_t s = 0; s < 6; s++)
        for (size_t grain = 0; grain < 4; grain++)
            for (int rep = 0; rep < 20; rep++) {
                int *hits = calloc(sizes[s] + 1, sizeof *hits);
                kern_pool_for(pool, sizes[s], grain, count_fn, hits);
                for (size_t i = 0; i < sizes[s]; i++)
                    pool_ok &= hits[i] == 1;
                free(hits);
            }
    TAP_OK(pool_ok, "kern_pool_for covers every index exactly once");
    /* aligned: ranges at multiples of align, at most grain (rounded up to align) long, every index once */
    int al_ok = 1;
    size_t al_sizes[] = {1, 3, 56, 57, 72, 304, 1000}, grains[] = {0, 1, 6, 8, 38}, aligns[] = {1, 2, 4};
    for (size_t s = 0; s < 7; s++)
        for (size_t g = 0; g < 5; g++)
            for (size_t l = 0; l < 3; l++)
                for (int rep = 0; rep < 5; rep++) {
                    size_t al = aligns[l], gr = grains[g] < al ? al : (grains[g] + al - 1) / al * al;
                    aligned_arg a = {calloc(al_sizes[s] + 1, sizeof(int)), al_sizes[s], gr, al, 0};
                    kern_pool_for_aligned(pool, al_sizes[s], grains[g], al, aligned_fn, &a);
                    for (size_t i = 0; i < al_sizes[s]; i++)
                        al_ok &= a.hits[i] == 1;
                    al_ok &= !a.bad;
                    free(a.hits);
                }
    TAP_OK(al_ok, "kern_pool_for_aligned: every index once, ranges aligned and at most grain long");
    /* prefetch regions after the ranges: addresses only, so any (NULL, unmapped, huge lengths: cut at
     * KERN_PREFETCH_MAX) leave the launch correct, with the pool, without it and inline */
    {
        int pf_ok = 1;
        static char buf[1 << 16];
        kern_prefetch after[3] = {{{buf, NULL}, {sizeof buf, 100}},
                                  {{(const void *)(uintptr_t)64, buf + 4096}, {(size_t)-1, 1 << 12}},
                                  {{(const void *)(uintptr_t)-4096, NULL}, {1 << 30, 0}}};
        for (int rep = 0; rep < 20; rep++) {
            int hits[97] = {0}, hits1[4] = {0};
            kern_pool_for_prefetch(pool, 97, 4, 2, count_fn, hits, after);
            kern_pool_for_prefetch(NULL, 4, 1, 1, count_fn, hits1, after);
            kern_pool_for_prefetch(pool, 4, 8, 1, count_fn, hits1, after); /* grain >= n: inline */
            for (int i = 0; i < 97; i++)
                pf_ok &= hits[i] == 1;
            for (int i = 0; i < 4; i++)
                pf_ok &= hits1[i] == 2;
        }
        TAP_OK(pf_ok, "kern_pool_for_prefetch: every index once, whatever the regions to prefetch after");
    }
    {
        slow_arg a = {{0}, 0};
        kern_pool_for(pool, 400, 10, slow_fn, &a);
        int once = 1;
        for (int i = 0; i < 400; i++)
            once &= a.hits[i] == 1;
        /* the workers' shares are 2/3 of the items; a slow worker does at most a few ranges */
        TAP_OK(once && a.by_caller > 200, "slow workers: their shares are taken over (caller did %d of 400)",
               a.by_caller);
    }

    /* kern_matmul2 (the MLP's gate and up in one launch) gives the bits of two kern_matmul calls: pairs that fuse
     * (b8, the same K and groups; odd and even row-block counts, so that ranges straddle the two tensors), pairs
     * that do not (rm; different groups), on every M path; tensors of different K are refused by name */
    {
        int pair_ok = 1;
        char pwhy[600] = "";
        struct {
            int layout;
            uint32_t n1, n2, k, b1, b2;
        } pairs[] = {{OGK_B8, 40, 56, 96, 32, 32},      {OGK_B8, 1152, 608, 896, 32, 32}, {OGK_B8, 16, 200, 256, 128, 128},
                     {OGK_RM, 64, 40, 96, 32, 32},      {OGK_B8, 48, 48, 128, 32, 128}};
        int pms[] = {1, 2, 5, 8, 17, 40};
        for (size_t pi = 0; pi < sizeof pairs / sizeof *pairs && pair_ok; pi++)
            for (int mode = KERN_F32; mode <= KERN_I8 && pair_ok; mode++)
                for (size_t mi = 0; mi < sizeof pms / sizeof *pms && pair_ok; mi++) {
                    int M = pms[mi];
                    tensor A, B;
                    make(&A, pairs[pi].layout, pairs[pi].n1, pairs[pi].k, pairs[pi].b1, OGK_F32, 0);
                    make(&B, pairs[pi].layout, pairs[pi].n2, pairs[pi].k, pairs[pi].b2, OGK_F32, 0);
                    float *x = make_x(M, pairs[pi].k);
                    size_t s1 = (size_t)M * pairs[pi].n1, s2 = (size_t)M * pairs[pi].n2;
                    float *y1 = malloc(s1 * 4), *y2 = malloc(s2 * 4), *r1 = malloc(s1 * 4), *r2 = malloc(s2 * 4);
                    ogk_error e;
                    int rc = kern_matmul(pool, &A.t, x, M, r1, mode, &e) || kern_matmul(pool, &B.t, x, M, r2, mode, &e) ||
                             kern_matmul2(pool, &A.t, y1, &B.t, y2, x, M, mode, &e);
                    if (rc || memcmp(y1, r1, s1 * 4) || memcmp(y2, r2, s2 * 4)) {
                        snprintf(pwhy, sizeof pwhy, "(pair %zu mode %d M=%d: %.500s)", pi, mode, M,
                                 rc ? e.msg : "bits differ from two kern_matmul calls");
                        pair_ok = 0;
                    }
                    free(x), free(y1), free(y2), free(r1), free(r2);
                    drop(&A), drop(&B);
                }
        tensor A, B;
        make(&A, OGK_B8, 32, 96, 32, OGK_F32, 0);
        make(&B, OGK_B8, 32, 128, 32, OGK_F32, 0);
        float *x = make_x(1, 128), y1[32], y2[32];
        ogk_error e = {0};
        pair_ok &= kern_matmul2(pool, &A.t, y1, &B.t, y2, x, 1, KERN_I8, &e) < 0 && strstr(e.msg, "different K");
        free(x), drop(&A), drop(&B);
        TAP_OK(pair_ok, "kern_matmul2: the bits of two kern_matmul calls, fused or not; different K refused %s", pwhy);
    }

    /* kern_matmul_next: a hint the next launch takes (cleared after it, whatever its path), bits unchanged;
     * one-row launches above and below KERN_INLINE_BYTES, a pair as the next tensors */
    {
        int next_ok = 1;
        tensor A, B, C;
        make(&A, OGK_B8, 1152, 896, 32, OGK_F32, 0); /* > KERN_INLINE_BYTES: a pool launch */
        make(&B, OGK_B8, 64, 896, 32, OGK_F32, 0);   /* inline */
        make(&C, OGK_RM, 64, 896, 32, OGK_F32, 0);
        float *x = make_x(2, 896), *y = malloc(1152 * 2 * 4), *r = malloc(1152 * 2 * 4);
        const ogk_qtensor *ts[] = {&A.t, &B.t, &C.t};
        ogk_error e;
        for (int i = 0; i < 3; i++)
            for (int M = 1; M <= 2; M++)
                for (int mode = KERN_F32; mode <= KERN_I8; mode++) {
                    const ogk_qtensor *t = ts[i];
                    next_ok &= !kern_matmul(pool, t, x, M, r, mode, &e);
                    kern_matmul_next(pool, ts[(i + 1) % 3], ts[(i + 2) % 3]);
                    next_ok &= !kern_matmul(pool, t, x, M, y, mode, &e);
                    next_ok &= !memcmp(y, r, (size_t)M * t->n * 4);
                    const void *a, *b;
                    kern_pool_take_next(pool, &a, &b);
                    next_ok &= !a && !b;
                }
        free(x), free(y), free(r), drop(&A), drop(&B), drop(&C);
        TAP_OK(next_ok, "kern_matmul_next: taken by the next launch, the bits unchanged");
    }

    /* the int8 quantisation: properties, and every row's == scalar bit for bit */
    int qprop = 1, qsame[KERN_ISA_COUNT];
    for (int i = 0; i < KERN_ISA_COUNT; i++)
        qsame[i] = 1;
    for (int rep = 0; rep < 50; rep++) {
        /* every third K of block 32 up to 1700 (the avx512 row quantises 16 such groups at a time) */
        uint32_t K = 1 + rnd() % (rep % 3 ? 700 : 1700), B = rep % 3 ? 16u << (rnd() % 4) : 32, kb = (K + B - 1) / B;
        float *x = malloc(K * sizeof *x);
        for (uint32_t i = 0; i < K; i++)
            x[i] = frand() * (rep % 5 ? 3.0f : 1e-30f);
        if (rep % 7 == 0)
            memset(x, 0, K * sizeof *x);
        if (rep % 4 == 1) /* one all-zero group among others */
            for (uint32_t i = B; i < 2 * B && i < K; i++)
                x[i] = 0;
        int8_t *q1 = malloc((size_t)kb * B), *q2 = malloc((size_t)kb * B);
        float *d1 = malloc(kb * 4), *d2 = malloc(kb * 4);
        int32_t *s1 = malloc(kb * 4), *s2 = malloc(kb * 4);
        kern_quant_row_i8(x, K, B, q1, d1, s1);
        for (uint32_t g = 0; g < kb; g++) {
            int32_t sum = 0, qmax = 0;
            for (uint32_t c = g * B; c < (g + 1) * B; c++) {
                sum += q1[c];
                qmax = abs(q1[c]) > qmax ? abs(q1[c]) : qmax;
                if (c >= K)
                    qprop &= q1[c] == 0;
                else
                    qprop &= fabs(q1[c] * (double)d1[g] - x[c]) <= 0.5001 * d1[g] + 1e-45;
            }
            qprop &= sum == s1[g] && (d1[g] == 0 ? qmax == 0 : qmax == 127);
        }
        for (int i = 0; i < KERN_ISA_COUNT; i++)
            if (kern_isa_supported(i)) {
                kern_isa_row(i)->quant_i8(x, 1, K, B, q2, d2, s2);
                qsame[i] &= !memcmp(q1, q2, (size_t)kb * B) && !memcmp(d1, d2, kb * 4) && !memcmp(s1, s2, kb * 4);
            }
        free(x), free(q1), free(q2), free(d1), free(d2), free(s1), free(s2);
    }
    TAP_OK(qprop, "int8 quantisation: |q*d - x| <= d/2, max |q| = 127, padding 0, sums match");
    for (int i = 0; i < KERN_ISA_COUNT; i++)
        if (kern_isa_supported(i))
            TAP_OK(qsame[i], "row %s: int8 quantisation is bit-identical to the scalar one", kern_isa_row(i)->name);
        else
            skip_row(i);

    /* every row's rm band shuffle gives the scalar one's bytes; its read loop XORs every word */
    {
        tensor T;
        make(&T, OGK_RM, 70, 520, 64, OGK_BF16, 1);
        size_t cb = 2 * T.t.k_blocks * 64 * 8, sb = 2 * T.t.k_blocks * 16 * 2, zb = 2 * T.t.k_blocks * 16;
        uint8_t *want = calloc(1, cb + sb + zb), *got = calloc(1, cb + sb + zb);
        size_t rn = 1 << 16;
        uint8_t *buf = aligned_alloc(64, rn);
        uint64_t x = 0;
        for (size_t i = 0; i < rn; i++)
            buf[i] = (uint8_t)rnd();
        for (size_t i = 0; i < rn; i += 8) {
            uint64_t w;
            memcpy(&w, buf + i, 8);
            x ^= w;
        }
        for (int i = 0; i < KERN_ISA_COUNT; i++) {
            if (!kern_isa_supported(i)) {
                skip_row(i);
                continue;
            }
            const kern_isa *row = kern_isa_row(i);
            int same = 1;
            for (uint32_t band = 0; band < 3; band++) {
                memset(want, 0, cb + sb + zb), memset(got, 0, cb + sb + zb);
                kern_isa_row(KERN_ISA_REF)->rm_band(&T.t, band, want, want + cb, want + cb + sb);
                row->rm_band(&T.t, band, got, got + cb, got + cb + sb);
                same &= !memcmp(want, got, cb + sb + zb);
            }
            TAP_OK(same && row->read(buf, rn) == x, "row %s: rm band shuffle == scalar, read loop XORs every word",
                   row->name);
        }
        free(want), free(got), free(buf);
        drop(&T);
    }

    static const char *mode_name[] = {"f32", "i8"};
    int sdts[] = {OGK_F32, OGK_F16, OGK_BF16};
    for (int isa = 0; isa < KERN_ISA_COUNT; isa++) {
        if (!kern_isa_supported(isa)) {
            skip_row(isa);
            continue;
        }
        for (int layout = OGK_RM; layout <= OGK_B8; layout++)
            for (int mode = KERN_F32; mode <= KERN_I8; mode++)
                for (int si = 0; si < 3; si++)
                    for (int zp = 0; zp < 2; zp++) {
                        char why[768] = "";
                        int ok = check_path(isa, (rnd() & 1) ? pool : NULL, layout, mode, sdts[si], zp, why,
                                            sizeof why);
                        TAP_OK(ok, "%s %s %s scales %s %s: within bound of the reference%s%s", kern_isa_row(isa)->name,
                               ogk_layout_name(layout), mode_name[mode], ogk_dtype_name(sdts[si]),
                               zp ? "asym" : "sym", ok ? "" : ": ", why);
                    }
    }


    /* q8: every row within the bound of an independent double reference; 16-bit activations refused by name;
     * a row alone has the bits it has in a launch of several (the server's batching relies on it) */
    for (int isa = 0; isa < KERN_ISA_COUNT; isa++) {
        if (!kern_isa_supported(isa)) {
            skip_row(isa);
            continue;
        }
        for (int mode = KERN_F32; mode <= KERN_I8; mode++)
            for (int si = 0; si < 3; si++)
                for (int zp = 0; zp < 3; zp++) { /* 2: zero points 0, small codes, positive activations */
                    char why[768] = "";
                    int ok = check_q8(isa, (rnd() & 1) ? pool : NULL, mode, sdts[si], zp != 0, zp == 2, why, sizeof why);
                    TAP_OK(ok, "%s q8 %s scales %s %s: within bound of the reference%s%s", kern_isa_row(isa)->name,
                           mode_name[mode], ogk_dtype_name(sdts[si]), zp == 2 ? "zp 0, one-signed" : zp ? "asym" : "sym",
                           ok ? "" : ": ", why);
                }
        tensor8 T;
        make8(&T, 40, 200, 32, OGK_F16, 1);
        float *x = make_x(5, 200), y[5 * 40], y1[40];
        ogk_error e = {0};
        int alone = 1;
        for (int mode = KERN_F32; mode <= KERN_I8; mode++) {
            alone &= kern_matmul_isa(isa, pool, &T.t, x, 5, y, mode, &e) == 0;
            for (int m = 0; m < 5; m++)
                alone &= kern_matmul_isa(isa, NULL, &T.t, x + (size_t)m * 200, 1, y1, mode, &e) == 0 &&
                         !memcmp(y1, y + (size_t)m * 40, sizeof y1);
        }
        int refused = kern_matmul_isa(isa, pool, &T.t, x, 5, y, KERN_I16, &e) < 0 && strstr(e.msg, "q8");
        TAP_OK(alone && refused, "%s q8: each row's bits alone as in a launch of 5; 16-bit activations refused (%s)",
               kern_isa_row(isa)->name, e.msg);
        free(x), free(T.codes), free(T.scales), free(T.zeros);
    }

    /* i8: a row alone (M = 1, the GEMV) has the bits it has inside launches of several rows (tiles, and
     * on the amx row the AMX tiles from 16 rows): exact integer group sums, the same fp32 steps. The
     * server's continuous batching and prefix cache rely on it. */
    for (int isa = KERN_ISA_AVX2; isa < KERN_ISA_COUNT; isa++) {
        if (!kern_isa_supported(isa)) {
            skip_row(isa);
            continue;
        }
        static const int bm[] = {2, 8, 17, 40, 130};
        int same = 1;
        char why[200] = "";
        for (int layout = OGK_RM; layout <= OGK_B8 && same; layout++)
            for (int zp = 0; zp < 2 && same; zp++) {
                tensor T;
                make(&T, layout, 50, 200, 32, zp ? OGK_BF16 : OGK_F32, zp);
                for (size_t mi = 0; mi < sizeof bm / sizeof *bm && same; mi++) {
                    int M = bm[mi];
                    float *x = make_x(M, 200), *ym = malloc((size_t)M * 50 * 4), *y1 = malloc(50 * 4);
                    ogk_error e;
                    kern_matmul_isa(isa, pool, &T.t, x, M, ym, KERN_I8, &e);
                    for (int r = 0; r < M && same; r++) {
                        kern_matmul_isa(isa, pool, &T.t, x + (size_t)r * 200, 1, y1, KERN_I8, &e);
                        if (memcmp(y1, ym + (size_t)r * 50, 50 * 4)) {
                            same = 0;
                            snprintf(why, sizeof why, ": %s %s M=%d row %d differs", ogk_layout_name(layout),
                                     zp ? "asym" : "sym", M, r);
                        }
                    }
                    free(x), free(ym), free(y1);
                }
                drop(&T);
            }
        TAP_OK(same, "%s i8: each row alone has the bits it has in a launch of 2-130 rows%s", kern_isa_row(isa)->name,
               why);
    }

    /* the amx row's int8 tiles give the avx512 row's results bit for bit (the same exact integer group
     * sums, scaled with the same fused multiply-add in the same group order), on narrow launches (up to
     * AMX_PF_M = 48 rows: small unpacked batches, the next one prefetched) and wide ones: one whole tile
     * (16, 32, 48, 64), whole tiles and a short rest on the avx512 tiles (37, 130), a partial last tile
     * (31, 43), every block size, odd N and K */
    if (kern_isa_supported(KERN_ISA_AMX)) {
        static const shape bs[] = {{300, 896, 32}, {37, 200, 16}, {50, 520, 64}, {33, 300, 128}, {70, 1024, 256},
                                   {20, 4100, 4096}};
        static const int bm[] = {16, 31, 32, 37, 43, 48, 64, 130};
        int same = 1;
        char why[256] = "";
        for (size_t si = 0; si < sizeof bs / sizeof *bs && same; si++)
            for (int zp = 0; zp < 2 && same; zp++)
                for (size_t mi = 0; mi < sizeof bm / sizeof *bm && same; mi++) {
                    tensor T;
                    make(&T, OGK_B8, bs[si].n, bs[si].k, bs[si].block, zp ? OGK_F16 : OGK_F32, zp);
                    int M = bm[mi];
                    float *x = make_x(M, bs[si].k), *ya = malloc((size_t)M * bs[si].n * 4),
                          *yb = malloc((size_t)M * bs[si].n * 4);
                    ogk_error e;
                    int rc = kern_matmul_isa(KERN_ISA_AMX, pool, &T.t, x, M, ya, KERN_I8, &e) |
                             kern_matmul_isa(KERN_ISA_AVX512, pool, &T.t, x, M, yb, KERN_I8, &e);
                    if (rc || memcmp(ya, yb, (size_t)M * bs[si].n * 4)) {
                        same = 0;
                        snprintf(why, sizeof why, ": N=%u K=%u B=%u M=%d %s differs", bs[si].n, bs[si].k,
                                 bs[si].block, M, zp ? "asym" : "sym");
                    }
                    free(x), free(ya), free(yb);
                    drop(&T);
                }
        TAP_OK(same, "amx i8 tiles (and their avx512 rest) are bit-identical to the avx512 row's (M 16..130, narrow and wide, blocks 16..4096)%s", why);
    } else {
        printf("ok %d - # skip row amx: not supported on this CPU (no AMX-INT8, or no tile state granted)\n", ++tap_n);
    }

    /* thread count does not change results (each output is computed by one thread, same order) */
    {
        tensor T;
        make(&T, OGK_B8, 300, 448, 32, OGK_F16, 1);
        float *x = make_x(9, 448), *y1 = malloc(9 * 300 * 4), *y2 = malloc(9 * 300 * 4);
        ogk_error e;
        int same = 1;
        for (int mode = 0; mode < 2; mode++) {
            kern_matmul(NULL, &T.t, x, 9, y1, mode, &e);
            kern_matmul(pool, &T.t, x, 9, y2, mode, &e);
            same &= !memcmp(y1, y2, 9 * 300 * 4);
        }
        TAP_OK(same, "1 thread and 3 threads give identical results (row %s)", kern_isa_current()->name);
        free(x), free(y1), free(y2);
        drop(&T);
    }

    /* kern_matmul_cols: the listed columns (and their blocks) get kern_matmul's bits on every row this CPU
     * runs, b8 and rm, int8 and 16-bit; columns in no listed column's 32-column span are left alone */
    {
        int before = kern_isa_find(kern_isa_current()->name), same = 1, untouched = 1, ran = 0;
        const uint32_t cols[] = {3, 17, 18, 150, 299};
        for (int isa = 0; isa < KERN_ISA_COUNT; isa++) {
            if (!kern_isa_supported(isa) || kern_isa_set(isa))
                continue;
            for (int layout = OGK_RM; layout <= OGK_B8; layout++) {
                tensor T;
                make(&T, layout, 300, 448, 32, OGK_F16, layout == OGK_RM);
                float *x = make_x(9, 448), *yf = malloc(9 * 300 * 4), *yc = malloc(9 * 300 * 4);
                for (int mode = KERN_I8; mode <= KERN_I16; mode++) {
                    ogk_error e;
                    memset(yc, 0xA5, 9 * 300 * 4);
                    if (kern_matmul(pool, &T.t, x, 9, yf, mode, &e) ||
                        kern_matmul_cols(pool, &T.t, x, 9, yc, mode, cols, 5, &e)) {
                        same = 0;
                        continue;
                    }
                    ran++;
                    for (uint32_t n = 0; n < 300; n++) {
                        int listed = 0, near = 0;
                        for (int c = 0; c < 5; c++)
                            listed |= cols[c] / 16 == n / 16, near |= cols[c] / 32 == n / 32;
                        for (int m = 0; m < 9; m++) {
                            float *a = yc + m * 300 + n;
                            if (listed)
                                same &= !memcmp(a, yf + m * 300 + n, 4);
                            else if (!near)
                                untouched &= ((const uint8_t *)a)[0] == 0xA5 && ((const uint8_t *)a)[3] == 0xA5;
                        }
                    }
                }
                free(x), free(yf), free(yc);
                drop(&T);
            }
        }
        kern_isa_set(before);
        TAP_OK(ran && same && untouched,
               "kern_matmul_cols: listed columns' blocks bit-identical to kern_matmul, the rest untouched (%d launches)",
               ran);
        tensor T;
        make(&T, OGK_B8, 40, 64, 32, OGK_F32, 0);
        float x[64] = {0}, y[40];
        ogk_error e1, e2;
        const uint32_t down[] = {5, 4}, out[] = {40};
        TAP_OK(kern_matmul_cols(pool, &T.t, x, 1, y, KERN_I16, down, 2, &e1) < 0 && strstr(e1.msg, "ascending") &&
                   kern_matmul_cols(pool, &T.t, x, 1, y, KERN_I16, out, 1, &e2) < 0,
               "kern_matmul_cols refuses a descending list and a column past N: %s", e1.msg);
        drop(&T);
    }

    /* the argmax head's scans: every row's vmax and mark_ge give the ref row's answer (tails, NaN, -inf) */
    {
        int same = 1;
        const size_t sizes[] = {1, 15, 16, 17, 63, 64, 65, 1000, 4099};
        float *v = malloc(4099 * sizeof *v);
        unsigned char mref[260], mrow[260], init[260];
        for (int rep = 0; rep < 40; rep++) {
            size_t n = sizes[rep % 9];
            for (size_t i = 0; i < n; i++)
                v[i] = frand() * 100.0f;
            if (rep % 3 == 1)
                v[rnd() % n] = NAN;
            if (rep % 5 == 2)
                v[rnd() % n] = -INFINITY;
            if (rep == 39)
                for (size_t i = 0; i < n; i++)
                    v[i] = NAN;
            float thr = frand() * 100.0f, want = kern_isa_row(KERN_ISA_REF)->vmax(v, n);
            for (int i = 0; i < 260; i++)
                init[i] = rnd() % 7 == 0;
            memcpy(mref, init, sizeof mref);
            kern_isa_row(KERN_ISA_REF)->mark_ge(v, n, thr, mref);
            for (int isa = 1; isa < KERN_ISA_COUNT; isa++) {
                if (!kern_isa_supported(isa))
                    continue;
                float got = kern_isa_row(isa)->vmax(v, n);
                memcpy(mrow, init, sizeof mrow);
                kern_isa_row(isa)->mark_ge(v, n, thr, mrow);
                same &= !memcmp(&got, &want, 4) && !memcmp(mrow, mref, sizeof mref);
            }
            same &= rep != 39 || want == -INFINITY;
        }
        free(v);
        TAP_OK(same, "vmax and mark_ge: every row gives the ref row's maximum and marks (tails, NaN, -inf)");
    }

    /* the softmax denominator: every row's expsum within 1e-5 of the ref row's (double, libm exp) */
    {
        double worst = 0;
        const size_t sizes[] = {1, 7, 8, 15, 16, 17, 63, 64, 65, 1000, 4099, 151936};
        float *v = malloc(151936 * sizeof *v);
        for (int rep = 0; rep < 24; rep++) {
            size_t n = sizes[rep % 12];
            float spread = rep < 12 ? 20.0f : 200.0f; /* the wide one: many terms below e^-80 */
            for (size_t i = 0; i < n; i++)
                v[i] = frand() * spread;
            if (rep % 4 == 1)
                v[rnd() % n] = -INFINITY;
            float mx = kern_isa_row(KERN_ISA_REF)->vmax(v, n);
            double want = kern_isa_row(KERN_ISA_REF)->expsum(v, n, mx);
            for (int isa = 1; isa < KERN_ISA_COUNT; isa++) {
                if (!kern_isa_supported(isa))
                    continue;
                double got = kern_isa_row(isa)->expsum(v, n, mx), d = fabs(got - want) / want;
                worst = d > worst || d != d ? (d != d ? INFINITY : d) : worst;
            }
        }
        free(v);
        TAP_OK(worst < 1e-5, "expsum: every row within 1e-5 of the ref row's sum (largest relative difference %.3g)", worst);
    }

    /* an unquantised weight (a MatMul's fp32 B [K, N], the model's unquantised lm_head): Y = X·W against a
     * double-precision sum, N not a multiple of the column block, and a row's bits the same alone or batched */
    {
        enum { K = 70, N = 200, M = 3 };
        float *w = malloc(sizeof(float) * K * N), x[M * K], y[M * N], y1[N];
        for (int i = 0; i < K * N; i++)
            w[i] = frand();
        for (int i = 0; i < M * K; i++)
            x[i] = frand();
        ogk_qtensor P = {.name = "plain", .role = "lm_head", .dtype = OGK_F32, .ndim = 2, .shape = {K, N}, .n = N,
                         .k = K, .data = w, .nbytes = sizeof(float) * K * N};
        ogk_error e;
        int rc = kern_matmul(pool, &P, x, M, y, KERN_F32, &e), rc1 = kern_matmul(pool, &P, x + K, 1, y1, KERN_F32, &e);
        double worst = 0;
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) {
                double want = 0, mag = 0;
                for (int k = 0; k < K; k++)
                    want += (double)x[m * K + k] * w[(size_t)k * N + n], mag += fabs((double)x[m * K + k] * w[(size_t)k * N + n]);
                double d = fabs(y[m * N + n] - want) / mag;
                worst = d > worst || d != d ? (d != d ? INFINITY : d) : worst;
            }
        TAP_OK(!rc && !rc1 && worst < 1e-6, "plain fp32 weight [%d, %d], %d rows: within 1e-6 of the double sum (worst %.3g)", K,
               N, M, worst);
        TAP_OK(!rc1 && !memcmp(y1, y + N, sizeof y1), "plain fp32 weight: a row alone has the bits it has among others");
        free(w);
    }

    /* refusals */
    {
        ogk_error e;
        float x[4] = {0}, y[4];
        ogk_qtensor bad = {.name = "w", .dtype = OGK_F32};
        TAP_OK(kern_matmul(pool, &bad, x, 1, y, KERN_F32, &e) < 0 && strstr(e.msg, "must be fp32 [K, N] with data"),
               "a plain tensor without its data or shape is refused: %s", e.msg);
        bad.dtype = OGK_F16;
        TAP_OK(kern_matmul(pool, &bad, x, 1, y, KERN_F32, &e) < 0 && strstr(e.msg, "not a quantised tensor"),
               "a plain fp16 tensor is refused (the model widens one to fp32 first): %s", e.msg);
        tensor T;
        make(&T, OGK_B8, 16, 32, 32, OGK_F32, 0);
        T.t.k_blocks = 3;
        TAP_OK(kern_matmul(pool, &T.t, x, 1, y, KERN_F32, &e) < 0 && strstr(e.msg, "k_blocks"),
               "inconsistent k_blocks is refused: %s", e.msg);
        T.t.k_blocks = 1;
        TAP_OK(kern_matmul(pool, &T.t, x, 0, y, KERN_F32, &e) < 0, "M = 0 is refused: %s", e.msg);
        drop(&T);
    }

    /* the table's names, the modes */
    {
        int names = kern_isa_find("bogus") < 0 && kern_isa_row(KERN_ISA_COUNT) == NULL && kern_isa_supported(KERN_ISA_REF);
        for (int i = 0; i < KERN_ISA_COUNT; i++)
            names &= kern_isa_find(kern_isa_row(i)->name) == i;
        TAP_OK(names, "ISA table: every row found by its name, unknown names and ids refused, ref always supported");
        /* forcing a row (npu-gemm --kernel) switches every operation, the dequantiser included */
        int before = kern_isa_find(kern_isa_current()->name), forced = 1;
        for (int i = 0; i < KERN_ISA_COUNT; i++)
            if (kern_isa_supported(i)) {
                forced &= kern_isa_set(i) == 0 && kern_isa_current() == kern_isa_row(i) &&
                          kern_isa_current()->dequant == kern_isa_row(i)->dequant;
            }
        forced &= kern_isa_set(before) == 0 && kern_isa_set(KERN_ISA_COUNT) < 0;
        TAP_OK(forced, "kern_isa_set switches the whole row (matmul, dequant, attention, ...); an unknown id is refused");
        TAP_OK(kern_mode_parse("f32") == KERN_F32 && kern_mode_parse("i8") == KERN_I8 && kern_mode_parse("f16") < 0 &&
                   !strcmp(kern_mode_name(KERN_I8), "i8") && !strcmp(kern_mode_name(KERN_F32), "f32"),
               "modes: f32 and i8 parse and print, anything else is refused");
    }

    measure_i8_error();
    TAP_OK(i8_err_max < 0.05 && sqrt(i8_err_rms_num / i8_err_rms_den) < 0.02,
           "i8 mode error vs exact: relative RMS %.2e (< 2e-2), max/max|y| %.2e (< 5e-2)",
           sqrt(i8_err_rms_num / i8_err_rms_den), i8_err_max);
    kern_pool_free(pool);
    return TAP_DONE();
}
