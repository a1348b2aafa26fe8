/* lib/kern internal: e^x on 16 fp32 lanes for the AVX-512 files (attention_avx512.c, act_avx512.c).
 * x = n ln2 + r, |r| <= ln2/2; e^r by its degree-7 Taylor polynomial (relative error < 1e-8 before
 * fp32 rounding); 2^n by vscalefps. x must lie in [-87, 88]: the callers clamp. */
#ifndef OGK_KERN_EXP_AVX512_H
#define OGK_KERN_EXP_AVX512_H

#include <immintrin.h>

static inline __m512 kern_exp512(__m512 x)
{
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

#endif
