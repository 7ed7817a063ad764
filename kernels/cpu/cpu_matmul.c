/* CPU matmul over a weight of any krn_type, read as stored (no conversion): each output is one
 * krn_dot_row (kernels/quant.c), whose fixed block order makes the result independent of B, of the
 * stream and of the stage. No shared state. */
#include "kernels/cpu/krn_cpu.h"

/* y (B, n_out) = x (B, n_in) @ W^T, W (n_out, n_in).
 * Loop o outer, b inner: weight row o is read once (from memory) for all B rows. With B >= 2 the row is
 * dequantized once into a stack buffer and each row of x takes an f32 dot with it: the values and the 16-lane
 * order are the ones krn_dot_row defines, so the bits equal B single-row calls (tests/test_kernels.c). */
#define KRN_CPU_DEQ_MAX 16384 /* n_in up to this dequantizes on the stack (64 KiB) */
void krn_cpu_matmul(const krn_cpu_matmul_args *a)
{
    const unsigned char *w = a->w;
    if (a->B >= 2 && a->type != KRN_F32 && a->n_in <= KRN_CPU_DEQ_MAX) {
        float row_f[KRN_CPU_DEQ_MAX];
        for (int o = 0; o < a->n_out; o++) {
            krn_dequant_row(a->type, w + (size_t)o * a->row_bytes, row_f, a->n_in);
            for (int b = 0; b < a->B; b++)
                a->y[(size_t)b * a->n_out + o] = krn_dot_row(KRN_F32, row_f, a->x + (size_t)b * a->n_in, a->n_in);
        }
        return;
    }
    for (int o = 0; o < a->n_out; o++) {
        const void *row = w + (size_t)o * a->row_bytes;
        for (int b = 0; b < a->B; b++)
            a->y[(size_t)b * a->n_out + o] = krn_dot_row(a->type, row, a->x + (size_t)b * a->n_in, a->n_in);
    }
}
