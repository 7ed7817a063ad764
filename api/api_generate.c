/* memra_generate: N requests, each on its own sequence slot ("lane"), all lanes in flight at once. Lanes
 * are submitted and drained round-robin, so the oldest step is always the one waited on and the pipeline
 * holds one step per lane (every stage busy when lanes >= stages). A request whose sampler would take the
 * argmax of the raw logits decodes through memra_seq_decode_greedy (the token picked on the device, no logits
 * read back), and with device feed, while the lanes in flight are no more than the stages, keeps a second
 * step in flight, fed from the first on the device (memra_seq_decode_greedy_next); the others sample on the
 * host. State: local to the call (one thread);
 * submits go through api_submit (rt->mu). */
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"

typedef struct lane {
    memra_seq *seq;
    memra_sampler *smp;
    memra_pending *pend; /* the step whose result gives this request's next token: logits, or a greedy token */
    memra_pending *ahead; /* device feed: the greedy step after pend, fed from it on the device, or NULL */
    int req;             /* request index, -1 = idle */
    int greedy;          /* the request's pick is the raw argmax: decode steps go through the device argmax */
} lane;

/* 1 when model/sampler.c's mdl_sampler_sample picks the argmax of the raw logits at every step of a request
 * with these params: temperature <= 0 and nothing to penalize (every penalty off, or a window of 0 so no
 * history is kept). A request has a history as soon as its prompt is accepted, so with a window > 0 a
 * penalty would change the logits. */
static int picks_raw_argmax(const memra_sampler_params *sp)
{
    const int penalties = sp->repeat_penalty != 1.0f || sp->freq_penalty != 0.0f || sp->presence_penalty != 0.0f;
    return sp->temperature <= 0.0f && (!penalties || sp->repeat_last_n == 0);
}

/* The token the lane's finished step gives, by the pending's kind: the device's argmax (a greedy decode step)
 * or the host sampler over the logits (the prime, or a sampling request). Returns a step error (*t unset),
 * else MEMRA_OK with *t the token, or < 0 the request's status: MEMRA_E_INVAL when no logit is above -inf,
 * which the sampler and the device argmax refuse alike. */
static int next_token(lane *l, memra_token *t)
{
    if (l->pend->greedy) {
        int r = api_pending_wait_argmax(l->pend, t);
        if (r == 0 && *t < 0)
            *t = api_fail(NULL, MEMRA_E_INVAL, "memra_generate: request %d: no logit of the step's row is above -inf "
                          "(every one -inf or NaN): no token to pick", l->req);
        return r;
    }
    const float *logits;
    int r = memra_pending_wait(l->pend, &logits, NULL);
    if (r == 0)
        *t = memra_sampler_sample(l->smp, logits);
    return r;
}

static void finish(lane *l, memra_request *rq, int status)
{
    rq->status = status;
    memra_sampler_free(l->smp);
    l->smp = NULL;
    memra_pending_free(l->pend);
    memra_pending_free(l->ahead); /* an unread step past the end: it still runs; the rewind drops its row */
    l->pend = l->ahead = NULL;
    l->req = -1;
    memra_seq_rewind(l->seq, 0);
}

/* Start request i on lane l: sampler, prompt history, prime (returns at once with the last chunk's
 * pending). A request that fails here gets its status; returns a runtime-level error only (abort/stage). */
static int start(memra_runtime *rt, lane *l, memra_request *reqs, int i, int chunk)
{
    memra_request *rq = &reqs[i];
    l->req = i;
    l->greedy = picks_raw_argmax(&rq->sampling);
    if (rq->n_predict == 0) {
        finish(l, rq, MEMRA_OK);
        return 0;
    }
    if (!(l->smp = memra_sampler_create(&rq->sampling, rt->n_vocab))) {
        finish(l, rq, memra_last_status());
        return 0;
    }
    for (int k = 0; k < rq->n_prompt; k++)
        memra_sampler_accept(l->smp, rq->prompt[k]);
    int r = memra_seq_prime(l->seq, rq->prompt, rq->n_prompt, chunk, &l->pend);
    if (r) {
        finish(l, rq, r);
        return r == MEMRA_E_FULL ? 0 : r;
    }
    return 0;
}

/* Validate every request up front so nothing runs when one is malformed. */
static int check_requests(memra_runtime *rt, memra_request *reqs, int n)
{
    for (int i = 0; i < n; i++) {
        memra_request *rq = &reqs[i];
        rq->n_out = 0;
        rq->status = MEMRA_OK;
        int bad = !rq->prompt || rq->n_prompt < 1 || rq->n_predict < 0 || rq->out_cap < 0 ||
                  (!rq->out && rq->out_cap > 0);
        for (int k = 0; !bad && k < rq->n_prompt; k++)
            bad = rq->prompt[k] < 0 || rq->prompt[k] >= rt->n_vocab;
        if (bad) {
            rq->status = MEMRA_E_INVAL;
            return api_fail(&rt->err, MEMRA_E_INVAL, "memra_generate: request %d: need a prompt of n_prompt >= 1 "
                            "tokens in 0..%d, n_predict >= 0, out when out_cap > 0", i, rt->n_vocab - 1);
        }
        memra_sampler *s = memra_sampler_create(&rq->sampling, rt->n_vocab);
        if (!s) {
            rq->status = memra_last_status();
            return api_fail(&rt->err, rq->status, "memra_generate: request %d: %s", i, memra_last_error());
        }
        memra_sampler_free(s);
    }
    return 0;
}

int memra_generate(memra_runtime *rt, memra_request *reqs, int n, int chunk, memra_token_fn on_token, void *user)
{
    if (!rt || !reqs || n < 1)
        return api_fail(rt ? &rt->err : NULL, MEMRA_E_INVAL, "memra_generate: need a runtime and n >= 1 requests");
    if (chunk < 0 || chunk > rt->max_rows)
        return api_fail(&rt->err, MEMRA_E_INVAL, "memra_generate: chunk %d outside 0..%d", chunk, rt->max_rows);
    int r = check_requests(rt, reqs, n);
    if (r)
        return r;
    lane *lanes = calloc((size_t)n, sizeof *lanes);
    if (!lanes)
        return api_fail(&rt->err, MEMRA_E_NOMEM, "memra_generate: out of host memory");
    int n_lanes = 0;
    while (n_lanes < n && (lanes[n_lanes].seq = memra_seq_open(rt)) != NULL)
        lanes[n_lanes++].req = -1;
    if (n_lanes == 0) {
        free(lanes);
        return api_fail(&rt->err, MEMRA_E_FULL, "memra_generate: no free sequence slot (all %d open)", rt->n_seq);
    }
    const memra_model *m = rt->model;
    int next = 0, active = 0;
    char piece[256];
    for (;;) {
        for (int k = 0; k < n_lanes && r == 0; k++) /* fill idle lanes */
            while (lanes[k].req < 0 && next < n && r == 0)
                if ((r = start(rt, &lanes[k], reqs, next++, chunk)) == 0 && lanes[k].req >= 0)
                    active++;
        if (r || active == 0)
            break;
        for (int k = 0; k < n_lanes && r == 0; k++) {
            lane *l = &lanes[k];
            if (l->req < 0)
                continue;
            memra_request *rq = &reqs[l->req];
            memra_token t;
            if ((r = next_token(l, &t)) != 0)
                break;
            memra_pending_free(l->pend);
            l->pend = NULL;
            if (t < 0) {
                finish(l, rq, t), active--;
                continue;
            }
            if (rq->stop_at_eog && memra_token_is_eog(m, t)) {
                finish(l, rq, MEMRA_OK), active--;
                continue;
            }
            memra_sampler_accept(l->smp, t);
            if (rq->n_out < rq->out_cap)
                rq->out[rq->n_out] = t;
            rq->n_out++;
            int n_piece = 0;
            if (on_token && m->tok && memra_token_to_piece(m, t, piece, (int)sizeof piece, 0, &n_piece) != 0)
                n_piece = 0;
            int stop = on_token ? on_token(user, l->req, t, m->tok ? piece : NULL, n_piece) : 0;
            if (stop || rq->n_out >= rq->n_predict) {
                finish(l, rq, MEMRA_OK), active--;
                continue;
            }
            int d = 0;
            if (l->ahead) /* already in flight, fed from the step just read */
                l->pend = l->ahead, l->ahead = NULL;
            else
                d = l->greedy ? memra_seq_decode_greedy(l->seq, t, &l->pend) : memra_seq_decode(l->seq, t, &l->pend);
            /* device feed: the step after that one goes in now, so the device never waits for this loop; if the
             * request stops before its token, finish() drops it. A full context just means no step ahead. Only
             * while the requests in flight are no more than the stages: more lanes already keep every stage busy
             * through the host's turns, and the fed steps' waits cost ~2 % there (docs/bench/gpu.md run 55). */
            if (d == 0 && l->greedy && rt->feed && active <= rt->N && rq->n_out + 1 < rq->n_predict &&
                (d = memra_seq_decode_greedy_next(l->seq, &l->ahead)) == MEMRA_E_FULL)
                d = 0;
            if (d == MEMRA_E_FULL) {
                finish(l, rq, MEMRA_E_FULL), active--;
            } else if (d) {
                r = d;
            }
        }
    }
    for (int k = 0; k < n_lanes; k++) { /* stop what is left (abort / stage error) */
        if (lanes[k].req >= 0)
            finish(&lanes[k], &reqs[lanes[k].req], r);
        memra_seq_close(lanes[k].seq);
    }
    for (int i = next; r && i < n; i++)
        reqs[i].status = r;
    free(lanes);
    return r;
}
