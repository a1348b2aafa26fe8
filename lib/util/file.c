/* Input mmap, whole-file reads, full reads/writes, and atomic output files. */
#define _GNU_SOURCE
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <libgen.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

const char *ogk_file_kind(mode_t mode)
{
    return S_ISREG(mode)    ? "a regular file"
           : S_ISDIR(mode)  ? "a directory"
           : S_ISFIFO(mode) ? "a FIFO"
           : S_ISSOCK(mode) ? "a socket"
           : S_ISCHR(mode)  ? "a character device"
           : S_ISBLK(mode)  ? "a block device"
                            : "not a regular file";
}

/* the regular files read so far (a bounded list: the first ones a run opens are its named inputs) */
#define MAX_INPUTS 256
static struct {
    dev_t dev;
    ino_t ino;
} inputs[MAX_INPUTS];
static char *input_what[MAX_INPUTS];
static int n_inputs;
static pthread_mutex_t inputs_mu = PTHREAD_MUTEX_INITIALIZER;

/* standard output is the regular file st (a shell's ">> INPUT"): writing it would change what is read */
static int is_stdout(const struct stat *st)
{
    struct stat o;
    return fstat(STDOUT_FILENO, &o) == 0 && S_ISREG(o.st_mode) && o.st_dev == st->st_dev && o.st_ino == st->st_ino;
}

void ogk_input_note(int fd, const char *what)
{
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode))
        return;
    if (is_stdout(&st))
        ogk_die(OGK_EXIT_USAGE, "%s: is also this run's standard output; redirect standard output to another file", what);
    pthread_mutex_lock(&inputs_mu);
    int seen = 0;
    for (int i = 0; i < n_inputs && !seen; i++)
        seen = inputs[i].dev == st.st_dev && inputs[i].ino == st.st_ino;
    if (!seen && n_inputs < MAX_INPUTS) {
        inputs[n_inputs].dev = st.st_dev, inputs[n_inputs].ino = st.st_ino;
        input_what[n_inputs++] = strdup(what);
    }
    pthread_mutex_unlock(&inputs_mu);
}

/* The output st (a file -o names, or standard output) is a file this run reads: refused before anything
 * is written (usage: name another file) */
static void refuse_input_stat(const struct stat *st, const char *name, const char *advice)
{
    if (!S_ISREG(st->st_mode))
        return;
    pthread_mutex_lock(&inputs_mu);
    for (int i = 0; i < n_inputs; i++)
        if (inputs[i].dev == st->st_dev && inputs[i].ino == st->st_ino) {
            char what[512];
            snprintf(what, sizeof what, "%s", input_what[i] ? input_what[i] : "?");
            pthread_mutex_unlock(&inputs_mu);
            ogk_die(OGK_EXIT_USAGE, "%s: is an input of this run (%s); %s", name, what, advice);
        }
    pthread_mutex_unlock(&inputs_mu);
}

static void refuse_input_target(const char *path)
{
    struct stat st;
    if (!stat(path, &st))
        refuse_input_stat(&st, path, "name another output file");
}

int ogk_open_regular(const char *path, struct stat *st, ogk_error *e)
{
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever; the check
     * is on the opened file (symlinks followed), so nothing can swap it in between */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return ogk_fail(e, "%s: %s", path, strerror(errno));
    if (fstat(fd, st) != 0) {
        int err = errno;
        close(fd);
        return ogk_fail(e, "%s: %s", path, strerror(err));
    }
    if (!S_ISREG(st->st_mode)) {
        close(fd);
        errno = EINVAL; /* callers tell "missing" (ENOENT) from "unreadable" by errno */
        return ogk_fail(e, "%s: not a regular file (%s)", path, ogk_file_kind(st->st_mode));
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
        int err = errno;
        close(fd);
        return ogk_fail(e, "%s: %s", path, strerror(err));
    }
    ogk_input_note(fd, path);
    return fd;
}

/* "-": standard input, a pipe read to its end into memory (page aligned, as a mapping). With magic (mlen
 * bytes), the pipe must begin with it: checked as soon as that much is read, so a pipe of something else
 * (cat /dev/zero | prog -) is refused at once, not read until memory runs out. A pipe shorter than the
 * magic is left to the caller (its "truncated"). */
static int map_stdin_pipe(ogk_map *m, const ogk_magic *mg, ogk_error *e)
{
    int checked = !mg || !mg->len;
    size_t n = 0, cap = 0;
    uint8_t *b = NULL;
    for (;;) {
        if (n == cap) {
            size_t nc = cap ? cap * 2 : (size_t)1 << 20;
            uint8_t *nb = nc > cap ? realloc(b, nc) : NULL;
            if (!nb) {
                free(b);
                ogk_fail(e, "standard input: out of memory after %zu bytes", n);
                errno = ENOMEM;
                return -1;
            }
            b = nb, cap = nc;
        }
        ssize_t r = read(STDIN_FILENO, b + n, cap - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int err = errno;
            free(b);
            return ogk_fail(e, "standard input: read: %s", strerror(err));
        }
        if (!r)
            break;
        n += (size_t)r;
        if (!checked && n >= mg->len) {
            checked = 1;
            if (memcmp(b, mg->bytes, mg->len)) {
                free(b);
                return ogk_fail(e, "standard input: not %s (bad magic; the pipe is not read further)", mg->what);
            }
        }
    }
    uint8_t *p = n ? ogk_big_alloc(n) : NULL;
    if (n && !p) {
        free(b);
        ogk_fail(e, "standard input: out of memory for a %zu-byte copy", n);
        errno = ENOMEM;
        return -1;
    }
    if (n)
        memcpy(p, b, n);
    free(b);
    m->data = p;
    m->size = n;
    m->copied = n > 0;
    return 0;
}

/* The files mapped in place. Another process that truncates one while it is mapped makes the next read of
 * a page past its new end a SIGBUS: that fault, inside one of these mappings, is named and ends the run
 * as a refused input (3) instead of a crash; any other SIGBUS keeps its default action. The handler only
 * reads the table (written under mapped_mu before a mapping is used and after it is unmapped): chunks of
 * 64 entries, one more linked (filled first, never freed) when all are in use, so every mapping is named
 * (a pack's external data may be hundreds of files). */
#define MAPPED_CHUNK 64
typedef struct mapped_chunk {
    struct {
        const uint8_t *volatile p;
        volatile size_t n;
        char path[256];
    } e[MAPPED_CHUNK];
    struct mapped_chunk *volatile next;
} mapped_chunk;
static mapped_chunk mapped;
static pthread_mutex_t mapped_mu = PTHREAD_MUTEX_INITIALIZER;

/* s appended to buf, control characters as '?' (as ogk_err writes them) */
static void put_str(char *buf, size_t *len, size_t cap, const char *s)
{
    for (; *s && *len < cap; s++)
        buf[(*len)++] = (unsigned char)*s < 0x20 || *s == 0x7f ? '?' : *s;
}

/* a is inside a mapped input whose file was cut: named, exit 3 (async-signal-safe); else returns */
static void mapped_fault(const uint8_t *a)
{
    for (const mapped_chunk *c = &mapped; c; c = c->next)
        for (int i = 0; i < MAPPED_CHUNK; i++) {
            const uint8_t *p = c->e[i].p;
            if (!p || a < p || a >= p + c->e[i].n)
                continue;
            /* async-signal-safe from here: write, unlink, _exit */
            char msg[512];
            size_t n = 0;
            put_str(msg, &n, sizeof msg - 1, ogk_prog());
            put_str(msg, &n, sizeof msg - 1, ": ");
            put_str(msg, &n, sizeof msg - 1, c->e[i].path);
            put_str(msg, &n, sizeof msg - 1, ": the file shrank while being read (changed by another process)");
            msg[n++] = '\n';
            ssize_t w = write(STDERR_FILENO, msg, n);
            (void)w;
            ogk_out_remove_pending();
            _exit(OGK_EXIT_INPUT);
        }
}

static void on_sigbus(int sig, siginfo_t *si, void *ctx)
{
    (void)ctx;
    if (si->si_code == BUS_ADRERR) /* a fault at si_addr (a sent signal's si_addr is no address) */
        mapped_fault(si->si_addr);
    /* not ours: the default action, as if there were no handler. A fault would repeat on return, but a
     * signal sent by kill(1) would not: raised again, it is delivered (core, 135) once this handler returns */
    signal(sig, SIG_DFL);
    raise(sig);
}

static void mapped_note(const uint8_t *p, size_t n, const char *path)
{
    static int hooked;
    pthread_mutex_lock(&mapped_mu);
    if (!hooked) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_sigbus;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGBUS, &sa, NULL);
        hooked = 1;
    }
    mapped_chunk *c = &mapped;
    for (;;) {
        for (int i = 0; i < MAPPED_CHUNK; i++)
            if (!c->e[i].p) {
                const char *name = strcmp(path, "-") ? path : "standard input";
                size_t len = strlen(name), room = sizeof c->e[i].path - 1;
                const char *tail = len > room ? name + len - (room - 3) : NULL; /* too long: its end, the file's name */
                snprintf(c->e[i].path, sizeof c->e[i].path, "%s%s", tail ? "..." : "", tail ? tail : name);
                c->e[i].n = n;
                c->e[i].p = p;
                pthread_mutex_unlock(&mapped_mu);
                return;
            }
        if (!c->next && !(c->next = calloc(1, sizeof *c->next)))
            break; /* no memory for the entry: that file's cut is a plain SIGBUS */
        c = c->next;
    }
    pthread_mutex_unlock(&mapped_mu);
}

static void mapped_forget(const uint8_t *p)
{
    pthread_mutex_lock(&mapped_mu);
    for (mapped_chunk *c = &mapped; c; c = c->next)
        for (int i = 0; i < MAPPED_CHUNK; i++)
            if (c->e[i].p == p)
                c->e[i].p = NULL;
    pthread_mutex_unlock(&mapped_mu);
}

static int map_file(ogk_map *m, const char *path, int load, const ogk_magic *mg, ogk_error *e)
{
    m->data = NULL;
    m->size = 0;
    m->copied = 0;
    errno = 0; /* a failure's errno is its own (ENOMEM: out of memory), never an earlier call's */
    struct stat st;
    int fd;
    if (!strcmp(path, "-")) { /* standard input: a regular file is mapped as any other, a pipe read whole */
        if (isatty(STDIN_FILENO))
            return ogk_fail(e, "standard input is a terminal (redirect a file or a pipe into it)");
        int fl = fcntl(STDIN_FILENO, F_GETFL); /* closed (<&-): held write-only by ogk_stdout_checked, not a device */
        if (fl >= 0 && (fl & O_ACCMODE) == O_WRONLY)
            return ogk_fail(e, "standard input: %s", strerror(EBADF));
        if (fstat(STDIN_FILENO, &st) != 0)
            return ogk_fail(e, "standard input: %s", strerror(errno));
        if (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode))
            return map_stdin_pipe(m, mg, e);
        if (!S_ISREG(st.st_mode))
            return ogk_fail(e, "standard input: not a regular file or a pipe (%s)", ogk_file_kind(st.st_mode));
        ogk_input_note(STDIN_FILENO, "standard input");
        fd = dup(STDIN_FILENO);
        if (fd < 0)
            return ogk_fail(e, "standard input: %s", strerror(errno));
    } else if ((fd = ogk_open_regular(path, &st, e)) < 0)
        return -1;
    if (st.st_size > 0 && load) {
        size_t n = (size_t)st.st_size, got = 0;
        /* page aligned like a mapping, whatever the size */
        uint8_t *p = n >= ((size_t)2 << 20) ? ogk_big_alloc(n) : aligned_alloc(4096, (n + 4095) & ~(size_t)4095);
        if (!p) {
            close(fd);
            ogk_fail(e, "%s: out of memory for a %zu-byte copy", path, n);
            errno = ENOMEM;
            return -1;
        }
        while (got < n) {
            ssize_t r = read(fd, p + got, n - got);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0) {
                int err = r < 0 ? errno : 0;
                free(p);
                close(fd);
                return ogk_fail(e, "%s: read: %s", path, err ? strerror(err) : "file shrank while being read");
            }
            got += (size_t)r;
        }
        m->data = p;
        m->size = n;
        m->copied = 1;
    } else if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int err = errno;
            close(fd);
            ogk_fail(e, "%s: mmap: %s", path, strerror(err));
            errno = err; /* ENOMEM: the caller's init failure, not a refused input */
            return -1;
        }
        m->data = p;
        m->size = (size_t)st.st_size;
        mapped_note(p, m->size, path);
    }
    close(fd);
    return 0;
}

int ogk_map_open(ogk_map *m, const char *path, ogk_error *e)
{
    return map_file(m, path, 0, NULL, e);
}

int ogk_map_load(ogk_map *m, const char *path, ogk_error *e)
{
    return map_file(m, path, 1, NULL, e);
}

/* the kernel's MemAvailable in bytes (0 when unknown) */
static uint64_t mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    unsigned long long kb = 0;
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
            break;
    fclose(f);
    return (uint64_t)kb * 1024;
}

/* 1 when the kernel hands out transparent huge pages to an madvise(MADV_HUGEPAGE) region */
static int thp_available(void)
{
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    char line[128] = "";
    if (!f)
        return 0;
    if (!fgets(line, sizeof line, f))
        line[0] = 0;
    fclose(f);
    return strstr(line, "[always]") || strstr(line, "[madvise]");
}

int ogk_map_load_wanted(uint64_t size)
{
    if (size < ((uint64_t)2 << 20) || !thp_available())
        return 0;
    uint64_t avail = mem_available();
    return avail && size <= avail / 2;
}

static int load_wanted_at(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && ogk_map_load_wanted((uint64_t)st.st_size);
}

int ogk_map_auto(ogk_map *m, const char *path, ogk_error *e)
{
    return map_file(m, path, load_wanted_at(path), NULL, e);
}

int ogk_map_magic(ogk_map *m, const char *path, int how, const ogk_magic *mg, ogk_error *e)
{
    int load = how == OGK_MAP_LOAD || (how == OGK_MAP_AUTO && load_wanted_at(path));
    return map_file(m, path, load, mg, e);
}

void ogk_map_close(ogk_map *m)
{
    if (m->data && m->copied)
        free((void *)m->data);
    else if (m->data) {
        mapped_forget(m->data);
        munmap((void *)m->data, m->size);
    }
    m->data = NULL;
    m->size = 0;
}

void *ogk_big_alloc(size_t n)
{
    const size_t huge = (size_t)2 << 20;
    if (n < huge) /* page-aligned, as the 2 MiB path is (malloc's large blocks start 16 bytes into a page) */
        return aligned_alloc(4096, n ? (n + 4095) & ~(size_t)4095 : 4096);
    void *p = NULL;
    size_t rounded = (n + huge - 1) / huge * huge;
    if (posix_memalign(&p, huge, rounded) != 0)
        return NULL;
    madvise(p, rounded, MADV_HUGEPAGE); /* advice only: failure just means small pages */
    return p;
}

void *ogk_big_calloc(size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size)
        return NULL;
    void *p = calloc(n ? n : 1, size ? size : 1);
    const size_t huge = (size_t)2 << 20, bytes = n * size;
    if (p && bytes >= 2 * huge) { /* the whole 2 MiB pages inside [p, p + bytes) */
        uintptr_t b = ((uintptr_t)p + huge - 1) & ~(uintptr_t)(huge - 1), e = ((uintptr_t)p + bytes) & ~(uintptr_t)(huge - 1);
        if (e > b)
            madvise((void *)b, e - b, MADV_HUGEPAGE); /* advice only */
    }
    return p;
}

char *ogk_read_file(const char *path, size_t *len, ogk_error *e)
{
    struct stat st;
    int fd = ogk_open_regular(path, &st, e);
    if (fd < 0)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    for (;;) {
        if (buf && n == cap) {
            char *b2 = realloc(buf, 2 * cap + 1);
            if (!b2)
                free(buf);
            buf = b2;
            cap *= 2;
        }
        if (!buf) {
            close(fd);
            ogk_fail(e, "%s: out of memory", path);
            errno = ENOMEM; /* the caller's init failure, not a bad file */
            return NULL;
        }
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            ogk_fail(e, "%s: %s", path, strerror(errno));
            free(buf);
            close(fd);
            return NULL;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    buf[n] = 0;
    if (len)
        *len = n;
    return buf;
}

int ogk_write_all(int fd, const void *buf, size_t n)
{
    const uint8_t *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n > (1u << 30) ? (1u << 30) : n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EFAULT) /* the kernel read a mapped input's cut page: that file is named */
            mapped_fault(p);
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

ssize_t ogk_read_full(int fd, void *buf, size_t n)
{
    uint8_t *p = buf;
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, p + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

/* One pending temp name per process is enough for our filters; removed on fatal signals and at exit.
 * With an unnamed file (O_TMPFILE) there is a name only between linkat and rename at commit. */
static char *pending_tmp;
static int named_open; /* a file output is open (one at a time) */

void ogk_out_remove_pending(void)
{
    if (pending_tmp)
        unlink(pending_tmp);
}

static void on_fatal_signal(int sig)
{
    if (pending_tmp)
        unlink(pending_tmp);
    signal(sig, SIG_DFL);
    raise(sig);
}

static void hook_signals(void)
{
    static int hooked;
    if (hooked)
        return;
    hooked = 1;
    atexit(ogk_out_remove_pending);
    /* a signal the process ignores stays ignored: SIGPIPE (ogk_stdout_checked: a closed stdout is a named
     * write failure, not a death by signal once a file output is open), SIGINT of a background job */
    int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction old;
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN)
            continue;
        signal(sigs[i], on_fatal_signal);
    }
}

/* Remove "BASE.tmp.PID" files next to path whose PID is no process (a writer killed by SIGKILL, or
 * on a filesystem without O_TMPFILE); regular files only, never another live process's. */
static void remove_stale_tmp(const char *path)
{
    char *dc = strdup(path), *bc = strdup(path);
    if (!dc || !bc) {
        free(dc);
        free(bc);
        return;
    }
    const char *dir = dirname(dc), *base = basename(bc);
    size_t bl = strlen(base);
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        const char *n = de->d_name, *ps = n + bl + 5;
        if (strncmp(n, base, bl) || strncmp(n + bl, ".tmp.", 5) || *ps < '1' || *ps > '9')
            continue;
        char *end;
        errno = 0;
        long pid = strtol(ps, &end, 10);
        struct stat st;
        if (*end || errno || pid <= 0 || pid > INT32_MAX || pid == (long)getpid() ||
            fstatat(dirfd(d), n, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
            continue;
        if (kill((pid_t)pid, 0) != 0 && errno == ESRCH)
            unlinkat(dirfd(d), n, 0);
    }
    if (d)
        closedir(d);
    free(dc);
    free(bc);
}

void ogk_refuse_tty_stdout(const char *what)
{
    if (isatty(STDOUT_FILENO))
        ogk_die(OGK_EXIT_USAGE, "refusing to write %s to a terminal (redirect stdout or use -o FILE)", what);
}

/* the file an output replaces keeps its permissions (a 0600 file stays private), and its owner and group
 * where this process may give them (root; a group it is in); a new one is 0644 less the umask. Where the
 * group cannot be kept (the writer's, or a setgid directory's), its bits grant no more than the others'
 * did: a 0640 file of a group the new one is not in is not made readable by the new group. A failure (not
 * ours to change) leaves the new file's default. */
static void keep_mode(int fd, const struct stat *old)
{
    if (!old)
        return;
    mode_t mode = old->st_mode & 0777;
    struct stat now;
    if (fchown(fd, old->st_uid, old->st_gid) != 0)
        (void)!fchown(fd, (uid_t)-1, old->st_gid);
    if (fstat(fd, &now) == 0 && now.st_gid != old->st_gid)
        mode = (mode & 0707) | (mode & (mode << 3) & 0070);
    (void)fchmod(fd, mode);
}

int ogk_out_open(ogk_out *o, const char *path, ogk_error *e)
{
    memset(o, 0, sizeof *o);
    o->fd = -1;
    if (path && !*path)
        return ogk_fail(e, "an empty output path (use - for standard output)");
    if (!path || strcmp(path, "-") == 0) {
        if (isatty(STDOUT_FILENO))
            return ogk_fail(e, "refusing to write binary output to a terminal (redirect stdout or use -o FILE)");
        struct stat st;
        if (fstat(STDOUT_FILENO, &st) == 0)
            refuse_input_stat(&st, "standard output", "redirect it to another file");
        o->fd = STDOUT_FILENO;
        o->is_stdout = 1;
        return 0;
    }
    if (named_open)
        return ogk_fail(e, "%s: another output file is already open", path);
    struct stat st, lst;
    int have = stat(path, &st) == 0, link = lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode);
    if (have && S_ISDIR(st.st_mode))
        return ogk_fail(e, "%s: is a directory (name a file)", path);
    if (have && !S_ISREG(st.st_mode)) { /* a device, FIFO or socket: written through, not replaced */
        o->fd = open(path, O_WRONLY | O_CLOEXEC);
        if (o->fd < 0)
            return ogk_fail(e, "%s: cannot open: %s", path, strerror(errno));
        o->is_stdout = o->direct = 1;
        return 0;
    }
    if (link && !have)
        return ogk_fail(e, "%s: a symbolic link to nothing (%s)", path, strerror(errno));
    char *real = link ? realpath(path, NULL) : NULL; /* the file a link names is the one replaced */
    if (link && !real)
        return ogk_fail(e, "%s: cannot resolve the symbolic link: %s", path, strerror(errno));
    o->path = strdup(real ? real : path);
    free(real);
    if (!o->path)
        return ogk_fail(e, "%s: out of memory", path);
    path = o->path;
    refuse_input_target(path);
    remove_stale_tmp(path);
    char *dc = strdup(path);
    if (!dc) {
        ogk_fail(e, "%s: out of memory", path);
        free(o->path);
        o->path = NULL;
        return -1;
    }
    hook_signals();
    /* an unnamed file in the target directory: a writer killed by SIGKILL leaves nothing; it gets a
     * name only at commit (linkat through /proc/self/fd, then rename over the target) */
    o->fd = access("/proc/self/fd", X_OK) == 0 ? open(dirname(dc), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644) : -1;
    free(dc);
    if (o->fd >= 0) {
        keep_mode(o->fd, have ? &st : NULL);
        named_open = 1;
        return 0;
    }
    /* no O_TMPFILE here (filesystem or kernel): a named temp file, removed on exit and fatal signals,
     * and by the next writer of the same path if a SIGKILL left it */
    if (asprintf(&o->tmp, "%s.tmp.%ld", path, (long)getpid()) < 0) {
        o->tmp = NULL;
        ogk_fail(e, "%s: out of memory", path); /* the message first: path is o->path */
        free(o->path);
        o->path = NULL;
        return -1;
    }
    o->fd = open(o->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (o->fd < 0) {
        ogk_fail(e, "%s: cannot create: %s", path, strerror(errno));
        free(o->tmp);
        free(o->path);
        o->tmp = o->path = NULL;
        return -1;
    }
    keep_mode(o->fd, have ? &st : NULL);
    pending_tmp = o->tmp;
    named_open = 1;
    return 0;
}

int ogk_out_commit(ogk_out *o, ogk_error *e)
{
    if (o->direct) {
        int rc = close(o->fd);
        o->fd = -1;
        return rc ? ogk_fail(e, "write failed: %s", strerror(errno)) : 0;
    }
    if (o->is_stdout)
        return 0;
    refuse_input_target(o->path); /* an input opened after the output (the temp file goes at exit) */
    if (fsync(o->fd) != 0) {
        int err = errno;
        /* the message first: the abort frees the path */
        ogk_fail(e, "%s: write failed: %s", o->path, strerror(err));
        ogk_out_abort(o);
        return -1;
    }
    if (!o->tmp) { /* unnamed */
        char proc[64];
        snprintf(proc, sizeof proc, "/proc/self/fd/%d", o->fd);
        /* no file at the path yet: link the finished file straight there (atomic; it never has any
         * other name, so a kill at any moment leaves either nothing or the whole output) */
        if (linkat(AT_FDCWD, proc, AT_FDCWD, o->path, AT_SYMLINK_FOLLOW) == 0) {
            int rc = close(o->fd);
            o->fd = -1;
            named_open = 0;
            if (rc != 0) {
                int err = errno;
                unlink(o->path);
                ogk_fail(e, "%s: write failed: %s", o->path, strerror(err));
                free(o->path);
                o->path = NULL;
                return -1;
            }
            free(o->path);
            o->path = NULL;
            return 0;
        }
        if (errno != EEXIST) {
            int err = errno;
            /* the message first: the abort frees the path */
            ogk_fail(e, "%s: cannot name the output: %s", o->path, strerror(err));
            ogk_out_abort(o);
            return -1;
        }
        /* replacing a file: the temp name now, then rename over it (a kill between the two leaves
         * BASE.tmp.PID, which the next writer of the path removes) */
        if (asprintf(&o->tmp, "%s.tmp.%ld", o->path, (long)getpid()) < 0) {
            o->tmp = NULL;
            ogk_out_abort(o);
            return ogk_fail(e, "out of memory");
        }
        unlink(o->tmp); /* our own pid's name: a leftover of an earlier process with this pid */
        pending_tmp = o->tmp;
        if (linkat(AT_FDCWD, proc, AT_FDCWD, o->tmp, AT_SYMLINK_FOLLOW) != 0) {
            int err = errno;
            pending_tmp = NULL;
            free(o->tmp);
            o->tmp = NULL;
            /* the message first: the abort frees the path */
            ogk_fail(e, "%s: cannot name the output: %s", o->path, strerror(err));
            ogk_out_abort(o);
            return -1;
        }
    }
    if (close(o->fd) != 0) {
        int err = errno;
        o->fd = -1;
        /* the message first: the abort frees the path */
        ogk_fail(e, "%s: write failed: %s", o->path, strerror(err));
        ogk_out_abort(o);
        return -1;
    }
    o->fd = -1;
    if (rename(o->tmp, o->path) != 0) {
        int err = errno;
        /* the message first: the abort frees the path */
        ogk_fail(e, "%s: rename failed: %s", o->path, strerror(err));
        ogk_out_abort(o);
        return -1;
    }
    pending_tmp = NULL;
    named_open = 0;
    free(o->tmp);
    free(o->path);
    o->tmp = o->path = NULL;
    return 0;
}

void ogk_out_abort(ogk_out *o)
{
    if (o->direct && o->fd >= 0)
        close(o->fd);
    if (o->direct)
        o->fd = -1;
    if (o->is_stdout)
        return;
    if (o->fd >= 0)
        close(o->fd); /* an unnamed file vanishes here */
    o->fd = -1;
    if (o->tmp) {
        unlink(o->tmp);
        if (pending_tmp == o->tmp)
            pending_tmp = NULL;
    }
    if (o->path)
        named_open = 0;
    free(o->tmp);
    free(o->path);
    o->tmp = o->path = NULL;
}
