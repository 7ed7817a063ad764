/* A 3-stage pipeline on three emulated devices, shaped like the runtime's (docs/architecture.md "Credits"): K boundary slots
 * in ONE allocation per boundary on the consumer's device, ev_tx[k] (slot filled) / ev_rx[k] (slot
 * consumed) events, peer copies across devices, random worker delays from the op hook. With both events
 * the results are exact and the checker reports nothing; without the ev_rx wait (producer overwrites a
 * slot the consumer may still read) the checker reports it on every run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "device/dev.h"
#include "support/jitter.h"

enum { STAGES = 3, K = 2, W = 64, STEPS = 48, RUNS = 8 };

static const test_jitter jitter = { 1, 4, 100 }; /* sleep probability num/den, max us */

/* Kernels only touch memory when g_touch (the broken variant must not race for real: TSan). Written by
 * the main thread while every stream is idle. */
static int g_touch = 1;

typedef struct step_args { float *dst; const float *src; float add; } step_args;

/* dst (W,) = src ? src + 1 : add */
static void k_step(void *a)
{
    step_args *s = a;
    if (!g_touch)
        return;
    for (int i = 0; i < W; i++)
        s->dst[i] = s->src ? s->src[i] + 1.0f : s->add + (float)i;
}

static int launch_step(dev_stream *s, float *dst, const float *src, float add)
{
    step_args a = { dst, src, add };
    dev_access acc[2] = { { dst, W * sizeof(float), DEV_WRITE }, { src, W * sizeof(float), DEV_READ } };
    return dev_launch_cpu_async(s, src ? "layer" : "embed", k_step, &a, sizeof a, acc, src ? 2 : 1);
}

typedef struct pipe {
    dev_platform *p;
    dev_device *d[STAGES];
    dev_stream *s[STAGES];
    float *act[STAGES];        /* each stage's activation (its own device) */
    float *slots[STAGES - 1];  /* boundary b: K slots of W floats on stage b+1's device, one allocation */
    dev_event *tx[STAGES - 1][K], *rx[STAGES - 1][K];
    float *out;                /* STEPS x W on the last device */
} pipe;

static void pipe_open(pipe *pp)
{
    dev_err err = { 0, "" };
    pp->p = dev_platform_open(DEV_KIND_CPU, STAGES, &err);
    assert_non_null(pp->p);
    for (int i = 0; i < STAGES; i++) {
        pp->d[i] = dev_platform_device(pp->p, i);
        char name[16];
        snprintf(name, sizeof name, "stage%d", i);
        pp->s[i] = dev_stream_create(pp->d[i], name, &err);
        pp->act[i] = dev_malloc(pp->d[i], W * sizeof(float), &err);
        assert_non_null(pp->s[i]);
        assert_non_null(pp->act[i]);
    }
    for (int b = 0; b < STAGES - 1; b++) {
        pp->slots[b] = dev_malloc(pp->d[b + 1], K * W * sizeof(float), &err);
        for (int k = 0; k < K; k++) {
            pp->tx[b][k] = dev_event_create(pp->d[b], &err);
            pp->rx[b][k] = dev_event_create(pp->d[b + 1], &err);
        }
    }
    pp->out = dev_malloc(pp->d[STAGES - 1], STEPS * W * sizeof(float), &err);
    assert_non_null(pp->out);
    dev_set_op_hook(pp->p, test_jitter_hook, (void *)&jitter);
}

static void pipe_close(pipe *pp)
{
    for (int i = 0; i < STAGES; i++)
        dev_stream_destroy(pp->s[i]);
    dev_set_op_hook(pp->p, NULL, NULL);
    for (int b = 0; b < STAGES - 1; b++) {
        dev_free(pp->d[b + 1], pp->slots[b]);
        for (int k = 0; k < K; k++) {
            dev_event_destroy(pp->tx[b][k]);
            dev_event_destroy(pp->rx[b][k]);
        }
    }
    for (int i = 0; i < STAGES; i++)
        dev_free(pp->d[i], pp->act[i]);
    dev_free(pp->d[STAGES - 1], pp->out);
    dev_platform_close(pp->p);
}

/* Enqueue every step of every stage (one host thread, step-major, as the actors' messages would order it). */
static void pipe_run(pipe *pp, int wait_rx)
{
    for (int t = 0; t < STEPS; t++) {
        int k = t % K;
        assert_int_equal(launch_step(pp->s[0], pp->act[0], NULL, (float)t), 0);
        for (int st = 0; st < STAGES; st++) {
            if (st > 0) {
                int b = st - 1;
                float *slot = pp->slots[b] + k * W;
                assert_int_equal(dev_stream_wait_event_async(pp->s[st], pp->tx[b][k]), 0); /* slot filled */
                float *dst = st == STAGES - 1 ? pp->out + t * W : pp->act[st];
                assert_int_equal(launch_step(pp->s[st], dst, slot, 0), 0);
                assert_int_equal(dev_event_record_async(pp->rx[b][k], pp->s[st]), 0); /* slot consumed */
            }
            if (st < STAGES - 1) {
                float *slot = pp->slots[st] + k * W;
                if (wait_rx) /* slot free: the consumer has read step t-K's data */
                    assert_int_equal(dev_stream_wait_event_async(pp->s[st], pp->rx[st][k]), 0);
                assert_int_equal(dev_copy_peer_async(pp->s[st], slot, pp->d[st + 1], pp->act[st], pp->d[st],
                                                     W * sizeof(float)), 0);
                assert_int_equal(dev_event_record_async(pp->tx[st][k], pp->s[st]), 0);
            }
        }
    }
    dev_err err = { 0, "" };
    for (int i = 0; i < STAGES; i++)
        assert_int_equal(dev_stream_sync(pp->s[i], &err), 0);
}

static void test_pipeline_with_slot_events_is_exact_and_race_free(void **st)
{
    for (int run = 0; run < RUNS; run++) {
        pipe pp;
        pipe_open(&pp);
        pipe_run(&pp, 1);
        char msg[512];
        uint64_t n = dev_race_first(pp.p, msg, sizeof msg);
        if (n)
            fail_msg("%llu races: %s", (unsigned long long)n, msg);
        for (int t = 0; t < STEPS; t++)
            for (int i = 0; i < W; i++)
                assert_true(pp.out[t * W + i] == (float)t + (float)i + (float)(STAGES - 1));
        dev_counters c;
        dev_device_counters(pp.d[1], &c);
        assert_int_equal(c.peer_copy_bytes, (uint64_t)STEPS * W * sizeof(float));
        assert_int_equal(c.remote_read_bytes, 0);
        pipe_close(&pp);
    }
}

static void test_pipeline_without_slot_free_wait_is_reported_every_run(void **st)
{
    g_touch = 0;
    for (int run = 0; run < RUNS; run++) {
        pipe pp;
        pipe_open(&pp);
        pipe_run(&pp, 0);
        char msg[512];
        assert_true(dev_race_first(pp.p, msg, sizeof msg) >= 1);
        assert_non_null(strstr(msg, "copy_peer"));
        assert_non_null(strstr(msg, "layer"));
        pipe_close(&pp);
    }
    g_touch = 1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pipeline_with_slot_events_is_exact_and_race_free),
        cmocka_unit_test(test_pipeline_without_slot_free_wait_is_reported_every_run),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
