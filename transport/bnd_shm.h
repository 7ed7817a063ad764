/* Test hook: a stand-in for one NCCL pair (transport/bnd_nccl.h) on the CPU backend, so the runtime's BND_NCCL
 * wiring (the create-time pick and id, the header-only wire, credits on enqueue) runs under mpirun on a machine
 * without GPUs. MEMRA_TEST_NCCL_EMU=1 on every rank turns it on (pp_rank_boundary); nothing else uses it.
 * The pair shares one file of n_slots slots mapped by both processes (one host). It keeps NCCL's semantics where
 * the runtime depends on them: a send and a receive are ops on the stage's own stream; the n-th send of slot k
 * matches the n-th receive of slot k; a receive completes only once its send's bytes are in dst; a send waits (on
 * its stream) until the receive of the slot's previous send completed, as NCCL's blocking send waits for its
 * buffers. An abort makes every waiting op return, leaving its bytes undefined.
 * Threads: send by the producer stage's actor, receive by the consumer's, abort from any thread; the ops run on
 * the streams' workers. Shared state: the file's counters (atomics, both processes), `aborted` (atomic). */
#ifndef BND_SHM_H
#define BND_SHM_H

#include <stddef.h>
#include <stdint.h>
#include "device/dev.h"
#include "transport/bnd_nccl.h"

typedef struct bnd_shm bnd_shm;

/* 1 when MEMRA_TEST_NCCL_EMU=1 (read by the main thread at create). */
int bnd_shm_wanted(void);
/* Producer's rank: make the pair's file (n_slots slots of slot_bytes) and write its id into id. 0 or err. */
int bnd_shm_make_id(uint8_t id[BND_NCCL_ID_BYTES], int n_slots, size_t slot_bytes, dev_err *err);
/* 1 when id came from bnd_shm_make_id. */
int bnd_shm_is_id(const uint8_t *id);
/* Map the pair's file. NULL + err. Close unmaps it; the producer's close also removes its name. */
bnd_shm *bnd_shm_open(const uint8_t *id, int producer, dev_err *err);
void bnd_shm_close(bnd_shm *s);
void bnd_shm_abort(bnd_shm *s);
/* On the stream: send src as slot k / receive slot k into dst (bytes <= slot_bytes). 0 or MEMRA_E_*. */
int bnd_shm_send_async(bnd_shm *s, int k, dev_stream *st, const void *src, size_t bytes);
int bnd_shm_recv_async(bnd_shm *s, int k, dev_stream *st, void *dst, size_t bytes);

#endif
