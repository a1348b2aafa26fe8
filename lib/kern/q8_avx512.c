/* The q8 operation of the avx512 (and amx) rows: Y = X · Wᵀ for an 8-bit tensor in source order (codes
 * [N][kb][B], kern.h). One weight row at a time (its K bytes stay in L1 while the M activation rows pass).
 *   KERN_I8:  64 codes and 64 int8 activations at a time into 16 exact int32 lanes (VPDPBUSD: the codes are
 *             unsigned, so no bias), each lane converted (exact) and scaled by its group's scale·d, summed in
 *             fp32 lanes; minus Σ_g scale·d·zp·Σq. A group of B < 64 codes fills 4·B/64 lanes of a chunk.
 *   KERN_F32: 16 codes at a time widened to fp32, multiplied by X and summed per group, each group's sum
 *             times its scale into fp32 lanes; minus Σ_g scale·zp·Σx.
 * Results agree with kern_ref_rows within kern_ref_bound (t/unit/kern_paths). */
#include <immintrin.h>

#include "kern_int.h"

#define SEG 256 /* groups whose factors one pass keeps (on the stack) */

/* up to 16 scales of W from group index gi on (cnt of them; the rest 0), as fp32 */
static inline __m512 scales16(const ogk_qtensor *W, size_t gi, uint32_t cnt)
{
    __mmask16 k = (__mmask16)_bzhi_u32(0xFFFF, cnt);
    if (W->scale_dtype == OGK_F32)
        return _mm512_maskz_loadu_ps(k, (const float *)W->scales + gi);
    __m256i h = _mm256_maskz_loadu_epi16(k, (const uint16_t *)W->scales + gi);
    if (W->scale_dtype == OGK_F16)
        return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); /* bf16: the high half */
}

/* up to 16 zero points from group index gi on, as int32 (128 when the tensor has none) */
static inline __m512i zeros16(const ogk_qtensor *W, size_t gi, uint32_t cnt)
{
    if (!W->has_zp)
        return _mm512_set1_epi32(128);
    return _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8((__mmask16)_bzhi_u32(0xFFFF, cnt), W->zeros + gi));
}

static inline __m512 factors(const float *f, uint32_t g0, uint32_t B, __m512i idx)
{
    return B >= 64 ? _mm512_set1_ps(f[g0]) : _mm512_permutexvar_ps(idx, _mm512_loadu_ps(f + g0));
}

static float row_i8(const kern_job *j, const uint8_t *cr, uint32_t n, int m)
{
    const ogk_qtensor *W = j->W;
    const uint32_t B = W->block, kb = W->k_blocks;
    const int8_t *xq = j->xq + (size_t)m * j->kp;
    const float *xd = j->xd + (size_t)m * kb;
    const int32_t *qs = j->xqs + (size_t)m * kb;
    __m512i idx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    idx = _mm512_srli_epi32(idx, B == 16 ? 2 : B == 32 ? 3 : 4); /* the lane's group within a 64-byte chunk */
    __m512 acc = _mm512_setzero_ps();
    float f[SEG + 16] __attribute__((aligned(64)));
    __m512 cv = _mm512_setzero_ps();
    for (uint32_t s0 = 0; s0 < kb; s0 += SEG) {
        uint32_t ns = kb - s0 < SEG ? kb - s0 : SEG;
        for (uint32_t g = 0; g < ns + 16; g += 16) { /* factors scale·d and the zero point's term, 16 at a time */
            uint32_t cnt = g < ns ? (ns - g < 16 ? ns - g : 16) : 0;
            __mmask16 k = (__mmask16)_bzhi_u32(0xFFFF, cnt);
            size_t gi = (size_t)n * kb + s0 + g;
            __m512 fv = _mm512_mul_ps(scales16(W, gi, cnt), _mm512_maskz_loadu_ps(k, xd + s0 + g));
            _mm512_store_ps(f + g, fv);
            __m512i zq = _mm512_mullo_epi32(zeros16(W, gi, cnt), _mm512_maskz_loadu_epi32(k, qs + s0 + g));
            cv = _mm512_fmadd_ps(fv, _mm512_cvtepi32_ps(zq), cv);
        }
        const size_t b0 = (size_t)s0 * B, b1 = b0 + (size_t)ns * B;
        for (size_t b = b0; b < b1; b += 64) {
            __m512i c, x;
            if (b + 64 <= b1) {
                c = _mm512_loadu_si512(cr + b);
                x = _mm512_loadu_si512(xq + b);
            } else {
                __mmask64 k = _bzhi_u64(~0ull, (unsigned)(b1 - b));
                c = _mm512_maskz_loadu_epi8(k, cr + b);
                x = _mm512_maskz_loadu_epi8(k, xq + b);
            }
            __m512i d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c, x);
            acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), factors(f, (uint32_t)((b - b0) / B), B, idx), acc);
        }
    }
    return _mm512_reduce_add_ps(_mm512_sub_ps(acc, cv));
}

static float row_f32(const kern_job *j, const uint8_t *cr, uint32_t n, int m)
{
    const ogk_qtensor *W = j->W;
    const uint32_t B = W->block, kb = W->k_blocks;
    const float *x = j->xf + (size_t)m * j->kp, *xs = j->xs + (size_t)m * kb;
    __m512 acc = _mm512_setzero_ps(), cv = _mm512_setzero_ps();
    float sc[16] __attribute__((aligned(64)));
    for (uint32_t g0 = 0; g0 < kb; g0 += 16) {
        uint32_t cnt = kb - g0 < 16 ? kb - g0 : 16;
        size_t gi = (size_t)n * kb + g0;
        __m512 sv = scales16(W, gi, cnt);
        _mm512_store_ps(sc, sv);
        __m512 zx = _mm512_mul_ps(_mm512_cvtepi32_ps(zeros16(W, gi, cnt)),
                                  _mm512_maskz_loadu_ps((__mmask16)_bzhi_u32(0xFFFF, cnt), xs + g0));
        cv = _mm512_fmadd_ps(sv, zx, cv);
        for (uint32_t g = g0; g < g0 + cnt; g++) {
            __m512 p = _mm512_setzero_ps();
            for (uint32_t c = g * B; c < g * B + B; c += 16) {
                __m512 w = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(cr + c))));
                p = _mm512_fmadd_ps(w, _mm512_loadu_ps(x + c), p);
            }
            acc = _mm512_fmadd_ps(p, _mm512_set1_ps(sc[g - g0]), acc);
        }
    }
    return _mm512_reduce_add_ps(_mm512_sub_ps(acc, cv));
}

void kern_q8_avx512(const kern_job *j, uint32_t n0, uint32_t n1)
{
    for (uint32_t n = n0; n < n1; n++) {
        const uint8_t *cr = j->W->codes + (size_t)n * j->kp;
        for (int m = 0; m < j->M; m++)
            j->Y[(size_t)m * j->ldy + n] = j->mode == KERN_I8 ? row_i8(j, cr, n, m) : row_f32(j, cr, n, m);
    }
}
