/* The gates (memra-gate): each arm runs the SPLIT arm (stage actors) against the UNSPLIT reference arm (the
 * whole trunk on the primary stream) IN ONE PROCESS over ONE loaded model, requires bit-identical logits at
 * every step, and requires the arm's liveness counter to have advanced — bit-identity of two unsplit walks
 * is vacuous, so a gate whose counter did not move FAILS. Sharded cross-device split arms must also read
 * zero remote bytes (the seed's batch gates passed while reading remote weights 28x slower).
 * The harness is a library of its own (memra_gate, CMakeLists.txt), linked by memra-gate and the tests: the
 * runtime library does not hold it. It drives the runtime through its seams (act_pp_get_seams /
 * act_pp_set_seams) and test hooks, never the environment. */
#ifndef MEMRA_GATE_H
#define MEMRA_GATE_H

#include <stdint.h>
#include <stdio.h>
#include "actors/pp.h"

typedef enum act_gate_arm {
    ACT_GATE_EAGER = 0,   /* one token at a time, each waited: split vs unsplit */
    ACT_GATE_REPLAY,      /* a known token sequence submitted back to back (pipelined) vs serial unsplit */
    ACT_GATE_BATCH,       /* batched decode of several sequences */
    ACT_GATE_PRIME,       /* chunked prefill, chunks pipelined (MEMRA_PRIME_PIPE) */
    ACT_GATE_PRIME_BATCH, /* several prompts primed in one batch per chunk */
    ACT_GATE_SPEC,        /* verify forward over T draft tokens */
    ACT_GATE_SOAK,        /* REPLAY repeated `runs` times with random delays in actors and streams */
} act_gate_arm;

typedef struct act_gate_params {
    act_gate_arm arm;
    int steps;        /* decode steps compared (default 8) */
    int seqs;         /* sequences for batch / prime-batch (default 3) */
    int prompt;       /* prompt tokens for prime arms (default 24) */
    int chunk;        /* prime chunk rows (default 8) */
    int draft;        /* spec draft tokens (default 4) */
    int runs;         /* soak runs (default 20) */
    int jitter_us;    /* soak: max random delay per actor message / stream op (default 200) */
    int rendezvous_ms;/* pipelined arms: force the overlap via the rendezvous hook (default 1000: only a safety
                       * bound, every hold ends as soon as the neighbour begins its walk; 0 = off) */
    uint64_t seed;    /* token ids are drawn from it */
    FILE *log;        /* what was compared, step by step (NULL = quiet) */
} act_gate_params;

typedef struct act_gate_report {
    int pass;
    int compared;              /* logit rows compared bit for bit */
    int mismatches;            /* rows whose bits differed */
    float max_abs_diff;        /* over all compared rows */
    uint64_t counter_before, counter_after; /* the arm's liveness counter */
    const char *counter_name;
    uint64_t pipe_overlaps;    /* PP_PIPE_OVERLAPS advanced by */
    uint64_t split_remote_bytes; /* remote bytes read by kernels during the split arm */
    int runs_ok;               /* soak: runs bit-identical */
    char msg[512];             /* why it failed, or a one-line summary */
} act_gate_report;

act_gate_params act_gate_default_params(act_gate_arm arm);
/* Parse "eager", "replay", "batch", "prime", "prime-batch", "spec", "soak"; -1 when unknown. */
int act_gate_arm_parse(const char *name);
const char *act_gate_arm_name(act_gate_arm arm);

/* Run one gate on rt. Returns 0 when it ran (pass or fail is in rep->pass), MEMRA_E_* when it could not run
 * (error in err). The runtime must be idle; the gate uses sequence slots 0..seqs-1 and leaves them dirty. */
int act_gate_run(act_pp *rt, const act_gate_params *p, act_gate_report *rep, dev_err *err);

#endif
