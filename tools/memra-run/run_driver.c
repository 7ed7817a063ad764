/* memra-run's single-stream model driver (see run_driver.h). State: the driver's buffers, touched only by
 * the caller thread and by ops on d->s (every eval ends with a stream sync, so host buffers are reusable). */
#include <stdlib.h>
#include <string.h>

#include "run_driver.h"

struct run_driver {
    dev_platform *p;
    const mdl_model *m;
    dev_device *dev;          /* stage 0's device: the stream, x, the KV of every layer live here */
    dev_stream *s;
    mdl_kv *kv;
    mdl_scratch *sc;
    int n_ctx, chunk, n_embd, n_vocab;
    float *x_d, *logits_d;    /* device: (chunk, n_embd), (1, n_vocab) */
    int32_t *pos_d, *seq_d;   /* device: (chunk,) */
    float *x_h;               /* pinned host: (chunk, n_embd) */
    int32_t *pos_h, *seq_h;   /* pinned host: (chunk,) */
};

int run_place_layers(dev_platform *p, const run_placement *pl, int n_layer, dev_device **layer_dev, dev_err *err)
{
    if (pl->n_stages < 1 || pl->n_stages > n_layer)
        return dev_err_set(err, MEMRA_E_INVAL, "--stages %d: allowed 1..%d (the model's layers)", pl->n_stages,
                           n_layer);
    if (pl->n_devices != 0 && pl->n_devices != pl->n_stages)
        return dev_err_set(err, MEMRA_E_INVAL, "--devices lists %d devices for %d stages: give one per stage",
                           pl->n_devices, pl->n_stages);
    for (int s = 0; s < pl->n_stages; s++) {
        const int ord = pl->n_devices ? pl->devices[s] : 0;
        dev_device *d = dev_platform_device(p, ord);
        if (!d)
            return dev_err_set(err, MEMRA_E_INVAL, "--devices: device %d does not exist (have 0..%d)", ord,
                               dev_platform_count(p) - 1);
        for (int il = s * n_layer / pl->n_stages; il < (s + 1) * n_layer / pl->n_stages; il++)
            layer_dev[il] = d;
    }
    return 0;
}

run_driver *run_driver_create(dev_platform *p, const mdl_model *m, int n_ctx, int chunk, dev_err *err)
{
    const mdl_hparams *hp = mdl_model_hparams(m);
    dev_device **kv_dev = NULL;
    run_driver *d = calloc(1, sizeof *d);
    if (!d) {
        dev_err_set(err, MEMRA_E_NOMEM, "run_driver_create: no memory");
        return NULL;
    }
    d->p = p;
    d->m = m;
    d->n_ctx = n_ctx;
    d->chunk = chunk;
    d->n_embd = hp->n_embd;
    d->n_vocab = hp->n_vocab;
    d->dev = mdl_model_layer_device(m, 0);
    /* the serial walk reads every stage's weights from stage 0's device */
    for (int il = 0; il < hp->n_layer; il++)
        if (dev_peer_grant(d->dev, mdl_model_layer_device(m, il), err))
            goto fail;
    if (dev_peer_grant(d->dev, mdl_model_head_device(m), err))
        goto fail;
    if (!(kv_dev = malloc(sizeof *kv_dev * hp->n_layer))) {
        dev_err_set(err, MEMRA_E_NOMEM, "run_driver_create: no memory");
        goto fail;
    }
    for (int il = 0; il < hp->n_layer; il++)
        kv_dev[il] = d->dev; /* the serial walk keeps every layer's cache next to its stream */
    if (!(d->s = dev_stream_create(d->dev, "run", err)) || !(d->kv = mdl_kv_create(m, kv_dev, 1, n_ctx, err)) ||
        !(d->sc = mdl_scratch_create(m, d->dev, chunk, err)) ||
        !(d->x_d = dev_malloc(d->dev, sizeof(float) * chunk * d->n_embd, err)) ||
        !(d->logits_d = dev_malloc(d->dev, sizeof(float) * d->n_vocab, err)) ||
        !(d->pos_d = dev_malloc(d->dev, sizeof(int32_t) * chunk, err)) ||
        !(d->seq_d = dev_malloc(d->dev, sizeof(int32_t) * chunk, err)) ||
        !(d->x_h = dev_host_alloc(p, sizeof(float) * chunk * d->n_embd, err)) ||
        !(d->pos_h = dev_host_alloc(p, sizeof(int32_t) * chunk, err)) ||
        !(d->seq_h = dev_host_alloc(p, sizeof(int32_t) * chunk, err)))
        goto fail;
    free(kv_dev);
    return d;
fail:
    free(kv_dev);
    run_driver_destroy(d);
    return NULL;
}

void run_driver_destroy(run_driver *d)
{
    if (!d)
        return;
    if (d->s)
        dev_stream_destroy(d->s); /* waits for every op */
    mdl_scratch_destroy(d->sc);
    mdl_kv_destroy(d->kv);
    if (d->x_d)
        dev_free(d->dev, d->x_d);
    if (d->logits_d)
        dev_free(d->dev, d->logits_d);
    if (d->pos_d)
        dev_free(d->dev, d->pos_d);
    if (d->seq_d)
        dev_free(d->dev, d->seq_d);
    if (d->x_h)
        dev_host_free(d->p, d->x_h);
    if (d->pos_h)
        dev_host_free(d->p, d->pos_h);
    if (d->seq_h)
        dev_host_free(d->p, d->seq_h);
    free(d);
}

int run_driver_eval(run_driver *d, const int32_t *tokens, int n, int pos0, float *logits, dev_err *err)
{
    if (n <= 0 || pos0 < 0 || pos0 + n > d->n_ctx)
        return dev_err_set(err, MEMRA_E_FULL, "context full: %d tokens at position %d do not fit in n_ctx %d", n,
                           pos0, d->n_ctx);
    const int L = mdl_model_hparams(d->m)->n_layer;
    for (int i = 0; i < n; i += d->chunk) {
        const int B = n - i < d->chunk ? n - i : d->chunk, last = i + B == n;
        int rc = mdl_embed_rows(d->m, tokens + i, B, d->x_h, err);
        if (rc)
            return rc;
        for (int b = 0; b < B; b++) {
            d->pos_h[b] = pos0 + i + b;
            d->seq_h[b] = 0;
        }
        if ((rc = dev_copy_h2d_async(d->s, d->x_d, d->x_h, sizeof(float) * B * d->n_embd)) ||
            (rc = dev_copy_h2d_async(d->s, d->pos_d, d->pos_h, sizeof(int32_t) * B)) ||
            (rc = dev_copy_h2d_async(d->s, d->seq_d, d->seq_h, sizeof(int32_t) * B)))
            return dev_err_set(err, rc, "run_driver_eval: upload failed");
        if ((rc = mdl_forward_layers_async(d->m, d->kv, d->sc, d->s, d->x_d, d->pos_d, d->seq_d, B, 0, L, err)))
            return rc;
        if (last) { /* only the last row's logits are needed */
            if ((rc = mdl_forward_head_async(d->m, d->sc, d->s, d->x_d + (size_t)(B - 1) * d->n_embd, d->logits_d,
                                             1, err)))
                return rc;
            if ((rc = dev_copy_d2h_async(d->s, logits, d->logits_d, sizeof(float) * d->n_vocab)))
                return dev_err_set(err, rc, "run_driver_eval: logits readback failed");
        }
        /* the host buffers above are reused by the next chunk: wait for the stream to pass them */
        if ((rc = dev_stream_sync(d->s, err)))
            return rc;
    }
    return 0;
}
