/* act_actor: one thread + one mailbox + one handler. The unit every pipeline stage, the readback and the
 * scheduler are built from (docs/architecture.md "One step through N stages").
 *
 *   a = act_actor_create("stage1", handle, ctx, &err);
 *   act_actor_start(a, &err);
 *   m = act_msg_new(a, MY_KIND, &err); fill m->payload; act_send(a, m, &err);   (any thread)
 *   act_actor_stop(a);                 posts the stop pill: everything sent before it is still handled
 *   rc = act_actor_join(a, &err);      waits for the thread; returns the actor's first error
 *   act_actor_destroy(a);
 *
 * Handler contract: `int handle(act_actor *a, act_msg *m, void *ctx)` runs on the actor's thread, one
 * message at a time, in mailbox order. Returns
 *   0          done with m: the runtime gives m back to its free list;
 *   ACT_KEPT   the handler kept m (forwarded it with act_send, or stored it): it frees it later
 *              (act_msg_free from any thread returns it to its home free list);
 *   > 1        not allowed: treated as a MEMRA_E_INVAL error naming the value;
 *   < 0        an error (MEMRA_E_*): the runtime stores it as the actor's error (first one wins; detail
 *              from act_actor_fail if the handler called it), fails m->reply if set and not yet completed,
 *              and frees m. Then, by policy:
 *                ACT_ON_ERROR_STOP (default): no further message is handled; every later message is
 *                  discarded (its reply failed with the stored error, the message freed) until the stop
 *                  pill, so nobody waiting on a reply hangs and producers never block on a dead actor;
 *                ACT_ON_ERROR_CONTINUE: later messages are still handled; the first error stays stored.
 * A handler that completes m->reply itself and then returns an error clears m->reply first: the waiter
 * may free the future the moment it completes, so the runtime must not look at it again.
 * The error reaches whoever asks: act_actor_join returns it (code + message), act_actor_error reports it
 * at any time, and message replies (act_future) carry it.
 *
 * Ordering guarantees: messages sent by one thread are handled in send order; messages from different
 * threads interleave arbitrarily; whatever a sender wrote before act_send happens-before the handler
 * sees the message; everything handlers did happens-before act_actor_join returns (pthread_join). A send
 * that happens-before act_actor_stop is handled (or discarded after an error) before the thread exits;
 * a send after stop is refused; a send racing stop may land after the pill and is then discarded by
 * act_actor_join/destroy (reply failed with MEMRA_E_STATE). */
#ifndef ACT_ACTOR_H
#define ACT_ACTOR_H

#include <stdint.h>
#include "device/err.h"
#include "actors/future.h"
#include "actors/mailbox.h"
#include "actors/msg.h"

typedef struct act_actor act_actor;

/* Handler: see the contract above. ctx is the pointer given at creation. */
typedef int (*act_handler_fn)(act_actor *a, act_msg *m, void *ctx);

#define ACT_KEPT 1 /* handler return: it kept the message and will free it */

typedef enum act_error_policy {
    ACT_ON_ERROR_STOP = 0,     /* first handler error: stop handling, discard the rest (default) */
    ACT_ON_ERROR_CONTINUE = 1, /* keep handling; the first error stays stored */
} act_error_policy;

typedef struct act_actor_opts {
    act_mailbox_opts mailbox;  /* the actor's mailbox (zero = defaults) */
    act_error_policy on_error; /* what a handler error does */
} act_actor_opts;

typedef struct act_actor_stats {
    uint64_t handled;          /* messages given to the handler */
    uint64_t discarded;        /* messages dropped unhandled: after an error (ACT_ON_ERROR_STOP), refused or left after the stop */
    uint64_t errors;           /* handler calls that returned < 0 */
    act_mailbox_stats mailbox; /* the actor's mailbox and free list */
} act_actor_stats;

/* A stopped-until-started actor named `name` (copied; also the thread name, truncated to 15 chars).
 * handle must be non-NULL. Returns NULL + err (MEMRA_E_INVAL, MEMRA_E_NOMEM). */
act_actor *act_actor_create(const char *name, act_handler_fn handle, void *ctx, dev_err *err);
act_actor *act_actor_create_opts(const char *name, act_handler_fn handle, void *ctx, const act_actor_opts *opts,
                                 dev_err *err);

/* Start the thread. Messages sent before start wait in the mailbox. Returns 0, MEMRA_E_STATE (already
 * started), MEMRA_E_DEVICE (pthread_create failed). Ordering: the caller's writes before start
 * happen-before the first handler call (pthread_create). */
int act_actor_start(act_actor *a, dev_err *err);

/* A message from a's free list with kind set (any thread). Sleeps while the free list is at its cap
 * (opts.mailbox.max_msgs). NULL + err on MEMRA_E_NOMEM. The caller owns it until act_send. Ordering:
 * as act_freelist_take. */
act_msg *act_msg_new(act_actor *a, uint32_t kind, dev_err *err);

/* Send m to a (any thread; wait-free except for one wake syscall when a's thread sleeps). Takes
 * ownership of m in every case. Returns 0, or MEMRA_E_STATE when a was already stopped (m is freed and
 * m->reply failed). Ordering: see above. */
int act_send(act_actor *a, act_msg *m, dev_err *err);

/* Post the stop pill (any thread; idempotent; never fails, never blocks: the pill is preallocated).
 * The thread handles everything sent before the pill, then exits. Returns 0. Ordering: every send that
 * happens-before this call (on any thread) is ahead of the pill; later sends are refused. */
int act_actor_stop(act_actor *a);

/* Wait for the thread to exit (someone must call act_actor_stop), then discard any message that raced
 * the stop. Returns the actor's first handler error (0 if none) and copies it into err. Call from one
 * thread; a second call returns the same result at once. If the actor was never started it returns at
 * once (after discarding queued messages) when the stop was posted, else MEMRA_E_STATE. */
int act_actor_join(act_actor *a, dev_err *err);

/* The actor's first handler error so far (0 if none), copied into out (any thread, never blocks).
 * Ordering: the stored error is published with release; a nonzero return sees the full message. */
int act_actor_error(const act_actor *a, dev_err *out);

/* Handler-side (the actor's own thread only): give the detail of the error the handler is about to
 * return (the first call per message wins). Returns code, so a handler can
 * `return act_actor_fail(a, MEMRA_E_DEVICE, "step %d: ...", s);`. Ordering: thread-local, none needed. */
int act_actor_fail(act_actor *a, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Stop (if needed), join (if started), discard leftovers, free everything. NULL is a no-op. Must not be
 * called from a's own handler (it would join itself). Ordering: as act_actor_join. Every send to a must
 * have returned, ordered before this call (a sender still inside act_send touches a's mailbox after its
 * message became visible, so "handled" is not enough); messages of a's free list held elsewhere die with
 * it. Actors that send to one another cannot meet this one at a time: use act_actors_destroy. */
void act_actor_destroy(act_actor *a);

/* Destroy n actors that may send to one another: stop all, join all, then free all. Once every thread
 * is joined no sender is left inside act_send, so no mailbox dies under a post; a send into an actor
 * already stopped is refused and its message goes back to a free list still alive. NULL entries are
 * skipped. Same rules as act_actor_destroy otherwise (no other thread may send to any of them). */
void act_actors_destroy(act_actor *const *a, int n);

const char *act_actor_name(const act_actor *a);
act_mailbox *act_actor_mailbox(act_actor *a);
/* Counters: a snapshot of relaxed atomics (exact after act_actor_join). */
void act_actor_stats_get(const act_actor *a, act_actor_stats *out);

#endif
