/* lib/kern KERN_I16 (16-bit activations as two int8 planes): the quantisation is what kern.h says
 * (checked here from its definition: Q = 254·q1 + q2, both planes in [-127, 127], |x − d·Q| <= 0.51·d,
 * d = max|x| / 32258) and bit-identical between the scalar and each row's version; the row's kernels
 * equal the scalar reference within the bound of kern.h (computed here from the codes, scales and Q:
 * (kb + 8)·2^-23·Σ_g |scale·d|·(Σ code·|Q| + zp·Σ|Q|)), over odd shapes, both layouts, f32/f16/bf16
 * scales, with and without zero points, M = 1, 2, 5, 16, 33; the error against the exact product
 * (fp32 activations, summed in double) is at most 1e-4 of max|y| and far below the int8 mode's.
 * The same for the avx2 row (vpmaddubsw). A row's outputs have the same bits alone (M = 1, the decode
 * classifier's GEMV) and inside launches of 2..33 rows (the tiles): the server's batching relies on it.
 * Each row is skipped by name on a CPU without it. */
#include "tap.h"
#include "kern/kern.h"
#include "q4nx/q4nx.h"
#include "util/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define KERN_TEST_SEED 0x2545F4914F6CDD1Dull
#include "kern_tensors.h"

/* the quantisation of one row from its definition; 1 when the planes, scales and sums are right */
static int quant_ok(const float *x, uint32_t K, uint32_t B, const int8_t *q1, const int8_t *q2, const float *d,
                    const int32_t *qs, char *why, size_t wl)
{
    uint32_t kb = (K + B - 1) / B;
    for (uint32_t g = 0; g < kb; g++) {
        double a = 0;
        for (uint32_t c = g * B; c < (g + 1) * B && c < K; c++)
            a = fmax(a, fabs(x[c]));
        if (fabs(d[g] - a / 32258.0) > 1e-6 * a / 32258.0) {
            snprintf(why, wl, "group %u: d %.9g, want max|x|/32258 = %.9g", g, d[g], a / 32258.0);
            return 0;
        }
        int64_t sum = 0;
        for (uint32_t c = g * B; c < (g + 1) * B; c++) {
            int Q = 254 * q1[c] + q2[c];
            sum += Q;
            double xv = c < K ? x[c] : 0.0;
            if (q1[c] == -128 || q2[c] == -128 || fabs(xv - d[g] * (double)Q) > d[g] * 0.51 + 1e-30) {
                snprintf(why, wl, "column %u: x %.9g, q1 %d q2 %d, d %.9g", c, xv, q1[c], q2[c], d[g]);
                return 0;
            }
        }
        if (sum != qs[g]) {
            snprintf(why, wl, "group %u: sum %d, want %lld", g, qs[g], (long long)sum);
            return 0;
        }
    }
    return 1;
}

static double bound(const ogk_qtensor *W, uint32_t n, const int8_t *q1, const int8_t *q2, const float *d)
{
    uint32_t B = W->block, kb = W->k_blocks, K = W->k;
    double S = 0;
    for (uint32_t g = 0; g < kb; g++) {
        double s = 0, sq = 0;
        for (uint32_t c = g * B; c < (g + 1) * B && c < K; c++) {
            int Q = 254 * q1[c] + q2[c];
            s += (double)ogk_q4_code(W, n, c) * abs(Q);
            sq += abs(Q);
        }
        S += fabs(ogk_q4_scale(W, n, g) * (double)d[g]) * (s + ogk_q4_zero(W, n, g) * sq);
    }
    return (kb + 8) * ldexp(1.0, -23) * S + 1e-30;
}

typedef struct {
    uint32_t n, k, block;
} shape;
static const shape shapes[] = {{37, 32, 32}, {50, 200, 32}, {17, 128, 128}, {33, 300, 128}, {100, 72, 16},
                               {1, 64, 64},  {65, 256, 256}, {20, 520, 64}, {48, 4096, 4096}};
/* on the amx row: 20 = a tile + 4 rows on avx512, 27 a partial tile; up to 48 rows narrow launches (small
 * unpacked batches, the next one prefetched), 50 a wide one */
static const int Ms[] = {1, 2, 5, 16, 20, 27, 33, 50};

static void row_tests(int id, kern_pool *pool);

int main(void)
{
    ogk_prog_set("kern_i16");
    static const int rows[] = {KERN_ISA_AVX2, KERN_ISA_AVX512, KERN_ISA_AMX};
    kern_pool *pool = kern_pool_new(3);
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        const char *name = kern_isa_row(rows[i])->name;
        if (!kern_isa_supported(rows[i]))
            printf("ok %d - # skip kern_i16: no %s kernel path on this CPU\n", ++tap_n, name);
        else
            row_tests(rows[i], pool);
    }
    kern_pool_free(pool);
    return TAP_DONE();
}

static void row_tests(int id, kern_pool *pool)
{
    const kern_isa *isa = kern_isa_row(id);
    char why[600];

    /* the quantisation: definition, and scalar == the row's bit for bit */
    {
        int ok = 1, same = 1;
        why[0] = 0;
        for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
            uint32_t K = shapes[si].k, B = shapes[si].block, kb = (K + B - 1) / B;
            int M = 6;
            float *x = make_x(M, K);
            x[1] = 1e-30f, x[K > 5 ? 5 : 0] = -3e4f; /* a tiny and a huge value */
            size_t kp = (size_t)kb * B;
            int8_t *a1 = malloc(kp * M), *a2 = malloc(kp * M), *b1 = malloc(kp * M), *b2 = malloc(kp * M);
            float *ad = malloc(sizeof(float) * kb * M), *bd = malloc(sizeof(float) * kb * M);
            int32_t *as = malloc(sizeof(int32_t) * kb * M), *bs = malloc(sizeof(int32_t) * kb * M);
            for (int m = 0; m < M; m++)
                kern_quant_row_i16(x + (size_t)m * K, K, B, a1 + m * kp, a2 + m * kp, ad + m * kb, as + m * kb);
            isa->quant_i16(x, M, K, B, b1, b2, bd, bs);
            for (int m = 0; m < M && ok; m++)
                ok = quant_ok(x + (size_t)m * K, K, B, a1 + m * kp, a2 + m * kp, ad + m * kb, as + m * kb, why,
                              sizeof why);
            same &= !memcmp(a1, b1, kp * M) && !memcmp(a2, b2, kp * M) && !memcmp(ad, bd, sizeof(float) * kb * M) &&
                    !memcmp(as, bs, sizeof(int32_t) * kb * M);
            free(x), free(a1), free(a2), free(b1), free(b2), free(ad), free(bd), free(as), free(bs);
        }
        TAP_OK(ok, "%s: 16-bit quantisation as defined (Q = 254 q1 + q2, planes in [-127, 127], |x - dQ| <= 0.51 d) %s", isa->name, why);
        TAP_OK(same, "%s 16-bit quantisation is bit-identical to the scalar one", isa->name);
    }

    /* avx512 kernels against the reference, within the bound */
    static const int sdts[] = {OGK_F32, OGK_F16, OGK_BF16};
    for (int layout = OGK_RM; layout <= OGK_B8; layout++)
        for (int si = 0; si < 3; si++)
            for (int zp = 0; zp < 2; zp++) {
                int ok = 1;
                why[0] = 0;
                for (size_t sh = 0; sh < sizeof shapes / sizeof *shapes && ok; sh++) {
                    const shape *s = &shapes[sh];
                    if (layout == OGK_RM && s->block > 256)
                        continue;
                    tensor T;
                    make(&T, layout, s->n, s->k, s->block, sdts[si], zp);
                    uint32_t kb = T.t.k_blocks, kp = kb * s->block;
                    for (size_t mi = 0; mi < sizeof Ms / sizeof *Ms && ok; mi++) {
                        int M = Ms[mi];
                        float *x = make_x(M, s->k), *y = malloc(sizeof(float) * M * s->n),
                              *r = malloc(sizeof(float) * M * s->n);
                        int8_t *q1 = malloc(kp), *q2 = malloc(kp);
                        float *d = malloc(sizeof(float) * kb);
                        int32_t *qs = malloc(sizeof(int32_t) * kb);
                        ogk_error e;
                        kern_ref_rows(&T.t, x, M, r, KERN_I16, 0, s->n);
                        for (size_t i = 0; i < (size_t)M * s->n; i++)
                            y[i] = NAN;
                        if (kern_matmul_isa(id, (rnd() & 1) ? pool : NULL, &T.t, x, M, y, KERN_I16, &e)) {
                            snprintf(why, sizeof why, "%.500s", e.msg);
                            ok = 0;
                        }
                        for (int m = 0; m < M && ok; m++) {
                            kern_quant_row_i16(x + (size_t)m * s->k, s->k, s->block, q1, q2, d, qs);
                            for (uint32_t n = 0; n < s->n && ok; n++) {
                                double want = r[(size_t)m * s->n + n], got = y[(size_t)m * s->n + n];
                                double tol = bound(&T.t, n, q1, q2, d);
                                if (!(fabs(got - want) <= tol)) {
                                    snprintf(why, sizeof why, "N=%u K=%u B=%u M=%d m=%d n=%u: got %.9g want %.9g (> %.3g)",
                                             s->n, s->k, s->block, M, m, n, got, want, tol);
                                    ok = 0;
                                }
                            }
                        }
                        free(x), free(y), free(r), free(q1), free(q2), free(d), free(qs);
                    }
                    drop(&T);
                }
                TAP_OK(ok, "%s i16 %s scales %s%s: within the bound of the reference %s", isa->name, ogk_layout_name(layout),
                       ogk_dtype_name(sdts[si]), zp ? " zero points" : "", why);
            }

    /* error against the exact product, and against the int8 mode's, on a realistic shape */
    {
        tensor T;
        uint32_t N = 256, K = 896;
        make(&T, OGK_B8, N, K, 32, OGK_F32, 0);
        int M = 4;
        float *x = malloc(sizeof(float) * M * K), *yf = malloc(sizeof(float) * M * N), *y16 = malloc(sizeof(float) * M * N),
              *y8 = malloc(sizeof(float) * M * N);
        for (size_t i = 0; i < (size_t)M * K; i++)
            x[i] = frand() + frand() + frand();
        ogk_error e;
        kern_ref_rows(&T.t, x, M, yf, KERN_F32, 0, N);
        kern_matmul_isa(id, pool, &T.t, x, M, y16, KERN_I16, &e);
        kern_ref_rows(&T.t, x, M, y8, KERN_I8, 0, N);
        double e16 = 0, e8 = 0, ymax = 0;
        for (size_t i = 0; i < (size_t)M * N; i++) {
            e16 = fmax(e16, fabs(y16[i] - yf[i]));
            e8 = fmax(e8, fabs(y8[i] - yf[i]));
            ymax = fmax(ymax, fabs(yf[i]));
        }
        TAP_OK(e16 <= 1e-4 * ymax && e16 * 50 < e8,
               "%s i16 vs exact: max|err|/max|y| %.2e (<= 1e-4), int8 mode's %.2e (> 50x)", isa->name, e16 / ymax,
               e8 / ymax);
        free(x), free(yf), free(y16), free(y8);
        drop(&T);
    }

    /* one row alone (M = 1) gives the bits it gets inside a launch of several rows */
    {
        static const int Ms[] = {2, 5, 16, 20, 27, 33};
        int same = 1;
        why[0] = 0;
        for (int layout = OGK_RM; layout <= OGK_B8 && same; layout++)
            for (int zp = 0; zp < 2 && same; zp++) {
                tensor T;
                make(&T, layout, 70, 520, layout == OGK_RM ? 64 : 32, zp ? OGK_F16 : OGK_F32, zp);
                for (size_t mi = 0; mi < sizeof Ms / sizeof *Ms && same; mi++) {
                    int M = Ms[mi];
                    float *x = make_x(M, 520), *ym = malloc((size_t)M * 70 * 4), *y1 = malloc(70 * 4);
                    ogk_error e;
                    kern_matmul_isa(id, pool, &T.t, x, M, ym, KERN_I16, &e);
                    for (int r = 0; r < M && same; r++) {
                        kern_matmul_isa(id, pool, &T.t, x + (size_t)r * 520, 1, y1, KERN_I16, &e);
                        if (memcmp(y1, ym + (size_t)r * 70, 70 * 4)) {
                            same = 0;
                            snprintf(why, sizeof why, ": %s %s M=%d row %d differs", ogk_layout_name(layout),
                                     zp ? "asym" : "sym", M, r);
                        }
                    }
                    free(x), free(ym), free(y1);
                }
                drop(&T);
            }
        TAP_OK(same, "%s i16: each row alone has the bits it has in a launch of 2-33 rows%s", isa->name, why);
    }
}
