/* The CUDA backend's host-side predicates, which need no GPU (they only compare addresses, types and shapes), so
 * CI runs them on its GPU-less machine wherever the CUDA backend is built:
 *   - krn_cuda_glu_fits refuses a y sharing any byte with x (the fused gate/up + swiglu GEMV stores y while its
 *     other warps still read x; the forward's 16-bit activation buffer holds xb and h alike), and still says yes
 *     to a y right before or right after x;
 *   - and refuses the other arguments outside the fused GEMV (B != 1, y of another type than x, a misaligned x).
 * The bits the op then gives are tests/gpu_glu.c's. Exits 77 (skipped) without the CUDA backend. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cmocka.h>

#ifdef MEMRA_HAVE_CUDA

#include "kernels/krn.h"
#include "kernels/cuda/krn_cuda.h"

/* Never dereferenced: the predicate reads addresses only. */
static _Alignas(16) unsigned char g_w[2][64 * 256 * 2];
static _Alignas(16) unsigned char g_buf[4 * 4096];

static void test_glu_fits_refuses_y_over_x_and_nothing_else(void **state)
{
    (void)state;
    enum { N = 64, NIN = 256 }; /* x: NIN bf16 = 512 bytes; y: N bf16 = 128 bytes */
    const krn_weight Wg = { KRN_BF16, N, NIN, g_w[0], KRN_LAYOUT_BLOCKS };
    const krn_weight Wu = { KRN_BF16, N, NIN, g_w[1], KRN_LAYOUT_BLOCKS };
    unsigned char *x = g_buf + 1024;
    const krn_mm_x xx = { .x = x, .type = KRN_BF16 };
    const size_t xb = 2 * NIN, yb = 2 * N;
    assert_int_equal(krn_cuda_glu_fits(g_buf, KRN_BF16, &Wg, &Wu, &xx, 1), 1);       /* far before x */
    assert_int_equal(krn_cuda_glu_fits(x - yb, KRN_BF16, &Wg, &Wu, &xx, 1), 1);      /* ends where x starts */
    assert_int_equal(krn_cuda_glu_fits(x - yb + 2, KRN_BF16, &Wg, &Wu, &xx, 1), 0);  /* over x's first element */
    assert_int_equal(krn_cuda_glu_fits(x, KRN_BF16, &Wg, &Wu, &xx, 1), 0);           /* x itself */
    assert_int_equal(krn_cuda_glu_fits(x + xb - 2, KRN_BF16, &Wg, &Wu, &xx, 1), 0);  /* over x's last element */
    assert_int_equal(krn_cuda_glu_fits(x + xb, KRN_BF16, &Wg, &Wu, &xx, 1), 1);      /* starts where x ends */
    /* the other refusals, y well apart from x */
    assert_int_equal(krn_cuda_glu_fits(g_buf, KRN_BF16, &Wg, &Wu, &xx, 2), 0);       /* B = 2 */
    assert_int_equal(krn_cuda_glu_fits(g_buf, KRN_F32, &Wg, &Wu, &xx, 1), 0);        /* y of another type */
    const krn_mm_x xm = { .x = x + 2, .type = KRN_BF16 };                          /* x not 16-byte aligned */
    assert_int_equal(krn_cuda_glu_fits(g_buf, KRN_BF16, &Wg, &Wu, &xm, 1), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_glu_fits_refuses_y_over_x_and_nothing_else),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#else /* !MEMRA_HAVE_CUDA */

int main(void)
{
    printf("test_cuda_host: skipped: built without CUDA (MEMRA_HAVE_CUDA off)\n");
    return 77;
}

#endif
