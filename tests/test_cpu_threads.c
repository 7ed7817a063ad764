/* Threads per CPU matmul (MEMRA_CPU_THREADS, memra_runtime_params.cpu_threads; kernels/cpu/cpu_matmul.c): the team
 * splits the output rows and changes no bit; the door and the field refuse what they do not take. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "device/dev.h"
#include "kernels/cpu/krn_cpu.h"
#include "kernels/krn.h"
#include "kernels/quant.h"
#include "kernels/quant_batch.h"

static uint64_t rng = 0x853c49e6748fea9bull;
static float frand(void) /* [-1, 1) */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / (double)(1ull << 53) * 2.0 - 1.0);
}

/* Every type, layout and mode the CPU matmul takes, n_out with and without tail rows, B of 1 and 3, acc 0 and 1:
 * threads = 3 (and 64, more than the groups) give the bits of threads = 1. */
static void test_a_matmul_split_over_threads_gives_the_bits_of_one_thread(void **state)
{
    (void)state;
#if !defined(MEMRA_HAVE_OPENMP) || defined(MEMRA_TSAN)
    skip(); /* no team to split over; under TSan, libgomp's own synchronization is invisible to it */
#endif
    enum { N = 512, BMAX = 3 };
    const int types[] = {KRN_Q4_0, KRN_Q4_1, KRN_Q8_0, KRN_Q4_K, KRN_Q6_K, KRN_F16};
    const int n_outs[] = {8, 21, 203};
    static float w[203 * N], x[BMAX * N], y1[BMAX * 203], yt[BMAX * 203];
    for (int i = 0; i < 203 * N; i++)
        w[i] = frand();
    for (int i = 0; i < BMAX * N; i++)
        x[i] = frand() * (float)(1 + i % 5);
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        const int t = types[k];
        const size_t rb = krn_row_bytes(t, N);
        uint8_t *q = malloc(203 * rb), *q8 = malloc(203 * rb);
        assert_true(q && q8);
        for (int o = 0; o < 203; o++)
            krn_quant_row(t, w + o * N, q + o * rb, N);
        for (size_t c = 0; c < sizeof n_outs / sizeof n_outs[0]; c++) {
            const int no = n_outs[c];
            const int rows8 = krn_rows8_supported(t, no, N);
            memcpy(q8, q, (size_t)no * rb);
            for (int g = 0; rows8 && g + 8 <= no; g += 8)
                krn_rows8_pack_group(t, N, q + g * rb, 8, rb, q8 + g * rb);
            for (int lay = 0; lay < 1 + rows8; lay++)
                for (int x8 = 0; x8 < 1 + krn_x8_type_ok(t); x8++)
                    for (int B = 1; B <= BMAX; B += 2)
                        for (int acc = 0; acc < 2; acc++)
                            for (int team = 3; team <= 64; team += 61) {
                                for (int i = 0; i < B * no; i++)
                                    y1[i] = yt[i] = 0.25f * (float)(i % 4);
                                krn_cpu_matmul_args a = { y1, lay ? q8 : q, x, t, no, N, B, rb, acc, KRN_F32, x8,
                                                          lay ? KRN_LAYOUT_ROWS8 : KRN_LAYOUT_BLOCKS, 1 };
                                krn_cpu_matmul(&a);
                                a.y = yt, a.threads = team;
                                krn_cpu_matmul(&a);
                                assert_memory_equal(y1, yt, sizeof(float) * (size_t)B * no);
                                for (int i = 0; i < B * no; i++)
                                    assert_false(isnan(yt[i]));
                            }
        }
        free(q);
        free(q8);
    }
}

/* MEMRA_CPU_THREADS: unset leaves the value, 1..256 sets it (above 1 only with OpenMP), anything else is refused
 * naming the variable; the platform starts at 1, and dev_platform_open_env applies the door. */
static void test_the_threads_door_takes_1_to_256_and_names_itself_otherwise(void **state)
{
    (void)state;
    dev_err err = { 0 };
    int n = 7;
    unsetenv("MEMRA_CPU_THREADS");
    assert_int_equal(dev_cpu_threads_door(&n, &err), 0);
    assert_int_equal(n, 7);
    const char *bad[] = {"0", "257", "two", "", " 2", "-1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("MEMRA_CPU_THREADS", bad[i], 1);
        err = (dev_err){ 0 };
        assert_true(dev_cpu_threads_door(&n, &err) < 0);
        assert_non_null(strstr(err.msg, "MEMRA_CPU_THREADS"));
        assert_int_equal(n, 7);
    }
    setenv("MEMRA_CPU_THREADS", "1", 1);
    assert_int_equal(dev_cpu_threads_door(&n, &err), 1);
    assert_int_equal(n, 1);
    setenv("MEMRA_CPU_THREADS", "4", 1);
    err = (dev_err){ 0 };
#ifdef MEMRA_HAVE_OPENMP
    assert_int_equal(dev_cpu_threads_door(&n, &err), 1);
    assert_int_equal(n, 4);
    dev_platform *p = dev_platform_open_env(&err);
    assert_non_null(p);
    assert_int_equal(dev_platform_cpu_threads(p), 4);
    dev_platform_close(p);
#else
    assert_true(dev_cpu_threads_door(&n, &err) < 0);
    assert_non_null(strstr(err.msg, "OpenMP"));
#endif
    unsetenv("MEMRA_CPU_THREADS");
    dev_platform *q = dev_platform_open(DEV_KIND_CPU, 1, &err);
    assert_non_null(q);
    assert_int_equal(dev_platform_cpu_threads(q), 1);
    dev_platform_close(q);
    err = (dev_err){ 0 };
    assert_true(dev_cpu_threads_check(0, "field", &err) < 0);
    assert_non_null(strstr(err.msg, "field = 0"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_matmul_split_over_threads_gives_the_bits_of_one_thread),
        cmocka_unit_test(test_the_threads_door_takes_1_to_256_and_names_itself_otherwise),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
