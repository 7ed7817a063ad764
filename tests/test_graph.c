/* The graph API (device/dev.h) on the CPU backend: capture is unsupported there, with a message, so the
 * pipeline's MEMRA_PP_GRAPH falls back to eager; the stream stays usable and error-free afterwards. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "device/dev.h"

static void test_capture_on_a_cpu_stream_is_unsupported_with_a_message(void **state)
{
    (void)state;
    dev_err err = {0};
    dev_platform *p = dev_platform_open(DEV_KIND_CPU, 1, &err);
    assert_non_null(p);
    dev_device *d = dev_platform_device(p, 0);
    dev_stream *s = dev_stream_create(d, "cap", &err);
    assert_non_null(s);
    assert_int_equal(dev_stream_capture_begin(s, &err), MEMRA_E_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "CUDA only"));
    dev_graph *g = (dev_graph *)&err; /* poison: capture_end must clear it */
    dev_err e2 = {0};
    assert_int_equal(dev_stream_capture_end(s, &g, &e2), MEMRA_E_UNSUPPORTED);
    assert_null(g);
    assert_int_equal(dev_graph_launch_async(NULL, s), MEMRA_E_INVAL);
    dev_graph_destroy(NULL); /* no-op */
    /* the stream still runs ops and carries no sticky error */
    int *a = dev_malloc(d, 64, &err);
    int h[16], o[16];
    for (int i = 0; i < 16; i++)
        h[i] = i * 3;
    assert_int_equal(dev_copy_h2d_async(s, a, h, sizeof h), 0);
    assert_int_equal(dev_copy_d2h_async(s, o, a, sizeof o), 0);
    assert_int_equal(dev_stream_sync(s, &err), 0);
    assert_memory_equal(h, o, sizeof h);
    dev_free(d, a);
    dev_stream_destroy(s);
    dev_platform_close(p);
}

static void test_capture_calls_reject_null_arguments(void **state)
{
    (void)state;
    dev_err err = {0};
    assert_int_equal(dev_stream_capture_begin(NULL, &err), MEMRA_E_INVAL);
    assert_non_null(strstr(err.msg, "NULL"));
    dev_err e2 = {0};
    assert_int_equal(dev_stream_capture_end(NULL, NULL, &e2), MEMRA_E_INVAL);
    assert_non_null(strstr(e2.msg, "required"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_capture_on_a_cpu_stream_is_unsupported_with_a_message),
        cmocka_unit_test(test_capture_calls_reject_null_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
