/* lib/gguf internals shared by convert.c and check.c: the conversion plan (which container rows make
 * which GGUF tensor). The plan only moves rows; it never touches values, so the check can use it to
 * pair rows while dequantising both sides with independent code. */
#ifndef OGK_GGUF_INT_H
#define OGK_GGUF_INT_H

#include "gguf.h"

/* A run of rows of one container tensor. perm_hd > 0: rows are permuted within heads of perm_hd rows
 * from the rotate-halves RoPE order (pair i, i + hd/2) to llama.cpp's adjacent-pairs order (2i, 2i+1). */
typedef struct {
    const ogk_qtensor *t;
    uint32_t row0, nrows;
    uint32_t perm_hd;
} gguf_seg;

/* GPLAN_ROPE: llama.cpp's per-pair frequency divisors (rope_freqs; LongRoPE's rope_factors_short / _long)
 * derived from a pair of the container's RoPE caches and rope_theta, not copied values */
enum { GPLAN_Q = 1, GPLAN_PLAIN = 2, GPLAN_ROPE = 3 };

typedef struct {
    char name[80];
    char from[160]; /* container roles, for reports */
    int kind;       /* GPLAN_Q: rows of quantised tensors; GPLAN_PLAIN: a float tensor */
    int type;       /* chosen ggml type */
    int ndim;
    uint32_t nrows, k; /* output rows (1 for vectors) and row length */
    gguf_seg seg[3];
    int nseg;
    float rope_theta; /* GPLAN_ROPE: the base the divisors are relative to */
    int rope_scaled;  /* GPLAN_ROPE: the caches' rotations have one magnitude (LongRoPE's attention factor), not 1 */
    int transposed;   /* GPLAN_PLAIN: the source is [k, nrows] (an unquantised MatMul's B): row r is its column r */
    int odd_groups;   /* GPLAN_Q: groups or rows not a multiple of 32 (no ggml block type fits) */
    /* filled while writing under GGUF_LOSSY */
    double max_err;
    uint32_t err_row, err_col;
    int lossy;
} gguf_plan;

/* The plan for a container: tensor list in GGUF order. NULL with e filled, *code 3 (the container is
 * not a model this can convert). */
gguf_plan *gguf_make_plan(const q4nx_file *f, size_t *n, const char **arch, ogk_error *e, int *code);
/* The container tensor and source row of output row r. */
const ogk_qtensor *gguf_plan_row(const gguf_plan *p, uint32_t r, uint32_t *src_row);
/* The container's values of one source row of a plain tensor, as floats (k of them). */
void gguf_plain_row(const ogk_qtensor *t, uint32_t row, uint32_t k, float *out);
/* column col of a float tensor of k rows of ncols (an unquantised MatMul's B), as k floats */
void gguf_plain_col(const ogk_qtensor *t, uint32_t col, uint32_t k, uint32_t ncols, float *out);
/* The frequency f[i] of each of the half pairs of the RoPE caches cs / sn ([rows][half]): row p turns pair i
 * by p * f[i]. mag NULL: every rotation's magnitude must be 1; else one magnitude throughout, returned in
 * *mag. 0, or -1 with e filled when the caches are not that (another magnitude, a row off its pair's
 * frequency). */
int gguf_rope_freqs(const ogk_qtensor *cs, const ogk_qtensor *sn, uint32_t half, double *f, double *mag,
                    ogk_error *e);
/* The metadata a conversion of f (llama.cpp architecture arch, gguf_make_plan's) writes (every key/value, no
 * tensors), read back as a GGUF of its own (an in-memory file): what --check holds a GGUF's keys against.
 * NULL with e filled. */
gguf_file *gguf_expected_meta(const q4nx_file *f, const char *arch, ogk_error *e);

#endif
