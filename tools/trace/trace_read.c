/* A memra trace read back: see trace_read.h. */
#include "trace_read.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static trc_span make_span(const cJSON *e, int tid, double t0, double t1, const cJSON *args)
{
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
    return (trc_span){tid, t0, t1, cJSON_IsString(nm) ? nm->valuestring : "?", arg_int(args, "step", -1),
                  (int)arg_int(args, "slot", -1), (int)arg_int(args, "req", -1), args};
}

/* Spans from B/E (nested per track), b/e (by cat and id) and X; instants; track names. */
int trc_load(const char *path, trc_trace *t, char *why, size_t cap)
{
    memset(t, 0, sizeof *t);
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(why, cap, "cannot open %s", path);
        return -1;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        snprintf(why, cap, "cannot read %s", path);
        free(buf);
        fclose(f);
        return -1;
    }
    fclose(f);
    t->doc = cJSON_ParseWithLength(buf, (size_t)n);
    if (!t->doc) {
        const char *at = cJSON_GetErrorPtr();
        snprintf(why, cap, "%s: not valid JSON (at byte %ld)", path, at ? (long)(at - buf) : -1L);
        free(buf);
        return -1;
    }
    free(buf);
    const cJSON *evs = cJSON_IsArray(t->doc) ? t->doc : cJSON_GetObjectItemCaseSensitive(t->doc, "traceEvents");
    if (!cJSON_IsArray(evs)) {
        snprintf(why, cap, "%s: no traceEvents array (a Chrome Trace Event file is expected)", path);
        return -1;
    }
    /* open B per track (a stack), open b per id */
    enum { DEPTH = 64, OPEN = 4096 };
    static struct { int tid, depth; const cJSON *e[DEPTH]; double ts[DEPTH]; } stk[TRC_MAX_TRACKS];
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
                t->n_tracks < TRC_MAX_TRACKS) {
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
                if (n_stk == TRC_MAX_TRACKS)
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
    snprintf(why, cap, "out of memory reading %s", path);
    return -1;
}


void trc_free(trc_trace *t)
{
    cJSON_Delete(t->doc);
    free(t->sp);
    free(t->inst);
    memset(t, 0, sizeof *t);
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
