/* Stages in several processes (pp_rank.h, transport/bnd_mpi.h): the start-up handshake, the transport actor of a
 * rank, and the serve loop of ranks > 0.
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
 * a rank > 0 returns the error from act_rank_serve so its tool exits non-zero.
 *
 * Shared state:
 *   pp_rank fields marked [tp]       the transport actor's thread only
 *   over, over_status, over_err      transport sets, the serve loop waits, pp_rank_check reads [lock]
 *   owner[], first, last, in, out,   written at create (main thread), read-only while actors run (ordered by
 *   in_nccl, out_nccl, hdr[],        the actors' start); in/out's NCCL communicators: used by the stage actors,
 *   hdr_cap                          aborted by the transport (die; each half's lock orders the two); hdr[k]'s
 *                                    bytes: the transport's, between its send and that send's completion
 *   g_active                         main thread only (act_pp_create / destroy) */
#include "actors/pp_internal.h"
#include "actors/ring.h"
#include "actors/pp_rank.h"
#include "transport/bnd_mpi.h"
#include "model/gguf_synth.h"
#include "transport/bnd_nccl.h"
#include "transport/bnd_shm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PP_WIRE_MAGIC 0x6d656d72u /* "memr" */
#define PP_BEAT_NS 250000000ull   /* a beat to every rank each 250 ms */
#define PP_SILENT_NS 2500000000ull /* a rank silent for 2.5 s is dead or stuck: stop (every rank within 5 s) */
#define PP_READY_NS 600000000000ull /* the other ranks load the model: rank 0 waits up to 10 min for READY */

/* The header in front of a slot's payload (BND_MPI_HDR bytes at most). */
typedef struct pp_wire_step {
    uint32_t magic;
    int32_t k;             /* the slot; -1: a failed step, no payload */
    uint64_t id;
    int32_t kind, B, out_rows, argmax, status;
    act_pp_seams seams;
    uint64_t t[2 * ACT_PP_MAX_STAGES]; /* walk begin/end per stage so far (CLOCK_MONOTONIC of the walking rank) */
    char msg[256];         /* a failed step's error */
} pp_wire_step;
_Static_assert(sizeof(pp_wire_step) <= BND_MPI_HDR, "the step header must fit BND_MPI_HDR");

/* A step's result, last stage's rank -> rank 0, followed by its result bytes (pp_result_bytes). */
typedef struct pp_wire_result {
    uint32_t magic;
    int32_t status;
    uint64_t id;
    uint64_t t[2 * ACT_PP_MAX_STAGES];
    char msg[DEV_ERR_MSG];
} pp_wire_result;

/* Rank 0 -> all: a runtime to build. */
typedef struct pp_wire_create {
    uint32_t magic;
    int32_t N, fence[ACT_PP_MAX_STAGES + 1];
    act_pp_config cfg;
    int32_t n_seq, n_ctx, max_rows, kv_type, act_type, batch_invariant, stamps;
    int32_t matmul_x8;               /* rank 0's CPU matmul mode (dev_platform_matmul_x8): every rank computes alike */
    uint64_t model_bytes, model_sum; /* the file's size and the FNV-1a of its first PP_SUM_BYTES */
    int32_t synth;                   /* 1: every rank synthesizes `shape` (its strings in arch, pre), no file */
    mdl_gguf_synth shape;            /* its pointers are rank 0's: a receiver points them at arch and pre */
    char arch[64], pre[64];
    char path[4096];
} pp_wire_create;

typedef struct pp_wire_ready {
    int32_t status;
    char msg[DEV_ERR_MSG];
} pp_wire_ready;

/* At create, consumer -> producer of a cross-rank boundary: the consumer stage's device (tag BND_TAG_PICK). */
typedef struct pp_wire_side {
    uint32_t magic;
    int32_t b, gpu, nccl;  /* the boundary; its device is a GPU; the rank's build has NCCL */
    int32_t emu;           /* MEMRA_TEST_NCCL_EMU=1 on this rank (the test stand-in, transport/bnd_shm.h) */
    char where[160];       /* "host bus-id" of the device (dev_device_bus_id): one GPU names itself alike */
    char name[16];         /* the device's name on its rank ("cuda:1") */
} pp_wire_side;

/* At create, producer -> consumer: the transport picked (bnd_pick_remote) and, for BND_NCCL, the communicator's id;
 * status != 0: the producer could not go on (msg), the consumer fails its create too. */
typedef struct pp_wire_pick {
    uint32_t magic;
    int32_t b, kind, status;
    uint8_t id[BND_NCCL_ID_BYTES];
    char msg[DEV_ERR_MSG];
} pp_wire_pick;

#define PP_SUM_BYTES (4u << 20) /* the GGUF header, metadata and tensor table of a small model and more */

typedef struct pp_small {   /* a small send in flight and the buffer it reads */
    bnd_mpi_req *req;
    void *buf;
} pp_small;

typedef struct pp_out {     /* a step leaving this rank */
    pp_rec *rec;
    int k;
} pp_out;

typedef struct pp_rank pp_rank;
struct pp_rank {
    act_pp *rt;
    int self, P;
    int owner[ACT_PP_MAX_STAGES];
    int first, last;                 /* this rank's stages */
    bnd_boundary *in, *out;          /* MPI or NCCL halves: boundary first-1 (consumer), boundary last (producer) */
    int in_peer, out_peer;           /* their other ranks, -1 when none */
    int in_nccl, out_nccl;           /* 1: that half is BND_NCCL (the header travels alone) */
    void *hdr[ACT_PP_MAX_SLOTS];     /* out_nccl: slot k's header message [pp_wire_step | pos | seq], read by its
                                      * send until send_req[k] completes; the credit for k waits for that */
    size_t hdr_cap;
    act_actor *tp;                   /* the transport actor */
    /* [tp] */
    pp_out *outq;                    /* steps waiting for their ev_tx (in order) */
    int oq_head, oq_len, oq_cap;
    pp_rec **fifo;                   /* rank 0: steps sent, waiting for their result (in order) */
    int f_head, f_len, f_cap;
    bnd_mpi_req *send_req[ACT_PP_MAX_SLOTS]; /* the send of slot k in flight */
    int credit_in[ACT_PP_MAX_SLOTS];  /* the consumer's credit for k arrived (handed on once the send is done) */
    int credit_out[ACT_PP_MAX_SLOTS]; /* our consumer stage gave k back (sent once ev_rx[k] completed) */
    pp_small *smalls;
    int n_small, cap_small;
    void *rx;                        /* a received step [header | payload] */
    size_t rx_cap;
    uint64_t heard[256], last_beat;  /* per rank: when we last heard from it */
    int dead, idle, ended;           /* ended: DESTROY arrived (a rank > 0 stops polling) */
    dev_err err;                     /* the first transport error */
    /* [lock] */
    pthread_mutex_t lock;
    pthread_cond_t cv;
    int over, over_status;
    dev_err over_err;
};

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

static uint64_t now_ns(void) { return pp_now_ns(); }

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
    const uint64_t until = now_ns() + PP_READY_NS;
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
        if (now_ns() >= until)
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

/* ---- the transport actor ---- */

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

/* A step arrived from the previous rank: its shadow record goes to our first stage. */
static int step_in(pp_rank *rk, size_t n)
{
    act_pp *rt = rk->rt;
    if (bnd_mpi_recv(rk->in_peer, BND_TAG_SLOT, rk->rx, rk->rx_cap, &rk->err) != 0)
        return -1;
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
    if (h.k >= 0 && rk->in_nccl) { /* [header | pos | seq]: the frame itself comes by the stage's ncclRecv */
        memcpy(rec->pos, (const char *)rk->rx + sizeof h, rows);
        memcpy(rec->seq, (const char *)rk->rx + sizeof h + rows, rows);
    } else if (h.k >= 0) { /* the frame's [x | pos | seq]: the record's positions and sequences (pp_keys, the head) */
        const char *pl = (const char *)rk->rx + BND_MPI_HDR + (size_t)h.B * (size_t)rt->n_embd * sizeof(float);
        memcpy(rec->pos, pl, (size_t)h.B * sizeof(int32_t));
        memcpy(rec->seq, pl + (size_t)h.B * sizeof(int32_t), (size_t)h.B * sizeof(int32_t));
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
static int result_in(pp_rank *rk, int src, size_t n)
{
    act_pp *rt = rk->rt;
    char *buf = malloc(n ? n : 1);
    if (!buf)
        return dev_err_set(&rk->err, MEMRA_E_NOMEM, "rank 0: out of host memory"), -1;
    if (bnd_mpi_recv(src, BND_TAG_RESULT, buf, n, &rk->err) != 0) {
        free(buf);
        return -1;
    }
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

/* One round: steps out, credits both ways, messages in, beats. 1 when something moved. */
static int poll_once(pp_rank *rk)
{
    act_pp *rt = rk->rt;
    int moved = pump_out(rk), r, src;
    size_t n;
    const uint64_t now = now_ns();
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
    while (rk->in && (r = bnd_mpi_probe(rk->in_peer, BND_TAG_SLOT, &src, &n, &rk->err)) == 1) {
        rk->heard[src] = now;
        if (step_in(rk, n) != 0) {
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
    while (rk->self == 0 && (r = bnd_mpi_probe(-1, BND_TAG_RESULT, &src, &n, &rk->err)) == 1) {
        rk->heard[src] = now;
        if (result_in(rk, src, n) != 0) {
            die(rk);
            return 1;
        }
        moved = 1;
    }
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

static int tp_post_self(pp_rank *rk)
{
    dev_err e = {0};
    act_msg *m = act_msg_new(rk->tp, PP_MSG_POLL, &e);
    return m ? act_send(rk->tp, m, &e) : e.code; /* refused once stopped: the polling ends */
}

static int tp_handle(act_actor *a, act_msg *m, void *ctx)
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
        const uint64_t until = now_ns() + 2000000000ull; /* bounded: a dead peer never takes them */
        while (!rk->dead && rk->n_small > 0 && now_ns() < until) {
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
            tp_post_self(rk);
        }
        break;
    }
    default:
        break;
    }
    return 0;
}

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
    if (!(rk->tp = act_actor_create(name, tp_handle, rk, err)))
        return err->code;
    for (int s = 0; s < rt->N; s++)
        if (rk->owner[s] != rk->self) { /* what a local stage posts to a remote one goes over MPI */
            act_actor_destroy(rt->stage[s].actor);
            rt->stage[s].actor = rk->tp;
            rt->stage[s].remote = 1;
        }
    if (rk->self != 0)
        return 0; /* the serve loop sends READY, then starts the transport */
    const uint64_t until = now_ns() + PP_READY_NS;
    int ready[256] = {0}, r = 0, n_ready = 0;
    while (n_ready < rk->P - 1 && r == 0) { /* every rank's answer, from any rank: the first refusal is the error
                                             * (a rank waiting on a peer that refused never answers) */
        int src = -1, got;
        size_t n;
        pp_wire_ready rd = {0};
        if ((got = bnd_mpi_probe(-1, BND_TAG_READY, &src, &n, err)) == 0) {
            if (now_ns() >= until) {
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
    const uint64_t t = now_ns();
    for (int q = 0; q < rk->P && q < 256; q++)
        rk->heard[q] = t;
    rk->last_beat = t;
    r = act_actor_start(rk->tp, err);
    return r ? r : tp_post_self(rk);
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
    free(rk->rx);
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
    const uint64_t t = now_ns();
    for (int q = 0; q < rk->P && q < 256; q++)
        rk->heard[q] = t;
    rk->last_beat = t;
    if ((r = act_actor_start(rk->tp, err)) != 0 || (r = tp_post_self(rk)) != 0)
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
