/* The swiglu operation of every row of the ISA table this CPU runs (portable; AVX-512,
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
            free(g), free(up), free(want);
        }
    }
    return TAP_DONE();
}
