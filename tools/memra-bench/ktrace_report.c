/* Kernel timeline arithmetic and output (ktrace_report.h), and the kernel trace's refusal in a build without
 * CUPTI (cuda/ktrace.h). Shared mutable state: kt_merge, the kernels handed to the runtime trace (memra-bench's
 * main thread writes it; act_trace_stop, which that thread calls, reads it). */
#include "ktrace_report.h"
#include "cuda/ktrace.h"
#include "actors/trace.h"

#include <stdlib.h>
#include <string.h>

/* A record's kernel name, "?" when CUPTI gave none. */
static const char *rec_name(const bench_kt_rec *r) { return r->name ? r->name : "?"; }

const char *bench_kt_short(const char *name, int *len)
{
    const char *s = name ? name : "?";
    *len = (int)strlen(s);
    if (s[0] == '_' && s[1] == 'Z') {
        char *e;
        const long n = strtol(s + 2, &e, 10);
        if (n > 0 && (size_t)n <= strlen(e)) {
            *len = (int)n;
            return e;
        }
    }
    return s;
}

static int by_start(const void *a, const void *b)
{
    const bench_kt_rec *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}
static int by_end(const void *a, const void *b)
{
    const bench_kt_rec *x = a, *y = b;
    return x->end < y->end ? -1 : x->end > y->end ? 1 : (x->start < y->start ? -1 : x->start > y->start);
}
static int by_inc(const void *a, const void *b)
{
    const bench_kt_group *x = a, *y = b;
    return x->inc_ns > y->inc_ns ? -1 : x->inc_ns < y->inc_ns;
}
static int same_kernel(const bench_kt_group *g, const bench_kt_rec *r)
{
    return g->name && !strcmp(g->name, rec_name(r)) && g->grid == r->grid && g->block == r->block;
}

/* The merged busy intervals, walked forward: the idle time inside [a, b], for queries with non-decreasing a. */
typedef struct kt_cover {
    const uint64_t *from, *to; /* m disjoint intervals in order */
    size_t m, j;
} kt_cover;
static double idle_in(kt_cover *c, uint64_t a, uint64_t b)
{
    while (c->j < c->m && c->to[c->j] <= a)
        c->j++;
    double busy = 0.0;
    for (size_t k = c->j; k < c->m && c->from[k] < b; k++) {
        const uint64_t lo = c->from[k] > a ? c->from[k] : a, hi = c->to[k] < b ? c->to[k] : b;
        busy += (double)(hi - lo);
    }
    return (double)(b - a) - busy;
}

int bench_kt_analyse(bench_kt_rec *r, size_t n, bench_kt_group *g, bench_kt_summary *s, dev_err *err)
{
    if (n == 0)
        return dev_err_set(err, MEMRA_E_INVAL, "kernel trace: no kernel records to analyse");
    for (size_t i = 0; i < n; i++)
        if (r[i].end < r[i].start)
            return dev_err_set(err, MEMRA_E_INVAL, "kernel trace: record %zu ends (%llu) before it starts (%llu)",
                               i, (unsigned long long)r[i].end, (unsigned long long)r[i].start);
    uint64_t *from = malloc(sizeof *from * n), *to = malloc(sizeof *to * n);
    if (!from || !to) {
        free(from), free(to);
        return dev_err_set(err, MEMRA_E_NOMEM, "kernel trace: no memory for %zu intervals", n);
    }
    qsort(r, n, sizeof *r, by_start); /* the union of the intervals, as m disjoint ones */
    size_t m = 0;
    double busy = 0.0;
    s->gap_ns = s->gap_at_ns = 0.0;
    s->gap_after = s->gap_before = NULL;
    const char *last = NULL; /* the name of the record that ends the previous interval */
    for (size_t i = 0, j; i < n; i = j) {
        if (m > 0 && (double)(r[i].start - to[m - 1]) > s->gap_ns) {
            s->gap_ns = (double)(r[i].start - to[m - 1]);
            s->gap_at_ns = (double)(to[m - 1] - r[0].start);
            s->gap_after = last, s->gap_before = rec_name(&r[i]);
        }
        uint64_t hi = r[i].end;
        last = rec_name(&r[i]);
        for (j = i + 1; j < n && r[j].start <= hi; j++)
            if (r[j].end > hi)
                hi = r[j].end, last = rec_name(&r[j]);
        from[m] = r[i].start, to[m] = hi;
        busy += (double)(hi - r[i].start);
        m++;
    }
    s->t0 = r[0].start;
    qsort(r, n, sizeof *r, by_end);
    s->span_ns = (double)(r[n - 1].end - s->t0);
    s->busy_ns = busy;
    kt_cover cov = {from, to, m, 0};
    g[0] = (bench_kt_group){NULL, 0, 0, 0, 0, 0.0, 0.0, 0.0};
    size_t ng = 1;
    for (size_t i = 0; i < n; i++) {
        const uint64_t prev = i ? r[i - 1].end : s->t0;
        const double idle = idle_in(&cov, prev, r[i].end);
        if (idle > 0.0) {
            g[0].count++;
            g[0].inc_ns += idle;
        }
        size_t k = 1;
        while (k < ng && !same_kernel(&g[k], &r[i]))
            k++;
        if (k == ng)
            g[ng++] = (bench_kt_group){rec_name(&r[i]), r[i].grid, r[i].block, r[i].regs, 0, 0.0, 0.0, 0.0};
        g[k].count++;
        g[k].run_ns += (double)(r[i].end - r[i].start);
        g[k].inc_ns += (double)(r[i].end - prev) - idle;
        g[k].lead_ns += (double)(int64_t)(r[i].start - prev);
    }
    free(from), free(to);
    qsort(g, ng, sizeof *g, by_inc);
    s->n_groups = ng;
    return 0;
}

void bench_kt_print(FILE *f, const bench_kt_group *g, const bench_kt_summary *s, size_t n_kernels, int units)
{
    const double u = units > 0 ? units : 1, span = s->span_ns > 0 ? s->span_ns : 1;
    fprintf(f, "kernel trace: %zu kernels, span %.1f us per unit (%d units), kernels running %.1f %% of it\n",
            n_kernels, s->span_ns / 1e3 / u, units, 100.0 * s->busy_ns / span);
    fprintf(f, "%-34s %8s %5s %4s %8s %10s %10s %8s %9s\n", "kernel", "grid", "block", "regs", "per unit",
            "run us/u", "incr us/u", "% span", "lead us");
    for (size_t k = 0; k < s->n_groups; k++) {
        int len;
        const char *nm = g[k].name ? bench_kt_short(g[k].name, &len) : "(no kernel running)";
        if (!g[k].name)
            len = (int)strlen(nm);
        fprintf(f, "%-34.*s %8d %5d %4d %8.1f %10.1f %10.1f %8.1f %9.2f\n", len < 34 ? len : 34, nm, g[k].grid,
                g[k].block, g[k].regs, (double)g[k].count / u, g[k].run_ns / 1e3 / u, g[k].inc_ns / 1e3 / u,
                100.0 * g[k].inc_ns / span, g[k].count && g[k].name ? g[k].lead_ns / 1e3 / (double)g[k].count : 0.0);
    }
    if (s->gap_ns > 0.0) {
        int la, lb;
        const char *a = bench_kt_short(s->gap_after, &la), *b = bench_kt_short(s->gap_before, &lb);
        fprintf(f, "longest idle gap: %.1f us at +%.1f us, after %.*s, before %.*s; span without it %.1f us per unit\n",
                s->gap_ns / 1e3, s->gap_at_ns / 1e3, la, a, lb, b, (s->span_ns - s->gap_ns) / 1e3 / u);
    }
}

/* s as a JSON string body: quotes, backslashes and control characters escaped. */
static void json_str(FILE *f, const char *s, int len)
{
    for (int i = 0; i < len && s[i]; i++) {
        const unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
}

int bench_kt_write(const char *path, const bench_kt_rec *r, size_t n, uint64_t t0, dev_err *err)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return dev_err_set(err, MEMRA_E_IO, "kernel trace: cannot write %s", path);
    const size_t pl = strlen(path);
    if (pl >= 5 && !strcmp(path + pl - 5, ".json")) {
        fprintf(f, "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n");
        for (size_t i = 0; i < n; i++) {
            int len;
            const char *nm = bench_kt_short(r[i].name, &len), *full = rec_name(&r[i]);
            fprintf(f, "%s{\"name\":\"", i ? ",\n" : "");
            json_str(f, nm, len);
            fprintf(f, "\",\"cat\":\"kernel\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%u,\"tid\":%u,"
                       "\"args\":{\"grid\":%d,\"block\":%d,\"regs\":%d,\"symbol\":\"",
                    (double)(r[i].start - t0) / 1e3, (double)(r[i].end - r[i].start) / 1e3, r[i].device,
                    r[i].stream, r[i].grid, r[i].block, r[i].regs);
            json_str(f, full, (int)strlen(full));
            fprintf(f, "\"}}");
        }
        fprintf(f, "\n]}\n");
    } else {
        fprintf(f, "start_us,end_us,kernel,grid,block,regs,stream,device\n");
        for (size_t i = 0; i < n; i++)
            fprintf(f, "%.3f,%.3f,%s,%d,%d,%d,%u,%u\n", (double)(r[i].start - t0) / 1e3, (double)(r[i].end - t0) / 1e3,
                    rec_name(&r[i]), r[i].grid, r[i].block, r[i].regs, r[i].stream, r[i].device);
    }
    const int werr = ferror(f); /* a failed fprintf above, or the flush in fclose */
    return fclose(f) == 0 && !werr ? 0 : dev_err_set(err, MEMRA_E_IO, "kernel trace: cannot write %s", path);
}

int bench_kt_write_events(FILE *f, const bench_kt_rec *r, size_t n, uint64_t t_start_ns)
{
    enum { LANES = 64 };
    uint32_t dev[LANES], str[LANES];
    int n_lanes = 0;
    for (size_t i = 0; i < n; i++) {
        if (r[i].end < t_start_ns)
            continue;
        int k = 0;
        while (k < n_lanes && (dev[k] != r[i].device || str[k] != r[i].stream))
            k++;
        if (k == n_lanes && n_lanes < LANES) {
            dev[n_lanes] = r[i].device, str[n_lanes] = r[i].stream;
            fprintf(f, ",\n{\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"name\":\"thread_name\",\"args\":{\"name\":\"gpu %u stream %u "
                       "kernels\"}},\n{\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"name\":\"thread_sort_index\",\"args\":"
                       "{\"sort_index\":%d}}", BENCH_KT_TRACK0 + k, r[i].device, r[i].stream, BENCH_KT_TRACK0 + k,
                    BENCH_KT_TRACK0 + k);
            n_lanes++;
        }
        if (k == LANES) /* more streams than lanes: the rest are left out */
            continue;
        const uint64_t t0 = r[i].start > t_start_ns ? r[i].start - t_start_ns : 0, t1 = r[i].end - t_start_ns;
        int len;
        const char *nm = bench_kt_short(r[i].name, &len), *full = rec_name(&r[i]);
        fprintf(f, ",\n{\"ph\":\"X\",\"pid\":1,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"cat\":\"kernel\",\"name\":\"",
                BENCH_KT_TRACK0 + k, (double)t0 / 1e3, (double)(t1 - t0) / 1e3);
        json_str(f, nm, len);
        fprintf(f, "\",\"args\":{\"grid\":%d,\"block\":%d,\"regs\":%d,\"symbol\":\"", r[i].grid, r[i].block, r[i].regs);
        json_str(f, full, (int)strlen(full));
        fputs("\"}}", f);
    }
    return ferror(f) ? MEMRA_E_IO : 0;
}

uint64_t bench_kt_to_host(const bench_kt_clock *c, uint64_t t)
{
    const double span = c->at1 > c->at0 ? (double)(c->at1 - c->at0) : 0.0;
    const double off = span > 0 ? (double)c->off0 + (double)(c->off1 - c->off0) * ((double)t - (double)c->at0) / span
                                : (double)c->off0;
    const double h = (double)t - off;
    return h > 0 ? (uint64_t)h : 0;
}

/* The kernels bench_kt_merge_into_trace hands to the runtime trace (one at a time: memra-bench's one recording). */
static struct {
    bench_kt_rec *r;
    size_t n;
} kt_merge;

static int kt_merge_write(void *ctx, FILE *f, uint64_t t_start_ns)
{
    (void)ctx;
    return bench_kt_write_events(f, kt_merge.r, kt_merge.n, t_start_ns);
}

int bench_kt_merge_into_trace(const bench_kt_rec *r, size_t n, const bench_kt_clock *c, dev_err *err)
{
    bench_kt_rec *m = malloc((n ? n : 1) * sizeof *m);
    if (!m)
        return dev_err_set(err, MEMRA_E_NOMEM, "kernel trace: no memory to merge %zu kernels into the trace", n);
    for (size_t i = 0; i < n; i++) {
        m[i] = r[i];
        m[i].start = bench_kt_to_host(c, r[i].start);
        m[i].end = bench_kt_to_host(c, r[i].end);
    }
    if (act_trace_set_extra(kt_merge_write, NULL) != 0) {
        free(m);
        return dev_err_set(err, MEMRA_E_STATE, "kernel trace: no runtime trace records (or it merges other "
                                               "kernels already)");
    }
    bench_kt_merge_release();
    kt_merge.r = m;
    kt_merge.n = n;
    return 0;
}

void bench_kt_merge_release(void)
{
    free(kt_merge.r);
    kt_merge.r = NULL;
    kt_merge.n = 0;
}

#ifndef MEMRA_HAVE_CUPTI /* cuda/ktrace.cu records with CUPTI where CMake linked it (CUDA 13 and later) */
int bench_ktrace_available(void) { return 0; }

int bench_ktrace_start(dev_err *err)
{
    return dev_err_set(err, MEMRA_E_UNSUPPORTED, "kernel trace: this memra-bench was built without CUDA 13's CUPTI "
                                                 "(MEMRA_CUDA=ON, CMake's CUDA::cupti)");
}

int bench_ktrace_stop(FILE *report, const char *path, int units, int into_trace, dev_err *err)
{
    (void)report, (void)path, (void)units, (void)into_trace;
    return bench_ktrace_start(err);
}
#endif
