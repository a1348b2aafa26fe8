/* The dequant operation of every row of the ISA table this CPU runs (storage-order walks: scalar, AVX2)
 * agrees bit for bit with the per-element accessor path ogk_q4_dequant_row, for both layouts, odd
 * shapes and arbitrary row windows; ogk_q4_relayout zeroes every padding code, scale and zero point as
 * q4nx.h defines. Rows this CPU lacks are skipped by name. */
#include "tap.h"
#include "kern/kern.h"
#include "util/tensor.h"
#include "util/util.h"

#include <stdlib.h>
#include <string.h>

static uint32_t rng = 3;
static uint32_t rnd(void) { return (rng = rng * 1664525u + 1013904223u) >> 8; }

static int isa; /* the row under test */

static int check(int layout, uint32_t n, uint32_t k, uint32_t block, int sdt, int with_zp, uint32_t r0, uint32_t nr)
{
    uint32_t kb = (k + block - 1) / block;
    size_t ss = ogk_dtype_size(sdt);
    size_t cb = (size_t)n * kb * block / 2;
    uint8_t *src = malloc(cb), *ssc = malloc((size_t)n * kb * ss), *szp = malloc((size_t)n * ((kb + 1) / 2));
    for (size_t i = 0; i < cb; i++)
        src[i] = (uint8_t)rnd();
    for (size_t i = 0; i < (size_t)n * kb; i++) {
        if (sdt == OGK_F32) {
            float f = ((float)(rnd() % 4000) - 2000.0f) / 1024.0f;
            memcpy(ssc + i * 4, &f, 4);
        } else {
            uint16_t h = (uint16_t)(0x3000 + rnd() % 0x1000);
            memcpy(ssc + i * 2, &h, 2);
        }
    }
    for (size_t i = 0; i < (size_t)n * ((kb + 1) / 2); i++)
        szp[i] = (uint8_t)rnd();
    ogk_qtensor t = {.dtype = OGK_Q4, .layout = layout, .n = n, .k = k, .block = block, .k_blocks = kb,
                     .scale_dtype = sdt, .has_zp = with_zp};
    size_t cbytes = ogk_q4_codes_bytes(layout, n, k, block), groups = ogk_q4_groups(layout, n, k, block);
    uint8_t *codes = malloc(cbytes), *scales = malloc(groups * ss), *zeros = malloc(groups);
    memset(codes, 0xAA, cbytes), memset(scales, 0xAA, groups * ss), memset(zeros, 0xAA, groups);
    ogk_q4_relayout(layout, n, k, block, sdt, src, ssc, with_zp ? szp : NULL, codes, scales, zeros);
    t.codes = codes, t.scales = scales, t.zeros = with_zp ? zeros : NULL;
    /* padding rows (and rm's columns past kb*B) are zero in codes, scales and zero points */
    uint32_t rows_p = layout == OGK_B8 ? (n + 15) / 16 * 16 : (n + 31) / 32 * 32;
    uint32_t cols_p = layout == OGK_B8 ? kb * block : (kb * block + 255) / 256 * 256;
    int pad_ok = 1;
    for (uint32_t r = 0; r < rows_p; r++)
        for (uint32_t c = 0; c < cols_p; c++)
            if ((r >= n || c >= kb * block) && ogk_q4_code(&t, r, c) != 0)
                pad_ok = 0;
    ogk_qtensor tz = t;
    tz.zeros = zeros, tz.has_zp = with_zp;
    for (uint32_t r = 0; r < rows_p; r++)
        for (uint32_t g = 0; g < cols_p / block; g++)
            if ((r >= n || g >= kb) && (ogk_q4_scale(&t, r, g) != 0.0f || (with_zp && ogk_q4_zero(&tz, r, g) != 0)))
                pad_ok = 0;
    if (!pad_ok)
        printf("# padding not zero\n");
    float *fast = malloc(sizeof(float) * nr * k), *slow = malloc(sizeof(float) * k);
    kern_isa_row(isa)->dequant(&t, r0, nr, fast);
    int ok = 1;
    for (uint32_t r = 0; r < nr; r++) {
        ogk_q4_dequant_row(&t, r0 + r, slow);
        if (memcmp(slow, fast + (size_t)r * k, sizeof(float) * k))
            ok = 0;
    }
    free(src), free(ssc), free(szp), free(codes), free(scales), free(zeros), free(fast), free(slow);
    return ok && pad_ok;
}

int main(void)
{
    for (isa = 0; isa < KERN_ISA_COUNT; isa++) {
        const char *in = kern_isa_row(isa)->name;
        if (!kern_isa_supported(isa)) {
            printf("ok %d - # skip row %s: not supported on this CPU\n", ++tap_n, in);
            continue;
        }
        int layouts[] = {OGK_B8, OGK_RM};
        for (int li = 0; li < 2; li++) {
            int L = layouts[li];
            char ln[32];
            snprintf(ln, sizeof ln, "%s %s", in, ogk_layout_name(L));
            TAP_OK(check(L, 37, 100, 32, OGK_F32, 0, 0, 37), "%s: N=37 K=100 B=32 f32, all rows", ln);
            TAP_OK(check(L, 37, 100, 32, OGK_F32, 1, 5, 20), "%s: rows 5..24", ln);
            TAP_OK(check(L, 70, 896, 32, OGK_F16, 1, 31, 33), "%s: N=70 K=896 f16, rows 31..63", ln);
            TAP_OK(check(L, 17, 300, 128, OGK_BF16, 1, 16, 1), "%s: N=17 K=300 B=128 bf16, last row", ln);
            TAP_OK(check(L, 64, 600, 64, OGK_F32, 0, 0, 64), "%s: N=64 K=600 B=64 padded tiles", ln);
            TAP_OK(check(L, 1, 16, 16, OGK_F32, 1, 0, 1), "%s: N=1 K=16 B=16", ln);
        }
        TAP_OK(check(OGK_B8, 20, 1000, 512, OGK_F16, 1, 3, 17), "%s b8: block 512, K not a multiple", in);
    }
    return TAP_DONE();
}
