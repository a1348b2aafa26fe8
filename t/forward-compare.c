/* forward-compare - compare teacher-forced logits of two runtimes, position by position (test code,
 * independent of ogakit: libc and libm only; t/forward.bats compiles it).
 *
 *   forward-compare --vocab V [--kl-max X] [--gap G] [--chunk 64] [--chunks 12] ORACLE.f32 OURS.f32 [...]
 *
 * Each file holds raw little-endian float32 rows [positions][V]; pairs are concatenated in order.
 * Per position, in double: KL(oracle || ours) of the softmax distributions, and whether ours has the
 * oracle's top-1 id where the oracle's top-1/top-2 gap exceeds G. Prints one JSON line: positions,
 * mean and max KL, the largest mean KL over the first `chunks` chunks of `chunk` positions, top-1
 * counts. Exit 1 when --kl-max is given and a chunk mean reaches it, there are fewer than `chunks`
 * chunks, or a checked top-1 differs; 2 on usage or unreadable files. */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const float *map(const char *path, size_t *n)
{
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st)) {
        fprintf(stderr, "forward-compare: %s: cannot open\n", path);
        exit(2);
    }
    *n = (size_t)st.st_size / 4;
    void *p = st.st_size ? mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    close(fd);
    if (p == MAP_FAILED) {
        fprintf(stderr, "forward-compare: %s: cannot map\n", path);
        exit(2);
    }
    return p;
}

/* log-sum-exp of x[0..V): m + log(s); each exp(x[j] - m) is kept in e[j] (the caller's softmax) */
static double lse(const float *x, long V, double *e, double *sum)
{
    double m = x[0], s = 0;
    for (long j = 1; j < V; j++)
        m = x[j] > m ? x[j] : m;
    for (long j = 0; j < V; j++)
        s += e[j] = exp((double)x[j] - m);
    *sum = s;
    return m + log(s);
}

int main(int argc, char **argv)
{
    long V = 0, chunk = 64, chunks = 12;
    double klmax = -1, gapmin = 1e-2;
    int i = 1;
    for (; i < argc && argv[i][0] == '-' && argv[i][1] == '-'; i += 2) {
        if (i + 1 >= argc)
            return fprintf(stderr, "forward-compare: %s needs a value\n", argv[i]), 2;
        if (!strcmp(argv[i], "--vocab"))
            V = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--kl-max"))
            klmax = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--gap"))
            gapmin = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--chunk"))
            chunk = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--chunks"))
            chunks = atol(argv[i + 1]);
        else
            return fprintf(stderr, "forward-compare: unknown option %s\n", argv[i]), 2;
    }
    if (V <= 1 || chunk < 1 || (argc - i) < 2 || (argc - i) % 2)
        return fprintf(stderr, "usage: forward-compare --vocab V [--kl-max X] ORACLE OURS [...]\n"), 2;
    size_t cap = 1024, n = 0;
    double *kl = malloc(cap * sizeof *kl), maxkl = 0, sum = 0;
    long checked = 0, mism = 0;
    char first[512] = "";
    double *ex = malloc((size_t)V * sizeof *ex), *eu = malloc((size_t)V * sizeof *eu);
    if (!kl || !ex || !eu)
        return fprintf(stderr, "forward-compare: out of memory for a vocabulary of %ld\n", V), 2;
    for (; i < argc; i += 2) {
        size_t no, nu;
        const float *o = map(argv[i], &no), *u = map(argv[i + 1], &nu);
        if (no != nu || no % (size_t)V) {
            fprintf(stderr, "forward-compare: %s (%zu floats) and %s (%zu floats) are not the same [n][%ld]\n",
                    argv[i], no, argv[i + 1], nu, V);
            return 1;
        }
        for (size_t r = 0; r < no / (size_t)V; r++) {
            const float *x = o + r * V, *y = u + r * V;
            double sx, su, lo = lse(x, V, ex, &sx), lu = lse(y, V, eu, &su), k = 0;
            long t1 = 0, t2 = -1, uy = 0;
            for (long j = 0; j < V; j++) {
                double p = ex[j] / sx; /* exp(x[j] - lo) */
                k += p * (((double)x[j] - lo) - ((double)y[j] - lu));
                if (x[j] > x[t1])
                    t2 = t1, t1 = j;
                else if (j != t1 && (t2 < 0 || x[j] > x[t2]))
                    t2 = j;
                if (y[j] > y[uy])
                    uy = j;
            }
            if (k < 0)
                k = 0; /* rounding: KL is non-negative */
            if (n == cap)
                kl = realloc(kl, (cap *= 2) * sizeof *kl);
            kl[n++] = k;
            sum += k;
            maxkl = k > maxkl ? k : maxkl;
            if (t2 >= 0 && (double)x[t1] - x[t2] > gapmin) {
                checked++;
                if (uy != t1 && mism++ == 0)
                    snprintf(first, sizeof first,
                             ",\"first_mismatch\":{\"file\":\"%s\",\"position\":%zu,\"oracle\":%ld,\"ours\":%ld,"
                             "\"gap\":%.6g}",
                             argv[i + 1], r, t1, uy, (double)x[t1] - x[t2]);
            }
        }
    }
    long nc = (long)n / chunk < chunks ? (long)n / chunk : chunks;
    double cmax = 0;
    for (long c = 0; c < nc; c++) {
        double s = 0;
        for (long r = 0; r < chunk; r++)
            s += kl[c * chunk + r];
        cmax = s / chunk > cmax ? s / chunk : cmax;
    }
    int fail = klmax >= 0 && (nc < chunks || cmax >= klmax || mism);
    printf("{\"positions\":%zu,\"mean_kl\":%.6g,\"max_kl\":%.6g,\"chunks\":%ld,\"chunk_mean_kl_max\":%.6g,"
           "\"top1_checked\":%ld,\"top1_mismatched\":%ld%s",
           n, n ? sum / n : 0, maxkl, nc, cmax, checked, mism, first);
    if (klmax >= 0)
        printf(",\"kl_bound\":%.6g", klmax);
    printf(",\"pass\":%s}\n", fail ? "false" : "true");
    free(kl);
    free(ex);
    free(eu);
    return fail;
}
