/* AVX-512 VNNI kernels of the KERN_I16 mode (16-bit activations) for the b8 layout, and its
 * activation quantisation. The model uses the mode for the classifier of passes of several rows
 * (verify passes, teacher forcing), where fp32 activations would cost ~4x the int8 work per weight.
 *
 * Each activation group is quantised to Q in [-32258, 32258] (d = max|x| / 32258) and split exactly
 * into two int8 planes, Q = 254·q1 + q2 with q1, q2 in [-127, 127]; vpdpbusd multiplies the unsigned
 * 4-bit codes with each plane, and per group the int32 sums combine as 254·Σcode·q1 + Σcode·q2 =
 * Σcode·Q (exact in int32 for B <= 4096: 15·32258·4096 < 2^31). Tiles: RB = 2 row blocks x MT <= 4
 * activation rows, two int32 accumulators (one per plane) per pair, fp32 sums in memory.
 * Same chunk format as kern_avx512.c (16 rows x 8 k per 64 bytes, low/high nibbles). */
#include "b8_avx512.h"

#include <string.h>


INLINE __m512i bcast4(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

INLINE void tile_i16_body(const kern_job *j, uint32_t rb, const int RB, const int MT, int m0, const uint32_t B)
{
    const ogk_qtensor *W = j->W;
    const uint32_t kb = W->k_blocks, kp = j->kp, cpg = B / 8;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    float y[2][4][16] __attribute__((aligned(64)));
    __m512i a1[2][4], a2[2][4];
    const uint8_t *cb[2];
#pragma GCC unroll 2
    for (int r = 0; r < RB; r++) {
        cb[r] = W->codes + (size_t)(rb + r) * kb * B * 8;
#pragma GCC unroll 4
        for (int m = 0; m < MT; m++)
            _mm512_store_ps(y[r][m], _mm512_setzero_ps());
    }
    for (uint32_t g = 0; g < kb; g++) {
        if (PF_BYTES)
            prefetch_groups(W, rb, RB, g);
#pragma GCC unroll 2
        for (int r = 0; r < RB; r++)
#pragma GCC unroll 4
            for (int m = 0; m < MT; m++)
                a1[r][m] = a2[r][m] = _mm512_setzero_si512();
        const int8_t *p1[4], *p2[4];
#pragma GCC unroll 4
        for (int m = 0; m < MT; m++) {
            p1[m] = j->xq + (size_t)(m0 + m) * kp + (size_t)g * B;
            p2[m] = j->xq2 + (size_t)(m0 + m) * kp + (size_t)g * B;
        }
#pragma GCC unroll 16
        for (uint32_t c = 0; c < cpg; c++) {
            __m512i lo[2], hi[2];
#pragma GCC unroll 2
            for (int r = 0; r < RB; r++) {
                const uint8_t *cp = cb[r] + ((size_t)g * cpg + c) * 64;
                __m512i w = _mm512_loadu_si512(cp);
                if (PF_BYTES)
                    _mm_prefetch((const char *)cp + PF_BYTES, PF_HINT);
                lo[r] = _mm512_and_si512(w, m4);
                hi[r] = _mm512_and_si512(_mm512_srli_epi16(w, 4), m4);
            }
#pragma GCC unroll 4
            for (int m = 0; m < MT; m++) {
                const __m512i b1l = bcast4(p1[m] + c * 8), b1h = bcast4(p1[m] + c * 8 + 4);
                const __m512i b2l = bcast4(p2[m] + c * 8), b2h = bcast4(p2[m] + c * 8 + 4);
#pragma GCC unroll 2
                for (int r = 0; r < RB; r++) {
                    a1[r][m] = _mm512_dpbusd_epi32(a1[r][m], lo[r], b1l);
                    a2[r][m] = _mm512_dpbusd_epi32(a2[r][m], lo[r], b2l);
                    a1[r][m] = _mm512_dpbusd_epi32(a1[r][m], hi[r], b1h);
                    a2[r][m] = _mm512_dpbusd_epi32(a2[r][m], hi[r], b2h);
                }
            }
        }
#pragma GCC unroll 2
        for (int r = 0; r < RB; r++) {
            size_t gi = ((size_t)(rb + r) * kb + g) * 16;
            __m512 s = load_scales(W, gi), z = load_zeros(W, gi);
#pragma GCC unroll 4
            for (int m = 0; m < MT; m++) {
                size_t xi = (size_t)(m0 + m) * kb + g;
                __m512 t = _mm512_fnmadd_ps(z, _mm512_set1_ps(j->xqf[xi]), dot_q(a1[r][m], a2[r][m]));
                _mm512_store_ps(y[r][m], _mm512_fmadd_ps(_mm512_mul_ps(s, _mm512_set1_ps(j->xd[xi])), t,
                                                         _mm512_load_ps(y[r][m])));
            }
        }
    }
#pragma GCC unroll 2
    for (int r = 0; r < RB; r++)
#pragma GCC unroll 4
        for (int m = 0; m < MT; m++)
            store_rows(j, rb + r, m0 + m, _mm512_load_ps(y[r][m]));
}

/* block 32 (the builder's default) with the group's chunk loop unrolled; other blocks with the loop */
INLINE void tile_i16(const kern_job *j, uint32_t rb, const int RB, const int MT, int m0)
{
    if (j->W->block == 32)
        tile_i16_body(j, rb, RB, MT, m0, 32);
    else
        tile_i16_body(j, rb, RB, MT, m0, j->W->block);
}

#define TILE16(RB, MT)                                                                                                 \
    static void i16_##RB##_##MT(const kern_job *j, uint32_t rb, int m0) { tile_i16(j, rb, RB, MT, m0); }
TILE16(1, 1)
TILE16(2, 1)
TILE16(2, 2)
TILE16(2, 3)
TILE16(2, 4)

/* M = 1 (decode's classifier): row blocks in memory order, so the codes are one linear stream (with
 * software prefetch), four int32 accumulators (two planes x low/high nibbles). Per group the same
 * exact integer Σ code·Q and the same fp32 operations as the tiles, so a row's logits have the same bits
 * in a pass of one row and in a pass of several (the server's batching relies on it). */
INLINE void gemv_i16_body(const kern_job *j, uint32_t rb0, uint32_t rb1, const uint32_t B)
{
    const ogk_qtensor *W = j->W;
    const uint32_t kb = W->k_blocks, cpg = B / 8;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const uint8_t *cp = W->codes + (size_t)rb0 * kb * B * 8;
    const size_t ss = ogk_dtype_size(W->scale_dtype);
    for (uint32_t rb = rb0; rb < rb1; rb++) {
        __m512 y = _mm512_setzero_ps();
        for (uint32_t g = 0; g < kb; g++, cp += B * 8) {
            const int8_t *p1 = j->xq + (size_t)g * B, *p2 = j->xq2 + (size_t)g * B;
            { /* the scales (and zero points) of the group PF_BYTES of codes ahead: their own streams */
                size_t ga = ((size_t)rb * kb + g) * 16 + (size_t)(PF_BYTES / (B * 8) + 1) * 16;
                _mm_prefetch((const char *)W->scales + ga * ss, PF_HINT);
                if (W->has_zp)
                    _mm_prefetch((const char *)W->zeros + ga, PF_HINT);
            }
            __m512i a1 = _mm512_setzero_si512(), b1 = a1, a2 = a1, b2 = a1;
#pragma GCC unroll 16
            for (uint32_t c = 0; c < cpg; c++) {
                __m512i w = _mm512_loadu_si512(cp + c * 64);
                _mm_prefetch((const char *)cp + c * 64 + PF_BYTES, PF_HINT);
                __m512i lo = _mm512_and_si512(w, m4), hi = _mm512_and_si512(_mm512_srli_epi16(w, 4), m4);
                a1 = _mm512_dpbusd_epi32(a1, lo, bcast4(p1 + c * 8));
                b1 = _mm512_dpbusd_epi32(b1, hi, bcast4(p1 + c * 8 + 4));
                a2 = _mm512_dpbusd_epi32(a2, lo, bcast4(p2 + c * 8));
                b2 = _mm512_dpbusd_epi32(b2, hi, bcast4(p2 + c * 8 + 4));
            }
            size_t gi = ((size_t)rb * kb + g) * 16;
            __m512 t = _mm512_fnmadd_ps(load_zeros(W, gi), _mm512_set1_ps(j->xqf[g]),
                                        dot_q(_mm512_add_epi32(a1, b1), _mm512_add_epi32(a2, b2)));
            y = _mm512_fmadd_ps(_mm512_mul_ps(load_scales(W, gi), _mm512_set1_ps(j->xd[g])), t, y);
        }
        store_rows(j, rb, 0, y);
    }
}

static void gemv_i16_32(const kern_job *j, uint32_t rb0, uint32_t rb1) { gemv_i16_body(j, rb0, rb1, 32); }
static void gemv_i16_128(const kern_job *j, uint32_t rb0, uint32_t rb1) { gemv_i16_body(j, rb0, rb1, 128); }
static void gemv_i16_any(const kern_job *j, uint32_t rb0, uint32_t rb1) { gemv_i16_body(j, rb0, rb1, j->W->block); }

void kern_b8_i16_avx512(const kern_job *j, uint32_t rb0, uint32_t rb1)
{
    if (j->M == 1) {
        (j->W->block == 32 ? gemv_i16_32 : j->W->block == 128 ? gemv_i16_128 : gemv_i16_any)(j, rb0, rb1);
        return;
    }
    typedef void (*fn)(const kern_job *, uint32_t, int);
    static const fn tiles[] = {0, i16_2_1, i16_2_2, i16_2_3, i16_2_4};
    uint32_t rb = rb0;
    for (; rb + 2 <= rb1; rb += 2)
        for (int m0 = 0; m0 < j->M; m0 += 4)
            tiles[j->M - m0 < 4 ? j->M - m0 : 4](j, rb, m0);
    for (; rb < rb1; rb++)
        for (int m0 = 0; m0 < j->M; m0++)
            i16_1_1(j, rb, m0);
}

void kern_quant_rows_i16_avx512(const float *x, int M, uint32_t k, uint32_t block, int8_t *q1, int8_t *q2, float *d,
                                int32_t *qs)
{
    uint32_t kb = (k + block - 1) / block;
    size_t kp = (size_t)kb * block;
    const __m512i c127 = _mm512_set1_epi32(127), c254 = _mm512_set1_epi32(254);
    const __m512 f254 = _mm512_set1_ps(254.0f);
    for (int m = 0; m < M; m++, x += k, q1 += kp, q2 += kp, d += kb, qs += kb) {
        for (uint32_t g = 0; g < kb; g++) {
            uint32_t c0 = g * block;
            float amax = group_amax(x, c0, block, k);
            float inv = amax > 0.0f ? 32258.0f / amax : 0.0f;
            __m512 vi = _mm512_set1_ps(inv);
            __m512i s = _mm512_setzero_si512();
            for (uint32_t c = c0; c < c0 + block; c += 16) {
                __mmask16 mk = tail_mask(c, k);
                __m512i Q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(mk, x + c), vi));
                __m512 f = _mm512_div_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(Q, c127)), f254);
                __m512i h = _mm512_cvtps_epi32(_mm512_roundscale_ps(f, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC));
                __m512i l = _mm512_sub_epi32(Q, _mm512_mullo_epi32(h, c254));
                s = _mm512_add_epi32(s, Q);
                _mm_storeu_si128((__m128i *)(q1 + c), _mm512_cvtepi32_epi8(h));
                _mm_storeu_si128((__m128i *)(q2 + c), _mm512_cvtepi32_epi8(l));
            }
            d[g] = amax / 32258.0f;
            qs[g] = _mm512_reduce_add_epi32(s);
        }
    }
}
