/* memra-tune: measures each layer on each stage's device, picks the cuts that minimise the slowest stage
 * (actors/tune_cuts.h), then times settings of the pipeline and the serving scheduler (cuts, overlap, graphs, slots,
 * micro-batches, rows per step) through memra_generate and reports the fastest against the defaults. */
#ifndef TUNE_H
#define TUNE_H

#include <stdint.h>
#include <stdio.h>

#include "device/err.h"
#include "memra/memra.h"

#define TUNE_MAX_POINTS 64

/* The workload and placement one run tunes for. */
struct mdl_gguf_synth;

typedef struct tune_job {
    const char *model;             /* GGUF path, or the synthetic shape's name (synth set) */
    const struct mdl_gguf_synth *synth; /* --synthetic: the shape generated on each device (no file), else NULL */
    const char *synth_type;        /* --type of the synthetic shape's weights ("bf16") */
    int n_stages;                  /* N */
    int devices[MEMRA_MAX_STAGES]; /* device ordinal of each stage */
    int seqs, prompt, gen;         /* S requests of P prompt tokens, G generated tokens each */
    double budget_s;               /* wall-clock cap of the whole run */
    const char *prefix;            /* PREFIX.csv, .json, .svg */
    int n_layer;                   /* the model's */
    char backend[8];               /* "cpu" / "cuda": the runtimes' (set by the first one created) */
} tune_job;

/* Measured per-step costs (seconds) of the workload's steps on each stage's device. */
typedef struct tune_costs {
    int n_layer, n_stages;
    int decode_rows, prompt_rows;  /* rows of a decode step (S / micro-batches) and of a prompt step */
    double decode_steps, prompt_steps; /* how many of each the workload runs (weights of the two) */
    double *layer;                 /* (L, N) seconds of the whole workload: layer il on stage s's device */
    double *layer_decode;          /* (L, N) seconds of one decode step */
    double embed, head;            /* seconds of the whole workload, on stage 0 / the last stage */
    double spread;                 /* largest (max - min) / median over the layers' repeats */
    int cuda;                      /* 1 when the devices measured are CUDA ones */
    int cost_model;                /* the weight cut's krn_weight_cost model (KRN_COST_*) */
} tune_costs;

/* One setting of the runtime the sweep times. */
typedef struct tune_setting {
    char cut_name[16];             /* "even", "weights", "measured" */
    int fence[MEMRA_MAX_STAGES + 1];
    int overlap, slots, micro_batches, max_rows;
    int graph;                     /* 1: one CUDA graph per stage step (memra_runtime_params.graph) */
} tune_setting;

typedef struct tune_point {
    tune_setting set;
    char label[160];               /* "cuts=measured(17) overlap=0 graph=0 slots=2 mb=2 rows=64" */
    int status;                    /* 0 measured, 1 skipped (budget), 2 failed, 3 same cuts as an earlier point,
                                    * 4 skipped (graphs on the CPU backend, which has none) */
    double median, lo, hi;         /* tokens/s over the kept repeats */
    int reps;                      /* repeats kept (the warm-up not counted) */
    double predicted_s;            /* the slowest stage from the measured costs, seconds of the workload */
    char why[160];                 /* a failure's message */
} tune_point;

/* One stage of a traced run (actors/trace read back by tools/trace/trace_read.h: memra-trace summary's figures). */
typedef struct tune_stage_busy {
    int first, end;                /* layers [first, end) */
    int walks;                     /* walks of the stage's stream in the traced run */
    double predicted_s;            /* its layers' measured costs on its device (act_tune_stage_cost) */
    double busy_pct, bubble_pct;   /* the union of its walks over the window, and 100 - busy */
} tune_stage_busy;

/* Per-stage busy figures of one setting: a memra_generate run of the workload with a trace recording. */
typedef struct tune_busy {
    int ok;                        /* 1 measured; 0 not, why says why */
    char trace[512];               /* the trace file (PREFIX-trace.json), for memra-trace summary / html */
    char why[160];
    double window_us;              /* the first walk's begin to the last walk's end */
    tune_stage_busy st[MEMRA_MAX_STAGES];
} tune_busy;

double tune_now_s(void);
/* Measure the costs for job (micro_batches M, step rows max_rows). Fills c (arrays malloc'd: tune_costs_free).
 * Stops repeating a layer once its median is stable or time_cap_s has passed. 0 or MEMRA_E_* + err. */
int tune_measure(const tune_job *job, int micro_batches, int max_rows, double time_cap_s, tune_costs *c, dev_err *err);
void tune_costs_free(tune_costs *c);

/* The label of a setting, e.g. "cuts=measured(17) overlap=0 graph=0 slots=2 mb=2 rows=64". */
void tune_label(const tune_setting *s, int n_stages, char *buf, size_t cap);
/* Write PREFIX.csv, PREFIX.json (the profile memra_runtime_create applies: MEMRA_PP_PROFILE) and PREFIX.svg.
 * best / dflt index points[]; ratio: best over the defaults, side by side; busy[2]: the best's and the defaults'
 * traced stages (busy[1].ok 0 when the best is the defaults). 0, or MEMRA_E_IO + err naming the file. */
int tune_write(const tune_job *job, const memra_model *m, const tune_costs *c, const tune_point *pts, int n_pts,
               int best, int dflt, double ratio, const tune_busy busy[2], dev_err *err);

#endif
