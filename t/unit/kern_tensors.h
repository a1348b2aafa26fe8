/* Test helper shared by t/unit/kern_*.c (not a module): a seeded generator and random 4-bit tensors in
 * a layout (codes, scales of a dtype, optional zero points), built through ogk_q4_relayout; activations
 * with an all-zero row and an outlier. Define KERN_TEST_SEED before including it. */
#ifndef OGK_T_KERN_TENSORS_H
#define OGK_T_KERN_TENSORS_H

static uint64_t rng = KERN_TEST_SEED;
static uint32_t rnd(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float frand(void) { return (float)((rnd() & 0xFFFFFF) / 16777216.0 * 2.0 - 1.0); }

typedef struct {
    ogk_qtensor t;
    uint8_t *codes, *zeros;
    void *scales;
} tensor;

static void make(tensor *T, int layout, uint32_t n, uint32_t k, uint32_t block, int sdt, int zp)
{
    uint32_t kb = (k + block - 1) / block;
    size_t ss = ogk_dtype_size(sdt);
    uint8_t *src = malloc((size_t)n * kb * block / 2), *ssc = malloc((size_t)n * kb * ss),
            *szp = malloc((size_t)n * ((kb + 1) / 2));
    for (size_t i = 0; i < (size_t)n * kb * block / 2; i++)
        src[i] = (uint8_t)rnd();
    for (size_t i = 0; i < (size_t)n * kb; i++) {
        float s = (0.001f + 0.1f * fabsf(frand())) * (rnd() & 1 ? -1.0f : 1.0f);
        if (sdt == OGK_F32)
            memcpy(ssc + i * 4, &s, 4);
        else {
            uint16_t h = sdt == OGK_F16 ? ogk_f32_to_f16(s) : ogk_f32_to_bf16(s);
            memcpy(ssc + i * 2, &h, 2);
        }
    }
    for (size_t i = 0; i < (size_t)n * ((kb + 1) / 2); i++)
        szp[i] = (uint8_t)rnd();
    T->codes = malloc(ogk_q4_codes_bytes(layout, n, k, block));
    T->scales = malloc(ogk_q4_groups(layout, n, k, block) * ss);
    T->zeros = malloc(ogk_q4_groups(layout, n, k, block));
    ogk_q4_relayout(layout, n, k, block, sdt, src, ssc, zp ? szp : NULL, T->codes, T->scales, T->zeros);
    T->t = (ogk_qtensor){.name = "test", .dtype = OGK_Q4, .layout = layout, .n = n, .k = k, .block = block,
                         .k_blocks = kb, .scale_dtype = sdt, .has_zp = zp, .codes = T->codes, .scales = T->scales,
                         .zeros = zp ? T->zeros : NULL};
    free(src), free(ssc), free(szp);
}

static void drop(tensor *T) { free(T->codes), free(T->scales), free(T->zeros); }

static float *make_x(int M, uint32_t K)
{
    float *x = malloc((size_t)M * K * sizeof *x);
    for (size_t i = 0; i < (size_t)M * K; i++)
        x[i] = frand() * 2.0f;
    if (M > 3) {
        memset(x + (size_t)2 * K, 0, K * sizeof *x); /* an all-zero row: scale 0 */
        x[(size_t)3 * K + K / 2] = 40.0f;            /* an outlier */
    }
    return x;
}

#endif
