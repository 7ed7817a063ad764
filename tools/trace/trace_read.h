/* A memra trace (Chrome Trace Event JSON, docs/trace.md) read back, streaming: each event is parsed alone with
 * cJSON, so memory is the spans kept, not the file. Its spans, instants and track names, the events of a step, and
 * each stage's busy time (the union of its stream's walks) over the window of the walks. memra-trace (summary, html)
 * and memra-tune (the busy figures of its traced run) both read traces with it, so both compute the figures by the
 * same code. No shared state but trc_index_steps's sort context (see there). */
#ifndef TRC_TRACE_READ_H
#define TRC_TRACE_READ_H

#include <stddef.h>

#define TRC_MAX_TRACKS 512
#define TRC_N_BUCKETS 1024 /* the interned names' hash table */

/* trc_load's flags */
enum {
    TRC_KEEP_ARGS = 1, /* keep each event's args as JSON text (trc_span.args): html's hover shows them */
};

/* A complete span (B/E, b/e, X) or an instant (t1 == t0). */
typedef struct trc_span {
    int tid;
    double t0, t1;       /* us */
    const char *name;    /* interned: lives as long as the trace */
    long long step;      /* args.step, -1 without */
    int slot, req;       /* args.slot / args.req, -1 without */
    char *args;          /* the args object as JSON text with TRC_KEEP_ARGS (owned by the trace), else NULL */
} trc_span;

/* An interned string (event and track names: a few hundred at most, kernel names included). */
typedef struct trc_istr {
    struct trc_istr *next;
    char s[];
} trc_istr;

typedef struct trc_trace {
    trc_span *sp;                      /* (n,) in the order the spans end in the file */
    char *inst;                        /* (n,) 1: sp[i] is an instant */
    int n, cap;
    int tid[TRC_MAX_TRACKS];           /* the named tracks (thread_name metadata) */
    const char *tname[TRC_MAX_TRACKS]; /* interned */
    int n_tracks;
    int keep_args;                     /* TRC_KEEP_ARGS was asked */
    trc_istr *names[TRC_N_BUCKETS];    /* the interned names (owned) */
    int *by_step;                      /* (n,) span indices sorted by step, then file order (trc_index_steps) */
} trc_trace;

/* Parse path into t (zeroed first), streaming: the file is read in blocks, each element of its traceEvents array
 * (or of a top-level array) is found by a scan that follows strings and nesting only and is parsed alone with
 * cJSON. flags: 0 or TRC_KEEP_ARGS. 0, or -1 with why (the file unreadable, not JSON, no traceEvents array, the
 * array not closed, out of memory); t is freed by trc_free either way. Cost: the spans kept (about 60 bytes each,
 * plus the args text with TRC_KEEP_ARGS) and a block buffer as large as the largest event, not the file. */
int trc_load(const char *path, trc_trace *t, int flags, char *why, size_t cap);
void trc_free(trc_trace *t);

/* The name of track tid, or NULL. */
const char *trc_track_name(const trc_trace *t, int tid);
/* The tid of the track named name ("stage 0 stream"), or -1. */
int trc_track_of(const trc_trace *t, const char *name);
/* The stages N: tracks "stage 0 stream" .. "stage N-1 stream"; 0 when not a memra trace. */
int trc_n_stages(const trc_trace *t);
/* The window the busy figures cover: the first walk's begin to the last walk's end (us); lo > hi without walks. */
void trc_window(const trc_trace *t, double *lo, double *hi);

/* Called for each idle stretch of a stage's stream between two walks: w is the walk that ends it, from the time
 * the stream fell idle. */
typedef void (*trc_gap_fn)(void *ctx, int stage, const trc_span *w, double idle_from);

/* Stage s's busy time from lo (us): the union of its stream's walks; gap (may be NULL) sees each stretch between
 * two walks, in time order. Returns the walks counted, or -1 when out of memory. busy % = 100 * busy / (hi - lo)
 * with trc_window's lo and hi. */
int trc_stage_busy(const trc_trace *t, int s, double lo, double *busy, trc_gap_fn gap, void *ctx);

/* Index the spans and instants by step (t->by_step) for trc_step_events. 0, or -1 when out of memory. Not
 * thread-safe: qsort has no context argument, so the trace being sorted is a static. Cost: n ints, one sort. */
int trc_index_steps(trc_trace *t);
/* The events of step: t->by_step[*lo .. return) are their indices in t->sp, in file order. Needs trc_index_steps.
 * Cost: a binary search. */
int trc_step_events(const trc_trace *t, long long step, int *lo);

#endif
