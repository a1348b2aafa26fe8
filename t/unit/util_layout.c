/* lib/util layouts (tensor.h): rm and b8 hold every code, scale and zero point of the MatMulNBits source. */
#include "tap.h"
#include "util/tensor.h"
#include "util/util.h"

#include <stdlib.h>
#include <string.h>

static uint32_t rng = 7;
static uint32_t rnd(void) { return (rng = rng * 1664525u + 1013904223u) >> 8; }

static int check(int layout, uint32_t n, uint32_t k, uint32_t block, int sdt, int with_zp)
{
    uint32_t kb = (k + block - 1) / block;
    size_t ss = ogk_dtype_size(sdt);
    uint8_t *src = malloc((size_t)n * kb * block / 2);
    uint8_t *ssc = malloc((size_t)n * kb * ss);
    uint8_t *szp = malloc((size_t)n * ((kb + 1) / 2));
    for (size_t i = 0; i < (size_t)n * kb * block / 2; i++)
        src[i] = (uint8_t)rnd();
    for (size_t i = 0; i < (size_t)n * kb * ss; i++)
        ssc[i] = (uint8_t)rnd();
    for (size_t i = 0; i < (size_t)n * ((kb + 1) / 2); i++)
        szp[i] = (uint8_t)rnd();
    ogk_qtensor t = {.dtype = OGK_Q4, .layout = layout, .n = n, .k = k, .block = block, .k_blocks = kb,
                     .scale_dtype = sdt, .has_zp = with_zp};
    uint8_t *codes = malloc(ogk_q4_codes_bytes(layout, n, k, block));
    uint8_t *scales = malloc(ogk_q4_groups(layout, n, k, block) * ss);
    uint8_t *zeros = malloc(ogk_q4_groups(layout, n, k, block));
    ogk_q4_relayout(layout, n, k, block, sdt, src, ssc, with_zp ? szp : NULL, codes, scales, zeros);
    t.codes = codes;
    t.scales = scales;
    t.zeros = with_zp ? zeros : NULL;
    int ok = 1;
    for (uint32_t r = 0; r < n && ok; r++) {
        for (uint32_t c = 0; c < kb * block; c++) {
            uint8_t want = (src[((size_t)r * kb * block + c) / 2] >> (4 * (c & 1))) & 15;
            if (ogk_q4_code(&t, r, c) != want)
                ok = 0;
        }
        for (uint32_t g = 0; g < kb; g++) {
            float want;
            if (sdt == OGK_F32)
                memcpy(&want, ssc + ((size_t)r * kb + g) * 4, 4);
            else {
                uint16_t h;
                memcpy(&h, ssc + ((size_t)r * kb + g) * 2, 2);
                want = sdt == OGK_F16 ? ogk_f16_to_f32(h) : ogk_bf16_to_f32(h);
            }
            float got = ogk_q4_scale(&t, r, g);
            if (memcmp(&want, &got, 4) != 0)
                ok = 0;
            uint8_t wz = with_zp ? (szp[r * ((kb + 1) / 2) + g / 2] >> (4 * (g & 1))) & 15 : 8;
            if (ogk_q4_zero(&t, r, g) != wz)
                ok = 0;
        }
    }
    free(src), free(ssc), free(szp), free(codes), free(scales), free(zeros);
    return ok;
}

int main(void)
{
    int layouts[] = {OGK_B8, OGK_RM};
    for (int li = 0; li < 2; li++) {
        int L = layouts[li];
        const char *ln = ogk_layout_name(L);
        TAP_OK(check(L, 37, 100, 32, OGK_F32, 0), "%s: N=37 K=100 B=32 f32 scales, symmetric", ln);
        TAP_OK(check(L, 64, 896, 32, OGK_F32, 1), "%s: N=64 K=896 B=32 f32 scales, zero points", ln);
        TAP_OK(check(L, 17, 300, 128, OGK_F16, 1), "%s: N=17 K=300 B=128 f16 scales, zero points", ln);
        TAP_OK(check(L, 33, 512, 64, OGK_BF16, 1), "%s: N=33 K=512 B=64 bf16 scales, zero points", ln);
        TAP_OK(check(L, 1, 16, 16, OGK_F32, 1), "%s: N=1 K=16 B=16", ln);
    }
    TAP_OK(ogk_q4_layout_refusal(OGK_RM, 8, 1024, 512) != NULL, "rm refuses block 512");
    TAP_OK(ogk_q4_layout_refusal(OGK_B8, 8, 1024, 512) == NULL, "b8 takes block 512");
    TAP_OK(check(OGK_B8, 20, 1024, 512, OGK_F32, 1), "b8: block 512");
    /* the dtype vocabulary: the names OGAX and the container's JSON use, sizes, bits */
    static const char *names[] = {"f32", "f16", "bf16", "q4", "i32", "i64"};
    static const int sizes[] = {4, 2, 2, 0, 4, 8}, bits[] = {32, 16, 16, 4, 32, 64};
    int voc = ogk_dtype_parse("f8") < 0 && ogk_dtype_parse(NULL) < 0 && !strcmp(ogk_dtype_name(99), "?");
    for (int d = OGK_F32; d <= OGK_I64; d++)
        voc &= !strcmp(ogk_dtype_name(d), names[d - 1]) && ogk_dtype_parse(names[d - 1]) == d &&
               (int)ogk_dtype_size(d) == sizes[d - 1] && ogk_dtype_bits(d) == bits[d - 1];
    TAP_OK(voc, "dtypes: names, sizes and bits; unknown names refused");
    TAP_OK(!strcmp(ogk_layout_name(OGK_B8), "b8") && !strcmp(ogk_layout_name(OGK_RM), "rm") &&
               ogk_layout_parse("b8") == OGK_B8 && ogk_layout_parse("rm") == OGK_RM && ogk_layout_parse("b9") < 0,
           "layouts: names parse and print");
    return TAP_DONE();
}
