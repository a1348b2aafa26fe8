/* lib/q4nx container: writer -> reader round trip, alignment, and hostile files (truncation, bad magic,
 * future versions, every byte of the tables flipped) refused by name without a crash. Expected values come
 * from the MatMulNBits source bytes decoded here with the ContribOperators formula, not from lib/q4nx. */
#include "tap.h"
#include "q4nx/format.h" /* the q8 entry's fields, to damage them consistently */
#include "q4nx/q4nx.h"
#include "util/util.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint32_t rng = 12345;
static uint32_t rnd(void) { return (rng = rng * 1664525u + 1013904223u) >> 8; }

typedef struct {
    uint32_t n, k, block, kb;
    int sdt;
    uint8_t *codes, *zp;
    uint16_t *scales16;
    float *scales32;
} src_q4;

static void make_src(src_q4 *s, uint32_t n, uint32_t k, uint32_t block, int sdt, int with_zp)
{
    memset(s, 0, sizeof *s);
    s->n = n, s->k = k, s->block = block, s->kb = (k + block - 1) / block, s->sdt = sdt;
    size_t cb = (size_t)n * s->kb * block / 2;
    s->codes = malloc(cb);
    for (size_t i = 0; i < cb; i++)
        s->codes[i] = (uint8_t)rnd();
    if (sdt == OGK_F32) {
        s->scales32 = malloc((size_t)n * s->kb * 4);
        for (size_t i = 0; i < (size_t)n * s->kb; i++)
            s->scales32[i] = ((float)(rnd() % 2000) - 1000.0f) / 4096.0f;
    } else {
        s->scales16 = malloc((size_t)n * s->kb * 2);
        for (size_t i = 0; i < (size_t)n * s->kb; i++)
            s->scales16[i] = (uint16_t)(0x2000 + rnd() % 0x1000);
    }
    if (with_zp) {
        s->zp = malloc((size_t)n * ((s->kb + 1) / 2));
        for (size_t i = 0; i < (size_t)n * ((s->kb + 1) / 2); i++)
            s->zp[i] = (uint8_t)rnd();
    }
}

/* W[n,k] by the MatMulNBits definition */
static float src_value(const src_q4 *s, uint32_t r, uint32_t c)
{
    size_t qrow = (size_t)s->kb * s->block / 2;
    int q = (s->codes[r * qrow + c / 2] >> (4 * (c % 2))) & 15;
    uint32_t g = c / s->block;
    int zp = s->zp ? (s->zp[r * ((s->kb + 1) / 2) + g / 2] >> (4 * (g % 2))) & 15 : 8;
    float sc = s->sdt == OGK_F32 ? s->scales32[r * s->kb + g]
               : s->sdt == OGK_F16 ? ogk_f16_to_f32(s->scales16[r * s->kb + g])
                                    : ogk_bf16_to_f32(s->scales16[r * s->kb + g]);
    return (float)(q - zp) * sc;
}

static int same_values(const ogk_qtensor *t, const src_q4 *s)
{
    if (!t || t->n != s->n || t->k != s->k)
        return 0;
    float *row = malloc(sizeof(float) * s->k);
    int ok = 1;
    for (uint32_t r = 0; r < s->n && ok; r++) {
        ogk_q4_dequant_row(t, r, row);
        for (uint32_t c = 0; c < s->k; c++) {
            float w = src_value(s, r, c);
            if (memcmp(&w, &row[c], 4))
                ok = 0;
        }
    }
    free(row);
    return ok;
}

static char path[256];
static const uint8_t tok[] = "{\"model\":{\"type\":\"BPE\"}}";
static float norm[300];
static uint8_t *file_bytes;
static size_t file_len;

static void write_file(const char *p, const uint8_t *b, size_t n)
{
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || ogk_write_all(fd, b, n))
        abort();
    close(fd);
}

static int try_open(const uint8_t *b, size_t n, char *msg, size_t msz)
{
    char p[300];
    snprintf(p, sizeof p, "%s.mut", path);
    write_file(p, b, n);
    ogk_error e = {{0}};
    int code = -1;
    q4nx_file *f = q4nx_open(p, &e, &code);
    if (msg)
        snprintf(msg, msz, "%s", e.msg);
    if (f) {
        /* whatever opened must be safe to walk completely */
        for (size_t i = 0; i < q4nx_tensor_count(f); i++) {
            const ogk_qtensor *t = q4nx_tensor_at(f, i);
            if (t->dtype == OGK_Q4)
                (void)ogk_q4_scale(t, t->n - 1, t->k_blocks - 1), (void)ogk_q4_code(t, t->n - 1, t->k - 1);
            if (t->dtype == OGK_Q8) {
                float row[600];
                if (t->k <= 600)
                    ogk_q8_dequant_row(t, t->n - 1, row);
            }
        }
        q4nx_close(f);
        unlink(p);
        return 0;
    }
    unlink(p);
    return code;
}

int main(void)
{
    snprintf(path, sizeof path, "/tmp/q4nx_container_%d.q4nx", (int)getpid());
    src_q4 a, b, big;
    make_src(&a, 40, 300, 32, OGK_F32, 0);    /* symmetric, padded last block */
    make_src(&b, 17, 512, 128, OGK_F16, 1);   /* asymmetric f16 */
    make_src(&big, 256, 1024, 64, OGK_BF16, 1); /* > 64 KiB: 4096-aligned */
    for (int i = 0; i < 300; i++)
        norm[i] = (float)i * 0.25f;
    int layouts[] = {OGK_B8, OGK_RM};
    for (int li = 0; li < 2; li++) {
        int L = layouts[li];
        const char *ln = ogk_layout_name(L);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        ogk_error e = {{0}};
        q4nx_writer *w = q4nx_writer_new(fd, L, &e);
        uint64_t nshape[1] = {300};
        int rc = !w || q4nx_writer_asset(w, "tokenizer.json", tok, sizeof tok - 1, &e) ||
                 q4nx_writer_q4(w, "a_Q4", "layers.0.attn.qkv", a.n, a.k, a.block, a.sdt, a.codes, a.scales32, NULL, &e) ||
                 q4nx_writer_plain(w, "norm", "final_norm", OGK_F32, 1, nshape, norm, sizeof norm, &e) ||
                 q4nx_writer_q4(w, "b.qweight", "layers.0.attn.o", b.n, b.k, b.block, b.sdt, b.codes, b.scales16, b.zp, &e) ||
                 q4nx_writer_q4(w, "big.qweight", "lm_head", big.n, big.k, big.block, big.sdt, big.codes, big.scales16,
                                big.zp, &e);
        TAP_OK(!rc, "%s: writer takes an asset, two q4 tensors and a plain one (%s)", ln, e.msg);
        TAP_OK(q4nx_writer_q4(w, "dup", "final_norm", a.n, a.k, a.block, a.sdt, a.codes, a.scales32, NULL, &e) != 0 &&
                   strstr(e.msg, "duplicate role"),
               "%s: writer refuses a duplicate role (%s)", ln, e.msg);
        json_t *model = json_pack("{s:s,s:b}", "family", "qwen2", "tie_embeddings", 1);
        json_t *source = json_pack("{s:s}", "pack", "unit");
        TAP_OK(!q4nx_writer_finish(w, model, source, &e), "%s: finish", ln);
        json_decref(model);
        json_decref(source);
        q4nx_writer_free(w);
        close(fd);

        int code = -1;
        q4nx_file *f = q4nx_open(path, &e, &code);
        TAP_OK(f && code == 0, "%s: opens (%s)", ln, f ? "" : e.msg);
        if (!f)
            continue;
        TAP_OK(q4nx_layout(f) == L && q4nx_tensor_count(f) == 4, "%s: layout and tensor count", ln);
        TAP_OK(!strcmp(json_string_value(json_object_get(q4nx_model(f), "family")), "qwen2") &&
                   !strcmp(json_string_value(json_object_get(q4nx_source(f), "pack")), "unit"),
               "%s: model and source descriptions kept", ln);
        const uint8_t *ad;
        size_t al;
        TAP_OK(!q4nx_asset(f, "tokenizer.json", &ad, &al) && al == sizeof tok - 1 && !memcmp(ad, tok, al) &&
                   q4nx_asset(f, "nope", &ad, &al) == -1,
               "%s: asset by name", ln);
        TAP_OK(same_values(q4nx_find(f, "layers.0.attn.qkv"), &a), "%s: symmetric f32 tensor dequantises exactly", ln);
        TAP_OK(same_values(q4nx_find(f, "layers.0.attn.o"), &b), "%s: asymmetric f16 tensor dequantises exactly", ln);
        TAP_OK(same_values(q4nx_find(f, "lm_head"), &big), "%s: asymmetric bf16 tensor dequantises exactly", ln);
        const ogk_qtensor *nt = q4nx_find(f, "final_norm");
        TAP_OK(nt && nt->dtype == OGK_F32 && nt->nbytes == sizeof norm && !memcmp(nt->data, norm, sizeof norm) &&
                   !strcmp(nt->name, "norm"),
               "%s: plain tensor kept as is", ln);
        TAP_OK(q4nx_find(f, "embed") == NULL, "%s: absent role is NULL", ln);
        int aligned = 1, crc_ok = 1;
        for (size_t i = 0; i < q4nx_tensor_count(f); i++) {
            q4nx_extent x;
            q4nx_tensor_extent(f, i, &x);
            if (x.offset % 64 || (x.size >= 65536 && x.offset % 4096))
                aligned = 0;
            if (ogk_crc32c(0, x.bytes, x.size) != x.crc32c)
                crc_ok = 0;
        }
        TAP_OK(aligned, "%s: tensors 64-byte aligned, large ones 4096", ln);
        TAP_OK(crc_ok, "%s: stored checksums match the bytes", ln);
        q4nx_close(f);

        free(file_bytes);
        file_bytes = (uint8_t *)ogk_read_file(path, &file_len, &e);
        char msg[600];
        /* truncation at many lengths: always refused, exit code 3 */
        int trunc_ok = 1;
        for (size_t n = 0; n < file_len; n += (n < 256 ? 7 : file_len / 37 + 1))
            if (try_open(file_bytes, n, msg, sizeof msg) != OGK_EXIT_INPUT)
                trunc_ok = 0;
        TAP_OK(trunc_ok, "%s: every truncation refused with exit 3", ln);
        try_open(file_bytes, file_len - 1, msg, sizeof msg);
        TAP_OK(strstr(msg, "truncated") != NULL, "%s: truncation named (%s)", ln, msg);
        uint8_t *m = malloc(file_len);
        memcpy(m, file_bytes, file_len);
        m[0] = 'X';
        TAP_OK(try_open(m, file_len, msg, sizeof msg) == 3 && strstr(msg, "bad magic"), "%s: wrong magic (%s)", ln, msg);
        memcpy(m, file_bytes, file_len);
        m[8] = 2;
        TAP_OK(try_open(m, file_len, msg, sizeof msg) == 3 && strstr(msg, "format version 2 is newer"),
               "%s: future format version (%s)", ln, msg);
        memcpy(m, file_bytes, file_len);
        m[12] = 9;
        TAP_OK(try_open(m, file_len, msg, sizeof msg) == 3 && strstr(msg, "layout version 9"),
               "%s: future layout version (%s)", ln, msg);
        /* every single-byte change in the tables, strings and footer: refused or safe to walk (ASan) */
        uint64_t meta_off;
        memcpy(&meta_off, file_bytes + file_len - 64, 8);
        const uint8_t *js = file_bytes + meta_off;
        size_t jl = strlen((const char *)js) < file_len - meta_off ? strlen((const char *)js) : 0;
        int survived = 1, refused = 0, total = 0;
        for (size_t i = meta_off + jl; i < file_len; i++) {
            static const uint8_t flips[] = {0x01, 0x80, 0xFF};
            for (size_t j = 0; j < sizeof flips; j++) {
                memcpy(m, file_bytes, file_len);
                m[i] ^= flips[j];
                int c = try_open(m, file_len, NULL, 0);
                total++;
                if (c == OGK_EXIT_INPUT)
                    refused++;
                else if (c != 0)
                    survived = 0;
            }
        }
        TAP_OK(survived && refused > total / 2, "%s: %d of %d table/footer byte flips refused, none crashed", ln,
               refused, total);
        /* random multi-byte damage anywhere (header, data, tables, footer): never a crash */
        int crashed = 0, opened = 0;
        for (int it = 0; it < 400; it++) {
            memcpy(m, file_bytes, file_len);
            int nflip = 1 + (int)(rnd() % 4);
            for (int j = 0; j < nflip; j++) {
                size_t at = rnd() % 4 == 0 ? file_len - 1 - rnd() % 64 /* footer */ : rnd() % file_len;
                m[at] = (uint8_t)rnd();
            }
            int c = try_open(m, file_len, NULL, 0);
            if (c == 0)
                opened++;
            else if (c != OGK_EXIT_INPUT)
                crashed = 1;
        }
        TAP_OK(!crashed, "%s: 400 random damages: %d still open (bytes no structure depends on), the rest refused with exit 3, none crashed", ln, opened);
        free(m);
    }

    /* q8: an 8-bit tensor in source order in either layout's container, values exact by the definition
     * (code - zp) * scale; its entry's fields damaged consistently (checksums recomputed) refused by name */
    for (int li = 0; li < 2; li++) {
        int L = li ? OGK_RM : OGK_B8;
        const uint32_t N8 = 9, K8 = 300, B8 = 64, KB8 = (K8 + B8 - 1) / B8;
        uint8_t codes[9 * 5 * 64], zp8[9 * 5];
        uint16_t sc8[9 * 5];
        for (size_t i = 0; i < sizeof codes; i++)
            codes[i] = (uint8_t)rnd();
        for (size_t i = 0; i < N8 * KB8; i++)
            zp8[i] = (uint8_t)rnd(), sc8[i] = (uint16_t)(0x2000 + rnd() % 0x1000);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        ogk_error e = {{0}};
        q4nx_writer *w = q4nx_writer_new(fd, L, &e);
        json_t *model = json_pack("{s:s}", "family", "qwen2"), *source = json_pack("{s:s}", "pack", "unit");
        int rc = !w || q4nx_writer_q8(w, "q8.qweight", "lm_head", N8, K8, B8, OGK_F16, codes, sc8, zp8, &e) ||
                 q4nx_writer_finish(w, model, source, &e);
        json_decref(model), json_decref(source);
        q4nx_writer_free(w);
        close(fd);
        TAP_OK(!rc, "q8 in a %s container: written (%s)", ogk_layout_name(L), e.msg);
        q4nx_file *f = q4nx_open(path, &e, NULL);
        const ogk_qtensor *t = f ? q4nx_find(f, "lm_head") : NULL;
        int exact = t && t->dtype == OGK_Q8 && t->layout == OGK_PLAIN && t->n == N8 && t->k == K8 && t->has_zp;
        for (uint32_t r = 0; exact && r < N8; r++) {
            float row[300];
            ogk_q8_dequant_row(t, r, row);
            for (uint32_t c = 0; c < K8; c++) {
                uint32_t g = c / B8;
                exact &= row[c] == (float)((int)codes[(r * KB8 + g) * B8 + c % B8] - zp8[r * KB8 + g]) *
                                       ogk_f16_to_f32(sc8[r * KB8 + g]);
            }
        }
        TAP_OK(exact, "q8 in a %s container: source order, every value (code - zp) * scale", ogk_layout_name(L));
        q4nx_close(f);
        size_t len;
        uint8_t *b = (uint8_t *)ogk_read_file(path, &len, &e);
        uint64_t table = q4nx_rd64(b + len - Q4NX_FOOTER_SIZE + FTR_TABLE_OFF),
                 mo = q4nx_rd64(b + len - Q4NX_FOOTER_SIZE + FTR_META_OFF);
        struct {
            int at, val;
            const char *want;
        } dmg[] = {{TE_LAYOUT, 2, "q8 in layout 2"}, {TE_BLOCK, 48, "power of two"}, {TE_SCALES_OFF, 128, "contradict"},
                   {TE_ZP, 0, "contradict"}};
        for (size_t d = 0; d < sizeof dmg / sizeof *dmg; d++) {
            uint8_t *m = malloc(len);
            memcpy(m, b, len);
            uint8_t *ent = m + table;
            if (dmg[d].at == TE_BLOCK || dmg[d].at == TE_SCALES_OFF)
                dmg[d].at == TE_BLOCK ? q4nx_wr32(ent + TE_BLOCK, (uint32_t)dmg[d].val)
                                      : q4nx_wr64(ent + TE_SCALES_OFF, (uint64_t)dmg[d].val);
            else
                ent[dmg[d].at] = (uint8_t)dmg[d].val;
            if (dmg[d].at == TE_BLOCK)
                q4nx_wr32(ent + TE_KBLOCKS, (K8 + 47) / 48);
            q4nx_wr32(m + len - Q4NX_FOOTER_SIZE + FTR_META_CRC, ogk_crc32c(0, m + mo, len - Q4NX_FOOTER_SIZE - mo));
            char msg[600] = "";
            int c = try_open(m, len, msg, sizeof msg);
            TAP_OK(c == OGK_EXIT_INPUT && strstr(msg, dmg[d].want) && strstr(msg, "q8.qweight"),
                   "q8 in a %s container: a damaged entry (field at %d) refused by name: %s", ogk_layout_name(L),
                   dmg[d].at, msg);
            free(m);
        }
        free(b);
    }
    TAP_OK(ogk_crc32c(0, "123456789", 9) == 0xE3069283u, "checksums are CRC32C as q4nx.5 defines it (check value)");
    unlink(path);
    free(file_bytes);
    free(a.codes), free(a.scales32), free(b.codes), free(b.scales16), free(b.zp);
    free(big.codes), free(big.scales16), free(big.zp);
    return TAP_DONE();
}
