/* Fuzz target: the config readers of a pack. Input byte 0 picks the file (0 genai_config.json,
 * 1 config.json, 2 tokenizer_config.json; the byte modulo 3), the rest is that file's content. At start-up a
 * pack directory is made in $TMPDIR linking every file of $OGAKIT_FUZZ_PACK (a fixture: tools/fixture.sh
 * qwen2 cpu tied tiny) but tokenizer.json, which is a small valid stub (the real 11 MB one makes an
 * exec take a second), so a config the readers accept goes on through the graph cross-checks and the
 * runtime's own check (lib/mdesc, tokenizer loading). Each input replaces
 * the chosen file; pack_open, refusals, the model description and the oga-info report. */
#include "fuzz.h"

#include "pack/pack.h"

static char dir[PATH_MAX], src_dir[PATH_MAX];
static const char *const files[] = {"genai_config.json", "config.json", "tokenizer_config.json"};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fuzz_pack_dir("pack_config", NULL, "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[\"a b\"]}}\n", dir,
                  src_dir);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!size)
        return 0;
    const char *name = files[data[0] % 3];
    char path[PATH_MAX * 2], orig[PATH_MAX * 2];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(orig, sizeof orig, "%s/%s", src_dir, name);
    unlink(path);
    FILE *f = fopen(path, "wb");
    if (!f || (size > 1 && fwrite(data + 1, 1, size - 1, f) != size - 1) || fclose(f))
        abort();
    ogk_error e;
    e.msg[0] = 0;
    pack *p = pack_open(dir, &e);
    FUZZ_CHECK(p || e.msg[0]);
    if (p) {
        FUZZ_CHECK(json_is_object(pack_model(p)));
        for (size_t i = 0; i < pack_refusal_count(p); i++) {
            const pack_refusal *r = pack_refusal_at(p, i);
            FUZZ_CHECK(r && r->what && r->code && r->reason && r->reason[0]);
        }
        json_t *info = pack_info_json(p, 0);
        FUZZ_CHECK(info);
        /* importable means every required key was there and well typed */
        if (!pack_refusal_count(p))
            FUZZ_CHECK(json_is_integer(json_object_get(pack_model(p), "vocab_size")) &&
                       json_is_string(json_object_get(pack_model(p), "family")));
        json_decref(info);
        pack_close(p);
    }
    /* put the fixture's file back so the next input starts from a good pack */
    unlink(path);
    if (symlink(orig, path))
        abort();
    return 0;
}
