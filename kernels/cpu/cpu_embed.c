/* CPU kernel of the embedding gather (krn_embed_rows_async): each row of y is krn_dequant_row of the table row
 * its token picks, so the bits are those of the host gather (mdl_embed_rows); a token outside [0, n_out) gives
 * a row of zeros. Pure function over host pointers, single-threaded, rows in order (deterministic).
 * Shared mutable state: none. */
#include <string.h>

#include "kernels/cpu/krn_cpu.h"
#include "kernels/quant.h"

void krn_cpu_embed_rows(const krn_cpu_embed_rows_args *a)
{
    for (int b = 0; b < a->B; b++) {
        const int32_t t = a->tokens[b];
        float *y = a->y + (size_t)b * a->n_in;
        if (t < 0 || t >= a->n_out) {
            memset(y, 0, (size_t)a->n_in * sizeof(float));
            continue;
        }
        krn_dequant_row(a->type, (const unsigned char *)a->table + (size_t)t * a->row_bytes, y, a->n_in);
    }
}
