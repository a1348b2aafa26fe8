/* lib/model internals: the forward pass's steps that batch.c reuses from model.c, so a batched pass
 * runs exactly the arithmetic of model_forward's (one definition of each step). Not for other modules. */
#ifndef OGK_MODEL_INT_H
#define OGK_MODEL_INT_H

#include "model.h"

void model_step_embed(model_state *s, const int *tokens, int rows);                  /* into s->x */
/* o = the residual stream's norm (c's kind: RMSNorm, or LayerNorm with bias b, NULL: 0) of rows of x */
void model_step_norm(const model_config *c, float *o, const float *x, const float *w, const float *b, int rows);
void model_step_swiglu(model_state *s, int rows);                                    /* s->hb, s->hb2 */
void model_step_split_qkv(model_state *s, int rows); /* s->qkv (the packed projection) into s->q, s->k, s->v */
/* per row of s->x / s->xb: xb = rmsnorm(xb) with pre's weights when pre (a sandwich norm), x += xb when
 * residual, then xb = norm(x) with norm's weights (and norm_b, a LayerNorm's bias) when norm */
void model_step_residual_norm(model_state *s, int rows, int residual, const float *pre, const float *norm,
                              const float *norm_b);
/* rows already projected into s->q, s->k, s->v at positions s->pos..: the family's steps (qkv bias,
 * q/k norm), RoPE, the KV write, attention; the output over s->q (s->pos is not advanced) */
void model_step_attention(model_state *s, const model_layer *L, int layer, int rows);
/* the activation mode of a projection (enum kern_mode): f32 mode, f32; i8 mode, int8 for every
 * projection but the classifier, whose error would land on the logits unfiltered: 16-bit activations
 * (~256x below int8's error) where the kernel path has them, else fp32 (see npu-forward.1, --mode).
 * The same in every pass, so one token's logits do not depend on the pass it runs in (decode, verify,
 * a batched step): the int8 and 16-bit kernels give a row the same bits whatever M is. */
int model_matmul_mode(const model_state *s, const ogk_qtensor *w);

/* head.c: the classifier of n final-normed rows xb into logits [n][vocab] on s's pool, the argmax head when
 * argmax_only (and the mode has one: i8). 0, or -1 with e filled. */
int model_classify(model_state *s, float *logits, const float *xb, int n, int argmax_only, ogk_error *e);
model_head *model_head_new(void); /* NULL: out of memory */
/* For tests: the largest |int8 − 16-bit classifier| over the head's bound, over every entry of n activation
 * rows x (<= 1 when the bound holds); -1 on failure. */
double model_head_worst(model_state *s, const float *x, int n);
void model_head_free(model_head *h);

#endif
