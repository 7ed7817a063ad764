/* memra_server: the serving scheduler (api/api_sched.h) on a thread of its own, fed through a lock-free
 * mailbox (actors/mailbox.h): clients post SUBMIT and CANCEL from any thread; the scheduler thread takes them
 * between steps, keeps M micro-batches in flight, and blocks on the oldest step's result (or on the mailbox
 * when nothing is in flight).
 *
 * Shared mutable state, and who touches it:
 *   srv->mu guards the id table (ids, recs), next_id, stopping, and the stats snapshot;
 *   a srv_rec's sched_req belongs to the scheduler thread from its SUBMIT until its end (then to the waiter);
 *   sched_req.cancel: any thread sets it (atomic), the scheduler reads it;
 *   sched_req.done: the scheduler sets it when the request ends; waiters wait on it (its release/acquire orders
 *   rq->out / n_out / status before the wait returns). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "actors/mailbox.h"
#include "api/api_sched.h"

enum { SRV_MSG_SUBMIT = ACT_MSG_USER, SRV_MSG_CANCEL, SRV_MSG_STOP };

typedef struct srv_rec {
    sched_req r;
    memra_token *prompt;          /* the server's copy */
    memra_server_token_fn on_token;
    void *user;
    struct srv_rec *next;         /* id table chain [srv->mu] */
} srv_rec;

#define SRV_BUCKETS 1024

struct memra_server {
    memra_runtime *rt;
    sched *s;                     /* the scheduler thread's */
    act_mailbox *mb;
    act_msg *stop_msg;            /* taken at create, so that memra_server_free cannot fail to stop the thread */
    pthread_t thread;
    pthread_mutex_t mu;
    srv_rec *table[SRV_BUCKETS];  /* by id [mu] */
    int64_t next_id;              /* [mu] */
    int stopping;                 /* [mu] */
    memra_server_stats stats;     /* snapshot [mu] */
    uint64_t submitted;           /* [mu] */
};

memra_server_params memra_server_default_params(void)
{
    return (memra_server_params){0};
}

static int srv_emit(sched_req *r, memra_token t, const char *piece, int n_piece)
{
    srv_rec *x = (srv_rec *)r;
    return x->on_token ? x->on_token(x->user, r->id, t, piece, n_piece) : 0;
}

static void publish_stats(memra_server *srv);

/* A request ended (scheduler thread): the stats count it, then its waiter may go. */
static void srv_on_end(void *ctx, sched_req *r)
{
    publish_stats(ctx);
    act_future_set(&r->done, NULL); /* orders rq->out / n_out / status before the waiter's return */
}

static void publish_stats(memra_server *srv)
{
    sched_stats st;
    sched_get_stats(srv->s, &st);
    pthread_mutex_lock(&srv->mu);
    memra_server_stats *o = &srv->stats;
    o->submitted = srv->submitted;
    o->ended = st.ended;
    o->cancelled = st.cancelled;
    o->steps = st.steps;
    o->rows = st.rows;
    o->decode_rows = st.decode_rows;
    o->prompt_rows = st.prompt_rows;
    o->mixed_steps = st.mixed_steps;
    o->argmax_steps = st.argmax_steps;
    o->max_step_rows = st.max_step_rows;
    o->waiting = st.waiting;
    o->running = st.running;
    pthread_mutex_unlock(&srv->mu);
}

/* One client message on the scheduler thread. Returns 1 for STOP. */
static int handle(memra_server *srv, act_msg *m)
{
    sched_req *r = NULL;
    memcpy(&r, m->payload, sizeof r);
    const int kind = m->kind;
    act_msg_free(m);
    if (kind == SRV_MSG_STOP)
        return 1;
    if (kind == SRV_MSG_SUBMIT)
        sched_add(srv->s, r); /* ordered by the mailbox: the client filled r before posting */
    /* SRV_MSG_CANCEL: the flag is already set; this message only wakes the thread so that a waiting request
     * ends now rather than at the next step */
    return 0;
}

/* The scheduler thread: client messages between steps, then the oldest step's result (or sleep). */
static void *srv_main(void *arg)
{
    memra_server *srv = arg;
    int stop = 0;
    for (;;) {
        for (act_msg *m; (m = act_mailbox_try_take(srv->mb)) != NULL;)
            stop |= handle(srv, m);
        if (stop)
            break;
        sched_pump(srv->s); /* a failed submit ends its requests with the error; the server goes on */
        publish_stats(srv);
        const int g = sched_oldest(srv->s);
        if (g >= 0) {
            sched_complete(srv->s, g); /* blocks on that step's result; the other groups' steps run meanwhile */
            continue;
        }
        stop |= handle(srv, act_mailbox_take(srv->mb)); /* nothing in flight: sleep until a client posts */
        if (stop)
            break;
    }
    sched_destroy(srv->s, MEMRA_E_ABORTED); /* every request left ends (steps in flight waited first) */
    srv->s = NULL;
    return NULL;
}

static int post(memra_server *srv, int kind, sched_req *r)
{
    dev_err err = {0};
    act_msg *m = act_mailbox_msg_alloc(srv->mb, 1, &err);
    if (!m)
        return api_fail(&srv->rt->err, err.code ? err.code : MEMRA_E_NOMEM, "memra_server: %s", err.msg);
    m->kind = kind;
    memcpy(m->payload, &r, sizeof r);
    act_mailbox_post(srv->mb, m);
    return MEMRA_OK;
}

memra_server *memra_server_create(memra_runtime *rt, const memra_server_params *params)
{
    if (!rt) {
        api_fail(NULL, MEMRA_E_INVAL, "memra_server_create: runtime is NULL");
        return NULL;
    }
    memra_server_params p = params ? *params : memra_server_default_params();
    sched_params sp = sched_default_params(rt);
    if (p.micro_batches < 0 || p.step_rows < 0 || p.prompt_chunk < 0) {
        api_fail(&rt->err, MEMRA_E_INVAL, "memra_server_create: micro_batches = %d, step_rows = %d, prompt_chunk = %d "
                 "(each >= 0, 0 = the default)", p.micro_batches, p.step_rows, p.prompt_chunk);
        return NULL;
    }
    if (p.micro_batches)
        sp.groups = p.micro_batches;
    if (p.step_rows)
        sp.step_rows = p.step_rows;
    sp.prompt_chunk = p.prompt_chunk;
    memra_server *srv = calloc(1, sizeof *srv);
    dev_err err = {0};
    if (!srv) {
        api_fail(&rt->err, MEMRA_E_NOMEM, "memra_server_create: out of host memory");
        return NULL;
    }
    srv->rt = rt;
    srv->next_id = 1;
    pthread_mutex_init(&srv->mu, NULL);
    if (!(srv->s = sched_create(rt, &sp))) /* the error names the field */
        goto fail;
    sched_set_on_end(srv->s, srv_on_end, srv);
    srv->stats.micro_batches = sp.groups;
    if (!(srv->mb = act_mailbox_create("server", NULL, &err)) ||
        !(srv->stop_msg = act_mailbox_msg_alloc(srv->mb, 1, &err))) {
        api_fail_err(&rt->err, &err);
        goto fail;
    }
    srv->stop_msg->kind = SRV_MSG_STOP;
    memset(srv->stop_msg->payload, 0, sizeof(sched_req *));
    if (pthread_create(&srv->thread, NULL, srv_main, srv) != 0) {
        api_fail(&rt->err, MEMRA_E_NOMEM, "memra_server_create: could not start the scheduler thread");
        goto fail;
    }
    return srv;
fail:
    if (srv->stop_msg)
        act_msg_free(srv->stop_msg);
    if (srv->mb)
        act_mailbox_destroy(srv->mb);
    sched_destroy(srv->s, MEMRA_E_ABORTED);
    pthread_mutex_destroy(&srv->mu);
    free(srv);
    return NULL;
}

static srv_rec **find(memra_server *srv, int64_t id) /* [mu] */
{
    srv_rec **pp = &srv->table[(uint64_t)id % SRV_BUCKETS];
    while (*pp && (*pp)->r.id != id)
        pp = &(*pp)->next;
    return pp;
}

static void rec_free(srv_rec *x)
{
    act_future_fini(&x->r.done);
    free(x->prompt);
    free(x);
}

int memra_server_submit(memra_server *srv, memra_request *rq, memra_server_token_fn on_token, void *user,
                        int64_t *id)
{
    if (id)
        *id = 0;
    if (!srv || !rq || !id)
        return api_fail(srv ? &srv->rt->err : NULL, MEMRA_E_INVAL, "memra_server_submit: server, request and id "
                        "must not be NULL");
    if (!rq->prompt || rq->n_prompt < 1)
        return api_fail(&srv->rt->err, MEMRA_E_INVAL, "memra_server_submit: need a prompt of n_prompt >= 1 tokens");
    srv_rec *x = calloc(1, sizeof *x);
    if (!x || !(x->prompt = malloc((size_t)rq->n_prompt * sizeof *x->prompt))) {
        free(x);
        return api_fail(&srv->rt->err, MEMRA_E_NOMEM, "memra_server_submit: out of host memory");
    }
    memcpy(x->prompt, rq->prompt, (size_t)rq->n_prompt * sizeof *x->prompt);
    x->r.prompt = x->prompt;
    x->r.emit = srv_emit;
    x->on_token = on_token;
    x->user = user;
    act_future_init(&x->r.done);
    /* sched_req_init reads only the runtime's immutable fields and creates the sampler: safe on this thread */
    int r = sched_req_init(srv->s, &x->r, rq);
    if (r) {
        rec_free(x);
        return r;
    }
    pthread_mutex_lock(&srv->mu);
    if (srv->stopping) {
        pthread_mutex_unlock(&srv->mu);
        memra_sampler_free(x->r.smp);
        rec_free(x);
        return api_fail(&srv->rt->err, MEMRA_E_STATE, "memra_server_submit: the server is being freed");
    }
    x->r.id = srv->next_id++;
    x->r.index = (int)(x->r.id & 0x7fffffff);
    srv_rec **slot = find(srv, x->r.id);
    *slot = x;
    srv->submitted++;
    *id = x->r.id;
    r = post(srv, SRV_MSG_SUBMIT, &x->r); /* under mu: SUBMITs reach the thread in id order */
    if (r) {
        *slot = NULL;
        srv->submitted--;
        *id = 0;
    }
    pthread_mutex_unlock(&srv->mu);
    if (r) {
        memra_sampler_free(x->r.smp);
        rec_free(x);
    }
    return r;
}

int memra_server_cancel(memra_server *srv, int64_t id)
{
    if (!srv)
        return api_fail(NULL, MEMRA_E_INVAL, "memra_server_cancel: server is NULL");
    pthread_mutex_lock(&srv->mu);
    srv_rec *x = *find(srv, id);
    int r = MEMRA_OK;
    if (!x)
        r = api_fail(&srv->rt->err, MEMRA_E_INVAL, "memra_server_cancel: no request %lld (never submitted, or "
                     "already waited for)", (long long)id);
    else if (!act_future_ready(&x->r.done)) {
        atomic_store(&x->r.cancel, 1);
        r = post(srv, SRV_MSG_CANCEL, &x->r);
    }
    pthread_mutex_unlock(&srv->mu);
    return r;
}

int memra_server_poll(memra_server *srv, int64_t id)
{
    if (!srv)
        return api_fail(NULL, MEMRA_E_INVAL, "memra_server_poll: server is NULL");
    pthread_mutex_lock(&srv->mu);
    srv_rec *x = *find(srv, id);
    int r = x ? act_future_ready(&x->r.done)
              : api_fail(&srv->rt->err, MEMRA_E_INVAL, "memra_server_poll: no request %lld (never submitted, or "
                         "already waited for)", (long long)id);
    pthread_mutex_unlock(&srv->mu);
    return r;
}

int memra_server_wait(memra_server *srv, int64_t id)
{
    if (!srv)
        return api_fail(NULL, MEMRA_E_INVAL, "memra_server_wait: server is NULL");
    pthread_mutex_lock(&srv->mu);
    srv_rec **pp = find(srv, id), *x = *pp;
    if (x)
        *pp = x->next; /* one waiter per id: later calls see it unknown */
    pthread_mutex_unlock(&srv->mu);
    if (!x)
        return api_fail(&srv->rt->err, MEMRA_E_INVAL, "memra_server_wait: no request %lld (never submitted, or "
                        "already waited for)", (long long)id);
    act_future_wait(&x->r.done, NULL, NULL); /* set once by the scheduler thread when the request ended */
    const int status = x->r.rq->status;
    rec_free(x);
    return status;
}

int memra_server_get_stats(memra_server *srv, memra_server_stats *out)
{
    if (!srv || !out)
        return api_fail(srv ? &srv->rt->err : NULL, MEMRA_E_INVAL, "memra_server_get_stats: NULL argument");
    pthread_mutex_lock(&srv->mu);
    *out = srv->stats;
    pthread_mutex_unlock(&srv->mu);
    return MEMRA_OK;
}

void memra_server_free(memra_server *srv)
{
    if (!srv)
        return;
    pthread_mutex_lock(&srv->mu);
    srv->stopping = 1;
    for (int b = 0; b < SRV_BUCKETS; b++)
        for (srv_rec *x = srv->table[b]; x; x = x->next)
            atomic_store(&x->r.cancel, 1);
    act_mailbox_post(srv->mb, srv->stop_msg); /* behind every SUBMIT: all are posted under mu */
    pthread_mutex_unlock(&srv->mu);
    pthread_join(srv->thread, NULL);
    act_mailbox_destroy(srv->mb);
    for (int b = 0; b < SRV_BUCKETS; b++)
        for (srv_rec *x = srv->table[b], *n; x; x = n) {
            n = x->next;
            rec_free(x);
        }
    pthread_mutex_destroy(&srv->mu);
    free(srv);
}
