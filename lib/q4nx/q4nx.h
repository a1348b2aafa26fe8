/* lib/q4nx — the Q4NX container (model.q4nx, man/man5/q4nx.5): reading and writing the file, and the
 * views of its tensors (ogk_qtensor, lib/util/tensor.h). Owns the container format only: the dtype
 * vocabulary, the tensor descriptor and the rm/b8 layouts it stores are lib/util's (tensor.h). Must not
 * know about ONNX, OGAX parsing, kernels or models.
 */
#ifndef OGK_Q4NX_H
#define OGK_Q4NX_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "util/tensor.h"
#include "util/util.h"

/* ---- the container file (format: man/man5/q4nx.5; implemented in lib/q4nx/container.c) ---- */
typedef struct q4nx_file q4nx_file;
/* mmap the container and check its structure (magic, versions, every offset/length in range, sizes
 * vs shapes and layout) and the checksums of its small parts: the metadata section (JSON, tables,
 * strings), every asset, and plain tensors under Q4NX_SMALL_TENSOR bytes (milliseconds for an 11 MB
 * tokenizer). The weights' checksums are q4nx_verify_weights'. On failure: NULL, e says what and where;
 * *code (if given) is the exit code to use (3 malformed, corrupt or not a container; 4 no memory to map or
 * read it). */
q4nx_file *q4nx_open(const char *path, ogk_error *e, int *code);
/* q4nx_open with flags: Q4NX_OPEN_LOAD reads the file into huge-page memory (ogk_map_load) instead
 * of mapping it in place. */
#define Q4NX_OPEN_LOAD 1
/* Q4NX_OPEN_NOCRC: skip the open-time checksums (q4nx-verify, which computes and reports every one). */
#define Q4NX_OPEN_NOCRC 2
/* Q4NX_OPEN_AUTO: Q4NX_OPEN_LOAD where it pays (ogk_map_auto), else a mapping: the model runners' default. */
#define Q4NX_OPEN_AUTO 4
/* How a model runner holds the weights (--mmap / --no-mmap / neither): the open flags for it. */
enum { Q4NX_IN_AUTO = 0, Q4NX_IN_MAP, Q4NX_IN_LOAD };
static inline int q4nx_in_flags(int in) { return in == Q4NX_IN_LOAD ? Q4NX_OPEN_LOAD : in == Q4NX_IN_MAP ? 0 : Q4NX_OPEN_AUTO; }
#define Q4NX_SMALL_TENSOR (1u << 20)
/* Every tensor's checksum (the weights: ~1 s per 10 GB at memory speed): 0, or -1 naming the first
 * corrupt tensor (path is only used in the message). */
int q4nx_verify_weights(const q4nx_file *f, const char *path, ogk_error *e);
q4nx_file *q4nx_open_flags(const char *path, int flags, ogk_error *e, int *code);
void q4nx_close(q4nx_file *f);
/* the whole file's bytes as opened (mapped, or the Q4NX_OPEN_LOAD copy) */
const uint8_t *q4nx_bytes(const q4nx_file *f, size_t *size);
/* 1 when the file was read into memory (Q4NX_OPEN_LOAD, or AUTO chose it), 0 when it is mapped */
int q4nx_loaded(const q4nx_file *f);
const json_t *q4nx_model(const q4nx_file *f);  /* the normalised model description (OGAX "model") */
const json_t *q4nx_source(const q4nx_file *f); /* provenance: pack, flavour, tool, version */
int q4nx_layout(const q4nx_file *f);           /* layout of its quantised tensors */
size_t q4nx_tensor_count(const q4nx_file *f);
const ogk_qtensor *q4nx_tensor_at(const q4nx_file *f, size_t i);
const ogk_qtensor *q4nx_find(const q4nx_file *f, const char *role); /* by role, NULL if absent */
/* An embedded asset ("tokenizer.json", "tokenizer_config.json", ...): 0 and data/len, or -1. */
int q4nx_asset(const q4nx_file *f, const char *name, const uint8_t **data, size_t *len);

/* ---- container facts for verification and inspection ---- */
#define Q4NX_FORMAT_VERSION 1
#define Q4NX_LAYOUT_VERSION 1
#define Q4NX_HEADER_SIZE 64
#define Q4NX_FOOTER_SIZE 64
#define Q4NX_TENSOR_ENTRY 128
#define Q4NX_ASSET_ENTRY 32
#define Q4NX_ALIGN 64
#define Q4NX_ALIGN_LARGE 4096
#define Q4NX_MAX_TENSORS (1u << 20) /* the footer's tensor_count and asset_count bounds (q4nx.5) */
#define Q4NX_MAX_ASSETS (1u << 16)
#define Q4NX_LARGE_TENSOR 65536 /* tensors of at least this many bytes start on a 4096-byte boundary */
/* The bytes a tensor occupies ([offset, offset+size): its parts and the zero padding between them) and
 * the CRC32C stored for them. */
typedef struct {
    uint64_t offset, size;
    uint64_t scales_off, zeros_off; /* relative to offset; quantised only (zeros_off 0: none) */
    uint32_t crc32c;
    const uint8_t *bytes;
} q4nx_extent;
void q4nx_tensor_extent(const q4nx_file *f, size_t i, q4nx_extent *x);
size_t q4nx_asset_count(const q4nx_file *f);
/* Asset i: name, bytes, stored CRC32C. */
void q4nx_asset_at(const q4nx_file *f, size_t i, const char **name, const uint8_t **data, size_t *len, uint32_t *crc);
/* Metadata section (JSON + tables + strings): bytes and stored CRC32C. */
void q4nx_meta_bytes(const q4nx_file *f, const uint8_t **data, size_t *len, uint32_t *crc);
uint64_t q4nx_file_size(const q4nx_file *f);
const uint8_t *q4nx_file_bytes(const q4nx_file *f); /* the whole mapped file */
const json_t *q4nx_meta(const q4nx_file *f); /* the whole metadata JSON object */

/* ---- writing a container (streaming: data first, metadata and footer last; no seeking) ---- */
typedef struct q4nx_writer q4nx_writer;
/* Starts a container on fd in the given layout (OGK_RM / OGK_B8): writes the header. The writer's calls
 * return -1 (NULL) with e filled; out of memory also leaves errno ENOMEM. */
q4nx_writer *q4nx_writer_new(int fd, int layout, ogk_error *e);
int q4nx_writer_asset(q4nx_writer *w, const char *name, const void *data, size_t len, ogk_error *e);
/* A quantised tensor given in MatMulNBits source order (codes [N][kb][B/2], scales [N][kb], zero points
 * u4-packed [N][ceil(kb/2)] or NULL); stored in the writer's layout. */
int q4nx_writer_q4(q4nx_writer *w, const char *name, const char *role, uint32_t n, uint32_t k, uint32_t block,
                   int scale_dtype, const uint8_t *codes, const void *scales, const uint8_t *zp, ogk_error *e);
/* An 8-bit quantised tensor (q8) in source order (codes [N][kb][B], scales [N][kb], zero points [N][kb] or
 * NULL): stored so, whatever the writer's layout (the layouts are of 4-bit codes). */
int q4nx_writer_q8(q4nx_writer *w, const char *name, const char *role, uint32_t n, uint32_t k, uint32_t block,
                   int scale_dtype, const uint8_t *codes, const void *scales, const uint8_t *zp, ogk_error *e);
/* A plain tensor (dtype f32/f16/bf16/i32/i64), bytes as they are. */
int q4nx_writer_plain(q4nx_writer *w, const char *name, const char *role, int dtype, int ndim, const uint64_t *shape,
                      const void *data, uint64_t nbytes, ogk_error *e);
/* An extra top-level metadata key (not "q4nx", "model" or "source"), e.g. "complete"; value is stolen. */
void q4nx_writer_meta(q4nx_writer *w, const char *key, json_t *value);
/* Writes the metadata (model and source objects are copied in) and the footer. */
int q4nx_writer_finish(q4nx_writer *w, const json_t *model, const json_t *source, ogk_error *e);
uint64_t q4nx_writer_bytes(const q4nx_writer *w); /* bytes written so far */
int q4nx_writer_write_failed(const q4nx_writer *w); /* 1 when a failure was the output's (disk, pipe) */
void q4nx_writer_free(q4nx_writer *w);

#endif
