/* Fused dequant GEMV: y (B, n_out) = x (B, n_in) @ W^T for every krn_type, B <= 8 rows per launch.
 *
 * One warp per output row, MM_WARPS rows per block. Block types (q4_0, q4_1, q8_0, q4_k, q6_k): the warp
 * walks its row in chunks of CB blocks; each chunk's bytes are staged into the warp's shared buffer with
 * 16-byte streaming loads (VPL per lane, all in flight at once; the next chunk's loads are issued before
 * the current one is decoded), then each lane decodes "sub-items" of 8 or 16 weights out of shared memory
 * and multiplies them with all B rows of x (float4 loads, coalesced across the lanes of a block). Float
 * types (f32, f16, bf16): each lane reads 8 consecutive weights per 16-byte load (4 loads in flight), or
 * one at a time when the row is not 16-byte aligned.
 * Determinism: each lane accumulates in a fixed order, then a butterfly shuffle sum in a fixed order; no
 * atomics. The order does not depend on B, so a row's result has the same bits in any batch.
 * Shared mutable state: none (per-warp shared buffers live for one launch). */
#include "kernels/cuda/krn_cuda_util.cuh"

#define MM_WARPS 4 /* warps = output rows per block */
#define MM_MAX_B 8 /* x rows per launch (accumulators in registers) */

/* Layout of each block type: BE elements and BB bytes per block, SPB sub-items per block (a sub-item is one
 * lane's unit of work), CB blocks per staged chunk, VPL 16-byte vectors per lane to stage a chunk at any
 * alignment: ceil((15 + CB*BB + 15) / 16) vectors at most, over 32 lanes. */
template <int T> struct mm_layout;
template <> struct mm_layout<KRN_Q4_0> { enum { BE = 32, BB = 18, SPB = 4, CB = 64 }; };
template <> struct mm_layout<KRN_Q4_1> { enum { BE = 32, BB = 20, SPB = 4, CB = 64 }; };
template <> struct mm_layout<KRN_Q8_0> { enum { BE = 32, BB = 34, SPB = 4, CB = 64 }; };
template <> struct mm_layout<KRN_Q4_K> { enum { BE = 256, BB = 144, SPB = 32, CB = 8 }; };
template <> struct mm_layout<KRN_Q6_K> { enum { BE = 256, BB = 210, SPB = 16, CB = 8 }; };

template <int T> struct mm_vpl {
    enum { V = ((mm_layout<T>::CB * mm_layout<T>::BB + 30) / 16 + KRN_WARP - 1) / KRN_WARP };
};

/* Two little-endian u16 from shared memory (p 2-byte aligned) as one u32. */
static __device__ __forceinline__ uint32_t ld_u32_2(const uint8_t *p) {
    const uint16_t *q = (const uint16_t *)p;
    return (uint32_t)q[0] | ((uint32_t)q[1] << 16);
}
static __device__ __forceinline__ uint16_t ld_u16(const uint8_t *p) { return *(const uint16_t *)p; }

/* Sum of 4 products in a fixed order, starting from t. */
static __device__ __forceinline__ float dot4(float t, float w0, float w1, float w2, float w3, float4 a) {
    t = fmaf(w0, a.x, t);
    t = fmaf(w1, a.y, t);
    t = fmaf(w2, a.z, t);
    return fmaf(w3, a.w, t);
}
static __device__ __forceinline__ float sum4(float t, float4 a) { return t + a.x + a.y + a.z + a.w; }

/* v - off as a float, exactly, for 0 <= v < 2^23 and small integer off, without an int->float conversion
 * (I2F issues at 1/8 of the FMA rate on sm_90 and would bound the GEMV): the bits of 2^23 + v, minus
 * 2^23 + off. Same value as (float)((int)v - off). */
static __device__ __forceinline__ float u2f_off(uint32_t v, float off) {
    return __uint_as_float(0x4B000000u | v) - (8388608.0f + off);
}

/* Nibble i (low: shift 0, high: shift 4) of the 4 bytes of q, minus off, as a float. */
#define NIB(q, i, shift, off) u2f_off(((q) >> (8 * (i) + (shift))) & 0xFu, (off))

/* ---- one sub-item per type: bp = the block in shared memory, xb = x at the block's first element
 * (row 0; row b at xb + b*n_in), acc[b] += the sub-item's part of row b's dot product ---- */

/* q4_0 sub k (0..3): bytes qs[4k..4k+4): low nibbles = elements 4k.., high = 16+4k..; x = d*(q-8). */
template <int NB>
static __device__ __forceinline__ void sub_q4_0(const uint8_t *bp, int k, const float *xb, int n_in,
                                                float (&acc)[NB]) {
    const float d = krn_h2f(ld_u16(bp));
    const uint32_t q = ld_u32_2(bp + 2 + 4 * k);
    float l0 = NIB(q, 0, 0, 8.0f), l1 = NIB(q, 1, 0, 8.0f), l2 = NIB(q, 2, 0, 8.0f), l3 = NIB(q, 3, 0, 8.0f);
    float h0 = NIB(q, 0, 4, 8.0f), h1 = NIB(q, 1, 4, 8.0f), h2 = NIB(q, 2, 4, 8.0f), h3 = NIB(q, 3, 4, 8.0f);
#pragma unroll
    for (int b = 0; b < NB; b++) {
        const float *xr = xb + (size_t)b * n_in;
        const float4 a = krn_ld_f4(xr + 4 * k), c = krn_ld_f4(xr + 16 + 4 * k);
        float t = dot4(0.0f, l0, l1, l2, l3, a);
        t = dot4(t, h0, h1, h2, h3, c);
        acc[b] = fmaf(d, t, acc[b]);
    }
}

/* q4_1 sub k: as q4_0 with x = d*q + m. */
template <int NB>
static __device__ __forceinline__ void sub_q4_1(const uint8_t *bp, int k, const float *xb, int n_in,
                                                float (&acc)[NB]) {
    const float d = krn_h2f(ld_u16(bp)), m = krn_h2f(ld_u16(bp + 2));
    const uint32_t q = ld_u32_2(bp + 4 + 4 * k);
    float l0 = NIB(q, 0, 0, 0.0f), l1 = NIB(q, 1, 0, 0.0f), l2 = NIB(q, 2, 0, 0.0f), l3 = NIB(q, 3, 0, 0.0f);
    float h0 = NIB(q, 0, 4, 0.0f), h1 = NIB(q, 1, 4, 0.0f), h2 = NIB(q, 2, 4, 0.0f), h3 = NIB(q, 3, 4, 0.0f);
#pragma unroll
    for (int b = 0; b < NB; b++) {
        const float *xr = xb + (size_t)b * n_in;
        const float4 a = krn_ld_f4(xr + 4 * k), c = krn_ld_f4(xr + 16 + 4 * k);
        float t = dot4(0.0f, l0, l1, l2, l3, a);
        t = dot4(t, h0, h1, h2, h3, c);
        const float sx = sum4(sum4(0.0f, a), c);
        acc[b] = fmaf(d, t, fmaf(m, sx, acc[b]));
    }
}

/* q8_0 sub k: int8 qs[8k..8k+8) = elements 8k..8k+7; x = d*q. */
template <int NB>
static __device__ __forceinline__ void sub_q8_0(const uint8_t *bp, int k, const float *xb, int n_in,
                                                float (&acc)[NB]) {
    const float d = krn_h2f(ld_u16(bp));
    const uint32_t q0 = ld_u32_2(bp + 2 + 8 * k), q1 = ld_u32_2(bp + 6 + 8 * k);
    float w[8];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        w[i] = u2f_off(((q0 >> (8 * i)) & 0xFFu) ^ 0x80u, 128.0f); /* int8 b: (b ^ 0x80) - 128 */
        w[4 + i] = u2f_off(((q1 >> (8 * i)) & 0xFFu) ^ 0x80u, 128.0f);
    }
#pragma unroll
    for (int b = 0; b < NB; b++) {
        const float *xr = xb + (size_t)b * n_in;
        const float4 a = krn_ld_f4(xr + 8 * k), c = krn_ld_f4(xr + 8 * k + 4);
        float t = dot4(0.0f, w[0], w[1], w[2], w[3], a);
        t = dot4(t, w[4], w[5], w[6], w[7], c);
        acc[b] = fmaf(d, t, acc[b]);
    }
}

/* Q4_K 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes (GGUF's get_scale_min_k4). */
static __device__ __forceinline__ void q4k_scale_min(int j, const uint8_t *s, float *sc, float *mn) {
    uint32_t a, b;
    if (j < 4) {
        a = s[j] & 63;
        b = s[j + 4] & 63;
    } else {
        a = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        b = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
    *sc = u2f_off(a, 0.0f);
    *mn = u2f_off(b, 0.0f);
}

/* q4_K sub s (0..31): pair p = s/8 covers elements 64p..64p+63 with qs[32p..32p+32); lane part k = s%8
 * reads qs[32p+4k..+4): low nibbles = elements 64p+4k.. (sub-block 2p), high = 64p+32+4k.. (2p+1);
 * x = d*sc*q - dmin*m. */
template <int NB>
static __device__ __forceinline__ void sub_q4_k(const uint8_t *bp, int s, const float *xb, int n_in,
                                                float (&acc)[NB]) {
    const int p = s >> 3, k = s & 7;
    const float d = krn_h2f(ld_u16(bp)), dmin = krn_h2f(ld_u16(bp + 2));
    float sc1, m1, sc2, m2;
    q4k_scale_min(2 * p, bp + 4, &sc1, &m1);
    q4k_scale_min(2 * p + 1, bp + 4, &sc2, &m2);
    const float d1 = d * sc1, d2 = d * sc2, n1 = dmin * m1, n2 = dmin * m2;
    const uint32_t q = ld_u32_2(bp + 16 + 32 * p + 4 * k);
    float l0 = NIB(q, 0, 0, 0.0f), l1 = NIB(q, 1, 0, 0.0f), l2 = NIB(q, 2, 0, 0.0f), l3 = NIB(q, 3, 0, 0.0f);
    float h0 = NIB(q, 0, 4, 0.0f), h1 = NIB(q, 1, 4, 0.0f), h2 = NIB(q, 2, 4, 0.0f), h3 = NIB(q, 3, 4, 0.0f);
#pragma unroll
    for (int b = 0; b < NB; b++) {
        const float *xr = xb + (size_t)b * n_in + 64 * p + 4 * k;
        const float4 a = krn_ld_f4(xr), c = krn_ld_f4(xr + 32);
        const float tl = dot4(0.0f, l0, l1, l2, l3, a), th = dot4(0.0f, h0, h1, h2, h3, c);
        float r = acc[b];
        r = fmaf(d1, tl, r);
        r = fmaf(-n1, sum4(0.0f, a), r);
        r = fmaf(d2, th, r);
        r = fmaf(-n2, sum4(0.0f, c), r);
        acc[b] = r;
    }
}

/* q6_K sub s (0..15): half n = s/8 (elements 128n..128n+127), l = 4*(s%8) .. +3: for each l, the four
 * elements 128n + l + {0,32,64,96} from ql[64n+l] / ql[64n+32+l] (low, high nibbles) and qh[32n+l]
 * (2 bits each), scales sc[8n + l/16 + {0,2,4,6}]; x = d*sc*(q-32). */
template <int NB>
static __device__ __forceinline__ void sub_q6_k(const uint8_t *bp, int s, const float *xb, int n_in,
                                                float (&acc)[NB]) {
    const int n = s >> 3, l0 = 4 * (s & 7);
    const uint32_t qa = ld_u32_2(bp + 64 * n + l0), qb = ld_u32_2(bp + 64 * n + 32 + l0);
    const uint32_t qh = ld_u32_2(bp + 128 + 32 * n + l0);
    const uint8_t *scu = bp + 192 + 8 * n + l0 / 16; /* int8 scales; b as a float: (b ^ 0x80) - 128 */
    const float d = krn_h2f(ld_u16(bp + 208));
    const float d1 = d * u2f_off(scu[0] ^ 0x80u, 128.0f), d2 = d * u2f_off(scu[2] ^ 0x80u, 128.0f);
    const float d3 = d * u2f_off(scu[4] ^ 0x80u, 128.0f), d4 = d * u2f_off(scu[6] ^ 0x80u, 128.0f);
    float w1[4], w2[4], w3[4], w4[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const uint32_t a = (qa >> (8 * i)) & 0xFFu, b = (qb >> (8 * i)) & 0xFFu, h = (qh >> (8 * i)) & 0xFFu;
        w1[i] = u2f_off((a & 0xFu) | ((h & 3u) << 4), 32.0f);
        w2[i] = u2f_off((b & 0xFu) | (((h >> 2) & 3u) << 4), 32.0f);
        w3[i] = u2f_off((a >> 4) | (((h >> 4) & 3u) << 4), 32.0f);
        w4[i] = u2f_off((b >> 4) | (((h >> 6) & 3u) << 4), 32.0f);
    }
#pragma unroll
    for (int b = 0; b < NB; b++) {
        const float *xr = xb + (size_t)b * n_in + 128 * n + l0;
        const float4 x1 = krn_ld_f4(xr), x2 = krn_ld_f4(xr + 32), x3 = krn_ld_f4(xr + 64), x4 = krn_ld_f4(xr + 96);
        float r = acc[b];
        r = fmaf(d1, dot4(0.0f, w1[0], w1[1], w1[2], w1[3], x1), r);
        r = fmaf(d2, dot4(0.0f, w2[0], w2[1], w2[2], w2[3], x2), r);
        r = fmaf(d3, dot4(0.0f, w3[0], w3[1], w3[2], w3[3], x3), r);
        r = fmaf(d4, dot4(0.0f, w4[0], w4[1], w4[2], w4[3], x4), r);
        acc[b] = r;
    }
}

template <int T, int NB>
static __device__ __forceinline__ void sub_dot(const uint8_t *bp, int s, const float *xb, int n_in,
                                               float (&acc)[NB]) {
    if constexpr (T == KRN_Q4_0) sub_q4_0<NB>(bp, s, xb, n_in, acc);
    else if constexpr (T == KRN_Q4_1) sub_q4_1<NB>(bp, s, xb, n_in, acc);
    else if constexpr (T == KRN_Q8_0) sub_q8_0<NB>(bp, s, xb, n_in, acc);
    else if constexpr (T == KRN_Q4_K) sub_q4_k<NB>(bp, s, xb, n_in, acc);
    else sub_q6_k<NB>(bp, s, xb, n_in, acc);
}

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
static __device__ __forceinline__ void stage_load(uint4 (&v)[VPL], const uint8_t *a0, int nv, const uint8_t *wbeg,
                                                  const uint8_t *wend, int lane) {
#pragma unroll
    for (int i = 0; i < VPL; i++) {
        const int k = lane + KRN_WARP * i;
        const uint8_t *p = a0 + 16 * (size_t)k;
        if (k < nv)
            v[i] = (p >= wbeg && p + 16 <= wend) ? krn_ld_stream16(p) : ld_partial16(p, wbeg, wend);
    }
}

template <int VPL>
static __device__ __forceinline__ void stage_store(uint8_t *sb, const uint4 (&v)[VPL], int nv, int lane) {
#pragma unroll
    for (int i = 0; i < VPL; i++) {
        const int k = lane + KRN_WARP * i;
        if (k < nv)
            ((uint4 *)sb)[k] = v[i];
    }
}

/* One warp per row; see the file comment. W row r at W + r*row_bytes. */
template <int T, int NB>
__global__ void __launch_bounds__(MM_WARPS *KRN_WARP)
    mm_block_kernel(float *__restrict__ y, const uint8_t *__restrict__ W, const float *__restrict__ x, int n_out,
                    int n_in, size_t row_bytes) {
    enum { BE = mm_layout<T>::BE, BB = mm_layout<T>::BB, SPB = mm_layout<T>::SPB, CB = mm_layout<T>::CB };
    enum { VPL = mm_vpl<T>::V };
    __shared__ __align__(16) uint8_t smem[MM_WARPS][VPL * KRN_WARP * 16];
    const int lane = threadIdx.x % KRN_WARP, warp = threadIdx.x / KRN_WARP;
    const int row = blockIdx.x * MM_WARPS + warp;
    if (row >= n_out)
        return; /* the whole warp leaves; no block-wide barrier follows */
    uint8_t *sb = smem[warp];
    const uint8_t *wbeg = W, *wend = W + (size_t)n_out * row_bytes;
    const uint8_t *rp = W + (size_t)row * row_bytes;
    const int nblocks = n_in / BE;

    float acc[NB];
#pragma unroll
    for (int b = 0; b < NB; b++)
        acc[b] = 0.0f;

    uint4 v[VPL];
    int c0 = 0, nbc = min((int)CB, nblocks);
    int off = (int)((uintptr_t)rp & 15);
    int nv = (off + nbc * BB + 15) >> 4;
    stage_load<VPL>(v, rp - off, nv, wbeg, wend, lane);
    for (;;) {
        stage_store<VPL>(sb, v, nv, lane);
        __syncwarp(); /* the chunk in sb is complete for every lane */
        const int cur_c0 = c0, cur_nbc = nbc, cur_off = off;
        c0 += CB;
        if (c0 < nblocks) { /* next chunk's loads fly while this one is decoded */
            nbc = min((int)CB, nblocks - c0);
            const uint8_t *g0 = rp + (size_t)c0 * BB;
            off = (int)((uintptr_t)g0 & 15);
            nv = (off + nbc * BB + 15) >> 4;
            stage_load<VPL>(v, g0 - off, nv, wbeg, wend, lane);
        }
        const uint8_t *cb = sb + cur_off;
        const float *xc = x + (size_t)cur_c0 * BE;
        const int nsub = cur_nbc * SPB;
#pragma unroll 2
        for (int s = lane; s < nsub; s += KRN_WARP) {
            const int blk = s / SPB;
            sub_dot<T, NB>(cb + blk * BB, s % SPB, xc + blk * BE, n_in, acc);
        }
        __syncwarp(); /* every lane is done reading sb before it is overwritten */
        if (c0 >= nblocks)
            break;
    }
#pragma unroll
    for (int b = 0; b < NB; b++) {
        const float r = krn_warp_sum(acc[b]);
        if (lane == 0)
            y[(size_t)b * n_out + row] = r;
    }
}

/* ---- float types ---- */

/* 8 consecutive weights from 16 (f16, bf16) or 32 (f32) bytes, 16-byte aligned. */
template <int T> struct mm_f8 { uint4 a, b; };
template <int T> static __device__ __forceinline__ mm_f8<T> ld_f8(const uint8_t *p) {
    mm_f8<T> r;
    r.a = krn_ld_stream16(p);
    if (T == KRN_F32)
        r.b = krn_ld_stream16(p + 16);
    else
        r.b = make_uint4(0, 0, 0, 0);
    return r;
}
template <int T> static __device__ __forceinline__ void cvt_f8(const mm_f8<T> &r, float (&w)[8]) {
    if (T == KRN_F32) {
        const uint32_t u[8] = {r.a.x, r.a.y, r.a.z, r.a.w, r.b.x, r.b.y, r.b.z, r.b.w};
#pragma unroll
        for (int i = 0; i < 8; i++)
            w[i] = __uint_as_float(u[i]);
    } else {
        const uint32_t u[4] = {r.a.x, r.a.y, r.a.z, r.a.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint16_t lo = (uint16_t)(u[i] & 0xFFFFu), hi = (uint16_t)(u[i] >> 16);
            w[2 * i] = T == KRN_F16 ? krn_h2f(lo) : krn_bf2f(lo);
            w[2 * i + 1] = T == KRN_F16 ? krn_h2f(hi) : krn_bf2f(hi);
        }
    }
}
template <int T> static __device__ __forceinline__ float ld_f1(const uint8_t *row, int e) {
    if (T == KRN_F32)
        return __ldg((const float *)row + e);
    const uint16_t h = __ldg((const unsigned short *)row + e);
    return T == KRN_F16 ? krn_h2f(h) : krn_bf2f(h);
}

template <int NB>
static __device__ __forceinline__ void fma8(const float (&w)[8], const float *x, int n_in, int e, float (&acc)[NB]) {
#pragma unroll
    for (int b = 0; b < NB; b++) {
        const float *xr = x + (size_t)b * n_in + e;
        const float4 a = krn_ld_f4(xr), c = krn_ld_f4(xr + 4);
        acc[b] = dot4(dot4(acc[b], w[0], w[1], w[2], w[3], a), w[4], w[5], w[6], w[7], c);
    }
}

/* VEC: n_in % 8 == 0 and W, x 16-byte aligned: lane reads weights [8*(lane + 32*j), +8) per step, 4 steps
 * of loads in flight. Otherwise lane reads weights lane + 32*j one by one. */
template <int T, int NB, bool VEC>
__global__ void __launch_bounds__(MM_WARPS *KRN_WARP)
    mm_float_kernel(float *__restrict__ y, const uint8_t *__restrict__ W, const float *__restrict__ x, int n_out,
                    int n_in, size_t row_bytes) {
    const int lane = threadIdx.x % KRN_WARP, warp = threadIdx.x / KRN_WARP;
    const int row = blockIdx.x * MM_WARPS + warp;
    if (row >= n_out)
        return;
    const uint8_t *rp = W + (size_t)row * row_bytes;
    const int esz = T == KRN_F32 ? 4 : 2;
    float acc[NB];
#pragma unroll
    for (int b = 0; b < NB; b++)
        acc[b] = 0.0f;
    if (VEC) {
        const int step = 8 * KRN_WARP;
        int e = 8 * lane;
        for (; e + 3 * step < n_in; e += 4 * step) {
            mm_f8<T> r[4];
#pragma unroll
            for (int u = 0; u < 4; u++)
                r[u] = ld_f8<T>(rp + (size_t)(e + u * step) * esz);
#pragma unroll
            for (int u = 0; u < 4; u++) {
                float w[8];
                cvt_f8<T>(r[u], w);
                fma8<NB>(w, x, n_in, e + u * step, acc);
            }
        }
        for (; e < n_in; e += step) {
            float w[8];
            cvt_f8<T>(ld_f8<T>(rp + (size_t)e * esz), w);
            fma8<NB>(w, x, n_in, e, acc);
        }
    } else {
        for (int e = lane; e < n_in; e += KRN_WARP) {
            const float w = ld_f1<T>(rp, e);
#pragma unroll
            for (int b = 0; b < NB; b++)
                acc[b] = fmaf(w, __ldg(x + (size_t)b * n_in + e), acc[b]);
        }
    }
#pragma unroll
    for (int b = 0; b < NB; b++) {
        const float r = krn_warp_sum(acc[b]);
        if (lane == 0)
            y[(size_t)b * n_out + row] = r;
    }
}

/* ---- host side ---- */

typedef struct mm_args {
    float *y;
    const uint8_t *W;
    const float *x;
    int n_out, n_in;
    size_t row_bytes;
} mm_args;

template <int T, int NB>
static void mm_launch_nb(const mm_args *a, int vec, cudaStream_t st) {
    const dim3 grid((unsigned)((a->n_out + MM_WARPS - 1) / MM_WARPS)), block(MM_WARPS * KRN_WARP);
    if constexpr (T == KRN_F32 || T == KRN_F16 || T == KRN_BF16) {
        if (vec)
            mm_float_kernel<T, NB, true><<<grid, block, 0, st>>>(a->y, a->W, a->x, a->n_out, a->n_in, a->row_bytes);
        else
            mm_float_kernel<T, NB, false><<<grid, block, 0, st>>>(a->y, a->W, a->x, a->n_out, a->n_in, a->row_bytes);
    } else {
        mm_block_kernel<T, NB><<<grid, block, 0, st>>>(a->y, a->W, a->x, a->n_out, a->n_in, a->row_bytes);
    }
}

template <int T>
static void mm_launch(const mm_args *a, int nb, int vec, cudaStream_t st) {
    switch (nb) {
    case 1: mm_launch_nb<T, 1>(a, vec, st); break;
    case 2: mm_launch_nb<T, 2>(a, vec, st); break;
    case 3: mm_launch_nb<T, 3>(a, vec, st); break;
    case 4: mm_launch_nb<T, 4>(a, vec, st); break;
    case 5: mm_launch_nb<T, 5>(a, vec, st); break;
    case 6: mm_launch_nb<T, 6>(a, vec, st); break;
    case 7: mm_launch_nb<T, 7>(a, vec, st); break;
    default: mm_launch_nb<T, 8>(a, vec, st); break;
    }
}

/* Elements and bytes per block of the types this file handles; 0 when unsupported. */
static int mm_type_layout(int t, int *be, int *bb) {
    switch (t) {
    case KRN_F32: *be = 1; *bb = 4; return 1;
    case KRN_F16: *be = 1; *bb = 2; return 1;
    case KRN_BF16: *be = 1; *bb = 2; return 1;
    case KRN_Q4_0: *be = 32; *bb = 18; return 1;
    case KRN_Q4_1: *be = 32; *bb = 20; return 1;
    case KRN_Q8_0: *be = 32; *bb = 34; return 1;
    case KRN_Q4_K: *be = 256; *bb = 144; return 1;
    case KRN_Q6_K: *be = 256; *bb = 210; return 1;
    default: return 0;
    }
}

extern "C" int krn_cuda_matmul_async(void *cuda_stream, float *y, const krn_weight *W, const float *x, int B,
                                     dev_err *err) {
    if (!W)
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_matmul: W is NULL");
    int be = 0, bb = 0;
    if (!mm_type_layout(W->type, &be, &bb))
        return dev_err_set(err, MEMRA_E_INVAL,
                           "krn_cuda_matmul: weight type %d unsupported (allowed: f32, f16, bf16, q8_0, q4_0, "
                           "q4_1, q4_k, q6_k)", W->type);
    if (B < 0 || W->n_out <= 0 || W->n_in <= 0)
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_matmul: B=%d n_out=%d n_in=%d (need B >= 0, n > 0)", B,
                           W->n_out, W->n_in);
    if (B == 0)
        return 0;
    if (!y || !x || !W->data)
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_matmul: NULL pointer (y=%p x=%p W->data=%p)", (void *)y,
                           (const void *)x, W->data);
    if (W->n_in % be != 0)
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_matmul: n_in=%d is not a multiple of %d (type %d blocks)",
                           W->n_in, be, W->type);
    const unsigned walign = W->type == KRN_F32 ? 4 : 2;
    if (!krn_cuda_aligned(W->data, walign) || !krn_cuda_aligned(x, 4))
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_matmul: W->data %p must be %u-byte aligned, x %p 4-byte",
                           W->data, walign, (const void *)x);
    const int is_float = be == 1;
    if (!is_float && !krn_cuda_aligned(x, 16))
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_matmul: x %p must be 16-byte aligned for block types",
                           (const void *)x);
    const int vec = is_float && W->n_in % 8 == 0 && krn_cuda_aligned(W->data, 16) && krn_cuda_aligned(x, 16);
    cudaStream_t st = (cudaStream_t)cuda_stream;
    for (int b0 = 0; b0 < B; b0 += MM_MAX_B) {
        const int nb = B - b0 < MM_MAX_B ? B - b0 : MM_MAX_B;
        mm_args a;
        a.y = y + (size_t)b0 * W->n_out;
        a.W = (const uint8_t *)W->data;
        a.x = x + (size_t)b0 * W->n_in;
        a.n_out = W->n_out;
        a.n_in = W->n_in;
        a.row_bytes = (size_t)(W->n_in / be) * bb;
        switch (W->type) {
        case KRN_F32: mm_launch<KRN_F32>(&a, nb, vec, st); break;
        case KRN_F16: mm_launch<KRN_F16>(&a, nb, vec, st); break;
        case KRN_BF16: mm_launch<KRN_BF16>(&a, nb, vec, st); break;
        case KRN_Q4_0: mm_launch<KRN_Q4_0>(&a, nb, vec, st); break;
        case KRN_Q4_1: mm_launch<KRN_Q4_1>(&a, nb, vec, st); break;
        case KRN_Q8_0: mm_launch<KRN_Q8_0>(&a, nb, vec, st); break;
        case KRN_Q4_K: mm_launch<KRN_Q4_K>(&a, nb, vec, st); break;
        default: mm_launch<KRN_Q6_K>(&a, nb, vec, st); break;
        }
        int rc = krn_cuda_launch_check(err, "krn_cuda_matmul");
        if (rc)
            return dev_err_wrap(err, "type %d, %dx%d, B=%d", W->type, W->n_out, W->n_in, B), rc;
    }
    return 0;
}
