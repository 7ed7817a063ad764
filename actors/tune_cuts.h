/* The measured-cost pipeline cut (memra-tune): contiguous layer ranges per stage that minimise the slowest
 * stage, where each stage runs on its own device and devices may differ in speed. Pure host code, no state. */
#ifndef ACT_TUNE_CUTS_H
#define ACT_TUNE_CUTS_H

#include "device/err.h"

/* What one step costs on each stage's device (any unit, all alike: seconds, ns). */
typedef struct act_tune_costs {
    int n_layer;          /* layers L >= 1 */
    int n_stages;         /* stages N, 1..L */
    const double *layer;  /* (L, N): layer[il * N + s] = layer il's time on stage s's device, each >= 0 */
    double embed;         /* the embedding's time on stage 0 (>= 0) */
    double head;          /* output norm + lm_head on the last stage (>= 0) */
} act_tune_costs;

/* Stage s's time with layers [l0, l1): the sum of its layers on its device, plus embed on stage 0 and the
 * head on the last stage. */
double act_tune_stage_cost(const act_tune_costs *c, int s, int l0, int l1);

/* The slowest stage of a placement given by fence (N + 1 entries: 0 = f0 < f1 < ... < fN = L). */
double act_tune_slowest(const act_tune_costs *c, const int *fence);

/* The exact optimum over contiguous placements: fence[0..N] (fence[0] = 0, fence[N] = L, each stage at least
 * one layer) minimising the slowest stage; *slowest (may be NULL) gets its time. A dynamic programme over
 * (stage, layers so far): best[s][i] = the smallest possible slowest stage when stages 0..s hold [0, i);
 * O(N L^2) time, O(N L) memory. Ties keep the earliest cut. Returns 0, or MEMRA_E_INVAL with err naming the
 * bad field (N > L, N < 1, a negative or non-finite cost, NULL arrays), MEMRA_E_NOMEM. */
int act_tune_cuts(const act_tune_costs *c, int *fence, double *slowest, dev_err *err);

#endif
