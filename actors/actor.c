/* act_actor: see actor.h for the contract.
 *
 * Shared mutable state (per actor):
 *   mailbox      producers post (any thread); the actor thread is its single consumer, and after the
 *                thread exited (ordered by pthread_join) the joiner/destroyer drains it
 *   stop_posted  any thread (exchange: the one that flips it posts the pill)
 *   started      act_actor_start (exchange)
 *   error        written once by the actor thread, published by has_error (release); read by anyone
 *                after an acquire of has_error == 1; after join, error is also ordered by pthread_join
 *   pending      the actor thread only (handler detail for the error it is about to return)
 *   counters     atomics written by the actor thread, read by anyone
 *   join_lock    serializes join/destroy callers (pthread_join runs once) */
#include "actors/actor.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct act_actor {
    act_mailbox *mb;              /* owned */
    act_handler_fn handle;
    void *ctx;
    act_error_policy on_error;
    pthread_t thread;
    _Atomic int started;
    _Atomic int stop_posted;
    _Atomic int has_error;
    int joined;                   /* under join_lock */
    pthread_mutex_t join_lock;
    dev_err error;                /* first handler error (see header comment) */
    dev_err pending;              /* actor thread only */
    _Atomic uint64_t handled;
    _Atomic uint64_t discarded;
    _Atomic uint64_t errors;
    act_msg pill;                 /* the stop pill; home NULL (never freed to a list) */
    char name[48];
};

static void bump(_Atomic uint64_t *c)
{
    atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

act_actor *act_actor_create(const char *name, act_handler_fn handle, void *ctx, dev_err *err)
{
    return act_actor_create_opts(name, handle, ctx, NULL, err);
}

act_actor *act_actor_create_opts(const char *name, act_handler_fn handle, void *ctx, const act_actor_opts *opts,
                                 dev_err *err)
{
    if (!handle)
        return dev_err_set(err, MEMRA_E_INVAL, "actor %s: handler is NULL (a handler function is required)",
                           name ? name : "?"),
               NULL;
    act_actor_opts o = { 0 };
    if (opts)
        o = *opts;
    if (o.on_error != ACT_ON_ERROR_STOP && o.on_error != ACT_ON_ERROR_CONTINUE)
        return dev_err_set(err, MEMRA_E_INVAL, "actor %s: on_error=%d: allowed ACT_ON_ERROR_STOP (0), "
                           "ACT_ON_ERROR_CONTINUE (1)", name ? name : "?", (int)o.on_error),
               NULL;
    act_actor *a = calloc(1, sizeof *a);
    if (!a)
        return dev_err_set(err, MEMRA_E_NOMEM, "actor %s: out of memory", name ? name : "?"), NULL;
    snprintf(a->name, sizeof a->name, "%s", name ? name : "");
    a->handle = handle;
    a->ctx = ctx;
    a->on_error = o.on_error;
    a->pill.kind = ACT_MSG_STOP;
    pthread_mutex_init(&a->join_lock, NULL);
    a->mb = act_mailbox_create(a->name, &o.mailbox, err);
    if (!a->mb) {
        dev_err_wrap(err, "actor %s", a->name);
        pthread_mutex_destroy(&a->join_lock);
        free(a);
        return NULL;
    }
    return a;
}

/* Drop m without handling it: fail its reply with e, give it back. */
static void discard(act_actor *a, act_msg *m, const dev_err *e)
{
    if (m->reply)
        act_future_fail_err(m->reply, e); /* no-op if the reply was already completed */
    act_msg_free(m);
    bump(&a->discarded);
}

/* Actor thread: build this failure's error into e (the handler's detail if it gave one, else a generic
 * message), and store it as the actor's error if it is the first. */
static void record_error(act_actor *a, int rc, const act_msg *m, dev_err *e)
{
    bump(&a->errors);
    dev_err_clear(e);
    if (a->pending.code != MEMRA_OK) {
        *e = a->pending;
        e->code = rc; /* the returned code is authoritative */
        dev_err_wrap(e, "actor %s", a->name);
    } else {
        dev_err_set(e, rc, "actor %s: handler returned %s on a message of kind %u (no detail given)", a->name,
                    memra_status_str(rc), m->kind);
    }
    if (atomic_load_explicit(&a->has_error, memory_order_relaxed))
        return; /* the first error wins */
    a->error = *e;
    atomic_store_explicit(&a->has_error, 1, memory_order_release); /* publishes a->error */
}

/* Messages the actor thread gives back are batched (per home == own free list) and returned together,
 * so producers sleeping at the free-list cap are woken once per batch. The batch is flushed when full
 * and before the thread blocks on an empty mailbox, so a freed message never waits on an idle actor. */
#define ACT_FREE_BATCH 32
typedef struct free_batch {
    act_freelist *home;
    size_t n;
    act_msg *m[ACT_FREE_BATCH];
} free_batch;

static void batch_flush(free_batch *b)
{
    act_freelist_give_n(b->home, b->m, b->n);
    b->n = 0;
}

static void batch_free(free_batch *b, act_msg *m)
{
    if (m->home != b->home) {
        act_msg_free(m);
        return;
    }
    b->m[b->n++] = m;
    if (b->n == ACT_FREE_BATCH)
        batch_flush(b);
}

/* The next message; flushes the free batch before a take that may sleep. */
static act_msg *next_msg(act_actor *a, free_batch *b)
{
    act_msg *m = act_mailbox_try_take(a->mb);
    if (m)
        return m;
    batch_flush(b);
    return act_mailbox_take(a->mb); /* ordered after the sender's writes (mailbox.h) */
}

static void *actor_main(void *arg)
{
    act_actor *a = arg;
    free_batch fb = { .home = act_mailbox_freelist(a->mb) };
    char tname[16] = "actor";
    if (a->name[0]) {
        memcpy(tname, a->name, sizeof tname - 1);
        tname[sizeof tname - 1] = '\0';
    }
    pthread_setname_np(pthread_self(), tname);
    for (;;) {
        act_msg *m = next_msg(a, &fb);
        if (m == &a->pill)
            break;
        if (atomic_load_explicit(&a->has_error, memory_order_relaxed) && a->on_error == ACT_ON_ERROR_STOP) {
            discard(a, m, &a->error); /* own write: this thread stored a->error */
            continue;
        }
        dev_err_clear(&a->pending);
        int rc = a->handle(a, m, a->ctx);
        bump(&a->handled);
        if (rc == ACT_KEPT)
            continue;
        if (rc > 0) /* not part of the contract: an error, so a typo'd return never passes silently */
            rc = act_actor_fail(a, MEMRA_E_INVAL, "handler returned %d (allowed: 0, ACT_KEPT = %d, or a "
                                "negative MEMRA_E_* code)", rc, ACT_KEPT);
        if (rc < 0) {
            dev_err e;
            record_error(a, rc, m, &e);
            if (m->reply)
                act_future_fail_err(m->reply, &e); /* no-op if the handler completed it already */
        }
        batch_free(&fb, m);
    }
    batch_flush(&fb);
    return NULL;
}

int act_actor_start(act_actor *a, dev_err *err)
{
    if (atomic_exchange(&a->started, 1))
        return dev_err_set(err, MEMRA_E_STATE, "actor %s: already started (start once)", a->name);
    int rc = pthread_create(&a->thread, NULL, actor_main, a);
    if (rc != 0) {
        atomic_store(&a->started, 0);
        return dev_err_set(err, MEMRA_E_DEVICE, "actor %s: pthread_create failed: %s", a->name, strerror(rc));
    }
    return 0;
}

act_msg *act_msg_new(act_actor *a, uint32_t kind, dev_err *err)
{
    act_msg *m = act_mailbox_msg_alloc(a->mb, 1, err);
    if (!m) {
        dev_err_wrap(err, "actor %s", a->name);
        return NULL;
    }
    m->kind = kind;
    return m;
}

int act_send(act_actor *a, act_msg *m, dev_err *err)
{
    if (atomic_load(&a->stop_posted)) {
        dev_err e = { 0 };
        dev_err_set(&e, MEMRA_E_STATE, "actor %s: stopped; message of kind %u refused", a->name, m->kind);
        if (m->reply)
            act_future_fail_err(m->reply, &e);
        act_msg_free(m);
        bump(&a->discarded);
        return dev_err_set(err, e.code, "%s", e.msg);
    }
    act_mailbox_post(a->mb, m);
    return 0;
}

int act_actor_stop(act_actor *a)
{
    if (!atomic_exchange(&a->stop_posted, 1))
        act_mailbox_post(a->mb, &a->pill); /* FIFO: after every message sent before this call */
    return 0;
}

/* Joiner (thread exited or never started): discard what is left in the mailbox. */
static void drain_leftovers(act_actor *a)
{
    dev_err e = { 0 };
    dev_err_set(&e, MEMRA_E_STATE, "actor %s: stopped before handling this message", a->name);
    act_msg *m;
    while ((m = act_mailbox_try_take(a->mb)))
        if (m != &a->pill)
            discard(a, m, &e);
}

int act_actor_join(act_actor *a, dev_err *err)
{
    pthread_mutex_lock(&a->join_lock);
    if (!a->joined) {
        if (atomic_load(&a->started)) {
            pthread_join(a->thread, NULL); /* orders every handler effect before what follows */
        } else if (!atomic_load(&a->stop_posted)) {
            pthread_mutex_unlock(&a->join_lock);
            return dev_err_set(err, MEMRA_E_STATE, "actor %s: join of an actor never started nor stopped "
                               "(call act_actor_stop first)", a->name);
        }
        drain_leftovers(a);
        a->joined = 1;
    }
    pthread_mutex_unlock(&a->join_lock);
    return act_actor_error(a, err);
}

int act_actor_error(const act_actor *a, dev_err *out)
{
    act_actor *m = (act_actor *)a;
    if (!atomic_load_explicit(&m->has_error, memory_order_acquire))
        return 0;
    return dev_err_set(out, m->error.code, "%s", m->error.msg); /* ordered by the acquire above */
}

int act_actor_fail(act_actor *a, int code, const char *fmt, ...)
{
    if (a->pending.code == MEMRA_OK) {
        a->pending.code = code;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(a->pending.msg, sizeof a->pending.msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

void act_actor_destroy(act_actor *a)
{
    if (!a)
        return;
    act_actor_stop(a);
    act_actor_join(a, NULL);
    act_mailbox_destroy(a->mb);
    pthread_mutex_destroy(&a->join_lock);
    free(a);
}

void act_actors_destroy(act_actor *const *a, int n)
{
    for (int i = 0; i < n; i++) /* pills first: a peer still running may send to any of them */
        if (a[i])
            act_actor_stop(a[i]);
    for (int i = 0; i < n; i++) /* pthread_join: each thread's last send happens-before the frees below */
        if (a[i])
            act_actor_join(a[i], NULL);
    for (int i = 0; i < n; i++)
        act_actor_destroy(a[i]); /* stopped and joined: only frees */
}

const char *act_actor_name(const act_actor *a)
{
    return a->name;
}

act_mailbox *act_actor_mailbox(act_actor *a)
{
    return a->mb;
}

void act_actor_stats_get(const act_actor *a, act_actor_stats *out)
{
    act_actor *m = (act_actor *)a;
    out->handled = atomic_load_explicit(&m->handled, memory_order_relaxed);
    out->discarded = atomic_load_explicit(&m->discarded, memory_order_relaxed);
    out->errors = atomic_load_explicit(&m->errors, memory_order_relaxed);
    act_mailbox_stats_get(m->mb, &out->mailbox);
}
