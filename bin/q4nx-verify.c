/* q4nx-verify — check a Q4NX container alone, against the OGA pack it came from, or against another
 * container of the same pack (man/man1/q4nx-verify.1).
 *
 * Thin: options, the report and the exit code. The oracle (the independent MatMulNBits decoder, the
 * second graph reading, statistics and controls) is lib/verify's. */
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "pack/pack.h"
#include "kern/kern.h"
#include "q4nx/q4nx.h"
#include "verify/verify.h"
#include "util/util.h"

static void usage(FILE *to)
{
    fputs("usage: q4nx-verify FILE.q4nx [--pack DIR [--all | --sample N]] [--against OTHER.q4nx]\n"
          "Checks a Q4NX container (structure, versions, every checksum) and prints a JSON report.\n"
          "  --pack DIR     dequantise every tensor from the container and from the OGA pack DIR\n"
          "                 (MatMulNBits formula) and require bit equality; runs the controls\n"
          "  --all          compare every row (default: --sample 64)\n"
          "  --sample N     compare N rows per tensor, spread evenly, first and last included\n"
          "  --against B    require that container B dequantises identically (rm vs b8)\n"
          "  -h, --help     this help;  -V, --version\n"
          "Exit: 0 all checks passed, 1 a check failed, 2 usage, 3 not a container / truncated / pack refused,\n"
          "      4 OGAKIT_KERNEL unknown or unsupported.\n",
          to);
}

static q4nx_file *open_or_die(const char *path)
{
    ogk_error e;
    int code;
    q4nx_file *f = q4nx_open_flags(path, Q4NX_OPEN_NOCRC, &e, &code); /* it reports every checksum itself */
    if (!f)
        ogk_die(code ? code : OGK_EXIT_INPUT, "%s", e.msg);
    return f;
}

int main(int argc, char **argv)
{
    ogk_prog_set(argv[0]);
    ogk_stdout_checked(OGK_EXIT_CHECK); /* its write-failure status (EXIT STATUS in the man page) */
    const char *pack_dir = NULL, *against = NULL;
    long sample = 64;
    int all = 0, sample_given = 0;
    static const struct option opts[] = {{"pack", required_argument, 0, 'p'}, {"all", no_argument, 0, 'a'},
                                         {"sample", required_argument, 0, 's'}, {"against", required_argument, 0, 'b'},
                                         {"help", no_argument, 0, 'h'},        {"version", no_argument, 0, 'V'},
                                         {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "hV", opts, NULL)) != -1) {
        switch (c) {
        case 'p': pack_dir = optarg; break;
        case 'a': all = 1; break;
        case 's': sample = ogk_parse_long("--sample", optarg, 1, 1L << 31), sample_given = 1; break;
        case 'b': against = optarg; break;
        case 'h': usage(stdout); return 0;
        case 'V': printf("q4nx-verify %s (container format %d, layout version %d)\n", OGAKIT_VERSION,
                         Q4NX_FORMAT_VERSION, Q4NX_LAYOUT_VERSION); return 0;
        default: usage(stderr); return OGK_EXIT_USAGE;
        }
    }
    if (optind + 1 != argc) {
        ogk_err(optind >= argc ? "no container given" : "one container at a time (use --against for a second)");
        usage(stderr);
        return OGK_EXIT_USAGE;
    }
    if (all && sample_given)
        ogk_die(OGK_EXIT_USAGE, "--all and --sample exclude each other");
    if ((all || sample_given) && !pack_dir)
        ogk_die(OGK_EXIT_USAGE, "--all / --sample need --pack DIR");
    if (all)
        sample = 0;
    ogk_error ke;
    if (kern_isa_init(&ke) < 0) /* a bad OGAKIT_KERNEL: the same refusal in every program */
        ogk_die(OGK_EXIT_INIT, "%s", ke.msg);
    const char *path = argv[optind];
    verify_begin();
    q4nx_file *f = open_or_die(path), *g = against ? open_or_die(against) : NULL;
    double t0 = ogk_now();
    uint64_t bytes = 0;
    json_t *report = json_object();
    json_t *summary = json_object();
    json_object_set_new(report, "file", ogk_json_str(path));
    json_object_set_new(report, "container", verify_container(path, f, &bytes));
    double dt = ogk_now() - t0;
    json_object_set_new(summary, "checksummed_bytes", json_integer((json_int_t)bytes));
    json_object_set_new(summary, "checksum_seconds", json_real(dt));
    if (pack_dir) {
        json_object_set_new(summary, "mode", all ? json_string("all") : json_sprintf("sample %ld", sample));
        ogk_error e;
        int code;
        json_t *pr = verify_pack(pack_dir, f, sample, summary, &e, &code);
        if (!pr)
            ogk_die(code, "%s", e.msg);
        json_object_set_new(report, "pack", pr);
    }
    if (g) {
        json_object_set_new(report, "against_container", verify_container(against, g, &bytes));
        json_object_set_new(report, "against", verify_against(f, g, against, summary));
    }
    const json_t *failures = verify_failures();
    size_t i;
    const json_t *fl;
    json_array_foreach(failures, i, fl)
        ogk_err("%s", json_string_value(fl));
    int ok = json_array_size(failures) == 0;
    json_object_set_new(summary, "failures", json_integer((json_int_t)json_array_size(failures)));
    json_object_set_new(summary, "ok", json_boolean(ok));
    json_object_set_new(report, "summary", summary);
    json_object_set_new(report, "failures", json_deep_copy(failures));
    json_object_set_new(report, "ok", json_boolean(ok));
    if (ogk_json_print(stdout, report))
        ogk_die(OGK_EXIT_CHECK, "cannot write the report to stdout");
    json_decref(report);
    q4nx_close(f);
    q4nx_close(g);
    verify_end();
    return ok ? OGK_EXIT_OK : OGK_EXIT_CHECK;
}
