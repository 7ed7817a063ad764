/* The embedding gather on CUDA (krn_embed_rows_async): y (B, n) = rows tokens[b] of the table T (GGUF blocks of
 * any type) dequantized to f32; a row of zeros for a token outside [0, T->n_out). Blocks of EMB_THREADS, a grid
 * of (B, slices): block (b, s) computes elements i = s * EMB_THREADS + j (j its thread), i + slices * EMB_THREADS,
 * ... of row b, each on its own from the bytes of that element's GGUF block, read one by one (GGUF blocks are
 * only 2-byte aligned). A slice per EMB_THREADS elements puts all of a row's loads in flight at once: one block
 * a row walked it one dependent round trip per EMB_THREADS elements, 7.6 us for the 8B's 4096-element row in
 * every decode step (docs/bench/gpu.md "Where a layer's time goes": 1.6 us with the slices). Writes are coalesced.
 *
 * Bits: every element is the value krn_dequant_row gives on the host (kernels/quant_dot.c's header and the
 * deq_* of kernels/quant_dot_body.inc): the same IEEE operations in the same order, each product and sum as
 * __fmul_rn / __fadd_rn / __fsub_rn so nvcc cannot contract `a * b + c` into an FMA (the host is ISO C17:
 * two roundings). f16 / bf16 -> f32 and small integers -> f32 are exact. (Every product here is in fact exact
 * in f32: an f16 scale, 11 significant bits, times integers of at most 12 bits together (q6_K: 7 + 5), so only
 * q4_1's add and q4_K's / q5_K's subtract round; the intrinsics keep the host's operations whatever nvcc
 * does.) A NaN gives a NaN, its payload not guaranteed to be the host's. No reduction: deterministic, a row's
 * bits depend neither on B nor on the run.
 * Shared mutable state: none. */
#include "kernels/cuda/krn_cuda_util.cuh"
#include "kernels/cuda/krn_cuda_gguf.cuh"

#define EMB_THREADS 256 /* threads per row */

static __device__ __forceinline__ uint16_t emb_ld16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static __device__ __forceinline__ float emb_h(const uint8_t *p) { return krn_h2f(emb_ld16(p)); }

/* Element e (0..255) of a q4_K super-block p: chunk c = e / 64 holds sub-blocks 2c (the low nibbles of
 * qs[32c ..]) and 2c + 1 (their high nibbles); value (d * sc) * q - dmin * m (gguf_q4k_scale_min's 6-bit pair). */
static __device__ __forceinline__ float emb_q4_K(const uint8_t *p, int e) {
    uint32_t s, m;
    gguf_q4k_scale_min(e / 32, p + 4, &s, &m);
    const uint32_t q = gguf_q4k_nib(p + 16, e);
    const float d1 = __fmul_rn(emb_h(p), (float)s), m1 = __fmul_rn(emb_h(p + 2), (float)m);
    return __fsub_rn(__fmul_rn((float)q, d1), m1);
}

/* Element e (0..255) of a q5_K super-block p: as q4_K, with the 5-bit quant gguf_q5k_q. */
static __device__ __forceinline__ float emb_q5_K(const uint8_t *p, int e) {
    uint32_t s, m;
    gguf_q4k_scale_min(e / 32, p + 4, &s, &m);
    const uint32_t q = gguf_q5k_q(p, e);
    const float d1 = __fmul_rn(emb_h(p), (float)s), m1 = __fmul_rn(emb_h(p + 2), (float)m);
    return __fsub_rn(__fmul_rn((float)q, d1), m1);
}

/* Element e (0..255) of a q6_K super-block p: half h = e / 128 (ql + 64h, qh + 32h, scales + 8h); in it, element
 * 32k + l (k = 0..3, l = 0..31) takes the low (k < 2) or high nibble of ql[l + 32 (k & 1)] and bits 2k, 2k+1 of
 * qh[l]; value (q - 32) * (d * scales[l / 16 + 2k]). */
static __device__ __forceinline__ float emb_q6_K(const uint8_t *p, int e) {
    const int h = e / 128, k = (e % 128) / 32, l = e % 32;
    const int8_t *sc = (const int8_t *)(p + 192 + 8 * h);
    const int q = (int)(gguf_q6_bits(p, e, 0) | gguf_q6_bits(p, e, 1) << 4);
    const float ds = __fmul_rn(emb_h(p + 208), (float)sc[l / 16 + 2 * k]);
    return __fmul_rn((float)(q - 32), ds);
}

/* Element i of a row r of type t (kernels/quant.h's formulas, in krn_dequant_row's operation order). */
static __device__ __forceinline__ float emb_elem(int t, const uint8_t *r, int i) {
    switch (t) {
    case KRN_F32: {
        const uint8_t *p = r + 4 * (size_t)i;
        return __uint_as_float(emb_ld16(p) | (uint32_t)emb_ld16(p + 2) << 16);
    }
    case KRN_F16: return emb_h(r + 2 * (size_t)i);
    case KRN_BF16: return krn_bf2f(emb_ld16(r + 2 * (size_t)i));
    case KRN_Q8_0: { /* d * q */
        const uint8_t *p = r + 34 * (size_t)(i / 32);
        return __fmul_rn((float)(int8_t)p[2 + i % 32], emb_h(p));
    }
    case KRN_Q4_0: { /* (q - 8) * d */
        const uint8_t *p = r + 18 * (size_t)(i / 32);
        return __fmul_rn((float)((int)gguf_q4_nib(p + 2, i % 32) - 8), emb_h(p));
    }
    case KRN_Q4_1: { /* q * d + m */
        const uint8_t *p = r + 20 * (size_t)(i / 32);
        return __fadd_rn(__fmul_rn((float)gguf_q4_nib(p + 4, i % 32), emb_h(p)), emb_h(p + 2));
    }
    case KRN_Q4_K: return emb_q4_K(r + 144 * (size_t)(i / 256), i % 256);
    case KRN_Q5_K: return emb_q5_K(r + 176 * (size_t)(i / 256), i % 256);
    case KRN_Q6_K: return emb_q6_K(r + 210 * (size_t)(i / 256), i % 256);
    default: return 0.0f; /* refused on the host */
    }
}

__global__ void __launch_bounds__(EMB_THREADS) embed_rows_kernel(float *__restrict__ y,
                                                                  const uint8_t *__restrict__ table,
                                                                  const int32_t *__restrict__ tokens, int type,
                                                                  int n_out, int n, size_t row_bytes) {
    krn_pdl_enter(); /* tokens may be the previous kernel's output (the sampled token) */
    const int32_t tok = tokens[blockIdx.x];
    float *yr = y + (size_t)blockIdx.x * n;
    const int i0 = (int)blockIdx.y * EMB_THREADS + (int)threadIdx.x, step = (int)gridDim.y * EMB_THREADS;
    if (tok < 0 || tok >= n_out) {
        for (int i = i0; i < n; i += step)
            yr[i] = 0.0f;
        return;
    }
    const uint8_t *r = table + (size_t)tok * row_bytes;
    for (int i = i0; i < n; i += step)
        yr[i] = emb_elem(type, r, i);
}

extern "C" int krn_cuda_embed_rows_async(void *cuda_stream, float *y, const krn_weight *T, const int32_t *tokens,
                                         int B, dev_err *err) {
    if (!T)
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_embed_rows: the table T is NULL");
    if (!krn_type_supported(T->type))
        return dev_err_set(err, MEMRA_E_INVAL,
                           "krn_cuda_embed_rows: table type %d unsupported (allowed: f32, f16, bf16, q8_0, q4_0, "
                           "q4_1, q4_K, q5_K, q6_K)", T->type);
    if (T->layout != KRN_LAYOUT_BLOCKS)
        return dev_err_set(err, MEMRA_E_INVAL,
                           "krn_cuda_embed_rows: table layout %d (allowed: KRN_LAYOUT_BLOCKS, GGUF rows; planes "
                           "are a matmul format)", T->layout);
    if (B < 0 || T->n_out <= 0 || T->n_in <= 0)
        return dev_err_set(err, MEMRA_E_INVAL,
                           "krn_cuda_embed_rows: B=%d T->n_out=%d T->n_in=%d (need B >= 0, n_out > 0, n_in > 0)", B,
                           T->n_out, T->n_in);
    const size_t rb = krn_row_bytes(T->type, T->n_in);
    if (rb == 0)
        return dev_err_set(err, MEMRA_E_INVAL,
                           "krn_cuda_embed_rows: T->n_in=%d is not a multiple of %d (the %s block)", T->n_in,
                           krn_type_block_elems(T->type), krn_type_name(T->type));
    if (B == 0)
        return 0;
    if (!y || !T->data || !tokens)
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_embed_rows: %s is NULL (need device pointers)",
                           !y ? "y" : !T->data ? "T->data" : "tokens");
    const int slices = (T->n_in + EMB_THREADS - 1) / EMB_THREADS; /* grid.y <= 65535: a slice then walks */
    const dim3 grid((unsigned)B, (unsigned)(slices < 65535 ? slices : 65535));
    krn_launch(embed_rows_kernel, grid, EMB_THREADS, 0, (cudaStream_t)cuda_stream, y,
               (const uint8_t *)T->data, tokens, T->type, T->n_out, T->n_in, rb);
    return krn_cuda_launch_check(err, "krn_cuda_embed_rows");
}
