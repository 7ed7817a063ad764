/* Unit tests of the actor runtime's foundation: free list, mailbox, future, actor (actors/). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "actors/actor.h"
#include "actors/future.h"
#include "actors/mailbox.h"

/* Poll cond (test code only) every 1 ms for at most 5 s; returns its final value. */
#define WAIT_UNTIL(cond)                                                                   \
    ({                                                                                     \
        int ok_ = 0;                                                                       \
        for (int i_ = 0; i_ < 5000 && !(ok_ = !!(cond)); i_++)                             \
            nanosleep(&(struct timespec){ .tv_nsec = 1000000 }, NULL);                     \
        ok_;                                                                               \
    })

typedef struct seq_body {
    uint32_t producer;
    uint64_t seq;
} seq_body;

/* ---- mailbox and free list ---- */

static void test_messages_from_one_sender_are_taken_in_send_order(void **state)
{
    dev_err err = { 0 };
    act_mailbox *mb = act_mailbox_create("order", NULL, &err);
    assert_non_null(mb);
    for (uint64_t i = 0; i < 1000; i++) {
        act_msg *m = act_mailbox_msg_alloc(mb, 0, &err);
        assert_non_null(m);
        ACT_MSG_BODY(m, seq_body)->seq = i;
        act_mailbox_post(mb, m);
    }
    assert_false(act_mailbox_empty(mb));
    for (uint64_t i = 0; i < 1000; i++) {
        act_msg *m = act_mailbox_try_take(mb);
        assert_non_null(m);
        assert_int_equal(ACT_MSG_BODY(m, seq_body)->seq, i);
        act_msg_free(m);
    }
    assert_null(act_mailbox_try_take(mb));
    assert_true(act_mailbox_empty(mb));
    act_mailbox_stats st;
    act_mailbox_stats_get(mb, &st);
    assert_int_equal(st.posted, 1000);
    assert_int_equal(st.taken, 1000);
    assert_int_equal(st.was_empty, 1); /* only the first post found the queue empty */
    act_mailbox_destroy(mb);
}

static void test_free_list_reuses_messages_without_growing_in_steady_state(void **state)
{
    dev_err err = { 0 };
    act_mailbox *mb = act_mailbox_create("reuse", &(act_mailbox_opts){ .chunk_msgs = 16 }, &err);
    assert_non_null(mb);
    /* warm up: 10 in flight at once needs one chunk of 16 */
    act_msg *held[10];
    for (int round = 0; round < 20000; round++) {
        for (int i = 0; i < 10; i++) {
            held[i] = act_mailbox_msg_alloc(mb, 0, &err);
            assert_non_null(held[i]);
            assert_ptr_equal(held[i]->home, act_mailbox_freelist(mb));
            assert_int_equal(held[i]->kind, 0);
            held[i]->kind = ACT_MSG_USER + 1; /* the next take must reset it */
            act_mailbox_post(mb, held[i]);
        }
        for (int i = 0; i < 10; i++)
            act_msg_free(act_mailbox_try_take(mb));
    }
    act_mailbox_stats st;
    act_mailbox_stats_get(mb, &st);
    assert_int_equal(st.free.chunks, 1);
    assert_int_equal(st.free.msgs, 16);
    assert_int_equal(st.free.takes, 200000);
    assert_int_equal(st.free.gives, 200000);
    act_mailbox_destroy(mb);
}

static void test_free_list_grows_by_one_chunk_each_time_it_runs_dry(void **state)
{
    dev_err err = { 0 };
    act_freelist *fl = act_freelist_create("grow", 8, 0, 0, &err);
    assert_non_null(fl);
    act_msg *held[25];
    for (int i = 0; i < 25; i++)
        assert_non_null(held[i] = act_freelist_take(fl, 0, &err));
    act_freelist_stats st;
    act_freelist_stats_get(fl, &st);
    assert_int_equal(st.chunks, 4); /* 25 messages = 3 full chunks of 8 + 1 */
    for (int i = 0; i < 25; i++)
        act_msg_free(held[i]);
    for (int i = 0; i < 32; i++)
        assert_non_null(held[i % 25] = act_freelist_take(fl, 0, &err)), act_msg_free(held[i % 25]);
    act_freelist_stats_get(fl, &st);
    assert_int_equal(st.chunks, 4);
    act_freelist_destroy(fl);
}

static void test_free_list_prealloc_allocates_whole_chunks_up_front(void **state)
{
    dev_err err = { 0 };
    act_freelist *fl = act_freelist_create("pre", 8, 0, 20, &err);
    assert_non_null(fl);
    act_freelist_stats st;
    act_freelist_stats_get(fl, &st);
    assert_int_equal(st.chunks, 3);
    act_msg *held[24];
    for (int i = 0; i < 24; i++)
        assert_non_null(held[i] = act_freelist_take(fl, 0, &err));
    act_freelist_stats_get(fl, &st);
    assert_int_equal(st.chunks, 3);
    for (int i = 0; i < 24; i++)
        act_msg_free(held[i]);
    act_freelist_destroy(fl);
}

static void test_free_list_refuses_a_bad_chunk_size_naming_the_limit(void **state)
{
    dev_err err = { 0 };
    assert_null(act_freelist_create("bad", 1u << 21, 0, 0, &err));
    assert_int_equal(err.code, MEMRA_E_INVAL);
    assert_non_null(strstr(err.msg, "chunk_msgs"));
}

static void test_mailbox_refuses_a_spin_longer_than_a_millisecond(void **state)
{
    dev_err err = { 0 };
    assert_null(act_mailbox_create("spinny", &(act_mailbox_opts){ .spin_ns = 2000000 }, &err));
    assert_int_equal(err.code, MEMRA_E_INVAL);
    assert_non_null(strstr(err.msg, "spin_ns=2000000"));
}

typedef struct taker_arg {
    act_freelist *fl;
    act_msg *got;
    _Atomic int done;
} taker_arg;

static void *taker_main(void *p)
{
    taker_arg *t = p;
    dev_err err = { 0 };
    t->got = act_freelist_take(t->fl, 1, &err);
    atomic_store(&t->done, 1);
    return NULL;
}

static void test_free_list_at_its_cap_fails_or_waits_for_a_give(void **state)
{
    dev_err err = { 0 };
    act_freelist *fl = act_freelist_create("cap", 8, 8, 0, &err);
    assert_non_null(fl);
    act_msg *held[8];
    for (int i = 0; i < 8; i++)
        assert_non_null(held[i] = act_freelist_take(fl, 0, &err));
    assert_null(act_freelist_take(fl, 0, &err));
    assert_int_equal(err.code, MEMRA_E_FULL);
    assert_non_null(strstr(err.msg, "cap"));

    taker_arg t = { .fl = fl };
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, taker_main, &t), 0);
    act_freelist_stats st;
    assert_true(WAIT_UNTIL((act_freelist_stats_get(fl, &st), st.full_waits >= 1)));
    assert_false(atomic_load(&t.done));
    act_msg_free(held[3]);
    pthread_join(th, NULL);
    assert_ptr_equal(t.got, held[3]);
    act_freelist_stats_get(fl, &st);
    assert_int_equal(st.chunks, 1);
    assert_true(st.full_wakes >= 1);
    held[3] = t.got;
    for (int i = 0; i < 8; i++)
        act_msg_free(held[i]);
    act_freelist_destroy(fl);
}

typedef struct consumer_arg {
    act_mailbox *mb;
    uint64_t want;
    uint64_t got;
    uint64_t out_of_order;
} consumer_arg;

static void *consumer_main(void *p)
{
    consumer_arg *c = p;
    while (c->got < c->want) {
        act_msg *m = act_mailbox_take(c->mb);
        c->out_of_order += ACT_MSG_BODY(m, seq_body)->seq != c->got; /* no cmocka asserts off the main thread */
        c->got++;
        act_msg_free(m);
    }
    return NULL;
}

static void test_idle_consumer_sleeps_and_one_post_wakes_it_once(void **state)
{
    dev_err err = { 0 };
    act_mailbox *mb = act_mailbox_create("sleepy", NULL, &err);
    assert_non_null(mb);
    consumer_arg c = { .mb = mb, .want = 2 };
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, consumer_main, &c), 0);
    act_mailbox_stats st;
    assert_true(WAIT_UNTIL(act_mailbox_consumer_sleeping(mb)));
    act_mailbox_stats_get(mb, &st);
    assert_int_equal(st.sleeps, 1);
    assert_int_equal(st.wakeups, 0);
    act_msg *m = act_mailbox_msg_alloc(mb, 0, &err);
    ACT_MSG_BODY(m, seq_body)->seq = 0;
    assert_int_equal(act_mailbox_post(mb, m), 1); /* this post issued the wake-up */
    /* the consumer handles it and goes back to sleep */
    assert_true(WAIT_UNTIL((act_mailbox_stats_get(mb, &st), st.sleeps == 2 && act_mailbox_consumer_sleeping(mb))));
    act_mailbox_stats_get(mb, &st);
    assert_int_equal(st.wakeups, 1);
    assert_int_equal(st.taken, 1);
    m = act_mailbox_msg_alloc(mb, 0, &err);
    ACT_MSG_BODY(m, seq_body)->seq = 1;
    act_mailbox_post(mb, m);
    pthread_join(th, NULL);
    act_mailbox_stats_get(mb, &st);
    assert_int_equal(st.wakeups, 2);
    assert_int_equal(c.got, 2);
    assert_int_equal(c.out_of_order, 0);
    act_mailbox_destroy(mb);
}

/* ---- future ---- */

static void test_future_set_before_wait_returns_the_value_at_once(void **state)
{
    act_future f;
    act_future_init(&f);
    assert_false(act_future_ready(&f));
    int x = 7;
    assert_int_equal(act_future_set(&f, &x), 0);
    assert_true(act_future_ready(&f));
    void *v = NULL;
    assert_int_equal(act_future_wait(&f, &v, NULL), 0);
    assert_ptr_equal(v, &x);
    assert_int_equal(act_future_wait(&f, &v, NULL), 0); /* waiting again is fine */
    assert_int_equal(atomic_load(&f.wakes), 0);      /* nobody slept: no syscall */
    act_future_fini(&f);
}

static void test_future_second_completion_is_refused_and_the_first_wins(void **state)
{
    act_future f;
    act_future_init(&f);
    int x = 1, y = 2;
    assert_int_equal(act_future_set(&f, &x), 0);
    assert_int_equal(act_future_set(&f, &y), MEMRA_E_STATE);
    assert_int_equal(act_future_fail(&f, MEMRA_E_DEVICE, "late"), MEMRA_E_STATE);
    void *v = NULL;
    assert_int_equal(act_future_wait(&f, &v, NULL), 0);
    assert_ptr_equal(v, &x);
    act_future_reset(&f);
    assert_false(act_future_ready(&f));
    assert_int_equal(act_future_fail(&f, MEMRA_E_DEVICE, "stage %d exploded", 3), 0);
    dev_err err = { 0 };
    assert_int_equal(act_future_wait(&f, &v, &err), MEMRA_E_DEVICE);
    assert_int_equal(err.code, MEMRA_E_DEVICE);
    assert_string_equal(err.msg, "stage 3 exploded");
}

typedef struct waiter_arg {
    act_future *f;
    void *v;
    int rc;
} waiter_arg;

static void *waiter_main(void *p)
{
    waiter_arg *w = p;
    w->rc = act_future_wait(w->f, &w->v, NULL);
    return NULL;
}

static void test_future_waiters_sleep_until_another_thread_sets_it(void **state)
{
    act_future *f = act_future_create(NULL);
    assert_non_null(f);
    waiter_arg w[2] = { { .f = f, .rc = -99 }, { .f = f, .rc = -99 } };
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&th[i], NULL, waiter_main, &w[i]), 0);
    assert_true(WAIT_UNTIL(atomic_load(&f->state) == 1)); /* a waiter announced it sleeps */
    int x = 42;
    assert_int_equal(act_future_set(f, &x), 0);
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(w[i].rc, 0);
        assert_ptr_equal(w[i].v, &x);
    }
    assert_int_equal(atomic_load(&f->wakes), 1); /* one syscall wakes every sleeper */
    act_future_destroy(f);
}

static void *setter_main(void *p)
{
    act_future *f = p;
    while (atomic_load(&f->state) != 1) /* until the waiter announced it sleeps */
        sched_yield();
    static int x = 7;
    act_future_set(f, &x);
    return NULL; /* f may be freed already: the setter must not touch it after publishing */
}

/* The waiter frees the future the moment its wait returns, while the setter is still in act_future_set:
 * a setter that touched f after storing "done" races with that free (TSan reports it every round). */
static void test_a_waiter_may_free_the_future_as_soon_as_its_wait_returns(void **state)
{
    for (int round = 0; round < 50; round++) {
        act_future *f = act_future_create(NULL);
        assert_non_null(f);
        pthread_t th;
        assert_int_equal(pthread_create(&th, NULL, setter_main, f), 0);
        void *v = NULL;
        assert_int_equal(act_future_wait(f, &v, NULL), 0);
        act_future_destroy(f);
        assert_int_equal(*(int *)v, 7);
        pthread_join(th, NULL);
    }
}

/* ---- actor ---- */

typedef struct rec_ctx {
    uint64_t next;              /* actor thread only */
    int fail_at;                /* seq that fails (-1 none) */
    int detail;                 /* give detail through act_actor_fail */
    act_future *entered;        /* set when the first message is being handled */
    act_future *gate;           /* first message waits on it */
} rec_ctx;

static int rec_handle(act_actor *a, act_msg *m, void *p)
{
    rec_ctx *c = p;
    seq_body *b = ACT_MSG_BODY(m, seq_body);
    if (b->seq != c->next)
        return act_actor_fail(a, MEMRA_E_STATE, "expected seq %llu, got %llu", (unsigned long long)c->next,
                              (unsigned long long)b->seq);
    c->next++;
    if (c->gate && b->seq == 0) {
        act_future_set(c->entered, NULL);
        act_future_wait(c->gate, NULL, NULL);
    }
    if ((int)b->seq == c->fail_at)
        return c->detail ? act_actor_fail(a, MEMRA_E_DEVICE, "kernel failed at seq %llu",
                                          (unsigned long long)b->seq)
                         : MEMRA_E_DEVICE;
    if (m->reply)
        act_future_set(m->reply, (void *)(uintptr_t)(b->seq * 10));
    return 0;
}

static int send_seq(act_actor *a, uint64_t seq, act_future *reply)
{
    dev_err err = { 0 };
    act_msg *m = act_msg_new(a, ACT_MSG_USER, &err);
    assert_non_null(m);
    ACT_MSG_BODY(m, seq_body)->seq = seq;
    m->reply = reply;
    return act_send(a, m, &err);
}

static void test_stop_drains_every_message_sent_before_it(void **state)
{
    dev_err err = { 0 };
    rec_ctx c = { .fail_at = -1 };
    act_actor *a = act_actor_create("drain", rec_handle, &c, &err);
    assert_non_null(a);
    assert_int_equal(send_seq(a, 0, NULL), 0); /* before start: waits in the mailbox */
    assert_int_equal(act_actor_start(a, &err), 0);
    assert_int_equal(act_actor_start(a, &err), MEMRA_E_STATE);
    for (uint64_t i = 1; i < 20000; i++)
        assert_int_equal(send_seq(a, i, NULL), 0);
    act_actor_stop(a);
    act_future late;
    act_future_init(&late);
    assert_int_equal(send_seq(a, 20000, &late), MEMRA_E_STATE); /* refused after stop */
    assert_int_equal(act_future_wait(&late, NULL, NULL), MEMRA_E_STATE);
    dev_err jerr = { 0 };
    assert_int_equal(act_actor_join(a, &jerr), 0);
    assert_int_equal(jerr.code, 0);
    assert_int_equal(c.next, 20000); /* ordered by join */
    act_actor_stats st;
    act_actor_stats_get(a, &st);
    assert_int_equal(st.handled, 20000);
    assert_int_equal(st.discarded, 1);
    assert_int_equal(st.mailbox.free.takes, st.mailbox.free.gives);
    act_actor_destroy(a);
}

static void test_handler_error_reaches_the_joiner_and_fails_later_replies(void **state)
{
    dev_err err = { 0 };
    rec_ctx c = { .fail_at = 5, .detail = 1 };
    act_actor *a = act_actor_create("failing", rec_handle, &c, &err);
    assert_non_null(a);
    act_future replies[10];
    for (int i = 0; i < 10; i++)
        act_future_init(&replies[i]);
    for (int i = 0; i < 10; i++)
        assert_int_equal(send_seq(a, (uint64_t)i, &replies[i]), 0);
    assert_int_equal(act_actor_start(a, &err), 0);
    void *v = NULL;
    assert_int_equal(act_future_wait(&replies[4], &v, NULL), 0);
    assert_int_equal((uintptr_t)v, 40);
    dev_err rerr = { 0 };
    assert_int_equal(act_future_wait(&replies[5], NULL, &rerr), MEMRA_E_DEVICE);
    assert_non_null(strstr(rerr.msg, "kernel failed at seq 5"));
    for (int i = 6; i < 10; i++) { /* discarded, not handled: nobody hangs */
        dev_err e2 = { 0 };
        assert_int_equal(act_future_wait(&replies[i], NULL, &e2), MEMRA_E_DEVICE);
        assert_non_null(strstr(e2.msg, "actor failing"));
    }
    dev_err q = { 0 };
    assert_int_equal(act_actor_error(a, &q), MEMRA_E_DEVICE); /* visible before join */
    act_actor_stop(a);
    dev_err jerr = { 0 };
    assert_int_equal(act_actor_join(a, &jerr), MEMRA_E_DEVICE);
    assert_string_equal(jerr.msg, "actor failing: kernel failed at seq 5");
    assert_int_equal(c.next, 6);
    act_actor_stats st;
    act_actor_stats_get(a, &st);
    assert_int_equal(st.handled, 6);
    assert_int_equal(st.errors, 1);
    assert_int_equal(st.discarded, 4);
    dev_err again = { 0 };
    assert_int_equal(act_actor_join(a, &again), MEMRA_E_DEVICE); /* second join: same answer at once */
    act_actor_destroy(a);
}

static void test_handler_error_without_detail_names_the_code_and_kind(void **state)
{
    dev_err err = { 0 };
    rec_ctx c = { .fail_at = 0 };
    act_actor *a = act_actor_create("terse", rec_handle, &c, &err);
    assert_non_null(a);
    send_seq(a, 0, NULL);
    act_actor_start(a, &err);
    act_actor_stop(a);
    dev_err jerr = { 0 };
    assert_int_equal(act_actor_join(a, &jerr), MEMRA_E_DEVICE);
    assert_non_null(strstr(jerr.msg, "MEMRA_E_DEVICE"));
    assert_non_null(strstr(jerr.msg, "kind 16"));
    act_actor_destroy(a);
}

static void test_continue_policy_keeps_handling_after_an_error(void **state)
{
    dev_err err = { 0 };
    rec_ctx c = { .fail_at = 2, .detail = 1 };
    act_actor *a = act_actor_create_opts("stubborn", rec_handle, &c,
                                         &(act_actor_opts){ .on_error = ACT_ON_ERROR_CONTINUE }, &err);
    assert_non_null(a);
    act_actor_start(a, &err);
    for (uint64_t i = 0; i < 10; i++)
        send_seq(a, i, NULL);
    act_actor_stop(a);
    dev_err jerr = { 0 };
    assert_int_equal(act_actor_join(a, &jerr), MEMRA_E_DEVICE);
    assert_int_equal(c.next, 10);
    act_actor_stats st;
    act_actor_stats_get(a, &st);
    assert_int_equal(st.handled, 10);
    assert_int_equal(st.discarded, 0);
    act_actor_destroy(a);
}

static void test_no_wakeup_is_issued_while_the_consumer_is_busy(void **state)
{
    dev_err err = { 0 };
    act_future entered, gate;
    act_future_init(&entered);
    act_future_init(&gate);
    rec_ctx c = { .fail_at = -1, .entered = &entered, .gate = &gate };
    act_actor *a = act_actor_create("busy", rec_handle, &c, &err);
    assert_non_null(a);
    act_actor_start(a, &err);
    send_seq(a, 0, NULL);
    act_future_wait(&entered, NULL, NULL); /* the actor is inside the handler of message 0 */
    act_actor_stats st;
    act_actor_stats_get(a, &st);
    uint64_t wk0 = st.mailbox.wakeups, we0 = st.mailbox.was_empty;
    for (uint64_t i = 1; i <= 1000; i++)
        send_seq(a, i, NULL);
    act_actor_stats_get(a, &st);
    assert_int_equal(st.mailbox.wakeups, wk0); /* busy consumer: not one syscall */
    assert_int_equal(st.mailbox.was_empty, we0 + 1); /* the first post did find the queue empty... */
    assert_false(act_mailbox_consumer_sleeping(act_actor_mailbox(a))); /* ...but the consumer was awake */
    act_future_set(&gate, NULL);
    act_actor_stop(a);
    assert_int_equal(act_actor_join(a, &err), 0);
    assert_int_equal(c.next, 1001);
    act_actor_destroy(a);
}

static void test_join_of_an_actor_never_started_nor_stopped_is_refused(void **state)
{
    dev_err err = { 0 };
    rec_ctx c = { .fail_at = -1 };
    act_actor *a = act_actor_create("idle", rec_handle, &c, &err);
    assert_non_null(a);
    send_seq(a, 0, NULL);
    dev_err jerr = { 0 };
    assert_int_equal(act_actor_join(a, &jerr), MEMRA_E_STATE);
    assert_non_null(strstr(jerr.msg, "act_actor_stop"));
    act_actor_stop(a);
    assert_int_equal(act_actor_join(a, NULL), 0); /* discards the queued message */
    act_actor_stats st;
    act_actor_stats_get(a, &st);
    assert_int_equal(st.discarded, 1);
    assert_int_equal(st.handled, 0);
    act_actor_destroy(a);
}

/* Forwarder: sends each message on to the actor in ctx. ACT_KEPT even when the send is refused: act_send
 * owns m in every case (it freed a refused one), so returning the error would free m twice. */
static int forward_handle(act_actor *a, act_msg *m, void *ctx)
{
    dev_err err = { 0 };
    act_send((act_actor *)ctx, m, &err);
    return ACT_KEPT;
}

static void test_a_kept_message_forwarded_to_another_actor_returns_to_its_home_free_list(void **state)
{
    dev_err err = { 0 };
    rec_ctx c = { .fail_at = -1 };
    act_actor *sink_a = act_actor_create("sink", rec_handle, &c, &err);
    act_actor *fwd = act_actor_create("fwd", forward_handle, sink_a, &err);
    assert_non_null(sink_a);
    assert_non_null(fwd);
    act_actor_start(sink_a, &err);
    act_actor_start(fwd, &err);
    for (uint64_t i = 0; i < 5000; i++)
        assert_int_equal(send_seq(fwd, i, NULL), 0);
    act_actor_stop(fwd);
    assert_int_equal(act_actor_join(fwd, &err), 0); /* every forward is posted before the sink's pill */
    act_actor_stop(sink_a);
    assert_int_equal(act_actor_join(sink_a, &err), 0);
    assert_int_equal(c.next, 5000); /* forwarding kept the order */
    act_actor_stats sf, ss;
    act_actor_stats_get(fwd, &sf);
    act_actor_stats_get(sink_a, &ss);
    assert_int_equal(sf.mailbox.free.takes, 5000);
    assert_int_equal(sf.mailbox.free.gives, 5000); /* returned home by the sink */
    assert_int_equal(ss.mailbox.free.takes, 0);    /* the sink's own list was never used */
    assert_int_equal(ss.mailbox.posted, 5000 + 1);
    act_actor_destroy(fwd);
    act_actor_destroy(sink_a);
}

typedef struct pingpong {
    act_actor *peer;
    atomic_long hops;
} pingpong;

static int pingpong_handle(act_actor *a, act_msg *m, void *ctx)
{
    pingpong *p = ctx;
    atomic_fetch_add_explicit(&p->hops, 1, memory_order_relaxed);
    return forward_handle(a, m, p->peer);
}

/* Two actors bounce messages to each other without end, and are destroyed mid-flight. One at a time this
 * frees a mailbox while the other is still inside act_send into it (a use-after-free ASan reports, a race
 * TSan reports); act_actors_destroy joins both before freeing either. */
static void test_actors_sending_to_each_other_are_destroyed_together_mid_flight(void **state)
{
    for (int round = 0; round < 20; round++) {
        dev_err err = { 0 };
        pingpong pa = { 0 }, pb = { 0 };
        act_actor *a = act_actor_create("ping", pingpong_handle, &pa, &err);
        act_actor *b = act_actor_create("pong", pingpong_handle, &pb, &err);
        assert_non_null(a);
        assert_non_null(b);
        pa.peer = b;
        pb.peer = a;
        assert_int_equal(act_actor_start(a, &err), 0);
        assert_int_equal(act_actor_start(b, &err), 0);
        for (uint64_t i = 0; i < 8; i++)
            assert_int_equal(send_seq(a, i, NULL), 0);
        assert_true(WAIT_UNTIL(atomic_load(&pa.hops) > 2000 && atomic_load(&pb.hops) > 2000));
        act_actor *both[] = { a, NULL, b }; /* NULL entries are skipped */
        act_actors_destroy(both, 3);
    }
}

static int positive_handle(act_actor *a, act_msg *m, void *ctx)
{
    return 5;
}

static void test_a_handler_returning_a_positive_value_is_an_error_naming_it(void **state)
{
    dev_err err = { 0 };
    act_actor *a = act_actor_create("typo", positive_handle, NULL, &err);
    assert_non_null(a);
    send_seq(a, 0, NULL);
    act_actor_start(a, &err);
    act_actor_stop(a);
    dev_err jerr = { 0 };
    assert_int_equal(act_actor_join(a, &jerr), MEMRA_E_INVAL);
    assert_non_null(strstr(jerr.msg, "handler returned 5"));
    act_actor_destroy(a);
}

static int fail_all_handle(act_actor *a, act_msg *m, void *ctx)
{
    return act_actor_fail(a, MEMRA_E_DEVICE, "message %llu failed",
                          (unsigned long long)ACT_MSG_BODY(m, seq_body)->seq);
}

static void test_under_continue_each_failed_reply_carries_its_own_error(void **state)
{
    dev_err err = { 0 };
    act_actor *a = act_actor_create_opts("each", fail_all_handle, NULL,
                                         &(act_actor_opts){ .on_error = ACT_ON_ERROR_CONTINUE }, &err);
    assert_non_null(a);
    act_future r[3];
    for (int i = 0; i < 3; i++) {
        act_future_init(&r[i]);
        send_seq(a, (uint64_t)i, &r[i]);
    }
    act_actor_start(a, &err);
    char want[64];
    for (int i = 0; i < 3; i++) {
        dev_err e = { 0 };
        assert_int_equal(act_future_wait(&r[i], NULL, &e), MEMRA_E_DEVICE);
        snprintf(want, sizeof want, "actor each: message %d failed", i);
        assert_string_equal(e.msg, want);
    }
    act_actor_stop(a);
    dev_err jerr = { 0 };
    assert_int_equal(act_actor_join(a, &jerr), MEMRA_E_DEVICE);
    assert_string_equal(jerr.msg, "actor each: message 0 failed"); /* the first error is the actor's */
    act_actor_destroy(a);
}

static void test_actor_without_handler_is_refused(void **state)
{
    dev_err err = { 0 };
    assert_null(act_actor_create("nohandler", NULL, NULL, &err));
    assert_int_equal(err.code, MEMRA_E_INVAL);
    assert_non_null(strstr(err.msg, "handler"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_messages_from_one_sender_are_taken_in_send_order),
        cmocka_unit_test(test_free_list_reuses_messages_without_growing_in_steady_state),
        cmocka_unit_test(test_free_list_grows_by_one_chunk_each_time_it_runs_dry),
        cmocka_unit_test(test_free_list_prealloc_allocates_whole_chunks_up_front),
        cmocka_unit_test(test_free_list_refuses_a_bad_chunk_size_naming_the_limit),
        cmocka_unit_test(test_free_list_at_its_cap_fails_or_waits_for_a_give),
        cmocka_unit_test(test_mailbox_refuses_a_spin_longer_than_a_millisecond),
        cmocka_unit_test(test_idle_consumer_sleeps_and_one_post_wakes_it_once),
        cmocka_unit_test(test_future_set_before_wait_returns_the_value_at_once),
        cmocka_unit_test(test_future_second_completion_is_refused_and_the_first_wins),
        cmocka_unit_test(test_future_waiters_sleep_until_another_thread_sets_it),
        cmocka_unit_test(test_a_waiter_may_free_the_future_as_soon_as_its_wait_returns),
        cmocka_unit_test(test_stop_drains_every_message_sent_before_it),
        cmocka_unit_test(test_handler_error_reaches_the_joiner_and_fails_later_replies),
        cmocka_unit_test(test_handler_error_without_detail_names_the_code_and_kind),
        cmocka_unit_test(test_continue_policy_keeps_handling_after_an_error),
        cmocka_unit_test(test_no_wakeup_is_issued_while_the_consumer_is_busy),
        cmocka_unit_test(test_join_of_an_actor_never_started_nor_stopped_is_refused),
        cmocka_unit_test(test_a_kept_message_forwarded_to_another_actor_returns_to_its_home_free_list),
        cmocka_unit_test(test_actors_sending_to_each_other_are_destroyed_together_mid_flight),
        cmocka_unit_test(test_a_handler_returning_a_positive_value_is_an_error_naming_it),
        cmocka_unit_test(test_under_continue_each_failed_reply_carries_its_own_error),
        cmocka_unit_test(test_actor_without_handler_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
