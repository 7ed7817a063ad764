/* The transport actor of a rank (pp_rank.c builds it, pp_rank_impl.h holds its state): the only MPI caller while
 * a runtime lives. It moves steps, credits, results and beats between the ranks.
 *
 * Every rank builds the same runtime (rank 0's configuration, the same model file) and runs the actors of its own
 * stages; a remote stage's actor pointer is the rank's transport actor, so what a local stage posts to it (TOKEN to
 * the next stage, CREDIT to the previous one) goes over MPI without the stage knowing. A rank boundary is BND_MPI
 * (below) or BND_NCCL (pp_rank_boundary picks; boundary.h has both ordering rules). Across a BND_MPI boundary:
 *   TOKEN(k) out:  the transport waits ev_tx[k] (the d2h copy into the slot's host buffer), writes the step's header
 *                  (pp_wire_step) in front of the payload and sends both in one message (tag BND_TAG_SLOT);
 *   step in:       the consumer's transport receives it, rebuilds the step's record (a shadow pp_rec with its own
 *                  pending) and posts TOKEN(k) to its first stage;
 *   CREDIT(k):     the consumer stage posts it to the transport, which sends it once ev_rx[k] completed; the
 *                  producer's transport hands it to its stage once the send of slot k completed too;
 *   results:       the last stage's rank reads the step back as in one process, then sends [pp_wire_result | rows]
 *                  to rank 0, whose transport completes the step through its readback actor (PP_MSG_RESULT).
 * Across a BND_NCCL boundary the slot bytes go GPU to GPU on the stage streams (ncclSend/ncclRecv) and only the
 * header travels here:
 *   TOKEN(k) out:  the transport waits ev_wire[k] (the walk ended; the stage enqueued its ncclSend behind it) and
 *                  sends [pp_wire_step | pos (B,) | seq (B,)], never waiting for ev_tx[k] (the send completes only
 *                  once the consumer's receive, which this header causes, is enqueued);
 *   step in:       the shadow record as above; its TOKEN(k) makes the stage enqueue ncclRecv of the step's bytes;
 *   CREDIT(k):     sent as soon as the consumer stage posts it (its receive is enqueued); handed to the producer
 *                  stage once it arrived and the header's send completed.
 * Steps travel in one tag per direction, so MPI's non-overtaking order keeps them in step order. A failed step
 * travels as a header without payload and its slot's credit is never taken.
 * Liveness: every transport sends a beat to every rank each PP_BEAT_NS; a rank silent for PP_SILENT_NS, or an MPI
 * call that fails, stops the runtime: rank 0 fails every step in flight (and every later one) with the message,
 * a rank > 0 returns the error from act_rank_serve so its tool exits non-zero. */
#include "actors/pp_rank_impl.h"
#include "actors/ring.h"
#include "transport/bnd_shm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void over(pp_rank *rk, int status, const dev_err *e)
{
    pthread_mutex_lock(&rk->lock);
    if (!rk->over) {
        rk->over = 1;
        rk->over_status = status;
        if (e)
            rk->over_err = *e;
    }
    pthread_cond_broadcast(&rk->cv);
    pthread_mutex_unlock(&rk->lock);
}

/* Room for one more tracked send in rk->smalls: 0 or MEMRA_E_NOMEM. */
static int smalls_reserve(pp_rank *rk, dev_err *err)
{
    if (rk->n_small < rk->cap_small)
        return 0;
    int cap = rk->cap_small ? 2 * rk->cap_small : 16;
    pp_small *s = realloc(rk->smalls, (size_t)cap * sizeof *s);
    if (!s)
        return dev_err_set(err, MEMRA_E_NOMEM, "MPI transport: out of host memory");
    rk->smalls = s;
    rk->cap_small = cap;
    return 0;
}

static int small_send(pp_rank *rk, int to, int tag, const void *bytes, size_t n, dev_err *err)
{
    if (smalls_reserve(rk, err) != 0)
        return err->code;
    void *buf = malloc(n ? n : 1);
    if (!buf)
        return dev_err_set(err, MEMRA_E_NOMEM, "MPI transport: out of host memory");
    memcpy(buf, bytes, n);
    bnd_mpi_req *q;
    int r = bnd_mpi_isend(to, tag, buf, n, &q, err);
    if (r) {
        free(buf);
        return r;
    }
    rk->smalls[rk->n_small++] = (pp_small){q, buf};
    return 0;
}

/* Rank 0: the step is over with the stored error (a dead peer): its readback actor finishes it. */
static void fail_step0(pp_rank *rk, pp_rec *rec)
{
    pp_rec_fail(rec, rk->err.code ? rk->err.code : MEMRA_E_DEVICE, "MPI transport", &rk->err);
    pp_post(rk->rt->rb_actor, PP_MSG_RESULT, &rec, sizeof rec);
}

/* The transport failed (an MPI call, a silent rank): rank 0 fails every step in flight and gives the producer
 * stage every credit, so later steps fail here too and a drain ends; a rank > 0 ends its serve loop. */
static void die(pp_rank *rk)
{
    if (rk->dead)
        return;
    rk->dead = 1;
    act_pp *rt = rk->rt;
    /* NCCL halves first: a stage stream waiting in ncclSend/ncclRecv on a dead peer ends, so the syncs below and
     * the runtime's drain end too (ordered by each half's lock against a stage actor's enqueue; later ones are
     * refused and their steps fail) */
    bnd_abort(rk->in);
    bnd_abort(rk->out);
    over(rk, rk->err.code ? rk->err.code : MEMRA_E_DEVICE, &rk->err); /* rank 0: what pp_rank_check reports */
    if (rk->self != 0)
        return;
    while (rk->f_len > 0) {
        pp_rec *rec = rk->fifo[rk->f_head];
        rk->f_head = (rk->f_head + 1) % rk->f_cap;
        rk->f_len--;
        fail_step0(rk, rec);
    }
    while (rk->oq_len > 0) {
        pp_out o = rk->outq[rk->oq_head];
        rk->oq_head = (rk->oq_head + 1) % rk->oq_cap;
        rk->oq_len--;
        if (o.k >= 0) /* its stream passed the step's markers before the record dies */
            dev_event_sync(bnd_wire_ready(rk->out, o.k), NULL);
        fail_step0(rk, o.rec);
        if (o.k >= 0)
            pp_post(rt->stage[rk->last].actor, PP_MSG_CREDIT, &o.k, sizeof o.k);
    }
    for (int k = 0; rk->out && k < bnd_slots(rk->out); k++)
        if (rk->send_req[k] || rk->credit_in[k]) { /* out with the dead consumer: give it back */
            if (rk->send_req[k])
                bnd_mpi_req_free(rk->send_req[k]);
            rk->send_req[k] = NULL;
            rk->credit_in[k] = 0;
            pp_post(rt->stage[rk->last].actor, PP_MSG_CREDIT, &k, sizeof k);
        }
}

static int push_fifo(pp_rank *rk, pp_rec *rec)
{
    void *b = rk->fifo;
    const int r = act_ring_reserve(&b, &rk->f_head, rk->f_len, &rk->f_cap, sizeof *rk->fifo);
    rk->fifo = b;
    if (r != 0)
        return r;
    rk->fifo[(rk->f_head + rk->f_len++) % rk->f_cap] = rec;
    return 0;
}

static int push_out(pp_rank *rk, pp_out o)
{
    void *b = rk->outq;
    const int r = act_ring_reserve(&b, &rk->oq_head, rk->oq_len, &rk->oq_cap, sizeof *rk->outq);
    rk->outq = b;
    if (r != 0)
        return r;
    rk->outq[(rk->oq_head + rk->oq_len++) % rk->oq_cap] = o;
    return 0;
}

/* The header of rec (walk times of every stage up to this rank's last). */
static void fill_step(pp_rank *rk, const pp_rec *rec, int k, pp_wire_step *h)
{
    memset(h, 0, sizeof *h);
    h->magic = PP_WIRE_MAGIC;
    h->k = k;
    h->id = rec->id;
    h->kind = (int32_t)rec->kind;
    h->B = rec->B;
    h->out_rows = rec->out_rows;
    h->argmax = rec->argmax;
    h->seams = rec->seams;
    for (int s = 0; s <= rk->last; s++) {
        h->t[2 * s] = rec->mark[s].t0_ns;
        h->t[2 * s + 1] = rec->mark[s].t1_ns;
    }
    if (atomic_load(&rec->failed)) {
        h->status = rec->pending->status ? rec->pending->status : MEMRA_E_DEVICE;
        snprintf(h->msg, sizeof h->msg, "%s", rec->pending->err.msg);
    }
}

/* A step left this rank: rank 0 keeps its record for the result; another rank's shadow record is done here. */
static void step_left(pp_rank *rk, pp_rec *rec)
{
    if (rk->self == 0) {
        if (push_fifo(rk, rec) != 0) {
            dev_err_set(&rk->err, MEMRA_E_NOMEM, "MPI transport: out of host memory");
            fail_step0(rk, rec);
        }
        return;
    }
    act_pending_release(rec->pending); /* the pipeline's reference: nobody waits a shadow step */
    pp_rec_free(rec);
    pp_inflight_add(rk->rt, -1);
}

/* Steps leaving, in order, each once its wire mark is done (bnd_wire_ready: BND_MPI's d2h copy, BND_NCCL's walk
 * end). 1 if one left. */
static int pump_out(pp_rank *rk)
{
    int moved = 0;
    while (rk->oq_len > 0 && !rk->dead) {
        pp_out o = rk->outq[rk->oq_head];
        const int q = o.k >= 0 ? dev_event_query(bnd_wire_ready(rk->out, o.k)) : 1;
        if (q == 0)
            break;
        if (q < 0 && rk->out_nccl) { /* its ncclSend may be enqueued: without the matching header the pair's order
                                      * is lost, so the runtime stops */
            dev_err_set(&rk->err, MEMRA_E_DEVICE, "rank %d: stage %d's stream failed before its NCCL send of step "
                        "%llu", rk->self, rk->last, (unsigned long long)o.rec->id);
            die(rk);
            return 1;
        }
        if (q < 0) /* the stage's stream failed before the copy: the step goes on as failed, its slot stays ours */
            pp_rec_fail(o.rec, MEMRA_E_DEVICE, "stage stream", NULL);
        pp_wire_step h;
        int r;
        if (o.k >= 0 && q > 0 && rk->out_nccl) {
            /* ordered by ev_wire[k]: the walk and its markers ran before it; the payload is the stage's ncclSend,
             * enqueued behind it on its stream. hdr[k] is free: our credit for k waited for its previous send */
            fill_step(rk, o.rec, o.k, &h);
            char *m = rk->hdr[o.k];
            const size_t rows = (size_t)o.rec->B * sizeof(int32_t);
            memcpy(m, &h, sizeof h);
            memcpy(m + sizeof h, o.rec->pos, rows);
            memcpy(m + sizeof h + rows, o.rec->seq, rows);
            r = bnd_mpi_isend(rk->out_peer, BND_TAG_SLOT, m, sizeof h + 2 * rows, &rk->send_req[o.k], &rk->err);
        } else if (o.k >= 0 && q > 0) {
            /* ordered by ev_tx[k]: the copy into the slot's payload and the walk's markers ran before it */
            fill_step(rk, o.rec, o.k, &h);
            char *slot = bnd_mpi_slot(rk->out, o.k);
            memcpy(slot, &h, sizeof h);
            r = bnd_mpi_isend(rk->out_peer, BND_TAG_SLOT, slot, BND_MPI_HDR + pp_frame_bytes(rk->rt, o.rec->B),
                              &rk->send_req[o.k], &rk->err);
        } else {
            fill_step(rk, o.rec, -1, &h);
            r = small_send(rk, rk->out_peer, BND_TAG_SLOT, &h, sizeof h, &rk->err);
            if (o.k >= 0) /* nothing was sent on the slot: the producer may reuse it */
                pp_post(rk->rt->stage[rk->last].actor, PP_MSG_CREDIT, &o.k, sizeof o.k);
        }
        if (r) {
            die(rk);
            return 1;
        }
        rk->oq_head = (rk->oq_head + 1) % rk->oq_cap;
        rk->oq_len--;
        step_left(rk, o.rec);
        moved = 1;
    }
    return moved;
}

/* A step arrived from the previous rank (n bytes in rx): its shadow record goes to our first stage. */
static int step_in(pp_rank *rk, size_t n)
{
    act_pp *rt = rk->rt;
    pp_wire_step h;
    memcpy(&h, rk->rx, sizeof h);
    const size_t rows = h.B > 0 ? (size_t)h.B * sizeof(int32_t) : 0;
    if (n < sizeof h || h.magic != PP_WIRE_MAGIC || h.B < 1 || h.B > rt->max_rows || h.k >= bnd_slots(rk->in) ||
        (h.k >= 0 && !rk->in_nccl && n < BND_MPI_HDR + pp_frame_bytes(rt, h.B)) ||
        (h.k >= 0 && rk->in_nccl && n != sizeof h + 2 * rows))
        return dev_err_set(&rk->err, MEMRA_E_FORMAT, "rank %d: a malformed step from rank %d (%zu bytes)", rk->self,
                           rk->in_peer, n), -1;
    pp_rec *rec = calloc(1, sizeof *rec + (size_t)rt->N * sizeof(pp_mark));
    int32_t *arr = calloc(3 * (size_t)h.B, sizeof(int32_t));
    if (!rec || !arr) {
        free(rec);
        free(arr);
        return dev_err_set(&rk->err, MEMRA_E_NOMEM, "rank %d: out of host memory", rk->self), -1;
    }
    rec->id = h.id;
    rec->kind = (act_step_kind)h.kind;
    rec->B = h.B;
    rec->out_rows = h.out_rows;
    rec->argmax = h.argmax;
    rec->seams = h.seams;
    rec->head_buf = -1;
    rec->tokens = arr; /* read by stage 0 only, which is rank 0's */
    rec->seq = arr + h.B;
    rec->pos = arr + 2 * h.B;
    if (h.k >= 0) { /* the record's positions and sequences (pp_keys, the head): BND_NCCL [header | pos | seq]
                     * (the frame itself comes by the stage's ncclRecv), BND_MPI the frame's [x | pos | seq] */
        const size_t at = rk->in_nccl ? sizeof h : BND_MPI_HDR + (size_t)h.B * (size_t)rt->n_embd * sizeof(float);
        const char *pl = (const char *)rk->rx + at;
        memcpy(rec->pos, pl, rows);
        memcpy(rec->seq, pl + rows, rows);
    }
    if (h.k >= 0 && !rk->in_nccl) {
        /* the slot is named by the header inside the message (one tag keeps the steps in order), so the bytes
         * land in rx first: one host copy of the frame per hop. The slot's ready mark: the receive completed;
         * the TOKEN below orders the stage's copy after it */
        memcpy(bnd_mpi_slot(rk->in, h.k), rk->rx, n);
    }
    for (int s = 0; s < rk->first; s++) {
        rec->mark[s].t0_ns = h.t[2 * s];
        rec->mark[s].t1_ns = h.t[2 * s + 1];
    }
    dev_err e = {0};
    if (!(rec->pending = pp_pending_get(rt, rec, &e))) {
        pp_rec_free(rec);
        rk->err = e;
        return -1;
    }
    act_pending_release(rec->pending); /* the caller's reference: nobody waits a shadow step */
    if (h.k < 0) {
        dev_err fe = {0};
        dev_err_set(&fe, h.status ? h.status : MEMRA_E_DEVICE, "%s", h.msg);
        pp_rec_fail(rec, fe.code, "upstream rank", &fe);
    }
    pp_inflight_add(rt, 1);
    struct { pp_rec *rec; int k; } tok = {rec, h.k};
    /* ordered by the first stage's mailbox; BND_MPI: the slot's bytes are in host memory before the post; BND_NCCL:
     * the stage enqueues the receive of this step's bytes on TOKEN, after those of the steps before it */
    pp_post(rt->stage[rk->first].actor, PP_MSG_TOKEN, &tok, sizeof tok);
    return 0;
}

/* Rank 0: a step's result arrived: into its pending, then the readback actor finishes it. */
static int result_in(pp_rank *rk, int src, size_t n, char *buf)
{
    act_pp *rt = rk->rt;
    pp_wire_result h;
    memcpy(&h, buf, sizeof h < n ? sizeof h : n);
    if (n < sizeof h || h.magic != PP_WIRE_MAGIC || rk->f_len == 0 || rk->fifo[rk->f_head]->id != h.id) {
        free(buf);
        return dev_err_set(&rk->err, MEMRA_E_FORMAT, "rank 0: a result from rank %d for no step in flight (id %llu)",
                           src, (unsigned long long)h.id), -1;
    }
    pp_rec *rec = rk->fifo[rk->f_head];
    rk->f_head = (rk->f_head + 1) % rk->f_cap;
    rk->f_len--;
    act_pending *p = rec->pending;
    const size_t want = pp_result_bytes(rt, rec);
    if (h.status != 0) {
        dev_err e = {0};
        dev_err_set(&e, h.status, "%s", h.msg);
        pp_rec_fail(rec, h.status, "rank", &e);
    } else if (n - sizeof h != want) {
        dev_err e = {0};
        dev_err_set(&e, MEMRA_E_FORMAT, "rank %d sent %zu result bytes for step %llu (want %zu)", src, n - sizeof h,
                    (unsigned long long)h.id, want);
        pp_rec_fail(rec, MEMRA_E_FORMAT, "MPI transport", &e);
    } else {
        memcpy(p->host, buf + sizeof h, want);
    }
    for (int s = 0; s < rt->N; s++) /* the walks' times: the stages of rank 0 from its own markers */
        if (rk->owner[s] != 0) {
            p->stamps[2 * s] = h.t[2 * s];
            p->stamps[2 * s + 1] = h.t[2 * s + 1];
        } else {
            p->stamps[2 * s] = rec->mark[s].t0_ns;
            p->stamps[2 * s + 1] = rec->mark[s].t1_ns;
        }
    free(buf);
    p->times.synced_ns = pp_now_ns();
    /* rec changes hands: the readback actor finishes it (ordered by its mailbox) */
    pp_post(rt->rb_actor, PP_MSG_RESULT, &rec, sizeof rec);
    return 0;
}

/* The next whole message with tag from rank `from` (-1: any) into ib, received without blocking: 1 when ib holds
 * one (ib->buf: `fixed`, cap bytes, or a malloc of the message's size that the caller takes; ib->n, ib->src), 0
 * while none has arrived or its bytes are still moving, -1 on an MPI error or no memory (rk->err). */
static int inbox_next(pp_rank *rk, pp_inbox *ib, int from, int tag, void *fixed, size_t cap, uint64_t now)
{
    if (!ib->req) {
        int src, r;
        size_t n;
        if ((r = bnd_mpi_probe(from, tag, &src, &n, &rk->err)) != 1)
            return r < 0 ? -1 : 0;
        rk->heard[src] = now;
        if (!(ib->buf = fixed ? fixed : malloc(n ? n : 1)))
            return dev_err_set(&rk->err, MEMRA_E_NOMEM, "rank %d: out of host memory", rk->self), -1;
        ib->n = n, ib->src = src;
        if (bnd_mpi_irecv(src, tag, ib->buf, fixed ? cap : n, &ib->req, &rk->err) != 0) {
            if (!fixed)
                free(ib->buf);
            ib->buf = NULL;
            return -1;
        }
    }
    int done = 0;
    if (bnd_mpi_test(ib->req, &done, &rk->err) != 0)
        return -1;
    if (!done)
        return 0;
    ib->req = NULL; /* freed by the test */
    rk->heard[ib->src] = now;
    return 1;
}

/* One round: steps out, credits both ways, messages in, beats. 1 when something moved. */
static int poll_once(pp_rank *rk)
{
    act_pp *rt = rk->rt;
    int moved = pump_out(rk), r, src;
    size_t n;
    const uint64_t now = pp_now_ns();
    for (int k = 0; rk->out && k < bnd_slots(rk->out); k++) { /* producer: credit arrived and our send is done */
        if (!rk->credit_in[k])
            continue;
        int done = 1;
        if (rk->send_req[k] && bnd_mpi_test(rk->send_req[k], &done, &rk->err) != 0) {
            die(rk);
            return 1;
        }
        if (done) {
            rk->send_req[k] = NULL;
            rk->credit_in[k] = 0;
            /* credit: the consumer rank copied slot k out (ev_rx; BND_NCCL: enqueued its receive) and MPI no longer
             * reads our slot k (BND_NCCL: hdr[k]) */
            pp_post(rt->stage[rk->last].actor, PP_MSG_CREDIT, &k, sizeof k);
            moved = 1;
        }
    }
    for (int k = 0; rk->in && k < bnd_slots(rk->in); k++) /* consumer: our stage copied slot k out */
        if (rk->credit_out[k] && (rk->in_nccl || dev_event_query(bnd_mpi_ev_rx(rk->in, k)) != 0)) {
            rk->credit_out[k] = 0;
            int32_t kk = k;
            /* credit: BND_MPI: ev_rx[k] completed, so slot k may be filled again; BND_NCCL: the stage posted it
             * after enqueuing its ncclRecv of slot k, which is all the producer's next send of k needs */
            if (small_send(rk, rk->in_peer, BND_TAG_CREDIT, &kk, sizeof kk, &rk->err) != 0) {
                die(rk);
                return 1;
            }
            moved = 1;
        }
    /* steps from the previous rank, one at a time into rx, each received without blocking: a sender stopped
     * mid-message (a large one moves only while its sender runs) leaves this loop polling, so the beats and the
     * silence check below go on */
    while (rk->in && (r = inbox_next(rk, &rk->steps, rk->in_peer, BND_TAG_SLOT, rk->rx, rk->rx_cap, now)) != 0) {
        if (r < 0 || step_in(rk, rk->steps.n) != 0) {
            die(rk);
            return 1;
        }
        moved = 1;
    }
    while (rk->out && (r = bnd_mpi_probe(rk->out_peer, BND_TAG_CREDIT, &src, &n, &rk->err)) == 1) {
        int32_t k = -1;
        rk->heard[src] = now;
        if (bnd_mpi_recv(src, BND_TAG_CREDIT, &k, sizeof k, &rk->err) != 0 || k < 0 || k >= bnd_slots(rk->out)) {
            if (!rk->err.code)
                dev_err_set(&rk->err, MEMRA_E_FORMAT, "rank %d: credit %d from rank %d", rk->self, k, src);
            die(rk);
            return 1;
        }
        rk->credit_in[k] = 1;
        moved = 1;
    }
    while (rk->self == 0 && (r = inbox_next(rk, &rk->results, -1, BND_TAG_RESULT, NULL, 0, now)) != 0) {
        char *buf = rk->results.buf; /* the last rank's result, received the same way; result_in frees it */
        rk->results.buf = NULL;
        if (r < 0 || result_in(rk, rk->results.src, rk->results.n, buf) != 0) {
            die(rk);
            return 1;
        }
        moved = 1;
    }
    if (rk->steps.req || rk->results.req)
        moved = 1; /* a message mid-transfer moves only while MPI is called: poll again without a nap */
    while ((r = bnd_mpi_probe(-1, BND_TAG_BEAT, &src, &n, &rk->err)) == 1) {
        char b[8];
        rk->heard[src] = now;
        if (bnd_mpi_recv(src, BND_TAG_BEAT, b, sizeof b, &rk->err) != 0) {
            die(rk);
            return 1;
        }
    }
    if (rk->self != 0 && (r = bnd_mpi_probe(0, BND_TAG_DESTROY, &src, &n, &rk->err)) == 1) {
        char b[8];
        bnd_mpi_recv(0, BND_TAG_DESTROY, b, sizeof b, &rk->err);
        rk->ended = 1;
        over(rk, 0, NULL); /* the serve loop destroys the runtime; beats stop with the transport */
        return 1;
    }
    for (int i = 0; i < rk->n_small;) { /* small sends done: free their buffers */
        int done = 0;
        if (bnd_mpi_test(rk->smalls[i].req, &done, &rk->err) != 0) {
            die(rk);
            return 1;
        }
        if (done) {
            free(rk->smalls[i].buf);
            rk->smalls[i] = rk->smalls[--rk->n_small];
        } else {
            i++;
        }
    }
    if (now - rk->last_beat >= PP_BEAT_NS) {
        rk->last_beat = now;
        /* NCCL's own failure (a broken connection while the peer's process still beats): a stream waiting in
         * NCCL would wait for ever, so it stops the runtime like a silent rank */
        if (bnd_check(rk->in, &rk->err) != 0 || bnd_check(rk->out, &rk->err) != 0) {
            die(rk);
            return 1;
        }
        for (int q = 0; q < rk->P; q++) {
            if (q == rk->self)
                continue;
            if (small_send(rk, q, BND_TAG_BEAT, "beat", 5, &rk->err) != 0) {
                die(rk);
                return 1;
            }
            if (now > rk->heard[q] && now - rk->heard[q] > PP_SILENT_NS) {
                dev_err_set(&rk->err, MEMRA_E_DEVICE, "rank %d: rank %d silent for %.1f s (dead or stuck; a rank "
                            "stops when a peer is silent for %.1f s)", rk->self, q,
                            (double)(now - rk->heard[q]) / 1e9, (double)PP_SILENT_NS / 1e9);
                die(rk);
                return 1;
            }
        }
    }
    return moved;
}

int pp_rank_tp_kick(pp_rank *rk)
{
    dev_err e = {0};
    act_msg *m = act_msg_new(rk->tp, PP_MSG_POLL, &e);
    return m ? act_send(rk->tp, m, &e) : e.code; /* refused once stopped: the polling ends */
}

int pp_rank_tp_handle(act_actor *a, act_msg *m, void *ctx)
{
    (void)a;
    pp_rank *rk = ctx;
    act_pp *rt = rk->rt;
    switch (m->kind) {
    case PP_MSG_TOKEN: { /* from our last stage: a step for the next rank */
        struct { pp_rec *rec; int k; } tok;
        memcpy(&tok, m->payload, sizeof tok);
        if (rk->dead) {
            if (rk->self == 0) {
                if (tok.k >= 0) {
                    dev_event_sync(bnd_wire_ready(rk->out, tok.k), NULL); /* its stream passed the markers */
                    pp_post(rt->stage[rk->last].actor, PP_MSG_CREDIT, &tok.k, sizeof tok.k);
                }
                fail_step0(rk, tok.rec);
            }
            break;
        }
        if (push_out(rk, (pp_out){tok.rec, tok.k}) != 0) {
            dev_err_set(&rk->err, MEMRA_E_NOMEM, "MPI transport: out of host memory");
            die(rk);
        }
        break;
    }
    case PP_MSG_CREDIT: { /* from our first stage: slot k of the inbound boundary is copied out (or abandoned) */
        int k;
        memcpy(&k, m->payload, sizeof k);
        if (rk->in && k >= 0 && k < bnd_slots(rk->in))
            rk->credit_out[k] = 1;
        break;
    }
    case PP_MSG_SEND_RESULT: { /* from our readback actor: [pp_wire_result | rows] for rank 0 */
        struct { void *buf; size_t n; } res;
        memcpy(&res, m->payload, sizeof res);
        bnd_mpi_req *q;
        if (!rk->dead && bnd_mpi_isend(0, BND_TAG_RESULT, res.buf, res.n, &q, &rk->err) == 0) {
            dev_err e = {0};
            if (smalls_reserve(rk, &e) == 0) {
                rk->smalls[rk->n_small++] = (pp_small){q, res.buf};
                break;
            }
            bnd_mpi_req_free(q); /* no room to track it: the buffer leaks rather than die under MPI */
            break;
        }
        free(res.buf);
        die(rk);
        break;
    }
    case PP_MSG_SHUTDOWN: { /* rank 0, drained: every rank destroys its runtime */
        for (int q = 1; q < rk->P && !rk->dead; q++)
            if (small_send(rk, q, BND_TAG_DESTROY, "bye", 4, &rk->err) != 0)
                die(rk);
        const uint64_t until = pp_now_ns() + 2000000000ull; /* bounded: a dead peer never takes them */
        while (!rk->dead && rk->n_small > 0 && pp_now_ns() < until) {
            poll_once(rk);
            struct timespec nap = {0, 100000};
            nanosleep(&nap, NULL);
        }
        return 0;
    }
    case PP_MSG_POLL: {
        if ((!rk->dead || rk->self == 0) && !rk->ended) {
            int moved = rk->dead ? 0 : poll_once(rk);
            rk->idle = moved ? 0 : rk->idle + 1;
            if (rk->idle > 64) { /* nothing for a while: poll at ~5 kHz instead of spinning on a shared core */
                struct timespec nap = {0, 200000};
                nanosleep(&nap, NULL);
            } else if (rk->idle > 4) {
                struct timespec nap = {0, 20000};
                nanosleep(&nap, NULL);
            }
            pp_rank_tp_kick(rk);
        }
        break;
    }
    default:
        break;
    }
    return 0;
}
