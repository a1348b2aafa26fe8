/* The exactness check of a GGUF against its container: every converted tensor's every value, the
 * container side dequantised by lib/util (ogk_quant_dequant_row, the MatMulNBits formula), the GGUF side
 * by reader.c's block decoders; the plan only says which rows pair up. Then the controls: the same
 * comparison with a deliberate decoding mistake must find mismatches, or the check proved nothing. */
#define _GNU_SOURCE
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gguf_int.h"

typedef struct {
    uint64_t values, mismatched;
    uint32_t row, col; /* first mismatch */
    float want, got;
} tally;

/* a value in the report: a number, or "nan" / "inf" / "-inf" (JSON has no such numbers: jansson refuses
 * them, and the mismatch that holds one would be left out) */
static json_t *num_json(float x)
{
    return isfinite(x) ? json_real(x) : json_string(isnan(x) ? "nan" : x > 0 ? "inf" : "-inf");
}

/* compare rows [0, rows) of a plan entry, with a GGUF decoding control; stops at the first mismatch
 * when stop_early (controls only need to know one exists) */
static int compare(const gguf_plan *p, const gguf_tensor *g, int control, int stop_early, tally *t, ogk_error *e)
{
    float *a = malloc((size_t)p->k * sizeof *a), *b = malloc((size_t)p->k * sizeof *b);
    if (!a || !b) {
        free(a), free(b);
        return ogk_fail(e, "out of memory");
    }
    for (uint32_t r = 0; r < p->nrows; r++) {
        uint32_t sr;
        const ogk_qtensor *src = gguf_plan_row(p, r, &sr);
        if (p->kind == GPLAN_Q)
            ogk_quant_dequant_row(src, sr, a);
        else if (p->transposed)
            gguf_plain_col(src, sr, p->k, p->nrows, a);
        else
            gguf_plain_row(src, sr, p->k, a);
        if (gguf_dequant_row(g, r, b, control)) {
            free(a), free(b);
            return ogk_fail(e, "tensor %s: type %d cannot be read", g->name, g->type);
        }
        for (uint32_t c = 0; c < p->k; c++) {
            t->values++;
            if (!(a[c] == b[c])) { /* as numbers: +0 equals -0, NaN equals nothing */
                if (!t->mismatched++)
                    t->row = sr, t->col = c, t->want = a[c], t->got = b[c];
            }
        }
        if (stop_early && t->mismatched)
            break;
    }
    free(a), free(b);
    return 0;
}

/* rope_freqs, rope_factors_short / _long (derived, not copied): llama.cpp's rotation of every row p and pair i
 * of the container's caches, angle p·theta^(-i/half) / divisor[i] (ignore: the divisors ignored, the
 * control) and magnitude mag (1, or LongRoPE's rope.scaling.attn_factor), against the caches' own, within a
 * few float32 roundings. The number of (row, pair) rotations off, or -1. */
static long rope_off(const gguf_plan *p, const gguf_tensor *g, int ignore, double mag, double *max_err, ogk_error *e)
{
    const ogk_qtensor *cs = p->seg[0].t, *sn = p->seg[1].t;
    uint64_t rows = cs->shape[0] < sn->shape[0] ? cs->shape[0] : sn->shape[0];
    float *div = malloc(3 * (size_t)p->k * sizeof *div), *c = div ? div + p->k : NULL, *s = c ? c + p->k : NULL;
    if (!div)
        return ogk_fail(e, "out of memory");
    if (gguf_dequant_row(g, 0, div, GGUF_CTRL_NONE)) {
        free(div);
        return ogk_fail(e, "tensor %s: type %d cannot be read", g->name, g->type);
    }
    long off = 0;
    *max_err = 0;
    for (uint64_t r = 0; r < rows; r++) {
        gguf_plain_row(cs, (uint32_t)r, p->k, c);
        gguf_plain_row(sn, (uint32_t)r, p->k, s);
        for (uint32_t i = 0; i < p->k; i++) {
            double want = (double)r * pow(p->rope_theta, -(double)i / p->k) / (ignore ? 1.0 : div[i]);
            double d = fabs(remainder(atan2(s[i], c[i]) - want, 2 * M_PI));
            if (d > *max_err)
                *max_err = d;
            off += d > 2e-3 + 5e-7 * fabs(want) || !(fabs(hypot(c[i], s[i]) - mag) <= 1e-2 * mag);
        }
    }
    free(div);
    return off;
}

/* every key/value the conversion writes, against the GGUF's (general.name is the user's; a key of the GGUF the
 * conversion does not write, beyond general.*, counts as a difference too): arrays compared byte for byte.
 * Each difference is appended to bad as {key, container, gguf}; -1 with e filled when the expected keys
 * cannot be made. */
static int compare_meta(const q4nx_file *f, const char *arch, const gguf_file *g, json_t *bad, size_t *nkeys,
                        ogk_error *e)
{
    gguf_file *x = gguf_expected_meta(f, arch, e);
    if (!x)
        return -1;
    const json_t *want = gguf_meta(x), *got = gguf_meta(g), *v;
    const char *k;
    *nkeys = 0;
    json_object_foreach((json_t *)want, k, v)
    {
        if (!strcmp(k, "general.name"))
            continue;
        ++*nkeys;
        const json_t *h = json_object_get(got, k);
        int same = h && json_equal(v, h);
        int et, et2;
        uint64_t n, n2;
        const uint8_t *p, *p2;
        size_t nb, nb2;
        if (same && !gguf_meta_arr_raw(x, k, &et, &n, &p, &nb))
            same = !gguf_meta_arr_raw(g, k, &et2, &n2, &p2, &nb2) && et == et2 && n == n2 && nb == nb2 &&
                   !memcmp(p, p2, nb);
        if (!same)
            json_array_append_new(bad, json_pack("{s:s,s:O,s:O?}", "key", k, "container", v, "gguf", h));
    }
    json_object_foreach((json_t *)got, k, v) if (strncmp(k, "general.", 8) && !json_object_get(want, k))
        json_array_append_new(bad, json_pack("{s:s,s:n,s:O}", "key", k, "container", "gguf", v));
    gguf_close(x);
    return 0;
}

int gguf_check_q4nx(const q4nx_file *f, const gguf_file *g, json_t **report, ogk_error *e, int *code)
{
    *code = OGK_EXIT_INPUT;
    *report = NULL;
    size_t n;
    const char *plan_arch;
    gguf_plan *plan = gguf_make_plan(f, &n, &plan_arch, e, code);
    if (!plan)
        return -1;
    int rc = -1;
    json_t *bad = json_array(), *controls = json_array();
    uint64_t values = 0, identical = 0;
    size_t tensors = 0;
    /* the first tensor of each type is where that type's controls run */
    const gguf_plan *first[16] = {0};
    const gguf_tensor *firstg[16] = {0};
    json_t *rope = json_object(); /* per divisor table: the rotations it gives against the caches */
    int rope_ok = 1;
    /* LongRoPE's magnitude: the GGUF's own key (a missing one is 1, as llama.cpp takes it) */
    const char *arch = json_string_value(json_object_get(gguf_meta(g), "general.architecture"));
    char key[96];
    snprintf(key, sizeof key, "%s.rope.scaling.attn_factor", arch ? arch : "?");
    const json_t *af = json_object_get(gguf_meta(g), key);
    double mag = json_is_number(af) ? json_number_value(af) : 1.0;
    /* the rotations llama.cpp computes: from the GGUF's own base (the plan's is the container's) */
    snprintf(key, sizeof key, "%s.rope.freq_base", arch ? arch : "?");
    const json_t *fb = json_object_get(gguf_meta(g), key);
    for (size_t i = 0; i < n && json_is_number(fb); i++)
        if (plan[i].kind == GPLAN_ROPE)
            plan[i].rope_theta = json_number_value(fb);
    json_t *meta_bad = json_array();
    size_t meta_keys = 0;
    if (compare_meta(f, plan_arch, g, meta_bad, &meta_keys, e)) {
        json_decref(meta_bad);
        free(plan);
        json_decref(rope);
        json_decref(bad);
        json_decref(controls);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        const gguf_plan *p = &plan[i];
        const gguf_tensor *t = gguf_find(g, p->name);
        if (!t) {
            ogk_fail(e, "tensor %s: not in the GGUF (it holds %s of the container)", p->name, p->from);
            goto out;
        }
        if (p->kind == GPLAN_ROPE) {
            double err, err0;
            long off, off0;
            if (t->ndim != 1 || t->ne[0] != p->k || (off = rope_off(p, t, 0, mag, &err, e)) < 0 ||
                (off0 = rope_off(p, t, 1, mag, &err0, e)) < 0) {
                if (t->ndim != 1 || t->ne[0] != p->k)
                    ogk_fail(e, "tensor %s: not a vector of %u", p->name, p->k);
                goto out;
            }
            rope_ok &= off == 0 && off0 > 0; /* and the control (the divisors ignored) must be off somewhere */
            char k[80];
            snprintf(k, sizeof k, "%.*s", (int)(strcspn(p->name, ".")), p->name); /* rope_freqs, rope_factors_long */
            json_object_set_new(rope, k, json_pack("{s:s,s:I,s:f,s:f,s:b}", "tensor", p->name, "rotations_off",
                                                   (json_int_t)off, "max_err_rad", err, "magnitude", mag,
                                                   "control_caught", off0 > 0));
            tensors++;
            continue;
        }
        uint64_t rows = 1;
        for (int d = 1; d < t->ndim; d++)
            rows *= t->ne[d];
        if (t->ne[0] != p->k || rows != p->nrows) {
            ogk_fail(e, "tensor %s: shape [%llu x %llu], the container gives [%u x %u]", p->name,
                     (unsigned long long)t->ne[0], (unsigned long long)rows, p->k, p->nrows);
            goto out;
        }
        tally ty = {0};
        if (compare(p, t, GGUF_CTRL_NONE, 0, &ty, e))
            goto out;
        tensors++;
        values += ty.values;
        identical += ty.values - ty.mismatched;
        if (ty.mismatched)
            json_array_append_new(bad, json_pack("{s:s,s:s,s:s,s:I,s:I,s:{s:i,s:i,s:o,s:o}}", "name", p->name, "from",
                                                 p->from, "type", gguf_type_name(t->type), "values", (json_int_t)ty.values,
                                                 "mismatched", (json_int_t)ty.mismatched, "first", "row", (int)ty.row,
                                                 "col", (int)ty.col, "container", num_json(ty.want), "gguf",
                                                 num_json(ty.got)));
        if (t->type >= 0 && t->type < 16 && (!first[t->type] || (first[t->type]->ndim != 2 && p->ndim == 2)))
            first[t->type] = p, firstg[t->type] = t;
    }
    if (gguf_tensor_count(g) != n) {
        ogk_fail(e, "the GGUF holds %zu tensors, the container converts to %zu", gguf_tensor_count(g), n);
        goto out;
    }
    /* controls: decoding mistakes that a working comparison must notice */
    static const struct {
        int type, control;
        const char *what;
    } ctl[] = {
        {GGML_Q4_0, GGUF_CTRL_NIBBLES, "Q4_0 read in MatMulNBits nibble order"},
        {GGML_Q4_0, GGUF_CTRL_M_SIGN, "Q4_0 with +8 for -8"},
        {GGML_Q4_1, GGUF_CTRL_NIBBLES, "Q4_1 read in MatMulNBits nibble order"},
        {GGML_Q4_1, GGUF_CTRL_M_SIGN, "Q4_1 with the minimum's sign flipped"},
        {GGML_Q8_0, GGUF_CTRL_REVERSE, "Q8_0 blocks reversed"},
        {GGML_F32, GGUF_CTRL_REVERSE, "F32 blocks reversed"},
        {GGML_F16, GGUF_CTRL_REVERSE, "F16 blocks reversed"},
    };
    int all_caught = 1, ran = 0;
    for (size_t c = 0; c < sizeof ctl / sizeof *ctl; c++) {
        const gguf_plan *p = first[ctl[c].type];
        if (!p || ((ctl[c].type == GGML_F32 || ctl[c].type == GGML_F16) && (p->ndim != 2 || p->k < 32)))
            continue;
        tally ty = {0};
        if (compare(p, firstg[ctl[c].type], ctl[c].control, 1, &ty, e))
            goto out;
        ran++;
        all_caught &= ty.mismatched > 0;
        json_array_append_new(controls, json_pack("{s:s,s:s,s:b}", "control", ctl[c].what, "tensor", p->name,
                                                  "caught", ty.mismatched > 0));
    }
    int vacuous = !ran || !all_caught;
    int ok = identical == values && values > 0 && !vacuous && rope_ok && json_array_size(meta_bad) == 0;
    *report = json_pack("{s:b,s:I,s:I,s:I,s:f,s:o,s:o,s:b}", "ok", ok, "tensors", (json_int_t)tensors, "values",
                        (json_int_t)values, "identical", (json_int_t)identical, "percent",
                        values ? 100.0 * (double)identical / (double)values : 0.0, "mismatched", bad, "controls",
                        controls, "vacuous", vacuous);
    json_object_update(*report, rope); /* "rope_freqs": {...}, "rope_factors_short": {...}, ... */
    json_object_set_new(*report, "metadata", json_pack("{s:I,s:o}", "keys", (json_int_t)meta_keys, "mismatched",
                                                       meta_bad));
    meta_bad = NULL;
    bad = controls = NULL;
    rc = ok ? 0 : 1;
out:
    json_decref(meta_bad);
    json_decref(rope);
    json_decref(bad);
    json_decref(controls);
    free(plan);
    return rc;
}
