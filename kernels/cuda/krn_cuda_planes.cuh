/* Private to the planar GEMVs (krn_cuda_matmul_p.cu: float x; krn_cuda_matmul_x8.cu: int8 x): the per-type
 * layout of a PLANES weight (kernels/krn.h), the item of R rows x U 16-byte vectors a thread loads ahead,
 * the q4_K sub-block scale, the walk kernel over the products of either, and its launch shape. See krn_cuda_matmul_p.cu's file comment for the walk both kernels share. */
#ifndef KRN_CUDA_PLANES_CUH
#define KRN_CUDA_PLANES_CUH

#include "kernels/cuda/krn_cuda_matmul.cuh"
#include "kernels/cuda/krn_cuda_planes.h"

#define MP_THREADS (MM_WARPS * KRN_WARP)
/* Blocks per SM the compiler must fit and the grid uses: 4 at B <= 2 (128 registers), 3 above. */
#define MP_MINB(NB) ((NB) <= 2 ? 4 : 3)

/* Per type: VE elements per vector, QB quant bytes per vector (a row is nvec * QB bytes; the scales plane
 * starts after the n_out rows), SB bytes per scale entry, one entry per SE elements; S the register type of an
 * entry. */
template <int T> struct mp_layout;
template <> struct mp_layout<KRN_Q8_0> { enum { VE = 16, QB = 16, SB = 2, SE = 32 }; typedef uint32_t S; };
template <> struct mp_layout<KRN_Q4_0> { enum { VE = 32, QB = 16, SB = 2, SE = 32 }; typedef uint32_t S; };
template <> struct mp_layout<KRN_Q4_1> { enum { VE = 32, QB = 16, SB = 4, SE = 32 }; typedef uint32_t S; };
template <> struct mp_layout<KRN_Q4_K> { enum { VE = 32, QB = 16, SB = 16, SE = 256 }; typedef uint4 S; };
/* q6_K: a vector is the 16 bytes of low nibbles of 32 elements plus their 8 bytes of high bits (QB = 24), read
 * in two places, with the scales, into its own item (mp_item<KRN_Q6_K>, mp_issue_q6k). */
template <> struct mp_layout<KRN_Q6_K> { enum { VE = 32, QB = 24, SB = 18, SE = 256 }; typedef uint32_t S; };

/* The weights of one item: R rows x U vectors, and each vector's scale entry (d, d | m << 16, or the q4_K
 * super-block header). */
template <int T, int R, int U> struct mp_item {
    uint4 q[R][U];
    typename mp_layout<T>::S s[R][U];
};

/* q6_K's item: per vector its low nibbles q (16 bytes), the high bits h of the same 32 elements (8 bytes) and
 * s = its two int8 sub-block scales (bits 0..15, the first half's in the low byte) | the super-block's fp16 d
 * << 16. */
template <int R, int U> struct mp_item<KRN_Q6_K, R, U> {
    uint4 q[R][U];
    uint2 h[R][U];
    uint32_t s[R][U];
};

/* mp_issue for q6_K (kernels/krn.h): a row is nvec / 8 super-blocks of 192 quant bytes (8 vectors of low
 * nibbles, then 8 x 8 bytes of high bits), the scales plane after the n_out rows holds 18 bytes (scales[16],
 * d) per super-block. Vector v of a row: super-block v / 8, sub-block j = v % 8: 16 bytes at 16j, 8 at
 * 128 + 8j, its scale pair at 2j of the entry and d at 16. Rows past n_out read row n_out - 1; vectors past
 * nvec are not read (zero). */
template <int R, int U>
static __device__ __forceinline__ void mp_issue_q6k(mp_item<KRN_Q6_K, R, U> &it, const uint8_t *W, int n_out,
                                                    int nvec, int g, int c, int t) {
    enum { QB = mp_layout<KRN_Q6_K>::QB, SB = mp_layout<KRN_Q6_K>::SB };
    const int v0 = c * MP_THREADS * U + t;
    const bool full = (c + 1) * MP_THREADS * U <= nvec;
    const size_t qrow = (size_t)nvec * QB, srow = (size_t)nvec / 8 * SB; /* quant, scale bytes of a row */
    const uint8_t *S = W + (size_t)n_out * qrow; /* the scales plane (as mp_kernel's S) */
#pragma unroll
    for (int r = 0; r < R; r++) {
        const size_t row = (size_t)min(g * R + r, n_out - 1);
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int v = v0 + MP_THREADS * u;
            if (full || v < nvec) {
                const uint8_t *qb = W + row * qrow + (size_t)(v / 8) * (8 * QB);
                const uint8_t *e = S + row * srow + (size_t)(v / 8) * SB;
                const int j = v % 8;
                it.q[r][u] = krn_ld_stream16(qb + 16 * j);
                it.h[r][u] = krn_ld_stream8(qb + 128 + 8 * j);
                it.s[r][u] = (uint32_t)__ldg((const unsigned short *)(e + 2 * j)) |
                             (uint32_t)__ldg((const unsigned short *)(e + 16)) << 16; /* shared by 8 lanes */
            } else {
                it.q[r][u] = make_uint4(0, 0, 0, 0);
                it.h[r][u] = make_uint2(0, 0);
                it.s[r][u] = 0;
            }
        }
    }
}

/* Issue the loads of item (g, c): vectors v = c*128*U + 128*u + t of rows g*R + r (rows past n_out read
 * row n_out - 1, never written); vectors past nvec are not read (zero). */
template <int T, int R, int U>
static __device__ __forceinline__ void mp_issue(mp_item<T, R, U> &it, const uint8_t *W, const uint8_t *S, int n_out,
                                                int nvec, int g, int c, int t) {
    enum { VE = mp_layout<T>::VE, SB = mp_layout<T>::SB, SE = mp_layout<T>::SE };
    if constexpr (T == KRN_Q6_K) { /* its quant bytes in two places: its own addressing */
        mp_issue_q6k<R, U>(it, W, n_out, nvec, g, c, t);
        return;
    }
    const int v0 = c * MP_THREADS * U + t;
    const bool full = (c + 1) * MP_THREADS * U <= nvec;
#pragma unroll
    for (int r = 0; r < R; r++) {
        const size_t row = (size_t)min(g * R + r, n_out - 1);
        const uint8_t *qr = W + row * (size_t)nvec * mp_layout<T>::QB;
        const size_t sr = row * (size_t)nvec * VE / SE; /* scale entries before this row */
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int v = v0 + MP_THREADS * u;
            if (full || v < nvec) {
                it.q[r][u] = krn_ld_stream16(qr + (size_t)v * 16);
                const size_t si = sr + (size_t)v * VE / SE;
                if constexpr (T == KRN_Q4_K)
                    it.s[r][u] = __ldg((const uint4 *)S + si); /* one 16-byte header, shared by 8 lanes */
                else
                    it.s[r][u] = SB == 4 ? __ldg((const unsigned int *)S + si)
                                         : (uint32_t)__ldg((const unsigned short *)S + si);
            } else {
                it.q[r][u] = make_uint4(0, 0, 0, 0);
                it.s[r][u] = typename mp_layout<T>::S{};
            }
        }
    }
}

/* The two f16 halves of a scale word: d (low) and m (high) of q4_1 and of a q4_K header's first word; q6_K's d
 * is its high half. */
static __device__ __forceinline__ float mp_s_d(uint32_t s) { return krn_h2f((uint16_t)(s & 0xFFFFu)); }
static __device__ __forceinline__ float mp_s_m(uint32_t s) { return krn_h2f((uint16_t)(s >> 16)); }

/* q4_K: sub-block j (0..7) of the super-block whose header h is (d | dmin << 16, scales[0..12) as 3 words):
 * d1 = d * sc, m1 = dmin * m with GGUF's 6-bit sc, m of sub-block j (get_scale_min_k4), so an element is
 * d1 * q - m1 and the sub-block's dot is d1 * sum(q x) - m1 * sum(x). */
static __device__ __forceinline__ void mp_q4k_scale(uint4 h, int j, float &d1, float &m1) {
    const int sh = 8 * (j & 3);
    const uint32_t by = (h.y >> sh) & 0xFFu, bz = (h.z >> sh) & 0xFFu, bw = (h.w >> sh) & 0xFFu;
    const uint32_t sc = j < 4 ? by & 63u : (bw & 0xFu) | ((by >> 6) << 4);
    const uint32_t mn = j < 4 ? bz & 63u : (bw >> 4) | ((bz >> 6) << 4);
    d1 = mp_s_d(h.x) * (float)sc;
    m1 = mp_s_m(h.x) * (float)mn;
}

/* q6_K: the 8 words of a vector's 32 6-bit quants, word j = elements 4j..4j+3 one per byte (0..63), from its
 * low nibbles q (word k: element 8k+i in the low nibble of byte i, 8k+4+i in the high one) and high bits h
 * (word m: bits 2f, 2f+1 of byte i belong to element 16m + 4f + i): word 2k is the low nibbles of q's word k
 * with group f = 2(k % 2) of h's word k / 2 above them, word 2k+1 the high nibbles with group f + 1. */
static __device__ __forceinline__ void mp_q6k_words(uint4 q, uint2 h, uint32_t (&o)[8]) {
    const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const uint32_t hw = k < 2 ? h.x : h.y;
        const int f = 2 * (k % 2);
        o[2 * k] = (w[k] & 0x0F0F0F0Fu) | (((hw >> (2 * f)) & 0x03030303u) << 4);
        o[2 * k + 1] = ((w[k] >> 4) & 0x0F0F0F0Fu) | (((hw >> (2 * f + 2)) & 0x03030303u) << 4);
    }
}

/* body(u, v) for the item's vectors v = c*128*U + 128u + t (u = 0..U-1) that exist (v < nvec; they ascend with
 * u, so the first missing one ends the walk): the loop every planar compute runs over its item. */
template <int U, class F>
static __device__ __forceinline__ void mp_each_vector(int nvec, int c, int t, F &&body) {
    const int v0 = c * MP_THREADS * U + t;
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int v = v0 + MP_THREADS * u;
        if (v >= nvec)
            return;
        body(u, v);
    }
}

/* Word k (0..3) of a uint4 (k a compile-time constant in every caller's unrolled loop). */
static __device__ __forceinline__ uint32_t mp_word_of(const uint4 &v, int k) {
    return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w;
}

/* q6_K: the int8 scale of half i (0: elements 0..15 of the vector, 1: 16..31) and d from an item's s. */
static __device__ __forceinline__ int mp_q6k_sc(uint32_t s, int i) { return (int)(int8_t)(uint8_t)(s >> (8 * i)); }
static __device__ __forceinline__ float mp_q6k_d(uint32_t s) { return mp_s_m(s); }

/* The planar GEMV's walk (krn_cuda_matmul_p.cu's file comment) with the products of C:
 * C::compute<T, NB, R, U>(item, x, xq, xq_row, n_in, nvec, c, t, acc) adds the item's vectors against the rows
 * of x into acc — float x (mp_fx<XT>, krn_cuda_matmul_p.cu: x of activation type XT, 16-bit widened on load) or
 * int8 x (mp_x8, krn_cuda_matmul_x8.cu; xq the quantized rows, xq_row bytes apart). red is double-buffered by
 * group parity: a group's writers pass the barrier of the previous group, which its readers reach only after
 * reading. x is an array of C::xe (the element type of the x C reads). */
template <class C, int T, int NB, int R, int U, int MB>
__global__ void __launch_bounds__(MP_THREADS, MB)
    mp_kernel(float *__restrict__ y, const uint8_t *__restrict__ W, const typename C::xe *__restrict__ x,
              const uint8_t *__restrict__ xq, size_t xq_row, int n_out, int n_in, int acc_y) {
    enum { VE = mp_layout<T>::VE };
    __shared__ float red[2][MM_WARPS][R * NB];
    const int t = threadIdx.x;
    const int nvec = n_in / VE, ngroups = (n_out + R - 1) / R;
    const int nch = (nvec + MP_THREADS * U - 1) / (MP_THREADS * U);
    const uint8_t *S = W + (size_t)n_out * nvec * mp_layout<T>::QB; /* the scales plane */
    mp_item<T, R, U> cur;
    if ((int)blockIdx.x < ngroups)
        mp_issue<T, R, U>(cur, W, S, n_out, nvec, blockIdx.x, 0, t);
    krn_pdl_enter_after_loads(); /* x / xq is written by the previous kernel: read only after this */
    int buf = 0;
    for (int g = blockIdx.x; g < ngroups; g += gridDim.x, buf ^= 1) {
        float acc[R][NB];
        mm_acc_zero<R, NB>(acc);
        for (int c = 0; c < nch; c++) {
            const int gn = c + 1 < nch ? g : g + (int)gridDim.x, cn = c + 1 < nch ? c + 1 : 0;
            mp_item<T, R, U> nxt;
            if (gn < ngroups) /* the next item's loads fly while this one is used */
                mp_issue<T, R, U>(nxt, W, S, n_out, nvec, gn, cn, t);
            C::template compute<T, NB, R, U>(cur, x, xq, xq_row, n_in, nvec, c, t, acc);
            cur = nxt;
        }
        mm_group_store<R, NB>(red, buf, acc, y, n_out, g, acc_y);
    }
}

/* ---- host side: the launch shape, shared by both planar GEMVs; G::go<T, NB, R, U>(a, st) launches ---- */

/* MEMRA_CUDA_MP_ROWS=1|2|4: rows per group at nb <= 2 (a tuning knob for memra-bench; results have the
 * same bits for any R). */
static inline int mp_rows_forced(void) {
    static int cache = KRN_TUNE_UNREAD;
    static const int allowed[] = {1, 2, 4};
    return krn_cuda_tune("MEMRA_CUDA_MP_ROWS", allowed, 3, &cache);
}

/* Rows per group and vectors per row per item (q4_K, q6_K: half of these, headers take registers too; each
 * ignores MEMRA_CUDA_MP_ROWS): R*U = 8 loads in flight per thread at B <= 2 (at B = 1,
 * R = 8, U = 1 when a row has at most one vector per thread), 4 at B 3..4, 2 above (more x rows need the
 * registers; those batches are compute-bound). */
template <class G, int T, int NB>
static void mp_nb(const mm_args *a, cudaStream_t st) {
    if constexpr (T == KRN_Q4_K || T == KRN_Q6_K) { /* a header per vector too (q6_K: 8 bytes and 4 of scales) */
        if constexpr (NB == 1)
            a->n_in / mp_layout<T>::VE <= MP_THREADS ? G::template go<T, NB, 4, 1>(a, st)
                                                     : G::template go<T, NB, 2, 2>(a, st);
        else if constexpr (NB == 2)
            G::template go<T, NB, 2, 2>(a, st);
        else
            G::template go<T, NB, 1, 2>(a, st);
    } else if constexpr (NB == 1) {
        const int f = mp_rows_forced();
        if (f == 0 && a->n_in / mp_layout<T>::VE <= MP_THREADS)
            G::template go<T, NB, 8, 1>(a, st); /* one vector per row per thread (q4 at n_in 4096): 8 rows instead */
        else if (f == 1)
            G::template go<T, NB, 1, 8>(a, st);
        else if (f == 2)
            G::template go<T, NB, 2, 4>(a, st);
        else
            G::template go<T, NB, 4, 2>(a, st);
    } else if constexpr (NB == 2) {
        const int f = mp_rows_forced();
        if (f == 1)
            G::template go<T, NB, 1, 8>(a, st);
        else if (f == 4)
            G::template go<T, NB, 4, 2>(a, st);
        else
            G::template go<T, NB, 2, 4>(a, st);
    } else if constexpr (NB <= 4) {
        G::template go<T, NB, 2, 2>(a, st);
    } else {
        G::template go<T, NB, 1, 2>(a, st);
    }
}

template <class G, int T>
static void mp_type(const mm_args *a, int nb, cudaStream_t st) {
    switch (nb) {
    case 1: mp_nb<G, T, 1>(a, st); break;
    case 2: mp_nb<G, T, 2>(a, st); break;
    case 3: mp_nb<G, T, 3>(a, st); break;
    case 4: mp_nb<G, T, 4>(a, st); break;
    case 5: mp_nb<G, T, 5>(a, st); break;
    case 6: mp_nb<G, T, 6>(a, st); break;
    case 7: mp_nb<G, T, 7>(a, st); break;
    default: mp_nb<G, T, 8>(a, st); break;
    }
}

/* Launch mp_kernel with the products of C. Grid: at most MB blocks per SM (all resident at once), the groups
 * spread evenly over the rounds. */
template <class C> struct mp_go {
    template <int T, int NB, int R, int U> static void go(const mm_args *a, cudaStream_t st) {
        enum { MB = MP_MINB(NB) };
        const int blocks = mm_resident_grid((a->n_out + R - 1) / R, MB * krn_cuda_sm_count());
        krn_launch(mp_kernel<C, T, NB, R, U, MB>, dim3((unsigned)blocks), dim3(MP_THREADS), 0, st, a->y, a->W,
                   (const typename C::xe *)a->x, a->x8, a->x8_row, a->n_out, a->n_in, a->acc);
    }
};

template <class G>
static void mp_types(int type, const mm_args *a, int nb, cudaStream_t st) {
    switch (type) {
    case KRN_Q8_0: mp_type<G, KRN_Q8_0>(a, nb, st); break;
    case KRN_Q4_0: mp_type<G, KRN_Q4_0>(a, nb, st); break;
    case KRN_Q4_K: mp_type<G, KRN_Q4_K>(a, nb, st); break;
    case KRN_Q6_K: mp_type<G, KRN_Q6_K>(a, nb, st); break;
    default: mp_type<G, KRN_Q4_1>(a, nb, st); break;
    }
}

#endif
