/* lib/util/tensor.h — the one vocabulary of tensors that pack, ogax, q4nx, kern and model share: element
 * dtypes (names and sizes), the weight layouts of a 4-bit quantised tensor, one tensor descriptor and
 * the view of a tensor's bytes, and the layouts' arithmetic (layout.c). Owns no file format: the OGAX
 * stream and the Q4NX container (lib/ogax, lib/q4nx) store these values; it must not know them.
 *
 * A quantised tensor is the MatMulNBits weight W[N x K] (N output rows, K inputs), bits = 4, group
 * (block) size B along K, k_blocks kb = ceil(K / B). Source order (MatMulNBits, layout
 * OGK_SOURCE): codes [N][kb][B/2] (first value in the low nibble), scales [N][kb] in their source
 * dtype, zero points packed u4 [N][ceil(kb/2)] (block j in nibble j%2, low first) or absent (implicit
 * 8). Value:
 *     W[n, k] = (float)(code - zp) * (float)scale[n, k / B]
 * The layouts rm and b8 keep every code, scale and zero point losslessly; they only move them.
 *
 * 8-bit (OGK_Q8: MatMulNBits and GatherBlockQuantized with bits = 8, e.g. the builder's int8 lm_head) has
 * one layout, source order (OGK_PLAIN): codes [N][kb][B] one byte each (columns K..kb*B as the source has
 * them), scales [N][kb] in their source dtype, zero points [N][kb] one byte each or absent (implicit 128):
 *     W[n, k] = (float)(code - zp) * (float)scale[n, k / B]
 *
 * Layout b8 (OGK_B8) — "packed B" for the kernels. Rows in blocks of 16 (nb = ceil(N/16)).
 *   codes: for rb in [0,nb), for g in [0,kb), for c in [0,B/8): one 64-byte chunk; within it
 *          byte[r*4 + i] (r in [0,16), i in [0,4)) =
 *              code(rb*16+r, g*B + c*8 + i) | code(rb*16+r, g*B + c*8 + 4 + i) << 4
 *          so (chunk & 0x0F) holds 16 rows x 4 consecutive k as u8 dwords (one VNNI vpdpbusd with a
 *          broadcast of 4 int8 activations), and (chunk >> 4) the next 4 k.   bytes: nb*kb*B*8
 *   scales: [nb][kb][16] in the source dtype.     zeros: [nb][kb][16] u8 (value 0..15), if present.
 *   Padding rows (n >= N): code 0, scale 0, zero 0. Columns K..kb*B keep the source blob's codes.
 *
 * Layout rm (OGK_RM) — FastFlowLM's Q4NX tile geometry. Tiles of 32 rows x 256 columns in row-major
 * tile order over nt_r = ceil(N/32) by nt_c = ceil(kb*B/256); requires B <= 256 (B divides 256).
 *   codes: 4096 bytes per tile; element (R, c) of the tile (R in [0,32), c in [0,256)) is at byte
 *          (R/16)*2048 + c*8 + (R%16)/2, low nibble when R%16 is even.   bytes: nt_r*nt_c*4096
 *   scales: per tile [256/B][32]: index tile*(256/B)*32 + (c/B)*32 + R, source dtype.
 *   zeros:  same indexing as scales, u8.
 *   Padding (rows >= N, columns >= kb*B): code 0, scale 0, zero 0.
 */
#ifndef OGK_TENSOR_H
#define OGK_TENSOR_H

#include <stddef.h>
#include <stdint.h>

/* Element types. The numbers are what the Q4NX container stores: never renumber. */
enum ogk_dtype { OGK_F32 = 1, OGK_F16 = 2, OGK_BF16 = 3, OGK_Q4 = 4, OGK_I32 = 5, OGK_I64 = 6, OGK_Q8 = 7 };
size_t ogk_dtype_size(int dtype);       /* bytes per element; 0 for q4, q8 and unknown */
int ogk_dtype_bits(int dtype);          /* bits per element: 4 for q4, 8 for q8 (their codes), 0 for unknown */
const char *ogk_dtype_name(int dtype);  /* "f32" "f16" "bf16" "q4" "i32" "i64" "q8", "?" otherwise */
int ogk_dtype_quantised(int dtype);     /* 1 for q4 and q8 */
int ogk_dtype_parse(const char *s);     /* the inverse; -1 if unknown (or NULL) */

/* Where a quantised tensor's codes, scales and zero points sit. OGK_PLAIN: plain tensors, and quantised ones in MatMulNBits order (pack,
 * OGAX). The numbers are the container's: never renumber. */
enum ogk_layout { OGK_PLAIN = 0, OGK_RM = 1, OGK_B8 = 2 };
#define OGK_B8_ROWS 16
const char *ogk_layout_name(int layout); /* "rm", "b8", "plain" (OGK_PLAIN) */
int ogk_layout_parse(const char *s);     /* "rm" / "b8" -> enum, -1 otherwise */

/* The descriptor every tensor record carries (pack_tensor, ogax_tensor, ogk_qtensor): what the tensor
 * is, not where its bytes are. Records embed it with OGK_TENSOR_DESC, which makes the fields members
 * of the record (t->n, t->block, ...) and the whole descriptor t->desc. */
#define OGK_TENSOR_DESC_FIELDS                                                                                         \
    const char *name; /* source initializer name */                                                                   \
    const char *role; /* "embed", "layers.3.attn.q", "lm_head", ... */                                                \
    int dtype;        /* enum ogk_dtype; OGK_Q4 for quantised */                                                       \
    int ndim;                                                                                                          \
    uint64_t shape[4]; /* logical shape; quantised: [N, K] */                                                          \
    /* quantised only */                                                                                               \
    int layout;                       /* enum ogk_layout */                                                            \
    uint32_t n, k, block, k_blocks;   /* N rows x K inputs, groups of block along K, kb = ceil(K / block) */           \
    int scale_dtype;                  /* OGK_F32 / F16 / BF16 */                                                       \
    int has_zp;                       /* 0: implicit zero point 8; 1: one u8 (0..15) per group */
typedef struct ogk_tensor_desc {
    OGK_TENSOR_DESC_FIELDS
} ogk_tensor_desc;
#define OGK_TENSOR_DESC                                                                                                \
    union {                                                                                                            \
        ogk_tensor_desc desc;                                                                                          \
        struct {                                                                                                       \
            OGK_TENSOR_DESC_FIELDS                                                                                     \
        };                                                                                                             \
    }

/* A tensor and its bytes, in memory (a container's tensors, synthetic ones, kernels' operands). */
typedef struct ogk_qtensor {
    OGK_TENSOR_DESC;
    const uint8_t *codes; /* quantised: layout order */
    const void *scales;   /* layout order, scale_dtype elements */
    const uint8_t *zeros; /* layout order, one u8 per group; NULL when !has_zp */
    const void *data;     /* plain only */
    uint64_t nbytes;
} ogk_qtensor;

/* ---- the layouts (layout.c) ---- */
/* Sizes of the three parts of a quantised tensor in a layout (groups = scale/zero entries). */
size_t ogk_q4_codes_bytes(int layout, uint32_t n, uint32_t k, uint32_t block);
size_t ogk_q4_groups(int layout, uint32_t n, uint32_t k, uint32_t block);
/* Whether a layout can hold this geometry (rm needs block <= 256); 0 ok, else a static reason. */
const char *ogk_q4_layout_refusal(int layout, uint32_t n, uint32_t k, uint32_t block);
/* Move MatMulNBits source order into a layout. Destination buffers sized by the functions above;
 * src_zp NULL means no zero points (then zeros may be NULL). */
void ogk_q4_relayout(int layout, uint32_t n, uint32_t k, uint32_t block, int scale_dtype, const uint8_t *src_codes,
                     const void *src_scales, const uint8_t *src_zp, uint8_t *codes, void *scales, uint8_t *zeros);
/* Element access through the layout (slow, for references and verification). */
uint8_t ogk_q4_code(const ogk_qtensor *t, uint32_t row, uint32_t col);
float ogk_q4_scale(const ogk_qtensor *t, uint32_t row, uint32_t group);
uint8_t ogk_q4_zero(const ogk_qtensor *t, uint32_t row, uint32_t group); /* 8 when !has_zp */
/* Dequantise one row (K floats): (code - zp) * scale, in fp32, through the element accessors (the
 * definition; lib/kern's kern_dequant_rows walks whole row windows in storage order, with SIMD). */
void ogk_q4_dequant_row(const ogk_qtensor *t, uint32_t row, float *out);
/* q8 (source order): part sizes, element access and one row dequantised, as the q4 functions above */
size_t ogk_q8_codes_bytes(uint32_t n, uint32_t k, uint32_t block);
size_t ogk_q8_groups(uint32_t n, uint32_t k, uint32_t block);
float ogk_q8_scale(const ogk_qtensor *t, uint32_t row, uint32_t group);
uint8_t ogk_q8_zero(const ogk_qtensor *t, uint32_t row, uint32_t group); /* 128 when !has_zp */
void ogk_q8_dequant_row(const ogk_qtensor *t, uint32_t row, float *out);
/* either width: the q4 or q8 function by t->dtype (q4 in t->layout) */
void ogk_quant_dequant_row(const ogk_qtensor *t, uint32_t row, float *out);
size_t ogk_quant_codes_bytes(const ogk_tensor_desc *t);
size_t ogk_quant_groups(const ogk_tensor_desc *t);

#endif
