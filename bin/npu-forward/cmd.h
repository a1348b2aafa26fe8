/* npu-forward's subcommands that live in their own files (the files of bin/npu-forward/). Each takes the
 * subcommand's argv (argv[0] is its name), owns its options and usage text, and returns the exit status
 * (or exits through ogk_die). A new subcommand: a file here, a line below, a row in main's table. */
#ifndef OGK_NPU_FORWARD_CMD_H
#define OGK_NPU_FORWARD_CMD_H

#include "app/app.h"
#include "model/model.h"
#include "tok/tok.h"

/* the options of run / logits / bench / info (npu-forward.c parses them; each command reads its own) */
typedef struct {
    app_model_opts mo; /* -m, -t, -c, --mode, --no-mmap */
    const char *cmd, *prompt, *prompt_file, *ids_file, *system, *out_f32, *feed, *lens, *verify_rows;
    int chat, n, sample_top_k, json, ignore_eos, top_logits, gen, reps, warmup, probe, full_head;
    float temp, top_p;
    uint64_t seed;
    int seed_set; /* --seed given (0 is a seed like any other) */
    char **stops;
    int n_stops;
} opts;

#define BENCH_DEFAULT_LENS "128,512,2048"

/* shared by the commands (npu-forward.c); each dies with the documented exit code on failure */
_Noreturn void nf_usage(int code);
void nf_parse(int argc, char **argv, opts *o);
model *nf_open_model(const opts *o); /* -m: a container, or a pack directory imported (import.c) */
model_state *nf_new_state(const model *m, const opts *o, int context, int logit_rows);
tok *nf_open_tok(const model *m);
int *nf_read_ids(const char *path, int *n); /* a JSON array of token ids from FILE ("-" = stdin) */
void nf_check_ids(const model *m, const char *what, const int *ids, int n);

int cmd_run(int argc, char **argv);        /* run.c */
int cmd_logits(int argc, char **argv);     /* logits.c */
int cmd_bench(int argc, char **argv);      /* bench.c */
int cmd_info(int argc, char **argv);       /* info.c */
int cmd_serve(int argc, char **argv);      /* serve.c */


int cmd_tokenize(int argc, char **argv);   /* tokenizer.c */
int cmd_detokenize(int argc, char **argv); /* tokenizer.c */
int cmd_chat(int argc, char **argv);       /* tokenizer.c */
/* -m PATH: a container is returned as it is; an OGA pack directory is imported into a cached container
 * (OGAKIT_CACHE, else $XDG_CACHE_HOME/ogakit or ~/.cache/ogakit) whose path is returned (import.c) */
const char *npu_forward_import(const char *path);

#endif
