/* act_future: see future.h. Shared mutable state (per future): state (futex word; waiters CAS 0->1,
 * the completer exchanges to 2), claimed (completers exchange), value/err (written by the one completer
 * before its release of state=2, read by waiters after their acquire). */
#include "actors/future.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/sync.h"

enum { FUT_PENDING = 0, FUT_WAITED = 1, FUT_DONE = 2 };

void act_future_init(act_future *f)
{
    memset(f, 0, sizeof *f);
    atomic_init(&f->state, FUT_PENDING);
    atomic_init(&f->claimed, 0);
    atomic_init(&f->wakes, 0);
}

void act_future_fini(act_future *f)
{
    (void)f;
}

act_future *act_future_create(dev_err *err)
{
    act_future *f = malloc(sizeof *f);
    if (!f)
        return dev_err_set(err, MEMRA_E_NOMEM, "act_future_create: out of memory"), NULL;
    act_future_init(f);
    return f;
}

void act_future_destroy(act_future *f)
{
    if (f) {
        act_future_fini(f);
        free(f);
    }
}

/* Publish the outcome written by the claimer. Ordering: release of state=2 carries value/err to waiters.
 * Once DONE is stored a waiter may return and free f (it is often on the waiter's stack), so nothing
 * after that store touches f's memory: the wake count goes first, and the futex wake is a syscall on the
 * address alone (a dead or reused address costs at most a spurious wake-up, which every wait loop here
 * takes; glibc's unlock makes the same bet). */
static void publish(act_future *f)
{
    uint32_t s = FUT_PENDING;
    if (atomic_compare_exchange_strong_explicit(&f->state, &s, FUT_DONE, memory_order_acq_rel,
                                                memory_order_relaxed))
        return; /* nobody waits */
    /* s == WAITED: waiters only move PENDING -> WAITED, so the state is ours until we store DONE */
    atomic_fetch_add_explicit(&f->wakes, 1, memory_order_relaxed);
    atomic_store_explicit(&f->state, FUT_DONE, memory_order_release);
    act_futex_wake(&f->state, INT32_MAX);
}

int act_future_set(act_future *f, void *value)
{
    if (atomic_exchange(&f->claimed, 1))
        return MEMRA_E_STATE;
    f->value = value;
    dev_err_clear(&f->err);
    publish(f);
    return 0;
}

int act_future_fail(act_future *f, int code, const char *fmt, ...)
{
    if (atomic_exchange(&f->claimed, 1))
        return MEMRA_E_STATE;
    f->value = NULL;
    f->err.code = code < 0 ? code : MEMRA_E_STATE;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->err.msg, sizeof f->err.msg, fmt, ap);
    va_end(ap);
    publish(f);
    return 0;
}

int act_future_fail_err(act_future *f, const dev_err *e)
{
    if (atomic_exchange(&f->claimed, 1))
        return MEMRA_E_STATE;
    f->value = NULL;
    f->err = *e;
    if (f->err.code >= 0)
        f->err.code = MEMRA_E_STATE;
    publish(f);
    return 0;
}

int act_future_wait(act_future *f, void **value, dev_err *err)
{
    uint32_t s = atomic_load_explicit(&f->state, memory_order_acquire);
    while (s != FUT_DONE) {
        if (s == FUT_PENDING &&
            !atomic_compare_exchange_weak_explicit(&f->state, &s, FUT_WAITED, memory_order_acquire,
                                                   memory_order_acquire))
            continue; /* s reloaded */
        act_futex_wait(&f->state, FUT_WAITED); /* returns at once if the completer already stored DONE */
        s = atomic_load_explicit(&f->state, memory_order_acquire);
    }
    /* ordered by the acquire load of state == DONE (completer released it after writing value/err) */
    if (f->err.code != MEMRA_OK) {
        dev_err_set(err, f->err.code, "%s", f->err.msg); /* keeps err's first error, like every setter */
        return f->err.code;
    }
    if (value)
        *value = f->value;
    return 0;
}

int act_future_ready(const act_future *f)
{
    return atomic_load_explicit(&((act_future *)f)->state, memory_order_acquire) == FUT_DONE;
}

void act_future_reset(act_future *f)
{
    f->value = NULL;
    dev_err_clear(&f->err);
    atomic_store(&f->claimed, 0);
    atomic_store(&f->state, FUT_PENDING);
}
