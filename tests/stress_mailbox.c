/* Stress: 8 producers x STRESS_PER_PRODUCER messages into one actor's mailbox. Nothing lost, per-producer
 * FIFO, the free list stops growing, and the consumer sleeps when the producers pause (wake-ups a fraction of
 * the messages).
 * Bounded: seconds normally; sanitizer legs send fewer messages (still >= 1e4 per producer). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#include "actors/actor.h"

#define STRESS_PRODUCERS 8
#if defined(MEMRA_TSAN)
#define STRESS_PER_PRODUCER 100000
#elif defined(MEMRA_ASAN)
#define STRESS_PER_PRODUCER 200000
#else
#define STRESS_PER_PRODUCER 1000000
#endif
#define STRESS_MAX_MSGS 8192 /* free-list cap: producers faster than the consumer wait for messages */

typedef struct body {
    uint32_t producer;
    uint64_t seq;
} body;

typedef struct sink {                  /* actor thread only (read by the test after join) */
    uint64_t next[STRESS_PRODUCERS];   /* next expected seq per producer */
    uint64_t out_of_order;
    uint64_t bad_producer;
    _Atomic uint64_t received;         /* also polled by the test */
} sink;

static int sink_handle(act_actor *a, act_msg *m, void *ctx)
{
    sink *s = ctx;
    body *b = ACT_MSG_BODY(m, body);
    if (b->producer >= STRESS_PRODUCERS) {
        s->bad_producer++;
    } else {
        s->out_of_order += b->seq != s->next[b->producer];
        s->next[b->producer] = b->seq + 1;
    }
    atomic_fetch_add_explicit(&s->received, 1, memory_order_relaxed);
    return 0;
}

typedef struct producer {
    act_actor *a;
    uint32_t id;
    uint64_t from, to;
    int failures;
} producer;

static void *producer_main(void *p)
{
    producer *pr = p;
    dev_err err = { 0 };
    for (uint64_t i = pr->from; i < pr->to; i++) {
        act_msg *m = act_msg_new(pr->a, ACT_MSG_USER, &err);
        if (!m) {
            pr->failures++;
            return NULL;
        }
        body *b = ACT_MSG_BODY(m, body);
        b->producer = pr->id;
        b->seq = i;
        pr->failures += act_send(pr->a, m, &err) != 0;
    }
    return NULL;
}

static void run_producers(act_actor *a, uint64_t from, uint64_t to)
{
    pthread_t th[STRESS_PRODUCERS];
    producer pr[STRESS_PRODUCERS];
    for (uint32_t i = 0; i < STRESS_PRODUCERS; i++) {
        pr[i] = (producer){ .a = a, .id = i, .from = from, .to = to };
        assert_int_equal(pthread_create(&th[i], NULL, producer_main, &pr[i]), 0);
    }
    for (uint32_t i = 0; i < STRESS_PRODUCERS; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(pr[i].failures, 0);
    }
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Poll (test code only) until cond holds, at most 20 s. */
static int wait_until(int (*cond)(void *), void *arg)
{
    for (int i = 0; i < 20000; i++) {
        if (cond(arg))
            return 1;
        nanosleep(&(struct timespec){ .tv_nsec = 1000000 }, NULL);
    }
    return cond(arg);
}

typedef struct drained_arg {
    sink *s;
    uint64_t want;
    act_actor *a;
} drained_arg;

static int drained_and_asleep(void *p)
{
    drained_arg *d = p;
    return atomic_load(&d->s->received) == d->want && act_mailbox_consumer_sleeping(act_actor_mailbox(d->a));
}

static void test_eight_producers_lose_nothing_keep_fifo_and_the_idle_consumer_sleeps(void **state)
{
    static sink s; /* large enough to keep off the stack; zeroed by being static */
    dev_err err = { 0 };
    act_actor_opts opts = { .mailbox = { .chunk_msgs = 256, .max_msgs = STRESS_MAX_MSGS } };
    act_actor *a = act_actor_create_opts("sink", sink_handle, &s, &opts, &err);
    assert_non_null(a);
    assert_int_equal(act_actor_start(a, &err), 0);

    const uint64_t half = STRESS_PER_PRODUCER / 2, total = (uint64_t)STRESS_PRODUCERS * STRESS_PER_PRODUCER;
    double t0 = now_s();
    run_producers(a, 0, half);
    double t1 = now_s();

    /* The producers paused: the consumer drains, spins briefly, then must go to sleep. */
    drained_arg d = { .s = &s, .want = (uint64_t)STRESS_PRODUCERS * half, .a = a };
    assert_true(wait_until(drained_and_asleep, &d));
    act_actor_stats mid;
    act_actor_stats_get(a, &mid);
    assert_true(mid.mailbox.sleeps >= 1);
    nanosleep(&(struct timespec){ .tv_nsec = 20000000 }, NULL);
    act_actor_stats idle;
    act_actor_stats_get(a, &idle);
    assert_int_equal(idle.mailbox.sleeps, mid.mailbox.sleeps); /* asleep, not polling: no new wake/sleep */
    assert_int_equal(idle.mailbox.taken, mid.mailbox.taken);

    double t2 = now_s();
    run_producers(a, half, STRESS_PER_PRODUCER);
    act_actor_stop(a);
    assert_int_equal(act_actor_join(a, &err), 0);
    double t3 = now_s();

    act_actor_stats st;
    act_actor_stats_get(a, &st);
    printf("stress_mailbox: %d producers x %d msgs: %.2f s + %.2f s (%.1f M msg/s); wakeups %llu, sleeps %llu, "
           "posts finding the queue empty %llu, free-list chunks %llu (%llu msgs), takes at cap slept %llu\n",
           STRESS_PRODUCERS, STRESS_PER_PRODUCER, t1 - t0, t3 - t2, (double)total / ((t1 - t0) + (t3 - t2)) / 1e6,
           (unsigned long long)st.mailbox.wakeups, (unsigned long long)st.mailbox.sleeps,
           (unsigned long long)st.mailbox.was_empty, (unsigned long long)st.mailbox.free.chunks,
           (unsigned long long)st.mailbox.free.msgs, (unsigned long long)st.mailbox.free.full_waits);

    assert_int_equal(atomic_load(&s.received), total); /* nothing lost */
    assert_int_equal(st.handled, total);
    assert_int_equal(s.out_of_order, 0);               /* per-producer FIFO */
    assert_int_equal(s.bad_producer, 0);
    for (int i = 0; i < STRESS_PRODUCERS; i++)
        assert_int_equal(s.next[i], STRESS_PER_PRODUCER);
    assert_true(st.mailbox.wakeups > idle.mailbox.wakeups); /* the first post after the pause woke it */
    /* Only a post that finds the queue empty may wake, and wake-ups stay a fraction of the messages: how small
     * depends on the cores (a consumer with a core of its own catches up and sleeps more often, since the
     * default does not spin), so the bound catches a wake per post, not a machine's ratio. */
    assert_true(st.mailbox.wakeups <= st.mailbox.was_empty);
    assert_true(st.mailbox.wakeups * 4 < total);
    assert_true(st.mailbox.free.msgs <= STRESS_MAX_MSGS);
    assert_int_equal(st.mailbox.free.takes, st.mailbox.free.gives); /* every message came back */
    act_actor_destroy(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_eight_producers_lose_nothing_keep_fifo_and_the_idle_consumer_sleeps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
