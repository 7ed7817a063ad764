/* A memra trace (Chrome Trace Event JSON, docs/trace.md) read back with cJSON: its spans, instants and track
 * names, and each stage's busy time (the union of its stream's walks). memra-trace summary prints these figures
 * and memra-tune reports them beside the cut it chooses; both compile this file. No shared state. */
#ifndef TRC_TRACE_READ_H
#define TRC_TRACE_READ_H

#include <cjson/cJSON.h>
#include <stddef.h>

#define TRC_MAX_TRACKS 512

/* A complete span (B/E, b/e, X) or an instant (t1 == t0). */
typedef struct trc_span {
    int tid;
    double t0, t1;       /* us */
    const char *name;    /* points into the parsed document */
    long long step;      /* args.step, -1 without */
    int slot, req;       /* args.slot / args.req, -1 without */
    const cJSON *args;
} trc_span;

typedef struct trc_trace {
    cJSON *doc;                        /* the parsed file (owned) */
    trc_span *sp;                      /* (n,) in file order */
    char *inst;                        /* (n,) 1: sp[i] is an instant */
    int n, cap;
    int tid[TRC_MAX_TRACKS];           /* the named tracks (thread_name metadata) */
    const char *tname[TRC_MAX_TRACKS];
    int n_tracks;
} trc_trace;

/* Parse path into t (zeroed first). 0, or -1 with why (the file unreadable, not JSON, no traceEvents, out of
 * memory); t is freed by trc_free either way. Not thread-safe (the open-span stacks are static). Cost: the whole
 * file in memory, parsed once. */
int trc_load(const char *path, trc_trace *t, char *why, size_t cap);
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
 * two walks. Returns the walks counted, or -1 when out of memory. busy % = 100 * busy / (hi - lo). */
int trc_stage_busy(const trc_trace *t, int s, double lo, double *busy, trc_gap_fn gap, void *ctx);

#endif
