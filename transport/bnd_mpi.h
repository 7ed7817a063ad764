/* The MPI wire: the process group a split runtime spans when it is launched by `mpirun -np P` (stage s on rank
 * owner(s), rank 0 owning the API, the submitter, stage 0 and the readback), and the point-to-point calls its
 * transport uses. Built against Open MPI when MEMRA_MPI finds it (MEMRA_HAVE_MPI); without it every process is a
 * world of one: bnd_mpi_size() is 1 and nothing here sends.
 *
 * Threads: MPI is initialised with MPI_THREAD_SERIALIZED. One thread at a time calls into this file: the rank's
 * transport actor while a runtime lives (actors/pp_rank.c, the only MPI caller then), the main thread (bootstrap,
 * the control messages that create and destroy runtimes) while none does. Errors return (MPI_ERRORS_RETURN on the
 * world communicator): a dead peer is an error message naming the call and the peer, never an abort here.
 *
 * What crosses it per boundary: the MPI transport stages a slot through host memory (a d2h copy on the
 * producer's stream, the send, the h2d copy on the consumer's). Between two ranks' GPUs the NCCL transport
 * (transport/bnd_nccl.h, BND_NCCL in boundary.h) enqueues ncclSend/ncclRecv on the stage streams instead, and this
 * wire carries the step headers, credits, results and control only. */
#ifndef BND_MPI_H
#define BND_MPI_H

#include <stddef.h>
#include <stdint.h>
#include "device/err.h"

/* Message tags. Slot k's bytes travel with tag BND_TAG_SLOT + k, so they land in the consumer's slot k. */
enum {
    BND_TAG_CREATE = 1,  /* rank 0 -> all: create a runtime (the configuration) */
    BND_TAG_READY = 2,   /* all -> rank 0: created (or the error) */
    BND_TAG_EXIT = 3,    /* rank 0 -> all: leave the serve loop */
    BND_TAG_DESTROY = 4, /* rank 0's transport -> all: the runtime is over */
    BND_TAG_CREDIT = 5,  /* consumer -> producer: slot k is free again */
    BND_TAG_RESULT = 6,  /* last stage's rank -> rank 0: a step's result */
    BND_TAG_FAILED = 7,  /* producer -> consumer: a failed step passed along (header only, no slot) */
    BND_TAG_BEAT = 8,    /* every transport -> every rank: alive */
    BND_TAG_PICK = 9,    /* at create, a cross-rank boundary's two ranks: each side's device, the transport picked */
    BND_TAG_SLOT = 16,   /* + k */
};

/* Initialise MPI when this process was launched by mpirun (the launcher's environment says so); a process
 * started alone stays a world of one and MPI is not touched. Returns 0, or MEMRA_E_DEVICE (MPI_Init_thread
 * failed, or the library gives less than MPI_THREAD_SERIALIZED), MEMRA_E_UNSUPPORTED (launched by mpirun with
 * P > 1 but built without MPI). */
int bnd_mpi_init(int *argc, char ***argv, dev_err *err);
int bnd_mpi_rank(void);   /* this process's rank (0 alone) */
int bnd_mpi_size(void);   /* ranks in the world (1 alone) */
/* End MPI: MPI_Finalize when status is 0, MPI_Abort(status) otherwise (a peer may be dead: Finalize could wait
 * for it). No-op in a world of one. */
void bnd_mpi_finish(int status);

typedef struct bnd_mpi_req bnd_mpi_req; /* a non-blocking send or receive in flight */

/* Non-blocking send of bytes to rank `to` with tag; buf must stay untouched until bnd_mpi_test says done.
 * *req: the request (free it with bnd_mpi_test's done or bnd_mpi_req_free). Returns 0 or MEMRA_E_DEVICE. */
int bnd_mpi_isend(int to, int tag, const void *buf, size_t bytes, bnd_mpi_req **req, dev_err *err);
/* Non-blocking receive of the message a probe announced (from, tag) into buf (cap bytes); buf must stay untouched
 * until bnd_mpi_test says done. A receive in flight never blocks its caller, so a sender stopped mid-message (a
 * large one moves only while its sender runs) leaves the caller free to notice its silence. 0 or MEMRA_E_DEVICE
 * (at bnd_mpi_test too when the message is larger than cap). */
int bnd_mpi_irecv(int from, int tag, void *buf, size_t cap, bnd_mpi_req **req, dev_err *err);
/* *done = 1 once the send or receive completed (req is then freed and must not be used again). 0 or
 * MEMRA_E_DEVICE. */
int bnd_mpi_test(bnd_mpi_req *req, int *done, dev_err *err);
/* Forget a request without waiting (a shutdown: the peer is gone or the bytes no longer matter). */
void bnd_mpi_req_free(bnd_mpi_req *req);
/* Blocking send (control messages, small). 0 or MEMRA_E_DEVICE. */
int bnd_mpi_send(int to, int tag, const void *buf, size_t bytes, dev_err *err);
/* Is a message with tag (from any rank when from < 0) waiting? 1 (and *src, *bytes), 0, or MEMRA_E_DEVICE. Never
 * blocks. */
int bnd_mpi_probe(int from, int tag, int *src, size_t *bytes, dev_err *err);
/* Receive the message a probe announced into buf (cap bytes). 0 or MEMRA_E_DEVICE (also when it is larger). */
int bnd_mpi_recv(int from, int tag, void *buf, size_t cap, dev_err *err);

#endif
