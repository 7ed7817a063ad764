/* Private to the planar GEMVs (krn_cuda_matmul_p.cu: f32 x; krn_cuda_matmul_x8.cu: int8 x): the per-type
 * layout of a PLANES weight (kernels/krn.h), the item of R rows x U 16-byte vectors a thread loads ahead,
 * and the q4_K sub-block scale. See krn_cuda_matmul_p.cu's file comment for the walk both kernels share. */
#ifndef KRN_CUDA_PLANES_CUH
#define KRN_CUDA_PLANES_CUH

#include "kernels/cuda/krn_cuda_matmul.cuh"
#include "kernels/cuda/krn_cuda_planes.h"

#define MP_THREADS (MM_WARPS * KRN_WARP)
/* Blocks per SM the compiler must fit and the grid uses: 4 at B <= 2 (128 registers), 3 above. */
#define MP_MINB(NB) ((NB) <= 2 ? 4 : 3)

/* Per type: elements per 16-byte vector, bytes of a scale entry, elements per scale entry; the register
 * type of an entry. */
template <int T> struct mp_layout;
template <> struct mp_layout<KRN_Q8_0> { enum { VE = 16, SB = 2, SE = 32 }; typedef uint32_t S; };
template <> struct mp_layout<KRN_Q4_0> { enum { VE = 32, SB = 2, SE = 32 }; typedef uint32_t S; };
template <> struct mp_layout<KRN_Q4_1> { enum { VE = 32, SB = 4, SE = 32 }; typedef uint32_t S; };
template <> struct mp_layout<KRN_Q4_K> { enum { VE = 32, SB = 16, SE = 256 }; typedef uint4 S; };

/* The weights of one item: R rows x U vectors, and each vector's scale entry (d, d | m << 16, or the q4_K
 * super-block header). */
template <int T, int R, int U> struct mp_item {
    uint4 q[R][U];
    typename mp_layout<T>::S s[R][U];
};

/* Issue the loads of item (g, c): vectors v = c*128*U + 128*u + t of rows g*R + r (rows past n_out read
 * row n_out - 1, never written); vectors past nvec are not read (zero). */
template <int T, int R, int U>
static __device__ __forceinline__ void mp_issue(mp_item<T, R, U> &it, const uint8_t *W, const uint8_t *S, int n_out,
                                                int nvec, int g, int c, int t) {
    enum { VE = mp_layout<T>::VE, SB = mp_layout<T>::SB, SE = mp_layout<T>::SE };
    const int v0 = c * MP_THREADS * U + t;
    const bool full = (c + 1) * MP_THREADS * U <= nvec;
#pragma unroll
    for (int r = 0; r < R; r++) {
        const size_t row = (size_t)min(g * R + r, n_out - 1);
        const uint8_t *qr = W + row * (size_t)nvec * 16;
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

/* q4_K: sub-block j (0..7) of the super-block whose header h is (d | dmin << 16, scales[0..12) as 3 words):
 * d1 = d * sc, m1 = dmin * m with GGUF's 6-bit sc, m of sub-block j (get_scale_min_k4), so an element is
 * d1 * q - m1 and the sub-block's dot is d1 * sum(q x) - m1 * sum(x). */
static __device__ __forceinline__ void mp_q4k_scale(uint4 h, int j, float &d1, float &m1) {
    const int sh = 8 * (j & 3);
    const uint32_t by = (h.y >> sh) & 0xFFu, bz = (h.z >> sh) & 0xFFu, bw = (h.w >> sh) & 0xFFu;
    const uint32_t sc = j < 4 ? by & 63u : (bw & 0xFu) | ((by >> 6) << 4);
    const uint32_t mn = j < 4 ? bz & 63u : (bw >> 4) | ((bz >> 6) << 4);
    d1 = krn_h2f((uint16_t)(h.x & 0xFFFFu)) * (float)sc;
    m1 = krn_h2f((uint16_t)(h.x >> 16)) * (float)mn;
}

/* ---- host side: the launch shape, shared by both planar GEMVs; G::go<T, NB, R, U>(a, st) launches ---- */

/* MEMRA_CUDA_MP_ROWS=1|2|4: rows per group at nb <= 2 (a tuning knob for memra-bench; results have the
 * same bits for any R). */
static inline int mp_rows_forced(void) {
    static int cache = KRN_TUNE_UNREAD;
    static const int allowed[] = {1, 2, 4};
    return krn_cuda_tune("MEMRA_CUDA_MP_ROWS", allowed, 3, &cache);
}

/* Rows per group and vectors per row per item (q4_K: half of these, its headers take registers too; it
 * ignores MEMRA_CUDA_MP_ROWS): R*U = 8 loads in flight per thread at B <= 2 (at B = 1,
 * R = 8, U = 1 when a row has at most one vector per thread), 4 at B 3..4, 2 above (more x rows need the
 * registers; those batches are compute-bound). */
template <class G, int T, int NB>
static void mp_nb(const mm_args *a, cudaStream_t st) {
    if constexpr (T == KRN_Q4_K) { /* a 16-byte header per vector too: half the items' loads fit the registers */
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

template <class G>
static void mp_types(int type, const mm_args *a, int nb, cudaStream_t st) {
    switch (type) {
    case KRN_Q8_0: mp_type<G, KRN_Q8_0>(a, nb, st); break;
    case KRN_Q4_0: mp_type<G, KRN_Q4_0>(a, nb, st); break;
    case KRN_Q4_K: mp_type<G, KRN_Q4_K>(a, nb, st); break;
    default: mp_type<G, KRN_Q4_1>(a, nb, st); break;
    }
}

#endif
