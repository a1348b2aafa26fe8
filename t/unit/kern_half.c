/* The half operation of every row of the ISA table this CPU runs (fp32 -> fp16 for the KV cache: nearest,
 * ties to even, beyond ±65504 clamped, NaN as sign | 0x7e00) against a rounding oracle built here from the
 * table of every finite half: ties between neighbours, values just off them, subnormal results, the clamp,
 * infinities, NaNs with payloads, -0, and lengths that are not multiples of 8 or 16. Rows this CPU lacks are
 * skipped by name. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kern/kern.h"
#include "tap.h"

static double half_value(unsigned h) /* h < 0x7c00: a finite non-negative half */
{
    unsigned e = h >> 10, m = h & 0x3ff;
    return e ? ldexp(1024 + m, (int)e - 25) : ldexp(m, -24);
}

/* the expected half of f: nearest of the 0x7bff finite magnitudes, ties to the even encoding */
static uint16_t oracle(float f, const double *tab)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)(x >> 16 & 0x8000);
    if (isnan(f))
        return sign | 0x7e00;
    double a = fabs((double)f);
    if (a >= 65504.0)
        return sign | 0x7bff;
    unsigned lo = 0, hi = 0x7bff; /* tab[lo] <= a < tab[hi] */
    while (hi - lo > 1) {
        unsigned mid = (lo + hi) / 2;
        if (tab[mid] <= a)
            lo = mid;
        else
            hi = mid;
    }
    double dl = a - tab[lo], dh = tab[hi] - a;
    unsigned h = dl < dh ? lo : dh < dl ? hi : (lo & 1 ? hi : lo);
    return sign | (uint16_t)h;
}

static float bits_f(uint32_t x)
{
    float f;
    memcpy(&f, &x, 4);
    return f;
}

int main(void)
{
    double *tab = malloc(0x7c00 * sizeof *tab);
    for (unsigned h = 0; h < 0x7c00; h++)
        tab[h] = half_value(h);
    /* the inputs: every tie and its two neighbours in fp32, then random values over the range */
    size_t n = 0, cap = 0x7c00 * 6 + 40000;
    float *in = malloc(cap * sizeof *in);
    for (unsigned h = 0; h + 1 < 0x7c00; h++) {
        float mid = (float)((tab[h] + tab[h + 1]) / 2); /* exact in fp32 */
        uint32_t b;
        memcpy(&b, &mid, 4);
        float v[3] = {mid, bits_f(b - 1), bits_f(b + 1)};
        for (int k = 0; k < 3; k++)
            in[n++] = v[k], in[n++] = -v[k];
    }
    static const uint32_t special[] = {0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00000,
                                       0x7f800001, 0x7fbfffff, 0xff812345, 0x477fe000, 0x477fefff, 0x477ff000,
                                       0x47800000, 0xc77ff000, 0x33000000, 0x33000001, 0xb3000000, 0x00000001};
    for (size_t k = 0; k < sizeof special / sizeof *special; k++)
        in[n++] = bits_f(special[k]);
    unsigned s = 7;
    while (n < cap) {
        s = s * 1103515245u + 12345u;
        unsigned r = s;
        s = s * 1103515245u + 12345u;
        /* exponents 2^-30 .. 2^17, either sign */
        in[n++] = (float)ldexp((double)(r >> 8 & 0xFFFFFF) / 16777216.0 + 0.5, (int)(s >> 16) % 48 - 30) *
                  (s & 1 ? -1.0f : 1.0f);
    }
    uint16_t *want = malloc(n * sizeof *want), *got = malloc((n + 1) * sizeof *got);
    for (size_t i = 0; i < n; i++)
        want[i] = oracle(in[i], tab);
    static const size_t lens[] = {1, 7, 8, 9, 15, 17, 64, 100};
    for (int isa = 0; isa < KERN_ISA_COUNT; isa++) {
        const kern_isa *row = kern_isa_row(isa);
        if (!kern_isa_supported(isa)) {
            printf("ok %d - # skip row %s: not supported on this CPU\n", ++tap_n, row->name);
            continue;
        }
        size_t bad = 0, first = n;
        uint16_t first_got = 0;
        /* the whole array, then pieces of awkward lengths at odd offsets (a sentinel after each) */
        row->half(got, in, n);
        for (size_t i = 0; i < n; i++)
            if (got[i] != want[i] && bad++ == 0)
                first = i, first_got = got[i];
        for (size_t a = 0, off = 3; a < sizeof lens / sizeof *lens; a++, off += 101) {
            got[lens[a]] = 0xABCD;
            row->half(got, in + off, lens[a]);
            for (size_t i = 0; i < lens[a]; i++)
                bad += got[i] != want[off + i];
            bad += got[lens[a]] != 0xABCD;
        }
        TAP_OK(bad == 0, "%s: %zu fp32 values to fp16 as the rounding oracle has them (%zu wrong)", row->name, n, bad);
        if (first < n)
            printf("#   first at %zu: %a -> %#x, not %#x\n", first, (double)in[first], (unsigned)first_got,
                   (unsigned)want[first]);
    }
    free(tab), free(in), free(want), free(got);
    return TAP_DONE();
}
