/* The rm -> b8 band shuffle of the avx512 row of the ISA table with AVX-512 VBMI byte permutes (compiled
 * with the AVX-512 flags plus -mavx512vbmi; isa.c uses it only on a CPU that has VBMI). */
#include <immintrin.h>

#include "kern_int.h"

/* One rm chunk (8 columns x 16 rows: byte j*8 + b holds rows 2b (low nibble) and 2b+1 of column j)
 * to one b8 chunk (byte r*4 + i = code(r, i) | code(r, 4 + i) << 4): split the nibbles into two
 * 64-byte tables and pick with two vpermi2b (AVX-512 VBMI). Index r*4 + i of the pick tables is
 * (r & 1) * 64 + i * 8 + r / 2 (low nibbles: k = i) and (r & 1) * 64 + (4 + i) * 8 + r / 2 (high: k = 4 + i). */
static const uint8_t rm_idx_lo[64] __attribute__((aligned(64))) = {
      0,   8,  16,  24,  64,  72,  80,  88,   1,   9,  17,  25,  65,  73,  81,  89,
      2,  10,  18,  26,  66,  74,  82,  90,   3,  11,  19,  27,  67,  75,  83,  91,
      4,  12,  20,  28,  68,  76,  84,  92,   5,  13,  21,  29,  69,  77,  85,  93,
      6,  14,  22,  30,  70,  78,  86,  94,   7,  15,  23,  31,  71,  79,  87,  95,
};
static const uint8_t rm_idx_hi[64] __attribute__((aligned(64))) = {
     32,  40,  48,  56,  96, 104, 112, 120,  33,  41,  49,  57,  97, 105, 113, 121,
     34,  42,  50,  58,  98, 106, 114, 122,  35,  43,  51,  59,  99, 107, 115, 123,
     36,  44,  52,  60, 100, 108, 116, 124,  37,  45,  53,  61, 101, 109, 117, 125,
     38,  46,  54,  62, 102, 110, 118, 126,  39,  47,  55,  63, 103, 111, 119, 127,
};

static inline void rm_chunk_vbmi(const uint8_t *in, uint8_t *out)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512i v = _mm512_loadu_si512(in);
    __m512i L = _mm512_and_si512(v, m4), H = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
    __m512i lo = _mm512_permutex2var_epi8(L, _mm512_load_si512(rm_idx_lo), H);
    __m512i hi = _mm512_permutex2var_epi8(L, _mm512_load_si512(rm_idx_hi), H);
    _mm512_storeu_si512(out, _mm512_or_si512(lo, _mm512_slli_epi16(hi, 4)));
}

/* the rm_band operation of the avx512 row (needs VBMI besides the row's features: isa.c gives a CPU
 * without it kern_rm_band_ref instead) */
void kern_rm_band_vbmi(const ogk_qtensor *W, uint32_t band, uint8_t *codes, void *scales, uint8_t *zeros)
{
    kern_rm_band_with(W, band, codes, scales, zeros, rm_chunk_vbmi);
}
