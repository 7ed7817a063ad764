/* A server-style embed: several client threads share one runtime through a memra_server. Each client submits
 * its request (a prompt, greedy, up to n_predict tokens) and waits for it; the server's scheduler packs the
 * requests in flight into micro-batches (one row per decoding request), and each token reaches its client's
 * callback as it is made. Results are printed when every client is done.
 *   example-server MODEL.gguf [n_clients=4] [n_predict=16]
 * Exit 0 when every client produced n_predict tokens (or stopped at end of generation). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "memra/memra.h"

static const char *PROMPTS[] = {"The capital of France is", "Once upon a time", "The three primary colors are",
                                "def fibonacci(n):", "My favourite food is", "In the beginning"};

typedef struct client {
    memra_server *srv;
    const memra_model *model;
    int id, n_predict, n_gen, status;
    char text[4096];
    int len;
    char err[MEMRA_ERR_MAX];
} client;

/* Runs on the server's scheduler thread: append the piece (the client reads text only after its wait). */
static int on_token(void *user, int64_t id, memra_token token, const char *piece, int n_piece)
{
    (void)id, (void)token;
    client *c = user;
    if (piece && c->len + n_piece < (int)sizeof c->text) {
        memcpy(c->text + c->len, piece, (size_t)n_piece);
        c->len += n_piece;
        c->text[c->len] = '\0';
    }
    return 0;
}

static int run_client(client *c)
{
    const char *prompt = PROMPTS[c->id % (int)(sizeof PROMPTS / sizeof *PROMPTS)];
    memra_token toks[256];
    int n = 0, r;
    if ((r = memra_tokenize(c->model, prompt, (int)strlen(prompt), 1, 0, toks, 256, &n)) != 0)
        return r;
    c->len = snprintf(c->text, sizeof c->text, "%s", prompt);
    memra_request rq = {.prompt = toks, .n_prompt = n, .n_predict = c->n_predict,
                        .sampling = memra_sampler_greedy_params(), .stop_at_eog = 1};
    int64_t id;
    if ((r = memra_server_submit(c->srv, &rq, on_token, c, &id)) != 0) /* returns at once */
        return r;
    r = memra_server_wait(c->srv, id); /* the tokens and the text are final once it returns */
    c->n_gen = rq.n_out;
    return r;
}

static void *client_main(void *arg)
{
    client *c = arg;
    c->status = run_client(c);
    if (c->status)
        snprintf(c->err, sizeof c->err, "%s", memra_last_error()); /* this thread's last error */
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return fprintf(stderr, "usage: %s MODEL.gguf [n_clients] [n_predict]\n", argv[0]), 2;
    int n_clients = argc > 2 ? atoi(argv[2]) : 4, n_predict = argc > 3 ? atoi(argv[3]) : 16;
    if (n_clients < 1 || n_clients > 64 || n_predict < 1)
        return fprintf(stderr, "n_clients must be 1..64 and n_predict >= 1\n"), 2;
    memra_model *model = memra_model_load(argv[1], NULL);
    memra_runtime_params rp = memra_runtime_default_params();
    rp.n_seq = n_clients; /* one KV slot per client: all in flight at once */
    rp.n_ctx = 256;
    memra_runtime *rt = model ? memra_runtime_create(model, &rp) : NULL;
    memra_server *srv = rt ? memra_server_create(rt, NULL) : NULL;
    if (!srv)
        return fprintf(stderr, "%s\n", memra_last_error()), memra_runtime_free(rt), memra_model_free(model), 1;
    client *cs = calloc((size_t)n_clients, sizeof *cs);
    pthread_t *th = calloc((size_t)n_clients, sizeof *th);
    for (int i = 0; i < n_clients; i++) {
        cs[i] = (client){.srv = srv, .model = model, .id = i, .n_predict = n_predict};
        pthread_create(&th[i], NULL, client_main, &cs[i]);
    }
    int failed = 0;
    for (int i = 0; i < n_clients; i++) {
        pthread_join(th[i], NULL);
        if (cs[i].status)
            failed++, printf("client %d: FAILED %s\n", i, cs[i].err);
        else
            printf("client %d: %d tokens: %s\n", i, cs[i].n_gen, cs[i].text);
    }
    memra_server_stats st;
    memra_server_get_stats(srv, &st);
    printf("server: %d stages, %d micro-batches, %llu steps of %llu rows (the largest %d)\n",
           memra_runtime_n_stages(rt), st.micro_batches, (unsigned long long)st.steps, (unsigned long long)st.rows,
           st.max_step_rows);
    free(cs);
    free(th);
    memra_server_free(srv);
    memra_runtime_free(rt);
    memra_model_free(model);
    return failed ? 1 : 0;
}
