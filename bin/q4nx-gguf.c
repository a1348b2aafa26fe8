/* q4nx-gguf — Q4NX container -> GGUF for llama.cpp, without re-quantising; and the exactness check
 * of such a GGUF against its container (man/man1/q4nx-gguf.1). */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "q4nx/q4nx.h"
#include "tok/tok.h"
#include "util/util.h"

static void usage(FILE *to)
{
    fputs("usage: q4nx-gguf [--widen | --allow-lossy] [--name NAME] [-o FILE] [-v] MODEL.q4nx\n"
          "       q4nx-gguf --check MODEL.q4nx MODEL.gguf\n"
          "Writes a GGUF (llama.cpp) holding exactly the container's weights: each MatMulNBits group of 32*j\n"
          "becomes j Q4_0 blocks (symmetric) or Q4_1 blocks (d, m = -s*z) with the same scale;\n"
          "8-bit weights become Q8_0 blocks (d = s, v = q - z).\n"
          "  -o, --output FILE  write FILE atomically (default: stdout, refused on a terminal)\n"
          "  --widen            exact even where Q4_0/Q4_1 cannot be: such tensors as Q8_0 (fp16 scales) or F32\n"
          "  --allow-lossy      round scales/minimums to fp16 instead of refusing; reports each tensor's error\n"
          "  --name NAME        general.name (default: the source pack's directory name)\n"
          "  --check            compare every value of MODEL.gguf with MODEL.q4nx; JSON report on stdout\n"
          "  -v, --verbose      the conversion report (JSON) on stderr\n"
          "  -h, --help         this help;  -V, --version  print the version\n"
          "Exit: 0 ok, 1 a check failed / writing failed, 2 usage, 3 input refused (not exact, malformed).\n",
          to);
}

int main(int argc, char **argv)
{
    ogk_prog_set(argv[0]);
    ogk_stdout_checked(OGK_EXIT_CHECK); /* its write-failure status (EXIT STATUS in the man page) */
    const char *out_path = NULL;
    int check = 0, verbose = 0;
    gguf_convert_opts o = {GGUF_EXACT, NULL};
    enum { OPT_WIDEN = 256, OPT_LOSSY, OPT_NAME, OPT_CHECK };
    static const struct option opts[] = {{"output", required_argument, 0, 'o'}, {"widen", no_argument, 0, OPT_WIDEN},
                                         {"allow-lossy", no_argument, 0, OPT_LOSSY},
                                         {"name", required_argument, 0, OPT_NAME},
                                         {"check", no_argument, 0, OPT_CHECK},  {"verbose", no_argument, 0, 'v'},
                                         {"help", no_argument, 0, 'h'},         {"version", no_argument, 0, 'V'},
                                         {0, 0, 0, 0}};
    int c, policies = 0;
    while ((c = getopt_long(argc, argv, "o:vhV", opts, NULL)) != -1) {
        switch (c) {
        case 'o':
            if (!*optarg)
                ogk_die(OGK_EXIT_USAGE, "-o: an empty output path (use - for standard output)");
            out_path = optarg;
            break;
        case OPT_WIDEN: o.policy = GGUF_WIDEN, policies |= 1; break;
        case OPT_LOSSY: o.policy = GGUF_LOSSY, policies |= 2; break;
        case OPT_NAME:
            if (!*optarg)
                ogk_die(OGK_EXIT_USAGE, "--name: an empty name (general.name is the model's name)");
            if (tok_utf8_check(optarg, strlen(optarg)) != strlen(optarg)) /* a GGUF string is UTF-8 */
                ogk_die(OGK_EXIT_USAGE, "--name: not valid UTF-8 (byte offset %zu)", tok_utf8_check(optarg, strlen(optarg)));
            o.name = optarg;
            break;
        case OPT_CHECK: check = 1; break;
        case 'v': verbose = 1; break;
        case 'h': usage(stdout); return 0;
        case 'V': printf("q4nx-gguf %s (GGUF version %d)\n", OGAKIT_VERSION, GGUF_VERSION); return 0;
        default: usage(stderr); return OGK_EXIT_USAGE;
        }
    }
    if (policies == 3)
        ogk_die(OGK_EXIT_USAGE, "--widen and --allow-lossy exclude each other");
    ogk_error e;
    int code;
    if (check) {
        if (argc - optind != 2 || out_path || policies) {
            ogk_err("--check takes MODEL.q4nx MODEL.gguf and no conversion options");
            usage(stderr);
            return OGK_EXIT_USAGE;
        }
        q4nx_file *f = q4nx_open(argv[optind], &e, &code);
        if (!f)
            ogk_die(code, "%s", e.msg);
        if (q4nx_verify_weights(f, argv[optind], &e)) /* a proof against corrupt weights proves nothing */
            ogk_die(OGK_EXIT_INPUT, "%s", e.msg);
        gguf_file *g = gguf_open(argv[optind + 1], &e);
        if (!g)
            ogk_die(errno == ENOMEM ? OGK_EXIT_INIT : OGK_EXIT_INPUT, "%s", e.msg);
        json_t *rep = NULL;
        int rc = gguf_check_q4nx(f, g, &rep, &e, &code);
        if (rc < 0)
            ogk_die(code, "%s: %s", argv[optind + 1], e.msg);
        if (ogk_json_print(stdout, rep))
            ogk_die(OGK_EXIT_CHECK, "writing the report failed");
        const json_t *mk = json_array_get(json_object_get(json_object_get(rep, "metadata"), "mismatched"), 0);
        if (rc && mk)
            ogk_err("%s: metadata %s differs from what the container converts to (%zu keys differ)", argv[optind + 1],
                    json_string_value(json_object_get(mk, "key")),
                    json_array_size(json_object_get(json_object_get(rep, "metadata"), "mismatched")));
        else if (rc)
            ogk_err("%s: %s", argv[optind + 1],
                    json_is_true(json_object_get(rep, "vacuous")) ? "a control was not caught: the check is vacuous"
                                                                  : "values differ from the container's");
        json_decref(rep);
        gguf_close(g);
        q4nx_close(f);
        return rc ? OGK_EXIT_CHECK : OGK_EXIT_OK;
    }
    if (argc - optind != 1) {
        ogk_err(argc == optind ? "no container given" : "one container, please");
        usage(stderr);
        return OGK_EXIT_USAGE;
    }
    const char *in = argv[optind];
    if (!out_path || !strcmp(out_path, "-"))
        ogk_refuse_tty_stdout("a GGUF");
    struct stat si, so;
    if (out_path && !stat(in, &si) && !stat(out_path, &so) && si.st_dev == so.st_dev && si.st_ino == so.st_ino)
        ogk_die(OGK_EXIT_USAGE, "-o %s is the container itself (name another file)", out_path);
    q4nx_file *f = q4nx_open(in, &e, &code);
    if (!f)
        ogk_die(code, "%s", e.msg);
    if (q4nx_verify_weights(f, in, &e)) /* every weight's checksum before a byte of it goes on */
        ogk_die(OGK_EXIT_INPUT, "%s", e.msg);
    ogk_out out;
    if (ogk_out_open(&out, out_path, &e))
        ogk_die(out_path ? OGK_EXIT_CHECK : OGK_EXIT_USAGE, "%s", e.msg);
    json_t *rep = NULL;
    if (gguf_from_q4nx(f, &o, out.fd, &rep, &e, &code)) {
        ogk_out_abort(&out);
        ogk_die(code, "%s: %s", in, e.msg);
    }
    if (ogk_out_commit(&out, &e))
        ogk_die(OGK_EXIT_CHECK, "%s", e.msg);
    /* what was not plain Q4: widened tensors and lossy errors are said, always */
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(rep, "tensors"), i, t)
    {
        const char *ty = json_string_value(json_object_get(t, "type")), *name = json_string_value(json_object_get(t, "name"));
        json_t *err = json_object_get(t, "max_abs_error");
        if (err)
            ogk_err("lossy: %s %s: largest error %.3g (row %d, column %d)", name, ty, json_real_value(err),
                    (int)json_integer_value(json_object_get(json_object_get(t, "at"), "row")),
                    (int)json_integer_value(json_object_get(json_object_get(t, "at"), "col")));
        else if (json_is_true(json_object_get(t, "widened")))
            ogk_err("widened: %s as %s (exact; %s cannot hold its %s)", name, ty,
                    json_object_get(t, "source_bits") ? "Q8_0" : "Q4_0/Q4_1",
                    json_object_get(t, "odd_groups")    ? "groups, not a multiple of 32"
                    : json_object_get(t, "source_bits") ? "scales or zero points"
                                                        : "scales");
    }
    if (verbose)
        ogk_json_print(stderr, rep);
    json_decref(rep);
    q4nx_close(f);
    return 0;
}
