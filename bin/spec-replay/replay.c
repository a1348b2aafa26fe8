/* spec-replay (replay): drafters (a container or a server) against a recording at one or more k, with
 * the drafter's measured cost and the economics of each k. */
#include <getopt.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/app.h"
#include "kern/kern.h"
#include "sr.h"
#include "util/util.h"


static const char *prompt_name(const spec_prompt *p, int i)
{
    static char buf[32];
    if (p->name)
        return p->name;
    snprintf(buf, sizeof buf, "prompt %d", i);
    return buf;
}

/* a name for the terminal: control characters (a recording's names are anyone's) as '?', at most 255 bytes */
static const char *shown(const char *s)
{
    static char buf[256];
    size_t n = 0;
    for (; s && *s && n < sizeof buf - 1; s++)
        buf[n++] = (unsigned char)*s < 0x20 || *s == 0x7f ? '?' : *s;
    buf[n] = 0;
    return buf;
}

/* the drafter's tokenizer must read every recorded prompt text as the target did */
static void check_drafter_tokenizer(const spec_rec *r, const model *D)
{
    ogk_error e;
    const uint8_t *tj;
    size_t tl;
    if (q4nx_asset(D->file, "tokenizer.json", &tj, &tl)) {
        ogk_err("warning: %s has no tokenizer.json: prompt texts are not checked against it", opt.draft);
        return;
    }
    char hash[16];
    spec_hash(tj, tl, hash);
    if (r->tokenizer_hash && strcmp(hash, r->tokenizer_hash))
        ogk_err("warning: %s: its tokenizer.json (%s) is not the recorded target's (%s); checking each prompt", opt.draft,
                hash, r->tokenizer_hash);
    tok *t = app_model_tokenizer(D, &e);
    if (!t)
        ogk_die(OGK_EXIT_INPUT, "%s: %s", opt.draft, e.msg);
    for (int i = 0; i < r->n; i++) {
        const spec_prompt *p = &r->p[i];
        if (!p->text)
            continue;
        int n;
        int *ids = encode_text(t, p->text, strlen(p->text), &n, &e);
        if (!ids)
            ogk_die(OGK_EXIT_INPUT, "prompt %d (%s): the drafter's tokenizer: %s", i, prompt_name(p, i), e.msg);
        if (spec_check_prefix(p, i, ids, n, &e))
            ogk_die(OGK_EXIT_INPUT, "%s: %s", opt.draft, e.msg);
        free(ids);
    }
    tok_free(t);
}

static int econ_json(json_t *proj, double tpr, double step, double pass, double draft_per_round, const char **why)
{
    spec_econ ec;
    ogk_error e;
    if (spec_economics(tpr, step, pass, draft_per_round, &ec, &e)) {
        *why = NULL;
        json_object_set_new(proj, "refused", json_string(e.msg));
        return -1;
    }
    json_object_set_new(proj, "verify_pass_steps", json_real(ec.verify_steps));
    json_object_set_new(proj, "drafter_steps_per_round", json_real(ec.draft_steps));
    json_object_set_new(proj, "break_even_tokens_per_round",
                        json_pack("{s:f,s:f}", "one_pass", ec.break_even_one, "two_pass", ec.break_even_two));
    json_object_set_new(proj, "speedup", json_pack("{s:f,s:f}", "one_pass", ec.speedup_one, "two_pass", ec.speedup_two));
    return 0;
}

static const char *speed_word(double s) { return s < 1 ? " (slow-down)" : ""; }

int replay(void)
{
    ogk_error e;
    if (isatty(0) && !opt.recording)
        ogk_die(OGK_EXIT_USAGE, "no recording: give --recording FILE or one on standard input (see --help)");
    const char *where = opt.recording ? opt.recording : "stdin";
    size_t len;
    char *txt = app_read_text(opt.recording ? opt.recording : "-", &len, &e);
    if (!txt)
        ogk_die(OGK_EXIT_INPUT, "%s", e.msg);
    spec_rec *r = spec_rec_parse(txt, len, where, &e);
    free(txt);
    if (!r)
        ogk_die(OGK_EXIT_INPUT, "%s", e.msg);
    int kmax = 0;
    for (int i = 0; i < opt.nk; i++)
        kmax = opt.ks[i] > kmax ? opt.ks[i] : kmax;

    /* the drafter */
    model *D = NULL;
    model_state *ds = NULL;
    spec_model_drafter md = {0};
    spec_http *h = NULL;
    spec_drafter drafter;
    if (kern_isa_init(&e))
        ogk_die(OGK_EXIT_INIT, "%s", e.msg);
    if (opt.draft) {
        D = open_model(opt.draft);
        if (spec_check_vocab(r, D->c.vocab_size, &e))
            ogk_die(OGK_EXIT_INPUT, "%s: %s", opt.draft, e.msg);
        check_drafter_tokenizer(r, D);
        /* drafts never run past the continuation (a round offers at most what is left of it) */
        int ctx = 0;
        for (int i = 0; i < r->n; i++)
            if (r->p[i].n_ids + r->p[i].n_cont + 1 > ctx)
                ctx = r->p[i].n_ids + r->p[i].n_cont + 1;
        if (ctx > D->c.context_length)
            ogk_die(OGK_EXIT_INPUT, "%s: the longest prompt + continuation needs %d positions; it holds %d", opt.draft,
                    ctx, D->c.context_length);
        ds = new_state(D, ctx, 1);
        if (spec_model_drafter_init(&md, ds, &e))
            ogk_die(OGK_EXIT_INIT, "%s", e.msg);
        drafter = (spec_drafter){spec_model_draft, spec_model_prefill, &md, NULL};
    } else {
        if (!(h = spec_http_new(opt.draft_url, opt.timeout, &e)) || spec_http_key(h, opt.api_key, &e))
            ogk_die(OGK_EXIT_USAGE, "--draft-url: %s", e.msg);
        drafter = (spec_drafter){spec_http_draft, spec_http_prefill, h, spec_http_last_ms};
        char *su = spec_url_shown(opt.draft_url);
        ogk_err("note: a drafter behind %s: its vocabulary and tokenizer cannot be checked against the recording",
                su ? su : "?");
        free(su);
    }

    /* the target's costs: given, or measured here */
    const char *cost_source = NULL;
    double pass_ms[SPEC_K_MAX];
    double step_ms = opt.step_ms;
    if (opt.n_pass) {
        cost_source = "given";
        for (int i = 0; i < opt.nk; i++)
            pass_ms[i] = opt.pass_ms[opt.n_pass == 1 ? 0 : i];
    } else if (opt.measure) {
        cost_source = "measured";
        model *T = open_model(opt.target);
        char hash[16];
        spec_hash(q4nx_file_bytes(T->file), (size_t)q4nx_file_size(T->file), hash);
        const json_t *ck = json_object_get(r->target, "checksum");
        if (!json_is_string(ck) || strcmp(json_string_value(ck), hash))
            ogk_err("warning: %s (%s) is not the recorded target's container; its costs are measured anyway", opt.target,
                    hash);
        const spec_prompt *p0 = &r->p[0];
        if (p0->n_ids + kmax + 2 > T->c.context_length) /* the recording's, not a -c (replay takes none) */
            ogk_die(OGK_EXIT_INPUT, "--measure: the first prompt's %d tokens + a pass of %d rows need %d positions; %s "
                    "holds %d", p0->n_ids, kmax + 1, p0->n_ids + kmax + 2, opt.target, T->c.context_length);
        model_state *ts = new_state(T, p0->n_ids + kmax + 2, kmax + 1);
        for (int i = 0; i < opt.nk; i++) {
            double s;
            if (spec_model_time_passes(ts, p0->ids, p0->n_ids, opt.ks[i] + 1, 5, &s, &pass_ms[i], &e))
                ogk_die(OGK_EXIT_INPUT, "--measure: %s", e.msg);
            step_ms = i ? (step_ms < s ? step_ms : s) : s; /* the fastest of the per-k medians */
        }
        for (int i = 0; i < opt.nk; i++)
            if (pass_ms[i] < step_ms) {
                ogk_err("note: k %d: the measured verify pass (%.3f ms) was below a step (%.3f ms); counted as one "
                        "step",
                        opt.ks[i], pass_ms[i], step_ms);
                pass_ms[i] = step_ms;
            }
        model_state_free(ts);
        model_close(T);
    }

    json_t *res = json_array();
    int warned = 0;
    for (int ki = 0; ki < opt.nk; ki++) {
        int k = opt.ks[ki];
        int R = 0, off = 0, acc = 0, com = 0;
        double dms = 0, pms = 0; /* drafting, and the drafter's prompt prefills (not a round's cost) */
        json_t *per = json_array();
        for (int i = 0; i < r->n; i++) {
            const spec_prompt *p = &r->p[i];
            spec_result sr;
            if (spec_replay(p->ids, p->n_ids, p->cont, p->n_cont, k, &drafter, &sr, &e))
                ogk_die(OGK_EXIT_INPUT, "prompt %d (%s), k %d: %s", i, prompt_name(p, i), k, e.msg);
            json_t *al = json_array();
            for (int j = 0; j < sr.rounds; j++)
                json_array_append_new(al, json_integer(sr.accepts[j]));
            const char *warn = NULL;
            if (sr.offered > 0 && sr.accepted == sr.offered)
                warn = "every draft accepted: is the drafter the target, or the recording the drafter's?";
            else if (sr.offered > 0 && sr.accepted == 0)
                warn = "no draft accepted: another tokenizer or model family, or a broken drafter?";
            else if (sr.offered == 0 && p->n_cont > 0)
                warn = "the drafter offered no token at all (a drafter server that answers nothing?)";
            if (warn) {
                ogk_err("warning: k %d, prompt %d (%s): %s", k, i, shown(prompt_name(p, i)), warn);
                warned++;
            }
            json_t *pp = json_object();
            json_object_set_new(pp, "name", json_string(prompt_name(p, i)));
            json_object_set_new(pp, "kind", p->kind ? json_string(p->kind) : json_null());
            json_object_set_new(pp, "rounds", json_integer(sr.rounds));
            json_object_set_new(pp, "tokens", json_integer(sr.committed));
            json_object_set_new(pp, "tokens_per_round", json_real(sr.rounds ? (double)sr.committed / sr.rounds : 0));
            json_object_set_new(pp, "offered", json_integer(sr.offered));
            json_object_set_new(pp, "accepted", json_integer(sr.accepted));
            json_object_set_new(pp, "acceptance_rate", json_real(sr.offered ? (double)sr.accepted / sr.offered : 0));
            json_object_set_new(pp, "accepts", al);
            json_object_set_new(pp, "drafter_ms_per_drafted_token", json_real(sr.offered ? sr.draft_ms / sr.offered : 0));
            json_object_set_new(pp, "warning", warn ? json_string(warn) : json_null());
            json_array_append_new(per, pp);
            R += sr.rounds, off += sr.offered, acc += sr.accepted, com += sr.committed, dms += sr.draft_ms, pms += sr.prefill_ms;
            spec_result_free(&sr);
        }
        double tpr = R ? (double)com / R : 0;
        json_t *meas = json_object();
        json_object_set_new(meas, "rounds", json_integer(R));
        json_object_set_new(meas, "tokens", json_integer(com));
        json_object_set_new(meas, "tokens_per_round", json_real(tpr));
        json_object_set_new(meas, "offered", json_integer(off));
        json_object_set_new(meas, "accepted", json_integer(acc));
        json_object_set_new(meas, "acceptance_rate", json_real(off ? (double)acc / off : 0));
        json_object_set_new(meas, "drafter_ms", json_real(dms));
        json_object_set_new(meas, "drafter_ms_per_drafted_token", json_real(off ? dms / off : 0));
        json_object_set_new(meas, "drafter_ms_per_round", json_real(R ? dms / R : 0));
        json_object_set_new(meas, "drafter_prefill_ms", json_real(pms));
        json_object_set_new(meas, "per_prompt", per);
        json_t *row = json_pack("{s:i,s:o}", "k", k, "measured", meas);
        if (cost_source) {
            json_t *proj = json_pack("{s:s,s:f,s:f}", "costs", cost_source, "step_ms", step_ms, "pass_ms", pass_ms[ki]);
            const char *why;
            econ_json(proj, tpr, step_ms, pass_ms[ki], R ? dms / R : 0, &why);
            json_object_set_new(row, "projected", proj);
        } else {
            json_object_set_new(row, "projected", json_null());
        }
        json_array_append_new(res, row);
    }

    char *draft_shown = opt.draft_url ? spec_url_shown(opt.draft_url) : NULL;
    if (opt.draft_url && !draft_shown)
        ogk_die(OGK_EXIT_INIT, "out of memory");
    json_t *out = json_object();
    json_object_set_new(out, "recording", json_pack("{s:O,s:i,s:s?}", "target", r->target, "prompts", r->n,
                                                    "tokenizer_hash", r->tokenizer_hash));
    json_object_set_new(out, "drafter", opt.draft ? json_pack("{s:o,s:i}", "container", ogk_json_str(opt.draft), "vocab_size",
                                                            D->c.vocab_size)
                                                : json_pack("{s:o}", "url", ogk_json_str(draft_shown)));
    json_object_set_new(out, "results", res);
    int rc = 0;
    if (opt.json) {
        rc = ogk_json_print(stdout, out) < 0 ? OGK_EXIT_CHECK : 0;
    } else {
        const json_t *tg = r->target;
        const char *tname = json_string_value(json_object_get(tg, json_object_get(tg, "name") ? "name" : "url"));
        printf("recording: target %s, %d prompts; ", shown(tname ? tname : "?"), r->n);
        printf("drafter %s\n", shown(opt.draft ? opt.draft : draft_shown));
        if (cost_source)
            printf("%-73s| projected (step %.3f ms, passes %s)\n", "measured (replay)", step_ms, cost_source);
        else
            printf("measured (replay)\n");
        printf("%3s  %6s  %6s  %9s  %7s  %8s  %7s  %12s ", "k", "rounds", "tokens", "tok/round", "offered", "accepted",
               "rate", "draft ms/tok");
        if (cost_source)
            printf("| verify steps  break-even 1p / 2p  speed-up 1p / 2p");
        printf("\n");
        size_t i;
        json_t *row;
        json_array_foreach(res, i, row)
        {
            const json_t *m = json_object_get(row, "measured"), *pj = json_object_get(row, "projected");
#define NUM(o, k) json_number_value(json_object_get(o, k))
            printf("%3d  %6d  %6d  %9.3f  %7d  %8d  %5.1f %%  %12.4f ", (int)NUM(row, "k"), (int)NUM(m, "rounds"),
                   (int)NUM(m, "tokens"), NUM(m, "tokens_per_round"), (int)NUM(m, "offered"), (int)NUM(m, "accepted"),
                   100 * NUM(m, "acceptance_rate"), NUM(m, "drafter_ms_per_drafted_token"));
            if (json_is_object(pj) && json_object_get(pj, "refused"))
                printf("| refused: %s", json_string_value(json_object_get(pj, "refused")));
            else if (json_is_object(pj)) {
                const json_t *be = json_object_get(pj, "break_even_tokens_per_round"),
                             *sp = json_object_get(pj, "speedup");
                printf("| %12.3f  %7.3f / %7.3f  %.3fx%s / %.3fx%s", NUM(pj, "verify_pass_steps"), NUM(be, "one_pass"),
                       NUM(be, "two_pass"), NUM(sp, "one_pass"), speed_word(NUM(sp, "one_pass")), NUM(sp, "two_pass"),
                       speed_word(NUM(sp, "two_pass")));
            }
            printf("\n");
            size_t j;
            json_t *pp;
            json_array_foreach(json_object_get(m, "per_prompt"), j, pp)
            printf("%3s  %6d  %6d  %9.3f  %7d  %8d  %5.1f %%  %12.4f   %s\n", "", (int)NUM(pp, "rounds"),
                   (int)NUM(pp, "tokens"), NUM(pp, "tokens_per_round"), (int)NUM(pp, "offered"), (int)NUM(pp, "accepted"),
                   100 * NUM(pp, "acceptance_rate"), NUM(pp, "drafter_ms_per_drafted_token"),
                   shown(json_string_value(json_object_get(pp, "name"))));
#undef NUM
        }
        if (fflush(stdout))
            rc = OGK_EXIT_INPUT;
    }
    (void)warned;
    json_decref(out);
    spec_model_drafter_free(&md);
    if (ds)
        model_state_free(ds);
    if (D)
        model_close(D);
    spec_http_free(h);
    spec_rec_free(r);
    free(draft_shown);
    return rc;
}
