/* act_msg: the one fixed-size message every mailbox carries (256 bytes, one allocation class, no malloc
 * per message: messages come from a per-mailbox free list, see freelist.h).
 *
 * Life of a message: act_freelist_take (producer, any thread) -> producer fills kind/payload ->
 * act_mailbox_post (any thread) -> the mailbox's single consumer takes it -> handles it -> act_msg_free
 * (any thread) returns it to the free list it came from (m->home). A message is in exactly one place at a
 * time: owned by one thread, queued in one mailbox, or free in its home list. */
#ifndef ACT_MSG_H
#define ACT_MSG_H

#include <stddef.h>
#include <stdint.h>
#include <urcu/wfcqueue.h>
#include <urcu/lfstack.h>

#define ACT_MSG_SIZE 256     /* bytes of one message, header included */
#define ACT_MSG_HEADER 64    /* bytes before the payload (one cache line) */
#define ACT_MSG_PAYLOAD (ACT_MSG_SIZE - ACT_MSG_HEADER) /* 192 bytes of user payload */

/* Reserved message kinds; user kinds start at ACT_MSG_USER. */
enum {
    ACT_MSG_STOP = 0,        /* poison pill posted by act_actor_stop; never seen by a handler */
    ACT_MSG_USER = 16,       /* first kind free for users */
};

struct act_freelist;
struct act_future;

typedef struct act_msg {
    struct cds_wfcq_node qnode;  /* link while queued in a mailbox (liburcu wfcqueue) */
    struct cds_lfs_node fnode;   /* link while free in the home free list (liburcu lfstack) */
    struct act_freelist *home;   /* free list the message returns to; NULL = not pooled (actor's stop pill) */
    struct act_future *reply;    /* optional: failed by the actor runtime if this message is discarded or
                                  * its handler returns an error without having set it; NULL = none */
    uint32_t kind;               /* ACT_MSG_STOP or a user kind >= ACT_MSG_USER */
    uint32_t flags;              /* free for the user; 0 when taken from the free list */
    uint64_t tag;                /* free for the user (sequence number, step id, timestamp); 0 when taken */
    uint64_t reserved[2];        /* keeps the header one cache line; zero */
    _Alignas(16) unsigned char payload[ACT_MSG_PAYLOAD]; /* user bytes; NOT cleared on reuse */
} act_msg;

_Static_assert(offsetof(act_msg, payload) == ACT_MSG_HEADER, "act_msg header must be one cache line");
_Static_assert(sizeof(act_msg) == ACT_MSG_SIZE, "act_msg must be ACT_MSG_SIZE bytes");

/* View the payload as a T (compile-time checked to fit). */
#define ACT_MSG_BODY(m, T) \
    ((T *)(void *)((m)->payload + 0 * sizeof(char[(sizeof(T) <= ACT_MSG_PAYLOAD) ? 1 : -1])))

#endif
