/* GGUF v3 reader and block dequantisers. Written from the GGUF and ggml block format descriptions
 * (gguf.h), independently of writer.c and convert.c: the exactness check reads files through this. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"

typedef struct {
    char *key;
    uint32_t elem_type; /* arrays */
    uint64_t count;
    const uint8_t *at; /* first element */
    size_t nbytes;     /* the elements' bytes (strings with their lengths) */
} karr;

struct gguf_file {
    ogk_map map;
    uint32_t version;
    gguf_tensor *t;
    size_t nt;
    json_t *meta;
    karr *arrs;
    size_t narrs;
};

typedef struct {
    const uint8_t *p, *end;
    ogk_error *e;
    int bad;
} cursor;

static int need(cursor *c, uint64_t n, const char *what)
{
    if (c->bad)
        return -1;
    if ((uint64_t)(c->end - c->p) < n) {
        c->bad = 1;
        if (n == UINT64_MAX) /* an array whose count runs past the file (its size would overflow) */
            return ogk_fail(c->e, "truncated: %s runs past the end of the file (%lld bytes left)", what,
                            (long long)(c->end - c->p));
        return ogk_fail(c->e, "truncated: %s needs %llu bytes, %lld left", what, (unsigned long long)n,
                        (long long)(c->end - c->p));
    }
    return 0;
}
static uint32_t rd32(cursor *c, const char *what)
{
    uint32_t v = 0;
    if (!need(c, 4, what))
        memcpy(&v, c->p, 4), c->p += 4;
    return v;
}
static uint64_t rd64(cursor *c, const char *what)
{
    uint64_t v = 0;
    if (!need(c, 8, what))
        memcpy(&v, c->p, 8), c->p += 8;
    return v;
}
static const char *rdstr(cursor *c, uint64_t *len, const char *what)
{
    *len = rd64(c, what);
    if (need(c, *len, what))
        return NULL;
    const char *s = (const char *)c->p;
    c->p += *len;
    return s;
}

static uint64_t scalar_size(uint32_t type)
{
    switch (type) {
    case GGUF_U8: case GGUF_I8: case GGUF_BOOL: return 1;
    case GGUF_U16: case GGUF_I16: return 2;
    case GGUF_U32: case GGUF_I32: case GGUF_F32V: return 4;
    case GGUF_U64: case GGUF_I64: case GGUF_F64: return 8;
    default: return 0;
    }
}

static json_t *scalar_json(uint32_t type, const uint8_t *p)
{
    union {
        uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32; float f; uint64_t u64;
        int64_t i64; double d;
    } v;
    memcpy(&v, p, scalar_size(type));
    switch (type) {
    case GGUF_U8: return json_integer(v.u8);
    case GGUF_I8: return json_integer(v.i8);
    case GGUF_U16: return json_integer(v.u16);
    case GGUF_I16: return json_integer(v.i16);
    case GGUF_U32: return json_integer(v.u32);
    case GGUF_I32: return json_integer(v.i32);
    case GGUF_F32V: return json_real(v.f);
    case GGUF_BOOL: return json_boolean(v.u8);
    case GGUF_U64: return json_integer((json_int_t)v.u64);
    case GGUF_I64: return json_integer(v.i64);
    case GGUF_F64: return json_real(v.d);
    default: return json_null();
    }
}

static const char *type_word(uint32_t t)
{
    static const char *w[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"};
    return t < sizeof w / sizeof *w ? w[t] : "?";
}

static int read_kv(gguf_file *f, cursor *c, uint64_t idx)
{
    uint64_t klen;
    const char *k = rdstr(c, &klen, "key");
    uint32_t type = rd32(c, "value type");
    if (c->bad)
        return -1;
    char *key = strndup(k, klen);
    if (!key)
        return ogk_fail(c->e, "out of memory");
    if (json_object_get(f->meta, key)) {
        ogk_fail(c->e, "key %llu \"%s\": duplicate", (unsigned long long)idx, key);
        free(key);
        return -1;
    }
    json_t *val = NULL;
    if (type == GGUF_STR) {
        uint64_t len;
        const char *s = rdstr(c, &len, key);
        if (s)
            val = json_stringn_nocheck(s, len);
    } else if (type == GGUF_ARR) {
        uint32_t et = rd32(c, key);
        uint64_t n = rd64(c, key);
        if (!c->bad && et != GGUF_STR && !scalar_size(et)) {
            ogk_fail(c->e, "key %s: array of unknown type %u", key, et);
            free(key);
            return -1;
        }
        const uint8_t *first = c->p;
        if (et == GGUF_STR) {
            for (uint64_t i = 0; i < n && !c->bad; i++) {
                uint64_t len;
                rdstr(c, &len, key);
            }
        } else if (!c->bad && (n > (uint64_t)(c->end - c->p) / scalar_size(et))) {
            need(c, UINT64_MAX, key);
        } else if (!c->bad) {
            c->p += n * scalar_size(et);
        }
        if (!c->bad) {
            karr *a = realloc(f->arrs, (f->narrs + 1) * sizeof *a);
            if (!a) {
                free(key);
                return ogk_fail(c->e, "out of memory");
            }
            f->arrs = a;
            f->arrs[f->narrs++] = (karr){strdup(key), et, n, first, (size_t)(c->p - first)};
            if (n <= 16) {
                val = json_array();
                cursor d = {first, c->end, c->e, 0};
                for (uint64_t i = 0; i < n; i++) {
                    if (et == GGUF_STR) {
                        uint64_t len;
                        const char *s = rdstr(&d, &len, key);
                        json_array_append_new(val, json_stringn_nocheck(s, len));
                    } else {
                        json_array_append_new(val, scalar_json(et, d.p));
                        d.p += scalar_size(et);
                    }
                }
            } else {
                val = json_pack("{s:s,s:I}", "type", type_word(et), "count", (json_int_t)n);
            }
        }
    } else if (scalar_size(type)) {
        if (!need(c, scalar_size(type), key)) {
            val = scalar_json(type, c->p);
            c->p += scalar_size(type);
        }
    } else if (!c->bad) {
        ogk_fail(c->e, "key %s: unknown value type %u", key, type);
        c->bad = 1;
    }
    if (c->bad || !val) {
        json_decref(val);
        free(key);
        return -1;
    }
    json_object_set_new(f->meta, key, val);
    free(key);
    return 0;
}

gguf_file *gguf_open(const char *path, ogk_error *e)
{
    gguf_file *f = calloc(1, sizeof *f);
    if (!f) {
        ogk_fail(e, "out of memory");
        return NULL;
    }
    f->meta = json_object();
    static const ogk_magic magic = {"GGUF", 4, "a GGUF file"}; /* a pipe of anything else: refused at once */
    if (ogk_map_magic(&f->map, path, OGK_MAP_OPEN, &magic, e)) {
        int err = errno; /* ENOMEM: the caller's init failure */
        gguf_close(f);
        errno = err;
        return NULL;
    }
    ogk_error sub;
    cursor c = {f->map.data, f->map.data + f->map.size, &sub, 0};
    if (f->map.size < 4 || memcmp(f->map.data, "GGUF", 4) || f->map.size < 24) {
        if (f->map.size >= 4 && !memcmp(f->map.data, "GGUF", 4))
            ogk_fail(e, "%s: truncated GGUF: %zu bytes, shorter than its 24-byte header", path, f->map.size);
        else
            ogk_fail(e, "%s: not a GGUF file (no \"GGUF\" magic)", path);
        gguf_close(f);
        return NULL;
    }
    c.p += 4;
    f->version = rd32(&c, "version");
    if (f->version != 3) {
        ogk_fail(e, "%s: GGUF version %u, this reader knows 3", path, f->version);
        gguf_close(f);
        return NULL;
    }
    uint64_t nt = rd64(&c, "tensor count"), nkv = rd64(&c, "key/value count");
    uint64_t alignment = GGUF_ALIGN;
    if (nt > (1u << 24) || nkv > (1u << 24)) {
        ogk_fail(e, "%s: implausible counts (%llu tensors, %llu key/values)", path, (unsigned long long)nt,
                 (unsigned long long)nkv);
        gguf_close(f);
        return NULL;
    }
    for (uint64_t i = 0; i < nkv; i++)
        if (read_kv(f, &c, i))
            goto bad;
    json_t *al = json_object_get(f->meta, "general.alignment");
    if (al) {
        if (!json_is_integer(al) || json_integer_value(al) <= 0 || json_integer_value(al) > 65536 ||
            (json_integer_value(al) & (json_integer_value(al) - 1))) {
            ogk_fail(&sub, "general.alignment is not a power of two");
            goto bad;
        }
        alignment = (uint64_t)json_integer_value(al);
    }
    f->t = calloc(nt ? nt : 1, sizeof *f->t);
    if (!f->t) {
        ogk_fail(&sub, "out of memory");
        goto bad;
    }
    for (uint64_t i = 0; i < nt; i++) {
        gguf_tensor *t = &f->t[i];
        uint64_t len;
        const char *n = rdstr(&c, &len, "tensor name");
        uint32_t nd = rd32(&c, "tensor dims");
        if (c.bad)
            goto bad;
        f->nt++;
        if (!(t->name = strndup(n, len))) {
            ogk_fail(&sub, "out of memory");
            goto bad;
        }
        if (nd < 1 || nd > 4) {
            ogk_fail(&sub, "tensor %s: %u dimensions", t->name, nd);
            goto bad;
        }
        t->ndim = (int)nd;
        uint64_t rows = 1;
        for (uint32_t d = 0; d < nd; d++) {
            t->ne[d] = rd64(&c, "tensor shape");
            if (t->ne[d] == 0 || t->ne[d] > (1ull << 40) || (d && rows > (1ull << 40) / t->ne[d])) {
                if (!c.bad)
                    ogk_fail(&sub, "tensor %s: implausible dimension %llu", t->name, (unsigned long long)t->ne[d]);
                goto bad;
            }
            if (d)
                rows *= t->ne[d];
        }
        t->type = (int)rd32(&c, "tensor type");
        t->offset = rd64(&c, "tensor offset");
        if (c.bad)
            goto bad;
        uint64_t rb = gguf_row_bytes(t->type, t->ne[0]);
        if (!rb) {
            ogk_fail(&sub, "tensor %s: type %d with rows of %llu (a type this reader does not know, or rows not "
                     "whole blocks)", t->name, t->type, (unsigned long long)t->ne[0]);
            goto bad;
        }
        if (rows > UINT64_MAX / rb) {
            ogk_fail(&sub, "tensor %s: size overflows", t->name);
            goto bad;
        }
        t->nbytes = rb * rows;
        if (t->offset % alignment) {
            ogk_fail(&sub, "tensor %s: offset %llu not aligned to %llu", t->name, (unsigned long long)t->offset,
                     (unsigned long long)alignment);
            goto bad;
        }
        for (uint64_t j = 0; j < i; j++)
            if (!strcmp(f->t[j].name, t->name)) {
                ogk_fail(&sub, "tensor %s: duplicate name", t->name);
                goto bad;
            }
    }
    uint64_t head = (uint64_t)(c.p - f->map.data);
    uint64_t data = (head + alignment - 1) / alignment * alignment;
    for (size_t i = 0; i < f->nt; i++) {
        gguf_tensor *t = &f->t[i];
        if (data > f->map.size || t->offset > f->map.size - data || t->nbytes > f->map.size - data - t->offset) {
            ogk_fail(&sub, "tensor %s: data [%llu, +%llu) past the end of the file (%zu bytes)", t->name,
                     (unsigned long long)(data + t->offset), (unsigned long long)t->nbytes, f->map.size);
            goto bad;
        }
        t->data = f->map.data + data + t->offset;
    }
    return f;
bad:
    ogk_fail(e, "%s: malformed GGUF: %s", path, sub.msg);
    gguf_close(f);
    return NULL;
}

void gguf_close(gguf_file *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < f->nt; i++)
        free(f->t[i].name);
    free(f->t);
    for (size_t i = 0; i < f->narrs; i++)
        free(f->arrs[i].key);
    free(f->arrs);
    json_decref(f->meta);
    ogk_map_close(&f->map);
    free(f);
}

uint32_t gguf_version(const gguf_file *f) { return f->version; }
size_t gguf_tensor_count(const gguf_file *f) { return f->nt; }
const gguf_tensor *gguf_tensor_at(const gguf_file *f, size_t i) { return i < f->nt ? &f->t[i] : NULL; }
const json_t *gguf_meta(const gguf_file *f) { return f->meta; }

const gguf_tensor *gguf_find(const gguf_file *f, const char *name)
{
    for (size_t i = 0; i < f->nt; i++)
        if (!strcmp(f->t[i].name, name))
            return &f->t[i];
    return NULL;
}

static const karr *find_arr(const gguf_file *f, const char *key)
{
    for (size_t i = 0; i < f->narrs; i++)
        if (!strcmp(f->arrs[i].key, key))
            return &f->arrs[i];
    return NULL;
}

int gguf_meta_arr_len(const gguf_file *f, const char *key, size_t *n)
{
    const karr *a = find_arr(f, key);
    if (!a)
        return -1;
    *n = a->count;
    return 0;
}

int gguf_meta_arr_raw(const gguf_file *f, const char *key, int *elem_type, uint64_t *count, const uint8_t **p,
                      size_t *nbytes)
{
    const karr *a = find_arr(f, key);
    if (!a)
        return -1;
    *elem_type = (int)a->elem_type, *count = a->count, *p = a->at, *nbytes = a->nbytes;
    return 0;
}

int gguf_meta_str_at(const gguf_file *f, const char *key, size_t i, const char **s, size_t *len)
{
    const karr *a = find_arr(f, key);
    if (!a || a->elem_type != GGUF_STR || i >= a->count)
        return -1;
    /* walk from the first element (bounds were checked when the array was parsed) */
    const uint8_t *p = a->at;
    for (size_t j = 0;; j++) {
        uint64_t l;
        memcpy(&l, p, 8);
        if (j == i) {
            *s = (const char *)p + 8;
            *len = l;
            return 0;
        }
        p += 8 + l;
    }
}

/* ---------------------------------------------------------------- block formats */

static float half(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return ogk_f16_to_f32(h);
}

/* the 4-bit value of element i (0..31) of a Q4_0/Q4_1 block's 16 code bytes */
static int nib(const uint8_t *qs, int i, int control)
{
    if (control & GGUF_CTRL_NIBBLES) /* the MatMulNBits order, deliberately wrong here */
        return (qs[i / 2] >> (4 * (i % 2))) & 15;
    return i < 16 ? qs[i] & 15 : qs[i - 16] >> 4;
}

int gguf_dequant_row(const gguf_tensor *t, uint64_t row, float *out, int control)
{
    uint64_t n = t->ne[0], rb = gguf_row_bytes(t->type, n);
    const uint8_t *p = t->data + row * rb;
    switch (t->type) {
    case GGML_F32:
        memcpy(out, p, n * 4);
        break;
    case GGML_F16:
        for (uint64_t i = 0; i < n; i++)
            out[i] = half(p + 2 * i);
        break;
    case GGML_Q4_0:
        for (uint64_t b = 0; b < n / 32; b++, p += 18) {
            float d = half(p);
            int off = control & GGUF_CTRL_M_SIGN ? 8 : -8;
            for (int i = 0; i < 32; i++)
                out[b * 32 + i] = (float)(nib(p + 2, i, control) + off) * d;
        }
        break;
    case GGML_Q4_1:
        for (uint64_t b = 0; b < n / 32; b++, p += 20) {
            float d = half(p), m = half(p + 2);
            if (control & GGUF_CTRL_M_SIGN)
                m = -m;
            for (int i = 0; i < 32; i++)
                out[b * 32 + i] = (float)nib(p + 4, i, control) * d + m;
        }
        break;
    case GGML_Q8_0:
        for (uint64_t b = 0; b < n / 32; b++, p += 34) {
            float d = half(p);
            for (int i = 0; i < 32; i++)
                out[b * 32 + i] = (float)(int8_t)p[2 + i] * d;
        }
        break;
    default:
        return -1;
    }
    if (control & GGUF_CTRL_REVERSE)
        for (uint64_t b = 0; b + 32 <= n; b += 32)
            for (int i = 0; i < 16; i++) {
                float x = out[b + i];
                out[b + i] = out[b + 31 - i];
                out[b + 31 - i] = x;
            }
    return 0;
}
