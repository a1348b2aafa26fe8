/* CRC32C (Castagnoli). Hardware crc32 instruction when the CPU has SSE4.2 (three interleaved streams
 * for throughput), table-driven otherwise. Both give the same answer; t/unit checks it. */
#include "util.h"

#include <string.h>

#define POLY 0x82f63b78u

static uint32_t table[8][256];
static int have_hw = -1;

static void init_tables(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
        table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
}

static uint32_t crc_sw(uint32_t crc, const uint8_t *p, size_t n)
{
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        v ^= crc;
        crc = table[7][v & 0xff] ^ table[6][(v >> 8) & 0xff] ^ table[5][(v >> 16) & 0xff] ^
              table[4][(v >> 24) & 0xff] ^ table[3][(v >> 32) & 0xff] ^ table[2][(v >> 40) & 0xff] ^
              table[1][(v >> 48) & 0xff] ^ table[0][v >> 56];
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xff];
    return crc;
}

#if defined(__x86_64__)
/* Shift a CRC over len zero bytes: multiply by x^(8*len) mod P using the table (slow but rarely
 * called: once per 3-stream chunk), implemented as a GF(2) matrix-free loop over zero bytes
 * would be too slow, so we precompute the operator for the fixed chunk length. */
#define CHUNK 8192
static uint32_t shift_tab[4][256]; /* operator "append CHUNK zero bytes", byte-sliced */

static uint32_t gf2_times(const uint32_t *mat, uint32_t vec)
{
    uint32_t sum = 0;
    for (int i = 0; vec; i++, vec >>= 1)
        if (vec & 1)
            sum ^= mat[i];
    return sum;
}

static void gf2_square(uint32_t *sq, const uint32_t *mat)
{
    for (int n = 0; n < 32; n++)
        sq[n] = gf2_times(mat, mat[n]);
}

static void init_shift(void)
{
    /* operator for one zero bit, then square up to CHUNK*8 bits (CHUNK is a power of two) */
    uint32_t op[32], tmp[32];
    op[0] = POLY;
    for (int n = 1; n < 32; n++)
        op[n] = 1u << (n - 1);
    for (unsigned bits = 1; bits < CHUNK * 8u; bits <<= 1) {
        gf2_square(tmp, op);
        memcpy(op, tmp, sizeof op);
    }
    for (int b = 0; b < 4; b++)
        for (uint32_t v = 0; v < 256; v++)
            shift_tab[b][v] = gf2_times(op, v << (8 * b));
}

static inline uint32_t shift_chunk(uint32_t crc)
{
    return shift_tab[0][crc & 0xff] ^ shift_tab[1][(crc >> 8) & 0xff] ^ shift_tab[2][(crc >> 16) & 0xff] ^
           shift_tab[3][crc >> 24];
}

__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const uint8_t *p, size_t n)
{
    uint64_t c0 = crc;
    while (n >= 3 * CHUNK) {
        uint64_t c1 = 0, c2 = 0;
        const uint8_t *a = p, *b = p + CHUNK, *c = p + 2 * CHUNK;
        for (size_t i = 0; i < CHUNK; i += 8) {
            uint64_t va, vb, vc;
            memcpy(&va, a + i, 8);
            memcpy(&vb, b + i, 8);
            memcpy(&vc, c + i, 8);
            c0 = __builtin_ia32_crc32di(c0, va);
            c1 = __builtin_ia32_crc32di(c1, vb);
            c2 = __builtin_ia32_crc32di(c2, vc);
        }
        c0 = shift_chunk((uint32_t)c0) ^ (uint32_t)c1;
        c0 = shift_chunk((uint32_t)c0) ^ (uint32_t)c2;
        p += 3 * CHUNK;
        n -= 3 * CHUNK;
    }
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c0 = __builtin_ia32_crc32di(c0, v);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c0;
    while (n--)
        c32 = __builtin_ia32_crc32qi(c32, *p++);
    return c32;
}
#endif

uint32_t ogk_crc32c(uint32_t crc, const void *buf, size_t n)
{
    if (have_hw < 0) {
        init_tables();
#if defined(__x86_64__)
        __builtin_cpu_init();
        have_hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
        if (have_hw)
            init_shift();
#else
        have_hw = 0;
#endif
    }
    crc = ~crc;
#if defined(__x86_64__)
    if (have_hw)
        return ~crc_hw(crc, buf, n);
#endif
    return ~crc_sw(crc, buf, n);
}

/* For tests: force the table path. */
uint32_t ogk_crc32c_sw(uint32_t crc, const void *buf, size_t n);
uint32_t ogk_crc32c_sw(uint32_t crc, const void *buf, size_t n)
{
    if (have_hw < 0)
        ogk_crc32c(0, "", 0);
    return ~crc_sw(~crc, buf, n);
}
