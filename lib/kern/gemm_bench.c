/* The GEMM harness npu-gemm drives (as lib/model/bench.c is npu-forward bench's): synthetic Q4NX
 * tensors from a seeded generator, timed launches (median and minimum), the check of a sample of
 * output columns against the scalar reference within kern_ref_bound, one tensor's or a whole pass's
 * JSON record, and the CPU's record (name, features, row, DRAM read bandwidth) from the ISA table.
 * Errors are returned (NULL / -1 with e filled and *code the exit code a program should use: 3 a
 * tensor the kernels refuse, 4 out of memory); nothing here parses options or exits. */
#include "kern_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- synthetic tensors ---- */
uint64_t kern_synth_rng(long seed)
{
    uint64_t s = 0x9E3779B97F4A7C15ull ^ ((uint64_t)seed * 0xD1B54A32D192ED03ull);
    return s ? s : 1;
}

static uint32_t rnd(uint64_t *s)
{
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return (uint32_t)(*s >> 16);
}
static float frand(uint64_t *s) { return (float)((rnd(s) & 0xFFFFFF) / 16777216.0 * 2.0 - 1.0); }

int kern_synth_make(kern_synth *s, uint64_t *rng, uint32_t n, uint32_t k, uint32_t block, int bits, int sdt,
                    int asym, int layout, int keep_src, ogk_error *e)
{
    memset(s, 0, sizeof *s);
    uint32_t kb = (k + block - 1) / block;
    const int q8 = bits == 8;
    /* MatMulNBits source order: 4 bits two codes a byte, zero points two a byte; 8 bits one of each a byte */
    size_t ss = ogk_dtype_size(sdt), nc = (size_t)n * kb * block / (q8 ? 1 : 2), nz = (size_t)n * (q8 ? kb : (kb + 1) / 2);
    s->src_codes = malloc(nc);
    s->src_scales = malloc((size_t)n * kb * ss);
    s->src_zp = asym ? malloc(nz) : NULL;
    if (!s->src_codes || !s->src_scales || (asym && !s->src_zp)) {
        kern_synth_free(s);
        return ogk_fail(e, "out of memory for a %ux%u tensor", n, k);
    }
    for (size_t i = 0; i < nc; i++)
        s->src_codes[i] = (uint8_t)rnd(rng);
    for (size_t i = 0; i < (size_t)n * kb; i++) {
        float v = (0.002f + 0.02f * fabsf(frand(rng))) * (rnd(rng) & 1 ? -1.0f : 1.0f);
        if (sdt == OGK_F32)
            memcpy((uint8_t *)s->src_scales + i * 4, &v, 4);
        else {
            uint16_t h = sdt == OGK_F16 ? ogk_f32_to_f16(v) : ogk_f32_to_bf16(v);
            memcpy((uint8_t *)s->src_scales + i * 2, &h, 2);
        }
    }
    for (size_t i = 0; asym && i < nz; i++)
        s->src_zp[i] = (uint8_t)rnd(rng);
    snprintf(s->name, sizeof s->name, "synthetic.%ux%u", n, k);
    size_t cb = q8 ? ogk_q8_codes_bytes(n, k, block) : ogk_q4_codes_bytes(layout, n, k, block),
           ng = q8 ? ogk_q8_groups(n, k, block) : ogk_q4_groups(layout, n, k, block);
    /* in 2 MiB pages (from 2 MiB up), like the probe buffer and a --no-mmap container */
    s->codes = ogk_big_alloc((cb + 4095) & ~(size_t)4095);
    s->scales = ogk_big_alloc((ng * ss + 63) & ~(size_t)63);
    s->zeros = asym ? ogk_big_alloc((ng + 63) & ~(size_t)63) : NULL;
    if (!s->codes || !s->scales || (asym && !s->zeros)) {
        kern_synth_free(s);
        return ogk_fail(e, "out of memory for a %ux%u tensor", n, k);
    }
    if (q8) { /* its one layout is source order: the same bytes */
        memcpy(s->codes, s->src_codes, nc), memcpy(s->scales, s->src_scales, ng * ss);
        if (asym)
            memcpy(s->zeros, s->src_zp, nz);
    } else {
        ogk_q4_relayout(layout, n, k, block, sdt, s->src_codes, s->src_scales, s->src_zp, s->codes, s->scales, s->zeros);
    }
    s->t = (ogk_qtensor){.name = s->name, .role = "synthetic", .dtype = q8 ? OGK_Q8 : OGK_Q4, .ndim = 2, .shape = {n, k},
                         .layout = q8 ? OGK_PLAIN : layout, .n = n, .k = k, .block = block, .k_blocks = kb,
                         .scale_dtype = sdt, .has_zp = asym, .codes = s->codes, .scales = s->scales, .zeros = s->zeros};
    if (!keep_src) {
        free(s->src_codes), free(s->src_scales), free(s->src_zp);
        s->src_codes = NULL, s->src_scales = NULL, s->src_zp = NULL;
    }
    return 0;
}

void kern_synth_free(kern_synth *s)
{
    free(s->codes), free(s->scales), free(s->zeros), free(s->src_codes), free(s->src_scales), free(s->src_zp);
    s->codes = s->zeros = s->src_codes = s->src_zp = NULL;
    s->scales = s->src_scales = NULL;
}

float *kern_synth_x(uint64_t *rng, int M, uint32_t K)
{
    float *x = malloc((size_t)M * K * sizeof *x);
    if (!x)
        return NULL;
    for (size_t i = 0; i < (size_t)M * K; i++)
        x[i] = frand(rng) + frand(rng) + frand(rng); /* roughly gaussian, like a normalised hidden state */
    return x;
}

size_t kern_tensor_bytes(const ogk_qtensor *t)
{
    size_t g = ogk_quant_groups(&t->desc);
    return ogk_quant_codes_bytes(&t->desc) + g * ogk_dtype_size(t->scale_dtype) + (t->has_zp ? g : 0);
}

/* ---- measurement ---- */
static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int launch_all(kern_pool *pool, const kern_bench_opts *o, const ogk_qtensor *const *Ws, size_t nw,
                      const float *X, int M, float *Y, ogk_error *e)
{
    for (size_t i = 0; i < nw; i++) {
        kern_matmul_next(pool, Ws[(i + 1) % nw], NULL); /* as the model names its next launch (wrapping: a pass follows a pass) */
        if (kern_matmul(pool, Ws[i], X, M, Y, o->mode, e) < 0)
            return -1;
    }
    return 0;
}

/* median ms of repeated launches of every tensor in Ws; -1 when the kernels refuse one */

/* the fields every result line starts with, and its timing fields */
static void result_head(json_t *j, int mode)
{
    json_object_set_new(j, "device", json_string("cpu"));
    json_object_set_new(j, "kernel", json_string(kern_isa_current()->name));
    json_object_set_new(j, "mode", json_string(kern_mode_name(mode)));
}

static void result_timing(json_t *j, kern_pool *pool, long reps, double ms, double mn, size_t bytes)
{
    json_object_set_new(j, "threads", json_integer(kern_pool_threads(pool)));
    json_object_set_new(j, "reps", json_integer(reps));
    json_object_set_new(j, "ms", json_real(ms));
    json_object_set_new(j, "ms_min", json_real(mn));
    json_object_set_new(j, "weight_bytes", json_integer((json_int_t)bytes));
    json_object_set_new(j, "GBps", json_real(bytes / (ms * 1e-3) / 1e9));
}

static double time_launches(kern_pool *pool, const kern_bench_opts *o, const ogk_qtensor *const *Ws, size_t nw,
                            const float *X, int M, float *Y, long *reps_out, double *min_out, ogk_error *e, int *code)
{
    *code = OGK_EXIT_INPUT;
    if (launch_all(pool, o, Ws, nw, X, M, Y, e) < 0) /* warm-up; refusals surface here */
        return -1;
    long reps = o->reps;
    if (reps <= 0) {
        double t0 = ogk_now();
        launch_all(pool, o, Ws, nw, X, M, Y, e);
        double one = ogk_now() - t0;
        reps = (long)(o->time_budget / (one > 1e-7 ? one : 1e-7));
        reps = reps < 5 ? 5 : reps > 5000 ? 5000 : reps;
    }
    double *ms = malloc((size_t)reps * sizeof *ms);
    if (!ms) {
        *code = OGK_EXIT_INIT;
        return ogk_fail(e, "out of memory for %ld timings", reps);
    }
    for (long r = 0; r < reps; r++) {
        double t0 = ogk_now();
        launch_all(pool, o, Ws, nw, X, M, Y, e);
        ms[r] = (ogk_now() - t0) * 1e3;
    }
    qsort(ms, (size_t)reps, sizeof *ms, cmp_double);
    double med = reps % 2 ? ms[reps / 2] : 0.5 * (ms[reps / 2 - 1] + ms[reps / 2]);
    *reps_out = reps;
    *min_out = ms[0];
    free(ms);
    return med;
}

kern_check kern_bench_check(const ogk_qtensor *W, const float *X, int M, const float *Y, int mode, long check_rows)
{
    kern_check r = {.ok = 1};
    if (check_rows == 0)
        return r;
    uint32_t N = W->n;
    long want = check_rows < 0 || check_rows >= (long)N ? (long)N : check_rows;
    float *ref = malloc((size_t)M * N * sizeof *ref), *ref32 = NULL;
    if (mode == KERN_I8)
        ref32 = malloc((size_t)M * N * sizeof *ref32);
    if (!ref || (mode == KERN_I8 && !ref32)) {
        free(ref), free(ref32);
        r.ok = 0; /* cannot check: not a pass */
        return r;
    }
    for (long i = 0; i < want; i++) {
        uint32_t n = want == (long)N ? (uint32_t)i : (uint32_t)((double)i * (N - 1) / (want - 1 > 0 ? want - 1 : 1));
        kern_ref_rows(W, X, M, ref, mode, n, n + 1);
        if (ref32)
            kern_ref_rows(W, X, M, ref32, KERN_F32, n, n + 1);
        for (int m = 0; m < M; m++) {
            size_t at = (size_t)m * N + n;
            double d = fabs((double)Y[at] - ref[at]);
            double bound = kern_ref_bound(W, X + (size_t)m * W->k, n, mode);
            if (!(d <= bound))
                r.ok = 0;
            r.worst_ratio = fmax(r.worst_ratio, d / bound);
            r.max_abs = fmax(r.max_abs, d);
            r.max_ref = fmax(r.max_ref, fabs(ref[at]));
            if (ref32)
                r.i8_abs = fmax(r.i8_abs, fabs((double)Y[at] - ref32[at]));
        }
        r.rows++;
    }
    if (ref32) {
        r.max_ref = 0; /* relative i8 error against the exact product's scale */
        for (long i = 0; i < want; i++) {
            uint32_t n =
                want == (long)N ? (uint32_t)i : (uint32_t)((double)i * (N - 1) / (want - 1 > 0 ? want - 1 : 1));
            for (int m = 0; m < M; m++)
                r.max_ref = fmax(r.max_ref, fabs(ref32[(size_t)m * N + n]));
        }
    }
    free(ref), free(ref32);
    return r;
}

json_t *kern_bench_one(kern_pool *pool, const kern_bench_opts *o, const ogk_qtensor *W, const float *X, int M,
                       float *Y, int *all_ok, ogk_error *e, int *code)
{
    long reps;
    double mn;
    double ms = time_launches(pool, o, &W, 1, X, M, Y, &reps, &mn, e, code);
    if (ms < 0)
        return NULL;
    kern_check c = kern_bench_check(W, X, M, Y, o->mode, o->check_rows);
    if (!c.ok)
        *all_ok = 0;
    size_t bytes = kern_tensor_bytes(W);
    json_t *j = json_object();
    result_head(j, o->mode);
    json_object_set_new(j, "tensor", json_string(W->name ? W->name : ""));
    if (W->role)
        json_object_set_new(j, "role", json_string(W->role));
    json_object_set_new(j, "bits", json_integer(ogk_dtype_bits(W->dtype)));
    json_object_set_new(j, "layout", json_string(ogk_layout_name(W->layout)));
    json_object_set_new(j, "M", json_integer(M));
    json_object_set_new(j, "N", json_integer(W->n));
    json_object_set_new(j, "K", json_integer(W->k));
    json_object_set_new(j, "block", json_integer(W->block));
    json_object_set_new(j, "scale_dtype", json_string(ogk_dtype_name(W->scale_dtype)));
    json_object_set_new(j, "zero_points", json_boolean(W->has_zp));
    result_timing(j, pool, reps, ms, mn, bytes);
    json_object_set_new(j, "GFLOPs", json_real(2.0 * M * W->n * W->k / (ms * 1e-3) / 1e9));
    json_object_set_new(j, "checked_rows", json_integer(c.rows));
    if (c.rows) {
        json_object_set_new(j, "max_rel_err", json_real(c.max_ref > 0 ? c.max_abs / c.max_ref : c.max_abs));
        json_object_set_new(j, "err_vs_bound", json_real(c.worst_ratio));
        json_object_set_new(j, "within_bound", json_boolean(c.ok));
        if (o->mode == KERN_I8)
            json_object_set_new(j, "i8_vs_f32_rel_err", json_real(c.max_ref > 0 ? c.i8_abs / c.max_ref : c.i8_abs));
    }
    return j;
}

json_t *kern_bench_pass(kern_pool *pool, const kern_bench_opts *o, const ogk_qtensor *const *Ws, size_t nw, int M,
                        uint64_t *rng, int *all_ok, ogk_error *e, int *code)
{
    uint32_t kmax = 0, nmax = 0;
    size_t bytes = 0;
    for (size_t i = 0; i < nw; i++) {
        kmax = Ws[i]->k > kmax ? Ws[i]->k : kmax;
        nmax = Ws[i]->n > nmax ? Ws[i]->n : nmax;
        bytes += kern_tensor_bytes(Ws[i]);
    }
    float *X = kern_synth_x(rng, M, kmax), *Y = malloc((size_t)M * nmax * sizeof *Y);
    json_t *j = NULL;
    double *t = NULL, *g = NULL, *q = NULL;
    kern_bw_probe *bp = NULL;
    *code = OGK_EXIT_INIT;
    if (!X || !Y) {
        ogk_fail(e, "out of memory for %d x %u activations", M, kmax);
        goto out;
    }
    long reps;
    double mn, ms, probe_gbs = 0, ratio = 0;
    if (o->probe_mb > 0) {
        /* probe pass, model pass, probe pass, ...: medians of each and of the pass-by-pass ratio */
        bp = o->probe_mem ? kern_bw_probe_over(o->probe_mem, o->probe_len) : kern_bw_probe_new((size_t)o->probe_mb << 20);
        if (!bp) {
            ogk_fail(e, "out of memory for a %ld MB probe buffer", o->probe_mb);
            goto out;
        }
        *code = OGK_EXIT_INPUT;
        if (launch_all(pool, o, Ws, nw, X, M, Y, e) < 0)
            goto out;
        kern_bw_probe_pass(pool, bp);
        reps = o->reps > 0 ? o->reps : 9;
        t = malloc((size_t)reps * sizeof *t), g = malloc((size_t)reps * sizeof *g), q = malloc((size_t)reps * sizeof *q);
        if (!t || !g || !q) {
            *code = OGK_EXIT_INIT;
            ogk_fail(e, "out of memory for %ld timings", reps);
            goto out;
        }
        for (long r = 0; r < reps; r++) {
            g[r] = kern_bw_probe_pass(pool, bp);
            double t0 = ogk_now();
            launch_all(pool, o, Ws, nw, X, M, Y, e);
            t[r] = (ogk_now() - t0) * 1e3;
            q[r] = bytes / (t[r] * 1e-3) / 1e9 / g[r];
        }
        qsort(t, (size_t)reps, sizeof *t, cmp_double);
        qsort(g, (size_t)reps, sizeof *g, cmp_double);
        qsort(q, (size_t)reps, sizeof *q, cmp_double);
        ms = t[reps / 2], mn = t[0], probe_gbs = g[reps / 2], ratio = q[reps / 2];
    } else if ((ms = time_launches(pool, o, Ws, nw, X, M, Y, &reps, &mn, e, code)) < 0) {
        goto out;
    }
    /* check the last tensor (its output is still in Y) and one of every distinct shape */
    long checked = 0;
    double worst = 0;
    for (size_t i = 0; i < nw && o->check_rows; i++) {
        int seen = 0;
        for (size_t k = 0; k < i && !seen; k++)
            seen = Ws[k]->n == Ws[i]->n && Ws[k]->k == Ws[i]->k;
        if (seen)
            continue;
        launch_all(pool, o, Ws + i, 1, X, M, Y, e);
        kern_check c = kern_bench_check(Ws[i], X, M, Y, o->mode, o->check_rows);
        checked += c.rows;
        worst = fmax(worst, c.worst_ratio);
        if (!c.ok)
            *all_ok = 0;
    }
    j = json_object();
    result_head(j, o->mode);
    json_object_set_new(j, "tensors", json_integer((json_int_t)nw));
    json_object_set_new(j, "M", json_integer(M));
    result_timing(j, pool, reps, ms, mn, bytes);
    if (o->probe_mb > 0) {
        json_object_set_new(j, "dram_read_GBps", json_real(probe_gbs));
        json_object_set_new(j, "fraction_of_dram", json_real(ratio));
        json_object_set_new(j, "probe_MB",
                            json_integer(o->probe_mem ? (json_int_t)(o->probe_len >> 20) : (json_int_t)o->probe_mb));
        json_object_set_new(j, "probe_memory", json_string(o->probe_mem ? "container" : "buffer"));
    }
    json_object_set_new(j, "checked_rows", json_integer(checked));
    json_object_set_new(j, "err_vs_bound", json_real(worst));
    json_object_set_new(j, "within_bound", json_boolean(*all_ok));
out:
    free(t), free(g), free(q);
    kern_bw_probe_free(bp);
    free(X), free(Y);
    return j;
}

/* ---- the CPU ---- */
json_t *kern_bench_cpu(kern_pool *pool, long bw_mb)
{
    json_t *j = json_object();
    json_object_set_new(j, "type", json_string("cpu"));
    json_object_set_new(j, "name", json_string(kern_cpu_name()));
    json_t *feat = json_array();
    const char *name;
    int has;
    for (int i = 0; (name = kern_cpu_feature(i, &has)); i++)
        if (has)
            json_array_append_new(feat, json_string(name));
    json_object_set_new(j, "features", feat);
    json_object_set_new(j, "kernel", json_string(kern_isa_current()->name));
    json_object_set_new(j, "threads", json_integer(kern_pool_threads(pool)));
    double bw = kern_read_bandwidth(pool, (size_t)bw_mb << 20, 7);
    json_object_set_new(j, "dram_read_GBps", bw > 0 ? json_real(bw) : json_null());
    json_object_set_new(j, "bw_probe_MB", json_integer(bw_mb));
    return j;
}
