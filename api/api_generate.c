/* memra_generate: n requests through the serving scheduler (api/api_sched.h), driven on the calling thread:
 * the abort callback is checked between steps, and the token callbacks run here. The requests are packed into
 * micro-batches (one row per decoding request, prompt chunks beside them), so the weights are read once per
 * step for every request of a group rather than once per request.
 * State: local to the call (one thread); submits go through api_submit_counted (rt->mu). */
#include <stdlib.h>

#include "api/api_sched.h"

typedef struct gen_ctx {
    memra_token_fn on_token;
    void *user;
} gen_ctx;

static int gen_emit(sched_req *r, memra_token t, const char *piece, int n_piece)
{
    const gen_ctx *c = r->user;
    return c->on_token ? c->on_token(c->user, r->index, t, piece, n_piece) : 0;
}

int memra_generate(memra_runtime *rt, memra_request *reqs, int n, int chunk, memra_token_fn on_token, void *user)
{
    if (!rt || !reqs || n < 1)
        return api_fail(rt ? &rt->err : NULL, MEMRA_E_INVAL, "memra_generate: need a runtime and n >= 1 requests");
    if (chunk < 0 || chunk > rt->max_rows)
        return api_fail(&rt->err, MEMRA_E_INVAL, "memra_generate: chunk %d outside 0..%d", chunk, rt->max_rows);
    sched_params sp = sched_default_params(rt);
    sp.prompt_chunk = chunk;
    sched_req *rr = calloc((size_t)n, sizeof *rr);
    sched *s = rr ? sched_create(rt, &sp) : NULL;
    if (!s) {
        free(rr);
        return rr ? memra_last_status() : api_fail(&rt->err, MEMRA_E_NOMEM, "memra_generate: out of host memory");
    }
    gen_ctx ctx = {on_token, user};
    int r = MEMRA_OK;
    for (int i = 0; i < n && r == MEMRA_OK; i++) { /* every request is checked before anything runs */
        rr[i].index = i;
        rr[i].emit = gen_emit;
        rr[i].user = &ctx;
        if ((r = sched_req_init(s, &rr[i], &reqs[i])) != MEMRA_OK) {
            reqs[i].status = r;
            api_fail(&rt->err, r, "memra_generate: request %d: %s", i, memra_runtime_last_error(rt));
            for (int k = 0; k < i; k++)
                memra_sampler_free(rr[k].smp);
        }
    }
    if (r) {
        sched_destroy(s, r);
        free(rr);
        return r;
    }
    for (int i = 0; i < n; i++)
        sched_add(s, &rr[i]);
    if (rt->n_seq < 1 || sched_live(s) == 0) {
        sched_destroy(s, MEMRA_OK);
        free(rr);
        return MEMRA_OK;
    }
    int first_err = MEMRA_OK;
    for (;;) {
        if (api_should_abort(rt)) {
            r = MEMRA_E_ABORTED;
            break;
        }
        int rp = sched_pump(s);
        if (rp && !first_err)
            first_err = rp;
        int g = sched_oldest(s);
        if (g < 0) {
            if (sched_live(s) > 0 && !first_err) /* requests wait and no slot frees: every slot is held elsewhere */
                r = api_fail(&rt->err, MEMRA_E_FULL, "memra_generate: no free sequence slot (all %d open)", rt->n_seq);
            break;
        }
        int rc = sched_complete(s, g);
        if (rc && !first_err)
            first_err = rc;
    }
    sched_destroy(s, r ? r : first_err ? first_err : MEMRA_E_FULL); /* what is left ends with the reason */
    free(rr);
    return r ? r : first_err;
}
