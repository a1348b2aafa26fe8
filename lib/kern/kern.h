/* lib/kern — compute kernels: Y = X · Wᵀ for a quantised Q4NX tensor W, and the thread pool the
 * model uses for everything else it parallelises. Owns the kernel paths (scalar reference, AVX2,
 * AVX-512 VNNI), their selection and the pool; must not know about containers, models or devices.
 *
 * Shapes and memory: W is a q4nx_tensor (Q4NX_Q4, layout b8 or rm, N rows x K columns). X is M x K
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
 *             ref and avx512 (others refuse the mode). The model uses it for the classifier of
 *             passes of several rows in --mode i8 (see lib/model).
 * Blocks (B) are powers of two from 16 to 4096.
 * Columns K..kb·B of the last group are multiplied by zero (the layouts keep whatever codes the
 * source had there).
 *
 * Paths: "ref" (scalar, both layouts, the definition), "avx2" and "avx512" (AVX-512 F/BW/VL/VNNI).
 * The best supported path is picked once (first call) from cpuid; OGAKIT_KERNEL=ref|avx2|avx512
 * forces one (an unsupported or unknown name is an error reported by kern_path_init). The b8 layout
 * is the fast one; rm is moved one 32-row band at a time into b8 order in per-thread scratch (with
 * AVX-512 VBMI byte shuffles when present) and then multiplied by the same micro-kernels.
 */
#ifndef OGK_KERN_H
#define OGK_KERN_H

#include <stddef.h>
#include <stdint.h>

#include "q4nx/q4nx.h"
#include "util/util.h"

enum kern_mode { KERN_F32 = 0, KERN_I8 = 1, KERN_I16 = 2 };
enum kern_path { KERN_PATH_REF = 0, KERN_PATH_AVX2 = 1, KERN_PATH_AVX512 = 2 };
#define KERN_CHUNK_M 128

/* ---- thread pool ---- */
typedef struct kern_pool kern_pool;
/* threads <= 0: online CPUs. The calling thread is worker 0; threads-1 workers are started. Workers
 * spin briefly after a job (decode launches come back-to-back) and then sleep. NULL on failure. */
kern_pool *kern_pool_new(int threads);
void kern_pool_free(kern_pool *p);
int kern_pool_threads(const kern_pool *p);
/* Run fn over [0, n) split into contiguous ranges handed out dynamically (grain 0: automatic,
 * about 4 ranges per thread); returns when all are done. fn gets the range and the worker index
 * (0..threads-1, for per-thread scratch). Not reentrant: do not call from inside fn. p may be NULL
 * (runs inline on the caller). */
typedef void (*kern_range_fn)(void *arg, size_t begin, size_t end, int worker);
void kern_pool_for(kern_pool *p, size_t n, size_t grain, kern_range_fn fn, void *arg);

/* ---- kernel path selection ---- */
/* Choose the path (OGAKIT_KERNEL or cpuid). 0, or -1 with e filled (unknown / unsupported name).
 * Called implicitly by kern_matmul; call it first to report errors nicely. */
int kern_path_init(ogk_error *e);
int kern_path(void);                 /* the chosen path (initialises on first use) */
const char *kern_path_name(int path); /* "ref" / "avx2" / "avx512" */
int kern_path_supported(int path);    /* 1 if this CPU can run it */
/* Force a path for the rest of the process (tests, npu-gemm --kernel). 0, or -1 if unsupported. */
int kern_path_set(int path);

/* ---- the operation ---- */
/* Y[M x N] = X[M x K] · Wᵀ on the chosen path. W must be Q4NX_Q4 in layout b8 or rm. p may be NULL
 * (single-threaded). Returns 0, or -1 with e filled when W is not something it can multiply. */
int kern_matmul(kern_pool *p, const q4nx_tensor *W, const float *X, int M, float *Y, int mode, ogk_error *e);
/* The same on an explicit path (tests and benchmarks compare paths with it). */
int kern_matmul_path(int path, kern_pool *p, const q4nx_tensor *W, const float *X, int M, float *Y, int mode,
                     ogk_error *e);
/* The scalar reference for output columns [n0, n1) only (Y still has row stride N; other columns
 * are left alone). Sums in double. Used to check large shapes on a sample of rows. */
void kern_ref_rows(const q4nx_tensor *W, const float *X, int M, float *Y, int mode, uint32_t n0, uint32_t n1);

/* The bound above for output (row m of X = x, column n): what a path may differ from the reference. */
double kern_ref_bound(const q4nx_tensor *W, const float *x, uint32_t n, int mode);

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

/* The int8 activation quantisation of KERN_I8 for one row of K values (kb = ceil(K/B) groups):
 * q[kb*B] (zero-padded), d[kb] scales, qs[kb] = Σ q per group. Exposed for tests and the docs. */
void kern_quant_row_i8(const float *x, uint32_t k, uint32_t block, int8_t *q, float *d, int32_t *qs);
/* The 16-bit quantisation of KERN_I16: planes q1, q2 [kb*B] (zero-padded), d[kb], qs[kb] = Σ Q per group. */
void kern_quant_row_i16(const float *x, uint32_t k, uint32_t block, int8_t *q1, int8_t *q2, float *d, int32_t *qs);

#endif
