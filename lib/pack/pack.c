/* The pack as a whole: directory and files, genai_config.json / config.json / tokenizer_config.json,
 * the normalised model description, the assets, the flavour, the oga-info report. The ONNX graph is
 * graph.c's. */
#define _GNU_SOURCE
#include "pack_int.h"

#include "mdesc/mdesc.h"
#include "ogax/ogax.h" /* OGAX_MAX_ASSET: an asset the stream can carry is one the pack reader takes */
#include "tok/tok.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- ownership and lists ---- */

void pack_oom(pack *p) { p->oom = 1; }

/* v (an array of *cap elements of sz bytes) with room for element n: grown (to `first`, then doubled) where
 * n is past it; NULL with the pack out of memory (v stays the caller's) */
static void *pack_room(pack *p, void *v, size_t n, size_t *cap, size_t first, size_t sz)
{
    if (n < *cap)
        return v;
    size_t c = *cap ? 2 * *cap : first;
    void *nv = realloc(v, c * sz);
    if (!nv) {
        pack_oom(p);
        return NULL;
    }
    *cap = c;
    return nv;
}

void *pack_own(pack *p, void *ptr)
{
    if (!ptr) {
        pack_oom(p);
        return NULL;
    }
    void **o = pack_room(p, p->owned, p->n_owned, &p->cap_owned, 64, sizeof *o);
    if (!o) {
        free(ptr);
        return NULL;
    }
    p->owned = o;
    p->owned[p->n_owned++] = ptr;
    return ptr;
}

static char no_text[1]; /* a string the pack had no memory for: "" (nothing is written into it) */

char *pack_strdup(pack *p, const char *s)
{
    char *r = pack_own(p, strdup(s ? s : ""));
    return r ? r : no_text;
}

char *pack_printf(pack *p, const char *fmt, ...)
{
    va_list ap;
    char *s = NULL;
    va_start(ap, fmt);
    if (vasprintf(&s, fmt, ap) < 0)
        s = NULL;
    va_end(ap);
    s = pack_own(p, s);
    return s ? s : no_text;
}

/* Text for the JSON report must be UTF-8: an invalid byte (a file name from the directory, a name cut
 * by a length limit) becomes '?'. In place; returns s. */
char *pack_utf8_safe(char *s)
{
    size_t n = strlen(s);
    for (size_t i = 0; (i += tok_utf8_check(s + i, n - i)) < n;)
        s[i] = '?';
    return s;
}

/* The refusal of a pack whose reading ran out of memory, in the slot pack_refuse keeps free for it */
static void refuse_oom(pack *p)
{
    if (!p->oom || p->n_r == p->cap_r)
        return;
    pack_refusal *r = &p->r[p->n_r++];
    r->what = "pack";
    r->code = "out_of_memory";
    r->reason = "out of memory while reading the pack (not judged: this process's memory limit)";
}

void pack_refuse(pack *p, const char *what, const char *code, const char *fmt, ...)
{
    if (p->oom) /* what follows a failed allocation may be its consequence, not the pack's fault */
        return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    for (size_t i = 0; i < p->n_r; i++) /* one refusal once, however many checks come to it */
        if (p->r[i].code == code && !strcmp(p->r[i].what, what) && !strcmp(p->r[i].reason, buf))
            return;
    pack_refusal *rs = pack_room(p, p->r, p->n_r + 1, &p->cap_r, 16, sizeof *rs); /* one slot stays free for refuse_oom */
    if (!rs)
        return;
    p->r = rs;
    char *w = pack_strdup(p, what), *why = pack_strdup(p, buf);
    if (p->oom)
        return;
    pack_refusal *r = &p->r[p->n_r++];
    r->what = pack_utf8_safe(w);
    r->code = code;
    r->reason = pack_utf8_safe(why);
}

pack_tensor *pack_add_tensor(pack *p)
{
    pack_tensor *nt = pack_room(p, p->t, p->n_t, &p->cap_t, 64, sizeof *nt);
    if (!nt) { /* the caller fills a tensor that is not kept; the pack is refused out_of_memory */
        static pack_tensor lost;
        memset(&lost, 0, sizeof lost);
        return &lost;
    }
    p->t = nt;
    pack_tensor *t = &p->t[p->n_t++];
    memset(t, 0, sizeof *t);
    t->accuracy_level = -1;
    return t;
}

/* ---- accessors ---- */

const char *pack_flavour_name(int f)
{
    switch (f) {
    case PACK_BUILDER_CPU: return "builder-cpu";
    case PACK_BUILDER_AMD: return "builder-amd";
    case PACK_AMD_NPU: return "amd-npu";
    default: return "unknown";
    }
}
const char *pack_dir(const pack *p) { return p->dir; }
const char *pack_dir_text(const pack *p) { return p->dir_text; }
int pack_flavour(const pack *p) { return p->flavour; }
const json_t *pack_model(const pack *p) { return p->model; }
size_t pack_tensor_count(const pack *p) { return p->n_t; }
const pack_tensor *pack_tensor_at(const pack *p, size_t i) { return i < p->n_t ? &p->t[i] : NULL; }
size_t pack_refusal_count(const pack *p) { return p->n_r; }
const pack_refusal *pack_refusal_at(const pack *p, size_t i) { return i < p->n_r ? &p->r[i] : NULL; }
const char *pack_file_code(int err)
{
    return err == ENOENT ? "file_missing" : err == ENOMEM ? "out_of_memory" : "file_unreadable";
}

int pack_exit_code(const pack *p)
{
    for (size_t i = 0; i < p->n_r; i++)
        if (!strcmp(p->r[i].code, "out_of_memory"))
            return OGK_EXIT_INIT;
    return p->n_r ? OGK_EXIT_INPUT : OGK_EXIT_OK;
}
size_t pack_asset_count(const pack *p) { return p->n_a; }
const pack_asset *pack_asset_at(const pack *p, size_t i) { return i < p->n_a ? &p->a[i] : NULL; }

const pack_tensor *pack_find(const pack *p, const char *role)
{
    for (size_t i = 0; i < p->n_t; i++)
        if (!strcmp(p->t[i].role, role))
            return &p->t[i];
    return NULL;
}

const pack_tensor *pack_find_name(const pack *p, const char *name)
{
    for (size_t i = 0; i < p->n_t; i++)
        if (!strcmp(p->t[i].name, name))
            return &p->t[i];
    return NULL;
}

void pack_close(pack *p)
{
    if (!p)
        return;
    if (p->onnx)
        onnx__model_proto__free_unpacked(p->onnx, NULL);
    ogk_map_close(&p->onnx_map);
    for (size_t i = 0; i < p->n_ext; i++) {
        ogk_map_close(&p->ext[i].m);
        free(p->ext[i].loc);
    }
    free(p->ext);
    json_decref(p->genai);
    json_decref(p->hfcfg);
    json_decref(p->tokcfg);
    json_decref(p->model);
    json_decref(p->files);
    for (size_t i = 0; i < p->n_owned; i++)
        free(p->owned[i]);
    free(p->owned);
    free(p->t);
    free(p->r);
    free(p->a);
    free(p->onnx_name);
    free(p->dir);
    free(p);
}

/* ---- files ---- */

char *pack_path(pack *p, const char *name)
{
    char *s = NULL;
    if (asprintf(&s, "%s/%s", p->dir, name) < 0) {
        pack_oom(p);
        return NULL;
    }
    return s;
}

/* 1: NAME is a regular file (symlinks followed, as Hugging Face snapshot directories need), 0: absent,
 * -1: present but something else (a FIFO would hang a reader): the caller refuses it by name. */
/* 1 a regular file, 0 absent, -1 there but not one to read: another kind, a symbolic link to nothing (a
 * snapshot whose blob never arrived), or stat failing otherwise (refuse_irregular says which) */
static int exists(pack *p, const char *name)
{
    char *path = pack_path(p, name);
    if (!path) /* no memory: not "missing" (the pack is refused out_of_memory) */
        return -1;
    struct stat st;
    int r = stat(path, &st) == 0 ? (S_ISREG(st.st_mode) ? 1 : -1) : errno == ENOENT && lstat(path, &st) != 0 ? 0 : -1;
    free(path);
    return r;
}

static void refuse_irregular(pack *p, const char *name)
{
    char *path = pack_path(p, name);
    if (!path)
        return;
    struct stat st;
    char why[160];
    if (stat(path, &st) == 0)
        snprintf(why, sizeof why, "not a regular file (%s)", ogk_file_kind(st.st_mode));
    else if (errno == ENOENT)
        snprintf(why, sizeof why, "a symbolic link to a file that does not exist");
    else
        snprintf(why, sizeof why, "cannot be read (%s)", strerror(errno));
    free(path);
    pack_refuse(p, pack_printf(p, "file %s", name), "file_unreadable", "%s", why);
}

/* JSON from a file through ogk_read_file (regular files only); NULL with e / je filled */
static json_t *load_json(const char *path, int flags, json_error_t *je, ogk_error *e)
{
    size_t len;
    char *buf = ogk_read_file(path, &len, e);
    if (!buf) {
        snprintf(je->text, sizeof je->text, "%.150s", e->msg);
        je->line = 0;
        return NULL;
    }
    json_t *j = json_loadb(buf, len, flags, je);
    free(buf);
    return j;
}

/* Parse a JSON file of the pack: NULL when absent (missing=1) or broken (refused). */
static json_t *read_json(pack *p, const char *name, int flags, int *missing)
{
    *missing = 0;
    int ex = exists(p, name);
    if (ex <= 0) {
        if (ex < 0)
            refuse_irregular(p, name);
        *missing = ex == 0;
        return NULL;
    }
    char *path = pack_path(p, name);
    if (!path)
        return NULL;
    json_error_t je;
    ogk_error e;
    e.msg[0] = 0;
    errno = 0;
    json_t *j = load_json(path, JSON_REJECT_DUPLICATES | flags, &je, &e);
    int err = errno;
    free(path);
    if (!j && e.msg[0]) {
        pack_refuse(p, pack_printf(p, "file %s", name), err == ENOMEM ? "out_of_memory" : "file_unreadable", "%s", e.msg);
        return NULL;
    }
    if (!j) {
        pack_refuse(p, name, "config_json", "not valid JSON: %s (line %d)", je.text, je.line);
        return NULL;
    }
    if (!json_is_object(j)) {
        pack_refuse(p, name, "config_json", "not a JSON object");
        json_decref(j);
        return NULL;
    }
    return j;
}

/* Typed config fields. Each returns 1 present and well typed, 0 absent, -1 wrong type; required
 * fields that are absent and wrong types are refused (what = "FILE: a.b.c"). */
static int cfg_get(pack *p, const char *file, json_t *obj, const char *path, json_t **out)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    json_t *cur = obj;
    for (char *tok = buf, *dot; cur && tok; tok = dot ? dot + 1 : NULL) {
        dot = strchr(tok, '.');
        if (dot)
            *dot = 0;
        if (!json_is_object(cur)) {
            pack_refuse(p, pack_printf(p, "%s: %s", file, path), "config_type", "a parent of this key is not an object");
            return -1;
        }
        cur = json_object_get(cur, tok);
    }
    *out = cur;
    return cur && !json_is_null(cur) ? 1 : 0;
}

static const char *json_type_name(const json_t *j)
{
    switch (json_typeof(j)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

/* cfg_get, refusing an absent key when it is required */
static int cfg_need(pack *p, const char *file, json_t *obj, const char *path, int required, json_t **j)
{
    int r = cfg_get(p, file, obj, path, j);
    if (r == 0 && required)
        pack_refuse(p, pack_printf(p, "%s: %s", file, path), "config_missing", "required key is missing");
    return r;
}

static int cfg_int(pack *p, const char *file, json_t *obj, const char *path, int required, long long *v)
{
    json_t *j;
    int r = cfg_need(p, file, obj, path, required, &j);
    if (r <= 0)
        return r;
    if (!json_is_integer(j) || json_integer_value(j) < 0) {
        pack_refuse(p, pack_printf(p, "%s: %s", file, path), "config_type", "expected a non-negative integer, got %s",
                    json_type_name(j));
        return -1;
    }
    *v = json_integer_value(j);
    return 1;
}

static int cfg_num(pack *p, const char *file, json_t *obj, const char *path, double *v)
{
    json_t *j;
    int r = cfg_get(p, file, obj, path, &j);
    if (r <= 0)
        return r;
    if (!json_is_number(j)) {
        pack_refuse(p, pack_printf(p, "%s: %s", file, path), "config_type", "expected a number, got %s",
                    json_type_name(j));
        return -1;
    }
    *v = json_number_value(j);
    return 1;
}

static int cfg_str(pack *p, const char *file, json_t *obj, const char *path, int required, const char **v)
{
    json_t *j;
    int r = cfg_need(p, file, obj, path, required, &j);
    if (r <= 0)
        return r;
    if (!json_is_string(j)) {
        pack_refuse(p, pack_printf(p, "%s: %s", file, path), "config_type", "expected a string, got %s",
                    json_type_name(j));
        return -1;
    }
    *v = json_string_value(j);
    return 1;
}

/* Text files a runtime may need, in asset order. The first two are the runtime's minimum. */
static const char *const ASSETS[] = {
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
    "chat_template.jinja", "generation_config.json", "genai_config.json", "config.json",
    "vocab.json", "merges.txt", "tokenizer.model",
};
#define N_ASSETS (sizeof ASSETS / sizeof ASSETS[0])

/* the asset named name, or NULL */
static const pack_asset *asset_named(const pack *p, const char *name)
{
    for (size_t i = 0; i < p->n_a; i++)
        if (!strcmp(p->a[i].name, name))
            return &p->a[i];
    return NULL;
}

/* a as asset number at (the ones from there on move up one) */
static void asset_insert(pack *p, size_t at, pack_asset a)
{
    pack_asset *na = pack_room(p, p->a, p->n_a, &p->cap_a, 16, sizeof *na);
    if (!na)
        return;
    p->a = na;
    memmove(p->a + at + 1, p->a + at, (p->n_a - at) * sizeof *p->a);
    p->a[at] = a;
    p->n_a++;
}

static void read_assets(pack *p)
{
    json_t *present = json_array(), *missing = json_array();
    for (size_t i = 0; i < N_ASSETS; i++) {
        const char *name = ASSETS[i];
        int ex = exists(p, name);
        if (ex < 0 && strcmp(name, "genai_config.json") && strcmp(name, "config.json") &&
            strcmp(name, "tokenizer_config.json"))
            refuse_irregular(p, name); /* the three JSON files were refused when they were read */
        if (ex <= 0) {
            json_array_append_new(missing, json_string(name));
            continue;
        }
        json_array_append_new(present, json_string(name));
        char *path = pack_path(p, name);
        if (!path)
            continue;
        ogk_error e;
        size_t len = 0;
        char *buf = ogk_read_file(path, &len, &e);
        int err = errno;
        free(path);
        if (!buf) {
            pack_refuse(p, pack_printf(p, "file %s", name), err == ENOMEM ? "out_of_memory" : "file_unreadable", "%s",
                        e.msg);
            continue;
        }
        if (!pack_own(p, buf)) /* freed */
            continue;
        if (len > OGAX_MAX_ASSET) {
            pack_refuse(p, pack_printf(p, "file %s", name), "file_unreadable", "%zu bytes, larger than the %u MiB asset limit",
                        len, OGAX_MAX_ASSET >> 20);
            continue;
        }
        asset_insert(p, p->n_a, (pack_asset){name, (const uint8_t *)buf, len});
    }
    const char *converted = NULL;
    if (!exists(p, "tokenizer.json")) {
        const pack_asset *sp = asset_named(p, "tokenizer.model"), *cf = asset_named(p, "tokenizer_config.json");
        if (!sp) {
            pack_refuse(p, "file tokenizer.json", "tokenizer_missing",
                        "missing: the runtime needs the Hugging Face tokenizer.json of the pack, or a "
                        "SentencePiece tokenizer.model");
        } else {
            /* a SentencePiece pack (ChatGLM3, older Llama exports): tokenizer.json made from tokenizer.model,
             * carried as the asset the runtime reads (the model file stays an asset too) */
            ogk_error e;
            size_t jn = 0;
            char *js = tok_spm_json(sp->data, sp->size, cf ? (const char *)cf->data : NULL, cf ? cf->size : 0, &jn, &e);
            if (!js) {
                pack_refuse(p, "file tokenizer.model", "tokenizer", "%s", e.msg);
            } else if (pack_own(p, js)) {
                asset_insert(p, 0, (pack_asset){"tokenizer.json", (const uint8_t *)js, jn}); /* first, as in ASSETS */
                converted = "tokenizer.model";
            }
        }
    }
    p->files = json_pack("{s:I,s:I,s:o,s:o}", "present", (json_int_t)json_array_size(present), "known",
                         (json_int_t)N_ASSETS, "present_files", present, "missing_files", missing);
    if (converted)
        json_object_set_new(p->files, "tokenizer_json_from", json_string(converted));
}

/* Files only Ryzen AI NPU packs have: their buffers are not publicly documented, so each is refused. */
static int npu_file(const char *name)
{
    size_t n = strlen(name);
#define ENDS(s) (n >= sizeof(s) - 1 && !strcmp(name + n - (sizeof(s) - 1), s))
    return ENDS(".const") || ENDS(".fconst") || ENDS(".state") ||
           !strcmp(name, "prefill.bin") || !strcmp(name, "prefill.pb.bin") || !strcmp(name, "rai_config.json");
#undef ENDS
}

/* A DynamicDispatch _meta.json names the weights it packed into .const buffers: refuse each by name. */
static void refuse_meta_tensors(pack *p, const char *name)
{
    char *path = pack_path(p, name);
    if (!path)
        return;
    json_error_t je;
    ogk_error e;
    json_t *m = load_json(path, JSON_DECODE_INT_AS_REAL, &je, &e);
    free(path);
    json_t *tm = json_object_get(m, "tensor_map");
    const char *k;
    json_t *v;
    json_object_foreach(tm, k, v)
    {
        const char *label = json_string_value(json_object_get(v, "packed_buffer_label"));
        const char *file = json_string_value(json_object_get(v, "file_name"));
        if (label && !strcmp(label, "const"))
            pack_refuse(p, pack_printf(p, "tensor %s", k), "npu_packed",
                        "packed into the Ryzen AI buffer %s (%s): format not publicly documented", file ? file : "?", name);
    }
    json_decref(m);
}

static void scan_npu_files(pack *p)
{
    const char *dirs[] = {"", ".cache"};
    for (int d = 0; d < 2; d++) {
        char *path = d ? pack_path(p, dirs[d]) : strdup(p->dir);
        if (!path) {
            pack_oom(p);
            continue;
        }
        DIR *dh = opendir(path);
        free(path);
        if (!dh)
            continue;
        struct dirent *de;
        char **names = NULL;
        size_t nn = 0;
        while ((de = readdir(dh))) {
            const char *nm = de->d_name;
            size_t n = strlen(nm);
            int meta = d == 1 && n > 10 && !strcmp(nm + n - 10, "_meta.json");
            if (meta || npu_file(nm)) {
                char **nb = realloc(names, (nn + 1) * sizeof *names);
                if (!nb) {
                    pack_oom(p);
                    break;
                }
                names = nb;
                names[nn++] = d ? pack_printf(p, ".cache/%s", nm) : pack_strdup(p, nm);
            }
        }
        closedir(dh);
        /* directory order is arbitrary: report in name order */
        for (size_t i = 0; i < nn; i++)
            for (size_t j = i + 1; j < nn; j++)
                if (strcmp(names[j], names[i]) < 0) {
                    char *t = names[i];
                    names[i] = names[j];
                    names[j] = t;
                }
        for (size_t i = 0; i < nn; i++) {
            p->npu_files++;
            if (strcmp(names[i], "rai_config.json"))
                pack_refuse(p, pack_printf(p, "file %s", names[i]), "npu_packed",
                            "Ryzen AI NPU artefact: its buffer format is not publicly documented");
            size_t n = strlen(names[i]);
            if (n > 10 && !strcmp(names[i] + n - 10, "_meta.json"))
                refuse_meta_tensors(p, names[i]);
        }
        free(names);
    }
}

/* ---- the model description ---- */

static json_t *jint_or_null(int have, long long v) { return have > 0 ? json_integer(v) : json_null(); }

/* Shortest decimal that reads back as the same float (for epsilons taken from graph attributes). */
static double float_as_short_double(float f)
{
    char buf[32];
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)f);
        if ((float)strtod(buf, NULL) == f)
            return strtod(buf, NULL);
    }
    return (double)f;
}

static const char *family_of(const char *type)
{
    if (!type)
        return NULL;
    if (!strcmp(type, "mistral"))
        return "llama";
    return type;
}

/* the pack's chat template: chat_template.jinja where there is one (transformers lets the file clobber
 * tokenizer_config.json's), else tokenizer_config.json's (a string, or the named list's "default") */
#define TEMPLATE_MAX (1u << 20) /* real templates are tens of KiB; the model frame holding it is at most 16 MiB */
static json_t *chat_template(pack *p)
{
    const pack_asset *jf = asset_named(p, "chat_template.jinja");
    if (jf && jf->size > TEMPLATE_MAX) {
        pack_refuse(p, "file chat_template.jinja", "too_large", "%zu bytes, larger than the %u MiB chat template limit",
                    (size_t)jf->size, TEMPLATE_MAX >> 20);
        return json_null();
    }
    if (jf) {
        size_t bad = tok_utf8_check((const char *)jf->data, jf->size);
        if (bad < jf->size) {
            pack_refuse(p, "file chat_template.jinja", "not_utf8", "not UTF-8 text (an invalid byte at offset %zu)", bad);
            return json_null();
        }
        return json_stringn((const char *)jf->data, jf->size);
    }
    if (p->tokcfg) {
        json_t *ct = json_object_get(p->tokcfg, "chat_template");
        if (json_is_string(ct) && json_string_length(ct) > TEMPLATE_MAX) {
            pack_refuse(p, "file tokenizer_config.json: chat_template", "too_large",
                        "%zu bytes, larger than the %u MiB chat template limit", json_string_length(ct), TEMPLATE_MAX >> 20);
            return json_null();
        }
        if (json_is_string(ct))
            return json_incref(ct);
        if (json_is_array(ct)) { /* [{"name": "default", "template": "..."}, ...] */
            size_t i;
            json_t *v, *first = NULL;
            json_array_foreach(ct, i, v)
            {
                json_t *t = json_object_get(v, "template");
                if (!json_is_string(t) || json_string_length(t) > TEMPLATE_MAX)
                    continue;
                if (!first)
                    first = t;
                if (json_is_string(json_object_get(v, "name")) && !strcmp(json_string_value(json_object_get(v, "name")), "default"))
                    return json_incref(t);
            }
            if (first)
                return json_incref(first);
        }
    }
    return json_null();
}

static void build_model(pack *p)
{
    const char *G = "genai_config.json", *C = "config.json";
    json_t *g = p->genai ? p->genai : json_object(), *c = p->hfcfg;
    long long vocab = 0, ctx = 0, hidden = 0, heads = 0, kv = 0, layers = 0, head = 0, inter = 0, bos = 0, pad = 0;
    const char *type = NULL;
    int req = p->genai != NULL; /* a missing genai_config.json is refused once, not per key */
    cfg_str(p, G, g, "model.type", req, &type);
    int h_vocab = cfg_int(p, G, g, "model.vocab_size", req, &vocab);
    int h_ctx = cfg_int(p, G, g, "model.context_length", req, &ctx);
    int h_hidden = cfg_int(p, G, g, "model.decoder.hidden_size", req, &hidden);
    int h_heads = cfg_int(p, G, g, "model.decoder.num_attention_heads", req, &heads);
    int h_kv = cfg_int(p, G, g, "model.decoder.num_key_value_heads", req, &kv);
    int h_layers = cfg_int(p, G, g, "model.decoder.num_hidden_layers", req, &layers);
    int h_head = cfg_int(p, G, g, "model.decoder.head_size", req, &head);
    int h_bos = cfg_int(p, G, g, "model.bos_token_id", 0, &bos);
    int h_pad = cfg_int(p, G, g, "model.pad_token_id", 0, &pad);
    json_t *eos = json_array(), *ej;
    int r = cfg_get(p, G, g, "model.eos_token_id", &ej);
    if (r == 0 && req)
        pack_refuse(p, "genai_config.json: model.eos_token_id", "config_missing", "required key is missing");
    else if (r > 0) {
        if (json_is_integer(ej) && json_integer_value(ej) >= 0)
            json_array_append(eos, ej);
        else if (json_is_array(ej) && json_array_size(ej) > 0) {
            size_t i;
            json_t *v;
            json_array_foreach(ej, i, v)
            {
                if (!json_is_integer(v) || json_integer_value(v) < 0) {
                    pack_refuse(p, "genai_config.json: model.eos_token_id", "config_type",
                                "expected an integer or an array of integers, element %zu is %s", i, json_type_name(v));
                    break;
                }
                json_array_append(eos, v);
            }
        } else
            pack_refuse(p, "genai_config.json: model.eos_token_id", "config_type",
                        "expected an integer or an array of integers, got %s", json_type_name(ej));
    }
    /* config.json (Hugging Face) fills what genai_config.json does not say and is cross-checked */
    double theta = 0, eps_cfg = 0, prf = 0;
    int h_theta = 0, h_eps = 0, h_inter = 0, h_prf = 0;
    json_t *scaling = NULL;
    if (c) {
        h_inter = cfg_int(p, C, c, "intermediate_size", 0, &inter);
        h_eps = cfg_num(p, C, c, "rms_norm_eps", &eps_cfg);
        h_theta = cfg_num(p, C, c, "rope_theta", &theta);
        if (h_theta == 0)
            h_theta = cfg_num(p, C, c, "rope_parameters.rope_theta", &theta);
        h_prf = cfg_num(p, C, c, "partial_rotary_factor", &prf);
        /* what the runtime would replace by a default or compute NaN from: refused, not replaced */
        if (h_eps > 0 && !(eps_cfg > 0 && isfinite(eps_cfg)))
            pack_refuse(p, "config.json: rms_norm_eps", "config_type", "%g (want a positive number)", eps_cfg), h_eps = 0;
        if (h_theta > 0 && !(theta > 0 && isfinite(theta)))
            pack_refuse(p, "config.json: rope_theta", "config_type", "%g (want a positive number)", theta), h_theta = 0;
        if (h_prf > 0 && !(prf > 0 && prf <= 1))
            pack_refuse(p, "config.json: partial_rotary_factor", "config_type", "%g (want a number in (0, 1])", prf), h_prf = 0;
        json_t *s = json_object_get(c, "rope_scaling");
        if (json_is_object(s))
            scaling = s;
        long long v;
        if (cfg_int(p, C, c, "vocab_size", 0, &v) > 0 && h_vocab > 0 && v != vocab)
            pack_refuse(p, "genai_config.json: model.vocab_size", "config_dims",
                        "%lld contradicts config.json vocab_size %lld", vocab, v);
        if (cfg_int(p, C, c, "hidden_size", 0, &v) > 0 && h_hidden > 0 && v != hidden)
            pack_refuse(p, "genai_config.json: model.decoder.hidden_size", "config_dims",
                        "%lld contradicts config.json hidden_size %lld", hidden, v);
        if (cfg_int(p, C, c, "num_hidden_layers", 0, &v) > 0 && h_layers > 0 && v != layers)
            pack_refuse(p, "genai_config.json: model.decoder.num_hidden_layers", "config_dims",
                        "%lld contradicts config.json num_hidden_layers %lld", layers, v);
    }
    /* intermediate size: config.json, else the MLP tensors */
    if (h_inter <= 0) {
        const pack_tensor *gate = pack_find(p, "layers.0.mlp.gate");
        if (gate && ogk_dtype_quantised(gate->dtype)) {
            inter = gate->n;
            h_inter = 1;
        }
    }
    /* rms epsilon: the graph's norm attribute is what the runtime computes with */
    double eps = -1;
    if (p->g.rms_eps >= 0) {
        eps = float_as_short_double(p->g.rms_eps_f);
        if (h_eps > 0 && (float)eps_cfg == p->g.rms_eps_f)
            eps = eps_cfg;
        else if (h_eps > 0 && fabs(eps_cfg - eps) > 1e-3 * eps)
            pack_refuse(p, "config.json: rms_norm_eps", "config_dims", "%g contradicts the graph's norm epsilon %g",
                        eps_cfg, eps);
    } else if (h_eps > 0)
        eps = eps_cfg;

    int rope_dim = p->g.rope_dim > 0 ? p->g.rope_dim : -1;
    if (rope_dim < 0 && h_head > 0)
        rope_dim = (int)(h_prf > 0 ? prf * (double)head : (double)head);
    json_t *rope = json_pack("{s:o,s:o,s:o,s:o,s:o}", "theta", h_theta > 0 ? json_real(theta) : json_null(), "dim",
                             rope_dim > 0 ? json_integer(rope_dim) : json_null(), "interleaved",
                             p->g.rope_interleaved >= 0 ? json_boolean(p->g.rope_interleaved) : json_null(),
                             "cache_rows", p->g.rope_rows ? json_integer((json_int_t)p->g.rope_rows) : json_null(),
                             "scaling", scaling ? json_deep_copy(scaling) : json_null());
    if (p->g.rope_long_after) /* LongRoPE: rope.cos / rope.sin up to this length, rope.cos_long / sin_long past it */
        json_object_set_new(rope, "long_after", json_integer((json_int_t)p->g.rope_long_after));
    json_t *padj = h_pad > 0 ? json_integer(pad) : json_array_size(eos) ? json_incref(json_array_get(eos, 0)) : json_null();
    const char *fam = family_of(type);
    p->model = json_pack("{s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o}",
                         "family", fam ? json_string(fam) : json_null(), "model_type", type ? json_string(type) : json_null(),
                         "vocab_size", jint_or_null(h_vocab, vocab), "hidden_size", jint_or_null(h_hidden, hidden),
                         "intermediate_size", jint_or_null(h_inter, inter), "num_layers", jint_or_null(h_layers, layers),
                         "num_heads", jint_or_null(h_heads, heads), "num_kv_heads", jint_or_null(h_kv, kv), "head_dim",
                         jint_or_null(h_head, head), "context_length", jint_or_null(h_ctx, ctx), "rms_norm_eps",
                         eps > 0 ? json_real(eps) : json_null(), "rope", rope, "tie_embeddings",
                         json_boolean(p->g.tied), "bos_token_id", jint_or_null(h_bos, bos), "eos_token_ids", eos,
                         "pad_token_id", padj, "qkv_bias", json_boolean(p->g.qkv_bias), "qk_norm",
                         json_boolean(p->g.qk_norm), "io_dtype",
                         p->g.io_dtype ? json_string(ogk_dtype_name(p->g.io_dtype)) : json_null(), "chat_template",
                         chat_template(p));
    if (!p->model) { /* every string in it is UTF-8 by now: only memory can fail */
        ogk_err("out of memory");
        abort();
    }
    /* the MatMulNBits accuracy_level, when every projection has the same one: what onnxruntime would run
     * (4: int8 activations), which npu-forward's default --mode follows; null when absent or mixed */
    int acc = -2; /* -2 no MatMulNBits yet, -1 absent or mixed */
    for (size_t i = 0; i < p->n_t; i++)
        if (p->t[i].source_op && !strcmp(p->t[i].source_op, "MatMulNBits"))
            acc = acc == -2 || acc == p->t[i].accuracy_level ? p->t[i].accuracy_level : -1;
    json_object_set_new(p->model, "accuracy_level", acc >= 0 ? json_integer(acc) : json_null());
    /* what some families add to the transformer (Gemma 2), from the graph; null / false where it has none */
    static const char *const acts[] = {"silu", "gelu_tanh", "gelu"};
    json_object_set_new(p->model, "activation", p->g.activation >= 0 ? json_string(acts[p->g.activation]) : json_null());
    json_object_set_new(p->model, "embed_scale", p->g.embed_scale ? json_real(float_as_short_double(p->g.embed_scale)) : json_null());
    json_object_set_new(p->model, "attn_scale", p->g.attn_scale ? json_real(float_as_short_double(p->g.attn_scale)) : json_null());
    json_object_set_new(p->model, "attn_softcap",
                        p->g.attn_softcap ? json_real(float_as_short_double(p->g.attn_softcap)) : json_null());
    json_object_set_new(p->model, "final_softcap",
                        p->g.final_softcap ? json_real(float_as_short_double(p->g.final_softcap)) : json_null());
    json_t *win = json_null();
    if (p->g.window && p->g.window_layer) {
        json_t *ls = json_array();
        for (int l = 0; l < p->g.num_layers; l++)
            if (p->g.window_layer[l])
                json_array_append_new(ls, json_integer(l));
        win = json_pack("{s:i,s:o}", "size", p->g.window, "layers", ls);
    }
    json_object_set_new(p->model, "sliding_window", win);
    json_object_set_new(p->model, "sandwich_norms", json_boolean(p->g.attn_out_norms > 0 || p->g.mlp_out_norms > 0));
    json_object_set_new(p->model, "norm", json_string(p->g.layer_norm ? "layer" : "rms"));
    if (!p->genai)
        json_decref(g);
}

/* ---- runnable: the runtime's own check (lib/mdesc), so "importable" means "runs" ---- */

/* the pack file and key a model-description key comes from */
static const char *desc_source(pack *p, const char *key)
{
    static const char *const map[][2] = {
        {"family", "genai_config.json: model.type"},
        {"vocab_size", "genai_config.json: model.vocab_size"},
        {"hidden_size", "genai_config.json: model.decoder.hidden_size"},
        {"intermediate_size", "config.json: intermediate_size"},
        {"num_layers", "genai_config.json: model.decoder.num_hidden_layers"},
        {"num_heads", "genai_config.json: model.decoder.num_attention_heads"},
        {"num_kv_heads", "genai_config.json: model.decoder.num_key_value_heads"},
        {"head_dim", "genai_config.json: model.decoder.head_size"},
        {"context_length", "genai_config.json: model.context_length"},
        {"bos_token_id", "genai_config.json: model.bos_token_id"},
        {"pad_token_id", "genai_config.json: model.pad_token_id"},
        {"eos_token_ids", "genai_config.json: model.eos_token_id"},
        {"rms_norm_eps", "config.json: rms_norm_eps"},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(key, map[i][0]))
            return map[i][1];
    return pack_printf(p, "model description: %s", key[0] ? key : "?");
}

static void check_runnable(pack *p)
{
    if (p->n_r)
        return; /* already refused: the runtime's check would only repeat it */
    model_config c;
    ogk_error e;
    mdesc_where w;
    int code;
    if (mdesc_config(&c, p->model, &e, &code, &w)) {
        pack_refuse(p, desc_source(p, w.key), code == OGK_EXIT_INIT ? "model_unsupported" : "model_config", "%s", e.msg);
        return;
    }
    mdesc_tensor *t = calloc(p->n_t + 1, sizeof *t);
    if (!t) {
        pack_oom(p);
        return;
    }
    for (size_t i = 0; i < p->n_t; i++) {
        t[i].role = p->t[i].role;
        t[i].dtype = p->t[i].dtype == OGK_F32 ? MDESC_F32 : p->t[i].dtype == OGK_F16 ? MDESC_F16 : p->t[i].dtype == OGK_BF16 ? MDESC_BF16
                   : p->t[i].dtype == OGK_Q4 ? MDESC_Q4 : p->t[i].dtype == OGK_Q8 ? MDESC_Q8 : 0; /* mdesc has its own numbers */
        t[i].ndim = p->t[i].ndim;
        memcpy(t[i].shape, p->t[i].shape, sizeof t[i].shape);
    }
    int rc = mdesc_check_tensors(&c, t, p->n_t, &e, &w);
    free(t);
    if (rc) {
        size_t kl = strlen(w.key);
        const char *why = !strncmp(e.msg, w.key, kl) && !strncmp(e.msg + kl, ": ", 2) ? e.msg + kl + 2 : e.msg;
        pack_refuse(p, !strcmp(w.key, "family") ? desc_source(p, w.key) : w.key, "model_tensors", "%s", why);
        return;
    }
    const pack_asset *tj = asset_named(p, "tokenizer.json"), *tc = asset_named(p, "tokenizer_config.json");
    tok *tk = tj ? mdesc_tokenizer(&c, tj->data, tj->size, tc ? tc->data : NULL, tc ? tc->size : 0, &e) : NULL;
    if (tj && !tk)
        pack_refuse(p, "file tokenizer.json", "tokenizer", "%s", e.msg);
    tok_free(tk);
}

/* genai_config.json's name at path (decoder.inputs / outputs), or dflt */
static const char *io_name(pack *p, const char *path, const char *dflt)
{
    const char *v = NULL;
    if (p->genai)
        cfg_str(p, "genai_config.json", p->genai, path, 0, &v);
    return v && *v ? v : dflt;
}

/* path relative to the pack directory, as a malloc'd copy without "." parts or repeated slashes; NULL when
 * it is absolute, empty, or has a ".." part (decoder.filename may name a file in a subdirectory: onnxruntime-
 * genai joins it to the config's directory) */
static char *inside_path(const char *path)
{
    if (!path[0] || path[0] == '/')
        return NULL;
    char *out = malloc(strlen(path) + 1);
    if (!out)
        return NULL;
    size_t n = 0;
    for (const char *c = path; *c;) {
        size_t l = strcspn(c, "/");
        if (l == 2 && !strncmp(c, "..", 2)) {
            free(out);
            return NULL;
        }
        if (l && !(l == 1 && c[0] == '.')) {
            if (n)
                out[n++] = '/';
            memcpy(out + n, c, l), n += l;
        }
        c += l + (c[l] == '/');
    }
    out[n] = 0;
    if (!n) {
        free(out);
        return NULL;
    }
    return out;
}

static void detect_flavour(pack *p)
{
    const char *fn = p->onnx_name ? p->onnx_name : "";
    if (p->npu_files || p->g.ryzenai_nodes || !strcmp(fn, "fusion.onnx"))
        p->flavour = PACK_AMD_NPU;
    else if (p->g.has_rotary_nodes || p->g.separate_qkv)
        p->flavour = PACK_BUILDER_AMD;
    else if (p->g.packed_qkv || p->g.has_gqa_rotary)
        p->flavour = PACK_BUILDER_CPU;
    else
        p->flavour = PACK_UNKNOWN;
}

pack *pack_open(const char *dir, ogk_error *e)
{
    struct stat st;
    if (stat(dir, &st) != 0) {
        ogk_fail(e, "%s: %s", dir, strerror(errno));
        return NULL;
    }
    if (!S_ISDIR(st.st_mode)) {
        ogk_fail(e, "%s: not a directory (a pack is a directory with genai_config.json and model.onnx)", dir);
        return NULL;
    }
    if (access(dir, R_OK | X_OK) != 0) { /* not "not a pack": the files may well be there */
        ogk_fail(e, "%s: cannot read the directory: %s", dir, strerror(errno));
        return NULL;
    }
    pack *p = calloc(1, sizeof *p);
    if (p)
        p->r = malloc(16 * sizeof *p->r), p->cap_r = 16; /* refuse_oom's slot exists from the start */
    if (!p || !(p->dir = strdup(dir)) || !p->r) {
        pack_close(p);
        ogk_fail(e, "%s: out of memory", dir);
        errno = ENOMEM; /* init failed (4), not a bad pack */
        return NULL;
    }
    size_t dl = strlen(p->dir);
    while (dl > 1 && p->dir[dl - 1] == '/')
        p->dir[--dl] = 0;
    p->dir_text = pack_utf8_safe(pack_strdup(p, p->dir));
    p->g.num_layers = -1;
    p->g.rms_eps = -1;
    p->g.rope_interleaved = -1;
    p->g.rope_dim = -1;
    p->g.activation = -1;

    int missing;
    p->genai = read_json(p, "genai_config.json", 0, &missing);
    int genai_missing = missing;
    p->hfcfg = read_json(p, "config.json", 0, &missing);
    /* real tokenizer_config.json files say "model_max_length": 1000000000000000019884624838656 */
    p->tokcfg = read_json(p, "tokenizer_config.json", JSON_DECODE_INT_AS_REAL, &missing);

    /* the graph's own names of the inputs the runtime feeds and of the logits, as onnxruntime-genai maps them */
    p->g.name_ids = io_name(p, "model.decoder.inputs.input_ids", "input_ids");
    p->g.name_mask = io_name(p, "model.decoder.inputs.attention_mask", "attention_mask");
    p->g.name_pos = io_name(p, "model.decoder.inputs.position_ids", "position_ids");
    p->g.name_logits = io_name(p, "model.decoder.outputs.logits", "logits");
    const char *fn = NULL;
    if (p->genai)
        cfg_str(p, "genai_config.json", p->genai, "model.decoder.filename", 1, &fn);
    char *rel = fn ? inside_path(fn) : NULL; /* a path inside the pack, "./" parts dropped */
    if (!rel) {
        if (fn)
            pack_refuse(p, "genai_config.json: model.decoder.filename", "config_type",
                        "\"%s\" is not a file inside the pack (absolute, empty or through \"..\")", fn);
        fn = exists(p, "model.onnx") ? "model.onnx" : exists(p, "fusion.onnx") ? "fusion.onnx" : NULL;
    } else {
        fn = pack_own(p, rel);
    }
    if (genai_missing && !fn) {
        ogk_fail(e, "%s: not an OGA pack (no genai_config.json and no model.onnx)", p->dir);
        pack_close(p);
        errno = EINVAL; /* not ENOMEM: the caller's input error */
        return NULL;
    }
    if (genai_missing)
        pack_refuse(p, "file genai_config.json", "file_missing", "missing: the pack's configuration is required");
    if (fn && !(p->onnx_name = strdup(fn)))
        pack_oom(p); /* not "no model.onnx" */

    /* a family the runtime does not run is said first and plainly: its graph usually fails the walk too */
    const char *type = json_string_value(json_object_get(json_object_get(p->genai, "model"), "type"));
    if (type && model_family_of(type) < 0)
        pack_refuse(p, "genai_config.json: model.type", "model_unsupported", "unsupported family \"%.40s\" (supported: "
                    MODEL_FAMILIES ")", type);
    scan_npu_files(p);
    pack_read_graph(p);
    read_assets(p);
    build_model(p);
    pack_check_dims(p);
    check_runnable(p);
    detect_flavour(p);
    refuse_oom(p);
    return p;
}

/* ---- the oga-info report ---- */

static json_t *shape_json(const pack_tensor *t)
{
    json_t *a = json_array();
    for (int i = 0; i < t->ndim; i++)
        json_array_append_new(a, json_integer((json_int_t)t->shape[i]));
    return a;
}

static uint64_t tensor_bytes(const pack_tensor *t)
{
    return ogk_dtype_quantised(t->dtype) ? t->codes_size + t->scales_size + t->zeros_size : t->nbytes;
}

/* "layers.3.attn.q" -> "attn.q" (roles summed over layers) */
static const char *role_class(const char *role, char *buf, size_t n)
{
    if (!strncmp(role, "layers.", 7)) {
        const char *d = strchr(role + 7, '.');
        if (d) {
            snprintf(buf, n, "%s", d + 1);
            return buf;
        }
    }
    return role;
}

static void add_unique(json_t *arr, json_t *v)
{
    size_t i;
    json_t *x;
    json_array_foreach(arr, i, x) if (json_equal(x, v))
    {
        json_decref(v);
        return;
    }
    json_array_append_new(arr, v);
}

json_t *pack_info_json(const pack *p, int with_tensors)
{
    json_t *m = p->model;
    json_t *dims = json_object();
    const char *dk[] = {"vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads", "head_dim"};
    for (size_t i = 0; i < sizeof dk / sizeof dk[0]; i++)
        json_object_set(dims, dk[i], json_object_get(m, dk[i]));
    json_t *tokens = json_pack("{s:O,s:O,s:O}", "bos_token_id", json_object_get(m, "bos_token_id"), "eos_token_ids",
                               json_object_get(m, "eos_token_ids"), "pad_token_id", json_object_get(m, "pad_token_id"));
    /* quantisation summary */
    json_t *bits = json_array(), *blocks = json_array(), *sdt = json_array(), *ops = json_array(), *acc = json_array();
    size_t nq = 0, nsym = 0, nasym = 0;
    uint64_t qbytes = 0, pbytes = 0;
    json_t *by_role = json_object();
    for (size_t i = 0; i < p->n_t; i++) {
        const pack_tensor *t = &p->t[i];
        char buf[64];
        const char *cls = role_class(t->role, buf, sizeof buf);
        json_t *rc = json_object_get(by_role, cls);
        if (!rc) {
            rc = json_pack("{s:i,s:I}", "count", 0, "bytes", (json_int_t)0);
            json_object_set_new(by_role, cls, rc);
        }
        json_object_set_new(rc, "count", json_integer(json_integer_value(json_object_get(rc, "count")) + 1));
        json_object_set_new(rc, "bytes",
                            json_integer(json_integer_value(json_object_get(rc, "bytes")) + (json_int_t)tensor_bytes(t)));
        if (ogk_dtype_quantised(t->dtype)) {
            nq++;
            qbytes += tensor_bytes(t);
            add_unique(bits, json_integer(ogk_dtype_bits(t->dtype)));
            add_unique(blocks, json_integer(t->block));
            add_unique(sdt, json_string(ogk_dtype_name(t->scale_dtype)));
            add_unique(ops, json_string(t->source_op));
            if (t->accuracy_level >= 0)
                add_unique(acc, json_integer(t->accuracy_level));
            if (t->has_zp)
                nasym++;
            else
                nsym++;
        } else
            pbytes += t->nbytes;
    }
    const char *sym = nq == 0 ? "none" : nasym == 0 ? "symmetric" : nsym == 0 ? "asymmetric" : "mixed";
    json_t *quant = json_pack("{s:I,s:o,s:o,s:s,s:o,s:o,s:o,s:I,s:I}", "tensors", (json_int_t)nq, "bits", bits,
                              "block_sizes", blocks, "zero_points", sym, "scale_dtypes", sdt, "source_ops", ops,
                              "accuracy_levels", acc, "quantised_bytes", (json_int_t)qbytes, "plain_bytes",
                              (json_int_t)pbytes);
    json_t *refs = json_array();
    for (size_t i = 0; i < p->n_r; i++)
        json_array_append_new(refs, json_pack("{s:s,s:s,s:s}", "what", p->r[i].what, "code", p->r[i].code, "reason",
                                              p->r[i].reason));
    json_t *out = json_pack(
        "{s:s,s:s,s:O,s:O,s:o,s:o,s:O,s:O,s:O,s:O,s:b,s:O,s:O,s:o,s:I,s:I,s:o,s:I,s:b,s:o}", "pack", p->dir_text,
        "flavour", pack_flavour_name(p->flavour), "family", json_object_get(m, "family"), "model_type",
        json_object_get(m, "model_type"), "dims", dims, "tokens", tokens, "context_length",
        json_object_get(m, "context_length"), "rms_norm_eps", json_object_get(m, "rms_norm_eps"), "rope",
        json_object_get(m, "rope"), "io_dtype", json_object_get(m, "io_dtype"), "tie_embeddings", p->g.tied,
        "qkv_bias", json_object_get(m, "qkv_bias"), "qk_norm", json_object_get(m, "qk_norm"), "files",
        json_deep_copy(p->files), "tensor_count", (json_int_t)p->n_t, "tensor_bytes", (json_int_t)(qbytes + pbytes),
        "quantization", quant, "ignored_constants", (json_int_t)p->g.ignored_constants, "importable", p->n_r == 0,
        "refusals", refs);
    if (!out)
        return NULL;
    json_object_set_new(out, "by_role", by_role);
    /* the transformer's variations (Gemma 2's), as the model description has them */
    static const char *const variations[] = {"activation", "embed_scale", "attn_scale", "attn_softcap", "final_softcap",
                                             "sliding_window", "sandwich_norms", "norm"};
    for (size_t i = 0; i < sizeof variations / sizeof *variations; i++)
        if (json_object_get(m, variations[i]))
            json_object_set(out, variations[i], json_object_get(m, variations[i]));
    json_object_set(out, "chat_template", json_is_string(json_object_get(m, "chat_template")) ? json_true() : json_false());
    if (with_tensors) {
        json_t *ts = json_array();
        for (size_t i = 0; i < p->n_t; i++) {
            const pack_tensor *t = &p->t[i];
            json_t *o = json_pack("{s:s,s:s,s:s,s:o,s:I}", "name", t->name, "role", t->role, "dtype",
                                  ogk_dtype_name(t->dtype), "shape", shape_json(t), "bytes", (json_int_t)tensor_bytes(t));
            if (ogk_dtype_quantised(t->dtype)) {
                json_object_set_new(o, "quant",
                                    json_pack("{s:i,s:i,s:i,s:s,s:s,s:s,s:s,s:o}", "bits", ogk_dtype_bits(t->dtype),
                                              "block_size", (int)t->block, "k_blocks", (int)t->k_blocks, "scale_dtype",
                                              ogk_dtype_name(t->scale_dtype), "zero_points",
                                              t->has_zp ? (t->dtype == OGK_Q8 ? "u8" : "u4") : "none", "source_op", t->source_op,
                                              "scales", t->scales_name, "zeros",
                                              t->zeros_name ? json_string(t->zeros_name) : json_null()));
                if (t->accuracy_level >= 0)
                    json_object_set_new(json_object_get(o, "quant"), "accuracy_level", json_integer(t->accuracy_level));
            }
            json_object_set_new(o, "node", t->node ? json_string(t->node) : json_null());
            json_array_append_new(ts, o);
        }
        json_object_set_new(out, "tensors", ts);
    }
    return out;
}
