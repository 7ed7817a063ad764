/* GGUF blocks -> the planar layout (KRN_LAYOUT_PLANES, kernels/krn.h) on the device that owns the tensor,
 * with the same bytes as krn_repack_host (kernels/repack.c). One thread per 16 quant bytes of the output
 * (q8_0: half a block, q4_0/q4_1: a block, q4_K: a 32-element sub-block, q6_K: a sub-block's low nibbles or
 * two sub-blocks' high bits), grid-stride; it reads its block's bytes one by one (GGUF blocks are only 2-byte
 * aligned), writes its 16 bytes with one aligned store and, for the block's first unit, the block's scale
 * bytes. Load time only (bandwidth is not the point). Shared mutable state: none. */
#include "kernels/cuda/krn_cuda_util.cuh"
#include "kernels/cuda/krn_cuda_planes.h"
#include "kernels/cuda/krn_cuda_gguf.cuh"

/* Output unit u (0..11) of a q6_K super-block b: u < 8 the low nibbles of sub-block u as a q4 planar block
 * (byte 4k+i: elements 8k+i low, 8k+4+i high); u >= 8 the high bits of sub-blocks s = 2(u-8), s+1, 8 bytes
 * each: byte 4m+i, bits 2f, 2f+1 of element 32s + 16m + 4f + i. */
static __device__ __forceinline__ void q6_unit(const uint8_t *b, int u, uint32_t (&w)[4]) {
#pragma unroll
    for (int k = 0; k < 4; k++) {
        w[k] = 0;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            uint32_t byte;
            if (u < 8) {
                byte = gguf_q6_bits(b, 32 * u + 8 * k + i, 0) | gguf_q6_bits(b, 32 * u + 8 * k + 4 + i, 0) << 4;
            } else { /* word k: sub-block 2(u-8) + k/2, m = k % 2 */
                const int e0 = 32 * (2 * (u - 8) + k / 2) + 16 * (k % 2) + i;
                byte = 0;
#pragma unroll
                for (int f = 0; f < 4; f++)
                    byte |= gguf_q6_bits(b, e0 + 4 * f, 1) << (2 * f);
            }
            w[k] |= byte << (8 * i);
        }
    }
}

template <int T> struct rp_layout; /* scale bytes, block bytes, 16-byte output units per block */
template <> struct rp_layout<KRN_Q8_0> { enum { SB = 2, BB = 34, HALVES = 2 }; };
template <> struct rp_layout<KRN_Q4_0> { enum { SB = 2, BB = 18, HALVES = 1 }; };
template <> struct rp_layout<KRN_Q4_1> { enum { SB = 4, BB = 20, HALVES = 1 }; };
template <> struct rp_layout<KRN_Q4_K> { enum { SB = 16, BB = 144, HALVES = 8 }; };
template <> struct rp_layout<KRN_Q6_K> { enum { SB = 18, BB = 210, HALVES = 12 }; }; /* scales at the end */

template <int T>
__global__ void repack_kernel(uint8_t *__restrict__ dst, const uint8_t *__restrict__ src, int n_out, int nb) {
    enum { SB = rp_layout<T>::SB, BB = rp_layout<T>::BB, HALVES = rp_layout<T>::HALVES };
    const size_t units = (size_t)n_out * nb * HALVES, nblk = (size_t)n_out * nb;
    uint8_t *scales = dst + nblk * (BB - SB);
    for (size_t u = blockIdx.x * (size_t)blockDim.x + threadIdx.x; u < units; u += (size_t)gridDim.x * blockDim.x) {
        const size_t blk = u / HALVES; /* row-major block index r * nb + j: the quant plane is contiguous */
        const int h = (int)(u % HALVES);
        const uint8_t *b = src + blk * BB;
        uint32_t w[4];
        if constexpr (T == KRN_Q6_K) {
            q6_unit(b, h, w);
        } else if (T == KRN_Q8_0) {
            const uint8_t *q = b + SB + 16 * h;
#pragma unroll
            for (int k = 0; k < 4; k++)
                w[k] = q[4 * k] | (uint32_t)q[4 * k + 1] << 8 | (uint32_t)q[4 * k + 2] << 16 |
                       (uint32_t)q[4 * k + 3] << 24;
        } else { /* q4: byte 4k+i of the vector = elements 8k+i (low nibble), 8k+4+i (high) of its 32 */
            const uint8_t *qs = b + SB;
            /* element e of the vector: q4_K sub-block h = elements 32h .. 32h+32 of the super-block */
            auto nib = [&](int e) -> uint32_t { return T == KRN_Q4_K ? gguf_q4k_nib(qs, 32 * h + e) : gguf_q4_nib(qs, e); };
#pragma unroll
            for (int k = 0; k < 4; k++) {
                w[k] = 0;
#pragma unroll
                for (int i = 0; i < 4; i++)
                    w[k] |= (nib(8 * k + i) | nib(8 * k + 4 + i) << 4) << (8 * i);
            }
        }
        *(uint4 *)(dst + 16 * u) = make_uint4(w[0], w[1], w[2], w[3]);
        if (h == 0) /* q6_K: scales[16], d end the GGUF block */
            for (int i = 0; i < SB; i++)
                scales[blk * SB + i] = b[(T == KRN_Q6_K ? BB - SB : 0) + i];
    }
}

/* repack_kernel<T> over its n_out * nb * HALVES units, 256 threads a block, at most 65536 blocks (the grid walks). */
template <int T>
static void rp_launch(uint8_t *d, const uint8_t *s0, int n_out, int nb, cudaStream_t st) {
    const size_t units = (size_t)n_out * nb * rp_layout<T>::HALVES;
    const unsigned blocks = (unsigned)(units / 256 + 1 < 65536 ? units / 256 + 1 : 65536);
    repack_kernel<T><<<blocks, 256, 0, st>>>(d, s0, n_out, nb);
}

extern "C" int krn_cuda_repack_async(void *cuda_stream, krn_weight *dst, const krn_weight *src, dev_err *err) {
    if (!dst || !src || !dst->data || !src->data)
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_repack: NULL weight or data");
    if (!krn_planes_supported(src->type) || src->layout != KRN_LAYOUT_BLOCKS)
        return dev_err_set(err, MEMRA_E_INVAL,
                           "krn_cuda_repack: source of type %s, layout %d (allowed: q8_0, q4_0, q4_1, q4_K, q6_K "
                           "in layout blocks)", krn_type_name(src->type), src->layout);
    if (dst->type != src->type || dst->n_out != src->n_out || dst->n_in != src->n_in || src->n_out <= 0 ||
        !krn_planes_qrow(src->type, src->n_in))
        return dev_err_set(err, MEMRA_E_INVAL,
                           "krn_cuda_repack: dst (%s %dx%d) must match src (%s %dx%d), n_out > 0, n_in a multiple "
                           "of the block (%d)", krn_type_name(dst->type), dst->n_out, dst->n_in,
                           krn_type_name(src->type), src->n_out, src->n_in, krn_type_block_elems(src->type));
    const size_t bytes = (size_t)src->n_out * krn_row_bytes(src->type, src->n_in);
    const uint8_t *s0 = (const uint8_t *)src->data, *d0 = (const uint8_t *)dst->data;
    if (s0 < d0 + bytes && d0 < s0 + bytes)
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_repack: src %p and dst %p overlap (%zu bytes each)",
                           src->data, dst->data, bytes);
    if (!krn_cuda_aligned(dst->data, 16) || !krn_cuda_aligned(src->data, 2))
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_repack: dst %p must be 16-byte aligned, src %p 2-byte",
                           dst->data, src->data);
    const int nb = src->n_in / krn_type_block_elems(src->type);
    cudaStream_t st = (cudaStream_t)cuda_stream;
    uint8_t *d = (uint8_t *)dst->data;
    switch (src->type) {
    case KRN_Q8_0: rp_launch<KRN_Q8_0>(d, s0, src->n_out, nb, st); break;
    case KRN_Q4_0: rp_launch<KRN_Q4_0>(d, s0, src->n_out, nb, st); break;
    case KRN_Q4_K: rp_launch<KRN_Q4_K>(d, s0, src->n_out, nb, st); break;
    case KRN_Q6_K: rp_launch<KRN_Q6_K>(d, s0, src->n_out, nb, st); break;
    default: rp_launch<KRN_Q4_1>(d, s0, src->n_out, nb, st); break;
    }
    int rc = krn_cuda_launch_check(err, "krn_cuda_repack");
    if (rc)
        return dev_err_wrap(err, "type %s, %dx%d", krn_type_name(src->type), src->n_out, src->n_in), rc;
    dst->layout = KRN_LAYOUT_PLANES;
    return 0;
}

extern "C" int krn_cuda_repack(dev_stream *s, krn_weight *dst, const krn_weight *src) {
    cudaStream_t st;
    int prev, rc = krn_cuda_enter(s, &st, &prev, NULL);
    if (rc)
        return rc;
    rc = krn_cuda_repack_async(st, dst, src, NULL);
    krn_cuda_leave(prev);
    return rc;
}
