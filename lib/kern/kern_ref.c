/* The scalar reference: defines the result of kern_matmul. It reads weights only through the q4nx
 * element accessors (lib/q4nx, independent of the kernels' own layout decoding) and sums in double. */
#include "kern.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void kern_quant_row_i8(const float *x, uint32_t k, uint32_t block, int8_t *q, float *d, int32_t *qs)
{
    uint32_t kb = (k + block - 1) / block;
    for (uint32_t g = 0; g < kb; g++) {
        uint32_t c0 = g * block, c1 = c0 + block < k ? c0 + block : k;
        float a = 0.0f;
        for (uint32_t c = c0; c < c1; c++)
            a = fmaxf(a, fabsf(x[c]));
        float inv = a > 0.0f ? 127.0f / a : 0.0f;
        int32_t s = 0;
        for (uint32_t c = c0; c < c1; c++) {
            int v = (int)nearbyintf(x[c] * inv);
            q[c] = (int8_t)v;
            s += v;
        }
        for (uint32_t c = c1; c < c0 + block; c++)
            q[c] = 0;
        d[g] = a / 127.0f;
        qs[g] = s;
    }
}

void kern_quant_row_i16(const float *x, uint32_t k, uint32_t block, int8_t *q1, int8_t *q2, float *d, int32_t *qs)
{
    uint32_t kb = (k + block - 1) / block;
    for (uint32_t g = 0; g < kb; g++) {
        uint32_t c0 = g * block, c1 = c0 + block < k ? c0 + block : k;
        float a = 0.0f;
        for (uint32_t c = c0; c < c1; c++)
            a = fmaxf(a, fabsf(x[c]));
        float inv = a > 0.0f ? 32258.0f / a : 0.0f;
        int32_t s = 0;
        for (uint32_t c = c0; c < c1; c++) {
            int Q = (int)nearbyintf(x[c] * inv);
            int h = (int)floorf((float)(Q + 127) / 254.0f);
            q1[c] = (int8_t)h;
            q2[c] = (int8_t)(Q - 254 * h);
            s += Q;
        }
        for (uint32_t c = c1; c < c0 + block; c++)
            q1[c] = q2[c] = 0;
        d[g] = a / 32258.0f;
        qs[g] = s;
    }
}

void kern_ref_rows(const q4nx_tensor *W, const float *X, int M, float *Y, int mode, uint32_t n0, uint32_t n1)
{
    uint32_t K = W->k, B = W->block, kb = W->k_blocks, N = W->n;
    size_t kp = (size_t)kb * B;
    double *w = malloc(K * sizeof *w);
    int32_t *code = malloc(K * sizeof *code);
    double *sc = malloc(kb * sizeof *sc);
    int32_t *zp = malloc(kb * sizeof *zp);
    int8_t *q = malloc(kp * (size_t)M), *q2 = malloc(kp * (size_t)M);
    float *d = malloc((size_t)kb * M * sizeof *d);
    int32_t *qs = malloc((size_t)kb * M * sizeof *qs);
    if (!w || !code || !sc || !zp || !q || !q2 || !d || !qs)
        abort();
    for (int m = 0; m < M; m++)
        if (mode == KERN_I8)
            kern_quant_row_i8(X + (size_t)m * K, K, B, q + m * kp, d + (size_t)m * kb, qs + (size_t)m * kb);
        else if (mode == KERN_I16)
            kern_quant_row_i16(X + (size_t)m * K, K, B, q + m * kp, q2 + m * kp, d + (size_t)m * kb,
                               qs + (size_t)m * kb);
    for (uint32_t n = n0; n < n1 && n < N; n++) {
        for (uint32_t g = 0; g < kb; g++) {
            sc[g] = q4nx_q4_scale(W, n, g);
            zp[g] = q4nx_q4_zero(W, n, g);
        }
        for (uint32_t c = 0; c < K; c++) {
            code[c] = q4nx_q4_code(W, n, c);
            /* W[n,k] = (float)(code - zp) * (float)scale, as MatMulNBits defines it */
            w[c] = (double)((float)(code[c] - zp[c / B]) * (float)sc[c / B]);
        }
        for (int m = 0; m < M; m++) {
            const float *x = X + (size_t)m * K;
            double acc = 0.0;
            if (mode == KERN_I8 || mode == KERN_I16) {
                const int8_t *qm = q + m * kp, *qm2 = q2 + m * kp;
                for (uint32_t g = 0; g < kb; g++) {
                    int64_t s = 0;
                    uint32_t c1 = (g + 1) * B < K ? (g + 1) * B : K;
                    for (uint32_t c = g * B; c < c1; c++)
                        s += (int64_t)code[c] * (mode == KERN_I16 ? 254 * qm[c] + qm2[c] : qm[c]);
                    s -= (int64_t)zp[g] * qs[(size_t)m * kb + g];
                    acc += sc[g] * (double)d[(size_t)m * kb + g] * (double)s;
                }
            } else {
                for (uint32_t c = 0; c < K; c++)
                    acc += w[c] * (double)x[c];
            }
            Y[(size_t)m * N + n] = (float)acc;
        }
    }
    free(w), free(code), free(sc), free(zp), free(q), free(q2), free(d), free(qs);
}

double kern_ref_bound(const q4nx_tensor *W, const float *x, uint32_t n, int mode)
{
    uint32_t B = W->block, kb = W->k_blocks, K = W->k;
    double S = 0;
    if (mode == KERN_I16) {
        int8_t *q1 = malloc((size_t)kb * B), *q2 = malloc((size_t)kb * B);
        float *d = malloc(kb * sizeof *d);
        int32_t *qs = malloc(kb * sizeof *qs);
        if (!q1 || !q2 || !d || !qs)
            abort();
        kern_quant_row_i16(x, K, B, q1, q2, d, qs);
        for (uint32_t g = 0; g < kb; g++) {
            double s = 0, sq = 0;
            for (uint32_t c = g * B; c < (g + 1) * B && c < K; c++) {
                int Q = 254 * q1[c] + q2[c];
                s += (double)q4nx_q4_code(W, n, c) * abs(Q);
                sq += abs(Q);
            }
            S += fabs(q4nx_q4_scale(W, n, g) * (double)d[g]) * (s + q4nx_q4_zero(W, n, g) * sq);
        }
        free(q1), free(q2), free(d), free(qs);
        return (kb + 8) * ldexp(1.0, -23) * S + 1e-30;
    }
    if (mode != KERN_I8) {
        for (uint32_t c = 0; c < K; c++) {
            uint32_t g = c / B;
            S += fabs(q4nx_q4_scale(W, n, g)) * (q4nx_q4_code(W, n, c) + q4nx_q4_zero(W, n, g)) * fabs(x[c]);
        }
        return (B + kb + 4) * ldexp(1.0, -23) * S;
    }
    int8_t *q = malloc((size_t)kb * B);
    float *d = malloc(kb * sizeof *d);
    int32_t *qs = malloc(kb * sizeof *qs);
    if (!q || !d || !qs)
        abort();
    kern_quant_row_i8(x, K, B, q, d, qs);
    for (uint32_t g = 0; g < kb; g++) {
        int64_t s = 0;
        for (uint32_t c = g * B; c < (g + 1) * B && c < K; c++)
            s += (int64_t)q4nx_q4_code(W, n, c) * q[c];
        s -= (int64_t)q4nx_q4_zero(W, n, g) * qs[g];
        S += fabs(q4nx_q4_scale(W, n, g) * (double)d[g] * (double)s);
    }
    free(q), free(d), free(qs);
    return (kb + 4) * ldexp(1.0, -23) * S + 1e-30;
}
