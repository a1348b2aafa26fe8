/* The role walk (graph.c's header tells the whole story): the residual stream norm by norm, each block
 * between two norms attention or MLP, projections traced to their slots. */
#define _GNU_SOURCE
#include "graph_int.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the walk ---- */

/* LayerNorm (mean subtracted; weight, then bias): ONNX LayerNormalization [x, w, b], com.microsoft
 * SkipLayerNormalization [x, skip, w, b, pre-bias] (OLMo) */
static int is_layer_norm(const G *g, int n) { return is_op(g, n, "LayerNormalization") || is_op(g, n, "SkipLayerNormalization"); }
static int is_norm(const G *g, int n)
{
    return is_op(g, n, "SimplifiedLayerNormalization") || is_op(g, n, "SkipSimplifiedLayerNormalization") ||
           is_op(g, n, "RMSNormalization") || is_op(g, n, "SkipRMSNormalization") || is_layer_norm(g, n);
}
static int is_skip_norm(const G *g, int n)
{
    return is_op(g, n, "SkipSimplifiedLayerNormalization") || is_op(g, n, "SkipRMSNormalization") ||
           is_op(g, n, "SkipLayerNormalization");
}
static const char *norm_weight(const G *g, int n) { return in(g, n, is_skip_norm(g, n) ? 2 : 1); }
/* a LayerNorm's bias (after the weight), NULL when it has none */
static const char *norm_bias(const G *g, int n)
{
    const char *b = is_layer_norm(g, n) ? in(g, n, is_skip_norm(g, n) ? 3 : 2) : NULL;
    return b && *b ? b : NULL;
}
static int is_attention(const G *g, int n)
{
    return is_op(g, n, "GroupQueryAttention") || is_op(g, n, "MultiHeadAttention") || is_op(g, n, "Attention") ||
           is_op(g, n, "PagedAttention");
}
/* SiLU, the only gate activation the runtime applies: x * Sigmoid(x) as two nodes, or one Silu / Swish
 * (alpha 1) node; x is the gate projection's output. The node writing SiLU(x) (act, or the Mul), -1 when
 * act is not one. */
static int silu_out(const G *g, int act, const char *x)
{
    if (is_op(g, act, "Silu"))
        return act;
    if (is_op(g, act, "Swish")) {
        Onnx__AttributeProto *a = attr(g, act, "alpha");
        return !a || !a->has_f || a->f == 1.0f ? act : -1;
    }
    const char *sv = out(g, act, 0);
    gval *v = is_op(g, act, "Sigmoid") && sv ? val(g, sv) : NULL;
    for (int c = 0; v && c < v->ncons; c++) {
        int m = v->cons[c];
        const char *a = in(g, m, 0), *b = in(g, m, 1);
        if (is_op(g, m, "Mul") && a && b && ((!strcmp(a, x) && !strcmp(b, sv)) || (!strcmp(a, sv) && !strcmp(b, x))))
            return m;
    }
    return -1;
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
    return (is_op(g, n, "MatMul") || is_op(g, n, "Gemm")) && in(g, n, 1) && pg_init_of(g, in(g, n, 1), NULL) >= 0;
}

/* One float from a tensor's bytes of ONNX type dt. */
static int float_at(const uint8_t *d, int dt, double *out)
{
    if (dt == T_FLOAT) {
        float f;
        memcpy(&f, d, 4);
        *out = f;
    } else if (dt == T_DOUBLE)
        memcpy(out, d, 8);
    else if (dt == T_FLOAT16 || dt == T_BFLOAT16) {
        uint16_t h;
        memcpy(&h, d, 2);
        *out = dt == T_FLOAT16 ? ogk_f16_to_f32(h) : ogk_bf16_to_f32(h);
    } else
        return -1;
    return 0;
}

/* The attribute `which` of the Constant node writing value name (NULL: no such node or attribute) */
static Onnx__AttributeProto *const_attr(const G *g, const char *name, const char *which)
{
    gval *v = name ? val(g, name) : NULL;
    return v && v->producer >= 0 && is_op(g, v->producer, "Constant") ? attr(g, v->producer, which) : NULL;
}

/* A one-element tensor (every dim 1), or NULL */
static Onnx__TensorProto *one_element(Onnx__AttributeProto *a)
{
    Onnx__TensorProto *t = a ? a->t : NULL;
    if (!t || !t->has_data_type)
        return NULL;
    for (size_t i = 0; i < t->n_dims; i++)
        if (t->dims[i] != 1)
            return NULL;
    return t;
}

/* The value of a one-element float constant: an initializer, or a Constant node's value / value_float (the
 * builder's "/model/constants/FLOAT/48.0"). 0 with *out set; -1 when name is neither. */
static int scalar_of(G *g, const char *name, double *out)
{
    int vi = name ? pg_init_of(g, name, NULL) : -1;
    if (vi >= 0) {
        if (pg_resolve(g, vi) <= 0 || g->v[vi].rt.numel != 1 || !g->v[vi].rt.data)
            return -1;
        g->v[vi].used = 1;
        return float_at(g->v[vi].rt.data, g->v[vi].rt.dtype, out);
    }
    Onnx__AttributeProto *a = const_attr(g, name, "value_float");
    if (a && a->has_f) {
        *out = a->f;
        return 0;
    }
    Onnx__TensorProto *t = one_element(const_attr(g, name, "value"));
    if (!t)
        return -1;
    size_t es = pg_onnx_dtype_size(t->data_type);
    if (t->has_raw_data)
        return es && t->raw_data.len == es ? float_at(t->raw_data.data, t->data_type, out) : -1;
    if (t->data_type == T_FLOAT && t->n_float_data == 1)
        *out = t->float_data[0];
    else if (t->data_type == T_DOUBLE && t->n_double_data == 1)
        *out = t->double_data[0];
    else if ((t->data_type == T_FLOAT16 || t->data_type == T_BFLOAT16) && t->n_int32_data == 1) {
        uint16_t h = (uint16_t)t->int32_data[0];
        return float_at((const uint8_t *)&h, t->data_type, out);
    } else
        return -1;
    return 0;
}

/* The value of a one-element integer constant (int64 or int32): an initializer, or a Constant node's value /
 * value_int. 0 with *out set; -1 otherwise. */
static int int_scalar_of(G *g, const char *name, int64_t *out)
{
    const uint8_t *d = NULL;
    int dt = 0;
    int vi = name ? pg_init_of(g, name, NULL) : -1;
    Onnx__TensorProto *t = NULL;
    if (vi >= 0) {
        if (pg_resolve(g, vi) <= 0 || g->v[vi].rt.numel != 1 || !g->v[vi].rt.data)
            return -1;
        g->v[vi].used = 1;
        d = g->v[vi].rt.data, dt = g->v[vi].rt.dtype;
    } else {
        Onnx__AttributeProto *a = const_attr(g, name, "value_int");
        if (a && a->has_i) {
            *out = a->i;
            return 0;
        }
        if (!(t = one_element(const_attr(g, name, "value"))))
            return -1;
        dt = t->data_type;
        if (t->has_raw_data && t->raw_data.len == pg_onnx_dtype_size(dt))
            d = t->raw_data.data;
        else if (dt == T_INT64 && t->n_int64_data == 1) {
            *out = t->int64_data[0];
            return 0;
        } else if (dt == T_INT32 && t->n_int32_data == 1) {
            *out = t->int32_data[0];
            return 0;
        }
    }
    if (d && dt == T_INT64) {
        memcpy(out, d, 8);
        return 0;
    }
    if (d && dt == T_INT32) {
        int32_t x;
        memcpy(&x, d, 4);
        *out = x;
        return 0;
    }
    return -1;
}

/* through Casts: the node producing v, or -1 */
static int producer_through_casts(const G *g, const char *v)
{
    for (int hops = 0; v && hops < 8; hops++) {
        gval *x = val(g, v);
        if (!x || x->producer < 0)
            return -1;
        if (!is_op(g, x->producer, "Cast"))
            return x->producer;
        v = in(g, x->producer, 0);
    }
    return -1;
}

/* The graph input v is, through Casts and Identities alone (never an initializer), or NULL */
static const gval *fed_input(const G *g, const char *v)
{
    for (int hops = 0; v && hops < 8; hops++) {
        gval *x = val(g, v);
        if (!x)
            return NULL;
        if (x->producer < 0)
            return x->is_input && !x->init ? x : NULL;
        if (!is_op(g, x->producer, "Cast") && !is_op(g, x->producer, "Identity"))
            return NULL;
        v = in(g, x->producer, 0);
    }
    return NULL;
}

/* v is a graph input as fed: the runtime's [batch, total length] attention_mask, a padding mask that says
 * nothing of causality */
static int padding_mask_only(const G *g, const char *v) { return fed_input(g, v) != NULL; }

/* v is the graph input the runtime feeds positions to (decoder.inputs.position_ids) as fed: a
 * RotaryEmbedding's positions computed in the graph (shifted, scaled) are not the runtime's */
static int is_positions(const G *g, const char *v)
{
    const gval *x = fed_input(g, v);
    return x && !strcmp(x->name, g->p->g.name_pos);
}

/* The output of an If branch named out: the value of the Constant node (or the branch initializer) writing
 * it, registered under a name of its own ("<If>/then:<out>") as an initializer. -1 when it is neither. */
static int branch_const(G *g, int ifn, const Onnx__GraphProto *b, const char *which, const char *out)
{
    Onnx__TensorProto *t = NULL;
    for (size_t i = 0; b && out && i < b->n_node && !t; i++) {
        const Onnx__NodeProto *nd = b->node[i];
        if (nd->op_type && !strcmp(nd->op_type, "Constant") && nd->n_output == 1 && nd->output[0] && !strcmp(nd->output[0], out))
            for (size_t k = 0; k < nd->n_attribute; k++)
                if (nd->attribute[k]->name && !strcmp(nd->attribute[k]->name, "value"))
                    t = nd->attribute[k]->t;
    }
    for (size_t i = 0; b && out && i < b->n_initializer && !t; i++)
        if (b->initializer[i]->name && !strcmp(b->initializer[i]->name, out))
            t = b->initializer[i];
    if (!t)
        return -1;
    int vi = pg_val_get(g, pack_printf(g->p, "%s/%s:%s", nname(g, ifn), which, out));
    g->v[vi].init = t;
    return vi;
}

/* The RoPE caches a rotary node (RotaryEmbedding, or GroupQueryAttention with do_rotary) reads: initializers
 * (roles rope.cos / rope.sin), or the two outputs of an If that picks between two pairs of Constant caches
 * by the total sequence length (Phi-3's LongRoPE as onnxruntime-genai's builder writes it: the then branch
 * when attention_mask's length > T, the long factors, as rope.cos_long / rope.sin_long; the else branch as
 * rope.cos / rope.sin; T the description's rope.long_after). */
static void emit_rope(G *g, int n, const char *cos, const char *sin)
{
    pack *p = g->p;
    gval *cv = cos ? val(g, cos) : NULL;
    int ifn = cv && !cv->init && cv->producer >= 0 && is_op(g, cv->producer, "If") ? cv->producer : -1;
    if (ifn < 0) {
        pg_emit_plain(g, n, cos, "rope.cos");
        pg_emit_plain(g, n, sin, "rope.sin");
        return;
    }
    if (g->rope_if == ifn + 1)
        return; /* another layer's rotary node: walked already */
    g->rope_if = ifn + 1;
    const char *what = pack_printf(p, "node %s", nname(g, ifn));
    Onnx__NodeProto *nd = node(g, ifn);
    if (!sin || nd->n_output != 2 || !out(g, ifn, 0) || !out(g, ifn, 1) || strcmp(out(g, ifn, 0), cos) ||
        strcmp(out(g, ifn, 1), sin)) {
        pack_refuse(p, what, "unsupported_op", "If %s: the rotary caches are not its two outputs (cos, sin) in order", nname(g, ifn));
        return;
    }
    /* the condition: Greater(total sequence length, T), the length being attention_mask's dim 1 */
    int gt = producer_through_casts(g, in(g, ifn, 0)), ga = gt >= 0 && is_op(g, gt, "Greater") ? producer_through_casts(g, in(g, gt, 0)) : -1;
    int sh = ga >= 0 && is_op(g, ga, "Gather") ? producer_through_casts(g, in(g, ga, 0)) : -1;
    int64_t T = 0, idx = -1;
    gval *mask = sh >= 0 && is_op(g, sh, "Shape") && in(g, sh, 0) ? val(g, in(g, sh, 0)) : NULL;
    if (!mask || !mask->is_input || strcmp(mask->name, g->p->g.name_mask) || int_scalar_of(g, in(g, ga, 1), &idx) ||
        idx != 1 || attr_i(g, ga, "axis", 0, NULL) != 0 || attr_i(g, sh, "start", 0, NULL) != 0 ||
        int_scalar_of(g, in(g, gt, 1), &T) || T < 1 || T > INT32_MAX) {
        pack_refuse(p, what, "unsupported_op",
                    "If %s picks the rotary caches on a condition other than Greater(attention_mask's length, a constant)",
                    nname(g, ifn));
        return;
    }
    Onnx__AttributeProto *tb = attr(g, ifn, "then_branch"), *eb = attr(g, ifn, "else_branch");
    const Onnx__GraphProto *bt = tb ? tb->g : NULL, *be = eb ? eb->g : NULL;
    static const char *const roles[2][2] = {{"rope.cos", "rope.sin"}, {"rope.cos_long", "rope.sin_long"}};
    for (int k = 0; k < 2; k++) { /* k 0: else (short), 1: then (long) */
        const Onnx__GraphProto *b = k ? bt : be;
        for (int j = 0; j < 2; j++) {
            const char *bo = b && b->n_output == 2 && b->output[j]->name ? b->output[j]->name : NULL;
            int vi = branch_const(g, ifn, b, k ? "then" : "else", bo);
            if (vi < 0) {
                pack_refuse(p, what, "unsupported_op", "If %s: its %s branch's output %d is not a Constant node's value",
                            nname(g, ifn), k ? "then" : "else", j);
                return;
            }
            pg_emit_plain(g, ifn, g->v[vi].name, roles[k][j]);
        }
    }
    if (p->g.rope_long_after && p->g.rope_long_after != T)
        pack_refuse(p, what, "unsupported_op", "rotary caches switched after %lld positions here, after %lld elsewhere",
                    (long long)T, (long long)p->g.rope_long_after);
    p->g.rope_long_after = T;
}

/* The other operand of a two-input node whose operand `x` is given (NULL when x is not one of them). */
static const char *other_input(const G *g, int n, const char *x)
{
    const char *a = in(g, n, 0), *b = in(g, n, 1);
    if (!a || !b || node(g, n)->n_input != 2)
        return NULL;
    return !strcmp(a, x) ? b : !strcmp(b, x) ? a : NULL;
}

/* The only consumer of value v, -1 when it has none or several. */
static int only_consumer(const G *g, const char *v)
{
    gval *x = v ? val(g, v) : NULL;
    return x && x->ncons == 1 ? x->cons[0] : -1;
}

/* v, or the output of the float Casts that are its only consumers in a row (the builder's fp16 Gemma 2
 * graphs keep the residual stream and the norms in fp32: Casts around them change no role) */
static const char *through_casts(const G *g, const char *v)
{
    for (int guard = 0; v && guard < 4; guard++) {
        int n = only_consumer(g, v);
        if (n < 0 || !is_op(g, n, "Cast"))
            break;
        int64_t to = attr_i(g, n, "to", 0, NULL);
        if (to != T_FLOAT && to != T_FLOAT16 && to != T_BFLOAT16)
            break;
        v = out(g, n, 0);
    }
    return v;
}

/* v is the graph output the runtime reads the logits from (genai_config.json's decoder.outputs.logits) */
static int is_logits(const G *g, const char *v)
{
    if (!v || strcmp(v, g->p->g.name_logits))
        return 0;
    for (size_t i = 0; i < g->g->n_output; i++)
        if (g->g->output[i]->name && !strcmp(g->g->output[i]->name, v))
            return 1;
    return 0;
}

/* What the runtime's norms compute, or a refusal naming norm n (emitted as role): the model's one epsilon,
 * over the last axis, no bias added before the norm (the Skip ops' optional last input), and the kind
 * (want_layer: 1 LayerNorm, 0 RMSNorm). */
static void check_norm(G *g, int n, const char *role, int want_layer)
{
    pack *p = g->p;
    Onnx__AttributeProto *ea = attr(g, n, "epsilon");
    float eps = ea && ea->has_f ? ea->f : 1e-5f; /* the contrib ops' default */
    if (eps != p->g.rms_eps_f)
        pack_refuse(p, role, "unsupported_op", "norm %s: epsilon %g differs from the other norms' %g", nname(g, n),
                    (double)eps, (double)p->g.rms_eps_f);
    int64_t axis = attr_i(g, n, "axis", -1, NULL);
    if (axis != -1 && axis != 2) /* the last of [batch, sequence, hidden] */
        pack_refuse(p, role, "unsupported_op", "norm %s: axis %" PRId64 " (the runtime normalises the last axis)", nname(g, n),
                    axis);
    const char *pre = is_skip_norm(g, n) ? in(g, n, is_layer_norm(g, n) ? 4 : 3) : NULL;
    if (pre && *pre)
        pack_refuse(p, role, "unsupported_op", "norm %s: a bias (%s) added before the norm is not supported", nname(g, n), pre);
    if (is_layer_norm(g, n) != want_layer)
        pack_refuse(p, role, "unsupported_op", "norm %s: %s where the model's norms are %s", nname(g, n),
                    want_layer ? "an RMSNorm" : "a LayerNorm (mean subtracted)", want_layer ? "LayerNorms" : "RMSNorms");
}

/* A sandwich norm (Gemma 2): a plain RMSNorm reading a block's output before the residual add. Emitted
 * as role; the norm node, -1 when there is none. */
static int emit_out_norm(G *g, const char *v, const char *role)
{
    v = through_casts(g, v);
    gval *x = v ? val(g, v) : NULL;
    for (int c = 0; x && c < x->ncons; c++) {
        int n = x->cons[c];
        if (is_norm(g, n) && !is_skip_norm(g, n) && !g->chain[n] && in(g, n, 0) && !strcmp(in(g, n, 0), v) &&
            norm_weight(g, n) && pg_init_of(g, norm_weight(g, n), NULL) >= 0) {
            check_norm(g, n, role, 0);
            pg_emit_plain(g, n, norm_weight(g, n), role);
            g->seen[n] = 1;
            return n;
        }
    }
    return -1;
}

static const pack_tensor *emit_linear(G *g, int n, const char *role)
{
    if (is_op(g, n, "MatMulNBits"))
        return pg_emit_mnb(g, n, role);
    /* an unquantised lm_head (the builder's nodes_to_exclude=/lm_head/MatMul): its float [K, N] weight as it is */
    if (!strcmp(role, "lm_head") && is_op(g, n, "MatMul")) {
        pg_emit_plain(g, n, in(g, n, 1), role);
        return NULL;
    }
    int vi = pg_init_of(g, in(g, n, 1), NULL);
    if (pg_claim(g, vi, role) > 0)
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

static int float_cast(const G *g, int n)
{
    int64_t to = attr_i(g, n, "to", 0, NULL);
    return is_op(g, n, "Cast") && (to == T_FLOAT || to == T_FLOAT16 || to == T_BFLOAT16);
}

/* The end of a block: the value it adds to the residual stream (through float Casts) must be the other
 * operand of the residual add or skip norm that closes it (g->join, which reads g->join_res); every node
 * of the block the walk did not explain is refused, float Casts and Identities aside. */
static void block_end(G *g, const char *what, const char *v, const int *nodes, size_t nn)
{
    pack *p = g->p;
    v = through_casts(g, v);
    const char *a = g->join >= 0 ? in(g, g->join, 0) : NULL, *b = g->join >= 0 ? in(g, g->join, 1) : NULL;
    if (!v || !a || !b || !g->join_res ||
        !((!strcmp(a, v) && !strcmp(b, g->join_res)) || (!strcmp(b, v) && !strcmp(a, g->join_res))))
        pack_refuse(p, what, "unsupported_op", "its output %s is not what %s adds to the residual stream", v ? v : "(none)",
                    g->join >= 0 ? nname(g, g->join) : "the next norm");
    size_t left = 0;
    int first = -1;
    for (size_t i = 0; i < nn; i++)
        if (!g->seen[nodes[i]] && !float_cast(g, nodes[i]) && !is_op(g, nodes[i], "Identity") && !left++)
            first = nodes[i];
    if (left)
        pack_refuse(p, what, "unsupported_op",
                    "%s %s%s inside the block: not part of what the runtime computes there",
                    node(g, first)->op_type ? node(g, first)->op_type : "node", nname(g, first),
                    left > 1 ? pack_printf(p, " (and %zu more nodes)", left - 1) : "");
}

/* What a pre-attention projection's paths to the attention node carry. */
typedef struct {
    int lin;
    unsigned slots;  /* bit s: reaches attention input s */
    int bias_node;   /* Add with an initializer operand, -1 */
    const char *bias_val;
    int norm_node[3]; /* per slot: q/k norm node, -1 */
    int rot_node[3];  /* per slot: RotaryEmbedding node, -1 */
    int bad;          /* the first node on a path that is not what the runtime applies there, -1 */
    const char *why;
    long budget;      /* path steps left: a hostile graph of diamonds must not take forever */
} proj_info;

/* The input slot of node `to` reading an output of node `from` (the output's index in *oidx), -1 when none. */
static int link_slot(const G *g, int from, int to, int *oidx)
{
    Onnx__NodeProto *a = node(g, from), *b = node(g, to);
    for (size_t i = 0; i < b->n_input; i++)
        for (size_t o = 0; b->input[i][0] && o < a->n_output; o++)
            if (!strcmp(b->input[i], a->output[o])) {
                *oidx = (int)o;
                return (int)i;
            }
    return -1;
}

static void path_bad(proj_info *pi, int n, const char *why)
{
    if (pi->bad < 0) {
        pi->bad = n;
        pi->why = why;
    }
}

/* The three sizes of a Split: its input 1 (an int64 initializer or Constant) or its split attribute. 0 ok. */
static int split_sizes(G *g, int n, int64_t sz[3])
{
    Onnx__AttributeProto *a = attr(g, n, "split");
    if (a && a->n_ints == 3) {
        memcpy(sz, a->ints, 3 * sizeof *sz);
        return 0;
    }
    const char *nm = in(g, n, 1);
    int vi = nm ? pg_init_of(g, nm, NULL) : -1;
    if (vi >= 0) {
        if (pg_resolve(g, vi) <= 0 || g->v[vi].rt.dtype != T_INT64 || g->v[vi].rt.numel != 3 || !g->v[vi].rt.data)
            return -1;
        g->v[vi].used = 1;
        memcpy(sz, g->v[vi].rt.data, 3 * sizeof *sz);
        return 0;
    }
    Onnx__AttributeProto *ca = const_attr(g, nm, "value");
    Onnx__TensorProto *t = ca ? ca->t : NULL;
    if (!t || t->data_type != T_INT64)
        return -1;
    if (t->has_raw_data && t->raw_data.len == 3 * sizeof *sz)
        memcpy(sz, t->raw_data.data, 3 * sizeof *sz);
    else if (t->n_int64_data == 3)
        memcpy(sz, t->int64_data, 3 * sizeof *sz);
    else
        return -1;
    return 0;
}

/* A whole path from the projection to attention input s: what the runtime applies between them, in its
 * order (bias, split of a packed q|k|v, q/k norm, rotation), layout Reshapes and float Casts anywhere;
 * any other node, or these out of order, twice, on the wrong input or slot, is marked bad. */
static void path_done(G *g, proj_info *pi, const int *path, int plen, int attn, int s)
{
    int prev = pi->lin, rank = 0;
    for (int k = 0; k <= plen; k++) {
        int q = k < plen ? path[k] : attn, oi = -1, slot = link_slot(g, prev, q, &oi);
        if (k == plen && slot != s)
            slot = s, oi = 0; /* attn reads it at s (trace checked); a Split's output index from the name: */
        if (k == plen && is_op(g, prev, "Split"))
            for (size_t o = 0; o < node(g, prev)->n_output; o++)
                if (out(g, prev, o) && !strcmp(out(g, prev, o), in(g, attn, (size_t)s)))
                    oi = (int)o;
        if (is_op(g, prev, "Split") && oi != s)
            path_bad(pi, prev, pack_printf(g->p, "its output %d goes to attention input %d: q, k, v out of order", oi, s));
        if (k == plen)
            break;
        if (float_cast(g, q) || is_op(g, q, "Identity") || is_op(g, q, "Reshape")) {
            if (slot != 0)
                path_bad(pi, q, "reads the projection's path at an input other than its data");
        } else if (is_op(g, q, "Add")) {
            const char *b = slot == 0 || slot == 1 ? in(g, q, (size_t)(1 - slot)) : NULL;
            if (!b || pg_init_of(g, b, NULL) < 0 || node(g, q)->n_input != 2)
                path_bad(pi, q, "adds something other than a constant bias");
            else if (rank >= 1 || (pi->bias_node >= 0 && pi->bias_node != q))
                path_bad(pi, q, "a second bias, or a bias after the norm or rotation");
            else {
                rank = 1;
                pi->bias_node = q;
                pi->bias_val = b;
            }
        } else if (is_op(g, q, "Split")) {
            int64_t sz[3];
            int64_t axis = attr_i(g, q, "axis", 0, NULL);
            if (slot != 0 || rank >= 2)
                path_bad(pi, q, "a split after the norm or rotation, or not of the projection's output");
            else if (node(g, q)->n_output != 3 || (axis != -1 && axis != 2) || split_sizes(g, q, sz))
                path_bad(pi, q, "not a split of the last axis in three by explicit sizes");
            else if (g->p->g.split_q && (g->p->g.split_q != sz[0] || g->p->g.split_kv != sz[1]))
                path_bad(pi, q, "its sizes differ from another layer's split");
            else if (sz[1] != sz[2] || sz[0] < 1 || sz[1] < 1)
                path_bad(pi, q, pack_printf(g->p, "sizes %lld, %lld, %lld: key and value parts differ", (long long)sz[0],
                                            (long long)sz[1], (long long)sz[2]));
            else
                g->p->g.split_q = sz[0], g->p->g.split_kv = sz[1];
            rank = 2;
        } else if (is_norm(g, q) && !is_skip_norm(g, q) && norm_weight(g, q) && pg_init_of(g, norm_weight(g, q), NULL) >= 0) {
            if (slot != 0 || rank >= 3 || (pi->norm_node[s] >= 0 && pi->norm_node[s] != q))
                path_bad(pi, q, "a second norm, or a norm after the rotation");
            rank = 3;
            pi->norm_node[s] = q;
        } else if (is_op(g, q, "RotaryEmbedding")) {
            if (slot != 0 || rank >= 4 || (pi->rot_node[s] >= 0 && pi->rot_node[s] != q))
                path_bad(pi, q, "a second rotation, or one not of the path's data");
            else if (!is_positions(g, in(g, q, 1)))
                path_bad(pi, q, pack_printf(g->p, "its positions (%s) are not the graph input %s the runtime feeds",
                                            in(g, q, 1) ? in(g, q, 1) : "none", g->p->g.name_pos));
            rank = 4;
            pi->rot_node[s] = q;
        } else
            path_bad(pi, q, "not an op the runtime applies between a projection and the attention");
        prev = q;
    }
    for (int k = 0; k < plen; k++) /* a bad path is refused by its first bad node, not node by node */
        g->seen[path[k]] = 1;
}

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
                for (size_t s = 0; s < an->n_input && s < 3; s++)
                    if (!strcmp(an->input[s], nd->output[o])) {
                        pi->slots |= 1u << s;
                        path_done(g, pi, path, plen, attn, (int)s);
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
    /* every attention op: its head count against the config (pack_check_dims), and what the runtime's
     * attention does not do refused by name: a sliding window, soft-capped or smoothed scores, a scale
     * other than 1/sqrt(head_dim) (checked against the config in pack_check_dims), scores that are not
     * causal (MultiHeadAttention / Attention neither unidirectional nor masked) */
    const char *op = node(g, attn)->op_type; /* one of is_attention's names */
    int gqa = is_op(g, attn, "GroupQueryAttention"), have;
    int64_t h = attr_i(g, attn, "num_heads", 0, &have);
    if (!have)
        h = attr_i(g, attn, "q_num_heads", 0, &have); /* ONNX's own Attention (opset 23) */
    if (have)
        p->g.gqa_heads = (int)h;
    h = attr_i(g, attn, "kv_num_heads", 0, &have);
    if (have)
        p->g.gqa_kv_heads = (int)h;
    else if (!gqa && p->g.gqa_heads)
        p->g.gqa_kv_heads = p->g.gqa_heads; /* MultiHeadAttention, com.microsoft Attention: one key/value head per query head */
    {
        int64_t win = attr_i(g, attn, "local_window_size", -1, NULL), smooth = attr_i(g, attn, "smooth_softmax", 0, NULL);
        Onnx__AttributeProto *cap = attr(g, attn, "softcap"), *sc = attr(g, attn, "scale");
        /* sliding-window attention (Gemma 2's local layers): one window size, on any set of layers */
        if (win > 0 && win < (1 << 30)) {
            if (p->g.window && p->g.window != win)
                pack_refuse(p, what, "unsupported_op", "%s %s: local_window_size %" PRId64 " differs from another layer's %d",
                            op, nname(g, attn), win, p->g.window);
            p->g.window = (int)win;
            if (p->g.window_layer && layer < p->g.num_layers)
                p->g.window_layer[layer] = 1;
        } else if (win != -1)
            pack_refuse(p, what, "unsupported_op", "%s %s: local_window_size %" PRId64 " (want -1, none, or a window of 1 to 2^30)",
                        op, nname(g, attn), win);
        /* soft-capped scores (Gemma 2): cap * tanh(score / cap), the same cap in every layer */
        if (cap && cap->has_f && cap->f != 0) {
            if (!(cap->f > 0) || !isfinite(cap->f))
                pack_refuse(p, what, "unsupported_op", "%s %s: softcap %g (want a positive number)", op, nname(g, attn),
                            (double)cap->f);
            else if (p->g.attn_softcap && p->g.attn_softcap != cap->f)
                pack_refuse(p, what, "unsupported_op", "%s %s: softcap %g differs from another layer's %g", op, nname(g, attn),
                            (double)cap->f, (double)p->g.attn_softcap);
            p->g.attn_softcap = cap->f;
            p->g.softcap_layers++;
        }
        if (smooth)
            pack_refuse(p, what, "unsupported_op", "%s %s: smooth_softmax is not supported", op, nname(g, attn));
        if (sc && sc->has_f && sc->f != 0) { /* 0: the default, 1/sqrt(head_dim) */
            if (p->g.attn_scale && p->g.attn_scale != sc->f)
                pack_refuse(p, what, "unsupported_op", "%s %s: scale %g differs from another layer's %g", op,
                            nname(g, attn), (double)sc->f, (double)p->g.attn_scale);
            p->g.attn_scale = sc->f;
        }
        /* the masks: MultiHeadAttention's inputs 4 (key_padding_mask) and 5 (attention_bias), com.microsoft
         * Attention's 3 (mask_index) and 5 (attention_bias), ONNX Attention's 3 (attn_mask). A mask computed in the graph is taken for the causal one (the runtime's attention is causal); the
         * runtime's attention_mask fed as it is only pads, so beside unidirectional 0 the scores are bidirectional */
        const char *m1 = in(g, attn, is_op(g, attn, "MultiHeadAttention") ? 4 : 3), *m2 = in(g, attn, 5);
        int masked = (m1 && !padding_mask_only(g, m1)) || (m2 && !padding_mask_only(g, m2));
        int causal = attr_i(g, attn, "unidirectional", 0, NULL) || attr_i(g, attn, "is_causal", 0, NULL);
        if (!gqa && !is_op(g, attn, "PagedAttention") && !causal && !masked)
            pack_refuse(p, what, "unsupported_op", "%s %s: not causal (unidirectional / is_causal 0) and %s: bidirectional "
                        "scores, where the runtime's attention is causal", op, nname(g, attn),
                        m1 || m2 ? "its mask is the graph input attention_mask as fed (padding only)" : "no mask input");
    }
    int gqa_rot = gqa && attr_i(g, attn, "do_rotary", 0, NULL), fused_norm = 0;
    if (gqa_rot) {
        p->g.has_gqa_rotary = 1;
        p->g.rope_interleaved = (int)attr_i(g, attn, "rotary_interleaved", 0, NULL);
        emit_rope(g, attn, in(g, attn, 7), in(g, attn, 8));
    }
    if (gqa) {
        /* com.microsoft GroupQueryAttention past its caches: 9 position_ids (the runtime's own, or refused),
         * 14 / 15 per-head q / k RMSNorm weights (the builder's fused q/k norm, applied before the rotation, as
         * the runtime does); anything else (an attention bias, head sinks) the runtime does not apply */
        for (size_t k = 9; k < node(g, attn)->n_input; k++) {
            const char *v = in(g, attn, k);
            if (!v || (k == 9 && is_positions(g, v)))
                continue;
            if ((k == 14 || k == 15) && pg_init_of(g, v, NULL) >= 0 && in(g, attn, 14) && in(g, attn, 15)) {
                const char *role = pack_printf(p, "layers.%d.attn.%s_norm", layer, k == 14 ? "q" : "k");
                Onnx__AttributeProto *ea = attr(g, attn, "qk_norm_epsilon");
                float eps = ea && ea->has_f ? ea->f : 1e-6f;
                if (eps != p->g.rms_eps_f)
                    pack_refuse(p, what, "unsupported_op", "%s %s: qk_norm_epsilon %g differs from the norms' %g", op,
                                nname(g, attn), (double)eps, (double)p->g.rms_eps_f);
                p->g.qk_norm = 1;
                fused_norm = 1;
                pg_emit_plain(g, attn, v, role);
                continue;
            }
            pack_refuse(p, what, "unsupported_op", "%s %s: input %zu (%s) is not one the runtime applies", op, nname(g, attn), k,
                        v);
        }
    }
    g->seen[attn] = 1;
    proj_info pi[8];
    int npi = 0, o_node = -1, no = 0;
    for (size_t i = 0; i < nn; i++) {
        int n = nodes[i];
        if (!is_linear(g, n))
            continue;
        if (in(g, n, 0) && !strcmp(in(g, n, 0), start)) {
            if (npi == 8)
                break;
            proj_info *x = &pi[npi++];
            memset(x, 0, sizeof *x);
            x->lin = n;
            x->bias_node = x->bad = -1;
            for (int s = 0; s < 3; s++)
                x->norm_node[s] = x->rot_node[s] = -1;
            x->budget = 100000;
            int path[32];
            trace(g, n, attn, 0, path, 0, x, inblock);
            g->seen[n] = 1;
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
    int rot[3] = {0, 0, 0};
    for (int i = 0; i < npi; i++) {
        const char *sn = slot_name(pi[i].slots, packed_attn && npi == 1);
        if (pi[i].bad >= 0) {
            pack_refuse(p, what, "unsupported_op", "%s %s between projection %s and the attention: %s", node(g, pi[i].bad)->op_type ? node(g, pi[i].bad)->op_type : "node",
                        nname(g, pi[i].bad), nname(g, pi[i].lin), pi[i].why);
            continue;
        }
        if (!sn || (npi == 3 && packed_attn) || (npi == 1) != !strcmp(sn, "qkv")) {
            pack_refuse(p, what, "graph", "projection %s reaches attention inputs 0x%x; cannot tell q, k, v apart",
                        nname(g, pi[i].lin), pi[i].slots);
            continue;
        }
        emit_linear(g, pi[i].lin, pack_printf(p, "layers.%d.attn.%s", layer, sn));
        if (pi[i].bias_node >= 0) {
            p->g.qkv_bias = 1;
            pg_emit_plain(g, pi[i].bias_node, pi[i].bias_val, pack_printf(p, "layers.%d.attn.%s_bias", layer, sn));
        }
        for (int s = 0; s < 2; s++)
            if (pi[i].norm_node[s] >= 0) {
                const char *role = pack_printf(p, "layers.%d.attn.%s_norm", layer, s ? "k" : "q");
                p->g.qk_norm = 1;
                check_norm(g, pi[i].norm_node[s], role, 0);
                pg_emit_plain(g, pi[i].norm_node[s], norm_weight(g, pi[i].norm_node[s]), role);
            }
        if (fused_norm && (pi[i].norm_node[0] >= 0 || pi[i].norm_node[1] >= 0))
            pack_refuse(p, what, "unsupported_op", "q/k norms both on the paths and inside %s", nname(g, attn));
        if (pi[i].norm_node[2] >= 0)
            pack_refuse(p, what, "graph", "a norm on the value path (%s) is not supported", nname(g, pi[i].norm_node[2]));
        for (int s = 0; s < 3; s++) {
            int q = pi[i].rot_node[s];
            if (q < 0)
                continue;
            rot[s]++;
            p->g.has_rotary_nodes = 1;
            emit_rope(g, q, in(g, q, 2), in(g, q, 3));
            p->g.rope_interleaved = (int)attr_i(g, q, "interleaved", 0, NULL);
            int have;
            int64_t rd = attr_i(g, q, "rotary_embedding_dim", 0, &have);
            if (have && rd > 0)
                p->g.rope_dim_attr = (int)rd;
        }
    }
    /* the runtime rotates q and k of every layer once: by the attention node, or by a RotaryEmbedding on each
     * (a path refused above is not counted: no second word on it) */
    int refused = 0;
    for (int i = 0; i < npi; i++)
        refused |= pi[i].bad >= 0;
    if (!refused && (rot[2] || rot[0] > 1 || rot[1] > 1 || rot[0] != rot[1] || (gqa_rot && rot[0]) || (!gqa_rot && !rot[0])))
        pack_refuse(p, what, "unsupported_op", "%s: the runtime rotates q and k once in every layer, here %s", nname(g, attn),
                    rot[2]                 ? "v is rotated"
                    : rot[0] != rot[1]     ? "only one of q and k is rotated"
                    : gqa_rot && rot[0]    ? "RotaryEmbedding nodes and the attention node both rotate"
                    : rot[0] > 1           ? "a path is rotated twice"
                                           : "neither is rotated");
    if (no != 1) {
        pack_refuse(p, what, "graph", "%d projections after the attention node (want one o_proj)", no);
        return;
    }
    g->seen[o_node] = 1;
    if (!in(g, o_node, 0) || !out(g, attn, 0) || strcmp(in(g, o_node, 0), through_casts(g, out(g, attn, 0))))
        pack_refuse(p, what, "unsupported_op", "o_proj %s reads %s, not the attention's output %s", nname(g, o_node),
                    in(g, o_node, 0) ? in(g, o_node, 0) : "nothing", out(g, attn, 0) ? out(g, attn, 0) : "(none)");
    emit_linear(g, o_node, pack_printf(p, "layers.%d.attn.o", layer));
    /* a bias after o_proj: an Add with an initializer on its output */
    const char *o_out = through_casts(g, out(g, o_node, 0));
    int ob = only_consumer(g, o_out);
    const char *bv = ob >= 0 && is_op(g, ob, "Add") ? other_input(g, ob, o_out) : NULL;
    if (bv && pg_init_of(g, bv, NULL) >= 0) {
        g->seen[ob] = 1;
        pg_emit_plain(g, ob, bv, pack_printf(p, "layers.%d.attn.o_bias", layer));
        o_out = out(g, ob, 0);
    }
    /* Gemma 2's post-attention norm on the attention output, before the residual add */
    int on = emit_out_norm(g, o_out, pack_printf(p, "layers.%d.attn.out_norm", layer));
    p->g.attn_out_norms += on >= 0;
    block_end(g, what, on >= 0 ? out(g, on, 0) : o_out, nodes, nn);
}

static void walk_mlp(G *g, int layer, const char *start, int *nodes, size_t nn)
{
    pack *p = g->p;
    const char *what = pack_printf(p, "layer %d mlp", layer);
    int gate = -1, up = -1, down = -1, nfirst = 0, nother = 0, gate_act = -1;
    for (size_t i = 0; i < nn; i++) {
        int n = nodes[i];
        if (!is_linear(g, n))
            continue;
        if (in(g, n, 0) && !strcmp(in(g, n, 0), start)) {
            nfirst++;
            int act = -1;
            gval *v = out(g, n, 0) ? val(g, out(g, n, 0)) : NULL;
            for (int c = 0; v && c < v->ncons; c++)
                if (is_activation(g, v->cons[c]))
                    act = v->cons[c];
            if (act >= 0) {
                gate = n;
                gate_act = act;
            } else
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
    int act = -1, a_node = gate_act;
    if ((a_node = silu_out(g, gate_act, out(g, gate, 0))) >= 0)
        act = PACK_ACT_SILU;
    else if ((a_node = gate_act), is_op(g, gate_act, "FastGelu") && !in(g, gate_act, 1)) /* com.microsoft: the tanh approximation */
        act = PACK_ACT_GELU_TANH;
    else if (is_op(g, gate_act, "Gelu")) { /* ONNX (approximate "none" | "tanh") or com.microsoft (erf) */
        Onnx__AttributeProto *a = attr(g, gate_act, "approximate");
        if (!a || !a->has_s || (a->s.len == 4 && !memcmp(a->s.data, "none", 4)))
            act = PACK_ACT_GELU;
        else if (a->s.len == 4 && !memcmp(a->s.data, "tanh", 4))
            act = PACK_ACT_GELU_TANH;
    }
    if (act < 0)
        pack_refuse(p, what, "unsupported_op",
                    "gate activation %s (%s) is not one the runtime applies (SiLU, FastGelu, Gelu, Gelu tanh)",
                    node(g, gate_act)->op_type, nname(g, gate_act));
    else if (p->g.activation >= 0 && p->g.activation != act)
        pack_refuse(p, what, "unsupported_op", "gate activation %s (%s) differs from another layer's",
                    node(g, gate_act)->op_type, nname(g, gate_act));
    else
        p->g.activation = act;
    g->seen[gate] = g->seen[up] = g->seen[down] = g->seen[gate_act] = 1;
    /* what the runtime computes: down(act(gate) * up), nothing else in between */
    if (act >= 0) {
        g->seen[a_node] = 1;
        const char *a_out = through_casts(g, out(g, a_node, 0)), *u_out = through_casts(g, out(g, up, 0));
        int prod = only_consumer(g, a_out);
        const char *o = prod >= 0 && is_op(g, prod, "Mul") && u_out ? other_input(g, prod, a_out) : NULL;
        if (o && !strcmp(o, u_out) && in(g, down, 0) && in(g, gate, 0) && !strcmp(in(g, gate, 0), start) &&
            in(g, up, 0) && !strcmp(in(g, up, 0), start) && !strcmp(in(g, down, 0), through_casts(g, out(g, prod, 0))))
            g->seen[prod] = 1;
        else
            pack_refuse(p, what, "unsupported_op", "%s: the MLP does not compute down(activation(gate) * up) (%s)",
                        nname(g, down), prod < 0 ? "the activation's output is read by no node or by several"
                                        : !o || strcmp(o, u_out) ? "the activation is not multiplied by up's output"
                                                                 : "down_proj does not read that product");
    }
    emit_linear(g, gate, pack_printf(p, "layers.%d.mlp.gate", layer));
    emit_linear(g, up, pack_printf(p, "layers.%d.mlp.up", layer));
    emit_linear(g, down, pack_printf(p, "layers.%d.mlp.down", layer));
    /* Gemma 2's post-feedforward norm on the MLP output, before the residual add */
    int on = emit_out_norm(g, out(g, down, 0), pack_printf(p, "layers.%d.mlp.out_norm", layer));
    p->g.mlp_out_norms += on >= 0;
    block_end(g, what, on >= 0 ? out(g, on, 0) : out(g, down, 0), nodes, nn);
}

/* Role order for emission: per layer input_norm, attention, post_attn_norm, mlp. */
static void role_key(const char *role, long *layer, int *rank)
{
    static const char *order[] = {"input_norm", "input_norm_bias", "attn.qkv", "attn.q", "attn.k", "attn.v", "attn.qkv_bias", "attn.q_bias",
                                  "attn.k_bias", "attn.v_bias", "attn.q_norm", "attn.k_norm", "attn.o", "attn.o_bias",
                                  "attn.out_norm", "post_attn_norm", "post_attn_norm_bias", "mlp.gate", "mlp.up", "mlp.down", "mlp.out_norm"};
    static const char *top[] = {"final_norm", "final_norm_bias", "lm_head", "rope.cos", "rope.sin"};
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

int pg_cmp_tensor(const void *a, const void *b)
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

int pg_elem_dtype(const Onnx__ValueInfoProto *vi)
{
    if (!vi || !vi->type || vi->type->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !vi->type->tensor_type)
        return 0;
    return float_dtype(vi->type->tensor_type->elem_type);
}

/* The embedding: a float Gather table, lm_head's own codes (tied), or its own GatherBlockQuantized. */
static void emit_embed(G *g, int emb, int lm)
{
    pack *p = g->p;
    if (is_op(g, emb, "Gather")) {
        if (attr_i(g, emb, "axis", 0, NULL) != 0)
            pack_refuse(p, "tensor embed", "unsupported_op", "Gather %s: axis %" PRId64 " (the runtime gathers rows, axis 0)",
                        nname(g, emb), attr_i(g, emb, "axis", 0, NULL));
        pg_emit_plain(g, emb, in(g, emb, 0), "embed");
    }
    else {
        int sliced = 0, dvi = pg_init_of(g, in(g, emb, 0), &sliced);
        if (dvi < 0)
            pack_refuse(p, "graph", "graph", "GatherBlockQuantized %s: data is not an initializer", nname(g, emb));
        else if (lm >= 0 && dvi == g->lm_head_b && is_op(g, lm, "MatMulNBits")) {
            /* tied: the same codes; scales and zero points must be the lm_head's too */
            int s1 = pg_init_of(g, in(g, emb, 2), NULL), s2 = pg_init_of(g, in(g, lm, 2), NULL);
            int z1 = in(g, emb, 3) ? pg_init_of(g, in(g, emb, 3), NULL) : -2, z2 = in(g, lm, 3) ? pg_init_of(g, in(g, lm, 3), NULL) : -2;
            if (s1 != s2 || z1 != z2)
                pack_refuse(p, "tensor embed", "graph",
                            "GatherBlockQuantized %s shares lm_head's codes but not its scales / zero points", nname(g, emb));
            else if (attr_i(g, emb, "block_size", 128, NULL) != attr_i(g, lm, "block_size", 0, NULL) ||
                     attr_i(g, emb, "bits", 4, NULL) != attr_i(g, lm, "bits", 0, NULL))
                pack_refuse(p, "tensor embed", "graph", "GatherBlockQuantized %s: bits/block_size differ from lm_head's",
                            nname(g, emb));
            else if (attr_i(g, emb, "gather_axis", 0, NULL) != 0 ||
                     (attr_i(g, emb, "quantize_axis", 1, NULL) != 1 && attr_i(g, emb, "quantize_axis", 1, NULL) != -1))
                pack_refuse(p, "tensor embed", "unsupported_op",
                            "GatherBlockQuantized %s: gather_axis %" PRId64 ", quantize_axis %" PRId64
                            " (the runtime gathers rows quantised along them: 0 and 1)",
                            nname(g, emb), attr_i(g, emb, "gather_axis", 0, NULL), attr_i(g, emb, "quantize_axis", 1, NULL));
            else if (attr_i(g, emb, "weight_prepacked", 0, NULL))
                pack_refuse(p, "tensor embed", "unsupported_op", "GatherBlockQuantized %s: weight_prepacked is not supported",
                            nname(g, emb));
            else
                p->g.tied = 1;
        } else
            pg_emit_gbq(g, emb, dvi, sliced);
    }
}

/* Between lm_head and the logits output: nothing, Casts, or final logit soft-capping (Gemma 2: Div by a
 * cap, Tanh, Mul by the same cap). Anything else would change the logits behind the runtime's back. */
static void walk_logits(G *g, int lm)
{
    pack *p = g->p;
    const char *v = out(g, lm, 0);
    int capped = 0;
    for (int guard = 0; v && guard < 8; guard++) {
        if (is_logits(g, v) || is_logits(g, v = through_casts(g, v)))
            return;
        int n = only_consumer(g, v);
        double c1, c2;
        int t = n >= 0 && is_op(g, n, "Div") && in(g, n, 0) && !strcmp(in(g, n, 0), v) ? only_consumer(g, out(g, n, 0)) : -1;
        int m = t >= 0 && is_op(g, t, "Tanh") ? only_consumer(g, out(g, t, 0)) : -1;
        const char *k2 = m >= 0 && is_op(g, m, "Mul") ? other_input(g, m, out(g, t, 0)) : NULL;
        if (!capped && k2 && scalar_of(g, in(g, n, 1), &c1) == 0 && scalar_of(g, k2, &c2) == 0 && c1 == c2 && c1 > 0 &&
            c1 < 1e30) {
            p->g.final_softcap = (float)c1;
            capped = 1;
            v = out(g, m, 0);
            continue;
        }
        if (n < 0 && (!val(g, v) || !val(g, v)->ncons)) /* the end of the road, and not the logits output */
            pack_refuse(p, "graph", "graph", "lm_head %s's output %s is not the graph output \"%s\" the runtime reads the logits from (%s)",
                        nname(g, lm), v, p->g.name_logits, "genai_config.json's model.decoder.outputs.logits");
        else
            pack_refuse(p, "graph", "unsupported_op",
                        "lm_head %s reaches the logits through %s (%s): only final logit soft-capping (Div, Tanh, Mul by one "
                        "constant) is supported there", nname(g, lm), n >= 0 ? nname(g, n) : v, n >= 0 && node(g, n)->op_type ? node(g, n)->op_type : "several consumers");
        return;
    }
}

void pg_walk(G *g)
{
    pack *p = g->p;
    size_t nn = g->g->n_node;
    /* embedding: a Gather / GatherBlockQuantized on the input_ids graph input */
    const char *idn = p->g.name_ids;
    int ids = pg_val_find(g, idn), emb = -1;
    for (int i = 0; ids >= 0 && i < g->v[ids].ncons; i++) {
        int n = g->v[ids].cons[i];
        if ((is_op(g, n, "Gather") || is_op(g, n, "GatherBlockQuantized")) && in(g, n, 1) && !strcmp(in(g, n, 1), idn))
            emb = n;
    }
    if (emb < 0) {
        if (ids < 0 || !g->v[ids].is_input)
            pack_refuse(p, "graph", "graph", "no graph input named \"%s\" (%s): the runtime feeds the token ids there",
                        idn, strcmp(idn, "input_ids") ? "genai_config.json's model.decoder.inputs.input_ids"
                                                     : "the default name; genai_config.json's model.decoder.inputs.input_ids "
                                                       "names another");
        else
            pack_refuse(p, "graph", "graph", "no embedding: no Gather or GatherBlockQuantized reads the %s input", idn);
        p->g.no_embedding = 1;
        return;
    }
    /* the residual stream, norm by norm */
    ivec norms = {0};
    const char *r = out(g, emb, 0);
    /* Gemma: the embedding scaled by a constant (sqrt(hidden_size), rounded) before the first norm */
    int esc = only_consumer(g, r);
    if (esc >= 0 && is_op(g, esc, "Mul")) {
        double sc;
        const char *k = other_input(g, esc, r);
        if (k && scalar_of(g, k, &sc) == 0 && sc > 0 && sc < 1e30) {
            p->g.embed_scale = (float)sc;
            g->chain[esc] = 1;
            r = through_casts(g, out(g, esc, 0));
        } else
            pack_refuse(p, "graph", "unsupported_op", "Mul %s scales the embedding by %s, not by a positive constant",
                        nname(g, esc), k ? k : "(no second input)");
    }
    /* per norm: the residual add or skip norm before it (-1 for the first), and the residual value that
     * one reads (gval index) */
    ivec joins = {0}, jres = {0};
    int pend = -1, pend_res = -1;
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
                pg_init_of(g, norm_weight(g, n), NULL) >= 0) {
                g->chain[n] = 1;
                ipush(&norms, n);
                ipush(&joins, pend);
                ipush(&jres, pend_res);
            }
        }
        for (int c = 0; c < v->ncons; c++) {
            int n = v->cons[c];
            if (g->chain[n])
                continue;
            if (is_skip_norm(g, n) && skip < 0)
                skip = n;
            else if (is_op(g, n, "Add") && add < 0 && in(g, n, 0) && in(g, n, 1) && pg_init_of(g, in(g, n, 0), NULL) < 0 &&
                     pg_init_of(g, in(g, n, 1), NULL) < 0)
                add = n;
        }
        if (skip >= 0) {
            g->chain[skip] = 1;
            ipush(&norms, skip);
            ipush(&joins, skip);
            ipush(&jres, pg_val_find(g, r));
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
            pend = add;
            pend_res = pg_val_find(g, r);
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
        free(joins.v);
        free(jres.v);
        return;
    }
    int L = (int)(norms.n - 1) / 2;
    p->g.num_layers = L;
    p->g.window_layer = pack_own(p, calloc((size_t)L + 1, 1));
    int n0 = norms.v[0];
    Onnx__AttributeProto *ea = attr(g, n0, "epsilon");
    p->g.rms_eps_f = ea && ea->has_f ? ea->f : 1e-5f; /* the contrib ops' default */
    p->g.rms_eps = p->g.rms_eps_f;
    if (!(p->g.rms_eps_f > 0) || !isfinite(p->g.rms_eps_f)) /* rms_eps < 0 would read as "unknown": config.json's taken */
        pack_refuse(p, "layers.0.input_norm", "unsupported_op", "norm %s: epsilon %g (want a positive number)", nname(g, n0),
                    (double)p->g.rms_eps_f);
    p->g.layer_norm = is_layer_norm(g, n0); /* the first norm's kind is every norm's */
    for (int j = 0; j < (int)norms.n; j++) {
        int n = norms.v[j];
        const char *role = j == (int)norms.n - 1 ? "final_norm"
                           : j % 2 == 0          ? pack_printf(p, "layers.%d.input_norm", j / 2)
                                                 : pack_printf(p, "layers.%d.post_attn_norm", j / 2);
        check_norm(g, n, role, p->g.layer_norm);
        pg_emit_plain(g, n, norm_weight(g, n), role);
        if (norm_bias(g, n))
            pg_emit_plain(g, n, norm_bias(g, n), pack_printf(p, "%s_bias", role));
    }
    /* embed (after the norms so a tied embedding can find lm_head) is resolved below */
    char *mark = calloc(nn, 1);
    for (int j = 0; j + 1 < (int)norms.n; j++) {
        ivec nodes = {0};
        memset(mark, 0, nn);
        const char *start = through_casts(g, out(g, norms.v[j], 0));
        if (!start) {
            pack_refuse(p, "graph", "graph", "norm %s has no output", nname(g, norms.v[j]));
            continue;
        }
        block_nodes(g, start, mark, &nodes);
        g->join = joins.v[j + 1];
        g->join_res = jres.v[j + 1] >= 0 ? g->v[jres.v[j + 1]].name : NULL;
        if (j % 2 == 0)
            walk_attention(g, j / 2, start, nodes.v, nodes.n, mark);
        else
            walk_mlp(g, j / 2, start, nodes.v, nodes.n);
        free(nodes.v);
    }
    /* lm_head: the projection reading the final norm */
    int fin = norms.v[norms.n - 1], lm = -1;
    gval *fv = val(g, through_casts(g, out(g, fin, 0)));
    for (int c = 0; fv && c < fv->ncons; c++)
        if (is_linear(g, fv->cons[c]))
            lm = fv->cons[c];
    if (lm < 0)
        pack_refuse(p, "graph", "graph", "no lm_head projection reads the final norm");
    else {
        g->lm_head_b = pg_init_of(g, in(g, lm, 1), NULL);
        g->lm_head = emit_linear(g, lm, "lm_head");
        walk_logits(g, lm);
    }
    /* what the runtime applies in every layer or in none */
    if (p->g.softcap_layers && p->g.softcap_layers != L)
        pack_refuse(p, "graph", "unsupported_op", "%d of %d attention nodes soft-cap their scores (want all or none)",
                    p->g.softcap_layers, L);
    if (p->g.attn_out_norms && p->g.attn_out_norms != L)
        pack_refuse(p, "graph", "graph", "%d of %d layers have a norm on the attention output (want all or none)",
                    p->g.attn_out_norms, L);
    if (p->g.mlp_out_norms && p->g.mlp_out_norms != L)
        pack_refuse(p, "graph", "graph", "%d of %d layers have a norm on the MLP output (want all or none)",
                    p->g.mlp_out_norms, L);
    emit_embed(g, emb, lm);
    free(mark);
    free(norms.v);
    free(joins.v);
    free(jres.v);
}
