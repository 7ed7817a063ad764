/* Private to krn_cuda_matmul*.cu: the arguments of one GEMV launch (at most MM_MAX_B rows of x) and the
 * launchers of the block-type kernels (krn_cuda_matmul_q.cu) and of the planar ones
 * (krn_cuda_matmul_p.cu), called by krn_cuda_matmul_async. */
#ifndef KRN_CUDA_MATMUL_CUH
#define KRN_CUDA_MATMUL_CUH

#include "kernels/cuda/krn_cuda_util.cuh"

#define MM_WARPS 4 /* warps per block */
#define MM_MAX_B 8 /* x rows per launch (accumulators in registers) */

typedef struct mm_args {
    float *y;         /* (nb, n_out) */
    const uint8_t *W; /* the whole tensor, row r at W + r*row_bytes */
    const float *x;   /* (nb, n_in), 16-byte aligned for block types */
    int n_out, n_in;
    size_t row_bytes;
    int acc; /* 1: y += the product (the residual add of krn_matmul_acc_async) */
} mm_args;

/* Enqueue y = x @ W^T for nb (1..MM_MAX_B) rows of a block-type W (q4_0, q4_1, q8_0, q4_k, q6_k) on st.
 * Launch errors are left for the caller's cudaGetLastError. */
void mm_q_launch(int type, const mm_args *a, int nb, cudaStream_t st);

/* Enqueue y = x @ W^T for nb (1..MM_MAX_B) rows of a KRN_LAYOUT_PLANES W (q8_0, q4_0, q4_1: a->W the
 * planes, 16-byte aligned; a->row_bytes unused) on st (krn_cuda_matmul_p.cu). Launch errors are left for
 * the caller's cudaGetLastError. */
void mm_p_launch(int type, const mm_args *a, int nb, cudaStream_t st);

#endif
