/* The one progress line: stderr only, only on a TTY, at most ~10 updates a second. */
#include "util.h"

#include <unistd.h>

static double last_t;
static int shown;

void ogk_progress(const char *label, uint64_t done, uint64_t total)
{
    static int tty = -1;
    if (tty < 0)
        tty = isatty(STDERR_FILENO);
    if (!tty)
        return;
    double t = ogk_now();
    if (shown && done < total && t - last_t < 0.1)
        return;
    last_t = t;
    shown = 1;
    if (total)
        fprintf(stderr, "\r%s: %s %llu/%llu (%3.0f%%)\033[K", ogk_prog(), label, (unsigned long long)done,
                (unsigned long long)total, 100.0 * (double)done / (double)total);
    else
        fprintf(stderr, "\r%s: %s %llu\033[K", ogk_prog(), label, (unsigned long long)done);
    fflush(stderr);
}

void ogk_progress_done(void)
{
    if (shown) {
        fprintf(stderr, "\r\033[K");
        fflush(stderr);
        shown = 0;
    }
}
