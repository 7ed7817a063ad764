/* Internals of the embedding API (include/memra/memra.h): the handle structs and the error plumbing.
 * Shared mutable state, and who touches it:
 *   memra_runtime.mu guards: submits into act_pp (act_pp_submit is one-thread-at-a-time), the slot table,
 *     the sequence handle lists, the pending list, and the counters kept here;
 *   api_errbox.mu guards a handle's last error (written by any thread that fails a call on the handle);
 *   a memra_seq's pos is written only by the thread using that sequence (the API's contract) and read by
 *     submits under rt->mu;
 *   thread-local: the calling thread's last error and the buffer *_last_error() copies into. */
#ifndef API_INTERNAL_H
#define API_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "actors/pp.h"
#include "memra/memra.h"
#include "model/chat.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

/* A handle's last error: any thread writes, readers copy under the lock. */
typedef struct api_errbox {
    pthread_mutex_t mu;
    int code;
    char msg[MEMRA_ERR_MAX];
} api_errbox;

void api_errbox_init(api_errbox *b);
void api_errbox_destroy(api_errbox *b);
/* Record err (code + msg) on the calling thread and in box (may be NULL); returns err->code. */
int api_fail_err(api_errbox *box, const dev_err *err);
/* printf-style: record code + message; returns code. */
int api_fail(api_errbox *box, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Copy box's message into the calling thread's buffer and return it. */
const char *api_errbox_read(api_errbox *box);

struct memra_model {
    char *path;               /* the GGUF path (the runtime loads the weights from it) */
    char arch[32];
    int n_vocab, n_embd, n_layer, n_head, n_head_kv, n_ctx_train;
    int head_dim;             /* <arch>.attention.key_length (default n_embd / n_head) */
    mdl_gguf_id file_id;      /* the file as memra_model_load read it: memra_runtime_create loads the same */
    mdl_tokenizer *tok;       /* NULL when the file has no tokenizer.* keys */
    mdl_chat *chat;           /* NULL when there is no template or its format is unknown */
    struct mdl_gguf_synth *synth; /* api_model_synthetic: the shape memra_runtime_create generates (owned), else NULL */
    api_errbox err;
};

/* A model of a synthetic shape (no file, no tokenizer): memra_runtime_create generates its weights on the stage
 * devices. name labels it (its "path"). NULL with memra_last_error() when out of memory. Free with
 * memra_model_free. */
memra_model *api_model_synthetic(const struct mdl_gguf_synth *shape, const char *name);
/* The model a tool's `-m PATH | --synthetic NAME [--type TYPE]` options name: memra_model_load(path, NULL), or
 * the synthetic shape NAME of weight type TYPE (mdl_synth_parse; NULL = "bf16") labelled NAME. Exactly one of path
 * and synth is set; otherwise, or on a bad name or type, NULL with memra_last_error() naming the options. The
 * one parser of those options for memra-bench serve and memra-tune. Free with memra_model_free. */
memra_model *api_model_open(const char *path, const char *synth, const char *type);

#define API_RETIRED_MAX 4096 /* closed handles kept before recycling (stale-handle detection window) */

struct memra_seq {
    memra_runtime *rt;
    int slot;                 /* KV slot, -1 once closed */
    int pos;                  /* tokens in the sequence */
    int greedy_tail;          /* its last step is a greedy one (memra_seq_decode_greedy[_next]) and pos was not
                               * rewound since: memra_seq_decode_greedy_next may feed from it */
    memra_seq *next;          /* in rt->open_list or rt->retired FIFO */
};

struct memra_pending {
    memra_runtime *rt;
    act_pending *ap;          /* the step's logits (LAST or ALL rows), or with greedy its row's argmax token */
    act_pending **deps;       /* earlier prompt chunks (no logits) waited before ap; owned */
    int n_deps;
    int greedy;               /* the step ran in ACT_LOGITS_ARGMAX mode: read with memra_pending_wait_token */
    int done, status;         /* cached wait result (the pending's own lock orders it) */
    memra_pending *prev, *next; /* rt->pendings, under rt->mu */
};

struct memra_runtime {
    const memra_model *model;
    dev_platform *plat;
    act_pp *pp;
    int n_seq, n_ctx, max_rows, n_vocab, N;
    int micro_batches;        /* the scheduler's M (memra_runtime_params.micro_batches or its door; else N) */
    int feed;                 /* created with device feed (act_pp_params.feed): memra_seq_decode_greedy_next */
    memra_abort_fn abort_cb;
    void *abort_user;
    pthread_mutex_t mu;       /* see the top of the file */
    unsigned char *slot_used; /* n_seq */
    memra_seq *open_list;     /* open handles */
    memra_seq *retired_head, *retired_tail; /* closed handles, oldest first */
    int n_retired;
    memra_pending *pendings;  /* not yet freed */
    uint64_t tokens_decoded, tokens_primed;
    uint64_t greedy_steps;    /* steps submitted in ACT_LOGITS_ARGMAX mode (the device-argmax path's liveness
                               * counter; not in memra_counters, read by tests through this header) */
    uint64_t stats_t0_ns;     /* busy clock origin */
    api_errbox err;
};

/* 1 when the abort callback asks to stop (records MEMRA_E_ABORTED on rt). */
int api_should_abort(memra_runtime *rt);
/* Submit one step under rt->mu; wraps the act_pending in a memra_pending (deps adopted on success). */
int api_submit(memra_runtime *rt, const act_pp_step *st, act_pending **deps, int n_deps, memra_pending **out);
/* api_submit of a step whose rows are n_decoded decode tokens and n_primed prompt tokens (the counters). */
int api_submit_counted(memra_runtime *rt, const act_pp_step *st, int n_decoded, int n_primed, memra_pending **out);
/* Wait for an ARGMAX pending: *tokens = its rows' argmax tokens (-1: no logit above -inf), valid until the pending
 * is freed. Returns MEMRA_OK, MEMRA_E_INVAL (a pending of logits), or the step's error (recorded on the runtime). */
int api_pending_wait_tokens(memra_pending *p, const int32_t **tokens, int *rows);
/* Wait for p whatever it holds; its status. */
int api_pending_wait_plain(memra_pending *p);
/* Wait for a greedy pending (memra_seq_decode_greedy) and give its row's argmax token: *token = -1 when no
 * logit of the row is above -inf, with MEMRA_OK (each caller refuses that its own way). token must not be
 * NULL. Returns MEMRA_OK, MEMRA_E_INVAL (NULL p, a pending of logits: nothing waited), or the step's error
 * (recorded on p's runtime); *token = -1 on failure. */
int api_pending_wait_argmax(memra_pending *p, memra_token *token);
/* Validates seq belongs to an open slot; returns 0 or records the error on rt. */
int api_seq_check(const memra_seq *seq, const char *fn);
uint64_t api_now_ns(void);

#endif
