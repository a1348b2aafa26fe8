/* One query row's causal attention over a head's KV cache with AVX-512 (head_dim a multiple of 16):
 * scores q·k scaled, softmax with a vector exp, weighted sum of the values. The portable version is
 * attend_row() in model.c; model_state_new picks this one when lib/kern's path is avx512. */
#include <immintrin.h>
#include <math.h>

#include "model.h"

/* e^x for x <= 0 (x - max): x = n ln2 + r, |r| <= ln2/2; e^r by its degree-7 Taylor polynomial
 * (relative error < 1e-8 before fp32 rounding); 2^n by vscalefps. Below -87 the result is 0-ish. */
static inline __m512 exp512(__m512 x)
{
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
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

void model_attend_avx512(float *q, const float *kc, const float *vc, int n, int hd, float scale, float *att)
{
    int nv = hd / 16;
    __m512 qv[16]; /* head_dim <= 256 */
    for (int i = 0; i < nv; i++)
        qv[i] = _mm512_loadu_ps(q + 16 * i);
    /* scores */
    float mx = -INFINITY;
    for (int t = 0; t < n; t++) {
        const float *k = kc + (size_t)t * hd;
        __m512 acc = _mm512_mul_ps(qv[0], _mm512_loadu_ps(k));
        for (int i = 1; i < nv; i++)
            acc = _mm512_fmadd_ps(qv[i], _mm512_loadu_ps(k + 16 * i), acc);
        float d = _mm512_reduce_add_ps(acc) * scale;
        att[t] = d;
        mx = d > mx ? d : mx;
    }
    /* softmax numerators and their sum */
    __m512 vmx = _mm512_set1_ps(mx), vsum = _mm512_setzero_ps();
    int t = 0;
    for (; t + 16 <= n; t += 16) {
        __m512 e = exp512(_mm512_sub_ps(_mm512_loadu_ps(att + t), vmx));
        _mm512_storeu_ps(att + t, e);
        vsum = _mm512_add_ps(vsum, e);
    }
    if (t < n) {
        __mmask16 m = (__mmask16)((1u << (n - t)) - 1);
        __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, att + t), vmx));
        _mm512_mask_storeu_ps(att + t, m, e);
        vsum = _mm512_add_ps(vsum, _mm512_maskz_mov_ps(m, e));
    }
    float inv = 1.0f / _mm512_reduce_add_ps(vsum);
    /* weighted sum of the values */
    __m512 o[16];
    for (int i = 0; i < nv; i++)
        o[i] = _mm512_setzero_ps();
    for (t = 0; t < n; t++) {
        const float *v = vc + (size_t)t * hd;
        __m512 a = _mm512_set1_ps(att[t] * inv);
        for (int i = 0; i < nv; i++)
            o[i] = _mm512_fmadd_ps(a, _mm512_loadu_ps(v + 16 * i), o[i]);
    }
    for (int i = 0; i < nv; i++)
        _mm512_storeu_ps(q + 16 * i, o[i]);
}
