/* lib/pack's graph walk on tiny graphs built here with the protobuf-c structs (one layer, the CPU
 * builder's shape: Gather embedding, SimplifiedLayerNormalization, packed qkv MatMulNBits into a
 * GroupQueryAttention with its rope caches, o projection, SkipSimplifiedLayerNormalization, SiLU MLP,
 * final skip norm, lm_head). The expected roles are written by hand from that structure. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "onnx/onnx.pb-c.h"
#include "pack/pack.h"
#include "tap.h"

/* ---- failing allocations: strdup, asprintf and vasprintf (what lib/pack builds its names, texts and paths
 * with) are interposed here (the program's definitions come before libc's); with fail_at = N the Nth call
 * from then on fails as libc's does without memory (NULL / -1, errno ENOMEM). */
static long alloc_calls, fail_at;
static int injected;
static int fail_now(void)
{
    if (fail_at && ++alloc_calls == fail_at) {
        injected = 1;
        errno = ENOMEM;
        return 1;
    }
    return 0;
}
char *strdup(const char *s)
{
    if (fail_now())
        return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    return d ? memcpy(d, s, n) : NULL;
}
int vasprintf(char **out, const char *fmt, va_list ap)
{
    if (fail_now())
        return -1;
    va_list aq;
    va_copy(aq, ap);
    int n = vsnprintf(NULL, 0, fmt, aq);
    va_end(aq);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!s)
        return -1;
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    *out = s;
    return n;
}
int asprintf(char **out, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(out, fmt, ap);
    va_end(ap);
    return n;
}

enum { H = 32, HEADS = 2, KV = 1, HD = 16, QKV = (HEADS + 2 * KV) * HD, I = 64, V = 8, CTX = 16 };

/* everything allocated for a graph, freed together */
static void *arena[1024];
static size_t n_arena;
static void *keep(void *p)
{
    if (!p || n_arena == sizeof arena / sizeof arena[0])
        abort();
    return arena[n_arena++] = p;
}
static void arena_free(void)
{
    while (n_arena)
        free(arena[--n_arena]);
}

typedef struct {
    Onnx__NodeProto *node[64];
    size_t n_node;
    Onnx__TensorProto *init[64];
    size_t n_init;
    Onnx__ValueInfoProto *inputs[8], *outputs[2];
    size_t n_in, n_out;
} gb;

static Onnx__AttributeProto *attr_int(const char *name, int64_t v)
{
    Onnx__AttributeProto *a = keep(malloc(sizeof *a));
    onnx__attribute_proto__init(a);
    a->name = (char *)name;
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
    a->has_type = 1;
    a->i = v;
    a->has_i = 1;
    return a;
}

/* node OP with inputs ins (NULL-terminated, "" for an empty slot), outputs outs, attributes */
static void add_node(gb *g, const char *op, const char *name, const char **ins, const char **outs, Onnx__AttributeProto **at)
{
    Onnx__NodeProto *n = keep(malloc(sizeof *n));
    onnx__node_proto__init(n);
    n->op_type = (char *)op;
    n->name = (char *)name;
    /* copied: the lists may be compound literals of a block that ends before the graph is packed */
    while (ins[n->n_input])
        n->n_input++;
    n->input = keep(malloc((n->n_input + 1) * sizeof *n->input));
    memcpy(n->input, ins, n->n_input * sizeof *n->input);
    while (outs[n->n_output])
        n->n_output++;
    n->output = keep(malloc((n->n_output + 1) * sizeof *n->output));
    memcpy(n->output, outs, n->n_output * sizeof *n->output);
    while (at && at[n->n_attribute])
        n->n_attribute++;
    n->attribute = at;
    /* onnxruntime's contrib ops are com.microsoft's (the walk matches an op with its domain) */
    if (!strcmp(op, "MatMulNBits") || !strcmp(op, "GroupQueryAttention") || !strcmp(op, "SkipSimplifiedLayerNormalization"))
        n->domain = "com.microsoft";
    g->node[g->n_node++] = n;
}

/* an initializer of dtype (1 float, 2 uint8) with dims, filled with a small pattern */
static void add_init(gb *g, const char *name, int dtype, int ndim, const int64_t *dims)
{
    Onnx__TensorProto *t = keep(malloc(sizeof *t));
    onnx__tensor_proto__init(t);
    t->name = (char *)name;
    t->data_type = dtype;
    t->has_data_type = 1;
    t->n_dims = (size_t)ndim;
    t->dims = keep(malloc((size_t)ndim * sizeof *t->dims));
    size_t count = 1;
    for (int i = 0; i < ndim; i++)
        count *= (size_t)(t->dims[i] = dims[i]);
    size_t bytes = count * (dtype == 1 ? 4 : 1);
    uint8_t *d = keep(malloc(bytes));
    for (size_t i = 0; i < bytes; i++)
        d[i] = (uint8_t)(i * 7 + 1);
    if (dtype == 1)
        for (size_t i = 0; i < count; i++) {
            float f = 0.01f * (float)(i % 13) + 0.5f;
            memcpy(d + 4 * i, &f, 4);
        }
    t->raw_data.data = d;
    t->raw_data.len = bytes;
    t->has_raw_data = 1;
    g->init[g->n_init++] = t;
}

static void add_value(Onnx__ValueInfoProto **list, size_t *n, const char *name)
{
    Onnx__ValueInfoProto *v = keep(malloc(sizeof *v));
    onnx__value_info_proto__init(v);
    v->name = (char *)name;
    list[(*n)++] = v;
}

/* a MatMulNBits projection NAME: x [.., k] -> out [.., n], 4-bit, block 32, weights NAME.B / NAME.S */
static void add_mnb(gb *g, const char *name, const char *x, const char *out, int64_t n, int64_t k)
{
    int64_t kb = (k + 31) / 32;
    char *b, *s;
    if (asprintf(&b, "%s.B", name) < 0 || asprintf(&s, "%s.S", name) < 0)
        abort();
    keep(b);
    keep(s);
    add_init(g, b, 2, 3, (int64_t[]){n, kb, 16});
    add_init(g, s, 1, 1, (int64_t[]){n * kb});
    const char **ins = keep(malloc(4 * sizeof *ins));
    ins[0] = x, ins[1] = b, ins[2] = s, ins[3] = NULL;
    const char **outs = keep(malloc(2 * sizeof *outs));
    outs[0] = out, outs[1] = NULL;
    Onnx__AttributeProto **at = keep(malloc(6 * sizeof *at));
    at[0] = attr_int("K", k), at[1] = attr_int("N", n), at[2] = attr_int("bits", 4), at[3] = attr_int("block_size", 32);
    at[4] = attr_int("accuracy_level", 0), at[5] = NULL;
    add_node(g, "MatMulNBits", name, ins, outs, at);
}

#define LIST(...) ((const char *[]){__VA_ARGS__, NULL})

enum { QKV_BIAS = 1, UP_FIRST = 2, NO_ACTIVATION = 4 };

/* the one-layer graph, variant flags above; written as DIR/model.onnx */
static void build(const char *dir, int flags)
{
    static gb g;
    memset(&g, 0, sizeof g);
    add_value(g.inputs, &g.n_in, "input_ids");
    add_value(g.inputs, &g.n_in, "past_key_values.0.key");
    add_value(g.inputs, &g.n_in, "past_key_values.0.value");
    add_value(g.inputs, &g.n_in, "seqlens_k");
    add_value(g.inputs, &g.n_in, "total_sequence_length");
    add_value(g.outputs, &g.n_out, "logits");
    add_init(&g, "embed.W", 1, 2, (int64_t[]){V, H});
    add_node(&g, "Gather", "embed", LIST("embed.W", "input_ids"), LIST("e"), NULL);
    add_init(&g, "ln0.W", 1, 1, (int64_t[]){H});
    add_node(&g, "SimplifiedLayerNormalization", "ln0", LIST("e", "ln0.W"), LIST("n0"), NULL);
    /* attention: packed qkv (optionally + bias) into GroupQueryAttention slot 0 */
    add_mnb(&g, "qkv", "n0", "qkv_out", QKV, H);
    const char *att_in = "qkv_out";
    if (flags & QKV_BIAS) {
        add_init(&g, "qkv.bias", 1, 1, (int64_t[]){QKV});
        add_node(&g, "Add", "qkv_add", LIST("qkv_out", "qkv.bias"), LIST("qkv_b"), NULL);
        att_in = "qkv_b";
    }
    add_init(&g, "cos_cache", 1, 2, (int64_t[]){CTX, HD / 2});
    add_init(&g, "sin_cache", 1, 2, (int64_t[]){CTX, HD / 2});
    Onnx__AttributeProto **at = keep(malloc(4 * sizeof *at));
    at[0] = attr_int("num_heads", HEADS), at[1] = attr_int("kv_num_heads", KV), at[2] = attr_int("do_rotary", 1), at[3] = NULL;
    const char **gin = keep(malloc(10 * sizeof *gin));
    const char *gv[] = {att_in, "", "", "past_key_values.0.key", "past_key_values.0.value", "seqlens_k",
                        "total_sequence_length", "cos_cache", "sin_cache", NULL};
    memcpy(gin, gv, sizeof gv);
    add_node(&g, "GroupQueryAttention", "gqa", gin, LIST("att", "present.0.key", "present.0.value"), at);
    add_mnb(&g, "o", "att", "o_out", H, H);
    add_init(&g, "ln1.W", 1, 1, (int64_t[]){H});
    add_node(&g, "SkipSimplifiedLayerNormalization", "ln1", LIST("o_out", "e", "ln1.W"), LIST("n1", "", "", "r1"), NULL);
    /* MLP: silu(gate) * up -> down */
    if (flags & UP_FIRST)
        add_mnb(&g, "up", "n1", "u_out", I, H);
    add_mnb(&g, "gate", "n1", "g_out", I, H);
    if (!(flags & UP_FIRST))
        add_mnb(&g, "up", "n1", "u_out", I, H);
    if (flags & NO_ACTIVATION) {
        add_node(&g, "Mul", "act", LIST("g_out", "u_out"), LIST("h"), NULL);
    } else {
        add_node(&g, "Sigmoid", "sig", LIST("g_out"), LIST("sg"), NULL);
        add_node(&g, "Mul", "silu", LIST("g_out", "sg"), LIST("silu_out"), NULL);
        add_node(&g, "Mul", "act", LIST("silu_out", "u_out"), LIST("h"), NULL);
    }
    add_mnb(&g, "down", "h", "d_out", H, I);
    add_init(&g, "fin.W", 1, 1, (int64_t[]){H});
    add_node(&g, "SkipSimplifiedLayerNormalization", "fin", LIST("d_out", "r1", "fin.W"), LIST("f", "", "", "r2"), NULL);
    add_mnb(&g, "lm", "f", "logits", V, H);

    Onnx__GraphProto gp;
    onnx__graph_proto__init(&gp);
    gp.name = "g";
    gp.node = g.node, gp.n_node = g.n_node;
    gp.initializer = g.init, gp.n_initializer = g.n_init;
    gp.input = g.inputs, gp.n_input = g.n_in;
    gp.output = g.outputs, gp.n_output = g.n_out;
    Onnx__ModelProto m;
    onnx__model_proto__init(&m);
    m.ir_version = 8, m.has_ir_version = 1;
    m.graph = &gp;
    size_t len = onnx__model_proto__get_packed_size(&m);
    uint8_t *buf = keep(malloc(len));
    onnx__model_proto__pack(&m, buf);
    char path[512];
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, len, f) != len || fclose(f))
        abort();
    arena_free();
}

/* the roles in emission order, one string "a b c" */
static char *roles(const pack *p)
{
    size_t cap = 4096, n = 0;
    char *s = calloc(1, cap);
    for (size_t i = 0; i < pack_tensor_count(p); i++)
        n += (size_t)snprintf(s + n, cap - n, "%s%s", i ? " " : "", pack_tensor_at(p, i)->role);
    return s;
}

/* the exit code, tensor count and every refusal as one string */
static char *verdict(const pack *p)
{
    char *s = NULL;
    size_t n = 0;
    FILE *m = open_memstream(&s, &n);
    if (!m)
        abort();
    fprintf(m, "exit %d, %zu tensors", pack_exit_code(p), pack_tensor_count(p));
    for (size_t i = 0; i < pack_refusal_count(p); i++)
        fprintf(m, "; %s: %s [%s]", pack_refusal_at(p, i)->what, pack_refusal_at(p, i)->reason, pack_refusal_at(p, i)->code);
    if (fclose(m))
        abort();
    return s;
}

static int refused_with(const pack *p, const char *code, const char *text)
{
    for (size_t i = 0; i < pack_refusal_count(p); i++) {
        const pack_refusal *r = pack_refusal_at(p, i);
        if (!strcmp(r->code, code) && strstr(r->reason, text))
            return 1;
    }
    return 0;
}

int main(void)
{
    char dir[] = "/tmp/pack_graph.XXXXXX";
    if (!mkdtemp(dir))
        abort();
    ogk_error e;

    build(dir, 0);
    pack *p = pack_open(dir, &e);
    TAP_OK(p != NULL, "a directory with only model.onnx opens as a pack (%s)", p ? "" : e.msg);
    char *r = roles(p);
    TAP_OK(!strcmp(r, "embed layers.0.input_norm layers.0.attn.qkv layers.0.attn.o layers.0.post_attn_norm "
                      "layers.0.mlp.gate layers.0.mlp.up layers.0.mlp.down final_norm lm_head rope.cos rope.sin"),
           "cpu-style layer: every weight gets its role, in emission order (%s)", r);
    free(r);
    const pack_tensor *t = pack_find(p, "layers.0.attn.qkv");
    TAP_OK(t && t->dtype == OGK_Q4 && t->n == QKV && t->k == H && t->block == 32 && !strcmp(t->name, "qkv.B") &&
               !strcmp(t->scales_name, "qkv.S") && !t->has_zp,
           "the packed qkv projection: q4 [%d, %d], block 32, its own B and scales, no zero points", QKV, H);
    t = pack_find(p, "layers.0.mlp.gate");
    TAP_OK(t && !strcmp(t->name, "gate.B"), "gate is the projection feeding the activation (%s)", t ? t->name : "-");
    t = pack_find(p, "layers.0.mlp.down");
    TAP_OK(t && t->n == H && t->k == I && t->k_blocks == 2, "down is [%d, %d] with 2 blocks per row", H, I);
    t = pack_find(p, "rope.cos");
    TAP_OK(t && t->ndim == 2 && t->shape[0] == CTX && t->shape[1] == HD / 2 && !strcmp(t->name, "cos_cache"),
           "rope.cos is the attention node's cos_cache [%d, %d]", CTX, HD / 2);
    t = pack_find(p, "embed");
    TAP_OK(t && t->dtype == OGK_F32 && t->shape[0] == V && t->shape[1] == H, "embed is the float Gather table");
    TAP_OK(!strcmp(pack_flavour_name(pack_flavour(p)), "builder-cpu"), "packed qkv: builder-cpu flavour");
    const json_t *m = pack_model(p);
    TAP_OK(json_integer_value(json_object_get(m, "num_layers")) == 0 || json_is_null(json_object_get(m, "num_layers")),
           "no genai_config.json: the description's layer count is not invented");
    TAP_OK(refused_with(p, "file_missing", "configuration"), "no genai_config.json: refused by name");
    pack_close(p);

    build(dir, QKV_BIAS);
    p = pack_open(dir, &e);
    r = roles(p);
    TAP_OK(strstr(r, "layers.0.attn.qkv layers.0.attn.qkv_bias layers.0.attn.o") != NULL,
           "an Add with an initializer between qkv and the attention node is the qkv bias (%s)", r);
    free(r);
    t = pack_find(p, "layers.0.attn.qkv_bias");
    TAP_OK(t && t->shape[0] == QKV && !strcmp(t->name, "qkv.bias"), "the bias is qkv.bias [%d]", QKV);
    pack_close(p);

    build(dir, UP_FIRST);
    p = pack_open(dir, &e);
    t = pack_find(p, "layers.0.mlp.gate");
    const pack_tensor *u = pack_find(p, "layers.0.mlp.up");
    TAP_OK(t && u && !strcmp(t->name, "gate.B") && !strcmp(u->name, "up.B"),
           "node order does not decide gate and up: the activation does");
    pack_close(p);

    build(dir, NO_ACTIVATION);
    p = pack_open(dir, &e);
    TAP_OK(refused_with(p, "graph", "cannot find gate, up and down"), "an MLP without an activation is refused by name");
    TAP_OK(!pack_find(p, "layers.0.mlp.gate"), "and no gate role is guessed");
    pack_close(p);

    /* each strdup / asprintf / vasprintf pack_open makes failing in turn (a pack with a configuration, so
     * that its reading goes through the files, the graph, the description and the refusals): the pack is
     * refused out_of_memory (exit 4), or not opened with errno ENOMEM, never an abort or a crash */
    build(dir, 0);
    char path[600];
    snprintf(path, sizeof path, "%s/genai_config.json", dir);
    FILE *gf = fopen(path, "w");
    if (!gf || fputs("{\"model\": {\"type\": \"qwen2\", \"context_length\": 16, \"vocab_size\": 8, "
                     "\"decoder\": {\"filename\": \"model.onnx\", \"num_hidden_layers\": 1}}}", gf) < 0 || fclose(gf))
        abort();
    /* the verdict with every allocation granted: a failure absorbed where it is harmless (lib/util's note of
     * an input's name) must leave it exactly so */
    p = pack_open(dir, &e);
    char *want = p ? verdict(p) : strdup("not opened");
    pack_close(p);
    int calls = 0, bad = 0;
    for (long n = 1; n < 100000; n++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            alloc_calls = 0, fail_at = n;
            pack *q = pack_open(dir, &e);
            if (!injected)
                _exit(10);
            if (!q)
                _exit(errno == ENOMEM && strstr(e.msg, "out of memory") ? 0 : 2);
            char *got = verdict(q);
            int ok = (pack_exit_code(q) == 4 && refused_with(q, "out_of_memory", "out of memory")) || !strcmp(got, want);
            if (!ok)
                printf("#   %s\n", got);
            free(got);
            pack_close(q);
            _exit(ok ? 0 : 3);
        }
        int st = 0;
        if (pid < 0 || waitpid(pid, &st, 0) != pid)
            abort();
        if (WIFEXITED(st) && WEXITSTATUS(st) == 10)
            break;
        calls++;
        if (!WIFEXITED(st) || WEXITSTATUS(st)) {
            if (++bad <= 5)
                printf("# call %ld failing: %s %d\n", n, WIFEXITED(st) ? "exit" : "signal",
                       WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
        }
    }
    TAP_OK(calls > 10 && !bad, "each of pack_open's %d strdup / asprintf / vasprintf calls failing in turn: refused "
           "out_of_memory (exit 4), not opened (ENOMEM) or judged as with the memory, never an abort or another "
           "refusal (%d did otherwise)", calls, bad);
    free(want);
    unlink(path);

    snprintf(path, sizeof path, "%s/model.onnx", dir);
    unlink(path);
    rmdir(dir);
    return TAP_DONE();
}
