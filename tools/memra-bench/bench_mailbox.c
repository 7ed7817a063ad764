/* memra-bench mailbox: hand-off latency of act_mailbox between two threads.
 *
 * Rows (each on fresh mailboxes, after a warm-up):
 *   ping-pong spin X    A posts to B's mailbox, B's thread echoes into A's mailbox; latency = RTT/2.
 *                       Consumers spin X before sleeping (2 us: a short spin; 50 us: both sides stay hot,
 *                       the pure cache-line hand-off when both have a core).
 *   ping-pong no spin   same without spin (ACT_SPIN_NS_DEFAULT): a hop finds the consumer asleep unless it
 *                       is still on its way to sleep (futex wake + wait).
 *   one-way paced N us  A stamps CLOCK_MONOTONIC into the message and posts every N us (busy-wait pacing);
 *                       B records take-time minus stamp. 10 us with a 50 us spin keeps B hot; 200 us with
 *                       no spin has B asleep at every message (the wake-up path).
 *   actor round trip    act_send with a reply act_future to an act_actor, act_future_wait; full round trip
 *                       (what a pipeline "step done" / pending wait costs on the host).
 * Output: a table of median / p99 / p99.9 / max in ns and wake-up syscalls per hop. Reported, not
 * asserted. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "actors/actor.h"
#include "actors/future.h"
#include "actors/mailbox.h"
#include "bench.h"

#define STOP_TAG UINT64_MAX

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

typedef struct row {
    const char *name;
    const char *measures;
    size_t n;
    uint64_t *lat;       /* ns, n samples */
    double wakes_per_hop;
} row;

static void print_row(row *r)
{
    qsort(r->lat, r->n, sizeof r->lat[0], cmp_u64);
    size_t n = r->n;
    printf("| %-22s | %-13s | %8zu | %9llu | %8llu | %8llu | %9llu | %12.3f |\n", r->name, r->measures, n,
           (unsigned long long)r->lat[n / 2], (unsigned long long)r->lat[n * 99 / 100],
           (unsigned long long)r->lat[n * 999 / 1000], (unsigned long long)r->lat[n - 1], r->wakes_per_hop);
}

/* ---- two raw mailboxes: A (main thread consumes) and B (echo thread consumes) ---- */

typedef struct pair {
    act_mailbox *a, *b;
    uint64_t *oneway;    /* one-way mode: B records latency here (indexed by tag) */
    size_t n_oneway;
} pair;

static void *echo_main(void *p)
{
    pair *pr = p;
    for (;;) {
        act_msg *m = act_mailbox_take(pr->b);
        uint64_t tag = m->tag;
        if (pr->oneway && tag != STOP_TAG) {
            uint64_t t = now_ns();
            if (tag < pr->n_oneway)
                pr->oneway[tag] = t - *(uint64_t *)(void *)m->payload;
            act_msg_free(m);
            continue;
        }
        act_msg_free(m);
        if (tag == STOP_TAG)
            return NULL;
        act_msg *r = act_mailbox_msg_alloc(pr->a, 1, NULL);
        if (!r)
            return NULL;
        r->tag = tag;
        act_mailbox_post(pr->a, r);
    }
}

static int pair_open(pair *pr, int32_t spin, dev_err *err)
{
    act_mailbox_opts o = { .spin_ns = spin, .prealloc = 64 };
    memset(pr, 0, sizeof *pr);
    pr->a = act_mailbox_create("bench-a", &o, err);
    pr->b = pr->a ? act_mailbox_create("bench-b", &o, err) : NULL;
    return pr->b ? 0 : err->code;
}

static void pair_close(pair *pr, pthread_t th)
{
    act_msg *m = act_mailbox_msg_alloc(pr->b, 1, NULL);
    m->tag = STOP_TAG;
    act_mailbox_post(pr->b, m);
    pthread_join(th, NULL);
    act_mailbox_destroy(pr->a);
    act_mailbox_destroy(pr->b);
}

static uint64_t pair_wakeups(pair *pr)
{
    act_mailbox_stats sa, sb;
    act_mailbox_stats_get(pr->a, &sa);
    act_mailbox_stats_get(pr->b, &sb);
    return sa.wakeups + sb.wakeups;
}

static int ping_pong(row *r, int32_t spin, size_t warmup, dev_err *err)
{
    pair pr;
    if (pair_open(&pr, spin, err))
        return err->code;
    pthread_t th;
    pthread_create(&th, NULL, echo_main, &pr);
    uint64_t w0 = 0;
    for (size_t i = 0; i < warmup + r->n; i++) {
        if (i == warmup)
            w0 = pair_wakeups(&pr);
        uint64_t t0 = now_ns();
        act_msg *m = act_mailbox_msg_alloc(pr.b, 1, err);
        if (!m)
            break; /* out of memory: err says so; the row keeps its zero samples */
        m->tag = i;
        act_mailbox_post(pr.b, m);
        act_msg *back = act_mailbox_take(pr.a); /* ordered by the echo's post */
        uint64_t t1 = now_ns();
        act_msg_free(back);
        if (i >= warmup)
            r->lat[i - warmup] = (t1 - t0) / 2;
    }
    r->wakes_per_hop = (double)(pair_wakeups(&pr) - w0) / (2.0 * (double)r->n);
    pair_close(&pr, th);
    return err->code;
}

static int one_way(row *r, uint64_t gap_ns, int32_t spin, size_t warmup, dev_err *err)
{
    pair pr;
    if (pair_open(&pr, spin, err))
        return err->code;
    uint64_t *all = calloc(warmup + r->n, sizeof *all);
    if (!all)
        return dev_err_set(err, MEMRA_E_NOMEM, "one-way: out of memory");
    pr.oneway = all;
    pr.n_oneway = warmup + r->n;
    pthread_t th;
    pthread_create(&th, NULL, echo_main, &pr);
    uint64_t w0 = 0, next = now_ns();
    for (size_t i = 0; i < warmup + r->n; i++) {
        if (i == warmup)
            w0 = pair_wakeups(&pr);
        while (now_ns() < next)
            ; /* pace without sleeping the sender */
        act_msg *m = act_mailbox_msg_alloc(pr.b, 1, err);
        if (!m)
            break;
        m->tag = i;
        *(uint64_t *)(void *)m->payload = now_ns();
        act_mailbox_post(pr.b, m);
        next = now_ns() + gap_ns;
    }
    r->wakes_per_hop = (double)(pair_wakeups(&pr) - w0) / (double)r->n;
    pair_close(&pr, th); /* joins the receiver: its samples are ordered before the copy */
    memcpy(r->lat, all + warmup, r->n * sizeof *all);
    free(all);
    return err->code;
}

/* ---- actor request / reply ---- */

static int reply_handle(act_actor *a, act_msg *m, void *ctx)
{
    return act_future_set(m->reply, (void *)(uintptr_t)m->tag);
}

static int actor_round_trip(row *r, size_t warmup, dev_err *err)
{
    act_actor *a = act_actor_create("bench-actor", reply_handle, NULL, err);
    if (!a || act_actor_start(a, err))
        return act_actor_destroy(a), err->code;
    act_future f;
    act_future_init(&f);
    uint64_t wk0 = 0, fw0 = 0;
    for (size_t i = 0; i < warmup + r->n; i++) {
        act_actor_stats st;
        if (i == warmup) {
            act_actor_stats_get(a, &st);
            wk0 = st.mailbox.wakeups;
            fw0 = atomic_load(&f.wakes);
        }
        act_future_reset(&f);
        uint64_t t0 = now_ns();
        act_msg *m = act_msg_new(a, ACT_MSG_USER, err);
        if (!m)
            break;
        m->tag = i;
        m->reply = &f;
        act_send(a, m, err);
        act_future_wait(&f, NULL, err); /* ordered by the actor's act_future_set */
        uint64_t t1 = now_ns();
        if (i >= warmup)
            r->lat[i - warmup] = t1 - t0;
    }
    act_actor_stats st;
    act_actor_stats_get(a, &st);
    r->wakes_per_hop = (double)(st.mailbox.wakeups - wk0 + atomic_load(&f.wakes) - fw0) / (2.0 * (double)r->n);
    act_actor_stop(a);
    act_actor_join(a, err);
    act_actor_destroy(a);
    return err->code;
}

static int usage(FILE *out)
{
    fprintf(out, "usage: memra-bench mailbox [--iters N] [--warmup N]\n"
                 "  --iters N    samples per row (default 200000; paced rows use N/10), 1000..100000000\n"
                 "  --warmup N   hops discarded before sampling (default 10000)\n");
    return out == stdout ? 0 : 2;
}

int bench_mailbox(int argc, char **argv)
{
    size_t iters = 200000, warmup = 10000;
    for (int i = 1; i < argc; i++) {
        char *end = NULL;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
            return usage(stdout);
        if ((!strcmp(argv[i], "--iters") || !strcmp(argv[i], "--warmup")) && i + 1 < argc) {
            unsigned long long v = strtoull(argv[i + 1], &end, 10);
            if (!*argv[i + 1] || *end || (argv[i][2] == 'i' && (v < 1000 || v > 100000000ull)) ||
                v > 100000000ull) {
                fprintf(stderr, "memra-bench mailbox: %s %s: allowed an integer (iters 1000..1e8, warmup <= 1e8)\n",
                        argv[i], argv[i + 1]);
                return 2;
            }
            *(argv[i][2] == 'i' ? &iters : &warmup) = (size_t)v;
            i++;
            continue;
        }
        fprintf(stderr, "memra-bench mailbox: unknown option '%s'\n", argv[i]);
        return usage(stderr);
    }
    size_t paced = iters / 10;
    row rows[] = {
        { "ping-pong spin 2 us", "one-way RTT/2", iters, NULL, 0 },
        { "ping-pong spin 50 us", "one-way RTT/2", iters, NULL, 0 },
        { "ping-pong no spin", "one-way RTT/2", iters, NULL, 0 },
        { "one-way paced 10 us", "one-way", paced, NULL, 0 },
        { "one-way paced 200 us", "one-way", paced / 10 < 1000 ? 1000 : paced / 10, NULL, 0 },
        { "actor round trip", "round trip", iters, NULL, 0 },
    };
    size_t n_rows = sizeof rows / sizeof rows[0];
    dev_err err = { 0 };
    int rc = 0;
    for (size_t i = 0; i < n_rows && rc == 0; i++) {
        rows[i].lat = calloc(rows[i].n, sizeof(uint64_t));
        if (!rows[i].lat) {
            rc = dev_err_set(&err, MEMRA_E_NOMEM, "out of memory for %zu samples", rows[i].n);
            break;
        }
        switch (i) {
        case 0: rc = ping_pong(&rows[i], 2000, warmup, &err); break;
        case 1: rc = ping_pong(&rows[i], 50000, warmup, &err); break;
        case 2: rc = ping_pong(&rows[i], -1, warmup, &err); break;
        case 3: rc = one_way(&rows[i], 10000, 50000, warmup / 10, &err); break;
        case 4: rc = one_way(&rows[i], 200000, -1, warmup / 100, &err); break;
        default: rc = actor_round_trip(&rows[i], warmup, &err); break;
        }
    }
    if (rc == 0) {
        printf("memra-bench mailbox: iters=%zu warmup=%zu (CLOCK_MONOTONIC; ns)\n\n", iters, warmup);
        printf("| %-22s | %-13s | %8s | %9s | %8s | %8s | %9s | %12s |\n", "path", "measures", "samples",
               "median ns", "p99 ns", "p99.9 ns", "max ns", "wakeups/hop");
        printf("|------------------------|---------------|----------|-----------|----------|----------|-----------|--------------|\n");
        for (size_t i = 0; i < n_rows; i++)
            print_row(&rows[i]);
    } else {
        fprintf(stderr, "memra-bench mailbox: %s\n", err.msg);
    }
    for (size_t i = 0; i < n_rows; i++)
        free(rows[i].lat);
    return rc == 0 ? 0 : 1;
}
