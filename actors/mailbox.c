/* act_mailbox: see mailbox.h for the protocol and its ordering guarantees.
 *
 * Shared mutable state:
 *   tail        producers (cds_wfcq_enqueue xchg), consumer (dequeue of the last node cmpxchg's it back)
 *   head        consumer only (single-consumer wfcq: no dequeue lock)
 *   sleeping    futex word; consumer stores 1 (about to sleep) / 0 (changed its mind); a producer that
 *               made the queue non-empty exchanges it to 0 and wakes
 *   counters    atomics; posted/was_empty/wakeups by producers, taken/sleeps by the consumer */
#if !defined(MEMRA_TSAN) && !defined(MEMRA_ASAN)
#define _LGPL_SOURCE /* inline liburcu fast paths; sanitizer builds call the library (see sync.h) */
#endif
#include "actors/mailbox.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <urcu/wfcqueue.h>

#include "actors/sync.h"

#define ACT_SPIN_NS_MAX 1000000

struct act_mailbox {
    struct __cds_wfcq_head head;             /* consumer side (no lock: single consumer) */
    _Atomic uint64_t taken;                  /* consumer writes */
    _Atomic uint64_t sleeps;                 /* consumer writes */
    int64_t spin_ns;                         /* consumer spin budget before sleeping (0 = none) */
    _Alignas(64) struct cds_wfcq_tail tail;  /* producer side */
    _Alignas(64) _Atomic uint64_t posted;    /* producers */
    _Atomic uint64_t was_empty;              /* producers */
    _Atomic uint64_t wakeups;                /* producers */
    _Alignas(64) _Atomic uint32_t sleeping;  /* futex word: 1 = consumer asleep or committed to sleep */
    _Alignas(64) act_freelist *fl;           /* owned */
    char name[48];
};

act_mailbox *act_mailbox_create(const char *name, const act_mailbox_opts *opts, dev_err *err)
{
    act_mailbox_opts o = { 0 };
    if (opts)
        o = *opts;
    if (o.spin_ns > ACT_SPIN_NS_MAX)
        return dev_err_set(err, MEMRA_E_INVAL, "mailbox %s: spin_ns=%d: allowed 0 (default %d), < 0 (never spin) or "
                           "up to %d", name ? name : "?", (int)o.spin_ns, ACT_SPIN_NS_DEFAULT, ACT_SPIN_NS_MAX),
               NULL;
    act_mailbox *mb = aligned_alloc(64, (sizeof *mb + 63) / 64 * 64);
    if (!mb)
        return dev_err_set(err, MEMRA_E_NOMEM, "mailbox %s: out of memory", name ? name : "?"), NULL;
    memset(mb, 0, sizeof *mb);
    snprintf(mb->name, sizeof mb->name, "%s", name ? name : "");
    __cds_wfcq_init(&mb->head, &mb->tail);
    mb->spin_ns = o.spin_ns == 0 ? ACT_SPIN_NS_DEFAULT : (o.spin_ns < 0 ? 0 : o.spin_ns);
    mb->fl = act_freelist_create(mb->name, o.chunk_msgs, o.max_msgs, o.prealloc, err);
    if (!mb->fl) {
        dev_err_wrap(err, "mailbox %s", mb->name);
        free(mb);
        return NULL;
    }
    return mb;
}

void act_mailbox_destroy(act_mailbox *mb)
{
    if (!mb)
        return;
    act_msg *m;
    while ((m = act_mailbox_try_take(mb)))
        act_msg_free(m);
    act_freelist_destroy(mb->fl);
    free(mb);
}

act_msg *act_mailbox_msg_alloc(act_mailbox *mb, int wait, dev_err *err)
{
    return act_freelist_take(mb->fl, wait, err);
}

int act_mailbox_post(act_mailbox *mb, act_msg *m)
{
    cds_wfcq_node_init(&m->qnode);
    ACT_TSAN_RELEASE(m); /* orders the producer's writes to m before the consumer's take (see mailbox.h) */
    bool was_nonempty = cds_wfcq_enqueue(&mb->head, &mb->tail, &m->qnode); /* full barrier before and after */
    atomic_fetch_add_explicit(&mb->posted, 1, memory_order_relaxed);
    if (was_nonempty)
        return 0; /* the consumer has work queued ahead of us: it cannot be asleep, no wake-up needed */
    atomic_fetch_add_explicit(&mb->was_empty, 1, memory_order_relaxed);
    /* Dekker pair with act_mailbox_take: our enqueue (seq_cst) then our load of sleeping, against its
     * store of sleeping then its re-check of the queue. */
    act_full_fence();
    if (atomic_load(&mb->sleeping) == 1 && atomic_exchange(&mb->sleeping, 0) == 1) {
        atomic_fetch_add_explicit(&mb->wakeups, 1, memory_order_relaxed);
        act_futex_wake(&mb->sleeping, 1);
        return 1;
    }
    return 0;
}

act_msg *act_mailbox_try_take(act_mailbox *mb)
{
    unsigned tries = 0;
    for (;;) {
        struct cds_wfcq_node *n = __cds_wfcq_dequeue_nonblocking(&mb->head, &mb->tail);
        if (!n)
            return NULL;
        if (n == CDS_WFCQ_WOULDBLOCK) {
            /* A producer swapped the tail but has not linked its node yet (two stores apart); it will, so
             * wait for it without the library's 10 ms poll: spin, then yield the CPU to it. */
            if (++tries < 64)
                act_cpu_relax();
            else
                sched_yield();
            continue;
        }
        act_msg *m = caa_container_of(n, act_msg, qnode);
        ACT_TSAN_ACQUIRE(m); /* pairs with the release in act_mailbox_post */
        atomic_store_explicit(&mb->taken, atomic_load_explicit(&mb->taken, memory_order_relaxed) + 1,
                              memory_order_relaxed);
        return m;
    }
}

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Bounded spin: 1 as soon as the queue is non-empty, 0 once spin_ns has passed (clock read every 16
 * pauses: ~25 ns per read against ~0.3-1 us of pauses). */
static int spin_for_message(act_mailbox *mb)
{
    int64_t end = now_ns() + mb->spin_ns;
    for (;;) {
        for (int i = 0; i < 16; i++) {
            if (!cds_wfcq_empty(&mb->head, &mb->tail))
                return 1;
            act_cpu_relax();
        }
        if (now_ns() >= end)
            return 0;
    }
}

act_msg *act_mailbox_take(act_mailbox *mb)
{
    for (;;) {
        act_msg *m = act_mailbox_try_take(mb);
        if (m)
            return m;
        if (mb->spin_ns > 0 && spin_for_message(mb))
            continue;
        atomic_store(&mb->sleeping, 1);
        act_full_fence(); /* store sleeping before re-reading the queue */
        if (!cds_wfcq_empty(&mb->head, &mb->tail)) {
            atomic_store(&mb->sleeping, 0);
            continue;
        }
        atomic_store_explicit(&mb->sleeps, atomic_load_explicit(&mb->sleeps, memory_order_relaxed) + 1,
                              memory_order_relaxed);
        while (atomic_load(&mb->sleeping) == 1)
            act_futex_wait(&mb->sleeping, 1); /* woken by the producer that exchanged sleeping to 0 */
    }
}

int act_mailbox_consumer_sleeping(const act_mailbox *mb)
{
    return atomic_load(&((act_mailbox *)mb)->sleeping) == 1;
}

int act_mailbox_empty(const act_mailbox *mb)
{
    act_mailbox *m = (act_mailbox *)mb;
    return cds_wfcq_empty(&m->head, &m->tail);
}

void act_mailbox_stats_get(const act_mailbox *mb, act_mailbox_stats *out)
{
    act_mailbox *m = (act_mailbox *)mb; /* atomics are only read */
    out->posted = atomic_load_explicit(&m->posted, memory_order_relaxed);
    out->taken = atomic_load_explicit(&m->taken, memory_order_relaxed);
    out->wakeups = atomic_load_explicit(&m->wakeups, memory_order_relaxed);
    out->sleeps = atomic_load_explicit(&m->sleeps, memory_order_relaxed);
    out->was_empty = atomic_load_explicit(&m->was_empty, memory_order_relaxed);
    act_freelist_stats_get(m->fl, &out->free);
}

const char *act_mailbox_name(const act_mailbox *mb)
{
    return mb->name;
}

act_freelist *act_mailbox_freelist(act_mailbox *mb)
{
    return mb->fl;
}
