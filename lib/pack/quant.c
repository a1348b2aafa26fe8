/* Emitting tensors: plain weights, and the quantised-node checks (MatMulNBits, GatherBlockQuantized
 * against their attributes and initializers). */
#define _GNU_SOURCE
#include "graph_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* ---- emitting tensors ---- */

int pg_claim(G *g, int vi, const char *role)
{
    gval *v = &g->v[vi];
    v->used = 1;
    if (v->role && strcmp(v->role, role)) {
        pack_refuse(g->p, pack_printf(g->p, "tensor %s", v->name), "graph", "used as both %s and %s", v->role, role);
        return -1;
    }
    if (v->role)
        return 0; /* already emitted (shared rope caches) */
    v->role = pack_strdup(g->p, role);
    return 1;
}

static void set_shape(pack_tensor *t, const rtensor *r)
{
    t->ndim = r->ndim ? r->ndim : 1;
    t->shape[0] = 1;
    for (int i = 0; i < r->ndim && i < 4; i++)
        t->shape[i] = r->dims[i];
}

/* A plain weight (norm, bias, rope cache, float embedding) consumed by node n from input value val. */
void pg_emit_plain(G *g, int n, const char *val, const char *role)
{
    pack *p = g->p;
    int vi = val ? pg_init_of(g, val, NULL) : -1;
    if (vi < 0) {
        pack_refuse(p, role, "graph", "node %s: input \"%s\" is not an initializer", nname(g, n), val ? val : "");
        return;
    }
    if (pg_claim(g, vi, role) <= 0)
        return;
    if (pg_resolve(g, vi) < 0)
        return;
    const rtensor *r = &g->v[vi].rt;
    int dt = float_dtype(r->dtype);
    if (!dt) {
        pack_refuse(p, pack_printf(p, "tensor %s", g->v[vi].name), "tensor_dtype", "%s weight of type %s (want float, float16 or bfloat16)",
                    role, pg_onnx_dtype_name(r->dtype));
        return;
    }
    if (r->ndim > 4 || r->ndim < 1) {
        pack_refuse(p, pack_printf(p, "tensor %s", g->v[vi].name), "tensor_shape", "%s weight has %d dims", role, r->ndim);
        return;
    }
    pack_tensor *t = pack_add_tensor(p);
    t->name = g->v[vi].name;
    t->role = g->v[vi].role;
    t->node = nname(g, n);
    t->dtype = dt;
    set_shape(t, r);
    t->data = r->data;
    t->nbytes = r->size;
}

static int pow2(uint64_t x) { return x && !(x & (x - 1)); }

/* The quantised entry MatMulNBits and GatherBlockQuantized share: [N, K] in blocks of block (kb per row), 4 or
 * 8 bits, from the value dvi of node n, scales from value svi (dtype sdt), zero points from value zvi (none when
 * zvi < 0). The caller sets codes, codes_size and what is particular to its op. */
static pack_tensor *add_q(G *g, int n, int dvi, int svi, int zvi, int bits, uint64_t N, uint64_t K, uint64_t block,
                          uint64_t kb, int sdt, const char *op)
{
    const rtensor *S = &g->v[svi].rt, *Z = zvi >= 0 ? &g->v[zvi].rt : NULL;
    pack_tensor *t = pack_add_tensor(g->p);
    t->name = g->v[dvi].name;
    t->role = g->v[dvi].role;
    t->node = nname(g, n);
    t->dtype = bits == 8 ? OGK_Q8 : OGK_Q4;
    t->ndim = 2;
    t->shape[0] = t->n = (uint32_t)N;
    t->shape[1] = t->k = (uint32_t)K;
    t->block = (uint32_t)block;
    t->k_blocks = (uint32_t)kb;
    t->scale_dtype = sdt;
    t->has_zp = Z != NULL;
    t->source_op = op;
    t->scales_name = g->v[svi].name;
    t->zeros_name = Z ? g->v[zvi].name : NULL;
    t->scales = S->data;
    t->scales_size = S->size;
    t->zeros = Z ? Z->data : NULL;
    t->zeros_size = Z ? Z->size : 0;
    return t;
}

/* A MatMulNBits node's weight: checked against the node's attributes. */
const pack_tensor *pg_emit_mnb(G *g, int n, const char *role)
{
    pack *p = g->p;
    int bvi = pg_init_of(g, in(g, n, 1), NULL), svi = pg_init_of(g, in(g, n, 2), NULL);
    int zvi = in(g, n, 3) ? pg_init_of(g, in(g, n, 3), NULL) : -2;
    const char *bname = bvi >= 0 ? g->v[bvi].name : nname(g, n);
    const char *what = pack_printf(p, "tensor %s", bname);
    if (bvi < 0 || svi < 0 || zvi == -1) {
        pack_refuse(p, what, "graph", "MatMulNBits %s: weight, scales or zero points are not initializers", nname(g, n));
        return NULL;
    }
    int fresh = pg_claim(g, bvi, role);
    g->v[svi].used = 1;
    if (zvi >= 0)
        g->v[zvi].used = 1;
    if (fresh <= 0)
        return NULL;
    int hk, hn, hb, hbs;
    int64_t K = attr_i(g, n, "K", 0, &hk), N = attr_i(g, n, "N", 0, &hn), bits = attr_i(g, n, "bits", 0, &hb),
            block = attr_i(g, n, "block_size", 0, &hbs);
    int64_t acc = attr_i(g, n, "accuracy_level", -1, NULL);
    if (!hk || !hn || !hb || !hbs || K <= 0 || N <= 0 || K > (1 << 24) || N > (1 << 24)) {
        pack_refuse(p, what, "graph", "MatMulNBits %s: attributes K, N, bits, block_size missing or out of range", nname(g, n));
        return NULL;
    }
    if (bits != 4 && bits != 8) {
        pack_refuse(p, what, "unsupported_bits", "MatMulNBits %s has bits=%" PRId64 "; only 4- and 8-bit weights are supported",
                    nname(g, n), bits);
        return NULL;
    }
    if (!pow2((uint64_t)block) || block < 16 || block > 4096) {
        pack_refuse(p, what, "unsupported_block",
                    "MatMulNBits %s: block_size %" PRId64 " is not a power of two in 16..4096", nname(g, n), block);
        return NULL;
    }
    if (attr_i(g, n, "weight_prepacked", 0, NULL)) {
        pack_refuse(p, what, "unsupported_op", "MatMulNBits %s: weight_prepacked (B in a backend's own layout) is not supported",
                    nname(g, n));
        return NULL;
    }
    if (in(g, n, 4)) {
        pack_refuse(p, what, "g_idx", "MatMulNBits %s has a g_idx input (act-order group index); not supported",
                    nname(g, n));
        return NULL;
    }
    if (pg_resolve(g, bvi) < 0 || pg_resolve(g, svi) < 0 || (zvi >= 0 && pg_resolve(g, zvi) < 0))
        return NULL;
    uint64_t kb = ((uint64_t)K + (uint64_t)block - 1) / (uint64_t)block, blob = (uint64_t)block * (uint64_t)bits / 8;
    const rtensor *B = &g->v[bvi].rt, *S = &g->v[svi].rt;
    if (B->dtype != T_UINT8) {
        pack_refuse(p, what, "tensor_dtype", "MatMulNBits weight is %s, want uint8", pg_onnx_dtype_name(B->dtype));
        return NULL;
    }
    int shape_ok = (B->ndim == 3 && B->dims[0] == (uint64_t)N && B->dims[1] == kb && B->dims[2] == blob) ||
                   (B->ndim == 2 && B->dims[0] == (uint64_t)N && B->dims[1] == kb * blob);
    if (!shape_ok) {
        char sh[96] = "";
        for (int i = 0; i < B->ndim && i < 4; i++)
            snprintf(sh + strlen(sh), sizeof sh - strlen(sh), "%s%" PRIu64, i ? ", " : "", B->dims[i]);
        pack_refuse(p, what, "tensor_shape",
                    "MatMulNBits %s: weight shape [%s] != [N %" PRId64 ", k_blocks %" PRIu64 ", block*bits/8 %" PRIu64 "]",
                    nname(g, n), sh, N, kb, blob);
        return NULL;
    }
    int sdt = float_dtype(S->dtype);
    if (!sdt) {
        pack_refuse(p, pack_printf(p, "tensor %s", g->v[svi].name), "tensor_dtype",
                    "MatMulNBits scales are %s, want float, float16 or bfloat16", pg_onnx_dtype_name(S->dtype));
        return NULL;
    }
    if (S->numel != (uint64_t)N * kb || (S->ndim == 2 && (S->dims[0] != (uint64_t)N || S->dims[1] != kb)) || S->ndim > 2) {
        pack_refuse(p, pack_printf(p, "tensor %s", g->v[svi].name), "tensor_shape",
                    "MatMulNBits %s: %" PRIu64 " scales, want N*k_blocks = %" PRIu64, nname(g, n), S->numel, (uint64_t)N * kb);
        return NULL;
    }
    const rtensor *Z = zvi >= 0 ? &g->v[zvi].rt : NULL;
    uint64_t zrow = (kb * (uint64_t)bits + 7) / 8;
    if (Z) {
        if (Z->dtype != T_UINT8) {
            pack_refuse(p, pack_printf(p, "tensor %s", g->v[zvi].name), "tensor_dtype",
                        "MatMulNBits zero points are %s; only packed uint8 zero points are supported",
                        pg_onnx_dtype_name(Z->dtype));
            return NULL;
        }
        if (Z->numel != (uint64_t)N * zrow || Z->ndim > 2 || (Z->ndim == 2 && Z->dims[1] != zrow)) {
            pack_refuse(p, pack_printf(p, "tensor %s", g->v[zvi].name), "tensor_shape",
                        "MatMulNBits %s: %" PRIu64 " zero-point bytes, want N*ceil(k_blocks*bits/8) = %" PRIu64, nname(g, n),
                        Z->numel, (uint64_t)N * zrow);
            return NULL;
        }
    }
    pack_tensor *t = add_q(g, n, bvi, svi, zvi, (int)bits, (uint64_t)N, (uint64_t)K, (uint64_t)block, kb, sdt, "MatMulNBits");
    t->accuracy_level = (int)acc;
    t->codes = B->data;
    t->codes_size = B->size;
    if (in(g, n, 5)) { /* a fused bias: the runtime adds one only after q, k, v (qkv_bias) and knows o_bias (refused there) */
        const char *s = strstr(role, ".attn.");
        if (s && (!strcmp(s, ".attn.q") || !strcmp(s, ".attn.k") || !strcmp(s, ".attn.v") || !strcmp(s, ".attn.qkv") ||
                  !strcmp(s, ".attn.o"))) {
            if (strcmp(s, ".attn.o"))
                p->g.qkv_bias = 1;
            pg_emit_plain(g, n, in(g, n, 5), pack_printf(p, "%s_bias", role));
        } else {
            int bi = pg_init_of(g, in(g, n, 5), NULL);
            if (bi >= 0)
                g->v[bi].used = 1; /* refused here, not again as unassigned */
            pack_refuse(p, pack_printf(p, "tensor %s", in(g, n, 5)), "unsupported_op",
                        "MatMulNBits %s: a bias fused into the %s projection; the runtime has no bias there", nname(g, n), role);
        }
    }
    return t;
}

/* nibble i of a flat int4 / uint4 tensor (ONNX packs two a byte, the first element in the low nibble) */
static unsigned nib(const uint8_t *d, uint64_t i) { return (d[i / 2] >> (i % 2 * 4)) & 15u; }

/* A GatherBlockQuantized over int4 / uint4 data [V, K] (onnxruntime's quantizer for op_types_to_quantize Gather,
 * the builder's int4_op_types_to_quantize=MatMul/Gather): codes packed flat, two a byte across rows; scales [V,
 * k_blocks]; zero points, when given, of the data's own type [V, k_blocks], packed flat too. Normalised exactly to
 * the q4 form: rows of whole blocks (zero-padded), uint4 codes, zero points u4-packed per row. int4 value q with
 * zero point z dequantises to (q - z) * s = ((q + 8) - (z + 8)) * s: the nibbles' top bit flipped (q + 8 in
 * two's complement), and without zero points the implicit 8 that q4 has. uint4 without zero points dequantises
 * with zero point 0 (onnxruntime's default for the 4-bit types, not 8 as for uint8 data): explicit zeros. */
static void gbq_int4(G *g, int n, int dvi, int svi, int zvi, int sliced, int64_t block, int64_t gax, int64_t qax)
{
    pack *p = g->p;
    const char *what = pack_printf(p, "tensor %s", g->v[dvi].name);
    const rtensor *D = &g->v[dvi].rt, *S = &g->v[svi].rt, *Z = zvi >= 0 ? &g->v[zvi].rt : NULL;
    int64_t bits = attr_i(g, n, "bits", 4, NULL);
    if (sliced || D->ndim != 2 || bits != 4 || gax != 0 || (qax != 1 && qax != -1)) {
        pack_refuse(p, what, "unsupported_op",
                    "GatherBlockQuantized %s: only %s [V, K] data (bits 4) gathered on axis 0 and quantised on axis 1 is supported",
                    nname(g, n), pg_onnx_dtype_name(D->dtype));
        return;
    }
    uint64_t V = D->dims[0], K = D->dims[1], kb = (K + (uint64_t)block - 1) / (uint64_t)block, zrow = (kb + 1) / 2,
             row = kb * (uint64_t)block / 2;
    int sdt = float_dtype(S->dtype);
    if (!sdt || S->numel != V * kb || (S->ndim == 2 && (S->dims[0] != V || S->dims[1] != kb)) || S->ndim > 2 ||
        (Z && (Z->dtype != D->dtype || Z->numel != V * kb)) || !V || !K) {
        pack_refuse(p, what, "tensor_shape",
                    "GatherBlockQuantized %s: scales/zero points do not match %s data [%" PRIu64 ", %" PRIu64 "] in blocks of %" PRId64
                    " (want [V, k_blocks] each, zero points of the data's type)",
                    nname(g, n), pg_onnx_dtype_name(D->dtype), V, K, block);
        return;
    }
    unsigned flip = D->dtype == T_INT4 ? 8u : 0u;
    int zeros = Z != NULL || !flip; /* int4 without zero points: q4's implicit 8 */
    uint8_t *c = calloc(V, row), *zp = zeros ? calloc(V, zrow) : NULL;
    if (!c || (zeros && !zp)) {
        free(c);
        free(zp);
        pack_refuse(p, what, "out_of_memory", "GatherBlockQuantized %s: no memory for the %" PRIu64 "-byte uint4 copy",
                    nname(g, n), V * row);
        return;
    }
    if (!pack_own(p, c)) { /* c freed; the pack is refused out_of_memory */
        free(zp);
        return;
    }
    if (zp && !pack_own(p, zp))
        return;
    for (uint64_t r = 0; r < V; r++) {
        uint8_t *o = c + r * row;
        for (uint64_t j = 0; j < K; j++)
            o[j / 2] |= (uint8_t)((nib(D->data, r * K + j) ^ flip) << (j % 2 * 4));
        /* the padding of a last partial block: the zero point's code, so that it dequantises to 0 */
        for (uint64_t j = K; j < kb * (uint64_t)block; j++) {
            unsigned z = Z ? nib(Z->data, r * kb + kb - 1) ^ flip : flip ? 8u : 0u;
            o[j / 2] |= (uint8_t)(z << (j % 2 * 4));
        }
        for (uint64_t b = 0; zp && Z && b < kb; b++)
            zp[r * zrow + b / 2] |= (uint8_t)((nib(Z->data, r * kb + b) ^ flip) << (b % 2 * 4));
    }
    pack_tensor *t = add_q(g, n, dvi, svi, zvi, 4, V, K, (uint64_t)block, kb, sdt, "GatherBlockQuantized");
    t->codes = c;
    t->codes_size = V * row;
    t->has_zp = zeros;
    t->zeros = zp;
    t->zeros_size = zeros ? V * zrow : 0;
}

/* A GatherBlockQuantized embedding that does not share lm_head's initializers: normalised to the same
 * q4 form (uint8 data, 4 bits, quantize along the last axis). */
void pg_emit_gbq(G *g, int n, int dvi, int sliced)
{
    pack *p = g->p;
    const char *what = pack_printf(p, "tensor %s", g->v[dvi].name);
    int svi = pg_init_of(g, in(g, n, 2), NULL), zvi = in(g, n, 3) ? pg_init_of(g, in(g, n, 3), NULL) : -2;
    if (svi < 0 || zvi == -1) {
        pack_refuse(p, what, "graph", "GatherBlockQuantized %s: scales or zero points are not initializers", nname(g, n));
        return;
    }
    g->v[svi].used = 1;
    if (zvi >= 0)
        g->v[zvi].used = 1;
    if (pg_claim(g, dvi, "embed") <= 0)
        return;
    int64_t bits = attr_i(g, n, "bits", 4, NULL), block = attr_i(g, n, "block_size", 128, NULL),
            gax = attr_i(g, n, "gather_axis", 0, NULL), qax = attr_i(g, n, "quantize_axis", 1, NULL);
    if (attr_i(g, n, "weight_prepacked", 0, NULL)) {
        pack_refuse(p, what, "unsupported_op", "GatherBlockQuantized %s: weight_prepacked is not supported", nname(g, n));
        return;
    }
    if (bits != 4 && bits != 8) {
        pack_refuse(p, what, "unsupported_bits", "GatherBlockQuantized %s has bits=%" PRId64 "; only 4 and 8 are supported",
                    nname(g, n), bits);
        return;
    }
    if (!pow2((uint64_t)block) || block < 16 || block > 4096) {
        pack_refuse(p, what, "unsupported_block",
                    "GatherBlockQuantized %s: block_size %" PRId64 " is not a power of two in 16..4096", nname(g, n), block);
        return;
    }
    if (pg_resolve(g, dvi) < 0 || pg_resolve(g, svi) < 0 || (zvi >= 0 && pg_resolve(g, zvi) < 0))
        return;
    const rtensor *D = &g->v[dvi].rt, *S = &g->v[svi].rt, *Z = zvi >= 0 ? &g->v[zvi].rt : NULL;
    if (D->dtype == T_INT4 || D->dtype == T_UINT4) {
        gbq_int4(g, n, dvi, svi, zvi, sliced, block, gax, qax);
        return;
    }
    if (sliced || D->dtype != T_UINT8 || D->ndim != 2 || gax != 0 || (qax != 1 && qax != -1)) {
        pack_refuse(p, what, "unsupported_op",
                    "GatherBlockQuantized %s: only uint8 [V, K*bits/8] data gathered on axis 0 and quantised on axis 1 is supported",
                    nname(g, n));
        return;
    }
    const uint64_t per = 8 / (uint64_t)bits; /* codes a byte */
    uint64_t V = D->dims[0], K = D->dims[1] * per, kb = (K + (uint64_t)block - 1) / (uint64_t)block,
             zrow = (kb * (uint64_t)bits + 7) / 8;
    int sdt = float_dtype(S->dtype);
    if (!sdt || S->numel != V * kb || (Z && (Z->dtype != T_UINT8 || Z->numel != V * zrow)) || !V || !K) {
        pack_refuse(p, what, "tensor_shape", "GatherBlockQuantized %s: scales/zero points do not match data [%" PRIu64 ", %" PRIu64 "]",
                    nname(g, n), V, K / per);
        return;
    }
    const uint8_t *codes = D->data;
    if (K % (uint64_t)block) { /* MatMulNBits rows are padded to whole blocks */
        uint64_t row = kb * (uint64_t)block / per;
        uint8_t *c = calloc(V, row);
        if (!c) { /* the padded copy is the pack's only allocation that grows with a declared size */
            pack_refuse(p, what, "out_of_memory", "GatherBlockQuantized %s: no memory for the %" PRIu64 "-byte padded copy",
                        nname(g, n), V * row);
            return;
        }
        if (!pack_own(p, c)) /* freed; the pack is refused out_of_memory */
            return;
        for (uint64_t r = 0; r < V; r++)
            memcpy(c + r * row, D->data + r * (K / per), K / per);
        codes = c;
    }
    pack_tensor *t = add_q(g, n, dvi, svi, zvi, (int)bits, V, K, (uint64_t)block, kb, sdt, "GatherBlockQuantized");
    t->codes = codes;
    t->codes_size = V * kb * (uint64_t)block / per;
}
