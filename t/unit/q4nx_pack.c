/* q4nx-pack on OGAX streams written here with ogax_writer: a good stream packs (both layouts) and
 * dequantises to the MatMulNBits formula evaluated on the stream's own bytes; truncated streams, a tensor
 * header contradicting its payload, a corrupt payload and a missing end frame are refused by name with
 * exit 3 and leave no output file. Runs the real program from $OGAKIT_BUILD/bin. */
#include "tap.h"
#include "ogax/ogax.h"
#include "q4nx/format.h"
#include "q4nx/q4nx.h"
#include "util/util.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static uint32_t rng = 99;
static uint32_t rnd(void) { return (rng = rng * 1664525u + 1013904223u) >> 8; }
static char dir[128], prog[512];

enum { N = 24, K = 200, B = 32, KB = 7, N2 = 8, K2 = 256, B2 = 128, KB2 = 2 };
static uint8_t codes1[N * KB * B / 2], codes2[N2 * KB2 * B2 / 2], zp2[N2 * 1];
static float scales1[N * KB];
static uint16_t scales2[N2 * KB2];
static float normw[K];

static json_t *part(const char *name, uint64_t off, const void *p, uint64_t n)
{
    return json_pack("{s:s,s:I,s:I,s:I}", "name", name, "offset", (json_int_t)off, "size", (json_int_t)n, "crc32c",
                     (json_int_t)ogk_crc32c(0, p, n));
}

/* mode: 0 good, 1 codes size lie in header, 2 no end frame, 3 corrupt payload byte */
static void write_stream(const char *path, int mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ogax_writer w;
    ogax_writer_init(&w, fd);
    ogk_error e;
    json_t *h = json_pack("{s:s,s:i,s:{s:s,s:i,s:b},s:{s:s,s:s}}", "type", "model", "ogax", OGAX_VERSION, "model", "family",
                          "qwen2", "hidden_size", K, "tie_embeddings", 0, "source", "pack", "unit-pack", "flavour",
                          "builder-cpu");
    ogax_write_frame(&w, h, NULL, 0, &e);
    json_decref(h);
    static const char tok[] = "{\"version\":\"1.0\"}";
    h = json_pack("{s:s,s:s,s:I,s:I}", "type", "asset", "name", "tokenizer.json", "size", (json_int_t)strlen(tok),
                  "crc32c", (json_int_t)ogk_crc32c(0, tok, strlen(tok)));
    struct iovec iv[3] = {{(void *)tok, strlen(tok)}};
    ogax_write_frame(&w, h, iv, 1, &e);
    json_decref(h);
    /* symmetric f32 q4 */
    uint64_t cs = sizeof codes1 - (mode == 1 ? 16 : 0);
    h = json_pack("{s:s,s:s,s:s,s:s,s:[i,i],s:{s:i,s:i,s:i,s:s,s:s,s:s},s:[o,o]}", "type", "tensor", "name",
                  "l0.qkv_Q4", "role", "layers.0.attn.qkv", "dtype", "q4", "shape", N, K, "quant", "bits", 4,
                  "block_size", B, "k_blocks", KB, "scale_dtype", "f32", "zero_points", "none", "source_op",
                  "MatMulNBits", "parts", part("codes", 0, codes1, cs), part("scales", cs, scales1, sizeof scales1));
    iv[0] = (struct iovec){codes1, sizeof codes1};
    iv[1] = (struct iovec){scales1, sizeof scales1};
    uint8_t saved = codes1[5];
    if (mode == 3)
        codes1[5] ^= 0x10; /* after the checksum was computed */
    ogax_write_frame(&w, h, iv, 2, &e);
    codes1[5] = saved;
    json_decref(h);
    /* asymmetric f16 q4 */
    h = json_pack("{s:s,s:s,s:s,s:s,s:[i,i],s:{s:i,s:i,s:i,s:s,s:s,s:s},s:[o,o,o]}", "type", "tensor", "name",
                  "l0.o.qweight", "role", "layers.0.attn.o", "dtype", "q4", "shape", N2, K2, "quant", "bits", 4,
                  "block_size", B2, "k_blocks", KB2, "scale_dtype", "f16", "zero_points", "u4", "source_op",
                  "MatMulNBits", "parts", part("codes", 0, codes2, sizeof codes2),
                  part("scales", sizeof codes2, scales2, sizeof scales2),
                  part("zeros", sizeof codes2 + sizeof scales2, zp2, sizeof zp2));
    iv[0] = (struct iovec){codes2, sizeof codes2};
    iv[1] = (struct iovec){scales2, sizeof scales2};
    iv[2] = (struct iovec){zp2, sizeof zp2};
    ogax_write_frame(&w, h, iv, 3, &e);
    json_decref(h);
    h = json_pack("{s:s,s:s,s:s,s:s,s:[i],s:[o]}", "type", "tensor", "name", "final.weight", "role", "final_norm",
                  "dtype", "f32", "shape", K, "parts", part("data", 0, normw, sizeof normw));
    iv[0] = (struct iovec){normw, sizeof normw};
    ogax_write_frame(&w, h, iv, 1, &e);
    json_decref(h);
    if (mode != 2)
        ogax_write_end(&w, &e);
    close(fd);
}

static int run(const char *args, const char *in, const char *errfile)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s %s < %s 2> %s", prog, args, in, errfile);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int file_has(const char *path, const char *needle)
{
    size_t n;
    char *s = ogk_read_file(path, &n, NULL);
    int r = s && strstr(s, needle);
    free(s);
    return r;
}

static int exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

static int dir_has_no_tmp(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "ls %s | grep -q tmp", dir);
    return system(cmd) != 0;
}

static float want1(uint32_t r, uint32_t c)
{
    int q = (codes1[r * (KB * B / 2) + c / 2] >> (4 * (c & 1))) & 15;
    return (float)(q - 8) * scales1[r * KB + c / B];
}
static float want2(uint32_t r, uint32_t c)
{
    int q = (codes2[r * (KB2 * B2 / 2) + c / 2] >> (4 * (c & 1))) & 15;
    uint32_t g = c / B2;
    int z = (zp2[r * 1 + g / 2] >> (4 * (g & 1))) & 15;
    return (float)(q - z) * ogk_f16_to_f32(scales2[r * KB2 + g]);
}

/* Flips the lowest bit of the first code byte of the tensor with this role and rewrites its checksum
 * and the metadata checksum: a container that is internally consistent but no longer the pack. */
static int retouch(const char *path, const char *role)
{
    ogk_error e;
    q4nx_file *f = q4nx_open(path, &e, NULL);
    if (!f)
        return fprintf(stderr, "%s\n", e.msg), 1;
    size_t i = 0;
    while (i < q4nx_tensor_count(f) && strcmp(q4nx_tensor_at(f, i)->role, role))
        i++;
    if (i == q4nx_tensor_count(f))
        return fprintf(stderr, "no role %s\n", role), 1;
    q4nx_extent x;
    q4nx_tensor_extent(f, i, &x);
    q4nx_close(f);
    size_t len;
    uint8_t *b = (uint8_t *)ogk_read_file(path, &len, &e);
    uint8_t *ft = b + len - Q4NX_FOOTER_SIZE;
    uint8_t *ent = b + q4nx_rd64(ft + FTR_TABLE_OFF) + i * Q4NX_TENSOR_ENTRY;
    b[x.offset] ^= 1;
    q4nx_wr32(ent + TE_CRC, ogk_crc32c(0, b + x.offset, x.size));
    uint64_t mo = q4nx_rd64(ft + FTR_META_OFF);
    q4nx_wr32(ft + FTR_META_CRC, ogk_crc32c(0, b + mo, len - Q4NX_FOOTER_SIZE - mo));
    int fd = open(path, O_WRONLY | O_TRUNC);
    int rc = fd < 0 || ogk_write_all(fd, b, len);
    close(fd);
    free(b);
    return rc;
}

/* With arguments: "q4nx_pack FILE [MODE]" only writes a stream (MODE 0 good, 1 lying header, 2 no end
 * frame, 3 corrupt payload) for t/q4nx.bats, and exits; "q4nx_pack --retouch FILE.q4nx ROLE" changes one
 * code of a container and re-seals it (see retouch). */
int main(int argc, char **argv)
{
    const char *build = getenv("OGAKIT_BUILD");
    snprintf(prog, sizeof prog, "%s/bin/q4nx-pack", build ? build : "build");
    snprintf(dir, sizeof dir, "/tmp/q4nx_pack_%d", (int)getpid());
    for (size_t i = 0; i < sizeof codes1; i++)
        codes1[i] = (uint8_t)rnd();
    for (size_t i = 0; i < sizeof codes2; i++)
        codes2[i] = (uint8_t)rnd();
    for (size_t i = 0; i < sizeof zp2; i++)
        zp2[i] = (uint8_t)rnd();
    for (size_t i = 0; i < N * KB; i++)
        scales1[i] = -((float)(rnd() % 1000) + 1.0f) / 8192.0f;
    for (size_t i = 0; i < N2 * KB2; i++)
        scales2[i] = (uint16_t)(0x1c00 + rnd() % 0x800);
    for (int i = 0; i < K; i++)
        normw[i] = 1.0f + (float)i / 64.0f;
    if (argc == 4 && !strcmp(argv[1], "--retouch"))
        return retouch(argv[2], argv[3]);
    if (argc > 1) {
        write_stream(argv[1], argc > 2 ? atoi(argv[2]) : 0);
        return 0;
    }
    mkdir(dir, 0755);
    char good[200], out[200], err[200], bad[200], args[400];
    snprintf(good, sizeof good, "%s/good.ogax", dir);
    snprintf(out, sizeof out, "%s/m.q4nx", dir);
    snprintf(err, sizeof err, "%s/err", dir);
    snprintf(bad, sizeof bad, "%s/bad.ogax", dir);
    write_stream(good, 0);
    const char *lay[] = {"b8", "rm"};
    for (int li = 0; li < 2; li++) {
        snprintf(args, sizeof args, "-l %s -o %s", lay[li], out);
        int rc = run(args, good, err);
        TAP_OK(rc == 0, "%s: packs a good stream (exit %d)", lay[li], rc);
        ogk_error e;
        q4nx_file *f = q4nx_open(out, &e, NULL);
        TAP_OK(f != NULL, "%s: the output opens (%s)", lay[li], f ? "" : e.msg);
        if (!f)
            continue;
        TAP_OK(q4nx_layout(f) == ogk_layout_parse(lay[li]), "%s: header layout", lay[li]);
        const ogk_qtensor *t1 = q4nx_find(f, "layers.0.attn.qkv"), *t2 = q4nx_find(f, "layers.0.attn.o");
        int ok = t1 && t2 && t1->n == N && t1->k == K && t2->n == N2 && t2->k == K2 && t2->has_zp && !t1->has_zp;
        float row[K2];
        for (uint32_t r = 0; ok && r < N; r++) {
            ogk_q4_dequant_row(t1, r, row);
            for (uint32_t c = 0; c < K; c++) {
                float w = want1(r, c);
                ok &= !memcmp(&w, &row[c], 4);
            }
        }
        for (uint32_t r = 0; ok && r < N2; r++) {
            ogk_q4_dequant_row(t2, r, row);
            for (uint32_t c = 0; c < K2; c++) {
                float w = want2(r, c);
                ok &= !memcmp(&w, &row[c], 4);
            }
        }
        TAP_OK(ok, "%s: both quantised tensors dequantise bit-exactly to the stream's MatMulNBits values", lay[li]);
        const ogk_qtensor *nt = q4nx_find(f, "final_norm");
        TAP_OK(nt && nt->nbytes == sizeof normw && !memcmp(nt->data, normw, sizeof normw), "%s: norm kept", lay[li]);
        const uint8_t *ad;
        size_t al;
        TAP_OK(!q4nx_asset(f, "tokenizer.json", &ad, &al) && al == 17, "%s: asset kept", lay[li]);
        TAP_OK(!strcmp(json_string_value(json_object_get(q4nx_source(f), "pack")), "unit-pack") &&
                   json_object_get(q4nx_source(f), "packer"),
               "%s: provenance kept, packer recorded", lay[li]);
        q4nx_close(f);
        unlink(out);
    }
    /* truncations of the good stream, at several points */
    size_t len;
    char *s = ogk_read_file(good, &len, NULL);
    size_t cuts[] = {0, 10, 100, len / 3, len / 2, len - 200, len - 1};
    int all3 = 1, named = 1, nofile = 1;
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        int fd = open(bad, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        ogk_write_all(fd, s, cuts[i]);
        close(fd);
        snprintf(args, sizeof args, "-o %s", out);
        if (run(args, bad, err) != 3)
            all3 = 0;
        if (!file_has(err, "q4nx-pack: ") || !file_has(err, "truncated"))
            named = 0;
        if (exists(out) || !dir_has_no_tmp())
            nofile = 0;
    }
    free(s);
    TAP_OK(all3, "truncated streams: exit 3");
    TAP_OK(named, "truncated streams: named error mentioning truncation");
    TAP_OK(nofile, "truncated streams: no output file, no temp file left");
    snprintf(args, sizeof args, "-o %s", out);
    write_stream(bad, 1);
    TAP_OK(run(args, bad, err) == 3 && file_has(err, "l0.qkv_Q4") && !exists(out),
           "tensor header contradicting its sizes: exit 3, names the tensor, no file");
    write_stream(bad, 2);
    TAP_OK(run(args, bad, err) == 3 && file_has(err, "no end frame") && !exists(out), "missing end frame: exit 3, no file");
    write_stream(bad, 3);
    TAP_OK(run(args, bad, err) == 3 && file_has(err, "checksum mismatch") && file_has(err, "l0.qkv_Q4") && !exists(out),
           "corrupt payload byte: checksum error names the tensor, exit 3, no file");
    TAP_OK(run("-l xx", good, err) == 2 && file_has(err, "unknown layout"), "bad -l: usage exit 2");
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        TAP_OK(0, "cleanup");
    return TAP_DONE();
}
