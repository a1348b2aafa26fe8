/* The attend operation of the avx512 row of the ISA table: one query row's causal attention for g
 * query heads that share a KV head (head_dim a multiple of 16, at most 256; other head sizes go to
 * kern_attend_ref): scores q·k scaled, softmax with a vector exp, weighted sum of the values. */
#include <immintrin.h>
#include <math.h>

#include "exp_avx512.h"
#include "kern_int.h"

/* e^x for x <= 0 (x - max). Below e^-80 the result is 0 exactly: no subnormal results (each costs
 * a microcode assist in the value sums), and nothing lost, as the largest term of every softmax is 1 */
static inline __m512 exp512(__m512 x)
{
    __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-80.0f), _CMP_GE_OQ);
    return _mm512_maskz_mov_ps(keep, kern_exp512(_mm512_max_ps(x, _mm512_set1_ps(-80.0f))));
}

/* a[0..n) = e^(a - mx) in place; returns 1 / their sum */
static inline float softmax_exp(float *a, int n, float mx)
{
    __m512 vmx = _mm512_set1_ps(mx), vsum = _mm512_setzero_ps();
    int t = 0;
    for (; t + 16 <= n; t += 16) {
        __m512 e = exp512(_mm512_sub_ps(_mm512_loadu_ps(a + t), vmx));
        _mm512_storeu_ps(a + t, e);
        vsum = _mm512_add_ps(vsum, e);
    }
    if (t < n) {
        __mmask16 m = (__mmask16)((1u << (n - t)) - 1);
        __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, a + t), vmx));
        _mm512_mask_storeu_ps(a + t, m, e);
        vsum = _mm512_add_ps(vsum, _mm512_maskz_mov_ps(m, e));
    }
    return 1.0f / _mm512_reduce_add_ps(vsum);
}

static void attend_one(float *q, const float *kc, const float *vc, int n, int hd, float scale, float *att)
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
    float inv = softmax_exp(att, n, mx); /* softmax numerators; 1 / their sum */
    /* weighted sum of the values */
    __m512 o[16];
    for (int i = 0; i < nv; i++)
        o[i] = _mm512_setzero_ps();
    for (int t = 0; t < n; t++) {
        const float *v = vc + (size_t)t * hd;
        __m512 a = _mm512_set1_ps(att[t] * inv);
        for (int i = 0; i < nv; i++)
            o[i] = _mm512_fmadd_ps(a, _mm512_loadu_ps(v + 16 * i), o[i]);
    }
    for (int i = 0; i < nv; i++)
        _mm512_storeu_ps(q + 16 * i, o[i]);
}

/* G query heads that share one KV head, head_dim = 16 NV: each key and value row is loaded once for
 * all G heads, and the G heads' dot products and sums are independent chains. */
static inline __attribute__((always_inline)) void attend_heads(float *q, const float *kc, const float *vc, int n,
                                                               float scale, float *att, size_t as, const int G,
                                                               const int NV)
{
    const int hd = 16 * NV;
    __m512 qv[4][8];
#pragma GCC unroll 8
    for (int g = 0; g < G; g++)
#pragma GCC unroll 8
        for (int i = 0; i < NV; i++)
            qv[g][i] = _mm512_loadu_ps(q + (size_t)g * hd + 16 * i);
    float mx[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    for (int t = 0; t < n; t++) {
        const float *k = kc + (size_t)t * hd;
        __m512 kv[8];
#pragma GCC unroll 8
        for (int i = 0; i < NV; i++)
            kv[i] = _mm512_loadu_ps(k + 16 * i);
#pragma GCC unroll 8
        for (int g = 0; g < G; g++) {
            __m512 acc = _mm512_mul_ps(qv[g][0], kv[0]);
#pragma GCC unroll 8
            for (int i = 1; i < NV; i++)
                acc = _mm512_fmadd_ps(qv[g][i], kv[i], acc);
            float d = _mm512_reduce_add_ps(acc) * scale;
            att[g * as + (size_t)t] = d;
            mx[g] = d > mx[g] ? d : mx[g];
        }
    }
    float inv[4];
#pragma GCC unroll 8
    for (int g = 0; g < G; g++)
        inv[g] = softmax_exp(att + g * as, n, mx[g]);
    __m512 o[4][8];
#pragma GCC unroll 8
    for (int g = 0; g < G; g++)
#pragma GCC unroll 8
        for (int i = 0; i < NV; i++)
            o[g][i] = _mm512_setzero_ps();
    for (int t = 0; t < n; t++) {
        const float *v = vc + (size_t)t * hd;
        __m512 vv[8];
#pragma GCC unroll 8
        for (int i = 0; i < NV; i++)
            vv[i] = _mm512_loadu_ps(v + 16 * i);
#pragma GCC unroll 8
        for (int g = 0; g < G; g++) {
            __m512 a = _mm512_set1_ps(att[g * as + (size_t)t] * inv[g]);
#pragma GCC unroll 8
            for (int i = 0; i < NV; i++)
                o[g][i] = _mm512_fmadd_ps(a, vv[i], o[g][i]);
        }
    }
#pragma GCC unroll 8
    for (int g = 0; g < G; g++)
#pragma GCC unroll 8
        for (int i = 0; i < NV; i++)
            _mm512_storeu_ps(q + (size_t)g * hd + 16 * i, o[g][i]);
}

#define HEADS(G, NV)                                                                                                  \
    static void heads_##G##_##NV(float *q, const float *kc, const float *vc, int n, float scale, float *att, size_t as) \
    {                                                                                                                  \
        attend_heads(q, kc, vc, n, scale, att, as, G, NV);                                                            \
    }
HEADS(1, 4)
HEADS(2, 4)
HEADS(3, 4)
HEADS(4, 4)
HEADS(1, 8)
HEADS(2, 8)

void kern_attend_avx512(float *q, int g, const float *kc, const float *vc, int n, int hd, float scale, float *att,
                        size_t as)
{
    if (hd % 16 || hd > 256) {
        kern_attend_ref(q, g, kc, vc, n, hd, scale, att, as);
        return;
    }
    typedef void (*fn)(float *, const float *, const float *, int, float, float *, size_t);
    static const fn h4[] = {0, heads_1_4, heads_2_4, heads_3_4, heads_4_4};
    static const fn h8[] = {0, heads_1_8, heads_2_8};
    while (g > 0) {
        int k = hd == 64 ? (g < 4 ? g : 4) : hd == 128 ? (g < 2 ? g : 2) : 1;
        if (hd == 64)
            h4[k](q, kc, vc, n, scale, att, as);
        else if (hd == 128)
            h8[k](q, kc, vc, n, scale, att, as);
        else
            attend_one(q, kc, vc, n, hd, scale, att);
        q += (size_t)k * hd, att += (size_t)k * as, g -= k;
    }
}
