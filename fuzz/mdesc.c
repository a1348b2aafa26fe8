/* Fuzz target: the model description reader of npu-forward and spec-replay (lib/mdesc, what
 * model_open and oga-info both run). The input is the JSON "model" object a container carries; an
 * accepted one must give dims in range, and then the tensor check runs twice: on exactly the tensors
 * that config asks for (it must pass) and with one of them dropped (it must refuse, naming it). */
#include "fuzz.h"

#include "mdesc/mdesc.h"

static size_t want(const model_config *c, mdesc_tensor *t, char (*names)[64], size_t cap)
{
    size_t n = 0;
#define ADD(r, dt, a, b)                                                                 \
    do {                                                                                 \
        if (n < cap) {                                                                   \
            snprintf(names[n], 64, "%s", r);                                             \
            t[n] = (mdesc_tensor){names[n], dt, (b) ? 2 : 1, {(uint64_t)(a), (uint64_t)(b), 0, 0}}; \
            n++;                                                                         \
        }                                                                                \
    } while (0)
    uint64_t qd = (uint64_t)c->n_heads * c->head_dim, kvd = (uint64_t)c->n_kv_heads * c->head_dim;
    ADD("lm_head", MDESC_Q4, c->vocab_size, c->dim);
    if (!c->tied)
        ADD("embed", MDESC_F16, c->vocab_size, c->dim);
    ADD("final_norm", MDESC_F32, c->dim, 0);
    if (c->layer_norm)
        ADD("final_norm_bias", MDESC_F16, c->dim, 0);
    /* LongRoPE: the short pair covers the positions up to long_after, the long one the context */
    int T = c->rope_long_after, short_rows = T && T < c->context_length ? T : c->context_length;
    ADD("rope.cos", MDESC_F32, short_rows, c->rope_dim / 2);
    ADD("rope.sin", MDESC_F32, short_rows, c->rope_dim / 2);
    if (T) {
        ADD("rope.cos_long", MDESC_F32, c->context_length, c->rope_dim / 2);
        ADD("rope.sin_long", MDESC_F32, c->context_length, c->rope_dim / 2);
    }
    char r[64];
    for (int l = 0; l < c->n_layers && l < 4; l++) {
#define L(s) (snprintf(r, sizeof r, "layers.%d.%s", l, s), r)
        ADD(L("input_norm"), MDESC_F32, c->dim, 0);
        ADD(L("post_attn_norm"), MDESC_BF16, c->dim, 0);
        if (c->layer_norm && l % 2 == 0) /* optional: odd layers go without */
            ADD(L("input_norm_bias"), MDESC_F32, c->dim, 0);
        ADD(L("attn.qkv"), MDESC_Q4, qd + 2 * kvd, c->dim);
        if (c->qkv_bias)
            ADD(L("attn.qkv_bias"), MDESC_F32, qd + 2 * kvd, 0);
        if (c->qk_norm) {
            ADD(L("attn.q_norm"), MDESC_F32, c->head_dim, 0);
            ADD(L("attn.k_norm"), MDESC_F32, c->head_dim, 0);
        }
        ADD(L("attn.o"), MDESC_Q4, c->dim, qd);
        ADD(L("mlp.gate"), MDESC_Q4, c->hidden_dim, c->dim);
        ADD(L("mlp.up"), MDESC_Q4, c->hidden_dim, c->dim);
        ADD(L("mlp.down"), MDESC_Q4, c->dim, c->hidden_dim);
        if (c->sandwich) {
            ADD(L("attn.out_norm"), MDESC_F32, c->dim, 0);
            ADD(L("mlp.out_norm"), MDESC_F16, c->dim, 0);
        }
#undef L
    }
#undef ADD
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *j = json_loadb((const char *)data, size, 0, NULL);
    model_config c;
    ogk_error e;
    e.msg[0] = 0;
    int code = 0;
    mdesc_where w;
    if (mdesc_config(&c, j, &e, &code, &w)) {
        FUZZ_CHECK(e.msg[0] && (code == 3 || code == 4));
        json_decref(j);
        return 0;
    }
    FUZZ_CHECK(c.vocab_size > 0 && c.dim > 0 && c.n_layers > 0 && c.n_heads > 0 && c.n_kv_heads > 0 && c.head_dim > 0);
    FUZZ_CHECK(c.context_length > 0 && c.rope_dim <= c.head_dim && c.rope_dim % 2 == 0 && c.n_eos <= MODEL_MAX_EOS);
    FUZZ_CHECK(c.bos_id < c.vocab_size && c.pad_id < c.vocab_size);
    FUZZ_CHECK(c.activation >= MODEL_ACT_SILU && c.activation <= MODEL_ACT_GELU && c.embed_scale > 0 && c.attn_scale > 0);
    FUZZ_CHECK(c.attn_softcap >= 0 && c.final_softcap >= 0 && c.window >= 0 && c.rope_long_after >= 0);
    for (int l = 0; l < c.n_layers && l < MODEL_MAX_WINDOW_LAYERS; l++)
        FUZZ_CHECK(!model_layer_windowed(&c, l) || c.window > 0);
    for (int i = 0; i < c.n_eos; i++)
        FUZZ_CHECK(c.eos_ids[i] >= 0 && c.eos_ids[i] < c.vocab_size);
    json_decref(j);
    if (c.n_layers > 4 || c.rope_dim == 0)
        return 0; /* the tensor list below covers 4 layers; a config with more is checked above only */
    static mdesc_tensor t[64];
    static char names[64][64];
    size_t n = want(&c, t, names, 64);
    int fam_ok = c.qkv_bias == (c.family == FAMILY_QWEN2 || c.family == FAMILY_CHATGLM) && c.qk_norm == (c.family == FAMILY_QWEN3) &&
                 c.sandwich == (c.family == FAMILY_GEMMA2) && c.layer_norm == (c.family == FAMILY_OLMO);
    model_config c2 = c;
    int rc = mdesc_check_tensors(&c2, t, n, &e, &w);
    FUZZ_CHECK(fam_ok ? rc == 0 : rc == -1);
    if (rc == 0 && n > 1) {
        c2 = c;
        FUZZ_CHECK(mdesc_check_tensors(&c2, t + 1, n - 1, &e, &w) == -1 && strstr(e.msg, "lm_head"));
    }
    return 0;
}
