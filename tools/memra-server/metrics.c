/* Prometheus text metrics: requests by endpoint and status, tokens, queue depth, per-stage busy fraction, time to
 * first token and inter-token latency histograms. Counters are updated under metrics.mu by the handler threads
 * and the scheduler thread (token callback); /metrics renders a snapshot. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "srv.h"

static const double hist_le[SRV_HIST_N] = { 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30 };
static const int status_codes[] = { 200, 400, 401, 404, 405, 413, 429, 431, 499, 500, 503 };
enum { N_STATUS = sizeof status_codes / sizeof status_codes[0] }; /* the last slot (15) is "other" */
static const char *ep_names[SRV_EP_N] = { "/v1/completions", "/v1/chat/completions", "/v1/models", "/health",
                                          "/metrics", "other" };

void srv_metrics_init(srv_metrics *m)
{
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
}

static int status_slot(int status)
{
    for (int i = 0; i < N_STATUS; i++)
        if (status_codes[i] == status)
            return i;
    return 15;
}

void srv_metrics_request(srv_metrics *m, int ep, int status)
{
    pthread_mutex_lock(&m->mu);
    m->requests[ep][status_slot(status)]++;
    pthread_mutex_unlock(&m->mu);
}

static void hist_add(srv_hist *h, double v)
{
    int b = 0;
    while (b < SRV_HIST_N && v > hist_le[b])
        b++;
    h->count[b]++;
    h->n++;
    h->sum += v;
}

void srv_metrics_token(srv_metrics *m, int first, double seconds)
{
    pthread_mutex_lock(&m->mu);
    m->tokens_generated++;
    hist_add(first ? &m->ttft : &m->itl, seconds);
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_prompt(srv_metrics *m, int n)
{
    pthread_mutex_lock(&m->mu);
    m->prompt_tokens += (uint64_t)n;
    pthread_mutex_unlock(&m->mu);
}

typedef struct sbuf {
    char *s;
    size_t len, cap;
    int oom;
} sbuf;

static void put(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int n = b->oom ? 0 : vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (b->oom || n < 0)
            return;
        if (b->s && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = (b->cap ? b->cap * 2 : 8192) + (size_t)n;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->oom = 1;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
}

static void put_hist(sbuf *b, const char *name, const char *help, const srv_hist *h)
{
    put(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < SRV_HIST_N; i++) {
        cum += h->count[i];
        put(b, "%s_bucket{le=\"%g\"} %llu\n", name, hist_le[i], (unsigned long long)cum);
    }
    put(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name, (unsigned long long)h->n, name,
        h->sum, name, (unsigned long long)h->n);
}

char *srv_metrics_render(srv_app *app)
{
    srv_metrics *m = &app->metrics, snap;
    pthread_mutex_lock(&m->mu);
    snap = *m;
    pthread_mutex_unlock(&m->mu);
    memra_server_stats st;
    memset(&st, 0, sizeof st);
    memra_server_get_stats(app->srv, &st);
    pthread_mutex_lock(&app->mu);
    int in_flight = app->n_active;
    pthread_mutex_unlock(&app->mu);
    double up = srv_now() - app->t0;

    sbuf b = { 0 };
    put(&b, "# HELP memra_requests_total HTTP requests answered, by endpoint and status.\n"
            "# TYPE memra_requests_total counter\n");
    for (int e = 0; e < SRV_EP_N; e++)
        for (int i = 0; i < 16; i++)
            if (snap.requests[e][i]) {
                char code[16];
                if (i < N_STATUS)
                    snprintf(code, sizeof code, "%d", status_codes[i]);
                else
                    snprintf(code, sizeof code, "other");
                put(&b, "memra_requests_total{endpoint=\"%s\",status=\"%s\"} %llu\n", ep_names[e], code,
                    (unsigned long long)snap.requests[e][i]);
            }
    put(&b, "# HELP memra_tokens_generated_total Completion tokens generated.\n"
            "# TYPE memra_tokens_generated_total counter\nmemra_tokens_generated_total %llu\n",
        (unsigned long long)snap.tokens_generated);
    put(&b, "# HELP memra_prompt_tokens_total Prompt tokens of the requests submitted.\n"
            "# TYPE memra_prompt_tokens_total counter\nmemra_prompt_tokens_total %llu\n",
        (unsigned long long)snap.prompt_tokens);
    put(&b, "# HELP memra_tokens_per_second Completion tokens per second since start.\n"
            "# TYPE memra_tokens_per_second gauge\nmemra_tokens_per_second %.3f\n",
        up > 0 ? (double)snap.tokens_generated / up : 0.0);
    put(&b, "# HELP memra_uptime_seconds Seconds since the server started.\n"
            "# TYPE memra_uptime_seconds gauge\nmemra_uptime_seconds %.3f\n", up);
    put(&b, "# HELP memra_requests_waiting Requests waiting for a sequence slot (scheduler snapshot).\n"
            "# TYPE memra_requests_waiting gauge\nmemra_requests_waiting %d\n", st.waiting);
    put(&b, "# HELP memra_requests_running Requests holding a sequence slot (scheduler snapshot).\n"
            "# TYPE memra_requests_running gauge\nmemra_requests_running %d\n", st.running);
    put(&b, "# HELP memra_requests_in_flight Generation requests submitted and not yet ended.\n"
            "# TYPE memra_requests_in_flight gauge\nmemra_requests_in_flight %d\n", in_flight);
    put(&b, "# HELP memra_scheduler_requests_total Scheduler requests by outcome.\n"
            "# TYPE memra_scheduler_requests_total counter\n"
            "memra_scheduler_requests_total{event=\"submitted\"} %llu\n"
            "memra_scheduler_requests_total{event=\"ended\"} %llu\n"
            "memra_scheduler_requests_total{event=\"cancelled\"} %llu\n",
        (unsigned long long)st.submitted, (unsigned long long)st.ended, (unsigned long long)st.cancelled);
    put(&b, "# HELP memra_scheduler_steps_total Steps the scheduler submitted.\n"
            "# TYPE memra_scheduler_steps_total counter\nmemra_scheduler_steps_total %llu\n",
        (unsigned long long)st.steps);
    put(&b, "# HELP memra_stage_busy_fraction Fraction of wall time each pipeline stage spends walking its layers.\n"
            "# TYPE memra_stage_busy_fraction gauge\n");
    for (int s = 0; s < memra_runtime_n_stages(app->rt); s++) {
        memra_stage_stats ss;
        if (memra_runtime_stage_stats(app->rt, s, &ss) == MEMRA_OK)
            put(&b, "memra_stage_busy_fraction{stage=\"%d\",layers=\"%d-%d\"} %.6f\n", s, ss.first_layer,
                ss.end_layer, ss.busy_frac);
    }
    put_hist(&b, "memra_time_to_first_token_seconds", "Seconds from a request's submit to its first token.", &snap.ttft);
    put_hist(&b, "memra_inter_token_latency_seconds", "Seconds between consecutive tokens of a request.", &snap.itl);
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}
