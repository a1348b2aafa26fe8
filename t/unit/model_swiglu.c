/* The AVX-512 SwiGLU (lib/model/act_avx512.c) against silu(g) * up computed here in double
 * precision: g over [-120, 120] (both clamps of its exp), zeros, tiny values, lengths that are not
 * multiples of 16. */
#include <math.h>
#include <stdlib.h>

#include "kern/kern.h"
#include "tap.h"

void model_swiglu_avx512(float *g, const float *up, size_t n);

int main(void)
{
    ogk_error e;
    if (kern_path_init(&e) || kern_path() != KERN_PATH_AVX512) {
        printf("ok 1 - # skip no AVX-512 kernel path on this CPU\n1..1\n");
        return 0;
    }
    static const size_t lens[] = {1, 15, 16, 17, 4864, 4867};
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
        model_swiglu_avx512(g, up, n);
        for (size_t i = 0; i < n; i++) {
            double err = fabs(g[i] - want[i]) / fmax(fabs(want[i]), 1e-30);
            worst = fmax(worst, fabs(want[i]) < 1e-35 ? fabs(g[i] - want[i]) : err);
        }
        TAP_OK(worst < 1e-6, "%zu values: max relative error %.2e (< 1e-6)", n, worst);
        free(g), free(up), free(want);
    }
    return TAP_DONE();
}
