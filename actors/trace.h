/* Runtime tracing: trace points recorded into per-thread lock-free buffers, exported as Chrome Trace Event JSON
 * (docs/trace.md). One trace records at a time in a process (act_trace_start .. act_trace_stop).
 *
 * Cost: off, every trace point is one relaxed load and a predicted-not-taken branch (act_trace_on), nothing
 * is allocated. On, a thread's first record mallocs its buffer (one chunk of ACT_TRACE_BUF_RECS records) and
 * registers it once; every record after that is a few stores into that buffer and one release store of its count
 * (single writer, no lock); every ACT_TRACE_BUF_RECS-th record mallocs the next chunk, up to ACT_TRACE_BUF_CHUNKS.
 * A full buffer drops the record and counts the drop.
 *
 * Shared state (trace.c): the on flag and the generation (atomics; act_trace_start/stop write them under the
 * control lock), the registry of buffers (appended under the registry lock, read by act_trace_stop), each
 * buffer's records (its thread writes, act_trace_stop reads up to the count it acquires).
 *
 * Tracks (a Chrome "tid" each): one per stage actor, per stage stream, per boundary (hops), the readback actor,
 * the scheduler and the runtime's counters. Times are CLOCK_MONOTONIC ns (pp_now_ns), device stamps mapped onto
 * that clock by the recorder. */
#ifndef ACT_TRACE_H
#define ACT_TRACE_H

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include "device/err.h"

#define ACT_TRACE_BUF_RECS 65536 /* records per chunk of a thread's buffer (48 bytes each: 3 MiB) */
#define ACT_TRACE_BUF_CHUNKS 16  /* chunks a thread's buffer grows to: 1M records, 48 MiB */

/* Track ids (the exported tid): s is a stage (0..63) or a boundary (0..62). */
#define ACT_TRACE_STAGE(s) (1 + (s))       /* stage s's actor thread */
#define ACT_TRACE_STREAM(s) (101 + (s))    /* stage s's stream (device side) */
#define ACT_TRACE_HOP(s) (201 + (s))       /* boundary s: stage s -> s+1 */
#define ACT_TRACE_READBACK 300             /* the readback actor (its readback stream's span) */
#define ACT_TRACE_SCHED 301                /* the serving scheduler */
#define ACT_TRACE_RUNTIME 302              /* runtime-wide counters */

/* What a record is; the exported name is act_trace_name(name). */
typedef enum act_trace_name {
    ACT_TR_WALK,         /* span, stream: a stage's walk of one step (a = rows, b = step kind, c = head rows) */
    ACT_TR_ENQUEUE,      /* span, stage actor: the host enqueue of a stage's part (a = rows, b = in slot, c = out) */
    ACT_TR_MAILBOX_WAIT, /* span, stage actor: the actor's mailbox was empty (between two messages) */
    ACT_TR_HOP,          /* async span, boundary: walk end on stage s to the frame copied into stage s+1 (c = slot) */
    ACT_TR_READBACK,     /* span, readback: wait ev_done, copy to the host, sync (a = rows) */
    ACT_TR_CREDIT_WAIT,  /* instant, stage actor: a step waits for the credit of out slot c */
    ACT_TR_FEED_WAIT,    /* instant, stage 0: a fed step waits for its producer's FEED */
    ACT_TR_REQ_QUEUED,   /* instant, scheduler: request a queued */
    ACT_TR_REQ_FIRST,    /* instant, scheduler: request a took its first token */
    ACT_TR_REQ_DONE,     /* instant, scheduler: request a ended with status b */
    ACT_TR_SUBMIT,       /* instant, scheduler: step submitted (a = rows, b = micro-batch group or -1, c = kind) */
    ACT_TR_INFLIGHT,     /* counter, runtime: steps in flight (a) */
    ACT_TR_ROWS,         /* counter, runtime: rows of the step stage 0 takes (a) */
    ACT_TR_CREDITS,      /* counter, runtime: out-slot credits stage b holds (a) */
    ACT_TR_STEP_REQS,    /* instant, scheduler: the step carries the rows of requests a, b, c (-1: none); a step
                          * of more requests has several, exported as one "requests" event listing them all */
    ACT_TR_N_NAMES
} act_trace_name;

typedef enum { ACT_TR_SPAN, ACT_TR_ASYNC, ACT_TR_INSTANT, ACT_TR_COUNTER } act_trace_type;

/* One record (48 bytes). step: the step's id (its flow id), UINT64_MAX for none. */
typedef struct act_trace_rec {
    uint64_t t0, t1;  /* ns; t1 == t0 for instants and counters */
    uint64_t step;
    int32_t a, b, c;  /* per name, see act_trace_name */
    uint16_t track;
    uint8_t type, name;
    uint32_t pad;
} act_trace_rec;

/* What a trace dropped and kept (act_trace_stop fills it). */
typedef struct act_trace_stats {
    uint64_t records; /* records written to the file */
    uint64_t dropped; /* records lost to full buffers */
    int threads;      /* buffers that recorded */
} act_trace_stats;

extern _Atomic int act_trace_flag; /* 1 while a trace records; read through act_trace_on */

/* 1 while a trace records. One relaxed load; the branch on it is predicted not taken. */
static inline int act_trace_on(void)
{
    return __builtin_expect(atomic_load_explicit(&act_trace_flag, memory_order_relaxed), 0);
}

/* Append r to this thread's buffer (allocated and registered on the thread's first record of a trace).
 * Call only when act_trace_on(); a record racing act_trace_stop may be kept or not. */
void act_trace_put(const act_trace_rec *r);

/* A counter of one stage (b = the stage: ACT_TR_CREDITS), on the runtime's track. */
static inline void act_trace_counter_of(act_trace_name n, uint64_t t, int value, int stage)
{
    if (act_trace_on()) {
        act_trace_rec r = {t, t, UINT64_MAX, value, stage, 0, ACT_TRACE_RUNTIME, ACT_TR_COUNTER, (uint8_t)n, 0};
        act_trace_put(&r);
    }
}

/* CLOCK_MONOTONIC in ns (the clock of every record). */
uint64_t act_trace_now_ns(void);

/* Trace points: each a no-op unless act_trace_on() (the caller guards arguments that cost, e.g. a clock read). */
static inline void act_trace_span(act_trace_name n, int track, uint64_t t0, uint64_t t1, uint64_t step, int a,
                                  int b, int c)
{
    if (act_trace_on()) {
        act_trace_rec r = {t0, t1 > t0 ? t1 : t0, step, a, b, c, (uint16_t)track, ACT_TR_SPAN, (uint8_t)n, 0};
        act_trace_put(&r);
    }
}
static inline void act_trace_async(act_trace_name n, int track, uint64_t t0, uint64_t t1, uint64_t step, int a,
                                   int b, int c)
{
    if (act_trace_on()) {
        act_trace_rec r = {t0, t1 > t0 ? t1 : t0, step, a, b, c, (uint16_t)track, ACT_TR_ASYNC, (uint8_t)n, 0};
        act_trace_put(&r);
    }
}
static inline void act_trace_instant(act_trace_name n, int track, uint64_t t, uint64_t step, int a, int b, int c)
{
    if (act_trace_on()) {
        act_trace_rec r = {t, t, step, a, b, c, (uint16_t)track, ACT_TR_INSTANT, (uint8_t)n, 0};
        act_trace_put(&r);
    }
}
static inline void act_trace_counter(act_trace_name n, int track, uint64_t t, int value)
{
    if (act_trace_on()) {
        act_trace_rec r = {t, t, UINT64_MAX, value, 0, 0, (uint16_t)track, ACT_TR_COUNTER, (uint8_t)n, 0};
        act_trace_put(&r);
    }
}


/* A request's point on the scheduler's track, now (n: ACT_TR_REQ_QUEUED, _FIRST, _DONE with status). */
static inline void act_trace_req(act_trace_name n, int req, int status)
{
    if (act_trace_on())
        act_trace_instant(n, ACT_TRACE_SCHED, act_trace_now_ns(), UINT64_MAX, req, status, 0);
}

extern _Thread_local int act_trace_group_tl; /* the submitting thread's micro-batch group, -1: none */
extern _Thread_local uint64_t act_trace_step_tl; /* the id of the step this thread submitted last while tracing
                                                  * (act_pp_submit's submit record), UINT64_MAX: none since the
                                                  * scheduler's act_trace_set_group */

/* The scheduler: the step this thread submits next carries micro-batch group g (-1: none) in its submit record,
 * and act_trace_submitted gives its id afterwards. */
static inline void act_trace_set_group(int g)
{
    if (act_trace_on()) {
        act_trace_group_tl = g;
        act_trace_step_tl = UINT64_MAX;
    }
}

/* The id of the step this thread submitted since act_trace_set_group, UINT64_MAX when none was recorded (tracing
 * started in between, or the submit failed). Call only when act_trace_on(). */
static inline uint64_t act_trace_submitted(void)
{
    const uint64_t id = act_trace_step_tl;
    act_trace_step_tl = UINT64_MAX;
    return id;
}

/* Start recording for owner (any non-NULL tag: the runtime that asked); the file is written to path by
 * act_trace_stop. n_stages names the tracks. Returns 0, MEMRA_E_INVAL (NULL or empty path, NULL owner, path not
 * writable: checked by opening it now), or MEMRA_E_STATE (a trace already records: one per process). */
int act_trace_start(const void *owner, const char *path, int n_stages, dev_err *err);
/* Stop the trace owner started and write its file (Chrome Trace Event JSON). Returns 0, MEMRA_E_STATE (owner
 * records no trace), or MEMRA_E_IO (the write failed; the trace is stopped anyway). stats may be NULL. */
int act_trace_stop(const void *owner, act_trace_stats *stats, dev_err *err);
/* Events from outside the runtime that act_trace_stop writes into the file after the runtime's (memra-bench
 * --kernel-trace: the CUPTI kernel records, on the host clock). fn writes them to f, each event preceded by ",\n",
 * "ts" in us from t_start_ns (CLOCK_MONOTONIC, act_trace_now_ns), and returns 0 or a MEMRA_E_* status. */
typedef int (*act_trace_extra_fn)(void *ctx, FILE *f, uint64_t t_start_ns);
/* Have the trace that records now call fn(ctx, ...) once when it is written (act_trace_stop clears it; the caller
 * keeps ctx alive until then). Returns 0, or MEMRA_E_STATE when no trace records or one source is set already. */
int act_trace_set_extra(act_trace_extra_fn fn, void *ctx);

/* 1 when owner's trace records. */
int act_trace_owned_by(const void *owner);

/* Thread buffers allocated so far in this process (none until a trace records: tracing off allocates nothing). */
int act_trace_n_buffers(void);

/* Exported name of n ("walk", "hop", ...). */
const char *act_trace_name_str(int n);

#endif
