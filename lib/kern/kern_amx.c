/* AMX int8 tiles for the b8 layout in KERN_I8 (compiled with the AVX-512 flags plus -mamx-tile
 * -mamx-int8). The amx row of the ISA table uses them for launches of KERN_AMX_MIN_M rows and more
 * (prompt chunks, wide batches); everything else (M = 1, narrow batches, f32, the 16-bit mode) runs
 * the avx512 row's kernels.
 *
 * Numerics are those of every KERN_I8 path, and bit for bit those of the avx512 tiles: per (output
 * row n, activation row m, group g) the exact integer t = Σ (code − zp)·q (|t| < 2^23 for B <= 4096, so
 * its fp32 conversion is exact and equals Σ code·q − zp·Σ q), then y += (scale·d)·t with one fused
 * multiply-add, groups in order.
 *
 * How: a 64-byte b8 chunk (16 rows x 8 k; dword r = row r's codes for k0..k0+3 in the low nibbles and
 * k0+4..k0+7 in the high ones) is, nibble by nibble, two rows of an AMX B tile in its "4 k per column"
 * order. So for each pair of row blocks the codes are unpacked once per launch into per-thread scratch as
 * signed bytes code − zp (kp·16 bytes per row block), and TDPBSSD multiplies them with the int8
 * activations, which are tile-loaded straight from the prepared X (row stride kp). Per group: 2 A
 * tiles (32 activation rows) x 2 B tiles (32 output rows) -> 4 C tiles of int32 sums, K = min(B, 64)
 * per step; the C tiles go to memory and AVX-512 applies scale·d in fp32.
 *
 * The tile state: Linux grants it per process (arch_prctl, done by isa.c before it offers this row);
 * each launch loads its configuration with an inline-asm LDTILECFG (GCC 12's _tile_loadconfig
 * declares an 8-byte operand for the 64-byte configuration, so the compiler may drop the stores that
 * fill it) and releases the tiles at the end. Activation tiles read up to 15 rows past the launch's
 * last row: kern.c leaves that slack after the prepared rows (their sums are never used). */
#include "b8_avx512.h"

#include <string.h>

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_cfg;

/* tiles: 0..3 C (C[ma][r] = 2·ma + r), 4..5 A (activation rows m0 + 16·ma), 6..7 B (row block rb + r) */
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

/* row block rb's codes as signed bytes code − zp in B-tile order: out[k / 4][16 rows][4] (kp·16 bytes) */
INLINE void unpack_rb(const ogk_qtensor *W, uint32_t rb, int8_t *out)
{
    const uint32_t B = W->block, kb = W->k_blocks, cpg = B / 8;
    const __m512i m4 = _mm512_set1_epi8(0x0F), rep = _mm512_set1_epi32(0x01010101);
    const uint8_t *cp = W->codes + (size_t)rb * kb * B * 8;
    for (uint32_t g = 0; g < kb; g++) {
        __m512i z = _mm512_set1_epi8(8);
        if (W->has_zp) /* 16 zero points, each repeated over its row's 4 bytes */
            z = _mm512_mullo_epi32(
                _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(W->zeros + ((size_t)rb * kb + g) * 16))), rep);
        for (uint32_t c = 0; c < cpg; c++, cp += 64) {
            __m512i w = _mm512_loadu_si512(cp);
            int8_t *o = out + ((size_t)g * B + (size_t)c * 8) * 16;
            _mm512_store_si512(o, _mm512_sub_epi8(_mm512_and_si512(w, m4), z));
            _mm512_store_si512(o + 64, _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(w, 4), m4), z));
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
 * group g − 1's C tile (finished meanwhile) and scales group g − 2's stored sums with the vector unit. */
static void tile_amx(const kern_job *j, uint32_t rb, int m0, const int8_t *ub, uint32_t kt)
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
        if (g + 4 < kb) /* the B rows of group g + 4 into L1 (the unpacked codes are in L2) */
            for (uint32_t o = 0; o < B * 16; o += 64)
                _mm_prefetch((const char *)ub + (size_t)(g + 4) * B * 16 + o, _MM_HINT_T0);
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

void kern_gemm_amx(const kern_job *j, uint32_t rb0, uint32_t rb1)
{
    const ogk_qtensor *W = j->W;
    const size_t ubytes = (size_t)j->kp * 16; /* one row block's unpacked codes */
    int8_t *ub = j->mode == KERN_I8 && j->M >= KERN_AMX_MIN_M ? kern_scratch(2, ubytes * (rb1 - rb0)) : NULL;
    if (!ub) { /* other modes, narrow launches (or no memory for the unpacked codes): the avx512 tiles */
        kern_gemm_avx512(j, rb0, rb1);
        return;
    }
    const uint32_t kt = W->block < 64 ? W->block : 64;
    for (uint32_t rb = rb0; rb < rb1; rb++)
        unpack_rb(W, rb, ub + (rb - rb0) * ubytes);
    amx_configure(kt);
    /* activation rows outside (their 16 x kp bytes stay in L1), row blocks inside */
    for (int m0 = 0; m0 < j->M; m0 += 16)
        for (uint32_t rb = rb0; rb < rb1; rb++)
            tile_amx(j, rb, m0, ub + (rb - rb0) * ubytes, kt);
    _tile_release();
}
