/* Per-stream attachments (device/dev.h dev_stream_attach) on the CPU backend: an attached pointer is found
 * again on its stream only, its destructor runs exactly once at dev_stream_destroy and only after every op
 * enqueued on the stream has run, slots are checked, detaching gives the pointer back without destroying
 * it, and a stream attached on one thread can be destroyed on another after a join. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <pthread.h>
#include <stdatomic.h>
#include <cmocka.h>

#include "device/dev.h"

static dev_platform *g_p;

/* What a destructor saw: how often it ran, and the kernel's flag at that moment. */
typedef struct probe {
    atomic_int destroyed;
    atomic_int kernel_done;     /* set by the slow kernel */
    int kernel_done_at_destroy; /* copy taken by the destructor */
    int order;                  /* destruction rank (global counter) */
} probe;

static atomic_int g_rank;

static void probe_destroy(void *p)
{
    probe *pr = p;
    pr->kernel_done_at_destroy = atomic_load(&pr->kernel_done);
    pr->order = atomic_fetch_add(&g_rank, 1);
    atomic_fetch_add(&pr->destroyed, 1);
}

typedef struct slow_args { probe *pr; int *buf; } slow_args;

/* Kernel: sleep 30 ms, write the buffer, then mark the probe (so an early destructor sees 0). */
static void k_slow(void *a)
{
    slow_args *sa = a;
    struct timespec ts = {0, 30 * 1000 * 1000};
    nanosleep(&ts, NULL);
    sa->buf[0] = 7;
    atomic_store(&sa->pr->kernel_done, 1);
}

static dev_stream *new_stream(const char *name)
{
    dev_err err = {0};
    dev_stream *s = dev_stream_create(dev_platform_device(g_p, 0), name, &err);
    assert_non_null(s);
    return s;
}

static void test_attached_pointer_is_found_on_its_stream_only(void **state)
{
    (void)state;
    dev_stream *a = new_stream("a"), *b = new_stream("b");
    int x = 0, y = 0;
    dev_err err = {0};
    assert_null(dev_stream_attachment(a, DEV_SLOT_KRN_GEMM));
    assert_int_equal(dev_stream_attach(a, DEV_SLOT_KRN_GEMM, &x, NULL, &err), 0);
    assert_int_equal(dev_stream_attach(b, DEV_SLOT_KRN_GEMM, &y, NULL, &err), 0);
    assert_ptr_equal(dev_stream_attachment(a, DEV_SLOT_KRN_GEMM), &x);
    assert_ptr_equal(dev_stream_attachment(b, DEV_SLOT_KRN_GEMM), &y);
    assert_null(dev_stream_attachment(a, 1));
    dev_stream_destroy(a);
    dev_stream_destroy(b);
}

static void test_destroy_runs_once_after_every_enqueued_op_has_run(void **state)
{
    (void)state;
    dev_err err = {0};
    dev_device *d = dev_platform_device(g_p, 0);
    dev_stream *s = new_stream("slow");
    int *buf = dev_malloc(d, sizeof(int), &err);
    assert_non_null(buf);
    probe *pr = calloc(1, sizeof *pr);
    assert_int_equal(dev_stream_attach(s, DEV_SLOT_KRN_GEMM, pr, probe_destroy, &err), 0);
    slow_args a = {pr, buf};
    dev_access acc = {buf, sizeof(int), DEV_WRITE};
    assert_int_equal(dev_launch_cpu_async(s, "slow", k_slow, &a, sizeof a, &acc, 1), 0);
    assert_int_equal(atomic_load(&pr->destroyed), 0);
    dev_stream_destroy(s); /* returns at once to the test only after the kernel ran */
    assert_int_equal(atomic_load(&pr->destroyed), 1);
    assert_int_equal(pr->kernel_done_at_destroy, 1);
    assert_int_equal(buf[0], 7);
    dev_free(d, buf);
    free(pr);
}

static void test_destructors_run_in_descending_slot_order(void **state)
{
    (void)state;
    dev_err err = {0};
    dev_stream *s = new_stream("order");
    probe p0 = {0}, p3 = {0};
    assert_int_equal(dev_stream_attach(s, 0, &p0, probe_destroy, &err), 0);
    assert_int_equal(dev_stream_attach(s, DEV_STREAM_SLOTS - 1, &p3, probe_destroy, &err), 0);
    dev_stream_destroy(s);
    assert_int_equal(atomic_load(&p0.destroyed), 1);
    assert_int_equal(atomic_load(&p3.destroyed), 1);
    assert_true(p3.order < p0.order);
}

static void test_bad_slot_and_taken_slot_are_refused_with_a_message(void **state)
{
    (void)state;
    dev_stream *s = new_stream("bad");
    int x = 0, y = 0;
    dev_err err = {0};
    assert_int_equal(dev_stream_attach(s, -1, &x, NULL, &err), MEMRA_E_INVAL);
    assert_non_null(strstr(err.msg, "out of range"));
    dev_err_clear(&err);
    assert_int_equal(dev_stream_attach(s, DEV_STREAM_SLOTS, &x, NULL, &err), MEMRA_E_INVAL);
    dev_err_clear(&err);
    assert_int_equal(dev_stream_attach(NULL, 0, &x, NULL, &err), MEMRA_E_INVAL);
    dev_err_clear(&err);
    assert_int_equal(dev_stream_attach(s, 2, &x, NULL, &err), 0);
    assert_int_equal(dev_stream_attach(s, 2, &y, NULL, &err), MEMRA_E_INVAL);
    assert_non_null(strstr(err.msg, "taken"));
    assert_ptr_equal(dev_stream_attachment(s, 2), &x); /* the refused attach changed nothing */
    assert_null(dev_stream_attachment(s, -1));
    assert_null(dev_stream_attachment(s, DEV_STREAM_SLOTS));
    assert_null(dev_stream_attachment(NULL, 0));
    dev_stream_destroy(s);
}

static void test_detaching_gives_the_pointer_back_without_destroying_it(void **state)
{
    (void)state;
    dev_err err = {0};
    dev_stream *s = new_stream("detach");
    probe pr = {0}, pr2 = {0};
    assert_int_equal(dev_stream_attach(s, 1, &pr, probe_destroy, &err), 0);
    assert_int_equal(dev_stream_attach(s, 1, NULL, NULL, &err), 0);
    assert_null(dev_stream_attachment(s, 1));
    assert_int_equal(dev_stream_attach(s, 1, &pr2, probe_destroy, &err), 0); /* the slot is free again */
    dev_stream_destroy(s);
    assert_int_equal(atomic_load(&pr.destroyed), 0);
    assert_int_equal(atomic_load(&pr2.destroyed), 1);
}

typedef struct owner_args { dev_stream *s; probe *pr; int rc; } owner_args;

/* The stream's owner thread: attach and enqueue, then hand the stream back (the join orders it). */
static void *owner(void *arg)
{
    owner_args *oa = arg;
    dev_err err = {0};
    oa->rc = dev_stream_attach(oa->s, DEV_SLOT_KRN_GEMM, oa->pr, probe_destroy, &err);
    if (!oa->rc && dev_stream_attachment(oa->s, DEV_SLOT_KRN_GEMM) != oa->pr)
        oa->rc = -100;
    return NULL;
}

static void test_stream_attached_on_its_owner_thread_is_destroyed_after_a_join(void **state)
{
    (void)state;
    dev_stream *s = new_stream("owned");
    probe *pr = calloc(1, sizeof *pr);
    owner_args oa = {s, pr, -1};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, owner, &oa), 0);
    assert_int_equal(pthread_join(th, NULL), 0); /* hands s and its attachment to this thread */
    assert_int_equal(oa.rc, 0);
    dev_stream_destroy(s);
    assert_int_equal(atomic_load(&pr->destroyed), 1);
    free(pr);
}

int main(void)
{
    dev_err err = {0};
    g_p = dev_platform_open(DEV_KIND_CPU, 2, &err);
    if (!g_p) {
        print_error("cannot open the CPU backend: %s\n", err.msg);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attached_pointer_is_found_on_its_stream_only),
        cmocka_unit_test(test_destroy_runs_once_after_every_enqueued_op_has_run),
        cmocka_unit_test(test_destructors_run_in_descending_slot_order),
        cmocka_unit_test(test_bad_slot_and_taken_slot_are_refused_with_a_message),
        cmocka_unit_test(test_detaching_gives_the_pointer_back_without_destroying_it),
        cmocka_unit_test(test_stream_attached_on_its_owner_thread_is_destroyed_after_a_join),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    dev_platform_close(g_p);
    return rc;
}
