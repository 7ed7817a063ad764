/* Device memory ownership on the CPU backend: a kernel on cpu:1 touching cpu:0 memory without a peer
 * grant fails with MEMRA_E_ACCESS (and counts a denial); with the grant, remote read/write bytes advance
 * by exactly the declared bytes; peer copies need no grant and count as peer-copy bytes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "device/dev.h"

typedef struct sum_args { const float *src; float *dst; int n; } sum_args;

static void k_sum(void *a)
{
    sum_args *s = a;
    float acc = 0;
    for (int i = 0; i < s->n; i++)
        acc += s->src[i];
    s->dst[0] = acc;
}

static int remote_sum(dev_stream *s, float *dst, const float *src, int n, int src_mode)
{
    sum_args a = { src, dst, n };
    dev_access acc[2] = { { src, (size_t)n * sizeof(float), src_mode }, { dst, sizeof(float), DEV_WRITE } };
    return dev_launch_cpu_async(s, "remote_sum", k_sum, &a, sizeof a, acc, 2);
}

static void test_kernel_reading_other_device_without_grant_fails_with_access(void **st)
{
    dev_err err = { 0, "" };
    dev_platform *p = dev_platform_open(DEV_KIND_CPU, 2, &err);
    dev_device *d0 = dev_platform_device(p, 0), *d1 = dev_platform_device(p, 1);
    dev_stream *s1 = dev_stream_create(d1, "stage1", &err);
    float *w0 = dev_malloc(d0, 256 * sizeof(float), &err), *out1 = dev_malloc(d1, sizeof(float), &err);
    out1[0] = -1.0f;
    assert_int_equal(dev_peer_granted(d1, d0), 0);
    assert_int_equal(remote_sum(s1, out1, w0, 256, DEV_READ), 0);
    dev_err e = { 0, "" };
    assert_int_equal(dev_stream_sync(s1, &e), MEMRA_E_ACCESS);
    assert_non_null(strstr(e.msg, "remote_sum"));
    assert_non_null(strstr(e.msg, "stage1"));
    assert_non_null(strstr(e.msg, "cpu:1"));
    assert_non_null(strstr(e.msg, "cpu:0"));
    assert_true(out1[0] == -1.0f); /* the kernel did not run */
    dev_counters c;
    dev_device_counters(d1, &c);
    assert_int_equal(c.access_denied, 1);
    assert_int_equal(c.remote_read_bytes, 0);
    assert_int_equal(c.kernels_run, 0);
    dev_stream_destroy(s1);
    dev_free(d0, w0);
    dev_free(d1, out1);
    dev_platform_close(p);
}

static void test_granted_remote_read_counts_exactly_the_declared_bytes(void **st)
{
    dev_err err = { 0, "" };
    dev_platform *p = dev_platform_open(DEV_KIND_CPU, 2, &err);
    dev_device *d0 = dev_platform_device(p, 0), *d1 = dev_platform_device(p, 1);
    dev_stream *s1 = dev_stream_create(d1, "stage1", &err);
    float *w0 = dev_malloc(d0, 256 * sizeof(float), &err), *out1 = dev_malloc(d1, sizeof(float), &err);
    float ones[256];
    for (int i = 0; i < 256; i++)
        ones[i] = 1.0f;
    assert_int_equal(dev_copy_h2d_sync(d0, w0, ones, sizeof ones, &err), 0);
    assert_int_equal(dev_peer_grant(d1, d0, &err), 0);
    assert_int_equal(dev_peer_grant(d1, d0, &err), 0); /* idempotent */
    assert_int_equal(dev_peer_granted(d1, d0), 1);
    assert_int_equal(dev_peer_granted(d0, d1), 0);     /* one direction only */
    assert_int_equal(dev_peer_granted(d0, d0), 1);
    for (int step = 1; step <= 3; step++) {
        assert_int_equal(remote_sum(s1, out1, w0, 200, DEV_READ), 0); /* declares 200 of 256 floats */
        assert_int_equal(dev_stream_sync(s1, &err), 0);
        dev_counters c;
        dev_device_counters(d1, &c);
        assert_int_equal(c.remote_read_bytes, (uint64_t)step * 200 * sizeof(float));
        assert_int_equal(c.remote_write_bytes, 0);
        assert_int_equal(c.access_denied, 0);
        assert_true(out1[0] == 200.0f);
    }
    /* a remote write is counted separately; the owner's counters do not move */
    assert_int_equal(remote_sum(s1, w0, w0, 8, DEV_RW), 0);
    assert_int_equal(dev_stream_sync(s1, &err), 0);
    dev_counters c1, c0;
    dev_device_counters(d1, &c1);
    dev_device_counters(d0, &c0);
    assert_int_equal(c1.remote_read_bytes, 3 * 200 * sizeof(float) + 8 * sizeof(float));
    assert_int_equal(c1.remote_write_bytes, sizeof(float) + 8 * sizeof(float));
    assert_int_equal(c0.remote_read_bytes, 0);
    dev_device_counters_reset(d1);
    dev_device_counters(d1, &c1);
    assert_int_equal(c1.remote_read_bytes, 0);
    dev_stream_destroy(s1);
    dev_free(d0, w0);
    dev_free(d1, out1);
    dev_platform_close(p);
}

static void test_peer_copy_needs_no_grant_and_counts_peer_bytes(void **st)
{
    dev_err err = { 0, "" };
    dev_platform *p = dev_platform_open(DEV_KIND_CPU, 3, &err);
    dev_device *d0 = dev_platform_device(p, 0), *d2 = dev_platform_device(p, 2);
    dev_stream *s2 = dev_stream_create(d2, "rx", &err);
    int *a = dev_malloc(d0, 64, &err), *b = dev_malloc(d2, 64, &err);
    int src[16];
    for (int i = 0; i < 16; i++)
        src[i] = i * 3;
    assert_int_equal(dev_copy_h2d_sync(d0, a, src, sizeof src, &err), 0);
    assert_int_equal(dev_copy_peer_async(s2, b, d2, a, d0, 64), 0);
    assert_int_equal(dev_stream_sync(s2, &err), 0);
    assert_memory_equal(b, src, 64);
    dev_counters c;
    dev_device_counters(d2, &c);
    assert_int_equal(c.peer_copy_bytes, 64);
    assert_int_equal(c.remote_read_bytes, 0);
    /* a peer copy naming the wrong owner device is refused */
    assert_int_equal(dev_copy_peer_async(s2, b, d2, a, d2, 64), 0);
    dev_err e = { 0, "" };
    assert_int_equal(dev_stream_sync(s2, &e), MEMRA_E_INVAL);
    assert_non_null(strstr(e.msg, "copy_peer"));
    dev_stream_destroy(s2);
    dev_free(d0, a);
    dev_free(d2, b);
    dev_platform_close(p);
}

static void test_access_outside_any_allocation_is_invalid(void **st)
{
    dev_err err = { 0, "" };
    dev_platform *p = dev_platform_open(DEV_KIND_CPU, 1, &err);
    dev_device *d0 = dev_platform_device(p, 0);
    dev_stream *s = dev_stream_create(d0, "s", &err);
    float *w = dev_malloc(d0, 64 * sizeof(float), &err), *out = dev_malloc(d0, sizeof(float), &err);
    assert_int_equal(remote_sum(s, out, w, 65, DEV_READ), 0); /* one float past the end */
    dev_err e = { 0, "" };
    assert_int_equal(dev_stream_sync(s, &e), MEMRA_E_INVAL);
    assert_non_null(strstr(e.msg, "not inside a live device allocation"));
    dev_stream_destroy(s);
    dev_free(d0, w);
    dev_free(d0, out);
    dev_platform_close(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernel_reading_other_device_without_grant_fails_with_access),
        cmocka_unit_test(test_granted_remote_read_counts_exactly_the_declared_bytes),
        cmocka_unit_test(test_peer_copy_needs_no_grant_and_counts_peer_bytes),
        cmocka_unit_test(test_access_outside_any_allocation_is_invalid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
