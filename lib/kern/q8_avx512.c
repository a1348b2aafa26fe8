/* The q8 operation of the avx512 (and amx) rows: Y = X · Wᵀ for an 8-bit tensor in source order (codes
 * [N][kb][B], kern.h), 16 weight rows (a tile) at a time, one fp32 output lane per weight row:
 *   - the tile's codes transposed in registers, 64 bytes of each of its 16 rows at a time (16 loads, 64
 *     shuffles), so that one dword lane holds one row's 4 codes at k..k+3; its scales and zero points
 *     likewise into S, Z [kb][16] fp32.
 *   - M = 1 (decode) uses each transposed chunk at once; M > 1 stores them (T [kp/4][16] dwords, in L1/L2)
 *     and passes up to 8 activation rows (4 in KERN_F32) over T at a time.
 *   KERN_I8:  per group, Σ code·q in exact int32 lanes (VPDPBUSD: unsigned codes, the 4 activations of
 *             k..k+3 broadcast), from −128·Σq when the tensor has no zero points; then group_i8.
 *   KERN_F32: per group four fp32 partial sums of code·x (k mod 4), then group_f32.
 * Every lane's fp32 operations are the same whatever M and the pass width (integer sums are split freely),
 * so a row alone has the bits it has in a launch of several (t/unit/kern_paths; the server's batching
 * relies on it).
 * Before (2026-12-06) each weight row was multiplied by each activation row on its own, re-deriving the
 * group factors per pair: prefill of all-q8 qwen05b shapes ran at 100-121 tok/s; with the tiles 479-625
 * (bench/results/2026-12-07-zen4-q8-tiles.md), decode unchanged within the host's noise.
 * Results agree with kern_ref_rows within kern_ref_bound (t/unit/kern_paths). */
#include <immintrin.h>

#include "kern_int.h"

#define INLINE static inline __attribute__((always_inline))
#define MT_I8 8  /* activation rows per pass */
#define MT_F32 4 /* four partial sums each */

/* 16 rows of 16 dwords (v[r]: row r) into 16 columns (v[c]: every row's dword c) */
INLINE void transpose16(__m512i *v)
{
    __m512i a[16], b[16];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        a[2 * i] = _mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]);
        a[2 * i + 1] = _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]);
    }
    /* b[4i + j], 128-bit lane L: rows 4i..4i+3 at dword 4L + j */
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        b[4 * i] = _mm512_unpacklo_epi64(a[4 * i], a[4 * i + 2]);
        b[4 * i + 1] = _mm512_unpackhi_epi64(a[4 * i], a[4 * i + 2]);
        b[4 * i + 2] = _mm512_unpacklo_epi64(a[4 * i + 1], a[4 * i + 3]);
        b[4 * i + 3] = _mm512_unpackhi_epi64(a[4 * i + 1], a[4 * i + 3]);
    }
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) { /* the 4 x 4 transpose of 128-bit lanes */
        __m512i c0 = _mm512_shuffle_i32x4(b[j], b[4 + j], 0x44), c1 = _mm512_shuffle_i32x4(b[j], b[4 + j], 0xEE);
        __m512i c2 = _mm512_shuffle_i32x4(b[8 + j], b[12 + j], 0x44), c3 = _mm512_shuffle_i32x4(b[8 + j], b[12 + j], 0xEE);
        v[j] = _mm512_shuffle_i32x4(c0, c2, 0x88);
        v[4 + j] = _mm512_shuffle_i32x4(c0, c2, 0xDD);
        v[8 + j] = _mm512_shuffle_i32x4(c1, c3, 0x88);
        v[12 + j] = _mm512_shuffle_i32x4(c1, c3, 0xDD);
    }
}

/* up to 16 scales of W from element gi on (cnt of them; the rest 0), as fp32 */
INLINE __m512 scales16(const ogk_qtensor *W, size_t gi, uint32_t cnt)
{
    __mmask16 k = (__mmask16)_bzhi_u32(0xFFFF, cnt);
    if (W->scale_dtype == OGK_F32)
        return _mm512_maskz_loadu_ps(k, (const float *)W->scales + gi);
    __m256i h = _mm256_maskz_loadu_epi16(k, (const uint16_t *)W->scales + gi);
    if (W->scale_dtype == OGK_F16)
        return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); /* bf16: the high half */
}

/* one chunk of the tile: 64 bytes (masked at kp) of each of its R rows (0 past R), transposed: v[c] holds
 * every row's codes at k0 + 4c .. k0 + 4c + 3. And 1 KiB of the next tile into L2: the tile is 16·kp
 * contiguous bytes and there are kp/64 chunks, so the prefetch runs one tile ahead, linearly (16 rows read 64
 * bytes at a time are 16 streams the hardware prefetchers did not follow: the all-q8 classifier of the qwen05b
 * shapes decoded at 10 GB/s without it) */
INLINE void tile_chunk(const uint8_t *base, uint32_t kp, uint32_t R, uint32_t k0, __m512i *v)
{
    __mmask64 km = _bzhi_u64(~0ull, kp - k0 < 64 ? kp - k0 : 64);
    const char *next = (const char *)(base + (size_t)16 * kp);
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++)
        _mm_prefetch(next + (size_t)k0 * 16 + i * 64, _MM_HINT_T1);
#pragma GCC unroll 16
    for (uint32_t r = 0; r < 16; r++)
        v[r] = r < R ? _mm512_maskz_loadu_epi8(km, base + (size_t)r * kp + k0) : _mm512_setzero_si512();
    transpose16(v);
}

/* the tile's codes as T [ceil(kp/64)·16][16] dwords */
static void tile_codes(const ogk_qtensor *W, uint32_t kp, uint32_t n0, uint32_t R, uint32_t *T)
{
    const uint8_t *base = W->codes + (size_t)n0 * kp;
    __m512i v[16];
    for (uint32_t k0 = 0; k0 < kp; k0 += 64) {
        tile_chunk(base, kp, R, k0, v);
#pragma GCC unroll 16
        for (int c = 0; c < 16; c++)
            _mm512_store_si512(T + ((size_t)k0 / 4 + c) * 16, v[c]);
    }
}

/* the tile's scales and zero points as S, Z [kb rounded up to 16][16] fp32 (0 past R), and the next tile's
 * into L2 */
static void tile_scales(const ogk_qtensor *W, uint32_t n0, uint32_t R, float *S, float *Z)
{
    const uint32_t kb = W->k_blocks;
    size_t ss = W->scale_dtype == OGK_F32 ? 4 : 2, gn = (size_t)(n0 + 64) * kb; /* four tiles ahead */
    for (size_t o = 0; o < (size_t)16 * kb * ss; o += 64)
        _mm_prefetch((const char *)W->scales + gn * ss + o, _MM_HINT_T1);
    for (size_t o = 0; W->has_zp && o < (size_t)16 * kb; o += 64)
        _mm_prefetch((const char *)W->zeros + gn + o, _MM_HINT_T1);
    __m512i v[16];
    for (uint32_t g0 = 0; g0 < kb; g0 += 16) {
        uint32_t cnt = kb - g0 < 16 ? kb - g0 : 16;
        for (uint32_t r = 0; r < 16; r++)
            v[r] = r < R ? _mm512_castps_si512(scales16(W, (size_t)(n0 + r) * kb + g0, cnt)) : _mm512_setzero_si512();
        transpose16(v);
        for (int c = 0; c < 16; c++)
            _mm512_store_si512(S + ((size_t)g0 + c) * 16, v[c]);
        if (!W->has_zp)
            continue;
        for (uint32_t r = 0; r < 16; r++)
            v[r] = r < R ? _mm512_castps_si512(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(
                               (__mmask16)_bzhi_u32(0xFFFF, cnt), W->zeros + (size_t)(n0 + r) * kb + g0))))
                         : _mm512_setzero_si512();
        transpose16(v);
        for (int c = 0; c < 16; c++)
            _mm512_store_si512(Z + ((size_t)g0 + c) * 16, v[c]);
    }
}

INLINE void store_out(const kern_job *j, int m, uint32_t n0, uint32_t R, __m512 y)
{
    _mm512_mask_storeu_ps(j->Y + (size_t)m * j->ldy + n0, (__mmask16)_bzhi_u32(0xFFFF, R), y);
}

/* The end of group xi = m·kb + g for one activation row, on every path (so every path has these bits):
 * i8: a = Σ code·q (zero points) or Σ (code − 128)·q (none), exact; |a| <= 255·127·B < 2^31, and its
 * conversion exact below 2^24 (B <= 512) */
INLINE __m512 group_i8(const kern_job *j, __m512 y, __m512i a, __m512 s, __m512 z, size_t xi, const int zp)
{
    __m512 v = _mm512_cvtepi32_ps(a);
    if (zp)
        v = _mm512_fnmadd_ps(z, _mm512_set1_ps(j->xqf[xi]), v);
    return _mm512_fmadd_ps(_mm512_mul_ps(s, _mm512_set1_ps(j->xd[xi])), v, y);
}

/* f32: p[i] = Σ code·x over the group's k ≡ i (mod 4), in k order; z the zero points (128 when none) */
INLINE __m512 group_f32(const kern_job *j, __m512 y, const __m512 *p, __m512 s, __m512 z, size_t xi)
{
    __m512 v = _mm512_add_ps(_mm512_add_ps(p[0], p[1]), _mm512_add_ps(p[2], p[3]));
    v = _mm512_fnmadd_ps(z, _mm512_set1_ps(j->xs[xi]), v);
    return _mm512_fmadd_ps(s, v, y);
}

/* the four codes of each lane of w as fp32 */
INLINE void codes_f32(__m512i w, __m512 *cf)
{
    const __m512i ff = _mm512_set1_epi32(0xFF);
    cf[0] = _mm512_cvtepi32_ps(_mm512_and_si512(w, ff));
    cf[1] = _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(w, 8), ff));
    cf[2] = _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(w, 16), ff));
    cf[3] = _mm512_cvtepi32_ps(_mm512_srli_epi32(w, 24));
}

/* M = 1: the tile's chunks used as they are transposed (no T; each code read once, from memory). Units u
 * (4 codes) in k order; group g ends after unit (g + 1)·B/4 − 1. The i8 sums split over four accumulators
 * by u mod 4 (VPDPBUSD's latency; integers: the same sums), the f32 ones are group_f32's four. */
INLINE void row1(const kern_job *j, const float *S, const float *Z, uint32_t n0, uint32_t R, const uint32_t B,
                 const int zp, const int i8m)
{
    const ogk_qtensor *W = j->W;
    const uint32_t kp = j->kp, c4 = B / 4, kb = W->k_blocks;
    const uint8_t *base = W->codes + (size_t)n0 * kp;
    __m512 y = _mm512_setzero_ps(), p[4];
    __m512i a[4];
    for (int i = 0; i < 4; i++)
        a[i] = _mm512_setzero_si512(), p[i] = _mm512_setzero_ps();
    if (i8m && !zp)
        a[0] = _mm512_set1_epi32(-128 * j->xqs[0]);
    const __m512 z128 = _mm512_set1_ps(128.0f);
    __m512i v[16];
    for (uint32_t k0 = 0; k0 < kp; k0 += 64) {
        tile_chunk(base, kp, R, k0, v);
        const uint32_t nu = kp - k0 < 64 ? (kp - k0) / 4 : 16;
#pragma GCC unroll 16
        for (uint32_t c = 0; c < 16; c++) {
            if (c >= nu)
                break;
            const uint32_t u = k0 / 4 + c;
            if (i8m) {
                int32_t q;
                memcpy(&q, j->xq + (size_t)u * 4, 4);
                a[c % 4] = _mm512_dpbusd_epi32(a[c % 4], v[c], _mm512_set1_epi32(q));
            } else {
                __m512 cf[4];
                codes_f32(v[c], cf);
#pragma GCC unroll 4
                for (int i = 0; i < 4; i++)
                    p[i] = _mm512_fmadd_ps(cf[i], _mm512_set1_ps(j->xf[(size_t)u * 4 + i]), p[i]);
            }
            if ((u + 1) % c4)
                continue;
            const uint32_t g = u / c4;
            __m512 s = _mm512_load_ps(S + (size_t)g * 16);
            if (i8m) {
                __m512i t = _mm512_add_epi32(_mm512_add_epi32(a[0], a[1]), _mm512_add_epi32(a[2], a[3]));
                y = group_i8(j, y, t, s, zp ? _mm512_load_ps(Z + (size_t)g * 16) : s, g, zp);
                a[1] = a[2] = a[3] = _mm512_setzero_si512();
                a[0] = zp || g + 1 >= kb ? _mm512_setzero_si512() : _mm512_set1_epi32(-128 * j->xqs[g + 1]);
            } else {
                y = group_f32(j, y, p, s, zp ? _mm512_load_ps(Z + (size_t)g * 16) : z128, g);
                for (int i = 0; i < 4; i++)
                    p[i] = _mm512_setzero_ps();
            }
        }
    }
    store_out(j, 0, n0, R, y);
}

/* MT activation rows from m0 over the tile */
INLINE void pass_i8(const kern_job *j, const uint32_t *T, const float *S, const float *Z, uint32_t n0, uint32_t R,
                    int m0, const int MT, const uint32_t B, const int zp)
{
    const uint32_t kb = j->W->k_blocks, kp = j->kp, c4 = B / 4;
    const int8_t *xq = j->xq + (size_t)m0 * kp;
    __m512 y[MT_I8];
#pragma GCC unroll 8
    for (int m = 0; m < MT; m++)
        y[m] = _mm512_setzero_ps();
    /* narrow passes split each sum over NA accumulators (VPDPBUSD's latency; integer sums: the same bits) */
    const int NA = MT <= 2 ? 4 : MT <= 4 ? 2 : 1;
    for (uint32_t g = 0; g < kb; g++) {
        __m512i a[MT_I8], a2[4][MT_I8];
#pragma GCC unroll 8
        for (int m = 0; m < MT; m++) {
            a[m] = zp ? _mm512_setzero_si512() : _mm512_set1_epi32(-128 * j->xqs[(size_t)(m0 + m) * kb + g]);
#pragma GCC unroll 4
            for (int h = 1; h < NA; h++)
                a2[h][m] = _mm512_setzero_si512();
        }
        const uint32_t *t = T + (size_t)g * c4 * 16;
#pragma GCC unroll 8
        for (uint32_t c = 0; c < c4; c += NA) /* c4 = B / 4 >= 4 */
#pragma GCC unroll 4
            for (int h = 0; h < NA; h++) {
                __m512i w = _mm512_load_si512(t + (c + h) * 16);
#pragma GCC unroll 8
                for (int m = 0; m < MT; m++) {
                    int32_t q;
                    memcpy(&q, xq + (size_t)m * kp + ((size_t)g * c4 + c + h) * 4, 4);
                    __m512i *acc = h ? &a2[h][m] : &a[m];
                    *acc = _mm512_dpbusd_epi32(*acc, w, _mm512_set1_epi32(q));
                }
            }
#pragma GCC unroll 8
        for (int m = 0; m < MT; m++)
#pragma GCC unroll 4
            for (int h = 1; h < NA; h++)
                a[m] = _mm512_add_epi32(a[m], a2[h][m]);
        __m512 s = _mm512_load_ps(S + (size_t)g * 16), z = zp ? _mm512_load_ps(Z + (size_t)g * 16) : s;
#pragma GCC unroll 8
        for (int m = 0; m < MT; m++)
            y[m] = group_i8(j, y[m], a[m], s, z, (size_t)(m0 + m) * kb + g, zp);
    }
#pragma GCC unroll 8
    for (int m = 0; m < MT; m++)
        store_out(j, m0 + m, n0, R, y[m]);
}

INLINE void pass_f32(const kern_job *j, const uint32_t *T, const float *S, const float *Z, uint32_t n0, uint32_t R,
                     int m0, const int MT, const uint32_t B)
{
    const uint32_t kb = j->W->k_blocks, kp = j->kp, c4 = B / 4;
    const float *x = j->xf + (size_t)m0 * kp;
    __m512 y[MT_F32];
#pragma GCC unroll 4
    for (int m = 0; m < MT; m++)
        y[m] = _mm512_setzero_ps();
    for (uint32_t g = 0; g < kb; g++) {
        __m512 p[MT_F32][4];
#pragma GCC unroll 4
        for (int m = 0; m < MT; m++)
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++)
                p[m][i] = _mm512_setzero_ps();
        const uint32_t *t = T + (size_t)g * c4 * 16;
#pragma GCC unroll 4
        for (uint32_t c = 0; c < c4; c++) {
            __m512 cf[4];
            codes_f32(_mm512_load_si512(t + c * 16), cf);
            const size_t k = ((size_t)g * c4 + c) * 4;
#pragma GCC unroll 4
            for (int m = 0; m < MT; m++)
#pragma GCC unroll 4
                for (int i = 0; i < 4; i++)
                    p[m][i] = _mm512_fmadd_ps(cf[i], _mm512_set1_ps(x[(size_t)m * kp + k + i]), p[m][i]);
        }
        __m512 s = _mm512_load_ps(S + (size_t)g * 16);
        __m512 z = j->W->has_zp ? _mm512_load_ps(Z + (size_t)g * 16) : _mm512_set1_ps(128.0f);
#pragma GCC unroll 4
        for (int m = 0; m < MT; m++)
            y[m] = group_f32(j, y[m], p[m], s, z, (size_t)(m0 + m) * kb + g);
    }
#pragma GCC unroll 4
    for (int m = 0; m < MT; m++)
        store_out(j, m0 + m, n0, R, y[m]);
}

/* the passes, one function per width (and the i8 ones per block 32 / other, zero points or not) */
#define PASS_I8(MT)                                                                                                   \
    static void i8_##MT(const kern_job *j, const uint32_t *T, const float *S, const float *Z, uint32_t n0,           \
                        uint32_t R, int m0)                                                                           \
    {                                                                                                                 \
        const ogk_qtensor *W = j->W;                                                                                  \
        if (W->block == 32 && !W->has_zp)                                                                             \
            pass_i8(j, T, S, Z, n0, R, m0, MT, 32, 0);                                                                \
        else if (W->block == 32)                                                                                      \
            pass_i8(j, T, S, Z, n0, R, m0, MT, 32, 1);                                                                \
        else                                                                                                          \
            pass_i8(j, T, S, Z, n0, R, m0, MT, W->block, W->has_zp != 0);                                             \
    }
#define PASS_F32(MT)                                                                                                  \
    static void f32_##MT(const kern_job *j, const uint32_t *T, const float *S, const float *Z, uint32_t n0,          \
                         uint32_t R, int m0)                                                                          \
    {                                                                                                                 \
        if (j->W->block == 32)                                                                                        \
            pass_f32(j, T, S, Z, n0, R, m0, MT, 32);                                                                  \
        else                                                                                                          \
            pass_f32(j, T, S, Z, n0, R, m0, MT, j->W->block);                                                         \
    }
PASS_I8(1)
PASS_I8(2)
PASS_I8(3)
PASS_I8(4)
PASS_I8(5)
PASS_I8(6)
PASS_I8(7)
PASS_I8(8)
PASS_F32(1)
PASS_F32(2)
PASS_F32(3)
PASS_F32(4)

typedef void (*pass_fn)(const kern_job *, const uint32_t *, const float *, const float *, uint32_t, uint32_t, int);

/* rows [n0, n1): whole tiles of 16 from n0 (the launches cut ranges at multiples of 16, kern.c) */
void kern_q8_avx512(const kern_job *j, uint32_t n0, uint32_t n1)
{
    static const pass_fn i8[MT_I8 + 1] = {0, i8_1, i8_2, i8_3, i8_4, i8_5, i8_6, i8_7, i8_8};
    static const pass_fn f32[MT_F32 + 1] = {0, f32_1, f32_2, f32_3, f32_4};
    const ogk_qtensor *W = j->W;
    const uint32_t kp = j->kp, kb16 = (W->k_blocks + 15) / 16 * 16;
    const size_t tb = (size_t)(kp + 63) / 64 * 1024, sb = (size_t)kb16 * 64;
    uint8_t *buf = kern_scratch(1, tb + 2 * sb);
    if (!buf)
        abort(); /* as rm_band's: the scratch of a tile of 16 rows */
    uint32_t *T = (uint32_t *)buf;
    float *S = (float *)(buf + tb), *Z = (float *)(buf + tb + sb);
    const int i8m = j->mode == KERN_I8, mt = i8m ? MT_I8 : MT_F32;
    for (uint32_t n = n0; n < n1; n += 16) {
        uint32_t R = n1 - n < 16 ? n1 - n : 16;
        tile_scales(W, n, R, S, Z);
        if (j->M == 1) {
            const int zp = W->has_zp != 0;
            if (W->block == 32)
                i8m ? (zp ? row1(j, S, Z, n, R, 32, 1, 1) : row1(j, S, Z, n, R, 32, 0, 1)) : row1(j, S, Z, n, R, 32, zp, 0);
            else
                row1(j, S, Z, n, R, W->block, zp, i8m);
            continue;
        }
        tile_codes(W, kp, n, R, T);
        for (int m0 = 0; m0 < j->M; m0 += mt) {
            int w = j->M - m0 < mt ? j->M - m0 : mt;
            (i8m ? i8 : f32)[w](j, T, S, Z, n, R, m0);
        }
    }
}
