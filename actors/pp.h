/* PpNRt: the N-stage pipeline runtime (the seed's M2, built as an actor runtime: docs/architecture.md).
 *
 *   submitter --STEP--> stage 0 actor --TOKEN(k)--> stage 1 actor ... --> last stage --READBACK--> readback actor
 *                          ^                  |
 *                          +---CREDIT(k)------+      (one credit per boundary slot, docs/architecture.md "Credits")
 *                          ^                                                       |
 *                          +-----FEED (act_pp_params.feed: an ARGMAX step's tokens left)-+
 *
 * Each stage actor is a host thread that owns its device, its launch stream, its scratch and the KV cache of
 * its layers; it enqueues its work and returns to its mailbox at once, so several steps are in flight.
 * Stage 0 gathers embedding rows on the host (a fed step: on its device, from the tokens the last stage left
 * there) and uploads them with the step's positions and sequence ids on its stream BEFORE its first TX;
 * every hop carries [hidden | pos | seq] in one copy, so each stage owns its own copy of the positions (no
 * stage reads another stage's buffer — a documented departure from the seed's shared pos_d). The last stage
 * runs output_norm + lm_head into pool memory and records a completion event; the readback actor drains it
 * through a DEDICATED readback stream (deferred readback, the seed's PendingLogits), so steps t+1.. keep
 * enqueuing while the caller drains step t.
 *
 * Threads: act_pp_submit* / act_pp_run_unsplit may be called by ONE submitting thread at a time per runtime
 * (the scheduler serializes clients); act_pending_* and the seams' calls (act_pp_get_seams, act_pp_set_seams,
 * act_pp_reload_doors) from any thread; the test hooks from the submitting thread; create/destroy from one
 * thread. */
#ifndef ACT_PP_H
#define ACT_PP_H

#include <stdint.h>
#include "actors/doors.h"
#include "device/dev.h"

typedef struct act_pp act_pp;           /* PpNRt */
typedef act_pp act_pp2;                 /* Pp2Rt: the M1 name, kept for N=2 callers */
typedef struct act_pending act_pending; /* PendingLogits */
struct mdl_model;

/* What a step is, for the liveness counters and guards (the seed's arms). */
typedef enum act_step_kind {
    ACT_STEP_EAGER = 0,  /* one token of one or more sequences (plain decode) */
    ACT_STEP_BATCH,      /* batched decode: B sequences, one row each (decode_step_batch_ppn) */
    ACT_STEP_PRIME,      /* one chunk of a prompt of one sequence (chunked prefill) */
    ACT_STEP_PRIME_BATCH,/* chunks of several prompts primed together (cross-request batched prime) */
    ACT_STEP_SPEC,       /* verify forward over T draft tokens of one sequence (decode_step_t_core_ppn) */
} act_step_kind;

typedef enum act_logits_mode {
    ACT_LOGITS_ALL = 0,  /* logits of every row */
    ACT_LOGITS_LAST = 1, /* logits of the last row only (prefill chunks) */
    ACT_LOGITS_NONE = 2, /* no head at all (a prompt chunk that is not the last) */
    ACT_LOGITS_ARGMAX = 3, /* no logits to the host: each row's index of its largest logit (ties -> the lowest
                            * index; -1 when no logit is above -inf), computed by krn_argmax_async on the
                            * device that ran the head; B int32 read back instead of B x n_vocab floats
                            * (greedy decoding without the copy and the host's scan). Read with
                            * act_pending_wait_tokens. */
} act_logits_mode;

/* One step: B rows, each a token of sequence slot seq[b] at position pos[b]. Copied at submit. */
typedef struct act_pp_step {
    act_step_kind kind;
    int B;
    const int32_t *tokens; /* (B,); ignored (may be NULL) when feed */
    const int32_t *seq;    /* (B,) KV sequence slot of each row, 0..n_seq-1 */
    const int32_t *pos;    /* (B,) position of each row, 0..n_ctx-1 */
    act_logits_mode logits;
    int feed;              /* 1: a fed step (runtimes created with act_pp_params.feed): row b's token is the one
                            * the latest ARGMAX step with a row of sequence seq[b] picks, read on the device
                            * (stage 0 waits for it on its stream, then gathers the embedding row there), so it
                            * may be submitted before that step's pending is waited. EAGER or BATCH steps
                            * through the stage actors only. The row embeds whatever that step left: if it
                            * failed, the fed step's result means nothing (the producer's pending says why). */
    int out_last;          /* ALL / ARGMAX: 0 = every row has an output; 1..B = only the last out_last rows do (a
                            * scheduler's mixed step: prompt rows without output first, then the rows whose logits
                            * or tokens it needs). The result holds out_last rows, in row order. */
    int no_feed;           /* 1: an ARGMAX step of a feeding runtime leaves no token for fed steps (no per-row copy
                            * or event; its sequences cannot be fed from it). For a caller that never feeds. */
} act_pp_step;

typedef struct act_pp_params {
    act_pp_config config; /* structural config; env doors override it field by field when apply_env */
    int apply_env;        /* 1 (default): read the structural doors and the seams at create (env over these
                           * fields), and let act_pp_reload_doors read the seams again; 0: the environment
                           * changes nothing of the pipeline */
    int n_seq;            /* KV sequence slots (default 4) */
    int n_ctx;            /* positions per sequence (default min(1024, model's context)) */
    int max_rows;         /* most rows of one step (default 64) */
    int kv_type;          /* KV cache elements: KRN_F32, KRN_F16, KRN_BF16; -1 (default) = MEMRA_KV_TYPE (f32
                           * when unset), read whatever apply_env says: a storage choice, not a pipeline door */
    int act_type;         /* matmul inputs' elements (kernels/krn.h "activation types"): KRN_F32, KRN_F16,
                           * KRN_BF16; -1 (default) = MEMRA_ACT_TYPE (f32 when unset), read as kv_type is; every
                           * scratch of the runtime (stages, unsplit arm) uses it, so the gates compare alike */
    act_pp_seams seams;   /* the runtime's seams (act_pp_seams_default()); with apply_env the seam doors set at
                           * create (and at each act_pp_reload_doors) override them; act_pp_set_seams replaces them */
    int stamps;           /* walk liveness from device timestamps read at readback (1) or host-function markers
                           * on the stage streams (0); -1 (default) = timestamps on CUDA (a host callback holds a
                           * CUDA stream), markers on the CPU backend. The rendezvous hook always uses markers. */
    const struct mdl_gguf_synth *synth; /* non-NULL: synthesize this shape on the stage devices instead of
                                         * loading model_path (which may then be NULL); see mdl_model_synthesize */
    void (*progress)(float frac, void *ctx); /* model load progress, may be NULL */
    void *progress_ctx;
    int batch_invariant;  /* 1: every stream the runtime walks on gives each row the bits it gets in a step of one row
                           * (krn_stream_set_batch_invariant: on CUDA the GEMV at every B, never cuBLAS), so a
                           * request's tokens do not depend on what shares its steps; 0 (default): the fastest
                           * kernels. With apply_env the door MEMRA_BATCH_INVARIANT (0 or 1), when set, wins. */
    int feed;             /* ACT_FEED_ON: steps may be fed (act_pp_step.feed): a copy of the embedding table lives
                           * on stage 0's device (its bytes), and every ARGMAX step leaves each row's token there
                           * for its sequence (a 4-byte copy and an event record per row on the last stage's
                           * stream); refused (MEMRA_E_INVAL) on the one-stream seam, which runs steps on the
                           * host's clock. ACT_FEED_AUTO: on with the CUDA backend unless that seam is set or
                           * the pipelining of a second step is refused (stage streams sharing one CUDA device),
                           * where a fed step could not run ahead; off on the CPU backend, whose stage workers
                           * are the CPU the host's turn runs on. ACT_FEED_OFF (0, default): no copy, no fed
                           * steps. */
    int whole_model;      /* under mpirun, rank 0 only: 1 = load every layer and the head (what act_pp_run_unsplit,
                           * the gates' reference arm, walks); 0 (default) = load only the layers of this rank's
                           * stages, as every other rank does (the head on the last stage's rank, the embedding
                           * table on rank 0), so a model larger than one host is served. A world of one always
                           * loads the whole model. */
} act_pp_params;

enum { ACT_FEED_OFF = 0, ACT_FEED_ON = 1, ACT_FEED_AUTO = 2 };

act_pp_params act_pp_default_params(void);

/* Load the model at path with the placement the config asks for (each stage's layers upload through its
 * own device when sharding is on; all on the primary otherwise), grant peer + pool access between every
 * distinct pair of devices in use, start the stage and readback actors, and run the load barrier. With the
 * door shut the runtime has ONE stage running the whole model (N=1 is the door shut, not a split).
 * Returns NULL + err (bad config names the door/field and what is allowed). */
act_pp *act_pp_create(dev_platform *plat, const char *model_path, const act_pp_params *p, dev_err *err);
/* Stops the actors after every submitted step has drained; frees everything. Release every pending first
 * (act_pending_release): a pending outliving its runtime is undefined behaviour. */
void act_pp_destroy(act_pp *rt);

int act_pp_stages(const act_pp *rt);            /* N (1 when the door is shut) */
int act_pp_feeds(const act_pp *rt);             /* 1 when fed steps are allowed (act_pp_params.feed) */
int act_pp_batch_invariant(const act_pp *rt);   /* 1 when the runtime's streams are batch-invariant */
int act_pp_n_ctx(const act_pp *rt);             /* positions per sequence */
/* The bound on a step's positions pos[0..B-1] (each in 0..n_ctx-1) that its walk passes to attention
 * (mdl_forward_layers_async's keys, MEMRA_PP_KEYS): the smallest power of two, at least ACT_PP_KEYS_MIN, above
 * every position; 0 (no bound: the cache's n_ctx) once that reaches n_ctx. Powers of two, so that a stage
 * captures at most log2(n_ctx / ACT_PP_KEYS_MIN) + 1 graphs per (B, PDL) as its contexts grow. */
#define ACT_PP_KEYS_MIN 64
int act_pp_keys_bound(const int32_t *pos, int B, int n_ctx);
int act_pp_n_seq(const act_pp *rt);             /* KV sequence slots */
/* 1 when a second step in flight would be refused right now (CUDA, two or more stage streams on one
 * device, MEMRA_PP_SAME_DEVICE_PIPE off in the runtime's seams). */
int act_pp_pipelining_refused(const act_pp *rt);

/* The runtime's seams, as the next submitted step will take them. Any thread. */
void act_pp_get_seams(const act_pp *rt, act_pp_seams *out);
/* Replace the runtime's seams (every field 0 or 1); steps submitted after it returns take them, steps submitted
 * before keep their own snapshot. Any thread; publishing costs one atomic store. Returns 0 or MEMRA_E_INVAL
 * naming the field (the seams then unchanged). */
int act_pp_set_seams(act_pp *rt, const act_pp_seams *seams, dev_err *err);
/* Read the doors again on a live runtime created with apply_env: the seams become act_pp_params.seams with the
 * seam doors set now on top (as at create; act_pp_set_seams' values are replaced). The structural doors are
 * read too and must still describe this runtime: a changed one (stages, cuts, devices, shard, slots, streams)
 * is refused, naming it, and nothing changes. Any thread (getenv: the caller keeps setenv out of the way).
 * Returns 0, MEMRA_E_STATE (created with apply_env 0: the environment changes nothing), MEMRA_E_INVAL (a bad
 * value, named), MEMRA_E_REFUSED (a changed structural door). */
int act_pp_reload_doors(act_pp *rt, dev_err *err);
const int *act_pp_fence(const act_pp *rt);      /* N+1 entries */
const act_pp_config *act_pp_get_config(const act_pp *rt);
const struct mdl_model *act_pp_model(const act_pp *rt);
dev_device *act_pp_stage_device(const act_pp *rt, int s);

/* Enqueue one step through the stage actors and return at once with its pending logits (*out). Takes one
 * snapshot of the runtime's seams (MEMRA_PP_OVERLAP, ...: act_pp_get_seams), never the environment. A BATCH step with MEMRA_BATCH_PP=0, a PRIME step
 * with MEMRA_PRIME_PP=0 or a SPEC step with MEMRA_SPEC_PP=0 goes through the unsplit body instead (the A/B
 * seam), which is refused under a sharded cross-device placement for BATCH and SPEC (MEMRA_E_REFUSED naming
 * the path and the alternative) unless MEMRA_PP_ALLOW_UNSPLIT_BATCH=1. On CUDA with two stage streams on one
 * device, a second step in flight is refused (the seed's same-device race) unless MEMRA_PP_SAME_DEVICE_PIPE=1.
 * Returns 0, MEMRA_E_INVAL (bad rows or seam values), MEMRA_E_FULL (a position outside the context),
 * MEMRA_E_REFUSED, MEMRA_E_NOMEM; a synchronous seam also returns the error its walk hit. Errors of the
 * pipelined stages arrive through act_pending_wait. */
int act_pp_submit(act_pp *rt, const act_pp_step *step, act_pending **out, dev_err *err);

/* The unsplit reference arm: walk the whole trunk + head on the PRIMARY device's stream, over the SAME loaded
 * weights (remote ones read remotely), with its own KV cache; host-synchronous. logits_out receives the rows
 * the step's logits mode asks for (n_vocab floats each). This is what split steps are gated against. */
int act_pp_run_unsplit(act_pp *rt, const act_pp_step *step, float *logits_out, dev_err *err);

/* Host waits until the step's logits are in host memory. *logits (rows x n_vocab floats) stays valid until
 * act_pending_release. Returns 0 or the step's error; MEMRA_E_INVAL for an ACT_LOGITS_ARGMAX step (its
 * result is tokens: act_pending_wait_tokens), the pending then still usable. */
int act_pending_wait(act_pending *p, const float **logits, int *rows, dev_err *err);
/* The same for an ACT_LOGITS_ARGMAX step: *tokens (rows int32, one per row of the step) stays valid until
 * act_pending_release. MEMRA_E_INVAL for a step of another logits mode. */
int act_pending_wait_tokens(act_pending *p, const int32_t **tokens, int *rows, dev_err *err);
/* Where a finished step's host time went (CLOCK_MONOTONIC ns; 0 for a point the step did not pass, all 0
 * before it finished or for a synchronous seam): stage 0 took the STEP message; the last stage had
 * enqueued its walk, head and completion event; the readback actor took the step; its stream sync (device
 * work + D2H) returned; the pending was completed. For benchmarks (memra-bench pp-scaling). */
typedef struct act_pending_times {
    uint64_t stage0_ns, enqueued_ns, readback_ns, synced_ns, done_ns;
} act_pending_times;
void act_pending_get_times(act_pending *p, act_pending_times *out);
/* 1 when the logits are ready (wait would not block), 0 otherwise. */
int act_pending_ready(act_pending *p);
/* Drop the pending; safe without waiting (its buffers free stream-ordered once the readback ran). */
void act_pending_release(act_pending *p);

/* Liveness counters (all monotonic, per runtime). */
typedef struct act_pp_counters {
    uint64_t split_steps;          /* PP_SPLIT_STEPS: steps whose per-stage walk ran (N >= 2), device side */
    uint64_t pipe_overlaps;        /* PP_PIPE_OVERLAPS: a stage stream began a walk while another was mid-walk */
    uint64_t unsplit_steps;        /* steps run by the unsplit reference arm */
    uint64_t batch_split_steps;    /* BATCH steps through the per-stage walk */
    uint64_t prime_split_chunks;   /* PRIME_SPLIT_CHUNKS */
    uint64_t prime_pipe_overlaps;  /* PRIME_PIPE_OVERLAPS: a stage began a PRIME walk while another was mid-walk */
    uint64_t prime_batches;        /* STEP35_PRIME_BATCHES: batched prime steps completed */
    uint64_t prime_batch_splits;   /* STEP35_PRIME_BATCH_SPLITS: those that ran the per-stage walk */
    uint64_t spec_split_steps;     /* SPEC verify steps through the per-stage walk */
    uint64_t steps_done;           /* steps whose logits reached the host (readback actor) */
    uint64_t graph_captures;       /* MEMRA_PP_GRAPH: stage walks captured as a CUDA graph (one per stage, B) */
    uint64_t graph_replays;        /* MEMRA_PP_GRAPH: stage walks enqueued as one graph launch */
    uint64_t fed_steps;            /* steps whose tokens stage 0 embedded on the device (act_pp_step.feed) */
    uint64_t head_ring_steps;      /* MEMRA_PP_HEAD_RING: steps whose head wrote one of the fixed logits buffers */
} act_pp_counters;
void act_pp_get_counters(const act_pp *rt, act_pp_counters *out);

/* Per-stage device time spent walking (ns, device side) and the wall time since create, for busy %. */
typedef struct act_pp_stage_stats {
    uint64_t busy_ns;   /* time the stage stream spent between walk-begin and walk-end markers */
    uint64_t walks;     /* walks run */
    uint64_t enqueue_ns;/* host time the stage's actor spent enqueuing the walk's layers (graph launch or ops) */
    uint64_t enqueues;  /* walks whose layers were enqueued (enqueue_ns / enqueues = host us per step) */
} act_pp_stage_stats;
void act_pp_get_stage_stats(const act_pp *rt, int s, act_pp_stage_stats *out);
void act_pp_reset_stats(act_pp *rt);

/* Test hooks. The first one set installs their state behind one pointer of the runtime (NULL until then: a
 * runtime no test touches pays one load and a predicted branch per message for all of them); set them from the
 * submitting thread. */

/* Test hook: when on, a stage (s > 0) at the end of its walk waits up to `timeout_ms` for another stage to
 * be mid-walk, so the overlap counter does not depend on timing. */
void act_pp_set_rendezvous(act_pp *rt, int on, int timeout_ms);

/* Test hook: while on, stage 0 holds its next walk (bounded by the rendezvous timeout, 1 s when that is
 * off) — a gate posts every step of a pipelined arm before any walk starts, so a slow submitting thread
 * cannot serialize the pipeline it is testing. */
void act_pp_hold_start(act_pp *rt, int on);

/* Test hook for soaks: random delays of up to max_us injected before every stage actor message and every
 * CPU stream op (seeded). 0 turns it off. Set while no step is in flight. */
void act_pp_set_jitter(act_pp *rt, int max_us, uint64_t seed);

/* Test hook: the next step that reaches stage s fails there before it enqueues anything (as a device or
 * enqueue failure would); its pending returns MEMRA_E_DEVICE and the pipeline keeps serving later steps.
 * s = -1 disarms. */
void act_pp_inject_stage_failure(act_pp *rt, int s);
/* The same, once the step's inputs are in place at stage s: its inbound slot's credit returned, and on the last
 * stage its logits buffer taken (MEMRA_PP_HEAD_RING), so the failure must give both back. */
void act_pp_inject_stage_failure_late(act_pp *rt, int s);

/* Wait until every submitted step has completed (all stage streams and the readback stream idle). Returns 0
 * (step errors are reported by their pendings). */
int act_pp_drain(act_pp *rt, dev_err *err);
/* 0 while the runtime can run steps; under mpirun, once another rank is dead or silent (or an MPI call failed),
 * the error every later step fails with (+ err). Never blocks. Any thread. */
int act_pp_check(act_pp *rt, dev_err *err);

#endif
