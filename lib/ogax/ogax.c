/* OGAX framing: writer, reader, tensor header validation (format in ogax.h and ogax.5). */
#include "ogax.h"

#include "mdesc/mdesc.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char MAGIC[4] = {'O', 'G', 'A', 'X'};

void ogax_writer_init(ogax_writer *w, int fd)
{
    memset(w, 0, sizeof *w);
    w->fd = fd;
}

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p) { return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t get_u64(const uint8_t *p) { return get_u32(p) | (uint64_t)get_u32(p + 4) << 32; }

int ogax_write_frame(ogax_writer *w, json_t *hdr, const struct iovec *parts, int nparts, ogk_error *e)
{
    char *js = json_dumps(hdr, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!js)
        return ogk_fail(e, "cannot serialise a frame header");
    size_t hl = strlen(js);
    if (hl > OGAX_MAX_HEADER) { /* what no reader takes is not written */
        free(js);
        return ogk_fail(e, "a frame header of %zu bytes, larger than the %u MiB limit", hl, OGAX_MAX_HEADER >> 20);
    }
    uint64_t pl = 0;
    for (int i = 0; i < nparts; i++)
        pl += parts[i].iov_len;
    uint8_t fh[16];
    memcpy(fh, MAGIC, 4);
    put_u32(fh + 4, (uint32_t)hl);
    put_u64(fh + 8, pl);
    int rc = ogk_write_all(w->fd, fh, sizeof fh) || ogk_write_all(w->fd, js, hl);
    w->headers_crc = ogk_crc32c(ogk_crc32c(w->headers_crc, fh, sizeof fh), js, hl);
    free(js);
    for (int i = 0; !rc && i < nparts; i++)
        rc = ogk_write_all(w->fd, parts[i].iov_base, parts[i].iov_len);
    if (rc)
        return ogk_fail(e, "write failed: %s", errno == EPIPE ? "broken pipe" : strerror(errno));
    const char *type = json_string_value(json_object_get(hdr, "type"));
    w->frames++;
    if (type && !strcmp(type, "tensor"))
        w->tensors++;
    if (type && !strcmp(type, "asset"))
        w->assets++;
    w->payload_bytes += pl;
    w->bytes_out += sizeof fh + hl + pl;
    return 0;
}

int ogax_write_end(ogax_writer *w, ogk_error *e)
{
    json_t *h = json_pack("{s:s,s:I,s:I,s:I,s:I,s:I}", "type", "end", "frames", (json_int_t)w->frames, "tensors",
                          (json_int_t)w->tensors, "assets", (json_int_t)w->assets, "payload_bytes",
                          (json_int_t)w->payload_bytes, "headers_crc32c", (json_int_t)w->headers_crc);
    uint64_t frames = w->frames;
    int rc = ogax_write_frame(w, h, NULL, 0, e);
    w->frames = frames;
    json_decref(h);
    return rc;
}

void ogax_reader_init(ogax_reader *r, int fd)
{
    memset(r, 0, sizeof *r);
    r->fd = fd;
}

static int read_exact(ogax_reader *r, void *buf, uint64_t n, const char *what, ogk_error *e)
{
    ssize_t got = ogk_read_full(r->fd, buf, n);
    if (got < 0)
        return ogk_fail(e, "read error at byte %" PRIu64 ": %s", r->offset, strerror(errno));
    r->offset += (uint64_t)got;
    if ((uint64_t)got != n)
        return ogk_fail(e, "truncated stream: %s ends at byte %" PRIu64 " (%" PRIu64 " of %" PRIu64 " bytes)", what,
                        r->offset, (uint64_t)got, n);
    return 0;
}

static uint64_t jint(json_t *o, const char *k, int *ok)
{
    json_t *v = json_object_get(o, k);
    if (!json_is_integer(v) || json_integer_value(v) < 0) {
        *ok = 0;
        return 0;
    }
    return (uint64_t)json_integer_value(v);
}

int ogax_next(ogax_reader *r, ogax_frame *f, ogk_error *e)
{
    memset(f, 0, sizeof *f);
    if (r->seen_end)
        return ogk_fail(e, "read past the end frame");
    if (r->payload_left)
        return ogk_fail(e, "internal: previous payload not consumed");
    f->at = r->offset;
    uint8_t fh[16];
    ssize_t got = ogk_read_full(r->fd, fh, sizeof fh);
    if (got < 0)
        return ogk_fail(e, "read error at byte %" PRIu64 ": %s", r->offset, strerror(errno));
    r->offset += (uint64_t)got;
    if (got == 0)
        return ogk_fail(e, "truncated stream: no end frame after %" PRIu64 " frames (%" PRIu64 " bytes)", r->frames,
                        r->offset);
    if ((size_t)got < sizeof fh)
        return ogk_fail(e, "truncated stream: frame header at byte %" PRIu64 " is %zd of 16 bytes", f->at, got);
    if (memcmp(fh, MAGIC, 4) != 0)
        return ogk_fail(e, "not an OGAX frame at byte %" PRIu64 " (bad magic)", f->at);
    uint32_t hl = get_u32(fh + 4);
    uint64_t pl = get_u64(fh + 8);
    if (hl == 0 || hl > OGAX_MAX_HEADER)
        return ogk_fail(e, "frame at byte %" PRIu64 ": header length %u out of range (1..%u)", f->at, hl, OGAX_MAX_HEADER);
    if (pl > ((uint64_t)1 << 42))
        return ogk_fail(e, "frame at byte %" PRIu64 ": payload length %" PRIu64 " out of range", f->at, pl);
    char *js = malloc(hl + 1);
    if (!js)
        return ogk_fail(e, "out of memory");
    if (read_exact(r, js, hl, "frame header", e)) {
        free(js);
        return -1;
    }
    js[hl] = 0;
    uint32_t hcrc = ogk_crc32c(ogk_crc32c(r->headers_crc, fh, sizeof fh), js, hl);
    json_error_t je;
    json_t *h = json_loadb(js, hl, JSON_REJECT_DUPLICATES, &je);
    free(js);
    if (!h || !json_is_object(h)) {
        json_decref(h);
        return ogk_fail(e, "frame at byte %" PRIu64 ": header is not a JSON object (%s)", f->at, h ? "" : je.text);
    }
    const char *type = json_string_value(json_object_get(h, "type"));
    if (!type) {
        json_decref(h);
        return ogk_fail(e, "frame at byte %" PRIu64 ": header has no \"type\"", f->at);
    }
    int is_model = !strcmp(type, "model"), is_end = !strcmp(type, "end");
    if (!r->seen_model && !is_model) {
        /* type points into h: format the message before releasing it */
        ogk_fail(e, "frame at byte %" PRIu64 ": stream must start with a model frame, got \"%s\"", f->at, type);
        json_decref(h);
        return -1;
    }
    if (r->seen_model && is_model) {
        json_decref(h);
        return ogk_fail(e, "frame at byte %" PRIu64 ": second model frame", f->at);
    }
    if (is_model) {
        json_t *v = json_object_get(h, "ogax");
        if (!json_is_integer(v) || json_integer_value(v) != OGAX_VERSION) {
            int v1 = json_is_integer(v) && json_integer_value(v) == 1;
            json_decref(h);
            if (v1)
                return ogk_fail(e, "OGAX version 1 stream: its frame headers carry no checksum; extract it again with "
                                   "this oga-extract (version %d)", OGAX_VERSION);
            return ogk_fail(e, "unsupported OGAX version (want %d)", OGAX_VERSION);
        }
        r->seen_model = 1;
    }
    if (is_end) {
        int ok = 1;
        uint64_t fr = jint(h, "frames", &ok), te = jint(h, "tensors", &ok), as = jint(h, "assets", &ok),
                 pb = jint(h, "payload_bytes", &ok), hc = jint(h, "headers_crc32c", &ok);
        json_decref(h);
        if (!ok)
            return ogk_fail(e, "end frame at byte %" PRIu64 ": missing counts", f->at);
        if (pl)
            return ogk_fail(e, "end frame at byte %" PRIu64 ": has a payload", f->at);
        if (fr != r->frames || te != r->tensors || as != r->assets || pb != r->payload_bytes)
            return ogk_fail(e,
                            "end frame disagrees with the stream: frames %" PRIu64 "/%" PRIu64 ", tensors %" PRIu64
                            "/%" PRIu64 ", assets %" PRIu64 "/%" PRIu64 ", payload bytes %" PRIu64 "/%" PRIu64,
                            fr, r->frames, te, r->tensors, as, r->assets, pb, r->payload_bytes);
        if (hc != r->headers_crc)
            return ogk_fail(e,
                            "frame headers checksum mismatch (end frame says 0x%08" PRIx64 ", the headers read give 0x%08x): "
                            "a frame header (a role, name, shape) was changed",
                            hc, r->headers_crc);
        uint8_t extra;
        ssize_t x = ogk_read_full(r->fd, &extra, 1);
        if (x != 0)
            return ogk_fail(e, "trailing bytes after the end frame at byte %" PRIu64, r->offset);
        r->seen_end = 1;
        return 0;
    }
    /* the frame types and order of ogax(5), checked before the payload is read (or allocated): a model frame
     * has none, an asset frame's header describes its payload */
    int is_asset = !strcmp(type, "asset"), is_tensor = !strcmp(type, "tensor");
    const char *why = NULL;
    char whybuf[160];
    if (!is_model && !is_asset && !is_tensor) {
        snprintf(whybuf, sizeof whybuf, "unknown type \"%.100s\"", type); /* type points into h */
        why = whybuf;
    } else if (is_model && pl)
        why = "model frame has a payload (it has none)";
    else if (is_asset && r->tensors)
        why = "asset frame after the tensor frames (assets come first)";
    else if (is_asset) {
        json_t *nm = json_object_get(h, "name"), *sz = json_object_get(h, "size"), *crc = json_object_get(h, "crc32c");
        if (!json_is_string(nm) || !json_string_length(nm))
            why = "asset frame has no name";
        else if (!json_is_integer(crc) || json_integer_value(crc) < 0 || json_integer_value(crc) > (json_int_t)UINT32_MAX)
            why = "asset frame has no crc32c (an unsigned 32-bit integer)";
        else if (!json_is_integer(sz) || (uint64_t)json_integer_value(sz) != pl) {
            snprintf(whybuf, sizeof whybuf, "asset frame's size %" JSON_INTEGER_FORMAT " contradicts the payload of %" PRIu64 " bytes",
                     json_is_integer(sz) ? json_integer_value(sz) : (json_int_t)-1, pl);
            why = whybuf;
        } else if (pl > OGAX_MAX_ASSET) {
            snprintf(whybuf, sizeof whybuf, "asset frame of %" PRIu64 " bytes, larger than the %u MiB asset limit", pl,
                     OGAX_MAX_ASSET >> 20);
            why = whybuf;
        }
    }
    if (why) {
        ogk_fail(e, "frame at byte %" PRIu64 ": %s", f->at, why);
        json_decref(h);
        return -1;
    }
    r->headers_crc = hcrc;
    r->frames++;
    if (is_tensor)
        r->tensors++;
    else if (is_asset)
        r->assets++;
    r->payload_bytes += pl;
    r->payload_left = pl;
    f->hdr = h;
    f->type = type;
    f->payload_len = pl;
    return 1;
}

int ogax_read(ogax_reader *r, void *buf, uint64_t n, ogk_error *e)
{
    if (n > r->payload_left)
        return ogk_fail(e, "internal: read beyond the frame payload");
    if (read_exact(r, buf, n, "frame payload", e))
        return -1;
    r->payload_left -= n;
    return 0;
}

int ogax_skip(ogax_reader *r, uint64_t n, ogk_error *e)
{
    static uint8_t sink[1 << 16];
    while (n) {
        uint64_t c = n < sizeof sink ? n : sizeof sink;
        if (ogax_read(r, sink, c, e))
            return -1;
        n -= c;
    }
    return 0;
}

static int part_get(json_t *parts, const char *name, ogax_part *p)
{
    size_t i;
    json_t *v;
    memset(p, 0, sizeof *p);
    json_array_foreach(parts, i, v)
    {
        const char *nm = json_string_value(json_object_get(v, "name"));
        if (nm && !strcmp(nm, name)) {
            int ok = 1;
            p->offset = jint(v, "offset", &ok);
            p->size = jint(v, "size", &ok);
            p->crc32c = (uint32_t)jint(v, "crc32c", &ok);
            p->present = ok ? 1 : -1;
            return p->present;
        }
    }
    return 0;
}

int ogax_tensor_parse(const ogax_frame *f, ogax_tensor *t, ogk_error *e)
{
    memset(t, 0, sizeof *t);
    json_t *h = f->hdr;
    t->name = json_string_value(json_object_get(h, "name"));
    t->role = json_string_value(json_object_get(h, "role"));
    const char *nm = t->name ? t->name : "?";
    if (!t->name || !t->role)
        return ogk_fail(e, "tensor frame at byte %" PRIu64 ": missing name or role", f->at);
    if (!mdesc_role_known(t->role, -1))
        return ogk_fail(e, "tensor %.200s: role \"%.200s\" is not a known role (embed, lm_head, final_norm, rope.cos, "
                           "rope.sin, layers.N.attn.*, layers.N.mlp.*, layers.N.*_norm)", nm, t->role);
    t->dtype = ogk_dtype_parse(json_string_value(json_object_get(h, "dtype")));
    if (t->dtype < 0)
        return ogk_fail(e, "tensor %s: unknown dtype", nm);
    json_t *shape = json_object_get(h, "shape");
    if (!json_is_array(shape) || json_array_size(shape) < 1 || json_array_size(shape) > 4)
        return ogk_fail(e, "tensor %s: shape must be an array of 1..4 dims", nm);
    t->ndim = (int)json_array_size(shape);
    uint64_t count = 1;
    for (int i = 0; i < t->ndim; i++) {
        json_t *d = json_array_get(shape, (size_t)i);
        if (!json_is_integer(d) || json_integer_value(d) <= 0 || json_integer_value(d) > (1ll << 32))
            return ogk_fail(e, "tensor %s: shape[%d] is not a positive integer", nm, i);
        t->shape[i] = (uint64_t)json_integer_value(d);
        /* bounded so no size below wraps (2^32 x 2^32 f32 would "need" 0 bytes) */
        if (count > OGAX_MAX_ELEMENTS / t->shape[i])
            return ogk_fail(e, "tensor %s: shape has more than 2^50 elements", nm);
        count *= t->shape[i];
    }
    json_t *parts = json_object_get(h, "parts");
    if (!json_is_array(parts))
        return ogk_fail(e, "tensor %s: no parts", nm);
    uint64_t expect_total = 0;
    if (ogk_dtype_quantised(t->dtype)) {
        json_t *q = json_object_get(h, "quant");
        int ok = 1, q8 = t->dtype == OGK_Q8;
        const char *dn = ogk_dtype_name(t->dtype);
        uint64_t bits = jint(q, "bits", &ok), block = jint(q, "block_size", &ok), kb = jint(q, "k_blocks", &ok);
        if (!json_is_object(q) || !ok)
            return ogk_fail(e, "tensor %s: %s tensor without a complete quant object", nm, dn);
        if (bits != (uint64_t)ogk_dtype_bits(t->dtype))
            return ogk_fail(e, "tensor %s: bits %" PRIu64 " in a %s tensor (want %d)", nm, bits, dn, ogk_dtype_bits(t->dtype));
        if (t->ndim != 2 || t->shape[0] > UINT32_MAX || t->shape[1] > UINT32_MAX)
            return ogk_fail(e, "tensor %s: %s shape must be [N, K] with N, K < 2^32", nm, dn);
        if (block < 16 || block > 4096 || (block & (block - 1)))
            return ogk_fail(e, "tensor %s: block_size %" PRIu64 " is not a power of two in 16..4096", nm, block);
        t->n = (uint32_t)t->shape[0];
        t->k = (uint32_t)t->shape[1];
        t->block = (uint32_t)block;
        t->k_blocks = (uint32_t)((t->k + block - 1) / block);
        if (kb != t->k_blocks)
            return ogk_fail(e, "tensor %s: k_blocks %" PRIu64 " != ceil(K/block) %u", nm, kb, t->k_blocks);
        t->scale_dtype = ogk_dtype_parse(json_string_value(json_object_get(q, "scale_dtype")));
        if (t->scale_dtype != OGK_F32 && t->scale_dtype != OGK_F16 && t->scale_dtype != OGK_BF16)
            return ogk_fail(e, "tensor %s: scale_dtype must be f32, f16 or bf16", nm);
        const char *zp = json_string_value(json_object_get(q, "zero_points")), *zname = q8 ? "u8" : "u4";
        if (!zp || (strcmp(zp, zname) && strcmp(zp, "none")))
            return ogk_fail(e, "tensor %s: zero_points must be \"%s\" or \"none\"", nm, zname);
        t->has_zp = !strcmp(zp, zname);
        t->source_op = json_string_value(json_object_get(q, "source_op"));
        if (part_get(parts, "codes", &t->codes) != 1 || part_get(parts, "scales", &t->scales) != 1)
            return ogk_fail(e, "tensor %s: %s tensor needs codes and scales parts", nm, dn);
        uint64_t want_codes = (uint64_t)t->n * t->k_blocks * block / (q8 ? 1 : 2);
        uint64_t want_scales = (uint64_t)t->n * t->k_blocks * ogk_dtype_size(t->scale_dtype);
        if (t->codes.size != want_codes)
            return ogk_fail(e, "tensor %s: codes size %" PRIu64 " != N*k_blocks*block*bits/8 %" PRIu64, nm, t->codes.size,
                            want_codes);
        if (t->scales.size != want_scales)
            return ogk_fail(e, "tensor %s: scales size %" PRIu64 " != N*k_blocks*%zu %" PRIu64, nm, t->scales.size,
                            ogk_dtype_size(t->scale_dtype), want_scales);
        expect_total = want_codes + want_scales;
        int zr = part_get(parts, "zeros", &t->zeros);
        if (t->has_zp) {
            uint64_t want = (uint64_t)t->n * (q8 ? t->k_blocks : (t->k_blocks + 1) / 2);
            if (zr != 1 || t->zeros.size != want)
                return ogk_fail(e, "tensor %s: zeros part must be %" PRIu64 " bytes (N*ceil(k_blocks*bits/8))", nm, want);
            expect_total += want;
        } else if (zr) {
            return ogk_fail(e, "tensor %s: zeros part present but zero_points is \"none\"", nm);
        }
    } else {
        if (part_get(parts, "data", &t->data) != 1)
            return ogk_fail(e, "tensor %s: plain tensor needs a data part", nm);
        expect_total = count * ogk_dtype_size(t->dtype);
        if (t->data.size != expect_total)
            return ogk_fail(e, "tensor %s: data size %" PRIu64 " != prod(shape)*%zu = %" PRIu64, nm, t->data.size,
                            ogk_dtype_size(t->dtype), expect_total);
    }
    if (json_array_size(parts) != (ogk_dtype_quantised(t->dtype) ? 2u + (t->has_zp ? 1u : 0u) : 1u))
        return ogk_fail(e, "tensor %s: unexpected parts", nm);
    /* parts lie back to back inside the payload, in array order */
    uint64_t off = 0;
    size_t i;
    json_t *v;
    json_array_foreach(parts, i, v)
    {
        int ok = 1;
        if (jint(v, "offset", &ok) != off || !ok)
            return ogk_fail(e, "tensor %s: part %zu offset is not %" PRIu64, nm, i, off);
        off += jint(v, "size", &ok);
    }
    if (off != f->payload_len || off != expect_total)
        return ogk_fail(e, "tensor %s: payload %" PRIu64 " bytes, parts say %" PRIu64 ", shape says %" PRIu64, nm,
                        f->payload_len, off, expect_total);
    return 0;
}
