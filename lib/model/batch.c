/* Continuous batching: one pass over the next token of several independent sequences (the server's
 * slots), each with its own KV cache. The projections see all rows at once (one kern_matmul of
 * M = rows: the weights stream once per step); what depends on a row's position or history (RoPE,
 * the KV write, attention) runs per row on that row's own state, through model.c's own steps. */
#include <stdlib.h>
#include <string.h>

#include "kern/kern.h"
#include "model_int.h"

/* y1[rows x N] = x[rows x K] · w1ᵀ with model.c's mode rule, and y2 by w2 in the same launch when w2 is not
 * NULL (gate and up: kern_matmul2). Only the integer kernels (int8, 16-bit) give a row the same bits
 * whatever M is; fp32 rows run one at a time (see model.h). */
static int matmul_pair(model_state *work, float *y1, const ogk_qtensor *w1, float *y2, const ogk_qtensor *w2,
                       const float *x, int rows, ogk_error *e)
{
    int mode = model_matmul_mode(work, w1);
    if (w2 && mode != model_matmul_mode(work, w2))
        return matmul_pair(work, y1, w1, NULL, NULL, x, rows, e) || matmul_pair(work, y2, w2, NULL, NULL, x, rows, e);
    ogk_error ke;
    int step = mode != KERN_F32 ? rows : 1;
    for (int r = 0; r < rows; r += step) {
        int n = rows - r < step ? rows - r : step;
        if (kern_matmul2(work->pool, w1, y1 + (size_t)r * w1->n, w2, w2 ? y2 + (size_t)r * w2->n : NULL,
                         x + (size_t)r * w1->k, n, mode, &ke))
            return ogk_fail(e, "%s: %s", w1->role, ke.msg);
        work->prof.launches++;
    }
    return 0;
}

static int matmul(model_state *work, float *y, const float *x, int rows, const ogk_qtensor *w, ogk_error *e)
{
    return matmul_pair(work, y, w, NULL, NULL, x, rows, e);
}

int model_forward_batch(model_state *work, model_state *const *states, const int *tokens, int n,
                        const unsigned char *want, ogk_error *e)
{
    const model *m = work->m;
    const model_config *c = &m->c;
    if (n <= 0 || n > MODEL_CHUNK)
        return ogk_fail(e, "batch of %d rows (1..%d)", n, MODEL_CHUNK);
    /* off[r]: row r's place among the consecutive rows of its state (0 for the first); li[r]: its row
     * of logits (how many rows of its state before it want logits), -1 when it wants none */
    int off[MODEL_CHUNK], base[MODEL_CHUNK], li[MODEL_CHUNK], wanted = 0;
    for (int i = 0; i < n; i++) {
        model_state *s = states[i];
        off[i] = i > 0 && states[i - 1] == s ? off[i - 1] + 1 : 0;
        base[i] = s->pos;
        int w = !want || want[i], prior = 0; /* rows of this state before i that want logits */
        for (int r = i - off[i]; r < i; r++)
            prior += li[r] >= 0;
        li[i] = w ? prior : -1;
        wanted += w;
        if (s->m != m || s->mode != work->mode)
            return ogk_fail(e, "batch row %d: a state of another model or mode", i);
        if (s->pos + off[i] + 1 > s->context)
            return ogk_fail(e, "batch row %d: context full (%d positions)", i, s->context);
        if (li[i] >= s->logit_rows)
            return ogk_fail(e, "batch row %d: logits row %d of its state, which holds %d rows of logits", i,
                            li[i] + 1, s->logit_rows);
        if (tokens[i] < 0 || tokens[i] >= c->vocab_size)
            return ogk_fail(e, "token id %d out of range [0, %d)", tokens[i], c->vocab_size);
        for (int j = 0; j < i - off[i]; j++)
            if (states[j] == s)
                return ogk_fail(e, "batch rows %d and %d: the rows of one state must be consecutive", j, i);
    }
    int dim = c->dim, hd = c->head_dim, qd = c->n_heads * hd, kvd = c->n_kv_heads * hd;
    double t0 = ogk_now();
    memset(&work->prof, 0, sizeof work->prof);

    model_step_embed(work, tokens, n);
    for (int l = 0; l < c->n_layers; l++) {
        const model_layer *L = &m->w.layers[l];

        /* attention norm; q, k, v for all rows at once */
        model_step_residual_norm(work, n, 0, NULL, L->input_norm, L->input_norm_b);
        if (L->wqkv) {
            if (matmul(work, work->qkv, work->xb, n, L->wqkv, e))
                return -1;
            model_step_split_qkv(work, n);
        } else if (matmul(work, work->q, work->xb, n, L->wq, e) || matmul(work, work->k, work->xb, n, L->wk, e) ||
                   matmul(work, work->v, work->xb, n, L->wv, e)) {
            return -1;
        }

        /* each state's rows against its own cache, through the state's buffers: the KV of all its rows
         * is written first, then each row attends to the positions up to its own (what model_forward
         * does with a chunk of rows, and the same result for each row as one row at a time) */
        double ta = ogk_now();
        for (int r0 = 0, r1; r0 < n; r0 = r1) {
            model_state *s = states[r0];
            for (r1 = r0 + 1; r1 < n && states[r1] == s;)
                r1++;
            int rows = r1 - r0;
            memcpy(s->q, work->q + (size_t)r0 * qd, (size_t)rows * qd * sizeof(float));
            memcpy(s->k, work->k + (size_t)r0 * kvd, (size_t)rows * kvd * sizeof(float));
            memcpy(s->v, work->v + (size_t)r0 * kvd, (size_t)rows * kvd * sizeof(float));
            model_step_attention(s, L, l, rows);
            memcpy(work->q + (size_t)r0 * qd, s->q, (size_t)rows * qd * sizeof(float));
        }
        work->prof.attn_ms += (ogk_now() - ta) * 1e3;

        /* output projection, residual; ffn norm; SwiGLU MLP; residual */
        if (matmul(work, work->xb, work->q, n, L->wo, e))
            return -1;
        model_step_residual_norm(work, n, 1, L->attn_out_norm, L->post_attn_norm, L->post_attn_norm_b);
        if (matmul_pair(work, work->hb, L->w_gate, work->hb2, L->w_up, work->xb, n, e))
            return -1;
        model_step_swiglu(work, n);
        if (matmul(work, work->xb, work->hb, n, L->w_down, e))
            return -1;
        model_step_residual_norm(work, n, 1, L->mlp_out_norm, NULL, NULL);
    }
    double t1 = ogk_now();

    /* final norm and classifier of the rows that want logits (gathered to the front of xb), each
     * into its state's logits row */
    int g = 0;
    for (int r = 0; r < n; r++)
        if (li[r] >= 0) {
            if (g != r)
                memcpy(work->x + (size_t)g * dim, work->x + (size_t)r * dim, (size_t)dim * sizeof(float));
            g++;
        }
    model_step_norm(c, work->xb, work->x, m->w.final_norm, m->w.final_norm_b, wanted);
    size_t V = (size_t)c->vocab_size;
    int argmax_only = 1; /* the argmax head when no state with logits here reads more than its argmax */
    for (int r = 0; r < n; r++)
        argmax_only &= li[r] < 0 || states[r]->head_argmax;
    if (wanted && model_matmul_mode(work, m->w.lm_head) != KERN_F32) {
        /* integer classifier: one pass of the rows (the weights stream once), then each row to its state */
        if (work->batch_cap < (size_t)wanted * V) {
            float *b = realloc(work->batch_logits, (size_t)wanted * V * sizeof *b);
            if (!b)
                return ogk_fail(e, "out of memory (%d rows of logits)", wanted);
            work->batch_logits = b, work->batch_cap = (size_t)wanted * V;
        }
        ogk_error ke;
        if (model_classify(work, work->batch_logits, work->xb, wanted, argmax_only, &ke))
            return ogk_fail(e, "%s: %s", m->w.lm_head->role, ke.msg);
        work->prof.launches++;
        for (int r = 0, i = 0; r < n; r++)
            if (li[r] >= 0)
                memcpy(states[r]->logits + (size_t)li[r] * V, work->batch_logits + (size_t)i++ * V, V * sizeof(float));
    } else {
        for (int r = 0, i = 0; r < n; r++)
            if (li[r] >= 0) {
                ogk_error ke;
                if (model_classify(work, states[r]->logits + (size_t)li[r] * V, work->xb + (size_t)i++ * dim, 1, 0, &ke))
                    return ogk_fail(e, "%s: %s", m->w.lm_head->role, ke.msg);
            }
    }
    for (int r = 0; r < n; r++)
        states[r]->pos = base[r] + off[r] + 1;
    work->prof.rows = n;
    work->prof.layers_ms = (t1 - t0) * 1e3;
    work->prof.head_ms = (ogk_now() - t1) * 1e3;
    return 0;
}
