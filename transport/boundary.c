/* Boundary slots and their events. Shared state: slot memory and events are touched by the producer
 * stream (send) and the consumer stream (recv), ordered by ev_tx/ev_rx; the host fields below are
 * producer-actor-only (next, skip_rx_wait) — see boundary.h. A BND_NCCL half's communicator is used by its
 * stage's actor (send or receive) and aborted from any thread (bnd_abort; bnd_nccl.h says how). */
#include "transport/boundary.h"
#include "transport/bnd_nccl.h"
#include "transport/bnd_shm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct bnd_boundary {
    dev_device *src, *dst;
    bnd_transport kind;
    int n_slots;
    size_t slot_bytes;
    void **slot;          /* n_slots buffers on dst */
    dev_event **ev_tx;    /* producer wrote slot k */
    dev_event **ev_rx;    /* consumer copied slot k out */
    int mpi_producer;     /* BND_MPI, BND_NCCL: 1 = this process holds the producer's half */
    bnd_nccl *nccl;       /* BND_NCCL: this side of the pair's communicator; ev_tx/ev_rx are its events */
    dev_event **ev_wire;  /* BND_NCCL producer: recorded before each ncclSend of slot k (bnd_wire_ready) */
    bnd_shm *shm;         /* BND_NCCL under MEMRA_TEST_NCCL_EMU: the stand-in for nccl; ev_tx/ev_rx are ours */
    uint64_t next;        /* overlap step counter (producer actor only) */
    int skip_rx_wait;     /* test hook (bnd_test_skip_rx_wait): sends skip the ev_rx wait (producer only) */
};

/* The boundary's host part: K empty slots and event arrays of `kind` between src and dst, or NULL + err (the
 * message names `what`: "boundary" or "MPI boundary"). The caller fills slot k and its two events. */
static bnd_boundary *bnd_alloc(dev_device *src, dev_device *dst, bnd_transport kind, int n_slots, size_t slot_bytes,
                               const char *what, dev_err *err)
{
    if (n_slots < 1 || slot_bytes == 0) {
        dev_err_set(err, MEMRA_E_INVAL, "%s: %d slots of %zu bytes (need >= 1 slot, > 0 bytes)", what, n_slots,
                    slot_bytes);
        return NULL;
    }
    bnd_boundary *b = calloc(1, sizeof *b);
    if (b) {
        b->src = src;
        b->dst = dst;
        b->kind = kind;
        b->n_slots = n_slots;
        b->slot_bytes = slot_bytes;
        b->slot = calloc((size_t)n_slots, sizeof *b->slot);
        b->ev_tx = calloc((size_t)n_slots, sizeof *b->ev_tx);
        b->ev_rx = calloc((size_t)n_slots, sizeof *b->ev_rx);
    }
    if (!b || !b->slot || !b->ev_tx || !b->ev_rx) {
        dev_err_set(err, MEMRA_E_NOMEM, "%s: out of host memory", what);
        bnd_destroy(b);
        return NULL;
    }
    return b;
}

bnd_boundary *bnd_create(dev_device *src, dev_device *dst, int n_slots, size_t slot_bytes, dev_err *err)
{
    bnd_boundary *b = bnd_alloc(src, dst, src == dst ? BND_DTOD : BND_PEER, n_slots, slot_bytes, "boundary", err);
    if (!b)
        return NULL;
    for (int k = 0; k < n_slots; k++) {
        if (!(b->slot[k] = dev_malloc(dst, slot_bytes, err)))
            goto fail;
        /* ev_tx is recorded on the producer's stream, ev_rx on the consumer's: each lives on that device */
        if (!(b->ev_tx[k] = dev_event_create(src, err)) || !(b->ev_rx[k] = dev_event_create(dst, err)))
            goto fail;
    }
    return b;
fail:
    bnd_destroy(b);
    return NULL;
}

bnd_boundary *bnd_create_mpi(dev_device *local, int producer, int n_slots, size_t slot_bytes, dev_err *err)
{
    bnd_boundary *b = bnd_alloc(local, local, BND_MPI, n_slots, slot_bytes, "MPI boundary", err);
    if (!b)
        return NULL;
    b->mpi_producer = producer;
    for (int k = 0; k < n_slots; k++) {
        if (!(b->slot[k] = dev_host_alloc(dev_device_platform(local), BND_MPI_HDR + slot_bytes, err)))
            goto fail;
        memset(b->slot[k], 0, BND_MPI_HDR); /* defined header bytes on the wire */
        if (!(b->ev_tx[k] = dev_event_create(local, err)) || !(b->ev_rx[k] = dev_event_create(local, err)))
            goto fail;
    }
    return b;
fail:
    bnd_destroy(b);
    return NULL;
}

bnd_boundary *bnd_create_nccl(dev_device *local, int producer, const uint8_t *id, int n_slots, size_t slot_bytes,
                              dev_err *err)
{
    bnd_boundary *b = bnd_alloc(local, local, BND_NCCL, n_slots, slot_bytes, "NCCL boundary", err);
    if (!b)
        return NULL;
    b->mpi_producer = producer;
    if (producer && !(b->ev_wire = calloc((size_t)n_slots, sizeof *b->ev_wire))) {
        dev_err_set(err, MEMRA_E_NOMEM, "NCCL boundary: out of host memory");
        goto fail;
    }
    if (bnd_shm_is_id(id)) { /* the test stand-in (bnd_shm.h): events of our own */
        if (!(b->shm = bnd_shm_open(id, producer, err)))
            goto fail;
        for (int k = 0; k < n_slots; k++)
            if (!(b->ev_tx[k] = dev_event_create(local, err)) || !(b->ev_rx[k] = dev_event_create(local, err)) ||
                (producer && !(b->ev_wire[k] = dev_event_create(local, err))))
                goto fail;
        return b;
    }
    /* collective with the other rank's bnd_create_nccl (the caller orders the pairs: pp_rank_boundary) */
    if (!(b->nccl = bnd_nccl_create(local, id, producer ? 0 : 1, producer ? 1 : 0, n_slots, slot_bytes, err)))
        goto fail;
    for (int k = 0; k < n_slots; k++) { /* borrowed: bnd_nccl records them and frees them */
        b->ev_tx[k] = bnd_nccl_ev_tx(b->nccl, k);
        b->ev_rx[k] = bnd_nccl_ev_rx(b->nccl, k);
        if (producer && !(b->ev_wire[k] = dev_event_create(local, err)))
            goto fail;
    }
    return b;
fail:
    bnd_destroy(b);
    return NULL;
}

dev_event *bnd_wire_ready(bnd_boundary *b, int k)
{
    if (k < 0 || k >= b->n_slots)
        return NULL;
    return b->kind == BND_MPI ? b->ev_tx[k] : b->kind == BND_NCCL && b->ev_wire ? b->ev_wire[k] : NULL;
}

int bnd_abort(bnd_boundary *b)
{
    if (b && b->kind == BND_NCCL && b->shm)
        bnd_shm_abort(b->shm);
    return b && b->kind == BND_NCCL && b->nccl ? bnd_nccl_abort(b->nccl) : 0;
}
int bnd_check(bnd_boundary *b, dev_err *err)
{
    return b && b->kind == BND_NCCL && b->nccl ? bnd_nccl_check(b->nccl, err) : 0;
}

bnd_transport bnd_pick_remote(int producer_gpu, int consumer_gpu, int nccl_built, int same_gpu, int door_off,
                              const char **why)
{
    const char *w;
    bnd_transport t = BND_MPI;
    if (door_off)
        w = "MEMRA_PP_NCCL=0 asks for it";
    else if (!producer_gpu || !consumer_gpu)
        w = "a stage of the pair is not on a GPU (NCCL moves GPU memory only)";
    else if (!nccl_built)
        w = "NCCL is not built on both ranks (configure with -DMEMRA_NCCL=ON where NCCL is installed)";
    else if (same_gpu)
        w = "both stages are on one GPU (NCCL refuses two ranks on one GPU: give each rank its own with "
            "MEMRA_PP_DEVICES or CUDA_VISIBLE_DEVICES)";
    else
        w = "two GPUs, NCCL built on both ranks, MEMRA_PP_NCCL=auto", t = BND_NCCL;
    if (why)
        *why = w;
    return t;
}

void *bnd_mpi_slot(bnd_boundary *b, int k) { return b->kind == BND_MPI ? b->slot[k] : NULL; }
dev_event *bnd_mpi_ev_tx(bnd_boundary *b, int k) { return b->kind == BND_MPI ? b->ev_tx[k] : NULL; }
dev_event *bnd_mpi_ev_rx(bnd_boundary *b, int k) { return b->kind == BND_MPI ? b->ev_rx[k] : NULL; }

void bnd_destroy(bnd_boundary *b)
{
    if (!b)
        return;
    if (b->kind == BND_NCCL) { /* its events are the communicator's: bnd_nccl_destroy frees them */
        for (int k = 0; b->ev_wire && k < b->n_slots; k++)
            if (b->ev_wire[k])
                dev_event_destroy(b->ev_wire[k]);
        free(b->ev_wire);
        /* every stream that used it is synced, so nothing is in flight: the abort frees it locally, where NCCL's
         * destroy would finalize with the peer and wait for it (a rank whose create fails after its boundaries
         * would then wait for a peer that waits for its READY) */
        if (b->nccl) {
            bnd_nccl_abort(b->nccl);
            bnd_nccl_destroy(b->nccl);
            for (int k = 0; b->ev_tx && b->ev_rx && k < b->n_slots; k++)
                b->ev_tx[k] = b->ev_rx[k] = NULL;
        }
        bnd_shm_close(b->shm); /* the stand-in's events are ours: freed below */
    }
    for (int k = 0; k < b->n_slots; k++) {
        if (b->slot && b->slot[k] && b->kind == BND_MPI)
            dev_host_free(dev_device_platform(b->dst), b->slot[k]);
        else if (b->slot && b->slot[k])
            dev_free(b->dst, b->slot[k]);
        if (b->ev_tx && b->ev_tx[k])
            dev_event_destroy(b->ev_tx[k]);
        if (b->ev_rx && b->ev_rx[k])
            dev_event_destroy(b->ev_rx[k]);
    }
    free(b->slot);
    free(b->ev_tx);
    free(b->ev_rx);
    free(b);
}

bnd_transport bnd_transport_kind(const bnd_boundary *b) { return b->kind; }
int bnd_slots(const bnd_boundary *b) { return b->n_slots; }
void bnd_test_skip_rx_wait(bnd_boundary *b, int on) { b->skip_rx_wait = on != 0; }

int bnd_peek_slot(const bnd_boundary *b, int overlap)
{
    return overlap ? (int)(b->next % (uint64_t)b->n_slots) : 0;
}

int bnd_next_slot(bnd_boundary *b, int overlap)
{
    int k = bnd_peek_slot(b, overlap);
    b->next++;
    return k;
}

int bnd_send_async(bnd_boundary *b, int k, dev_stream *producer, const void *src, size_t bytes)
{
    if (k < 0 || k >= b->n_slots || bytes > b->slot_bytes)
        return MEMRA_E_INVAL;
    int r;
    if (b->kind == BND_NCCL) {
        /* ordered by the credit for k: the consumer enqueued its receive of slot k's previous token, and our header
         * send of it completed; ev_wire[k] tells the transport the walk ended (its header may go), ev_tx[k] that
         * the send read the frame */
        dev_err e = {0};
        if ((r = dev_event_record_async(b->ev_wire[k], producer)) != 0)
            return r;
        if (b->shm) /* the test stand-in: the same two ops on the stream */
            return (r = bnd_shm_send_async(b->shm, k, producer, src, bytes)) != 0
                       ? r
                       : dev_event_record_async(b->ev_tx[k], producer);
        if ((r = bnd_nccl_send_async(b->nccl, k, producer, src, bytes, &e)) != 0)
            fprintf(stderr, "memra: NCCL boundary, send of slot %d: %s\n", k, e.msg); /* the verb returns a code */
        return r;
    }
    if (b->kind == BND_MPI) { /* d2h behind the walk; the transport sends once ev_tx[k] completed */
        /* ordered by the credit for k: the consumer rank copied slot k out, and our send of it completed */
        if ((r = dev_copy_d2h_async(producer, (char *)b->slot[k] + BND_MPI_HDR, src, bytes)) != 0)
            return r;
        return dev_event_record_async(b->ev_tx[k], producer);
    }
    /* ordered by ev_rx[k]: the consumer recorded it after copying the slot's previous token out (unless the
     * test hook drops the wait: one predicted branch on a field of this line) */
    if (__builtin_expect(!b->skip_rx_wait, 1) && (r = dev_stream_wait_event_async(producer, b->ev_rx[k])) != 0)
        return r;
    if (b->kind == BND_DTOD)
        r = dev_copy_d2d_async(producer, b->slot[k], src, bytes);
    else
        r = dev_copy_peer_async(producer, b->slot[k], b->dst, src, b->src, bytes);
    if (r != 0)
        return r;
    return dev_event_record_async(b->ev_tx[k], producer);
}

int bnd_recv_async(bnd_boundary *b, int k, dev_stream *consumer, void *dst, size_t bytes)
{
    if (k < 0 || k >= b->n_slots || bytes > b->slot_bytes)
        return MEMRA_E_INVAL;
    int r;
    if (b->kind == BND_NCCL) {
        /* ordered by the TOKEN: its header arrived, so the producer's matching ncclSend is enqueued (or will be:
         * NCCL matches the pair's n-th send with its n-th receive); the receive completes on our stream only once
         * the bytes are in dst, then ev_rx[k] */
        dev_err e = {0};
        if (b->shm)
            return (r = bnd_shm_recv_async(b->shm, k, consumer, dst, bytes)) != 0
                       ? r
                       : dev_event_record_async(b->ev_rx[k], consumer);
        if ((r = bnd_nccl_recv_async(b->nccl, k, consumer, dst, bytes, &e)) != 0)
            fprintf(stderr, "memra: NCCL boundary, receive of slot %d: %s\n", k, e.msg);
        return r;
    }
    if (b->kind == BND_MPI) {
        /* ordered by the TOKEN: the transport posted it after the receive of slot k completed */
        if ((r = dev_copy_h2d_async(consumer, dst, (char *)b->slot[k] + BND_MPI_HDR, bytes)) != 0)
            return r;
        return dev_event_record_async(b->ev_rx[k], consumer);
    }
    /* ordered by ev_tx[k]: the producer recorded it after writing this token into slot k */
    if ((r = dev_stream_wait_event_async(consumer, b->ev_tx[k])) != 0)
        return r;
    if ((r = dev_copy_d2d_async(consumer, dst, b->slot[k], bytes)) != 0)
        return r;
    return dev_event_record_async(b->ev_rx[k], consumer);
}
