/* The serving scheduler's core (api/api_sched.h): groups, step building, token picking, admission.
 * State: all of it belongs to the one driving thread (memra_generate's caller, or memra_server's actor),
 * except sched_req.cancel (atomic, any thread) and sched_req.done (the future's own ordering). */
#include <stdlib.h>
#include <string.h>

#include "actors/trace.h"
#include "api/api_sched.h"

typedef struct group {
    sched_req **mem;          /* members, in admission order (capacity step_rows) */
    int n_mem;
    memra_pending *pend;      /* the step in flight, or NULL */
    uint64_t order;           /* submission order of that step */
    sched_req **in_step;      /* members with rows in it */
    int n_in_step;
    int argmax;               /* its outputs are device argmax tokens */
    int feeding;              /* it leaves its tokens on the device: a fed step may follow it */
    memra_pending *ahead;     /* device feed: the fed step behind pend, or NULL */
    uint64_t ahead_order;
    sched_req **in_ahead;     /* members with rows in it (all of pend's, in pend's row order) */
    int n_in_ahead;
} group;

struct sched {
    memra_runtime *rt;
    sched_params p;
    group *g;
    sched_req *wait_head, *wait_tail; /* waiting FIFO */
    int n_wait, n_admitted;
    uint64_t next_order;
    int32_t *rows;            /* 3 x step_rows: tokens | seq | pos, assembled per step */
    sched_req **outs;         /* step_rows: the requests of the output rows, in row order */
    sched_stats st;
    sched_end_fn on_end;
    void *on_end_ctx;
};

sched_params sched_default_params(const memra_runtime *rt)
{
    return (sched_params){.groups = rt->micro_batches, .step_rows = rt->max_rows, .prompt_chunk = 0};
}

sched *sched_create(memra_runtime *rt, const sched_params *p)
{
    if (p->groups < 1 || p->groups > rt->n_seq || p->step_rows < 1 || p->step_rows > rt->max_rows ||
        p->prompt_chunk < 0 || p->prompt_chunk > rt->max_rows) {
        api_fail(&rt->err, MEMRA_E_INVAL, "scheduler: micro_batches = %d (allowed 1..n_seq = %d), step_rows = %d "
                 "(allowed 1..max_rows = %d), prompt_chunk = %d (allowed 0..%d, 0 = the step's budget)", p->groups,
                 rt->n_seq, p->step_rows, rt->max_rows, p->prompt_chunk, rt->max_rows);
        return NULL;
    }
    sched *s = calloc(1, sizeof *s);
    if (!s)
        goto fail;
    s->rt = rt;
    s->p = *p;
    if (!(s->g = calloc((size_t)p->groups, sizeof *s->g)) ||
        !(s->rows = malloc(3 * (size_t)p->step_rows * sizeof *s->rows)) ||
        !(s->outs = malloc((size_t)p->step_rows * sizeof *s->outs)))
        goto fail;
    for (int i = 0; i < p->groups; i++)
        if (!(s->g[i].mem = calloc(3 * (size_t)p->step_rows, sizeof(sched_req *))))
            goto fail;
        else
            s->g[i].in_step = s->g[i].mem + p->step_rows, s->g[i].in_ahead = s->g[i].mem + 2 * p->step_rows;
    return s;
fail:
    sched_destroy(s, MEMRA_OK);
    api_fail(&rt->err, MEMRA_E_NOMEM, "scheduler: out of host memory");
    return NULL;
}

void sched_set_on_end(sched *s, sched_end_fn fn, void *ctx)
{
    s->on_end = fn;
    s->on_end_ctx = ctx;
}

int sched_live(const sched *s) { return s->n_wait + s->n_admitted; }

void sched_get_stats(const sched *s, sched_stats *out)
{
    *out = s->st;
    out->waiting = s->n_wait;
    out->running = s->n_admitted;
}

/* 1 when model/sampler.c picks the argmax of the raw logits at every step of a request with these params:
 * temperature <= 0 and nothing to penalize (every penalty off, or a window of 0 so no history is kept). */
static int picks_raw_argmax(const memra_sampler_params *sp)
{
    const int penalties = sp->repeat_penalty != 1.0f || sp->freq_penalty != 0.0f || sp->presence_penalty != 0.0f;
    return sp->temperature <= 0.0f && (!penalties || sp->repeat_last_n == 0);
}

int sched_req_init(sched *s, sched_req *r, memra_request *rq)
{
    memra_runtime *rt = s->rt;
    int bad = !rq || !rq->prompt || rq->n_prompt < 1 || rq->n_predict < 0 || rq->out_cap < 0 ||
              (!rq->out && rq->out_cap > 0);
    for (int k = 0; !bad && k < rq->n_prompt; k++)
        bad = rq->prompt[k] < 0 || rq->prompt[k] >= rt->n_vocab;
    if (bad)
        return api_fail(&rt->err, MEMRA_E_INVAL, "request: need a prompt of n_prompt >= 1 tokens in 0..%d, "
                        "n_predict >= 0, out when out_cap > 0", rt->n_vocab - 1);
    memra_sampler *smp = memra_sampler_create(&rq->sampling, rt->n_vocab);
    if (!smp)
        return api_fail(&rt->err, memra_last_status(), "request: %s", memra_last_error());
    rq->n_out = 0;
    rq->status = MEMRA_OK;
    r->rq = rq;
    if (!r->prompt)
        r->prompt = rq->prompt;
    r->smp = smp;
    r->greedy = picks_raw_argmax(&rq->sampling);
    r->seq = NULL;
    r->n_primed = 0;
    r->next = -1;
    r->group = -1;
    r->out_row = -1;
    r->in_step = 0;
    r->ahead_row = -1;
    r->end_deferred = 0;
    r->wnext = NULL;
    for (int k = 0; k < rq->n_prompt; k++)
        memra_sampler_accept(smp, rq->prompt[k]);
    return MEMRA_OK;
}

void sched_add(sched *s, sched_req *r)
{
    r->wnext = NULL;
    if (s->wait_tail)
        s->wait_tail->wnext = r;
    else
        s->wait_head = r;
    s->wait_tail = r;
    s->n_wait++;
    act_trace_req(ACT_TR_REQ_QUEUED, r->index, 0);
}

static void group_remove(group *g, const sched_req *r)
{
    for (int i = 0; i < g->n_mem; i++)
        if (g->mem[i] == r) {
            memmove(&g->mem[i], &g->mem[i + 1], (size_t)(g->n_mem - i - 1) * sizeof *g->mem);
            g->n_mem--;
            return;
        }
}

/* End r with status: its slot goes back (no step of it is in flight: callers end a request only outside its
 * group's step), its sampler is freed, the driver is told. */
static void req_end(sched *s, sched_req *r, int status)
{
    r->rq->status = status;
    act_trace_req(ACT_TR_REQ_DONE, r->index, status);
    memra_sampler_free(r->smp);
    r->smp = NULL;
    if (r->seq) {
        memra_seq_close(r->seq);
        r->seq = NULL;
    }
    if (r->group >= 0) {
        group_remove(&s->g[r->group], r);
        r->group = -1;
        s->n_admitted--;
    } else {
        s->n_wait--;
    }
    s->st.ended++;
    if (status == MEMRA_E_ABORTED)
        s->st.cancelled++;
    if (s->on_end)
        s->on_end(s->on_end_ctx, r);
}

static sched_req *wait_pop(sched *s)
{
    sched_req *r = s->wait_head;
    if (r) {
        s->wait_head = r->wnext;
        if (!s->wait_head)
            s->wait_tail = NULL;
        r->wnext = NULL;
    }
    return r;
}

static void wait_push_front(sched *s, sched_req *r)
{
    r->wnext = s->wait_head;
    s->wait_head = r;
    if (!s->wait_tail)
        s->wait_tail = r;
}

/* The members a group may hold now: the live requests spread evenly over the groups (rebalancing by
 * admission), at most the step's budget. */
static int group_cap(const sched *s)
{
    int live = sched_live(s), cap = (live + s->p.groups - 1) / s->p.groups;
    cap = cap < 1 ? 1 : cap;
    return cap > s->p.step_rows ? s->p.step_rows : cap;
}

/* Admit waiting requests into idle group gi while it is below its share and a slot is free. */
static void admit(sched *s, int gi)
{
    group *g = &s->g[gi];
    const int cap = group_cap(s);
    while (g->n_mem < cap && s->wait_head) {
        sched_req *r = wait_pop(s);
        memra_request *rq = r->rq;
        if (atomic_load(&r->cancel)) {
            req_end(s, r, MEMRA_E_ABORTED);
            continue;
        }
        if (rq->n_predict == 0) {
            req_end(s, r, MEMRA_OK);
            continue;
        }
        if (rq->n_prompt > s->rt->n_ctx) {
            api_fail(&s->rt->err, MEMRA_E_FULL, "request: a prompt of %d tokens does not fit in n_ctx %d",
                     rq->n_prompt, s->rt->n_ctx);
            req_end(s, r, MEMRA_E_FULL);
            continue;
        }
        if (!(r->seq = memra_seq_open(s->rt))) { /* no slot free: it waits for one, first in line */
            wait_push_front(s, r);
            return;
        }
        s->n_wait--;
        s->n_admitted++;
        s->st.admitted++;
        r->group = gi;
        g->mem[g->n_mem++] = r;
    }
}

/* Move decoding members of group gi to the smallest group while gi holds 2 or more than it. */
static void rebalance(sched *s, int gi)
{
    group *g = &s->g[gi];
    for (;;) {
        int small = gi;
        for (int i = 0; i < s->p.groups; i++)
            if (s->g[i].n_mem < s->g[small].n_mem)
                small = i;
        if (small == gi || g->n_mem < s->g[small].n_mem + 2)
            return;
        sched_req *r = g->mem[g->n_mem - 1]; /* the latest admitted */
        if (r->next < 0)
            return; /* still priming: its rows stay together */
        g->n_mem--;
        r->group = small;
        s->g[small].mem[s->g[small].n_mem++] = r;
    }
}

/* Tracing: the requests of the n rows' members q of the step this thread just submitted, keyed by its id (three
 * to a record; the export lists them in one "requests" event that the viewer joins to the step's spans). */
static void trace_step_reqs(sched_req *const *q, int n)
{
    const uint64_t step = act_trace_submitted();
    if (step == UINT64_MAX)
        return;
    const uint64_t t = act_trace_now_ns();
    for (int i = 0; i < n; i += 3)
        act_trace_instant(ACT_TR_STEP_REQS, ACT_TRACE_SCHED, t, step, q[i]->index, i + 1 < n ? q[i + 1]->index : -1,
                          i + 2 < n ? q[i + 2]->index : -1);
}

/* Build and submit group gi's next step (the group is idle). Row layout: [prompt rows without output |
 * output rows], output rows being each decoding member's token and each completing prompt's last row. */
static int group_submit(sched *s, int gi)
{
    memra_runtime *rt = s->rt;
    group *g = &s->g[gi];
    for (int i = 0; i < g->n_mem;) { /* cancelled or context-full members leave before the step is built */
        sched_req *r = g->mem[i];
        if (atomic_load(&r->cancel))
            req_end(s, r, MEMRA_E_ABORTED);
        else if (r->next >= 0 && r->seq->pos >= rt->n_ctx)
            req_end(s, r, MEMRA_E_FULL);
        else
            i++;
    }
    admit(s, gi);
    if (g->n_mem == 0)
        return MEMRA_OK;
    act_trace_set_group(gi);
    const int cap = s->p.step_rows;
    int32_t *tok = s->rows, *seq = tok + cap, *pos = seq + cap;
    int n_pre = 0, n_out = 0, budget = cap, all_greedy = 1, n_dec = 0;
    sched_req **outs = s->outs;
    for (int i = 0; i < g->n_mem; i++) /* decoding members: one output row each */
        if (g->mem[i]->next >= 0)
            budget--;
    for (int i = 0; i < g->n_mem; i++) {
        sched_req *r = g->mem[i];
        r->out_row = -1;
        r->in_step = 0;
        r->step_prompt = 0;
        if (r->next >= 0) {
            outs[n_out++] = r;
            n_dec++;
            continue;
        }
        int left = r->rq->n_prompt - r->n_primed, c = left < budget ? left : budget;
        if (s->p.prompt_chunk > 0 && c > s->p.prompt_chunk)
            c = s->p.prompt_chunk;
        if (c <= 0)
            continue;
        budget -= c;
        r->in_step = 1;
        r->step_prompt = c;
        const int last = r->n_primed + c == r->rq->n_prompt, n_plain = last ? c - 1 : c;
        for (int k = 0; k < n_plain; k++, n_pre++) /* rows without output go first, as they are found */
            tok[n_pre] = r->prompt[r->n_primed + k], seq[n_pre] = r->seq->slot, pos[n_pre] = r->seq->pos + k;
        if (last)
            outs[n_out++] = r;
    }
    if (n_pre + n_out == 0)
        return MEMRA_OK;
    int B = n_pre; /* then the output rows */
    for (int i = 0; i < n_out; i++, B++) {
        sched_req *r = outs[i];
        r->in_step = 1;
        r->out_row = i;
        all_greedy &= r->greedy;
        if (r->next >= 0) {
            tok[B] = r->next, seq[B] = r->seq->slot, pos[B] = r->seq->pos;
        } else { /* a prompt's last row */
            const int k = r->rq->n_prompt - 1;
            tok[B] = r->prompt[k], seq[B] = r->seq->slot, pos[B] = k;
        }
    }
    const int n_prompt_rows = B - n_dec;
    /* a step a fed one may follow leaves its tokens on the device (a copy per row unless the slots are one run) */
    const int feeding = rt->feed && n_pre == 0 && n_out == B && all_greedy;
    act_pp_step st = {.B = B, .tokens = tok, .seq = seq, .pos = pos, .no_feed = !feeding};
    st.kind = n_prompt_rows == 0 ? (B > 1 ? ACT_STEP_BATCH : ACT_STEP_EAGER)
                                 : (n_dec > 0 || g->n_mem > 1 ? ACT_STEP_PRIME_BATCH : ACT_STEP_PRIME);
    st.logits = n_out == 0 ? ACT_LOGITS_NONE : all_greedy ? ACT_LOGITS_ARGMAX : ACT_LOGITS_ALL;
    st.out_last = n_out > 0 && n_out < B ? n_out : 0;
    int r = api_submit_counted(rt, &st, n_dec, n_prompt_rows, &g->pend);
    g->n_in_step = 0;
    for (int i = 0; i < g->n_mem; i++)
        if (g->mem[i]->in_step)
            g->in_step[g->n_in_step++] = g->mem[i];
    if (r) { /* nothing went in: the step's requests end with the error */
        g->pend = NULL;
        for (int i = 0; i < g->n_in_step; i++)
            g->in_step[i]->in_step = 0, req_end(s, g->in_step[i], r);
        g->n_in_step = 0;
        return r;
    }
    if (act_trace_on())
        trace_step_reqs(g->in_step, g->n_in_step);
    for (int i = 0; i < g->n_in_step; i++) { /* positions move as submitted (the pipeline keeps step order) */
        sched_req *q = g->in_step[i];
        if (q->next >= 0)
            q->seq->pos++;
        else
            q->n_primed += q->step_prompt, q->seq->pos = q->n_primed;
    }
    g->argmax = st.logits == ACT_LOGITS_ARGMAX;
    g->feeding = feeding;
    g->order = s->next_order++;
    s->st.steps++;
    s->st.rows += (uint64_t)B;
    s->st.decode_rows += (uint64_t)n_dec;
    s->st.prompt_rows += (uint64_t)n_prompt_rows;
    s->st.mixed_steps += n_dec > 0 && n_prompt_rows > 0;
    s->st.argmax_steps += g->argmax;
    if (B > s->st.max_step_rows)
        s->st.max_step_rows = B;
    return MEMRA_OK;
}

/* Device feed: submit group gi's next step right behind its step in flight, its tokens fed on the device from
 * that step's argmax, when every member is a greedy request decoding in it, the step leaves its tokens, no
 * request waits to join, and each member still needs a token after the one in flight. A refused submit just
 * leaves the group to its host turn. */
static void lookahead(sched *s, int gi)
{
    memra_runtime *rt = s->rt;
    group *g = &s->g[gi];
    if (!g->pend || g->ahead || !g->feeding || s->wait_head || g->n_in_step != g->n_mem || g->n_mem == 0)
        return;
    for (int i = 0; i < g->n_in_step; i++) {
        const sched_req *q = g->in_step[i];
        if (q->out_row < 0 || q->end_deferred || atomic_load(&q->cancel) || q->seq->pos >= rt->n_ctx ||
            q->rq->n_out + 1 >= q->rq->n_predict)
            return;
    }
    const int B = g->n_in_step, cap = s->p.step_rows;
    int32_t *seq = s->rows + cap, *pos = seq + cap;
    for (int i = 0; i < B; i++) {
        const sched_req *q = g->in_step[i];
        seq[q->out_row] = q->seq->slot, pos[q->out_row] = q->seq->pos;
        g->in_ahead[q->out_row] = g->in_step[i];
    }
    act_pp_step st = {.kind = B > 1 ? ACT_STEP_BATCH : ACT_STEP_EAGER, .B = B, .seq = seq, .pos = pos,
                      .logits = ACT_LOGITS_ARGMAX, .feed = 1};
    act_trace_set_group(gi);
    if (api_submit_counted(rt, &st, B, 0, &g->ahead) != MEMRA_OK) {
        g->ahead = NULL;
        return;
    }
    if (act_trace_on())
        trace_step_reqs(g->in_ahead, B);
    g->n_in_ahead = B;
    g->ahead_order = s->next_order++;
    for (int i = 0; i < B; i++)
        g->in_ahead[i]->ahead_row = i, g->in_ahead[i]->seq->pos++;
    s->st.steps++;
    s->st.rows += (uint64_t)B;
    s->st.decode_rows += (uint64_t)B;
    s->st.argmax_steps++;
    s->st.fed_steps++;
}

int sched_pump(sched *s)
{
    int first = MEMRA_OK;
    for (int gi = 0; gi < s->p.groups; gi++) {
        if (s->g[gi].pend)
            continue;
        int r = group_submit(s, gi);
        if (r && first == MEMRA_OK)
            first = r;
        lookahead(s, gi);
    }
    return first;
}

int sched_oldest(const sched *s)
{
    int best = -1;
    for (int gi = 0; gi < s->p.groups; gi++)
        if (s->g[gi].pend && (best < 0 || s->g[gi].order < s->g[best].order))
            best = gi;
    return best;
}

/* End r now, or, while a row of it is in the group's fed step, once that row lands. */
static void end_or_defer(sched *s, sched_req *r, int status)
{
    if (r->ahead_row >= 0) {
        r->end_deferred = 1;
        r->end_status = status;
        r->rq->status = status;
        return;
    }
    req_end(s, r, status);
}

/* One token of r: record, emit, and decide whether r goes on. */
static void take_token(sched *s, sched_req *r, int row, memra_token t)
{
    memra_request *rq = r->rq;
    const memra_model *m = s->rt->model;
    if (t < 0) {
        end_or_defer(s, r, api_fail(&s->rt->err, MEMRA_E_INVAL, "request %d: step row %d: no logit is above -inf "
                                    "(every one -inf or NaN): no token to pick", r->index, row));
        return;
    }
    if (rq->stop_at_eog && memra_token_is_eog(m, t)) {
        end_or_defer(s, r, MEMRA_OK);
        return;
    }
    memra_sampler_accept(r->smp, t);
    if (rq->n_out < rq->out_cap)
        rq->out[rq->n_out] = t;
    rq->n_out++;
    if (rq->n_out == 1)
        act_trace_req(ACT_TR_REQ_FIRST, r->index, 0);
    int stop = 0;
    if (r->emit) {
        char piece[256];
        int n_piece = 0;
        if (!m->tok || memra_token_to_piece(m, t, piece, (int)sizeof piece, 0, &n_piece) != 0)
            n_piece = 0;
        stop = r->emit(r, t, m->tok ? piece : NULL, n_piece);
    }
    if (stop || rq->n_out >= rq->n_predict || atomic_load(&r->cancel)) {
        end_or_defer(s, r, stop || rq->n_out >= rq->n_predict ? MEMRA_OK : MEMRA_E_ABORTED);
        return;
    }
    r->next = t;
}

int sched_complete(sched *s, int gi)
{
    group *g = &s->g[gi];
    memra_pending *p = g->pend;
    const float *logits = NULL;
    const int32_t *toks = NULL;
    int rows = 0, r, any_out = 0;
    for (int i = 0; i < g->n_in_step; i++)
        any_out |= g->in_step[i]->out_row >= 0;
    if (g->argmax)
        r = api_pending_wait_tokens(p, &toks, &rows);
    else
        r = any_out ? memra_pending_wait(p, &logits, &rows) : api_pending_wait_plain(p);
    const int n_vocab = s->rt->n_vocab;
    for (int i = 0; i < g->n_in_step; i++) {
        sched_req *q = g->in_step[i];
        const int row = q->out_row;
        q->in_step = 0;
        q->out_row = -1;
        if (q->end_deferred) { /* ended at the step before; this was its wasted fed row */
            if (q->ahead_row < 0)
                q->end_deferred = 0, req_end(s, q, q->end_status);
        } else if (r) {
            end_or_defer(s, q, r);
        } else if (row >= 0) {
            take_token(s, q, row, g->argmax ? toks[row] : memra_sampler_sample(q->smp, logits + (size_t)row * n_vocab));
        }
    }
    memra_pending_free(p);
    g->pend = NULL;
    g->n_in_step = 0;
    if (g->ahead) { /* the fed step behind it becomes the oldest; feed the next one from it when nothing changed */
        g->pend = g->ahead;
        g->order = g->ahead_order;
        g->argmax = g->feeding = 1;
        g->ahead = NULL;
        for (int i = 0; i < g->n_in_ahead; i++) {
            sched_req *q = g->in_ahead[i];
            g->in_step[i] = q;
            q->out_row = q->ahead_row;
            q->ahead_row = -1;
            q->in_step = 1;
        }
        g->n_in_step = g->n_in_ahead;
        g->n_in_ahead = 0;
        for (int i = 0; i < g->n_in_step; i++) /* deferred ends whose last row is this step: nothing more to wait */
            if (g->in_step[i]->end_deferred)
                g->feeding = 0;
        if (r == MEMRA_OK)
            lookahead(s, gi);
        int rp = sched_pump(s);
        return r ? r : rp;
    }
    rebalance(s, gi);
    int rp = sched_pump(s);
    return r ? r : rp;
}

void sched_destroy(sched *s, int status)
{
    if (!s)
        return;
    for (int gi = 0; s->g && gi < s->p.groups; gi++) {
        group *g = &s->g[gi];
        memra_pending *steps[2] = {g->pend, g->ahead};
        for (int k = 0; k < 2; k++)
            if (steps[k]) {
                api_pending_wait_plain(steps[k]); /* the slots go back only once their steps are done */
                memra_pending_free(steps[k]);
            }
        g->pend = g->ahead = NULL;
        for (int i = 0; i < g->n_mem; i++)
            g->mem[i]->in_step = 0, g->mem[i]->ahead_row = -1;
        while (g->n_mem > 0)
            req_end(s, g->mem[0], status);
    }
    for (sched_req *r; (r = wait_pop(s)) != NULL;)
        req_end(s, r, status);
    if (s->g)
        for (int gi = 0; gi < s->p.groups; gi++)
            free(s->g[gi].mem);
    free(s->g);
    free(s->rows);
    free(s->outs);
    free(s);
}
