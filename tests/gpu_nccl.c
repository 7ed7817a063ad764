/* The NCCL boundary transport (transport/bnd_nccl.h) on CUDA GPUs. One GPU: a one-rank communicator hops slot
 * bytes to itself (send on a producer stream, receive on a consumer stream, in one group): every size from 1
 * byte to 4 MiB arrives exactly, slots rotate with many hops in flight and a third stream ordered by ev_rx[k]
 * reads them, and bad ids, ranks, slots, sizes and calls are refused with a clear message (two ranks on one GPU
 * by NCCL itself). Two GPUs: a real two-rank pair, one thread per side, with host credits and tokens as the
 * runtime's control channel carries them, moves rotating slots from one GPU's stream to the other's.
 * Exits 77 (skipped) with a reason when the build has no NCCL or no GPU is visible.
 * Benchmark: `gpu_nccl --bench` (or GPU_NCCL_BENCH=1) times one slot hop through NCCL against the d2d
 * boundary (transport/boundary.h) on GPU 0, per hop alone (enqueue + sync) and back to back; with two GPUs
 * also a two-rank pair against the peer boundary, one thread per side with host credits (docs/bench). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <pthread.h>
#include <time.h>
#include <cmocka.h>

#include "device/dev.h"
#include "transport/boundary.h"
#include "transport/bnd_nccl.h"

static dev_platform *g_p;
enum { K = 3, MAXB = 4 << 20 };

/* Where this process loaded libnccl from (its mapping), for the log. */
static void print_nccl_origin(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[1024], where[1024] = "(libnccl not mapped)";
    while (f && fgets(line, sizeof line, f)) {
        char *p = strstr(line, "/");
        if (p && strstr(p, "libnccl")) {
            snprintf(where, sizeof where, "%s", p);
            where[strcspn(where, "\n")] = 0;
            break;
        }
    }
    if (f)
        fclose(f);
    int v = 0;
    dev_err err = {0, ""};
    bnd_nccl_version(&v, &err);
    printf("NCCL %d.%d.%d from %s\n", v / 10000, v / 100 % 100, v % 100, where);
}

static uint8_t pattern(size_t i, uint32_t seed) { return (uint8_t)((i * 2654435761u + seed * 40503u) >> 13); }

static bnd_nccl *self_comm(dev_device *d, int slots, size_t slot_bytes)
{
    uint8_t id[BND_NCCL_ID_BYTES];
    dev_err err = {0, ""};
    if (bnd_nccl_unique_id(id, &err) != 0)
        fail_msg("bnd_nccl_unique_id: %s", err.msg);
    bnd_nccl *b = bnd_nccl_create(d, id, 0, 0, slots, slot_bytes, &err);
    if (!b)
        fail_msg("bnd_nccl_create (one rank): %s", err.msg);
    return b;
}

static void test_nccl_hop_moves_every_size_exactly(void **st)
{
    dev_device *d = dev_platform_device(g_p, 0);
    dev_err err = {0, ""};
    bnd_nccl *b = self_comm(d, K, MAXB);
    dev_stream *prod = dev_stream_create(d, "producer", &err), *cons = dev_stream_create(d, "consumer", &err);
    uint8_t *src = dev_malloc(d, MAXB, &err), *dst = dev_malloc(d, MAXB + 64, &err);
    uint8_t *h = dev_host_alloc(g_p, MAXB + 64, &err), *out = dev_host_alloc(g_p, MAXB + 64, &err);
    assert_non_null(prod);
    assert_non_null(cons);
    assert_non_null(src);
    assert_non_null(dst);
    assert_non_null(h);
    assert_non_null(out);
    const size_t sizes[] = {1, 2, 3, 7, 255, 4096, 16392, 65539, 131136, 1 << 20, (3 << 20) + 5, MAXB};
    const int n = (int)(sizeof sizes / sizeof sizes[0]);
    int checked = 0;
    for (int i = 0; i < n; i++) {
        const size_t sz = sizes[i];
        for (size_t j = 0; j < sz; j++)
            h[j] = pattern(j, (uint32_t)i + 1);
        memset(h + sz, 0xA5, 64); /* sentinel: nothing past the message may change */
        assert_int_equal(dev_copy_h2d_async(prod, src, h, sz), 0);
        assert_int_equal(dev_copy_h2d_async(cons, dst + sz, h + sz, 64), 0);
        int k = i % K;
        if (bnd_nccl_hop_async(b, k, prod, src, cons, dst, sz, &err) != 0)
            fail_msg("hop of %zu B: %s", sz, err.msg);
        /* ordered by cons: the copy follows the receive on the consumer's own stream */
        assert_int_equal(dev_copy_d2h_async(cons, out, dst, sz + 64), 0);
        assert_int_equal(dev_stream_sync(cons, &err), 0);
        assert_int_equal(dev_stream_sync(prod, &err), 0); /* the producer passes ev_tx[k] on its own time */
        assert_int_equal(dev_event_query(bnd_nccl_ev_tx(b, k)), 1);
        assert_int_equal(dev_event_query(bnd_nccl_ev_rx(b, k)), 1);
        if (memcmp(out, h, sz + 64) != 0) {
            size_t j = 0;
            while (out[j] == h[j])
                j++;
            fail_msg("%zu B hop: byte %zu is 0x%02x, sent 0x%02x%s", sz, j, out[j], h[j],
                     j >= sz ? " (past the message: the sentinel changed)" : "");
        }
        checked++;
    }
    assert_int_equal(checked, n); /* liveness: every size went through and was compared */
    assert_int_equal(bnd_nccl_check(b, &err), 0);
    dev_stream_destroy(prod);
    dev_stream_destroy(cons);
    bnd_nccl_destroy(b);
    dev_free(d, src);
    dev_free(d, dst);
    dev_host_free(g_p, h);
    dev_host_free(g_p, out);
}

/* Many hops in flight at once, slots rotating through K: the host enqueues everything, then a reader stream
 * that waits only ev_rx[k] of each hop copies each token out; nothing syncs until the end. */
static void test_nccl_slots_rotate_with_hops_in_flight(void **st)
{
    dev_device *d = dev_platform_device(g_p, 0);
    dev_err err = {0, ""};
    enum { T = 24, B = 16392 };
    bnd_nccl *b = self_comm(d, K, B);
    dev_stream *prod = dev_stream_create(d, "producer", &err), *cons = dev_stream_create(d, "consumer", &err),
               *rd = dev_stream_create(d, "reader", &err);
    uint8_t *src = dev_malloc(d, (size_t)T * B, &err), *dst = dev_malloc(d, (size_t)T * B, &err);
    uint8_t *h = dev_host_alloc(g_p, (size_t)T * B, &err), *out = dev_host_alloc(g_p, (size_t)T * B, &err);
    assert_non_null(rd);
    assert_non_null(dst);
    assert_non_null(out);
    for (size_t j = 0; j < (size_t)T * B; j++)
        h[j] = pattern(j, 77);
    memset(out, 0, (size_t)T * B);
    int hops = 0;
    for (int t = 0; t < T; t++) {
        const size_t off = (size_t)t * B, sz = B - (size_t)t * 100; /* every token its own size */
        const int k = t % K;
        assert_int_equal(dev_copy_h2d_async(prod, src + off, h + off, sz), 0);
        if (bnd_nccl_hop_async(b, k, prod, src + off, cons, dst + off, sz, &err) != 0)
            fail_msg("hop %d (slot %d): %s", t, k, err.msg);
        /* ordered by ev_rx[k]: recorded on the consumer after this token's receive */
        assert_int_equal(dev_stream_wait_event_async(rd, bnd_nccl_ev_rx(b, k)), 0);
        assert_int_equal(dev_copy_d2h_async(rd, out + off, dst + off, sz), 0);
        hops++;
    }
    assert_int_equal(dev_stream_sync(rd, &err), 0);
    for (int t = 0; t < T; t++) {
        const size_t off = (size_t)t * B, sz = B - (size_t)t * 100;
        if (memcmp(out + off, h + off, sz) != 0)
            fail_msg("token %d (slot %d, %zu B) differs from what was sent", t, t % K, sz);
    }
    assert_int_equal(hops, T);
    assert_int_equal(dev_stream_sync(prod, &err), 0);
    assert_int_equal(dev_stream_sync(cons, &err), 0);
    dev_stream_destroy(prod);
    dev_stream_destroy(cons);
    dev_stream_destroy(rd);
    bnd_nccl_destroy(b);
    dev_free(d, src);
    dev_free(d, dst);
    dev_host_free(g_p, h);
    dev_host_free(g_p, out);
}

static void expect_refusal(int rc, const dev_err *err, int code, const char *needle)
{
    if (rc != code || !strstr(err->msg, needle))
        fail_msg("expected %s with \"%s\", got %d: \"%s\"", memra_status_str(code), needle, rc, err->msg);
    printf("  refused as expected: %s\n", err->msg);
}

static void test_nccl_create_refuses_bad_ids_and_ranks(void **st)
{
    dev_device *d = dev_platform_device(g_p, 0);
    uint8_t id[BND_NCCL_ID_BYTES], bad[BND_NCCL_ID_BYTES];
    dev_err err = {0, ""};
    assert_int_equal(bnd_nccl_unique_id(id, &err), 0);
    for (int i = 0; i < BND_NCCL_ID_BYTES; i++)
        bad[i] = (uint8_t)(i * 37 + 11);
    dev_err e1 = {0, ""}, e2 = {0, ""}, e3 = {0, ""}, e4 = {0, ""}, e5 = {0, ""}, e6 = {0, ""}, e7 = {0, ""};
    expect_refusal(bnd_nccl_create(d, bad, 0, 1, K, 64, &e1) ? 0 : e1.code, &e1, MEMRA_E_INVAL,
                   "not made by bnd_nccl_unique_id");
    memcpy(bad, id, sizeof id);
    bad[BND_NCCL_ID_BYTES - 5] ^= 0x40; /* one bit of NCCL's part flipped on the way */
    expect_refusal(bnd_nccl_create(d, bad, 0, 1, K, 64, &e2) ? 0 : e2.code, &e2, MEMRA_E_INVAL, "checksum");
    expect_refusal(bnd_nccl_create(d, id, 2, 0, K, 64, &e3) ? 0 : e3.code, &e3, MEMRA_E_INVAL, "ranks are 0 and 1");
    expect_refusal(bnd_nccl_create(d, id, 1, 1, K, 64, &e4) ? 0 : e4.code, &e4, MEMRA_E_INVAL, "ranks are 0 and 1");
    expect_refusal(bnd_nccl_create(d, id, 0, 1, 0, 64, &e5) ? 0 : e5.code, &e5, MEMRA_E_INVAL, "need >= 1 slot");
    expect_refusal(bnd_nccl_create(d, NULL, 0, 1, K, 64, &e6) ? 0 : e6.code, &e6, MEMRA_E_INVAL, "no id given");
    dev_platform *cpu = dev_platform_open(DEV_KIND_CPU, 1, &err);
    assert_non_null(cpu);
    expect_refusal(bnd_nccl_create(dev_platform_device(cpu, 0), id, 0, 0, K, 64, &e7) ? 0 : e7.code, &e7,
                   MEMRA_E_UNSUPPORTED, "not a CUDA device");
    dev_platform_close(cpu);

    /* a live one-rank communicator refuses what it cannot serve */
    bnd_nccl *b = self_comm(d, K, 64);
    dev_stream *s = dev_stream_create(d, "s", &err);
    uint8_t *buf = dev_malloc(d, 128, &err);
    dev_err f1 = {0, ""}, f2 = {0, ""}, f3 = {0, ""}, f4 = {0, ""}, f5 = {0, ""};
    expect_refusal(bnd_nccl_send_async(b, 0, s, buf, 8, &f1), &f1, MEMRA_E_INVAL, "bnd_nccl_hop_async");
    expect_refusal(bnd_nccl_recv_async(b, 0, s, buf, 8, &f2), &f2, MEMRA_E_INVAL, "bnd_nccl_hop_async");
    expect_refusal(bnd_nccl_hop_async(b, K, s, buf, s, buf + 64, 8, &f3), &f3, MEMRA_E_INVAL, "slot 3 of 3");
    expect_refusal(bnd_nccl_hop_async(b, 0, s, buf, s, buf + 64, 65, &f4), &f4, MEMRA_E_INVAL, "65 bytes into a slot of 64");
    assert_int_equal(bnd_nccl_abort(b), 0);
    expect_refusal(bnd_nccl_hop_async(b, 0, s, buf, s, buf + 64, 8, &f5), &f5, MEMRA_E_STATE, "aborted");
    assert_int_equal(dev_stream_sync(s, &err), 0);
    dev_stream_destroy(s);
    dev_free(d, buf);
    bnd_nccl_destroy(b);
}

/* ---- two threads, one per side of a pair ---- */

typedef struct side {
    dev_device *dev;
    const uint8_t *id;
    int rank, peer;
    bnd_nccl *b;      /* set by the thread on success */
    dev_err err;
    int done;         /* the thread returned (guarded by pair.m) */
    struct pair *pr;
} side;

typedef struct pair {
    pthread_mutex_t m;
    pthread_cond_t c;
    side s[2];
    /* host control channel between the two sides, as the runtime's (MPI) carries it */
    int credit[K];    /* producer holds credit k */
    int token[64];    /* token t's slot, -1 until the producer posts it */
    int n_tokens;
} pair;

static void *create_side(void *arg)
{
    side *sd = arg;
    sd->b = bnd_nccl_create(sd->dev, sd->id, sd->rank, sd->peer, K, MAXB, &sd->err);
    pthread_mutex_lock(&sd->pr->m);
    sd->done = 1;
    pthread_cond_broadcast(&sd->pr->c);
    pthread_mutex_unlock(&sd->pr->m);
    return NULL;
}

/* Start both sides' create on their own thread; wait at most secs for both to return. 0 = both returned. */
static int create_pair(pair *pr, dev_device *d0, dev_device *d1, const uint8_t *id, int secs)
{
    pthread_t th[2];
    dev_device *devs[2] = {d0, d1};
    for (int i = 0; i < 2; i++) {
        pr->s[i] = (side){.dev = devs[i], .id = id, .rank = i, .peer = 1 - i, .pr = pr};
        pthread_create(&th[i], NULL, create_side, &pr->s[i]);
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += secs;
    int rc = 0;
    pthread_mutex_lock(&pr->m);
    while (!(pr->s[0].done && pr->s[1].done) && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&pr->c, &pr->m, &until);
    const int both = pr->s[0].done && pr->s[1].done;
    pthread_mutex_unlock(&pr->m);
    if (!both)
        return -1; /* the threads stay blocked in NCCL: the caller fails the test and the process ends */
    pthread_join(th[0], NULL);
    pthread_join(th[1], NULL);
    return 0;
}

static void test_nccl_two_ranks_on_one_gpu_are_refused_by_nccl(void **st)
{
    dev_device *d = dev_platform_device(g_p, 0);
    uint8_t id[BND_NCCL_ID_BYTES];
    dev_err err = {0, ""};
    assert_int_equal(bnd_nccl_unique_id(id, &err), 0);
    pair pr = {.m = PTHREAD_MUTEX_INITIALIZER, .c = PTHREAD_COND_INITIALIZER};
    if (create_pair(&pr, d, d, id, 120) != 0)
        fail_msg("two ranks on %s: bnd_nccl_create did not return within 120 s", dev_device_name(d));
    for (int i = 0; i < 2; i++) {
        if (pr.s[i].b)
            fail_msg("rank %d of a pair on one GPU was accepted (NCCL refuses two ranks on one device)", i);
        expect_refusal(pr.s[i].err.code, &pr.s[i].err, MEMRA_E_DEVICE, "ncclCommInitRank");
    }
}

typedef struct run_arg {
    pair *pr;
    int T;
    int checked;      /* consumer: tokens compared equal */
    char failure[512];
} run_arg;

static size_t tok_size(int t) { return t % 4 == 3 ? (size_t)(1 << 20) + (size_t)t : 16392 + (size_t)t * 8; }

static void *producer_main(void *arg)
{
    run_arg *ra = arg;
    pair *pr = ra->pr;
    side *sd = &pr->s[0];
    dev_err err = {0, ""};
    dev_stream *s = dev_stream_create(sd->dev, "stage0", &err);
    uint8_t *frame = dev_malloc(sd->dev, MAXB, &err), *h = dev_host_alloc(g_p, MAXB, &err);
    for (int t = 0; t < ra->T && !ra->failure[0]; t++) {
        const int k = t % K;
        pthread_mutex_lock(&pr->m);
        while (!pr->credit[k])
            pthread_cond_wait(&pr->c, &pr->m);
        pr->credit[k] = 0;
        pthread_mutex_unlock(&pr->m);
        /* ordered by s: the host writes h only once the previous token's upload ran (sync below) */
        for (size_t j = 0; j < tok_size(t); j++)
            h[j] = pattern(j, (uint32_t)t + 1000);
        if (dev_copy_h2d_async(s, frame, h, tok_size(t)) != 0 ||
            bnd_nccl_send_async(sd->b, k, s, frame, tok_size(t), &err) != 0) {
            snprintf(ra->failure, sizeof ra->failure, "producer, token %d: %s", t, err.msg);
            break;
        }
        pthread_mutex_lock(&pr->m); /* TOKEN(k): the send is enqueued */
        pr->token[t] = k;
        pr->n_tokens = t + 1;
        pthread_cond_broadcast(&pr->c);
        pthread_mutex_unlock(&pr->m);
        if (dev_event_sync(bnd_nccl_ev_tx(sd->b, k), &err) != 0) { /* h is reused: its upload must be done */
            snprintf(ra->failure, sizeof ra->failure, "producer, token %d: %s", t, err.msg);
            break;
        }
    }
    dev_stream_sync(s, &err);
    dev_stream_destroy(s);
    dev_free(sd->dev, frame);
    dev_host_free(g_p, h);
    return NULL;
}

static void *consumer_main(void *arg)
{
    run_arg *ra = arg;
    pair *pr = ra->pr;
    side *sd = &pr->s[1];
    dev_err err = {0, ""};
    dev_stream *s = dev_stream_create(sd->dev, "stage1", &err);
    uint8_t *frame = dev_malloc(sd->dev, MAXB, &err), *out = dev_host_alloc(g_p, MAXB, &err),
            *want = malloc(MAXB);
    for (int t = 0; t < ra->T && !ra->failure[0]; t++) {
        pthread_mutex_lock(&pr->m);
        while (pr->n_tokens <= t)
            pthread_cond_wait(&pr->c, &pr->m);
        const int k = pr->token[t];
        pthread_mutex_unlock(&pr->m);
        if (bnd_nccl_recv_async(sd->b, k, s, frame, tok_size(t), &err) != 0) {
            snprintf(ra->failure, sizeof ra->failure, "consumer, token %d: %s", t, err.msg);
            break;
        }
        pthread_mutex_lock(&pr->m); /* credit: k goes back once our receive of it (and ev_rx[k]) is enqueued */
        pr->credit[k] = 1;
        pthread_cond_broadcast(&pr->c);
        pthread_mutex_unlock(&pr->m);
        /* ordered by s: the read-back follows the receive on the consumer's stream */
        if (dev_copy_d2h_async(s, out, frame, tok_size(t)) != 0 || dev_stream_sync(s, &err) != 0) {
            snprintf(ra->failure, sizeof ra->failure, "consumer, token %d: %s", t, err.msg);
            break;
        }
        for (size_t j = 0; j < tok_size(t); j++)
            want[j] = pattern(j, (uint32_t)t + 1000);
        if (memcmp(out, want, tok_size(t)) != 0) {
            snprintf(ra->failure, sizeof ra->failure, "token %d (slot %d, %zu B) differs from what was sent", t, k,
                     tok_size(t));
            break;
        }
        ra->checked++;
    }
    dev_stream_destroy(s);
    dev_free(sd->dev, frame);
    dev_host_free(g_p, out);
    free(want);
    return NULL;
}

static void test_nccl_pair_on_two_gpus_moves_rotating_slots(void **st)
{
    if (dev_platform_count(g_p) < 2) {
        printf("  skipped: one GPU visible (a two-rank pair needs two GPUs)\n");
        skip();
    }
    uint8_t id[BND_NCCL_ID_BYTES];
    dev_err err = {0, ""};
    assert_int_equal(bnd_nccl_unique_id(id, &err), 0);
    pair pr = {.m = PTHREAD_MUTEX_INITIALIZER, .c = PTHREAD_COND_INITIALIZER};
    if (create_pair(&pr, dev_platform_device(g_p, 0), dev_platform_device(g_p, 1), id, 120) != 0)
        fail_msg("a pair on two GPUs: bnd_nccl_create did not return within 120 s");
    for (int i = 0; i < 2; i++)
        if (!pr.s[i].b)
            fail_msg("rank %d: %s", i, pr.s[i].err.msg);
    for (int k = 0; k < K; k++)
        pr.credit[k] = 1;
    run_arg ra = {.pr = &pr, .T = 40};
    pthread_t tp, tc;
    pthread_create(&tp, NULL, producer_main, &ra);
    pthread_create(&tc, NULL, consumer_main, &ra);
    pthread_join(tc, NULL);
    if (ra.failure[0]) { /* the producer may wait a credit that never comes: free it */
        pthread_mutex_lock(&pr.m);
        for (int k = 0; k < K; k++)
            pr.credit[k] = 1;
        pthread_cond_broadcast(&pr.c);
        pthread_mutex_unlock(&pr.m);
    }
    pthread_join(tp, NULL);
    if (ra.failure[0])
        fail_msg("%s", ra.failure);
    assert_int_equal(ra.checked, ra.T); /* liveness: every token compared */
    for (int i = 0; i < 2; i++) {
        assert_int_equal(bnd_nccl_check(pr.s[i].b, &err), 0);
        bnd_nccl_destroy(pr.s[i].b);
    }
}

/* ---- benchmark: one slot hop through NCCL (one rank, GPU 0) vs the d2d boundary ---- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* hop(i) enqueues hop i; returns 0. Times N single hops (enqueue + consumer sync; median) and N back to back
 * (one sync; wall / N), in microseconds. */
typedef int (*hop_fn)(void *ctx, int i);

static int bench_one(hop_fn hop, void *ctx, dev_stream *cons, int n, double *alone_us, double *b2b_us)
{
    dev_err err = {0, ""};
    double *t = malloc((size_t)n * sizeof *t);
    for (int i = 0; i < 20; i++) /* warm-up */
        if (hop(ctx, i) != 0)
            goto fail;
    if (dev_stream_sync(cons, &err) != 0)
        goto fail;
    for (int i = 0; i < n; i++) {
        double t0 = now_s();
        if (hop(ctx, i) != 0 || dev_stream_sync(cons, &err) != 0)
            goto fail;
        t[i] = now_s() - t0;
    }
    qsort(t, (size_t)n, sizeof *t, cmp_d);
    *alone_us = t[n / 2] * 1e6;
    double t0 = now_s();
    for (int i = 0; i < n; i++)
        if (hop(ctx, i) != 0)
            goto fail;
    if (dev_stream_sync(cons, &err) != 0)
        goto fail;
    *b2b_us = (now_s() - t0) * 1e6 / n;
    free(t);
    return 0;
fail:
    if (err.code)
        fprintf(stderr, "bench: %s\n", err.msg);
    free(t);
    return -1;
}

typedef struct bench_ctx {
    bnd_boundary *bd;
    bnd_nccl *bn;
    dev_stream *prod, *cons;
    void *src, *dst;
    size_t bytes;
} bench_ctx;

static int hop_dtod(void *c, int i)
{
    bench_ctx *x = c;
    int k = i % K;
    /* the boundary's own order: send waits ev_rx[k], receive waits ev_tx[k] (one thread enqueues both) */
    return bnd_send_async(x->bd, k, x->prod, x->src, x->bytes) || bnd_recv_async(x->bd, k, x->cons, x->dst, x->bytes);
}

static int hop_nccl(void *c, int i)
{
    bench_ctx *x = c;
    dev_err err = {0, ""};
    int r = bnd_nccl_hop_async(x->bn, i % K, x->prod, x->src, x->cons, x->dst, x->bytes, &err);
    if (r)
        fprintf(stderr, "%s\n", err.msg);
    return r;
}

/* Two GPUs: the same hop between two threads, each side on its own GPU and stream, with credits and tokens
 * between the threads as the host channel carries them: a two-rank NCCL pair against the peer boundary. */
typedef struct pbench {
    pthread_mutex_t m;
    pthread_cond_t c;
    int credit[K];        /* the producer holds credit k */
    int n_tokens;         /* tokens the producer has posted */
    int T, failed;
    size_t bytes;
    bnd_boundary *bd;     /* the peer boundary, or NULL: NCCL */
    bnd_nccl *bp, *bc;    /* the pair's producer and consumer sides */
    dev_stream *sp, *sc;
    void *src, *dst;
} pbench;

static void *pb_producer(void *arg)
{
    pbench *x = arg;
    dev_err err = {0, ""};
    for (int t = 0; t < x->T; t++) {
        const int k = t % K;
        pthread_mutex_lock(&x->m);
        while (!x->credit[k] && !x->failed)
            pthread_cond_wait(&x->c, &x->m);
        x->credit[k] = 0;
        const int failed = x->failed;
        pthread_mutex_unlock(&x->m);
        if (failed)
            return NULL;
        int r = x->bd ? bnd_send_async(x->bd, k, x->sp, x->src, x->bytes)
                      : bnd_nccl_send_async(x->bp, k, x->sp, x->src, x->bytes, &err);
        pthread_mutex_lock(&x->m); /* TOKEN(k): the send is enqueued */
        x->failed |= r != 0;
        x->n_tokens = t + 1;
        pthread_cond_broadcast(&x->c);
        pthread_mutex_unlock(&x->m);
        if (r) {
            fprintf(stderr, "bench producer: %s\n", err.msg);
            return NULL;
        }
    }
    return NULL;
}

static void *pb_consumer(void *arg)
{
    pbench *x = arg;
    dev_err err = {0, ""};
    for (int t = 0; t < x->T; t++) {
        const int k = t % K;
        pthread_mutex_lock(&x->m);
        while (x->n_tokens <= t && !x->failed)
            pthread_cond_wait(&x->c, &x->m);
        const int failed = x->failed;
        pthread_mutex_unlock(&x->m);
        if (failed)
            return NULL;
        int r = x->bd ? bnd_recv_async(x->bd, k, x->sc, x->dst, x->bytes)
                      : bnd_nccl_recv_async(x->bc, k, x->sc, x->dst, x->bytes, &err);
        pthread_mutex_lock(&x->m); /* credit: k goes back once our receive (and ev_rx[k]) is enqueued */
        x->failed |= r != 0;
        x->credit[k] = 1;
        pthread_cond_broadcast(&x->c);
        pthread_mutex_unlock(&x->m);
        if (r) {
            fprintf(stderr, "bench consumer: %s\n", err.msg);
            return NULL;
        }
    }
    if (dev_stream_sync(x->sc, &err) != 0) {
        fprintf(stderr, "bench consumer: %s\n", err.msg);
        pthread_mutex_lock(&x->m);
        x->failed = 1;
        pthread_mutex_unlock(&x->m);
    }
    return NULL;
}

/* T hops back to back between the two threads; microseconds per hop, or < 0 on failure. */
static double pb_run(pbench *x, int T)
{
    x->T = T;
    x->n_tokens = 0;
    x->failed = 0;
    for (int k = 0; k < K; k++)
        x->credit[k] = 1;
    pthread_t tp, tc;
    double t0 = now_s();
    pthread_create(&tp, NULL, pb_producer, x);
    pthread_create(&tc, NULL, pb_consumer, x);
    pthread_join(tp, NULL);
    pthread_join(tc, NULL);
    double us = (now_s() - t0) * 1e6 / T;
    dev_err err = {0, ""};
    if (dev_stream_sync(x->sp, &err) != 0 || x->failed)
        return -1;
    return us;
}

static int run_bench_pair(const size_t *sizes, int n_sizes, int T)
{
    dev_device *d0 = dev_platform_device(g_p, 0), *d1 = dev_platform_device(g_p, 1);
    dev_err err = {0, ""};
    pbench x = {.m = PTHREAD_MUTEX_INITIALIZER, .c = PTHREAD_COND_INITIALIZER};
    uint8_t id[BND_NCCL_ID_BYTES];
    pair pr = {.m = PTHREAD_MUTEX_INITIALIZER, .c = PTHREAD_COND_INITIALIZER};
    if (dev_peer_grant(d1, d0, &err) != 0 || bnd_nccl_unique_id(id, &err) != 0 ||
        !(x.sp = dev_stream_create(d0, "stage0", &err)) || !(x.sc = dev_stream_create(d1, "stage1", &err)) ||
        !(x.src = dev_malloc(d0, MAXB, &err)) || !(x.dst = dev_malloc(d1, MAXB, &err))) {
        fprintf(stderr, "pair bench set-up: %s\n", err.msg);
        return 1;
    }
    if (create_pair(&pr, d0, d1, id, 120) != 0 || !pr.s[0].b || !pr.s[1].b) {
        fprintf(stderr, "pair bench: bnd_nccl_create: %s%s\n", pr.s[0].err.msg, pr.s[1].err.msg);
        return 1;
    }
    bnd_boundary *peer = bnd_create(d0, d1, K, MAXB, &err);
    if (!peer) {
        fprintf(stderr, "pair bench: bnd_create: %s\n", err.msg);
        return 1;
    }
    x.bp = pr.s[0].b;
    x.bc = pr.s[1].b;
    printf("slot hop %s -> %s, %d slots, one thread per side with host credits, %d hops back to back per figure\n",
           dev_device_name(d0), dev_device_name(d1), K, T);
    printf("%10s | %12s | %12s | %10s\n", "bytes", "peer b2b", "nccl b2b", "nccl GB/s");
    for (int i = 0; i < n_sizes; i++) {
        x.bytes = sizes[i];
        x.bd = peer;
        double pw = pb_run(&x, 50), p = pb_run(&x, T);
        x.bd = NULL;
        double nw = pb_run(&x, 50), nc = pb_run(&x, T);
        if (pw < 0 || p < 0 || nw < 0 || nc < 0) {
            fprintf(stderr, "pair bench: a hop of %zu B failed\n", x.bytes);
            return 1;
        }
        printf("%10zu | %9.2f us | %9.2f us | %10.1f\n", x.bytes, p, nc, (double)x.bytes / (nc * 1e3));
    }
    dev_stream_destroy(x.sp);
    dev_stream_destroy(x.sc);
    bnd_destroy(peer);
    bnd_nccl_destroy(x.bp);
    bnd_nccl_destroy(x.bc);
    dev_free(d0, x.src);
    dev_free(d1, x.dst);
    return 0;
}

static int run_bench(void)
{
    dev_device *d = dev_platform_device(g_p, 0);
    dev_err err = {0, ""};
    bench_ctx x = {0};
    x.prod = dev_stream_create(d, "producer", &err);
    x.cons = dev_stream_create(d, "consumer", &err);
    x.src = dev_malloc(d, MAXB, &err);
    x.dst = dev_malloc(d, MAXB, &err);
    x.bd = bnd_create(d, d, K, MAXB, &err);
    uint8_t id[BND_NCCL_ID_BYTES];
    if (!x.prod || !x.cons || !x.src || !x.dst || !x.bd || bnd_nccl_unique_id(id, &err) != 0 ||
        !(x.bn = bnd_nccl_create(d, id, 0, 0, K, MAXB, &err))) {
        fprintf(stderr, "bench set-up: %s\n", err.msg);
        return 1;
    }
    /* sizes: one row of an 8B model's hop (4096 f32 + pos + seq), 8 rows, 64 rows, 4 MiB */
    const size_t sizes[] = {16392, 131136, 1049088, MAXB};
    const int n = 2000;
    printf("slot hop on %s, %d slots, two streams (producer -> consumer), %d hops per figure\n", dev_device_name(d), K,
           n);
    printf("%10s | %12s %12s | %12s %12s | %10s\n", "bytes", "d2d alone", "d2d b2b", "nccl alone", "nccl b2b",
           "nccl GB/s");
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        x.bytes = sizes[i];
        double da, db, na, nb;
        if (bench_one(hop_dtod, &x, x.cons, n, &da, &db) != 0 || bench_one(hop_nccl, &x, x.cons, n, &na, &nb) != 0) {
            fprintf(stderr, "bench: a hop of %zu B failed\n", x.bytes);
            return 1;
        }
        printf("%10zu | %9.2f us %9.2f us | %9.2f us %9.2f us | %10.1f\n", x.bytes, da, db, na, nb,
               (double)x.bytes / (nb * 1e3));
    }
    dev_stream_destroy(x.prod);
    dev_stream_destroy(x.cons);
    bnd_destroy(x.bd);
    bnd_nccl_destroy(x.bn);
    dev_free(d, x.src);
    dev_free(d, x.dst);
    if (dev_platform_count(g_p) < 2) {
        printf("one GPU visible: no two-GPU rows (peer boundary vs a two-rank NCCL pair)\n");
        return 0;
    }
    return run_bench_pair(sizes, (int)(sizeof sizes / sizeof sizes[0]), n);
}

int main(int argc, char **argv)
{
    if (!bnd_nccl_built()) {
        printf("skipped: this build has no NCCL (MEMRA_NCCL off: configure with CUDA and NCCL found; scripts/setup "
               "installs PyPI's nvidia-nccl-cu13)\n");
        return 77;
    }
    dev_err err = {0, ""};
    g_p = dev_platform_open(DEV_KIND_CUDA, 0, &err);
    if (!g_p) {
        printf("skipped: no CUDA device to test on: %s\n", err.msg);
        return 77;
    }
    printf("CUDA devices: %d\n", dev_platform_count(g_p));
    print_nccl_origin();
    const char *be = getenv("GPU_NCCL_BENCH");
    if ((argc > 1 && strcmp(argv[1], "--bench") == 0) || (be && strcmp(be, "1") == 0)) {
        int rc = run_bench();
        dev_platform_close(g_p);
        return rc;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nccl_hop_moves_every_size_exactly),
        cmocka_unit_test(test_nccl_slots_rotate_with_hops_in_flight),
        cmocka_unit_test(test_nccl_create_refuses_bad_ids_and_ranks),
        cmocka_unit_test(test_nccl_pair_on_two_gpus_moves_rotating_slots),
        cmocka_unit_test(test_nccl_two_ranks_on_one_gpu_are_refused_by_nccl),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    dev_platform_close(g_p);
    return rc;
}
