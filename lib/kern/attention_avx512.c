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

/* a[0..n) = e^(a - mx) in place; returns 1 / their sum. pf (may be NULL): a line per 16 values is
 * prefetched into L2 from *pf up to pfe (*pf advances) */
static inline float softmax_exp_pf(float *a, int n, float mx, const char **pf, const char *pfe)
{
    __m512 vmx = _mm512_set1_ps(mx), vsum = _mm512_setzero_ps();
    int t = 0;
    for (; t + 16 <= n; t += 16) {
        if (pf && *pf < pfe)
            _mm_prefetch(*pf, _MM_HINT_T1), *pf += 64;
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

static inline float softmax_exp(float *a, int n, float mx) { return softmax_exp_pf(a, n, mx, NULL, NULL); }

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

/* ---- the fp16 cache (the i8 mode's), several query rows at once: attend_h and attend_ht ----
 * head_dim HD = 64, 96 or 128 (other sizes: the avx2 code). Row r of a call attends to n0 + r positions.
 * Scores over keys in blocks of 16 positions, transposed: kt[(t / 16)·16·HD + c·16 + t % 16] (attend_ht
 * reads model.c's copy of the key cache in this order; attend_h transposes its plain cache into it, 16 KiB
 * at a time), so a block's dimension c is one vector of 16 positions and a pair's score of 16 positions is
 * its chain of HD fused multiply-adds over c in order (its q[c] broadcast), times scale. Each pair's
 * softmax is over its own positions (max exact, sum in the order softmax_exp takes), its weights are
 * scaled by 1 / sum in place, and the weighted sum of values runs over positions in order, a chunk of
 * 8 KiB of fp16 value rows at a time, up to 32 / (HD / 16) - 1 pairs side by side (wsum_h).
 * Nothing a pair computes depends on the other pairs or the call's row count (positions past a pair's
 * own are computed from whatever the block holds and dropped), so a row's result has the same bits alone
 * or in any batch, which the server's batching relies on, and attend_h's bits are attend_ht's. */
#define NQ_H 256 /* (row, head) pairs per call at head_dim 64 (nq_h: fewer for larger heads); more rows are split */
#define HD_MAX 128

/* pairs per call at head_dim HD: the transposed queries stay within NQ_H x 64 floats, whole lane blocks */
static inline int nq_h(int HD) { return NQ_H * 64 / HD / 16 * 16; }

/* bytes of values fetched into L2 ahead of the weighted sums (pf_row; 32 to 256 KiB: the same, Zen 4) */
#define PF_L2 65536

/* value rows per chunk: 8 KiB of fp16 at head_dim 64 */
static inline int vrows_h(int HD) { return 4096 / HD; }

/* Decode at long context streams the values from DRAM, and the weighted sums would wait on it: the softmaxes
 * (no memory traffic of their own) fetch the first PF_L2 bytes of values into L2, and the first weighted sum
 * over a chunk fetches, a row per position, the next chunk into L1 and the chunk PF_L2 further on into L2,
 * so the misses stay spread over the work (a fetch of the next chunk in one burst left the work waiting on
 * memory: over a third of decode's attention after 4096 positions).
 * pf_row: the fp16 value row t - t0 of the next chunk at pf (NULL: none) and its row PF_L2 further */
static inline __attribute__((always_inline)) void pf_row(const char *pf, int t, int t0, const int NV)
{
    const size_t row = (size_t)NV * 32, l2 = PF_L2 - (size_t)vrows_h(16 * NV) * row; /* pf is a chunk on */
    if (pf)
#pragma GCC unroll 4
        for (size_t c = 0; c < row; c += 64) {
            _mm_prefetch(pf + (size_t)(t - t0) * row + c, _MM_HINT_T0);
            _mm_prefetch(pf + (size_t)(t - t0) * row + c + l2, _MM_HINT_T1);
        }
}

/* pairs side by side in a weighted sum at head_dim 16 NV: their NV accumulators each and a value vector fit
 * the 32 registers (at NV 4, GCC moves one pair's accumulators to the stack and it is still the fastest:
 * decode after 4096 positions, 7 heads, 47 us against 50 for 4 + 3 pairs) */
#define WSUM_P(NV) (32 / (NV) - 1)
#define WSUM_PMAX 7

/* PG pairs' weighted sums over the value rows [t0, te[p]) of a chunk (fp16 rows of 16 NV from vs, row t0
 * first), each value vector converted to fp32 as it is loaded and used by every pair (a pass converting the
 * chunk into an fp32 buffer first, then read by groups of up to four pairs, made decode's attention after
 * 4096 positions 63 us where this takes 51): the pairs' common positions side by side, then each one's rest
 * alone. Every output element is the chain of fused multiply-adds over positions in order, continued from
 * out (t0 > 0) or from zero. pf: pf_row's */
static inline __attribute__((always_inline)) void wsum_h(float *const *o, const float *const *w, const int *te,
                                                          const uint16_t *vs, int t0, const char *pf, const int PG,
                                                          const int NV)
{
    int tc = te[0];
    for (int p = 1; p < PG; p++)
        tc = te[p] < tc ? te[p] : tc;
    __m512 a[WSUM_PMAX][HD_MAX / 16];
#pragma GCC unroll 8
    for (int p = 0; p < PG; p++)
#pragma GCC unroll 8
        for (int d = 0; d < NV; d++)
            a[p][d] = t0 == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(o[p] + 16 * d);
    const uint16_t *v = vs;
    for (int t = t0; t < tc; t++, v += 16 * NV) {
        pf_row(pf, t, t0, NV);
#pragma GCC unroll 8
        for (int d = 0; d < NV; d++) {
            __m512 x = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(v + 16 * d)));
#pragma GCC unroll 8
            for (int p = 0; p < PG; p++)
                a[p][d] = _mm512_fmadd_ps(_mm512_set1_ps(w[p][t]), x, a[p][d]);
        }
    }
#pragma GCC unroll 8
    for (int p = 0; p < PG; p++)
#pragma GCC unroll 8
        for (int d = 0; d < NV; d++)
            _mm512_storeu_ps(o[p] + 16 * d, a[p][d]);
    for (int p = 0; p < PG; p++) {
        if (te[p] <= tc)
            continue;
        __m512 b[HD_MAX / 16];
#pragma GCC unroll 8
        for (int d = 0; d < NV; d++)
            b[d] = _mm512_loadu_ps(o[p] + 16 * d);
        const uint16_t *u = vs + (size_t)(tc - t0) * 16 * NV;
        for (int t = tc; t < te[p]; t++, u += 16 * NV)
#pragma GCC unroll 8
            for (int d = 0; d < NV; d++)
                b[d] = _mm512_fmadd_ps(_mm512_set1_ps(w[p][t]),
                                       _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(u + 16 * d))), b[d]);
#pragma GCC unroll 8
        for (int d = 0; d < NV; d++)
            _mm512_storeu_ps(o[p] + 16 * d, b[d]);
    }
}

typedef void (*wsum_fn)(float *const *o, const float *const *w, const int *te, const uint16_t *vs, int t0,
                        const char *pf);
#define WSUM_H(PG, NV)                                                                                                 \
    static void wsum_h##PG##_##NV(float *const *o, const float *const *w, const int *te, const uint16_t *vs, int t0,  \
                                  const char *pf)                                                                      \
    {                                                                                                                  \
        wsum_h(o, w, te, vs, t0, pf, PG, NV);                                                                          \
    }
WSUM_H(1, 4) WSUM_H(2, 4) WSUM_H(3, 4) WSUM_H(4, 4) WSUM_H(5, 4) WSUM_H(6, 4) WSUM_H(7, 4)
WSUM_H(1, 6) WSUM_H(2, 6) WSUM_H(3, 6) WSUM_H(4, 6)
WSUM_H(1, 8) WSUM_H(2, 8) WSUM_H(3, 8)
static const wsum_fn wsum_nv4[] = {0, wsum_h1_4, wsum_h2_4, wsum_h3_4, wsum_h4_4, wsum_h5_4, wsum_h6_4, wsum_h7_4};
static const wsum_fn wsum_nv6[] = {0, wsum_h1_6, wsum_h2_6, wsum_h3_6, wsum_h4_6};
static const wsum_fn wsum_nv8[] = {0, wsum_h1_8, wsum_h2_8, wsum_h3_8};

/* the rest of attend_h after the scores (pair i's in att + i·as, over np[i] positions, its output at
 * outp[i]; np grows with i): each pair's softmax over its own positions, weights scaled by 1 / sum in
 * place, then the weighted sums of the values, a chunk of value rows at a time, pairs side by side */
static inline __attribute__((always_inline)) void softmax_wsum(float *const *outp, const int *np, int nq, int nmax,
                                                                const uint16_t *vc, float *att, size_t as,
                                                                const int HD)
{
    const int NV = HD / 16, VR = vrows_h(HD), P = WSUM_P(NV);
    const wsum_fn *fns = NV == 4 ? wsum_nv4 : NV == 6 ? wsum_nv6 : wsum_nv8;
    /* the first PF_L2 bytes of values into L2 while the softmaxes run, the first chunk into L1 (pf_row) */
    const char *pf2 = (const char *)vc, *pf2e = pf2 + ((size_t)nmax * HD * 2 < PF_L2 ? (size_t)nmax * HD * 2 : PF_L2);
    for (int t = 0; t < VR && t < nmax; t++)
        pf_row((const char *)vc, t, 0, NV);
    for (int i = 0; i < nq; i++) {
        float *w = att + (size_t)i * as;
        int n = np[i];
        __m512 mx = _mm512_set1_ps(-INFINITY);
        int t = 0;
        for (; t + 16 <= n; t += 16)
            mx = _mm512_max_ps(mx, _mm512_loadu_ps(w + t));
        if (t < n)
            mx = _mm512_mask_max_ps(mx, (__mmask16)((1u << (n - t)) - 1), mx,
                                    _mm512_maskz_loadu_ps((__mmask16)((1u << (n - t)) - 1), w + t));
        __m512 inv = _mm512_set1_ps(softmax_exp_pf(w, n, _mm512_reduce_max_ps(mx), &pf2, pf2e));
        for (t = 0; t + 16 <= n; t += 16)
            _mm512_storeu_ps(w + t, _mm512_mul_ps(_mm512_loadu_ps(w + t), inv));
        if (t < n) {
            __mmask16 m = (__mmask16)((1u << (n - t)) - 1);
            _mm512_mask_storeu_ps(w + t, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, w + t), inv));
        }
    }
    /* weighted sums, a chunk of value rows at a time, in the fewest groups of up to P pairs, of even size
     * (8 heads as 4 + 4, not 7 + 1, whose one pair would wait on its own chains) */
    for (int t0 = 0; t0 < nmax; t0 += VR) {
        int nb = nmax - t0 < VR ? nmax - t0 : VR;
        /* the next chunk, fetched by the first weighted sum over this one */
        const char *pf = t0 + VR < nmax ? (const char *)(vc + (size_t)(t0 + VR) * HD) : NULL;
        int i = 0;
        while (i < nq && np[i] <= t0) /* pairs without positions in this chunk (np grows with i) */
            i++;
        for (int left = nq - i, groups = (left + P - 1) / P; groups > 0; groups--) {
            int pg = (left + groups - 1) / groups, te[WSUM_PMAX];
            const float *w[WSUM_PMAX];
            for (int p = 0; p < pg; p++)
                te[p] = np[i + p] < t0 + nb ? np[i + p] : t0 + nb, w[p] = att + (size_t)(i + p) * as;
            fns[pg](outp + i, w, te, vc + (size_t)t0 * HD, t0, pf);
            pf = NULL, i += pg, left -= pg;
        }
    }
}

/* ---- the scores ----
 * Up to PAIRS_T pairs at a time (their chains in registers); a pair stores only its own positions. Keys in
 * chunks of 16 KiB outside, groups of PAIRS_T pairs inside, so the keys are read from memory once for all
 * groups. Measured on the Emerald Rapids machine (one thread, 16 rows x 7 heads of 64): faster than scores
 * with a pair per lane (the keys' rows broadcast, the score blocks transposed by gathers), 0.42 against
 * 0.46 ms after 2048 positions. 12 pairs, two key blocks at a time (24 chains, every broadcast query element
 * serving two FMAs), rather than 16 pairs over one block (a broadcast per FMA): on Zen 5, one thread, 7
 * heads of 64, the whole call 3-5 % faster at 8 and 16 rows after 512 and 4096 positions (10 and 14 pairs
 * were the same), the same bits. */
#define PAIRS_T 12

/* a block's 16 scores a · scale into dst, those of the pair's own positions (the first `left`) only */
static inline __attribute__((always_inline)) void store_scores(float *dst, int left, __m512 a, __m512 vs)
{
    if (left > 0)
        _mm512_mask_storeu_ps(dst, left < 16 ? (__mmask16)((1u << left) - 1) : (__mmask16)0xFFFF, _mm512_mul_ps(a, vs));
}

/* PG pairs' scores over the blocks from position ta (a multiple of 16) up to tb, the block of ta at kb; the
 * pairs' queries transposed, qt[c][PAIRS_T] (pair p's dimension c at qt[c·PAIRS_T + p]: its broadcasts are one pointer
 * plus constants; with a pointer per pair the loop spent a third of its vector-port operations moving
 * pointers into registers) */
static inline __attribute__((always_inline)) void scores_t(const float *qt, const int *np, float *const *ap,
                                                            const int PG, const uint16_t *kb, int ta, int tb,
                                                            float scale, const int HD)
{
    const __m512 vs = _mm512_set1_ps(scale);
    int t0 = ta;
    /* two blocks at a time, each broadcast query element serving both and twice the chains in flight (a
     * pair's chain alone waits on the fused multiply-add's latency): decode after 4096 positions, 7 heads,
     * 51 -> 49 us with the keys from DRAM, 47 -> 43 from cache. A dimension's line of the two blocks 8 KiB
     * on is fetched with it (at 4 KiB, 50 us) */
    for (; t0 + 16 < tb; t0 += 32) {
        const uint16_t *b = kb + (size_t)(t0 - ta) * HD;
        __m512 a[PAIRS_T], e[PAIRS_T];
#pragma GCC unroll 16
        for (int p = 0; p < PG; p++)
            a[p] = _mm512_setzero_ps(), e[p] = _mm512_setzero_ps();
        for (int c = 0; c < HD; c++) {
            _mm_prefetch((const char *)(b + c * 32) + 8192, _MM_HINT_T0);
            __m512 k = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(b + c * 16)));
            __m512 k2 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(b + 16 * HD + c * 16)));
#pragma GCC unroll 16
            for (int p = 0; p < PG; p++) {
                __m512 qb = _mm512_set1_ps(qt[c * PAIRS_T + p]);
                a[p] = _mm512_fmadd_ps(qb, k, a[p]);
                e[p] = _mm512_fmadd_ps(qb, k2, e[p]);
            }
        }
#pragma GCC unroll 16
        for (int p = 0; p < PG; p++) {
            store_scores(ap[p] + t0, np[p] - t0, a[p], vs);
            store_scores(ap[p] + t0 + 16, np[p] - t0 - 16, e[p], vs);
        }
    }
    for (; t0 < tb; t0 += 16) {
        const uint16_t *b = kb + (size_t)(t0 - ta) * HD;
        __m512 a[PAIRS_T]; /* the last block alone */
#pragma GCC unroll 16
        for (int p = 0; p < PG; p++)
            a[p] = _mm512_setzero_ps();
        for (int c = 0; c < HD; c++) {
            if (!(c & 1)) /* the block 4 KiB ahead, a line per two dimensions */
                _mm_prefetch((const char *)(b + c * 16) + 4096, _MM_HINT_T0);
            __m512 k = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(b + c * 16)));
#pragma GCC unroll 16
            for (int p = 0; p < PG; p++)
                a[p] = _mm512_fmadd_ps(_mm512_set1_ps(qt[c * PAIRS_T + p]), k, a[p]);
        }
#pragma GCC unroll 16
        for (int p = 0; p < PG; p++)
            store_scores(ap[p] + t0, np[p] - t0, a[p], vs);
    }
}

#define SCORES_T(PG, HD)                                                                                               \
    static void scores_t##PG##_##HD(const float *qt, const int *np, float *const *ap, const uint16_t *kb, int ta,     \
                                    int tb, float scale)                                                               \
    {                                                                                                                  \
        scores_t(qt, np, ap, PG, kb, ta, tb, scale, HD);                                                               \
    }
#define SCORES_HD(HD)                                                                                                  \
    SCORES_T(1, HD) SCORES_T(2, HD) SCORES_T(3, HD) SCORES_T(4, HD) SCORES_T(5, HD) SCORES_T(6, HD) SCORES_T(7, HD)    \
    SCORES_T(8, HD) SCORES_T(9, HD) SCORES_T(10, HD) SCORES_T(11, HD) SCORES_T(12, HD)                                 \
    static const kern_scores_fn scores_hd##HD[PAIRS_T + 1] = {                                                         \
        0,              scores_t1_##HD,  scores_t2_##HD,  scores_t3_##HD,  scores_t4_##HD,  scores_t5_##HD,            \
        scores_t6_##HD, scores_t7_##HD,  scores_t8_##HD,  scores_t9_##HD,  scores_t10_##HD, scores_t11_##HD,           \
        scores_t12_##HD};                                                                                              \
    static void softmax_wsum##HD(float *const *outp, const int *np, int nq, int nmax, const uint16_t *vc, float *att,  \
                                 size_t as)                                                                            \
    {                                                                                                                  \
        softmax_wsum(outp, np, nq, nmax, vc, att, as, HD);                                                             \
    }
SCORES_HD(64) SCORES_HD(96) SCORES_HD(128)

/* attend_h (kc, the plain cache) or attend_ht (kt, the transposed one), hd one of KERN_ATTEND_HD's sizes */
static void attend_t(float *q, size_t qs, int rows, int g, const uint16_t *kt, const uint16_t *kc, const uint16_t *vc,
                     int n0, int hd, float scale, float *att, size_t as)
{
    const kern_scores_fn *fns = hd == 64 ? scores_hd64 : hd == 96 ? scores_hd96 : scores_hd128;
    const int NQ = nq_h(hd);
    if (g > NQ) { /* more heads than a call takes: each row alone, in calls of NQ heads */
        for (int r = 0; r < rows; r++)
            for (int h0 = 0; h0 < g; h0 += NQ)
                attend_t(q + (size_t)r * qs + (size_t)h0 * hd, qs, 1, g - h0 < NQ ? g - h0 : NQ, kt, kc, vc, n0 + r, hd,
                         scale, att, as);
        return;
    }
    if (rows * g > NQ) { /* in two calls: the same bits for every row */
        int r = rows / 2;
        attend_t(q, qs, r, g, kt, kc, vc, n0, hd, scale, att, as);
        attend_t(q + (size_t)r * qs, qs, rows - r, g, kt, kc, vc, n0 + r, hd, scale, att, as);
        return;
    }
    const int nq = rows * g, nmax = n0 + rows - 1;
    float *outp[NQ_H], *ap[NQ_H];
    int np[NQ_H];
    for (int i = 0; i < nq; i++)
        outp[i] = q + (size_t)(i / g) * qs + (size_t)(i % g) * hd, np[i] = n0 + i / g, ap[i] = att + (size_t)i * as;
    /* group i / PAIRS_T's transposed queries at qt + (i / PAIRS_T) · hd · PAIRS_T: nq · hd <= NQ_H · 64 floats,
     * plus the last group's unused lanes */
    float qt[NQ_H * 64 + (PAIRS_T - 1) * HD_MAX] __attribute__((aligned(64)));
    for (int i = 0; i < nq; i++)
        for (int c = 0; c < hd; c++)
            qt[(size_t)(i / PAIRS_T) * hd * PAIRS_T + (size_t)c * PAIRS_T + i % PAIRS_T] = outp[i][c];
    kern_scores_chunks(fns, PAIRS_T, qt, (size_t)hd * PAIRS_T, np, ap, nq, kt, kc, nmax, hd, scale);
    (hd == 64 ? softmax_wsum64 : hd == 96 ? softmax_wsum96 : softmax_wsum128)(outp, np, nq, nmax, vc, att, as);
}

void kern_attend_h_avx512(float *q, size_t qs, int rows, int g, const uint16_t *kc, const uint16_t *vc, int n0, int hd,
                          float scale, float *att, size_t as)
{
    if (!KERN_ATTEND_HD(hd)) {
        kern_attend_h_avx2(q, qs, rows, g, kc, vc, n0, hd, scale, att, as);
        return;
    }
    attend_t(q, qs, rows, g, NULL, kc, vc, n0, hd, scale, att, as);
}

/* hd is one of KERN_ATTEND_HD's sizes (model.c keeps the transposed keys only for those) */
void kern_attend_ht_avx512(float *q, size_t qs, int rows, int g, const uint16_t *kt, const uint16_t *vc, int n0, int hd,
                           float scale, float *att, size_t as)
{
    attend_t(q, qs, rows, g, kt, NULL, vc, n0, hd, scale, att, as);
}

/* ---- attend_ext: the families with soft-capped scores or a sliding window (Gemma 2) ----
 * One query row per head over positions [t0, n) of an fp32 or fp16 cache (head_dim a multiple of 16, at
 * most 256; other sizes: kern_attend_ext_ref): scores as chains of fused multiply-adds over the head,
 * scaled, soft-capped 16 at a time (cap · tanh(s / cap), tanh from the vector exp), softmax, weighted sum. */
static inline __attribute__((always_inline)) __m512 kv16(const void *c, size_t off, const int H)
{
    return H ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)c + off)))
             : _mm512_loadu_ps((const float *)c + off);
}

/* cap · tanh(x / cap) = cap · sign(x) · (1 - e) / (1 + e), e = e^(-2|x| / cap) */
static inline __m512 softcap512(__m512 x, float cap)
{
    __m512 a = _mm512_abs_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.0f / cap)));
    __m512 e = exp512(_mm512_mul_ps(a, _mm512_set1_ps(-2.0f)));
    __m512 one = _mm512_set1_ps(1.0f);
    __m512 t = _mm512_div_ps(_mm512_sub_ps(one, e), _mm512_add_ps(one, e));
    __m512 sign = _mm512_and_ps(x, _mm512_castsi512_ps(_mm512_set1_epi32((int)0x80000000u)));
    return _mm512_mul_ps(_mm512_or_ps(t, sign), _mm512_set1_ps(cap));
}

static inline __attribute__((always_inline)) void attend_ext_one(float *q, const void *kc, const void *vc, int t0, int n,
                                                                 int hd, float scale, float cap, float *att, const int H)
{
    int nv = hd / 16, m = n - t0;
    __m512 qv[16];
    for (int i = 0; i < nv; i++)
        qv[i] = _mm512_loadu_ps(q + 16 * i);
    for (int t = t0; t < n; t++) {
        size_t base = (size_t)t * hd;
        __m512 acc = _mm512_mul_ps(qv[0], kv16(kc, base, H));
        for (int i = 1; i < nv; i++)
            acc = _mm512_fmadd_ps(qv[i], kv16(kc, base + 16 * (size_t)i, H), acc);
        att[t - t0] = _mm512_reduce_add_ps(acc) * scale;
    }
    __m512 vmx = _mm512_set1_ps(-INFINITY);
    int t = 0;
    for (; t < m; t += 16) {
        __mmask16 k = m - t >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (m - t)) - 1);
        __m512 s = _mm512_maskz_loadu_ps(k, att + t);
        if (cap > 0) {
            s = softcap512(s, cap);
            _mm512_mask_storeu_ps(att + t, k, s);
        }
        vmx = _mm512_mask_max_ps(vmx, k, vmx, s);
    }
    float inv = softmax_exp(att, m, _mm512_reduce_max_ps(vmx));
    __m512 o[16];
    for (int i = 0; i < nv; i++)
        o[i] = _mm512_setzero_ps();
    for (int u = 0; u < m; u++) {
        __m512 a = _mm512_set1_ps(att[u] * inv);
        size_t base = (size_t)(t0 + u) * hd;
        for (int i = 0; i < nv; i++)
            o[i] = _mm512_fmadd_ps(a, kv16(vc, base + 16 * (size_t)i, H), o[i]);
    }
    for (int i = 0; i < nv; i++)
        _mm512_storeu_ps(q + 16 * i, o[i]);
}

void kern_attend_ext_avx512(float *q, int g, const void *kc, const void *vc, int f16, int t0, int n, int hd, float scale,
                            float cap, float *att, size_t as)
{
    if (hd % 16 || hd > 256 || n <= t0) {
        kern_attend_ext(q, g, kc, vc, f16, t0, n, hd, scale, cap, att, as);
        return;
    }
    for (int i = 0; i < g; i++)
        if (f16)
            attend_ext_one(q + (size_t)i * hd, kc, vc, t0, n, hd, scale, cap, att + (size_t)i * as, 1);
        else
            attend_ext_one(q + (size_t)i * hd, kc, vc, t0, n, hd, scale, cap, att + (size_t)i * as, 0);
}
