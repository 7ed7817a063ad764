/* The NCCL boundary transport: one side of a pipeline boundary whose two stages live in different processes
 * (ranks), each on its own GPU. It keeps the slot/credit/event contract of transport/boundary.h, with the
 * slot bytes moved by ncclSend / ncclRecv enqueued on the stages' OWN streams:
 *   producer stream:  ... walk t ... | ncclSend(frame, slot k) | record ev_tx[k]
 *   consumer stream:  ... walk t-1 ... | ncclRecv(frame, slot k) | record ev_rx[k] | walk t ...
 * Ordering rule. Each stream orders its own side exactly as a d2d/peer hop does: the producer's send reads
 * its frame after the walk that wrote it and before the next step rewrites it; the consumer's receive
 * writes its frame after the previous walk read it and before the next walk reads it. The consumer's wait
 * on ev_tx[k] of a local boundary becomes the receive's place in the consumer's stream: NCCL matches the
 * n-th send of the pair's communicator with the n-th receive, and the receive completes only once the
 * matching send's bytes have arrived, so "the consumer reads slot k after the producer wrote it" holds
 * without an event crossing processes. ev_rx[k] is recorded right after the receive (the slot is then
 * "copied out": its bytes are in the consumer's frame), ev_tx[k] right after the send (the producer's frame
 * may be rewritten). Both events are local to their process; other streams of that process order
 * themselves after a hop with them.
 * Slots. A slot's bytes live in NCCL's receive buffers on the consumer's GPU; the transport keeps no slot
 * memory of its own, and slot k is the token's index on the boundary (the credit's name). n_slots and
 * slot_bytes bound k and each message, as bnd_create's do.
 * Credits. The transport moves slot bytes only. Credits return over the host control channel (MPI between
 * ranks): the consumer returns credit k once its receive of slot k is ENQUEUED, and the producer sends into
 * slot k only while holding its credit. The credit bounds the sends in flight to n_slots; NCCL's own flow
 * control keeps its buffers safe. The producer posts TOKEN(k) over the same channel once its send is
 * enqueued, and the consumer enqueues the receive on TOKEN(k), so both sides post one operation per token,
 * in token order, as NCCL's in-order matching needs. A send and its receive move the same byte count (NCCL
 * requires it): the consumer takes the count from the step metadata that travels with TOKEN(k).
 * Stalls, not deadlocks. NCCL's send is blocking for the GPU: a send that NCCL's buffers cannot hold keeps
 * the producer's stream until the consumer's stream reaches the matching receive. The pipeline's boundaries
 * form a chain (a consumer's stream waits on nothing its producer's stream has behind the send), so this
 * costs overlap at worst: the producer's next walk begins once the receive has begun.
 * Communicators. One per boundary pair: a two-rank communicator (ranks 0 and 1: the pair's own ranks, not
 * the MPI world's) built from an id that one side makes with bnd_nccl_unique_id and ships to the other
 * (under mpirun the producer's rank sends it to the consumer's at create, actors/pp_rank.c). rank == peer == 0
 * makes a one-rank communicator that sends to itself (one process, one GPU: tests and benchmarks), whose hops
 * go through bnd_nccl_hop_async.
 * Threads: a bnd_nccl is used by one host thread at a time (its stage actor); create and destroy by the
 * runtime when no stage runs. bnd_nccl_abort may be called from another thread (see there).
 * Builds without NCCL (MEMRA_NCCL=OFF, or AUTO without NCCL found) keep this API: every call that would
 * reach NCCL answers MEMRA_E_UNSUPPORTED saying so. */
#ifndef BND_NCCL_H
#define BND_NCCL_H

#include <stddef.h>
#include <stdint.h>
#include "device/dev.h"

/* Bytes of an id from bnd_nccl_unique_id: a tag, the maker's NCCL version, a checksum, ncclUniqueId. */
#define BND_NCCL_ID_BYTES 144

typedef struct bnd_nccl bnd_nccl;

/* 1 when the library was built with NCCL, else 0. */
int bnd_nccl_built(void);

/* The NCCL library's version at run time (ncclGetVersion: 22809 = 2.28.9) into *code. Returns 0, or
 * MEMRA_E_UNSUPPORTED (no NCCL in this build) / MEMRA_E_DEVICE (the call failed), err says which. */
int bnd_nccl_version(int *code, dev_err *err);

/* Make a new communicator id into id[BND_NCCL_ID_BYTES] (ncclGetUniqueId: it also starts NCCL's bootstrap
 * listener in this process, so call it on the side that takes part in the communicator). The caller ships
 * the bytes as they are to the other side. Returns 0, or MEMRA_E_UNSUPPORTED / MEMRA_E_DEVICE + err. */
int bnd_nccl_unique_id(uint8_t id[BND_NCCL_ID_BYTES], dev_err *err);

/* Join the pair's communicator on GPU dev as `rank`, talking to `peer` (ranks 0 and 1; or rank == peer == 0
 * for a one-rank communicator). Collective: blocks until the other side calls it with the same id, then
 * exchanges one small message both ways (each side sends its rank and checks the peer's) so that every
 * connection exists before the first token. Host-synchronous; cost: NCCL's start-up (tens to hundreds of
 * milliseconds). n_slots (>= 1) and slot_bytes (> 0) bound the slots and message size.
 * The checks run in the order slots, ranks, id, device, all before NCCL is called (none needs a GPU).
 * Returns NULL + err: MEMRA_E_INVAL (id not made by bnd_nccl_unique_id, damaged, made by another NCCL
 * version; bad rank/peer; bad slots), MEMRA_E_UNSUPPORTED (no NCCL in this build, dev not a CUDA device),
 * MEMRA_E_DEVICE (an NCCL or CUDA call failed: the message names it with NCCL's own detail). */
bnd_nccl *bnd_nccl_create(dev_device *dev, const uint8_t id[BND_NCCL_ID_BYTES], int rank, int peer, int n_slots,
                          size_t slot_bytes, dev_err *err);

/* Free the communicator (ncclCommDestroy) and events; every stream that used them must have been synced.
 * After bnd_nccl_abort, frees what is left. NULL is a no-op. */
void bnd_nccl_destroy(bnd_nccl *b);

/* Abort the communicator (ncclCommAbort) from any thread, also while the owning thread enqueues a send or a
 * receive (that enqueue finishes first: both hold the side's lock) or waits on a stream; not during create,
 * destroy or bnd_nccl_hop_async. NCCL operations waiting for a peer that is gone end, so
 * their streams can be synced and the runtime torn down. Every later send/receive/hop is refused
 * (MEMRA_E_STATE). Idempotent. Returns 0, or MEMRA_E_DEVICE (NCCL refused). */
int bnd_nccl_abort(bnd_nccl *b);

/* NCCL's asynchronous error of the communicator (ncclCommGetAsyncError): 0 while healthy, else
 * MEMRA_E_DEVICE + err naming the peer's failure. Cheap; poll it while waiting on a stream that holds a
 * send or receive. */
int bnd_nccl_check(bnd_nccl *b, dev_err *err);

int bnd_nccl_slots(const bnd_nccl *b);
int bnd_nccl_rank(const bnd_nccl *b);  /* this side's rank in the pair's communicator */
int bnd_nccl_peer(const bnd_nccl *b);  /* the other side's (== rank for a one-rank communicator) */

/* The slot's events (local to this process; valid until destroy): ev_tx[k] is recorded after each send of
 * slot k on the producer's stream, ev_rx[k] after each receive on the consumer's. NULL when k is out of
 * range. */
dev_event *bnd_nccl_ev_tx(bnd_nccl *b, int k);
dev_event *bnd_nccl_ev_rx(bnd_nccl *b, int k);

/* On the producer stream (on the communicator's GPU): ncclSend bytes from src to the peer as slot k, then
 * record ev_tx[k]. The producer holds slot k's credit. Returns at once after enqueuing. Returns 0, or
 * MEMRA_E_INVAL (k, bytes, stream's device; a one-rank communicator: use bnd_nccl_hop_async), MEMRA_E_STATE
 * (aborted), MEMRA_E_DEVICE (NCCL or CUDA refused the enqueue; the message names the call). */
int bnd_nccl_send_async(bnd_nccl *b, int k, dev_stream *producer, const void *src, size_t bytes, dev_err *err);

/* On the consumer stream: ncclRecv slot k's bytes from the peer into dst (the consumer's frame), then record
 * ev_rx[k]. After this returns the consumer may hand slot k's credit back. Same returns as the send. */
int bnd_nccl_recv_async(bnd_nccl *b, int k, dev_stream *consumer, void *dst, size_t bytes, dev_err *err);

/* A one-rank communicator only: one hop of slot k to itself, the send on the producer stream and the receive
 * on the consumer stream in one NCCL group (NCCL needs both in one group on a single rank; the group makes
 * the two streams wait for each other around the transfer). Then records ev_tx[k] on the producer and
 * ev_rx[k] on the consumer, as the two-rank calls do. Same returns as the send. */
int bnd_nccl_hop_async(bnd_nccl *b, int k, dev_stream *producer, const void *src, dev_stream *consumer, void *dst,
                       size_t bytes, dev_err *err);

#endif
