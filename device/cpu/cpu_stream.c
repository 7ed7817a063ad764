/* CPU backend: streams (one worker thread draining an in-order op queue), events (refcounted record
 * marks, CUDA semantics), kernels, copies and host callbacks. Shared state: see device/cpu/cpu.h. */
#include "device/cpu/cpu.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *mode_str(int m)
{
    return m == DEV_READ ? "reads" : m == DEV_WRITE ? "writes" : "reads/writes";
}

/* ---- marks (event record points) ---- */

static cpu_mark *mark_new(const char *stream)
{
    cpu_mark *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    atomic_init(&m->refs, 1);
    pthread_mutex_init(&m->m, NULL);
    pthread_cond_init(&m->c, NULL);
    cpu_name_copy(m->stream, sizeof m->stream, stream);
    return m;
}

static void mark_ref(cpu_mark *m) { atomic_fetch_add_explicit(&m->refs, 1, memory_order_relaxed); }

static void mark_unref(cpu_mark *m)
{
    if (m && atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) == 1) {
        pthread_mutex_destroy(&m->m);
        pthread_cond_destroy(&m->c);
        free(m->vc.t);
        free(m);
    }
}

/* Block until m completes; copy its error into err (when non-NULL); returns its code. */
static int mark_wait(cpu_mark *m, dev_err *err)
{
    pthread_mutex_lock(&m->m);
    while (!m->done)
        pthread_cond_wait(&m->c, &m->m);
    int code = m->err.code;
    if (code && err)
        dev_err_set(err, code, "%s", m->err.msg);
    pthread_mutex_unlock(&m->m);
    return code;
}

static cpu_mark *event_latest_ref(cpu_event *e)
{
    pthread_mutex_lock(&e->lock);
    cpu_mark *m = e->latest;
    if (m)
        mark_ref(m);
    pthread_mutex_unlock(&e->lock);
    return m;
}

/* The host learned that m's point has passed: join its clock into the host clock. */
static void host_join(cpu_platform *p, const cpu_vc *vc)
{
    pthread_mutex_lock(&p->vc_lock);
    cpu_vc_join(p->host_vc, vc->t, vc->n);
    pthread_mutex_unlock(&p->vc_lock);
}

/* ---- enqueue ---- */

static void stream_fail__(cpu_stream *s, int code, const char *msg)
{
    if (!s->err.code)
        dev_err_set(&s->err, code, "%s", msg);
}

/* An argument error found at enqueue: becomes the stream's sticky error (so a _sync shows the message). */
static int enqueue_fail(cpu_stream *s, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int enqueue_fail(cpu_stream *s, int code, const char *fmt, ...)
{
    char msg[DEV_ERR_MSG];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&s->lock);
    stream_fail__(s, code, msg);
    pthread_mutex_unlock(&s->lock);
    return code;
}

/* Give op its clock (stream clock joined with the host clock and, for a wait, the bound record's clock),
 * copy it into rec (a record's mark) and append op to s's queue. Takes ownership of op. */
static int submit(cpu_stream *s, cpu_op *op, const cpu_mark *join, cpu_mark *rec)
{
    cpu_platform *p = cpu_plat(s->base.dev->plat);
    pthread_mutex_lock(&s->lock);
    pthread_mutex_lock(&p->vc_lock);
    uint32_t n = p->n_slots;
    cpu_vc_join(s->vc, p->host_vc, n);
    if (join)
        cpu_vc_join(s->vc, join->vc.t, join->vc.n); /* ordered by the record this wait binds to */
    uint64_t *t = malloc(n * sizeof *t), *rt = rec ? malloc(n * sizeof *rt) : NULL;
    if (!t || (rec && !rt)) {
        pthread_mutex_unlock(&p->vc_lock);
        pthread_mutex_unlock(&s->lock);
        free(t);
        free(rt);
        free(op);
        return enqueue_fail(s, MEMRA_E_NOMEM, "stream '%s': out of memory enqueuing an op", s->base.name);
    }
    s->vc[s->slot] = ++p->slot_tick[s->slot];
    memcpy(t, s->vc, n * sizeof *t);
    pthread_mutex_unlock(&p->vc_lock);
    op->slot = s->slot;
    op->vc.n = n;
    op->vc.t = t;
    if (rec) {
        memcpy(rt, t, n * sizeof *rt);
        rec->vc.n = n;
        rec->vc.t = rt;
    }
    op->next = NULL;
    if (s->tail)
        s->tail->next = op;
    else
        s->head = op;
    s->tail = op;
    s->enq++;
    pthread_mutex_unlock(&s->lock);
    /* handoff to the worker: the op is in the queue (ordered by s->lock); the wake-up comes after the unlock, so
     * a worker sharing the host's core does not wake only to block on the lock the host still holds */
    pthread_cond_signal(&s->cv_work);
    return 0;
}

static cpu_op *op_new(cpu_stream *s, int kind, const char *name)
{
    cpu_op *op = calloc(1, sizeof *op);
    if (!op) {
        enqueue_fail(s, MEMRA_E_NOMEM, "stream '%s': out of memory enqueuing %s", s->base.name, name);
        return NULL;
    }
    op->kind = kind;
    cpu_name_copy(op->name, sizeof op->name, name);
    return op;
}

/* ---- execution on the worker ---- */

/* Validate and race-check a kernel's accesses; count remote bytes. 0 or an error in e. */
static int check_kernel(cpu_stream *s, cpu_op *op, dev_err *e)
{
    cpu_platform *p = cpu_plat(s->base.dev->plat);
    dev_device *sd = s->base.dev;
    cpu_alloc *al[DEV_ACCESS_MAX];
    pthread_mutex_lock(&p->reg_lock);
    for (int i = 0; i < op->u.k.n_acc; i++) {
        const dev_access *a = &op->u.k.acc[i];
        al[i] = cpu_alloc_find__(p, a->ptr);
        if (!al[i] || (uintptr_t)a->ptr + a->bytes > al[i]->base + al[i]->size) {
            pthread_mutex_unlock(&p->reg_lock);
            return dev_err_set(e, MEMRA_E_INVAL, "kernel '%s' on stream '%s' (%s): access %d ptr %p (+%zu B) is "
                               "not inside a live device allocation", op->name, s->base.name, sd->name, i, a->ptr,
                               a->bytes);
        }
        dev_device *od = &al[i]->owner->base;
        if (od != sd && !dev_peer_granted(sd, od)) {
            pthread_mutex_unlock(&p->reg_lock);
            atomic_fetch_add_explicit(&sd->access_denied, 1, memory_order_relaxed);
            return dev_err_set(e, MEMRA_E_ACCESS, "kernel '%s' on stream '%s' (%s) %s memory of %s (%p, %zu B) "
                               "without a peer grant (needs dev_peer_grant(%s, %s))", op->name, s->base.name,
                               sd->name, mode_str(a->mode), od->name, a->ptr, a->bytes, sd->name, od->name);
        }
    }
    if (atomic_load_explicit(&p->race_on, memory_order_relaxed))
        for (int i = 0; i < op->u.k.n_acc; i++)
            cpu_race_access__(p, al[i], op->u.k.acc[i].ptr, op->u.k.acc[i].bytes, op->u.k.acc[i].mode, op->slot,
                              &op->vc, s->base.name, op->name);
    pthread_mutex_unlock(&p->reg_lock);
    for (int i = 0; i < op->u.k.n_acc; i++) {
        const dev_access *a = &op->u.k.acc[i];
        if (&al[i]->owner->base == sd)
            continue;
        if (a->mode & DEV_READ)
            atomic_fetch_add_explicit(&sd->remote_read_bytes, a->bytes, memory_order_relaxed);
        if (a->mode & DEV_WRITE)
            atomic_fetch_add_explicit(&sd->remote_write_bytes, a->bytes, memory_order_relaxed);
    }
    return 0;
}

/* Check one device-side end of a copy: inside a live allocation (of `want` when non-NULL). */
static int copy_end__(cpu_platform *p, cpu_stream *s, cpu_op *op, const void *ptr, size_t bytes,
                      dev_device *want, const char *which, cpu_alloc **out, dev_err *e)
{
    cpu_alloc *a = cpu_alloc_find__(p, ptr);
    if (!a || (uintptr_t)ptr + bytes > a->base + a->size || (want && &a->owner->base != want))
        return dev_err_set(e, MEMRA_E_INVAL, "%s on stream '%s' (%s): %s %p (+%zu B) is not inside a live "
                           "allocation%s%s", op->name, s->base.name, s->base.dev->name, which, ptr, bytes,
                           want ? " of " : "", want ? want->name : "");
    *out = a;
    return 0;
}

static int run_copy(cpu_stream *s, cpu_op *op, dev_err *e)
{
    cpu_platform *p = cpu_plat(s->base.dev->plat);
    int k = op->u.c.kind;
    cpu_alloc *da = NULL, *sa = NULL;
    pthread_mutex_lock(&p->reg_lock);
    int rc = 0;
    if (k != DEV_COPY_D2H)
        rc = copy_end__(p, s, op, op->u.c.dst, op->u.c.bytes, k == DEV_COPY_H2D ? NULL : op->u.c.dst_dev, "dst",
                        &da, e);
    if (!rc && k != DEV_COPY_H2D)
        rc = copy_end__(p, s, op, op->u.c.src, op->u.c.bytes, k == DEV_COPY_D2H ? NULL : op->u.c.src_dev, "src",
                        &sa, e);
    if (!rc && atomic_load_explicit(&p->race_on, memory_order_relaxed)) {
        if (sa)
            cpu_race_access__(p, sa, op->u.c.src, op->u.c.bytes, DEV_READ, op->slot, &op->vc, s->base.name,
                              op->name);
        if (da)
            cpu_race_access__(p, da, op->u.c.dst, op->u.c.bytes, DEV_WRITE, op->slot, &op->vc, s->base.name,
                              op->name);
    }
    pthread_mutex_unlock(&p->reg_lock);
    if (rc)
        return rc;
    memmove(op->u.c.dst, op->u.c.src, op->u.c.bytes);
    if (k == DEV_COPY_PEER)
        atomic_fetch_add_explicit(&s->base.dev->peer_copy_bytes, op->u.c.bytes, memory_order_relaxed);
    return 0;
}

/* A kernel of a device MEMRA_CPU_SLOW slows: run it, then sleep (slow - 1) times its time, so the device
 * takes slow times as long and leaves the host's cores to the other devices meanwhile (a slower accelerator). */
static void run_slow_kernel(cpu_op *op, int slow)
{
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    op->u.k.fn(op->u.k.args);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const long long ns = (long long)(t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec);
    const long long nap = ns * (slow - 1);
    struct timespec d = {(time_t)(nap / 1000000000LL), (long)(nap % 1000000000LL)};
    while (nanosleep(&d, &d) != 0) /* EINTR: sleep the rest */
        ;
}

static void run_op(cpu_stream *s, cpu_op *op, int failed, dev_err *e)
{
    switch (op->kind) {
    case CPU_OP_KERNEL:
        if (failed || check_kernel(s, op, e))
            return;
        if (cpu_dev(s->base.dev)->slow > 1)
            run_slow_kernel(op, cpu_dev(s->base.dev)->slow);
        else
            op->u.k.fn(op->u.k.args);
        atomic_fetch_add_explicit(&s->base.dev->kernels_run, 1, memory_order_relaxed);
        return;
    case CPU_OP_HOSTFN: /* runs even after a failure: completion notices must not hang their waiters */
        op->u.h.fn(op->u.h.arg);
        return;
    case CPU_OP_COPY:
        if (!failed)
            run_copy(s, op, e);
        return;
    case CPU_OP_RECORD: {
        cpu_mark *m = op->u.ev.mark;
        pthread_mutex_lock(&s->lock);
        dev_err se = s->err;
        pthread_mutex_unlock(&s->lock);
        pthread_mutex_lock(&m->m);
        m->err = se;
        m->done = 1;
        pthread_cond_broadcast(&m->c); /* handoff to waiters: ordered by m->m */
        pthread_mutex_unlock(&m->m);
        return;
    }
    case CPU_OP_WAIT: {
        cpu_mark *m = op->u.ev.mark;
        dev_err me = { 0, "" };
        if (mark_wait(m, &me) && !failed)
            dev_err_set(e, me.code, "stream '%s' waited on an event recorded by failed stream '%s': %s",
                        s->base.name, m->stream, me.msg);
        return;
    }
    }
}

static void *worker(void *arg)
{
    cpu_stream *s = arg;
    cpu_platform *p = cpu_plat(s->base.dev->plat);
    char tname[16]; /* "<device>/<stream>" truncated to the kernel's 15 characters, for debuggers and top */
    snprintf(tname, sizeof tname, "%.6s/%.8s", s->base.dev->name, s->base.name);
    pthread_setname_np(pthread_self(), tname);
    for (;;) {
        pthread_mutex_lock(&s->lock);
        while (!s->head && !s->stop)
            pthread_cond_wait(&s->cv_work, &s->lock);
        if (!s->head) {
            pthread_mutex_unlock(&s->lock);
            break;
        }
        cpu_op *op = s->head; /* ordered by s->lock: submit appended it */
        s->head = op->next;
        if (!s->head)
            s->tail = NULL;
        int failed = s->err.code;
        pthread_mutex_unlock(&s->lock);

        dev_op_hook hook = atomic_load(&p->hook);
        if (hook)
            hook(atomic_load(&p->hook_ctx), &s->base, op->name);
        dev_err e = { 0, "" };
        run_op(s, op, failed, &e);
        if (op->kind == CPU_OP_RECORD || op->kind == CPU_OP_WAIT)
            mark_unref(op->u.ev.mark);
        free(op->vc.t);
        free(op);

        pthread_mutex_lock(&s->lock);
        if (e.code)
            stream_fail__(s, e.code, e.msg);
        s->done++;
        const int wake = s->done >= s->wake_at; /* a waiter's op is done: wake them, not on every op */
        if (wake)
            s->wake_at = UINT64_MAX; /* the waiters still short of their target set it again */
        pthread_mutex_unlock(&s->lock);
        /* handoff to stream_sync: `done` is ordered by s->lock; the wake-up after the unlock, so a waiter sharing
         * this core does not wake only to block on the lock */
        if (wake)
            pthread_cond_broadcast(&s->cv_done);
    }
    return NULL;
}

/* ---- streams ---- */

dev_stream *cpu_stream_create(dev_device *d, const char *name, dev_err *err)
{
    cpu_platform *p = cpu_plat(d->plat);
    cpu_stream *s = calloc(1, sizeof *s);
    if (!s) {
        dev_err_set(err, MEMRA_E_NOMEM, "dev_stream_create on %s: out of memory", d->name);
        return NULL;
    }
    dev_stream_base_init(&s->base, d, name);
    pthread_mutex_lock(&p->vc_lock);
    int rc = cpu_slot_acquire__(p, s->base.name, &s->slot);
    if (!rc) {
        memcpy(s->vc, p->host_vc, sizeof s->vc);
        s->vc[s->slot] = p->slot_tick[s->slot];
    }
    pthread_mutex_unlock(&p->vc_lock);
    if (rc) {
        dev_err_set(err, MEMRA_E_FULL, "dev_stream_create on %s: more than %d live streams", d->name,
                    CPU_MAX_SLOTS - 1);
        free(s);
        return NULL;
    }
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cv_work, NULL);
    pthread_cond_init(&s->cv_done, NULL);
    s->wake_at = UINT64_MAX;
    if (pthread_create(&s->th, NULL, worker, s)) {
        dev_err_set(err, MEMRA_E_DEVICE, "dev_stream_create on %s: pthread_create failed", d->name);
        pthread_mutex_lock(&p->vc_lock);
        cpu_slot_release__(p, s->slot);
        pthread_mutex_unlock(&p->vc_lock);
        pthread_mutex_destroy(&s->lock);
        pthread_cond_destroy(&s->cv_work);
        pthread_cond_destroy(&s->cv_done);
        free(s);
        return NULL;
    }
    return &s->base;
}

int cpu_stream_sync(dev_stream *bs, dev_err *err)
{
    cpu_stream *s = (cpu_stream *)bs;
    cpu_platform *p = cpu_plat(bs->dev->plat);
    pthread_mutex_lock(&s->lock);
    uint64_t target = s->enq;
    while (s->done < target) {
        if (target < s->wake_at)
            s->wake_at = target; /* the worker wakes the waiters once done reaches it */
        pthread_cond_wait(&s->cv_done, &s->lock);
    }
    int code = s->err.code;
    if (code)
        dev_err_set(err, code, "%s", s->err.msg);
    pthread_mutex_lock(&p->vc_lock);
    cpu_vc_join(p->host_vc, s->vc, p->n_slots); /* the host now knows everything enqueued on s */
    pthread_mutex_unlock(&p->vc_lock);
    pthread_mutex_unlock(&s->lock);
    return code;
}

void cpu_stream_destroy(dev_stream *bs)
{
    cpu_stream *s = (cpu_stream *)bs;
    cpu_platform *p = cpu_plat(bs->dev->plat);
    cpu_stream_sync(bs, NULL);
    pthread_mutex_lock(&s->lock);
    s->stop = 1;
    pthread_cond_signal(&s->cv_work);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->th, NULL);
    pthread_mutex_lock(&p->vc_lock);
    cpu_slot_release__(p, s->slot);
    pthread_mutex_unlock(&p->vc_lock);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->cv_work);
    pthread_cond_destroy(&s->cv_done);
    free(s);
}

/* ---- events ---- */

dev_event *cpu_event_create(dev_device *d, dev_err *err)
{
    cpu_event *e = calloc(1, sizeof *e);
    if (!e) {
        dev_err_set(err, MEMRA_E_NOMEM, "dev_event_create on %s: out of memory", d->name);
        return NULL;
    }
    e->base.dev = d;
    pthread_mutex_init(&e->lock, NULL);
    return &e->base;
}

void cpu_event_destroy(dev_event *be)
{
    cpu_event *e = (cpu_event *)be;
    mark_unref(e->latest); /* a pending record op keeps its own reference */
    pthread_mutex_destroy(&e->lock);
    free(e);
}

int cpu_event_record(dev_event *be, dev_stream *bs)
{
    cpu_event *e = (cpu_event *)be;
    cpu_stream *s = (cpu_stream *)bs;
    cpu_mark *m = mark_new(bs->name);
    cpu_op *op = m ? op_new(s, CPU_OP_RECORD, "event_record") : NULL;
    if (!op) {
        mark_unref(m);
        return enqueue_fail(s, MEMRA_E_NOMEM, "dev_event_record_async on '%s': out of memory", bs->name);
    }
    mark_ref(m); /* one for the op, one for the event */
    op->u.ev.mark = m;
    int rc = submit(s, op, NULL, m);
    if (rc) {
        mark_unref(m);
        mark_unref(m);
        return rc;
    }
    pthread_mutex_lock(&e->lock); /* waits enqueued after this see m (ordered by e->lock) */
    cpu_mark *old = e->latest;
    e->latest = m;
    pthread_mutex_unlock(&e->lock);
    mark_unref(old);
    return 0;
}

int cpu_stream_wait_event(dev_stream *bs, dev_event *be)
{
    cpu_stream *s = (cpu_stream *)bs;
    cpu_mark *m = event_latest_ref((cpu_event *)be);
    if (!m)
        return 0; /* never recorded: no-op (CUDA semantics) */
    cpu_op *op = op_new(s, CPU_OP_WAIT, "event_wait");
    if (!op) {
        mark_unref(m);
        return MEMRA_E_NOMEM;
    }
    op->u.ev.mark = m; /* the op owns this reference */
    return submit(s, op, m, NULL);
}

int cpu_event_sync(dev_event *be, dev_err *err)
{
    cpu_mark *m = event_latest_ref((cpu_event *)be);
    if (!m)
        return 0;
    int code = mark_wait(m, err);
    host_join(cpu_plat(be->dev->plat), &m->vc);
    mark_unref(m);
    return code;
}

int cpu_event_query(dev_event *be)
{
    cpu_mark *m = event_latest_ref((cpu_event *)be);
    if (!m)
        return 1;
    pthread_mutex_lock(&m->m);
    int done = m->done, code = m->err.code;
    pthread_mutex_unlock(&m->m);
    if (done)
        host_join(cpu_plat(be->dev->plat), &m->vc);
    mark_unref(m);
    return !done ? 0 : code ? code : 1;
}

/* ---- copies, kernels, host callbacks ---- */

static const char *copy_name[] = { "copy_h2d", "copy_d2h", "copy_d2d", "copy_peer" };

int cpu_copy_async(dev_stream *bs, int kind, void *dst, dev_device *dst_dev, const void *src, dev_device *src_dev,
                   size_t bytes)
{
    cpu_stream *s = (cpu_stream *)bs;
    if (!dst || !src)
        return enqueue_fail(s, MEMRA_E_INVAL, "%s on stream '%s': NULL %s", copy_name[kind], bs->name,
                            dst ? "src" : "dst");
    if (bytes == 0)
        return 0;
    cpu_op *op = op_new(s, CPU_OP_COPY, copy_name[kind]);
    if (!op)
        return MEMRA_E_NOMEM;
    op->u.c.kind = kind;
    op->u.c.dst = dst;
    op->u.c.src = src;
    op->u.c.bytes = bytes;
    op->u.c.dst_dev = dst_dev;
    op->u.c.src_dev = src_dev;
    return submit(s, op, NULL, NULL);
}

int cpu_launch(dev_stream *bs, const char *name, dev_cpu_fn fn, const void *args, size_t args_bytes,
               const dev_access *acc, int n_acc)
{
    cpu_stream *s = (cpu_stream *)bs;
    const char *nm = name ? name : "kernel";
    if (!fn || args_bytes > DEV_ARGS_MAX || (args_bytes && !args) || n_acc < 0 || n_acc > DEV_ACCESS_MAX ||
        (n_acc && !acc))
        return enqueue_fail(s, MEMRA_E_INVAL, "kernel '%s' on stream '%s': bad launch (fn %s, args %zu B of "
                            "max %d, %d accesses of max %d)", nm, bs->name, fn ? "set" : "NULL", args_bytes,
                            DEV_ARGS_MAX, n_acc, DEV_ACCESS_MAX);
    for (int i = 0; i < n_acc; i++)
        if (acc[i].mode < DEV_READ || acc[i].mode > DEV_RW || !acc[i].ptr)
            return enqueue_fail(s, MEMRA_E_INVAL, "kernel '%s' on stream '%s': access %d has mode %d / ptr %p "
                                "(allowed: DEV_READ, DEV_WRITE, DEV_RW on a non-NULL ptr)", nm, bs->name, i,
                                acc[i].mode, acc[i].ptr);
    cpu_op *op = op_new(s, CPU_OP_KERNEL, nm);
    if (!op)
        return MEMRA_E_NOMEM;
    op->u.k.fn = fn;
    if (args_bytes)
        memcpy(op->u.k.args, args, args_bytes);
    op->u.k.n_acc = n_acc;
    if (n_acc)
        memcpy(op->u.k.acc, acc, (size_t)n_acc * sizeof *acc);
    return submit(s, op, NULL, NULL);
}

int cpu_host_fn(dev_stream *bs, void (*fn)(void *), void *arg)
{
    cpu_stream *s = (cpu_stream *)bs;
    cpu_op *op = op_new(s, CPU_OP_HOSTFN, "host_fn");
    if (!op)
        return MEMRA_E_NOMEM;
    op->u.h.fn = fn;
    op->u.h.arg = arg;
    return submit(s, op, NULL, NULL);
}
