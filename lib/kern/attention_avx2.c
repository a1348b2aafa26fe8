/* The attend operation of the avx2 row of the ISA table: one query row's causal attention for g query
 * heads that share a KV head (head_dim a multiple of 8, at most 256; other head sizes go to
 * kern_attend_ref): scores q·k scaled, softmax with a vector exp, weighted sum of the values. Each key
 * and value row is loaded once for all g heads; head_dim 64 (Qwen2.5, Llama 3.2 1B) has an unrolled
 * body. The fp16 cache of the i8 mode (attend_h, half the bytes) has its own several-row version below,
 * with blocked scores at head_dim 64, 96 and 128. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

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

/* head_dim 64: the scaled scores of 4 consecutive key rows k (64 floats apart) against the query in qv,
 * four FMA chains then one horizontal reduction for the four; each lane's arithmetic is its own row's
 * alone (the fp16 path relies on it: a partial block is padded with zero rows) */
static inline __attribute__((always_inline)) __m128 score4(const __m256 *qv, const float *k, float scale)
{
    __m256 a0 = _mm256_mul_ps(qv[0], _mm256_loadu_ps(k)), a1 = _mm256_mul_ps(qv[0], _mm256_loadu_ps(k + 64)),
           a2 = _mm256_mul_ps(qv[0], _mm256_loadu_ps(k + 128)), a3 = _mm256_mul_ps(qv[0], _mm256_loadu_ps(k + 192));
#pragma GCC unroll 8
    for (int i = 1; i < 8; i++) {
        a0 = _mm256_fmadd_ps(qv[i], _mm256_loadu_ps(k + 8 * i), a0);
        a1 = _mm256_fmadd_ps(qv[i], _mm256_loadu_ps(k + 64 + 8 * i), a1);
        a2 = _mm256_fmadd_ps(qv[i], _mm256_loadu_ps(k + 128 + 8 * i), a2);
        a3 = _mm256_fmadd_ps(qv[i], _mm256_loadu_ps(k + 192 + 8 * i), a3);
    }
    /* [a0 a1 a2 a3] -> four sums: pairwise adds within lanes, then the two 128-bit halves */
    __m256 s = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    return _mm_mul_ps(_mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1)), _mm_set1_ps(scale));
}

/* head_dim 64 over an fp32 cache: the scores of positions [0, n - n % 4) for g heads, four positions
 * at a time per head (four dot products as four FMA chains against the query in registers, then one
 * horizontal reduction for all four instead of one per score). Returns the first position left to the
 * caller. */
static int scores64(const float *q, int g, const float *kc, int n, float scale, float *att, size_t as, float *mx)
{
    int t0 = 0;
    for (; t0 + 4 <= n; t0 += 8) {
        int nb = n - t0 >= 8 ? 8 : 4;
        const float *kb = kc + (size_t)t0 * 64;
        for (int h = 0; h < g; h++) {
            const float *qh = q + (size_t)h * 64;
            __m256 qv[8];
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++)
                qv[i] = _mm256_loadu_ps(qh + 8 * i);
            for (int j = 0; j < nb; j += 4) {
                __m128 d = score4(qv, kb + (size_t)j * 64, scale);
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

/* the fp32 cache (f32 mode): one query row, g heads */
static inline __attribute__((always_inline)) void attend_heads(float *q, int g, const float *kc, const float *vc,
                                                               int n, int hd, float scale, float *att, size_t as,
                                                               const int NV64)
{
    const int H = 0;
    /* NV64: head_dim is 64 (8 vectors, unrolled); else any multiple of 8 */
    const int nv = NV64 ? 8 : hd / 8;
    float mx[64];
    for (int h = 0; h < g; h++)
        mx[h] = -INFINITY;
    int t = 0;
    if (NV64)
        t = scores64(q, g, kc, n, scale, att, as, mx);
    for (; t < n; t++) {
        const float *k = kc + (size_t)t * hd;
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
        attend_heads(q, g, kc, vc, n, 64, scale, att, as, 1);
    else
        attend_heads(q, g, kc, vc, n, hd, scale, att, as, 0);
}

/* ---- the fp16 cache (the i8 mode's), several query rows at once ----
 * Row r of a call attends to n0 + r positions (a prompt chunk: consecutive positions of one sequence).
 * Every key row is converted to fp32 once per call for all rows and heads (8 rows at a time), the
 * values are read a chunk of VCH elements at a time for all of them (from L1), and each (row, head) is computed with exactly the arithmetic of
 * a call of one row: a score by its position's own chain and reduction (four positions at a time, a
 * partial four padded with zero keys whose lanes are dropped), the softmax over the row's own n, the
 * weighted sum in position order (accumulated over q across the value chunks). So a row's result has
 * the same bits whatever the call's row count, which the server's batching and prefix cache rely on. */
#define VCH 8192 /* value elements per chunk of positions (16 KiB of fp16) */
#define NQMAX 256 /* (row, head) pairs per call; more rows are split (same bits) */

/* head_dim HD (64, 96, 128): the scaled scores of 4 consecutive key rows k (HD floats apart) against the
 * query (in registers at 64, else read from qh), as score4 does at 64: four FMA chains, then one
 * horizontal reduction for the four; each lane's arithmetic is its own row's alone */
static inline __attribute__((always_inline)) __m128 score4_hd(const __m256 *qv, const float *qh, const float *k,
                                                               float scale, const int HD)
{
    if (HD == 64)
        return score4(qv, k, scale);
    __m256 q0 = _mm256_loadu_ps(qh);
    __m256 a0 = _mm256_mul_ps(q0, _mm256_loadu_ps(k)), a1 = _mm256_mul_ps(q0, _mm256_loadu_ps(k + HD)),
           a2 = _mm256_mul_ps(q0, _mm256_loadu_ps(k + 2 * HD)), a3 = _mm256_mul_ps(q0, _mm256_loadu_ps(k + 3 * HD));
#pragma GCC unroll 16
    for (int i = 1; i < HD / 8; i++) {
        __m256 qi = _mm256_loadu_ps(qh + 8 * i);
        a0 = _mm256_fmadd_ps(qi, _mm256_loadu_ps(k + 8 * i), a0);
        a1 = _mm256_fmadd_ps(qi, _mm256_loadu_ps(k + HD + 8 * i), a1);
        a2 = _mm256_fmadd_ps(qi, _mm256_loadu_ps(k + 2 * HD + 8 * i), a2);
        a3 = _mm256_fmadd_ps(qi, _mm256_loadu_ps(k + 3 * HD + 8 * i), a3);
    }
    __m256 s = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    return _mm_mul_ps(_mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1)), _mm_set1_ps(scale));
}

/* scores of positions [0, n) of head_dim HD (64, 96, 128) for the nq query heads qh[i] into att slices a[i];
 * with mx, also each head's running maximum (one row: every position is its own). A block of 8 key rows
 * is converted to fp32 once for all heads. */
static inline __attribute__((always_inline)) void scores_h(const float *const *qh, float *const *a, int nq,
                                                            const uint16_t *kc, int n, float scale, float *mx,
                                                            const int HD)
{
    float kbuf[8 * 128] __attribute__((aligned(32)));
    for (int t0 = 0; t0 < n; t0 += 8) {
        int nb = n - t0 >= 8 ? 8 : n - t0, nb4 = (nb + 3) & ~3;
        const uint16_t *src = kc + (size_t)t0 * HD;
        for (int i = 0; i < nb * HD / 8; i++) {
            if (!(i & 3)) /* the key rows 4 KiB ahead (decode at long context streams them from DRAM) */
                _mm_prefetch((const char *)(src + 8 * i) + 4096, _MM_HINT_T0);
            _mm256_store_ps(kbuf + 8 * i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + 8 * i))));
        }
        for (int i = nb * HD / 8; i < nb4 * HD / 8; i++)
            _mm256_store_ps(kbuf + 8 * i, _mm256_setzero_ps());
        for (int h = 0; h < nq; h++) {
            __m256 qv[8];
            if (HD == 64)
#pragma GCC unroll 8
                for (int i = 0; i < 8; i++)
                    qv[i] = _mm256_loadu_ps(qh[h] + 8 * i);
            for (int j = 0; j < nb4; j += 4) {
                __m128 d = score4_hd(qv, qh[h], kbuf + (size_t)j * HD, scale, HD);
                if (j + 4 <= nb) {
                    _mm_storeu_ps(a[h] + t0 + j, d);
                    if (mx) {
                        __m128 m = _mm_max_ps(d, _mm_movehl_ps(d, d));
                        float dm = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
                        mx[h] = dm > mx[h] ? dm : mx[h];
                    }
                } else {
                    float tmp[4];
                    _mm_storeu_ps(tmp, d);
                    memcpy(a[h] + t0 + j, tmp, (size_t)(nb - j) * sizeof(float));
                    for (int i = 0; mx && i < nb - j; i++)
                        mx[h] = tmp[i] > mx[h] ? tmp[i] : mx[h];
                }
            }
        }
    }
}

#define SCORES_H(HD)                                                                                                   \
    static void scores##HD##_h(const float *const *qh, float *const *a, int nq, const uint16_t *kc, int n,            \
                               float scale, float *mx)                                                                 \
    {                                                                                                                  \
        scores_h(qh, a, nq, kc, n, scale, mx, HD);                                                                     \
    }
SCORES_H(64) SCORES_H(96) SCORES_H(128)

/* max of a[0..n) (exact, so the order does not matter) */
static float vmax(const float *a, int n)
{
    __m256 m = _mm256_set1_ps(-INFINITY);
    int t = 0;
    for (; t + 8 <= n; t += 8)
        m = _mm256_max_ps(m, _mm256_loadu_ps(a + t));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    float mx = _mm_cvtss_f32(h);
    for (; t < n; t++)
        mx = a[t] > mx ? a[t] : mx;
    return mx;
}

/* out[0..8 NV) += Σ_{t in [t0, t1)} (w[t] · inv) · v_t[c ..] over fp16 value rows hd apart (out zero
 * first when t0 == 0): the same operations in the same order as one pass over [0, t1) */
static inline __attribute__((always_inline)) void wsum_chunk(float *out, const float *w, float inv, const uint16_t *vc,
                                                             int hd, int c, int t0, int t1, const int NV)
{
    __m256 o[8];
#pragma GCC unroll 8
    for (int i = 0; i < NV; i++)
        o[i] = t0 == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(out + 8 * i);
    for (int t = t0; t < t1; t++) {
        size_t v = (size_t)t * hd + c;
        if (NV == 8) /* the value rows 4 KiB ahead, as the keys */
            _mm_prefetch((const char *)(vc + v) + 4096, _MM_HINT_T0),
                _mm_prefetch((const char *)(vc + v) + 4096 + 64, _MM_HINT_T0);
        __m256 a = _mm256_set1_ps(w[t] * inv);
#pragma GCC unroll 8
        for (int i = 0; i < NV; i++)
            o[i] = _mm256_fmadd_ps(a, load8(vc, v + 8 * (size_t)i, 1), o[i]);
    }
#pragma GCC unroll 8
    for (int i = 0; i < NV; i++)
        _mm256_storeu_ps(out + 8 * i, o[i]);
}

void kern_attend_h_avx2(float *q, size_t qs, int rows, int g, const uint16_t *kc, const uint16_t *vc, int n0, int hd,
                        float scale, float *att, size_t as)
{
    if (hd % 8 || hd > 256) {
        kern_attend_h_ref(q, qs, rows, g, kc, vc, n0, hd, scale, att, as);
        return;
    }
    if (rows > 1 && rows * g > NQMAX) { /* in two calls: the same bits for every row */
        int r = rows / 2;
        kern_attend_h_avx2(q, qs, r, g, kc, vc, n0, hd, scale, att, as);
        kern_attend_h_avx2(q + (size_t)r * qs, qs, rows - r, g, kc, vc, n0 + r, hd, scale, att, as);
        return;
    }
    if (g > NQMAX) {
        kern_attend_h_ref(q, qs, rows, g, kc, vc, n0, hd, scale, att, as);
        return;
    }
    const int nq = rows * g, nmax = n0 + rows - 1, nv = hd / 8;
    float inv[NQMAX], mx[NQMAX];
    for (int i = 0; i < nq; i++)
        mx[i] = -INFINITY;
    /* scores of every (row, head) over the positions up to the last row's */
    const int blocked = KERN_ATTEND_HD(hd); /* scores_h: key blocks converted once */
    if (blocked) {
        const float *qh[NQMAX];
        float *a[NQMAX];
        for (int i = 0; i < nq; i++)
            qh[i] = q + (size_t)(i / g) * qs + (size_t)(i % g) * hd, a[i] = att + (size_t)i * as;
        (hd == 64 ? scores64_h : hd == 96 ? scores96_h : scores128_h)(qh, a, nq, kc, nmax, scale, rows == 1 ? mx : NULL);
    } else {
        for (int t = 0; t < nmax; t++)
            for (int i = 0; i < nq; i++)
                att[(size_t)i * as + t] = dot(q + (size_t)(i / g) * qs + (size_t)(i % g) * hd, kc + (size_t)t * hd, nv, 1) * scale;
    }
    /* each (row, head): the softmax over its own positions */
    for (int i = 0; i < nq; i++) {
        float *w = att + (size_t)i * as;
        int n = n0 + i / g;
        inv[i] = softmax_exp(w, n, rows == 1 && blocked ? mx[i] : vmax(w, n));
    }
    /* the weighted sums over q, a chunk of value rows at a time (they stay in L1 for every row and head) */
    const int ch = rows == 1 ? nmax : VCH / hd; /* one row: each head's values in one pass */
    for (int t0 = 0; t0 < nmax; t0 += ch) {
        int t1 = t0 + ch < nmax ? t0 + ch : nmax;
        for (int i = 0; i < nq; i++) {
            int n = n0 + i / g, te = t1 < n ? t1 : n;
            if (te <= t0)
                continue;
            float *out = q + (size_t)(i / g) * qs + (size_t)(i % g) * hd, *w = att + (size_t)i * as;
            for (int c0 = 0; c0 < hd; c0 += 64) {
                if (hd - c0 >= 64)
                    wsum_chunk(out + c0, w, inv[i], vc, hd, c0, t0, te, 8);
                else
                    for (int c = c0; c < hd; c += 8)
                        wsum_chunk(out + c, w, inv[i], vc, hd, c, t0, te, 1);
            }
        }
    }
}
