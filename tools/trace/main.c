/* memra-trace: reads a memra trace (Chrome Trace Event JSON, docs/trace.md) with trace_read.h (streaming: memory
 * is the spans kept, not the file; busy and bubble by the code memra-tune uses too), and
 *   summary FILE            prints per stage busy %, bubble %, hop latency p50/p99, host enqueue us per step and
 *                           the top stalls with their cause; the last line starts with "bubble"
 *   html FILE -o OUT.html   writes one self-contained HTML viewer (viewer.h: inline JS/CSS, no network)
 * Exit: 0 ok, 1 the file could not be read or parsed, 2 bad usage. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace_read.h"
#include "viewer.h"

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(const double *v, int n, double q)
{
    if (n == 0)
        return 0;
    int i = (int)ceil(q * n) - 1;
    return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}

typedef struct stall {
    double len, at;
    int stage;
    char cause[160];
} stall;

static int cmp_stall(const void *a, const void *b)
{
    double x = ((const stall *)a)->len, y = ((const stall *)b)->len;
    return x > y ? -1 : x < y;
}

/* Why stage s's stream sat idle from g0 until the walk of `step` began (the step's own events only). */
static void stall_cause(const trc_trace *t, int s, long long step, double g0, char *out, size_t n)
{
    char nm[64];
    snprintf(nm, sizeof nm, "stage %d actor", s);
    int actor = trc_track_of(t, nm);
    snprintf(nm, sizeof nm, "boundary %d hops", s - 1);
    int hops = s > 0 ? trc_track_of(t, nm) : -1;
    if (!t->by_step) {
        snprintf(out, n, "? (out of memory indexing the steps)");
        return;
    }
    int lo, hi = trc_step_events(t, step, &lo);
    for (int k = lo; k < hi; k++) {
        const int i = t->by_step[k];
        const trc_span *x = &t->sp[i];
        if (x->tid == actor && t->inst[i] && !strcmp(x->name, "credit wait")) {
            snprintf(out, n, "credit: out slot %d held by stage %d", x->slot, s + 1);
            return;
        }
        if (x->tid == actor && t->inst[i] && !strcmp(x->name, "feed wait")) {
            snprintf(out, n, "feed: waiting for the previous step's token");
            return;
        }
    }
    for (int k = lo; k < hi; k++) {
        const trc_span *x = &t->sp[t->by_step[k]];
        if (hops >= 0 && x->tid == hops && x->t1 > g0) {
            snprintf(out, n, "upstream: stage %d's walk and the hop (%.0f us of it on boundary %d)", s - 1,
                     x->t1 - x->t0, s - 1);
            return;
        }
    }
    for (int k = lo; k < hi; k++) {
        const int i = t->by_step[k];
        const trc_span *x = &t->sp[i];
        if (x->tid == actor && !t->inst[i] && !strcmp(x->name, "enqueue") && x->t1 > g0) {
            if (x->t0 - g0 > x->t1 - x->t0) /* the step reached the actor late: nothing was there to enqueue */
                snprintf(out, n, "empty mailbox: step %lld reached stage %d %.0f us into the gap (the caller's "
                         "turn: sampling, submit)", step, s, x->t0 - g0);
            else
                snprintf(out, n, "host: stage %d's actor enqueuing the step (%.0f us)", s, x->t1 - x->t0);
            return;
        }
    }
    snprintf(out, n, "empty mailbox: no step submitted (host, scheduler or caller)");
}

/* summary's stalls: the gaps trc_stage_busy reports, each with its cause (on_gap's context). */
typedef struct stalls {
    const trc_trace *t;
    double lo;           /* the window's start (us) */
    stall *st;           /* (n,) of at most t->n */
    int n;
} stalls;

/* A trc_gap_fn: stage s's stream idle from idle_from until walk w began, kept as a stall with its cause. */
static void on_gap(void *ctx, int s, const trc_span *w, double idle_from)
{
    stalls *g = ctx;
    stall *x = &g->st[g->n++];
    *x = (stall){w->t0 - idle_from, idle_from - g->lo, s, ""};
    stall_cause(g->t, s, w->step, idle_from, x->cause, sizeof x->cause);
}

static int summary(trc_trace *t)
{
    char nm[64];
    const int N = trc_n_stages(t);
    if (N == 0) {
        fprintf(stderr, "memra-trace: no \"stage 0 stream\" track: not a memra trace?\n");
        return 1;
    }
    double *v = malloc((size_t)(t->n + 1) * sizeof *v);
    stalls g = {t, 0, malloc((size_t)(t->n + 1) * sizeof *g.st), 0};
    if (!v || !g.st) {
        free(v), free(g.st);
        fprintf(stderr, "memra-trace: out of memory\n");
        return 1;
    }
    trc_index_steps(t); /* without it (out of memory) each stall's cause says so */
    double lo, hi;
    trc_window(t, &lo, &hi);
    g.lo = lo;
    const double win = hi > lo ? hi - lo : 0;
    printf("window %.1f us (first walk begin to last walk end), %d stages\n", win, N);
    double bubble_sum = 0;
    char line[1024];
    int ll = 0;
    for (int s = 0; s < N; s++) {
        double busy;
        const int n = trc_stage_busy(t, s, lo, &busy, on_gap, &g);
        if (n < 0) {
            free(v), free(g.st);
            fprintf(stderr, "memra-trace: out of memory\n");
            return 1;
        }
        double busy_pct = win > 0 ? 100.0 * busy / win : 0, bub = 100.0 - busy_pct;
        bubble_sum += bub;
        /* host enqueue per step: stage s's actor */
        snprintf(nm, sizeof nm, "stage %d actor", s);
        int actor = trc_track_of(t, nm), ne = 0;
        double enq = 0;
        for (int i = 0; i < t->n; i++)
            if (t->sp[i].tid == actor && !t->inst[i] && !strcmp(t->sp[i].name, "enqueue"))
                enq += t->sp[i].t1 - t->sp[i].t0, ne++;
        printf("stage %d: %d walks, busy %.1f%%, bubble %.1f%%, host enqueue %.1f us per step\n", s, n, busy_pct, bub,
               ne ? enq / ne : 0.0);
        ll += snprintf(line + ll, sizeof line - (size_t)ll, "%sstage %d %.1f%%", s ? ", " : "", s, bub);
        if (ll >= (int)sizeof line)
            ll = (int)sizeof line - 1;
    }
    for (int s = 0; s + 1 < N; s++) {
        snprintf(nm, sizeof nm, "boundary %d hops", s);
        int tid = trc_track_of(t, nm), n = 0;
        for (int i = 0; i < t->n; i++)
            if (t->sp[i].tid == tid && !t->inst[i])
                v[n++] = t->sp[i].t1 - t->sp[i].t0;
        qsort(v, (size_t)n, sizeof *v, cmp_d);
        printf("boundary %d: %d hops, latency p50 %.1f us, p99 %.1f us (walk end upstream to frame copied in)\n", s,
               n, pct(v, n, 0.5), pct(v, n, 0.99));
    }
    qsort(g.st, (size_t)g.n, sizeof *g.st, cmp_stall);
    printf("top stalls (idle stream between two walks):\n");
    for (int i = 0; i < g.n && i < 5; i++)
        printf("  %8.1f us  stage %d at +%.1f us: %s\n", g.st[i].len, g.st[i].stage, g.st[i].at, g.st[i].cause);
    if (g.n == 0)
        printf("  none\n");
    printf("bubble %.1f%% (mean over %d stages: %s)\n", bubble_sum / N, N, line);
    free(v), free(g.st);
    return 0;
}

/* Write s as a JSON string safe inside <script> ('<' escaped). */
static void put_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20 || c == '<' || c == '>' || c == '&')
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

/* JSON text of args (cJSON's), '<' escaped (it can only occur inside strings). */
static void put_json(FILE *f, const char *txt)
{
    if (!txt) {
        fputs("{}", f);
        return;
    }
    for (const char *c = txt; *c; c++)
        if (*c == '<' || *c == '>' || *c == '&')
            fprintf(f, "\\u%04x", (unsigned char)*c);
        else
            fputc(*c, f);
}

static int html(const trc_trace *t, const char *src, const char *out)
{
    FILE *f = fopen(out, "w");
    if (!f) {
        fprintf(stderr, "memra-trace: cannot open %s for writing: %s\n", out, strerror(errno));
        return 1;
    }
    fputs(VIEWER_HEAD, f);
    fputs("<script>const TRACE={\"src\":", f);
    put_str(f, src);
    fputs(",\"tracks\":[", f);
    for (int i = 0; i < t->n_tracks; i++) {
        fprintf(f, "%s[%d,", i ? "," : "", t->tid[i]);
        put_str(f, t->tname[i]);
        fputc(']', f);
    }
    fputs("],\"ev\":[", f);
    for (int i = 0, k = 0; i < t->n; i++) {
        const trc_span *x = &t->sp[i];
        if (!trc_track_name(t, x->tid))
            continue;
        fprintf(f, "%s[%d,%.3f,%.3f,%d,", k++ ? ",\n" : "", x->tid, x->t0, x->t1, t->inst[i]);
        put_str(f, x->name);
        fprintf(f, ",%lld,%d,", x->step, x->req);
        put_json(f, x->args);
        fputc(']', f);
    }
    fputs("]};</script>\n", f);
    fputs(VIEWER_TAIL, f);
    if (fclose(f) != 0) {
        fprintf(stderr, "memra-trace: writing %s failed\n", out);
        return 1;
    }
    fprintf(stderr, "memra-trace: wrote %s (%d events, %d tracks)\n", out, t->n, t->n_tracks);
    return 0;
}

static int usage(FILE *f, int rc)
{
    fprintf(f, "usage: memra-trace summary FILE\n"
               "       memra-trace html FILE -o OUT.html\n"
               "FILE: a trace written by memra-run --trace, memra-bench ... --trace, MEMRA_TRACE=path or\n"
               "memra_runtime_trace_start (Chrome Trace Event JSON, docs/trace.md).\n");
    return rc;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")))
        return usage(stdout, 0);
    if (argc < 3) {
        if (argc == 2)
            fprintf(stderr, "memra-trace: '%s': expected a command and a file (summary FILE, html FILE -o OUT)\n",
                    argv[1]);
        return usage(stderr, 2);
    }
    const char *cmd = argv[1], *file = argv[2], *out = NULL;
    if (!strcmp(cmd, "html")) {
        if (argc != 5 || strcmp(argv[3], "-o")) {
            fprintf(stderr, "memra-trace html: expected FILE -o OUT.html\n");
            return usage(stderr, 2);
        }
        out = argv[4];
    } else if (strcmp(cmd, "summary") || argc != 3) {
        fprintf(stderr, "memra-trace: unknown command or extra arguments: '%s' (summary FILE, html FILE -o OUT)\n",
                cmd);
        return usage(stderr, 2);
    }
    trc_trace t;
    char why[512];
    int rc = 0;
    if (trc_load(file, &t, out ? TRC_KEEP_ARGS : 0, why, sizeof why) != 0) {
        fprintf(stderr, "memra-trace: %s\n", why);
        rc = 1;
    } else {
        rc = out ? html(&t, file, out) : summary(&t);
    }
    trc_free(&t);
    return rc;
}
