/* AMX int8 tiles for the b8 layout (compiled with the AVX-512 flags plus -mamx-tile -mamx-int8). The amx
 * row of the ISA table uses them for KERN_I8 launches of KERN_AMX_MIN_M rows and more (prompt chunks,
 * wide batches) and for KERN_I16 launches of KERN_AMX16_MIN_M rows and more (the classifier of verify
 * passes and of the server's batched steps), in whole 16-row tiles (a last partial tile only when it
 * has more than KERN_AMX_REST rows); everything else (the rows after the tiles, M = 1, narrow batches,
 * f32) runs the avx512 row's kernels.
 *
 * Numerics are those of every KERN_I8 path, and bit for bit those of the avx512 tiles: per (output
 * row n, activation row m, group g) the exact integer t = Σ (code − zp)·q (|t| < 2^23 for B <= 4096, so
 * its fp32 conversion is exact and equals Σ code·q − zp·Σ q), then y += (scale·d)·t with one fused
 * multiply-add, groups in order.
 *
 * How: a 64-byte b8 chunk (16 rows x 8 k; dword r = row r's codes for k0..k0+3 in the low nibbles and
 * k0+4..k0+7 in the high ones) is, nibble by nibble, two rows of an AMX B tile in its "4 k per column"
 * order. So the row blocks of a work range are unpacked, a batch at a time (at most 512 KiB for wide
 * launches; 16 KiB for narrow ones, which prefetch the next batch meanwhile: amx_batch), into
 * per-thread scratch as signed bytes code − zp (kp·16 bytes per row block), and TDPBSSD multiplies them
 * with the int8 activations, which are tile-loaded straight from the prepared X (row stride kp). One
 * 16 x 16 output tile per (16 activation rows, row block), its fp32 sums in 16 registers over the
 * groups; K = min(B, 64) per product; per group the C tile goes to memory and AVX-512 applies scale·d.
 * Four C tiles (and two A, two B tiles) rotate: step g issues group g's products, stores group g − 1's
 * tile and scales group g − 2's sums. What bounds it (bench/amx-floor.sh, bench/results/2026-12-03e-emr.md):
 * per group the tile side (zero, loads, product, store; ~9 ns in L1 on the Emerald Rapids machine) and the
 * vector side (16 x cvt, mul, fma; ~12.6 ns) barely overlap, ~19 ns together; this kernel takes ~25 ns at
 * 512 rows.
 *
 * The tile state: Linux grants it per process (arch_prctl, done by isa.c before it offers this row);
 * each launch loads its configuration with an inline-asm LDTILECFG (GCC 12's _tile_loadconfig
 * declares an 8-byte operand for the 64-byte configuration, so the compiler may drop the stores that
 * fill it) and releases the tiles at the end. Activation tiles read up to 15 rows past the launch's
 * last row: kern.c leaves that slack after the prepared rows (their sums are never used). */
#include "b8_avx512.h"

#include <string.h>

#ifndef AMX_PF_M
#define AMX_PF_M 48 /* launches of at most this many rows unpack small batches and prefetch the next one */
#endif

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_cfg;

/* The next batch's weights (codes, scales, zero points) fetched into L2 while this batch is multiplied,
 * a few lines per group, so that its unpack does not wait on DRAM: at 16..64 rows a batch's unpack
 * otherwise streams from memory with the tile unit idle. */
typedef struct {
    const char *p[3];
    size_t left[3]; /* lines */
    uint32_t per[3]; /* lines per group */
} amx_pf;

INLINE void amx_pf_step(amx_pf *pf)
{
#pragma GCC unroll 3
    for (int s = 0; s < 3; s++) {
        for (uint32_t i = 0; i < pf->per[s] && pf->left[s]; i++, pf->left[s]--, pf->p[s] += 64)
            _mm_prefetch(pf->p[s], _MM_HINT_T1);
    }
}

/* tiles: 0..3 C (rotating over groups), 4..5 A (activation rows), 6..7 B (codes); in the 16-bit mode 0..3 are
 * two planes' C tiles double-buffered, 4 and 5 the two planes' A tiles, 6 the codes */
static void amx_configure(uint32_t kt)
{
    amx_cfg c __attribute__((aligned(64)));
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 4; t++)
        c.rows[t] = 16, c.colsb[t] = 64;
    for (int t = 4; t < 6; t++)
        c.rows[t] = 16, c.colsb[t] = (uint16_t)kt;
    for (int t = 6; t < 8; t++)
        c.rows[t] = (uint8_t)(kt / 4), c.colsb[t] = 64;
    __asm__ volatile("ldtilecfg %0" : : "m"(c) : "memory");
}

/* row blocks unpacked at a time, at least one: as many as fit in 512 KiB for wide launches (they are read
 * once per 16 activation rows, so they should stay in L2); 16 KiB for narrow ones (up to AMX_PF_M rows),
 * which fetch the next batch's weights into L2 meanwhile (amx_pf): npu-gemm --model-pass of the qwen05b
 * container, 2 threads, 16 rows 27.4-30.8 -> 22.4-24.2 ms, 32 rows 42.7-47.0 -> 36.4-41.6, at 64 rows
 * no gain; wide launches with small batches were much slower (512 rows: 500 -> 770 ms), and 64 rows
 * with 512 KiB batches and the prefetch too (73 -> 80-88 ms) */
static uint32_t amx_batch(size_t ubytes, int narrow)
{
    size_t n = ((size_t)(narrow ? 16 : 512) << 10) / ubytes;
    return n ? (uint32_t)n : 1;
}

/* row block rb's codes in B-tile order, out[k / 4][16 rows][4] (kp·16 bytes): as signed bytes code − zp
 * (sub, for TDPBSSD) or as the unsigned codes themselves (for TDPBSUD). Without zero points one GF(2)
 * affine transform per nibble (GFNI) gives code − 8 sign-extended: bits 0..2 copied, bit 3 inverted into
 * bits 3..7 (the matrix's byte 7 − i selects output bit i's input bits; the constant 0xF8 inverts) */
#define GF_LO_M8 0x0102040808080808ull /* low nibble − 8 */
#define GF_HI_M8 0x1020408080808080ull /* high nibble − 8 */
#define GF_HI 0x1020408000000000ull    /* high nibble */
INLINE void unpack_rb(const ogk_qtensor *W, uint32_t rb, int8_t *out, const int sub)
{
    const uint32_t B = W->block, kb = W->k_blocks, cpg = B / 8;
    const __m512i m4 = _mm512_set1_epi8(0x0F), rep = _mm512_set1_epi32(0x01010101);
    const __m512i glo = _mm512_set1_epi64((long long)GF_LO_M8), ghi = _mm512_set1_epi64((long long)GF_HI_M8),
                  gh = _mm512_set1_epi64((long long)GF_HI);
    const uint8_t *cp = W->codes + (size_t)rb * kb * B * 8;
    for (uint32_t g = 0; g < kb; g++) {
        __m512i z = _mm512_setzero_si512();
        if (sub && W->has_zp) /* 16 zero points, each repeated over its row's 4 bytes */
            z = _mm512_mullo_epi32(
                _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(W->zeros + ((size_t)rb * kb + g) * 16))), rep);
        for (uint32_t c = 0; c < cpg; c++, cp += 64) {
            __m512i w = _mm512_loadu_si512(cp), lo, hi;
            int8_t *o = out + ((size_t)g * B + (size_t)c * 8) * 16;
            if (!sub) {
                lo = _mm512_and_si512(w, m4);
                hi = _mm512_gf2p8affine_epi64_epi8(w, gh, 0);
            } else if (!W->has_zp) {
                lo = _mm512_gf2p8affine_epi64_epi8(w, glo, 0xF8);
                hi = _mm512_gf2p8affine_epi64_epi8(w, ghi, 0xF8);
            } else {
                lo = _mm512_sub_epi8(_mm512_and_si512(w, m4), z);
                hi = _mm512_sub_epi8(_mm512_gf2p8affine_epi64_epi8(w, gh, 0), z);
            }
            _mm512_store_si512(o, lo);
            _mm512_store_si512(o + 64, hi);
        }
    }
}

/* one C tile of group g (acc, 16 activation rows x 16 outputs) into the fp32 outputs held in registers:
 * y[i] += (scale·d_i)·t_i */
INLINE void post_group(const kern_job *j, uint32_t rb, const float *const *drow, uint32_t g, const int32_t (*acc)[16],
                       __m512 *y)
{
    __m512 s = load_scales(j->W, ((size_t)rb * j->W->k_blocks + g) * 16);
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++)
        y[i] = _mm512_fmadd_ps(_mm512_mul_ps(s, _mm512_set1_ps(drow[i][g])), _mm512_cvtepi32_ps(_mm512_load_si512(acc[i])),
                               y[i]);
}

/* group g's products into C tile c (0..3), through A tile ta and B tile tb (tile numbers are literals) */
#define GROUP_PRODUCTS(c, ta, tb)                                                                                         \
    do {                                                                                                               \
        _tile_zero(c);                                                                                                 \
        for (uint32_t k0 = g * B; k0 < (g + 1) * B; k0 += kt) {                                                        \
            _tile_loadd(ta, xa + k0, kp);                                                                   \
            _tile_loadd(tb, ub + (size_t)k0 * 16, 64);                                                           \
            _tile_dpbssd(c, ta, tb);                                                                       \
        }                                                                                                              \
    } while (0)

/* activation rows [m0, m0 + 16) (rows past j->M computed and dropped) x row block rb (unpacked at ub).
 * The 16 x 16 outputs stay in registers over the groups. Software-pipelined over four C tiles (and two
 * A and two B tiles, so no tile waits on the one before it): step g issues group g's products, stores
 * group g − 1's C tile (finished meanwhile) and scales group g − 2's stored sums with the vector unit.
 * The unpacked codes (in L2) are read in order without software prefetch: prefetching group g + 4's B
 * rows into L1 cost 7-9 % at 16-32 rows (npu-gemm --model-pass of the qwen05b container, 2 threads:
 * 16 rows 22.4-23.8 -> 20.9-21.4 ms, 32 rows 37.7-39.4 -> 35.0-35.4) and 1-2 % at 64 and 512. */
INLINE void tile_amx_body(const kern_job *j, uint32_t rb, int m0, const int8_t *ub, uint32_t kt, amx_pf *pf)
{
    const ogk_qtensor *W = j->W;
    const uint32_t B = W->block, kb = W->k_blocks, kp = j->kp;
    int32_t acc[4][16][16] __attribute__((aligned(64)));
    const float *drow[16];
    int rows = j->M - m0 < 16 ? j->M - m0 : 16;
    for (int i = 0; i < 16; i++) /* rows past the launch reuse its last row's scales (results dropped) */
        drow[i] = j->xd + (size_t)(m0 + (i < rows ? i : rows - 1)) * kb;
    __m512 y[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++)
        y[i] = _mm512_setzero_ps();
    const int8_t *xa = j->xq + (size_t)m0 * kp;
    for (uint32_t g = 0; g < kb + 2; g++) {
        if (pf)
            amx_pf_step(pf);
        if (g < kb) {
            switch (g & 3) {
            case 0: GROUP_PRODUCTS(0, 4, 6); break;
            case 1: GROUP_PRODUCTS(1, 5, 7); break;
            case 2: GROUP_PRODUCTS(2, 4, 6); break;
            default: GROUP_PRODUCTS(3, 5, 7); break;
            }
        }
        if (g >= 1 && g <= kb) {
            switch ((g - 1) & 3) {
            case 0: _tile_stored(0, acc[0], 64); break;
            case 1: _tile_stored(1, acc[1], 64); break;
            case 2: _tile_stored(2, acc[2], 64); break;
            default: _tile_stored(3, acc[3], 64); break;
            }
        }
        if (g >= 2)
            post_group(j, rb, drow, g - 2, acc[(g - 2) & 3], y);
    }
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++)
        if (i < rows)
            store_rows(j, rb, m0 + i, y[i]);
}

typedef void (*amx_tile_fn)(const kern_job *j, uint32_t rb, int m0, const int8_t *ub, uint32_t kt, amx_pf *pf);

/* each body twice: with the next batch's prefetch (narrow launches) and without (wide ones, whose hot
 * loop then carries no test for it: with a run-time test per group 512 rows took 503 ms against 472-477
 * in two alternated runs) */
#define AMX_TILES(name)                                                                                                \
    static void name##_narrow(const kern_job *j, uint32_t rb, int m0, const int8_t *ub, uint32_t kt, amx_pf *pf)      \
    {                                                                                                                  \
        name##_body(j, rb, m0, ub, kt, pf);                                                                            \
    }                                                                                                                  \
    static void name##_wide(const kern_job *j, uint32_t rb, int m0, const int8_t *ub, uint32_t kt, amx_pf *pf)        \
    {                                                                                                                  \
        (void)pf;                                                                                                      \
        name##_body(j, rb, m0, ub, kt, NULL);                                                                          \
    }
AMX_TILES(tile_amx)
static const amx_tile_fn tiles_i8[2] = {tile_amx_wide, tile_amx_narrow}; /* [narrow] */

/* Rows of a launch for the tiles: whole 16-row tiles, and a last partial one only when it has more than
 * KERN_AMX_REST rows (a 16-row tile costs about what the avx512 tiles take for ~10 rows, npu-gemm on the
 * Emerald Rapids machine); the rows after it go to the avx512 tiles (amx_rest). */
static int amx_rows(int M)
{
    int r = M % 16;
    return r > KERN_AMX_REST ? M : M - r;
}

/* rows [m0, M) of a launch on the avx512 tiles (bit-identical to the AMX ones): the job seen from row m0 */
static void amx_rest(const kern_job *j, int m0, uint32_t rb0, uint32_t rb1,
                     void (*avx512)(const kern_job *, uint32_t, uint32_t))
{
    if (m0 >= j->M)
        return;
    const uint32_t kb = j->W->k_blocks;
    kern_job r = *j;
    r.M = j->M - m0;
    r.xq = j->xq + (size_t)m0 * j->kp;
    if (j->xq2)
        r.xq2 = j->xq2 + (size_t)m0 * j->kp;
    r.xd = j->xd + (size_t)m0 * kb, r.xqs = j->xqs + (size_t)m0 * kb, r.xqf = j->xqf + (size_t)m0 * kb;
    if (j->xz8)
        r.xz8 = j->xz8 + (size_t)m0 * kb;
    r.Y = j->Y + (size_t)m0 * j->ldy;
    avx512(&r, rb0, rb1);
}

/* One launch's row blocks [rb0, rb1) on the tiles, rows [0, M): the codes unpacked a batch at a time
 * (signed code − zp when sub, else the unsigned codes; a batch stays in L2), and in a batch activation rows
 * outside (their 16 x kp bytes stay in L1), row blocks inside. 0, or -1 without scratch memory (nothing
 * done). */
static int amx_launch(const kern_job *j, int M, uint32_t rb0, uint32_t rb1, int sub, const amx_tile_fn tiles[2])
{
    const ogk_qtensor *W = j->W;
    const size_t ubytes = (size_t)j->kp * 16; /* one row block's unpacked codes */
    const int narrow = M <= AMX_PF_M;
    const uint32_t kt = W->block < 64 ? W->block : 64, nb = amx_batch(ubytes, narrow);
    int8_t *ub = kern_scratch(2, ubytes * nb);
    if (!ub)
        return -1;
    amx_configure(kt);
    /* one row block's codes, scales and zero points */
    const size_t cb = (size_t)W->k_blocks * W->block * 8, sb = (size_t)W->k_blocks * 16 * ogk_dtype_size(W->scale_dtype),
                 zb = W->has_zp ? (size_t)W->k_blocks * 16 : 0;
    for (uint32_t b0 = rb0; b0 < rb1; b0 += nb) {
        uint32_t b1 = b0 + nb < rb1 ? b0 + nb : rb1, b2 = b1 + nb < rb1 ? b1 + nb : rb1;
        for (uint32_t rb = b0; rb < b1; rb++)
            unpack_rb(W, rb, ub + (rb - b0) * ubytes, sub);
        amx_pf pf = {0};
        if (narrow) { /* the next batch [b1, b2) spread over this batch's groups */
            pf = (amx_pf){.p = {(const char *)W->codes + b1 * cb, (const char *)W->scales + b1 * sb,
                                W->has_zp ? (const char *)W->zeros + b1 * zb : NULL},
                          .left = {((b2 - b1) * cb + 63) / 64, ((b2 - b1) * sb + 63) / 64, ((b2 - b1) * zb + 63) / 64}};
            size_t steps = (size_t)(M + 15) / 16 * (b1 - b0) * (W->k_blocks + 2); /* amx_pf_step calls */
            for (int s = 0; s < 3; s++)
                pf.per[s] = (uint32_t)((pf.left[s] + steps - 1) / steps);
        }
        for (int m0 = 0; m0 < M; m0 += 16)
            for (uint32_t rb = b0; rb < b1; rb++)
                tiles[narrow](j, rb, m0, ub + (rb - b0) * ubytes, kt, &pf);
    }
    _tile_release();
    return 0;
}

void kern_gemm_amx(const kern_job *j, uint32_t rb0, uint32_t rb1)
{
    /* other modes, launches under KERN_AMX_MIN_M rows (or no memory for the unpacked codes): the avx512 tiles */
    int M = amx_rows(j->M);
    if (j->mode != KERN_I8 || j->M < KERN_AMX_MIN_M || amx_launch(j, M, rb0, rb1, 1, tiles_i8) < 0) {
        kern_gemm_avx512(j, rb0, rb1);
        return;
    }
    amx_rest(j, M, rb0, rb1, kern_gemm_avx512);
}

/* ---- KERN_I16 (16-bit activations as two int8 planes, Q = 254·q1 + q2): the classifier of passes of
 * several rows. The codes stay unsigned (TDPBSUD: signed activations x unsigned codes), one C tile per
 * plane, and per group the tiles' exact Σ code·q1 and Σ code·q2 combine to Σ code·Q (int32), which then
 * takes the avx512 kernels' fp32 steps (t = cvt(Σ code·Q) − zp·ΣQ; y += (scale·d)·t): a row's result has
 * the bits of the avx512 GEMV and tiles. Two planes' C tiles per group, double-buffered (tiles 0..3). */
INLINE void post_group16(const kern_job *j, uint32_t rb, const int *rowi, uint32_t g, const int32_t (*a1)[16],
                         const int32_t (*a2)[16], __m512 *y)
{
    const ogk_qtensor *W = j->W;
    const uint32_t kb = W->k_blocks;
    const size_t gi = ((size_t)rb * kb + g) * 16;
    __m512 s = load_scales(W, gi), z = load_zeros(W, gi);
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) {
        size_t xi = (size_t)rowi[i] * kb + g;
        __m512 t = _mm512_fnmadd_ps(z, _mm512_set1_ps(j->xqf[xi]), dot_q(_mm512_load_si512(a1[i]), _mm512_load_si512(a2[i])));
        y[i] = _mm512_fmadd_ps(_mm512_mul_ps(s, _mm512_set1_ps(j->xd[xi])), t, y[i]);
    }
}

#define GROUP_PRODUCTS16(c1, c2)                                                                                       \
    do {                                                                                                               \
        _tile_zero(c1);                                                                                                \
        _tile_zero(c2);                                                                                                \
        for (uint32_t k0 = g * B; k0 < (g + 1) * B; k0 += kt) {                                                        \
            _tile_loadd(4, x1 + k0, kp);                                                                               \
            _tile_loadd(5, x2 + k0, kp);                                                                               \
            _tile_loadd(6, ub + (size_t)k0 * 16, 64);                                                                  \
            _tile_dpbsud(c1, 4, 6);                                                                                    \
            _tile_dpbsud(c2, 5, 6);                                                                                    \
        }                                                                                                              \
    } while (0)

INLINE void tile_amx16_body(const kern_job *j, uint32_t rb, int m0, const int8_t *ub, uint32_t kt, amx_pf *pf)
{
    const ogk_qtensor *W = j->W;
    const uint32_t B = W->block, kb = W->k_blocks, kp = j->kp;
    int32_t acc[4][2][16][16] __attribute__((aligned(64))); /* [buffer][plane] */
    int rowi[16];
    int rows = j->M - m0 < 16 ? j->M - m0 : 16;
    for (int i = 0; i < 16; i++) /* rows past the launch reuse its last row's scales (results dropped) */
        rowi[i] = m0 + (i < rows ? i : rows - 1);
    __m512 y[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++)
        y[i] = _mm512_setzero_ps();
    const int8_t *x1 = j->xq + (size_t)m0 * kp, *x2 = j->xq2 + (size_t)m0 * kp;
    /* step g: group g's products into tile pair g & 1, group g − 1's pair stored, group g − 2 scaled */
    for (uint32_t g = 0; g < kb + 2; g++) {
        if (pf)
            amx_pf_step(pf);
        if (g < kb) {
            if (g & 1)
                GROUP_PRODUCTS16(2, 3);
            else
                GROUP_PRODUCTS16(0, 1);
        }
        if (g >= 1 && g <= kb) {
            int32_t (*a)[16][16] = acc[(g - 1) & 3];
            if ((g - 1) & 1) {
                _tile_stored(2, a[0], 64);
                _tile_stored(3, a[1], 64);
            } else {
                _tile_stored(0, a[0], 64);
                _tile_stored(1, a[1], 64);
            }
        }
        if (g >= 2)
            post_group16(j, rb, rowi, g - 2, (const int32_t(*)[16])acc[(g - 2) & 3][0],
                         (const int32_t(*)[16])acc[(g - 2) & 3][1], y);
    }
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++)
        if (i < rows)
            store_rows(j, rb, m0 + i, y[i]);
}

AMX_TILES(tile_amx16)
static const amx_tile_fn tiles_i16[2] = {tile_amx16_wide, tile_amx16_narrow}; /* [narrow] */

void kern_b8_i16_amx(const kern_job *j, uint32_t rb0, uint32_t rb1)
{
    int M = amx_rows(j->M);
    if (j->M < KERN_AMX16_MIN_M || amx_launch(j, M, rb0, rb1, 0, tiles_i16) < 0) {
        kern_b8_i16_avx512(j, rb0, rb1);
        return;
    }
    amx_rest(j, M, rb0, rb1, kern_b8_i16_avx512);
}
