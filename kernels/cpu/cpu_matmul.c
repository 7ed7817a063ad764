/* CPU matmul over a weight of any krn_type, read as stored (no conversion). The fast mode (a->x8, the platform's
 * MEMRA_CPU_X8) quantizes x to int8 blocks once and runs krn_x8_gemm (kernels/x8_gemm.c). The exact mode: each output is the bits of one
 * krn_dot_row (kernels/quant.c), whose fixed block order makes the result independent of B, of the
 * stream and of the stage. Rows of x are taken in groups through krn_dot_row_batch (same bits, the weight
 * row dequantized once per 4 vectors); weights in rows of 8 go through krn_rows8_exact (kernels/exact_rows8.c,
 * 8 rows per vector, same bits). No shared state. */
#include <math.h>
#include <stdlib.h>

#include "kernels/cpu/krn_cpu.h"
#include "kernels/quant.h"
#include "kernels/quant_batch.h"

#define MATMUL_GROUP 64 /* rows of x per krn_dot_row_batch call (stack buffer) */

/* The fast mode: x (any activation type) quantized once, then the tiled int8 GEMM. */
static void matmul_x8(const krn_cpu_matmul_args *a)
{
    const size_t xrb = krn_x8_row_bytes(a->n_in), bytes = (size_t)a->B * xrb;
    _Alignas(32) unsigned char stack[16384];
    unsigned char *xq = bytes <= sizeof stack ? stack : malloc(bytes);
    if (!xq || (krn_x8_quantize_t_host(xq, a->x, a->xt, a->B, a->n_in),
                krn_x8_gemm(a->type, a->layout, a->w, a->row_bytes, a->n_out, xq, a->B, a->n_in, a->y, a->n_out,
                            a->acc)) != 0)
        for (size_t i = 0; i < (size_t)a->B * a->n_out; i++)
            a->y[i] = NAN; /* no memory: visible, never silent */
    if (xq != stack)
        free(xq);
}

/* The exact mode over KRN_LAYOUT_ROWS8 weights: the whole groups through krn_rows8_exact (8 rows per vector) where
 * it runs; otherwise each group of 8 rows is unpacked into GGUF rows, then multiplied as blocks. The tail rows are
 * GGUF rows. Either way the bits are those of the GGUF tensor. */
static void matmul_rows8_exact(const krn_cpu_matmul_args *a)
{
    const int whole = a->n_out / 8;
    const int done = krn_rows8_exact(a->type, a->w, a->row_bytes, whole, a->n_in, a->x, a->n_in, a->B, a->y,
                                     a->n_out, a->acc);
    unsigned char *rows = malloc(8 * a->row_bytes + (size_t)a->B * 8 * sizeof(float));
    float *yg = rows ? (float *)(rows + 8 * a->row_bytes) : NULL; /* (B, nr): one group's outputs */
    for (int o = done ? 8 * whole : 0; o < a->n_out; o += 8) {
        const int nr = a->n_out - o < 8 ? a->n_out - o : 8; /* the last n_out % 8 rows are GGUF rows already */
        const unsigned char *w = (const unsigned char *)a->w + (size_t)o * a->row_bytes;
        if (rows) {
            if (nr == 8)
                krn_rows8_unpack_group(a->type, a->n_in, w, 8, a->row_bytes, rows);
            krn_cpu_matmul_args g = *a;
            g.layout = KRN_LAYOUT_BLOCKS, g.n_out = nr, g.w = nr == 8 ? rows : w, g.y = yg, g.acc = 0;
            krn_cpu_matmul(&g);
        }
        for (int b = 0; b < a->B; b++)
            for (int r = 0; r < nr; r++) {
                float *yo = &a->y[(size_t)b * a->n_out + o + r];
                *yo = !rows ? NAN : a->acc ? *yo + yg[b * nr + r] : yg[b * nr + r]; /* no memory: visible, never silent */
            }
    }
    free(rows);
}

/* y (B, n_out) = x (B, n_in) @ W^T (acc: y +=), W (n_out, n_in).
 * Loop o outer, b inner: weight row o is read from memory once for all B rows. */
void krn_cpu_matmul(const krn_cpu_matmul_args *a)
{
    if (a->x8) {
        matmul_x8(a);
        return;
    }
    if (a->xt != KRN_F32) { /* widen a 16-bit x once (exact), then the f32 product: the same bits */
        const size_t nx = (size_t)a->B * a->n_in;
        float *xf = malloc(nx * sizeof(float));
        if (!xf) {
            for (size_t i = 0; i < (size_t)a->B * a->n_out; i++)
                a->y[i] = NAN; /* no memory: visible, never silent */
            return;
        }
        krn_dequant_row(a->xt, a->x, xf, (int64_t)nx);
        krn_cpu_matmul_args f = *a;
        f.x = xf;
        f.xt = KRN_F32;
        krn_cpu_matmul(&f);
        free(xf);
        return;
    }
    if (a->layout == KRN_LAYOUT_ROWS8) { /* rows of 8 in the exact mode: each group back to GGUF rows first */
        matmul_rows8_exact(a);
        return;
    }
    const unsigned char *w = a->w;
    const float *x = a->x;
    float dots[MATMUL_GROUP];
    for (int o = 0; o < a->n_out; o++) {
        const void *row = w + (size_t)o * a->row_bytes;
        for (int b0 = 0; b0 < a->B; b0 += MATMUL_GROUP) {
            const int nb = a->B - b0 < MATMUL_GROUP ? a->B - b0 : MATMUL_GROUP;
            krn_dot_row_batch(a->type, row, x + (size_t)b0 * a->n_in, a->n_in, nb, dots, a->n_in);
            for (int b = 0; b < nb; b++) {
                float *yo = &a->y[(size_t)(b0 + b) * a->n_out + o];
                *yo = a->acc ? *yo + dots[b] : dots[b]; /* acc: the bits of krn_cpu_add after a plain matmul */
            }
        }
    }
}
