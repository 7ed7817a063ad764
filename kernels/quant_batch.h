/* One weight row against several f32 vectors at once (the CPU matmul with B > 1 rows of x): the row is
 * dequantized once per block and reused for up to 4 vectors. An extension of kernels/quant.h. */
#ifndef KRN_QUANT_BATCH_H
#define KRN_QUANT_BATCH_H

#include <stdint.h>
#include "kernels/quant.h"

/* out[k] = krn_dot_row(t, row, x + k * ldx, n) for k in [0, B), bit for bit (each vector keeps its own
 * lanes in the same fixed order), dequantizing each block of the row once per group of 4 vectors.
 * B <= 0 does nothing; an unsupported t or a bad n gives NAN in every out[k]. Cost: about one
 * krn_dot_row's dequantization per 4 vectors plus B multiply-adds per element. */
void krn_dot_row_batch(int t, const void *row, const float *x, int64_t ldx, int B, float *out, int64_t n);

#endif
