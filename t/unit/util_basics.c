/* lib/util: CRC32C against the standard check value and the table path; fp16/bf16 round trips. */
#include "tap.h"
#include "util/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

uint32_t ogk_crc32c_sw(uint32_t crc, const void *buf, size_t n);

int main(void)
{
    TAP_OK(ogk_crc32c(0, "123456789", 9) == 0xE3069283u, "crc32c check value (RFC 3720)");
    TAP_OK(ogk_crc32c_sw(0, "123456789", 9) == 0xE3069283u, "crc32c table path check value");

    size_t n = 3 * 8192 * 3 + 77;
    uint8_t *buf = malloc(n);
    uint32_t s = 12345;
    for (size_t i = 0; i < n; i++)
        buf[i] = (uint8_t)((s = s * 1103515245u + 12345u) >> 16);
    int agree = 1;
    size_t lens[] = {0, 1, 7, 8, 9, 24575, 24576, 24577, 50000, n};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++)
        if (ogk_crc32c(0, buf, lens[i]) != ogk_crc32c_sw(0, buf, lens[i]))
            agree = 0;
    TAP_OK(agree, "crc32c hardware path equals table path on lengths around the 3-stream chunk");
    uint32_t whole = ogk_crc32c(0, buf, n);
    uint32_t split = ogk_crc32c(ogk_crc32c(0, buf, 1000), buf + 1000, n - 1000);
    TAP_OK(whole == split, "crc32c is incremental");
    free(buf);

    int f16ok = 1;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = ogk_f16_to_f32((uint16_t)h);
        if (isnan(f))
            continue;
        if (ogk_f32_to_f16(f) != h)
            f16ok = 0;
    }
    TAP_OK(f16ok, "every non-NaN fp16 round-trips through fp32");
    TAP_OK(ogk_f16_to_f32(0x3c00) == 1.0f && ogk_f16_to_f32(0xc000) == -2.0f && ogk_f16_to_f32(0x0001) == ldexpf(1, -24),
           "fp16 known values (1, -2, smallest subnormal)");
    TAP_OK(ogk_f32_to_f16(1.0f + ldexpf(1, -11)) == 0x3c00 && ogk_f32_to_f16(1.0f + 3 * ldexpf(1, -11)) == 0x3c02,
           "fp16 rounds to nearest even");
    TAP_OK(ogk_f32_to_f16(65520.0f) == 0x7c00 && ogk_f32_to_f16_sat(65520.0f) == 0x7bff &&
               ogk_f32_to_f16_sat(-1e30f) == 0xfbff && ogk_f32_to_f16_sat(INFINITY) == 0x7bff &&
               ogk_f32_to_f16_sat(-INFINITY) == 0xfbff && ogk_f32_to_f16_sat(65504.0f) == 0x7bff &&
               ogk_f32_to_f16_sat(1.0f + 3 * ldexpf(1, -11)) == 0x3c02 && isnan(ogk_f16_to_f32(ogk_f32_to_f16_sat(NAN))),
           "fp16 saturating (the KV cache's): beyond +-65504 and infinities clamp to +-65504, the rest rounds as before");
    int bfok = 1;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = ogk_bf16_to_f32((uint16_t)h);
        if (!isnan(f) && ogk_f32_to_bf16(f) != h)
            bfok = 0;
    }
    TAP_OK(bfok, "every non-NaN bf16 round-trips through fp32");
    return TAP_DONE();
}
