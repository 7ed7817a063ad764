/* Test helper: see model_rig.h. No shared state. */
#include "support/model_rig.h"

#include <string.h>

#include "actors/pp.h"
#include "kernels/krn.h"

int model_rig_open(model_rig *r, dev_platform *p, const char *path, dev_device *const *layer_dev, int n_seq,
                   int n_ctx, int max_rows, dev_err *err)
{
    memset(r, 0, sizeof *r);
    r->p = p;
    r->max_rows = max_rows;
    if (!(r->m = mdl_model_load(path, &(mdl_load_params){ .platform = p, .layer_dev = layer_dev }, err)))
        return err->code;
    const mdl_hparams *hp = mdl_model_hparams(r->m);
    r->n_embd = hp->n_embd;
    r->n_vocab = hp->n_vocab;
    r->n_layer = hp->n_layer;
    dev_device *d = dev_platform_device(p, 0);
    int kv_type; /* MEMRA_KV_TYPE: e.g. gpu_forward compares CUDA with the CPU backend on 16-bit caches */
    if (mdl_kv_type_from_env(&kv_type, err) != 0 || !(r->kv = mdl_kv_create(r->m, NULL, n_seq, n_ctx, kv_type, err)) || !(r->sc = mdl_scratch_create(r->m, d, max_rows, err)) ||
        !(r->s = dev_stream_create(d, "rig", err)) ||
        krn_stream_set_batch_invariant(r->s, err) != 0 || /* its tests compare rows of a batch with rows alone */
        !(r->x_d = dev_malloc(d, sizeof(float) * max_rows * r->n_embd, err)) ||
        !(r->logits_d = dev_malloc(d, sizeof(float) * max_rows * r->n_vocab, err)) ||
        !(r->pos_d = dev_malloc(d, sizeof(int32_t) * max_rows, err)) ||
        !(r->seq_d = dev_malloc(d, sizeof(int32_t) * max_rows, err)) ||
        !(r->x_h = dev_host_alloc(p, sizeof(float) * max_rows * r->n_embd, err)) ||
        !(r->ps_h = dev_host_alloc(p, sizeof(int32_t) * 2 * max_rows, err))) {
        model_rig_close(r);
        return err->code;
    }
    return 0;
}

void model_rig_close(model_rig *r)
{
    if (r->s)
        dev_stream_destroy(r->s);
    dev_device *d = r->p ? dev_platform_device(r->p, 0) : NULL;
    if (d) {
        dev_free(d, r->x_d);
        dev_free(d, r->logits_d);
        dev_free(d, r->pos_d);
        dev_free(d, r->seq_d);
    }
    if (r->x_h)
        dev_host_free(r->p, r->x_h);
    if (r->ps_h)
        dev_host_free(r->p, r->ps_h);
    mdl_scratch_destroy(r->sc);
    mdl_kv_destroy(r->kv);
    mdl_model_free(r->m);
    memset(r, 0, sizeof *r);
}

int model_rig_rows(model_rig *r, const int32_t *tokens, const int32_t *seq, const int32_t *pos, int B,
                   const int *cuts, float *logits, dev_err *err)
{
    if (B <= 0 || B > r->max_rows)
        return dev_err_set(err, MEMRA_E_INVAL, "model_rig_rows: B = %d, allowed 1..%d", B, r->max_rows);
    int rc = mdl_embed_rows(r->m, tokens, B, r->x_h, err);
    if (rc)
        return rc;
    memcpy(r->ps_h, pos, sizeof(int32_t) * B);
    memcpy(r->ps_h + r->max_rows, seq, sizeof(int32_t) * B);
    if ((rc = dev_copy_h2d_async(r->s, r->x_d, r->x_h, sizeof(float) * B * r->n_embd)) ||
        (rc = dev_copy_h2d_async(r->s, r->pos_d, r->ps_h, sizeof(int32_t) * B)) ||
        (rc = dev_copy_h2d_async(r->s, r->seq_d, r->ps_h + r->max_rows, sizeof(int32_t) * B)))
        return dev_err_set(err, rc, "model_rig_rows: upload failed");
    const int whole[1] = { r->n_layer };
    if (!cuts)
        cuts = whole;
    const int keys = act_pp_keys_bound(pos, B, mdl_kv_n_ctx(r->kv)); /* the rows' bound, as the pipeline's */
    for (int l0 = 0, i = 0; l0 < r->n_layer; l0 = cuts[i++])
        if ((rc = mdl_forward_layers_async(r->m, r->kv, r->sc, r->s, r->x_d, r->pos_d, r->seq_d, B, keys, l0,
                                           cuts[i], err)))
            return rc;
    if ((rc = mdl_forward_head_async(r->m, r->sc, r->s, r->x_d, r->logits_d, B, err)))
        return rc;
    if ((rc = dev_copy_d2h_async(r->s, logits, r->logits_d, sizeof(float) * B * r->n_vocab)))
        return dev_err_set(err, rc, "model_rig_rows: readback failed");
    return dev_stream_sync(r->s, err);
}
