/* The q8 operation of the avx2 row: kern_q8_avx512's method in 256-bit lanes (see q8_avx512.c). AVX2 has no
 * unsigned x signed byte product without saturation, so KERN_I8 multiplies the signed codes (code − 128) by
 * the activations through VPMADDUBSW on |code − 128| and the activations carrying the codes' signs (each pair
 * sum at most 2·128·127 < 2^15: never saturates), then VPMADDWD to int32 lanes, and adds 128·Σq per lane back
 * in integers: each lane holds Σ code·q exactly, as VPDPBUSD's, before it is converted and scaled (so the
 * rounding is of the same magnitudes as the avx512 row's, and kern_ref_bound holds for both). */
#include <immintrin.h>

#include "kern_int.h"

#define SEG 256

static float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static float row_i8(const kern_job *j, const uint8_t *cr, uint32_t n, int m)
{
    const ogk_qtensor *W = j->W;
    const uint32_t B = W->block, kb = W->k_blocks;
    const int8_t *xq = j->xq + (size_t)m * j->kp;
    const float *xd = j->xd + (size_t)m * kb;
    const int32_t *qs = j->xqs + (size_t)m * kb;
    const __m256i bias = _mm256_set1_epi8((char)0x80), ones = _mm256_set1_epi16(1), one8 = _mm256_set1_epi8(1);
    const __m256i idx = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1); /* B = 16: two groups a 32-byte chunk */
    __m256 acc = _mm256_setzero_ps();
    float corr = 0.0f;
    float f[SEG + 8];
    for (uint32_t s0 = 0; s0 < kb; s0 += SEG) {
        uint32_t ns = kb - s0 < SEG ? kb - s0 : SEG;
        for (uint32_t g = 0; g < ns; g++) {
            size_t gi = (size_t)n * kb + s0 + g;
            f[g] = kern_scale_at(W, gi) * xd[s0 + g];
            corr += f[g] * (float)((W->has_zp ? W->zeros[gi] : 128) * qs[s0 + g]);
        }
        for (uint32_t g = ns; g < ns + 8; g++)
            f[g] = 0.0f;
        const size_t b0 = (size_t)s0 * B, b1 = b0 + (size_t)ns * B; /* a multiple of 16 */
        for (size_t b = b0; b < b1; b += 32) {
            __m256i c, x;
            if (b + 32 <= b1) {
                c = _mm256_loadu_si256((const __m256i *)(cr + b));
                x = _mm256_loadu_si256((const __m256i *)(xq + b));
            } else { /* the last 16 bytes */
                c = _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(cr + b)));
                c = _mm256_inserti128_si256(c, _mm_set1_epi8((char)0x80), 1); /* code 128: signed 0 */
                x = _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)(xq + b)));
            }
            __m256i sc = _mm256_xor_si256(c, bias); /* code − 128 as int8 */
            __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(sc), _mm256_sign_epi8(x, sc));
            __m256i sq = _mm256_madd_epi16(_mm256_maddubs_epi16(one8, x), ones); /* Σq of the lane's 4 bytes */
            __m256i d = _mm256_add_epi32(_mm256_madd_epi16(p, ones), _mm256_slli_epi32(sq, 7)); /* Σ code·q */
            uint32_t g0 = (uint32_t)((b - b0) / B);
            __m256 fv = B >= 32 ? _mm256_set1_ps(f[g0]) : _mm256_permutevar8x32_ps(_mm256_loadu_ps(f + g0), idx);
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), fv, acc);
        }
    }
    return hsum8(acc) - corr;
}

static float row_f32(const kern_job *j, const uint8_t *cr, uint32_t n, int m)
{
    const ogk_qtensor *W = j->W;
    const uint32_t B = W->block, kb = W->k_blocks;
    const float *x = j->xf + (size_t)m * j->kp, *xs = j->xs + (size_t)m * kb;
    __m256 acc = _mm256_setzero_ps();
    float corr = 0.0f;
    for (uint32_t g = 0; g < kb; g++) {
        size_t gi = (size_t)n * kb + g;
        float s = kern_scale_at(W, gi);
        corr += s * (float)(W->has_zp ? W->zeros[gi] : 128) * xs[g];
        __m256 p = _mm256_setzero_ps();
        for (uint32_t c = g * B; c < g * B + B; c += 8) {
            __m256 w = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(cr + c))));
            p = _mm256_fmadd_ps(w, _mm256_loadu_ps(x + c), p);
        }
        acc = _mm256_fmadd_ps(p, _mm256_set1_ps(s), acc);
    }
    return hsum8(acc) - corr;
}

void kern_q8_avx2(const kern_job *j, uint32_t n0, uint32_t n1)
{
    for (uint32_t n = n0; n < n1; n++) {
        const uint8_t *cr = j->W->codes + (size_t)n * j->kp;
        for (int m = 0; m < j->M; m++)
            j->Y[(size_t)m * j->ldy + n] = j->mode == KERN_I8 ? row_i8(j, cr, n, m) : row_f32(j, cr, n, m);
    }
}
