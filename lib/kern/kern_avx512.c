/* AVX-512 micro-kernels for the b8 layout (compiled with -mavx512f/bw/vl/dq/vnni).
 * One 64-byte chunk = 16 rows x 8 k: dword r holds row r's codes for k0..k0+3 in the low nibbles
 * and k0+4..k0+7 in the high nibbles.
 *   f32: vpermps with the dword shifted right by 8i (+4) looks the low nibble up in {0..15}: one
 *        shift + one permute give 16 rows' codes for one k as fp32, then one FMA per activation row.
 *   i8:  (chunk & 0x0F) and (chunk >> 4 & 0x0F) are 16 rows x 4 u8 codes; vpdpbusd against 4
 *        broadcast int8 activations accumulates 16 rows in int32.
 * Per group: y += scale · (Σ code·x − zp · Σx).
 * M = 1 (decode, memory-bound): gemv_* walk row blocks in memory order with software prefetch, so
 * codes and scales are two linear streams. M > 1: tiles of RB = 2 row blocks x MT <= 8 activation
 * rows, integer/fp32 accumulators in registers, the per-group fp32 sums in memory. */
#include "b8_avx512.h"

#include <string.h>

INLINE void tile_f32(const kern_job *j, uint32_t rb, const int RB, const int MT, int m0)
{
    const ogk_qtensor *W = j->W;
    const uint32_t B = W->block, kb = W->k_blocks, kp = j->kp, cpg = B / 8;
    const __m512 tbl = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    float y[4][8][16] __attribute__((aligned(64))); /* fp32 sums in memory, touched once per group */
    __m512 a0[4][8], a1[4][8];
    const uint8_t *cb[4];
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++) {
        cb[r] = W->codes + (size_t)(rb + r) * kb * B * 8;
#pragma GCC unroll 8
        for (int m = 0; m < MT; m++)
            _mm512_store_ps(y[r][m], _mm512_setzero_ps());
    }
    for (uint32_t g = 0; g < kb; g++) {
        if (PF_BYTES)
            prefetch_groups(W, rb, RB, g);
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++)
#pragma GCC unroll 8
            for (int m = 0; m < MT; m++)
                a0[r][m] = a1[r][m] = _mm512_setzero_ps();
        const float *x[8];
#pragma GCC unroll 8
        for (int m = 0; m < MT; m++)
            x[m] = j->xf + (size_t)(m0 + m) * kp + (size_t)g * B;
        for (uint32_t c = 0; c < cpg; c++) {
            __m512i w[4];
#pragma GCC unroll 4
            for (int r = 0; r < RB; r++)
            {
                w[r] = _mm512_loadu_si512(cb[r] + ((size_t)g * cpg + c) * 64);
                if (PF_BYTES)
                    _mm_prefetch((const char *)cb[r] + ((size_t)g * cpg + c) * 64 + PF_BYTES, PF_HINT);
            }
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) {
#pragma GCC unroll 4
                for (int r = 0; r < RB; r++) {
                    __m512 lo = _mm512_permutexvar_ps(i ? _mm512_srli_epi32(w[r], 8 * i) : w[r], tbl);
                    __m512 hi = _mm512_permutexvar_ps(_mm512_srli_epi32(w[r], 8 * i + 4), tbl);
#pragma GCC unroll 8
                    for (int m = 0; m < MT; m++) {
                        a0[r][m] = _mm512_fmadd_ps(lo, _mm512_set1_ps(x[m][c * 8 + i]), a0[r][m]);
                        if (MT == 1)
                            a1[r][m] = _mm512_fmadd_ps(hi, _mm512_set1_ps(x[m][c * 8 + 4 + i]), a1[r][m]);
                        else
                            a0[r][m] = _mm512_fmadd_ps(hi, _mm512_set1_ps(x[m][c * 8 + 4 + i]), a0[r][m]);
                    }
                }
            }
        }
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++) {
            size_t gi = ((size_t)(rb + r) * kb + g) * 16;
            __m512 s = load_scales(W, gi), z = load_zeros(W, gi);
#pragma GCC unroll 8
            for (int m = 0; m < MT; m++) {
                __m512 t = MT == 1 ? _mm512_add_ps(a0[r][m], a1[r][m]) : a0[r][m];
                t = _mm512_fnmadd_ps(z, _mm512_set1_ps(j->xs[(size_t)(m0 + m) * kb + g]), t);
                _mm512_store_ps(y[r][m], _mm512_fmadd_ps(s, t, _mm512_load_ps(y[r][m])));
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++)
#pragma GCC unroll 8
        for (int m = 0; m < MT; m++)
            store_rows(j, rb + r, m0 + m, _mm512_load_ps(y[r][m]));
}

/* int8 tiles. MT = 1 (the odd row block, single rows): two int32 accumulators per row block (lo, hi
 * nibbles) to hide the vpdpbusd latency. MT > 1: one accumulator per (row block, activation row), so
 * RB x MT of them plus the unpacked codes fit the 32 registers; the group's chunk loop is straight-line
 * code for B = 32 (the compiler otherwise copies and spills accumulators on every chunk). */
INLINE void tile_i8_body(const kern_job *j, uint32_t rb, const int RB, const int MT, int m0, const uint32_t B,
                          const int zp)
{
    const ogk_qtensor *W = j->W;
    const uint32_t kb = W->k_blocks, kp = j->kp, cpg = B / 8;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512 y[4][8]; /* the fp32 sums: registers at MT <= 4, the compiler's stack slots beyond */
    const uint8_t *cb[4];
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++) {
        cb[r] = W->codes + (size_t)(rb + r) * kb * B * 8;
#pragma GCC unroll 8
        for (int m = 0; m < MT; m++)
            y[r][m] = _mm512_setzero_ps();
    }
    const int8_t *q0 = j->xq + (size_t)m0 * kp;
    for (uint32_t g = 0; g < kb; g++) {
        if (PF_BYTES)
            prefetch_groups(W, rb, RB, g);
        /* without zero points the accumulators start at −8·Σq, so they end at the exact Σ (code − 8)·q */
        __m512i a[4][8], a1[4];
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++) {
            a1[r] = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int m = 0; m < MT; m++)
                a[r][m] = zp ? _mm512_setzero_si512() : _mm512_set1_epi32(j->xz8[(size_t)(m0 + m) * kb + g]);
        }
        const int8_t *q = q0 + (size_t)g * B;
#pragma GCC unroll 16
        for (uint32_t c = 0; c < cpg; c++) {
            __m512i lo[4], hi[4];
#pragma GCC unroll 4
            for (int r = 0; r < RB; r++) {
                const uint8_t *p = cb[r] + ((size_t)g * cpg + c) * 64;
                __m512i w = _mm512_loadu_si512(p);
                if (PF_BYTES)
                    _mm_prefetch((const char *)p + PF_BYTES, PF_HINT);
                lo[r] = _mm512_and_si512(w, m4);
                hi[r] = _mm512_and_si512(_mm512_srli_epi16(w, 4), m4);
            }
            /* activation rows outside, row blocks inside: two broadcasts live at a time */
#pragma GCC unroll 8
            for (int m = 0; m < MT; m++) {
                int32_t ql, qh;
                memcpy(&ql, q + (size_t)m * kp + c * 8, 4);
                memcpy(&qh, q + (size_t)m * kp + c * 8 + 4, 4);
                const __m512i bl = _mm512_set1_epi32(ql), bh = _mm512_set1_epi32(qh);
#pragma GCC unroll 4
                for (int r = 0; r < RB; r++) {
                    a[r][m] = _mm512_dpbusd_epi32(a[r][m], lo[r], bl);
                    if (MT == 1)
                        a1[r] = _mm512_dpbusd_epi32(a1[r], hi[r], bh);
                    else
                        a[r][m] = _mm512_dpbusd_epi32(a[r][m], hi[r], bh);
                }
            }
        }
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++) {
            size_t gi = ((size_t)(rb + r) * kb + g) * 16;
            __m512 s = load_scales(W, gi);
#pragma GCC unroll 8
            for (int m = 0; m < MT; m++) {
                __m512i it = MT == 1 ? _mm512_add_epi32(a[r][m], a1[r]) : a[r][m];
                size_t xi = (size_t)(m0 + m) * kb + g;
                /* exact: |Σ code·q|, zp·|Σq| < 2^24 for B <= 4096 */
                __m512 t = zp ? _mm512_fnmadd_ps(load_zeros(W, gi), _mm512_set1_ps(j->xqf[xi]), _mm512_cvtepi32_ps(it))
                              : _mm512_cvtepi32_ps(it);
                y[r][m] = _mm512_fmadd_ps(_mm512_mul_ps(s, _mm512_set1_ps(j->xd[xi])), t, y[r][m]);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++)
#pragma GCC unroll 8
        for (int m = 0; m < MT; m++)
            store_rows(j, rb + r, m0 + m, y[r][m]);
}

/* block 32 without zero points (the builder's default) with its chunk loop unrolled; others with the loop */
INLINE void tile_i8(const kern_job *j, uint32_t rb, const int RB, const int MT, int m0)
{
    if (j->W->block == 32 && !j->W->has_zp)
        tile_i8_body(j, rb, RB, MT, m0, 32, 0);
    else
        tile_i8_body(j, rb, RB, MT, m0, j->W->block, j->W->has_zp);
}

#define TILE(mode, RB, MT)                                                                                             \
    static void mode##_##RB##_##MT(const kern_job *j, uint32_t rb, int m0) { tile_##mode(j, rb, RB, MT, m0); }
TILE(f32, 1, 1)
TILE(f32, 2, 1)
TILE(f32, 2, 2)
TILE(f32, 2, 3)
TILE(f32, 2, 4)
TILE(f32, 2, 5)
TILE(f32, 2, 6)
TILE(f32, 2, 7)
TILE(f32, 2, 8)
TILE(i8, 1, 1)
TILE(i8, 2, 1)
TILE(i8, 2, 2)
TILE(i8, 2, 3)
TILE(i8, 2, 4)
TILE(i8, 2, 5)
TILE(i8, 2, 6)
TILE(i8, 2, 7)
TILE(i8, 2, 8)

/* M = 1 (decode): row blocks one after another, so codes and scales are each read as one linear
 * stream (what DRAM prefetchers like best), with enough independent accumulators per row block to
 * hide the FMA / vpdpbusd latency: 8 in f32 (one per k of a chunk), 4 in i8. */
/* start of a range: request its first PF_BYTES of codes (and their scales) at once, so the stream
 * does not begin with a run of demand misses while the prefetchers ramp up */
INLINE void prime_range(const ogk_qtensor *W, uint32_t rb0, uint32_t rb1)
{
    const uint8_t *c = W->codes + (size_t)rb0 * W->k_blocks * W->block * 8;
    size_t n = (size_t)(rb1 - rb0) * W->k_blocks * W->block * 8;
    for (size_t o = 0; o < PF_BYTES && o < n; o += 64)
        _mm_prefetch((const char *)c + o, PF_HINT);
    size_t ss = W->scale_dtype == OGK_F32 ? 4 : 2, gi = (size_t)rb0 * W->k_blocks * 16;
    for (size_t o = 0; o < PF_BYTES / 8; o += 64)
        _mm_prefetch((const char *)W->scales + gi * ss + o, PF_HINT);
}

/* One loop body per (block, scale dtype, zero points) combination, so that the per-group work is
 * straight-line code: the group's chunk loop unrolls for B = 32 and 128, the scale conversion and
 * the zero-point term are fixed, and the prefetch addresses are a pointer plus a constant. Scales and
 * zero points are prefetched by address, one stream each, across row-block boundaries. */
INLINE __m512 scales_at(const void *s, int dt)
{
    switch (dt) {
    case OGK_F32: return _mm512_loadu_ps(s);
    case OGK_F16: return _mm512_cvtph_ps(_mm256_loadu_si256(s));
    default: return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(s)), 16));
    }
}

INLINE __m512 zeros_at(const uint8_t *z, int zp)
{
    return zp ? _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)z))) : _mm512_set1_ps(8.0f);
}

/* one group's 16 row sums for M = 1, before the zero-point term: fp32 activations (8 accumulators,
 * one per k of a chunk) or int8 ones (4 int32 accumulators, converted exactly) */
INLINE __m512 group_f32(const kern_job *j, const uint8_t *cp, uint32_t cpg, uint32_t g, uint32_t B)
{
    const __m512 tbl = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const float *x = j->xf + (size_t)g * B;
    __m512 a[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++)
        a[i] = _mm512_setzero_ps();
#pragma GCC unroll 16
    for (uint32_t c = 0; c < cpg; c++) {
        __m512i w = _mm512_loadu_si512(cp + c * 64);
        if (PF_BYTES)
            _mm_prefetch((const char *)cp + c * 64 + PF_BYTES, PF_HINT);
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            __m512 lo = _mm512_permutexvar_ps(i ? _mm512_srli_epi32(w, 8 * i) : w, tbl);
            __m512 hi = _mm512_permutexvar_ps(_mm512_srli_epi32(w, 8 * i + 4), tbl);
            a[i] = _mm512_fmadd_ps(lo, _mm512_set1_ps(x[c * 8 + i]), a[i]);
            a[4 + i] = _mm512_fmadd_ps(hi, _mm512_set1_ps(x[c * 8 + 4 + i]), a[4 + i]);
        }
    }
    return _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3])),
                         _mm512_add_ps(_mm512_add_ps(a[4], a[5]), _mm512_add_ps(a[6], a[7])));
}

INLINE __m512 group_i8(const kern_job *j, const uint8_t *cp, uint32_t cpg, uint32_t g, uint32_t B)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const int8_t *q = j->xq + (size_t)g * B;
    /* low nibbles as codes, high nibbles in place (16 x code): one load and two logic operations a
     * chunk, and one shift of the high sums a group; exact, so the bits of the shifted version */
    __m512i a[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
#pragma GCC unroll 8
    for (uint32_t c = 0; c < cpg; c += 2) { /* B >= 16: cpg is even */
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m512i w = _mm512_loadu_si512(cp + (c + h) * 64);
            __asm__("" : "+v"(w)); /* in a register: GCC would fold a load into each of its two uses */
            if (PF_BYTES)
                _mm_prefetch((const char *)cp + (c + h) * 64 + PF_BYTES, PF_HINT);
            int32_t ql, qh;
            memcpy(&ql, q + (c + h) * 8, 4);
            memcpy(&qh, q + (c + h) * 8 + 4, 4);
            a[2 * h] = _mm512_dpbusd_epi32(a[2 * h], _mm512_and_si512(w, m4), _mm512_set1_epi32(ql));
            a[2 * h + 1] = _mm512_dpbusd_epi32(a[2 * h + 1], _mm512_andnot_si512(m4, w), _mm512_set1_epi32(qh));
        }
    }
    /* exact: |Σ code·q|, zp·|Σq| < 2^24 for B <= 4096; the high sums are multiples of 16 */
    __m512i hi = _mm512_srai_epi32(_mm512_add_epi32(a[1], a[3]), 4);
    return _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_add_epi32(a[0], a[2]), hi));
}

/* M = 1: row blocks in memory order; per group y += scale · (Σ code·x − zp · Σx), with the
 * activation block scale folded into the weight scale in i8 mode */
INLINE void gemv_body(const kern_job *j, uint32_t rb0, uint32_t rb1, const uint32_t B, const int dt, const int zp,
                      const int i8)
{
    const ogk_qtensor *W = j->W;
    const uint32_t kb = W->k_blocks, cpg = B / 8;
    const size_t ss = dt == OGK_F32 ? 4 : 2, ahead = PF_BYTES / (B * 8) + 1;
    if (PF_BYTES)
        prime_range(W, rb0, rb1);
    const uint8_t *cp = W->codes + (size_t)rb0 * kb * B * 8;
    const char *sp = (const char *)W->scales + (size_t)rb0 * kb * 16 * ss;
    const uint8_t *zpp = zp ? W->zeros + (size_t)rb0 * kb * 16 : NULL;
    for (uint32_t rb = rb0; rb < rb1; rb++) {
        __m512 y = _mm512_setzero_ps();
        for (uint32_t g = 0; g < kb; g++, cp += B * 8, sp += 16 * ss, zpp += zp ? 16 : 0) {
            if (PF_BYTES) {
                _mm_prefetch(sp + ahead * 16 * ss, PF_HINT);
                if (zp)
                    _mm_prefetch((const char *)zpp + ahead * 16, PF_HINT);
            }
            __m512 t = i8 ? group_i8(j, cp, cpg, g, B) : group_f32(j, cp, cpg, g, B);
            t = _mm512_fnmadd_ps(zeros_at(zpp, zp), _mm512_set1_ps(i8 ? j->xqf[g] : j->xs[g]), t);
            __m512 s = scales_at(sp, dt);
            y = _mm512_fmadd_ps(i8 ? _mm512_mul_ps(s, _mm512_set1_ps(j->xd[g])) : s, t, y);
        }
        store_rows(j, rb, 0, y);
    }
}

#define GEMV_DT(mode, I8, B, zp)                                                                                         \
    static void gemv_##mode##_##B##_##zp(const kern_job *j, uint32_t rb0, uint32_t rb1, int dt)                        \
    {                                                                                                                  \
        uint32_t b = (B) ? (B) : j->W->block;                                                                          \
        switch (dt) {                                                                                                  \
        case OGK_F32: gemv_body(j, rb0, rb1, b, OGK_F32, zp, I8); break;                                             \
        case OGK_F16: gemv_body(j, rb0, rb1, b, OGK_F16, zp, I8); break;                                             \
        default: gemv_body(j, rb0, rb1, b, OGK_BF16, zp, I8); break;                                                  \
        }                                                                                                              \
    }
#define GEMV(mode, I8) GEMV_DT(mode, I8, 32, 0) GEMV_DT(mode, I8, 32, 1) GEMV_DT(mode, I8, 128, 0) \
    GEMV_DT(mode, I8, 128, 1) GEMV_DT(mode, I8, 0, 0) GEMV_DT(mode, I8, 0, 1)
GEMV(f32, 0)
GEMV(i8, 1)

static void gemv(const kern_job *j, uint32_t rb0, uint32_t rb1)
{
    typedef void (*fn)(const kern_job *, uint32_t, uint32_t, int);
    static const fn f32[3][2] = {{gemv_f32_32_0, gemv_f32_32_1}, {gemv_f32_128_0, gemv_f32_128_1},
                                 {gemv_f32_0_0, gemv_f32_0_1}};
    static const fn i8[3][2] = {{gemv_i8_32_0, gemv_i8_32_1}, {gemv_i8_128_0, gemv_i8_128_1},
                                {gemv_i8_0_0, gemv_i8_0_1}};
    const ogk_qtensor *W = j->W;
    int bi = W->block == 32 ? 0 : W->block == 128 ? 1 : 2;
    (j->mode == KERN_I8 ? i8 : f32)[bi][W->has_zp != 0](j, rb0, rb1, W->scale_dtype);
}

typedef void (*tile_fn)(const kern_job *, uint32_t, int);
#define MT 8 /* activation rows per tile, both modes (tiles 2 x 1 .. 2 x MT) */
/* int8 launches of KERN_WIDE_M rows and more take 4 rows per tile: the tile's 8 int32 and 8 fp32 sums
 * stay in registers, where 8 rows keep the fp32 sums in memory, and a zmm store costs the VNNI pipes ~1.7
 * cycles on Zen 4 (bench/vnni-pipes.sh). npu-gemm --model-pass of the qwen05b container, 2 threads, AMD
 * EPYC (Zen 4), median of 6 alternated launches: 128 rows 219 -> 205 ms, 16 rows 26.6 -> 25.9 ms; at 8
 * rows no difference (13.9 both), so narrower launches keep 8. */
#define MT_WIDE 4

void kern_gemv_avx512(const kern_job *j, uint32_t rb0, uint32_t rb1) { gemv(j, rb0, rb1); }

void kern_gemm_avx512(const kern_job *j, uint32_t rb0, uint32_t rb1)
{
    int i8 = j->mode == KERN_I8;
    uint32_t rb = rb0;
    static const tile_fn f32_tiles[MT + 1] = {0, f32_2_1, f32_2_2, f32_2_3, f32_2_4, f32_2_5, f32_2_6, f32_2_7, f32_2_8};
    static const tile_fn i8_tiles[MT + 1] = {0, i8_2_1, i8_2_2, i8_2_3, i8_2_4, i8_2_5, i8_2_6, i8_2_7, i8_2_8};
    const int mt = i8 && j->M >= KERN_WIDE_M ? MT_WIDE : MT;
    for (; rb + 2 <= rb1; rb += 2)
        for (int m0 = 0; m0 < j->M; m0 += mt) {
            int n = j->M - m0 < mt ? j->M - m0 : mt;
            (i8 ? i8_tiles : f32_tiles)[n](j, rb, m0);
        }
    for (; rb < rb1; rb++)
        for (int m0 = 0; m0 < j->M; m0++)
            (i8 ? i8_1_1 : f32_1_1)(j, rb, m0);
}

/* 16 vectors' lanes reduced into one vector, lane j from v[j] (max or add): four levels of pairs, each
 * output the lanes of two inputs' halves side by side (the first w of every 2w lanes against the second w);
 * after the last level lane j holds v[j]'s result. 15 x (two permutes + one operation) against 16 separate
 * reductions' ~6 operations each. */
static const int32_t red_idx[4][2][16] = {
#define RI(w, h, l) ((l) / (w) < 8 / (w) ? 0 : 16) + (l) / (w) % (8 / (w)) * 2 * (w) + (l) % (w) + (h) * (w)
#define RIDX(w, h)                                                                                                     \
    {RI(w, h, 0),  RI(w, h, 1),  RI(w, h, 2),  RI(w, h, 3),  RI(w, h, 4),  RI(w, h, 5),  RI(w, h, 6),  RI(w, h, 7),   \
     RI(w, h, 8),  RI(w, h, 9),  RI(w, h, 10), RI(w, h, 11), RI(w, h, 12), RI(w, h, 13), RI(w, h, 14), RI(w, h, 15)}
    {RIDX(8, 0), RIDX(8, 1)}, {RIDX(4, 0), RIDX(4, 1)}, {RIDX(2, 0), RIDX(2, 1)}, {RIDX(1, 0), RIDX(1, 1)}};
#undef RIDX
#undef RI

/* max (floats) or add (int32): permutes move bits, so one tree serves both */
INLINE __m512i reduce16(__m512i *v, const int add)
{
    for (int lv = 0, n = 16; lv < 4; lv++, n /= 2) {
        __m512i lo = _mm512_loadu_si512(red_idx[lv][0]), hi = _mm512_loadu_si512(red_idx[lv][1]);
        for (int i = 0; i < n / 2; i++) {
            __m512i a = _mm512_permutex2var_epi32(v[2 * i], lo, v[2 * i + 1]),
                    b = _mm512_permutex2var_epi32(v[2 * i], hi, v[2 * i + 1]);
            v[i] = add ? _mm512_add_epi32(a, b)
                       : _mm512_castps_si512(_mm512_max_ps(_mm512_castsi512_ps(a), _mm512_castsi512_ps(b)));
        }
    }
    return v[0];
}

/* block 32: groups [g, g + n) of one row, n <= 16, all inside k, with the per-group operations of the loop
 * below (the same fp32 steps, so the same bits) and the horizontal reductions done 16 groups at a time */
INLINE void quant16_b32(const float *x, uint32_t g, int n, int8_t *q, float *d, int32_t *qs)
{
    const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    const float *xg = x + (size_t)g * 32;
    __m512i a[16];
#pragma GCC unroll 16
    for (int j = 0; j < 16; j++) { /* groups past n read nothing and come out 0 */
        __mmask16 mk = j < n ? 0xFFFF : 0;
        __m512 m = _mm512_max_ps(_mm512_setzero_ps(), _mm512_and_ps(_mm512_maskz_loadu_ps(mk, xg + 32 * j), absmask));
        a[j] = _mm512_castps_si512(
            _mm512_max_ps(m, _mm512_and_ps(_mm512_maskz_loadu_ps(mk, xg + 32 * j + 16), absmask)));
    }
    __m512 amax = _mm512_castsi512_ps(reduce16(a, 0));
    __mmask16 pos = _mm512_cmp_ps_mask(amax, _mm512_setzero_ps(), _CMP_GT_OQ), mn = (__mmask16)((1u << n) - 1);
    float inv[16] __attribute__((aligned(64)));
    _mm512_store_ps(inv, _mm512_maskz_div_ps(pos, _mm512_set1_ps(127.0f), amax));
    _mm512_mask_storeu_ps(d + g, mn, _mm512_div_ps(amax, _mm512_set1_ps(127.0f)));
    __m512i s[16];
#pragma GCC unroll 16
    for (int j = 0; j < 16; j++) {
        __mmask16 mk = j < n ? 0xFFFF : 0;
        __m512 vi = _mm512_set1_ps(inv[j]);
        __m512i v0 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(mk, xg + 32 * j), vi)),
                v1 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(mk, xg + 32 * j + 16), vi));
        s[j] = _mm512_add_epi32(v0, v1);
        if (j < n) {
            _mm_storeu_si128((__m128i *)(q + (size_t)g * 32 + 32 * j), _mm512_cvtepi32_epi8(v0));
            _mm_storeu_si128((__m128i *)(q + (size_t)g * 32 + 32 * j + 16), _mm512_cvtepi32_epi8(v1));
        }
    }
    _mm512_mask_storeu_epi32(qs + g, mn, reduce16(s, 1));
}

void kern_quant_rows_avx512(const float *x, int M, uint32_t k, uint32_t block, int8_t *q, float *d, int32_t *qs)
{
    uint32_t kb = (k + block - 1) / block;
    size_t kp = (size_t)kb * block;
    for (int m = 0; m < M; m++, x += k, q += kp, d += kb, qs += kb) {
        uint32_t g = 0;
        if (block == 32) { /* the whole groups (inside k), 16 at a time (n a constant: no masks), then the rest */
            uint32_t whole = k / 32;
            for (; g + 16 <= whole; g += 16)
                quant16_b32(x, g, 16, q, d, qs);
            if (g < whole)
                quant16_b32(x, g, (int)(whole - g), q, d, qs), g = whole;
        }
        for (; g < kb; g++) {
            uint32_t c0 = g * block;
            float amax = group_amax(x, c0, block, k);
            float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
            __m512 vi = _mm512_set1_ps(inv);
            __m512i s = _mm512_setzero_si512();
            for (uint32_t c = c0; c < c0 + block; c += 16) {
                __mmask16 mk = tail_mask(c, k);
                __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(mk, x + c), vi));
                s = _mm512_add_epi32(s, v);
                _mm_storeu_si128((__m128i *)(q + c), _mm512_cvtepi32_epi8(v));
            }
            d[g] = amax / 127.0f;
            qs[g] = _mm512_reduce_add_epi32(s);
        }
    }
}

uint64_t kern_read_avx512(const uint8_t *p, size_t n)
{
    __m512i a = _mm512_setzero_si512(), b = a, c = a, d = a;
    for (size_t i = 0; i < n; i += 256) {
        a = _mm512_xor_si512(a, _mm512_load_si512(p + i));
        b = _mm512_xor_si512(b, _mm512_load_si512(p + i + 64));
        c = _mm512_xor_si512(c, _mm512_load_si512(p + i + 128));
        d = _mm512_xor_si512(d, _mm512_load_si512(p + i + 192));
    }
    a = _mm512_xor_si512(_mm512_xor_si512(a, b), _mm512_xor_si512(c, d));
    uint64_t r[8];
    _mm512_storeu_si512(r, a);
    return r[0] ^ r[1] ^ r[2] ^ r[3] ^ r[4] ^ r[5] ^ r[6] ^ r[7]; /* a sink for the loads */
}
