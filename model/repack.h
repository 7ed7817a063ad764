/* Planar decode weights (KRN_LAYOUT_PLANES, kernels/krn.h) built on the device that owns them: after a
 * layer's (or the head's) tensors are on their device, the loader and the synthetic model call
 * mdl_repack_weights, which repacks each q8_0 / q4_0 / q4_1 / q4_K matrix in place on THAT device, and each q6_K
 * one when MEMRA_CUDA_X8 = 1 (its f32-x planar GEMV is slower than its block GEMV; its int8-x one faster). Door:
 * MEMRA_CUDA_REPACK = 1 (default) | 0 (keep GGUF blocks). */
#ifndef MODEL_REPACK_H
#define MODEL_REPACK_H

#include "device/dev.h"
#include "kernels/krn.h"

/* The MEMRA_CUDA_REPACK door: *on = 1 when unset or "1", 0 for "0"; anything else MEMRA_E_INVAL with a
 * message naming the variable and the allowed values. */
int mdl_repack_door(int *on, dev_err *err);

/* The MEMRA_CUDA_X8 door (read when a stage's scratch is created): *on = 1 for "1" (the forward quantizes
 * each matmul input to int8 once and the PLANES matmuls take int8 products, kernels/krn.h), 0 when unset or
 * "0"; anything else MEMRA_E_INVAL naming the variable and the allowed values. */
int mdl_x8_door(int *on, dev_err *err);

/* Repack the n weights ws[i] (all living on d, each 16-byte aligned) from GGUF blocks to planes in place,
 * on a stream of d's own, and wait for it: each tensor is copied into one scratch buffer on d (the size of
 * the largest), then repacked back into its own bytes; the scratch (the GGUF-layout copy) is freed before
 * returning. Sets ws[i]->layout = KRN_LAYOUT_PLANES for each repacked one (q6_K ones only with MEMRA_CUDA_X8 =
 * 1, read here too, as the runtime reads it right after the load). Does nothing (returns 0) when the door is 0, when d is not a CUDA device (the CPU kernels read blocks) and for weights of other
 * types, other layouts or misaligned data. NULL entries are skipped. Returns 0 or MEMRA_E_* + err (door,
 * no device memory, device error). Cost: two device passes over the weights, one sync. */
int mdl_repack_weights(dev_device *d, krn_weight *const *ws, int n, dev_err *err);

#endif
