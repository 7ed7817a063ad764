/* CPU matmul over a weight of any krn_type, read as stored (no conversion). The fast mode (a->x8, the platform's
 * MEMRA_CPU_X8) quantizes x to int8 blocks once and runs krn_x8_gemm (kernels/x8_gemm.c). The exact mode: each output is the bits of one
 * krn_dot_row (kernels/quant.c), whose fixed block order makes the result independent of B, of the
 * stream and of the stage. Rows of x are taken in groups through krn_dot_row_batch (same bits, the weight
 * row dequantized once per 4 vectors); weights in rows of 8 go through krn_rows8_exact (kernels/exact_rows8.c,
 * 8 rows per vector, same bits). With a->threads > 1 (MEMRA_CPU_THREADS) the output rows are split over an
 * OpenMP team; each row is computed alone either way, so the bits do not change. No shared state. */
#include <math.h>
#include <stdlib.h>

#include "kernels/cpu/krn_cpu.h"
#include "kernels/quant.h"
#include "kernels/quant_batch.h"

#define MATMUL_GROUP 64 /* rows of x per krn_dot_row_batch call (stack buffer) */

/* Output rows [o0, o1) of the product, y keeping its full row stride a->n_out; x is f32 (exact mode) or xq its
 * int8 rows (fast mode). o0 is a multiple of 8 and o1 too unless it is n_out, so a rows-of-8 weight's groups stay
 * whole and its tail rows come last. Every output row is computed alone, so the bits do not depend on the range. */
static void matmul_rows(const krn_cpu_matmul_args *a, int o0, int o1, const void *xq)
{
    const unsigned char *w = (const unsigned char *)a->w + (size_t)o0 * a->row_bytes;
    const int n = o1 - o0;
    if (a->x8) { /* the tiled int8 GEMM (kernels/x8_gemm.c, x8_kquant.c) */
        if (!xq || krn_x8_gemm(a->type, a->layout, w, a->row_bytes, n, xq, a->B, a->n_in, a->y + o0, a->n_out,
                               a->acc) != 0)
            for (int b = 0; b < a->B; b++)
                for (int o = o0; o < o1; o++)
                    a->y[(size_t)b * a->n_out + o] = NAN; /* no memory: visible, never silent */
        return;
    }
    const float *x = a->x;
    if (a->layout == KRN_LAYOUT_ROWS8) {
        /* the exact mode over rows of 8: the whole groups through krn_rows8_exact (8 rows per vector) where it
         * runs; otherwise each group is unpacked into GGUF rows, then multiplied as blocks. The tail rows are GGUF
         * rows. Either way the bits are those of the GGUF tensor. */
        const int whole = n / 8;
        const int done = krn_rows8_exact(a->type, w, a->row_bytes, whole, a->n_in, x, a->n_in, a->B, a->y + o0,
                                         a->n_out, a->acc);
        unsigned char *rows = malloc(8 * a->row_bytes + (size_t)a->B * 8 * sizeof(float));
        float *yg = rows ? (float *)(rows + 8 * a->row_bytes) : NULL; /* (B, nr): one group's outputs */
        for (int o = done ? 8 * whole : 0; o < n; o += 8) {
            const int nr = n - o < 8 ? n - o : 8; /* the last n_out % 8 rows are GGUF rows already */
            const unsigned char *wg = w + (size_t)o * a->row_bytes;
            if (rows) {
                if (nr == 8)
                    krn_rows8_unpack_group(a->type, a->n_in, wg, 8, a->row_bytes, rows);
                krn_cpu_matmul_args g = *a;
                g.layout = KRN_LAYOUT_BLOCKS, g.n_out = nr, g.w = nr == 8 ? rows : wg, g.y = yg, g.acc = 0;
                g.threads = 1;
                matmul_rows(&g, 0, nr, NULL);
            }
            for (int b = 0; b < a->B; b++)
                for (int r = 0; r < nr; r++) {
                    float *yo = &a->y[(size_t)b * a->n_out + o0 + o + r];
                    *yo = !rows ? NAN : a->acc ? *yo + yg[b * nr + r] : yg[b * nr + r]; /* no memory: visible */
                }
        }
        free(rows);
        return;
    }
    float dots[MATMUL_GROUP]; /* loop o outer, b inner: weight row o is read from memory once for all B rows */
    for (int o = o0; o < o1; o++) {
        const void *row = (const unsigned char *)a->w + (size_t)o * a->row_bytes;
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

/* y (B, n_out) = x (B, n_in) @ W^T (acc: y +=), W (n_out, n_in). x is widened (exact mode) or quantized (fast
 * mode) once; then the output rows go to one thread, or with a->threads > 1 to an OpenMP team in contiguous
 * ranges of whole groups of 8 rows (each range one matmul_rows call). */
void krn_cpu_matmul(const krn_cpu_matmul_args *a)
{
    void *xbuf = NULL;
    const void *xq = NULL;
    krn_cpu_matmul_args f = *a;
    _Alignas(32) unsigned char stack[16384];
    if (a->x8) { /* the fast mode: x (any activation type) quantized once */
        const size_t bytes = (size_t)a->B * krn_x8_row_bytes(a->n_in);
        unsigned char *q = bytes <= sizeof stack ? stack : (xbuf = malloc(bytes));
        if (q)
            krn_x8_quantize_t_host(q, a->x, a->xt, a->B, a->n_in);
        xq = q;
    } else if (a->xt != KRN_F32) { /* widen a 16-bit x once (exact), then the f32 product: the same bits */
        const size_t nx = (size_t)a->B * a->n_in;
        float *xf = xbuf = malloc(nx * sizeof(float));
        if (!xf) {
            for (size_t i = 0; i < (size_t)a->B * a->n_out; i++)
                a->y[i] = NAN; /* no memory: visible, never silent */
            return;
        }
        krn_dequant_row(a->xt, a->x, xf, (int64_t)nx);
        f.x = xf;
        f.xt = KRN_F32;
    }
    const int groups = a->n_out / 8;
    const int team = a->threads < groups ? a->threads : groups; /* every range holds a whole group or more */
    if (team <= 1) {
        matmul_rows(&f, 0, a->n_out, xq);
    } else {
#ifdef MEMRA_HAVE_OPENMP
        /* the team's ranges are disjoint rows of y; x, xq and W are read-only; the region's end joins the team */
#pragma omp parallel for num_threads(team) schedule(static)
        for (int c = 0; c < team; c++) {
            const int g0 = (int)((int64_t)groups * c / team), g1 = (int)((int64_t)groups * (c + 1) / team);
            matmul_rows(&f, 8 * g0, c == team - 1 ? a->n_out : 8 * g1, xq);
        }
#else
        matmul_rows(&f, 0, a->n_out, xq); /* unreachable: the door refuses threads > 1 without OpenMP */
#endif
    }
    free(xbuf);
}
