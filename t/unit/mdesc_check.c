/* lib/mdesc, the one check of a runnable model, on descriptions and tensor sets written here by hand
 * (a 2-layer qwen2-shaped model: packed qkv with bias, tied). Each refusal must name its key. */
#include <string.h>

#include "mdesc/mdesc.h"
#include "tap.h"

static const char *base =
    "{\"family\":\"qwen2\",\"vocab_size\":100,\"hidden_size\":32,\"intermediate_size\":64,\"num_layers\":2,"
    "\"num_heads\":2,\"num_kv_heads\":1,\"head_dim\":16,\"context_length\":64,\"rms_norm_eps\":1e-6,"
    "\"rope\":{\"dim\":16,\"interleaved\":false},\"tie_embeddings\":true,\"bos_token_id\":1,"
    "\"eos_token_ids\":[2,3],\"pad_token_id\":0,\"qkv_bias\":true,\"qk_norm\":false}";

/* config from base with key set to the JSON value v (NULL: removed); returns mdesc_config's rc */
static int cfg(const char *key, const char *v, model_config *c, ogk_error *e, int *code, mdesc_where *w)
{
    json_t *j = json_loads(base, 0, NULL);
    if (key && v)
        json_object_set_new(j, key, json_loads(v, JSON_DECODE_ANY, NULL));
    else if (key)
        json_object_del(j, key);
    int rc = mdesc_config(c, j, e, code, w);
    json_decref(j);
    return rc;
}

static mdesc_tensor T[64];
static char names[64][48];
static size_t nt;
static void add(const char *role, int dt, uint64_t a, uint64_t b)
{
    snprintf(names[nt], sizeof names[nt], "%s", role);
    T[nt] = (mdesc_tensor){names[nt], dt, b ? 2 : 1, {a, b, 0, 0}};
    nt++;
}

/* the tensors a 2-layer model of base needs (q = 32, kv = 16, qkv = 64) */
static void tensors(void)
{
    nt = 0;
    add("lm_head", MDESC_Q4, 100, 32);
    add("final_norm", MDESC_F32, 32, 0);
    add("rope.cos", MDESC_F32, 64, 8);
    add("rope.sin", MDESC_F32, 64, 8);
    for (int l = 0; l < 2; l++) {
        char r[48];
#define R(s) (snprintf(r, sizeof r, "layers.%d.%s", l, s), r)
        add(R("input_norm"), MDESC_F16, 32, 0);
        add(R("post_attn_norm"), MDESC_F16, 32, 0);
        add(R("attn.qkv"), MDESC_Q4, 64, 32);
        add(R("attn.qkv_bias"), MDESC_F32, 64, 0);
        add(R("attn.o"), MDESC_Q4, 32, 32);
        add(R("mlp.gate"), MDESC_Q4, 64, 32);
        add(R("mlp.up"), MDESC_Q4, 64, 32);
        add(R("mlp.down"), MDESC_Q4, 32, 64);
#undef R
    }
}

static int drop(const char *role)
{
    for (size_t i = 0; i < nt; i++)
        if (!strcmp(T[i].role, role)) {
            T[i] = T[--nt];
            return 1;
        }
    return 0;
}

int main(void)
{
    model_config c;
    ogk_error e;
    int code;
    mdesc_where w;

    TAP_OK(cfg(NULL, NULL, &c, &e, &code, &w) == 0 && c.family == FAMILY_QWEN2 && c.n_eos == 2 && c.eos_ids[1] == 3 &&
               c.rope_dim == 16 && c.tied && c.qkv_bias && c.context_length == 64,
           "the base description is read as written");

    static const struct {
        const char *key, *val, *where;
        int code;
    } bad[] = {
        {"family", "\"unknown\"", "family", 4},
        {"family", "\"\"", "family", 4},
        {"family", NULL, "family", 3},
        {"bos_token_id", "1099511627776", "bos_token_id", 3},  /* 2^40 */
        {"pad_token_id", "8589934592", "pad_token_id", 3},     /* 2^33 */
        {"bos_token_id", "100", "bos_token_id", 3},            /* == vocab */
        {"eos_token_ids", "[2, 1099511627776]", "eos_token_ids", 3},
        {"eos_token_ids", "[2, \"x\"]", "eos_token_ids", 3},
        {"eos_token_ids", "[1,2,3,4,5,6,7,8,9]", "eos_token_ids", 3},
        {"context_length", "0", "context_length", 3},
        {"context_length", "4611686018427387904", "context_length", 3}, /* 2^62 */
        {"num_kv_heads", "3", "num_kv_heads", 3},
        {"rms_norm_eps", "-1", "rms_norm_eps", 3},
        {"rope", "{\"dim\": 17}", "rope.dim", 3},
        {"hidden_size", "\"32\"", "hidden_size", 3},
        {"activation", "\"relu\"", "activation", 4},
        {"activation", "7", "activation", 3},
        {"embed_scale", "0", "embed_scale", 3},
        {"attn_softcap", "-50", "attn_softcap", 3},
        {"final_softcap", "\"30\"", "final_softcap", 3},
        {"attn_scale", "1e39", "attn_scale", 3}, /* beyond float */
        {"sliding_window", "4096", "sliding_window", 3},
        {"sliding_window", "{\"size\": 0, \"layers\": [0]}", "sliding_window.size", 3},
        {"sliding_window", "{\"size\": 8, \"layers\": [2]}", "sliding_window.layers", 3},
        {"sliding_window", "{\"size\": 8}", "sliding_window.layers", 3},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = cfg(bad[i].key, bad[i].val, &c, &e, &code, &w);
        TAP_OK(rc == -1 && code == bad[i].code && !strcmp(w.key, bad[i].where), "%s = %s: refused, exit %d, names %s (%s)",
               bad[i].key, bad[i].val ? bad[i].val : "(absent)", bad[i].code, bad[i].where, e.msg);
    }
    TAP_OK(cfg("eos_token_ids", "5", &c, &e, &code, &w) == 0 && c.n_eos == 1 && c.eos_ids[0] == 5,
           "a single eos id is an array of one");
    TAP_OK(cfg(NULL, NULL, &c, &e, &code, &w) == 0 && c.activation == MODEL_ACT_SILU && c.embed_scale == 1.0f &&
               c.attn_scale == 0.25f && !c.attn_softcap && !c.final_softcap && !c.window && !c.sandwich &&
               !model_layer_windowed(&c, 0),
           "without the Gemma keys: SiLU, no scales, caps, window or sandwich norms; scores scaled 1/sqrt(head_dim)");
    TAP_OK(cfg("sliding_window", "{\"size\": 8, \"layers\": [1]}", &c, &e, &code, &w) == 0 && c.window == 8 &&
               !model_layer_windowed(&c, 0) && model_layer_windowed(&c, 1) && !model_layer_windowed(&c, 2),
           "a sliding window on the layers named only");
    TAP_OK(cfg("activation", "\"gelu_tanh\"", &c, &e, &code, &w) == 0 && c.activation == MODEL_ACT_GELU_TANH &&
               cfg("attn_softcap", "50", &c, &e, &code, &w) == 0 && c.attn_softcap == 50.0f,
           "activation and soft cap read");

    cfg(NULL, NULL, &c, &e, &code, &w);
    tensors();
    model_config c2 = c;
    TAP_OK(mdesc_check_tensors(&c2, T, nt, &e, &w) == 0, "the full tensor set passes (%s)", e.msg);

    tensors();
    drop("layers.1.attn.qkv_bias");
    c2 = c;
    TAP_OK(mdesc_check_tensors(&c2, T, nt, &e, &w) == -1 && !strcmp(w.key, "tensor layers.1.attn.q_bias"),
           "one layer without its qkv bias is refused naming it (%s)", e.msg);

    static const char *fams[] = {"llama", "phi3", "qwen3", "mistral"};
    for (size_t i = 0; i < 4; i++) {
        char v[32];
        snprintf(v, sizeof v, "\"%s\"", fams[i]);
        cfg("family", v, &c2, &e, &code, &w);
        tensors();
        TAP_OK(mdesc_check_tensors(&c2, T, nt, &e, &w) == -1 && !strcmp(w.key, "family"),
               "family %s on a qwen2-shaped graph contradicts it (%s)", fams[i], e.msg);
    }

    /* sandwich norms: a gemma2 description wants them on every layer; other families must not have them */
    {
        json_t *j = json_loads(base, 0, NULL);
        json_object_set_new(j, "family", json_string("gemma2"));
        json_object_set_new(j, "qkv_bias", json_false());
        json_object_set_new(j, "sandwich_norms", json_true());
        TAP_OK(mdesc_config(&c2, j, &e, &code, &w) == 0 && c2.family == FAMILY_GEMMA2 && c2.sandwich, "a gemma2 description");
        tensors();
        for (int l = 0; l < 2; l++) { /* adds first: drop() moves the last entry, whose name slot add() reuses */
            char r[48];
            snprintf(r, sizeof r, "layers.%d.attn.out_norm", l);
            add(r, MDESC_F32, 32, 0);
            snprintf(r, sizeof r, "layers.%d.mlp.out_norm", l);
            add(r, MDESC_F32, 32, 0);
        }
        drop("layers.0.attn.qkv_bias");
        drop("layers.1.attn.qkv_bias");
        model_config c3 = c2;
        TAP_OK(mdesc_check_tensors(&c3, T, nt, &e, &w) == 0, "gemma2 tensors with sandwich norms pass (%s)", e.msg);
        drop("layers.1.mlp.out_norm");
        c3 = c2;
        TAP_OK(mdesc_check_tensors(&c3, T, nt, &e, &w) == -1 && !strcmp(w.key, "tensor layers.1.mlp.out_norm"),
               "a layer without its MLP output norm is refused naming it (%s)", e.msg);
        json_object_set_new(j, "sandwich_norms", json_false());
        mdesc_config(&c2, j, &e, &code, &w);
        c3 = c2;
        TAP_OK(mdesc_check_tensors(&c3, T, nt, &e, &w) == -1, "out norms while the description says none: refused (%s)", e.msg);
        json_decref(j);
        c2 = c;
        tensors();
        add("layers.0.attn.out_norm", MDESC_F32, 32, 0);
        TAP_OK(mdesc_check_tensors(&c2, T, nt, &e, &w) == -1 && !strcmp(w.key, "tensor layers.0.attn.out_norm"),
               "an out norm in a qwen2 model is refused naming it (%s)", e.msg);
    }

    { /* LayerNorms (olmo, "norm": "layer"): optional biases [dim]; a bias beside RMSNorms is refused, and the
       * family and the norm kind must agree */
        model_config c3;
        TAP_OK(cfg("norm", "\"rms\"", &c2, &e, &code, &w) == 0 && !c2.layer_norm, "norm \"rms\" is read");
        TAP_OK(cfg("norm", "\"group\"", &c2, &e, &code, &w) == -1 && !strcmp(w.key, "norm") && code == 3,
               "norm \"group\" is refused naming it (%s)", e.msg);
        TAP_OK(cfg("norm", "7", &c2, &e, &code, &w) == -1 && !strcmp(w.key, "norm"), "a norm that is no string is refused");
        json_t *j = json_loads(base, 0, NULL);
        json_object_set_new(j, "family", json_string("olmo"));
        json_object_set_new(j, "qkv_bias", json_false());
        json_object_set_new(j, "norm", json_string("layer"));
        TAP_OK(mdesc_config(&c2, j, &e, &code, &w) == 0 && c2.family == FAMILY_OLMO && c2.layer_norm, "an olmo description");
        /* the qwen2-shaped tensors without q/k/v biases, with norm biases (bias 1), one of the wrong length (2)
         * (adds before drops: drop() moves the last entry, whose name slot add() reuses) */
#define OLMO_TENSORS(bias)                                                                                         \
    do {                                                                                                           \
        tensors();                                                                                                 \
        if (bias) {                                                                                                \
            add("layers.0.input_norm_bias", MDESC_F32, 32, 0);                                                     \
            add("layers.1.post_attn_norm_bias", MDESC_F16, 32, 0);                                                 \
            add("final_norm_bias", MDESC_BF16, 32, 0);                                                             \
        }                                                                                                          \
        if ((bias) == 2)                                                                                           \
            add("layers.1.input_norm_bias", MDESC_F32, 31, 0);                                                     \
        drop("layers.0.attn.qkv_bias");                                                                            \
        drop("layers.1.attn.qkv_bias");                                                                            \
        c3 = c2;                                                                                                   \
    } while (0)
        OLMO_TENSORS(0);
        TAP_OK(mdesc_check_tensors(&c3, T, nt, &e, &w) == 0, "olmo without norm biases passes (absent: 0) (%s)", e.msg);
        OLMO_TENSORS(1);
        TAP_OK(mdesc_check_tensors(&c3, T, nt, &e, &w) == 0, "olmo with norm biases passes (%s)", e.msg);
        OLMO_TENSORS(2);
        TAP_OK(mdesc_check_tensors(&c3, T, nt, &e, &w) == -1 && !strcmp(w.key, "tensor layers.1.input_norm_bias"),
               "a norm bias of the wrong length is refused naming it (%s)", e.msg);
        json_object_set_new(j, "norm", json_string("rms"));
        mdesc_config(&c2, j, &e, &code, &w);
        OLMO_TENSORS(0);
        TAP_OK(mdesc_check_tensors(&c3, T, nt, &e, &w) == -1 && !strcmp(w.key, "family"),
               "olmo with RMSNorms contradicts the family (%s)", e.msg);
        json_object_set_new(j, "family", json_string("llama"));
        mdesc_config(&c2, j, &e, &code, &w);
        OLMO_TENSORS(1);
        TAP_OK(mdesc_check_tensors(&c3, T, nt, &e, &w) == -1 && !strncmp(w.key, "tensor ", 7) && strstr(w.key, "norm_bias"),
               "a norm bias beside RMSNorms is refused naming it (%s)", e.msg);
        json_object_set_new(j, "norm", json_string("layer"));
        mdesc_config(&c2, j, &e, &code, &w);
        OLMO_TENSORS(0);
        TAP_OK(mdesc_check_tensors(&c3, T, nt, &e, &w) == -1 && !strcmp(w.key, "family"),
               "llama with LayerNorms contradicts the family (%s)", e.msg);
#undef OLMO_TENSORS
        json_decref(j);
    }

    { /* LongRoPE: rope.long_after T wants the long pair (context rows) and a short pair of T rows or more */
        model_config c2;
        ogk_error e2;
        TAP_OK(cfg("rope", "{\"dim\":16,\"long_after\":16}", &c2, &e2, &code, &w) == 0 && c2.rope_long_after == 16,
               "rope.long_after is read");
        TAP_OK(cfg("rope", "{\"dim\":16,\"long_after\":0}", &c2, &e2, &code, &w) == -1 && !strcmp(w.key, "rope.long_after"),
               "a rope.long_after of 0 is refused naming it (%s)", e2.msg);
        cfg("rope", "{\"dim\":16,\"long_after\":16}", &c2, &e2, &code, &w);
        model_config c3 = c2;
        tensors();
        TAP_OK(mdesc_check_tensors(&c3, T, nt, &e2, &w) == -1 && !strcmp(w.key, "tensor rope.cos_long"),
               "long_after without the long pair: refused naming it (%s)", e2.msg);
        add("rope.cos_long", MDESC_F32, 64, 8);
        add("rope.sin_long", MDESC_F32, 64, 8);
        for (size_t i = 0; i < nt; i++) /* the short pair: 16 rows */
            if (!strcmp(T[i].role, "rope.cos") || !strcmp(T[i].role, "rope.sin"))
                T[i].shape[0] = 16;
        c3 = c2;
        TAP_OK(mdesc_check_tensors(&c3, T, nt, &e2, &w) == 0 && c3.context_length == 64,
               "a short pair of long_after rows and a long pair of the context's: the context stays 64 (%s)", e2.msg);
        for (size_t i = 0; i < nt; i++)
            if (!strcmp(T[i].role, "rope.cos") || !strcmp(T[i].role, "rope.sin"))
                T[i].shape[0] = 15;
        c3 = c2;
        TAP_OK(mdesc_check_tensors(&c3, T, nt, &e2, &w) == -1 && !strcmp(w.key, "tensor rope.cos"),
               "a short pair with fewer rows than long_after: refused (%s)", e2.msg);
        c3 = c;
        tensors();
        add("rope.cos_long", MDESC_F32, 64, 8);
        add("rope.sin_long", MDESC_F32, 64, 8);
        TAP_OK(mdesc_check_tensors(&c3, T, nt, &e2, &w) == -1 && !strcmp(w.key, "tensor rope.cos_long"),
               "a long pair without rope.long_after: refused naming it (%s)", e2.msg);
    }
    c2 = c;
    tensors();
    add("layers.2.mlp.up", MDESC_Q4, 64, 32);
    TAP_OK(mdesc_check_tensors(&c2, T, nt, &e, &w) == -1 && strstr(e.msg, "not a role of a 2-layer model"),
           "a tensor of a layer the model does not have is refused (%s)", e.msg);
    c2 = c;
    tensors();
    add("embed", MDESC_F32, 100, 32);
    TAP_OK(mdesc_check_tensors(&c2, T, nt, &e, &w) == -1 && !strcmp(w.key, "tensor embed"),
           "a separate embed in a tied model is refused");
    c2 = c;
    tensors();
    add("layers.0.attn.o_bias", MDESC_F32, 32, 0);
    TAP_OK(mdesc_check_tensors(&c2, T, nt, &e, &w) == -1 && strstr(e.msg, "o_proj bias"),
           "an o_proj bias the runtime would ignore is refused");
    c2 = c;
    tensors();
    T[0].shape[0] = 99;
    TAP_OK(mdesc_check_tensors(&c2, T, nt, &e, &w) == -1 && !strcmp(w.key, "tensor lm_head"),
           "lm_head rows contradicting vocab_size are refused");
    /* an unquantised lm_head: a MatMul's float [hidden, vocab]; untied only, in that orientation */
    c2 = c;
    tensors();
    T[0] = (mdesc_tensor){names[0], MDESC_F32, 2, {32, 100, 0, 0}};
    TAP_OK(mdesc_check_tensors(&c2, T, nt, &e, &w) == -1 && !strcmp(w.key, "tensor lm_head") && strstr(e.msg, "tied"),
           "a float lm_head in a tied model is refused (%s)", e.msg);
    c2 = c;
    c2.tied = 0;
    add("embed", MDESC_F16, 100, 32);
    TAP_OK(mdesc_check_tensors(&c2, T, nt, &e, &w) == 0, "an untied float lm_head [hidden, vocab] is taken (%s)",
           mdesc_check_tensors(&c2, T, nt, &e, &w) ? e.msg : "ok");
    T[0].shape[0] = 100, T[0].shape[1] = 32;
    TAP_OK(mdesc_check_tensors(&c2, T, nt, &e, &w) == -1 && strstr(e.msg, "want [32, 100]"),
           "a float lm_head as [vocab, hidden] is refused (%s)", e.msg);
    T[0] = (mdesc_tensor){names[0], MDESC_F32, 3, {32, 100, 1, 0}};
    TAP_OK(mdesc_check_tensors(&c2, T, nt, &e, &w) == -1 && strstr(e.msg, "float with 3 dimensions"),
           "a 3-D float lm_head is refused (%s)", e.msg);
    c2 = c;
    tensors();
    T[2].shape[0] = T[3].shape[0] = 48;
    TAP_OK(mdesc_check_tensors(&c2, T, nt, &e, &w) == 0 && c2.context_length == 48,
           "rope caches of 48 rows lower the context to 48");

    TAP_OK(mdesc_role_known("layers.0.mlp.up", 2) && !mdesc_role_known("=ayers.0.mlp.up", -1) &&
               !mdesc_role_known("layers.01.mlp.up", -1) && !mdesc_role_known("layers.2.mlp.up", 2) &&
               !mdesc_role_known("layers..mlp.up", -1) && !mdesc_role_known("layers.99999999999.mlp.up", -1) &&
               mdesc_role_known("rope.sin", 0) && !mdesc_role_known("", -1),
           "the role vocabulary: known roles only, layer numbers canonical and below the layer count");
    return TAP_DONE();
}
