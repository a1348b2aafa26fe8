/* The thread pool: the caller is worker 0, the others spin for a short while after each job (decode
 * launches come back to back, and a futex wake-up costs more than a small GEMV) and then sleep.
 *
 * Work split: [0, n) is cut into one contiguous "home" share per worker, handed out in grain-sized
 * ranges from a per-worker counter. A worker empties its own share first, then takes ranges from the
 * others'. So when every thread runs, each streams one contiguous region and, launch after launch,
 * finds its share of a small tensor still in its own L2; when the machine is shared and a thread is
 * descheduled, the others take over its share instead of waiting for it.
 * Each counter holds (job generation << 32 | next index), so a worker that wakes late can never
 * claim a range of a newer job with an older job's parameters; the caller waits for ranges done,
 * not for workers to check in. */
#include "kern_int.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#define SPIN_ITERS 20000 /* pause instructions before sleeping: some tens of microseconds */
/* Measured on the shared 2-vCPU machine (npu-gemm --model-pass --probe-mb, 2 threads): pure pause
 * spinning reached 46-56 % of the DRAM read probe, spinning with a yield every 64 pauses 75-98 %. */
#define YIELD_EVERY 64

typedef struct {
    _Alignas(64) atomic_uint_fast64_t ctr; /* gen << 32 | next index of this share */
    atomic_size_t hi;                      /* end of this share */
} share;

struct kern_pool {
    int n, started;
    pthread_t *th;
    share *sh;
    pthread_mutex_t mu;
    pthread_cond_t cv_start, cv_done;
    _Alignas(64) atomic_uint gen;
    atomic_size_t done, items, grain;
    atomic_int sleepers, stop;
    _Atomic(kern_range_fn) fn;
    _Atomic(void *) arg;
    struct pf_slot {
        _Atomic(const char *) at[2];
        atomic_size_t len[2];
    } *pf;                       /* per worker: what it prefetches after its ranges (kern_pool_for_prefetch) */
    const void *next_a, *next_b; /* kern_pool_set_next, for the caller's next launch */
};

typedef struct {
    kern_pool *p;
    int id;
} worker_arg;

/* one step of a spin-wait; every 64th step yields, so that on an oversubscribed machine a waiting
 * thread does not keep the thread it waits for off the CPU they share */
static inline void cpu_relax(int i)
{
    if (i % YIELD_EVERY == YIELD_EVERY - 1) {
        sched_yield();
        return;
    }
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* a software prefetch of [at, at + len) into L2, len at most KERN_PREFETCH_MAX: addresses only, never
 * dereferenced (a prefetch does not fault) */
static void prefetch(const char *at, size_t len)
{
    uintptr_t a = (uintptr_t)at; /* integer arithmetic: the region need not be an object (nor fit the space) */
    if (!a)
        return;
    len = len < KERN_PREFETCH_MAX ? len : KERN_PREFETCH_MAX;
    for (size_t o = 0; o < len; o += 64)
        __builtin_prefetch((const void *)(a + o), 0, 2);
}

/* claim one range of job g from share s: 1 and [*b, *e), or 0 when the share is empty or stale */
static int claim(kern_pool *p, int s, unsigned g, size_t *b, size_t *e)
{
    share *sh = &p->sh[s];
    uint64_t v = atomic_load(&sh->ctr);
    for (;;) {
        if ((unsigned)(v >> 32) != g)
            return 0;
        size_t hi = atomic_load_explicit(&sh->hi, memory_order_relaxed);
        size_t grain = atomic_load_explicit(&p->grain, memory_order_relaxed);
        size_t next = v & 0xFFFFFFFFu;
        if (next >= hi)
            return 0;
        size_t end = next + grain < hi ? next + grain : hi;
        if (atomic_compare_exchange_weak(&sh->ctr, &v, ((uint64_t)g << 32) | end)) {
            *b = next, *e = end;
            return 1;
        }
    }
}

static void run_ranges(kern_pool *p, int id, unsigned g)
{
    kern_range_fn fn = atomic_load(&p->fn);
    void *arg = atomic_load(&p->arg);
    size_t items = atomic_load(&p->items);
    int any = 0;
    for (int k = 0; k < p->n; k++) {
        int s = (id + k) % p->n; /* own share first, then the others' */
        size_t b, e;
        while (claim(p, s, g, &b, &e)) {
            any = 1;
            fn(arg, b, e, id);
            if (atomic_fetch_add(&p->done, e - b) + (e - b) == items) {
                pthread_mutex_lock(&p->mu);
                pthread_cond_broadcast(&p->cv_done);
                pthread_mutex_unlock(&p->mu);
            }
        }
    }
    if (any) /* after its last range is counted done (a newer job's regions when this worker woke late: a hint) */
        for (int r = 0; r < 2; r++)
            prefetch(atomic_load_explicit(&p->pf[id].at[r], memory_order_relaxed),
                     atomic_load_explicit(&p->pf[id].len[r], memory_order_relaxed));
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
            cpu_relax(i), i++;
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
    if (threads > KERN_MAX_THREADS)
        threads = KERN_MAX_THREADS;
    kern_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->n = threads;
    p->th = calloc((size_t)threads, sizeof *p->th);
    p->sh = aligned_alloc(64, ((size_t)threads * sizeof *p->sh + 63) & ~(size_t)63);
    p->pf = calloc((size_t)threads, sizeof *p->pf);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_start, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    if (!p->th || !p->sh || !p->pf)
        goto fail;
    for (int i = 0; i < threads; i++) {
        atomic_init(&p->sh[i].ctr, 0);
        atomic_init(&p->sh[i].hi, 0);
    }
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
    free(p->sh);
    free(p->pf);
    free(p);
}

int kern_pool_threads(const kern_pool *p) { return p ? p->n : 1; }

void kern_pool_for(kern_pool *p, size_t n, size_t grain, kern_range_fn fn, void *arg)
{
    int nt = p ? p->n : 1;
    if (grain == 0)
        grain = (n + (size_t)nt * 4 - 1) / ((size_t)nt * 4);
    kern_pool_for_aligned(p, n, grain, grain, fn, arg);
}

void kern_pool_set_next(kern_pool *p, const void *a, const void *b)
{
    if (p)
        p->next_a = a, p->next_b = b;
}

void kern_pool_take_next(kern_pool *p, const void **a, const void **b)
{
    *a = p ? p->next_a : NULL, *b = p ? p->next_b : NULL;
    if (p)
        p->next_a = p->next_b = NULL;
}

size_t kern_pool_share_start(size_t n, size_t align, int w, int nt)
{
    return (n + align - 1) / align * (size_t)w / (size_t)nt * align;
}

void kern_pool_for_aligned(kern_pool *p, size_t n, size_t grain, size_t align, kern_range_fn fn, void *arg)
{
    kern_pool_for_prefetch(p, n, grain, align, fn, arg, NULL);
}

void kern_pool_for_prefetch(kern_pool *p, size_t n, size_t grain, size_t align, kern_range_fn fn, void *arg,
                            const kern_prefetch *after)
{
    if (n == 0)
        return;
    int nt = p ? p->n : 1;
    if (align == 0)
        align = 1;
    grain = grain < align ? align : (grain + align - 1) / align * align;
    if (!p || nt == 1 || grain >= n || n >= 0xFFFFFFFFu) {
        for (size_t b = 0; b < n; b += grain)
            fn(arg, b, b + grain < n ? b + grain : n, 0);
        if (after)
            for (int r = 0; r < 2; r++)
                prefetch(after[0].at[r], after[0].len[r]);
        return;
    }
    unsigned g = atomic_load(&p->gen) + 1;
    /* shares: contiguous, whole units of align, as even as possible (a share's last range may be shorter
     * than grain: 56 items in grains of 8 are two shares of 28, not 24 and 32) */
    for (int w = 0; w < nt; w++) {
        size_t lo = kern_pool_share_start(n, align, w, nt), hi = kern_pool_share_start(n, align, w + 1, nt);
        /* first: invalidates every claim on the previous job */
        atomic_store(&p->sh[w].ctr, ((uint64_t)g << 32) | (lo < n ? lo : n));
        atomic_store(&p->sh[w].hi, hi < n ? hi : n);
    }
    atomic_store(&p->fn, fn);
    atomic_store(&p->arg, arg);
    for (int w = 0; w < nt; w++)
        for (int r = 0; r < 2; r++) {
            atomic_store_explicit(&p->pf[w].at[r], after ? (const char *)after[w].at[r] : NULL, memory_order_relaxed);
            atomic_store_explicit(&p->pf[w].len[r], after ? after[w].len[r] : 0, memory_order_relaxed);
        }
    atomic_store(&p->items, n);
    atomic_store(&p->grain, grain);
    atomic_store(&p->done, 0);
    atomic_store(&p->gen, g);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv_start);
        pthread_mutex_unlock(&p->mu);
    }
    run_ranges(p, 0, g);
    for (int i = 0; i < SPIN_ITERS && atomic_load(&p->done) < n; i++)
        cpu_relax(i);
    if (atomic_load(&p->done) < n) {
        pthread_mutex_lock(&p->mu);
        while (atomic_load(&p->done) < n)
            pthread_cond_wait(&p->cv_done, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
}
