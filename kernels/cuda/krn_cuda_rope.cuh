/* Private to kernels/cuda: rope's angle and rotation, shared by rope_store (krn_cuda_elementwise.cu) and the
 * attention kernel that rotates its own q and k (krn_cuda_attention.cu, B = 1), so both give the same bits; and
 * rope_store's argument checks, so both take the same arguments.
 * The rotation is written with explicit roundings (__fmul_rn, __fmaf_rn): nvcc may contract a * c - b * s either
 * way round, and the two kernels must not differ in which. */
#pragma once
#include <math.h>
#include "kernels/cuda/krn_cuda.h"

/* krn_cuda_rope_store_async's argument checks (shape, frequencies, then at B > 0 pointers and cache type): 0, or
 * MEMRA_E_INVAL with err saying which. */
int krn_cuda_rope_store_check(const krn_rope_store *a, dev_err *err);

/* Pair i's angle at position p: its sine and cosine. No loads: a kernel may take it before its PDL wait. */
static __device__ __forceinline__ void krn_rope_angle(int i, int p, int n_rot, float freq_base, float freq_scale,
                                                      float *s, float *c) {
    const float inv_freq = powf(freq_base, -(float)(2 * i) / (float)n_rot);
    const float theta = (float)p * freq_scale * inv_freq;
    sincosf(theta, s, c);
}

/* The pair (a, b) rotated by the angle of sine s, cosine c: (a c - b s, a s + b c). */
static __device__ __forceinline__ void krn_rope_rot(float a, float b, float s, float c, float *x0, float *x1) {
    *x0 = __fmaf_rn(a, c, -__fmul_rn(b, s));
    *x1 = __fmaf_rn(a, s, __fmul_rn(b, c));
}
