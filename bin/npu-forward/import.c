/* npu-forward -m PACK_DIR: an OGA pack directory is imported into a cached container (oga-extract |
 * q4nx-pack -l b8, the programs installed beside this one), reused while the pack's files are unchanged.
 * Program side: it runs other programs and exits with their status on failure. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cmd.h"
#include "util/util.h"

/* FNV-1a over the pack's real path and the size and mtime of the files that make the model */
static uint64_t pack_key(const char *real)
{
    uint64_t h = 1469598103934665603ull;
    const char *files[] = {"", "genai_config.json", "config.json", "model.onnx", "model.onnx.data", "tokenizer.json",
                           "tokenizer_config.json"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        char p[PATH_MAX + 64], buf[128];
        snprintf(p, sizeof p, "%s/%s", real, files[i]);
        struct stat st;
        int n = stat(p, &st) ? snprintf(buf, sizeof buf, "%s:-", files[i])
                             : snprintf(buf, sizeof buf, "%s:%lld:%lld.%09ld", files[i], (long long)st.st_size,
                                        (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
        for (const char *s = i ? buf : real; *s; s++)
            h = (h ^ (uint8_t)*s) * 1099511628211ull;
        (void)n;
    }
    return h;
}

static int mkdirs(char *path)
{
    for (char *s = path + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            int r = mkdir(path, 0755);
            *s = '/';
            if (r && errno != EEXIST)
                return -1;
        }
    return mkdir(path, 0755) && errno != EEXIST ? -1 : 0;
}

static void sibling(char *out, size_t n, const char *prog)
{
    char self[PATH_MAX];
    ssize_t l = readlink("/proc/self/exe", self, sizeof self - 1);
    if (l <= 0) {
        snprintf(out, n, "%s", prog);
        return;
    }
    self[l] = 0;
    char *slash = strrchr(self, '/');
    *slash = 0;
    snprintf(out, n, "%s/%s", self, prog);
    if (access(out, X_OK))
        snprintf(out, n, "%s", prog); /* from PATH */
}

const char *npu_forward_import(const char *path)
{
    struct stat st;
    if (stat(path, &st) || !S_ISDIR(st.st_mode))
        return path;
    static char out[PATH_MAX + 256];
    char real[PATH_MAX], dir[PATH_MAX + 64];
    if (!realpath(path, real))
        ogk_die(OGK_EXIT_INPUT, "%s: %s", path, strerror(errno));
    snprintf(dir, sizeof dir, "%s/model.onnx", real);
    if (access(dir, F_OK))
        ogk_die(OGK_EXIT_INPUT, "%s: not a regular file (a directory) and not an OGA pack (no model.onnx): give a .q4nx "
                "container or a pack directory",
                path);
    const char *c = getenv("OGAKIT_CACHE"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (!(home && *home)) { /* no HOME (a service, env -i): the account's own, never a directory others can write */
        const struct passwd *pw = getpwuid(getuid());
        home = pw && pw->pw_dir && *pw->pw_dir == '/' ? pw->pw_dir : NULL;
    }
    if (c && *c)
        snprintf(dir, sizeof dir, "%s", c);
    else if (xdg && *xdg)
        snprintf(dir, sizeof dir, "%s/ogakit", xdg);
    else if (home)
        snprintf(dir, sizeof dir, "%s/.cache/ogakit", home);
    else
        ogk_die(OGK_EXIT_INIT, "no cache directory for the pack's container: HOME is not set and the account has no "
                "home directory (set OGAKIT_CACHE)");
    struct stat dst;
    if (mkdirs(dir) || stat(dir, &dst) || (!S_ISDIR(dst.st_mode) && (errno = ENOTDIR)) || access(dir, W_OK | X_OK))
        ogk_die(OGK_EXIT_INIT, "cache directory %s: %s (set OGAKIT_CACHE)", dir, strerror(errno));
    const char *base = strrchr(real, '/') ? strrchr(real, '/') + 1 : real;
    snprintf(out, sizeof out, "%s/%.100s-%016llx.q4nx", dir, *base ? base : "pack",
             (unsigned long long)pack_key(real));
    if (!access(out, R_OK)) {
        ogk_err("%s: the pack's container from the cache: %s", path, out);
        return out;
    }
    ogk_err("%s: importing the pack (oga-extract | q4nx-pack -l b8) into %s", path, out);
    char ex[PATH_MAX + 32], pk[PATH_MAX + 32];
    sibling(ex, sizeof ex, "oga-extract");
    sibling(pk, sizeof pk, "q4nx-pack");
    int fd[2];
    if (pipe(fd))
        ogk_die(OGK_EXIT_INIT, "pipe: %s", strerror(errno));
    pid_t a = fork();
    if (a == 0) {
        dup2(fd[1], 1);
        close(fd[0]), close(fd[1]);
        execl(ex, "oga-extract", real, (char *)NULL);
        fprintf(stderr, "npu-forward: %s: %s\n", ex, strerror(errno));
        _exit(OGK_EXIT_INIT);
    }
    pid_t b = a < 0 ? -1 : fork();
    if (b == 0) {
        dup2(fd[0], 0);
        close(fd[0]), close(fd[1]);
        execl(pk, "q4nx-pack", "-l", "b8", "-o", out, (char *)NULL);
        fprintf(stderr, "npu-forward: %s: %s\n", pk, strerror(errno));
        _exit(OGK_EXIT_INIT);
    }
    close(fd[0]), close(fd[1]);
    if (a < 0 || b < 0)
        ogk_die(OGK_EXIT_INIT, "fork: %s", strerror(errno));
    int sa = 0, sb = 0;
    waitpid(a, &sa, 0);
    waitpid(b, &sb, 0);
    int ca = WIFEXITED(sa) ? WEXITSTATUS(sa) : OGK_EXIT_INIT, cb = WIFEXITED(sb) ? WEXITSTATUS(sb) : OGK_EXIT_INIT;
    if (ca || cb) {
        unlink(out);
        /* q4nx-pack's failure (the cache file cannot be written) leaves oga-extract a broken pipe (1): the
         * cause is q4nx-pack's; oga-extract's own refusal (3) is the cause of q4nx-pack's */
        int pack = cb && (!ca || ca == OGK_EXIT_CHECK), st = pack ? sb : sa;
        char how[64];
        if (WIFSIGNALED(st)) /* killed (the OOM killer, a user's kill): init failed, said as it was */
            snprintf(how, sizeof how, "was killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
        else
            snprintf(how, sizeof how, "exited %d", pack ? cb : ca);
        ogk_die(pack ? cb : ca, "%s: importing the pack failed (%s %s)", path, pack ? "q4nx-pack" : "oga-extract", how);
    }
    return out;
}
