/* act_freelist: a pool of preallocated act_msg that grows by chunks, so the steady state of a mailbox
 * does no malloc per message.
 *
 * Structure (see docs/actors.md "Free list"): a liburcu lock-free stack (cds_lfs) of free messages.
 *   - give (return a message): cds_lfs_push, lock-free, any thread, never blocks.
 *   - take: __cds_lfs_pop under the stack's own pop mutex (liburcu's synchronization technique 2).
 *     ABA safety: a Treiber pop is only exposed to ABA when another thread can pop the same head and push
 *     it back between our read of head->next and our CAS; with pops serialized by the mutex no other
 *     thread removes anything during our pop, pushes only add new heads (the CAS then fails and
 *     retries), and a node that is in the stack cannot be pushed again, so the CAS can never succeed with
 *     a stale next. The mutex is held for one CAS (tens of ns) and never while sleeping or allocating.
 *     A fully lock-free pop would need RCU grace periods before reuse (technique 1) or tagged pointers;
 *     neither pays off for the few producers per mailbox the pipeline has.
 *   - growth: a take that finds the stack empty allocates one chunk of chunk_msgs messages (malloc),
 *     keeps one and pushes the rest. Two producers may grow at once (two chunks); that is bounded by
 *     max_msgs. Chunks are freed only by act_freelist_destroy.
 *   - cap: with max_msgs > 0, a take at the cap either fails (MEMRA_E_FULL) or sleeps on a futex until a
 *     message is given back (backpressure for producers faster than their consumer).
 *
 * Shared mutable state (all in act_freelist): the stack (any thread), the chunk list (growers push,
 * destroy walks), counters (atomics, any thread), the waiter futex (blocked takers and givers). */
#ifndef ACT_FREELIST_H
#define ACT_FREELIST_H

#include <stdint.h>
#include "device/err.h"
#include "actors/msg.h"

typedef struct act_freelist act_freelist;

typedef struct act_freelist_stats {
    uint64_t chunks;       /* chunks allocated so far (growth events) */
    uint64_t msgs;         /* messages allocated so far (chunks * chunk_msgs) */
    uint64_t takes;        /* successful takes */
    uint64_t gives;        /* messages given back */
    uint64_t full_waits;   /* times a taker slept at the cap (futex wait syscalls) */
    uint64_t full_wakes;   /* futex wake syscalls issued by givers for sleeping takers */
} act_freelist_stats;

/* A free list named `name` (copied; shows in messages). chunk_msgs: messages per growth chunk (0 = 64);
 * max_msgs: cap on messages ever allocated (0 = unbounded; otherwise rounded up to whole chunks);
 * prealloc: messages allocated now (rounded up to whole chunks; 0 = none).
 * Returns NULL + err (MEMRA_E_INVAL, MEMRA_E_NOMEM). */
act_freelist *act_freelist_create(const char *name, uint32_t chunk_msgs, uint64_t max_msgs, uint64_t prealloc,
                                  dev_err *err);

/* Free every chunk. Ordering: none of its own; the caller guarantees no thread still uses the list or any of its messages (every
 * message, free or not, dies with its chunk). */
void act_freelist_destroy(act_freelist *fl);

/* Take a message (any thread). The header is reset (kind/flags/tag 0, reply NULL, home fl); the payload
 * keeps old bytes. When the list is empty it grows by a chunk; at the cap it sleeps until a message is
 * given back when `wait` is nonzero, else returns NULL + MEMRA_E_FULL. NULL + MEMRA_E_NOMEM when a chunk
 * cannot be allocated. Ordering: whatever the last owner wrote into the message happens-before the
 * taker's return (the give's push and our pop are both full barriers). Cost: one mutex + CAS; a malloc
 * only when growing. */
act_msg *act_freelist_take(act_freelist *fl, int wait, dev_err *err);

/* Give m back to m->home (any thread; lock-free). Wakes takers sleeping at the cap, if any. m must not
 * be used afterwards. NULL and messages with home == NULL are ignored. Ordering: the giver's writes to m
 * happen-before the return of the take that gets m next (push and pop are full barriers). */
void act_msg_free(act_msg *m);

/* Give back n messages whose home is fl (any thread; lock-free): n pushes, then at most ONE wake
 * syscall (up to n takers) if takers sleep at the cap. Consumers that free many messages batch them
 * through this so a producer-bound-at-the-cap workload costs one syscall per batch, not per message. */
void act_freelist_give_n(act_freelist *fl, act_msg *const *ms, size_t n);

/* Counters (a snapshot: each field is read atomically, not all at once; no ordering with other
 * memory; read after a join for exact values). */
void act_freelist_stats_get(const act_freelist *fl, act_freelist_stats *out);

const char *act_freelist_name(const act_freelist *fl);

#endif
