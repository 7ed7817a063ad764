/* CPU matmul over a weight of any krn_type, read as stored (no conversion): each output is one
 * krn_dot_row (kernels/quant.c), whose fixed block order makes the result independent of B, of the
 * stream and of the stage. No shared state. */
#include "kernels/cpu/krn_cpu.h"

/* y (B, n_out) = x (B, n_in) @ W^T, W (n_out, n_in).
 * Loop o outer, b inner: weight row o is read once (from memory) for all B rows. */
void krn_cpu_matmul(const krn_cpu_matmul_args *a)
{
    const unsigned char *w = a->w;
    for (int o = 0; o < a->n_out; o++) {
        const void *row = w + (size_t)o * a->row_bytes;
        for (int b = 0; b < a->B; b++)
            a->y[(size_t)b * a->n_out + o] = krn_dot_row(a->type, row, a->x + (size_t)b * a->n_in, a->n_in);
    }
}
