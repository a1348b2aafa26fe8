/* oga-info PACK: what an OGA pack holds and whether ogakit can import it, as JSON (oga-info(1)). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pack/pack.h"
#include "util/util.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: oga-info [-q] [--tensors] PACK\n"
               "Print a JSON report on the ONNX Runtime GenAI pack directory PACK: flavour, family, dims,\n"
               "token ids, files, quantisation, tensors by role and every refusal.\n"
               "  -t, --tensors   add one entry per tensor\n"
               "  -q, --quiet     no refusal lines on stderr\n"
               "  -h, --help      this text\n"
               "  -V, --version   print the version\n"
               "Exit: 0 importable, 3 refusals (report still printed) or not a pack, 2 usage.\n");
}

int main(int argc, char **argv)
{
    ogk_prog_set(argv[0]);
    ogk_stdout_checked(OGK_EXIT_CHECK); /* its write-failure status (EXIT STATUS in the man page) */
    static const struct option opts[] = {{"tensors", no_argument, 0, 't'},
                                         {"quiet", no_argument, 0, 'q'},
                                         {"help", no_argument, 0, 'h'},
                                         {"version", no_argument, 0, 'V'},
                                         {0, 0, 0, 0}};
    int tensors = 0, quiet = 0, c;
    while ((c = getopt_long(argc, argv, "tqhV", opts, NULL)) != -1) {
        switch (c) {
        case 't': tensors = 1; break;
        case 'q': quiet = 1; break;
        case 'h': usage(stdout); return OGK_EXIT_OK;
        case 'V': printf("oga-info %s\n", OGAKIT_VERSION); return OGK_EXIT_OK;
        default: usage(stderr); return OGK_EXIT_USAGE;
        }
    }
    if (optind != argc - 1) {
        ogk_err(optind == argc ? "missing PACK" : "one PACK at a time");
        usage(stderr);
        return OGK_EXIT_USAGE;
    }
    ogk_error e;
    pack *p = pack_open(argv[optind], &e);
    if (!p)
        ogk_die(errno == ENOMEM ? OGK_EXIT_INIT : OGK_EXIT_INPUT, "%s", e.msg);
    json_t *j = pack_info_json(p, tensors);
    if (!j)
        ogk_die(OGK_EXIT_INIT, "out of memory building the report");
    int wrc = ogk_json_print(stdout, j);
    /* the runtime's context is what the RoPE caches cover (lib/mdesc): say so where the config claims more */
    json_int_t ctx = json_integer_value(json_object_get(j, "context_length")),
               rows = json_integer_value(json_object_get(json_object_get(j, "rope"), "cache_rows"));
    if (!quiet && rows > 0 && ctx > rows)
        ogk_err("note: context_length %" JSON_INTEGER_FORMAT " is configured, but the RoPE caches cover %" JSON_INTEGER_FORMAT
                " positions: npu-forward runs a context of %" JSON_INTEGER_FORMAT,
                ctx, rows, rows);
    json_decref(j);
    size_t nr = pack_refusal_count(p);
    if (!quiet)
        for (size_t i = 0; i < nr; i++) {
            const pack_refusal *r = pack_refusal_at(p, i);
            char line[2048]; /* one line per refusal, whatever a name in it holds (a line feed: '?') */
            snprintf(line, sizeof line, "refused: %s: %s [%s]", r->what, r->reason, r->code);
            for (char *c = line; *c; c++)
                if (*c == '\n' || *c == '\r')
                    *c = '?';
            ogk_err("%s", line);
        }
    int rc = pack_exit_code(p); /* 4 when a file could not be read for want of memory: the pack was not judged */
    pack_close(p);
    if (wrc)
        ogk_die(OGK_EXIT_CHECK, "write failed");
    return rc;
}
