/* Synthetic weights on the GPU: the same bytes as kernels/fill.c's krn_fill_host_range (integer operations
 * only, line for line), one thread per unit (a block of a quantized type, or one float element).
 * Shared mutable state: none. */
#include "kernels/cuda/krn_cuda_util.cuh"

extern "C" {
#include "kernels/fill.h"
#include "kernels/quant.h"
}

static __device__ __forceinline__ uint64_t mix64_d(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static __device__ __forceinline__ uint32_t f32_bits_d(int exp, uint64_t h) {
    uint32_t sign = (uint32_t)(h & 1u), r = (uint32_t)((h >> 1) & 3u);
    return sign << 31 | (uint32_t)(exp - (int)r + 127) << 23 | (uint32_t)((h >> 3) & 0x7FFFFFu);
}

__global__ void fill_kernel(krn_fill_plan p, unsigned char *out, int64_t units, int bb) {
    int64_t u = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (u >= units)
        return;
    uint64_t h = mix64_d(p.seed ^ mix64_d((uint64_t)u));
    switch (p.type) {
    case KRN_F32: {
        float v = __uint_as_float(f32_bits_d(p.exp, h));
        v = __fadd_rn(v, p.center); /* one IEEE add, as on the host */
        ((float *)out)[u] = v;
        break;
    }
    case KRN_F16:
        ((uint16_t *)out)[u] = (uint16_t)((h & 1u) << 15 | (uint32_t)(p.exp - (int)((h >> 1) & 3u) + 15) << 10 |
                                          ((h >> 3) & 0x3FFu));
        break;
    case KRN_BF16:
        ((uint16_t *)out)[u] = (uint16_t)(f32_bits_d(p.exp, h) >> 16);
        break;
    default: {
        unsigned char *blk = out + (size_t)u * (size_t)bb;
        for (int w = 0; w < bb; w += 8) {
            uint64_t r = mix64_d(h + (uint64_t)w);
            int n = bb - w < 8 ? bb - w : 8;
            for (int i = 0; i < n; i++)
                blk[w + i] = (unsigned char)(r >> (8 * i));
        }
        if (p.type == KRN_Q6_K) {
            blk[bb - 2] = (unsigned char)(p.d & 0xFF), blk[bb - 1] = (unsigned char)(p.d >> 8);
        } else {
            blk[0] = (unsigned char)(p.d & 0xFF), blk[1] = (unsigned char)(p.d >> 8);
            if (p.type == KRN_Q4_1 || p.type == KRN_Q4_K || p.type == KRN_Q5_K)
                blk[2] = (unsigned char)(p.dmin & 0xFF), blk[3] = (unsigned char)(p.dmin >> 8);
        }
    }
    }
}

extern "C" int krn_cuda_fill(dev_stream *s, void *dst, const krn_fill_plan *p) {
    if (!dst || !p)
        return MEMRA_E_INVAL;
    cudaStream_t st;
    int prev, rc = krn_cuda_enter(s, &st, &prev, NULL);
    if (rc)
        return rc;
    int64_t units = krn_fill_units(p);
    int bb = (int)krn_type_block_bytes(p->type);
    unsigned blocks = (unsigned)((units + 255) / 256);
    fill_kernel<<<blocks, 256, 0, st>>>(*p, (unsigned char *)dst, units, bb);
    rc = krn_cuda_launch_check(NULL, "krn_cuda_fill");
    krn_cuda_leave(prev);
    return rc;
}
