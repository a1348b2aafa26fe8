/* The swiglu operation of the avx2 row of the ISA table: g = silu(g) * up = g * up / (1 + e^-g), 8
 * lanes at a time (the portable definition is kern_swiglu_ref, which also takes the tail); and its half
 * operation (fp32 -> fp16 for the KV cache, F16C), which the avx512 rows share. */
#include <math.h>
#include <stddef.h>

#include "exp_avx2.h"
#include "kern_int.h"

void kern_swiglu_avx2(float *g, const float *up, size_t n)
{
    const __m256 one = _mm256_set1_ps(1.0f), lo = _mm256_set1_ps(-87.0f), hi = _mm256_set1_ps(88.0f);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(g + i);
        /* e^-x clamped to [-87, 88]: e^-87 next to 1 is nothing, e^88 over 1 + it gives g * 0 */
        __m256 ex = kern_exp256(_mm256_min_ps(_mm256_max_ps(_mm256_sub_ps(_mm256_setzero_ps(), x), lo), hi));
        _mm256_storeu_ps(g + i, _mm256_div_ps(_mm256_mul_ps(x, _mm256_loadu_ps(up + i)), _mm256_add_ps(one, ex)));
    }
    if (i < n)
        kern_swiglu_ref(g + i, up + i, n - i);
}

/* g = gelu_tanh(g) * up = g * up / (1 + e^(-2u)), u = g (a + b g^2) (kern_geglu_ref) */
void kern_geglu_avx2(float *g, const float *up, size_t n)
{
    const __m256 one = _mm256_set1_ps(1.0f), lo = _mm256_set1_ps(-87.0f), hi = _mm256_set1_ps(88.0f),
                 a = _mm256_set1_ps(-2.0f * 0.7978845608028654f), b = _mm256_set1_ps(-2.0f * 0.035677408136300125f);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(g + i);
        __m256 z = _mm256_mul_ps(x, _mm256_fmadd_ps(b, _mm256_mul_ps(x, x), a));
        __m256 ex = kern_exp256(_mm256_min_ps(_mm256_max_ps(z, lo), hi));
        _mm256_storeu_ps(g + i, _mm256_div_ps(_mm256_mul_ps(x, _mm256_loadu_ps(up + i)), _mm256_add_ps(one, ex)));
    }
    if (i < n)
        kern_geglu_ref(g + i, up + i, n - i);
}

/* clamped to ±65504 (min / max return their second operand for a NaN, so a NaN stays one), converted with
 * nearest-even (F16C rounds like the portable code, subnormal results included), and a NaN's payload
 * replaced by the portable code's: sign | 0x7e00 */
void kern_half_avx2(uint16_t *dst, const float *src, size_t n)
{
    const __m256 top = _mm256_set1_ps(65504.0f), bot = _mm256_set1_ps(-65504.0f);
    const __m128i mag = _mm_set1_epi16(0x7fff), inf = _mm_set1_epi16(0x7c00), sgn = _mm_set1_epi16((short)0x8000),
                  qnan = _mm_set1_epi16(0x7e00);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_max_ps(bot, _mm256_min_ps(top, _mm256_loadu_ps(src + i)));
        __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m128i nan = _mm_cmpgt_epi16(_mm_and_si128(h, mag), inf);
        h = _mm_blendv_epi8(h, _mm_or_si128(_mm_and_si128(h, sgn), qnan), nan);
        _mm_storeu_si128((__m128i *)(dst + i), h);
    }
    if (i < n)
        kern_half_ref(dst + i, src + i, n - i);
}

/* e^(x - mx) on 8 lanes, 0 below -80 (and for -inf); two sums in flight, added in double at the end */
double kern_expsum_avx2(const float *x, size_t n, float mx)
{
    const __m256 m = _mm256_set1_ps(mx), lo = _mm256_set1_ps(-80.0f);
    __m256 s0 = _mm256_setzero_ps(), s1 = s0;
#define EXPSUM8(acc, p)                                                                                                 \
    do {                                                                                                                \
        __m256 d = _mm256_sub_ps(_mm256_loadu_ps(p), m);                                                                \
        acc = _mm256_add_ps(acc, _mm256_and_ps(_mm256_cmp_ps(d, lo, _CMP_GE_OQ), kern_exp256(_mm256_max_ps(d, lo)))); \
    } while (0)
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        EXPSUM8(s0, x + i);
        EXPSUM8(s1, x + i + 8);
    }
    for (; i + 8 <= n; i += 8)
        EXPSUM8(s0, x + i);
#undef EXPSUM8
    float lane[8];
    _mm256_storeu_ps(lane, _mm256_add_ps(s0, s1));
    double s = kern_expsum_ref(x + i, n - i, mx);
    for (int l = 0; l < 8; l++)
        s += lane[l];
    return s;
}

/* the argmax head's scans (kern.h: vmax, mark_ge); MAXPS keeps its second operand on NaN */
float kern_vmax_avx2(const float *x, size_t n)
{
    __m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
        m1 = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), m1);
    }
    float lane[8], m = kern_vmax_ref(x + i, n - i);
    _mm256_storeu_ps(lane, _mm256_max_ps(m0, m1));
    for (int l = 0; l < 8; l++)
        m = lane[l] > m ? lane[l] : m;
    return m;
}

void kern_mark_ge_avx2(const float *x, size_t n, float thr, unsigned char *mark)
{
    const __m256 t = _mm256_set1_ps(thr);
    size_t b = 0;
    for (; b * 16 + 16 <= n; b++) {
        const float *p = x + b * 16;
        __m256 k = _mm256_or_ps(_mm256_cmp_ps(_mm256_loadu_ps(p), t, _CMP_NLT_UQ),
                                _mm256_cmp_ps(_mm256_loadu_ps(p + 8), t, _CMP_NLT_UQ));
        if (_mm256_movemask_ps(k))
            mark[b] = 1;
    }
    if (b * 16 < n)
        kern_mark_ge_ref(x + b * 16, n - b * 16, thr, mark + b);
}
