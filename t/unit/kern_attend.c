/* The attend operation of every row of the ISA table this CPU runs (portable; AVX-512 grouped attention,
 * lib/kern/attention_avx512.c) against causal softmax attention written out here in double precision:
 * head_dim 16 (one head at a time), 64 (groups of up to 4 heads), 96 and 128 (groups of 2), 72 (not a
 * multiple of 16: the portable fallback), group sizes 1..7, positions 1..300, peaked and flat scores;
 * each over an fp32 cache (attend) and an fp16 one (attend_h, against the reference on the rounded
 * values). attend_h of several query rows at once (a prompt chunk) must give every row the bits of a
 * call of that row alone. Rows this CPU lacks are skipped by name. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kern/kern.h"
#include "tap.h"
#include "util/util.h"

static double urand(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (double)(*s >> 8 & 0xFFFF) / 65536.0 - 0.5;
}

/* positions [t0, n), scores soft-capped (cap > 0): attend_ext's operation, in double */
static void reference_ext(const float *q, const float *kc, const float *vc, int t0, int n, int hd, double scale,
                          double cap, double *out)
{
    double *sc = malloc((size_t)n * sizeof *sc), mx = -INFINITY, sum = 0;
    for (int t = t0; t < n; t++) {
        double d = 0;
        for (int i = 0; i < hd; i++)
            d += (double)q[i] * kc[(size_t)t * hd + i];
        d *= scale;
        sc[t] = cap > 0 ? cap * tanh(d / cap) : d;
        mx = sc[t] > mx ? sc[t] : mx;
    }
    for (int t = t0; t < n; t++)
        sum += sc[t] = exp(sc[t] - mx);
    for (int i = 0; i < hd; i++) {
        double o = 0;
        for (int t = t0; t < n; t++)
            o += sc[t] / sum * vc[(size_t)t * hd + i];
        out[i] = o;
    }
    free(sc);
}

/* attend_ext of every row this CPU runs against reference_ext: head sizes with and without the SIMD path,
 * window starts, caps that bite (2) and do not (0, 50), fp32 and fp16 caches */
static void ext_cases(void)
{
    static const int hds[] = {16, 64, 72, 128, 256}, spans[][2] = {{0, 1}, {0, 17}, {5, 13}, {40, 300}, {290, 300}};
    static const double caps[] = {0, 2, 50};
    for (int isa = 0; isa < KERN_ISA_COUNT; isa++) {
        const kern_isa *row = kern_isa_row(isa);
        if (!kern_isa_supported(isa) || !row->attend_ext) {
            printf("ok %d - # skip row %s: %s\n", ++tap_n, row->name,
                   kern_isa_supported(isa) ? "no attend_ext" : "not supported on this CPU");
            continue;
        }
        unsigned seed = 5;
        double worst[2] = {0, 0};
        int cases = 0;
        for (size_t a = 0; a < sizeof hds / sizeof *hds; a++)
            for (size_t b = 0; b < sizeof spans / sizeof *spans; b++)
                for (size_t c = 0; c < sizeof caps / sizeof *caps; c++)
                    for (int h16 = 0; h16 < 2; h16++) {
                        int hd = hds[a], t0 = spans[b][0], n = spans[b][1], g = 3;
                        size_t as = (size_t)n + 3;
                        float *q = malloc(sizeof(float) * g * hd), *k = malloc(sizeof(float) * n * hd),
                              *v = malloc(sizeof(float) * n * hd), *att = malloc(sizeof(float) * g * as);
                        uint16_t *kh = malloc(2 * (size_t)n * hd), *vh = malloc(2 * (size_t)n * hd);
                        double *ref = malloc(sizeof(double) * g * hd);
                        for (int i = 0; i < g * hd; i++)
                            q[i] = (float)(urand(&seed) * 12.0);
                        for (int i = 0; i < n * hd; i++) {
                            k[i] = (float)urand(&seed), v[i] = (float)urand(&seed);
                            kh[i] = ogk_f32_to_f16(k[i]), vh[i] = ogk_f32_to_f16(v[i]);
                            if (h16) /* the reference on the rounded values */
                                k[i] = ogk_f16_to_f32(kh[i]), v[i] = ogk_f16_to_f32(vh[i]);
                        }
                        double scale = 1.0 / sqrt((double)hd);
                        for (int h = 0; h < g; h++)
                            reference_ext(q + (size_t)h * hd, k, v, t0, n, hd, scale, caps[c], ref + (size_t)h * hd);
                        row->attend_ext(q, g, h16 ? (const void *)kh : k, h16 ? (const void *)vh : v, h16, t0, n, hd,
                                        (float)scale, (float)caps[c], att, as);
                        for (int i = 0; i < g * hd; i++)
                            worst[h16] = fmax(worst[h16], fabs(q[i] - ref[i]));
                        cases++;
                        free(q), free(k), free(v), free(kh), free(vh), free(att), free(ref);
                    }
        TAP_OK(worst[0] < 2e-6 && worst[1] < 2e-6,
               "%s: attend_ext (soft caps 0/2/50, window starts, head_dim 16-256, %d cases): max |err| %.2e fp32 cache, "
               "%.2e fp16 (< 2e-6)", row->name, cases, worst[0], worst[1]);
    }
}

/* softmax(q.k * scale) . v for one head, in double */
static void reference(const float *q, const float *kc, const float *vc, int n, int hd, double scale, double *out)
{
    double *sc = malloc((size_t)n * sizeof *sc), mx = -INFINITY, sum = 0;
    for (int t = 0; t < n; t++) {
        double d = 0;
        for (int i = 0; i < hd; i++)
            d += (double)q[i] * kc[(size_t)t * hd + i];
        sc[t] = d * scale;
        mx = sc[t] > mx ? sc[t] : mx;
    }
    for (int t = 0; t < n; t++)
        sum += sc[t] = exp(sc[t] - mx);
    for (int i = 0; i < hd; i++) {
        double o = 0;
        for (int t = 0; t < n; t++)
            o += sc[t] / sum * vc[(size_t)t * hd + i];
        out[i] = o;
    }
    free(sc);
}

int main(void)
{
    static const int hds[] = {16, 64, 72, 96, 128}, ns[] = {1, 15, 16, 17, 300}, gs[] = {1, 3, 4, 5, 7};
    static const double spread[] = {1.0, 40.0}; /* flat and peaked score distributions */
    for (int isa = 0; isa < KERN_ISA_COUNT; isa++) {
        const kern_isa *row = kern_isa_row(isa);
        if (!kern_isa_supported(isa)) {
            printf("ok %d - # skip row %s: not supported on this CPU\n", ++tap_n, row->name);
            continue;
        }
        unsigned seed = 7;
        for (size_t a = 0; a < sizeof hds / sizeof *hds; a++)
            for (size_t b = 0; b < sizeof ns / sizeof *ns; b++)
                for (size_t c = 0; c < sizeof gs / sizeof *gs; c++)
                    for (size_t d = 0; d < 2; d++) {
                        int hd = hds[a], n = ns[b], g = gs[c];
                        size_t as = (size_t)n + 5;
                        float *q = malloc(sizeof(float) * g * hd), *k = malloc(sizeof(float) * n * hd),
                              *v = malloc(sizeof(float) * n * hd), *att = malloc(sizeof(float) * g * as);
                        double *ref = malloc(sizeof(double) * g * hd), worst = 0;
                        for (int i = 0; i < g * hd; i++)
                            q[i] = (float)(urand(&seed) * spread[d]);
                        for (int i = 0; i < n * hd; i++)
                            k[i] = (float)urand(&seed), v[i] = (float)urand(&seed);
                        double scale = 1.0 / sqrt((double)hd);
                        float *q0 = malloc(sizeof(float) * g * hd);
                        memcpy(q0, q, sizeof(float) * g * hd);
                        for (int h = 0; h < g; h++)
                            reference(q + (size_t)h * hd, k, v, n, hd, scale, ref + (size_t)h * hd);
                        row->attend(q, g, k, v, n, hd, (float)scale, att, as);
                        for (int i = 0; i < g * hd; i++)
                            worst = fmax(worst, fabs(q[i] - ref[i]));
                        TAP_OK(worst < 2e-6,
                               "%s: head_dim %d, %d positions, %d heads, spread %g: max |err| %.2e (< 2e-6)",
                               row->name, hd, n, g, spread[d], worst);
                        /* attend_h: the same over an fp16 cache, against the reference on the rounded values */
                        uint16_t *kh = malloc(2 * (size_t)n * hd), *vh = malloc(2 * (size_t)n * hd);
                        for (int i = 0; i < n * hd; i++) {
                            kh[i] = ogk_f32_to_f16(k[i]), vh[i] = ogk_f32_to_f16(v[i]);
                            k[i] = ogk_f16_to_f32(kh[i]), v[i] = ogk_f16_to_f32(vh[i]);
                        }
                        memcpy(q, q0, sizeof(float) * g * hd);
                        for (int h = 0; h < g; h++)
                            reference(q + (size_t)h * hd, k, v, n, hd, scale, ref + (size_t)h * hd);
                        row->attend_h(q, (size_t)g * hd, 1, g, kh, vh, n, hd, (float)scale, att, as);
                        worst = 0;
                        for (int i = 0; i < g * hd; i++)
                            worst = fmax(worst, fabs(q[i] - ref[i]));
                        TAP_OK(worst < 2e-6,
                               "%s: fp16 cache, head_dim %d, %d positions, %d heads, spread %g: max |err| %.2e (< 2e-6)",
                               row->name, hd, n, g, spread[d], worst);
                        free(q), free(q0), free(k), free(v), free(kh), free(vh), free(att), free(ref);
                    }
    }
    ext_cases();
    /* attend_h over several rows: bit-identical to one row at a time, for every row of the table */
    for (int isa = 0; isa < KERN_ISA_COUNT; isa++) {
        const kern_isa *row = kern_isa_row(isa);
        if (!kern_isa_supported(isa))
            continue;
        static const int rws[] = {2, 3, 8, 40}, n0s[] = {1, 6, 33, 130}, hds2[] = {64, 96, 128, 72}, gs2[] = {1, 4, 7};
        unsigned seed = 11;
        int cases = 0, same = 1;
        for (size_t a = 0; a < 4; a++)
            for (size_t b = 0; b < 4; b++)
                for (size_t c = 0; c < sizeof hds2 / sizeof *hds2; c++)
                    for (size_t d = 0; d < sizeof gs2 / sizeof *gs2; d++) {
                        int rows = rws[a], n0 = n0s[b], hd = hds2[c], g = gs2[d], n = n0 + rows - 1;
                        size_t qs = (size_t)g * hd + 8, as = (size_t)n + 3;
                        float *q = malloc(sizeof(float) * qs * rows), *q1 = malloc(sizeof(float) * qs * rows);
                        float *att = malloc(sizeof(float) * as * rows * g);
                        uint16_t *kh = malloc(2 * (size_t)n * hd), *vh = malloc(2 * (size_t)n * hd);
                        for (size_t i = 0; i < qs * rows; i++)
                            q[i] = q1[i] = (float)(urand(&seed) * 8.0);
                        for (int i = 0; i < n * hd; i++)
                            kh[i] = ogk_f32_to_f16((float)urand(&seed)), vh[i] = ogk_f32_to_f16((float)urand(&seed));
                        float scale = 1.0f / sqrtf((float)hd);
                        row->attend_h(q, qs, rows, g, kh, vh, n0, hd, scale, att, as);
                        for (int r = 0; r < rows; r++)
                            row->attend_h(q1 + (size_t)r * qs, qs, 1, g, kh, vh, n0 + r, hd, scale, att, as);
                        for (int r = 0; r < rows; r++)
                            same &= !memcmp(q + (size_t)r * qs, q1 + (size_t)r * qs, sizeof(float) * g * hd);
                        cases++;
                        free(q), free(q1), free(att), free(kh), free(vh);
                    }
        TAP_OK(same, "%s: attend_h of 2-40 rows at once gives each row the bits of a call of its own (%d cases)",
               row->name, cases);
    }
    /* attend_ht (query rows over the block-transposed keys): the bits of attend_h over the same keys, for
     * the rows that have it; positions past the last in the last block hold garbage (a rewound cache) */
    for (int isa = 0; isa < KERN_ISA_COUNT; isa++) {
        const kern_isa *row = kern_isa_row(isa);
        if (!kern_isa_supported(isa) || !row->attend_ht) {
            printf("ok %d - # skip row %s: %s\n", ++tap_n, row->name,
                   kern_isa_supported(isa) ? "no attend_ht" : "not supported on this CPU");
            continue;
        }
        static const int ns3[] = {1, 2, 15, 16, 17, 31, 100, 300, 1030}, gs3[] = {1, 2, 3, 7, 8, 9, 14, 16, 20};
        static const int rs3[] = {1, 2, 5, 8, 16, 40}, hds3[] = {64, 96, 128};
        unsigned seed = 13;
        int cases = 0, same = 1;
        for (size_t h = 0; h < sizeof hds3 / sizeof *hds3; h++)
            for (size_t b = 0; b < sizeof ns3 / sizeof *ns3; b++)
                for (size_t c = 0; c < sizeof gs3 / sizeof *gs3; c++)
                    for (size_t ri = 0; ri < sizeof rs3 / sizeof *rs3; ri++) {
                        int hd = hds3[h], n0 = ns3[b], g = gs3[c], rows = rs3[ri], n = n0 + rows - 1, nb = (n + 15) / 16;
                        if ((rows > 1 && n0 > 300) || (hd != 64 && (c % 2 || ri % 2))) /* fewer at 96, 128 */
                            continue;
                        if (!KERN_ATTEND_HD(hd))
                            continue;
                        size_t as = (size_t)n + 3, qs = (size_t)hd * g + 5, qn = qs * rows;
                        float *q = malloc(sizeof(float) * qn), *q1 = malloc(sizeof(float) * qn);
                        float *att = malloc(sizeof(float) * as * g * rows);
                        uint16_t *kh = malloc(2 * (size_t)n * hd), *vh = malloc(2 * (size_t)n * hd);
                        uint16_t *kt = malloc(2 * (size_t)nb * 16 * hd);
                        for (size_t i = 0; i < qn; i++)
                            q[i] = q1[i] = (float)(urand(&seed) * 8.0);
                        for (int i = 0; i < n * hd; i++)
                            kh[i] = ogk_f32_to_f16((float)urand(&seed)), vh[i] = ogk_f32_to_f16((float)urand(&seed));
                        for (int i = 0; i < nb * 16 * hd; i++) /* garbage past n: large halves, infinities, NaNs */
                            kt[i] = (uint16_t)(0x7A00 + (urand(&seed) + 0.5) * 0x0A00);
                        for (int t = 0; t < n; t++)
                            for (int d = 0; d < hd; d++)
                                kt[(size_t)(t / 16) * 16 * hd + (size_t)d * 16 + t % 16] = kh[(size_t)t * hd + d];
                        float scale = 0.125f;
                        row->attend_h(q, qs, rows, g, kh, vh, n0, hd, scale, att, as);
                        row->attend_ht(q1, qs, rows, g, kt, vh, n0, hd, scale, att, as);
                        for (int r = 0; r < rows; r++)
                            same &= !memcmp(q + (size_t)r * qs, q1 + (size_t)r * qs, sizeof(float) * hd * g);
                        cases++;
                        free(q), free(q1), free(att), free(kh), free(vh), free(kt);
                    }
        TAP_OK(same, "%s: attend_ht over transposed keys gives attend_h's bits, head_dim 64/96/128, 1-40 rows (%d cases)", row->name,
               cases);
    }
    return TAP_DONE();
}
