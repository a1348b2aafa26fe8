/* The ref row of the ISA table. kern_ref_rows is the scalar reference that defines the result of
 * kern_matmul: it reads weights only through the layouts' element accessors (lib/util/tensor.h,
 * independent of the kernels' own layout decoding) and sums in double. The row's other operations (int8 quantisation,
 * rm band shuffle, dequantisation, attention, SwiGLU, read loop) are the portable definitions the
 * SIMD rows are tested against. */
#include "kern_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* max |x[c]| over [c0, c1): the scale of an activation group */
static float amax(const float *x, uint32_t c0, uint32_t c1)
{
    float a = 0.0f;
    for (uint32_t c = c0; c < c1; c++)
        a = fmaxf(a, fabsf(x[c]));
    return a;
}

void kern_quant_row_i8(const float *x, uint32_t k, uint32_t block, int8_t *q, float *d, int32_t *qs)
{
    uint32_t kb = (k + block - 1) / block;
    for (uint32_t g = 0; g < kb; g++) {
        uint32_t c0 = g * block, c1 = c0 + block < k ? c0 + block : k;
        float a = amax(x, c0, c1);
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
        float a = amax(x, c0, c1);
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

/* The integer modes' group sums are exact in any order: each product is a code (0..15) times an int16
 * activation value (i8: q, |q| <= 127; i16: 254 * q1 + q2, |.| <= 32640), so a group of B <= 4096 sums
 * below 15 * 32640 * 4096 < 2^31 in int32 (larger blocks sum in int64). The operands are int16 arrays so
 * that the compiler can turn the loop into multiply-adds of pairs (pmaddwd); the bits are the same. */
static int64_t group_dot(const int16_t *code, const int16_t *a, uint32_t n)
{
    if (n > 4096) {
        int64_t s = 0;
        for (uint32_t c = 0; c < n; c++)
            s += (int64_t)code[c] * a[c];
        return s;
    }
    int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    uint32_t c = 0;
    for (; c + 4 <= n; c += 4) {
        s0 += code[c] * a[c];
        s1 += code[c + 1] * a[c + 1];
        s2 += code[c + 2] * a[c + 2];
        s3 += code[c + 3] * a[c + 3];
    }
    for (; c < n; c++)
        s0 += code[c] * a[c];
    return (int64_t)s0 + s1 + s2 + s3;
}

/* element access for either width (q8: source order) */
static inline int qcode(const ogk_qtensor *W, uint32_t n, uint32_t c)
{
    return W->dtype == OGK_Q8 ? W->codes[(size_t)n * W->k_blocks * W->block + c] : ogk_q4_code(W, n, c);
}
static inline float qscale(const ogk_qtensor *W, uint32_t n, uint32_t g)
{
    return W->dtype == OGK_Q8 ? ogk_q8_scale(W, n, g) : ogk_q4_scale(W, n, g);
}
static inline int qzero(const ogk_qtensor *W, uint32_t n, uint32_t g)
{
    return W->dtype == OGK_Q8 ? ogk_q8_zero(W, n, g) : ogk_q4_zero(W, n, g);
}

void kern_ref_rows(const ogk_qtensor *W, const float *X, int M, float *Y, int mode, uint32_t n0, uint32_t n1)
{
    uint32_t K = W->k, B = W->block, kb = W->k_blocks, N = W->n;
    size_t kp = (size_t)kb * B;
    int integer = mode == KERN_I8 || mode == KERN_I16;
    double *w = malloc(K * sizeof *w);
    int16_t *code = malloc(K * sizeof *code);
    double *sc = malloc(kb * sizeof *sc);
    int32_t *zp = malloc(kb * sizeof *zp);
    int8_t *q = malloc(kp * (size_t)M), *q2 = malloc(kp * (size_t)M);
    int16_t *a = malloc(kp * (size_t)M * sizeof *a);
    float *d = malloc((size_t)kb * M * sizeof *d);
    int32_t *qs = malloc((size_t)kb * M * sizeof *qs);
    if (!w || !code || !sc || !zp || !q || !q2 || !a || !d || !qs)
        abort();
    for (int m = 0; m < M; m++) {
        if (mode == KERN_I8)
            kern_quant_row_i8(X + (size_t)m * K, K, B, q + m * kp, d + (size_t)m * kb, qs + (size_t)m * kb);
        else if (mode == KERN_I16)
            kern_quant_row_i16(X + (size_t)m * K, K, B, q + m * kp, q2 + m * kp, d + (size_t)m * kb,
                               qs + (size_t)m * kb);
        if (integer) /* the activation value each code multiplies */
            for (uint32_t c = 0; c < K; c++)
                a[m * kp + c] = (int16_t)(mode == KERN_I16 ? 254 * q[m * kp + c] + q2[m * kp + c] : q[m * kp + c]);
    }
    for (uint32_t n = n0; n < n1 && n < N; n++) {
        for (uint32_t g = 0; g < kb; g++) {
            sc[g] = qscale(W, n, g);
            zp[g] = qzero(W, n, g);
        }
        for (uint32_t c = 0; c < K; c++) {
            code[c] = qcode(W, n, c);
            /* W[n,k] = (float)(code - zp) * (float)scale, as MatMulNBits defines it */
            if (!integer)
                w[c] = (double)((float)(code[c] - zp[c / B]) * (float)sc[c / B]);
        }
        for (int m = 0; m < M; m++) {
            const float *x = X + (size_t)m * K;
            double acc = 0.0;
            if (integer) {
                const int16_t *am = a + m * kp;
                for (uint32_t g = 0; g < kb; g++) {
                    uint32_t c1 = (g + 1) * B < K ? (g + 1) * B : K;
                    int64_t s = group_dot(code + g * B, am + g * B, c1 - g * B);
                    s -= (int64_t)zp[g] * qs[(size_t)m * kb + g];
                    acc += sc[g] * (double)d[(size_t)m * kb + g] * (double)s;
                }
            } else { /* four partial sums: the adds' latency, not their count, bound one chain */
                double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
                uint32_t c = 0;
                for (; c + 4 <= K; c += 4) {
                    a0 += w[c] * (double)x[c];
                    a1 += w[c + 1] * (double)x[c + 1];
                    a2 += w[c + 2] * (double)x[c + 2];
                    a3 += w[c + 3] * (double)x[c + 3];
                }
                for (; c < K; c++)
                    a0 += w[c] * (double)x[c];
                acc = (a0 + a1) + (a2 + a3);
            }
            Y[(size_t)m * N + n] = (float)acc;
        }
    }
    free(w), free(code), free(sc), free(zp), free(q), free(q2), free(a), free(d), free(qs);
}

double kern_ref_bound(const ogk_qtensor *W, const float *x, uint32_t n, int mode)
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
                s += (double)qcode(W, n, c) * abs(Q);
                sq += abs(Q);
            }
            S += fabs(qscale(W, n, g) * (double)d[g]) * (s + qzero(W, n, g) * sq);
        }
        free(q1), free(q2), free(d), free(qs);
        return (kb + 8) * ldexp(1.0, -23) * S + 1e-30;
    }
    if (mode != KERN_I8) {
        for (uint32_t c = 0; c < K; c++) {
            uint32_t g = c / B;
            S += fabs(qscale(W, n, g)) * (qcode(W, n, c) + qzero(W, n, g)) * fabs(x[c]);
        }
        return (B + kb + 4) * ldexp(1.0, -23) * S;
    }
    int8_t *q = malloc((size_t)kb * B);
    float *d = malloc(kb * sizeof *d);
    int32_t *qs = malloc(kb * sizeof *qs);
    if (!q || !d || !qs)
        abort();
    kern_quant_row_i8(x, K, B, q, d, qs);
    if (W->dtype == OGK_Q8) { /* its paths scale each lane's products before the zero point's term: magnitudes */
        for (uint32_t g = 0; g < kb; g++) {
            double s = 0, sq = 0;
            for (uint32_t c = g * B; c < (g + 1) * B && c < K; c++) {
                s += (double)qcode(W, n, c) * abs(q[c]);
                sq += abs(q[c]);
            }
            S += fabs(qscale(W, n, g) * (double)d[g]) * (s + qzero(W, n, g) * sq);
        }
        free(q), free(d), free(qs);
        return (kb + (double)kb * B / 32 + 24) * ldexp(1.0, -23) * S + 1e-30;
    }
    for (uint32_t g = 0; g < kb; g++) {
        int64_t s = 0;
        for (uint32_t c = g * B; c < (g + 1) * B && c < K; c++)
            s += (int64_t)qcode(W, n, c) * q[c];
        s -= (int64_t)qzero(W, n, g) * qs[g];
        S += fabs(qscale(W, n, g) * (double)d[g] * (double)s);
    }
    free(q), free(d), free(qs);
    return (kb + 4) * ldexp(1.0, -23) * S + 1e-30;
}

/* ---- the ref row's other operations ---- */
void kern_quant_rows_ref(const float *x, int M, uint32_t k, uint32_t block, int8_t *q, float *d, int32_t *qs)
{
    uint32_t kb = (k + block - 1) / block;
    for (int m = 0; m < M; m++)
        kern_quant_row_i8(x + (size_t)m * k, k, block, q + (size_t)m * kb * block, d + (size_t)m * kb,
                          qs + (size_t)m * kb);
}

/* one rm chunk (8 columns x 16 rows: byte j*8 + b holds rows 2b (low nibble) and 2b+1 of column j) to
 * one b8 chunk (byte r*4 + i = code(r, i) | code(r, 4 + i) << 4) */
static inline void rm_chunk_ref(const uint8_t *in, uint8_t *out)
{
    for (int r = 0; r < 16; r++)
        for (int i = 0; i < 4; i++) {
            uint8_t lo = (uint8_t)(in[i * 8 + r / 2] >> (4 * (r & 1)) & 15);
            uint8_t hi = (uint8_t)(in[(4 + i) * 8 + r / 2] >> (4 * (r & 1)) & 15);
            out[r * 4 + i] = (uint8_t)(lo | hi << 4);
        }
}

void kern_rm_band_ref(const ogk_qtensor *W, uint32_t band, uint8_t *codes, void *scales, uint8_t *zeros)
{
    kern_rm_band_with(W, band, codes, scales, zeros, rm_chunk_ref);
}

uint64_t kern_read_ref(const uint8_t *p, size_t n)
{
    const uint64_t *w = (const uint64_t *)p;
    uint64_t s = 0;
    for (size_t i = 0; i < n / 8; i++)
        s ^= w[i];
    return s;
}

/* one query row over positions [t0, n) of its kv head: scores q·k · scale, then cap · tanh(score / cap)
 * when cap > 0 (onnxruntime's GroupQueryAttention softcap; Gemma 2), softmax, weighted sum of the values
 * written over q. The cache is fp32, or fp16 when H (attend_h); element i of row t is KV(c, t, i). The
 * portable attend and attend_h are the uncapped rows from 0 (t0 and cap constants: the same code). */
static inline __attribute__((always_inline)) void attend_ext_row(float *q, const void *kc, const void *vc, int t0, int n,
                                                                 int hd, float scale, float cap, float *att, const int H)
{
#define KV(c, t, i) (H ? ogk_f16_to_f32(((const uint16_t *)(c))[(size_t)(t) * hd + (i)]) \
                       : ((const float *)(c))[(size_t)(t) * hd + (i)])
    float mx = -INFINITY;
    for (int t = t0; t < n; t++) {
        float d = 0;
        for (int i = 0; i < hd; i++)
            d += q[i] * KV(kc, t, i);
        d *= scale;
        if (cap > 0)
            d = cap * tanhf(d / cap);
        att[t - t0] = d;
        mx = d > mx ? d : mx;
    }
    float sum = 0;
    for (int t = t0; t < n; t++)
        sum += att[t - t0] = expf(att[t - t0] - mx);
    float inv = 1.0f / sum;
    for (int i = 0; i < hd; i++)
        q[i] = 0;
    for (int t = t0; t < n; t++) {
        float a = att[t - t0] * inv;
        for (int i = 0; i < hd; i++)
            q[i] += a * KV(vc, t, i);
    }
#undef KV
}

void kern_attend_ref(float *q, int g, const float *kc, const float *vc, int n, int hd, float scale, float *att,
                     size_t as)
{
    for (int i = 0; i < g; i++)
        attend_ext_row(q + (size_t)i * hd, kc, vc, 0, n, hd, scale, 0.0f, att + (size_t)i * as, 0);
}

void kern_attend_h_ref(float *q, size_t qs, int rows, int g, const uint16_t *kc, const uint16_t *vc, int n0, int hd,
                       float scale, float *att, size_t as)
{
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < g; i++)
            attend_ext_row(q + (size_t)r * qs + (size_t)i * hd, kc, vc, 0, n0 + r, hd, scale, 0.0f,
                           att + (size_t)(r * g + i) * as, 1);
}

void kern_attend_ext(float *q, int g, const void *kc, const void *vc, int f16, int t0, int n, int hd, float scale, float cap,
                     float *att, size_t as)
{
    for (int i = 0; i < g; i++)
        if (f16)
            attend_ext_row(q + (size_t)i * hd, kc, vc, t0, n, hd, scale, cap, att + (size_t)i * as, 1);
        else
            attend_ext_row(q + (size_t)i * hd, kc, vc, t0, n, hd, scale, cap, att + (size_t)i * as, 0);
}

void kern_swiglu_ref(float *g, const float *up, size_t n)
{
    for (size_t i = 0; i < n; i++)
        g[i] = g[i] / (1.0f + expf(-g[i])) * up[i];
}

/* GELU's tanh approximation (onnxruntime's FastGelu, gelu_pytorch_tanh) as a gate:
 * 0.5 x (1 + tanh(u)) = x / (1 + e^(-2u)), u = x (sqrt(2/pi) + 0.044715 sqrt(2/pi) x^2) */
void kern_geglu_ref(float *g, const float *up, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float x = g[i], z = -2.0f * x * (0.7978845608028654f + 0.035677408136300125f * x * x);
        g[i] = x / (1.0f + expf(z < 88.0f ? z : 88.0f)) * up[i];
    }
}

void kern_gelu_erf_gate(float *g, const float *up, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float x = g[i];
        g[i] = 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)) * up[i];
    }
}

void kern_half_ref(uint16_t *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = ogk_f32_to_f16_sat(src[i]);
}

double kern_expsum_ref(const float *x, size_t n, float mx)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += x[i] - mx < -80.0f ? 0.0 : exp((double)x[i] - mx);
    return s;
}

float kern_vmax_ref(const float *x, size_t n)
{
    float m = -INFINITY;
    for (size_t i = 0; i < n; i++)
        m = x[i] > m ? x[i] : m;
    return m;
}

void kern_mark_ge_ref(const float *x, size_t n, float thr, unsigned char *mark)
{
    for (size_t b = 0; b * 16 < n; b++) {
        int any = 0;
        for (size_t i = b * 16; i < n && i < b * 16 + 16; i++)
            any |= !(x[i] < thr);
        if (any)
            mark[b] = 1;
    }
}

/* b8 and rm row windows in storage order */
void kern_dequant_rows_ref(const ogk_qtensor *t, uint32_t row0, uint32_t nrows, float *out)
{
    /* each (row, group) first tabulates its 16 possible values (code - zp) * scale */
    uint32_t K = t->k, B = t->block, kb = t->k_blocks, r1 = row0 + nrows;
    float value[16];
    if (t->layout == OGK_B8) {
        for (uint32_t rb = row0 / 16; rb * 16 < r1; rb++) {
            uint32_t ra = rb * 16 < row0 ? row0 - rb * 16 : 0, rz = rb * 16 + 16 > r1 ? r1 - rb * 16 : 16;
            for (uint32_t g = 0; g < kb; g++) {
                size_t gi = ((size_t)rb * kb + g) * 16;
                const uint8_t *chunk = t->codes + gi / 16 * (size_t)B * 8;
                uint32_t cols = g * B + B <= K ? B : K - g * B;
                for (uint32_t r = ra; r < rz; r++) {
                    float sc = kern_scale_at(t, gi + r);
                    int zp = t->has_zp ? t->zeros[gi + r] : 8;
                    for (int q = 0; q < 16; q++)
                        value[q] = (float)(q - zp) * sc;
                    float *o = out + (size_t)(rb * 16 + r - row0) * K + (size_t)g * B;
                    const uint8_t *p = chunk + r * 4;
                    if (cols == B) {
                        for (uint32_t c = 0; c < B / 8; c++, p += 64, o += 8)
                            for (int i = 0; i < 4; i++) {
                                o[i] = value[p[i] & 15];
                                o[4 + i] = value[p[i] >> 4];
                            }
                    } else {
                        for (uint32_t w = 0; w < cols; w++) {
                            uint8_t b = p[(w / 8) * 64 + (w & 3)];
                            o[w] = value[(w & 4) ? b >> 4 : b & 15];
                        }
                    }
                }
            }
        }
        return;
    }
    /* rm: 32 x 256 tiles */
    uint32_t ntc = (kb * B + 255) / 256, gpt = 256 / B;
    for (uint32_t tr = row0 / 32; tr * 32 < r1; tr++) {
        uint32_t ra = tr * 32 < row0 ? row0 - tr * 32 : 0, rz = tr * 32 + 32 > r1 ? r1 - tr * 32 : 32;
        for (uint32_t tc = 0; tc < ntc; tc++) {
            size_t tile = (size_t)tr * ntc + tc;
            const uint8_t *tp = t->codes + tile * 4096;
            uint32_t cols = tc * 256 + 256 <= K ? 256 : K - tc * 256;
            for (uint32_t R = ra; R < rz; R++) {
                float *o = out + (size_t)(tr * 32 + R - row0) * K + (size_t)tc * 256;
                const uint8_t *p = tp + (R / 16) * 2048 + (R % 16) / 2;
                int sh = (R & 1) * 4;
                for (uint32_t cg = 0; cg * B < cols; cg++) {
                    size_t gi = tile * gpt * 32 + (size_t)cg * 32 + R;
                    float sc = kern_scale_at(t, gi);
                    int zp = t->has_zp ? t->zeros[gi] : 8;
                    for (int q = 0; q < 16; q++)
                        value[q] = (float)(q - zp) * sc;
                    uint32_t c1 = cg * B + B < cols ? cg * B + B : cols;
                    for (uint32_t c = cg * B; c < c1; c++)
                        o[c] = value[(p[c * 8] >> sh) & 15];
                }
            }
        }
    }
}
