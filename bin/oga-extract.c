/* oga-extract PACK: the OGAX stream of an OGA pack on stdout (oga-extract(1), ogax(5)). Everything is
 * read and validated before the first byte goes out; weights are written straight from the mmap. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ogax/ogax.h"
#include "pack/pack.h"
#include "tok/tok.h"
#include "util/util.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: oga-extract [-o FILE] [--allow-incomplete] PACK\n"
               "Write the OGAX stream (ogax(5)) of the ONNX Runtime GenAI pack directory PACK: the model\n"
               "description, the tokenizer/text assets, one frame per weight, an end frame.\n"
               "  -o, --output FILE      write FILE atomically instead of stdout\n"
               "  -a, --allow-incomplete extract what can be represented; list the rest on stderr and in\n"
               "                         the model frame (\"left_out\")\n"
               "  -c, --check FILE|-     read an OGAX stream back and check it (framing, headers, CRC32C);\n"
               "                         prints a JSON summary; exit 0 good, 3 malformed\n"
               "  -h, --help             this text\n"
               "  -V, --version          print the version\n"
               "Exit: 0 ok, 2 usage (or stdout is a terminal), 3 pack refused / not a pack, 1 write failed.\n");
}

static json_t *crc_part(const char *name, uint64_t off, const void *data, uint64_t size)
{
    return json_pack("{s:s,s:I,s:I,s:I}", "name", name, "offset", (json_int_t)off, "size", (json_int_t)size, "crc32c",
                     (json_int_t)ogk_crc32c(0, data, size));
}

static json_t *shape_json(const pack_tensor *t)
{
    json_t *a = json_array();
    for (int i = 0; i < t->ndim; i++)
        json_array_append_new(a, json_integer((json_int_t)t->shape[i]));
    return a;
}

static int write_tensor(ogax_writer *w, const pack_tensor *t, ogk_error *e)
{
    json_t *h = json_pack("{s:s,s:s,s:s,s:s,s:o}", "type", "tensor", "name", t->name, "role", t->role, "dtype",
                          ogk_dtype_name(t->dtype), "shape", shape_json(t));
    json_t *parts = json_array();
    struct iovec iov[3];
    int n = 0;
    if (ogk_dtype_quantised(t->dtype)) {
        json_object_set_new(h, "quant",
                            json_pack("{s:i,s:i,s:i,s:s,s:s,s:s}", "bits", ogk_dtype_bits(t->dtype), "block_size",
                                      (int)t->block, "k_blocks", (int)t->k_blocks, "scale_dtype",
                                      ogk_dtype_name(t->scale_dtype), "zero_points",
                                      t->has_zp ? (t->dtype == OGK_Q8 ? "u8" : "u4") : "none", "source_op", t->source_op));
        uint64_t off = 0;
        json_array_append_new(parts, crc_part("codes", off, t->codes, t->codes_size));
        iov[n++] = (struct iovec){(void *)t->codes, t->codes_size};
        off += t->codes_size;
        json_array_append_new(parts, crc_part("scales", off, t->scales, t->scales_size));
        iov[n++] = (struct iovec){(void *)t->scales, t->scales_size};
        off += t->scales_size;
        if (t->has_zp) {
            json_array_append_new(parts, crc_part("zeros", off, t->zeros, t->zeros_size));
            iov[n++] = (struct iovec){(void *)t->zeros, t->zeros_size};
        }
    } else {
        json_array_append_new(parts, crc_part("data", 0, t->data, t->nbytes));
        iov[n++] = (struct iovec){(void *)t->data, t->nbytes};
    }
    json_object_set_new(h, "parts", parts);
    int rc = ogax_write_frame(w, h, iov, n, e);
    json_decref(h);
    return rc;
}

/* --check: read a stream back with ogax_reader, verify every tensor header and part checksum */
static int check_stream(const char *path)
{
    int fd = 0;
    if (strcmp(path, "-") && (fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        ogk_die(OGK_EXIT_INPUT, "%s: %s", path, strerror(errno));
    ogax_reader r;
    ogax_reader_init(&r, fd);
    ogk_error e;
    ogax_frame f;
    json_t *roles = json_array(), *model = NULL, *assets = json_array();
    json_t *seen = NULL; /* "role:R" and "asset:NAME": unique in a stream, as q4nx-pack requires */
    size_t bufcap = 1 << 20;
    uint8_t *buf = malloc(bufcap);
    int rc;
    while ((rc = ogax_next(&r, &f, &e)) == 1) {
        if (!strcmp(f.type, "model"))
            model = json_incref(json_object_get(f.hdr, "model"));
        else if (!strcmp(f.type, "asset")) {
            const char *name = json_string_value(json_object_get(f.hdr, "name")); /* the reader checked it */
            int dup = ogk_seen_before(&seen, "asset:", name);
            if (dup < 0)
                ogk_die(OGK_EXIT_INIT, "out of memory");
            if (dup) {
                ogk_fail(&e, "asset frame at byte %llu: asset %s: duplicate name", (unsigned long long)f.at, name);
                json_decref(f.hdr);
                goto bad;
            }
            json_array_append(assets, json_object_get(f.hdr, "name"));
        } else if (!strcmp(f.type, "tensor")) {
            ogax_tensor t;
            if (ogax_tensor_parse(&f, &t, &e)) {
                json_decref(f.hdr);
                goto bad;
            }
            int dup = ogk_seen_before(&seen, "role:", t.role);
            if (dup < 0)
                ogk_die(OGK_EXIT_INIT, "out of memory");
            if (dup) {
                ogk_fail(&e, "tensor frame at byte %llu: tensor %s: duplicate role %s", (unsigned long long)f.at, t.name,
                         t.role);
                json_decref(f.hdr);
                goto bad;
            }
            json_array_append_new(roles, json_string(t.role));
        }
        /* every part's CRC32C, read in chunks (frames may be larger than memory) */
        json_t *parts = json_object_get(f.hdr, "parts");
        uint64_t size = f.payload_len, done = 0;
        if (!strcmp(f.type, "asset") && !parts) {
            json_t *p1 = json_pack("{s:s,s:i,s:O,s:O}", "name", "asset", "offset", 0, "size", json_object_get(f.hdr, "size"),
                                   "crc32c", json_object_get(f.hdr, "crc32c"));
            parts = json_pack("[o]", p1);
        } else
            json_incref(parts);
        size_t i;
        json_t *pt;
        json_array_foreach(parts, i, pt)
        {
            uint64_t psize = (uint64_t)json_integer_value(json_object_get(pt, "size"));
            uint32_t want = (uint32_t)json_integer_value(json_object_get(pt, "crc32c")), crc = 0;
            if (psize > size - done) {
                ogk_fail(&e, "%s frame at byte %llu: parts larger than the payload", f.type, (unsigned long long)f.at);
                json_decref(parts);
                json_decref(f.hdr);
                goto bad;
            }
            for (uint64_t left = psize; left;) {
                size_t c = left < bufcap ? (size_t)left : bufcap;
                if (ogax_read(&r, buf, c, &e)) {
                    json_decref(parts);
                    json_decref(f.hdr);
                    goto bad;
                }
                crc = ogk_crc32c(crc, buf, c);
                left -= c;
            }
            done += psize;
            if (crc != want) {
                ogk_fail(&e, "%s frame at byte %llu: part %s: CRC32C %08x != header %08x", f.type, (unsigned long long)f.at,
                         json_string_value(json_object_get(pt, "name")), crc, want);
                json_decref(parts);
                json_decref(f.hdr);
                goto bad;
            }
        }
        json_decref(parts);
        if (done < size && ogax_skip(&r, size - done, &e)) {
            json_decref(f.hdr);
            goto bad;
        }
        json_decref(f.hdr);
    }
    if (rc < 0)
        goto bad;
    free(buf);
    json_decref(seen);
    json_t *out = json_pack("{s:b,s:I,s:I,s:I,s:I,s:o,s:o,s:o}", "ok", 1, "frames", (json_int_t)r.frames, "tensors",
                            (json_int_t)r.tensors, "assets", (json_int_t)r.assets, "bytes", (json_int_t)r.offset, "model",
                            model ? model : json_null(), "asset_names", assets, "roles", roles);
    ogk_json_print(stdout, out);
    json_decref(out);
    return OGK_EXIT_OK;
bad:
    free(buf);
    json_decref(seen);
    json_decref(roles);
    json_decref(assets);
    json_decref(model);
    ogk_die(OGK_EXIT_INPUT, "%s: %s", strcmp(path, "-") ? path : "<stdin>", e.msg);
}

int main(int argc, char **argv)
{
    ogk_prog_set(argv[0]);
    ogk_stdout_checked(OGK_EXIT_CHECK); /* its write-failure status (EXIT STATUS in the man page) */
    static const struct option opts[] = {{"output", required_argument, 0, 'o'},
                                         {"allow-incomplete", no_argument, 0, 'a'},
                                         {"check", required_argument, 0, 'c'},
                                         {"help", no_argument, 0, 'h'},
                                         {"version", no_argument, 0, 'V'},
                                         {0, 0, 0, 0}};
    const char *outpath = NULL, *check = NULL;
    int allow = 0, c;
    while ((c = getopt_long(argc, argv, "o:ac:hV", opts, NULL)) != -1) {
        switch (c) {
        case 'o':
            if (!*optarg)
                ogk_die(OGK_EXIT_USAGE, "-o: an empty output path (use - for standard output)");
            outpath = optarg;
            break;
        case 'a': allow = 1; break;
        case 'c': check = optarg; break;
        case 'h': usage(stdout); return OGK_EXIT_OK;
        case 'V': printf("oga-extract %s\n", OGAKIT_VERSION); return OGK_EXIT_OK;
        default: usage(stderr); return OGK_EXIT_USAGE;
        }
    }
    if (check) {
        if (optind != argc)
            ogk_die(OGK_EXIT_USAGE, "--check takes no PACK");
        if (outpath || allow)
            ogk_die(OGK_EXIT_USAGE, "--check reads a stream: -o and --allow-incomplete go with extracting a PACK");
        if (!strcmp(check, "-") && isatty(STDIN_FILENO))
            ogk_die(OGK_EXIT_USAGE, "--check -: standard input is a terminal (pipe a stream in)");
        return check_stream(check);
    }
    if (optind != argc - 1) {
        ogk_err(optind == argc ? "missing PACK" : "one PACK at a time");
        usage(stderr);
        return OGK_EXIT_USAGE;
    }
    if (!outpath || !strcmp(outpath, "-"))
        ogk_refuse_tty_stdout("an OGAX stream");
    signal(SIGPIPE, SIG_IGN); /* a closed reader is a named write error, not a silent death */

    ogk_error e;
    pack *p = pack_open(argv[optind], &e);
    if (!p)
        ogk_die(errno == ENOMEM ? OGK_EXIT_INIT : OGK_EXIT_INPUT, "%s", e.msg);
    size_t nr = pack_refusal_count(p);
    for (size_t i = 0; i < nr; i++) {
        const pack_refusal *r = pack_refusal_at(p, i);
        ogk_err("%s: %s: %s [%s]", allow ? "left out" : "refused", r->what, r->reason, r->code);
    }
    int verdict = pack_exit_code(p); /* 4: a file could not be read for want of memory, never left out */
    if (nr && (!allow || verdict == OGK_EXIT_INIT)) {
        ogk_err("%s: %zu refusal%s; nothing written%s", pack_dir(p), nr, nr == 1 ? "" : "s",
                verdict == OGK_EXIT_INIT ? " (out of memory: the pack was not judged)"
                                         : " (--allow-incomplete extracts the rest)");
        pack_close(p);
        return verdict;
    }

    /* a chat template our engine cannot parse does not stop the import (the weights and tokenizer serve
     * completions), but it is said now, not at the first chat request */
    const char *tpl = json_string_value(json_object_get(pack_model(p), "chat_template"));
    if (tpl) {
        const char *from = "tokenizer_config.json";
        for (size_t i = 0; i < pack_asset_count(p); i++)
            if (!strcmp(pack_asset_at(p, i)->name, "chat_template.jinja"))
                from = "chat_template.jinja";
        char origin[4200];
        snprintf(origin, sizeof origin, "%s/%s", pack_dir(p), from);
        if (tok_chat_template_check(tpl, origin, &e))
            ogk_err("warning: %s; the stream is written (completions will work), chat with this model will not", e.msg);
        else if (tok_jinja_lint(tpl, &e))
            ogk_err("warning: %s: the chat template uses what ogakit's Jinja engine lacks: %s; a conversation that "
                    "reaches it will be refused", origin, e.msg);
    }
    /* a named list's "tool_use" template (taken for conversations with tools; chat_template.jinja replaces the list) */
    const pack_asset *cfg = NULL;
    int has_jinja = 0;
    for (size_t i = 0; i < pack_asset_count(p); i++) {
        has_jinja |= !strcmp(pack_asset_at(p, i)->name, "chat_template.jinja");
        if (!strcmp(pack_asset_at(p, i)->name, "tokenizer_config.json"))
            cfg = pack_asset_at(p, i);
    }
    if (cfg && !has_jinja) {
        char origin[4200];
        snprintf(origin, sizeof origin, "%s/tokenizer_config.json", pack_dir(p));
        if (tok_config_tools_template_check((const char *)cfg->data, cfg->size, origin, &e))
            ogk_err("warning: %s; the stream is written, chat with tools will not work", e.msg);
    }

    ogk_out o;
    if (ogk_out_open(&o, outpath, &e)) { /* a file that cannot be created: 1; stdout on a terminal: 2 */
        pack_close(p);
        ogk_die(outpath && strcmp(outpath, "-") ? OGK_EXIT_CHECK : OGK_EXIT_USAGE, "%s", e.msg);
    }
    ogax_writer w;
    ogax_writer_init(&w, o.fd);
    json_t *left = json_array();
    for (size_t i = 0; i < nr; i++) {
        const pack_refusal *r = pack_refusal_at(p, i);
        json_array_append_new(left, json_pack("{s:s,s:s,s:s}", "what", r->what, "code", r->code, "reason", r->reason));
    }
    json_t *model = json_deep_copy(pack_model(p));
    json_t *hdr = json_pack("{s:s,s:i,s:o,s:{s:s,s:s,s:s,s:s},s:b,s:o}", "type", "model", "ogax", OGAX_VERSION, "model",
                            model, "source", "pack", pack_dir_text(p), "flavour", pack_flavour_name(pack_flavour(p)), "tool",
                            "oga-extract", "version", OGAKIT_VERSION, "complete", nr == 0, "left_out", left);
    int rc = ogax_write_frame(&w, hdr, NULL, 0, &e);
    json_decref(hdr);
    for (size_t i = 0; !rc && i < pack_asset_count(p); i++) {
        const pack_asset *a = pack_asset_at(p, i);
        json_t *h = json_pack("{s:s,s:s,s:I,s:I}", "type", "asset", "name", a->name, "size", (json_int_t)a->size, "crc32c",
                              (json_int_t)ogk_crc32c(0, a->data, a->size));
        struct iovec iov = {(void *)a->data, a->size};
        rc = ogax_write_frame(&w, h, &iov, 1, &e);
        json_decref(h);
    }
    size_t nt = pack_tensor_count(p);
    for (size_t i = 0; !rc && i < nt; i++) {
        rc = write_tensor(&w, pack_tensor_at(p, i), &e);
        ogk_progress("tensors", i + 1, nt);
    }
    ogk_progress_done();
    if (!rc)
        rc = ogax_write_end(&w, &e);
    if (!rc && ogk_out_commit(&o, &e))
        rc = -1;
    pack_close(p);
    if (rc) {
        ogk_out_abort(&o);
        ogk_die(OGK_EXIT_CHECK, "%s: %s", outpath && strcmp(outpath, "-") ? outpath : "stdout", e.msg);
    }
    return OGK_EXIT_OK; /* with --allow-incomplete, a stream that says what it left out is a success */
}
