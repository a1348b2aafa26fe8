/* lib/gguf's byte format against hand-computed facts of the GGUF v3 spec and the ggml block layouts:
 * the writer's header, key/value and tensor-info bytes; the reader's decoding of hand-made Q4_0, Q4_1,
 * Q8_0 and F16 rows; the controls changing what they must; malformed files refused by name. */
#define _GNU_SOURCE
#include "tap.h"
#include "gguf/gguf.h"
#include "util/util.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int fill_bytes(void *ctx, uint8_t *dst, uint64_t n, ogk_error *e)
{
    (void)e;
    memcpy(dst, ctx, n);
    return 0;
}

static char tmpdir[] = "/tmp/gguf_unit.XXXXXX";

static char *path(const char *name)
{
    static char p[256];
    snprintf(p, sizeof p, "%s/%s", tmpdir, name);
    return p;
}

static int write_file(const char *name, const void *b, size_t n)
{
    int fd = open(path(name), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int r = fd >= 0 && write(fd, b, n) == (ssize_t)n ? 0 : -1;
    if (fd >= 0)
        close(fd);
    return r;
}

int main(void)
{
    ogk_error e;
    if (!mkdtemp(tmpdir))
        return 1;

    /* ---- hand-made blocks: Q4_0 d = 0.5 (fp16 0x3800); byte 0 = 0x1F: element 0 is code 15 -> 3.5,
     * element 16 is code 1 -> -3.5; all other bytes 0x88 -> 0 */
    uint8_t q40[18] = {0x00, 0x38};
    memset(q40 + 2, 0x88, 16);
    q40[2] = 0x1F;
    /* Q4_1 d = 2 (0x4000), m = -1 (0xBC00); byte 15 = 0xA3: element 15 -> 3*2-1 = 5, element 31 -> 10*2-1 = 19 */
    uint8_t q41[20] = {0x00, 0x40, 0x00, 0xBC};
    q41[4 + 15] = 0xA3;
    /* Q8_0 d = 0.25 (0x3400); qs[i] = i - 16 */
    uint8_t q80[34] = {0x00, 0x34};
    for (int i = 0; i < 32; i++)
        q80[2 + i] = (uint8_t)(int8_t)(i - 16);
    uint16_t f16[4] = {0x3C00, 0xC000, 0x3555, 0x0001}; /* 1, -2, 0.333251953125, 2^-24 */

    gguf_writer *w = gguf_writer_new();
    uint64_t ne32[1] = {32}, ne4[1] = {4};
    int r = gguf_kv_str(w, "general.architecture", "qwen2", 5, &e) || gguf_kv_u32(w, "qwen2.block_count", 2, &e) ||
            gguf_kv_f32(w, "qwen2.rope.freq_base", 1e6f, &e) || gguf_kv_bool(w, "tokenizer.ggml.add_bos_token", 1, &e) ||
            gguf_kv_arr_str_begin(w, "tokenizer.ggml.tokens", 2, &e) || gguf_kv_arr_str_push(w, "a", 1, &e) ||
            gguf_kv_arr_str_push(w, "bc", 2, &e) ||
            gguf_writer_tensor(w, "q40", GGML_Q4_0, 1, ne32, fill_bytes, q40, &e) ||
            gguf_writer_tensor(w, "q41", GGML_Q4_1, 1, ne32, fill_bytes, q41, &e) ||
            gguf_writer_tensor(w, "q80", GGML_Q8_0, 1, ne32, fill_bytes, q80, &e) ||
            gguf_writer_tensor(w, "f16", GGML_F16, 1, ne4, fill_bytes, f16, &e);
    TAP_OK(!r, "writer accepts key/values and four tensors");
    TAP_OK(gguf_kv_u32(w, "qwen2.block_count", 3, &e) == -1 && strstr(e.msg, "added twice"), "duplicate key refused");
    TAP_OK(gguf_writer_tensor(w, "odd", GGML_Q4_0, 1, (uint64_t[]){33}, fill_bytes, q40, &e) == -1,
           "a Q4_0 row of 33 elements refused");
    int fd = open(path("a.gguf"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    TAP_OK(fd >= 0 && !gguf_writer_write(w, fd, NULL, &e), "written");
    close(fd);
    gguf_writer_free(w);

    size_t len;
    char *b = ogk_read_file(path("a.gguf"), &len, &e);
    /* header: magic, version 3, 4 tensors, 5 key/values */
    uint32_t ver;
    uint64_t nt, nkv;
    memcpy(&ver, b + 4, 4), memcpy(&nt, b + 8, 8), memcpy(&nkv, b + 16, 8);
    TAP_OK(!memcmp(b, "GGUF", 4) && ver == 3 && nt == 4 && nkv == 5, "header: GGUF v3, 4 tensors, 5 key/values");
    /* first key/value: u64 20, "general.architecture", u32 8 (string), u64 5, "qwen2" */
    uint64_t klen, slen;
    uint32_t vt;
    memcpy(&klen, b + 24, 8), memcpy(&vt, b + 52, 4), memcpy(&slen, b + 56, 8);
    TAP_OK(klen == 20 && !memcmp(b + 32, "general.architecture", 20) && vt == GGUF_STR && slen == 5 &&
               !memcmp(b + 64, "qwen2", 5),
           "first key/value bytes as the spec lays them out");
    /* data section aligned to 32 and the tensors in order at offsets 0, 32, 64, 128 (each padded to 32) */
    size_t data = len - (32 + 32 + 64 + 32);
    TAP_OK(data % 32 == 0 && !memcmp(b + data, q40, 18) && !memcmp(b + data + 32, q41, 20) &&
               !memcmp(b + data + 64, q80, 34) && !memcmp(b + data + 128, f16, 8),
           "tensor data at aligned offsets, bytes as given");
    free(b);

    gguf_file *g = gguf_open(path("a.gguf"), &e);
    TAP_OK(g != NULL, "reader opens it%s%s", g ? "" : ": ", g ? "" : e.msg);
    if (!g)
        return TAP_DONE();
    const json_t *m = gguf_meta(g);
    TAP_OK(!strcmp(json_string_value(json_object_get(m, "general.architecture")), "qwen2") &&
               json_integer_value(json_object_get(m, "qwen2.block_count")) == 2 &&
               json_real_value(json_object_get(m, "qwen2.rope.freq_base")) == 1e6 &&
               json_is_true(json_object_get(m, "tokenizer.ggml.add_bos_token")),
           "metadata read back");
    const char *s;
    size_t sl;
    TAP_OK(!gguf_meta_str_at(g, "tokenizer.ggml.tokens", 1, &s, &sl) && sl == 2 && !memcmp(s, "bc", 2),
           "string array element");
    float out[32];
    const gguf_tensor *t = gguf_find(g, "q40");
    gguf_dequant_row(t, 0, out, 0);
    int zeros = 1;
    for (int i = 1; i < 32; i++)
        zeros &= i == 16 || out[i] == 0.0f;
    TAP_OK(out[0] == 3.5f && out[16] == -3.5f && zeros, "Q4_0: element 0 low nibble, element 16 high nibble, (q-8)*d");
    gguf_dequant_row(t, 0, out, GGUF_CTRL_NIBBLES);
    TAP_OK(out[0] == 3.5f && out[1] == -3.5f && out[16] == 0.0f, "Q4_0 control: MatMulNBits order puts them at 0, 1");
    gguf_dequant_row(t, 0, out, GGUF_CTRL_M_SIGN);
    TAP_OK(out[0] == 11.5f, "Q4_0 control: +8 for -8");
    t = gguf_find(g, "q41");
    gguf_dequant_row(t, 0, out, 0);
    TAP_OK(out[15] == 5.0f && out[31] == 19.0f && out[0] == -1.0f, "Q4_1: v*d + m");
    gguf_dequant_row(t, 0, out, GGUF_CTRL_M_SIGN);
    TAP_OK(out[15] == 7.0f && out[0] == 1.0f, "Q4_1 control: the minimum's sign flipped");
    t = gguf_find(g, "q80");
    gguf_dequant_row(t, 0, out, 0);
    TAP_OK(out[0] == -4.0f && out[31] == 3.75f && out[16] == 0.0f, "Q8_0: int8 * d");
    gguf_dequant_row(t, 0, out, GGUF_CTRL_REVERSE);
    TAP_OK(out[0] == 3.75f, "Q8_0 control: block reversed");
    t = gguf_find(g, "f16");
    gguf_dequant_row(t, 0, out, 0);
    TAP_OK(out[0] == 1.0f && out[1] == -2.0f && out[2] == 0.333251953125f && out[3] == 0x1p-24f, "F16 incl. subnormal");
    gguf_close(g);

    /* malformed files: named, never read past the end */
    TAP_OK(!write_file("m.gguf", "GGUX\3\0\0\0", 8) && !gguf_open(path("m.gguf"), &e) && strstr(e.msg, "magic"),
           "wrong magic refused");
    TAP_OK(!write_file("v.gguf", "GGUF\2\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 24) && !gguf_open(path("v.gguf"), &e) &&
               strstr(e.msg, "version 2"),
           "version 2 refused");
    char *full = ogk_read_file(path("a.gguf"), &len, &e);
    int refused_all = 1;
    for (size_t cut = 8; cut < len; cut += 7) {
        write_file("t.gguf", full, cut);
        gguf_file *h = gguf_open(path("t.gguf"), &e);
        if (h && cut < len - 32) /* the last tensor's padding is not data */
            refused_all = 0;
        gguf_close(h);
    }
    TAP_OK(refused_all, "every truncation refused");
    /* a huge string length */
    memset(full + 24, 0xFF, 8);
    write_file("h.gguf", full, len);
    TAP_OK(!gguf_open(path("h.gguf"), &e) && strstr(e.msg, "truncated"), "a key length past the end refused");
    free(full);
    unlink(path("a.gguf")), unlink(path("m.gguf")), unlink(path("v.gguf")), unlink(path("t.gguf")),
        unlink(path("h.gguf"));
    rmdir(tmpdir);
    return TAP_DONE();
}
