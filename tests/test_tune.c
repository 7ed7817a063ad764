/* The measured-cost cut optimiser (actors/tune_cuts.c) against brute force over every contiguous placement,
 * on random costs (devices of equal and of different speeds), and its edges (one stage, a layer per stage,
 * more stages than layers, bad costs). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <time.h>

#include "actors/tune_cuts.h"
#include "device/dev.h"
#include "memra/status.h"

static uint64_t rng_next(uint64_t *x)
{
    *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
    return *x;
}

static double rng_unit(uint64_t *x) { return (double)(rng_next(x) >> 11) / 9007199254740992.0; }

/* The smallest slowest stage over every fence: the cuts f1 < ... < f(N-1) in (0, L), enumerated. */
static double brute_slowest(const act_tune_costs *c)
{
    const int N = c->n_stages, L = c->n_layer;
    int f[65];
    f[0] = 0, f[N] = L;
    for (int s = 1; s < N; s++)
        f[s] = s;
    double best = INFINITY;
    for (;;) {
        const double t = act_tune_slowest(c, f);
        best = t < best ? t : best;
        int s = N - 1; /* next combination: raise the last cut that can rise */
        while (s >= 1 && f[s] == L - (N - s))
            s--;
        if (s < 1)
            break;
        f[s]++;
        for (int k = s + 1; k < N; k++)
            f[k] = f[k - 1] + 1;
    }
    return best;
}

/* speed[s] scales stage s's device: 1 everywhere for equal devices. */
static void random_costs(uint64_t *x, int L, int N, const double *speed, double *layer, act_tune_costs *c)
{
    for (int il = 0; il < L; il++) {
        const double base = 0.5 + rng_unit(x) * (il % 5 == 0 ? 4.0 : 1.0); /* some heavy layers */
        for (int s = 0; s < N; s++)
            layer[il * N + s] = base * speed[s] * (0.9 + 0.2 * rng_unit(x));
    }
    *c = (act_tune_costs){.n_layer = L, .n_stages = N, .layer = layer, .embed = rng_unit(x),
                          .head = rng_unit(x) * 6.0};
}

static void check_fence(const act_tune_costs *c, const int *f)
{
    assert_int_equal(f[0], 0);
    assert_int_equal(f[c->n_stages], c->n_layer);
    for (int s = 0; s < c->n_stages; s++)
        assert_true(f[s] < f[s + 1]);
}

static void run_random(uint64_t seed, int uneven)
{
    uint64_t x = seed;
    double layer[12 * 5], speed[5];
    int checked = 0;
    for (int trial = 0; trial < 400; trial++) {
        const int L = 1 + (int)(rng_next(&x) % 12), N = 1 + (int)(rng_next(&x) % (L < 5 ? L : 5));
        for (int s = 0; s < N; s++)
            speed[s] = uneven ? 0.25 + 3.0 * rng_unit(&x) : 1.0;
        act_tune_costs c;
        random_costs(&x, L, N, speed, layer, &c);
        int f[6];
        double got = -1;
        dev_err err = {0};
        assert_int_equal(act_tune_cuts(&c, f, &got, &err), 0);
        check_fence(&c, f);
        const double want = brute_slowest(&c);
        assert_true(fabs(got - want) <= 1e-9 * (1.0 + want));
        assert_true(fabs(act_tune_slowest(&c, f) - got) <= 1e-12 * (1.0 + got));
        checked += N >= 2;
    }
    assert_true(checked > 200); /* most trials had a cut to choose */
}

static void test_cuts_equal_brute_force_on_random_costs_of_equal_devices(void **state)
{
    (void)state;
    run_random(0x2545f4914f6cdd1dull, 0);
}

static void test_cuts_equal_brute_force_on_random_costs_of_uneven_devices(void **state)
{
    (void)state;
    run_random(0x9e3779b97f4a7c15ull, 1);
}

static void test_a_slow_device_gets_fewer_layers(void **state)
{
    (void)state;
    enum { L = 30, N = 2 };
    double layer[L * N];
    for (int il = 0; il < L; il++)
        layer[il * N + 0] = 1.0, layer[il * N + 1] = 3.0; /* stage 1's device is 3x slower */
    act_tune_costs c = {.n_layer = L, .n_stages = N, .layer = layer};
    int f[N + 1];
    double worst;
    dev_err err = {0};
    assert_int_equal(act_tune_cuts(&c, f, &worst, &err), 0);
    assert_int_equal(f[1], 23); /* 23 x 1 against 7 x 3 = 21; 22 leaves 8 x 3 = 24, 24 holds 24 */
    assert_true(fabs(worst - 23.0) < 1e-12);
}

static void test_the_head_pulls_the_cut_to_the_last_stage(void **state)
{
    (void)state;
    enum { L = 30, N = 2 };
    double layer[L * N];
    for (int i = 0; i < L * N; i++)
        layer[i] = 1.0;
    act_tune_costs c = {.n_layer = L, .n_stages = N, .layer = layer, .head = 4.0};
    int f[N + 1];
    dev_err err = {0};
    assert_int_equal(act_tune_cuts(&c, f, NULL, &err), 0);
    assert_int_equal(f[1], 17); /* 17 against 13 + 4 */
}

static void test_one_stage_holds_every_layer_and_both_ends(void **state)
{
    (void)state;
    double layer[7];
    for (int i = 0; i < 7; i++)
        layer[i] = i + 1.0;
    act_tune_costs c = {.n_layer = 7, .n_stages = 1, .layer = layer, .embed = 0.5, .head = 2.0};
    int f[2];
    double worst;
    dev_err err = {0};
    assert_int_equal(act_tune_cuts(&c, f, &worst, &err), 0);
    assert_int_equal(f[0], 0);
    assert_int_equal(f[1], 7);
    assert_true(fabs(worst - 30.5) < 1e-12);
}

static void test_as_many_stages_as_layers_gives_a_layer_each(void **state)
{
    (void)state;
    enum { L = 6 };
    double layer[L * L];
    for (int i = 0; i < L * L; i++)
        layer[i] = 1.0 + (i % 3);
    act_tune_costs c = {.n_layer = L, .n_stages = L, .layer = layer};
    int f[L + 1];
    dev_err err = {0};
    assert_int_equal(act_tune_cuts(&c, f, NULL, &err), 0);
    for (int s = 0; s <= L; s++)
        assert_int_equal(f[s], s);
}

static void test_more_stages_than_layers_is_refused_naming_both(void **state)
{
    (void)state;
    double layer[4 * 5] = {0};
    act_tune_costs c = {.n_layer = 4, .n_stages = 5, .layer = layer};
    int f[6];
    dev_err err = {0};
    assert_int_equal(act_tune_cuts(&c, f, NULL, &err), MEMRA_E_INVAL);
    assert_non_null(strstr(err.msg, "stages=5, allowed 1..4"));
}

static void test_negative_and_nan_costs_are_refused_naming_the_layer(void **state)
{
    (void)state;
    double layer[3 * 2] = {1, 1, 1, -1, 1, 1};
    act_tune_costs c = {.n_layer = 3, .n_stages = 2, .layer = layer};
    int f[3];
    dev_err err = {0};
    assert_int_equal(act_tune_cuts(&c, f, NULL, &err), MEMRA_E_INVAL);
    assert_non_null(strstr(err.msg, "layer 1 on stage 1 costs -1"));
    layer[3] = 1, c.head = NAN;
    err = (dev_err){0}; /* a dev_err keeps its first message */
    assert_int_equal(act_tune_cuts(&c, f, NULL, &err), MEMRA_E_INVAL);
    assert_non_null(strstr(err.msg, "head=")), assert_non_null(strstr(err.msg, "nan"));
    c.head = 0, c.n_stages = 0;
    err = (dev_err){0};
    assert_int_equal(act_tune_cuts(&c, f, NULL, &err), MEMRA_E_INVAL);
    assert_non_null(strstr(err.msg, "stages=0"));
}

/* ---- MEMRA_CPU_SLOW: the emulated slow device memra-tune's uneven placements use ---- */

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void spin_2ms(void *args)
{
    (void)args;
    const double t0 = now_s();
    while (now_s() - t0 < 0.002)
        ;
}

/* Seconds 10 kernels of 2 ms take on device ord of p. */
static double ten_kernels_s(dev_platform *p, int ord)
{
    dev_err err = {0};
    dev_stream *st = dev_stream_create(dev_platform_device(p, ord), "slow", &err);
    assert_non_null(st);
    const double t0 = now_s();
    for (int i = 0; i < 10; i++)
        assert_int_equal(dev_launch_cpu_async(st, "spin", spin_2ms, NULL, 0, NULL, 0), 0);
    assert_int_equal(dev_stream_sync(st, &err), 0);
    const double t = now_s() - t0;
    dev_stream_destroy(st);
    return t;
}

static void test_cpu_slow_door_makes_one_device_that_many_times_slower(void **state)
{
    (void)state;
    setenv("MEMRA_CPU_SLOW", "1:3", 1);
    dev_err err = {0};
    dev_platform *p = dev_platform_open(DEV_KIND_CPU, 2, &err);
    unsetenv("MEMRA_CPU_SLOW");
    assert_non_null(p);
    const double fast = ten_kernels_s(p, 0), slow = ten_kernels_s(p, 1);
    assert_true(fast >= 0.02);
    assert_true(slow >= 0.06); /* 3 x 20 ms at least */
    dev_platform_close(p);
}

static void test_cpu_slow_door_refuses_bad_values_naming_the_variable(void **state)
{
    (void)state;
    const char *bad[] = {"", "1", "1:", ":3", "2:3", "1:0", "1:65", "1:3,", "1:3x", "-1:3", "1: 3"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("MEMRA_CPU_SLOW", bad[i], 1);
        dev_err err = {0};
        dev_platform *p = dev_platform_open(DEV_KIND_CPU, 2, &err);
        if (p)
            fail_msg("MEMRA_CPU_SLOW=\"%s\" was accepted", bad[i]);
        assert_int_equal(err.code, MEMRA_E_INVAL);
        assert_non_null(strstr(err.msg, "MEMRA_CPU_SLOW="));
        assert_non_null(strstr(err.msg, "a device 0..1"));
    }
    unsetenv("MEMRA_CPU_SLOW");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cuts_equal_brute_force_on_random_costs_of_equal_devices),
        cmocka_unit_test(test_cuts_equal_brute_force_on_random_costs_of_uneven_devices),
        cmocka_unit_test(test_a_slow_device_gets_fewer_layers),
        cmocka_unit_test(test_the_head_pulls_the_cut_to_the_last_stage),
        cmocka_unit_test(test_one_stage_holds_every_layer_and_both_ends),
        cmocka_unit_test(test_as_many_stages_as_layers_gives_a_layer_each),
        cmocka_unit_test(test_more_stages_than_layers_is_refused_naming_both),
        cmocka_unit_test(test_negative_and_nan_costs_are_refused_naming_the_layer),
        cmocka_unit_test(test_cpu_slow_door_makes_one_device_that_many_times_slower),
        cmocka_unit_test(test_cpu_slow_door_refuses_bad_values_naming_the_variable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
