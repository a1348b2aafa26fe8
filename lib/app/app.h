/* lib/app — what the programs that run models and tokenizers share (npu-forward, spec-replay, a server):
 * reading a text from a file or stdin, reading a JSON array of token ids, opening a tokenizer from a
 * container or a directory, opening a model and its state from the common options, and turning a prompt
 * (plain, or through the chat template) into token ids.
 *
 * Owns the glue between lib/model, lib/tok and lib/q4nx that each program would otherwise repeat. Every
 * function returns an error (ogk_error, and where a program needs it the exit code that fits in *code);
 * none parses argv, prints usage or exits: command lines, usage text and exit stay in bin/. */
#ifndef OGK_APP_H
#define OGK_APP_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"
#include "tok/tok.h"
#include "util/util.h"

/* ---- input ---- */
/* All of path ("-" = stdin) into a NUL-terminated heap buffer. A pipe or FIFO (`<(...)`) is read to its
 * end; a directory, socket or device is refused by name. A read error is an error (never a silently
 * shortened text), and so is a text over APP_TEXT_MAX bytes (stdin on /dev/zero, a runaway pipe:
 * refused by name once the limit is passed, not read until memory runs out). */
#define APP_TEXT_MAX ((size_t)256 << 20)
char *app_read_text(const char *path, size_t *len, ogk_error *e);
/* A JSON array of token ids in [0, 2^31) from s (n bytes); where names the source in errors ("line 3",
 * a path). May be empty. *count ids, malloc'd. */
int32_t *app_parse_ids(const char *s, size_t n, const char *where, size_t *count, ogk_error *e);
/* A non-empty JSON array of token ids from path ("-" = stdin). */
int *app_read_ids(const char *path, int *n, ogk_error *e);

/* ---- tokenizers ---- */
typedef struct {
    tok *tok;
    char *family;        /* the container's model family, or NULL (a directory has none) */
    char *chat_template; /* the container's model.chat_template, or NULL */
    int tmpl_bad;              /* app_chat_templates_check's mask for these templates */
    ogk_error tmpl_e, tools_e; /* and what it found */
} app_tokenizer;
/* From a directory (tokenizer.json + tokenizer_config.json) or a container's assets; exactly one of dir
 * and container. 0, or -1 with e filled and *code (3: refused input, 4: cannot load). A chat template that
 * does not parse is no failure here: tmpl_bad says so (app_chat_templates_check). */
int app_tokenizer_open(app_tokenizer *at, const char *dir, const char *container, ogk_error *e, int *code);
void app_tokenizer_close(app_tokenizer *at);
/* The tokenizer of an open model's container. */
tok *app_model_tokenizer(const model *m, ogk_error *e);
/* The chat template to render with: the tokenizer's own, else the container's (container_template),
 * else the built-in one for family; NULL when none. */
const char *app_chat_template(const tok *t, const char *family, const char *container_template);

/* The chat templates a conversation is rendered with, checked without rendering (tok_chat_template_check): the
 * one app_chat_template picks (default) and the tokenizer's "tool_use" one (taken when a conversation has tools).
 * f is the container (NULL for a tokenizer directory), path its file name or the directory, for the messages.
 * Returns a mask: APP_TEMPLATE_BAD (the default one does not parse: default_e says where and why),
 * APP_TEMPLATE_TOOLS_BAD (the tool_use one: tools_e); 0 when each that exists parses (none at all is 0: the
 * refusal comes with the first conversation). */
enum { APP_TEMPLATE_BAD = 1, APP_TEMPLATE_TOOLS_BAD = 2 };
struct q4nx_file;
int app_chat_templates_check(const struct q4nx_file *f, const char *path, const tok *t, const char *family,
                             const char *container_template, ogk_error *default_e, ogk_error *tools_e);

/* ---- models ---- */
typedef struct {
    const char *model; /* container path */
    int threads;       /* <= 0: online CPUs */
    int context;       /* 0: the model's */
    int mode;          /* enum kern_mode; -1: the pack's (model_default_mode) */
    int weights_in;    /* Q4NX_IN_AUTO (huge-page copy where it pays), _MAP (--mmap), _LOAD (--no-mmap) */
    int verify;        /* check every weight's checksum after opening (refused: exit 3) */
} app_model_opts;
/* Select the kernels and open the container. NULL with e and *code (3 refused, 4 cannot run). */
model *app_model_open(const app_model_opts *o, ogk_error *e, int *code);
/* A state of context positions (0: o->context, else the model's) returning up to logit_rows rows of
 * logits. NULL with e and *code (2: a context larger than the model's, 4: allocation). */
model_state *app_state_new(const model *m, const app_model_opts *o, int context, int logit_rows, ogk_error *e,
                           int *code);
/* The model's context length for options o (o->context, else the model's). */
/* The mode to run: o->mode, or the pack's default when it is -1. */
int app_mode(const model *m, const app_model_opts *o);
int app_context(const model *m, const app_model_opts *o);

/* ---- prompts ---- */
typedef struct {
    const char *text; /* the prompt text (len bytes) */
    size_t len;
    int chat;           /* render {system?, user: text} through the chat template first */
    const char *system; /* the system message with chat, or NULL */
} app_prompt;
/* The prompt's token ids: with chat, the rendered template (which writes its own special tokens), else
 * the text with the post-processor's (BOS...). Encoding stops as soon as there are more than max_ids
 * (a prompt that cannot fit the context is refused without tokenizing all of it). NULL with e filled
 * (all failures are refused input, exit 3): "chat template: ...", "prompt: ...". */
int *app_prompt_ids(const model *m, tok *t, const app_prompt *p, int max_ids, int *n, ogk_error *e);

#endif
