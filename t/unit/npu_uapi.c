/* lib/npu: the amdxdna uAPI as the kernel defines it (ioctl numbers computed by hand from the
 * published _IOWR('d', 0x40 + n, size) encoding and struct sizes), ERT command encoding, discovery
 * on directories without an amdxdna node, and the refusal messages. */
#include "tap.h"
#include "npu/npu.h"
#include "util/util.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int main(void)
{
    ogk_prog_set("npu_uapi");
    /* _IOC(dir=3 (read|write), type 'd' = 0x64, nr, size) = 3<<30 | size<<16 | 0x64<<8 | nr */
    TAP_OK(NPU_IOCTL_CREATE_HWCTX == 0xC0386440u, "CREATE_HWCTX = 0xC0386440 (56-byte struct, nr 0x40)");
    TAP_OK(NPU_IOCTL_DESTROY_HWCTX == 0xC0086441u, "DESTROY_HWCTX = 0xC0086441");
    TAP_OK(NPU_IOCTL_CONFIG_HWCTX == 0xC0186442u, "CONFIG_HWCTX = 0xC0186442");
    TAP_OK(NPU_IOCTL_CREATE_BO == 0xC0206443u, "CREATE_BO = 0xC0206443");
    TAP_OK(NPU_IOCTL_GET_BO_INFO == 0xC0306444u, "GET_BO_INFO = 0xC0306444");
    TAP_OK(NPU_IOCTL_SYNC_BO == 0xC0186445u, "SYNC_BO = 0xC0186445");
    TAP_OK(NPU_IOCTL_EXEC_CMD == 0xC0386446u, "EXEC_CMD = 0xC0386446");
    TAP_OK(NPU_IOCTL_GET_INFO == 0xC0106447u, "GET_INFO = 0xC0106447");

    /* ERT header: state[3:0] count[22:12] opcode[27:23] */
    TAP_OK(npu_ert_header(1, 0, 20) == (1u | 20u << 23), "ERT_START_NPU header, state NEW, count 0");
    TAP_OK(npu_ert_header(4, 0x7FF, 0x1F) == (4u | 0x7FFu << 12 | 0x1Fu << 23), "ERT header field limits");
    uint32_t buf[16], args[3] = {7, 8, 9};
    size_t w = npu_encode_start_npu(buf, 16, 1, 0x123456789ABCull, 64, args, 3);
    TAP_OK(w == 9 && buf[0] == (1u | 8u << 12 | 20u << 23) && buf[1] == 1 && buf[2] == 0x56789ABCu &&
               buf[3] == 0x1234u && buf[4] == 64 && buf[5] == 0 && buf[6] == 7 && buf[8] == 9,
           "ERT_START_NPU packet: header, cu_mask, instruction address lo/hi, size, no properties, args");
    TAP_OK(npu_encode_start_npu(buf, 8, 1, 0, 0, args, 3) == 0, "packet larger than the buffer is refused");

    /* discovery: a directory without amdxdna nodes */
    char dir[] = "/tmp/npu_uapi.XXXXXX";
    TAP_OK(mkdtemp(dir) != NULL, "temp dir");
    setenv("OGAKIT_ACCEL_DIR", dir, 1);
    npu_device *d;
    char *skipped = NULL;
    ogk_error e;
    TAP_OK(npu_scan(&d, &skipped, &e) == 0 && !skipped, "empty accel dir: no devices");
    free(d);
    char node[64];
    snprintf(node, sizeof node, "%s/accel0", dir);
    FILE *f = fopen(node, "w");
    fputs("not a device", f);
    fclose(f);
    int n = npu_scan(&d, &skipped, &e);
    TAP_OK(n == 0 && skipped && strstr(skipped, "accel0: not a DRM device"), "a non-DRM accel0 is skipped: %s",
           skipped ? skipped : "(no note)");
    free(d), free(skipped);
    npu_ctx *c = npu_open(NULL, &e);
    char want[128];
    snprintf(want, sizeof want, "no amdxdna device (looked at %s/*)", dir);
    TAP_OK(!c && !strcmp(e.msg, want), "npu_open without a device: %s", e.msg);
    unlink(node);
    rmdir(dir);
    setenv("OGAKIT_ACCEL_DIR", "/nonexistent/accel", 1);
    TAP_OK(npu_scan(&d, NULL, &e) == 0, "missing accel dir: no devices, no error");
    free(d);
    return TAP_DONE();
}
