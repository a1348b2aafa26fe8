/* spec-replay --selftest: the replay rule, the economics and the refusals against cases worked out by
 * hand (the expected numbers below come from the rule in spec.h, counted on paper, not from this code). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "spec.h"

/* a scripted drafter: knows the continuation; each round its first `match` drafts are right, the rest
 * wrong; fail_at > 0 makes the fail_at-th call fail */
typedef struct {
    const int *seq; /* prompt + continuation */
    int match, calls, fail_at;
} script;

static int script_draft(void *self, const int *prefix, int n, int k, int *out, ogk_error *e)
{
    script *s = self;
    (void)prefix;
    if (++s->calls == s->fail_at)
        return ogk_fail(e, "scripted failure");
    for (int i = 0; i < k; i++)
        out[i] = i < s->match ? s->seq[n + i] : s->seq[n + i] + 1000;
    return k;
}

static int run(const int *cont, int nc, int k, int match, spec_result *r)
{
    int seq[64] = {1, 2, 3};
    memcpy(seq + 3, cont, sizeof(int) * (size_t)nc);
    script s = {seq, match, 0, 0};
    spec_drafter d = {script_draft, NULL, &s, NULL};
    ogk_error e;
    return spec_replay(seq, 3, cont, nc, k, &d, r, &e);
}

static int accepts_are(const spec_result *r, const int *want, int n)
{
    if (r->rounds != n)
        return 0;
    for (int i = 0; i < n; i++)
        if (r->accepts[i] != want[i])
            return 0;
    return 1;
}

static int near(double a, double b) { return fabs(a - b) < 1e-9; }

static int parse_fails(const char *doc, const char *needle)
{
    ogk_error e = {{0}};
    spec_rec *r = spec_rec_parse(doc, strlen(doc), "t.json", &e);
    int ok = !r && strstr(e.msg, needle) != NULL;
    spec_rec_free(r);
    return ok;
}

#define ARM(cond, name) (report((cond) != 0, name, ctx), fails += !(cond))

int spec_selftest(void (*report)(int ok, const char *name, void *ctx), void *ctx)
{
    int fails = 0;
    static const int c7[7] = {10, 11, 12, 13, 14, 15, 16};
    spec_result r;

    /* perfect drafter, k = 4, 7 tokens: round 1 accepts 4 and commits 5, round 2 has 2 left, offers 2,
     * accepts both and ends on that hit without an extra token */
    int rc = run(c7, 7, 4, 99, &r);
    ARM(!rc && accepts_are(&r, (int[]){4, 2}, 2) && r.offered == 6 && r.accepted == 6 && r.committed == 7,
        "perfect drafter, k 4, 7 tokens: 2 rounds accepting [4,2], 6 offered, 7 committed");
    spec_result_free(&r);

    /* always wrong, k = 4, 7 tokens: one target token per round; offered min(4, left): 4+4+4+4+3+2+1 */
    rc = run(c7, 7, 4, 0, &r);
    ARM(!rc && accepts_are(&r, (int[]){0, 0, 0, 0, 0, 0, 0}, 7) && r.offered == 22 && r.accepted == 0 &&
            r.committed == 7,
        "always-wrong drafter, k 4, 7 tokens: 7 rounds of 1 token, 22 offered, none accepted");
    spec_result_free(&r);

    /* ends on a hit: perfect, k = 3, 5 tokens: [3] commits 4, then 1 left: [1] commits 1 */
    rc = run(c7, 5, 3, 99, &r);
    ARM(!rc && accepts_are(&r, (int[]){3, 1}, 2) && r.offered == 4 && r.committed == 5,
        "recording ending on a hit: k 3, 5 tokens: [3,1], 4 offered, the last round without the extra token");
    spec_result_free(&r);

    /* ends on a miss: 2 of each round right, k = 3, 6 tokens: [2] commits 3, [2] commits 3 (the
     * target's token is the recording's last) */
    rc = run(c7, 6, 3, 2, &r);
    ARM(!rc && accepts_are(&r, (int[]){2, 2}, 2) && r.offered == 6 && r.accepted == 4 && r.committed == 6,
        "recording ending on a miss: k 3, 6 tokens, 2 right per round: [2,2], 6 offered, 6 committed");
    spec_result_free(&r);

    /* k = 1 perfect over 4: [1] commits 2, [1] commits 2 */
    rc = run(c7, 4, 1, 99, &r);
    ARM(!rc && accepts_are(&r, (int[]){1, 1}, 2) && r.offered == 2 && r.committed == 4,
        "perfect drafter, k 1, 4 tokens: [1,1]");
    spec_result_free(&r);

    /* nothing recorded: no rounds */
    rc = run(c7, 0, 4, 99, &r);
    ARM(!rc && r.rounds == 0 && r.offered == 0, "an empty continuation: no rounds");
    spec_result_free(&r);

    /* a drafter that fails, and k out of range */
    {
        int seq[10] = {1, 2, 3, 10, 11, 12, 13, 14, 15, 16};
        script s = {seq, 99, 0, 2};
        spec_drafter d = {script_draft, NULL, &s, NULL};
        ogk_error e = {{0}};
        int a = spec_replay(seq, 3, c7, 7, 2, &d, &r, &e);
        ARM(a == -1 && strstr(e.msg, "scripted failure") && r.accepts == NULL, "a drafter's failure is the replay's");
        int b = spec_replay(seq, 3, c7, 7, SPEC_K_MAX + 1, &d, &r, &e);
        ARM(b == -1 && strstr(e.msg, "k = 17"), "k beyond 16 is refused");
    }

    /* economics: step 10 ms, pass 15 ms, drafter 5 ms per round: v 1.5, d 0.5; bars 2 and 3 tokens
     * per round; 3 tokens per round project 1.5x one-pass, 1.0x two-pass */
    spec_econ ec;
    ogk_error e = {{0}};
    rc = spec_economics(3, 10, 15, 5, &ec, &e);
    ARM(!rc && near(ec.verify_steps, 1.5) && near(ec.draft_steps, 0.5) && near(ec.break_even_one, 2) &&
            near(ec.break_even_two, 3) && near(ec.speedup_one, 1.5) && near(ec.speedup_two, 1),
        "economics: v 1.5, d 0.5 -> bars 2 and 3 tokens per round, 3 tokens per round -> 1.5x and 1.0x");
    /* accepting nothing (1 token per round) is a slow-down even with a pass as cheap as a step and
     * an almost free drafter */
    rc = spec_economics(1, 10, 10, 1e-6, &ec, &e);
    ARM(!rc && ec.speedup_one < 1 && ec.speedup_two < 0.51, "a drafter accepting nothing is a slow-down, not 1.0x");
    ARM(spec_economics(2, 10, 9, 1, &ec, &e) && strstr(e.msg, "cheaper than a decode step"),
        "economics refuse a verify pass cheaper than a step");
    ARM(spec_economics(2, 0, 9, 1, &ec, &e) && strstr(e.msg, "decode step of 0"), "economics refuse a zero step");
    ARM(spec_economics(2, 10, 12, 0, &ec, &e) && strstr(e.msg, "no drafter is free"),
        "economics refuse a free drafter");
    ARM(spec_economics(0.5, 10, 12, 1, &ec, &e) && strstr(e.msg, "at least one token"),
        "economics refuse fewer than 1 token per round");

    /* the recording: a round trip, then each refusal */
    json_t *d = spec_rec_new(json_pack("{s:s,s:s}", "container", "t.q4nx", "checksum", "crc32c:00000000"),
                             json_pack("{s:s,s:i}", "hash", "crc32c:12345678", "bytes", 10), 100,
                             json_pack("{s:i}", "tokens", 3));
    int ids[2] = {5, 6}, cont[3] = {7, 8, 9};
    float gaps[3] = {1.5f, 0.25f, 0.0f};
    spec_prompt p = {.name = "a", .kind = "prose", .text = "hi", .ids = ids, .n_ids = 2, .cont = cont, .n_cont = 3,
                     .cont_text = "xyz", .gaps = gaps, .stop = "length", .decode_ms = 3, .request_ms = -1};
    spec_rec_add(d, &p, &e);
    char *s = json_dumps(d, JSON_COMPACT);
    spec_rec *rr = spec_rec_parse(s, strlen(s), "t.json", &e);
    ARM(rr && rr->n == 1 && rr->vocab_size == 100 && rr->p[0].n_cont == 3 && rr->p[0].cont[2] == 9 &&
            rr->p[0].gaps && rr->p[0].gaps[1] == 0.25f && !strcmp(rr->p[0].stop, "length") &&
            !strcmp(rr->tokenizer_hash, "crc32c:12345678") && rr->p[0].decode_ms == 3,
        "a recording reads back what was written");
    /* the drafter's checks */
    ARM(rr && spec_check_vocab(rr, 101, &e) && strstr(e.msg, "vocabulary mismatch"),
        "refused: a drafter with another vocabulary size");
    ARM(rr && !spec_check_vocab(rr, 100, &e) && !spec_check_vocab(rr, 0, &e), "accepted: the same vocabulary");
    ARM(rr && !spec_check_prefix(&rr->p[0], 0, (int[]){5, 6, 7}, 3, &e) &&
            !spec_check_prefix(&rr->p[0], 0, (int[]){5}, 1, &e),
        "accepted: a prompt tokenizing to a prefix of prompt + continuation");
    ARM(rr && spec_check_prefix(&rr->p[0], 0, (int[]){5, 7}, 2, &e) && strstr(e.msg, "does not tokenize"),
        "refused: a prompt tokenizing to something else");
    ARM(rr && spec_check_prefix(&rr->p[0], 0, (int[]){5, 6, 7, 8, 9, 1}, 6, &e),
        "refused: a prompt tokenizing to more than prompt + continuation");
    spec_rec_free(rr);
    size_t n = strlen(s);
    ARM(parse_fails("{\"format\": \"ogakit-spec-rec", "not a complete JSON document"), "refused: malformed JSON");
    s[n / 2] = 0;
    ARM(parse_fails(s, "not a complete JSON document"), "refused: a truncated recording");
    free(s);
    json_object_set_new(d, "version", json_integer(SPEC_REC_VERSION + 1));
    s = json_dumps(d, JSON_COMPACT);
    ARM(parse_fails(s, "newer than this reader"), "refused: a newer format version");
    free(s);
    json_object_set_new(d, "version", json_integer(SPEC_REC_VERSION));
    json_t *p0 = json_array_get(json_object_get(d, "prompts"), 0);
    json_array_set_new(json_object_get(p0, "continuation_ids"), 1, json_integer(100));
    s = json_dumps(d, JSON_COMPACT);
    ARM(parse_fails(s, "outside the recorded vocabulary"), "refused: an id outside the recorded vocabulary");
    free(s);
    json_array_set_new(json_object_get(p0, "continuation_ids"), 1, json_integer(8));
    json_array_remove(json_object_get(p0, "gaps"), 0);
    s = json_dumps(d, JSON_COMPACT);
    ARM(parse_fails(s, "gaps"), "refused: gaps not one per continuation token");
    free(s);
    json_object_set_new(p0, "gaps", json_null());
    json_object_set_new(p0, "stop", json_string("tired"));
    s = json_dumps(d, JSON_COMPACT);
    ARM(parse_fails(s, "stop"), "refused: an unknown stop reason");
    free(s);
    json_object_set_new(p0, "stop", json_string("eos"));
    json_object_set_new(p0, "prompt_ids", json_array());
    s = json_dumps(d, JSON_COMPACT);
    ARM(parse_fails(s, "prompt_ids"), "refused: an empty prompt");
    free(s);
    json_object_set_new(d, "format", json_string("something-else"));
    s = json_dumps(d, JSON_COMPACT);
    ARM(parse_fails(s, "not a recording"), "refused: another format");
    free(s);
    json_object_set_new(d, "format", json_string(SPEC_REC_FORMAT));
    json_object_set_new(d, "prompts", json_array());
    s = json_dumps(d, JSON_COMPACT);
    ARM(parse_fails(s, "\"prompts\" is missing or empty"), "refused: no prompts");
    free(s);
    json_decref(d);
    return fails;
}
