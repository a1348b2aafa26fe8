/* AVX2 kernels of the KERN_I16 mode (16-bit activations as two int8 planes, kern.h) for the b8 layout,
 * and its activation quantisation. The model uses the mode for the classifier of passes of several
 * rows in --mode i8, where fp32 activations cost several times the integer work per weight.
 *
 * Per 32-row half chunk (8 rows x 8 k of a 64-byte chunk, as kern_avx2.c) and activation row:
 * vpmaddubsw of the unsigned 4-bit codes against each plane's 4 broadcast bytes gives int16 pair sums
 * (low + high nibble sums <= 2·2·15·127 = 7620: no saturation); vpmaddwd widens them, the q1 plane's
 * with 254 and the q2 plane's with 1, so the one int32 accumulator holds 254·Σcode·q1 + Σcode·q2 =
 * Σcode·Q exactly (|Σ| <= 15·32258·4096 < 2^31 for B <= 4096; a pair's 2·7620·254 fits too).
 * Per group: y += scale·d·(Σcode·Q − zp·ΣQ), the same fp32 operations as the AVX-512 path. */
#include "b8_avx2.h"

#include <math.h>

INLINE __m256i bcast4(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* one half (8 rows) of a row block at a time, MT <= 4 activation rows: 4 accumulators, 4 fp32 sums,
 * the codes and 3 constants stay in the 16 ymm registers */
INLINE void tile_i16(const kern_job *j, uint32_t rb, const int MT, int m0)
{
    const ogk_qtensor *W = j->W;
    const uint32_t B = W->block, kb = W->k_blocks, kp = j->kp, cpg = B / 8;
    const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1), w254 = _mm256_set1_epi16(254);
    const uint8_t *cb = W->codes + (size_t)rb * kb * B * 8;
    for (int h = 0; h < 2; h++) {
        __m256 y[4];
#pragma GCC unroll 4
        for (int m = 0; m < MT; m++)
            y[m] = _mm256_setzero_ps();
        for (uint32_t g = 0; g < kb; g++) {
            __m256i a[4];
            const int8_t *p1[4], *p2[4];
#pragma GCC unroll 4
            for (int m = 0; m < MT; m++) {
                a[m] = _mm256_setzero_si256();
                p1[m] = j->xq + (size_t)(m0 + m) * kp + (size_t)g * B;
                p2[m] = j->xq2 + (size_t)(m0 + m) * kp + (size_t)g * B;
            }
            const uint8_t *p = cb + (size_t)g * cpg * 64 + 32 * h;
            for (uint32_t c = 0; c < cpg; c++, p += 64) {
                __m256i w = _mm256_loadu_si256((const __m256i *)p);
                __m256i lo = _mm256_and_si256(w, m4), hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), m4);
#pragma GCC unroll 4
                for (int m = 0; m < MT; m++) {
                    __m256i s1 = _mm256_add_epi16(_mm256_maddubs_epi16(lo, bcast4(p1[m] + c * 8)),
                                                  _mm256_maddubs_epi16(hi, bcast4(p1[m] + c * 8 + 4)));
                    __m256i s2 = _mm256_add_epi16(_mm256_maddubs_epi16(lo, bcast4(p2[m] + c * 8)),
                                                  _mm256_maddubs_epi16(hi, bcast4(p2[m] + c * 8 + 4)));
                    a[m] = _mm256_add_epi32(a[m], _mm256_add_epi32(_mm256_madd_epi16(s1, w254),
                                                                   _mm256_madd_epi16(s2, ones)));
                }
            }
            size_t gi = ((size_t)rb * kb + g) * 16 + 8 * h;
            __m256 s = load_scales(W, gi), z = load_zeros(W, gi);
#pragma GCC unroll 4
            for (int m = 0; m < MT; m++) {
                size_t xi = (size_t)(m0 + m) * kb + g;
                y[m] = group_fma(y[m], s, z, a[m], j, xi);
            }
        }
#pragma GCC unroll 4
        for (int m = 0; m < MT; m++)
            store_rows(j, rb * 16 + 8 * h, m0 + m, y[m]);
    }
}

#define TILE16(MT)                                                                                                     \
    static void i16_##MT(const kern_job *j, uint32_t rb, int m0) { tile_i16(j, rb, MT, m0); }
TILE16(1)
TILE16(2)
TILE16(3)
TILE16(4)

void kern_b8_i16_avx2(const kern_job *j, uint32_t rb0, uint32_t rb1)
{
    typedef void (*fn)(const kern_job *, uint32_t, int);
    static const fn tiles[] = {0, i16_1, i16_2, i16_3, i16_4};
    for (uint32_t rb = rb0; rb < rb1; rb++)
        for (int m0 = 0; m0 < j->M; m0 += 4)
            tiles[j->M - m0 < 4 ? j->M - m0 : 4](j, rb, m0);
}

/* kern_quant_row_i16's arithmetic 8 lanes at a time (the same amax, x·(32258/amax) rounded to nearest
 * even, the same fp32 division and floor for the high plane): bit-identical to it */
void kern_quant_rows_i16_avx2(const float *x, int M, uint32_t k, uint32_t block, int8_t *q1, int8_t *q2, float *d,
                              int32_t *qs)
{
    uint32_t kb = (k + block - 1) / block;
    size_t kp = (size_t)kb * block;
    const __m256 f254 = _mm256_set1_ps(254.0f);
    const __m256i c127 = _mm256_set1_epi32(127), c254 = _mm256_set1_epi32(254);
    for (int m = 0; m < M; m++, x += k, q1 += kp, q2 += kp, d += kb, qs += kb) {
        for (uint32_t g = 0; g < kb; g++) {
            uint32_t c0 = g * block, c1 = c0 + block < k ? c0 + block : k, c;
            float amax = group_amax(x, c0, c1);
            float inv = amax > 0.0f ? 32258.0f / amax : 0.0f;
            __m256 vi = _mm256_set1_ps(inv);
            __m256i s = _mm256_setzero_si256();
            for (c = c0; c + 8 <= c1; c += 8) {
                __m256i Q = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + c), vi));
                __m256 f = _mm256_div_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(Q, c127)), f254);
                __m256i hi = _mm256_cvtps_epi32(_mm256_floor_ps(f));
                __m256i lo = _mm256_sub_epi32(Q, _mm256_mullo_epi32(hi, c254));
                s = _mm256_add_epi32(s, Q);
                __m128i h16 = _mm_packs_epi32(_mm256_castsi256_si128(hi), _mm256_extracti128_si256(hi, 1));
                __m128i l16 = _mm_packs_epi32(_mm256_castsi256_si128(lo), _mm256_extracti128_si256(lo, 1));
                _mm_storel_epi64((__m128i *)(q1 + c), _mm_packs_epi16(h16, h16));
                _mm_storel_epi64((__m128i *)(q2 + c), _mm_packs_epi16(l16, l16));
            }
            int32_t sum = hsum_i32(s);
            for (; c < c1; c++) {
                int Q = (int)nearbyintf(x[c] * inv);
                int hv = (int)floorf((float)(Q + 127) / 254.0f);
                q1[c] = (int8_t)hv;
                q2[c] = (int8_t)(Q - 254 * hv);
                sum += Q;
            }
            for (c = c1; c < c0 + block; c++)
                q1[c] = q2[c] = 0;
            d[g] = amax / 32258.0f;
            qs[g] = sum;
        }
    }
}
