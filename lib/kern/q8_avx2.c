/* The q8 operation of the avx2 row: q8_avx512.c's tiles in 256-bit lanes, 8 weight rows a tile (one fp32
 * output lane per weight row), the tile's codes transposed 32 bytes per row at a time into T [kp/4][8] dwords,
 * its scales and zero points into S, Z [kb][8] fp32, then passes of 4 (i8) / 2 (f32) activation rows over T.
 * AVX2 has no unsigned x signed byte product without saturation, so KERN_I8 multiplies the signed codes
 * (code − 128) by the broadcast activations through VPMADDUBSW on |code − 128| and the activations carrying
 * the codes' signs (each pair sum at most 2·128·127 < 2^15: never saturates), then VPMADDWD to int32 lanes:
 * each lane sums Σ (code − 128)·q over the group exactly; with zero points 128·Σq is added back in integers
 * (Σ code·q, as the avx512 row's) before the fp32 steps of group_i8. Every lane's fp32 steps are the same
 * whatever M and the pass width, so a row alone has the bits it has in a launch of several.
 * Results agree with kern_ref_rows within kern_ref_bound (t/unit/kern_paths). */
#include <immintrin.h>

#include "kern_int.h"

#define INLINE static inline __attribute__((always_inline))
#define MT_I8 4
#define MT_F32 2

/* 8 rows of 8 dwords (v[r]: row r) into 8 columns (v[c]: every row's dword c) */
INLINE void transpose8(__m256i *v)
{
    __m256i a[8], b[8];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        a[2 * i] = _mm256_unpacklo_epi32(v[2 * i], v[2 * i + 1]);
        a[2 * i + 1] = _mm256_unpackhi_epi32(v[2 * i], v[2 * i + 1]);
    }
    /* b[4i + j], 128-bit lane L: rows 4i..4i+3 at dword 4L + j */
#pragma GCC unroll 2
    for (int i = 0; i < 2; i++) {
        b[4 * i] = _mm256_unpacklo_epi64(a[4 * i], a[4 * i + 2]);
        b[4 * i + 1] = _mm256_unpackhi_epi64(a[4 * i], a[4 * i + 2]);
        b[4 * i + 2] = _mm256_unpacklo_epi64(a[4 * i + 1], a[4 * i + 3]);
        b[4 * i + 3] = _mm256_unpackhi_epi64(a[4 * i + 1], a[4 * i + 3]);
    }
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        v[j] = _mm256_permute2x128_si256(b[j], b[4 + j], 0x20);
        v[4 + j] = _mm256_permute2x128_si256(b[j], b[4 + j], 0x31);
    }
}

/* one chunk of the tile: 32 bytes (16 at kp's end: kp is a multiple of 16) of each of its R rows (0 past R),
 * transposed: v[c] holds every row's codes at k0 + 4c .. k0 + 4c + 3; and 512 bytes of the next tile (8·kp
 * contiguous bytes) into L2: one tile ahead, linearly */
INLINE void tile_chunk(const uint8_t *base, uint32_t kp, uint32_t R, uint32_t k0, __m256i *v)
{
    const char *next = (const char *)(base + (size_t)8 * kp);
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++)
        _mm_prefetch(next + (size_t)k0 * 8 + i * 64, _MM_HINT_T1);
#pragma GCC unroll 8
    for (uint32_t r = 0; r < 8; r++) {
        if (r >= R)
            v[r] = _mm256_setzero_si256();
        else if (kp - k0 >= 32)
            v[r] = _mm256_loadu_si256((const __m256i *)(base + (size_t)r * kp + k0));
        else
            v[r] = _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)(base + (size_t)r * kp + k0)));
    }
    transpose8(v);
}

/* the tile's codes as T [ceil(kp/32)·8][8] dwords */
static void tile_codes(const ogk_qtensor *W, uint32_t kp, uint32_t n0, uint32_t R, uint32_t *T)
{
    const uint8_t *base = W->codes + (size_t)n0 * kp;
    __m256i v[8];
    for (uint32_t k0 = 0; k0 < kp; k0 += 32) {
        tile_chunk(base, kp, R, k0, v);
#pragma GCC unroll 8
        for (int c = 0; c < 8; c++)
            _mm256_store_si256((__m256i *)(T + ((size_t)k0 / 4 + c) * 8), v[c]);
    }
}

/* its scales and zero points as S, Z [kb][8] fp32 (0 past R) */
static void tile_scales(const ogk_qtensor *W, uint32_t n0, uint32_t R, float *S, float *Z)
{
    const uint32_t kb = W->k_blocks;
    for (uint32_t g = 0; g < kb; g++)
        for (uint32_t r = 0; r < 8; r++) {
            size_t gi = (size_t)(n0 + r) * kb + g;
            S[g * 8 + r] = r < R ? kern_scale_at(W, gi) : 0.0f;
            Z[g * 8 + r] = r < R ? (float)(W->has_zp ? W->zeros[gi] : 128) : 0.0f;
        }
}

INLINE void store_out(const kern_job *j, int m, uint32_t n0, uint32_t R, __m256 y)
{
    float *out = j->Y + (size_t)m * j->ldy + n0;
    if (R == 8) {
        _mm256_storeu_ps(out, y);
        return;
    }
    float t[8];
    _mm256_storeu_ps(t, y);
    memcpy(out, t, R * sizeof *t);
}

/* acc + Σ over one unit (4 codes a lane) of (code − 128)·q, sc = code − 128 as int8, ac = |sc|, q the unit's
 * 4 activations */
INLINE __m256i unit_i8(__m256i acc, __m256i sc, __m256i ac, const int8_t *q)
{
    int32_t q4;
    memcpy(&q4, q, 4);
    __m256i p = _mm256_maddubs_epi16(ac, _mm256_sign_epi8(_mm256_set1_epi32(q4), sc));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}

/* the end of group xi = m·kb + g for one activation row, on every path: it = Σ (code − 128)·q, exact; with
 * zero points Σ code·q = it + 128·Σq, exact (|Σ code·q| <= 255·127·B < 2^31), less zp·Σq in fp32 */
INLINE __m256 group_i8(const kern_job *j, __m256 y, __m256i it, __m256 s, __m256 z, size_t xi, const int zp)
{
    __m256 v;
    if (zp) {
        v = _mm256_cvtepi32_ps(_mm256_add_epi32(it, _mm256_set1_epi32(128 * j->xqs[xi])));
        v = _mm256_fnmadd_ps(z, _mm256_set1_ps(j->xqf[xi]), v);
    } else
        v = _mm256_cvtepi32_ps(it);
    return _mm256_fmadd_ps(_mm256_mul_ps(s, _mm256_set1_ps(j->xd[xi])), v, y);
}

/* M = 1, i8: the tile's chunks used as they are transposed (no T); two accumulators, as pass_i8's narrow
 * passes (integer sums: the same bits) */
INLINE void row1_i8(const kern_job *j, const float *S, const float *Z, uint32_t n0, uint32_t R, const uint32_t B,
                    const int zp)
{
    const uint32_t kp = j->kp, c4 = B / 4;
    const uint8_t *base = j->W->codes + (size_t)n0 * kp;
    const __m256i bias = _mm256_set1_epi8((char)0x80);
    __m256 y = _mm256_setzero_ps();
    __m256i a0 = _mm256_setzero_si256(), a1 = _mm256_setzero_si256(), v[8];
    for (uint32_t k0 = 0; k0 < kp; k0 += 32) {
        tile_chunk(base, kp, R, k0, v);
        const uint32_t nu = kp - k0 < 32 ? (kp - k0) / 4 : 8;
#pragma GCC unroll 8
        for (uint32_t c = 0; c < 8; c++) {
            if (c >= nu)
                break;
            const uint32_t u = k0 / 4 + c;
            __m256i sc = _mm256_xor_si256(v[c], bias);
            if (c % 2)
                a1 = unit_i8(a1, sc, _mm256_abs_epi8(sc), j->xq + (size_t)u * 4);
            else
                a0 = unit_i8(a0, sc, _mm256_abs_epi8(sc), j->xq + (size_t)u * 4);
            if ((u + 1) % c4)
                continue;
            const uint32_t g = u / c4;
            y = group_i8(j, y, _mm256_add_epi32(a0, a1), _mm256_load_ps(S + (size_t)g * 8),
                         _mm256_load_ps(Z + (size_t)g * 8), g, zp);
            a0 = a1 = _mm256_setzero_si256();
        }
    }
    store_out(j, 0, n0, R, y);
}

INLINE void pass_i8(const kern_job *j, const uint32_t *T, const float *S, const float *Z, uint32_t n0, uint32_t R,
                    int m0, const int MT, const uint32_t B, const int zp)
{
    const uint32_t kb = j->W->k_blocks, kp = j->kp, c4 = B / 4;
    const int8_t *xq = j->xq + (size_t)m0 * kp;
    const __m256i bias = _mm256_set1_epi8((char)0x80);
    __m256 y[MT_I8];
#pragma GCC unroll 4
    for (int m = 0; m < MT; m++)
        y[m] = _mm256_setzero_ps();
    /* narrow passes: two accumulators (the latency of the add chain; integer sums, the same bits) */
    const int NA = MT <= 2 ? 2 : 1;
    for (uint32_t g = 0; g < kb; g++) {
        __m256i a[2][MT_I8];
#pragma GCC unroll 4
        for (int m = 0; m < MT; m++)
            a[0][m] = a[1][m] = _mm256_setzero_si256();
        const uint32_t *t = T + (size_t)g * c4 * 8;
#pragma GCC unroll 8
        for (uint32_t c = 0; c < c4; c += NA)
#pragma GCC unroll 2
            for (int h = 0; h < NA; h++) {
                __m256i sc = _mm256_xor_si256(_mm256_load_si256((const __m256i *)(t + (c + h) * 8)), bias);
                __m256i ac = _mm256_abs_epi8(sc);
#pragma GCC unroll 4
                for (int m = 0; m < MT; m++)
                    a[h][m] = unit_i8(a[h][m], sc, ac, xq + (size_t)m * kp + ((size_t)g * c4 + c + h) * 4);
            }
        __m256 s = _mm256_load_ps(S + (size_t)g * 8), z = _mm256_load_ps(Z + (size_t)g * 8);
#pragma GCC unroll 4
        for (int m = 0; m < MT; m++)
            y[m] = group_i8(j, y[m], NA == 2 ? _mm256_add_epi32(a[0][m], a[1][m]) : a[0][m], s, z,
                            (size_t)(m0 + m) * kb + g, zp);
    }
#pragma GCC unroll 4
    for (int m = 0; m < MT; m++)
        store_out(j, m0 + m, n0, R, y[m]);
}

INLINE void pass_f32(const kern_job *j, const uint32_t *T, const float *S, const float *Z, uint32_t n0, uint32_t R,
                     int m0, const int MT, const uint32_t B)
{
    const uint32_t kb = j->W->k_blocks, kp = j->kp, c4 = B / 4;
    const __m256i ff = _mm256_set1_epi32(0xFF);
    const float *x = j->xf + (size_t)m0 * kp;
    __m256 y[MT_F32];
#pragma GCC unroll 2
    for (int m = 0; m < MT; m++)
        y[m] = _mm256_setzero_ps();
    for (uint32_t g = 0; g < kb; g++) {
        __m256 p[MT_F32][4];
#pragma GCC unroll 2
        for (int m = 0; m < MT; m++)
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++)
                p[m][i] = _mm256_setzero_ps();
        const uint32_t *t = T + (size_t)g * c4 * 8;
        for (uint32_t c = 0; c < c4; c++) {
            __m256i w = _mm256_load_si256((const __m256i *)(t + c * 8));
            const size_t k = ((size_t)g * c4 + c) * 4;
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) {
                __m256 cf = _mm256_cvtepi32_ps(i == 3 ? _mm256_srli_epi32(w, 24)
                                                      : _mm256_and_si256(i ? _mm256_srli_epi32(w, 8 * i) : w, ff));
#pragma GCC unroll 2
                for (int m = 0; m < MT; m++)
                    p[m][i] = _mm256_fmadd_ps(cf, _mm256_set1_ps(x[(size_t)m * kp + k + i]), p[m][i]);
            }
        }
        __m256 s = _mm256_load_ps(S + (size_t)g * 8), z = _mm256_load_ps(Z + (size_t)g * 8);
#pragma GCC unroll 2
        for (int m = 0; m < MT; m++) {
            __m256 v = _mm256_add_ps(_mm256_add_ps(p[m][0], p[m][1]), _mm256_add_ps(p[m][2], p[m][3]));
            v = _mm256_fnmadd_ps(z, _mm256_set1_ps(j->xs[(size_t)(m0 + m) * kb + g]), v);
            y[m] = _mm256_fmadd_ps(s, v, y[m]);
        }
    }
#pragma GCC unroll 2
    for (int m = 0; m < MT; m++)
        store_out(j, m0 + m, n0, R, y[m]);
}

#define PASS_I8(MT)                                                                                                   \
    static void i8_##MT(const kern_job *j, const uint32_t *T, const float *S, const float *Z, uint32_t n0,           \
                        uint32_t R, int m0)                                                                           \
    {                                                                                                                 \
        if (j->W->block == 32 && !j->W->has_zp)                                                                       \
            pass_i8(j, T, S, Z, n0, R, m0, MT, 32, 0);                                                                \
        else                                                                                                          \
            pass_i8(j, T, S, Z, n0, R, m0, MT, j->W->block, j->W->has_zp != 0);                                       \
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
PASS_F32(1)
PASS_F32(2)

typedef void (*pass_fn)(const kern_job *, const uint32_t *, const float *, const float *, uint32_t, uint32_t, int);

/* rows [n0, n1), in tiles of 8 from n0 */
void kern_q8_avx2(const kern_job *j, uint32_t n0, uint32_t n1)
{
    static const pass_fn i8[MT_I8 + 1] = {0, i8_1, i8_2, i8_3, i8_4};
    static const pass_fn f32[MT_F32 + 1] = {0, f32_1, f32_2};
    const ogk_qtensor *W = j->W;
    const uint32_t kp = j->kp;
    const size_t tb = (size_t)(kp + 31) / 32 * 256, sb = (size_t)W->k_blocks * 32;
    uint8_t *buf = kern_scratch(1, tb + 2 * sb);
    if (!buf)
        abort(); /* as rm_band's: the scratch of a tile of 8 rows */
    uint32_t *T = (uint32_t *)buf;
    float *S = (float *)(buf + tb), *Z = (float *)(buf + tb + sb);
    const int i8m = j->mode == KERN_I8, mt = i8m ? MT_I8 : MT_F32;
    for (uint32_t n = n0; n < n1; n += 8) {
        uint32_t R = n1 - n < 8 ? n1 - n : 8;
        tile_scales(W, n, R, S, Z);
        if (j->M == 1 && i8m) {
            if (W->block == 32 && !W->has_zp)
                row1_i8(j, S, Z, n, R, 32, 0);
            else
                row1_i8(j, S, Z, n, R, W->block, W->has_zp != 0);
            continue;
        }
        tile_codes(W, kp, n, R, T);
        for (int m0 = 0; m0 < j->M; m0 += mt) {
            int w = j->M - m0 < mt ? j->M - m0 : mt;
            (i8m ? i8 : f32)[w](j, T, S, Z, n, R, m0);
        }
    }
}
