/* lib/kern — compute kernels: Y = X · Wᵀ for a 4-bit quantised tensor W (rm or b8 layout), the other
 * per-ISA operations the model needs (attention, SwiGLU, dequantisation), the thread pool the model
 * uses for everything else it parallelises, and the GEMM harness npu-gemm drives. Owns the ISA table
 * (scalar reference, AVX2, AVX-512 VNNI), its selection and the pool; must not know about containers,
 * models or devices (tensors come as lib/util/tensor.h views).
 *
 * Shapes and memory: W is an ogk_qtensor (OGK_Q4, layout b8 or rm, N rows x K columns). X is M x K
 * fp32, row-major with row stride K; Y is M x N fp32, row-major with row stride N. Y is overwritten.
 * Any M >= 1 works: M = 1 is decode (GEMV), 2..16 a verify batch, larger M (prefill) is worked in
 * chunks of KERN_CHUNK_M rows so scratch stays small. The fast paths allocate nothing per call:
 * per-thread scratch buffers (prepared X; an rm band) grow to the largest size seen and are freed
 * at thread exit. (The ref path allocates; it is the definition, not a fast path.)
 *
 * Accuracy modes (like MatMulNBits' accuracy_level):
 *   KERN_F32  activations stay fp32. Result = Σ_k W[n,k]·X[m,k] with W[n,k] = (code − zp)·scale, up to
 *             fp32 summation order. The SIMD paths compute per group g (B columns)
 *                 scale_g · (Σ code·x − zp·Σ x)
 *             so every path agrees with the reference (which sums in double) within
 *                 |Δ| <= (B + kb + 4) · 2^-23 · Σ_k |scale|·(code + zp)·|x|
 *             (Higham's bound for the two per-group sums plus the kb-term sum over groups, doubled).
 *   KERN_I8   activations quantised per (row m, group g) to int8, symmetric, like MLAS CompInt8:
 *                 a = max|x| over the group, d = a / 127, q = round_half_even(x · (127 / a)) (0 when a = 0)
 *             and the dot products are exact integers: Y = Σ_g scale·d·(Σ code·q − zp·Σ q). Every
 *             path quantises identically (same fp32 operations), so paths differ only in the fp32
 *             sum over groups: |Δ| <= (kb + 4) · 2^-23 · Σ_g |scale·d·(Σ code·q − zp·Σ q)| and less.
 *             Its error against KERN_F32 is the quantisation error of X (measured in t/unit/kern_paths.c
 *             and documented in npu-gemm(1)).
 *   KERN_I16  activations quantised per (row m, group g) to 16 bits: a = max|x|, d = a / 32258,
 *                 Q = round_half_even(x · (32258 / a)) (0 when a = 0), |Q| <= 32258 = 127·254,
 *             split exactly into two int8 planes Q = 254·q1 + q2, q1 = floor((Q + 127) / 254) (fp32
 *             division, exact here), q2 = Q − 254·q1, both in [-127, 127], so the int8 dot-product
 *             instructions do the work (two per weight instead of one). Y = Σ_g scale·d·(Σ code·Q − zp·Σ Q)
 *             with Σ code·Q exact (int32: 15·32258·4096 < 2^31); paths round it and the zp term to fp32:
 *                 |Δ| <= (kb + 8) · 2^-23 · Σ_g |scale·d|·(Σ code·|Q| + zp·Σ|Q|).
 *             Error against KERN_F32: |x − d·Q| <= ~d/2 = a / 64516 per element (~256x below KERN_I8's). Paths:
 *             ref, avx2 and avx512. The model uses it for the classifier of
 *             passes of several rows in --mode i8 (see lib/model).
 * Blocks (B) are powers of two from 16 to 4096.
 * Columns K..kb·B of the last group are multiplied by zero (the layouts keep whatever codes the
 * source had there).
 *
 * The ISA table (isa.c, in the spirit of ggml's type traits): one static const row of function
 * pointers per instruction set ("ref" scalar, "avx2", "avx512" = AVX-512 F/BW/VL/DQ/VNNI, "amx" = the avx512
 * row with AMX-INT8 tiles for int8 and 16-bit launches of 16 rows and more) holding every
 * per-ISA operation: the b8 GEMM micro-kernels and M = 1 GEMV bodies, int8 activation quantisation,
 * the rm -> b8 band shuffle, dequantisation, one query row's attention, SwiGLU, the read-probe loop.
 * The row is chosen once, from cpuid, or forced by OGAKIT_KERNEL=ref|avx2|avx512|amx (an unknown or
 * unsupported name is an error of kern_isa_init, which every program turns into the same refusal:
 * exit 4, OGK_EXIT_INIT). isa.c is the only file that reads cpuid or OGAKIT_KERNEL (and asks Linux for
 * the AMX tile state). Adding an ISA means one new file with its functions and one row in isa.c.
 * The b8 layout is the fast one; rm is moved one 32-row band at a time into b8 order in per-thread
 * scratch (with AVX-512 VBMI byte shuffles when the row and the CPU have them) and then multiplied by
 * the same micro-kernels.
 */
#ifndef OGK_KERN_H
#define OGK_KERN_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "util/tensor.h"
#include "util/util.h"

/* --mode: activations fp32 (exact) or int8 per block (like MatMulNBits accuracy_level 4) */
enum kern_mode { KERN_F32 = 0, KERN_I8 = 1, KERN_I16 = 2 }; /* I16: internal (see above), not a --mode */
int kern_mode_parse(const char *s); /* "f32" / "i8" -> enum kern_mode, -1 otherwise */
const char *kern_mode_name(int mode);
#define KERN_CHUNK_M 512

/* ---- thread pool ---- */
typedef struct kern_pool kern_pool;
/* threads <= 0: online CPUs. The calling thread is worker 0; threads-1 workers are started. Workers
 * spin briefly after a job (decode launches come back-to-back) and then sleep. NULL on failure. */
kern_pool *kern_pool_new(int threads);
#define KERN_MAX_THREADS 256 /* kern_pool_new takes at most this many */
void kern_pool_free(kern_pool *p);
int kern_pool_threads(const kern_pool *p);
/* Run fn over [0, n) split into contiguous ranges handed out dynamically (grain 0: automatic,
 * about 4 ranges per thread); returns when all are done. fn gets the range and the worker index
 * (0..threads-1, for per-thread scratch). Not reentrant: do not call from inside fn. p may be NULL
 * (runs inline on the caller). */
typedef void (*kern_range_fn)(void *arg, size_t begin, size_t end, int worker);
void kern_pool_for(kern_pool *p, size_t n, size_t grain, kern_range_fn fn, void *arg);
/* The same with ranges of at most grain that start at multiples of align (grain is rounded up to one),
 * and the threads' shares cut in whole units of align rather than whole grains, so that they stay even
 * when n is not a multiple of threads x grain. */
void kern_pool_for_aligned(kern_pool *p, size_t n, size_t grain, size_t align, kern_range_fn fn, void *arg);
/* The same, and then each worker that ran a range prefetches its after[worker] regions into L2 once its ranges
 * are counted done (after: one entry per pool thread, or NULL; with no pool, or inline, after[0] on the caller).
 * Addresses only: they are never dereferenced, so they may be anything, and each region is cut at
 * KERN_PREFETCH_MAX bytes. */
#define KERN_PREFETCH_MAX ((size_t)1 << 20)
typedef struct {
    const void *at[2];
    size_t len[2];
} kern_prefetch;
void kern_pool_for_prefetch(kern_pool *p, size_t n, size_t grain, size_t align, kern_range_fn fn, void *arg,
                            const kern_prefetch *after);

/* ---- the ISA table (isa.c) ---- */
enum kern_isa_id { KERN_ISA_REF = 0, KERN_ISA_AVX2 = 1, KERN_ISA_AVX512 = 2, KERN_ISA_AMX = 3, KERN_ISA_COUNT };
typedef struct kern_job kern_job; /* one M-chunk of a matmul, X prepared (kern_int.h) */
/* the head sizes the SIMD attention of the fp16 cache specialises (the avx2 and avx512 attend_h / attend_ht:
 * scores over block-transposed keys); attend_ht takes only these */
#define KERN_ATTEND_HD(hd) ((hd) == 64 || (hd) == 96 || (hd) == 128)
typedef struct kern_isa {
    const char *name;  /* "ref", "avx2", "avx512", "amx": what OGAKIT_KERNEL and --kernel take */
    uint32_t needs;    /* CPU features (KERN_CPU_* bits of isa.c) the row requires */
    /* b8 row blocks [rb0, rb1) of a job: M = 1 (decode, memory-bound) and M > 1 (tiles). NULL on the
     * ref row, whose matmul is kern_ref_rows. */
    void (*gemv)(const kern_job *j, uint32_t rb0, uint32_t rb1);
    void (*gemm)(const kern_job *j, uint32_t rb0, uint32_t rb1);
    /* row blocks per range of a launch of KERN_WIDE_M (16) rows or more (0: about four ranges per
     * thread, as in narrower launches, which also stream the weights from DRAM). The avx512 tiles take 2:
     * wide launches are compute-bound, and at N = 896 (56 row blocks) ranges of 8 could leave the two
     * threads 24 and 32 (npu-gemm --shape 896,896 --rows 128 -t 2 on Zen 4: 280 -> 300-315 GMAC/s;
     * --model-pass of the qwen05b container at 128 rows 229 -> 207 ms, median of 5 alternated). The AMX
     * tiles keep the default: they unpack and reuse a batch of row blocks per range. */
    uint32_t gemm_grain;
    /* int8 quantisation of M rows of K values (kern_quant_row_i8's result, bit for bit) */
    void (*quant_i8)(const float *x, int M, uint32_t k, uint32_t block, int8_t *q, float *d, int32_t *qs);
    /* KERN_I16 (16-bit activations as two int8 planes): b8 tiles and the quantisation (kern_quant_row_i16's
     * result, bit for bit); NULL on rows without the mode (the ref row runs it in kern_ref_rows) */
    void (*gemm_i16)(const kern_job *j, uint32_t rb0, uint32_t rb1);
    void (*quant_i16)(const float *x, int M, uint32_t k, uint32_t block, int8_t *q1, int8_t *q2, float *d, int32_t *qs);
    /* one 32-row rm band into b8 order (codes, scales, zero points); rm_band_needs: extra CPU features
     * it needs beyond the row's (a CPU without them gets the scalar band shuffle) */
    void (*rm_band)(const ogk_qtensor *W, uint32_t band, uint8_t *codes, void *scales, uint8_t *zeros);
    uint32_t rm_band_needs;
    /* rows [row0, row0 + nrows) of a quantised tensor dequantised into out[nrows][K], in storage order;
     * bit-identical to ogk_q4_dequant_row on every row */
    void (*dequant)(const ogk_qtensor *t, uint32_t row0, uint32_t nrows, float *out);
    /* one query row's causal attention for g query heads that share a KV head: q [g][hd] (output over
     * it), keys / values [n][hd], att slices of n scores, `as` floats apart; any hd */
    void (*attend)(float *q, int g, const float *kc, const float *vc, int n, int hd, float scale, float *att,
                   size_t as);
    /* the same over an fp16 (IEEE half) cache, the i8 mode's KV cache, for `rows` query rows at
     * consecutive positions: row r (q + r·qs) attends to n0 + r positions, its head h's scores in the
     * att slice r·g + h. Each row's result is bit-identical to a call of that row alone (the server's
     * batching and prefix cache rely on it); the keys and values are read once for all rows. */
    void (*attend_h)(float *q, size_t qs, int rows, int g, const uint16_t *kc, const uint16_t *vc, int n0, int hd,
                     float scale, float *att, size_t as);
    /* attend_h at head_dim hd = 64, 96 or 128 (KERN_ATTEND_HD) over a copy of the keys transposed in
     * blocks of 16 positions: kt[(t / 16)·16·hd + c·16 + t % 16] (so a block's dimension c is one vector
     * of 16 positions, and a score of 16 positions takes one chain of fused multiply-adds). Bit-identical
     * to attend_h over the same keys, for any rows (decode's one, verify and prompt passes); NULL on rows
     * without it. */
    void (*attend_ht)(float *q, size_t qs, int rows, int g, const uint16_t *kt, const uint16_t *vc, int n0, int hd,
                      float scale, float *att, size_t as);
    /* kern_attend_ext's operation (soft caps, a window start t0; the same arguments), vectorised; the ref
     * row's is kern_attend_ext itself. Results agree with it to float rounding, not bit for bit. */
    void (*attend_ext)(float *q, int g, const void *kc, const void *vc, int f16, int t0, int n, int hd, float scale,
                       float cap, float *att, size_t as);
    void (*swiglu)(float *g, const float *up, size_t n); /* g[i] = silu(g[i]) * up[i] */
    void (*geglu)(float *g, const float *up, size_t n);  /* g[i] = gelu_tanh(g[i]) * up[i] (Gemma 2's gate) */
    /* dst[i] = the fp16 of src[i], for the KV cache: nearest, ties to even, beyond ±65504 clamped to it (a large
     * key cannot turn a score into inf - inf), NaN as sign | 0x7e00: ogk_f32_to_f16_sat's bits on every row */
    void (*half)(uint16_t *dst, const float *src, size_t n);
    uint64_t (*read)(const uint8_t *p, size_t n);          /* XOR of [p, p+n), n % 256 == 0, p 64-aligned */
    /* the classifier's argmax head (lib/model head.c): the largest of n values (NaN skipped; -inf when there
     * is none), and mark[b] = 1 for every block b of 16 values (the last may be shorter) holding a value
     * >= thr or a NaN (other marks left alone) */
    float (*vmax)(const float *x, size_t n);
    void (*mark_ge)(const float *x, size_t n, float thr, unsigned char *mark);
    /* sum of e^(x[i] - mx) over n values, x[i] <= mx (a softmax's denominator; logprobs): the ref row in
     * double with libm's exp, the others in fp32 lanes (relative error below 1e-5); -inf and values more
     * than 80 below mx count 0 */
    double (*expsum)(const float *x, size_t n, float mx);
    /* an 8-bit tensor (OGK_Q8, source order): Y[m][n] for columns [n0, n1) and every row of the job, KERN_F32
     * or KERN_I8 (X prepared as for q4); NULL on the ref row (kern_ref_rows) */
    void (*q8)(const kern_job *j, uint32_t n0, uint32_t n1);
} kern_isa;

/* One query row's attention for g query heads sharing a KV head over positions [t0, n) of an fp32 (f16 0) or
 * fp16 cache, with scores soft-capped (cap · tanh(score / cap)) when cap > 0: the families with a sliding
 * window or soft caps (Gemma 2). Portable C, the same on every ISA row; att slices `as` floats apart. */
void kern_attend_ext(float *q, int g, const void *kc, const void *vc, int f16, int t0, int n, int hd, float scale, float cap,
                     float *att, size_t as);

/* g[i] = gelu(g[i]) * up[i] with the exact (erf) GELU: the gate of a graph whose Gelu has no tanh
 * approximation; no fixture family uses it, so portable C only. */
void kern_gelu_erf_gate(float *g, const float *up, size_t n);

/* Choose the row once: OGAKIT_KERNEL if set, else the widest row this CPU supports. 0, or -1 with e
 * filled ("OGAKIT_KERNEL=x: unknown kernel path (ref, avx2, avx512, amx)" / "...: this CPU lacks the
 * instructions it needs"); programs exit OGK_EXIT_INIT on it. Later calls return the first answer. */
int kern_isa_init(ogk_error *e);
/* The chosen row (kern_isa_init on first use; if that failed, the ref row). */
const kern_isa *kern_isa_current(void);
/* Row `id` of the table, as this CPU runs it (rm_band resolved); NULL if id is out of range. */
const kern_isa *kern_isa_row(int id);
int kern_isa_find(const char *name);  /* id of the row called name, -1 if none */
int kern_isa_supported(int id);       /* 1 if this CPU can run row id */
/* Force row id for the rest of the process (tests, npu-gemm --kernel). 0, or -1 if unsupported. */
int kern_isa_set(int id);

/* CPU facts from the same cpuid reading: the model name (/proc/cpuinfo) and the features the table
 * knows, in table order; feature i's name (NULL past the end) and whether this CPU has it. */
const char *kern_cpu_name(void);
const char *kern_cpu_feature(int i, int *has);

/* Dequantise rows [row0, row0 + nrows) of W into out[nrows][K] with the chosen row (fast verification
 * of whole models); every row gives the bits of ogk_q4_dequant_row (q8: ogk_q8_dequant_row's, in source
 * order, on every row). */
void kern_dequant_rows(const ogk_qtensor *W, uint32_t row0, uint32_t nrows, float *out);

/* ---- the operation ---- */
/* Y[M x N] = X[M x K] · Wᵀ on the chosen row. W must be OGK_Q4 in layout b8 or rm, OGK_Q8 (source order;
 * modes KERN_F32 and KERN_I8) or an fp32 [K, N] weight (see matmul_plain in kern.c). p may be NULL
 * (single-threaded). Returns 0, or -1 with e filled when W is not something it can multiply. */
int kern_matmul(kern_pool *p, const ogk_qtensor *W, const float *X, int M, float *Y, int mode, ogk_error *e);
/* Y1 = X·W1ᵀ and Y2 = X·W2ᵀ (the MLP's gate and up): the bits of two kern_matmul calls, in one launch where
 * both are b8 tensors of the same K, groups, scale dtype and zero points on a SIMD row (X prepared once, the
 * two tensors' row blocks one range space), else in two; tensors of different K are refused. W2 NULL (Y2
 * unused): kern_matmul. */
int kern_matmul2(kern_pool *p, const ogk_qtensor *W1, float *Y1, const ogk_qtensor *W2, float *Y2, const float *X, int M,
                 int mode, ogk_error *e);
/* The tensors the caller multiplies next on p (W1, and W2 for a kern_matmul2 pair; W1 NULL: not known),
 * for the next matmul launch on p to take: a one-row launch then has each worker request the start of its
 * share of them, so the memory keeps streaming between the launches. A hint only: results never depend on
 * it, and every launch clears it. The tensors must outlive that launch. */
void kern_matmul_next(kern_pool *p, const ogk_qtensor *W1, const ogk_qtensor *W2);
/* kern_matmul for some columns: Y[m][n] for every n in cols (ascending, < N), and for the other columns of
 * the 16-column blocks (32 on the rm layout's SIMD path) they fall in, gets the bits kern_matmul gives it;
 * the rest of Y (row stride N) is left alone. A classifier recomputes a few candidates with it (lib/model
 * head.c). */
int kern_matmul_cols(kern_pool *p, const ogk_qtensor *W, const float *X, int M, float *Y, int mode,
                     const uint32_t *cols, size_t ncols, ogk_error *e);
/* The same on an explicit row of the table (tests and benchmarks compare rows with it). */
int kern_matmul_isa(int isa, kern_pool *p, const ogk_qtensor *W, const float *X, int M, float *Y, int mode,
                     ogk_error *e);
/* The scalar reference for output columns [n0, n1) only (Y still has row stride N; other columns
 * are left alone). Sums in double. Used to check large shapes on a sample of rows. */
void kern_ref_rows(const ogk_qtensor *W, const float *X, int M, float *Y, int mode, uint32_t n0, uint32_t n1);

/* The bound above for output (row m of X = x, column n): what a row may differ from the reference. */
double kern_ref_bound(const ogk_qtensor *W, const float *x, uint32_t n, int mode);

/* DRAM read bandwidth in GB/s (1e9 B/s): every pool thread streams its contiguous share of a
 * `bytes` buffer (make it much larger than the last-level cache) with the widest loads the CPU has;
 * the median of `reps` passes. -1 if the buffer cannot be allocated. */
double kern_read_bandwidth(kern_pool *p, size_t bytes, int reps);
/* The same probe as an object, to interleave single passes with other work (npu-gemm --model-pass
 * alternates it with the model's weight stream so both see the same machine). */
typedef struct kern_bw_probe kern_bw_probe;
kern_bw_probe *kern_bw_probe_new(size_t bytes); /* allocates and faults in the buffer; NULL on failure */
/* a probe that reads existing memory (64-byte aligned; the last partial 64 KiB is not read), e.g. the
 * mapping that holds a model's weights, so probe and kernels see the same pages */
kern_bw_probe *kern_bw_probe_over(const void *buf, size_t bytes);
double kern_bw_probe_pass(kern_pool *p, kern_bw_probe *b); /* one timed pass: GB/s */
void kern_bw_probe_free(kern_bw_probe *b);

/* ---- the GEMM harness (gemm_bench.c): what npu-gemm measures ---- */
/* A synthetic quantised tensor: seeded random codes, scales (|s| in [0.002, 0.022], random sign) and
 * zero points in MatMulNBits order (src_*, kept only when asked), moved into a layout (t): bits 4 (OGK_Q4
 * in layout b8 or rm) or 8 (OGK_Q8, whose one layout is source order; layout is not read). */
typedef struct kern_synth {
    ogk_qtensor t;
    uint8_t *codes, *zeros, *src_codes, *src_zp;
    void *scales, *src_scales;
    char name[64];
} kern_synth;
uint64_t kern_synth_rng(long seed); /* the generator's state for a seed (npu-gemm --seed) */
/* 0, or -1 with e filled (out of memory). Draws from *rng; free with kern_synth_free. */
int kern_synth_make(kern_synth *s, uint64_t *rng, uint32_t n, uint32_t k, uint32_t block, int bits, int sdt,
                    int asym, int layout, int keep_src, ogk_error *e);
void kern_synth_free(kern_synth *s);
float *kern_synth_x(uint64_t *rng, int M, uint32_t K); /* M x K roughly gaussian activations; NULL: no memory */
size_t kern_tensor_bytes(const ogk_qtensor *t);         /* codes + scales + zero points in its layout */

typedef struct kern_bench_opts {
    int mode;           /* enum kern_mode */
    long reps;          /* timed launches; <= 0: as many as fit in time_budget seconds (5..5000) */
    double time_budget;
    long check_rows;    /* output columns checked against the reference (0: none; < 0 or >= N: all) */
    long probe_mb;      /* kern_bench_pass: alternate each pass with a read probe over this many MB (0: off) */
    const uint8_t *probe_mem; /* ... or over this memory (a container's bytes) when not NULL */
    size_t probe_len;
} kern_bench_opts;
typedef struct kern_check {
    long rows;                                      /* output columns checked */
    double max_abs, max_ref, i8_abs, worst_ratio;   /* worst_ratio: max |y - ref| / bound */
    int ok;                                         /* every checked output within kern_ref_bound */
} kern_check;
/* Y (from kern_matmul) against kern_ref_rows on check_rows output columns spread over [0, N). */
kern_check kern_bench_check(const ogk_qtensor *W, const float *X, int M, const float *Y, int mode, long check_rows);
/* One tensor: time launches of Y = X·Wᵀ (X M x K, Y M x N, Y left holding the result), check them, and
 * return npu-gemm's JSON record (kernel row, shape, ms, GB/s, GFLOP/s, errors). *all_ok is cleared when
 * a checked output is outside the bound. NULL with e and *code (3: the kernels refuse W; 4: memory). */
json_t *kern_bench_one(kern_pool *pool, const kern_bench_opts *o, const ogk_qtensor *W, const float *X, int M,
                       float *Y, int *all_ok, ogk_error *e, int *code);
/* A pass: every tensor of Ws once per timed launch with M rows of activations drawn from *rng, optionally
 * alternated with read-probe passes (o->probe_mb); one of every distinct shape is checked. As above. */
json_t *kern_bench_pass(kern_pool *pool, const kern_bench_opts *o, const ogk_qtensor *const *Ws, size_t nw, int M,
                        uint64_t *rng, int *all_ok, ogk_error *e, int *code);
/* The CPU as a compute device: name, the table's features it has, the chosen row, threads, and the
 * DRAM read bandwidth over a bw_mb MB buffer (null when it cannot be allocated). */
json_t *kern_bench_cpu(kern_pool *pool, long bw_mb);

/* The int8 activation quantisation of KERN_I8 for one row of K values (kb = ceil(K/B) groups):
 * q[kb*B] (zero-padded), d[kb] scales, qs[kb] = Σ q per group. Exposed for tests and the docs. */
void kern_quant_row_i8(const float *x, uint32_t k, uint32_t block, int8_t *q, float *d, int32_t *qs);
/* The 16-bit quantisation of KERN_I16: planes q1, q2 [kb*B] (zero-padded), d[kb], qs[kb] = Σ Q per group. */
void kern_quant_row_i16(const float *x, uint32_t k, uint32_t block, int8_t *q1, int8_t *q2, float *d, int32_t *qs);

#endif
