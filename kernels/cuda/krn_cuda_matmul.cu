/* Fused dequant GEMV: y (B, n_out) = x (B, n_in) @ W^T for every krn_type, B <= 8 rows per launch.
 *
 * This file: the float types (f32, f16, bf16), the host entry, and gate/up + swiglu in one GEMV
 * (krn_matmul_swiglu_x_async at B = 1). Every kernel is also templated on x's
 * activation type XT (f32, f16, bf16: kernels/krn.h "activation types"): a 16-bit x is widened exactly as it
 * is loaded (KRN_LDX8 / krn_ldx1, krn_cuda_util.cuh), then the f32 arithmetic runs unchanged, so a 16-bit x
 * gives the bits of the f32 x holding the widened values (on the same path: vec or scalar, chosen by the same
 * alignment rules). One warp per output row at a time, MM_WARPS
 * rows per block, a grid of resident blocks walking the rows: each lane reads 8 consecutive weights per 16-byte
 * load (the next 4 or 8 loads in flight while as many are used), or one at a time
 * when the row is not 16-byte aligned. The block types are in krn_cuda_matmul_q.cu.
 * Determinism: each lane accumulates in a fixed order, then a butterfly shuffle sum in a fixed order; no
 * atomics. The order does not depend on B, so a row's result has the same bits in any batch.
 * Shared mutable state: none. */
#include "kernels/cuda/krn_cuda_matmul.cuh"

/* Sum of 4 products in a fixed order, starting from t. */
static __device__ __forceinline__ float dot4(float t, float w0, float w1, float w2, float w3, float4 a) {
    t = fmaf(w0, a.x, t);
    t = fmaf(w1, a.y, t);
    t = fmaf(w2, a.z, t);
    return fmaf(w3, a.w, t);
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

/* x (type XT) elements [e, e + 8) of each of the NB rows: 16-byte loads (f32: two per row, 16-bit: one). */
template <int XT, int NB>
static __device__ __forceinline__ void fma8(const float (&w)[8], const krn_act_e<XT> *x, int n_in, int e,
                                            float (&acc)[NB]) {
#pragma unroll
    for (int b = 0; b < NB; b++) {
        const krn_act_e<XT> *xr = x + (size_t)b * n_in + e;
        float4 a, c;
        KRN_LDX8(XT, xr, a, c);
        acc[b] = dot4(dot4(acc[b], w[0], w[1], w[2], w[3], a), w[4], w[5], w[6], w[7], c);
    }
}

/* Unaligned or n_in % 8 != 0: one warp per row, lane reads weights lane + 32*j one by one. */
template <int T, int XT, int NB>
__global__ void __launch_bounds__(MM_WARPS *KRN_WARP)
    mm_float_kernel(float *__restrict__ y, const uint8_t *__restrict__ W, const krn_act_e<XT> *__restrict__ x,
                    int n_out, int n_in, size_t row_bytes, int acc_y) {
    krn_pdl_enter();
    const int lane = threadIdx.x % KRN_WARP, warp = threadIdx.x / KRN_WARP;
    const int row = blockIdx.x * MM_WARPS + warp;
    if (row >= n_out)
        return;
    const uint8_t *rp = W + (size_t)row * row_bytes;
    float acc[NB];
#pragma unroll
    for (int b = 0; b < NB; b++)
        acc[b] = 0.0f;
    for (int e = lane; e < n_in; e += KRN_WARP) {
        const float w = ld_f1<T>(rp, e);
#pragma unroll
        for (int b = 0; b < NB; b++)
            acc[b] = fmaf(w, krn_ldx1<XT>(x + (size_t)b * n_in + e), acc[b]);
    }
#pragma unroll
    for (int b = 0; b < NB; b++) {
        const float r = krn_warp_sum(acc[b]);
        if (lane == 0)
            y[(size_t)b * n_out + row] = acc_y ? y[(size_t)b * n_out + row] + r : r;
    }
}

/* Chunks of 8 weights per lane per load step, MM_U steps per batch (the loads of one batch issued together);
 * MM_U_DEEP on the launches MEMRA_CUDA_MM_DEEP picks (16-bit weights at NB = 1: 2 x 8 x 16 bytes in flight per
 * lane; at most 128 registers, 4 blocks per SM). */
#define MM_U 4
#define MM_U_DEEP 8
#define MM_CHUNK (8 * KRN_WARP) /* weights a warp covers per step */
/* Blocks per SM the vec kernel's registers must allow. At the 255-register default ptxas sinks the next
 * batch's loads below the current batch's math; 4 (<= 128 registers) keeps them above it. At NB = 1 with
 * 16-bit weights 6 (<= 80 registers, no spills) keeps 24 warps per SM streaming: 85 % vs 80 % of HBM on the
 * 14336x4096 bf16 GEMV at 88 registers (5 blocks), docs/bench/gpu-kernels.md. */
#define MM_VEC_MINB(T, NB) ((NB) == 1 && (T) != KRN_F32 ? 6 : 4)

/* The parts of one vec launch: row r of the list is row r - end[p-1] of part p, the p with
 * end[p-1] <= r < end[p] (end[-1] = 0; unused parts have end = the row count, so no row maps to them). */
typedef struct mm_list {
    const uint8_t *W[KRN_MM_PARTS];
    float *y[KRN_MM_PARTS];
    int end[KRN_MM_PARTS];
} mm_list;

/* Selects with constant indices only: a dynamic index into the kernel parameter would copy the list to
 * local memory (STL/LDL in the SASS) on every launch. */
static __device__ __forceinline__ int mm_part(const mm_list &l, int row, int *local) {
    static_assert(KRN_MM_PARTS == 3, "mm_part selects among 3 parts");
    const int p = (row >= l.end[0]) + (row >= l.end[1]);
    *local = row - (p == 0 ? 0 : p == 1 ? l.end[0] : l.end[1]);
    return p;
}
template <typename P> static __device__ __forceinline__ P mm_pick(P a, P b, P c, int p) {
    return p == 0 ? a : p == 1 ? b : c;
}

/* Row `row` of the list as a pointer to its weights (a row past the list: the last row, read, never used). */
static __device__ __forceinline__ const uint8_t *mm_row_ptr(const mm_list &l, size_t row_bytes, int row) {
    int local;
    const int p = mm_part(l, min(row, l.end[KRN_MM_PARTS - 1] - 1), &local);
    return mm_pick(l.W[0], l.W[1], l.W[2], p) + (size_t)local * row_bytes;
}

/* GLU lists (krn_cuda_matmul_swiglu_async): list row r is row r/2 of gate (r even) or of up (r odd), so a
 * warp walks a gate row, then its up row. A row past the list: the last row, read, never used. */
static __device__ __forceinline__ const uint8_t *mm_glu_row_ptr(const mm_list &l, size_t row_bytes, int row) {
    row = min(row, 2 * l.end[0] - 1);
    return ((row & 1) ? l.W[1] : l.W[0]) + (size_t)(row >> 1) * row_bytes;
}

/* Issue the loads of batch t of the row at rp: steps [t*U, t*U + U). A step past n_in reads the
 * row's last chunk instead (in bounds, never multiplied): unconditional loads keep the compiler from sinking
 * them below the PDL wait or the previous batch's math. */
template <int T, int U = MM_U>
static __device__ __forceinline__ void mm_issue(mm_f8<T> (&r)[U], const uint8_t *rp, int n_in, int t, int lane) {
    const int esz = T == KRN_F32 ? 4 : 2;
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int e = min((t * U + u) * MM_CHUNK + 8 * lane, n_in - 8);
        r[u] = ld_f8<T>(rp + (size_t)e * esz);
    }
}

/* VEC (n_in % 8 == 0, W and x 16-byte aligned). Warp w of block k walks list rows (k + i*gridDim.x)*MM_WARPS + w, i
 * = 0, 1, ... (the rows of every part, one after the other; GLU: the pairs (gate row, up row) of units (k +
 * i*gridDim.x)*MM_WARPS + w, below); lane l reads weights [8*(l + 32*j), +8) of a row, U loads per batch (MM_U, or
 * MM_U_DEEP where MEMRA_CUDA_MM_DEEP picks it). The walk is software pipelined: the next batch's loads (the rest of
 * this row or the start of the next) are issued before the current batch is multiplied and before a finished row is
 * reduced, so memory stays busy across rows; the first two batches are issued BEFORE the PDL wait (W is immutable
 * during a forward: written at load, then the loading stream synced; only x and y are touched by the predecessor
 * kernel), so with MEMRA_PDL a GEMV's weight stream starts while the kernel before it drains. Order: lane l adds
 * its chunks j = 0, 1, ... in order, then a butterfly; it depends on neither B, the grid nor the other parts, so a
 * row has the same bits in any batch and any list. */
/* GLU (krn_cuda_matmul_swiglu_async; NB = 1: MM_GLU; MM_LIST for a plain list): the list is gate (l.W[0]) and up
 * (l.W[1]), l.end[0] rows each, walked as mm_glu_row_ptr says; at the end of an up row lane 0 stores y[unit] =
 * silu(g) * u of its own warp totals, the arithmetic and rounding of swiglu_kernel, into l.y[0] as XT. It triggers
 * its successor after the PDL wait as every GEMV does (a grid that triggered late or never gave wrong logits in the
 * pipelined gates: docs/cuda-kernels.md, "Gate/up + swiglu in one GEMV"). */
enum { MM_LIST = 0, MM_GLU = 1 };
template <int T, int XT, int NB, int GLU = MM_LIST, int U = MM_U>
__global__ void __launch_bounds__(MM_WARPS *KRN_WARP, U == MM_U ? MM_VEC_MINB(T, NB) : 4)
    mm_float_vec_kernel(const mm_list l, const krn_act_e<XT> *__restrict__ x, int n_in, size_t row_bytes, int acc_y) {
    const int lane = threadIdx.x % KRN_WARP, warp = threadIdx.x / KRN_WARP;
    const int nrows = GLU ? 2 * l.end[0] : l.end[KRN_MM_PARTS - 1];
    const int nbatch = (n_in + U * MM_CHUNK - 1) / (U * MM_CHUNK); /* batches per row */
    const int rstride = gridDim.x * MM_WARPS;
    int row = (blockIdx.x * MM_WARPS + warp) * (GLU ? 2 : 1), t = 0;
    /* the row being loaded; resolved once per row */
    const uint8_t *rp = GLU ? mm_glu_row_ptr(l, row_bytes, row) : mm_row_ptr(l, row_bytes, row);
    float g_tot = 0.0f; /* GLU: the warp's total of its current gate row (lane 0's is used) */
    mm_f8<T> cur[U], nxt[U];
    mm_issue<T, U>(cur, rp, n_in, 0, lane);
    if (row >= nrows) { /* no rows for this warp (the grid's last block) */
        krn_pdl_enter();
        return;
    }
    bool waited = false;
    float acc[NB];
#pragma unroll
    for (int b = 0; b < NB; b++)
        acc[b] = 0.0f;
    while (row < nrows) {
        const int next_row = GLU ? ((row & 1) ? row + 2 * rstride - 1 : row + 1) : row + rstride;
        const int nrow = t + 1 < nbatch ? row : next_row, nt = t + 1 < nbatch ? t + 1 : 0;
        if (nt == 0)
            rp = GLU ? mm_glu_row_ptr(l, row_bytes, nrow) : mm_row_ptr(l, row_bytes, nrow);
        mm_issue<T, U>(nxt, rp, n_in, nt, lane); /* in flight while cur is used */
        if (!waited) { /* two batches of weights fly before the PDL wait: x and y are touched only after it */
            krn_pdl_enter_after_loads();
            waited = true;
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int e = (t * U + u) * MM_CHUNK + 8 * lane;
            if (e < n_in) {
                float w[8];
                cvt_f8<T>(cur[u], w);
                fma8<XT, NB>(w, x, n_in, e, acc);
            }
        }
        if (GLU && nt == 0) { /* a gate row done: keep its total; an up row: store silu(g) * u */
            const float r = krn_warp_sum(acc[0]);
            if (!(row & 1)) {
                g_tot = r;
            } else if (lane == 0) {
                krn_act_e<XT> *y = (krn_act_e<XT> *)l.y[0];
                y[row >> 1] = krn_act_of<XT>(g_tot / (1.0f + expf(-g_tot)) * r);
            }
            acc[0] = 0.0f;
        } else if (nt == 0) { /* row done */
            int local;
            const int p = mm_part(l, row, &local);
            const int n_out = mm_pick(l.end[0], l.end[1] - l.end[0], l.end[2] - l.end[1], p);
            float *yp = mm_pick(l.y[0], l.y[1], l.y[2], p) + local;
#pragma unroll
            for (int b = 0; b < NB; b++) {
                const float r = krn_warp_sum(acc[b]);
                if (lane == 0)
                    yp[(size_t)b * n_out] = acc_y ? yp[(size_t)b * n_out] + r : r;
                acc[b] = 0.0f;
            }
        }
        row = nrow;
        t = nt;
#pragma unroll
        for (int u = 0; u < U; u++)
            cur[u] = nxt[u];
    }
}

/* ---- host side ---- */

/* Blocks per SM of a kernel (at least 1), asked once per kernel. */
template <typename K>
static int mm_occupancy(K k, int *cache) {
    int n = __atomic_load_n(cache, __ATOMIC_RELAXED);
    if (n <= 0) {
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k, MM_WARPS * KRN_WARP, 0) != cudaSuccess || n < 1) {
            (void)cudaGetLastError();
            n = 1;
        }
        __atomic_store_n(cache, n, __ATOMIC_RELAXED); /* a racing first call stores the same value */
    }
    return n;
}

/* MEMRA_CUDA_MM_GRID: 0 (default) a grid of resident blocks walking the rows (mm_grid_blocks); 1 a block per row
 * group (the hardware balances blocks over SMs as they finish); 2 the resident grid with the groups always spread
 * evenly at every walk length. A tuning knob for memra-bench; same bits every way. */
static int mm_grid_mode(void) {
    static int cache = KRN_TUNE_UNREAD;
    static const int allowed[] = {0, 1, 2};
    return krn_cuda_tune("MEMRA_CUDA_MM_GRID", allowed, 3, &cache);
}

/* Rounds from which a walk takes the whole resident cap (MEMRA_CUDA_MM_GRID 0). */
#define MM_FULL_ROUNDS 4

/* Blocks of kernel k's grid over `groups` groups of MM_WARPS rows (GLU: units), occ its cached occupancy.
 * MEMRA_CUDA_MM_GRID 0: resident blocks walking the groups. A walk of MM_FULL_ROUNDS rounds or more (the GLU's 7
 * and the head's 61 on the 8B shape) takes every resident slot: blocks then walk one group more or fewer (a
 * quarter of a walk at most), and those a round short free their slots early for the next kernel's blocks, which
 * stream their first weights before their PDL wait: -4 to -6 µs an 8B step on one H200, within
 * noise on another (docs/cuda-kernels.md "Matmul"). A shorter walk (q/k/v 3 rounds, o and down 2) spreads the
 * groups evenly (mm_resident_grid): there a block a round short idles a third to a half of the walk, and the
 * same change cost 3 to 9 µs a step each. */
template <typename K>
static int mm_grid_blocks(K k, int *occ, int groups) {
    const int mode = mm_grid_mode();
    if (mode == 1)
        return mm_resident_grid(groups, 0);
    const int cap = mm_occupancy(k, occ) * krn_cuda_sm_count();
    if (mode == 0 && groups > (MM_FULL_ROUNDS - 1) * cap) /* ceil(groups / cap) >= MM_FULL_ROUNDS */
        return cap;
    return mm_resident_grid(groups, cap);
}

/* MEMRA_CUDA_MM_DEEP: loads per batch of the vec walk at NB = 1 over 16-bit weights. 1 (default): 8 (MM_U_DEEP) on
 * short lists, where each warp of the 4-load kernel's resident grid walks at most 2 rows (q/k/v, o and down on the
 * 8B shape), and on the GLU GEMV; 4 elsewhere. 2: 8 on every such launch (the head too). 0: 4 everywhere. Same bits
 * (the lane's chunk order does not depend on the batch size). Measured: docs/cuda-kernels.md, "Eight loads per
 * batch". */
static int mm_deep_mode(void) {
    static int cache = KRN_TUNE_UNREAD;
    static const int allowed[] = {0, 1, 2};
    return krn_cuda_tune_or("MEMRA_CUDA_MM_DEEP", allowed, 3, 1, &cache);
}

/* One launch of mm_float_vec_kernel<T, XT, NB, GLU, U> over `groups` groups (rows or GLU units / MM_WARPS). */
template <int T, int XT, int NB, int GLU, int U>
static void mm_vec_launch_u(const mm_list *l, const void *x, int groups, int n_in, size_t row_bytes, int acc,
                            cudaStream_t st) {
    static int occ = 0;
    const int blocks = mm_grid_blocks(mm_float_vec_kernel<T, XT, NB, GLU, U>, &occ, groups);
    krn_launch(mm_float_vec_kernel<T, XT, NB, GLU, U>, dim3((unsigned)blocks), dim3(MM_WARPS * KRN_WARP), 0, st, *l,
               (const krn_act_e<XT> *)x, n_in, row_bytes, acc);
}

/* Whether a list of `rows` rows walks 8 loads per batch (MEMRA_CUDA_MM_DEEP; NB = 1, 16-bit weights): mode 1 when
 * rows <= 2 x the warps of the 4-load kernel's resident grid (its occupancy x SMs x MM_WARPS). */
template <int T, int XT>
static int mm_deep_list(int rows) {
    static int occ = 0;
    const int d = mm_deep_mode();
    return d == 2 ||
           (d == 1 && rows <= 2 * mm_occupancy(mm_float_vec_kernel<T, XT, 1, MM_LIST, MM_U>, &occ) *
                                  krn_cuda_sm_count() * MM_WARPS);
}

template <int T, int XT, int NB>
static void mm_vec_launch(const mm_list *l, const void *x, int n_in, size_t row_bytes, int acc, cudaStream_t st) {
    const int rows = l->end[KRN_MM_PARTS - 1], groups = (rows + MM_WARPS - 1) / MM_WARPS;
    if constexpr (NB == 1 && T != KRN_F32) {
        if (mm_deep_list<T, XT>(rows))
            return mm_vec_launch_u<T, XT, 1, MM_LIST, MM_U_DEEP>(l, x, groups, n_in, row_bytes, acc, st);
    }
    mm_vec_launch_u<T, XT, NB, MM_LIST, MM_U>(l, x, groups, n_in, row_bytes, acc, st);
}

template <int T, int XT>
static void mm_vec_nb(const mm_list *l, const void *x, int nb, int n_in, size_t row_bytes, int acc,
                      cudaStream_t st) {
    switch (nb) {
    case 1: mm_vec_launch<T, XT, 1>(l, x, n_in, row_bytes, acc, st); break;
    case 2: mm_vec_launch<T, XT, 2>(l, x, n_in, row_bytes, acc, st); break;
    case 3: mm_vec_launch<T, XT, 3>(l, x, n_in, row_bytes, acc, st); break;
    case 4: mm_vec_launch<T, XT, 4>(l, x, n_in, row_bytes, acc, st); break;
    case 5: mm_vec_launch<T, XT, 5>(l, x, n_in, row_bytes, acc, st); break;
    case 6: mm_vec_launch<T, XT, 6>(l, x, n_in, row_bytes, acc, st); break;
    case 7: mm_vec_launch<T, XT, 7>(l, x, n_in, row_bytes, acc, st); break;
    default: mm_vec_launch<T, XT, 8>(l, x, n_in, row_bytes, acc, st); break;
    }
}

/* mm_vec_nb for x's activation type */
template <int T>
static void mm_vec_xt(const mm_list *l, const void *x, int xt, int nb, int n_in, size_t row_bytes, int acc,
                      cudaStream_t st) {
    switch (xt) {
    case KRN_F16: mm_vec_nb<T, KRN_F16>(l, x, nb, n_in, row_bytes, acc, st); break;
    case KRN_BF16: mm_vec_nb<T, KRN_BF16>(l, x, nb, n_in, row_bytes, acc, st); break;
    default: mm_vec_nb<T, KRN_F32>(l, x, nb, n_in, row_bytes, acc, st); break;
    }
}

template <int T, int XT>
static void mm_scalar_nb(const mm_args *a, int nb, cudaStream_t st) {
    const dim3 grid((unsigned)((a->n_out + MM_WARPS - 1) / MM_WARPS)), block(MM_WARPS * KRN_WARP);
#define MM_SCALAR(NB_)                                                                                         \
    krn_launch(mm_float_kernel<T, XT, NB_>, grid, block, 0, st, a->y, a->W, (const krn_act_e<XT> *)a->x, a->n_out, \
               a->n_in, a->row_bytes, a->acc)
    switch (nb) {
    case 1: MM_SCALAR(1); break;
    case 2: MM_SCALAR(2); break;
    case 3: MM_SCALAR(3); break;
    case 4: MM_SCALAR(4); break;
    case 5: MM_SCALAR(5); break;
    case 6: MM_SCALAR(6); break;
    case 7: MM_SCALAR(7); break;
    default: MM_SCALAR(8); break;
    }
#undef MM_SCALAR
}

/* mm_scalar_nb for x's activation type */
template <int T>
static void mm_scalar_xt(const mm_args *a, int nb, cudaStream_t st) {
    switch (a->xt) {
    case KRN_F16: mm_scalar_nb<T, KRN_F16>(a, nb, st); break;
    case KRN_BF16: mm_scalar_nb<T, KRN_BF16>(a, nb, st); break;
    default: mm_scalar_nb<T, KRN_F32>(a, nb, st); break;
    }
}

/* Host checks of one part over x of activation type xt; sets *vec when the part can go through the vec kernel.
 * Alignment of x, the same for every xt except the element's own: PLANES and block types 16 bytes (the loads
 * of 4 elements are then 16 bytes for f32, 8 for 16-bit; of 8 elements 16 bytes for 16-bit), float types the
 * element (vec when 16 bytes; rows then stay 16-byte aligned since n_in % 8 == 0). So an x and its widened f32
 * copy, both 16-byte aligned, take the same path and get the same bits. */
static int mm_check(const float *y, const krn_weight *W, const void *x, int xt, int B, int *vec, dev_err *err) {
    if (!W)
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_matmul: W is NULL");
    const int be = krn_type_block_elems(W->type); /* 0: unsupported */
    if (be == 0)
        return dev_err_set(err, MEMRA_E_INVAL,
                           "krn_cuda_matmul: weight type %d unsupported (allowed: f32, f16, bf16, q8_0, q4_0, "
                           "q4_1, q4_k, q5_k, q6_k)", W->type);
    if (B < 0 || W->n_out <= 0 || W->n_in <= 0)
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_matmul: B=%d n_out=%d n_in=%d (need B >= 0, n > 0)", B,
                           W->n_out, W->n_in);
    if (B > 0 && (!y || !x || !W->data))
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_matmul: NULL pointer (y=%p x=%p W->data=%p)", (void *)y,
                           (const void *)x, W->data);
    if (W->n_in % be != 0)
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_matmul: n_in=%d is not a multiple of %d (type %d blocks)",
                           W->n_in, be, W->type);
    int rc = krn_layout_check(W, 1, err); /* a known layout; planes only of a type krn_planes_supported accepts */
    if (rc)
        return rc;
    if (W->layout == KRN_LAYOUT_PLANES) { /* repacked on its device (krn_cuda_matmul_p.cu) */
        *vec = 0;
        if (!krn_cuda_aligned(W->data, 16) || !krn_cuda_aligned(x, 16))
            return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_matmul: planes W->data %p and x %p must be 16-byte "
                               "aligned", W->data, (const void *)x);
        return 0;
    }
    const unsigned walign = W->type == KRN_F32 ? 4 : 2, xalign = (unsigned)krn_act_bytes(xt);
    if (!krn_cuda_aligned(W->data, walign) || !krn_cuda_aligned(x, xalign))
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_matmul: W->data %p must be %u-byte aligned, x %p %u-byte",
                           W->data, walign, (const void *)x, xalign);
    const int is_float = be == 1;
    if (!is_float && !krn_cuda_aligned(x, 16))
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_matmul: x %p must be 16-byte aligned for block types",
                           (const void *)x);
    *vec = is_float && W->n_in % 8 == 0 && krn_cuda_aligned(W->data, 16) && krn_cuda_aligned(x, 16);
    return 0;
}

/* Parts [0, n) of one float type, rows [b0, b0 + nb) of x (type xt), in one vec launch walking their rows as one
 * list. */
static void mm_vec_parts(const krn_mm_part *parts, int n, const void *x, int xt, int b0, int nb, int acc,
                         cudaStream_t st) {
    const krn_weight *W0 = parts[0].W;
    mm_list l = {};
    int end = 0;
    for (int i = 0; i < KRN_MM_PARTS; i++) {
        if (i < n) {
            l.W[i] = (const uint8_t *)parts[i].W->data;
            l.y[i] = parts[i].y + (size_t)b0 * parts[i].W->n_out;
            end += parts[i].W->n_out;
        }
        l.end[i] = end;
    }
    const size_t rb = krn_row_bytes(W0->type, W0->n_in);
    const void *xb = (const uint8_t *)x + (size_t)b0 * W0->n_in * krn_act_bytes(xt);
    switch (W0->type) {
    case KRN_F32: mm_vec_xt<KRN_F32>(&l, xb, xt, nb, W0->n_in, rb, acc, st); break;
    case KRN_F16: mm_vec_xt<KRN_F16>(&l, xb, xt, nb, W0->n_in, rb, acc, st); break;
    default: mm_vec_xt<KRN_BF16>(&l, xb, xt, nb, W0->n_in, rb, acc, st); break;
    }
}

/* One part that is not vec-able (unaligned or odd float rows, block types, planes), rows [b0, b0 + nb) of x (type
 * xt; PLANES read x8 instead when not NULL). */
static void mm_one(const krn_mm_part *p, const void *x, int xt, const void *x8, int b0, int nb, int acc,
                   cudaStream_t st) {
    const krn_weight *W = p->W;
    mm_args a;
    a.x8_row = krn_x8_row_bytes(W->n_in);
    a.x8 = x8 ? (const uint8_t *)x8 + (size_t)b0 * a.x8_row : NULL;
    a.y = p->y + (size_t)b0 * W->n_out;
    a.W = (const uint8_t *)W->data;
    a.x = (const uint8_t *)x + (size_t)b0 * W->n_in * krn_act_bytes(xt);
    a.xt = xt;
    a.n_out = W->n_out;
    a.n_in = W->n_in;
    a.acc = acc;
    if (W->layout == KRN_LAYOUT_PLANES) {
        a.row_bytes = krn_planes_qrow(W->type, W->n_in);
        if (a.x8)
            mm_x8_launch(W->type, &a, nb, st);
        else
            mm_p_launch(W->type, &a, nb, st);
        return;
    }
    a.row_bytes = krn_row_bytes(W->type, W->n_in);
    switch (W->type) {
    case KRN_F32: mm_scalar_xt<KRN_F32>(&a, nb, st); break;
    case KRN_F16: mm_scalar_xt<KRN_F16>(&a, nb, st); break;
    case KRN_BF16: mm_scalar_xt<KRN_BF16>(&a, nb, st); break;
    default: mm_q_launch(W->type, &a, nb, st); break;
    }
}

extern "C" int krn_cuda_matmul_parts_async(void *cuda_stream, const krn_mm_part *parts, int n, const krn_mm_x *xx,
                                           int B, int acc, dev_err *err) {
    if (!parts || n < 1 || n > KRN_MM_PARTS)
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_matmul: %d parts (allowed 1..%d)", n, KRN_MM_PARTS);
    if (!xx || !krn_act_type_ok(xx->type))
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_matmul: x %s (allowed x types: f32, f16, bf16; got %d)",
                           xx ? "of an unknown type" : "is NULL", xx ? xx->type : -1);
    const void *x = xx->x, *x8 = xx->x8;
    const int xt = xx->type;
    if (x8 && (!krn_x8_row_bytes(parts[0].W ? parts[0].W->n_in : 0) || !krn_cuda_aligned(x8, 16)))
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_matmul: x8 %p needs n_in a multiple of 32 and 16-byte "
                           "alignment", x8);
    int vec[KRN_MM_PARTS], all_vec = 1;
    for (int i = 0; i < n; i++) {
        int rc = mm_check(parts[i].y, parts[i].W, x, xt, B, &vec[i], err);
        if (rc)
            return n > 1 ? dev_err_wrap(err, "part %d of %d", i, n) : rc;
        if (parts[i].W->n_in != parts[0].W->n_in)
            return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_matmul: part %d has n_in=%d, part 0 %d (must match)", i,
                               parts[i].W->n_in, parts[0].W->n_in);
        all_vec = all_vec && vec[i] && parts[i].W->type == parts[0].W->type;
    }
    if (B == 0)
        return 0;
    cudaStream_t st = (cudaStream_t)cuda_stream;
    const krn_weight *W0 = parts[0].W;
    for (int b0 = 0; b0 < B; b0 += MM_MAX_B) {
        const int nb = B - b0 < MM_MAX_B ? B - b0 : MM_MAX_B;
        if (all_vec) { /* one launch walks every part's rows */
            mm_vec_parts(parts, n, x, xt, b0, nb, acc, st);
        } else {
            for (int i = 0; i < n; i++)
                if (vec[i])
                    mm_vec_parts(&parts[i], 1, x, xt, b0, nb, acc, st);
                else
                    mm_one(&parts[i], x, xt, x8, b0, nb, acc, st);
        }
        int rc = krn_cuda_launch_check(err, "krn_cuda_matmul");
        if (rc)
            return dev_err_wrap(err, "type %d, %dx%d, %d part(s), B=%d, x type %d", W0->type, W0->n_out, W0->n_in, n,
                                B, xt), rc;
    }
    return 0;
}

/* ---- gate/up + swiglu in one GEMV (krn_matmul_swiglu_x_async at B = 1) ---- */

/* MEMRA_CUDA_GLU: 1 (default) the fused GEMV; 0 the two ops. Same bits either way. */
static int mm_glu_mode(void) {
    static int cache = KRN_TUNE_UNREAD;
    static const int allowed[] = {0, 1};
    return krn_cuda_tune_or("MEMRA_CUDA_GLU", allowed, 2, 1, &cache);
}

extern "C" int krn_cuda_glu_fits(const void *y, int yt, const krn_weight *Wg, const krn_weight *Wu, const krn_mm_x *x,
                                 int B) {
    if (B != 1 || mm_glu_mode() == 0 || !y || !x || !x->x || yt != x->type) /* cuBLAS never takes B = 1 */
        return 0;
    if (!Wg || !Wu || Wg->type != Wu->type || krn_type_block_elems(Wg->type) != 1 || Wg->layout != Wu->layout ||
        Wg->layout == KRN_LAYOUT_PLANES || Wg->n_out != Wu->n_out || Wg->n_in != Wu->n_in || Wg->n_in % 8 != 0)
        return 0;
    /* y is stored unit by unit while other warps still read x: they must not share a byte */
    return krn_bytes_disjoint(y, (size_t)Wg->n_out * krn_act_bytes(yt), x->x,
                              (size_t)Wg->n_in * krn_act_bytes(x->type)) &&
           krn_cuda_aligned(Wg->data, 16) && krn_cuda_aligned(Wu->data, 16) && krn_cuda_aligned(x->x, 16) &&
           krn_cuda_aligned(y, (unsigned)krn_act_bytes(yt));
}

template <int T, int XT>
static void mm_glu_launch(const mm_list *l, const void *x, int n_in, size_t row_bytes, cudaStream_t st) {
    const int groups = (l->end[0] + MM_WARPS - 1) / MM_WARPS; /* a unit (gate row + up row) per warp at a time */
    if constexpr (T != KRN_F32) {
        if (mm_deep_mode() != 0)
            return mm_vec_launch_u<T, XT, 1, MM_GLU, MM_U_DEEP>(l, x, groups, n_in, row_bytes, 0, st);
    }
    mm_vec_launch_u<T, XT, 1, MM_GLU, MM_U>(l, x, groups, n_in, row_bytes, 0, st);
}

template <int T>
static void mm_glu_xt(const mm_list *l, const void *x, int xt, int n_in, size_t row_bytes, cudaStream_t st) {
    switch (xt) {
    case KRN_F16: mm_glu_launch<T, KRN_F16>(l, x, n_in, row_bytes, st); break;
    case KRN_BF16: mm_glu_launch<T, KRN_BF16>(l, x, n_in, row_bytes, st); break;
    default: mm_glu_launch<T, KRN_F32>(l, x, n_in, row_bytes, st); break;
    }
}

extern "C" int krn_cuda_matmul_swiglu_async(void *cuda_stream, void *y, const krn_weight *Wg, const krn_weight *Wu,
                                            const krn_mm_x *x, dev_err *err) {
    if (!krn_cuda_glu_fits(y, x ? x->type : -1, Wg, Wu, x, 1))
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_matmul_swiglu: arguments outside the fused GEMV (allowed: "
                           "Wg, Wu one float type, n_in %% 8 == 0, 16-byte aligned; x 16-byte aligned; y of x's type, "
                           "not overlapping x; MEMRA_CUDA_GLU not 0)");
    mm_list l = {};
    l.W[0] = (const uint8_t *)Wg->data;
    l.W[1] = (const uint8_t *)Wu->data;
    l.y[0] = (float *)y; /* of x's activation type: the kernel stores krn_act_e<XT> */
    l.end[0] = Wg->n_out;
    l.end[1] = l.end[2] = 2 * Wg->n_out;
    const size_t rb = krn_row_bytes(Wg->type, Wg->n_in);
    cudaStream_t st = (cudaStream_t)cuda_stream;
    switch (Wg->type) {
    case KRN_F32: mm_glu_xt<KRN_F32>(&l, x->x, x->type, Wg->n_in, rb, st); break;
    case KRN_F16: mm_glu_xt<KRN_F16>(&l, x->x, x->type, Wg->n_in, rb, st); break;
    default: mm_glu_xt<KRN_BF16>(&l, x->x, x->type, Wg->n_in, rb, st); break;
    }
    int rc = krn_cuda_launch_check(err, "krn_cuda_matmul_swiglu");
    return rc ? dev_err_wrap(err, "type %d, 2 x %dx%d, x type %d", Wg->type, Wg->n_out, Wg->n_in, x->type), rc : 0;
}

extern "C" int krn_cuda_matmul_async(void *cuda_stream, float *y, const krn_weight *W, const float *x, int B,
                                     dev_err *err) {
    const krn_mm_part p = {y, W};
    const krn_mm_x xx = {x, KRN_F32, NULL};
    return krn_cuda_matmul_parts_async(cuda_stream, &p, 1, &xx, B, 0, err);
}
