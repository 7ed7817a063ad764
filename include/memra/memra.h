/* memra: the embedding C API of the memra-pp pipeline runtime (llama.h style).
 *
 *   memra_model_load(path)            host side: GGUF header, hparams, tokenizer, chat template
 *     -> memra_runtime_create(model)  loads the weights onto the stage devices, starts the stage actors
 *        -> memra_seq_open(rt)        one KV sequence slot
 *           memra_seq_prime(seq, prompt)          chunked prefill, chunks pipelined through the stages
 *           memra_seq_decode(seq, tok, &pending)  one step; returns at once
 *           memra_pending_wait(pending, &logits)  host waits for that step's logits
 *           memra_seq_decode_greedy(seq, tok, &pending) + memra_pending_wait_token(pending, &next)
 *                                                 greedy decode, the token picked on the device
 *        memra_decode_batch / memra_generate      several sequences at once (every stage kept busy)
 *        memra_server_create(rt)          requests submitted from any thread while others run
 *
 * Errors: every fallible call returns an int status (MEMRA_OK = 0, MEMRA_E_* < 0, memra/status.h) or, for
 * constructors, NULL. The message of a failure is kept (1) on the calling thread (memra_last_error()) and
 * (2) on the handle the call was made on (memra_runtime_last_error(), memra_model_last_error()). Unless a
 * function says otherwise, a failed call changes nothing (the handle is as before the call).
 *
 * Ownership: every handle is freed by its own *_free/_close call. A model outlives the runtimes created
 * from it; a runtime outlives its sequences and pendings. Using any handle after its runtime (or model) is
 * freed is undefined behaviour (not caught).
 *
 * Threads: each function says what it allows. In short: a model is immutable (any thread, concurrently);
 * a runtime accepts calls from several threads at once (submits are serialized inside by a mutex); one
 * sequence is used by one thread at a time; a pending may be waited on from any thread; a sampler is used
 * by one thread at a time. See docs/api.md. */
#ifndef MEMRA_MEMRA_H
#define MEMRA_MEMRA_H

#include <stddef.h>
#include <stdint.h>
#include "memra/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MEMRA_VERSION_MAJOR 0
#define MEMRA_VERSION_MINOR 2
#define MEMRA_VERSION_PATCH 0
#define MEMRA_VERSION_STRING "0.2.0"

#define MEMRA_MAX_STAGES 64  /* most pipeline stages */
#define MEMRA_MAX_SLOTS 16   /* most boundary slots per stage boundary */
#define MEMRA_ERR_MAX 512    /* longest error message, NUL included */

typedef int32_t memra_token;
typedef struct memra_model memra_model;       /* host-side model: hparams, tokenizer, chat template */
typedef struct memra_runtime memra_runtime;   /* a pipeline runtime over one model */
typedef struct memra_seq memra_seq;           /* one KV sequence slot of a runtime */
typedef struct memra_pending memra_pending;   /* the result (logits, or a greedy token) of one submitted step */
typedef struct memra_sampler memra_sampler;   /* token sampler (one per sequence) */

/* Progress of a load, frac in [0, 1], called on the loading thread. */
typedef void (*memra_progress_fn)(float frac, void *user);
/* Abort callback: return nonzero to stop. Checked between prompt chunks and between steps, on the thread
 * making the call; the call then returns MEMRA_E_ABORTED. */
typedef int (*memra_abort_fn)(void *user);

/* ---- version and errors ---- */

/* "MAJOR.MINOR.PATCH" of the library actually linked (compare with MEMRA_VERSION_STRING). Thread-safe. */
MEMRA_API const char *memra_version(void);
/* The message of the most recent failing memra_* call ON THIS THREAD ("" when none has failed); valid
 * until this thread's next memra_* call that fails. Thread-safe (thread-local). */
MEMRA_API const char *memra_last_error(void);
/* The status of that failure (MEMRA_OK when none). */
MEMRA_API int memra_last_status(void);

/* ---- several processes (mpirun; docs/scale-out.md) ---- */

/* Under `mpirun -np P`, call first in main: initialises MPI and returns this process's rank (0 when started without
 * mpirun or in a build without MPI). Rank 0 goes on as the program; a rank > 0 calls memra_mpi_serve, which builds
 * and serves the stages rank 0's runtimes place on it. Returns < 0 (a MEMRA_E_* status, memra_last_error() set)
 * when MPI cannot start, or P > 1 in a build without MPI. Main thread only. */
MEMRA_API int memra_mpi_init(int *argc, char ***argv);
/* Ranks > 0: serve until rank 0's memra_mpi_finish. Returns MEMRA_OK, or the error (a dead or silent peer, a model
 * file that differs from rank 0's, rank 0 failing) with memra_last_error() set. */
MEMRA_API int memra_mpi_serve(void);
/* Every rank, last: rank 0 tells the others to leave memra_mpi_serve with `status`, then MPI ends (an abort of every
 * rank when status is not MEMRA_OK). No-op without mpirun. */
MEMRA_API void memra_mpi_finish(int status);

/* ---- model (host side) ---- */

typedef struct memra_model_params {
    memra_progress_fn progress; /* may be NULL; called with 0 .. 1 while the header and tokenizer load */
    void *progress_user;
} memra_model_params;

MEMRA_API memra_model_params memra_model_default_params(void);

/* Open the GGUF at path (params may be NULL = defaults): validate the header, read the hyper-parameters,
 * build the tokenizer (when the file has tokenizer.* keys) and detect the chat template. No weights are
 * uploaded (memra_runtime_create does that). Returns NULL on failure with memra_last_error() set:
 * MEMRA_E_INVAL (NULL path), MEMRA_E_IO (file), MEMRA_E_FORMAT (corrupt/missing keys), MEMRA_E_UNSUPPORTED
 * (architecture, tensor type, tokenizer kind), MEMRA_E_NOMEM. Cost: one pass over the header + vocab.
 * Thread-safe (different models load concurrently). */
MEMRA_API memra_model *memra_model_load(const char *path, const memra_model_params *params);
/* Free the model; NULL is a no-op. Every runtime created from it must be freed first. */
MEMRA_API void memra_model_free(memra_model *model);
/* The message of the most recent failing call made on this model (any thread), copied into a buffer of
 * the calling thread: valid until this thread calls it again. "" when none; "(null model)" for NULL. */
MEMRA_API const char *memra_model_last_error(const memra_model *model);

/* Hyper-parameters (0 / NULL for a NULL model). Thread-safe. */
MEMRA_API const char *memra_model_arch(const memra_model *model); /* "llama", "qwen2" */
MEMRA_API int memra_model_n_vocab(const memra_model *model);
MEMRA_API int memra_model_n_embd(const memra_model *model);
MEMRA_API int memra_model_n_layer(const memra_model *model);
MEMRA_API int memra_model_n_head(const memra_model *model);
MEMRA_API int memra_model_n_head_kv(const memra_model *model);
MEMRA_API int memra_model_n_ctx_train(const memra_model *model);
MEMRA_API int memra_model_has_tokenizer(const memra_model *model); /* 1 when tokenize & co. work */

/* ---- tokenizer and chat template (model must have a tokenizer: else MEMRA_E_UNSUPPORTED) ----
 * All thread-safe: the tokenizer is immutable and may be used from any number of threads at once. */

/* Tokenize len bytes of text. add_special: BOS/EOS as the model asks. parse_special: control tokens
 * written in the text ("<|im_start|>") become their id. Writes *n_out ids to out. Returns MEMRA_OK;
 * MEMRA_E_FULL when the ids do not fit (out unspecified): with cap > 0 tokenizing stops at the first id past
 * cap and *n_out = cap + 1 (at least that many are needed), so a long text's cost is bounded by cap (byte-level
 * BPE; SentencePiece merges each run of text between special tokens whole); with cap 0 (a size query) the
 * whole text is tokenized and *n_out is the exact count.
 * MEMRA_E_INVAL (NULL model/text/n_out, len < 0, cap < 0, out NULL with cap > 0); MEMRA_E_UNSUPPORTED (no
 * tokenizer). Cost: linear in len (docs/tokenizer.md). */
MEMRA_API int memra_tokenize(const memra_model *model, const char *text, int len, int add_special,
                             int parse_special, memra_token *out, int cap, int *n_out);
/* The bytes of one token into buf (not NUL-terminated), *n_out bytes. special: render control tokens.
 * Returns MEMRA_OK; MEMRA_E_FULL (*n_out = bytes needed); MEMRA_E_INVAL (token out of range, NULL
 * arguments); MEMRA_E_UNSUPPORTED (no tokenizer). */
MEMRA_API int memra_token_to_piece(const memra_model *model, memra_token token, char *buf, int cap, int special,
                                   int *n_out);
/* The text of n tokens, NUL-terminated in buf (*n_out bytes without the NUL). Returns MEMRA_OK;
 * MEMRA_E_FULL (*n_out = bytes needed without the NUL); MEMRA_E_INVAL; MEMRA_E_UNSUPPORTED. */
MEMRA_API int memra_detokenize(const memra_model *model, const memra_token *tokens, int n, char *buf, int cap,
                               int special, int *n_out);
MEMRA_API memra_token memra_token_bos(const memra_model *model); /* -1 when absent */
MEMRA_API memra_token memra_token_eos(const memra_model *model); /* -1 when absent */
/* 1 when token ends generation (EOS, <|im_end|>, <|eot_id|>, ...), else 0. */
MEMRA_API int memra_token_is_eog(const memra_model *model, memra_token token);

typedef struct memra_chat_message {
    const char *role;    /* "system", "user", "assistant" */
    const char *content; /* NUL-terminated UTF-8 */
} memra_chat_message;

/* Render n messages with a chat template (tmpl: NULL = the model's tokenizer.chat_template; or template
 * text; or a name "chatml", "llama3", "gemma"), plus the assistant opener when add_assistant. Writes a
 * NUL-terminated string to buf; *n_out = its length. Tokenize the result with parse_special = 1.
 * Returns MEMRA_OK; MEMRA_E_FULL (*n_out = length needed without the NUL); MEMRA_E_INVAL (NULL
 * message fields); MEMRA_E_UNSUPPORTED (no template, or a template of an unknown format). model may be
 * NULL when tmpl is given. */
MEMRA_API int memra_chat_apply(const memra_model *model, const char *tmpl, const memra_chat_message *msgs,
                               size_t n, int add_assistant, char *buf, size_t cap, size_t *n_out);

/* ---- runtime ---- */

typedef enum memra_backend {
    MEMRA_BACKEND_AUTO = 0, /* CUDA when built with it and a GPU is visible, else CPU */
    MEMRA_BACKEND_CPU = 1,  /* emulated CPU devices (cpu_devices of them) */
    MEMRA_BACKEND_CUDA = 2, /* every visible GPU */
} memra_backend;

/* Runtime config: memra_runtime_params IS the configuration. With apply_env = 1 (default) the environment doors
 * override the fields below, one by one, read ONCE at create on the creating thread (docs/doors.md lists each
 * door and when it is read):
 *   backend <- MEMRA_BACKEND, cpu_devices <- MEMRA_CPU_DEVICES, stages <- MEMRA_PP_STAGES,
 *   cuts <- MEMRA_PP_SPLITS / MEMRA_PP_SPLIT, devices <- MEMRA_PP_DEVICES, shard <- MEMRA_PP_SHARD,
 *   slots <- MEMRA_PP_SLOTS, streams <- MEMRA_PP_STREAMS, overlap <- MEMRA_PP_OVERLAP, and the other per-step
 *   seams (MEMRA_BATCH_PP, MEMRA_PRIME_PP, ...: the runtime's defaults when unset) likewise.
 * Precedence: the fields < the doors at create (apply_env = 1) < memra_runtime_reload_doors, which re-reads the
 * per-step seams of a live runtime (nothing else). A running runtime never reads the environment by itself: a
 * setenv after create changes nothing until a reload. With apply_env = 0 the environment changes nothing at
 * all (the reload is refused). */
/* Element type of the KV cache (kv_type) and of the activation rows matmuls read (act_type). For the cache,
 * F16 / BF16 halve its memory (n_seq x n_ctx x 2 x kv_dim per layer) and store each k, v value rounded to
 * nearest even; attention widens them back exactly. For the activations (the normed x, the attention output,
 * swiglu's h), F16 / BF16 store those rows rounded to nearest even and the matmuls widen them exactly: half the
 * bytes per matmul input, and with CUDA at large batches bf16 weights multiply bf16 x without a conversion.
 * The residual stream, q/k/v and the logits stay f32. */
typedef enum memra_kv_type {
    MEMRA_KV_DEFAULT = 0, /* the field's door (kv_type: MEMRA_KV_TYPE, act_type: MEMRA_ACT_TYPE; f32, f16, bf16)
                           * when apply_env, else F32 */
    MEMRA_KV_F32 = 1,
    MEMRA_KV_F16 = 2,
    MEMRA_KV_BF16 = 3,
} memra_kv_type;

/* Greedy steps fed on the device (memra_seq_decode_greedy_next): a copy of the embedding table on stage 0's
 * device, the token each greedy step picks left there for its sequence. */
typedef enum memra_feed_mode {
    MEMRA_FEED_AUTO = 0, /* on with the CUDA backend wherever a fed step can run ahead (not with the one-stream
                          * seam, nor with stage streams sharing one GPU while that pipelining is refused); off
                          * on the CPU backend */
    MEMRA_FEED_ON = 1,   /* on; memra_runtime_create refuses it (MEMRA_E_INVAL) with the one-stream seam */
    MEMRA_FEED_OFF = 2,
} memra_feed_mode;

typedef struct memra_runtime_params {
    memra_backend backend;   /* default AUTO */
    int cpu_devices;         /* emulated CPU devices 1..64 (default 8); ignored for CUDA */
    int stages;              /* pipeline stages N, 0/1 = one stage (the door shut); at most n_layer */
    int n_cuts;              /* 0 = even split; else stages-1 cuts in cuts[] */
    int cuts[MEMRA_MAX_STAGES];    /* strictly increasing layer indices in (0, n_layer) */
    int n_devices;           /* 0 = every stage on device 0; else stages entries in devices[] */
    int devices[MEMRA_MAX_STAGES]; /* device ordinal of each stage */
    int shard;               /* 1 (default) = each stage's weights on its own device; 0 = all on device 0 */
    int slots;               /* boundary slots per stage boundary 1..16 (default 2) */
    int streams;             /* 1 (default) = per-stage streams; 0 = the one-stream seam (one device) */
    int overlap;             /* -1 (default): the seam's default, 0; 0/1: rotate the boundary slots per step (1) or
                              * use one slot per boundary (0). A per-step seam of this runtime; its door
                              * MEMRA_PP_OVERLAP (with apply_env) wins over the field */
    int n_seq;               /* sequence slots (default 4) */
    int n_ctx;               /* positions per sequence (0 = min(1024, model's context)) */
    int max_rows;            /* most rows of one step: prompt chunk / batch size (default 64) */
    int apply_env;           /* 1 (default): the doors above override; 0: only these fields count */
    memra_progress_fn progress; /* weight upload progress, may be NULL */
    void *progress_user;
    memra_abort_fn abort_cb; /* may be NULL; checked between chunks and steps (MEMRA_E_ABORTED) */
    void *abort_user;
    /* 0.2.0: the fields below were appended after abort_user, so 0.1.0's fields keep their offsets */
    memra_kv_type kv_type;   /* KV cache elements (default MEMRA_KV_DEFAULT) */
    memra_feed_mode device_feed; /* memra_seq_decode_greedy_next (default MEMRA_FEED_AUTO); the serving scheduler
                              * (memra_generate, memra_server) feeds micro-batches of greedy requests when on */
    memra_kv_type act_type;  /* matmul input rows (default MEMRA_KV_DEFAULT: the MEMRA_ACT_TYPE door when
                              * apply_env, else F32) */
    /* appended after act_type, so earlier fields keep their offsets */
    int micro_batches;       /* micro-batches the scheduler keeps in flight (memra_generate, memra_server), 0..n_seq;
                              * 0 (default) = the stages N. Door: MEMRA_PP_MICRO_BATCHES */
    int batch_invariant;     /* 1: each row of a step gets the bits it gets in a step of its own (CUDA: the GEMV at
                              * every batch size, never cuBLAS), so a request's tokens equal its tokens alone whatever
                              * shares its micro-batch; 0 (default): the fastest kernels (CUDA: cuBLAS from 2 rows).
                              * The CPU backend is batch-invariant either way. Door: MEMRA_BATCH_INVARIANT */
    /* appended after batch_invariant, so earlier fields keep their offsets */
    const char *profile;     /* NULL (default), or the path of a memra-tune profile (PREFIX.json): create reads it
                              * (cJSON; a build without it refuses a set profile), refuses one made for another
                              * model, stage count, device set or backend (the message names which), and takes its
                              * stages, cuts, devices, slots, overlap, graph, micro_batches and max_rows (the doors of
                              * those still win). Door: MEMRA_PP_PROFILE (with apply_env; wins over the field) */
    /* appended after profile, so earlier fields keep their offsets */
    int graph;               /* 1: one CUDA graph per stage step, this runtime's default of the MEMRA_PP_GRAPH seam
                              * (MEMRA_PP_GRAPH, read at create with apply_env and by a reload, wins when set);
                              * 0 (default): eager walks unless the door asks. The CPU backend has no graphs: its
                              * walks are eager either way */
    int cpu_x8;              /* CPU backend matmuls: 1 (default) = fast: x quantized once per matmul to int8 blocks
                              * of 32, int8 products for q4_0 / q4_1 / q8_0 / q4_K / q5_K / q6_K weights (llama.cpp's
                              * way; other types stay exact); 0 = exact: f32 x in a fixed order (the float64 oracle's and the
                              * bit-identity gates' mode). Both are deterministic: a row's tokens do not depend on
                              * the stages, the batch or the rows beside it. CUDA ignores it (MEMRA_CUDA_X8 there).
                              * Door: MEMRA_CPU_X8 = 1 | 0 (with apply_env; wins over the field) */
    int cpu_threads;         /* CPU backend: threads per matmul, 1..256. 1 (default): each stage's matmuls run on its
                              * stream worker alone, one core per stage, so pipeline scaling stays visible; n > 1:
                              * each matmul's output rows are split over an OpenMP team of n, for when cores
                              * outnumber stages. The bits do not change. A build without OpenMP refuses n > 1.
                              * CUDA ignores it. Door: MEMRA_CPU_THREADS (with apply_env; wins over the field) */
} memra_runtime_params;

MEMRA_API memra_runtime_params memra_runtime_default_params(void);

/* Open the backend, load the model's weights with the placement the config asks for, allocate the KV
 * cache (n_seq x n_ctx per layer) and start the stage actors. params may be NULL (defaults).
 * Returns NULL on failure with memra_last_error() and memra_model_last_error(model) set: MEMRA_E_INVAL (a
 * bad field or door: the message names it and what is allowed), MEMRA_E_IO / MEMRA_E_FORMAT (weights),
 * MEMRA_E_UNSUPPORTED (backend not built / no GPU), MEMRA_E_DEVICE, MEMRA_E_NOMEM, MEMRA_E_STATE (the GGUF at
 * the model's path is not the file memra_model_load read: its size, mtime or header differ). Nothing is left
 * behind. Once created, the runtime reads nothing from the file (the embedding table is copied).
 * Cost: one pass over the weights. Call from one thread at a time (reads the environment). */
MEMRA_API memra_runtime *memra_runtime_create(const memra_model *model, const memra_runtime_params *params);
/* Read the doors again on a live runtime created with apply_env = 1: its per-step seams become its params'
 * values with the seam doors set NOW on top (MEMRA_PP_OVERLAP, MEMRA_BATCH_PP, MEMRA_SPEC_PP, MEMRA_PRIME_PP,
 * MEMRA_PRIME_PIPE, MEMRA_PDL, MEMRA_PP_GRAPH, MEMRA_PP_KEYS, MEMRA_PP_HEAD_RING, MEMRA_PP_MARKERS,
 * MEMRA_PP_SAME_DEVICE_PIPE, MEMRA_PP_ALLOW_UNSPLIT_BATCH); steps submitted after it returns take them, steps
 * already submitted keep theirs. The structural doors (MEMRA_PP_STAGES, _SPLITS/_SPLIT, _DEVICES, _SHARD,
 * _SLOTS, _STREAMS) are checked against the runtime: a changed one is refused, naming it, and nothing changes
 * (they shape what create built). The load and platform doors (MEMRA_BACKEND, MEMRA_CPU_DEVICES, MEMRA_KV_TYPE,
 * MEMRA_ACT_TYPE, MEMRA_BATCH_INVARIANT, MEMRA_DEVICE_FEED, MEMRA_PP_MICRO_BATCHES, MEMRA_PP_PROFILE,
 * MEMRA_TRACE, MEMRA_CUDA_*) are not read again. Returns MEMRA_OK, MEMRA_E_INVAL (NULL rt, or a bad value: the
 * message names the door), MEMRA_E_STATE (created with apply_env = 0), MEMRA_E_REFUSED (a changed structural
 * door). Thread-safe with the runtime's other calls (it reads the environment: keep setenv out of its way).
 * Cost: a few dozen getenv. */
MEMRA_API int memra_runtime_reload_doors(memra_runtime *rt);
/* Wait for every submitted step, free every sequence and pending still open, stop the actors, free the
 * weights. NULL is a no-op. No other call on rt, its sequences or pendings may run concurrently or follow. */
MEMRA_API void memra_runtime_free(memra_runtime *rt);
/* Like memra_model_last_error, for failures of calls on rt and on its sequences and pendings. */
MEMRA_API const char *memra_runtime_last_error(const memra_runtime *rt);
/* MEMRA_OK while rt can run steps. Under mpirun (docs/scale-out.md), once another rank is dead or silent for 2.5 s
 * or an MPI call failed, the error every later step fails with (memra_runtime_last_error(rt) names the rank): a
 * long-running program (memra-server) polls it to end itself. MEMRA_E_INVAL for NULL. Never blocks; thread-safe. */
MEMRA_API int memra_runtime_check(memra_runtime *rt);

/* What was built (after the doors). 0 for a NULL rt. Thread-safe. */
MEMRA_API int memra_runtime_n_stages(const memra_runtime *rt); /* N, 1 when the door is shut */
MEMRA_API int memra_runtime_n_seq(const memra_runtime *rt);
MEMRA_API int memra_runtime_n_ctx(const memra_runtime *rt);
MEMRA_API int memra_runtime_max_rows(const memra_runtime *rt);
MEMRA_API int memra_runtime_n_vocab(const memra_runtime *rt);
/* Layers [first, end) of stage s; MEMRA_E_INVAL for s outside 0..N-1. */
MEMRA_API int memra_runtime_stage_layers(const memra_runtime *rt, int s, int *first, int *end);
/* "cpu" or "cuda". */
MEMRA_API const char *memra_runtime_backend(const memra_runtime *rt);

/* Counters since create (monotonic; the pipeline's liveness counters). Thread-safe. */
typedef struct memra_counters {
    uint64_t steps_done;          /* steps whose logits reached the host */
    uint64_t split_steps;         /* steps that walked the stages (N >= 2) */
    uint64_t pipe_overlaps;       /* a stage began a step while another stage was mid-step */
    uint64_t unsplit_steps;       /* steps run whole on the primary (the A/B seams) */
    uint64_t batch_split_steps;   /* batched decode steps through the stages */
    uint64_t prime_split_chunks;  /* prompt chunks through the stages */
    uint64_t prime_pipe_overlaps; /* prompt chunks that overlapped across stages */
    uint64_t tokens_decoded;      /* rows submitted by decode, decode_batch and generate */
    uint64_t tokens_primed;       /* prompt tokens submitted by prime and generate */
    uint64_t fed_steps;           /* greedy steps fed on the device, as enqueued (memra_seq_decode_greedy_next) */
} memra_counters;
/* Fill *out; MEMRA_E_INVAL for NULL. */
MEMRA_API int memra_runtime_counters(const memra_runtime *rt, memra_counters *out);

typedef struct memra_stage_stats {
    int first_layer, end_layer; /* the stage's layers [first, end) */
    uint64_t busy_ns;           /* time the stage spent walking its layers since create / the last reset */
    uint64_t walks;             /* steps walked */
    double busy_frac;           /* busy_ns / wall time since create or the last reset, in [0, 1] */
} memra_stage_stats;
/* Per-stage busy time; MEMRA_E_INVAL for NULL or s outside 0..N-1. Thread-safe. */
MEMRA_API int memra_runtime_stage_stats(const memra_runtime *rt, int s, memra_stage_stats *out);
/* Restart the busy clocks (not the counters). Thread-safe. */
MEMRA_API void memra_runtime_reset_stats(memra_runtime *rt);
/* Wait until every step submitted so far (by any thread) has completed. Returns MEMRA_OK, MEMRA_E_INVAL
 * (NULL), or the first stage error. Thread-safe. */
MEMRA_API int memra_runtime_drain(memra_runtime *rt);
/* Start recording a trace of rt into path (Chrome Trace Event JSON, docs/trace.md): per stage its actor's
 * enqueues and mailbox waits, its stream's walks, each boundary's hops, the readback, the scheduler's requests
 * (queued, first token, done), steps in flight and rows per step. The file is written by
 * memra_runtime_trace_stop, or by memra_runtime_free when the trace still records (MEMRA_TRACE=path starts one
 * at create). One trace records at a time in a process. Returns MEMRA_OK, MEMRA_E_INVAL (NULL rt, NULL or empty
 * path, path not writable: it is opened now), MEMRA_E_STATE (a trace already records). Costs while recording:
 * docs/bench/cpu.md "Tracing"; while none records, one predicted branch per trace point. Thread-safe. */
MEMRA_API int memra_runtime_trace_start(memra_runtime *rt, const char *path);
/* Wait for every submitted step (memra_runtime_drain), stop rt's trace and write its file. Returns MEMRA_OK,
 * MEMRA_E_INVAL (NULL), MEMRA_E_STATE (rt records no trace), MEMRA_E_IO (the write failed; the trace is stopped).
 * Thread-safe. */
MEMRA_API int memra_runtime_trace_stop(memra_runtime *rt);

/* ---- sequences ----
 * A sequence is one KV slot: its tokens occupy positions 0..memra_seq_pos()-1. Open/close are thread-safe;
 * the other calls on ONE sequence must come from one thread at a time (different sequences: any threads
 * at once). A closed sequence is detected (MEMRA_E_STATE) until 4096 more sequences of its runtime have
 * been closed after it; later use of it is undefined behaviour. */

/* Take a free slot (positions start at 0). NULL with MEMRA_E_FULL when all n_seq slots are open,
 * MEMRA_E_INVAL for a NULL rt. */
MEMRA_API memra_seq *memra_seq_open(memra_runtime *rt);
/* Give the slot back at once. Steps already submitted still run before any step of the slot's next user
 * (the pipeline keeps submission order); their pendings stay valid until freed.
 * Returns MEMRA_OK; MEMRA_E_INVAL (NULL); MEMRA_E_STATE (already closed). */
MEMRA_API int memra_seq_close(memra_seq *seq);
/* Tokens in the sequence (submitted so far); <0 (MEMRA_E_INVAL / MEMRA_E_STATE) for NULL / closed. */
MEMRA_API int memra_seq_pos(const memra_seq *seq);
/* Forget tokens from position pos on (0 = the whole sequence), e.g. to reuse the slot for a new prompt.
 * No wait is needed: steps already submitted run before later ones. MEMRA_E_INVAL when pos is outside
 * 0..memra_seq_pos(); MEMRA_E_STATE (closed). */
MEMRA_API int memra_seq_rewind(memra_seq *seq, int pos);

/* Prefill n prompt tokens in chunks of `chunk` rows (0 = max_rows), each chunk submitted as soon as the
 * previous one is (the chunks pipeline through the stages). out (may be NULL) receives the pending logits
 * of the LAST token (1 row); with out NULL the call waits for the whole prompt.
 * Returns MEMRA_OK; MEMRA_E_INVAL (NULL, n < 1, chunk outside 0..max_rows, a token outside the vocab:
 * nothing submitted); MEMRA_E_STATE (closed); MEMRA_E_FULL (the prompt does not fit in n_ctx: nothing
 * submitted); MEMRA_E_ABORTED (the abort callback said stop between chunks: the chunks already submitted
 * stay in the sequence, memra_seq_pos says how many tokens); or a stage error. */
MEMRA_API int memra_seq_prime(memra_seq *seq, const memra_token *tokens, int n, int chunk, memra_pending **out);
/* Submit one decode step (token at position memra_seq_pos()) and return at once; *out = its pending
 * logits (1 row). Returns MEMRA_OK; MEMRA_E_INVAL (NULL, token out of range); MEMRA_E_STATE (closed);
 * MEMRA_E_FULL (context full); MEMRA_E_ABORTED; or a submit error. On failure *out = NULL, pos unchanged. */
MEMRA_API int memra_seq_decode(memra_seq *seq, memra_token token, memra_pending **out);
/* memra_seq_decode for greedy decoding: the same step, but the last stage reduces its row to the index of the
 * largest logit on its own device (ties -> the lowest id, NaN never wins) and only that token is read back,
 * not n_vocab floats (on an H200 with a 128256-token vocabulary: ~130 us less of the caller's time per token,
 * the copy and the host's scan). *out = a pending holding that token: read it with memra_pending_wait_token
 * (memra_pending_wait refuses it). The token is what memra_argmax / a greedy memra_sampler_sample (no
 * penalties) would pick from the logits memra_seq_decode gives. Returns, state after failure and threads: as
 * memra_seq_decode (MEMRA_E_INVAL: NULL, token out of range; MEMRA_E_STATE; MEMRA_E_FULL; MEMRA_E_ABORTED;
 * a submit error; on failure *out = NULL, pos unchanged). */
MEMRA_API int memra_seq_decode_greedy(memra_seq *seq, memra_token token, memra_pending **out);
/* The next greedy step of seq, fed on the device: its token is the one the sequence's previous greedy step
 * (memra_seq_decode_greedy or this call) picks, read where that step left it, so this may be called before
 * that step's pending is waited: the device goes from one token to the next without the host's turn in
 * between (stage 0 waits on its stream for the token, then gathers its embedding row there). *out: as
 * memra_seq_decode_greedy. If the previous step fails, this one's result means nothing (that step's pending
 * says why). Needs a runtime created with device feed (memra_runtime_params.device_feed). Returns
 * MEMRA_OK; MEMRA_E_STATE (closed; no device feed; the last step of seq is not a greedy one, or it was
 * rewound since); MEMRA_E_INVAL (out NULL); MEMRA_E_FULL; MEMRA_E_ABORTED; or a submit error. On failure
 * *out = NULL, pos unchanged. Threads: as memra_seq_decode. */
MEMRA_API int memra_seq_decode_greedy_next(memra_seq *seq, memra_pending **out);
/* Speculative verify: submit n tokens of seq at positions memra_seq_pos() .. +n-1 in ONE step (the spec
 * arm, split across the stages like decode) and return at once; *out gets n rows of logits, row i predicting
 * the token after tokens[i]. The sequence then holds all n: rewind it (memra_seq_rewind) to the last token
 * the caller accepts. Returns MEMRA_OK; MEMRA_E_INVAL (NULL, n outside 1..max_rows, a token out of range);
 * MEMRA_E_STATE; MEMRA_E_FULL (n tokens do not fit); MEMRA_E_ABORTED; or a submit error. On failure
 * *out = NULL and the position is unchanged. Thread-safety: as memra_seq_decode. */
MEMRA_API int memra_seq_verify(memra_seq *seq, const memra_token *tokens, int n, memra_pending **out);
/* One step over n sequences of rt (one token each, all distinct, all open): row i = seqs[i]. *out gets n
 * rows of logits. Returns MEMRA_OK; MEMRA_E_INVAL (NULL, n outside 1..max_rows, a repeated sequence or one
 * of another runtime, a token out of range); MEMRA_E_STATE (a closed sequence); MEMRA_E_FULL; ABORTED.
 * On failure nothing is submitted and no position moves; *out = NULL.
 * Thread-safe against other submits; each listed sequence must not be used by another thread meanwhile. */
MEMRA_API int memra_decode_batch(memra_runtime *rt, memra_seq *const *seqs, const memra_token *tokens, int n,
                                 memra_pending **out);

/* ---- pendings ---- any thread may wait/poll; free once, after which the pointer is dead. */

/* Wait until the step's logits are on the host: *logits = rows x n_vocab floats (valid until
 * memra_pending_free), *rows (either may be NULL). Returns MEMRA_OK, MEMRA_E_INVAL (NULL; a pending of
 * memra_seq_decode_greedy, refused at once without waiting: the message names memra_pending_wait_token, the
 * pending stays usable), or the step's error (also recorded on the runtime). On failure *logits = NULL,
 * *rows = 0. Waiting twice returns the same result. */
MEMRA_API int memra_pending_wait(memra_pending *p, const float **logits, int *rows);
/* Wait like memra_pending_wait for a pending of memra_seq_decode_greedy and give its greedy token (*token).
 * Returns MEMRA_OK; MEMRA_E_INVAL for a NULL p or token, for a pending that holds logits (refused at once
 * without waiting: the message names memra_pending_wait, the pending stays usable), or when no logit of the
 * step's row is above -inf (all -inf or NaN: no token to pick, the row a greedy memra_sampler_sample refuses
 * with MEMRA_E_INVAL too); or the step's error (also recorded on the runtime). On failure *token = -1.
 * Waiting twice returns the same result. Threads: as memra_pending_wait (any thread, several at once). */
MEMRA_API int memra_pending_wait_token(memra_pending *p, memra_token *token);
/* 1 when wait would not block, 0 when the step is still running, MEMRA_E_INVAL for NULL. Never blocks. */
MEMRA_API int memra_pending_poll(memra_pending *p);
/* Release the pending (waited or not; its buffers come back once the step completes). NULL is a no-op.
 * Call once, after every wait on it has returned (any thread). */
MEMRA_API void memra_pending_free(memra_pending *p);

/* ---- sampling (over model/sampler: penalties, top-k, top-p, min-p, temperature) ---- */

typedef struct memra_sampler_params {
    float temperature;      /* <= 0: greedy (argmax); default 0.8 */
    int32_t top_k;          /* <= 0: off; default 40 */
    float top_p;            /* >= 1: off; default 0.95 */
    float min_p;            /* <= 0: off; default 0.05 */
    float repeat_penalty;   /* 1: off; default 1 */
    float freq_penalty;     /* 0: off */
    float presence_penalty; /* 0: off */
    int32_t repeat_last_n;  /* penalty window (accepted tokens), default 64 */
    int32_t min_keep;       /* >= 1 */
    uint64_t seed;          /* same seed + same logits -> same tokens */
} memra_sampler_params;

MEMRA_API memra_sampler_params memra_sampler_default_params(void);
/* A greedy sampler's params (temperature 0). */
MEMRA_API memra_sampler_params memra_sampler_greedy_params(void);
/* NULL with memra_last_error() on a bad field (named with its range), n_vocab < 1, or no memory. */
MEMRA_API memra_sampler *memra_sampler_create(const memra_sampler_params *params, int n_vocab);
/* NULL is a no-op. */
MEMRA_API void memra_sampler_free(memra_sampler *s);
/* Pick a token from n_vocab logits (not recorded: call accept). Returns the id >= 0, or MEMRA_E_INVAL.
 * One thread at a time per sampler. */
MEMRA_API memra_token memra_sampler_sample(memra_sampler *s, const float *logits);
/* Record a kept token (prompt or generated) for the penalties; ids outside the vocab are ignored. */
MEMRA_API void memra_sampler_accept(memra_sampler *s, memra_token token);
/* Forget the history and restart the RNG from the seed. */
MEMRA_API void memra_sampler_reset(memra_sampler *s);
/* Index of the largest of n logits (lowest on ties), -1 for n < 1. Thread-safe. */
MEMRA_API memra_token memra_argmax(const float *logits, int n);

/* ---- many-sequence generation ---- */

/* Per-token callback of memra_generate: request i produced token (piece = its text, n_piece bytes, not
 * NUL-terminated; NULL/0 without a tokenizer). Return nonzero to stop request i. Called on the thread
 * running memra_generate. */
typedef int (*memra_token_fn)(void *user, int request, memra_token token, const char *piece, int n_piece);

typedef struct memra_request {
    const memra_token *prompt;     /* n_prompt >= 1 prompt tokens */
    int n_prompt;
    int n_predict;                 /* tokens to generate at most */
    memra_sampler_params sampling; /* per-request sampling */
    int stop_at_eog;               /* 1: stop at an end-of-generation token (not emitted) */
    memra_token *out;              /* may be NULL; receives up to out_cap generated tokens */
    int out_cap;
    int n_out;                     /* OUT: tokens generated */
    int status;                    /* OUT: MEMRA_OK or this request's error */
} memra_request;

/* Run n requests to completion through the serving scheduler, on the calling thread: a free sequence slot admits
 * the next request into one of the runtime's micro-batches (memra_runtime_params.micro_batches), each micro-batch
 * keeps one step in flight holding one row per decoding request plus prompt rows of joining requests (chunk: the
 * most prompt rows of one request in a step, 0 = the step's budget of max_rows), and a request waiting for a slot
 * joins when one frees. A step whose output rows all belong to requests whose sampling is greedy with nothing to
 * penalize (temperature <= 0, and repeat_penalty 1, freq_penalty 0, presence_penalty 0 or else repeat_last_n 0)
 * picks their tokens on the device; otherwise each request's sampler picks from its row of logits. The tokens are
 * those of each request's own sampler; a row with no logit above -inf ends that request with status
 * MEMRA_E_INVAL, as the sampler would. on_token may be NULL; it runs on this thread. Returns MEMRA_OK when every
 * request ended (each request's own status says how: MEMRA_OK, MEMRA_E_FULL when its context filled or its
 * prompt does not fit, MEMRA_E_INVAL, or a step's error), MEMRA_E_INVAL (NULL rt/reqs, n < 1, chunk outside
 * 0..max_rows, a bad prompt or sampler: that request's status says which, nothing ran), MEMRA_E_FULL (no slot
 * free at all), MEMRA_E_ABORTED (the abort callback, checked between steps: requests stop where they are), or
 * the first step error (the other requests still ran to their ends). Every slot it opened is closed on return.
 * Thread-safe against other calls on rt (it shares the pipeline with them). */
MEMRA_API int memra_generate(memra_runtime *rt, memra_request *reqs, int n, int chunk, memra_token_fn on_token,
                             void *user);

/* ---- serving: requests that arrive while others run ----
 * A server owns a scheduler thread that packs the requests in flight into micro-batches: each micro-batch is
 * one step of one row per decoding request plus prompt rows of joining requests under the step's row budget,
 * and while micro-batch g runs stage s, g+1 runs stage s-1. A free sequence slot admits a waiting request; a
 * finished one frees its slot at once. Requests are taken in arrival order. memra_generate runs the same
 * scheduler on its calling thread. */

typedef struct memra_server memra_server;

typedef struct memra_server_params {
    int micro_batches; /* M micro-batches in flight, 1..n_seq; 0 (default) = the runtime's
                        * (memra_runtime_params.micro_batches: its door, else the stages N) */
    int step_rows;     /* rows one step may hold, 1..max_rows; 0 (default) = max_rows */
    int prompt_chunk;  /* most prompt rows of one request in one step, 0..max_rows; 0 (default) = the step's
                        * budget (a prompt fills what the decoding rows leave) */
} memra_server_params;

MEMRA_API memra_server_params memra_server_default_params(void);

/* Per-token callback of a server request: token of request id, its text piece (n_piece bytes, not
 * NUL-terminated; NULL/0 without a tokenizer). Return nonzero to stop the request (it ends with MEMRA_OK).
 * Called on the server's scheduler thread: it must not wait for another request of the same server. */
typedef int (*memra_server_token_fn)(void *user, int64_t id, memra_token token, const char *piece, int n_piece);

/* Start a server over rt (params may be NULL: defaults). The server opens sequence slots as it admits
 * requests and closes them when they end; other users of rt share its slots and pipeline. Returns NULL with
 * memra_last_error(): MEMRA_E_INVAL (NULL rt, a bad field or door value, named with what is allowed),
 * MEMRA_E_NOMEM. One server per runtime at a time is the intended use (two compete for slots). */
MEMRA_API memra_server *memra_server_create(memra_runtime *rt, const memra_server_params *params);
/* Cancel every request still in the server (each ends with MEMRA_E_ABORTED unless already ended), wait for its
 * steps in flight, stop the thread and free everything, results not yet waited for included. NULL is a no-op.
 * No other call on the server may run concurrently or follow; free the server before its runtime. */
MEMRA_API void memra_server_free(memra_server *srv);

/* Queue request rq (see memra_request: prompt, n_predict, sampling, stop_at_eog, out/out_cap) and return at
 * once with its id (*id >= 1). The prompt is copied; rq itself must stay valid until memra_server_wait
 * returns for this id: the server writes rq->out, rq->n_out and rq->status from its thread. on_token may be
 * NULL. Returns MEMRA_OK; MEMRA_E_INVAL (NULL srv/rq/id, a bad prompt, limit or sampler field: the message
 * names it; nothing queued); MEMRA_E_STATE (the server is being freed); MEMRA_E_NOMEM. Thread-safe. */
MEMRA_API int memra_server_submit(memra_server *srv, memra_request *rq, memra_server_token_fn on_token, void *user,
                                  int64_t *id);
/* Ask request id to stop: a waiting request ends at once, a running one at its next step (its tokens so far
 * stay in rq->out); either ends with status MEMRA_E_ABORTED. Returns MEMRA_OK (also when the request has
 * already ended: its status says how), MEMRA_E_INVAL (an id never submitted or already waited for).
 * Thread-safe. */
MEMRA_API int memra_server_cancel(memra_server *srv, int64_t id);
/* 1 when request id has ended (memra_server_wait would not block), 0 when it is running or waiting,
 * MEMRA_E_INVAL for an unknown id. Never blocks. Thread-safe. */
MEMRA_API int memra_server_poll(memra_server *srv, int64_t id);
/* Wait until request id ends and return its status (also in rq->status): MEMRA_OK (n_predict reached, an
 * end-of-generation token with stop_at_eog, or on_token asked to stop), MEMRA_E_ABORTED (cancelled),
 * MEMRA_E_FULL (the context filled, or the prompt does not fit in n_ctx), MEMRA_E_INVAL (no logit above -inf
 * to pick from), or a step's error. The id is then forgotten (a second wait is MEMRA_E_INVAL). One waiter
 * per id. Thread-safe. */
MEMRA_API int memra_server_wait(memra_server *srv, int64_t id);

typedef struct memra_server_stats {
    uint64_t submitted, ended, cancelled; /* requests */
    uint64_t steps;                       /* steps the scheduler submitted */
    uint64_t rows, decode_rows, prompt_rows; /* their rows */
    uint64_t mixed_steps;                 /* steps that held decode rows and prompt rows together */
    uint64_t argmax_steps;                /* steps whose tokens were picked on the device */
    int max_step_rows;                    /* the largest step */
    int micro_batches;                    /* M in force */
    int waiting, running;                 /* requests now */
} memra_server_stats;
/* A snapshot (published by the scheduler thread after each of its turns). MEMRA_E_INVAL for NULL. */
MEMRA_API int memra_server_get_stats(memra_server *srv, memra_server_stats *out);

#ifdef __cplusplus
}
#endif
#endif
