/* AVX2 dequantisation of b8 and rm row windows (the dequant operation of the avx2 and avx512 rows of
 * the ISA table): the same (float)(code - zp) * scale as kern_dequant_rows_ref (int -> float is exact
 * for these values, and the one multiply rounds once, no FMA), so the results are bit-identical. */
#include <immintrin.h>
#include <string.h>

#include "kern_int.h"

static void dequant_b8(const ogk_qtensor *t, uint32_t row0, uint32_t nrows, float *out)
{
    uint32_t K = t->k, B = t->block, kb = t->k_blocks, r1 = row0 + nrows;
    const __m256i shifts = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4), low4 = _mm256_set1_epi32(15);
    for (uint32_t rb = row0 / 16; rb * 16 < r1; rb++) {
        uint32_t ra = rb * 16 < row0 ? row0 - rb * 16 : 0, rz = rb * 16 + 16 > r1 ? r1 - rb * 16 : 16;
        for (uint32_t g = 0; g < kb; g++) {
            size_t gi = ((size_t)rb * kb + g) * 16;
            const uint8_t *chunk = t->codes + gi / 16 * (size_t)B * 8;
            uint32_t cols = g * B + B <= K ? B : K - g * B;
            for (uint32_t r = ra; r < rz; r++) {
                float sc = kern_scale_at(t, gi + r);
                int zp = t->has_zp ? t->zeros[gi + r] : 8;
                float *o = out + (size_t)(rb * 16 + r - row0) * K + (size_t)g * B;
                const uint8_t *p = chunk + r * 4;
                if (cols == B) {
                    const __m256 scv = _mm256_set1_ps(sc);
                    const __m256i zpv = _mm256_set1_epi32(zp);
                    for (uint32_t c = 0; c < B / 8; c++, p += 64, o += 8) {
                        int32_t x;
                        memcpy(&x, p, 4);
                        __m256i q = _mm256_cvtepu8_epi32(_mm_set1_epi32(x)); /* b0 b1 b2 b3 b0 b1 b2 b3 */
                        q = _mm256_and_si256(_mm256_srlv_epi32(q, shifts), low4);
                        _mm256_storeu_ps(o, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(q, zpv)), scv));
                    }
                } else {
                    for (uint32_t w = 0; w < cols; w++) {
                        uint8_t b = p[(w / 8) * 64 + (w & 3)];
                        o[w] = (float)((int)((w & 4) ? b >> 4 : b & 15) - zp) * sc;
                    }
                }
            }
        }
    }
}

/* rm: element (R, c) of a tile is byte (R/16)*2048 + c*8 + (R%16)/2, low nibble for even R. Eight
 * consecutive c are the low dwords' first bytes of 64 consecutive bytes; the last 8 columns of a row
 * in a tile are done in scalar code so no load reaches past the byte the layout puts last. */
static void dequant_rm(const ogk_qtensor *t, uint32_t row0, uint32_t nrows, float *out)
{
    uint32_t K = t->k, B = t->block, kb = t->k_blocks, r1 = row0 + nrows;
    uint32_t ntc = (kb * B + 255) / 256, gpt = 256 / B;
    const __m256i order = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7), low4 = _mm256_set1_epi32(15);
    for (uint32_t tr = row0 / 32; tr * 32 < r1; tr++) {
        uint32_t ra = tr * 32 < row0 ? row0 - tr * 32 : 0, rz = tr * 32 + 32 > r1 ? r1 - tr * 32 : 32;
        for (uint32_t tc = 0; tc < ntc; tc++) {
            size_t tile = (size_t)tr * ntc + tc;
            const uint8_t *tp = t->codes + tile * 4096;
            uint32_t cols = tc * 256 + 256 <= K ? 256 : K - tc * 256;
            for (uint32_t R = ra; R < rz; R++) {
                float *o = out + (size_t)(tr * 32 + R - row0) * K + (size_t)tc * 256;
                const uint8_t *p = tp + (R / 16) * 2048 + (R % 16) / 2;
                int sh = (R & 1) * 4;
                const __m256i shv = _mm256_set1_epi32(sh);
                for (uint32_t cg = 0; cg * B < cols; cg++) {
                    size_t gi = tile * gpt * 32 + (size_t)cg * 32 + R;
                    float sc = kern_scale_at(t, gi);
                    int zp = t->has_zp ? t->zeros[gi] : 8;
                    const __m256 scv = _mm256_set1_ps(sc);
                    const __m256i zpv = _mm256_set1_epi32(zp);
                    uint32_t c = cg * B, c1 = cg * B + B < cols ? cg * B + B : cols;
                    for (; c + 8 <= c1 && c + 8 < cols; c += 8) {
                        __m256i v0 = _mm256_loadu_si256((const __m256i *)(p + (size_t)c * 8));
                        __m256i v1 = _mm256_loadu_si256((const __m256i *)(p + (size_t)c * 8 + 32));
                        __m256i d = _mm256_castps_si256(
                            _mm256_shuffle_ps(_mm256_castsi256_ps(v0), _mm256_castsi256_ps(v1), _MM_SHUFFLE(2, 0, 2, 0)));
                        d = _mm256_permutevar8x32_epi32(d, order);
                        __m256i q = _mm256_and_si256(_mm256_srlv_epi32(d, shv), low4);
                        _mm256_storeu_ps(o + c, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(q, zpv)), scv));
                    }
                    for (; c < c1; c++)
                        o[c] = (float)((int)((p[(size_t)c * 8] >> sh) & 15) - zp) * sc;
                }
            }
        }
    }
}

void kern_dequant_rows_avx2(const ogk_qtensor *t, uint32_t row0, uint32_t nrows, float *out)
{
    if (t->layout == OGK_B8)
        dequant_b8(t, row0, nrows, out);
    else
        dequant_rm(t, row0, nrows, out);
}
