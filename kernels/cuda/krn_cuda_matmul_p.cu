/* GEMV over the planar layout (KRN_LAYOUT_PLANES, kernels/krn.h) of q8_0, q4_0, q4_1, q4_K, q6_K (its layout:
 * kernels/krn.h; its compute: mp_compute_q6k below):
 * y (B, n_out) = x (B, n_in) @ W^T, B <= 8 rows of x per launch.
 *
 * The quant plane is 16-byte aligned row by row, so every load is a 16-byte streaming load straight into
 * registers: no shared-memory staging. A "vector" is 16 quant bytes: 16 elements of q8_0 (half a block) or
 * 32 of q4 (a block; q4_K: a sub-block, whose scale and min come from its super-block's 16-byte header,
 * loaded whole by each of its 8 vectors' threads); row r has nvec = n_in / VE of them. A 128-thread block
 * computes groups of R consecutive rows (row group g, g + gridDim.x, ...; the grid is at most MB blocks per
 * SM); thread t owns the vectors t, t + 128, ... of every row of the group. Its work is a sequence of items
 * (group, chunk): chunk c holds its U vectors c*128*U + 128*u + t of each of the R rows. The loads of the
 * next item (R*U vectors and their scales) are issued before the current one is decoded, so R*U loads per thread are in
 * flight at all times; the first item's loads are issued BEFORE krn_pdl_enter() (weights are immutable
 * during a forward; only x comes from the previous kernel), x is read after it. Each x value is loaded
 * once per item for all R rows. x is of an activation type XT (the policy mp_fx<XT>): a 16-bit x is widened
 * exactly as it is loaded (a q8_0 word's 4 elements: 8 bytes; a q4 word's 8: 16 bytes; x 16-byte aligned), so
 * it gives the bits of the f32 x holding the widened values.
 * Decoding: q8_0 bytes go into the mantissa of 2^23 with one byte permute, then one exact subtraction
 * gives q - offset (as krn_cuda_matmul_q.cu); q4 nibbles go into a mantissa with one mask-or (mp_nib), the
 * exponent chosen so the nibble's bits weigh 1, then one exact subtraction. Math is fp32.
 * Determinism: thread t adds, per row, its vectors in increasing order (per vector: the 4 words in order,
 * then acc = d * t (+ m * sum x) into the running sum); a butterfly sums the warp; the 4 warp totals are
 * added in warp order. That order depends on neither B nor R nor U, so a row has the same bits in any
 * batch. No atomics.
 * Shared mutable state: none (the reduction buffer lives for one launch). */

#include "kernels/cuda/krn_cuda_planes.cuh"

/* Byte I of v minus off as a float, exactly: 2^23 + byte by one permute, minus (2^23 + off). */
template <int I>
static __device__ __forceinline__ float mp_byte(uint32_t v, float off) {
    return __uint_as_float(__byte_perm(v, 0x4B000000u, 0x7540u | I)) - (8388608.0f + off);
}
static __device__ __forceinline__ float mp_dot4(float t, uint32_t v, float off, float4 a) {
    t = fmaf(mp_byte<0>(v, off), a.x, t);
    t = fmaf(mp_byte<1>(v, off), a.y, t);
    t = fmaf(mp_byte<2>(v, off), a.z, t);
    return fmaf(mp_byte<3>(v, off), a.w, t);
}

/* The nibble at bits P..P+3 of v (P <= 19) minus off as a float, exactly, without a byte permute: one
 * mask-or (LOP3) puts it in the mantissa of 2^(23-P), whose mantissa bit P weighs 1, so the float is
 * 2^(23-P) + q; subtracting 2^(23-P) + off is exact. */
template <int P>
static __device__ __forceinline__ float mp_nib(uint32_t v, float off) {
    uint32_t r; /* (v & mask) | exponent in ONE lop3 (0xEA = a & b | c); left to itself the compiler emits two */
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(v), "r"(0xFu << P), "r"((150u - P) << 23));
    return __uint_as_float(r) - ((float)(1u << (23 - P)) + off);
}

/* A planar q4 word w (byte i: element i low nibble, 4+i high) against x a (elements 0..3), c (4..7), in
 * element order: the same value and order as mp_dot4 on the masked bytes. Nibbles above bit 19 are
 * taken from w >> 12. 25 instructions for 8 elements. */
static __device__ __forceinline__ float mp_dot8_q4(float t, uint32_t w, float off, float4 a, float4 c) {
    const uint32_t s = w >> 12;
    t = fmaf(mp_nib<0>(w, off), a.x, t);
    t = fmaf(mp_nib<8>(w, off), a.y, t);
    t = fmaf(mp_nib<16>(w, off), a.z, t);
    t = fmaf(mp_nib<12>(s, off), a.w, t);
    t = fmaf(mp_nib<4>(w, off), c.x, t);
    t = fmaf(mp_nib<12>(w, off), c.y, t);
    t = fmaf(mp_nib<8>(s, off), c.z, t);
    return fmaf(mp_nib<16>(s, off), c.w, t);
}

/* Word k of a vector against x (type XT) at xv (the word's first element) for NB rows of x: tq[r][b] += the
 * word's products for row r. q8_0: 4 int8 elements; q4: 8 elements (low nibbles then high nibbles). xs[b]: sum
 * of the x values (q4_1 only). */
template <int T, int XT, int NB, int R, int U>
static __device__ __forceinline__ void mp_word(const mp_item<T, R, U> &it, int u, int k, const krn_act_e<XT> *xv,
                                               int n_in, float (&tq)[R][NB], float (&xs)[NB]) {
    if (T == KRN_Q8_0) {
        float4 a[NB];
#pragma unroll
        for (int b = 0; b < NB; b++)
            a[b] = krn_ldx4<XT>(xv + (size_t)b * n_in);
#pragma unroll
        for (int r = 0; r < R; r++) {
            const uint32_t w = mp_word_of(it.q[r][u], k) ^ 0x80808080u;
#pragma unroll
            for (int b = 0; b < NB; b++)
                tq[r][b] = mp_dot4(tq[r][b], w, 128.0f, a[b]);
        }
    } else {
        const float off = T == KRN_Q4_0 ? 8.0f : 0.0f;
        float4 a[NB], c[NB];
#pragma unroll
        for (int b = 0; b < NB; b++) {
            KRN_LDX8(XT, xv + (size_t)b * n_in, a[b], c[b]);
            if (T == KRN_Q4_1 || T == KRN_Q4_K)
                xs[b] = xs[b] + a[b].x + a[b].y + a[b].z + a[b].w + c[b].x + c[b].y + c[b].z + c[b].w;
        }
#pragma unroll
        for (int r = 0; r < R; r++) {
            const uint32_t w = mp_word_of(it.q[r][u], k);
#pragma unroll
            for (int b = 0; b < NB; b++)
                tq[r][b] = mp_dot8_q4(tq[r][b], w, off, a[b], c[b]);
        }
    }
}

/* q6_K's acc[r][b] += item's vectors (valid ones: v < nvec) against x: two int8 scales per vector, so per
 * vector and row of x t0 = the products (q - 32) x of elements 0..15 in element order (mp_dot4 over words
 * 0..3: q - 32 exact as for q8_0), t1 those of 16..31, then acc = fma(d sc0, t0, acc), acc = fma(d sc1, t1, acc)
 * (d sc exact: 11 by 8 significant bits). The 6-bit words are decoded once per row of W for every row of x. */
template <int XT, int NB, int R, int U>
static __device__ __forceinline__ void mp_compute_q6k(const mp_item<KRN_Q6_K, R, U> &it,
                                                      const krn_act_e<XT> *__restrict__ x,
                                                      int n_in, int nvec, int c, int t, float (&acc)[R][NB]) {
    mp_each_vector<U>(nvec, c, t, [&](int u, int v) {
        uint32_t q[R][8];
        float ds[R][2];
#pragma unroll
        for (int r = 0; r < R; r++) {
            mp_q6k_words(it.q[r][u], it.h[r][u], q[r]);
            const float d = mp_q6k_d(it.s[r][u]);
            ds[r][0] = d * (float)mp_q6k_sc(it.s[r][u], 0);
            ds[r][1] = d * (float)mp_q6k_sc(it.s[r][u], 1);
        }
        const krn_act_e<XT> *xv = x + (size_t)v * 32;
#pragma unroll
        for (int b = 0; b < NB; b++)
#pragma unroll
            for (int half = 0; half < 2; half++) {
                float tq[R];
#pragma unroll
                for (int r = 0; r < R; r++)
                    tq[r] = 0.0f;
#pragma unroll
                for (int j = 4 * half; j < 4 * half + 4; j++) {
                    const float4 a = krn_ldx4<XT>(xv + (size_t)b * n_in + 4 * j);
#pragma unroll
                    for (int r = 0; r < R; r++)
                        tq[r] = mp_dot4(tq[r], q[r][j], 32.0f, a);
                }
#pragma unroll
                for (int r = 0; r < R; r++)
                    acc[r][b] = fmaf(ds[r][half], tq[r], acc[r][b]);
            }
        });
}

/* acc[r][b] += item's vectors (valid ones: v < nvec) against x. */
template <int T, int XT, int NB, int R, int U>
static __device__ __forceinline__ void mp_compute(const mp_item<T, R, U> &it, const krn_act_e<XT> *__restrict__ x,
                                                  int n_in, int nvec, int c, int t, float (&acc)[R][NB]) {
    enum { VE = mp_layout<T>::VE, EW = VE / 4 /* elements per word */ };
    if constexpr (T == KRN_Q6_K) { /* two scales per vector: its own loop */
        mp_compute_q6k<XT, NB, R, U>(it, x, n_in, nvec, c, t, acc);
        return;
    }
    mp_each_vector<U>(nvec, c, t, [&](int u, int v) {
        float tq[R][NB], xs[NB];
#pragma unroll
        for (int b = 0; b < NB; b++) {
            xs[b] = 0.0f;
#pragma unroll
            for (int r = 0; r < R; r++)
                tq[r][b] = 0.0f;
        }
        const krn_act_e<XT> *xv = x + (size_t)v * VE;
#pragma unroll
        for (int k = 0; k < 4; k++)
            mp_word<T, XT, NB, R, U>(it, u, k, xv + EW * k, n_in, tq, xs);
#pragma unroll
        for (int r = 0; r < R; r++) {
            if constexpr (T == KRN_Q4_K) {
                float d1, m1;
                mp_q4k_scale(it.s[r][u], v % 8, d1, m1);
#pragma unroll
                for (int b = 0; b < NB; b++)
                    acc[r][b] = fmaf(d1, tq[r][b], fmaf(-m1, xs[b], acc[r][b]));
            } else if constexpr (T == KRN_Q4_1) {
                const float d = mp_s_d(it.s[r][u]), m = mp_s_m(it.s[r][u]);
#pragma unroll
                for (int b = 0; b < NB; b++)
                    acc[r][b] = fmaf(d, tq[r][b], fmaf(m, xs[b], acc[r][b]));
            } else {
                const float d = mp_s_d(it.s[r][u]);
#pragma unroll
                for (int b = 0; b < NB; b++)
                    acc[r][b] = fmaf(d, tq[r][b], acc[r][b]);
            }
        }
        });
}

/* The float-x products of mp_kernel (krn_cuda_planes.cuh), x of activation type XT. */
template <int XT> struct mp_fx {
    typedef krn_act_e<XT> xe; /* mp_kernel's x */
    template <int T, int NB, int R, int U>
    static __device__ __forceinline__ void compute(const mp_item<T, R, U> &it, const xe *__restrict__ x,
                                                   const uint8_t *, size_t, int n_in, int nvec, int c, int t,
                                                   float (&acc)[R][NB]) {
        mp_compute<T, XT, NB, R, U>(it, x, n_in, nvec, c, t, acc);
    }
};

void mm_p_launch(int type, const mm_args *a, int nb, cudaStream_t st) {
    switch (a->xt) {
    case KRN_F16: mp_types<mp_go<mp_fx<KRN_F16>>>(type, a, nb, st); break;
    case KRN_BF16: mp_types<mp_go<mp_fx<KRN_BF16>>>(type, a, nb, st); break;
    default: mp_types<mp_go<mp_fx<KRN_F32>>>(type, a, nb, st); break;
    }
}

/* The checks and the 8-row loop are krn_cuda_matmul_parts_async's (krn_cuda_matmul.cu), which routes a
 * PLANES weight here through mm_p_launch. */
extern "C" int krn_cuda_matmul_planes_async(void *cuda_stream, float *y, const krn_weight *W, const float *x, int B,
                                            dev_err *err) {
    if (!W || W->layout != KRN_LAYOUT_PLANES)
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_matmul_planes: W is NULL or not in layout planes (%d)",
                           W ? W->layout : -1);
    const krn_mm_part p = {y, W};
    const krn_mm_x xx = {x, KRN_F32, NULL};
    return krn_cuda_matmul_parts_async(cuda_stream, &p, 1, &xx, B, 0, err);
}
