/* Private to krn_cuda_matmul*.cu: the arguments of one GEMV launch (at most MM_MAX_B rows of x) and the
 * launchers of the block-type kernels (krn_cuda_matmul_q.cu) and of the planar ones
 * (krn_cuda_matmul_p.cu), called by krn_cuda_matmul_async. */
#ifndef KRN_CUDA_MATMUL_CUH
#define KRN_CUDA_MATMUL_CUH

#include "kernels/cuda/krn_cuda_util.cuh"

#define MM_WARPS 4 /* warps per block */
#define MM_MAX_B 8 /* x rows per launch (accumulators in registers) */

/* Blocks of a grid whose blocks all fit at once (cap = resident blocks; 0 = no cap: a block per group): the
 * groups spread evenly over the fewest rounds, so every block walks the same number of groups. */
static inline int mm_resident_grid(int groups, int cap) {
    if (cap <= 0 || groups <= cap)
        return groups;
    const int rounds = (groups + cap - 1) / cap;
    return (groups + rounds - 1) / rounds;
}

typedef struct mm_args {
    float *y;         /* (nb, n_out) */
    const uint8_t *W; /* the whole tensor, row r at W + r*row_bytes */
    const void *x;    /* (nb, n_in) of activation type xt, 16-byte aligned for block types and planes */
    int xt;           /* KRN_F32, KRN_F16, KRN_BF16: the kernels widen 16-bit x exactly on load */
    int n_out, n_in;
    size_t row_bytes;
    int acc; /* 1: y += the product (the residual add of krn_matmul_acc_async) */
    const uint8_t *x8; /* the nb rows of x quantized (kernels/krn.h "x quantized to int8"), or NULL */
    size_t x8_row;     /* krn_x8_row_bytes(n_in) */
} mm_args;

/* A row group's accumulators, zeroed (the block GEMV and the planar walk start every group so). */
template <int R, int NB>
static __device__ __forceinline__ void mm_acc_zero(float (&acc)[R][NB]) {
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int b = 0; b < NB; b++)
            acc[r][b] = 0.0f;
}

/* The end of a row group in the block kernels (krn_cuda_matmul_q.cu, _p.cu): each warp's butterfly totals of
 * the group's R rows x NB rows of x go to red[buf][warp], then one thread per (row, x row) adds the warp
 * totals in warp order and stores (acc_y: y +=). The barrier is the group's; red is double-buffered by the
 * caller (buf = group parity), so no second barrier is needed before the next group writes. */
template <int R, int NB>
static __device__ __forceinline__ void mm_group_store(float (&red)[2][MM_WARPS][R * NB], int buf,
                                                      const float (&acc)[R][NB], float *y, int n_out, int g,
                                                      int acc_y) {
    const int lane = threadIdx.x % KRN_WARP, warp = threadIdx.x / KRN_WARP;
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int b = 0; b < NB; b++) {
            const float t = krn_warp_sum(acc[r][b]);
            if (lane == 0)
                red[buf][warp][r * NB + b] = t;
        }
    __syncthreads(); /* every warp's totals of group g are in red[buf] */
    if (threadIdx.x < R * NB) {
        const int r = threadIdx.x / NB, b = threadIdx.x % NB, row = g * R + r;
        if (row < n_out) {
            float t = red[buf][0][threadIdx.x];
#pragma unroll
            for (int w = 1; w < MM_WARPS; w++)
                t += red[buf][w][threadIdx.x];
            y[(size_t)b * n_out + row] = acc_y ? y[(size_t)b * n_out + row] + t : t;
        }
    }
}

/* Enqueue y = x @ W^T for nb (1..MM_MAX_B) rows of a block-type W (q4_0, q4_1, q8_0, q4_k, q6_k) on st.
 * Launch errors are left for the caller's cudaGetLastError. */
void mm_q_launch(int type, const mm_args *a, int nb, cudaStream_t st);

/* Enqueue y = x @ W^T for nb (1..MM_MAX_B) rows of a KRN_LAYOUT_PLANES W (q8_0, q4_0, q4_1, q4_K, q6_K: a->W the
 * planes, 16-byte aligned; a->row_bytes unused) on st (krn_cuda_matmul_p.cu). Launch errors are left for
 * the caller's cudaGetLastError. */
void mm_p_launch(int type, const mm_args *a, int nb, cudaStream_t st);

/* The same with a->x8 (not NULL) in place of a->x: products as int8 dot products (krn_cuda_matmul_x8.cu). */
void mm_x8_launch(int type, const mm_args *a, int nb, cudaStream_t st);

#endif
