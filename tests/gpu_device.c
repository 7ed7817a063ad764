/* The device API on CUDA GPUs: stream FIFO order, event record/wait across streams (a host function
 * parked on a gate makes "B waits" observable), record-as-of-enqueue binding, host sync/query, the
 * stream-ordered pool, and (with >= 2 GPUs) peer grants + cross-device event waits + peer copies.
 * Exits 77 (skipped) with a reason when the build has no CUDA or no GPU is visible. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <cmocka.h>

#include "device/dev.h"
#include "mem/pool.h"

static dev_platform *g_p;

typedef struct gate {
    pthread_mutex_t m;
    pthread_cond_t c;
    int open;
} gate;

/* Host function: parks its stream until the gate opens (calls no CUDA). */
static void gate_fn(void *arg)
{
    gate *g = arg;
    pthread_mutex_lock(&g->m);
    while (!g->open)
        pthread_cond_wait(&g->c, &g->m);
    pthread_mutex_unlock(&g->m);
}

static void gate_open(gate *g)
{
    pthread_mutex_lock(&g->m);
    g->open = 1;
    pthread_cond_broadcast(&g->c);
    pthread_mutex_unlock(&g->m);
}

enum { N = 1 << 20 };

static void test_gpu_stream_runs_copies_in_fifo_order(void **st)
{
    dev_device *d = dev_platform_device(g_p, 0);
    dev_err err = { 0, "" };
    dev_stream *s = dev_stream_create(d, "fifo", &err);
    assert_non_null(s);
    assert_non_null(dev_stream_native(s));
    int *a = dev_malloc(d, N * sizeof(int), &err), *b = dev_malloc(d, N * sizeof(int), &err);
    int *h = dev_host_alloc(g_p, N * sizeof(int), &err), *out = dev_host_alloc(g_p, N * sizeof(int), &err);
    assert_non_null(a);
    assert_non_null(h);
    for (int round = 0; round < 4; round++) {
        for (int i = 0; i < N; i++)
            h[i] = i * 7 + round;
        assert_int_equal(dev_copy_h2d_async(s, a, h, N * sizeof(int)), 0);
        assert_int_equal(dev_copy_d2d_async(s, b, a, N * sizeof(int)), 0);
        assert_int_equal(dev_copy_d2h_async(s, out, b, N * sizeof(int)), 0);
        assert_int_equal(dev_stream_sync(s, &err), 0);
        assert_memory_equal(out, h, N * sizeof(int));
    }
    dev_err e = { 0, "" };
    assert_int_equal(dev_launch_cpu_async(s, "cpu_only", (dev_cpu_fn)gate_fn, NULL, 0, NULL, 0), MEMRA_E_INVAL);
    (void)e;
    dev_stream_destroy(s);
    dev_free(d, a);
    dev_free(d, b);
    dev_host_free(g_p, h);
    dev_host_free(g_p, out);
}

static void test_gpu_wait_event_orders_second_stream_after_first(void **st)
{
    dev_device *d = dev_platform_device(g_p, 0);
    dev_err err = { 0, "" };
    dev_stream *a = dev_stream_create(d, "A", &err), *b = dev_stream_create(d, "B", &err),
               *c = dev_stream_create(d, "C", &err);
    dev_event *ev = dev_event_create(d, &err), *done_b = dev_event_create(d, &err);
    int *x = dev_malloc(d, sizeof(int), &err), *y = dev_malloc(d, sizeof(int), &err);
    int *h = dev_host_alloc(g_p, 2 * sizeof(int), &err);
    gate g = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0 };
    assert_int_equal(dev_event_query(ev), 1); /* never recorded */
    assert_int_equal(dev_event_sync(ev, &err), 0);
    h[0] = 42;
    assert_int_equal(dev_host_fn_async(a, gate_fn, &g), 0); /* A parks */
    assert_int_equal(dev_copy_h2d_async(a, x, &h[0], sizeof(int)), 0);
    assert_int_equal(dev_event_record_async(ev, a), 0);
    assert_int_equal(dev_stream_wait_event_async(b, ev), 0); /* binds to A's record */
    assert_int_equal(dev_copy_d2d_async(b, y, x, sizeof(int)), 0);
    assert_int_equal(dev_copy_d2h_async(b, &h[1], y, sizeof(int)), 0);
    assert_int_equal(dev_event_record_async(done_b, b), 0);
    assert_int_equal(dev_event_record_async(ev, c), 0); /* re-record on idle C: B keeps A's point */
    assert_int_equal(dev_stream_sync(c, &err), 0);
    assert_int_equal(dev_event_query(ev), 1);
    assert_int_equal(dev_event_query(done_b), 0); /* B provably waits for A */
    gate_open(&g);
    assert_int_equal(dev_event_sync(done_b, &err), 0);
    assert_int_equal(h[1], 42);
    assert_int_equal(dev_stream_sync(a, &err), 0);
    dev_stream_destroy(a);
    dev_stream_destroy(b);
    dev_stream_destroy(c);
    dev_event_destroy(ev);
    dev_event_destroy(done_b);
    dev_free(d, x);
    dev_free(d, y);
    dev_host_free(g_p, h);
}

static void test_gpu_pool_reuses_across_streams(void **st)
{
    dev_device *d = dev_platform_device(g_p, 0);
    dev_err err = { 0, "" };
    dev_stream *a = dev_stream_create(d, "A", &err), *b = dev_stream_create(d, "B", &err);
    mem_pool *pool = mem_pool_create(d, &err);
    assert_non_null(pool);
    int *h = dev_host_alloc(g_p, 2 * sizeof(int), &err);
    h[0] = 5;
    int *x = mem_pool_alloc_async(pool, a, 4096, &err);
    assert_non_null(x);
    assert_int_equal(dev_copy_h2d_async(a, x, &h[0], sizeof(int)), 0);
    mem_pool_free_async(pool, a, x);
    int *y = mem_pool_alloc_async(pool, b, 4096, &err); /* the pool orders b after a's free if it reuses */
    assert_non_null(y);
    assert_int_equal(dev_copy_d2h_async(b, &h[1], y, sizeof(int)), 0);
    mem_pool_free_async(pool, b, y);
    assert_int_equal(dev_stream_sync(a, &err), 0);
    assert_int_equal(dev_stream_sync(b, &err), 0);
    mem_pool_counters c;
    mem_pool_stats(pool, &c);
    assert_int_equal(c.allocs, 2);
    mem_pool_destroy(pool);
    dev_stream_destroy(a);
    dev_stream_destroy(b);
    dev_host_free(g_p, h);
}

static void test_gpu_peer_grant_event_and_copy_across_devices(void **st)
{
    if (dev_platform_count(g_p) < 2) {
        printf("skipped: the peer part needs >= 2 GPUs, %d visible\n", dev_platform_count(g_p));
        skip();
    }
    dev_device *d0 = dev_platform_device(g_p, 0), *d1 = dev_platform_device(g_p, 1);
    dev_err err = { 0, "" };
    int rc = dev_peer_grant(d1, d0, &err);
    if (rc == MEMRA_E_UNSUPPORTED) {
        printf("skipped: %s\n", err.msg);
        skip();
    }
    assert_int_equal(rc, 0);
    assert_int_equal(dev_peer_grant(d1, d0, &err), 0); /* idempotent */
    assert_int_equal(dev_peer_granted(d1, d0), 1);
    dev_stream *s0 = dev_stream_create(d0, "stage0", &err), *s1 = dev_stream_create(d1, "stage1", &err);
    dev_event *tx = dev_event_create(d0, &err);
    int *x0 = dev_malloc(d0, N * sizeof(int), &err), *x1 = dev_malloc(d1, N * sizeof(int), &err);
    int *h = dev_host_alloc(g_p, N * sizeof(int), &err), *out = dev_host_alloc(g_p, N * sizeof(int), &err);
    for (int i = 0; i < N; i++)
        h[i] = i ^ 0x5a5a;
    gate g = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0 };
    assert_int_equal(dev_host_fn_async(s0, gate_fn, &g), 0);
    assert_int_equal(dev_copy_h2d_async(s0, x0, h, N * sizeof(int)), 0);
    assert_int_equal(dev_event_record_async(tx, s0), 0);
    assert_int_equal(dev_stream_wait_event_async(s1, tx), 0); /* cuda:1 waits an event of cuda:0 */
    assert_int_equal(dev_copy_peer_async(s1, x1, d1, x0, d0, N * sizeof(int)), 0);
    assert_int_equal(dev_copy_d2h_async(s1, out, x1, N * sizeof(int)), 0);
    dev_event *done1 = dev_event_create(d1, &err);
    assert_int_equal(dev_event_record_async(done1, s1), 0);
    assert_int_equal(dev_event_query(done1), 0);
    gate_open(&g);
    assert_int_equal(dev_stream_sync(s1, &err), 0);
    assert_memory_equal(out, h, N * sizeof(int));
    dev_counters c;
    dev_device_counters(d1, &c);
    assert_int_equal(c.peer_copy_bytes, (uint64_t)N * sizeof(int));
    /* pool memory of cuda:0 opened to cuda:1 */
    mem_pool *pool = mem_pool_create(d0, &err);
    assert_int_equal(mem_pool_grant_access(pool, d1, &err), 0);
    mem_pool_destroy(pool);
    assert_int_equal(dev_stream_sync(s0, &err), 0);
    dev_stream_destroy(s0);
    dev_stream_destroy(s1);
    dev_event_destroy(tx);
    dev_event_destroy(done1);
    dev_free(d0, x0);
    dev_free(d1, x1);
    dev_host_free(g_p, h);
    dev_host_free(g_p, out);
}

int main(void)
{
    dev_err err = { 0, "" };
    g_p = dev_platform_open(DEV_KIND_CUDA, 0, &err);
    if (!g_p) {
        printf("skipped: no CUDA device to test on: %s\n", err.msg);
        return 77;
    }
    printf("CUDA devices: %d\n", dev_platform_count(g_p));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpu_stream_runs_copies_in_fifo_order),
        cmocka_unit_test(test_gpu_wait_event_orders_second_stream_after_first),
        cmocka_unit_test(test_gpu_pool_reuses_across_streams),
        cmocka_unit_test(test_gpu_peer_grant_event_and_copy_across_devices),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    dev_platform_close(g_p);
    return rc;
}
