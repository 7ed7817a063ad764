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

/* The fast mode's dot (GGUF runners' way): a q4_0 / q4_1 / q8_0 row against ONE row of x quantized to int8
 * blocks (xq: krn_x8_row_bytes(n) bytes from krn_x8_quantize_host), with exact integer products per block and
 * a fixed float order (kernels/quant_dot.c), so every path gives the same bits and a row's result does not
 * depend on the batch. Not the exact mode's bits: x is rounded to 8 bits (kernels/krn.h: within ~0.4 % of
 * max |y|). NAN for another type or n % 32 != 0. Cost: about a third of krn_dot_row's on the AVX2 path. */
float krn_dot_row_x8(int t, const void *row, const void *xq, int64_t n);

#endif
