/* Program name, named errors, option parsing, small system facts. */
#define _GNU_SOURCE
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static const char *prog_name = "ogakit";

void ogk_prog_set(const char *argv0)
{
    if (!argv0 || !*argv0)
        return;
    const char *slash = strrchr(argv0, '/');
    prog_name = slash ? slash + 1 : argv0;
}

const char *ogk_prog(void) { return prog_name; }

static int stdout_code;
static volatile int dying; /* ogk_die has named the error: the exit check adds no second message */

static void stdout_check(void)
{
    if (dying)
        return;
    errno = 0;
    if (!fflush(stdout) && !ferror(stdout))
        return;
    int err = errno;
    fprintf(stderr, "%s: standard output: write failed%s%s\n", prog_name, err ? ": " : "",
            err == EPIPE ? "broken pipe (the reader closed it)" : err ? strerror(err) : "");
    _exit(stdout_code);
}

/* A standard descriptor the caller closed (">&-", "2>&-", "<&-") is held by /dev/null opened the other way
 * round, so that using it fails as the closed one did (EBADF): left free, the first file the program opens
 * takes its number, and messages or output meant for it land in that file (q4nx-gguf's notes inside its
 * -o GGUF, an input refused as "also this run's standard output"). */
static void hold_std_fds(void)
{
    for (int fd = 0; fd <= 2; fd++)
        if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
            int n = open("/dev/null", (fd ? O_RDONLY : O_WRONLY) | O_NOCTTY);
            if (n >= 0 && n != fd) { /* the lower ones are held already: n is fd, unless /dev/null is odd */
                dup2(n, fd);
                close(n);
            }
        }
}

void ogk_stdout_checked(int code)
{
    hold_std_fds();
    stdout_code = code;
    signal(SIGPIPE, SIG_IGN);
    signal(SIGXFSZ, SIG_IGN); /* past ulimit -f a write fails with EFBIG, named as any write failure */
    atexit(stdout_check);
}

void ogk_verr(const char *fmt, va_list ap)
{
    char buf[2048];
    vsnprintf(buf, sizeof buf, fmt, ap);
    /* what a message quotes (a peer's answer, a file's names) must not drive the terminal: control
     * characters but tab and line feed as '?' */
    for (char *p = buf; *p; p++)
        if (((unsigned char)*p < 0x20 && *p != '\t' && *p != '\n') || *p == 0x7f)
            *p = '?';
    fprintf(stderr, "%s: %s\n", prog_name, buf);
}

void ogk_err(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ogk_verr(fmt, ap);
    va_end(ap);
}

void ogk_die(int code, const char *fmt, ...)
{
    dying = 1;
    va_list ap;
    va_start(ap, fmt);
    ogk_verr(fmt, ap);
    va_end(ap);
#if defined(__SANITIZE_ADDRESS__)
    /* A fatal error ends the process: what it still holds then is not a leak. Skip LeakSanitizer's
     * exit check (it runs from atexit and, depending on what is left in registers, reports or
     * not), but do what our own exit handlers do. Normal exits are still leak-checked. */
    fflush(NULL);
    ogk_out_remove_pending();
    _exit(code);
#endif
    exit(code);
}

int ogk_fail(ogk_error *e, const char *fmt, ...)
{
    if (e) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}

int ogk_json_print(FILE *f, const json_t *j)
{
    if (!j) /* a report that could not be built: named, never an empty output with exit 0 */
        ogk_die(OGK_EXIT_INIT, "internal error: the JSON report could not be built (out of memory, or text that is "
                               "not UTF-8)");
    if (json_dumpf(j, f, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0)
        return -1;
    if (fputc('\n', f) == EOF || fflush(f) != 0)
        return -1;
    return 0;
}

json_t *ogk_json_str(const char *s)
{
    json_t *j = json_string(s ? s : "");
    if (j || !s)
        return j;
    char *c = strdup(s);
    for (size_t i = 0; c && c[i]; i++)
        if ((unsigned char)c[i] >= 0x80)
            c[i] = '?';
    j = c ? json_string(c) : NULL;
    free(c);
    return j;
}

int ogk_seen_before(json_t **set, const char *prefix, const char *s)
{
    char *key = malloc(strlen(prefix) + strlen(s) + 1);
    if (!key || (!*set && !(*set = json_object()))) {
        free(key);
        return -1;
    }
    strcpy(key, prefix);
    strcat(key, s);
    int seen = json_object_get(*set, key) != NULL;
    if (!seen && json_object_set_new(*set, key, json_true()))
        seen = -1;
    free(key);
    return seen;
}

double ogk_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void ogk_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, long ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L)
        ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(cv, mu, &ts);
}

void ogk_check_list(const char *opt, const char *val)
{
    size_t n = strlen(val);
    if (!n || val[0] == ',' || val[n - 1] == ',' || strstr(val, ",,"))
        ogk_die(OGK_EXIT_USAGE, "%s: '%s' has an empty item (values separated by single commas)", opt, val);
}

long ogk_parse_long(const char *opt, const char *val, long min, long max)
{
    if (!val || !*val)
        ogk_die(OGK_EXIT_USAGE, "option %s needs a value", opt);
    char *end;
    errno = 0;
    long v = strtol(val, &end, 10);
    if (errno || *end || v < min || v > max)
        ogk_die(OGK_EXIT_USAGE, "option %s: '%s' is not an integer in [%ld, %ld]", opt, val, min, max);
    return v;
}

double ogk_parse_double(const char *opt, const char *val)
{
    if (!val || !*val)
        ogk_die(OGK_EXIT_USAGE, "option %s needs a value", opt);
    char *end;
    errno = 0;
    double v = strtod(val, &end);
    /* decimal only: strtod also reads hex floats ("0x10"), which the integer options refuse */
    if (errno || *end || !isfinite(v) || strpbrk(val, "xX"))
        ogk_die(OGK_EXIT_USAGE, "option %s: '%s' is not a number", opt, val);
    return v;
}

uint64_t ogk_peak_rss(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (uint64_t)ru.ru_maxrss * 1024u;
}

int ogk_ncpu(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (int)n;
}
