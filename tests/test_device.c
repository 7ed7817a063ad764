/* CPU backend core: stream FIFO order, events across streams and devices (CUDA semantics), host
 * sync/query, sticky errors, memory ownership, the env door. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <cmocka.h>

#include "device/dev.h"

/* A gate a kernel blocks on until the test opens it (makes "B provably waits" observable). */
typedef struct gate {
    pthread_mutex_t m;
    pthread_cond_t c;
    int open;
} gate;

static gate *gate_new(void)
{
    gate *g = calloc(1, sizeof *g);
    pthread_mutex_init(&g->m, NULL);
    pthread_cond_init(&g->c, NULL);
    return g;
}

static void gate_open(gate *g)
{
    pthread_mutex_lock(&g->m);
    g->open = 1;
    pthread_cond_broadcast(&g->c);
    pthread_mutex_unlock(&g->m);
}

static void gate_free(gate *g)
{
    pthread_mutex_destroy(&g->m);
    pthread_cond_destroy(&g->c);
    free(g);
}

typedef struct gate_args { gate *g; int *buf; int value; } gate_args;

/* Kernel: wait for the gate, then write value into buf[0]. */
static void k_gate_then_write(void *a)
{
    gate_args *ga = a;
    pthread_mutex_lock(&ga->g->m);
    while (!ga->g->open)
        pthread_cond_wait(&ga->g->c, &ga->g->m);
    pthread_mutex_unlock(&ga->g->m);
    ga->buf[0] = ga->value;
}

static int gated_write(dev_stream *s, gate *g, int *buf, int value)
{
    gate_args a = { g, buf, value };
    dev_access acc = { buf, sizeof(int), DEV_WRITE };
    return dev_launch_cpu_async(s, "gated_write", k_gate_then_write, &a, sizeof a, &acc, 1);
}

typedef struct append_args { int *log; int *n; int value; } append_args;

static void k_append(void *a)
{
    append_args *aa = a;
    aa->log[(*aa->n)++] = aa->value;
}

typedef struct copy_args { int *dst; const int *src; } copy_args;

static void k_copy_int(void *a)
{
    copy_args *ca = a;
    ca->dst[0] = ca->src[0];
}

static int copy_int(dev_stream *s, int *dst, const int *src)
{
    copy_args a = { dst, src };
    dev_access acc[2] = { { src, sizeof(int), DEV_READ }, { dst, sizeof(int), DEV_WRITE } };
    return dev_launch_cpu_async(s, "copy_int", k_copy_int, &a, sizeof a, acc, 2);
}

static dev_platform *open_cpu(int n)
{
    dev_err err = { 0, "" };
    dev_platform *p = dev_platform_open(DEV_KIND_CPU, n, &err);
    assert_non_null(p);
    return p;
}

static void test_stream_runs_ops_in_fifo_order(void **st)
{
    dev_platform *p = open_cpu(1);
    dev_device *d = dev_platform_device(p, 0);
    dev_err err = { 0, "" };
    dev_stream *s = dev_stream_create(d, "fifo", &err);
    enum { N = 2000 };
    int *log = dev_malloc(d, N * sizeof(int), &err);
    int *n = dev_malloc(d, sizeof(int), &err);
    assert_non_null(log);
    assert_non_null(n);
    for (int i = 0; i < N; i++) {
        append_args a = { log, n, i };
        dev_access acc[2] = { { log, N * sizeof(int), DEV_WRITE }, { n, sizeof(int), DEV_RW } };
        assert_int_equal(dev_launch_cpu_async(s, "append", k_append, &a, sizeof a, acc, 2), 0);
    } /* a's storage died each iteration: args were copied at enqueue */
    assert_int_equal(dev_stream_sync(s, &err), 0);
    assert_int_equal(*n, N);
    for (int i = 0; i < N; i++)
        assert_int_equal(log[i], i);
    dev_counters c;
    dev_device_counters(d, &c);
    assert_int_equal(c.kernels_run, N);
    assert_int_equal(dev_race_count(p), 0);
    dev_stream_destroy(s);
    dev_free(d, log);
    dev_free(d, n);
    dev_platform_close(p);
}

static void test_wait_event_orders_second_stream_after_first(void **st)
{
    dev_platform *p = open_cpu(1);
    dev_device *d = dev_platform_device(p, 0);
    dev_err err = { 0, "" };
    dev_stream *a = dev_stream_create(d, "A", &err), *b = dev_stream_create(d, "B", &err);
    dev_event *ev = dev_event_create(d, &err), *done_b = dev_event_create(d, &err);
    int *x = dev_malloc(d, sizeof(int), &err), *y = dev_malloc(d, sizeof(int), &err);
    gate *g = gate_new();
    assert_int_equal(gated_write(a, g, x, 42), 0);
    assert_int_equal(dev_event_record_async(ev, a), 0);
    assert_int_equal(dev_stream_wait_event_async(b, ev), 0);
    assert_int_equal(copy_int(b, y, x), 0);
    assert_int_equal(dev_event_record_async(done_b, b), 0);
    /* A is parked at the gate, so B's copy cannot have run: both events pending. */
    assert_int_equal(dev_event_query(ev), 0);
    assert_int_equal(dev_event_query(done_b), 0);
    gate_open(g);
    assert_int_equal(dev_event_sync(done_b, &err), 0);
    assert_int_equal(dev_event_query(ev), 1);
    assert_int_equal(dev_event_query(done_b), 1);
    assert_int_equal(*y, 42);
    assert_int_equal(dev_race_count(p), 0);
    dev_stream_destroy(a);
    dev_stream_destroy(b);
    dev_event_destroy(ev);
    dev_event_destroy(done_b);
    dev_free(d, x);
    dev_free(d, y);
    gate_free(g);
    dev_platform_close(p);
}

static void test_wait_binds_to_record_as_of_enqueue(void **st)
{
    dev_platform *p = open_cpu(1);
    dev_device *d = dev_platform_device(p, 0);
    dev_err err = { 0, "" };
    dev_stream *a = dev_stream_create(d, "A", &err), *b = dev_stream_create(d, "B", &err),
               *c = dev_stream_create(d, "C", &err);
    dev_event *ev = dev_event_create(d, &err), *done_b = dev_event_create(d, &err);
    int *x = dev_malloc(d, sizeof(int), &err), *y = dev_malloc(d, sizeof(int), &err);
    gate *g = gate_new();
    assert_int_equal(gated_write(a, g, x, 7), 0);
    assert_int_equal(dev_event_record_async(ev, a), 0);
    assert_int_equal(dev_stream_wait_event_async(b, ev), 0); /* binds to A's record */
    assert_int_equal(copy_int(b, y, x), 0);
    assert_int_equal(dev_event_record_async(done_b, b), 0);
    assert_int_equal(dev_event_record_async(ev, c), 0); /* re-record on an idle stream */
    assert_int_equal(dev_stream_sync(c, &err), 0);
    assert_int_equal(dev_event_query(ev), 1);      /* the event now names C's point, passed */
    assert_int_equal(dev_event_query(done_b), 0);  /* but B still waits for A's old point */
    gate_open(g);
    assert_int_equal(dev_event_sync(done_b, &err), 0);
    assert_int_equal(*y, 7);
    dev_stream_destroy(a);
    dev_stream_destroy(b);
    dev_stream_destroy(c);
    dev_event_destroy(ev);
    dev_event_destroy(done_b);
    dev_free(d, x);
    dev_free(d, y);
    gate_free(g);
    dev_platform_close(p);
}

static void test_event_orders_streams_of_two_devices_with_peer_copy(void **st)
{
    dev_platform *p = open_cpu(2);
    dev_device *d0 = dev_platform_device(p, 0), *d1 = dev_platform_device(p, 1);
    dev_err err = { 0, "" };
    dev_stream *s0 = dev_stream_create(d0, "stage0", &err), *s1 = dev_stream_create(d1, "stage1", &err);
    dev_event *tx = dev_event_create(d0, &err);
    int *x0 = dev_malloc(d0, sizeof(int), &err), *x1 = dev_malloc(d1, sizeof(int), &err);
    int *host = dev_host_alloc(p, sizeof(int), &err);
    gate *g = gate_new();
    assert_int_equal(gated_write(s0, g, x0, 99), 0);
    assert_int_equal(dev_event_record_async(tx, s0), 0);
    assert_int_equal(dev_stream_wait_event_async(s1, tx), 0);
    assert_int_equal(dev_copy_peer_async(s1, x1, d1, x0, d0, sizeof(int)), 0);
    assert_int_equal(dev_copy_d2h_async(s1, host, x1, sizeof(int)), 0);
    *host = -1;
    gate_open(g);
    assert_int_equal(dev_stream_sync(s1, &err), 0);
    assert_int_equal(*host, 99);
    dev_counters c;
    dev_device_counters(d1, &c);
    assert_int_equal(c.peer_copy_bytes, sizeof(int));
    assert_int_equal(c.remote_read_bytes, 0);
    assert_int_equal(dev_race_count(p), 0);
    dev_stream_destroy(s0);
    dev_stream_destroy(s1);
    dev_event_destroy(tx);
    dev_free(d0, x0);
    dev_free(d1, x1);
    dev_host_free(p, host);
    gate_free(g);
    dev_platform_close(p);
}

static void test_never_recorded_event_is_complete_and_wait_is_noop(void **st)
{
    dev_platform *p = open_cpu(1);
    dev_device *d = dev_platform_device(p, 0);
    dev_err err = { 0, "" };
    dev_stream *s = dev_stream_create(d, "s", &err);
    dev_event *ev = dev_event_create(d, &err);
    assert_int_equal(dev_event_query(ev), 1);
    assert_int_equal(dev_event_sync(ev, &err), 0);
    assert_int_equal(dev_stream_wait_event_async(s, ev), 0);
    assert_int_equal(dev_stream_sync(s, &err), 0);
    dev_stream_destroy(s);
    dev_event_destroy(ev);
    dev_platform_close(p);
}

static void test_memory_is_zeroed_and_h2d_d2h_roundtrip(void **st)
{
    dev_platform *p = open_cpu(2);
    dev_device *d = dev_platform_device(p, 1);
    assert_string_equal(dev_device_name(d), "cpu:1");
    assert_int_equal(dev_device_ordinal(d), 1);
    assert_ptr_equal(dev_device_platform(d), p);
    assert_null(dev_platform_device(p, 2));
    dev_err err = { 0, "" };
    enum { N = 1000 };
    float *buf = dev_malloc(d, N * sizeof(float), &err);
    assert_non_null(buf);
    for (int i = 0; i < N; i++)
        assert_true(buf[i] == 0.0f);
    float src[N], dst[N];
    for (int i = 0; i < N; i++)
        src[i] = (float)i * 0.5f;
    assert_int_equal(dev_copy_h2d_sync(d, buf, src, sizeof src, &err), 0);
    dev_stream *s = dev_stream_create(d, "rb", &err);
    assert_int_equal(dev_copy_d2h_async(s, dst, buf, sizeof dst), 0);
    assert_int_equal(dev_stream_sync(s, &err), 0);
    assert_memory_equal(src, dst, sizeof src);
    /* upload into another device's memory through d is refused */
    dev_err e2 = { 0, "" };
    float *other = dev_malloc(dev_platform_device(p, 0), 16, &err);
    assert_int_equal(dev_copy_h2d_sync(d, other, src, 16, &e2), MEMRA_E_INVAL);
    assert_non_null(strstr(e2.msg, "cpu:1"));
    dev_err e3 = { 0, "" };
    assert_null(dev_malloc(d, 0, &e3));
    assert_int_equal(e3.code, MEMRA_E_INVAL);
    dev_stream_destroy(s);
    dev_free(d, buf);
    dev_free(dev_platform_device(p, 0), other);
    dev_platform_close(p);
}

static void k_set_flag(void *a)
{
    int *f = *(int **)a;
    *f = 1;
}

static void test_failed_op_is_sticky_and_events_still_complete(void **st)
{
    dev_platform *p = open_cpu(1);
    dev_device *d = dev_platform_device(p, 0);
    dev_err err = { 0, "" };
    dev_stream *s = dev_stream_create(d, "sticky", &err), *t = dev_stream_create(d, "after", &err);
    dev_event *ev = dev_event_create(d, &err), *ev_t = dev_event_create(d, &err);
    int *flag = dev_malloc(d, sizeof(int), &err);
    int not_device[4];
    int *fp = flag;
    dev_access bad = { not_device, sizeof not_device, DEV_WRITE };
    dev_access good = { flag, sizeof(int), DEV_WRITE };
    assert_int_equal(dev_launch_cpu_async(s, "bad_kernel", k_set_flag, &fp, sizeof fp, &bad, 1), 0);
    assert_int_equal(dev_launch_cpu_async(s, "later_kernel", k_set_flag, &fp, sizeof fp, &good, 1), 0);
    assert_int_equal(dev_event_record_async(ev, s), 0);
    /* a stream waiting on the failed stream's event inherits the failure */
    assert_int_equal(dev_stream_wait_event_async(t, ev), 0);
    assert_int_equal(dev_event_record_async(ev_t, t), 0);
    dev_err e1 = { 0, "" };
    assert_int_equal(dev_event_sync(ev, &e1), MEMRA_E_INVAL);
    assert_non_null(strstr(e1.msg, "bad_kernel"));
    assert_non_null(strstr(e1.msg, "sticky"));
    assert_int_equal(dev_event_query(ev), MEMRA_E_INVAL);
    dev_err e2 = { 0, "" };
    assert_int_equal(dev_stream_sync(s, &e2), MEMRA_E_INVAL);
    assert_string_equal(e1.msg, e2.msg);
    assert_int_equal(*flag, 0); /* later_kernel was skipped */
    dev_err e3 = { 0, "" };
    assert_int_equal(dev_event_sync(ev_t, &e3), MEMRA_E_INVAL);
    assert_non_null(strstr(e3.msg, "after"));
    dev_counters c;
    dev_device_counters(d, &c);
    assert_int_equal(c.kernels_run, 0);
    /* bad launch arguments fail at enqueue */
    dev_stream *u = dev_stream_create(d, "u", &err);
    assert_int_equal(dev_launch_cpu_async(u, "big", k_set_flag, &fp, DEV_ARGS_MAX + 1, NULL, 0), MEMRA_E_INVAL);
    dev_err e4 = { 0, "" };
    assert_int_equal(dev_stream_sync(u, &e4), MEMRA_E_INVAL);
    assert_non_null(strstr(e4.msg, "big"));
    dev_stream_destroy(s);
    dev_stream_destroy(t);
    dev_stream_destroy(u);
    dev_event_destroy(ev);
    dev_event_destroy(ev_t);
    dev_free(d, flag);
    dev_platform_close(p);
}

typedef struct hook_ctx { int n; } hook_ctx;

static void count_hook(void *ctx, dev_stream *s, const char *op)
{
    __atomic_fetch_add(&((hook_ctx *)ctx)->n, 1, __ATOMIC_RELAXED);
}

static void host_cb(void *arg) { *(int *)arg = 5; }

static void test_op_hook_sees_every_op_and_host_fn_runs_in_order(void **st)
{
    dev_platform *p = open_cpu(1);
    dev_device *d = dev_platform_device(p, 0);
    hook_ctx hc = { 0 };
    dev_set_op_hook(p, count_hook, &hc);
    dev_err err = { 0, "" };
    dev_stream *s = dev_stream_create(d, "s", &err);
    dev_event *ev = dev_event_create(d, &err);
    int *x = dev_malloc(d, sizeof(int), &err), *y = dev_malloc(d, sizeof(int), &err);
    int seen = 0;
    assert_int_equal(copy_int(s, y, x), 0);
    assert_int_equal(dev_event_record_async(ev, s), 0);
    assert_int_equal(dev_host_fn_async(s, host_cb, &seen), 0);
    assert_int_equal(dev_stream_sync(s, &err), 0);
    assert_int_equal(seen, 5);
    assert_int_equal(__atomic_load_n(&hc.n, __ATOMIC_RELAXED), 3);
    assert_null(dev_stream_native(s));
    assert_string_equal(dev_stream_name(s), "s");
    assert_ptr_equal(dev_stream_device(s), d);
    dev_stream_destroy(s);
    dev_set_op_hook(p, NULL, NULL);
    dev_event_destroy(ev);
    dev_free(d, x);
    dev_free(d, y);
    dev_platform_close(p);
}

static void env_case(const char *backend, const char *ndev, const char *want_in_msg)
{
    if (backend) setenv("MEMRA_BACKEND", backend, 1); else unsetenv("MEMRA_BACKEND");
    if (ndev) setenv("MEMRA_CPU_DEVICES", ndev, 1); else unsetenv("MEMRA_CPU_DEVICES");
    dev_err err = { 0, "" };
    dev_platform *p = dev_platform_open_env(&err);
    assert_null(p);
    assert_int_equal(err.code, MEMRA_E_INVAL);
    assert_non_null(strstr(err.msg, want_in_msg));
}

static void test_env_door_rejects_bad_values_naming_them(void **st)
{
    env_case("gpu", NULL, "MEMRA_BACKEND=gpu");
    env_case("gpu", NULL, "cpu, cuda");
    env_case("cpu", "0", "MEMRA_CPU_DEVICES=0");
    env_case("cpu", "65", "1..64");
    env_case("cpu", "3x", "MEMRA_CPU_DEVICES=3x");
    env_case(NULL, "-2", "MEMRA_CPU_DEVICES=-2");
    setenv("MEMRA_BACKEND", "cpu", 1);
    setenv("MEMRA_CPU_DEVICES", "3", 1);
    dev_err err = { 0, "" };
    dev_platform *p = dev_platform_open_env(&err);
    assert_non_null(p);
    assert_int_equal(dev_platform_kind(p), DEV_KIND_CPU);
    assert_int_equal(dev_platform_count(p), 3);
    dev_platform_close(p);
    unsetenv("MEMRA_CPU_DEVICES");
    p = dev_platform_open_env(&err);
    assert_non_null(p);
    assert_int_equal(dev_platform_count(p), DEV_CPU_DEVICES_DEFAULT);
    dev_platform_close(p);
    assert_null(dev_platform_open(DEV_KIND_CPU, 0, &err));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_runs_ops_in_fifo_order),
        cmocka_unit_test(test_wait_event_orders_second_stream_after_first),
        cmocka_unit_test(test_wait_binds_to_record_as_of_enqueue),
        cmocka_unit_test(test_event_orders_streams_of_two_devices_with_peer_copy),
        cmocka_unit_test(test_never_recorded_event_is_complete_and_wait_is_noop),
        cmocka_unit_test(test_memory_is_zeroed_and_h2d_d2h_roundtrip),
        cmocka_unit_test(test_failed_op_is_sticky_and_events_still_complete),
        cmocka_unit_test(test_op_hook_sees_every_op_and_host_fn_runs_in_order),
        cmocka_unit_test(test_env_door_rejects_bad_values_naming_them),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
