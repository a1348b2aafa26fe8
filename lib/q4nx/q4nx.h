/* lib/q4nx — the Q4NX container (model.q4nx, man/man5/q4nx.5): in-memory tensor views and the two
 * weight layouts. Owns the container format and the rm/b8 layouts; must not know about ONNX, OGAX
 * parsing, kernels or models.
 *
 * A quantised tensor is the MatMulNBits weight W[N x K] (N output rows, K inputs), bits = 4, group
 * (block) size B along K, k_blocks kb = ceil(K / B). Source order (MatMulNBits): codes [N][kb][B/2]
 * (first value in the low nibble), scales [N][kb] in their source dtype, zero points packed u4
 * [N][ceil(kb/2)] (block j in nibble j%2, low first) or absent (implicit 8). Value:
 *     W[n, k] = (float)(code - zp) * (float)scale[n, k / B]
 * Both layouts keep every code, scale and zero point losslessly; they only move them.
 *
 * Layout b8 (Q4NX_B8) — "packed B" for our kernels. Rows in blocks of 16 (nb = ceil(N/16)).
 *   codes: for rb in [0,nb), for g in [0,kb), for c in [0,B/8): one 64-byte chunk; within it
 *          byte[r*4 + i] (r in [0,16), i in [0,4)) =
 *              code(rb*16+r, g*B + c*8 + i) | code(rb*16+r, g*B + c*8 + 4 + i) << 4
 *          so (chunk & 0x0F) holds 16 rows x 4 consecutive k as u8 dwords (one VNNI vpdpbusd with a
 *          broadcast of 4 int8 activations), and (chunk >> 4) the next 4 k.   bytes: nb*kb*B*8
 *   scales: [nb][kb][16] in the source dtype.     zeros: [nb][kb][16] u8 (value 0..15), if present.
 *   Padding rows (n >= N): code 0, scale 0, zero 0. Columns K..kb*B keep the source blob's codes.
 *
 * Layout rm (Q4NX_RM) — FastFlowLM's Q4NX tile geometry. Tiles of 32 rows x 256 columns in row-major
 * tile order over nt_r = ceil(N/32) by nt_c = ceil(kb*B/256); requires B <= 256 (B divides 256).
 *   codes: 4096 bytes per tile; element (R, c) of the tile (R in [0,32), c in [0,256)) is at byte
 *          (R/16)*2048 + c*8 + (R%16)/2, low nibble when R%16 is even.   bytes: nt_r*nt_c*4096
 *   scales: per tile [256/B][32]: index tile*(256/B)*32 + (c/B)*32 + R, source dtype.
 *   zeros:  same indexing as scales, u8.
 *   Padding (rows >= N, columns >= kb*B): code 0, scale 0, zero 0.
 */
#ifndef OGK_Q4NX_H
#define OGK_Q4NX_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "util/util.h"

enum q4nx_dtype { Q4NX_F32 = 1, Q4NX_F16 = 2, Q4NX_BF16 = 3, Q4NX_Q4 = 4, Q4NX_I32 = 5, Q4NX_I64 = 6 };
enum q4nx_layout { Q4NX_PLAIN = 0, Q4NX_RM = 1, Q4NX_B8 = 2 };
#define Q4NX_B8_ROWS 16

typedef struct q4nx_tensor {
    const char *name; /* source initializer name */
    const char *role; /* "embed", "layers.3.attn.q", "lm_head", ... */
    int dtype;        /* enum q4nx_dtype; Q4NX_Q4 for quantised */
    int ndim;
    uint64_t shape[4]; /* logical shape; quantised: [N, K] */
    /* quantised only */
    int layout; /* enum q4nx_layout */
    uint32_t n, k, block, k_blocks;
    int scale_dtype;      /* Q4NX_F32 / F16 / BF16 */
    int has_zp;           /* 0: implicit zero point 8 */
    const uint8_t *codes; /* layout order */
    const void *scales;   /* layout order, scale_dtype elements */
    const uint8_t *zeros; /* layout order, one u8 per group; NULL when !has_zp */
    /* plain only */
    const void *data;
    uint64_t nbytes;
} q4nx_tensor;

size_t q4nx_dtype_size(int dtype); /* bytes per element; 0 for Q4 */
const char *q4nx_dtype_name(int dtype);
const char *q4nx_layout_name(int layout);
int q4nx_layout_parse(const char *s); /* "rm" / "b8" -> enum, -1 otherwise */

/* Sizes of the three parts of a quantised tensor in a layout (groups = scale/zero entries). */
size_t q4nx_q4_codes_bytes(int layout, uint32_t n, uint32_t k, uint32_t block);
size_t q4nx_q4_groups(int layout, uint32_t n, uint32_t k, uint32_t block);
/* Whether a layout can hold this geometry (rm needs block <= 256); 0 ok, else a static reason. */
const char *q4nx_q4_layout_refusal(int layout, uint32_t n, uint32_t k, uint32_t block);

/* Move MatMulNBits source order into a layout. Destination buffers sized by the functions above;
 * src_zp NULL means no zero points (then zeros may be NULL). */
void q4nx_q4_relayout(int layout, uint32_t n, uint32_t k, uint32_t block, int scale_dtype, const uint8_t *src_codes,
                      const void *src_scales, const uint8_t *src_zp, uint8_t *codes, void *scales, uint8_t *zeros);

/* Element access through the layout (slow, for references and verification). */
uint8_t q4nx_q4_code(const q4nx_tensor *t, uint32_t row, uint32_t col);
float q4nx_q4_scale(const q4nx_tensor *t, uint32_t row, uint32_t group);
uint8_t q4nx_q4_zero(const q4nx_tensor *t, uint32_t row, uint32_t group); /* 8 when !has_zp */
/* Dequantise one row (K floats): (code - zp) * scale, in fp32, through the element accessors (the
 * definition; lib/kern's kern_dequant_rows walks whole row windows in storage order, with SIMD). */
void q4nx_q4_dequant_row(const q4nx_tensor *t, uint32_t row, float *out);

/* ---- the container file (format: man/man5/q4nx.5; implemented in lib/q4nx/container.c) ---- */
typedef struct q4nx_file q4nx_file;
/* mmap the container and check its structure (magic, versions, every offset/length in range, sizes
 * vs shapes and layout). Checksums are not read here (q4nx_verify_checksums does that). On failure:
 * NULL, e says what and where; *code (if given) is the exit code to use (3 malformed / not a container). */
q4nx_file *q4nx_open(const char *path, ogk_error *e, int *code);
/* q4nx_open with flags: Q4NX_OPEN_LOAD reads the file into huge-page memory (ogk_map_load) instead
 * of mapping it in place. */
#define Q4NX_OPEN_LOAD 1
q4nx_file *q4nx_open_flags(const char *path, int flags, ogk_error *e, int *code);
void q4nx_close(q4nx_file *f);
/* the whole file's bytes as opened (mapped, or the Q4NX_OPEN_LOAD copy) */
const uint8_t *q4nx_bytes(const q4nx_file *f, size_t *size);
const json_t *q4nx_model(const q4nx_file *f);  /* the normalised model description (OGAX "model") */
const json_t *q4nx_source(const q4nx_file *f); /* provenance: pack, flavour, tool, version */
int q4nx_layout(const q4nx_file *f);           /* layout of its quantised tensors */
size_t q4nx_tensor_count(const q4nx_file *f);
const q4nx_tensor *q4nx_tensor_at(const q4nx_file *f, size_t i);
const q4nx_tensor *q4nx_find(const q4nx_file *f, const char *role); /* by role, NULL if absent */
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
/* Starts a container on fd in the given layout (Q4NX_RM / Q4NX_B8): writes the header. */
q4nx_writer *q4nx_writer_new(int fd, int layout, ogk_error *e);
int q4nx_writer_asset(q4nx_writer *w, const char *name, const void *data, size_t len, ogk_error *e);
/* A quantised tensor given in MatMulNBits source order (codes [N][kb][B/2], scales [N][kb], zero points
 * u4-packed [N][ceil(kb/2)] or NULL); stored in the writer's layout. */
int q4nx_writer_q4(q4nx_writer *w, const char *name, const char *role, uint32_t n, uint32_t k, uint32_t block,
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
