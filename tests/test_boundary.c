/* The real boundary (transport/boundary.c) on the CPU backend: tokens sent and received across its K slots on
 * one device (d2d) and across two (peer), with jittered stream workers; the slot of each send under overlap 0
 * (always slot 0) and 1 (rotating through K); refused arguments; and the ev_rx wait the boundary puts before
 * every send: dropped by its test hook, the race checker reports the overwritten slot, kept, nothing. And the
 * transport of a boundary between two ranks (bnd_pick_remote): NCCL only when every condition holds, each other
 * case naming its reason; an NCCL half on a CPU device is refused.
 * Shared mutable state: g_consumer_done (an atomic: the consumer's stream worker sets it, the producer's reads
 * it). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "support/jitter.h"
#include "transport/bnd_nccl.h"
#include "transport/boundary.h"

enum { W = 256, STEPS = 24, K = 3 };

static const test_jitter jitter = {1, 3, 50}; /* a third of the stream ops sleep up to 50 us */

typedef struct rig {
    dev_platform *p;
    dev_device *src, *dst;
    dev_stream *ps, *cs; /* producer (on src), consumer (on dst) */
    bnd_boundary *b;
    float *tok[STEPS];   /* each step's token on the producer's device */
    float *got;          /* STEPS x W on the consumer's device */
    float *host;         /* STEPS x W pinned: what each step sends */
} rig;

/* A boundary of k slots of W floats from device 0 to device `to` (0: the same device) of a 2-device platform. */
static void rig_open(rig *r, int to, int k)
{
    dev_err e = {0};
    memset(r, 0, sizeof *r);
    r->p = dev_platform_open(DEV_KIND_CPU, 2, &e);
    assert_non_null(r->p);
    r->src = dev_platform_device(r->p, 0);
    r->dst = dev_platform_device(r->p, to);
    if (to)
        assert_int_equal(dev_peer_grant(r->src, r->dst, &e), 0);
    r->ps = dev_stream_create(r->src, "producer", &e);
    r->cs = dev_stream_create(r->dst, "consumer", &e);
    r->b = bnd_create(r->src, r->dst, k, W * sizeof(float), &e);
    r->got = dev_malloc(r->dst, STEPS * W * sizeof(float), &e);
    r->host = dev_host_alloc(r->p, STEPS * W * sizeof(float), &e);
    assert_true(r->ps && r->cs && r->b && r->got && r->host);
    for (int t = 0; t < STEPS; t++) {
        assert_non_null(r->tok[t] = dev_malloc(r->src, W * sizeof(float), &e));
        for (int i = 0; i < W; i++)
            r->host[t * W + i] = (float)(1000 * t + i);
    }
}

static void rig_close(rig *r)
{
    dev_set_op_hook(r->p, NULL, NULL);
    dev_stream_destroy(r->ps); /* destroy syncs: nothing of theirs runs after this */
    dev_stream_destroy(r->cs);
    bnd_destroy(r->b);
    for (int t = 0; t < STEPS; t++)
        dev_free(r->src, r->tok[t]);
    dev_free(r->dst, r->got);
    dev_host_free(r->p, r->host);
    dev_platform_close(r->p);
}

/* Every step through the boundary as the stage actors run it: the producer writes its token, takes the slot
 * (bnd_next_slot) and sends; the consumer receives into its row of got, which returns the slot's credit: the one
 * host thread here enqueues each receive before the next send, so every send's ev_rx wait binds to the record
 * of the slot's last receive. Then checks every row and that the checker saw nothing. */
static void run_steps(rig *r, int overlap)
{
    dev_err e = {0};
    for (int t = 0; t < STEPS; t++) {
        assert_int_equal(dev_copy_h2d_async(r->ps, r->tok[t], r->host + t * W, W * sizeof(float)), 0);
        const int k = bnd_next_slot(r->b, overlap);
        assert_int_equal(k, overlap ? t % K : 0);
        assert_int_equal(bnd_send_async(r->b, k, r->ps, r->tok[t], W * sizeof(float)), 0);
        assert_int_equal(bnd_recv_async(r->b, k, r->cs, r->got + t * W, W * sizeof(float)), 0);
    }
    float *back = dev_host_alloc(r->p, STEPS * W * sizeof(float), &e);
    assert_non_null(back);
    assert_int_equal(dev_copy_d2h_async(r->cs, back, r->got, STEPS * W * sizeof(float)), 0);
    assert_int_equal(dev_stream_sync(r->cs, &e), 0);
    assert_int_equal(dev_stream_sync(r->ps, &e), 0);
    assert_memory_equal(back, r->host, STEPS * W * sizeof(float));
    dev_host_free(r->p, back);
    char msg[512];
    if (dev_race_first(r->p, msg, sizeof msg))
        fail_msg("the checker reported: %s", msg);
}

static void test_tokens_cross_every_slot_on_one_device_and_between_two(void **state)
{
    (void)state;
    for (int to = 0; to < 2; to++)
        for (int overlap = 0; overlap < 2; overlap++) {
            rig r;
            rig_open(&r, to, K);
            assert_int_equal(bnd_slots(r.b), K);
            assert_int_equal(bnd_transport_kind(r.b), to ? BND_PEER : BND_DTOD);
            dev_set_op_hook(r.p, test_jitter_hook, (void *)&jitter);
            dev_device_counters_reset(r.src);
            run_steps(&r, overlap);
            dev_counters c;
            dev_device_counters(r.src, &c); /* the send's copy runs on the producer's stream */
            assert_int_equal(c.peer_copy_bytes, to ? (uint64_t)STEPS * W * sizeof(float) : 0);
            rig_close(&r);
        }
}

static void test_overlap_zero_keeps_slot_zero_and_one_rotates_through_k(void **state)
{
    (void)state;
    rig r;
    rig_open(&r, 1, K);
    for (int i = 0; i < 2 * K; i++) { /* overlap 0: the counter does not move the slot */
        assert_int_equal(bnd_peek_slot(r.b, 0), 0);
        assert_int_equal(bnd_next_slot(r.b, 0), 0);
    }
    rig_close(&r);
    rig_open(&r, 1, K);
    for (int i = 0; i < 2 * K + 1; i++) { /* overlap 1: 0, 1, .., K-1, 0, ..; peek tells it without taking it */
        assert_int_equal(bnd_peek_slot(r.b, 1), i % K);
        assert_int_equal(bnd_peek_slot(r.b, 1), i % K);
        assert_int_equal(bnd_next_slot(r.b, 1), i % K);
    }
    rig_close(&r);
}

static void test_bad_slots_and_sizes_are_refused(void **state)
{
    (void)state;
    rig r;
    rig_open(&r, 1, 2);
    assert_int_equal(bnd_send_async(r.b, 2, r.ps, r.tok[0], W * sizeof(float)), MEMRA_E_INVAL);
    assert_int_equal(bnd_send_async(r.b, -1, r.ps, r.tok[0], W * sizeof(float)), MEMRA_E_INVAL);
    assert_int_equal(bnd_recv_async(r.b, 0, r.cs, r.got, W * sizeof(float) + 1), MEMRA_E_INVAL);
    dev_err e = {0};
    assert_null(bnd_create(r.src, r.dst, 0, 64, &e));
    assert_int_equal(e.code, MEMRA_E_INVAL);
    assert_non_null(strstr(e.msg, "0 slots"));
    rig_close(&r);
}

static atomic_int g_consumer_done;

static void consumer_done(void *arg)
{
    (void)arg;
    atomic_store(&g_consumer_done, 1);
}

/* Holds the producer's stream until the consumer's worker has copied the slot out: the two copies then never
 * touch the slot at once for real (ordered by g_consumer_done), while no event orders them for the checker. */
static void wait_consumer(void *arg)
{
    (void)arg;
    struct timespec nap = {0, 100000};
    for (int i = 0; i < 50000 && !atomic_load(&g_consumer_done); i++)
        nanosleep(&nap, NULL);
}

/* Step 0 goes through slot 0; step 1 is sent on slot 0 again once the consumer has copied step 0 out, with the
 * ev_rx wait (the consumer's record orders the overwrite) or without it (the test hook): then nothing orders
 * the consumer's read of slot 0 before the producer's second write, and the checker says so, naming both. */
static void test_dropping_the_rx_wait_is_reported_by_the_race_checker(void **state)
{
    (void)state;
    for (int skip = 0; skip < 2; skip++) {
        rig r;
        rig_open(&r, 1, 1);
        dev_err e = {0};
        atomic_store(&g_consumer_done, 0);
        for (int t = 0; t < 2; t++)
            assert_int_equal(dev_copy_h2d_async(r.ps, r.tok[t], r.host + t * W, W * sizeof(float)), 0);
        assert_int_equal(bnd_send_async(r.b, 0, r.ps, r.tok[0], W * sizeof(float)), 0);
        assert_int_equal(bnd_recv_async(r.b, 0, r.cs, r.got, W * sizeof(float)), 0);
        assert_int_equal(dev_host_fn_async(r.cs, consumer_done, NULL), 0);
        assert_int_equal(dev_host_fn_async(r.ps, wait_consumer, NULL), 0);
        bnd_test_skip_rx_wait(r.b, skip);
        assert_int_equal(bnd_send_async(r.b, 0, r.ps, r.tok[1], W * sizeof(float)), 0);
        assert_int_equal(dev_stream_sync(r.ps, &e), 0);
        assert_int_equal(dev_stream_sync(r.cs, &e), 0);
        assert_true(atomic_load(&g_consumer_done)); /* the hold ended on the consumer, not on its bound */
        char msg[512];
        const uint64_t races = dev_race_first(r.p, msg, sizeof msg);
        if (!skip && races)
            fail_msg("with the ev_rx wait the checker reported: %s", msg);
        if (skip) {
            assert_true(races >= 1);
            assert_non_null(strstr(msg, "race: producer op"));
            assert_non_null(strstr(msg, "wrote"));
            assert_non_null(strstr(msg, "last read by consumer"));
        }
        rig_close(&r);
    }
}

/* Every combination of the five inputs: BND_NCCL exactly when both stages are on GPUs, both builds have NCCL, the
 * GPUs differ and the door is auto; otherwise BND_MPI with the reason of the first condition that fails, in the
 * order door, GPUs, build, one GPU. */
static void test_a_remote_boundary_takes_nccl_only_between_two_gpus_with_nccl_and_the_door_open(void **state)
{
    (void)state;
    int nccl = 0;
    for (int bits = 0; bits < 32; bits++) {
        const int pg = bits & 1, cg = bits >> 1 & 1, built = bits >> 2 & 1, same = bits >> 3 & 1, off = bits >> 4 & 1;
        const char *why = NULL;
        const bnd_transport t = bnd_pick_remote(pg, cg, built, same, off, &why);
        assert_non_null(why);
        const char *want = off ? "MEMRA_PP_NCCL=0"
                           : !pg || !cg ? "not on a GPU"
                           : !built ? "NCCL is not built on both ranks"
                           : same ? "NCCL refuses two ranks on one GPU"
                                  : "two GPUs, NCCL built on both ranks, MEMRA_PP_NCCL=auto";
        if (!strstr(why, want))
            fail_msg("producer gpu %d, consumer gpu %d, built %d, same %d, off %d: '%s' lacks '%s'", pg, cg, built,
                     same, off, why, want);
        assert_int_equal(t, pg && cg && built && !same && !off ? BND_NCCL : BND_MPI);
        nccl += t == BND_NCCL;
    }
    assert_int_equal(nccl, 1); /* liveness: the one combination that takes NCCL was reached */
    assert_int_equal(bnd_pick_remote(1, 1, 1, 0, 0, NULL), BND_NCCL); /* why is optional */
}

/* An NCCL half needs a GPU: on the CPU backend bnd_create_nccl refuses (a build without NCCL says so first), and
 * the wire accessors answer NULL for kinds they do not serve. */
static void test_an_nccl_half_on_a_cpu_device_is_refused(void **state)
{
    (void)state;
    rig r;
    rig_open(&r, 1, 2);
    uint8_t id[BND_NCCL_ID_BYTES] = {0};
    dev_err e = {0};
    assert_null(bnd_create_nccl(r.src, 1, id, 2, 64, &e));
    assert_true(e.code == MEMRA_E_UNSUPPORTED || e.code == MEMRA_E_INVAL);
    if (bnd_nccl_built() == 0)
        assert_non_null(strstr(e.msg, "no NCCL"));
    assert_null(bnd_wire_ready(r.b, 0)); /* a local boundary: no wire */
    assert_int_equal(bnd_abort(r.b), 0);
    bnd_boundary *m = bnd_create_mpi(r.src, 1, 2, 64, &e);
    assert_non_null(m);
    assert_ptr_equal(bnd_wire_ready(m, 1), bnd_mpi_ev_tx(m, 1)); /* BND_MPI sends once the d2h copy is done */
    assert_null(bnd_wire_ready(m, 2));
    bnd_destroy(m);
    rig_close(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tokens_cross_every_slot_on_one_device_and_between_two),
        cmocka_unit_test(test_overlap_zero_keeps_slot_zero_and_one_rotates_through_k),
        cmocka_unit_test(test_bad_slots_and_sizes_are_refused),
        cmocka_unit_test(test_dropping_the_rx_wait_is_reported_by_the_race_checker),
        cmocka_unit_test(test_a_remote_boundary_takes_nccl_only_between_two_gpus_with_nccl_and_the_door_open),
        cmocka_unit_test(test_an_nccl_half_on_a_cpu_device_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
