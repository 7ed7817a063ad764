/* memra-server: an OpenAI-compatible HTTP server over memra_server (the serving scheduler).
 *
 *   main.c     options, model + runtime + scheduler, signals, shutdown
 *   http.c     libmicrohttpd handlers, request lifetime, the reaper thread
 *   oai.c      OpenAI request parsing and response/chunk JSON (cJSON)
 *   metrics.c  Prometheus counters and histograms
 *
 * Threads: libmicrohttpd's pool threads run the handlers; memra_server's scheduler thread runs the per-token
 * callback; one reaper thread waits for ended requests (memra_server_poll / _wait), wakes their connections
 * and watches suspended connections for a client that went away; main waits for SIGINT/SIGTERM. */
#ifndef MEMRA_SRV_H
#define MEMRA_SRV_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <cjson/cJSON.h>
#include "memra/memra.h"

#define SRV_BODY_MAX (1u << 20)   /* largest request body (413 above) */
#define SRV_MAX_STOP 4            /* stop sequences per request (OpenAI's limit) */
#define SRV_STOP_MAX_LEN 256      /* bytes per stop sequence */

/* Endpoints, also the metrics' endpoint label. */
enum { SRV_EP_COMPLETIONS, SRV_EP_CHAT, SRV_EP_MODELS, SRV_EP_HEALTH, SRV_EP_METRICS, SRV_EP_OTHER, SRV_EP_N };

typedef struct srv_opts {
    const char *model;   /* -m GGUF path */
    const char *host;    /* address to bind (default 127.0.0.1) */
    const char *api_key; /* --api-key: NULL = no key asked */
    const char *trace;   /* --trace: a Chrome Trace JSON of the whole run, written at shutdown; NULL = none */
    const char *chat_template; /* --chat-template: a name or template text for /v1/chat/completions; NULL = the
                                * model's */
    int port;            /* 0 = a free port, printed */
    int stages, n_devices, devices[MEMRA_MAX_STAGES];
    int seqs, ctx;       /* sequence slots, positions per sequence */
    int max_queue;       /* requests waiting for a slot before 429 */
    int threads;         /* libmicrohttpd pool threads */
} srv_opts;

/* A bad request: the HTTP status, the message and the request field it names (NULL: none). */
typedef struct srv_err {
    int status;
    const char *param;
    char param_buf[64];
    char msg[512];
} srv_err;

/* Histogram of seconds with fixed bucket bounds (Prometheus `le`). */
#define SRV_HIST_N 14
typedef struct srv_hist {
    uint64_t count[SRV_HIST_N + 1]; /* per bucket (not cumulative); the last one is +Inf */
    uint64_t n;
    double sum;
} srv_hist;

typedef struct srv_metrics {
    pthread_mutex_t mu;                  /* guards every field below */
    uint64_t requests[SRV_EP_N][16];     /* by endpoint and status slot (metrics.c: srv_status_slot) */
    uint64_t tokens_generated, prompt_tokens;
    srv_hist ttft, itl;                  /* time to first token, inter-token latency */
} srv_metrics;

typedef struct srv_req srv_req;

typedef struct srv_app {
    srv_opts opt;
    memra_model *model;
    memra_runtime *rt;
    memra_server *srv;
    struct MHD_Daemon *daemon;
    char model_name[256];   /* the GGUF's file name, /v1/models' id */
    long started;           /* unix time */
    double t0;              /* monotonic seconds at start */
    srv_metrics metrics;
    /* app->mu guards: active (the requests memra_server still holds), n_active, stopping, reaper_quit */
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* wakes the reaper: a request is about to end, or quit */
    srv_req *active;
    int n_active;
    int stopping;           /* SIGINT/SIGTERM seen: new requests get 503 */
    int reaper_quit;
    pthread_t reaper;
    atomic_uint_fast64_t next_rid;
} srv_app;

/* One generation request. Shared by its connection (ctx), its streamed response (when streaming) and the
 * active list until memra_server_wait returned for it: each holds one reference (refs). */
struct srv_req {
    atomic_int refs;
    srv_app *app;
    int ep;                 /* SRV_EP_COMPLETIONS or SRV_EP_CHAT */
    int stream, include_usage;
    int64_t id;             /* memra_server id */
    memra_request rq;       /* read and written by the scheduler until memra_server_wait returns */
    memra_token *prompt;
    int n_prompt;
    int max_tokens;         /* the client's limit after clamping to the context */
    char *stop[SRV_MAX_STOP];
    int n_stop;
    size_t stop_max;        /* longest stop sequence */
    char rid[48];           /* "cmpl-N" / "chatcmpl-N" */
    long created;
    double t_submit, t_last; /* monotonic; t_last written by the scheduler thread only */
    srv_req *next;          /* app->active, under app->mu */
    /* mu guards everything below: the scheduler thread (token callback), the reaper and MHD threads */
    pthread_mutex_t mu;
    struct MHD_Connection *conn; /* NULL once libmicrohttpd has completed the connection */
    int fd;                 /* the connection's socket, peeked while suspended to see a client leave */
    int suspended;          /* the connection is suspended, waiting for tokens or the end */
    int ended, status;      /* memra_server_wait returned status */
    int stopped;            /* a stop sequence or the end-of-generation token ended it */
    int client_left;        /* cancelled because the client went away */
    int n_tokens;           /* tokens generated */
    char *text;             /* generated text, cut at a stop sequence */
    size_t len, cap, sent;  /* sent: bytes of text already streamed */
    char *out;              /* SSE bytes not yet given to libmicrohttpd */
    size_t out_len, out_cap, out_off;
};

/* ---- metrics.c ---- */
void srv_metrics_init(srv_metrics *m);
void srv_metrics_request(srv_metrics *m, int ep, int status);
void srv_metrics_token(srv_metrics *m, int first, double seconds);
void srv_metrics_prompt(srv_metrics *m, int n);
/* The Prometheus text of every metric; malloc'd, NULL on no memory. */
char *srv_metrics_render(srv_app *app);

/* ---- oai.c ---- */
/* Parse a POST body of endpoint ep into r (prompt tokens, limits, sampling, stop, stream). Returns 0, or -1
 * with e filled (400 naming the field, 500 on no memory). */
int oai_parse(srv_app *app, int ep, const char *body, size_t len, srv_req *r, srv_err *e);
/* The error body {"error":{"message","type","param","code"}}; malloc'd. */
char *oai_error_json(int status, const char *msg, const char *param);
/* The whole non-streamed answer of an ended request (caller holds r->mu); malloc'd. */
char *oai_response_json(srv_app *app, srv_req *r);
/* One SSE frame "data: {...}\n\n" of a streamed request: delta text (len bytes), finish reason (NULL: none),
 * role (chat's first chunk), usage (the final usage chunk). malloc'd, NULL on no memory. */
char *oai_chunk(srv_app *app, srv_req *r, const char *delta, size_t len, const char *finish, int role, int usage);
/* finish_reason of an ended request: "stop" or "length". */
const char *oai_finish_reason(const srv_req *r);
/* cJSON string of len bytes with invalid UTF-8 replaced by U+FFFD. */
cJSON *oai_string(const char *s, size_t len);

/* ---- http.c ---- */
int srv_http_start(srv_app *app);     /* start the daemon and the reaper; 0 or -1 with a message printed */
void srv_http_stop(srv_app *app);     /* quiesce, cancel, wake, stop; frees nothing of model/runtime */
void srv_req_unref(srv_req *r);

double srv_now(void);

#endif
