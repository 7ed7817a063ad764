/* x quantized to int8 per 32-element block (kernels/krn.h "x quantized to int8"): the host form, which is
 * the CPU backend's op and the reference the CUDA kernel (kernels/cuda/krn_cuda_matmul_x8.cu) must equal
 * bit for bit. No shared state. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/krn.h"

size_t krn_x8_row_bytes(int n)
{
    if (n <= 0 || n % 32)
        return 0;
    return ((size_t)n + (size_t)n / 4 + 15) / 16 * 16; /* n quants + n/32 (d, s) pairs of 8 bytes */
}

/* The NaN a non-finite block's d and s hold (the bits the CUDA kernel writes too). */
static float x8_nan(void)
{
    const uint32_t u = 0x7fc00000u;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* One block: the same operations, in the same order, as the CUDA kernel (max is exact in any order; the
 * quants and their sum are integers). */
static void quantize_block(int8_t *q, float *ds, const float *x)
{
    float amax = 0.0f;
    int finite = 1;
    for (int i = 0; i < 32; i++) {
        amax = fmaxf(amax, fabsf(x[i]));
        finite &= isfinite(x[i]) != 0;
    }
    if (!finite) { /* NaN or inf in the block: NaN products, never a silent 0 */
        memset(q, 0, 32);
        ds[0] = ds[1] = x8_nan();
        return;
    }
    const float d = amax / 127.0f;
    int sum = 0;
    for (int i = 0; i < 32; i++) {
        const int v = d > 0.0f ? (int)fminf(fmaxf(rintf(x[i] / d), -127.0f), 127.0f) : 0;
        q[i] = (int8_t)v;
        sum += v;
    }
    ds[0] = d;
    ds[1] = d * (float)sum;
}

void krn_x8_quantize_host(void *xq, const float *x, int B, int n)
{
    krn_x8_quantize_t_host(xq, x, KRN_F32, B, n);
}

void krn_x8_quantize_t_host(void *xq, const void *x, int xt, int B, int n)
{
    const size_t rb = krn_x8_row_bytes(n), eb = krn_act_bytes(xt);
    if (!rb || !eb || B <= 0)
        return;
    for (int b = 0; b < B; b++) {
        uint8_t *row = (uint8_t *)xq + (size_t)b * rb;
        float ds[2], xb[32];
        for (int j = 0; j < n / 32; j++) {
            krn_dequant_row(xt, (const uint8_t *)x + ((size_t)b * n + 32 * (size_t)j) * eb, xb, 32); /* exact */
            quantize_block((int8_t *)row + 32 * j, ds, xb);
            memcpy(row + n + 8 * (size_t)j, ds, sizeof ds);
        }
        memset(row + n + (size_t)n / 4, 0, rb - (size_t)n - (size_t)n / 4); /* the padding: defined bytes */
    }
}
