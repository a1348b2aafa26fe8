/* lib/util — the one way to do the small shared things: program name and named errors with the
 * shared exit codes, mmap of input files, atomic output files, the progress line, CRC32C, fp16/bf16
 * conversion, JSON to stdout, time. Owns no model or format knowledge; must not include other lib/ headers. */
#ifndef OGK_UTIL_H
#define OGK_UTIL_H

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include <jansson.h>

#define OGAKIT_VERSION "0.1.0"

/* Exit codes shared by every program (the repository's ARCHITECTURE.md). */
enum {
    OGK_EXIT_OK = 0,        /* success */
    OGK_EXIT_CHECK = 1,     /* a check failed */
    OGK_EXIT_USAGE = 2,     /* bad command line */
    OGK_EXIT_INPUT = 3,     /* input refused / malformed, or peer unreachable */
    OGK_EXIT_INIT = 4,      /* init failed (model / device) */
    OGK_EXIT_UNHEALTHY = 5, /* service not healthy */
};

/* ---- program name and diagnostics ("prog: message" on stderr) ---- */
void ogk_prog_set(const char *argv0);
const char *ogk_prog(void);
/* Standard output as a checked stream: SIGPIPE ignored (a reader that closes early is a named error, not a
 * silent death by signal), and at exit a failed write or flush of stdout is reported ("standard output:
 * write failed: ...") and the process exits with `code` (the program's documented write-failure status).
 * A closed standard descriptor (">&-", "2>&-") stays unusable instead of being taken by the next file
 * opened, and SIGXFSZ is ignored (a file past ulimit -f is a named write failure, "File too large").
 * Programs call it at the start of main. */
void ogk_stdout_checked(int code);
void ogk_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void ogk_verr(const char *fmt, va_list ap);
_Noreturn void ogk_die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Error buffer for library calls that can fail: functions fill it and return -1. */
typedef struct {
    char msg[512];
} ogk_error;
int ogk_fail(ogk_error *e, const char *fmt, ...) __attribute__((format(printf, 2, 3))); /* returns -1 */

/* ---- files ---- */
typedef struct {
    const uint8_t *data; /* NULL when size == 0 */
    size_t size;
    int copied; /* 1: data is an ogk_big_alloc copy (ogk_map_load), else an mmap */
} ogk_map;
/* Read-only mmap of a whole file. Returns 0, or -1 with e filled ("PATH: reason"). PATH "-" is standard
 * input: a regular file is mapped as any other, a pipe read to its end into an ogk_big_alloc copy. Out of
 * memory (the copy, or the mapping under ulimit -v) leaves errno ENOMEM. A file truncated by another process
 * while mapped (SIGBUS on its next read) ends the run with "PATH: the file shrank while being read", exit 3. */
int ogk_map_open(ogk_map *m, const char *path, ogk_error *e);
/* The same contract, but the file is read into an ogk_big_alloc buffer (2 MiB transparent huge
 * pages where the kernel grants them) instead of being mapped: a streaming reader of the data then
 * takes one TLB miss per 2 MiB instead of one per 4 KiB. */
int ogk_map_load(ogk_map *m, const char *path, ogk_error *e);
/* ogk_map_load where it pays (ogk_map_load_wanted), else ogk_map_open: what the model runners do by
 * default. In a VM a page walk after a TLB miss is two-dimensional, and decode over 4 KiB file pages ran
 * ~30 % slower than over a 2 MiB-page copy of them (bench/results/2026-12-02b-zen3-avx2.md). */
int ogk_map_auto(ogk_map *m, const char *path, ogk_error *e);
/* ogk_map_open (how OGK_MAP_OPEN), ogk_map_load (OGK_MAP_LOAD) or ogk_map_auto (OGK_MAP_AUTO) of a format
 * whose files begin with mg->bytes (mg->len of them; mg->what names the format, "a Q4NX container"): a
 * standard-input pipe that does not is refused ("standard input: not a Q4NX container (bad magic ...)")
 * once its first mg->len bytes are read, instead of being read to its end first (cat /dev/zero | prog -
 * would fill memory). A regular file's magic stays the caller's to check, as with the others. */
typedef struct {
    const void *bytes;
    size_t len;
    const char *what;
} ogk_magic;
enum { OGK_MAP_OPEN = 0, OGK_MAP_LOAD = 1, OGK_MAP_AUTO = 2 };
int ogk_map_magic(ogk_map *m, const char *path, int how, const ogk_magic *mg, ogk_error *e);
/* 1 when a file of size bytes is worth copying into huge pages: at least 2 MiB, the kernel's
 * transparent huge pages enabled (always or madvise), and at most half of MemAvailable (the page
 * cache holds the file as well, until it is reclaimed). */
int ogk_map_load_wanted(uint64_t size);
void ogk_map_close(ogk_map *m);
/* A large scratch buffer (free() it): page-aligned and, from 2 MiB up, 2 MiB aligned and asked to be
 * backed by transparent huge pages, so streaming tools do not spend their time in page faults. NULL on
 * failure. */
void *ogk_big_alloc(size_t n);
/* calloc, with the 2 MiB pages inside the block advised to be transparent huge pages (a large calloc is a
 * fresh mapping, zero and untouched: its pages come huge as they are first touched, so the resident size
 * grows in 2 MiB steps, never beyond the block). free() releases it. */
void *ogk_big_calloc(size_t n, size_t size);
/* Open an input file for reading: symlinks are followed, and anything that is not a regular file
 * (FIFO, socket, device, directory) is refused by name without blocking. fd, or -1 with e filled.
 * ogk_map_open, ogk_map_load and ogk_read_file open through it. */
struct stat;
int ogk_open_regular(const char *path, struct stat *st, ogk_error *e);
const char *ogk_file_kind(mode_t mode); /* "a FIFO", "a directory", ... */
/* The files a run reads: ogk_open_regular notes each; a program notes its standard input (or another fd it
 * reads) itself. ogk_out_open and ogk_out_commit refuse to replace one of them (exit 2, "PATH: is an input
 * of this run"): -o naming the program's own input would lose it. An input that is also standard output (a
 * shell's ">> INPUT") is refused the same way when it is noted, before anything is written. */
void ogk_input_note(int fd, const char *what);
/* Whole small file (a regular file, see ogk_open_regular) into a NUL-terminated heap buffer. */
char *ogk_read_file(const char *path, size_t *len, ogk_error *e);
/* Write all bytes or fail (handles short writes and EINTR). 0 or -1 (errno set). */
int ogk_write_all(int fd, const void *buf, size_t n);
/* Read exactly n bytes; returns bytes read (< n only at EOF) or -1 on error. */
ssize_t ogk_read_full(int fd, void *buf, size_t n);

/* Atomic output: path == NULL or "-" means stdout (refused when stdout is a terminal). A file is
 * written to an unnamed file in PATH's directory (O_TMPFILE), named "PATH.tmp.PID" at commit
 * (linkat) and renamed over PATH, so even SIGKILL leaves nothing behind. Where O_TMPFILE is not
 * supported, it is written to "PATH.tmp.PID" from the start; abort, a fatal signal or exit without
 * commit remove it. Either way, opening PATH first removes "PATH.tmp.PID" files whose PID is no
 * longer a process (what a SIGKILL left). One file output at a time. A PATH that is a device, a FIFO or
 * a socket (/dev/null, /dev/stdout) is written through as it is, never replaced; a symbolic link to a
 * file replaces the file it names (the link stays); a directory, or a link to nothing, is refused. */
typedef struct {
    int fd;
    int is_stdout; /* standard output, or a device, FIFO or socket written through (direct) */
    int direct;
    char *path;
    char *tmp;
} ogk_out;
int ogk_out_open(ogk_out *o, const char *path, ogk_error *e);
int ogk_out_commit(ogk_out *o, ogk_error *e);
void ogk_out_abort(ogk_out *o);
/* Remove the pending temp file now (exit and fatal-signal paths call this). */
void ogk_out_remove_pending(void);
/* Exit with OGK_EXIT_USAGE and a named error when stdout is a terminal (binary output). */
void ogk_refuse_tty_stdout(const char *what);

/* ---- progress line: on stderr only when stderr is a TTY; throttled; cleared by _done ----
 * "PROG: LABEL DONE/TOTAL (P%)", or "PROG: LABEL DONE" when total is 0: counts of what label names */
void ogk_progress(const char *label, uint64_t done, uint64_t total);
void ogk_progress_done(void);

/* ---- checksums ---- */
uint32_t ogk_crc32c(uint32_t crc, const void *buf, size_t n); /* crc starts at 0 */

/* ---- half precision ---- */
float ogk_f16_to_f32(uint16_t h);
uint16_t ogk_f32_to_f16(float f); /* round to nearest even */
/* the same, but beyond the half range (and infinities) clamped to ±65504 instead of made infinite:
 * the fp16 KV cache's rule, so that a large key cannot turn a score into inf - inf. NaN stays NaN. */
uint16_t ogk_f32_to_f16_sat(float f);
float ogk_bf16_to_f32(uint16_t h);
uint16_t ogk_f32_to_bf16(float f); /* round to nearest even */

/* ---- JSON: the one writer. Pretty (2-space indent), keys in insertion order, newline after.
 * Returns 0, or -1 when the write failed. Steals nothing: the caller still owns j. ---- */
int ogk_json_print(FILE *f, const json_t *j);
/* A JSON string of text that may not be UTF-8 (a path from the command line or a directory): as it is when
 * it is, else with every byte from 0x80 up as '?' (a report names the file rather than dropping the key:
 * jansson refuses such text, and json_pack then builds nothing). Never NULL but out of memory. */
json_t *ogk_json_str(const char *s);
/* A set of names (a JSON object made on first use, *set): 1 when prefix + s was recorded before, else 0 and
 * recorded now; -1 out of memory. Duplicate checks of roles and asset names in O(1) per name. */
int ogk_seen_before(json_t **set, const char *prefix, const char *s);

/* ---- misc ---- */
double ogk_now(void); /* monotonic seconds */
/* pthread_cond_timedwait for at most ms milliseconds (cv made with a CLOCK_MONOTONIC condattr) */
void ogk_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, long ms);
/* Parse a non-negative integer option value; dies with OGK_EXIT_USAGE naming the option. */
long ogk_parse_long(const char *opt, const char *val, long min, long max);
double ogk_parse_double(const char *opt, const char *val);
/* A comma-separated option value has no empty item ("4,", ",4", "8,,16"); dies with OGK_EXIT_USAGE. */
void ogk_check_list(const char *opt, const char *val);
/* Peak resident set size in bytes (from getrusage). */
uint64_t ogk_peak_rss(void);
/* Online CPU count (>= 1). */
int ogk_ncpu(void);

#endif
