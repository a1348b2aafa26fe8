/* Private to lib/q4nx: the byte-level pieces of the container shared by the reader (container.c) and
 * the writer (writer.c). The format itself is documented in man/man5/q4nx.5. */
#ifndef OGK_Q4NX_FORMAT_H
#define OGK_Q4NX_FORMAT_H

#include <stdint.h>
#include <string.h>

/* header: magic, then u32 format_version, layout_version, layout, header_size, flags; rest zero */
static const uint8_t Q4NX_MAGIC[8] = {'Q', '4', 'N', 'X', 0x0D, 0x0A, 0x1A, 0x0A};
/* footer: u64 meta_offset, meta_size, table_offset; u32 tensor_count, asset_count; u64 strings_offset,
 * strings_size; u32 meta_crc32c, u32 zero; end magic */
static const uint8_t Q4NX_END_MAGIC[8] = {'Q', '4', 'N', 'X', '-', 'E', 'N', 'D'};

enum {
    HDR_FORMAT = 8, HDR_LAYOUT_VERSION = 12, HDR_LAYOUT = 16, HDR_SIZE = 20, HDR_FLAGS = 24, HDR_RESERVED = 28,
    FTR_META_OFF = 0, FTR_META_SIZE = 8, FTR_TABLE_OFF = 16, FTR_TENSORS = 24, FTR_ASSETS = 28,
    FTR_STR_OFF = 32, FTR_STR_SIZE = 40, FTR_META_CRC = 48, FTR_ZERO = 52, FTR_MAGIC = 56,
    /* tensor entry (128 bytes) */
    TE_NAME_OFF = 0, TE_NAME_LEN = 4, TE_ROLE_OFF = 8, TE_ROLE_LEN = 12, TE_DTYPE = 16, TE_LAYOUT = 17,
    TE_SCALE_DTYPE = 18, TE_ZP = 19, TE_NDIM = 20, TE_PAD0 = 21, TE_BLOCK = 24, TE_KBLOCKS = 28, TE_SHAPE = 32,
    TE_OFFSET = 64, TE_SIZE = 72, TE_SCALES_OFF = 80, TE_ZEROS_OFF = 88, TE_CRC = 96, TE_RESERVED = 100,
    /* asset entry (32 bytes) */
    AE_NAME_OFF = 0, AE_NAME_LEN = 4, AE_OFFSET = 8, AE_SIZE = 16, AE_CRC = 24, AE_ZERO = 28,
};

static inline uint32_t q4nx_rd32(const uint8_t *p)
{
    return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t q4nx_rd64(const uint8_t *p) { return q4nx_rd32(p) | (uint64_t)q4nx_rd32(p + 4) << 32; }
static inline void q4nx_wr32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static inline void q4nx_wr64(uint8_t *p, uint64_t v)
{
    q4nx_wr32(p, (uint32_t)v);
    q4nx_wr32(p + 4, (uint32_t)(v >> 32));
}
static inline uint64_t q4nx_align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

/* Where the parts of a quantised tensor sit, relative to the tensor's start. */
static inline void ogk_q4_parts(uint64_t codes_bytes, uint64_t groups, uint64_t scale_size, int has_zp,
                                 uint64_t *scales_off, uint64_t *zeros_off, uint64_t *size)
{
    *scales_off = q4nx_align_up(codes_bytes, 64);
    uint64_t end = *scales_off + groups * scale_size;
    *zeros_off = has_zp ? q4nx_align_up(end, 64) : 0;
    *size = has_zp ? *zeros_off + groups : end;
}

#endif
