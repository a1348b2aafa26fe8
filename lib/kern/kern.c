/* kern_matmul: checks the tensor, picks the path, prepares X per 128-row chunk (padding, group sums,
 * int8 quantisation) and hands row blocks to the pool. The per-ISA micro-kernels live in
 * kern_avx2.c / kern_avx512.c; the rm layout is moved band by band into b8 order for them. */
#include "kern_int.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#ifndef KERN_RANGE_BYTES
#define KERN_RANGE_BYTES (128u << 10) /* weights per work range at M = 1 */
#endif
#ifndef KERN_INLINE_BYTES
#define KERN_INLINE_BYTES (96u << 10) /* below this (rows x weight bytes) a launch stays on the caller */
#endif

/* ---- path selection ---- */
static int g_path = -1;

const char *kern_path_name(int path)
{
    return path == KERN_PATH_REF ? "ref" : path == KERN_PATH_AVX2 ? "avx2" : path == KERN_PATH_AVX512 ? "avx512" : "?";
}

int kern_path_supported(int path)
{
    __builtin_cpu_init();
    switch (path) {
    case KERN_PATH_REF: return 1;
    case KERN_PATH_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2");
    case KERN_PATH_AVX512:
        return kern_path_supported(KERN_PATH_AVX2) && __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni");
    default: return 0;
    }
}

int kern_path_init(ogk_error *e)
{
    if (g_path >= 0)
        return 0;
    const char *env = getenv("OGAKIT_KERNEL");
    if (env && *env) {
        int p = !strcmp(env, "ref") ? KERN_PATH_REF : !strcmp(env, "avx2") ? KERN_PATH_AVX2
                                                  : !strcmp(env, "avx512") ? KERN_PATH_AVX512 : -1;
        if (p < 0)
            return ogk_fail(e, "OGAKIT_KERNEL=%s: unknown kernel path (ref, avx2, avx512)", env);
        if (!kern_path_supported(p))
            return ogk_fail(e, "OGAKIT_KERNEL=%s: this CPU lacks the instructions it needs", env);
        g_path = p;
        return 0;
    }
    g_path = kern_path_supported(KERN_PATH_AVX512) ? KERN_PATH_AVX512
             : kern_path_supported(KERN_PATH_AVX2) ? KERN_PATH_AVX2 : KERN_PATH_REF;
    return 0;
}

int kern_path(void)
{
    if (g_path < 0) {
        ogk_error e;
        if (kern_path_init(&e) < 0)
            g_path = KERN_PATH_REF; /* kern_matmul reports the error; path queries stay usable */
    }
    return g_path;
}

int kern_path_set(int path)
{
    if (!kern_path_supported(path))
        return -1;
    g_path = path;
    return 0;
}

/* ---- per-thread scratch for the prepared X (grows, freed at thread exit) ---- */
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
typedef struct {
    void *p[2];
    size_t cap[2];
} scratch;
static void scratch_free(void *s)
{
    if (s)
        free(((scratch *)s)->p[0]), free(((scratch *)s)->p[1]);
    free(s);
}
static void scratch_init(void) { pthread_key_create(&scratch_key, scratch_free); }
/* slot 0: the prepared X (calling thread); slot 1: an rm band converted to b8 (any worker) */
static void *scratch_get(int slot, size_t n)
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
    int path;
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
            float *d = (float *)j->xd + m * kb;
            int32_t *qs = (int32_t *)j->xqs + m * kb;
            kern_quant_rows_i16_avx512(x, 1, K, B, q1, q2, d, qs); /* only the avx512 path runs the mode */
        } else if (j->mode == KERN_I8) {
            int8_t *q = (int8_t *)j->xq + m * kp;
            float *d = (float *)j->xd + m * kb;
            int32_t *qs = (int32_t *)j->xqs + m * kb;
            if (pa->path == KERN_PATH_AVX512)
                kern_quant_rows_avx512(x, 1, K, B, q, d, qs);
            else
                kern_quant_row_i8(x, K, B, q, d, qs);
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
    int path;
    const float *X; /* ref path */
    int M;
} run_arg;

static void b8_kernel(int path, const kern_job *j, uint32_t rb0, uint32_t rb1)
{
    if (j->mode == KERN_I16)
        kern_b8_i16_avx512(j, rb0, rb1);
    else if (path == KERN_PATH_AVX512)
        kern_b8_avx512(j, rb0, rb1);
    else
        kern_b8_avx2(j, rb0, rb1);
}

static void run_b8(void *a, size_t b, size_t e, int worker)
{
    (void)worker;
    run_arg *ra = a;
    b8_kernel(ra->path, ra->j, (uint32_t)b, (uint32_t)e);
}

/* rm on a fast path: each 32-row band (one row of rm tiles) is moved into b8 order in per-thread
 * scratch (codes, scales, zero points: a bijection, see q4nx.h) and multiplied by the path's b8
 * micro-kernel, once for all M rows of the chunk. */
void kern_rm_band_to_b8(const q4nx_tensor *W, uint32_t band, uint8_t *codes, void *scales, uint8_t *zeros, int vbmi)
{
    uint32_t B = W->block, kb = W->k_blocks, cpg = B / 8, ntc = (kb * B + 255) / 256, gpt = 256 / B;
    size_t ss = q4nx_dtype_size(W->scale_dtype);
    for (uint32_t h = 0; h < 2; h++) {
        for (uint32_t g = 0; g < kb; g++) {
            for (uint32_t c = 0; c < cpg; c++) {
                uint32_t col = g * B + c * 8;
                const uint8_t *in = W->codes + ((size_t)band * ntc + col / 256) * 4096 + h * 2048 + (size_t)(col % 256) * 8;
                uint8_t *out = codes + (((size_t)h * kb + g) * cpg + c) * 64;
                if (vbmi)
                    kern_rm_chunk_avx512(in, out);
                else
                    for (int r = 0; r < 16; r++)
                        for (int i = 0; i < 4; i++) {
                            uint8_t lo = (uint8_t)(in[i * 8 + r / 2] >> (4 * (r & 1)) & 15);
                            uint8_t hi = (uint8_t)(in[(4 + i) * 8 + r / 2] >> (4 * (r & 1)) & 15);
                            out[r * 4 + i] = (uint8_t)(lo | hi << 4);
                        }
            }
            /* 16 consecutive entries per (tile, group, half) in rm; [rb][g][16] in b8 */
            size_t src = ((size_t)band * ntc + g / gpt) * gpt * 32 + (size_t)(g % gpt) * 32 + h * 16;
            memcpy((uint8_t *)scales + ((size_t)h * kb + g) * 16 * ss, (const uint8_t *)W->scales + src * ss, 16 * ss);
            if (W->has_zp)
                memcpy(zeros + ((size_t)h * kb + g) * 16, W->zeros + src, 16);
        }
    }
}

static void run_rm_bands(void *a, size_t b, size_t e, int worker)
{
    (void)worker;
    run_arg *ra = a;
    const q4nx_tensor *W = ra->j->W;
    size_t kb = W->k_blocks, ss = q4nx_dtype_size(W->scale_dtype);
    size_t cbytes = 2 * kb * W->block * 8, sbytes = 2 * kb * 16 * ss, zbytes = W->has_zp ? 2 * kb * 16 : 0;
    uint8_t *buf = scratch_get(1, cbytes + sbytes + zbytes + 128);
    if (!buf)
        abort();
    for (size_t band = b; band < e; band++) {
        q4nx_tensor sub = *W;
        sub.layout = Q4NX_B8;
        sub.n = W->n - (uint32_t)band * 32 < 32 ? W->n - (uint32_t)band * 32 : 32;
        sub.codes = buf;
        sub.scales = buf + cbytes;
        sub.zeros = W->has_zp ? buf + cbytes + sbytes : NULL;
        kern_rm_band_to_b8(W, (uint32_t)band, buf, buf + cbytes, buf + cbytes + sbytes,
                           ra->path == KERN_PATH_AVX512 && kern_rm_chunk_avx512_ok());
        kern_job j = *ra->j;
        j.W = &sub;
        j.Y = ra->j->Y + band * 32;
        b8_kernel(ra->path, &j, 0, (sub.n + 15) / 16);
    }
}

static void run_ref(void *a, size_t b, size_t e, int worker)
{
    (void)worker;
    run_arg *ra = a;
    kern_ref_rows(ra->j->W, ra->X, ra->M, ra->j->Y, ra->j->mode, (uint32_t)b, (uint32_t)e);
}

static int check_tensor(const q4nx_tensor *W, int M, int mode, ogk_error *e)
{
    if (!W || W->dtype != Q4NX_Q4)
        return ogk_fail(e, "tensor %s: not a 4-bit quantised tensor", W && W->name ? W->name : "?");
    const char *why = q4nx_q4_layout_refusal(W->layout, W->n, W->k, W->block);
    if (why)
        return ogk_fail(e, "tensor %s: %s", W->name ? W->name : "?", why);
    if (W->block > 4096) /* keeps the i8 group sums below 2^24, where fp32 holds them exactly */
        return ogk_fail(e, "tensor %s: block %u > 4096 is not supported by the kernels", W->name ? W->name : "?",
                        W->block);
    if (W->k_blocks != (W->k + W->block - 1) / W->block)
        return ogk_fail(e, "tensor %s: k_blocks %u != ceil(K/block)", W->name ? W->name : "?", W->k_blocks);
    if (W->scale_dtype != Q4NX_F32 && W->scale_dtype != Q4NX_F16 && W->scale_dtype != Q4NX_BF16)
        return ogk_fail(e, "tensor %s: scale dtype %s is not f32/f16/bf16", W->name ? W->name : "?",
                        q4nx_dtype_name(W->scale_dtype));
    if (!W->codes || !W->scales || (W->has_zp && !W->zeros))
        return ogk_fail(e, "tensor %s: missing codes, scales or zero points", W->name ? W->name : "?");
    if (M < 1)
        return ogk_fail(e, "M = %d: need at least one row", M);
    if (mode != KERN_F32 && mode != KERN_I8 && mode != KERN_I16)
        return ogk_fail(e, "unknown accuracy mode %d", mode);
    return 0;
}

int kern_matmul_path(int path, kern_pool *p, const q4nx_tensor *W, const float *X, int M, float *Y, int mode,
                     ogk_error *e)
{
    if (check_tensor(W, M, mode, e) < 0)
        return -1;
    if (!kern_path_supported(path))
        return ogk_fail(e, "kernel path %s: not supported by this CPU", kern_path_name(path));
    if (mode == KERN_I16 && path != KERN_PATH_REF && path != KERN_PATH_AVX512)
        return ogk_fail(e, "kernel path %s: no 16-bit activation mode (ref and avx512 have it)", kern_path_name(path));
    int nt = kern_pool_threads(p);
    kern_job j = {.W = W, .mode = mode, .kp = W->k_blocks * W->block, .ldy = W->n};
    if (path == KERN_PATH_REF) {
        run_arg ra = {.j = &j, .path = path, .X = X, .M = M};
        j.Y = Y;
        kern_pool_for(p, W->n, 0, run_ref, &ra);
        return 0;
    }
    uint32_t kb = W->k_blocks, kp = j.kp;
    int mc_max = M < KERN_CHUNK_M ? M : KERN_CHUNK_M;
    size_t per_row = mode == KERN_I8 ? (size_t)kp + (size_t)kb * 8
                     : mode == KERN_I16 ? 2 * (size_t)kp + (size_t)kb * 8 : (size_t)kp * 4 + (size_t)kb * 4;
    uint8_t *buf = scratch_get(0, per_row * mc_max + 64);
    if (!buf)
        return ogk_fail(e, "out of memory for %d x %u activations", mc_max, kp);
    for (int m0 = 0; m0 < M; m0 += KERN_CHUNK_M) {
        int mc = M - m0 < KERN_CHUNK_M ? M - m0 : KERN_CHUNK_M;
        j.M = mc;
        j.Y = Y + (size_t)m0 * W->n;
        if (mode == KERN_I8 || mode == KERN_I16) {
            j.xd = (const float *)buf;
            j.xqs = (const int32_t *)(buf + (size_t)kb * 4 * mc);
            j.xq = (const int8_t *)(buf + (size_t)kb * 8 * mc);
            j.xq2 = j.xq + (size_t)kp * mc;
        } else {
            j.xf = (const float *)buf;
            j.xs = (const float *)(buf + (size_t)kp * 4 * mc);
        }
        prep_arg pa = {.j = &j, .X = X + (size_t)m0 * W->k, .path = path};
        kern_pool_for(mc >= 8 ? p : NULL, (size_t)mc, 0, prep_rows, &pa);
        run_arg ra = {.j = &j, .path = path};
        if (W->layout == Q4NX_B8) {
            /* ranges of about 4 per thread, but at most ~128 KB of weights each at M = 1, so that on a
             * shared machine a thread that keeps running can take over the work of one that is not */
            size_t nb = (W->n + 15) / 16, unit = mc == 1 ? 4 : 2;
            size_t rb_bytes = (size_t)kb * W->block * 8 + (size_t)kb * 16 * (q4nx_dtype_size(W->scale_dtype) + W->has_zp);
            size_t grain = (nb + (size_t)nt * 4 - 1) / ((size_t)nt * 4);
            if (mc == 1 && grain * rb_bytes > (KERN_RANGE_BYTES))
                grain = (KERN_RANGE_BYTES) / rb_bytes;
            grain = grain < unit ? unit : (grain + unit - 1) / unit * unit;
            /* small launches run on the calling thread: waking a worker costs more than the work */
            int small = (size_t)mc * nb * rb_bytes < KERN_INLINE_BYTES;
            kern_pool_for(small ? NULL : p, nb, grain, run_b8, &ra);
        } else {
            kern_pool_for(p, (W->n + 31) / 32, 0, run_rm_bands, &ra);
        }
    }
    return 0;
}

int kern_matmul(kern_pool *p, const q4nx_tensor *W, const float *X, int M, float *Y, int mode, ogk_error *e)
{
    if (kern_path_init(e) < 0)
        return -1;
    return kern_matmul_path(g_path, p, W, X, M, Y, mode, e);
}

/* ---- the DRAM read-bandwidth probe ---- */
typedef struct {
    const uint8_t *buf;
    size_t block;
    int path;
    uint64_t sink[64];
} bw_arg;

static void bw_range(void *a, size_t b, size_t e, int worker)
{
    bw_arg *ba = a;
    const uint8_t *p = ba->buf + b * ba->block;
    size_t n = (e - b) * ba->block;
    uint64_t s;
    if (ba->path == KERN_PATH_AVX512)
        s = kern_read_avx512(p, n);
    else if (ba->path == KERN_PATH_AVX2)
        s = kern_read_avx2(p, n);
    else {
        const uint64_t *w = (const uint64_t *)p;
        s = 0;
        for (size_t i = 0; i < n / 8; i++)
            s ^= w[i];
    }
    ba->sink[worker & 63] ^= s;
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
    b->ba.path = kern_path();
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
