/* The swiglu operation of the avx2 row of the ISA table: g = silu(g) * up = g * up / (1 + e^-g), 8
 * lanes at a time (the portable definition is kern_swiglu_ref, which also takes the tail). */
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
