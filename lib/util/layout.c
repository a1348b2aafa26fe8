/* The dtype vocabulary and the rm and b8 weight layouts (see tensor.h for the byte-level definition). */
#include "tensor.h"

#include <string.h>

#include "util.h"

size_t ogk_dtype_size(int dtype)
{
    switch (dtype) {
    case OGK_F32: return 4;
    case OGK_F16: return 2;
    case OGK_BF16: return 2;
    case OGK_I32: return 4;
    case OGK_I64: return 8;
    default: return 0;
    }
}

int ogk_dtype_bits(int dtype) { return dtype == OGK_Q4 ? 4 : dtype == OGK_Q8 ? 8 : (int)ogk_dtype_size(dtype) * 8; }

int ogk_dtype_quantised(int dtype) { return dtype == OGK_Q4 || dtype == OGK_Q8; }

int ogk_dtype_parse(const char *s)
{
    for (int d = OGK_F32; s && d <= OGK_Q8; d++)
        if (!strcmp(s, ogk_dtype_name(d)))
            return d;
    return -1;
}

const char *ogk_dtype_name(int dtype)
{
    switch (dtype) {
    case OGK_F32: return "f32";
    case OGK_F16: return "f16";
    case OGK_BF16: return "bf16";
    case OGK_Q4: return "q4";
    case OGK_I32: return "i32";
    case OGK_I64: return "i64";
    case OGK_Q8: return "q8";
    default: return "?";
    }
}

const char *ogk_layout_name(int layout)
{
    return layout == OGK_RM ? "rm" : layout == OGK_B8 ? "b8" : "plain";
}

int ogk_layout_parse(const char *s)
{
    if (!strcmp(s, "rm"))
        return OGK_RM;
    if (!strcmp(s, "b8"))
        return OGK_B8;
    return -1;
}

static uint32_t cdiv(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

const char *ogk_q4_layout_refusal(int layout, uint32_t n, uint32_t k, uint32_t block)
{
    if (n == 0 || k == 0)
        return "empty tensor";
    if (block < 16 || (block & (block - 1)))
        return "block size must be a power of two >= 16";
    if (layout == OGK_RM && block > 256)
        return "layout rm holds block sizes up to 256 (its tile is 256 columns wide)";
    if (layout != OGK_RM && layout != OGK_B8)
        return "unknown layout";
    return 0;
}

size_t ogk_q4_codes_bytes(int layout, uint32_t n, uint32_t k, uint32_t block)
{
    size_t kb = cdiv(k, block);
    if (layout == OGK_B8)
        return (size_t)cdiv(n, OGK_B8_ROWS) * kb * block * 8;
    return (size_t)cdiv(n, 32) * cdiv((uint32_t)(kb * block), 256) * 4096;
}

size_t ogk_q4_groups(int layout, uint32_t n, uint32_t k, uint32_t block)
{
    size_t kb = cdiv(k, block);
    if (layout == OGK_B8)
        return (size_t)cdiv(n, OGK_B8_ROWS) * kb * OGK_B8_ROWS;
    return (size_t)cdiv(n, 32) * cdiv((uint32_t)(kb * block), 256) * (256 / block) * 32;
}

/* byte offset of code (row, col) and whether it is the high nibble */
static inline size_t code_pos(int layout, uint32_t kb, uint32_t block, uint32_t row, uint32_t col, int *hi)
{
    if (layout == OGK_B8) {
        uint32_t rb = row / 16, r = row % 16, g = col / block, w = col % block, c = w / 8, j = w % 8;
        *hi = j >= 4;
        return (((size_t)rb * kb + g) * (block / 8) + c) * 64 + r * 4 + (j & 3);
    }
    uint32_t ntc = cdiv(kb * block, 256);
    size_t tile = (size_t)(row / 32) * ntc + col / 256;
    uint32_t R = row % 32, c = col % 256;
    *hi = (R % 16) & 1;
    return tile * 4096 + (R / 16) * 2048 + (size_t)c * 8 + (R % 16) / 2;
}

static inline size_t group_pos(int layout, uint32_t kb, uint32_t block, uint32_t row, uint32_t group)
{
    if (layout == OGK_B8)
        return ((size_t)(row / 16) * kb + group) * 16 + row % 16;
    uint32_t ntc = cdiv(kb * block, 256), gpt = 256 / block;
    size_t tile = (size_t)(row / 32) * ntc + (group * block) / 256;
    return tile * gpt * 32 + (size_t)(group % gpt) * 32 + row % 32;
}

/* four nibbles of v (low 16 bits) into the low nibbles of four bytes */
static inline uint32_t spread4(uint32_t v)
{
    v &= 0xFFFF;
    v = (v | v << 8) & 0x00FF00FFu;
    return (v | v << 4) & 0x0F0F0F0Fu;
}

/* b8 codes: for each row, its 8-column runs go to consecutive 64-byte chunks of the row block at
 * offset r*4. A run of 4 source bytes (codes 0..7) becomes bytes i = code i | code 4+i << 4. */
static void relayout_b8_codes(uint32_t n, uint32_t kp, const uint8_t *src, uint8_t *codes)
{
    size_t runs = kp / 8;
    for (uint32_t row = 0; row < n; row++) {
        const uint8_t *s = src + (size_t)row * kp / 2;
        uint8_t *d = codes + (size_t)(row / 16) * runs * 64 + (row % 16) * 4;
        for (size_t j = 0; j < runs; j++, s += 4, d += 64) {
            uint32_t x;
            memcpy(&x, s, 4);
            uint32_t o = spread4(x) | spread4(x >> 16) << 4; /* little-endian byte order */
            memcpy(d, &o, 4);
        }
    }
}

/* rm codes: rows R and R+1 (R even) of a tile share bytes (R/16)*2048 + c*8 + (R%16)/2, R in the low
 * nibble; columns beyond kp and rows beyond n stay zero. */
static void relayout_rm_codes(uint32_t n, uint32_t kp, const uint8_t *src, uint8_t *codes)
{
    uint32_t ntc = (kp + 255) / 256;
    for (uint32_t row = 0; row < n; row += 2) {
        const uint8_t *a = src + (size_t)row * kp / 2;
        const uint8_t *b = row + 1 < n ? a + kp / 2 : NULL;
        uint32_t R = row % 32;
        uint8_t *tiles = codes + (size_t)(row / 32) * ntc * 4096 + (R / 16) * 2048 + (R % 16) / 2;
        for (uint32_t c = 0; c < kp; c += 2) {
            uint8_t x = a[c / 2], y = b ? b[c / 2] : 0;
            uint8_t *d = tiles + (size_t)(c / 256) * 4096 + (c % 256) * 8;
            d[0] = (uint8_t)((x & 15) | (y & 15) << 4);
            d[8] = (uint8_t)((x >> 4) | (y & 0xF0));
        }
    }
}

void ogk_q4_relayout(int layout, uint32_t n, uint32_t k, uint32_t block, int scale_dtype, const uint8_t *src_codes,
                      const void *src_scales, const uint8_t *src_zp, uint8_t *codes, void *scales, uint8_t *zeros)
{
    uint32_t kb = cdiv(k, block), kp = kb * block;
    size_t ss = ogk_dtype_size(scale_dtype), zrow = cdiv(kb, 2);
    size_t cbytes = ogk_q4_codes_bytes(layout, n, k, block), groups = ogk_q4_groups(layout, n, k, block);
    if (layout == OGK_B8) {
        /* only the last, partial row block holds padding rows: every byte before it is written */
        size_t live = (size_t)(n / 16) * 16 * kp / 2;
        memset(codes + live, 0, cbytes - live);
        relayout_b8_codes(n, kp, src_codes, codes);
    } else {
        memset(codes, 0, cbytes);
        relayout_rm_codes(n, kp, src_codes, codes);
    }
    memset(scales, 0, groups * ss);
    if (src_zp && zeros)
        memset(zeros, 0, groups);
    for (uint32_t row = 0; row < n; row++) {
        const uint8_t *srow_s = (const uint8_t *)src_scales + (size_t)row * kb * ss;
        if (layout == OGK_B8) {
            /* row's groups sit 16 entries apart */
            uint8_t *d = (uint8_t *)scales + (((size_t)(row / 16) * kb) * 16 + row % 16) * ss;
            if (ss == 2)
                for (uint32_t g = 0; g < kb; g++)
                    memcpy(d + (size_t)g * 32, srow_s + (size_t)g * 2, 2);
            else
                for (uint32_t g = 0; g < kb; g++)
                    memcpy(d + (size_t)g * 64, srow_s + (size_t)g * 4, 4);
            if (src_zp && zeros) {
                uint8_t *z = zeros + ((size_t)(row / 16) * kb) * 16 + row % 16;
                const uint8_t *sz = src_zp + (size_t)row * zrow;
                for (uint32_t g = 0; g < kb; g++)
                    z[(size_t)g * 16] = (uint8_t)((sz[g / 2] >> (4 * (g & 1))) & 15);
            }
            continue;
        }
        for (uint32_t g = 0; g < kb; g++) {
            size_t p = group_pos(layout, kb, block, row, g);
            memcpy((uint8_t *)scales + p * ss, srow_s + (size_t)g * ss, ss);
            if (src_zp && zeros)
                zeros[p] = (uint8_t)((src_zp[row * zrow + g / 2] >> (4 * (g & 1))) & 15);
        }
    }
}

uint8_t ogk_q4_code(const ogk_qtensor *t, uint32_t row, uint32_t col)
{
    int hi;
    size_t p = code_pos(t->layout, t->k_blocks, t->block, row, col, &hi);
    return (uint8_t)(hi ? t->codes[p] >> 4 : t->codes[p] & 15);
}

static float scale_value(int dtype, const void *scales, size_t i)
{
    if (dtype == OGK_F32) {
        float f;
        memcpy(&f, (const uint8_t *)scales + i * 4, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, (const uint8_t *)scales + i * 2, 2);
    return dtype == OGK_F16 ? ogk_f16_to_f32(h) : ogk_bf16_to_f32(h);
}

float ogk_q4_scale(const ogk_qtensor *t, uint32_t row, uint32_t group)
{
    return scale_value(t->scale_dtype, t->scales, group_pos(t->layout, t->k_blocks, t->block, row, group));
}

uint8_t ogk_q4_zero(const ogk_qtensor *t, uint32_t row, uint32_t group)
{
    if (!t->has_zp)
        return 8;
    return t->zeros[group_pos(t->layout, t->k_blocks, t->block, row, group)];
}

void ogk_q4_dequant_row(const ogk_qtensor *t, uint32_t row, float *out)
{
    for (uint32_t g = 0; g < t->k_blocks; g++) {
        float s = ogk_q4_scale(t, row, g);
        int zp = ogk_q4_zero(t, row, g);
        uint32_t c0 = g * t->block, c1 = c0 + t->block < t->k ? c0 + t->block : t->k;
        for (uint32_t c = c0; c < c1; c++)
            out[c] = (float)((int)ogk_q4_code(t, row, c) - zp) * s;
    }
}

size_t ogk_q8_codes_bytes(uint32_t n, uint32_t k, uint32_t block) { return (size_t)n * cdiv(k, block) * block; }

size_t ogk_q8_groups(uint32_t n, uint32_t k, uint32_t block) { return (size_t)n * cdiv(k, block); }

float ogk_q8_scale(const ogk_qtensor *t, uint32_t row, uint32_t group)
{
    return scale_value(t->scale_dtype, t->scales, (size_t)row * t->k_blocks + group);
}

uint8_t ogk_q8_zero(const ogk_qtensor *t, uint32_t row, uint32_t group)
{
    return t->has_zp ? t->zeros[(size_t)row * t->k_blocks + group] : 128;
}

void ogk_q8_dequant_row(const ogk_qtensor *t, uint32_t row, float *out)
{
    const uint8_t *c = t->codes + (size_t)row * t->k_blocks * t->block;
    for (uint32_t g = 0; g < t->k_blocks; g++) {
        float s = ogk_q8_scale(t, row, g);
        int zp = ogk_q8_zero(t, row, g);
        uint32_t c0 = g * t->block, c1 = c0 + t->block < t->k ? c0 + t->block : t->k;
        for (uint32_t k = c0; k < c1; k++)
            out[k] = (float)((int)c[k] - zp) * s;
    }
}

size_t ogk_quant_codes_bytes(const ogk_tensor_desc *t)
{
    return t->dtype == OGK_Q8 ? ogk_q8_codes_bytes(t->n, t->k, t->block) : ogk_q4_codes_bytes(t->layout, t->n, t->k, t->block);
}

size_t ogk_quant_groups(const ogk_tensor_desc *t)
{
    return t->dtype == OGK_Q8 ? ogk_q8_groups(t->n, t->k, t->block) : ogk_q4_groups(t->layout, t->n, t->k, t->block);
}

void ogk_quant_dequant_row(const ogk_qtensor *t, uint32_t row, float *out)
{
    if (t->dtype == OGK_Q8)
        ogk_q8_dequant_row(t, row, out);
    else
        ogk_q4_dequant_row(t, row, out);
}
