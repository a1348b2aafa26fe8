/* The shared glue of the programs (app.h): inputs, tokenizers, models and prompts. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "app/app.h"
#include "kern/kern.h"
#include "q4nx/q4nx.h"

/* ---------------------------------------------------------------- input */

/* the whole of a stream (stdin, a pipe, a FIFO) into a NUL-terminated heap buffer */
static char *read_stream(int fd, const char *name, size_t *len, ogk_error *e)
{
    size_t cap = 1 << 16, n = 0;
    char *txt = malloc(cap);
    ssize_t r = 0;
    /* never more than the limit and a byte: a stream that ends between the buffer's doublings (a 300 MB
     * pipe) was read whole and taken */
    while (txt && n <= APP_TEXT_MAX) {
        size_t want = cap - n - 1 < APP_TEXT_MAX + 1 - n ? cap - n - 1 : APP_TEXT_MAX + 1 - n;
        if ((r = ogk_read_full(fd, txt + n, want)) <= 0)
            break;
        if ((n += (size_t)r) + 1 < cap)
            continue;
        char *t2 = realloc(txt, cap *= 2);
        if (!t2)
            free(txt);
        txt = t2;
    }
    if (txt && n > APP_TEXT_MAX) {
        ogk_fail(e, "%s: more than %zu MiB of text (the limit of a text input)", name, APP_TEXT_MAX >> 20);
        free(txt);
        return NULL;
    }
    if (!txt) {
        ogk_fail(e, "out of memory reading %s", name);
        return NULL;
    }
    if (r < 0) {
        ogk_fail(e, "%s: read failed: %s", name, strerror(errno));
        free(txt);
        return NULL;
    }
    txt[n] = 0;
    *len = n;
    return txt;
}

char *app_read_text(const char *path, size_t *len, ogk_error *e)
{
    if (!strcmp(path, "-")) {
        ogk_input_note(0, "standard input");
        return read_stream(0, "stdin", len, e);
    }
    /* a text input may be a stream the user hands us (a pipe, `<(...)`, /dev/stdin on a pipe): read
     * it to its end; a directory, socket or device is refused by ogk_read_file, by name */
    struct stat st;
    if (stat(path, &st) == 0 && S_ISFIFO(st.st_mode)) {
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0) {
            ogk_fail(e, "%s: %s", path, strerror(errno));
            return NULL;
        }
        char *t = read_stream(fd, path, len, e);
        close(fd);
        return t;
    }
    char *t = ogk_read_file(path, len, e);
    if (t && *len > APP_TEXT_MAX) {
        ogk_fail(e, "%s: more than %zu MiB of text (the limit of a text input)", path, APP_TEXT_MAX >> 20);
        free(t);
        return NULL;
    }
    return t;
}

int32_t *app_parse_ids(const char *s, size_t n, const char *where, size_t *count, ogk_error *e)
{
    json_error_t je;
    json_t *j = json_loadb(s, n, JSON_DECODE_ANY, &je);
    if (!json_is_array(j)) {
        ogk_fail(e, "%s: want a JSON array of token ids%s%s", where, j ? "" : ": ", j ? "" : je.text);
        json_decref(j);
        return NULL;
    }
    size_t k = json_array_size(j);
    int32_t *ids = malloc((k ? k : 1) * sizeof *ids);
    if (!ids) {
        json_decref(j);
        ogk_fail(e, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < k; i++) {
        json_t *v = json_array_get(j, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX) {
            ogk_fail(e, "%s: element %zu is not a token id", where, i);
            free(ids), json_decref(j);
            return NULL;
        }
        ids[i] = (int32_t)json_integer_value(v);
    }
    json_decref(j);
    *count = k;
    return ids;
}

int *app_read_ids(const char *path, int *n, ogk_error *e)
{
    size_t len, k;
    char *txt = app_read_text(path, &len, e);
    if (!txt)
        return NULL;
    int32_t *ids = app_parse_ids(txt, len, path, &k, e);
    free(txt);
    if (ids && k == 0) {
        ogk_fail(e, "%s: want a non-empty JSON array of token ids", path);
        free(ids);
        return NULL;
    }
    if (ids && k > INT32_MAX / 2) {
        ogk_fail(e, "%s: %zu ids are too many", path, k);
        free(ids);
        return NULL;
    }
    *n = (int)k;
    return (int *)ids; /* int and int32_t are one type on every platform this builds for */
}

_Static_assert(sizeof(int) == sizeof(int32_t), "ids are int32_t and int at once");

/* ---------------------------------------------------------------- tokenizers */

/* a container's chat_template.jinja asset replaces tokenizer_config.json's template, as in the pack
 * (lib/pack/pack.c chat_template). 0, or -1 with e filled */
static int jinja_asset(const q4nx_file *f, tok *t, ogk_error *e)
{
    const uint8_t *a;
    size_t n;
    if (q4nx_asset(f, "chat_template.jinja", &a, &n))
        return 0;
    if (tok_utf8_check((const char *)a, n) < n)
        return ogk_fail(e, "chat_template.jinja asset: not UTF-8 text");
    if (tok_set_chat_template(t, (const char *)a, n))
        return ogk_fail(e, "tokenizer: out of memory");
    return 0;
}

static tok *tok_from_container(const q4nx_file *f, ogk_error *e)
{
    const uint8_t *tj, *tc = NULL;
    size_t tjl, tcl = 0;
    if (q4nx_asset(f, "tokenizer.json", &tj, &tjl)) {
        ogk_fail(e, "the container has no tokenizer.json asset");
        return NULL;
    }
    if (q4nx_asset(f, "tokenizer_config.json", &tc, &tcl))
        tc = NULL, tcl = 0;
    ogk_error te;
    tok *t = tok_load((const char *)tj, tjl, (const char *)tc, tcl, &te);
    if (!t)
        ogk_fail(e, "tokenizer: %s", te.msg);
    else if (jinja_asset(f, t, e)) {
        tok_free(t);
        return NULL;
    }
    return t;
}

/* the model's tokenizer, loaded and checked against its config as oga-info checks it (lib/mdesc) */
tok *app_model_tokenizer(const model *m, ogk_error *e)
{
    const uint8_t *tj, *tc = NULL;
    size_t tjl, tcl = 0;
    if (q4nx_asset(m->file, "tokenizer.json", &tj, &tjl)) {
        ogk_fail(e, "the container has no tokenizer.json asset");
        return NULL;
    }
    if (q4nx_asset(m->file, "tokenizer_config.json", &tc, &tcl))
        tc = NULL, tcl = 0;
    tok *t = mdesc_tokenizer(&m->c, tj, tjl, tc, tcl, e);
    if (t && jinja_asset(m->file, t, e)) {
        tok_free(t);
        return NULL;
    }
    return t;
}

int app_tokenizer_open(app_tokenizer *at, const char *dir, const char *container, ogk_error *e, int *code)
{
    memset(at, 0, sizeof *at);
    *code = OGK_EXIT_INPUT;
    if (!dir == !container)
        return ogk_fail(e, "give a tokenizer directory or a container (one of them)");
    if (dir) {
        at->tok = tok_load_dir(dir, e);
        if (at->tok)
            at->tmpl_bad = app_chat_templates_check(NULL, dir, at->tok, NULL, NULL, &at->tmpl_e, &at->tools_e);
        return at->tok ? 0 : -1;
    }
    q4nx_file *f = q4nx_open(container, e, code);
    if (!f)
        return -1;
    ogk_error te;
    at->tok = tok_from_container(f, &te);
    if (!at->tok) {
        q4nx_close(f);
        *code = OGK_EXIT_INPUT;
        return ogk_fail(e, "%s: %s", container, te.msg);
    }
    const json_t *m = q4nx_model(f);
    const char *fam = json_string_value(json_object_get(m, "family"));
    const char *tpl = json_string_value(json_object_get(m, "chat_template"));
    at->family = fam ? strdup(fam) : NULL;
    at->chat_template = tpl ? strdup(tpl) : NULL;
    at->tmpl_bad = app_chat_templates_check(f, container, at->tok, fam, tpl, &at->tmpl_e, &at->tools_e);
    q4nx_close(f);
    if ((fam && !at->family) || (tpl && !at->chat_template)) {
        app_tokenizer_close(at);
        *code = OGK_EXIT_INIT;
        return ogk_fail(e, "out of memory");
    }
    return 0;
}

void app_tokenizer_close(app_tokenizer *at)
{
    tok_free(at->tok);
    free(at->family);
    free(at->chat_template);
    memset(at, 0, sizeof *at);
}

const char *app_chat_template(const tok *t, const char *family, const char *container_template)
{
    if (t && tok_chat_template(t))
        return tok_chat_template(t);
    if (container_template)
        return container_template;
    return tok_chat_template_for(t, family);
}

int app_chat_templates_check(const q4nx_file *f, const char *path, const tok *t, const char *family,
                             const char *container_template, ogk_error *default_e, ogk_error *tools_e)
{
    int bad = 0;
    char origin[4200];
    const uint8_t *a;
    size_t n;
    struct stat st;
    const char *src = app_chat_template(t, family, container_template);
    if (src) {
        char jinja[4200];
        snprintf(jinja, sizeof jinja, "%s/chat_template.jinja", path);
        const char *from = t && tok_chat_template(t)
                               ? (f ? !q4nx_asset(f, "chat_template.jinja", &a, &n) : !stat(jinja, &st)) ? "chat_template.jinja"
                                                                                                          : "tokenizer_config.json"
                           : src == container_template ? "the model description's chat_template"
                                                       : "a built-in template";
        if (f)
            snprintf(origin, sizeof origin, "%s (%s)", path, from);
        else
            snprintf(origin, sizeof origin, "%s/%s", path, from);
        if (tok_chat_template_check(src, origin, default_e))
            bad |= APP_TEMPLATE_BAD;
    }
    if (t && tok_chat_template_tools(t)) {
        snprintf(origin, sizeof origin, f ? "%s (tokenizer_config.json's \"tool_use\" template)"
                                          : "%s/tokenizer_config.json (its \"tool_use\" template)", path);
        if (tok_chat_template_check(tok_chat_template_tools(t), origin, tools_e))
            bad |= APP_TEMPLATE_TOOLS_BAD;
    }
    return bad;
}

/* ---------------------------------------------------------------- models */

model *app_model_open(const app_model_opts *o, ogk_error *e, int *code)
{
    *code = OGK_EXIT_INIT;
    if (kern_isa_init(e))
        return NULL;
    model *m = model_open_flags(o->model, q4nx_in_flags(o->weights_in), e, code);
    if (m && o->verify && q4nx_verify_weights(m->file, o->model, e)) {
        model_close(m);
        *code = OGK_EXIT_INPUT;
        return NULL;
    }
    return m;
}

int app_mode(const model *m, const app_model_opts *o) { return o->mode >= 0 ? o->mode : model_default_mode(m); }

int app_context(const model *m, const app_model_opts *o) { return o->context ? o->context : m->c.context_length; }

model_state *app_state_new(const model *m, const app_model_opts *o, int context, int logit_rows, ogk_error *e,
                           int *code)
{
    if (!context)
        context = app_context(m, o);
    if (context > m->c.context_length) {
        *code = OGK_EXIT_USAGE;
        ogk_fail(e, "-c %d: the model's context is %d", context, m->c.context_length);
        return NULL;
    }
    *code = OGK_EXIT_INIT;
    return model_state_new(m, context, logit_rows, app_mode(m, o), o->threads, e);
}

/* ---------------------------------------------------------------- prompts */

static char *render_chat(const model *m, tok *t, const app_prompt *p, size_t *len, ogk_error *e)
{
    size_t bad = tok_utf8_check(p->text, p->len);
    if (bad != p->len) {
        ogk_fail(e, "prompt: input is not valid UTF-8 (byte offset %zu)", bad);
        return NULL;
    }
    /* the system text too: json_pack refuses it, and the message would be dropped without a word */
    if (p->system && (bad = tok_utf8_check(p->system, strlen(p->system))) != strlen(p->system)) {
        ogk_fail(e, "--system: the text is not valid UTF-8 (byte offset %zu)", bad);
        return NULL;
    }
    json_t *msgs = json_array();
    if (p->system)
        json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "system", "content", p->system));
    json_array_append_new(msgs, json_pack("{s:s,s:s%}", "role", "user", "content", p->text, p->len));
    json_t *vars = json_pack("{s:o,s:b}", "messages", msgs, "add_generation_prompt", 1);
    if (!vars) {
        ogk_fail(e, "chat template: the prompt is not valid UTF-8");
        return NULL;
    }
    const char *ctpl = json_string_value(json_object_get(q4nx_model(m->file), "chat_template"));
    const char *src = app_chat_template(t, m->c.family_name, ctpl);
    ogk_error re;
    char *r = NULL;
    if (!src) {
        ogk_fail(&re, "no chat template: the tokenizer has none and there is no built-in one for family '%s'",
                 m->c.family_name);
    } else {
        if (t) {
            if (!json_object_get(vars, "bos_token") && tok_bos_token(t))
                json_object_set_new(vars, "bos_token", json_string(tok_bos_token(t)));
            if (!json_object_get(vars, "eos_token") && tok_eos_token(t))
                json_object_set_new(vars, "eos_token", json_string(tok_eos_token(t)));
        }
        r = tok_jinja_render(src, vars, len, &re);
    }
    json_decref(vars);
    if (!r)
        ogk_fail(e, "chat template: %s", re.msg);
    return r;
}

int *app_prompt_ids(const model *m, tok *t, const app_prompt *p, int max_ids, int *n, ogk_error *e)
{
    const char *text = p->text;
    size_t len = p->len;
    char *rendered = NULL;
    if (p->chat) {
        /* the template writes the special tokens itself (as apply_chat_template does) */
        if (!(rendered = render_chat(m, t, p, &len, e)))
            return NULL;
        text = rendered;
    }
    int32_t *ids;
    size_t nn;
    ogk_error te;
    int rc = tok_encode_max(t, text, len, !p->chat, max_ids > 0 ? (size_t)max_ids : SIZE_MAX, &ids, &nn, &te);
    free(rendered);
    if (rc) {
        ogk_fail(e, "prompt: %s%s", te.msg, strncmp(te.msg, "more than", 9) ? "" : ": it does not fit the context");
        return NULL;
    }
    if (nn == 0) {
        free(ids);
        ogk_fail(e, "prompt: empty (no tokens)");
        return NULL;
    }
    *n = (int)nn;
    return (int *)ids;
}
