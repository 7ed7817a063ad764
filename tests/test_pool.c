/* mem/: the stream-ordered device pool (freed-on-A reused-on-B only after A's free point; same-stream
 * reuse needs nothing; size classes). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <pthread.h>
#include <cmocka.h>

#include "device/dev.h"
#include "mem/pool.h"
#include "support/jitter.h"

typedef struct gate {
    pthread_mutex_t m;
    pthread_cond_t c;
    int open;
} gate;

typedef struct write_args { gate *g; int *buf; int value; } write_args;

/* Kernel: (wait for the gate when set) then buf[0] = value. */
static void k_write(void *a)
{
    write_args *w = a;
    if (w->g) {
        pthread_mutex_lock(&w->g->m);
        while (!w->g->open)
            pthread_cond_wait(&w->g->c, &w->g->m);
        pthread_mutex_unlock(&w->g->m);
    }
    w->buf[0] = w->value;
}

static int write_int(dev_stream *s, gate *g, int *buf, int value)
{
    write_args a = { g, buf, value };
    dev_access acc = { buf, sizeof(int), DEV_WRITE };
    return dev_launch_cpu_async(s, g ? "gated_write" : "write", k_write, &a, sizeof a, &acc, 1);
}

static void test_free_on_a_reused_on_b_waits_for_free_point(void **st)
{
    dev_err err = { 0, "" };
    dev_platform *p = dev_platform_open(DEV_KIND_CPU, 1, &err);
    dev_device *d = dev_platform_device(p, 0);
    dev_stream *a = dev_stream_create(d, "A", &err), *b = dev_stream_create(d, "B", &err);
    dev_event *done_b = dev_event_create(d, &err);
    mem_pool *pool = mem_pool_create(d, &err);
    assert_non_null(pool);
    gate g = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0 };

    int *x = mem_pool_alloc_async(pool, a, 1000, &err);
    assert_non_null(x);
    assert_int_equal(write_int(a, &g, x, 1), 0); /* A parks at the gate while using x */
    mem_pool_free_async(pool, a, x);            /* free point: behind the gated write */
    int *y = mem_pool_alloc_async(pool, b, 1000, &err);
    assert_ptr_equal(y, x);                      /* the same block comes back ... */
    mem_pool_counters c;
    mem_pool_stats(pool, &c);
    assert_int_equal(c.cross_stream_deps, 1);    /* ... behind a wait on A's free point */
    assert_int_equal(c.reuses, 1);
    assert_int_equal(write_int(b, NULL, y, 2), 0);
    assert_int_equal(dev_event_record_async(done_b, b), 0);
    assert_int_equal(dev_event_query(done_b), 0); /* B provably waits: A is still at the gate */
    pthread_mutex_lock(&g.m);
    g.open = 1;
    pthread_cond_broadcast(&g.c);
    pthread_mutex_unlock(&g.m);
    assert_int_equal(dev_event_sync(done_b, &err), 0);
    assert_int_equal(dev_stream_sync(a, &err), 0);
    assert_int_equal(y[0], 2);                   /* B's write came after A's */
    assert_int_equal(dev_race_count(p), 0);
    mem_pool_free_async(pool, b, y);
    assert_int_equal(dev_stream_sync(b, &err), 0);

    mem_pool_destroy(pool);
    dev_event_destroy(done_b);
    dev_stream_destroy(a);
    dev_stream_destroy(b);
    dev_platform_close(p);
}

static void test_reuse_on_the_same_stream_inserts_no_dependency(void **st)
{
    dev_err err = { 0, "" };
    dev_platform *p = dev_platform_open(DEV_KIND_CPU, 1, &err);
    dev_device *d = dev_platform_device(p, 0);
    dev_stream *a = dev_stream_create(d, "A", &err), *b = dev_stream_create(d, "B", &err);
    mem_pool *pool = mem_pool_create(d, &err);
    for (int i = 0; i < 100; i++) {
        int *x = mem_pool_alloc_async(pool, a, 256, &err);
        assert_non_null(x);
        assert_int_equal(write_int(a, NULL, x, i), 0);
        mem_pool_free_async(pool, a, x);
    }
    /* B takes the block A freed: the one cross-stream dependency */
    int *yb = mem_pool_alloc_async(pool, b, 256, &err);
    mem_pool_counters c;
    mem_pool_stats(pool, &c);
    assert_int_equal(c.allocs, 101);
    assert_int_equal(c.fresh_blocks, 1);
    assert_int_equal(c.reuses, 100);
    assert_int_equal(c.cross_stream_deps, 1); /* only B's take of A's block */
    mem_pool_free_async(pool, b, yb);
    assert_int_equal(dev_stream_sync(a, &err), 0);
    assert_int_equal(dev_stream_sync(b, &err), 0);
    assert_int_equal(dev_race_count(p), 0);
    mem_pool_destroy(pool);
    dev_stream_destroy(a);
    dev_stream_destroy(b);
    dev_platform_close(p);
}

static void test_size_classes_are_powers_of_two_from_256(void **st)
{
    dev_err err = { 0, "" };
    dev_platform *p = dev_platform_open(DEV_KIND_CPU, 2, &err);
    dev_device *d = dev_platform_device(p, 0);
    dev_stream *a = dev_stream_create(d, "A", &err);
    mem_pool *pool = mem_pool_create(d, &err);
    void *s1 = mem_pool_alloc_async(pool, a, 1, &err);
    void *s2 = mem_pool_alloc_async(pool, a, 257, &err);
    void *s3 = mem_pool_alloc_async(pool, a, 4096, &err);
    assert_non_null(s1);
    assert_non_null(s2);
    assert_non_null(s3);
    mem_pool_counters c;
    mem_pool_stats(pool, &c);
    assert_int_equal(c.bytes_reserved, 256 + 512 + 4096);
    mem_pool_free_async(pool, a, s2);
    assert_ptr_equal(mem_pool_alloc_async(pool, a, 300, &err), s2); /* 300 -> the 512 class */
    assert_ptr_not_equal(mem_pool_alloc_async(pool, a, 300, &err), s2);
    dev_err e = { 0, "" };
    assert_null(mem_pool_alloc_async(pool, a, 0, &e));
    assert_int_equal(e.code, MEMRA_E_INVAL);
    /* access grant through the pool */
    dev_device *d1 = dev_platform_device(p, 1);
    assert_int_equal(dev_peer_granted(d1, d), 0);
    assert_int_equal(mem_pool_grant_access(pool, d1, &err), 0);
    assert_int_equal(dev_peer_granted(d1, d), 1);
    assert_ptr_equal(mem_pool_device(pool), d);
    assert_int_equal(dev_stream_sync(a, &err), 0);
    mem_pool_destroy(pool);
    dev_stream_destroy(a);
    dev_platform_close(p);
}

/* ---- soak: several streams churning one pool, workers delayed at random ---- */

static const test_jitter jitter = { 1, 3, 80 }; /* sleep probability num/den, max us */

enum { SOAK_WORDS = 512 };

typedef struct pattern_args { uint32_t *buf; uint32_t tag; int *bad; } pattern_args;

static void k_fill_pattern(void *a)
{
    pattern_args *pa = a;
    for (int i = 0; i < SOAK_WORDS; i++)
        pa->buf[i] = pa->tag + (uint32_t)i;
}

/* Reads the block back; a block handed to another stream too early would have been overwritten. */
static void k_check_pattern(void *a)
{
    pattern_args *pa = a;
    for (int i = 0; i < SOAK_WORDS; i++)
        if (pa->buf[i] != pa->tag + (uint32_t)i)
            (*pa->bad)++;
}

static void test_pool_churn_over_streams_keeps_blocks_private_and_race_free(void **st)
{
    dev_err err = { 0, "" };
    dev_platform *p = dev_platform_open(DEV_KIND_CPU, 1, &err);
    dev_device *d = dev_platform_device(p, 0);
    dev_set_op_hook(p, test_jitter_hook, (void *)&jitter);
    enum { NS = 3, ITERS = 150 };
    dev_stream *s[NS];
    int *bad[NS];
    for (int i = 0; i < NS; i++) {
        char name[8];
        snprintf(name, sizeof name, "s%d", i);
        s[i] = dev_stream_create(d, name, &err);
        bad[i] = dev_malloc(d, sizeof(int), &err);
    }
    mem_pool *pool = mem_pool_create(d, &err);
    for (int it = 0; it < ITERS; it++) {
        for (int i = 0; i < NS; i++) {
            uint32_t *b = mem_pool_alloc_async(pool, s[(i + it) % NS], SOAK_WORDS * 4, &err);
            assert_non_null(b);
            dev_stream *ss = s[(i + it) % NS];
            int who = (i + it) % NS;
            pattern_args pa = { b, (uint32_t)(it * 7919 + i * 104729), bad[who] };
            dev_access wacc = { b, SOAK_WORDS * 4, DEV_WRITE };
            dev_access racc[2] = { { b, SOAK_WORDS * 4, DEV_READ }, { bad[who], sizeof(int), DEV_RW } };
            assert_int_equal(dev_launch_cpu_async(ss, "fill", k_fill_pattern, &pa, sizeof pa, &wacc, 1), 0);
            assert_int_equal(dev_launch_cpu_async(ss, "check", k_check_pattern, &pa, sizeof pa, racc, 2), 0);
            mem_pool_free_async(pool, ss, b);
        }
    }
    for (int i = 0; i < NS; i++) {
        assert_int_equal(dev_stream_sync(s[i], &err), 0);
        assert_int_equal(*bad[i], 0);
    }
    char msg[512];
    uint64_t races = dev_race_first(p, msg, sizeof msg);
    if (races)
        fail_msg("%llu races: %s", (unsigned long long)races, msg);
    mem_pool_counters c;
    mem_pool_stats(pool, &c);
    assert_int_equal(c.allocs, NS * ITERS);
    assert_true(c.cross_stream_deps > 0); /* the rotation hands blocks across streams */
    assert_true(c.fresh_blocks <= NS * ITERS);
    mem_pool_destroy(pool);
    for (int i = 0; i < NS; i++) {
        dev_stream_destroy(s[i]);
        dev_free(d, bad[i]);
    }
    dev_set_op_hook(p, NULL, NULL);
    dev_platform_close(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_free_on_a_reused_on_b_waits_for_free_point),
        cmocka_unit_test(test_reuse_on_the_same_stream_inserts_no_dependency),
        cmocka_unit_test(test_size_classes_are_powers_of_two_from_256),
        cmocka_unit_test(test_pool_churn_over_streams_keeps_blocks_private_and_race_free),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
