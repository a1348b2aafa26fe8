/* amdxdna discovery, GET_INFO, command encoding and the GEMM backend's refusals. */
#include "npu.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xf86drm.h>

/* the published layouts: any drift here changes the ioctl numbers */
_Static_assert(sizeof(struct npu_create_hwctx) == 56, "create_hwctx layout");
_Static_assert(sizeof(struct npu_destroy_hwctx) == 8, "destroy_hwctx layout");
_Static_assert(sizeof(struct npu_config_hwctx) == 24, "config_hwctx layout");
_Static_assert(sizeof(struct npu_create_bo) == 32, "create_bo layout");
_Static_assert(sizeof(struct npu_get_bo_info) == 48, "get_bo_info layout");
_Static_assert(sizeof(struct npu_sync_bo) == 24, "sync_bo layout");
_Static_assert(sizeof(struct npu_exec_cmd) == 56, "exec_cmd layout");
_Static_assert(sizeof(struct npu_get_info) == 16, "get_info layout");
_Static_assert(sizeof(struct npu_aie_metadata) == 64, "aie_metadata layout");

uint32_t npu_ert_header(unsigned state, unsigned count, unsigned opcode)
{
    return (state & 0xFu) | (count & 0x7FFu) << 12 | (opcode & 0x1Fu) << 23;
}

size_t npu_encode_start_npu(uint32_t *buf, size_t cap, uint32_t cu_mask, uint64_t instr_addr, uint32_t instr_words,
                            const uint32_t *args, size_t nargs)
{
    size_t words = 1 + 1 + 2 + 1 + 1 + nargs; /* header, cu_mask, instr addr, size, prop_count, args */
    if (words > cap || words - 1 > 0x7FF)
        return 0;
    buf[0] = npu_ert_header(NPU_ERT_STATE_NEW, (unsigned)(words - 1), NPU_ERT_START_NPU);
    buf[1] = cu_mask;
    buf[2] = (uint32_t)instr_addr;
    buf[3] = (uint32_t)(instr_addr >> 32);
    buf[4] = instr_words;
    buf[5] = 0;
    for (size_t i = 0; i < nargs; i++)
        buf[6 + i] = args[i];
    return words;
}

const char *npu_accel_dir(void)
{
    const char *d = getenv("OGAKIT_ACCEL_DIR");
    return d && *d ? d : "/dev/accel";
}

static void note(char **skipped, const char *path, const char *why)
{
    if (!skipped)
        return;
    size_t old = *skipped ? strlen(*skipped) : 0, add = strlen(path) + strlen(why) + 4;
    char *s = realloc(*skipped, old + add);
    if (!s)
        return;
    snprintf(s + old, add, "%s: %s\n", path, why);
    *skipped = s;
}

static int get_info(int fd, uint32_t param, void *buf, uint32_t size)
{
    struct npu_get_info gi = {.param = param, .buffer_size = size, .buffer = (uint64_t)(uintptr_t)buf};
    return ioctl(fd, NPU_IOCTL_GET_INFO, &gi);
}

static int cmp_dev(const void *a, const void *b)
{
    return strcmp(((const npu_device *)a)->path, ((const npu_device *)b)->path);
}

int npu_scan(npu_device **out, char **skipped, ogk_error *e)
{
    const char *dir = npu_accel_dir();
    *out = NULL;
    if (skipped)
        *skipped = NULL;
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT || errno == ENOTDIR)
            return 0; /* no accel subsystem (or a path through a file): no devices */
        return ogk_fail(e, "%s: %s", dir, strerror(errno));
    }
    npu_device *v = NULL;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strncmp(de->d_name, "accel", 5))
            continue;
        char path[256];
        if ((size_t)snprintf(path, sizeof path, "%.200s/%.50s", dir, de->d_name) >= sizeof path)
            continue;
        int fd = open(path, O_RDWR | O_CLOEXEC);
        if (fd < 0)
            fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            note(skipped, path, strerror(errno));
            continue;
        }
        drmVersionPtr ver = drmGetVersion(fd);
        if (!ver) {
            note(skipped, path, "not a DRM device (DRM_IOCTL_VERSION failed)");
            close(fd);
            continue;
        }
        if (!ver->name || strcmp(ver->name, "amdxdna")) {
            char why[128];
            snprintf(why, sizeof why, "DRM driver \"%s\", not amdxdna", ver->name ? ver->name : "");
            note(skipped, path, why);
            drmFreeVersion(ver);
            close(fd);
            continue;
        }
        npu_device *nv = realloc(v, (size_t)(n + 1) * sizeof *v);
        if (!nv) {
            drmFreeVersion(ver);
            close(fd);
            break;
        }
        v = nv;
        npu_device *dv = &v[n++];
        memset(dv, 0, sizeof *dv);
        snprintf(dv->path, sizeof dv->path, "%s", path);
        snprintf(dv->driver, sizeof dv->driver, "%s", ver->name);
        snprintf(dv->date, sizeof dv->date, "%s", ver->date ? ver->date : "");
        snprintf(dv->desc, sizeof dv->desc, "%s", ver->desc ? ver->desc : "");
        dv->drv_major = ver->version_major, dv->drv_minor = ver->version_minor;
        dv->drv_patch = ver->version_patchlevel;
        drmFreeVersion(ver);
        struct npu_aie_metadata md;
        memset(&md, 0, sizeof md);
        if (get_info(fd, NPU_QUERY_AIE_METADATA, &md, sizeof md) == 0) {
            dv->info_ok = 1;
            dv->aie_major = md.version.major, dv->aie_minor = md.version.minor;
            dv->cols = md.cols, dv->rows = md.rows, dv->col_size = md.col_size;
        } else {
            snprintf(dv->info_err, sizeof dv->info_err, "GET_INFO(AIE_METADATA): %s", strerror(errno));
        }
        struct npu_firmware_version fw;
        memset(&fw, 0, sizeof fw);
        if (get_info(fd, NPU_QUERY_FIRMWARE_VERSION, &fw, sizeof fw) == 0) {
            dv->fw_ok = 1;
            dv->fw_major = fw.major, dv->fw_minor = fw.minor, dv->fw_patch = fw.patch, dv->fw_build = fw.build;
        }
        close(fd);
    }
    closedir(d);
    if (n > 1)
        qsort(v, (size_t)n, sizeof *v, cmp_dev);
    *out = v;
    return n;
}

json_t *npu_device_json(const npu_device *d)
{
    json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:s}", "type", "npu", "path", d->path, "driver", d->driver,
                          "driver_version", "", "driver_desc", d->desc);
    char ver[64];
    snprintf(ver, sizeof ver, "%d.%d.%d", d->drv_major, d->drv_minor, d->drv_patch);
    json_object_set_new(j, "driver_version", json_string(ver));
    if (d->info_ok) {
        char aie[32];
        snprintf(aie, sizeof aie, "%u.%u", d->aie_major, d->aie_minor);
        json_object_set_new(j, "aie_version", json_string(aie));
        json_object_set_new(j, "columns", json_integer(d->cols));
        json_object_set_new(j, "rows", json_integer(d->rows));
        json_object_set_new(j, "column_bytes", json_integer(d->col_size));
    } else {
        json_object_set_new(j, "info_error", json_string(d->info_err));
    }
    if (d->fw_ok) {
        char fw[64];
        snprintf(fw, sizeof fw, "%u.%u.%u.%u", d->fw_major, d->fw_minor, d->fw_patch, d->fw_build);
        json_object_set_new(j, "firmware", json_string(fw));
    }
    json_object_set_new(j, "execution_verified", json_false());
    return j;
}

struct npu_ctx {
    int fd;
    uint32_t hwctx, syncobj;
};

static int file_exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

npu_ctx *npu_open(const char *kernel_dir, ogk_error *e)
{
    npu_device *devs;
    char *skipped = NULL;
    int n = npu_scan(&devs, &skipped, e);
    free(skipped);
    if (n < 0)
        return NULL;
    if (n == 0) {
        free(devs);
        ogk_fail(e, "no amdxdna device (looked at %s/*)", npu_accel_dir());
        return NULL;
    }
    npu_device dev = devs[0];
    free(devs);
    if (!kernel_dir || !*kernel_dir)
        kernel_dir = getenv("OGAKIT_NPU_KERNELS");
    if (!kernel_dir || !*kernel_dir) {
        ogk_fail(e, "%s (amdxdna %d.%d): no NPU kernel binaries: set OGAKIT_NPU_KERNELS to a directory holding "
                    "%s and %s (built with mlir-aie/Peano; they cannot be built on this machine)",
                 dev.path, dev.drv_major, dev.drv_minor, NPU_GEMM_XCLBIN, NPU_GEMM_INSTS);
        return NULL;
    }
    const char *need[] = {NPU_GEMM_XCLBIN, NPU_GEMM_INSTS};
    for (int i = 0; i < 2; i++) {
        char p[512];
        snprintf(p, sizeof p, "%s/%s", kernel_dir, need[i]);
        if (!file_exists(p)) {
            ogk_fail(e, "%s (amdxdna %d.%d): NPU kernel binary missing: %s", dev.path, dev.drv_major, dev.drv_minor,
                     p);
            return NULL;
        }
    }
    /* Creating a hardware context needs the xclbin's PDI registered as a CU (CONFIG_HWCTX); parsing
     * xclbin (axlf) sections is not implemented, and nothing here has ever run on a device. */
    ogk_fail(e, "%s: loading %s/%s into a hardware context is not implemented (NPU execution is unverified "
                "on the machines ogakit is developed on)",
             dev.path, kernel_dir, NPU_GEMM_XCLBIN);
    return NULL;
}

void npu_close(npu_ctx *c)
{
    if (!c)
        return;
    if (c->fd >= 0) {
        struct npu_destroy_hwctx dh = {.handle = c->hwctx};
        if (c->hwctx)
            ioctl(c->fd, NPU_IOCTL_DESTROY_HWCTX, &dh);
        close(c->fd);
    }
    free(c);
}
