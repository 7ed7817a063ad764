/* The NCCL boundary transport (transport/bnd_nccl.h). Shared state: the communicator and the events are
 * used by the one host thread that owns the side (its stage actor); `aborted` is written by bnd_nccl_abort
 * from any thread and read by the enqueue calls (an atomic); `lock` keeps an abort from freeing the
 * communicator while the owner is inside an enqueue (each enqueue, and the abort, hold it). The streams order
 * the bytes: see the header's ordering rule. */
#include "transport/bnd_nccl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef MEMRA_HAVE_NCCL

#include <pthread.h>
#include <stdatomic.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

/* The id's layout: tag (8) | NCCL version of the maker (4, little-endian) | FNV-1a of the rest (4) | ncclUniqueId */
static const char ID_TAG[8] = {'m', 'e', 'm', 'r', 'a', 'N', 'C', '1'};
enum { ID_VER = 8, ID_SUM = 12, ID_NCCL = 16 };
_Static_assert(ID_NCCL + NCCL_UNIQUE_ID_BYTES == BND_NCCL_ID_BYTES, "BND_NCCL_ID_BYTES: tag + version + sum + id");

struct bnd_nccl {
    dev_device *dev;      /* the GPU of this side */
    ncclComm_t comm;      /* the pair's communicator (NULL once destroyed) */
    int rank, peer, n_ranks;
    int n_slots;
    size_t slot_bytes;
    dev_event **ev_tx;    /* recorded after each send of slot k (producer stream) */
    dev_event **ev_rx;    /* recorded after each receive of slot k (consumer stream) */
    atomic_int aborted;   /* set by bnd_nccl_abort, any thread */
    pthread_mutex_t lock; /* an enqueue (owner thread) vs bnd_nccl_abort (any thread) */
    int lock_init;        /* lock was initialised (destroy after a failed create) */
};

int bnd_nccl_built(void) { return 1; }

/* Fill err with "what: ncclXxx: NCCL's string (NCCL's last error)"; returns MEMRA_E_DEVICE. */
static int nccl_fail(dev_err *err, ncclResult_t rc, ncclComm_t comm, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int nccl_fail(dev_err *err, ncclResult_t rc, ncclComm_t comm, const char *fmt, ...)
{
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    const char *last = ncclGetLastError(comm);
    return dev_err_set(err, MEMRA_E_DEVICE, "%s: %s%s%s%s", what, ncclGetErrorString(rc), last && *last ? " (" : "",
                       last && *last ? last : "", last && *last ? ")" : "");
}

static int cuda_fail(dev_err *err, cudaError_t rc, const char *what)
{
    return dev_err_set(err, MEMRA_E_DEVICE, "%s: %s (%s)", what, cudaGetErrorName(rc), cudaGetErrorString(rc));
}

/* Make d's GPU current for NCCL's calls (they use the calling thread's device); *prev restores it. */
static int push_gpu(dev_device *d, int *prev, dev_err *err)
{
    cudaError_t rc = cudaGetDevice(prev);
    if (rc != cudaSuccess)
        return cuda_fail(err, rc, "bnd_nccl: cudaGetDevice");
    if (*prev != dev_device_ordinal(d) && (rc = cudaSetDevice(dev_device_ordinal(d))) != cudaSuccess)
        return cuda_fail(err, rc, "bnd_nccl: cudaSetDevice");
    return 0;
}

static void pop_gpu(int prev)
{
    int cur = -1;
    if (cudaGetDevice(&cur) == cudaSuccess && cur != prev)
        cudaSetDevice(prev);
}

static uint32_t fnv1a(const uint8_t *p, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 16777619u;
    return h;
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The checksum covers the version and NCCL's id bytes. */
static uint32_t id_sum(const uint8_t *id)
{
    return fnv1a(id + ID_VER, 4) ^ fnv1a(id + ID_NCCL, NCCL_UNIQUE_ID_BYTES);
}

int bnd_nccl_version(int *code, dev_err *err)
{
    ncclResult_t rc = ncclGetVersion(code);
    return rc == ncclSuccess ? 0 : nccl_fail(err, rc, NULL, "bnd_nccl: ncclGetVersion");
}

int bnd_nccl_unique_id(uint8_t id[BND_NCCL_ID_BYTES], dev_err *err)
{
    int ver = 0, r;
    if ((r = bnd_nccl_version(&ver, err)) != 0)
        return r;
    ncclUniqueId uid;
    ncclResult_t rc = ncclGetUniqueId(&uid);
    if (rc != ncclSuccess)
        return nccl_fail(err, rc, NULL, "bnd_nccl_unique_id: ncclGetUniqueId");
    memcpy(id, ID_TAG, sizeof ID_TAG);
    put32(id + ID_VER, (uint32_t)ver);
    memcpy(id + ID_NCCL, uid.internal, NCCL_UNIQUE_ID_BYTES);
    put32(id + ID_SUM, id_sum(id));
    return 0;
}

/* Refuse an id that bnd_nccl_unique_id did not make, that was damaged on the way, or that a process with
 * another NCCL version made (NCCL's bootstrap would fail obscurely or hang). */
static int id_check(const uint8_t *id, dev_err *err)
{
    if (!id)
        return dev_err_set(err, MEMRA_E_INVAL, "bnd_nccl_create: no id given (make one with bnd_nccl_unique_id)");
    if (memcmp(id, ID_TAG, sizeof ID_TAG) != 0)
        return dev_err_set(err, MEMRA_E_INVAL, "bnd_nccl_create: the %d id bytes were not made by bnd_nccl_unique_id "
                           "(their tag is not \"memraNC1\")", BND_NCCL_ID_BYTES);
    if (get32(id + ID_SUM) != id_sum(id))
        return dev_err_set(err, MEMRA_E_INVAL, "bnd_nccl_create: the id's checksum does not match its bytes (the id "
                           "was damaged between bnd_nccl_unique_id and here)");
    int mine = 0, r;
    if ((r = bnd_nccl_version(&mine, err)) != 0)
        return r;
    const int theirs = (int)get32(id + ID_VER);
    if (theirs != mine)
        return dev_err_set(err, MEMRA_E_INVAL, "bnd_nccl_create: the id was made by NCCL %d.%d.%d and this process "
                           "runs NCCL %d.%d.%d: every rank needs the same NCCL", theirs / 10000, theirs / 100 % 100,
                           theirs % 100, mine / 10000, mine / 100 % 100, mine % 100);
    return 0;
}

/* Exchange each side's rank once (both directions; a one-rank communicator to itself), so that NCCL sets up
 * its connections now rather than inside the first token's send, and check the peer is who it says. */
static int handshake(bnd_nccl *b, dev_err *err)
{
    int r = 0;
    dev_stream *s = dev_stream_create(b->dev, "bnd_nccl_start", err);
    int32_t *buf = s ? dev_malloc(b->dev, 2 * sizeof(int32_t), err) : NULL;
    if (!s || !buf) {
        r = err && err->code ? err->code : MEMRA_E_DEVICE;
        goto out;
    }
    const int32_t mine = b->rank;
    int32_t got = -1;
    if ((r = dev_copy_h2d_sync(b->dev, buf, &mine, sizeof mine, err)) != 0)
        goto out;
    cudaStream_t cs = (cudaStream_t)dev_stream_native(s);
    int prev;
    if ((r = push_gpu(b->dev, &prev, err)) != 0)
        goto out;
    ncclResult_t rc;
    if ((rc = ncclGroupStart()) != ncclSuccess) {
        pop_gpu(prev);
        r = nccl_fail(err, rc, b->comm, "bnd_nccl_create: ncclGroupStart (start-up exchange)");
        goto out;
    }
    ncclResult_t rs = ncclSend(buf, 1, ncclInt32, b->peer, b->comm, cs);
    ncclResult_t rr = ncclRecv(buf + 1, 1, ncclInt32, b->peer, b->comm, cs);
    rc = ncclGroupEnd(); /* ends the group on every path */
    pop_gpu(prev);
    if (rs != ncclSuccess || rr != ncclSuccess || rc != ncclSuccess) {
        r = nccl_fail(err, rs != ncclSuccess ? rs : rr != ncclSuccess ? rr : rc, b->comm,
                      "bnd_nccl_create: start-up exchange with rank %d (%s)", b->peer,
                      rs != ncclSuccess ? "ncclSend" : rr != ncclSuccess ? "ncclRecv" : "ncclGroupEnd");
        goto out;
    }
    /* ordered by s: the copy runs after the exchange on the same stream */
    if ((r = dev_copy_d2h_async(s, &got, buf + 1, sizeof got)) != 0 || (r = dev_stream_sync(s, err)) != 0) {
        dev_err_set(err, r, "bnd_nccl_create: start-up exchange with rank %d did not complete", b->peer);
        goto out;
    }
    if (got != b->peer)
        r = dev_err_set(err, MEMRA_E_INVAL, "bnd_nccl_create: the peer says it is rank %d, expected rank %d", (int)got,
                        b->peer);
out:
    if (s)
        dev_stream_destroy(s); /* waits for the exchange: buf is free to go */
    if (buf)
        dev_free(b->dev, buf);
    return r;
}

bnd_nccl *bnd_nccl_create(dev_device *dev, const uint8_t id[BND_NCCL_ID_BYTES], int rank, int peer, int n_slots,
                          size_t slot_bytes, dev_err *err)
{
    if (n_slots < 1 || slot_bytes == 0) {
        dev_err_set(err, MEMRA_E_INVAL, "bnd_nccl_create: %d slots of %zu bytes (need >= 1 slot, > 0 bytes)", n_slots,
                    slot_bytes);
        return NULL;
    }
    if (!((rank == 0 && peer == 0) || (rank == 0 && peer == 1) || (rank == 1 && peer == 0))) {
        dev_err_set(err, MEMRA_E_INVAL, "bnd_nccl_create: rank %d, peer %d: a pair's ranks are 0 and 1 (rank 0 talks "
                    "to 1, 1 to 0), or rank = peer = 0 for a one-rank communicator", rank, peer);
        return NULL;
    }
    if (id_check(id, err) != 0)
        return NULL;
    if (!dev || dev_platform_kind(dev_device_platform(dev)) != DEV_KIND_CUDA) {
        dev_err_set(err, MEMRA_E_UNSUPPORTED, "bnd_nccl_create: NCCL moves GPU memory: %s is not a CUDA device",
                    dev ? dev_device_name(dev) : "(no device)");
        return NULL;
    }
    bnd_nccl *b = calloc(1, sizeof *b);
    if (!b || !(b->ev_tx = calloc((size_t)n_slots, sizeof *b->ev_tx)) ||
        !(b->ev_rx = calloc((size_t)n_slots, sizeof *b->ev_rx))) {
        dev_err_set(err, MEMRA_E_NOMEM, "bnd_nccl_create: out of host memory");
        goto fail;
    }
    b->dev = dev;
    b->rank = rank;
    b->peer = peer;
    b->n_ranks = rank == peer ? 1 : 2;
    b->n_slots = n_slots;
    b->slot_bytes = slot_bytes;
    atomic_init(&b->aborted, 0);
    if (pthread_mutex_init(&b->lock, NULL) != 0) {
        dev_err_set(err, MEMRA_E_NOMEM, "bnd_nccl_create: pthread_mutex_init failed");
        goto fail;
    }
    b->lock_init = 1;
    for (int k = 0; k < n_slots; k++)
        if (!(b->ev_tx[k] = dev_event_create(dev, err)) || !(b->ev_rx[k] = dev_event_create(dev, err)))
            goto fail;
    ncclUniqueId uid;
    memcpy(uid.internal, id + ID_NCCL, NCCL_UNIQUE_ID_BYTES);
    int prev;
    if (push_gpu(dev, &prev, err) != 0)
        goto fail;
    ncclResult_t rc = ncclCommInitRank(&b->comm, b->n_ranks, uid, rank);
    pop_gpu(prev);
    if (rc != ncclSuccess) {
        b->comm = NULL;
        nccl_fail(err, rc, NULL, "bnd_nccl_create: ncclCommInitRank(%d ranks, rank %d) on %s", b->n_ranks, rank,
                  dev_device_name(dev));
        goto fail;
    }
    if (handshake(b, err) != 0)
        goto fail;
    return b;
fail:
    bnd_nccl_destroy(b);
    return NULL;
}

void bnd_nccl_destroy(bnd_nccl *b)
{
    if (!b)
        return;
    if (b->comm) {
        int prev;
        const int pushed = push_gpu(b->dev, &prev, NULL) == 0;
        /* an aborted communicator is already freed by ncclCommAbort */
        if (!atomic_load(&b->aborted))
            (void)ncclCommDestroy(b->comm);
        if (pushed)
            pop_gpu(prev);
    }
    for (int k = 0; k < b->n_slots; k++) {
        if (b->ev_tx && b->ev_tx[k])
            dev_event_destroy(b->ev_tx[k]);
        if (b->ev_rx && b->ev_rx[k])
            dev_event_destroy(b->ev_rx[k]);
    }
    free(b->ev_tx);
    free(b->ev_rx);
    if (b->lock_init)
        pthread_mutex_destroy(&b->lock);
    free(b);
}

int bnd_nccl_abort(bnd_nccl *b)
{
    int expect = 0;
    if (!b || !b->comm)
        return 0;
    pthread_mutex_lock(&b->lock); /* an enqueue in progress on the owner's thread finishes first */
    ncclResult_t rc = ncclSuccess;
    if (atomic_compare_exchange_strong(&b->aborted, &expect, 1))
        rc = ncclCommAbort(b->comm);
    pthread_mutex_unlock(&b->lock);
    return rc == ncclSuccess ? 0 : MEMRA_E_DEVICE;
}

int bnd_nccl_check(bnd_nccl *b, dev_err *err)
{
    if (atomic_load(&b->aborted))
        return dev_err_set(err, MEMRA_E_STATE, "bnd_nccl: the communicator was aborted");
    ncclResult_t st = ncclSuccess, rc = ncclCommGetAsyncError(b->comm, &st);
    if (rc != ncclSuccess)
        return nccl_fail(err, rc, b->comm, "bnd_nccl_check: ncclCommGetAsyncError");
    if (st != ncclSuccess && st != ncclInProgress)
        return nccl_fail(err, st, b->comm, "bnd_nccl: the communicator with rank %d failed", b->peer);
    return 0;
}

int bnd_nccl_slots(const bnd_nccl *b) { return b->n_slots; }
int bnd_nccl_rank(const bnd_nccl *b) { return b->rank; }
int bnd_nccl_peer(const bnd_nccl *b) { return b->peer; }
dev_event *bnd_nccl_ev_tx(bnd_nccl *b, int k) { return k >= 0 && k < b->n_slots ? b->ev_tx[k] : NULL; }
dev_event *bnd_nccl_ev_rx(bnd_nccl *b, int k) { return k >= 0 && k < b->n_slots ? b->ev_rx[k] : NULL; }

/* The checks every enqueue shares: slot, size, stream's GPU, not aborted. */
static int op_check(bnd_nccl *b, const char *what, int k, dev_stream *s, size_t bytes, dev_err *err)
{
    if (atomic_load(&b->aborted))
        return dev_err_set(err, MEMRA_E_STATE, "%s: the communicator was aborted", what);
    if (k < 0 || k >= b->n_slots)
        return dev_err_set(err, MEMRA_E_INVAL, "%s: slot %d of %d", what, k, b->n_slots);
    if (bytes > b->slot_bytes)
        return dev_err_set(err, MEMRA_E_INVAL, "%s: %zu bytes into a slot of %zu", what, bytes, b->slot_bytes);
    if (!s || dev_stream_device(s) != b->dev)
        return dev_err_set(err, MEMRA_E_INVAL, "%s: the stream is %s, the communicator's GPU is %s", what,
                           s ? dev_device_name(dev_stream_device(s)) : "(none)", dev_device_name(b->dev));
    return 0;
}

/* send (dir 0) or receive (dir 1) of slot k on s, then its event. */
static int one_way_locked(bnd_nccl *b, int dir, int k, dev_stream *s, void *buf, size_t bytes, dev_err *err);

static int one_way(bnd_nccl *b, int dir, int k, dev_stream *s, void *buf, size_t bytes, dev_err *err)
{
    pthread_mutex_lock(&b->lock); /* bnd_nccl_abort waits for the enqueue; after it, op_check refuses */
    const int r = one_way_locked(b, dir, k, s, buf, bytes, err);
    pthread_mutex_unlock(&b->lock);
    return r;
}

static int one_way_locked(bnd_nccl *b, int dir, int k, dev_stream *s, void *buf, size_t bytes, dev_err *err)
{
    const char *what = dir ? "bnd_nccl_recv_async" : "bnd_nccl_send_async";
    int r;
    if ((r = op_check(b, what, k, s, bytes, err)) != 0)
        return r;
    if (b->n_ranks == 1)
        return dev_err_set(err, MEMRA_E_INVAL, "%s: a one-rank communicator hops to itself with bnd_nccl_hop_async "
                           "(NCCL needs its send and receive in one group)", what);
    int prev;
    if ((r = push_gpu(b->dev, &prev, err)) != 0)
        return r;
    cudaStream_t cs = (cudaStream_t)dev_stream_native(s);
    ncclResult_t rc = dir ? ncclRecv(buf, bytes, ncclUint8, b->peer, b->comm, cs)
                          : ncclSend(buf, bytes, ncclUint8, b->peer, b->comm, cs);
    pop_gpu(prev);
    if (rc != ncclSuccess)
        return nccl_fail(err, rc, b->comm, "%s: %s(%zu B, slot %d, rank %d) on stream '%s'", what,
                         dir ? "ncclRecv" : "ncclSend", bytes, k, b->peer, dev_stream_name(s));
    /* ordered by s: the event completes once the transfer on s has (send: src is free; receive: dst holds it) */
    if ((r = dev_event_record_async(dir ? b->ev_rx[k] : b->ev_tx[k], s)) != 0)
        return dev_err_set(err, r, "%s: recording %s[%d] on stream '%s' failed", what, dir ? "ev_rx" : "ev_tx", k,
                           dev_stream_name(s));
    return 0;
}

int bnd_nccl_send_async(bnd_nccl *b, int k, dev_stream *producer, const void *src, size_t bytes, dev_err *err)
{
    return one_way(b, 0, k, producer, (void *)src, bytes, err);
}

int bnd_nccl_recv_async(bnd_nccl *b, int k, dev_stream *consumer, void *dst, size_t bytes, dev_err *err)
{
    return one_way(b, 1, k, consumer, dst, bytes, err);
}

int bnd_nccl_hop_async(bnd_nccl *b, int k, dev_stream *producer, const void *src, dev_stream *consumer, void *dst,
                       size_t bytes, dev_err *err)
{
    int r;
    if ((r = op_check(b, "bnd_nccl_hop_async", k, producer, bytes, err)) != 0 ||
        (r = op_check(b, "bnd_nccl_hop_async", k, consumer, bytes, err)) != 0)
        return r;
    if (b->n_ranks != 1)
        return dev_err_set(err, MEMRA_E_INVAL, "bnd_nccl_hop_async: a two-rank communicator (rank %d of 2) sends "
                           "with bnd_nccl_send_async and receives with bnd_nccl_recv_async", b->rank);
    int prev;
    if ((r = push_gpu(b->dev, &prev, err)) != 0)
        return r;
    ncclResult_t rc = ncclGroupStart();
    if (rc != ncclSuccess) {
        pop_gpu(prev);
        return nccl_fail(err, rc, b->comm, "bnd_nccl_hop_async: ncclGroupStart");
    }
    /* the group joins the two streams: the receive's writes to dst and the send's reads of src are ordered
     * after the work enqueued before on both streams, and both streams' later work after the transfer */
    ncclResult_t rs = ncclSend(src, bytes, ncclUint8, 0, b->comm, (cudaStream_t)dev_stream_native(producer));
    ncclResult_t rr = ncclRecv(dst, bytes, ncclUint8, 0, b->comm, (cudaStream_t)dev_stream_native(consumer));
    rc = ncclGroupEnd(); /* ends the group on every path */
    pop_gpu(prev);
    if (rs != ncclSuccess || rr != ncclSuccess || rc != ncclSuccess)
        return nccl_fail(err, rs != ncclSuccess ? rs : rr != ncclSuccess ? rr : rc, b->comm,
                         "bnd_nccl_hop_async: %s(%zu B, slot %d) on streams '%s' -> '%s'",
                         rs != ncclSuccess ? "ncclSend" : rr != ncclSuccess ? "ncclRecv" : "ncclGroupEnd", bytes, k,
                         dev_stream_name(producer), dev_stream_name(consumer));
    /* ordered by the group: each stream passes its record only after the transfer */
    if ((r = dev_event_record_async(b->ev_tx[k], producer)) != 0 ||
        (r = dev_event_record_async(b->ev_rx[k], consumer)) != 0)
        return dev_err_set(err, r, "bnd_nccl_hop_async: recording slot %d's events failed", k);
    return 0;
}

#else /* no NCCL in this build: the API stays, and says why it cannot serve */

#define NO_NCCL "this build has no NCCL (configure with CUDA and NCCL found: -DMEMRA_NCCL=ON; scripts/setup " \
                "installs PyPI's nvidia-nccl-cu13)"

int bnd_nccl_built(void) { return 0; }

int bnd_nccl_version(int *code, dev_err *err)
{
    *code = 0;
    return dev_err_set(err, MEMRA_E_UNSUPPORTED, "bnd_nccl_version: " NO_NCCL);
}

int bnd_nccl_unique_id(uint8_t id[BND_NCCL_ID_BYTES], dev_err *err)
{
    return dev_err_set(err, MEMRA_E_UNSUPPORTED, "bnd_nccl_unique_id: " NO_NCCL);
}

bnd_nccl *bnd_nccl_create(dev_device *dev, const uint8_t id[BND_NCCL_ID_BYTES], int rank, int peer, int n_slots,
                          size_t slot_bytes, dev_err *err)
{
    dev_err_set(err, MEMRA_E_UNSUPPORTED, "bnd_nccl_create: " NO_NCCL);
    return NULL;
}

void bnd_nccl_destroy(bnd_nccl *b) { (void)b; }
int bnd_nccl_abort(bnd_nccl *b) { return 0; }
int bnd_nccl_check(bnd_nccl *b, dev_err *err) { return dev_err_set(err, MEMRA_E_UNSUPPORTED, "bnd_nccl_check: " NO_NCCL); }
int bnd_nccl_slots(const bnd_nccl *b) { return 0; }
int bnd_nccl_rank(const bnd_nccl *b) { return -1; }
int bnd_nccl_peer(const bnd_nccl *b) { return -1; }
dev_event *bnd_nccl_ev_tx(bnd_nccl *b, int k) { return NULL; }
dev_event *bnd_nccl_ev_rx(bnd_nccl *b, int k) { return NULL; }

int bnd_nccl_send_async(bnd_nccl *b, int k, dev_stream *producer, const void *src, size_t bytes, dev_err *err)
{
    return dev_err_set(err, MEMRA_E_UNSUPPORTED, "bnd_nccl_send_async: " NO_NCCL);
}

int bnd_nccl_recv_async(bnd_nccl *b, int k, dev_stream *consumer, void *dst, size_t bytes, dev_err *err)
{
    return dev_err_set(err, MEMRA_E_UNSUPPORTED, "bnd_nccl_recv_async: " NO_NCCL);
}

int bnd_nccl_hop_async(bnd_nccl *b, int k, dev_stream *producer, const void *src, dev_stream *consumer, void *dst,
                       size_t bytes, dev_err *err)
{
    return dev_err_set(err, MEMRA_E_UNSUPPORTED, "bnd_nccl_hop_async: " NO_NCCL);
}

#endif
