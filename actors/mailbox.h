/* act_mailbox: a multi-producer, single-consumer message queue with a sleeping consumer.
 *
 * Queue: liburcu's wait-free concurrent queue (cds_wfcq). Producers enqueue wait-free from any thread; the
 * ONE consumer thread dequeues without a lock (wfcq's "single thread performs all dequeues" mode).
 * Messages are act_msg from the mailbox's own free list (act_mailbox_msg_alloc), so the steady state does
 * no malloc; a message from another mailbox's free list may be posted too (it returns to its own home).
 *
 * Wake-up (zero cost while the consumer is busy): cds_wfcq_enqueue reports whether the queue was empty
 * before. Only a producer that made the queue non-empty looks at the consumer's `sleeping` word, and only
 * if the consumer announced sleep does it issue the futex wake syscall. Sleep protocol of the consumer:
 * optional bounded spin on the queue (opts.spin_ns), then store sleeping=1, full fence, re-check the
 * queue, futex-wait while sleeping==1. The producer's enqueue is a full barrier before it reads `sleeping`; so either the
 * consumer's re-check sees the message or the producer sees sleeping=1 and wakes it (no lost wake-up).
 * No timed sleeps: the consumer blocks in the kernel until a producer wakes it.
 *
 * Ordering guarantees (as liburcu states them):
 *   - messages posted by one thread are taken in post order (per-producer FIFO);
 *   - messages from different producers interleave arbitrarily;
 *   - everything a producer wrote into a message (and before posting it) happens-before the consumer's
 *     take of that message returns (enqueue is a full barrier; TSan is told via annotations).
 *
 * Shared mutable state: queue tail (producers), queue head (consumer only), `sleeping` (consumer writes 1,
 * producers exchange to 0), counters (atomics). */
#ifndef ACT_MAILBOX_H
#define ACT_MAILBOX_H

#include <stdint.h>
#include "device/err.h"
#include "actors/freelist.h"
#include "actors/msg.h"

typedef struct act_mailbox act_mailbox;

/* Default consumer spin: none. Measured (docs/bench/mailbox.md): a spin shorter than the peer's whole
 * round trip only adds its own length to every hop, and on a machine with fewer cores than busy threads
 * it steals the peer's CPU; a long spin (tens of us) wins only when both threads own a core. Actors that
 * have dedicated cores and a latency-critical peer set opts.spin_ns (e.g. 50000). */
#define ACT_SPIN_NS_DEFAULT 0

/* Creation options; a zeroed struct (or NULL) means defaults. */
typedef struct act_mailbox_opts {
    uint32_t chunk_msgs;   /* free-list growth chunk in messages (0 = 64) */
    uint64_t max_msgs;     /* cap on the free list (0 = unbounded); at the cap alloc waits or fails */
    uint64_t prealloc;     /* messages allocated at creation (0 = one chunk on first use) */
    int32_t spin_ns;       /* consumer spin before sleeping, in ns (0 = default ACT_SPIN_NS_DEFAULT, < 0 = never
                            * spin; at most 1e6) */
} act_mailbox_opts;

typedef struct act_mailbox_stats {
    uint64_t posted;       /* messages posted */
    uint64_t taken;        /* messages taken by the consumer */
    uint64_t wakeups;      /* futex wake syscalls issued by producers (consumer was asleep) */
    uint64_t sleeps;       /* times the consumer went to sleep (futex wait syscalls) */
    uint64_t was_empty;    /* posts that found the queue empty (only these may wake) */
    act_freelist_stats free; /* the mailbox's free list */
} act_mailbox_stats;

/* A mailbox named `name` (copied). Returns NULL + err (MEMRA_E_INVAL: spin_ns > 1e6 or a bad free-list
 * option, MEMRA_E_NOMEM). */
act_mailbox *act_mailbox_create(const char *name, const act_mailbox_opts *opts, dev_err *err);

/* Destroy (acts as the consumer): messages still queued are given back, then every chunk of the free list is freed. The caller
 * guarantees no producer or consumer uses the mailbox any more and no message of its free list is still
 * owned by anyone (they die with their chunks). */
void act_mailbox_destroy(act_mailbox *mb);

/* Take a free message from mb's free list (any thread); see act_freelist_take for wait/cap/errors and
 * its ordering (the last owner's writes happen-before this returns). */
act_msg *act_mailbox_msg_alloc(act_mailbox *mb, int wait, dev_err *err);

/* Post m (any thread; wait-free except for the wake syscall when the consumer sleeps). Takes ownership
 * of m. Returns 1 when this post issued a wake-up syscall, else 0 (never fails). Ordering: m is taken
 * after every message this thread posted to mb before it (per-producer FIFO), in no particular order
 * with other threads' posts; this thread's writes before the post happen-before the take of m. */
int act_mailbox_post(act_mailbox *mb, act_msg *m);

/* Consumer only (the one thread that takes from mb): the next message or NULL when the queue is empty.
 * Never sleeps (may yield briefly while a producer is between its two enqueue steps). Ordering: the
 * returned message's producer writes are visible (see act_mailbox_post); a NULL says nothing about
 * posts in flight. */
act_msg *act_mailbox_try_take(act_mailbox *mb);

/* Consumer only: the next message; when the queue is empty spins up to opts.spin_ns, then sleeps until
 * a producer posts. Never returns NULL. Ordering: as act_mailbox_try_take. */
act_msg *act_mailbox_take(act_mailbox *mb);

/* True when the consumer is asleep (or committed to sleep) right now; a snapshot for tests/traces
 * (seq_cst load; orders nothing else). */
int act_mailbox_consumer_sleeping(const act_mailbox *mb);

/* True when no message is queued (a snapshot; any thread; orders nothing). */
int act_mailbox_empty(const act_mailbox *mb);

/* Counters: a snapshot of relaxed atomics (exact once producers and consumer are joined). */
void act_mailbox_stats_get(const act_mailbox *mb, act_mailbox_stats *out);
const char *act_mailbox_name(const act_mailbox *mb);
act_freelist *act_mailbox_freelist(act_mailbox *mb);

#endif
