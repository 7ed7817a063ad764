/* A stage actor: takes STEP (stage 0) or TOKEN (stage s > 0) messages, enqueues its part of the step on its
 * own stream and returns to its mailbox at once. Steps are processed strictly in arrival order (the stage's
 * frame buffer is reused step after step, ordered by its stream). A step that needs an outbound slot whose
 * credit is out waits in the stage's queue until the CREDIT message for that slot arrives.
 * All state touched here is this actor thread's own (see pp_internal.h), except the marker callbacks, which
 * run on the stage's stream (device side) and touch only atomics. */
#include "actors/pp_internal.h"
#include "actors/ring.h"
#include "kernels/krn.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>


uint64_t pp_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Walk-begin marker, on the stage's stream when it reaches the walk: the device-side liveness counter. */
void pp_walk_begin(void *arg)
{
    pp_mark *mk = arg;
    pp_stage *st = mk->stage;
    act_pp *rt = st->rt;
    uint64_t bit = 1ull << st->s;
    pp_hooks *h = pp_hooks_of(rt);
    if (h && st->s == 0 && atomic_load(&h->hold_start)) { /* test hook: the gate is still posting its steps */
        int ms = atomic_load(&h->rendezvous_ms);
        uint64_t deadline = pp_now_ns() + (uint64_t)(ms > 0 ? ms : 1000) * 1000000u;
        struct timespec nap = {0, 20000};
        while (atomic_load(&h->hold_start) && pp_now_ns() < deadline)
            nanosleep(&nap, NULL);
    }
    uint64_t before = atomic_fetch_or(&rt->active_mask, bit);
    if (before & ~bit) { /* another stage's stream is mid-walk right now */
        atomic_fetch_add(&rt->ctr.pipe_overlaps, 1);
        if (mk->rec->kind == ACT_STEP_PRIME || mk->rec->kind == ACT_STEP_PRIME_BATCH)
            atomic_fetch_add(&rt->ctr.prime_pipe_overlaps, 1);
    }
    atomic_fetch_add(&st->begins, 1);
    mk->t0_ns = pp_now_ns();
}

/* Walk-end marker: busy time, the rendezvous test hook, and (last stage of a split) the split counters. */
void pp_walk_end(void *arg)
{
    pp_mark *mk = arg;
    pp_stage *st = mk->stage;
    act_pp *rt = st->rt;
    uint64_t bit = 1ull << st->s;
    pp_hooks *h = pp_hooks_of(rt);
    int rv_ms = h ? atomic_load(&h->rendezvous_ms) : 0;
    /* Test hook (rendezvous): hold this walk open (bounded) until a neighbour begins a walk that can begin
     * without us, so its walk-begin sees us mid-walk and the overlap counter never depends on timing:
     *  - upstream: stage s-1 beginning the next step (it needs nothing more from us: we already received
     *    this step, which frees the slot its next send needs);
     *  - downstream: stage s+1 beginning the previous step (we already sent it).
     * Holds only wait on work that needs nothing from the holder, so they cannot form a cycle. */
    uint64_t w = atomic_load(&st->begins) - 1; /* index of the step we are walking (never reset) */
    if (rv_ms > 0) {
        uint64_t deadline = pp_now_ns() + (uint64_t)rv_ms * 1000000u;
        struct timespec nap = {0, 20000};
        /* a neighbour in another rank (pp_rank.c) is not waited for: its walks are not counted here */
        int up = st->s > 0 && !rt->stage[st->s - 1].remote && atomic_load(&h->posted) >= w + 2;
        int down = st->s + 1 < rt->N && !rt->stage[st->s + 1].remote && w >= 1;
        while (((up && atomic_load(&rt->stage[st->s - 1].begins) < w + 2) ||
                (down && atomic_load(&rt->stage[st->s + 1].begins) < w)) &&
               pp_now_ns() < deadline)
            nanosleep(&nap, NULL);
    }
    const uint64_t t1 = pp_now_ns();
    atomic_fetch_add(&st->busy_ns, t1 - mk->t0_ns);
    mk->t1_ns = t1; /* the next stage's hop mark and, across ranks, the step's header read it */
    if (act_trace_on()) { /* the walk on this stream's worker clock */
        act_trace_span(ACT_TR_WALK, ACT_TRACE_STREAM(st->s), mk->t0_ns, t1, mk->rec->id, mk->rec->B,
                       (int)mk->rec->kind, st->s == rt->N - 1 ? mk->rec->out_rows : 0);
    }
    atomic_fetch_add(&st->walks, 1);
    atomic_fetch_and(&rt->active_mask, ~bit);
    if (st->s == rt->N - 1 && rt->N >= 2)
        pp_count_split(rt, mk->rec->kind);
}

/* Tracing, stage s > 0: the step's frame is copied out of its inbound slot (on this stage's stream): the hop
 * from stage s-1's walk end, on boundary s-1. */
static void pp_hop_mark(void *arg)
{
    pp_mark *mk = arg;
    const pp_mark *prev = mk - 1; /* stage s-1's mark of the same step */
    uint64_t t0 = prev->t1_ns;    /* ordered by ev_tx[kin]: its worker set it before the send's record */
    if (t0)
        act_trace_async(ACT_TR_HOP, ACT_TRACE_HOP(mk->stage->s - 1), t0, pp_now_ns(), mk->rec->id, 0, 0, mk->kin);
}

/* A walk whose enqueue failed after its begin marker: the stage is no longer mid-walk. */
static void pp_walk_abort(void *arg)
{
    pp_mark *mk = arg;
    atomic_fetch_and(&mk->stage->rt->active_mask, ~(1ull << mk->stage->s));
}

void pp_count_split(act_pp *rt, act_step_kind kind)
{
    atomic_fetch_add(&rt->ctr.split_steps, 1);
    switch (kind) {
    case ACT_STEP_BATCH: atomic_fetch_add(&rt->ctr.batch_split_steps, 1); break;
    case ACT_STEP_PRIME: atomic_fetch_add(&rt->ctr.prime_split_chunks, 1); break;
    case ACT_STEP_PRIME_BATCH:
        atomic_fetch_add(&rt->ctr.prime_split_chunks, 1);
        atomic_fetch_add(&rt->ctr.prime_batch_splits, 1);
        break;
    case ACT_STEP_SPEC: atomic_fetch_add(&rt->ctr.spec_split_steps, 1); break;
    default: break;
    }
}

void pp_account_stamps(act_pp *rt, const pp_rec *rec, uint64_t marked)
{
    const uint64_t *t = rec->pending->stamps;
    int prime = rec->kind == ACT_STEP_PRIME || rec->kind == ACT_STEP_PRIME_BATCH;
    for (int s = 0; s < rt->N; s++) {
        uint64_t b = t[2 * s], e = t[2 * s + 1] > b ? t[2 * s + 1] : b;
        const int s_marked = (int)(marked >> s & 1);
        /* "a stage began a walk while another was mid-walk", in either order against the recent walks; a pair of
         * marked stages was counted by their markers */
        for (int o = 0; o < rt->N; o++)
            for (int i = 0; o != s && !(s_marked && (marked >> o & 1)) && i < rt->n_recent[o]; i++) {
                const struct pp_interval *j = &rt->recent[o][i];
                int hit = (b > j->b && b < j->e) ? prime : (j->b > b && j->b < e) ? j->prime : -1;
                if (hit >= 0) {
                    atomic_fetch_add(&rt->ctr.pipe_overlaps, 1);
                    if (hit)
                        atomic_fetch_add(&rt->ctr.prime_pipe_overlaps, 1);
                }
            }
        if (!s_marked) {
            pp_stage *st = &rt->stage[s];
            atomic_fetch_add(&st->busy_ns, e - b);
            atomic_fetch_add(&st->walks, 1);
            atomic_fetch_add(&st->begins, 1);
        }
    }
    int k = rt->recent_next++ % 8; /* remember this step's walks: a ring of the last 8 stamped steps */
    for (int s = 0; s < rt->N; s++) {
        rt->recent[s][k] = (struct pp_interval){t[2 * s], t[2 * s + 1], prime};
        if (rt->n_recent[s] < 8)
            rt->n_recent[s]++;
    }
    if (rt->N >= 2)
        pp_count_split(rt, rec->kind);
}

/* Stage 0's next pinned staging buffer (a ring of PP_STAGING_RING) into *i, once the upload that last read it
 * is done; 0 or the failed upload's error. */
static int staging_take(pp_stage *st, int *i, dev_err *err)
{
    *i = st->staging_next;
    st->staging_next = (*i + 1) % PP_STAGING_RING;
    /* ordered by staging_ev[i]: the upload that last read this buffer must be done before we refill it */
    return dev_event_sync(st->staging_ev[*i], err);
}

/* After the upload from staging buffer i is enqueued: staging_ev[i] marks when the buffer may be refilled. */
static int staging_done(pp_stage *st, int i, dev_err *err)
{
    int r = dev_event_record_async(st->staging_ev[i], st->stream);
    return r ? dev_err_set(err, r, "stage 0: staging event record failed") : 0;
}

/* Stage 0: gather the step's embedding rows on the host into a pinned staging buffer and upload
 * [x | pos | seq] into the frame on stage 0's stream — the position snapshot lands BEFORE the first TX. */
static int stage0_upload(pp_stage *st, pp_rec *rec, dev_err *err)
{
    act_pp *rt = st->rt;
    int i, r;
    if ((r = staging_take(st, &i, err)) != 0 || (r = pp_fill_frame(rt, rec, st->staging[i], err)) != 0)
        return r;
    if ((r = dev_copy_h2d_async(st->stream, st->frame, st->staging[i], pp_frame_bytes(rt, rec->B))) != 0)
        return dev_err_set(err, r, "stage 0: upload of the step's frame failed");
    return staging_done(st, i, err);
}

/* Stage 0, a fed step: wait on its stream for each row's sequence's token (feed_ev[seq]; the FEED message that
 * let this step out of the queue says its producers' records are enqueued, and no later record of those
 * sequences can be: their later steps queue behind this one), upload [pos | seq] only and embed the rows on the
 * device straight from their sequences' slots: one embed per run of rows whose sequences follow one another
 * (feed_tok is indexed by sequence), so no copy node sits between the steps (one run at B = 1, or for sequences
 * 0..B-1 in order). */
static int stage0_feed(pp_stage *st, pp_rec *rec, dev_err *err)
{
    act_pp *rt = st->rt;
    int i, r;
    if ((r = staging_take(st, &i, err)) != 0)
        return r;
    char *host = st->staging[i], *frame = st->frame;
    const size_t xb = pp_fill_meta(rt, rec, host), tb = (size_t)rec->B * sizeof(int32_t);
    for (int b = 0; b < rec->B; b++)
        /* ordered by feed_ev[seq]: the last stage's stream wrote feed_tok[seq] before recording it */
        if ((r = dev_stream_wait_event_async(st->stream, rt->feed_ev[rec->seq[b]])) != 0)
            return dev_err_set(err, r, "stage 0: wait for the fed token of row %d failed", b);
    if ((r = dev_copy_h2d_async(st->stream, frame + xb, host + xb, 2 * tb)) != 0)
        return dev_err_set(err, r, "stage 0: upload of the step's positions failed");
    if ((r = staging_done(st, i, err)) != 0)
        return r;
    for (int b0 = 0, b1; b0 < rec->B; b0 = b1) {
        b1 = pp_seq_run_end(rec->seq, b0, rec->B);
        float *y = (float *)st->frame + (size_t)b0 * (size_t)rt->n_embd;
        if ((r = krn_embed_rows_async(st->stream, y, &rt->embd_dev, rt->feed_tok + rec->seq[b0], b1 - b0)) != 0)
            return dev_err_set(err, r, "stage 0: embedding of fed rows %d..%d failed", b0, b1 - 1);
    }
    atomic_fetch_add(&rt->ctr.fed_steps, 1);
    return 0;
}

/* What a stage's walk enqueues: its layers [fence[s], fence[s+1]), then, when rec holds one of the last stage's
 * logits buffers (pp_head_take), the head and the argmax into it. captured: into a graph. */
static int walk_body(pp_stage *st, pp_rec *rec, float *x, const int32_t *pos, const int32_t *seq, int keys,
                     int captured, dev_err *err)
{
    act_pp *rt = st->rt;
    int r = mdl_forward_layers_async(rt->model, rt->kv, st->scratch, st->stream, x, pos, seq, rec->B, keys,
                                     rt->fence[st->s], rt->fence[st->s + 1], err);
    return r == 0 && rec->head_buf >= 0 ? pp_head_enqueue(st, rec, x, seq, captured, err) : r;
}

static int graph_key_eq(const pp_graph_key *a, const pp_graph_key *b)
{
    return a->B == b->B && a->pdl == b->pdl && a->keys == b->keys && a->head_buf == b->head_buf &&
           a->out_rows == b->out_rows && a->argmax == b->argmax && a->feed == b->feed;
}

/* The walk (walk_body) on the stage's stream. With MEMRA_PP_GRAPH (rec->seams.graph) on a backend with graphs:
 * the second step of each pp_graph_key is captured as a graph (nothing runs during the capture) and every such
 * step from then on, that one too, is one graph launch. The first step of a key runs eagerly: a capture and its
 * instantiation cost about as much as several eager walks (a 32-layer 8B walk: 15-30 ms), and a scheduler whose
 * micro-batches grow or shrink by a row at a time meets many B once each (docs/bench/gpu.md, serving). A graph is valid for all steps of its key: its kernels read x, pos
 * and seq from this stage's frame, the KV cache, the scratch, the logits buffer and the feed's token slots, whose
 * addresses never change, and nothing else per step (pp_keys: a bound, so every step under it may replay the graph
 * captured for it; the argmax finds the rows' token slots through the frame's seq). Markers stay outside
 * (stage_run). Capture unsupported (CPU) or failed: eager, and this stage stops trying; no slot left: eager.
 * Actor thread only. */
static int stage_walk(pp_stage *st, pp_rec *rec, float *x, const int32_t *pos, const int32_t *seq, dev_err *err)
{
    act_pp *rt = st->rt;
    const int keys = pp_keys(rt, rec), head = rec->head_buf >= 0;
    if (rec->seams.graph && !st->graph_off) {
        const pp_graph_key key = {.B = rec->B, .pdl = rec->seams.pdl, .keys = keys, .head_buf = rec->head_buf,
                                  .out_rows = head ? rec->out_rows : 0, .argmax = head ? rec->argmax : 0,
                                  .feed = head && pp_feed_dup(st, rec) != NULL};
        dev_graph *g = NULL;
        for (int i = 0; i < st->n_graph && !g; i++)
            if (graph_key_eq(&st->graph[i].key, &key))
                g = st->graph[i].g;
        int again = 0; /* the key was walked before: capture it now */
        for (int i = 0; i < st->n_seen && !g && !again; i++)
            again = graph_key_eq(&st->seen[i], &key);
        if (!g && !again) { /* its first step: remember the key, walk eagerly */
            st->seen[st->seen_next] = key;
            st->seen_next = (st->seen_next + 1) % PP_GRAPH_SEEN;
            st->n_seen += st->n_seen < PP_GRAPH_SEEN;
        }
        if (!g && again && st->n_graph < PP_GRAPH_SLOTS) {
            dev_err ce = {0};
            if (dev_stream_capture_begin(st->stream, &ce) == 0) {
                int r = walk_body(st, rec, x, pos, seq, keys, 1, err);
                int rc = dev_stream_capture_end(st->stream, &g, &ce); /* ends the capture on every path */
                if (r) {
                    dev_graph_destroy(g);
                    return r;
                }
                if (rc == 0) {
                    st->graph[st->n_graph].key = key;
                    st->graph[st->n_graph].g = g;
                    st->n_graph++;
                    atomic_fetch_add(&rt->ctr.graph_captures, 1);
                } else {
                    dev_graph_destroy(g);
                    g = NULL;
                    st->graph_off = 1; /* nothing ran during the failed capture: run the walk eagerly below */
                }
            } else {
                st->graph_off = 1;
            }
        }
        if (g) {
            atomic_fetch_add(&rt->ctr.graph_replays, 1);
            int r = dev_graph_launch_async(g, st->stream);
            return r ? dev_err_set(err, r, "stage %d: graph launch (B = %d) failed", st->s, rec->B) : 0;
        }
    }
    return walk_body(st, rec, x, pos, seq, keys, 0, err);
}

/* Enqueue this stage's whole part of one step. kout is the outbound slot (credit held), -1 for the last.
 * *credit_back is set once the inbound slot's credit went back to stage s-1 (so a failure after that
 * point must not return it twice, and a failure before it must still return it). */
static int stage_run(pp_stage *st, pp_rec *rec, int kin, int kout, int *credit_back, dev_err *err)
{
    act_pp *rt = st->rt;
    size_t bytes = pp_frame_bytes(rt, rec->B);
    float *x = st->frame;
    int32_t *pos = (int32_t *)(x + (size_t)rec->B * (size_t)rt->n_embd);
    int32_t *seq = pos + rec->B;
    int r, armed = st->s;
    pp_mark *mk = &rec->mark[st->s];
    mk->stage = st;
    mk->rec = rec;
    mk->kin = kin;
    pp_hooks *h = pp_hooks_of(rt);
    if (h && atomic_compare_exchange_strong(&h->inject_fail_stage, &armed, -1)) /* test hook */
        return dev_err_set(err, MEMRA_E_DEVICE, "stage %d: injected failure (test hook)", st->s);
    if (st->s == 0) {
        if ((r = rec->feed ? stage0_feed(st, rec, err) : stage0_upload(st, rec, err)) != 0)
            return r;
    } else {
        if ((r = bnd_recv_async(st->in, kin, st->stream, st->frame, bytes)) != 0)
            return dev_err_set(err, r, "stage %d: receive from boundary %d slot %d failed", st->s, st->s - 1, kin);
        if (act_trace_on() && !rec->stamped && (r = dev_host_fn_async(st->stream, pp_hop_mark, mk)) != 0)
            return dev_err_set(err, r, "stage %d: hop trace marker", st->s);
        /* credit: slot kin goes back to stage s-1 only now that our ev_rx[kin] record is enqueued */
        if ((r = pp_post(rt->stage[st->s - 1].actor, PP_MSG_CREDIT, &kin, sizeof kin)) != 0)
            return dev_err_set(err, r, "stage %d: could not return credit %d", st->s, kin);
        *credit_back = 1;
    }
    if (kout < 0 && (r = pp_head_take(st, rec, err)) != 0) /* before the walk's stamp: a wait is not walk time */
        return r;
    armed = st->s + ACT_PP_MAX_STAGES;
    if (h && atomic_compare_exchange_strong(&h->inject_fail_stage, &armed, -1)) /* test hook, late */
        return dev_err_set(err, MEMRA_E_DEVICE, "stage %d: injected failure, late (test hook)", st->s);
    /* the markers are host functions on the stream: on CUDA each holds the stream until the driver's callback
     * thread has run it; MEMRA_PP_MARKERS=0 drops them (measurement only: counters and busy % then stop) */
    const int marks =
        !rec->stamped && (rec->seams.markers || (h && atomic_load(&h->rendezvous_ms) > 0) || act_trace_on());
    if (marks && (r = dev_host_fn_async(st->stream, pp_walk_begin, mk)) != 0)
        return dev_err_set(err, r, "stage %d: walk marker", st->s);
    /* stamped (CUDA): the GPU writes its clock into the step's pinned record, no host callback on the stream */
    if (rec->stamped && (r = dev_stamp_async(st->stream, &rec->pending->stamps[2 * st->s])) != 0)
        return dev_err_set(err, r, "stage %d: walk stamp", st->s);
    uint64_t t_enq = pp_now_ns();
    const int pdl_prev = krn_set_pdl(rec->seams.pdl); /* this thread's launches only; no effect on CPU */
    r = stage_walk(st, rec, x, pos, seq, err);
    if (r == 0) {
        atomic_fetch_add(&st->enqueue_ns, pp_now_ns() - t_enq);
        atomic_fetch_add(&st->enqueues, 1);
        if (kout < 0) /* the head without a ring buffer, and the feed's tokens, are part of the last stage's walk */
            r = pp_head_finish(st, rec, x, err);
    }
    krn_set_pdl(pdl_prev);
    if (r != 0) {
        if (marks) /* the begin marker is enqueued: clear this stage's mid-walk bit when the stream gets there */
            dev_host_fn_async(st->stream, pp_walk_abort, mk);
        return r;
    }
    if (marks && (r = dev_host_fn_async(st->stream, pp_walk_end, mk)) != 0)
        return dev_err_set(err, r, "stage %d: walk marker", st->s);
    if (rec->stamped && (r = dev_stamp_async(st->stream, &rec->pending->stamps[2 * st->s + 1])) != 0)
        return dev_err_set(err, r, "stage %d: walk stamp", st->s);
    if (kout < 0) { /* completion: recorded after the walk end, so the counters are in before the readback */
        if ((r = dev_event_record_async(rec->pending->ev_done, st->stream)) != 0)
            return dev_err_set(err, r, "stage %d: completion event record failed", st->s);
        rec->pending->times.enqueued_ns = pp_now_ns();
        return 0;
    }
    if ((r = bnd_send_async(st->out, kout, st->stream, st->frame, bytes)) != 0)
        return dev_err_set(err, r, "stage %d: send on boundary %d slot %d failed", st->s, st->s, kout);
    return 0;
}

/* Pass the step on: TOKEN to the next stage, or READBACK from the last. kout < 0 on a failed step. */
static void stage_forward(pp_stage *st, pp_rec *rec, int kout)
{
    act_pp *rt = st->rt;
    if (st->s == rt->N - 1) {
        /* a feeding runtime: stage 0 may now wait feed_ev for this step (its record, if any, is enqueued) */
        if (rec->feeds) {
            const uint64_t seen = rec->id + 1;
            pp_post(rt->stage[0].actor, PP_MSG_FEED, &seen, sizeof seen);
        }
        /* rec changes hands: the readback actor is its last user (the mailbox orders our writes before its
         * take; the device work behind it is ordered by ev_done, which it waits) */
        pp_post(rt->rb_actor, PP_MSG_READBACK, &rec, sizeof rec);
        return;
    }
    /* ordered on the host by stage s+1's mailbox, on the device by ev_tx[kout] recorded by bnd_send_async */
    struct { pp_rec *rec; int k; } tok = {rec, kout};
    pp_post(rt->stage[st->s + 1].actor, PP_MSG_TOKEN, &tok, sizeof tok);
}

/* Tracing: the out-slot credits this stage holds, after a change. */
static void trace_credits(const pp_stage *st)
{
    if (act_trace_on() && st->out) {
        int held = 0;
        for (int k = 0; k < bnd_slots(st->out); k++)
            held += st->credit[k];
        act_trace_counter_of(ACT_TR_CREDITS, pp_now_ns(), held, st->s);
    }
}

/* Tracing: the head of the queue waits (a credit or a FEED): one instant per step and cause. */
static void trace_wait(pp_stage *st, const pp_rec *rec, act_trace_name what, int slot)
{
    if (act_trace_on() && st->tr_waited != rec->id + 1) {
        st->tr_waited = rec->id + 1;
        act_trace_instant(what, ACT_TRACE_STAGE(st->s), pp_now_ns(), rec->id, rec->B, 0, slot);
    }
}

/* Run queued steps in order while their outbound credit is available. */
static void stage_pump(pp_stage *st)
{
    act_pp *rt = st->rt;
    while (st->q_len > 0) {
        pp_item it = st->queue[st->q_head];
        pp_rec *rec = it.rec;
        int last = st->s == rt->N - 1;
        int failed = atomic_load(&rec->failed) || (st->s > 0 && it.kin < 0);
        if (st->s == 0 && rec->feed && !failed && st->feed_seen < rec->feed_after) {
            trace_wait(st, rec, ACT_TR_FEED_WAIT, -1);
            return; /* wait for the FEED of the ARGMAX step whose tokens this step embeds */
        }
        int kout = -1;
        if (!last && !failed) {
            kout = bnd_peek_slot(st->out, rec->seams.overlap);
            if (!st->credit[kout]) {
                trace_wait(st, rec, ACT_TR_CREDIT_WAIT, kout);
                return; /* wait for CREDIT(kout) from stage s+1 */
            }
        }
        st->q_head = (st->q_head + 1) % st->q_cap;
        st->q_len--;
        if (!failed) {
            if (!last) {
                bnd_next_slot(st->out, rec->seams.overlap);
                st->credit[kout] = 0;
                trace_credits(st);
            }
            dev_err e = {0};
            int credit_back = 0;
            const uint64_t t_run = act_trace_on() ? pp_now_ns() : 0;
            const int rr = stage_run(st, rec, it.kin, kout, &credit_back, &e);
            if (t_run)
                act_trace_span(ACT_TR_ENQUEUE, ACT_TRACE_STAGE(st->s), t_run, pp_now_ns(), rec->id, rec->B, it.kin,
                               kout);
            if (rr != 0) {
                pp_rec_fail(rec, e.code, "stage", &e);
                if (!last)
                    st->credit[kout] = 1; /* nothing was sent on it */
                if (st->s > 0 && !credit_back) /* the slot's token is abandoned: its producer may reuse it */
                    pp_post(rt->stage[st->s - 1].actor, PP_MSG_CREDIT, &it.kin, sizeof it.kin);
                kout = -1;
            }
        } else if (st->s > 0 && it.kin >= 0) {
            pp_post(rt->stage[st->s - 1].actor, PP_MSG_CREDIT, &it.kin, sizeof it.kin);
        }
        stage_forward(st, rec, kout);
    }
}

static int stage_enqueue(pp_stage *st, pp_item it)
{
    void *b = st->queue;
    const int r = act_ring_reserve(&b, &st->q_head, st->q_len, &st->q_cap, sizeof *st->queue);
    st->queue = b;
    if (r != 0)
        return r;
    st->queue[(st->q_head + st->q_len) % st->q_cap] = it;
    st->q_len++;
    return 0;
}

int pp_stage_handle(act_actor *a, act_msg *m, void *ctx)
{
    (void)a;
    pp_stage *st = ctx;
    if (act_trace_on() && st->tr_idle_ns) /* the mailbox was empty since the last handler returned */
        act_trace_span(ACT_TR_MAILBOX_WAIT, ACT_TRACE_STAGE(st->s), st->tr_idle_ns, pp_now_ns(), UINT64_MAX, 0, 0, 0);
    pp_hooks *h = pp_hooks_of(st->rt);
    if (h)
        pp_jitter(h);
    switch (m->kind) {
    case PP_MSG_STEP: {
        pp_rec *rec;
        memcpy(&rec, m->payload, sizeof rec);
        rec->pending->times.stage0_ns = pp_now_ns();
        act_trace_counter(ACT_TR_ROWS, ACT_TRACE_RUNTIME, rec->pending->times.stage0_ns, rec->B);
        if (stage_enqueue(st, (pp_item){rec, -1}) != 0) {
            pp_rec_fail(rec, MEMRA_E_NOMEM, "stage queue", NULL);
            stage_forward(st, rec, -1);
        }
        break;
    }
    case PP_MSG_TOKEN: {
        struct { pp_rec *rec; int k; } tok;
        memcpy(&tok, m->payload, sizeof tok);
        if (stage_enqueue(st, (pp_item){tok.rec, tok.k}) != 0) {
            pp_rec_fail(tok.rec, MEMRA_E_NOMEM, "stage queue", NULL);
            if (tok.k >= 0)
                pp_post(st->rt->stage[st->s - 1].actor, PP_MSG_CREDIT, &tok.k, sizeof tok.k);
            stage_forward(st, tok.rec, -1);
        }
        break;
    }
    case PP_MSG_CREDIT: {
        int k;
        memcpy(&k, m->payload, sizeof k);
        st->credit[k] = 1;
        trace_credits(st);
        break;
    }
    case PP_MSG_HEAD: { /* the last stage: the readback actor is done enqueuing its reads of logits buffer k */
        int k;
        memcpy(&k, m->payload, sizeof k);
        st->head_free[k] = 1;
        break;
    }
    case PP_MSG_FEED: { /* stage 0: the last stage took this ARGMAX step (FEEDs arrive in step order) */
        uint64_t seen;
        memcpy(&seen, m->payload, sizeof seen);
        st->feed_seen = seen;
        break;
    }
    default:
        break;
    }
    stage_pump(st);
    st->tr_idle_ns = act_trace_on() ? pp_now_ns() : 0;
    return 0;
}
