/* AVX2 micro-kernels for the b8 layout (compiled with -mavx2 -mfma -mf16c). A 64-byte chunk is two
 * 256-bit halves: rows 0..7 and rows 8..15, each row a dword of 4 low + 4 high nibbles.
 *   f32: (dword >> 8i) & 15 converted to fp32 gives 8 rows' codes for one k; FMA per activation row.
 *   i8:  vpmaddubsw of the u8 codes against 4 broadcast int8 activations gives int16 pair sums
 *        (|sum| <= 2·15·127, and the low+high sum <= 7620: no saturation), vpmaddwd with ones widens.
 * Per group: y += scale · (Σ code·x − zp · Σx), as in the AVX-512 path. */
#include "b8_avx2.h"

#include <math.h>

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
        if (PF_BYTES && m0 == 0) /* the first pass over the row block (later ones find it in cache) */
            prefetch_group(W, cb + (size_t)g * cpg * 64, cpg, ((size_t)rb * kb + g) * 16);
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

#define TILE(mode, MT)                                                                                                 \
    static void mode##_##MT(const kern_job *j, uint32_t rb, int m0) { tile_##mode(j, rb, MT, m0); }
TILE(f32, 1)
TILE(f32, 2)
#define TILE_I8(MT)                                                                                                    \
    static void i8_##MT(const kern_job *j, uint32_t rb, int m0) { tile_int(j, rb, MT, m0, 0); }
TILE_I8(1)
TILE_I8(2)
TILE_I8(3)
TILE_I8(4)

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
    for (int m = 0; m < M; m++, x += k, q += kp, d += kb, qs += kb) {
        for (uint32_t g = 0; g < kb; g++) {
            uint32_t c0 = g * block, c1 = c0 + block < k ? c0 + block : k, c;
            float amax = group_amax(x, c0, c1);
            float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
            __m256 vi = _mm256_set1_ps(inv);
            __m256i s = _mm256_setzero_si256();
            for (c = c0; c + 8 <= c1; c += 8) {
                __m256i v = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + c), vi));
                s = _mm256_add_epi32(s, v);
                __m128i p16 = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
                _mm_storel_epi64((__m128i *)(q + c), _mm_packs_epi16(p16, p16));
            }
            int32_t sum = hsum_i32(s);
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
