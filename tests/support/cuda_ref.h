/* Test references for the CUDA op table: generator, block layouts, random rows, dequantization. */
#ifndef TESTS_SUPPORT_CUDA_REF_H
#define TESTS_SUPPORT_CUDA_REF_H

#include <stddef.h>
#include <stdint.h>
#include "kernels/quant.h"

/* One weight type: GGML number, name, elements and bytes per block (1 and 2/4 for the float types). */
typedef struct cuda_ref_type {
    int type;
    const char *name;
    int be, bb;
} cuda_ref_type;

#define CUDA_REF_N_TYPES 9
/* f32 f16 bf16 q8_0 q4_0 q4_1 q4_k q6_k q5_k: the planar types are entries 3..7, q5_k (no planes) last */
extern const cuda_ref_type CUDA_REF_TYPES[CUDA_REF_N_TYPES];

/* The entry of krn_type `type` (KRN_*), or NULL when the table has none. */
const cuda_ref_type *cuda_ref_type_of(int type);

uint64_t cuda_ref_rand_u64(void);              /* xorshift64, fixed seed: runs are reproducible */
float cuda_ref_rand_unit(void);                /* uniform in [-1, 1) */
void cuda_ref_rand_floats(float *p, size_t n); /* p[i] = cuda_ref_rand_unit() */

/* A random valid row of n elements of type t: random quant bytes, finite random scales. */
void cuda_ref_rand_row(const cuda_ref_type *t, uint8_t *row, int n);
/* A random (n_out, n_in) tensor of type t in GGUF blocks: n_out rows of cuda_ref_rand_row, malloc'd (the
 * caller frees it), *bytes its size; NULL when out of memory. */
uint8_t *cuda_ref_rand_blocks(const cuda_ref_type *t, int n_out, int n_in, size_t *bytes);

/* w[i] = element i of the row, in double; wabs[i] = |scale part| + |offset part| of it (bounds the
 * rounding error of a dot product that applies scale and offset separately). */
void cuda_ref_dequant(const cuda_ref_type *t, const uint8_t *row, int n, double *w, double *wabs);

#endif
