/* What the AVX-512 kernels of the b8 layout share (kern_avx512.c, kern_i16_avx512.c): loading a row
 * block's 16 scales and zero points of one group as fp32, and storing 16 outputs of one activation
 * row (masked at the tensor's last, partial row block), the software prefetch of the weight streams
 * and the activation quantisers' group walk.
 * Compiled with the files' AVX-512 flags. */
#ifndef OGK_KERN_B8_AVX512_H
#define OGK_KERN_B8_AVX512_H

#include "kern_int.h"

#include <immintrin.h>

#define INLINE static inline __attribute__((always_inline))

/* the 16 scales at gi (f32, f16 or bf16) */
INLINE __m512 load_scales(const ogk_qtensor *W, size_t gi)
{
    switch (W->scale_dtype) {
    case OGK_F32: return _mm512_loadu_ps((const float *)W->scales + gi);
    case OGK_F16: return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)W->scales + gi)));
    default: {
        __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)W->scales + gi));
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    }
}

/* the 16 zero points at gi (8 when the tensor has none) */
INLINE __m512 load_zeros(const ogk_qtensor *W, size_t gi)
{
    if (!W->has_zp)
        return _mm512_set1_ps(8.0f);
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(W->zeros + gi))));
}

/* v as Y[m, 16·rb .. 16·rb + 15], masked past the tensor's n */
INLINE void store_rows(const kern_job *j, uint32_t rb, int m, __m512 v)
{
    float *y = j->Y + (size_t)m * j->ldy + (size_t)rb * 16;
    uint32_t left = j->W->n - rb * 16;
    if (left >= 16)
        _mm512_storeu_ps(y, v);
    else
        _mm512_mask_storeu_ps(y, (__mmask16)((1u << left) - 1), v);
}

/* the 16-bit mode's Σ code·Q = 254·Σ code·q1 + Σ code·q2 as fp32, from the two planes' exact int32 sums:
 * each is below 2^24 in magnitude (15·127·4096), so both convert exactly and one fused multiply-add
 * rounds the exact integer 254·s1 + s2 once, as converting it from int32 would (same bits; one
 * operation fewer than the int32 multiply, add and convert) */
INLINE __m512 dot_q(__m512i s1, __m512i s2)
{
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1), _mm512_set1_ps(254.0f), _mm512_cvtepi32_ps(s2));
}

/* Software prefetch of the weight streams (PF_BYTES, kern_int.h), in launches of every width: 16 KiB
 * ahead into L2 (tiles of wide launches used to skip it, which cost 18 % at 24 rows and 10 % at 48,
 * npu-gemm --model-pass of the container on the avx512 row). Into L1 (T0) and 8 KiB ahead, a model's
 * GEMVs streamed ~6 % slower on the Emerald Rapids machine (npu-gemm --model-pass, 2 threads: 9.8-9.9
 * ms against 9.0-9.3 for the container's 309 MB); a software prefetch into L1 holds a fill buffer
 * until its line arrives, which the loads themselves then lack. */
#ifndef PF_HINT
#define PF_HINT _MM_HINT_T1
#endif

/* the scales and zero points of row blocks rb .. rb + RB − 1 at group g, ahead (kern_prefetch_scales) */
INLINE void prefetch_groups(const ogk_qtensor *W, uint32_t rb, const int RB, uint32_t g)
{
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++)
        kern_prefetch_scales(W, ((size_t)(rb + r) * W->k_blocks + g) * 16);
}

/* the activation quantisers' group walk: lanes [c, c + 16) of a row of k values, masked past k */
INLINE __mmask16 tail_mask(uint32_t c, uint32_t k)
{
    return c + 16 <= k ? 0xFFFF : c < k ? (__mmask16)((1u << (k - c)) - 1) : 0;
}

/* max |x[c]| over the group [c0, c0 + block) (0 past k) */
INLINE float group_amax(const float *x, uint32_t c0, uint32_t block, uint32_t k)
{
    const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    __m512 a = _mm512_setzero_ps();
    for (uint32_t c = c0; c < c0 + block; c += 16)
        a = _mm512_max_ps(a, _mm512_and_ps(_mm512_maskz_loadu_ps(tail_mask(c, k), x + c), absmask));
    return _mm512_reduce_max_ps(a);
}
#endif
