/* The measured-cost pipeline cut: see tune_cuts.h. No shared state. */
#include "actors/tune_cuts.h"

#include <math.h>
#include <stdlib.h>

#include "memra/status.h"

double act_tune_stage_cost(const act_tune_costs *c, int s, int l0, int l1)
{
    double t = s == 0 ? c->embed : 0.0;
    for (int il = l0; il < l1; il++)
        t += c->layer[(size_t)il * (size_t)c->n_stages + (size_t)s];
    return s == c->n_stages - 1 ? t + c->head : t;
}

double act_tune_slowest(const act_tune_costs *c, const int *fence)
{
    double worst = 0.0;
    for (int s = 0; s < c->n_stages; s++) {
        const double t = act_tune_stage_cost(c, s, fence[s], fence[s + 1]);
        worst = t > worst ? t : worst;
    }
    return worst;
}

static int check_costs(const act_tune_costs *c, const int *fence, dev_err *err)
{
    if (!c || !fence || !c->layer)
        return dev_err_set(err, MEMRA_E_INVAL, "act_tune_cuts: NULL costs, layer table or fence");
    if (c->n_layer < 1)
        return dev_err_set(err, MEMRA_E_INVAL, "act_tune_cuts: n_layer=%d, allowed >= 1", c->n_layer);
    if (c->n_stages < 1 || c->n_stages > c->n_layer)
        return dev_err_set(err, MEMRA_E_INVAL, "act_tune_cuts: stages=%d, allowed 1..%d (the model's layers: each "
                           "stage holds at least one)", c->n_stages, c->n_layer);
    if (!isfinite(c->embed) || c->embed < 0 || !isfinite(c->head) || c->head < 0)
        return dev_err_set(err, MEMRA_E_INVAL, "act_tune_cuts: embed=%g, head=%g: costs must be finite and >= 0",
                           c->embed, c->head);
    for (int il = 0; il < c->n_layer; il++)
        for (int s = 0; s < c->n_stages; s++) {
            const double v = c->layer[(size_t)il * (size_t)c->n_stages + (size_t)s];
            if (!isfinite(v) || v < 0)
                return dev_err_set(err, MEMRA_E_INVAL, "act_tune_cuts: layer %d on stage %d costs %g: costs must be "
                                   "finite and >= 0", il, s, v);
        }
    return 0;
}

int act_tune_cuts(const act_tune_costs *c, int *fence, double *slowest, dev_err *err)
{
    int rc = check_costs(c, fence, err);
    if (rc)
        return rc;
    const int L = c->n_layer, N = c->n_stages;
    const size_t cells = (size_t)N * (size_t)(L + 1);
    double *best = malloc(cells * sizeof *best), *pre = malloc(cells * sizeof *pre);
    int *from = malloc(cells * sizeof *from);
    if (!best || !pre || !from) {
        rc = dev_err_set(err, MEMRA_E_NOMEM, "act_tune_cuts: no memory for %d stages x %d layers", N, L);
        goto fail;
    }
#define AT(s, i) ((size_t)(s) * (size_t)(L + 1) + (size_t)(i))
    for (int s = 0; s < N; s++) { /* pre[s][i]: layers [0, i) on stage s's device */
        pre[AT(s, 0)] = 0.0;
        for (int i = 0; i < L; i++)
            pre[AT(s, i + 1)] = pre[AT(s, i)] + c->layer[(size_t)i * (size_t)N + (size_t)s];
    }
    for (int i = 1; i <= L; i++) /* stage 0 alone over [0, i) */
        best[AT(0, i)] = c->embed + pre[AT(0, i)] + (N == 1 ? c->head : 0.0), from[AT(0, i)] = 0;
    for (int s = 1; s < N; s++)
        for (int i = s + 1; i <= L; i++) { /* stages 0..s over [0, i): at least one layer each */
            const double tail = s == N - 1 ? c->head : 0.0;
            double b = INFINITY;
            int at = s;
            for (int j = s; j < i; j++) { /* stage s holds [j, i) */
                const double here = pre[AT(s, i)] - pre[AT(s, j)] + tail, prev = best[AT(s - 1, j)];
                const double m = here > prev ? here : prev;
                if (m < b)
                    b = m, at = j;
            }
            best[AT(s, i)] = b, from[AT(s, i)] = at;
        }
    fence[N] = L;
    for (int s = N - 1, i = L; s >= 1; s--)
        i = fence[s] = from[AT(s, i)];
    fence[0] = 0;
    if (slowest) /* recomputed from the fence: the prefix differences round differently from a plain sum */
        *slowest = act_tune_slowest(c, fence);
#undef AT
fail:
    free(best), free(pre), free(from);
    return rc;
}
