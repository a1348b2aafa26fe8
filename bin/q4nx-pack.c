/* q4nx-pack — OGAX stream on stdin -> Q4NX container (man/man1/q4nx-pack.1). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mdesc/mdesc.h"
#include "ogax/ogax.h"
#include "q4nx/q4nx.h"
#include "tok/tok.h"
#include "util/util.h"

static void usage(FILE *to)
{
    fputs("usage: q4nx-pack [-l rm|b8] [-o FILE] < STREAM.ogax\n"
          "Reads an OGAX stream (from oga-extract) on stdin and writes a Q4NX container.\n"
          "  -l, --layout rm|b8  weight layout of 4-bit tensors (default b8; 8-bit ones keep source order)\n"
          "  -o, --output FILE   write FILE atomically (default: stdout, refused on a terminal)\n"
          "  -v, --verbose       a summary line on stderr (bytes in/out, tensors, seconds, GB/s)\n"
          "  -h, --help          this help;  -V, --version  print the version\n"
          "Exit: 0 ok, 1 writing failed, 2 usage, 3 stream truncated/corrupt/refused, 4 out of memory.\n",
          to);
}

typedef struct {
    uint8_t *buf;
    size_t cap;
} buffer;

static uint8_t *grow(buffer *b, uint64_t n)
{
    if (n > b->cap) {
        free(b->buf);
        b->cap = n > 2 * b->cap ? n : 2 * b->cap;
        b->buf = ogk_big_alloc(b->cap);
        if (!b->buf)
            ogk_die(OGK_EXIT_INIT, "out of memory (%" PRIu64 " bytes)", n);
    }
    return b->buf;
}

static int part_crc_ok(const char *what, const char *name, const uint8_t *p, const ogax_part *part, ogk_error *e)
{
    uint32_t c = ogk_crc32c(0, p + part->offset, part->size);
    if (c != part->crc32c)
        return ogk_fail(e, "tensor %s: %s checksum mismatch (stream says %08x, bytes give %08x)", name, what,
                        part->crc32c, c);
    return 0;
}

int main(int argc, char **argv)
{
    ogk_prog_set(argv[0]);
    ogk_stdout_checked(OGK_EXIT_CHECK); /* its write-failure status (EXIT STATUS in the man page) */
    const char *out_path = NULL;
    int layout = OGK_B8, verbose = 0;
    static const struct option opts[] = {{"layout", required_argument, 0, 'l'}, {"output", required_argument, 0, 'o'},
                                         {"help", no_argument, 0, 'h'},         {"version", no_argument, 0, 'V'},
                                         {"verbose", no_argument, 0, 'v'},      {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "l:o:hvV", opts, NULL)) != -1) {
        switch (c) {
        case 'l':
            layout = ogk_layout_parse(optarg);
            if (layout < 0)
                ogk_die(OGK_EXIT_USAGE, "-l: unknown layout \"%s\" (rm or b8)", optarg);
            break;
        case 'o':
            if (!*optarg)
                ogk_die(OGK_EXIT_USAGE, "-o: an empty output path (use - for standard output)");
            out_path = optarg;
            break;
        case 'v': verbose = 1; break;
        case 'h': usage(stdout); return 0;
        case 'V': printf("q4nx-pack %s (container format %d, layout version %d)\n", OGAKIT_VERSION,
                         Q4NX_FORMAT_VERSION, Q4NX_LAYOUT_VERSION); return 0;
        default: usage(stderr); return OGK_EXIT_USAGE;
        }
    }
    if (optind != argc) {
        ogk_err("unexpected argument \"%s\" (the stream is read from stdin)", argv[optind]);
        usage(stderr);
        return OGK_EXIT_USAGE;
    }
    if (isatty(STDIN_FILENO))
        ogk_die(OGK_EXIT_USAGE, "stdin is a terminal; pipe an OGAX stream in (oga-extract PACK | q4nx-pack ...)");

    /* a larger pipe buffer (when stdin is a pipe) means fewer wake-ups between extract and pack */
    (void)fcntl(STDIN_FILENO, F_SETPIPE_SZ, 1 << 20);
    ogk_error e;
    ogk_out out;
    ogk_input_note(STDIN_FILENO, "standard input"); /* -o naming the stream's own file is refused */
    if (ogk_out_open(&out, out_path, &e))
        ogk_die(out_path ? OGK_EXIT_CHECK : OGK_EXIT_USAGE, "%s", e.msg);
    q4nx_writer *w = q4nx_writer_new(out.fd, layout, &e);
    int rc = w ? 0 : OGK_EXIT_CHECK;
    ogax_reader r;
    ogax_reader_init(&r, STDIN_FILENO);
    json_t *model = NULL, *source = NULL;
    int saw_jinja = 0; /* the stream holds a chat_template.jinja asset: the model's template is that file */
    int tools_bad = 0; /* its tokenizer_config.json's "tool_use" template does not parse (tools_e): unless
                        * chat_template.jinja replaces the list */
    ogk_error tools_e;
    buffer pay = {0};
    uint64_t ntensors = 0;
    double t0 = ogk_now();
    while (!rc) {
        errno = 0; /* a frame refused for want of memory (ENOMEM, the writer's contract) is init failed, not input */
        ogax_frame fr;
        int n = ogax_next(&r, &fr, &e);
        if (n < 0) {
            rc = OGK_EXIT_INPUT;
            break;
        }
        if (n == 0)
            break;
        /* a tensor's sizes are checked before its payload is read: a corrupt header's claim is not allocated */
        ogax_tensor t;
        int tensor = !strcmp(fr.type, "tensor");
        if (tensor && ogax_tensor_parse(&fr, &t, &e)) {
            json_decref(fr.hdr);
            rc = OGK_EXIT_INPUT;
            break;
        }
        uint8_t *p = grow(&pay, fr.payload_len);
        if (ogax_read(&r, p, fr.payload_len, &e)) {
            rc = OGK_EXIT_INPUT;
        } else if (!strcmp(fr.type, "model")) {
            model = json_incref(json_object_get(fr.hdr, "model"));
            json_t *s = json_object_get(fr.hdr, "source");
            source = json_is_object(s) ? json_deep_copy(s) : json_object();
            if (!json_is_object(model)) {
                ogk_fail(&e, "model frame has no \"model\" object");
                rc = OGK_EXIT_INPUT;
            } else {
                json_object_set_new(source, "packer", json_string("q4nx-pack " OGAKIT_VERSION));
                /* an incomplete stream (oga-extract --allow-incomplete) stays visibly incomplete */
                json_t *complete = json_object_get(fr.hdr, "complete"), *left = json_object_get(fr.hdr, "left_out");
                int is_complete = !json_is_false(complete);
                q4nx_writer_meta(w, "complete", json_boolean(is_complete));
                if (!is_complete) {
                    q4nx_writer_meta(w, "left_out", json_is_array(left) ? json_deep_copy(left) : json_array());
                    ogk_err("warning: the stream is incomplete (%zu items left out); the container records it",
                            json_array_size(left));
                }
            }
        } else if (!strcmp(fr.type, "asset")) {
            const char *name = json_string_value(json_object_get(fr.hdr, "name"));
            saw_jinja |= name && !strcmp(name, "chat_template.jinja");
            if (name && !strcmp(name, "tokenizer_config.json")) {
                const char *dir = json_string_value(json_object_get(source, "pack"));
                char origin[4200];
                snprintf(origin, sizeof origin, "%s%stokenizer_config.json", dir ? dir : "", dir ? "/" : "");
                tools_bad = tok_config_tools_template_check((const char *)p, fr.payload_len, origin, &tools_e) != 0;
            }
            json_t *sz = json_object_get(fr.hdr, "size"), *crc = json_object_get(fr.hdr, "crc32c");
            if (!name || !json_is_integer(sz) || (uint64_t)json_integer_value(sz) != fr.payload_len) {
                ogk_fail(&e, "asset frame at byte %" PRIu64 ": name missing or size contradicts the payload", fr.at);
                rc = OGK_EXIT_INPUT;
            } else if (json_is_integer(crc) && (uint32_t)json_integer_value(crc) != ogk_crc32c(0, p, fr.payload_len)) {
                ogk_fail(&e, "asset %s: checksum mismatch", name);
                rc = OGK_EXIT_INPUT;
            } else if (q4nx_writer_asset(w, name, p, fr.payload_len, &e)) {
                rc = OGK_EXIT_INPUT;
            }
        } else if (tensor) {
            json_t *nl = json_object_get(model, "num_layers");
            if (json_is_integer(nl) && !mdesc_role_known(t.role, (int)json_integer_value(nl))) {
                ogk_fail(&e, "tensor %s: role %s is not a role of a %" JSON_INTEGER_FORMAT "-layer model", t.name, t.role,
                         json_integer_value(nl));
                rc = OGK_EXIT_INPUT;
            } else if (ogk_dtype_quantised(t.dtype)) {
                if (part_crc_ok("codes", t.name, p, &t.codes, &e) || part_crc_ok("scales", t.name, p, &t.scales, &e) ||
                    (t.has_zp && part_crc_ok("zeros", t.name, p, &t.zeros, &e)) ||
                    (t.dtype == OGK_Q8 ? q4nx_writer_q8 : q4nx_writer_q4)(w, t.name, t.role, t.n, t.k, t.block,
                                                                       t.scale_dtype, p + t.codes.offset,
                                                                       p + t.scales.offset,
                                                                       t.has_zp ? p + t.zeros.offset : NULL, &e))
                    rc = OGK_EXIT_INPUT;
            } else {
                if (part_crc_ok("data", t.name, p, &t.data, &e) ||
                    q4nx_writer_plain(w, t.name, t.role, t.dtype, t.ndim, t.shape, p + t.data.offset, t.data.size, &e))
                    rc = OGK_EXIT_INPUT;
            }
            ntensors++;
            ogk_progress("tensors", ntensors, 0);
        }
        /* other frame types are not ours to interpret: refuse rather than drop silently */
        else {
            ogk_fail(&e, "frame at byte %" PRIu64 ": unknown type \"%s\"", fr.at, fr.type);
            rc = OGK_EXIT_INPUT;
        }
        json_decref(fr.hdr);
    }
    ogk_progress_done();
    if (rc == OGK_EXIT_INPUT && errno == ENOMEM)
        rc = OGK_EXIT_INIT;
    /* a chat template our engine cannot parse does not stop the packing (completions need none), but it is
     * said now, not at the first chat request */
    const char *tpl = json_string_value(json_object_get(model, "chat_template"));
    if (!rc && tpl) {
        const char *dir = json_string_value(json_object_get(source, "pack"));
        char origin[4200];
        snprintf(origin, sizeof origin, "%s%s%s (the stream's chat_template)", dir ? dir : "", dir ? "/" : "",
                 saw_jinja ? "chat_template.jinja" : "tokenizer_config.json");
        ogk_error te;
        if (tok_chat_template_check(tpl, origin, &te))
            ogk_err("warning: %s; the container is written (completions will work), chat with it will not", te.msg);
        else if (tok_jinja_lint(tpl, &te))
            ogk_err("warning: %s: the chat template uses what ogakit's Jinja engine lacks: %s; a conversation that "
                    "reaches it will be refused", origin, te.msg);
    }
    if (!rc && tools_bad && !saw_jinja)
        ogk_err("warning: %s; the container is written, chat with tools will not work", tools_e.msg);
    if (!rc && q4nx_writer_finish(w, model, source, &e))
        rc = OGK_EXIT_CHECK;
    int out_failed = rc && (!w || q4nx_writer_write_failed(w)); /* no writer: its header could not be written */
    if (out_failed)
        rc = OGK_EXIT_CHECK; /* the output failed, not the input */
    if (!rc && ogk_out_commit(&out, &e))
        rc = OGK_EXIT_CHECK;
    if (rc) {
        ogk_out_abort(&out);
        if (out_failed) /* which output: the file's name, or standard output */
            ogk_err("%s: %s", out_path && strcmp(out_path, "-") ? out_path : "stdout", e.msg);
        else
            ogk_err("%s", e.msg);
    } else if (verbose) {
        double dt = ogk_now() - t0;
        fprintf(stderr, "q4nx-pack: %" PRIu64 " stream bytes -> %" PRIu64 " container bytes, %" PRIu64 " tensors, %.3f s, %.2f GB/s\n",
                r.offset, q4nx_writer_bytes(w), ntensors, dt, dt > 0 ? (double)r.offset / dt / 1e9 : 0.0);
    }
    q4nx_writer_free(w);
    json_decref(model);
    json_decref(source);
    free(pay.buf);
    return rc;
}
