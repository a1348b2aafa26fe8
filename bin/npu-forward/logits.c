/* npu-forward logits: teacher-forced logits at every position of a token sequence, as JSON (or raw f32). */
#include <errno.h>
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

/* the k largest (ties: lower id first) */
static json_t *topk_json(const float *x, int V, int k)
{
    int *idx = malloc((size_t)k * sizeof *idx);
    if (!idx)
        ogk_die(OGK_EXIT_INIT, "logits: out of memory");
    int n = model_top_ids(x, V, k, idx);
    json_t *ids = json_array(), *lg = json_array();
    for (int i = 0; i < n; i++) {
        json_array_append_new(ids, json_integer(idx[i]));
        json_array_append_new(lg, json_real(x[idx[i]]));
    }
    free(idx);
    return json_pack("{s:o,s:o,s:f}", "ids", ids, "logits", lg, "lse", model_logsumexp(x, V));
}

int cmd_logits(int argc, char **argv)
{
    opts o;
    nf_parse(argc, argv, &o);
    if (!o.ids_file)
        ogk_die(OGK_EXIT_USAGE, "logits: --ids FILE is required");
    if (o.out_f32 && o.top_logits) /* the rows go to the file whole: the top-K list was dropped */
        ogk_die(OGK_EXIT_USAGE, "logits: --out-f32 writes every row whole; --top-logits lists the largest in the "
                                "report instead (give one)");
    if (o.out_f32 && !*o.out_f32)
        ogk_die(OGK_EXIT_USAGE, "logits: --out-f32 needs a file name");
    if (o.out_f32 && !strcmp(o.out_f32, "-"))
        ogk_die(OGK_EXIT_USAGE, "logits: --out-f32 - would mix raw floats with the JSON report on standard output "
                                "(name a file, or /dev/stdout with the report sent elsewhere)");
    model *m = nf_open_model(&o);
    int n, V = m->c.vocab_size;
    int *ids = nf_read_ids(o.ids_file, &n);
    nf_check_ids(m, "ids", ids, n);
    /* feed: prefill = the mode's prefill passes (512 rows in i8 mode, 128 in f32), verify = 16 (M <= 16),
     * step = 1 (decode) */
    int prefill = !strcmp(o.feed, "prefill");
    int per = prefill ? MODEL_CHUNK : !strcmp(o.feed, "verify") ? MODEL_VERIFY_MAX : 1;
    model_state *s = nf_new_state(m, &o, 0, per);
    if (prefill)
        per = model_prefill_rows(s);
    if (n > s->context)
        ogk_die(OGK_EXIT_INPUT, "ids: %d tokens do not fit the context of %d positions", n, s->context);
    ogk_out out = {0};
    ogk_error e;
    if (o.out_f32 && ogk_out_open(&out, o.out_f32, &e)) /* the output cannot be written: 1, as write failures */
        ogk_die(OGK_EXIT_CHECK, "%s", e.msg);
    json_t *rows = json_array();
    if (prefill) /* one sequence read in passes, as onnxruntime reads it in one run (LongRoPE, model.h) */
        model_set_seq_end(s, n);
    for (int done = 0; done < n; done += per) {
        int k = n - done < per ? n - done : per;
        if (model_forward(s, ids + done, k, 1, &e))
            ogk_die(OGK_EXIT_INPUT, "%s", e.msg);
        model_prof_print(s, o.feed);
        for (int r = 0; r < k; r++) {
            const float *x = s->logits + (size_t)r * V;
            if (o.out_f32) {
                if (ogk_write_all(out.fd, x, (size_t)V * sizeof *x))
                    ogk_die(OGK_EXIT_CHECK, "%s: write failed: %s", o.out_f32, strerror(errno));
            } else if (o.top_logits) {
                json_array_append_new(rows, topk_json(x, V, o.top_logits < V ? o.top_logits : V));
            } else {
                json_t *a = json_array();
                for (int j = 0; j < V; j++)
                    json_array_append_new(a, json_real(x[j]));
                json_array_append_new(rows, a);
            }
        }
    }
    if (o.out_f32 && ogk_out_commit(&out, &e))
        ogk_die(OGK_EXIT_CHECK, "%s", e.msg);
    json_t *idj = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(idj, json_integer(ids[i]));
    json_t *res = json_pack("{s:s,s:s,s:s,s:i,s:o,s:i}", "mode", "teacher", "feed", o.feed, "accuracy",
                            kern_mode_name(app_mode(m, &o.mo)), "vocab_size", V, "ids", idj, "positions", n);
    if (o.out_f32)
        json_object_set_new(res, "logits_f32", ogk_json_str(o.out_f32)), json_decref(rows);
    else
        json_object_set_new(res, o.top_logits ? "topk" : "logits", rows);
    if (ogk_json_print(stdout, res))
        ogk_die(OGK_EXIT_CHECK, "stdout: write failed");
    json_decref(res);
    free(ids);
    model_state_free(s);
    model_close(m);
    return 0;
}
