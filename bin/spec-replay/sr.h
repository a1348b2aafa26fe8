/* spec-replay's modes, one file each in bin/spec-replay/ (live.c, record.c, replay.c), and what they
 * share: the options main parsed (bin/spec-replay.c) and the helpers that open models, states and prompts
 * from them. */
#ifndef OGK_SPEC_REPLAY_SR_H
#define OGK_SPEC_REPLAY_SR_H

#include "model/model.h"
#include "spec/spec.h"
#include "tok/tok.h"

#define GAP_TIE 1e-3f /* a plain-greedy step whose top-1/top-2 logit gap is below this is a near-tie */

struct sr_opts {
    const char *target, *draft, *prompt, *prompt_file, *ids_file;
    int n, k, threads, context, mode, ignore_eos, json, weights_in, verify;
    /* replay */
    const char *draft_url, *recording;
    int ks[SPEC_K_MAX], nk;
    double step_ms, pass_ms[SPEC_K_MAX];
    int n_pass, measure, selftest;
    double timeout;
    const char *api_key; /* --api-key: sent as "Authorization: Bearer KEY" to --url / --draft-url */
    /* record */
    const char *url, *tokenizer, *prompts, *out;
    int tokens, twice;
};
extern struct sr_opts opt;

/* shared helpers (bin/spec-replay.c); each dies with the program's exit code on failure */
model *open_model(const char *path);
model_state *new_state(const model *m, int context, int logit_rows);
int *prompt_ids(const model *m, int max_ids, int *n); /* --ids, or -p / -f with the target's tokenizer */
void check_pair(const model *T, const model *D);      /* a drafter numbers tokens as the target does */
/* text to ids with the post-processor's special tokens; NULL with e filled (an empty text too) */
int *encode_text(tok *t, const char *text, size_t len, int *n, ogk_error *e);
/* "a,b,c" of numbers into v (at most max); the count, or dies with usage naming the option */
int parse_list(const char *option, const char *s, double *v, int max, int integer, double lo, double hi);

int live(void);                         /* live.c: both models in this process */
int record_main(int argc, char **argv); /* record.c: spec-replay record ... */
int replay(void);                       /* replay.c: drafters against a recording */

#endif
