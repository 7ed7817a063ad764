/* memra-tune -m MODEL | --synthetic NAME [--type TYPE] [--stages N] [--devices D0,D1,...] [--seqs S] [--prompt P]
 *            [--gen G] [--budget SECONDS] [-o PREFIX]
 * Measures each layer on each stage's device, chooses the cuts that minimise the slowest stage, then times
 * settings (cuts: measured / even / weights, overlap, graphs (CUDA), slots, micro-batches, rows per step) through
 * memra_generate, each until its median is stable, within the budget. Prints a table, and each stage's busy and
 * bubble % in a traced run of the choice (and of the defaults), writes PREFIX.csv, PREFIX.json (a profile for
 * MEMRA_PP_PROFILE), PREFIX.svg and the traces, and ends with `best: <setting> ratio=<x>` (its tokens/s over the
 * defaults', both measured in this run). Exit 0 ok, 2 on a bad argument or a failure. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/doors.h"
#include "actors/tune_cuts.h"
#include "api/api_internal.h"
#include "model/llama.h"
#include "tune.h"
#ifdef MEMRA_HAVE_CJSON
#include "tools/trace/trace_read.h"
#endif

static const char usage[] =
    "usage: memra-tune -m MODEL | --synthetic llama3-8b|llama3-70b|mid|tiny [--type bf16|f16|q8_0|q4_k|...]\n"
    "                  [--stages N=2] [--devices D0,D1,..=0,1,..] [--seqs S=4] [--prompt P=16]\n"
    "                  [--gen G=16] [--budget SECONDS=300] [-o PREFIX=memra-tune]\n"
    "  --synthetic: the shape memra-bench serve --synthetic runs, its weights generated on each device (no file)\n"
    "  S greedy requests of P prompt tokens and G generated tokens each through memra_generate; backend and\n"
    "  device count from MEMRA_BACKEND / MEMRA_CPU_DEVICES; writes PREFIX.csv, PREFIX.json, PREFIX.svg and\n"
    "  PREFIX-trace.json (a traced run of the choice: each stage's busy and bubble %)\n";

/* Decimal digits only, in [lo, hi]. */
static int parse_int(const char *flag, const char *v, long lo, long hi, int *out)
{
    char *end;
    if (!v || !*v || *v < '0' || *v > '9' || (v[0] == '0' && v[1]) || (strtol(v, &end, 10), *end)) {
        fprintf(stderr, "memra-tune: %s %s: expected an integer in %ld..%ld, digits only\n", flag, v ? v : "(none)",
                lo, hi);
        return -1;
    }
    const long x = strtol(v, NULL, 10);
    if (x < lo || x > hi) {
        fprintf(stderr, "memra-tune: %s %s: expected an integer in %ld..%ld\n", flag, v, lo, hi);
        return -1;
    }
    *out = (int)x;
    return 0;
}

static int parse_devices(const char *v, int *dev, int *n)
{
    char buf[512], *save = NULL;
    snprintf(buf, sizeof buf, "%s", v);
    *n = 0;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (*n >= MEMRA_MAX_STAGES || parse_int("--devices", t, 0, 63, &dev[*n]))
            return -1;
        (*n)++;
    }
    if (*n == 0 || v[strlen(v) - 1] == ',') {
        fprintf(stderr, "memra-tune: --devices %s: expected comma-separated device ordinals, one per stage\n", v);
        return -1;
    }
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Tokens/s of the job's S requests through memra_generate on rt (one run). */
static int run_generate(memra_runtime *rt, const tune_job *job, double *tok_s, char *why, size_t cap)
{
    const int S = job->seqs, P = job->prompt, n_vocab = memra_runtime_n_vocab(rt);
    memra_token *prompts = malloc((size_t)S * (size_t)P * sizeof *prompts);
    memra_request *r = calloc((size_t)S, sizeof *r);
    int rc = prompts && r ? 0 : MEMRA_E_NOMEM;
    if (rc) {
        snprintf(why, cap, "out of host memory");
        goto fail;
    }
    for (int i = 0; i < S; i++) {
        uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
        for (int k = 0; k < P; k++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            prompts[(size_t)i * P + k] = (memra_token)(x % (uint64_t)n_vocab);
        }
        r[i] = (memra_request){.prompt = prompts + (size_t)i * P, .n_prompt = P, .n_predict = job->gen,
                               .sampling = memra_sampler_greedy_params()};
    }
    const double t0 = tune_now_s();
    rc = memra_generate(rt, r, S, 0, NULL, NULL);
    const double wall = tune_now_s() - t0;
    long tokens = 0;
    for (int i = 0; i < S && rc == 0; i++) {
        if (r[i].status != MEMRA_OK) {
            rc = r[i].status;
            snprintf(why, cap, "request %d: %s", i, memra_runtime_last_error(rt));
        }
        tokens += r[i].n_out;
    }
    if (rc && !why[0])
        snprintf(why, cap, "memra_generate: %s", memra_last_error());
    *tok_s = wall > 0 ? (double)tokens / wall : 0;
fail:
    free(prompts);
    free(r);
    return rc;
}

/* A runtime of the job's workload with setting st; NULL with why filled. */
static memra_runtime *create_for(const memra_model *m, tune_job *job, const tune_setting *st, char *why, size_t cap)
{
    memra_runtime_params p = memra_runtime_default_params();
    p.stages = job->n_stages;
    p.n_cuts = job->n_stages - 1;
    for (int k = 1; k < job->n_stages; k++)
        p.cuts[k - 1] = st->fence[k];
    p.n_devices = job->n_stages;
    memcpy(p.devices, job->devices, sizeof p.devices);
    p.slots = st->slots;
    p.overlap = st->overlap;
    p.graph = st->graph;
    p.micro_batches = st->micro_batches;
    p.max_rows = st->max_rows;
    p.n_seq = job->seqs;
    p.n_ctx = job->prompt + job->gen;
    memra_runtime *rt = memra_runtime_create(m, &p);
    if (!rt)
        snprintf(why, cap, "%s", memra_last_error());
    else
        snprintf(job->backend, sizeof job->backend, "%s", memra_runtime_backend(rt));
    return rt;
}

/* Add run x to the runs t[0..*n) and refresh pt's median, min and max. Returns the previous median (-1: none). */
static double add_run(tune_point *pt, double *t, int *n, double x)
{
    double sorted[16];
    const double prev = *n ? pt->median : -1;
    t[(*n)++] = x;
    memcpy(sorted, t, (size_t)*n * sizeof *t);
    qsort(sorted, (size_t)*n, sizeof *sorted, cmp_double);
    pt->median = sorted[*n / 2], pt->lo = sorted[0], pt->hi = sorted[*n - 1], pt->reps = *n;
    return prev;
}

/* Time one setting: a runtime of its placement and knobs, one warm-up run (discarded), then at least 3 and at most
 * 9 runs, stopping when one more run moves the median by under 2 % or the deadline passes. */
static void run_point(const memra_model *m, tune_job *job, tune_point *pt, double deadline)
{
    memra_runtime *rt = create_for(m, job, &pt->set, pt->why, sizeof pt->why);
    if (!rt) {
        pt->status = 2;
        return;
    }
    double t[16], warm, x;
    int n = 0;
    if (run_generate(rt, job, &warm, pt->why, sizeof pt->why) != 0)
        pt->status = 2;
    while (pt->status == 0 && n < 9) {
        if (run_generate(rt, job, &x, pt->why, sizeof pt->why) != 0) {
            pt->status = 2;
            break;
        }
        const double prev = add_run(pt, t, &n, x);
        if (n >= 3 && ((prev > 0 && fabs(pt->median - prev) < 0.02 * prev) || tune_now_s() > deadline))
            break;
    }
    memra_runtime_free(rt);
}

/* The ratio best / defaults measured side by side: both runtimes alive, one warm-up each, then rounds of one
 * run of each in turn (3 rounds, more while time is left, at most 7), so load that comes and goes on a shared
 * machine falls on both alike. Fills cb / cd (median, min, max of each). 0, or 2 with why. */
static int confirm(const memra_model *m, tune_job *job, const tune_point *best, const tune_point *dflt,
                   tune_point *cb, tune_point *cd, double deadline, char *why, size_t cap)
{
    memra_runtime *rb = create_for(m, job, &best->set, why, cap), *rd = rb ? create_for(m, job, &dflt->set, why, cap)
                                                                          : NULL;
    double tb[16], td[16], x, y;
    int nb = 0, nd = 0, rc = rb && rd ? 0 : 2;
    *cb = *best, *cd = *dflt;
    if (rc == 0 && (run_generate(rb, job, &x, why, cap) || run_generate(rd, job, &y, why, cap)))
        rc = 2;
    for (int round = 0; rc == 0 && round < 7 && (round < 3 || tune_now_s() < deadline); round++) {
        if (run_generate(rd, job, &y, why, cap) || run_generate(rb, job, &x, why, cap)) {
            rc = 2;
            break;
        }
        add_run(cd, td, &nd, y);
        add_run(cb, tb, &nb, x);
    }
    memra_runtime_free(rb);
    memra_runtime_free(rd);
    return rc;
}

/* The per-stage busy figures of setting st: a runtime of its own, one warm-up run, then one run with a trace
 * recording into path (memra_runtime_trace_start / _stop), read back as memra-trace summary reads it: per stage
 * the union of its stream's walks over the window from the first walk's begin to the last walk's end. b->ok 0 with
 * b->why when it could not be measured (a build without cJSON cannot read the trace back). */
static void trace_busy(const memra_model *m, tune_job *job, const tune_setting *st, const char *path, tune_busy *b)
{
    memset(b, 0, sizeof *b);
    snprintf(b->trace, sizeof b->trace, "%s", path);
#ifdef MEMRA_HAVE_CJSON
    memra_runtime *rt = create_for(m, job, st, b->why, sizeof b->why);
    double x;
    if (!rt)
        return;
    for (int s = 0; s < job->n_stages; s++)
        memra_runtime_stage_layers(rt, s, &b->st[s].first, &b->st[s].end);
    if (run_generate(rt, job, &x, b->why, sizeof b->why) != 0) {
        memra_runtime_free(rt);
        return;
    }
    if (memra_runtime_trace_start(rt, path) != MEMRA_OK) {
        snprintf(b->why, sizeof b->why, "%s", memra_runtime_last_error(rt));
        memra_runtime_free(rt);
        return;
    }
    const int rc = run_generate(rt, job, &x, b->why, sizeof b->why);
    if (memra_runtime_trace_stop(rt) != MEMRA_OK && rc == 0)
        snprintf(b->why, sizeof b->why, "%s", memra_runtime_last_error(rt));
    memra_runtime_free(rt);
    if (rc != 0 || b->why[0])
        return;
    trc_trace t;
    double lo, hi;
    if (trc_load(path, &t, 0, b->why, sizeof b->why) != 0) {
        trc_free(&t);
        return;
    }
    trc_window(&t, &lo, &hi);
    b->window_us = hi > lo ? hi - lo : 0;
    if (trc_n_stages(&t) != job->n_stages || b->window_us <= 0) {
        snprintf(b->why, sizeof b->why, "%s: %d stage streams with walks, %d stages run", path, trc_n_stages(&t),
                 job->n_stages);
        trc_free(&t);
        return;
    }
    b->ok = 1;
    for (int s = 0; s < job->n_stages && b->ok; s++) {
        double busy = 0;
        if ((b->st[s].walks = trc_stage_busy(&t, s, lo, &busy, NULL, NULL)) < 0) {
            snprintf(b->why, sizeof b->why, "out of host memory reading %s", path);
            b->ok = 0;
        }
        b->st[s].busy_pct = 100.0 * busy / b->window_us;
        b->st[s].bubble_pct = 100.0 - b->st[s].busy_pct;
    }
    trc_free(&t);
#else
    (void)m, (void)job, (void)st;
    snprintf(b->why, sizeof b->why, "this build lacks cJSON (libcjson-dev), which reading the trace back needs");
#endif
}

/* A table of the traced stages of one setting beside their predicted costs (filled into b). */
static void print_busy(const char *what, const tune_job *job, const act_tune_costs *tc, tune_busy *b)
{
    if (!b->ok) {
        printf("%s: per-stage busy not measured: %s\n", what, b->why);
        return;
    }
    printf("%s: a traced run (%s; window %.1f ms, the first walk's begin to the last walk's end):\n", what, b->trace,
           b->window_us / 1000);
    printf("  %-5s %-9s %-6s %11s %6s %7s %8s\n", "stage", "layers", "device", "predicted_s", "walks", "busy %",
           "bubble %");
    for (int s = 0; s < job->n_stages; s++) {
        tune_stage_busy *x = &b->st[s];
        char lay[32];
        x->predicted_s = act_tune_stage_cost(tc, s, x->first, x->end);
        snprintf(lay, sizeof lay, "%d..%d", x->first, x->end - 1);
        printf("  %-5d %-9s %-6d %11.3f %6d %7.1f %8.1f\n", s, lay, job->devices[s], x->predicted_s, x->walks,
               x->busy_pct, x->bubble_pct);
    }
}

static int same_fence(const int *a, const int *b, int N)
{
    return !memcmp(a, b, (size_t)(N + 1) * sizeof *a);
}

int main(int argc, char **argv)
{
    tune_job job = {.n_stages = 2, .seqs = 4, .prompt = 16, .gen = 16, .budget_s = 300, .prefix = "memra-tune"};
    const char *devices = NULL, *synth = NULL, *type = NULL;
    int budget = 300, n_dev = 0;
    for (int i = 1; i < argc; i += 2) { /* every option but -h takes one value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(usage, stdout);
            return 0;
        } else if (!v) {
            fprintf(stderr, "memra-tune: %s needs a value\n%s", a, usage);
            return 2;
        } else if (!strcmp(a, "-m"))
            job.model = v;
        else if (!strcmp(a, "--synthetic"))
            synth = v;
        else if (!strcmp(a, "--type"))
            type = v;
        else if (!strcmp(a, "-o"))
            job.prefix = v;
        else if (!strcmp(a, "--devices"))
            devices = v;
        else if (!strcmp(a, "--stages"))
            bad = parse_int(a, v, 1, MEMRA_MAX_STAGES, &job.n_stages);
        else if (!strcmp(a, "--seqs"))
            bad = parse_int(a, v, 1, 4096, &job.seqs);
        else if (!strcmp(a, "--prompt"))
            bad = parse_int(a, v, 1, 4096, &job.prompt);
        else if (!strcmp(a, "--gen"))
            bad = parse_int(a, v, 1, 4096, &job.gen);
        else if (!strcmp(a, "--budget"))
            bad = parse_int(a, v, 10, 86400, &budget);
        else {
            fprintf(stderr, "memra-tune: unknown option %s\n%s", a, usage);
            return 2;
        }
        if (bad)
            return 2;
    }
    job.budget_s = budget;
    static const char *overriding[] = {"MEMRA_PP_STAGES", "MEMRA_PP_SPLITS", "MEMRA_PP_SPLIT", "MEMRA_PP_DEVICES",
                                       "MEMRA_PP_SLOTS", "MEMRA_PP_OVERLAP", "MEMRA_PP_GRAPH",
                                       "MEMRA_PP_MICRO_BATCHES", "MEMRA_PP_PROFILE"};
    for (size_t i = 0; i < sizeof overriding / sizeof overriding[0]; i++)
        if (getenv(overriding[i])) { /* a door wins over the fields memra-tune sets: every point would be alike */
            fprintf(stderr, "memra-tune: %s is set: it overrides the settings memra-tune compares; unset it (the "
                    "placement is --stages and --devices)\n", overriding[i]);
            return 2;
        }
    if (getenv("MEMRA_TRACE")) { /* its trace would start at every runtime's create, and one records at a time */
        fprintf(stderr, "memra-tune: MEMRA_TRACE is set: memra-tune records its own traces (PREFIX-trace.json); "
                        "unset it\n");
        return 2;
    }
    if (!job.model == !synth) {
        fprintf(stderr, "memra-tune: %s\n%s", synth ? "-m and --synthetic: one model, a file or a synthetic shape"
                                                    : "-m MODEL or --synthetic NAME is required", usage);
        return 2;
    }
    if (type && !synth) {
        fprintf(stderr, "memra-tune: --type %s: the weight type of a --synthetic shape (a file has its own)\n", type);
        return 2;
    }
    if (devices && parse_devices(devices, job.devices, &n_dev))
        return 2;
    if (devices && n_dev != job.n_stages) {
        fprintf(stderr, "memra-tune: --devices %s: %d devices for %d stages (one per stage)\n", devices, n_dev,
                job.n_stages);
        return 2;
    }
    if (!devices)
        for (int s = 0; s < job.n_stages; s++)
            job.devices[s] = s;
    const double t_start = tune_now_s();
    memra_model *m = api_model_open(job.model, synth, type); /* -m or --synthetic/--type: the tools' one parser */
    if (!m) {
        fprintf(stderr, "memra-tune: %s\n", memra_last_error());
        return 2;
    }
    if (synth) /* the shape's name labels it; its weights are generated on each device, by measure and runtimes */
        job.model = synth, job.synth = m->synth, job.synth_type = type ? type : "bf16";
    const int N = job.n_stages, S = job.seqs;
    job.n_layer = memra_model_n_layer(m);
    if (N < 2 || N > job.n_layer) {
        fprintf(stderr, "memra-tune: --stages %d: allowed 2..%d (the model's %d layers; one stage has no cut to tune)\n",
                N, job.n_layer, job.n_layer);
        memra_model_free(m);
        return 2;
    }
    const int M0 = N < S ? N : S, rows0 = memra_runtime_default_params().max_rows;
    if ((S + M0 - 1) / M0 > rows0) {
        fprintf(stderr, "memra-tune: --seqs %d: a decode step of %d rows does not fit the default %d rows per step\n",
                S, (S + M0 - 1) / M0, rows0);
        memra_model_free(m);
        return 2;
    }
    /* 1. the costs */
    dev_err err = {0};
    tune_costs c;
    fprintf(stderr, "memra-tune: measuring %d layers on %d stages' devices...\n", job.n_layer, N);
    if (tune_measure(&job, M0, rows0, 0.2 * job.budget_s, &c, &err)) {
        fprintf(stderr, "memra-tune: %s\n", err.msg);
        memra_model_free(m);
        return 2;
    }
    /* 2. the cuts: measured (the optimum of those costs), even, weights (MEMRA_PP_SPLITS=weights) */
    int f_meas[MEMRA_MAX_STAGES + 1], f_even[MEMRA_MAX_STAGES + 1], f_w[MEMRA_MAX_STAGES + 1];
    double pred_meas;
    act_tune_costs tc = {.n_layer = job.n_layer, .n_stages = N, .layer = c.layer, .embed = c.embed, .head = c.head};
    double *wcost = malloc((size_t)(job.n_layer + 1) * sizeof *wcost);
    act_pp_config wc = act_pp_config_default();
    wc.stages = N, wc.balance = 1;
    const int model = c.cost_model;
    if (!wcost || act_tune_cuts(&tc, f_meas, &pred_meas, &err) ||
        (job.synth ? mdl_synth_weight_cost(job.synth, model, wcost, job.n_layer + 1, &err)
                   : mdl_model_peek_weight_cost(job.model, model, wcost, job.n_layer + 1, &err)) < 0 ||
        act_pp_cuts(&wc, job.n_layer, 1 << 20, wcost, f_w, &err) < 0) {
        fprintf(stderr, "memra-tune: %s\n", err.msg[0] ? err.msg : "out of host memory");
        free(wcost);
        tune_costs_free(&c);
        memra_model_free(m);
        return 2;
    }
    free(wcost);
    for (int s = 0; s <= N; s++)
        f_even[s] = s * job.n_layer / N;
    printf("memra-tune: model %s%s%s (%d layers), %d stages on devices", job.model, job.synth ? " synthetic " : "",
           job.synth ? job.synth_type : "", job.n_layer, N);
    for (int s = 0; s < N; s++)
        printf("%s%d", s ? "," : " ", job.devices[s]);
    printf(", %d requests x (%d prompt + %d generated)\n", S, job.prompt, job.gen);
    printf("costs: decode step %d rows, prompt step %d rows; layer repeats' spread up to %.0f %%\n", c.decode_rows,
           c.prompt_rows, 100 * c.spread);
    printf("%-10s %-14s %s\n", "cuts", "layers", "predicted slowest stage (s of the workload) / each stage");
    const struct { const char *name; const int *f; } cuts[3] = {{"measured", f_meas}, {"even", f_even},
                                                                  {"weights", f_w}};
    for (int k = 0; k < 3; k++) {
        char lay[64] = "";
        size_t o = 0;
        for (int s = 1; s < N && o + 8 < sizeof lay; s++)
            o += (size_t)snprintf(lay + o, sizeof lay - o, "%s%d", s > 1 ? "," : "", cuts[k].f[s]);
        printf("%-10s %-14s %.3f /", cuts[k].name, lay, act_tune_slowest(&tc, cuts[k].f));
        for (int s = 0; s < N; s++)
            printf(" %.3f", act_tune_stage_cost(&tc, s, cuts[k].f[s], cuts[k].f[s + 1]));
        printf("\n");
    }
    /* 3. the sweep, one knob at a time from the best so far: cuts, overlap, graphs (CUDA), slots, micro-batches,
     * rows per step */
    tune_point pts[TUNE_MAX_POINTS];
    int n_pts = 0;
    const int n_mb = (N + 1 < S ? N + 1 : S) - 1; /* micro-batches 1..min(N+1, S) but the default */
    static const int rows_opts[] = {16, 32, 128};
    int n_rows = 0;
    for (int k = 0; k < 3; k++)
        n_rows += rows_opts[k] >= (S + M0 - 1) / M0;
    const int total = 1 + 2 + 1 + 1 + 2 + n_mb + n_rows;
    const double sweep_budget = 0.8 * job.budget_s; /* the rest: the side-by-side check of the best */
    tune_setting base = {.overlap = 0, .slots = 2, .micro_batches = M0, .max_rows = rows0};
    snprintf(base.cut_name, sizeof base.cut_name, "even");
    memcpy(base.fence, f_even, sizeof base.fence);
    int best = 0, n_run = 0;
    double run_s = 0;
    for (int phase = 0; phase < 7; phase++) {
        tune_setting cand[8];
        int nc = 0;
        if (phase == 0)
            cand[nc++] = base; /* the defaults */
        else if (phase == 1)
            for (int k = 0; k < 3; k += 2) { /* measured, weights */
                cand[nc] = base;
                snprintf(cand[nc].cut_name, sizeof cand[nc].cut_name, "%s", cuts[k].name);
                memcpy(cand[nc++].fence, cuts[k].f, sizeof base.fence);
            }
        else if (phase == 2)
            cand[nc] = base, cand[nc++].overlap = 1;
        else if (phase == 3)
            cand[nc] = base, cand[nc++].graph = 1;
        else if (phase == 4)
            for (int sl = 1; sl <= 4; sl *= 4)
                cand[nc] = base, cand[nc++].slots = sl;
        else if (phase == 5) {
            for (int mb = 1; mb <= n_mb + 1; mb++)
                if (mb != M0)
                    cand[nc] = base, cand[nc].micro_batches = mb, nc++;
        } else {
            for (int k = 0; k < 3; k++)
                if (rows_opts[k] >= (S + base.micro_batches - 1) / base.micro_batches)
                    cand[nc] = base, cand[nc].max_rows = rows_opts[k], nc++;
        }
        for (int i = 0; i < nc && n_pts < TUNE_MAX_POINTS; i++) {
            tune_point *pt = &pts[n_pts];
            memset(pt, 0, sizeof *pt);
            pt->set = cand[i];
            tune_label(&pt->set, N, pt->label, sizeof pt->label);
            pt->predicted_s = act_tune_slowest(&tc, pt->set.fence);
            const double now = tune_now_s() - t_start, per = n_run ? run_s / n_run : 0; /* a point's time */
            int dup = -1;
            for (int k = 0; k < n_pts && phase == 1; k++)
                if (same_fence(pts[k].set.fence, pt->set.fence, N))
                    dup = k;
            if (dup >= 0) { /* the same placement as an earlier point: its figures stand */
                pt->status = 3, pt->median = pts[dup].median, pt->lo = pts[dup].lo, pt->hi = pts[dup].hi;
            } else if (pt->set.graph && !c.cuda) { /* the CPU backend walks eagerly whatever the seam says */
                pt->status = 4;
            } else if (phase > 1 && now + per > sweep_budget) { /* the defaults and the cuts always run */
                pt->status = 1;
            } else {
                const double t0 = tune_now_s();
                run_point(m, &job, pt, t_start + sweep_budget);
                run_s += tune_now_s() - t0, n_run++;
            }
            n_pts++;
            const double el = tune_now_s() - t_start, left = (total - n_pts) * el / n_pts;
            fprintf(stderr, "[%d/%d] %s: ", n_pts, total, pt->label);
            if (pt->status == 2)
                fprintf(stderr, "failed: %s", pt->why);
            else if (pt->status == 1 || pt->status == 4)
                fprintf(stderr, "skipped (%s)", pt->status == 1 ? "budget" : "the CPU backend has no graphs");
            else
                fprintf(stderr, "%.1f tok/s (%.1f..%.1f, %d runs)%s", pt->median, pt->lo, pt->hi, pt->reps,
                        pt->status == 3 ? " (same cuts as an earlier point)" : "");
            fprintf(stderr, "; %.0f s elapsed, about %.0f s left\n", el,
                    left < job.budget_s - el ? left : job.budget_s - el > 0 ? job.budget_s - el : 0);
            if (pt->status == 0 && pt->median > pts[best].median)
                best = n_pts - 1;
        }
        if (pts[best].status == 0 || pts[best].status == 3)
            base = pts[best].set;
    }
    if (pts[0].status != 0) {
        fprintf(stderr, "memra-tune: the defaults did not run: %s\n", pts[0].why);
        tune_costs_free(&c);
        memra_model_free(m);
        return 2;
    }
    printf("\n%-4s %-60s %10s %10s %8s %5s %s\n", "#", "setting", "tok/s", "min..max", "spread", "runs", "status");
    for (int i = 0; i < n_pts; i++) {
        const tune_point *p = &pts[i];
        char mm[32];
        snprintf(mm, sizeof mm, "%.1f..%.1f", p->lo, p->hi);
        printf("%-4d %-60s %10.1f %10s %7.1f%% %5d %s%s%s\n", i, p->label, p->median, mm,
               p->median > 0 ? 100 * (p->hi - p->lo) / p->median : 0.0, p->reps,
               p->status == 0   ? ""
               : p->status == 1 ? "skipped (budget)"
               : p->status == 2 ? "failed: "
               : p->status == 3 ? "same cuts"
                                : "skipped (CPU backend: no graphs)",
               p->status == 2 ? p->why : "", i == 0 ? "defaults" : i == best ? "best" : "");
    }
    /* 4. the best against the defaults side by side: the ratio printed, and the choice when they swap */
    double ratio = 1.0;
    if (best != 0) {
        tune_point cb, cd;
        char why[160] = "";
        fprintf(stderr, "memra-tune: checking %s against the defaults side by side...\n", pts[best].label);
        if (confirm(m, &job, &pts[best], &pts[0], &cb, &cd, t_start + 0.92 * job.budget_s, why, sizeof why) != 0) {
            fprintf(stderr, "memra-tune: the side-by-side check failed: %s\n", why);
        } else {
            printf("side by side (%d rounds, each a run of both in turn): best %.1f tok/s (%.1f..%.1f), defaults "
                   "%.1f tok/s (%.1f..%.1f)\n", cb.reps, cb.median, cb.lo, cb.hi, cd.median, cd.lo, cd.hi);
            ratio = cd.median > 0 ? cb.median / cd.median : 0;
            if (ratio < 1.0) { /* the sweep's winner did not hold: the defaults stand */
                printf("the sweep's best did not beat the defaults side by side (%.3f): keeping the defaults\n",
                       ratio);
                best = 0, ratio = 1.0;
            }
        }
    }
    /* 5. why the cut is where it is: each stage's busy and bubble % in a traced run of the choice (and of the
     * defaults when they differ) */
    tune_busy busy[2];
    char tpath[4096];
    snprintf(tpath, sizeof tpath, "%s-trace.json", job.prefix);
    fprintf(stderr, "memra-tune: a traced run of %s...\n", pts[best].label);
    trace_busy(m, &job, &pts[best].set, tpath, &busy[0]);
    print_busy(best ? "best" : "best (the defaults)", &job, &tc, &busy[0]);
    memset(&busy[1], 0, sizeof busy[1]);
    if (best != 0) {
        snprintf(tpath, sizeof tpath, "%s-trace-defaults.json", job.prefix);
        trace_busy(m, &job, &pts[0].set, tpath, &busy[1]);
        print_busy("defaults", &job, &tc, &busy[1]);
    }
    const int rc = tune_write(&job, m, &c, pts, n_pts, best, 0, ratio, busy, &err);
    if (rc)
        fprintf(stderr, "memra-tune: %s\n", err.msg);
    else
        printf("wrote %s.csv, %s.json (MEMRA_PP_PROFILE=%s.json applies it), %s.svg\n", job.prefix, job.prefix,
               job.prefix, job.prefix);
    printf("elapsed %.0f s\nbest: %s ratio=%.3f\n", tune_now_s() - t_start, pts[best].label, ratio);
    tune_costs_free(&c);
    memra_model_free(m);
    return rc ? 2 : 0;
}
