/* memra-run's model driver: everything between "tokens in" and "logits out". This is the one piece the
 * pipeline runtime replaces: today it walks every layer on ONE stream of the first stage's device (a
 * serial walk; with --stages/--devices the weights are placed per stage and read through peer grants).
 * Not thread-safe: one caller thread. */
#ifndef RUN_DRIVER_H
#define RUN_DRIVER_H

#include <stdint.h>
#include "device/dev.h"
#include "model/llama.h"

typedef struct run_placement {
    int n_stages;       /* 1.. ; the layers are cut evenly: stage s runs [s*L/N, (s+1)*L/N) */
    int n_devices;      /* entries in devices; 0 = every stage on device 0 */
    int devices[64];    /* device ordinal of each stage (--devices 0,1,...) */
} run_placement;

/* Fill layer_dev (n_layer entries) from the placement; MEMRA_E_INVAL names a bad stage count or ordinal. */
int run_place_layers(dev_platform *p, const run_placement *pl, int n_layer, dev_device **layer_dev, dev_err *err);

typedef struct run_driver run_driver;

/* A driver for one sequence of up to n_ctx tokens; prefill runs in chunks of up to chunk rows. */
run_driver *run_driver_create(dev_platform *p, const mdl_model *m, int n_ctx, int chunk, dev_err *err);
void run_driver_destroy(run_driver *d);

/* Feed n tokens at positions pos0.. and write the logits of the LAST one into logits (n_vocab floats,
 * host). Synchronous. MEMRA_E_FULL when pos0 + n > n_ctx. */
int run_driver_eval(run_driver *d, const int32_t *tokens, int n, int pos0, float *logits, dev_err *err);

#endif
