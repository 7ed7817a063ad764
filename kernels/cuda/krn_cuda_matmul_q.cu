/* Fused dequant GEMV for the block types (q4_0, q4_1, q8_0, q4_k, q5_k, q6_k): y (B, n_out) = x (B, n_in) @ W^T.
 *
 * A 128-thread block computes groups of R consecutive output rows (R = 4 at B <= 2, 2 at B <= 4, 1 above),
 * group g, g + gridDim.x, ... (the grid is at most MM_MINB(NB) blocks per SM). Its 4 warps split the rows into
 * chunks of CB blocks, chunk c going to warp c % 4; each warp stages its chunk of all R rows into its own
 * shared buffers with 16-byte streaming loads (every lane's loads of all R rows in flight at once; the next
 * chunk's loads, of this group or the next, are issued before the current one is decoded), then each lane
 * decodes sub-items (8 or 16 weights) of the R rows and multiplies them with x, whose values it loads ONCE
 * per sub-item for all R rows (at B = 1, x read per row through L1 costs 7x the weight bytes).
 * Decoding: the bytes of a packed word go into the mantissa of 2^23 by one byte permute, then one
 * subtraction gives q - offset exactly (no int->float conversion, which is 1/8 of the FMA rate on sm_90).
 * x is of an activation type XT (f32, f16, bf16; a template parameter): ldx widens 16-bit elements exactly as
 * it loads them (4 elements: 16 bytes f32, 8 bytes 16-bit; 8 elements: 16 bytes 16-bit; x 16-byte aligned),
 * and everything after the load is the f32 arithmetic, so a 16-bit x gives the bits of the widened f32 x.
 * Determinism: lane l of warp w adds, in chunk order, the sub-items l, l+32, ... of chunks w, w+4, ...;
 * a butterfly sums the lanes; the 4 warp totals are added in warp order. This order depends on neither B
 * nor R, so a row's result has the same bits in any batch. No atomics.
 * Shared mutable state: none (shared buffers live for one launch). */
#include <stdlib.h>

#include "kernels/cuda/krn_cuda_matmul.cuh"
#include "kernels/cuda/krn_cuda_gguf.cuh"

/* Blocks per SM the compiler must fit, and the grid's blocks per SM: 4 at B <= 2 (128 registers a thread,
 * 16 warps per SM), 3 above (no spills with more rows of x). */
#define MM_MINB(NB) ((NB) <= 2 ? 4 : 3)

/* Layout of each block type: BE elements and BB bytes per block, SPB sub-items per block (one lane's unit),
 * CB blocks per chunk (CB*SPB a multiple of 32, fixed per type: it sets the summation order). */
template <int T> struct mm_layout;
template <> struct mm_layout<KRN_Q4_0> { enum { BE = 32, BB = 18, SPB = 4, CB = 32 }; };
template <> struct mm_layout<KRN_Q4_1> { enum { BE = 32, BB = 20, SPB = 4, CB = 32 }; };
template <> struct mm_layout<KRN_Q8_0> { enum { BE = 32, BB = 34, SPB = 4, CB = 32 }; };
template <> struct mm_layout<KRN_Q4_K> { enum { BE = 256, BB = 144, SPB = 16, CB = 4 }; };
template <> struct mm_layout<KRN_Q5_K> { enum { BE = 256, BB = 176, SPB = 16, CB = 4 }; };
template <> struct mm_layout<KRN_Q6_K> { enum { BE = 256, BB = 210, SPB = 16, CB = 4 }; };

/* 16-byte vectors per lane to stage one chunk of one row at any alignment: ceil((15 + CB*BB + 15) / 16)
 * vectors at most, over 32 lanes. */
template <int T> struct mm_vpl {
    enum { V = ((mm_layout<T>::CB * mm_layout<T>::BB + 30) / 16 + KRN_WARP - 1) / KRN_WARP };
};

/* Two little-endian u16 from shared memory (p 2-byte aligned) as one u32. */
static __device__ __forceinline__ uint32_t ld_u32_2(const uint8_t *p) {
    const uint16_t *q = (const uint16_t *)p;
    return (uint32_t)q[0] | ((uint32_t)q[1] << 16);
}
static __device__ __forceinline__ uint16_t ld_u16(const uint8_t *p) { return *(const uint16_t *)p; }

/* Byte I of v, minus off, as a float: the byte permute builds the bits of 2^23 + byte, and the subtraction
 * of 2^23 + off is exact for small integer off. Same value as (float)((int)byte - off). */
template <int I>
static __device__ __forceinline__ float byte_f(uint32_t v, float off) {
    return __uint_as_float(__byte_perm(v, 0x4B000000u, 0x7540u | I)) - (8388608.0f + off);
}
/* The 4 bytes of v minus off, as floats w[0..3]. */
static __device__ __forceinline__ void bytes_f(uint32_t v, float off, float *w) {
    w[0] = byte_f<0>(v, off);
    w[1] = byte_f<1>(v, off);
    w[2] = byte_f<2>(v, off);
    w[3] = byte_f<3>(v, off);
}

/* Sum of 4 products in a fixed order, starting from t. */
static __device__ __forceinline__ float dot4(float t, const float *w, float4 a) {
    t = fmaf(w[0], a.x, t);
    t = fmaf(w[1], a.y, t);
    t = fmaf(w[2], a.z, t);
    return fmaf(w[3], a.w, t);
}
static __device__ __forceinline__ float sum4(float t, float4 a) { return t + a.x + a.y + a.z + a.w; }

/* ---- one sub-item per type, in three steps: dec (the weights of one row's block from shared memory,
 * bp = the block, k = the sub-item in it), ldx<XT> (x for the sub-item from row b's x at the block's first
 * element, shared by the R rows), dot (acc += the sub-item's part of the dot product). The formulas are
 * those of the first version of this file, so the results stay within tests/gpu_kernels.c tolerances. ---- */

template <int T> struct mm_sub;

/* q4_0 sub k (0..3): qs[4k..4k+4): low nibbles = elements 4k.., high = 16+4k..; x = d*(q-8). */
template <> struct mm_sub<KRN_Q4_0> {
    enum { NX = 2 };
    struct w_t { float w[8], d; };
    static __device__ __forceinline__ void dec(const uint8_t *bp, int k, w_t &o) {
        o.d = krn_h2f(ld_u16(bp));
        const uint32_t q = ld_u32_2(bp + 2 + 4 * k);
        bytes_f(q & 0x0F0F0F0Fu, 8.0f, o.w);
        bytes_f((q >> 4) & 0x0F0F0F0Fu, 8.0f, o.w + 4);
    }
    template <int XT>
    static __device__ __forceinline__ void ldx(const krn_act_e<XT> *xb, int k, float4 (&xv)[NX], float (&xs)[2]) {
        xv[0] = krn_ldx4<XT>(xb + 4 * k);
        xv[1] = krn_ldx4<XT>(xb + 16 + 4 * k);
        xs[0] = xs[1] = 0.0f;
    }
    static __device__ __forceinline__ float dot(const w_t &o, const float4 (&xv)[NX], const float (&xs)[2],
                                                float acc) {
        (void)xs;
        return fmaf(o.d, dot4(0.0f, o.w, xv[0]) + dot4(0.0f, o.w + 4, xv[1]), acc); /* two chains in parallel */
    }
};

/* q4_1 sub k: as q4_0 with x = d*q + m. */
template <> struct mm_sub<KRN_Q4_1> {
    enum { NX = 2 };
    struct w_t { float w[8], d, m; };
    static __device__ __forceinline__ void dec(const uint8_t *bp, int k, w_t &o) {
        o.d = krn_h2f(ld_u16(bp));
        o.m = krn_h2f(ld_u16(bp + 2));
        const uint32_t q = ld_u32_2(bp + 4 + 4 * k);
        bytes_f(q & 0x0F0F0F0Fu, 0.0f, o.w);
        bytes_f((q >> 4) & 0x0F0F0F0Fu, 0.0f, o.w + 4);
    }
    template <int XT>
    static __device__ __forceinline__ void ldx(const krn_act_e<XT> *xb, int k, float4 (&xv)[NX], float (&xs)[2]) {
        xv[0] = krn_ldx4<XT>(xb + 4 * k);
        xv[1] = krn_ldx4<XT>(xb + 16 + 4 * k);
        xs[0] = sum4(sum4(0.0f, xv[0]), xv[1]);
        xs[1] = 0.0f;
    }
    static __device__ __forceinline__ float dot(const w_t &o, const float4 (&xv)[NX], const float (&xs)[2],
                                                float acc) {
        const float t = dot4(0.0f, o.w, xv[0]) + dot4(0.0f, o.w + 4, xv[1]); /* two chains in parallel */
        return fmaf(o.d, t, fmaf(o.m, xs[0], acc));
    }
};

/* q8_0 sub k: int8 qs[8k..8k+8) = elements 8k..8k+7; x = d*q (int8 b as (b ^ 0x80) - 128). */
template <> struct mm_sub<KRN_Q8_0> {
    enum { NX = 2 };
    struct w_t { float w[8], d; };
    static __device__ __forceinline__ void dec(const uint8_t *bp, int k, w_t &o) {
        o.d = krn_h2f(ld_u16(bp));
        bytes_f(ld_u32_2(bp + 2 + 8 * k) ^ 0x80808080u, 128.0f, o.w);
        bytes_f(ld_u32_2(bp + 6 + 8 * k) ^ 0x80808080u, 128.0f, o.w + 4);
    }
    template <int XT>
    static __device__ __forceinline__ void ldx(const krn_act_e<XT> *xb, int k, float4 (&xv)[NX], float (&xs)[2]) {
        KRN_LDX8(XT, xb + 8 * k, xv[0], xv[1]);
        xs[0] = xs[1] = 0.0f;
    }
    static __device__ __forceinline__ float dot(const w_t &o, const float4 (&xv)[NX], const float (&xs)[2],
                                                float acc) {
        (void)xs;
        return fmaf(o.d, dot4(0.0f, o.w, xv[0]) + dot4(0.0f, o.w + 4, xv[1]), acc); /* two chains in parallel */
    }
};

/* Q4_K 6-bit scale and min of sub-block j (0..7) as floats (exact: the integer in a float's mantissa). */
static __device__ __forceinline__ void q4k_scale_min(int j, const uint8_t *s, float *sc, float *mn) {
    uint32_t a, b;
    gguf_q4k_scale_min(j, s, &a, &b);
    *sc = __uint_as_float(0x4B000000u | a) - 8388608.0f;
    *mn = __uint_as_float(0x4B000000u | b) - 8388608.0f;
}

/* q4_K sub s (0..15): pair p = s/4 covers elements 64p..64p+63 with qs[32p..32p+32); lane part k = s%4
 * reads qs[32p+8k..+8): low nibbles = elements 64p+8k.. (sub-block 2p), high = 64p+32+8k.. (2p+1);
 * x = d*sc*q - dmin*m. 16 weights per sub-item, so the scale decode is paid once per 16. */
template <> struct mm_sub<KRN_Q4_K> {
    enum { NX = 4 };
    struct w_t { float w[16], d1, d2, n1, n2; };
    /* the scales of sub-blocks 2p and 2p + 1 (the same 12 bytes in q4_K and q5_K) */
    static __device__ __forceinline__ void scales(const uint8_t *bp, int p, w_t &o) {
        const float d = krn_h2f(ld_u16(bp)), dmin = krn_h2f(ld_u16(bp + 2));
        float sc1, m1, sc2, m2;
        q4k_scale_min(2 * p, bp + 4, &sc1, &m1);
        q4k_scale_min(2 * p + 1, bp + 4, &sc2, &m2);
        o.d1 = d * sc1;
        o.d2 = d * sc2;
        o.n1 = dmin * m1;
        o.n2 = dmin * m2;
    }
    static __device__ __forceinline__ void dec(const uint8_t *bp, int s, w_t &o) {
        const int p = s >> 2, k = s & 3;
        scales(bp, p, o);
        const uint32_t q0 = ld_u32_2(bp + 16 + 32 * p + 8 * k), q1 = ld_u32_2(bp + 20 + 32 * p + 8 * k);
        bytes_f(q0 & 0x0F0F0F0Fu, 0.0f, o.w);
        bytes_f(q1 & 0x0F0F0F0Fu, 0.0f, o.w + 4);
        bytes_f((q0 >> 4) & 0x0F0F0F0Fu, 0.0f, o.w + 8);
        bytes_f((q1 >> 4) & 0x0F0F0F0Fu, 0.0f, o.w + 12);
    }
    template <int XT>
    static __device__ __forceinline__ void ldx(const krn_act_e<XT> *xb, int s, float4 (&xv)[NX], float (&xs)[2]) {
        const krn_act_e<XT> *xr = xb + 64 * (s >> 2) + 8 * (s & 3);
        KRN_LDX8(XT, xr, xv[0], xv[1]);
        KRN_LDX8(XT, xr + 32, xv[2], xv[3]);
        xs[0] = sum4(sum4(0.0f, xv[0]), xv[1]);
        xs[1] = sum4(sum4(0.0f, xv[2]), xv[3]);
    }
    static __device__ __forceinline__ float dot(const w_t &o, const float4 (&xv)[NX], const float (&xs)[2],
                                                float r) {
        const float tl = dot4(0.0f, o.w, xv[0]) + dot4(0.0f, o.w + 4, xv[1]);
        const float th = dot4(0.0f, o.w + 8, xv[2]) + dot4(0.0f, o.w + 12, xv[3]);
        r = fmaf(o.d1, tl, r);
        r = fmaf(-o.n1, xs[0], r);
        r = fmaf(o.d2, th, r);
        return fmaf(-o.n2, xs[1], r);
    }
};

/* q5_K sub s: q4_K's sub-item (same scales, x and dot) over qs at byte 48, plus bit 4 of each quant from
 * qh[8k..8k+8) (byte 16): bit 2p for the low nibbles (sub-block 2p), bit 2p+1 for the high ones. Shifting a
 * whole word right by 2p (< 8) and masking bit 0 of each byte keeps only each byte's own bit. */
template <> struct mm_sub<KRN_Q5_K> : mm_sub<KRN_Q4_K> {
    static __device__ __forceinline__ void dec(const uint8_t *bp, int s, w_t &o) {
        const int p = s >> 2, k = s & 3;
        scales(bp, p, o);
        const uint32_t q0 = ld_u32_2(bp + 48 + 32 * p + 8 * k), q1 = ld_u32_2(bp + 52 + 32 * p + 8 * k);
        const uint32_t h0 = ld_u32_2(bp + 16 + 8 * k), h1 = ld_u32_2(bp + 20 + 8 * k);
        bytes_f((q0 & 0x0F0F0F0Fu) | (((h0 >> (2 * p)) & 0x01010101u) << 4), 0.0f, o.w);
        bytes_f((q1 & 0x0F0F0F0Fu) | (((h1 >> (2 * p)) & 0x01010101u) << 4), 0.0f, o.w + 4);
        bytes_f(((q0 >> 4) & 0x0F0F0F0Fu) | (((h0 >> (2 * p + 1)) & 0x01010101u) << 4), 0.0f, o.w + 8);
        bytes_f(((q1 >> 4) & 0x0F0F0F0Fu) | (((h1 >> (2 * p + 1)) & 0x01010101u) << 4), 0.0f, o.w + 12);
    }
};

/* q6_K sub s (0..15): half n = s/8 (elements 128n..128n+127), l = 4*(s%8) .. +3: for each l, the four
 * elements 128n + l + {0,32,64,96} from ql[64n+l] / ql[64n+32+l] (low, high nibbles) and qh[32n+l]
 * (2 bits each), scales sc[8n + l/16 + {0,2,4,6}]; x = d*sc*(q-32). */
template <> struct mm_sub<KRN_Q6_K> {
    enum { NX = 4 };
    struct w_t { float w[16], d1, d2, d3, d4; };
    static __device__ __forceinline__ void dec(const uint8_t *bp, int s, w_t &o) {
        const int n = s >> 3, l0 = 4 * (s & 7);
        const uint32_t qa = ld_u32_2(bp + 64 * n + l0), qb = ld_u32_2(bp + 64 * n + 32 + l0);
        const uint32_t qh = ld_u32_2(bp + 128 + 32 * n + l0);
        const uint8_t *scu = bp + 192 + 8 * n + l0 / 16; /* int8 scales; b as a float: (b ^ 0x80) - 128 */
        const float d = krn_h2f(ld_u16(bp + 208));
        o.d1 = d * (__uint_as_float(0x4B000000u | (scu[0] ^ 0x80u)) - 8388736.0f);
        o.d2 = d * (__uint_as_float(0x4B000000u | (scu[2] ^ 0x80u)) - 8388736.0f);
        o.d3 = d * (__uint_as_float(0x4B000000u | (scu[4] ^ 0x80u)) - 8388736.0f);
        o.d4 = d * (__uint_as_float(0x4B000000u | (scu[6] ^ 0x80u)) - 8388736.0f);
        /* per byte: w1 = (a & 0xF) | (h & 3) << 4, w2 = (b & 0xF) | (h >> 2 & 3) << 4,
         * w3 = a >> 4 | (h >> 4 & 3) << 4, w4 = b >> 4 | (h >> 6 & 3) << 4 */
        bytes_f((qa & 0x0F0F0F0Fu) | ((qh << 4) & 0x30303030u), 32.0f, o.w);
        bytes_f((qb & 0x0F0F0F0Fu) | ((qh << 2) & 0x30303030u), 32.0f, o.w + 4);
        bytes_f(((qa >> 4) & 0x0F0F0F0Fu) | (qh & 0x30303030u), 32.0f, o.w + 8);
        bytes_f(((qb >> 4) & 0x0F0F0F0Fu) | ((qh >> 2) & 0x30303030u), 32.0f, o.w + 12);
    }
    template <int XT>
    static __device__ __forceinline__ void ldx(const krn_act_e<XT> *xb, int s, float4 (&xv)[NX], float (&xs)[2]) {
        const krn_act_e<XT> *xr = xb + 128 * (s >> 3) + 4 * (s & 7);
        xv[0] = krn_ldx4<XT>(xr);
        xv[1] = krn_ldx4<XT>(xr + 32);
        xv[2] = krn_ldx4<XT>(xr + 64);
        xv[3] = krn_ldx4<XT>(xr + 96);
        xs[0] = xs[1] = 0.0f;
    }
    static __device__ __forceinline__ float dot(const w_t &o, const float4 (&xv)[NX], const float (&xs)[2],
                                                float r) {
        (void)xs;
        r = fmaf(o.d1, dot4(0.0f, o.w, xv[0]), r);
        r = fmaf(o.d2, dot4(0.0f, o.w + 4, xv[1]), r);
        r = fmaf(o.d3, dot4(0.0f, o.w + 8, xv[2]), r);
        return fmaf(o.d4, dot4(0.0f, o.w + 12, xv[3]), r);
    }
};

/* ---- staging ---- */

/* 16 bytes at p where only [lo, hi) may be read (the tensor's first or last partial vector): bytes
 * outside are zero (never decoded). */
static __device__ __noinline__ uint4 ld_partial16(const uint8_t *p, const uint8_t *lo, const uint8_t *hi) {
    uint32_t w[4] = {0, 0, 0, 0};
    for (int i = 0; i < 16; i++)
        if (p + i >= lo && p + i < hi)
            w[i / 4] |= (uint32_t)p[i] << (8 * (i % 4));
    return make_uint4(w[0], w[1], w[2], w[3]);
}

/* Issue the loads of nv 16-byte vectors from a0 (16-byte aligned) into v: lane owns vectors lane + 32*i.
 * [wbeg, wend) is the whole tensor: vectors straddling its ends are read byte by byte. */
template <int VPL>
static __device__ __forceinline__ void stage_load(uint4 *v, const uint8_t *a0, int nv, const uint8_t *wbeg,
                                                  const uint8_t *wend, int lane) {
    if (a0 >= wbeg && a0 + 16 * (size_t)nv <= wend) { /* every chunk but the tensor's first and last */
#pragma unroll
        for (int i = 0; i < VPL; i++) {
            const int k = lane + KRN_WARP * i;
            if (k < nv)
                v[i] = krn_ld_stream16(a0 + 16 * (size_t)k);
        }
        return;
    }
#pragma unroll
    for (int i = 0; i < VPL; i++) {
        const int k = lane + KRN_WARP * i;
        const uint8_t *p = a0 + 16 * (size_t)k;
        if (k < nv)
            v[i] = (p >= wbeg && p + 16 <= wend) ? krn_ld_stream16(p) : ld_partial16(p, wbeg, wend);
    }
}

template <int VPL>
static __device__ __forceinline__ void stage_store(uint8_t *sb, const uint4 *v, int nv, int lane) {
#pragma unroll
    for (int i = 0; i < VPL; i++) {
        const int k = lane + KRN_WARP * i;
        if (k < nv)
            ((uint4 *)sb)[k] = v[i];
    }
}

/* Issue the loads of chunk c (blocks c*CB ..) of the R rows of group g into v (off, nv: each row's
 * alignment offset and vector count, for the store and the decode). Rows past n_out repeat row n_out-1
 * (read, never written). Returns the chunk's block count. */
template <int T, int R, int VPL>
static __device__ __forceinline__ int stage_issue(uint4 (&v)[R][VPL], int (&off)[R], int (&nv)[R],
                                                  const uint8_t *W, size_t row_bytes, int n_out, int nblocks,
                                                  int g, int c, int lane) {
    enum { BB = mm_layout<T>::BB, CB = mm_layout<T>::CB };
    const uint8_t *wbeg = W, *wend = W + (size_t)n_out * row_bytes;
    const int nbc = min((int)CB, nblocks - c * CB);
#pragma unroll
    for (int r = 0; r < R; r++) {
        const uint8_t *g0 = W + (size_t)min(g * R + r, n_out - 1) * row_bytes + (size_t)c * CB * BB;
        off[r] = (int)((uintptr_t)g0 & 15);
        nv[r] = (off[r] + nbc * BB + 15) >> 4;
        stage_load<VPL>(v[r], g0 - off[r], nv[r], wbeg, wend, lane);
    }
    return nbc;
}

/* Sub-item s of the chunk in sb (row r at sb[r] + coff[r]) against x (type XT) at the chunk's first element: x
 * once for the R rows, then each row's weights decoded and multiplied (acc[r][b] += ...). */
template <int T, int XT, int NB, int R, int SBYTES>
static __device__ __forceinline__ void mm_sub_item(uint8_t (*sb)[SBYTES], const int (&coff)[R],
                                                   const krn_act_e<XT> *xc, int n_in, int s, float (&acc)[R][NB]) {
    typedef mm_sub<T> S;
    enum { BE = mm_layout<T>::BE, BB = mm_layout<T>::BB, SPB = mm_layout<T>::SPB };
    const int blk = s / SPB, k = s % SPB;
    float4 xv[NB][S::NX];
    float xs[NB][2];
#pragma unroll
    for (int b = 0; b < NB; b++)
        S::template ldx<XT>(xc + (size_t)b * n_in + blk * BE, k, xv[b], xs[b]);
#pragma unroll
    for (int r = 0; r < R; r++) {
        typename S::w_t wr;
        S::dec(sb[r] + coff[r] + blk * BB, k, wr);
#pragma unroll
        for (int b = 0; b < NB; b++)
            acc[r][b] = S::dot(wr, xv[b], xs[b], acc[r][b]);
    }
}

/* Row groups g = blockIdx.x, + gridDim.x, ... of R rows each; see the file comment. A warp's work is the
 * sequence of (group, chunk) items; the loads of the next item (the next chunk, or the first chunk of the
 * next group) are in flight while the current one is decoded and while the block reduces a finished
 * group, so every warp keeps memory busy across groups. red is double-buffered by group parity: a group's
 * writers pass the barrier of the previous group, which its readers reach only after reading. */
template <int T, int XT, int NB, int R, int MB>
__global__ void __launch_bounds__(MM_WARPS *KRN_WARP, MB)
    mm_block_kernel(float *__restrict__ y, const uint8_t *__restrict__ W, const krn_act_e<XT> *__restrict__ x,
                    int n_out, int n_in, size_t row_bytes, int acc_y) {
    enum { BE = mm_layout<T>::BE, BB = mm_layout<T>::BB, SPB = mm_layout<T>::SPB, CB = mm_layout<T>::CB };
    enum { VPL = mm_vpl<T>::V, SUBS = CB * SPB / KRN_WARP };
        __shared__ __align__(16) uint8_t smem[MM_WARPS][R][VPL * KRN_WARP * 16];
    __shared__ float red[2][MM_WARPS][R * NB];
    const int lane = threadIdx.x % KRN_WARP, warp = threadIdx.x / KRN_WARP;
    const int ngroups = (n_out + R - 1) / R;
    const int nblocks = n_in / BE, nchunks = (nblocks + CB - 1) / CB;
    const bool active = warp < nchunks; /* this warp has chunks in every group */

    uint4 v[R][VPL];
    int off[R], nv[R], nbc = 0;
    if (active && (int)blockIdx.x < ngroups)
        nbc = stage_issue<T, R, VPL>(v, off, nv, W, row_bytes, n_out, nblocks, blockIdx.x, warp, lane);
    /* The first chunk's weight loads fly before the PDL wait: W is immutable during a forward (written at load,
     * then the loading stream synced), only x comes from the predecessor kernel. */
    krn_pdl_enter_after_loads();
    int buf = 0;
    for (int g = blockIdx.x; g < ngroups; g += gridDim.x, buf ^= 1) {
        float acc[R][NB];
        mm_acc_zero<R, NB>(acc);
        if (active) {
            for (int c = warp; c < nchunks; c += MM_WARPS) {
                int coff[R];
#pragma unroll
                for (int r = 0; r < R; r++) {
                    stage_store<VPL>(smem[warp][r], v[r], nv[r], lane);
                    coff[r] = off[r];
                }
                __syncwarp(); /* the chunk in smem[warp] is complete for every lane */
                const int nsub = nbc * SPB;
                int gn = g, cn = c + MM_WARPS; /* the next item: its loads fly while this one is decoded */
                if (cn >= nchunks) {
                    gn = g + gridDim.x;
                    cn = warp;
                }
                if (gn < ngroups)
                    nbc = stage_issue<T, R, VPL>(v, off, nv, W, row_bytes, n_out, nblocks, gn, cn, lane);
                const krn_act_e<XT> *xc = x + (size_t)c * CB * BE;
                if (nsub == CB * SPB) { /* a full chunk: no bounds per sub-item, loads free to move up */
#pragma unroll
                    for (int j = 0; j < SUBS; j++)
                        mm_sub_item<T, XT, NB, R>(smem[warp], coff, xc, n_in, lane + KRN_WARP * j, acc);
                } else {
#pragma unroll
                    for (int j = 0; j < SUBS; j++)
                        if (lane + KRN_WARP * j < nsub)
                            mm_sub_item<T, XT, NB, R>(smem[warp], coff, xc, n_in, lane + KRN_WARP * j, acc);
                }
                __syncwarp(); /* every lane is done reading smem[warp] before it is overwritten */
            }
        }
        mm_group_store<R, NB>(red, buf, acc, y, n_out, g, acc_y);
    }
}

/* ---- host side ---- */

/* Rows per block for nb rows of x: more rows share each x load, fewer keep the accumulators in registers.
 * MEMRA_CUDA_MM_ROWS=1|2|4 overrides it at nb <= 2 (a tuning knob for memra-bench; results have the same
 * bits for any R). */
static int mm_rows(int nb) {
    static int forced = KRN_TUNE_UNREAD;
    static const int allowed[] = {1, 2, 4};
    const int f = krn_cuda_tune("MEMRA_CUDA_MM_ROWS", allowed, 3, &forced);
    if (nb <= 2)
        return f ? f : 4;
    return nb <= 4 ? 2 : 1;
}

/* Grid: at most MB blocks per SM (all resident at once), the groups spread evenly over the rounds. */
template <int T, int XT, int NB, int R, int MB>
static void mm_q_go(const mm_args *a, cudaStream_t st) {
    static int bps_env = KRN_TUNE_UNREAD; /* MEMRA_CUDA_MM_BPS=1..5: grid blocks per SM; -1: a block per group */
    static const int allowed[] = {-1, 1, 2, 3, 4, 5};
    const int bps_f = krn_cuda_tune("MEMRA_CUDA_MM_BPS", allowed, 6, &bps_env);
    const int bps = bps_f >= 1 && bps_f <= MB ? bps_f : MB;
    const int blocks = mm_resident_grid((a->n_out + R - 1) / R, bps_f == -1 ? 0 : bps * krn_cuda_sm_count());
    const dim3 grid((unsigned)blocks), block(MM_WARPS * KRN_WARP);
    krn_launch(mm_block_kernel<T, XT, NB, R, MB>, grid, block, 0, st, a->y, a->W, (const krn_act_e<XT> *)a->x,
               a->n_out, a->n_in, a->row_bytes, a->acc);
}

/* B = 1: 4 blocks per SM at 128 registers (measured faster than 5 at 96 on every type and 8B shape, H200,
 * docs/bench/gpu-kernels.md); MEMRA_CUDA_MM_MINB=5 selects the 5-block build (tuning knob). */
template <int T, int XT, int R>
static void mm_q_go1(const mm_args *a, cudaStream_t st) {
    static int mb_env = KRN_TUNE_UNREAD;
    static const int allowed[] = {4, 5};
    if (krn_cuda_tune("MEMRA_CUDA_MM_MINB", allowed, 2, &mb_env) == 5)
        mm_q_go<T, XT, 1, R, 5>(a, st);
    else
        mm_q_go<T, XT, 1, R, MM_MINB(1)>(a, st);
}

template <int T, int XT, int NB>
static void mm_q_nb(const mm_args *a, int R, cudaStream_t st) {
    if constexpr (NB == 1) {
        if (R == 4)
            mm_q_go1<T, XT, 4>(a, st);
        else if (R == 2)
            mm_q_go1<T, XT, 2>(a, st);
        else
            mm_q_go1<T, XT, 1>(a, st);
    } else if constexpr (NB == 2) {
        if (R == 4)
            mm_q_go<T, XT, NB, 4, MM_MINB(NB)>(a, st);
        else if (R == 2)
            mm_q_go<T, XT, NB, 2, MM_MINB(NB)>(a, st);
        else
            mm_q_go<T, XT, NB, 1, MM_MINB(NB)>(a, st);
    } else if constexpr (NB <= 4 && T != KRN_Q4_K && T != KRN_Q5_K) { /* 16 x values per row of x: R = 2 would spill */
        mm_q_go<T, XT, NB, 2, MM_MINB(NB)>(a, st);
    } else {
        mm_q_go<T, XT, NB, 1, MM_MINB(NB)>(a, st);
    }
}

template <int T, int XT>
static void mm_q_type(const mm_args *a, int nb, cudaStream_t st) {
    const int R = mm_rows(nb);
    switch (nb) {
    case 1: mm_q_nb<T, XT, 1>(a, R, st); break;
    case 2: mm_q_nb<T, XT, 2>(a, R, st); break;
    case 3: mm_q_nb<T, XT, 3>(a, R, st); break;
    case 4: mm_q_nb<T, XT, 4>(a, R, st); break;
    case 5: mm_q_nb<T, XT, 5>(a, R, st); break;
    case 6: mm_q_nb<T, XT, 6>(a, R, st); break;
    case 7: mm_q_nb<T, XT, 7>(a, R, st); break;
    default: mm_q_nb<T, XT, 8>(a, R, st); break;
    }
}

template <int XT>
static void mm_q_xt(int type, const mm_args *a, int nb, cudaStream_t st) {
    switch (type) {
    case KRN_Q4_0: mm_q_type<KRN_Q4_0, XT>(a, nb, st); break;
    case KRN_Q4_1: mm_q_type<KRN_Q4_1, XT>(a, nb, st); break;
    case KRN_Q8_0: mm_q_type<KRN_Q8_0, XT>(a, nb, st); break;
    case KRN_Q4_K: mm_q_type<KRN_Q4_K, XT>(a, nb, st); break;
    case KRN_Q5_K: mm_q_type<KRN_Q5_K, XT>(a, nb, st); break;
    default: mm_q_type<KRN_Q6_K, XT>(a, nb, st); break;
    }
}

void mm_q_launch(int type, const mm_args *a, int nb, cudaStream_t st) {
    switch (a->xt) {
    case KRN_F16: mm_q_xt<KRN_F16>(type, a, nb, st); break;
    case KRN_BF16: mm_q_xt<KRN_BF16>(type, a, nb, st); break;
    default: mm_q_xt<KRN_F32>(type, a, nb, st); break;
    }
}
