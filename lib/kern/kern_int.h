/* lib/kern internals: the job a kernel path works on, shared by kern.c and the per-ISA files. */
#ifndef OGK_KERN_INT_H
#define OGK_KERN_INT_H

#include "kern.h"

/* One M-chunk of one matmul, with X already prepared for the mode:
 *   KERN_F32: xf [M][kp] fp32, zero-padded to kp = kb*B; xs [M][kb] per-group sums of xf.
 *   KERN_I8:  xq [M][kp] int8 (zero-padded); xd [M][kb] scales; xqs [M][kb] per-group sums of xq.
 *   KERN_I16: xq, xq2 [M][kp] the two int8 planes (Q = 254·xq + xq2); xd scales; xqs per-group Σ Q. */
typedef struct {
    const q4nx_tensor *W;
    int M, mode;
    uint32_t kp;
    const float *xf, *xs;
    const int8_t *xq, *xq2;
    const float *xd;
    const int32_t *xqs;
    float *Y; /* row m, column n at Y[m*ldy + n] */
    size_t ldy;
} kern_job;

/* b8 kernels over row blocks [rb0, rb1) (16 rows each; rows >= N are not written). */
void kern_b8_avx2(const kern_job *j, uint32_t rb0, uint32_t rb1);
void kern_b8_avx512(const kern_job *j, uint32_t rb0, uint32_t rb1);
/* int8 quantisation of M rows (identical results to kern_quant_row_i8). */
void kern_quant_rows_avx512(const float *x, int M, uint32_t k, uint32_t block, int8_t *q, float *d, int32_t *qs);
/* KERN_I16 (kern_i16_avx512.c): b8 tiles, and the quantisation (identical to kern_quant_row_i16) */
void kern_b8_i16_avx512(const kern_job *j, uint32_t rb0, uint32_t rb1);
void kern_quant_rows_i16_avx512(const float *x, int M, uint32_t k, uint32_t block, int8_t *q1, int8_t *q2, float *d,
                                int32_t *qs);

/* rm -> b8: one 32-row band of rm tiles into b8 order (2 row blocks); the 64-byte chunk shuffle in
 * AVX-512 VBMI when vbmi (the avx512 path on a CPU with kern_rm_chunk_avx512_ok), else scalar (the
 * avx2 path), so the tests exercise both. */
void kern_rm_band_to_b8(const q4nx_tensor *W, uint32_t band, uint8_t *codes, void *scales, uint8_t *zeros, int vbmi);
int kern_rm_chunk_avx512_ok(void);
void kern_rm_chunk_avx512(const uint8_t *in, uint8_t *out);

/* XOR of every 64-bit word of [p, p+n) (n multiple of 256): the bandwidth probe's read loop. */
uint64_t kern_read_avx512(const uint8_t *p, size_t n);
uint64_t kern_read_avx2(const uint8_t *p, size_t n);

#endif
