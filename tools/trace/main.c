/* memra-trace: reads a memra trace (Chrome Trace Event JSON, docs/trace.md), streaming (each event parsed alone
 * with cJSON: memory is the spans kept, not the file), and
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
    const char *name;    /* interned (trace.names) */
    long long step;      /* args.step, -1 without */
    int slot, req;       /* args.slot / args.req, -1 without */
    char *args;          /* the args object as JSON text (html only, else NULL) */
} span;

/* Interned strings: event and track names (a few hundred at most: kernel names included). */
typedef struct istr {
    struct istr *next;
    char s[];
} istr;
#define N_BUCKETS 1024

typedef struct trace {
    span *sp;            /* complete spans (B/E, b/e, X) and instants (t1 == t0, inst 1) */
    char *inst;
    int n, cap;
    int tid[MAX_TRACKS];
    const char *tname[MAX_TRACKS];
    int n_tracks;
    int keep_args;       /* html: keep each event's args text */
    istr *names[N_BUCKETS];
    int *by_step;        /* span indices sorted by step (summary's stall causes) */
} trace;

static const char *intern(trace *t, const char *s)
{
    unsigned h = 5381;
    for (const char *c = s; *c; c++)
        h = h * 33 + (unsigned char)*c;
    istr **b = &t->names[h % N_BUCKETS];
    for (istr *x = *b; x; x = x->next)
        if (!strcmp(x->s, s))
            return x->s;
    const size_t n = strlen(s) + 1;
    istr *x = malloc(sizeof *x + n);
    if (!x)
        return NULL;
    memcpy(x->s, s, n);
    x->next = *b;
    *b = x;
    return x->s;
}

static void trace_free(trace *t)
{
    for (int i = 0; i < t->n; i++)
        free(t->sp[i].args);
    free(t->sp);
    free(t->inst);
    free(t->by_step);
    for (int b = 0; b < N_BUCKETS; b++)
        for (istr *x = t->names[b], *nx; x; x = nx)
            nx = x->next, free(x);
}

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
        if (!sp || !in) {
            free(s.args);
            return -1;
        }
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

/* The span of event e (its name interned, its args' text kept for html), from t0 to t1; name NULL: out of memory. */
static span make_span(trace *t, const cJSON *e, int tid, double t0, double t1)
{
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(e, "args");
    span s = {tid, t0, t1, intern(t, cJSON_IsString(nm) ? nm->valuestring : "?"), arg_int(args, "step", -1),
              (int)arg_int(args, "slot", -1), (int)arg_int(args, "req", -1), NULL};
    if (t->keep_args && args && !(s.args = cJSON_PrintUnformatted(args)))
        s.name = NULL;
    return s;
}

/* Open spans while the events stream by: B per track (a stack), b per (cat, id). */
enum { DEPTH = 64, OPEN = 4096, ID_LEN = 96 };
typedef struct opens {
    struct { int tid, depth; span s[DEPTH]; } stk[MAX_TRACKS];
    struct { char id[ID_LEN]; span s; } ab[OPEN];
    int n_stk, n_ab;
} opens;

/* The async id of e: its cat and id as text (a string or a number). */
static void async_id(const cJSON *e, char *out)
{
    const cJSON *cat = cJSON_GetObjectItemCaseSensitive(e, "cat"), *id = cJSON_GetObjectItemCaseSensitive(e, "id");
    char num[40] = "";
    if (cJSON_IsNumber(id))
        snprintf(num, sizeof num, "%.17g", id->valuedouble);
    snprintf(out, ID_LEN, "%s\x1f%s", cJSON_IsString(cat) ? cat->valuestring : "",
             cJSON_IsString(id) ? id->valuestring : num);
}

/* One event of the trace: a track's name, or a span (B/E nested per track, b/e by id, X) or an instant. */
static int take(trace *t, opens *o, const cJSON *e)
{
    const cJSON *ph = cJSON_GetObjectItemCaseSensitive(e, "ph");
    const cJSON *jt = cJSON_GetObjectItemCaseSensitive(e, "tid");
    const cJSON *jts = cJSON_GetObjectItemCaseSensitive(e, "ts");
    if (!cJSON_IsString(ph))
        return 0;
    int tid = cJSON_IsNumber(jt) ? jt->valueint : 0;
    double ts = cJSON_IsNumber(jts) ? jts->valuedouble : 0;
    char p = ph->valuestring[0];
    if (p == 'M') {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
        const cJSON *an = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(e, "args"), "name");
        if (cJSON_IsString(nm) && !strcmp(nm->valuestring, "thread_name") && cJSON_IsString(an) &&
            t->n_tracks < MAX_TRACKS) {
            if (!(t->tname[t->n_tracks] = intern(t, an->valuestring)))
                return -1;
            t->tid[t->n_tracks++] = tid;
        }
        return 0;
    }
    if (p == 'B' || p == 'E') {
        int k = 0;
        while (k < o->n_stk && o->stk[k].tid != tid)
            k++;
        if (k == o->n_stk) {
            if (o->n_stk == MAX_TRACKS)
                return 0;
            o->stk[k].tid = tid;
            o->stk[o->n_stk++].depth = 0;
        }
        if (p == 'B' && o->stk[k].depth < DEPTH) {
            span s = make_span(t, e, tid, ts, ts);
            if (!s.name)
                return -1;
            o->stk[k].s[o->stk[k].depth++] = s;
        } else if (p == 'E' && o->stk[k].depth > 0) {
            span s = o->stk[k].s[--o->stk[k].depth];
            s.t1 = ts;
            return push(t, s, 0);
        }
    } else if (p == 'b' && o->n_ab < OPEN) {
        span s = make_span(t, e, tid, ts, ts);
        if (!s.name)
            return -1;
        async_id(e, o->ab[o->n_ab].id);
        o->ab[o->n_ab++].s = s;
    } else if (p == 'e') {
        char id[ID_LEN];
        async_id(e, id);
        for (int k = o->n_ab - 1; k >= 0; k--)
            if (!strcmp(o->ab[k].id, id)) {
                span s = o->ab[k].s;
                s.t1 = ts;
                o->ab[k] = o->ab[--o->n_ab];
                return push(t, s, 0);
            }
    } else if (p == 'X') {
        const cJSON *dur = cJSON_GetObjectItemCaseSensitive(e, "dur");
        span s = make_span(t, e, tid, ts, ts + (cJSON_IsNumber(dur) ? dur->valuedouble : 0));
        return s.name ? push(t, s, 0) : -1;
    } else if (p == 'i' || p == 'I') {
        span s = make_span(t, e, tid, ts, ts);
        return s.name ? push(t, s, 1) : -1;
    }
    return 0;
}

/* Parse path into t, streaming: the file is read in blocks, each element of its traceEvents array (or of the
 * top-level array) is found by a scan that follows strings and nesting only, and parsed alone with cJSON, so the
 * memory is the spans kept, not the file's size times cJSON's nodes. */
static int load(const char *path, trace *t, int keep_args)
{
    memset(t, 0, sizeof *t);
    t->keep_args = keep_args;
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "memra-trace: cannot open %s\n", path);
        return 1;
    }
    opens *o = calloc(1, sizeof *o);
    size_t cap = 1 << 20, len = 0, pos = 0, el = 0; /* buf[el .. len): the element being scanned, from el */
    char *buf = malloc(cap), key[32] = "", str[32];
    int rc = 1, depth = 0, arr = -1, in_str = 0, esc = 0, done = 0, sl = 0, elem = 0, seen = 0;
    long long base = 0; /* file offset of buf[0] */
    if (!o || !buf) {
        fprintf(stderr, "memra-trace: out of memory reading %s\n", path);
        goto out;
    }
    /* arr: the depth inside the events array (-1: not in it yet); an element starts at '{' at that depth */
    while (!done) {
        if (pos == len) {
            size_t keep = elem ? el : pos; /* bytes before keep are done with */
            memmove(buf, buf + keep, len - keep);
            base += (long long)keep, len -= keep, pos -= keep, el -= elem ? keep : 0;
            if (len == cap) {
                char *nb = realloc(buf, cap * 2);
                if (!nb) {
                    fprintf(stderr, "memra-trace: out of memory reading %s\n", path);
                    goto out;
                }
                buf = nb, cap *= 2;
            }
            size_t got = fread(buf + len, 1, cap - len, f);
            if (got == 0)
                break;
            len += got;
        }
        const char c = buf[pos++];
        if (!seen && c != ' ' && c != '\n' && c != '\r' && c != '\t') { /* a JSON document opens with { or [ */
            if (c != '{' && c != '[') {
                fprintf(stderr, "memra-trace: %s: not valid JSON (at byte %lld)\n", path, base + (long long)pos - 1);
                goto out;
            }
            seen = 1;
        }
        if (in_str) {
            if (esc)
                esc = 0;
            else if (c == '\\')
                esc = 1;
            else if (c == '"')
                in_str = 0, str[sl < (int)sizeof str - 1 ? sl : (int)sizeof str - 1] = 0;
            else if (sl < (int)sizeof str - 1)
                str[sl++] = c;
            continue;
        }
        switch (c) {
        case '"': in_str = 1, sl = 0; break;
        case ':': if (depth == 1 && arr < 0) snprintf(key, sizeof key, "%s", str); break;
        case '{':
        case '[':
            if (arr < 0 && c == '[' && (depth == 0 || (depth == 1 && !strcmp(key, "traceEvents"))))
                arr = depth + 1;
            else if (depth == arr && c == '{')
                elem = 1, el = pos - 1;
            depth++;
            break;
        case '}':
        case ']':
            depth--;
            if (arr >= 0 && depth == arr && elem) {
                cJSON *e = cJSON_ParseWithLength(buf + el, pos - el);
                if (!e) {
                    fprintf(stderr, "memra-trace: %s: not valid JSON (the event at byte %lld)\n", path, base + (long long)el);
                    goto out;
                }
                const int r = take(t, o, e);
                cJSON_Delete(e);
                if (r) {
                    fprintf(stderr, "memra-trace: out of memory reading %s\n", path);
                    goto out;
                }
                elem = 0;
            } else if (arr >= 0 && depth == arr - 1) {
                done = 1;
            }
            if (depth < 0) {
                fprintf(stderr, "memra-trace: %s: not valid JSON (at byte %lld)\n", path, base + (long long)pos - 1);
                goto out;
            }
            break;
        default: break;
        }
    }
    if (arr < 0)
        fprintf(stderr, "memra-trace: %s: no traceEvents array (a Chrome Trace Event file is expected)\n", path);
    else if (!done)
        fprintf(stderr, "memra-trace: %s: not valid JSON (the traceEvents array is not closed: truncated?)\n", path);
    else
        rc = 0;
out:
    for (int k = 0; o && k < o->n_stk; k++) /* begins without an end */
        for (int d = 0; d < o->stk[k].depth; d++)
            free(o->stk[k].s[d].args);
    for (int k = 0; o && k < o->n_ab; k++)
        free(o->ab[k].s.args);
    free(o);
    free(buf);
    fclose(f);
    return rc;
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

static const trace *sort_t; /* cmp_step's trace (qsort has no context) */
static int cmp_step(const void *a, const void *b)
{
    const long long x = sort_t->sp[*(const int *)a].step, y = sort_t->sp[*(const int *)b].step;
    return x < y ? -1 : x > y ? 1 : *(const int *)a - *(const int *)b; /* then file order */
}

/* t->by_step: the spans and instants of a step, together (0 or -1 when out of memory: causes then say so). */
static int index_steps(trace *t)
{
    if (!(t->by_step = malloc((size_t)(t->n + 1) * sizeof *t->by_step)))
        return -1;
    for (int i = 0; i < t->n; i++)
        t->by_step[i] = i;
    sort_t = t;
    qsort(t->by_step, (size_t)t->n, sizeof *t->by_step, cmp_step);
    return 0;
}

/* [*lo, return) in t->by_step: the events of step. */
static int step_range(const trace *t, long long step, int *lo)
{
    int a = 0, b = t->n;
    while (a < b) {
        const int m = (a + b) / 2;
        if (t->sp[t->by_step[m]].step < step)
            a = m + 1;
        else
            b = m;
    }
    *lo = a;
    while (b < t->n && t->sp[t->by_step[b]].step == step)
        b++;
    return b;
}

/* Why stage s's stream sat idle from g0 until the walk of `step` began (the step's own events only). */
static void stall_cause(const trace *t, int s, long long step, double g0, char *out, size_t n)
{
    char nm[64];
    snprintf(nm, sizeof nm, "stage %d actor", s);
    int actor = track_of(t, nm);
    snprintf(nm, sizeof nm, "boundary %d hops", s - 1);
    int hops = s > 0 ? track_of(t, nm) : -1;
    if (!t->by_step) {
        snprintf(out, n, "? (out of memory indexing the steps)");
        return;
    }
    int lo, hi = step_range(t, step, &lo);
    for (int k = lo; k < hi; k++) {
        const int i = t->by_step[k];
        const span *x = &t->sp[i];
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
        const span *x = &t->sp[t->by_step[k]];
        if (hops >= 0 && x->tid == hops && x->t1 > g0) {
            snprintf(out, n, "upstream: stage %d's walk and the hop (%.0f us of it on boundary %d)", s - 1,
                     x->t1 - x->t0, s - 1);
            return;
        }
    }
    for (int k = lo; k < hi; k++) {
        const int i = t->by_step[k];
        const span *x = &t->sp[i];
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

static int summary(trace *t)
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
    index_steps(t);
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
    int rc = load(file, &t, out != NULL);
    if (rc == 0)
        rc = out ? html(&t, file, out) : summary(&t);
    trace_free(&t);
    return rc;
}
