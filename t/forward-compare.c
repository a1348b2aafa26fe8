/* forward-compare - compare teacher-forced logits of two runtimes, position by position (test code,
 * independent of ogakit: libc and libm only; t/forward.bats compiles it).
 *
 *   forward-compare --vocab V [--kl-max X] [--gap G] [--chunk 64] [--chunks 12] ORACLE.f32 OURS.f32 [...]
 *
 * Each file holds raw little-endian float32 rows [positions][V]; pairs are concatenated in order. OURS may
 * be a pipe (a shell's <(...)): its rows are read as they come, so the runtime under test need not write
 * a file the size of the oracle's; it must end where ORACLE does.
 * Per position, in double: KL(oracle || ours) of the softmax distributions, and whether ours has the
 * oracle's top-1 id where the oracle's top-1/top-2 gap exceeds G. Prints one JSON line: positions,
 * mean and max KL, the largest mean KL over the first `chunks` chunks of `chunk` positions, top-1
 * counts, positions whose KL is not finite (a NaN or infinity in either file). Exit 1 when a KL is not
 * finite, or --kl-max is given and a chunk mean reaches it, there are fewer than `chunks` chunks, or a
 * checked top-1 differs; 2 on usage or unreadable files. */
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

/* OURS when it is not a regular file: rows read one at a time from fd into row */
typedef struct {
    int fd;
    float *row;
} stream;

static stream *open_stream(const char *path, long V)
{
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st)) {
        fprintf(stderr, "forward-compare: %s: cannot open\n", path);
        exit(2);
    }
    if (S_ISREG(st.st_mode)) {
        close(fd);
        return NULL;
    }
    stream *s = malloc(sizeof *s);
    if (!s || !(s->row = malloc((size_t)V * sizeof *s->row))) {
        fprintf(stderr, "forward-compare: out of memory for a vocabulary of %ld\n", V);
        exit(2);
    }
    s->fd = fd;
    return s;
}

/* bytes read into buf (< n only at the end of the stream) */
static size_t read_full(int fd, void *buf, size_t n, const char *path)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, (char *)buf + got, n - got);
        if (r == 0)
            break;
        if (r < 0) {
            fprintf(stderr, "forward-compare: %s: read failed\n", path);
            exit(2);
        }
        got += (size_t)r;
    }
    return got;
}

/* e^x for x <= 0 in double (test code's own: x = n ln 2 + r, |r| <= ln2 / 2, a degree-13 Taylor
 * polynomial in r, relative error < 1e-15; x < -708 is 0, far below any softmax entry that counts).
 * Branch-free, so the loops below vectorise (#pragma omp simd); libm's exp was most of a comparison. */
static inline double exp_neg(double x)
{
    x = x < -708.0 ? -708.0 : x;
    const double shift = 0x1.8p52;
    double t = x * 0x1.71547652b82fep0 + shift, n = t - shift;
    double r = x - n * 0x1.62e42feep-1 - n * 0x1.a39ef35793c76p-33; /* ln 2 split: n * hi is exact */
    double p = 1.0 / 6227020800.0;
    p = p * r + 1.0 / 479001600.0;
    p = p * r + 1.0 / 39916800.0;
    p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    long long bits;
    memcpy(&bits, &t, 8); /* the low bits of t hold n (two's complement) */
    bits = (long long)((unsigned long long)(bits + 1023) << 52);
    double scale;
    memcpy(&scale, &bits, 8);
    return x <= -708.0 ? 0.0 : p * scale;
}

/* the largest of x[0..V) and the first index holding it */
static float top(const float *x, long V, long *at)
{
    float m = x[0];
#pragma omp simd reduction(max : m)
    for (long j = 1; j < V; j++)
        m = x[j] > m ? x[j] : m;
    long i = 0;
    while (i < V - 1 && x[i] != m)
        i++;
    *at = i;
    return m;
}

/* log-sum-exp of x[0..V) whose largest entry is m */
static double lse(const float *x, long V, float m)
{
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (long j = 0; j < V; j++)
        s += exp_neg((double)x[j] - m);
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
    long checked = 0, mism = 0, nonfinite = 0;
    char first[512] = "";
    if (!kl)
        return fprintf(stderr, "forward-compare: out of memory for a vocabulary of %ld\n", V), 2;
    for (; i < argc; i += 2) {
        size_t no, nu;
        stream *st = open_stream(argv[i + 1], V);
        const float *o = map(argv[i], &no), *u = NULL;
        if (st)
            nu = no; /* checked as the rows come */
        else
            u = map(argv[i + 1], &nu);
        if (no != nu || no % (size_t)V) {
            fprintf(stderr, "forward-compare: %s (%zu floats) and %s (%zu floats) are not the same [n][%ld]\n",
                    argv[i], no, argv[i + 1], nu, V);
            return 1;
        }
        for (size_t r = 0; r < no / (size_t)V; r++) {
            const float *x = o + r * V, *y;
            if (st) {
                size_t got = read_full(st->fd, st->row, (size_t)V * sizeof *st->row, argv[i + 1]);
                if (got != (size_t)V * sizeof *st->row) {
                    fprintf(stderr, "forward-compare: %s ends at %zu rows and %zu bytes; %s has %zu rows of %ld\n",
                            argv[i + 1], r, got, argv[i], no / (size_t)V, V);
                    return 1;
                }
                y = st->row;
            } else {
                y = u + r * V;
            }
            long t1, uy;
            float mx = top(x, V, &t1), my = top(y, V, &uy), x2 = -INFINITY;
            double lo = lse(x, V, mx), lu = lse(y, V, my), k = 0;
            /* KL = sum_j p_j ((x_j - lo) - (y_j - lu)), p_j = exp(x_j - lo) */
#pragma omp simd reduction(+ : k)
            for (long j = 0; j < V; j++)
                k += exp_neg((double)x[j] - lo) * (((double)x[j] - lo) - ((double)y[j] - lu));
#pragma omp simd reduction(max : x2)
            for (long j = 0; j < V; j++)
                x2 = j != t1 && x[j] > x2 ? x[j] : x2; /* the runner-up */
            if (!isfinite(k) || !isfinite(lo)) {
                nonfinite++; /* a NaN or infinity in either file: always a failure */
                k = 0;
            }
            if (k < 0)
                k = 0; /* rounding: KL is non-negative */
            if (n == cap)
                kl = realloc(kl, (cap *= 2) * sizeof *kl);
            kl[n++] = k;
            sum += k;
            maxkl = k > maxkl ? k : maxkl;
            if ((double)mx - x2 > gapmin) {
                checked++;
                if (uy != t1 && mism++ == 0)
                    snprintf(first, sizeof first,
                             ",\"first_mismatch\":{\"file\":\"%s\",\"position\":%zu,\"oracle\":%ld,\"ours\":%ld,"
                             "\"gap\":%.6g}",
                             argv[i + 1], r, t1, uy, (double)mx - x2);
            }
        }
        if (st) {
            char extra;
            if (read_full(st->fd, &extra, 1, argv[i + 1])) {
                fprintf(stderr, "forward-compare: %s goes on past the %zu rows of %s\n", argv[i + 1],
                        no / (size_t)V, argv[i]);
                return 1;
            }
            close(st->fd);
            free(st->row);
            free(st);
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
    int fail = nonfinite || (klmax >= 0 && (nc < chunks || cmax >= klmax || mism));
    printf("{\"positions\":%zu,\"mean_kl\":%.6g,\"max_kl\":%.6g,\"chunks\":%ld,\"chunk_mean_kl_max\":%.6g,"
           "\"top1_checked\":%ld,\"top1_mismatched\":%ld,\"nonfinite\":%ld%s",
           n, n ? sum / n : 0, maxkl, nc, cmax, checked, mism, nonfinite, first);
    if (klmax >= 0)
        printf(",\"kl_bound\":%.6g", klmax);
    printf(",\"pass\":%s}\n", fail ? "false" : "true");
    free(kl);
    return fail;
}
