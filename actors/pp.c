/* PpNRt: create / destroy, submit, the unsplit reference arm, counters. See pp.h and pp_internal.h. */
#include "actors/pp_internal.h"
#include "actors/pp_rank.h"
#include "model/repack.h"
#include "kernels/krn.h"
#include "model/gguf_synth.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

act_pp_params act_pp_default_params(void)
{
    act_pp_params p;
    memset(&p, 0, sizeof p);
    p.config = act_pp_config_default();
    p.apply_env = 1;
    p.n_seq = 4;
    p.n_ctx = 0; /* min(1024, model context) */
    p.max_rows = 64;
    p.kv_type = -1;
    p.act_type = -1;
    p.seams = act_pp_seams_default();
    p.stamps = -1;
    return p;
}

int act_pp_keys_bound(const int32_t *pos, int B, int n_ctx)
{
    int top = 0; /* the rows' largest position + 1 */
    for (int b = 0; b < B; b++)
        top = pos[b] + 1 > top ? pos[b] + 1 : top;
    if (top >= n_ctx)
        return 0;
    int k = ACT_PP_KEYS_MIN;
    while (k < top)
        k *= 2; /* k < 2 * top <= 2 * n_ctx: no overflow */
    return k < n_ctx ? k : 0;
}

int pp_keys(const act_pp *rt, const pp_rec *rec)
{
    return rec->seams.keys ? act_pp_keys_bound(rec->pos, rec->B, rt->n_ctx) : 0;
}

size_t pp_fill_meta(const act_pp *rt, const pp_rec *rec, void *host)
{
    const size_t xb = (size_t)rec->B * (size_t)rt->n_embd * sizeof(float), tb = (size_t)rec->B * sizeof(int32_t);
    memcpy((char *)host + xb, rec->pos, tb);
    memcpy((char *)host + xb + tb, rec->seq, tb);
    return xb;
}

int pp_fill_frame(act_pp *rt, const pp_rec *rec, void *host, dev_err *err)
{
    int r = mdl_embed_rows(rt->model, rec->tokens, rec->B, host, err);
    if (r == 0)
        pp_fill_meta(rt, rec, host);
    return r;
}

/* ---- create / destroy ---- */

mdl_scratch *pp_scratch_new(act_pp *rt, dev_device *d, dev_err *err)
{
    mdl_scratch *sc = mdl_scratch_create_with(rt->model, d, rt->max_rows, rt->x8, rt->act_type, err);
    if (sc && mdl_scratch_reserve_attention(sc, rt->n_ctx, err) != 0) {
        mdl_scratch_destroy(sc);
        return NULL;
    }
    return sc;
}

/* An element-type parameter (kv_type, act_type): -1 = its door (f32 when unset), else KRN_F32/F16/BF16. */
static int elem_type(int v, const char *field, const char *door, int (*from_env)(int *, dev_err *), int *out,
                     dev_err *err)
{
    if (v < 0) /* -1: the door */
        return from_env(out, err);
    if (krn_act_type_ok(v)) {
        *out = v;
        return 0;
    }
    return dev_err_set(err, MEMRA_E_INVAL, "act_pp_create: %s=%d (allowed: KRN_F32 %d, KRN_F16 %d, KRN_BF16 %d, "
                       "-1 = %s)", field, v, KRN_F32, KRN_F16, KRN_BF16, door);
}

static int stage_init(act_pp *rt, int s, dev_err *err)
{
    pp_stage *st = &rt->stage[s];
    char name[32];
    st->rt = rt;
    st->s = s;
    st->dev = dev_platform_device(rt->plat, act_stage_device(&rt->cfg, s));
    snprintf(name, sizeof name, "stage%d", s);
    if (!(st->stream = dev_stream_create(st->dev, name, err)))
        return err->code;
    if (rt->batch_invariant && krn_stream_set_batch_invariant(st->stream, err) != 0)
        return err->code;
    if (!(st->scratch = pp_scratch_new(rt, st->dev, err)))
        return err->code;
    if (!(st->frame = dev_malloc(st->dev, pp_frame_bytes(rt, rt->max_rows), err)))
        return err->code;
    if (s == 0)
        for (int i = 0; i < PP_STAGING_RING; i++) {
            if (!(st->staging[i] = dev_host_alloc(rt->plat, pp_frame_bytes(rt, rt->max_rows), err)))
                return err->code;
            if (!(st->staging_ev[i] = dev_event_create(st->dev, err)))
                return err->code;
        }
    for (int k = 0; k < ACT_PP_MAX_SLOTS; k++)
        st->credit[k] = 1; /* the producer starts holding every slot of its outbound boundary */
    if (!(st->actor = act_actor_create(name, pp_stage_handle, st, err)))
        return err->code;
    return 0;
}

static void stage_fini(act_pp *rt, pp_stage *st)
{
    if (st->stream) /* the stage's actor is gone already (act_pp_destroy): nothing enqueues here any more */
        dev_stream_sync(st->stream, NULL);
    for (int i = 0; i < st->n_graph; i++) /* no replay pending: the stream is synced */
        dev_graph_destroy(st->graph[i].g);
    for (int i = 0; i < PP_STAGING_RING; i++) {
        if (st->staging[i])
            dev_host_free(rt->plat, st->staging[i]);
        if (st->staging_ev[i])
            dev_event_destroy(st->staging_ev[i]);
    }
    if (st->frame)
        dev_free(st->dev, st->frame);
    if (st->scratch)
        mdl_scratch_destroy(st->scratch);
    if (st->stream)
        dev_stream_destroy(st->stream);
    free(st->queue);
}

/* Peer access between every distinct pair of devices in use (stage devices + the primary), both ways. */
static int grant_all(act_pp *rt, dev_err *err)
{
    dev_device *used[ACT_PP_MAX_STAGES + 1];
    int n = 0;
    used[n++] = rt->primary;
    for (int s = 0; s < rt->N; s++) {
        int seen = 0;
        for (int i = 0; i < n; i++)
            seen |= used[i] == rt->stage[s].dev;
        if (!seen)
            used[n++] = rt->stage[s].dev;
    }
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++)
            if (a != b) {
                int r = dev_peer_grant(used[a], used[b], err);
                if (r != 0)
                    return r;
            }
    return 0;
}

/* act_pp_params.feed: the embedding table, the per-sequence tokens and a row buffer on stage 0's device,
 * the event on the last stage's device (it is recorded on that stage's stream). */
static int feed_init(act_pp *rt, dev_device *last, dev_err *err)
{
    dev_device *d0 = rt->stage[0].dev;
    int r = mdl_embed_table_upload(rt->model, d0, &rt->embd_dev, err);
    if (r)
        return dev_err_wrap(err, "device feed (act_pp_params.feed; the API's MEMRA_DEVICE_FEED=0 turns it off)");
    if (!(rt->feed_src = calloc((size_t)rt->n_seq, sizeof *rt->feed_src)) ||
        !(rt->feed_ev = calloc((size_t)rt->n_seq, sizeof *rt->feed_ev)))
        return dev_err_set(err, MEMRA_E_NOMEM, "act_pp_create: out of host memory");
    /* dev_malloc zero-fills: a sequence's slot holds token 0 until its first ARGMAX step (defined bytes) */
    if (!(rt->feed_tok = dev_malloc(d0, (size_t)rt->n_seq * sizeof(int32_t), err)))
        return err->code;
    for (int i = 0; i < rt->n_seq; i++) /* one per sequence: a fed step waits its own sequence's producer only */
        if (!(rt->feed_ev[i] = dev_event_create(last, err)))
            return err->code;
    rt->feed_on = 1;
    return 0;
}

/* act_pp_params.feed against the placement: ON is refused where a fed step cannot run (the one-stream seam
 * runs every step on the host's clock); AUTO is on only with CUDA, where it can run ahead. 1 = make the feed buffers,
 * 0 = none, -1 = refused (err set). */
static int feed_wanted(act_pp *rt, int feed, dev_err *err)
{
    const int one_stream = rt->N > 1 && !rt->cfg.streams;
    if (feed == ACT_FEED_ON && one_stream) {
        dev_err_set(err, MEMRA_E_INVAL, "act_pp_create: act_pp_params.feed = ON needs the stage streams "
                    "(MEMRA_PP_STREAMS=0 runs each step on the primary stream); use AUTO or OFF");
        return -1;
    }
    if (feed == ACT_FEED_AUTO) /* CUDA only: the CPU backend's stage workers are the CPU the host's turn runs on */
        return dev_platform_kind(rt->plat) == DEV_KIND_CUDA && !one_stream && !act_pp_pipelining_refused(rt);
    return feed == ACT_FEED_ON;
}

/* MEMRA_PP_LOAD_REPORT=1 (read by each process, whatever apply_env says: it changes nothing but stderr) into *on:
 * after the load, one line saying what this process holds of the model, for checking what each rank of an mpirun
 * launch loads. 0 or MEMRA_E_INVAL naming the value. */
static int load_report_door(int *on, dev_err *err)
{
    const char *v = getenv("MEMRA_PP_LOAD_REPORT");
    *on = v && !strcmp(v, "1");
    if (v && strcmp(v, "0") && strcmp(v, "1"))
        return dev_err_set(err, MEMRA_E_INVAL, "MEMRA_PP_LOAD_REPORT=\"%s\": allowed 0 (default) or 1 (a stderr "
                           "line per process: the layers, head and weight bytes it holds)", v);
    return 0;
}

static void load_report(const act_pp *rt, int first, int last)
{
    const mdl_model *m = rt->model;
    const int L = mdl_model_hparams(m)->n_layer;
    int l0 = -1, l1 = -1; /* the held layers' span */
    for (int il = 0; il < L; il++)
        if (mdl_model_layer_device(m, il)) {
            l0 = l0 < 0 ? il : l0;
            l1 = il + 1;
        }
    fprintf(stderr, "memra: load rank %d stages %d..%d layers %d of %d [%d, %d) head %d embeddings %d weight_bytes "
            "%zu\n", act_rank_self(), first, last, mdl_model_layers_held(m), L, l0 < 0 ? 0 : l0, l1 < 0 ? 0 : l1,
            mdl_model_head_device(m) != NULL, mdl_model_has_embeddings(m), mdl_model_weight_bytes(m));
}

act_pp *act_pp_create(dev_platform *plat, const char *model_path, const act_pp_params *params, dev_err *err)
{
    act_pp_params p = params ? *params : act_pp_default_params();
    dev_device **layer_dev = NULL;
    act_pp *rt = calloc(1, sizeof *rt);
    if (!rt || !plat || (!model_path && !p.synth)) {
        dev_err_set(err, rt ? MEMRA_E_INVAL : MEMRA_E_NOMEM, "act_pp_create: %s",
                    rt ? "a platform and a model path (or a synthetic shape) are required" : "out of host memory");
        free(rt);
        return NULL;
    }
    rt->plat = plat;
    pthread_mutex_init(&rt->inflight_lock, NULL);
    pthread_cond_init(&rt->inflight_cv, NULL);
    pthread_mutex_init(&rt->pool_lock, NULL);
    rt->cfg = p.config;
    pp_rank_default_stages(&rt->cfg); /* under mpirun: one stage per rank unless a door says otherwise */
    if (p.apply_env && act_doors_read_structural(&rt->cfg, err) != 0)
        goto fail;
    if (p.n_seq < 1 || p.max_rows < 1 || p.n_ctx < 0) {
        dev_err_set(err, MEMRA_E_INVAL, "act_pp_create: n_seq=%d max_rows=%d n_ctx=%d (need n_seq >= 1, "
                                        "max_rows >= 1, n_ctx >= 0 with 0 = default)",
                    p.n_seq, p.max_rows, p.n_ctx);
        goto fail;
    }
    if (p.feed < ACT_FEED_OFF || p.feed > ACT_FEED_AUTO) { /* before the weights load, as every field check */
        dev_err_set(err, MEMRA_E_INVAL, "act_pp_create: feed = %d (allowed ACT_FEED_OFF 0, ON 1, AUTO 2)", p.feed);
        goto fail;
    }
    int report = 0;
    if (load_report_door(&report, err) != 0)
        goto fail;
    if (elem_type(p.kv_type, "kv_type", "MEMRA_KV_TYPE", mdl_kv_type_from_env, &rt->kv_type, err) != 0 ||
        elem_type(p.act_type, "act_type", "MEMRA_ACT_TYPE", mdl_act_type_from_env, &rt->act_type, err) != 0)
        goto fail;
    const char *bi = p.apply_env ? getenv("MEMRA_BATCH_INVARIANT") : NULL; /* read once, here */
    if (bi && strcmp(bi, "0") && strcmp(bi, "1")) {
        dev_err_set(err, MEMRA_E_INVAL, "MEMRA_BATCH_INVARIANT=\"%s\": allowed 0 (the fastest kernels) or 1 (each "
                    "row's bits as in a step of one row: a request's tokens do not depend on its neighbours)", bi);
        goto fail;
    }
    if (p.batch_invariant < 0 || p.batch_invariant > 1) {
        dev_err_set(err, MEMRA_E_INVAL, "act_pp_create: batch_invariant = %d (allowed 0 or 1)", p.batch_invariant);
        goto fail;
    }
    rt->batch_invariant = bi ? bi[0] == '1' : p.batch_invariant;
    rt->n_seq = p.n_seq;
    rt->max_rows = p.max_rows;
    act_pp_seams seams = p.seams; /* params < the seam doors (apply_env) < act_pp_reload_doors / act_pp_set_seams */
    if (act_pp_seams_check(&seams, err) != 0 || (p.apply_env && act_doors_read_seams(&seams, err) != 0))
        goto fail;
    rt->seam_base = p.seams;
    rt->apply_env = p.apply_env;
    atomic_store(&rt->seams, act_pp_seams_pack(&seams)); /* before any actor starts: create's thread only */
    rt->stamp_mode = p.stamps >= 0 ? p.stamps : dev_platform_kind(plat) == DEV_KIND_CUDA;
    rt->primary = dev_platform_device(plat, 0);

    /* The fence needs the layer count before the weights are placed: read it from the GGUF header. */
    int n_layer = p.synth ? p.synth->n_layer : mdl_model_peek_n_layer(model_path, err);
    if (n_layer < 0)
        goto fail;
    if (n_layer == 0) {
        dev_err_set(err, MEMRA_E_FORMAT, "act_pp_create: the model has no layers");
        goto fail;
    }
    if (pp_rank_adjust(&rt->cfg, &p, err) != 0) /* under mpirun: one stage per rank by default */
        goto fail;
    if (act_pp_config_check(&rt->cfg, err) != 0) /* also when the environment was not read */
        goto fail;
    double *wcost = NULL; /* MEMRA_PP_SPLITS=weights: what each layer and the head cost per step */
    if (rt->cfg.balance && rt->cfg.stages >= 2) {
        const int model = krn_cost_model(plat); /* the CPU's matmul mode is set before the runtime is created */
        if (!(wcost = malloc((size_t)(n_layer + 1) * sizeof *wcost)))
            goto nomem;
        int r = p.synth ? mdl_synth_weight_cost(p.synth, model, wcost, n_layer + 1, err)
                        : mdl_model_peek_weight_cost(model_path, model, wcost, n_layer + 1, err);
        if (r < 0) {
            free(wcost);
            goto fail;
        }
    }
    int N = act_pp_cuts(&rt->cfg, n_layer, dev_platform_count(plat), wcost, rt->fence, err);
    free(wcost);
    if (N < 0)
        goto fail;
    if (N == 0) { /* door shut: one stage runs the whole model on the primary device */
        N = 1;
        rt->fence[0] = 0;
        rt->fence[1] = n_layer;
    }
    rt->N = N;
    if (pp_rank_announce(rt, model_path, &p, err) != 0) /* under mpirun: rank 0 sends the configuration */
        goto fail;

    /* under mpirun a rank loads only its stages' layers (rank 0 everything when whole_model asks for the unsplit
     * arm), the head only with the last stage; the embedding table comes with layer 0 (stage 0, rank 0) */
    int first = 0, mine_last = N - 1; /* this rank's stages */
    const int partial = pp_rank_stages(rt, &first, &mine_last) && !(p.whole_model && act_rank_self() == 0);
    /* layer_engine: each stage's layers upload through its own device when sharding is on */
    if (!(layer_dev = calloc((size_t)n_layer, sizeof *layer_dev)))
        goto nomem;
    for (int il = 0; il < n_layer; il++) {
        int s = act_stage_of(rt->fence, N, il);
        layer_dev[il] = (rt->cfg.shard || N == 1) ? dev_platform_device(plat, act_stage_device(&rt->cfg, s))
                                                  : rt->primary;
    }
    dev_device *head_dev = layer_dev[n_layer - 1];
    for (int il = 0; partial && il < n_layer; il++) {
        const int s = act_stage_of(rt->fence, N, il);
        if (s < first || s > mine_last)
            layer_dev[il] = NULL; /* another rank's layer */
    }
    mdl_load_params lp = {.platform = plat, .layer_dev = layer_dev,
                          .head_dev = partial && mine_last != N - 1 ? NULL : head_dev, .partial = partial,
                          .progress = p.progress, .progress_ctx = p.progress_ctx};
    if (!(rt->model = p.synth ? mdl_model_synthesize(p.synth, &lp, err) : mdl_model_load(model_path, &lp, err)))
        goto fail;
    if (report)
        load_report(rt, first, mine_last);
    const mdl_hparams *hp = mdl_model_hparams(rt->model);
    rt->n_embd = hp->n_embd;
    rt->n_vocab = hp->n_vocab;
    rt->n_layer = hp->n_layer;
    rt->n_ctx = p.n_ctx ? p.n_ctx : (hp->n_ctx_train < 1024 ? hp->n_ctx_train : 1024);
    if (mdl_x8_door(&rt->x8, err) != 0)
        goto fail;

    if (!(rt->stage = calloc((size_t)N, sizeof *rt->stage)))
        goto nomem;
    for (int s = 0; s < N; s++)
        if (stage_init(rt, s, err) != 0)
            goto fail;
    if (grant_all(rt, err) != 0)
        goto fail;
    /* new_cache: each stage's KV lives on its own device, whatever the weight placement */
    for (int il = 0; il < n_layer; il++)
        layer_dev[il] = rt->stage[act_stage_of(rt->fence, N, il)].dev;
    if (!(rt->kv = mdl_kv_create(rt->model, layer_dev, rt->n_seq, rt->n_ctx, rt->kv_type, err)))
        goto fail;
    if (N > 1 && !(rt->bnd = calloc((size_t)(N - 1), sizeof *rt->bnd)))
        goto nomem;
    for (int b = 0; b + 1 < N; b++) {
        if (pp_rank_boundary(rt, b, &rt->bnd[b], err) != 0) /* local, MPI or NCCL half, or none */
            goto fail;
        rt->stage[b].out = rt->bnd[b];
        rt->stage[b + 1].in = rt->bnd[b];
    }
    dev_device *last = rt->stage[N - 1].dev;
    const int feed = feed_wanted(rt, p.feed, err);
    if (feed < 0 || (feed && feed_init(rt, last, err) != 0))
        goto fail;
    if (!(rt->head_pool = mem_pool_create(last, err)))
        goto fail;
    if (pp_head_ring_init(rt, last, err) != 0)
        goto fail;
    if (!(rt->rb_stream = dev_stream_create(last, "readback", err)))
        goto fail;
    if (!(rt->rb_actor = act_actor_create("readback", pp_readback_handle, rt, err)))
        goto fail;
    /* sync_stages_after_load: weights went up host-synchronously; make every stream start behind them */
    for (int s = 0; s < N; s++)
        if (dev_stream_sync(rt->stage[s].stream, err) != 0)
            goto fail;
    if (pp_rank_start(rt, err) != 0) /* under mpirun: the transport stands in for the remote stages */
        goto fail;
    for (int s = 0; s < N; s++)
        if (!rt->stage[s].remote && act_actor_start(rt->stage[s].actor, err) != 0)
            goto fail;
    if (act_actor_start(rt->rb_actor, err) != 0)
        goto fail;
    free(layer_dev);
    return rt;
nomem:
    dev_err_set(err, MEMRA_E_NOMEM, "act_pp_create: out of host memory");
fail:
    free(layer_dev);
    act_pp_destroy(rt);
    return NULL;
}

void act_pp_destroy(act_pp *rt)
{
    if (!rt)
        return;
    if (rt->stage)
        act_pp_drain(rt, NULL);
    pp_rank_stop(rt); /* under mpirun: every rank destroys its runtime too */
    if (rt->plat && rt->jitter_hook_set) /* only this runtime's hook: the platform may serve others */
        dev_set_op_hook(rt->plat, NULL, NULL);
    /* Stages send tokens forward, credits back, feeds to stage 0 and records to the readback actor: all of
     * them at once, or a stage still inside act_send could post into a mailbox already freed. */
    act_actor *actors[ACT_PP_MAX_STAGES + 2] = { rt->rb_actor, pp_rank_actor(rt) };
    for (int s = 0; rt->stage && s < rt->N; s++) /* a remote stage's actor is the transport: once */
        actors[2 + s] = rt->stage[s].remote ? NULL : rt->stage[s].actor;
    act_actors_destroy(actors, 2 + (rt->stage ? rt->N : 0));
    pp_rank_free(rt);
    for (int s = 0; rt->stage && s < rt->N; s++)
        stage_fini(rt, &rt->stage[s]);
    if (rt->rb_stream)
        dev_stream_destroy(rt->rb_stream);
    if (rt->ref_stream) {
        dev_stream_sync(rt->ref_stream, NULL);
        dev_stream_destroy(rt->ref_stream);
    }
    if (rt->ref_frame)
        dev_free(rt->primary, rt->ref_frame);
    if (rt->ref_slot)
        dev_free(rt->primary, rt->ref_slot);
    if (rt->ref_logits_d)
        dev_free(rt->primary, rt->ref_logits_d);
    if (rt->ref_host)
        dev_host_free(rt->plat, rt->ref_host);
    if (rt->ref_scratch)
        mdl_scratch_destroy(rt->ref_scratch);
    if (rt->ref_kv)
        mdl_kv_destroy(rt->ref_kv);
    if (rt->head_pool)
        mem_pool_destroy(rt->head_pool);
    if (rt->stage)
        pp_head_ring_fini(rt);
    for (int i = 0; rt->feed_ev && i < rt->n_seq; i++)
        if (rt->feed_ev[i])
            dev_event_destroy(rt->feed_ev[i]);
    free(rt->feed_ev);
    if (rt->feed_tok)
        dev_free(rt->stage[0].dev, rt->feed_tok);
    if (rt->embd_dev.data)
        dev_free(rt->stage[0].dev, (void *)rt->embd_dev.data);
    free(rt->feed_src);
    for (int b = 0; rt->bnd && b + 1 < rt->N; b++)
        bnd_destroy(rt->bnd[b]);
    free(rt->bnd);
    if (rt->kv)
        mdl_kv_destroy(rt->kv);
    free(rt->stage);
    pp_pending_pool_free(rt);
    if (rt->model)
        mdl_model_free(rt->model);
    pthread_mutex_destroy(&rt->inflight_lock);
    pthread_cond_destroy(&rt->inflight_cv);
    pthread_mutex_destroy(&rt->pool_lock);
    free(rt);
}

int act_pp_check(act_pp *rt, dev_err *err) { return pp_rank_check(rt, err); }
int act_pp_stages(const act_pp *rt) { return rt->N; }
int act_pp_feeds(const act_pp *rt) { return rt->feed_on; }
int act_pp_n_ctx(const act_pp *rt) { return rt->n_ctx; }
int act_pp_n_seq(const act_pp *rt) { return rt->n_seq; }
int act_pp_batch_invariant(const act_pp *rt) { return rt->batch_invariant; }
const int *act_pp_fence(const act_pp *rt) { return rt->fence; }
const act_pp_config *act_pp_get_config(const act_pp *rt) { return &rt->cfg; }
const struct mdl_model *act_pp_model(const act_pp *rt) { return rt->model; }
dev_device *act_pp_stage_device(const act_pp *rt, int s) { return (s >= 0 && s < rt->N) ? rt->stage[s].dev : NULL; }
