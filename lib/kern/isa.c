/* The ISA table: one static const row of per-ISA operations per instruction set, the CPU's features
 * (cpuid) and the choice of the row (OGAKIT_KERNEL or the widest supported), made once. This is the
 * only file of ogakit that reads cpuid or OGAKIT_KERNEL; every consumer (kern.c's matmul and probe,
 * lib/model's attention and SwiGLU, the dequantiser q4nx-verify uses, npu-gemm's listing) takes its
 * functions and facts from here.
 *
 * Adding an ISA: its functions in one new file (like kern_amx.c, flags in the Makefile), its feature
 * bits below, one row in `rows` (operations it does not speed up point to an existing row's), and its
 * id in enum kern_isa_id. */
#include "kern_int.h"

#include <cpuid.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AVX2_NEEDS (KERN_CPU_AVX2 | KERN_CPU_FMA | KERN_CPU_F16C | KERN_CPU_BMI2) /* F16C: the fp16 cache and scales */
#define AVX512_NEEDS                                                                                                   \
    (AVX2_NEEDS | KERN_CPU_AVX512F | KERN_CPU_AVX512BW | KERN_CPU_AVX512VL | KERN_CPU_AVX512DQ | KERN_CPU_AVX512VNNI)
/* AMX: the tile unit with int8 products, its state enabled by the OS (XCR0) and granted to this process;
 * VBMI and GFNI because kern_amx.c is compiled with them (every CPU with AMX has both) */
#define AMX_NEEDS (AVX512_NEEDS | KERN_CPU_AVX512VBMI | KERN_CPU_GFNI | KERN_CPU_AMXTILE | KERN_CPU_AMXINT8)

static const kern_isa rows[KERN_ISA_COUNT] = {
    [KERN_ISA_REF] = {
        .name = "ref",
        .needs = 0,
        .gemv = NULL, /* the ref matmul is kern_ref_rows */
        .gemm = NULL,
        .quant_i8 = kern_quant_rows_ref,
        .rm_band = kern_rm_band_ref,
        .dequant = kern_dequant_rows_ref,
        .attend = kern_attend_ref,
        .attend_h = kern_attend_h_ref,
        .attend_ext = kern_attend_ext,
        .swiglu = kern_swiglu_ref,
        .geglu = kern_geglu_ref,
        .half = kern_half_ref,
        .read = kern_read_ref,
        .vmax = kern_vmax_ref,
        .mark_ge = kern_mark_ge_ref,
        .expsum = kern_expsum_ref,
    },
    [KERN_ISA_AVX2] = {
        .name = "avx2",
        .needs = AVX2_NEEDS,
        .gemv = kern_b8_avx2,
        .gemm = kern_b8_avx2,
        .quant_i8 = kern_quant_rows_avx2,
        .gemm_i16 = kern_b8_i16_avx2,
        .quant_i16 = kern_quant_rows_i16_avx2,
        .rm_band = kern_rm_band_ref,
        .dequant = kern_dequant_rows_avx2,
        .attend = kern_attend_avx2,
        .attend_h = kern_attend_h_avx2,
        .attend_ht = kern_attend_ht_avx2,
        .attend_ext = kern_attend_ext_avx2,
        .swiglu = kern_swiglu_avx2,
        .geglu = kern_geglu_avx2,
        .half = kern_half_avx2,
        .read = kern_read_avx2,
        .vmax = kern_vmax_avx2,
        .mark_ge = kern_mark_ge_avx2,
        .expsum = kern_expsum_avx2,
        .q8 = kern_q8_avx2,
    },
    [KERN_ISA_AVX512] = {
        .name = "avx512",
        .needs = AVX512_NEEDS,
        .gemv = kern_gemv_avx512,
        .gemm = kern_gemm_avx512,
        .gemm_grain = 2,
        .quant_i8 = kern_quant_rows_avx512,
        .gemm_i16 = kern_b8_i16_avx512,
        .quant_i16 = kern_quant_rows_i16_avx512,
        .rm_band = kern_rm_band_vbmi,
        .rm_band_needs = KERN_CPU_AVX512VBMI,
        .dequant = kern_dequant_rows_avx2,
        .attend = kern_attend_avx512,
        .attend_h = kern_attend_h_avx512,
        .attend_ht = kern_attend_ht_avx512,
        .attend_ext = kern_attend_ext_avx512,
        .swiglu = kern_swiglu_avx512,
        .geglu = kern_geglu_avx512,
        .half = kern_half_avx2,
        .read = kern_read_avx512,
        .vmax = kern_vmax_avx512,
        .mark_ge = kern_mark_ge_avx512,
        .expsum = kern_expsum_avx512,
        .q8 = kern_q8_avx512,
    },
    [KERN_ISA_AMX] = { /* the avx512 row with AMX int8 tiles for wide int8 launches (prompt chunks) */
        .name = "amx",
        .needs = AMX_NEEDS,
        .gemv = kern_gemv_avx512,
        .gemm = kern_gemm_amx,
        .quant_i8 = kern_quant_rows_avx512,
        .gemm_i16 = kern_b8_i16_amx,
        .quant_i16 = kern_quant_rows_i16_avx512,
        .rm_band = kern_rm_band_vbmi,
        .dequant = kern_dequant_rows_avx2,
        .attend = kern_attend_avx512,
        .attend_h = kern_attend_h_avx512,
        .attend_ht = kern_attend_ht_avx512,
        .attend_ext = kern_attend_ext_avx512,
        .swiglu = kern_swiglu_avx512,
        .geglu = kern_geglu_avx512,
        .half = kern_half_avx2,
        .read = kern_read_avx512,
        .vmax = kern_vmax_avx512,
        .mark_ge = kern_mark_ge_avx512,
        .expsum = kern_expsum_avx512,
        .q8 = kern_q8_avx512,
    },
};

/* ---- the CPU ---- */
static const char *const feature_names[] = {"avx2",     "fma",      "f16c",     "bmi2",       "avx512f",    "avx512bw",
                                            "avx512vl", "avx512dq", "avx512vnni", "avx512bf16", "avx512vbmi",
                                            "amx_tile", "amx_int8", "gfni",     "amx_bf16"};

static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;
static uint32_t cpu; /* KERN_CPU_* bits */
static kern_isa resolved[KERN_ISA_COUNT]; /* rows as this CPU runs them (rm_band without its extras: ref) */
static char cpu_model[256];

/* Linux hands out the AMX tile data state per process, on request (arch_prctl ARCH_REQ_XCOMP_PERM for
 * XFEATURE_XTILEDATA = 18; public uAPI numbers); without the grant the first tile instruction faults.
 * 1 if the process has it afterwards. */
static int amx_grant(void)
{
    enum { ARCH_GET_XCOMP_PERM = 0x1022, ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
    unsigned long perm = 0;
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0)
        return 0;
    if (syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &perm) != 0)
        return 0;
    return !!(perm & (1ul << XFEATURE_XTILEDATA));
}

static void cpu_read(void)
{
    /* cpuid (public bit positions of Intel's SDM / AMD's APM), and XGETBV for what the OS saves: the
     * YMM state for AVX/AVX2, and the opmask and ZMM states for AVX-512. Read directly rather than by
     * __builtin_cpu_supports, whose feature names differ between compilers (clang 14 has no "f16c"). */
    uint32_t f = 0, a, b, c1, d, b7 = 0, c7 = 0, d7 = 0, a71 = 0, c;
    if (__get_cpuid(1, &a, &b, &c1, &d)) {
        uint64_t xcr0 = 0;
        if (c1 & (1u << 27)) { /* OSXSAVE: XGETBV is there */
            uint32_t lo, hi;
            __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
            xcr0 = ((uint64_t)hi << 32) | lo;
        }
        int ymm = (c1 & (1u << 28)) && (xcr0 & 0x6) == 0x6, zmm = ymm && (xcr0 & 0xe0) == 0xe0;
        if (__get_cpuid_max(0, NULL) >= 7) {
            __cpuid_count(7, 0, a, b7, c7, d7);
            if (a >= 1) /* the highest subleaf of leaf 7 */
                __cpuid_count(7, 1, a71, b, c, d);
        }
        if (ymm) {
            f |= (b7 & (1u << 5)) ? KERN_CPU_AVX2 : 0;
            f |= (c1 & (1u << 12)) ? KERN_CPU_FMA : 0;
            f |= (c1 & (1u << 29)) ? KERN_CPU_F16C : 0;
        }
        f |= (b7 & (1u << 8)) ? KERN_CPU_BMI2 : 0;
        if (zmm) {
            f |= (b7 & (1u << 16)) ? KERN_CPU_AVX512F : 0;
            f |= (b7 & (1u << 17)) ? KERN_CPU_AVX512DQ : 0;
            f |= (b7 & (1u << 30)) ? KERN_CPU_AVX512BW : 0;
            f |= (b7 & (1u << 31)) ? KERN_CPU_AVX512VL : 0;
            f |= (c7 & (1u << 1)) ? KERN_CPU_AVX512VBMI : 0;
            f |= (c7 & (1u << 11)) ? KERN_CPU_AVX512VNNI : 0;
            f |= (c7 & (1u << 8)) ? KERN_CPU_GFNI : 0; /* GFNI; its 512-bit forms with AVX-512F */
            f |= (a71 & (1u << 5)) ? KERN_CPU_AVX512BF16 : 0;
        }
        /* AMX-TILE (7.0 EDX bit 24) and AMX-INT8 (bit 25), XCR0's tile config and data bits (17, 18) */
        if ((d7 & (1u << 24)) && (d7 & (1u << 25)) && (xcr0 & (3ull << 17)) == (3ull << 17) && amx_grant())
            f |= KERN_CPU_AMXTILE | KERN_CPU_AMXINT8 | ((d7 & (1u << 22)) ? KERN_CPU_AMXBF16 : 0); /* bit 22 */
    }
    cpu = f;
    for (int i = 0; i < KERN_ISA_COUNT; i++) {
        resolved[i] = rows[i];
        if ((rows[i].rm_band_needs & cpu) != rows[i].rm_band_needs)
            resolved[i].rm_band = kern_rm_band_ref;
    }
    FILE *fp = fopen("/proc/cpuinfo", "r");
    if (fp) {
        char line[512];
        while (fgets(line, sizeof line, fp))
            if (!strncmp(line, "model name", 10)) {
                char *p = strchr(line, ':');
                if (p) {
                    p += 1 + (p[1] == ' ');
                    p[strcspn(p, "\n")] = 0;
                    snprintf(cpu_model, sizeof cpu_model, "%s", p);
                }
                break;
            }
        fclose(fp);
    }
}

static void cpu_init(void) { pthread_once(&cpu_once, cpu_read); }

const char *kern_cpu_name(void)
{
    cpu_init();
    return cpu_model;
}

const char *kern_cpu_feature(int i, int *has)
{
    if (i < 0 || i >= (int)(sizeof feature_names / sizeof *feature_names))
        return NULL;
    cpu_init();
    if (has)
        *has = !!(cpu & (1u << i));
    return feature_names[i];
}

/* ---- the rows ---- */
int kern_isa_supported(int id)
{
    if (id < 0 || id >= KERN_ISA_COUNT)
        return 0;
    cpu_init();
    return (rows[id].needs & cpu) == rows[id].needs;
}

const kern_isa *kern_isa_row(int id)
{
    if (id < 0 || id >= KERN_ISA_COUNT)
        return NULL;
    cpu_init();
    return &resolved[id];
}

int kern_isa_find(const char *name)
{
    for (int i = 0; name && i < KERN_ISA_COUNT; i++)
        if (!strcmp(rows[i].name, name))
            return i;
    return -1;
}

/* ---- the choice, once ---- */
static pthread_once_t choice_once = PTHREAD_ONCE_INIT;
static int chosen = -1;           /* the row in use */
static char choice_error[256];    /* why OGAKIT_KERNEL was refused, "" if it was not */

static void choose(void)
{
    const char *env = getenv("OGAKIT_KERNEL");
    if (env && *env) {
        int id = kern_isa_find(env);
        if (id < 0)
            snprintf(choice_error, sizeof choice_error, "OGAKIT_KERNEL=%s: unknown kernel path (ref, avx2, avx512, amx)", env);
        else if (!kern_isa_supported(id))
            snprintf(choice_error, sizeof choice_error, "OGAKIT_KERNEL=%s: this CPU lacks the instructions it needs",
                     env);
        chosen = choice_error[0] ? KERN_ISA_REF : id;
        return;
    }
    chosen = KERN_ISA_REF;
    for (int i = KERN_ISA_COUNT - 1; i > KERN_ISA_REF; i--)
        if (kern_isa_supported(i)) {
            chosen = i;
            break;
        }
}

int kern_isa_init(ogk_error *e)
{
    pthread_once(&choice_once, choose);
    if (choice_error[0])
        return ogk_fail(e, "%s", choice_error);
    return 0;
}

const kern_isa *kern_isa_current(void)
{
    pthread_once(&choice_once, choose);
    return kern_isa_row(__atomic_load_n(&chosen, __ATOMIC_ACQUIRE));
}

int kern_isa_set(int id)
{
    if (!kern_isa_supported(id))
        return -1;
    pthread_once(&choice_once, choose);
    __atomic_store_n(&chosen, id, __ATOMIC_RELEASE);
    return 0;
}
