/* memra-trace: reads a memra trace (Chrome Trace Event JSON, docs/trace.md) with cJSON and
 *   summary FILE            prints per stage busy %, bubble %, hop latency p50/p99, host enqueue us per step and
 *                           the top stalls with their cause; the last line starts with "bubble"
 *   html FILE -o OUT.html   writes one self-contained HTML viewer (viewer.h: inline JS/CSS, no network)
 * Exit: 0 ok, 1 the file could not be read or parsed, 2 bad usage. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "viewer.h"

#define MAX_TRACKS 512

typedef struct span {
    int tid;
    double t0, t1;       /* us */
    const char *name;    /* points into the parsed document */
    long long step;      /* args.step, -1 without */
    int slot, req;       /* args.slot / args.req, -1 without */
    const cJSON *args;
} span;

typedef struct trace {
    cJSON *doc;
    span *sp;            /* complete spans (B/E, b/e, X) and instants (t1 == t0, inst 1) */
    char *inst;
    int n, cap;
    int tid[MAX_TRACKS];
    const char *tname[MAX_TRACKS];
    int n_tracks;
} trace;

static const char *track_name(const trace *t, int tid)
{
    for (int i = 0; i < t->n_tracks; i++)
        if (t->tid[i] == tid)
            return t->tname[i];
    return NULL;
}

static int track_of(const trace *t, const char *name)
{
    for (int i = 0; i < t->n_tracks; i++)
        if (t->tname[i] && !strcmp(t->tname[i], name))
            return t->tid[i];
    return -1;
}

static int push(trace *t, span s, int inst)
{
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 1024;
        span *sp = realloc(t->sp, (size_t)cap * sizeof *sp);
        char *in = realloc(t->inst, (size_t)cap);
        if (sp)
            t->sp = sp;
        if (in)
            t->inst = in;
        if (!sp || !in)
            return -1;
        t->cap = cap;
    }
    t->inst[t->n] = (char)inst;
    t->sp[t->n++] = s;
    return 0;
}

static long long arg_int(const cJSON *args, const char *k, long long dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(args, k);
    return cJSON_IsNumber(v) ? (long long)v->valuedouble : dflt;
}

static span make_span(const cJSON *e, int tid, double t0, double t1, const cJSON *args)
{
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
    return (span){tid, t0, t1, cJSON_IsString(nm) ? nm->valuestring : "?", arg_int(args, "step", -1),
                  (int)arg_int(args, "slot", -1), (int)arg_int(args, "req", -1), args};
}

/* Parse path into t: spans from B/E (nested per track), b/e (by cat and id) and X; instants; track names. */
static int load(const char *path, trace *t)
{
    memset(t, 0, sizeof *t);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "memra-trace: cannot open %s\n", path);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "memra-trace: cannot read %s\n", path);
        free(buf);
        fclose(f);
        return 1;
    }
    fclose(f);
    t->doc = cJSON_ParseWithLength(buf, (size_t)n);
    if (!t->doc) {
        const char *at = cJSON_GetErrorPtr();
        fprintf(stderr, "memra-trace: %s: not valid JSON (at byte %ld)\n", path, at ? (long)(at - buf) : -1L);
        free(buf);
        return 1;
    }
    free(buf);
    const cJSON *evs = cJSON_IsArray(t->doc) ? t->doc : cJSON_GetObjectItemCaseSensitive(t->doc, "traceEvents");
    if (!cJSON_IsArray(evs)) {
        fprintf(stderr, "memra-trace: %s: no traceEvents array (a Chrome Trace Event file is expected)\n", path);
        return 1;
    }
    /* open B per track (a stack), open b per id */
    enum { DEPTH = 64, OPEN = 4096 };
    static struct { int tid, depth; const cJSON *e[DEPTH]; double ts[DEPTH]; } stk[MAX_TRACKS];
    static struct { const cJSON *e; double ts; } ab[OPEN];
    int n_stk = 0, n_ab = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, evs)
    {
        const cJSON *ph = cJSON_GetObjectItemCaseSensitive(e, "ph");
        const cJSON *jt = cJSON_GetObjectItemCaseSensitive(e, "tid");
        const cJSON *jts = cJSON_GetObjectItemCaseSensitive(e, "ts");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(e, "args");
        if (!cJSON_IsString(ph))
            continue;
        int tid = cJSON_IsNumber(jt) ? jt->valueint : 0;
        double ts = cJSON_IsNumber(jts) ? jts->valuedouble : 0;
        char p = ph->valuestring[0];
        if (p == 'M') {
            const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
            const cJSON *an = cJSON_GetObjectItemCaseSensitive(args, "name");
            if (cJSON_IsString(nm) && !strcmp(nm->valuestring, "thread_name") && cJSON_IsString(an) &&
                t->n_tracks < MAX_TRACKS) {
                t->tid[t->n_tracks] = tid;
                t->tname[t->n_tracks++] = an->valuestring;
            }
            continue;
        }
        if (p == 'B' || p == 'E') {
            int k = 0;
            while (k < n_stk && stk[k].tid != tid)
                k++;
            if (k == n_stk) {
                if (n_stk == MAX_TRACKS)
                    continue;
                stk[n_stk].tid = tid;
                stk[n_stk++].depth = 0;
            }
            if (p == 'B' && stk[k].depth < DEPTH) {
                stk[k].e[stk[k].depth] = e;
                stk[k].ts[stk[k].depth++] = ts;
            } else if (p == 'E' && stk[k].depth > 0) {
                int d = --stk[k].depth;
                const cJSON *b = stk[k].e[d];
                if (push(t, make_span(b, tid, stk[k].ts[d], ts, cJSON_GetObjectItemCaseSensitive(b, "args")), 0))
                    goto nomem;
            }
        } else if (p == 'b' && n_ab < OPEN) {
            ab[n_ab].e = e;
            ab[n_ab++].ts = ts;
        } else if (p == 'e') {
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
            for (int k = n_ab - 1; k >= 0; k--) {
                const cJSON *bid = cJSON_GetObjectItemCaseSensitive(ab[k].e, "id");
                if (cJSON_Compare(id, bid, 1)) {
                    if (push(t, make_span(ab[k].e, tid, ab[k].ts, ts,
                                          cJSON_GetObjectItemCaseSensitive(ab[k].e, "args")), 0))
                        goto nomem;
                    ab[k] = ab[--n_ab];
                    break;
                }
            }
        } else if (p == 'X') {
            const cJSON *dur = cJSON_GetObjectItemCaseSensitive(e, "dur");
            if (push(t, make_span(e, tid, ts, ts + (cJSON_IsNumber(dur) ? dur->valuedouble : 0), args), 0))
                goto nomem;
        } else if (p == 'i' || p == 'I') {
            if (push(t, make_span(e, tid, ts, ts, args), 1))
                goto nomem;
        }
    }
    return 0;
nomem:
    fprintf(stderr, "memra-trace: out of memory reading %s\n", path);
    return 1;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int cmp_t0(const void *a, const void *b)
{
    const span *x = *(span *const *)a, *y = *(span *const *)b;
    return x->t0 < y->t0 ? -1 : x->t0 > y->t0;
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

/* Why stage s's stream sat idle from g0 until the walk of `step` began. */
static void stall_cause(const trace *t, int s, long long step, double g0, char *out, size_t n)
{
    char nm[64];
    snprintf(nm, sizeof nm, "stage %d actor", s);
    int actor = track_of(t, nm);
    snprintf(nm, sizeof nm, "boundary %d hops", s - 1);
    int hops = s > 0 ? track_of(t, nm) : -1;
    for (int i = 0; i < t->n; i++) {
        const span *x = &t->sp[i];
        if (x->tid == actor && x->step == step && t->inst[i] && !strcmp(x->name, "credit wait")) {
            snprintf(out, n, "credit: out slot %d held by stage %d", x->slot, s + 1);
            return;
        }
        if (x->tid == actor && x->step == step && t->inst[i] && !strcmp(x->name, "feed wait")) {
            snprintf(out, n, "feed: waiting for the previous step's token");
            return;
        }
    }
    for (int i = 0; i < t->n; i++) {
        const span *x = &t->sp[i];
        if (hops >= 0 && x->tid == hops && x->step == step && x->t1 > g0) {
            snprintf(out, n, "upstream: stage %d's walk and the hop (%.0f us of it on boundary %d)", s - 1,
                     x->t1 - x->t0, s - 1);
            return;
        }
    }
    for (int i = 0; i < t->n; i++) {
        const span *x = &t->sp[i];
        if (x->tid == actor && x->step == step && !t->inst[i] && !strcmp(x->name, "enqueue") && x->t1 > g0) {
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

static int summary(const trace *t)
{
    char nm[64];
    int N = 0;
    for (;; N++) {
        snprintf(nm, sizeof nm, "stage %d stream", N);
        if (track_of(t, nm) < 0)
            break;
    }
    if (N == 0) {
        fprintf(stderr, "memra-trace: no \"stage 0 stream\" track: not a memra trace?\n");
        return 1;
    }
    span **w = malloc((size_t)(t->n + 1) * sizeof *w);
    double *v = malloc((size_t)(t->n + 1) * sizeof *v);
    stall *st = malloc((size_t)(t->n + 1) * sizeof *st);
    if (!w || !v || !st) {
        free(w), free(v), free(st);
        fprintf(stderr, "memra-trace: out of memory\n");
        return 1;
    }
    double lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < t->n; i++)
        if (!t->inst[i] && !strcmp(t->sp[i].name, "walk")) {
            lo = fmin(lo, t->sp[i].t0);
            hi = fmax(hi, t->sp[i].t1);
        }
    const double win = hi > lo ? hi - lo : 0;
    printf("window %.1f us (first walk begin to last walk end), %d stages\n", win, N);
    double bubble_sum = 0;
    int n_stall = 0;
    char line[1024];
    int ll = 0;
    for (int s = 0; s < N; s++) {
        snprintf(nm, sizeof nm, "stage %d stream", s);
        int tid = track_of(t, nm);
        int n = 0;
        for (int i = 0; i < t->n; i++)
            if (t->sp[i].tid == tid && !t->inst[i] && !strcmp(t->sp[i].name, "walk"))
                w[n++] = &t->sp[i];
        qsort(w, (size_t)n, sizeof *w, cmp_t0);
        double busy = 0, end = lo;
        for (int i = 0; i < n; i++) {
            double b = fmax(w[i]->t0, end), e = fmax(w[i]->t1, b); /* the union of the walks */
            if (w[i]->t0 > end && i > 0) { /* a bubble: idle between two walks */
                st[n_stall] = (stall){w[i]->t0 - end, end - lo, s, ""};
                stall_cause(t, s, w[i]->step, end, st[n_stall].cause, sizeof st[n_stall].cause);
                n_stall++;
            }
            busy += e - b;
            end = fmax(end, e);
        }
        double busy_pct = win > 0 ? 100.0 * busy / win : 0, bub = 100.0 - busy_pct;
        bubble_sum += bub;
        /* host enqueue per step: stage s's actor */
        snprintf(nm, sizeof nm, "stage %d actor", s);
        int actor = track_of(t, nm), ne = 0;
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
        int tid = track_of(t, nm), n = 0;
        for (int i = 0; i < t->n; i++)
            if (t->sp[i].tid == tid && !t->inst[i])
                v[n++] = t->sp[i].t1 - t->sp[i].t0;
        qsort(v, (size_t)n, sizeof *v, cmp_d);
        printf("boundary %d: %d hops, latency p50 %.1f us, p99 %.1f us (walk end upstream to frame copied in)\n", s,
               n, pct(v, n, 0.5), pct(v, n, 0.99));
    }
    qsort(st, (size_t)n_stall, sizeof *st, cmp_stall);
    printf("top stalls (idle stream between two walks):\n");
    for (int i = 0; i < n_stall && i < 5; i++)
        printf("  %8.1f us  stage %d at +%.1f us: %s\n", st[i].len, st[i].stage, st[i].at, st[i].cause);
    if (n_stall == 0)
        printf("  none\n");
    printf("bubble %.1f%% (mean over %d stages: %s)\n", bubble_sum / N, N, line);
    free(w), free(v), free(st);
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

/* JSON text of args, '<' escaped (it can only occur inside strings). */
static void put_json(FILE *f, const cJSON *args)
{
    char *txt = args ? cJSON_PrintUnformatted(args) : NULL;
    if (!txt) {
        fputs("{}", f);
        return;
    }
    for (const char *c = txt; *c; c++)
        if (*c == '<' || *c == '>' || *c == '&')
            fprintf(f, "\\u%04x", (unsigned char)*c);
        else
            fputc(*c, f);
    free(txt);
}

static int html(const trace *t, const char *src, const char *out)
{
    FILE *f = fopen(out, "w");
    if (!f) {
        fprintf(stderr, "memra-trace: cannot open %s for writing\n", out);
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
        const span *x = &t->sp[i];
        if (!track_name(t, x->tid))
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
    if (argc < 3)
        return usage(stderr, 2);
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
    trace t;
    int rc = load(file, &t);
    if (rc == 0)
        rc = out ? html(&t, file, out) : summary(&t);
    cJSON_Delete(t.doc);
    free(t.sp);
    free(t.inst);
    return rc;
}
