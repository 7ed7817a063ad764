/* A pipeline boundary: the only road a tensor takes between two stages (the hidden state, plus the step's
 * positions and sequence ids packed behind it). K persistent slots live on the CONSUMER's device; each slot k
 * has two events:
 *   ev_tx[k]  recorded on the producer's stream after it wrote slot k    (consumer waits it before reading)
 *   ev_rx[k]  recorded on the consumer's stream after it copied slot k out (producer waits it before writing)
 * Transport per boundary: a d2d copy when both stages share a device, a peer copy (cudaMemcpyPeerAsync)
 * across devices. The device events make a hop safe; the HOST credit protocol (actors/, docs/architecture.md "Credits") makes
 * sure the consumer's ev_rx[k] record is enqueued before the producer enqueues its wait on it — without the
 * credit the producer's wait could bind to an older record and overrun the slot.
 * Threads: bnd_send_async / bnd_next_slot are called only by the producer stage's actor, bnd_recv_async only
 * by the consumer stage's actor; create/destroy by the runtime when no stage runs. */
#ifndef BND_BOUNDARY_H
#define BND_BOUNDARY_H

#include <stddef.h>
#include <stdint.h>
#include "device/dev.h"

typedef enum bnd_transport { BND_DTOD = 0, BND_PEER = 1, BND_MPI = 2 } bnd_transport;

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

/* Frees slots and events; every stream that used them must have been synced. */
void bnd_destroy(bnd_boundary *b);

bnd_transport bnd_transport_kind(const bnd_boundary *b);
int bnd_slots(const bnd_boundary *b);

/* The boundary's own overlap step counter: the slot of the next send. overlap=1 rotates 0,1,..,K-1; overlap=0
 * always uses slot 0 (one token in flight on this boundary). bnd_peek_slot tells the slot without taking it
 * (the producer checks it holds that slot's credit first); bnd_next_slot takes it. Producer actor only. */
int bnd_peek_slot(const bnd_boundary *b, int overlap);
int bnd_next_slot(bnd_boundary *b, int overlap);

/* On the producer stream: wait ev_rx[k] (BND_MPI: the credit orders it, see above; no wait), copy bytes from src (producer's device) into slot k, record ev_tx[k].
 * The producer must hold slot k's credit. */
int bnd_send_async(bnd_boundary *b, int k, dev_stream *producer, const void *src, size_t bytes);

/* Test hook: with on = 1 every later bnd_send_async skips its wait on ev_rx[k], so a send may overwrite a slot
 * the consumer has not copied out yet: the CPU backend's race checker reports it (tests/test_boundary.c). Set by
 * the producer's thread while no send runs; a boundary nobody sets it on pays one predicted branch per send. */
void bnd_test_skip_rx_wait(bnd_boundary *b, int on);

/* On the consumer stream: wait ev_tx[k] (BND_MPI: the receive completed before the TOKEN; no wait), copy bytes of
 * slot k into dst (consumer's device), record ev_rx[k].
 * After this returns the consumer may hand slot k's credit back to the producer. */
int bnd_recv_async(bnd_boundary *b, int k, dev_stream *consumer, void *dst, size_t bytes);

#endif
