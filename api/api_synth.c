/* A model handle over a synthetic shape (model/gguf_synth.h) instead of a file: memra_runtime_create then
 * generates the weights on the stage devices (act_pp_params.synth), so a benchmark runs an 8B-shaped model
 * without writing 16 GB first. Internal (api/api_internal.h): the tools use it, the public API does not. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "model/gguf_synth.h"
#include "model/llama.h"

memra_model *api_model_synthetic(const mdl_gguf_synth *shape, const char *name)
{
    memra_model *m = calloc(1, sizeof *m);
    if (!m || !(m->path = strdup(name ? name : "synthetic")) || !(m->synth = malloc(sizeof *m->synth))) {
        if (m)
            free(m->path);
        free(m);
        api_fail(NULL, MEMRA_E_NOMEM, "synthetic model: out of host memory");
        return NULL;
    }
    api_errbox_init(&m->err);
    *m->synth = *shape;
    snprintf(m->arch, sizeof m->arch, "%s", shape->arch ? shape->arch : "llama");
    m->n_vocab = shape->n_vocab;
    m->n_embd = shape->n_embd;
    m->n_layer = shape->n_layer;
    m->n_head = shape->n_head;
    m->n_head_kv = shape->n_head_kv;
    m->head_dim = shape->n_head ? shape->n_embd / shape->n_head : 0;
    m->n_ctx_train = shape->n_ctx;
    return m;
}

memra_model *api_model_open(const char *path, const char *synth, const char *type)
{
    if (path && synth) {
        api_fail(NULL, MEMRA_E_INVAL, "-m %s and --synthetic %s: one model, a file or a synthetic shape", path, synth);
        return NULL;
    }
    if (!path && !synth) {
        api_fail(NULL, MEMRA_E_INVAL, "-m MODEL or --synthetic NAME is required");
        return NULL;
    }
    if (path)
        return memra_model_load(path, NULL);
    mdl_gguf_synth shape;
    dev_err err = {0};
    if (mdl_synth_parse(synth, type ? type : "bf16", &shape, &err) != 0) {
        api_fail_err(NULL, &err);
        return NULL;
    }
    return api_model_synthetic(&shape, synth);
}
