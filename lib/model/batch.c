/* Continuous batching: one pass over the next token of several independent sequences (the server's
 * slots), each with its own KV cache. The projections see all rows at once (one kern_matmul of
 * M = rows: the weights stream once per step); what depends on a row's position or history (RoPE,
 * the KV write, attention) runs per row on that row's own state, through model.c's own steps. */
#include <stdlib.h>
#include <string.h>

#include "kern/kern.h"
#include "model_int.h"

/* y[rows x N] = x[rows x K] · Wᵀ with model.c's mode rule. Only the integer kernels (int8, 16-bit)
 * give a row the same bits whatever M is; fp32 rows run one at a time (see model.h). */
static int matmul(model_state *work, float *y, const float *x, int rows, const ogk_qtensor *w, ogk_error *e)
{
    int mode = model_matmul_mode(work, w);
    ogk_error ke;
    if (mode != KERN_F32 || rows == 1) {
        if (kern_matmul(work->pool, w, x, rows, y, mode, &ke))
            return ogk_fail(e, "%s: %s", w->role, ke.msg);
        work->prof.launches++;
        return 0;
    }
    for (int r = 0; r < rows; r++) {
        if (kern_matmul(work->pool, w, x + (size_t)r * w->k, 1, y + (size_t)r * w->n, mode, &ke))
            return ogk_fail(e, "%s: %s", w->role, ke.msg);
        work->prof.launches++;
    }
    return 0;
}

static void residual(float *x, const float *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] += y[i];
}

int model_forward_batch(model_state *work, model_state *const *states, const int *tokens, int n, ogk_error *e)
{
    const model *m = work->m;
    const model_config *c = &m->c;
    if (n <= 0 || n > MODEL_CHUNK)
        return ogk_fail(e, "batch of %d rows (1..%d)", n, MODEL_CHUNK);
    /* off[r]: row r's place among the consecutive rows of its state (0 for the first) */
    int off[MODEL_CHUNK], base[MODEL_CHUNK];
    for (int i = 0; i < n; i++) {
        model_state *s = states[i];
        off[i] = i > 0 && states[i - 1] == s ? off[i - 1] + 1 : 0;
        base[i] = s->pos;
        if (s->m != m || s->mode != work->mode)
            return ogk_fail(e, "batch row %d: a state of another model or mode", i);
        if (s->pos + off[i] + 1 > s->context)
            return ogk_fail(e, "batch row %d: context full (%d positions)", i, s->context);
        if (off[i] >= s->logit_rows)
            return ogk_fail(e, "batch row %d: row %d of its state, which holds %d rows of logits", i, off[i] + 1,
                            s->logit_rows);
        if (tokens[i] < 0 || tokens[i] >= c->vocab_size)
            return ogk_fail(e, "token id %d out of range [0, %d)", tokens[i], c->vocab_size);
        for (int j = 0; j < i - off[i]; j++)
            if (states[j] == s)
                return ogk_fail(e, "batch rows %d and %d: the rows of one state must be consecutive", j, i);
    }
    int dim = c->dim, hd = c->head_dim, qd = c->n_heads * hd, kvd = c->n_kv_heads * hd;
    size_t nx = (size_t)n * dim;
    double t0 = ogk_now();
    memset(&work->prof, 0, sizeof work->prof);

    model_step_embed(work, tokens, n);
    for (int l = 0; l < c->n_layers; l++) {
        const model_layer *L = &m->w.layers[l];

        /* attention rmsnorm; q, k, v for all rows at once */
        model_step_rmsnorm(work->xb, work->x, L->input_norm, n, dim, c->rms_eps);
        if (L->wqkv) {
            if (matmul(work, work->qkv, work->xb, n, L->wqkv, e))
                return -1;
            for (int r = 0; r < n; r++) {
                const float *p = work->qkv + (size_t)r * (qd + 2 * kvd);
                memcpy(work->q + (size_t)r * qd, p, (size_t)qd * sizeof(float));
                memcpy(work->k + (size_t)r * kvd, p + qd, (size_t)kvd * sizeof(float));
                memcpy(work->v + (size_t)r * kvd, p + qd + kvd, (size_t)kvd * sizeof(float));
            }
        } else if (matmul(work, work->q, work->xb, n, L->wq, e) || matmul(work, work->k, work->xb, n, L->wk, e) ||
                   matmul(work, work->v, work->xb, n, L->wv, e)) {
            return -1;
        }

        /* each row against its own cache: through the row's state (row 0 of its buffers) */
        double ta = ogk_now();
        for (int r = 0; r < n; r++) {
            model_state *s = states[r];
            memcpy(s->q, work->q + (size_t)r * qd, (size_t)qd * sizeof(float));
            memcpy(s->k, work->k + (size_t)r * kvd, (size_t)kvd * sizeof(float));
            memcpy(s->v, work->v + (size_t)r * kvd, (size_t)kvd * sizeof(float));
            s->pos = base[r] + off[r]; /* rows of one state: consecutive positions, each after the last's KV */
            model_step_attention(s, L, l, 1);
            s->pos = base[r];
            memcpy(work->q + (size_t)r * qd, s->q, (size_t)qd * sizeof(float));
        }
        work->prof.attn_ms += (ogk_now() - ta) * 1e3;

        /* output projection, residual; ffn rmsnorm; SwiGLU MLP; residual */
        if (matmul(work, work->xb, work->q, n, L->wo, e))
            return -1;
        residual(work->x, work->xb, nx);
        model_step_rmsnorm(work->xb, work->x, L->post_attn_norm, n, dim, c->rms_eps);
        if (matmul(work, work->hb, work->xb, n, L->w_gate, e) || matmul(work, work->hb2, work->xb, n, L->w_up, e))
            return -1;
        model_step_swiglu(work, n);
        if (matmul(work, work->xb, work->hb, n, L->w_down, e))
            return -1;
        residual(work->x, work->xb, nx);
    }
    double t1 = ogk_now();

    /* final rmsnorm; classifier into each row's own logits */
    model_step_rmsnorm(work->xb, work->x, m->w.final_norm, n, dim, c->rms_eps);
    size_t V = (size_t)c->vocab_size;
    if (model_matmul_mode(work, m->w.lm_head) != KERN_F32) {
        /* integer classifier: one pass of n rows (the weights stream once), then each row to its state */
        if (work->batch_cap < (size_t)n * V) {
            float *b = realloc(work->batch_logits, (size_t)n * V * sizeof *b);
            if (!b)
                return ogk_fail(e, "out of memory (%d rows of logits)", n);
            work->batch_logits = b, work->batch_cap = (size_t)n * V;
        }
        if (matmul(work, work->batch_logits, work->xb, n, m->w.lm_head, e))
            return -1;
        for (int r = 0; r < n; r++)
            memcpy(states[r]->logits + (size_t)off[r] * V, work->batch_logits + (size_t)r * V, V * sizeof(float));
    } else {
        for (int r = 0; r < n; r++)
            if (matmul(work, states[r]->logits + (size_t)off[r] * V, work->xb + (size_t)r * dim, 1, m->w.lm_head, e))
                return -1;
    }
    for (int r = 0; r < n; r++)
        states[r]->pos = base[r] + off[r] + 1;
    work->prof.rows = n;
    work->prof.layers_ms = (t1 - t0) * 1e3;
    work->prof.head_ms = (ogk_now() - t1) * 1e3;
    return 0;
}
