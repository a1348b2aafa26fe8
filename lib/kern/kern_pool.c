/* The thread pool: the caller is worker 0, the others spin for a short while after each job (decode
 * launches come back to back, and a futex wake-up costs more than a small GEMV) and then sleep.
 * Ranges are claimed from one 64-bit counter holding (job generation << 32 | next index), so a worker
 * that wakes late can never claim a range of a newer job with an older job's parameters; the caller
 * waits for ranges *done*, not for workers to check in, so a descheduled worker that claimed nothing
 * costs nothing (the machines are shared). */
#include "kern.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#define SPIN_ITERS 20000 /* pause instructions before sleeping: some tens of microseconds */

struct kern_pool {
    int n, started;
    pthread_t *th;
    pthread_mutex_t mu;
    pthread_cond_t cv_start, cv_done;
    atomic_uint gen;
    atomic_uint_fast64_t ctr;
    atomic_size_t done;
    atomic_int sleepers, stop;
    size_t items, grain;
    kern_range_fn fn;
    void *arg;
};

typedef struct {
    kern_pool *p;
    int id;
} worker_arg;

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void run_ranges(kern_pool *p, int id, unsigned g)
{
    for (;;) {
        uint64_t v = atomic_load(&p->ctr), b;
        size_t items, grain;
        do {
            if ((unsigned)(v >> 32) != g)
                return;
            items = p->items, grain = p->grain; /* valid while the counter still says job g */
            b = v & 0xFFFFFFFFu;
            if (b >= items)
                return;
        } while (!atomic_compare_exchange_weak(&p->ctr, &v, v + grain));
        size_t e = b + grain < items ? b + grain : items;
        p->fn(p->arg, b, e, id);
        if (atomic_fetch_add(&p->done, e - b) + (e - b) == items) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_broadcast(&p->cv_done);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

static void *worker(void *a)
{
    worker_arg wa = *(worker_arg *)a;
    free(a);
    kern_pool *p = wa.p;
    unsigned seen = 0;
    for (;;) {
        int i = 0;
        while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop) && i < SPIN_ITERS)
            cpu_relax(), i++;
        if (atomic_load(&p->gen) == seen && !atomic_load(&p->stop)) {
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->cv_start, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop))
            return NULL;
        seen = atomic_load(&p->gen);
        run_ranges(p, wa.id, seen);
    }
}

kern_pool *kern_pool_new(int threads)
{
    if (threads <= 0)
        threads = ogk_ncpu();
    kern_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->n = threads;
    p->th = calloc((size_t)threads, sizeof *p->th);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_start, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    if (!p->th)
        goto fail;
    for (int i = 1; i < threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa)
            goto fail;
        wa->p = p, wa->id = i;
        if (pthread_create(&p->th[i], NULL, worker, wa)) {
            free(wa);
            goto fail;
        }
        p->started = i;
    }
    return p;
fail:
    kern_pool_free(p);
    return NULL;
}

void kern_pool_free(kern_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->cv_start);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i <= p->started; i++)
        pthread_join(p->th[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv_start);
    pthread_cond_destroy(&p->cv_done);
    free(p->th);
    free(p);
}

int kern_pool_threads(const kern_pool *p) { return p ? p->n : 1; }

void kern_pool_for(kern_pool *p, size_t n, size_t grain, kern_range_fn fn, void *arg)
{
    if (n == 0)
        return;
    int nt = p ? p->n : 1;
    if (grain == 0)
        grain = (n + (size_t)nt * 4 - 1) / ((size_t)nt * 4);
    if (grain == 0)
        grain = 1;
    if (!p || nt == 1 || grain >= n || n >= 0xFFFFFFFFu) {
        for (size_t b = 0; b < n; b += grain)
            fn(arg, b, b + grain < n ? b + grain : n, 0);
        return;
    }
    unsigned g = atomic_load(&p->gen) + 1;
    atomic_store(&p->ctr, (uint64_t)g << 32); /* first: invalidates claims on the previous job */
    p->fn = fn, p->arg = arg, p->items = n, p->grain = grain;
    atomic_store(&p->done, 0);
    atomic_store(&p->gen, g);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv_start);
        pthread_mutex_unlock(&p->mu);
    }
    run_ranges(p, 0, g);
    for (int i = 0; i < SPIN_ITERS && atomic_load(&p->done) < n; i++)
        cpu_relax();
    if (atomic_load(&p->done) < n) {
        pthread_mutex_lock(&p->mu);
        while (atomic_load(&p->done) < n)
            pthread_cond_wait(&p->cv_done, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
}
