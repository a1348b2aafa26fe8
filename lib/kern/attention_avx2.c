/* The attend operation of the avx2 row of the ISA table: one query row's causal attention for g query
 * heads that share a KV head (head_dim a multiple of 8, at most 256; other head sizes go to
 * kern_attend_ref): scores q·k scaled, softmax with a vector exp, weighted sum of the values. Each key
 * and value row is loaded once for all g heads; head_dim 64 (Qwen2.5, Llama 3.2 1B) has an unrolled
 * body. The same code reads an fp16 cache (attend_h: the i8 mode's KV cache, half the bytes). */
#include <immintrin.h>
#include <math.h>

#include "exp_avx2.h"
#include "kern_int.h"

static inline float hsum(__m256 v)
{
    __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    a = _mm_add_ps(a, _mm_movehl_ps(a, a));
    a = _mm_add_ss(a, _mm_movehdup_ps(a));
    return _mm_cvtss_f32(a);
}

/* e^x for x <= 0 (x - max); below e^-80 exactly 0 (no subnormal terms; the largest term is 1) */
static inline __m256 exp_neg(__m256 x)
{
    __m256 keep = _mm256_cmp_ps(x, _mm256_set1_ps(-80.0f), _CMP_GE_OQ);
    return _mm256_and_ps(keep, kern_exp256(_mm256_max_ps(x, _mm256_set1_ps(-80.0f))));
}

/* a[0..n) = e^(a - mx) in place; returns 1 / their sum */
static float softmax_exp(float *a, int n, float mx)
{
    __m256 vmx = _mm256_set1_ps(mx), vsum = _mm256_setzero_ps();
    int t = 0;
    for (; t + 8 <= n; t += 8) {
        __m256 e = exp_neg(_mm256_sub_ps(_mm256_loadu_ps(a + t), vmx));
        _mm256_storeu_ps(a + t, e);
        vsum = _mm256_add_ps(vsum, e);
    }
    float s = hsum(vsum);
    for (; t < n; t++) {
        float d = a[t] - mx;
        a[t] = d < -80.0f ? 0.0f : expf(d);
        s += a[t];
    }
    return 1.0f / s;
}

/* 8 cached values from element i of a key or value row: fp32, or fp16 when H (the i8 mode's cache) */
static inline __attribute__((always_inline)) __m256 load8(const void *p, size_t i, const int H)
{
    if (H)
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + i)));
    return _mm256_loadu_ps((const float *)p + i);
}

/* one head's q·k over NV vectors of 8, two accumulator chains (k: row element 0) */
static inline __attribute__((always_inline)) float dot(const float *q, const void *k, const int NV, const int H)
{
    __m256 a0 = _mm256_mul_ps(_mm256_loadu_ps(q), load8(k, 0, H)), a1 = _mm256_setzero_ps();
#pragma GCC unroll 8
    for (int i = 1; i < NV; i++) {
        if (i & 1)
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + 8 * i), load8(k, 8 * (size_t)i, H), a1);
        else
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + 8 * i), load8(k, 8 * (size_t)i, H), a0);
    }
    return hsum(_mm256_add_ps(a0, a1));
}

/* out[0..8 NV) = Σ_t w[t] v_t[c0 .. c0 + 8 NV) for NV <= 8 (registers) */
static inline __attribute__((always_inline)) void wsum(float *out, const float *w, float inv, const void *vc, int n,
                                                       int hd, int c0, const int NV, const int H)
{
    __m256 o[8];
#pragma GCC unroll 8
    for (int i = 0; i < NV; i++)
        o[i] = _mm256_setzero_ps();
    for (int t = 0; t < n; t++) {
        size_t v = (size_t)t * hd + c0;
        __m256 a = _mm256_set1_ps(w[t] * inv);
#pragma GCC unroll 8
        for (int i = 0; i < NV; i++)
            o[i] = _mm256_fmadd_ps(a, load8(vc, v + 8 * (size_t)i, H), o[i]);
    }
#pragma GCC unroll 8
    for (int i = 0; i < NV; i++)
        _mm256_storeu_ps(out + 8 * i, o[i]);
}

/* head_dim 64: the scores of positions [0, n - n % 4) for g heads, four positions at a time per head
 * (four dot products as four FMA chains against the query in registers, then one horizontal
 * reduction for all four instead of one per score); an fp16 cache is converted 8 rows at a time into
 * a stack buffer first, once for all g heads. Returns the first position left to the caller. */
static inline __attribute__((always_inline)) int scores64(const float *q, int g, const void *kc, int n, float scale,
                                                          float *att, size_t as, float *mx, const int H)
{
    float kbuf[8 * 64] __attribute__((aligned(32)));
    int t0 = 0;
    for (; t0 + 4 <= n; t0 += 8) {
        int nb = n - t0 >= 8 ? 8 : 4;
        const float *kb;
        if (H) {
            const uint16_t *src = (const uint16_t *)kc + (size_t)t0 * 64;
            for (int i = 0; i < nb * 8; i++)
                _mm256_store_ps(kbuf + 8 * i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + 8 * i))));
            kb = kbuf;
        } else
            kb = (const float *)kc + (size_t)t0 * 64;
        for (int h = 0; h < g; h++) {
            const float *qh = q + (size_t)h * 64;
            __m256 qv[8];
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++)
                qv[i] = _mm256_loadu_ps(qh + 8 * i);
            for (int j = 0; j < nb; j += 4) {
                const float *k = kb + (size_t)j * 64;
                __m256 a0 = _mm256_mul_ps(qv[0], _mm256_loadu_ps(k)), a1 = _mm256_mul_ps(qv[0], _mm256_loadu_ps(k + 64)),
                       a2 = _mm256_mul_ps(qv[0], _mm256_loadu_ps(k + 128)),
                       a3 = _mm256_mul_ps(qv[0], _mm256_loadu_ps(k + 192));
#pragma GCC unroll 8
                for (int i = 1; i < 8; i++) {
                    a0 = _mm256_fmadd_ps(qv[i], _mm256_loadu_ps(k + 8 * i), a0);
                    a1 = _mm256_fmadd_ps(qv[i], _mm256_loadu_ps(k + 64 + 8 * i), a1);
                    a2 = _mm256_fmadd_ps(qv[i], _mm256_loadu_ps(k + 128 + 8 * i), a2);
                    a3 = _mm256_fmadd_ps(qv[i], _mm256_loadu_ps(k + 192 + 8 * i), a3);
                }
                /* [a0 a1 a2 a3] -> four sums: pairwise adds within lanes, then the two 128-bit halves */
                __m256 s = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
                __m128 d = _mm_mul_ps(_mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1)),
                                      _mm_set1_ps(scale));
                _mm_storeu_ps(att + (size_t)h * as + (size_t)(t0 + j), d);
                __m128 m = _mm_max_ps(d, _mm_movehl_ps(d, d));
                m = _mm_max_ss(m, _mm_movehdup_ps(m));
                float dm = _mm_cvtss_f32(m);
                mx[h] = dm > mx[h] ? dm : mx[h];
            }
        }
        if (nb == 4)
            return t0 + 4;
    }
    return t0;
}

static inline __attribute__((always_inline)) void attend_heads(float *q, int g, const void *kc, const void *vc,
                                                               int n, int hd, float scale, float *att, size_t as,
                                                               const int NV64, const int H)
{
    /* NV64: head_dim is 64 (8 vectors, unrolled); else any multiple of 8 */
    const int nv = NV64 ? 8 : hd / 8;
    float mx[64];
    for (int h = 0; h < g; h++)
        mx[h] = -INFINITY;
    int t = 0;
    if (NV64)
        t = scores64(q, g, kc, n, scale, att, as, mx, H);
    for (; t < n; t++) {
        const void *k = H ? (const void *)((const uint16_t *)kc + (size_t)t * hd)
                          : (const void *)((const float *)kc + (size_t)t * hd);
        for (int h = 0; h < g; h++) {
            float d = dot(q + (size_t)h * hd, k, nv, H) * scale;
            att[(size_t)h * as + (size_t)t] = d;
            mx[h] = d > mx[h] ? d : mx[h];
        }
    }
    for (int h = 0; h < g; h++) {
        float *w = att + (size_t)h * as, inv = softmax_exp(w, n, mx[h]);
        float *out = q + (size_t)h * hd;
        if (NV64)
            wsum(out, w, inv, vc, n, hd, 0, 8, H);
        else
            for (int c0 = 0; c0 < hd; c0 += 64) {
                if (hd - c0 >= 64)
                    wsum(out + c0, w, inv, vc, n, hd, c0, 8, H);
                else
                    for (int c = c0; c < hd; c += 8)
                        wsum(out + c, w, inv, vc, n, hd, c, 1, H);
            }
    }
}

void kern_attend_avx2(float *q, int g, const float *kc, const float *vc, int n, int hd, float scale, float *att,
                      size_t as)
{
    if (hd % 8 || hd > 256 || g > 64) {
        kern_attend_ref(q, g, kc, vc, n, hd, scale, att, as);
        return;
    }
    if (hd == 64)
        attend_heads(q, g, kc, vc, n, 64, scale, att, as, 1, 0);
    else
        attend_heads(q, g, kc, vc, n, hd, scale, att, as, 0, 0);
}

/* the same over an fp16 cache (vcvtph2ps on every load); the AVX-512 row uses it too */
void kern_attend_h_avx2(float *q, int g, const uint16_t *kc, const uint16_t *vc, int n, int hd, float scale,
                        float *att, size_t as)
{
    if (hd % 8 || hd > 256 || g > 64) {
        kern_attend_h_ref(q, g, kc, vc, n, hd, scale, att, as);
        return;
    }
    if (hd == 64)
        attend_heads(q, g, kc, vc, n, 64, scale, att, as, 1, 1);
    else
        attend_heads(q, g, kc, vc, n, hd, scale, att, as, 0, 1);
}
