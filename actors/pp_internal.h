/* Internal to the pipeline runtime (actors/pp*.c): the runtime, stage, step-record and pending structs.
 *
 * Shared mutable state and who touches it:
 *   act_pp.inflight / inflight_cv      submitter (inc), readback actor (dec), drain (waits)   [inflight_lock]
 *   act_pp.unfinished                  submitter (inc), readback actor (dec before it completes the
 *                                      pending), the same-device refusal (reads)              [atomic]
 *   act_pp.active_mask, counters       stage streams' marker callbacks (device side)          [atomics]
 *   pp_stage.queue, credit, out_next   that stage's actor thread only
 *   pp_stage.staging ring              stage 0's actor thread only (each entry ordered by its event)
 *   pp_rec                             written by the submitter before posting STEP, then read-only;
 *                                      freed by the readback actor (the last reader; see pp_readback.c)
 *   act_pending.done/status            readback actor sets, waiters read              [pending lock]
 *   pending pool                       submitter takes, last releaser gives           [pool_lock]
 *   recent / n_recent                  readback actor only (stamped liveness accounting)
 *   act_pp.seams                       act_pp_set_seams / act_pp_reload_doors (any thread) store, the
 *                                      submitter loads once per step                          [atomic word]
 *   act_pp.hooks, pp_hooks (test hooks) NULL until a test installs one (the submitting thread, idle runtime);
 *                                      then its atomics: tests write, submitter, stage actors,
 *                                      stream workers and the readback actor read            [atomics]
 *   mark[].t0_ns                       the stage's stream worker only (begin writes, end reads)
 *   next_id, ref_* (reference arm)     the submitting thread only
 *   feed_src (fed steps)               the submitting thread only
 *   pp_stage.feed_seen                 stage 0's actor thread only (FEED messages from the last stage)
 *   pp_stage.head_free, head_next      the last stage's actor thread only: HEAD messages from the readback
 *                                      actor give a logits buffer back once ev_read is recorded behind its
 *                                      reads (a credit, as CREDIT is for a boundary slot)
 *   pp_stage.remote, act_pp.rank       fixed at create (stages in other ranks; pp_rank.c lists its own state)
 *   feed_tok (device)                  written by the last stage's stream (feed_tok[seq] after each ARGMAX
 *                                      step, by its argmax or a copy, then feed_ev[seq]), read by stage 0's
 *                                      stream (the embed) after waiting it */
#ifndef ACT_PP_INTERNAL_H
#define ACT_PP_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "actors/actor.h"
#include "actors/pp.h"
#include "actors/trace.h"
#include "mem/pool.h"
#include "model/llama.h"
#include "transport/boundary.h"

enum { PP_MSG_STEP = ACT_MSG_USER, PP_MSG_TOKEN, PP_MSG_CREDIT, PP_MSG_READBACK, PP_MSG_FEED, PP_MSG_HEAD,
       PP_MSG_RESULT,     /* rank 0's readback: a step whose last stage is in another rank, its result in host memory */
       PP_MSG_POLL,       /* the rank's transport to itself: one more round over MPI */
       PP_MSG_SEND_RESULT,/* the last stage's rank, readback -> transport: a step's result for rank 0 */
       PP_MSG_SHUTDOWN }; /* rank 0's transport: tell every rank the runtime is over */

#define PP_STAGING_RING 4 /* stage 0's pinned upload buffers, each reused after its event completes */
#define PP_GRAPH_SLOTS 64 /* MEMRA_PP_GRAPH: captured walks per stage, one per pp_graph_key */
#define PP_GRAPH_SEEN 32  /* MEMRA_PP_GRAPH: keys walked once and not captured, remembered per stage (a ring) */
#define PP_HEAD_RING 2      /* MEMRA_PP_HEAD_RING: the last stage's fixed logits buffers (pp_head.c) */
#define PP_HEAD_RING_ROWS 4 /* output rows a ring buffer holds; a step with more takes pool memory */

typedef struct pp_rec pp_rec;
typedef struct pp_stage pp_stage;

/* The test hooks (act_pp_set_rendezvous, act_pp_hold_start, act_pp_set_jitter, act_pp_inject_stage_failure*),
 * gathered behind act_pp.hooks: a runtime no test touches pays one pointer load per message for all of them. */
typedef struct pp_hooks {
    _Atomic uint64_t posted;       /* steps posted to stage 0 (the rendezvous hook's "more work upstream") */
    _Atomic int rendezvous_ms;     /* > 0: walk ends wait (bounded) for a neighbour's walk (pp_walk_end) */
    _Atomic int hold_start;        /* stage 0 holds its walks while set (act_pp_hold_start) */
    _Atomic int inject_fail_stage; /* -1 = none, s (early) or s + ACT_PP_MAX_STAGES (late) */
    _Atomic int jitter_us;         /* > 0: random delays up to this before actor messages and stream ops */
    _Atomic uint64_t jitter_gen;   /* bumped with every new seed: each thread reseeds when it changes */
    _Atomic uint64_t jitter_seed;  /* written before jitter_us/jitter_gen are published */
} pp_hooks;

/* Argument of a stage stream's walk markers (one per stage per step, inside the rec). */
typedef struct pp_mark {
    pp_stage *stage;
    pp_rec *rec;
    uint64_t t0_ns; /* set by walk-begin on the stream's worker, read by walk-end on the same worker */
    uint64_t t1_ns; /* tracing: set by walk-end on the stream's worker; the next stage's hop mark reads it
                     * (ordered by ev_tx: the worker passed walk-end before the send's record) */
    int kin;        /* tracing: the inbound slot this stage received the step from (stage actor writes) */
} pp_mark;

/* CLOCK_MONOTONIC in ns (the markers' busy time, the pendings' host times). */
uint64_t pp_now_ns(void);

struct pp_rec {
    uint64_t id;
    act_step_kind kind;
    int B;
    int out_rows;            /* rows with an output (logits or argmax): the last out_rows rows of the step */
    int argmax;              /* ACT_LOGITS_ARGMAX: the last stage reduces each row to its argmax on the device */
    int feed;                /* act_pp_step.feed: stage 0 embeds the rows' tokens from feed_tok on the device */
    int feeds;               /* a feeding runtime's ARGMAX step without act_pp_step.no_feed: the last stage leaves
                              * its output rows' tokens in feed_tok for later fed steps */
    uint64_t feed_after;     /* fed: 1 + the id of the latest of its rows' producers (the ARGMAX steps that
                              * left their sequences' tokens), whose FEED stage 0 waits for before feed_ev */
    int stamped;             /* liveness from device timestamps (CUDA) instead of host-function markers */
    act_pp_seams seams;      /* snapshot read by the submitter for this step */
    int32_t *tokens, *seq, *pos; /* (B,) each, owned */
    act_pending *pending;    /* the step's pending (one reference held by the pipeline) */
    void *logits_d;          /* the head's output on the last stage's device: ring buffer head_buf, or pool
                              * memory (head_buf -1) freed on the readback stream */
    int head_buf;            /* index in act_pp.head_ring, or -1 */
    _Atomic int failed;      /* a stage could not enqueue its part; later stages pass the token along */
    pp_mark mark[];          /* one per stage */
};

/* Host-side logits of one step (PendingLogits). Pooled with its event and pinned buffer. */
struct act_pending {
    act_pp *rt;
    pthread_mutex_t lock;
    pthread_cond_t cv;
    int refs;                /* caller + pipeline; the last release returns it to the pool [lock] */
    int done;                /* logits in host memory (or failed) [lock] */
    int status;              /* 0 or the step's error [lock] */
    dev_err err;             /* detail when status != 0 [lock] */
    dev_event *ev_done;      /* recorded on the last stage's stream after the head */
    float *host;             /* pinned, cap_rows * n_vocab floats */
    uint64_t *stamps;        /* pinned, 2 per stage: walk begin/end device timestamps (stamped steps) */
    act_pending_times times; /* host clock at the points the step passed; each written by the one thread
                              * that passes it, read by the caller after the wait (ordered by the mailbox
                              * hand-offs, then by lock) */
    int cap_rows, rows;
    int argmax;              /* the step asked ACT_LOGITS_ARGMAX: host holds rows int32, not floats */
    act_pending *next_free;  /* pool link [rt->pool_lock] */
};

/* One of the last stage's fixed logits buffers (MEMRA_PP_HEAD_RING): a step's head and argmax write it on the
 * last stage's stream (inside the walk's graph under MEMRA_PP_GRAPH: its address never changes), the readback
 * stream copies the result out of it, and the next step that takes it waits ev_read first. */
typedef struct pp_head_buf {
    void *d;                 /* pp_logits_bytes(rt, head_ring_rows, 1) on the last stage's device */
    dev_event *ev_read;      /* recorded on the readback stream behind its reads of d */
} pp_head_buf;

/* What a captured walk holds: its layers for (B, PDL, pp_keys), and on the last stage with a ring buffer the head
 * and the argmax of out_rows rows into that buffer (feed: the argmax also writes the rows' fed-token slots, found
 * by the frame's seq, so one graph serves every sequence). */
typedef struct pp_graph_key {
    int B, pdl, keys;
    int head_buf, out_rows, argmax, feed; /* head_buf -1: the layers only (0 below) */
} pp_graph_key;

typedef struct pp_item {
    pp_rec *rec;
    int kin;                 /* inbound slot (stage > 0), -1 when the producer passed a failed step */
} pp_item;

struct pp_stage {
    act_pp *rt;
    int s;
    dev_device *dev;
    dev_stream *stream;
    mdl_scratch *scratch;
    void *frame;             /* [x (B, n_embd) f32 | pos (B,) i32 | seq (B,) i32] on dev */
    bnd_boundary *in, *out;  /* boundary s-1 (NULL for stage 0), boundary s (NULL for the last) */
    act_actor *actor;        /* a stage in another rank (remote): the rank's transport actor, which carries what is
                              * posted to it (TOKEN forward, CREDIT back) over MPI */
    int remote;              /* 1: this stage runs in another process (pp_rank.c); fixed at create */
    /* actor-thread-only state */
    pp_item *queue;          /* FIFO ring of steps waiting for an outbound credit */
    int q_head, q_len, q_cap;
    int credit[ACT_PP_MAX_SLOTS]; /* 1 = this stage holds slot k of `out` */
    void *staging[PP_STAGING_RING]; /* stage 0: pinned upload buffers */
    dev_event *staging_ev[PP_STAGING_RING];
    int staging_next;
    struct { pp_graph_key key; dev_graph *g; } graph[PP_GRAPH_SLOTS]; /* MEMRA_PP_GRAPH: captured walks */
    int n_graph;
    pp_graph_key seen[PP_GRAPH_SEEN]; /* keys walked eagerly once: the second step of one is captured */
    int n_seen, seen_next;
    int head_free[PP_HEAD_RING]; /* last stage: 1 = logits buffer k is ours to take (HEAD gives it back) */
    int head_next;           /* last stage: where the search for a free buffer starts (round robin) */
    int graph_off;           /* 1 after capture proved unsupported or failed: eager from then on */
    uint64_t tr_idle_ns;     /* tracing: when the handler last returned (0: not traced); the mailbox wait's begin */
    uint64_t tr_waited;      /* tracing: 1 + the id of the step whose credit/feed wait is recorded already */
    uint64_t feed_seen;      /* stage 0: 1 + the id of the latest step whose FEED arrived (0: none yet); FEEDs
                              * arrive in step order, so every step up to it has its feed_ev records enqueued */
    /* device-side stats (marker callbacks on this stage's stream) */
    _Atomic uint64_t busy_ns, walks, begins;
    _Atomic uint64_t enqueue_ns, enqueues; /* host side: written by the actor thread, read by stats */
};

struct act_pp {
    dev_platform *plat;
    act_pp_config cfg;
    /* fed steps (act_pp_params.feed) */
    int feed_on;
    krn_weight embd_dev;     /* the embedding table on stage 0's device */
    int32_t *feed_tok;       /* (n_seq,) on stage 0's device: each sequence's latest ARGMAX token */
    dev_event **feed_ev;     /* (n_seq,) on the last stage's device: recorded after a sequence's feed_tok write */
    uint64_t *feed_src;      /* (n_seq,) submitter: 1 + id of the ARGMAX step that left the sequence's token */
    int N;
    int fence[ACT_PP_MAX_STAGES + 1];
    int n_seq, n_ctx, max_rows;
    int kv_type;                 /* the KV cache's element type (act_pp_params.kv_type) */
    int batch_invariant;         /* act_pp_params.batch_invariant after its door: every walking stream marked */
    int act_type;                /* the matmul inputs' element type (act_pp_params.act_type) */
    int x8;                      /* MEMRA_CUDA_X8, read once at create: every scratch (stages, unsplit arm) alike */
    act_pp_seams seam_base;  /* act_pp_params.seams: what act_pp_reload_doors puts the seam doors on top of */
    int apply_env;           /* act_pp_params.apply_env: the environment may change this runtime (reload) */
    _Atomic uint32_t seams;  /* act_pp_seams_pack of the runtime's seams: each step's snapshot (see the top) */
    int n_embd, n_vocab, n_layer;
    mdl_model *model;
    mdl_kv *kv;              /* split arm: each layer's cache on its stage's device */
    pp_stage *stage;         /* N stages */
    bnd_boundary **bnd;      /* N-1 boundaries */
    mem_pool *head_pool;     /* logits memory on the last stage's device (steps without a ring buffer) */
    pp_head_buf head_ring[PP_HEAD_RING];
    int head_ring_rows;      /* min(max_rows, PP_HEAD_RING_ROWS) */
    dev_stream *rb_stream;   /* dedicated readback stream (last stage's device) */
    act_actor *rb_actor;
    /* unsplit reference arm (and the STREAMS=0 seam): the primary device's stream, lazily built */
    dev_device *primary;
    dev_stream *ref_stream;
    mdl_kv *ref_kv;
    mdl_scratch *ref_scratch;
    void *ref_frame, *ref_slot, *ref_host;
    float *ref_logits_d;
    /* flow control */
    pthread_mutex_t inflight_lock;
    pthread_cond_t inflight_cv;
    int inflight;
    /* steps whose pending is not completed yet: inflight drops only after the readback actor is done with
     * the step, so a caller that waited its pending and submits at once could still see it counted */
    _Atomic int unfinished;
    uint64_t next_id;
    pthread_mutex_t pool_lock;
    act_pending *pool;
    /* liveness */
    _Atomic uint64_t active_mask;
    struct {
        _Atomic uint64_t split_steps, pipe_overlaps, unsplit_steps, batch_split_steps, prime_split_chunks,
            prime_pipe_overlaps, prime_batches, prime_batch_splits, spec_split_steps, steps_done, graph_captures,
            graph_replays, fed_steps, head_ring_steps;
    } ctr;
    _Atomic(pp_hooks *) hooks; /* NULL, or &hook_state once a test installed a hook (pp_hooks_of) */
    pp_hooks hook_state;
    uint64_t n_posted;       /* steps posted to stage 0 (submitting thread only): a hook installed late starts
                              * its posted count here */
    int stamp_mode;          /* 1 on CUDA: walk markers are GPU timestamps read at readback (no host callback) */
    struct pp_interval {     /* readback actor only: recent stamped walks per stage, for the overlap count */
        uint64_t b, e;
        int prime;
    } recent[ACT_PP_MAX_STAGES][8];
    int n_recent[ACT_PP_MAX_STAGES];
    unsigned recent_next;    /* ring cursor of recent[][] (readback actor only) */
    int64_t tr_off_ns;       /* tracing, stamped steps: device clock -> host clock offset (readback actor only) */
    int tr_off_set;
    int jitter_hook_set;     /* this runtime installed the platform's op hook (submitter/destroy only) */
    struct pp_rank *rank;    /* stages in several processes (pp_rank.c), NULL in a world of one; fixed at create */
};

/* The runtime's test hooks, or NULL (the common case: one load and a predicted branch per message). Acquire:
 * pairs with the release store of pp_hooks_install, so the state a hook set up is seen whole. */
static inline pp_hooks *pp_hooks_of(const act_pp *rt)
{
    return atomic_load_explicit(&((act_pp *)rt)->hooks, memory_order_acquire);
}

/* Bytes of a frame of B rows. */
static inline size_t pp_frame_bytes(const act_pp *rt, int B)
{
    return (size_t)B * ((size_t)rt->n_embd * sizeof(float) + 2 * sizeof(int32_t));
}

/* The head's device output for `rows` rows: the logits (rows x n_vocab f32), then with argmax room for
 * rows int32 (each row's argmax, ACT_LOGITS_ARGMAX). */
static inline size_t pp_logits_bytes(const act_pp *rt, int rows, int argmax)
{
    return (size_t)rows * ((size_t)rt->n_vocab * sizeof(float) + (argmax ? sizeof(int32_t) : 0));
}
/* What the host receives of step rec, and where it sits in the head's output d: the argmax int32 or the
 * logits. */
static inline size_t pp_result_bytes(const act_pp *rt, const pp_rec *rec)
{
    return (size_t)rec->out_rows * (rec->argmax ? sizeof(int32_t) : (size_t)rt->n_vocab * sizeof(float));
}
static inline const void *pp_result_src(const act_pp *rt, const pp_rec *rec, const void *d)
{
    return rec->argmax ? (const void *)((const float *)d + (size_t)rec->out_rows * (size_t)rt->n_vocab) : d;
}
/* ACT_LOGITS_ARGMAX: enqueue each row's argmax over the logits at d into its int32 slot (pp_result_src) on
 * s, after the head on the same stream, and into dup[b] too when dup is not NULL (a fed runtime's token slots);
 * 0 and nothing enqueued for the other modes. */
int pp_argmax_async(const act_pp *rt, const pp_rec *rec, dev_stream *s, void *d, int32_t *dup, dev_err *err);

/* The end of the run of rows from b0 whose sequences follow one another (seq[b] == seq[b - 1] + 1): their slots in
 * feed_tok, which is indexed by sequence, are then one contiguous run. */
static inline int pp_seq_run_end(const int32_t *seq, int b0, int n)
{
    int b1 = b0 + 1;
    while (b1 < n && seq[b1] == seq[b1 - 1] + 1)
        b1++;
    return b1;
}

/* Steps in flight through the stage actors: add delta (the submitter +1, the readback actor -1 when a step is
 * done; waiters in act_pp_drain are woken) and return the new count. [inflight_lock] */
int pp_inflight_add(act_pp *rt, int delta);

/* A stage's (or the reference arm's) scratch on d, with attention's workspace reserved for rt->n_ctx. */
mdl_scratch *pp_scratch_new(act_pp *rt, dev_device *d, dev_err *err);

/* act_pp_keys_bound of step rec's positions, or 0 with MEMRA_PP_KEYS=0 in the step's seams. */
int pp_keys(const act_pp *rt, const pp_rec *rec);

/* Fill a host frame [x | pos | seq] for rec's rows (embedding rows gathered on the host). */
int pp_fill_frame(act_pp *rt, const pp_rec *rec, void *host, dev_err *err);
/* Only the frame's [pos | seq] part (a fed step embeds x on the device); returns x's bytes, where pos starts. */
size_t pp_fill_meta(const act_pp *rt, const pp_rec *rec, void *host);

/* pp_stage.c */
int pp_stage_handle(act_actor *a, act_msg *m, void *ctx);
void pp_walk_begin(void *arg);
void pp_walk_end(void *arg);
/* The split counters of one completed per-stage walk of a step of `kind` (N >= 2). */
void pp_count_split(act_pp *rt, act_step_kind kind);
/* Liveness from a step's walk times in its pending's stamps (a stamped step's device timestamps, or under mpirun
 * the ranks' walk times): busy time, walks, overlaps, split counters. Stages in `marked` (bit s) counted their
 * walks with host markers already: only their overlaps with unmarked stages are counted here. Readback actor
 * only, after the step's completion. */
void pp_account_stamps(act_pp *rt, const pp_rec *rec, uint64_t marked);

/* pp_head.c: the last stage's head, its logits ring and the feed's tokens */
int pp_head_ring_init(act_pp *rt, dev_device *last, dev_err *err);
void pp_head_ring_fini(act_pp *rt);
/* Last stage's actor, before the walk: when the step's seams ask for the ring (MEMRA_PP_HEAD_RING), its output rows
 * fit a buffer and one is free, rec takes the least recently taken free one (head_buf, logits_d) and the stage's
 * stream waits for that buffer's last reads. Otherwise nothing changes (head_buf -1: pool memory). Returns 0 or the
 * wait's error (rec holds the buffer then: the readback actor gives it back). */
int pp_head_take(pp_stage *st, pp_rec *rec, dev_err *err);
/* The head (output norm, lm_head) of rec's last out_rows rows of x into rec->logits_d, then the argmax
 * (ACT_LOGITS_ARGMAX). Inside the walk when rec holds a ring buffer, so a graph can capture it; captured: the
 * argmax finds the rows' fed-token slots by seq_d, the frame's seq (device), not by an address fixed here. */
int pp_head_enqueue(pp_stage *st, pp_rec *rec, const float *x, const int32_t *seq_d, int captured, dev_err *err);
/* Last stage's actor, after the walk: a step without a ring buffer takes pool memory and enqueues its head;
 * then a feeding runtime's ARGMAX step leaves its tokens for the fed steps (feed_tok, feed_ev). */
int pp_head_finish(pp_stage *st, pp_rec *rec, const float *x, dev_err *err);
/* The last stage, an ARGMAX step of a feeding runtime: the feed's slots its argmax writes itself, or NULL. */
int32_t *pp_feed_dup(const pp_stage *st, const pp_rec *rec);
/* Readback actor: give rec's logits memory back: pool memory freed on `reads`, a ring buffer posted back to the
 * last stage (HEAD) once ev_read is recorded behind this actor's reads of it. reads: the stream on which this actor
 * enqueued its reads (NULL when it enqueued none: a failed step, every stream already synced). */
void pp_head_release(act_pp *rt, pp_rec *rec, dev_stream *reads);

/* pp_readback.c */
int pp_readback_handle(act_actor *a, act_msg *m, void *ctx);
/* A pending for rec from the pool (or new): room for rec's rows, its result kind (argmax), refs 2. */
act_pending *pp_pending_get(act_pp *rt, const pp_rec *rec, dev_err *err);
void pp_pending_finish(act_pending *p, int status, const dev_err *err);
void pp_pending_pool_free(act_pp *rt);
void pp_rec_free(pp_rec *rec);
/* Post a message of kind with payload (copied) to an actor; returns 0 or MEMRA_E_*. */
int pp_post(act_actor *to, int kind, const void *payload, size_t bytes);
/* Record the first error of a step on its pending and mark the rec failed. */
void pp_rec_fail(pp_rec *rec, int code, const char *what, const dev_err *err);
/* Jitter hook for soaks (stage actors and CPU stream ops): sleeps when h's jitter is on. */
void pp_jitter(pp_hooks *h);

/* pp_rank.c: stages in several processes (MPI). Each is a no-op returning 0 in a world of one. */
/* Before the cuts: the placement rules across ranks (stages default to the world's size; no
 * one-stream seam, no device feed). */
int pp_rank_adjust(act_pp_config *cfg, act_pp_params *p, dev_err *err);
/* Under mpirun -np P (P > 1), a configuration with the pipeline door shut opens it at P stages (one per rank)
 * before the doors are read, so a door that needs the door open (MEMRA_PP_DEVICES) holds without MEMRA_PP_STAGES.
 * Main thread, at create. */
void pp_rank_default_stages(act_pp_config *cfg);
/* After the cuts (rt->N, rt->fence): rank 0 sends the configuration to every rank; every rank learns which stages
 * are its own. */
int pp_rank_announce(act_pp *rt, const char *model_path, const act_pp_params *p, dev_err *err);
/* Boundary b: a local boundary, the local half of an MPI or NCCL one (picked with the other rank; blocking MPI on
 * the main thread, b in index order on every rank), or NULL when neither stage is in this rank. */
int pp_rank_boundary(act_pp *rt, int b, bnd_boundary **out, dev_err *err);
/* Before the actors start: the transport actor stands in for every remote stage; rank 0 waits for every rank's
 * READY (the error of one that refused) and starts the transport. */
int pp_rank_start(act_pp *rt, dev_err *err);
/* act_pp_destroy, after the drain: rank 0 tells every rank the runtime is over. */
void pp_rank_stop(act_pp *rt);
/* The transport actor (destroyed with the stage actors), or NULL. */
act_actor *pp_rank_actor(act_pp *rt);
/* After every actor is joined: free the rank's state. */
void pp_rank_free(act_pp *rt);
/* The last stage's rank (not 0), readback actor, before a step finishes: its result goes to rank 0. */
void pp_rank_result(act_pp *rt, pp_rec *rec, int status, const dev_err *err);
/* Rank 0's readback actor, a step back from another rank: the split counters and the walks' overlaps. */
void pp_rank_account(act_pp *rt, const pp_rec *rec);
/* The same-device refusal's question, asked per process: do two stage streams of one process share a device?
 * In a world of one act_pp_multi_stream_same_device of the config; under mpirun, two stages of one rank on one
 * device ordinal (stages of different ranks are different processes, on one GPU or not). */
int pp_rank_streams_share_device(const act_pp *rt);
/* The A/B seams run an unsplit body on the stage-owned KV: refused when stages live in other ranks. */
int pp_rank_refuse_sync(const act_pp *rt, dev_err *err);
/* This process's stages [*first, *last] (after pp_rank_announce): every stage in a world of one. Returns 1 under
 * mpirun (the stages outside the range run in other processes), else 0. */
int pp_rank_stages(const act_pp *rt, int *first, int *last);
/* Rank 0: 0 while the transport runs, else the error it stopped on (a silent or dead rank, a failed MPI call),
 * with which every later step fails. 0 in a world of one. Any thread. */
int pp_rank_check(act_pp *rt, dev_err *err);

#endif
