/* npu-gemm: one quantised GEMM Y = X·Wᵀ on a backend (cpu | npu), checked against the scalar
 * reference and timed; a sweep over a model's role shapes with the dispatch law fitted; the list of
 * compute devices with the measured DRAM read bandwidth. See man/man1/npu-gemm.1. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kern/kern.h"
#include "npu/npu.h"
#include "q4nx/q4nx.h"
#include "util/util.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: npu-gemm --shape N,K [--bits 4|8] [--block B] [--asym] [--scale-dtype f32|f16|bf16] [--layout b8|rm]\n"
            "                [OPTIONS]\n"
            "       npu-gemm -m MODEL.q4nx --tensor NAME [OPTIONS]\n"
            "       npu-gemm --sweep -m MODEL.q4nx [OPTIONS]\n"
            "       npu-gemm --model-pass (-m MODEL.q4nx | --shapes NxK*COUNT,...) [OPTIONS]\n"
            "       npu-gemm --list-devices [--bw-mb MB]\n"
            "       npu-gemm --help | --version\n"
            "Multiplies M activation rows by a 4-bit or 8-bit Q4NX weight tensor, checks the result against\n"
            "the scalar reference and prints timings as JSON on stdout.\n"
            "  --bits 4|8          synthetic weights' code width (default 4; 8-bit ones are multiplied in\n"
            "                      MatMulNBits source order, so --layout does not apply, and have no i16 mode)\n"
            "  --rows M            activation rows (default 1: decode)\n"
            "  --mode f32|i8|i16   fp32 activations (exact), int8-quantised activations, or 16-bit ones (two\n"
            "                      int8 planes: npu-forward's classifier in i8 mode) (default f32)\n"
            "  --device cpu|npu    backend (default cpu; npu needs an amdxdna device and kernel binaries)\n"
            "  -t, --threads N     worker threads (default: online CPUs)\n"
            "  --kernel ref|avx2|avx512|amx   force a CPU kernel path (also OGAKIT_KERNEL)\n"
            "  --reps R            timed launches (default: as many as fit in --time seconds, >= 5)\n"
            "  --time S            time budget per measurement for automatic --reps (default 0.3)\n"
            "  --check-rows R      output columns checked against the reference (default 64; 0: none)\n"
            "  --seed S            seed for synthetic weights and activations (default 1)\n"
            "  --dump-source DIR   (--shape) also write the synthetic weights in MatMulNBits order (meta.json\n"
            "                      gives N, K, bits, block, scale_dtype, zero_points):\n"
            "                      DIR/B.u8, DIR/scales.bin, DIR/zero_points.u8, DIR/meta.json, and the\n"
            "                      activations and result as raw float32: DIR/X.f32 (M x K), DIR/Y.f32 (M x N)\n"
            "  --bw-mb MB          bandwidth probe buffer for --list-devices (default 512)\n"
            "  --probe-mb MB       --model-pass: alternate each pass with a DRAM read probe over MB\n"
            "                      (0: off, the default) and report both and their ratio; with -m the\n"
            "                      probe reads the container's own memory (the weights' pages) instead\n"
            "  --no-mmap, --mmap   -m: read the container into 2 MiB huge pages / map it (default: the copy\n"
            "                      where the kernel has transparent huge pages and memory to spare)\n"
            "  -h, --help          this text\n"
            "Exit: 0 ok, 1 result outside the reference bound, 2 usage, 3 bad model/tensor, 4 device init failed.\n");
}

/* ---- options ---- */
static struct {
    const char *model, *tensor, *shapes, *dump;
    long n, k, block, bits, rows, threads, reps, check_rows, seed, bw_mb, probe_mb;
    int asym, sdt, layout, mode, device_npu, sweep, pass, list, kernel, weights_in;
    double time_budget;
} o = {.block = 32, .bits = 4, .rows = 1, .check_rows = 64, .seed = 1, .bw_mb = 512, .sdt = OGK_F32, .layout = OGK_B8,
       .mode = KERN_F32, .kernel = -1, .time_budget = 0.3};

static uint64_t rng; /* synthetic data, seeded by --seed */

static void synth_make(kern_synth *s, uint32_t n, uint32_t k, int keep_src)
{
    ogk_error e;
    if (kern_synth_make(s, &rng, n, k, (uint32_t)o.block, (int)o.bits, o.sdt, o.asym, o.layout, keep_src, &e) < 0)
        ogk_die(OGK_EXIT_INIT, "%s", e.msg);
}

/* ---- --shape / --tensor output ---- */
static void write_file(const char *dir, const char *name, const void *p, size_t n)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    ogk_out out;
    ogk_error e;
    /* an output that cannot be written: exit 1, as standard output's (not 3: no input was wrong) */
    if (ogk_out_open(&out, path, &e) < 0)
        ogk_die(OGK_EXIT_CHECK, "%s", e.msg);
    if (ogk_write_all(out.fd, p, n) < 0) {
        ogk_out_abort(&out);
        ogk_die(OGK_EXIT_CHECK, "%s: write failed: %s", path, strerror(errno));
    }
    if (ogk_out_commit(&out, &e) < 0)
        ogk_die(OGK_EXIT_CHECK, "%s", e.msg);
}

static void dump_source(const kern_synth *s, const char *dir)
{
    const ogk_qtensor *t = &s->t;
    if (mkdir(dir, 0777) < 0 && errno != EEXIST)
        ogk_die(OGK_EXIT_CHECK, "--dump-source %s: %s", dir, strerror(errno));
    const int q8 = t->dtype == OGK_Q8; /* one code and one zero point a byte; 4 bits: two of each */
    write_file(dir, "B.u8", s->src_codes, (size_t)t->n * t->k_blocks * t->block / (q8 ? 1 : 2));
    write_file(dir, "scales.bin", s->src_scales, (size_t)t->n * t->k_blocks * ogk_dtype_size(t->scale_dtype));
    if (t->has_zp)
        write_file(dir, "zero_points.u8", s->src_zp, (size_t)t->n * (q8 ? t->k_blocks : (t->k_blocks + 1) / 2));
    json_t *m = json_pack("{s:i, s:i, s:i, s:i, s:i, s:s, s:b, s:I}", "N", (int)t->n, "K", (int)t->k, "bits",
                          ogk_dtype_bits(t->dtype), "block",
                          (int)t->block, "k_blocks", (int)t->k_blocks, "scale_dtype", ogk_dtype_name(t->scale_dtype),
                          "zero_points", t->has_zp, "seed", (json_int_t)o.seed);
    char *txt = json_dumps(m, JSON_INDENT(2));
    write_file(dir, "meta.json", txt, strlen(txt));
    free(txt);
    json_decref(m);
}

static kern_bench_opts bench_opts(void)
{
    return (kern_bench_opts){.mode = o.mode, .reps = o.reps, .time_budget = o.time_budget,
                             .check_rows = o.check_rows, .probe_mb = o.probe_mb};
}

/* one tensor, M rows: the harness's record; with --dump-source also X and Y as raw float32 */
static json_t *run_one(kern_pool *pool, const ogk_qtensor *W, int M, int *all_ok)
{
    float *X = kern_synth_x(&rng, M, W->k), *Y = malloc((size_t)M * W->n * sizeof *Y);
    if (!X || !Y)
        ogk_die(OGK_EXIT_INIT, "out of memory for %d x %u activations and %u outputs", M, W->k, W->n);
    kern_bench_opts bo = bench_opts();
    ogk_error e;
    int code;
    json_t *j = kern_bench_one(pool, &bo, W, X, M, Y, all_ok, &e, &code);
    if (!j)
        ogk_die(code, "%s", e.msg);
    if (o.dump) {
        write_file(o.dump, "X.f32", X, (size_t)M * W->k * sizeof *X);
        write_file(o.dump, "Y.f32", Y, (size_t)M * W->n * sizeof *Y);
    }
    free(X), free(Y);
    return j;
}

/* ---- --list-devices ---- */
static int list_devices(kern_pool *pool)
{
    json_t *out = json_object(), *devs = json_array();
    json_array_append_new(devs, kern_bench_cpu(pool, o.bw_mb));
    npu_device *nd;
    char *skipped = NULL;
    ogk_error e;
    int n = npu_scan(&nd, &skipped, &e);
    if (n < 0)
        ogk_err("%s", e.msg);
    for (int i = 0; i < n; i++)
        json_array_append_new(devs, npu_device_json(&nd[i]));
    json_object_set_new(out, "devices", devs);
    json_object_set_new(out, "accel_dir", json_string(npu_accel_dir()));
    json_t *sk = json_array();
    for (char *s = skipped, *nl; s && *s; s = nl + 1) {
        nl = strchr(s, '\n');
        if (!nl)
            break;
        json_array_append_new(sk, json_stringn(s, (size_t)(nl - s)));
    }
    json_object_set_new(out, "skipped", sk);
    free(skipped);
    if (n > 0)
        free(nd);
    int rc = ogk_json_print(stdout, out) < 0 ? OGK_EXIT_CHECK : 0;
    json_decref(out);
    return rc;
}

/* ---- --sweep ---- */
static const char *role_class(const char *role)
{
    if (!role)
        return "";
    if (!strncmp(role, "layers.", 7)) {
        const char *p = strchr(role + 7, '.');
        return p ? p + 1 : role;
    }
    return role;
}

/* a container's tensors --sweep and --model-pass multiply: the quantised ones the model multiplies (not the
 * embedding, which it only reads), the 8-bit ones in the modes they have (f32 and i8) */
static int gemm_tensor(const ogk_qtensor *t)
{
    return ogk_dtype_quantised(t->dtype) && strcmp(role_class(t->role), "embed") &&
           !(t->dtype == OGK_Q8 && o.mode == KERN_I16);
}

static int sweep(kern_pool *pool, q4nx_file *f, int *all_ok)
{
    typedef struct {
        const ogk_qtensor *t;
    } pick;
    size_t nt = q4nx_tensor_count(f), np = 0;
    pick *picks = calloc(nt + 1, sizeof *picks);
    for (size_t i = 0; i < nt; i++) {
        const ogk_qtensor *t = q4nx_tensor_at(f, i);
        if (!gemm_tensor(t))
            continue;
        int dup = 0;
        for (size_t j = 0; j < np && !dup; j++)
            dup = !strcmp(role_class(picks[j].t->role), role_class(t->role)) && picks[j].t->n == t->n &&
                  picks[j].t->k == t->k && picks[j].t->dtype == t->dtype;
        if (!dup)
            picks[np++].t = t;
    }
    if (np == 0) {
        free(picks);
        ogk_die(OGK_EXIT_INPUT, "%s: no quantised tensors to sweep", o.model);
    }
    static const int Ms[] = {1, 16, 128};
    json_t *launches = json_array();
    size_t nl = np * 3;
    double *xs = malloc(nl * sizeof *xs), *ys = malloc(nl * sizeof *ys);
    size_t k = 0;
    for (size_t i = 0; i < np; i++)
        for (int mi = 0; mi < 3; mi++) {
            json_t *j = run_one(pool, picks[i].t, Ms[mi], all_ok);
            json_object_set_new(j, "class", json_string(role_class(picks[i].t->role)));
            xs[k] = json_integer_value(json_object_get(j, "weight_bytes")) / 1e6;
            ys[k] = json_real_value(json_object_get(j, "ms"));
            json_array_append_new(launches, j);
            k++;
        }
    /* least squares t = floor + MB / rate */
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (size_t i = 0; i < nl; i++)
        sx += xs[i], sy += ys[i], sxx += xs[i] * xs[i], sxy += xs[i] * ys[i];
    double den = nl * sxx - sx * sx;
    double b = den != 0 ? (nl * sxy - sx * sy) / den : 0, a = (sy - b * sx) / nl;
    double ss_res = 0, ss_tot = 0, my = sy / nl;
    for (size_t i = 0; i < nl; i++) {
        double fit = a + b * xs[i];
        json_t *j = json_array_get(launches, i);
        json_object_set_new(j, "fit_ms", json_real(fit));
        json_object_set_new(j, "residual_ms", json_real(ys[i] - fit));
        ss_res += (ys[i] - fit) * (ys[i] - fit);
        ss_tot += (ys[i] - my) * (ys[i] - my);
    }
    json_t *out = json_object();
    json_object_set_new(out, "model", ogk_json_str(o.model));
    json_object_set_new(out, "launches", launches);
    json_t *fit = json_object();
    json_object_set_new(fit, "law", json_string("ms = floor_ms + MB / rate_MB_per_ms"));
    json_object_set_new(fit, "floor_ms", json_real(a));
    json_object_set_new(fit, "rate_GBps", b > 0 ? json_real(1.0 / b) : json_null());
    json_object_set_new(fit, "r2", json_real(ss_tot > 0 ? 1 - ss_res / ss_tot : 1));
    json_object_set_new(fit, "launches", json_integer((json_int_t)nl));
    json_object_set_new(out, "fit", fit);
    int rc = ogk_json_print(stdout, out) < 0 ? OGK_EXIT_CHECK : 0;
    json_decref(out);
    free(xs), free(ys), free(picks);
    return rc;
}

/* ---- --model-pass: every tensor once per launch, M = --rows ---- */
static const uint8_t *probe_mem; /* -m: the container's bytes, read by the probe */
static size_t probe_len;
static int model_pass(kern_pool *pool, const ogk_qtensor *const *Ws, size_t nw, int *all_ok)
{
    kern_bench_opts bo = bench_opts();
    bo.probe_mem = probe_mem, bo.probe_len = probe_len;
    ogk_error e;
    int code;
    json_t *j = kern_bench_pass(pool, &bo, Ws, nw, (int)o.rows, &rng, all_ok, &e, &code);
    if (!j)
        ogk_die(code, "%s", e.msg);
    int rc = ogk_json_print(stdout, j) < 0 ? OGK_EXIT_CHECK : 0;
    json_decref(j);
    return rc;
}

static int parse_scale_dtype(const char *s)
{
    if (!strcmp(s, "f32"))
        return OGK_F32;
    if (!strcmp(s, "f16"))
        return OGK_F16;
    if (!strcmp(s, "bf16"))
        return OGK_BF16;
    ogk_die(OGK_EXIT_USAGE, "--scale-dtype %s: expected f32, f16 or bf16", s);
}

int main(int argc, char **argv)
{
    ogk_prog_set(argv[0]);
    ogk_stdout_checked(OGK_EXIT_CHECK); /* its write-failure status (EXIT STATUS in the man page) */
    enum { O_SHAPE = 256, O_BITS, O_BLOCK, O_ASYM, O_SDT, O_LAYOUT, O_TENSOR, O_ROWS, O_MODE, O_DEVICE, O_KERNEL, O_REPS,
           O_TIME, O_CHECK, O_SEED, O_SWEEP, O_PASS, O_SHAPES, O_LIST, O_BW, O_DUMP, O_PROBE, O_NO_MMAP, O_MMAP };
    static const struct option lo[] = {
        {"shape", 1, 0, O_SHAPE},   {"bits", 1, 0, O_BITS},     {"block", 1, 0, O_BLOCK},   {"asym", 0, 0, O_ASYM},
        {"scale-dtype", 1, 0, O_SDT}, {"layout", 1, 0, O_LAYOUT}, {"model", 1, 0, 'm'},
        {"tensor", 1, 0, O_TENSOR}, {"rows", 1, 0, O_ROWS},     {"mode", 1, 0, O_MODE},
        {"device", 1, 0, O_DEVICE}, {"threads", 1, 0, 't'},     {"kernel", 1, 0, O_KERNEL},
        {"reps", 1, 0, O_REPS},     {"time", 1, 0, O_TIME},     {"check-rows", 1, 0, O_CHECK},
        {"seed", 1, 0, O_SEED},     {"sweep", 0, 0, O_SWEEP},   {"model-pass", 0, 0, O_PASS},
        {"shapes", 1, 0, O_SHAPES}, {"list-devices", 0, 0, O_LIST}, {"bw-mb", 1, 0, O_BW},
        {"dump-source", 1, 0, O_DUMP}, {"probe-mb", 1, 0, O_PROBE}, {"no-mmap", 0, 0, O_NO_MMAP}, {"mmap", 0, 0, O_MMAP}, {"help", 0, 0, 'h'}, {"version", 0, 0, 'V'}, {0, 0, 0, 0}};
    const char *shape = NULL;
    int c, synth_opt = 0, map_opt = 0, bw_opt = 0, probe_opt = 0, layout_opt = 0; /* given: checked below */
    while ((c = getopt_long(argc, argv, "m:t:hV", lo, NULL)) != -1) {
        synth_opt |= c == O_BITS || c == O_BLOCK || c == O_ASYM || c == O_SDT || c == O_LAYOUT;
        layout_opt |= c == O_LAYOUT;
        map_opt |= c == O_NO_MMAP || c == O_MMAP;
        bw_opt |= c == O_BW, probe_opt |= c == O_PROBE;
        switch (c) {
        case O_SHAPE: shape = optarg; break;
        case O_BITS:
            if ((o.bits = ogk_parse_long("--bits", optarg, 4, 8)) != 4 && o.bits != 8)
                ogk_die(OGK_EXIT_USAGE, "--bits %s: expected 4 or 8", optarg);
            break;
        case O_BLOCK: o.block = ogk_parse_long("--block", optarg, 16, 1 << 16); break;
        case O_ASYM: o.asym = 1; break;
        case O_SDT: o.sdt = parse_scale_dtype(optarg); break;
        case O_LAYOUT:
            if ((o.layout = ogk_layout_parse(optarg)) < 0)
                ogk_die(OGK_EXIT_USAGE, "--layout %s: expected b8 or rm", optarg);
            break;
        case 'm': o.model = optarg; break;
        case O_TENSOR: o.tensor = optarg; break;
        case O_ROWS: o.rows = ogk_parse_long("--rows", optarg, 1, 1 << 20); break;
        case O_MODE:
            /* i16: the classifier's 16-bit activations (npu-forward's head in --mode i8) */
            if ((o.mode = !strcmp(optarg, "i16") ? KERN_I16 : kern_mode_parse(optarg)) < 0)
                ogk_die(OGK_EXIT_USAGE, "--mode: '%s' is not f32, i8 or i16", optarg);
            break;
        case O_DEVICE:
            if (!strcmp(optarg, "npu"))
                o.device_npu = 1;
            else if (strcmp(optarg, "cpu"))
                ogk_die(OGK_EXIT_USAGE, "--device %s: expected cpu or npu", optarg);
            break;
        case 't': o.threads = ogk_parse_long("--threads", optarg, 1, 1024); break;
        case O_KERNEL:
            if ((o.kernel = kern_isa_find(optarg)) < 0)
                ogk_die(OGK_EXIT_USAGE, "--kernel %s: expected ref, avx2, avx512 or amx (a row of the ISA table)", optarg);
            break;
        case O_REPS: o.reps = ogk_parse_long("--reps", optarg, 1, 100000000); break;
        case O_TIME: o.time_budget = ogk_parse_double("--time", optarg); break;
        case O_CHECK: o.check_rows = ogk_parse_long("--check-rows", optarg, 0, 1L << 30); break;
        case O_SEED: o.seed = ogk_parse_long("--seed", optarg, 0, 1L << 62); break;
        case O_SWEEP: o.sweep = 1; break;
        case O_PASS: o.pass = 1; break;
        case O_SHAPES: o.shapes = optarg; break;
        case O_LIST: o.list = 1; break;
        case O_BW: o.bw_mb = ogk_parse_long("--bw-mb", optarg, 1, 1 << 20); break;
        case O_DUMP: o.dump = optarg; break;
        case O_PROBE: o.probe_mb = ogk_parse_long("--probe-mb", optarg, 0, 1 << 20); break;
        case O_NO_MMAP: o.weights_in = Q4NX_IN_LOAD; break;
        case O_MMAP: o.weights_in = Q4NX_IN_MAP; break;
        case 'h': usage(stdout); return 0;
        case 'V': printf("npu-gemm %s\n", OGAKIT_VERSION); return 0;
        default: usage(stderr); return OGK_EXIT_USAGE;
        }
    }
    if (optind < argc)
        ogk_die(OGK_EXIT_USAGE, "unexpected argument '%s' (see --help)", argv[optind]);
    int what = !!shape + (o.model && !o.sweep && !o.pass) + o.sweep + o.pass + o.list;
    if (what != 1) {
        usage(stderr);
        ogk_die(OGK_EXIT_USAGE, "give exactly one of --shape, -m with --tensor, --sweep, --model-pass, --list-devices");
    }
    if (o.model && !o.sweep && !o.pass && !o.tensor)
        ogk_die(OGK_EXIT_USAGE, "-m needs --tensor NAME (or --sweep / --model-pass)");
    if (o.sweep && !o.model)
        ogk_die(OGK_EXIT_USAGE, "--sweep needs -m MODEL.q4nx");
    if (o.pass && o.model && o.shapes)
        ogk_die(OGK_EXIT_USAGE, "--model-pass takes -m MODEL.q4nx or --shapes SPEC, not both");
    if (o.pass && !o.model && !o.shapes)
        ogk_die(OGK_EXIT_USAGE, "--model-pass needs -m MODEL.q4nx or --shapes SPEC");
    /* an option of another mode was taken and ignored: named instead */
    if (o.tensor && (!o.model || o.sweep || o.pass))
        ogk_die(OGK_EXIT_USAGE, "--tensor goes with -m alone (one tensor of a container)");
    if (o.shapes && !o.pass)
        ogk_die(OGK_EXIT_USAGE, "--shapes goes with --model-pass");
    if (synth_opt && !shape && !o.shapes)
        ogk_die(OGK_EXIT_USAGE, "--bits, --block, --asym, --scale-dtype and --layout describe synthetic weights (--shape, "
                                "--model-pass --shapes); a container's tensors are as they were packed");
    if (map_opt && !o.model)
        ogk_die(OGK_EXIT_USAGE, "--mmap and --no-mmap say how a container (-m) is read");
    if (bw_opt && !o.list)
        ogk_die(OGK_EXIT_USAGE, "--bw-mb goes with --list-devices");
    if (probe_opt && !o.pass)
        ogk_die(OGK_EXIT_USAGE, "--probe-mb goes with --model-pass");
    if (o.dump && !shape)
        ogk_die(OGK_EXIT_USAGE, "--dump-source works with --shape");
    if (o.bits == 8 && layout_opt)
        ogk_die(OGK_EXIT_USAGE, "--layout goes with 4-bit weights: 8-bit ones are multiplied in source order");
    if (o.bits == 8 && o.mode == KERN_I16)
        ogk_die(OGK_EXIT_USAGE, "--mode i16 goes with 4-bit weights: 8-bit ones have the f32 and i8 modes");
    if (o.time_budget <= 0)
        ogk_die(OGK_EXIT_USAGE, "--time: must be > 0");
    rng = kern_synth_rng(o.seed);

    ogk_error e;
    if (kern_isa_init(&e) < 0) /* a bad OGAKIT_KERNEL: the same refusal in every program */
        ogk_die(OGK_EXIT_INIT, "%s", e.msg);
    if (o.kernel >= 0 && kern_isa_set(o.kernel) < 0)
        ogk_die(OGK_EXIT_INIT, "--kernel %s: this CPU lacks the instructions it needs", kern_isa_row(o.kernel)->name);

    if (o.device_npu && !o.list) {
        npu_ctx *ctx = npu_open(NULL, &e);
        if (!ctx)
            ogk_die(OGK_EXIT_INIT, "%s", e.msg);
        npu_close(ctx);
        ogk_die(OGK_EXIT_INIT, "npu backend: GEMM launch not implemented");
    }

    kern_pool *pool = kern_pool_new((int)o.threads);
    if (!pool)
        ogk_die(OGK_EXIT_INIT, "cannot start %ld worker threads", o.threads);
    int rc = 0, all_ok = 1;
    if (o.list) {
        rc = list_devices(pool);
    } else if (shape) {
        char *end;
        long n = strtol(shape, &end, 10), k = *end == ',' ? strtol(end + 1, &end, 10) : 0;
        if (*end || n <= 0 || k <= 0 || n > (1L << 24) || k > (1L << 24))
            ogk_die(OGK_EXIT_USAGE, "--shape %s: expected N,K (positive integers)", shape);
        if ((o.block & (o.block - 1)) || o.block > 4096)
            ogk_die(OGK_EXIT_USAGE, "--block %ld: must be a power of two from 16 to 4096", o.block);
        const char *why = o.bits == 8 ? NULL : ogk_q4_layout_refusal(o.layout, (uint32_t)n, (uint32_t)k, (uint32_t)o.block);
        if (why)
            ogk_die(OGK_EXIT_USAGE, "--shape %s --block %ld --layout %s: %s", shape, o.block,
                    ogk_layout_name(o.layout), why);
        kern_synth s;
        synth_make(&s, (uint32_t)n, (uint32_t)k, o.dump != NULL);
        if (o.dump)
            dump_source(&s, o.dump);
        json_t *j = run_one(pool, &s.t, (int)o.rows, &all_ok);
        json_object_set_new(j, "seed", json_integer(o.seed));
        rc = ogk_json_print(stdout, j) < 0 ? OGK_EXIT_CHECK : 0;
        json_decref(j);
        kern_synth_free(&s);
    } else if (o.pass && o.shapes) {
        /* SPEC: NxK*COUNT,... (each tensor its own memory, so nothing stays in cache between launches) */
        kern_synth *ss = NULL;
        size_t ns = 0;
        char *spec = strdup(o.shapes), *save = NULL;
        for (char *tok = strtok_r(spec, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            char *end;
            long n = strtol(tok, &end, 10), k = *end == 'x' ? strtol(end + 1, &end, 10) : 0, cnt = 1;
            if (*end == '*')
                cnt = strtol(end + 1, &end, 10);
            if (*end || n <= 0 || k <= 0 || cnt <= 0 || cnt > 100000 || n > (1L << 24) || k > (1L << 24))
                ogk_die(OGK_EXIT_USAGE, "--shapes: '%s': expected NxK or NxK*COUNT (N, K up to 2^24; COUNT up to 100000)",
                        tok);
            for (long i = 0; i < cnt; i++) {
                ss = realloc(ss, (ns + 1) * sizeof *ss);
                synth_make(&ss[ns++], (uint32_t)n, (uint32_t)k, 0);
            }
        }
        free(spec);
        if (!ns)
            ogk_die(OGK_EXIT_USAGE, "--shapes '%s': no shape", o.shapes);
        const ogk_qtensor **Ws = malloc(ns * sizeof *Ws);
        for (size_t i = 0; i < ns; i++)
            Ws[i] = &ss[i].t;
        rc = model_pass(pool, Ws, ns, &all_ok);
        for (size_t i = 0; i < ns; i++)
            kern_synth_free(&ss[i]);
        free(ss), free(Ws);
    } else {
        int code = OGK_EXIT_INPUT;
        q4nx_file *f = q4nx_open_flags(o.model, q4nx_in_flags(o.weights_in), &e, &code);
        if (!f)
            ogk_die(code, "%s", e.msg);
        probe_mem = q4nx_bytes(f, &probe_len);
        if (o.sweep) {
            rc = sweep(pool, f, &all_ok);
        } else if (o.pass) {
            size_t nt = q4nx_tensor_count(f), nw = 0;
            const ogk_qtensor **Ws = malloc((nt + 1) * sizeof *Ws);
            for (size_t i = 0; i < nt; i++) {
                const ogk_qtensor *t = q4nx_tensor_at(f, i);
                if (gemm_tensor(t))
                    Ws[nw++] = t;
            }
            if (!nw)
                ogk_die(OGK_EXIT_INPUT, "%s: no quantised tensors", o.model);
            rc = model_pass(pool, Ws, nw, &all_ok);
            free(Ws);
        } else {
            const ogk_qtensor *t = q4nx_find(f, o.tensor);
            for (size_t i = 0; !t && i < q4nx_tensor_count(f); i++) {
                const ogk_qtensor *u = q4nx_tensor_at(f, i);
                if (u->name && !strcmp(u->name, o.tensor))
                    t = u;
            }
            if (!t)
                ogk_die(OGK_EXIT_INPUT, "%s: no tensor with role or name '%s'", o.model, o.tensor);
            if (!ogk_dtype_quantised(t->dtype))
                ogk_die(OGK_EXIT_INPUT, "%s: tensor %s is %s, not quantised (4 or 8 bits)", o.model, o.tensor,
                        ogk_dtype_name(t->dtype));
            json_t *j = run_one(pool, t, (int)o.rows, &all_ok);
            rc = ogk_json_print(stdout, j) < 0 ? OGK_EXIT_CHECK : 0;
            json_decref(j);
        }
        q4nx_close(f);
    }
    kern_pool_free(pool);
    if (!rc && !all_ok) {
        ogk_err("result outside the reference bound (see err_vs_bound)");
        rc = OGK_EXIT_CHECK;
    }
    return rc;
}
