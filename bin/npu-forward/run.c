/* npu-forward run: generate text from a prompt (or a chat), streamed to stdout or as one JSON object. */
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/app.h"
#include "cmd.h"
#include "kern/kern.h"
#include "model/model.h"
#include "serve/serve.h"
#include "tok/tok.h"
#include "util/util.h"

typedef struct {
    tok_stream *ts;
    model_stopper stop;
    tok *t;
    int *ids;
    int n_ids, cap;
    char *text; /* --json: everything released */
    size_t text_len, text_cap;
    int json;
} run_ctx;

static void emit(const char *s, size_t n, void *arg)
{
    run_ctx *r = arg;
    if (r->json) {
        if (r->text_len + n + 1 > r->text_cap) {
            r->text_cap = (r->text_len + n + 1) * 2;
            if (!(r->text = realloc(r->text, r->text_cap)))
                ogk_die(OGK_EXIT_INIT, "out of memory");
        }
        memcpy(r->text + r->text_len, s, n);
        r->text_len += n;
        r->text[r->text_len] = 0;
        return;
    }
    if (fwrite(s, 1, n, stdout) != n || fflush(stdout))
        ogk_die(OGK_EXIT_CHECK, "stdout: write failed");
}

static int on_token(int id, void *arg)
{
    run_ctx *r = arg;
    ogk_error e;
    if (r->n_ids == r->cap && !(r->ids = realloc(r->ids, (size_t)(r->cap = r->cap * 2 + 64) * sizeof *r->ids)))
        ogk_die(OGK_EXIT_INIT, "out of memory");
    size_t n = 0;
    /* a special token named as a stop string (it adds no text for the filter to see) ends the answer as an
     * end token does: not one of its ids */
    if (r->stop.n && tok_is_special(r->t, id) && model_stopper_special(&r->stop, tok_id_to_token(r->t, id, &n), n))
        return 1;
    r->ids[r->n_ids++] = id;
    const char *s = tok_stream_put(r->ts, id, &n, &e);
    if (!s)
        ogk_die(OGK_EXIT_INIT, "detokenize: %s", e.msg);
    return model_stopper_feed(&r->stop, s, n, emit, r);
}

/* the prompt's token ids: --ids, or text (-p / -f) encoded, through the chat template with --chat; a
 * prompt longer than the context is refused as soon as that is known */
static int *prompt_ids(const model *m, tok *t, const opts *o, int *n)
{
    if (o->ids_file)
        return nf_read_ids(o->ids_file, n);
    ogk_error e;
    app_prompt p = {.text = o->prompt, .chat = o->chat, .system = o->system};
    char *text = NULL;
    if (o->prompt)
        p.len = strlen(o->prompt);
    else if (!(text = app_read_text(o->prompt_file, &p.len, &e)))
        ogk_die(OGK_EXIT_INPUT, "%s", e.msg);
    else
        p.text = text;
    int context = app_context(m, &o->mo);
    char ctxs[96];
    int *ids = app_prompt_ids(m, t, &p, context, n, &e);
    if (!ids) /* the context named where it is the reason */
        ogk_die(OGK_EXIT_INPUT, "%s%s", e.msg,
                strstr(e.msg, "does not fit the context") ? (snprintf(ctxs, sizeof ctxs, " (%d positions: -c, up to %d)", context,
                                                     m->c.context_length), ctxs) : "");
    free(text);
    return ids;
}

int cmd_run(int argc, char **argv)
{
    opts o;
    nf_parse(argc, argv, &o);
    if (!!o.prompt + !!o.prompt_file + !!o.ids_file != 1)
        ogk_die(OGK_EXIT_USAGE, "run: give exactly one of -p TEXT, -f FILE, --ids FILE");
    if (o.chat && o.ids_file)
        ogk_die(OGK_EXIT_USAGE, "run: --chat renders text; it does not apply to --ids");
    model *m = nf_open_model(&o);
    tok *t = nf_open_tok(m);
    int n;
    int *ids = prompt_ids(m, t, &o, &n);
    nf_check_ids(m, "prompt", ids, n);
    model_state *s = nf_new_state(m, &o, 0, 1);
    if (n > s->context)
        ogk_die(OGK_EXIT_INPUT, "prompt: %d tokens do not fit the context of %d positions (-c, up to %d)", n,
                s->context, m->c.context_length);
    model_sampler sp;
    if (model_sampler_init(&sp, model_sample_vocab(m->c.vocab_size, tok_vocab_size(t), o.temp), o.temp, o.sample_top_k, o.top_p,
                           o.seed_set ? o.seed : (uint64_t)getpid()))
        ogk_die(OGK_EXIT_INIT, "out of memory");
    run_ctx r = {.ts = tok_stream_new(t, TOK_STREAM_SKIP_SPECIAL | TOK_STREAM_SKIP_UNKNOWN), .t = t, .json = o.json};
    if (!r.ts)
        ogk_die(OGK_EXIT_INIT, "out of memory");
    model_stopper_init(&r.stop, o.stops, o.n_stops);
    model_gen g = {.max_new = o.n, .ignore_eos = o.ignore_eos, .on_token = on_token, .ctx = &r};
    model_gen_stats st;
    ogk_error e;
    if (model_generate(s, &sp, ids, n, &g, &st, &e))
        ogk_die(OGK_EXIT_INPUT, "%s", e.msg);
    if (!r.stop.hit) {
        size_t fl;
        const char *tail = tok_stream_flush(r.ts, &fl, &e);
        if (tail)
            model_stopper_feed(&r.stop, tail, fl, emit, &r);
        model_stopper_flush(&r.stop, emit, &r);
    }
    if (o.json) {
        json_t *pj = json_array(), *gj = json_array();
        for (int i = 0; i < n; i++)
            json_array_append_new(pj, json_integer(ids[i]));
        for (int i = 0; i < r.n_ids; i++)
            json_array_append_new(gj, json_integer(r.ids[i]));
        json_t *out = json_pack(
            "{s:o,s:o,s:s%,s:s,s:{s:i,s:i,s:f,s:f,s:f,s:f}}", "prompt_ids", pj, "ids", gj, "text",
            r.text ? r.text : "", r.text_len, "stop_reason", st.stop, "timings", "prompt_n", st.prompt_tokens,
            "predicted_n", st.new_tokens, "prompt_ms", st.prefill_ms, "ttft_ms", st.ttft_ms, "predicted_ms",
            st.decode_ms, "predicted_per_second",
            st.decode_ms > 0 && st.new_tokens > 1 ? (st.new_tokens - 1) / (st.decode_ms / 1e3) : 0.0);
        if (ogk_json_print(stdout, out))
            ogk_die(OGK_EXIT_CHECK, "stdout: write failed");
        json_decref(out);
    }
    if (s->prof_print)
        fprintf(stderr, "npu-forward: prompt %d tokens %.1f ms (%.1f tok/s), %d generated in %.1f ms (%.2f tok/s), stop %s\n",
                n, st.prefill_ms, n / (st.prefill_ms / 1e3), st.new_tokens, st.decode_ms,
                st.new_tokens > 1 ? (st.new_tokens - 1) / (st.decode_ms / 1e3) : 0.0, st.stop);
    model_stopper_free(&r.stop);
    tok_stream_free(r.ts);
    free(r.ids), free(r.text), free(ids), free(o.stops);
    model_sampler_free(&sp);
    model_state_free(s);
    tok_free(t);
    model_close(m);
    return 0;
}
