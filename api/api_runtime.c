/* The runtime handle: backend + act_pp from a model and a config (env doors override), its getters,
 * counters and stats, and the sequence slot table. Shared state: see api/api_internal.h (rt->mu). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "actors/doors.h"
#include "actors/trace.h"
#include "api/api_internal.h"
#include "api/api_profile.h"
#include "kernels/krn.h"
#include "model/llama.h"

memra_runtime_params memra_runtime_default_params(void)
{
    memra_runtime_params p;
    memset(&p, 0, sizeof p);
    p.backend = MEMRA_BACKEND_AUTO;
    p.cpu_devices = 8;
    p.shard = 1;
    p.slots = 2;
    p.streams = 1;
    p.overlap = -1;
    p.n_seq = 4;
    p.max_rows = 64;
    p.apply_env = 1;
    p.cpu_x8 = 1; /* the fast CPU matmul: docs/bench/cpu.md, "Against llama.cpp" */
    p.cpu_threads = 1;
    return p;
}

static int check_params(const memra_runtime_params *p, dev_err *err)
{
#define BAD(...) return dev_err_set(err, MEMRA_E_INVAL, __VA_ARGS__)
    if (p->backend < MEMRA_BACKEND_AUTO || p->backend > MEMRA_BACKEND_CUDA)
        BAD("memra_runtime_params.backend = %d (allowed AUTO, CPU, CUDA)", (int)p->backend);
    if (p->cpu_devices < 1 || p->cpu_devices > DEV_CPU_DEVICES_MAX)
        BAD("memra_runtime_params.cpu_devices = %d (allowed 1..%d)", p->cpu_devices, DEV_CPU_DEVICES_MAX);
    if (p->stages < 0 || p->stages > MEMRA_MAX_STAGES)
        BAD("memra_runtime_params.stages = %d (allowed 0..%d, 0/1 = one stage)", p->stages, MEMRA_MAX_STAGES);
    if (p->n_cuts < 0 || p->n_cuts >= MEMRA_MAX_STAGES)
        BAD("memra_runtime_params.n_cuts = %d (allowed 0, or stages-1)", p->n_cuts);
    if (p->n_devices < 0 || p->n_devices > MEMRA_MAX_STAGES)
        BAD("memra_runtime_params.n_devices = %d (allowed 0, or stages)", p->n_devices);
    if (p->shard < 0 || p->shard > 1)
        BAD("memra_runtime_params.shard = %d (allowed 0 or 1)", p->shard);
    if (p->slots < 1 || p->slots > MEMRA_MAX_SLOTS)
        BAD("memra_runtime_params.slots = %d (allowed 1..%d)", p->slots, MEMRA_MAX_SLOTS);
    if (p->streams < 0 || p->streams > 1)
        BAD("memra_runtime_params.streams = %d (allowed 0 or 1)", p->streams);
    if (p->overlap < -1 || p->overlap > 1)
        BAD("memra_runtime_params.overlap = %d (allowed -1 = the default, 0, 1)", p->overlap);
    if (p->graph < 0 || p->graph > 1)
        BAD("memra_runtime_params.graph = %d (allowed 0 or 1)", p->graph);
    if (p->n_seq < 1 || p->n_seq > 4096)
        BAD("memra_runtime_params.n_seq = %d (allowed 1..4096)", p->n_seq);
    if (p->n_ctx < 0)
        BAD("memra_runtime_params.n_ctx = %d (allowed >= 0, 0 = min(1024, the model's))", p->n_ctx);
    if (p->max_rows < 1 || p->max_rows > 65536)
        BAD("memra_runtime_params.max_rows = %d (allowed 1..65536)", p->max_rows);
    if (p->apply_env < 0 || p->apply_env > 1)
        BAD("memra_runtime_params.apply_env = %d (allowed 0 or 1)", p->apply_env);
    if (p->device_feed < MEMRA_FEED_AUTO || p->device_feed > MEMRA_FEED_OFF)
        BAD("memra_runtime_params.device_feed = %d (allowed MEMRA_FEED_AUTO 0, ON 1, OFF 2)", (int)p->device_feed);
    if (p->kv_type < MEMRA_KV_DEFAULT || p->kv_type > MEMRA_KV_BF16)
        BAD("memra_runtime_params.kv_type = %d (allowed MEMRA_KV_DEFAULT 0, F32 1, F16 2, BF16 3)", (int)p->kv_type);
    if (p->act_type < MEMRA_KV_DEFAULT || p->act_type > MEMRA_KV_BF16)
        BAD("memra_runtime_params.act_type = %d (allowed MEMRA_KV_DEFAULT 0, F32 1, F16 2, BF16 3)", (int)p->act_type);
    if (p->cpu_x8 < 0 || p->cpu_x8 > 1)
        BAD("memra_runtime_params.cpu_x8 = %d (allowed 0 = exact f32 x, 1 = fast int8 x)", p->cpu_x8);
    if (dev_cpu_threads_check(p->cpu_threads, "memra_runtime_params.cpu_threads", err) != 0)
        return MEMRA_E_INVAL;
    if (p->batch_invariant < 0 || p->batch_invariant > 1)
        BAD("memra_runtime_params.batch_invariant = %d (allowed 0 or 1)", p->batch_invariant);
    if (p->micro_batches < 0 || p->micro_batches > p->n_seq)
        BAD("memra_runtime_params.micro_batches = %d (allowed 0..n_seq = %d, 0 = the stages)", p->micro_batches,
            p->n_seq);
#undef BAD
    return 0;
}

/* The doors of the fields read here rather than by act_pp_create, on top of the params: MEMRA_BACKEND and
 * MEMRA_CPU_DEVICES (device/'s parser), MEMRA_CPU_X8 and MEMRA_CPU_THREADS (device/'s parsers), MEMRA_DEVICE_FEED,
 * MEMRA_PP_MICRO_BATCHES. */
static int backend_doors(memra_runtime_params *p, dev_err *err)
{
    int kind = p->backend == MEMRA_BACKEND_CPU ? DEV_KIND_CPU : p->backend == MEMRA_BACKEND_CUDA ? DEV_KIND_CUDA : -1;
    int n = p->cpu_devices, r = dev_backend_doors(&kind, &n, err);
    if (r == 0) {
        p->backend = kind == DEV_KIND_CPU ? MEMRA_BACKEND_CPU : kind == DEV_KIND_CUDA ? MEMRA_BACKEND_CUDA
                                                                                       : MEMRA_BACKEND_AUTO;
        p->cpu_devices = n;
    }
    if (r == 0 && dev_cpu_x8_door(&p->cpu_x8, err) < 0) /* cpu_x8's door */
        r = MEMRA_E_INVAL;
    if (r == 0 && dev_cpu_threads_door(&p->cpu_threads, err) < 0) /* cpu_threads' door */
        r = MEMRA_E_INVAL;
    const char *f = getenv("MEMRA_DEVICE_FEED"); /* device_feed's door */
    if (r == 0 && f) {
        if (!strcmp(f, "0") || !strcmp(f, "1"))
            p->device_feed = f[0] == '1' ? MEMRA_FEED_ON : MEMRA_FEED_OFF;
        else
            r = dev_err_set(err, MEMRA_E_INVAL, "MEMRA_DEVICE_FEED=\"%s\": allowed 0 (no fed greedy steps) or 1 (fed "
                            "on the device; unset: memra_runtime_params.device_feed, AUTO = on with CUDA)", f);
    }
    const char *m = getenv("MEMRA_PP_MICRO_BATCHES"); /* micro_batches' door: the doors' integer syntax, 1..n_seq */
    long v = 0;
    if (r == 0 && m) {
        if (act_door_parse_int(m, strlen(m), 1, p->n_seq, &v) != 0)
            r = dev_err_set(err, MEMRA_E_INVAL, "MEMRA_PP_MICRO_BATCHES=\"%s\": allowed 1..n_seq = %d (micro-batches "
                            "the scheduler keeps in flight; unset: memra_runtime_params.micro_batches, 0 = the stages)",
                            m, p->n_seq);
        else
            p->micro_batches = (int)v;
    }
    return r;
}

/* An explicit n_ctx whose KV cache (every layer's K and V: n_seq x n_ctx x kv_dim elements each) and attention
 * workspace do not fit is refused here, naming the bytes, before anything is allocated: on the CPU backend they
 * may take half the host's memory (the rest is for the weights and activations); on CUDA they must fit 63 bits
 * (a device that lacks the bytes fails its allocation, naming them). */
static int check_ctx_fits(const memra_model *m, const memra_runtime_params *p, int cpu, dev_err *err)
{
    if (p->n_ctx <= 0)
        return 0; /* 0: min(1024, the model's context), always small */
    int kv_t = p->kv_type == MEMRA_KV_F16 ? KRN_F16 : p->kv_type == MEMRA_KV_BF16 ? KRN_BF16 : KRN_F32;
    if (p->kv_type == MEMRA_KV_DEFAULT && p->apply_env && mdl_kv_type_from_env(&kv_t, NULL) != 0)
        kv_t = KRN_F32; /* a bad MEMRA_KV_TYPE is refused, naming it, when the cache is made */
    const uint64_t kv_dim = (uint64_t)m->n_head_kv * (uint64_t)m->head_dim;
    /* per_pos <= 2 x 65536 layers x 4096 seq x 2^20 x 4 B = 2^53 (mdl_hparams_read's bounds): no overflow */
    const uint64_t per_pos = 2 * (uint64_t)m->n_layer * (uint64_t)p->n_seq * kv_dim * krn_kv_elem_bytes(kv_t);
    const int rows = p->max_rows < MDL_ATT_WS_ROWS ? p->max_rows : MDL_ATT_WS_ROWS;
    const size_t ws = krn_attention_ws_bytes(rows, m->n_head, m->head_dim, p->n_ctx);
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    const uint64_t limit = cpu && pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page / 2 : (uint64_t)INT64_MAX;
    uint64_t kv = 0;
    const int over = __builtin_mul_overflow(per_pos, (uint64_t)p->n_ctx, &kv);
    if (!over && ws <= limit && kv <= limit - ws)
        return 0;
    char want[32];
    snprintf(want, sizeof want, over ? "over 2^64" : "%llu", (unsigned long long)kv);
    const uint64_t max_ctx = per_pos ? limit / per_pos : 0;
    return dev_err_set(err, MEMRA_E_INVAL, "memra_runtime_params.n_ctx = %d: KV cache of %s bytes (%d layers x 2 x %d "
                       "seq x n_ctx x %llu x %zu B) + %zu of workspace > %s (%llu B); allowed n_ctx: 1..%llu",
                       p->n_ctx, want, m->n_layer, p->n_seq, (unsigned long long)kv_dim, krn_kv_elem_bytes(kv_t), ws,
                       cpu ? "half the host's memory" : "2^63", (unsigned long long)limit,
                       (unsigned long long)(max_ctx < INT32_MAX ? max_ctx : INT32_MAX));
}

static dev_platform *open_backend(const memra_runtime_params *p, dev_err *err)
{
    if (p->backend == MEMRA_BACKEND_CPU)
        return dev_platform_open(DEV_KIND_CPU, p->cpu_devices, err);
    if (p->backend == MEMRA_BACKEND_CUDA)
        return dev_platform_open(DEV_KIND_CUDA, 0, err);
    dev_err probe = {0}; /* AUTO: CUDA when it opens, else CPU */
    dev_platform *plat = dev_platform_open(DEV_KIND_CUDA, 0, &probe);
    return plat ? plat : dev_platform_open(DEV_KIND_CPU, p->cpu_devices, err);
}

memra_runtime *memra_runtime_create(const memra_model *model, const memra_runtime_params *params)
{
    memra_runtime_params p = params ? *params : memra_runtime_default_params();
    api_errbox *box = model ? (api_errbox *)&model->err : NULL;
    dev_err err = {0};
    memra_runtime *rt = NULL;
    if (!model) {
        api_fail(NULL, MEMRA_E_INVAL, "memra_runtime_create: model is NULL");
        return NULL;
    }
    if (check_params(&p, &err) || (p.apply_env && backend_doors(&p, &err)) ||
        api_profile_apply(model, &p, &err) || check_params(&p, &err)) /* a profile's values checked as fields */
        goto fail;
    if (!(rt = calloc(1, sizeof *rt)) || !(rt->slot_used = calloc((size_t)p.n_seq, 1))) {
        dev_err_set(&err, MEMRA_E_NOMEM, "memra_runtime_create: out of host memory");
        goto fail;
    }
    pthread_mutex_init(&rt->mu, NULL);
    api_errbox_init(&rt->err);
    rt->model = model;
    rt->abort_cb = p.abort_cb;
    rt->abort_user = p.abort_user;
    if (!(rt->plat = open_backend(&p, &err)) ||
        check_ctx_fits(model, &p, dev_platform_kind(rt->plat) == DEV_KIND_CPU, &err))
        goto fail;
    dev_platform_set_matmul_x8(rt->plat, p.cpu_x8); /* before the first launch: the weights are not loaded yet */
    dev_platform_set_cpu_threads(rt->plat, p.cpu_threads);
    act_pp_params ap = act_pp_default_params();
    ap.config.stages = p.stages;
    ap.config.n_cuts = p.n_cuts;
    memcpy(ap.config.cuts, p.cuts, sizeof ap.config.cuts);
    ap.config.n_devices = p.n_devices;
    memcpy(ap.config.devices, p.devices, sizeof ap.config.devices);
    ap.config.shard = p.shard;
    ap.config.slots = p.slots;
    ap.config.streams = p.streams;
    ap.apply_env = p.apply_env;
    ap.n_seq = p.n_seq;
    ap.n_ctx = p.n_ctx;
    ap.max_rows = p.max_rows;
    static const int kv_krn[] = {KRN_F32, KRN_F32, KRN_F16, KRN_BF16}; /* by memra_kv_type; DEFAULT: below */
    ap.kv_type = p.kv_type == MEMRA_KV_DEFAULT && p.apply_env ? -1 : kv_krn[p.kv_type]; /* -1: MEMRA_KV_TYPE */
    ap.act_type = p.act_type == MEMRA_KV_DEFAULT && p.apply_env ? -1 : kv_krn[p.act_type]; /* -1: MEMRA_ACT_TYPE */
    if (p.overlap >= 0) /* a per-step seam of this runtime; MEMRA_PP_OVERLAP (apply_env) wins at create */
        ap.seams.overlap = p.overlap;
    if (p.graph) /* a per-step seam of this runtime; MEMRA_PP_GRAPH (apply_env) wins at create */
        ap.seams.graph = 1;
    ap.progress = p.progress;
    ap.progress_ctx = p.progress_user;
    /* AUTO: act_pp's AUTO (with CUDA, wherever a fed step can run ahead) */
    ap.feed = p.device_feed == MEMRA_FEED_ON ? ACT_FEED_ON : p.device_feed == MEMRA_FEED_AUTO ? ACT_FEED_AUTO
                                                                                                : ACT_FEED_OFF;
    ap.batch_invariant = p.batch_invariant; /* MEMRA_BATCH_INVARIANT, read by act_pp_create, wins when set */
    ap.synth = model->synth; /* a synthetic shape (api_model_synthetic) is generated instead of loaded */
    /* the runtime loads the weights from model->path again: it must be the file memra_model_load read (a stat
     * here, then the identity of the file act_pp mapped, header hash included); a synthetic shape has no file */
    if (model->synth ? !(rt->pp = act_pp_create(rt->plat, NULL, &ap, &err))
                     : mdl_gguf_id_check_path(model->path, &model->file_id, "memra_model_load", &err) ||
                           !(rt->pp = act_pp_create(rt->plat, model->path, &ap, &err)) ||
                           mdl_gguf_id_compare(model->path, mdl_model_file_id(act_pp_model(rt->pp)), &model->file_id,
                                               "memra_model_load", &err))
        goto fail;
    rt->feed = act_pp_feeds(rt->pp);
    const mdl_hparams *hp = mdl_model_hparams(act_pp_model(rt->pp));
    rt->n_seq = p.n_seq;
    rt->n_ctx = act_pp_n_ctx(rt->pp);
    rt->max_rows = p.max_rows;
    rt->n_vocab = hp->n_vocab;
    rt->N = act_pp_stages(rt->pp);
    rt->micro_batches = p.micro_batches ? p.micro_batches : rt->N < rt->n_seq ? rt->N : rt->n_seq;
    rt->stats_t0_ns = api_now_ns();
    const char *tr = p.apply_env ? getenv("MEMRA_TRACE") : NULL; /* the trace's door: written at memra_runtime_free */
    if (tr && !tr[0]) {
        dev_err_set(&err, MEMRA_E_INVAL, "MEMRA_TRACE=: expected the path of the trace file to write (unset: no trace)");
        goto fail;
    }
    if (tr && act_trace_start(rt, tr, rt->N, &err) != 0) {
        dev_err_wrap(&err, "MEMRA_TRACE=%s", tr);
        goto fail;
    }
    return rt;
fail:
    dev_err_wrap(&err, "memra_runtime_create");
    api_fail_err(box, &err);
    if (rt) {
        if (rt->pp)
            act_pp_destroy(rt->pp);
        if (rt->plat)
            dev_platform_close(rt->plat);
        if (rt->slot_used) {
            pthread_mutex_destroy(&rt->mu);
            api_errbox_destroy(&rt->err);
        }
        free(rt->slot_used);
        free(rt);
    }
    return NULL;
}

static void free_list(memra_seq *s)
{
    while (s) {
        memra_seq *n = s->next;
        free(s);
        s = n;
    }
}

void memra_runtime_free(memra_runtime *rt)
{
    if (!rt)
        return;
    act_pp_drain(rt->pp, NULL);
    while (rt->pendings)
        memra_pending_free(rt->pendings);
    dev_err err = {0};
    if (act_trace_owned_by(rt) && act_trace_stop(rt, NULL, &err) != 0) /* the only channel left: the model's */
        api_fail_err((api_errbox *)&rt->model->err, &err);
    act_pp_destroy(rt->pp);
    dev_platform_close(rt->plat);
    free_list(rt->open_list);
    free_list(rt->retired_head);
    pthread_mutex_destroy(&rt->mu);
    api_errbox_destroy(&rt->err);
    free(rt->slot_used);
    free(rt);
}

const char *memra_runtime_last_error(const memra_runtime *rt)
{
    return rt ? api_errbox_read((api_errbox *)&rt->err) : "(null runtime)";
}

int memra_runtime_check(memra_runtime *rt)
{
    if (!rt)
        return api_fail(NULL, MEMRA_E_INVAL, "memra_runtime_check: NULL runtime");
    dev_err e = {0};
    return act_pp_check(rt->pp, &e) != 0 ? api_fail_err(&rt->err, &e) : MEMRA_OK;
}

int memra_runtime_n_stages(const memra_runtime *rt) { return rt ? rt->N : 0; }
int memra_runtime_n_seq(const memra_runtime *rt) { return rt ? rt->n_seq : 0; }
int memra_runtime_n_ctx(const memra_runtime *rt) { return rt ? rt->n_ctx : 0; }
int memra_runtime_max_rows(const memra_runtime *rt) { return rt ? rt->max_rows : 0; }
int memra_runtime_n_vocab(const memra_runtime *rt) { return rt ? rt->n_vocab : 0; }

const char *memra_runtime_backend(const memra_runtime *rt)
{
    return !rt ? NULL : dev_platform_kind(rt->plat) == DEV_KIND_CUDA ? "cuda" : "cpu";
}

int memra_runtime_stage_layers(const memra_runtime *rt, int s, int *first, int *end)
{
    if (!rt || !first || !end)
        return api_fail(rt ? (api_errbox *)&rt->err : NULL, MEMRA_E_INVAL,
                        "memra_runtime_stage_layers: NULL runtime, first or end");
    if (s < 0 || s >= rt->N)
        return api_fail((api_errbox *)&rt->err, MEMRA_E_INVAL, "memra_runtime_stage_layers: stage %d outside 0..%d",
                        s, rt->N - 1);
    const int *fence = act_pp_fence(rt->pp);
    int n_layer = mdl_model_hparams(act_pp_model(rt->pp))->n_layer;
    *first = fence && rt->N > 1 ? fence[s] : 0;
    *end = fence && rt->N > 1 ? fence[s + 1] : n_layer;
    return MEMRA_OK;
}

int memra_runtime_counters(const memra_runtime *rt, memra_counters *out)
{
    if (!rt || !out)
        return api_fail(rt ? (api_errbox *)&rt->err : NULL, MEMRA_E_INVAL, "memra_runtime_counters: NULL argument");
    act_pp_counters c;
    act_pp_get_counters(rt->pp, &c);
    memset(out, 0, sizeof *out);
    out->steps_done = c.steps_done;
    out->split_steps = c.split_steps;
    out->pipe_overlaps = c.pipe_overlaps;
    out->unsplit_steps = c.unsplit_steps;
    out->batch_split_steps = c.batch_split_steps;
    out->prime_split_chunks = c.prime_split_chunks;
    out->prime_pipe_overlaps = c.prime_pipe_overlaps;
    out->fed_steps = c.fed_steps;
    memra_runtime *w = (memra_runtime *)rt;
    pthread_mutex_lock(&w->mu);
    out->tokens_decoded = rt->tokens_decoded;
    out->tokens_primed = rt->tokens_primed;
    pthread_mutex_unlock(&w->mu);
    return MEMRA_OK;
}

int memra_runtime_stage_stats(const memra_runtime *rt, int s, memra_stage_stats *out)
{
    int r = memra_runtime_stage_layers(rt, s, out ? &out->first_layer : NULL, out ? &out->end_layer : NULL);
    if (r)
        return r;
    act_pp_stage_stats st;
    act_pp_get_stage_stats(rt->pp, s, &st);
    memra_runtime *w = (memra_runtime *)rt;
    pthread_mutex_lock(&w->mu);
    uint64_t t0 = rt->stats_t0_ns;
    pthread_mutex_unlock(&w->mu);
    uint64_t wall = api_now_ns() - t0;
    out->busy_ns = st.busy_ns;
    out->walks = st.walks;
    out->busy_frac = wall ? (double)st.busy_ns / (double)wall : 0.0;
    if (out->busy_frac > 1.0)
        out->busy_frac = 1.0;
    return MEMRA_OK;
}

void memra_runtime_reset_stats(memra_runtime *rt)
{
    if (!rt)
        return;
    pthread_mutex_lock(&rt->mu);
    act_pp_reset_stats(rt->pp);
    rt->stats_t0_ns = api_now_ns();
    pthread_mutex_unlock(&rt->mu);
}

int memra_runtime_drain(memra_runtime *rt)
{
    if (!rt)
        return api_fail(NULL, MEMRA_E_INVAL, "memra_runtime_drain: runtime is NULL");
    dev_err err = {0};
    return act_pp_drain(rt->pp, &err) ? api_fail_err(&rt->err, &err) : MEMRA_OK;
}

int memra_runtime_reload_doors(memra_runtime *rt)
{
    if (!rt)
        return api_fail(NULL, MEMRA_E_INVAL, "memra_runtime_reload_doors: runtime is NULL");
    dev_err err = {0};
    if (act_pp_reload_doors(rt->pp, &err) != 0) {
        dev_err_wrap(&err, "memra_runtime_reload_doors");
        return api_fail_err(&rt->err, &err);
    }
    return MEMRA_OK;
}

int memra_runtime_trace_start(memra_runtime *rt, const char *path)
{
    if (!rt)
        return api_fail(NULL, MEMRA_E_INVAL, "memra_runtime_trace_start: runtime is NULL");
    dev_err err = {0};
    if (act_trace_start(rt, path, rt->N, &err) != 0) {
        dev_err_wrap(&err, "memra_runtime_trace_start");
        return api_fail_err(&rt->err, &err);
    }
    return MEMRA_OK;
}

int memra_runtime_trace_stop(memra_runtime *rt)
{
    if (!rt)
        return api_fail(NULL, MEMRA_E_INVAL, "memra_runtime_trace_stop: runtime is NULL");
    dev_err err = {0};
    if (act_pp_drain(rt->pp, &err) != 0) /* every step's records are in before the file is written */
        dev_err_clear(&err);        /* a stage error belongs to the steps' callers, not to the trace */
    if (act_trace_stop(rt, NULL, &err) != 0) {
        dev_err_wrap(&err, "memra_runtime_trace_stop");
        return api_fail_err(&rt->err, &err);
    }
    return MEMRA_OK;
}

/* ---- sequences ---- */

memra_seq *memra_seq_open(memra_runtime *rt)
{
    if (!rt) {
        api_fail(NULL, MEMRA_E_INVAL, "memra_seq_open: runtime is NULL");
        return NULL;
    }
    pthread_mutex_lock(&rt->mu);
    int slot = -1;
    for (int i = 0; i < rt->n_seq && slot < 0; i++)
        if (!rt->slot_used[i])
            slot = i;
    memra_seq *s = NULL;
    if (slot >= 0) {
        if (rt->n_retired > API_RETIRED_MAX) { /* recycle the oldest closed handle */
            s = rt->retired_head;
            rt->retired_head = s->next;
            if (!rt->retired_head)
                rt->retired_tail = NULL;
            rt->n_retired--;
        } else {
            s = malloc(sizeof *s);
        }
    }
    if (s) {
        rt->slot_used[slot] = 1;
        *s = (memra_seq){.rt = rt, .slot = slot, .pos = 0, .next = rt->open_list};
        rt->open_list = s;
    }
    pthread_mutex_unlock(&rt->mu);
    if (slot < 0)
        api_fail(&rt->err, MEMRA_E_FULL, "memra_seq_open: all %d sequence slots are open (close one, or create "
                 "the runtime with a larger n_seq)", rt->n_seq);
    else if (!s)
        api_fail(&rt->err, MEMRA_E_NOMEM, "memra_seq_open: out of host memory");
    return s;
}

int api_seq_check(const memra_seq *seq, const char *fn)
{
    if (!seq)
        return api_fail(NULL, MEMRA_E_INVAL, "%s: sequence is NULL", fn);
    if (seq->slot < 0)
        return api_fail(&seq->rt->err, MEMRA_E_STATE, "%s: the sequence is closed (open a new one)", fn);
    return 0;
}

int memra_seq_close(memra_seq *seq)
{
    int r = api_seq_check(seq, "memra_seq_close");
    if (r)
        return r;
    memra_runtime *rt = seq->rt;
    pthread_mutex_lock(&rt->mu);
    rt->slot_used[seq->slot] = 0;
    seq->slot = -1;
    for (memra_seq **pp = &rt->open_list; *pp; pp = &(*pp)->next)
        if (*pp == seq) {
            *pp = seq->next;
            break;
        }
    seq->next = NULL;
    if (rt->retired_tail)
        rt->retired_tail->next = seq;
    else
        rt->retired_head = seq;
    rt->retired_tail = seq;
    rt->n_retired++;
    pthread_mutex_unlock(&rt->mu);
    return MEMRA_OK;
}

int memra_seq_pos(const memra_seq *seq)
{
    int r = api_seq_check(seq, "memra_seq_pos");
    return r ? r : seq->pos;
}

int memra_seq_rewind(memra_seq *seq, int pos)
{
    int r = api_seq_check(seq, "memra_seq_rewind");
    if (r)
        return r;
    if (pos < 0 || pos > seq->pos)
        return api_fail(&seq->rt->err, MEMRA_E_INVAL, "memra_seq_rewind: pos %d outside 0..%d (the tokens held)",
                        pos, seq->pos);
    seq->pos = pos;
    seq->greedy_tail = 0; /* the slot's fed token belongs to the position rewound away */
    return MEMRA_OK;
}
