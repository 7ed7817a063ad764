/* Seeded synthetic weights: fill a matrix W (n_out, n_in) of any krn_type with pseudo-random values of a
 * given size, built from integers only (a splitmix64 hash of seed and position, bit-assembled floats,
 * host-computed block scales), so the same (seed, type, shape, scale) give the same BYTES on the CPU and on
 * the GPU. It generates real-shaped models straight into device memory (a 70B model does not fit a
 * disk or a carried file) and host-side embedding tables. Values: float types |v| in [scale/8, 2*scale)
 * with a random sign, plus `center` (f32 only, for norm weights near 1); quantized types: valid blocks
 * whose values are of the order of scale. */
#ifndef KRN_FILL_H
#define KRN_FILL_H

#include <stdint.h>
#include "device/dev.h"

/* Constants of one fill, computed on the host (the only float arithmetic: the block scales). */
typedef struct krn_fill_plan {
    int type;          /* krn_type */
    int64_t n_out, n_in;
    uint64_t seed;
    int exp;           /* float types: unbiased exponent of the largest |v| */
    float center;      /* f32 only: added to every value */
    uint16_t d, dmin;  /* quantized types: the f16 block scale (and min) written into every block */
    size_t row_bytes;  /* krn_row_bytes(type, n_in) */
} krn_fill_plan;

/* Fill in the plan. Returns 0, or MEMRA_E_INVAL (unsupported type, n_in not a multiple of the block, a scale
 * whose values would not be normal numbers of the type). */
int krn_fill_plan_make(krn_fill_plan *p, int type, int64_t n_out, int64_t n_in, uint64_t seed, float scale,
                       float center);

/* The bytes of unit `u` (a block of a quantized type, or one element of a float type) written at dst.
 * Every unit is independent: any split of [0, units) over threads gives the same bytes. */
int64_t krn_fill_units(const krn_fill_plan *p);
void krn_fill_host_range(const krn_fill_plan *p, void *dst, int64_t u0, int64_t u1);

/* Enqueue the fill of dst (device memory of s's device) on s: CPU backend = one op, CUDA = one kernel. */
int krn_fill_async(dev_stream *s, void *dst, const krn_fill_plan *p);

#endif
