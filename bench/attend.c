/* bench/attend.c — the fp16 cache's attention (the ISA table's attend_ht, the current row) as a decode step,
 * verify pass or prompt chunk runs it: ROWS query rows after N positions, G query heads of HD per KV head,
 * two KV heads on two threads (one each, as the model splits them), 24 calls (a model's layers) over LAYERS
 * caches of their own (24: the caches come from DRAM as at long context; 1: from L2). Prints JSON: ms per pass over all layers, median of REPS.
 *   usage: attend ROWS N [REPS [G [HD [LAYERS]]]]   (defaults 5, 7, 64, 24) */
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kern/kern.h"

typedef struct {
    int rows, n, g, hd, layers;
    uint16_t **kt, **vc;
    float *q, *att;
    size_t as;
} head_job;

static void *run_head(void *arg)
{
    head_job *h = arg;
    const kern_isa *isa = kern_isa_current();
    float scale = 1.0f / sqrtf((float)h->hd);
    size_t qs = (size_t)h->g * h->hd;
    for (int l = 0; l < 24; l++) /* 24 calls (a model's layers) over LAYERS caches */
        isa->attend_ht(h->q, qs, h->rows, h->g, h->kt[l % h->layers], h->vc[l % h->layers], h->n + 1, h->hd, scale,
                       h->att, h->as);
    return NULL;
}

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 7) {
        fprintf(stderr, "usage: attend ROWS N [REPS [G [HD [LAYERS]]]]\n");
        return 2;
    }
    int rows = atoi(argv[1]), n = atoi(argv[2]), reps = argc > 3 ? atoi(argv[3]) : 5, g = argc > 4 ? atoi(argv[4]) : 7,
        hd = argc > 5 ? atoi(argv[5]) : 64, layers = argc > 6 ? atoi(argv[6]) : 24;
    if (rows < 1 || rows > 64 || n < 1 || n > 65536 || reps < 1 || g < 1 || g > 16 || !KERN_ATTEND_HD(hd) ||
        layers < 1 || layers > 256) {
        fprintf(stderr, "attend: ROWS 1..64, N 1..65536, REPS >= 1, G 1..16, HD 64|96|128, LAYERS 1..256\n");
        return 2;
    }
    const kern_isa *isa = kern_isa_current();
    if (!isa->attend_ht) {
        fprintf(stderr, "attend: the %s row has no attend_ht\n", isa->name);
        return 4;
    }
    size_t pos = ((size_t)n + rows + 15) / 16 * 16, cache = pos * hd;
    head_job h[2];
    unsigned seed = 1;
    for (int k = 0; k < 2; k++) {
        h[k] = (head_job){rows, n, g, hd, layers, calloc(layers, sizeof(uint16_t *)), calloc(layers, sizeof(uint16_t *)),
                          malloc(sizeof(float) * rows * g * hd), malloc(sizeof(float) * rows * g * pos), pos};
        for (int l = 0; l < layers; l++) {
            h[k].kt[l] = aligned_alloc(64, cache * 2), h[k].vc[l] = aligned_alloc(64, cache * 2);
            for (size_t i = 0; i < cache; i++) {
                seed = seed * 1103515245u + 12345u;
                /* fp16 values in [-1, 1): sign, exponent 0x3800..0x3bff */
                h[k].kt[l][i] = (uint16_t)(0x3800 | (seed >> 16 & 0x3ff) | (seed >> 12 & 0x8000));
                h[k].vc[l][i] = (uint16_t)(0x3800 | (seed >> 6 & 0x3ff) | (seed >> 2 & 0x8000));
            }
        }
    }
    double *ms = malloc(sizeof(double) * reps);
    for (int r = -1; r < reps; r++) { /* one warm-up */
        for (int k = 0; k < 2; k++)
            for (int i = 0; i < rows * g * hd; i++)
                h[k].q[i] = (float)((i * 37 % 101) - 50) / 25.0f;
        double t0 = now_ms();
        pthread_t th;
        pthread_create(&th, NULL, run_head, &h[1]);
        run_head(&h[0]);
        pthread_join(th, NULL);
        if (r >= 0)
            ms[r] = now_ms() - t0;
    }
    qsort(ms, reps, sizeof *ms, cmp);
    double chk = 0;
    for (int i = 0; i < rows * g * hd; i++)
        chk += h[0].q[i];
    json_t *j = json_pack("{s:s,s:i,s:i,s:i,s:i,s:i,s:i,s:f,s:f,s:f}", "kernel", isa->name, "rows", rows, "positions", n,
                          "g", g, "hd", hd, "layers", layers, "reps", reps, "ms_median", ms[reps / 2], "ms_min", ms[0],
                          "checksum", chk);
    json_dumpf(j, stdout, JSON_COMPACT);
    putchar('\n');
    json_decref(j);
    return 0;
}
