/* memra-server: an OpenAI-compatible HTTP server on the serving scheduler (memra_server).
 *   memra-server -m MODEL.gguf [--host 127.0.0.1] [--port 8080] [--stages N] ...
 *   mpirun -np P memra-server -m MODEL.gguf --stages N ...   (stages in P processes: docs/scale-out.md)
 * stdout: "listening on http://HOST:PORT" once it serves; errors go to stderr. Exit: 0 after SIGINT/SIGTERM
 * (stops accepting, cancels the requests in flight, frees everything), 1 on a start-up failure, 2 bad usage.
 * SIGINT and SIGTERM are blocked in every thread and taken by main with sigtimedwait. Under mpirun rank 0 serves
 * HTTP and every other rank serves its stages (memra_mpi_serve) until rank 0's memra_mpi_finish, which a clean
 * stop sends with status 0 and a failure with its status (ending every rank); rank 0 also stops, exit 1, when
 * another rank is dead or silent (memra_runtime_check, polled each 250 ms). docs/server.md. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include "srv.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: memra-server -m MODEL.gguf [options]\n"
            "  -m, --model PATH        GGUF model\n"
            "      --host ADDR         address to listen on (default 127.0.0.1; 0.0.0.0 for every interface)\n"
            "      --port P            TCP port (default 8080; 0 = a free port, printed)\n"
            "      --stages N          pipeline stages, layers cut evenly (default 1)\n"
            "      --devices D0,D1,..  device ordinal of each stage (default: all on device 0)\n"
            "      --seqs S            sequence slots: requests decoding at once (default 4)\n"
            "      --ctx C             positions per sequence: prompt + completion (default 2048, at most the "
            "model's)\n"
            "      --api-key KEY       ask 'Authorization: Bearer KEY' on /v1/* (default: no key)\n"
            "      --max-queue Q       requests waiting for a slot before 429 (default 256)\n"
            "      --threads T         HTTP threads (default 4)\n"
            "      --trace FILE        record a trace of the whole run (docs/trace.md), written at shutdown\n"
            "      --chat-template T   the chat template of /v1/chat/completions: a name (chatml, llama3, gemma)\n"
            "                          or template text (default: the model's)\n"
            "  -h, --help              this text\n"
            "Endpoints: POST /v1/completions, POST /v1/chat/completions, GET /v1/models, GET /health, GET /metrics\n");
}

static int usage_error(const char *flag, const char *val, const char *allowed)
{
    if (val)
        fprintf(stderr, "memra-server: %s %s: %s\n", flag, val, allowed);
    else
        fprintf(stderr, "memra-server: %s needs a value after it: %s\n", flag, allowed);
    fprintf(stderr, "see memra-server --help\n");
    return 2;
}

static int parse_int(const char *v, long lo, long hi, int *out)
{
    char *end;
    errno = 0;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || !*v || *end || errno || x < lo || x > hi)
        return -1;
    *out = (int)x;
    return 0;
}

/* Fill o from argv: 0, 1 (-h printed), or 2 after printing what was wrong. */
static int parse_args(int argc, char **argv, srv_opts *o)
{
    *o = (srv_opts){ .host = "127.0.0.1", .port = 8080, .stages = 1, .seqs = 4, .ctx = 2048, .max_queue = 256,
                     .threads = 4 };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 1;
        }
        i++;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!v)
                return usage_error(a, v, "a GGUF file");
            o->model = v;
        } else if (!strcmp(a, "--host")) {
            unsigned char addr[sizeof(struct in6_addr)];
            if (!v || (inet_pton(AF_INET, v, addr) != 1 && inet_pton(AF_INET6, v, addr) != 1))
                return usage_error(a, v, "expected an IPv4 or IPv6 address (e.g. 127.0.0.1, 0.0.0.0, ::1)");
            o->host = v;
        } else if (!strcmp(a, "--port")) {
            if (parse_int(v, 0, 65535, &o->port))
                return usage_error(a, v, "expected a port in 0..65535 (0 = a free port)");
        } else if (!strcmp(a, "--stages")) {
            if (parse_int(v, 1, MEMRA_MAX_STAGES, &o->stages))
                return usage_error(a, v, "expected a stage count in 1..64");
        } else if (!strcmp(a, "--seqs")) {
            if (parse_int(v, 1, 4096, &o->seqs))
                return usage_error(a, v, "expected a slot count in 1..4096");
        } else if (!strcmp(a, "--ctx")) {
            if (parse_int(v, 2, 1 << 20, &o->ctx))
                return usage_error(a, v, "expected a context length in 2..1048576");
        } else if (!strcmp(a, "--max-queue")) {
            if (parse_int(v, 0, 1 << 20, &o->max_queue))
                return usage_error(a, v, "expected a request count in 0..1048576");
        } else if (!strcmp(a, "--threads")) {
            if (parse_int(v, 1, 256, &o->threads))
                return usage_error(a, v, "expected a thread count in 1..256");
        } else if (!strcmp(a, "--trace")) {
            if (!v || !*v)
                return usage_error(a, v, "a file to write the trace to");
            o->trace = v;
        } else if (!strcmp(a, "--chat-template")) {
            if (!v || !*v)
                return usage_error(a, v, "a template name (chatml, llama3, gemma) or template text");
            o->chat_template = v;
        } else if (!strcmp(a, "--api-key")) {
            if (!v || !*v)
                return usage_error(a, v, "a non-empty key");
            o->api_key = v;
        } else if (!strcmp(a, "--devices")) {
            o->n_devices = 0;
            for (const char *c = v; c && *c;) {
                char *end;
                long d = strtol(c, &end, 10);
                if (end == c || d < 0 || d >= 64 || (*end && *end != ',') || o->n_devices == MEMRA_MAX_STAGES)
                    return usage_error(a, v, "expected a comma-separated list of device ordinals (0..63), one per "
                                       "stage");
                o->devices[o->n_devices++] = (int)d;
                c = *end ? end + 1 : end;
            }
            if (!o->n_devices)
                return usage_error(a, v, "expected a comma-separated list of device ordinals, one per stage");
        } else {
            fprintf(stderr, "memra-server: unknown option '%s'\nsee memra-server --help\n", a);
            return 2;
        }
    }
    if (!o->model) {
        fprintf(stderr, "memra-server: no model given: -m MODEL.gguf is required\nsee memra-server --help\n");
        return 2;
    }
    if (o->chat_template) { /* a template of an unknown format is refused here, not at the first chat request */
        const memra_chat_message probe = { .role = "user", .content = "hi" };
        size_t len = 0;
        const int r = memra_chat_apply(NULL, o->chat_template, &probe, 1, 1, NULL, 0, &len);
        if (r != MEMRA_OK && r != MEMRA_E_FULL)
            return usage_error("--chat-template", o->chat_template, memra_last_error());
    }
    if (o->n_devices && o->n_devices != o->stages) {
        fprintf(stderr, "memra-server: --devices gives %d devices for --stages %d: give one device per stage\n"
                        "see memra-server --help\n", o->n_devices, o->stages);
        return 2;
    }
    return 0;
}

int main(int argc, char **argv)
{
    static srv_app app; /* shared with the handler threads until srv_http_stop returns */
    /* SIGINT/SIGTERM go to main's sigwait only (blocked before MPI and the HTTP start their threads, which
     * inherit the mask); a write to a closed socket is an error, not a signal */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    /* under mpirun: rank 0 is the server, every other rank serves its stages (docs/scale-out.md); a rank > 0
     * keeps SIGINT/SIGTERM blocked: mpirun turns Ctrl-C into SIGTERM to every rank, and rank 0's clean stop
     * (memra_mpi_finish) ends the others */
    const int rank = memra_mpi_init(&argc, &argv);
    if (rank < 0) {
        fprintf(stderr, "memra-server: %s\n", memra_last_error());
        return 2;
    }
    if (rank > 0) {
        int sr = memra_mpi_serve();
        if (sr != MEMRA_OK)
            fprintf(stderr, "memra-server (rank %d): %s\n", rank, memra_last_error());
        memra_mpi_finish(sr);
        return sr != MEMRA_OK;
    }
    int rc = parse_args(argc, argv, &app.opt);
    if (rc) {
        memra_mpi_finish(MEMRA_OK); /* the other ranks leave their serve loop; the exit status says the rest */
        return rc == 1 ? 0 : rc;
    }

    srv_opts *o = &app.opt;
    rc = 1;
    srv_metrics_init(&app.metrics);
    atomic_init(&app.next_rid, 1);
    app.started = (long)time(NULL);
    app.t0 = srv_now();
    const char *base = strrchr(o->model, '/');
    snprintf(app.model_name, sizeof app.model_name, "%s", base ? base + 1 : o->model);
    if (!(app.model = memra_model_load(o->model, NULL))) {
        fprintf(stderr, "memra-server: %s\n", memra_last_error());
        goto out;
    }
    if (!memra_model_has_tokenizer(app.model)) {
        fprintf(stderr, "memra-server: %s has no tokenizer (tokenizer.ggml.* keys); the server needs one\n", o->model);
        goto out;
    }
    if (memra_model_n_ctx_train(app.model) > 0 && o->ctx > memra_model_n_ctx_train(app.model))
        o->ctx = memra_model_n_ctx_train(app.model);
    memra_runtime_params rp = memra_runtime_default_params();
    rp.stages = o->stages;
    rp.n_devices = o->stages > 1 ? o->n_devices : 0;
    memcpy(rp.devices, o->devices, sizeof rp.devices);
    rp.n_seq = o->seqs;
    rp.n_ctx = o->ctx;
    if (!(app.rt = memra_runtime_create(app.model, &rp))) {
        fprintf(stderr, "memra-server: %s\n", memra_last_error());
        rc = memra_last_status() == MEMRA_E_INVAL ? 2 : 1;
        goto out;
    }
    if (o->trace && memra_runtime_trace_start(app.rt, o->trace) != MEMRA_OK) {
        fprintf(stderr, "memra-server: --trace %s: %s\n", o->trace, memra_last_error());
        goto out;
    }
    if (!(app.srv = memra_server_create(app.rt, NULL))) {
        fprintf(stderr, "memra-server: %s\n", memra_last_error());
        goto out;
    }
    fprintf(stderr, "memra-server: %s on %s, %d stage%s, %d slots x %d positions\n", app.model_name,
            memra_runtime_backend(app.rt), memra_runtime_n_stages(app.rt), memra_runtime_n_stages(app.rt) > 1 ? "s" : "",
            memra_runtime_n_seq(app.rt), memra_runtime_n_ctx(app.rt));
    if (srv_http_start(&app))
        goto out;
    /* a signal, or (under mpirun) another rank dead or silent: every later step would fail, so stop serving */
    int sig = -1;
    while (sig < 0) {
        const struct timespec tick = {0, 250000000};
        sig = sigtimedwait(&sigs, NULL, &tick);
        if (sig < 0 && memra_runtime_check(app.rt) != MEMRA_OK)
            break;
    }
    if (sig < 0)
        fprintf(stderr, "memra-server: %s: stopping\n", memra_runtime_last_error(app.rt));
    else
        fprintf(stderr, "memra-server: %s: stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    srv_http_stop(&app);
    rc = sig < 0;
out:
    memra_server_free(app.srv);
    if (o->trace && app.rt && memra_runtime_trace_stop(app.rt) != MEMRA_OK) /* every step drained first */
        fprintf(stderr, "memra-server: --trace %s: %s\n", o->trace, memra_last_error()), rc = rc ? rc : 1;
    memra_runtime_free(app.rt);
    memra_model_free(app.model);
    memra_mpi_finish(rc); /* under mpirun: every rank leaves with rc (a failure ends them all) */
    return rc;
}
