/* The swiglu operation of the avx512 row of the ISA table: g = silu(g) * up = g * up / (1 + e^-g), 16
 * lanes at a time (the portable definition is kern_swiglu_ref). */
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
