/* memra-bench hop (the seed's pp-transport-smoke): latency of one boundary hop — producer stream copies
 * the hidden state into slot k and records ev_tx[k], consumer stream waits ev_tx[k], copies it out and
 * records ev_rx[k] — measured host-side from the send's enqueue to the consumer's ev_rx completion, per
 * transport (d2d on one device, peer across devices) and slot count K, over R hops rotating the slots. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "transport/boundary.h"

static int hop_case(dev_platform *plat, int peer, int K, size_t bytes, int R, double *med, double *p99)
{
    dev_err err = {0};
    dev_device *d0 = dev_platform_device(plat, 0), *d1 = dev_platform_device(plat, peer ? 1 : 0);
    bnd_boundary *b = bnd_create(d0, d1, K, bytes, &err);
    dev_stream *sp = dev_stream_create(d0, "producer", &err), *sc = dev_stream_create(d1, "consumer", &err);
    void *src = dev_malloc(d0, bytes, &err), *dst = dev_malloc(d1, bytes, &err);
    dev_event *done = dev_event_create(d1, &err);
    double *lat = malloc((size_t)R * sizeof *lat);
    int rc = (!b || !sp || !sc || !src || !dst || !done || !lat) ? 2 : 0;
    for (int i = 0; i < R && rc == 0; i++) {
        int k = bnd_next_slot(b, 1);
        double t0 = 1e6 * bench_now_s();
        /* one thread plays both actors: the consumer enqueues its recv (and so ev_rx[k]) before the
         * producer's next send of slot k — the credit protocol, serialized */
        if (bnd_send_async(b, k, sp, src, bytes) || bnd_recv_async(b, k, sc, dst, bytes) ||
            dev_event_record_async(done, sc) || dev_event_sync(done, &err))
            rc = 2;
        lat[i] = 1e6 * bench_now_s() - t0;
    }
    if (rc == 0) {
        bench_sort(lat, R);
        *med = lat[R / 2];
        *p99 = lat[(size_t)(R * 0.99)];
    } else
        fprintf(stderr, "memra-bench hop: %s\n", err.msg[0] ? err.msg : "setup failed");
    if (sp)
        dev_stream_sync(sp, NULL), dev_stream_destroy(sp);
    if (sc)
        dev_stream_sync(sc, NULL), dev_stream_destroy(sc);
    if (done)
        dev_event_destroy(done);
    if (src)
        dev_free(d0, src);
    if (dst)
        dev_free(d1, dst);
    bnd_destroy(b);
    free(lat);
    return rc;
}

int bench_hop(int argc, char **argv)
{
    int R = 2000, n_embd = 576;
    const bench_flag flags[] = {{"--hops", &R, NULL, 10, 1 << 24}, {"--embd", &n_embd, NULL, 1, 1 << 20}};
    if (bench_parse("hop", argc, argv, flags, 2, "[--hops R=2000] [--embd E=576]  (backend from MEMRA_BACKEND)"))
        return 2;
    dev_err err = {0};
    dev_platform *plat = dev_platform_open_env(&err);
    if (!plat) {
        fprintf(stderr, "memra-bench hop: %s\n", err.msg);
        return 2;
    }
    size_t bytes = (size_t)n_embd * 4 + 8; /* one row of hidden state + its pos and seq */
    printf("hop: %zu bytes per hop, %d hops, backend %s\n", bytes, R,
           dev_platform_kind(plat) == DEV_KIND_CUDA ? "cuda" : "cpu");
    printf("%-10s %3s %12s %12s\n", "transport", "K", "median us", "p99 us");
    int rc = 0;
    for (int peer = 0; peer < 2 && rc == 0; peer++) {
        if (peer && dev_platform_count(plat) < 2) {
            printf("%-10s   - (one device only: no peer transport)\n", "peer");
            break;
        }
        if (peer && (rc = dev_peer_grant(dev_platform_device(plat, 0), dev_platform_device(plat, 1), &err) ||
                          dev_peer_grant(dev_platform_device(plat, 1), dev_platform_device(plat, 0), &err)))
            break;
        for (int K = 1; K <= 4 && rc == 0; K *= 2) {
            double med = 0, p99 = 0;
            rc = hop_case(plat, peer, K, bytes, R, &med, &p99);
            if (rc == 0)
                printf("%-10s %3d %12.2f %12.2f\n", peer ? "peer" : "dtod", K, med, p99);
        }
    }
    dev_platform_close(plat);
    return rc ? 2 : 0;
}
