/* memra-bench hop (the seed's pp-transport-smoke): latency of one boundary hop — producer stream copies
 * the hidden state into slot k and records ev_tx[k], consumer stream waits ev_tx[k], copies it out and
 * records ev_rx[k] — measured host-side from the send's enqueue to the consumer's ev_rx completion, per
 * transport (d2d on one device, peer across devices) and slot count K, over R hops rotating the slots. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/pp_rank.h"
#include "bench.h"
#include "transport/bnd_mpi.h"
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

/* Under mpirun -np 2: the wire of the MPI transport between rank 0 and rank 1, one slot message
 * [BND_MPI_HDR | rows] each way with the calls the transport makes (MPI_Isend, MPI_Iprobe, MPI_Recv); the one-way
 * latency is half the round trip. Both ranks run this; rank 0 prints. */
static int hop_mpi(int R, int n_embd)
{
    const int self = act_rank_self(), peer = 1 - self;
    dev_err err = {0};
    int rc = 0;
    if (self > 1)
        return 0;
    if (self == 0)
        printf("hop over MPI (rank 0 <-> rank 1): %d round trips per size; one-way = round trip / 2\n"
               "%6s %10s %12s %12s %12s\n", R, "rows", "bytes", "median us", "p99 us", "MB/s");
    for (int rows = 1; rows <= 64 && rc == 0; rows *= 4) {
        const size_t bytes = BND_MPI_HDR + (size_t)rows * ((size_t)n_embd * 4 + 8);
        char *buf = calloc(1, bytes);
        double *lat = malloc((size_t)R * sizeof *lat);
        if (!buf || !lat)
            rc = 2;
        for (int i = 0; i < R + 10 && rc == 0; i++) { /* 10 warm-up trips */
            double t0 = 1e6 * bench_now_s();
            for (int leg = 0; leg < 2 && rc == 0; leg++) {
                if ((leg == 0) == (self == 0)) { /* our turn to send */
                    bnd_mpi_req *q = NULL;
                    int done = 0;
                    rc = bnd_mpi_isend(peer, BND_TAG_SLOT, buf, bytes, &q, &err) ? 2 : 0;
                    while (rc == 0 && !done)
                        rc = bnd_mpi_test(q, &done, &err) ? 2 : 0;
                } else {
                    int got = 0;
                    while (rc == 0 && (got = bnd_mpi_probe(peer, BND_TAG_SLOT, NULL, NULL, &err)) == 0) {
                    }
                    rc = got < 0 || bnd_mpi_recv(peer, BND_TAG_SLOT, buf, bytes, &err) ? 2 : 0;
                }
            }
            if (i >= 10)
                lat[i - 10] = (1e6 * bench_now_s() - t0) / 2;
        }
        if (rc == 0 && self == 0) {
            bench_sort(lat, R);
            printf("%6d %10zu %12.2f %12.2f %12.1f\n", rows, bytes, lat[R / 2], lat[(size_t)(R * 0.99)],
                   (double)bytes / lat[R / 2]);
        }
        free(buf);
        free(lat);
    }
    if (rc)
        fprintf(stderr, "memra-bench hop (rank %d): %s\n", self, err.msg[0] ? err.msg : "out of host memory");
    return rc;
}

int bench_hop(int argc, char **argv)
{
    int R = 2000, n_embd = 576;
    const bench_flag flags[] = {{"--hops", &R, NULL, 10, 1 << 24}, {"--embd", &n_embd, NULL, 1, 1 << 20}};
    const int prc = bench_parse("hop", argc, argv, flags, 2,
                                "[--hops R=2000] [--embd E=576]  (backend from MEMRA_BACKEND)");
    if (prc)
        return prc;
    if (act_rank_count() > 1)
        return hop_mpi(R, n_embd);
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
