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
#include "graph_int.h"

#include "tok/tok.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- parsing: protobuf-c's unpack recurses once per nested message, so a small hostile file (a graph
 * in an attribute in a node in a graph ...) would overflow the stack; the nesting is measured first,
 * without recursion, from the generated descriptors ---- */

#define ONNX_MAX_DEPTH 64

static int varint(const uint8_t *d, size_t end, size_t *pos, uint64_t *v)
{
    *v = 0;
    for (int s = 0; s < 64 && *pos < end; s += 7) {
        uint8_t b = d[(*pos)++];
        *v |= (uint64_t)(b & 0x7f) << s;
        if (!(b & 0x80))
            return 0;
    }
    return -1;
}

/* -1 with *at set when a message field lies deeper than ONNX_MAX_DEPTH; 0 otherwise (malformed wire
 * data included: the parser names that) */
static int onnx_too_deep(const uint8_t *d, size_t n, size_t *at)
{
    struct {
        const ProtobufCMessageDescriptor *desc;
        size_t end;
    } st[ONNX_MAX_DEPTH + 1] = {{&onnx__model_proto__descriptor, n}};
    int top = 0;
    size_t pos = 0;
    for (;;) {
        while (top > 0 && pos == st[top].end)
            top--;
        if (pos == st[top].end)
            return 0;
        uint64_t key, len;
        if (varint(d, st[top].end, &pos, &key))
            return 0;
        size_t left = st[top].end - pos;
        switch (key & 7) {
        case 0:
            if (varint(d, st[top].end, &pos, &len))
                return 0;
            break;
        case 1:
        case 5:
            if (left < ((key & 7) == 1 ? 8u : 4u))
                return 0;
            pos += (key & 7) == 1 ? 8 : 4;
            break;
        case 2: {
            if (varint(d, st[top].end, &pos, &len) || len > st[top].end - pos)
                return 0;
            const ProtobufCFieldDescriptor *f =
                key >> 3 <= UINT32_MAX ? protobuf_c_message_descriptor_get_field(st[top].desc, (unsigned)(key >> 3)) : NULL;
            if (f && f->type == PROTOBUF_C_TYPE_MESSAGE) {
                if (top == ONNX_MAX_DEPTH) {
                    *at = pos;
                    return -1;
                }
                top++;
                st[top].desc = f->descriptor;
                st[top].end = pos + len;
            } else
                pos += len;
            break;
        }
        default:
            return 0;
        }
    }
}

Onnx__ModelProto *pack_onnx_unpack(const uint8_t *data, size_t size, ogk_error *e)
{
    size_t at = 0;
    if (onnx_too_deep(data, size, &at)) {
        ogk_fail(e, "messages nested more than %d deep (at byte %zu): refused unparsed", ONNX_MAX_DEPTH, at);
        return NULL;
    }
    Onnx__ModelProto *m = size ? onnx__model_proto__unpack(NULL, size, data) : NULL;
    if (!m)
        ogk_fail(e, "protobuf parse failed%s", size ? "" : ": empty file");
    return m;
}

/* Names become roles' sources, refusals and OGAX/JSON text: a graph with a name that is not UTF-8 is
 * refused whole (NULL when every name the reader uses is valid, else what holds the bad one). */
static int utf8_ok(const char *s) { return !s || tok_utf8_check(s, strlen(s)) == strlen(s); }
static const char *non_utf8_name(pack *p, const Onnx__GraphProto *g)
{
    for (size_t i = 0; i < g->n_node; i++) {
        const Onnx__NodeProto *n = g->node[i];
        int ok = utf8_ok(n->name) && utf8_ok(n->op_type) && utf8_ok(n->domain);
        for (size_t j = 0; ok && j < n->n_input; j++)
            ok = utf8_ok(n->input[j]);
        for (size_t j = 0; ok && j < n->n_output; j++)
            ok = utf8_ok(n->output[j]);
        for (size_t j = 0; ok && j < n->n_attribute; j++)
            ok = utf8_ok(n->attribute[j]->name);
        if (!ok)
            return pack_printf(p, "node %zu (a name, op type, domain, input, output or attribute name)", i);
    }
    for (size_t i = 0; i < g->n_initializer; i++) {
        const Onnx__TensorProto *t = g->initializer[i];
        int ok = utf8_ok(t->name);
        for (size_t j = 0; ok && j < t->n_external_data; j++)
            ok = utf8_ok(t->external_data[j]->key) && utf8_ok(t->external_data[j]->value);
        if (!ok)
            return pack_printf(p, "initializer %zu (its name or external data location)", i);
    }
    for (size_t i = 0; i < g->n_input; i++)
        if (!utf8_ok(g->input[i]->name))
            return pack_printf(p, "graph input %zu", i);
    for (size_t i = 0; i < g->n_output; i++)
        if (!utf8_ok(g->output[i]->name))
            return pack_printf(p, "graph output %zu", i);
    return NULL;
}

/* The attributes the walk reads, of the type it reads them as: an integer or a float of another type was
 * taken for absent (its default), where onnxruntime refuses the node. */
static void attr_types(G *g, int n)
{
    static const char *const ints[] = {"num_heads", "kv_num_heads", "q_num_heads", "do_rotary", "rotary_interleaved",
                                       "local_window_size", "smooth_softmax", "interleaved", "rotary_embedding_dim", "bits",
                                       "block_size", "K", "N", "accuracy_level", "gather_axis", "quantize_axis",
                                       "weight_prepacked", "axis", "to", "unidirectional", "is_causal", "start"};
    static const char *const floats[] = {"epsilon", "softcap", "scale", "alpha", "qk_norm_epsilon"};
    Onnx__NodeProto *nd = node(g, n);
    for (size_t i = 0; i < nd->n_attribute; i++) {
        const Onnx__AttributeProto *a = nd->attribute[i];
        int want = 0; /* 1 int, 2 float */
        for (size_t k = 0; a->name && !want && k < sizeof ints / sizeof ints[0]; k++)
            want = strcmp(a->name, ints[k]) ? 0 : 1;
        for (size_t k = 0; a->name && !want && k < sizeof floats / sizeof floats[0]; k++)
            want = strcmp(a->name, floats[k]) ? 0 : 2;
        if ((want == 1 && !a->has_i) || (want == 2 && !a->has_f) ||
            (want && a->has_type && a->type != (want == 1 ? ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT
                                                          : ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT)))
            pack_refuse(g->p, pack_printf(g->p, "node %s", nname(g, n)), "unsupported_op", "%s attribute %s is not %s",
                        nd->op_type, a->name, want == 1 ? "an integer" : "a float");
    }
}

/* name fits pattern, a name with one "%d" (genai_config.json's past_key_names): digits in its place */
static int fits_pattern(const char *pat, const char *name)
{
    const char *d = strstr(pat, "%d");
    if (!d || strstr(d + 2, "%"))
        return !strcmp(pat, name);
    size_t pre = (size_t)(d - pat), suf = strlen(d + 2), n = strlen(name);
    if (n <= pre + suf || strncmp(name, pat, pre) || strcmp(name + n - suf, d + 2))
        return 0;
    for (size_t i = pre; i < n - suf; i++)
        if (name[i] < '0' || name[i] > '9')
            return 0;
    return 1;
}

/* Every graph input a node reads must be one the runtime feeds: a name genai_config.json's decoder.inputs
 * gives (input_ids, attention_mask, position_ids and the past key / value patterns by default). */
static void fed_inputs(G *g)
{
    pack *p = g->p;
    static const char *const dflt[] = {"input_ids", "attention_mask", "position_ids", "past_key_values.%d.key",
                                       "past_key_values.%d.value"};
    json_t *ins = p->genai ? json_object_get(json_object_get(json_object_get(p->genai, "model"), "decoder"), "inputs") : NULL;
    for (size_t i = 0; i < g->g->n_input; i++) {
        const char *nm = g->g->input[i]->name;
        int vi = nm ? pg_val_find(g, nm) : -1;
        if (vi < 0 || !g->v[vi].ncons || g->v[vi].init)
            continue;
        int ok = !strcmp(nm, p->g.name_ids) || !strcmp(nm, p->g.name_mask) || !strcmp(nm, p->g.name_pos);
        const char *k;
        json_t *x;
        if (json_is_object(ins))
            json_object_foreach(ins, k, x) ok |= json_is_string(x) && fits_pattern(json_string_value(x), nm);
        else
            for (size_t j = 0; j < sizeof dflt / sizeof dflt[0]; j++)
                ok |= fits_pattern(dflt[j], nm);
        if (!ok)
            pack_refuse(p, pack_printf(p, "graph input %s", nm), "graph",
                        "read by node %s, but genai_config.json's model.decoder.inputs names no input the runtime feeds "
                        "there", nname(g, g->v[vi].cons[0]));
    }
}

void pack_read_graph(pack *p)
{
    if (!p->onnx_name) {
        pack_refuse(p, "file model.onnx", "file_missing", "missing: no ONNX decoder in the pack");
        return;
    }
    char *path = pack_path(p, p->onnx_name);
    if (!path)
        return;
    ogk_error e;
    const char *what = pack_printf(p, "file %s", p->onnx_name);
    if (ogk_map_open(&p->onnx_map, path, &e) != 0) {
        int err = errno;
        free(path);
        pack_refuse(p, what, pack_file_code(err), "%s",
                    strchr(e.msg, ':') ? strchr(e.msg, ':') + 2 : e.msg);
        return;
    }
    free(path);
    p->onnx = pack_onnx_unpack(p->onnx_map.data, p->onnx_map.size, &e);
    if (!p->onnx || !p->onnx->graph) {
        pack_refuse(p, what, "not_protobuf", "not an ONNX model: %s", p->onnx ? "no graph" : e.msg);
        return;
    }
    const char *bad = non_utf8_name(p, p->onnx->graph);
    if (bad) {
        pack_refuse(p, what, "not_utf8", "%s is not UTF-8 text", bad);
        return;
    }
    G g = {.p = p, .g = p->onnx->graph, .lm_head_b = -1};
    pg_index_graph(&g);
    g.chain = calloc(g.g->n_node + 1, 1);
    g.seen = calloc(g.g->n_node + 1, 1);
    if (!g.chain || !g.seen) {
        pack_oom(p);
        goto out;
    }
    /* facts used by the flavour and the model description */
    for (size_t n = 0; n < g.g->n_node; n++) {
        const char *dom = g.g->node[n]->domain, *op = g.g->node[n]->op_type;
        /* an op the walk knows, from a domain that does not have it, is no op onnxruntime runs: named here
         * (the walk does not take it for that op) */
        if (op && !(dom && !strcmp(dom, "com.ryzenai")) && !pg_op_domain_ok(op, dom) && pg_op_walked(op))
            pack_refuse(p, pack_printf(p, "node %s", nname(&g, (int)n)), "unsupported_op",
                        "%s in domain \"%s\": onnxruntime has it in %s", op, dom ? dom : "",
                        pg_op_domain_ok(op, "com.microsoft") ? "com.microsoft" : "the ONNX domain");
        else if (op && dom && *dom && strcmp(dom, "ai.onnx") && strcmp(dom, "com.microsoft") && strcmp(dom, "com.ryzenai"))
            pack_refuse(p, pack_printf(p, "node %s", nname(&g, (int)n)), "unsupported_op",
                        "%s in domain \"%s\", one the runtime does not know", op, dom);
        if (op && pg_op_walked(op))
            attr_types(&g, (int)n);
        if (dom && !strcmp(dom, "com.ryzenai")) {
            p->g.ryzenai_nodes++;
            pack_refuse(p, pack_printf(p, "node %s", nname(&g, (int)n)), "npu_packed",
                        "com.ryzenai.%s: runs on the Ryzen AI NPU from buffers whose format is not publicly documented",
                        g.g->node[n]->op_type ? g.g->node[n]->op_type : "?");
        }
    }
    p->g.has_position_ids = pg_val_find(&g, p->g.name_pos) >= 0 && g.v[pg_val_find(&g, p->g.name_pos)].is_input;
    for (size_t i = 0; i < g.g->n_output; i++)
        if (g.g->output[i]->name && !strcmp(g.g->output[i]->name, p->g.name_logits))
            p->g.io_dtype = pg_elem_dtype(g.g->output[i]);
    if (!p->g.io_dtype && g.g->n_output)
        p->g.io_dtype = pg_elem_dtype(g.g->output[0]);

    pg_walk(&g);
    fed_inputs(&g);
    if (p->n_t > 1)
        qsort(p->t, p->n_t, sizeof *p->t, pg_cmp_tensor);

    /* rope cache facts */
    const pack_tensor *cos = pack_find(p, "rope.cos_long") ? pack_find(p, "rope.cos_long") : pack_find(p, "rope.cos");
    if (cos && cos->ndim == 2) {
        p->g.rope_rows = cos->shape[0];
        p->g.rope_dim = (int)cos->shape[1] * 2;
    }
    /* bounds of every external initializer, used or not: the data file must hold them all */
    for (size_t i = 0; i < g.nv; i++)
        if (g.v[i].init && !g.v[i].state && g.v[i].init->has_data_location &&
            g.v[i].init->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL)
            pg_resolve(&g, (int)i);
    /* every initializer the walk did not use: weights are refused, plumbing constants counted */
    size_t n_unwalked = 0;
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
        else if (weightlike && v->ncons && p->g.no_embedding)
            n_unwalked++;
        else if (weightlike && v->ncons)
            pack_refuse(p, pack_printf(p, "tensor %s", v->name), "unassigned",
                        "a %s weight the graph walk gave no role (consumed by %s)", pg_onnx_dtype_name(dt),
                        nname(&g, v->cons[0]));
        else
            p->g.ignored_constants++;
    }
    if (n_unwalked) /* one line, not one a weight, beneath the cause */
        pack_refuse(p, "graph", "unassigned", "%zu weights without a role: the walk stops where it finds no embedding",
                    n_unwalked);
    /* a data file shorter than what its initializers need: say it once, on the file */
    for (size_t i = 0; i < p->n_ext; i++)
        /* cut short: several initializers past the end, or one and the file ends inside a tensor
         * (data files are written densely, so an intact file ends where its last tensor ends) */
        if (p->ext[i].ok && (p->ext[i].past_end > 1 || (p->ext[i].past_end == 1 && p->ext[i].inb_end < p->ext[i].m.size)))
            pack_refuse(p, pack_printf(p, "file %s", p->ext[i].loc), "truncated",
                        "%zu bytes, but %d initializer%s extend%s to byte %" PRIu64 ": the file is cut short", p->ext[i].m.size,
                        p->ext[i].past_end, p->ext[i].past_end == 1 ? "" : "s", p->ext[i].past_end == 1 ? "s" : "",
                        p->ext[i].need_end);
out:
    for (size_t i = 0; i < g.nv; i++)
        free(g.v[i].cons);
    free(g.v);
    free(g.ht);
    free(g.chain);
    free(g.seen);
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
           /* the fused q|k|v rows come from both head counts: the key names both */
           kQKV = {"genai_config.json: model.decoder.num_attention_heads / num_key_value_heads", 0},
           kHD = {"genai_config.json: model.decoder.head_size", 0}, kI = {"config.json: intermediate_size", 0};
    if (L >= 0 && p->g.num_layers >= 0 && L != p->g.num_layers)
        pack_refuse(p, "genai_config.json: model.decoder.num_hidden_layers", "config_dims",
                    "%lld contradicts the graph, which has %d layers", L, p->g.num_layers);
    if (nh >= 0 && p->g.gqa_heads && nh != p->g.gqa_heads)
        pack_refuse(p, "genai_config.json: model.decoder.num_attention_heads", "config_dims",
                    "%lld contradicts the attention node's %d query heads", nh, p->g.gqa_heads);
    if (nkv >= 0 && p->g.gqa_kv_heads && nkv != p->g.gqa_kv_heads)
        pack_refuse(p, "genai_config.json: model.decoder.num_key_value_heads", "config_dims",
                    "%lld contradicts the attention node's %d key/value heads", nkv, p->g.gqa_kv_heads);
    long long q = nh >= 0 && hd >= 0 ? nh * hd : -1, kv = nkv >= 0 && hd >= 0 ? nkv * hd : -1;
    if (p->g.split_q && q >= 0 && kv >= 0 && (p->g.split_q != q || p->g.split_kv != kv))
        pack_refuse(p, "graph", "config_dims", "the Split of q|k|v gives %lld, %lld, %lld; the heads want %lld, %lld, %lld",
                    (long long)p->g.split_q, (long long)p->g.split_kv, (long long)p->g.split_kv, q, kv, kv);
    for (size_t i = 0; i < p->n_t; i++) {
        const pack_tensor *t = &p->t[i];
        const char *r = t->role, *s = strncmp(r, "layers.", 7) ? r : strchr(r + 7, '.') ? strchr(r + 7, '.') + 1 : r;
        uint64_t rows = t->shape[0], cols = t->ndim > 1 ? t->shape[1] : 0;
        if (!strcmp(s, "lm_head") && !ogk_dtype_quantised(t->dtype)) { /* an unquantised MatMul's B: [hidden, vocab] */
            dim_check(p, &kH, H, rows, t, "rows (K)");
            dim_check(p, &kV, V, cols, t, "columns (N)");
        } else if (!strcmp(s, "embed") || !strcmp(s, "lm_head")) {
            dim_check(p, &kV, V, rows, t, "rows");
            dim_check(p, &kH, H, cols, t, "columns");
        } else if (!strcmp(s, "attn.qkv")) {
            dim_check(p, &kH, H, cols, t, "K");
            if (q >= 0 && kv >= 0)
                dim_check(p, &kQKV, q + 2 * kv, rows, t, "N (heads*head + 2*kv_heads*head)");
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
        } else if (!strcmp(s, "input_norm") || !strcmp(s, "post_attn_norm") || !strcmp(s, "final_norm") ||
                   !strcmp(s, "attn.out_norm") || !strcmp(s, "mlp.out_norm") || !strcmp(s, "input_norm_bias") ||
                   !strcmp(s, "post_attn_norm_bias") || !strcmp(s, "final_norm_bias")) {
            dim_check(p, &kH, H, rows, t, "length");
        } else if (!strcmp(s, "attn.q_norm") || !strcmp(s, "attn.k_norm")) {
            dim_check(p, &kHD, hd, rows, t, "length");
        } else if (!strcmp(s, "attn.qkv_bias")) {
            if (q >= 0 && kv >= 0)
                dim_check(p, &kQKV, q + 2 * kv, rows, t, "length");
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
    /* the scores' scale: 1/sqrt(head_dim) by default, or the attention node's (Gemma 2: query_pre_attn_scalar^-0.5) */
    if (p->g.attn_scale && (!(p->g.attn_scale > 0) || !isfinite(p->g.attn_scale)))
        pack_refuse(p, "graph", "unsupported_op", "attention scale %g (want a positive number)", (double)p->g.attn_scale);
    if (p->g.rope_dim_attr > 0 && p->g.rope_dim > 0 && p->g.rope_dim_attr != p->g.rope_dim)
        pack_refuse(p, "graph", "graph", "RotaryEmbedding rotary_embedding_dim %d != cache width x 2 = %d", p->g.rope_dim_attr,
                    p->g.rope_dim);
}
