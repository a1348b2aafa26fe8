/* The swiglu and geglu operations of every row of the ISA table this CPU runs (portable; AVX-512,
 * lib/kern/act_avx512.c) against silu(g) * up computed here in double precision: g over [-120, 120]
 * (both clamps of the AVX-512 exp), zeros, tiny values, lengths that are not multiples of 16. Rows this
 * CPU lacks are skipped by name. */
#include <math.h>
#include <stdlib.h>

#include "kern/kern.h"
#include "tap.h"

int main(void)
{
    static const size_t lens[] = {1, 15, 16, 17, 4864, 4867};
    for (int isa = 0; isa < KERN_ISA_COUNT; isa++) {
        const kern_isa *row = kern_isa_row(isa);
        if (!kern_isa_supported(isa)) {
            printf("ok %d - # skip row %s: not supported on this CPU\n", ++tap_n, row->name);
            continue;
        }
        unsigned s = 11;
        for (size_t a = 0; a < sizeof lens / sizeof *lens; a++) {
            size_t n = lens[a];
            float *g = malloc(n * sizeof *g), *up = malloc(n * sizeof *up);
            double *want = malloc(n * sizeof *want), worst = 0;
            for (size_t i = 0; i < n; i++) {
                s = s * 1103515245u + 12345u;
                double u = (double)(s >> 8 & 0xFFFFFF) / 16777216.0;
                g[i] = (float)(i % 97 == 0 ? 0.0 : i % 89 == 0 ? 1e-30 : (u - 0.5) * 240.0);
                up[i] = (float)(1.0 + (double)(i % 13) / 4.0) * (i % 2 ? 1 : -1);
                want[i] = (double)g[i] / (1.0 + exp(-(double)g[i])) * up[i];
            }
            row->swiglu(g, up, n);
            for (size_t i = 0; i < n; i++) {
                double err = fabs(g[i] - want[i]) / fmax(fabs(want[i]), 1e-30);
                worst = fmax(worst, fabs(want[i]) < 1e-35 ? fabs(g[i] - want[i]) : err);
            }
            TAP_OK(worst < 1e-6, "%s: %zu values: max relative error %.2e (< 1e-6)", row->name, n, worst);
            /* geglu: gelu_tanh(g) * up = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) * up */
            worst = 0;
            for (size_t i = 0; i < n; i++) {
                s = s * 1103515245u + 12345u;
                double u = (double)(s >> 8 & 0xFFFFFF) / 16777216.0;
                double x = i % 97 == 0 ? 0.0 : i % 89 == 0 ? 1e-30 : i % 3 ? (u - 0.5) * 12.0 : (u - 0.5) * 240.0;
                g[i] = (float)x;
                x = g[i];
                want[i] = 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))) * up[i];
            }
            row->geglu(g, up, n);
            /* relative to the value, or to 1e-6 of up where the value vanishes (x < -9: 1e-30 and below, where
             * the exp's clamp and onnxruntime's 1 + tanh(u) = 0 in float differ in nothing that matters) */
            for (size_t i = 0; i < n; i++)
                worst = fmax(worst, fabs(g[i] - want[i]) / fmax(fabs(want[i]), 1e-6 * fabs(up[i])));
            TAP_OK(worst < 2e-6, "%s: geglu, %zu values: max error %.2e relative to max(|value|, 1e-6 |up|) (< 2e-6)",
                   row->name, n, worst);
            free(g), free(up), free(want);
        }
    }
    return TAP_DONE();
}
