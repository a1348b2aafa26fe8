/* lib/pack graph internals: the pieces of the ONNX graph reader shared by its files. Not a public header.
 *   onnx_index.c    the ONNX index: every value name -> producer, consumers, initializer; dtype names
 *   initializers.c  an initializer's bytes (inline or external, mmapped and bounds-checked), normalised
 *   quant.c         emitting tensors: plain weights, and the MatMulNBits / GatherBlockQuantized checks
 *   walk.c          the role walk along the residual stream (see graph.c for the whole story)
 *   graph.c         parse, index, walk, refuse what is left; the config against the tensors */
#ifndef OGK_PACK_GRAPH_INT_H
#define OGK_PACK_GRAPH_INT_H

#include <string.h>

#include "pack_int.h"

enum {
    T_FLOAT = 1, T_UINT8 = 2, T_INT8 = 3, T_UINT16 = 4, T_INT16 = 5, T_INT32 = 6, T_INT64 = 7, T_STRING = 8,
    T_BOOL = 9, T_FLOAT16 = 10, T_DOUBLE = 11, T_UINT32 = 12, T_UINT64 = 13, T_BFLOAT16 = 16, T_UINT4 = 21, T_INT4 = 22,
};

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
    char *seen;        /* per node: explained by the walk of its block */
    int join;          /* the residual add or skip norm closing the block being walked, -1 */
    const char *join_res; /* the residual stream value it reads */
    const pack_tensor *lm_head;
    int lm_head_b;     /* gval of lm_head's B */
    int rope_if;       /* 1 + the If node picking the rotary caches, once walked (every layer reads it) */
} G;

static inline Onnx__NodeProto *node(const G *g, int i) { return g->g->node[i]; }
static inline const char *in(const G *g, int n, size_t slot)
{
    Onnx__NodeProto *nd = node(g, n);
    return slot < nd->n_input && nd->input[slot][0] ? nd->input[slot] : NULL;
}
static inline const char *out(const G *g, int n, size_t slot)
{
    Onnx__NodeProto *nd = node(g, n);
    return slot < nd->n_output && nd->output[slot][0] ? nd->output[slot] : NULL;
}
/* The domain an op the walk knows must come from: onnxruntime's contrib ops are com.microsoft's alone (an
 * ONNX RotaryEmbedding, opset 23, orders its inputs otherwise), Attention and Gelu are in both, the norms
 * without Skip are taken from either; every other op is ONNX's ("" or "ai.onnx"). */
int pg_op_domain_ok(const char *op, const char *domain);
int pg_op_walked(const char *op); /* an op the walk matches by name (its domain checked up front) */
/* op_type is optional in the proto: a node without one (NULL here) is no op we know */
static inline int is_op(const G *g, int n, const char *op)
{
    return n >= 0 && node(g, n)->op_type && !strcmp(node(g, n)->op_type, op) && pg_op_domain_ok(op, node(g, n)->domain);
}
static inline const char *nname(const G *g, int n)
{
    return node(g, n)->name ? node(g, n)->name : node(g, n)->op_type ? node(g, n)->op_type : "?";
}

static inline Onnx__AttributeProto *attr(const G *g, int n, const char *name)
{
    Onnx__NodeProto *nd = node(g, n);
    for (size_t i = 0; i < nd->n_attribute; i++)
        if (nd->attribute[i]->name && !strcmp(nd->attribute[i]->name, name))
            return nd->attribute[i];
    return NULL;
}
static inline int64_t attr_i(const G *g, int n, const char *name, int64_t dflt, int *have)
{
    Onnx__AttributeProto *a = attr(g, n, name);
    if (have)
        *have = a && a->has_i;
    return a && a->has_i ? a->i : dflt;
}

static inline int float_dtype(int t) { return t == T_FLOAT ? OGK_F32 : t == T_FLOAT16 ? OGK_F16 : t == T_BFLOAT16 ? OGK_BF16 : 0; }

/* onnx_index.c */
const char *pg_onnx_dtype_name(int t);
size_t pg_onnx_dtype_size(int t); /* bytes per element, 0 for packed sub-byte and unsupported types */
int pg_val_find(const G *g, const char *name); /* -1 when absent */
int pg_val_get(G *g, const char *name);        /* adds it when absent (may move g->v) */
void pg_index_graph(G *g);
/* nodes consuming value name */
static inline gval *val(const G *g, const char *name)
{
    int i = pg_val_find(g, name);
    return i >= 0 ? &g->v[i] : NULL;
}

/* initializers.c */
int pg_resolve(G *g, int vi);                          /* 1 bytes ok, 0 refused (state set either way) */
int pg_init_of(const G *g, const char *name, int *sliced); /* gval index of the initializer behind name, -1 */

/* quant.c */
int pg_claim(G *g, int vi, const char *role);
void pg_emit_plain(G *g, int n, const char *val, const char *role);
const pack_tensor *pg_emit_mnb(G *g, int n, const char *role);
void pg_emit_gbq(G *g, int n, int dvi, int sliced);

/* walk.c */
void pg_walk(G *g);
int pg_cmp_tensor(const void *a, const void *b);
int pg_elem_dtype(const Onnx__ValueInfoProto *vi);

#endif
