/* npu-forward tokenize | detokenize | chat: text in, ids out as JSON, and back; messages in, rendered
 * prompt out. Tokenizer files come from --tokenizer DIR or -m model.q4nx. The command lines live here;
 * the work is lib/tok's, the shared reading and opening lib/app's. */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "app/app.h"
#include "cmd.h"
#include "tok/tok.h"

static const char tokenize_usage[] =
    "usage: npu-forward tokenize (--tokenizer DIR | -m MODEL|DIR) [--no-special] [--lines | --jsonl]\n"
    "                            [--bench N] [-f FILE | TEXT...]\n"
    "  Encode TEXT (the arguments joined by spaces), or FILE, or stdin, and print the ids as a JSON array.\n"
    "  --no-special  do not add the post-processor's special tokens (e.g. BOS)\n"
    "  --lines       encode every input line separately (without its newline); one JSON array per line\n"
    "  --jsonl       every input line is a JSON string; one JSON array per line (blank lines skipped)\n"
    "  --bench N     encode the input N times and print {bytes, seconds, mb_per_s} instead of ids\n"
    "  Input must be valid UTF-8 (else exit 3 naming the byte offset). Character classes of the pre-split\n"
    "  regex come from the system PCRE2's Unicode tables, normalization and case mapping from utf8proc's:\n"
    "  characters assigned in a later Unicode version than theirs (e.g. CJK extension H, Unicode 15) are\n"
    "  unassigned here, and can split differently from a tokenizer built on newer tables.\n";

static const char detokenize_usage[] =
    "usage: npu-forward detokenize (--tokenizer DIR | -m MODEL|DIR) [--skip-special] [--cleanup | --no-cleanup]\n"
    "                              [--jsonl] [--stream] [-f FILE | IDS...]\n"
    "  Decode a JSON array of ids (the arguments, or FILE, or stdin) and print the text (no newline added).\n"
    "  --skip-special  drop special tokens\n"
    "  --cleanup, --no-cleanup  force clean_up_tokenization_spaces on / off (default: tokenizer_config.json)\n"
    "  --jsonl         every input line is a JSON array; print one JSON string per line (blank lines skipped)\n"
    "  --stream        decode through the incremental (streaming) decoder, one id at a time; never cleans up\n";

static const char chat_usage[] =
    "usage: npu-forward chat (--tokenizer DIR | -m MODEL|DIR | --template FILE) [--family NAME]\n"
    "                        [--add-generation-prompt | --no-generation-prompt] [--jsonl] [--ids] [FILE]\n"
    "  Render a conversation with the chat template and print the prompt (no newline added).\n"
    "  Input (FILE or stdin): a JSON object {\"messages\": [...], \"tools\": [...], ...} whose members become\n"
    "  template variables, or a JSON array of messages. bos_token / eos_token come from the tokenizer.\n"
    "  A tokenizer with named templates renders the one named \"tool_use\" when \"tools\" is given (not null).\n"
    "  --family NAME  built-in template (llama2, mistral, phi3, chatml, qwen2, llama3, gemma, gemma2, chatglm) when the tokenizer has none\n"
    "  --jsonl        every input line is one conversation; print one JSON string per line (blank lines\n"
    "                 skipped)\n"
    "  --ids          print the token ids of the rendered prompt instead of the text\n"
    "  --show-template  print the template source that would be used, and exit\n"
    "  A template that nests too deeply or exceeds the render budget (steps, text size, memory) is refused\n"
    "  by name (exit 3).\n";

typedef struct {
    const char *dir, *model, *file, *template_file, *family;
    int no_special, lines, jsonl, skip_special, cleanup, stream, ids, gen, bench, show_template;
    int nargs;
    char **args;
} tok_opts;

enum { O_TOKENIZER = 300, O_NOSPECIAL, O_LINES, O_JSONL, O_SKIP, O_CLEAN, O_NOCLEAN, O_STREAM, O_TEMPLATE,
       O_FAMILY, O_IDS, O_GEN, O_NOGEN, O_BENCH, O_SHOWTPL, O_RUNOPT };

static void parse(int argc, char **argv, tok_opts *o, const char *usage)
{
    static const struct option lo[] = {
        {"tokenizer", required_argument, 0, O_TOKENIZER}, {"model", required_argument, 0, 'm'},
        {"file", required_argument, 0, 'f'},              {"no-special", no_argument, 0, O_NOSPECIAL},
        {"lines", no_argument, 0, O_LINES},               {"jsonl", no_argument, 0, O_JSONL},
        {"skip-special", no_argument, 0, O_SKIP},         {"cleanup", no_argument, 0, O_CLEAN},
        {"no-cleanup", no_argument, 0, O_NOCLEAN},        {"stream", no_argument, 0, O_STREAM},
        {"template", required_argument, 0, O_TEMPLATE},   {"family", required_argument, 0, O_FAMILY},
        {"ids", no_argument, 0, O_IDS},                   {"add-generation-prompt", no_argument, 0, O_GEN},
        {"no-generation-prompt", no_argument, 0, O_NOGEN}, {"bench", required_argument, 0, O_BENCH},
        {"show-template", no_argument, 0, O_SHOWTPL},     {"help", no_argument, 0, 'h'},
        /* the model's run options: named and refused (--mode was taken as an abbreviation of --model) */
        {"mode", required_argument, 0, O_RUNOPT},         {"threads", required_argument, 0, O_RUNOPT},
        {"context", required_argument, 0, O_RUNOPT},      {"mmap", no_argument, 0, O_RUNOPT},
        {"no-mmap", no_argument, 0, O_RUNOPT},            {"verify", no_argument, 0, O_RUNOPT},
        {0, 0, 0, 0},
    };
    memset(o, 0, sizeof *o);
    o->cleanup = -1;
    o->gen = -1;
    int c;
    optind = 1;
    int li = -1;
    while ((c = getopt_long(argc, argv, "+m:f:ht:c:", lo, &li)) != -1) {
        switch (c) {
        case O_RUNOPT:
        case 't':
        case 'c':
            ogk_die(OGK_EXIT_USAGE, "%s: %s%s: this command runs no model (it reads the tokenizer alone); the option "
                    "belongs to run, logits, bench and serve", argv[0], c == O_RUNOPT ? "--" : c == 't' ? "-t" : "-c",
                    c == O_RUNOPT ? lo[li].name : "");
        case O_TOKENIZER: o->dir = optarg; break;
        case 'm': o->model = optarg; break;
        case 'f': o->file = optarg; break;
        case O_NOSPECIAL: o->no_special = 1; break;
        case O_LINES: o->lines = 1; break;
        case O_JSONL: o->jsonl = 1; break;
        case O_SKIP: o->skip_special = 1; break;
        case O_CLEAN: o->cleanup = 1; break;
        case O_NOCLEAN: o->cleanup = 0; break;
        case O_STREAM: o->stream = 1; break;
        case O_TEMPLATE: o->template_file = optarg; break;
        case O_FAMILY: o->family = optarg; break;
        case O_IDS: o->ids = 1; break;
        case O_GEN: o->gen = 1; break;
        case O_NOGEN: o->gen = 0; break;
        case O_SHOWTPL: o->show_template = 1; break;
        case O_BENCH: o->bench = (int)ogk_parse_long("--bench", optarg, 1, 1000000); break;
        case 'h': fputs(usage, stdout); exit(0);
        default: fputs(usage, stderr); exit(OGK_EXIT_USAGE);
        }
    }
    o->args = argv + optind;
    o->nargs = argc - optind;
    if (o->dir && o->model)
        ogk_die(OGK_EXIT_USAGE, "%s: --tokenizer and -m are exclusive", argv[0]);
    if (o->file && o->nargs) /* before, the arguments were dropped without a word (or replaced -f's file) */
        ogk_die(OGK_EXIT_USAGE, "%s: give the input as -f FILE or as arguments, not both", argv[0]);
    if (o->lines && o->jsonl)
        ogk_die(OGK_EXIT_USAGE, "%s: --lines and --jsonl are exclusive", argv[0]);
}

/* the tokenizer of --tokenizer DIR or -m MODEL (at->tok NULL when neither and not required) */
static void open_tokenizer(const tok_opts *o, const char *cmd, int required, app_tokenizer *at)
{
    memset(at, 0, sizeof *at);
    if (!o->dir && !o->model) {
        if (required)
            ogk_die(OGK_EXIT_USAGE, "%s: give the tokenizer with --tokenizer DIR or -m MODEL", cmd);
        return;
    }
    ogk_error e;
    int code;
    struct stat st;
    /* -m naming a directory (a pack, or a container's tokenizer directory): its tokenizer files */
    int dir_model = o->model && stat(o->model, &st) == 0 && S_ISDIR(st.st_mode);
    if (app_tokenizer_open(at, dir_model ? o->model : o->dir, dir_model ? NULL : o->model, &e, &code))
        ogk_die(code, "%s: %s", cmd, e.msg);
}

/* the whole input: the arguments joined by sep, or -f FILE, or stdin */
static char *read_input(const tok_opts *o, const char *cmd, const char *sep, size_t *len)
{
    if (o->nargs && !o->file) {
        size_t n = 0;
        for (int i = 0; i < o->nargs; i++)
            n += strlen(o->args[i]) + strlen(sep);
        char *s = malloc(n + 1), *p = s;
        if (!s)
            ogk_die(OGK_EXIT_INIT, "out of memory");
        for (int i = 0; i < o->nargs; i++)
            p = stpcpy(i ? stpcpy(p, sep) : p, o->args[i]);
        *len = (size_t)(p - s);
        return s;
    }
    ogk_error e;
    char *s = app_read_text(o->file ? o->file : "-", len, &e);
    if (!s)
        ogk_die(OGK_EXIT_INPUT, "%s: %s", cmd, e.msg);
    return s;
}

static void print_ids(const int32_t *ids, size_t n)
{
    putchar('[');
    for (size_t i = 0; i < n; i++)
        printf(i ? ",%d" : "%d", ids[i]);
    fputs("]\n", stdout);
}

static void print_json_string(const char *s, size_t n)
{
    json_t *j = json_stringn(s, n);
    char *d = j ? json_dumps(j, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
    if (!d)
        ogk_die(OGK_EXIT_INPUT, "output is not valid UTF-8 for JSON");
    fputs(d, stdout);
    fputc('\n', stdout);
    free(d);
    json_decref(j);
}

static void finish(const char *cmd)
{
    if (fflush(stdout) || ferror(stdout))
        ogk_die(OGK_EXIT_CHECK, "%s: writing stdout failed", cmd);
}

/* 1 when the n bytes at s are only JSON whitespace (space, tab, CR), or none */
static int blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
            return 0;
    return 1;
}

/* calls fn on each line of s without its '\n' (a final unterminated line counts); with skip_blank (--jsonl:
 * a line holds one JSON value) a line of nothing but whitespace is skipped, as jq skips whitespace between
 * values, and gives no output line; lines keep their numbers in the input either way */
typedef void (*line_fn)(void *ctx, const char *s, size_t n, size_t lineno);
static void each_line(const char *s, size_t len, int skip_blank, line_fn fn, void *ctx)
{
    size_t i = 0, ln = 1;
    while (i < len) {
        const char *nl = memchr(s + i, '\n', len - i);
        size_t n = nl ? (size_t)(nl - (s + i)) : len - i;
        if (!skip_blank || !blank(s + i, n))
            fn(ctx, s + i, n, ln);
        ln++;
        i += n + 1;
    }
}

/* ---------------------------------------------------------------- tokenize */

typedef struct {
    tok *t;
    int add_special, jsonl;
} enc_ctx;

static void enc_line(void *vc, const char *s, size_t n, size_t lineno)
{
    enc_ctx *c = vc;
    ogk_error e;
    json_t *str = NULL;
    if (c->jsonl) {
        json_error_t je;
        str = json_loadb(s, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        if (!str) /* jansson's reason: a lone surrogate escape (\ud800) has no UTF-8 form, bad syntax, ... */
            ogk_die(OGK_EXIT_INPUT, "tokenize: line %zu: not valid JSON: %s (column %d)", lineno, je.text, je.column);
        if (!json_is_string(str))
            ogk_die(OGK_EXIT_INPUT, "tokenize: line %zu: not a JSON string", lineno);
        s = json_string_value(str);
        n = json_string_length(str);
    }
    int32_t *ids;
    size_t k;
    if (tok_encode(c->t, s, n, c->add_special, &ids, &k, &e))
        ogk_die(OGK_EXIT_INPUT, "tokenize: line %zu: %s", lineno, e.msg);
    print_ids(ids, k);
    free(ids);
    json_decref(str);
}

/* encode the input reps times (per line with --lines, as the reference benchmark does) */
static void bench_encode(tok *t, const char *text, size_t len, int lines, int add_special, int reps)
{
    ogk_error e;
    double t0 = ogk_now();
    for (int r = 0; r < reps; r++) {
        size_t i = 0;
        do {
            const char *nl = lines ? memchr(text + i, '\n', len - i) : NULL;
            size_t n = nl ? (size_t)(nl - (text + i)) : len - i;
            int32_t *ids;
            size_t k;
            if (tok_encode(t, text + i, n, add_special, &ids, &k, &e))
                ogk_die(OGK_EXIT_INPUT, "tokenize: %s", e.msg);
            free(ids);
            i += n + 1;
        } while (lines && i < len);
    }
    double dt = ogk_now() - t0;
    json_t *j = json_pack("{s:I,s:i,s:f,s:f}", "bytes", (json_int_t)len, "reps", reps, "seconds", dt, "mb_per_s",
                          (double)len * reps / dt / 1e6);
    ogk_json_print(stdout, j);
    json_decref(j);
}

int cmd_tokenize(int argc, char **argv)
{
    tok_opts o;
    parse(argc, argv, &o, tokenize_usage);
    app_tokenizer at;
    open_tokenizer(&o, "tokenize", 1, &at);
    size_t len;
    char *text = read_input(&o, "tokenize", " ", &len);
    if (o.bench) {
        bench_encode(at.tok, text, len, o.lines, !o.no_special, o.bench);
    } else if (o.lines || o.jsonl) {
        enc_ctx c = {at.tok, !o.no_special, o.jsonl};
        each_line(text, len, o.jsonl, enc_line, &c);
    } else {
        ogk_error e;
        int32_t *ids;
        size_t k;
        if (tok_encode(at.tok, text, len, !o.no_special, &ids, &k, &e))
            ogk_die(OGK_EXIT_INPUT, "tokenize: %s", e.msg);
        print_ids(ids, k);
        free(ids);
    }
    free(text);
    app_tokenizer_close(&at);
    finish("tokenize");
    return 0;
}

/* ---------------------------------------------------------------- detokenize */

static int32_t *parse_ids(const char *s, size_t n, size_t *count, const char *where)
{
    ogk_error e;
    int32_t *ids = app_parse_ids(s, n, where, count, &e);
    if (!ids)
        ogk_die(OGK_EXIT_INPUT, "detokenize: %s", e.msg);
    return ids;
}

static char *decode_stream(tok *t, const int32_t *ids, size_t n, int skip, size_t *len)
{
    ogk_error e;
    tok_stream *s = tok_stream_new(t, skip ? TOK_STREAM_SKIP_SPECIAL : 0);
    char *out = NULL;
    size_t outn = 0;
    FILE *m = open_memstream(&out, &outn);
    if (!s || !m)
        ogk_die(OGK_EXIT_INIT, "out of memory");
    for (size_t i = 0; i <= n; i++) {
        size_t k;
        const char *p = i < n ? tok_stream_put(s, ids[i], &k, &e) : tok_stream_flush(s, &k, &e);
        if (!p)
            ogk_die(OGK_EXIT_INPUT, "detokenize: %s", e.msg);
        if (tok_utf8_check(p, k) != k)
            ogk_die(OGK_EXIT_CHECK, "detokenize: the stream decoder emitted broken UTF-8 (a bug)");
        if (fwrite(p, 1, k, m) != k)
            ogk_die(OGK_EXIT_INIT, "out of memory");
    }
    if (fclose(m))
        ogk_die(OGK_EXIT_INIT, "out of memory");
    tok_stream_free(s);
    *len = outn;
    return out;
}

static char *decode(tok *t, const tok_opts *o, const int32_t *ids, size_t k, size_t *len, const char *where)
{
    ogk_error e;
    char *txt = o->stream ? decode_stream(t, ids, k, o->skip_special, len)
                          : tok_decode(t, ids, k, o->skip_special, o->cleanup, len, &e);
    if (!txt)
        ogk_die(OGK_EXIT_INPUT, "detokenize: %s: %s", where, e.msg);
    return txt;
}

typedef struct {
    tok *t;
    const tok_opts *o;
} dec_ctx;

static void dec_line(void *vc, const char *s, size_t n, size_t lineno)
{
    dec_ctx *c = vc;
    char where[32];
    snprintf(where, sizeof where, "line %zu", lineno);
    size_t k, len;
    int32_t *ids = parse_ids(s, n, &k, where);
    char *txt = decode(c->t, c->o, ids, k, &len, where);
    print_json_string(txt, len);
    free(txt);
    free(ids);
}

int cmd_detokenize(int argc, char **argv)
{
    tok_opts o;
    parse(argc, argv, &o, detokenize_usage);
    app_tokenizer at;
    open_tokenizer(&o, "detokenize", 1, &at);
    size_t len;
    char *in;
    if (o.nargs > 1 && !o.file) { /* ids as separate arguments */
        char *list = read_input(&o, "detokenize", ",", &len);
        if (asprintf(&in, "[%s]", list) < 0)
            ogk_die(OGK_EXIT_INIT, "out of memory");
        len += 2;
        free(list);
    } else {
        in = read_input(&o, "detokenize", " ", &len);
    }
    if (o.jsonl) {
        dec_ctx c = {at.tok, &o};
        each_line(in, len, 1, dec_line, &c);
    } else {
        const char *where = o.file ? o.file : o.nargs ? "arguments" : "stdin";
        size_t k, n;
        int32_t *ids = parse_ids(in, len, &k, where);
        char *txt = decode(at.tok, &o, ids, k, &n, where);
        fwrite(txt, 1, n, stdout);
        free(txt);
        free(ids);
    }
    free(in);
    app_tokenizer_close(&at);
    finish("detokenize");
    return 0;
}

/* ---------------------------------------------------------------- chat */

typedef struct {
    tok *t;
    const tok_opts *o;
    const char *tpl, *family;
    const app_tokenizer *at; /* its tool_use template: checked when a conversation takes it */
} chat_ctx;

static void chat_one(chat_ctx *c, json_t *in, const char *where)
{
    json_t *vars;
    if (json_is_array(in))
        vars = json_pack("{s:O}", "messages", in);
    else if (json_is_object(in))
        vars = json_deep_copy(in);
    else
        ogk_die(OGK_EXIT_INPUT, "chat: %s: expected a JSON object or an array of messages", where);
    /* messages are objects with a string role (a list of ids rendered as nothing, with exit 0) */
    const json_t *msgs = json_object_get(vars, "messages"), *m;
    size_t i;
    if (msgs && !json_is_array(msgs))
        ogk_die(OGK_EXIT_INPUT, "chat: %s: \"messages\" is not an array", where);
    json_array_foreach(msgs, i, m) if (!json_is_object(m) || !json_is_string(json_object_get(m, "role")))
        ogk_die(OGK_EXIT_INPUT, "chat: %s: messages[%zu] is not an object with a string \"role\"", where, i);
    if (c->o->gen >= 0)
        json_object_set_new(vars, "add_generation_prompt", json_boolean(c->o->gen));
    ogk_error e;
    size_t len;
    char *out;
    if (c->tpl) {
        if (c->t) {
            if (!json_object_get(vars, "bos_token") && tok_bos_token(c->t))
                json_object_set_new(vars, "bos_token", json_string(tok_bos_token(c->t)));
            if (!json_object_get(vars, "eos_token") && tok_eos_token(c->t))
                json_object_set_new(vars, "eos_token", json_string(tok_eos_token(c->t)));
        }
        out = tok_jinja_render(c->tpl, vars, &len, &e);
    } else {
        const json_t *tools = json_object_get(vars, "tools");
        if (tools && !json_is_null(tools) && tok_chat_template_tools(c->t) && (c->at->tmpl_bad & APP_TEMPLATE_TOOLS_BAD))
            ogk_die(OGK_EXIT_INPUT, "chat: %s", c->at->tools_e.msg);
        out = tok_chat_render(c->t, c->family, vars, &len, &e);
    }
    json_decref(vars);
    if (!out)
        ogk_die(OGK_EXIT_INPUT, "chat: %s: %s", where, e.msg);
    if (c->o->ids) {
        if (!c->t)
            ogk_die(OGK_EXIT_USAGE, "chat: --ids needs a tokenizer (--tokenizer or -m)");
        int32_t *ids;
        size_t k;
        if (tok_encode(c->t, out, len, 0, &ids, &k, &e))
            ogk_die(OGK_EXIT_INPUT, "chat: %s: %s", where, e.msg);
        print_ids(ids, k);
        free(ids);
    } else if (c->o->jsonl) {
        print_json_string(out, len);
    } else {
        fwrite(out, 1, len, stdout);
    }
    free(out);
}

/* jansson's reason, in the words of this program (it names its own flag for a \u0000) */
static const char *json_reason(const json_error_t *je)
{
    return strstr(je->text, "JSON_ALLOW_NUL") ? "\\u0000 (a NUL character) in a string is not supported" : je->text;
}

static void chat_line(void *vc, const char *s, size_t n, size_t lineno)
{
    json_error_t je;
    char where[32];
    snprintf(where, sizeof where, "line %zu", lineno);
    json_t *j = json_loadb(s, n, JSON_DECODE_ANY, &je);
    if (!j)
        ogk_die(OGK_EXIT_INPUT, "chat: %s: %s", where, json_reason(&je));
    chat_one(vc, j, where);
    json_decref(j);
}

int cmd_chat(int argc, char **argv)
{
    tok_opts o;
    parse(argc, argv, &o, chat_usage);
    app_tokenizer at;
    open_tokenizer(&o, "chat", !o.template_file, &at);
    const char *family = o.family ? o.family : at.family;
    char *file_tpl = NULL;
    ogk_error e;
    if (o.template_file) {
        size_t n;
        if (!(file_tpl = ogk_read_file(o.template_file, &n, &e)))
            ogk_die(OGK_EXIT_INPUT, "chat: %s", e.msg);
    }
    /* --template, else what run --chat renders: the tokenizer's, the container's, the family's built-in */
    chat_ctx c = {at.tok, &o, file_tpl, family, &at};
    if (!c.tpl && at.tok && !tok_chat_template(at.tok) && at.chat_template)
        c.tpl = at.chat_template;
    /* a template that does not parse is refused before any conversation is read, by where it is wrong (the
     * words serve uses) */
    if (!o.show_template && file_tpl && tok_chat_template_check(file_tpl, o.template_file, &e))
        ogk_die(OGK_EXIT_INPUT, "chat: %s", e.msg);
    if (!o.show_template && !file_tpl && (at.tmpl_bad & APP_TEMPLATE_BAD))
        ogk_die(OGK_EXIT_INPUT, "chat: %s", at.tmpl_e.msg);
    if (o.show_template) {
        const char *src = c.tpl ? c.tpl : app_chat_template(at.tok, family, NULL);
        if (!src)
            ogk_die(OGK_EXIT_INPUT, "chat: no chat template: the tokenizer has none and there is no built-in one for "
                                    "family '%s'", family ? family : "(unknown)");
        fputs(src, stdout);
        free(file_tpl);
        app_tokenizer_close(&at);
        finish("chat");
        return 0;
    }
    if (o.nargs > 1)
        ogk_die(OGK_EXIT_USAGE, "chat: one input file at most");
    if (o.nargs == 1)
        o.file = o.args[0], o.nargs = 0;
    size_t len;
    char *in = read_input(&o, "chat", " ", &len);
    if (o.jsonl) {
        each_line(in, len, 1, chat_line, &c);
    } else {
        json_error_t je;
        json_t *j = json_loadb(in, len, JSON_DECODE_ANY, &je);
        if (!j)
            ogk_die(OGK_EXIT_INPUT, "chat: %s line %d: %s", o.file ? o.file : "stdin", je.line, json_reason(&je));
        chat_one(&c, j, o.file ? o.file : "stdin");
        json_decref(j);
    }
    free(in);
    free(file_tpl);
    app_tokenizer_close(&at);
    finish("chat");
    return 0;
}
