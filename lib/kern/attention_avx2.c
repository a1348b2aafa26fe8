/* The attend operation of the avx2 row of the ISA table: one query row's causal attention for g query
 * heads that share a KV head (head_dim a multiple of 8, at most 256; other head sizes go to
 * kern_attend_ref): scores q·k scaled, softmax with a vector exp, weighted sum of the values. Each key
 * and value row is loaded once for all g heads; head_dim 64 (Qwen2.5, Llama 3.2 1B) has an unrolled
 * body. The fp16 cache of the i8 mode (attend_h and attend_ht, half the bytes) has its own several-row
 * version below, with scores over block-transposed keys at head_dim 64, 96 and 128. */
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

/* ---- the fp16 cache (the i8 mode's), several query rows at once: attend_h and attend_ht ----
 * Row r of a call attends to n0 + r positions (a prompt chunk: consecutive positions of one sequence).
 * At head_dim 64, 96 and 128 the scores run over keys transposed in blocks of 16 positions (attend_ht reads
 * model.c's copy in that order, attend_h transposes its plain cache into it a chunk at a time), so a score
 * is its position's own chain of fused multiply-adds over the dimensions in order, in its own lane (other
 * sizes: a dot product per position). The values are read a chunk of VCH elements at a time for all
 * (row, head) pairs (from L1), and each pair is computed with exactly the arithmetic of a call of one row:
 * the softmax over the row's own n, the weighted sum in position order (accumulated over q across the value
 * chunks). So a row's result has the same bits whatever the call's row count, which the server's batching
 * and prefix cache rely on, and attend_h's bits are attend_ht's. */
#define VCH 8192 /* value elements per chunk of positions (16 KiB of fp16) */
#define NQMAX 256 /* (row, head) pairs per call; more rows are split (same bits) */

/* ---- scores over block-transposed keys (attend_ht's layout, kern.h): kt[(t / 16)·16·HD + c·16 + t % 16] ----
 * A block's dimension c is two vectors of 8 positions; a pair's score of a position is the chain of HD
 * fused multiply-adds over c in order (its q[c] broadcast), times scale, in the position's own lane. Up to
 * PAIRS2 pairs at a time: their 2 x PAIRS2 chains, two key vectors and a broadcast fill the 16 registers.
 * Against scores four positions at a time by a horizontal reduction over plain key rows (one thread, Zen 5,
 * 7 heads of 64, keys from cache): one row after 4096 positions 115 -> 99 us, 16 rows after 512 210 -> 190. */
#define PAIRS2 6

/* PG pairs' scores over the blocks from position ta (a multiple of 16) up to tb, the block of ta at kb; the
 * pairs' queries transposed, qt[c·PAIRS2 + p]; a pair stores only its own positions (np[p]) */
static inline __attribute__((always_inline)) void scores_t2(const float *qt, const int *np, float *const *ap,
                                                             const int PG, const uint16_t *kb, int ta, int tb,
                                                             float scale, const int HD)
{
    const __m256 vs = _mm256_set1_ps(scale);
    for (int t0 = ta; t0 < tb; t0 += 16) {
        const uint16_t *b = kb + (size_t)(t0 - ta) * HD;
        __m256 a[PAIRS2], e[PAIRS2];
#pragma GCC unroll 8
        for (int p = 0; p < PG; p++)
            a[p] = _mm256_setzero_ps(), e[p] = _mm256_setzero_ps();
        for (int c = 0; c < HD; c++) {
            if (!(c & 1)) /* the block 4 KiB ahead, a line per two dimensions */
                _mm_prefetch((const char *)(b + c * 16) + 4096, _MM_HINT_T0);
            __m256 k0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + c * 16)));
            __m256 k1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + c * 16 + 8)));
#pragma GCC unroll 8
            for (int p = 0; p < PG; p++) {
                __m256 qb = _mm256_broadcast_ss(qt + c * PAIRS2 + p);
                a[p] = _mm256_fmadd_ps(qb, k0, a[p]);
                e[p] = _mm256_fmadd_ps(qb, k1, e[p]);
            }
        }
#pragma GCC unroll 8
        for (int p = 0; p < PG; p++) {
            int left = np[p] - t0;
            if (left >= 16) {
                _mm256_storeu_ps(ap[p] + t0, _mm256_mul_ps(a[p], vs));
                _mm256_storeu_ps(ap[p] + t0 + 8, _mm256_mul_ps(e[p], vs));
            } else if (left > 0) {
                float tmp[16];
                _mm256_storeu_ps(tmp, _mm256_mul_ps(a[p], vs));
                _mm256_storeu_ps(tmp + 8, _mm256_mul_ps(e[p], vs));
                memcpy(ap[p] + t0, tmp, (size_t)left * sizeof(float));
            }
        }
    }
}

#define SCORES_T2(PG, HD)                                                                                              \
    static void scores_t2_##PG##_##HD(const float *qt, const int *np, float *const *ap, const uint16_t *kb, int ta,   \
                                      int tb, float scale)                                                             \
    {                                                                                                                  \
        scores_t2(qt, np, ap, PG, kb, ta, tb, scale, HD);                                                              \
    }
#define SCORES_T2_HD(HD)                                                                                               \
    SCORES_T2(1, HD) SCORES_T2(2, HD) SCORES_T2(3, HD) SCORES_T2(4, HD) SCORES_T2(5, HD) SCORES_T2(6, HD)              \
    static const kern_scores_fn scores2_hd##HD[PAIRS2 + 1] = {                                                       \
        0, scores_t2_1_##HD, scores_t2_2_##HD, scores_t2_3_##HD, scores_t2_4_##HD, scores_t2_5_##HD, scores_t2_6_##HD};
SCORES_T2_HD(64) SCORES_T2_HD(96) SCORES_T2_HD(128)

/* scores of the nq pairs (query qh[i], np[i] positions, into a[i]) over transposed keys kt, or over the
 * plain cache kc transposed into that order a chunk at a time (the same bits) */
static void scores_blocked(const float *const *qh, const int *np, float *const *a, int nq, const uint16_t *kt,
                           const uint16_t *kc, int nmax, int hd, float scale)
{
    const kern_scores_fn *fns = hd == 64 ? scores2_hd64 : hd == 96 ? scores2_hd96 : scores2_hd128;
    /* group i / PAIRS2 at qt + (i / PAIRS2)·hd·PAIRS2: ceil(nq / PAIRS2)·PAIRS2·hd <= (nq + PAIRS2 - 1)·hd
     * floats, nq·hd <= NQMAX·64 (attend_t2) and hd <= 128 */
    float qt[NQMAX * 64 + (PAIRS2 - 1) * 128];
    for (int i = 0; i < nq; i++)
        for (int c = 0; c < hd; c++)
            qt[(size_t)(i / PAIRS2) * hd * PAIRS2 + (size_t)c * PAIRS2 + i % PAIRS2] = qh[i][c];
    kern_scores_chunks(fns, PAIRS2, qt, (size_t)hd * PAIRS2, np, a, nq, kt, kc, nmax, hd, scale);
}


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

/* attend_h (kc, the plain cache) or attend_ht (kt, the transposed keys; hd one of KERN_ATTEND_HD's) */
static void attend_t2(float *q, size_t qs, int rows, int g, const uint16_t *kt, const uint16_t *kc, const uint16_t *vc,
                      int n0, int hd, float scale, float *att, size_t as)
{
    /* pairs per call: NQMAX, fewer for heads over 64 (the transposed queries within NQMAX x 64 floats) */
    const int nqm = KERN_ATTEND_HD(hd) ? NQMAX * 64 / hd : NQMAX;
    if (g > nqm) { /* more heads than a call takes: each row alone, in calls of nqm heads (the same bits) */
        for (int r = 0; r < rows; r++)
            for (int h0 = 0; h0 < g; h0 += nqm)
                attend_t2(q + (size_t)r * qs + (size_t)h0 * hd, qs, 1, g - h0 < nqm ? g - h0 : nqm,
                          kt, kc, vc, n0 + r, hd, scale, att, as);
        return;
    }
    if (rows * g > nqm) { /* in two calls: the same bits for every row */
        int r = rows / 2;
        attend_t2(q, qs, r, g, kt, kc, vc, n0, hd, scale, att, as);
        attend_t2(q + (size_t)r * qs, qs, rows - r, g, kt, kc, vc, n0 + r, hd, scale, att, as);
        return;
    }
    const int nq = rows * g, nmax = n0 + rows - 1, nv = hd / 8;
    float inv[NQMAX];
    /* scores of every (row, head) over the positions up to the last row's */
    const int blocked = KERN_ATTEND_HD(hd);
    if (blocked) {
        const float *qh[NQMAX];
        float *a[NQMAX];
        int np[NQMAX];
        for (int i = 0; i < nq; i++)
            qh[i] = q + (size_t)(i / g) * qs + (size_t)(i % g) * hd, a[i] = att + (size_t)i * as, np[i] = n0 + i / g;
        scores_blocked(qh, np, a, nq, kt, kc, nmax, hd, scale);
    } else {
        for (int t = 0; t < nmax; t++)
            for (int i = 0; i < nq; i++)
                att[(size_t)i * as + t] = dot(q + (size_t)(i / g) * qs + (size_t)(i % g) * hd, kc + (size_t)t * hd, nv, 1) * scale;
    }
    /* each (row, head): the softmax over its own positions */
    for (int i = 0; i < nq; i++) {
        float *w = att + (size_t)i * as;
        int n = n0 + i / g;
        inv[i] = softmax_exp(w, n, vmax(w, n));
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

void kern_attend_h_avx2(float *q, size_t qs, int rows, int g, const uint16_t *kc, const uint16_t *vc, int n0, int hd,
                        float scale, float *att, size_t as)
{
    if (hd % 8 || hd > 256) {
        kern_attend_h_ref(q, qs, rows, g, kc, vc, n0, hd, scale, att, as);
        return;
    }
    attend_t2(q, qs, rows, g, NULL, kc, vc, n0, hd, scale, att, as);
}

/* hd is one of KERN_ATTEND_HD's sizes (model.c keeps the transposed keys only for those) */
void kern_attend_ht_avx2(float *q, size_t qs, int rows, int g, const uint16_t *kt, const uint16_t *vc, int n0, int hd,
                         float scale, float *att, size_t as)
{
    attend_t2(q, qs, rows, g, kt, NULL, vc, n0, hd, scale, att, as);
}

/* ---- attend_ext: soft-capped scores, a window start (Gemma 2), one query row per head (head_dim a multiple
 * of 8, at most 256; other sizes: kern_attend_ext) over an fp32 or fp16 cache ---- */
static inline __attribute__((always_inline)) void attend_ext_one(float *q, const void *kc, const void *vc, int t0, int n,
                                                                 int hd, float scale, float cap, float *att, const int H)
{
    int m = n - t0, nv = hd / 8;
    float mx = -INFINITY;
    for (int t = t0; t < n; t++) {
        const void *k = H ? (const void *)((const uint16_t *)kc + (size_t)t * hd) : (const void *)((const float *)kc + (size_t)t * hd);
        float d = dot(q, k, nv, H) * scale;
        if (cap > 0)
            d = cap * tanhf(d / cap);
        att[t - t0] = d;
        mx = d > mx ? d : mx;
    }
    float inv = softmax_exp(att, m, mx);
    const void *v0 = H ? (const void *)((const uint16_t *)vc + (size_t)t0 * hd) : (const void *)((const float *)vc + (size_t)t0 * hd);
    int c0 = 0;
    for (; c0 + 64 <= hd; c0 += 64)
        wsum(q + c0, att, inv, v0, m, hd, c0, 8, H);
    switch ((hd - c0) / 8) { /* a constant register count each */
    case 1: wsum(q + c0, att, inv, v0, m, hd, c0, 1, H); break;
    case 2: wsum(q + c0, att, inv, v0, m, hd, c0, 2, H); break;
    case 3: wsum(q + c0, att, inv, v0, m, hd, c0, 3, H); break;
    case 4: wsum(q + c0, att, inv, v0, m, hd, c0, 4, H); break;
    case 5: wsum(q + c0, att, inv, v0, m, hd, c0, 5, H); break;
    case 6: wsum(q + c0, att, inv, v0, m, hd, c0, 6, H); break;
    case 7: wsum(q + c0, att, inv, v0, m, hd, c0, 7, H); break;
    default: break;
    }
}

void kern_attend_ext_avx2(float *q, int g, const void *kc, const void *vc, int f16, int t0, int n, int hd, float scale,
                          float cap, float *att, size_t as)
{
    if (hd % 8 || hd > 256 || n <= t0) {
        kern_attend_ext(q, g, kc, vc, f16, t0, n, hd, scale, cap, att, as);
        return;
    }
    for (int i = 0; i < g; i++)
        if (f16)
            attend_ext_one(q + (size_t)i * hd, kc, vc, t0, n, hd, scale, cap, att + (size_t)i * as, 1);
        else
            attend_ext_one(q + (size_t)i * hd, kc, vc, t0, n, hd, scale, cap, att + (size_t)i * as, 0);
}
