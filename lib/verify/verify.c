/* The verify oracle (q4nx-verify): see verify.h. */
#define _GNU_SOURCE
#include "verify.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "kern/kern.h"
#include "onnx/onnx.pb-c.h"

/* ---------- statistics of one comparison ---------- */
typedef struct {
    uint64_t groups, exact, elems;
    double sa, sb, saa, sbb, sab, sdd, sbb_ref;
    double maxdiff;
} cmpstat;

/* Compares one row of K values group by group (container a, reference b). With full == 0 only the
 * exact-group count is kept (the fast pass); full == 1 also accumulates the value statistics. */
static void cmp_row(cmpstat *st, const float *a, const float *b, uint32_t k, uint32_t block, int full)
{
    for (uint32_t c0 = 0; c0 < k; c0 += block) {
        uint32_t n = c0 + block <= k ? block : k - c0;
        const float *x = a + c0, *y = b + c0;
        st->groups++;
        st->elems += n;
        int same = !memcmp(x, y, n * sizeof(float));
        st->exact += same;
        if (!full)
            continue;
        for (uint32_t i = 0; i < n; i++) {
            double p = x[i], q = y[i], d = fabs(p - q);
            st->sa += p, st->sb += q, st->saa += p * p, st->sbb += q * q, st->sab += p * q, st->sdd += (p - q) * (p - q);
            if (d > st->maxdiff || d != d)
                st->maxdiff = d;
        }
    }
}

static json_t *jnum(double v) { return isfinite(v) ? json_real(v) : json_null(); }

/* When every group is bit-identical the two sides are the same vector: corr 1, rel_err 0, max |diff| 0
 * by definition. Otherwise the statistics come from a full pass (cmp_row with full = 1). */
static json_t *stat_json(const cmpstat *st)
{
    double corr = 1.0, rel = 0.0, maxd = 0.0;
    if (st->exact != st->groups) {
        double n = (double)st->elems;
        double cov = st->sab - st->sa * st->sb / n, va = st->saa - st->sa * st->sa / n, vb = st->sbb - st->sb * st->sb / n;
        corr = (va > 0 && vb > 0) ? cov / sqrt(va * vb) : NAN;
        rel = st->sbb > 0 ? sqrt(st->sdd / st->sbb) : INFINITY;
        maxd = st->maxdiff;
    }
    return json_pack("{s:I,s:I,s:o,s:o,s:o,s:o}", "groups", (json_int_t)st->groups, "exact_groups",
                     (json_int_t)st->exact, "exact_groups_pct",
                     jnum(st->groups ? 100.0 * (double)st->exact / (double)st->groups : 0), "corr", jnum(corr),
                     "rel_err", jnum(rel), "max_abs_diff", jnum(maxd));
}

/* ---------- the pack side: MatMulNBits, written out from the operator's definition ---------- */
typedef struct {
    const uint8_t *b;     /* B: uint8 [N][k_blocks][block*bits/8]; 4 bits: first value in the low nibble */
    const uint8_t *s;     /* scales [N * k_blocks], sdt */
    const uint8_t *zp;    /* 4 bits: packed uint8 [N][ceil(k_blocks/2)], block j in nibble j%2; 8 bits: uint8
                           * [N][k_blocks]; NULL: 2^(bits-1) */
    int sdt;
    uint32_t n, k, block, kb;
    int bits; /* 4 or 8 */
} matmulnbits;

enum { CTRL_NONE = 0, CTRL_SWAP = 1, CTRL_NOZP = 2 };

static float read_scale(const matmulnbits *m, size_t i)
{
    if (m->sdt == OGK_F32) {
        float f;
        memcpy(&f, m->s + 4 * i, 4);
        return f;
    }
    uint16_t h = (uint16_t)(m->s[2 * i] | m->s[2 * i + 1] << 8);
    return m->sdt == OGK_F16 ? ogk_f16_to_f32(h) : ogk_bf16_to_f32(h);
}

/* One block of n values, packed two per byte with the first value in the low nibble (both
 * MatMulNBits and GatherBlockQuantized store 4-bit data this way): o[j] = (q_j - zp) * scale. With
 * swap the nibbles are read the wrong way round (the control). Plain C, a byte (two values) per step:
 * independent of lib/kern's dequantisers, which it checks. */
static void decode_block(const uint8_t *q, uint32_t n, int zp, float scale, int swap, float *o)
{
    int lo_shift = swap ? 4 : 0, hi_shift = swap ? 0 : 4;
    uint32_t j = 0;
    for (; j + 2 <= n; j += 2) {
        o[j] = (float)(((q[j / 2] >> lo_shift) & 0x0F) - zp) * scale;
        o[j + 1] = (float)(((q[j / 2] >> hi_shift) & 0x0F) - zp) * scale;
    }
    if (j < n)
        o[j] = (float)(((q[j / 2] >> lo_shift) & 0x0F) - zp) * scale;
}

/* W[k, row] for k in [0, K): (q - zp) * scale, block by block. */
/* One block of n 8-bit values, one a byte: o[j] = (q_j - zp) * scale. With as_signed the bytes are read as
 * int8 (the control: a repack that took the codes for signed ones). */
static void decode_block8(const uint8_t *q, uint32_t n, int zp, float scale, int as_signed, float *o)
{
    for (uint32_t j = 0; j < n; j++)
        o[j] = (float)((as_signed ? (int)(int8_t)q[j] : (int)q[j]) - zp) * scale;
}

static void mnb_row(const matmulnbits *m, uint32_t row, int control, float *out)
{
    if (m->bits == 8) {
        for (uint32_t blk = 0; blk < m->kb; blk++) {
            size_t gi = (size_t)row * m->kb + blk;
            int zp = control == CTRL_NOZP ? 0 : m->zp ? m->zp[gi] : 128;
            uint32_t n = m->k - blk * m->block < m->block ? m->k - blk * m->block : m->block;
            decode_block8(m->b + gi * m->block, n, zp, read_scale(m, gi), control == CTRL_SWAP,
                          out + (size_t)blk * m->block);
        }
        return;
    }
    size_t blob = m->block / 2, zrow = (m->kb + 1) / 2;
    for (uint32_t blk = 0; blk < m->kb; blk++) {
        float scale = read_scale(m, (size_t)row * m->kb + blk);
        int zp = 8;
        if (m->zp)
            zp = (m->zp[row * zrow + blk / 2] >> (blk % 2 ? 4 : 0)) & 0x0F;
        if (control == CTRL_NOZP)
            zp = 0;
        uint32_t n = m->k - blk * m->block < m->block ? m->k - blk * m->block : m->block;
        decode_block(m->b + ((size_t)row * m->kb + blk) * blob, n, zp, scale, control == CTRL_SWAP,
                     out + (size_t)blk * m->block);
    }
}

/* ---------- reporting failures ---------- */
static json_t *failures; /* one list per verify_begin .. verify_end */
static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    json_array_append_new(failures, json_string(buf));
}

static const char *hex32(uint32_t v, char *b)
{
    snprintf(b, 12, "%08x", v);
    return b;
}

/* ---------- container-only checks ---------- */
/* The scales of a quantised tensor that are not finite numbers (NaN, an infinity): 0 when none; else their
 * count over rows [0, N) (the layouts' padding rows, whose scales are 0, are not the model's) and the first
 * one's row, group and value. A code times such a scale is no weight: the pack was broken before it was
 * packed, or the container since (checksums recomputed). A pass over the stored scales in storage order
 * (all exponent bits set) first; the rows are walked only when it finds one. */
static uint64_t nonfinite_scales(const ogk_qtensor *t, uint32_t *row, uint32_t *group, float *val)
{
    size_t ng = ogk_quant_groups(&t->desc), es = ogk_dtype_size(t->scale_dtype), any = 0;
    const uint8_t *sb = t->scales;
    for (size_t i = 0; i < ng && !any; i++) {
        if (es == 4) {
            uint32_t u;
            memcpy(&u, sb + 4 * i, 4);
            any = (u & 0x7F800000u) == 0x7F800000u;
        } else {
            uint16_t h = (uint16_t)(sb[2 * i] | sb[2 * i + 1] << 8);
            any = t->scale_dtype == OGK_F16 ? (h & 0x7C00) == 0x7C00 : (h & 0x7F80) == 0x7F80;
        }
    }
    uint64_t bad = 0;
    for (uint32_t r = 0; any && r < t->n; r++)
        for (uint32_t g = 0; g < t->k_blocks; g++) {
            float s = t->dtype == OGK_Q8 ? ogk_q8_scale(t, r, g) : ogk_q4_scale(t, r, g);
            if (!isfinite(s) && !bad++)
                *row = r, *group = g, *val = s;
        }
    if (any && !bad) /* only in the padding rows, whose scales are 0 */
        *row = UINT32_MAX;
    return any && !bad ? 1 : bad;
}

typedef struct {
    uint64_t off, size;
} span;

static int span_cmp(const void *a, const void *b)
{
    const span *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

json_t *verify_container(const char *path, q4nx_file *f, uint64_t *bytes_checked)
{
    size_t fails0 = json_array_size(failures);
    char h1[12], h2[12];
    const uint8_t *mb;
    size_t ml;
    uint32_t mc;
    q4nx_meta_bytes(f, &mb, &ml, &mc);
    uint32_t got = ogk_crc32c(0, mb, ml);
    int meta_ok = got == mc;
    if (!meta_ok)
        fail("%s: metadata checksum mismatch (stored %s, computed %s)", path, hex32(mc, h1), hex32(got, h2));
    size_t bad_assets = 0, bad_tensors = 0, bad_padding = 0, bad_scales = 0;
    for (size_t i = 0; i < q4nx_asset_count(f); i++) {
        const char *name;
        const uint8_t *d;
        size_t n;
        uint32_t c;
        q4nx_asset_at(f, i, &name, &d, &n, &c);
        if ((got = ogk_crc32c(0, d, n)) != c) {
            bad_assets++;
            fail("%s: asset %s: checksum mismatch (stored %s, computed %s)", path, name, hex32(c, h1), hex32(got, h2));
        }
    }
    uint64_t total = 0;
    for (size_t i = 0; i < q4nx_tensor_count(f); i++) {
        const ogk_qtensor *t = q4nx_tensor_at(f, i);
        q4nx_extent x;
        q4nx_tensor_extent(f, i, &x);
        total += x.size;
        if ((got = ogk_crc32c(0, x.bytes, x.size)) != x.crc32c) {
            bad_tensors++;
            fail("%s: tensor %s (role %s): checksum mismatch (stored %s, computed %s)", path, t->name, t->role,
                 hex32(x.crc32c, h1), hex32(got, h2));
        }
        if (ogk_dtype_quantised(t->dtype)) {
            /* the gaps between codes, scales and zero points are zero */
            uint64_t cb = ogk_quant_codes_bytes(&t->desc);
            uint64_t se = x.scales_off + ogk_quant_groups(&t->desc) * ogk_dtype_size(t->scale_dtype);
            int ok = 1;
            for (uint64_t j = cb; j < x.scales_off; j++)
                ok &= x.bytes[j] == 0;
            for (uint64_t j = se; x.zeros_off && j < x.zeros_off; j++)
                ok &= x.bytes[j] == 0;
            if (!ok) {
                bad_padding++;
                fail("%s: tensor %s (role %s): padding between its parts is not zero", path, t->name, t->role);
            }
            uint32_t r = 0, g = 0;
            float v = 0;
            uint64_t nf = nonfinite_scales(t, &r, &g, &v);
            if (nf && r == UINT32_MAX) {
                bad_scales++;
                fail("%s: tensor %s (role %s): a scale of its padding rows (rows %u and up, scale 0) is not finite", path,
                     t->name, t->role, t->n);
            } else if (nf) {
                bad_scales++;
                fail("%s: tensor %s (role %s): %" PRIu64 " of %" PRIu64 " scales are not finite; the first: row %u, "
                     "group %u (columns %u..%u): %g",
                     path, t->name, t->role, nf, (uint64_t)t->n * t->k_blocks, r, g, g * t->block,
                     (g + 1) * t->block < t->k ? (g + 1) * t->block - 1 : t->k - 1, (double)v);
            }
        }
    }
    /* every byte of the data region outside tensors and assets is alignment padding: zero */
    size_t nsp = q4nx_tensor_count(f) + q4nx_asset_count(f);
    span *sp = calloc(nsp + 1, sizeof *sp);
    const uint8_t *base = q4nx_file_bytes(f);
    for (size_t i = 0; i < q4nx_tensor_count(f); i++) {
        q4nx_extent x;
        q4nx_tensor_extent(f, i, &x);
        sp[i] = (span){x.offset, x.size};
    }
    for (size_t i = 0; i < q4nx_asset_count(f); i++) {
        const char *name;
        const uint8_t *d;
        size_t n;
        uint32_t c;
        q4nx_asset_at(f, i, &name, &d, &n, &c);
        sp[q4nx_tensor_count(f) + i] = (span){(uint64_t)(d - base), n};
    }
    qsort(sp, nsp, sizeof *sp, span_cmp);
    uint64_t at = Q4NX_HEADER_SIZE, gap_bad = 0;
    for (size_t i = 0; i <= nsp; i++) {
        uint64_t end = i < nsp ? sp[i].off : (uint64_t)(mb - base);
        for (uint64_t j = at; j < end; j++)
            gap_bad += base[j] != 0;
        if (i < nsp)
            at = sp[i].off + sp[i].size;
    }
    free(sp);
    if (gap_bad) {
        bad_padding++;
        fail("%s: %" PRIu64 " bytes of alignment padding between tensors are not zero", path, gap_bad);
    }
    *bytes_checked += total;
    const json_t *meta = q4nx_meta(f);
    json_t *q = json_object_get(meta, "q4nx");
    /* the metadata's own account of the container against its tables (a consistent edit of one passes the
     * checksums) */
    const json_t *qt = json_object_get(q, "tensors"), *qa = json_object_get(q, "assets"), *ql = json_object_get(q, "layout");
    if (!json_is_integer(qt) || json_integer_value(qt) != (json_int_t)q4nx_tensor_count(f) || !json_is_integer(qa) ||
        json_integer_value(qa) != (json_int_t)q4nx_asset_count(f) || !json_is_string(ql) ||
        strcmp(json_string_value(ql), ogk_layout_name(q4nx_layout(f))))
        fail("%s: the metadata's q4nx {tensors, assets, layout} do not match the container's tables (%zu, %zu, %s)", path,
             q4nx_tensor_count(f), q4nx_asset_count(f), ogk_layout_name(q4nx_layout(f)));
    char buf[64];
    json_t *r = json_pack("{s:o,s:o,s:o,s:s,s:I,s:I,s:I,s:s,s:s}", "file", ogk_json_str(path), "format_version",
                          json_incref(json_object_get(q, "format_version")), "layout_version",
                          json_incref(json_object_get(q, "layout_version")), "layout", ogk_layout_name(q4nx_layout(f)),
                          "bytes", (json_int_t)q4nx_file_size(f), "tensors", (json_int_t)q4nx_tensor_count(f), "assets",
                          (json_int_t)q4nx_asset_count(f), "structure", "ok", "metadata_checksum",
                          meta_ok ? "ok" : "MISMATCH");
    snprintf(buf, sizeof buf, bad_assets ? "%zu of %zu MISMATCH" : "ok (%zu of %zu)",
             bad_assets ? bad_assets : q4nx_asset_count(f), q4nx_asset_count(f));
    json_object_set_new(r, "asset_checksums", json_string(buf));
    snprintf(buf, sizeof buf, bad_tensors ? "%zu of %zu MISMATCH" : "ok (%zu of %zu)",
             bad_tensors ? bad_tensors : q4nx_tensor_count(f), q4nx_tensor_count(f));
    json_object_set_new(r, "tensor_checksums", json_string(buf));
    json_object_set_new(r, "padding", json_string(bad_padding ? "NOT ZERO" : "ok"));
    snprintf(buf, sizeof buf, "NOT FINITE in %zu tensors", bad_scales);
    json_object_set_new(r, "scales", json_string(bad_scales ? buf : "ok"));
    /* a container of an incomplete stream says so (not a failure of the container itself) */
    json_object_set_new(r, "complete", json_boolean(!json_is_false(json_object_get(meta, "complete"))));
    if (json_is_array(json_object_get(meta, "left_out")))
        json_object_set(r, "left_out", json_object_get(meta, "left_out"));
    json_object_set_new(r, "ok", json_boolean(json_array_size(failures) == fails0));
    return r;
}

/* ---------- row selection ---------- */
/* rows to compare: all (sample 0) or `sample` rows spread evenly, first and last included */
static uint32_t pick_row(uint32_t n, long sample, uint32_t i)
{
    if (sample <= 0 || (uint64_t)sample >= n)
        return i;
    if (sample == 1)
        return 0;
    return (uint32_t)((uint64_t)i * (n - 1) / (uint64_t)(sample - 1));
}
static uint32_t row_count(uint32_t n, long sample) { return (sample <= 0 || (uint64_t)sample >= n) ? n : (uint32_t)sample; }

static float *wa, *wb, *wc;
static size_t wcap;
static int work_bufs(size_t floats)
{
    if (floats > wcap) {
        free(wa), free(wb), free(wc);
        wa = malloc(floats * sizeof(float));
        wb = malloc(floats * sizeof(float));
        wc = malloc(floats * sizeof(float));
        wcap = wa && wb && wc ? floats : 0;
        if (!wcap) {
            free(wa), free(wb), free(wc);
            wa = wb = wc = NULL;
            fail("out of memory for %zu floats of work space", floats);
            return -1;
        }
    }
    return 0;
}

#define WINDOW 64
#define CONTROL_ROWS 8

/* ---------- container vs pack ---------- */
/* GatherBlockQuantized (bits 4, gather_axis 0, quantize_axis 1) for row v: data [V, K/2] uint8 with
 * the first element in the low nibble, row stride `stride` bytes, scales [V, k_blocks], zero points
 * packed [V, ceil(k_blocks/2)] or, for uint8 data, 2^(bits-1) when absent. */
static void gbq_row(const uint8_t *data, size_t stride, const matmulnbits *sc, uint32_t v, float *out)
{
    const uint8_t *row = data + (size_t)v * stride;
    if (sc->bits == 8) { /* uint8 data [V, K], one value a byte, zero points [V, k_blocks] or 128 */
        for (uint32_t blk = 0; blk < sc->kb; blk++) {
            size_t gi = (size_t)v * sc->kb + blk;
            uint32_t k0 = blk * sc->block, k1 = k0 + sc->block < sc->k ? k0 + sc->block : sc->k;
            decode_block8(row + k0, k1 - k0, sc->zp ? sc->zp[gi] : 128, read_scale(sc, gi), 0, out + k0);
        }
        return;
    }
    for (uint32_t blk = 0; blk < sc->kb; blk++) {
        int zp = sc->zp ? (sc->zp[(size_t)v * ((sc->kb + 1) / 2) + blk / 2] >> ((blk & 1) * 4)) & 15 : 8;
        float s = read_scale(sc, (size_t)v * sc->kb + blk);
        uint32_t k0 = blk * sc->block, k1 = k0 + sc->block < sc->k ? k0 + sc->block : sc->k;
        decode_block(row + k0 / 2, k1 - k0, zp, s, 0, out + k0);
    }
}

/* The tied check's reference, set up from the graph by tied_check and evaluated on the lm_head rows
 * compare_q4 has already dequantised (so the container side is decoded once). */
typedef struct {
    int active;
    const uint8_t *data;
    size_t stride;
    matmulnbits sc;
    cmpstat st;
    char *node, *src;
} tiedref;
static tiedref tied;

typedef struct {
    int vacuous;
    uint64_t groups, exact, tensors, qtensors, bytes;
} totals;

/* One control over the tensor's control rows (ncr of them, spread): the container's values against the
 * pack's read wrongly (nibbles swapped, zero points dropped), into cs. 1 when the control changes some
 * value on a row compared; where it changes none of the spread rows, the first row (in order) where it
 * does is compared instead; 0 when it changes no value of the tensor (every scale 0, say). */
static int run_control(const matmulnbits *m, const ogk_qtensor *t, int ctrl, uint32_t ncr, cmpstat *cs)
{
    int applicable = 0;
    for (uint32_t i = 0; i < ncr; i++) {
        uint32_t row = pick_row(t->n, CONTROL_ROWS, i);
        kern_dequant_rows(t, row, 1, wa);
        mnb_row(m, row, ctrl, wb);
        mnb_row(m, row, CTRL_NONE, wc);
        applicable |= memcmp(wb, wc, t->k * sizeof(float)) != 0;
        cmp_row(cs, wa, wb, t->k, t->block, 1);
    }
    for (uint32_t row = 0; !applicable && row < t->n; row++) {
        mnb_row(m, row, ctrl, wb);
        mnb_row(m, row, CTRL_NONE, wc);
        if (memcmp(wb, wc, t->k * sizeof(float))) {
            applicable = 1;
            kern_dequant_rows(t, row, 1, wa);
            cmp_row(cs, wa, wb, t->k, t->block, 1);
        }
    }
    return applicable;
}

static json_t *compare_q4(const char *role, const ogk_qtensor *t, const pack_tensor *p, long sample, totals *tot)
{
    const int bits = ogk_dtype_bits(p->dtype);
    matmulnbits m = {p->codes, p->scales, p->zeros, p->scale_dtype, p->n, p->k, p->block, p->k_blocks, bits};
    size_t ss = ogk_dtype_size(p->scale_dtype);
    if (t->n != p->n || t->k != p->k || t->block != p->block || t->scale_dtype != p->scale_dtype ||
        t->has_zp != (p->zeros != NULL)) {
        fail("tensor %s (role %s): container [%u x %u] block %u %s%s, pack [%u x %u] block %u %s%s", t->name, role,
             t->n, t->k, t->block, ogk_dtype_name(t->scale_dtype), t->has_zp ? " zp" : "", p->n, p->k, p->block,
             ogk_dtype_name(p->scale_dtype), p->zeros ? " zp" : "");
        return NULL;
    }
    uint32_t kb = (p->k + p->block - 1) / p->block;
    if (p->k_blocks != kb || p->codes_size != (uint64_t)p->n * kb * (p->block * (uint32_t)bits / 8) ||
        p->scales_size != (uint64_t)p->n * kb * ss ||
        (p->zeros && p->zeros_size != (uint64_t)p->n * (bits == 8 ? kb : (kb + 1) / 2))) {
        fail("tensor %s (role %s): the pack's initializer sizes contradict [%u x %u] block %u", p->name, role, p->n,
             p->k, p->block);
        return NULL;
    }
    cmpstat st = {0}, c_swap = {0}, c_nozp = {0};
    uint32_t nr = row_count(t->n, sample);
    if (work_bufs((size_t)WINDOW * t->k))
        return NULL;
    for (int full = 0; full < 2; full++) {
        if (full) {
            if (st.exact == st.groups)
                break; /* all identical: nothing more to measure */
            memset(&st, 0, sizeof st);
        }
        int with_tied = !full && tied.active && !strcmp(role, "lm_head");
        if (nr == t->n) {
            for (uint32_t r0 = 0; r0 < t->n; r0 += WINDOW) {
                uint32_t w = t->n - r0 < WINDOW ? t->n - r0 : WINDOW;
                kern_dequant_rows(t, r0, w, wa);
                for (uint32_t r = 0; r < w; r++) {
                    mnb_row(&m, r0 + r, CTRL_NONE, wb);
                    cmp_row(&st, wa + (size_t)r * t->k, wb, t->k, t->block, full);
                    if (with_tied) {
                        gbq_row(tied.data, tied.stride, &tied.sc, r0 + r, wc);
                        cmp_row(&tied.st, wa + (size_t)r * t->k, wc, t->k, t->block, 0);
                    }
                }
            }
        } else {
            for (uint32_t i = 0; i < nr; i++) {
                uint32_t row = pick_row(t->n, sample, i);
                kern_dequant_rows(t, row, 1, wa);
                mnb_row(&m, row, CTRL_NONE, wb);
                cmp_row(&st, wa, wb, t->k, t->block, full);
                if (with_tied) {
                    gbq_row(tied.data, tied.stride, &tied.sc, row, wc);
                    cmp_row(&tied.st, wa, wc, t->k, t->block, 0);
                }
            }
        }
    }
    /* controls on a few rows spread over the tensor */
    uint32_t ncr = row_count(t->n, CONTROL_ROWS);
    int swap_app = run_control(&m, t, CTRL_SWAP, ncr, &c_swap), nozp_app = run_control(&m, t, CTRL_NOZP, ncr, &c_nozp);
    json_t *o = json_pack("{s:s,s:s,s:s,s:[I,I],s:i,s:s,s:s,s:I}", "role", role, "name", t->name, "dtype",
                          ogk_dtype_name(p->dtype), "shape", (json_int_t)t->n, (json_int_t)t->k, "block", (int)t->block,
                          "scale_dtype", ogk_dtype_name(t->scale_dtype), "zero_points",
                          t->has_zp ? (bits == 8 ? "u8" : "u4") : bits == 8 ? "none (128)" : "none (8)", "rows_checked",
                          (json_int_t)nr);
    json_t *sj = stat_json(&st);
    json_object_update(o, sj);
    json_decref(sj);
    /* a control that changes no value of the tensor (every scale 0, say) cannot fail: not applicable, and
     * not a vacuous comparison (the values compared are all the tensor has) */
    int swap_caught = c_swap.exact < c_swap.groups || !swap_app, nozp_caught = c_nozp.exact < c_nozp.groups || !nozp_app;
    json_t *cs = stat_json(&c_swap), *cz = stat_json(&c_nozp);
    static const char *const NA = "not applicable: it changes no value of this tensor (e.g. every scale 0)";
    json_object_set_new(cs, "result", json_string(!swap_app ? NA : swap_caught ? "failed, as it must" : "PASSED: check is vacuous"));
    json_object_set_new(cz, "result", json_string(!nozp_app ? NA : nozp_caught ? "failed, as it must" : "PASSED: check is vacuous"));
    json_object_set_new(o, "controls", json_pack("{s:o,s:o}", bits == 8 ? "codes_read_signed" : "nibbles_swapped", cs,
                                                 "zero_points_dropped", cz));
    int ok = st.exact == st.groups;
    json_object_set_new(o, "ok", json_boolean(ok && swap_caught && nozp_caught));
    if (!ok)
        fail("tensor %s (role %s): %" PRIu64 " of %" PRIu64 " groups differ from the pack (max |diff| %g)", t->name, role,
             st.groups - st.exact, st.groups, st.maxdiff);
    if (!swap_caught || !nozp_caught) {
        tot->vacuous = 1;
        fail("tensor %s (role %s): control \"%s\" still matches: the comparison is vacuous", t->name, role,
             !swap_caught ? (bits == 8 ? "codes read signed" : "nibbles swapped") : "zero points dropped");
    }
    tot->groups += st.groups;
    tot->exact += st.exact;
    tot->qtensors++;
    tot->bytes += p->codes_size + p->scales_size + p->zeros_size;
    return o;
}

static json_t *compare_plain(const char *role, const ogk_qtensor *t, const void *data, uint64_t nbytes, int dtype,
                             int ndim, const uint64_t *shape, const char *other, totals *tot)
{
    int same_shape = ndim == t->ndim && dtype == t->dtype;
    for (int d = 0; same_shape && d < ndim; d++)
        same_shape = shape[d] == t->shape[d];
    int ok = same_shape && nbytes == t->nbytes && !memcmp(data, t->data, nbytes);
    json_t *sh = json_array();
    for (int d = 0; d < t->ndim; d++)
        json_array_append_new(sh, json_integer((json_int_t)t->shape[d]));
    json_t *o = json_pack("{s:s,s:s,s:s,s:o,s:s,s:b}", "role", role, "name", t->name, "dtype", ogk_dtype_name(t->dtype),
                          "shape", sh, "compare", "bytes", "ok", ok);
    if (!same_shape)
        fail("tensor %s (role %s): dtype or shape differs from %s", t->name, role, other);
    else if (!ok)
        fail("tensor %s (role %s): bytes differ from %s", t->name, role, other);
    tot->tensors++;
    tot->bytes += nbytes;
    return o;
}

/* ---------- the tied-embedding check: the graph's embedding lookup reads the lm_head weight ---------- */
static Onnx__NodeProto *producer(Onnx__GraphProto *g, const char *out)
{
    for (size_t i = 0; i < g->n_node; i++)
        for (size_t j = 0; j < g->node[i]->n_output; j++)
            if (!strcmp(g->node[i]->output[j], out))
                return g->node[i];
    return NULL;
}

/* names and op types are optional in the proto (NULL when absent) */
static int is(const char *s, const char *want) { return s && !strcmp(s, want); }
static const char *nm(const char *s) { return s ? s : "?"; }

static int64_t attr_i(const Onnx__NodeProto *n, const char *name, int64_t dflt)
{
    for (size_t i = 0; i < n->n_attribute; i++)
        if (is(n->attribute[i]->name, name) && n->attribute[i]->has_i)
            return n->attribute[i]->i;
    return dflt;
}

/* NULL when the tied check is armed (tied.active), else its final result (skipped or failed). */
static json_t *tied_check(const char *dir, pack *pk, q4nx_file *f)
{
    if (!json_is_true(json_object_get(q4nx_model(f), "tie_embeddings")))
        return json_pack("{s:s}", "result", "skipped \u2014 no independent reference");
    const ogk_qtensor *lm = q4nx_find(f, "lm_head");
    if (!lm || !ogk_dtype_quantised(lm->dtype)) {
        fail("tied check: the model is tied but the container has no quantised lm_head");
        return json_pack("{s:s}", "result", "FAILED: no quantised lm_head");
    }
    if (q4nx_find(f, "embed")) {
        fail("tied check: the model is tied but the container holds a separate embed tensor");
        return json_pack("{s:s}", "result", "FAILED: separate embed tensor");
    }
    const pack_tensor *p = pack_find(pk, "lm_head");
    char path[4096];
    ogk_error e;
    const char *fn = "model.onnx";
    snprintf(path, sizeof path, "%s/genai_config.json", dir);
    size_t gl = 0;
    char *gtxt = ogk_read_file(path, &gl, &e); /* regular files only: never waits on a FIFO */
    json_t *gc = gtxt ? json_loadb(gtxt, gl, 0, NULL) : NULL;
    free(gtxt);
    const char *f2 = json_string_value(json_object_get(json_object_get(json_object_get(gc, "model"), "decoder"), "filename"));
    if (f2 && !strchr(f2, '/'))
        fn = f2;
    snprintf(path, sizeof path, "%s/%s", dir, fn);
    json_decref(gc);
    ogk_map mp;
    if (ogk_map_open(&mp, path, &e)) {
        fail("tied check: %s", e.msg);
        return json_pack("{s:s}", "result", "FAILED: graph unreadable");
    }
    Onnx__ModelProto *mod = pack_onnx_unpack(mp.data, mp.size, &e);
    json_t *res = NULL;
    if (!mod) {
        fail("tied check: %s: not an ONNX model (%s)", path, e.msg);
        res = json_pack("{s:s}", "result", "FAILED: graph unreadable");
        goto out;
    }
    Onnx__GraphProto *g = mod ? mod->graph : NULL;
    Onnx__NodeProto *emb = NULL;
    for (size_t i = 0; g && i < g->n_node && !emb; i++) {
        Onnx__NodeProto *n = g->node[i];
        if (n->n_input >= 2 && !strcmp(n->input[1], "input_ids") &&
            (is(n->op_type, "Gather") || is(n->op_type, "GatherBlockQuantized")))
            emb = n;
    }
    if (!emb) {
        fail("tied check: %s: no Gather / GatherBlockQuantized reads input_ids", path);
        res = json_pack("{s:s}", "result", "FAILED: no embedding lookup in the graph");
        goto out;
    }
    /* follow the data input back through views (Reshape, Slice) to the initializer */
    const char *src = emb->input[0];
    for (Onnx__NodeProto *n; (n = producer(g, src)) && n->n_input >= 1 &&
                             (is(n->op_type, "Reshape") || is(n->op_type, "Slice"));)
        src = n->input[0];
    if (!is(emb->op_type, "GatherBlockQuantized")) {
        fail("tied check: embedding node %s is a float Gather of %s, not a lookup into the lm_head weight %s",
             nm(emb->name), src, lm->name);
        res = json_pack("{s:s,s:s}", "result", "FAILED: separate float embedding", "embedding_node", nm(emb->name));
        goto out;
    }
    const char *zsrc = emb->n_input >= 4 && emb->input[3][0] ? emb->input[3] : NULL;
    const char *ssrc = emb->n_input >= 3 ? emb->input[2] : "";
    if (!p || strcmp(src, lm->name) || strcmp(src, p->name) || strcmp(ssrc, p->scales_name ? p->scales_name : "") ||
        (zsrc ? !p->zeros_name || strcmp(zsrc, p->zeros_name) : p->zeros_name != NULL) ||
        attr_i(emb, "bits", 4) != ogk_dtype_bits(lm->dtype) || attr_i(emb, "block_size", 128) != (int64_t)lm->block ||
        attr_i(emb, "gather_axis", 0) != 0 || attr_i(emb, "quantize_axis", 1) != 1) {
        fail("tied check: embedding node %s reads %s / %s%s%s, the lm_head is %s / %s%s%s (or its attributes differ)",
             nm(emb->name), src, ssrc, zsrc ? " / " : "", zsrc ? zsrc : "", lm->name,
             p && p->scales_name ? p->scales_name : "?", p && p->zeros_name ? " / " : "", p && p->zeros_name ? p->zeros_name : "");
        res = json_pack("{s:s,s:s}", "result", "FAILED: embedding lookup does not read the lm_head weight",
                        "embedding_node", nm(emb->name));
        goto out;
    }
    /* same bytes by name; the values through GatherBlockQuantized's own reading are compared while
     * compare_q4 walks the lm_head (tied_result) */
    tied.active = 1;
    tied.data = p->codes;
    tied.stride = (size_t)p->k_blocks * p->block * (size_t)ogk_dtype_bits(p->dtype) / 8;
    tied.sc = (matmulnbits){p->codes, p->scales, p->zeros, p->scale_dtype, p->n, p->k, p->block, p->k_blocks,
                            ogk_dtype_bits(p->dtype)};
    tied.node = strdup(nm(emb->name));
    tied.src = strdup(src);
out:
    if (!res && !tied.active) /* a result that could not be built must not read as "armed" */
        res = json_pack("{s:s}", "result", "FAILED");
    if (mod)
        onnx__model_proto__free_unpacked(mod, NULL);
    ogk_map_close(&mp);
    return res;
}

/* The tied check's result once the lm_head has been compared (or, when that comparison could not run,
 * after walking the rows here); full statistics only when some group differs. */
static json_t *tied_result(q4nx_file *f, long sample)
{
    const ogk_qtensor *lm = q4nx_find(f, "lm_head");
    if (tied.sc.n != lm->n || tied.sc.k != lm->k || tied.sc.block != lm->block) { /* another model's pack */
        fail("tied check: the pack's embedding %s is [%u x %u] (block %u), the container's lm_head [%u x %u] (block %u)",
             tied.node, tied.sc.n, tied.sc.k, tied.sc.block, lm->n, lm->k, lm->block);
        json_t *res = json_pack("{s:s,s:s,s:s,s:[ii],s:[ii]}", "result", "FAILED: shapes differ", "embedding_node", tied.node,
                                "data", tied.src, "pack_shape", (int)tied.sc.n, (int)tied.sc.k, "container_shape",
                                (int)lm->n, (int)lm->k);
        free(tied.node);
        free(tied.src);
        return res;
    }
    uint32_t nr = row_count(lm->n, sample);
    if (work_bufs((size_t)WINDOW * lm->k))
        return json_pack("{s:s}", "result", "FAILED: out of memory");
    for (int full = tied.st.groups ? 1 : 0; full < 2; full++) {
        if (full) {
            if (tied.st.exact == tied.st.groups)
                break;
            memset(&tied.st, 0, sizeof tied.st);
        }
        for (uint32_t i = 0; i < nr; i++) {
            uint32_t v = pick_row(lm->n, sample, i);
            kern_dequant_rows(lm, v, 1, wa);
            gbq_row(tied.data, tied.stride, &tied.sc, v, wb);
            cmp_row(&tied.st, wa, wb, lm->k, lm->block, full);
        }
    }
    const cmpstat *st = &tied.st;
    json_t *res = json_pack("{s:s,s:s,s:s,s:I}", "result", st->exact == st->groups ? "ok" : "FAILED", "embedding_node",
                            tied.node, "data", tied.src, "rows_checked", (json_int_t)nr);
    json_t *sj = stat_json(st);
    json_object_update(res, sj);
    json_decref(sj);
    if (st->exact != st->groups)
        fail("tied check: %" PRIu64 " of %" PRIu64 " embedding groups differ from the container's lm_head",
             st->groups - st->exact, st->groups);
    free(tied.node);
    free(tied.src);
    return res;
}

json_t *verify_pack(const char *dir, q4nx_file *f, long sample, json_t *summary, ogk_error *pe, int *code)
{
    ogk_error e;
    pack *pk = pack_open(dir, &e);
    *code = !pk && errno == ENOMEM ? OGK_EXIT_INIT : OGK_EXIT_INPUT;
    if (!pk) {
        ogk_fail(pe, "--pack %s", e.msg);
        return NULL;
    }
    if (pack_refusal_count(pk)) {
        const pack_refusal *r = pack_refusal_at(pk, 0);
        ogk_fail(pe, "--pack %s: pack refused (%zu refusals; first: %s: %s)", dir, pack_refusal_count(pk), r->what,
                 r->reason);
        *code = pack_exit_code(pk);
        pack_close(pk);
        return NULL;
    }
    double t0 = ogk_now();
    totals tot = {0};
    json_t *arr = json_array();
    json_t *tied_res = tied_check(dir, pk, f);
    for (size_t i = 0; i < q4nx_tensor_count(f); i++) {
        const ogk_qtensor *t = q4nx_tensor_at(f, i);
        const pack_tensor *p = pack_find(pk, t->role);
        if (!p) {
            fail("tensor %s (role %s): not in the pack", t->name, t->role);
            continue;
        }
        if (strcmp(p->name, t->name))
            fail("tensor %s (role %s): the pack's tensor for this role is %s", t->name, t->role, p->name);
        json_t *o;
        if (ogk_dtype_quantised(t->dtype) && t->dtype == p->dtype) {
            o = compare_q4(t->role, t, p, sample, &tot);
            tot.tensors++;
        } else if (ogk_dtype_quantised(t->dtype) && ogk_dtype_quantised(p->dtype)) {
            fail("tensor %s (role %s): %s in the container, %s in the pack", t->name, t->role, ogk_dtype_name(t->dtype),
                 ogk_dtype_name(p->dtype));
            o = NULL;
        } else if (!ogk_dtype_quantised(t->dtype) && !ogk_dtype_quantised(p->dtype)) {
            o = compare_plain(t->role, t, p->data, p->nbytes, p->dtype, p->ndim, p->shape, "the pack", &tot);
        } else {
            fail("tensor %s (role %s): quantised on one side only", t->name, t->role);
            o = NULL;
        }
        if (o)
            json_array_append_new(arr, o);
    }
    for (size_t i = 0; i < pack_tensor_count(pk); i++) {
        const pack_tensor *p = pack_tensor_at(pk, i);
        if (!q4nx_find(f, p->role))
            fail("pack tensor %s (role %s): missing from the container", p->name, p->role);
    }
    json_t *tied = tied_res ? tied_res : tied_result(f, sample);
    double dt = ogk_now() - t0;
    json_object_set_new(summary, "tensors_compared", json_integer((json_int_t)tot.tensors));
    json_object_set_new(summary, "quantised", json_integer((json_int_t)tot.qtensors));
    json_object_set_new(summary, "groups", json_integer((json_int_t)tot.groups));
    json_object_set_new(summary, "exact_groups", json_integer((json_int_t)tot.exact));
    json_object_set_new(summary, "exact_groups_pct",
                        jnum(tot.groups ? 100.0 * (double)tot.exact / (double)tot.groups : 0.0));
    json_object_set_new(summary, "controls",
                        json_string(tot.vacuous ? "VACUOUS: a control matched, the comparison proves nothing"
                                                : "all failed, as they must"));
    json_object_set_new(summary, "tied", json_incref(json_object_get(tied, "result")));
    json_object_set_new(summary, "pack_bytes", json_integer((json_int_t)tot.bytes));
    json_object_set_new(summary, "seconds", json_real(dt));
    json_object_set_new(summary, "gb_per_s", jnum(dt > 0 ? (double)tot.bytes / dt / 1e9 : 0));
    json_t *r = json_pack("{s:s,s:s,s:o,s:o}", "dir", pack_dir_text(pk), "flavour", pack_flavour_name(pack_flavour(pk)), "tied_check",
                          tied, "tensors", arr);
    pack_close(pk);
    return r;
}

/* ---------- container vs container ---------- */
json_t *verify_against(q4nx_file *a, q4nx_file *b, const char *bpath, json_t *summary)
{
    totals tot = {0};
    json_t *arr = json_array();
    if (!json_equal((json_t *)q4nx_model(a), (json_t *)q4nx_model(b)))
        fail("--against %s: the model descriptions differ", bpath);
    for (size_t i = 0; i < q4nx_asset_count(a); i++) {
        const char *name;
        const uint8_t *d, *d2;
        size_t n, n2;
        uint32_t c;
        q4nx_asset_at(a, i, &name, &d, &n, &c);
        if (q4nx_asset(b, name, &d2, &n2) || n != n2 || memcmp(d, d2, n))
            fail("--against %s: asset %s differs or is missing", bpath, name);
    }
    if (q4nx_asset_count(a) != q4nx_asset_count(b))
        fail("--against %s: %zu assets vs %zu", bpath, q4nx_asset_count(a), q4nx_asset_count(b));
    if (q4nx_tensor_count(a) != q4nx_tensor_count(b))
        fail("--against %s: %zu tensors vs %zu", bpath, q4nx_tensor_count(a), q4nx_tensor_count(b));
    for (size_t i = 0; i < q4nx_tensor_count(a); i++) {
        const ogk_qtensor *t = q4nx_tensor_at(a, i), *u = q4nx_find(b, t->role);
        if (!u) {
            fail("tensor %s (role %s): missing from %s", t->name, t->role, bpath);
            continue;
        }
        if (!ogk_dtype_quantised(t->dtype) || !ogk_dtype_quantised(u->dtype)) {
            json_array_append_new(arr, compare_plain(t->role, t, ogk_dtype_quantised(u->dtype) ? NULL : u->data, u->nbytes,
                                                     u->dtype, u->ndim, u->shape, bpath, &tot));
            continue;
        }
        if (t->dtype != u->dtype || t->n != u->n || t->k != u->k || t->block != u->block ||
            t->scale_dtype != u->scale_dtype || t->has_zp != u->has_zp) {
            fail("tensor %s (role %s): geometry differs in %s", t->name, t->role, bpath);
            continue;
        }
        cmpstat st = {0};
        if (work_bufs((size_t)WINDOW * t->k))
            continue;
        for (int full = 0; full < 2; full++) {
            if (full) {
                if (st.exact == st.groups)
                    break;
                memset(&st, 0, sizeof st);
            }
            for (uint32_t r0 = 0; r0 < t->n; r0 += WINDOW) {
                uint32_t w = t->n - r0 < WINDOW ? t->n - r0 : WINDOW;
                kern_dequant_rows(t, r0, w, wa);
                kern_dequant_rows(u, r0, w, wb);
                for (uint32_t r = 0; r < w; r++)
                    cmp_row(&st, wa + (size_t)r * t->k, wb + (size_t)r * t->k, t->k, t->block, full);
            }
        }
        json_t *o = json_pack("{s:s,s:s,s:s,s:[I,I]}", "role", t->role, "name", t->name, "dtype", ogk_dtype_name(t->dtype), "shape",
                              (json_int_t)t->n, (json_int_t)t->k);
        json_t *sj = stat_json(&st);
        json_object_update(o, sj);
        json_decref(sj);
        json_object_set_new(o, "ok", json_boolean(st.exact == st.groups));
        if (st.exact != st.groups)
            fail("tensor %s (role %s): %" PRIu64 " of %" PRIu64 " groups dequantise differently in %s", t->name, t->role,
                 st.groups - st.exact, st.groups, bpath);
        json_array_append_new(arr, o);
        tot.tensors++;
        tot.groups += st.groups;
        tot.exact += st.exact;
    }
    json_object_set_new(summary, "against_tensors", json_integer((json_int_t)tot.tensors));
    json_object_set_new(summary, "against_groups", json_integer((json_int_t)tot.groups));
    json_object_set_new(summary, "against_exact_groups_pct",
                        jnum(tot.groups ? 100.0 * (double)tot.exact / (double)tot.groups : 100.0));
    return json_pack("{s:o,s:s,s:o}", "file", ogk_json_str(bpath), "layout", ogk_layout_name(q4nx_layout(b)), "tensors", arr);
}

void verify_begin(void)
{
    json_decref(failures);
    failures = json_array();
}

const json_t *verify_failures(void) { return failures; }

void verify_end(void)
{
    json_decref(failures);
    failures = NULL;
    free(wa), free(wb), free(wc);
    wa = wb = wc = NULL;
    wcap = 0;
}
