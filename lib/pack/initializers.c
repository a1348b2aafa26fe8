/* Initializer bytes: inline (raw_data, typed fields) or external (mmapped, bounds-checked), as one
 * normalised view per value. */
#define _GNU_SOURCE
#include "graph_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* ---- initializer bytes ---- */

/* loc: relative to the model file's directory (ONNX's rule; the model may sit in a subdirectory) */
static int ext_get(pack *p, const char *loc0, pack_ext **out)
{
    const char *slash = p->onnx_name ? strrchr(p->onnx_name, '/') : NULL;
    const char *loc = slash ? pack_printf(p, "%.*s/%s", (int)(slash - p->onnx_name), p->onnx_name, loc0) : loc0;
    for (size_t i = 0; i < p->n_ext; i++)
        if (!strcmp(p->ext[i].loc, loc)) {
            *out = &p->ext[i];
            return p->ext[i].ok;
        }
    pack_ext *nx = realloc(p->ext, (p->n_ext + 1) * sizeof *p->ext);
    char *lc = nx ? strdup(loc) : NULL, *path = lc ? pack_path(p, loc) : NULL;
    if (nx)
        p->ext = nx;
    if (!path) { /* no memory: the initializer is not read, the pack refused out_of_memory */
        free(lc);
        pack_oom(p);
        *out = NULL;
        return 0;
    }
    pack_ext *x = &p->ext[p->n_ext++];
    memset(x, 0, sizeof *x);
    x->loc = lc;
    *out = x;
    ogk_error e;
    if (ogk_map_open(&x->m, path, &e) == 0)
        x->ok = 1;
    else
        pack_refuse(p, pack_printf(p, "file %s", loc), pack_file_code(errno),
                    "external data file: %s", strchr(e.msg, ':') ? strchr(e.msg, ':') + 2 : e.msg);
    free(path);
    return x->ok;
}

static int parse_u64(const char *s, uint64_t *v)
{
    if (!s || !*s)
        return -1;
    uint64_t r = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || r > (UINT64_MAX - 9) / 10)
            return -1;
        r = r * 10 + (uint64_t)(*s - '0');
    }
    *v = r;
    return 0;
}

/* Resolve the bytes of an initializer once. Refusals name the tensor. */
int pg_resolve(G *g, int vi)
{
    gval *v = &g->v[vi];
    if (v->state)
        return v->state;
    pack *p = g->p;
    Onnx__TensorProto *t = v->init;
    rtensor *r = &v->rt;
    const char *what = pack_printf(p, "tensor %s", v->name);
    v->state = -1;
    r->dtype = t->has_data_type ? t->data_type : 0;
    if (t->n_dims > 8) {
        pack_refuse(p, what, "tensor_shape", "%zu dims", t->n_dims);
        return -1;
    }
    r->ndim = (int)t->n_dims;
    r->numel = 1;
    for (size_t i = 0; i < t->n_dims; i++) {
        if (t->dims[i] < 0 || t->dims[i] > ((int64_t)1 << 40)) {
            pack_refuse(p, what, "tensor_shape", "dimension %zu is %" PRId64, i, t->dims[i]);
            return -1;
        }
        r->dims[i] = (uint64_t)t->dims[i];
        if (r->dims[i] && r->numel > ((uint64_t)1 << 44) / r->dims[i]) {
            pack_refuse(p, what, "tensor_shape", "too many elements");
            return -1;
        }
        r->numel *= r->dims[i];
    }
    size_t es = pg_onnx_dtype_size(r->dtype);
    uint64_t want = r->dtype == T_UINT4 || r->dtype == T_INT4 ? (r->numel + 1) / 2 : r->numel * es;
    if (!es && r->dtype != T_UINT4 && r->dtype != T_INT4) {
        pack_refuse(p, what, "tensor_dtype", "element type %s (%d) is not supported", pg_onnx_dtype_name(r->dtype), r->dtype);
        return -1;
    }
    r->size = want;
    if (t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) {
        const char *loc = NULL, *off_s = NULL, *len_s = NULL;
        for (size_t i = 0; i < t->n_external_data; i++) {
            Onnx__StringStringEntryProto *kv = t->external_data[i];
            if (!kv->key)
                continue;
            if (!strcmp(kv->key, "location"))
                loc = kv->value;
            else if (!strcmp(kv->key, "offset"))
                off_s = kv->value;
            else if (!strcmp(kv->key, "length"))
                len_s = kv->value;
        }
        uint64_t off = 0, len = want;
        if (!loc || !*loc || loc[0] == '/' || !strcmp(loc, "..") || !strncmp(loc, "../", 3) || strstr(loc, "/../")) {
            pack_refuse(p, what, "external_data", "external location \"%s\" is not a file inside the pack", loc ? loc : "");
            return -1;
        }
        if ((off_s && parse_u64(off_s, &off)) || (len_s && parse_u64(len_s, &len))) {
            pack_refuse(p, what, "external_data", "external offset \"%s\" / length \"%s\" is not a number",
                        off_s ? off_s : "", len_s ? len_s : "");
            return -1;
        }
        if (len != want) {
            pack_refuse(p, what, "tensor_shape", "external length %" PRIu64 " != %" PRIu64 " (shape x %s)", len, want,
                        pg_onnx_dtype_name(r->dtype));
            return -1;
        }
        pack_ext *x;
        if (!ext_get(p, loc, &x))
            return -1; /* the file is refused once */
        if (off > x->m.size || len > x->m.size - off) {
            x->past_end++;
            if (off + len > x->need_end)
                x->need_end = off + len;
            pack_refuse(p, what, "external_data",
                        "offset %" PRIu64 " + length %" PRIu64 " runs past the end of %s (%zu bytes)", off, len, loc,
                        x->m.size);
            return -1;
        }
        r->data = x->m.data ? x->m.data + off : NULL;
        if (off + len > x->inb_end)
            x->inb_end = off + len;
    } else if (t->has_raw_data) {
        if (t->raw_data.len != want) {
            pack_refuse(p, what, "tensor_shape", "raw data is %zu bytes, shape x %s needs %" PRIu64, t->raw_data.len,
                        pg_onnx_dtype_name(r->dtype), want);
            return -1;
        }
        r->data = t->raw_data.data;
    } else {
        /* typed fields (small inline constants) */
        size_t n = 0;
        if (r->dtype == T_FLOAT) {
            n = t->n_float_data;
            r->data = (const uint8_t *)t->float_data;
        } else if (r->dtype == T_INT64) {
            n = t->n_int64_data;
            r->data = (const uint8_t *)t->int64_data;
        } else if (r->dtype == T_DOUBLE) {
            n = t->n_double_data;
            r->data = (const uint8_t *)t->double_data;
        } else if (r->dtype == T_UINT64 || r->dtype == T_UINT32) {
            n = t->n_uint64_data;
            if (r->dtype == T_UINT64)
                r->data = (const uint8_t *)t->uint64_data;
            else if (n == r->numel) {
                uint32_t *b = pack_own(p, malloc(n * 4 + 1));
                if (!b) /* the pack is refused out_of_memory */
                    return -1;
                for (size_t i = 0; i < n; i++)
                    b[i] = (uint32_t)t->uint64_data[i];
                r->data = (const uint8_t *)b;
            }
        } else if (r->dtype == T_INT32) {
            n = t->n_int32_data;
            r->data = (const uint8_t *)t->int32_data;
        } else if (es == 1 || es == 2) { /* one element per int32_data entry */
            n = t->n_int32_data;
            if (n == r->numel) {
                uint8_t *b = pack_own(p, malloc(n * es + 1));
                if (!b)
                    return -1;
                for (size_t i = 0; i < n; i++) {
                    uint16_t x = (uint16_t)t->int32_data[i];
                    memcpy(b + i * es, &x, es); /* little-endian host */
                }
                r->data = b;
            }
        } else {
            pack_refuse(p, what, "tensor_dtype", "inline %s data in typed fields is not supported", pg_onnx_dtype_name(r->dtype));
            return -1;
        }
        if (n != r->numel) {
            pack_refuse(p, what, "tensor_shape", "%zu inline values, shape has %" PRIu64, n, r->numel);
            return -1;
        }
    }
    v->state = 1;
    return 1;
}

/* The initializer behind a value, looking through ops that keep the bytes in place. */
int pg_init_of(const G *g, const char *name, int *sliced)
{
    for (int depth = 0; depth < 4; depth++) {
        int vi = pg_val_find(g, name);
        if (vi < 0)
            return -1;
        if (g->v[vi].init)
            return vi;
        int pn = g->v[vi].producer;
        if (pn < 0)
            return -1;
        if (is_op(g, pn, "Slice") && sliced)
            *sliced = 1;
        else if (!is_op(g, pn, "Reshape") && !is_op(g, pn, "Identity") && !is_op(g, pn, "Squeeze") &&
                 !is_op(g, pn, "Unsqueeze") && !is_op(g, pn, "Flatten"))
            return -1;
        name = in(g, pn, 0);
        if (!name)
            return -1;
    }
    return -1;
}
