/* lib/ogax — the OGAX stream (oga-extract -> q4nx-pack), man/man5/ogax.5. Owns framing, the frame
 * header schema and its validation; knows nothing of ONNX or of the container.
 *
 * Stream = frames, no seeking needed. Each frame:
 *     "OGAX"  u32le header_len  u64le payload_len  header[header_len]  payload[payload_len]
 * header is a UTF-8 JSON object with a "type" (header_len <= 16 MiB). Frame order:
 *   1. {"type":"model","ogax":1,"model":{...},"source":{...}}            payload empty
 *      model = the normalised description: family, vocab_size, hidden_size, intermediate_size,
 *      num_layers, num_heads, num_kv_heads, head_dim, context_length, rms_norm_eps, rope {theta, dim,
 *      interleaved, ...}, tie_embeddings, bos_token_id, eos_token_ids [..], pad_token_id, qkv_bias,
 *      qk_norm, io_dtype, chat_template (string or null). source = {pack, flavour, tool, version}.
 *   2. {"type":"asset","name":"tokenizer.json","size":N,"crc32c":C}    payload = the file's bytes
 *   3. {"type":"tensor","name":..,"role":..,"dtype":"f32|f16|bf16|i32|i64|q4|q8","shape":[..],
 *       "quant":{"bits":4|8,"block_size":B,"k_blocks":kb,"scale_dtype":"f32|f16|bf16",
 *                "zero_points":"u4"|"u8"|"none","source_op":"MatMulNBits"|"GatherBlockQuantized"},  (q4, q8)
 *       "parts":[{"name":"codes|scales|zeros|data","offset":o,"size":s,"crc32c":c}, ...]}
 *      payload = the parts back to back, in order, offsets from the payload start. q4 parts are in
 *      MatMulNBits source order: codes [N][kb][B/2], scales [N][kb], zeros u4-packed [N][ceil(kb/2)];
 *      q8 (bits 8, zero_points "u8"): codes [N][kb][B], scales [N][kb], zeros [N][kb].
 *      q4 and q8 shape is [N, K]. Plain tensors have one part "data" of prod(shape)*sizeof(dtype) bytes.
 *   4. {"type":"end","frames":F,"tensors":T,"assets":A,"payload_bytes":P,"headers_crc32c":H}
 *      (F counts frames before end; H is the CRC32C of every earlier frame's 16-byte prefix and header
 *      bytes, in stream order, so roles and names are covered as the parts' crc32c cover payloads)
 * Anything after the end frame, a missing end frame, counts or a header checksum that disagree are
 * errors. A tensor role must be one of lib/mdesc's vocabulary (mdesc_role_known).
 * Version 2 added headers_crc32c and the role check; version 1 streams are refused by name. */
#ifndef OGK_OGAX_H
#define OGK_OGAX_H

#include <jansson.h>
#include <stdint.h>
#include <sys/uio.h>

#include "util/tensor.h"
#include "util/util.h"

#define OGAX_VERSION 2
#define OGAX_MAX_HEADER (16u << 20)
#define OGAX_MAX_ELEMENTS ((uint64_t)1 << 50) /* per tensor: sizes cannot wrap */
#define OGAX_MAX_ASSET (256u << 20)            /* an asset frame's payload: the pack reader's asset limit */

typedef struct {
    uint64_t offset, size;
    uint32_t crc32c;
    int present;
} ogax_part;

/* A tensor frame's header, parsed and checked against itself (sizes vs shape, dtype, quant). */
typedef struct {
    OGK_TENSOR_DESC;       /* name, role point into the frame's JSON; q4: layout OGK_PLAIN (source order) */
    const char *source_op; /* q4 */
    ogax_part codes, scales, zeros, data;
} ogax_tensor;

/* ---- writing ---- */
typedef struct {
    int fd;
    uint64_t frames, tensors, assets, payload_bytes, bytes_out;
    uint32_t headers_crc; /* of the frame prefixes and headers written so far */
} ogax_writer;
void ogax_writer_init(ogax_writer *w, int fd);
/* Writes hdr (must have "type") and the payload given as iovecs. 0 or -1 with e filled. */
int ogax_write_frame(ogax_writer *w, json_t *hdr, const struct iovec *parts, int nparts, ogk_error *e);
int ogax_write_end(ogax_writer *w, ogk_error *e);

/* ---- reading ---- */
typedef struct {
    int fd;
    uint64_t offset; /* stream bytes consumed so far */
    uint64_t frames, tensors, assets, payload_bytes;
    uint64_t payload_left; /* of the current frame */
    int seen_model, seen_end;
    uint32_t headers_crc; /* of the frame prefixes and headers read so far (end frame excluded) */
} ogax_reader;
typedef struct {
    json_t *hdr; /* owned by the caller after a successful read: json_decref it */
    const char *type;
    uint64_t payload_len;
    uint64_t at; /* stream offset of the frame start, for error messages */
} ogax_frame;
void ogax_reader_init(ogax_reader *r, int fd);
/* Next frame: 1 read, 0 the end frame was read and checked (stream complete), -1 error (e says what:
 * truncation, bad magic, bad JSON, counts mismatch, frame order). The previous frame's payload must
 * have been consumed (read or skipped) first. */
int ogax_next(ogax_reader *r, ogax_frame *f, ogk_error *e);
/* Read n bytes of the current payload into buf; -1 on truncation. */
int ogax_read(ogax_reader *r, void *buf, uint64_t n, ogk_error *e);
int ogax_skip(ogax_reader *r, uint64_t n, ogk_error *e);
/* Parse and self-check a tensor frame header (sizes, dtypes, and the role against the known set). */
int ogax_tensor_parse(const ogax_frame *f, ogax_tensor *t, ogk_error *e);

#endif
