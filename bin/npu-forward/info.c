/* npu-forward info: the model's configuration, as JSON. */
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

int cmd_info(int argc, char **argv)
{
    opts o;
    nf_parse(argc, argv, &o);
    model *m = nf_open_model(&o);
    const model_config *c = &m->c;
    json_t *eos = json_array();
    for (int i = 0; i < c->n_eos; i++)
        json_array_append_new(eos, json_integer(c->eos_ids[i]));
    json_t *r = json_pack("{s:o,s:s,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:b,s:b,s:b,s:o,s:I,s:s}", "model", ogk_json_str(o.mo.model),
                          "family", c->family_name, "vocab_size", c->vocab_size, "hidden_size", c->dim,
                          "intermediate_size", c->hidden_dim, "num_layers", c->n_layers, "num_heads", c->n_heads,
                          "num_kv_heads", c->n_kv_heads, "head_dim", c->head_dim, "context_length",
                          c->context_length, "rope_dim", c->rope_dim, "qkv_bias", c->qkv_bias, "qk_norm", c->qk_norm,
                          "tied", c->tied, "eos_token_ids", eos, "weight_bytes_per_token", (json_int_t)m->weight_bytes,
                          "layout", ogk_layout_name(q4nx_layout(m->file)));
    /* the mode a run takes without --mode, and why */
    const json_t *acc = json_object_get(q4nx_model(m->file), "accuracy_level");
    json_object_set_new(r, "accuracy_level", json_is_integer(acc) ? json_incref((json_t *)acc) : json_null());
    json_object_set_new(r, "default_mode", json_string(kern_mode_name(model_default_mode(m))));
    ogk_json_print(stdout, r);
    json_decref(r);
    model_close(m);
    return 0;
}
