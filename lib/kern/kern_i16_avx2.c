/* AVX2 kernels of the KERN_I16 mode (16-bit activations as two int8 planes, kern.h) for the b8 layout,
 * and its activation quantisation. The model uses the mode for the classifier of passes of several
 * rows in --mode i8, where fp32 activations cost several times the integer work per weight.
 *
 * The tiles are b8_avx2.h's tile_int with I16 (i16_dot8): per 32-byte half chunk (8 rows x 8 k) and
 * activation row, vpmaddubsw of the unsigned 4-bit codes against each plane's 4 broadcast bytes gives int16 pair sums
 * (low + high nibble sums <= 2·2·15·127 = 7620: no saturation); vpmaddwd widens them, the q1 plane's
 * with 254 and the q2 plane's with 1, so the one int32 accumulator holds 254·Σcode·q1 + Σcode·q2 =
 * Σcode·Q exactly (|Σ| <= 15·32258·4096 < 2^31 for B <= 4096; a pair's 2·7620·254 fits too).
 * Per group: y += scale·d·(Σcode·Q − zp·ΣQ), the same fp32 operations as the AVX-512 path. */
#include "b8_avx2.h"

#include <math.h>

#define TILE16(MT)                                                                                                     \
    static void i16_##MT(const kern_job *j, uint32_t rb, int m0) { tile_int(j, rb, MT, m0, 1); }
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
