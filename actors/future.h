/* act_future: a one-shot completion set by one thread (usually an actor) and waited by others. Carries a
 * value (void *) on success or an error (code + message). The pipeline uses it for "step done" and for
 * pending logits.
 *
 * The struct is public so it can be embedded (no malloc per step); its fields are private. Protocol:
 * init -> exactly one of set/fail (later ones return MEMRA_E_STATE) -> any number of waits/queries ->
 * reset (when nobody waits any more) to reuse, or fini. A waiter whose wait returned may fini or free f
 * at once: the completer touches f no more once it has published.
 *
 * Ordering: everything the completing thread wrote before act_future_set/fail happens-before the return
 * of every act_future_wait (or act_future_ready == 1) that observes the completion (release/acquire on
 * the state word). Waiters sleep on a futex; a completion issues a wake syscall only when someone sleeps. */
#ifndef ACT_FUTURE_H
#define ACT_FUTURE_H

#include <stdatomic.h>
#include <stdint.h>
#include "device/err.h"

typedef struct act_future {
    _Atomic uint32_t state;    /* private: 0 pending, 1 pending with sleeping waiters, 2 done (futex word) */
    _Atomic uint32_t claimed;  /* private: 1 once a completer has claimed the one shot */
    void *value;               /* private: the value (valid when done and ok) */
    dev_err err;               /* private: the outcome (code MEMRA_OK or the error) */
    _Atomic uint64_t wakes;    /* private: wake syscalls issued (tests) */
} act_future;

/* Prepare f (pending). Ordering: none; publish f to other threads through something that orders it
 * (a message, a join). */
void act_future_init(act_future *f);

/* Releases nothing (an act_future holds no resource); pairs with init (f must not be waited on). */
void act_future_fini(act_future *f);

/* Heap variants: NULL + err (MEMRA_E_NOMEM). The caller owns the future. */
act_future *act_future_create(dev_err *err);
void act_future_destroy(act_future *f);

/* Complete f successfully with value (any thread). Returns 0, or MEMRA_E_STATE if f was already
 * completed (the first completion wins; f is unchanged). Cost: one atomic; a syscall if a waiter sleeps. */
int act_future_set(act_future *f, void *value);

/* Complete f with an error: code (< 0) and a printf-style message. Returns 0 or MEMRA_E_STATE (as set). */
int act_future_fail(act_future *f, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Complete f with a copy of e (e->code < 0; a code of 0 is turned into MEMRA_E_STATE). Returns as set. */
int act_future_fail_err(act_future *f, const dev_err *e);

/* Block until f is complete. Returns its code (0 or < 0); on success stores the value in *value (when
 * non-NULL), on error copies code + message into err (when non-NULL). Any number of threads may wait. */
int act_future_wait(act_future *f, void **value, dev_err *err);

/* 1 when f is complete (then a wait returns at once), else 0. Never blocks. Ordering: a 1 is an
 * acquire: the completer's writes are visible. */
int act_future_ready(const act_future *f);

/* Make a completed (or never waited) f pending again. The caller guarantees nobody waits on or completes
 * f concurrently (ordering is the caller's: e.g. the waiter resets after its wait returned). */
void act_future_reset(act_future *f);

#endif
