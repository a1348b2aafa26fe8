/* lib/pack — the OGA pack reader. Reads a pack directory (genai_config.json, config.json, the ONNX
 * graph through lib/onnx's generated protobuf code, external data mmapped and bounds-checked, the
 * tokenizer/text assets), walks the graph to give every weight a role, checks every MatMulNBits /
 * GatherBlockQuantized tensor against its attributes, detects the flavour and collects named refusals.
 * Owns pack knowledge only: it never writes anything (oga-extract turns a pack into OGAX) and must not
 * include the container or kernel headers (the dtype vocabulary and the tensor descriptor are
 * lib/util's tensor.h).
 *
 * Nothing large is copied: tensor pointers point into the mmapped external data file (or into the
 * parsed model.onnx for small inline tensors). A few normalisations need a buffer of their own (inline
 * fp16 stored as int32_data, int4 GatherBlockQuantized codes re-biased to u4); the pack owns those.
 * Every pointer stays valid until pack_close.
 *
 * Roles (the strings other modules consume):
 *   embed, lm_head (tied packs: ONE tensor with role lm_head, model.tie_embeddings true),
 *   layers.N.attn.qkv | layers.N.attn.q / .k / .v, layers.N.attn.o,
 *   layers.N.attn.qkv_bias | layers.N.attn.q_bias / .k_bias / .v_bias,
 *   layers.N.attn.q_norm / .k_norm (qwen3), layers.N.mlp.gate / .up / .down,
 *   layers.N.input_norm, layers.N.post_attn_norm, final_norm, rope.cos, rope.sin.
 *
 * Refusals: whatever cannot be represented exactly is listed as {what, code, reason}, never dropped
 * silently. A pack is importable iff it has no refusals. Codes (stable, for scripts and tests):
 *   file_missing, file_unreadable, not_protobuf, config_json, config_missing, config_type,
 *   config_dims, tokenizer_missing, external_data, truncated, unsupported_bits, unsupported_block,
 *   g_idx, tensor_shape, tensor_dtype, unsupported_op, graph, unassigned, npu_packed,
 *   not_utf8 (chat_template.jinja, or names in model.onnx, that are not UTF-8 text), out_of_memory
 *   (the padded copy of a GatherBlockQuantized embedding, sized by the pack, does not fit), too_large (a chat
 *   template over 1 MiB),
 *   and, from the runtime's own check (lib/mdesc, run only when nothing else was refused, so that an
 *   importable pack is one npu-forward runs): model_config (a description value the runtime refuses:
 *   out of range, token id outside the vocabulary), model_unsupported (a family it does not run; model.type is also
 *   checked first, whatever else is refused),
 *   model_tensors (a tensor missing, misshapen, or contradicting the config), tokenizer (tokenizer.json
 *   that the runtime's loader refuses, or a tokenizer.model that tok_spm_json refuses: the pack import
 *   converts a SentencePiece model when there is no tokenizer.json).
 */
#ifndef OGK_PACK_H
#define OGK_PACK_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "util/tensor.h" /* the dtype vocabulary and the tensor descriptor */
#include "util/util.h"

enum pack_flavour { PACK_UNKNOWN = 0, PACK_BUILDER_CPU, PACK_BUILDER_AMD, PACK_AMD_NPU };
const char *pack_flavour_name(int flavour); /* "builder-cpu", "builder-amd", "amd-npu", "unknown" */

/* One weight of the pack, with its role. Quantised weights (dtype OGK_Q4) are in MatMulNBits
 * source order exactly as ogax.h documents: codes [N][kb][block/2] (low nibble first), scales
 * [N][kb] in scale_dtype, zeros u4-packed [N][ceil(kb/2)] or NULL (implicit 8). */
typedef struct {
    OGK_TENSOR_DESC;       /* name: the source initializer (q4: the B / data one); role: see above;
                            * q4: shape [N, K], layout OGK_PLAIN (source order) */
    const char *node;      /* name of the node that consumes it (the MatMulNBits, Gather, norm...) */
    int accuracy_level;    /* MatMulNBits attribute, -1 when absent / not MatMulNBits */
    const char *source_op; /* "MatMulNBits" or "GatherBlockQuantized" */
    const char *scales_name, *zeros_name; /* initializer names (zeros_name NULL when absent) */
    const uint8_t *codes;
    const void *scales;
    const uint8_t *zeros;
    uint64_t codes_size, scales_size, zeros_size;
    /* plain only: prod(shape) * dtype size bytes */
    const void *data;
    uint64_t nbytes;
} pack_tensor;

typedef struct {
    const char *what;   /* "tensor NAME", "file NAME", "genai_config.json: model.decoder.hidden_size", ... */
    const char *code;   /* stable short code, see the list above */
    const char *reason; /* one line, human readable */
} pack_refusal;

/* A small text file of the pack that a runtime needs (tokenizer.json, tokenizer_config.json, ...). */
typedef struct {
    const char *name;
    const uint8_t *data;
    size_t size;
} pack_asset;

typedef struct pack pack;

/* Open and check a pack directory: everything is read, validated and cross-checked here, so a caller
 * can decide before producing any output. Returns NULL only when dir is not a pack at all (missing,
 * not a directory, neither genai_config.json nor an .onnx file) or when there is no memory for the pack
 * itself (then errno is ENOMEM: the caller's init failure, exit 4); e says why. Every other problem is a
 * refusal inside the returned pack, a failed allocation included (refusal "out_of_memory", exit 4 by
 * pack_exit_code), never an abort. */
pack *pack_open(const char *dir, ogk_error *e);
void pack_close(pack *p);

const char *pack_dir(const pack *p);
const char *pack_dir_text(const pack *p); /* the same as UTF-8 text for JSON: an invalid byte shown as '?' */
int pack_flavour(const pack *p);
/* The normalised model description (OGAX "model" object, see ogax.5); fields the pack does not give
 * are null. Never NULL. Owned by the pack. */
const json_t *pack_model(const pack *p);

size_t pack_tensor_count(const pack *p);
const pack_tensor *pack_tensor_at(const pack *p, size_t i); /* in emission order */
const pack_tensor *pack_find(const pack *p, const char *role); /* NULL if absent */
const pack_tensor *pack_find_name(const pack *p, const char *initializer); /* by source name */

size_t pack_refusal_count(const pack *p);
const pack_refusal *pack_refusal_at(const pack *p, size_t i);
/* The exit code of what pack_open found: 0 nothing refused, 3 refused, 4 when a file could not be read
 * for want of memory (refusal code "out_of_memory", a small ulimit -v): the pack was not judged. */
int pack_exit_code(const pack *p);

size_t pack_asset_count(const pack *p);
const pack_asset *pack_asset_at(const pack *p, size_t i);

/* model.onnx's bytes as an ONNX ModelProto (the generated lib/onnx type), or NULL with e filled: not a
 * protobuf, or messages nested deeper than 64 levels (refused before protobuf-c's recursive unpack,
 * which a small hostile file would drive off the stack). Every ModelProto is parsed through this.
 * Free with onnx__model_proto__free_unpacked. */
struct Onnx__ModelProto *pack_onnx_unpack(const uint8_t *data, size_t size, ogk_error *e);

/* The oga-info report (see oga-info(1)); with_tensors adds one entry per tensor. Caller decrefs.
 * NULL only when out of memory. */
json_t *pack_info_json(const pack *p, int with_tensors);

#endif
