/* Runtime tracing (see trace.h): per-thread record buffers and the Chrome Trace Event JSON export.
 *
 * Shared state and who touches it:
 *   act_trace_flag, gen              act_trace_start/stop write [ctl_lock]; trace points read (relaxed / acquire)
 *   ctl.owner, file, t_start, n_stages   act_trace_start/stop only [ctl_lock]
 *   ctl.extra, extra_ctx             act_trace_set_extra sets, act_trace_stop calls and clears [ctl_lock]
 *   registry (bufs list)             threads append, claim dead threads' buffers; stop walks it [reg_lock]
 *   tbuf.chunk[], records, n, dropped  the owning thread writes (single writer: it mallocs chunk c before it
 *                                    publishes a record in it); stop reads records [0 .. n) after an acquire load
 *                                    of n. A thread resets its buffer itself when it sees a new gen (its chunks
 *                                    stay allocated for the next trace).
 *   tbuf.alive                       set on claim [reg_lock], cleared by the thread's exit (key destructor) */
#include "actors/trace.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

_Atomic int act_trace_flag;
_Thread_local int act_trace_group_tl = -1;
_Thread_local uint64_t act_trace_step_tl = UINT64_MAX;

typedef struct tbuf {
    struct tbuf *next;           /* registry link [reg_lock] */
    _Atomic int alive;           /* a live thread owns this buffer */
    _Atomic uint64_t gen;        /* the trace its records belong to (written by the owner) */
    _Atomic uint64_t n;          /* records written (release by the owner) */
    _Atomic uint64_t dropped;    /* records lost to a full buffer */
    act_trace_rec *chunk[ACT_TRACE_BUF_CHUNKS]; /* record i is chunk[i / ACT_TRACE_BUF_RECS][i % ...] */
} tbuf;

static pthread_mutex_t ctl_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static tbuf *bufs;
static _Atomic uint64_t gen;
static struct {
    const void *owner;
    FILE *file;
    char path[1024];
    uint64_t t_start;
    int n_stages;
    act_trace_extra_fn extra; /* events from outside the runtime (act_trace_set_extra), or NULL */
    void *extra_ctx;
} ctl;
static pthread_key_t exit_key;
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;
static _Thread_local tbuf *tl;

static const char *const names[ACT_TR_N_NAMES] = {
    [ACT_TR_WALK] = "walk", [ACT_TR_ENQUEUE] = "enqueue", [ACT_TR_MAILBOX_WAIT] = "mailbox wait",
    [ACT_TR_HOP] = "hop", [ACT_TR_READBACK] = "readback", [ACT_TR_CREDIT_WAIT] = "credit wait",
    [ACT_TR_FEED_WAIT] = "feed wait", [ACT_TR_REQ_QUEUED] = "queued", [ACT_TR_REQ_FIRST] = "first token",
    [ACT_TR_REQ_DONE] = "done", [ACT_TR_SUBMIT] = "submit", [ACT_TR_INFLIGHT] = "steps in flight", [ACT_TR_ROWS] = "rows per step", [ACT_TR_CREDITS] = "credits held",
    [ACT_TR_STEP_REQS] = "requests",
};

int act_trace_n_buffers(void)
{
    pthread_mutex_lock(&reg_lock);
    int n = 0;
    for (const tbuf *b = bufs; b; b = b->next)
        n++;
    pthread_mutex_unlock(&reg_lock);
    return n;
}

const char *act_trace_name_str(int n) { return n >= 0 && n < ACT_TR_N_NAMES ? names[n] : "?"; }

uint64_t act_trace_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A thread exits: its buffer may be claimed by a later thread (its records stay until the next trace). */
static void thread_exit(void *p) { atomic_store(&((tbuf *)p)->alive, 0); }
static void make_key(void) { pthread_key_create(&exit_key, thread_exit); }

/* This thread's buffer: a dead thread's, else a new one; NULL when out of memory. */
static tbuf *claim(void)
{
    pthread_once(&exit_once, make_key);
    tbuf *b = NULL;
    pthread_mutex_lock(&reg_lock);
    for (tbuf *o = bufs; o && !b; o = o->next)
        if (!atomic_load(&o->alive))
            b = o;
    if (b) {
        atomic_store(&b->alive, 1);
    } else if ((b = calloc(1, sizeof *b)) != NULL) {
        if (!(b->chunk[0] = malloc(ACT_TRACE_BUF_RECS * sizeof *b->chunk[0]))) {
            free(b);
            pthread_mutex_unlock(&reg_lock);
            return NULL;
        }
        atomic_init(&b->alive, 1);
        atomic_init(&b->gen, 0);
        atomic_init(&b->n, 0);
        atomic_init(&b->dropped, 0);
        b->next = bufs;
        bufs = b;
    }
    pthread_mutex_unlock(&reg_lock);
    if (b)
        pthread_setspecific(exit_key, b);
    return b;
}

void act_trace_put(const act_trace_rec *r)
{
    tbuf *b = tl;
    if (!b && !(b = tl = claim()))
        return;
    uint64_t g = atomic_load_explicit(&gen, memory_order_acquire);
    if (atomic_load_explicit(&b->gen, memory_order_relaxed) != g) { /* a new trace: this thread resets its own */
        atomic_store_explicit(&b->n, 0, memory_order_relaxed);
        atomic_store_explicit(&b->dropped, 0, memory_order_relaxed);
        atomic_store_explicit(&b->gen, g, memory_order_release);
    }
    uint64_t n = atomic_load_explicit(&b->n, memory_order_relaxed);
    const uint64_t c = n / ACT_TRACE_BUF_RECS;
    if (c >= ACT_TRACE_BUF_CHUNKS ||
        (!b->chunk[c] && !(b->chunk[c] = malloc(ACT_TRACE_BUF_RECS * sizeof *b->chunk[c])))) {
        atomic_store_explicit(&b->dropped, atomic_load_explicit(&b->dropped, memory_order_relaxed) + 1,
                              memory_order_relaxed);
        return;
    }
    b->chunk[c][n % ACT_TRACE_BUF_RECS] = *r;
    /* ordered by n: act_trace_stop reads r[0 .. n) after its acquire load */
    atomic_store_explicit(&b->n, n + 1, memory_order_release);
}

int act_trace_start(const void *owner, const char *path, int n_stages, dev_err *err)
{
    if (!owner || !path || !path[0])
        return dev_err_set(err, MEMRA_E_INVAL, "trace: need an owner and a non-empty output path");
    if (strlen(path) >= sizeof ctl.path)
        return dev_err_set(err, MEMRA_E_INVAL, "trace: output path longer than %zu bytes", sizeof ctl.path - 1);
    pthread_mutex_lock(&ctl_lock);
    int r = 0;
    if (ctl.owner) {
        r = dev_err_set(err, MEMRA_E_STATE, "trace: a trace already records to %s (one per process)", ctl.path);
        goto out;
    }
    FILE *f = fopen(path, "w");
    if (!f) {
        r = dev_err_set(err, MEMRA_E_INVAL, "trace: cannot open %s for writing", path);
        goto out;
    }
    ctl.owner = owner;
    ctl.file = f;
    snprintf(ctl.path, sizeof ctl.path, "%s", path);
    ctl.n_stages = n_stages;
    ctl.t_start = act_trace_now_ns();
    atomic_fetch_add(&gen, 1); /* before the flag: a trace point that sees it on writes under the new gen */
    atomic_store(&act_trace_flag, 1);
out:
    pthread_mutex_unlock(&ctl_lock);
    return r;
}

int act_trace_set_extra(act_trace_extra_fn fn, void *ctx)
{
    pthread_mutex_lock(&ctl_lock);
    const int ok = ctl.owner && !ctl.extra;
    if (ok)
        ctl.extra = fn, ctl.extra_ctx = ctx;
    pthread_mutex_unlock(&ctl_lock);
    return ok ? 0 : MEMRA_E_STATE;
}

int act_trace_owned_by(const void *owner)
{
    pthread_mutex_lock(&ctl_lock);
    int o = owner && ctl.owner == owner;
    pthread_mutex_unlock(&ctl_lock);
    return o;
}

/* ---- export ---- */

typedef struct ev {
    uint64_t ts;
    int order;   /* at equal ts: ends (0) before instants (1) before begins (2) */
    int phase;   /* 'B', 'E', 'b', 'e', 'i', 'C', 's', 't', 'f'; 'R': a step's requests (grp) */
    const act_trace_rec *r;
    act_trace_rec *const *grp; /* 'R': the step's ACT_TR_STEP_REQS records, n_grp of them */
    size_t n_grp;
} ev;

static int ev_cmp(const void *x, const void *y)
{
    const ev *a = x, *b = y;
    if (a->ts != b->ts)
        return a->ts < b->ts ? -1 : 1;
    return a->order - b->order;
}

static int rec_step_cmp(const void *x, const void *y)
{
    const act_trace_rec *a = *(act_trace_rec *const *)x, *b = *(act_trace_rec *const *)y;
    if (a->step != b->step)
        return a->step < b->step ? -1 : 1;
    return (int)a->track - (int)b->track; /* stage 0's stream, 1's, ..., then the readback */
}

static void track_name(int t, char *buf, size_t n)
{
    if (t >= ACT_TRACE_STAGE(0) && t < ACT_TRACE_STREAM(0))
        snprintf(buf, n, "stage %d actor", t - ACT_TRACE_STAGE(0));
    else if (t >= ACT_TRACE_STREAM(0) && t < ACT_TRACE_HOP(0))
        snprintf(buf, n, "stage %d stream", t - ACT_TRACE_STREAM(0));
    else if (t >= ACT_TRACE_HOP(0) && t < ACT_TRACE_READBACK)
        snprintf(buf, n, "boundary %d hops", t - ACT_TRACE_HOP(0));
    else if (t == ACT_TRACE_READBACK)
        snprintf(buf, n, "readback");
    else if (t == ACT_TRACE_SCHED)
        snprintf(buf, n, "scheduler");  /* requests, and every step's submit */
    else
        snprintf(buf, n, "runtime");
}

/* The args object of r (names per act_trace_name). */
static void put_args(FILE *f, const act_trace_rec *r)
{
    char step[32] = "";
    if (r->step != UINT64_MAX)
        snprintf(step, sizeof step, "\"step\":%" PRIu64 ",", r->step);
    switch (r->name) {
    case ACT_TR_WALK:
        fprintf(f, "{%s\"rows\":%d,\"kind\":%d,\"head\":%d}", step, r->a, r->b, r->c);
        break;
    case ACT_TR_ENQUEUE:
        fprintf(f, "{%s\"rows\":%d,\"slot_in\":%d,\"slot_out\":%d}", step, r->a, r->b, r->c);
        break;
    case ACT_TR_HOP: fprintf(f, "{%s\"slot\":%d}", step, r->c); break;
    case ACT_TR_READBACK: fprintf(f, "{%s\"rows\":%d}", step, r->a); break;
    case ACT_TR_CREDIT_WAIT: fprintf(f, "{%s\"slot\":%d,\"cause\":\"credit\"}", step, r->c); break;
    case ACT_TR_FEED_WAIT: fprintf(f, "{%s\"cause\":\"feed\"}", step); break;
    case ACT_TR_REQ_QUEUED:
    case ACT_TR_REQ_FIRST: fprintf(f, "{\"req\":%d}", r->a); break;
    case ACT_TR_REQ_DONE: fprintf(f, "{\"req\":%d,\"status\":%d}", r->a, r->b); break;
    case ACT_TR_SUBMIT: fprintf(f, "{%s\"rows\":%d,\"group\":%d,\"kind\":%d}", step, r->a, r->b, r->c); break;
    case ACT_TR_INFLIGHT:
    case ACT_TR_CREDITS:
    case ACT_TR_ROWS: fprintf(f, "{\"value\":%d}", r->a); break;
    default: fprintf(f, "{}"); break;
    }
}

static void put_us(FILE *f, uint64_t t, uint64_t t_start)
{
    uint64_t d = t > t_start ? t - t_start : 0;
    fprintf(f, "%" PRIu64 ".%03u", d / 1000, (unsigned)(d % 1000));
}

static int write_json(FILE *f, act_trace_rec **recs, size_t n, uint64_t t_start, int n_stages, uint64_t dropped,
                      int threads)
{
    int r = 0;
    ev *evs = NULL;
    act_trace_rec **by_step = NULL, **reqs = NULL;
    size_t n_ev = 0, cap = 2 * n + 1;
    if (!(evs = malloc(cap * 2 * sizeof *evs)) || !(by_step = malloc((n + 1) * sizeof *by_step)) ||
        !(reqs = malloc((n + 1) * sizeof *reqs))) {
        r = MEMRA_E_NOMEM;
        goto fail;
    }
    /* flows: each step's walks and readback in time order: s, t ..., f */
    size_t n_flow = 0;
    for (size_t i = 0; i < n; i++)
        if (recs[i]->step != UINT64_MAX && (recs[i]->name == ACT_TR_WALK || recs[i]->name == ACT_TR_READBACK))
            by_step[n_flow++] = recs[i];
    qsort(by_step, n_flow, sizeof *by_step, rec_step_cmp);
    size_t n_reqs = 0; /* the scheduler's step -> requests records, one event per step */
    for (size_t i = 0; i < n; i++)
        if (recs[i]->name == ACT_TR_STEP_REQS && recs[i]->step != UINT64_MAX)
            reqs[n_reqs++] = recs[i];
    qsort(reqs, n_reqs, sizeof *reqs, rec_step_cmp);
    for (size_t i = 0, j; i < n_reqs; i = j) {
        for (j = i + 1; j < n_reqs && reqs[j]->step == reqs[i]->step;)
            j++;
        evs[n_ev++] = (ev){reqs[i]->t0, 1, 'R', reqs[i], reqs + i, j - i};
    }
    for (size_t i = 0; i < n; i++) {
        const act_trace_rec *x = recs[i];
        if (x->name == ACT_TR_STEP_REQS)
            continue;
        switch (x->type) {
        case ACT_TR_SPAN:
            evs[n_ev++] = (ev){x->t0, 2, 'B', x, NULL, 0};
            evs[n_ev++] = (ev){x->t1, 0, 'E', x, NULL, 0};
            break;
        case ACT_TR_ASYNC:
            evs[n_ev++] = (ev){x->t0, 2, 'b', x, NULL, 0};
            evs[n_ev++] = (ev){x->t1, 0, 'e', x, NULL, 0};
            break;
        case ACT_TR_INSTANT: evs[n_ev++] = (ev){x->t0, 1, 'i', x, NULL, 0}; break;
        default: evs[n_ev++] = (ev){x->t0, 1, 'C', x, NULL, 0}; break;
        }
    }
    uint64_t t_flow = 0; /* a flow point lies inside its span, never before the step's previous point */
    for (size_t i = 0; i < n_flow; i++) {
        const act_trace_rec *x = by_step[i];
        int first = i == 0 || by_step[i - 1]->step != x->step;
        int last = i + 1 == n_flow || by_step[i + 1]->step != x->step;
        t_flow = first || x->t0 > t_flow ? x->t0 : t_flow;
        t_flow = t_flow < x->t1 ? t_flow : x->t1;
        if (!(first && last)) /* a step seen once links nothing */
            evs[n_ev++] = (ev){t_flow, 3, first ? 's' : last ? 'f' : 't', x, NULL, 0};
    }
    qsort(evs, n_ev, sizeof *evs, ev_cmp);
    fprintf(f, "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"producer\":\"memra\",\"stages\":%d,\"dropped\":%" PRIu64
               ",\"records\":%zu,\"threads\":%d},\n\"traceEvents\":[\n",
            n_stages, dropped, n, threads);
    /* a track per stage actor, stage stream and boundary, the readback and the scheduler, named and ordered */
    int sep = 0;
    for (int t = 1; t <= ACT_TRACE_RUNTIME; t++) {
        int want = (t >= ACT_TRACE_STAGE(0) && t < ACT_TRACE_STAGE(n_stages)) ||
                   (t >= ACT_TRACE_STREAM(0) && t < ACT_TRACE_STREAM(n_stages)) ||
                   (t >= ACT_TRACE_HOP(0) && t < ACT_TRACE_HOP(n_stages - 1)) || t >= ACT_TRACE_READBACK;
        if (!want)
            continue;
        char name[64];
        track_name(t, name, sizeof name);
        fprintf(f, "%s{\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"name\":\"thread_name\",\"args\":{\"name\":\"%s\"}},\n"
                   "{\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":%d}}",
                sep ? ",\n" : "", t, name, t, t);
        sep = 1;
    }
    fprintf(f, "%s{\"ph\":\"M\",\"pid\":1,\"name\":\"process_name\",\"args\":{\"name\":\"memra\"}}", sep ? ",\n" : "");
    for (size_t i = 0; i < n_ev; i++) {
        const ev *e = &evs[i];
        const act_trace_rec *x = e->r;
        const char *nm = act_trace_name_str(x->name);
        fprintf(f, ",\n{\"ph\":\"%c\",\"pid\":1,\"tid\":%d,\"ts\":", e->phase == 'R' ? 'i' : e->phase, x->track);
        put_us(f, e->ts, t_start);
        if (x->name == ACT_TR_CREDITS) /* a counter per stage */
            fprintf(f, ",\"name\":\"%s stage %d\",\"cat\":\"%s\"", nm, x->b, nm);
        else
            fprintf(f, ",\"name\":\"%s\",\"cat\":\"%s\"", nm, nm);
        switch (e->phase) {
        case 'B':
        case 'i':
        case 'C':
            if (e->phase == 'i')
                fprintf(f, ",\"s\":\"t\"");
            fprintf(f, ",\"args\":");
            put_args(f, x);
            break;
        case 'b':
            fprintf(f, ",\"id\":\"%" PRIu64 ".%d\",\"args\":", x->step, x->track);
            put_args(f, x);
            break;
        case 'e': fprintf(f, ",\"id\":\"%" PRIu64 ".%d\"", x->step, x->track); break;
        case 's':
        case 't':
        case 'f':
            fprintf(f, ",\"id\":%" PRIu64 ",\"bp\":\"e\"", x->step);
            break;
        case 'R': /* the step's requests, every record's ids in one list */
            fprintf(f, ",\"s\":\"t\",\"args\":{\"step\":%" PRIu64 ",\"reqs\":[", x->step);
            for (size_t k = 0, m = 0; k < e->n_grp; k++) {
                const int id[3] = {e->grp[k]->a, e->grp[k]->b, e->grp[k]->c};
                for (int q = 0; q < 3; q++)
                    if (id[q] >= 0)
                        fprintf(f, "%s%d", m++ ? "," : "", id[q]);
            }
            fputs("]}", f);
            break;
        default: break;
        }
        fputc('}', f);
    }
    if (ctl.extra) /* [ctl_lock]: act_trace_stop holds it */
        r = ctl.extra(ctl.extra_ctx, f, t_start);
    fprintf(f, "\n]}\n");
fail:
    free(evs);
    free(by_step);
    free(reqs);
    return r;
}

int act_trace_stop(const void *owner, act_trace_stats *stats, dev_err *err)
{
    pthread_mutex_lock(&ctl_lock);
    int r = 0;
    act_trace_rec **recs = NULL;
    if (!owner || ctl.owner != owner) {
        r = dev_err_set(err, MEMRA_E_STATE, "trace: no trace records for this runtime");
        pthread_mutex_unlock(&ctl_lock);
        return r;
    }
    atomic_store(&act_trace_flag, 0);
    const uint64_t g = atomic_load(&gen);
    size_t n = 0, cap = 0;
    uint64_t dropped = 0;
    int threads = 0;
    pthread_mutex_lock(&reg_lock);
    for (tbuf *b = bufs; b; b = b->next)
        if (atomic_load_explicit(&b->gen, memory_order_acquire) == g)
            cap += atomic_load_explicit(&b->n, memory_order_acquire);
    if (!(recs = malloc((cap + 1) * sizeof *recs))) {
        pthread_mutex_unlock(&reg_lock);
        r = dev_err_set(err, MEMRA_E_NOMEM, "trace: out of host memory exporting %zu records", cap);
        goto fail;
    }
    for (tbuf *b = bufs; b; b = b->next) {
        if (atomic_load_explicit(&b->gen, memory_order_acquire) != g)
            continue;
        /* ordered by n: the owner stored r[i] before publishing i + 1 */
        uint64_t m = atomic_load_explicit(&b->n, memory_order_acquire);
        for (uint64_t i = 0; i < m && n < cap; i++)
            recs[n++] = &b->chunk[i / ACT_TRACE_BUF_RECS][i % ACT_TRACE_BUF_RECS];
        dropped += atomic_load_explicit(&b->dropped, memory_order_relaxed);
        threads++;
    }
    pthread_mutex_unlock(&reg_lock);
    /* a buffer's records stay put until its thread's next record under a new gen, which needs a new start:
     * the ctl lock held here orders that after this export */
    if ((r = write_json(ctl.file, recs, n, ctl.t_start, ctl.n_stages, dropped, threads)) != 0)
        dev_err_set(err, r, "trace: %s exporting %zu records", r == MEMRA_E_NOMEM ? "out of host memory" :
                    "the extra events' source failed", n);
fail:
    if (fclose(ctl.file) != 0 && r == 0)
        r = dev_err_set(err, MEMRA_E_IO, "trace: writing %s failed", ctl.path);
    if (stats)
        *stats = (act_trace_stats){n, dropped, threads};
    ctl.owner = NULL;
    ctl.file = NULL;
    ctl.extra = NULL;
    ctl.extra_ctx = NULL;
    free(recs);
    pthread_mutex_unlock(&ctl_lock);
    return r;
}
