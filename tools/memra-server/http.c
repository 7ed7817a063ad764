/* The HTTP side: libmicrohttpd (its internal thread pool over epoll) runs the handlers; requests go to the
 * memra_server scheduler.
 *
 * A generation request (srv_req) is submitted from a pool thread, then its connection is suspended
 * (MHD_suspend_connection) so no pool thread blocks on it:
 *   - streamed: the response is a content-reader callback fed from r->out; the token callback (scheduler
 *     thread) appends SSE frames there and resumes the connection; the reader suspends it again when r->out is
 *     empty and the request has not ended;
 *   - not streamed: the handler suspends the connection; the reaper resumes it when the request ended and the
 *     handler, called again, answers the whole JSON.
 * Ordering: r->mu orders `suspended` between MHD_suspend_connection (the pool thread, under r->mu) and
 * MHD_resume_connection (scheduler or reaper, under r->mu), so a resume always follows its suspend.
 * The reaper polls the requests of app->active (memra_server_poll), calls memra_server_wait for the ended ones,
 * queues their last frames and resumes their connections; it peeks suspended sockets and cancels a request
 * whose client has gone (a suspended connection is not watched by libmicrohttpd). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <microhttpd.h>
#include "srv.h"

double srv_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Per-connection state, *con_cls of libmicrohttpd. */
typedef struct srv_conn {
    int ep;
    int err_status;          /* decided before the body ended (413), 0 = none */
    char *body;
    size_t len, cap;
    srv_req *req;            /* the generation request of this connection (one reference) */
} srv_conn;

static void req_free(srv_req *r)
{
    free(r->prompt);
    for (int i = 0; i < r->n_stop; i++)
        free(r->stop[i]);
    free(r->text);
    free(r->out);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

void srv_req_unref(srv_req *r)
{
    if (r && atomic_fetch_sub(&r->refs, 1) == 1)
        req_free(r);
}

/* ---- responses ---- */

static enum MHD_Result respond(srv_app *app, struct MHD_Connection *c, int ep, int status, char *body,
                               const char *ctype)
{
    const char *fallback = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,"
                           "\"code\":null}}";
    if (!body)
        status = 500;
    struct MHD_Response *res = body ? MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE)
                                    : MHD_create_response_from_buffer(strlen(fallback), (void *)fallback,
                                                                      MHD_RESPMEM_PERSISTENT);
    if (!res) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(res, "Content-Type", body ? ctype : "application/json");
    if (status == 401)
        MHD_add_response_header(res, "WWW-Authenticate", "Bearer");
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, res);
    MHD_destroy_response(res);
    srv_metrics_request(&app->metrics, ep, status);
    return ok;
}

static enum MHD_Result respond_error(srv_app *app, struct MHD_Connection *c, int ep, int status, const char *msg,
                                     const char *param)
{
    return respond(app, c, ep, status, oai_error_json(status, msg, param), "application/json");
}

/* ---- the per-token callback and streaming ---- */

/* Append n bytes to r->out (caller holds r->mu). */
static void out_append(srv_req *r, const char *s, size_t n)
{
    if (!s)
        return;
    if (r->out_len + n > r->out_cap) {
        size_t cap = (r->out_cap ? r->out_cap * 2 : 1024) + n;
        char *o = realloc(r->out, cap);
        if (!o)
            return; /* the frame is lost; the end chunk still carries finish_reason */
        r->out = o;
        r->out_cap = cap;
    }
    memcpy(r->out + r->out_len, s, n);
    r->out_len += n;
}

static void out_frame(srv_req *r, char *frame)
{
    if (frame)
        out_append(r, frame, strlen(frame));
    free(frame);
}

/* Bytes of text that can be streamed: not the tail that may still become a stop sequence, nor a UTF-8
 * sequence cut in the middle. */
static size_t safe_end(const srv_req *r)
{
    size_t end = r->len;
    for (int i = 0; i < r->n_stop; i++) {
        size_t sl = strlen(r->stop[i]);
        for (size_t k = sl - 1; k > 0; k--)
            if (k <= r->len && !memcmp(r->text + r->len - k, r->stop[i], k)) {
                if (r->len - k < end)
                    end = r->len - k;
                break;
            }
    }
    /* back up over an unfinished UTF-8 sequence */
    size_t i = end, back = 0;
    while (i > 0 && back < 4 && ((unsigned char)r->text[i - 1] & 0xC0) == 0x80)
        i--, back++;
    if (i > 0) {
        unsigned c = (unsigned char)r->text[i - 1];
        size_t want = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
        if (want > 1 && back + 1 < want)
            end = i - 1;
    }
    return end;
}

/* Scheduler thread: one token of r. */
static int on_token(void *user, int64_t id, memra_token tok, const char *piece, int n_piece)
{
    (void)id;
    (void)tok;
    srv_req *r = user;
    srv_app *app = r->app;
    double now = srv_now();
    srv_metrics_token(&app->metrics, r->n_tokens == 0, now - (r->n_tokens == 0 ? r->t_submit : r->t_last));
    r->t_last = now;
    int stop = 0;
    pthread_mutex_lock(&r->mu);
    r->n_tokens++;
    size_t before = r->len;
    if (piece && n_piece > 0) {
        if (r->len + (size_t)n_piece + 1 > r->cap) {
            size_t cap = (r->cap ? r->cap * 2 : 256) + (size_t)n_piece;
            char *t = realloc(r->text, cap);
            if (t) {
                r->text = t;
                r->cap = cap;
            }
        }
        if (r->len + (size_t)n_piece + 1 <= r->cap) {
            memcpy(r->text + r->len, piece, (size_t)n_piece);
            r->len += (size_t)n_piece;
            r->text[r->len] = 0;
        }
    }
    if (r->n_stop && r->len > before) {
        size_t from = before >= r->stop_max ? before - r->stop_max + 1 : 0, cut = r->len;
        for (int i = 0; i < r->n_stop; i++) {
            const char *hit = memmem(r->text + from, r->len - from, r->stop[i], strlen(r->stop[i]));
            if (hit && (size_t)(hit - r->text) < cut)
                cut = (size_t)(hit - r->text);
        }
        if (cut < r->len) {
            r->len = cut;
            r->text[cut] = 0;
            r->stopped = stop = 1;
        }
    }
    if (r->stream) {
        size_t end = stop ? r->len : safe_end(r);
        if (end > r->sent) {
            out_frame(r, oai_chunk(app, r, r->text + r->sent, end - r->sent, NULL, 0, 0));
            r->sent = end;
        }
        if (r->suspended && r->conn && r->out_len > r->out_off) {
            r->suspended = 0;
            MHD_resume_connection(r->conn); /* ordered by r->mu: the reader suspended it under r->mu */
        }
    }
    pthread_mutex_unlock(&r->mu);
    if (stop || r->n_tokens >= r->rq.n_predict)
        pthread_cond_signal(&app->cv); /* it ends after this step: the reaper polls soon */
    return stop;
}

/* Reaper: r ended with status; its last frames (caller holds r->mu). */
static void finish_locked(srv_app *app, srv_req *r, int status)
{
    r->ended = 1;
    r->status = status;
    if (status == MEMRA_OK && !r->stopped && r->n_tokens < r->max_tokens)
        r->stopped = 1; /* the end-of-generation token */
    if (r->stream) {
        if (status == MEMRA_OK) {
            if (r->len > r->sent)
                out_frame(r, oai_chunk(app, r, r->text + r->sent, r->len - r->sent, NULL, 0, 0));
            r->sent = r->len;
            out_frame(r, oai_chunk(app, r, NULL, 0, oai_finish_reason(r), 0, 0));
            if (r->include_usage)
                out_frame(r, oai_chunk(app, r, NULL, 0, NULL, 0, 1));
        } else {
            char msg[600];
            snprintf(msg, sizeof msg, "the request ended early: %s", status == MEMRA_E_ABORTED
                     ? "cancelled (the server is stopping)" : memra_runtime_last_error(app->rt));
            char *js = oai_error_json(status == MEMRA_E_ABORTED ? 503 : 500, msg, NULL);
            if (js) {
                out_append(r, "data: ", 6);
                out_append(r, js, strlen(js));
                out_append(r, "\n\n", 2);
            }
            free(js);
        }
        out_append(r, "data: [DONE]\n\n", 14);
    }
    if (r->suspended && r->conn) {
        r->suspended = 0;
        MHD_resume_connection(r->conn); /* ordered by r->mu, as in on_token */
    }
}

/* A suspended connection whose peer closed: recv peeks 0 bytes (EOF) or fails. */
static int client_gone(int fd)
{
    char b;
    ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static void *reaper_main(void *arg)
{
    srv_app *app = arg;
    double last_peek = 0;
    pthread_mutex_lock(&app->mu);
    while (!app->reaper_quit || app->active) {
        int soon = 0;
        double now = srv_now();
        int peek = now - last_peek > 0.05;
        if (peek)
            last_peek = now;
        for (srv_req **pp = &app->active; *pp;) {
            srv_req *r = *pp;
            int p = memra_server_poll(app->srv, r->id);
            if (p != 0) {
                int status = p == 1 ? memra_server_wait(app->srv, r->id) : p;
                *pp = r->next;
                app->n_active--;
                pthread_mutex_lock(&r->mu);
                finish_locked(app, r, status);
                pthread_mutex_unlock(&r->mu);
                srv_req_unref(r);
                continue;
            }
            pthread_mutex_lock(&r->mu);
            soon |= r->n_tokens >= r->rq.n_predict || r->stopped;
            int gone = peek && r->suspended && r->conn && r->fd >= 0 && client_gone(r->fd);
            r->client_left |= gone;
            pthread_mutex_unlock(&r->mu);
            if (gone)
                memra_server_cancel(app->srv, r->id);
            pp = &r->next;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        long ns = soon ? 500000L : 5000000L;
        ts.tv_nsec += ns;
        if (ts.tv_nsec >= 1000000000L)
            ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&app->cv, &app->mu, &ts);
    }
    pthread_mutex_unlock(&app->mu);
    return NULL;
}

/* Streamed response reader (a pool thread). */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    srv_req *r = cls;
    ssize_t n = 0;
    pthread_mutex_lock(&r->mu);
    if (r->out_len > r->out_off) {
        size_t k = r->out_len - r->out_off;
        if (k > max)
            k = max;
        memcpy(buf, r->out + r->out_off, k);
        r->out_off += k;
        if (r->out_off == r->out_len)
            r->out_off = r->out_len = 0;
        n = (ssize_t)k;
    } else if (r->ended) {
        n = MHD_CONTENT_READER_END_OF_STREAM;
    } else if (r->conn) {
        r->suspended = 1;
        MHD_suspend_connection(r->conn); /* resumed under r->mu by on_token or the reaper */
    } else {
        n = MHD_CONTENT_READER_END_WITH_ERROR;
    }
    pthread_mutex_unlock(&r->mu);
    return n;
}

static void stream_free(void *cls)
{
    srv_req_unref(cls);
}

/* ---- generation endpoints ---- */

static enum MHD_Result answer_ended(srv_app *app, struct MHD_Connection *c, srv_conn *ctx)
{
    srv_req *r = ctx->req;
    pthread_mutex_lock(&r->mu);
    int status = r->status, left = r->client_left;
    pthread_mutex_unlock(&r->mu);
    if (status == MEMRA_OK)
        return respond(app, c, ctx->ep, 200, oai_response_json(app, r), "application/json");
    char msg[600];
    if (left) /* nobody to answer: close (on_completed counts it) */
        return MHD_NO;
    if (status == MEMRA_E_ABORTED)
        return respond_error(app, c, ctx->ep, 503, "the request was cancelled: the server is stopping", NULL);
    snprintf(msg, sizeof msg, "generation failed (%s): %s", memra_status_str(status),
             memra_runtime_last_error(app->rt));
    return respond_error(app, c, ctx->ep, 500, msg, NULL);
}

static enum MHD_Result generate(srv_app *app, struct MHD_Connection *c, srv_conn *ctx)
{
    srv_err e = { 0 };
    srv_req *r = calloc(1, sizeof *r);
    if (!r)
        return respond_error(app, c, ctx->ep, 500, "out of memory", NULL);
    atomic_init(&r->refs, 1);
    pthread_mutex_init(&r->mu, NULL);
    r->app = app;
    r->ep = ctx->ep;
    r->fd = -1;
    r->created = (long)time(NULL);
    if (oai_parse(app, ctx->ep, ctx->body ? ctx->body : "", ctx->len, r, &e)) {
        srv_req_unref(r);
        return respond_error(app, c, ctx->ep, e.status, e.msg, e.param);
    }
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    r->fd = ci ? ci->connect_fd : -1;
    r->conn = c;
    snprintf(r->rid, sizeof r->rid, "%s-%llu", ctx->ep == SRV_EP_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)atomic_fetch_add(&app->next_rid, 1));

    pthread_mutex_lock(&app->mu);
    const int limit = memra_runtime_n_seq(app->rt) + app->opt.max_queue;
    if (app->stopping || app->n_active >= limit) {
        int stopping = app->stopping, n = app->n_active;
        pthread_mutex_unlock(&app->mu);
        srv_req_unref(r);
        char msg[256];
        if (stopping)
            return respond_error(app, c, ctx->ep, 503, "the server is stopping", NULL);
        snprintf(msg, sizeof msg, "the server is busy: %d requests in flight, the limit is %d (%d slots + "
                 "--max-queue %d); retry later", n, limit, memra_runtime_n_seq(app->rt), app->opt.max_queue);
        return respond_error(app, c, ctx->ep, 429, msg, NULL);
    }
    r->t_submit = r->t_last = srv_now();
    atomic_fetch_add(&r->refs, 1); /* the active list's */
    int rc = memra_server_submit(app->srv, &r->rq, on_token, r, &r->id);
    if (rc != MEMRA_OK) {
        pthread_mutex_unlock(&app->mu);
        char msg[600];
        snprintf(msg, sizeof msg, "the scheduler refused the request: %s", memra_last_error());
        atomic_fetch_sub(&r->refs, 1);
        srv_req_unref(r);
        return respond_error(app, c, ctx->ep, rc == MEMRA_E_INVAL ? 400 : 503, msg, NULL);
    }
    r->next = app->active;
    app->active = r;
    app->n_active++;
    pthread_mutex_unlock(&app->mu);
    srv_metrics_prompt(&app->metrics, r->n_prompt);
    ctx->req = r; /* the connection's reference */

    if (r->stream) {
        pthread_mutex_lock(&r->mu);
        if (r->ep == SRV_EP_CHAT)
            out_frame(r, oai_chunk(app, r, "", 0, NULL, 1, 0));
        pthread_mutex_unlock(&r->mu);
        struct MHD_Response *res = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, r,
                                                                     stream_free);
        if (!res) {
            memra_server_cancel(app->srv, r->id);
            return respond_error(app, c, ctx->ep, 500, "out of memory", NULL);
        }
        atomic_fetch_add(&r->refs, 1); /* the response's, dropped by stream_free */
        MHD_add_response_header(res, "Content-Type", "text/event-stream");
        MHD_add_response_header(res, "Cache-Control", "no-cache");
        enum MHD_Result ok = MHD_queue_response(c, MHD_HTTP_OK, res);
        MHD_destroy_response(res);
        srv_metrics_request(&app->metrics, ctx->ep, 200);
        return ok;
    }
    pthread_mutex_lock(&r->mu);
    if (r->ended) {
        pthread_mutex_unlock(&r->mu);
        return answer_ended(app, c, ctx);
    }
    r->suspended = 1;
    MHD_suspend_connection(c); /* resumed by the reaper when the request ends */
    pthread_mutex_unlock(&r->mu);
    return MHD_YES;
}

/* ---- routing ---- */

static int route(const char *url)
{
    static const char *paths[] = { "/v1/completions", "/v1/chat/completions", "/v1/models", "/health", "/metrics" };
    for (int i = 0; i < SRV_EP_OTHER; i++)
        if (!strcmp(url, paths[i]))
            return i;
    return SRV_EP_OTHER;
}

/* Constant-time comparison of the Authorization header with "Bearer KEY". */
static int key_ok(const srv_app *app, struct MHD_Connection *c)
{
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    const char *key = app->opt.api_key;
    if (!h || strncmp(h, "Bearer ", 7))
        return 0;
    h += 7;
    size_t hl = strlen(h), kl = strlen(key);
    unsigned char diff = (unsigned char)(hl != kl);
    for (size_t i = 0; i < kl; i++)
        diff |= (unsigned char)(key[i] ^ (i < hl ? h[i] : 0));
    return diff == 0;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                 const char *version, const char *upload_data, size_t *upload_data_size,
                                 void **con_cls)
{
    (void)version;
    srv_app *app = cls;
    srv_conn *ctx = *con_cls;
    if (!ctx) { /* the headers are in: route, method, key, declared size */
        if (!(ctx = calloc(1, sizeof *ctx)))
            return MHD_NO;
        *con_cls = ctx;
        ctx->ep = route(url);
        const int post = ctx->ep == SRV_EP_COMPLETIONS || ctx->ep == SRV_EP_CHAT;
        char msg[600];
        if (ctx->ep == SRV_EP_OTHER) {
            snprintf(msg, sizeof msg, "unknown endpoint %s %.200s: the server answers POST /v1/completions, POST "
                     "/v1/chat/completions, GET /v1/models, GET /health, GET /metrics", method, url);
            return respond_error(app, c, ctx->ep, 404, msg, NULL);
        }
        if (strcmp(method, post ? "POST" : "GET")) {
            snprintf(msg, sizeof msg, "%s does not take %s: use %s", url, method, post ? "POST" : "GET");
            return respond_error(app, c, ctx->ep, 405, msg, NULL);
        }
        if (app->opt.api_key && (post || ctx->ep == SRV_EP_MODELS) && !key_ok(app, c))
            return respond_error(app, c, ctx->ep, 401, "invalid or missing API key: send 'Authorization: Bearer "
                                 "KEY' with the server's --api-key", NULL);
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > SRV_BODY_MAX) {
            snprintf(msg, sizeof msg, "the request body is %.30s bytes: the limit is %u", cl, SRV_BODY_MAX);
            return respond_error(app, c, ctx->ep, 413, msg, NULL);
        }
        return MHD_YES;
    }
    if (*upload_data_size) { /* a piece of the body */
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (ctx->err_status)
            return MHD_YES;
        if (ctx->len + n > SRV_BODY_MAX) {
            ctx->err_status = 413;
            return MHD_YES;
        }
        if (ctx->len + n + 1 > ctx->cap) {
            size_t cap = ctx->cap ? ctx->cap * 2 : 4096;
            while (cap < ctx->len + n + 1)
                cap *= 2;
            char *b = realloc(ctx->body, cap);
            if (!b) {
                ctx->err_status = 500;
                return MHD_YES;
            }
            ctx->body = b;
            ctx->cap = cap;
        }
        memcpy(ctx->body + ctx->len, upload_data, n);
        ctx->len += n;
        ctx->body[ctx->len] = 0;
        return MHD_YES;
    }
    if (ctx->req) { /* resumed: the request ended */
        pthread_mutex_lock(&ctx->req->mu);
        int ended = ctx->req->ended;
        if (!ended) {
            ctx->req->suspended = 1;
            MHD_suspend_connection(c);
        }
        pthread_mutex_unlock(&ctx->req->mu);
        return ended ? answer_ended(app, c, ctx) : MHD_YES;
    }
    if (ctx->err_status == 413) {
        char msg[128];
        snprintf(msg, sizeof msg, "the request body is larger than the limit of %u bytes", SRV_BODY_MAX);
        return respond_error(app, c, ctx->ep, 413, msg, NULL);
    }
    if (ctx->err_status)
        return respond_error(app, c, ctx->ep, 500, "out of memory", NULL);
    switch (ctx->ep) {
    case SRV_EP_HEALTH:
        return respond(app, c, ctx->ep, 200, strdup("{\"status\":\"ok\"}"), "application/json");
    case SRV_EP_METRICS:
        return respond(app, c, ctx->ep, 200, srv_metrics_render(app), "text/plain; version=0.0.4");
    case SRV_EP_MODELS: {
        cJSON *root = cJSON_CreateObject(), *data = cJSON_AddArrayToObject(root, "data"), *m = cJSON_CreateObject();
        cJSON_AddStringToObject(root, "object", "list");
        cJSON_AddItemToArray(data, m);
        cJSON_AddStringToObject(m, "id", app->model_name);
        cJSON_AddStringToObject(m, "object", "model");
        cJSON_AddNumberToObject(m, "created", (double)app->started);
        cJSON_AddStringToObject(m, "owned_by", "memra");
        cJSON_AddNumberToObject(m, "context_length", memra_runtime_n_ctx(app->rt));
        char *s = cJSON_PrintUnformatted(root);
        cJSON_Delete(root);
        return respond(app, c, ctx->ep, 200, s, "application/json");
    }
    default:
        return generate(app, c, ctx);
    }
}

/* libmicrohttpd is done with the connection (answered, or the client went away). */
static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    (void)c;
    (void)toe;
    srv_app *app = cls;
    srv_conn *ctx = *con_cls;
    if (!ctx)
        return;
    srv_req *r = ctx->req;
    if (r) {
        pthread_mutex_lock(&r->mu);
        r->conn = NULL;
        int running = !r->ended;
        r->client_left |= running;
        pthread_mutex_unlock(&r->mu);
        if (running) /* the client went away mid-request: free its slot */
            memra_server_cancel(app->srv, r->id);
        if (!r->stream && r->client_left) /* 499: "client closed request"; a stream counted its 200 */
            srv_metrics_request(&app->metrics, ctx->ep, 499);
        srv_req_unref(r);
    }
    free(ctx->body);
    free(ctx);
    *con_cls = NULL;
}

int srv_http_start(srv_app *app)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ITC;
    struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, app->opt.host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)app->opt.port);
    } else if (inet_pton(AF_INET6, app->opt.host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)app->opt.port);
        flags |= MHD_USE_IPv6;
    } else {
        fprintf(stderr, "memra-server: --host %s: expected an IPv4 or IPv6 address (e.g. 127.0.0.1, 0.0.0.0, ::1)\n",
                app->opt.host);
        return -1;
    }
    pthread_mutex_init(&app->mu, NULL);
    pthread_cond_init(&app->cv, NULL);
    if (pthread_create(&app->reaper, NULL, reaper_main, app)) {
        fprintf(stderr, "memra-server: cannot start the reaper thread\n");
        return -1;
    }
    app->daemon = MHD_start_daemon(flags, (uint16_t)app->opt.port, NULL, NULL, on_access, app,
                                   MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                                   MHD_OPTION_THREAD_POOL_SIZE, (unsigned)app->opt.threads,
                                   MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 * 1024),
                                   MHD_OPTION_CONNECTION_LIMIT, (unsigned)1024,
                                   MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)120,
                                   MHD_OPTION_NOTIFY_COMPLETED, on_completed, app,
                                   MHD_OPTION_END);
    if (!app->daemon) {
        fprintf(stderr, "memra-server: cannot listen on %s port %d (in use, or not an address of this machine)\n",
                app->opt.host, app->opt.port);
        pthread_mutex_lock(&app->mu);
        app->reaper_quit = 1;
        pthread_cond_signal(&app->cv);
        pthread_mutex_unlock(&app->mu);
        pthread_join(app->reaper, NULL);
        return -1;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(app->daemon, MHD_DAEMON_INFO_BIND_PORT);
    int port = di ? di->port : app->opt.port;
    printf("listening on http://%s%s%s:%d\n", flags & MHD_USE_IPv6 ? "[" : "", app->opt.host,
           flags & MHD_USE_IPv6 ? "]" : "", port);
    fflush(stdout);
    return 0;
}

void srv_http_stop(srv_app *app)
{
    MHD_socket ls = MHD_quiesce_daemon(app->daemon); /* no new connections */
    if (ls != MHD_INVALID_SOCKET)
        close(ls);
    pthread_mutex_lock(&app->mu);
    app->stopping = 1;
    for (srv_req *r = app->active; r; r = r->next)
        memra_server_cancel(app->srv, r->id);
    app->reaper_quit = 1; /* the reaper leaves once every request has ended and its connection is resumed */
    pthread_cond_signal(&app->cv);
    pthread_mutex_unlock(&app->mu);
    pthread_join(app->reaper, NULL);
    /* let the resumed connections send their last bytes (bounded: 2 s) */
    for (int i = 0; i < 200; i++) {
        const union MHD_DaemonInfo *di = MHD_get_daemon_info(app->daemon, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
        if (!di || di->num_connections == 0)
            break;
        usleep(10000);
    }
    MHD_stop_daemon(app->daemon);
    app->daemon = NULL;
    pthread_cond_destroy(&app->cv);
    pthread_mutex_destroy(&app->mu);
}
