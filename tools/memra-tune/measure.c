/* memra-tune: each layer's time on each stage's device (model/llama.h over a one-layer range on a stream of
 * that device), the embedding and the head, for the workload's decode and prompt row counts. No shared state. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "actors/pp.h"
#include "device/dev.h"
#include "model/llama.h"
#include "tune.h"

double tune_now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One device's rig: the model's weights there, a KV cache, a scratch, a stream and its buffers. */
typedef struct rig {
    dev_platform *plat;
    dev_device *d;
    mdl_model *m;
    mdl_kv *kv;
    mdl_scratch *sc;
    dev_stream *s;
    float *x_d, *logits_d, *x_h;
    int32_t *pos_d, *seq_d, *ps_h;
    int rows, n_ctx;
    int ord;                       /* the device's ordinal */
} rig;

static void rig_close(rig *r)
{
    if (r->s)
        dev_stream_destroy(r->s);
    if (r->d) {
        dev_free(r->d, r->x_d);
        dev_free(r->d, r->logits_d);
        dev_free(r->d, r->pos_d);
        dev_free(r->d, r->seq_d);
    }
    if (r->x_h)
        dev_host_free(r->plat, r->x_h);
    if (r->ps_h)
        dev_host_free(r->plat, r->ps_h);
    mdl_scratch_destroy(r->sc);
    mdl_kv_destroy(r->kv);
    mdl_model_free(r->m);
    memset(r, 0, sizeof *r);
}

static int rig_open(rig *r, dev_platform *plat, int ord, const tune_job *job, int rows, dev_err *err)
{
    memset(r, 0, sizeof *r);
    r->plat = plat;
    r->rows = rows;
    r->ord = ord;
    if (!(r->d = dev_platform_device(plat, ord)))
        return dev_err_set(err, MEMRA_E_INVAL, "--devices: device %d does not exist (the backend has 0..%d)", ord,
                           dev_platform_count(plat) - 1);
    dev_device **ld = malloc((size_t)job->n_layer * sizeof *ld);
    if (!ld)
        return dev_err_set(err, MEMRA_E_NOMEM, "memra-tune: out of host memory");
    for (int il = 0; il < job->n_layer; il++)
        ld[il] = r->d;
    const mdl_load_params lp = {.platform = plat, .layer_dev = ld, .head_dev = r->d};
    r->m = job->synth ? mdl_model_synthesize(job->synth, &lp, err) : mdl_model_load(job->model, &lp, err);
    free(ld);
    if (!r->m)
        goto fail;
    const mdl_hparams *hp = mdl_model_hparams(r->m);
    r->n_ctx = job->prompt + job->gen + 1;
    int kv_type;
    if (mdl_kv_type_from_env(&kv_type, err) ||
        !(r->kv = mdl_kv_create(r->m, NULL, job->seqs, r->n_ctx, kv_type, err)) ||
        !(r->sc = mdl_scratch_create(r->m, r->d, rows, err)) || mdl_scratch_reserve_attention(r->sc, r->n_ctx, err) ||
        !(r->s = dev_stream_create(r->d, "tune", err)) ||
        !(r->x_d = dev_malloc(r->d, sizeof(float) * (size_t)rows * (size_t)hp->n_embd, err)) ||
        !(r->logits_d = dev_malloc(r->d, sizeof(float) * (size_t)rows * (size_t)hp->n_vocab, err)) ||
        !(r->pos_d = dev_malloc(r->d, sizeof(int32_t) * (size_t)rows, err)) ||
        !(r->seq_d = dev_malloc(r->d, sizeof(int32_t) * (size_t)rows, err)) ||
        !(r->x_h = dev_host_alloc(plat, sizeof(float) * (size_t)rows * (size_t)hp->n_embd, err)) ||
        !(r->ps_h = dev_host_alloc(plat, sizeof(int32_t) * 2 * (size_t)rows, err)))
        goto fail;
    return 0;
fail:
    rig_close(r);
    return err->code ? err->code : MEMRA_E_DEVICE;
}

/* B rows: row b of sequence b % S at position pos0 + b / S (a decode step: pos0 = P, one row per sequence; a
 * prompt step: the sequences' first positions). Uploads them and the embedding of token b. */
static int rig_rows(rig *r, int B, int S, int pos0, int *keys, dev_err *err)
{
    const mdl_hparams *hp = mdl_model_hparams(r->m);
    int32_t tok[4096];
    for (int b = 0; b < B; b++) {
        tok[b] = (int32_t)((b * 7919) % hp->n_vocab);
        r->ps_h[b] = pos0 + b / S;
        r->ps_h[r->rows + b] = b % S;
        if (r->ps_h[b] >= r->n_ctx)
            r->ps_h[b] = r->n_ctx - 1;
    }
    int rc = mdl_embed_rows(r->m, tok, B, r->x_h, err);
    if (rc)
        return rc;
    if ((rc = dev_copy_h2d_async(r->s, r->x_d, r->x_h, sizeof(float) * (size_t)B * (size_t)hp->n_embd)) ||
        (rc = dev_copy_h2d_async(r->s, r->pos_d, r->ps_h, sizeof(int32_t) * (size_t)B)) ||
        (rc = dev_copy_h2d_async(r->s, r->seq_d, r->ps_h + r->rows, sizeof(int32_t) * (size_t)B)))
        return dev_err_set(err, rc, "memra-tune: upload of the measured rows failed");
    *keys = act_pp_keys_bound(r->ps_h, B, r->n_ctx);
    return dev_stream_sync(r->s, err);
}

/* What is timed: layer il (>= 0), the head (-1) or the embedding (-2: host gather + upload). */
static int run_once(rig *r, int what, int B, int S, int keys, dev_err *err)
{
    const mdl_hparams *hp = mdl_model_hparams(r->m);
    int rc;
    if (what >= 0)
        rc = mdl_forward_layers_async(r->m, r->kv, r->sc, r->s, r->x_d, r->pos_d, r->seq_d, B, keys, what, what + 1,
                                      err);
    else if (what == -1)
        rc = mdl_forward_head_async(r->m, r->sc, r->s, r->x_d, r->logits_d, B, err);
    else {
        int32_t tok[4096];
        for (int b = 0; b < B; b++)
            tok[b] = (int32_t)((b * 104729) % hp->n_vocab);
        if ((rc = mdl_embed_rows(r->m, tok, B, r->x_h, err)) == 0 &&
            (rc = dev_copy_h2d_async(r->s, r->x_d, r->x_h, sizeof(float) * (size_t)B * (size_t)hp->n_embd)))
            rc = dev_err_set(err, rc, "memra-tune: upload of the embedding rows failed");
    }
    return rc ? rc : dev_stream_sync(r->s, err);
}

/* Median seconds of `what` at B rows: a warm-up when asked, then at least 3 and at most 15 repeats, stopping when
 * one more repeat moves the median by under 2 %; past the deadline, one repeat. *spread = (max - min) / median of
 * the repeats. */
static int time_median(rig *r, int what, int B, int S, int keys, int warm, double deadline, double *med,
                       double *spread, dev_err *err)
{
    double t[15], sorted[15], prev = -1;
    const int least = tune_now_s() > deadline ? 1 : 3;
    int n = 0, rc = warm ? run_once(r, what, B, S, keys, err) : 0;
    while (rc == 0 && n < 15) {
        const double t0 = tune_now_s();
        if ((rc = run_once(r, what, B, S, keys, err)))
            break;
        t[n++] = tune_now_s() - t0;
        memcpy(sorted, t, (size_t)n * sizeof *t);
        qsort(sorted, (size_t)n, sizeof *sorted, cmp_double);
        *med = sorted[n / 2];
        *spread = *med > 0 ? (sorted[n - 1] - sorted[0]) / *med : 0;
        if (n >= least && ((prev > 0 && fabs(*med - prev) < 0.02 * prev) || tune_now_s() > deadline))
            break;
        prev = *med;
    }
    return rc;
}

void tune_costs_free(tune_costs *c)
{
    free(c->layer);
    free(c->layer_decode);
    c->layer = c->layer_decode = NULL;
}

int tune_measure(const tune_job *job, int micro_batches, int max_rows, double time_cap_s, tune_costs *c,
                 dev_err *err)
{
    const int N = job->n_stages, L = job->n_layer, S = job->seqs;
    memset(c, 0, sizeof *c);
    c->n_layer = L, c->n_stages = N;
    c->decode_rows = (S + micro_batches - 1) / micro_batches;
    const long prompt_rows = (long)S * job->prompt;
    c->prompt_rows = prompt_rows < max_rows ? (int)prompt_rows : max_rows;
    c->decode_steps = (double)job->gen * micro_batches; /* each micro-batch steps once per generated token */
    c->prompt_steps = ceil((double)prompt_rows / c->prompt_rows);
    const int rows = c->prompt_rows > c->decode_rows ? c->prompt_rows : c->decode_rows;
    c->layer = calloc((size_t)L * (size_t)N, sizeof *c->layer);
    c->layer_decode = calloc((size_t)L * (size_t)N, sizeof *c->layer_decode);
    dev_platform *plat = NULL;
    rig r = {0};
    int rc = 0;
    if (!c->layer || !c->layer_decode) {
        rc = dev_err_set(err, MEMRA_E_NOMEM, "memra-tune: out of host memory");
        goto fail;
    }
    if (rows > 4096) {
        rc = dev_err_set(err, MEMRA_E_INVAL, "memra-tune: %d rows in one measured step, allowed up to 4096", rows);
        goto fail;
    }
    if (!(plat = dev_platform_open_env(err))) {
        rc = err->code;
        goto fail;
    }
    c->cuda = dev_platform_kind(plat) == DEV_KIND_CUDA;
    c->cost_model = krn_cost_model(plat); /* MEMRA_CPU_X8 as the platform reads it */
    const double deadline = tune_now_s() + time_cap_s;
    for (int s = 0; s < N; s++) {
        int done = 0; /* a device already measured for an earlier stage: copy its column */
        for (int k = 0; k < s && !done; k++)
            if (job->devices[k] == job->devices[s]) {
                for (int il = 0; il < L; il++) {
                    c->layer[il * N + s] = c->layer[il * N + k];
                    c->layer_decode[il * N + s] = c->layer_decode[il * N + k];
                }
                done = 1;
            }
        if (done && s != 0 && s != N - 1)
            continue;
        const double t_open = tune_now_s();
        if (r.m && r.ord != job->devices[s])
            rig_close(&r);
        if (!r.m) { /* the weights stay for the next stage on the same device (the head of the last) */
            if ((rc = rig_open(&r, plat, job->devices[s], job, rows, err)))
                goto fail;
            fprintf(stderr, "memra-tune: device %d of stage %d: weights %s in %.1f s\n", job->devices[s], s,
                    job->synth ? "generated" : "loaded", tune_now_s() - t_open);
        }
        const double dl = tune_now_s() + (deadline - tune_now_s()) / (N - s); /* this device's share */
        int kd, kp;
        double td, tp, sp;
        for (int il = 0; il < L && !done; il++) {
            if ((rc = rig_rows(&r, c->decode_rows, S, job->prompt, &kd, err)) ||
                (rc = time_median(&r, il, c->decode_rows, S, kd, il == 0, dl, &td, &sp, err)))
                goto fail;
            c->spread = sp > c->spread ? sp : c->spread;
            if ((rc = rig_rows(&r, c->prompt_rows, S, 0, &kp, err)) ||
                (rc = time_median(&r, il, c->prompt_rows, S, kp, il == 0, dl, &tp, &sp, err)))
                goto fail;
            c->spread = sp > c->spread ? sp : c->spread;
            c->layer_decode[il * N + s] = td;
            c->layer[il * N + s] = td * c->decode_steps + tp * c->prompt_steps;
        }
        if (s == 0) { /* the embedding: every step's rows */
            if ((rc = time_median(&r, -2, c->decode_rows, S, 0, 1, dl, &td, &sp, err)) ||
                (rc = time_median(&r, -2, c->prompt_rows, S, 0, 1, dl, &tp, &sp, err)))
                goto fail;
            c->embed = td * c->decode_steps + tp * c->prompt_steps;
        }
        if (s == N - 1) { /* the head: a decode step's rows (a prompt step outputs at most a row per request) */
            if ((rc = rig_rows(&r, c->decode_rows, S, job->prompt, &kd, err)) ||
                (rc = time_median(&r, -1, c->decode_rows, S, 0, 1, dl, &td, &sp, err)))
                goto fail;
            c->head = td * (c->decode_steps + c->prompt_steps);
        }
        fprintf(stderr, "memra-tune: device %d of stage %d measured in %.1f s\n", job->devices[s], s,
                tune_now_s() - t_open);
    }
    rig_close(&r);
    dev_platform_close(plat);
    return 0;
fail:
    rig_close(&r);
    if (plat)
        dev_platform_close(plat);
    tune_costs_free(c);
    return rc ? rc : MEMRA_E_DEVICE;
}
