/* AVX2 micro-kernels for the b8 layout (compiled with -mavx2 -mfma -mf16c). A 64-byte chunk is two
 * 256-bit halves: rows 0..7 and rows 8..15, each row a dword of 4 low + 4 high nibbles.
 *   f32: (dword >> 8i) & 15 converted to fp32 gives 8 rows' codes for one k; FMA per activation row.
 *   i8:  vpmaddubsw of the u8 codes against 4 broadcast int8 activations gives int16 pair sums
 *        (|sum| <= 2·15·127, and the low+high sum <= 7620: no saturation), vpmaddwd with ones widens.
 * Per group: y += scale · (Σ code·x − zp · Σx), as in the AVX-512 path. */
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

INLINE void tile_f32(const kern_job *j, uint32_t rb, const int MT, int m0)
{
    const ogk_qtensor *W = j->W;
    const uint32_t B = W->block, kb = W->k_blocks, kp = j->kp, cpg = B / 8;
    const __m256i m4 = _mm256_set1_epi32(15);
    const uint8_t *cb = W->codes + (size_t)rb * kb * B * 8;
    __m256 y[2][4], a0[2][4], a1[2][4];
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++)
#pragma GCC unroll 4
        for (int m = 0; m < MT; m++)
            y[h][m] = _mm256_setzero_ps();
    for (uint32_t g = 0; g < kb; g++) {
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++)
#pragma GCC unroll 4
            for (int m = 0; m < MT; m++)
                a0[h][m] = a1[h][m] = _mm256_setzero_ps();
        const float *x[4];
#pragma GCC unroll 4
        for (int m = 0; m < MT; m++)
            x[m] = j->xf + (size_t)(m0 + m) * kp + (size_t)g * B;
        for (uint32_t c = 0; c < cpg; c++) {
            const uint8_t *p = cb + ((size_t)g * cpg + c) * 64;
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                __m256i w = _mm256_loadu_si256((const __m256i *)(p + 32 * h));
#pragma GCC unroll 4
                for (int i = 0; i < 4; i++) {
                    __m256 lo = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(w, 8 * i), m4));
                    __m256 hi = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(w, 8 * i + 4), m4));
#pragma GCC unroll 4
                    for (int m = 0; m < MT; m++) {
                        a0[h][m] = _mm256_fmadd_ps(lo, _mm256_set1_ps(x[m][c * 8 + i]), a0[h][m]);
                        a1[h][m] = _mm256_fmadd_ps(hi, _mm256_set1_ps(x[m][c * 8 + 4 + i]), a1[h][m]);
                    }
                }
            }
        }
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            size_t gi = ((size_t)rb * kb + g) * 16 + 8 * h;
            __m256 s = load_scales(W, gi), z = load_zeros(W, gi);
#pragma GCC unroll 4
            for (int m = 0; m < MT; m++) {
                __m256 t = _mm256_add_ps(a0[h][m], a1[h][m]);
                t = _mm256_fnmadd_ps(z, _mm256_set1_ps(j->xs[(size_t)(m0 + m) * kb + g]), t);
                y[h][m] = _mm256_fmadd_ps(s, t, y[h][m]);
            }
        }
    }
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++)
#pragma GCC unroll 4
        for (int m = 0; m < MT; m++)
            store_rows(j, rb * 16 + 8 * h, m0 + m, y[h][m]);
}

/* One half (8 rows) of a row block at a time: 4 int32 accumulators and 4 fp32 sums for MT <= 4 rows
 * stay in the 16 ymm registers with the codes and constants (both halves at once spilled); the second
 * half reads the row block's codes again, from cache. */
INLINE void tile_i8(const kern_job *j, uint32_t rb, const int MT, int m0)
{
    const ogk_qtensor *W = j->W;
    const uint32_t B = W->block, kb = W->k_blocks, kp = j->kp, cpg = B / 8;
    const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    const uint8_t *cb = W->codes + (size_t)rb * kb * B * 8;
    for (int h = 0; h < 2; h++) {
        __m256 y[4];
#pragma GCC unroll 4
        for (int m = 0; m < MT; m++)
            y[m] = _mm256_setzero_ps();
        for (uint32_t g = 0; g < kb; g++) {
            __m256i a[4];
            const int8_t *q[4];
#pragma GCC unroll 4
            for (int m = 0; m < MT; m++) {
                a[m] = _mm256_setzero_si256();
                q[m] = j->xq + (size_t)(m0 + m) * kp + (size_t)g * B;
            }
            const uint8_t *p = cb + (size_t)g * cpg * 64 + 32 * h;
            for (uint32_t c = 0; c < cpg; c++, p += 64) {
                __m256i w = _mm256_loadu_si256((const __m256i *)p);
                __m256i lo = _mm256_and_si256(w, m4), hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), m4);
#pragma GCC unroll 4
                for (int m = 0; m < MT; m++) {
                    int32_t ql, qh;
                    memcpy(&ql, q[m] + c * 8, 4);
                    memcpy(&qh, q[m] + c * 8 + 4, 4);
                    __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(lo, _mm256_set1_epi32(ql)),
                                                   _mm256_maddubs_epi16(hi, _mm256_set1_epi32(qh)));
                    a[m] = _mm256_add_epi32(a[m], _mm256_madd_epi16(s16, ones));
                }
            }
            size_t gi = ((size_t)rb * kb + g) * 16 + 8 * h;
            __m256 s = load_scales(W, gi), z = load_zeros(W, gi);
#pragma GCC unroll 4
            for (int m = 0; m < MT; m++) {
                size_t xi = (size_t)(m0 + m) * kb + g;
                __m256 t = _mm256_fnmadd_ps(z, _mm256_set1_ps((float)j->xqs[xi]), _mm256_cvtepi32_ps(a[m]));
                y[m] = _mm256_fmadd_ps(_mm256_mul_ps(s, _mm256_set1_ps(j->xd[xi])), t, y[m]);
            }
        }
#pragma GCC unroll 4
        for (int m = 0; m < MT; m++)
            store_rows(j, rb * 16 + 8 * h, m0 + m, y[m]);
    }
}

#define TILE(mode, MT)                                                                                                 \
    static void mode##_##MT(const kern_job *j, uint32_t rb, int m0) { tile_##mode(j, rb, MT, m0); }
TILE(f32, 1)
TILE(f32, 2)
TILE(i8, 1)
TILE(i8, 2)
TILE(i8, 3)
TILE(i8, 4)

typedef void (*tile_fn)(const kern_job *, uint32_t, int);

void kern_b8_avx2(const kern_job *j, uint32_t rb0, uint32_t rb1)
{
    static const tile_fn f32_tiles[] = {0, f32_1, f32_2};
    static const tile_fn i8_tiles[] = {0, i8_1, i8_2, i8_3, i8_4};
    int i8 = j->mode == KERN_I8, mt = i8 ? 4 : 2;
    for (uint32_t rb = rb0; rb < rb1; rb++)
        for (int m0 = 0; m0 < j->M; m0 += mt) {
            int n = j->M - m0 < mt ? j->M - m0 : mt;
            (i8 ? i8_tiles : f32_tiles)[n](j, rb, m0);
        }
}

/* KERN_I8's activation quantisation (kern_quant_row_i8's arithmetic, 8 lanes at a time: the same
 * amax, the same x·(127/amax) rounded to nearest even, so bit-identical to it) */
void kern_quant_rows_avx2(const float *x, int M, uint32_t k, uint32_t block, int8_t *q, float *d, int32_t *qs)
{
    uint32_t kb = (k + block - 1) / block;
    size_t kp = (size_t)kb * block;
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (int m = 0; m < M; m++, x += k, q += kp, d += kb, qs += kb) {
        for (uint32_t g = 0; g < kb; g++) {
            uint32_t c0 = g * block, c1 = c0 + block < k ? c0 + block : k, c;
            __m256 a = _mm256_setzero_ps();
            for (c = c0; c + 8 <= c1; c += 8)
                a = _mm256_max_ps(a, _mm256_and_ps(_mm256_loadu_ps(x + c), absmask));
            __m128 h = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
            h = _mm_max_ps(h, _mm_movehl_ps(h, h));
            h = _mm_max_ss(h, _mm_movehdup_ps(h));
            float amax = _mm_cvtss_f32(h);
            for (; c < c1; c++)
                amax = fmaxf(amax, fabsf(x[c]));
            float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
            __m256 vi = _mm256_set1_ps(inv);
            __m256i s = _mm256_setzero_si256();
            for (c = c0; c + 8 <= c1; c += 8) {
                __m256i v = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + c), vi));
                s = _mm256_add_epi32(s, v);
                __m128i p16 = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
                _mm_storel_epi64((__m128i *)(q + c), _mm_packs_epi16(p16, p16));
            }
            __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
            s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
            s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
            int32_t sum = _mm_cvtsi128_si32(s4);
            for (; c < c1; c++) {
                int v = (int)nearbyintf(x[c] * inv);
                q[c] = (int8_t)v;
                sum += v;
            }
            for (c = c1; c < c0 + block; c++)
                q[c] = 0;
            d[g] = amax / 127.0f;
            qs[g] = sum;
        }
    }
}

uint64_t kern_read_avx2(const uint8_t *p, size_t n)
{
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    for (size_t i = 0; i < n; i += 128) {
        a = _mm256_xor_si256(a, _mm256_load_si256((const __m256i *)(p + i)));
        b = _mm256_xor_si256(b, _mm256_load_si256((const __m256i *)(p + i + 32)));
        c = _mm256_xor_si256(c, _mm256_load_si256((const __m256i *)(p + i + 64)));
        d = _mm256_xor_si256(d, _mm256_load_si256((const __m256i *)(p + i + 96)));
    }
    a = _mm256_xor_si256(_mm256_xor_si256(a, b), _mm256_xor_si256(c, d));
    uint64_t r[4];
    _mm256_storeu_si256((__m256i *)r, a);
    return r[0] ^ r[1] ^ r[2] ^ r[3];
}
