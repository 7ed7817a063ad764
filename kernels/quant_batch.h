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

/* The exact mode over rows of 8 (kernels/exact_rows8.c): y[b * ldy + o] = (acc ? y[b * ldy + o] + : )
 * krn_dot_row(t, row o, x + b * ldx, n), bit for bit, for the rows o < 8 * n_groups of a KRN_LAYOUT_ROWS8 weight
 * of type t (q4_0, q4_1, q8_0; row_bytes = krn_row_bytes(t, n)), 8 rows per vector. Returns 1 when y holds the
 * result; 0 with y untouched when it does not run: another type, n % 32 != 0, no AVX2 path, an x that is not
 * finite, a q4 call with a nonzero x below 2^-102 in magnitude, or no memory for its scratch (4 bytes per x
 * value, 128 per block, and for q4_1 4 per block and x row). The caller then unpacks the groups (same bits,
 * slower). */
int krn_rows8_exact(int t, const void *w, size_t row_bytes, int n_groups, int64_t n, const float *x, int64_t ldx,
                    int B, float *y, int64_t ldy, int acc);

/* krn_rows8_exact with its vectors chosen: wide = 1 takes pairs of groups in AVX-512 vectors where
 * krn_rows8_exact_wide_available() (an odd last group in AVX2), wide = 0 AVX2 vectors only. Same bits either way;
 * krn_rows8_exact passes krn_rows8_exact_wide_available(). */
int krn_rows8_exact_path(int wide, int t, const void *w, size_t row_bytes, int n_groups, int64_t n, const float *x,
                         int64_t ldx, int B, float *y, int64_t ldy, int acc);

/* 1 where the CPU has AVX-512F (krn_rows8_exact's pairs of groups), else 0; probed once. */
int krn_rows8_exact_wide_available(void);

/* ---- the fast mode (MEMRA_CPU_X8): weight rows against x quantized to int8 blocks (kernels/x8_gemm.c) ----
 * x8 rows: krn_x8_row_bytes(n) bytes each, from krn_x8_quantize_host (kernels/krn.h). The result of a (weight
 * row, x row) pair is defined in kernels/x8_gemm.c: exact integer sums per 32-element block, then a fixed float
 * order; every path, layout and tiling gives the same bits, and a row's result does not depend on B. Not the
 * exact mode's bits: x is rounded to 8 bits per 32-block (within half an x quantum per element). */

/* The x8 kernels' paths: portable C, AVX2 (+F16C, FMA; maddubs), AVX-512 VNNI (dpbusd on 256-bit vectors). */
enum { KRN_X8_GENERIC = 0, KRN_X8_AVX2 = 1, KRN_X8_VNNI = 2, KRN_X8_PATH_COUNT = 3 };
int krn_x8_path(void);              /* the best path this CPU runs (picked once, at first use) */
int krn_x8_path_available(int p);   /* 1 when path p can run on this CPU */
int krn_x8_type_ok(int t);          /* 1 for q4_0, q4_1, q8_0, q4_K, q5_K, q6_K: the types the fast mode multiplies */
int krn_x8_kquant_type_ok(int t);   /* 1 for the K-quants among them (kernels/x8_kquant.c) */

/* y (B, n_out) with row stride ldy: y[b * ldy + o] = (acc ? y[b * ldy + o] + : ) dot(W row o, x8 row b), W
 * (n_out, n) of type t in `layout` (KRN_LAYOUT_BLOCKS: rows row_bytes apart; KRN_LAYOUT_ROWS8, kernels/krn.h),
 * row_bytes = krn_row_bytes(t, n). Tiles of 8 weight rows x 4 x rows (then 3, 2, 1 for the last x rows); BLOCKS
 * rows are packed into one group's buffer first. Returns 0, or -1 (y untouched) for another type or layout, a
 * ROWS8 shape it does not take, n % 32 != 0, n_out or B <= 0, or no memory for the per-call scratch (12 bytes per
 * x block, plus 8 rows' bytes for BLOCKS). The _path form runs path p (available, see above). */
int krn_x8_gemm(int t, int layout, const void *w, size_t row_bytes, int n_out, const void *xq, int B, int64_t n,
                float *y, int64_t ldy, int acc);
int krn_x8_gemm_path(int p, int t, int layout, const void *w, size_t row_bytes, int n_out, const void *xq, int B,
                     int64_t n, float *y, int64_t ldy, int acc);

/* krn_x8_gemm_path for K-quant weights in GGUF blocks (kernels/x8_kquant.c defines their result): n % 256 == 0;
 * the VNNI path runs the AVX2 code. Returns 0, or -1 (y untouched) for another type, a bad shape or row_bytes, or
 * no memory for the per-call scratch (72 bytes per 256 x values). */
int krn_x8_kquant_gemm_path(int p, int t, const void *w, size_t row_bytes, int n_out, const void *xq, int B,
                            int64_t n, float *y, int64_t ldy, int acc);

/* One weight row against one x8 row: the bits krn_x8_gemm gives for that pair; NAN for another type or
 * n % 32 != 0. The _path form runs x8 path p (KRN_X8_*, available). */
float krn_dot_row_x8(int t, const void *row, const void *xq, int64_t n);
float krn_dot_row_x8_path(int p, int t, const void *row, const void *xq, int64_t n);

#endif
