/* vnni-pipes: what the avx512 int8 tiles' companion instructions cost beside VPDPBUSD on this CPU, one
 * thread, everything in registers or L1. A loop of 8 independent zmm VPDPBUSD is timed alone and with each
 * companion added (the tiles' group epilogue: convert, multiply, fused multiply-add, store; the chunk loop:
 * AND, shift, broadcast load, code load; software prefetch; a register move; a VPDPBUSD with an embedded
 * {1to16} broadcast operand, against 0.5 for one more plain VPDPBUSD at two a cycle), in cycles per loop from the clock a chain of
 * dependent IMULs (3 cycles each) gives. On Zen 4 (2026-12-03, bench/results/2026-12-03h-zen4.md) a zmm
 * store costs the VNNI pipes ~1.7 cycles and a multiply or FMA ~0.9, while converts, logic, shifts, loads
 * and prefetches ride free: why kern_avx512.c keeps the fp32 sums of wide launches in registers. Prints
 * JSON. Exit: 0 ok, 2 usage, 4 no avx512 row (the ISA table, lib/kern/isa.c, reads cpuid). Built against
 * kern.a and run by bench/vnni-pipes.sh. */
#include <stdio.h>
#include <stdlib.h>

#include "kern/kern.h"
#include "util/util.h"

static char scratch[1024] __attribute__((aligned(64)));

#define D8                                                                                                             \
    "vpdpbusd %%zmm30, %%zmm31, %%zmm0\n vpdpbusd %%zmm30, %%zmm31, %%zmm1\n vpdpbusd %%zmm30, %%zmm31, %%zmm2\n"      \
    "vpdpbusd %%zmm30, %%zmm31, %%zmm3\n vpdpbusd %%zmm30, %%zmm31, %%zmm4\n vpdpbusd %%zmm30, %%zmm31, %%zmm5\n"      \
    "vpdpbusd %%zmm30, %%zmm31, %%zmm6\n vpdpbusd %%zmm30, %%zmm31, %%zmm7\n"
#define X4(op) op "%%zmm8\n " op "%%zmm9\n " op "%%zmm10\n " op "%%zmm11\n"
#define CLOBBER                                                                                                        \
    "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "memory"
/* seconds for n loops of body (p: scratch) */
#define TIME(body)                                                                                                     \
    ({                                                                                                                 \
        double t0 = ogk_now();                                                                                         \
        for (long i = 0; i < n; i++)                                                                                   \
            __asm__ volatile(body ::"r"(scratch) : CLOBBER);                                                          \
        ogk_now() - t0;                                                                                                \
    })

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 20000000;
    if (argc > 2 || n < 1000) {
        fprintf(stderr, "usage: vnni-pipes [LOOPS >= 1000]\n");
        return 2;
    }
    if (!kern_isa_supported(KERN_ISA_AVX512)) {
        fprintf(stderr, "vnni-pipes: this CPU has no avx512 row (AVX-512 VNNI)\n");
        return 4;
    }
    double t = ogk_now();
    for (long i = 0; i < n; i++)
        __asm__ volatile("imul %%rax, %%rax\n imul %%rax, %%rax\n imul %%rax, %%rax\n imul %%rax, %%rax\n" ::: "rax");
    double hz = (double)n * 12 / (ogk_now() - t);
    struct {
        const char *name;
        double s;
    } r[] = {
        {"dpbusd8", TIME(D8)},
        {"cvtdq2ps", TIME(D8 X4("vcvtdq2ps %%zmm29, "))},
        {"mulps", TIME(D8 X4("vmulps %%zmm29, %%zmm28, "))},
        {"fmadd", TIME(D8 X4("vfmadd231ps %%zmm29, %%zmm28, "))},
        {"pandd", TIME(D8 X4("vpandd %%zmm29, %%zmm28, "))},
        {"psrlw", TIME(D8 X4("vpsrlw $4, %%zmm28, "))},
        {"broadcast_load", TIME(D8 X4("vpbroadcastd 4(%0), "))},
        {"load", TIME(D8 X4("vmovdqu64 64(%0), "))},
        {"prefetcht1", TIME(D8 "prefetcht1 (%0)\n prefetcht1 64(%0)\n prefetcht1 128(%0)\n prefetcht1 192(%0)\n")},
        {"move", TIME(D8 X4("vmovdqa32 %%zmm29, "))},
        {"dpbusd_bcst", TIME(D8 X4("vpdpbusd 4(%0)%{1to16%}, %%zmm31, "))},
        {"store", TIME(D8 "vmovups %%zmm12, 256(%0)\n vmovups %%zmm13, 320(%0)\n vmovups %%zmm14, 384(%0)\n"
                          "vmovups %%zmm15, 448(%0)\n")},
    };
    double base = r[0].s * hz / (double)n;
    printf("{\"loops\": %ld, \"ghz\": %.3f, \"dpbusd8_cycles\": %.2f, \"extra_cycles_per_op\": {", n, hz / 1e9, base);
    for (size_t i = 1; i < sizeof r / sizeof r[0]; i++)
        printf("%s\"%s\": %.2f", i > 1 ? ", " : "", r[i].name, (r[i].s * hz / (double)n - base) / 4);
    printf("}}\n");
    return 0;
}
