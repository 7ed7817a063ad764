/* act_freelist: see freelist.h for the structure and its ABA argument.
 *
 * Shared mutable state:
 *   stack       free messages; push: any thread (lock-free), pop: any thread under stack.lock
 *   chunks      allocated chunks; push: growers (lock-free), walked only by destroy
 *   msgs        messages allocated so far; growers reserve with fetch_add (cap check), stats readers
 *   waiters/gen takers sleeping at the cap (futex on gen), givers wake them
 *   counters    relaxed atomics, any thread */
#if !defined(MEMRA_TSAN) && !defined(MEMRA_ASAN)
#define _LGPL_SOURCE /* inline liburcu fast paths; sanitizer builds call the library (see sync.h) */
#endif
#include "actors/freelist.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <urcu/lfstack.h>

#include "actors/sync.h"

#define ACT_FREELIST_CHUNK_DEFAULT 64
#define ACT_CHUNK_HEADER 64

typedef struct act_chunk {
    struct cds_lfs_node link; /* in act_freelist.chunks */
    uint32_t n;               /* messages in this chunk */
} act_chunk;
_Static_assert(sizeof(act_chunk) <= ACT_CHUNK_HEADER, "chunk header must fit its cache line");

struct act_freelist {
    struct cds_lfs_stack stack;          /* free messages (pop mutex inside) */
    _Alignas(64) struct __cds_lfs_stack chunks; /* every chunk, for destroy */
    uint32_t chunk_msgs;                 /* messages per chunk */
    uint64_t max_msgs;                   /* cap (0 = none) */
    _Atomic uint64_t msgs;               /* messages allocated (reserved before the malloc) */
    _Atomic uint64_t n_chunks;           /* chunks allocated */
    _Alignas(64) _Atomic uint64_t takes; /* successful takes */
    _Alignas(64) _Atomic uint64_t gives; /* gives */
    _Alignas(64) _Atomic uint32_t waiters; /* takers sleeping (or about to) at the cap */
    _Atomic uint32_t gen;                /* futex word: bumped by a give that saw waiters */
    _Atomic uint64_t full_waits;         /* futex waits by takers */
    _Atomic uint64_t full_wakes;         /* futex wakes by givers */
    char name[48];                       /* for messages */
};

static act_msg *chunk_msg(act_chunk *c, uint32_t i)
{
    return (act_msg *)(void *)((unsigned char *)c + ACT_CHUNK_HEADER + (size_t)i * sizeof(act_msg));
}

/* Push m on the free stack. Ordering: the owner's writes to m happen-before the next pop of m (cds_lfs_push
 * is a full barrier; TSan is told by the release annotation). */
static void stack_push(act_freelist *fl, act_msg *m)
{
    cds_lfs_node_init(&m->fnode);
    ACT_TSAN_RELEASE(m);
    cds_lfs_push(&fl->stack, &m->fnode);
}

static act_msg *stack_pop(act_freelist *fl)
{
    struct cds_lfs_node *n = cds_lfs_pop_blocking(&fl->stack); /* serialized pops: ABA-safe (freelist.h) */
    if (!n)
        return NULL;
    act_msg *m = caa_container_of(n, act_msg, fnode);
    ACT_TSAN_ACQUIRE(m);
    return m;
}

/* Allocate one chunk if the cap allows. Returns 1 and one message in *out (the rest pushed), 0 at the
 * cap, or MEMRA_E_NOMEM. */
static int grow(act_freelist *fl, act_msg **out, dev_err *err)
{
    uint32_t n = fl->chunk_msgs;
    uint64_t before = atomic_fetch_add(&fl->msgs, n);
    if (fl->max_msgs && before + n > fl->max_msgs) {
        atomic_fetch_sub(&fl->msgs, n);
        return 0;
    }
    act_chunk *c = aligned_alloc(64, ACT_CHUNK_HEADER + (size_t)n * sizeof(act_msg));
    if (!c) {
        atomic_fetch_sub(&fl->msgs, n);
        return dev_err_set(err, MEMRA_E_NOMEM, "free list %s: cannot allocate a chunk of %u messages (%zu bytes)",
                           fl->name, n, (size_t)n * sizeof(act_msg));
    }
    memset(c, 0, ACT_CHUNK_HEADER + (size_t)n * sizeof(act_msg));
    c->n = n;
    cds_lfs_node_init(&c->link);
    cds_lfs_push(&fl->chunks, &c->link);
    atomic_fetch_add(&fl->n_chunks, 1);
    for (uint32_t i = 1; i < n; i++) {
        act_msg *m = chunk_msg(c, i);
        m->home = fl;
        stack_push(fl, m);
    }
    *out = chunk_msg(c, 0);
    return 1;
}

act_freelist *act_freelist_create(const char *name, uint32_t chunk_msgs, uint64_t max_msgs, uint64_t prealloc,
                                  dev_err *err)
{
    if (chunk_msgs == 0)
        chunk_msgs = ACT_FREELIST_CHUNK_DEFAULT;
    if (chunk_msgs > (1u << 20))
        return dev_err_set(err, MEMRA_E_INVAL, "free list %s: chunk_msgs=%u: allowed 1..%u (0 = %d)",
                           name ? name : "?", chunk_msgs, 1u << 20, ACT_FREELIST_CHUNK_DEFAULT),
               NULL;
    if (max_msgs && max_msgs < chunk_msgs)
        max_msgs = chunk_msgs;
    if (max_msgs && max_msgs % chunk_msgs)
        max_msgs += chunk_msgs - max_msgs % chunk_msgs;
    if (max_msgs && prealloc > max_msgs)
        return dev_err_set(err, MEMRA_E_INVAL,
                           "free list %s: prealloc=%llu exceeds max_msgs=%llu (prealloc must be <= the cap)",
                           name ? name : "?", (unsigned long long)prealloc, (unsigned long long)max_msgs),
               NULL;
    act_freelist *fl = aligned_alloc(64, (sizeof *fl + 63) / 64 * 64);
    if (!fl)
        return dev_err_set(err, MEMRA_E_NOMEM, "free list %s: out of memory", name ? name : "?"), NULL;
    memset(fl, 0, sizeof *fl);
    cds_lfs_init(&fl->stack);
    __cds_lfs_init(&fl->chunks);
    fl->chunk_msgs = chunk_msgs;
    fl->max_msgs = max_msgs;
    snprintf(fl->name, sizeof fl->name, "%s", name ? name : "");
    while (atomic_load(&fl->msgs) < prealloc) {
        act_msg *m = NULL;
        int rc = grow(fl, &m, err);
        if (rc <= 0)
            goto fail;
        m->home = fl;
        stack_push(fl, m);
    }
    return fl;
fail:
    act_freelist_destroy(fl);
    return NULL;
}

void act_freelist_destroy(act_freelist *fl)
{
    if (!fl)
        return;
    struct cds_lfs_head *h = __cds_lfs_pop_all(&fl->chunks);
    struct cds_lfs_node *n, *next;
    if (h) {
        cds_lfs_for_each_safe(h, n, next) free(caa_container_of(n, act_chunk, link));
    }
    cds_lfs_destroy(&fl->stack);
    free(fl);
}

act_msg *act_freelist_take(act_freelist *fl, int wait, dev_err *err)
{
    for (;;) {
        act_msg *m = stack_pop(fl);
        if (!m) {
            int rc = grow(fl, &m, err);
            if (rc < 0)
                return NULL;
        }
        if (!m && !wait) {
            dev_err_set(err, MEMRA_E_FULL,
                        "free list %s: all %llu messages are in use (max_msgs cap); give some back or raise the cap",
                        fl->name, (unsigned long long)fl->max_msgs);
            return NULL;
        }
        if (!m) {
            /* Sleep protocol (no lost wake-up): snapshot gen, announce ourselves in waiters, re-check the
             * stack, then sleep only while gen is unchanged. A give pushes first, then reads waiters; with
             * both sides seq_cst either our re-check sees its message or it sees us and bumps gen. */
            uint32_t g = atomic_load(&fl->gen);
            atomic_fetch_add(&fl->waiters, 1);
            m = stack_pop(fl);
            if (!m) {
                atomic_fetch_add_explicit(&fl->full_waits, 1, memory_order_relaxed);
                act_futex_wait(&fl->gen, g);
            }
            atomic_fetch_sub(&fl->waiters, 1);
            if (!m)
                continue;
        }
        m->home = fl;
        m->reply = NULL;
        m->kind = 0;
        m->flags = 0;
        m->tag = 0;
        m->reserved[0] = m->reserved[1] = 0;
        atomic_fetch_add_explicit(&fl->takes, 1, memory_order_relaxed);
        return m;
    }
}

void act_freelist_give_n(act_freelist *fl, act_msg *const *ms, size_t n)
{
    if (n == 0)
        return;
    for (size_t i = 0; i < n; i++)
        stack_push(fl, ms[i]);
    atomic_fetch_add_explicit(&fl->gives, n, memory_order_relaxed);
    /* pairs with the taker's waiters increment + re-check (see act_freelist_take) */
    act_full_fence();
    if (atomic_load(&fl->waiters) > 0) {
        atomic_fetch_add(&fl->gen, 1);
        atomic_fetch_add_explicit(&fl->full_wakes, 1, memory_order_relaxed);
        act_futex_wake(&fl->gen, n > INT32_MAX ? INT32_MAX : (int)n);
    }
}

void act_msg_free(act_msg *m)
{
    if (m && m->home)
        act_freelist_give_n(m->home, &m, 1);
}

void act_freelist_stats_get(const act_freelist *fl, act_freelist_stats *out)
{
    act_freelist *f = (act_freelist *)fl; /* atomics are read-only here */
    out->chunks = atomic_load_explicit(&f->n_chunks, memory_order_relaxed);
    out->msgs = (uint64_t)out->chunks * f->chunk_msgs;
    out->takes = atomic_load_explicit(&f->takes, memory_order_relaxed);
    out->gives = atomic_load_explicit(&f->gives, memory_order_relaxed);
    out->full_waits = atomic_load_explicit(&f->full_waits, memory_order_relaxed);
    out->full_wakes = atomic_load_explicit(&f->full_wakes, memory_order_relaxed);
}

const char *act_freelist_name(const act_freelist *fl)
{
    return fl->name;
}
