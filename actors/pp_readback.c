/* Deferred readback (the seed's PendingLogits): the readback actor drains a step's logits through a
 * DEDICATED readback stream — wait the step's completion event, copy D2H into the pending's pinned buffer,
 * free the device logits on this stream (stream-ordered: the pool hands the block back to the last stage
 * only behind this free point), sync, complete the pending. Steps enqueued after it keep running on the
 * stage streams meanwhile. Also: the pending pool and the small message helpers shared by pp*.c. */
#include "actors/pp_internal.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

int pp_post(act_actor *to, int kind, const void *payload, size_t bytes)
{
    dev_err e = {0};
    act_msg *m = NULL;
    /* a message lost here would strand a credit or a step (drain would hang): ride out a transient NOMEM of
     * the free list's growth for up to a second before giving up */
    for (int tries = 0; !m && tries < 1000; tries++) {
        dev_err_clear(&e);
        if (!(m = act_msg_new(to, (uint32_t)kind, &e)) && e.code == MEMRA_E_NOMEM) {
            struct timespec nap = {0, 1000000};
            nanosleep(&nap, NULL);
        } else if (!m) {
            return e.code;
        }
    }
    if (!m)
        return e.code;
    memcpy(m->payload, payload, bytes);
    return act_send(to, m, &e);
}

void pp_jitter(pp_hooks *h)
{
    int max_us = atomic_load(&h->jitter_us);
    if (max_us <= 0)
        return;
    static _Thread_local uint64_t x, gen;
    uint64_t g = atomic_load(&h->jitter_gen);
    if (!x || gen != g) /* per thread, reseeded with every act_pp_set_jitter (runs are reproducible) */
        x = (h->jitter_seed ^ (uint64_t)(uintptr_t)&x) | 1, gen = g;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    struct timespec ts = {0, (long)(x % (uint64_t)max_us) * 1000};
    nanosleep(&ts, NULL);
}

void pp_rec_free(pp_rec *rec)
{
    if (!rec)
        return;
    free(rec->tokens);
    free(rec);
}

void pp_rec_fail(pp_rec *rec, int code, const char *what, const dev_err *err)
{
    atomic_store(&rec->failed, 1);
    act_pending *p = rec->pending;
    pthread_mutex_lock(&p->lock);
    if (p->status == 0) {
        p->status = code ? code : MEMRA_E_DEVICE;
        dev_err_set(&p->err, p->status, "%s: %s", what, err && err->msg[0] ? err->msg : memra_status_str(code));
    }
    pthread_mutex_unlock(&p->lock);
}

/* Free one pending and what it owns (any of it may be missing: a half-built one). */
static void pending_free(act_pp *rt, act_pending *p)
{
    if (p->host)
        dev_host_free(rt->plat, p->host);
    if (p->stamps)
        dev_host_free(rt->plat, p->stamps);
    if (p->ev_done)
        dev_event_destroy(p->ev_done);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->cv);
    free(p);
}

act_pending *pp_pending_get(act_pp *rt, const pp_rec *rec, dev_err *err)
{
    const int rows = rec->out_rows;
    act_pending *p = NULL, **link;
    pthread_mutex_lock(&rt->pool_lock);
    for (link = &rt->pool; *link; link = &(*link)->next_free)
        if ((*link)->cap_rows >= rows) {
            p = *link;
            *link = p->next_free;
            break;
        }
    pthread_mutex_unlock(&rt->pool_lock);
    if (!p) {
        if (!(p = calloc(1, sizeof *p))) {
            dev_err_set(err, MEMRA_E_NOMEM, "pending logits: out of host memory");
            return NULL;
        }
        p->rt = rt;
        pthread_mutex_init(&p->lock, NULL);
        pthread_cond_init(&p->cv, NULL);
        p->cap_rows = rows > 0 ? rows : 1;
        p->host = dev_host_alloc(rt->plat, (size_t)p->cap_rows * (size_t)rt->n_vocab * sizeof(float), err);
        p->ev_done = dev_event_create(rt->stage[rt->N - 1].dev, err);
        p->stamps = dev_host_alloc(rt->plat, 2 * (size_t)rt->N * sizeof(uint64_t), err);
        if (!p->host || !p->ev_done || !p->stamps) {
            pending_free(rt, p);
            return NULL;
        }
    }
    p->refs = 2; /* the caller and the pipeline */
    p->done = 0;
    p->status = 0;
    p->argmax = rec->argmax;
    p->times = (act_pending_times){0};
    dev_err_clear(&p->err);
    p->rows = rows;
    return p;
}

static void pending_put(act_pending *p)
{
    act_pp *rt = p->rt;
    pthread_mutex_lock(&rt->pool_lock);
    p->next_free = rt->pool;
    rt->pool = p;
    pthread_mutex_unlock(&rt->pool_lock);
}

void pp_pending_pool_free(act_pp *rt)
{
    act_pending *p = rt->pool;
    while (p) {
        act_pending *n = p->next_free;
        pending_free(rt, p);
        p = n;
    }
    rt->pool = NULL;
}

static void pending_unref(act_pending *p)
{
    pthread_mutex_lock(&p->lock);
    int left = --p->refs;
    pthread_mutex_unlock(&p->lock);
    if (left == 0)
        pending_put(p);
}

void pp_pending_finish(act_pending *p, int status, const dev_err *err)
{
    pthread_mutex_lock(&p->lock);
    if (status != 0 && p->status == 0) {
        p->status = status;
        dev_err_set(&p->err, status, "%s", err ? err->msg : memra_status_str(status));
    }
    p->done = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->lock);
    pending_unref(p);
}

/* Wait for p; its status, or MEMRA_E_INVAL when the step's result is not of the kind asked (argmax). */
static int pending_wait_kind(act_pending *p, int argmax, const void **out, int *rows, dev_err *err)
{
    static const char *const fn[2] = {"act_pending_wait", "act_pending_wait_tokens"};
    if (!p)
        return dev_err_set(err, MEMRA_E_INVAL, "%s: NULL pending", fn[argmax]);
    pthread_mutex_lock(&p->lock);
    /* ordered by p->lock: the readback actor set done after its readback stream synced */
    while (!p->done)
        pthread_cond_wait(&p->cv, &p->lock);
    int st = p->status;
    if (st != 0)
        dev_err_set(err, st, "%s", p->err.msg);
    else if (p->argmax != argmax)
        st = dev_err_set(err, MEMRA_E_INVAL, "%s: the step's logits mode is %s (read it with %s)", fn[argmax],
                         p->argmax ? "ARGMAX" : "ALL or LAST", fn[p->argmax]);
    pthread_mutex_unlock(&p->lock);
    if (out)
        *out = st == 0 ? p->host : NULL;
    if (rows)
        *rows = st == 0 ? p->rows : 0;
    return st;
}

int act_pending_wait(act_pending *p, const float **logits, int *rows, dev_err *err)
{
    const void *o = NULL;
    int st = pending_wait_kind(p, 0, &o, rows, err);
    if (logits)
        *logits = o;
    return st;
}

int act_pending_wait_tokens(act_pending *p, const int32_t **tokens, int *rows, dev_err *err)
{
    const void *o = NULL;
    int st = pending_wait_kind(p, 1, &o, rows, err);
    if (tokens)
        *tokens = o;
    return st;
}

void act_pending_get_times(act_pending *p, act_pending_times *out)
{
    /* ordered by p->lock: every writer passed its point before the readback actor set done under it */
    pthread_mutex_lock(&p->lock);
    *out = p->done ? p->times : (act_pending_times){0};
    pthread_mutex_unlock(&p->lock);
}

int act_pending_ready(act_pending *p)
{
    pthread_mutex_lock(&p->lock);
    int d = p->done;
    pthread_mutex_unlock(&p->lock);
    return d;
}

void act_pending_release(act_pending *p)
{
    if (p)
        pending_unref(p);
}

static void finish_step(act_pp *rt, pp_rec *rec, int status, const dev_err *err)
{
    if (rec->kind == ACT_STEP_PRIME_BATCH && status == 0)
        atomic_fetch_add(&rt->ctr.prime_batches, 1);
    if (status == 0)
        atomic_fetch_add(&rt->ctr.steps_done, 1);
    if (rt->rank) /* the last stage's rank under mpirun: the result goes to rank 0 first */
        pp_rank_result(rt, rec, status, err);
    atomic_fetch_sub(&rt->unfinished, 1); /* before the waiter can wake: its next submit must not see this step */
    rec->pending->times.done_ns = pp_now_ns();
    pp_pending_finish(rec->pending, status, err);
    pp_rec_free(rec);
    pp_inflight_add(rt, -1);
}

/* Tracing: the step's readback span and, for a stamped step (CUDA) that ran (ok), its walks and hops from the
 * device stamps, mapped onto the host clock by the smallest (synced - last walk end) seen: the stamps' clock has
 * another origin. A failed step's stamps may be unwritten: neither mapped nor used for the offset. */
static void trace_step(act_pp *rt, const pp_rec *rec, int ok)
{
    const act_pending *p = rec->pending;
    act_trace_span(ACT_TR_READBACK, ACT_TRACE_READBACK, p->times.readback_ns, p->times.synced_ns, rec->id,
                   rec->out_rows, 0, 0);
    if (!rec->stamped || !ok)
        return;
    const uint64_t *t = p->stamps;
    const int64_t off = (int64_t)p->times.synced_ns - (int64_t)t[2 * (rt->N - 1) + 1];
    if (!rt->tr_off_set || off < rt->tr_off_ns)
        rt->tr_off_ns = off, rt->tr_off_set = 1;
    for (int s = 0; s < rt->N; s++) {
        act_trace_span(ACT_TR_WALK, ACT_TRACE_STREAM(s), t[2 * s] + (uint64_t)rt->tr_off_ns,
                       t[2 * s + 1] + (uint64_t)rt->tr_off_ns, rec->id, rec->B, (int)rec->kind,
                       s == rt->N - 1 ? rec->out_rows : 0);
        if (s > 0) /* the hop: walk end upstream to walk begin here (the stamps bracket walks only) */
            act_trace_async(ACT_TR_HOP, ACT_TRACE_HOP(s - 1), t[2 * s - 1] + (uint64_t)rt->tr_off_ns,
                            t[2 * s] + (uint64_t)rt->tr_off_ns, rec->id, 0, 0, rec->mark[s].kin);
    }
}

int pp_readback_handle(act_actor *a, act_msg *m, void *ctx)
{
    (void)a;
    act_pp *rt = ctx;
    pp_rec *rec;
    if (m->kind == PP_MSG_RESULT) { /* rank 0: the step's result is in its pending (pp_rank.c's transport) */
        memcpy(&rec, m->payload, sizeof rec);
        pp_rank_account(rt, rec);
        const int st = rec->pending->status; /* set by the transport before the post, ordered by this mailbox */
        finish_step(rt, rec, st, NULL);
        return 0;
    }
    if (m->kind != PP_MSG_READBACK)
        return 0;
    memcpy(&rec, m->payload, sizeof rec);
    pp_hooks *h = pp_hooks_of(rt);
    if (h)
        pp_jitter(h);
    dev_err e = {0};
    int r = 0;
    if (atomic_load(&rec->failed)) {
        /* a stage gave up mid-step: let every stream pass the work it did enqueue (its markers point
         * into rec) before rec dies */
        for (int s = 0; s < rt->N; s++)
            dev_stream_sync(rt->stage[s].stream, NULL);
        pp_head_release(rt, rec, NULL);
        finish_step(rt, rec, MEMRA_E_DEVICE, NULL);
        return 0;
    }
    act_pending *p = rec->pending;
    p->times.readback_ns = pp_now_ns();
    /* ordered by ev_done: the last stage recorded it after the head (and, through the ev_tx chain, after
     * every earlier stage's work for this step) */
    r = dev_stream_wait_event_async(rt->rb_stream, p->ev_done);
    if (r == 0 && rec->out_rows > 0)
        r = dev_copy_d2h_async(rt->rb_stream, p->host, pp_result_src(rt, rec, rec->logits_d),
                               pp_result_bytes(rt, rec));
    pp_head_release(rt, rec, rt->rb_stream); /* whatever happened: behind this stream's reads of it */
    if (r == 0)
        r = dev_stream_sync(rt->rb_stream, &e);
    p->times.synced_ns = pp_now_ns();
    if (r == 0)
        r = dev_event_sync(p->ev_done, &e); /* the last stage's stream error, if any */
    /* ordered by ev_done: every stage's stamps of this step were written before it (the ev_tx chain) */
    if (r == 0 && rec->stamped)
        pp_account_stamps(rt, rec, 0);
    if (act_trace_on())
        trace_step(rt, rec, r == 0);
    finish_step(rt, rec, r, &e);
    return 0;
}
