/* lib/kern internals: the job a kernel works on, and the per-ISA functions the rows of the ISA table
 * (isa.c) point to. Each *_avx2.c / *_avx512.c file is compiled with its instruction set's flags (the
 * Makefile); nothing outside isa.c decides which of them runs. */
#ifndef OGK_KERN_INT_H
#define OGK_KERN_INT_H

#include <string.h>

#include "kern.h"

/* kern_pool.c, for the matmul launches: two pointers the caller's next launch takes (set_next stores them,
 * take_next returns and clears them: kern_matmul_next's tensors), and the first index of worker w's share
 * of [0, n) among nt in a kern_pool_for_aligned / _prefetch launch (w = nt: n rounded up to align) */
void kern_pool_set_next(kern_pool *p, const void *a, const void *b);
void kern_pool_take_next(kern_pool *p, const void **a, const void **b);
size_t kern_pool_share_start(size_t n, size_t align, int w, int nt);

/* One M-chunk of one matmul, with X already prepared for the mode:
 *   KERN_F32: xf [M][kp] fp32, zero-padded to kp = kb*B; xs [M][kb] per-group sums of xf.
 *   KERN_I8:  xq [M][kp] int8 (zero-padded); xd [M][kb] scales; xqs [M][kb] per-group sums of xq.
 *   KERN_I16: xq, xq2 [M][kp] the two int8 planes (Q = 254·xq + xq2); xd scales; xqs per-group Σ Q.
 *   Both integer modes: xqf [M][kb] = (float)xqs, converted once per row when X is prepared rather
 *   than once per row block in the tiles (the same rounding; exact in i8, where |Σ| < 2^24).
 *   KERN_I8 also: xz8 [M][kb] = −8·xqs, the default zero point's term as an integer, which the avx512
 *   tiles start their accumulators from (Σ (code − 8)·q is exact in int32 and its conversion equals
 *   cvt(Σ code·q) − 8·xqf, so the bits are those of every other path). */
struct kern_job {
    const ogk_qtensor *W;
    int M, mode;
    uint32_t kp;
    const float *xf, *xs;
    const int8_t *xq, *xq2;
    const float *xd;
    const int32_t *xqs;
    const float *xqf;
    const int32_t *xz8;
    float *Y; /* row m, column n at Y[m*ldy + n] */
    size_t ldy;
};

/* CPU feature bits (isa.c reads them from cpuid) */
enum {
    KERN_CPU_AVX2 = 1u << 0, KERN_CPU_FMA = 1u << 1, KERN_CPU_F16C = 1u << 2, KERN_CPU_BMI2 = 1u << 3,
    KERN_CPU_AVX512F = 1u << 4, KERN_CPU_AVX512BW = 1u << 5, KERN_CPU_AVX512VL = 1u << 6,
    KERN_CPU_AVX512DQ = 1u << 7, KERN_CPU_AVX512VNNI = 1u << 8, KERN_CPU_AVX512BF16 = 1u << 9,
    KERN_CPU_AVX512VBMI = 1u << 10, KERN_CPU_AMXTILE = 1u << 11, KERN_CPU_AMXINT8 = 1u << 12,
    KERN_CPU_GFNI = 1u << 13, KERN_CPU_AMXBF16 = 1u << 14, /* AMX-BF16: no row needs it (bench/amx-floor.c asks) */
};

/* per-thread scratch of the kernels (kern.c): slot 0 the prepared X (calling thread), 1 an rm band in b8
 * order, 2 the AMX tiles' unpacked codes. Grows to the largest n asked, 64-byte aligned, freed at thread
 * exit; NULL when out of memory. */
void *kern_scratch(int slot, size_t n);

/* ---- ref (kern_ref.c): the scalar definitions ---- */
void kern_quant_rows_ref(const float *x, int M, uint32_t k, uint32_t block, int8_t *q, float *d, int32_t *qs);
void kern_rm_band_ref(const ogk_qtensor *W, uint32_t band, uint8_t *codes, void *scales, uint8_t *zeros);
void kern_dequant_rows_ref(const ogk_qtensor *t, uint32_t row0, uint32_t nrows, float *out);
void kern_attend_ref(float *q, int g, const float *kc, const float *vc, int n, int hd, float scale, float *att,
                     size_t as);
void kern_attend_h_ref(float *q, size_t qs, int rows, int g, const uint16_t *kc, const uint16_t *vc, int n0, int hd,
                       float scale, float *att, size_t as);
void kern_swiglu_ref(float *g, const float *up, size_t n);
void kern_geglu_ref(float *g, const float *up, size_t n);
void kern_half_ref(uint16_t *dst, const float *src, size_t n);
float kern_vmax_ref(const float *x, size_t n);
double kern_expsum_ref(const float *x, size_t n, float mx);
void kern_mark_ge_ref(const float *x, size_t n, float thr, unsigned char *mark);
uint64_t kern_read_ref(const uint8_t *p, size_t n);

/* ---- avx2 (kern_avx2.c, kern_i16_avx2.c, dequant_avx2.c, attention_avx2.c, act_avx2.c) ---- */
void kern_b8_avx2(const kern_job *j, uint32_t rb0, uint32_t rb1);
void kern_quant_rows_avx2(const float *x, int M, uint32_t k, uint32_t block, int8_t *q, float *d, int32_t *qs);
/* kern_i16_avx2.c */
void kern_b8_i16_avx2(const kern_job *j, uint32_t rb0, uint32_t rb1);
void kern_quant_rows_i16_avx2(const float *x, int M, uint32_t k, uint32_t block, int8_t *q1, int8_t *q2, float *d,
                              int32_t *qs);
void kern_dequant_rows_avx2(const ogk_qtensor *t, uint32_t row0, uint32_t nrows, float *out);
void kern_q8_avx2(const kern_job *j, uint32_t n0, uint32_t n1);   /* q8_avx2.c */
void kern_q8_avx512(const kern_job *j, uint32_t n0, uint32_t n1); /* q8_avx512.c (the avx512 and amx rows) */
uint64_t kern_read_avx2(const uint8_t *p, size_t n);

/* ---- avx512 (kern_avx512.c, attention_avx512.c, act_avx512.c) ---- */
/* launches of KERN_WIDE_M rows or more are compute-bound on the avx512 tiles: 4-row tiles whose sums stay
 * in registers (kern_avx512.c), ranges of the row's gemm_grain (kern.c) */
#define KERN_WIDE_M 16
void kern_gemv_avx512(const kern_job *j, uint32_t rb0, uint32_t rb1);
void kern_gemm_avx512(const kern_job *j, uint32_t rb0, uint32_t rb1);
void kern_quant_rows_avx512(const float *x, int M, uint32_t k, uint32_t block, int8_t *q, float *d, int32_t *qs);
/* KERN_I16 (kern_i16_avx512.c): b8 tiles, and the quantisation (identical to kern_quant_row_i16) */
void kern_b8_i16_avx512(const kern_job *j, uint32_t rb0, uint32_t rb1);
void kern_quant_rows_i16_avx512(const float *x, int M, uint32_t k, uint32_t block, int8_t *q1, int8_t *q2, float *d,
                                int32_t *qs);
/* ---- amx (kern_amx.c): int8 tiles for KERN_I8 launches of KERN_AMX_MIN_M rows or more (whole 16-row
 * tiles; up to KERN_AMX_REST rows after them, and narrower launches, go to kern_gemm_avx512). Activation
 * tiles read up to 15 rows (of kp bytes) past the launch's xq rows. ---- */
#ifndef KERN_AMX_MIN_M
/* npu-gemm --model-pass of the qwen05b container, 2 threads, since narrow launches prefetch their next batch
 * (kern_amx.c): at 16 rows 22.4-23.4 ms against 23.5-24.0 for the avx512 tiles, 24 rows a tie, 28 rows 7 %
 * faster */
#define KERN_AMX_MIN_M 16
#endif
#ifndef KERN_AMX_REST
#define KERN_AMX_REST 10 /* rows past the last whole 16-row tile that go to avx512 rather than a tile */
#endif
void kern_gemm_amx(const kern_job *j, uint32_t rb0, uint32_t rb1);
/* KERN_I16 launches of KERN_AMX16_MIN_M rows or more on AMX tiles (bit-identical to kern_b8_i16_avx512,
 * which runs the rest) */
#ifndef KERN_AMX16_MIN_M
#define KERN_AMX16_MIN_M 16
#endif
void kern_b8_i16_amx(const kern_job *j, uint32_t rb0, uint32_t rb1);
void kern_rm_band_vbmi(const ogk_qtensor *W, uint32_t band, uint8_t *codes, void *scales, uint8_t *zeros); /* kern_vbmi.c */
void kern_attend_avx2(float *q, int g, const float *kc, const float *vc, int n, int hd, float scale, float *att,
                      size_t as);
/* attend_h and attend_ht of the avx2 row (attend_ht: head_dim 64, 96 or 128) */
void kern_attend_h_avx2(float *q, size_t qs, int rows, int g, const uint16_t *kc, const uint16_t *vc, int n0, int hd,
                        float scale, float *att, size_t as);
void kern_attend_ht_avx2(float *q, size_t qs, int rows, int g, const uint16_t *kt, const uint16_t *vc, int n0, int hd,
                         float scale, float *att, size_t as);
void kern_swiglu_avx2(float *g, const float *up, size_t n);
void kern_geglu_avx2(float *g, const float *up, size_t n);
void kern_half_avx2(uint16_t *dst, const float *src, size_t n); /* F16C; the avx512 rows take it too */
float kern_vmax_avx2(const float *x, size_t n);
double kern_expsum_avx2(const float *x, size_t n, float mx);
void kern_mark_ge_avx2(const float *x, size_t n, float thr, unsigned char *mark);
void kern_attend_avx512(float *q, int g, const float *kc, const float *vc, int n, int hd, float scale, float *att,
                        size_t as);
void kern_swiglu_avx512(float *g, const float *up, size_t n);
void kern_geglu_avx512(float *g, const float *up, size_t n);
float kern_vmax_avx512(const float *x, size_t n);
double kern_expsum_avx512(const float *x, size_t n, float mx);
void kern_mark_ge_avx512(const float *x, size_t n, float thr, unsigned char *mark);
/* positions [ta, ta + n) of a plain fp16 key cache kc (head_dim hd) into buf in attend_ht's order (kern.h:
 * blocks of 16 positions, a block's dimension c one run of 16), the last block's rest zero: how the avx2 and
 * avx512 attend_h give attend_ht's bits from the plain cache, a chunk at a time */
static inline void kern_keys_block16(const uint16_t *kc, int ta, int n, int hd, uint16_t *buf)
{
    for (int t = 0; t < (n + 15) / 16 * 16; t++)
        for (int c = 0; c < hd; c++)
            buf[(size_t)(t / 16) * 16 * hd + (size_t)c * 16 + t % 16] = t < n ? kc[(size_t)(ta + t) * hd + c] : 0;
}

/* scores of up to `group` (row, head) pairs over the block-transposed keys of positions [ta, tb) (the block of
 * ta at kb): their transposed queries qt, positions np, score rows ap (an ISA file's scores kernel) */
typedef void (*kern_scores_fn)(const float *qt, const int *np, float *const *ap, const uint16_t *kb, int ta, int tb,
                               float scale);

/* the scores of nq pairs (np grows with the pair) over positions [0, nmax): keys in chunks of 16 KiB (kt, or
 * kc transposed by kern_keys_block16), the pairs in groups of `group` inside (fns[pg] for a group of pg;
 * group i / group's queries at qt + (i / group)·qt_stride), so the keys are read once for every group */
static inline void kern_scores_chunks(const kern_scores_fn *fns, int group, const float *qt, size_t qt_stride,
                                      const int *np, float *const *ap, int nq, const uint16_t *kt, const uint16_t *kc,
                                      int nmax, int hd, float scale)
{
    const int chunk = 8192 / hd / 16 * 16; /* positions: 16 KiB of keys */
    uint16_t buf[8192] __attribute__((aligned(64))); /* attend_h: a chunk of kc transposed */
    for (int ta = 0; ta < nmax; ta += chunk) {
        const uint16_t *kb = buf;
        if (kt)
            kb = kt + (size_t)ta * hd;
        else
            kern_keys_block16(kc, ta, nmax - ta < chunk ? nmax - ta : chunk, hd, buf);
        for (int i = 0; i < nq; i += group) {
            int pg = nq - i < group ? nq - i : group;
            int tb = np[i + pg - 1] < ta + chunk ? np[i + pg - 1] : ta + chunk;
            if (tb > ta)
                fns[pg](qt + (size_t)(i / group) * qt_stride, np + i, ap + i, kb, ta, tb, scale);
        }
    }
}

/* attend_h and attend_ht of the avx512 and amx rows: one score kernel over block-transposed keys (attend_h
 * transposes its plain cache a chunk at a time), head_dim 64, 96 or 128; attend_h of other sizes: the avx2 code
 * (whose own rows of 64, 96 and 128 work the same way, 256 bits wide) */
void kern_attend_ext_avx2(float *q, int g, const void *kc, const void *vc, int f16, int t0, int n, int hd, float scale,
                          float cap, float *att, size_t as);
void kern_attend_ext_avx512(float *q, int g, const void *kc, const void *vc, int f16, int t0, int n, int hd, float scale,
                            float cap, float *att, size_t as);
void kern_attend_h_avx512(float *q, size_t qs, int rows, int g, const uint16_t *kc, const uint16_t *vc, int n0, int hd,
                          float scale, float *att, size_t as);
void kern_attend_ht_avx512(float *q, size_t qs, int rows, int g, const uint16_t *kt, const uint16_t *vc, int n0, int hd,
                           float scale, float *att, size_t as);
uint64_t kern_read_avx512(const uint8_t *p, size_t n);

/* rm -> b8 for one 32-row band (2 row blocks): the codes one 64-byte chunk at a time through `chunk`
 * (rm chunk in, b8 chunk out), scales and zero points copied. Shared by the ref and VBMI band ops. */
static inline __attribute__((always_inline)) void kern_rm_band_with(const ogk_qtensor *W, uint32_t band,
                                                                     uint8_t *codes, void *scales, uint8_t *zeros,
                                                                     void (*chunk)(const uint8_t *, uint8_t *))
{
    uint32_t B = W->block, kb = W->k_blocks, cpg = B / 8, ntc = (kb * B + 255) / 256, gpt = 256 / B;
    size_t ss = ogk_dtype_size(W->scale_dtype);
    for (uint32_t h = 0; h < 2; h++) {
        for (uint32_t g = 0; g < kb; g++) {
            for (uint32_t c = 0; c < cpg; c++) {
                uint32_t col = g * B + c * 8;
                const uint8_t *in = W->codes + ((size_t)band * ntc + col / 256) * 4096 + h * 2048 + (size_t)(col % 256) * 8;
                chunk(in, codes + (((size_t)h * kb + g) * cpg + c) * 64);
            }
            /* 16 consecutive entries per (tile, group, half) in rm; [rb][g][16] in b8 */
            size_t src = ((size_t)band * ntc + g / gpt) * gpt * 32 + (size_t)(g % gpt) * 32 + h * 16;
            memcpy((uint8_t *)scales + ((size_t)h * kb + g) * 16 * ss, (const uint8_t *)W->scales + src * ss, 16 * ss);
            if (W->has_zp)
                memcpy(zeros + ((size_t)h * kb + g) * 16, W->zeros + src, 16);
        }
    }
}

/* Software prefetch distance of the b8 kernels' code streams (every SIMD row's), and the prefetch of the
 * scales and zero points that go with them: those of group index gi (16 entries per row block and
 * group), PF_BYTES of codes ahead (8·B bytes of codes per 16 entries), by address, into L2. A row
 * block's groups are contiguous and the next row block's follow, so this runs on across row blocks
 * into the next tiles' (at K = 896 a row block has 28 groups, fewer than PF_BYTES of codes hold: a
 * prefetch kept inside the row block never ran, and the avx512 tiles' first scale loads missed; an
 * 8-row launch of the qwen05b container took 14.7 ms, 11.5 with this). */
#ifndef PF_BYTES
#define PF_BYTES 16384
#endif
static inline void kern_prefetch_scales(const ogk_qtensor *W, size_t gi)
{
    size_t ga = gi + (size_t)PF_BYTES * 2 / W->block, ss = W->scale_dtype == OGK_F32 ? 4 : 2;
    __builtin_prefetch((const char *)W->scales + ga * ss, 0, 2); /* locality 2: prefetcht1 */
    if (W->has_zp)
        __builtin_prefetch(W->zeros + ga, 0, 2);
}

/* scale i of a tensor's scales array as fp32 */
static inline float kern_scale_at(const ogk_qtensor *t, size_t i)
{
    if (t->scale_dtype == OGK_F32) {
        float f;
        memcpy(&f, (const uint8_t *)t->scales + i * 4, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, (const uint8_t *)t->scales + i * 2, 2);
    return t->scale_dtype == OGK_F16 ? ogk_f16_to_f32(h) : ogk_bf16_to_f32(h);
}

#endif
