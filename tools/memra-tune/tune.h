/* memra-tune: measures each layer on each stage's device, picks the cuts that minimise the slowest stage
 * (actors/tune_cuts.h), then times settings of the pipeline and the serving scheduler (cuts, overlap, slots,
 * micro-batches, rows per step) through memra_generate and reports the fastest against the defaults. */
#ifndef TUNE_H
#define TUNE_H

#include <stdint.h>
#include <stdio.h>

#include "device/err.h"
#include "memra/memra.h"

#define TUNE_MAX_POINTS 64

/* The workload and placement one run tunes for. */
typedef struct tune_job {
    const char *model;             /* GGUF path */
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
    int cuda;                      /* 1 when the devices measured are CUDA ones (the weight cut's cost model) */
} tune_costs;

/* One setting of the runtime the sweep times. */
typedef struct tune_setting {
    char cut_name[16];             /* "even", "weights", "measured" */
    int fence[MEMRA_MAX_STAGES + 1];
    int overlap, slots, micro_batches, max_rows;
} tune_setting;

typedef struct tune_point {
    tune_setting set;
    char label[160];               /* "cuts=measured(17) overlap=0 slots=2 mb=2 rows=64" */
    int status;                    /* 0 measured, 1 skipped (budget), 2 failed, 3 same cuts as an earlier point */
    double median, lo, hi;         /* tokens/s over the kept repeats */
    int reps;                      /* repeats kept (the warm-up not counted) */
    double predicted_s;            /* the slowest stage from the measured costs, seconds of the workload */
    char why[160];                 /* a failure's message */
} tune_point;

double tune_now_s(void);
/* Measure the costs for job (micro_batches M, step rows max_rows). Fills c (arrays malloc'd: tune_costs_free).
 * Stops repeating a layer once its median is stable or time_cap_s has passed. 0 or MEMRA_E_* + err. */
int tune_measure(const tune_job *job, int micro_batches, int max_rows, double time_cap_s, tune_costs *c, dev_err *err);
void tune_costs_free(tune_costs *c);

/* The label of a setting, e.g. "cuts=measured(17) overlap=0 slots=2 mb=2 rows=64". */
void tune_label(const tune_setting *s, int n_stages, char *buf, size_t cap);
/* Write PREFIX.csv, PREFIX.json (the profile memra_runtime_create applies: MEMRA_PP_PROFILE) and PREFIX.svg.
 * best / dflt index points[]; ratio: best over the defaults, side by side. 0, or MEMRA_E_IO + err naming the file. */
int tune_write(const tune_job *job, const memra_model *m, const tune_costs *c, const tune_point *pts, int n_pts,
               int best, int dflt, double ratio, dev_err *err);

#endif
