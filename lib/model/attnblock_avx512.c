/* Blocked causal attention for several query rows at consecutive positions (prefill chunks, verify
 * passes) with AVX-512, head_dim a multiple of 16 (<= 256): the g query heads of `rows` rows that
 * share one KV head walk the cache in tiles of 16 positions; each key tile is transposed once and
 * then serves every query of the block as a small GEMM (16 scores per query from head_dim FMAs, no
 * horizontal sums), with an online softmax (running max and sum per query, the output rescaled when
 * the max grows). Row r sees positions [0, n0 + r). The row-by-row version is attention_avx512.c. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "exp_avx512.h"
#include "model.h"

#define QMAX 64 /* queries per block: rows x heads */

static inline __m512 exp_neg(__m512 x) /* e^x for x <= 0, 0 below -80 (no subnormals) */
{
    __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-80.0f), _CMP_GE_OQ);
    return _mm512_maskz_mov_ps(keep, model_exp512(_mm512_max_ps(x, _mm512_set1_ps(-80.0f))));
}

/* kt[d][t] = k[t][d] for t < nt (0 beyond), d < hd: 16 x 16 blocks transposed in registers */
static inline void transpose_tile(const float *k, int nt, int hd, float *kt)
{
    for (int d0 = 0; d0 < hd; d0 += 16) {
        __m512 r[16], t[16], u[16];
        for (int i = 0; i < 16; i++)
            r[i] = i < nt ? _mm512_loadu_ps(k + (size_t)i * hd + d0) : _mm512_setzero_ps();
        for (int i = 0; i < 16; i += 2) { /* pairs of rows interleaved */
            t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
            t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
        }
        for (int i = 0; i < 16; i += 4) { /* u[i + e]: element e of every 128-bit lane, rows i..i+3 */
            u[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
            u[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
            u[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
            u[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
        }
        for (int e = 0; e < 4; e++) {
            __m512 x0 = _mm512_shuffle_f32x4(u[e], u[4 + e], 0x44), x1 = _mm512_shuffle_f32x4(u[e], u[4 + e], 0xEE);
            __m512 y0 = _mm512_shuffle_f32x4(u[8 + e], u[12 + e], 0x44), y1 = _mm512_shuffle_f32x4(u[8 + e], u[12 + e], 0xEE);
            _mm512_store_ps(kt + (size_t)(d0 + e) * 16, _mm512_shuffle_f32x4(x0, y0, 0x88));
            _mm512_store_ps(kt + (size_t)(d0 + 4 + e) * 16, _mm512_shuffle_f32x4(x0, y0, 0xDD));
            _mm512_store_ps(kt + (size_t)(d0 + 8 + e) * 16, _mm512_shuffle_f32x4(x1, y1, 0x88));
            _mm512_store_ps(kt + (size_t)(d0 + 12 + e) * 16, _mm512_shuffle_f32x4(x1, y1, 0xDD));
        }
    }
}

/* queries (r, i) at q + r*qstride + i*hd (hd = 16 nv), r < rows, i < g; rows * g <= QMAX; output over q */
static inline __attribute__((always_inline)) void block(float *q, size_t qstride, int rows, int g, const float *kc,
                                                        const float *vc, int n0, float scale, const int nv)
{
    const int hd = 16 * nv, nq = rows * g;
    float kt[256 * 16] __attribute__((aligned(64)));   /* K tile transposed: [d][16 positions] */
    float o[QMAX * 256] __attribute__((aligned(64)));  /* running outputs */
    float mx[QMAX], sum[QMAX], p[16] __attribute__((aligned(64)));
    for (int j = 0; j < nq; j++)
        mx[j] = -INFINITY, sum[j] = 0;
    memset(o, 0, sizeof(float) * (size_t)nq * hd);
    int nmax = n0 + rows - 1; /* positions the last row sees */
    for (int t0 = 0; t0 < nmax; t0 += 16) {
        int nt = nmax - t0 < 16 ? nmax - t0 : 16;
        transpose_tile(kc + (size_t)t0 * hd, nt, hd, kt);
        for (int r = 0; r < rows; r++) {
            int n = n0 + r; /* positions this row sees */
            if (t0 >= n)
                continue;
            __mmask16 live = n - t0 >= 16 ? 0xFFFF : (__mmask16)((1u << (n - t0)) - 1);
            for (int i = 0; i < g; i++) {
                int j = r * g + i;
                const float *qq = q + (size_t)r * qstride + (size_t)i * hd;
                __m512 a[8]; /* 8 independent FMA chains (latency, not throughput, bounds one chain) */
#pragma GCC unroll 8
                for (int u = 0; u < 8; u++)
                    a[u] = _mm512_mul_ps(_mm512_set1_ps(qq[u]), _mm512_load_ps(kt + u * 16));
                for (int d = 8; d < hd; d += 8)
#pragma GCC unroll 8
                    for (int u = 0; u < 8; u++)
                        a[u] = _mm512_fmadd_ps(_mm512_set1_ps(qq[d + u]), _mm512_load_ps(kt + (d + u) * 16), a[u]);
                __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3])),
                                         _mm512_add_ps(_mm512_add_ps(a[4], a[5]), _mm512_add_ps(a[6], a[7])));
                s = _mm512_mul_ps(s, _mm512_set1_ps(scale));
                float tmax = _mm512_mask_reduce_max_ps(live, s);
                float mnew = tmax > mx[j] ? tmax : mx[j];
                float corr = mx[j] == -INFINITY ? 0.0f : expf(mx[j] - mnew);
                __m512 e = _mm512_maskz_mov_ps(live, exp_neg(_mm512_sub_ps(s, _mm512_set1_ps(mnew))));
                sum[j] = sum[j] * corr + _mm512_reduce_add_ps(e);
                mx[j] = mnew;
                _mm512_store_ps(p, e);
                float *oj = o + (size_t)j * hd;
                __m512 acc[16]; /* nv is a constant here: the accumulators live in registers */
                __m512 c = _mm512_set1_ps(corr);
#pragma GCC unroll 16
                for (int v = 0; v < nv; v++)
                    acc[v] = _mm512_mul_ps(_mm512_load_ps(oj + 16 * v), c);
                int tn = n - t0 < 16 ? n - t0 : 16;
                for (int t = 0; t < tn; t++) {
                    const float *vr = vc + (size_t)(t0 + t) * hd;
                    __m512 pt = _mm512_set1_ps(p[t]);
#pragma GCC unroll 16
                    for (int v = 0; v < nv; v++)
                        acc[v] = _mm512_fmadd_ps(pt, _mm512_loadu_ps(vr + 16 * v), acc[v]);
                }
#pragma GCC unroll 16
                for (int v = 0; v < nv; v++)
                    _mm512_store_ps(oj + 16 * v, acc[v]);
            }
        }
    }
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < g; i++) {
            int j = r * g + i;
            float *qq = q + (size_t)r * qstride + (size_t)i * hd;
            __m512 inv = _mm512_set1_ps(1.0f / sum[j]);
            for (int v = 0; v < nv; v++)
                _mm512_storeu_ps(qq + 16 * v, _mm512_mul_ps(_mm512_load_ps(o + (size_t)j * hd + 16 * v), inv));
        }
}

#define NV(n)                                                                                                          \
    static void block_##n(float *q, size_t qs, int rows, int g, const float *kc, const float *vc, int n0, float sc)  \
    {                                                                                                                  \
        block(q, qs, rows, g, kc, vc, n0, sc, n);                                                                      \
    }
NV(1) NV(2) NV(3) NV(4) NV(5) NV(6) NV(7) NV(8) NV(9) NV(10) NV(11) NV(12) NV(13) NV(14) NV(15) NV(16)

void model_attend_rows_avx512(float *q, size_t qstride, int rows, int g, const float *kc, const float *vc, int n0,
                              int hd, float scale)
{
    typedef void (*fn)(float *, size_t, int, int, const float *, const float *, int, float);
    static const fn by_nv[] = {0,        block_1,  block_2,  block_3,  block_4,  block_5,  block_6,  block_7, block_8,
                               block_9,  block_10, block_11, block_12, block_13, block_14, block_15, block_16};
    int rb = QMAX / g; /* rows per block */
    for (int r0 = 0; r0 < rows; r0 += rb)
        by_nv[hd / 16](q + (size_t)r0 * qstride, qstride, rows - r0 < rb ? rows - r0 : rb, g, kc, vc, n0 + r0, scale);
}
