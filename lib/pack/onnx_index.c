/* The ONNX index of a pack graph: every value name -> producer, consumers, initializer; ONNX dtype
 * names and sizes. */
#define _GNU_SOURCE
#include "graph_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

const char *pg_onnx_dtype_name(int t)
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
size_t pg_onnx_dtype_size(int t)
{
    switch (t) {
    case T_UINT8: case T_INT8: case T_BOOL: return 1;
    case T_UINT16: case T_INT16: case T_FLOAT16: case T_BFLOAT16: return 2;
    case T_FLOAT: case T_INT32: case T_UINT32: return 4;
    case T_INT64: case T_UINT64: case T_DOUBLE: return 8;
    default: return 0;
    }
}

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

int pg_val_find(const G *g, const char *name)
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

int pg_val_get(G *g, const char *name)
{
    int i = pg_val_find(g, name);
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

void pg_index_graph(G *g)
{
    Onnx__GraphProto *gp = g->g;
    for (size_t i = 0; i < gp->n_initializer; i++) {
        Onnx__TensorProto *t = gp->initializer[i];
        if (!t->name || !*t->name)
            continue;
        int vi = pg_val_get(g, t->name);
        if (g->v[vi].init)
            pack_refuse(g->p, pack_printf(g->p, "tensor %s", t->name), "graph", "two initializers with this name");
        g->v[vi].init = t;
    }
    /* val_get may move g->v: take the index first (g->v[pg_val_get(..)] may read the old pointer) */
    for (size_t i = 0; i < gp->n_input; i++)
        if (gp->input[i]->name) {
            int vi = pg_val_get(g, gp->input[i]->name);
            g->v[vi].is_input = 1;
        }
    for (size_t n = 0; n < gp->n_node; n++) {
        Onnx__NodeProto *nd = gp->node[n];
        for (size_t i = 0; i < nd->n_input; i++) {
            if (!nd->input[i][0])
                continue;
            int vi = pg_val_get(g, nd->input[i]);
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
                int vi = pg_val_get(g, nd->output[o]);
                /* every value has one definition (onnxruntime refuses a graph that gives it two): an
                 * initializer or graph input written by a node, or two nodes writing one name */
                if (g->v[vi].init || g->v[vi].is_input || g->v[vi].producer >= 0)
                    pack_refuse(g->p, pack_printf(g->p, "node %s", nd->name ? nd->name : nd->op_type ? nd->op_type : "?"),
                                "graph", "writes %s, which %s", nd->output[o],
                                g->v[vi].init ? "is an initializer" : g->v[vi].is_input ? "is a graph input" : "another node writes");
                else
                    g->v[vi].producer = (int)n;
            }
    }
}

int pg_op_domain_ok(const char *op, const char *domain)
{
    static const char *const ms_only[] = {"MatMulNBits", "GatherBlockQuantized", "GroupQueryAttention", "MultiHeadAttention",
                                          "PagedAttention", "RotaryEmbedding", "SkipSimplifiedLayerNormalization",
                                          "SkipLayerNormalization", "SkipRMSNormalization", "FastGelu", "QuickGelu",
                                          "BiasGelu"};
    static const char *const both[] = {"Attention", "Gelu", "SimplifiedLayerNormalization", "LayerNormalization",
                                       "RMSNormalization"};
    int onnx = !domain || !*domain || !strcmp(domain, "ai.onnx"), ms = domain && !strcmp(domain, "com.microsoft");
    for (size_t i = 0; i < sizeof ms_only / sizeof ms_only[0]; i++)
        if (!strcmp(op, ms_only[i]))
            return ms;
    for (size_t i = 0; i < sizeof both / sizeof both[0]; i++)
        if (!strcmp(op, both[i]))
            return onnx || ms;
    return onnx;
}

int pg_op_walked(const char *op)
{
    static const char *const ops[] = {"MatMulNBits", "GatherBlockQuantized", "GroupQueryAttention", "MultiHeadAttention",
                                      "PagedAttention", "RotaryEmbedding", "SkipSimplifiedLayerNormalization",
                                      "SkipLayerNormalization", "SkipRMSNormalization", "FastGelu", "QuickGelu", "BiasGelu",
                                      "Attention", "Gelu", "SimplifiedLayerNormalization", "LayerNormalization",
                                      "RMSNormalization", "Add", "Mul", "Div", "Sigmoid", "Silu", "Swish", "Tanh", "Relu",
                                      "Elu", "Cast", "Reshape", "Split", "Gather", "Identity", "MatMul", "Gemm", "Greater",
                                      "Shape", "Constant", "If", "Slice", "Squeeze", "Unsqueeze", "Flatten"};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (!strcmp(op, ops[i]))
            return 1;
    return 0;
}
