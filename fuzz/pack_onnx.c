/* Fuzz target: the input is model.onnx of a pack. At start-up a pack directory is made in $TMPDIR from
 * the pack named by $OGAKIT_FUZZ_PACK (a fixture: tools/fixture.sh qwen2 cpu tied tiny): its
 * genai_config.json, config.json, tokenizer_config.json and external data are linked in, tokenizer.json
 * is a small stub (the pack reader only carries it as an asset). Each input becomes that directory's
 * model.onnx; pack_open, every accessor over tensors, refusals and assets, and the oga-info report. */
#include "fuzz.h"

#include "pack/pack.h"

static char dir[PATH_MAX], onnx_path[PATH_MAX + 16];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    char src_dir[PATH_MAX];
    fuzz_pack_dir("pack_onnx", "model.onnx", "{\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[]}}\n", dir, src_dir);
    snprintf(onnx_path, sizeof onnx_path, "%s/model.onnx", dir);
    return 0;
}

static void check_tensor(const pack_tensor *t)
{
    FUZZ_CHECK(t->name && t->role);
    FUZZ_CHECK(t->ndim >= 1 && t->ndim <= 4);
    if (ogk_dtype_quantised(t->dtype)) {
        int q8 = t->dtype == OGK_Q8;
        FUZZ_CHECK(t->n && t->k && t->block && t->k_blocks == (t->k + t->block - 1) / t->block);
        FUZZ_CHECK(t->codes_size == (uint64_t)t->n * t->k_blocks * t->block / (q8 ? 1 : 2));
        FUZZ_CHECK(t->scales_size == (uint64_t)t->n * t->k_blocks * ogk_dtype_size(t->scale_dtype));
        FUZZ_CHECK(!t->has_zp || t->zeros_size == (uint64_t)t->n * (q8 ? t->k_blocks : (t->k_blocks + 1) / 2));
        fuzz_touch(t->codes, t->codes_size);
        fuzz_touch(t->scales, t->scales_size);
        if (t->has_zp)
            fuzz_touch(t->zeros, t->zeros_size);
    } else {
        unsigned __int128 count = ogk_dtype_size(t->dtype);
        for (int d = 0; d < t->ndim; d++)
            count *= t->shape[d];
        FUZZ_CHECK(count == t->nbytes);
        fuzz_touch(t->data, t->nbytes);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    FILE *f = fopen(onnx_path, "wb");
    if (!f)
        abort();
    if (size && fwrite(data, 1, size, f) != size)
        abort();
    if (fclose(f))
        abort();
    ogk_error e;
    e.msg[0] = 0;
    pack *p = pack_open(dir, &e);
    if (!p) {
        FUZZ_CHECK(e.msg[0]);
        return 0;
    }
    (void)pack_flavour_name(pack_flavour(p));
    FUZZ_CHECK(pack_model(p) && pack_dir(p));
    size_t n = pack_tensor_count(p);
    /* tensors are only promised consistent when the pack has no refusals; still walk them all */
    int clean = pack_refusal_count(p) == 0;
    for (size_t i = 0; i < n; i++) {
        const pack_tensor *t = pack_tensor_at(p, i);
        FUZZ_CHECK(t);
        if (clean)
            check_tensor(t);
        if (t->role)
            FUZZ_CHECK(pack_find(p, t->role) != NULL);
        if (t->name)
            FUZZ_CHECK(pack_find_name(p, t->name) != NULL);
    }
    for (size_t i = 0; i < pack_refusal_count(p); i++) {
        const pack_refusal *r = pack_refusal_at(p, i);
        FUZZ_CHECK(r && r->what && r->code && r->reason);
    }
    for (size_t i = 0; i < pack_asset_count(p); i++) {
        const pack_asset *a = pack_asset_at(p, i);
        FUZZ_CHECK(a && a->name);
        fuzz_touch(a->data, a->size);
    }
    json_t *info = pack_info_json(p, 1);
    FUZZ_CHECK(info);
    char *s = json_dumps(info, JSON_COMPACT);
    free(s);
    json_decref(info);
    pack_close(p);
    return 0;
}
