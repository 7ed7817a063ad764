/* The stream-order race checker (CPU backend): a missing cross-stream wait is reported on every run
 * whatever the real-time order (an op hook injects random delays to vary it); the same program with the
 * wait reports nothing; host syncs order work; copies are checked; the checker can be turned off. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "device/dev.h"
#include "support/jitter.h"

enum { LOOPS = 50, N = 1024 };

static const test_jitter jitter = { 2, 3, 150 }; /* sleep probability num/den, max us */

typedef struct fill_args { float *dst; const float *src; int n; } fill_args;

/* Deliberately racy programs must not race for real (TSan would rightly flag them): while `g_touch` is 0
 * kernels only DECLARE their accesses, which is all the checker looks at. Set by the main thread between
 * rounds, while every stream is idle (ordered by the stream syncs). */
static int g_touch = 1;

/* dst[i] = src ? src[i] + 1 : i */
static void k_fill(void *a)
{
    fill_args *f = a;
    if (!g_touch)
        return;
    for (int i = 0; i < f->n; i++)
        f->dst[i] = f->src ? f->src[i] + 1.0f : (float)i;
}

static int produce(dev_stream *s, float *dst)
{
    fill_args a = { dst, NULL, N };
    dev_access acc = { dst, N * sizeof(float), DEV_WRITE };
    return dev_launch_cpu_async(s, "produce", k_fill, &a, sizeof a, &acc, 1);
}

static int consume(dev_stream *s, float *dst, const float *src)
{
    fill_args a = { dst, src, N };
    dev_access acc[2] = { { src, N * sizeof(float), DEV_READ }, { dst, N * sizeof(float), DEV_WRITE } };
    return dev_launch_cpu_async(s, "consume", k_fill, &a, sizeof a, acc, 2);
}

typedef struct fx {
    dev_platform *p;
    dev_device *d0, *d1;
    dev_stream *a, *b;
    dev_event *ev;
} fx;

static int setup(void **st)
{
    fx *f = calloc(1, sizeof *f);
    dev_err err = { 0, "" };
    f->p = dev_platform_open(DEV_KIND_CPU, 2, &err);
    f->d0 = dev_platform_device(f->p, 0);
    f->d1 = dev_platform_device(f->p, 1);
    f->a = dev_stream_create(f->d0, "stage0", &err);
    f->b = dev_stream_create(f->d0, "stage1", &err);
    f->ev = dev_event_create(f->d0, &err);
    dev_set_op_hook(f->p, test_jitter_hook, (void *)&jitter);
    *st = f;
    return f->a && f->b && f->ev ? 0 : -1;
}

static int teardown(void **st)
{
    fx *f = *st;
    dev_stream_destroy(f->a);
    dev_stream_destroy(f->b);
    dev_set_op_hook(f->p, NULL, NULL);
    dev_event_destroy(f->ev);
    dev_platform_close(f->p);
    free(f);
    return 0;
}

/* One round of producer on a / consumer on b; with_wait orders b after a's write. Returns races seen. */
static uint64_t round_trip(fx *f, int with_wait, char *first, size_t len)
{
    dev_err err = { 0, "" };
    float *x = dev_malloc(f->d0, N * sizeof(float), &err), *y = dev_malloc(f->d0, N * sizeof(float), &err);
    assert_non_null(x);
    assert_non_null(y);
    dev_race_reset(f->p);
    g_touch = with_wait;
    assert_int_equal(produce(f->a, x), 0);
    assert_int_equal(dev_event_record_async(f->ev, f->a), 0);
    if (with_wait)
        assert_int_equal(dev_stream_wait_event_async(f->b, f->ev), 0);
    assert_int_equal(consume(f->b, y, x), 0);
    assert_int_equal(dev_stream_sync(f->a, &err), 0);
    assert_int_equal(dev_stream_sync(f->b, &err), 0);
    uint64_t n = dev_race_first(f->p, first, len);
    g_touch = 1;
    if (with_wait)
        for (int i = 0; i < N; i++)
            assert_true(y[i] == (float)i + 1.0f);
    dev_free(f->d0, x);
    dev_free(f->d0, y);
    return n;
}

static void test_missing_cross_stream_wait_is_reported_every_run(void **st)
{
    fx *f = *st;
    for (int i = 0; i < LOOPS; i++) {
        char msg[512];
        uint64_t n = round_trip(f, 0, msg, sizeof msg);
        assert_true(n >= 1);
        /* names both streams, both ops, the buffer's device and size; whichever ran second is flagged */
        assert_non_null(strstr(msg, "stage0"));
        assert_non_null(strstr(msg, "stage1"));
        assert_non_null(strstr(msg, "produce"));
        assert_non_null(strstr(msg, "consume"));
        assert_non_null(strstr(msg, "(cpu:0, 4096 B)"));
    }
}

static void test_same_program_with_the_wait_reports_nothing(void **st)
{
    fx *f = *st;
    for (int i = 0; i < LOOPS; i++)
        assert_int_equal(round_trip(f, 1, NULL, 0), 0);
}

static void test_write_after_read_without_wait_is_reported(void **st)
{
    fx *f = *st;
    dev_err err = { 0, "" };
    float *x = dev_malloc(f->d0, N * sizeof(float), &err), *y = dev_malloc(f->d0, N * sizeof(float), &err);
    float *z = dev_malloc(f->d0, N * sizeof(float), &err);
    for (int i = 0; i < LOOPS; i++) {
        dev_race_reset(f->p);
        g_touch = 0;
        assert_int_equal(consume(f->a, y, x), 0); /* a reads x */
        assert_int_equal(produce(f->b, x), 0);    /* b overwrites x, unordered */
        dev_stream_sync(f->a, &err);
        dev_stream_sync(f->b, &err);
        g_touch = 1;
        assert_true(dev_race_count(f->p) >= 1);
        /* the same with b waiting a's point after the read: clean */
        dev_race_reset(f->p);
        assert_int_equal(consume(f->a, z, x), 0);
        assert_int_equal(dev_event_record_async(f->ev, f->a), 0);
        assert_int_equal(dev_stream_wait_event_async(f->b, f->ev), 0);
        assert_int_equal(produce(f->b, x), 0);
        dev_stream_sync(f->a, &err);
        dev_stream_sync(f->b, &err);
        assert_int_equal(dev_race_count(f->p), 0);
    }
    dev_free(f->d0, x);
    dev_free(f->d0, y);
    dev_free(f->d0, z);
}

static void test_host_sync_orders_later_work_on_other_streams(void **st)
{
    fx *f = *st;
    dev_err err = { 0, "" };
    float *x = dev_malloc(f->d0, N * sizeof(float), &err), *y = dev_malloc(f->d0, N * sizeof(float), &err);
    dev_race_reset(f->p);
    assert_int_equal(produce(f->a, x), 0);
    assert_int_equal(dev_stream_sync(f->a, &err), 0); /* host now ordered after a's write */
    assert_int_equal(consume(f->b, y, x), 0);
    assert_int_equal(dev_stream_sync(f->b, &err), 0);
    assert_int_equal(dev_race_count(f->p), 0);
    /* event_sync orders the host too */
    assert_int_equal(produce(f->a, x), 0);
    assert_int_equal(dev_event_record_async(f->ev, f->a), 0);
    assert_int_equal(dev_event_sync(f->ev, &err), 0);
    assert_int_equal(consume(f->b, y, x), 0);
    assert_int_equal(dev_stream_sync(f->b, &err), 0);
    assert_int_equal(dev_race_count(f->p), 0);
    dev_free(f->d0, x);
    dev_free(f->d0, y);
}

static void test_upload_racing_a_kernel_is_reported(void **st)
{
    fx *f = *st;
    dev_err err = { 0, "" };
    float *x = dev_malloc(f->d0, N * sizeof(float), &err), *y = dev_malloc(f->d0, N * sizeof(float), &err);
    static float host[N];
    dev_race_reset(f->p);
    g_touch = 0;
    assert_int_equal(consume(f->a, y, x), 0);                                 /* a reads x ... */
    assert_int_equal(dev_copy_h2d_sync(f->d0, x, host, sizeof host, &err), 0); /* ... host writes it */
    assert_int_equal(dev_stream_sync(f->a, &err), 0);
    g_touch = 1;
    char msg[512];
    assert_true(dev_race_first(f->p, msg, sizeof msg) >= 1);
    assert_non_null(strstr(msg, "host"));
    dev_free(f->d0, x);
    dev_free(f->d0, y);
}

static void test_copies_are_checked_and_checker_can_be_disabled(void **st)
{
    fx *f = *st;
    dev_err err = { 0, "" };
    float *x = dev_malloc(f->d0, N * sizeof(float), &err);
    float *x1 = dev_malloc(f->d1, N * sizeof(float), &err);
    static float host[N];
    g_touch = 0; /* producers only declare: the copies really read x */
    for (int i = 0; i < 10; i++) {
        dev_race_reset(f->p);
        assert_int_equal(produce(f->a, x), 0);
        assert_int_equal(dev_copy_d2h_async(f->b, host, x, sizeof host), 0); /* no wait */
        dev_stream_sync(f->a, &err);
        dev_stream_sync(f->b, &err);
        char msg[512];
        assert_true(dev_race_first(f->p, msg, sizeof msg) >= 1);
        assert_non_null(strstr(msg, "copy_d2h"));
        /* peer copy reading x unordered with a's write */
        dev_race_reset(f->p);
        assert_int_equal(produce(f->a, x), 0);
        assert_int_equal(dev_copy_peer_async(f->b, x1, f->d1, x, f->d0, sizeof host), 0);
        dev_stream_sync(f->a, &err);
        dev_stream_sync(f->b, &err);
        assert_true(dev_race_count(f->p) >= 1);
    }
    dev_race_check_enable(f->p, 0);
    dev_race_reset(f->p);
    assert_int_equal(produce(f->a, x), 0);
    assert_int_equal(dev_copy_d2h_async(f->b, host, x, sizeof host), 0);
    dev_stream_sync(f->a, &err);
    dev_stream_sync(f->b, &err);
    assert_int_equal(dev_race_count(f->p), 0);
    dev_race_check_enable(f->p, 1);
    g_touch = 1;
    dev_free(f->d0, x);
    dev_free(f->d1, x1);
}

typedef struct part_args { float *dst; int off, n; } part_args;

static void k_part(void *a)
{
    part_args *pa = a;
    if (!g_touch)
        return;
    for (int i = 0; i < pa->n; i++)
        pa->dst[pa->off + i] = (float)i;
}

static int write_part(dev_stream *s, float *buf, int off, int n)
{
    part_args a = { buf, off, n };
    dev_access acc = { buf + off, (size_t)n * sizeof(float), DEV_WRITE };
    return dev_launch_cpu_async(s, "write_part", k_part, &a, sizeof a, &acc, 1);
}

static void test_disjoint_ranges_of_one_buffer_do_not_race_overlapping_ones_do(void **st)
{
    fx *f = *st;
    dev_err err = { 0, "" };
    float *slots = dev_malloc(f->d0, N * sizeof(float), &err); /* two "slots" in one allocation */
    for (int i = 0; i < LOOPS; i++) {
        dev_race_reset(f->p);
        assert_int_equal(write_part(f->a, slots, 0, N / 2), 0);
        assert_int_equal(write_part(f->b, slots, N / 2, N / 2), 0);
        dev_stream_sync(f->a, &err);
        dev_stream_sync(f->b, &err);
        assert_int_equal(dev_race_count(f->p), 0);
        g_touch = 0;
        assert_int_equal(write_part(f->a, slots, 0, N / 2 + 1), 0); /* one float into b's half */
        assert_int_equal(write_part(f->b, slots, N / 2, N / 2), 0);
        dev_stream_sync(f->a, &err);
        dev_stream_sync(f->b, &err);
        g_touch = 1;
        char msg[512];
        assert_true(dev_race_first(f->p, msg, sizeof msg) >= 1);
        assert_non_null(strstr(msg, "write_part"));
    }
    dev_free(f->d0, slots);
}

static void test_piecewise_writes_then_ordered_whole_read_is_clean(void **st)
{
    fx *f = *st;
    dev_err err = { 0, "" };
    float *kv = dev_malloc(f->d0, N * sizeof(float), &err), *y = dev_malloc(f->d0, N * sizeof(float), &err);
    dev_race_reset(f->p);
    for (int row = 0; row < 256; row++) /* one "KV row" per step: more pieces than the checker keeps */
        assert_int_equal(write_part(f->a, kv, row * 4, 4), 0);
    assert_int_equal(dev_event_record_async(f->ev, f->a), 0);
    assert_int_equal(dev_stream_wait_event_async(f->b, f->ev), 0);
    assert_int_equal(consume(f->b, y, kv), 0);
    assert_int_equal(dev_stream_sync(f->b, &err), 0);
    assert_int_equal(dev_race_count(f->p), 0);
    g_touch = 0;
    assert_int_equal(consume(f->b, y, kv), 0);
    assert_int_equal(write_part(f->a, kv, 0, 4), 0); /* a overwrites a row b reads: no event orders them */
    assert_int_equal(dev_stream_sync(f->a, &err), 0);
    assert_int_equal(dev_stream_sync(f->b, &err), 0);
    g_touch = 1;
    char msg[512];
    assert_int_equal(dev_race_first(f->p, msg, sizeof msg), 1);
    assert_non_null(strstr(msg, "write_part"));
    assert_non_null(strstr(msg, "consume"));
    dev_free(f->d0, kv);
    dev_free(f->d0, y);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_missing_cross_stream_wait_is_reported_every_run, setup, teardown),
        cmocka_unit_test_setup_teardown(test_same_program_with_the_wait_reports_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_after_read_without_wait_is_reported, setup, teardown),
        cmocka_unit_test_setup_teardown(test_host_sync_orders_later_work_on_other_streams, setup, teardown),
        cmocka_unit_test_setup_teardown(test_upload_racing_a_kernel_is_reported, setup, teardown),
        cmocka_unit_test_setup_teardown(test_copies_are_checked_and_checker_can_be_disabled, setup, teardown),
        cmocka_unit_test_setup_teardown(test_disjoint_ranges_of_one_buffer_do_not_race_overlapping_ones_do, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_piecewise_writes_then_ordered_whole_read_is_clean, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
