/* kern_matmul: checks the tensor, takes the chosen row of the ISA table (isa.c), prepares X per
 * 512-row chunk (padding, group sums, int8 quantisation) and hands row blocks to the pool. The per-ISA
 * micro-kernels live in kern_avx2.c / kern_avx512.c; the rm layout is moved band by band into b8
 * order for them. The DRAM read probe. */
#include "kern_int.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#ifndef KERN_RANGE_BYTES
#define KERN_RANGE_BYTES (128u << 10) /* weights per work range at M = 1 */
#endif
#ifndef KERN_INLINE_BYTES
/* below this (rows x weight bytes) a launch stays on the caller. One row, i8, 2 threads on Zen 5 (npu-gemm
 * --model-pass --shapes Nx896*COUNT): a launch of 256 x 896 (143 KB) took 3.3-3.5 us on one thread and
 * 5.0-5.2 on two, 512 x 896 (287 KB) 7.2-7.4 on either from cache, and from DRAM the two met at ~400-500 KB;
 * pytiny-target's decode (its MLP tensors 123 KB) went from 6880 to 7349-7441 tok/s with 192-320 KiB. */
#define KERN_INLINE_BYTES (256u << 10)
#endif

/* ---- modes ---- */
int kern_mode_parse(const char *s)
{
    return !s ? -1 : !strcmp(s, "f32") ? KERN_F32 : !strcmp(s, "i8") ? KERN_I8 : -1;
}

const char *kern_mode_name(int mode)
{
    return mode == KERN_I8 ? "i8" : mode == KERN_F32 ? "f32" : mode == KERN_I16 ? "i16" : "?";
}

void kern_dequant_rows(const ogk_qtensor *W, uint32_t row0, uint32_t nrows, float *out)
{
    if (W->dtype == OGK_Q8) { /* source order: the rows as they are (the rows' dequant ops read q4 layouts) */
        for (uint32_t r = 0; r < nrows; r++)
            ogk_q8_dequant_row(W, row0 + r, out + (size_t)r * W->k);
        return;
    }
    kern_isa_current()->dequant(W, row0, nrows, out);
}

/* ---- per-thread scratch for the prepared X (grows, freed at thread exit) ---- */
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
#define SCRATCH_SLOTS 3
typedef struct {
    void *p[SCRATCH_SLOTS];
    size_t cap[SCRATCH_SLOTS];
} scratch;
static void scratch_free(void *s)
{
    for (int i = 0; s && i < SCRATCH_SLOTS; i++)
        free(((scratch *)s)->p[i]);
    free(s);
}
static void scratch_init(void) { pthread_key_create(&scratch_key, scratch_free); }
void *kern_scratch(int slot, size_t n)
{
    pthread_once(&scratch_once, scratch_init);
    scratch *s = pthread_getspecific(scratch_key);
    if (!s) {
        s = calloc(1, sizeof *s);
        if (!s)
            return NULL;
        pthread_setspecific(scratch_key, s);
    }
    if (s->cap[slot] < n) {
        free(s->p[slot]);
        s->p[slot] = aligned_alloc(64, (n + 63) & ~(size_t)63);
        s->cap[slot] = s->p[slot] ? n : 0;
    }
    return s->p[slot];
}

/* ---- X preparation ---- */
typedef struct {
    kern_job *j;
    const float *X;
    const kern_isa *isa;
} prep_arg;

static void prep_rows(void *a, size_t m0, size_t m1, int worker)
{
    (void)worker;
    prep_arg *pa = a;
    kern_job *j = pa->j;
    uint32_t K = j->W->k, B = j->W->block, kb = j->W->k_blocks, kp = j->kp;
    for (size_t m = m0; m < m1; m++) {
        const float *x = pa->X + m * K;
        if (j->mode == KERN_I16) {
            int8_t *q1 = (int8_t *)j->xq + m * kp, *q2 = (int8_t *)j->xq2 + m * kp;
            pa->isa->quant_i16(x, 1, K, B, q1, q2, (float *)j->xd + m * kb, (int32_t *)j->xqs + m * kb);
        } else if (j->mode == KERN_I8) {
            int8_t *q = (int8_t *)j->xq + m * kp;
            float *d = (float *)j->xd + m * kb;
            int32_t *qs = (int32_t *)j->xqs + m * kb;
            pa->isa->quant_i8(x, 1, K, B, q, d, qs);
        }
        if (j->mode == KERN_I16 || j->mode == KERN_I8) {
            const int32_t *qs = j->xqs + m * kb;
            float *qf = (float *)j->xqf + m * kb;
            for (uint32_t g = 0; g < kb; g++)
                qf[g] = (float)qs[g];
            if (j->mode == KERN_I8) {
                int32_t *z8 = (int32_t *)j->xz8 + m * kb;
                for (uint32_t g = 0; g < kb; g++)
                    z8[g] = -8 * qs[g];
            }
        } else {
            float *xf = (float *)j->xf + m * kp, *xs = (float *)j->xs + m * kb;
            memcpy(xf, x, K * sizeof *x);
            memset(xf + K, 0, (kp - K) * sizeof *x);
            for (uint32_t g = 0; g < kb; g++) {
                float s = 0.0f;
                for (uint32_t c = g * B; c < (g + 1) * B; c++)
                    s += xf[c];
                xs[g] = s;
            }
        }
    }
}

/* ---- dispatch ---- */
typedef struct {
    kern_job *j;
    const kern_isa *isa;
    const float *X; /* ref row */
    int M;
    const uint32_t *sel; /* kern_matmul_cols: the blocks to run (range indices index it), or NULL: all */
    const kern_job *j2;  /* kern_matmul2: the second tensor's job, or NULL; j's nb1 row blocks are range */
    uint32_t nb1, off;   /* indices [0, nb1), j2's [off, off + its count) (off: nb1 rounded up to whole units) */
} run_arg;

static uint32_t sel_block(const run_arg *ra, size_t i) { return ra->sel ? ra->sel[i] : (uint32_t)i; }

/* the row's micro-kernel for a job: 16-bit activations, M = 1, or tiles */
static void b8_kernel(const kern_isa *isa, const kern_job *j, uint32_t rb0, uint32_t rb1)
{
    (j->mode == KERN_I16 ? isa->gemm_i16 : j->M == 1 ? isa->gemv : isa->gemm)(j, rb0, rb1);
}

static void run_b8(void *a, size_t b, size_t e, int worker)
{
    (void)worker;
    run_arg *ra = a;
    if (ra->j2) { /* the pair's range space: j's row blocks, then j2's from a whole unit, as a launch of its own */
        uint32_t nb1 = ra->nb1, off = ra->off;
        if (b < nb1)
            b8_kernel(ra->isa, ra->j, (uint32_t)b, e < nb1 ? (uint32_t)e : nb1);
        if (e > off)
            b8_kernel(ra->isa, ra->j2, b > off ? (uint32_t)b - off : 0, (uint32_t)e - off);
        return;
    }
    if (!ra->sel) {
        b8_kernel(ra->isa, ra->j, (uint32_t)b, (uint32_t)e);
        return;
    }
    for (size_t i = b; i < e; i++)
        b8_kernel(ra->isa, ra->j, ra->sel[i], ra->sel[i] + 1);
}

/* rm on a SIMD row: each 32-row band (one row of rm tiles) is moved into b8 order in per-thread
 * scratch (codes, scales, zero points: a bijection, see util/tensor.h) by the row's rm_band and multiplied by
 * its b8 micro-kernel, once for all M rows of the chunk. */
static void run_rm_bands(void *a, size_t b, size_t e, int worker)
{
    (void)worker;
    run_arg *ra = a;
    const ogk_qtensor *W = ra->j->W;
    size_t kb = W->k_blocks, ss = ogk_dtype_size(W->scale_dtype);
    size_t cbytes = 2 * kb * W->block * 8, sbytes = 2 * kb * 16 * ss, zbytes = W->has_zp ? 2 * kb * 16 : 0;
    uint8_t *buf = kern_scratch(1, cbytes + sbytes + zbytes + 128);
    if (!buf)
        abort();
    for (size_t i = b; i < e; i++) {
        uint32_t band = sel_block(ra, i);
        ogk_qtensor sub = *W;
        sub.layout = OGK_B8;
        sub.n = W->n - (uint32_t)band * 32 < 32 ? W->n - (uint32_t)band * 32 : 32;
        sub.codes = buf;
        sub.scales = buf + cbytes;
        sub.zeros = W->has_zp ? buf + cbytes + sbytes : NULL;
        ra->isa->rm_band(W, (uint32_t)band, buf, buf + cbytes, buf + cbytes + sbytes);
        kern_job j = *ra->j;
        j.W = &sub;
        j.Y = ra->j->Y + band * 32;
        b8_kernel(ra->isa, &j, 0, (sub.n + 15) / 16);
    }
}

static void run_ref(void *a, size_t b, size_t e, int worker)
{
    (void)worker;
    run_arg *ra = a;
    if (!ra->sel) { /* ref ranges are of columns, a selection's of 16-column blocks */
        kern_ref_rows(ra->j->W, ra->X, ra->M, ra->j->Y, ra->j->mode, (uint32_t)b, (uint32_t)e);
        return;
    }
    for (size_t i = b; i < e; i++) {
        uint32_t n0 = ra->sel[i] * 16, n1 = n0 + 16 < ra->j->W->n ? n0 + 16 : ra->j->W->n;
        kern_ref_rows(ra->j->W, ra->X, ra->M, ra->j->Y, ra->j->mode, n0, n1);
    }
}

static int check_tensor(const ogk_qtensor *W, int M, int mode, ogk_error *e)
{
    if (!W || !ogk_dtype_quantised(W->dtype))
        return ogk_fail(e, "tensor %s: not a quantised tensor", W && W->name ? W->name : "?");
    const char *why = W->dtype == OGK_Q8 ? (W->layout != OGK_PLAIN ? "q8 is multiplied in source order only"
                                            : W->block < 16 || (W->block & (W->block - 1))
                                                ? "block size must be a power of two >= 16"
                                            : mode == KERN_I16 ? "q8 has the f32 and i8 modes, not 16-bit activations"
                                                               : NULL)
                                         : ogk_q4_layout_refusal(W->layout, W->n, W->k, W->block);
    if (why)
        return ogk_fail(e, "tensor %s: %s", W->name ? W->name : "?", why);
    if (W->block > 4096) /* keeps the i8 group sums below 2^24, where fp32 holds them exactly */
        return ogk_fail(e, "tensor %s: block %u > 4096 is not supported by the kernels", W->name ? W->name : "?",
                        W->block);
    if (W->k_blocks != (W->k + W->block - 1) / W->block)
        return ogk_fail(e, "tensor %s: k_blocks %u != ceil(K/block)", W->name ? W->name : "?", W->k_blocks);
    if (W->scale_dtype != OGK_F32 && W->scale_dtype != OGK_F16 && W->scale_dtype != OGK_BF16)
        return ogk_fail(e, "tensor %s: scale dtype %s is not f32/f16/bf16", W->name ? W->name : "?",
                        ogk_dtype_name(W->scale_dtype));
    if (!W->codes || !W->scales || (W->has_zp && !W->zeros))
        return ogk_fail(e, "tensor %s: missing codes, scales or zero points", W->name ? W->name : "?");
    if (M < 1)
        return ogk_fail(e, "M = %d: need at least one row", M);
    if (mode != KERN_F32 && mode != KERN_I8 && mode != KERN_I16)
        return ogk_fail(e, "unknown accuracy mode %d", mode);
    return 0;
}

/* two tensors one launch can take: b8 q4 on a SIMD row, the same K, groups, scale dtype and zero points */
static int pair_fuses(const kern_isa *isa, const ogk_qtensor *W, const ogk_qtensor *W2)
{
    return isa->gemm && W->dtype == OGK_Q4 && W2->dtype == OGK_Q4 && W->layout == OGK_B8 && W2->layout == OGK_B8 && W->k == W2->k && W->block == W2->block &&
           W->k_blocks == W2->k_blocks && W->scale_dtype == W2->scale_dtype && W->has_zp == W2->has_zp;
}

/* where a pair launch's second tensor starts in its range space: its first tensor's nb1 row blocks rounded up
 * to whole units, so that no range straddles the two */
static uint32_t pair_off(uint32_t nb1, uint32_t unit) { return (nb1 + unit - 1) / unit * unit; }

/* The tensors of the caller's next launch (kern_matmul_next). At the end of a one-row launch every worker
 * requests the first bytes of its share of them into L2 (the addresses worked out before the launch, so the
 * hint's tensors are not read after it), so that the memory keeps streaming over the launch
 * boundary and the work between two launches (norms, attention, SwiGLU), instead of starting the next
 * launch cold. The caller requests few bytes: it is the thread that runs the work in between. Measured
 * (bench/results/2026-12-04f-zen5.md): qwen05b decode after 128 +2.6 % (median of 30 alternated runs,
 * faster in 20), after 2048 and 8-row verify passes no change, so only one-row launches do it. */
#define NEXT_BYTES_WORKER 131072
#define NEXT_BYTES_CALLER 16384

/* the first `bytes` of codes from row block rb of W on, and their scales: as regions to prefetch */
static void blocks_region(const ogk_qtensor *W, uint32_t rb, size_t bytes, kern_prefetch *r)
{
    size_t kb = W->k_blocks, rb_codes = kb * W->block * 8, total = (size_t)((W->n + 15) / 16) * rb_codes;
    size_t off = (size_t)rb * rb_codes, ss = ogk_dtype_size(W->scale_dtype);
    if (off >= total)
        return;
    size_t n = bytes < total - off ? bytes : total - off;
    r->at[0] = W->codes + off, r->len[0] = n;
    r->at[1] = (const char *)W->scales + (size_t)rb * kb * 16 * ss, r->len[1] = n / (W->block * 8) * 16 * ss;
}

/* after[w]: the start of worker w's share of a one-row launch of W (and W2 as a pair), split as matmul
 * splits it (threads entries; all empty when the next launch is not b8) */
static void next_regions(const ogk_qtensor *W, const ogk_qtensor *W2, int threads, kern_prefetch *after)
{
    memset(after, 0, (size_t)threads * sizeof *after);
    if (W->layout != OGK_B8 || (W2 && W2->layout != OGK_B8))
        return;
    uint32_t unit = 4, nb1 = (W->n + 15) / 16, off = W2 ? pair_off(nb1, unit) : nb1;
    size_t nb = W2 ? off + (W2->n + 15) / 16 : nb1;
    /* a next launch that runs on the calling thread: all of it is the caller's share */
    int nt = kern_tensor_bytes(W) + (W2 ? kern_tensor_bytes(W2) : 0) < KERN_INLINE_BYTES ? 1 : threads;
    for (int w = 0; w < nt; w++) {
        size_t lo = kern_pool_share_start(nb, unit, w, nt), bytes = w ? NEXT_BYTES_WORKER : NEXT_BYTES_CALLER;
        if (lo < nb1)
            blocks_region(W, (uint32_t)lo, bytes, &after[w]);
        else if (W2 && lo >= off)
            blocks_region(W2, (uint32_t)(lo - off), bytes, &after[w]);
    }
}

void kern_matmul_next(kern_pool *p, const ogk_qtensor *W1, const ogk_qtensor *W2) { kern_pool_set_next(p, W1, W2); }

/* An unquantised weight (an fp32 MatMul B of K rows of N, W->data: the model's unquantised lm_head):
 * Y[m] = X[m] · W. A thread takes ranges of PLAIN_NB-column blocks; within a block, up to PLAIN_MB activation
 * rows at a time over sub-blocks of PLAIN_NB / rows columns, so their sums (PLAIN_NB floats, 32 KiB) stay in
 * L1 while W's rows stream past once for all of them (runs of contiguous floats the prefetchers follow). Each
 * row's sums run over k in order with the same operations, so a row's bits do not depend on the rows beside
 * it. Measured on a tiny untied qwen2 fixture (151669 x 64 fp32 head, npu-forward bench -g 64, 2 threads,
 * Zen 4): decode 350 tok/s with each row's sums over blocks of 64 columns, 560 so (~19 GB/s of head); an
 * 8-row verify pass 3.1 decode steps (4.9 with groups of 4 rows over 4096-column blocks). */
#define PLAIN_NB 8192
#define PLAIN_MB 8
typedef struct {
    const ogk_qtensor *W;
    const float *X;
    float *Y;
    int M;
} plain_arg;

/* a[0..n) += x · w[0..n): 8 lanes at a time in GCC's generic vectors (SSE pairs on the baseline x86-64 this
 * file is built for), then the rest; each element a multiply then an add, vector or not (the same bits) */
typedef float plain_v8 __attribute__((vector_size(32)));
static inline void axpy_plain(float *restrict a, const float *restrict w, float x, uint32_t n)
{
    const plain_v8 xv = {x, x, x, x, x, x, x, x};
    uint32_t j = 0;
    for (; j + 8 <= n; j += 8) {
        plain_v8 av, wv;
        memcpy(&av, a + j, sizeof av);
        memcpy(&wv, w + j, sizeof wv);
        av += xv * wv;
        memcpy(a + j, &av, sizeof av);
    }
    for (; j < n; j++)
        a[j] += x * w[j];
}

static void run_plain(void *arg, size_t b, size_t e, int worker)
{
    (void)worker;
    const plain_arg *pa = arg;
    const float *w = pa->W->data;
    const uint32_t N = pa->W->n, K = pa->W->k;
    float acc[PLAIN_NB] __attribute__((aligned(64)));
    for (size_t blk = b; blk < e; blk++) {
        const uint32_t n0 = (uint32_t)blk * PLAIN_NB, nn = N - n0 < PLAIN_NB ? N - n0 : PLAIN_NB;
        for (int m0 = 0; m0 < pa->M; m0 += PLAIN_MB) {
            const int mb = pa->M - m0 < PLAIN_MB ? pa->M - m0 : PLAIN_MB;
            const uint32_t sub = PLAIN_NB / (uint32_t)mb / 16 * 16; /* each row's share of acc */
            for (uint32_t s0 = 0; s0 < nn; s0 += sub) {
                const uint32_t ns = nn - s0 < sub ? nn - s0 : sub;
                memset(acc, 0, (size_t)mb * sub * sizeof *acc);
                for (uint32_t k = 0; k < K; k++) {
                    const float *wr = w + (size_t)k * N + n0 + s0;
                    for (int m = 0; m < mb; m++)
                        axpy_plain(acc + (size_t)m * sub, wr, pa->X[(size_t)(m0 + m) * K + k], ns);
                }
                for (int m = 0; m < mb; m++)
                    memcpy(pa->Y + (size_t)(m0 + m) * N + n0 + s0, acc + (size_t)m * sub, ns * sizeof *acc);
            }
        }
    }
}

static int matmul_plain(kern_pool *p, const ogk_qtensor *W, const float *X, int M, float *Y, ogk_error *e)
{
    if (W->dtype != OGK_F32 || !W->data || !W->n || !W->k || W->nbytes < (uint64_t)W->n * W->k * 4)
        return ogk_fail(e, "tensor %s: an unquantised weight must be fp32 [K, N] with data", W->name ? W->name : "?");
    plain_arg pa = {.W = W, .X = X, .Y = Y, .M = M};
    kern_pool_for(p, (W->n + PLAIN_NB - 1) / PLAIN_NB, 0, run_plain, &pa);
    return 0;
}

/* q8 on a SIMD row: ranges of 16-column blocks (the avx512 row's tiles), or of a selection's */
static void run_q8(void *a, size_t b, size_t e, int worker)
{
    (void)worker;
    run_arg *ra = a;
    uint32_t N = ra->j->W->n;
    if (!ra->sel) {
        ra->isa->q8(ra->j, (uint32_t)b * 16, e * 16 < N ? (uint32_t)e * 16 : N);
        return;
    }
    for (size_t i = b; i < e; i++) {
        uint32_t n0 = ra->sel[i] * 16, n1 = n0 + 16 < N ? n0 + 16 : N;
        ra->isa->q8(ra->j, n0, n1);
    }
}

/* sel (nsel blocks: 16 columns on the b8 and ref paths, 32 on rm's bands) or NULL: every block. W2 (with
 * Y2, no sel): a second tensor multiplied by the same X, in the same launch where pair_fuses */
static int matmul(const kern_isa *isa, kern_pool *p, const ogk_qtensor *W, const float *X, int M, float *Y, int mode,
                  const uint32_t *sel, size_t nsel, const ogk_qtensor *W2, float *Y2, ogk_error *e)
{
    const void *na, *nb2; /* every launch takes the next-launch hint, whether it uses it or not */
    kern_pool_take_next(p, &na, &nb2);
    if (W && W->dtype == OGK_F32 && !sel && !W2)
        return matmul_plain(p, W, X, M, Y, e);
    if (check_tensor(W, M, mode, e) < 0 || (W2 && check_tensor(W2, M, mode, e) < 0))
        return -1;
    if (W2 && !pair_fuses(isa, W, W2))
        return matmul(isa, p, W, X, M, Y, mode, NULL, 0, NULL, NULL, e) < 0
                   ? -1
                   : matmul(isa, p, W2, X, M, Y2, mode, NULL, 0, NULL, NULL, e);
    int nt = kern_pool_threads(p);
    kern_job j = {.W = W, .mode = mode, .kp = W->k_blocks * W->block, .ldy = W->n};
    if (mode == KERN_I16 && isa->gemm && !isa->gemm_i16)
        return ogk_fail(e, "kernel path %s: no 16-bit activation mode (ref and avx512 have it)", isa->name);
    if (!isa->gemm) { /* the ref row */
        run_arg ra = {.j = &j, .isa = isa, .X = X, .M = M, .sel = sel};
        j.Y = Y;
        kern_pool_for(p, sel ? nsel : W->n, 0, run_ref, &ra);
        return 0;
    }
    uint32_t kb = W->k_blocks, kp = j.kp;
    int mc_max = M < KERN_CHUNK_M ? M : KERN_CHUNK_M;
    size_t per_row = mode == KERN_I8    ? (size_t)kp + (size_t)kb * 16
                     : mode == KERN_I16 ? 2 * (size_t)kp + (size_t)kb * 12
                                        : (size_t)kp * 4 + (size_t)kb * 4;
    /* + 16 rows of kp bytes: the AMX tiles read up to 15 activation rows past the last (kern_amx.c) */
    uint8_t *buf = kern_scratch(0, per_row * mc_max + (size_t)kp * 16 + 64);
    if (!buf)
        return ogk_fail(e, "out of memory for %d x %u activations", mc_max, kp);
    for (int m0 = 0; m0 < M; m0 += KERN_CHUNK_M) {
        int mc = M - m0 < KERN_CHUNK_M ? M - m0 : KERN_CHUNK_M;
        j.M = mc;
        j.Y = Y + (size_t)m0 * W->n;
        if (mode == KERN_I8 || mode == KERN_I16) {
            j.xd = (const float *)buf;
            j.xqs = (const int32_t *)(buf + (size_t)kb * 4 * mc);
            j.xqf = (const float *)(buf + (size_t)kb * 8 * mc);
            j.xq = (const int8_t *)(buf + (size_t)kb * 12 * mc);
            j.xq2 = j.xq + (size_t)kp * mc;
            if (mode == KERN_I8) /* after xq and the AMX tiles' 16 rows of slack */
                j.xz8 = (const int32_t *)(buf + (size_t)kb * 12 * mc + (size_t)kp * (mc + 16));
        } else {
            j.xf = (const float *)buf;
            j.xs = (const float *)(buf + (size_t)kp * 4 * mc);
        }
        prep_arg pa = {.j = &j, .X = X + (size_t)m0 * W->k, .isa = isa};
        kern_pool_for(mc >= 8 ? p : NULL, (size_t)mc, 0, prep_rows, &pa);
        kern_job j2 = j; /* the same prepared X */
        j2.W = W2, j2.ldy = W2 ? W2->n : 0, j2.Y = W2 ? Y2 + (size_t)m0 * W2->n : NULL;
        /* ranges start at multiples of unit row blocks (the tiles' pairs: the bits do not depend on the split) */
        uint32_t unit = mc == 1 ? 4 : 2, nb1 = (W->n + 15) / 16;
        run_arg ra = {.j = &j, .isa = isa, .sel = sel, .j2 = W2 ? &j2 : NULL, .nb1 = nb1,
                      .off = pair_off(nb1, unit)};
        if (W->dtype == OGK_Q8) {
            size_t n = sel ? nsel : nb1, bytes = (size_t)mc * n * 16 * kp;
            kern_pool_for(bytes < KERN_INLINE_BYTES ? NULL : p, n, 0, run_q8, &ra);
        } else if (sel) { /* a few blocks (kern_matmul_cols): on the calling thread unless there is much to do */
            size_t bytes = (size_t)mc * nsel * kern_tensor_bytes(W) / ((W->n + 15) / 16);
            kern_pool_for(bytes < KERN_INLINE_BYTES ? NULL : p, nsel, 1, W->layout == OGK_B8 ? run_b8 : run_rm_bands,
                          &ra);
        } else if (W->layout == OGK_B8) {
            /* ranges of about 4 per thread (or the row's gemm_grain from 16 rows), but at most ~128 KB of
             * weights each at M = 1, so that on a shared machine a thread that keeps running can take over
             * the work of one that is not */
            size_t nb = W2 ? ra.off + (W2->n + 15) / 16 : nb1;
            size_t rb_bytes = (size_t)kb * W->block * 8 + (size_t)kb * 16 * (ogk_dtype_size(W->scale_dtype) + W->has_zp);
            size_t grain = mc >= KERN_WIDE_M && isa->gemm_grain ? isa->gemm_grain
                                                       : (nb + (size_t)nt * 4 - 1) / ((size_t)nt * 4);
            if (mc == 1 && grain * rb_bytes > (KERN_RANGE_BYTES))
                grain = (KERN_RANGE_BYTES) / rb_bytes;
            grain = grain < unit ? unit : (grain + unit - 1) / unit * unit;
            /* small launches run on the calling thread: waking a worker costs more than the work */
            int small = (size_t)mc * nb * rb_bytes < KERN_INLINE_BYTES;
            kern_prefetch after[KERN_MAX_THREADS];
            int pf = M == 1 && na; /* nt <= KERN_MAX_THREADS: the pool's cap */
            if (pf)
                next_regions(na, nb2, nt, after);
            kern_pool_for_prefetch(small ? NULL : p, nb, grain, unit, run_b8, &ra, pf ? after : NULL);
        } else {
            kern_pool_for(p, (W->n + 31) / 32, 0, run_rm_bands, &ra);
        }
    }
    return 0;
}

int kern_matmul_isa(int isa, kern_pool *p, const ogk_qtensor *W, const float *X, int M, float *Y, int mode,
                    ogk_error *e)
{
    if (!kern_isa_supported(isa))
        return ogk_fail(e, "kernel path %s: not supported by this CPU",
                        kern_isa_row(isa) ? kern_isa_row(isa)->name : "?");
    return matmul(kern_isa_row(isa), p, W, X, M, Y, mode, NULL, 0, NULL, NULL, e);
}

int kern_matmul(kern_pool *p, const ogk_qtensor *W, const float *X, int M, float *Y, int mode, ogk_error *e)
{
    if (kern_isa_init(e) < 0)
        return -1;
    return matmul(kern_isa_current(), p, W, X, M, Y, mode, NULL, 0, NULL, NULL, e);
}

int kern_matmul2(kern_pool *p, const ogk_qtensor *W1, float *Y1, const ogk_qtensor *W2, float *Y2, const float *X, int M,
                 int mode, ogk_error *e)
{
    if (kern_isa_init(e) < 0)
        return -1;
    if (W1 && W2 && W1->k != W2->k)
        return ogk_fail(e, "tensors %s and %s: different K (%u, %u) for one X", W1->name ? W1->name : "?",
                        W2->name ? W2->name : "?", W1->k, W2->k);
    return matmul(kern_isa_current(), p, W1, X, M, Y1, mode, NULL, 0, W2, Y2, e);
}

int kern_matmul_cols(kern_pool *p, const ogk_qtensor *W, const float *X, int M, float *Y, int mode,
                     const uint32_t *cols, size_t ncols, ogk_error *e)
{
    if (kern_isa_init(e) < 0 || check_tensor(W, M, mode, e) < 0)
        return -1;
    const kern_isa *isa = kern_isa_current();
    uint32_t unit = isa->gemm && W->dtype == OGK_Q4 && W->layout != OGK_B8 ? 32 : 16; /* rm's bands: 32 */
    uint32_t *sel = malloc((ncols ? ncols : 1) * sizeof *sel);
    if (!sel)
        return ogk_fail(e, "out of memory for %zu columns", ncols);
    size_t nsel = 0;
    for (size_t i = 0; i < ncols; i++) {
        if (cols[i] >= W->n || (i && cols[i] < cols[i - 1])) {
            free(sel);
            return ogk_fail(e, "tensor %s: column list not ascending within [0, %u) at %zu", W->name ? W->name : "?",
                            W->n, i);
        }
        if (!nsel || sel[nsel - 1] != cols[i] / unit)
            sel[nsel++] = cols[i] / unit;
    }
    int rc = nsel ? matmul(isa, p, W, X, M, Y, mode, sel, nsel, NULL, NULL, e) : 0;
    free(sel);
    return rc;
}

/* ---- the DRAM read-bandwidth probe ---- */
typedef struct {
    const uint8_t *buf;
    size_t block;
    uint64_t (*read)(const uint8_t *p, size_t n); /* the chosen row's read loop */
    uint64_t sink[64];
} bw_arg;

static void bw_range(void *a, size_t b, size_t e, int worker)
{
    bw_arg *ba = a;
    const uint8_t *p = ba->buf + b * ba->block;
    size_t n = (e - b) * ba->block;
    ba->sink[worker & 63] ^= ba->read(p, n);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

struct kern_bw_probe {
    bw_arg ba;
    size_t nblk;
    int owned;
};

kern_bw_probe *kern_bw_probe_over(const void *buf, size_t bytes)
{
    kern_bw_probe *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->ba.block = 1 << 16;
    b->ba.read = kern_isa_current()->read;
    b->nblk = ((uintptr_t)buf & 63) ? 0 : bytes / b->ba.block;
    b->ba.buf = buf;
    if (!b->nblk) {
        free(b);
        return NULL;
    }
    return b;
}

kern_bw_probe *kern_bw_probe_new(size_t bytes)
{
    size_t n = bytes / (1 << 16) * (1 << 16);
    /* 2 MiB pages where the kernel grants them: the probe measures DRAM, not page walks */
    uint8_t *buf = n ? ogk_big_alloc(n) : NULL;
    if (!buf)
        return NULL;
    memset(buf, 0x5A, n); /* fault every page in before timing */
    kern_bw_probe *b = kern_bw_probe_over(buf, n);
    if (!b) {
        free(buf);
        return NULL;
    }
    b->owned = 1;
    return b;
}

double kern_bw_probe_pass(kern_pool *p, kern_bw_probe *b)
{
    int nt = kern_pool_threads(p);
    double t0 = ogk_now();
    kern_pool_for(p, b->nblk, (b->nblk + nt - 1) / nt, bw_range, &b->ba);
    return (double)(b->nblk * b->ba.block) / (ogk_now() - t0) / 1e9;
}

void kern_bw_probe_free(kern_bw_probe *b)
{
    if (b && b->owned)
        free((void *)b->ba.buf);
    free(b);
}

double kern_read_bandwidth(kern_pool *p, size_t bytes, int reps)
{
    if (reps < 1)
        return -1;
    kern_bw_probe *b = kern_bw_probe_new(bytes);
    if (!b)
        return -1;
    double *gbs = malloc((size_t)reps * sizeof *gbs);
    kern_bw_probe_pass(p, b); /* warm-up pass */
    for (int r = 0; r < reps; r++)
        gbs[r] = kern_bw_probe_pass(p, b);
    qsort(gbs, (size_t)reps, sizeof *gbs, cmp_double);
    double med = gbs[reps / 2];
    free(gbs);
    kern_bw_probe_free(b);
    return med;
}
