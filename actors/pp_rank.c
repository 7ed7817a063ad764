/* Stages in several processes (pp_rank.h, transport/bnd_mpi.h): the start-up handshake (rank 0 sends the
 * configuration, every rank builds the same runtime and loads only its stages' share), the pick of each boundary
 * between ranks (BND_MPI or BND_NCCL), the runtime-facing calls, and the serve loop of ranks > 0. The transport
 * actor that moves steps, credits, results and beats while a runtime lives is pp_rank_wire.c; the state both share,
 * and who may touch it, is pp_rank_impl.h. */
#include "actors/pp_rank_impl.h"
#include "transport/bnd_shm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int g_active; /* a runtime spans the ranks (one at a time): main thread only */

int act_rank_init(int *argc, char ***argv, dev_err *err) { return bnd_mpi_init(argc, argv, err); }
int act_rank_self(void) { return bnd_mpi_rank(); }
int act_rank_count(void) { return bnd_mpi_size(); }

/* ---- act_pp_create hooks ---- */

void pp_rank_default_stages(act_pp_config *cfg)
{
    const int P = bnd_mpi_size();
    if (P > 1 && cfg->stages < 2)
        cfg->stages = P;
}

int pp_rank_adjust(act_pp_config *cfg, act_pp_params *p, dev_err *err)
{
    const int P = bnd_mpi_size();
    if (P <= 1)
        return 0;
    if (g_active)
        return dev_err_set(err, MEMRA_E_STATE, "act_pp_create: a runtime already spans the %d MPI ranks (one at a time)",
                           P);
    if (P > ACT_PP_MAX_STAGES || P > 256)
        return dev_err_set(err, MEMRA_E_INVAL, "mpirun -np %d: at most %d ranks", P, ACT_PP_MAX_STAGES);
    if (cfg->stages < 2)
        cfg->stages = P; /* one stage per rank */
    if (cfg->stages < P)
        return dev_err_set(err, MEMRA_E_INVAL, "MEMRA_PP_STAGES=%d with mpirun -np %d: every rank needs a stage "
                           "(stages >= ranks; leave it unset for one stage per rank)", cfg->stages, P);
    if (!cfg->streams)
        return dev_err_set(err, MEMRA_E_INVAL, "MEMRA_PP_STREAMS=0 with mpirun -np %d: the one-stream seam runs "
                           "every stage in one process (allowed: 1 across ranks)", P);
    if (p->feed == ACT_FEED_ON)
        return dev_err_set(err, MEMRA_E_INVAL, "act_pp_params.feed = ON with mpirun -np %d: the device feed "
                           "needs the last stage's tokens on stage 0's device (use AUTO or OFF)", P);
    p->feed = ACT_FEED_OFF;
    p->stamps = 0; /* walk times from host markers: CLOCK_MONOTONIC travels in the step's header (GPU stamps do not) */
    return 0;
}

/* The file's size and the FNV-1a of its first PP_SUM_BYTES. */
static int model_sum(const char *path, uint64_t *bytes, uint64_t *sum, dev_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return dev_err_set(err, MEMRA_E_IO, "rank %d: cannot open the model %s", bnd_mpi_rank(), path);
    uint64_t h = 1469598103934665603ull, n = 0;
    unsigned char buf[65536];
    size_t got;
    while (n < PP_SUM_BYTES && (got = fread(buf, 1, sizeof buf, f)) > 0)
        for (size_t i = 0; i < got && n < PP_SUM_BYTES; i++, n++)
            h = (h ^ buf[i]) * 1099511628211ull;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fclose(f);
    *bytes = sz > 0 ? (uint64_t)sz : 0;
    *sum = h;
    return 0;
}

int pp_rank_announce(act_pp *rt, const char *model_path, const act_pp_params *p, dev_err *err)
{
    const int P = bnd_mpi_size(), self = bnd_mpi_rank();
    if (P <= 1)
        return 0;
    pp_rank *rk = calloc(1, sizeof *rk);
    if (!rk)
        return dev_err_set(err, MEMRA_E_NOMEM, "act_pp_create: out of host memory");
    rt->rank = rk;
    rk->rt = rt;
    rk->self = self;
    rk->P = P;
    rk->first = -1;
    rk->in_peer = rk->out_peer = -1;
    pthread_mutex_init(&rk->lock, NULL);
    pthread_cond_init(&rk->cv, NULL);
    for (int s = 0; s < rt->N; s++) { /* consecutive stages per rank, as even as N / P allows */
        rk->owner[s] = (int)((long)s * P / rt->N);
        if (rk->owner[s] == self) {
            if (rk->first < 0)
                rk->first = s;
            rk->last = s;
        }
    }
    if (rk->first > 0)
        rk->in_peer = rk->owner[rk->first - 1];
    if (rk->last + 1 < rt->N)
        rk->out_peer = rk->owner[rk->last + 1];
    g_active = 1;
    if (self != 0)
        return 0;
    pp_wire_create *c = calloc(1, sizeof *c);
    if (!c)
        return dev_err_set(err, MEMRA_E_NOMEM, "act_pp_create: out of host memory");
    c->magic = PP_WIRE_MAGIC;
    c->N = rt->N;
    memcpy(c->fence, rt->fence, sizeof c->fence);
    c->cfg = rt->cfg;
    c->n_seq = rt->n_seq;
    c->n_ctx = p->n_ctx;
    c->max_rows = rt->max_rows;
    c->kv_type = rt->kv_type;
    c->act_type = rt->act_type;
    c->batch_invariant = rt->batch_invariant;
    c->stamps = rt->stamp_mode;
    c->matmul_x8 = dev_platform_matmul_x8(rt->plat);
    int r = 0;
    if (p->synth) { /* every rank generates the same weights from the shape and its seed */
        const char *arch = p->synth->arch ? p->synth->arch : "", *pre = p->synth->pre ? p->synth->pre : "";
        c->synth = 1;
        c->shape = *p->synth;
        if (strlen(arch) >= sizeof c->arch || strlen(pre) >= sizeof c->pre)
            r = dev_err_set(err, MEMRA_E_INVAL, "act_pp_create: a synthetic shape's arch and pre names are at most %zu "
                            "bytes across MPI ranks", sizeof c->arch - 1);
        snprintf(c->arch, sizeof c->arch, "%s", arch);
        snprintf(c->pre, sizeof c->pre, "%s", pre);
    } else {
        r = model_sum(model_path, &c->model_bytes, &c->model_sum, err);
        if (r == 0 && strlen(model_path) >= sizeof c->path)
            r = dev_err_set(err, MEMRA_E_INVAL, "act_pp_create: model path longer than %zu bytes across MPI ranks",
                            sizeof c->path - 1);
        if (r == 0)
            snprintf(c->path, sizeof c->path, "%s", model_path);
    }
    /* the main thread: no transport actor runs yet, so this is the only MPI caller */
    for (int q = 1; r == 0 && q < P; q++)
        r = bnd_mpi_send(q, BND_TAG_CREATE, c, sizeof *c, err);
    free(c);
    return r;
}

/* Wait (main thread, no transport runs yet) for the message with tag from rank `from` and receive it into buf,
 * which must be exactly cap bytes. Rank 0 also watches `from`'s READY: a rank that refused the runtime before this
 * boundary answers READY instead, and rank 0 fails with its reason (ranks > 0 that wait on a peer that refused are
 * ended by rank 0's exit). Bounded by PP_READY_NS (the peer may still be loading the model). */
static int pick_wait(pp_rank *rk, int from, int tag, void *buf, size_t cap, const char *what, dev_err *err)
{
    const uint64_t until = pp_now_ns() + PP_READY_NS;
    for (;;) {
        int src, got;
        size_t n = 0;
        if ((got = bnd_mpi_probe(from, tag, &src, &n, err)) < 0)
            return got;
        if (got == 1) {
            if (n != cap)
                return dev_err_set(err, MEMRA_E_FORMAT, "rank %d: %s from rank %d has %zu bytes (want %zu)", rk->self,
                                   what, from, n, cap);
            return bnd_mpi_recv(from, tag, buf, cap, err);
        }
        if (rk->self == 0 && (got = bnd_mpi_probe(from, BND_TAG_READY, &src, &n, err)) == 1) {
            pp_wire_ready rd = {0};
            if (bnd_mpi_recv(from, BND_TAG_READY, &rd, sizeof rd, err) != 0)
                return err->code;
            return dev_err_set(err, rd.status ? rd.status : MEMRA_E_STATE, "rank %d refused the runtime: %s", from,
                               rd.status ? rd.msg : "READY before its boundary was built");
        }
        if (got < 0)
            return got;
        if (pp_now_ns() >= until)
            return dev_err_set(err, MEMRA_E_DEVICE, "rank %d: no %s from rank %d within %.0f s", rk->self, what, from,
                               (double)PP_READY_NS / 1e9);
        struct timespec nap = {0, 1000000};
        nanosleep(&nap, NULL);
    }
}

/* This side of boundary b's device: a GPU?, this build's NCCL, "host bus-id", its name. */
static int side_of(int b, dev_device *d, pp_wire_side *w, dev_err *err)
{
    char host[64] = "", bus[64] = "";
    memset(w, 0, sizeof *w);
    w->magic = PP_WIRE_MAGIC;
    w->b = b;
    w->gpu = dev_platform_kind(dev_device_platform(d)) == DEV_KIND_CUDA;
    w->nccl = bnd_nccl_built();
    w->emu = bnd_shm_wanted();
    if (gethostname(host, sizeof host - 1) != 0)
        snprintf(host, sizeof host, "?");
    if (dev_device_bus_id(d, bus, sizeof bus, err) != 0)
        return err->code;
    snprintf(w->where, sizeof w->where, "%s %s", host, bus);
    snprintf(w->name, sizeof w->name, "%s", dev_device_name(d));
    return 0;
}

/* Boundary b between this rank and `peer` (main thread, before the transport starts): agree on its transport and
 * build this rank's half. The consumer sends its side (pp_wire_side), the producer picks (bnd_pick_remote, with the
 * MEMRA_PP_NCCL door every rank has from CREATE), makes the communicator's id for BND_NCCL and sends both back
 * (pp_wire_pick); then both build their half (bnd_create_nccl is collective: it returns once both joined). The
 * producer prints the pick and its reason on stderr. Blocking MPI calls: rank r waits only
 * on boundary first-1's producer (rank < r) and then on boundary last's consumer, and every rank builds its
 * boundaries in index order, so the waits form a chain from rank 0 up and cannot deadlock. */
static int remote_boundary(act_pp *rt, int b, int producer, bnd_boundary **out, dev_err *err)
{
    pp_rank *rk = rt->rank;
    const size_t bytes = pp_frame_bytes(rt, rt->max_rows);
    const int peer = producer ? rk->owner[b + 1] : rk->owner[b];
    dev_device *local = producer ? rt->stage[b].dev : rt->stage[b + 1].dev;
    pp_wire_side mine, theirs;
    pp_wire_pick pk;
    int r;
    memset(&pk, 0, sizeof pk);
    if ((r = side_of(b, local, &mine, err)) != 0)
        return r;
    if (!producer) {
        if ((r = bnd_mpi_send(peer, BND_TAG_PICK, &mine, sizeof mine, err)) != 0 ||
            (r = pick_wait(rk, peer, BND_TAG_PICK, &pk, sizeof pk, "the boundary's transport", err)) != 0)
            return r;
        if (pk.magic != PP_WIRE_MAGIC || pk.b != b)
            return dev_err_set(err, MEMRA_E_FORMAT, "rank %d: a malformed transport pick for boundary %d from rank %d",
                               rk->self, b, peer);
        if (pk.status != 0)
            return dev_err_set(err, pk.status, "%s", pk.msg);
    } else {
        if ((r = pick_wait(rk, peer, BND_TAG_PICK, &theirs, sizeof theirs, "the consumer's device", err)) != 0)
            return r;
        if (theirs.magic != PP_WIRE_MAGIC || theirs.b != b)
            return dev_err_set(err, MEMRA_E_FORMAT, "rank %d: a malformed device report for boundary %d from rank %d",
                               rk->self, b, peer);
        theirs.where[sizeof theirs.where - 1] = theirs.name[sizeof theirs.name - 1] = 0;
        const char *why;
        pk.magic = PP_WIRE_MAGIC;
        pk.b = b;
        /* the test stand-in on both ranks: every boundary is BND_NCCL moved through shared memory (the door still
         * shuts it) */
        const int emu = mine.emu && theirs.emu;
        pk.kind = (int32_t)bnd_pick_remote(emu || mine.gpu, emu || theirs.gpu, emu || (mine.nccl && theirs.nccl),
                                           !emu && !strcmp(mine.where, theirs.where), rt->cfg.nccl == ACT_NCCL_OFF,
                                           &why);
        if (emu && pk.kind == BND_NCCL)
            why = "MEMRA_TEST_NCCL_EMU=1: the shared-memory stand-in for NCCL, a test hook";
        dev_err e = {0};
        if (pk.kind == BND_NCCL && emu && bnd_shm_make_id(pk.id, rt->cfg.slots, bytes, &e) != 0) {
            pk.status = e.code;
            snprintf(pk.msg, sizeof pk.msg, "rank %d: boundary %d: %s", rk->self, b, e.msg);
        } else if (pk.kind == BND_NCCL && !emu && bnd_nccl_unique_id(pk.id, &e) != 0) {
            pk.status = e.code;
            snprintf(pk.msg, sizeof pk.msg, "rank %d: boundary %d: %s (MEMRA_PP_NCCL=0 keeps it host-staged)",
                     rk->self, b, e.msg);
        }
        /* one line per boundary and runtime: which transport and why (a CUDA boundary never falls back silently) */
        fprintf(stderr, "memra: boundary %d (stage %d on rank %d, %s [%s] -> stage %d on rank %d, %s [%s]): %s (%s)\n",
                b, b, rk->self, mine.name, mine.where, b + 1, peer, theirs.name, theirs.where,
                pk.kind == BND_NCCL ? "NCCL" : "host-staged MPI", why);
        if ((r = bnd_mpi_send(peer, BND_TAG_PICK, &pk, sizeof pk, err)) != 0)
            return r;
        if (pk.status != 0)
            return dev_err_set(err, pk.status, "%s", pk.msg);
    }
    if (pk.kind == BND_NCCL) {
        /* collective with the peer's bnd_create_nccl, which it calls right after the pick crossed */
        if (!(*out = bnd_create_nccl(local, producer, pk.id, rt->cfg.slots, bytes, err)))
            return err->code;
    } else if (!(*out = bnd_create_mpi(local, producer, rt->cfg.slots, bytes, err))) {
        return err->code;
    }
    if (!producer) {
        rk->in = *out;
        rk->in_nccl = pk.kind == BND_NCCL;
        return 0;
    }
    rk->out = *out;
    rk->out_nccl = pk.kind == BND_NCCL;
    if (rk->out_nccl) { /* the header messages: [pp_wire_step | pos (B,) | seq (B,)] of up to max_rows rows */
        rk->hdr_cap = sizeof(pp_wire_step) + 2 * sizeof(int32_t) * (size_t)rt->max_rows;
        for (int k = 0; k < rt->cfg.slots; k++)
            if (!(rk->hdr[k] = calloc(1, rk->hdr_cap)))
                return dev_err_set(err, MEMRA_E_NOMEM, "act_pp_create: out of host memory");
    }
    return 0;
}

/* Each boundary's transport is chosen here: in one rank d2d or peer (bnd_create); between ranks BND_NCCL when both
 * stages are on GPUs, distinct ones, both builds have NCCL and MEMRA_PP_NCCL allows it, else BND_MPI, the slot
 * staged through host memory (remote_boundary). act_pp_create calls it for b = 0, 1, .. on every rank. */
int pp_rank_boundary(act_pp *rt, int b, bnd_boundary **out, dev_err *err)
{
    pp_rank *rk = rt->rank;
    const size_t bytes = pp_frame_bytes(rt, rt->max_rows);
    *out = NULL;
    const int mine0 = !rk || rk->owner[b] == rk->self, mine1 = !rk || rk->owner[b + 1] == rk->self;
    if (mine0 && mine1) {
        *out = bnd_create(rt->stage[b].dev, rt->stage[b + 1].dev, rt->cfg.slots, bytes, err);
        return *out ? 0 : err->code;
    }
    if (mine0 || mine1)
        return remote_boundary(rt, b, mine0, out, err);
    return 0; /* neither stage is ours */
}

/* ---- the transport actor's life ---- */

int pp_rank_start(act_pp *rt, dev_err *err)
{
    pp_rank *rk = rt->rank;
    if (!rk)
        return 0;
    rk->rx_cap = BND_MPI_HDR + pp_frame_bytes(rt, rt->max_rows);
    if (!(rk->rx = malloc(rk->rx_cap)))
        return dev_err_set(err, MEMRA_E_NOMEM, "act_pp_create: out of host memory");
    char name[32];
    snprintf(name, sizeof name, "mpi%d", rk->self);
    if (!(rk->tp = act_actor_create(name, pp_rank_tp_handle, rk, err)))
        return err->code;
    for (int s = 0; s < rt->N; s++)
        if (rk->owner[s] != rk->self) { /* what a local stage posts to a remote one goes over MPI */
            act_actor_destroy(rt->stage[s].actor);
            rt->stage[s].actor = rk->tp;
            rt->stage[s].remote = 1;
        }
    if (rk->self != 0)
        return 0; /* the serve loop sends READY, then starts the transport */
    const uint64_t until = pp_now_ns() + PP_READY_NS;
    int ready[256] = {0}, r = 0, n_ready = 0;
    while (n_ready < rk->P - 1 && r == 0) { /* every rank's answer, from any rank: the first refusal is the error
                                             * (a rank waiting on a peer that refused never answers) */
        int src = -1, got;
        size_t n;
        pp_wire_ready rd = {0};
        if ((got = bnd_mpi_probe(-1, BND_TAG_READY, &src, &n, err)) == 0) {
            if (pp_now_ns() >= until) {
                int q = 1;
                while (q < rk->P && ready[q])
                    q++;
                r = dev_err_set(err, MEMRA_E_DEVICE, "act_pp_create: rank %d did not report READY within %.0f s", q,
                                (double)PP_READY_NS / 1e9);
                break;
            }
            struct timespec nap = {0, 1000000};
            nanosleep(&nap, NULL);
            continue;
        }
        if (got < 0 || src < 1 || src >= rk->P || bnd_mpi_recv(src, BND_TAG_READY, &rd, sizeof rd, err) != 0)
            r = err->code ? err->code : MEMRA_E_DEVICE;
        else if (rd.status != 0)
            r = dev_err_set(err, rd.status, "rank %d refused the runtime: %s", src, rd.msg);
        else if (!ready[src])
            ready[src] = 1, n_ready++;
    }
    if (r) { /* the ranks that built it wait for the end: tell them (no transport runs here yet) */
        for (int q = 1; q < rk->P; q++)
            if (ready[q])
                bnd_mpi_send(q, BND_TAG_DESTROY, "bye", 4, NULL);
        return r;
    }
    const uint64_t t = pp_now_ns();
    for (int q = 0; q < rk->P && q < 256; q++)
        rk->heard[q] = t;
    rk->last_beat = t;
    r = act_actor_start(rk->tp, err);
    return r ? r : pp_rank_tp_kick(rk);
}

void pp_rank_stop(act_pp *rt)
{
    pp_rank *rk = rt->rank;
    if (rk && rk->self == 0 && rk->tp)
        pp_post(rk->tp, PP_MSG_SHUTDOWN, "", 0);
}

act_actor *pp_rank_actor(act_pp *rt) { return rt->rank ? rt->rank->tp : NULL; }

void pp_rank_free(act_pp *rt)
{
    pp_rank *rk = rt->rank;
    if (!rk)
        return;
    for (int i = 0; i < rk->n_small; i++) { /* sends still in flight: forget them; their bytes stay (tiny) */
        bnd_mpi_req_free(rk->smalls[i].req);
    }
    free(rk->smalls);
    for (int k = 0; k < ACT_PP_MAX_SLOTS; k++)
        if (rk->send_req[k])
            bnd_mpi_req_free(rk->send_req[k]);
    for (int k = 0; k < ACT_PP_MAX_SLOTS; k++)
        free(rk->hdr[k]);
    free(rk->outq);
    free(rk->fifo);
    if (rk->steps.req) /* a peer died mid-message: forget the receive, and keep rx, which MPI may still write */
        bnd_mpi_req_free(rk->steps.req);
    else
        free(rk->rx);
    if (rk->results.req) /* the same for a result */
        bnd_mpi_req_free(rk->results.req);
    else
        free(rk->results.buf);
    pthread_mutex_destroy(&rk->lock);
    pthread_cond_destroy(&rk->cv);
    free(rk);
    rt->rank = NULL;
    g_active = 0;
}

void pp_rank_result(act_pp *rt, pp_rec *rec, int status, const dev_err *err)
{
    pp_rank *rk = rt->rank;
    if (!rk || rk->self == 0)
        return;
    const size_t bytes = status == 0 ? pp_result_bytes(rt, rec) : 0;
    char *buf = malloc(sizeof(pp_wire_result) + bytes);
    if (!buf)
        return; /* rank 0 sees this rank fall silent on the step: its drain fails on the timeout */
    pp_wire_result h;
    memset(&h, 0, sizeof h);
    h.magic = PP_WIRE_MAGIC;
    h.id = rec->id;
    h.status = status;
    if (status != 0) {
        const char *msg = rec->pending->err.msg[0] ? rec->pending->err.msg : err && err->msg[0] ? err->msg : "failed";
        snprintf(h.msg, sizeof h.msg, "rank %d: %s", rk->self, msg);
    }
    for (int s = 0; s < rt->N; s++) { /* ordered by ev_done: every local walk's markers ran before it */
        h.t[2 * s] = rec->mark[s].t0_ns;
        h.t[2 * s + 1] = rec->mark[s].t1_ns;
    }
    memcpy(buf, &h, sizeof h);
    if (bytes)
        memcpy(buf + sizeof h, rec->pending->host, bytes);
    struct { void *buf; size_t n; } res = {buf, sizeof h + bytes};
    if (pp_post(rk->tp, PP_MSG_SEND_RESULT, &res, sizeof res) != 0)
        free(buf);
}

void pp_rank_account(act_pp *rt, const pp_rec *rec)
{
    if (atomic_load(&rec->failed))
        return;
    uint64_t marked = 0; /* rank 0's own stages: their host markers counted their walks */
    for (int s = 0; s < rt->N; s++)
        if (rt->rank->owner[s] == 0)
            marked |= 1ull << s;
    /* the walk times of the other ranks' stages come from their CLOCK_MONOTONIC: one clock on one host, so the
     * overlap count is exact there and approximate across hosts (the figures and the bits are not affected) */
    pp_account_stamps(rt, rec, marked);
}

int pp_rank_streams_share_device(const act_pp *rt)
{
    return act_pp_streams_share_device(&rt->cfg, rt->N, rt->rank ? rt->rank->owner : NULL);
}

int pp_rank_refuse_sync(const act_pp *rt, dev_err *err)
{
    if (!rt->rank)
        return 0;
    return dev_err_set(err, MEMRA_E_REFUSED, "an A/B seam (MEMRA_BATCH_PP=0, MEMRA_SPEC_PP=0, MEMRA_PRIME_PP=0) runs "
                       "the unsplit body on the stage-owned KV, which lives in %d processes: unset it under mpirun",
                       rt->rank->P);
}

int pp_rank_stages(const act_pp *rt, int *first, int *last)
{
    *first = rt->rank ? rt->rank->first : 0;
    *last = rt->rank ? rt->rank->last : rt->N - 1;
    return rt->rank != NULL;
}

int pp_rank_check(act_pp *rt, dev_err *err)
{
    pp_rank *rk = rt->rank;
    if (!rk)
        return 0;
    pthread_mutex_lock(&rk->lock);
    /* ordered by rk->lock: the transport sets over when it fails (die) */
    const int r = rk->over ? rk->over_status : 0;
    if (r && err)
        *err = rk->over_err;
    pthread_mutex_unlock(&rk->lock);
    return r;
}

/* ---- ranks > 0 ---- */

static int serve_one(dev_platform *plat, const pp_wire_create *c, dev_err *err)
{
    pp_wire_ready rd = {0};
    act_pp *rt = NULL;
    uint64_t bytes = 0, sum = 0;
    mdl_gguf_synth shape = c->shape;
    shape.arch = c->arch[0] ? c->arch : NULL;
    shape.pre = c->pre[0] ? c->pre : NULL;
    int r = c->synth ? 0 : model_sum(c->path, &bytes, &sum, err);
    if (r == 0 && !c->synth && (bytes != c->model_bytes || sum != c->model_sum))
        r = dev_err_set(err, MEMRA_E_INVAL, "rank %d: the model %s differs from rank 0's (%llu bytes, header "
                        "checksum %016llx; rank 0: %llu bytes, %016llx): every rank needs the same file", bnd_mpi_rank(),
                        c->path, (unsigned long long)bytes, (unsigned long long)sum,
                        (unsigned long long)c->model_bytes, (unsigned long long)c->model_sum);
    if (r == 0) {
        act_pp_params p = act_pp_default_params();
        p.config = c->cfg;
        p.apply_env = 0; /* rank 0's doors, in c->cfg */
        p.n_seq = c->n_seq;
        p.n_ctx = c->n_ctx;
        p.max_rows = c->max_rows;
        p.kv_type = c->kv_type;
        p.act_type = c->act_type;
        p.batch_invariant = c->batch_invariant;
        p.stamps = c->stamps;
        p.feed = ACT_FEED_OFF;
        p.synth = c->synth ? &shape : NULL;
        dev_platform_set_matmul_x8(plat, c->matmul_x8); /* before the first launch, as rank 0 sets it */
        if (!(rt = act_pp_create(plat, c->synth ? NULL : c->path, &p, err)))
            r = err->code;
        else if (rt->N != c->N || memcmp(rt->fence, c->fence, (size_t)(c->N + 1) * sizeof(int)) != 0)
            r = dev_err_set(err, MEMRA_E_INVAL, "rank %d: the split differs from rank 0's (N %d vs %d)", bnd_mpi_rank(),
                            rt->N, c->N);
    }
    rd.status = r;
    if (r)
        snprintf(rd.msg, sizeof rd.msg, "%s", err->msg);
    /* the main thread: this runtime's transport is not started yet, so it is the only MPI caller */
    int rs = bnd_mpi_send(0, BND_TAG_READY, &rd, sizeof rd, r ? NULL : err);
    if (r || rs) {
        act_pp_destroy(rt); /* not started: nothing of it runs */
        return r ? r : rs;
    }
    pp_rank *rk = rt->rank;
    const uint64_t t = pp_now_ns();
    for (int q = 0; q < rk->P && q < 256; q++)
        rk->heard[q] = t;
    rk->last_beat = t;
    if ((r = act_actor_start(rk->tp, err)) != 0 || (r = pp_rank_tp_kick(rk)) != 0)
        return r;
    pthread_mutex_lock(&rk->lock);
    /* ordered by rk->lock: the transport sets over on DESTROY or on its error */
    while (!rk->over)
        pthread_cond_wait(&rk->cv, &rk->lock);
    r = rk->over_status;
    if (r)
        *err = rk->over_err;
    pthread_mutex_unlock(&rk->lock);
    if (r) /* a peer is dead or stuck: leave the runtime to the process's exit (a drain could wait for it) */
        return r;
    act_pp_destroy(rt);
    return 0;
}

int act_rank_serve(dev_err *err)
{
    if (bnd_mpi_size() <= 1 || bnd_mpi_rank() == 0)
        return dev_err_set(err, MEMRA_E_STATE, "act_rank_serve: for ranks > 0 of an mpirun launch (this is rank %d "
                           "of %d)", bnd_mpi_rank(), bnd_mpi_size());
    dev_platform *plat = dev_platform_open_env(err);
    if (!plat)
        return err->code;
    pp_wire_create *c = malloc(sizeof *c);
    if (!c) {
        dev_platform_close(plat);
        return dev_err_set(err, MEMRA_E_NOMEM, "rank %d: out of host memory", bnd_mpi_rank());
    }
    int r = 0;
    for (;;) {
        int src, got;
        size_t n;
        if ((got = bnd_mpi_probe(0, BND_TAG_EXIT, &src, &n, err)) == 1) {
            int32_t st = 0;
            r = bnd_mpi_recv(0, BND_TAG_EXIT, &st, sizeof st, err);
            if (r == 0 && st != 0)
                r = dev_err_set(err, st, "rank 0 finished with status %d", st);
            break;
        }
        if (got == 0 && (got = bnd_mpi_probe(0, BND_TAG_CREATE, &src, &n, err)) == 1) {
            if ((r = bnd_mpi_recv(0, BND_TAG_CREATE, c, sizeof *c, err)) != 0)
                break;
            if (c->magic != PP_WIRE_MAGIC) {
                r = dev_err_set(err, MEMRA_E_FORMAT, "rank %d: a malformed CREATE from rank 0", bnd_mpi_rank());
                break;
            }
            dev_err_clear(err);
            if ((r = serve_one(plat, c, err)) != 0) {
                /* a refusal (READY carried it to rank 0, whose tool ends us) or a dead peer */
                if (c->magic == PP_WIRE_MAGIC && g_active)
                    break; /* the runtime ran: stop now */
                r = 0;     /* refused at create: wait for rank 0's EXIT */
                continue;
            }
            continue;
        }
        if (got < 0) {
            r = got;
            break;
        }
        struct timespec nap = {0, 1000000}; /* between runtimes: 1 ms */
        nanosleep(&nap, NULL);
    }
    free(c);
    if (!g_active)
        dev_platform_close(plat);
    return r;
}

void act_rank_finish(int status)
{
    if (bnd_mpi_size() > 1 && bnd_mpi_rank() == 0) {
        int32_t st = status;
        for (int q = 1; q < bnd_mpi_size(); q++) {
            bnd_mpi_req *req = NULL;
            if (bnd_mpi_isend(q, BND_TAG_EXIT, &st, sizeof st, &req, NULL) != 0)
                continue;
            int done = 0; /* bounded: a dead rank never takes it */
            for (int i = 0; i < 2000 && !done; i++) {
                if (bnd_mpi_test(req, &done, NULL) != 0)
                    break;
                struct timespec nap = {0, 1000000};
                if (!done)
                    nanosleep(&nap, NULL);
            }
            if (!done)
                bnd_mpi_req_free(req);
        }
    }
    bnd_mpi_finish(status);
}
