/* The ONNX graph of a pack: parse model.onnx (protoc-c code), resolve every initializer's bytes
 * (inline or external, mmapped and bounds-checked), then walk the graph to give each weight a role:
 *   input_ids -> Gather / GatherBlockQuantized (embed) -> the residual stream, followed norm by norm
 *   (SimplifiedLayerNormalization, SkipSimplifiedLayerNormalization via output 3, or Add + norm);
 *   between two norms lies one block: attention (a GroupQueryAttention-like node) or MLP.
 *   Attention: each projection consuming the norm is traced forward to the attention node; the input
 *   slot it reaches says q (0), k (1), v (2) or packed qkv (0 with 1 and 2 empty); Adds with a weight
 *   on the way are its bias, norms on the way are q_norm / k_norm, RotaryEmbedding nodes give the rope
 *   caches. The projection after the attention node is o.
 *   MLP: of the two projections consuming the norm, the one feeding an activation is gate, the other
 *   up; the one feeding the next norm is down.
 *   After the last norm: lm_head (the projection producing the logits).
 * Whatever the walk does not reach and looks like a weight is refused as "unassigned". */
#define _GNU_SOURCE
#include "pack_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

enum {
    T_FLOAT = 1, T_UINT8 = 2, T_INT8 = 3, T_UINT16 = 4, T_INT16 = 5, T_INT32 = 6, T_INT64 = 7, T_STRING = 8,
    T_BOOL = 9, T_FLOAT16 = 10, T_DOUBLE = 11, T_UINT32 = 12, T_UINT64 = 13, T_BFLOAT16 = 16, T_UINT4 = 21, T_INT4 = 22,
};

static const char *onnx_dtype_name(int t)
{
    switch (t) {
    case T_FLOAT: return "float";
    case T_UINT8: return "uint8";
    case T_INT8: return "int8";
    case T_UINT16: return "uint16";
    case T_INT16: return "int16";
    case T_INT32: return "int32";
    case T_INT64: return "int64";
    case T_STRING: return "string";
    case T_BOOL: return "bool";
    case T_FLOAT16: return "float16";
    case T_DOUBLE: return "double";
    case T_UINT32: return "uint32";
    case T_UINT64: return "uint64";
    case T_BFLOAT16: return "bfloat16";
    case T_UINT4: return "uint4";
    case T_INT4: return "int4";
    default: return "unknown";
    }
}

/* bytes per element, 0 for packed sub-byte and unsupported types */
static size_t onnx_dtype_size(int t)
{
    switch (t) {
    case T_UINT8: case T_INT8: case T_BOOL: return 1;
    case T_UINT16: case T_INT16: case T_FLOAT16: case T_BFLOAT16: return 2;
    case T_FLOAT: case T_INT32: case T_UINT32: return 4;
    case T_INT64: case T_UINT64: case T_DOUBLE: return 8;
    default: return 0;
    }
}

static int float_dtype(int t) { return t == T_FLOAT ? OGK_F32 : t == T_FLOAT16 ? OGK_F16 : t == T_BFLOAT16 ? OGK_BF16 : 0; }

/* ---- graph index: every value name -> producer, consumers, initializer ---- */

typedef struct {
    const uint8_t *data;
    uint64_t size, numel;
    int dtype, ndim;
    uint64_t dims[8];
} rtensor;

typedef struct {
    const char *name;
    int producer;  /* node index, -1 */
    int *cons;     /* consumer node indices (a node appears once per input slot using the value) */
    int ncons, capcons;
    Onnx__TensorProto *init;
    int is_input;
    int state;     /* initializer bytes: 0 not resolved yet, 1 ok, -1 refused */
    rtensor rt;
    const char *role; /* assigned role (initializers) */
    int used;         /* consumed by a walked node as a weight (counted, not refused as unassigned) */
} gval;

typedef struct {
    pack *p;
    Onnx__GraphProto *g;
    gval *v;
    size_t nv, capv;
    size_t *ht, htcap; /* open addressing: index+1 */
    char *chain;       /* per node: part of the residual chain (norms, residual adds) */
    const pack_tensor *lm_head;
    int lm_head_b;     /* gval of lm_head's B */
} G;

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static int val_find(const G *g, const char *name)
{
    if (!name || !*name || !g->htcap)
        return -1;
    for (size_t i = hash_str(name) & (g->htcap - 1);; i = (i + 1) & (g->htcap - 1)) {
        size_t x = g->ht[i];
        if (!x)
            return -1;
        if (!strcmp(g->v[x - 1].name, name))
            return (int)(x - 1);
    }
}

static int val_get(G *g, const char *name)
{
    int i = val_find(g, name);
    if (i >= 0)
        return i;
    if (g->nv == g->capv) {
        g->capv = g->capv ? 2 * g->capv : 256;
        g->v = realloc(g->v, g->capv * sizeof *g->v);
        if (!g->v)
            abort();
    }
    if ((g->nv + 1) * 2 > g->htcap) {
        size_t nc = g->htcap ? 2 * g->htcap : 1024;
        free(g->ht);
        g->ht = calloc(nc, sizeof *g->ht);
        g->htcap = nc;
        for (size_t j = 0; j < g->nv; j++) {
            size_t k = hash_str(g->v[j].name) & (nc - 1);
            while (g->ht[k])
                k = (k + 1) & (nc - 1);
            g->ht[k] = j + 1;
        }
    }
    gval *v = &g->v[g->nv];
    memset(v, 0, sizeof *v);
    v->name = name;
    v->producer = -1;
    size_t k = hash_str(name) & (g->htcap - 1);
    while (g->ht[k])
        k = (k + 1) & (g->htcap - 1);
    g->ht[k] = g->nv + 1;
    return (int)g->nv++;
}

static Onnx__NodeProto *node(const G *g, int i) { return g->g->node[i]; }
static const char *in(const G *g, int n, size_t slot)
{
    Onnx__NodeProto *nd = node(g, n);
    return slot < nd->n_input && nd->input[slot][0] ? nd->input[slot] : NULL;
}
static const char *out(const G *g, int n, size_t slot)
{
    Onnx__NodeProto *nd = node(g, n);
    return slot < nd->n_output && nd->output[slot][0] ? nd->output[slot] : NULL;
}
/* op_type is optional in the proto: a node without one (NULL here) is no op we know */
static int is_op(const G *g, int n, const char *op)
{
    return n >= 0 && node(g, n)->op_type && !strcmp(node(g, n)->op_type, op);
}
static const char *nname(const G *g, int n)
{
    return node(g, n)->name ? node(g, n)->name : node(g, n)->op_type ? node(g, n)->op_type : "?";
}

static Onnx__AttributeProto *attr(const G *g, int n, const char *name)
{
    Onnx__NodeProto *nd = node(g, n);
    for (size_t i = 0; i < nd->n_attribute; i++)
        if (nd->attribute[i]->name && !strcmp(nd->attribute[i]->name, name))
            return nd->attribute[i];
    return NULL;
}
static int64_t attr_i(const G *g, int n, const char *name, int64_t dflt, int *have)
{
    Onnx__AttributeProto *a = attr(g, n, name);
    if (have)
        *have = a && a->has_i;
    return a && a->has_i ? a->i : dflt;
}

/* ---- initializer bytes ---- */

static int ext_get(pack *p, const char *loc, pack_ext **out)
{
    for (size_t i = 0; i < p->n_ext; i++)
        if (!strcmp(p->ext[i].loc, loc)) {
            *out = &p->ext[i];
            return p->ext[i].ok;
        }
    p->ext = realloc(p->ext, (p->n_ext + 1) * sizeof *p->ext);
    pack_ext *x = &p->ext[p->n_ext++];
    memset(x, 0, sizeof *x);
    x->loc = strdup(loc);
    *out = x;
    char *path = NULL;
    if (asprintf(&path, "%s/%s", p->dir, loc) < 0)
        abort();
    ogk_error e;
    if (ogk_map_open(&x->m, path, &e) == 0)
        x->ok = 1;
    else
        pack_refuse(p, pack_printf(p, "file %s", loc), errno == ENOENT ? "file_missing" : "file_unreadable",
                    "external data file: %s", strchr(e.msg, ':') ? strchr(e.msg, ':') + 2 : e.msg);
    free(path);
    return x->ok;
}

static int parse_u64(const char *s, uint64_t *v)
{
    if (!s || !*s)
        return -1;
    uint64_t r = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || r > (UINT64_MAX - 9) / 10)
            return -1;
        r = r * 10 + (uint64_t)(*s - '0');
    }
    *v = r;
    return 0;
}

/* Resolve the bytes of an initializer once. Refusals name the tensor. */
static int resolve(G *g, int vi)
{
    gval *v = &g->v[vi];
    if (v->state)
        return v->state;
    pack *p = g->p;
    Onnx__TensorProto *t = v->init;
    rtensor *r = &v->rt;
    const char *what = pack_printf(p, "tensor %s", v->name);
    v->state = -1;
    r->dtype = t->has_data_type ? t->data_type : 0;
    if (t->n_dims > 8) {
        pack_refuse(p, what, "tensor_shape", "%zu dims", t->n_dims);
        return -1;
    }
    r->ndim = (int)t->n_dims;
    r->numel = 1;
    for (size_t i = 0; i < t->n_dims; i++) {
        if (t->dims[i] < 0 || t->dims[i] > ((int64_t)1 << 40)) {
            pack_refuse(p, what, "tensor_shape", "dimension %zu is %" PRId64, i, t->dims[i]);
            return -1;
        }
        r->dims[i] = (uint64_t)t->dims[i];
        if (r->dims[i] && r->numel > ((uint64_t)1 << 44) / r->dims[i]) {
            pack_refuse(p, what, "tensor_shape", "too many elements");
            return -1;
        }
        r->numel *= r->dims[i];
    }
    size_t es = onnx_dtype_size(r->dtype);
    uint64_t want = r->dtype == T_UINT4 || r->dtype == T_INT4 ? (r->numel + 1) / 2 : r->numel * es;
    if (!es && r->dtype != T_UINT4 && r->dtype != T_INT4) {
        pack_refuse(p, what, "tensor_dtype", "element type %s (%d) is not supported", onnx_dtype_name(r->dtype), r->dtype);
        return -1;
    }
    r->size = want;
    if (t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) {
        const char *loc = NULL, *off_s = NULL, *len_s = NULL;
        for (size_t i = 0; i < t->n_external_data; i++) {
            Onnx__StringStringEntryProto *kv = t->external_data[i];
            if (!kv->key)
                continue;
            if (!strcmp(kv->key, "location"))
                loc = kv->value;
            else if (!strcmp(kv->key, "offset"))
                off_s = kv->value;
            else if (!strcmp(kv->key, "length"))
                len_s = kv->value;
        }
        uint64_t off = 0, len = want;
        if (!loc || !*loc || loc[0] == '/' || !strcmp(loc, "..") || !strncmp(loc, "../", 3) || strstr(loc, "/../")) {
            pack_refuse(p, what, "external_data", "external location \"%s\" is not a file inside the pack", loc ? loc : "");
            return -1;
        }
        if ((off_s && parse_u64(off_s, &off)) || (len_s && parse_u64(len_s, &len))) {
            pack_refuse(p, what, "external_data", "external offset \"%s\" / length \"%s\" is not a number",
                        off_s ? off_s : "", len_s ? len_s : "");
            return -1;
        }
        if (len != want) {
            pack_refuse(p, what, "tensor_shape", "external length %" PRIu64 " != %" PRIu64 " (shape x %s)", len, want,
                        onnx_dtype_name(r->dtype));
            return -1;
        }
        pack_ext *x;
        if (!ext_get(p, loc, &x))
            return -1; /* the file is refused once */
        if (off > x->m.size || len > x->m.size - off) {
            x->past_end++;
            if (off + len > x->need_end)
                x->need_end = off + len;
            pack_refuse(p, what, "external_data",
                        "offset %" PRIu64 " + length %" PRIu64 " runs past the end of %s (%zu bytes)", off, len, loc,
                        x->m.size);
            return -1;
        }
        r->data = x->m.data ? x->m.data + off : NULL;
        if (off + len > x->inb_end)
            x->inb_end = off + len;
    } else if (t->has_raw_data) {
        if (t->raw_data.len != want) {
            pack_refuse(p, what, "tensor_shape", "raw data is %zu bytes, shape x %s needs %" PRIu64, t->raw_data.len,
                        onnx_dtype_name(r->dtype), want);
            return -1;
        }
        r->data = t->raw_data.data;
    } else {
        /* typed fields (small inline constants) */
        size_t n = 0;
        if (r->dtype == T_FLOAT) {
            n = t->n_float_data;
            r->data = (const uint8_t *)t->float_data;
        } else if (r->dtype == T_INT64) {
            n = t->n_int64_data;
            r->data = (const uint8_t *)t->int64_data;
        } else if (r->dtype == T_DOUBLE) {
            n = t->n_double_data;
            r->data = (const uint8_t *)t->double_data;
        } else if (r->dtype == T_UINT64 || r->dtype == T_UINT32) {
            n = t->n_uint64_data;
            if (r->dtype == T_UINT64)
                r->data = (const uint8_t *)t->uint64_data;
            else if (n == r->numel) {
                uint32_t *b = pack_own(p, malloc(n * 4 + 1));
                for (size_t i = 0; i < n; i++)
                    b[i] = (uint32_t)t->uint64_data[i];
                r->data = (const uint8_t *)b;
            }
        } else if (r->dtype == T_INT32) {
            n = t->n_int32_data;
            r->data = (const uint8_t *)t->int32_data;
        } else if (es == 1 || es == 2) { /* one element per int32_data entry */
            n = t->n_int32_data;
            if (n == r->numel) {
                uint8_t *b = pack_own(p, malloc(n * es + 1));
                for (size_t i = 0; i < n; i++) {
                    uint16_t x = (uint16_t)t->int32_data[i];
                    memcpy(b + i * es, &x, es); /* little-endian host */
                }
                r->data = b;
            }
        } else {
            pack_refuse(p, what, "tensor_dtype", "inline %s data in typed fields is not supported", onnx_dtype_name(r->dtype));
            return -1;
        }
        if (n != r->numel) {
            pack_refuse(p, what, "tensor_shape", "%zu inline values, shape has %" PRIu64, n, r->numel);
            return -1;
        }
    }
    v->state = 1;
    return 1;
}

/* The initializer behind a value, looking through ops that keep the bytes in place. */
static int init_of(const G *g, const char *name, int *sliced)
{
    for (int depth = 0; depth < 4; depth++) {
        int vi = val_find(g, name);
        if (vi < 0)
            return -1;
        if (g->v[vi].init)
            return vi;
        int pn = g->v[vi].producer;
        if (pn < 0)
            return -1;
        if (is_op(g, pn, "Slice") && sliced)
            *sliced = 1;
        else if (!is_op(g, pn, "Reshape") && !is_op(g, pn, "Identity") && !is_op(g, pn, "Squeeze") &&
                 !is_op(g, pn, "Unsqueeze") && !is_op(g, pn, "Flatten"))
            return -1;
        name = in(g, pn, 0);
        if (!name)
            return -1;
    }
    return -1;
}

/* ---- emitting tensors ---- */

static int claim(G *g, int vi, const char *role)
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
static void emit_plain(G *g, int n, const char *val, const char *role)
{
    pack *p = g->p;
    int vi = val ? init_of(g, val, NULL) : -1;
    if (vi < 0) {
        pack_refuse(p, role, "graph", "node %s: input \"%s\" is not an initializer", nname(g, n), val ? val : "");
        return;
    }
    if (claim(g, vi, role) <= 0)
        return;
    if (resolve(g, vi) < 0)
        return;
    const rtensor *r = &g->v[vi].rt;
    int dt = float_dtype(r->dtype);
    if (!dt) {
        pack_refuse(p, pack_printf(p, "tensor %s", g->v[vi].name), "tensor_dtype", "%s weight of type %s (want float, float16 or bfloat16)",
                    role, onnx_dtype_name(r->dtype));
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

/* The q4 entry MatMulNBits and GatherBlockQuantized share: [N, K] in blocks of block (kb per row) from the
 * value dvi of node n, scales from value svi (dtype sdt), zero points from value zvi (none when zvi < 0).
 * The caller sets codes, codes_size and what is particular to its op. */
static pack_tensor *add_q4(G *g, int n, int dvi, int svi, int zvi, uint64_t N, uint64_t K, uint64_t block, uint64_t kb,
                           int sdt, const char *op)
{
    const rtensor *S = &g->v[svi].rt, *Z = zvi >= 0 ? &g->v[zvi].rt : NULL;
    pack_tensor *t = pack_add_tensor(g->p);
    t->name = g->v[dvi].name;
    t->role = g->v[dvi].role;
    t->node = nname(g, n);
    t->dtype = OGK_Q4;
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
static const pack_tensor *emit_mnb(G *g, int n, const char *role)
{
    pack *p = g->p;
    int bvi = init_of(g, in(g, n, 1), NULL), svi = init_of(g, in(g, n, 2), NULL);
    int zvi = in(g, n, 3) ? init_of(g, in(g, n, 3), NULL) : -2;
    const char *bname = bvi >= 0 ? g->v[bvi].name : nname(g, n);
    const char *what = pack_printf(p, "tensor %s", bname);
    if (bvi < 0 || svi < 0 || zvi == -1) {
        pack_refuse(p, what, "graph", "MatMulNBits %s: weight, scales or zero points are not initializers", nname(g, n));
        return NULL;
    }
    int fresh = claim(g, bvi, role);
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
    if (bits != 4) {
        pack_refuse(p, what, "unsupported_bits", "MatMulNBits %s has bits=%" PRId64 "; only 4-bit weights are supported",
                    nname(g, n), bits);
        return NULL;
    }
    if (!pow2((uint64_t)block) || block < 16 || block > 4096) {
        pack_refuse(p, what, "unsupported_block",
                    "MatMulNBits %s: block_size %" PRId64 " is not a power of two in 16..4096", nname(g, n), block);
        return NULL;
    }
    if (in(g, n, 4)) {
        pack_refuse(p, what, "g_idx", "MatMulNBits %s has a g_idx input (act-order group index); not supported",
                    nname(g, n));
        return NULL;
    }
    if (resolve(g, bvi) < 0 || resolve(g, svi) < 0 || (zvi >= 0 && resolve(g, zvi) < 0))
        return NULL;
    uint64_t kb = ((uint64_t)K + (uint64_t)block - 1) / (uint64_t)block, blob = (uint64_t)block / 2;
    const rtensor *B = &g->v[bvi].rt, *S = &g->v[svi].rt;
    if (B->dtype != T_UINT8) {
        pack_refuse(p, what, "tensor_dtype", "MatMulNBits weight is %s, want uint8", onnx_dtype_name(B->dtype));
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
                    "MatMulNBits scales are %s, want float, float16 or bfloat16", onnx_dtype_name(S->dtype));
        return NULL;
    }
    if (S->numel != (uint64_t)N * kb || (S->ndim == 2 && (S->dims[0] != (uint64_t)N || S->dims[1] != kb)) || S->ndim > 2) {
        pack_refuse(p, pack_printf(p, "tensor %s", g->v[svi].name), "tensor_shape",
                    "MatMulNBits %s: %" PRIu64 " scales, want N*k_blocks = %" PRIu64, nname(g, n), S->numel, (uint64_t)N * kb);
        return NULL;
    }
    const rtensor *Z = zvi >= 0 ? &g->v[zvi].rt : NULL;
    uint64_t zrow = (kb + 1) / 2;
    if (Z) {
        if (Z->dtype != T_UINT8) {
            pack_refuse(p, pack_printf(p, "tensor %s", g->v[zvi].name), "tensor_dtype",
                        "MatMulNBits zero points are %s; only packed uint8 zero points are supported",
                        onnx_dtype_name(Z->dtype));
            return NULL;
        }
        if (Z->numel != (uint64_t)N * zrow || Z->ndim > 2 || (Z->ndim == 2 && Z->dims[1] != zrow)) {
            pack_refuse(p, pack_printf(p, "tensor %s", g->v[zvi].name), "tensor_shape",
                        "MatMulNBits %s: %" PRIu64 " zero-point bytes, want N*ceil(k_blocks/2) = %" PRIu64, nname(g, n),
                        Z->numel, (uint64_t)N * zrow);
            return NULL;
        }
    }
    pack_tensor *t = add_q4(g, n, bvi, svi, zvi, (uint64_t)N, (uint64_t)K, (uint64_t)block, kb, sdt, "MatMulNBits");
    t->accuracy_level = (int)acc;
    t->codes = B->data;
    t->codes_size = B->size;
    if (in(g, n, 5)) { /* fused bias */
        char *br = pack_printf(p, "%s_bias", role);
        emit_plain(g, n, in(g, n, 5), br);
    }
    return t;
}

/* A GatherBlockQuantized embedding that does not share lm_head's initializers: normalised to the same
 * q4 form (uint8 data, 4 bits, quantize along the last axis). */
static void emit_gbq(G *g, int n, int dvi, int sliced)
{
    pack *p = g->p;
    const char *what = pack_printf(p, "tensor %s", g->v[dvi].name);
    int svi = init_of(g, in(g, n, 2), NULL), zvi = in(g, n, 3) ? init_of(g, in(g, n, 3), NULL) : -2;
    if (svi < 0 || zvi == -1) {
        pack_refuse(p, what, "graph", "GatherBlockQuantized %s: scales or zero points are not initializers", nname(g, n));
        return;
    }
    g->v[svi].used = 1;
    if (zvi >= 0)
        g->v[zvi].used = 1;
    if (claim(g, dvi, "embed") <= 0)
        return;
    int64_t bits = attr_i(g, n, "bits", 4, NULL), block = attr_i(g, n, "block_size", 128, NULL),
            gax = attr_i(g, n, "gather_axis", 0, NULL), qax = attr_i(g, n, "quantize_axis", 1, NULL);
    if (bits != 4) {
        pack_refuse(p, what, "unsupported_bits", "GatherBlockQuantized %s has bits=%" PRId64 "; only 4 is supported",
                    nname(g, n), bits);
        return;
    }
    if (!pow2((uint64_t)block) || block < 16 || block > 4096) {
        pack_refuse(p, what, "unsupported_block",
                    "GatherBlockQuantized %s: block_size %" PRId64 " is not a power of two in 16..4096", nname(g, n), block);
        return;
    }
    if (resolve(g, dvi) < 0 || resolve(g, svi) < 0 || (zvi >= 0 && resolve(g, zvi) < 0))
        return;
    const rtensor *D = &g->v[dvi].rt, *S = &g->v[svi].rt, *Z = zvi >= 0 ? &g->v[zvi].rt : NULL;
    if (sliced || D->dtype != T_UINT8 || D->ndim != 2 || gax != 0 || (qax != 1 && qax != -1)) {
        pack_refuse(p, what, "unsupported_op",
                    "GatherBlockQuantized %s: only uint8 [V, K/2] data gathered on axis 0 and quantised on axis 1 is supported",
                    nname(g, n));
        return;
    }
    uint64_t V = D->dims[0], K = D->dims[1] * 2, kb = (K + (uint64_t)block - 1) / (uint64_t)block, zrow = (kb + 1) / 2;
    int sdt = float_dtype(S->dtype);
    if (!sdt || S->numel != V * kb || (Z && (Z->dtype != T_UINT8 || Z->numel != V * zrow)) || !V || !K) {
        pack_refuse(p, what, "tensor_shape", "GatherBlockQuantized %s: scales/zero points do not match data [%" PRIu64 ", %" PRIu64 "]",
                    nname(g, n), V, K / 2);
        return;
    }
    const uint8_t *codes = D->data;
    if (K % (uint64_t)block) { /* MatMulNBits rows are padded to whole blocks */
        uint64_t row = kb * (uint64_t)block / 2;
        uint8_t *c = pack_own(p, calloc(V, row));
        for (uint64_t r = 0; r < V; r++)
            memcpy(c + r * row, D->data + r * (K / 2), K / 2);
        codes = c;
    }
    pack_tensor *t = add_q4(g, n, dvi, svi, zvi, V, K, (uint64_t)block, kb, sdt, "GatherBlockQuantized");
    t->codes = codes;
    t->codes_size = V * kb * (uint64_t)block / 2;
}

/* ---- the walk ---- */

static int is_norm(const G *g, int n)
{
    return is_op(g, n, "SimplifiedLayerNormalization") || is_op(g, n, "SkipSimplifiedLayerNormalization") ||
           is_op(g, n, "RMSNormalization") || is_op(g, n, "SkipRMSNormalization");
}
static int is_skip_norm(const G *g, int n)
{
    return is_op(g, n, "SkipSimplifiedLayerNormalization") || is_op(g, n, "SkipRMSNormalization");
}
static const char *norm_weight(const G *g, int n) { return in(g, n, is_skip_norm(g, n) ? 2 : 1); }
static int is_attention(const G *g, int n)
{
    return is_op(g, n, "GroupQueryAttention") || is_op(g, n, "MultiHeadAttention") || is_op(g, n, "Attention") ||
           is_op(g, n, "PagedAttention");
}
static int is_activation(const G *g, int n)
{
    static const char *ops[] = {"Sigmoid", "Silu", "Swish", "Gelu", "FastGelu", "QuickGelu", "BiasGelu", "Relu", "Tanh", "Elu"};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (is_op(g, n, ops[i]))
            return 1;
    return 0;
}
/* A projection: MatMulNBits, or MatMul with an initializer weight (refused later: not quantised). */
static int is_linear(const G *g, int n)
{
    if (is_op(g, n, "MatMulNBits"))
        return 1;
    return (is_op(g, n, "MatMul") || is_op(g, n, "Gemm")) && in(g, n, 1) && init_of(g, in(g, n, 1), NULL) >= 0;
}

static const pack_tensor *emit_linear(G *g, int n, const char *role)
{
    if (is_op(g, n, "MatMulNBits"))
        return emit_mnb(g, n, role);
    int vi = init_of(g, in(g, n, 1), NULL);
    if (claim(g, vi, role) > 0)
        pack_refuse(g->p, pack_printf(g->p, "tensor %s", g->v[vi].name), "unsupported_op",
                    "%s is an unquantised %s weight; only int4 MatMulNBits packs are supported", role, node(g, n)->op_type);
    return NULL;
}

typedef struct {
    int *v;
    size_t n, cap;
} ivec;
static void ipush(ivec *a, int x)
{
    if (a->n == a->cap) {
        a->cap = a->cap ? 2 * a->cap : 16;
        a->v = realloc(a->v, a->cap * sizeof *a->v);
        if (!a->v)
            abort();
    }
    a->v[a->n++] = x;
}

/* nodes consuming value name */
static gval *val(const G *g, const char *name)
{
    int i = val_find(g, name);
    return i >= 0 ? &g->v[i] : NULL;
}

/* Forward closure of the nodes reachable from value start, stopping at chain nodes. */
static void block_nodes(const G *g, const char *start, char *mark, ivec *list)
{
    ivec stack = {0};
    gval *s = val(g, start);
    for (int i = 0; s && i < s->ncons; i++)
        ipush(&stack, s->cons[i]);
    while (stack.n) {
        int n = stack.v[--stack.n];
        if (mark[n] || g->chain[n])
            continue;
        mark[n] = 1;
        ipush(list, n);
        Onnx__NodeProto *nd = node(g, n);
        for (size_t o = 0; o < nd->n_output; o++) {
            gval *v = val(g, nd->output[o]);
            for (int i = 0; v && i < v->ncons; i++)
                ipush(&stack, v->cons[i]);
        }
    }
    free(stack.v);
}

static int consumes(const G *g, int n, const char *value)
{
    Onnx__NodeProto *nd = node(g, n);
    for (size_t i = 0; i < nd->n_input; i++)
        if (!strcmp(nd->input[i], value))
            return 1;
    return 0;
}

/* What a pre-attention projection's paths to the attention node carry. */
typedef struct {
    int lin;
    unsigned slots;  /* bit s: reaches attention input s */
    int bias_node;   /* Add with an initializer operand, -1 */
    const char *bias_val;
    int norm_node[3]; /* per slot: q/k norm node, -1 */
    long budget;      /* path steps left: a hostile graph of diamonds must not take forever */
} proj_info;

static void trace(G *g, int n, int attn, int depth, int *path, int plen, proj_info *pi, const char *inblock)
{
    if (depth > 24 || --pi->budget < 0)
        return;
    Onnx__NodeProto *nd = node(g, n);
    for (size_t o = 0; o < nd->n_output; o++) {
        gval *v = val(g, nd->output[o]);
        for (int c = 0; v && c < v->ncons; c++) {
            int m = v->cons[c];
            if (m == attn) {
                Onnx__NodeProto *an = node(g, attn);
                for (size_t s = 0; s < an->n_input && s < 3; s++) {
                    if (strcmp(an->input[s], nd->output[o]))
                        continue;
                    pi->slots |= 1u << s;
                    for (int k = 0; k < plen; k++) {
                        int q = path[k];
                        if (is_op(g, q, "Add")) {
                            for (int j = 0; j < 2; j++) {
                                const char *iv = in(g, q, (size_t)j);
                                if (iv && init_of(g, iv, NULL) >= 0) {
                                    pi->bias_node = q;
                                    pi->bias_val = iv;
                                }
                            }
                        } else if (is_norm(g, q) && norm_weight(g, q) && init_of(g, norm_weight(g, q), NULL) >= 0)
                            pi->norm_node[s] = q;
                        else if (is_op(g, q, "RotaryEmbedding")) {
                            g->p->g.has_rotary_nodes = 1;
                            emit_plain(g, q, in(g, q, 2), "rope.cos");
                            emit_plain(g, q, in(g, q, 3), "rope.sin");
                            g->p->g.rope_interleaved = (int)attr_i(g, q, "interleaved", 0, NULL);
                            int have;
                            int64_t rd = attr_i(g, q, "rotary_embedding_dim", 0, &have);
                            if (have && rd > 0)
                                g->p->g.rope_dim_attr = (int)rd;
                        }
                    }
                }
                continue;
            }
            if (!inblock[m] || is_linear(g, m))
                continue;
            path[plen] = m;
            trace(g, m, attn, depth + 1, path, plen + 1, pi, inblock);
        }
    }
}

static const char *slot_name(unsigned slots, int packed_attn)
{
    if ((slots == 1u && packed_attn) || slots == 7u)
        return "qkv";
    if (slots == 1u)
        return "q";
    if (slots == 2u)
        return "k";
    if (slots == 4u)
        return "v";
    return NULL;
}

static void walk_attention(G *g, int layer, const char *start, int *nodes, size_t nn, const char *inblock)
{
    pack *p = g->p;
    const char *what = pack_printf(p, "layer %d attention", layer);
    int attn = -1, nattn = 0;
    for (size_t i = 0; i < nn; i++)
        if (is_attention(g, nodes[i])) {
            attn = nodes[i];
            nattn++;
        }
    if (nattn != 1) {
        pack_refuse(p, what, "graph", "%d attention nodes between the input norm and the post-attention norm (want 1)", nattn);
        return;
    }
    int packed_attn = !in(g, attn, 1) && !in(g, attn, 2);
    if (is_op(g, attn, "GroupQueryAttention")) {
        int have;
        int64_t h = attr_i(g, attn, "num_heads", 0, &have);
        if (have)
            p->g.gqa_heads = (int)h;
        h = attr_i(g, attn, "kv_num_heads", 0, &have);
        if (have)
            p->g.gqa_kv_heads = (int)h;
        if (attr_i(g, attn, "do_rotary", 0, NULL)) {
            p->g.has_gqa_rotary = 1;
            p->g.rope_interleaved = (int)attr_i(g, attn, "rotary_interleaved", 0, NULL);
            emit_plain(g, attn, in(g, attn, 7), "rope.cos");
            emit_plain(g, attn, in(g, attn, 8), "rope.sin");
        }
    }
    proj_info pi[8];
    int npi = 0, o_node = -1, no = 0;
    for (size_t i = 0; i < nn; i++) {
        int n = nodes[i];
        if (!is_linear(g, n))
            continue;
        if (consumes(g, n, start)) {
            if (npi == 8)
                break;
            proj_info *x = &pi[npi++];
            memset(x, 0, sizeof *x);
            x->lin = n;
            x->bias_node = -1;
            x->norm_node[0] = x->norm_node[1] = x->norm_node[2] = -1;
            x->budget = 100000;
            int path[32];
            trace(g, n, attn, 0, path, 0, x, inblock);
        } else {
            o_node = n;
            no++;
        }
    }
    if (npi != 1 && npi != 3) {
        pack_refuse(p, what, "graph", "%d projections feed the attention (want packed qkv or q, k, v)", npi);
        return;
    }
    if (npi == 1)
        p->g.packed_qkv = 1;
    else
        p->g.separate_qkv = 1;
    for (int i = 0; i < npi; i++) {
        const char *sn = slot_name(pi[i].slots, packed_attn && npi == 1);
        if (!sn || (npi == 3 && packed_attn) || (npi == 1) != !strcmp(sn, "qkv")) {
            pack_refuse(p, what, "graph", "projection %s reaches attention inputs 0x%x; cannot tell q, k, v apart",
                        nname(g, pi[i].lin), pi[i].slots);
            continue;
        }
        emit_linear(g, pi[i].lin, pack_printf(p, "layers.%d.attn.%s", layer, sn));
        if (pi[i].bias_node >= 0) {
            p->g.qkv_bias = 1;
            emit_plain(g, pi[i].bias_node, pi[i].bias_val, pack_printf(p, "layers.%d.attn.%s_bias", layer, sn));
        }
        for (int s = 0; s < 2; s++)
            if (pi[i].norm_node[s] >= 0) {
                p->g.qk_norm = 1;
                emit_plain(g, pi[i].norm_node[s], norm_weight(g, pi[i].norm_node[s]),
                           pack_printf(p, "layers.%d.attn.%s_norm", layer, s ? "k" : "q"));
            }
        if (pi[i].norm_node[2] >= 0)
            pack_refuse(p, what, "graph", "a norm on the value path (%s) is not supported", nname(g, pi[i].norm_node[2]));
    }
    if (no != 1) {
        pack_refuse(p, what, "graph", "%d projections after the attention node (want one o_proj)", no);
        return;
    }
    emit_linear(g, o_node, pack_printf(p, "layers.%d.attn.o", layer));
    /* a bias after o_proj: an Add with an initializer on its output */
    gval *ov = val(g, out(g, o_node, 0));
    for (int c = 0; ov && c < ov->ncons; c++) {
        int m = ov->cons[c];
        if (is_op(g, m, "Add"))
            for (int j = 0; j < 2; j++)
                if (in(g, m, (size_t)j) && init_of(g, in(g, m, (size_t)j), NULL) >= 0)
                    emit_plain(g, m, in(g, m, (size_t)j), pack_printf(p, "layers.%d.attn.o_bias", layer));
    }
}

static void walk_mlp(G *g, int layer, const char *start, int *nodes, size_t nn)
{
    pack *p = g->p;
    const char *what = pack_printf(p, "layer %d mlp", layer);
    int gate = -1, up = -1, down = -1, nfirst = 0, nother = 0;
    for (size_t i = 0; i < nn; i++) {
        int n = nodes[i];
        if (!is_linear(g, n))
            continue;
        if (consumes(g, n, start)) {
            nfirst++;
            int act = 0;
            gval *v = val(g, out(g, n, 0));
            for (int c = 0; v && c < v->ncons; c++)
                act |= is_activation(g, v->cons[c]);
            if (act)
                gate = n;
            else
                up = n;
        } else {
            nother++;
            down = n;
        }
    }
    if (nfirst == 1 && nother == 1) {
        pack_refuse(p, what, "unsupported_op", "one projection feeds the MLP (packed gate_up); not supported");
        return;
    }
    if (nfirst != 2 || nother != 1 || gate < 0 || up < 0) {
        pack_refuse(p, what, "graph", "cannot find gate, up and down projections (%d + %d projections)", nfirst, nother);
        return;
    }
    emit_linear(g, gate, pack_printf(p, "layers.%d.mlp.gate", layer));
    emit_linear(g, up, pack_printf(p, "layers.%d.mlp.up", layer));
    emit_linear(g, down, pack_printf(p, "layers.%d.mlp.down", layer));
}

/* Role order for emission: per layer input_norm, attention, post_attn_norm, mlp. */
static void role_key(const char *role, long *layer, int *rank)
{
    static const char *order[] = {"input_norm", "attn.qkv", "attn.q", "attn.k", "attn.v", "attn.qkv_bias", "attn.q_bias",
                                  "attn.k_bias", "attn.v_bias", "attn.q_norm", "attn.k_norm", "attn.o", "attn.o_bias",
                                  "post_attn_norm", "mlp.gate", "mlp.up", "mlp.down"};
    static const char *top[] = {"final_norm", "lm_head", "rope.cos", "rope.sin"};
    *rank = 0;
    if (!strcmp(role, "embed")) {
        *layer = -1;
        return;
    }
    if (!strncmp(role, "layers.", 7)) {
        char *end;
        *layer = strtol(role + 7, &end, 10);
        if (*end == '.')
            for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
                if (!strcmp(end + 1, order[i]))
                    *rank = (int)i;
        return;
    }
    *layer = 1L << 30;
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
        if (!strcmp(role, top[i]))
            *rank = (int)i;
}

static int cmp_tensor(const void *a, const void *b)
{
    const pack_tensor *x = a, *y = b;
    long la, lb;
    int ra, rb;
    role_key(x->role, &la, &ra);
    role_key(y->role, &lb, &rb);
    if (la != lb)
        return la < lb ? -1 : 1;
    if (ra != rb)
        return ra < rb ? -1 : 1;
    return strcmp(x->role, y->role);
}

static int elem_dtype(const Onnx__ValueInfoProto *vi)
{
    if (!vi || !vi->type || vi->type->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !vi->type->tensor_type)
        return 0;
    return float_dtype(vi->type->tensor_type->elem_type);
}

/* The embedding: a float Gather table, lm_head's own codes (tied), or its own GatherBlockQuantized. */
static void emit_embed(G *g, int emb, int lm)
{
    pack *p = g->p;
    if (is_op(g, emb, "Gather"))
        emit_plain(g, emb, in(g, emb, 0), "embed");
    else {
        int sliced = 0, dvi = init_of(g, in(g, emb, 0), &sliced);
        if (dvi < 0)
            pack_refuse(p, "graph", "graph", "GatherBlockQuantized %s: data is not an initializer", nname(g, emb));
        else if (lm >= 0 && dvi == g->lm_head_b && is_op(g, lm, "MatMulNBits")) {
            /* tied: the same codes; scales and zero points must be the lm_head's too */
            int s1 = init_of(g, in(g, emb, 2), NULL), s2 = init_of(g, in(g, lm, 2), NULL);
            int z1 = in(g, emb, 3) ? init_of(g, in(g, emb, 3), NULL) : -2, z2 = in(g, lm, 3) ? init_of(g, in(g, lm, 3), NULL) : -2;
            if (s1 != s2 || z1 != z2)
                pack_refuse(p, "tensor embed", "graph",
                            "GatherBlockQuantized %s shares lm_head's codes but not its scales / zero points", nname(g, emb));
            else if (attr_i(g, emb, "block_size", 128, NULL) != attr_i(g, lm, "block_size", 0, NULL) ||
                     attr_i(g, emb, "bits", 4, NULL) != attr_i(g, lm, "bits", 0, NULL))
                pack_refuse(p, "tensor embed", "graph", "GatherBlockQuantized %s: bits/block_size differ from lm_head's",
                            nname(g, emb));
            else
                p->g.tied = 1;
        } else
            emit_gbq(g, emb, dvi, sliced);
    }
}

static void walk(G *g)
{
    pack *p = g->p;
    size_t nn = g->g->n_node;
    /* embedding: a Gather / GatherBlockQuantized on the input_ids graph input */
    int ids = val_find(g, "input_ids"), emb = -1;
    for (int i = 0; ids >= 0 && i < g->v[ids].ncons; i++) {
        int n = g->v[ids].cons[i];
        if ((is_op(g, n, "Gather") || is_op(g, n, "GatherBlockQuantized")) && in(g, n, 1) &&
            !strcmp(in(g, n, 1), "input_ids"))
            emb = n;
    }
    if (emb < 0) {
        pack_refuse(p, "graph", "graph", "no embedding: no Gather or GatherBlockQuantized reads the input_ids input");
        return;
    }
    /* the residual stream, norm by norm */
    ivec norms = {0};
    const char *r = out(g, emb, 0);
    for (int guard = 0; r && guard < 100000; guard++) {
        gval *v = val(g, r);
        if (!v)
            break;
        int skip = -1, add = -1;
        for (int c = 0; c < v->ncons; c++) {
            int n = v->cons[c];
            if (g->chain[n])
                continue;
            if (is_norm(g, n) && !is_skip_norm(g, n) && in(g, n, 0) && !strcmp(in(g, n, 0), r) && norm_weight(g, n) &&
                init_of(g, norm_weight(g, n), NULL) >= 0) {
                g->chain[n] = 1;
                ipush(&norms, n);
            }
        }
        for (int c = 0; c < v->ncons; c++) {
            int n = v->cons[c];
            if (g->chain[n])
                continue;
            if (is_skip_norm(g, n) && skip < 0)
                skip = n;
            else if (is_op(g, n, "Add") && add < 0 && in(g, n, 0) && in(g, n, 1) && init_of(g, in(g, n, 0), NULL) < 0 &&
                     init_of(g, in(g, n, 1), NULL) < 0)
                add = n;
        }
        if (skip >= 0) {
            g->chain[skip] = 1;
            ipush(&norms, skip);
            r = out(g, skip, 3);
        } else if (add >= 0 && norms.n) {
            /* a residual Add is part of the chain only when a norm reads its output */
            gval *av = val(g, out(g, add, 0));
            int feeds_norm = 0;
            for (int c = 0; av && c < av->ncons; c++)
                feeds_norm |= is_norm(g, av->cons[c]);
            if (!feeds_norm)
                break;
            g->chain[add] = 1;
            r = out(g, add, 0);
        } else
            break;
    }
    if (norms.n < 3 || norms.n % 2 == 0) {
        /* an NPU dispatch node holding the decoder body is refused by name (pack_read_graph) */
        if (!p->g.ryzenai_nodes)
            pack_refuse(p, "graph", "graph",
                        "cannot follow the residual stream: %zu norms after the embedding (want 2 per layer + 1)", norms.n);
        emit_embed(g, emb, -1);
        free(norms.v);
        return;
    }
    int L = (int)(norms.n - 1) / 2;
    p->g.num_layers = L;
    int n0 = norms.v[0];
    Onnx__AttributeProto *ea = attr(g, n0, "epsilon");
    p->g.rms_eps_f = ea && ea->has_f ? ea->f : 1e-5f; /* the contrib ops' default */
    p->g.rms_eps = p->g.rms_eps_f;
    for (int j = 0; j < (int)norms.n; j++) {
        int n = norms.v[j];
        const char *role = j == (int)norms.n - 1 ? "final_norm"
                           : j % 2 == 0          ? pack_printf(p, "layers.%d.input_norm", j / 2)
                                                 : pack_printf(p, "layers.%d.post_attn_norm", j / 2);
        emit_plain(g, n, norm_weight(g, n), role);
    }
    /* embed (after the norms so a tied embedding can find lm_head) is resolved below */
    char *mark = calloc(nn, 1);
    for (int j = 0; j + 1 < (int)norms.n; j++) {
        ivec nodes = {0};
        memset(mark, 0, nn);
        const char *start = out(g, norms.v[j], 0);
        if (!start) {
            pack_refuse(p, "graph", "graph", "norm %s has no output", nname(g, norms.v[j]));
            continue;
        }
        block_nodes(g, start, mark, &nodes);
        if (j % 2 == 0)
            walk_attention(g, j / 2, start, nodes.v, nodes.n, mark);
        else
            walk_mlp(g, j / 2, start, nodes.v, nodes.n);
        free(nodes.v);
    }
    /* lm_head: the projection reading the final norm */
    int fin = norms.v[norms.n - 1], lm = -1;
    gval *fv = val(g, out(g, fin, 0));
    for (int c = 0; fv && c < fv->ncons; c++)
        if (is_linear(g, fv->cons[c]))
            lm = fv->cons[c];
    if (lm < 0)
        pack_refuse(p, "graph", "graph", "no lm_head projection reads the final norm");
    else {
        g->lm_head_b = init_of(g, in(g, lm, 1), NULL);
        g->lm_head = emit_linear(g, lm, "lm_head");
    }
    emit_embed(g, emb, lm);
    free(mark);
    free(norms.v);
}

static void index_graph(G *g)
{
    Onnx__GraphProto *gp = g->g;
    for (size_t i = 0; i < gp->n_initializer; i++) {
        Onnx__TensorProto *t = gp->initializer[i];
        if (!t->name || !*t->name)
            continue;
        int vi = val_get(g, t->name);
        if (g->v[vi].init)
            pack_refuse(g->p, pack_printf(g->p, "tensor %s", t->name), "graph", "two initializers with this name");
        g->v[vi].init = t;
    }
    /* val_get may move g->v: take the index first (g->v[val_get(..)] may read the old pointer) */
    for (size_t i = 0; i < gp->n_input; i++)
        if (gp->input[i]->name) {
            int vi = val_get(g, gp->input[i]->name);
            g->v[vi].is_input = 1;
        }
    for (size_t n = 0; n < gp->n_node; n++) {
        Onnx__NodeProto *nd = gp->node[n];
        for (size_t i = 0; i < nd->n_input; i++) {
            if (!nd->input[i][0])
                continue;
            int vi = val_get(g, nd->input[i]);
            gval *v = &g->v[vi];
            if (v->ncons == v->capcons) {
                v->capcons = v->capcons ? 2 * v->capcons : 4;
                v->cons = realloc(v->cons, (size_t)v->capcons * sizeof *v->cons);
                if (!v->cons)
                    abort();
            }
            v->cons[v->ncons++] = (int)n;
        }
        for (size_t o = 0; o < nd->n_output; o++)
            if (nd->output[o][0]) {
                int vi = val_get(g, nd->output[o]);
                g->v[vi].producer = (int)n;
            }
    }
}

void pack_read_graph(pack *p)
{
    if (!p->onnx_name) {
        pack_refuse(p, "file model.onnx", "file_missing", "missing: no ONNX decoder in the pack");
        return;
    }
    char *path = NULL;
    if (asprintf(&path, "%s/%s", p->dir, p->onnx_name) < 0)
        abort();
    ogk_error e;
    const char *what = pack_printf(p, "file %s", p->onnx_name);
    if (ogk_map_open(&p->onnx_map, path, &e) != 0) {
        int err = errno;
        free(path);
        pack_refuse(p, what, err == ENOENT ? "file_missing" : "file_unreadable", "%s",
                    strchr(e.msg, ':') ? strchr(e.msg, ':') + 2 : e.msg);
        return;
    }
    free(path);
    p->onnx = p->onnx_map.size ? onnx__model_proto__unpack(NULL, p->onnx_map.size, p->onnx_map.data) : NULL;
    if (!p->onnx || !p->onnx->graph) {
        pack_refuse(p, what, "not_protobuf", "not an ONNX model (protobuf parse failed%s)",
                    p->onnx ? ": no graph" : p->onnx_map.size ? "" : ": empty file");
        return;
    }
    G g = {.p = p, .g = p->onnx->graph, .lm_head_b = -1};
    index_graph(&g);
    g.chain = calloc(g.g->n_node + 1, 1);
    /* facts used by the flavour and the model description */
    for (size_t n = 0; n < g.g->n_node; n++) {
        const char *dom = g.g->node[n]->domain;
        if (dom && !strcmp(dom, "com.ryzenai")) {
            p->g.ryzenai_nodes++;
            pack_refuse(p, pack_printf(p, "node %s", nname(&g, (int)n)), "npu_packed",
                        "com.ryzenai.%s: runs on the Ryzen AI NPU from buffers whose format is not publicly documented",
                        g.g->node[n]->op_type ? g.g->node[n]->op_type : "?");
        }
    }
    p->g.has_position_ids = val_find(&g, "position_ids") >= 0 && g.v[val_find(&g, "position_ids")].is_input;
    for (size_t i = 0; i < g.g->n_output; i++)
        if (g.g->output[i]->name && !strcmp(g.g->output[i]->name, "logits"))
            p->g.io_dtype = elem_dtype(g.g->output[i]);
    if (!p->g.io_dtype && g.g->n_output)
        p->g.io_dtype = elem_dtype(g.g->output[0]);

    walk(&g);
    if (p->n_t > 1)
        qsort(p->t, p->n_t, sizeof *p->t, cmp_tensor);

    /* rope cache facts */
    const pack_tensor *cos = pack_find(p, "rope.cos");
    if (cos && cos->ndim == 2) {
        p->g.rope_rows = cos->shape[0];
        p->g.rope_dim = (int)cos->shape[1] * 2;
    }
    /* bounds of every external initializer, used or not: the data file must hold them all */
    for (size_t i = 0; i < g.nv; i++)
        if (g.v[i].init && !g.v[i].state && g.v[i].init->has_data_location &&
            g.v[i].init->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL)
            resolve(&g, (int)i);
    /* every initializer the walk did not use: weights are refused, plumbing constants counted */
    for (size_t i = 0; i < g.nv; i++) {
        gval *v = &g.v[i];
        if (!v->init || v->used)
            continue;
        int ryz = 0;
        for (int c = 0; c < v->ncons; c++) {
            const char *dom = g.g->node[v->cons[c]]->domain;
            ryz |= dom && !strcmp(dom, "com.ryzenai");
        }
        uint64_t numel = 1;
        for (size_t d = 0; d < v->init->n_dims; d++)
            numel *= v->init->dims[d] > 0 ? (uint64_t)v->init->dims[d] : 0;
        int dt = v->init->data_type;
        int weightlike = numel >= 16 && (float_dtype(dt) || dt == T_UINT8 || dt == T_INT8 || dt == T_UINT4 || dt == T_INT4);
        if (ryz)
            pack_refuse(p, pack_printf(p, "tensor %s", v->name), "npu_packed",
                        "consumed by a com.ryzenai node: packed for the Ryzen AI NPU, format not publicly documented");
        else if (weightlike && v->ncons)
            pack_refuse(p, pack_printf(p, "tensor %s", v->name), "unassigned",
                        "a %s weight the graph walk gave no role (consumed by %s)", onnx_dtype_name(dt),
                        nname(&g, v->cons[0]));
        else
            p->g.ignored_constants++;
    }
    /* a data file shorter than what its initializers need: say it once, on the file */
    for (size_t i = 0; i < p->n_ext; i++)
        /* cut short: several initializers past the end, or one and the file ends inside a tensor
         * (data files are written densely, so an intact file ends where its last tensor ends) */
        if (p->ext[i].ok && (p->ext[i].past_end > 1 || (p->ext[i].past_end == 1 && p->ext[i].inb_end < p->ext[i].m.size)))
            pack_refuse(p, pack_printf(p, "file %s", p->ext[i].loc), "truncated",
                        "%zu bytes, but %d initializer%s extend%s to byte %" PRIu64 ": the file is cut short", p->ext[i].m.size,
                        p->ext[i].past_end, p->ext[i].past_end == 1 ? "" : "s", p->ext[i].past_end == 1 ? "s" : "",
                        p->ext[i].need_end);
    for (size_t i = 0; i < g.nv; i++)
        free(g.v[i].cons);
    free(g.v);
    free(g.ht);
    free(g.chain);
}

/* ---- dims: the config against the tensors ---- */

static long long mget(const pack *p, const char *k)
{
    json_t *v = json_object_get(p->model, k);
    return json_is_integer(v) ? json_integer_value(v) : -1;
}

typedef struct {
    const char *key;
    int reported;
} dimkey;

static void dim_check(pack *p, dimkey *dk, long long want, uint64_t got, const pack_tensor *t, const char *axis)
{
    if (want < 0 || (uint64_t)want == got || dk->reported)
        return;
    dk->reported = 1;
    pack_refuse(p, dk->key, "config_dims",
                "%lld contradicts tensor %s (%s) %s = %" PRIu64, want, t->name, t->role, axis, got);
}

void pack_check_dims(pack *p)
{
    long long H = mget(p, "hidden_size"), V = mget(p, "vocab_size"), nh = mget(p, "num_heads"),
              nkv = mget(p, "num_kv_heads"), hd = mget(p, "head_dim"), I = mget(p, "intermediate_size"),
              L = mget(p, "num_layers");
    dimkey kH = {"genai_config.json: model.decoder.hidden_size", 0}, kV = {"genai_config.json: model.vocab_size", 0},
           kQ = {"genai_config.json: model.decoder.num_attention_heads", 0},
           kKV = {"genai_config.json: model.decoder.num_key_value_heads", 0},
           kHD = {"genai_config.json: model.decoder.head_size", 0}, kI = {"config.json: intermediate_size", 0};
    if (L >= 0 && p->g.num_layers >= 0 && L != p->g.num_layers)
        pack_refuse(p, "genai_config.json: model.decoder.num_hidden_layers", "config_dims",
                    "%lld contradicts the graph, which has %d layers", L, p->g.num_layers);
    if (nh >= 0 && p->g.gqa_heads && nh != p->g.gqa_heads)
        pack_refuse(p, "genai_config.json: model.decoder.num_attention_heads", "config_dims",
                    "%lld contradicts the attention node's num_heads %d", nh, p->g.gqa_heads);
    if (nkv >= 0 && p->g.gqa_kv_heads && nkv != p->g.gqa_kv_heads)
        pack_refuse(p, "genai_config.json: model.decoder.num_key_value_heads", "config_dims",
                    "%lld contradicts the attention node's kv_num_heads %d", nkv, p->g.gqa_kv_heads);
    long long q = nh >= 0 && hd >= 0 ? nh * hd : -1, kv = nkv >= 0 && hd >= 0 ? nkv * hd : -1;
    for (size_t i = 0; i < p->n_t; i++) {
        const pack_tensor *t = &p->t[i];
        const char *r = t->role, *s = strncmp(r, "layers.", 7) ? r : strchr(r + 7, '.') ? strchr(r + 7, '.') + 1 : r;
        uint64_t rows = t->shape[0], cols = t->ndim > 1 ? t->shape[1] : 0;
        if (!strcmp(s, "embed") || !strcmp(s, "lm_head")) {
            dim_check(p, &kV, V, rows, t, "rows");
            dim_check(p, &kH, H, cols, t, "columns");
        } else if (!strcmp(s, "attn.qkv")) {
            dim_check(p, &kH, H, cols, t, "K");
            if (q >= 0 && kv >= 0)
                dim_check(p, &kQ, q + 2 * kv, rows, t, "N (heads*head + 2*kv_heads*head)");
        } else if (!strcmp(s, "attn.q")) {
            dim_check(p, &kH, H, cols, t, "K");
            dim_check(p, &kQ, q, rows, t, "N (heads*head)");
        } else if (!strcmp(s, "attn.k") || !strcmp(s, "attn.v")) {
            dim_check(p, &kH, H, cols, t, "K");
            dim_check(p, &kKV, kv, rows, t, "N (kv_heads*head)");
        } else if (!strcmp(s, "attn.o")) {
            dim_check(p, &kH, H, rows, t, "N");
            dim_check(p, &kQ, q, cols, t, "K (heads*head)");
        } else if (!strcmp(s, "mlp.gate") || !strcmp(s, "mlp.up")) {
            dim_check(p, &kH, H, cols, t, "K");
            dim_check(p, &kI, I, rows, t, "N");
        } else if (!strcmp(s, "mlp.down")) {
            dim_check(p, &kH, H, rows, t, "N");
            dim_check(p, &kI, I, cols, t, "K");
        } else if (!strcmp(s, "input_norm") || !strcmp(s, "post_attn_norm") || !strcmp(s, "final_norm")) {
            dim_check(p, &kH, H, rows, t, "length");
        } else if (!strcmp(s, "attn.q_norm") || !strcmp(s, "attn.k_norm")) {
            dim_check(p, &kHD, hd, rows, t, "length");
        } else if (!strcmp(s, "attn.qkv_bias")) {
            if (q >= 0 && kv >= 0)
                dim_check(p, &kQ, q + 2 * kv, rows, t, "length");
        } else if (!strcmp(s, "attn.q_bias")) {
            dim_check(p, &kQ, q, rows, t, "length");
        } else if (!strcmp(s, "attn.k_bias") || !strcmp(s, "attn.v_bias")) {
            dim_check(p, &kKV, kv, rows, t, "length");
        } else if (!strcmp(s, "rope.cos") || !strcmp(s, "rope.sin")) {
            if (hd >= 0 && cols * 2 > (uint64_t)hd && !kHD.reported) {
                kHD.reported = 1;
                pack_refuse(p, "genai_config.json: model.decoder.head_size", "config_dims",
                            "%lld is smaller than the rotary dim %" PRIu64 " of tensor %s", hd, cols * 2, t->name);
            }
        }
    }
    if (p->g.rope_dim_attr > 0 && p->g.rope_dim > 0 && p->g.rope_dim_attr != p->g.rope_dim)
        pack_refuse(p, "graph", "graph", "RotaryEmbedding rotary_embedding_dim %d != cache width x 2 = %d", p->g.rope_dim_attr,
                    p->g.rope_dim);
}
