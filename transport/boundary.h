/* A pipeline boundary: the only road a tensor takes between two stages (the hidden state, plus the step's
 * positions and sequence ids packed behind it). K persistent slots live on the CONSUMER's device; each slot k
 * has two events:
 *   ev_tx[k]  recorded on the producer's stream after it wrote slot k    (consumer waits it before reading)
 *   ev_rx[k]  recorded on the consumer's stream after it copied slot k out (producer waits it before writing)
 * Transport per boundary: a d2d copy when both stages share a device, a peer copy (cudaMemcpyPeerAsync)
 * across devices; between processes BND_MPI (host-staged) or BND_NCCL (below). The device events make a hop safe;
 * the HOST credit protocol (actors/, docs/architecture.md "Credits") makes sure the consumer's ev_rx[k] record is
 * enqueued before the producer enqueues its wait on it — without the credit the producer's wait could bind to an
 * older record and overrun the slot.
 * Threads: bnd_send_async / bnd_next_slot are called only by the producer stage's actor, bnd_recv_async only
 * by the consumer stage's actor; create/destroy by the runtime when no stage runs. */
#ifndef BND_BOUNDARY_H
#define BND_BOUNDARY_H

#include <stddef.h>
#include <stdint.h>
#include "device/dev.h"

typedef enum bnd_transport { BND_DTOD = 0, BND_PEER = 1, BND_MPI = 2, BND_NCCL = 3 } bnd_transport;

/* BND_MPI (stages in different processes; transport/bnd_mpi.h): each process holds the boundary's half on its own
 * stage's device. Its K slots are page-locked host buffers of BND_MPI_HDR + slot_bytes: the header is the step's
 * metadata, written by the rank's transport actor, and the payload is the frame, so one message carries both.
 * Ordering rule across processes (the same contract as dtod/peer, with messages where a device event cannot reach):
 *   producer rank: the stage's stream copies its frame into slot k (d2h) and records ev_tx[k]; the transport
 *     sends slot k (header + payload) only once ev_tx[k] completed;
 *   consumer rank: a completed receive of slot k is the slot's ready mark (the TOKEN naming k is posted to the
 *     consumer stage after it); the stage copies the payload into its frame (h2d) and records ev_rx[k]; its CREDIT
 *     goes to the transport, which sends it to the producer rank only once ev_rx[k] completed;
 *   producer rank: the credit for k reaches the producer stage once the credit message arrived AND the send of
 *     slot k completed locally, so the producer never rewrites a slot MPI still reads, nor fills the consumer's
 *     slot k before it was copied out.
 * The credit therefore carries what ev_rx carries within a process; no device event crosses the process. */
#define BND_MPI_HDR 2048 /* bytes of step metadata in front of each MPI slot's payload */

/* BND_NCCL (stages in different processes, each on its own GPU; transport/bnd_nccl.h): each process holds the
 * boundary's half as one side of the pair's two-rank NCCL communicator (the producer is its rank 0, the consumer
 * its rank 1). It holds no slot memory: a slot's bytes live in NCCL's buffers, and k names the token's credit.
 * Ordering rule across processes (bnd_nccl.h explains why each step holds):
 *   producer rank: the stage's stream records ev_wire[k] after its walk (the frame is written, the walk's markers
 *     ran), then enqueues ncclSend(frame) and records ev_tx[k] (the frame may be rewritten). The transport sends
 *     the step's header once ev_wire[k] completed, never waiting on ev_tx[k]: the send completes only once the
 *     consumer's receive is enqueued, which the header makes happen;
 *   consumer rank: the header's arrival posts TOKEN(k) to the stage, which enqueues ncclRecv(frame) of the step's
 *     own byte count (a send and its receive match in count) and records ev_rx[k]; the receive completes on the
 *     consumer's stream only once the bytes arrived, so no event crosses the process. Its CREDIT crosses back as
 *     soon as the stage posts it (the receive is enqueued);
 *   producer rank: the credit for k reaches the producer stage once the credit message arrived AND the header send
 *     completed. The producer's send into slot k needs no wait on ev_rx[k]: the credit orders it, and NCCL's own
 *     flow control keeps its buffers. Both sides post one operation per token in token order (TOKENs and credits
 *     keep it), which NCCL's in-order matching of the pair's sends and receives needs. So every TOKEN(k) with k >= 0
 *     needs its receive: a consumer stage that drops one (its queue out of host memory) leaves the producer's send
 *     unmatched, and the pair stalls until the rank's transport stops. */

typedef struct bnd_boundary bnd_boundary;

/* K slots of slot_bytes each on dst's device. Returns NULL + err on failure. */
bnd_boundary *bnd_create(dev_device *src, dev_device *dst, int n_slots, size_t slot_bytes, dev_err *err);
/* The half of an MPI boundary on `local` (the producer's device when producer = 1, else the consumer's): K host
 * slots of BND_MPI_HDR + slot_bytes, ev_tx and ev_rx on local. NULL + err on failure. */
bnd_boundary *bnd_create_mpi(dev_device *local, int producer, int n_slots, size_t slot_bytes, dev_err *err);
/* An MPI boundary's slot k: the message [header | payload] (BND_MPI_HDR + slot_bytes bytes, host memory), and its
 * events, for the transport actor's polling (dev_event_query). NULL for other kinds. */
void *bnd_mpi_slot(bnd_boundary *b, int k);
dev_event *bnd_mpi_ev_tx(bnd_boundary *b, int k);
dev_event *bnd_mpi_ev_rx(bnd_boundary *b, int k);
/* The half of an NCCL boundary on `local` (a GPU): joins the pair's communicator made from id (BND_NCCL_ID_BYTES
 * bytes from bnd_nccl_unique_id on the producer's rank) as rank 0 (producer = 1) or 1. Collective: blocks until the
 * other rank joins with the same id (NCCL's start-up). NULL + err (bnd_nccl_create's refusals and NCCL's errors). */
bnd_boundary *bnd_create_nccl(dev_device *local, int producer, const uint8_t *id, int n_slots, size_t slot_bytes,
                              dev_err *err);
/* The event after which the rank's transport may send slot k's message: BND_MPI ev_tx[k] (the payload is in the
 * slot), BND_NCCL ev_wire[k] (the walk before the ncclSend ended: the header only). NULL for other kinds. */
dev_event *bnd_wire_ready(bnd_boundary *b, int k);
/* BND_NCCL: abort the communicator (bnd_nccl_abort), from any thread, so a stream waiting in NCCL on a dead peer
 * ends. 0 and nothing done for other kinds. */
int bnd_abort(bnd_boundary *b);
/* BND_NCCL: NCCL's asynchronous error of the communicator (bnd_nccl_check; a watchdog may call it from another
 * thread), 0 while healthy; 0 for other kinds. Cheap: poll it while a stream may wait in NCCL. */
int bnd_check(bnd_boundary *b, dev_err *err);

/* The transport of a boundary between two ranks, from what both sides know: each stage's device is a GPU, both
 * ranks' builds have NCCL, both stages are on one GPU (same host and bus id), the MEMRA_PP_NCCL door (ACT_NCCL_*:
 * 0 auto, 1 off). BND_NCCL only when every condition holds, else BND_MPI; *why (a static string) says why, for
 * the line the runtime prints. Pure: every rank that computes it from the same inputs gets the same answer. */
bnd_transport bnd_pick_remote(int producer_gpu, int consumer_gpu, int nccl_built, int same_gpu, int door_off,
                              const char **why);

/* Frees slots and events; every stream that used them must have been synced. BND_NCCL: the communicator is
 * aborted, a local teardown that waits for no peer. */
void bnd_destroy(bnd_boundary *b);

bnd_transport bnd_transport_kind(const bnd_boundary *b);
int bnd_slots(const bnd_boundary *b);

/* The boundary's own overlap step counter: the slot of the next send. overlap=1 rotates 0,1,..,K-1; overlap=0
 * always uses slot 0 (one token in flight on this boundary). bnd_peek_slot tells the slot without taking it
 * (the producer checks it holds that slot's credit first); bnd_next_slot takes it. Producer actor only. */
int bnd_peek_slot(const bnd_boundary *b, int overlap);
int bnd_next_slot(bnd_boundary *b, int overlap);

/* On the producer stream: wait ev_rx[k] (BND_MPI, BND_NCCL: the credit orders it, see above; no wait), copy bytes
 * from src (producer's device) into slot k, record ev_tx[k] (BND_NCCL: record ev_wire[k], ncclSend, record ev_tx[k]).
 * The producer must hold slot k's credit. */
int bnd_send_async(bnd_boundary *b, int k, dev_stream *producer, const void *src, size_t bytes);

/* Test hook: with on = 1 every later bnd_send_async skips its wait on ev_rx[k], so a send may overwrite a slot
 * the consumer has not copied out yet: the CPU backend's race checker reports it (tests/test_boundary.c). Set by
 * the producer's thread while no send runs; a boundary nobody sets it on pays one predicted branch per send. */
void bnd_test_skip_rx_wait(bnd_boundary *b, int on);

/* On the consumer stream: wait ev_tx[k] (BND_MPI: the receive completed before the TOKEN; no wait), copy bytes of
 * slot k into dst (consumer's device), record ev_rx[k] (BND_NCCL: ncclRecv of bytes, which must be the step's own
 * count as the producer sent it, then ev_rx[k]).
 * After this returns the consumer may hand slot k's credit back to the producer. */
int bnd_recv_async(bnd_boundary *b, int k, dev_stream *consumer, void *dst, size_t bytes);

#endif
