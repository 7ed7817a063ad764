/* A memra trace read back, streaming: see trace_read.h. */
#include "trace_read.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The interned copy of s (one per distinct name), or NULL when out of memory. */
static const char *intern(trc_trace *t, const char *s)
{
    unsigned h = 5381;
    for (const char *c = s; *c; c++)
        h = h * 33 + (unsigned char)*c;
    trc_istr **b = &t->names[h % TRC_N_BUCKETS];
    for (trc_istr *x = *b; x; x = x->next)
        if (!strcmp(x->s, s))
            return x->s;
    const size_t n = strlen(s) + 1;
    trc_istr *x = malloc(sizeof *x + n);
    if (!x)
        return NULL;
    memcpy(x->s, s, n);
    x->next = *b;
    *b = x;
    return x->s;
}

void trc_free(trc_trace *t)
{
    for (int i = 0; i < t->n; i++)
        free(t->sp[i].args);
    free(t->sp);
    free(t->inst);
    free(t->by_step);
    for (int b = 0; b < TRC_N_BUCKETS; b++)
        for (trc_istr *x = t->names[b], *nx; x; x = nx)
            nx = x->next, free(x);
    memset(t, 0, sizeof *t);
}

const char *trc_track_name(const trc_trace *t, int tid)
{
    for (int i = 0; i < t->n_tracks; i++)
        if (t->tid[i] == tid)
            return t->tname[i];
    return NULL;
}

int trc_track_of(const trc_trace *t, const char *name)
{
    for (int i = 0; i < t->n_tracks; i++)
        if (t->tname[i] && !strcmp(t->tname[i], name))
            return t->tid[i];
    return -1;
}

/* Keep span s (its args text given to t, or freed when out of memory). */
static int push(trc_trace *t, trc_span s, int inst)
{
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 1024;
        trc_span *sp = realloc(t->sp, (size_t)cap * sizeof *sp);
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

/* The span of event e (its name interned, its args' text kept with TRC_KEEP_ARGS), from t0 to t1; name NULL: out
 * of memory. */
static trc_span make_span(trc_trace *t, const cJSON *e, int tid, double t0, double t1)
{
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(e, "args");
    trc_span s = {tid, t0, t1, intern(t, cJSON_IsString(nm) ? nm->valuestring : "?"), arg_int(args, "step", -1),
                  (int)arg_int(args, "slot", -1), (int)arg_int(args, "req", -1), NULL};
    if (t->keep_args && args && !(s.args = cJSON_PrintUnformatted(args)))
        s.name = NULL;
    return s;
}

/* Open spans while the events stream by: B per track (a stack), b per (cat, id). */
enum { DEPTH = 64, OPEN = 4096, ID_LEN = 96 };
typedef struct opens {
    struct { int tid, depth; trc_span s[DEPTH]; } stk[TRC_MAX_TRACKS];
    struct { char id[ID_LEN]; trc_span s; } ab[OPEN];
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

/* One event of the trace: a track's name, or a span (B/E nested per track, b/e by id, X) or an instant. 0, or -1
 * when out of memory. */
static int take(trc_trace *t, opens *o, const cJSON *e)
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
            t->n_tracks < TRC_MAX_TRACKS) {
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
            if (o->n_stk == TRC_MAX_TRACKS)
                return 0;
            o->stk[k].tid = tid;
            o->stk[o->n_stk++].depth = 0;
        }
        if (p == 'B' && o->stk[k].depth < DEPTH) {
            trc_span s = make_span(t, e, tid, ts, ts);
            if (!s.name)
                return -1;
            o->stk[k].s[o->stk[k].depth++] = s;
        } else if (p == 'E' && o->stk[k].depth > 0) {
            trc_span s = o->stk[k].s[--o->stk[k].depth];
            s.t1 = ts;
            return push(t, s, 0);
        }
    } else if (p == 'b' && o->n_ab < OPEN) {
        trc_span s = make_span(t, e, tid, ts, ts);
        if (!s.name)
            return -1;
        async_id(e, o->ab[o->n_ab].id);
        o->ab[o->n_ab++].s = s;
    } else if (p == 'e') {
        char id[ID_LEN];
        async_id(e, id);
        for (int k = o->n_ab - 1; k >= 0; k--)
            if (!strcmp(o->ab[k].id, id)) {
                trc_span s = o->ab[k].s;
                s.t1 = ts;
                o->ab[k] = o->ab[--o->n_ab];
                return push(t, s, 0);
            }
    } else if (p == 'X') {
        const cJSON *dur = cJSON_GetObjectItemCaseSensitive(e, "dur");
        trc_span s = make_span(t, e, tid, ts, ts + (cJSON_IsNumber(dur) ? dur->valuedouble : 0));
        return s.name ? push(t, s, 0) : -1;
    } else if (p == 'i' || p == 'I') {
        trc_span s = make_span(t, e, tid, ts, ts);
        return s.name ? push(t, s, 1) : -1;
    }
    return 0;
}

int trc_load(const char *path, trc_trace *t, int flags, char *why, size_t why_cap)
{
    memset(t, 0, sizeof *t);
    t->keep_args = (flags & TRC_KEEP_ARGS) != 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(why, why_cap, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    opens *o = calloc(1, sizeof *o);
    size_t cap = 1 << 20, len = 0, pos = 0, el = 0; /* buf[el .. len): the element being scanned, from el */
    char *buf = malloc(cap), key[32] = "", str[32];
    int rc = -1, depth = 0, arr = -1, in_str = 0, esc = 0, done = 0, sl = 0, elem = 0, seen = 0;
    long long base = 0; /* file offset of buf[0] */
    if (!o || !buf) {
        snprintf(why, why_cap, "out of memory reading %s", path);
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
                    snprintf(why, why_cap, "out of memory reading %s", path);
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
                snprintf(why, why_cap, "%s: not valid JSON (at byte %lld)", path, base + (long long)pos - 1);
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
                    snprintf(why, why_cap, "%s: not valid JSON (the event at byte %lld)", path, base + (long long)el);
                    goto out;
                }
                const int r = take(t, o, e);
                cJSON_Delete(e);
                if (r) {
                    snprintf(why, why_cap, "out of memory reading %s", path);
                    goto out;
                }
                elem = 0;
            } else if (arr >= 0 && depth == arr - 1) {
                done = 1;
            }
            if (depth < 0) {
                snprintf(why, why_cap, "%s: not valid JSON (at byte %lld)", path, base + (long long)pos - 1);
                goto out;
            }
            break;
        default: break;
        }
    }
    if (arr < 0)
        snprintf(why, why_cap, "%s: no traceEvents array (a Chrome Trace Event file is expected)", path);
    else if (!done)
        snprintf(why, why_cap, "%s: not valid JSON (the traceEvents array is not closed: truncated?)", path);
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

int trc_n_stages(const trc_trace *t)
{
    char nm[64];
    int n = 0;
    for (;; n++) {
        snprintf(nm, sizeof nm, "stage %d stream", n);
        if (trc_track_of(t, nm) < 0)
            return n;
    }
}

void trc_window(const trc_trace *t, double *lo, double *hi)
{
    *lo = INFINITY, *hi = -INFINITY;
    for (int i = 0; i < t->n; i++)
        if (!t->inst[i] && !strcmp(t->sp[i].name, "walk")) {
            *lo = fmin(*lo, t->sp[i].t0);
            *hi = fmax(*hi, t->sp[i].t1);
        }
}

static int cmp_t0(const void *a, const void *b)
{
    const trc_span *x = *(const trc_span *const *)a, *y = *(const trc_span *const *)b;
    return x->t0 < y->t0 ? -1 : x->t0 > y->t0;
}

int trc_stage_busy(const trc_trace *t, int s, double lo, double *busy, trc_gap_fn gap, void *ctx)
{
    char nm[64];
    snprintf(nm, sizeof nm, "stage %d stream", s);
    const int tid = trc_track_of(t, nm);
    const trc_span **w = malloc((size_t)(t->n + 1) * sizeof *w);
    if (!w)
        return -1;
    int n = 0;
    for (int i = 0; i < t->n; i++)
        if (t->sp[i].tid == tid && !t->inst[i] && !strcmp(t->sp[i].name, "walk"))
            w[n++] = &t->sp[i];
    qsort(w, (size_t)n, sizeof *w, cmp_t0);
    double end = lo;
    *busy = 0;
    for (int i = 0; i < n; i++) {
        const double b = fmax(w[i]->t0, end), e = fmax(w[i]->t1, b); /* the union of the walks */
        if (w[i]->t0 > end && i > 0 && gap) /* idle between two walks */
            gap(ctx, s, w[i], end);
        *busy += e - b;
        end = fmax(end, e);
    }
    free((void *)w);
    return n;
}

static const trc_trace *sort_t; /* cmp_step's trace (qsort has no context) */
static int cmp_step(const void *a, const void *b)
{
    const long long x = sort_t->sp[*(const int *)a].step, y = sort_t->sp[*(const int *)b].step;
    return x < y ? -1 : x > y ? 1 : *(const int *)a - *(const int *)b; /* then file order */
}

int trc_index_steps(trc_trace *t)
{
    free(t->by_step);
    if (!(t->by_step = malloc((size_t)(t->n + 1) * sizeof *t->by_step)))
        return -1;
    for (int i = 0; i < t->n; i++)
        t->by_step[i] = i;
    sort_t = t;
    qsort(t->by_step, (size_t)t->n, sizeof *t->by_step, cmp_step);
    return 0;
}

int trc_step_events(const trc_trace *t, long long step, int *lo)
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
