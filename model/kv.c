/* The KV cache: per layer, K and V (n_seq, n_ctx, kv_dim) of f32, f16 or bf16 on the layer's device. Its
 * rows are written only by kv_store ops on the stream that walks the layer (the owning stage), so no host
 * state changes after create. */
#include <stdlib.h>
#include <string.h>

#include "model/llama_impl.h"

/* An element-type door: f32 (default when unset), f16 or bf16. */
static int elem_type_door(const char *name, int *type, dev_err *err)
{
    const char *v = getenv(name);
    *type = KRN_F32;
    if (!v || !strcmp(v, "f32"))
        return 0;
    if (!strcmp(v, "f16") || !strcmp(v, "bf16")) {
        *type = v[0] == 'f' ? KRN_F16 : KRN_BF16;
        return 0;
    }
    return dev_err_set(err, MEMRA_E_INVAL, "%s=%s: allowed f32 (default), f16, bf16", name, v);
}

int mdl_kv_type_from_env(int *type, dev_err *err) { return elem_type_door("MEMRA_KV_TYPE", type, err); }

int mdl_act_type_from_env(int *type, dev_err *err) { return elem_type_door("MEMRA_ACT_TYPE", type, err); }

/* The cache's bytes on each device against what the device has free, checked before anything is allocated, so a
 * cache that does not fit is refused naming the bytes wanted and free rather than by an allocation half-way.
 * The CPU backend's emulated devices share the host's memory: their sum is checked against it. A device that
 * does not report its memory is not checked (its allocation still fails with the bytes). */
static int kv_fits(const mdl_model *m, dev_device *const *layer_dev, size_t layer_bytes, int n_seq, int n_ctx,
                   int type, dev_err *err)
{
    const int n_layer = m->hp.n_layer;
    for (int il = 0; il < n_layer; il++) {
        dev_device *d = layer_dev[il];
        if (!d)
            continue;
        const int host = dev_platform_kind(dev_device_platform(d)) == DEV_KIND_CPU;
        int first = 1, layers = 0; /* count d's layers once, at d's first layer (host: every CPU device's) */
        for (int j = 0; j < n_layer; j++) {
            dev_device *e = layer_dev[j];
            const int same = e == d || (host && e && dev_platform_kind(dev_device_platform(e)) == DEV_KIND_CPU);
            if (same && j < il)
                first = 0;
            layers += same;
        }
        if (!first)
            continue;
        size_t free_b = 0, total_b = 0;
        dev_err probe = {0};
        if (dev_device_mem_info(d, &free_b, &total_b, &probe) != 0)
            continue;
        const double want = 2.0 * (double)layer_bytes * (double)layers;
        if (want > (double)free_b)
            return dev_err_set(err, MEMRA_E_NOMEM, "KV cache: %.0f bytes wanted on %s (%d layers x K and V x %d seq x "
                               "%d ctx x %d x %zu B), %zu free of %zu: lower n_seq or n_ctx, or use a 16-bit kv_type",
                               want, host ? "the host (every CPU device)" : dev_device_name(d), layers, n_seq, n_ctx,
                               m->hp.n_head_kv * m->hp.head_dim, krn_kv_elem_bytes(type), free_b, total_b);
    }
    return 0;
}

mdl_kv *mdl_kv_create(const mdl_model *m, dev_device *const *layer_dev, int n_seq, int n_ctx, int type,
                      dev_err *err)
{
    if (!m || n_seq <= 0 || n_ctx <= 0 || !krn_kv_type_ok(type)) {
        dev_err_set(err, MEMRA_E_INVAL, "mdl_kv_create: n_seq %d and n_ctx %d must be > 0, type %d one of f32 (%d), "
                    "f16 (%d), bf16 (%d)", n_seq, n_ctx, type, KRN_F32, KRN_F16, KRN_BF16);
        return NULL;
    }
    const mdl_hparams *hp = &m->hp;
    mdl_kv *kv = calloc(1, sizeof *kv);
    if (!kv || !(kv->layer = calloc((size_t)hp->n_layer, sizeof *kv->layer))) {
        free(kv);
        dev_err_set(err, MEMRA_E_NOMEM, "mdl_kv_create: no host memory");
        return NULL;
    }
    kv->n_layer = hp->n_layer;
    kv->n_seq = n_seq;
    kv->n_ctx = n_ctx;
    kv->kv_dim = hp->n_head_kv * hp->head_dim;
    const size_t bytes = (size_t)n_seq * n_ctx * kv->kv_dim * krn_kv_elem_bytes(type);
    /* where each cache goes: NULL for a layer the model does not hold (a partial load), which gets none */
    dev_device **dev = calloc((size_t)hp->n_layer, sizeof *dev);
    if (!dev) {
        dev_err_set(err, MEMRA_E_NOMEM, "mdl_kv_create: no host memory");
        goto fail;
    }
    for (int il = 0; il < hp->n_layer; il++)
        dev[il] = !m->layers[il].dev ? NULL : layer_dev ? layer_dev[il] : m->layers[il].dev;
    for (int il = 0; il < hp->n_layer; il++)
        if (m->layers[il].dev && !dev[il]) {
            dev_err_set(err, MEMRA_E_INVAL, "mdl_kv_create: layer_dev[%d] is NULL (layer %d is held by the model: it "
                        "needs a cache)", il, il);
            goto fail_dev;
        }
    if (kv_fits(m, dev, bytes, n_seq, n_ctx, type, err) != 0)
        goto fail_dev;
    for (int il = 0; il < hp->n_layer; il++) {
        dev_device *d = dev[il];
        kv->layer[il].dev = d;
        if (!d)
            continue;
        kv->layer[il].c.type = type;
        if (!(kv->layer[il].c.k = dev_malloc(d, bytes, err)) || !(kv->layer[il].c.v = dev_malloc(d, bytes, err))) {
            dev_err_wrap(err, "KV cache of layer %d (%d seq x %d ctx, %s, %zu B each for K and V) on %s", il, n_seq,
                         n_ctx, krn_type_name(type), bytes, dev_device_name(d));
            goto fail_dev;
        }
    }
    free(dev);
    return kv;
fail_dev:
    free(dev);
fail:
    mdl_kv_destroy(kv);
    return NULL;
}

void mdl_kv_destroy(mdl_kv *kv)
{
    if (!kv)
        return;
    for (int il = 0; il < kv->n_layer; il++) {
        if (kv->layer[il].c.k)
            dev_free(kv->layer[il].dev, kv->layer[il].c.k);
        if (kv->layer[il].c.v)
            dev_free(kv->layer[il].dev, kv->layer[il].c.v);
    }
    free(kv->layer);
    free(kv);
}

int mdl_kv_n_seq(const mdl_kv *kv) { return kv->n_seq; }
int mdl_kv_n_ctx(const mdl_kv *kv) { return kv->n_ctx; }
int mdl_kv_has_layer(const mdl_kv *kv, int il) { return il >= 0 && il < kv->n_layer && kv->layer[il].c.k != NULL; }
