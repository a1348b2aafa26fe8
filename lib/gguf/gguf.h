/* lib/gguf — GGUF v3 files (llama.cpp's model format): writing them (writer.c), reading them back and
 * dequantising their block formats (reader.c), and turning a Q4NX container into one without
 * re-quantising (convert.c: metadata, tokenizer, exact re-blocking; check.c: the exactness check).
 * Owns the GGUF byte format and the ggml block layouts it uses; must not know ONNX, OGAX, kernels or
 * the forward pass. Reads containers only through lib/q4nx's views and accessors.
 *
 * GGUF v3 (facts from llama.cpp's docs/gguf.md and ggml): little-endian; "GGUF", u32 version 3,
 * u64 tensor count, u64 key/value count; key/values (string key, u32 value type, value); tensor infos
 * (string name, u32 n_dims, u64 ne[n_dims] innermost first, u32 ggml type, u64 offset into the data
 * section); padding to general.alignment (32); the data section. Strings are u64 length + bytes.
 *
 * Block formats used here (32 elements per block, element i of a block):
 *   Q4_0  {f16 d; u8 qs[16]}          q_i = i < 16 ? qs[i] & 15 : qs[i-16] >> 4,  x_i = (q_i - 8) * d
 *   Q4_1  {f16 d; f16 m; u8 qs[16]}   q_i as Q4_0,                              x_i = q_i * d + m
 *   Q8_0  {f16 d; i8 qs[32]}          x_i = qs[i] * d
 * (MatMulNBits instead puts element 2j in the low and 2j+1 in the high nibble of byte j.)
 */
#ifndef OGK_GGUF_H
#define OGK_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "q4nx/q4nx.h"
#include "util/util.h"

#define GGUF_VERSION 3
#define GGUF_ALIGN 32

/* key/value types */
enum { GGUF_U8 = 0, GGUF_I8 = 1, GGUF_U16 = 2, GGUF_I16 = 3, GGUF_U32 = 4, GGUF_I32 = 5, GGUF_F32V = 6,
       GGUF_BOOL = 7, GGUF_STR = 8, GGUF_ARR = 9, GGUF_U64 = 10, GGUF_I64 = 11, GGUF_F64 = 12 };
/* the ggml tensor types this module writes and reads */
enum { GGML_F32 = 0, GGML_F16 = 1, GGML_Q4_0 = 2, GGML_Q4_1 = 3, GGML_Q8_0 = 8 };

const char *gguf_type_name(int ggml_type); /* "Q4_0", ...; "?" for others */
/* bytes of one row of ne0 elements; 0 when the type is unknown or ne0 is not a multiple of its block */
uint64_t gguf_row_bytes(int ggml_type, uint64_t ne0);

/* ---- writer ---- */
typedef struct gguf_writer gguf_writer;
/* Fills exactly n bytes of a tensor's data at write time; 0, or -1 with e filled. */
typedef int (*gguf_fill_fn)(void *ctx, uint8_t *dst, uint64_t n, ogk_error *e);

gguf_writer *gguf_writer_new(void);
void gguf_writer_free(gguf_writer *w);
/* Key/values, in the order added. A key added twice is an error (-1). */
int gguf_kv_u32(gguf_writer *w, const char *key, uint32_t v, ogk_error *e);
int gguf_kv_i32(gguf_writer *w, const char *key, int32_t v, ogk_error *e);
int gguf_kv_f32(gguf_writer *w, const char *key, float v, ogk_error *e);
int gguf_kv_bool(gguf_writer *w, const char *key, int v, ogk_error *e);
int gguf_kv_str(gguf_writer *w, const char *key, const char *s, size_t len, ogk_error *e);
int gguf_kv_arr_i32(gguf_writer *w, const char *key, const int32_t *v, size_t n, ogk_error *e);
int gguf_kv_arr_f32(gguf_writer *w, const char *key, const float *v, size_t n, ogk_error *e);
/* A string array: begin with its length, then exactly n pushes. */
int gguf_kv_arr_str_begin(gguf_writer *w, const char *key, size_t n, ogk_error *e);
int gguf_kv_arr_str_push(gguf_writer *w, const char *s, size_t len, ogk_error *e);
/* A tensor of ndim (1..4) dimensions ne[] (innermost first, as ggml). fill is called once, at write
 * time, in the order tensors were added; ctx must live until then. */
int gguf_writer_tensor(gguf_writer *w, const char *name, int ggml_type, int ndim, const uint64_t *ne,
                       gguf_fill_fn fill, void *ctx, ogk_error *e);
/* Write the whole file to fd, streaming tensor data. -1 with e filled; *out_failed (if given) is 1
 * when the failure was the output's (disk, pipe) rather than a fill's. */
int gguf_writer_write(gguf_writer *w, int fd, int *out_failed, ogk_error *e);

/* ---- reader ---- */
typedef struct {
    char *name;
    int type; /* ggml type */
    int ndim;
    uint64_t ne[4];
    uint64_t offset, nbytes;
    const uint8_t *data;
} gguf_tensor;
typedef struct gguf_file gguf_file;
/* mmap and parse; every length and offset is bounds-checked. NULL with e filled (a malformed file; errno
 * ENOMEM when there was no memory to map it). */
gguf_file *gguf_open(const char *path, ogk_error *e);
void gguf_close(gguf_file *f);
uint32_t gguf_version(const gguf_file *f);
size_t gguf_tensor_count(const gguf_file *f);
const gguf_tensor *gguf_tensor_at(const gguf_file *f, size_t i);
const gguf_tensor *gguf_find(const gguf_file *f, const char *name);
/* Metadata as JSON: {key: value}; arrays longer than 16 elements become {"type", "count"} (the
 * tokenizer lists), so the object stays small. Owned by the file. */
const json_t *gguf_meta(const gguf_file *f);
/* Whole arrays when needed: a string array element, or an i32 array. 0, or -1 if absent/wrong type. */
int gguf_meta_str_at(const gguf_file *f, const char *key, size_t i, const char **s, size_t *len);
int gguf_meta_arr_len(const gguf_file *f, const char *key, size_t *n);
/* An array's element type, count and its elements' bytes as stored (strings with their u64 lengths), for
 * comparing two files' arrays whole. 0, or -1 if absent. */
int gguf_meta_arr_raw(const gguf_file *f, const char *key, int *elem_type, uint64_t *count, const uint8_t **p,
                      size_t *nbytes);

/* Deliberate mistakes for the exactness check's controls (each must make a correct file mismatch). */
enum {
    GGUF_CTRL_NONE = 0,
    GGUF_CTRL_NIBBLES = 1, /* Q4_0/Q4_1 read with MatMulNBits' nibble order (2j low, 2j+1 high) */
    GGUF_CTRL_M_SIGN = 2,  /* Q4_1 with the minimum's sign flipped; Q4_0 with +8 for -8 */
    GGUF_CTRL_REVERSE = 4, /* elements of each 32-block reversed (every type) */
};
/* Row `row` of a 2-D tensor (or the whole of a 1-D one, row 0) into out[ne0] floats, by the block
 * formats above (or read with `control`'s mistake). 0, or -1 for a type it cannot read. */
int gguf_dequant_row(const gguf_tensor *t, uint64_t row, float *out, int control);

/* ---- Q4NX container -> GGUF ---- */
enum { GGUF_EXACT = 0, GGUF_WIDEN = 1, GGUF_LOSSY = 2 };
typedef struct {
    int policy; /* GGUF_EXACT: Q4_0/Q4_1 only, refuse what they cannot hold exactly;
                 * GGUF_WIDEN: exact, wider types (Q8_0, F32) where Q4 cannot be;
                 * GGUF_LOSSY: Q4_0/Q4_1 with scales/minimums rounded to fp16, errors reported */
    const char *name; /* general.name (NULL: from the source pack's directory name) */
} gguf_convert_opts;

/* Write the GGUF for container f to fd. Returns 0, or -1 with e filled and *code set (3: the container
 * cannot be represented under the policy, or its description/tokenizer is unusable; 1: writing failed).
 * *report (if given) receives {"architecture", "tensors": [{name, type, from, [max_abs_error]}...],
 * "types": {type: count}, "bytes"}. */
int gguf_from_q4nx(const q4nx_file *f, const gguf_convert_opts *o, int fd, json_t **report, ogk_error *e, int *code);

/* The exactness check: dequantise every converted tensor on both sides (lib/q4nx's dequantiser for
 * the container, gguf_dequant_row for the GGUF) and compare every value; then the controls, each of
 * which must produce mismatches. Returns 0 all identical and every control caught, 1 otherwise (the
 * report says which), -1 with e filled and *code 3 when a file cannot be read or does not correspond. */
int gguf_check_q4nx(const q4nx_file *f, const gguf_file *g, json_t **report, ogk_error *e, int *code);

#endif
