/* The swiglu operation of the avx512 row of the ISA table: g = silu(g) * up = g * up / (1 + e^-g), 16
 * lanes at a time (the portable definition is kern_swiglu_ref); the argmax head's scans (vmax, mark_ge). */
#include <math.h>
#include <stddef.h>

#include "exp_avx512.h"
#include "kern_int.h"

/* e^x clamped to [-87, 88]: e^-87 next to 1 is nothing, e^88 over 1 + it gives g * 0 */
static inline __m512 exp_clamped(__m512 x)
{
    return kern_exp512(_mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f)));
}

void kern_swiglu_avx512(float *g, const float *up, size_t n)
{
    const __m512 one = _mm512_set1_ps(1.0f);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 x = _mm512_loadu_ps(g + i);
        __m512 d = _mm512_add_ps(one, exp_clamped(_mm512_sub_ps(_mm512_setzero_ps(), x)));
        _mm512_storeu_ps(g + i, _mm512_div_ps(_mm512_mul_ps(x, _mm512_loadu_ps(up + i)), d));
    }
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        __m512 x = _mm512_maskz_loadu_ps(m, g + i);
        __m512 d = _mm512_add_ps(one, exp_clamped(_mm512_sub_ps(_mm512_setzero_ps(), x)));
        _mm512_mask_storeu_ps(g + i, m, _mm512_div_ps(_mm512_mul_ps(x, _mm512_maskz_loadu_ps(m, up + i)), d));
    }
}

/* g = gelu_tanh(g) * up = g * up / (1 + e^(-2u)), u = g (a + b g^2) (kern_geglu_ref) */
void kern_geglu_avx512(float *g, const float *up, size_t n)
{
    const __m512 one = _mm512_set1_ps(1.0f), a = _mm512_set1_ps(-2.0f * 0.7978845608028654f),
                 b = _mm512_set1_ps(-2.0f * 0.035677408136300125f);
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        __m512 x = _mm512_maskz_loadu_ps(m, g + i);
        __m512 z = _mm512_mul_ps(x, _mm512_fmadd_ps(b, _mm512_mul_ps(x, x), a));
        __m512 d = _mm512_add_ps(one, exp_clamped(z));
        _mm512_mask_storeu_ps(g + i, m, _mm512_div_ps(_mm512_mul_ps(x, _mm512_maskz_loadu_ps(m, up + i)), d));
    }
}

/* e^(x - mx) on 16 lanes, 0 below -80 (and for -inf); four sums in flight, added in double at the end */
double kern_expsum_avx512(const float *x, size_t n, float mx)
{
    const __m512 m = _mm512_set1_ps(mx), lo = _mm512_set1_ps(-80.0f);
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
#define EXPSUM16(acc, p, k)                                                                                             \
    do {                                                                                                                \
        __m512 d = _mm512_sub_ps(_mm512_maskz_loadu_ps((k), (p)), m);                                                   \
        __mmask16 keep = _mm512_mask_cmp_ps_mask((k), d, lo, _CMP_GE_OQ);                                              \
        acc = _mm512_add_ps(acc, _mm512_maskz_mov_ps(keep, kern_exp512(_mm512_max_ps(d, lo))));                        \
    } while (0)
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        EXPSUM16(s0, x + i, 0xFFFF);
        EXPSUM16(s1, x + i + 16, 0xFFFF);
        EXPSUM16(s2, x + i + 32, 0xFFFF);
        EXPSUM16(s3, x + i + 48, 0xFFFF);
    }
    for (; i + 16 <= n; i += 16)
        EXPSUM16(s0, x + i, 0xFFFF);
    if (i < n)
        EXPSUM16(s1, x + i, (__mmask16)((1u << (n - i)) - 1));
#undef EXPSUM16
    float lane[16];
    _mm512_storeu_ps(lane, _mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
    double s = 0;
    for (int l = 0; l < 16; l++)
        s += lane[l];
    return s;
}

/* MAXPS returns its second operand when either is NaN: the running maximum, so NaN is skipped */
float kern_vmax_avx512(const float *x, size_t n)
{
    __m512 m0 = _mm512_set1_ps(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        m0 = _mm512_max_ps(_mm512_loadu_ps(x + i), m0);
        m1 = _mm512_max_ps(_mm512_loadu_ps(x + i + 16), m1);
        m2 = _mm512_max_ps(_mm512_loadu_ps(x + i + 32), m2);
        m3 = _mm512_max_ps(_mm512_loadu_ps(x + i + 48), m3);
    }
    for (; i + 16 <= n; i += 16)
        m0 = _mm512_max_ps(_mm512_loadu_ps(x + i), m0);
    if (i < n)
        m1 = _mm512_max_ps(_mm512_mask_loadu_ps(m0, (__mmask16)((1u << (n - i)) - 1), x + i), m1);
    return _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(m0, m1), _mm512_max_ps(m2, m3)));
}

void kern_mark_ge_avx512(const float *x, size_t n, float thr, unsigned char *mark)
{
    const __m512 t = _mm512_set1_ps(thr);
    size_t b = 0;
    for (; b * 16 + 64 <= n; b += 4) { /* NLT_UQ: not below, or NaN */
        const float *p = x + b * 16;
        __mmask16 k0 = _mm512_cmp_ps_mask(_mm512_loadu_ps(p), t, _CMP_NLT_UQ),
                  k1 = _mm512_cmp_ps_mask(_mm512_loadu_ps(p + 16), t, _CMP_NLT_UQ),
                  k2 = _mm512_cmp_ps_mask(_mm512_loadu_ps(p + 32), t, _CMP_NLT_UQ),
                  k3 = _mm512_cmp_ps_mask(_mm512_loadu_ps(p + 48), t, _CMP_NLT_UQ);
        if (k0 | k1 | k2 | k3) {
            mark[b] |= k0 != 0, mark[b + 1] |= k1 != 0, mark[b + 2] |= k2 != 0, mark[b + 3] |= k3 != 0;
        }
    }
    for (; b * 16 < n; b++) {
        __mmask16 m = n - b * 16 < 16 ? (__mmask16)((1u << (n - b * 16)) - 1) : (__mmask16)0xffff;
        if (_mm512_mask_cmp_ps_mask(m, _mm512_maskz_loadu_ps(m, x + b * 16), t, _CMP_NLT_UQ))
            mark[b] = 1;
    }
}
