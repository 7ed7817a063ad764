/* The doors: environment variables that open, shape and A/B the pipeline (docs/doors.md lists each with
 * meaning, default, valid values and when it is read). The configuration itself is act_pp_params (the API's
 * memra_runtime_params); the doors override it only where a runtime asks for them (apply_env). Two kinds
 * (docs/architecture.md "Who reads the doors"):
 *  - STRUCTURAL doors (STAGES, SPLITS/SPLIT, DEVICES, SHARD, SLOTS, STREAMS, NCCL) are read ONCE, when a runtime is
 *    created with apply_env, by the creating thread, and override the config field by field; a live runtime
 *    never changes them (act_pp_reload_doors refuses a changed one);
 *  - SEAMS (OVERLAP, BATCH_PP, ALLOW_UNSPLIT_BATCH, SPEC_PP, PRIME_PP, PRIME_PIPE, PDL, GRAPH, MARKERS,
 *    SAME_DEVICE_PIPE, KEYS, HEAD_RING) are per-runtime settings: act_pp_params.seams, overridden by the
 *    environment at create (apply_env) and by act_pp_reload_doors, or set by act_pp_set_seams (a gate A/Bs
 *    both arms in one process that way). Each step takes one snapshot of them from its runtime when it is
 *    submitted (one atomic load, no getenv); the snapshot travels inside the step's messages.
 *    Actor threads never call getenv.
 * Every invalid value is refused with a message naming the variable, the value and what is allowed (where
 * the seed's pp_cuts answers "door shut" on a bad list, we refuse: a silent fallback hides typos). */
#ifndef ACT_DOORS_H
#define ACT_DOORS_H

#include <stddef.h>
#include <stdint.h>

#include "device/err.h"

#define ACT_PP_MAX_STAGES 64
#define ACT_PP_MAX_SLOTS 16

/* Structural pipeline config. Zero-init + act_pp_config_default() = the door shut. */
typedef struct act_pp_config {
    int stages;                      /* N; 0 or 1 = door shut (no behaviour change) */
    int n_cuts;                      /* 0 = even split (or balance); else N-1 explicit cuts */
    int balance;                     /* MEMRA_PP_SPLITS=weights: cuts that even out the weight bytes per stage */
    int cuts[ACT_PP_MAX_STAGES];     /* strictly increasing, each in (0, n_layers) */
    int n_devices;                   /* 0 = every stage on the primary device; else N ordinals */
    int devices[ACT_PP_MAX_STAGES];  /* device ordinal of stage s on the active backend */
    int shard;                       /* 1 = each stage's weights on its device; 0 = all on the primary */
    int slots;                       /* K persistent slots per boundary, 1..ACT_PP_MAX_SLOTS (default 2) */
    int streams;                     /* 1 = per-stage streams/events; 0 = one-stream seam (single device) */
    int nccl;                        /* MEMRA_PP_NCCL: ACT_NCCL_AUTO (0, the default: a CUDA boundary between two
                                      * ranks' distinct GPUs uses NCCL when the build has it) or ACT_NCCL_OFF (1:
                                      * every boundary between ranks is host-staged MPI); docs/scale-out-nccl.md */
    int stages_env;                  /* 1 = stages came from MEMRA_PP_STAGES (messages name the source) */
    int cuts_env;                    /* 1 = cuts came from MEMRA_PP_SPLITS / MEMRA_PP_SPLIT */
} act_pp_config;

enum { ACT_NCCL_AUTO = 0, ACT_NCCL_OFF = 1 }; /* act_pp_config.nccl */

/* Per-step seams (1 = on; every seam is 0 or 1, so a runtime publishes them as one word: act_pp_seams_pack). */
typedef struct act_pp_seams {
    int overlap;             /* MEMRA_PP_OVERLAP: 1 = rotate the K slots, 0 = one slot per boundary */
    int batch_pp;            /* MEMRA_BATCH_PP: batched step takes its own split (default 1) */
    int allow_unsplit_batch; /* MEMRA_PP_ALLOW_UNSPLIT_BATCH: measurement override of the refusal (0) */
    int spec_pp;             /* MEMRA_SPEC_PP: verify forward takes its own split (1) */
    int prime_pp;            /* MEMRA_PRIME_PP: chunked prefill takes its own split (1) */
    int prime_pipe;          /* MEMRA_PRIME_PIPE: chunk c+1 in stage 0 while chunk c in stage 1 (1) */
    int pdl;                 /* MEMRA_PDL: programmatic dependent launch on sm_90 (1) */
    int graph;               /* MEMRA_PP_GRAPH: one CUDA graph per stage step (0) */
    int markers;             /* MEMRA_PP_MARKERS: device-side walk markers (liveness counters, busy %) (1) */
    int same_device_pipe;    /* MEMRA_PP_SAME_DEVICE_PIPE: allow steps in flight with 2+ stage streams on one
                              * CUDA device (0; the seed's refusal stays until the x100 soak passes) */
    int keys;                /* MEMRA_PP_KEYS: attention's grid spans a bound on the step's positions, not the
                              * whole cache (1; pp_keys) */
    int head_ring;           /* MEMRA_PP_HEAD_RING: the last stage's head writes a fixed logits buffer when one is
                              * free, so a graph holds it with the layers (1; actors/pp_head.c) */
} act_pp_seams;

#define ACT_PP_N_SEAMS 12 /* the fields of act_pp_seams */

/* The door-shut config: stages 0, even split, primary placement, shard 1, slots 2, streams 1. */
act_pp_config act_pp_config_default(void);
/* The documented defaults of every seam. */
act_pp_seams act_pp_seams_default(void);

/* The doors' one integer syntax: s[0..len) is decimal digits only (no sign, no spaces, no leading zero
 * except "0" itself) and its value is in [lo, hi]. Returns 0 with *out, or -1. Every integer door (here,
 * MEMRA_CPU_DEVICES in device/dev.c) parses with it, so one spelling means one thing everywhere. */
int act_door_parse_int(const char *s, size_t len, long lo, long hi, long *out);

/* Apply the structural doors set in the environment on top of *cfg (env overrides config). Checks what can
 * be checked without a model (syntax, SPLIT vs SPLITS, counts vs N, slots range), and the seams' current
 * values too, so a bad seam fails create naming its variable rather than the first step. Returns 0 or
 * MEMRA_E_INVAL with the message; *cfg is unchanged on failure. */
int act_doors_read_structural(act_pp_config *cfg, dev_err *err);

/* Check a config whatever its source (API fields or doors): stages 0..64, slots 1..16, shard and streams 0/1,
 * nccl ACT_NCCL_AUTO or ACT_NCCL_OFF,
 * cuts (N-1 of them, strictly increasing) and devices (N of them) when given, STREAMS=0 on one device.
 * Returns 0 or MEMRA_E_INVAL naming the field and what is allowed. */
int act_pp_config_check(const act_pp_config *cfg, dev_err *err);

/* Read every seam set in the environment on top of *seams (unset ones keep their value). Returns 0 or
 * MEMRA_E_INVAL naming the variable; *seams is unchanged on failure. Cost: 12 getenv; read at runtime create
 * and by act_pp_reload_doors, never per step. */
int act_doors_read_seams(act_pp_seams *seams, dev_err *err);

/* Check that every seam is 0 or 1. Returns 0 or MEMRA_E_INVAL naming the first field that is not. */
int act_pp_seams_check(const act_pp_seams *seams, dev_err *err);
/* The seams as one word, bit i = field i in declaration order (each must be 0 or 1: act_pp_seams_check), and
 * back. What a runtime publishes atomically, so a step takes all of them at once. */
uint32_t act_pp_seams_pack(const act_pp_seams *seams);
act_pp_seams act_pp_seams_unpack(uint32_t bits);

/* 1 when two configs build the same pipeline (stage count, cuts or balance, placement, shard, slots, streams, nccl;
 * for a shut door only that it is shut), else 0 with the first difference named in what[0..cap) ("MEMRA_PP_STAGES /
 * stages: 3, the runtime has 2"). */
int act_pp_config_same(const act_pp_config *a, const act_pp_config *b, char *what, size_t cap);

/* The stage fence (the seed's pp_cuts): returns N >= 2 and fills fence[0..N] = [0, c1, .., cN-1, n_layers]
 * when the door is open; returns 0 when it is shut (stages 0/1); MEMRA_E_INVAL when the config does not fit
 * a model of n_layers (N > n_layers, a cut outside (0, n_layers)) or n_devices ordinals >= n_devices_avail.
 * Stage s runs layers [fence[s], fence[s+1]). Default cut s = s * n_layers / N. With cfg->balance the cuts
 * minimize the largest stage's weight cost, from weight_cost[0..n_layers] (each layer, then the head,
 * which runs on the last stage; mdl_model_peek_weight_cost; ties go to the earliest cuts); weight_cost
 * may be NULL otherwise. */
int act_pp_cuts(const act_pp_config *cfg, int n_layers, int n_devices_avail, const double *weight_cost, int *fence,
                dev_err *err);

/* The stage that owns layer il under fence (N stages); layers >= fence[N] (trailing blocks) map to the last. */
int act_stage_of(const int *fence, int n_stages, int il);

/* N=2 view of the door (the seed's pp2_split): the cut when the door is open with exactly two stages,
 * else -1 (also with MEMRA_PP_SPLITS=weights, whose cut needs the model's weights: read act_pp_fence). */
int act_pp2_split(const act_pp_config *cfg, int n_layers);

/* Device ordinal of stage s (0 = the primary when no placement is set). */
int act_stage_device(const act_pp_config *cfg, int s);

/* 1 iff the door is open and two or more stage streams share one device (the seed's
 * pp_multi_stream_same_device): no placement, or a placement with a repeated device. */
int act_pp_multi_stream_same_device(const act_pp_config *cfg);
/* The same question per process: do two of the n stages that one process runs share a device ordinal? owner[s] is
 * the process (MPI rank) of stage s, each with its own platform; owner NULL: every stage in this one process
 * (act_pp_multi_stream_same_device). */
int act_pp_streams_share_device(const act_pp_config *cfg, int n, const int *owner);

/* 1 iff the door is open, the placement spans 2+ distinct devices and sharding is on (the seed's
 * pp_sharded_cross_device): some layers' weights live on a device other than the primary. */
int act_pp_sharded_cross_device(const act_pp_config *cfg);

/* The seed's refuse_unsplit_if_remote: MEMRA_E_REFUSED (message names `path`, why, and `alt`) iff
 * act_pp_sharded_cross_device(cfg); else 0. */
int act_refuse_unsplit_if_remote(const act_pp_config *cfg, const char *path, const char *alt, dev_err *err);

/* One notice on stderr per path when the door is open but `path` has no stage split (the seed's
 * warn_unwired_once). Returns 1 if it printed now, 0 if this path had already warned. Thread-safe. */
int act_warn_unwired_once(const char *path);
/* Test hook: how many times `path` has warned (0 or 1), and a reset. */
int act_warn_unwired_count(const char *path);
void act_warn_unwired_reset(void);

#endif
