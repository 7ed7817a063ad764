/* Submitting steps: the split arm through the stage actors, the unsplit reference arm on the primary
 * stream, and the one-stream seam (MEMRA_PP_STREAMS=0). Runs on the submitting thread, which takes one
 * snapshot of the runtime's seams per step (act_pp.seams) — the snapshot travels in the step record. Also the
 * seams' setters and the test hooks' installers. */
#include "actors/pp_internal.h"
#include "kernels/krn.h"

#include <stdlib.h>
#include <string.h>

static int check_rows(const act_pp *rt, const act_pp_step *st, dev_err *err)
{
    if (!st || st->B < 1 || st->B > rt->max_rows || (!st->tokens && !st->feed) || !st->seq || !st->pos)
        return dev_err_set(err, MEMRA_E_INVAL, "step: B=%d rows (allowed 1..%d) with tokens (unless fed), seq and "
                           "pos arrays", st ? st->B : 0, rt->max_rows);
    if (st->logits < ACT_LOGITS_ALL || st->logits > ACT_LOGITS_ARGMAX)
        return dev_err_set(err, MEMRA_E_INVAL, "step: logits mode %d (allowed ALL, LAST, NONE, ARGMAX)",
                           (int)st->logits);
    if (st->out_last < 0 || st->out_last > st->B ||
        (st->out_last && st->logits != ACT_LOGITS_ALL && st->logits != ACT_LOGITS_ARGMAX))
        return dev_err_set(err, MEMRA_E_INVAL, "step: out_last = %d (allowed 0 = every row, or 1..B = %d with logits "
                           "mode ALL or ARGMAX)", st->out_last, st->B);
    for (int b = 0; b < st->B; b++) {
        if (!st->feed && (st->tokens[b] < 0 || st->tokens[b] >= rt->n_vocab))
            return dev_err_set(err, MEMRA_E_INVAL, "step: row %d token %d outside the vocabulary 0..%d", b,
                               st->tokens[b], rt->n_vocab - 1);
        if (st->seq[b] < 0 || st->seq[b] >= rt->n_seq)
            return dev_err_set(err, MEMRA_E_INVAL, "step: row %d sequence slot %d outside 0..%d", b, st->seq[b],
                               rt->n_seq - 1);
        if (st->pos[b] < 0 || st->pos[b] >= rt->n_ctx)
            return dev_err_set(err, MEMRA_E_FULL, "step: row %d position %d outside the context 0..%d", b,
                               st->pos[b], rt->n_ctx - 1);
    }
    return 0;
}

static int out_rows_of(const act_pp_step *st)
{
    return st->logits == ACT_LOGITS_ALL || st->logits == ACT_LOGITS_ARGMAX ? (st->out_last ? st->out_last : st->B)
           : st->logits == ACT_LOGITS_LAST                                  ? 1
                                                                            : 0;
}

static pp_rec *rec_new(act_pp *rt, const act_pp_step *st, const act_pp_seams *seams, dev_err *err)
{
    pp_rec *rec = calloc(1, sizeof *rec + (size_t)rt->N * sizeof(pp_mark));
    int32_t *arr = malloc(3 * (size_t)st->B * sizeof(int32_t));
    if (!rec || !arr) {
        free(rec);
        free(arr);
        dev_err_set(err, MEMRA_E_NOMEM, "step: out of host memory");
        return NULL;
    }
    rec->id = rt->next_id++;
    rec->head_buf = -1; /* pool memory unless the last stage takes a ring buffer (pp_head_take) */
    rec->kind = st->kind;
    rec->B = st->B;
    rec->out_rows = out_rows_of(st);
    rec->argmax = st->logits == ACT_LOGITS_ARGMAX;
    rec->feed = st->feed != 0;
    rec->feeds = rt->feed_on && rec->argmax && !st->no_feed;
    rec->seams = *seams;
    rec->tokens = arr;
    rec->seq = arr + st->B;
    rec->pos = arr + 2 * st->B;
    if (st->feed) /* read on the device; -1 here marks that no host gather may use them */
        for (int b = 0; b < st->B; b++)
            rec->tokens[b] = -1;
    else
        memcpy(rec->tokens, st->tokens, (size_t)st->B * sizeof(int32_t));
    memcpy(rec->seq, st->seq, (size_t)st->B * sizeof(int32_t));
    memcpy(rec->pos, st->pos, (size_t)st->B * sizeof(int32_t));
    return rec;
}

/* ---- the unsplit body: whole trunk on the primary stream (reference arm, and the A/B seams' "0") ---- */

static int ref_init(act_pp *rt, dev_err *err)
{
    if (rt->ref_host) /* the last thing acquired below: a partial earlier attempt starts over from here */
        return 0;
    const size_t fb = pp_frame_bytes(rt, rt->max_rows), lb = pp_logits_bytes(rt, rt->max_rows, 0);
    if ((!rt->ref_stream && !(rt->ref_stream = dev_stream_create(rt->primary, "unsplit", err))) ||
        (rt->batch_invariant && krn_stream_set_batch_invariant(rt->ref_stream, err) != 0) ||
        (!rt->ref_scratch && !(rt->ref_scratch = pp_scratch_new(rt, rt->primary, err))) ||
        (!rt->ref_frame && !(rt->ref_frame = dev_malloc(rt->primary, fb, err))) ||
        (!rt->ref_slot && !(rt->ref_slot = dev_malloc(rt->primary, fb, err))) ||
        (!rt->ref_logits_d &&
         !(rt->ref_logits_d = dev_malloc(rt->primary, pp_logits_bytes(rt, rt->max_rows, 1), err))) ||
        !(rt->ref_host = dev_host_alloc(rt->plat, fb > lb ? fb : lb, err)))
        return err->code;
    return 0;
}

/* Runs rec on the primary stream, host-synchronously. ranges: 1 = the whole trunk in one walk; N = the
 * per-stage ranges with two plain d2d copies per boundary on this one stream (the MEMRA_PP_STREAMS=0 seam).
 * own_kv: 1 = the reference arm's own KV cache, 0 = the runtime's (stage-owned) cache, so an A/B seam's
 * unsplit body continues the same sequences the split arm runs. Logits rows go to out (host). */
static int run_on_primary(act_pp *rt, pp_rec *rec, int ranges, int own_kv, float *out, dev_err *err)
{
    int r;
    if (mdl_model_layers_held(rt->model) < rt->n_layer || !mdl_model_head_device(rt->model))
        return dev_err_set(err, MEMRA_E_STATE, "unsplit arm: this process holds %d of the %d layers%s (under mpirun "
                           "each rank loads only its stages'; act_pp_params.whole_model = 1 loads every layer on rank "
                           "0)", mdl_model_layers_held(rt->model), rt->n_layer,
                           mdl_model_head_device(rt->model) ? "" : " and not the head");
    if ((r = ref_init(rt, err)) != 0)
        return r;
    mdl_kv *kv = rt->kv;
    if (own_kv) {
        if (!rt->ref_kv) {
            dev_device **dev = malloc((size_t)rt->n_layer * sizeof *dev);
            if (!dev)
                return dev_err_set(err, MEMRA_E_NOMEM, "unsplit arm: out of host memory");
            for (int il = 0; il < rt->n_layer; il++)
                dev[il] = rt->primary;
            rt->ref_kv = mdl_kv_create(rt->model, dev, rt->n_seq, rt->n_ctx, rt->kv_type, err);
            free(dev);
            if (!rt->ref_kv)
                return err->code;
        }
        kv = rt->ref_kv;
    }
    size_t fb = pp_frame_bytes(rt, rec->B);
    float *x = rt->ref_frame;
    int32_t *pos = (int32_t *)(x + (size_t)rec->B * (size_t)rt->n_embd), *seq = pos + rec->B;
    dev_stream *s = rt->ref_stream;
    if ((r = pp_fill_frame(rt, rec, rt->ref_host, err)) != 0)
        return r;
    if ((r = dev_copy_h2d_async(s, rt->ref_frame, rt->ref_host, fb)) != 0)
        return dev_err_set(err, r, "unsplit arm: upload failed");
    for (int i = 0; i < ranges; i++) {
        int l0 = ranges == 1 ? 0 : rt->fence[i], l1 = ranges == 1 ? rt->n_layer : rt->fence[i + 1];
        if (i > 0) { /* the one-stream boundary: two plain copies, ordered by the stream itself */
            if ((r = dev_copy_d2d_async(s, rt->ref_slot, rt->ref_frame, fb)) != 0 ||
                (r = dev_copy_d2d_async(s, rt->ref_frame, rt->ref_slot, fb)) != 0)
                return dev_err_set(err, r, "one-stream seam: boundary copy failed");
        }
        if ((r = mdl_forward_layers_async(rt->model, kv, rt->ref_scratch, s, x, pos, seq, rec->B, pp_keys(rt, rec), l0,
                                          l1, err)) != 0)
            return r;
    }
    if (rec->out_rows > 0) {
        const float *xh = x + (size_t)(rec->B - rec->out_rows) * (size_t)rt->n_embd;
        const size_t lb = pp_result_bytes(rt, rec);
        const void *src = pp_result_src(rt, rec, rt->ref_logits_d);
        if ((r = mdl_forward_head_async(rt->model, rt->ref_scratch, s, xh, rt->ref_logits_d, rec->out_rows, err)) ||
            (r = pp_argmax_async(rt, rec, s, rt->ref_logits_d, NULL, err)) || (r = dev_copy_d2h_async(s, rt->ref_host, src, lb)))
            return r;
        if ((r = dev_stream_sync(s, err)) != 0)
            return r;
        memcpy(out, rt->ref_host, lb);
        return 0;
    }
    return dev_stream_sync(s, err);
}

/* Counters of a step run host-synchronously on the primary stream (split = the one-stream seam's ranges). */
static void count_sync_step(act_pp *rt, act_step_kind kind, int split)
{
    atomic_fetch_add(split ? &rt->ctr.split_steps : &rt->ctr.unsplit_steps, 1);
    if (kind == ACT_STEP_PRIME_BATCH)
        atomic_fetch_add(&rt->ctr.prime_batches, 1);
}

int act_pp_run_unsplit(act_pp *rt, const act_pp_step *st, float *logits_out, dev_err *err)
{
    int r = check_rows(rt, st, err);
    if (r != 0)
        return r;
    if (out_rows_of(st) > 0 && !logits_out)
        return dev_err_set(err, MEMRA_E_INVAL, "act_pp_run_unsplit: logits_out is NULL but the step wants logits");
    if (st->logits == ACT_LOGITS_ARGMAX || st->feed)
        return dev_err_set(err, MEMRA_E_INVAL, "act_pp_run_unsplit: logits mode ARGMAX or a fed step (the reference "
                                               "arm returns logits from host tokens; allowed ALL, LAST, NONE)");
    act_pp_seams seams = act_pp_seams_default();
    pp_rec *rec = rec_new(rt, st, &seams, err);
    if (!rec)
        return err->code;
    r = run_on_primary(rt, rec, 1, 1, logits_out, err);
    if (r == 0)
        count_sync_step(rt, st->kind, 0);
    pp_rec_free(rec);
    return r;
}

/* A pending that is already complete (the synchronous seams). */
static int submit_sync(act_pp *rt, pp_rec *rec, int ranges, act_pending **out, dev_err *err)
{
    act_pending *p = pp_pending_get(rt, rec, err);
    if (!p)
        return err->code;
    /* ordered by the drain: every split step touching the stage-owned KV has completed (host sync) */
    act_pp_drain(rt, NULL);
    int r = run_on_primary(rt, rec, ranges, 0, p->host, err);
    if (r == 0) {
        count_sync_step(rt, rec->kind, ranges > 1);
        atomic_fetch_add(&rt->ctr.steps_done, 1);
    }
    pp_pending_finish(p, r, err);
    pp_rec_free(rec);
    if (r != 0) {
        act_pending_release(p);
        return r;
    }
    *out = p;
    return 0;
}

/* A fed step: the runtime keeps tokens on the device, the step is one the stage actors run, and every row's
 * sequence has, as its latest split step, an ARGMAX step whose token is (or will be) there. Sets *after to the
 * latest of those producers (1 + id): the fed step waits for that FEED only, so other sequences' steps run on
 * and lanes interleaved by memra_generate keep every stage busy. */
static int feed_check(const act_pp *rt, const act_pp_step *st, int sync, uint64_t *after, dev_err *err)
{
    if (!rt->feed_on)
        return dev_err_set(err, MEMRA_E_INVAL, "step: a fed step needs a runtime created with act_pp_params.feed = 1");
    if (st->kind != ACT_STEP_EAGER && st->kind != ACT_STEP_BATCH)
        return dev_err_set(err, MEMRA_E_INVAL, "step: a fed step is EAGER or BATCH (got kind %d)", (int)st->kind);
    if (sync)
        return dev_err_set(err, MEMRA_E_INVAL, "step: a fed step runs through the stage actors only, not the unsplit "
                           "body of an A/B seam (MEMRA_BATCH_PP=0, MEMRA_PP_STREAMS=0)");
    *after = 0;
    for (int b = 0; b < st->B; b++) {
        const uint64_t src = rt->feed_src[st->seq[b]];
        if (!src)
            return dev_err_set(err, MEMRA_E_INVAL, "step: row %d of a fed step: sequence %d has no ARGMAX step through "
                               "the stage actors as its latest step (nothing to feed)", b, st->seq[b]);
        *after = src > *after ? src : *after;
    }
    return 0;
}

/* Bookkeeping of the submitting thread, for every step: a split ARGMAX step leaves its rows' tokens for their
 * sequences (feed_src: what a later fed step of that sequence waits for); any other step (other logits, or run
 * synchronously on the primary, which does not touch feed_tok) clears its sequences, so a fed step never embeds a
 * token older than its sequence's latest step. Noted before the post (rec is not ours after it); a refused post
 * clears them too (a FEED that never comes would hold the next fed step of those sequences forever). */
static void feed_note(act_pp *rt, const pp_rec *rec, int keep)
{
    if (!rt->feed_on)
        return;
    const int first_out = rec->B - rec->out_rows; /* rows before it leave no token: their sequences are cleared,
                                                   * unless a later (output) row of the same sequence sets it */
    for (int b = 0; b < rec->B; b++)
        rt->feed_src[rec->seq[b]] = keep && rec->feeds && b >= first_out ? rec->id + 1 : 0;
}

static int same_device_refusal(const act_pp *rt, const act_pp_seams *seams)
{
    return rt->N > 1 && dev_platform_kind(rt->plat) == DEV_KIND_CUDA && pp_rank_streams_share_device(rt) &&
           !seams->same_device_pipe;
}

int act_pp_pipelining_refused(const act_pp *rt)
{
    act_pp_seams seams;
    act_pp_get_seams(rt, &seams);
    return same_device_refusal(rt, &seams);
}

void act_pp_get_seams(const act_pp *rt, act_pp_seams *out)
{
    /* ordered by rt->seams: acquire pairs with the setter's release; one word, so the seams of one publication */
    *out = act_pp_seams_unpack(atomic_load_explicit(&((act_pp *)rt)->seams, memory_order_acquire));
}

int act_pp_set_seams(act_pp *rt, const act_pp_seams *seams, dev_err *err)
{
    if (!rt || !seams)
        return dev_err_set(err, MEMRA_E_INVAL, "act_pp_set_seams: NULL runtime or seams");
    int r = act_pp_seams_check(seams, err);
    if (r != 0)
        return r;
    /* the hand-off to the submitter: release pairs with act_pp_get_seams' acquire */
    atomic_store_explicit(&rt->seams, act_pp_seams_pack(seams), memory_order_release);
    return 0;
}

int act_pp_reload_doors(act_pp *rt, dev_err *err)
{
    if (!rt)
        return dev_err_set(err, MEMRA_E_INVAL, "act_pp_reload_doors: NULL runtime");
    if (!rt->apply_env)
        return dev_err_set(err, MEMRA_E_STATE, "act_pp_reload_doors: the runtime was created with apply_env = 0, so "
                           "the environment changes nothing (set its seams with act_pp_set_seams)");
    act_pp_config c = rt->cfg; /* the structural doors must still describe this runtime */
    char what[160];
    int r = act_doors_read_structural(&c, err); /* also checks every seam's value */
    if (r != 0) {
        /* another stage count makes the runtime's placement or cuts a misfit: name the cause, not the misfit */
        const char *v = getenv("MEMRA_PP_STAGES");
        long n;
        if (!v || act_door_parse_int(v, strlen(v), 0, ACT_PP_MAX_STAGES, &n) != 0)
            return r;
        c = rt->cfg;
        c.stages = (int)n;
        if (act_pp_config_same(&c, &rt->cfg, what, sizeof what))
            return r;
        dev_err_clear(err);
    }
    if (r != 0 || !act_pp_config_same(&c, &rt->cfg, what, sizeof what))
        return dev_err_set(err, MEMRA_E_REFUSED, "act_pp_reload_doors: %s: a structural door is read once, when the "
                           "runtime is created (create a new runtime to change it); nothing was reloaded", what);
    act_pp_seams seams = rt->seam_base;
    if ((r = act_doors_read_seams(&seams, err)) != 0)
        return r;
    return act_pp_set_seams(rt, &seams, err);
}

int act_pp_submit(act_pp *rt, const act_pp_step *st, act_pending **out, dev_err *err)
{
    if (!rt || !out)
        return dev_err_set(err, MEMRA_E_INVAL, "act_pp_submit: NULL runtime or out");
    *out = NULL;
    int r = check_rows(rt, st, err);
    if (r != 0)
        return r;
    act_pp_seams seams; /* one snapshot per step: a later act_pp_set_seams changes later steps only */
    act_pp_get_seams(rt, &seams);
    /* the A/B seams: which arms go through the unsplit body this step */
    int unsplit = 0;
    const char *path = NULL, *alt = NULL;
    if (rt->N > 1) {
        if (st->kind == ACT_STEP_BATCH && !seams.batch_pp)
            unsplit = 1, path = "decode_step_batch (MEMRA_BATCH_PP=0)", alt = "MEMRA_BATCH_PP=1 (the batched split)";
        else if (st->kind == ACT_STEP_SPEC && !seams.spec_pp)
            unsplit = 1, path = "decode_step_t_core (MEMRA_SPEC_PP=0)", alt = "MEMRA_SPEC_PP=1 (the verify split)";
        else if ((st->kind == ACT_STEP_PRIME || st->kind == ACT_STEP_PRIME_BATCH) && !seams.prime_pp)
            unsplit = 1; /* prime keeps no refusal: its unsplit walk is the gate's reference arm */
    }
    if (unsplit && path && !seams.allow_unsplit_batch &&
        (r = act_refuse_unsplit_if_remote(&rt->cfg, path, alt, err)) != 0)
        return r;
    if (same_device_refusal(rt, &seams)) {
        /* ordered by the pending: a step its caller has waited for is no longer counted here */
        if (atomic_load(&rt->unfinished) > 0)
            return dev_err_set(err, MEMRA_E_REFUSED,
                               "pipelined arm refused: %d stage streams share one CUDA device (the seed's unresolved "
                               "same-device race); wait each step before the next, or place stages on distinct "
                               "devices with MEMRA_PP_DEVICES (MEMRA_PP_SAME_DEVICE_PIPE=1 lifts the refusal)",
                               rt->N);
    }
    const int sync = unsplit || (rt->N > 1 && !rt->cfg.streams);
    uint64_t feed_after = 0; /* fed: stage 0 waits until that step's FEED (1 + id) */
    if (st->feed && (r = feed_check(rt, st, sync, &feed_after, err)) != 0)
        return r;
    pp_rec *rec = rec_new(rt, st, &seams, err);
    if (!rec)
        return err->code;
    rec->feed_after = feed_after;
    if (sync && rt->rank) { /* under mpirun the stage-owned KV lives in other processes */
        pp_rec_free(rec);
        return pp_rank_refuse_sync(rt, err);
    }
    if (sync) {
        feed_note(rt, rec, 0); /* before: submit_sync frees rec */
        return submit_sync(rt, rec, unsplit ? 1 : rt->N, out, err);
    }
    pp_hooks *h = pp_hooks_of(rt);
    rec->stamped = rt->stamp_mode && seams.markers && !(h && atomic_load(&h->rendezvous_ms) > 0);
    if (!(rec->pending = pp_pending_get(rt, rec, err))) {
        pp_rec_free(rec);
        return err->code;
    }
    feed_note(rt, rec, 1);
    pp_inflight_add(rt, 1);
    atomic_fetch_add(&rt->unfinished, 1);
    act_pending *p = rec->pending;
    if (act_trace_on()) { /* the group is the scheduler's for this one step (act_trace_set_group) */
        act_trace_instant(ACT_TR_SUBMIT, ACT_TRACE_SCHED, pp_now_ns(), rec->id, rec->B, act_trace_group_tl, rec->kind);
        act_trace_group_tl = -1;
        act_trace_step_tl = rec->id; /* the scheduler joins its requests to it (act_trace_submitted) */
    }
    rt->n_posted++;
    if (h)
        atomic_fetch_add(&h->posted, 1);
    /* ordered by stage 0's mailbox: everything written into rec happens-before stage 0 takes the STEP */
    if ((r = pp_post(rt->stage[0].actor, PP_MSG_STEP, &rec, sizeof rec)) != 0) {
        rt->n_posted--;
        if (h)
            atomic_fetch_sub(&h->posted, 1);
        atomic_fetch_sub(&rt->unfinished, 1);
        pp_inflight_add(rt, -1);
        act_pending_release(p);
        act_pending_release(p);
        feed_note(rt, rec, 0);
        pp_rec_free(rec);
        return dev_err_set(err, r, "act_pp_submit: stage 0 mailbox refused the step");
    }
    *out = p;
    return 0;
}

int pp_inflight_add(act_pp *rt, int delta)
{
    pthread_mutex_lock(&rt->inflight_lock);
    int n = rt->inflight += delta;
    if (act_trace_on())
        act_trace_counter(ACT_TR_INFLIGHT, ACT_TRACE_RUNTIME, pp_now_ns(), n);
    if (delta < 0)
        pthread_cond_broadcast(&rt->inflight_cv);
    pthread_mutex_unlock(&rt->inflight_lock);
    return n;
}

int act_pp_drain(act_pp *rt, dev_err *err)
{
    pthread_mutex_lock(&rt->inflight_lock);
    while (rt->inflight > 0)
        pthread_cond_wait(&rt->inflight_cv, &rt->inflight_lock);
    pthread_mutex_unlock(&rt->inflight_lock);
    return 0;
}

void act_pp_get_counters(const act_pp *rt, act_pp_counters *o)
{
    act_pp *m = (act_pp *)rt;
    o->split_steps = atomic_load(&m->ctr.split_steps);
    o->pipe_overlaps = atomic_load(&m->ctr.pipe_overlaps);
    o->unsplit_steps = atomic_load(&m->ctr.unsplit_steps);
    o->batch_split_steps = atomic_load(&m->ctr.batch_split_steps);
    o->prime_split_chunks = atomic_load(&m->ctr.prime_split_chunks);
    o->prime_pipe_overlaps = atomic_load(&m->ctr.prime_pipe_overlaps);
    o->prime_batches = atomic_load(&m->ctr.prime_batches);
    o->prime_batch_splits = atomic_load(&m->ctr.prime_batch_splits);
    o->spec_split_steps = atomic_load(&m->ctr.spec_split_steps);
    o->steps_done = atomic_load(&m->ctr.steps_done);
    o->graph_captures = atomic_load(&m->ctr.graph_captures);
    o->graph_replays = atomic_load(&m->ctr.graph_replays);
    o->fed_steps = atomic_load(&m->ctr.fed_steps);
    o->head_ring_steps = atomic_load(&m->ctr.head_ring_steps);
}

void act_pp_get_stage_stats(const act_pp *rt, int s, act_pp_stage_stats *o)
{
    pp_stage *st = &((act_pp *)rt)->stage[s];
    o->busy_ns = atomic_load(&st->busy_ns);
    o->walks = atomic_load(&st->walks);
    o->enqueue_ns = atomic_load(&st->enqueue_ns);
    o->enqueues = atomic_load(&st->enqueues);
}

void act_pp_reset_stats(act_pp *rt)
{
    for (int s = 0; s < rt->N; s++) {
        atomic_store(&rt->stage[s].busy_ns, 0);
        atomic_store(&rt->stage[s].walks, 0);
        atomic_store(&rt->stage[s].enqueue_ns, 0);
        atomic_store(&rt->stage[s].enqueues, 0);
    }
}

/* The test hooks' state, installed at the first hook a test sets (the submitting thread, the runtime idle). */
static pp_hooks *hooks_install(act_pp *rt)
{
    pp_hooks *h = pp_hooks_of(rt);
    if (h)
        return h;
    h = &rt->hook_state;
    atomic_store(&h->posted, rt->n_posted); /* the rendezvous compares it with walks counted since create */
    atomic_store(&h->rendezvous_ms, 0);
    atomic_store(&h->hold_start, 0);
    atomic_store(&h->inject_fail_stage, -1);
    atomic_store(&h->jitter_us, 0);
    /* ordered by rt->hooks: the release publishes the state above to every thread that loads the pointer */
    atomic_store_explicit(&rt->hooks, h, memory_order_release);
    return h;
}

void act_pp_hold_start(act_pp *rt, int on) { atomic_store(&hooks_install(rt)->hold_start, on); }

void act_pp_inject_stage_failure(act_pp *rt, int s) { atomic_store(&hooks_install(rt)->inject_fail_stage, s); }
void act_pp_inject_stage_failure_late(act_pp *rt, int s)
{
    atomic_store(&hooks_install(rt)->inject_fail_stage, s < 0 ? -1 : s + ACT_PP_MAX_STAGES);
}

void act_pp_set_rendezvous(act_pp *rt, int on, int timeout_ms)
{
    atomic_store(&hooks_install(rt)->rendezvous_ms, on ? timeout_ms : 0);
}

static void jitter_op_hook(void *ctx, dev_stream *s, const char *op)
{
    (void)s;
    (void)op;
    pp_jitter(ctx);
}

void act_pp_set_jitter(act_pp *rt, int max_us, uint64_t seed)
{
    pp_hooks *h = hooks_install(rt);
    /* ordered by jitter_us's store (seq_cst): a thread that sees the new bound sees the new seed */
    atomic_store(&h->jitter_seed, seed | 1);
    atomic_fetch_add(&h->jitter_gen, 1);
    atomic_store(&h->jitter_us, max_us);
    rt->jitter_hook_set = max_us > 0;
    dev_set_op_hook(rt->plat, max_us > 0 ? jitter_op_hook : NULL, max_us > 0 ? h : NULL);
}
