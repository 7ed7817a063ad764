/* Test helper: a loaded model with one stream, KV cache, scratch and device buffers, and a call that runs
 * rows through any layer walk and the head, reading the logits back. Works on any platform (CPU or CUDA).
 * One thread uses a rig at a time. */
#ifndef TESTS_MODEL_RIG_H
#define TESTS_MODEL_RIG_H

#include <stdint.h>
#include "device/dev.h"
#include "model/llama.h"

typedef struct model_rig {
    dev_platform *p;     /* borrowed */
    mdl_model *m;
    mdl_kv *kv;
    mdl_scratch *sc;
    dev_stream *s;
    int max_rows, n_embd, n_vocab, n_layer;
    float *x_d, *logits_d;     /* device 0: (max_rows, n_embd), (max_rows, n_vocab) */
    int32_t *pos_d, *seq_d;    /* device 0: (max_rows,) */
    float *x_h;                /* pinned host (max_rows, n_embd) */
    int32_t *ps_h;             /* pinned host: pos then seq, (2 * max_rows,) */
} model_rig;

/* Load path on p (layer_dev as in mdl_load_params; NULL = device 0), a KV of n_seq x n_ctx, and buffers
 * for max_rows rows on device 0. Returns 0 or MEMRA_E_* + err (everything acquired is released). */
int model_rig_open(model_rig *r, dev_platform *p, const char *path, dev_device *const *layer_dev, int n_seq,
                   int n_ctx, int max_rows, dev_err *err);
void model_rig_close(model_rig *r);

/* Rows b = tokens[b] at (seq[b], pos[b]) through layers [0, n_layer), walked as [0, cuts[0]),
 * [cuts[0], cuts[1]), ... (cuts ends with n_layer; NULL = one walk), then the head on every row:
 * logits (B, n_vocab) host. Synchronous. Returns 0 or MEMRA_E_* + err. */
int model_rig_rows(model_rig *r, const int32_t *tokens, const int32_t *seq, const int32_t *pos, int B,
                   const int *cuts, float *logits, dev_err *err);

#endif
