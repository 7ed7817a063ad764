/* The last stage's head: the output norm and lm_head into logits memory, the argmax, and the tokens a feeding
 * runtime leaves for its fed steps.
 *
 * Logits memory is one of PP_HEAD_RING fixed buffers when the step's seams ask for it (MEMRA_PP_HEAD_RING, on by
 * default) and its rows fit; otherwise pool memory, allocated per step on the stage's stream. Why a ring: a graph
 * holds fixed addresses. With pool memory the head runs after the walk's graph, eagerly, behind the allocation,
 * and its first kernel waits for the whole graph to end (no PDL across a graph launch): on the 8B step it started
 * 1.4 us after the last layer and ran 2 us longer than a layer's norm (docs/bench/gpu.md, "The head's logits ring"). In a
 * fixed buffer the head and the argmax are part of the walk, and a graph captures them with the layers. What it
 * costs: PP_HEAD_RING buffers of head_ring_rows rows (4 MB for Llama-3 8B's 128256-token vocabulary), an event each,
 * and up to PP_HEAD_RING graphs per walk key on the last stage.
 *
 * A buffer is a credit, as a boundary slot is: the last stage's actor takes one for a step, its stream writes it;
 * the readback actor enqueues the copy out of it on the readback stream, records ev_read behind that copy and
 * posts HEAD(k) back, before that step has run; the next taker's stream waits ev_read before its walk. So the
 * taker takes the least recently taken free buffer, not the lowest: the buffer of the step just before may
 * already be back, and its copy out runs only once that step has ended, so a step that took it would wait for a
 * D2H copy before starting (about 7 us in most steps of one stage's decode with the lowest, none with this order:
 * docs/bench/gpu.md "The head's logits ring"). A step that finds both out takes pool memory rather than wait: waiting for HEAD
 * made the last stage trail the readback actor, and 4 sequences in flight over 2 CPU stages lost ~4 % of their
 * tokens/s (pool memory instead: within noise, docs/bench/cpu.md). */
#include "actors/pp_internal.h"
#include "kernels/krn.h"

#include <stdio.h>

/* The last stage, an ARGMAX step of a feeding runtime: the slots its argmax can write itself, or NULL. When this
 * stage is on stage 0's device and the rows' sequences follow one another, their slots are one run
 * (feed_tok + seq[0], feed_tok is indexed by sequence): krn_argmax_dup_async writes the tokens there as well,
 * and no copy op sits behind the kernel. */
int32_t *pp_feed_dup(const pp_stage *st, const pp_rec *rec)
{
    const act_pp *rt = st->rt;
    const int32_t *oseq = rec->seq + (rec->B - rec->out_rows); /* the output rows' sequences */
    if (!rec->feeds || rec->out_rows == 0 || rt->stage[0].dev != st->dev ||
        pp_seq_run_end(oseq, 0, rec->out_rows) != rec->out_rows)
        return NULL;
    return rt->feed_tok + oseq[0];
}

/* The last stage, an ARGMAX step of a feeding runtime: each row's token into its sequence's slot on stage 0's
 * device (rows in order: the last row of a sequence wins; already there when the argmax wrote them, `dup`),
 * then its sequence's feed_ev, which that sequence's next fed step waits. Every row's event is recorded even
 * after a failed copy, so no wait can pass a copy still in flight (the step fails; the fed step behind it reads
 * what the slot holds). */
static int last_stage_feed(pp_stage *st, pp_rec *rec, const void *logits_d, int dup, dev_err *err)
{
    act_pp *rt = st->rt;
    const int32_t *tok = pp_result_src(rt, rec, logits_d);
    dev_device *d0 = rt->stage[0].dev;
    const int32_t *oseq = rec->seq + (rec->B - rec->out_rows); /* the output rows' sequences */
    int r = 0;
    for (int b = 0; b < rec->out_rows; b++) {
        int32_t *slot = rt->feed_tok + oseq[b];
        /* ordered after stage 0's last read of this slot (an earlier fed step's embed): this step
         * ran on stage 0's stream after it, and the boundary events (ev_tx) carry that order to this stream;
         * the argmax's own writes (dup) sit at the same place on this stream */
        if (r == 0 && !dup)
            r = d0 == st->dev ? dev_copy_d2d_async(st->stream, slot, tok + b, sizeof(int32_t))
                              : dev_copy_peer_async(st->stream, slot, d0, tok + b, st->dev, sizeof(int32_t));
        const int re = dev_event_record_async(rt->feed_ev[oseq[b]], st->stream);
        r = r ? r : re;
    }
    return r ? dev_err_set(err, r, "step: leaving the greedy tokens for fed steps failed") : 0;
}

/* pp_argmax_async, the second destination by index when `at` is given (the rows' sequences on the device:
 * krn_argmax_dup_async's dup_at, n_seq slots). */
static int argmax_to(const act_pp *rt, const pp_rec *rec, dev_stream *s, void *d, int32_t *dup, const int32_t *at,
                     dev_err *err)
{
    if (!rec->argmax || rec->out_rows == 0)
        return 0;
    int r = krn_argmax_dup_async(s, (int32_t *)pp_result_src(rt, rec, d), dup, at, at ? rt->n_seq : rec->out_rows, d,
                                 rec->out_rows, rt->n_vocab);
    return r ? dev_err_set(err, r, "step: argmax of %d rows of logits failed", rec->out_rows) : 0;
}

int pp_argmax_async(const act_pp *rt, const pp_rec *rec, dev_stream *s, void *d, int32_t *dup, dev_err *err)
{
    return argmax_to(rt, rec, s, d, dup, NULL, err);
}

int pp_head_ring_init(act_pp *rt, dev_device *last, dev_err *err)
{
    rt->head_ring_rows = rt->max_rows < PP_HEAD_RING_ROWS ? rt->max_rows : PP_HEAD_RING_ROWS;
    const size_t bytes = pp_logits_bytes(rt, rt->head_ring_rows, 1);
    for (int k = 0; k < PP_HEAD_RING; k++) {
        pp_head_buf *h = &rt->head_ring[k];
        if (!(h->d = dev_malloc(last, bytes, err)) || !(h->ev_read = dev_event_create(last, err)))
            return dev_err_wrap(err, "act_pp_create: logits buffer %d of the last stage (%zu bytes)", k, bytes);
        rt->stage[rt->N - 1].head_free[k] = 1; /* before the actors start */
    }
    return 0;
}

void pp_head_ring_fini(act_pp *rt)
{
    for (int k = 0; k < PP_HEAD_RING; k++) {
        pp_head_buf *h = &rt->head_ring[k];
        if (h->ev_read)
            dev_event_destroy(h->ev_read);
        if (h->d)
            dev_free(rt->stage[rt->N - 1].dev, h->d);
    }
}

/* 1 when step rec may take a logits buffer: its seams ask for the ring and its output rows (at least 1) fit one. */
static int head_wants(const act_pp *rt, const pp_rec *rec)
{
    return rec->seams.head_ring && rec->out_rows > 0 && rec->out_rows <= rt->head_ring_rows;
}

int pp_head_take(pp_stage *st, pp_rec *rec, dev_err *err)
{
    act_pp *rt = st->rt;
    if (!head_wants(rt, rec))
        return 0;
    for (int i = 0; i < PP_HEAD_RING; i++) { /* the least recently taken free one (file comment) */
        const int k = (st->head_next + i) % PP_HEAD_RING;
        if (!st->head_free[k])
            continue;
        st->head_next = k + 1;
        st->head_free[k] = 0;
        rec->head_buf = k;
        rec->logits_d = rt->head_ring[k].d;
        atomic_fetch_add(&rt->ctr.head_ring_steps, 1);
        /* ordered by ev_read: the readback stream's copy out of the buffer's previous step ends before our head
         * writes it (its record was enqueued before HEAD(k) was posted; never read yet: an unrecorded event).
         * Already complete as the host sees it (the usual case): nothing to wait for on the device */
        dev_event *ev = rt->head_ring[k].ev_read;
        int r = dev_event_query(ev) == 1 ? 0 : dev_stream_wait_event_async(st->stream, ev);
        return r ? dev_err_set(err, r, "last stage: wait for the readback of logits buffer %d failed", k) : 0;
    }
    return 0; /* every buffer out: pool memory (pp_head_finish) */
}

int pp_head_enqueue(pp_stage *st, pp_rec *rec, const float *x, const int32_t *seq_d, int captured, dev_err *err)
{
    act_pp *rt = st->rt;
    const float *xh = x + (size_t)(rec->B - rec->out_rows) * (size_t)rt->n_embd;
    int r = mdl_forward_head_async(rt->model, st->scratch, st->stream, xh, rec->logits_d, rec->out_rows, err);
    if (r)
        return r;
    int32_t *dup = pp_feed_dup(st, rec);
    /* captured: the slots by the rows' sequences, read from the frame by the kernel (one graph, every sequence) */
    return dup && captured ? argmax_to(rt, rec, st->stream, rec->logits_d, rt->feed_tok,
                                       seq_d + (rec->B - rec->out_rows), err)
                           : argmax_to(rt, rec, st->stream, rec->logits_d, dup, NULL, err);
}

int pp_head_finish(pp_stage *st, pp_rec *rec, const float *x, dev_err *err)
{
    act_pp *rt = st->rt;
    int r;
    if (rec->out_rows == 0)
        return 0;
    if (rec->head_buf < 0) { /* no ring buffer: pool memory, freed on the readback stream (pp_head_release) */
        size_t bytes = pp_logits_bytes(rt, rec->out_rows, rec->argmax);
        if (!(rec->logits_d = mem_pool_alloc_async(rt->head_pool, st->stream, bytes, err)))
            return err->code;
        if ((r = pp_head_enqueue(st, rec, x, NULL, 0, err)) != 0)
            return r;
    }
    return rec->feeds ? last_stage_feed(st, rec, rec->logits_d, pp_feed_dup(st, rec) != NULL, err) : 0;
}

void pp_head_release(act_pp *rt, pp_rec *rec, dev_stream *reads)
{
    if (!rec->logits_d)
        return;
    if (rec->head_buf < 0) { /* the pool reuses the memory behind this point of the stream */
        mem_pool_free_async(rt->head_pool, reads ? reads : rt->stage[rt->N - 1].stream, rec->logits_d);
    } else {
        int k = rec->head_buf;
        /* a failed record leaves ev_read behind our reads: wait for them here instead (the stream's error, if
         * any, reaches the step through the readback's own sync) */
        if (reads && dev_event_record_async(rt->head_ring[k].ev_read, reads) != 0)
            dev_stream_sync(reads, NULL);
        /* credit: buffer k goes back to the last stage only now that ev_read's record is enqueued */
        if (pp_post(rt->stage[rt->N - 1].actor, PP_MSG_HEAD, &k, sizeof k) != 0)
            fprintf(stderr, "memra: logits buffer %d could not go back to the last stage (stopping)\n", k);
    }
    rec->logits_d = NULL;
}
