/* Test helper: the oracle files written by tools/ref/ref_logits.py (tests/data/ref_logits_*.txt), the
 * comparison of our logits against one of their steps, and the teacher-forced run of a whole file on a model rig
 * (any platform). */
#ifndef TESTS_MODEL_REF_H
#define TESTS_MODEL_REF_H

#include <stdint.h>
#include "support/model_rig.h"

#define MODEL_REF_PROMPTS 4
#define MODEL_REF_STEPS 8
#define MODEL_REF_TOP 20
#define MODEL_REF_PROBES 96
#define MODEL_REF_TOKENS 64

typedef struct model_ref_step {
    int fed, argmax;              /* the token fed at this step; the oracle's argmax after it */
    double lse, mean, std;        /* full-vector logsumexp, mean and std of the oracle's logits */
    int n_top, n_probe;
    int top_id[MODEL_REF_TOP], probe_id[MODEL_REF_PROBES];
    double top[MODEL_REF_TOP], probe[MODEL_REF_PROBES];
} model_ref_step;

typedef struct model_ref_prompt {
    char text[256];               /* "" when the file gave ids only */
    int n;                        /* prompt tokens */
    int32_t ids[MODEL_REF_TOKENS];
    int n_steps;
    model_ref_step step[MODEL_REF_STEPS];
} model_ref_prompt;

typedef struct model_ref {
    int n_prompt;
    model_ref_prompt prompt[MODEL_REF_PROMPTS];
} model_ref;

/* Parse $MEMRA_SRC_DIR/<rel> (or ./<rel>) into r. Returns 0, or -1 after printing why. */
int model_ref_load(const char *rel, model_ref *r);

/* Compare logits (n_vocab) with step rs: the max abs difference over the oracle's top ids, its probe ids
 * and the full-vector lse/mean/std goes to *diff; returns our argmax (lowest index on ties). */
int model_ref_compare(const model_ref_step *rs, const float *logits, int n_vocab, double *diff);

/* What model_ref_teacher_force found. */
typedef struct model_ref_outcome {
    int steps;         /* steps compared */
    int near_ties;     /* top-1 flips where the oracle's own top-2 gap is below the tolerance (tolerated) */
    double worst;      /* the largest max |ours - oracle| of any step */
    char fail[256];    /* the first step beyond the tolerance or with a top-1 flip outside a near tie; "" if none */
} model_ref_outcome;

/* Every prompt pi of ref as sequence pi of r: its ids in one chunk, then the oracle's fed tokens one by one (teacher
 * forcing), each step's last row compared with model_ref_compare against tol. r needs n_seq >= ref->n_prompt and
 * max_rows >= the longest prompt. Returns 0 with *o filled (a failed comparison is reported in o->fail, and the run
 * goes on), or MEMRA_E_* + err when a step cannot run (o then covers the steps before it). */
int model_ref_teacher_force(model_rig *r, const model_ref *ref, double tol, model_ref_outcome *o, dev_err *err);

/* The model at path on platform p (device 0, a KV for every prompt of ref), through model_ref_teacher_force, then
 * released. Returns 0 with *o filled, or MEMRA_E_* + err when the model cannot open or a step cannot run. */
int model_ref_run(dev_platform *p, const char *path, const model_ref *ref, double tol, model_ref_outcome *o,
                  dev_err *err);

/* $MEMRA_MODEL when it names a readable file; otherwise NULL after printing "<who>: skipped: ..." (the caller
 * returns 77). */
const char *model_ref_model_or_skip(const char *who);

#endif
