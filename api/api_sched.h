/* The serving scheduler's core (iteration-level batching, "continuous batching"): requests wait in a FIFO,
 * a free sequence slot admits one into one of M groups ("micro-batches"), and each group keeps one step in
 * flight: one row per decoding request of the group, plus prompt rows of its joining requests under the
 * step's row budget. While group g runs stage s, group g+1 runs stage s-1; when a group's step completes,
 * its tokens are picked (the device's argmax when every output row is greedy, else the host sampler over
 * the logits), finished requests leave and free their slots, waiting ones join, and the group's next step
 * goes in at once.
 *
 * Device feed (a runtime created with it): while a group holds only greedy decoding requests and no request
 * waits, its next step goes in as soon as the one before it, fed on the device from that step's argmax
 * tokens, so the device never waits for the host's turn; a request that ends meanwhile leaves one wasted row,
 * and its slot frees once that row lands.
 *
 * A step's rows: [prompt rows with no output | output rows]. Output rows are each decoding request's token
 * and the last row of each prompt that completes in this step; the head runs over those rows only
 * (act_pp_step.out_last), so a prompt chunk costs no logits.
 *
 * Who drives it: memra_generate on its own thread (its abort callback and token callbacks run there), and
 * memra_server on its scheduler actor's thread. Every function here is called by that one driving thread
 * (no lock inside; the runtime's own lock orders the submits against other API users). */
#ifndef API_SCHED_H
#define API_SCHED_H

#include <stdint.h>

#include "actors/future.h"
#include "api/api_internal.h"

typedef struct sched sched;
typedef struct sched_req sched_req;

/* Called with each generated token of r (piece: its text, n_piece bytes; NULL/0 without a tokenizer). Return
 * nonzero to stop r (it ends with MEMRA_OK). */
typedef int (*sched_emit_fn)(sched_req *r, memra_token token, const char *piece, int n_piece);

struct sched_req {
    memra_request *rq;        /* the caller's request: prompt, limits, sampling; out, n_out, status written */
    const memra_token *prompt;/* rq->prompt, or the server's copy of it */
    sched_emit_fn emit;       /* may be NULL */
    void *user;               /* the driver's, for emit */
    int index;                /* the driver's (memra_generate: the request's index) */
    int64_t id;               /* the server's request id */
    act_future done;          /* set when the request ends (the server's waiters) */
    _Atomic int cancel;       /* set by any thread; the driving thread ends the request at its next turn */
    /* the driving thread only: */
    memra_seq *seq;           /* its slot while admitted, else NULL */
    memra_sampler *smp;
    int greedy;               /* the pick is the raw argmax (no penalties, temperature <= 0) */
    int n_primed;             /* prompt tokens submitted */
    memra_token next;         /* the token of its next decode row, -1 while priming */
    int group;                /* -1 waiting */
    int out_row;              /* row of the group's step in flight that gives its next token, -1 none */
    int in_step;              /* it has rows in the group's oldest step in flight */
    int ahead_row;            /* its row in the group's fed step behind that one (device feed), -1 none */
    int end_status;           /* ended while a row of it was still in flight: ends with this once it lands */
    int end_deferred;
    int step_prompt;          /* prompt rows of it in that step */
    sched_req *wnext;         /* waiting FIFO */
};

typedef struct sched_params {
    int groups;               /* M micro-batches in flight, >= 1 */
    int step_rows;            /* rows a step may hold, 1..max_rows */
    int prompt_chunk;         /* most prompt rows of one request in a step, 0 = the step's budget */
} sched_params;

/* What the scheduler did (since create). */
typedef struct sched_stats {
    uint64_t steps;           /* steps submitted */
    uint64_t rows;            /* rows submitted (decode + prompt) */
    uint64_t decode_rows, prompt_rows;
    uint64_t mixed_steps;     /* steps holding both decode rows and prompt rows */
    uint64_t argmax_steps;    /* steps whose outputs were picked on the device */
    uint64_t fed_steps;       /* steps fed on the device from the group's step before (no host turn between) */
    int max_step_rows;        /* the largest step */
    uint64_t admitted, ended, cancelled;
    int waiting, running;     /* requests now: queued, admitted */
} sched_stats;

/* Defaults for rt: M = the runtime's stages, the step budget = max_rows, no per-request prompt cap. */
sched_params sched_default_params(const memra_runtime *rt);
/* NULL + the runtime's error on a bad field or no memory. */
sched *sched_create(memra_runtime *rt, const sched_params *p);
/* Every request still in the scheduler ends with `status` (steps in flight are waited first); frees it. */
void sched_destroy(sched *s, int status);

/* Validate rq (prompt tokens in the vocabulary, limits, sampler) and fill r's scheduler fields; r is not yet
 * queued. Returns MEMRA_OK or MEMRA_E_INVAL with the runtime's error naming the field. */
int sched_req_init(sched *s, sched_req *r, memra_request *rq);
/* Queue r (initialised) behind the waiting requests. */
void sched_add(sched *s, sched_req *r);
/* Admit waiting requests and submit a step for every idle group that has work. Returns MEMRA_OK or a submit
 * error (the requests of that step end with it). */
int sched_pump(sched *s);
/* The group whose step went in first among those in flight, or -1 when none is. */
int sched_oldest(const sched *s);
/* Wait for group g's step, pick its tokens, end the requests that are done, then pump. Returns MEMRA_OK or
 * the step's error (its requests end with it; the scheduler goes on with the others). */
int sched_complete(sched *s, int g);
/* Requests not yet ended (waiting or admitted). */
int sched_live(const sched *s);
void sched_get_stats(const sched *s, sched_stats *out);

/* Called when a request ends (its status in r->rq->status), after its slot is freed. */
typedef void (*sched_end_fn)(void *ctx, sched_req *r);
void sched_set_on_end(sched *s, sched_end_fn fn, void *ctx);

#endif
