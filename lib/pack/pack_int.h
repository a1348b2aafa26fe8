/* lib/pack internals shared by pack.c (files, config, model description, report) and graph.c (the
 * ONNX graph: tensors, external data, the role walk, the quantisation checks). Not a public header. */
#ifndef OGK_PACK_INT_H
#define OGK_PACK_INT_H

#include "pack.h"

#include "onnx/onnx.pb-c.h"

typedef struct {
    char *loc; /* relative to the pack dir */
    ogk_map m;
    int ok;
    uint64_t need_end;  /* largest offset+length any initializer asks for */
    int past_end;       /* initializers running past the end */
    uint64_t inb_end;   /* largest offset+length of the initializers inside the file */
} pack_ext;

/* What the graph walk learned besides the tensors (used for the model description). */
typedef struct {
    int num_layers;      /* -1 unknown */
    double rms_eps;      /* < 0 unknown */
    float rms_eps_f;
    int rope_interleaved; /* -1 unknown */
    int rope_dim;         /* from the cache width, -1 unknown */
    int rope_dim_attr;    /* RotaryEmbedding rotary_embedding_dim, 0 absent */
    uint64_t rope_rows;
    int64_t rope_long_after; /* LongRoPE: the long caches apply once the sequence is longer (0: one pair) */
    int gqa_heads, gqa_kv_heads; /* attention node attributes, 0 absent */
    int64_t split_q, split_kv;   /* a Split of packed q|k|v into q, k, v: its sizes (q, kv, kv), 0 none */
    int io_dtype;         /* enum ogk_dtype of the logits, 0 unknown */
    int has_rotary_nodes, has_gqa_rotary, separate_qkv, packed_qkv, has_position_ids, ryzenai_nodes;
    /* the graph's names of the runtime's inputs and of the logits (genai_config decoder.inputs / outputs;
     * default: input_ids, attention_mask, position_ids, logits) */
    const char *name_ids, *name_mask, *name_pos, *name_logits;
    int no_embedding; /* the walk found no embedding and stopped there (its weights' refusals then summed) */
    int qkv_bias, qk_norm, tied;
    int layer_norm;       /* the residual stream's norms are LayerNorms (OLMo), not RMSNorms */
    float attn_scale;     /* GroupQueryAttention scale attribute, 0 absent (1/sqrt(head_dim)) */
    /* Gemma-style graphs (0 / -1 where a graph has none): the embedding's scale (a Mul by a constant), the
     * MLP activation (PACK_ACT_*: the same in every layer), scores soft-capped by the attention node
     * (softcap attribute, the same in every layer), logits soft-capped after lm_head (Div, Tanh, Mul),
     * sandwich norms (a norm on the attention / MLP output before the residual add: layers with them) */
    float embed_scale, attn_softcap, final_softcap;
    int activation;       /* PACK_ACT_*, -1 unknown */
    int window;           /* sliding-window attention: local_window_size (> 0) of the layers that have one, 0 none */
    unsigned char *window_layer; /* [num_layers]: 1 where the layer's attention has the window */
    int attn_out_norms, mlp_out_norms, softcap_layers;
    size_t ignored_constants;
} pack_graph_facts;

struct pack {
    char *dir;
    char *dir_text; /* dir for JSON (pack_utf8_safe) */
    int flavour;
    json_t *genai, *hfcfg, *tokcfg; /* parsed JSON files, NULL when absent or unreadable */
    json_t *model;                  /* normalised description */
    json_t *files;                  /* oga-info "files" object */
    char *onnx_name;                /* decoder.filename or the .onnx found */
    ogk_map onnx_map;
    Onnx__ModelProto *onnx;
    pack_ext *ext;
    size_t n_ext;
    pack_tensor *t;
    size_t n_t, cap_t;
    pack_refusal *r;
    size_t n_r, cap_r;
    pack_asset *a;
    size_t n_a, cap_a;
    void **owned;
    size_t n_owned, cap_owned;
    pack_graph_facts g;
    int npu_files;
    int oom; /* an allocation failed (pack_oom): refused out_of_memory at the end of pack_open */
};

enum { PACK_ACT_SILU = 0, PACK_ACT_GELU_TANH = 1, PACK_ACT_GELU = 2 };

/* memory owned by the pack (freed at pack_close). pack_own(p, NULL), or no room to note ptr (then freed):
 * NULL and the pack marked out of memory. pack_strdup and pack_printf never return NULL: without memory
 * they mark the pack and return "" (the pack is refused; no caller's text is trusted then). */
void *pack_own(pack *p, void *ptr);
char *pack_strdup(pack *p, const char *s);
char *pack_printf(pack *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* An allocation failed: pack_open ends by refusing the pack "out_of_memory" (pack_exit_code 4: this
 * process's limit, not the pack's fault), and pack_refuse drops the refusals that follow (a path or name
 * that could not be built would blame the pack for the missing memory). */
void pack_oom(pack *p);
/* "DIR/name" (malloc'd), or NULL with the pack marked out of memory */
char *pack_path(pack *p, const char *name);
/* add a refusal; what/reason are copied */
void pack_refuse(pack *p, const char *what, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
pack_tensor *pack_add_tensor(pack *p);
/* the refusal code of a pack file that could not be opened or mapped (errno): file_missing, out_of_memory
 * (this process's limit, not the pack's fault: pack_exit_code 4) or file_unreadable */
const char *pack_file_code(int err);
/* invalid UTF-8 bytes of s replaced by '?', in place (text bound for JSON) */
char *pack_utf8_safe(char *s);

/* graph.c: parse the ONNX file, walk it, fill p->t and p->g, refuse what cannot be represented */
void pack_read_graph(pack *p);
/* graph.c: cross-check the tensors against the config dims (called after the model description) */
void pack_check_dims(pack *p);

#endif
