/* Weights repacked on the device that owns them, after a layer's (or the head's) tensors are there: the loader
 * and the synthetic model call mdl_repack_weights.
 *  - CUDA: each q8_0 / q4_0 / q4_1 / q4_K matrix to planes (KRN_LAYOUT_PLANES, kernels/krn.h), and each q6_K
 *    one when MEMRA_CUDA_X8 = 1 (its f32-x planar GEMV is slower than its block GEMV; its int8-x one faster).
 *    Door: MEMRA_CUDA_REPACK = 1 (default) | 0 (keep GGUF blocks).
 *  - CPU: each q4_0 / q4_1 / q8_0 matrix of 8 rows or more to rows of 8 (KRN_LAYOUT_ROWS8): in the fast mode (the
 *    platform's MEMRA_CPU_X8 = 1) the int8 GEMM reads them without packing; in the exact mode they are repacked
 *    where krn_rows8_exact runs (AVX2), 8 rows per vector. Door: MEMRA_CPU_REPACK = 1 (default) | 0 (keep GGUF blocks; the
 *    GEMM packs each group of 8 rows on every call, the exact mode reads rows one by one). */
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

/* The MEMRA_CPU_REPACK door: *on = 1 when unset or "1", 0 for "0"; anything else MEMRA_E_INVAL naming the
 * variable and the allowed values. */
int mdl_cpu_repack_door(int *on, dev_err *err);

/* Repack the n weights ws[i] (all living on d, each 16-byte aligned for planes) in place, on a stream of d's
 * own, and wait for it: each tensor is copied into one scratch buffer on d (the size of the largest), then
 * repacked back into its own bytes; the scratch (the GGUF-layout copy) is freed before returning. CUDA: sets
 * ws[i]->layout = KRN_LAYOUT_PLANES for each repacked one (q6_K ones only with MEMRA_CUDA_X8 = 1, read here
 * too, as the runtime reads it right after the load). CPU: KRN_LAYOUT_ROWS8 as above, by the mode of d's
 * platform (dev_platform_matmul_x8, set before the load). Does nothing (returns 0) when the device's door is
 * 0 and for weights of other types, shapes or layouts. NULL entries are
 * skipped. Returns 0 or MEMRA_E_* + err (door, no device memory, device error). Cost: two device passes over
 * the weights, one sync. */
int mdl_repack_weights(dev_device *d, krn_weight *const *ws, int n, dev_err *err);

#endif
