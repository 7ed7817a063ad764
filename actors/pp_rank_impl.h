/* The state shared by pp_rank.c (start-up, the boundary pick, the serve loop of ranks > 0) and pp_rank_wire.c (the
 * transport actor): the wire's message layouts and a rank's pp_rank. Private to those two files.
 *
 * Shared state:
 *   pp_rank fields marked [tp]       the transport actor's thread only
 *   over, over_status, over_err      transport sets, the serve loop waits, pp_rank_check reads [lock]
 *   owner[], first, last, in, out,   written at create (main thread), read-only while actors run (ordered by
 *   in_nccl, out_nccl, hdr[],        the actors' start); in/out's NCCL communicators: used by the stage actors,
 *   hdr_cap                          aborted by the transport (die; each half's lock orders the two); hdr[k]'s
 *                                    bytes: the transport's, between its send and that send's completion
 * pp_rank.c's g_active (a runtime spans the ranks) is the main thread's only (act_pp_create / destroy). */
#ifndef ACT_PP_RANK_IMPL_H
#define ACT_PP_RANK_IMPL_H

#include "actors/pp_internal.h"
#include "actors/pp_rank.h"
#include "model/gguf_synth.h"
#include "transport/bnd_mpi.h"
#include "transport/bnd_nccl.h"

#define PP_WIRE_MAGIC 0x6d656d72u /* "memr" */
#define PP_BEAT_NS 250000000ull   /* a beat to every rank each 250 ms */
#define PP_SILENT_NS 2500000000ull /* a rank silent for 2.5 s is dead or stuck: stop (every rank within 5 s) */
#define PP_READY_NS 600000000000ull /* the other ranks load the model: rank 0 waits up to 10 min for READY */

/* The header in front of a slot's payload (BND_MPI_HDR bytes at most). */
typedef struct pp_wire_step {
    uint32_t magic;
    int32_t k;             /* the slot; -1: a failed step, no payload */
    uint64_t id;
    int32_t kind, B, out_rows, argmax, status;
    act_pp_seams seams;
    uint64_t t[2 * ACT_PP_MAX_STAGES]; /* walk begin/end per stage so far (CLOCK_MONOTONIC of the walking rank) */
    char msg[256];         /* a failed step's error */
} pp_wire_step;
_Static_assert(sizeof(pp_wire_step) <= BND_MPI_HDR, "the step header must fit BND_MPI_HDR");

/* A step's result, last stage's rank -> rank 0, followed by its result bytes (pp_result_bytes). */
typedef struct pp_wire_result {
    uint32_t magic;
    int32_t status;
    uint64_t id;
    uint64_t t[2 * ACT_PP_MAX_STAGES];
    char msg[DEV_ERR_MSG];
} pp_wire_result;

/* Rank 0 -> all: a runtime to build. */
typedef struct pp_wire_create {
    uint32_t magic;
    int32_t N, fence[ACT_PP_MAX_STAGES + 1];
    act_pp_config cfg;
    int32_t n_seq, n_ctx, max_rows, kv_type, act_type, batch_invariant, stamps;
    int32_t matmul_x8;               /* rank 0's CPU matmul mode (dev_platform_matmul_x8): every rank computes alike */
    uint64_t model_bytes, model_sum; /* the file's size and the FNV-1a of its first PP_SUM_BYTES */
    int32_t synth;                   /* 1: every rank synthesizes `shape` (its strings in arch, pre), no file */
    mdl_gguf_synth shape;            /* its pointers are rank 0's: a receiver points them at arch and pre */
    char arch[64], pre[64];
    char path[4096];
} pp_wire_create;

typedef struct pp_wire_ready {
    int32_t status;
    char msg[DEV_ERR_MSG];
} pp_wire_ready;

/* At create, consumer -> producer of a cross-rank boundary: the consumer stage's device (tag BND_TAG_PICK). */
typedef struct pp_wire_side {
    uint32_t magic;
    int32_t b, gpu, nccl;  /* the boundary; its device is a GPU; the rank's build has NCCL */
    int32_t emu;           /* MEMRA_TEST_NCCL_EMU=1 on this rank (the test stand-in, transport/bnd_shm.h) */
    char where[160];       /* "host bus-id" of the device (dev_device_bus_id): one GPU names itself alike */
    char name[16];         /* the device's name on its rank ("cuda:1") */
} pp_wire_side;

/* At create, producer -> consumer: the transport picked (bnd_pick_remote) and, for BND_NCCL, the communicator's id;
 * status != 0: the producer could not go on (msg), the consumer fails its create too. */
typedef struct pp_wire_pick {
    uint32_t magic;
    int32_t b, kind, status;
    uint8_t id[BND_NCCL_ID_BYTES];
    char msg[DEV_ERR_MSG];
} pp_wire_pick;

#define PP_SUM_BYTES (4u << 20) /* the GGUF header, metadata and tensor table of a small model and more */

typedef struct pp_small {   /* a small send in flight and the buffer it reads */
    bnd_mpi_req *req;
    void *buf;
} pp_small;

typedef struct pp_out {     /* a step leaving this rank */
    pp_rec *rec;
    int k;
} pp_out;

typedef struct pp_rank pp_rank;
/* A message being received without blocking (actors/pp_rank_wire.c inbox_next): its request while in flight,
 * its buffer, size and sender. */
typedef struct pp_inbox {
    bnd_mpi_req *req;
    char *buf;
    size_t n;
    int src;
} pp_inbox;

struct pp_rank {
    act_pp *rt;
    int self, P;
    int owner[ACT_PP_MAX_STAGES];
    int first, last;                 /* this rank's stages */
    bnd_boundary *in, *out;          /* MPI or NCCL halves: boundary first-1 (consumer), boundary last (producer) */
    int in_peer, out_peer;           /* their other ranks, -1 when none */
    int in_nccl, out_nccl;           /* 1: that half is BND_NCCL (the header travels alone) */
    void *hdr[ACT_PP_MAX_SLOTS];     /* out_nccl: slot k's header message [pp_wire_step | pos | seq], read by its
                                      * send until send_req[k] completes; the credit for k waits for that */
    size_t hdr_cap;
    act_actor *tp;                   /* the transport actor */
    /* [tp] */
    pp_out *outq;                    /* steps waiting for their ev_tx (in order) */
    int oq_head, oq_len, oq_cap;
    pp_rec **fifo;                   /* rank 0: steps sent, waiting for their result (in order) */
    int f_head, f_len, f_cap;
    bnd_mpi_req *send_req[ACT_PP_MAX_SLOTS]; /* the send of slot k in flight */
    int credit_in[ACT_PP_MAX_SLOTS];  /* the consumer's credit for k arrived (handed on once the send is done) */
    int credit_out[ACT_PP_MAX_SLOTS]; /* our consumer stage gave k back (sent once ev_rx[k] completed) */
    pp_small *smalls;
    int n_small, cap_small;
    void *rx;                        /* a received step [header | payload] */
    size_t rx_cap;
    pp_inbox steps;                  /* the step being received into rx */
    pp_inbox results;                /* rank 0: the result being received */
    uint64_t heard[256], last_beat;  /* per rank: when we last heard from it */
    int dead, idle, ended;           /* ended: DESTROY arrived (a rank > 0 stops polling) */
    dev_err err;                     /* the first transport error */
    /* [lock] */
    pthread_mutex_t lock;
    pthread_cond_t cv;
    int over, over_status;
    dev_err over_err;
};

/* pp_rank_wire.c, for pp_rank.c: */
/* Post the transport its next POLL (the polling loop); 0 or the refusal once the actor stopped. */
int pp_rank_tp_kick(pp_rank *rk);
/* The transport actor's handler (act_actor_create's callback, ctx = the pp_rank). */
int pp_rank_tp_handle(act_actor *a, act_msg *m, void *ctx);

#endif
