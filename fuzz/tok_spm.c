/* Fuzz target: the input is a SentencePiece tokenizer.model. tok_spm_json converts it (or refuses it by
 * name); the JSON it writes must load with tok_load (the converter's output is never refused), encode a
 * fixed text and decode the ids back. The ChatGLM form is taken every other byte of the input's length. */
#include "fuzz.h"
#include "tok/tok.h"

static const char TEXT[] = "  Hello,  world!\tIt's 2024 \xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x98\x80 <s>[gMASK]sop<|user|>\n x  ";
static const char GLM[] = "{\"tokenizer_class\": \"ChatGLMTokenizer\"}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ogk_error e;
    e.msg[0] = 0;
    size_t jn = 0;
    int glm = size & 1;
    char *js = tok_spm_json(data, size, glm ? GLM : NULL, glm ? sizeof GLM - 1 : 0, &jn, &e);
    if (!js) {
        FUZZ_CHECK(e.msg[0]);
        return 0;
    }
    tok *t = tok_load(js, jn, NULL, 0, &e);
    if (!t)
        fprintf(stderr, "converted tokenizer.json refused: %s\n", e.msg);
    FUZZ_CHECK(t);
    int32_t *ids = NULL;
    size_t n = 0;
    if (!tok_encode(t, TEXT, sizeof TEXT - 1, 1, &ids, &n, &e)) {
        for (size_t i = 0; i < n; i++)
            FUZZ_CHECK(ids[i] >= 0 && ids[i] < tok_vocab_size(t));
        size_t len = 0;
        char *s = tok_decode(t, ids, n, 0, 0, &len, &e);
        free(s);
    }
    free(ids);
    tok_free(t);
    free(js);
    return 0;
}
