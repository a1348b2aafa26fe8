/* npu-forward's subcommands that live in their own files (the files of bin/npu-forward/). Each takes the
 * subcommand's argv (argv[0] is its name), owns its options and usage text, and returns the exit status
 * (or exits through ogk_die). A new subcommand: a file here, a line below, a row in main's table. */
#ifndef OGK_NPU_FORWARD_CMD_H
#define OGK_NPU_FORWARD_CMD_H

int cmd_tokenize(int argc, char **argv);   /* tokenizer.c */
int cmd_detokenize(int argc, char **argv); /* tokenizer.c */
int cmd_chat(int argc, char **argv);       /* tokenizer.c */
/* -m PATH: a container is returned as it is; an OGA pack directory is imported into a cached container
 * (OGAKIT_CACHE, else $XDG_CACHE_HOME/ogakit or ~/.cache/ogakit) whose path is returned (import.c) */
const char *npu_forward_import(const char *path);

#endif
