/* lib/kern/b8_avx2.h — what the AVX2 b8 kernels share (kern_avx2.c, kern_i16_avx2.c), with their integer tile: a row block's
 * scales and zero points for 8 rows (one 256-bit half of a 64-byte chunk), and the store of 8 output
 * rows (clipped at N). Included only by *_avx2.c files (compiled with the AVX2 flags). */
#ifndef OGK_B8_AVX2_H
#define OGK_B8_AVX2_H
#include "kern_int.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define INLINE static inline __attribute__((always_inline))
INLINE __m256 load_scales(const ogk_qtensor *W, size_t gi)
{
    switch (W->scale_dtype) {
    case OGK_F32: return _mm256_loadu_ps((const float *)W->scales + gi);
    case OGK_F16: return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)W->scales + gi)));
    default: {
        __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)W->scales + gi));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    }
}

INLINE __m256 load_zeros(const ogk_qtensor *W, size_t gi)
{
    if (!W->has_zp)
        return _mm256_set1_ps(8.0f);
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(W->zeros + gi))));
}

INLINE void store_rows(const kern_job *j, uint32_t row0, int m, __m256 v)
{
    float *y = j->Y + (size_t)m * j->ldy + row0;
    uint32_t n = j->W->n;
    if (row0 + 8 <= n)
        _mm256_storeu_ps(y, v);
    else if (row0 < n) {
        float t[8];
        _mm256_storeu_ps(t, v);
        memcpy(y, t, (n - row0) * sizeof *t);
    }
}


/* one 32-byte half chunk (8 rows x 8 k of unsigned 4-bit codes, split into lo/hi nibbles) against 8
 * int8 activations q[0..7]: per row the int32 Σ code·q (vpmaddubsw pair sums, <= 2·2·15·127: no
 * saturation, widened by vpmaddwd) */
/* i8_dot8 before the widening: the int16 sums of low + high pairs (each <= 7620 in magnitude) */
INLINE __m256i i8_pairs8(__m256i lo, __m256i hi, const int8_t *q)
{
    int32_t ql, qh;
    memcpy(&ql, q, 4);
    memcpy(&qh, q + 4, 4);
    return _mm256_add_epi16(_mm256_maddubs_epi16(lo, _mm256_set1_epi32(ql)),
                            _mm256_maddubs_epi16(hi, _mm256_set1_epi32(qh)));
}

INLINE __m256i i8_dot8(__m256i lo, __m256i hi, const int8_t *q)
{
    int32_t ql, qh;
    memcpy(&ql, q, 4);
    memcpy(&qh, q + 4, 4);
    __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(lo, _mm256_set1_epi32(ql)),
                                   _mm256_maddubs_epi16(hi, _mm256_set1_epi32(qh)));
    return _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
}

/* the same for KERN_I16's two planes (kern.h): 254·Σ code·q1 + Σ code·q2 = Σ code·Q, exact in int32
 * (a pair of q1 pair sums widened with 254: 2·7620·254 fits) */
INLINE __m256i i16_dot8(__m256i lo, __m256i hi, const int8_t *q1, const int8_t *q2)
{
    int32_t a, b, c, d;
    memcpy(&a, q1, 4), memcpy(&b, q1 + 4, 4), memcpy(&c, q2, 4), memcpy(&d, q2 + 4, 4);
    __m256i s1 = _mm256_add_epi16(_mm256_maddubs_epi16(lo, _mm256_set1_epi32(a)),
                                  _mm256_maddubs_epi16(hi, _mm256_set1_epi32(b)));
    __m256i s2 = _mm256_add_epi16(_mm256_maddubs_epi16(lo, _mm256_set1_epi32(c)),
                                  _mm256_maddubs_epi16(hi, _mm256_set1_epi32(d)));
    return _mm256_add_epi32(_mm256_madd_epi16(s1, _mm256_set1_epi16(254)), _mm256_madd_epi16(s2, _mm256_set1_epi16(1)));
}

/* max |x[c]| over [c0, c1) (the activation quantisers' amax, fmaxf order-independent) */
INLINE float group_amax(const float *x, uint32_t c0, uint32_t c1)
{
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 a = _mm256_setzero_ps();
    uint32_t c;
    for (c = c0; c + 8 <= c1; c += 8)
        a = _mm256_max_ps(a, _mm256_and_ps(_mm256_loadu_ps(x + c), absmask));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    float amax = _mm_cvtss_f32(h);
    for (; c < c1; c++)
        amax = fmaxf(amax, fabsf(x[c]));
    return amax;
}

/* a group's integer sums into the fp32 result: y + scale·d·(Σ code·q − zp·Σ q), the same fp32
 * operations in every integer mode (i8, i16) */
INLINE __m256 group_fma(__m256 y, __m256 s, __m256 z, __m256i dot, const kern_job *j, size_t xi)
{
    __m256 t = _mm256_fnmadd_ps(z, _mm256_broadcast_ss(j->xqf + xi), _mm256_cvtepi32_ps(dot));
    return _mm256_fmadd_ps(_mm256_mul_ps(s, _mm256_set1_ps(j->xd[xi])), t, y);
}

INLINE int32_t hsum_i32(__m256i s)
{
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
    return _mm_cvtsi128_si32(s4);
}
/* Software prefetch of the weight streams (as the avx512 kernels, kern_int.h): a group's code lines
 * PF_BYTES ahead into L2, and the scales and zero points that go with them */
INLINE void prefetch_group(const ogk_qtensor *W, const uint8_t *p, uint32_t cpg, size_t gi)
{
    for (uint32_t c = 0; c < cpg; c++)
        _mm_prefetch((const char *)p + c * 64 + PF_BYTES, _MM_HINT_T1);
    kern_prefetch_scales(W, gi);
}

/* The integer tiles of MT <= 4 activation rows (i8, or i16 when I16: two int8 planes): both halves of a
 * row block at once, so each 64-byte chunk of codes is loaded once and each activation broadcast
 * serves 16 rows. 2 x MT int32 sums and 2 x MT fp32 results do not all fit the 16 ymm registers
 * beside the codes for MT > 2; the compiler keeps the fp32 results (touched once per group) on the
 * stack, which costs less than a second pass over the codes with broadcasts again (a half-block tile
 * was 5-8 % slower at M = 3..16 and 10-20 % at M = 1). */
INLINE void tile_int(const kern_job *j, uint32_t rb, const int MT, int m0, const int I16)
{
    const ogk_qtensor *W = j->W;
    const uint32_t B = W->block, kb = W->k_blocks, kp = j->kp, cpg = B / 8;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const uint8_t *cb = W->codes + (size_t)rb * kb * B * 8;
    __m256 y[2][4];
#pragma GCC unroll 4
    for (int m = 0; m < MT; m++)
        y[0][m] = y[1][m] = _mm256_setzero_ps();
    for (uint32_t g = 0; g < kb; g++) {
        __m256i a[2][4];
        const int8_t *q[4], *q2[4];
#pragma GCC unroll 4
        for (int m = 0; m < MT; m++) {
            a[0][m] = a[1][m] = _mm256_setzero_si256();
            q[m] = j->xq + (size_t)(m0 + m) * kp + (size_t)g * B;
            q2[m] = I16 ? j->xq2 + (size_t)(m0 + m) * kp + (size_t)g * B : NULL;
        }
        const uint8_t *p = cb + (size_t)g * cpg * 64;
        if (PF_BYTES && m0 == 0) /* the first pass over the row block (later ones find it in cache) */
            prefetch_group(W, p, cpg, ((size_t)rb * kb + g) * 16);
        if (!I16 && cpg <= 4) {
            /* int8, groups of <= 32: the pair sums of the whole group add up in int16 (<= 4·7620 =
             * 30480, no overflow) and one vpmaddwd per group widens them; no int32 accumulators in the
             * loop (with them, or with larger groups in 4-chunk steps, the compiler keeps sums on the
             * stack and it was no faster than the plain loop below) */
            __m256i s16[2][4];
#pragma GCC unroll 4
            for (int m = 0; m < MT; m++)
                s16[0][m] = s16[1][m] = _mm256_setzero_si256();
            for (uint32_t c = 0; c < cpg; c++, p += 64) {
                /* both halves unpacked first, then per row its two broadcasts for both: 8 sums, 4 codes,
                 * 2 broadcasts and the mask fit the 16 registers */
                __m256i w0 = _mm256_loadu_si256((const __m256i *)p), w1 = _mm256_loadu_si256((const __m256i *)(p + 32));
                __m256i lo0 = _mm256_and_si256(w0, m4), hi0 = _mm256_and_si256(_mm256_srli_epi16(w0, 4), m4);
                __m256i lo1 = _mm256_and_si256(w1, m4), hi1 = _mm256_and_si256(_mm256_srli_epi16(w1, 4), m4);
#pragma GCC unroll 4
                for (int m = 0; m < MT; m++) {
                    s16[0][m] = _mm256_add_epi16(s16[0][m], i8_pairs8(lo0, hi0, q[m] + c * 8));
                    s16[1][m] = _mm256_add_epi16(s16[1][m], i8_pairs8(lo1, hi1, q[m] + c * 8));
                }
            }
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++)
#pragma GCC unroll 4
                for (int m = 0; m < MT; m++)
                    a[h][m] = _mm256_madd_epi16(s16[h][m], _mm256_set1_epi16(1));
        } else
        for (uint32_t c = 0; c < cpg; c++, p += 64) {
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                __m256i w = _mm256_loadu_si256((const __m256i *)(p + 32 * h));
                __m256i lo = _mm256_and_si256(w, m4), hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), m4);
#pragma GCC unroll 4
                for (int m = 0; m < MT; m++)
                    a[h][m] = _mm256_add_epi32(a[h][m], I16 ? i16_dot8(lo, hi, q[m] + c * 8, q2[m] + c * 8)
                                                            : i8_dot8(lo, hi, q[m] + c * 8));
            }
        }
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            size_t gi = ((size_t)rb * kb + g) * 16 + 8 * h;
            __m256 s = load_scales(W, gi), z = load_zeros(W, gi);
#pragma GCC unroll 4
            for (int m = 0; m < MT; m++) {
                size_t xi = (size_t)(m0 + m) * kb + g;
                y[h][m] = group_fma(y[h][m], s, z, a[h][m], j, xi);
            }
        }
    }
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++)
#pragma GCC unroll 4
        for (int m = 0; m < MT; m++)
            store_rows(j, rb * 16 + 8 * h, m0 + m, y[h][m]);
}
#endif
