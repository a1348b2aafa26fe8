/* lib/npu — the AMD XDNA NPU device layer: discovery of /dev/accel/accel* nodes driven by the Linux
 * `amdxdna` DRM driver (libdrm for the driver name and version, the amdxdna GET_INFO ioctl for the
 * AIE version, geometry and firmware), and the parts of the public amdxdna uAPI a GEMM launch needs
 * (hardware context, buffer objects, command buffer, syncobj completion), declared here from the
 * published uAPI facts (include/uapi/drm/amdxdna_accel.h, Linux >= 6.14); no vendor library.
 * Owns no kernels and no weights; must not include lib/kern or lib/q4nx.
 *
 * Honesty: no XDNA device exists on the machines this was written on, and NPU kernel binaries
 * (xclbin + instruction stream, built with mlir-aie/Peano) cannot be built there. Discovery and the
 * refusals are tested; the ioctl numbers and command encoding are tested against the uAPI facts;
 * execution on a device is unverified.
 */
#ifndef OGK_NPU_H
#define OGK_NPU_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <libdrm/drm.h>

#include "util/util.h"

/* ---- uAPI (amdxdna_accel.h), our declarations of the published layouts ---- */
enum {
    NPU_CREATE_HWCTX = 0, NPU_DESTROY_HWCTX = 1, NPU_CONFIG_HWCTX = 2, NPU_CREATE_BO = 3, NPU_GET_BO_INFO = 4,
    NPU_SYNC_BO = 5, NPU_EXEC_CMD = 6, NPU_GET_INFO = 7, NPU_SET_STATE = 8,
};
enum { NPU_BO_SHMEM = 1, NPU_BO_DEV_HEAP = 2, NPU_BO_DEV = 3, NPU_BO_CMD = 4 };
enum { NPU_SYNC_TO_DEVICE = 0, NPU_SYNC_FROM_DEVICE = 1 };
enum { NPU_CMD_SUBMIT_EXEC_BUF = 0 };
enum { NPU_HWCTX_CONFIG_CU = 0 };
/* GET_INFO params */
enum { NPU_QUERY_AIE_STATUS = 0, NPU_QUERY_AIE_METADATA = 1, NPU_QUERY_AIE_VERSION = 2,
       NPU_QUERY_CLOCK_METADATA = 3, NPU_QUERY_FIRMWARE_VERSION = 8 };
/* ERT command packets: header u32 = state[3:0] | count[22:12] | opcode[27:23] */
enum { NPU_ERT_START_CU = 0, NPU_ERT_CMD_CHAIN = 19, NPU_ERT_START_NPU = 20 };
enum { NPU_ERT_STATE_NEW = 1, NPU_ERT_STATE_COMPLETED = 4, NPU_ERT_STATE_ERROR = 5, NPU_ERT_STATE_ABORT = 6,
       NPU_ERT_STATE_TIMEOUT = 8 };

struct npu_create_hwctx {
    uint64_t ext, ext_flags, qos_p;
    uint32_t umq_bo, log_buf_bo, max_opc, num_tiles, mem_size, umq_doorbell;
    uint32_t handle, syncobj_handle; /* out */
};
struct npu_destroy_hwctx {
    uint32_t handle, pad;
};
struct npu_cu_config {
    uint32_t cu_bo;
    uint8_t cu_func, pad[3];
};
struct npu_config_hwctx {
    uint32_t handle, param_type;
    uint64_t param_val;
    uint32_t param_val_size, pad;
};
struct npu_create_bo {
    uint64_t flags, vaddr, size;
    uint32_t type, handle;
};
struct npu_get_bo_info {
    uint64_t ext, ext_flags;
    uint32_t handle, pad;
    uint64_t map_offset, vaddr, xdna_addr;
};
struct npu_sync_bo {
    uint32_t handle, direction;
    uint64_t offset, size;
};
struct npu_exec_cmd {
    uint64_t ext, ext_flags;
    uint32_t hwctx, type;
    uint64_t cmd_handles, args;
    uint32_t cmd_count, arg_count;
    uint64_t seq; /* out */
};
struct npu_get_info {
    uint32_t param, buffer_size;
    uint64_t buffer;
};
struct npu_aie_version {
    uint32_t major, minor;
};
struct npu_aie_tile_metadata {
    uint16_t row_count, row_start, dma_channel_count, lock_count, event_reg_count, pad[3];
};
struct npu_aie_metadata {
    uint32_t col_size;
    uint16_t cols, rows;
    struct npu_aie_version version;
    struct npu_aie_tile_metadata core, mem, shim;
};
struct npu_firmware_version {
    uint32_t major, minor, patch, build;
};

#define NPU_IOCTL(nr, type) DRM_IOWR(DRM_COMMAND_BASE + (nr), type)
#define NPU_IOCTL_CREATE_HWCTX NPU_IOCTL(NPU_CREATE_HWCTX, struct npu_create_hwctx)
#define NPU_IOCTL_DESTROY_HWCTX NPU_IOCTL(NPU_DESTROY_HWCTX, struct npu_destroy_hwctx)
#define NPU_IOCTL_CONFIG_HWCTX NPU_IOCTL(NPU_CONFIG_HWCTX, struct npu_config_hwctx)
#define NPU_IOCTL_CREATE_BO NPU_IOCTL(NPU_CREATE_BO, struct npu_create_bo)
#define NPU_IOCTL_GET_BO_INFO NPU_IOCTL(NPU_GET_BO_INFO, struct npu_get_bo_info)
#define NPU_IOCTL_SYNC_BO NPU_IOCTL(NPU_SYNC_BO, struct npu_sync_bo)
#define NPU_IOCTL_EXEC_CMD NPU_IOCTL(NPU_EXEC_CMD, struct npu_exec_cmd)
#define NPU_IOCTL_GET_INFO NPU_IOCTL(NPU_GET_INFO, struct npu_get_info)

/* ERT header word. */
uint32_t npu_ert_header(unsigned state, unsigned count, unsigned opcode);
/* Encode an ERT_START_NPU command: header, cu_mask, then u64 instruction address, u32 instruction
 * size (words), u32 property count (0), then the kernel arguments as u32 words. Returns the number
 * of u32 words written (count field = words after the header), 0 if cap is too small. */
size_t npu_encode_start_npu(uint32_t *buf, size_t cap, uint32_t cu_mask, uint64_t instr_addr, uint32_t instr_words,
                            const uint32_t *args, size_t nargs);

/* ---- discovery ---- */
typedef struct {
    char path[256];
    char driver[64], date[32], desc[128];
    int drv_major, drv_minor, drv_patch;
    int info_ok;         /* GET_INFO answered */
    char info_err[160];  /* why not, when !info_ok */
    uint32_t aie_major, aie_minor, cols, rows, col_size;
    int fw_ok;
    uint32_t fw_major, fw_minor, fw_patch, fw_build;
} npu_device;

/* The directory scanned: $OGAKIT_ACCEL_DIR (tests) or /dev/accel. */
const char *npu_accel_dir(void);
/* Every accel* node whose DRM driver is "amdxdna". Nodes that cannot be opened or are other drivers
 * are skipped (a note for each goes to *skipped as "PATH: reason" lines when skipped != NULL; caller
 * frees). Returns the number found (array in *out, caller frees), or -1 with e filled. */
int npu_scan(npu_device **out, char **skipped, ogk_error *e);
json_t *npu_device_json(const npu_device *d);

/* ---- a GEMM backend ---- */
/* The kernel binaries a q4 GEMM launch needs, looked up in $OGAKIT_NPU_KERNELS (or kernel_dir). */
#define NPU_GEMM_XCLBIN "q4nx_gemm.xclbin"
#define NPU_GEMM_INSTS "q4nx_gemm.insts"
typedef struct npu_ctx npu_ctx;
/* Open the first amdxdna device and load the GEMM kernel. On failure NULL and e says what is missing:
 * "no amdxdna device (looked at DIR/...)", or the device and the missing binary path. Exit
 * code for these: OGK_EXIT_INIT. */
npu_ctx *npu_open(const char *kernel_dir, ogk_error *e);
void npu_close(npu_ctx *c);

#endif
